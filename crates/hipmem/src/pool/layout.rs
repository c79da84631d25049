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
}

/// A heap block: address, size, kind.
type Block = (u64, u64, RunKind);

/// The heap's blocks (address, size, kind) in address order and the blocks
/// the streams' caches hold (address, size): the caches first, then the
/// heap, one lock at a time.
fn parts(core: &PoolCore) -> (Vec<Block>, Vec<(u64, u64)>) {
    let mut cached = Vec::new();
    for slot in core.all_slots() {
        cached.extend(slot.lock().cache.iter().map(|b| (b.addr, b.size)));
    }
    (lock(&core.heap).blocks_in_order().collect(), cached)
}
