//! Placement: where in the pool's segments a block of a given size goes.
//!
//! Every block of every segment is in one address-ordered map. Free blocks
//! are also indexed by `(size, address)` in size-ordered trees, so a request
//! finds the smallest free block that fits (best fit, lowest address on ties)
//! in O(log n); the chosen block is split and the remainder stays free; a
//! freed block coalesces with free neighbours of its segment.
//!
//! A free block has an *owner*:
//! - [`Owner::Global`]: free for every stream (never used, or its free is known
//!   to have completed);
//! - [`Owner::Stream`]: freed on a stream whose free may not have completed on
//!   the device yet. That stream may reuse it at once; others only under the
//!   reuse rules (see `reuse.rs`). The `tag` is the stream epoch of the free.
//!
//! Coalescing keeps owners exact: global with global, and a stream's pending
//! block with the same stream's pending blocks (the merged tag is the later
//! one). A pending block never absorbs global space (that would hide memory
//! no stream used behind one stream's pending free), and blocks pending on
//! different streams never merge; once a stream's frees are known complete
//! its blocks turn global and merge with their global neighbours.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Alignment and size granule of every block.
pub const BLOCK_ALIGN: u64 = 256;

/// Who may reuse a free block.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Any stream.
    Global,
    /// Freed on `stream` at epoch `tag`; not yet known complete.
    Stream {
        /// The stream's id.
        stream: u64,
        /// The stream epoch of the (latest) free in the block.
        tag: u64,
    },
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum State {
    Allocated,
    Free(Owner),
    /// Reserved addresses with no physical memory behind them (a pool on
    /// virtual memory): never handed out, never merged with free space.
    Unbacked,
}

#[derive(Copy, Clone, Debug)]
struct Block {
    size: u64,
    segment: u64,
    state: State,
}

/// A range obtained from the backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First byte.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
}

/// The pool's address space: segments, blocks and the free indexes.
#[derive(Debug, Default)]
pub struct Heap {
    blocks: BTreeMap<u64, Block>,
    segments: BTreeMap<u64, Segment>,
    global_free: BTreeSet<(u64, u64)>,
    pending: HashMap<u64, BTreeSet<(u64, u64)>>,
    pending_bytes: HashMap<u64, u64>,
    reserved: u64,
    allocated: u64,
    global_free_bytes: u64,
}

/// Rounds a request up to the block granule (at least one granule).
pub fn block_size(request: u64) -> Option<u64> {
    request.max(1).checked_next_multiple_of(BLOCK_ALIGN)
}

impl Heap {
    /// An empty heap.
    pub fn new() -> Heap {
        Heap::default()
    }

    /// Bytes in all segments.
    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    /// Bytes in blocks marked allocated (including blocks the streams' caches hold).
    pub fn allocated(&self) -> u64 {
        self.allocated
    }

    /// Bytes free for every stream.
    pub fn global_free_bytes(&self) -> u64 {
        self.global_free_bytes
    }

