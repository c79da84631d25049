//! The pool's side of learned layouts (`plan/` is the policy): asking the
//! planner on every allocation and free while it learns or runs, making its
//! arena (pieces of the heap) and giving the arena back.
//!
//! - On: pools on virtual memory that are not shareable between processes,
//!   unless `HIPMEM_POOL_PLAN=0` or [`MemPool::set_planning`](super::MemPool::set_planning)
//!   turns it off. Learning that plans nothing in [`PATIENCE`](super::plan::PATIENCE)
//!   allocations, confirms no period in [`CANDIDATE_PATIENCE`](super::plan::CANDIDATE_PATIENCE)
//!   (or plans nothing in [`QUICK_PATIENCE`](super::plan::QUICK_PATIENCE) without
//!   ever having 64 MiB live) pauses (1 s, doubling up to a minute), so an
//!   irregular workload pays one atomic load per call.
//! - The arena's pieces are blocks of the pool's heap (free runs it had left
//!   and one new piece), so statistics, access, trim and teardown see them
//!   as pool memory. Before taking them, the pool waits for its streams'
//!   frees and gives its idle memory back: the arena replaces what the usual
//!   path held for the same blocks. Idle memory in groups that follow each
//!   other (mostly the arena before) is kept for the new piece instead, so
//!   that a plan that follows another maps only the difference.
//! - When a plan ends, its pieces go back to the heap at once and its live
//!   blocks are taken over by the usual path (`hand_over_old_arena`), if
//!   every free in the arena is complete or all were on one stream (the
//!   pieces are then pending on it); else once its blocks are freed. A
//!   running plan's pieces (it makes a new arena at its next quiet point) go
//!   back on trim, under the release threshold and before OutOfMemory; only
//!   once every free in them is known complete.
//! - A provisional plan (`plan/mod.rs`) makes its arena as any plan, its new
//!   piece mapped as any growth is (not one physical allocation: it may be
//!   handed over with live blocks in it).
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::backing::Backing;
use super::core::{ORPHAN_STREAM, PoolCore, StreamRef, lock};
use super::placement::Owner;
use super::plan::{Freed, Request, Sig};
use crate::backend::DevicePtr;
use crate::error::Result;
use crate::runtime::Runtime;
use crate::runtime::ordering::StreamClock;

/// Whether a plan may be laid out in the memory the pool holds before
/// anything goes back ([`PoolCore::in_place_layout`];
/// `HIPMEM_POOL_PLAN_IN_PLACE=0` turns it off).
fn plan_in_place() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("HIPMEM_POOL_PLAN_IN_PLACE").map_or(true, |v| v != "0"))
}

/// The least releasable memory in the free runs for which a plan is laid
/// out in place as well as the usual way ([`PoolCore::in_place_layout`]):
/// 32 units of 2 MiB, about 1 ms of unmapping and releasing on a GPU.
const IN_PLACE_LEAST: u64 = 64 << 20;

/// A plan is laid out in place where the pool then holds at most this
/// part of the plan's peak more than the usual way
/// ([`PoolCore::in_place_layout`]): 1/128 (0.8%). Which way holds less
/// turns on a few tens of MB of several GB on recorded PyTorch runs (a
/// plan laid out over several runs packs a little less tightly than in one
/// new piece), while the usual way unmaps and releases every wholly free
/// unit, and maps the arena anew:
/// - GPT-2's second plan: 25 MB more in place (0.37%), against about 790
///   units of 2 MiB unmapped and released; with tiny blocks kept apart
///   (`MemPool::set_tiny_blocks_apart`) 30 MB (0.45%), and at 1/256 its 60
///   steps made 4 270 driver calls instead of 3 030, though in place it
///   held 73 MB less than the default pool does.
/// - The recorded CNN's third plan, its first steps mapped in pieces: 17 MB
///   of 2.9 GB (0.6%), with 404 driver calls (14.3 ms of its 40.8 ms replay
///   on an H200). With this slack its replay made 650 backend calls instead
///   of 1168, held 1.010 of its peak after the warm-up instead of 1.004, and
///   took 0.62-0.87 of the driver's pool's time in six rounds on H200s
///   instead of 1.1-1.2 (docs/pool-measurements.md, "Stop 69").
///
/// Pools with the defaults choose the same at 1/256 and at 1/128 on every
/// recorded run (docs/pool-measurements.md, "Stop 75").
const IN_PLACE_SLACK: u64 = 128;

