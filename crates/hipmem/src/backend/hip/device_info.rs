//! Device details and stream priorities on HIP: `hipDeviceGetAttribute`
//! for every [`DeviceAttribute`] HIP has as a scalar, the fields of
//! `hipDeviceProp_tR0600` for the limits HIP reports only there (textures
//! and surfaces of several dimensions, a few flags), `hipDeviceGetUuid`,
//! `hipDriverGetVersion`, and the stream priorities
//! (`hipDeviceGetStreamPriorityRange`, `hipStreamCreateWithPriority`,
//! `hipStreamGetPriority`).
//!
//! What a runtime lacks degrades: an attribute it does not know (an older
//! ROCm answers `hipErrorInvalidValue` for the 5.3+ ones) or a field
//! without `hipGetDevicePropertiesR0600` is NotSupported; without the
//! priority entry points a device has no priorities (`(0, 0)`, every stream
//! at 0, as the trait's defaults).

use std::ffi::{c_char, c_int};
use std::sync::Arc;

use super::sys::{self, hipDeviceProp_tR0600, hipStream_t};
use super::{HipBackend, StreamEntry, lock};
use crate::backend::device_info::{self, DeviceAttribute, PriorityRange};
use crate::backend::{Backend, RawStream, StreamFlags};
use crate::error::{Error, Result};

/// Where HIP reports an attribute.
enum Source {
    /// `hipDeviceGetAttribute` with this `hipDeviceAttribute_t`.
    Attribute(sys::hipDeviceAttribute_t),
    /// A field of `hipDeviceProp_tR0600` (HIP has no scalar attribute for it).
    Properties(fn(&hipDeviceProp_tR0600) -> i64),
    /// A capability whose answer must agree with what this backend offers
    /// (the device says yes and the library has the entry points):
    /// [`DeviceProperties`](crate::backend::DeviceProperties)' capabilities.
    Capability,
}

