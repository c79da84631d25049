//! Peer access on the CUDA driver: `cuDeviceCanAccessPeer`,
//! `cuCtxEnablePeerAccess` / `cuCtxDisablePeerAccess` between the devices'
//! primary contexts, and `cuMemcpyPeerAsync`.
//!
//! Peer access belongs to the primary contexts, which every backend of the
//! process shares; the set of enabled pairs is therefore kept process-wide,
//! updated from the driver's answers (an "already enabled" or "not
//! enabled" from the driver corrects it).

use std::collections::HashSet;
use std::ffi::{c_int, c_uint};
use std::sync::{Mutex, OnceLock};

use super::driver::{self, CUcontext, CUdevice, CUdeviceptr, CUresult, CUstream};
use super::{CudaBackend, lock};
use crate::backend::peer::PeerAccess;
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};

/// `CUDA_ERROR_PEER_ACCESS_UNSUPPORTED`.
const CUDA_ERROR_PEER_ACCESS_UNSUPPORTED: CUresult = 217;
/// `CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED`.
const CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED: CUresult = 704;
/// `CUDA_ERROR_PEER_ACCESS_NOT_ENABLED`.
const CUDA_ERROR_PEER_ACCESS_NOT_ENABLED: CUresult = 705;

type DeviceCanAccessPeer =
    unsafe extern "C" fn(can_access: *mut c_int, dev: CUdevice, peer: CUdevice) -> CUresult;
type CtxEnablePeerAccess = unsafe extern "C" fn(peer: CUcontext, flags: c_uint) -> CUresult;
type CtxDisablePeerAccess = unsafe extern "C" fn(peer: CUcontext) -> CUresult;
type MemcpyPeerAsync = unsafe extern "C" fn(
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    bytes: usize,
    stream: CUstream,
) -> CUresult;

type MemcpyPeer = unsafe extern "C" fn(
    dst: CUdeviceptr,
    dst_ctx: CUcontext,
    src: CUdeviceptr,
    src_ctx: CUcontext,
    bytes: usize,
) -> CUresult;

struct Entries {
    copy: MemcpyPeer,
    can_access: DeviceCanAccessPeer,
    enable: CtxEnablePeerAccess,
    disable: CtxDisablePeerAccess,
    copy_async: MemcpyPeerAsync,
}

fn entries() -> Result<&'static Entries> {
    static ENTRIES: OnceLock<Result<Entries>> = OnceLock::new();
    let loaded = ENTRIES.get_or_init(|| {
        // SAFETY: each type above is the signature cuda.h gives for the symbol.
        unsafe {
            Ok(Entries {
                copy: driver::symbol("cuMemcpyPeer")?,
                can_access: driver::symbol("cuDeviceCanAccessPeer")?,
                enable: driver::symbol("cuCtxEnablePeerAccess")?,
                disable: driver::symbol("cuCtxDisablePeerAccess")?,
                copy_async: driver::symbol("cuMemcpyPeerAsync")?,
            })
        }
    });
    loaded.as_ref().map_err(Clone::clone)
}

/// Enabled (device, peer) pairs of the process's primary contexts.
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

impl CudaBackend {
    fn peer_pair(&self, device: usize, peer: usize) -> Result<()> {
        self.device(device)?;
        self.device(peer)?;
        if device == peer {
            return Err(Error::InvalidDevice(format!("device {device} is not a peer of itself")));
        }
        Ok(())
    }
}

impl PeerAccess for CudaBackend {
    fn can_access_peer(&self, device: usize, peer: usize) -> Result<bool> {
        let e = entries()?;
        let (dev, other) = (self.device(device)?, self.device(peer)?);
        if device == peer {
            return Ok(false);
        }
        let mut can: c_int = 0;
        // SAFETY: valid out-pointer; both are devices of this driver.
        let r = unsafe { (e.can_access)(&mut can, dev.cu, other.cu) };
        self.check(r, || format!("cuDeviceCanAccessPeer(device {device}, peer {peer})"))?;
        Ok(can != 0)
    }

    fn enable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        let e = entries()?;
        self.peer_pair(device, peer)?;
        if !self.can_access_peer(device, peer)? {
            return Err(Error::InvalidDevice(format!(
                "device {device} cannot access device {peer} directly (cuDeviceCanAccessPeer says no)"
            )));
        }
        let peer_ctx = self.device(peer)?.ctx(self.driver)?.0;
        let _ctx = self.bound(device)?;
        // SAFETY: `peer_ctx` is a primary context retained by this backend;
        // the device's own context is current; flags must be 0.
        let r = unsafe { (e.enable)(peer_ctx, 0) };
        let what = || format!("cuCtxEnablePeerAccess(device {device} -> device {peer})");
        match r {
            CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {
                set_enabled((device, peer), true);
                Err(Error::PeerAccessAlreadyEnabled(format!("{}: access is already enabled", what())))
            }
            CUDA_ERROR_PEER_ACCESS_UNSUPPORTED => {
                Err(Error::InvalidDevice(format!("{}: the driver does not support it", what())))
            }
            r => {
                self.check(r, what)?;
                set_enabled((device, peer), true);
                Ok(())
            }
        }
    }

    fn disable_peer_access(&self, device: usize, peer: usize) -> Result<()> {
        let e = entries()?;
        self.peer_pair(device, peer)?;
        let peer_ctx = self.device(peer)?.ctx(self.driver)?.0;
        let _ctx = self.bound(device)?;
        // SAFETY: as in enable_peer_access.
        let r = unsafe { (e.disable)(peer_ctx) };
        let what = || format!("cuCtxDisablePeerAccess(device {device} -> device {peer})");
        match r {
            CUDA_ERROR_PEER_ACCESS_NOT_ENABLED => {
                set_enabled((device, peer), false);
                Err(Error::PeerAccessNotEnabled(format!("{}: access was never enabled", what())))
            }
            r => {
                self.check(r, what)?;
                set_enabled((device, peer), false);
                Ok(())
            }
        }
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
        let e = entries()?;
        let (dst_ctx, src_ctx) =
            (self.device(dst_device)?.ctx(self.driver)?.0, self.device(src_device)?.ctx(self.driver)?.0);
        let t = self.target(stream)?;
        if size == 0 {
            return Ok(());
        }
        let bytes = Self::to_usize(size, "copy size")?;
        // SAFETY: device addresses only (validated by the driver); both
        // contexts are retained by this backend; the stream is live (held by `t`).
        let r = unsafe { (e.copy_async)(dst.0, dst_ctx, src.0, src_ctx, bytes, t.raw) };
        self.check(r, || {
            format!(
                "cuMemcpyPeerAsync({dst} on device {dst_device} <- {src} on device {src_device}, {size} bytes) on stream {:#x}",
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
        let e = entries()?;
        let (dst_ctx, src_ctx) =
            (self.device(dst_device)?.ctx(self.driver)?.0, self.device(src_device)?.ctx(self.driver)?.0);
        if size == 0 {
            return Ok(());
        }
        let bytes = Self::to_usize(size, "copy size")?;
        let dev = self.bound(dst_device)?;
        // SAFETY: device addresses only (validated by the driver); both
        // contexts are retained by this backend.
        let r = unsafe { (e.copy)(dst.0, dst_ctx, src.0, src_ctx, bytes) };
        self.check(r, || {
            format!(
                "cuMemcpyPeer({dst} on device {dst_device} <- {src} on device {src_device}, {size} bytes)"
            )
        })?;
        // Between two devices' memory cuMemcpyPeer returns before the copy
        // is done (it is ordered with the contexts' work, not the host):
        // wait for it, as this function promises.
        self.synchronize(&dev)
    }
}