/// The spans of `spans` (address, length; sorted, disjoint) that overlap
/// `[start, end)`, with their indices (none where the range is empty).
fn overlapping(spans: &[(u64, u64)], start: u64, end: u64) -> impl Iterator<Item = (usize, &(u64, u64))> {
    let from = spans.partition_point(|&(a, l)| a + l <= start);
    spans.iter().enumerate().skip(from).take_while(move |(_, r)| start < end && r.0 < end)
}

/// Free runs (address, length) and a plan's layout in them.
type Runs = (Vec<(u64, u64)>, super::plan::Layout);

/// The smallest free run a plan is laid out in.
const MIN_PIECE: u64 = 64 << 10;
/// The most free runs a plan is laid out in.
const MAX_PIECES: usize = 4096;

/// Whether a new pool learns layouts.
pub(super) fn plans_by_default(backing: &Backing, props: &super::PoolProps) -> bool {
    matches!(backing, Backing::Virtual(_))
        && props.handle_types == 0
        && std::env::var("HIPMEM_POOL_PLAN").map(|v| v != "0").unwrap_or(true)
}

impl PoolCore {
    /// Allocation while the planner learns or runs.
    pub(super) fn alloc_planned(&self, want: u64, size: u64, stream: &StreamRef<'_>) -> Result<DevicePtr> {
        let sig = Sig { size: want, stream: stream.clock.stream_id };
        if !self.plan.running.load(Ordering::Acquire) {
            // An ended plan's arena goes back first (with no plan running,
            // an arena is an ended plan's).
            if self.plan.has_arena() {
                self.hand_over_old_arena(stream);
            }
            // Learning: the usual path, then one lock to record it.
            let r = self.alloc_unplanned(want, size, stream);
            if let Ok(p) = &r {
                let mut planner = self.plan.lock();
                planner.observed(sig, p.0);
                self.plan.running.store(planner.has_runner(), Ordering::Release);
                self.pause_if_fruitless(&planner);
            }
            return r;
        }
        loop {
            let (request, ended) = {
                let mut planner = self.plan.lock();
                let r = planner.request(sig, &mut |f| self.reusable(f, stream.clock));
                self.plan.running.store(planner.has_runner(), Ordering::Release);
                (r, planner.has_old_arena())
            };
            match request {
                Request::Serve(addr) => {
                    self.count_allocated(&self.slot_of(stream), addr, want, false);
                    return Ok(DevicePtr(addr));
                }
                Request::Normal(ordinal) => {
                    // (A plan this request ended gives its arena back first.)
                    if ended {
                        self.hand_over_old_arena(stream);
                    }
                    let r = self.alloc_unplanned(want, size, stream);
                    let mut planner = self.plan.lock();
                    if let Ok(p) = &r {
                        planner.allocated(ordinal, p.0);
                    }
                    self.plan.running.store(planner.has_runner(), Ordering::Release);
                    self.pause_if_fruitless(&planner);
                    return r;
                }
                Request::NeedArena => match self.make_arena(stream) {
                    Ok(true) => {}
                    Ok(false) => {
                        // Another thread started it, or it ended meanwhile;
                        // a plan still waiting for an arena gives up.
                        let mut planner = self.plan.lock();
                        if planner.waits_for_arena() {
                            planner.no_arena();
                        }
                    }
                    Err(e) => {
                        tracing::debug!(target: "hipmem::pool", "pool {:#x}: no arena for a plan ({e})", self.id);
                        self.plan.lock().no_arena();
                    }
                },
            }
        }
    }

