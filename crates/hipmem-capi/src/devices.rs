//! Devices: `hipGetDeviceProperties` (HIP 6's `hipDeviceProp_tR0600`),
//! `hipDeviceGetAttribute`, `hipDeviceGetName`, `hipDeviceGet`,
//! `hipDeviceTotalMem`, `hipDeviceComputeCapability`, `hipDriverGetVersion`,
//! `hipRuntimeGetVersion` and `hipDeviceGetStreamPriorityRange`.

use std::ffi::{c_char, c_int};

use hipmem_rs::{DeviceAttribute as A, Error, Result, Runtime};

use crate::types::*;
use crate::{call, current_device, device_ordinal, non_null, rt};

/// What a `hipDeviceAttribute_t` asks for.
enum Answer {
    /// One backend attribute.
    Attr(A),
    /// `hipDeviceAttributeTotalGlobalMem` (from the device's properties).
    TotalGlobalMem,
    /// A HIP attribute whose answer is fixed by what hipmem is.
    Fixed(c_int),
    /// Not a scalar hipmem can report (a multi-dimensional limit, an AMD
    /// register address, a Windows identifier): InvalidValue, as HIP on NVIDIA.
    No(&'static str),
}

/// The answer to each HIP attribute (HIP 6's enum).
fn answer(attr: hipDeviceAttribute_t) -> Option<Answer> {
    use Answer::*;
    Some(match attr {
        hipDeviceAttributeEccEnabled => Attr(A::EccEnabled),
        hipDeviceAttributeAccessPolicyMaxWindowSize => Attr(A::MaxAccessPolicyWindowSize),
        hipDeviceAttributeAsyncEngineCount => Attr(A::AsyncEngineCount),
        hipDeviceAttributeCanMapHostMemory => Attr(A::CanMapHostMemory),
        hipDeviceAttributeCanUseHostPointerForRegisteredMem => Attr(A::CanUseHostPointerForRegisteredMem),
        hipDeviceAttributeClockRate => Attr(A::ClockRate),
        hipDeviceAttributeComputeMode => Attr(A::ComputeMode),
        hipDeviceAttributeComputePreemptionSupported => Attr(A::ComputePreemptionSupported),
        hipDeviceAttributeConcurrentKernels => Attr(A::ConcurrentKernels),
        hipDeviceAttributeConcurrentManagedAccess => Attr(A::ConcurrentManagedAccess),
        hipDeviceAttributeCooperativeLaunch => Attr(A::CooperativeLaunch),
        hipDeviceAttributeCooperativeMultiDeviceLaunch => Attr(A::CooperativeMultiDeviceLaunch),
        hipDeviceAttributeDeviceOverlap => Attr(A::GpuOverlap),
        hipDeviceAttributeDirectManagedMemAccessFromHost => Attr(A::DirectManagedMemAccessFromHost),
        hipDeviceAttributeGlobalL1CacheSupported => Attr(A::GlobalL1CacheSupported),
        hipDeviceAttributeHostNativeAtomicSupported => Attr(A::HostNativeAtomicSupported),
        hipDeviceAttributeIntegrated => Attr(A::Integrated),
        hipDeviceAttributeIsMultiGpuBoard => Attr(A::MultiGpuBoard),
        hipDeviceAttributeKernelExecTimeout => Attr(A::KernelExecTimeout),
        hipDeviceAttributeL2CacheSize => Attr(A::L2CacheSize),
        hipDeviceAttributeLocalL1CacheSupported => Attr(A::LocalL1CacheSupported),
        hipDeviceAttributeLuid | hipDeviceAttributeLuidDeviceNodeMask => No("a Windows identifier"),
        hipDeviceAttributeComputeCapabilityMajor => Attr(A::ComputeCapabilityMajor),
        hipDeviceAttributeManagedMemory => Attr(A::ManagedMemory),
        hipDeviceAttributeMaxBlocksPerMultiProcessor => Attr(A::MaxBlocksPerMultiprocessor),
        hipDeviceAttributeMaxBlockDimX => Attr(A::MaxBlockDimX),
        hipDeviceAttributeMaxBlockDimY => Attr(A::MaxBlockDimY),
        hipDeviceAttributeMaxBlockDimZ => Attr(A::MaxBlockDimZ),
        hipDeviceAttributeMaxGridDimX => Attr(A::MaxGridDimX),
        hipDeviceAttributeMaxGridDimY => Attr(A::MaxGridDimY),
        hipDeviceAttributeMaxGridDimZ => Attr(A::MaxGridDimZ),
        hipDeviceAttributeMaxSurface1D => Attr(A::MaxSurface1DWidth),
        hipDeviceAttributeMaxSurfaceCubemap => Attr(A::MaxSurfaceCubemapWidth),
        hipDeviceAttributeMaxTexture1DWidth => Attr(A::MaxTexture1DWidth),
        hipDeviceAttributeMaxTexture1DLinear => Attr(A::MaxTexture1DLinearWidth),
        hipDeviceAttributeMaxTexture1DMipmap => Attr(A::MaxTexture1DMipmappedWidth),
        hipDeviceAttributeMaxTexture2DWidth => Attr(A::MaxTexture2DWidth),
        hipDeviceAttributeMaxTexture2DHeight => Attr(A::MaxTexture2DHeight),
        hipDeviceAttributeMaxTexture3DWidth => Attr(A::MaxTexture3DWidth),
        hipDeviceAttributeMaxTexture3DHeight => Attr(A::MaxTexture3DHeight),
        hipDeviceAttributeMaxTexture3DDepth => Attr(A::MaxTexture3DDepth),
        hipDeviceAttributeMaxTextureCubemap => Attr(A::MaxTextureCubemapWidth),
        hipDeviceAttributeMaxSurface1DLayered
        | hipDeviceAttributeMaxSurface2D
        | hipDeviceAttributeMaxSurface2DLayered
        | hipDeviceAttributeMaxSurface3D
        | hipDeviceAttributeMaxSurfaceCubemapLayered
        | hipDeviceAttributeMaxTexture1DLayered
        | hipDeviceAttributeMaxTexture2DGather
        | hipDeviceAttributeMaxTexture2DLayered
        | hipDeviceAttributeMaxTexture2DLinear
        | hipDeviceAttributeMaxTexture2DMipmap
        | hipDeviceAttributeMaxTexture3DAlt
        | hipDeviceAttributeMaxTextureCubemapLayered
        | hipDeviceAttributeMaxThreadsDim => {
            No("a limit of several dimensions (read it from hipDeviceProp_t)")
        }
        hipDeviceAttributeMaxThreadsPerBlock => Attr(A::MaxThreadsPerBlock),
        hipDeviceAttributeMaxThreadsPerMultiProcessor => Attr(A::MaxThreadsPerMultiprocessor),
        hipDeviceAttributeMaxPitch => Attr(A::MaxPitch),
        hipDeviceAttributeMemoryBusWidth => Attr(A::GlobalMemoryBusWidth),
        hipDeviceAttributeMemoryClockRate => Attr(A::MemoryClockRate),
        hipDeviceAttributeComputeCapabilityMinor => Attr(A::ComputeCapabilityMinor),
        hipDeviceAttributeMultiGpuBoardGroupID => Attr(A::MultiGpuBoardGroupId),
        hipDeviceAttributeMultiprocessorCount | hipDeviceAttributePhysicalMultiProcessorCount => {
            Attr(A::MultiprocessorCount)
        }
        hipDeviceAttributeUnused1 | hipDeviceAttributeUnused2 => No("an unused value"),
        hipDeviceAttributePageableMemoryAccess => Attr(A::PageableMemoryAccess),
        hipDeviceAttributePageableMemoryAccessUsesHostPageTables => {
            Attr(A::PageableMemoryAccessUsesHostPageTables)
        }
        hipDeviceAttributePciBusId => Attr(A::PciBusId),
        hipDeviceAttributePciDeviceId => Attr(A::PciDeviceId),
        hipDeviceAttributePciDomainID => Attr(A::PciDomainId),
        hipDeviceAttributePersistingL2CacheMaxSize => Attr(A::MaxPersistingL2CacheSize),
        hipDeviceAttributeMaxRegistersPerBlock => Attr(A::MaxRegistersPerBlock),
        hipDeviceAttributeMaxRegistersPerMultiprocessor => Attr(A::MaxRegistersPerMultiprocessor),
        hipDeviceAttributeReservedSharedMemPerBlock => Attr(A::ReservedSharedMemoryPerBlock),
        hipDeviceAttributeMaxSharedMemoryPerBlock => Attr(A::MaxSharedMemoryPerBlock),
        hipDeviceAttributeSharedMemPerBlockOptin => Attr(A::MaxSharedMemoryPerBlockOptin),
        hipDeviceAttributeSharedMemPerMultiprocessor | hipDeviceAttributeMaxSharedMemoryPerMultiprocessor => {
            Attr(A::MaxSharedMemoryPerMultiprocessor)
        }
        hipDeviceAttributeSingleToDoublePrecisionPerfRatio => Attr(A::SingleToDoublePrecisionPerfRatio),
        hipDeviceAttributeStreamPrioritiesSupported => Attr(A::StreamPrioritiesSupported),
        hipDeviceAttributeSurfaceAlignment => Attr(A::SurfaceAlignment),
        hipDeviceAttributeTccDriver => Attr(A::TccDriver),
        hipDeviceAttributeTextureAlignment => Attr(A::TextureAlignment),
        hipDeviceAttributeTexturePitchAlignment => Attr(A::TexturePitchAlignment),
        hipDeviceAttributeTotalConstantMemory => Attr(A::TotalConstantMemory),
        hipDeviceAttributeTotalGlobalMem => TotalGlobalMem,
        hipDeviceAttributeUnifiedAddressing => Attr(A::UnifiedAddressing),
        hipDeviceAttributeWarpSize => Attr(A::WarpSize),
        hipDeviceAttributeMemoryPoolsSupported => Attr(A::MemoryPoolsSupported),
        hipDeviceAttributeVirtualMemoryManagementSupported => Attr(A::VirtualMemoryManagementSupported),
        hipDeviceAttributeHostRegisterSupported => Attr(A::HostRegisterSupported),
        hipDeviceAttributeMemoryPoolSupportedHandleTypes => Attr(A::MemoryPoolSupportedHandleTypes),
        // AMD's own attributes: the timer of clock() runs at the core clock
        // on NVIDIA and on the emulation; hipmem has no cooperative
        // multi-device launches, stream wait-value operations or images.
        hipDeviceAttributeClockInstructionRate => Attr(A::ClockRate),
        hipDeviceAttributeCooperativeMultiDeviceUnmatchedFunc
        | hipDeviceAttributeCooperativeMultiDeviceUnmatchedGridDim
        | hipDeviceAttributeCooperativeMultiDeviceUnmatchedBlockDim
        | hipDeviceAttributeCooperativeMultiDeviceUnmatchedSharedMem
        | hipDeviceAttributeCanUseStreamWaitValue
        | hipDeviceAttributeImageSupport => Fixed(0),
        hipDeviceAttributeUnused3
        | hipDeviceAttributeUnused4
        | hipDeviceAttributeUnused5
        | hipDeviceAttributeHdpMemFlushCntl
        | hipDeviceAttributeHdpRegFlushCntl
        | hipDeviceAttributeIsLargeBar
        | hipDeviceAttributeAsicRevision
        | hipDeviceAttributeFineGrainSupport
        | hipDeviceAttributeWallClockRate => No("an AMD hardware detail"),
        _ => return None,
    })
}

/// An attribute's value as a C `int` (values past `INT_MAX` read `INT_MAX`).
fn clamp_int(v: i64) -> c_int {
    v.clamp(c_int::MIN.into(), c_int::MAX.into()) as c_int
}

/// `hipDeviceGetAttribute`: null `pi` → InvalidValue; a bad device →
/// InvalidDevice; an unknown attribute, one that is not a scalar hipmem can
/// report, or one the backend does not report → InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetAttribute(
    pi: *mut c_int,
    attr: hipDeviceAttribute_t,
    deviceId: c_int,
) -> hipError_t {
    call(|| {
        non_null(pi, "hipDeviceGetAttribute: pi")?;
        let rt = rt()?;
        let device = device_ordinal(rt, deviceId)?;
        let v = match answer(attr) {
            None => {
                return Err(Error::InvalidValue(format!(
                    "hipDeviceGetAttribute: {attr} is not a hipDeviceAttribute_t"
                )));
            }
            Some(Answer::No(why)) => {
                return Err(Error::InvalidValue(format!(
                    "hipDeviceGetAttribute: attribute {attr} is {why}, not a value libhipmem reports"
                )));
            }
            Some(Answer::Fixed(v)) => v,
            Some(Answer::TotalGlobalMem) => clamp_int(rt.device_properties(device)?.total_memory as i64),
            Some(Answer::Attr(a)) => clamp_int(rt.device_attribute(device, a).map_err(|e| match e {
                Error::NotSupported(m) => Error::InvalidValue(format!("hipDeviceGetAttribute({attr}): {m}")),
                other => other,
            })?),
        };
        // SAFETY: non-null; points to a writable int (HIP's contract).
        unsafe { *pi = v };
        Ok(())
    })
}