/// The `hipDeviceAttribute_t` of each attribute (HIP's enum, the same
/// values in ROCm 5.2.3 and 6.2.2; 89-91 are 5.3+), or the properties
/// field that holds it.
fn source(attribute: DeviceAttribute) -> Source {
    use DeviceAttribute as A;
    use Source::{Attribute as At, Properties as P};
    match attribute {
        A::EccEnabled => At(0),
        A::MaxAccessPolicyWindowSize => At(1),
        A::AsyncEngineCount => At(2),
        A::CanMapHostMemory => At(3),
        A::CanUseHostPointerForRegisteredMem => At(4),
        A::ClockRate => At(5),
        A::ComputeMode => At(6),
        A::ComputePreemptionSupported => At(7),
        A::ConcurrentKernels => At(8),
        A::CooperativeLaunch => At(10),
        A::CooperativeMultiDeviceLaunch => At(11),
        A::GpuOverlap => At(12),
        A::DirectManagedMemAccessFromHost => At(13),
        A::GlobalL1CacheSupported => At(14),
        A::HostNativeAtomicSupported => At(15),
        A::Integrated => At(16),
        A::MultiGpuBoard => At(17),
        A::KernelExecTimeout => At(18),
        A::L2CacheSize => At(19),
        A::LocalL1CacheSupported => At(20),
        A::ComputeCapabilityMajor => At(23),
        A::MaxBlocksPerMultiprocessor => At(25),
        A::MaxBlockDimX => At(26),
        A::MaxBlockDimY => At(27),
        A::MaxBlockDimZ => At(28),
        A::MaxGridDimX => At(29),
        A::MaxGridDimY => At(30),
        A::MaxGridDimZ => At(31),
        A::MaxSurface1DWidth => At(32),
        A::MaxSurfaceCubemapWidth => At(37),
        A::MaxTexture1DWidth => At(39),
        A::MaxTexture1DLinearWidth => At(41),
        A::MaxTexture1DMipmappedWidth => At(42),
        A::MaxTexture2DWidth => At(43),
        A::MaxTexture2DHeight => At(44),
        A::MaxTexture3DWidth => At(49),
        A::MaxTexture3DHeight => At(50),
        A::MaxTexture3DDepth => At(51),
        A::MaxTextureCubemapWidth => At(53),
        A::MaxThreadsPerBlock => At(56),
        A::MaxThreadsPerMultiprocessor => At(57),
        A::MaxPitch => At(58),
        A::GlobalMemoryBusWidth => At(59),
        A::MemoryClockRate => At(60),
        A::ComputeCapabilityMinor => At(61),
        A::MultiGpuBoardGroupId => At(62),
        A::MultiprocessorCount => At(63),
        A::PageableMemoryAccess => At(65),
        A::PageableMemoryAccessUsesHostPageTables => At(66),
        A::PciBusId => At(67),
        A::PciDeviceId => At(68),
        A::PciDomainId => At(69),
        A::MaxPersistingL2CacheSize => At(70),
        A::MaxRegistersPerBlock => At(71),
        A::MaxRegistersPerMultiprocessor => At(72),
        A::ReservedSharedMemoryPerBlock => At(73),
        A::MaxSharedMemoryPerBlock => At(74),
        A::MaxSharedMemoryPerBlockOptin => At(75),
        A::MaxSharedMemoryPerMultiprocessor => At(76),
        A::SingleToDoublePrecisionPerfRatio => At(77),
        A::StreamPrioritiesSupported => At(78),
        A::SurfaceAlignment => At(79),
        A::TccDriver => At(80),
        A::TextureAlignment => At(81),
        A::TexturePitchAlignment => At(82),
        A::TotalConstantMemory => At(83),
        A::UnifiedAddressing => At(85),
        A::WarpSize => At(87),
        A::MemoryPoolSupportedHandleTypes => At(91),
        A::HostRegisterSupported => At(90),
        A::MemoryPoolsSupported
        | A::VirtualMemoryManagementSupported
        | A::ManagedMemory
        | A::ConcurrentManagedAccess => Source::Capability,
        // Limits of several dimensions: one field each in the properties.
        A::MaxTexture2DLayeredWidth => P(|p| p.maxTexture2DLayered[0].into()),
        A::MaxTexture2DLayeredHeight => P(|p| p.maxTexture2DLayered[1].into()),
        A::MaxTexture2DLayeredLayers => P(|p| p.maxTexture2DLayered[2].into()),
        A::MaxTexture1DLayeredWidth => P(|p| p.maxTexture1DLayered[0].into()),
        A::MaxTexture1DLayeredLayers => P(|p| p.maxTexture1DLayered[1].into()),
        A::MaxTexture2DGatherWidth => P(|p| p.maxTexture2DGather[0].into()),
        A::MaxTexture2DGatherHeight => P(|p| p.maxTexture2DGather[1].into()),
        A::MaxTexture3DWidthAlternate => P(|p| p.maxTexture3DAlt[0].into()),
        A::MaxTexture3DHeightAlternate => P(|p| p.maxTexture3DAlt[1].into()),
        A::MaxTexture3DDepthAlternate => P(|p| p.maxTexture3DAlt[2].into()),
        A::MaxTextureCubemapLayeredWidth => P(|p| p.maxTextureCubemapLayered[0].into()),
        A::MaxTextureCubemapLayeredLayers => P(|p| p.maxTextureCubemapLayered[1].into()),
        A::MaxSurface2DWidth => P(|p| p.maxSurface2D[0].into()),
        A::MaxSurface2DHeight => P(|p| p.maxSurface2D[1].into()),
        A::MaxSurface3DWidth => P(|p| p.maxSurface3D[0].into()),
        A::MaxSurface3DHeight => P(|p| p.maxSurface3D[1].into()),
        A::MaxSurface3DDepth => P(|p| p.maxSurface3D[2].into()),
        A::MaxSurface1DLayeredWidth => P(|p| p.maxSurface1DLayered[0].into()),
        A::MaxSurface1DLayeredLayers => P(|p| p.maxSurface1DLayered[1].into()),
        A::MaxSurface2DLayeredWidth => P(|p| p.maxSurface2DLayered[0].into()),
        A::MaxSurface2DLayeredHeight => P(|p| p.maxSurface2DLayered[1].into()),
        A::MaxSurface2DLayeredLayers => P(|p| p.maxSurface2DLayered[2].into()),
        A::MaxSurfaceCubemapLayeredWidth => P(|p| p.maxSurfaceCubemapLayered[0].into()),
        A::MaxSurfaceCubemapLayeredLayers => P(|p| p.maxSurfaceCubemapLayered[1].into()),
        A::MaxTexture2DLinearWidth => P(|p| p.maxTexture2DLinear[0].into()),
        A::MaxTexture2DLinearHeight => P(|p| p.maxTexture2DLinear[1].into()),
        A::MaxTexture2DLinearPitch => P(|p| p.maxTexture2DLinear[2].into()),
        A::MaxTexture2DMipmappedWidth => P(|p| p.maxTexture2DMipmap[0].into()),
        A::MaxTexture2DMipmappedHeight => P(|p| p.maxTexture2DMipmap[1].into()),
        // Flags HIP reports only in the properties.
        A::SparseArraySupported => P(|p| p.sparseHipArraySupported.into()),
        A::ReadOnlyHostRegisterSupported => P(|p| p.hostRegisterReadOnlySupported.into()),
        A::TimelineSemaphoreInteropSupported => P(|p| p.timelineSemaphoreInteropSupported.into()),
        A::GpuDirectRdmaSupported => P(|p| p.gpuDirectRDMASupported.into()),
        A::GpuDirectRdmaFlushWritesOptions => P(|p| p.gpuDirectRDMAFlushWritesOptions.into()),
        A::GpuDirectRdmaWritesOrdering => P(|p| p.gpuDirectRDMAWritesOrdering.into()),
        A::ClusterLaunch => P(|p| p.clusterLaunch.into()),
        A::DeferredMappingArraySupported => P(|p| p.deferredMappingHipArraySupported.into()),
        A::IpcEventSupported => P(|p| p.ipcEventSupported.into()),
        A::UnifiedFunctionPointers => P(|p| p.unifiedFunctionPointers.into()),
    }
}

