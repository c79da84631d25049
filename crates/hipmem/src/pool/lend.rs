//! Lending a group's free units: how a pool that only grows reuses the
//! physical memory that a live block keeps from going back.
//!
//! A pool that only grows maps a large growth as *groups* (one physical
//! allocation of up to 128 MiB mapped in one call, `backing/`): on a GPU a
//! mapping that large costs a twentieth per MiB of one of a single unit. But
//! a group goes back to the backend only whole, so one long-lived block in
//! it keeps all of it, and the free memory beside that block is held on top
//! of whatever the pool creates next. Replayed, variable-length inference
//! held up to 1.063 of its peak live bytes that way (free runs of 69-190 MiB
//! in groups beside the blocks still live when a large batch came).
//!
//! The physical memory of a group's free units is not lost, only pinned to
//! its addresses. A growth that would set a new peak first *lends* some of
//! them: it maps an *alias* of the whole group (CUDA and HIP map a physical
//! allocation only whole, from offset 0) so that the free units land where
//! the request needs memory, uses the alias only there (the rest of it is
//! shadowed, never handed out), and shadows the units' addresses in the
//! group (their *home*) while the loan lasts. One physical unit is used at
//! one address at a time; the pool creates memory only for what is still
//! missing. Because an alias covers its whole group, only runs at a
//! group's ends can join a block: the block is `[a run that ends its
//! group][wholly free groups][new units][a run that starts its group]`, in
//! a hole of its own, or the free memory before the growth's hole followed
//! by the last three ([`layout`]); a run in a group's middle cannot be used.
//!
//! - Only where the growth would take the pool past its high watermark
//!   (or is a large one lending its stream's pending frees instead of
//!   waiting for them, below):
//!   below it, memory held does not count, and each loan costs a mapping
//!   (replayed: 27 332 backend calls over the 90 variable-length cases
//!   against 25 776 without lending; lending at every growth, 164 thousand).
//! - Only after the pool's first steps (its heap's first 2048 frees,
//!   `FIRST_STEPS` in `backing/mod.rs`, where the measurements are), and only
//!   memory whose frees are known complete (global free), or, with pending
//!   lending on (`MemPool::set_pending_lending`, off by default), still
//!   pending on the growth's own stream: its work queued before those frees runs
//!   before the block's, so the alias may serve the block at once, and a
//!   large growth need not wait for the GPU to give that memory back
//!   (`release.rs`). Such a loan's home may still be in use by that work:
//!   it comes home pending as its frees were (`VirtualRange::busy`), and
//!   its group goes back only once they are known complete.
//! - Not a small part of a large run whose group borders an unbacked hole
//!   on the run's side ([`KEEP_JOINABLE`]): the rest of the run would be
//!   cut off from the hole, where a later growth could have joined it.
//! - The slow path sends wholly free loans home with no driver call (home
//!   unshadowed, the loan shadowed); the release paths unmap loans with no
//!   unit in use, and a group goes back when every unit is free where it is
//!   used, its aliases with it.
//!
//! This module is the choice only (no runtime, no locks):
//! `#![forbid(unsafe_code)]`. `backing/` maps and records.
#![forbid(unsafe_code)]

/// Most wholly free groups one growth takes (each an alias, a mapping
/// call).
pub const MOST_SOURCES: usize = 16;

/// Units of a group used at another address: the loan's (the key of
/// `VirtualRange::loans`). The driver maps a physical allocation only
/// whole (CUDA and HIP: offset 0), so a loan is an *alias* of its whole
/// group, mapped at `at - offset`; only `[at, at + len)` is used there, the
/// rest of the alias is shadowed. Unmapped whole.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Loan {
    /// The group's first address (its key in `VirtualRange::groups`).
    pub group: u64,
    /// Where the units start in the group.
    pub offset: u64,
    /// Bytes lent (whole units).
    pub len: u64,
    /// The group's length (the alias's).
    pub whole: u64,
}

impl Loan {
    /// Where the alias that holds the loan at `at` is mapped: (address, length).
    pub fn alias(&self, at: u64) -> (u64, u64) {
        (at - self.offset, self.whole)
    }
}

/// A run of a group's units that are free at home (in the group's own
/// mapping).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// Its address at home.
    pub at: u64,
    /// The units as a loan would record them.
    pub loan: Loan,
}

