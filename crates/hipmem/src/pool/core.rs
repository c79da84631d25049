//! hipmem's stream-ordered pool: the pool's state, its streams' slots and
//! the fast paths of allocation and free.
//!
//! Where the rest is: `reuse.rs` (the reuse rules: what an allocation that
//! misses its stream's cache may take, in order), `backing/` (how the pool
//! gets memory from the backend and gives it back: segments or chunks
//! mapped into one reservation), `release.rs` (synchronization, release
//! threshold, trim, retiring streams, destroying the pool), `stats.rs`
//! (statistics, attributes, access), `sharing.rs` (what interprocess
//! sharing needs to know).
#![forbid(unsafe_code)]

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::backing::Backing;
use super::placement::{Heap, Owner, block_size};
use super::stream_cache::{CachedBlock, Slot, recent_slot, remember_slot};
use super::{AccessFlags, PoolProps};
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};
use crate::runtime::ordering::StreamClock;
use crate::runtime::{CoreStream, FastSlot, Runtime, StreamFront, WeakRuntime};

pub const MIN_SEGMENT: u64 = 2 << 20;
/// Largest growth step for small requests.
pub const MAX_GROWTH_STEP: u64 = 128 << 20;

/// What the pool needs to know of the stream an operation is ordered in.
#[derive(Copy, Clone)]
pub(crate) struct StreamRef<'a> {
    /// The stream's ordering clock.
    pub(crate) clock: &'a Arc<StreamClock>,
    /// The backend handle.
    pub(crate) raw: RawStream,
    /// Where the stream caches the slot of the first pool it uses (the
    /// core stream's fast-path slot, filled by the pool subsystem only).
    pub(crate) primary: Option<&'a OnceLock<FastSlot>>,
}

impl<'a> StreamRef<'a> {
    /// What the pool needs of a core stream.
    #[inline]
    pub(crate) fn of(stream: &'a CoreStream) -> StreamRef<'a> {
        StreamRef { clock: stream.clock(), raw: stream.raw(), primary: Some(stream.fast_slot()) }
    }

    /// The slot the stream carries, if it is `pool`'s.
    #[inline]
    fn primary_front(&self, pool: u64) -> Option<&'a Arc<dyn StreamFront>> {
        self.primary?.get().filter(|f| f.owner == pool).map(|f| &f.front)
    }

    /// The same front, as the pool's slot.
    fn primary_slot(&self, pool: u64) -> Option<&'a Slot> {
        let front: &'a dyn Any = &**self.primary_front(pool)?;
        front.downcast_ref::<Slot>()
    }

    /// The same slot, shared.
    fn primary_arc(&self, pool: u64) -> Option<Arc<Slot>> {
        let front = Arc::clone(self.primary_front(pool)?) as Arc<dyn Any + Send + Sync>;
        front.downcast::<Slot>().ok()
    }
}

/// Id of the slot that holds blocks of destroyed streams.
pub(crate) const ORPHAN_STREAM: u64 = u64::MAX;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The three reuse rules (`hipMemPoolReuse*`), each on by default.
#[derive(Debug)]
pub(super) struct ReusePolicy {
    pub(super) follow_event_dependencies: AtomicBool,
    pub(super) allow_opportunistic: AtomicBool,
    pub(super) allow_internal_dependencies: AtomicBool,
}

