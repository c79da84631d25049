//! The reuse rules: what an allocation that missed its stream's cache may
//! take, cheapest first.
//!
//! Allocation on stream `S`, cheapest first:
//! 1. `S`'s slot cache: a block of exactly that size freed on `S` (no shared
//!    lock, no driver call). On a miss the cache goes back to the heap, where
//!    its blocks merge with their neighbours before best fit.
//! 2. The shared heap, best fit among blocks free for every stream and blocks
//!    pending on `S` itself (first where the block leaves every wholly free
//!    group whole, see `placement.rs`). A block pending on `S` absorbs the global free
//!    memory next to it (`placement.rs`): `S` may use the whole run at once,
//!    as it may in PyTorch's allocator. Before the pool grows, `S`'s frees
//!    that the device has completed turn global (a marker event tells,
//!    when `S` is busy).
//! 3. Blocks pending on another stream `T`, if a reuse rule allows it:
//!    follow event dependencies (`S` waited on an event recorded on `T` after
//!    the free) or opportunistic (the free has completed on the device).
//!    Before this step the other streams' caches are flushed into the heap.
//!    A stream `T` whose frees are not known complete and that has no marker
//!    event outstanding is asked once (`hipStreamQuery`): if idle, all its
//!    frees so far are complete and the search runs again; if busy, it gets
//!    a marker, so that the next search knows.
//!    Before growing, the other streams' frees that their marker events show
//!    complete turn global (if opportunistic reuse is allowed), and global
//!    memory that their pending blocks absorbed is given back.
//! 4. Growth: a new segment from the backend (within the pool's maxSize).
//!    On virtual memory, where live blocks leave no hole of the request's
//!    size in its class's part of the addresses, another class's part, and
//!    where no part has one, an address range of its own (`backing/grow.rs`).
//!    A request of 256 MiB or more and at least 1/8 of the pool first gives
//!    back unused memory, up to its size and above the release threshold
//!    (`release.rs`), unless the pool moves memory.
//! 5. Internal dependencies, when growing is impossible: make `S` wait for `T`
//!    (an event from the event pool) and take `T`'s pending block.
//! 6. Release what the pool caches and completed frees, retry growth once.
//! 7. OutOfMemory, stating the request, the pool's used and reserved bytes and
//!    the device's free memory.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::core::{CallCounts, ORPHAN_STREAM, PoolCore, lock};
use super::placement::{CLASSES, Owner, smaller_run};
use super::stream_cache::Slot;
use crate::backend::RawStream;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::runtime::ordering::StreamClock;

impl PoolCore {
    pub(super) fn alloc_slow(&self, want: u64, requested: u64, slot: &Arc<Slot>) -> Result<(u64, u64)> {
        self.alloc_slow_in(want, requested, slot, false)
    }

