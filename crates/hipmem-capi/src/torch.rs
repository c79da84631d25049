//! PyTorch's allocator interface: the two functions that
//! `torch.cuda.memory.CUDAPluggableAllocator` loads, and the pool's
//! statistics and `empty_cache`, reachable from Python with ctypes.
//!
//! ```python
//! import torch
//! alloc = torch.cuda.memory.CUDAPluggableAllocator(
//!     "libhipmem.so", "hipmem_torch_malloc", "hipmem_torch_free")
//! torch.cuda.memory.change_current_allocator(alloc)   # before any CUDA allocation
//! ```
//!
//! PyTorch passes its own CUDA streams (`cudaStream_t`; 0 is the device's
//! legacy default stream), made outside hipmem: each is adopted on its first
//! use as a stream of the device PyTorch names (see [`crate::handles`]) and
//! found in a per-thread cache afterwards. Memory comes from the device's current pool
//! (`hipDeviceGetMemPool`) in that stream's order, and goes back to it in
//! the order of the stream PyTorch frees on. A failure returns null with the
//! reason logged (`HIPMEM_LOG`), never a crash: PyTorch turns a null into
//! its out-of-memory error.

use std::ffi::{c_int, c_void};

use hipmem_rs::{DevicePtr, Error, PoolAttribute, Result};

use crate::types::*;
use crate::{call, device_ordinal, handles, non_null, record, rt};

/// The four statistics of a pool, in bytes (`hipmem_torch_stats`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipmemPoolStats {
    /// `hipMemPoolAttrReservedMemCurrent`: memory the pool holds.
    pub reserved_current: u64,
    /// `hipMemPoolAttrReservedMemHigh`.
    pub reserved_high: u64,
    /// `hipMemPoolAttrUsedMemCurrent`: memory of live allocations.
    pub used_current: u64,
    /// `hipMemPoolAttrUsedMemHigh`.
    pub used_high: u64,
}

/// Logs why a PyTorch call failed (on standard error, unless
/// `HIPMEM_LOG=off`) and records it for `hipGetLastError`.
fn failed(what: &str, e: &Error) {
    record(e.code());
    static QUIET: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if !*QUIET.get_or_init(|| std::env::var("HIPMEM_LOG").is_ok_and(|v| v == "off")) {
        eprintln!("hipmem: {what}: {} ({})", e.message(), hipmem_rs::error::name_of_code(e.code()));
    }
}

/// Runs a body that returns a pointer; a panic or an error gives null.
fn pointer_call(what: &str, body: impl FnOnce() -> Result<*mut c_void>) -> *mut c_void {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            failed(what, &e);
            std::ptr::null_mut()
        }
        Err(_) => {
            failed(what, &Error::Unknown("a panic was caught".into()));
            std::ptr::null_mut()
        }
    }
}

/// `malloc` of PyTorch's pluggable allocator: `size` bytes on `device`, in
/// the order of `stream`. Size 0 gives null (as `hipMallocAsync`); a
/// negative size, an unknown device or stream, or out of memory give null
/// with the reason logged.
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_malloc(size: isize, device: c_int, stream: hipStream_t) -> *mut c_void {
    pointer_call("hipmem_torch_malloc", || {
        let size = u64::try_from(size)
            .map_err(|_| Error::InvalidValue(format!("hipmem_torch_malloc: negative size {size}")))?;
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        idle_release_once(rt, device);
        let p = handles::with_stream_on(rt, device, stream, |s| rt.malloc_async(size, s))?;
        Ok(p.0 as usize as *mut c_void)
    })
}

/// On the first allocation for `device`: PyTorch synchronizes through its
/// own runtime, so the device's current pool releases idle memory on its
/// own clock (`MemPool::set_idle_release`): a window of
/// `HIPMEM_TORCH_IDLE_RELEASE_MS` (default 100; 0 leaves it off).
fn idle_release_once(rt: &hipmem_rs::Runtime, device: usize) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static DONE: [AtomicBool; 64] = [const { AtomicBool::new(false) }; 64];
    let Some(done) = DONE.get(device) else { return };
    if done.load(Ordering::Relaxed) || done.swap(true, Ordering::AcqRel) {
        return;
    }
    static WINDOW_MS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let ms = *WINDOW_MS.get_or_init(|| {
        std::env::var("HIPMEM_TORCH_IDLE_RELEASE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(100)
    });
    if ms == 0 {
        return;
    }
    if let Ok(pool) = rt.mem_pool(device) {
        // A pool that is not hipmem's own keeps the driver's behaviour.
        let _ = pool.set_idle_release(Some(std::time::Duration::from_millis(ms)));
    }
}

/// `free` of PyTorch's pluggable allocator: gives `ptr` back in the order of
/// `stream` (`size` and `device` are PyTorch's record of the allocation; the
/// pool knows both). Errors are logged, never raised into PyTorch.
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_free(ptr: *mut c_void, size: usize, device: c_int, stream: hipStream_t) {
    let _ = size;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        handles::with_stream_on(rt, device, stream, |s| rt.free_async(DevicePtr(ptr as usize as u64), s))
    }));
    match result {
        Ok(Ok(())) => {}
        Ok(Err(e)) => failed("hipmem_torch_free", &e),
        Err(_) => failed("hipmem_torch_free", &Error::Unknown("a panic was caught".into())),
    }
}

/// `torch.cuda.empty_cache()` for hipmem: waits for `device`, then releases
/// every byte its current pool holds that no live allocation uses
/// (`hipDeviceSynchronize` + `hipMemPoolTrimTo(pool, 0)`).
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_empty_cache(device: c_int) -> hipError_t {
    call(|| {
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        rt.device_synchronize(device)?;
        rt.mem_pool(device)?.trim_to(0)
    })
}

/// The statistics of `device`'s current pool (what PyTorch's
/// `memory_reserved` / `max_memory_reserved` / `memory_allocated` /
/// `max_memory_allocated` read for its own allocator). Null `out` is
/// InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipmem_torch_stats(device: c_int, out: *mut hipmemPoolStats) -> hipError_t {
    call(|| {
        non_null(out, "hipmem_torch_stats: out")?;
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        let s = rt.mem_pool(device)?.stats();
        let stats = hipmemPoolStats {
            reserved_current: s.reserved_current,
            reserved_high: s.reserved_high,
            used_current: s.used_current,
            used_high: s.used_high,
        };
        // SAFETY: non-null; points to a writable hipmemPoolStats (this function's contract).
        unsafe { out.write(stats) };
        Ok(())
    })
}

/// Resets the high watermarks of `device`'s current pool to their current
/// values (`torch.cuda.reset_peak_memory_stats` for hipmem).
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_reset_peak(device: c_int) -> hipError_t {
    call(|| {
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        let pool = rt.mem_pool(device)?;
        pool.set_attribute(PoolAttribute::ReservedMemHigh, 0)?;
        pool.set_attribute(PoolAttribute::UsedMemHigh, 0)
    })
}
