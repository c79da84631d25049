//! The per-stream front of a pool: what one stream needs on the fast path.
//!
//! Each (pool, stream) pair has a [`Slot`] with its own lock:
//! - a small cache of blocks recently freed on that stream, reusable by the
//!   same stream at once (stream order makes it safe) with no driver call and
//!   without touching the pool's shared heap; a request of another size
//!   sends it back to the heap (`reuse.rs`);
//! - where the pool keeps tiny blocks apart (`placement::TINY_CLASS`), a
//!   larger cache of the stream's freed tiny blocks, which a miss does not
//!   send back: their memory is a few units of its own, so reusing them
//!   where they lie moves no larger block;
//! - the live blocks allocated on that stream (address → size), so a free
//!   by pointer finds its block without a global lookup;
//! - the stream's share of the pool's used bytes (see `usage.rs`).
//!
//! Threads that allocate on their own streams therefore take only their own
//! slot's lock. A thread-local table maps (pool, stream) to the slot, so
//! finding it takes no lock either.
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Backs off by yielding the thread: a slot lock is held for a few
/// instructions, but its holder may be preempted.
pub struct YieldRelax;

impl spin::RelaxStrategy for YieldRelax {
    fn relax() {
        std::thread::yield_now();
    }
}

/// The slot lock: a spin lock whose unlock is a single release store (one
/// atomic read-modify-write per lock/unlock instead of two), which is what the
/// allocate/free fast path pays for.
type SlotMutex<T> = spin::mutex::SpinMutex<T, YieldRelax>;
/// A held slot lock.
pub type SlotGuard<'a> = spin::mutex::SpinMutexGuard<'a, SlotState, YieldRelax>;

use crate::backend::RawStream;
use crate::runtime::ordering::StreamClock;

/// Most blocks a stream's cache holds before the oldest goes to the heap.
pub const CACHE_BLOCKS: usize = 16;

/// Most tiny blocks (`placement::TINY_BLOCK_MAX`) a stream's cache of tiny
/// blocks holds before the oldest goes to the heap: at most 4 MiB. On the
/// recorded variable-length inference calls nearly all tiny allocations
/// find their size there, where the cache that a miss sends back served
/// 3.7% of all allocations (stop 73).
pub const TINY_CACHE_BLOCKS: usize = 256;

/// A block in a stream's cache: still marked allocated in the heap.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CachedBlock {
    /// Address.
    pub addr: u64,
    /// Block size.
    pub size: u64,
    /// Stream epoch of the free.
    pub tag: u64,
}

/// Address → block size.
pub type LiveMap = super::addr_hash::AddrMap<u64>;

/// The mutable state of a slot.
#[derive(Debug, Default)]
pub struct SlotState {
    /// Blocks freed on this stream, newest last.
    pub cache: Vec<CachedBlock>,
    /// Tiny blocks freed on this stream, newest last, where the pool keeps
    /// them apart ([`Slot::keeps_apart`]); a miss leaves them here.
    pub tiny: Vec<CachedBlock>,
    /// An empty vector that changes places with `cache` when the cache goes
    /// back to the heap (`reuse.rs`), so that neither allocates again.
    pub spare: Vec<CachedBlock>,
    /// Live blocks allocated on this stream (the most recent one may be in
    /// `recent` instead; use the methods).
    live: LiveMap,
    /// The most recently allocated live block, kept out of the map: the
    /// common allocate-then-free pattern touches no hash table.
    recent: Option<(u64, u64)>,
    /// Net bytes allocated minus freed through this slot (may go below zero
    /// when blocks allocated elsewhere are freed here).
    pub used: i64,
    /// The slot's share of the pool's used high watermark (see `usage.rs`).
    pub baseline: i64,
}

impl SlotState {
    /// Records a live block.
    pub fn insert_live(&mut self, addr: u64, size: u64) {
        if let Some((a, s)) = self.recent.replace((addr, size)) {
            self.live.insert(a, s);
        }
    }

    /// Removes a live block; returns its size.
    #[inline(always)]
    pub fn remove_live(&mut self, addr: u64) -> Option<u64> {
        match self.recent {
            Some((a, s)) if a == addr => {
                self.recent = None;
                Some(s)
            }
            _ => self.live.remove(&addr),
        }
    }

    /// Takes every live block.
    pub fn take_all_live(&mut self) -> LiveMap {
        let mut all = std::mem::take(&mut self.live);
        if let Some((a, s)) = self.recent.take() {
            all.insert(a, s);
        }
        all
    }

    /// Adds live blocks (of a retired stream).
    pub fn extend_live(&mut self, blocks: LiveMap) {
        self.live.extend(blocks);
    }