    /// [`PoolCore::alloc_slow`]; `zone`: the block is a zone block
    /// (`zone.rs`), placed in the zone's part of the address range.
    pub(super) fn alloc_slow_in(
        &self,
        want: u64,
        requested: u64,
        slot: &Arc<Slot>,
        zone: bool,
    ) -> Result<(u64, u64)> {
        let rt = self.runtime()?;
        // (Read at each use: a pool on virtual memory chooses whether it
        // keeps its size classes apart when it first maps memory.)
        let own = || self.class_for(want, zone);
        self.release_if_idle(&rt, slot, want);
        // Loans wholly free go home before best fit looks (`lend.rs`): no
        // driver call, and what is placed next lands beside the blocks it
        // would have without them.
        self.switch_loans_home();
        // The stream's cache serves exact sizes only: on a miss its blocks go
        // back to the heap first, where they merge with their neighbours, so
        // that best fit sees every free byte (a cache of large blocks held
        // apart from the heap costs 5-15% more memory on replayed PyTorch runs).
        // Its tiny blocks kept apart stay (`stream_cache.rs`).
        self.flush_slot(slot, false);
        // 2-3. Reuse from the heap (this stream's pending blocks have absorbed
        // the free memory around them: no driver call is needed here to learn
        // which of its frees completed).
        if let Some(found) = self.reuse_from_heap_in(&rt, want, slot, false, own()) {
            return Ok(found);
        }
        if self.flush_other_caches(slot.stream_id()) {
            if let Some(found) = self.reuse_from_heap_in(&rt, want, slot, false, own()) {
                return Ok(found);
            }
        }
        // Before growing: every completed free of this stream turns global
        // (free for the other streams, and for moving memory).
        if self.promote_completed(&rt, slot) {
            if let Some(found) = self.reuse_from_heap_in(&rt, want, slot, false, own()) {
                return Ok(found);
            }
        }
        // Before growing: the other streams' frees known complete (their
        // marker events are asked, no stream is) turn global, and global
        // memory that their pending blocks absorbed (see `placement.rs`) is
        // given back.
        let promoted = if self.policy.allow_opportunistic.load(Ordering::Relaxed) {
            self.promote_others_completed(&rt, slot.stream_id())
        } else {
            0
        };
        if lock(&self.heap).reclaim_lent(Some(slot.stream_id())) + promoted > 0 {
            if let Some(found) = self.reuse_from_heap_in(&rt, want, slot, false, own()) {
                return Ok(found);
            }
        }
        // 4. Grow: on virtual memory, wholly free memory elsewhere is moved
        //    under the block first, new memory made for the rest only. An
        //    ended plan's arena whose blocks are all freed goes back first.
        self.resume_planning();
        if self.retire_arena(&rt, false, false) {
            if let Some(found) = self.reuse_from_heap_in(&rt, want, slot, false, own()) {
                return Ok(found);
            }
        }
        // 4a. A large request gives back unused memory before the pool grows
        //     for it (`release.rs`): it rarely fits the free runs it finds.
        //     What it unmaps is mapped again where the growth needs memory of
        //     its size, and given back only if it does not.
        // With zone placement, memory moves between the zone's part and the
        // rest by going back and being created again: every growth first
        // gives back wholly free memory (up to its size), and one that would
        // take the pool past its high watermark first waits for this
        // stream's frees (a synchronization only where a new peak is at
        // stake: on a GPU the host runs ahead, and frees not yet known
        // complete cannot go back).
        if self.zone.is_on() {
            let reserved = lock(&self.heap).reserved();
            if reserved + want > self.reserved_high.load(Ordering::Acquire) {
                self.wait_for_own_frees(&rt, slot.stream_id());
                if let Some(found) = self.reuse_from_heap_in(&rt, want, slot, false, own()) {
                    return Ok(found);
                }
            }
        }
        // Only a growth that left the pool holding more, or created memory,
        // counts as one for idle release: memory moved under the request (by
        // a pool that moves memory, or unmapped before a large growth and
        // mapped again here) is not new, and a workload that moves memory at
        // every new size would otherwise never look idle.
        let created = self.calls.snapshot();
        let held = lock(&self.heap).reserved();
        let before = self.release_before_large_growth(&rt, slot, want);
        let grow_err = match self.grow_reusing(&rt, want, zone, slot.stream_id(), before) {
            Ok(found) => {
                let now = self.calls.snapshot();
                let made = now.bytes_created > created.bytes_created
                    || now.segments_allocated > created.segments_allocated;
                if made || lock(&self.heap).reserved() > held {
                    self.note_growth();
                }
                return Ok(found);
            }
            Err(e) => e,
        };
        // 4b. The pool cannot grow: free memory of the other size classes
        //     (a pool on virtual memory keeps the classes apart only while
        //     it can grow).
        let own = own();
        for class in (0..CLASSES).filter(|&c| c != own) {
            if let Some(found) = self.reuse_from_heap_in(&rt, want, slot, false, class) {
                return Ok(found);
            }
        }
        // 5. Internal dependencies.
        if self.policy.allow_internal_dependencies.load(Ordering::Relaxed) {
            for class in std::iter::once(own).chain((0..CLASSES).filter(|&c| c != own)) {
                if let Some(found) = self.reuse_from_heap_in(&rt, want, slot, true, class) {
                    return Ok(found);
                }
            }
        }
        // 6. Release cached memory and completed frees (this pool and the
        //    device's other hipmem pools), then try growing once more.
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: growing by {want} bytes failed ({grow_err}); releasing unused memory and retrying", self.id);
        for pool in super::table::table(&rt).hipmem_pools_of(self.device) {
            pool.release_unused_to(&rt, 0);
        }
        if let Ok(found) = self.grow_in(&rt, want, zone, slot.stream_id()) {
            self.note_growth();
            return Ok(found);
        }
        // 7. Out of memory.
        let stats = self.stats();
        let free = rt.backend().mem_get_info(self.device).map(|m| m.free).unwrap_or(0);
        let cause = format!(" ({})", grow_err.message());
        Err(Error::OutOfMemory(format!(
            "pool {:#x} on device {}: cannot allocate {requested} bytes: the pool uses {} and reserves {} bytes{}, the device has {free} bytes free{cause}",
            self.id,
            self.device,
            stats.used_current,
            stats.reserved_current,
            match self.capacity() {
                Some(capacity) => format!(" of at most {capacity}"),
                None => String::new(),
            },
        )))
    }

