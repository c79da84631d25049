//! Peer access between devices: `hipDeviceCanAccessPeer`,
//! `hipDeviceEnablePeerAccess`, `hipDeviceDisablePeerAccess`,
//! `hipMemcpyPeer(Async)`.

use std::ffi::{c_int, c_uint, c_void};

use hipmem_rs::{DevicePtr, Error, Result, Runtime};

use crate::types::*;
use crate::{call, current_device, device_ordinal, handles, non_null, rt};

/// `hipDeviceCanAccessPeer`: null output → InvalidValue; a device and
/// itself → 0 and Success (HIP answers this before it checks the
/// ordinals); a bad ordinal → InvalidDevice.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceCanAccessPeer(
    canAccessPeer: *mut c_int,
    deviceId: c_int,
    peerDeviceId: c_int,
) -> hipError_t {
    call(|| {
        non_null(canAccessPeer, "hipDeviceCanAccessPeer: canAccessPeer")?;
        let can = if deviceId == peerDeviceId {
            false
        } else {
            let rt = rt()?;
            let (d, p) = (device_ordinal(rt, deviceId)?, device_ordinal(rt, peerDeviceId)?);
            rt.can_access_peer(d, p)?
        };
        // SAFETY: non-null; a writable int (HIP's contract).
        unsafe { *canAccessPeer = c_int::from(can) };
        Ok(())
    })
}

/// The peer ordinal of the enable/disable calls: a bad one is
/// InvalidDevice.
fn peer_ordinal(rt: &Runtime, peer: c_int) -> Result<usize> {
    device_ordinal(rt, peer)
}

/// `hipDeviceEnablePeerAccess`: lets the current device's work access all
/// of `peerDeviceId`'s memory. `flags != 0` → InvalidValue; a peer that is
/// the current device, does not exist or cannot be accessed →
/// InvalidDevice; enabled already → PeerAccessAlreadyEnabled.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceEnablePeerAccess(peerDeviceId: c_int, flags: c_uint) -> hipError_t {
    call(|| {
        if flags != 0 {
            return Err(Error::InvalidValue(format!(
                "hipDeviceEnablePeerAccess: flags must be 0, not {flags}"
            )));
        }
        let rt = rt()?;
        let peer = peer_ordinal(rt, peerDeviceId)?;
        rt.enable_peer_access(current_device(), peer)
    })
}

/// `hipDeviceDisablePeerAccess`: a peer that is the current device, does
/// not exist or cannot be accessed → InvalidDevice; not enabled →
/// PeerAccessNotEnabled.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceDisablePeerAccess(peerDeviceId: c_int) -> hipError_t {
    call(|| {
        let rt = rt()?;
        let peer = peer_ordinal(rt, peerDeviceId)?;
        rt.disable_peer_access(current_device(), peer)
    })
}

/// Both ordinals of a peer copy (InvalidDevice first, as HIP checks them
/// before anything else).
fn copy_devices(rt: &Runtime, dst: c_int, src: c_int) -> Result<(usize, usize)> {
    Ok((device_ordinal(rt, dst)?, device_ordinal(rt, src)?))
}

/// `hipMemcpyPeer`: copies `sizeBytes` from `src` on `srcDeviceId` to `dst`
/// on `dstDeviceId`; synchronous for the host. A bad ordinal →
/// InvalidDevice (checked first); then size 0 → Success; null, memory that
/// is not device memory, or a range past an allocation → InvalidValue.
/// Peer access need not be enabled.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyPeer(
    dst: *mut c_void,
    dstDeviceId: c_int,
    src: *const c_void,
    srcDeviceId: c_int,
    sizeBytes: usize,
) -> hipError_t {
    call(|| {
        let rt = rt()?;
        let (dd, sd) = copy_devices(rt, dstDeviceId, srcDeviceId)?;
        if sizeBytes == 0 {
            return Ok(());
        }
        let stream = handles::stream(rt, std::ptr::null_mut())?;
        let (d, s) = (DevicePtr(dst as usize as u64), DevicePtr(src as usize as u64));
        rt.memcpy_peer_async(d, dd, s, sd, sizeBytes as u64, stream.raw())?;
        stream.synchronize()
    })
}

/// `hipMemcpyPeerAsync`: as `hipMemcpyPeer`, queued on `stream` (a
/// destroyed stream → InvalidHandle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyPeerAsync(
    dst: *mut c_void,
    dstDeviceId: c_int,
    src: *const c_void,
    srcDevice: c_int,
    sizeBytes: usize,
    stream: hipStream_t,
) -> hipError_t {
    call(|| {
        let rt = rt()?;
        let (dd, sd) = copy_devices(rt, dstDeviceId, srcDevice)?;
        if sizeBytes == 0 {
            return Ok(());
        }
        let stream = handles::stream(rt, stream)?;
        let (d, s) = (DevicePtr(dst as usize as u64), DevicePtr(src as usize as u64));
        rt.memcpy_peer_async(d, dd, s, sd, sizeBytes as u64, stream.raw())
    })
}
