//! Devices: the core's handle of one device of a runtime.
//!
//! A [`Device`] is a runtime and an ordinal. The core gives it its
//! properties, memory information and synchronization; the layers above add
//! what they own (the safe API: streams, events and buffers; the pools: the
//! device's default and current pool; managed memory: managed buffers).
#![forbid(unsafe_code)]

use super::Runtime;
use crate::backend::{DeviceProperties, MemInfo};
use crate::error::Result;

/// One device of a runtime.
#[derive(Clone, Debug)]
pub struct Device {
    pub(crate) rt: Runtime,
    pub(crate) ordinal: usize,
}

impl Device {
    /// Device `ordinal` of the process-wide runtime (backend from `HIPMEM_BACKEND`).
    pub fn get(ordinal: usize) -> Result<Device> {
        Runtime::global()?.device(ordinal)
    }

    /// The ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The runtime this device belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Name, memory size and capabilities.
    pub fn properties(&self) -> &DeviceProperties {
        &self.rt.inner.devices[self.ordinal]
    }

    /// Free and total memory (`hipMemGetInfo`).
    pub fn mem_info(&self) -> Result<MemInfo> {
        self.rt.mem_get_info(self.ordinal)
    }

    /// Waits for all work on all streams of the device (`hipDeviceSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.rt.device_synchronize(self.ordinal)
    }
}

impl Runtime {
    /// The device handle for `ordinal`.
    pub fn device(&self, ordinal: usize) -> Result<Device> {
        self.check_device(ordinal)?;
        Ok(Device { rt: self.clone(), ordinal })
    }
}