    /// Finds and takes a block of size class `class` under the reuse rules.
    /// With `insert_waits`, a block pending on another stream may be taken
    /// by making this stream wait for that one (internal dependencies).
    pub(super) fn reuse_from_heap_in(
        &self,
        rt: &Runtime,
        want: u64,
        slot: &Arc<Slot>,
        insert_waits: bool,
        class: usize,
    ) -> Option<(u64, u64)> {
        self.reuse_from_heap_once(rt, want, slot, insert_waits, class, false)
    }

    /// One search of [`PoolCore::reuse_from_heap_in`]; `asked`: the other
    /// streams were asked already (the search runs again at most once).
    fn reuse_from_heap_once(
        &self,
        rt: &Runtime,
        want: u64,
        slot: &Arc<Slot>,
        insert_waits: bool,
        class: usize,
        asked: bool,
    ) -> Option<(u64, u64)> {
        let me = slot.stream_id();
        let mut heap = lock(&self.heap);
        // Zone blocks pack from the bottom of their part (`zone.rs`): the
        // lowest free run that fits, global or this stream's own.
        if class == super::zone::ZONE_CLASS && self.zone.is_on() {
            let at = heap.lowest_fit(class, me, want)?;
            heap.take(at, want);
            return Some((at, want));
        }
        // Where a block of this size went before, if it is free for this
        // stream (a repeating workload keeps its layout).
        if let Some(at) = heap.take_place(class, want, me, self.one_class.load(Ordering::Relaxed)) {
            return Some((at, want));
        }
        // Best fit among global blocks and this stream's own pending blocks,
        // first where that keeps wholly free groups whole (`placement.rs`).
        if let Some(at) = heap.take_keeping_groups(class, me, want) {
            return Some((at, want));
        }
        let global = heap.best_fit_global_in(class, want);
        let own = heap.best_fit_pending_in(class, me, want, |_| true);
        if let Some((addr, _)) = smaller_run(global, own) {
            heap.take(addr, want);
            return Some((addr, want));
        }
        // Other streams' pending blocks.
        let follow = self.policy.follow_event_dependencies.load(Ordering::Relaxed);
        let opportunistic = self.policy.allow_opportunistic.load(Ordering::Relaxed);
        let mut best: Option<(u64, u64, u64)> = None; // (addr, size, stream)
        let mut waits: Vec<u64> = Vec::new();
        for other in heap.pending_streams() {
            if other == me {
                continue;
            }
            let other_clock = self.clock_of(other);
            if opportunistic {
                if let Some(c) = &other_clock {
                    rt.recycle_events(self.device, c.refresh(rt.backend().as_ref()));
                }
            }
            let candidate = heap.best_fit_pending_in(class, other, want, |tag| {
                (follow && slot.clock.knows(other, tag))
                    || (opportunistic && other_clock.as_ref().is_some_and(|c| c.is_complete(tag)))
            });
            match candidate {
                Some((a, s)) if best.is_none_or(|b| s < b.1) => best = Some((a, s, other)),
                Some(_) => {}
                None => waits.push(other),
            }
        }
        if let Some((addr, _, _)) = best {
            heap.take(addr, want);
            return Some((addr, want));
        }
        // Streams whose frees are not yet known complete (only when
        // opportunistic reuse can use them) and that have no marker to tell:
        // one that is idle has completed every free so far (asked once, then
        // the search runs again); a busy one gets a marker, so that the next
        // call knows.
        if opportunistic && !insert_waits {
            drop(heap);
            let mut learnt = false;
            for other in waits {
                if let Some((c, raw)) = self.stream_of(other) {
                    if c.newest_pending_marker().is_none() && c.completed_tag() <= c.free_tag() {
                        if !asked && self.learn_if_idle(rt, &c, raw) {
                            learnt = true;
                        } else {
                            let _ = rt.record_marker(&c, raw);
                        }
                    }
                }
            }
            if learnt {
                return self.reuse_from_heap_once(rt, want, slot, insert_waits, class, true);
            }
            return None;
        }
        if !insert_waits {
            return None;
        }
        // Internal dependencies: the best-fitting pending block of any stream;
        // this stream waits for that stream.
        let mut best: Option<(u64, u64, u64)> = None;
        for other in heap.pending_streams() {
            if other == me {
                continue;
            }
            if let Some((a, s)) = heap.best_fit_pending_in(class, other, want, |_| true) {
                if best.is_none_or(|b| s < b.1) {
                    best = Some((a, s, other));
                }
            }
        }
        let (addr, _, other) = best?;
        let (tag_stream, tag) = heap.pending_tag(addr)?;
        debug_assert_eq!(tag_stream, other);
        let (other_clock, other_raw) = self.stream_of(other)?;
        // The marker must come after the free in the other stream's order;
        // the free's tag is below the marker's new epoch by construction.
        let point = rt.record_marker(&other_clock, other_raw).ok()?;
        if rt.backend().stream_wait_event(slot.raw, point.1).is_err() {
            return None;
        }
        slot.clock.learn(&crate::runtime::ordering::OrderPoint {
            clock: Arc::clone(&other_clock),
            tag: point.0,
            known: Vec::new(),
        });
        debug_assert!(tag < point.0);
        heap.take(addr, want);
        Some((addr, want))
    }

