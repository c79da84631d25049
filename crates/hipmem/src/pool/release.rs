//! Giving memory back: what a synchronization makes reusable, the release
//! threshold, trim, retiring a stream and destroying a pool.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::backing::{Backing, BeforeGrowth, Unmapped};
use super::core::{ORPHAN_STREAM, PoolCore, StreamRef, lock};
use super::stream_cache::Slot;
use crate::error::Result;
use crate::runtime::Runtime;
use crate::runtime::ordering::StreamClock;

/// Steps of an idle-release window: the pool notes what it needed in steps
/// of a quarter window, and looks again at the end of each step, so that
/// what it keeps covers the last window (or two) to within a step, and a
/// release comes within a step of its time, not a window.
const STEPS: u32 = 4;

/// What a pool with idle release needed at most in its current step and
/// the steps before it, over one window of time.
#[derive(Debug)]
pub(crate) struct IdleWindows {
    /// When the current step started, in nanoseconds on the pool's idle
    /// clock (the wall clock's, or the caller's: [`PoolCore::set_idle_clock`]).
    started: u64,
    current: u64,
    /// What the steps before the current one needed, newest last (two
    /// windows' worth).
    earlier: [u64; EARLIER],
    /// Growths of the pool so far, and the steps since its last growth
    /// (`quiet` counts them).
    growths: u64,
    quiet: u32,
    /// Steps without growth a release needs (two windows; doubles each
    /// time the pool grows again within two windows of a release: a loop
    /// that needs what was released).
    needed: u32,
    /// Steps without growth a peak left behind needs (one window; doubles
    /// each time a peak the pool gave back comes back, see
    /// [`PEAK_COMES_BACK_WITHIN`]).
    peak_needed: u32,
    /// Growths when the last release was made, and the steps since.
    released_at: Option<(u64, u32)>,
    /// The most the peaks given back since the last growth had needed
    /// (releases by the rule for a peak left behind only).
    released_peak: Option<u64>,
}

impl IdleWindows {
    pub(super) fn new() -> IdleWindows {
        IdleWindows {
            started: 0,
            current: 0,
            earlier: [0; EARLIER],
            growths: 0,
            quiet: 0,
            needed: 2 * STEPS,
            peak_needed: STEPS,
            released_at: None,
            released_peak: None,
        }
    }

    /// Ends the current step, `steps` steps (at least one) after it began,
    /// at a request that needs `need` bytes, and starts the next: returns
    /// the most needed now and in the last three steps (a window), and now
    /// and in the last seven (two windows). Steps without a request in
    /// between needed at most what the ended step did and the request does.
    fn end_step(&mut self, steps: u64, need: u64, now: u64) -> (u64, u64) {
        let ended = self.current;
        // The steps that ended, oldest first: the one that began at
        // `started`, then the gap's; only the last EARLIER are kept.
        for k in steps.saturating_sub(EARLIER as u64)..steps {
            self.earlier.rotate_left(1);
            self.earlier[EARLIER - 1] = if k == 0 { ended } else { ended.min(need) };
        }
        (self.current, self.started) = (need, now);
        let most = |steps: &[u64]| steps.iter().fold(need, |m, &e| m.max(e));
        (most(&self.earlier[EARLIER + 1 - STEPS as usize..]), most(&self.earlier))
    }
}

/// A peak left behind that the pool gave back and then grew for again
/// (to 7/8 of what it had needed) within this many steps (16 windows: 1.6 s
/// of 100 ms windows) *came back*: the next one waits twice as long before
/// it goes back, up to [`MOST_QUIET_STEPS`]. A variable-length inference
/// loop that comes back to the same largest batch every pass otherwise
/// gives that batch's memory back between passes and maps it again at the
/// next, with the GPU idle while it waits for the stream's frees and maps
/// (about 2 ms a batch on an H100). A warm-up's peak that later steps never
/// reach again still goes back after one window. (Halving the wait again
/// when a growth after a peak's release is not that peak held more:
/// 12 cases above 1.03 in the replay below instead of 9.) Replayed
/// (`examples/python/replay_sweep.py`, 18 variable-length recordings at ten
/// windows from 25 to 300 ms), 9 of 180 cases held more than 1.03 of their
/// peak by placement and 22 kept the warm-up's peak, against 16 and 21
/// before; the second halves made 44 thousand backend calls, not 56.
/// Only the first growth after a release is compared with the peak: one
/// that comes back over two growths (a loop's two largest batches, the
/// smaller first) is not seen as come back. Watching the growths of a
/// window after the first held more, live (1.031 and 1.039 of the peak in
/// two of seven processes) and replayed (docs/pool-measurements.md, "Stop
/// 60"), so it is not done.
const PEAK_COMES_BACK_WITHIN: u32 = 16 * STEPS;

