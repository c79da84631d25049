//! Learned layouts: a pool that sees the same sequence of allocations again
//! and again (a training step, a serving loop) places each block of the
//! sequence where an offline plan puts it.
//!
//! An online allocator cannot know when a block will be freed; for a
//! sequence that repeats, the pool can. The planner watches every
//! allocation (its size and stream) and every free of the pool:
//!
//! 1. **Learning.** A rolling hash of the last [`WINDOW`] allocations finds
//!    the last time the same window was seen; its distance is a candidate
//!    period `p` (a distance shorter than the least period looked for
//!    proposes its least multiple that is long enough). Each allocation
//!    equal to the one `p` earlier extends the match; a full period matched
//!    confirms it.
//! 2. **Planning.** The period before the last one gives every block's
//!    lifetime (in allocations, around a circle of `p`). Blocks that die
//!    within one period are planned, if the period has a quiet point (where
//!    at most 5% of its peak is live: a step's end), at least
//!    [`MIN_PERIOD`] allocations and a peak of at least [`MIN_ARENA`]
//!    bytes; a rejected period raises the least period looked for.
//! 3. **Laying out.** At the quiet point the pool gives back what its usual
//!    path held, and [`layout()`](layout::layout) places each planned block, largest first,
//!    at the best-fitting gap among the blocks whose lifetimes overlap its
//!    own (or the blocks live at the period's peak first, where that needs
//!    less), in the free runs the heap has left and one new piece (in one
//!    piece the plan needs 1.000-1.001× the period's peak on recorded
//!    PyTorch steps).
//! 4. **Running.** From then on the allocation at position `k` of the
//!    period, if it is the one the plan expects, gets its planned place: no
//!    search, no driver call. The place must be free (no live block there)
//!    and every earlier free there must be safe for the requesting stream
//!    (same stream, known complete, or ordered by an event); else the
//!    request takes the pool's usual path. An allocation the plan does not
//!    expect ends the plan; learning starts afresh (it rests while a plan
//!    serves), and the arena goes back to the heap, its live blocks taken
//!    over by the pool's usual path ([`Planner::take_old_arena_with_live`]).
//!    While every free in the arena was on one stream, frees are not
//!    recorded one by one ([`Solo`]): a request on that stream may take any
//!    free place.
//! 5. **The first steps.** A period is confirmed over two occurrences, and a
//!    training run's first step has allocations no later step has (a
//!    library's workspace, the optimizer's state), so the second and third
//!    steps would be placed online, and that is where an online pool holds
//!    the most. Shortly after a window never seen before, the learner looks
//!    for the earlier occurrence of the window that the allocations before
//!    it match longest, skipping blocks the earlier stretch never freed
//!    ([`Learner::align`]); the rest of that stretch, as it went, is a
//!    *provisional plan* for the rest of this one ([`Planner::try_provisional`]).
//!    Replayed, the recorded PyTorch training runs then hold 1.005-1.032 of
//!    their peak over the whole run, from 1.038-1.051.
//!
//! This folder is the policy only (no backend calls; `../planned.rs` calls
//! it): `learn.rs` learns a period (step 1, and the alignment of step 5),
//! `layout.rs` builds a plan and lays it out (steps 2 and 3, pure functions
//! of sizes and positions), and this file runs it ([`Planner`], steps 4
//! and 5).
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::backend::RawStream;
use crate::runtime::ordering::StreamClock;

mod layout;
mod learn;

pub use layout::Layout;
use layout::{Entry, Life, Plan, build, layout, layout_within, least_extra, live_at, live_by_position};
use learn::Learner;

/// The fewest allocations a planned period has.
pub const MIN_PERIOD: usize = 16;
/// The most allocations a planned period has (planning is quadratic in it).
pub const MAX_PERIOD: usize = 16384;
/// The most blocks a plan lays out. Laying out is quadratic in the blocks
/// and runs inside the allocation that starts the plan: training steps have
/// 150-1700 (laid out in about 5 ms on the CPU backend's two cores), a
/// period of 6630 took 140 ms there and stalled one batch of a live
/// inference run by 74 ms on an H200 (variable-length inference whose timed
/// batches ran twice over the same shapes, so they repeated: the plan then
/// held 1.039 of the peak where the usual path held 1.023). A longer period
/// is not planned ([`Rejected::TooLarge`](layout::Rejected::TooLarge)).
pub const MOST_LAID_OUT: usize = 3072;
/// The smallest arena worth planning (smaller sequences are served well by
/// the stream caches).
pub const MIN_ARENA: u64 = 64 << 20;
/// Allocations in the rolling window that proposes a period.
pub const WINDOW: usize = 16;
/// Allocations learned without finding a period before learning pauses.
pub const PATIENCE: u64 = 4 * MAX_PERIOD as u64;
/// Alignment of planned offsets.
const ALIGN: u64 = 256;
/// Allocations learned before learning pauses if the pool never had
/// [`MIN_ARENA`] bytes live meanwhile (a small loop).
pub const QUICK_PATIENCE: u64 = 4096;
/// Allocations learned without making a plan (of a confirmed period, or a
/// provisional one) before learning pauses; a period confirmed and then
/// rejected (too small, never quiet) does not restart the count. A sequence that
/// can be planned repeats a period of at most about [`MOST_LAID_OUT`]
/// allocations (each period frees what it allocates, and a plan lays out at
/// most that many), confirmed over its second and third occurrences at the
/// latest (over the second where the first is like the rest). One that has
/// planned nothing for longer (inference on shapes that vary, whose short
/// repetitions inside a batch are confirmed and rejected without end) is
/// not learning anything, and learning costs every allocation and free a
/// lock and a few maps (replayed on the CPU backend, a tenth of the slow
/// path's time on variable-length inference; live on an H100, about 100 ns
/// of its 720-850 ns a call). (A period of more than
/// about 2700 allocations whose first occurrence differs from the rest is
/// then confirmed after the pause, over two later occurrences.)
pub const CANDIDATE_PATIENCE: u64 = 8192;
/// Allocations kept in the learner's log.
const KEEP: u64 = 3 * MAX_PERIOD as u64;

/// What identifies an allocation in a sequence: its block size and stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Sig {
    /// The block size (the request rounded up).
    pub size: u64,
    /// The stream's id.
    pub stream: u64,
}

