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
//! the order of the stream PyTorch frees on. PyTorch takes whatever its
//! pluggable allocator's `malloc` returns as memory (a null becomes a tensor
//! without any, and the kernel that writes it faults), so a failed
//! allocation throws a C++ exception into PyTorch, which raises it in Python
//! (`cxx_exception.rs`; null where the process has no C++ runtime or
//! raising is turned off). Other failures are logged (`HIPMEM_LOG`) and
//! recorded, never raised into PyTorch.
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
//! `cudaMallocAsync` backend). Where every recorded stream is idle at the
//! free (a query each), the block is freed on its own stream instead, as
//! one without records.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
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

/// Runs a body; a panic becomes an error.
fn guarded<T>(body: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(body))
        .unwrap_or_else(|_| Err(Error::Unknown("a panic was caught".into())))
}

/// Whether `hipmem_torch_malloc` raises a C++ exception on failure
/// (`hipmem_torch_raise_on_failure`; on by default).
static RAISE: AtomicBool = AtomicBool::new(true);

/// What `hipmem_torch_malloc` raises: PyTorch's own wording first ("CUDA out
/// of memory." on the CUDA backend, "HIP out of memory." on HIP), which
/// tools that catch out-of-memory errors to retry with less look for, then
/// hipmem's reason and the HIP error.
fn failure_text(size: isize, device: c_int, e: &Error) -> String {
    let code = hipmem_rs::error::name_of_code(e.code());
    if !matches!(e, Error::OutOfMemory(_)) {
        return format!("hipmem_torch_malloc of {size} bytes on device {device}: {} ({code})", e.message());
    }
    let kind = match rt().map(|rt| rt.backend_kind()) {
        Ok(hipmem_rs::BackendKind::Cuda) => "CUDA",
        Ok(hipmem_rs::BackendKind::Hip) => "HIP",
        _ => "Device",
    };
    format!(
        "{kind} out of memory. Tried to allocate {size} bytes on device {device} from hipmem's pool: {} ({code})",
        e.message()
    )
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
/// the order of `stream`. Size 0 gives null (as `hipMallocAsync`). A
/// negative size, an unknown device or stream, or out of memory: where the
/// process has a C++ runtime (PyTorch's does) and raising is on (the
/// default, `hipmem_torch_raise_on_failure`), a C++ `std::runtime_error`
/// with the reason is thrown into the caller, which PyTorch raises in
/// Python as a `RuntimeError` ("CUDA out of memory. ..." where memory ran
/// out); otherwise null, with the reason logged. (PyTorch takes a null from
/// a pluggable allocator as memory: the tensor would have none.)
#[unsafe(no_mangle)]
pub extern "C-unwind" fn hipmem_torch_malloc(size: isize, device: c_int, stream: hipStream_t) -> *mut c_void {
    let result = guarded(|| {
        let bytes = u64::try_from(size)
            .map_err(|_| Error::InvalidValue(format!("hipmem_torch_malloc: negative size {size}")))?;
        let (rt, device) = torch_rt(device)?;
        idle_release_once(rt, device);
        let p = handles::with_stream_on(rt, device, stream, |s| {
            if s.device() != device {
                return Err(Error::InvalidValue(format!(
                    "hipmem_torch_malloc: stream {:#x} belongs to device {}, not device {device}",
                    stream as usize,
                    s.device()
                )));
            }
            rt.malloc_async(bytes, s)
        })?;
        if HOT.recorded.load(Ordering::Acquire) > 0 {
            // A record left by a block freed outside hipmem_torch_free must
            // not apply to the new block at its address.
            forget_record(p.0 as usize);
        }
        Ok(p.0 as usize as *mut c_void)
    });
    match result {
        Ok(p) => p,
        Err(e) if RAISE.load(Ordering::Relaxed) && crate::cxx_exception::available() => {
            record(e.code());
            let text = failure_text(size, device, &e);
            // SAFETY: this function is `extern "C-unwind"`, no catch_unwind
            // is active here, and nothing below is left half done: the
            // exception goes to the C++ code that called it (PyTorch's
            // pluggable allocator, whose callers expect exceptions).
            unsafe { crate::cxx_exception::throw_runtime_error(&text) };
            std::ptr::null_mut()
        }
        Err(e) => {
            failed("hipmem_torch_malloc", &e);
            std::ptr::null_mut()
        }
    }
}

/// Whether `hipmem_torch_malloc` raises a C++ exception when it fails (`on`
/// 1, the default) or returns null (0), for callers that are not PyTorch or
/// that check for null. Raising needs a C++ runtime (libstdc++) loaded in
/// the process when hipmem first looks for one: turning it on where there
/// is none is hipErrorNotSupported, and failures return null. Any other
/// `on` is hipErrorInvalidValue.
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_raise_on_failure(on: c_int) -> hipError_t {
    call(|| {
        let on = crate::switch(on, "hipmem_torch_raise_on_failure")?;
        RAISE.store(on, Ordering::Relaxed);
        if on && !crate::cxx_exception::available() {
            return Err(Error::NotSupported(
                "hipmem_torch_raise_on_failure: this process has no C++ runtime (libstdc++) to raise with; failures return null".into(),
            ));
        }
        Ok(())
    })
}

/// Streams each block was recorded on (`hipmem_torch_record_stream`), by
/// address, until the block is freed; and how many blocks have records, so
/// that a free of a block that has none costs one atomic load.
static RECORDED: Mutex<Option<HashMap<usize, Vec<usize>>>> = Mutex::new(None);

/// What every allocation and free of this interface reads, in one cache
/// line: in a framework's step the calls find the allocator's state
/// evicted by the step's own work, and statics the linker scatters cost a
/// line each (five lines a pair before; docs/pool-measurements.md, "Stop 79").
#[repr(C, align(64))]
struct Hot {
    /// The process's runtime (`rt()`), once opened, and its device count.
    rt: OnceLock<(&'static hipmem_rs::Runtime, usize)>,
    /// The primary stream: the device and stream (handle) of the process's
    /// first `hipmem_torch_alloc` that succeeded. Its blocks have no record:
    /// a block without one was allocated there.
    primary: OnceLock<(c_int, usize)>,
    /// How many blocks have a record in `ORIGINS`: while none has, a delete
    /// looks up nothing (most programs allocate on one stream of one device).
    /// (32 bits, counted by [`count_up`] and [`count_down`]: a count that
    /// reaches `u32::MAX` stays there, so that it never reads 0 while
    /// records exist; the lookups then always happen.)
    origins: AtomicU32,
    /// How many blocks have streams in `RECORDED` (counted likewise): while
    /// none has, a free looks up nothing.
    recorded: AtomicU32,
    /// The devices (bit `d` for device `d` below 64) whose pool's idle
    /// release was set up (`idle_release_once`).
    idle_set: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Hot>() == 64);

static HOT: Hot = Hot {
    rt: OnceLock::new(),
    primary: OnceLock::new(),
    origins: AtomicU32::new(0),
    recorded: AtomicU32::new(0),
    idle_set: AtomicU64::new(0),
};

/// Counts one more record in `count` (a saturated count stays saturated).
fn count_up(count: &AtomicU32) {
    let _ = count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_add(1));
}

/// Counts one record fewer in `count` (not below 0; a saturated count stays
/// saturated: it no longer knows how many there are).
fn count_down(count: &AtomicU32) {
    let _ = count
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| (c != u32::MAX).then(|| c.saturating_sub(1)));
}

