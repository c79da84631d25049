//! Peer access on HIP: `hipDeviceCanAccessPeer`, `hipDeviceEnablePeerAccess`
//! / `hipDeviceDisablePeerAccess` (from the current device to a peer),
//! `hipMemcpyPeerAsync` and `hipMemcpyPeer`. A library without them has no
//! [`PeerAccess`] (peer copies are then device-to-device copies, and a
//! kernel reaches no other device's plain memory).
//!
//! HIP has no query of the enabled pairs, and peer access belongs to the
//! runtime (every backend of the process shares it): the set of enabled
//! pairs is kept process-wide, updated from the runtime's answers (an
//! "already enabled" or "not enabled" from the runtime corrects it).

use std::collections::HashSet;
use std::ffi::c_int;
use std::sync::Mutex;

use super::sys::{self, hipErrorPeerAccessAlreadyEnabled, hipErrorPeerAccessNotEnabled};
use super::{HipBackend, lock, ptr, to_usize};
use crate::backend::peer::PeerAccess;
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};

/// Enabled (device, peer) pairs of the process's HIP runtime.
static ENABLED: Mutex<Option<HashSet<(usize, usize)>>> = Mutex::new(None);

fn set_enabled(pair: (usize, usize), on: bool) {
    let mut set = lock(&ENABLED);
    let set = set.get_or_insert_with(HashSet::new);
    if on {
        set.insert(pair);
    } else {
        set.remove(&pair);
    }
}

impl HipBackend {
    /// The peer group, where the library has it all.
    pub(super) fn peer(&self) -> Result<&'static sys::Peer> {
        self.api.peer.as_ref().map_err(|missing| {
            Error::NotSupported(format!(
                "the HIP library {} has no {missing}: peer access between devices is not available",
                self.api.library
            ))
        })
    }

    fn peer_pair(&self, device: usize, peer: usize) -> Result<()> {
        self.device(device)?;
        self.device(peer)?;
        if device == peer {
            return Err(Error::InvalidDevice(format!("device {device} is not a peer of itself")));
        }
        Ok(())
    }
}

impl PeerAccess for HipBackend {
    fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool> {
        let p = self.peer()?;
        self.device(device)?;
        self.device(peer)?;
        if device == peer {
            return Ok(false);
        }
        let mut can: c_int = 0;
        // SAFETY: valid out-pointer; the runtime validates both ordinals.
        let r = unsafe { (p.hipDeviceCanAccessPeer)(&mut can, device as c_int, peer as c_int) };
        self.check(r, || format!("hipDeviceCanAccessPeer(device {device}, peer {peer})"))?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        let p = self.peer()?;
        self.peer_pair(device, peer)?;
        if !self.can_access_peer(device, peer)? {
            return Err(Error::InvalidDevice(format!(
                "device {device} cannot access device {peer} directly (hipDeviceCanAccessPeer says no)"
            )));
        }
        let _device = self.bound(device)?;
        // SAFETY: plain values (flags must be 0); `device` is current.
        let r = unsafe { (p.hipDeviceEnablePeerAccess)(peer as c_int, 0) };
        let what = || format!("hipDeviceEnablePeerAccess(device {device} -> device {peer})");
        if r == hipErrorPeerAccessAlreadyEnabled {
            set_enabled((device, peer), true);
            return Err(Error::PeerAccessAlreadyEnabled(format!("{}: access is already enabled", what())));
        }
        self.check(r, what)?;
        set_enabled((device, peer), true);
        Ok(())
    }

    fn disable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        let p = self.peer()?;
        self.peer_pair(device, peer)?;
        let _device = self.bound(device)?;
        // SAFETY: a plain value; `device` is current.
        let r = unsafe { (p.hipDeviceDisablePeerAccess)(peer as c_int) };
        let what = || format!("hipDeviceDisablePeerAccess(device {device} -> device {peer})");
        if r == hipErrorPeerAccessNotEnabled {
            set_enabled((device, peer), false);
            return Err(Error::PeerAccessNotEnabled(format!("{}: access was never enabled", what())));
        }
        self.check(r, what)?;
        set_enabled((device, peer), false);
        Ok(())
    }

    fn peer_access_enabled(&self, device: usize, peer: usize) -> Result<bool> {
        self.device(device)?;
        self.device(peer)?;
        Ok(lock(&ENABLED).as_ref().is_some_and(|s| s.contains(&(device, peer))))
    }

    fn copy_peer_async(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        size: u64,
        stream: RawStream,
    ) -> Result<()> {
        let p = self.peer()?;
        self.device(dst_device)?;
        self.device(src_device)?;
        let t = self.target(stream)?;
        if size == 0 {
            return Ok(());
        }
        let bytes = to_usize(size, "copy size")?;
        // SAFETY: device addresses only (validated by the runtime); the
        // stream is live (held by `t`) and its device current.
        let r = unsafe {
            (p.hipMemcpyPeerAsync)(
                ptr(dst),
                dst_device as c_int,
                ptr(src).cast_const(),
                src_device as c_int,
                bytes,
                t.raw,
            )
        };
        self.check(r, || {
            format!(
                "hipMemcpyPeerAsync({dst} on device {dst_device} <- {src} on device {src_device}, {size} bytes) on stream {:#x}",
                stream.handle
            )
        })
    }

    fn copy_peer(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        size: u64,
    ) -> Result<()> {
        let p = self.peer()?;
        self.device(dst_device)?;
        self.device(src_device)?;
        if size == 0 {
            return Ok(());
        }
        let bytes = to_usize(size, "copy size")?;
        let _device = self.bound(dst_device)?;
        // SAFETY: device addresses only (validated by the runtime).
        let r = unsafe {
            (p.hipMemcpyPeer)(
                ptr(dst),
                dst_device as c_int,
                ptr(src).cast_const(),
                src_device as c_int,
                bytes,
            )
        };
        self.check(r, || {
            format!(
                "hipMemcpyPeer({dst} on device {dst_device} <- {src} on device {src_device}, {size} bytes)"
            )
        })?;
        // (As the CUDA backend: the copy is done when this returns, whatever
        // the runtime's own synchronization of device-to-device copies.)
        self.synchronize(dst_device)
    }
}
