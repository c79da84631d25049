//! Peer access between devices (`hipDeviceCanAccessPeer`,
//! `hipDeviceEnablePeerAccess`, `hipDeviceDisablePeerAccess`,
//! `hipMemcpyPeer(Async)`) and the rule that decides whether a kernel on one
//! device may touch memory of another.
//!
//! Which memory a device's kernels reach, as CUDA and HIP define it:
//! - its own device memory, managed memory and page-locked host memory;
//! - another device's `hipMalloc` memory once peer access to that device is
//!   enabled (`hipDeviceEnablePeerAccess`, which maps all of the peer's
//!   memory, present and future);
//! - another device's pool memory once the pool grants the device access
//!   (`hipMemPoolSetAccess`); a pool made of separate device allocations
//!   (`PoolBacking::Segments`) is plain device memory, so it needs peer
//!   access as well;
//! - a virtual-memory mapping once `hipMemSetAccess` granted the device
//!   access to it (seed 001: this maps only what is shared, and costs
//!   nothing at allocation time).
//!
//! The core decides the first two; what a pool or a mapping grants is the
//! business of the subsystem that owns it, which answers through its
//! [`CoreHooks`](super::CoreHooks) (`device_access`, `device_reaches`).
//!
//! The built-in kernels check this before they are queued, on every
//! backend: on the CPU emulation it is the emulated hardware's rule, and on
//! a GPU it turns what would be a fault (which ends the context) into an
//! error value.
#![forbid(unsafe_code)]

use super::{Allocation, Device, MemoryKind, Runtime};
use crate::backend::peer::PeerAccess;
use crate::backend::virtual_memory::AccessFlags;
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};

impl Device {
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

impl Runtime {
    fn peer_access_backend(&self) -> Result<&dyn PeerAccess> {
        self.backend().peer_access().ok_or_else(|| {
            Error::NotSupported(format!(
                "the {} backend has no peer access between devices",
                self.backend_kind()
            ))
        })
    }

    /// Checks both ordinals; a device is not its own peer (InvalidDevice).
    fn check_peer_pair(&self, device: usize, peer: usize, what: &str) -> Result<()> {
        self.check_device(device).map_err(|e| e.context(what))?;
        self.check_device(peer).map_err(|e| e.context(what))?;
        if device == peer {
            return Err(Error::InvalidDevice(format!("{what}: device {device} is not a peer of itself")));
        }
        Ok(())
    }

    /// `hipDeviceCanAccessPeer`: whether `device`'s work can access `peer`'s
    /// memory once peer access is enabled. A device and itself: false (HIP's
    /// answer). A bad ordinal is InvalidDevice.
    pub fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool> {
        self.check_device(device)?;
        self.check_device(peer)?;
        if device == peer {
            return Ok(false);
        }
        self.peer_access_backend()?.can_access_peer(device, peer)
    }

    /// `hipDeviceEnablePeerAccess` from `device` to `peer`. A device that is
    /// not a peer (itself, a bad ordinal, or one it cannot access) is
    /// InvalidDevice; enabling twice is PeerAccessAlreadyEnabled.
    pub fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        self.check_peer_pair(device, peer, "hipDeviceEnablePeerAccess")?;
        let backend = self.peer_access_backend()?;
        if !backend.can_access_peer(device, peer)? {
            return Err(Error::InvalidDevice(format!(
                "hipDeviceEnablePeerAccess: device {device} cannot access device {peer} directly"
            )));
        }
        backend.enable_peer_access(device, peer)
    }

