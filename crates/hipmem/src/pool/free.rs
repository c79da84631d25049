//! Freeing pool memory by raw pointer (`hipFreeAsync`, and `hipFree` of a
//! pool pointer), for memory of any pool of the runtime.
#![forbid(unsafe_code)]

use std::any::Any;

use super::core::StreamRef;
use super::stream_cache::{self, CachedBlock, FastFree, Slot};
use super::table::table;
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};
use crate::runtime::{Allocation, CoreStream, MemoryKind, Runtime};

impl Runtime {
    /// `hipFreeAsync` of pool memory in `stream`'s order: Some(result) if
    /// `ptr` lies in memory of a pool (hipmem's or the driver's) of this
    /// runtime, None if it is no pool's.
    pub(crate) fn free_pool_memory_async(&self, ptr: DevicePtr, stream: &CoreStream) -> Option<Result<()>> {
        // Fast path: the slot the stream carries (of the first pool used on
        // it, which another thread may have allocated through); only that
        // stream's own lock is taken. (Memory that is not a pool block, such
        // as a mapping of an imported pool, is never in a slot.) The
        // stream's slot comes first: it is one read away, where the thread's
        // table of slots is a thread-local lookup (several cache lines in a
        // shared library) and a scan. Everything else is out of line, and
        // the slot's free has this one call site here, so that the common
        // case stays short and inlined.
        let tried = match primary_slot(stream) {
            // (A pool whose plan runs has most of its blocks in the plan's
            // arena, freed through the planner: it is asked first, below.)
            Some(slot) if slot.pool_alive() && !slot.has_arena() => {
                let done = slot.free_fast(ptr.0);
                if !matches!(done, FastFree::NotHere) {
                    crate::trace::free_requested(slot.pool_id, stream.id(), stream.device(), ptr.0, 0);
                    // (`slot` is the stream's slot of that pool, as the
                    // pool's own lookup would find.)
                    if let FastFree::Evicted(b) = done {
                        if let Some(core) = table(self).get(slot.pool_id) {
                            core.after_free(slot, Some(b));
                        }
                    }
                    return Some(Ok(()));
                }
                Some(slot.pool_id)
            }
            _ => None,
        };
        self.free_pool_memory_slow(ptr, stream, tried)
    }

    /// [`Runtime::free_pool_memory_async`] past the stream's slot (`tried`:
    /// the pool whose slot did not have the block, if it was asked): the
    /// stream's slot where its pool is destroyed or its plan runs, the slot
    /// this thread used last on the stream, then the pool that holds the
    /// address.
    #[inline(never)]
    fn free_pool_memory_slow(
        &self,
        ptr: DevicePtr,
        stream: &CoreStream,
        tried: Option<u64>,
    ) -> Option<Result<()>> {
        let tried = match tried {
            Some(pool) => Some(pool),
            None => {
                match self.settle_fast_free(ptr, stream, primary_slot(stream).map(|s| try_fast_free(s, ptr)))
                {
                    Ok(done) => return Some(done),
                    Err(pool) => pool,
                }
            }
        };
        let recent = stream_cache::with_recent_slot_of_stream(stream.id(), |slot| {
            (tried != Some(slot.pool_id)).then(|| try_fast_free(slot, ptr))
        });
        if let Ok(done) = self.settle_fast_free(ptr, stream, recent.flatten()) {
            return Some(done);
        }
        let a = self.allocations().find(ptr.0)?;
        Some(match a.kind {
            MemoryKind::PoolSegment(id) => match table(self).get(id) {
                None => Err(gone(ptr)),
                Some(core) if core.free(ptr, &StreamRef::of(stream)) => Ok(()),
                Some(_) => {
                    Err(Error::InvalidValue(format!("{ptr} is not a live pool allocation (double free?)")))
                }
            },
            MemoryKind::DriverPool(id) => match table(self).get_driver(id) {
                None => Err(gone(ptr)),
                Some(pool) => pool.free(ptr, stream.raw()),
            },
            _ => return None,
        })
    }