/// One hipmem pool.
///
/// Its first cache line holds what every allocation reads (the id, the
/// planner, the idle clock, the flags; `zone_on` mirrors the zone's switch):
/// in a framework's step each call finds the pool's state evicted, and the
/// fields an allocation read lay in four lines (docs/pool-measurements.md,
/// "Stop 79"). `repr(C)` keeps that order.
#[repr(C, align(64))]
pub(crate) struct PoolCore {
    pub(crate) id: u64,
    pub(crate) device: usize,
    /// The learned layout of a repeating sequence (`plan/`, `planned.rs`).
    pub(super) plan: Arc<super::plan::PlanState>,
    /// When the idle windows' current step ends on the idle clock
    /// (`u64::MAX` with idle release off): an allocation that the stream's
    /// cache would serve looks for idle memory first once it has ended
    /// (`release.rs`, [`PoolCore::idle_step_ended`]).
    pub(super) idle_step_end: AtomicU64,
    /// The most the idle windows' current step has needed so far (their
    /// `current`, mirrored here under the idle lock): a request that needs
    /// no more, before the step's end, leaves the windows as they are and
    /// takes no lock (`release.rs`, [`PoolCore::release_if_idle`]).
    pub(super) idle_current: AtomicU64,
    /// The idle clock: the caller's time in nanoseconds, or
    /// `release::WALL_CLOCK` (the default).
    pub(super) idle_clock_ns: AtomicU64,
    pub(super) destroyed: AtomicBool,
    /// Whether zone placement is on: the zone's own switch, mirrored here
    /// (set only through [`PoolCore::set_zone_on`]), read on every allocation.
    pub(super) zone_on: AtomicBool,
    /// Set when the pool first maps memory under a budget that can run out
    /// ([`super::backing::MoveBudget::never_runs_out`]; one that never
    /// moves included): every size shares one heap (see `class_of`).
    pub(super) one_class: AtomicBool,
    /// Whether a pool that keeps one heap keeps its tiny blocks apart
    /// (`placement::TINY_CLASS`; [`super::MemPool::set_tiny_blocks_apart`],
    /// else yes unless `HIPMEM_POOL_TINY_APART=0`).
    pub(super) tiny_apart: AtomicBool,
    pub(crate) props: PoolProps,
    pub(crate) is_default: bool,
    pub(super) rt: WeakRuntime,
    pub(super) backend: Arc<dyn crate::backend::Backend>,
    pub(super) backing: Backing,
    pub(super) heap: Mutex<Heap>,
    /// Each stream's slot. Lock order: a slot's own (spin) lock is taken
    /// last, under the heap's or this map's lock where one is held, and is
    /// never held while another lock is taken.
    pub(super) slots: Mutex<super::addr_hash::NumMap<Arc<Slot>>>,
    /// How many slots `slots` holds (written under its lock): with one, the
    /// pool's used bytes are that slot's, read without the map.
    pub(super) slot_count: std::sync::atomic::AtomicUsize,
    pub(super) policy: ReusePolicy,
    pub(super) release_threshold: AtomicU64,
    pub(super) reserved_high: AtomicU64,
    /// What the pool asked of the backend (shared with the release worker).
    pub(super) calls: Arc<CallCounts>,
    /// Physical memory given back off the caller's thread (`deferred.rs`).
    pub(super) deferred: super::deferred::Deferred,
    /// The physical unit on virtual memory, if set (0: the default).
    pub(super) unit: AtomicU64,
    /// Each size class's part of the addresses on virtual memory, if set
    /// (0: the default, four times the device's memory).
    pub(super) address_part: AtomicU64,
    /// The least a growth maps in one call (`u64::MAX`: the environment's).
    pub(super) group: AtomicU64,
    /// The budget for moving memory, if set (else the environment's).
    pub(super) move_budget: Mutex<Option<super::backing::MoveBudget>>,
    /// Zone placement (`zone.rs`): off unless turned on.
    pub(super) zone: Arc<super::zone::ZoneState>,
    pub(super) used_high: Mutex<u64>,
    /// The most bytes ever live in the pool (never reset): how much new
    /// memory growth may make before it must move free memory instead.
    pub(super) live_high: AtomicU64,
    pub(super) access: Mutex<Vec<AccessFlags>>,
    /// The pool's identity in pointer export data (random, chosen on first export).
    pub(super) ipc_uid: std::sync::OnceLock<[u8; 16]>,
    /// Set while a plan's new piece is made: growth maps exactly what is asked.
    pub(super) exact_growth: AtomicBool,
    /// Set while a plan's new piece is made: its new units are mapped in
    /// groups however few they are (they go back with the arena).
    pub(super) arena_growth: AtomicBool,
    /// Whether the pool has lent a group's units (`lend.rs`): the slow path
    /// then sends wholly free loans home first.
    pub(super) lending: AtomicBool,
    /// Whether the backend refused to map a second alias of a group (a
    /// lent group's units are used through one, `lend.rs`): the pool then
    /// lends nothing.
    pub(super) lending_refused: AtomicBool,
    /// Whether growths also lend units whose frees are pending on their
    /// stream (`lend.rs`; [`super::MemPool::set_pending_lending`]).
    pub(super) lend_pending: AtomicBool,
    /// The most one physical piece of a first-steps growth holds (`u64::MAX`:
    /// `HIPMEM_POOL_FIRST_PIECE_MIB`, else units alone;
    /// [`super::MemPool::set_first_steps_piece`]).
    pub(super) first_piece: AtomicU64,
    /// Idle release (`release.rs`): the window in milliseconds (0: off) and
    /// what the pool needed in the current and the last window.
    pub(super) idle_window_ms: AtomicU64,
    pub(super) idle: Mutex<super::release::IdleWindows>,
    /// Growths of the pool (asked by idle release).
    pub(super) growths: AtomicU64,
    /// The most physical memory the pool may hold, set after creation
    /// ([`PoolCore::set_size_limit`]; `u64::MAX`: none). It applies with
    /// `props.max_size`, the lower of the two binding.
    pub(super) size_limit: AtomicU64,
}

