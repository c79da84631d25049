//! The bookkeeping of a pool's reserved address range (and of the ranges
//! reserved after it where no part had room, [`ExtraRange`]): every mapping of
//! every physical granule (a granule may be mapped at several addresses,
//! one of them active), the groups that back several units in one physical
//! allocation, the groups' units lent elsewhere, and the budget for moving
//! memory. No backend calls here: `grow.rs` and `give_back.rs` make them.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};

use super::*;
use crate::pool::lend::{self, Loan, Source};
use crate::pool::placement::{BlockKind, Heap, Owner};
use crate::pool::remap::{Cover, Donor};

/// Most mappings per physical granule before the least recently used
/// shadowed ones are unmapped (the high mark; unmapping goes down to the low).
pub(super) const ALIASES_HIGH: usize = 4;
pub(super) const ALIASES_LOW: usize = 3;

/// One mapping of a physical granule.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Alias {
    /// The granule (the backend's handle).
    pub(in crate::pool) pid: u64,
    /// When it was last made active (the range's clock).
    pub(in crate::pool) used: u64,
}

/// A planned switch: (granule, its active alias, the alias to make active).
pub(super) type Switch = (u64, u64, u64);

/// The reservation of a pool on virtual memory and its physical granules.
pub(crate) struct VirtualRange {
    pub(in crate::pool) base: u64,
    pub(in crate::pool) size: u64,
    pub(in crate::pool) granularity: u64,
    /// Every mapping: address of the granule → which physical granule.
    pub(in crate::pool) aliases: BTreeMap<u64, Alias>,
    /// Physical granules by id: the active alias, every alias.
    pub(in crate::pool) phys: HashMap<u64, Phys>,
    /// Physical allocations that back several consecutive units mapped in
    /// one call, by first address (see [`PoolCore::set_growth_mapping`]).
    pub(in crate::pool) groups: BTreeMap<u64, Group>,
    /// Groups' free units mapped elsewhere, by address (`lend.rs`).
    pub(in crate::pool) loans: BTreeMap<u64, Loan>,
    /// Loans (by address) of units whose frees were still pending on the
    /// growth's stream when it took them: how those frees were owned. Their
    /// home may still be used by that stream's work queued before the
    /// frees, so it comes back pending as they were, and their group goes
    /// back only once they are known complete.
    pub(in crate::pool) busy: BTreeMap<u64, Owner>,
    /// The heap's count of blocks made global free
    /// ([`Heap::global_frees_indexed`]) and the number of loans when
    /// [`VirtualRange::send_free_loans_home`] last looked and left no
    /// wholly free loan away from home: while both are the same, no loan
    /// can have gone wholly free since, and the look is skipped.
    loans_looked: Option<(u64, usize)>,
    /// The last id given to a unit of a group.
    pub(super) next_unit: u64,
    pub(super) clock: u64,
    /// Address ranges reserved after the first, each for one size class,
    /// where no part had a hole for a request (`grow.rs`): freed with the
    /// first, when the pool is destroyed.
    pub(in crate::pool) extra: Vec<ExtraRange>,
    /// Seconds of driver time the pool may still spend moving memory (may
    /// go negative: the last move is charged in full).
    pub(in crate::pool) tokens: f64,
    /// When `tokens` was last refilled.
    pub(super) refilled: std::time::Instant,
}

/// An address range a pool reserved after its first (see
/// [`VirtualRange::extra`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct ExtraRange {
    /// First address.
    pub(in crate::pool) base: u64,
    /// Its length.
    pub(in crate::pool) size: u64,
    /// The size class whose blocks it holds.
    pub(in crate::pool) class: usize,
}

/// A physical granule.
#[derive(Clone, Debug)]
pub(crate) struct Phys {
    /// Where the heap may use it.
    pub(in crate::pool) active: u64,
    /// Every address it is mapped at (the active one included).
    pub(in crate::pool) aliases: Vec<u64>,
    /// The first address of the group mapping it belongs to, if any: such a
    /// unit never moves and goes back to the backend with its whole group.
    pub(in crate::pool) group: Option<u64>,
}