    /// Pauses learning that found nothing.
    fn pause_if_fruitless(&self, planner: &std::sync::MutexGuard<'_, super::plan::Planner>) {
        if planner.fruitless() {
            self.plan.on.store(false, Ordering::Relaxed);
            let mut paused = lock(&self.plan.paused);
            paused.begin();
            tracing::debug!(target: "hipmem::pool", "pool {:#x}: no repeating sequence found; learning pauses for {:?} and {} frees", self.id, paused.length, paused.frees);
        }
    }

    /// Learning resumes once its pause is over, its time and its count of
    /// the heap's frees (asked on the slow path, before the pool grows).
    pub(super) fn resume_planning(&self) {
        if self.plan.on.load(Ordering::Relaxed) || !lock(&self.plan.paused).is_paused() {
            return;
        }
        let frees = lock(&self.heap).frees();
        let over = {
            let mut paused = lock(&self.plan.paused);
            let over = paused.is_over(frees);
            if over {
                paused.end();
            }
            over
        };
        if over {
            self.plan.lock().forget();
            self.plan.on.store(true, Ordering::Relaxed);
        }
    }

    /// Turns learning layouts on or off. Off ends a running plan (its arena
    /// goes back once its blocks are freed).
    pub(crate) fn set_planning(&self, on: bool) {
        {
            // What was learned while off (or paused) missed frees: start again.
            let mut planner = self.plan.lock();
            planner.forget();
            if !on {
                planner.end();
                self.plan.running.store(false, Ordering::Release);
            }
        }
        *lock(&self.plan.paused) = super::plan::Pause::default();
        self.plan.on.store(on && matches!(self.backing, Backing::Virtual(_)), Ordering::Relaxed);
        if !on {
            if let Ok(rt) = self.runtime() {
                self.retire_arena(&rt, false, false);
            }
        }
    }

    /// Whether the pool learns layouts now.
    pub(crate) fn planning(&self) -> bool {
        self.plan.on.load(Ordering::Relaxed)
    }

    /// What the planner did.
    pub(crate) fn plan_counts(&self) -> super::PlanCounts {
        self.plan.lock().counts
    }

    /// Whether memory freed as `f` may be reused on the stream with `clock`
    /// now (the reuse rules of `reuse.rs`, without waiting).
    fn reusable(&self, f: &Freed, clock: &StreamClock) -> bool {
        let other = f.clock.stream_id;
        if other == clock.stream_id || f.clock.is_complete(f.tag) {
            return true;
        }
        if self.policy.follow_event_dependencies.load(Ordering::Relaxed) && clock.knows(other, f.tag) {
            return true;
        }
        if !self.policy.allow_opportunistic.load(Ordering::Relaxed)
            || other == ORPHAN_STREAM
            || !lock(&self.slots).contains_key(&other)
        {
            return false;
        }
        let Ok(rt) = self.runtime() else { return false };
        self.learn_completed(&rt, &f.clock, f.raw, false) && f.clock.is_complete(f.tag)
    }

    /// Frees a block of the arena.
    pub(super) fn free_planned(&self, ptr: DevicePtr, stream: &StreamRef<'_>) -> bool {
        let (size, ended) = {
            let mut planner = self.plan.lock();
            let record = |len| Freed {
                len,
                clock: Arc::clone(stream.clock),
                raw: stream.raw,
                tag: stream.clock.free_tag(),
            };
            let Some(size) = planner.freed(ptr.0, record) else { return false };
            (size, planner.has_old_arena() && planner.live_bytes() == 0)
        };
        let slot = self.slot_of(stream);
        slot.lock().used -= size as i64;
        crate::trace::free_requested(self.id, stream.clock.stream_id, self.device, ptr.0, 0);
        if ended || self.is_destroyed() {
            if let Ok(rt) = self.runtime() {
                self.retire_arena(&rt, self.is_destroyed(), false);
                if self.is_destroyed() {
                    self.release_unused_to(&rt, 0);
                }
            }
        }
        true
    }