impl std::fmt::Debug for PoolCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool").field("id", &self.id).field("device", &self.device).finish()
    }
}

impl PoolCore {
    pub(crate) fn new(
        rt: &Runtime,
        id: u64,
        device: usize,
        props: PoolProps,
        is_default: bool,
        backing: Option<super::PoolBacking>,
    ) -> PoolCore {
        let mut access = vec![AccessFlags::None; rt.device_count()];
        access[device] = AccessFlags::ReadWrite;
        let backing = Backing::choose(rt, device, backing);
        let plan = super::planned::plans_by_default(&backing, &props);
        let calls = Arc::new(CallCounts::default());
        PoolCore {
            id,
            device,
            props,
            is_default,
            rt: rt.downgrade(),
            backend: Arc::clone(rt.backend()),
            backing,
            heap: Mutex::new(Heap::new()),
            slots: Mutex::new(Default::default()),
            slot_count: Default::default(),
            policy: ReusePolicy {
                follow_event_dependencies: AtomicBool::new(true),
                allow_opportunistic: AtomicBool::new(true),
                allow_internal_dependencies: AtomicBool::new(true),
            },
            release_threshold: AtomicU64::new(0),
            reserved_high: AtomicU64::new(0),
            calls: Arc::clone(&calls),
            deferred: super::deferred::Deferred::new(Arc::clone(rt.backend()), calls),
            unit: AtomicU64::new(0),
            address_part: AtomicU64::new(0),
            group: AtomicU64::new(u64::MAX),
            move_budget: Mutex::new(None),
            one_class: AtomicBool::new(false),
            tiny_apart: AtomicBool::new(super::backing::tiny_apart_from_env()),
            zone: Arc::new(super::zone::ZoneState::default()),
            used_high: Mutex::new(0),
            live_high: AtomicU64::new(0),
            access: Mutex::new(access),
            destroyed: AtomicBool::new(false),
            zone_on: AtomicBool::new(false),
            ipc_uid: std::sync::OnceLock::new(),
            plan: Arc::new(super::plan::PlanState::new(plan)),
            exact_growth: AtomicBool::new(false),
            arena_growth: AtomicBool::new(false),
            lending: AtomicBool::new(false),
            lending_refused: AtomicBool::new(false),
            lend_pending: AtomicBool::new(super::lend::pending_by_default()),
            first_piece: AtomicU64::new(u64::MAX),
            idle_window_ms: AtomicU64::new(0),
            idle: Mutex::new(super::release::IdleWindows::new()),
            idle_clock_ns: AtomicU64::new(super::release::WALL_CLOCK),
            idle_step_end: AtomicU64::new(u64::MAX),
            idle_current: AtomicU64::new(0),
            growths: AtomicU64::new(0),
            size_limit: AtomicU64::new(u64::MAX),
        }
    }

    /// The most physical memory the pool may hold: the lower of its
    /// maxSize and the limit set after creation (None: no limit).
    pub(super) fn capacity(&self) -> Option<u64> {
        (self.props.max_size > 0).then_some(self.props.max_size).into_iter().chain(self.size_limit()).min()
    }