    /// Takes a cached block of exactly `size` bytes (a whole number of
    /// granules), newest first, from the cache of tiny blocks where `tiny`.
    /// Exact sizes keep the statistics and bounds checks independent of what
    /// was freed before.
    pub fn take_cached(&mut self, size: u64, tiny: bool) -> Option<CachedBlock> {
        let cache = if tiny { &mut self.tiny } else { &mut self.cache };
        let fits = |b: &CachedBlock| b.size == size;
        if cache.last().is_some_and(fits) {
            return cache.pop();
        }
        let i = cache.iter().rposition(fits)?;
        Some(cache.remove(i))
    }

    /// Caches a freed block (in the cache of tiny blocks where `tiny`);
    /// returns the oldest block if that cache overflows.
    #[inline(always)]
    pub fn cache_block(&mut self, block: CachedBlock, tiny: bool) -> Option<CachedBlock> {
        let (cache, most) =
            if tiny { (&mut self.tiny, TINY_CACHE_BLOCKS) } else { (&mut self.cache, CACHE_BLOCKS) };
        cache.push(block);
        if cache.len() > most { Some(cache.remove(0)) } else { None }
    }
}

/// One stream's front of one pool.
#[derive(Debug)]
pub struct Slot {
    /// The pool's id.
    pub pool_id: u64,
    /// The stream's clock (its id and epochs).
    pub clock: Arc<StreamClock>,
    /// The stream's backend handle.
    pub raw: RawStream,
    /// The stream's id (a copy of `clock.stream_id`, read on every lookup).
    pub stream_id: u64,
    /// Cleared when the pool is destroyed: frees then take the pool's slow path.
    pub pool_alive: AtomicBool,
    state: SlotMutex<SlotState>,
    /// The pool's planner, told of every free (see `plan/`).
    plan: Option<Arc<super::plan::PlanState>>,
    /// The pool's zone placement, told of every free (see `zone.rs`).
    zone: Option<Arc<super::zone::ZoneState>>,
    /// Whether that zone placement is on (its switch, mirrored here by the
    /// pool under its map of slots: a free then reads no line of the
    /// zone's while it is off, the default).
    zone_on: AtomicBool,
    /// Whether the pool keeps tiny blocks apart (`placement::TINY_CLASS`):
    /// then they have a cache of their own ([`SlotState::tiny`]).
    tiny_apart: AtomicBool,
}

/// What a fast free did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FastFree {
    /// The block is in the stream's cache.
    Done,
    /// Cached; the cache's oldest block must go back to the pool's heap.
    Evicted(CachedBlock),
    /// Not a live block of this slot.
    NotHere,
}

impl Slot {
    /// A slot for a stream.
    pub fn new(pool_id: u64, clock: Arc<StreamClock>, raw: RawStream) -> Slot {
        let stream_id = clock.stream_id;
        Slot {
            pool_id,
            clock,
            raw,
            stream_id,
            pool_alive: AtomicBool::new(true),
            state: SlotMutex::new(SlotState::default()),
            plan: None,
            zone: None,
            zone_on: AtomicBool::new(false),
            tiny_apart: AtomicBool::new(false),
        }
    }

    /// The same slot, with tiny blocks cached apart if `on`.
    pub(crate) fn with_tiny_apart(self, on: bool) -> Slot {
        self.tiny_apart.store(on, Ordering::Relaxed);
        self
    }

    /// From now on tiny blocks are cached apart (the pool keeps them apart
    /// from its first memory on, so the caches hold none yet).
    pub(crate) fn keep_tiny_apart(&self) {
        self.tiny_apart.store(true, Ordering::Relaxed);
    }

    /// Whether a block of `size` bytes goes to the cache of tiny blocks.
    #[inline(always)]
    pub fn keeps_apart(&self, size: u64) -> bool {
        size <= super::placement::TINY_BLOCK_MAX && self.tiny_apart.load(Ordering::Relaxed)
    }

    /// The same slot, telling `zone` of its frees.
    pub(crate) fn with_zone(mut self, zone: Arc<super::zone::ZoneState>) -> Slot {
        self.zone_on.store(zone.is_on(), Ordering::Relaxed);
        self.zone = Some(zone);
        self
    }

    /// The pool's zone placement turned on or off (by the pool, under its
    /// map of slots, as it makes slots).
    pub(crate) fn set_zone_on(&self, on: bool) {
        self.zone_on.store(on, Ordering::Relaxed);
    }

    /// Whether the slot sees its pool's zone placement on.
    #[cfg(test)]
    pub(crate) fn zone_is_on(&self) -> bool {
        self.zone_on.load(Ordering::Relaxed)
    }