impl Sig {
    fn hash64(&self) -> u64 {
        // splitmix64 of the two words.
        let mut z = self.size.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.stream.rotate_left(29);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A free inside the arena, kept until later blocks cover its bytes: who
/// may reuse them depends on its stream and tag.
#[derive(Clone)]
pub struct Freed {
    /// Bytes from the record's offset.
    pub len: u64,
    /// The clock of the stream it was freed on.
    pub clock: Arc<StreamClock>,
    /// That stream's backend handle.
    pub raw: RawStream,
    /// The free's tag on that stream.
    pub tag: u64,
}

/// What a request gets from the planner.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// The pool's usual path; then tell [`Planner::allocated`] the address
    /// with this ordinal.
    Normal(u64),
    /// This address, in the arena.
    Serve(u64),
    /// A plan is ready to start: lay it out ([`Planner::layout`]) in the
    /// pool's free memory, take the pieces and call [`Planner::start`] (or
    /// [`Planner::no_arena`]), then ask again.
    NeedArena,
}

/// An arena taken from the planner to go back to the heap.
pub struct IdleArena {
    /// Its pieces: (address, bytes).
    pub pieces: Vec<(u64, u64)>,
    /// The frees made in it (address → record).
    pub freed: Vec<(u64, Freed)>,
}

/// The streams of the arena's frees. While all were on one stream (a
/// training loop on the default stream), a request on that stream may take
/// any free place (the stream's own frees are ordered before it), so frees
/// are not recorded one by one: that is two map operations fewer per
/// allocation and one per free, which in a PyTorch step (where other work
/// evicts the pool's state from the caches between calls) are cache misses.
/// The latest free stands for all of them once another stream takes part:
/// its tag is at least every earlier one's, so whatever makes it safe
/// (completion, an event) makes them all safe.
#[derive(Clone, Default)]
enum Solo {
    /// No free yet.
    #[default]
    Empty,
    /// Every free was on this record's stream; the record is the latest.
    One(Freed),
    /// Frees are recorded in `freed`.
    Mixed,
}

/// A pool's planner and the switches its fast paths read.
#[derive(Debug)]
pub struct PlanState {
    /// Whether the planner sees allocations (learning or running).
    pub on: std::sync::atomic::AtomicBool,
    /// The planner.
    pub planner: std::sync::Mutex<Planner>,
    /// Whether an arena exists (its blocks are freed through the planner).
    pub arena: std::sync::atomic::AtomicBool,
    /// Whether a plan runs or waits to start (allocations ask it first).
    pub running: std::sync::atomic::AtomicBool,
    /// Learning's pause, if it found nothing.
    pub paused: std::sync::Mutex<Pause>,
}

/// The first pause of a learner that found nothing lasts a second and
/// [`FIRST_PAUSE_FREES`] of the heap's frees; each pause after it lasts
/// twice as long, up to [`LONGEST_PAUSE`] and [`MOST_PAUSE_FREES`].
pub const FIRST_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);
/// The longest pause.
pub const LONGEST_PAUSE: std::time::Duration = std::time::Duration::from_secs(60);
/// Frees the heap makes during a first pause at least: four times the
/// allocations a learner that plans nothing learns before it pauses, so
/// that learning takes at most about a fifth of the allocations of a
/// workload that never repeats (a run of a few seconds would otherwise
/// learn again after every second).
pub const FIRST_PAUSE_FREES: u64 = 4 * CANDIDATE_PATIENCE;
/// The most frees a pause waits for.
pub const MOST_PAUSE_FREES: u64 = 1 << 24;

/// Learning's pause: learning resumes on the slow path once both its time
/// and its count of the heap's frees have passed.
#[derive(Debug, Clone, Copy)]
pub struct Pause {
    /// When it began (None: learning is not paused).
    pub since: Option<std::time::Instant>,
    /// How long it lasts at least.
    pub length: std::time::Duration,
    /// The heap's count of frees when the slow path first saw the pause.
    pub frees_at: Option<u64>,
    /// Frees it lasts at least.
    pub frees: u64,
}

impl Default for Pause {
    fn default() -> Pause {
        Pause { since: None, length: FIRST_PAUSE, frees_at: None, frees: FIRST_PAUSE_FREES }
    }
}

impl Pause {
    /// Starts a pause now.
    pub fn begin(&mut self) {
        self.since = Some(std::time::Instant::now());
        self.frees_at = None;
    }

    /// Whether learning is paused.
    pub fn is_paused(&self) -> bool {
        self.since.is_some()
    }

    /// Whether the pause is over with the heap at `frees` frees (the count
    /// the first call sees is where the pause's frees start).
    pub fn is_over(&mut self, frees: u64) -> bool {
        let Some(since) = self.since else { return false };
        let at = *self.frees_at.get_or_insert(frees);
        since.elapsed() >= self.length && frees.saturating_sub(at) >= self.frees
    }

    /// Ends the pause: the next one lasts twice as long (time up to
    /// [`LONGEST_PAUSE`], frees up to [`MOST_PAUSE_FREES`]).
    pub fn end(&mut self) {
        *self = Pause {
            since: None,
            length: (self.length * 2).min(LONGEST_PAUSE),
            frees_at: None,
            frees: (self.frees * 2).min(MOST_PAUSE_FREES),
        };
    }
}

impl PlanState {
    /// A planner, learning if `on`.
    pub fn new(on: bool) -> PlanState {
        PlanState {
            on: std::sync::atomic::AtomicBool::new(on),
            planner: std::sync::Mutex::new(Planner::new()),
            arena: Default::default(),
            running: Default::default(),
            paused: std::sync::Mutex::new(Pause::default()),
        }
    }

    /// Locks the planner.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Planner> {
        self.planner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a free of a block the planner does not own (learning only).
    #[inline]
    pub fn note_free(&self, addr: u64) {
        if self.on.load(std::sync::atomic::Ordering::Relaxed) {
            self.lock().note_free(addr);
        }
    }