    /// Why the pool cannot grow past its capacity, for an OutOfMemory
    /// message: which limit binds, and what the pool holds.
    pub(super) fn capacity_reached(&self, reserved: u64) -> String {
        match self.size_limit() {
            Some(set) if self.props.max_size == 0 || set < self.props.max_size => {
                format!("the pool's size limit of {set} bytes is reached ({reserved} reserved)")
            }
            _ => format!(
                "the pool's maxSize of {} bytes is reached ({reserved} reserved)",
                self.props.max_size
            ),
        }
    }

    /// Sets the most physical memory the pool may hold from now on (None:
    /// only its maxSize, if any). Growth past it fails (after the pool has
    /// given back what it can, as at any growth that fails); memory held
    /// past a lowered limit that no block uses goes back now, and live
    /// blocks stay (the pool holds them until they are freed).
    pub(crate) fn set_size_limit(&self, limit: Option<u64>) -> Result<()> {
        self.size_limit.store(limit.unwrap_or(u64::MAX), Ordering::Relaxed);
        if let Some(limit) = self.capacity() {
            if lock(&self.heap).reserved() > limit {
                self.trim_to(limit)?;
            }
        }
        Ok(())
    }

    /// The limit set with [`PoolCore::set_size_limit`], if any.
    pub(crate) fn size_limit(&self) -> Option<u64> {
        match self.size_limit.load(Ordering::Relaxed) {
            u64::MAX => None,
            n => Some(n),
        }
    }

    pub(crate) fn runtime(&self) -> Result<Runtime> {
        self.rt.get("this pool")
    }

