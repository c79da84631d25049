//! Planning and laying out a period (steps 2 and 3 of the module's
//! description): which of a period's allocations a plan places, their
//! lifetimes on the period's circle, and where each goes in the free runs
//! the pool has and one new piece. Pure functions of sizes and positions:
//! no pool, no backend, no clock.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{ALIGN, MIN_ARENA, MIN_PERIOD, MOST_LAID_OUT, Sig};

/// One allocation of a plan.
#[derive(Copy, Clone, Debug)]
pub(super) struct Entry {
    /// The allocation's size and stream.
    pub(super) sig: Sig,
    /// Its lifetime in the plan's `lives`, if the block is planned.
    pub(super) life: Option<usize>,
}

/// A plan for a period: which allocations are placed, and their lifetimes.
/// Where they go is decided when the plan starts ([`layout`]), in the free
/// memory the pool has then and one new piece for the rest.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Each allocation of the period, in order.
    pub(super) entries: Vec<Entry>,
    /// The planned blocks' lifetimes.
    pub(super) lives: Vec<Life>,
    /// The most its blocks have live at once: a lower bound of the bytes
    /// it needs in one piece of memory (1.000-1.001 of what it needs on
    /// recorded PyTorch steps).
    pub(super) arena: u64,
    /// The position where the plan starts running (its quiet point).
    pub(super) quiet: usize,
    /// The circle its lifetimes are laid out on: the period, or for a plan
    /// of one occurrence's rest, twice it (no block wraps onto another).
    pub(super) circle: u64,
}

impl Plan {
    /// Allocations per period.
    pub fn period(&self) -> usize {
        self.entries.len()
    }

    /// The most its blocks have live at once.
    #[cfg(test)]
    pub fn arena(&self) -> u64 {
        self.arena
    }

    /// Allocations with a planned place.
    pub fn planned(&self) -> usize {
        self.lives.len()
    }
}

/// One block of a period to plan: its size, first position and lifetime
/// (in allocations; at most the period).
#[derive(Copy, Clone, Debug)]
pub struct Life {
    /// Bytes.
    pub size: u64,
    /// Position of its allocation in the period.
    pub start: u64,
    /// Allocations it lives through (it is dead when the allocation at
    /// `start + len` is made, modulo the period).
    pub len: u64,
}

/// Whether two lifetimes on a circle of `period` overlap (as
/// `Placed::mark_overlapping` finds them, written plainly).
#[cfg(test)]
fn overlaps(a: &Life, b: &Life, period: u64) -> bool {
    // Starts lie in [0, period) and lengths are at most the period, so
    // shifting `b` by one period either way covers every wrap.
    let (a0, a1) = (a.start, a.start + a.len);
    let (b0, b1) = (b.start, b.start + b.len);
    (b0 < a1 && a0 < b1) || (b0 + period < a1 && a0 < b1 + period) || (b0 < a1 + period && a0 + period < b1)
}

/// Where [`layout`] put the blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// For each lifetime: (piece, offset in it); piece `pieces.len()` is
    /// the new one.
    pub places: Vec<(usize, u64)>,
    /// For each given piece, the bytes from its start that blocks use.
    pub used: Vec<u64>,
    /// The size of the new piece (0: none needed).
    pub extra: u64,
}

/// Places lifetimes in free pieces of memory (`pieces`: their sizes) and
/// one new piece: greedy by size (largest first, then longest), each at the
/// best-fitting gap among the placed blocks whose lifetimes overlap its
/// own (gaps of the given pieces, and gaps below the new piece's top, cost
/// nothing); only when none fits, at the top of the new piece. With free
/// pieces, also with the blocks live at the period's peak placed first,
/// and under several limits on what goes in them: the layout that needs
/// the least new memory wins.
pub fn layout(lives: &[Life], period: u64, pieces: &[u64]) -> Layout {
    // (With no bound, no variant gives up: only a variant's thread failing
    // leaves none, and then the first is laid out here.)
    layout_within(lives, period, pieces, u64::MAX)
        .unwrap_or_else(|| layout_in_order(lives, period, pieces, u64::MAX, &placing_order(lives, None)))
}