    /// Whether an arena exists.
    #[inline]
    pub fn has_arena(&self) -> bool {
        self.arena.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Publishes whether an arena exists.
    pub fn publish(&self, exists: bool) {
        self.arena.store(exists, std::sync::atomic::Ordering::Release);
    }
}

/// An arena's pieces: (address, bytes).
type Pieces = Vec<(u64, u64)>;

/// A running plan and its arena.
struct Runner {
    plan: Plan,
    /// Position in the period of the next allocation.
    pos: usize,
    /// The arena's pieces (address, bytes) and each entry's address, once
    /// laid out; the plan serves only then, from its quiet point on.
    arena: Option<(Pieces, Vec<Option<u64>>)>,
    started: bool,
    /// Planned from one occurrence (see [`Planner::try_provisional`]): it
    /// serves the rest of the next one only, the learner goes on learning,
    /// and entries not freed in that occurrence may be skipped.
    provisional: bool,
    /// Set when a provisional plan has followed its occurrence to the end.
    done: bool,
}

/// Allocations after a window never seen before during which the learner
/// looks for the earlier stretch the sequence is in step with.
const ALIGN_SPAN: u64 = 64;
/// The most earlier occurrences of a window looked at, and the most
/// allocations compared, per allocation while aligning.
const ALIGN_CHAIN: u64 = 64;
const ALIGN_WORK: u64 = 2048;

/// Allocations a provisional plan must follow before it starts (a wrong
/// alignment costs an arena).
const CONFIRM: usize = 16;

/// The most one-off entries a provisional plan skips at once.
const MAX_SKIP: usize = 256;
/// Provisional plans in a row that ended before their occurrence did,
/// after which none is made until a plan is confirmed.
const MAX_PROVISIONAL_MISSES: u32 = 3;

impl Runner {
    /// Moves to the entry for `sig`: the next one, or for a provisional
    /// plan the first after one-off entries (blocks its occurrence never
    /// freed: they have no place, so skipping them moves nothing).
    fn follow(&mut self, sig: Sig) -> bool {
        let entries = &self.plan.entries;
        if entries[self.pos].sig == sig {
            return true;
        }
        // (Not before it starts: the allocations up to there confirm it.)
        if !self.provisional || self.pos < self.plan.quiet {
            return false;
        }
        // (Not past the occurrence's end, where the plan ends.)
        let n = entries.len();
        for k in 1..=MAX_SKIP.min(n - 1 - self.pos) {
            let e = &entries[self.pos + k - 1];
            if e.life.is_some() {
                return false;
            }
            if entries[self.pos + k].sig == sig {
                self.pos += k;
                return true;
            }
        }
        false
    }

    /// Moves past the entry just followed.
    fn advance(&mut self) {
        self.pos = (self.pos + 1) % self.plan.entries.len();
        if self.provisional && self.pos == 0 {
            self.done = true;
        }
    }
}

/// The planner of one pool (behind the pool's lock for it).
#[derive(Default)]
pub struct Planner {
    learner: Learner,
    runner: Option<Runner>,
    /// The pieces of an arena whose plan ended, kept until its blocks are freed.
    old_arena: Option<Vec<(u64, u64)>>,
    /// Live blocks in the arena (current or old): address → bytes.
    live: BTreeMap<u64, u64>,
    /// Frees in the arena not yet covered by a later block: address → record
    /// (while [`Solo::Mixed`]).
    freed: BTreeMap<u64, Freed>,
    /// Whether the arena's frees so far were all on one stream.
    solo: Solo,
    /// Provisional plans in a row that ended early.
    provisional_misses: u32,
    /// Plans made, served allocations, plans ended (for reports and tests).
    pub counts: super::PlanCounts,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner").field("counts", &self.counts).field("pieces", &self.pieces().len()).finish()
    }
}

impl Planner {
    /// A planner that has seen nothing.
    pub fn new() -> Planner {
        Planner::default()
    }

    /// The arena's pieces (current or ended).
    pub fn pieces(&self) -> &[(u64, u64)] {
        match (&self.runner, &self.old_arena) {
            (Some(Runner { arena: Some((p, _)), .. }), _) => p,
            (_, Some(p)) => p,
            _ => &[],
        }
    }

    /// Whether `base` is the address of one of the arena's pieces.
    pub fn is_piece(&self, base: u64) -> bool {
        self.pieces().iter().any(|&(b, _)| b == base)
    }

    /// Whether learning should pause: no plan, no period in sight, and
    /// either long without one, or long without a candidate, or, sooner,
    /// never enough live memory for one.
    pub fn fruitless(&self) -> bool {
        let l = &self.learner;
        self.runner.is_none()
            && l.period == 0
            && (l.fruitless > PATIENCE
                || l.since_candidate > CANDIDATE_PATIENCE
                || (l.fruitless > QUICK_PATIENCE && l.peak_live < MIN_ARENA))
    }

    /// Whether a plan waits for its arena.
    pub fn waits_for_arena(&self) -> bool {
        self.runner.as_ref().is_some_and(|r| r.arena.is_none())
    }

    /// Whether the plan waiting for its arena is provisional (its arena is
    /// mapped as any growth is: it may be handed over with live blocks).
    pub fn waits_provisionally(&self) -> bool {
        self.runner.as_ref().is_some_and(|r| r.arena.is_none() && r.provisional)
    }

    /// Whether a plan runs or waits to start.
    pub fn has_runner(&self) -> bool {
        self.runner.is_some()
    }

    /// An allocation the pool's usual path made without asking first (no
    /// plan ran when it started): learning takes one lock per allocation.
    /// A plan that started meanwhile follows it without serving it.
    pub fn observed(&mut self, sig: Sig, addr: u64) {
        let (ordinal, confirmed) = self.learner.observe(sig);
        self.learner.allocated(ordinal, addr);
        let mut ended = false;
        if let Some(r) = &mut self.runner {
            if r.follow(sig) {
                r.advance();
                if r.done {
                    self.finish_provisional();
                }
            } else {
                ended = true;
            }
        }
        if ended {
            self.end_plan();
        }
        self.plan_if_found(confirmed);
    }

    /// With no plan: plans a period just confirmed, else one occurrence of
    /// a stretch the learner just fell in step with (provisionally).
    fn plan_if_found(&mut self, confirmed: Option<u64>) {
        if self.runner.is_some() {
            return;
        }
        if let Some(p) = confirmed {
            self.try_plan(p);
        } else if let Some(p) = self.learner.proposed {
            self.try_provisional(p);
        }
    }

    /// Forgets what was learned (the plan stays).
    pub fn forget(&mut self) {
        self.learner.forget();
    }

    /// The plan running or waiting to run, if any.
    #[cfg(test)]
    pub fn plan(&self) -> Option<&Plan> {
        self.runner.as_ref().map(|r| &r.plan)
    }

