//! Memory traces: every allocation event of the process, recorded to a file.
//!
//! `HIPMEM_TRACE=path` (read once, at the first event) or [`start`] records
//! allocations and frees (requested and completed), pool growth and release
//! (physical memory mapped and unmapped), trims and OutOfMemory, with pool,
//! stream, device, address, size and time, whichever door they came in by
//! (the Rust API, the C ABI). The file is JSON Lines with a header line
//! ([`mod@format`], `docs/trace-format.md`); `hipmem replay` replays it into any
//! pool and `hipmem trace summary` describes it.
//!
//! Cost: with recording off, an event site is one relaxed atomic load and a
//! branch. With recording on, the calling thread takes the time and pushes
//! the event into a bounded lock-free queue; a background thread writes the
//! lines (`hipmem bench trace` measures both).
//!
//! Ending: [`stop`] writes what is queued and an end line. At process exit
//! (return from `main`, `exit()`, in Rust or C) the main thread stops the
//! trace by itself if it recorded an event or started the trace; otherwise
//! call [`flush`] or [`stop`] before exiting. On an abnormal end (a signal,
//! `abort`, `_exit`) the events of the last few milliseconds ([`TICK`]) are
//! lost and the trace has no end line. A file that cannot be written (a full
//! disk, say) is reported once (`tracing::warn!`) and recording turns off;
//! the program goes on.
//!
//! The event functions below are what the allocator calls, one per site:
//!
//! ```
//! # let (pool, stream, device, addr, size) = (1u64, 3u64, 0usize, 0x7f00_0000_0000u64, 4096u64);
//! hipmem::trace::alloc(pool, stream, device, addr, size);
//! ```
#![forbid(unsafe_code)]

pub mod format;
mod recorder;

pub use format::{
    End, Event, EventKind, FORMAT_NAME, FORMAT_VERSION, Header, TraceError, TraceReader, TraceWriter,
};
pub use recorder::{
    QUEUE_EVENTS, TICK, TraceStatus, flush, init_from_env, is_enabled, set_backend, start, status, stop,
};

/// Records an allocation handed out: `size` bytes requested at `addr`, from
/// `pool` (0: hipMalloc, no pool) for `stream` (0: none / the null stream).
#[inline(always)]
pub fn alloc(pool: u64, stream: u64, device: usize, addr: u64, size: u64) {
    if recorder::wanted() {
        recorder::record(EventKind::Alloc, pool, stream, device, addr, size);
    }
}

/// Records a free requested (hipFree, hipFreeAsync on `stream`) of the
/// allocation at `addr` (`size`: its bytes where known, else 0).
#[inline(always)]
pub fn free_requested(pool: u64, stream: u64, device: usize, addr: u64, size: u64) {
    if recorder::wanted() {
        recorder::record(EventKind::FreeRequested, pool, stream, device, addr, size);
    }
}

/// Records a free known to have completed on the device (the block at `addr`
/// is reusable by every stream from now on).
#[inline(always)]
pub fn free_completed(pool: u64, stream: u64, device: usize, addr: u64, size: u64) {
    if recorder::wanted() {
        recorder::record(EventKind::FreeCompleted, pool, stream, device, addr, size);
    }
}

/// Records physical memory taken by a pool: `size` bytes mapped at `addr`
/// (virtual-memory pools) or a segment allocated there.
#[inline(always)]
pub fn pool_grow(pool: u64, device: usize, addr: u64, size: u64) {
    if recorder::wanted() {
        recorder::record(EventKind::PoolGrow, pool, 0, device, addr, size);
    }
}

/// Records physical memory given back by a pool: `size` bytes unmapped at
/// `addr` or a segment freed.
#[inline(always)]
pub fn pool_release(pool: u64, device: usize, addr: u64, size: u64) {
    if recorder::wanted() {
        recorder::record(EventKind::PoolRelease, pool, 0, device, addr, size);
    }
}

/// Records a trim of `pool` down to `keep` bytes (what it releases follows as
/// [`pool_release`] events).
#[inline(always)]
pub fn trim(pool: u64, device: usize, keep: u64) {
    if recorder::wanted() {
        recorder::record(EventKind::Trim, pool, 0, device, 0, keep);
    }
}

/// Records an allocation of `size` bytes on `stream` that failed with OutOfMemory.
#[inline(always)]
pub fn oom(pool: u64, stream: u64, device: usize, size: u64) {
    if recorder::wanted() {
        recorder::record(EventKind::Oom, pool, stream, device, 0, size);
    }
}