/// [`layout`] where it needs at most `most` new bytes: None where every
/// variant needs more (each gives up as soon as it does, so a caller that
/// only needs to know whether another way needs less learns it early).
pub fn layout_within(lives: &[Life], period: u64, pieces: &[u64], most: u64) -> Option<Layout> {
    // Large blocks placed in free runs can strand the space around them;
    // the layout that needs the least new memory wins.
    if pieces.is_empty() {
        let order = placing_order(lives, None);
        return layout_bounded(lives, period, pieces, u64::MAX, &order, &AtomicU64::new(most)).ok();
    }
    let limits = limits_to_lay_out(lives, pieces);
    // Each limit in two orders: largest first, and the blocks live at the
    // period's peak first (largest first among them, then the rest). The
    // new piece must hold what the free runs do not at the peak, so the
    // runs should take as much of the peak as they can: largest first, a
    // block that is not live at the peak can take the run a block live
    // there needed (recorded checkpointed training: 264 MiB of its peak in
    // runs largest first, 338 MiB peak first).
    // (Each order sorted once; the second left out where it is the first.)
    let largest_first = placing_order(lives, None);
    let peak_first = placing_order(lives, Some(&live_at_peak(lives, period)));
    let orders: Vec<&[usize]> =
        if peak_first == largest_first { vec![&largest_first] } else { vec![&largest_first, &peak_first] };
    let variants: Vec<(u64, &[usize])> =
        limits.iter().flat_map(|&l| orders.iter().map(move |&o| (l, o))).collect();
    // Laying out is quadratic in the blocks (a training step's thousand
    // take about a millisecond a variant, 1.2-1.8 ms on one H200's host): a
    // variant stops as soon as its new piece is larger than one a finished
    // variant needs (it cannot be the least). The variants take turns on
    // as many threads as there are orders (the first limit's orders side by
    // side, the usual winners), so that the later ones start with a bound
    // and mostly stop within microseconds. All at once, no variant had
    // finished while the others ran, none stopped early, each ran slower
    // beside the others (1.3-2.6 ms, ten on the H200's sixteen cores), and
    // starting and joining a thread per variant cost up to 1.5 ms more.
    // The first of the least still wins: a variant stopped needed more
    // than another.
    let best = AtomicU64::new(most);
    let lay = |&(limit, order): &(u64, &[usize])| {
        let l = layout_bounded(lives, period, pieces, limit, order, &best).ok()?;
        best.fetch_min(l.extra, Ordering::Relaxed);
        Some(l)
    };
    let threads = if lives.len() < 256 {
        1
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(orders.len())
    };
    let layouts = lay_out_on_threads(&variants, threads, &lay);
    // The first of the least (the order of the limits breaks ties).
    let mut least: Option<Layout> = None;
    for l in layouts.into_iter().flatten() {
        if least.as_ref().is_none_or(|b| l.extra < b.extra) {
            least = Some(l);
        }
    }
    least
}

/// A lower bound of the new piece [`layout`] needs beside free pieces of
/// `pieces` bytes, without laying out. A block that fits only the `k`
/// largest pieces is in them or in the new piece: at each position of the
/// circle, the blocks live there that fit at most the `k` largest need,
/// beyond those pieces' bytes, that much of the new piece (`k` = 0: the
/// blocks larger than every piece, all of them; every piece: the blocks'
/// peak less the pieces' total). The most of these over the positions
/// and over `k` up to [`BOUND_STEPS`], and all the pieces.
pub fn least_extra(lives: &[Life], circle: u64, pieces: &[u64]) -> u64 {
    let mut runs = pieces.to_vec();
    runs.sort_unstable_by(|a, b| b.cmp(a));
    // (Bytes of the `k` largest pieces.)
    let cap = |k: usize| runs[..k.min(runs.len())].iter().sum::<u64>();
    // Each block's class: how many pieces it fits (more than BOUND_STEPS:
    // one class, bounded with every piece).
    let mut classes: Vec<Vec<Life>> = vec![Vec::new(); BOUND_STEPS + 2];
    for l in lives {
        let size = l.size.next_multiple_of(ALIGN);
        let fits = runs.partition_point(|&r| r >= size);
        classes[fits.min(BOUND_STEPS + 1)].push(Life { size, ..*l });
    }
    // Bytes live at each position of the blocks of the classes so far.
    let mut live = vec![0u64; circle as usize];
    let mut least = 0;
    for (k, class) in classes.iter().enumerate() {
        if class.is_empty() {
            continue;
        }
        for (at, bytes) in live.iter_mut().zip(live_by_position(class, circle)) {
            *at += bytes;
        }
        let k = if k > BOUND_STEPS { runs.len() } else { k };
        let most = live.iter().copied().max().unwrap_or(0);
        least = least.max(most.saturating_sub(cap(k)));
    }
    least
}

/// The classes of [`least_extra`] bounded one by one (blocks that fit more
/// pieces are bounded together, with every piece).
const BOUND_STEPS: usize = 32;

/// Runs `lay` on each of `variants` on up to `threads` threads (this one
/// and helpers, each taking the next variant in order): their results,
/// in order (None for a variant that gave up or whose thread failed).
fn lay_out_on_threads<V: Sync>(
    variants: &[V],
    threads: usize,
    lay: &(dyn Fn(&V) -> Option<Layout> + Sync),
) -> Vec<Option<Layout>> {
    let threads = threads.min(variants.len()).max(1);
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(v) = variants.get(k) else { break };
            done.push((k, lay(v)));
        }
        done
    };
    let mut layouts: Vec<Option<Layout>> = vec![None; variants.len()];
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mine = work();
        for (k, l) in mine.into_iter().chain(helpers.into_iter().filter_map(|h| h.join().ok()).flatten()) {
            layouts[k] = l;
        }
    });
    layouts
}

