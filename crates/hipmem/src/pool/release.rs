//! Giving memory back: what a synchronization makes reusable, the release
//! threshold, trim, retiring a stream and destroying a pool.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::core::{ORPHAN_STREAM, PoolCore, lock};
use super::stream_cache::Slot;
use crate::error::Result;
use crate::runtime::Runtime;
use crate::runtime::ordering::StreamClock;

/// What a pool with idle release needed at most in its current and its
/// last window of time.
#[derive(Debug)]
pub(crate) struct IdleWindows {
    started: Instant,
    current: u64,
    last: u64,
}

impl IdleWindows {
    pub(super) fn new() -> IdleWindows {
        IdleWindows { started: Instant::now(), current: 0, last: 0 }
    }
}

impl PoolCore {
    // ---- idle release --------------------------------------------------------------------

    /// Sets the idle-release window (None: off, the default).
    pub(crate) fn set_idle_release(&self, window: Option<Duration>) {
        let ms = window.map_or(0, |w| (w.as_millis() as u64).max(1));
        *lock(&self.idle) = IdleWindows::new();
        self.idle_window_ms.store(ms, Ordering::Relaxed);
    }

    /// The idle-release window, if on.
    pub(crate) fn idle_release(&self) -> Option<Duration> {
        match self.idle_window_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }

    /// Idle release, asked on the slow path before a request of `want`
    /// bytes: where no synchronization reaches the pool (PyTorch synchronizes
    /// through its own runtime), the release threshold applies on the
    /// pool's own clock. Once per window, memory beyond the most the last
    /// two windows needed (and beyond the threshold) goes back, if that is
    /// more than 1/16 of it: memory idle for one to two windows, and the
    /// free memory between the blocks of a loop that did not need it in
    /// that time (which may cost a loop regrowing it). Only what
    /// no block uses and every free of which is complete goes; a running
    /// plan's memory stays.
    pub(super) fn release_if_idle(&self, rt: &Runtime, slot: &Arc<Slot>, want: u64) {
        let ms = self.idle_window_ms.load(Ordering::Relaxed);
        if ms == 0 {
            return;
        }
        let need = self.used_current().saturating_add(want);
        let keep = {
            let mut w = lock(&self.idle);
            w.current = w.current.max(need);
            if w.started.elapsed() < Duration::from_millis(ms) {
                return;
            }
            let keep = w.current.max(w.last);
            (w.last, w.current, w.started) = (w.current, need, Instant::now());
            keep.max(self.release_threshold.load(Ordering::Relaxed))
        };
        let reserved = lock(&self.heap).reserved();
        if reserved <= keep.saturating_add(keep / 16) {
            return;
        }
        // What completed on this stream and the others, and the caches,
        // become free for everyone (and so releasable).
        self.flush_slot_cache(slot);
        self.flush_other_caches(slot.stream_id());
        self.promote_completed(rt, slot);
        if self.policy.allow_opportunistic.load(Ordering::Relaxed) {
            self.promote_others_completed(rt, slot.stream_id());
        }
        lock(&self.heap).reclaim_lent(None);
        let released = self.release_unused(rt, reserved - keep, keep);
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: idle release: {released} of {reserved} bytes (the last two windows needed {keep})", self.id);
    }

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
