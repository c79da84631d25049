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
//!
//! `tensor.record_stream(s)` reaches a pluggable allocator only through the
//! function its `set_record_stream_fn` registers: without
//! `hipmem_torch_record_stream` PyTorch drops it, and memory used on a second
//! stream could be handed out again by its first stream's next allocation
//! while the second still reads it. With it, a block recorded on other
//! streams is freed on a stream of hipmem's own for its device (one per
//! device, made on first use) after that stream has waited for the block's
//! stream and every recorded one: no stream reuses it before all the work
//! queued on them by the free has completed, and none of PyTorch's streams
//! gets a dependency it did not ask for (the approach of PyTorch's own
//! `cudaMallocAsync` backend).

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use hipmem_rs::{DevicePtr, Error, PoolAttribute, Result, Stream, StreamFlags};

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

/// Runs a body of a `void` entry point: an error or a panic is logged and
/// recorded, never raised into PyTorch.
fn void_call(what: &str, body: impl FnOnce() -> Result<()>) {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => failed(what, &e),
        Err(_) => failed(what, &Error::Unknown("a panic was caught".into())),
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
        if RECORDED_COUNT.load(Ordering::Acquire) > 0 {
            // A record left by a block freed outside hipmem_torch_free must
            // not apply to the new block at its address.
            forget_record(p.0 as usize);
        }
        Ok(p.0 as usize as *mut c_void)
    })
}

/// Streams each block was recorded on (`hipmem_torch_record_stream`), by
/// address, until the block is freed; and how many blocks have records, so
/// that a free of a block that has none costs one atomic load.
static RECORDED: Mutex<Option<HashMap<usize, Vec<usize>>>> = Mutex::new(None);
static RECORDED_COUNT: AtomicUsize = AtomicUsize::new(0);

fn recorded() -> std::sync::MutexGuard<'static, Option<HashMap<usize, Vec<usize>>>> {
    RECORDED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes and returns the streams `ptr` was recorded on.
fn forget_record(ptr: usize) -> Vec<usize> {
    let mut table = recorded();
    let streams = table.as_mut().and_then(|t| t.remove(&ptr)).unwrap_or_default();
    if !streams.is_empty() {
        RECORDED_COUNT.fetch_sub(1, Ordering::AcqRel);
    }
    streams
}

/// `recordStream` of PyTorch's pluggable allocator (registered with
/// `CUDAPluggableAllocator.allocator().set_record_stream_fn`): the block at
/// `ptr` is also used on `stream` (PyTorch's `tensor.record_stream(stream)`),
/// so it is not reused by any stream before the work queued on `stream` by
/// the time of its free has completed. A null pointer is ignored; recording
/// the block's own stream, or a stream twice, changes nothing. A pointer that
/// is not the start of a live block is not checked here (PyTorch passes its
/// own allocations); its record is dropped when hipmem next hands out that
/// address.
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_record_stream(ptr: *mut c_void, stream: hipStream_t) {
    if ptr.is_null() {
        return;
    }
    let (ptr, stream) = (ptr as usize, stream as usize);
    let mut table = recorded();
    let streams = table.get_or_insert_with(HashMap::new).entry(ptr).or_default();
    if streams.is_empty() {
        RECORDED_COUNT.fetch_add(1, Ordering::AcqRel);
    }
    if !streams.contains(&stream) {
        streams.push(stream);
    }
}

