//! Physical memory is reused before it is created: how a pool on virtual
//! memory backs a request that finds no free run of its size.
//!
//! The pool's reservation is far larger than its physical memory, so
//! addresses are plentiful and physical memory is what counts. Physical
//! memory comes in *granules* (the backend's mapping granularity, 2 MiB on
//! GPUs), each a physical allocation of its own, and a granule may be mapped
//! at several addresses (*aliases*) at once. Exactly one alias of each
//! granule is *active*: the heap hands out only active addresses; the others
//! are *shadowed* (mapped, but never handed out). A granule is *in use* when
//! its active alias holds a live block or a free that has not completed;
//! otherwise it may be *switched*: its active alias is shadowed and another
//! alias becomes active. Switching costs no driver call, so once the layouts
//! a workload needs have been mapped, a training loop whose phases want the
//! same physical memory at different addresses pays nothing per step.
//!
//! A request that finds no free run of its size, in order:
//!
//! 1. **Switch**: an existing run of its size class whose addresses are
//!    free or shadowed by granules not in use (first where a block of the
//!    same size went last time, else the smallest such run); the shadowed
//!    granules are switched to it. No driver call.
//! 2. **Map** ([`plan`]): the block is placed across an unbacked hole
//!    (joined to the free memory just before it, and if the hole is too
//!    small, just after it); granules not in use elsewhere are mapped there
//!    as new aliases (the longest unused first) and switched to; new
//!    physical granules only for what is still missing.
//!
//! Live blocks never move and never lose data: only granules whose every
//! byte is free (and known complete on the device) are switched. Aliases
//! beyond a few per granule are unmapped, least recently used first.
#![forbid(unsafe_code)]

/// An unbacked range of the reservation and the global free memory around it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Hole {
    /// First address.
    pub start: u64,
    /// Its length.
    pub size: u64,
    /// Global free bytes that end exactly at `start`.
    pub before: u64,
    /// Global free bytes that start exactly at `start + size`.
    pub after: u64,
}

/// A physical granule not in use: it may be mapped and switched elsewhere.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Donor {
    /// Its id (the backend's handle).
    pub pid: u64,
    /// Its active alias.
    pub active: u64,
    /// When the free run holding its active alias last changed (the heap's
    /// count of frees): the longest unused memory is taken first.
    pub freed: u64,
}

/// Where a block goes and what backs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The block's first address.
    pub block: u64,
    /// The free run before the hole that the block starts in: (addr, len).
    pub prefix: Option<(u64, u64)>,
    /// The free run after the hole that the block ends in: (addr, len taken).
    pub suffix: Option<(u64, u64)>,
    /// Granules to map here as new aliases and switch to: (pid, at).
    pub reuse: Vec<(u64, u64)>,
    /// Addresses where new physical granules are mapped.
    pub new_granules: Vec<u64>,
    /// Unbacked bytes of the hole right after the last granule the plan
    /// maps (0 if the block runs into the free memory after the hole).
    pub room: u64,
}

/// Most holes a plan considers (the ones with the most free memory around
/// them, and the largest).
const CANDIDATES: usize = 8;

/// Plans a block of `want` bytes (a multiple of the block granule) with
/// granularity `g`, given the unbacked holes of its size class and the
/// granules not in use (in any order); at most `new_allowed` new granules
/// (the pool's maxSize), None for no limit. None if no hole can take it.
pub fn plan(want: u64, g: u64, holes: &[Hole], donors: &[Donor], new_allowed: Option<u64>) -> Option<Plan> {
    debug_assert!(g > 0 && want > 0);
    let mut candidates: Vec<&Hole> = holes.iter().filter(|h| h.size > 0).collect();
    candidates.sort_by_key(|h| std::cmp::Reverse((h.before + h.after.min(want), h.size)));
    let largest = holes.iter().max_by_key(|h| h.size);
    candidates.truncate(CANDIDATES);
    if let Some(l) = largest {
        if !candidates.iter().any(|h| std::ptr::eq(*h, l)) {
            candidates.push(l);
        }
    }
    // The longest unused first, then by address.
    let mut sorted: Vec<Donor> = donors.to_vec();
    sorted.sort_by_key(|d| (d.freed, d.active));
    let mut best: Option<Plan> = None;
    for h in candidates {
        let Some(p) = plan_hole(want, g, h, &sorted) else { continue };
        if new_allowed.is_some_and(|n| p.new_granules.len() as u64 > n) {
            continue;
        }
        let key = |p: &Plan| (p.new_granules.len(), p.reuse.len(), p.block);
        if best.as_ref().is_none_or(|b| key(&p) < key(b)) {
            best = Some(p);
        }
    }
    best
}

