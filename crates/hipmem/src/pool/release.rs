//! Giving memory back: what a synchronization makes reusable, the release
//! threshold, trim, retiring a stream and destroying a pool.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::core::{ORPHAN_STREAM, PoolCore, lock};
use super::stream_cache::Slot;
use crate::error::Result;
use crate::runtime::Runtime;
use crate::runtime::ordering::StreamClock;

impl PoolCore {
    // ---- synchronization, release, trim -------------------------------------------------

    /// The stream with `clock` has completed everything before its
    /// `completed_tag`: its frees become reusable by all, then the release
    /// threshold applies.
    pub(crate) fn on_stream_synchronized(&self, rt: &Runtime, stream: u64) {
        let slot = lock(&self.slots).get(&stream).cloned();
        let Some(slot) = slot else { return };
        self.flush_slot_cache(&slot);
        let completed = slot.clock.completed_tag();
        lock(&self.heap).promote(stream, completed);
        self.apply_release_threshold(rt);
    }

    /// Every stream of the device has completed: all pending frees complete.
    pub(crate) fn on_device_synchronized(&self, rt: &Runtime) {
        for slot in self.all_slots() {
            self.flush_slot_cache(&slot);
            let completed = slot.clock.completed_tag();
            lock(&self.heap).promote(slot.stream_id(), completed);
        }
        self.apply_release_threshold(rt);
    }

    pub(super) fn apply_release_threshold(&self, rt: &Runtime) {
        // A destroyed pool keeps nothing it does not have to.
        let threshold = if self.is_destroyed() { 0 } else { self.release_threshold.load(Ordering::Relaxed) };
        let reserved = lock(&self.heap).reserved();
        let live = self.used_current();
        let excess = reserved.saturating_sub(live).saturating_sub(threshold);
        if excess > 0 {
            self.release_unused_and_arena(rt, excess, 0);
        }
    }

    /// [`PoolCore::release_unused`], then, if that was not enough, a plan's
    /// arena without live blocks (unused memory too: the plan makes a new
    /// one at its next quiet point, see `planned.rs`) and what it frees.
    fn release_unused_and_arena(&self, rt: &Runtime, bytes: u64, floor: u64) {
        let released = self.release_unused(rt, bytes, floor);
        if released < bytes && self.retire_arena(rt, true, false) {
            self.release_unused(rt, bytes - released, floor);
        }
    }

    /// `hipMemPoolTrimTo`: releases unused memory until at most `keep` bytes
    /// stay reserved; memory of live blocks and of frees not yet completed is
    /// never released.
    pub(crate) fn trim_to(&self, keep: u64) -> Result<()> {
        let rt = self.runtime()?;
        crate::trace::trim(self.id, self.device, keep);
        self.release_unused_to(&rt, keep);
        Ok(())
    }

    pub(super) fn release_unused_to(&self, rt: &Runtime, keep: u64) {
        for slot in self.all_slots() {
            self.flush_slot_cache(&slot);
            let before = slot.clock.advance();
            rt.recycle_events(self.device, slot.clock.refresh(rt.backend().as_ref()));
            if slot.stream_id() != ORPHAN_STREAM && rt.backend().stream_query(slot.raw).unwrap_or(false) {
                slot.clock.mark_completed(before);
            }
            lock(&self.heap).promote(slot.stream_id(), slot.clock.completed_tag());
        }
        // Memory that pending blocks absorbed is free for everyone again.
        lock(&self.heap).reclaim_lent(None);
        // Release whole segments (largest first) or granules, never below `keep`.
        let reserved = lock(&self.heap).reserved();
        if reserved > keep {
            self.release_unused_and_arena(rt, reserved - keep, keep);
        }
    }

    /// The stream is being destroyed: its cache goes to the heap (pending,
    /// completed once a marker recorded now completes), its live blocks to the
    /// orphan slot.
    pub(crate) fn retire_stream(&self, rt: &Runtime, stream: u64) {
        let slot = lock(&self.slots).get(&stream).cloned();
        let Some(slot) = slot else { return };
        self.flush_slot_cache(&slot);
        if lock(&self.heap).has_pending(stream) {
            let _ = rt.record_marker(&slot.clock, slot.raw);
        }
        let (live, used) = {
            let mut s = slot.lock();
            (s.take_all_live(), std::mem::replace(&mut s.used, 0))
        };
        let orphan = {
            let mut slots = lock(&self.slots);
            Arc::clone(slots.entry(ORPHAN_STREAM).or_insert_with(|| {
                Arc::new(Slot::new(self.id, Arc::new(StreamClock::new(ORPHAN_STREAM)), slot.raw))
            }))
        };
        {
            let mut o = orphan.lock();
            o.extend_live(live);
            o.used += used;
        }
        // Keep the slot while the heap holds blocks pending on it (its clock
        // learns when they complete); otherwise forget it.
        if !lock(&self.heap).has_pending(stream) {
            lock(&self.slots).remove(&stream);
        }
    }

    /// Marks the pool destroyed and releases what it can; live blocks stay
    /// valid and their frees release the rest.
    pub(crate) fn destroy(&self) {
        self.destroyed.store(true, Ordering::Release);
        self.plan.lock().end();
        self.plan.running.store(false, Ordering::Release);
        self.plan.on.store(false, Ordering::Relaxed);
        for slot in self.all_slots() {
            slot.pool_alive.store(false, Ordering::Release);
        }
        if let Ok(rt) = self.runtime() {
            self.release_unused_to(&rt, 0);
        }
    }
}