    /// An allocation of `sig` is requested. `safe` says whether a free in
    /// the arena may be reused by the requesting stream now.
    pub fn request(&mut self, sig: Sig, safe: &mut dyn FnMut(&Freed) -> bool) -> Request {
        // A plan at its quiet point without an arena: make one first.
        if let Some(r) = &self.runner {
            if r.arena.is_none() && r.pos == r.plan.quiet && r.plan.entries[r.pos].sig == sig {
                if self.old_arena.is_none() {
                    return Request::NeedArena;
                }
                if r.provisional && !r.started {
                    // A provisional plan starts where it was made, or never.
                    self.runner = None;
                }
            }
        }
        // While a plan serves, the learner rests: a period that repeats
        // needs no learning, and learning touches several maps per call
        // (in a PyTorch step, where other work evicts the pool's state from
        // the caches between calls, each is a cache miss). An allocation
        // the plan does not expect ends it, and learning starts afresh.
        if self.is_resting() && self.runner.as_ref().is_some_and(|r| r.plan.entries[r.pos].sig != sig) {
            self.end_plan();
        }
        let resting = self.is_resting();
        let (ordinal, confirmed) = if resting { (u64::MAX, None) } else { self.learner.observe(sig) };
        let mut serve = None;
        let mut ended = false;
        if let Some(r) = &mut self.runner {
            if !r.follow(sig) {
                ended = true;
            } else {
                let pos = r.pos;
                if pos == r.plan.quiet && r.arena.is_some() {
                    r.started = true;
                }
                if let (true, Some((_, addrs))) = (r.started, &r.arena) {
                    serve = addrs[pos];
                }
                r.advance();
            }
        }
        if ended {
            self.end_plan();
        } else if self.runner.as_ref().is_some_and(|r| r.done) {
            // (Its last block is served first; the arena goes back once
            // its blocks are freed.)
            self.finish_provisional();
        }
        if let Some(addr) = serve {
            if self.take_place(addr, sig.size, sig.stream, safe) {
                self.counts.served += 1;
                if !resting {
                    self.learner.allocated(ordinal, addr);
                }
                return Request::Serve(addr);
            }
            self.counts.missed += 1;
        }
        if !resting {
            self.plan_if_found(confirmed);
        }
        Request::Normal(ordinal)
    }

    /// Builds a plan for a confirmed period.
    fn try_plan(&mut self, p: u64) {
        let Some((sigs, lens)) = self.learner.period_before(p) else { return };
        match build(&sigs, &lens) {
            Ok(mut plan) => {
                // Start at once where that holds little more than the
                // quiet point (the period was confirmed at its boundary).
                let circle = plan.circle;
                let at_quiet = live_at(&plan.lives, circle, plan.quiet as u64);
                let now = live_at(&plan.lives, circle, 0);
                if plan.quiet != 0 && now <= at_quiet + (plan.arena / 100).max(2 << 20) {
                    plan.quiet = 0;
                }
                self.counts.plans += 1;
                self.learner.fruitless = 0;
                self.learner.since_candidate = 0;
                tracing::debug!(target: "hipmem::pool", "planned a period of {p} allocations: {} placed, {} bytes live at most, starting at {}", plan.planned(), plan.arena, plan.quiet);
                // The next allocation is position 0 of the period (the
                // period planned starts 2p before the next one).
                self.provisional_misses = 0;
                self.runner = Some(Runner {
                    plan,
                    pos: 0,
                    arena: None,
                    started: false,
                    provisional: false,
                    done: false,
                });
            }
            Err(why) => {
                self.counts.rejected += 1;
                tracing::trace!(target: "hipmem::pool", "period of {p} allocations not planned: {why:?}");
                self.learner.min_period = p + 1;
                self.learner.period = 0;
                self.learner.matched = 0;
            }
        }
    }

    /// Plans the rest of a stretch from the one it fell in step with (see
    /// [`Learner::align`]): the first steps of a training loop, placed
    /// online before a period is confirmed, are where a pool holds the most.
    /// The blocks the earlier stretch allocated from [`CONFIRM`]
    /// allocations past the window that proposed it, and freed, are laid
    /// out in a line (no wrap: the plan serves this stretch only); blocks
    /// it never freed (the first step's optimizer state, a library's
    /// workspace) have no place and may be missing now (see
    /// [`Runner::follow`]). The plan starts after following those
    /// allocations (a wrong alignment costs an arena), ends at the first
    /// allocation it does not expect or at the stretch's end; learning
    /// goes on meanwhile, so a confirmed period is planned as usual.
    fn try_provisional(&mut self, p: u64) {
        let l = &self.learner;
        if self.provisional_misses >= MAX_PROVISIONAL_MISSES
            || self.old_arena.is_some()
            || l.peak_live < MIN_ARENA
            || (l.tried.0 == p && l.next() - l.tried.1 < p)
        {
            return;
        }
        self.learner.tried = (p, self.learner.next());
        let Some((sigs, lens)) = self.learner.occurrence(p) else { return };
        let from = WINDOW + CONFIRM;
        if sigs.len() <= from + MIN_PERIOD {
            return;
        }
        let mut lives = Vec::new();
        let mut entries: Vec<Entry> = sigs.iter().map(|&sig| Entry { sig, life: None }).collect();
        for (k, (sig, len)) in sigs.iter().zip(&lens).enumerate().skip(from) {
            if let Some(len) = len {
                entries[k].life = Some(lives.len());
                lives.push(Life { size: sig.size, start: k as u64, len: (*len).max(1) });
            }
        }
        if lives.len() > MOST_LAID_OUT {
            tracing::trace!(target: "hipmem::pool", "provisional candidate of {p}: {} blocks, too many to lay out", lives.len());
            return;
        }
        let circle = 2 * p + lens.iter().flatten().max().copied().unwrap_or(0);
        // Worth an arena: the blocks it places held at least half of the
        // most the pool has had live at once (no block wraps on the circle).
        let most = live_by_position(&lives, circle).max().unwrap_or(0);
        let peak = self.learner.peak_live;
        tracing::trace!(target: "hipmem::pool", "provisional candidate of {p}: {most} bytes at most live (of {peak})");
        if most < MIN_ARENA.max(peak / 2) {
            return;
        }
        // (Laid out only once it has followed CONFIRM allocations: its size
        // in one piece is not needed before, the peak stands for it.)
        let plan = Plan { entries, lives, arena: most, quiet: from, circle };
        tracing::debug!(target: "hipmem::pool", "provisional plan of the rest of a period of {p} allocations: {} placed, {most} bytes live at most", plan.planned());
        self.learner.since_candidate = 0;
        self.runner =
            Some(Runner { plan, pos: WINDOW, arena: None, started: false, provisional: true, done: false });
    }