/// The plan for one hole (donors in order of preference).
fn plan_hole(want: u64, g: u64, h: &Hole, donors: &[Donor]) -> Option<Plan> {
    if want <= h.before {
        // The free run alone fits: best fit would have found it.
        return None;
    }
    let from_hole = want - h.before;
    let block = h.start - h.before;
    let (back, suffix) = if from_hole <= h.size {
        (from_hole.checked_next_multiple_of(g)?.min(h.size), None)
    } else if from_hole <= h.size + h.after {
        // The whole hole, and the start of the free run after it.
        (h.size, Some((h.start + h.size, from_hole - h.size)))
    } else {
        return None;
    };
    let prefix = (h.before > 0).then_some((block, h.before));
    // Granules whose active alias lies in the free runs the block uses are
    // part of the block already.
    let outside = |d: &Donor, (a, n): (u64, u64)| d.active + g <= a || d.active >= a + n;
    let usable = |d: &&Donor| {
        prefix.is_none_or(|r| outside(d, r))
            && suffix.map(|(a, _)| (a, h.after)).is_none_or(|r| outside(d, r))
    };
    let granules = back / g;
    let mut targets = (0..granules).map(|i| h.start + i * g);
    let reuse: Vec<(u64, u64)> =
        donors.iter().filter(usable).zip(targets.by_ref()).map(|(d, at)| (d.pid, at)).collect();
    let new_granules: Vec<u64> = targets.collect();
    let room = if suffix.is_some() { 0 } else { h.size - back };
    Some(Plan { block, prefix, suffix, reuse, new_granules, room })
}

/// What a candidate run needs of each piece it covers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Cover {
    /// Free bytes at active addresses.
    Free,
    /// A shadowed granule whose physical memory is not in use: (its pid, its
    /// active alias).
    Switchable(u64, u64),
    /// A shadowed granule whose physical memory is in use elsewhere: usable
    /// once another granule is mapped there (a repair).
    Repairable,
    /// Anything else (live, pending, unbacked).
    Blocked,
}

/// A run found by [`find_run`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    /// Where the block goes.
    pub start: u64,
    /// The switches its first `want` bytes need: (pid, from, to).
    pub switches: Vec<(u64, u64, u64)>,
    /// The shadowed aliases in its first `want` bytes to point at other granules.
    pub repairs: Vec<u64>,
}