    /// Makes the arena of the waiting plan and starts it. At the plan's
    /// quiet point the memory the usual path held for the same blocks is
    /// idle: the pool waits for its streams' frees, gives back what is
    /// wholly free, lays the plan out in the free runs that are left (the
    /// holes between long-lived blocks) and grows by one piece, exactly,
    /// for the rest. The longest run of wholly free groups (the arena
    /// before this one, where there was one) is not given back but kept
    /// for the new piece: its groups that the piece covers stay mapped,
    /// the rest go back, and only what is still missing is created, right
    /// after them (on an H100, giving back and creating again 6 GB cost
    /// 9-15 ms per plan on replayed PyTorch training runs).
    fn make_arena(&self, stream: &StreamRef<'_>) -> Result<bool> {
        let rt = self.runtime()?;
        let t0 = Instant::now();
        let slot = self.slot_of(stream);
        self.flush_slot_cache(&slot);
        self.flush_other_caches(slot.stream_id());
        for s in self.all_slots() {
            self.wait_for_own_frees(&rt, s.stream_id());
        }
        let t1 = Instant::now();
        // Laid out in the memory held now, where that holds no more than the
        // usual way below (`in_place_layout`).
        let (in_place, foreseen) = match self.in_place_layout() {
            Some(Ok(chosen)) => (Some(chosen), None),
            Some(Err(usual)) => (None, Some(usual)),
            None => (None, None),
        };
        // The usual way: the longest run of wholly free groups (mostly the
        // arena before this one) is kept out of the heap while the rest
        // goes back and the plan is laid out; the new piece then goes
        // there, so that its physical memory is not given back and created
        // again. (In place, those groups are one of the runs.)
        let kept = if in_place.is_some() { Vec::new() } else { self.free_group_chain() };
        let hidden = match (kept.first(), kept.last()) {
            (Some(&(start, _)), Some(&(last, len))) => {
                lock(&self.heap).take_range(start, last + len - start).is_some().then_some(start)
            }
            _ => None,
        };
        let kept: &[(u64, u64)] = if hidden.is_some() { &kept } else { &[] };
        let kept_bases: Vec<u64> = kept.iter().map(|g| g.0).collect();
        let chosen_in_place = in_place.is_some();
        if !chosen_in_place {
            self.release_unused_to_later(&rt, 0);
        }
        let t2 = Instant::now();
        let (runs, layout) = match in_place {
            Some((runs, layout)) => (runs, Some(layout)),
            None => {
                let runs = self.free_runs_for_plan();
                // (The usual way's layout, where giving back left the runs
                // foreseen: not laid out twice.)
                let layout = match foreseen {
                    Some((left, layout)) if left == runs => Some(layout),
                    _ => {
                        let sizes: Vec<u64> = runs.iter().map(|r| r.1).collect();
                        self.plan.lock().layout(&sizes)
                    }
                };
                (runs, layout)
            }
        };
        let t3 = Instant::now();
        // Take the parts of the runs the plan uses.
        let mut pieces = Vec::new();
        if let Some(layout) = &layout {
            let mut heap = lock(&self.heap);
            for (&(addr, _), &used) in runs.iter().zip(&layout.used) {
                let take = used.next_multiple_of(super::placement::BLOCK_ALIGN);
                if take > 0 && heap.take(addr, take).is_some() {
                    pieces.push((addr, take));
                } else {
                    pieces.push((addr, 0));
                }
            }
        }
        if chosen_in_place {
            // What the plan does not use goes back now.
            self.release_unused_to_later(&rt, 0);
        }
        if let Some(start) = hidden {
            lock(&self.heap).release_block(start, Owner::Global);
        }
        let Some(layout) = layout else {
            self.release_groups(&rt, &kept_bases);
            return Ok(false);
        };
        let taken_ok = pieces.iter().zip(&layout.used).all(|(p, &u)| u == 0 || p.1 > 0);
        let mut new_piece = None;
        if taken_ok && layout.extra > 0 {
            // (In one physical allocation, but for a provisional plan's,
            // which may be handed over with live blocks in it.)
            let whole = !self.plan.lock().waits_provisionally();
            self.exact_growth.store(whole, Ordering::Relaxed);
            self.arena_growth.store(true, Ordering::Relaxed);
            let over_kept = (!kept.is_empty())
                .then(|| self.grow_over_kept(&rt, kept, layout.extra, slot.stream_id()))
                .flatten();
            let grown = over_kept.unwrap_or_else(|| {
                // The kept groups go back first, as they would have before.
                self.release_groups(&rt, &kept_bases);
                self.alloc_slow(layout.extra, layout.extra, &slot)
            });
            self.exact_growth.store(false, Ordering::Relaxed);
            self.arena_growth.store(false, Ordering::Relaxed);
            match grown {
                Ok(p) => new_piece = Some(p),
                Err(e) => {
                    self.release_groups(&rt, &kept_bases);
                    self.give_back_pieces(&pieces);
                    return Err(e);
                }
            }
        }
        // Kept groups the new piece did not take go back.
        self.release_groups(&rt, &kept_bases);
        if !taken_ok {
            self.give_back_pieces(&pieces);
            return Err(crate::error::Error::Unknown(
                "the free runs changed while the plan was laid out".into(),
            ));
        }
        let from_runs: u64 = pieces.iter().map(|p| p.1).sum();
        pieces.extend(new_piece);
        if !self.plan.lock().start(&layout, pieces.clone()) {
            self.give_back_pieces(&pieces);
            return Ok(false);
        }
        self.plan.publish(true);
        let ms = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64() * 1e3;
        let t4 = Instant::now();
        tracing::debug!(
            target: "hipmem::pool",
            "pool {:#x}: a plan starts: {from_runs} bytes in {} free runs, {} new (waiting {:.2} ms, giving back {:.2} ms, laying out {:.2} ms, growing {:.2} ms)",
            self.id,
            layout.used.iter().filter(|&&u| u > 0).count(),
            layout.extra,
            ms(t0, t1),
            ms(t1, t2),
            ms(t2, t3),
            ms(t3, t4)
        );
        Ok(true)
    }