/// hipmem's own stream for `device`'s frees of blocks used on several streams
/// (made on first use, non-blocking, kept for the process).
fn unifying_stream(rt: &'static hipmem_rs::Runtime, device: usize) -> Result<&'static Stream> {
    static STREAMS: [OnceLock<Stream>; 64] = [const { OnceLock::new() }; 64];
    let slot = STREAMS
        .get(device)
        .ok_or_else(|| Error::InvalidDevice(format!("device {device}: more than 64 devices")))?;
    if let Some(s) = slot.get() {
        return Ok(s);
    }
    let made = rt.device(device)?.create_stream_with_flags(StreamFlags { non_blocking: true })?;
    // Another thread may have made one meanwhile: the first kept wins, the
    // other is dropped (destroyed) here.
    Ok(slot.get_or_init(|| made))
}

/// Frees `ptr`, allocated on `stream` and recorded on `others`, on `device`'s
/// unifying stream once that has waited for `stream` and each of `others`.
/// If a wait cannot be queued (a recorded stream of another device, say),
/// every device is synchronized instead (the work is then complete) and the
/// block freed on `stream`: never reused early.
fn free_after_uses(
    rt: &'static hipmem_rs::Runtime,
    device: usize,
    ptr: DevicePtr,
    stream: hipStream_t,
    others: &[usize],
) -> Result<()> {
    let waited = unifying_stream(rt, device).and_then(|unify| {
        handles::with_stream_on(rt, device, stream, |s| unify.wait_for(s))?;
        for &other in others.iter().filter(|&&o| o != stream as usize) {
            handles::with_stream_on(rt, device, other as hipStream_t, |s| unify.wait_for(s))?;
        }
        Ok(unify)
    });
    let unify = match waited {
        Ok(unify) => unify,
        Err(e) => {
            tracing::warn!(target: "hipmem::torch", "a block recorded on other streams: {e}; synchronizing the devices before freeing it");
            for d in 0..rt.device_count() {
                rt.device_synchronize(d)?;
            }
            return free_on(rt, device, ptr, stream);
        }
    };
    rt.free_async(ptr, unify)?;
    // A marker behind the free: the pools learn that it completed (and the
    // block is free for every stream) as soon as the device gets there.
    // (Without it they learn it on a later slow path: nothing is lost.)
    let core = unify.core();
    let _ = rt.record_marker(core.clock(), core.raw());
    Ok(())
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
    void_call("hipmem_torch_free", || {
        if ptr.is_null() {
            return Ok(());
        }
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        let p = DevicePtr(ptr as usize as u64);
        if RECORDED_COUNT.load(Ordering::Acquire) > 0 {
            let others = forget_record(ptr as usize);
            if others.iter().any(|&o| o != stream as usize) {
                return free_after_uses(rt, device, p, stream, &others);
            }
        }
        free_on(rt, device, p, stream)
    })
}

/// Frees `ptr` in the order of `stream` (PyTorch's stream handle).
fn free_on(
    rt: &'static hipmem_rs::Runtime,
    device: usize,
    ptr: DevicePtr,
    stream: hipStream_t,
) -> Result<()> {
    handles::with_stream_on(rt, device, stream, |s| rt.free_async(ptr, s))
}

/// `torch.cuda.empty_cache()` for hipmem: waits for `device`, then releases
/// every byte its current pool holds that no live allocation uses
/// (`hipDeviceSynchronize` + `hipMemPoolTrimTo(pool, 0)`).
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_empty_cache(device: c_int) -> hipError_t {
    call(|| {
        let rt = rt()?;
        empty_cache_of(rt, device_ordinal(rt, device)?)
    })
}

/// Waits for `device`, then trims its current pool to its live bytes.
fn empty_cache_of(rt: &hipmem_rs::Runtime, device: usize) -> Result<()> {
    rt.device_synchronize(device)?;
    rt.mem_pool(device)?.trim_to(0)
}

/// `torch.cuda.empty_cache()` for hipmem, for every device: PyTorch calls a
/// pluggable allocator's `reset_fn` (registered with `set_reset_fn`, as
/// `hipmem_torch.use_hipmem` does) from `empty_cache`, with no device. Each
/// device is synchronized and its current pool gives back every byte no live
/// allocation uses, as [`hipmem_torch_empty_cache`] does for one. A failure
/// is logged and recorded, never raised into PyTorch.
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_reset() {
    void_call("hipmem_torch_reset", || {
        let rt = rt()?;
        // Every device, the first failure reported.
        (0..rt.device_count()).map(|device| empty_cache_of(rt, device)).fold(Ok(()), Result::and)
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