    /// Promotes the stream's pending blocks whose frees the device has
    /// completed: all of them if the stream is idle, else those before its
    /// newest completed marker. A stream that stays busy (a GPU running
    /// ahead of the host, as in every training loop) gets a marker event
    /// when none is outstanding, so that its frees are known complete at the
    /// next call. Returns whether anything turned global.
    pub(super) fn promote_completed(&self, rt: &Runtime, slot: &Slot) -> bool {
        let me = slot.stream_id();
        if me == ORPHAN_STREAM || !lock(&self.heap).has_pending(me) {
            return false;
        }
        if !self.learn_if_idle(rt, &slot.clock, slot.raw) {
            rt.refresh_clock(self.device, &slot.clock);
            if slot.clock.newest_pending_marker().is_none() {
                let _ = rt.record_marker(&slot.clock, slot.raw);
            }
        }
        lock(&self.heap).promote(me, slot.clock.completed_tag()) > 0
    }

    /// Asks whether `raw` is idle (`hipStreamQuery`); if it is, `clock`
    /// learns that every free made on it so far has completed.
    fn learn_if_idle(&self, rt: &Runtime, clock: &StreamClock, raw: RawStream) -> bool {
        self.learn_completed(rt, clock, raw, false)
    }

    /// Waits for `raw` (`hipStreamSynchronize`, or only asks if `wait` is
    /// false); once it is idle, `clock` learns that every free made on it so
    /// far has completed. Returns whether it was (or became) idle.
    pub(super) fn learn_completed(
        &self,
        rt: &Runtime,
        clock: &StreamClock,
        raw: RawStream,
        wait: bool,
    ) -> bool {
        // Frees made after this point get a later tag.
        let before = clock.advance();
        let idle = if wait {
            CallCounts::add(&self.calls.host_waits);
            rt.backend().stream_synchronize(raw).is_ok()
        } else {
            rt.backend().stream_query(raw).unwrap_or(false)
        };
        if idle {
            clock.mark_completed(before);
            rt.retire_completed_markers(self.device, clock);
        }
        idle
    }