/// Finds, in a sequence of address-ordered pieces `(addr, len, cover)` (a
/// shadowed piece is one granule), the run of at least `want` bytes that
/// needs the fewest repairs (then the shortest). A pid may be switched once
/// per run and its active alias must not lie in the run (else that alias is
/// repaired instead).
pub fn find_run(want: u64, g: u64, pieces: impl IntoIterator<Item = (u64, u64, Cover)>) -> Option<Run> {
    let mut best: Option<(usize, u64, Run)> = None; // (repairs, len, run)
    let mut start = 0u64;
    let mut end = 0u64;
    let mut switches: Vec<(u64, u64, u64)> = Vec::new();
    let mut repairs: Vec<u64> = Vec::new();
    let mut close = |start: u64, end: u64, switches: &mut Vec<(u64, u64, u64)>, repairs: &mut Vec<u64>| {
        let len = end.saturating_sub(start);
        if len >= want {
            let limit = start + want;
            let run = Run {
                start,
                switches: switches.iter().copied().filter(|&(_, _, to)| to < limit).collect(),
                repairs: repairs.iter().copied().filter(|&r| r < limit).collect(),
            };
            if best.as_ref().is_none_or(|b| (run.repairs.len(), len) < (b.0, b.1)) {
                best = Some((run.repairs.len(), len, run));
            }
        }
        switches.clear();
        repairs.clear();
    };
    for (addr, len, cover) in pieces {
        let contiguous = end == addr && end > start;
        if !contiguous || cover == Cover::Blocked {
            close(start, end, &mut switches, &mut repairs);
            start = addr;
            end = addr;
        }
        match cover {
            Cover::Blocked => {
                start = addr + len;
                end = start;
                continue;
            }
            Cover::Free => {
                // A granule switched in this run whose active alias lies in
                // this free piece is repaired instead.
                let (inside, keep): (Vec<_>, Vec<_>) =
                    switches.iter().partition(|&&(_, from, _)| from + g > addr && from < addr + len);
                switches = keep;
                repairs.extend(inside.into_iter().map(|(_, _, to)| to));
            }
            Cover::Switchable(pid, active) => {
                if switches.iter().any(|&(p, _, _)| p == pid) || (active >= start && active < end) {
                    repairs.push(addr);
                } else {
                    switches.push((pid, active, addr));
                }
            }
            Cover::Repairable => repairs.push(addr),
        }
        end = addr + len;
    }
    close(start, end, &mut switches, &mut repairs);
    best.map(|(_, _, run)| run)
}

/// Where memory unmapped to move under a growth goes
/// ([`place_moved`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// How many of the growth's new places (from the first) the moved
    /// memory takes.
    pub places_used: usize,
    /// Each physical allocation placed: (handle, length, address).
    pub placed: Vec<(u64, u64, u64)>,
    /// Those no place could take (handle, length): they go back.
    pub left: Vec<(u64, u64)>,
}

/// Places physical allocations unmapped to move (`handles`: (handle,
/// length), lengths whole granules of `g`) for a growth whose new memory
/// goes at `places` (granule addresses, ascending): the largest first, each
/// across consecutive places from the first on; what does not fit there
/// goes, whole, into the first stretch of `holes` (unbacked (start, length),
/// ascending) that no range in `taken` (what the growth maps besides its
/// places) or an earlier placement covers, and stays free there. Nothing
/// moved is left out while some hole can take it.
pub fn place_moved(
    g: u64,
    places: &[u64],
    taken: &[(u64, u64)],
    holes: &[(u64, u64)],
    handles: &[(u64, u64)],
) -> Moved {
    let mut sorted = handles.to_vec();
    sorted.sort_unstable_by_key(|&(h, len)| (std::cmp::Reverse(len), h));
    let mut out = Moved::default();
    let mut rest = Vec::new();
    for (handle, len) in sorted {
        let k = (len / g) as usize;
        let used = out.places_used;
        let fits = len > 0
            && len % g == 0
            && used + k <= places.len()
            && places[used + k - 1] == places[used] + (k as u64 - 1) * g;
        if fits {
            out.placed.push((handle, len, places[used]));
            out.places_used += k;
        } else {
            rest.push((handle, len));
        }
    }
    // The rest: first fit in the holes, around every range in use.
    let mut busy: Vec<(u64, u64)> = taken.to_vec();
    busy.extend(places.iter().map(|&at| (at, g)));
    for (handle, len) in rest {
        busy.sort_unstable();
        match first_gap(holes, &busy, len, g) {
            Some(at) => {
                out.placed.push((handle, len, at));
                busy.push((at, len));
            }
            None => out.left.push((handle, len)),
        }
    }
    out
}

