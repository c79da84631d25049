//! A read-only picture of a hipmem pool's address range: which runs of it are
//! live, cached, free, pending or unbacked (for `hipmem replay`'s map and
//! for debugging fragmentation).
#![forbid(unsafe_code)]

use super::core::{PoolCore, lock};
use super::mem_pool::{MemPool, PoolRef};
use crate::error::{Error, Result};

/// What a run of a pool's addresses holds.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKind {
    /// Live allocations.
    Live,
    /// Freed blocks held in a stream's cache (reusable by that stream at once).
    Cached,
    /// Free for every stream.
    Free,
    /// Freed on a stream, not yet known complete (reusable under the reuse rules).
    PendingFree,
    /// Reserved addresses with no physical memory behind them (virtual-memory pools).
    Unbacked,
}

impl RunKind {
    /// A short name (`live`, `cached`, `free`, `pending_free`, `unbacked`).
    pub fn name(self) -> &'static str {
        match self {
            RunKind::Live => "live",
            RunKind::Cached => "cached",
            RunKind::Free => "free",
            RunKind::PendingFree => "pending_free",
            RunKind::Unbacked => "unbacked",
        }
    }

    /// Whether the run holds physical memory.
    pub fn is_backed(self) -> bool {
        self != RunKind::Unbacked
    }
}

/// A run of addresses of one kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct AddressRun {
    /// What it holds.
    pub kind: RunKind,
    /// First address.
    pub start: u64,
    /// Bytes.
    pub size: u64,
}

impl AddressRun {
    /// One past the last address.
    pub fn end(&self) -> u64 {
        self.start + self.size
    }
}

impl MemPool {
    /// The pool's address runs in address order, adjacent runs of one kind
    /// merged: every segment (or the whole reservation of a pool on virtual
    /// memory) from its start to its end. Segments are separate ranges: a run
    /// that does not start where the previous one ended begins a new one.
    ///
    /// A snapshot for pictures and debugging: taken under the pool's locks
    /// one at a time, so with other threads allocating it may mix moments.
    /// NotSupported for driver and imported pools (their layout is the
    /// driver's or the exporter's).
    pub fn address_runs(&self) -> Result<Vec<AddressRun>> {
        let PoolRef::Hipmem(core) = &self.pool else {
            return Err(Error::NotSupported("only hipmem's own pools can show their address runs".into()));
        };
        let (blocks, mut cached) = parts(core);
        cached.sort_unstable();
        let mut runs: Vec<AddressRun> = Vec::with_capacity(blocks.len());
        let mut next_cached = cached.iter().peekable();
        for (start, size, kind) in blocks {
            let mut kind = kind;
            if kind == RunKind::Live {
                while next_cached.peek().is_some_and(|&&(a, _)| a < start) {
                    next_cached.next();
                }
                if next_cached.peek().is_some_and(|&&(a, s)| a == start && s == size) {
                    kind = RunKind::Cached;
                }
            }
            match runs.last_mut() {
                Some(last) if last.kind == kind && last.end() == start => last.size += size,
                _ => runs.push(AddressRun { kind, start, size }),
            }
        }
        Ok(runs)
    }

    /// The physical pieces behind the pool's memory, in address order: each
    /// segment of a pool on segments; on virtual memory each group of units
    /// mapped in one call and each unit mapped alone, at the address where
    /// the pool uses it. A piece goes back to the backend, or moves under
    /// another request, only whole: free memory that shares a piece with a
    /// live block stays held ([`FreeSplit`]).
    ///
    /// A snapshot, as [`MemPool::address_runs`] is. NotSupported for driver
    /// and imported pools.
    pub fn physical_pieces(&self) -> Result<Vec<PhysicalPiece>> {
        let PoolRef::Hipmem(core) = &self.pool else {
            return Err(Error::NotSupported("only hipmem's own pools can show their physical pieces".into()));
        };
        Ok(core.physical_pieces().into_iter().map(|(start, size)| PhysicalPiece { start, size }).collect())
    }
}

