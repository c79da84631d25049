//! Zone placement: the blocks that will be live when a step's largest block
//! comes are packed together, with that block right after them.
//!
//! The problem it solves: a workload whose steps have different shapes
//! (variable-length inference) has no exact repeats for a plan, and when the
//! step's largest block comes (the logits), the blocks still live from that
//! step lie scattered over physical allocations that cannot go back while
//! they hold a live block. The free memory beside them is held on top of the
//! new block. Which blocks those are does repeat: the steps have the same
//! allocations in the same order, whatever their sizes.
//!
//! So the learner counts allocations from the step's largest one (its
//! *anchor*) and learns, step by step, which counts were live across it. A
//! block whose count was live across the last anchor is a *zone block*: the
//! pool puts it in its own part of the address range (the largest size
//! class's, which a pool that only grows does not otherwise use), lowest
//! address first, so that those blocks pack from the bottom and the largest
//! block (also a zone block) lands right after them. Everything else goes
//! where it would have gone. At the largest block, the memory of the other
//! blocks is wholly free, and the pool gives it back before growing.
//!
//! How the anchor is found:
//! - before a step length is known, a block is a candidate when it is the
//!   largest so far, and it becomes the anchor once [`CONFIRM_OPS`]
//!   operations pass without a larger one;
//! - once two anchors are a step length apart and the next allocation at
//!   that length is the largest so far, the learner *locks*: from then on
//!   the anchor is the allocation at that count, whatever its size (a
//!   smaller batch's largest block may come elsewhere in the step, and the
//!   counts must not drift).
//!
//! Until the first anchor every block is a zone block (a run's first
//! blocks are its weights: live across every anchor). Blocks allocated
//! while the anchor's block is live are zone blocks too (they come after it
//! in the step and would otherwise make the other part grow at the peak).
//!
//! Until the step length locks, a block allocated right after another
//! allocation (no free between them) is a zone block too. Long-lived state
//! is made in runs of allocations with no free between them: a model's
//! weights, and an optimizer's state in the first step that runs it (Adam:
//! two blocks per parameter, 444 allocations in a row in the recorded
//! checkpointed training, after the first anchor). Counts cannot tell those
//! yet (they were never live across an anchor), and put where the usual
//! path puts them, beside the first step's gradients, each pins a physical
//! allocation of up to 128 MiB after the gradients are freed: the plan
//! later laid out around them could use only part of the holes, and the
//! recorded run held 1.018-1.033 of its peak over five idle-release windows.
//! Packed in the zone's part, they leave the rest of the range to the
//! step's own blocks (1.006-1.008). A step's own runs are short (at most 9
//! allocations there), and once the step locks, counts decide alone.
//!
//! The learner is policy only: no runtime, no locks (the pool holds it
//! behind one), `#![forbid(unsafe_code)]`.
#![forbid(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// The size class whose part of a pool's address range holds zone blocks
/// (the largest class's: a pool that only grows keeps every size in one
/// heap, the first class's, and leaves the others' parts unused).
pub const ZONE_CLASS: usize = super::placement::CLASSES - 1;

/// Operations (allocations and frees) without a larger allocation after
/// which a candidate becomes the anchor, before a step length is known.
pub const CONFIRM_OPS: u64 = 700;

/// A candidate anchor: the largest allocation since the last anchor.
#[derive(Debug)]
struct Candidate {
    /// The operation count at it.
    op: u64,
    size: u64,
    /// Its allocation count since the last anchor.
    ord: usize,
    /// The counts of this step's blocks live just before it.
    live: Vec<usize>,
    /// Whether it is the anchor already (a locked step length).
    anchored: bool,
}

/// Learns which allocations are zone blocks (see the module's doc).
#[derive(Debug, Default)]
pub struct ZoneLearner {
    /// Allocations and frees seen.
    ops: u64,
    /// Allocations since the anchor.
    ord: usize,
    /// This step's live blocks: address → allocation count since the anchor.
    step: HashMap<u64, usize>,
    /// The step length (allocations between the last two anchors).
    step_len: Option<usize>,
    /// The counts that were live across the last anchor.
    zone: HashSet<usize>,
    cand: Option<Candidate>,
    /// The step length repeats: anchors come at it.
    locked: bool,
    /// The anchor's block, while it is live.
    anchor_addr: Option<u64>,
    /// The last operation seen was an allocation (not a free).
    after_alloc: bool,
}

/// What [`ZoneLearner::decide`] says of one allocation; handed back to
/// [`ZoneLearner::placed`] with its address (so that threads allocating at
/// once each record their own).
#[derive(Copy, Clone, Debug)]
#[must_use]
pub struct Zoning {
    /// Whether the block is a zone block.
    pub zone: bool,
    ord: usize,
    anchor: bool,
}