    /// The pool's global free runs a plan may be laid out in, largest
    /// first (at most [`MAX_PIECES`], none under [`MIN_PIECE`]).
    fn free_runs_for_plan(&self) -> Vec<(u64, u64)> {
        let mut runs = lock(&self.heap).global_free_blocks(MIN_PIECE);
        runs.sort_unstable_by_key(|&(a, len)| (std::cmp::Reverse(len), a));
        runs.truncate(MAX_PIECES);
        runs
    }

    /// A plan laid out in the memory the pool holds now, before anything
    /// goes back: every free run, wholly free units and groups included.
    ///
    /// Chosen only where the pool then holds no more than the usual way
    /// (giving back all unused memory but the arena before, then laying
    /// the plan out in the runs that are left and a new piece over that
    /// arena), but for [`IN_PLACE_SLACK`]: what it keeps mapped under the
    /// plan's blocks (the arena before among them) plus its new piece,
    /// against the usual way's new piece. Each unit kept costs no unmap,
    /// no release and no new memory, where on an H100 unmapping and
    /// releasing a 2 MiB unit take about 27 µs (`docs/pool-measurements.md`).
    ///
    /// Returns Ok with the runs (largest first) and the layout where it is
    /// chosen, Err with the runs the usual way foresees and its layout
    /// where not; None where little could go back (or where
    /// `HIPMEM_POOL_PLAN_IN_PLACE=0`).
    fn in_place_layout(&self) -> Option<std::result::Result<Runs, Runs>> {
        if !plan_in_place() {
            return None;
        }
        let t0 = Instant::now();
        let releasable = self.releasable_spans();
        if releasable.is_empty() {
            return None;
        }
        let runs = self.free_runs_for_plan();
        // Where little of the runs could go back, the two ways differ by
        // little: not worth laying the plan out twice.
        let in_runs: u64 = runs
            .iter()
            .flat_map(|&(addr, len)| overlapping(&releasable, addr, addr + len))
            .map(|(_, r)| r.1)
            .sum();
        if in_runs < IN_PLACE_LEAST {
            return None;
        }
        // The runs the usual way would lay out in: what giving back leaves.
        let mut left: Vec<(u64, u64)> = Vec::new();
        for &(addr, len) in &runs {
            let mut at = addr;
            for (_, &(a, l)) in overlapping(&releasable, addr, addr + len) {
                if a > at {
                    left.push((at, a - at));
                }
                at = at.max(a + l);
            }
            if addr + len > at {
                left.push((at, addr + len - at));
            }
        }
        left.retain(|&(_, len)| len >= MIN_PIECE);
        left.sort_unstable_by_key(|&(a, len)| (std::cmp::Reverse(len), a));
        left.truncate(MAX_PIECES);
        let sizes: Vec<u64> = runs.iter().map(|r| r.1).collect();
        let left_sizes: Vec<u64> = left.iter().map(|r| r.1).collect();
        let (here, least, usual_bound) = {
            let plan = self.plan.lock();
            (plan.layout(&sizes)?, plan.least_bytes()?, plan.least_extra(&left_sizes)?)
        };
        // Releasable memory under the blocks laid out in place stays.
        // (A group may reach into several runs: counted once.)
        let kept: std::collections::BTreeSet<usize> = runs
            .iter()
            .zip(&here.used)
            .flat_map(|(&(addr, _), &used)| overlapping(&releasable, addr, addr + used))
            .map(|(i, _)| i)
            .collect();
        let kept_bytes: u64 = kept.iter().map(|&i| releasable[i].1).sum();
        // (Either way the new piece is mapped in whole units.)
        let unit = self.mapping_unit().unwrap_or(1).max(1);
        let held_here = kept_bytes + here.extra.next_multiple_of(unit);
        // The usual way's new piece holds at least what its runs cannot of
        // the blocks live at each position, counting apart those that only
        // its larger runs hold (`plan::least_extra`; never less than the
        // plan's peak less the runs' bytes): in place is chosen without
        // laying the plan out the usual way where it needs no more than
        // that.
        let usual_least = usual_bound.next_multiple_of(unit);
        let slack = least / IN_PLACE_SLACK;
        // Otherwise the usual way is laid out, given up as soon as it needs
        // `held_here - slack` or more (then in place is chosen: laid out to
        // the end, it would need at least that).
        let (chosen, usual, usual_text) = if held_here <= usual_least + slack {
            (true, None, format!("at least {usual_least} (bound)"))
        } else {
            match self.plan.lock().layout_within(&left_sizes, held_here - slack - 1)? {
                Some(usual) => {
                    let text = usual.extra.to_string();
                    (held_here <= usual.extra.next_multiple_of(unit) + slack, Some(usual), text)
                }
                None => (true, None, format!("at least {} (laid out in part)", held_here - slack)),
            }
        };
        tracing::debug!(
            target: "hipmem::pool",
            "pool {:#x}: a plan laid out in place keeps {kept_bytes} bytes and grows by {}; the usual way grows by {usual_text} ({}; decided in {:.2} ms)",
            self.id,
            here.extra,
            if chosen { "in place" } else { "the usual way" },
            t0.elapsed().as_secs_f64() * 1e3
        );
        Some(if chosen { Ok((runs, here)) } else { Err((left, usual?)) })
    }