/// The limits [`layout`] lays out with (of `u64::MAX`, 256, 64, 16 and
/// 4 MiB, in that order), leaving out each whose layout is the same as the
/// last one kept. Lowering the limit from the last one kept sends the
/// blocks of sizes between the two to the new piece: nothing changes if
/// there are none, or if each of them is larger than every free piece (it
/// could not have gone in a piece anyway; every gap it is offered is the
/// same, in the same order). (Laying out is the slow part of starting a
/// plan: a training step's arena, laid out in free pieces, often has a few
/// blocks larger than any piece and no block between 64 and 256 MiB.)
fn limits_to_lay_out(lives: &[Life], pieces: &[u64]) -> Vec<u64> {
    let largest_piece = pieces.iter().copied().max().unwrap_or(0);
    let mut limits: Vec<u64> = Vec::with_capacity(5);
    for limit in [u64::MAX, 256 << 20, 64 << 20, 16 << 20, 4 << 20] {
        let Some(&kept) = limits.last() else {
            limits.push(limit);
            continue;
        };
        let changes = lives
            .iter()
            .map(|l| l.size.next_multiple_of(ALIGN))
            .any(|size| size > limit && size <= kept && size <= largest_piece);
        if changes {
            limits.push(limit);
        }
    }
    limits
}

/// For each lifetime, whether it is live at the first position where the
/// most bytes are.
fn live_at_peak(lives: &[Life], period: u64) -> Vec<bool> {
    let peak =
        live_by_position(lives, period).enumerate().max_by_key(|&(k, live)| (live, std::cmp::Reverse(k)));
    let Some((pos, _)) = peak else { return vec![false; lives.len()] };
    let pos = pos as u64;
    lives.iter().map(|l| (pos + period - l.start) % period < l.len).collect()
}

/// The order [`layout`] places lifetimes in: largest first, then longest;
/// with `first`, the lifetimes it marks before the others.
fn placing_order(lives: &[Life], first: Option<&[bool]>) -> Vec<usize> {
    let mut order: Vec<usize> = (0..lives.len()).collect();
    let later = |i: usize| first.is_some_and(|f| !f[i]);
    order.sort_by_key(|&i| (later(i), std::cmp::Reverse(lives[i].size), std::cmp::Reverse(lives[i].len), i));
    order
}

/// [`layout`] where only blocks of at most `limit` bytes go in free runs;
/// with `first`, the lifetimes it marks are placed before the others.
#[cfg(test)]
fn layout_with(lives: &[Life], period: u64, pieces: &[u64], limit: u64, first: Option<&[bool]>) -> Layout {
    layout_in_order(lives, period, pieces, limit, &placing_order(lives, first))
}

/// [`layout`] with the lifetimes placed in `order`, where only blocks of
/// at most `limit` bytes go in free runs.
fn layout_in_order(lives: &[Life], period: u64, pieces: &[u64], limit: u64, order: &[usize]) -> Layout {
    // (With no bound, nothing is given up.)
    match layout_bounded(lives, period, pieces, limit, order, &AtomicU64::new(u64::MAX)) {
        Ok(l) | Err(l) => l,
    }
}

/// The placed blocks of [`layout_bounded`], in (piece, offset) order: the
/// pass that finds which of them overlap a block in time reads two dense
/// arrays of `u32` (which the compiler vectorizes), and only the blocks
/// that overlap are read further (where they lie, a third array).
#[derive(Default)]
struct Placed {
    /// Each block's lifetime's first position (circle positions, which
    /// [`MAX_PERIOD`](super::MAX_PERIOD) keeps within `u32`).
    start: Vec<u32>,
    /// Each block's lifetime's length (at least 1).
    len: Vec<u32>,
    /// Where each block lies.
    at: Vec<Bytes>,
}

/// Where a placed block lies: its piece and bytes.
#[derive(Copy, Clone, Debug, Default)]
struct Bytes {
    /// First byte.
    b0: u64,
    /// One past its last byte.
    b1: u64,
    /// Its piece.
    piece: u32,
}

impl Placed {
    fn with_capacity(n: usize) -> Self {
        Placed { start: Vec::with_capacity(n), len: Vec::with_capacity(n), at: Vec::with_capacity(n) }
    }

    /// The first block in `piece` or a later one.
    fn first_in(&self, piece: usize) -> usize {
        self.at.partition_point(|b| (b.piece as usize) < piece)
    }

    /// Adds a block, keeping the (piece, offset) order.
    fn insert(&mut self, piece: usize, b0: u64, b1: u64, start: u32, len: u32) {
        let k = self.at.partition_point(|b| (b.piece as usize, b.b0) < (piece, b0));
        self.start.insert(k, start);
        self.len.insert(k, len);
        self.at.insert(k, Bytes { b0, b1, piece: piece as u32 });
    }

    /// Marks in `meet` (one byte per block from `from`, 1 where it does)
    /// which blocks' lifetimes overlap the arc `[start, start + len)` of a
    /// circle of `circle` positions (`len` from 1 to `circle`).
    ///
    /// Two arcs meet exactly when one's start lies in the other. With `d`
    /// the distance from `start` on to a block's start: `d < len`, or the
    /// distance back, `circle - d`, is below the block's length (`d == 0`
    /// is the first case). No branches: which blocks overlap follows no
    /// pattern a branch predictor learns.
    fn mark_overlapping(&self, from: usize, start: u32, len: u32, circle: u32, meet: &mut [u8]) {
        // (In `i32`, whose comparisons the baseline x86-64 vector
        // instructions have: positions and lengths are far below 2^31.)
        let (start, len, circle) = (start as i32, len as i32, circle as i32);
        for ((m, &s), &l) in meet.iter_mut().zip(&self.start[from..]).zip(&self.len[from..]) {
            let d = s as i32 - start;
            let d = d + ((d >> 31) & circle);
            *m = u8::from(d < len) | u8::from(circle - d < l as i32);
        }
    }
}