    /// `hipDeviceDisablePeerAccess` from `device` to `peer`. Not a peer:
    /// InvalidDevice; access never enabled: PeerAccessNotEnabled.
    ///
    /// Waits for both devices' queued work first: the driver takes the
    /// mapping away at once, and a copy or kernel still using it faults
    /// (measured on two H200s: a 1 GiB peer copy in flight when access was
    /// disabled took an MMU fault, Xid 31, and every later call on both
    /// devices failed with CUDA_ERROR_LAUNCH_FAILED). It waits even where
    /// hipmem has not seen the access enabled: the program may have enabled
    /// it through the CUDA runtime.
    pub fn disable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        self.check_peer_pair(device, peer, "hipDeviceDisablePeerAccess")?;
        let backend = self.peer_access_backend()?;
        if !backend.can_access_peer(device, peer)? {
            return Err(Error::InvalidDevice(format!(
                "hipDeviceDisablePeerAccess: device {device} cannot access device {peer} directly"
            )));
        }
        self.device_synchronize(device).map_err(|e| e.context("hipDeviceDisablePeerAccess"))?;
        self.device_synchronize(peer).map_err(|e| e.context("hipDeviceDisablePeerAccess"))?;
        backend.disable_peer_access(device, peer)
    }

    /// Whether peer access from `device` to `peer` is enabled (false for a
    /// device and itself, and on a backend without peer access).
    pub fn peer_access_enabled(&self, device: usize, peer: usize) -> Result<bool> {
        self.check_device(device)?;
        self.check_device(peer)?;
        if device == peer {
            return Ok(false);
        }
        match self.backend().peer_access() {
            Some(p) => p.peer_access_enabled(device, peer),
            None => Ok(false),
        }
    }

    /// `hipMemcpyPeerAsync`: copies `size` bytes from `src` (on `src_device`)
    /// to `dst` (on `dst_device`) in `stream`'s order. Size 0 succeeds before
    /// any check; a bad ordinal is InvalidDevice; null pointers, memory that
    /// is not device memory and ranges past an allocation are InvalidValue.
    /// Peer access need not be enabled (without it the copy is staged).
    pub fn memcpy_peer_async(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        size: u64,
        stream: RawStream,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        self.check_device(dst_device).map_err(|e| e.context("hipMemcpyPeer destination device"))?;
        self.check_device(src_device).map_err(|e| e.context("hipMemcpyPeer source device"))?;
        if dst.is_null() || src.is_null() {
            return Err(Error::InvalidValue(format!(
                "hipMemcpyPeer: null {} pointer",
                if dst.is_null() { "destination" } else { "source" }
            )));
        }
        self.check_device_range(dst, size, "hipMemcpyPeer destination")?;
        self.check_device_range(src, size, "hipMemcpyPeer source")?;
        match self.backend().peer_access() {
            Some(p) => p.copy_peer_async(dst, dst_device, src, src_device, size, stream),
            // One device: a peer copy is a device-to-device copy.
            None => self.backend().copy_device_to_device_async(dst, src, size, stream),
        }
    }

    /// `hipMemcpyPeer`: [`Runtime::memcpy_peer_async`] on `dst_device`'s null
    /// stream, then waits for it.
    pub fn memcpy_peer(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        size: u64,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        self.check_device(dst_device).map_err(|e| e.context("hipMemcpyPeer destination device"))?;
        let null = RawStream::null(dst_device);
        self.memcpy_peer_async(dst, dst_device, src, src_device, size, null)?;
        self.backend().stream_synchronize(null)
    }

    /// Checks a kernel's range on `device` (see [`Runtime::check_device_range`])
    /// and that `device` reaches the memory (the module's rules).
    pub(crate) fn check_kernel_range_on(
        &self,
        device: usize,
        ptr: DevicePtr,
        bytes: u64,
        kernel: &str,
    ) -> Result<()> {
        let a = self.check_device_range(ptr, bytes, kernel)?;
        self.check_kernel_reach(device, &a, ptr, bytes, kernel)
    }

    /// The access `device`'s work has to the memory at `ptr`, which lies in
    /// `a` (the module's rules): read-write for its own memory, managed and
    /// page-locked memory; for another device's `hipMalloc` memory what
    /// peer access says; for pool memory and mappings, what the subsystem
    /// that owns them says (the pool's access list, the mapping's access),
    /// asked through the core's hooks.
    pub fn pointer_access(&self, device: usize, a: &Allocation, ptr: DevicePtr) -> Result<AccessFlags> {
        self.check_device(device)?;
        match a.kind {
            MemoryKind::Device if a.device != device => self.peer_flags(device, a.device),
            MemoryKind::PoolSegment(_) | MemoryKind::DriverPool(_) if a.device != device => {
                self.hooked_device_access(device, a, ptr).unwrap_or_else(|| Err(gone(ptr, a)))
            }
            MemoryKind::VmmMapping => {
                self.hooked_device_access(device, a, ptr).unwrap_or_else(|| Err(gone(ptr, a)))
            }
            _ => Ok(AccessFlags::ReadWrite),
        }
    }

    /// ReadWrite where peer access from `device` to `owner` is enabled, else None.
    pub(crate) fn peer_flags(&self, device: usize, owner: usize) -> Result<AccessFlags> {
        Ok(if self.peer_access_enabled(device, owner)? { AccessFlags::ReadWrite } else { AccessFlags::None })
    }

    /// Whether a kernel on `device` may touch `[ptr, ptr + len)` inside `a`
    /// (both ends are checked: adjacent mappings may differ).
    pub(crate) fn check_kernel_reach(
        &self,
        device: usize,
        a: &Allocation,
        ptr: DevicePtr,
        len: u64,
        what: &str,
    ) -> Result<()> {
        let last = DevicePtr(ptr.0 + len.max(1) - 1);
        for at in [ptr, last] {
            let reached = match a.kind {
                // Mappings: the subsystem's own table (no driver call per launch).
                MemoryKind::VmmMapping => self.hooked_device_reaches(device, a, at).unwrap_or(Ok(false))?,
                MemoryKind::Device | MemoryKind::PoolSegment(_) | MemoryKind::DriverPool(_)
                    if a.device != device =>
                {
                    self.pointer_access(device, a, at)? != AccessFlags::None
                }
                _ => true,
            };
            if !reached {
                let how = match a.kind {
                    MemoryKind::Device => {
                        format!("hipDeviceEnablePeerAccess({}) on device {device}", a.device)
                    }
                    MemoryKind::VmmMapping => format!("hipMemSetAccess for device {device}"),
                    MemoryKind::PoolSegment(_) | MemoryKind::DriverPool(_) => format!(
                        "hipMemPoolSetAccess for device {device} (and, for a pool of separate allocations, \
                         hipDeviceEnablePeerAccess({}))",
                        a.device
                    ),
                    _ => "access".to_owned(),
                };
                return Err(Error::InvalidValue(format!(
                    "{what}: a kernel on device {device} cannot reach {at}, memory of device {} \
                     ({:?}), without {how}",
                    a.device, a.kind
                )));
            }
        }
        Ok(())
    }
}

/// Pool memory or a mapping that no subsystem claims: its owner is gone.
fn gone(ptr: DevicePtr, a: &Allocation) -> Error {
    Error::InvalidValue(format!("{ptr} is {:?} memory whose owner no longer exists", a.kind))
}