    /// The same slot, telling `plan` of its frees.
    pub(crate) fn with_plan(mut self, plan: Arc<super::plan::PlanState>) -> Slot {
        self.plan = Some(plan);
        self
    }

    /// Allocates from the stream's cache: (address, block size, whether the
    /// pool must look at the slot after this hit: the used statistic went
    /// past the slot's baseline, or a tiny block came from the cache of tiny
    /// blocks while larger blocks were cached, which a pool without that
    /// cache would have sent back to the heap at this request).
    #[inline]
    pub fn alloc_fast(&self, size: u64) -> Option<(u64, u64, bool)> {
        let tiny = self.keeps_apart(size);
        let mut st = self.lock();
        let b = st.take_cached(size, tiny)?;
        st.insert_live(b.addr, b.size);
        st.used += b.size as i64;
        let flush = tiny && !st.cache.is_empty();
        Some((b.addr, b.size, st.used > st.baseline || flush))
    }

    /// Frees a live block of this slot into the stream's cache. (Always
    /// inlined: it is the whole of the common free, and `free.rs` calls it
    /// from the hot path and from the slow one.)
    #[inline(always)]
    pub fn free_fast(&self, addr: u64) -> FastFree {
        let mut st = self.lock();
        let Some(size) = st.remove_live(addr) else { return FastFree::NotHere };
        st.used -= size as i64;
        let tiny = self.keeps_apart(size);
        let block = CachedBlock { addr, size, tag: self.clock.free_tag() };
        // A zone block goes back to the heap at once: the cache would hand
        // it to a request of its size that is not a zone block.
        let zone = self.zone.as_deref().filter(|_| self.zone_on.load(Ordering::Relaxed));
        let evicted = match zone {
            Some(z) if z.contains(addr) => Some(block),
            _ => st.cache_block(block, tiny),
        };
        drop(st);
        if let Some(z) = zone {
            z.note_free(addr);
        }
        if let Some(plan) = &self.plan {
            plan.note_free(addr);
        }
        match evicted {
            Some(evicted) => FastFree::Evicted(evicted),
            None => FastFree::Done,
        }
    }

    /// Whether the slot's pool has a plan's arena (whose blocks are freed
    /// through the planner, not the slot).
    pub fn has_arena(&self) -> bool {
        self.plan.as_ref().is_some_and(|p| p.has_arena())
    }

    /// Whether the slot's pool is not destroyed (a free into a destroyed
    /// pool must go through the pool, which gives unused memory back).
    pub fn pool_alive(&self) -> bool {
        self.pool_alive.load(Ordering::Acquire)
    }

    /// The stream's id.
    pub fn stream_id(&self) -> u64 {
        self.stream_id
    }

    /// Locks the state.
    pub fn lock(&self) -> SlotGuard<'_> {
        self.state.lock()
    }
}

/// The slot is what the pool keeps in each stream for its fast path.
impl crate::runtime::StreamFront for Slot {
    #[inline]
    fn take(&self, size: u64) -> Option<(u64, u64, bool)> {
        self.alloc_fast(size)
    }
}

const RECENT: usize = 8;