/// [`layout_in_order`], given up as soon as the new piece must be larger
/// than `bound` bytes (another layout needs no more than that): Err with
/// the blocks placed so far.
fn layout_bounded(
    lives: &[Life],
    period: u64,
    pieces: &[u64],
    limit: u64,
    order: &[usize],
    bound: &AtomicU64,
) -> Result<Layout, Layout> {
    let new = pieces.len();
    let size_of = |i: usize| lives[i].size.next_multiple_of(ALIGN);
    let mut places = vec![(usize::MAX, 0u64); lives.len()];
    let mut used = vec![0u64; pieces.len()];
    let mut top = 0u64;
    // (Positions, lengths and pieces fit `u32`: see `Placed`.)
    debug_assert!(period < u64::from(u32::MAX / 2));
    let circle = period as u32;
    // Walking the placed blocks in (piece, offset) order, skipping those
    // whose lifetimes do not overlap, gives the busy intervals already
    // sorted (linear per block, not a sort).
    let mut placed = Placed::with_capacity(lives.len());
    // (Eight bytes more, so the walk reads whole words.)
    let mut meet = vec![0u8; lives.len() + 8];
    for &i in order {
        let me = &lives[i];
        let (my_start, my_len) = (me.start as u32, me.len as u32);
        let size = size_of(i);
        let first = if size <= limit { 0 } else { new };
        let from = placed.first_in(first);
        let count = placed.at.len() - from;
        placed.mark_overlapping(from, my_start, my_len, circle, &mut meet[..count]);
        meet[count..count + 8].fill(0);
        let mut best: Option<(u64, usize, u64)> = None; // (gap, piece, offset)
        // Whether the gap is the best so far; a gap of exactly the block's
        // size cannot be beaten (the first of the least wins), so the walk
        // stops there.
        let mut consider = |gap: u64, piece: usize, at: u64| {
            if gap >= size && best.is_none_or(|(g, _, _)| gap < g) {
                best = Some((gap, piece, at));
            }
            gap == size
        };
        // Per piece: the end of the last busy interval seen.
        let mut piece = first;
        let mut at = 0u64;
        let mut new_top_busy = 0u64;
        let mut exact = false;
        // The overlapping blocks, eight marks a word, a set byte at a time.
        let spans = &placed.at[from..];
        'walk: for (w, word) in meet[..count.next_multiple_of(8)].chunks_exact(8).enumerate() {
            let mut bits = u64::from_le_bytes(word.try_into().unwrap_or([0; 8]));
            while bits != 0 {
                let j = w * 8 + (bits.trailing_zeros() / 8) as usize;
                bits &= bits - 1;
                let Bytes { b0, b1, piece: q } = spans[j];
                let q = q as usize;
                while piece < q {
                    // No more busy intervals in `piece`: the gap up to its end.
                    let cap = if piece == new { top } else { pieces[piece] };
                    if cap > at && consider(cap - at, piece, at) {
                        exact = true;
                        break 'walk;
                    }
                    piece += 1;
                    at = 0;
                }
                if b0 > at && consider(b0 - at, piece, at) {
                    exact = true;
                    break 'walk;
                }
                at = at.max(b1);
                if q == new {
                    new_top_busy = new_top_busy.max(b1);
                }
            }
        }
        while !exact && piece <= new {
            let cap = if piece == new { top } else { pieces[piece] };
            if cap > at && consider(cap - at, piece, at) {
                break;
            }
            piece += 1;
            at = 0;
        }
        let (piece, off) = match best {
            Some((_, piece, at)) => (piece, at),
            // The top of the new piece, above any busy block there.
            None => (new, new_top_busy),
        };
        places[i] = (piece, off);
        if piece == new {
            top = top.max(off + size);
            if top > bound.load(Ordering::Relaxed) {
                return Err(Layout { places, used, extra: top });
            }
        } else {
            used[piece] = used[piece].max(off + size);
        }
        placed.insert(piece, off, off + size, my_start, my_len);
    }
    Ok(Layout { places, used, extra: top })
}

/// Why a candidate period was not planned.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// Too few allocations, or too few bytes to plan.
    TooSmall,
    /// No point of the period where (almost) nothing of it is live.
    NoQuietPoint,
    /// More blocks than [`MOST_LAID_OUT`] to lay out.
    TooLarge,
}