/// One physical allocation behind several consecutive units, mapped (and
/// given access) in one call each: on a GPU a mapping of 64 MiB or more
/// costs about 1 µs per MiB, one of up to 32 MiB about 25 (`hipmem bench
/// vmm`, `chunk_ops`).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Group {
    /// The backend's handle.
    pub(in crate::pool) handle: u64,
    /// Its size (a whole number of units).
    pub(in crate::pool) len: u64,
}

/// The ids of grouped units (a unit alone is known by its backend handle).
pub(super) const GROUPED_UNIT: u64 = 1 << 63;

impl VirtualRange {
    pub(super) fn new(base: u64, size: u64, granularity: u64) -> VirtualRange {
        VirtualRange {
            base,
            size,
            granularity,
            aliases: BTreeMap::new(),
            phys: HashMap::new(),
            groups: BTreeMap::new(),
            loans: BTreeMap::new(),
            busy: BTreeMap::new(),
            loans_looked: None,
            next_unit: 0,
            clock: 0,
            extra: Vec::new(),
            tokens: 0.0,
            refilled: std::time::Instant::now(),
        }
    }

    /// Each size class's part of the first range.
    pub(in crate::pool) fn part(&self) -> u64 {
        self.size / crate::pool::placement::CLASSES as u64
    }