    /// Grows by a plan's new piece of `extra` bytes over the kept groups
    /// (consecutive, each wholly free): the groups it covers stay mapped,
    /// those past it go back, and new memory is mapped right after the
    /// covered ones for the rest. None where those addresses are not
    /// unbacked: the piece is then grown as any other, once the caller has
    /// given the kept groups back.
    fn grow_over_kept(
        &self,
        rt: &Runtime,
        kept: &[(u64, u64)],
        extra: u64,
        stream: u64,
    ) -> Option<Result<(u64, u64)>> {
        let start = kept[0].0;
        let mut covered = 0;
        let mut surplus = Vec::new();
        for &(base, len) in kept {
            if surplus.is_empty() && covered + len <= extra {
                covered += len;
            } else {
                surplus.push(base);
            }
        }
        self.release_groups(rt, &surplus);
        if covered == extra && lock(&self.heap).take_range(start, extra).is_some() {
            return Some(Ok((start, extra)));
        }
        // A growth maps in the part of the range of the piece's size class:
        // kept groups elsewhere (the zone's part, `zone.rs`) cannot be
        // extended by it, and kept while it maps all of the piece they
        // would be held twice.
        let same_part = lock(&self.heap).segment_of(start).is_some_and(|s| s.class == self.class_of(extra));
        if covered == 0
            || covered == extra
            || !same_part
            || !self.can_map_at(start + covered, extra - covered)
        {
            return None;
        }
        let grown = self.grow(rt, extra, stream);
        if grown.is_ok() {
            self.note_growth();
        }
        Some(grown)
    }