    /// A provisional plan followed its stretch to the end: it ends (not a
    /// miss, not counted as ended), its arena going back.
    fn finish_provisional(&mut self) {
        self.end_plan_as(false);
        self.provisional_misses = 0;
    }

    /// The most bytes the waiting plan's blocks have live at once: no
    /// layout of it needs less memory.
    pub fn least_bytes(&self) -> Option<u64> {
        Some(self.runner.as_ref()?.plan.arena)
    }

    /// A lower bound of the new piece the waiting plan needs beside free
    /// pieces of `pieces` bytes ([`layout`] needs no less), found without
    /// laying it out.
    pub fn least_extra(&self, pieces: &[u64]) -> Option<u64> {
        let r = self.runner.as_ref()?;
        Some(least_extra(&r.plan.lives, r.plan.circle, pieces))
    }

    /// Lays the waiting plan out in free pieces of memory (their sizes).
    pub fn layout(&self, pieces: &[u64]) -> Option<Layout> {
        let r = self.runner.as_ref()?;
        Some(layout(&r.plan.lives, r.plan.circle, pieces))
    }

    /// [`Planner::layout`] where it needs at most `most` new bytes: Some(None)
    /// where it needs more (learned without laying it out to the end), None
    /// where no plan waits.
    pub fn layout_within(&self, pieces: &[u64], most: u64) -> Option<Option<Layout>> {
        let r = self.runner.as_ref()?;
        Some(layout_within(&r.plan.lives, r.plan.circle, pieces, most))
    }

    /// Starts the waiting plan with `layout` over `pieces`: (address,
    /// bytes taken) of each run given to [`Planner::layout`], in its order
    /// (0 bytes: not taken), then the new piece, if any.
    /// False if no plan waits (the pieces are the caller's again).
    pub fn start(&mut self, layout: &Layout, pieces: Vec<(u64, u64)>) -> bool {
        let Some(r) = &mut self.runner else { return false };
        if r.arena.is_some() || pieces.is_empty() {
            return false;
        }
        let bases: Vec<u64> = pieces.iter().map(|p| p.0).collect();
        let addrs = r
            .plan
            .entries
            .iter()
            .map(|e| {
                e.life.map(|l| {
                    let (piece, off) = layout.places[l];
                    bases[piece.min(bases.len() - 1)] + off
                })
            })
            .collect();
        if r.provisional {
            self.counts.plans += 1;
        }
        // Runs no block uses were not taken: they are no pieces.
        r.arena = Some((pieces.into_iter().filter(|p| p.1 > 0).collect(), addrs));
        true
    }

    /// Whether the block at `addr` may be taken now; if so, takes it.
    fn take_place(
        &mut self,
        addr: u64,
        size: u64,
        stream: u64,
        safe: &mut dyn FnMut(&Freed) -> bool,
    ) -> bool {
        let (a0, a1) = (addr, addr + size);
        if let Some((&o, &l)) = self.live.range(..a1).next_back() {
            if o + l > a0 {
                return false;
            }
        }
        // No free yet, or all on this stream: nothing to ask.
        let own = match &self.solo {
            Solo::Empty => true,
            Solo::One(last) => last.clock.stream_id == stream,
            Solo::Mixed => false,
        };
        if own {
            self.live.insert(a0, size);
            return true;
        }
        self.mix();
        // Earlier frees there: each must be safe for this stream.
        let first = self.freed.range(..a0).next_back().filter(|(f, r)| **f + r.len > a0).map(|(&f, _)| f);
        if first.is_none() && self.freed.range(a0..a1).next().is_none() {
            self.live.insert(a0, size);
            return true;
        }
        // (Checked in place, then removed one by one: no list is built, as
        // this runs on every planned allocation.)
        let earlier = first.and_then(|f| self.freed.get_key_value(&f));
        if !earlier.into_iter().chain(self.freed.range(a0..a1)).all(|(_, r)| safe(r)) {
            return false;
        }
        let trim = |freed: &mut BTreeMap<u64, Freed>, k: u64| {
            let Some(r) = freed.remove(&k) else { return };
            if k < a0 {
                freed.insert(k, Freed { len: a0 - k, ..r.clone() });
            }
            if k + r.len > a1 {
                freed.insert(a1, Freed { len: k + r.len - a1, ..r });
            }
        };
        if let Some(k) = first {
            trim(&mut self.freed, k);
        }
        // (What is left of each lies outside [a0, a1).)
        while let Some(k) = self.freed.range(a0..a1).next().map(|(&f, _)| f) {
            trim(&mut self.freed, k);
        }
        self.live.insert(a0, size);
        true
    }

    /// The pool's usual path gave the allocation with `ordinal` this address.
    pub fn allocated(&mut self, ordinal: u64, addr: u64) {
        self.learner.allocated(ordinal, addr);
    }

    /// A block at `addr` was freed. If it is a live block of the arena,
    /// returns its size (the pool gives it back here); `record` describes
    /// the free.
    pub fn freed(&mut self, addr: u64, record: impl FnOnce(u64) -> Freed) -> Option<u64> {
        if !self.is_resting() {
            self.learner.freed(addr);
        }
        let size = self.live.remove(&addr)?;
        let r = record(size);
        match &self.solo {
            Solo::Empty => self.solo = Solo::One(r),
            Solo::One(last) if last.clock.stream_id == r.clock.stream_id => self.solo = Solo::One(r),
            Solo::One(_) => {
                // (With the block live again for a moment: the records made
                // for the earlier frees must not cover it.)
                self.live.insert(addr, size);
                self.mix();
                self.live.remove(&addr);
                self.freed.insert(addr, r);
            }
            Solo::Mixed => {
                self.freed.insert(addr, r);
            }
        }
        Some(size)
    }

    /// From [`Solo::One`] to [`Solo::Mixed`]: every part of the arena that
    /// no live block holds gets a record of the stream's latest free.
    fn mix(&mut self) {
        let Solo::One(last) = std::mem::replace(&mut self.solo, Solo::Mixed) else { return };
        let pieces = self.pieces().to_vec();
        for (base, len) in pieces {
            let end = base + len;
            let mut at = base;
            let blocks: Vec<(u64, u64)> = self.live.range(base..end).map(|(&a, &l)| (a, l)).collect();
            for (a, l) in blocks.into_iter().chain(std::iter::once((end, 0))) {
                if a > at {
                    self.freed.insert(at, Freed { len: a - at, ..last.clone() });
                }
                at = at.max(a + l);
            }
        }
    }