impl HipBackend {
    fn priorities(&self) -> Option<&'static sys::Priorities> {
        self.api.priorities.as_ref().ok()
    }

    pub(super) fn hip_device_attribute(&self, device: usize, attribute: DeviceAttribute) -> Result<i64> {
        self.device(device)?;
        let unknown = |why: String| {
            Error::NotSupported(format!(
                "{} does not report the device attribute {} ({why})",
                self.api.library,
                attribute.name()
            ))
        };
        match source(attribute) {
            Source::Capability => device_info::attribute_from_properties(self, device, attribute),
            Source::Attribute(a) => {
                if attribute == DeviceAttribute::HostRegisterSupported && self.api.host_register.is_err() {
                    // The library cannot register host memory, whatever the device says.
                    return Ok(0);
                }
                match self.attribute(device, a) {
                    Ok(v) => Ok(v.into()),
                    // The runtime does not know this attribute (an older ROCm,
                    // or a library that does not report it).
                    Err(Error::InvalidValue(m)) => Err(unknown(m)),
                    Err(e) => Err(e),
                }
            }
            Source::Properties(field) => match self.properties_r0600(device) {
                Some(p) => Ok(field(&p?)),
                None => Err(unknown("it has no hipGetDevicePropertiesR0600".into())),
            },
        }
    }

    pub(super) fn hip_device_uuid(&self, device: usize) -> Result<[u8; 16]> {
        self.device(device)?;
        let bytes = |raw: [c_char; 16]| raw.map(|c| c as u8);
        if let Some(f) = self.api.info.hipDeviceGetUuid {
            let mut raw = [0 as c_char; 16];
            // SAFETY: `raw` is a writable hipUUID (16 chars); the runtime validates the device.
            let r = unsafe { f(&mut raw, device as c_int) };
            self.check(r, || format!("hipDeviceGetUuid(device {device})"))?;
            return Ok(bytes(raw));
        }
        // The properties carry it too; all zeros there means "not reported".
        match self.properties_r0600(device) {
            Some(p) => {
                let uuid = bytes(p?.uuid);
                if uuid == [0; 16] {
                    return Err(Error::NotSupported(format!(
                        "{} reports no UUID for device {device}",
                        self.api.library
                    )));
                }
                Ok(uuid)
            }
            None => Err(Error::NotSupported(format!(
                "{} has neither hipDeviceGetUuid nor hipGetDevicePropertiesR0600",
                self.api.library
            ))),
        }
    }

    pub(super) fn hip_driver_version(&self) -> Result<i32> {
        self.driver_version.ok_or_else(|| {
            Error::NotSupported(format!("{} does not report a driver version", self.api.library))
        })
    }

    pub(super) fn hip_priority_range(&self, device: usize) -> Result<PriorityRange> {
        self.device(device)?;
        let Some(p) = self.priorities() else {
            return Ok(PriorityRange::NONE);
        };
        let _device = self.bound(device)?;
        let (mut least, mut greatest): (c_int, c_int) = (0, 0);
        // SAFETY: valid out-pointers; the device is current.
        let r = unsafe { (p.hipDeviceGetStreamPriorityRange)(&mut least, &mut greatest) };
        self.check(r, || format!("hipDeviceGetStreamPriorityRange on device {device}"))?;
        Ok(PriorityRange { least, greatest })
    }

    pub(super) fn hip_stream_create_with_priority(
        &self,
        device: usize,
        flags: StreamFlags,
        priority: i32,
    ) -> Result<RawStream> {
        let Some(p) = self.priorities() else {
            // Without priorities the range is (0, 0): 0 is the only priority.
            if priority == 0 {
                return self.stream_create(device, flags);
            }
            return Err(Error::NotSupported(format!(
                "{} has no stream priorities (hipStreamCreateWithPriority), priority {priority} asked",
                self.api.library
            )));
        };
        let _device = self.bound(device)?;
        let bits = if flags.non_blocking { sys::hipStreamNonBlocking } else { sys::hipStreamDefault };
        let mut s: hipStream_t = std::ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer; the device is current.
        let r = unsafe { (p.hipStreamCreateWithPriority)(&mut s, bits, priority) };
        self.check(r, || {
            format!("hipStreamCreateWithPriority(flags {bits}, priority {priority}) on device {device}")
        })?;
        let handle = s as usize as u64;
        lock(&self.streams).insert(handle, Arc::new(StreamEntry::created(self.api, device, handle)));
        Ok(RawStream { device, handle })
    }

    pub(super) fn hip_stream_priority(&self, stream: RawStream) -> Result<i32> {
        let t = self.target(stream)?;
        let Some(p) = self.priorities() else {
            // Every stream of a runtime without priorities has priority 0.
            return Ok(0);
        };
        let mut priority: c_int = 0;
        // SAFETY: a live stream of the current device (or its null stream); valid out-pointer.
        let r = unsafe { (p.hipStreamGetPriority)(t.raw, &mut priority) };
        self.check(r, || format!("hipStreamGetPriority({:#x}) on device {}", stream.handle, t.device))?;
        Ok(priority)
    }
}