    /// Gives pieces taken for an arena back to the heap.
    fn give_back_pieces(&self, pieces: &[(u64, u64)]) {
        let mut heap = lock(&self.heap);
        for &(addr, len) in pieces {
            if len > 0 {
                heap.release_block(addr, Owner::Global);
            }
        }
    }

    /// Gives an ended plan's arena back to the heap at once, its live
    /// blocks handed to the usual path (taken in the heap, known to
    /// `stream`'s slot), so that the rest of the sequence (the plan did not expect
    /// it) can use its free memory. Only where every free made in the
    /// arena is complete, or all were on one stream (the memory is then
    /// pending on it); else the arena waits for its blocks as before. (All
    /// under the planner's lock: a free of one of those blocks meanwhile
    /// finds it in the planner or in the slot.)
    fn hand_over_old_arena(&self, stream: &StreamRef<'_>) -> bool {
        let Ok(rt) = self.runtime() else { return false };
        let slot = self.slot_of(stream);
        let mut planner = self.plan.lock();
        let Some((idle, live)) = planner.take_old_arena_with_live() else { return false };
        let owner = owner_after(idle.freed.iter().map(|(_, f)| f), |f| self.ask_stream(&rt, f, false));
        let Some(owner) = owner else {
            planner.restore_arena_with_live(idle, live);
            return false;
        };
        {
            let mut heap = lock(&self.heap);
            for &(addr, len) in &idle.pieces {
                if len > 0 {
                    heap.release_block(addr, owner);
                }
            }
            for &(addr, size) in &live {
                if heap.take_range(addr, size).is_none() {
                    tracing::warn!(target: "hipmem", "pool {:#x}: the live block at {addr:#x} of an ended plan's arena was not free to take over", self.id);
                }
            }
        }
        let mut state = slot.lock();
        for &(addr, size) in &live {
            state.insert_live(addr, size);
        }
        drop(state);
        self.plan.publish(false);
        drop(planner);
        let bytes: u64 = idle.pieces.iter().map(|p| p.1).sum();
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: an ended plan's arena of {bytes} bytes went back to the heap, its {} live blocks taken over", self.id, live.len());
        true
    }

    /// Whether the free `f` is known complete, asking its stream (with
    /// `wait`, waiting for it) if the stream is still the pool's.
    fn free_complete(&self, rt: &Runtime, f: &Freed, wait: bool) -> bool {
        f.clock.is_complete(f.tag) || (self.ask_stream(rt, f, wait) && f.clock.is_complete(f.tag))
    }

    /// Asks the stream `f` was freed on whether it is idle (with `wait`,
    /// waits for it; then every free made on it so far is complete), if the
    /// stream is still the pool's.
    fn ask_stream(&self, rt: &Runtime, f: &Freed, wait: bool) -> bool {
        f.clock.stream_id != ORPHAN_STREAM
            && lock(&self.slots).contains_key(&f.clock.stream_id)
            && self.learn_completed(rt, &f.clock, f.raw, wait)
    }

    /// Gives an arena without live blocks back to the heap: an ended plan's,
    /// or with `all` also the running plan's. Every free in it must be
    /// complete (with `wait`, the streams are waited for). Returns whether
    /// an arena went back.
    pub(super) fn retire_arena(&self, rt: &Runtime, all: bool, wait: bool) -> bool {
        let Some(idle) = self.plan.lock().take_idle_arena(all) else { return false };
        let complete = idle.freed.iter().all(|(_, f)| self.free_complete(rt, f, wait));
        if !complete {
            self.plan.lock().restore_arena(idle);
            return false;
        }
        self.plan.publish(false);
        self.give_back_pieces(&idle.pieces);
        let bytes: u64 = idle.pieces.iter().map(|p| p.1).sum();
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: a plan's arena of {bytes} bytes went back to the heap", self.id);
        true
    }
}