/// Idle release gives nothing back where all it could give back (wholly
/// free units and groups, after the caches and completed frees went back
/// to the heap) is under this share of what the pool holds: the memory
/// saved is small, and a loop that needs it again pays a driver call per
/// unit to grow it back. With tiny blocks kept apart, the two-GPU job's
/// training steps gave back 16 MiB of 3.05 GB (the rest lay in the plan's
/// arena), and a later allocation of 16 MiB mapped it again: 16 of the 30
/// driver calls in the second half of the 66-step recording (12 by
/// default); with this rule 14. The sweep of the variable-length
/// recordings over windows and first-steps bounds moved by less than its
/// spread (12.0 of 180 cases above 1.03 either way by default; 14.6 and
/// 14.2 with tiny blocks apart).
const IDLE_LEAST_SHARE: u64 = 64;

/// Steps kept before the current one: two windows.
const EARLIER: usize = 2 * STEPS as usize - 1;

/// The most steps without growth an idle release may come to need (64
/// windows).
const MOST_QUIET_STEPS: u32 = 64 * STEPS;

/// The least request for which a pool gives back unused memory before it
/// grows ([`PoolCore::release_before_large_growth`]): two of the largest
/// groups a growth maps, so that what goes back is worth its driver calls.
pub(super) const LARGE_REQUEST: u64 = 256 << 20;

/// The length of a step of a window of `ms` milliseconds, in nanoseconds.
fn step_ns(ms: u64) -> u64 {
    (ms.saturating_mul(1_000_000) / u64::from(STEPS)).max(1)
}

/// `PoolCore::idle_clock_ns` when idle release runs on the wall clock.
pub(super) const WALL_CLOCK: u64 = u64::MAX;

/// Whether a large growth waits for its stream's pending frees before it
/// gives memory back ([`PoolCore::release_before_large_growth`]). The wait
/// is a host-device synchronization: live variable-length inference on an
/// H100 waited 17.6-57.9 ms at three of its growths per process, where the
/// GPU ran behind, and its largest batches ran 2 ms slower than under
/// PyTorch's allocator. `HIPMEM_POOL_GROWTH_WAIT=0` gives back only the
/// frees already known complete, as a smaller growth does: measured live,
/// as fast as PyTorch's but holding 1.09-1.54 of the peak (for comparison
/// only). A pool with pending lending on ([`PoolCore::lends_pending_frees`])
/// lends the stream's pending frees instead where that covers the request.
/// Either way a growth that stays under the pool's high watermark does not
/// wait: there no new peak is at stake.
fn large_growth_waits() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("HIPMEM_POOL_GROWTH_WAIT").map(|v| v != "0").unwrap_or(true))
}

impl PoolCore {
    // ---- idle release --------------------------------------------------------------------

    /// Sets the idle-release window (None: off, the default).
    pub(crate) fn set_idle_release(&self, window: Option<Duration>) {
        let ms = window.map_or(0, |w| (w.as_millis() as u64).max(1));
        let mut fresh = IdleWindows::new();
        fresh.started = self.idle_now_for(ms);
        let mut w = lock(&self.idle);
        *w = fresh;
        self.idle_current.store(w.current, Ordering::Relaxed);
        self.idle_window_ms.store(ms, Ordering::Relaxed);
        self.step_started(&w, ms);
    }

    /// Notes when the idle windows' step that started at `w.started` ends
    /// (`u64::MAX` where the window `ms` is 0: off), under the idle lock.
    /// (Released: a request that reads this end reads the step's
    /// [`PoolCore::idle_current`], stored before it.)
    fn step_started(&self, w: &IdleWindows, ms: u64) {
        let end = if ms == 0 { u64::MAX } else { w.started.saturating_add(step_ns(ms)).min(u64::MAX - 1) };
        self.idle_step_end.store(end, Ordering::Release);
    }

    /// Whether idle release is on and its current step has ended: the next
    /// request looks for idle memory even where the stream's cache serves
    /// it (one atomic read where idle release is off; with it on, the idle
    /// clock's too, the coarse clock on Linux).
    #[inline]
    pub(super) fn idle_step_ended(&self) -> bool {
        let end = self.idle_step_end.load(Ordering::Relaxed);
        end != u64::MAX && self.idle_now() >= end
    }