thread_local! {
    static RECENT_SLOTS: RefCell<Vec<Arc<Slot>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the slot of (`pool_id`, `stream_id`) if this thread used it
/// recently, without touching any shared reference count. `f` must not call
/// back into this module.
pub fn with_recent_slot<R>(pool_id: u64, stream_id: u64, f: impl FnOnce(&Slot) -> R) -> Option<R> {
    RECENT_SLOTS
        .try_with(|r| {
            let r = r.borrow();
            r.iter().rev().find(|s| s.pool_id == pool_id && s.stream_id == stream_id).map(|s| f(s))
        })
        .ok()
        .flatten()
}

/// Runs `f` on the slot of `stream_id` (any pool) this thread used most
/// recently. `f` must not call back into this module.
pub fn with_recent_slot_of_stream<R>(stream_id: u64, f: impl FnOnce(&Slot) -> R) -> Option<R> {
    RECENT_SLOTS
        .try_with(|r| {
            let r = r.borrow();
            r.iter().rev().find(|s| s.stream_id == stream_id).map(|s| f(s))
        })
        .ok()
        .flatten()
}

/// The slot of (`pool_id`, `stream_id`) this thread used recently, if any.
pub fn recent_slot(pool_id: u64, stream_id: u64) -> Option<Arc<Slot>> {
    RECENT_SLOTS
        .try_with(|r| {
            let r = r.borrow();
            r.iter().rev().find(|s| s.pool_id == pool_id && s.stream_id == stream_id).cloned()
        })
        .ok()
        .flatten()
}

/// Remembers a slot this thread uses.
pub fn remember_slot(slot: &Arc<Slot>) {
    let _ = RECENT_SLOTS.try_with(|r| {
        let mut r = r.borrow_mut();
        r.retain(|s| !Arc::ptr_eq(s, slot));
        if r.len() >= RECENT {
            r.remove(0);
        }
        r.push(Arc::clone(slot));
    });
}

/// Forgets every slot of a pool (when the pool is destroyed).
pub fn forget_pool(pool_id: u64) {
    let _ = RECENT_SLOTS.try_with(|r| r.borrow_mut().retain(|s| s.pool_id != pool_id));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_serves_close_sizes_newest_first_and_bounds_itself() {
        let mut s = SlotState::default();
        assert!(s.cache_block(CachedBlock { addr: 0x1000, size: 1024, tag: 1 }, false).is_none());
        assert!(s.cache_block(CachedBlock { addr: 0x2000, size: 1024, tag: 2 }, false).is_none());
        assert!(s.cache_block(CachedBlock { addr: 0x3000, size: 4096, tag: 3 }, false).is_none());
        assert_eq!(s.take_cached(1024, false).unwrap().addr, 0x2000);
        assert!(s.take_cached(2048, false).is_none(), "only exact sizes are reused from the cache");
        assert_eq!(s.take_cached(4096, false).unwrap().addr, 0x3000);
        for i in 0..CACHE_BLOCKS as u64 {
            let evicted = s.cache_block(CachedBlock { addr: 0x10000 + i * 256, size: 256, tag: 9 }, false);
            if i + 1 < CACHE_BLOCKS as u64 {
                assert!(evicted.is_none());
            } else {
                assert_eq!(evicted.unwrap().addr, 0x1000);
            }
        }
        assert_eq!(s.cache.len(), CACHE_BLOCKS);
    }

    #[test]
    fn tiny_blocks_have_a_cache_of_their_own() {
        let mut s = SlotState::default();
        let tiny = |addr, size| CachedBlock { addr, size, tag: 1 };
        // Apart from the other cache: neither serves the other's blocks.
        assert!(s.cache_block(tiny(0x1000, 512), true).is_none());
        assert!(s.cache_block(tiny(0x2000, 512), false).is_none());
        assert_eq!(s.take_cached(512, true).unwrap().addr, 0x1000);
        assert!(s.take_cached(512, true).is_none());
        assert_eq!(s.take_cached(512, false).unwrap().addr, 0x2000);
        assert!(s.cache.is_empty() && s.tiny.is_empty());
        // It holds TINY_CACHE_BLOCKS before its oldest goes back.
        for i in 0..TINY_CACHE_BLOCKS as u64 + 1 {
            let evicted = s.cache_block(tiny(0x10_0000 + i * 512, 512), true);
            assert_eq!(evicted.map(|b| b.addr), (i == TINY_CACHE_BLOCKS as u64).then_some(0x10_0000));
        }
        assert_eq!((s.tiny.len(), s.cache.len()), (TINY_CACHE_BLOCKS, 0));
    }

    #[test]
    fn a_slot_sends_zone_blocks_back_at_once_while_its_pool_has_zones_on() {
        let zone = Arc::new(super::super::zone::ZoneState::default());
        zone.set_range(0x100_0000, 0x200_0000);
        let slot =
            Slot::new(1, Arc::new(StreamClock::new(7)), RawStream::null(0)).with_zone(Arc::clone(&zone));
        let live = |addr| slot.lock().insert_live(addr, 4096);
        // Off (as made): a block in the zone's part is cached like any other.
        live(0x100_0000);
        assert_eq!(slot.free_fast(0x100_0000), FastFree::Done);
        // On, as the pool turns it on for the slots it has: it goes back.
        zone.set_on(true);
        slot.set_zone_on(true);
        live(0x100_1000);
        let back = slot.free_fast(0x100_1000);
        assert!(matches!(back, FastFree::Evicted(b) if b.addr == 0x100_1000), "{back:?}");
        // Outside the zone's part: cached.
        live(0x300_0000);
        assert_eq!(slot.free_fast(0x300_0000), FastFree::Done);
    }

    #[test]
    fn a_slot_caches_tiny_blocks_apart_once_its_pool_keeps_them_apart() {
        let slot = Slot::new(1, Arc::new(StreamClock::new(7)), RawStream::null(0));
        assert!(!slot.keeps_apart(512), "a pool that does not keep them apart");
        slot.keep_tiny_apart();
        assert!(slot.keeps_apart(512) && slot.keeps_apart(super::super::placement::TINY_BLOCK_MAX));
        assert!(!slot.keeps_apart(super::super::placement::TINY_BLOCK_MAX + 512));
    }
}