impl ZoneLearner {
    /// A learner that has seen nothing.
    pub fn new() -> ZoneLearner {
        ZoneLearner::default()
    }

    /// Whether the step length is known and anchors come at it.
    pub fn locked(&self) -> bool {
        self.locked
    }

    /// The step length in allocations, once known.
    pub fn step_len(&self) -> Option<usize> {
        self.step_len
    }

    fn anchor(&mut self, at: usize, live: Vec<usize>) {
        self.step_len = Some(at);
        self.zone = live.into_iter().collect();
        // Blocks allocated after the new anchor keep their place in the step.
        self.step.retain(|_, o| *o >= at);
        for o in self.step.values_mut() {
            *o -= at;
        }
        self.ord -= at;
    }

    /// Whether the next allocation, of `size` bytes, is a zone block. Tell
    /// [`ZoneLearner::placed`] where it went.
    pub fn decide(&mut self, size: u64) -> Zoning {
        self.ops += 1;
        if let Some(c) = &self.cand {
            if self.ops > c.op + CONFIRM_OPS {
                let c = self.cand.take().expect("checked");
                if !c.anchored && !self.locked {
                    if self.step_len == Some(c.ord) {
                        self.locked = true;
                    }
                    self.anchor(c.ord, c.live);
                }
            }
        }
        let at_step_len = self.step_len == Some(self.ord);
        let largest = self.cand.as_ref().is_none_or(|c| size > c.size);
        // (Before the step locks, a run of allocations makes long-lived state.)
        let in_run = self.after_alloc && !self.locked;
        self.after_alloc = true;
        let mut zone =
            self.step_len.is_none() || in_run || self.zone.contains(&self.ord) || self.anchor_addr.is_some();
        let mut is_anchor = false;
        if at_step_len && (self.locked || largest) {
            let live = self.step.values().copied().collect();
            self.anchor(self.ord, live);
            self.locked = true;
            self.cand = Some(Candidate { op: self.ops, size, ord: 0, live: Vec::new(), anchored: true });
            zone = true;
            is_anchor = true;
        } else if largest {
            let live = self.step.values().copied().collect();
            self.cand = Some(Candidate { op: self.ops, size, ord: self.ord, live, anchored: false });
        } else if at_step_len {
            zone = false;
        }
        let zoning = Zoning { zone, ord: self.ord, anchor: is_anchor };
        self.ord += 1;
        zoning
    }

    /// The allocation [`ZoneLearner::decide`] said `zoning` of went to
    /// `addr` (not called if it failed).
    pub fn placed(&mut self, addr: u64, zoning: Zoning) {
        self.step.insert(addr, zoning.ord);
        if zoning.anchor {
            self.anchor_addr = Some(addr);
        }
    }

    /// The block at `addr` was freed.
    pub fn freed(&mut self, addr: u64) {
        self.ops += 1;
        self.after_alloc = false;
        if self.anchor_addr == Some(addr) {
            self.anchor_addr = None;
        }
        self.step.remove(&addr);
    }
}

/// A pool's zone placement: on or off, the learner, and where zone blocks
/// live (the part of the pool's address range they are placed in).
#[derive(Debug, Default)]
pub struct ZoneState {
    on: AtomicBool,
    lo: AtomicU64,
    hi: AtomicU64,
    learner: Mutex<ZoneLearner>,
}

impl ZoneState {
    /// Whether zone placement is on.
    #[inline]
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Turns zone placement on or off (off forgets what was learned).
    pub fn set_on(&self, on: bool) {
        if !on {
            *self.learner() = ZoneLearner::new();
        }
        self.on.store(on, Ordering::Relaxed);
    }

    /// The addresses zone blocks are placed in: `[lo, hi)`.
    pub fn set_range(&self, lo: u64, hi: u64) {
        self.lo.store(lo, Ordering::Relaxed);
        self.hi.store(hi, Ordering::Relaxed);
    }