/// Builds the plan of one period from its allocations' sizes, streams and
/// lifetimes (`None`: not freed within a period).
pub fn build(sigs: &[Sig], lens: &[Option<u64>]) -> Result<Plan, Rejected> {
    let p = sigs.len();
    if p < MIN_PERIOD {
        return Err(Rejected::TooSmall);
    }
    let period = p as u64;
    let mut lives = Vec::new();
    let mut entries: Vec<Entry> = sigs.iter().map(|&sig| Entry { sig, life: None }).collect();
    // Bytes that outlive the period (live everywhere).
    let mut always: u64 = 0;
    for (k, (sig, len)) in sigs.iter().zip(lens).enumerate() {
        match len {
            Some(len) if *len <= period => {
                entries[k].life = Some(lives.len());
                lives.push(Life { size: sig.size, start: k as u64, len: (*len).max(1) });
            }
            _ => always = always.saturating_add(sig.size),
        }
    }
    if lives.len() > MOST_LAID_OUT {
        return Err(Rejected::TooLarge);
    }
    let (mut quiet, mut least, mut most) = (0usize, u64::MAX, 0u64);
    for (k, live) in live_by_position(&lives, period).enumerate() {
        if live < least {
            least = live;
            quiet = k;
        }
        most = most.max(live);
    }
    // Cheap checks first (laying out is quadratic in the blocks): the
    // arena is at least the peak of bytes live at once.
    if most < MIN_ARENA {
        return Err(Rejected::TooSmall);
    }
    // Quiet: at most 5% of the peak (or 2 MiB) of what the period holds
    // stays live there (a step's end, where a prefetched batch may wait;
    // not a layer of inference, whose activations flow into the next).
    let left = least + always;
    if left > (most / 20).max(2 << 20) {
        return Err(Rejected::NoQuietPoint);
    }
    // The arena is laid out when the plan starts, in the free memory the
    // pool has then; until then the peak stands for its size (laid out in
    // one piece, a period needs 1.000-1.001 of it on recorded PyTorch
    // steps, and laying out costs as much as a start's).
    Ok(Plan { entries, lives, arena: most, quiet, circle: period })
}

/// Bytes of planned blocks live at position `pos` of a circle (before the
/// allocation there is made).
pub(super) fn live_at(lives: &[Life], circle: u64, pos: u64) -> u64 {
    lives.iter().filter(|l| l.start != pos && (pos + circle - l.start) % circle < l.len).map(|l| l.size).sum()
}