    /// [`PoolCore::release_if_idle`] before a request of `want` bytes that
    /// the stream's cache may serve: a request after an idle gap gives the
    /// idle memory back then, not at the next request that misses (on a
    /// variable-length inference recording the first request of the timed
    /// batches was a cached tiny block; the warm-up's peak, 4.3 GB, went
    /// back five requests later).
    #[cold]
    pub(super) fn release_idle_before_hit(&self, want: u64, stream: &StreamRef<'_>) {
        if let Ok(rt) = self.runtime() {
            self.release_if_idle(&rt, &self.slot_for(stream), want);
        }
    }

    /// Counts a growth (idle release waits for windows without one).
    pub(super) fn note_growth(&self) {
        self.growths.fetch_add(1, Ordering::Relaxed);
    }

    /// Drives idle release by the caller's clock (`Some(time)`, since an
    /// origin of the caller's; earlier times than the last are taken as the
    /// last) or by the wall clock (`None`, the default). Switching clocks
    /// starts a new window.
    pub(crate) fn set_idle_clock(&self, now: Option<Duration>) {
        let ns = now.map_or(WALL_CLOCK, |t| (t.as_nanos().min(u128::from(WALL_CLOCK - 1))) as u64);
        // The caller's time never goes backwards (the later one stays).
        let next = |old: u64| Some(if ns == WALL_CLOCK || old == WALL_CLOCK { ns } else { old.max(ns) });
        let before = match self.idle_clock_ns.fetch_update(Ordering::Relaxed, Ordering::Relaxed, next) {
            Ok(v) | Err(v) => v,
        };
        if (before == WALL_CLOCK) != (ns == WALL_CLOCK) {
            let mut w = lock(&self.idle);
            w.started = self.idle_now();
            self.step_started(&w, self.idle_window_ms.load(Ordering::Relaxed));
        }
    }

    /// Now on the pool's idle clock, in nanoseconds.
    fn idle_now(&self) -> u64 {
        self.idle_now_for(self.idle_window_ms.load(Ordering::Relaxed))
    }