    /// Records a free seen by the learner only (not an arena block).
    pub fn note_free(&mut self, addr: u64) {
        if !self.is_resting() {
            self.learner.freed(addr);
        }
    }

    /// Whether the learner rests: a plan serves (see [`Planner::request`]).
    pub fn is_resting(&self) -> bool {
        self.runner.as_ref().is_some_and(|r| r.started && !r.provisional)
    }

    /// No arena could be made: the plan ends.
    pub fn no_arena(&mut self) {
        self.runner = None;
        self.learner.min_period = 0;
    }

    fn end_plan(&mut self) {
        self.end_plan_as(true);
    }

    /// Ends the plan; `missed`: by an allocation it did not expect.
    fn end_plan_as(&mut self, missed: bool) {
        if let Some(r) = self.runner.take() {
            if r.started && !r.provisional {
                // The learner rested while the plan served: it starts afresh.
                self.learner.forget();
            }
            // (A provisional plan counts once it has started.)
            if missed && (r.started || !r.provisional) {
                if r.provisional {
                    self.provisional_misses += 1;
                }
                self.counts.ended += 1;
            }
            tracing::debug!(target: "hipmem::pool", "a plan of {} allocations ended after {} served", r.plan.period(), self.counts.served);
            if let Some((pieces, _)) = r.arena {
                self.old_arena = Some(pieces);
            }
        }
    }

    /// Ends the running plan (its arena goes back once its blocks are freed).
    pub fn end(&mut self) {
        self.end_plan();
    }

