//! Device details and stream priorities on the CUDA driver:
//! `cuDeviceGetAttribute` for every [`DeviceAttribute`], `cuDeviceGetUuid_v2`,
//! `cuCtxGetStreamPriorityRange`, `cuStreamCreateWithPriority` and
//! `cuStreamGetPriority` (the optional entry points loaded on first use).

use std::ffi::{c_int, c_uint};
use std::sync::OnceLock;

use super::driver::{self, CUdevice, CUresult, CUstream};
use super::{CudaBackend, result};
use crate::backend::device_info::{DeviceAttribute, PriorityRange};
use crate::backend::{RawStream, StreamFlags};
use crate::error::Result;

type DeviceGetUuid = unsafe extern "C" fn(uuid: *mut [u8; 16], dev: CUdevice) -> CUresult;
type CtxGetStreamPriorityRange = unsafe extern "C" fn(least: *mut c_int, greatest: *mut c_int) -> CUresult;
type StreamCreateWithPriority =
    unsafe extern "C" fn(stream: *mut CUstream, flags: c_uint, priority: c_int) -> CUresult;
type StreamGetPriority = unsafe extern "C" fn(stream: CUstream, priority: *mut c_int) -> CUresult;

struct Entries {
    uuid: DeviceGetUuid,
    uuid_symbol: &'static str,
    priority_range: CtxGetStreamPriorityRange,
    create_with_priority: StreamCreateWithPriority,
    get_priority: StreamGetPriority,
}

fn entries() -> Result<&'static Entries> {
    static ENTRIES: OnceLock<Result<Entries>> = OnceLock::new();
    let loaded = ENTRIES.get_or_init(|| {
        // SAFETY: each type above is the signature cuda.h gives for the
        // symbol (`CUuuid` is a struct of 16 chars); cuDeviceGetUuid_v2 and
        // cuDeviceGetUuid share it.
        unsafe {
            let (uuid, uuid_symbol) = match driver::symbol::<DeviceGetUuid>("cuDeviceGetUuid_v2") {
                Ok(f) => (f, "cuDeviceGetUuid_v2"),
                Err(_) => (driver::symbol("cuDeviceGetUuid")?, "cuDeviceGetUuid"),
            };
            Ok(Entries {
                uuid,
                uuid_symbol,
                priority_range: driver::symbol("cuCtxGetStreamPriorityRange")?,
                create_with_priority: driver::symbol("cuStreamCreateWithPriority")?,
                get_priority: driver::symbol("cuStreamGetPriority")?,
            })
        }
    });
    loaded.as_ref().map_err(Clone::clone)
}

/// The `CUdevice_attribute` number of each attribute (cuda.h, CUDA 13).
pub(super) fn cu_attribute(attribute: DeviceAttribute) -> c_int {
    use DeviceAttribute as A;
    match attribute {
        A::MaxThreadsPerBlock => 1,
        A::MaxBlockDimX => 2,
        A::MaxBlockDimY => 3,
        A::MaxBlockDimZ => 4,
        A::MaxGridDimX => 5,
        A::MaxGridDimY => 6,
        A::MaxGridDimZ => 7,
        A::MaxSharedMemoryPerBlock => 8,
        A::TotalConstantMemory => 9,
        A::WarpSize => 10,
        A::MaxPitch => 11,
        A::MaxRegistersPerBlock => 12,
        A::ClockRate => 13,
        A::TextureAlignment => 14,
        A::GpuOverlap => 15,
        A::MultiprocessorCount => 16,
        A::KernelExecTimeout => 17,
        A::Integrated => 18,
        A::CanMapHostMemory => 19,
        A::ComputeMode => 20,
        A::MaxTexture1DWidth => 21,
        A::MaxTexture2DWidth => 22,
        A::MaxTexture2DHeight => 23,
        A::MaxTexture3DWidth => 24,
        A::MaxTexture3DHeight => 25,
        A::MaxTexture3DDepth => 26,
        A::MaxTexture2DLayeredWidth => 27,
        A::MaxTexture2DLayeredHeight => 28,
        A::MaxTexture2DLayeredLayers => 29,
        A::SurfaceAlignment => 30,
        A::ConcurrentKernels => 31,
        A::EccEnabled => 32,
        A::PciBusId => 33,
        A::PciDeviceId => 34,
        A::TccDriver => 35,
        A::MemoryClockRate => 36,
        A::GlobalMemoryBusWidth => 37,
        A::L2CacheSize => 38,
        A::MaxThreadsPerMultiprocessor => 39,
        A::AsyncEngineCount => 40,
        A::UnifiedAddressing => 41,
        A::MaxTexture1DLayeredWidth => 42,
        A::MaxTexture1DLayeredLayers => 43,
        A::MaxTexture2DGatherWidth => 45,
        A::MaxTexture2DGatherHeight => 46,
        A::MaxTexture3DWidthAlternate => 47,
        A::MaxTexture3DHeightAlternate => 48,
        A::MaxTexture3DDepthAlternate => 49,
        A::PciDomainId => 50,
        A::TexturePitchAlignment => 51,
        A::MaxTextureCubemapWidth => 52,
        A::MaxTextureCubemapLayeredWidth => 53,
        A::MaxTextureCubemapLayeredLayers => 54,
        A::MaxSurface1DWidth => 55,
        A::MaxSurface2DWidth => 56,
        A::MaxSurface2DHeight => 57,
        A::MaxSurface3DWidth => 58,
        A::MaxSurface3DHeight => 59,
        A::MaxSurface3DDepth => 60,
        A::MaxSurface1DLayeredWidth => 61,
        A::MaxSurface1DLayeredLayers => 62,
        A::MaxSurface2DLayeredWidth => 63,
        A::MaxSurface2DLayeredHeight => 64,
        A::MaxSurface2DLayeredLayers => 65,
        A::MaxSurfaceCubemapWidth => 66,
        A::MaxSurfaceCubemapLayeredWidth => 67,
        A::MaxSurfaceCubemapLayeredLayers => 68,
        A::MaxTexture1DLinearWidth => 69,
        A::MaxTexture2DLinearWidth => 70,
        A::MaxTexture2DLinearHeight => 71,
        A::MaxTexture2DLinearPitch => 72,
        A::MaxTexture2DMipmappedWidth => 73,
        A::MaxTexture2DMipmappedHeight => 74,
        A::ComputeCapabilityMajor => 75,
        A::ComputeCapabilityMinor => 76,
        A::MaxTexture1DMipmappedWidth => 77,
        A::StreamPrioritiesSupported => 78,
        A::GlobalL1CacheSupported => 79,
        A::LocalL1CacheSupported => 80,
        A::MaxSharedMemoryPerMultiprocessor => 81,
        A::MaxRegistersPerMultiprocessor => 82,
        A::ManagedMemory => 83,
        A::MultiGpuBoard => 84,
        A::MultiGpuBoardGroupId => 85,
        A::HostNativeAtomicSupported => 86,
        A::SingleToDoublePrecisionPerfRatio => 87,
        A::PageableMemoryAccess => 88,
        A::ConcurrentManagedAccess => 89,
        A::ComputePreemptionSupported => 90,
        A::CanUseHostPointerForRegisteredMem => 91,
        A::CooperativeLaunch => 95,
        A::CooperativeMultiDeviceLaunch => 96,
        A::MaxSharedMemoryPerBlockOptin => 97,
        A::HostRegisterSupported => 99,
        A::PageableMemoryAccessUsesHostPageTables => 100,
        A::DirectManagedMemAccessFromHost => 101,
        A::VirtualMemoryManagementSupported => 102,
        A::MaxBlocksPerMultiprocessor => 106,
        A::MaxPersistingL2CacheSize => 108,
        A::MaxAccessPolicyWindowSize => 109,
        A::ReservedSharedMemoryPerBlock => 111,
        A::SparseArraySupported => 112,
        A::ReadOnlyHostRegisterSupported => 113,
        A::TimelineSemaphoreInteropSupported => 114,
        A::MemoryPoolsSupported => 115,
        A::GpuDirectRdmaSupported => 116,
        A::GpuDirectRdmaFlushWritesOptions => 117,
        A::GpuDirectRdmaWritesOrdering => 118,
        A::MemoryPoolSupportedHandleTypes => 119,
        A::ClusterLaunch => 120,
        A::DeferredMappingArraySupported => 121,
        A::IpcEventSupported => 125,
        A::UnifiedFunctionPointers => 129,
    }
}