/// Copies `text` into a C char array, truncated and NUL-terminated.
fn copy_name(dst: &mut [c_char], text: &str) {
    let n = text.len().min(dst.len().saturating_sub(1));
    for (d, s) in dst.iter_mut().zip(text.as_bytes()[..n].iter()) {
        *d = *s as c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

/// Fills HIP 6's device properties of `device`.
fn properties(rt: &Runtime, device: usize) -> Result<hipDeviceProp_tR0600> {
    let p = rt.device_properties(device)?;
    // Attributes the backend does not report read 0 here (as HIP leaves
    // fields it cannot fill); other failures are errors.
    let get = |a: A| -> Result<c_int> {
        match rt.device_attribute(device, a) {
            Ok(v) => Ok(clamp_int(v)),
            Err(Error::NotSupported(_)) => Ok(0),
            Err(e) => Err(e),
        }
    };
    let size = |a: A| -> Result<usize> { get(a).map(|v| v.max(0) as usize) };
    // SAFETY: hipDeviceProp_tR0600 is plain old data (integers, arrays of
    // them and two raw pointers), for which all-zero bytes are valid.
    let mut q: hipDeviceProp_tR0600 = unsafe { std::mem::zeroed() };
    copy_name(&mut q.name, &p.name);
    if let Ok(uuid) = rt.device_uuid(device) {
        for (d, s) in q.uuid.bytes.iter_mut().zip(uuid) {
            *d = s as c_char;
        }
    }
    q.totalGlobalMem = p.total_memory as usize;
    q.sharedMemPerBlock = size(A::MaxSharedMemoryPerBlock)?;
    q.regsPerBlock = get(A::MaxRegistersPerBlock)?;
    q.warpSize = get(A::WarpSize)?;
    q.memPitch = size(A::MaxPitch)?;
    q.maxThreadsPerBlock = get(A::MaxThreadsPerBlock)?;
    q.maxThreadsDim = [get(A::MaxBlockDimX)?, get(A::MaxBlockDimY)?, get(A::MaxBlockDimZ)?];
    q.maxGridSize = [get(A::MaxGridDimX)?, get(A::MaxGridDimY)?, get(A::MaxGridDimZ)?];
    q.clockRate = get(A::ClockRate)?;
    q.totalConstMem = size(A::TotalConstantMemory)?;
    q.major = p.compute_capability.0 as c_int;
    q.minor = p.compute_capability.1 as c_int;
    q.textureAlignment = size(A::TextureAlignment)?;
    q.texturePitchAlignment = size(A::TexturePitchAlignment)?;
    q.deviceOverlap = get(A::GpuOverlap)?;
    q.multiProcessorCount = p.multiprocessor_count as c_int;
    q.kernelExecTimeoutEnabled = get(A::KernelExecTimeout)?;
    q.integrated = get(A::Integrated)?;
    q.canMapHostMemory = get(A::CanMapHostMemory)?;
    q.computeMode = get(A::ComputeMode)?;
    q.maxTexture1D = get(A::MaxTexture1DWidth)?;
    q.maxTexture1DMipmap = get(A::MaxTexture1DMipmappedWidth)?;
    q.maxTexture1DLinear = get(A::MaxTexture1DLinearWidth)?;
    q.maxTexture2D = [get(A::MaxTexture2DWidth)?, get(A::MaxTexture2DHeight)?];
    q.maxTexture2DMipmap = [get(A::MaxTexture2DMipmappedWidth)?, get(A::MaxTexture2DMipmappedHeight)?];
    q.maxTexture2DLinear = [
        get(A::MaxTexture2DLinearWidth)?,
        get(A::MaxTexture2DLinearHeight)?,
        get(A::MaxTexture2DLinearPitch)?,
    ];
    q.maxTexture2DGather = [get(A::MaxTexture2DGatherWidth)?, get(A::MaxTexture2DGatherHeight)?];
    q.maxTexture3D = [get(A::MaxTexture3DWidth)?, get(A::MaxTexture3DHeight)?, get(A::MaxTexture3DDepth)?];
    q.maxTexture3DAlt = [
        get(A::MaxTexture3DWidthAlternate)?,
        get(A::MaxTexture3DHeightAlternate)?,
        get(A::MaxTexture3DDepthAlternate)?,
    ];
    q.maxTextureCubemap = get(A::MaxTextureCubemapWidth)?;
    q.maxTexture1DLayered = [get(A::MaxTexture1DLayeredWidth)?, get(A::MaxTexture1DLayeredLayers)?];
    q.maxTexture2DLayered = [
        get(A::MaxTexture2DLayeredWidth)?,
        get(A::MaxTexture2DLayeredHeight)?,
        get(A::MaxTexture2DLayeredLayers)?,
    ];
    q.maxTextureCubemapLayered =
        [get(A::MaxTextureCubemapLayeredWidth)?, get(A::MaxTextureCubemapLayeredLayers)?];
    q.maxSurface1D = get(A::MaxSurface1DWidth)?;
    q.maxSurface2D = [get(A::MaxSurface2DWidth)?, get(A::MaxSurface2DHeight)?];
    q.maxSurface3D = [get(A::MaxSurface3DWidth)?, get(A::MaxSurface3DHeight)?, get(A::MaxSurface3DDepth)?];
    q.maxSurface1DLayered = [get(A::MaxSurface1DLayeredWidth)?, get(A::MaxSurface1DLayeredLayers)?];
    q.maxSurface2DLayered = [
        get(A::MaxSurface2DLayeredWidth)?,
        get(A::MaxSurface2DLayeredHeight)?,
        get(A::MaxSurface2DLayeredLayers)?,
    ];
    q.maxSurfaceCubemap = get(A::MaxSurfaceCubemapWidth)?;
    q.maxSurfaceCubemapLayered =
        [get(A::MaxSurfaceCubemapLayeredWidth)?, get(A::MaxSurfaceCubemapLayeredLayers)?];
    q.surfaceAlignment = size(A::SurfaceAlignment)?;
    q.concurrentKernels = get(A::ConcurrentKernels)?;
    q.ECCEnabled = get(A::EccEnabled)?;
    q.pciBusID = get(A::PciBusId)?;
    q.pciDeviceID = get(A::PciDeviceId)?;
    q.pciDomainID = get(A::PciDomainId)?;
    q.tccDriver = get(A::TccDriver)?;
    q.asyncEngineCount = get(A::AsyncEngineCount)?;
    q.unifiedAddressing = get(A::UnifiedAddressing)?;
    q.memoryClockRate = get(A::MemoryClockRate)?;
    q.memoryBusWidth = get(A::GlobalMemoryBusWidth)?;
    q.l2CacheSize = get(A::L2CacheSize)?;
    q.persistingL2CacheMaxSize = get(A::MaxPersistingL2CacheSize)?;
    q.maxThreadsPerMultiProcessor = get(A::MaxThreadsPerMultiprocessor)?;
    q.streamPrioritiesSupported = get(A::StreamPrioritiesSupported)?;
    q.globalL1CacheSupported = get(A::GlobalL1CacheSupported)?;
    q.localL1CacheSupported = get(A::LocalL1CacheSupported)?;
    q.sharedMemPerMultiprocessor = size(A::MaxSharedMemoryPerMultiprocessor)?;
    q.regsPerMultiprocessor = get(A::MaxRegistersPerMultiprocessor)?;
    q.managedMemory = get(A::ManagedMemory)?;
    q.isMultiGpuBoard = get(A::MultiGpuBoard)?;
    q.multiGpuBoardGroupID = get(A::MultiGpuBoardGroupId)?;
    q.hostNativeAtomicSupported = get(A::HostNativeAtomicSupported)?;
    q.singleToDoublePrecisionPerfRatio = get(A::SingleToDoublePrecisionPerfRatio)?;
    q.pageableMemoryAccess = get(A::PageableMemoryAccess)?;
    q.concurrentManagedAccess = get(A::ConcurrentManagedAccess)?;
    q.computePreemptionSupported = get(A::ComputePreemptionSupported)?;
    q.canUseHostPointerForRegisteredMem = get(A::CanUseHostPointerForRegisteredMem)?;
    q.cooperativeLaunch = get(A::CooperativeLaunch)?;
    q.cooperativeMultiDeviceLaunch = get(A::CooperativeMultiDeviceLaunch)?;
    q.sharedMemPerBlockOptin = size(A::MaxSharedMemoryPerBlockOptin)?;
    q.pageableMemoryAccessUsesHostPageTables = get(A::PageableMemoryAccessUsesHostPageTables)?;
    q.directManagedMemAccessFromHost = get(A::DirectManagedMemAccessFromHost)?;
    q.maxBlocksPerMultiProcessor = get(A::MaxBlocksPerMultiprocessor)?;
    q.accessPolicyMaxWindowSize = get(A::MaxAccessPolicyWindowSize)?;
    q.reservedSharedMemPerBlock = size(A::ReservedSharedMemoryPerBlock)?;
    q.hostRegisterSupported = get(A::HostRegisterSupported)?;
    q.sparseHipArraySupported = get(A::SparseArraySupported)?;
    q.hostRegisterReadOnlySupported = get(A::ReadOnlyHostRegisterSupported)?;
    q.timelineSemaphoreInteropSupported = get(A::TimelineSemaphoreInteropSupported)?;
    q.memoryPoolsSupported = get(A::MemoryPoolsSupported)?;
    q.gpuDirectRDMASupported = get(A::GpuDirectRdmaSupported)?;
    q.gpuDirectRDMAFlushWritesOptions = get(A::GpuDirectRdmaFlushWritesOptions)? as u32;
    q.gpuDirectRDMAWritesOrdering = get(A::GpuDirectRdmaWritesOrdering)?;
    q.memoryPoolSupportedHandleTypes = get(A::MemoryPoolSupportedHandleTypes)? as u32;
    q.deferredMappingHipArraySupported = get(A::DeferredMappingArraySupported)?;
    q.ipcEventSupported = get(A::IpcEventSupported)?;
    q.clusterLaunch = get(A::ClusterLaunch)?;
    q.unifiedFunctionPointers = get(A::UnifiedFunctionPointers)?;
    // HIP's own members: the architecture name (CUDA's sm_XY on NVIDIA, as
    // HIP's NVIDIA path reports it), the timer clock, the feature flags.
    let arch = match rt.backend_kind() {
        hipmem_rs::BackendKind::Cuda => format!("sm_{}{}", p.compute_capability.0, p.compute_capability.1),
        kind => format!("{kind}"),
    };
    copy_name(&mut q.gcnArchName, &arch);
    q.maxSharedMemoryPerMultiProcessor = q.sharedMemPerMultiprocessor;
    q.clockInstructionRate = q.clockRate;
    q.arch = arch_flags(rt, p.compute_capability);
    Ok(q)
}

/// `hipDeviceArch_t` from CUDA's compute capability, the way HIP's NVIDIA
/// path derives it (`__CUDA_ARCH__` thresholds); none on the emulation,
/// which runs no user kernels.
fn arch_flags(rt: &Runtime, (major, minor): (u32, u32)) -> hipDeviceArch_t {
    if rt.backend_kind() != hipmem_rs::BackendKind::Cuda {
        return hipDeviceArch_t::default();
    }
    let cc = major * 100 + minor * 10;
    // (bit, the compute capability × 100 from which it holds), HIP's order.
    let table: [(u32, u32); 17] = [
        (0, 110),  // hasGlobalInt32Atomics
        (1, 110),  // hasGlobalFloatAtomicExch
        (2, 120),  // hasSharedInt32Atomics
        (3, 120),  // hasSharedFloatAtomicExch
        (4, 200),  // hasFloatAtomicAdd
        (5, 200),  // hasGlobalInt64Atomics
        (6, 120),  // hasSharedInt64Atomics
        (7, 130),  // hasDoubles
        (8, 120),  // hasWarpVote
        (9, 200),  // hasWarpBallot
        (10, 300), // hasWarpShuffle
        (11, 350), // hasFunnelShift
        (12, 200), // hasThreadFenceSystem
        (13, 200), // hasSyncThreadsExt
        (14, 200), // hasSurfaceFuncs
        (15, 200), // has3dGrid
        (16, 350), // hasDynamicParallelism
    ];
    let bits = table.iter().filter(|(_, from)| cc >= *from).fold(0u32, |b, (bit, _)| b | (1 << bit));
    hipDeviceArch_t { bits }
}

/// `hipGetDevicePropertiesR0600` (the header's `hipGetDeviceProperties`):
/// null `prop` → InvalidValue; a bad device → InvalidDevice.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDevicePropertiesR0600(
    prop: *mut hipDeviceProp_tR0600,
    deviceId: c_int,
) -> hipError_t {
    call(|| {
        non_null(prop, "hipGetDeviceProperties: prop")?;
        let rt = rt()?;
        let device = device_ordinal(rt, deviceId)?;
        let q = properties(rt, device)?;
        // SAFETY: non-null; points to a writable hipDeviceProp_tR0600 (HIP's contract).
        unsafe { prop.write(q) };
        Ok(())
    })
}

/// `hipDeviceGetName`: a bad device → InvalidDevice (checked first, as
/// HIP does); null `name` or `len <= 0` → InvalidValue. The name is
/// truncated to `len - 1` bytes and NUL-terminated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetName(name: *mut c_char, len: c_int, device: hipDevice_t) -> hipError_t {
    call(|| {
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        non_null(name, "hipDeviceGetName: name")?;
        if len <= 0 {
            return Err(Error::InvalidValue(format!(
                "hipDeviceGetName: len {len} leaves no room for the name"
            )));
        }
        // SAFETY: non-null and, by HIP's contract, `len` writable chars.
        let dst = unsafe { std::slice::from_raw_parts_mut(name, len as usize) };
        copy_name(dst, &rt.device_properties(device)?.name);
        Ok(())
    })
}