    /// The live arena block containing `addr`: (address, bytes).
    pub fn block_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let (&o, &l) = self.live.range(..=addr).next_back()?;
        (addr < o + l).then_some((o, l))
    }

    /// Bytes of live arena blocks.
    pub fn live_bytes(&self) -> u64 {
        self.live.values().sum()
    }

    /// Takes an arena without live blocks away from its plan (the ended
    /// plan's, or with `all`, the running plan's too: that plan makes a new
    /// arena at its next quiet point).
    pub fn take_idle_arena(&mut self, all: bool) -> Option<IdleArena> {
        if !self.live.is_empty() {
            return None;
        }
        let pieces = match self.old_arena.take() {
            Some(p) => p,
            None if all => {
                let r = self.runner.as_mut()?;
                let (p, _) = r.arena.take()?;
                r.started = false;
                p
            }
            None => return None,
        };
        let freed = self.take_frees(&pieces);
        Some(IdleArena { pieces, freed })
    }

    /// Takes the records of the arena's frees (the arena's `pieces`).
    fn take_frees(&mut self, pieces: &[(u64, u64)]) -> Vec<(u64, Freed)> {
        match std::mem::take(&mut self.solo) {
            // Every free was on one stream: its latest stands for all.
            Solo::One(last) => pieces.iter().map(|&(a, len)| (a, Freed { len, ..last.clone() })).collect(),
            Solo::Empty | Solo::Mixed => std::mem::take(&mut self.freed).into_iter().collect(),
        }
    }

    /// Takes an ended plan's arena away with its live blocks, (address,
    /// bytes) each: the pool's usual path takes them over, so the arena's
    /// free memory goes back to the heap before its blocks are freed.
    pub fn take_old_arena_with_live(&mut self) -> Option<(IdleArena, Vec<(u64, u64)>)> {
        let pieces = self.old_arena.take()?;
        let live: Vec<(u64, u64)> = std::mem::take(&mut self.live).into_iter().collect();
        let freed = self.take_frees(&pieces);
        Some((IdleArena { pieces, freed }, live))
    }

    /// Puts back what [`Planner::take_old_arena_with_live`] took.
    pub fn restore_arena_with_live(&mut self, idle: IdleArena, live: Vec<(u64, u64)>) {
        self.live.extend(live);
        self.restore_arena(idle);
    }

    /// Puts an arena back (its frees were not yet safe to give away): an
    /// ended plan's, kept until they are.
    pub fn restore_arena(&mut self, idle: IdleArena) {
        self.old_arena = Some(idle.pieces);
        if !idle.freed.is_empty() {
            self.mix();
            self.solo = Solo::Mixed;
        }
        self.freed.extend(idle.freed);
    }

    /// Whether an ended plan's arena waits to go back.
    pub fn has_old_arena(&self) -> bool {
        self.old_arena.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(size: u64) -> Sig {
        Sig { size, stream: 1 }
    }

    /// A step: allocate `n` blocks of growing sizes, free them in reverse.
    fn step(p: &mut Planner, n: u64, base_addr: u64) -> Vec<u64> {
        step_freed_on(p, n, base_addr, 1)
    }

    /// [`step`] with the blocks freed on stream `free_stream`.
    fn step_freed_on(p: &mut Planner, n: u64, base_addr: u64, free_stream: u64) -> Vec<u64> {
        let mut addrs = Vec::new();
        for i in 0..n {
            let s = sig((i + 1) << 20);
            let addr = match p.request(s, &mut |_| true) {
                Request::Serve(a) => a,
                Request::Normal(o) => {
                    let a = base_addr + (i << 30);
                    p.allocated(o, a);
                    a
                }
                Request::NeedArena => {
                    let l = p.layout(&[]).expect("a plan waits");
                    assert!(p.start(&l, vec![(1 << 40, l.extra)]));
                    match p.request(s, &mut |_| true) {
                        Request::Serve(a) => a,
                        other => panic!("a plan with an arena serves its quiet point: {other:?}"),
                    }
                }
            };
            addrs.push(addr);
        }
        for &a in addrs.iter().rev() {
            let _ = p.freed(a, |len| Freed {
                len,
                clock: Arc::new(StreamClock::new(free_stream)),
                raw: RawStream::null(0),
                tag: 0,
            });
        }
        addrs
    }

    #[test]
    fn a_repeating_step_is_learned_planned_and_served() {
        let mut p = Planner::new();
        for k in 0..2 {
            let a = step(&mut p, 20, k << 36);
            assert!(a.iter().all(|&x| x < 1 << 40), "learning: the usual path");
        }
        assert_eq!(p.counts.plans, 1, "{:?}", p.counts);
        let plan = p.plan().unwrap();
        assert_eq!(plan.period(), 20);
        // All 20 are live at once: the arena is their sum.
        assert_eq!(plan.arena(), (1..=20u64).sum::<u64>() << 20);
        // The third step starts at the quiet point (position 0) and is served.
        let a = step(&mut p, 20, 3 << 36);
        assert!(a.iter().all(|&x| x >= 1 << 40), "{a:x?}");
        assert_eq!(p.counts.served, 20);
        // Something else ends the plan; the arena waits to go back.
        let _ = p.request(sig(7), &mut |_| true);
        assert!(p.plan().is_none());
        assert!(p.has_old_arena());
        let idle = p.take_idle_arena(false).expect("idle");
        // Every free was on one stream: one record (the latest free) per piece.
        assert_eq!(idle.freed.len(), idle.pieces.len());
        assert!(idle.freed.iter().zip(&idle.pieces).all(|((a, f), &(b, len))| *a == b && f.len == len));
    }

    /// A step of `n` blocks whose sizes repeat every `inner` (1 to `inner`
    /// MiB, then again), all freed at its end.
    fn step_of_parts(p: &mut Planner, n: u64, inner: u64, base_addr: u64) -> Vec<u64> {
        let mut addrs = Vec::new();
        for i in 0..n {
            let s = sig((1 + i % inner) << 20);
            let addr = match p.request(s, &mut |_| true) {
                Request::Serve(a) => a,
                Request::Normal(o) => {
                    let a = base_addr + (i << 30);
                    p.allocated(o, a);
                    a
                }
                Request::NeedArena => {
                    let l = p.layout(&[]).expect("a plan waits");
                    assert!(p.start(&l, vec![(1 << 40, l.extra)]));
                    match p.request(s, &mut |_| true) {
                        Request::Serve(a) => a,
                        other => panic!("a plan with an arena serves its quiet point: {other:?}"),
                    }
                }
            };
            addrs.push(addr);
        }
        for &a in &addrs {
            let _ = p.freed(a, |len| Freed {
                len,
                clock: Arc::new(StreamClock::new(1)),
                raw: RawStream::null(0),
                tag: 0,
            });
        }
        addrs
    }

    #[test]
    fn a_step_made_of_repeated_parts_is_learned_by_a_multiple_of_the_part() {
        // 24 blocks whose sizes repeat every 8, nothing freed until the
        // step's end: every window of 16 repeats every 8 allocations, a
        // period too short to plan; its multiple of 24 is the step.
        let mut p = Planner::new();
        for k in 0..6 {
            step_of_parts(&mut p, 24, 8, k << 36);
        }
        assert!(p.counts.plans >= 1, "{:?}", p.counts);
        assert_eq!(p.plan().map(|plan| plan.period()), Some(24));
        let before = p.counts.served;
        let a = step_of_parts(&mut p, 24, 8, 7 << 36);
        assert!(a.iter().all(|&x| x >= 1 << 40), "{a:x?}");
        assert_eq!(p.counts.served - before, 24);
    }

    #[test]
    fn a_place_that_is_not_safe_takes_the_usual_path() {
        // Blocks allocated on stream 1 and freed on stream 2.
        let mut p = Planner::new();
        for k in 0..3 {
            step_freed_on(&mut p, 20, k << 36, 2);
        }
        let served = p.counts.served;
        // Every earlier free in the arena is unsafe now.
        let r = p.request(sig(1 << 20), &mut |_| false);
        assert!(matches!(r, Request::Normal(_)), "{r:?}");
        assert_eq!(p.counts.served, served);
        assert_eq!(p.counts.missed, 1);
    }

    #[test]
    fn frees_on_one_stream_stand_for_each_other_until_another_stream_comes() {
        let mut p = Planner::new();
        for k in 0..3 {
            step(&mut p, 20, k << 36);
        }
        // Every free was on stream 1: a request on stream 1 asks nothing.
        let served = p.counts.served;
        let r = p.request(sig(1 << 20), &mut |_| panic!("a stream's own frees need no asking"));
        assert!(matches!(r, Request::Serve(_)), "{r:?}");
        assert_eq!(p.counts.served, served + 1);
        let Request::Serve(a) = r else { unreachable!() };
        // A free on stream 2: from now on each free is recorded, and the
        // arena's other free memory carries stream 1's latest free (tag 0).
        let _ = p.freed(a, |len| Freed {
            len,
            clock: Arc::new(StreamClock::new(2)),
            raw: RawStream::null(0),
            tag: 7,
        });
        let mut asked = Vec::new();
        let r = p.request(sig(2 << 20), &mut |f| {
            asked.push((f.clock.stream_id, f.tag));
            true
        });
        assert!(matches!(r, Request::Serve(_)), "{r:?}");
        assert!(
            !asked.is_empty() && asked.iter().all(|&(s, t)| (s, t) == (1, 0) || (s, t) == (2, 7)),
            "{asked:?}"
        );
    }

    #[test]
    fn a_period_without_a_quiet_point_is_not_planned() {
        // Each step leaves one large block live for longer than a period.
        let mut p = Planner::new();
        let mut keep = Vec::new();
        for k in 0..4u64 {
            for i in 0..20u64 {
                let r = p.request(sig((i + 1) << 23), &mut |_| true);
                let Request::Normal(o) = r else { panic!("{r:?}") };
                let a = (k << 36) + (i << 30);
                p.allocated(o, a);
                if i == 10 {
                    keep.push(a);
                } else {
                    p.note_free(a);
                }
            }
        }
        assert_eq!(p.counts.plans, 0);
        assert!(p.counts.rejected >= 1);
    }

    /// A pause ends when both its time and its frees have passed, not when
    /// one has; the next one is twice as long.
    #[test]
    fn a_pause_lasts_its_time_and_its_frees() {
        let mut p = Pause { length: std::time::Duration::ZERO, ..Pause::default() };
        assert!(!p.is_paused() && !p.is_over(u64::MAX), "not paused");
        p.begin();
        assert!(p.is_paused());
        assert!(!p.is_over(1000), "the count starts at the first look");
        assert!(!p.is_over(1000 + FIRST_PAUSE_FREES - 1), "too few frees");
        assert!(p.is_over(1000 + FIRST_PAUSE_FREES), "time and frees passed");
        p.end();
        assert!(!p.is_paused());
        assert_eq!((p.length, p.frees), (std::time::Duration::ZERO, 2 * FIRST_PAUSE_FREES));
        // Frees alone are not enough.
        let mut p = Pause::default();
        p.begin();
        assert!(!p.is_over(0) && !p.is_over(u64::MAX), "a second has not passed");
        p.end();
        assert_eq!(p.length, 2 * FIRST_PAUSE);
        for _ in 0..40 {
            p.end();
        }
        assert_eq!((p.length, p.frees), (std::time::Duration::from_secs(60), MOST_PAUSE_FREES));
    }

    #[test]
    fn learning_that_confirms_nothing_pauses_and_a_long_period_is_still_planned() {
        // Sizes that never repeat a window (a varying workload), with more
        // than MIN_ARENA live: only the candidate rule can pause it.
        let mut p = Planner::new();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut live = std::collections::VecDeque::new();
        for n in 1..=CANDIDATE_PATIENCE + 1 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let size = (1 + x % 4096) << 20;
            let Request::Normal(o) = p.request(sig(size), &mut |_| true) else { panic!() };
            let addr = n << 40;
            p.allocated(o, addr);
            live.push_back(addr);
            if live.len() > 64 {
                p.note_free(live.pop_front().unwrap());
            }
            assert_eq!(p.fruitless(), n > CANDIDATE_PATIENCE, "after {n} allocations");
        }
        assert_eq!(p.counts.plans, 0);
        // A step of 2500 allocations, repeated: confirmed over its second
        // occurrence, planned before learning would pause.
        let mut p = Planner::new();
        for k in 0..4 {
            step(&mut p, 2500, k << 50);
            assert!(!p.fruitless() || p.counts.plans > 0, "step {k}");
        }
        assert!(p.counts.plans >= 1, "{:?}", p.counts);
        assert!(p.counts.served > 0, "{:?}", p.counts);
    }

    #[test]
    fn small_sequences_are_not_planned() {
        let mut p = Planner::new();
        for _ in 0..5000 {
            let Request::Normal(o) = p.request(sig(4096), &mut |_| true) else { panic!() };
            p.allocated(o, 1 << 30);
            p.note_free(1 << 30);
        }
        assert_eq!(p.counts.plans, 0);
    }

    /// One training-like step through the planner: 40 blocks kept, then 20
    /// temporaries each freeing two of them, newest first (every size
    /// distinct, the first 32 small). With `first`, a one-off block (a library's workspace) at
    /// the fourth allocation and four at the end (an optimizer's state),
    /// never freed. Returns how many allocations were served, and at which
    /// an arena was made, if one was.
    fn first_steps(p: &mut Planner, first: bool, base_addr: u64) -> (usize, Option<usize>) {
        let m = 1u64 << 20;
        // (Small first blocks: the plan places the rest.)
        let size = |i: u64| if i < 32 { (64 + 4 * i) << 10 } else { (1 + i % 4) * 8 * m + i * (64 << 10) };
        let mut next_addr = base_addr;
        let (mut served, mut arena_at) = (0, None);
        let mut alloc = |p: &mut Planner, s: Sig, k: usize| -> u64 {
            match p.request(s, &mut |_| true) {
                Request::Serve(a) => {
                    served += 1;
                    a
                }
                Request::Normal(o) => {
                    // (An ended plan's arena goes back, as the pool does.)
                    let _ = p.take_old_arena_with_live();
                    next_addr += 1 << 30;
                    p.allocated(o, next_addr);
                    next_addr
                }
                Request::NeedArena => {
                    arena_at = Some(k);
                    let l = p.layout(&[]).expect("a plan waits");
                    assert!(p.start(&l, vec![(1 << 44, l.extra)]));
                    match p.request(s, &mut |_| true) {
                        Request::Serve(a) => {
                            served += 1;
                            a
                        }
                        other => panic!("a plan with an arena serves where it starts: {other:?}"),
                    }
                }
            }
        };
        let free = |p: &mut Planner, a: u64| {
            let _ = p.freed(a, |len| Freed {
                len,
                clock: Arc::new(StreamClock::new(1)),
                raw: RawStream::null(0),
                tag: 0,
            });
            p.note_free(a);
        };
        let mut kept = Vec::new();
        let mut k = 0;
        for i in 0..40 {
            if first && i == 3 {
                alloc(p, sig(8 * m), usize::MAX);
            }
            kept.push(alloc(p, sig(size(i)), k));
            k += 1;
        }
        for i in 40..60 {
            let t = alloc(p, sig(size(i)), k);
            k += 1;
            free(p, t);
            for _ in 0..2 {
                let a = kept.pop().unwrap();
                free(p, a);
            }
        }
        if first {
            for j in 0..4 {
                alloc(p, sig(20 * m + j), usize::MAX);
            }
        }
        (served, arena_at)
    }

    #[test]
    fn the_second_step_is_planned_from_the_first_despite_its_one_offs() {
        let mut p = Planner::new();
        assert_eq!(first_steps(&mut p, true, 0), (0, None), "the first step is learned");
        // The second step falls in step with the first at its 19th
        // allocation (the first window past the first step's workspace:
        // allocations 3 to 18), follows it for 16 more, then is served to
        // its end.
        let (served, at) = first_steps(&mut p, false, 1 << 40);
        assert_eq!(at, Some(19 + CONFIRM), "{:?}", p.counts);
        assert_eq!(served, 60 - 19 - CONFIRM, "{:?}", p.counts);
        assert_eq!((p.counts.plans, p.counts.ended, p.counts.missed), (1, 0, 0), "{:?}", p.counts);
        // The first step's state is skipped (no place: nothing is served
        // for it), and the plan of that stretch ends with it; the third
        // step is then planned from the second, the fourth confirmed.
        for k in 2..6 {
            let (served, _) = first_steps(&mut p, false, (k as u64) << 40);
            assert!(served >= 60 - 19 - CONFIRM, "step {k}: {served} served, {:?}", p.counts);
        }
        assert_eq!(p.counts.missed, 0, "{:?}", p.counts);
    }

    #[test]
    fn a_stretch_the_sequence_falls_in_step_with_must_follow_before_it_is_served() {
        // Two steps alike for their first 40 allocations, then different:
        // the second is proposed a plan of the first, which starts only if
        // it still matches 16 allocations past the window.
        let mut p = Planner::new();
        first_steps(&mut p, true, 0);
        let m = 1u64 << 20;
        let mut addr = 1u64 << 40;
        for i in 0..36u64 {
            let s = if i < 24 { sig((64 + 4 * i) << 10) } else { sig(100 * m + i) };
            match p.request(s, &mut |_| true) {
                Request::Normal(o) => {
                    addr += 1 << 30;
                    p.allocated(o, addr);
                }
                other => panic!(
                    "allocation {i}: nothing is served or laid out before the plan is confirmed: {other:?}"
                ),
            }
        }
        assert_eq!((p.counts.plans, p.counts.served), (0, 0), "{:?}", p.counts);
    }
}