    /// Whether `addr` lies where zone blocks are placed.
    #[inline]
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.lo.load(Ordering::Relaxed) && addr < self.hi.load(Ordering::Relaxed)
    }

    /// The learner, locked.
    pub fn learner(&self) -> std::sync::MutexGuard<'_, ZoneLearner> {
        self.learner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells the learner of a free of `addr`, if zone placement is on.
    #[inline]
    pub fn note_free(&self, addr: u64) {
        if self.is_on() {
            self.learner().freed(addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// One step: `n` small allocations, of which those at `kept` stay live
    /// across the step's largest (`big`, at count `at`); everything is freed
    /// at the end. Returns the decisions in allocation order.
    fn step(l: &mut ZoneLearner, next: &mut u64, n: usize, at: usize, big: u64, kept: &[usize]) -> Vec<bool> {
        let mut out = Vec::new();
        let mut live = Vec::new();
        for i in 0..n {
            let size = if i == at { big } else { MIB };
            let zoning = l.decide(size);
            out.push(zoning.zone);
            let addr = *next;
            *next += 1 << 30;
            l.placed(addr, zoning);
            if i == at || kept.contains(&i) || i > at {
                live.push(addr);
            } else {
                l.freed(addr);
            }
        }
        for a in live {
            l.freed(a);
        }
        out
    }

    #[test]
    fn learns_the_blocks_live_across_the_largest_and_locks_its_count() {
        let mut l = ZoneLearner::new();
        let mut next = 1 << 40;
        // Steps of 400 allocations (more than CONFIRM_OPS operations apart);
        // the largest at count 300; counts 100 and 200 live across it.
        let kept = [100, 200];
        let mut last = Vec::new();
        for _ in 0..6 {
            last = step(&mut l, &mut next, 400, 300, 512 * MIB, &kept);
        }
        assert!(l.locked(), "the step length repeated");
        assert_eq!(l.step_len(), Some(400));
        // In a learned step: the anchor and the blocks live across it are
        // zone blocks, and so is what comes while the anchor lives.
        for (i, &z) in last.iter().enumerate() {
            let want = i == 100 || i == 200 || i >= 300;
            assert_eq!(z, want, "count {i}");
        }
        // A smaller batch whose largest block comes earlier keeps the
        // counts: the anchor stays at the learned count.
        let mut l2 = l;
        let mixed = step(&mut l2, &mut next, 400, 300, 8 * MIB, &kept);
        assert!(mixed[100] && mixed[200] && mixed[300]);
        assert!(!mixed[50] && !mixed[250]);
    }

    /// One allocation of 1 MiB: (whether it is a zone block, its address).
    fn alloc(l: &mut ZoneLearner, next: &mut u64) -> (bool, u64) {
        let zoning = l.decide(MIB);
        *next += 1 << 30;
        l.placed(*next, zoning);
        (zoning.zone, *next)
    }

    #[test]
    fn before_the_step_locks_a_run_of_allocations_is_zone_blocks() {
        let mut l = ZoneLearner::new();
        let mut next = 1 << 40;
        // Two steps of 400 allocations, the largest at count 300: a step
        // length is known (the first anchor), not yet locked.
        for _ in 0..2 {
            step(&mut l, &mut next, 400, 300, 512 * MIB, &[]);
        }
        assert!(l.step_len().is_some() && !l.locked(), "{l:?}");
        // A block after a free follows the counts (not live across the
        // anchor: not a zone block); the blocks allocated after it with no
        // free between them are zone blocks.
        let (first, a) = alloc(&mut l, &mut next);
        l.freed(a);
        let (after_free, _) = alloc(&mut l, &mut next);
        let run: Vec<bool> = (0..5).map(|_| alloc(&mut l, &mut next).0).collect();
        assert!(!first && !after_free, "a block after a free follows the counts");
        assert!(run.iter().all(|&z| z), "a run of allocations is long-lived state: {run:?}");
        // Once the step locks, counts alone decide: a step's blocks
        // allocated back to back are not zone blocks for that.
        let mut l = ZoneLearner::new();
        for _ in 0..6 {
            step(&mut l, &mut next, 400, 300, 512 * MIB, &[]);
        }
        assert!(l.locked());
        let (_, a) = alloc(&mut l, &mut next);
        l.freed(a);
        alloc(&mut l, &mut next);
        let (in_run, _) = alloc(&mut l, &mut next);
        assert!(!in_run, "after the step locks, a run is not a zone block by itself");
    }

    #[test]
    fn every_block_is_a_zone_block_until_the_first_anchor() {
        let mut l = ZoneLearner::new();
        for i in 0..10 {
            let zoning = l.decide(MIB + i);
            assert!(zoning.zone);
            l.placed(i, zoning);
        }
        assert_eq!(l.step_len(), None);
    }

    #[test]
    fn the_state_places_zone_blocks_in_its_range_and_forgets_when_off() {
        let z = ZoneState::default();
        assert!(!z.is_on());
        z.set_range(100, 200);
        assert!(z.contains(100) && z.contains(199) && !z.contains(200) && !z.contains(99));
        z.set_on(true);
        let zoning = z.learner().decide(MIB);
        assert!(zoning.zone);
        z.learner().placed(150, zoning);
        z.note_free(150);
        z.set_on(false);
        assert_eq!(z.learner().step_len(), None);
    }
}