impl Source {
    /// Free units that end where the group ends (lent from their end).
    fn is_tail(&self) -> bool {
        self.loan.offset > 0 && self.loan.offset + self.loan.len == self.loan.whole
    }
    /// Free units that start where the group starts (lent from their start).
    fn is_head(&self) -> bool {
        self.loan.offset == 0
    }
    /// The last `len` bytes of a tail run.
    fn tail_part(&self, len: u64) -> Source {
        let cut = self.loan.len - len;
        Source { at: self.at + cut, loan: Loan { offset: self.loan.offset + cut, len, ..self.loan } }
    }
    /// The first `len` bytes of a head run.
    fn head_part(&self, len: u64) -> Source {
        Source { at: self.at, loan: Loan { len, ..self.loan } }
    }
}

/// Where a lending growth's block goes: `[tail][whole groups][new units]
/// [head]`, each lent run in its group's alias, the aliases' unused parts
/// (before the tail's units, after the head's) shadowed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The block's first address.
    pub block: u64,
    /// The runs lent and where each is used.
    pub lent: Vec<(Source, u64)>,
    /// Addresses where new units are mapped.
    pub new_units: Vec<u64>,
    /// Whether the block starts with the free memory before the growth's
    /// hole (`Growth::before`).
    pub joins_before: bool,
}

/// Where a growth would go without lending: the hole it grows into and the
/// free memory just before it (which the block joins).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Growth {
    /// The hole's first address.
    pub start: u64,
    /// Its length.
    pub size: u64,
    /// Free bytes ending at `start` that the block would start with.
    pub before: u64,
}

/// Free memory at a group's end that a small loan from a run bordering an
/// unbacked hole would cut off from it, and that the run keeps instead
/// (see [`pick`]).
pub const KEEP_JOINABLE: u64 = 32 << 20;

/// The lent runs of a layout: the largest run that ends its group (its
/// end lent), if `tail`; whole free groups, largest first (at most `most`);
/// the largest run that starts its group (its start lent).
///
/// A small part of a large run whose group borders an unbacked hole on the
/// run's side (`holes`) is not lent: the part (at most 1/8 of the run,
/// leaving at least [`KEEP_JOINABLE`]) would stay shadowed at home between
/// the hole and the rest of the run, and a later growth across the hole
/// could no longer join that rest. (The two-GPU job's closing checks: a
/// loan of 4 MiB from the free start of a 1.1 GiB group cut its remaining
/// 100 MiB off from the 760 MiB hole below it, and the next 384 MiB block
/// grew anew: 1.042 of its peak replayed without idle release, 1.011 with
/// this.) Returns (tail, wholes, head, bytes still needed).
fn pick(
    need: u64,
    g: u64,
    runs: &[Source],
    holes: &[(u64, u64)],
    most: usize,
    tail: bool,
) -> (Option<Source>, Vec<Source>, Option<Source>, u64) {
    let usable = |s: &&Source| s.loan.len >= g && s.loan.len % g == 0 && s.loan.whole % g == 0;
    // Largest first, then by address: the same choice every time.
    let key = |s: &&Source| (s.loan.len, std::cmp::Reverse(s.at));
    let borders = |s: &Source| {
        let (start, end) = (s.loan.group, s.loan.group + s.loan.whole);
        if s.is_head() {
            holes.iter().any(|&(a, n)| a + n == start)
        } else {
            holes.iter().any(|&(a, _)| a == end)
        }
    };
    let mut left = need;
    // Lent in part only where the part is more than 1/8 of the run, or what
    // would stay is less than `KEEP_JOINABLE`.
    let lendable_part = |s: &&Source, left: u64| {
        s.loan.len <= left
            || !borders(s)
            || s.loan.len - left < KEEP_JOINABLE
            || left.saturating_mul(8) > s.loan.len
    };
    let tail = runs
        .iter()
        .filter(usable)
        .filter(|s| tail && s.is_tail() && lendable_part(s, left))
        .max_by_key(key)
        .map(|s| {
            let t = s.tail_part(s.loan.len.min(left));
            left -= t.loan.len;
            t
        });
    let mut wholes: Vec<Source> =
        runs.iter().filter(usable).filter(|s| s.is_head() && s.loan.len == s.loan.whole).copied().collect();
    wholes.sort_by_key(|s| (std::cmp::Reverse(s.loan.len), s.at));
    let mut middle = Vec::new();
    for w in wholes {
        if middle.len() < most && w.loan.len <= left {
            left -= w.loan.len;
            middle.push(w);
        }
    }
    let head = runs
        .iter()
        .filter(usable)
        .filter(|s| s.is_head() && !middle.iter().any(|m| m.at == s.at) && lendable_part(s, left))
        .max_by_key(key)
        .filter(|_| left > 0)
        .map(|s| {
            let h = s.head_part(s.loan.len.min(left));
            left -= h.loan.len;
            h
        });
    (tail, middle, head, left)
}