    /// How the pool gets its memory.
    pub(crate) fn backing(&self) -> super::PoolBacking {
        match self.backing {
            Backing::Segments => super::PoolBacking::Segments,
            Backing::Virtual(_) => super::PoolBacking::VirtualMemory,
        }
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// The slot of a stream, created on first use; the first pool a stream
    /// uses also caches its slot in the stream itself.
    pub(super) fn slot_of(&self, stream: &StreamRef<'_>) -> Arc<Slot> {
        if let Some(s) = stream.primary_arc(self.id) {
            return s;
        }
        let slot = self.slot(stream.clock, stream.raw);
        if let Some(p) = stream.primary {
            let _ = p.set(FastSlot { owner: self.id, front: Arc::clone(&slot) as Arc<dyn StreamFront> });
        }
        slot
    }

    /// The slot of a stream, created on first use.
    pub(super) fn slot(&self, clock: &Arc<StreamClock>, raw: RawStream) -> Arc<Slot> {
        if let Some(s) = recent_slot(self.id, clock.stream_id) {
            return s;
        }
        let slot = {
            let mut slots = lock(&self.slots);
            let slot = Arc::clone(slots.entry(clock.stream_id).or_insert_with(|| {
                Arc::new(
                    Slot::new(self.id, Arc::clone(clock), raw)
                        .with_plan(Arc::clone(&self.plan))
                        .with_zone(Arc::clone(&self.zone))
                        .with_tiny_apart(self.keeps_tiny_apart()),
                )
            }));
            self.slot_count.store(slots.len(), Ordering::Release);
            slot
        };
        remember_slot(&slot);
        slot
    }

    pub(super) fn all_slots(&self) -> Vec<Arc<Slot>> {
        lock(&self.slots).values().cloned().collect()
    }

    // ---- allocation ------------------------------------------------------------------

    /// Turns zone placement on or off: the zone's switch and its mirror in
    /// the pool's first line together.
    pub(super) fn set_zone_on(&self, on: bool) {
        // (Under the map of slots, where slots are made from the switch.)
        let slots = lock(&self.slots);
        self.zone.set_on(on);
        self.zone_on.store(on, Ordering::Relaxed);
        for slot in slots.values() {
            slot.set_zone_on(on);
        }
    }

    /// Allocates `size` bytes for use on the stream with `clock`/`raw`
    /// (recorded in the process's trace, if one is being recorded).
    #[inline]
    pub(crate) fn alloc(&self, size: u64, stream: &StreamRef<'_>) -> Result<DevicePtr> {
        let r = self.alloc_untraced(size, stream);
        match &r {
            Ok(p) => crate::trace::alloc(self.id, stream.clock.stream_id, self.device, p.0, size),
            Err(Error::OutOfMemory(_)) => {
                crate::trace::oom(self.id, stream.clock.stream_id, self.device, size)
            }
            Err(_) => {}
        }
        r
    }

    #[inline]
    fn alloc_untraced(&self, size: u64, stream: &StreamRef<'_>) -> Result<DevicePtr> {
        if self.is_destroyed() {
            return Err(Error::InvalidValue(format!("memory pool {:#x} was destroyed", self.id)));
        }
        let want = block_size(size)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes can never be allocated")))?;
        if self.plan.on.load(Ordering::Relaxed) {
            return self.alloc_planned(want, size, stream);
        }
        self.alloc_unplanned(want, size, stream)
    }

    /// Allocates a block of `want` bytes (`size` asked) by the reuse rules:
    /// the stream's cache, then the slow path.
    #[inline]
    pub(super) fn alloc_unplanned(&self, want: u64, size: u64, stream: &StreamRef<'_>) -> Result<DevicePtr> {
        if self.zone_on.load(Ordering::Relaxed) {
            return self.alloc_zoned(want, size, stream);
        }
        self.alloc_cached(want, size, stream)
    }

    /// [`PoolCore::alloc_unplanned`] with zone placement on (`zone.rs`): a
    /// zone block takes the slow path into the zone's part of the range,
    /// any other block the usual path; the learner is told where each went.
    fn alloc_zoned(&self, want: u64, size: u64, stream: &StreamRef<'_>) -> Result<DevicePtr> {
        let zoning = self.zone.learner().decide(want);
        let r = if zoning.zone {
            let slot = self.slot_of(stream);
            self.alloc_slow_in(want, size, &slot, true).map(|(addr, got)| {
                self.count_allocated(&slot, addr, got, true);
                DevicePtr(addr)
            })
        } else {
            self.alloc_cached(want, size, stream)
        };
        if let Ok(p) = &r {
            self.zone.learner().placed(p.0, zoning);
        }
        r
    }

    /// Allocates a block of `want` bytes (`size` asked) by the reuse rules:
    /// the stream's cache, then the slow path.
    #[inline]
    fn alloc_cached(&self, want: u64, size: u64, stream: &StreamRef<'_>) -> Result<DevicePtr> {
        let (clock, raw) = (stream.clock, stream.raw);
        // 0. Idle memory goes back at the first request after a step of the
        // idle windows ends, whether the cache serves it or not.
        if self.idle_step_ended() {
            self.release_idle_before_hit(want, stream);
        }
        // 1. The stream's own cache: through the slot the stream carries for
        // its first pool, else this thread's table of slots.
        // Each slot's cache is tried once; a miss goes on with that slot.
        let slot = if let Some(front) = stream.primary_front(self.id) {
            if let Some((addr, _, sample)) = front.take(want) {
                if sample {
                    self.after_hit(&self.slot_of(stream), want);
                }
                return Ok(DevicePtr(addr));
            }
            self.slot_of(stream)
        } else {
            match super::stream_cache::with_recent_slot(self.id, clock.stream_id, |s| s.alloc_fast(want)) {
                Some(Some((addr, _, sample))) => {
                    if sample {
                        self.after_hit(&self.slot(clock, raw), want);
                    }
                    return Ok(DevicePtr(addr));
                }
                Some(None) => self.slot_of(stream),
                None => {
                    let slot = self.slot_of(stream);
                    if let Some((addr, _, sample)) = slot.alloc_fast(want) {
                        if sample {
                            self.after_hit(&slot, want);
                        }
                        return Ok(DevicePtr(addr));
                    }
                    slot
                }
            }
        };
        let (addr, got) = self.alloc_slow(want, size, &slot)?;
        self.count_allocated(&slot, addr, got, true);
        Ok(DevicePtr(addr))
    }

    /// After a hit in `slot`'s caches for a block of `want` bytes that the
    /// slot flagged: samples the high watermark where the slot passed its
    /// baseline, and where a tiny block came from the cache of tiny blocks
    /// while larger blocks were cached, sends those back to the heap as a
    /// miss would have (the larger blocks' places stay those of a pool
    /// without a cache of tiny blocks).
    fn after_hit(&self, slot: &Arc<Slot>, want: u64) {
        let (sample, flush) = {
            let st = slot.lock();
            (st.used > st.baseline, slot.keeps_apart(want) && !st.cache.is_empty())
        };
        if flush {
            self.flush_slot(slot, false);
        }
        if sample {
            self.sample_usage(slot);
        }
    }

    /// Counts a new block of `bytes` at `addr` in `slot`'s used bytes (and,
    /// with `live`, in its live blocks, where its free finds it), sampling
    /// the pool's high watermark when the slot passed its baseline.
    pub(super) fn count_allocated(&self, slot: &Arc<Slot>, addr: u64, bytes: u64, live: bool) {
        let mut state = slot.lock();
        if live {
            state.insert_live(addr, bytes);
        }
        state.used += bytes as i64;
        let sample = state.used > state.baseline;
        drop(state);
        if sample {
            self.sample_usage(slot);
        }
    }

    // ---- free ------------------------------------------------------------------------

    /// Frees a block of this pool in the order of the stream with `clock`.
    /// Returns false if `ptr` is not a live block of this pool.
    pub(crate) fn free(&self, ptr: DevicePtr, stream: &StreamRef<'_>) -> bool {
        self.free_with(ptr, stream, true)
    }

    /// [`PoolCore::free`]; `ask_planner` false when the planner was asked
    /// already (`free.rs`).
    pub(crate) fn free_with(&self, ptr: DevicePtr, stream: &StreamRef<'_>, ask_planner: bool) -> bool {
        use super::stream_cache::FastFree;
        let primary = stream.primary_slot(self.id);
        let other;
        let slot = match primary {
            Some(slot) => slot,
            None => {
                other = self.slot_of(stream);
                &other
            }
        };
        let evicted = match slot.free_fast(ptr.0) {
            FastFree::Done => None,
            FastFree::Evicted(b) => Some(b),
            FastFree::NotHere => {
                if ask_planner && self.plan.has_arena() && self.free_planned(ptr, stream) {
                    return true;
                }
                let Some(size) = self.take_live_elsewhere(ptr.0, slot.stream_id()) else { return false };
                self.plan.note_free(ptr.0);
                let tiny = slot.keeps_apart(size);
                let mut state = slot.lock();
                state.used -= size as i64;
                state.cache_block(CachedBlock { addr: ptr.0, size, tag: stream.clock.free_tag() }, tiny)
            }
        };
        crate::trace::free_requested(self.id, stream.clock.stream_id, self.device, ptr.0, 0);
        self.after_free(slot, evicted);
        true
    }

    /// Finishes a free into `slot`'s cache: a block the cache evicted goes to
    /// the heap, and a destroyed pool gives back what is now unused.
    pub(crate) fn after_free(&self, slot: &Slot, evicted: Option<CachedBlock>) {
        if let Some(b) = evicted {
            self.return_evicted(slot.stream_id(), b);
        }
        if self.is_destroyed() {
            self.flush_slot_cache(slot);
            if let Ok(rt) = self.runtime() {
                self.release_unused_to(&rt, 0);
            }
        }
    }

    /// The slot of a stream (for a free that went through this thread's
    /// table of slots).
    pub(crate) fn slot_for(&self, stream: &StreamRef<'_>) -> Arc<Slot> {
        self.slot_of(stream)
    }

    /// Puts a block evicted from a stream's cache into the heap, pending on
    /// that stream.
    pub(crate) fn return_evicted(&self, stream: u64, b: CachedBlock) {
        lock(&self.heap).release_block(b.addr, Owner::Stream { stream, tag: b.tag });
    }

    /// Removes `addr` from another slot's live map (a block allocated on one
    /// stream and freed on another) and returns its size. The allocating
    /// slot keeps the bytes it added; the freeing slot subtracts them, so the
    /// pool's total stays exact.
    pub(super) fn take_live_elsewhere(&self, addr: u64, except: u64) -> Option<u64> {
        self.all_slots()
            .into_iter()
            .filter(|slot| slot.stream_id() != except)
            .find_map(|slot| slot.lock().remove_live(addr))
    }

    /// The allocated block of this pool that contains `addr`: (base, size).
    /// Blocks cached by a stream after their free still count as allocated.
    pub(crate) fn block_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let block = lock(&self.heap).allocated_block_containing(addr);
        match block {
            Some((base, _)) if self.plan.has_arena() => {
                let planner = self.plan.lock();
                if planner.is_piece(base) { planner.block_containing(addr) } else { block }
            }
            _ => block,
        }
    }
}