    /// Number of segments.
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// The segments.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.values()
    }

    /// Bytes pending on `stream`.
    pub fn pending_bytes(&self, stream: u64) -> u64 {
        self.pending_bytes.get(&stream).copied().unwrap_or(0)
    }

    /// Streams that have pending free blocks.
    pub fn pending_streams(&self) -> Vec<u64> {
        self.pending.iter().filter(|(_, set)| !set.is_empty()).map(|(&s, _)| s).collect()
    }

    /// Whether `stream` has pending free blocks.
    pub fn has_pending(&self, stream: u64) -> bool {
        self.pending.get(&stream).is_some_and(|set| !set.is_empty())
    }

    /// Adds a segment as one global free block. `base` and `size` must be
    /// multiples of [`BLOCK_ALIGN`] and the range must not overlap another.
    pub fn add_segment(&mut self, base: u64, size: u64) {
        debug_assert!(base % BLOCK_ALIGN == 0 && size % BLOCK_ALIGN == 0 && size > 0);
        self.segments.insert(base, Segment { base, size });
        self.reserved += size;
        self.blocks.insert(base, Block { size, segment: base, state: State::Allocated });
        self.allocated += size;
        self.release_block(base, Owner::Global);
    }

    /// Adds a reserved address range with no memory behind it yet (a pool on
    /// virtual memory): [`Heap::back`] maps parts of it in, [`Heap::unback`]
    /// gives them back. Blocks coalesce across the chunks backed inside it.
    pub fn add_reservation(&mut self, base: u64, size: u64) {
        debug_assert!(base % BLOCK_ALIGN == 0 && size % BLOCK_ALIGN == 0 && size > 0);
        self.segments.insert(base, Segment { base, size });
        self.blocks.insert(base, Block { size, segment: base, state: State::Unbacked });
    }

    /// The unbacked ranges: (start, size), lowest first.
    pub fn unbacked_ranges(&self) -> Vec<(u64, u64)> {
        self.blocks.iter().filter(|(_, b)| b.state == State::Unbacked).map(|(&a, b)| (a, b.size)).collect()
    }

    /// The global free block that ends exactly at `addr`, if any: its size.
    pub fn global_free_ending_at(&self, addr: u64) -> u64 {
        match self.blocks.range(..addr).next_back() {
            Some((&a, b)) if a + b.size == addr && b.state == State::Free(Owner::Global) => b.size,
            _ => 0,
        }
    }

    /// Turns `[addr, addr + size)`, inside one unbacked block, into global
    /// free memory (it was just mapped), coalescing with free neighbours.
    /// Returns false if the range is not unbacked.
    pub fn back(&mut self, addr: u64, size: u64) -> bool {
        let Some((&start, b)) = self.blocks.range(..=addr).next_back() else { return false };
        let b = *b;
        if b.state != State::Unbacked || addr + size > start + b.size || size == 0 {
            return false;
        }
        self.blocks.remove(&start);
        if addr > start {
            self.blocks
                .insert(start, Block { size: addr - start, segment: b.segment, state: State::Unbacked });
        }
        let end = addr + size;
        if end < start + b.size {
            self.blocks.insert(
                end,
                Block { size: start + b.size - end, segment: b.segment, state: State::Unbacked },
            );
        }
        self.blocks.insert(addr, Block { size, segment: b.segment, state: State::Allocated });
        self.allocated += size;
        self.reserved += size;
        self.release_block(addr, Owner::Global)
    }

    /// Whether `[addr, addr + size)` lies inside one global free block (so its
    /// memory may be unmapped).
    pub fn is_global_free(&self, addr: u64, size: u64) -> bool {
        match self.blocks.range(..=addr).next_back() {
            Some((&a, b)) => b.state == State::Free(Owner::Global) && addr + size <= a + b.size,
            None => false,
        }
    }

    /// Turns `[addr, addr + size)`, inside one global free block, back into
    /// unbacked addresses (its memory is about to be unmapped). Returns false
    /// if the range is not global free memory.
    pub fn unback(&mut self, addr: u64, size: u64) -> bool {
        if !self.is_global_free(addr, size) || size == 0 {
            return false;
        }
        let (&start, b) = self.blocks.range(..=addr).next_back().expect("checked above");
        let b = *b;
        self.unindex(start, b.size, Owner::Global);
        self.blocks.remove(&start);
        if addr > start {
            self.blocks.insert(start, Block { size: addr - start, ..b });
            self.index(start, addr - start, Owner::Global);
        }
        let end = addr + size;
        if end < start + b.size {
            self.blocks.insert(end, Block { size: start + b.size - end, ..b });
            self.index(end, start + b.size - end, Owner::Global);
        }
        self.reserved -= size;
        // Merge with unbacked neighbours.
        let (mut s0, mut sz) = (addr, size);
        if let Some((&pa, pb)) = self.blocks.range(..addr).next_back() {
            if pb.state == State::Unbacked && pa + pb.size == addr && pb.segment == b.segment {
                s0 = pa;
                sz += pb.size;
            }
        }
        if let Some(nb) = self.blocks.get(&end).copied() {
            if nb.state == State::Unbacked && nb.segment == b.segment {
                self.blocks.remove(&end);
                sz += nb.size;
            }
        }
        self.blocks.insert(s0, Block { size: sz, segment: b.segment, state: State::Unbacked });
        true
    }

    /// Removes a reservation whose addresses are all unbacked; false if any
    /// memory is still backed.
    pub fn remove_reservation(&mut self, base: u64) -> bool {
        let Some(seg) = self.segments.get(&base).copied() else { return false };
        match self.blocks.get(&base) {
            Some(b) if b.state == State::Unbacked && b.size == seg.size => {
                self.blocks.remove(&base);
                self.segments.remove(&base);
                true
            }
            _ => false,
        }
    }

    /// The segment containing `addr`.
    pub fn segment_of(&self, addr: u64) -> Option<Segment> {
        self.segments.range(..=addr).next_back().map(|(_, s)| *s).filter(|s| addr < s.base + s.size)
    }

    /// The smallest global free block of at least `size` bytes.
    pub fn best_fit_global(&self, size: u64) -> Option<(u64, u64)> {
        self.global_free.range((size, 0)..).next().map(|&(s, a)| (a, s))
    }

    /// The smallest block pending on `stream` of at least `size` bytes whose
    /// tag passes `eligible`.
    pub fn best_fit_pending(
        &self,
        stream: u64,
        size: u64,
        mut eligible: impl FnMut(u64) -> bool,
    ) -> Option<(u64, u64)> {
        let set = self.pending.get(&stream)?;
        for &(s, a) in set.range((size, 0)..) {
            if let Some(Block { state: State::Free(Owner::Stream { tag, .. }), .. }) = self.blocks.get(&a) {
                if eligible(*tag) {
                    return Some((a, s));
                }
            }
        }
        None
    }

    /// The tag of the pending block at `addr`.
    pub fn pending_tag(&self, addr: u64) -> Option<(u64, u64)> {
        match self.blocks.get(&addr)?.state {
            State::Free(Owner::Stream { stream, tag }) => Some((stream, tag)),
            _ => None,
        }
    }

    /// Takes `size` bytes from the start of the free block at `addr` (found by a
    /// best-fit call) and marks them allocated; the rest stays free with the
    /// same owner. Returns the owner the bytes had.
    pub fn take(&mut self, addr: u64, size: u64) -> Option<Owner> {
        let block = *self.blocks.get(&addr)?;
        let State::Free(owner) = block.state else { return None };
        if block.size < size || size == 0 || size % BLOCK_ALIGN != 0 {
            return None;
        }
        self.unindex(addr, block.size, owner);
        self.blocks.insert(addr, Block { size, segment: block.segment, state: State::Allocated });
        self.allocated += size;
        let rest = block.size - size;
        if rest > 0 {
            let rest_addr = addr + size;
            self.blocks
                .insert(rest_addr, Block { size: rest, segment: block.segment, state: State::Free(owner) });
            self.index(rest_addr, rest, owner);
        }
        Some(owner)
    }

    /// The size of the allocated block at `addr`, if there is one.
    pub fn allocated_size(&self, addr: u64) -> Option<u64> {
        match self.blocks.get(&addr) {
            Some(Block { size, state: State::Allocated, .. }) => Some(*size),
            _ => None,
        }
    }

    /// The allocated block containing `addr`: (base, size).
    pub fn allocated_block_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let (&base, b) = self.blocks.range(..=addr).next_back()?;
        (b.state == State::Allocated && addr < base + b.size).then_some((base, b.size))
    }

    /// Marks the allocated block at `addr` free with `owner` and coalesces it.
    /// Returns false if there is no allocated block there.
    pub fn release_block(&mut self, addr: u64, owner: Owner) -> bool {
        let Some(block) = self.blocks.get(&addr).copied() else { return false };
        if block.state != State::Allocated {
            return false;
        }
        self.allocated -= block.size;
        let (mut start, mut size, mut owner) = (addr, block.size, owner);
        // Merge with the previous block.
        if let Some((&p_addr, p)) = self.blocks.range(..addr).next_back() {
            let p = *p;
            if p.segment == block.segment && p_addr + p.size == addr {
                if let State::Free(p_owner) = p.state {
                    if let Some(merged) = merge_owner(owner, p_owner) {
                        self.unindex(p_addr, p.size, p_owner);
                        self.blocks.remove(&start);
                        start = p_addr;
                        size += p.size;
                        owner = merged;
                    }
                }
            }
        }
        // Merge with the next block.
        let next_addr = addr + block.size;
        if let Some(n) = self.blocks.get(&next_addr).copied() {
            if n.segment == block.segment {
                if let State::Free(n_owner) = n.state {
                    if let Some(merged) = merge_owner(owner, n_owner) {
                        self.unindex(next_addr, n.size, n_owner);
                        self.blocks.remove(&next_addr);
                        size += n.size;
                        owner = merged;
                    }
                }
            }
        }
        self.blocks.insert(start, Block { size, segment: block.segment, state: State::Free(owner) });
        self.index(start, size, owner);
        true
    }

    /// Makes every block pending on `stream` with a tag below `completed_below`
    /// global (its free has completed), coalescing with global neighbours.
    /// Returns the bytes made global.
    pub fn promote(&mut self, stream: u64, completed_below: u64) -> u64 {
        let Some(set) = self.pending.get(&stream) else { return 0 };
        let ready: Vec<u64> = set
            .iter()
            .filter(|&&(_, a)| {
                matches!(self.blocks.get(&a), Some(Block { state: State::Free(Owner::Stream { tag, .. }), .. }) if *tag < completed_below)
            })
            .map(|&(_, a)| a)
            .collect();
        let mut bytes = 0;
        for addr in ready {
            let Some(block) = self.blocks.get(&addr).copied() else { continue };
            let State::Free(owner) = block.state else { continue };
            self.unindex(addr, block.size, owner);
            self.blocks.insert(addr, Block { state: State::Allocated, ..block });
            self.allocated += block.size;
            bytes += block.size;
            self.release_block(addr, Owner::Global);
        }
        bytes
    }

    /// Segments that are one global free block (nothing live, nothing pending).
    pub fn releasable_segments(&self) -> Vec<Segment> {
        self.segments
            .values()
            .filter(|s| {
                matches!(self.blocks.get(&s.base), Some(b) if b.size == s.size && b.state == State::Free(Owner::Global))
                    && !self.has_unbacked(s)
            })
            .copied()
            .collect()
    }

    fn has_unbacked(&self, s: &Segment) -> bool {
        self.blocks.range(s.base..s.base + s.size).any(|(_, b)| b.state == State::Unbacked)
    }

    /// Removes a releasable segment (see [`Heap::releasable_segments`]).
    pub fn remove_segment(&mut self, base: u64) -> Option<Segment> {
        let seg = *self.segments.get(&base)?;
        let block = *self.blocks.get(&base)?;
        if block.size != seg.size || block.state != State::Free(Owner::Global) {
            return None;
        }
        self.unindex(base, block.size, Owner::Global);
        self.blocks.remove(&base);
        self.segments.remove(&base);
        self.reserved -= seg.size;
        Some(seg)
    }

    fn index(&mut self, addr: u64, size: u64, owner: Owner) {
        match owner {
            Owner::Global => {
                self.global_free.insert((size, addr));
                self.global_free_bytes += size;
            }
            Owner::Stream { stream, .. } => {
                self.pending.entry(stream).or_default().insert((size, addr));
                *self.pending_bytes.entry(stream).or_default() += size;
            }
        }
    }

    fn unindex(&mut self, addr: u64, size: u64, owner: Owner) {
        match owner {
            Owner::Global => {
                self.global_free.remove(&(size, addr));
                self.global_free_bytes -= size;
            }
            Owner::Stream { stream, .. } => {
                if let Some(set) = self.pending.get_mut(&stream) {
                    set.remove(&(size, addr));
                    if set.is_empty() {
                        self.pending.remove(&stream);
                    }
                }
                if let Some(b) = self.pending_bytes.get_mut(&stream) {
                    *b -= size;
                    if *b == 0 {
                        self.pending_bytes.remove(&stream);
                    }
                }
            }
        }
    }

    /// Every block in address order: (address, size, kind), for `layout.rs`
    /// (an allocated block reads [`super::layout::RunKind::Live`]).
    pub fn blocks_in_order(&self) -> impl Iterator<Item = (u64, u64, super::layout::RunKind)> + '_ {
        use super::layout::RunKind;
        self.blocks.iter().map(|(&addr, b)| {
            let kind = match b.state {
                State::Allocated => RunKind::Live,
                State::Free(Owner::Global) => RunKind::Free,
                State::Free(Owner::Stream { .. }) => RunKind::PendingFree,
                State::Unbacked => RunKind::Unbacked,
            };
            (addr, b.size, kind)
        })
    }

    /// Checks every invariant (for tests): blocks tile each segment, indexes
    /// match the blocks, no two adjacent compatible free blocks, totals add up.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut allocated = 0;
        let mut global_free = 0;
        let mut reserved = 0;
        for seg in self.segments.values() {
            reserved += seg.size;
            let unbacked: u64 = self
                .blocks
                .range(seg.base..seg.base + seg.size)
                .filter(|(_, b)| b.state == State::Unbacked)
                .map(|(_, b)| b.size)
                .sum();
            reserved -= unbacked;
            let mut at = seg.base;
            let mut prev: Option<State> = None;
            for (&a, b) in self.blocks.range(seg.base..seg.base + seg.size) {
                if a != at {
                    return Err(format!("gap or overlap at {a:#x} (expected {at:#x})"));
                }
                if b.segment != seg.base {
                    return Err(format!("block {a:#x} names segment {:#x}", b.segment));
                }
                match b.state {
                    State::Unbacked => {
                        if prev == Some(State::Unbacked) {
                            return Err(format!("adjacent unbacked blocks not merged at {a:#x}"));
                        }
                    }
                    State::Allocated => allocated += b.size,
                    State::Free(o) => {
                        let indexed = match o {
                            Owner::Global => {
                                global_free += b.size;
                                self.global_free.contains(&(b.size, a))
                            }
                            Owner::Stream { stream, .. } => {
                                self.pending.get(&stream).is_some_and(|s| s.contains(&(b.size, a)))
                            }
                        };
                        if !indexed {
                            return Err(format!("free block {a:#x} is not indexed"));
                        }
                        if let Some(State::Free(p)) = prev {
                            if merge_owner(o, p).is_some() {
                                return Err(format!("adjacent free blocks not merged at {a:#x}"));
                            }
                        }
                    }
                }
                prev = Some(b.state);
                at = a + b.size;
            }
            if at != seg.base + seg.size {
                return Err(format!("segment {:#x} not covered", seg.base));
            }
        }
        let indexed_blocks = self.global_free.len() + self.pending.values().map(|s| s.len()).sum::<usize>();
        let free_blocks = self.blocks.values().filter(|b| matches!(b.state, State::Free(_))).count();
        if indexed_blocks != free_blocks {
            return Err(format!("{indexed_blocks} indexed, {free_blocks} free blocks"));
        }
        if allocated != self.allocated || global_free != self.global_free_bytes || reserved != self.reserved {
            return Err("totals disagree".into());
        }
        Ok(())
    }
}