/// How much of `need` bytes a lending growth could cover with `runs` (at
/// most `most` wholly free groups, a group's end run before them and a
/// group's start run after them), as [`layout`] would pick them.
pub fn coverable(need: u64, g: u64, runs: &[Source], holes: &[(u64, u64)], most: usize) -> u64 {
    need - pick(need, g, runs, holes, most, true).3
}

/// Places `[tail][wholes][new units][head]` from `block` on.
fn place(
    block: u64,
    g: u64,
    tail: Option<Source>,
    wholes: &[Source],
    head: Option<Source>,
    left: u64,
) -> (Vec<(Source, u64)>, Vec<u64>) {
    let mut at = block;
    let mut lent = Vec::new();
    for s in tail.iter().chain(wholes) {
        lent.push((*s, at));
        at += s.loan.len;
    }
    let new_units: Vec<u64> = (0..left / g).map(|i| at + i * g).collect();
    at += left;
    if let Some(h) = head {
        lent.push((h, at));
    }
    (lent, new_units)
}

/// Lays out a block of `want` bytes from the groups' free runs at home
/// (`runs`) and new units of `g` bytes, the way that creates the fewest:
/// - where the growth would go (`growth`): the free memory before its hole,
///   then whole free groups, new units and a run that starts its group, in
///   the hole (the head's alias must fit in it);
/// - or in the first unbacked hole of `holes` (address, length) that holds
///   the aliases: a run that ends its group, whole groups, new units and a
///   run that starts its group.
///
/// A run in a group's middle cannot be used: its alias would cover the
/// addresses on both sides of it. None if nothing is lent or nothing fits.
pub fn layout(
    want: u64,
    g: u64,
    runs: &[Source],
    growth: Growth,
    holes: &[(u64, u64)],
    most: usize,
) -> Option<Layout> {
    let mut best: Option<Layout> = None;
    let mut consider = |l: Layout| {
        if !l.lent.is_empty() && best.as_ref().is_none_or(|b| l.new_units.len() < b.new_units.len()) {
            best = Some(l);
        }
    };
    // Without the tail, the head, or both where their aliases do not fit.
    let variants = |t: Option<Source>, h: Option<Source>| [(t, h), (t, None), (None, h), (None, None)];
    // Joining the free memory before the growth's hole.
    if growth.before > 0 && growth.before < want {
        let need = (want - growth.before).next_multiple_of(g);
        let (_, wholes, head, left) = pick(need, g, runs, holes, most, false);
        for (_, h) in variants(None, head) {
            let left = left + head.map_or(0, |x| x.loan.len) - h.map_or(0, |x| x.loan.len);
            let after = h.map_or(0, |x| x.loan.whole - x.loan.len);
            if need + after <= growth.size {
                let (lent, new_units) = place(growth.start, g, None, &wholes, h, left);
                consider(Layout { block: growth.start - growth.before, lent, new_units, joins_before: true });
                break;
            }
        }
    }
    // In a hole of its own.
    let need = want.next_multiple_of(g);
    let (tail, wholes, head, left) = pick(need, g, runs, holes, most, true);
    for (t, h) in variants(tail, head) {
        let left = left + tail.map_or(0, |x| x.loan.len) - t.map_or(0, |x| x.loan.len)
            + head.map_or(0, |x| x.loan.len)
            - h.map_or(0, |x| x.loan.len);
        let before = t.map_or(0, |x| x.loan.offset);
        let after = h.map_or(0, |x| x.loan.whole - x.loan.len);
        if let Some(&(start, _)) = holes.iter().find(|&&(_, len)| len >= before + need + after) {
            let (lent, new_units) = place(start + before, g, t, &wholes, h, left);
            consider(Layout { block: start + before, lent, new_units, joins_before: false });
            break;
        }
    }
    best
}