/// Bytes of `lives` live at each position of a circle of `circle`
/// allocations, from position 0 (a difference array; a block running past
/// the end wraps to the start).
pub(super) fn live_by_position(lives: &[Life], circle: u64) -> impl Iterator<Item = u64> {
    let c = circle as usize;
    let mut diff = vec![0i128; c + 1];
    for l in lives {
        let (s, e, size) = (l.start as usize, (l.start + l.len) as usize, l.size as i128);
        diff[s] += size;
        if e <= c {
            diff[e] -= size;
        } else {
            diff[c] -= size;
            diff[0] += size;
            diff[e - c] -= size;
        }
    }
    diff.truncate(c);
    diff.into_iter().scan(0i128, |live, d| {
        *live += d;
        Some((*live).max(0) as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig(size: u64) -> Sig {
        Sig { size, stream: 1 }
    }

    /// A period of more blocks than a plan lays out is not planned (laying
    /// out is quadratic and runs inside an allocation), one of as many is.
    #[test]
    fn periods_of_too_many_blocks_are_not_planned() {
        let m = 1 << 20;
        // Each block lives one allocation; the last one of the period is
        // freed at its end (a quiet point), each 1 MiB: 64 MiB at least.
        let period = |n: usize| {
            let sigs: Vec<Sig> = (0..n).map(|k| sig(if k % 2 == 0 { 64 * m } else { m })).collect();
            let lens: Vec<Option<u64>> = (0..n).map(|_| Some(1)).collect();
            (sigs, lens)
        };
        let (sigs, lens) = period(MOST_LAID_OUT);
        let plan = build(&sigs, &lens).expect("a period of as many blocks as are laid out");
        assert_eq!(plan.planned(), MOST_LAID_OUT);
        let (sigs, lens) = period(MOST_LAID_OUT + 2);
        assert_eq!(build(&sigs, &lens).err(), Some(Rejected::TooLarge));
    }

    #[test]
    fn lifetimes_on_a_circle_overlap_across_the_seam() {
        let a = Life { size: 1, start: 8, len: 4 }; // 8..12 = 8,9,0,1 on a circle of 10
        let b = Life { size: 1, start: 0, len: 1 };
        let c = Life { size: 1, start: 3, len: 2 };
        assert!(overlaps(&a, &b, 10));
        assert!(overlaps(&b, &a, 10));
        assert!(!overlaps(&a, &c, 10));
        assert!(!overlaps(&c, &a, 10));
    }

    #[test]
    fn the_marking_pass_finds_the_overlapping_lifetimes_on_every_circle() {
        // Every pair of arcs on small circles, across the seam and whole.
        for circle in 1..=9u64 {
            let arcs: Vec<Life> = (0..circle)
                .flat_map(|start| (1..=circle).map(move |len| Life { size: 1, start, len }))
                .collect();
            let mut placed = Placed::default();
            for b in &arcs {
                placed.insert(0, 0, 1, b.start as u32, b.len as u32);
            }
            // (Inserted at one offset: kept in insertion order, reversed.)
            let mut meet = vec![0u8; arcs.len()];
            for a in &arcs {
                placed.mark_overlapping(0, a.start as u32, a.len as u32, circle as u32, &mut meet);
                for (m, b) in meet.iter().zip(arcs.iter().rev()) {
                    assert_eq!(*m == 1, overlaps(a, b, circle), "{a:?} and {b:?} on a circle of {circle}");
                }
            }
        }
    }

    #[test]
    fn placement_reuses_space_of_blocks_that_do_not_overlap_in_time() {
        // Two 100 MiB blocks, one after the other, and a 50 MiB block alive
        // with both: 150 MiB, not 250.
        let m = 1 << 20;
        let lives = [
            Life { size: 100 * m, start: 0, len: 2 },
            Life { size: 100 * m, start: 2, len: 2 },
            Life { size: 50 * m, start: 1, len: 3 },
        ];
        let l = layout(&lives, 8, &[]);
        assert_eq!(l.extra, 150 * m);
        assert_eq!(l.places[0], l.places[1]);
        // Free runs of 60 and 120 MiB: the 50 MiB block fits the first,
        // the two 100 MiB blocks share the second; nothing new.
        let l = layout(&lives, 8, &[60 * m, 120 * m]);
        assert_eq!(l.extra, 0, "{l:?}");
        assert_eq!(l.places[2], (0, 0));
        assert_eq!((l.places[0], l.places[1]), ((1, 0), (1, 0)));
        assert_eq!(l.used, vec![50 * m, 100 * m]);
        // A run too small for anything stays unused.
        let l = layout(&lives, 8, &[10 * m]);
        assert_eq!(l.used, vec![0]);
        assert_eq!(l.extra, 150 * m);
    }

    /// Checks that no two blocks whose lifetimes overlap share a byte, and
    /// that every block lies inside its piece.
    fn assert_valid(lives: &[Life], period: u64, pieces: &[u64], l: &Layout) {
        let size = |i: usize| lives[i].size.next_multiple_of(ALIGN);
        for i in 0..lives.len() {
            let (pi, oi) = l.places[i];
            let cap = if pi == pieces.len() { l.extra } else { pieces[pi] };
            assert!(oi + size(i) <= cap, "block {i} leaves piece {pi}");
            for j in 0..i {
                let (pj, oj) = l.places[j];
                if pi == pj && overlaps(&lives[i], &lives[j], period) {
                    assert!(oi + size(i) <= oj || oj + size(j) <= oi, "blocks {i} and {j} collide");
                }
            }
        }
    }

    /// [`layout_with`] written plainly: for each block in order, every gap
    /// between the placed blocks that overlap it in time, in (piece,
    /// offset) order, the least that fits (the first of equals); else the
    /// top of the new piece above the busy blocks there.
    fn layout_plainly(lives: &[Life], period: u64, pieces: &[u64], limit: u64) -> Layout {
        let new = pieces.len();
        let mut order: Vec<usize> = (0..lives.len()).collect();
        order.sort_by_key(|&i| (std::cmp::Reverse(lives[i].size), std::cmp::Reverse(lives[i].len), i));
        let mut places = vec![(usize::MAX, 0u64); lives.len()];
        let mut used = vec![0u64; new];
        let mut top = 0u64;
        let mut done: Vec<usize> = Vec::new();
        for &i in &order {
            let size = lives[i].size.next_multiple_of(ALIGN);
            let first = if size <= limit { 0 } else { new };
            let mut best: Option<(u64, usize, u64)> = None;
            let mut busy_top = 0u64;
            for piece in first..=new {
                let cap = pieces.get(piece).copied().unwrap_or(top);
                let mut busy: Vec<(u64, u64)> = done
                    .iter()
                    .filter(|&&j| places[j].0 == piece && overlaps(&lives[i], &lives[j], period))
                    .map(|&j| (places[j].1, places[j].1 + lives[j].size.next_multiple_of(ALIGN)))
                    .collect();
                busy.sort_unstable();
                let mut at = 0;
                let mut gaps = Vec::new();
                for &(b0, b1) in &busy {
                    if b0 > at {
                        gaps.push((b0 - at, at));
                    }
                    at = at.max(b1);
                }
                if piece == new {
                    busy_top = at;
                }
                if cap > at {
                    gaps.push((cap - at, at));
                }
                for (gap, off) in gaps {
                    if gap >= size && best.is_none_or(|(g, _, _)| gap < g) {
                        best = Some((gap, piece, off));
                    }
                }
            }
            let (piece, off) = best.map_or((new, busy_top), |(_, p, o)| (p, o));
            places[i] = (piece, off);
            if piece == new {
                top = top.max(off + size);
            } else {
                used[piece] = used[piece].max(off + size);
            }
            done.push(i);
        }
        Layout { places, used, extra: top }
    }

    #[test]
    fn the_layout_walk_places_every_block_where_the_plain_search_does() {
        // Sizes from a few classes (so exact fits are common) and random
        // lifetimes, in free runs and a new piece, under every limit.
        let (k, period) = (1u64 << 10, 400u64);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..6 {
            let lives: Vec<Life> = (0..200)
                .map(|j| Life {
                    size: [64, 512, 4096, 6000, 20000][(next() % 5) as usize] * k,
                    start: 2 * j,
                    len: 1 + next() % 150,
                })
                .collect();
            let pieces: Vec<u64> = (0..round).map(|_| (1 + next() % 40) * 1024 * k).collect();
            for limit in [u64::MAX, 16 << 20, 4 << 20, 0] {
                let fast = layout_with(&lives, period, &pieces, limit, None);
                assert_valid(&lives, period, &pieces, &fast);
                assert_eq!(
                    fast,
                    layout_plainly(&lives, period, &pieces, limit),
                    "round {round}, limit {limit}"
                );
            }
        }
    }

    #[test]
    fn variants_that_cannot_win_give_up_and_the_first_of_the_least_still_wins() {
        // 400 blocks (the threaded path) in free runs of several sizes:
        // from too small for most blocks to room for all of them (where
        // the first variant needs nothing new and every other gives up).
        let (m, period) = (1u64 << 20, 800u64);
        let mut x = 0x51_7cc1_b727_220au64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let lives: Vec<Life> = (0..400)
            .map(|k| Life { size: (1 + next() % 300) * m / 4, start: 2 * k, len: 1 + next() % 200 })
            .collect();
        let at_peak = live_at_peak(&lives, period);
        for pieces in [vec![3 * m, 2 * m], vec![200 * m, 60 * m, 30 * m], vec![100_000 * m]] {
            let l = layout(&lives, period, &pieces);
            assert_valid(&lives, period, &pieces, &l);
            let mut best: Option<Layout> = None;
            for limit in [u64::MAX, 256 << 20, 64 << 20, 16 << 20, 4 << 20] {
                for first in [None, Some(&at_peak[..])] {
                    let one = layout_with(&lives, period, &pieces, limit, first);
                    if best.as_ref().is_none_or(|b| one.extra < b.extra) {
                        best = Some(one);
                    }
                }
            }
            assert_eq!(Some(l.clone()), best, "pieces {pieces:?}");
            // Within what the least needs: the same layout; within less:
            // none (every variant gave up).
            assert_eq!(layout_within(&lives, period, &pieces, l.extra), Some(l.clone()), "pieces {pieces:?}");
            if l.extra > 0 {
                assert_eq!(layout_within(&lives, period, &pieces, l.extra - 1), None, "pieces {pieces:?}");
            }
        }
        // In one piece too.
        let one = layout(&lives, period, &[]);
        assert_eq!(layout_within(&lives, period, &[], one.extra), Some(one.clone()));
        assert_eq!(layout_within(&lives, period, &[], one.extra - 1), None);
        // A bound the layout cannot keep: given up with the blocks placed
        // so far; one it keeps: the same layout as with none.
        let order = placing_order(&lives, None);
        let whole = layout_in_order(&lives, period, &[], u64::MAX, &order);
        let tight = layout_bounded(&lives, period, &[], u64::MAX, &order, &AtomicU64::new(whole.extra - 1));
        assert!(tight.is_err_and(|l| l.extra > whole.extra - 1 && l.places.contains(&(usize::MAX, 0))));
        let kept = layout_bounded(&lives, period, &[], u64::MAX, &order, &AtomicU64::new(whole.extra));
        assert_eq!(kept, Ok(whole));
    }

    #[test]
    fn the_least_extra_bound_never_exceeds_a_layout_and_counts_what_only_large_pieces_hold() {
        // Two blocks of 95 MiB live together, free pieces of 100 and 10
        // MiB: only the 100 holds either, so the new piece holds at least
        // 95 + 95 - 100 = 90 MiB, where the peak less the pieces' total
        // says 80. Laid out: one in the 100, the other new (95).
        let m = 1u64 << 20;
        let lives = [Life { size: 95 * m, start: 0, len: 4 }, Life { size: 95 * m, start: 1, len: 4 }];
        assert_eq!(least_extra(&lives, 8, &[100 * m, 10 * m]), 90 * m);
        assert_eq!(layout(&lives, 8, &[100 * m, 10 * m]).extra, 95 * m);
        // A block larger than every piece is new whatever the pieces hold.
        let lives = [Life { size: 300 * m, start: 0, len: 2 }, Life { size: 20 * m, start: 1, len: 2 }];
        assert_eq!(least_extra(&lives, 8, &[100 * m]), 300 * m);
        // Random periods: never more than the least layout needs.
        let (k, period) = (1u64 << 10, 400u64);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..12 {
            let lives: Vec<Life> = (0..200)
                .map(|j| Life {
                    size: [64, 512, 4096, 6000, 20000, 90000][(next() % 6) as usize] * k,
                    start: 2 * j,
                    len: 1 + next() % 150,
                })
                .collect();
            let pieces: Vec<u64> = (0..round * 4).map(|_| (1 + next() % 60) * 1024 * k).collect();
            let l = layout(&lives, period, &pieces);
            let bound = least_extra(&lives, period, &pieces);
            assert!(bound <= l.extra, "round {round}: bound {bound} above the layout's {}", l.extra);
        }
    }

    #[test]
    fn a_large_period_is_laid_out_on_threads_as_it_would_be_on_one() {
        // 600 blocks (the threaded path), sizes and lifetimes from a
        // fixed generator, in three free runs and a new piece.
        let (m, period) = (1u64 << 20, 1200u64);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let lives: Vec<Life> = (0..600)
            .map(|k| Life { size: (1 + next() % 64) * m / 4, start: 2 * k, len: 1 + next() % 300 })
            .collect();
        let pieces = [96 * m, 40 * m, 8 * m];
        let l = layout(&lives, period, &pieces);
        assert_valid(&lives, period, &pieces, &l);
        // The least new memory of the limits in both orders, the first of
        // equals.
        let at_peak = live_at_peak(&lives, period);
        let mut best: Option<Layout> = None;
        for limit in [u64::MAX, 256 << 20, 64 << 20, 16 << 20, 4 << 20] {
            for first in [None, Some(&at_peak[..])] {
                let one = layout_with(&lives, period, &pieces, limit, first);
                assert_valid(&lives, period, &pieces, &one);
                if best.as_ref().is_none_or(|b| one.extra < b.extra) {
                    best = Some(one);
                }
            }
        }
        assert_eq!(Some(l), best);
        // In one piece: no more than the sum, no less than the peak live.
        let one = layout(&lives, period, &[]);
        assert_valid(&lives, period, &[], &one);
        let peak = (0..period)
            .map(|t| {
                let probe = Life { size: 0, start: t, len: 1 };
                lives
                    .iter()
                    .filter(|b| overlaps(&probe, b, period))
                    .map(|b| b.size.next_multiple_of(ALIGN))
                    .sum::<u64>()
            })
            .max()
            .unwrap();
        assert!(one.extra >= peak && one.extra <= lives.iter().map(|b| b.size).sum::<u64>());
    }

    #[test]
    fn the_blocks_live_at_the_peak_take_the_free_runs_first() {
        // As in checkpointed training: four 48 MiB blocks (checkpoints) live
        // from early in the step through its peak, where a block of 3000 MiB
        // comes; a 100 MiB temporary lives beside the 48s early on, not at
        // the peak. Free runs of 100 and 50 MiB. Largest first, the
        // temporary takes the 100 MiB run, and the 48s (whose lifetimes
        // overlap it) fit only the 50: the new piece holds 3000 + 3 x 48.
        // Peak first, two 48s take the 100 MiB run and one the 50, and the
        // temporary fits below the new piece's top (it is dead when the
        // 3000 MiB block comes): 3000 + 48.
        let m = 1u64 << 20;
        let mut lives = vec![Life { size: 100 * m, start: 0, len: 6 }];
        lives.extend((1..5).map(|k| Life { size: 48 * m, start: k, len: 12 }));
        lives.push(Life { size: 3000 * m, start: 10, len: 3 });
        let (period, pieces) = (20u64, [100 * m, 50 * m]);
        let largest_first = layout_with(&lives, period, &pieces, u64::MAX, None);
        assert_valid(&lives, period, &pieces, &largest_first);
        assert_eq!(largest_first.extra, 3000 * m + 3 * 48 * m, "{largest_first:?}");
        let at_peak = live_at_peak(&lives, period);
        assert_eq!(at_peak, [false, true, true, true, true, true]);
        let l = layout(&lives, period, &pieces);
        assert_valid(&lives, period, &pieces, &l);
        assert_eq!(l.extra, 3000 * m + 48 * m, "{l:?}");
    }

    #[test]
    fn limits_whose_new_blocks_fit_no_piece_are_not_laid_out_again() {
        // Blocks of 1-8 MiB, a few of 300-600 MiB and of 100-200 MiB; free
        // pieces of at most 96 MiB: lowering the limit to 256 or to 64 MiB
        // sends only blocks that no piece could hold to the new piece.
        let (m, period) = (1u64 << 20, 400u64);
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let lives: Vec<Life> = (0..300)
            .map(|k| {
                let size = match k % 50 {
                    0 => (300 + next() % 300) * m,
                    1 => (100 + next() % 100) * m,
                    _ => (1 + next() % 8) * m,
                };
                Life { size, start: k, len: 1 + next() % 120 }
            })
            .collect();
        let pieces = [96 * m, 40 * m, 8 * m];
        // u64::MAX, then 4 MiB (blocks of 5-8 MiB may go in a piece; 16 MiB
        // sends no block anywhere new).
        assert_eq!(limits_to_lay_out(&lives, &pieces), vec![u64::MAX, 4 << 20]);
        // The same layout as laying out every limit.
        let l = layout(&lives, period, &pieces);
        assert_valid(&lives, period, &pieces, &l);
        let at_peak = live_at_peak(&lives, period);
        let mut best: Option<Layout> = None;
        for limit in [u64::MAX, 256 << 20, 64 << 20, 16 << 20, 4 << 20] {
            for first in [None, Some(&at_peak[..])] {
                let one = layout_with(&lives, period, &pieces, limit, first);
                if best.as_ref().is_none_or(|b| one.extra < b.extra) {
                    best = Some(one);
                }
            }
        }
        assert_eq!(Some(l), best);
        // With a piece that can hold the 100-200 MiB blocks, 64 MiB is laid
        // out too (256 MiB still not: its new blocks exceed every piece).
        let larger = [250 * m, 40 * m];
        assert_eq!(limits_to_lay_out(&lives, &larger), vec![u64::MAX, 64 << 20, 4 << 20]);
        // And no limit but the first where nothing is smaller than 4 MiB.
        let big: Vec<Life> = lives.iter().map(|l| Life { size: l.size.max(300 * m), ..*l }).collect();
        assert_eq!(limits_to_lay_out(&big, &pieces), vec![u64::MAX]);
    }
}
