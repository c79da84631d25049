//! Devices and streams, continued: attributes, stream priorities and peer
//! access (the safe API over `runtime/device_info.rs` and `runtime/peer.rs`).
#![forbid(unsafe_code)]

use crate::backend::StreamFlags;
use crate::backend::device_info::{DeviceAttribute, PriorityRange};
use crate::device::Device;
use crate::error::Result;
use crate::stream::Stream;

impl Device {
    /// One attribute (`hipDeviceGetAttribute`).
    pub fn attribute(&self, attribute: DeviceAttribute) -> Result<i64> {
        self.rt.device_attribute(self.ordinal, attribute)
    }

    /// The stream priorities this device accepts (`hipDeviceGetStreamPriorityRange`).
    pub fn stream_priority_range(&self) -> Result<PriorityRange> {
        self.rt.stream_priority_range(self.ordinal)
    }

    /// A new stream with a priority (`hipStreamCreateWithPriority`); a
    /// priority outside [`Device::stream_priority_range`] is clamped into it.
    pub fn create_stream_with_priority(&self, flags: StreamFlags, priority: i32) -> Result<Stream> {
        let priority = self.stream_priority_range()?.clamp(priority);
        let raw = self.rt.backend().stream_create_with_priority(self.ordinal, flags, priority)?;
        Ok(Stream::register(&self.rt, raw, flags, true))
    }

    /// Whether this device can access `peer`'s memory (`hipDeviceCanAccessPeer`).
    pub fn can_access_peer(&self, peer: &Device) -> Result<bool> {
        self.rt.can_access_peer(self.ordinal, peer.ordinal)
    }

    /// Lets this device's work access `peer`'s memory (`hipDeviceEnablePeerAccess`).
    pub fn enable_peer_access(&self, peer: &Device) -> Result<()> {
        self.rt.enable_peer_access(self.ordinal, peer.ordinal)
    }

    /// Revokes it (`hipDeviceDisablePeerAccess`).
    pub fn disable_peer_access(&self, peer: &Device) -> Result<()> {
        self.rt.disable_peer_access(self.ordinal, peer.ordinal)
    }
}

impl Stream {
    /// The stream's priority (`hipStreamGetPriority`); 0 for the null stream.
    pub fn priority(&self) -> Result<i32> {
        self.runtime().backend().stream_priority(self.raw())
    }
}