impl CudaBackend {
    pub(super) fn cuda_device_attribute(&self, device: usize, attribute: DeviceAttribute) -> Result<i64> {
        let dev = self.device(device)?;
        let v = result::device_attribute(self.driver, dev.cu, cu_attribute(attribute))
            .map_err(|e| e.context(format_args!("device attribute {}", attribute.name())))?;
        Ok(i64::from(v))
    }

    pub(super) fn cuda_device_uuid(&self, device: usize) -> Result<[u8; 16]> {
        let e = entries()?;
        let dev = self.device(device)?;
        let mut uuid = [0u8; 16];
        // SAFETY: `uuid` is a valid out-pointer to 16 bytes (a `CUuuid`).
        let r = unsafe { (e.uuid)(&mut uuid, dev.cu) };
        self.check(r, || format!("{}(device {device})", e.uuid_symbol))?;
        Ok(uuid)
    }

    pub(super) fn cuda_priority_range(&self, device: usize) -> Result<PriorityRange> {
        let e = entries()?;
        let _ctx = self.bound(device)?;
        let (mut least, mut greatest): (c_int, c_int) = (0, 0);
        // SAFETY: valid out-pointers; the device's context is current.
        let r = unsafe { (e.priority_range)(&mut least, &mut greatest) };
        self.check(r, || format!("cuCtxGetStreamPriorityRange on device {device}"))?;
        Ok(PriorityRange { least, greatest })
    }

    pub(super) fn cuda_stream_create_with_priority(
        &self,
        device: usize,
        flags: StreamFlags,
        priority: i32,
    ) -> Result<RawStream> {
        let e = entries()?;
        let cu_flags =
            if flags.non_blocking { driver::CU_STREAM_NON_BLOCKING } else { driver::CU_STREAM_DEFAULT };
        self.new_stream(device, cu_flags, priority, || {
            let mut raw: CUstream = std::ptr::null_mut();
            // SAFETY: valid out-pointer; the device's context is current.
            let r = unsafe { (e.create_with_priority)(&mut raw, cu_flags, priority) };
            self.check(r, || {
                format!(
                    "cuStreamCreateWithPriority(flags {cu_flags}, priority {priority}) on device {device}"
                )
            })?;
            Ok(raw)
        })
    }

    pub(super) fn cuda_stream_priority(&self, stream: RawStream) -> Result<i32> {
        let e = entries()?;
        let t = self.target(stream)?;
        let mut priority: c_int = 0;
        // SAFETY: live stream (held by `t`) of the current context; valid out-pointer.
        let r = unsafe { (e.get_priority)(t.raw, &mut priority) };
        self.check(r, || format!("cuStreamGetPriority({:#x}) on device {}", stream.handle, t.dev.ordinal))?;
        Ok(priority)
    }
}
