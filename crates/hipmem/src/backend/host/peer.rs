//! Peer access on the CPU emulation: every pair of distinct emulated
//! devices can reach each other (they share the host's memory), access is
//! granted and revoked per ordered pair exactly as the driver does it, and
//! a peer copy is an ordinary queued copy on the stream.
#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::sync::Mutex;

use super::HostBackend;
use crate::backend::peer::PeerAccess;
use crate::backend::{Backend, DevicePtr, RawStream};
use crate::error::{Error, Result};

/// The ordered pairs (device, peer) with access enabled.
#[derive(Debug, Default)]
pub(crate) struct HostPeers {
    enabled: Mutex<HashSet<(usize, usize)>>,
}

impl HostPeers {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(usize, usize)>> {
        self.enabled.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl HostBackend {
    fn check_pair(&self, device: usize, peer: usize) -> Result<()> {
        self.device(device)?;
        self.device(peer)?;
        if device == peer {
            return Err(Error::InvalidDevice(format!("device {device} is not a peer of itself")));
        }
        Ok(())
    }
}

impl PeerAccess for HostBackend {
    fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool> {
        self.device(device)?;
        self.device(peer)?;
        Ok(device != peer)
    }

    fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        self.check_pair(device, peer)?;
        if !self.peers.lock().insert((device, peer)) {
            return Err(Error::PeerAccessAlreadyEnabled(format!(
                "access from device {device} to device {peer} is already enabled"
            )));
        }
        Ok(())
    }

    fn disable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        self.check_pair(device, peer)?;
        if !self.peers.lock().remove(&(device, peer)) {
            return Err(Error::PeerAccessNotEnabled(format!(
                "access from device {device} to device {peer} was never enabled"
            )));
        }
        Ok(())
    }

    fn peer_access_enabled(&self, device: usize, peer: usize) -> Result<bool> {
        self.device(device)?;
        self.device(peer)?;
        Ok(self.peers.lock().contains(&(device, peer)))
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
        self.device(dst_device)?;
        self.device(src_device)?;
        if size == 0 {
            return Ok(());
        }
        self.copy_device_to_device_async(dst, src, size, stream)
    }

    fn copy_peer(
        &self,
        dst: DevicePtr,
        dst_device: usize,
        src: DevicePtr,
        src_device: usize,
        size: u64,
    ) -> Result<()> {
        self.device(dst_device)?;
        self.device(src_device)?;
        if size == 0 {
            return Ok(());
        }
        self.copy_device_to_device(dst, src, size)
    }
}