    /// Every address range the pool holds, (start, length): the first, then
    /// the extra ones.
    pub(in crate::pool) fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        std::iter::once((self.base, self.size)).chain(self.extra.iter().map(|e| (e.base, e.size)))
    }

    /// The size class whose addresses hold `addr`: its part of the first
    /// range, or the extra range holding it (None outside the pool's
    /// addresses).
    pub(in crate::pool) fn class_of(&self, addr: u64) -> Option<usize> {
        if addr >= self.base && addr - self.base < self.size {
            return Some(((addr - self.base) / self.part()) as usize);
        }
        self.extra.iter().find(|e| addr >= e.base && addr - e.base < e.size).map(|e| e.class)
    }

    /// Adds the moving time earned since the last refill.
    pub(super) fn refill(&mut self, now: std::time::Instant, budget: MoveBudget) {
        let earned = now.saturating_duration_since(self.refilled).as_secs_f64() * budget.share;
        self.tokens = (self.tokens + earned).min(budget.burst_s);
        self.refilled = now;
    }

    /// Refills the budget to `now`; whether it is spent (no moving time left).
    pub(super) fn budget_spent(&mut self, now: std::time::Instant, budget: MoveBudget) -> bool {
        self.refill(now, budget);
        self.tokens <= 0.0
    }

    /// Charges the driver time a growth took.
    pub(super) fn charge(&mut self, spent: std::time::Duration) {
        self.tokens -= spent.as_secs_f64();
    }

    /// Every mapping as it was made: (address, length), each unit alone
    /// (every alias) and each group whole.
    pub(in crate::pool) fn mappings(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let alone = self
            .aliases
            .iter()
            .filter(|(_, alias)| self.phys.get(&alias.pid).is_none_or(|p| p.group.is_none()))
            .map(|(&addr, _)| (addr, self.granularity));
        alone
            .chain(self.groups.iter().map(|(&base, g)| (base, g.len)))
            .chain(self.loans.iter().map(|(&at, l)| l.alias(at)))
    }

    /// Every mapping of the group at `base` (`len` bytes): its own, then
    /// its loans' aliases, as (the loan's key or None, address, length).
    pub(super) fn mappings_of(&self, base: u64, len: u64) -> Vec<(Option<u64>, u64, u64)> {
        let loans = self.loans.iter().filter(|(_, l)| l.group == base).map(|(&at, l)| {
            let (alias, whole) = l.alias(at);
            (Some(at), alias, whole)
        });
        std::iter::once((None, base, len)).chain(loans).collect()
    }

    /// Runs of the groups' units that are free at home (`lend.rs`): global
    /// free, and with `stream` also those pending on that stream (memory
    /// whose frees it made and has not finished: usable by its own later
    /// work, in stream order).
    pub(super) fn lendable(&self, heap: &Heap, stream: Option<u64>) -> Vec<Source> {
        let g = self.granularity;
        let mut runs = Vec::new();
        for (&base, gr) in &self.groups {
            for (addr, len) in heap.free_blocks_between(base, base + gr.len, stream) {
                if let Some((start, len)) = lend::whole_units(addr, addr + len, base, gr.len, g) {
                    let loan = Loan { group: base, offset: start - base, len, whole: gr.len };
                    runs.push(Source { at: start, loan });
                }
            }
        }
        runs
    }

    /// The loans whose every byte is global free: (address, loan).
    pub(super) fn free_loans(&self, heap: &Heap) -> Vec<(u64, Loan)> {
        self.loans
            .iter()
            .filter(|(at, l)| heap.is_global_free(**at, l.len))
            .map(|(&at, &l)| (at, l))
            .collect()
    }

    /// Sends every wholly free loan home with no driver call: its units are
    /// used at their addresses in their group again (shadowed there while
    /// lent) and the loan's addresses are shadowed instead (its alias stays
    /// mapped until [`PoolCore::unmap_idle_loans`]). A loan taken from
    /// frees still pending ([`VirtualRange::busy`]) comes home pending as
    /// they were: free for their stream at once, for the others once they
    /// are known complete (`completed`: each such stream's clock, as
    /// [`Heap::promote`] takes it, from [`VirtualRange::busy_streams`]).
    pub(super) fn send_free_loans_home(&mut self, heap: &mut Heap, completed: &[(u64, u64)]) {
        // (The slow path calls this on every allocation: each loan's look
        // is a search of the heap. Skipped where nothing went global free
        // since a look that left no free loan away.)
        let looked = (heap.global_frees_indexed(), self.loans.len());
        if self.loans_looked != Some(looked) {
            let mut stuck = false;
            for (at, l) in self.free_loans(heap) {
                let home = l.group + l.offset;
                if heap.is_shadowed_part(home, l.len) && heap.shadow(at, l.len) {
                    let owner = self.busy.remove(&at).unwrap_or(Owner::Global);
                    heap.unshadow_part_as(home, l.len, owner);
                    heap.forget_group(at);
                } else {
                    stuck = true;
                }
            }
            // (As the heap was before the loans went home: what their going
            // home made global free is looked at again next time, as it was
            // without the skip.)
            self.loans_looked = (!stuck).then_some(looked);
        }
        for &(stream, below) in completed {
            heap.promote(stream, below);
        }
    }

    /// The streams whose pending frees loans were taken from ([`VirtualRange::busy`]).
    pub(super) fn busy_streams(&self) -> Vec<u64> {
        let mut streams: Vec<u64> = self
            .busy
            .values()
            .filter_map(|o| match *o {
                Owner::Stream { stream, .. } => Some(stream),
                Owner::Global => None,
            })
            .collect();
        streams.sort_unstable();
        streams.dedup();
        streams
    }

    /// Whether every unit of the group at `base` (`len` bytes) is global
    /// free where it is used (each of its mappings holds only global free
    /// and shadowed blocks): when its memory last changed, or None.
    pub(super) fn group_idle(&self, heap: &Heap, base: u64, len: u64) -> Option<u64> {
        let mut freed = 0;
        for (_, at, len) in self.mappings_of(base, len) {
            for (addr, _, kind) in heap.blocks_between(at, at + len) {
                match kind {
                    BlockKind::Free => freed = freed.max(heap.global_free_run(addr.max(at), 1)?.1),
                    BlockKind::Shadowed => {}
                    BlockKind::Other => return None,
                }
            }
        }
        Some(freed)
    }

    /// The physical bytes the range holds.
    pub(in crate::pool) fn physical_bytes(&self) -> u64 {
        self.phys.len() as u64 * self.granularity
    }

    pub(super) fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Makes `to` (a shadowed alias of `pid`) the active one: the heap
    /// shadows the old active alias (all free) and hands `to` out instead.
    pub(super) fn switch(&mut self, heap: &mut Heap, pid: u64, to: u64) -> bool {
        let g = self.granularity;
        let Some(p) = self.phys.get_mut(&pid) else { return false };
        let from = p.active;
        if from == to || !heap.is_shadowed(to, g) || !heap.shadow(from, g) {
            return false;
        }
        if !heap.unshadow(to, g) {
            heap.unshadow(from, g);
            return false;
        }
        p.active = to;
        tracing::trace!(target: "hipmem::pool", "switched granule {pid:#x} from={from:#x} to={to:#x}");
        let now = self.tick();
        if let Some(a) = self.aliases.get_mut(&to) {
            a.used = now;
        }
        true
    }

    /// Granules not in use (their active alias all global free) that may
    /// move (not part of a group).
    pub(super) fn donors(&self, heap: &Heap) -> Vec<Donor> {
        let g = self.granularity;
        self.phys
            .iter()
            .filter(|(_, p)| p.group.is_none())
            .filter_map(|(&pid, p)| {
                let (_, freed) = heap.global_free_run(p.active, g)?;
                Some(Donor { pid, active: p.active, freed })
            })
            .collect()
    }

    /// The pieces of size class `class` as a switch sees them.
    pub(super) fn switch_pieces(&self, heap: &Heap, class: usize) -> Vec<(u64, u64, Cover)> {
        let g = self.granularity;
        // Each segment's blocks after a piece of no length that no run
        // crosses: two segments' blocks never merge, even where their
        // addresses meet (a pool's parts, and its extra ranges).
        let segments: Vec<(u64, u64)> =
            heap.segments().filter(|s| s.class == class).map(|s| (s.base, s.base + s.size)).collect();
        segments
            .into_iter()
            .flat_map(|(from, to)| {
                std::iter::once((from, 0, BlockKind::Other)).chain(heap.blocks_between(from, to))
            })
            .map(|(addr, len, kind)| {
                let cover = match kind {
                    BlockKind::Free => Cover::Free,
                    BlockKind::Shadowed => {
                        match self.aliases.get(&addr).and_then(|a| Some((a.pid, self.phys.get(&a.pid)?))) {
                            // A group's unit lent elsewhere (`lend.rs`): its
                            // home is part of the group's one mapping.
                            Some((_, p)) if p.group.is_some() => Cover::Blocked,
                            Some((pid, p)) if heap.is_global_free(p.active, g) => {
                                Cover::Switchable(pid, p.active)
                            }
                            Some(_) => Cover::Repairable,
                            // An alias of a group not used there (`lend.rs`).
                            None => Cover::Blocked,
                        }
                    }
                    BlockKind::Other => Cover::Blocked,
                };
                (addr, len, cover)
            })
            .collect()
    }

    /// How `[addr, addr + want)` (where a block of this size went before)
    /// can become one free run again: the switches it needs (pid, from, to),
    /// and the shadowed aliases whose granule is in use elsewhere, to be
    /// pointed at other granules (repairs). None if some address there is
    /// live, pending or unbacked.
    pub(super) fn revisit(&self, heap: &Heap, addr: u64, want: u64) -> Option<(Vec<Switch>, Vec<u64>)> {
        let g = self.granularity;
        let end = addr.checked_add(want)?;
        // (One segment's blocks only: two segments' never merge.)
        let seg = heap.segment_of(addr)?;
        if end > seg.base + seg.size {
            return None;
        }
        let mut switches: Vec<Switch> = Vec::new();
        let mut repairs: Vec<u64> = Vec::new();
        let mut at = addr;
        for (block, len, kind) in heap.blocks_between(addr, end) {
            if block > at {
                return None;
            }
            match kind {
                BlockKind::Free => {}
                BlockKind::Shadowed => {
                    let pid = self.aliases.get(&block)?.pid;
                    let p = self.phys.get(&pid)?;
                    if p.group.is_some() {
                        // A lent unit's home (`lend.rs`): not unmapped alone.
                        return None;
                    }
                    let active = p.active;
                    let clash = switches.iter().any(|s| s.0 == pid) || (active + g > addr && active < end);
                    if clash || !heap.is_global_free(active, g) {
                        repairs.push(block);
                    } else {
                        switches.push((pid, active, block));
                    }
                }
                BlockKind::Other => return None,
            }
            at = block + len;
        }
        (at >= end).then_some((switches, repairs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 2 << 20;

    /// A heap and range with a group of 8 units at `home` whose units 2-3
    /// are lent to `at`, where a block of 2 units lives: (heap, range).
    fn one_loan(home: u64, at: u64) -> (Heap, VirtualRange) {
        let mut heap = Heap::new();
        heap.add_reservation(home, 1024 * G);
        assert!(heap.back(home, 8 * G));
        heap.note_group(home, 8 * G);
        // Lent: shadowed at home, mapped (in use) at the loan's address.
        assert!(heap.shadow(home + 2 * G, 2 * G));
        assert!(heap.back(at, 2 * G));
        heap.note_group(at, 2 * G);
        assert!(heap.take_range(at, 2 * G).is_some());
        let mut vr = VirtualRange::new(home, 1024 * G, G);
        vr.loans.insert(at, Loan { group: home, offset: 2 * G, len: 2 * G, whole: 8 * G });
        (heap, vr)
    }

    /// The busy streams come once each, in increasing order, global
    /// owners left out.
    #[test]
    fn busy_streams_come_once_each_in_order() {
        let mut vr = VirtualRange::new(1 << 40, 1024 * G, G);
        assert!(vr.busy_streams().is_empty());
        for (at, owner) in [
            (5, Owner::Stream { stream: 9, tag: 1 }),
            (1, Owner::Global),
            (3, Owner::Stream { stream: 2, tag: 7 }),
            (8, Owner::Stream { stream: 9, tag: 3 }),
            (2, Owner::Stream { stream: 4, tag: 0 }),
        ] {
            vr.busy.insert(at * G, owner);
        }
        assert_eq!(vr.busy_streams(), vec![2, 4, 9]);
    }

    #[test]
    fn a_loan_goes_home_once_it_is_free_and_is_not_looked_for_while_nothing_turns_free() {
        let (home, at) = (1u64 << 40, (1u64 << 40) + 512 * G);
        let (mut heap, mut vr) = one_loan(home, at);
        // In use: it stays, and the look is remembered.
        vr.send_free_loans_home(&mut heap, &[]);
        assert!(vr.loans_looked.is_some());
        assert!(heap.is_shadowed_part(home + 2 * G, 2 * G), "still lent");
        // Nothing turned global free (a block taken elsewhere): no new look
        // is needed, and none changes anything.
        assert!(heap.take_range(home, G).is_some());
        let looked = vr.loans_looked;
        assert_eq!(looked.map(|l| l.0), Some(heap.global_frees_indexed()));
        vr.send_free_loans_home(&mut heap, &[]);
        assert_eq!(vr.loans_looked, looked);
        // The loan's block is freed: the next look sends it home.
        assert!(heap.release_block(at, Owner::Global));
        assert_ne!(vr.loans_looked.map(|l| l.0), Some(heap.global_frees_indexed()));
        vr.send_free_loans_home(&mut heap, &[]);
        assert!(heap.is_shadowed_part(at, 2 * G), "its addresses are shadowed");
        assert!(heap.is_global_free(home + 2 * G, 2 * G), "its units are free at home again");
        heap.check_invariants().unwrap();
    }

    #[test]
    fn a_free_loan_that_cannot_go_home_is_looked_at_again() {
        let (home, at) = (1u64 << 40, (1u64 << 40) + 512 * G);
        let (mut heap, mut vr) = one_loan(home, at);
        // Its units at home are not shadowed (as if taken back otherwise):
        // free, but it cannot go home, so the next look is not skipped.
        assert!(heap.unshadow_part_as(home + 2 * G, 2 * G, Owner::Global));
        assert!(heap.release_block(at, Owner::Global));
        vr.send_free_loans_home(&mut heap, &[]);
        assert_eq!(vr.loans_looked, None);
        assert!(heap.is_global_free(at, 2 * G), "still where it was lent");
    }
}
