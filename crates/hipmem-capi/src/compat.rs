//! The remaining runtime calls memory-centric HIP programs make:
//! `hipDeviceReset`, `hipMemcpyWithStream`, and HIP's deprecated spellings
//! of page-locked allocation (`hipHostAlloc`, `hipMallocHost`, `hipFreeHost`).

use std::ffi::{c_uint, c_void};

use crate::explicit::hipMemcpyAsync;
use crate::pinned::{hipHostFree, hipHostMalloc};
use crate::types::*;
use crate::{call, current_device, handles, rt};

/// `hipDeviceReset` of the current device: waits for it, destroys the
/// streams and events created on it, frees its `hipMalloc` and
/// `hipMallocPitch` allocations, releases its default pool's unused memory
/// and revokes the peer access it enabled. Memory of other kinds (pools,
/// page-locked, managed, virtual) stays with its owner. Always succeeds on
/// a working device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceReset() -> hipError_t {
    call(|| {
        let rt = rt()?;
        let device = current_device();
        rt.device_synchronize(device)?;
        let (streams, events) = handles::remove_device_handles(device);
        drop(streams);
        drop(events);
        rt.reset_device(device).map(|_| ())
    })
}

/// `hipMemcpyWithStream`: `hipMemcpyAsync` on `stream`, then waits for the
/// stream; `hipMemcpyAsync`'s rules.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyWithStream(
    dst: *mut c_void,
    src: *const c_void,
    sizeBytes: usize,
    kind: hipMemcpyKind,
    stream: hipStream_t,
) -> hipError_t {
    // SAFETY: the same contract as hipMemcpyAsync's.
    let r = unsafe { hipMemcpyAsync(dst, src, sizeBytes, kind, stream) };
    if r != hipSuccess || sizeBytes == 0 {
        return r;
    }
    call(|| handles::stream(rt()?, stream)?.synchronize())
}

/// `hipHostAlloc` (HIP: deprecated): `hipHostMalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostAlloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hipError_t {
    // SAFETY: the same contract as hipHostMalloc's.
    unsafe { hipHostMalloc(ptr, size, flags) }
}

/// `hipMallocHost` (HIP: deprecated): `hipHostMalloc` with default flags.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocHost(ptr: *mut *mut c_void, size: usize) -> hipError_t {
    // SAFETY: the same contract as hipHostMalloc's.
    unsafe { hipHostMalloc(ptr, size, 0) }
}

/// `hipFreeHost` (HIP: deprecated): `hipHostFree`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFreeHost(ptr: *mut c_void) -> hipError_t {
    // SAFETY: the same contract as hipHostFree's.
    unsafe { hipHostFree(ptr) }
}