/// The counters behind [`BackendCalls`](super::BackendCalls).
#[derive(Default)]
pub(super) struct CallCounts {
    pub(super) segments_allocated: AtomicU64,
    pub(super) segments_freed: AtomicU64,
    pub(super) granules_created: AtomicU64,
    pub(super) granules_released: AtomicU64,
    pub(super) maps: AtomicU64,
    pub(super) unmaps: AtomicU64,
    pub(super) bytes_created: AtomicU64,
    pub(super) bytes_released: AtomicU64,
    pub(super) bytes_lent: AtomicU64,
    pub(super) released_on_worker: AtomicU64,
    /// Stream synchronizations the pool made on its own (not in
    /// [`BackendCalls`](super::BackendCalls), whose layout is the C ABI's:
    /// [`MemPool::host_waits`](super::MemPool::host_waits)).
    pub(super) host_waits: AtomicU64,
}

impl CallCounts {
    pub(super) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `bytes` to a byte count.
    pub(super) fn add_bytes(counter: &AtomicU64, bytes: u64) {
        counter.fetch_add(bytes, Ordering::Relaxed);
    }

    /// [`MemPool::host_waits`](super::MemPool::host_waits).
    pub(super) fn host_waits(&self) -> u64 {
        self.host_waits.load(Ordering::Relaxed)
    }