/// The first address, aligned to `g`, from which `len` bytes lie in one of
/// `holes` and outside every range of `busy` (sorted by start).
fn first_gap(holes: &[(u64, u64)], busy: &[(u64, u64)], len: u64, g: u64) -> Option<u64> {
    for &(start, size) in holes {
        let end = start + size;
        let mut at = start.checked_next_multiple_of(g)?;
        for &(b, n) in busy {
            if b + n <= at {
                continue;
            }
            if b >= end || at + len <= b {
                break;
            }
            at = (b + n).checked_next_multiple_of(g)?;
        }
        if at + len <= end {
            return Some(at);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn moved_memory_fills_the_places_then_the_first_free_stretch() {
        let g = 2;
        let places: Vec<u64> = (100..110).step_by(2).collect(); // 5 places at 100..110
        // A group of 3 granules, two units, and a group of 4 that does not fit.
        let handles = [(1, 2), (2, 6), (3, 2), (4, 8)];
        let holes = [(0, 4), (20, 10), (100, 40)];
        let taken = [(22, 2)];
        let m = place_moved(g, &places, &taken, &holes, &handles);
        // Largest first: the group of 4 fits the five places, then one unit.
        assert_eq!(m.places_used, 5);
        assert_eq!(m.placed[0], (4, 8, 100));
        assert_eq!(m.placed[1], (1, 2, 108));
        // The group of 3 goes past the taken range in the second hole; the
        // last unit into the first hole.
        assert_eq!(m.placed[2], (2, 6, 24));
        assert_eq!(m.placed[3], (3, 2, 0));
        assert!(m.left.is_empty());
    }

    #[test]
    fn moved_memory_no_hole_can_take_is_left() {
        let m = place_moved(2, &[10], &[], &[(10, 2)], &[(7, 4), (8, 2)]);
        assert_eq!(m.placed, vec![(8, 2, 10)]);
        assert_eq!(m.left, vec![(7, 4)]);
        assert_eq!(m.places_used, 1);
        // Places that are not consecutive take only what fits in one stretch.
        let m = place_moved(2, &[10, 14], &[], &[(10, 6)], &[(9, 4)]);
        assert_eq!((m.places_used, m.left.len()), (0, 1), "{m:?}");
    }

    use super::*;

    const G: u64 = 2 << 20;

    fn hole(start: u64, size: u64, before: u64, after: u64) -> Hole {
        Hole { start, size, before, after }
    }

    fn donor(pid: u64, active: u64, freed: u64) -> Donor {
        Donor { pid, active, freed }
    }

    #[test]
    fn new_memory_only_when_no_granule_is_free_elsewhere() {
        let holes = [hole(100 * G, 1000 * G, 0, 0)];
        let p = plan(5 * G, G, &holes, &[], None).unwrap();
        assert_eq!(p.block, 100 * G);
        assert_eq!(p.new_granules, (100..105).map(|i| i * G).collect::<Vec<_>>());
        assert!(p.reuse.is_empty());
        // Four granules not in use cover 4 of the 5; the rest is new.
        let donors: Vec<Donor> = (0..4).map(|i| donor(i, (10 + i) * G, 5)).collect();
        let p = plan(5 * G - 4096, G, &holes, &donors, None).unwrap();
        assert_eq!(p.reuse.len(), 4);
        assert_eq!(p.new_granules, vec![104 * G]);
        let mut at: Vec<u64> = p.reuse.iter().map(|r| r.1).chain(p.new_granules.iter().copied()).collect();
        at.sort();
        assert_eq!(at, (100..105).map(|i| i * G).collect::<Vec<_>>());
    }

    #[test]
    fn the_longest_unused_granules_are_taken_first() {
        let holes = [hole(100 * G, 1000 * G, 0, 0)];
        let donors = [donor(1, G, 30), donor(2, 2 * G, 10), donor(3, 3 * G, 20)];
        let p = plan(2 * G, G, &holes, &donors, None).unwrap();
        assert_eq!(p.reuse, vec![(2, 100 * G), (3, 101 * G)]);
    }

    #[test]
    fn free_memory_around_a_hole_is_used_and_its_granules_are_not_taken() {
        // 3 granules free before a 1-granule hole, 4 free after it: a
        // 6-granule block takes the hole and 2 granules after it.
        let holes = [hole(10 * G, G, 3 * G, 4 * G), hole(100 * G, 500 * G, 0, 0)];
        // One granule is active inside the free run before the hole (part
        // of the block), one elsewhere.
        let donors = [donor(1, 8 * G, 0), donor(2, 50 * G, 1)];
        let p = plan(6 * G, G, &holes, &donors, None).unwrap();
        assert_eq!(p.block, 7 * G);
        assert_eq!(p.prefix, Some((7 * G, 3 * G)));
        assert_eq!(p.suffix, Some((11 * G, 2 * G)));
        assert_eq!(p.reuse, vec![(2, 10 * G)]);
        assert!(p.new_granules.is_empty());
    }

    #[test]
    fn limits_and_impossible_requests() {
        let holes = [hole(0, 4 * G, 0, 0)];
        assert!(plan(5 * G, G, &holes, &[], None).is_none(), "no hole is large enough");
        assert!(plan(3 * G, G, &holes, &[], Some(2)).is_none(), "maxSize");
        let donors = [donor(1, 100 * G, 0), donor(2, 200 * G, 0)];
        let p = plan(3 * G, G, &holes, &donors, Some(1)).unwrap();
        assert_eq!(p.new_granules.len(), 1);
        assert!(plan(G, G, &[hole(10 * G, G, 2 * G, 0)], &[], None).is_none(), "the free run alone fits");
    }

    #[test]
    fn runs_need_the_fewest_repairs_and_never_use_a_granule_twice() {
        use Cover::*;
        // A free granule, two switchable ones, a live one, then a longer run.
        let pieces = vec![
            (0, G, Free),
            (G, G, Switchable(7, 40 * G)),
            (2 * G, G, Switchable(8, 41 * G)),
            (3 * G, G, Blocked),
            (4 * G, 2 * G, Free),
            (6 * G, G, Switchable(9, 42 * G)),
            (7 * G, G, Switchable(10, 43 * G)),
        ];
        let run = find_run(3 * G, G, pieces.clone()).unwrap();
        assert_eq!(run.start, 0);
        assert_eq!(run.switches, vec![(7, 40 * G, G), (8, 41 * G, 2 * G)]);
        assert!(run.repairs.is_empty());
        let run = find_run(3 * G + 4096, G, pieces).unwrap();
        assert_eq!(run.start, 4 * G);
        assert_eq!(run.switches, vec![(9, 42 * G, 6 * G), (10, 43 * G, 7 * G)]);
        // Fewer repairs beat a shorter run.
        let pieces = vec![(0, G, Repairable), (G, G, Free), (2 * G, G, Blocked), (3 * G, 4 * G, Free)];
        let run = find_run(2 * G, G, pieces).unwrap();
        assert_eq!((run.start, run.repairs.len()), (3 * G, 0));
        // The same granule twice in a run, or its active alias inside the
        // run: the second use is repaired.
        let twice = vec![(0, G, Switchable(1, 50 * G)), (G, G, Switchable(1, 50 * G))];
        assert_eq!(find_run(2 * G, G, twice).unwrap().repairs, vec![G]);
        let inside = vec![(0, G, Switchable(1, G)), (G, G, Free)];
        let run = find_run(2 * G, G, inside).unwrap();
        assert_eq!((run.switches.len(), run.repairs), (0, vec![0]));
        let gap = vec![(0, G, Free), (2 * G, G, Free)];
        assert!(find_run(2 * G, G, gap).is_none(), "runs are contiguous");
    }
}
