//! Peer access between devices: the capability trait.
//!
//! A backend with more than one device hands out a [`PeerAccess`] from
//! [`Backend::peer_access`](super::Backend::peer_access). Its operations are
//! the driver's: whether one device can reach another's memory directly,
//! enabling and disabling that access (for all of the peer's memory, present
//! and future, as `hipDeviceEnablePeerAccess` does), and copies between two
//! devices' memory queued on a stream.
//!
//! The runtime checks ordinals and the "a device is not its own peer" rule
//! before it calls here; a backend still returns an error value (never
//! panics) for anything it is given.

use super::{DevicePtr, RawStream};
use crate::error::Result;

/// Direct access from one device's work to another device's memory.
pub trait PeerAccess: Send + Sync {
    /// Whether work on `device` can access memory of `peer` directly once
    /// access is enabled (`hipDeviceCanAccessPeer`). `device != peer`.
    fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool>;

    /// Lets work on `device` access all of `peer`'s device memory
    /// (`hipDeviceEnablePeerAccess` with `device` current). Enabling it
    /// twice is PeerAccessAlreadyEnabled; a pair that cannot access each
    /// other is InvalidDevice.
    fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()>;

    /// Revokes what [`PeerAccess::enable_peer_access`] granted; access that
    /// is not enabled is PeerAccessNotEnabled.
    fn disable_peer_access(&self, device: usize, peer: usize) -> Result<()>;

    /// Whether access from `device` to `peer` is enabled now.
    fn peer_access_enabled(&self, device: usize, peer: usize) -> Result<bool>;

    /// Queues a copy of `size` bytes from `src` (memory of `src_device`) to
    /// `dst` (memory of `dst_device`) on `stream` (`hipMemcpyPeerAsync`).
    /// Works whether or not peer access is enabled (the driver stages it
    /// through the host when it is not).
    fn copy_peer_async(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        size: u64,
        stream: RawStream,
    ) -> Result<()>;

    /// Copies `size` bytes between two devices' memory and returns when it
    /// is done (`cuMemcpyPeer`, ordered after the legacy null streams'
    /// work, then a wait for the destination's context: between two
    /// devices' memory the driver returns before the copy is done).
    fn copy_peer(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        size: u64,
    ) -> Result<()>;
}