    pub(super) fn snapshot(&self) -> super::BackendCalls {
        let r = |c: &AtomicU64| c.load(Ordering::Relaxed);
        super::BackendCalls {
            segments_allocated: r(&self.segments_allocated),
            segments_freed: r(&self.segments_freed),
            granules_created: r(&self.granules_created),
            granules_released: r(&self.granules_released),
            maps: r(&self.maps),
            unmaps: r(&self.unmaps),
            bytes_created: r(&self.bytes_created),
            bytes_lent: r(&self.bytes_lent),
            bytes_released: r(&self.bytes_released),
            released_on_worker: r(&self.released_on_worker),
        }
    }
}

#[cfg(test)]
mod tests {
    /// The zone switch a pool's allocations read (its first line) and the
    /// one each slot's frees read follow the zone's own, for slots made
    /// before and after it turns on.
    #[test]
    fn the_zone_switch_is_mirrored_in_the_pool_and_its_slots() {
        use crate::backend::BackendChoice;
        use crate::backend::host::HostConfig;
        use crate::pool::table::table;
        use crate::runtime::Runtime;
        use std::sync::atomic::Ordering;
        let config = HostConfig { devices: 1, memory_per_device: 1 << 30, ..HostConfig::default() };
        let rt = Runtime::builder().backend(BackendChoice::Host).host_config(config).build().unwrap();
        let dev = rt.device(0).unwrap();
        let (early, late) = (dev.create_stream().unwrap(), dev.create_stream().unwrap());
        let pool = dev.create_mem_pool(0, 0).unwrap();
        let core = table(&rt).get(pool.id()).unwrap();
        let touch = |s: &crate::Stream| {
            let p = pool.alloc_raw(1 << 20, s).unwrap();
            rt.free_async(p, s).unwrap();
            s.synchronize().unwrap();
        };
        touch(&early);
        pool.set_zone_placement(true).unwrap();
        touch(&late);
        let slots = core.all_slots();
        assert_eq!(slots.len(), 2);
        assert!(core.zone.is_on() && core.zone_on.load(Ordering::Relaxed));
        assert!(slots.iter().all(|s| s.zone_is_on()), "a slot made before it turned on sees it too");
        pool.set_zone_placement(false).unwrap();
        assert!(!core.zone.is_on() && !core.zone_on.load(Ordering::Relaxed));
        assert!(slots.iter().all(|s| !s.zone_is_on()));
    }
}