    /// Promotes the pending blocks of every stream but `me` whose frees
    /// their markers show complete (opportunistic reuse, for every stream at
    /// once). Returns the bytes made global.
    pub(super) fn promote_others_completed(&self, rt: &Runtime, me: u64) -> u64 {
        let mut bytes = 0;
        for other in self.all_slots() {
            let id = other.stream_id();
            if id == me || id == ORPHAN_STREAM || !lock(&self.heap).has_pending(id) {
                continue;
            }
            rt.refresh_clock(self.device, &other.clock);
            bytes += lock(&self.heap).promote(id, other.clock.completed_tag());
        }
        bytes
    }

    pub(super) fn clock_of(&self, stream: u64) -> Option<Arc<StreamClock>> {
        lock(&self.slots).get(&stream).map(|s| Arc::clone(&s.clock))
    }

    pub(super) fn stream_of(&self, stream: u64) -> Option<(Arc<StreamClock>, RawStream)> {
        lock(&self.slots).get(&stream).map(|s| (Arc::clone(&s.clock), s.raw))
    }

    /// Moves every other stream's cached blocks into the heap (as pending on
    /// that stream). Returns whether anything moved.
    pub(super) fn flush_other_caches(&self, me: u64) -> bool {
        let mut moved = false;
        for slot in self.all_slots() {
            if slot.stream_id() != me {
                moved |= self.flush_slot_cache(&slot);
            }
        }
        moved
    }

    pub(super) fn flush_slot_cache(&self, slot: &Slot) -> bool {
        self.flush_slot(slot, true)
    }

    /// Sends `slot`'s cache back to the heap, and its cache of tiny blocks
    /// with `tiny_too` (a miss leaves them); whether any block went back.
    pub(super) fn flush_slot(&self, slot: &Slot, tiny_too: bool) -> bool {
        // Taken out under the slot's lock by changing places with the slot's
        // spare vector, so that neither allocates again; given back to the
        // heap outside it (lock order), then the emptied vector is the spare.
        let mut flushed = false;
        let mut out = Vec::new();
        loop {
            {
                let mut st = slot.lock();
                if st.cache.is_empty() && (!tiny_too || st.tiny.is_empty()) {
                    if st.spare.capacity() < out.capacity() {
                        st.spare = out;
                    }
                    return flushed;
                }
                if out.capacity() == 0 {
                    out = std::mem::take(&mut st.spare);
                }
                std::mem::swap(&mut st.cache, &mut out);
                if tiny_too {
                    let st = &mut *st;
                    out.append(&mut st.tiny);
                }
            }
            flushed = true;
            let mut heap = lock(&self.heap);
            for b in &out {
                heap.release_block(b.addr, Owner::Stream { stream: slot.stream_id(), tag: b.tag });
            }
            drop(heap);
            out.clear();
        }
    }
}