/// [`rt`] through [`HOT`] (the runtime's own static is a line of its own),
/// with `device` checked as [`device_ordinal`] checks it.
#[inline]
fn torch_rt(device: c_int) -> Result<(&'static hipmem_rs::Runtime, usize)> {
    let &(rt, devices) = match HOT.rt.get() {
        Some(hot) => hot,
        None => {
            let rt = rt()?;
            HOT.rt.get_or_init(|| (rt, rt.device_count()))
        }
    };
    match usize::try_from(device) {
        Ok(d) if d < devices => Ok((rt, d)),
        // (The error, as every entry point words it.)
        _ => Ok((rt, device_ordinal(rt, device)?)),
    }
}

fn recorded() -> std::sync::MutexGuard<'static, Option<HashMap<usize, Vec<usize>>>> {
    RECORDED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes and returns the streams `ptr` was recorded on.
fn forget_record(ptr: usize) -> Vec<usize> {
    let mut table = recorded();
    let streams = table.as_mut().and_then(|t| t.remove(&ptr)).unwrap_or_default();
    if !streams.is_empty() {
        count_down(&HOT.recorded);
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
        count_up(&HOT.recorded);
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

/// Frees `ptr`, allocated on `stream` and recorded on `others`.
///
/// Where every recorded stream has already finished all its work (a loop
/// that reads its loss each step frees its batch after that), nothing can
/// still use the block there: it is freed on its own stream, as a block
/// without records is, at the cost of one query per recorded stream (the
/// first busy one ends the queries). Otherwise it is freed on `device`'s
/// unifying stream once that has waited for `stream` and each of `others`
/// (two waits and a marker more). If a wait cannot be queued (a recorded
/// stream of another device, say), every device is synchronized instead (the
/// work is then complete) and the block freed on `stream`: never reused
/// early.
fn free_after_uses(
    rt: &'static hipmem_rs::Runtime,
    device: usize,
    ptr: DevicePtr,
    stream: hipStream_t,
    others: &[usize],
    release: Release,
) -> Result<()> {
    // The recorded streams other than the block's own, as handles.
    let recorded = || others.iter().filter(|&&o| o != stream as usize).map(|&o| o as hipStream_t);
    // (A query that fails, of a handle that is no stream, say, counts as
    // busy: the slow path below deals with it.)
    let idle =
        recorded().all(|other| handles::with_stream_on(rt, device, other, |s| s.query()).unwrap_or(false));
    if idle {
        return free_on(rt, device, ptr, stream, release);
    }
    let waited = unifying_stream(rt, device).and_then(|unify| {
        handles::with_stream_on(rt, device, stream, |s| unify.wait_for(s))?;
        for other in recorded() {
            handles::with_stream_on(rt, device, other, |s| unify.wait_for(s))?;
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
            return free_on(rt, device, ptr, stream, release);
        }
    };
    release.free(rt, ptr, unify)?;
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
/// `HIPMEM_TORCH_IDLE_RELEASE_MS` (default 100; 0 leaves it off), and
/// places blocks by zones if `HIPMEM_TORCH_ZONE=1`
/// (`MemPool::set_zone_placement`).
fn idle_release_once(rt: &hipmem_rs::Runtime, device: usize) {
    // (Devices from 64 on are not set up: none has that many.)
    let Some(bit) = u32::try_from(device).ok().and_then(|d| 1u64.checked_shl(d)) else { return };
    if HOT.idle_set.load(Ordering::Relaxed) & bit != 0
        || HOT.idle_set.fetch_or(bit, Ordering::AcqRel) & bit != 0
    {
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
        if zone_placement_wanted() {
            // (NotSupported where the pool cannot: it keeps its placement.)
            let _ = pool.set_zone_placement(true);
        }
    }
}

/// Whether the PyTorch interface turns zone placement on
/// (`MemPool::set_zone_placement`): `HIPMEM_TORCH_ZONE=1` (default off).
fn zone_placement_wanted() -> bool {
    static ZONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ZONE.get_or_init(|| std::env::var("HIPMEM_TORCH_ZONE").is_ok_and(|v| v == "1"))
}

/// Where each block that `hipmem_torch_alloc` handed out off the primary
/// stream was allocated (the stream as the caller named it, and the device),
/// by address, until `hipmem_torch_delete` frees it: a lock per shard of
/// addresses, so that threads allocating and freeing at once rarely meet.
type Origins = hipmem_rs::pool::AddrMap<(usize, c_int)>;
const ORIGIN_SHARDS: usize = 64;
const _: () = assert!(ORIGIN_SHARDS == 1 << (64 - 58), "origins_of takes the hash's top 6 bits");
// (How many blocks have a record here, and the primary stream: `HOT`.)
static ORIGINS: [Mutex<Option<Origins>>; ORIGIN_SHARDS] = [const { Mutex::new(None) }; ORIGIN_SHARDS];

fn origins_of(ptr: usize) -> std::sync::MutexGuard<'static, Option<Origins>> {
    // (The top 6 bits of a multiplicative hash: one of the 64 shards.)
    let shard = ((ptr as u64 >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58) as usize;
    ORIGINS[shard].lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes and returns where the block at `ptr` was allocated, if it has a
/// record (it was allocated off the primary stream).
fn forget_origin(ptr: usize) -> Option<(usize, c_int)> {
    if HOT.origins.load(Ordering::Acquire) == 0 {
        return None;
    }
    let origin = origins_of(ptr).as_mut().and_then(|m| m.remove(&(ptr as u64)));
    if origin.is_some() {
        count_down(&HOT.origins);
    }
    origin
}

/// `hipmem_torch_malloc` that also lets [`hipmem_torch_delete`] free the
/// block by its address alone, in the order of the stream it was allocated
/// on: a PyTorch `CUDAAllocator` whose tensors carry only their data pointer
/// to the deleter (see `examples/python/hipmem_torch.py`, `direct=True`)
/// calls these, where PyTorch's pluggable allocator keeps its own locked map
/// of every live block. The stream and device of the process's first call
/// are the primary stream, whose blocks need no record; a block allocated
/// anywhere else is recorded (a table of 64 locked shards) until it is
/// freed. The same arguments, results and failures as `hipmem_torch_malloc`.
#[unsafe(no_mangle)]
pub extern "C-unwind" fn hipmem_torch_alloc(size: isize, device: c_int, stream: hipStream_t) -> *mut c_void {
    let p = hipmem_torch_malloc(size, device, stream);
    if !p.is_null() {
        let here = (device, stream as usize);
        if *HOT.primary.get_or_init(|| here) == here {
            // A record left at this address by a block freed outside
            // hipmem_torch_delete and hipmem_torch_free must not send this
            // block to that block's stream.
            forget_origin(p as usize);
        } else {
            let stale = origins_of(p as usize)
                .get_or_insert_with(Origins::default)
                .insert(p as usize as u64, (stream as usize, device));
            // (Counted after the record exists: a delete that reads the count
            // got the pointer after this call returned, and sees both. A
            // stale record replaced was counted already.)
            if stale.is_none() {
                count_up(&HOT.origins);
            }
        }
    }
    p
}

/// Frees a block from [`hipmem_torch_alloc`] in the order of the stream it
/// was allocated on (after the streams it was recorded on, as
/// `hipmem_torch_free` does). A null `ptr` is ignored. A pointer that is not
/// a live block of a memory pool (freed already, from `hipMalloc`, never
/// allocated) is logged and recorded as hipErrorInvalidValue; nothing is
/// freed. A live pool block that `hipmem_torch_alloc` did not hand out (from
/// `hipmem_torch_malloc`) is freed on the primary stream, which is its
/// stream's order only if it was allocated there: do not mix the two
/// interfaces' blocks.
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_delete(ptr: *mut c_void) {
    if ptr.is_null() {
        return;
    }
    let (stream, device) = match forget_origin(ptr as usize) {
        Some((stream, device)) => (stream as hipStream_t, device),
        None => match HOT.primary.get() {
            Some(&(device, stream)) => (stream as hipStream_t, device),
            None => {
                return failed(
                    "hipmem_torch_delete",
                    &Error::InvalidValue(format!(
                        "{ptr:p} is not a live block of hipmem_torch_alloc (nothing was allocated there)"
                    )),
                );
            }
        },
    };
    free_block("hipmem_torch_delete", ptr, device, stream, Release::PoolBlock);
}

/// `free` of PyTorch's pluggable allocator: gives `ptr` back in the order of
/// `stream` (`size` and `device` are PyTorch's record of the allocation; the
/// pool knows both). Errors are logged, never raised into PyTorch.
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_free(ptr: *mut c_void, size: usize, device: c_int, stream: hipStream_t) {
    let _ = size;
    free_block("hipmem_torch_free", ptr, device, stream, Release::AnyDropOrigin);
}

/// What [`free_block`] frees.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Release {
    /// What `hipFreeAsync` frees; a block of `hipmem_torch_alloc` also loses
    /// its record (`hipmem_torch_free`).
    AnyDropOrigin,
    /// Pool blocks only (`hipmem_torch_delete`, whose record is gone).
    PoolBlock,
}

impl Release {
    /// Frees `ptr` in `stream`'s order.
    fn free(self, rt: &hipmem_rs::Runtime, ptr: DevicePtr, stream: &Stream) -> Result<()> {
        match self {
            Release::AnyDropOrigin => rt.free_async(ptr, stream),
            Release::PoolBlock => rt.free_pool_block_async(ptr, stream),
        }
    }
}

/// Frees `ptr` on `device` in the order of `stream` (after the streams it
/// was recorded on); failures are logged as `what`'s.
fn free_block(what: &str, ptr: *mut c_void, device: c_int, stream: hipStream_t, release: Release) {
    void_call(what, || {
        if ptr.is_null() {
            return Ok(());
        }
        let (rt, device) = torch_rt(device)?;
        let p = DevicePtr(ptr as usize as u64);
        if release == Release::AnyDropOrigin {
            forget_origin(ptr as usize);
        }
        if HOT.recorded.load(Ordering::Acquire) > 0 {
            let others = forget_record(ptr as usize);
            if others.iter().any(|&o| o != stream as usize) {
                return free_after_uses(rt, device, p, stream, &others, release);
            }
        }
        free_on(rt, device, p, stream, release)
    })
}

/// Frees `ptr` in the order of `stream` (PyTorch's stream handle).
fn free_on(
    rt: &'static hipmem_rs::Runtime,
    device: usize,
    ptr: DevicePtr,
    stream: hipStream_t,
    release: Release,
) -> Result<()> {
    handles::with_stream_on(rt, device, stream, |s| release.free(rt, ptr, s))
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

/// `torch.cuda.set_per_process_memory_fraction(fraction, device)` for
/// hipmem: PyTorch calls a pluggable allocator's memory-fraction function
/// (registered with `set_memory_fraction_fn`, as `hipmem_torch.use_hipmem`
/// does; without it the call was dropped). `device`'s current pool may hold
/// at most `fraction` of the device's total memory from now on
/// (`MemPool::set_size_limit`): an allocation that would take it past that
/// gets what the pool can give back, then fails as any allocation does (see
/// `hipmem_torch_malloc`); memory held past a lowered limit that no tensor
/// uses goes back at once. `fraction` must be finite and within 0 and
/// 1 (1: the whole device); an unknown device, another fraction, or a
/// current pool that is not hipmem's own is logged and recorded for
/// `hipGetLastError`, and changes nothing.
#[unsafe(no_mangle)]
pub extern "C" fn hipmem_torch_set_memory_fraction(fraction: f64, device: c_int) {
    void_call("hipmem_torch_set_memory_fraction", || {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Error::InvalidValue(format!(
                "hipmem_torch_set_memory_fraction: a fraction of {fraction} is not within 0 and 1"
            )));
        }
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        let total = rt.mem_get_info(device)?.total;
        // At most `total` (a fraction of 1 is the whole device).
        let limit = ((total as f64) * fraction).min(total as f64) as u64;
        rt.mem_pool(device)?.set_size_limit(Some(limit))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_counts_never_read_zero_while_records_exist() {
        let c = AtomicU32::new(0);
        count_up(&c);
        count_up(&c);
        count_down(&c);
        assert_eq!(c.load(Ordering::Relaxed), 1);
        count_down(&c);
        count_down(&c);
        assert_eq!(c.load(Ordering::Relaxed), 0, "a count does not go below 0");
        // Saturated, a count no longer knows how many records there are: it
        // stays nonzero, so that every free looks records up.
        let c = AtomicU32::new(u32::MAX - 1);
        count_up(&c);
        count_up(&c);
        assert_eq!(c.load(Ordering::Relaxed), u32::MAX);
        count_down(&c);
        assert_eq!(c.load(Ordering::Relaxed), u32::MAX);
    }

    #[test]
    fn the_hot_state_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Hot>(), 64);
        assert_eq!(std::mem::align_of::<Hot>(), 64);
    }
}