/// `hipDeviceGet`: null → InvalidValue; a bad ordinal → InvalidDevice.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGet(device: *mut hipDevice_t, ordinal: c_int) -> hipError_t {
    call(|| {
        non_null(device, "hipDeviceGet: device")?;
        let d = device_ordinal(rt()?, ordinal)?;
        // SAFETY: non-null; points to a writable hipDevice_t (HIP's contract).
        unsafe { *device = d as hipDevice_t };
        Ok(())
    })
}

/// `hipDeviceTotalMem`: null → InvalidValue; a bad device → InvalidDevice.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceTotalMem(bytes: *mut usize, device: hipDevice_t) -> hipError_t {
    call(|| {
        non_null(bytes, "hipDeviceTotalMem: bytes")?;
        let rt = rt()?;
        let d = device_ordinal(rt, device)?;
        // SAFETY: non-null; points to a writable size_t (HIP's contract).
        unsafe { *bytes = rt.device_properties(d)?.total_memory as usize };
        Ok(())
    })
}

/// `hipDeviceComputeCapability`: null → InvalidValue; a bad device →
/// InvalidDevice. The emulation reports 0.0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    device: hipDevice_t,
) -> hipError_t {
    call(|| {
        non_null(major, "hipDeviceComputeCapability: major")?;
        non_null(minor, "hipDeviceComputeCapability: minor")?;
        let rt = rt()?;
        let d = device_ordinal(rt, device)?;
        let (ma, mi) = rt.device_properties(d)?.compute_capability;
        // SAFETY: both non-null and writable ints (HIP's contract).
        unsafe {
            *major = ma as c_int;
            *minor = mi as c_int;
        }
        Ok(())
    })
}