    /// Now on the idle clock of a window of `ms` milliseconds: the caller's
    /// clock, or a monotonic one read to within a quarter of a step (the
    /// kernel's coarse clock where its tick is that fine: the slow path
    /// reads it on every call).
    fn idle_now_for(&self, ms: u64) -> u64 {
        match self.idle_clock_ns.load(Ordering::Relaxed) {
            WALL_CLOCK => crate::runtime::clock::monotonic_ns(step_ns(ms) / 4),
            ns => ns,
        }
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
    /// pool's own clock. At the end of each step (a quarter window), if the
    /// pool has not grown for two windows, memory beyond the most it needed
    /// in the last two windows (and beyond the threshold) goes back, if that
    /// is more than 1/16 of it (again each step while the pool does not grow,
    /// so a peak left behind goes back in steps). A *peak left behind* goes
    /// sooner: where the pool holds more than twice what the last window
    /// needed, what is beyond the larger of that and half of what the last
    /// two windows needed goes back after one window without growth. (A
    /// variable-length inference run's largest batch came in its warm-up;
    /// with whole windows of 100 ms its memory went back about 300 ms
    /// later, and in 2 of 7 processes on an H100 the warm-up's five later
    /// batches took less than that: the pool held 1.47 of the measured
    /// batches' peak through them. Replayed with windows up to four times
    /// as long as the trace's batches, it now goes back in time.) A pool
    /// still growing (a loop learning its steps) keeps what it has, and
    /// one that grows again within two windows of a release (a loop that
    /// needed the free memory between its blocks) waits twice as long next
    /// time, up to 64 windows; so does a peak left behind that comes back
    /// ([`PEAK_COMES_BACK_WITHIN`]). Only what no block uses and every free
    /// of which is complete goes; a running plan's memory stays.
    pub(super) fn release_if_idle(&self, rt: &Runtime, slot: &Arc<Slot>, want: u64) {
        let ms = self.idle_window_ms.load(Ordering::Relaxed);
        if ms == 0 {
            return;
        }
        let need = self.used_current_seen_by(slot).saturating_add(want);
        // Before the step's end, a request that needs no more than the step
        // has needed changes nothing below: no lock. (The end is read
        // first: a step that began after it was read has a need stored
        // before its end, see `step_started`. With a stale end, the request
        // counts as made before the step that is ending ended, which needed
        // at least as much.)
        let end = self.idle_step_end.load(Ordering::Acquire);
        if need <= self.idle_current.load(Ordering::Relaxed) && self.idle_now_for(ms) < end {
            return;
        }
        let (keep, reserved, peak) = {
            let mut w = lock(&self.idle);
            w.current = w.current.max(need);
            self.idle_current.store(w.current, Ordering::Relaxed);
            // (The window read above: one step length for the clock and the count.)
            let now = self.idle_now_for(ms);
            let step = step_ns(ms);
            let steps = now.saturating_sub(w.started) / step;
            if steps == 0 {
                return;
            }
            let (window, two_windows) = w.end_step(steps, need, now);
            self.idle_current.store(w.current, Ordering::Relaxed);
            self.step_started(&w, ms);
            let steps = u32::try_from(steps).unwrap_or(u32::MAX);
            // Only where the pool has not grown for `needed` steps: a
            // loop still growing (learning its steps) keeps what it has.
            let growths = self.growths.load(Ordering::Relaxed);
            if growths != w.growths {
                let released_peak = w.released_peak.take();
                if let Some((_, since)) = w.released_at.take().filter(|&(at, _)| at != growths) {
                    if since < 2 * STEPS {
                        w.needed = (w.needed * 2).min(MOST_QUIET_STEPS);
                    }
                    // (What the last window needed: the growth's step is
                    // in it, since the first request after a step's end
                    // looks. Two windows hold more than one peak too often:
                    // replayed, 14 cases above 1.03 and 25 warm-up peaks
                    // kept, against 9 and 22.)
                    let came_back =
                        released_peak.is_some_and(|p| window.saturating_mul(8) >= p.saturating_mul(7));
                    if since < PEAK_COMES_BACK_WITHIN && came_back {
                        w.peak_needed = (w.peak_needed * 2).min(MOST_QUIET_STEPS);
                    }
                }
                (w.growths, w.quiet) = (growths, 0);
                return;
            }
            w.quiet = w.quiet.saturating_add(steps);
            if let Some((_, since)) = &mut w.released_at {
                *since = since.saturating_add(steps);
            }
            // Read once, for both rules and the check below. (The heap's
            // lock is never held while the idle lock is taken.)
            let reserved = lock(&self.heap).reserved();
            let (keep, peak) = if w.quiet >= w.needed {
                (two_windows, None)
            } else if w.quiet >= w.peak_needed && reserved / 2 > window {
                // A peak left behind: after one window without growth
                // (longer for a peak that came back).
                (window.max(two_windows / 2), Some(two_windows))
            } else {
                return;
            };
            (keep.max(self.release_threshold.load(Ordering::Relaxed)), reserved, peak)
        };
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
        // (On segments a whole segment goes back: no such rule.)
        if matches!(self.backing, Backing::Virtual(_)) {
            let can: u64 = self.releasable_spans().iter().map(|&(_, len)| len).sum();
            if can.saturating_mul(IDLE_LEAST_SHARE) < reserved {
                tracing::debug!(target: "hipmem::pool", "pool {:#x}: idle release: only {can} of {reserved} bytes could go; kept", self.id);
                return;
            }
        }
        // Unmapped here, given back on the release worker (`deferred.rs`).
        let mut unmapped = Vec::new();
        let released = self.release_unused_keeping(rt, reserved - keep, keep, Some(&mut unmapped));
        self.release_later(unmapped);
        if released > 0 {
            let mut w = lock(&self.idle);
            // The quiet steps go on counting: while the pool does not
            // grow, each step gives back what the last window did not need.
            w.released_at = Some((w.growths, 0));
            w.released_peak = w.released_peak.max(peak);
        }
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: idle release: {released} of {reserved} bytes (the last window needed {keep})", self.id);
    }

    /// Before a pool that does not move memory grows for a large request
    /// (at least [`LARGE_REQUEST`] and 1/8 of what it holds): memory no
    /// block uses goes back first, at most as much as the request and never
    /// below the release threshold. Such a request (a batch larger than any
    /// before, a step's largest temporary) rarely fits the free memory it
    /// finds, which would stay held beside the new memory: replayed, a
    /// variable-length inference run held 1.57 of its peak live bytes
    /// without this and 1.01 with it, GPT-2 training's first steps 1.10 and
    /// 1.04. It costs a few driver calls where the idle memory is in groups
    /// (memory that a growth of 64 MiB or more mapped), at most one
    /// unmap and release per unit otherwise. This stream's frees the device
    /// has completed count as unused (asked with a wait only when it has
    /// frees pending and the growth could take the pool past its high
    /// watermark; below it, only the frees known complete count). What it
    /// gives back is unmapped but returned to the caller, not released: the
    /// growth maps what it can of it ([`PoolCore::grow_reusing`]) and gives
    /// back the rest.
    /// Returns with it whether the growth lends the stream's pending frees
    /// instead of waiting for them (then also where it sets no new peak),
    /// and whether what it unmapped moves under the block (a pool whose
    /// release threshold keeps what it holds,
    /// [`PoolCore::moves_before_new_peak`]: then nothing goes back).
    pub(super) fn release_before_large_growth(
        &self,
        rt: &Runtime,
        slot: &Arc<Slot>,
        want: u64,
    ) -> BeforeGrowth {
        let zone = self.zone.is_on();
        if (want < LARGE_REQUEST && !zone) || !self.gives_back_before_growing() {
            return BeforeGrowth::default();
        }
        let reserved = lock(&self.heap).reserved();
        let threshold = self.release_threshold.load(Ordering::Relaxed);
        // Where the threshold keeps what the pool holds, nothing goes back:
        // the memory may move instead.
        let moves = reserved <= threshold && !zone && self.moves_before_new_peak(want, reserved);
        if !moves && (reserved <= threshold || (want.saturating_mul(8) < reserved && !zone)) {
            return BeforeGrowth::default();
        }
        // (A small growth of a pool with zone placement gives back only what
        // is known free: waiting costs a synchronization per growth.)
        // A large growth waits for its stream's frees only where growing
        // without them could take the pool past its high watermark: the wait
        // blocks the host until the stream's queued work is done, and the
        // GPU then idles until work is queued again (variable-length
        // inference's largest batches ran 5-6% slower where they grew). Below
        // the watermark no new peak is at stake: what is known free goes
        // back, the growth makes the rest, and the frees' memory goes back
        // once they complete (idle release, trim, the next wait).
        let waits = want >= LARGE_REQUEST
            && large_growth_waits()
            && reserved.saturating_add(want) > self.reserved_high.load(Ordering::Acquire);
        let lends = !moves && waits && self.lends_instead_of_waiting(slot.stream_id(), want);
        if waits && !lends {
            self.wait_for_own_frees(rt, slot.stream_id());
        } else {
            self.promote_completed(rt, slot);
        }
        lock(&self.heap).reclaim_lent(None);
        let mut unmapped = Vec::new();
        if moves {
            // Groups first: each moves in one unmap and one map, whatever
            // its size (with tiny blocks apart, 257 fewer driver calls over
            // the 28 recordings; by default the same).
            let moved = self.release_unused_in_order(rt, want, 0, Some(&mut unmapped), true);
            tracing::debug!(target: "hipmem::pool", "pool {:#x}: unmapped {moved} of {reserved} bytes to move under a growth for {want}", self.id);
            return BeforeGrowth { unmapped, lend: false, move_free: true };
        }
        // Unmapped, not given back yet: the growth maps what it can of it.
        let released = self.release_unused_keeping(rt, want, threshold, Some(&mut unmapped));
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: gave back {released} of {reserved} bytes before growing for {want}", self.id);
        BeforeGrowth { unmapped, lend: lends, move_free: false }
    }

    /// Whether a large growth (at least [`LARGE_REQUEST`]) of a pool whose
    /// release threshold keeps everything it holds moves the physical
    /// memory of wholly free units and groups under the block before it
    /// creates any (issue #13's first item for pools that keep their
    /// memory): on virtual memory, past a run's first steps, and only where
    /// the growth could take the pool past its high watermark. The caller
    /// unmaps up to the request's size of that memory and the growth maps
    /// all of it again (`grow.rs`, [`crate::pool::remap::place_moved`]):
    /// nothing goes back, so the threshold still holds; the memory only
    /// changes address. The caller waits for this stream's pending frees
    /// first (as before a large growth that gives back), so that their
    /// memory can move too. Whatever the request's share of the pool (unlike giving
    /// back, which keeps the 1/8 rule): moving never gives back memory a
    /// later request must create again.
    ///
    /// Without it the free memory of earlier batches, scattered between
    /// live blocks, stayed beside each larger batch's new memory. Replayed
    /// without idle release: variable-length inference held 1.250 of its
    /// peak (now 1.003), seed 13 1.471 (1.010), seed 29 1.230 (1.013); with
    /// tiny blocks kept apart the two-GPU job's closing check 1.090 of its
    /// second half's peak (1.008). In the first steps it is not done: there
    /// it moved a pool's early memory under GPT-2's largest blocks, its
    /// first plan could no longer be laid out in place, and the run made
    /// half again as many driver calls for the same peak.
    fn moves_before_new_peak(&self, want: u64, reserved: u64) -> bool {
        matches!(self.backing, Backing::Virtual(_))
            && want >= LARGE_REQUEST
            && reserved.saturating_add(want) > self.reserved_high.load(Ordering::Acquire)
            && lock(&self.heap).frees() >= super::backing::first_steps()
    }

    /// Whether a large growth on `stream` lends the memory of the stream's
    /// pending frees (`lend.rs`) instead of waiting for them so that they
    /// can go back first: where lending can cover nearly as much of the
    /// request (7/8) as the pending and free memory waiting would let it
    /// reuse. Memory lending cannot take (units alone, runs inside groups)
    /// stays held while the frees are pending, so where there is much of
    /// it the growth waits.
    fn lends_instead_of_waiting(&self, stream: u64, want: u64) -> bool {
        if !self.lends_pending_frees() {
            return false;
        }
        let (pending, free) = {
            let heap = lock(&self.heap);
            (heap.pending_bytes(stream), heap.global_free_bytes())
        };
        let reusable = want.min(pending + free);
        let covered = self.lendable_for(stream, want);
        let lends = covered.saturating_mul(8) >= reusable.saturating_mul(7);
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: a growth for {want}: {pending} bytes pending on its stream, {free} free, {covered} lendable: {}", self.id, if lends { "lends them" } else { "waits" });
        lends
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
        // What idle release queued has gone back too.
        self.deferred.wait_empty();
    }

    /// [`PoolCore::release_unused_keeping`], then, if that was not enough, a plan's
    /// arena without live blocks (unused memory too: the plan makes a new
    /// one at its next quiet point, see `planned.rs`) and what it frees.
    fn release_unused_and_arena(&self, rt: &Runtime, bytes: u64, floor: u64) {
        self.release_unused_and_arena_keeping(rt, bytes, floor, None);
    }

    /// [`PoolCore::release_unused_and_arena`]; with `keep`, what goes back
    /// is unmapped and listed there instead of given back
    /// ([`PoolCore::release_unused_keeping`]).
    fn release_unused_and_arena_keeping(
        &self,
        rt: &Runtime,
        bytes: u64,
        floor: u64,
        mut keep: Option<&mut Unmapped>,
    ) {
        let released = self.release_unused_keeping(rt, bytes, floor, keep.as_deref_mut());
        if released < bytes && self.retire_arena(rt, true, false) {
            self.release_unused_keeping(rt, bytes - released, floor, keep);
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
        self.give_back_unused_to(rt, keep, false);
        self.deferred.wait_empty();
    }

    /// [`PoolCore::release_unused_to`] with the physical memory given back
    /// on the release worker (`deferred.rs`): the caller's thread only
    /// unmaps. For a plan's start (`planned.rs`), which gives back the
    /// first steps' memory and maps the plan's arena right after: on an
    /// H100 a 2 MiB unit's `cuMemRelease` costs about 18 µs, and a replayed
    /// GPT-2 run gave back 676 units there. Memory held by the device never
    /// exceeds what the pool held before: a growth the device refuses waits
    /// for the queue first.
    pub(super) fn release_unused_to_later(&self, rt: &Runtime, keep: u64) {
        self.give_back_unused_to(rt, keep, true);
    }

    fn give_back_unused_to(&self, rt: &Runtime, keep: u64, later: bool) {
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
            if later {
                let mut unmapped = Vec::new();
                self.release_unused_and_arena_keeping(rt, reserved - keep, keep, Some(&mut unmapped));
                self.release_later(unmapped);
            } else {
                self.release_unused_and_arena(rt, reserved - keep, keep);
            }
        }
        // A destroyed pool that holds nothing gives its addresses back (its
        // memory has often gone back at a synchronization already, and a
        // pool on virtual memory reserves twelve times its device's memory:
        // a process that made and destroyed pools ran out of addresses on a
        // 141 GB GPU) and leaves the table.
        if self.is_destroyed() {
            self.give_back_addresses_if_destroyed(rt);
            self.leave_table_if_empty(rt);
        }
    }

    /// A destroyed pool that holds nothing any more (no block, no memory, no
    /// addresses) leaves the runtime's table of pools, so that
    /// synchronizations stop visiting it: a process that makes and destroys
    /// pools by the hundred would otherwise pay for each of them at every
    /// synchronization. One with blocks still live stays until their frees
    /// give back the rest (a free finds its pool in the table).
    fn leave_table_if_empty(&self, rt: &Runtime) {
        let holds_nothing = {
            let heap = lock(&self.heap);
            heap.allocated() == 0 && heap.reserved() == 0
        } && self.addresses_given_back();
        if holds_nothing {
            super::table::table(rt).forget(self.id);
        }
    }

    /// The stream is being destroyed: its cache goes to the heap (pending,
    /// completed once a marker recorded now completes), its live blocks to the
    /// orphan slot.
    pub(crate) fn retire_stream(&self, rt: &Runtime, stream: u64) {
        let slot = lock(&self.slots).get(&stream).cloned();
        let Some(slot) = slot else { return };
        self.flush_slot_cache(&slot);
        // Loans of its pending frees (`lend.rs`) need its clock as pending
        // blocks do.
        let lent = self.has_busy_loans(stream);
        if lent || lock(&self.heap).has_pending(stream) {
            let _ = rt.record_marker(&slot.clock, slot.raw);
        }
        let (live, used) = {
            let mut s = slot.lock();
            (s.take_all_live(), std::mem::replace(&mut s.used, 0))
        };
        let orphan = {
            let mut slots = lock(&self.slots);
            let orphan = Arc::clone(slots.entry(ORPHAN_STREAM).or_insert_with(|| {
                Arc::new(
                    Slot::new(self.id, Arc::new(StreamClock::new(ORPHAN_STREAM)), slot.raw)
                        .with_tiny_apart(self.keeps_tiny_apart()),
                )
            }));
            self.slot_count.store(slots.len(), Ordering::Release);
            orphan
        };
        {
            let mut o = orphan.lock();
            o.extend_live(live);
            o.used += used;
        }
        // Keep the slot while the heap holds blocks pending on it (its clock
        // learns when they complete); otherwise forget it.
        if !lent && !lock(&self.heap).has_pending(stream) {
            let mut slots = lock(&self.slots);
            slots.remove(&stream);
            self.slot_count.store(slots.len(), Ordering::Release);
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

#[cfg(test)]
mod tests {
    use super::{EARLIER, IdleWindows, STEPS};

    /// A destroyed pool leaves the runtime's table once it holds nothing: at
    /// once where its memory went back before, else once its last live
    /// block is freed (until then the free finds it there).
    #[test]
    fn a_destroyed_pool_leaves_the_table_once_it_holds_nothing() {
        use crate::backend::BackendChoice;
        use crate::backend::host::HostConfig;
        use crate::pool::table::table;
        use crate::runtime::Runtime;
        const MIB: u64 = 1 << 20;
        let config = HostConfig { devices: 1, memory_per_device: 1 << 30, ..HostConfig::default() };
        let rt = Runtime::builder().backend(BackendChoice::Host).host_config(config).build().unwrap();
        let dev = rt.device(0).unwrap();
        let s = dev.create_stream().unwrap();
        let pool = dev.create_mem_pool(0, 0).unwrap();
        let id = pool.id();
        let p = pool.alloc_raw(MIB, &s).unwrap();
        rt.free_async(p, &s).unwrap();
        s.synchronize().unwrap();
        assert!(table(&rt).get(id).is_some());
        pool.destroy().unwrap();
        assert!(table(&rt).get(id).is_none(), "a destroyed pool holding nothing is forgotten");
        // A block live at the destruction keeps the pool until it is freed.
        let pool = dev.create_mem_pool(0, 0).unwrap();
        let id = pool.id();
        let p = pool.alloc_raw(MIB, &s).unwrap();
        pool.destroy().unwrap();
        assert!(table(&rt).get(id).is_some(), "a live block's pool stays");
        rt.memset(p, crate::backend::FillValue::U8(7), MIB).unwrap();
        rt.free_async(p, &s).unwrap();
        s.synchronize().unwrap();
        assert!(table(&rt).get(id).is_none(), "forgotten once its last block went back");
        assert_eq!(rt.pointer_attributes(p.0).unwrap().memory_type, crate::runtime::MemoryType::Unregistered);
        // Pools made and destroyed do not pile up.
        let before = table(&rt).hipmem_pools_of(0).len();
        for _ in 0..32 {
            let pool = dev.create_mem_pool(0, 0).unwrap();
            let p = pool.alloc_raw(MIB, &s).unwrap();
            rt.free_async(p, &s).unwrap();
            s.synchronize().unwrap();
            pool.destroy().unwrap();
        }
        assert_eq!(table(&rt).hipmem_pools_of(0).len(), before);
    }

    /// The need mirrored for the check without a lock
    /// (`PoolCore::idle_current`) is the windows' own at every point: a
    /// request that needs more raises both, one that needs less before the
    /// step's end leaves both, and a step's end starts both again at the
    /// request's need.
    #[test]
    fn the_need_checked_without_a_lock_is_the_windows_own() {
        use crate::backend::BackendChoice;
        use crate::backend::host::HostConfig;
        use crate::pool::core::lock;
        use crate::runtime::Runtime;
        use std::sync::atomic::Ordering;
        use std::time::Duration;
        const MIB: u64 = 1 << 20;
        let config = HostConfig { devices: 1, memory_per_device: 1 << 30, ..HostConfig::default() };
        let rt = Runtime::builder().backend(BackendChoice::Host).host_config(config).build().unwrap();
        let dev = rt.device(0).unwrap();
        let s = dev.create_stream().unwrap();
        let pool = dev.create_mem_pool(0, 0).unwrap();
        pool.set_idle_release(Some(Duration::from_millis(100))).unwrap();
        pool.set_idle_clock(Some(Duration::ZERO)).unwrap();
        let core = pool.own("be looked at").unwrap();
        let seen = || (core.idle_current.load(Ordering::Relaxed), lock(&core.idle).current);
        let (mirror, current) = seen();
        assert_eq!((mirror, current), (0, 0));
        // The first request needs its size.
        let a = pool.alloc_raw(8 * MIB, &s).unwrap();
        let (mirror, first) = seen();
        assert_eq!(mirror, first);
        assert!(first >= 8 * MIB, "{first}");
        // Freed, then a smaller one (another size: the slow path): no change.
        rt.free_async(a, &s).unwrap();
        let b = pool.alloc_raw(MIB, &s).unwrap();
        assert_eq!(seen(), (first, first), "a request that needs less changes nothing");
        // One that needs more raises both.
        let c = pool.alloc_raw(16 * MIB, &s).unwrap();
        let (mirror, more) = seen();
        assert_eq!(mirror, more);
        assert!(more > first, "{more} after {first}");
        // A step later (a quarter window), a small request starts the new
        // step at its own need.
        rt.free_async(c, &s).unwrap();
        pool.set_idle_clock(Some(Duration::from_millis(30))).unwrap();
        let d = pool.alloc_raw(2 * MIB, &s).unwrap();
        let (mirror, next) = seen();
        assert_eq!(mirror, next);
        assert!(next < more, "the new step needs {next}, the last one {more}");
        for p in [b, d] {
            rt.free_async(p, &s).unwrap();
        }
        s.synchronize().unwrap();
    }

    /// What the last window and the last two windows needed, step by step:
    /// a peak leaves the window after three more steps and the two windows
    /// after seven; steps without a request count as needing no more than
    /// the step before them and the request after them.
    #[test]
    fn the_windows_keep_what_their_steps_needed() {
        let mut w = IdleWindows::new();
        w.current = 100;
        // One step later, asking for 10: both still hold the peak.
        assert_eq!(w.end_step(1, 10, 1), (100, 100));
        for step in 2..=3 {
            assert_eq!(w.end_step(1, 10, step), (100, 100), "step {step}");
        }
        // The peak's step is now four steps back: out of the window.
        assert_eq!(w.end_step(1, 10, 4), (10, 100));
        for step in 5..=7 {
            assert_eq!(w.end_step(1, 10, step), (10, 100), "step {step}");
        }
        assert_eq!(w.end_step(1, 10, 8), (10, 10), "eight steps back: out of both");
        // A long quiet gap: the steps in it needed at most the smaller of the
        // step before and the request after.
        w.current = 50;
        assert_eq!(w.end_step(2, 20, 10), (50, 50));
        assert_eq!(w.end_step(u64::from(STEPS), 20, 20), (20, 50));
        assert_eq!(w.end_step(u64::MAX, 5, 30), (5, 5), "a gap of more than two windows forgets everything");
        assert_eq!(w.earlier.len(), EARLIER);
        assert_eq!((w.current, w.started), (5, 30));
    }
}