    /// What a fast free in a slot left to do: `fast` is None where no slot
    /// was tried, else the slot's pool, the free's outcome, whether the pool
    /// is alive and whether its plan runs. Ok: the free is done (with its
    /// result); Err: the pool whose slot did not have the block, if any.
    fn settle_fast_free(
        &self,
        ptr: DevicePtr,
        stream: &CoreStream,
        fast: Option<(u64, FastFree, bool, bool)>,
    ) -> std::result::Result<Result<()>, Option<u64>> {
        let trace = |pool: u64| crate::trace::free_requested(pool, stream.id(), stream.device(), ptr.0, 0);
        match fast {
            None => Err(None),
            Some((pool, FastFree::Done, true, _)) => {
                trace(pool);
                Ok(Ok(()))
            }
            // Straight to the planner, without the global lookup; a block it
            // does not have takes the pool's own path (its slots), and one
            // of another pool the global lookup.
            Some((pool, FastFree::NotHere, true, true)) => {
                if let Some(core) = table(self).get(pool) {
                    let s = StreamRef::of(stream);
                    if core.free_planned(ptr, &s) || core.free_with(ptr, &s, false) {
                        return Ok(Ok(()));
                    }
                }
                Err(Some(pool))
            }
            Some((pool, FastFree::NotHere, _, _)) => Err(Some(pool)),
            Some((pool, done, _, _)) => {
                trace(pool);
                if let Some(core) = table(self).get(pool) {
                    core.after_free(&core.slot_for(&StreamRef::of(stream)), evicted(done));
                }
                Ok(Ok(()))
            }
        }
    }

    /// `hipFree` of pool memory (`a` is the registry's entry for `ptr`):
    /// waits for the device, then frees; Some(result) if it is pool memory.
    pub(crate) fn free_pool_memory_sync(&self, ptr: DevicePtr, a: &Allocation) -> Option<Result<()>> {
        match a.kind {
            MemoryKind::PoolSegment(pool) => Some(self.free_pool_block_synchronously(ptr, pool, a.device)),
            MemoryKind::DriverPool(pool) if a.base == ptr => Some((|| {
                let driver = table(self).get_driver(pool).ok_or_else(|| gone(ptr))?;
                self.device_synchronize(a.device)?;
                driver.free(ptr, RawStream::null(a.device))?;
                self.device_synchronize(a.device)
            })()),
            _ => None,
        }
    }

    /// `hipFree` of a block of a hipmem pool: waits for the device, then
    /// returns the block to its pool as a completed free.
    fn free_pool_block_synchronously(&self, ptr: DevicePtr, pool: u64, device: usize) -> Result<()> {
        let core = table(self).get(pool).ok_or_else(|| gone(ptr))?;
        self.device_synchronize(device)?;
        let null = self.null_stream(device)?;
        if !core.free(ptr, &StreamRef::of(&null)) {
            return Err(Error::InvalidValue(format!(
                "{ptr} is not a live allocation of its pool (double free, or an interior pointer)"
            )));
        }
        self.device_synchronize(device)
    }

    /// Frees `ptr` if it was imported into an imported pool (Some), else None.
    pub(crate) fn free_if_imported(&self, ptr: DevicePtr) -> Option<Result<()>> {
        let pool = super::table::table_if_made(self)?.imported_containing(ptr)?;
        Some(pool.free_pointer(ptr))
    }
}

/// A fast free of `ptr` in `slot`: (the slot's pool, what the free did,
/// whether the pool is alive, whether its plan runs). A pool whose plan runs
/// has most of its blocks in the plan's arena, freed through the planner:
/// the slot is not asked then (NotHere), the planner is first.
#[inline(always)]
fn try_fast_free(slot: &Slot, ptr: DevicePtr) -> (u64, FastFree, bool, bool) {
    let alive = slot.pool_alive();
    let planned = alive && slot.has_arena();
    let done = if planned { FastFree::NotHere } else { slot.free_fast(ptr.0) };
    (slot.pool_id, done, alive, planned)
}

/// The block a fast free evicted from the stream's cache, if any.
fn evicted(done: FastFree) -> Option<CachedBlock> {
    match done {
        FastFree::Evicted(b) => Some(b),
        _ => None,
    }
}

/// The pool slot `stream` carries for its fast path, if a hipmem pool
/// filled it.
fn primary_slot(stream: &CoreStream) -> Option<&Slot> {
    let front: &dyn Any = &*stream.fast_slot().get()?.front;
    front.downcast_ref::<Slot>()
}

fn gone(ptr: DevicePtr) -> Error {
    Error::InvalidValue(format!("{ptr} belongs to a pool that no longer exists"))
}