/// Who may reuse an ended arena's memory when it goes back to the heap,
/// given the frees made in it: every stream if all of them are complete,
/// the one stream that all the incomplete ones were made on (up to its
/// latest tag), else no one yet (None: the arena waits). `ask` asks a free's
/// stream whether it is idle (if so, every free made on it so far is
/// complete). Each stream is asked at most once and the search stops at a
/// second stream with a free pending: the hand-over is tried on each
/// allocation while frees are pending, and it costs a query per stream, not
/// per free.
fn owner_after<'a>(
    freed: impl IntoIterator<Item = &'a Freed>,
    mut ask: impl FnMut(&Freed) -> bool,
) -> Option<Owner> {
    let mut asked: Vec<u64> = Vec::new();
    let mut pending: Option<(u64, u64)> = None; // (stream, latest tag)
    for f in freed {
        if f.clock.is_complete(f.tag) {
            continue;
        }
        let stream = f.clock.stream_id;
        if !asked.contains(&stream) {
            asked.push(stream);
            if ask(f) && f.clock.is_complete(f.tag) {
                continue;
            }
        }
        pending = match pending {
            None => Some((stream, f.tag)),
            Some((s, tag)) if s == stream => Some((s, tag.max(f.tag))),
            Some(_) => return None,
        };
    }
    Some(match pending {
        None => Owner::Global,
        Some((stream, tag)) => Owner::Stream { stream, tag },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::RawStream;

    fn frees_on(clock: &Arc<StreamClock>, n: usize) -> Vec<Freed> {
        (0..n)
            .map(|_| Freed {
                len: 1 << 20,
                clock: Arc::clone(clock),
                raw: RawStream { device: 0, handle: clock.stream_id },
                tag: clock.free_tag(),
            })
            .collect()
    }

    #[test]
    fn an_arena_whose_frees_are_complete_goes_to_every_stream_without_asking() {
        let a = Arc::new(StreamClock::new(1));
        let frees = frees_on(&a, 50);
        a.mark_completed(a.advance());
        let mut asked = 0;
        assert_eq!(
            owner_after(&frees, |_| {
                asked += 1;
                false
            }),
            Some(Owner::Global)
        );
        assert_eq!(asked, 0);
    }

    #[test]
    fn each_stream_is_asked_once_however_many_frees_it_has_pending() {
        let a = Arc::new(StreamClock::new(1));
        let b = Arc::new(StreamClock::new(2));
        let mut frees = frees_on(&a, 100);
        frees.extend(frees_on(&b, 100));
        frees.extend(frees_on(&a, 100));
        // Both busy: the second stream with a free pending ends the search.
        let mut asked = Vec::new();
        assert_eq!(
            owner_after(&frees, |f| {
                asked.push(f.clock.stream_id);
                false
            }),
            None
        );
        assert_eq!(asked, vec![1, 2]);
        // `b` idle: its frees complete, the memory goes pending on `a`.
        let mut asked = Vec::new();
        let owner = owner_after(&frees, |f| {
            asked.push(f.clock.stream_id);
            let idle = f.clock.stream_id == 2;
            if idle {
                f.clock.mark_completed(f.clock.advance());
            }
            idle
        });
        assert_eq!(owner, Some(Owner::Stream { stream: 1, tag: frees[0].tag }));
        assert_eq!(asked, vec![1, 2]);
        // Both idle: every stream may reuse it.
        let mut asked = 0;
        let owner = owner_after(&frees, |f| {
            asked += 1;
            f.clock.mark_completed(f.clock.advance());
            true
        });
        assert_eq!(owner, Some(Owner::Global));
        assert_eq!(asked, 1, "only `a` was still pending");
    }
}