/// `hipDriverGetVersion`: null → InvalidValue. CUDA's driver version on
/// the cuda backend (13000 = 13.0); the HIP version hipmem implements on
/// the emulation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDriverGetVersion(driverVersion: *mut c_int) -> hipError_t {
    call(|| {
        non_null(driverVersion, "hipDriverGetVersion: driverVersion")?;
        let v = rt()?.driver_version()?;
        // SAFETY: non-null; a writable int (HIP's contract).
        unsafe { *driverVersion = v };
        Ok(())
    })
}

/// `hipRuntimeGetVersion`: null → InvalidValue; otherwise `HIP_VERSION`
/// (60200000: HIP 6.2, the API libhipmem implements).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipRuntimeGetVersion(runtimeVersion: *mut c_int) -> hipError_t {
    call(|| {
        non_null(runtimeVersion, "hipRuntimeGetVersion: runtimeVersion")?;
        let v = rt()?.runtime_version();
        // SAFETY: non-null; a writable int (HIP's contract).
        unsafe { *runtimeVersion = v };
        Ok(())
    })
}

/// `hipDeviceGetStreamPriorityRange` of the current device: either pointer
/// may be null (it is then not written). CUDA's range on the cuda backend;
/// `(0, 0)` (no priorities) on the emulation.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetStreamPriorityRange(
    leastPriority: *mut c_int,
    greatestPriority: *mut c_int,
) -> hipError_t {
    call(|| {
        let range = rt()?.stream_priority_range(current_device())?;
        // SAFETY: each pointer is written only when non-null; HIP's contract
        // makes a non-null one a writable int.
        unsafe {
            if !leastPriority.is_null() {
                *leastPriority = range.least;
            }
            if !greatestPriority.is_null() {
                *greatestPriority = range.greatest;
            }
        }
        Ok(())
    })
}