/// Whether pools lend their groups' free units (`HIPMEM_POOL_LEND=0` turns
/// it off, for comparison).
pub fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("HIPMEM_POOL_LEND").map(|v| v != "0").unwrap_or(true))
}

/// Whether new pools lend units whose frees are still pending on the
/// growth's own stream (off unless `HIPMEM_POOL_LEND_PENDING=1`; per pool,
/// `MemPool::set_pending_lending`).
pub fn pending_by_default() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("HIPMEM_POOL_LEND_PENDING").is_ok_and(|v| v == "1"))
}

/// The whole units of unit size `g` inside `[start, end)` of a group at
/// `[base, base + len)`: (first, bytes), if any.
pub fn whole_units(start: u64, end: u64, base: u64, len: u64, g: u64) -> Option<(u64, u64)> {
    let s = start.max(base).checked_next_multiple_of(g)?;
    let e = end.min(base + len) / g * g;
    (e > s).then(|| (s, e - s))
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 2 << 20;

    const NO_GROWTH: Growth = Growth { start: 0, size: 0, before: 0 };

    /// A free run of `units` at unit `from` of a group of `of` units at `base`.
    fn run(base: u64, of: u64, from: u64, units: u64) -> Source {
        Source {
            at: base + from * G,
            loan: Loan { group: base, offset: from * G, len: units * G, whole: of * G },
        }
    }

    #[test]
    fn whole_units_are_clipped_to_the_group_and_aligned() {
        let base = 64 * G;
        assert_eq!(whole_units(base - 5, base + 3 * G + 7, base, 8 * G, G), Some((base, 3 * G)));
        assert_eq!(whole_units(base + 1, base + 2 * G, base, 8 * G, G), Some((base + G, G)));
        assert_eq!(whole_units(base + 1, base + G + 5, base, 8 * G, G), None);
        assert_eq!(whole_units(base + 1, base + G - 1, base, 8 * G, G), None, "inside one unit");
        assert_eq!(whole_units(base + 6 * G, base + 20 * G, base, 8 * G, G), Some((base + 6 * G, 2 * G)));
    }

    #[test]
    fn a_block_is_a_tail_whole_groups_new_units_and_a_head() {
        let (a, b, c) = (1000 * G, 2000 * G, 3000 * G);
        let runs = [
            run(a, 64, 40, 24),         // the tail of group a
            run(b, 32, 0, 32),          // group b, wholly free
            run(c, 64, 0, 10),          // the head of group c
            run(c + 64 * G, 64, 20, 8), // a middle run: never used
        ];
        let holes = [(100 * G, 50 * G), (5000 * G, 1000 * G)];
        let l = layout(80 * G, G, &runs, NO_GROWTH, &holes, MOST_SOURCES).unwrap();
        // The first hole is too small for a's alias (40 units before its tail).
        let block = 5000 * G + 40 * G;
        assert_eq!(l.block, block);
        assert_eq!(l.lent[0], (run(a, 64, 40, 24), block));
        assert_eq!(l.lent[1], (run(b, 32, 0, 32), block + 24 * G));
        assert_eq!(l.new_units, (0..14).map(|i| block + (56 + i) * G).collect::<Vec<_>>());
        assert_eq!(l.lent[2], (run(c, 64, 0, 10), block + 70 * G));
        assert_eq!(l.lent.len(), 3);
        assert!(!l.joins_before);
    }

    #[test]
    fn the_free_memory_before_the_growths_hole_is_kept_where_that_creates_less() {
        let (b, c) = (2000 * G, 3000 * G);
        let runs = [run(b, 32, 0, 32), run(c, 64, 0, 10)];
        // 5 units free before a hole of 120 at unit 400: the block starts
        // there, then group b, new units, and c's head (its alias's 54
        // unused units fit in the hole).
        let growth = Growth { start: 400 * G, size: 120 * G, before: 5 * G };
        let l = layout(60 * G, G, &runs, growth, &[(400 * G, 120 * G)], MOST_SOURCES).unwrap();
        assert!(l.joins_before);
        assert_eq!(l.block, 395 * G);
        assert_eq!(l.lent[0], (run(b, 32, 0, 32), 400 * G));
        assert_eq!(l.new_units.len(), 13);
        assert_eq!(l.lent[1], (run(c, 64, 0, 10), 445 * G));
        // A hole too small for c's alias: c's head cannot be used there.
        let growth = Growth { start: 400 * G, size: 60 * G, before: 5 * G };
        let l = layout(60 * G, G, &runs, growth, &[(400 * G, 60 * G)], MOST_SOURCES).unwrap();
        assert_eq!(l.lent.len(), 1);
        assert_eq!(l.new_units.len(), 23);
    }

    #[test]
    fn a_small_part_of_a_large_run_beside_a_hole_is_not_lent() {
        let a = 1000 * G;
        // The free start of group a (64 units, 52 free at its start), with an
        // unbacked hole ending where the group starts (too small for its
        // alias), and room elsewhere.
        let head = run(a, 64, 0, 52);
        let holes = [(980 * G, 20 * G), (5000 * G, 1000 * G)];
        // Two units of 52: the other 50 would be cut off from the hole.
        assert_eq!(layout(2 * G, G, &[head], NO_GROWTH, &holes, MOST_SOURCES), None);
        // Without the hole beside it, they are lent.
        let away = [(5000 * G, 1000 * G)];
        let l = layout(2 * G, G, &[head], NO_GROWTH, &away, MOST_SOURCES).unwrap();
        assert_eq!(l.lent, vec![(run(a, 64, 0, 2), 5000 * G)]);
        // More than 1/8 of the run, or all of it: lent.
        let l = layout(8 * G, G, &[head], NO_GROWTH, &holes, MOST_SOURCES).unwrap();
        assert_eq!(l.lent, vec![(run(a, 64, 0, 8), 5000 * G)]);
        let l = layout(52 * G, G, &[head], NO_GROWTH, &holes, MOST_SOURCES).unwrap();
        assert_eq!(l.lent, vec![(run(a, 64, 0, 52), 5000 * G)]);
        // What would stay is under 32 MiB (14 of 16 units): lent.
        let short = run(a, 64, 0, 16);
        let l = layout(2 * G, G, &[short], NO_GROWTH, &holes, MOST_SOURCES).unwrap();
        assert_eq!(l.lent, vec![(run(a, 64, 0, 2), 5000 * G)]);
        // The same for a run that ends its group, beside a hole starting
        // where the group ends.
        let tail = run(a, 64, 12, 52);
        let holes = [(a + 64 * G, 20 * G), (5000 * G, 1000 * G)];
        assert_eq!(layout(2 * G, G, &[tail], NO_GROWTH, &holes, MOST_SOURCES), None);
        let l = layout(2 * G, G, &[tail], NO_GROWTH, &away, MOST_SOURCES).unwrap();
        assert_eq!(l.lent, vec![(run(a, 64, 62, 2), 5000 * G + 62 * G)]);
        assert_eq!(coverable(2 * G, G, &[tail], &holes, MOST_SOURCES), 0);
        assert_eq!(coverable(2 * G, G, &[tail], &away, MOST_SOURCES), 2 * G);
    }

    #[test]
    fn runs_larger_than_the_need_are_lent_in_part_and_the_rest_stays() {
        let a = 1000 * G;
        // The tail's last units; nothing more is needed.
        let l = layout(4 * G, G, &[run(a, 64, 40, 24)], NO_GROWTH, &[(0, 1 << 40)], MOST_SOURCES).unwrap();
        assert_eq!(l.lent, vec![(run(a, 64, 60, 4), 60 * G)]);
        assert!(l.new_units.is_empty());
        // A head's first units.
        let l = layout(4 * G, G, &[run(a, 64, 0, 24)], NO_GROWTH, &[(0, 1 << 40)], MOST_SOURCES).unwrap();
        assert_eq!(l.lent, vec![(run(a, 64, 0, 4), 0)]);
        // Only a middle run: nothing to lend.
        assert_eq!(layout(4 * G, G, &[run(a, 64, 8, 24)], NO_GROWTH, &[(0, 1 << 40)], MOST_SOURCES), None);
        // No hole holds the aliases.
        assert_eq!(layout(4 * G, G, &[run(a, 64, 40, 24)], NO_GROWTH, &[(0, 63 * G)], MOST_SOURCES), None);
    }
}
