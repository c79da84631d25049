//! What devices say about themselves beyond [`DeviceProperties`]
//! (`hipDeviceGetAttribute`, `hipGetDeviceProperties`, `hipDriverGetVersion`,
//! `hipRuntimeGetVersion`, `hipDeviceGetStreamPriorityRange`).
//!
//! [`DeviceProperties`]: crate::backend::DeviceProperties
#![forbid(unsafe_code)]

use super::{Device, Runtime};
use crate::backend::device_info::{DeviceAttribute, PriorityRange};
use crate::error::Result;

/// The HIP version hipmem implements, as `hipRuntimeGetVersion` reports it
/// and `HIP_VERSION` encodes it: `major * 10_000_000 + minor * 100_000 +
/// patch` (6.2.0, the ROCm 6.x API of `include/hip/hip_runtime_api.h`).
pub const HIP_RUNTIME_VERSION: i32 = 60_200_000;

impl Runtime {
    /// One attribute of `device` (`hipDeviceGetAttribute`). A bad ordinal is
    /// InvalidDevice; an attribute the backend cannot report is NotSupported.
    pub fn device_attribute(&self, device: usize, attribute: DeviceAttribute) -> Result<i64> {
        self.check_device(device)?;
        self.backend().device_attribute(device, attribute)
    }

    /// The UUID of `device`; NotSupported where the backend has none.
    pub fn device_uuid(&self, device: usize) -> Result<[u8; 16]> {
        self.check_device(device)?;
        self.backend().device_uuid(device)
    }

    /// The driver's version (`hipDriverGetVersion`): CUDA's on the cuda
    /// backend (13000 is 13.0), [`HIP_RUNTIME_VERSION`] on the emulation.
    pub fn driver_version(&self) -> Result<i32> {
        self.backend().driver_version()
    }

    /// `hipRuntimeGetVersion`: [`HIP_RUNTIME_VERSION`].
    pub fn runtime_version(&self) -> i32 {
        HIP_RUNTIME_VERSION
    }

    /// The stream priorities `device` accepts (`hipDeviceGetStreamPriorityRange`).
    pub fn stream_priority_range(&self, device: usize) -> Result<PriorityRange> {
        self.check_device(device)?;
        self.backend().stream_priority_range(device)
    }
}

impl Device {
    /// One attribute (`hipDeviceGetAttribute`).
    pub fn attribute(&self, attribute: DeviceAttribute) -> Result<i64> {
        self.rt.device_attribute(self.ordinal, attribute)
    }

    /// The stream priorities this device accepts (`hipDeviceGetStreamPriorityRange`).
    pub fn stream_priority_range(&self) -> Result<PriorityRange> {
        self.rt.stream_priority_range(self.ordinal)
    }
}