fn merge_owner(a: Owner, b: Owner) -> Option<Owner> {
    match (a, b) {
        (Owner::Global, Owner::Global) => Some(Owner::Global),
        (Owner::Stream { stream: s, tag: t }, Owner::Stream { stream: s2, tag: t2 }) if s == s2 => {
            Some(Owner::Stream { stream: s, tag: t.max(t2) })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MB: u64 = 1 << 20;

    #[test]
    fn best_fit_splits_and_coalesces() {
        let mut h = Heap::new();
        h.add_segment(0x10_0000, 4 * MB);
        let (a, _) = h.best_fit_global(MB).unwrap();
        assert_eq!(h.take(a, MB), Some(Owner::Global));
        let (b, _) = h.best_fit_global(MB).unwrap();
        h.take(b, MB);
        assert_eq!(b, a + MB);
        assert_eq!(h.allocated(), 2 * MB);
        h.check_invariants().unwrap();
        assert!(h.release_block(a, Owner::Global));
        assert!(h.release_block(b, Owner::Global));
        h.check_invariants().unwrap();
        assert_eq!(h.releasable_segments().len(), 1);
        assert_eq!(h.global_free_bytes(), 4 * MB);
    }

    #[test]
    fn pending_blocks_stay_with_their_stream_until_promoted() {
        let mut h = Heap::new();
        h.add_segment(0x100_0000, 2 * MB);
        let (a, _) = h.best_fit_global(MB).unwrap();
        h.take(a, MB);
        h.release_block(a, Owner::Stream { stream: 7, tag: 3 });
        h.check_invariants().unwrap();
        // The pending block keeps to itself: the untouched remainder stays global.
        assert_eq!(h.best_fit_global(MB), Some((a + MB, MB)));
        assert_eq!(h.best_fit_pending(7, MB, |_| true), Some((a, MB)));
        assert_eq!(h.best_fit_pending(7, 2 * MB, |_| true), None);
        assert_eq!(h.best_fit_pending(7, MB, |t| t < 3), None);
        assert!(h.releasable_segments().is_empty());
        assert_eq!(h.promote(7, 3), 0);
        assert_eq!(h.promote(7, 4), MB);
        h.check_invariants().unwrap();
        assert_eq!(h.releasable_segments().len(), 1);
    }

    #[test]
    fn different_streams_never_merge() {
        let mut h = Heap::new();
        h.add_segment(0x100_0000, MB);
        let half = MB / 2;
        h.take(0x100_0000, half);
        h.take(0x100_0000 + half, half);
        h.release_block(0x100_0000, Owner::Stream { stream: 1, tag: 1 });
        h.release_block(0x100_0000 + half, Owner::Stream { stream: 2, tag: 1 });
        h.check_invariants().unwrap();
        assert_eq!(h.best_fit_pending(1, MB, |_| true), None);
        h.promote(1, 10);
        h.promote(2, 10);
        h.check_invariants().unwrap();
        assert_eq!(h.best_fit_global(MB), Some((0x100_0000, MB)));
    }

    #[test]
    fn blocks_do_not_merge_across_segments() {
        let mut h = Heap::new();
        h.add_segment(0x100_0000, MB);
        h.add_segment(0x110_0000 - 0x10_0000 + MB, MB); // adjacent range
        h.check_invariants().unwrap();
        assert_eq!(h.best_fit_global(2 * MB), None);
        assert_eq!(h.releasable_segments().len(), 2);
    }

    #[test]
    fn a_reservation_is_backed_and_unbacked_in_chunks_that_coalesce() {
        let base = 1u64 << 30;
        let mut h = Heap::new();
        h.add_reservation(base, 64 * MB);
        h.check_invariants().unwrap();
        assert!(h.best_fit_global(256).is_none(), "unbacked addresses are never handed out");
        assert!(h.back(base, 2 * MB));
        let (a, _) = h.best_fit_global(MB).unwrap();
        h.take(a, MB);
        assert_eq!(h.global_free_ending_at(base + 2 * MB), MB);
        // A second chunk right after: its free space joins the first chunk's.
        assert!(h.back(base + 2 * MB, 2 * MB));
        assert_eq!(h.best_fit_global(3 * MB), Some((base + MB, 3 * MB)));
        assert_eq!(h.reserved(), 4 * MB);
        h.check_invariants().unwrap();
        // Only fully free chunks can be unbacked.
        assert!(h.unback(base + 2 * MB, 2 * MB));
        assert_eq!(h.reserved(), 2 * MB);
        assert!(!h.unback(base, 2 * MB), "a chunk with a live block stays");
        h.check_invariants().unwrap();
        h.release_block(a, Owner::Global);
        assert!(h.unback(base, 2 * MB));
        assert_eq!(h.unbacked_ranges(), vec![(base, 64 * MB)]);
        assert!(h.remove_reservation(base));
        h.check_invariants().unwrap();
    }

    #[test]
    fn random_operations_keep_invariants() {
        // A small deterministic generator (xorshift) drives allocations,
        // stream frees, promotions and releases.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut h = Heap::new();
        h.add_segment(1 << 30, 64 * MB);
        let mut live: Vec<u64> = Vec::new();
        for step in 0..20_000u64 {
            match next() % 10 {
                0..=5 => {
                    let size = block_size(next() % (2 * MB)).unwrap();
                    if let Some((a, _)) = h.best_fit_global(size) {
                        h.take(a, size).unwrap();
                        live.push(a);
                    }
                }
                6..=8 if !live.is_empty() => {
                    let i = (next() as usize) % live.len();
                    let a = live.swap_remove(i);
                    let owner = if next() % 2 == 0 {
                        Owner::Global
                    } else {
                        Owner::Stream { stream: next() % 3, tag: step }
                    };
                    assert!(h.release_block(a, owner));
                }
                _ => {
                    h.promote(next() % 3, step);
                }
            }
            if step % 997 == 0 {
                h.check_invariants().unwrap();
            }
        }
        for a in live.drain(..) {
            h.release_block(a, Owner::Global);
        }
        for s in 0..3 {
            h.promote(s, u64::MAX);
        }
        h.check_invariants().unwrap();
        assert_eq!(h.allocated(), 0);
        assert_eq!(h.releasable_segments().len(), 1);
    }
}