/// One physical allocation of a pool, where the pool uses it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PhysicalPiece {
    /// First address.
    pub start: u64,
    /// Bytes.
    pub size: u64,
}

/// Where a pool's free memory lies, from its address runs and physical
/// pieces ([`FreeSplit::of`]).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct FreeSplit {
    /// Backed bytes that hold no live block (free, pending or cached).
    pub free: u64,
    /// Of those, the bytes of pieces that are wholly free: the pool can give
    /// them back or move them under a request.
    pub in_whole_pieces: u64,
    /// The rest: free bytes in pieces that also hold live blocks, held until
    /// every block in the piece is freed.
    pub beside_live: u64,
}

impl FreeSplit {
    /// Splits the free memory of `runs` (address order) by `pieces`.
    pub fn of(runs: &[AddressRun], pieces: &[PhysicalPiece]) -> FreeSplit {
        // Stretches of backed memory that hold no live block, merged.
        let mut stretches: Vec<(u64, u64)> = Vec::new();
        let mut free = 0;
        for r in runs.iter().filter(|r| r.kind.is_backed() && r.kind != RunKind::Live) {
            free += r.size;
            match stretches.last_mut() {
                Some(last) if last.1 == r.start => last.1 = r.end(),
                _ => stretches.push((r.start, r.end())),
            }
        }
        let whole = |p: &PhysicalPiece| {
            let i = stretches.partition_point(|&(start, _)| start <= p.start);
            i > 0 && stretches[i - 1].1 >= p.start + p.size
        };
        let in_whole_pieces: u64 = pieces.iter().filter(|p| whole(p)).map(|p| p.size).sum::<u64>().min(free);
        FreeSplit { free, in_whole_pieces, beside_live: free - in_whole_pieces }
    }
}

/// A heap block: address, size, kind.
type Block = (u64, u64, RunKind);

/// The heap's blocks (address, size, kind) in address order and the blocks
/// the streams' caches hold (address, size): the caches first, then the
/// heap, one lock at a time.
fn parts(core: &PoolCore) -> (Vec<Block>, Vec<(u64, u64)>) {
    let mut cached = Vec::new();
    for slot in core.all_slots() {
        let st = slot.lock();
        cached.extend(st.cache.iter().chain(&st.tiny).map(|b| (b.addr, b.size)));
    }
    (lock(&core.heap).blocks_in_order().collect(), cached)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(kind: RunKind, start: u64, size: u64) -> AddressRun {
        AddressRun { kind, start, size }
    }

    #[test]
    fn free_memory_is_split_by_the_pieces_it_lies_in() {
        let pieces: Vec<PhysicalPiece> =
            [0, 100, 200, 300].iter().map(|&start| PhysicalPiece { start, size: 100 }).collect();
        let runs = [
            run(RunKind::Live, 0, 10),
            run(RunKind::Free, 10, 90),
            // A wholly free piece, in runs of two kinds.
            run(RunKind::PendingFree, 100, 50),
            run(RunKind::Cached, 150, 50),
            run(RunKind::Live, 200, 50),
            run(RunKind::Free, 250, 50),
            // Another wholly free piece, then addresses with nothing behind them.
            run(RunKind::Free, 300, 100),
            run(RunKind::Unbacked, 400, 1000),
        ];
        let split = FreeSplit::of(&runs, &pieces);
        assert_eq!(split, FreeSplit { free: 340, in_whole_pieces: 200, beside_live: 140 });
        // Nothing live: everything can go.
        let all_free = [run(RunKind::Free, 0, 400)];
        assert_eq!(
            FreeSplit::of(&all_free, &pieces),
            FreeSplit { free: 400, in_whole_pieces: 400, beside_live: 0 }
        );
        assert_eq!(FreeSplit::of(&[], &pieces), FreeSplit::default());
    }
}
