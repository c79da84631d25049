//! Placement: where in the pool's segments a block of a given size goes.
//!
//! The blocks of each segment tile it and form a list in address order
//! (each block links to its neighbours), so a freed block finds the blocks
//! it coalesces with without a search. A hash map finds a block by its
//! start; the blocks that are not allocated (free, unbacked, shadowed) are
//! also in a tree ordered by their ends, which finds the run holding an
//! address (keyed by the end, a take from the front of a free run and a
//! free that merges with the run after it leave the run's key as it was).
//! Free blocks are indexed by `(size, address)` in size-ordered sets
//! (`free_index.rs`: buckets of sizes, each a sorted vector), so a request
//! finds the smallest free block that fits (best fit, lowest address on
//! ties); the chosen block is split and the remainder stays free. A take and
//! a free each change the indexes two to five times (an address-ordered map
//! of every block took twice as many changes).
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
//! one). A pending block freed next to global free memory absorbs it, which
//! is then only lent to that stream: another stream that needs it takes it
//! back ([`Heap::reclaim_lent`], see `merge`). Blocks pending on different
//! streams never merge; once a stream's frees are known complete its blocks
//! turn global and merge with their global neighbours.
#![forbid(unsafe_code)]

use super::addr_hash::{AddrMap, NumMap};
use std::collections::BTreeMap;

use super::free_index::FreeSet;
use std::ops::Bound::{Excluded, Unbounded};

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
    /// Addresses mapped to physical memory that is in use at another of its
    /// addresses (a pool on virtual memory maps a physical granule at several
    /// places and uses it at one at a time, see `remap.rs`): never handed
    /// out, never merged, not counted as reserved.
    Shadowed,
}

/// No block (the end of a segment's list).
const NIL: u32 = u32::MAX;

/// A block: a node of its segment's list, which links the blocks that tile
/// the segment in address order.
///
/// One cache line each (57 bytes of fields, aligned to 64): a take or a free
/// reads the block and its neighbours, and under a framework's own work
/// between calls each line read is likely a miss. (Its segment is not kept:
/// two blocks are in one segment exactly when they are linked.)
#[derive(Copy, Clone, Debug)]
#[repr(align(64))]
struct Block {
    addr: u64,
    size: u64,
    /// The size class of its segment (read on every take and free; a
    /// lookup of the segment otherwise).
    class: u8,
    state: State,
    /// When a free block last changed (the heap's count of frees then): how
    /// recently its memory was in use.
    freed: u64,
    /// The blocks before and after it in its segment ([`NIL`] at the ends).
    prev: u32,
    next: u32,
}

const _: () = assert!(std::mem::size_of::<Block>() == 64);

/// A range obtained from the backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// First byte.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// The size class whose blocks it holds (see [`Heap::add_reservation_for`]).
    pub class: usize,
}

/// What a block is, as [`Heap::class_blocks`] tells it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BlockKind {
    /// Free for every stream.
    Free,
    /// Mapped, but its memory is in use elsewhere.
    Shadowed,
    /// Allocated, pending on a stream, or unbacked.
    Other,
}

impl BlockKind {
    fn of(state: State) -> BlockKind {
        match state {
            State::Free(Owner::Global) => BlockKind::Free,
            State::Shadowed => BlockKind::Shadowed,
            _ => BlockKind::Other,
        }
    }
}

/// Size classes a heap keeps apart (a pool on virtual memory gives each its
/// own reservation, so blocks of one class never split a free run of
/// another; physical memory still moves between them).
pub const CLASSES: usize = 3;

/// The largest block a pool that keeps one heap for every size may keep
/// apart (see [`TINY_CLASS`]): 16 KiB.
pub const TINY_BLOCK_MAX: u64 = 16 << 10;

/// Where a pool on virtual memory that keeps one heap for every size (the
/// default, [`crate::pool::MoveBudget::GROW_FIRST`]) and keeps its tiny
/// blocks apart ([`crate::pool::MemPool::set_tiny_blocks_apart`]) places
/// blocks of at most [`TINY_BLOCK_MAX`]: the second class's part of its
/// addresses, which such a pool otherwise leaves to blocks with no room
/// elsewhere. Variable-length inference makes about 30% of its allocations
/// this small, and they hold under 0.1% of its peak; apart from the rest,
/// the stream's cache may keep them over a miss (`stream_cache.rs`) without
/// changing where any larger block goes.
pub const TINY_CLASS: usize = 1;

/// The size class of a block of `size` bytes: below 1 MiB, below 64 MiB, larger.
pub fn size_class(size: u64) -> usize {
    if size < (1 << 20) {
        0
    } else if size < (64 << 20) {
        1
    } else {
        2
    }
}

/// The pool's address space: segments, blocks and the free indexes.
#[derive(Debug, Default)]
pub struct Heap {
    /// Every block (slots of merged blocks are reused, see `spare`).
    nodes: Vec<Block>,
    /// Slots of `nodes` no block uses.
    spare: Vec<u32>,
    /// Where each block starts → its slot.
    at: AddrMap<u32>,
    /// Every block that is not allocated (free, unbacked or shadowed), by
    /// its end: what finds the run that holds an address.
    runs: BTreeMap<u64, u32>,
    segments: BTreeMap<u64, Segment>,
    global_free: [FreeSet; CLASSES],
    /// Blocks pending on each stream: their index by class and their bytes
    /// (one map, so that a change looks the stream up once).
    pending: NumMap<Pending>,
    reserved: u64,
    allocated: u64,
    global_free_bytes: u64,
    /// Frees so far (a clock for [`Heap::global_free_run`]'s coldness).
    frees: u64,
    /// Where the last blocks of each size went (most recent last), when the
    /// heap keeps them ([`Heap::keep_places`]).
    places: Option<AddrMap<Places>>,
    /// Global memory absorbed by a stream's pending block (see `merge`):
    /// start → (end, the stream).
    lent: BTreeMap<u64, (u64, u64)>,
    /// Physical pieces larger than one unit (groups): start → length.
    groups: BTreeMap<u64, u64>,
    /// How many groups have each length: the least of them bounds what
    /// [`Heap::breaks_free_group`] must look at.
    group_lens: BTreeMap<u64, u32>,
    /// The shortest group's length (`u64::MAX` without groups): a free run
    /// shorter than that holds no group wholly.
    least_group: u64,
    /// How many times memory turned global free (a block freed, promoted,
    /// backed or unshadowed into the global free index; not the rest of a
    /// free block a part was cut out of): see [`Heap::global_frees_indexed`].
    global_indexed: u64,
}

/// The blocks pending on one stream.
#[derive(Debug, Default)]
struct Pending {
    /// (size, address) of each, by size class.
    sets: [FreeSet; CLASSES],
    /// Their bytes.
    bytes: u64,
}

/// Free blocks [`Heap::best_fit_keeping_groups`] looks at, of each kind,
/// smallest first (a bound on the slow path's work; replayed PyTorch runs
/// place the same with 2, 16 or 64).
const GROUP_KEEPING_CANDIDATES: usize = 16;

/// The better of a global candidate and one pending on the requesting
/// stream, each (its place, the size of its free run): the smaller run,
/// the stream's own on a tie (its memory is already ordered after its
/// frees).
pub fn smaller_run<T>(global: Option<(T, u64)>, own: Option<(T, u64)>) -> Option<(T, u64)> {
    match (global, own) {
        (Some(g), Some(o)) => Some(if o.1 <= g.1 { o } else { g }),
        (g, o) => g.or(o),
    }
}

/// Places kept per size, and sizes at most.
const PLACES_PER_SIZE: usize = 4;
const PLACE_SIZES: usize = 4096;

/// Where the last blocks of one size went, oldest first (held in the map's
/// entry itself: the slow path reads it on every allocation).
#[derive(Debug, Default, Clone, Copy)]
struct Places {
    at: [u64; PLACES_PER_SIZE],
    len: u8,
}

impl Places {
    fn as_slice(&self) -> &[u64] {
        &self.at[..usize::from(self.len)]
    }

    /// Notes `addr` as the newest (moved there if it is held already; the
    /// oldest goes when all are in use).
    fn note(&mut self, addr: u64) {
        let n = usize::from(self.len);
        let from = match self.at[..n].iter().position(|&a| a == addr) {
            Some(i) => i,
            None if n == PLACES_PER_SIZE => 0,
            None => {
                self.at[n] = addr;
                self.len += 1;
                return;
            }
        };
        self.at.copy_within(from + 1..n, from);
        self.at[n - 1] = addr;
    }
}

/// Rounds a request up to the block granule (at least one granule).
pub fn block_size(request: u64) -> Option<u64> {
    request.max(1).checked_next_multiple_of(BLOCK_ALIGN)
}

impl Heap {
    /// An empty heap.
    pub fn new() -> Heap {
        Heap { least_group: u64::MAX, ..Heap::default() }
    }

    // ---- the block lists ---------------------------------------------------------

    fn node(&self, i: u32) -> &Block {
        &self.nodes[i as usize]
    }

    fn node_mut(&mut self, i: u32) -> &mut Block {
        &mut self.nodes[i as usize]
    }

    /// The block that starts at `addr`.
    fn block_at(&self, addr: u64) -> Option<u32> {
        self.at.get(&addr).copied()
    }

    /// The block that is not allocated and holds `addr` (the first run that
    /// ends after it, if it starts at or before it).
    fn run_holding(&self, addr: u64) -> Option<u32> {
        let (_, &i) = self.runs.range((Excluded(addr), Unbounded)).next()?;
        (self.node(i).addr <= addr).then_some(i)
    }

    /// The block that holds `addr`, whatever it is (inside an allocated
    /// block: a walk from the nearest run before it in its segment).
    fn holding(&self, addr: u64) -> Option<u32> {
        if let Some(i) = self.block_at(addr) {
            return Some(i);
        }
        if let Some(i) = self.run_holding(addr) {
            return Some(i);
        }
        // The nearest run that ends at or before `addr` starts the walk if
        // it is in the same segment.
        let nearest = self.runs.range(..=addr).next_back().map(|(_, &i)| i);
        let seg = self.segment_of(addr)?;
        let mut i = match nearest.filter(|&i| self.node(i).addr >= seg.base) {
            Some(i) => i,
            None => self.block_at(seg.base)?,
        };
        loop {
            let b = self.node(i);
            if addr < b.addr + b.size {
                return (b.addr <= addr).then_some(i);
            }
            if b.next == NIL {
                return None;
            }
            i = b.next;
        }
    }

    /// The blocks of a segment's list from `first` on.
    fn walk(&self, first: Option<u32>) -> impl Iterator<Item = &Block> + '_ {
        std::iter::successors(first, move |&i| Some(self.node(i).next).filter(|&n| n != NIL))
            .map(move |i| self.node(i))
    }

    /// A block in a new slot (not linked, placed or indexed yet).
    fn new_node(&mut self, b: Block) -> u32 {
        match self.spare.pop() {
            Some(i) => {
                self.nodes[i as usize] = b;
                i
            }
            None => {
                self.nodes.push(b);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 blocks")
            }
        }
    }

    /// A segment's first block (alone in its list).
    fn first_node(&mut self, b: Block) -> u32 {
        let i = self.new_node(Block { prev: NIL, next: NIL, ..b });
        self.at.insert(b.addr, i);
        if b.state != State::Allocated {
            self.runs.insert(b.addr + b.size, i);
        }
        i
    }

    /// Splits block `i` at `offset` bytes: the back is a new block in the
    /// same state, placed (by address, and among the runs if it is not
    /// allocated) but not indexed. Returns the back's slot.
    fn split(&mut self, i: u32, offset: u64) -> u32 {
        let b = *self.node(i);
        let j = self.split_raw(i, offset, b.state);
        if b.state != State::Allocated {
            // The front ends earlier; the back takes the run's key (its end).
            self.runs.insert(b.addr + offset, i);
            self.runs.insert(b.addr + b.size, j);
        }
        j
    }

    /// Splits block `i` at `offset` bytes, the back a new block in `state`
    /// placed by address; the runs are the caller's to change. Returns the
    /// back's slot.
    fn split_raw(&mut self, i: u32, offset: u64, state: State) -> u32 {
        let b = *self.node(i);
        debug_assert!(offset > 0 && offset < b.size);
        let addr = b.addr + offset;
        let j = self.new_node(Block { addr, size: b.size - offset, state, prev: i, ..b });
        self.node_mut(i).size = offset;
        self.node_mut(i).next = j;
        if b.next != NIL {
            self.node_mut(b.next).prev = j;
        }
        self.at.insert(addr, j);
        j
    }

    /// Removes block `i` from its list and from the address map (its bytes
    /// went to a neighbour; the caller unindexed it and took it out of the
    /// runs).
    fn unlink(&mut self, i: u32) {
        let b = *self.node(i);
        if b.prev != NIL {
            self.node_mut(b.prev).next = b.next;
        }
        if b.next != NIL {
            self.node_mut(b.next).prev = b.prev;
        }
        self.at.remove(&b.addr);
        self.spare.push(i);
    }

    /// Sets the state of block `i`, keeping the runs (not the free indexes).
    fn set_state(&mut self, i: u32, state: State) {
        let b = self.node_mut(i);
        let (was, end) = (b.state, b.addr + b.size);
        b.state = state;
        match (was == State::Allocated, state == State::Allocated) {
            (true, false) => {
                self.runs.insert(end, i);
            }
            (false, true) => {
                self.runs.remove(&end);
            }
            _ => {}
        }
    }

    /// Merges unbacked block `i` (among the runs) with unbacked neighbours.
    fn merge_unbacked(&mut self, i: u32) {
        let mut i = i;
        let p = self.node(i).prev;
        if p != NIL && self.node(p).state == State::Unbacked {
            // `p` takes `i`'s bytes and its key (the end).
            let b = *self.node(i);
            self.runs.remove(&b.addr);
            self.runs.insert(b.addr + b.size, p);
            self.unlink(i);
            self.node_mut(p).size += b.size;
            i = p;
        }
        let n = self.node(i).next;
        if n != NIL && self.node(n).state == State::Unbacked {
            let nb = *self.node(n);
            self.runs.remove(&nb.addr);
            self.runs.insert(nb.addr + nb.size, i);
            self.unlink(n);
            self.node_mut(i).size += nb.size;
        }
    }

    // ---- totals ------------------------------------------------------------------

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
        self.pending.get(&stream).map_or(0, |p| p.bytes)
    }

    /// Streams that have pending free blocks.
    pub fn pending_streams(&self) -> Vec<u64> {
        self.pending.iter().filter(|(_, p)| p.sets.iter().any(|s| !s.is_empty())).map(|(&s, _)| s).collect()
    }

    /// Whether `stream` has pending free blocks.
    pub fn has_pending(&self, stream: u64) -> bool {
        self.pending.get(&stream).is_some_and(|p| p.sets.iter().any(|s| !s.is_empty()))
    }

    // ---- segments and reservations -------------------------------------------------

    /// Adds a segment as one global free block. `base` and `size` must be
    /// multiples of [`BLOCK_ALIGN`] and the range must not overlap another.
    pub fn add_segment(&mut self, base: u64, size: u64) {
        debug_assert!(base % BLOCK_ALIGN == 0 && size % BLOCK_ALIGN == 0 && size > 0);
        self.segments.insert(base, Segment { base, size, class: 0 });
        self.reserved += size;
        self.first_node(Block {
            addr: base,
            size,
            class: 0,
            state: State::Allocated,
            freed: 0,
            prev: NIL,
            next: NIL,
        });
        self.allocated += size;
        self.release_block(base, Owner::Global);
    }

    /// Adds a reserved address range with no memory behind it yet (a pool on
    /// virtual memory): [`Heap::back`] maps parts of it in, [`Heap::unback`]
    /// gives them back. Blocks coalesce across the chunks backed inside it.
    pub fn add_reservation(&mut self, base: u64, size: u64) {
        self.add_reservation_for(0, base, size);
    }

    /// Adds a reserved address range for blocks of size class `class`
    /// (best-fit queries of that class look only in such ranges).
    pub fn add_reservation_for(&mut self, class: usize, base: u64, size: u64) {
        debug_assert!(base % BLOCK_ALIGN == 0 && size % BLOCK_ALIGN == 0 && size > 0 && class < CLASSES);
        self.segments.insert(base, Segment { base, size, class });
        self.first_node(Block {
            addr: base,
            size,
            class: class as u8,
            state: State::Unbacked,
            freed: 0,
            prev: NIL,
            next: NIL,
        });
    }

    /// The unbacked ranges: (start, size), lowest first.
    pub fn unbacked_ranges(&self) -> Vec<(u64, u64)> {
        self.runs
            .values()
            .map(|&i| self.node(i))
            .filter(|b| b.state == State::Unbacked)
            .map(|b| (b.addr, b.size))
            .collect()
    }

    /// Whether `[addr, addr + size)` lies inside one unbacked range.
    pub fn is_unbacked(&self, addr: u64, size: u64) -> bool {
        self.run_holding(addr)
            .map(|i| self.node(i))
            .is_some_and(|b| b.state == State::Unbacked && addr + size <= b.addr + b.size)
    }

    /// The unbacked ranges in reservations of size class `class`.
    pub fn unbacked_ranges_of(&self, class: usize) -> Vec<(u64, u64)> {
        self.runs
            .values()
            .map(|&i| self.node(i))
            .filter(|b| b.state == State::Unbacked && usize::from(b.class) == class)
            .map(|b| (b.addr, b.size))
            .collect()
    }

    /// Every block of the reservations of size class `class`, in address
    /// order: (address, size, what it is).
    pub fn class_blocks(&self, class: usize) -> impl Iterator<Item = (u64, u64, BlockKind)> + '_ {
        self.segments
            .values()
            .filter(move |s| s.class == class)
            .flat_map(move |seg| self.walk(self.block_at(seg.base)))
            .map(|b| (b.addr, b.size, BlockKind::of(b.state)))
    }

    /// The blocks that overlap `[from, to)`, in address order: (address,
    /// size, what it is).
    pub fn blocks_between(&self, from: u64, to: u64) -> impl Iterator<Item = (u64, u64, BlockKind)> + '_ {
        self.nodes_between(from, to).map(|b| (b.addr, b.size, BlockKind::of(b.state)))
    }

    /// The free blocks that overlap `[from, to)` and that `stream` may use
    /// at once (global, or pending on that stream; with None, global only),
    /// in address order: (address, size).
    pub fn free_blocks_between(&self, from: u64, to: u64, stream: Option<u64>) -> Vec<(u64, u64)> {
        self.nodes_between(from, to)
            .filter(|b| match stream {
                Some(s) => usable_by(b.state, s),
                None => b.state == State::Free(Owner::Global),
            })
            .map(|b| (b.addr, b.size))
            .collect()
    }

    /// The blocks that overlap `[from, to)`, in address order.
    fn nodes_between(&self, from: u64, to: u64) -> impl Iterator<Item = &Block> + '_ {
        let lowest = self.segments.range(..=from).next_back().map_or(from, |(&base, _)| base);
        self.segments
            .range(lowest..to)
            .flat_map(move |(_, seg)| {
                let first = if seg.base >= from { self.block_at(seg.base) } else { self.holding(from) };
                self.walk(first).take_while(move |b| b.addr < to)
            })
            .filter(move |b| b.addr + b.size > from)
    }

    /// The free block that ends exactly at `addr` and that stream `stream`
    /// may use at once (global, or pending on that stream), if any: its size.
    pub fn usable_free_ending_at(&self, addr: u64, stream: u64) -> u64 {
        match self.runs.get(&addr).map(|&i| self.node(i)) {
            Some(b) if usable_by(b.state, stream) => b.size,
            _ => 0,
        }
    }

    /// [`Heap::usable_free_ending_at`], where that run and the block that
    /// starts at `addr` lie in one segment (blocks of two segments never
    /// merge, however close their addresses: a pool's parts and ranges
    /// may be adjacent).
    pub fn joinable_free_ending_at(&self, addr: u64, stream: u64) -> u64 {
        let Some(&i) = self.runs.get(&addr) else { return 0 };
        let b = self.node(i);
        // (The block after it in its segment starts at `addr`: blocks tile
        // their segment.)
        let same = b.next != NIL;
        if same && usable_by(b.state, stream) { b.size } else { 0 }
    }

    /// [`Heap::usable_free_starting_at`], where that block and the one that
    /// ends at `addr` lie in one segment.
    pub fn joinable_free_starting_at(&self, addr: u64, stream: u64) -> u64 {
        let Some(j) = self.block_at(addr) else { return 0 };
        let b = self.node(j);
        // (The block before it in its segment ends at `addr`; it counts
        // where it is one of the runs, the blocks not allocated.)
        let same = b.prev != NIL && self.node(b.prev).state != State::Allocated;
        if same && usable_by(b.state, stream) { b.size } else { 0 }
    }

    /// The free block that starts exactly at `addr` and that stream `stream`
    /// may use at once, if any: its size.
    pub fn usable_free_starting_at(&self, addr: u64, stream: u64) -> u64 {
        match self.block_at(addr).map(|i| self.node(i)) {
            Some(b) if usable_by(b.state, stream) => b.size,
            _ => 0,
        }
    }

    /// Turns `[addr, addr + size)`, inside one unbacked block, into global
    /// free memory (it was just mapped), coalescing with free neighbours.
    /// Returns false if the range is not unbacked.
    pub fn back(&mut self, addr: u64, size: u64) -> bool {
        let Some(m) = self.cut_out(addr, size, State::Unbacked) else { return false };
        self.set_state(m, State::Allocated);
        self.node_mut(m).freed = 0;
        self.allocated += size;
        self.reserved += size;
        self.release_block(addr, Owner::Global)
    }

    /// Turns `[addr, addr + size)`, inside one unbacked block, into a
    /// shadowed block at once (mapped, but its memory is used at another
    /// address: never free, so never handed out or absorbed by a
    /// neighbour). Returns false if the range is not unbacked.
    pub fn back_shadowed(&mut self, addr: u64, size: u64) -> bool {
        let Some(m) = self.cut_out(addr, size, State::Unbacked) else { return false };
        self.set_state(m, State::Shadowed);
        self.node_mut(m).freed = 0;
        true
    }

    /// Splits the run in `state` (unbacked or shadowed: kept in no free
    /// index) that holds `[addr, addr + size)` around it. Returns the
    /// range's block, or None if no such run holds all of it.
    fn cut_out(&mut self, addr: u64, size: u64, state: State) -> Option<u32> {
        let i = self.run_holding(addr)?;
        let b = *self.node(i);
        if b.state != state || size == 0 || addr + size > b.addr + b.size {
            return None;
        }
        let mut m = i;
        if addr > b.addr {
            m = self.split(i, addr - b.addr);
        }
        if addr + size < b.addr + b.size {
            self.split(m, size);
        }
        Some(m)
    }

    /// Frees so far: the clock of [`Heap::global_free_run`].
    pub fn frees(&self) -> u64 {
        self.frees
    }

    /// The global free block that holds `[addr, addr + size)`, if one does:
    /// (its size, when it last changed: a count of the heap's frees).
    pub fn global_free_run(&self, addr: u64, size: u64) -> Option<(u64, u64)> {
        let b = self.node(self.run_holding(addr)?);
        (b.state == State::Free(Owner::Global) && addr + size <= b.addr + b.size).then_some((b.size, b.freed))
    }

    /// Every global free block of at least `min` bytes: (address, size), in
    /// address order.
    pub fn global_free_blocks(&self, min: u64) -> Vec<(u64, u64)> {
        self.runs
            .values()
            .map(|&i| self.node(i))
            .filter(|b| b.state == State::Free(Owner::Global) && b.size >= min)
            .map(|b| (b.addr, b.size))
            .collect()
    }

    /// Whether `[addr, addr + size)` lies inside one global free block (so its
    /// memory may be unmapped).
    pub fn is_global_free(&self, addr: u64, size: u64) -> bool {
        self.global_free_run(addr, size).is_some()
    }

    /// Turns `[addr, addr + size)`, inside one global free block, back into
    /// unbacked addresses (its memory is about to be unmapped). Returns false
    /// if the range is not global free memory.
    pub fn unback(&mut self, addr: u64, size: u64) -> bool {
        let Some(i) = self.run_holding(addr) else { return false };
        let b = *self.node(i);
        if b.state != State::Free(Owner::Global) || addr + size > b.addr + b.size || size == 0 {
            return false;
        }
        let class = usize::from(b.class);
        self.unindex(class, b.addr, b.size, Owner::Global);
        let mut m = i;
        if addr > b.addr {
            m = self.split(i, addr - b.addr);
            self.index_rest(class, b.addr, addr - b.addr, Owner::Global);
        }
        let end = addr + size;
        if end < b.addr + b.size {
            self.split(m, size);
            self.index_rest(class, end, b.addr + b.size - end, Owner::Global);
        }
        self.reserved -= size;
        self.set_state(m, State::Unbacked);
        self.node_mut(m).freed = 0;
        self.merge_unbacked(m);
        true
    }

    /// Makes `[addr, addr + size)`, inside one global free block, shadowed:
    /// its physical memory is about to be used at another address. Returns
    /// false if the range is not global free memory.
    pub fn shadow(&mut self, addr: u64, size: u64) -> bool {
        self.shadow_where(addr, size, |state| state == State::Free(Owner::Global)).is_some()
    }

    /// [`Heap::shadow`] for memory that stream `stream` may use at once:
    /// `[addr, addr + size)` inside one free block that is global or
    /// pending on that stream. Returns the block's owner (a pending owner:
    /// the memory is still in use by that stream's work queued before the
    /// free, so its physical memory may only serve that stream, after that
    /// work, until the free completes), or None if the range is not such
    /// memory.
    pub fn shadow_usable(&mut self, addr: u64, size: u64, stream: u64) -> Option<Owner> {
        self.shadow_where(addr, size, |state| usable_by(state, stream))
    }

    /// Makes `[addr, addr + size)`, inside one free block whose state `ok`
    /// accepts, shadowed; returns the block's owner.
    fn shadow_where(&mut self, addr: u64, size: u64, ok: impl Fn(State) -> bool) -> Option<Owner> {
        let b = *self.node(self.run_holding(addr)?);
        if !ok(b.state) || addr + size > b.addr + b.size || size == 0 {
            return None;
        }
        let owner = self.take_range(addr, size)?;
        self.allocated -= size;
        let i = self.block_at(addr).expect("taken above");
        self.set_state(i, State::Shadowed);
        self.reserved -= size;
        Some(owner)
    }

    /// [`Heap::unshadow_part`], the memory freed as `owner` had freed it
    /// (pending on its stream until that free completes, or global).
    pub fn unshadow_part_as(&mut self, addr: u64, size: u64, owner: Owner) -> bool {
        self.cut_out(addr, size, State::Shadowed).is_some() && self.unshadow_as(addr, size, owner)
    }

    /// Turns the shadowed block at `addr` (of `size` bytes) back into global
    /// free memory (its physical memory is used here again), coalescing.
    pub fn unshadow(&mut self, addr: u64, size: u64) -> bool {
        self.unshadow_as(addr, size, Owner::Global)
    }

    /// [`Heap::unshadow`], the memory free as `owner` (global, or pending
    /// on a stream).
    fn unshadow_as(&mut self, addr: u64, size: u64, owner: Owner) -> bool {
        match self.block_at(addr) {
            Some(i) if self.node(i).state == State::Shadowed && self.node(i).size == size => {
                self.set_state(i, State::Allocated)
            }
            _ => return false,
        }
        self.allocated += size;
        self.reserved += size;
        self.release_block(addr, owner)
    }

    /// [`Heap::unshadow`] for `[addr, addr + size)` inside one shadowed
    /// block, which is split around it first (the rest stays shadowed).
    pub fn unshadow_part(&mut self, addr: u64, size: u64) -> bool {
        self.cut_out(addr, size, State::Shadowed).is_some() && self.unshadow(addr, size)
    }

    /// Whether `[addr, addr + size)` lies inside one shadowed block.
    pub fn is_shadowed_part(&self, addr: u64, size: u64) -> bool {
        self.run_holding(addr)
            .map(|i| self.node(i))
            .is_some_and(|b| b.state == State::Shadowed && addr + size <= b.addr + b.size)
    }

    /// Turns the shadowed block at `addr` (of `size` bytes) into unbacked
    /// addresses (that mapping is about to go), merging with unbacked
    /// neighbours.
    pub fn unback_shadowed(&mut self, addr: u64, size: u64) -> bool {
        match self.block_at(addr) {
            Some(i) if self.node(i).state == State::Shadowed && self.node(i).size == size => {
                self.set_state(i, State::Unbacked);
                self.node_mut(i).freed = 0;
                self.merge_unbacked(i);
                true
            }
            _ => false,
        }
    }

    /// Whether the block at `addr` is shadowed and `size` bytes long.
    pub fn is_shadowed(&self, addr: u64, size: u64) -> bool {
        self.block_at(addr)
            .map(|i| self.node(i))
            .is_some_and(|b| b.state == State::Shadowed && b.size == size)
    }

    // ---- taking blocks -------------------------------------------------------------

    /// Takes exactly `[addr, addr + size)` out of the free block that holds
    /// it (which keeps its owner for the rest) and marks it allocated.
    pub fn take_range(&mut self, addr: u64, size: u64) -> Option<Owner> {
        let i = self.run_holding(addr)?;
        self.take_in(i, addr, size)
    }

    /// Takes `size` bytes from the start of the free block at `addr` (found by a
    /// best-fit call) and marks them allocated; the rest stays free with the
    /// same owner. Returns the owner the bytes had.
    pub fn take(&mut self, addr: u64, size: u64) -> Option<Owner> {
        let i = self.block_at(addr)?;
        self.take_in(i, addr, size)
    }

    /// Takes `[addr, addr + size)` out of free block `i`, which holds it.
    fn take_in(&mut self, i: u32, addr: u64, size: u64) -> Option<Owner> {
        let b = *self.node(i);
        let State::Free(owner) = b.state else { return None };
        if addr < b.addr || addr + size > b.addr + b.size || size == 0 || size % BLOCK_ALIGN != 0 {
            return None;
        }
        let end = addr + size;
        let m = self.carve(i, addr, end, owner);
        self.node_mut(m).freed = 0;
        self.allocated += size;
        self.note_place(addr, size);
        if owner != Owner::Global {
            self.end_lending(addr, end);
        }
        Some(owner)
    }

    /// Marks `[from, to)` of free run `i` (owned by `owner`, which holds it)
    /// allocated; what is before and after it stays free with the same
    /// owner, indexed. Returns the allocated block's slot (not counted in
    /// the allocated bytes).
    fn carve(&mut self, i: u32, from: u64, to: u64, owner: Owner) -> u32 {
        let b = *self.node(i);
        let class = usize::from(b.class);
        self.unindex(class, b.addr, b.size, owner);
        // The front stays free (it keeps its start and ends earlier), or the
        // run starts with the block. The run's key (its end) goes to the rest
        // below, or away if nothing is left after the block.
        let m = if from > b.addr {
            self.index_rest(class, b.addr, from - b.addr, owner);
            let m = self.split_raw(i, from - b.addr, State::Allocated);
            self.runs.insert(from, i);
            m
        } else {
            self.node_mut(i).state = State::Allocated;
            i
        };
        if to < b.addr + b.size {
            let rest = self.split_raw(m, to - from, State::Free(owner));
            self.runs.insert(b.addr + b.size, rest);
            self.index_rest(class, to, b.addr + b.size - to, owner);
        } else {
            self.runs.remove(&to);
        }
        m
    }

    /// Removes a reservation whose addresses are all unbacked; false if any
    /// memory is still backed.
    pub fn remove_reservation(&mut self, base: u64) -> bool {
        let Some(seg) = self.segments.get(&base).copied() else { return false };
        match self.block_at(base) {
            Some(i) if self.node(i).state == State::Unbacked && self.node(i).size == seg.size => {
                self.runs.remove(&(base + seg.size));
                self.unlink(i);
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

    /// Notes a group: physical memory at `[start, start + len)` that goes
    /// back to the backend (or moves) only whole (see `backing/`).
    pub fn note_group(&mut self, start: u64, len: u64) {
        if let Some(old) = self.groups.insert(start, len) {
            self.count_group_len(old, false);
        }
        self.count_group_len(len, true);
    }

    /// Forgets the group at `start` (its memory was unmapped).
    pub fn forget_group(&mut self, start: u64) {
        if let Some(len) = self.groups.remove(&start) {
            self.count_group_len(len, false);
        }
    }

    /// Counts a group of `len` bytes in (`add`) or out of
    /// [`Heap::least_group`]'s multiset.
    fn count_group_len(&mut self, len: u64, add: bool) {
        if add {
            *self.group_lens.entry(len).or_default() += 1;
        } else if let std::collections::btree_map::Entry::Occupied(mut e) = self.group_lens.entry(len) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
        self.least_group = self.group_lens.keys().next().copied().unwrap_or(u64::MAX);
    }

    /// How many times memory has turned global free so far: where the count
    /// has not changed since a look at the heap, no memory that was not
    /// global free then is now (memory turns free only through
    /// [`Heap::release_block`]'s merge into the free index, which this
    /// counts where the result is global). Lending (`lend.rs`) uses it to
    /// skip looking for loans gone wholly free.
    pub fn global_frees_indexed(&self) -> u64 {
        self.global_indexed
    }

    /// Whether a block at `[at, at + want)`, inside the free run starting
    /// at `run` of `len` bytes, would take part of a group that lies wholly
    /// in the run without filling it.
    fn breaks_free_group(&self, run: u64, len: u64, at: u64, want: u64) -> bool {
        // (A run shorter than every group holds none wholly: no look at the
        // groups, which on the slow path costs a walk of their tree.)
        if len < self.least_group {
            return false;
        }
        let end = at + want;
        for (&start, &glen) in self.groups.range(..end).rev() {
            if start + glen <= at {
                break;
            }
            let wholly_free = start >= run && start + glen <= run + len;
            let filled = at <= start && start + glen <= end;
            if wholly_free && !filled {
                return true;
            }
        }
        false
    }

    /// Best fit that keeps wholly free groups whole: among the free blocks
    /// of `class` of at least `want` bytes that `stream` may take at once
    /// (global ones and its own pending ones), the smallest, within the
    /// `GROUP_KEEPING_CANDIDATES` smallest of each kind, where a block of
    /// `want` bytes fits at the start or at the end without taking part of a
    /// group that is wholly free (it may fill one). Returns the address to
    /// take the block at ([`Heap::take_range`]); None where no group is
    /// mapped or every candidate would break one (plain best fit then).
    ///
    /// Why: a group (one physical allocation behind a growth of 64 MiB or
    /// more) goes back to the backend, or moves under a request, only when
    /// all of it is free. A small block put in a wholly free group keeps
    /// the rest of it from either for as long as the block lives; put beside
    /// live blocks instead, it uses memory that could not go anywhere
    /// anyway. Replayed variable-length inference (three recorded runs) held
    /// 1.047, 1.046 and 1.018 of its peak after the warm-up with plain best
    /// fit and 1.012, 1.001 and 1.016 with this.
    pub fn best_fit_keeping_groups(&self, class: usize, stream: u64, want: u64) -> Option<u64> {
        self.find_keeping_groups(class, stream, want).map(|(at, _)| at)
    }

    /// Takes the block [`Heap::best_fit_keeping_groups`] finds: its address.
    pub fn take_keeping_groups(&mut self, class: usize, stream: u64, want: u64) -> Option<u64> {
        let (at, run) = self.find_keeping_groups(class, stream, want)?;
        let i = self.block_at(run)?;
        self.take_in(i, at, want).map(|_| at)
    }

    /// [`Heap::best_fit_keeping_groups`]: where to take the block, and the
    /// start of the free run it is taken from.
    fn find_keeping_groups(&self, class: usize, stream: u64, want: u64) -> Option<(u64, u64)> {
        if self.groups.is_empty() {
            return None;
        }
        // ((address to take the block at, the run's start), the run's size)
        let first_fit = |set: Option<&FreeSet>| {
            let set = set?;
            set.at_least(want).take(GROUP_KEEPING_CANDIDATES).find_map(|&(len, run)| {
                if !self.breaks_free_group(run, len, run, want) {
                    return Some(((run, run), len));
                }
                let at = run + len - want;
                (!self.breaks_free_group(run, len, at, want)).then_some(((at, run), len))
            })
        };
        let global = first_fit(self.global_free.get(class));
        let own = first_fit(self.pending.get(&stream).and_then(|p| p.sets.get(class)));
        smaller_run(global, own).map(|(place, _)| place)
    }

    /// The lowest-addressed free block of size class `class` of at least
    /// `want` bytes that `stream` may take at once (global, or pending on
    /// `stream`): zone placement packs its blocks from the bottom.
    pub fn lowest_fit(&self, class: usize, stream: u64, want: u64) -> Option<u64> {
        let mut best: Option<u64> = None;
        let mut look = |set: Option<&FreeSet>| {
            for &(_, addr) in set.into_iter().flat_map(|s| s.at_least(want)) {
                if best.is_none_or(|b| addr < b) {
                    best = Some(addr);
                }
            }
        };
        look(self.global_free.get(class));
        look(self.pending.get(&stream).and_then(|p| p.sets.get(class)));
        best
    }

    /// The smallest global free block of at least `size` bytes (size class 0).
    pub fn best_fit_global(&self, size: u64) -> Option<(u64, u64)> {
        self.best_fit_global_in(0, size)
    }

    /// The smallest global free block of at least `size` bytes in ranges of
    /// size class `class`.
    pub fn best_fit_global_in(&self, class: usize, size: u64) -> Option<(u64, u64)> {
        self.global_free.get(class)?.at_least(size).next().map(|&(s, a)| (a, s))
    }

    /// The smallest block pending on `stream` of at least `size` bytes whose
    /// tag passes `eligible`.
    pub fn best_fit_pending(
        &self,
        stream: u64,
        size: u64,
        eligible: impl FnMut(u64) -> bool,
    ) -> Option<(u64, u64)> {
        self.best_fit_pending_in(0, stream, size, eligible)
    }

    /// [`Heap::best_fit_pending`] in ranges of size class `class`.
    pub fn best_fit_pending_in(
        &self,
        class: usize,
        stream: u64,
        size: u64,
        mut eligible: impl FnMut(u64) -> bool,
    ) -> Option<(u64, u64)> {
        let set = self.pending.get(&stream)?.sets.get(class)?;
        for &(s, a) in set.at_least(size) {
            if let Some(Block { state: State::Free(Owner::Stream { tag, .. }), .. }) =
                self.block_at(a).map(|i| self.node(i))
            {
                if eligible(*tag) {
                    return Some((a, s));
                }
            }
        }
        None
    }

    /// The tag of the pending block at `addr`.
    pub fn pending_tag(&self, addr: u64) -> Option<(u64, u64)> {
        match self.node(self.block_at(addr)?).state {
            State::Free(Owner::Stream { stream, tag }) => Some((stream, tag)),
            _ => None,
        }
    }

    /// Remembers where blocks of each size go, so that [`Heap::place_fit`]
    /// can put the next block of a size where one went before (a workload
    /// that repeats then keeps its layout).
    pub fn keep_places(&mut self) {
        self.places.get_or_insert_with(AddrMap::default);
    }

    /// A recent place of a block of `size` bytes in size class `class` whose
    /// bytes are all global free, or pending on `stream` (free for it). With
    /// `edge_only`, only a place at the start or the end of its free run:
    /// taking it leaves one free run, not two (a place in the middle of a
    /// large run would cut it where best fit would not; on replayed PyTorch
    /// runs pools that only grow hold 1-7% less memory this way, while pools
    /// that move memory keep every place, so that their layouts repeat).
    pub fn place_fit(&self, class: usize, size: u64, stream: u64, edge_only: bool) -> Option<u64> {
        self.find_place(class, size, stream, edge_only).map(|(at, _)| at)
    }

    /// Takes the place [`Heap::place_fit`] finds: its address.
    pub fn take_place(&mut self, class: usize, size: u64, stream: u64, edge_only: bool) -> Option<u64> {
        let (at, i) = self.find_place(class, size, stream, edge_only)?;
        self.take_in(i, at, size).map(|_| at)
    }

    /// [`Heap::place_fit`]: the place and the free block holding it.
    fn find_place(&self, class: usize, size: u64, stream: u64, edge_only: bool) -> Option<(u64, u32)> {
        let places = self.places.as_ref()?.get(&size)?;
        places.as_slice().iter().rev().find_map(|&at| {
            // A block that starts there (a hash lookup) is the one; else the
            // run holding it, if one does.
            let i = self.block_at(at).or_else(|| self.run_holding(at))?;
            let b = self.node(i);
            let a = b.addr;
            let edge = !edge_only || at == a || at + size == a + b.size;
            (usable_by(b.state, stream) && at + size <= a + b.size && edge && usize::from(b.class) == class)
                .then_some((at, i))
        })
    }

    fn note_place(&mut self, addr: u64, size: u64) {
        let Some(all) = self.places.as_mut() else { return };
        if all.len() >= PLACE_SIZES && !all.contains_key(&size) {
            all.clear();
        }
        all.entry(size).or_default().note(addr);
    }

    /// Where the last blocks of `size` bytes went (most recent last).
    pub fn places_of(&self, size: u64) -> Vec<u64> {
        self.places.as_ref().and_then(|p| p.get(&size)).map_or_else(Vec::new, |p| p.as_slice().to_vec())
    }

    /// The size of the allocated block at `addr`, if there is one.
    pub fn allocated_size(&self, addr: u64) -> Option<u64> {
        let b = self.node(self.block_at(addr)?);
        (b.state == State::Allocated).then_some(b.size)
    }

    /// The allocated block containing `addr`: (base, size).
    pub fn allocated_block_containing(&self, addr: u64) -> Option<(u64, u64)> {
        let b = self.node(self.holding(addr)?);
        (b.state == State::Allocated).then_some((b.addr, b.size))
    }

    // ---- freeing blocks ------------------------------------------------------------

    /// Marks the allocated block at `addr` free with `owner` and coalesces it
    /// (a stream's pending block absorbs global neighbours, see
    /// `merge_owner`). Returns false if there is no allocated block there.
    pub fn release_block(&mut self, addr: u64, owner: Owner) -> bool {
        self.release_block_as(addr, owner, true)
    }

    /// [`Heap::release_block`]; with `absorb` false, global and pending
    /// blocks stay apart.
    fn release_block_as(&mut self, addr: u64, owner: Owner, absorb: bool) -> bool {
        let Some(i) = self.block_at(addr) else { return false };
        let block = *self.node(i);
        if block.state != State::Allocated {
            return false;
        }
        self.allocated -= block.size;
        // Every block merged is of the same segment (the list's), so of the
        // same class.
        let class = usize::from(block.class);
        // The block that ends up holding the run, its bytes and its owner.
        // The runs merged lose their keys, except the last after it, whose
        // key (the end) the merged run keeps.
        let (mut m, mut size, mut owner) = (i, block.size, owner);
        // Merge with the previous blocks (absorbing a global block can bring
        // a pending block of the same stream next to this one: a promotion
        // leaves them apart).
        loop {
            let p_i = self.node(m).prev;
            if p_i == NIL {
                break;
            }
            let p = *self.node(p_i);
            let State::Free(p_owner) = p.state else { break };
            let Some(merged) = merge(owner, p_owner, absorb) else { break };
            let start = self.node(m).addr;
            self.note_lent((start, size, owner), (p.addr, p.size, p_owner), merged);
            self.unindex(class, p.addr, p.size, p_owner);
            self.runs.remove(&start);
            self.unlink(m);
            m = p_i;
            size += p.size;
            owner = merged;
        }
        // Merge with the next blocks.
        let mut kept_key = None;
        loop {
            let n_i = self.node(m).next;
            if n_i == NIL {
                break;
            }
            let n = *self.node(n_i);
            let State::Free(n_owner) = n.state else { break };
            let Some(merged) = merge(owner, n_owner, absorb) else { break };
            let start = self.node(m).addr;
            self.note_lent((start, size, owner), (n.addr, n.size, n_owner), merged);
            self.unindex(class, n.addr, n.size, n_owner);
            if let Some(key) = kept_key.replace(n.addr + n.size) {
                self.runs.remove(&key);
            }
            self.unlink(n_i);
            size += n.size;
            owner = merged;
        }
        self.frees += 1;
        let frees = self.frees;
        let b = self.node_mut(m);
        b.size = size;
        b.state = State::Free(owner);
        b.freed = frees;
        let start = b.addr;
        // (In place of the key of the last run merged after it, if any.)
        self.runs.insert(start + size, m);
        self.index(class, start, size, owner);
        true
    }

    /// Two free runs (addr, len, owner) merge into one owned by `merged`:
    /// the global one, if absorbed by a stream, is lent to that stream.
    fn note_lent(&mut self, a: (u64, u64, Owner), b: (u64, u64, Owner), merged: Owner) {
        let Owner::Stream { stream, .. } = merged else { return };
        for (addr, len, owner) in [a, b] {
            if owner == Owner::Global && len > 0 {
                self.lent.insert(addr, (addr + len, stream));
            }
        }
    }

    /// `[from, to)` is no longer global memory lent to a pending block (it
    /// was taken, or the block turned global).
    fn end_lending(&mut self, from: u64, to: u64) {
        // Nothing lent overlaps: the nearest range starting before `to` ends
        // at or before `from` (the ranges are disjoint).
        if self.lent.range(..to).next_back().is_none_or(|(_, &(end, _))| end <= from) {
            return;
        }
        let mut split: Vec<(u64, (u64, u64))> = Vec::new();
        let hits: Vec<(u64, (u64, u64))> = self
            .lent
            .range(..to)
            .rev()
            .take_while(|&(_, &(end, _))| end > from)
            .map(|(&a, &v)| (a, v))
            .collect();
        for (a, (end, stream)) in hits {
            self.lent.remove(&a);
            if a < from {
                split.push((a, (from, stream)));
            }
            if end > to {
                split.push((to, (end, stream)));
            }
        }
        self.lent.extend(split);
    }

    /// Gives back to every stream the global memory that pending blocks of
    /// streams other than `except` absorbed (see `merge`): each such range
    /// becomes a global free block again, and the pending parts around it
    /// keep their owner. A stream that would otherwise grow the pool, or run
    /// out of memory, calls this first, and so does a trim. Returns the
    /// bytes given back.
    pub fn reclaim_lent(&mut self, except: Option<u64>) -> u64 {
        let ranges: Vec<(u64, u64)> = self
            .lent
            .iter()
            .filter(|(_, (_, s))| Some(*s) != except)
            .map(|(&a, &(end, _))| (a, end))
            .collect();
        let mut bytes = 0;
        for (from, to) in ranges {
            self.lent.remove(&from);
            let Some(i) = self.run_holding(from) else { continue };
            let b = *self.node(i);
            let State::Free(owner @ Owner::Stream { .. }) = b.state else { continue };
            if to > b.addr + b.size {
                continue;
            }
            self.carve(i, from, to, owner);
            // Freed as global memory, merging with global neighbours.
            self.allocated += to - from;
            self.release_block_as(from, Owner::Global, false);
            bytes += to - from;
        }
        bytes
    }

    /// Makes every block pending on `stream` with a tag below `completed_below`
    /// global (its free has completed), coalescing with global neighbours.
    /// Returns the bytes made global.
    pub fn promote(&mut self, stream: u64, completed_below: u64) -> u64 {
        let Some(pending) = self.pending.get(&stream) else { return 0 };
        let ready: Vec<u64> = pending
            .sets
            .iter()
            .flatten()
            .filter(|&&(_, a)| {
                self.block_at(a).map(|i| self.node(i)).is_some_and(
                    |b| matches!(b.state, State::Free(Owner::Stream { tag, .. }) if tag < completed_below),
                )
            })
            .map(|&(_, a)| a)
            .collect();
        let mut bytes = 0;
        for addr in ready {
            let Some(i) = self.block_at(addr) else { continue };
            let block = *self.node(i);
            let State::Free(owner) = block.state else { continue };
            self.unindex(usize::from(block.class), addr, block.size, owner);
            self.set_state(i, State::Allocated);
            self.allocated += block.size;
            bytes += block.size;
            self.end_lending(addr, addr + block.size);
            self.release_block_as(addr, Owner::Global, false);
        }
        bytes
    }

    /// Segments that are one global free block (nothing live, nothing pending).
    pub fn releasable_segments(&self) -> Vec<Segment> {
        self.segments
            .values()
            .filter(|s| {
                self.block_at(s.base)
                    .map(|i| self.node(i))
                    .is_some_and(|b| b.size == s.size && b.state == State::Free(Owner::Global))
            })
            .copied()
            .collect()
    }

    /// Removes a releasable segment (see [`Heap::releasable_segments`]).
    pub fn remove_segment(&mut self, base: u64) -> Option<Segment> {
        let seg = *self.segments.get(&base)?;
        let i = self.block_at(base)?;
        let block = *self.node(i);
        if block.size != seg.size || block.state != State::Free(Owner::Global) {
            return None;
        }
        self.unindex(usize::from(block.class), base, block.size, Owner::Global);
        self.runs.remove(&(base + block.size));
        self.unlink(i);
        self.segments.remove(&base);
        self.reserved -= seg.size;
        Some(seg)
    }

    /// Adds the free block at `addr` to the free index of its owner, in
    /// size class `class` (its segment's): memory that turned free (counted
    /// in [`Heap::global_frees_indexed`] where it is global).
    fn index(&mut self, class: usize, addr: u64, size: u64, owner: Owner) {
        if owner == Owner::Global {
            self.global_indexed += 1;
        }
        self.index_rest(class, addr, size, owner);
    }

    /// [`Heap::index`] for what is left of a free block a part was cut out
    /// of: no memory turned free.
    fn index_rest(&mut self, class: usize, addr: u64, size: u64, owner: Owner) {
        match owner {
            Owner::Global => {
                self.global_free[class].insert((size, addr));
                self.global_free_bytes += size;
            }
            Owner::Stream { stream, .. } => {
                let p = self.pending.entry(stream).or_default();
                p.sets[class].insert((size, addr));
                p.bytes += size;
            }
        }
    }

    /// Removes the free block at `addr` from the free index of its owner,
    /// in size class `class` (its segment's).
    fn unindex(&mut self, class: usize, addr: u64, size: u64, owner: Owner) {
        match owner {
            Owner::Global => {
                self.global_free[class].remove(&(size, addr));
                self.global_free_bytes -= size;
            }
            Owner::Stream { stream, .. } => {
                if let Some(p) = self.pending.get_mut(&stream) {
                    p.sets[class].remove(&(size, addr));
                    p.bytes -= size;
                    if p.bytes == 0 {
                        self.pending.remove(&stream);
                    }
                }
            }
        }
    }

    /// Every block in address order: (address, size, kind), for `layout.rs`
    /// (an allocated block reads [`super::layout::RunKind::Live`]).
    pub fn blocks_in_order(&self) -> impl Iterator<Item = (u64, u64, super::layout::RunKind)> + '_ {
        use super::layout::RunKind;
        self.segments.values().flat_map(move |seg| self.walk(self.block_at(seg.base))).map(|b| {
            let kind = match b.state {
                State::Allocated => RunKind::Live,
                State::Free(Owner::Global) => RunKind::Free,
                State::Free(Owner::Stream { .. }) => RunKind::PendingFree,
                State::Unbacked | State::Shadowed => RunKind::Unbacked,
            };
            (b.addr, b.size, kind)
        })
    }

    /// Checks every invariant (for tests): blocks tile each segment and are
    /// linked in order, the address map and the runs match the blocks,
    /// indexes match the free blocks, no two adjacent compatible free
    /// blocks, totals add up.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mut allocated = 0;
        let mut global_free = 0;
        let mut reserved = 0;
        let (mut blocks, mut runs, mut free_blocks) = (0usize, 0usize, 0usize);
        for seg in self.segments.values() {
            reserved += seg.size;
            let Some(first) = self.block_at(seg.base) else {
                return Err(format!("segment {:#x} has no first block", seg.base));
            };
            if self.node(first).prev != NIL {
                return Err(format!("segment {:#x}: its first block has a previous one", seg.base));
            }
            let mut at = seg.base;
            let mut prev: Option<(u32, State)> = None;
            let mut i = first;
            loop {
                let b = self.node(i);
                let a = b.addr;
                blocks += 1;
                if a != at {
                    return Err(format!("gap or overlap at {a:#x} (expected {at:#x})"));
                }
                if self.block_at(a) != Some(i) {
                    return Err(format!("block {a:#x} is not in the address map"));
                }
                if b.prev != prev.map_or(NIL, |p| p.0) {
                    return Err(format!("block {a:#x}: its previous link is wrong"));
                }
                if usize::from(b.class) != seg.class {
                    return Err(format!(
                        "block {a:#x} has class {} in a segment of class {}",
                        b.class, seg.class
                    ));
                }
                if b.state != State::Allocated {
                    runs += 1;
                    if self.runs.get(&(a + b.size)) != Some(&i) {
                        return Err(format!("block {a:#x} ({:?}) is not among the runs", b.state));
                    }
                }
                match b.state {
                    State::Unbacked => {
                        reserved -= b.size;
                        if prev.map(|p| p.1) == Some(State::Unbacked) {
                            return Err(format!("adjacent unbacked blocks not merged at {a:#x}"));
                        }
                    }
                    State::Shadowed => reserved -= b.size,
                    State::Allocated => allocated += b.size,
                    State::Free(o) => {
                        free_blocks += 1;
                        let indexed = match o {
                            Owner::Global => {
                                global_free += b.size;
                                self.global_free[seg.class].contains(&(b.size, a))
                            }
                            Owner::Stream { stream, .. } => self
                                .pending
                                .get(&stream)
                                .is_some_and(|p| p.sets[seg.class].contains(&(b.size, a))),
                        };
                        if !indexed {
                            return Err(format!("free block {a:#x} is not indexed"));
                        }
                        if let Some((_, State::Free(p))) = prev {
                            if merge(o, p, false).is_some() {
                                return Err(format!(
                                    "adjacent free blocks not merged at {a:#x}: {p:?} then {o:?}"
                                ));
                            }
                        }
                    }
                }
                prev = Some((i, b.state));
                at = a + b.size;
                if b.next == NIL {
                    break;
                }
                if blocks > self.nodes.len() {
                    return Err(format!("segment {:#x}: its list has a cycle", seg.base));
                }
                i = b.next;
            }
            if at != seg.base + seg.size {
                return Err(format!("segment {:#x} not covered", seg.base));
            }
        }
        if blocks != self.at.len() || blocks + self.spare.len() != self.nodes.len() || runs != self.runs.len()
        {
            return Err(format!(
                "{blocks} blocks in the lists, {} in the address map, {} slots ({} spare), {runs} runs of {} listed",
                self.at.len(),
                self.nodes.len(),
                self.spare.len(),
                self.runs.len()
            ));
        }
        for (stream, p) in self.pending.iter() {
            let bytes: u64 = p.sets.iter().flatten().map(|&(size, _)| size).sum();
            if bytes != p.bytes || bytes == 0 {
                return Err(format!("stream {stream}: {} pending bytes counted, {bytes} indexed", p.bytes));
            }
        }
        let indexed_blocks = self.global_free.iter().map(|s| s.len()).sum::<usize>()
            + self.pending.values().flat_map(|p| &p.sets).map(|s| s.len()).sum::<usize>();
        if indexed_blocks != free_blocks {
            return Err(format!("{indexed_blocks} indexed, {free_blocks} free blocks"));
        }
        if allocated != self.allocated || global_free != self.global_free_bytes || reserved != self.reserved {
            return Err("totals disagree".into());
        }
        for (&from, &(to, stream)) in &self.lent {
            let holder = self.run_holding(from).map(|i| self.node(i));
            let inside = holder.is_some_and(|b| {
                to <= b.addr + b.size
                    && matches!(b.state, State::Free(Owner::Stream { stream: s, .. }) if s == stream)
            });
            if !inside || to <= from {
                return Err(format!(
                    "lent range {from:#x}..{to:#x} is not inside a pending block of stream {stream}"
                ));
            }
        }
        Ok(())
    }
}

/// Whether a block in `state` is free for `stream` with no wait.
fn usable_by(state: State, stream: u64) -> bool {
    match state {
        State::Free(Owner::Global) => true,
        State::Free(Owner::Stream { stream: s, .. }) => s == stream,
        _ => false,
    }
}

/// The owner of two adjacent free blocks merged into one, if they merge. A
/// stream's pending block absorbs global free blocks next to it (`absorb`;
/// a promotion does not, or completed frees would turn pending again): the
/// run is then free for that stream at once, as each part was, and for the
/// others once the newest free in it completes. A stream that frees
/// continuously (a GPU running ahead of the host) thus keeps whole runs
/// where its recent frees and the free memory around them would otherwise
/// stay apart until the frees complete, and best fit and growth see the
/// whole run. The absorbed memory is only lent: another stream that needs
/// it takes it back ([`Heap::reclaim_lent`]).
fn merge(a: Owner, b: Owner, absorb: bool) -> Option<Owner> {
    match (a, b) {
        (Owner::Global, Owner::Global) => Some(Owner::Global),
        (Owner::Stream { stream: s, tag: t }, Owner::Stream { stream: s2, tag: t2 }) if s == s2 => {
            Some(Owner::Stream { stream: s, tag: t.max(t2) })
        }
        (Owner::Global, o @ Owner::Stream { .. }) | (o @ Owner::Stream { .. }, Owner::Global) if absorb => {
            Some(o)
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
        // The pending block absorbs the global remainder next to it: stream 7
        // may use the whole run at once, the others once the free completes.
        assert_eq!(h.best_fit_global(MB), None);
        assert_eq!(h.best_fit_pending(7, 2 * MB, |_| true), Some((a, 2 * MB)));
        assert_eq!(h.best_fit_pending(7, MB, |t| t < 3), None);
        assert_eq!(h.usable_free_ending_at(a + 2 * MB, 7), 2 * MB);
        assert_eq!(h.usable_free_ending_at(a + 2 * MB, 8), 0);
        assert!(h.releasable_segments().is_empty());
        assert_eq!(h.promote(7, 3), 0);
        assert_eq!(h.promote(7, 4), 2 * MB);
        h.check_invariants().unwrap();
        assert_eq!(h.releasable_segments().len(), 1);
    }

    #[test]
    fn a_promoted_block_is_not_absorbed_again() {
        let mut h = Heap::new();
        h.add_segment(0x100_0000, 2 * MB);
        let (a, _) = h.best_fit_global(2 * MB).unwrap();
        h.take(a, MB);
        h.take(a + MB, MB);
        h.release_block(a, Owner::Stream { stream: 7, tag: 3 });
        h.release_block(a + MB, Owner::Stream { stream: 8, tag: 1 });
        h.check_invariants().unwrap();
        // Stream 7's free completes; stream 8's does not: the completed
        // block turns global and stays so beside stream 8's pending one.
        assert_eq!(h.promote(7, 4), MB);
        h.check_invariants().unwrap();
        assert_eq!(h.best_fit_global(MB), Some((a, MB)));
        assert_eq!(h.best_fit_pending(8, MB, |_| true), Some((a + MB, MB)));
        // Stream 8's completes: one global run.
        assert_eq!(h.promote(8, 2), MB);
        h.check_invariants().unwrap();
        assert_eq!(h.best_fit_global(2 * MB), Some((a, 2 * MB)));
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
    fn a_run_shorter_than_every_group_breaks_none_as_the_plain_scan_finds() {
        // Groups (in slots of 16 units, so none overlap, as physical pieces
        // do not) noted, replaced and forgotten at random; every run and
        // placement asked about gives what a scan of every group gives.
        let (g, base) = (2 * MB, 1u64 << 30);
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let plain = |h: &Heap, run: u64, len: u64, at: u64, want: u64| {
            h.groups.iter().any(|(&start, &glen)| {
                let wholly_free = start >= run && start + glen <= run + len;
                let filled = at <= start && start + glen <= at + want;
                let meets = start < at + want && at < start + glen;
                wholly_free && meets && !filled
            })
        };
        let mut h = Heap::new();
        assert_eq!(h.least_group, u64::MAX);
        // A run exactly as long as the shortest group, holding it: a smaller
        // block breaks it, the whole group does not; one unit less holds none.
        h.note_group(base, 4 * g);
        h.note_group(base + 16 * g, 8 * g);
        assert!(h.breaks_free_group(base, 4 * g, base, g));
        assert!(!h.breaks_free_group(base, 4 * g, base, 4 * g));
        assert!(!h.breaks_free_group(base, 3 * g, base, g));
        h.forget_group(base);
        assert_eq!(h.least_group, 8 * g);
        assert!(h.breaks_free_group(base + 16 * g, 8 * g, base + 23 * g, g));
        h.forget_group(base + 16 * g);
        for round in 0..400 {
            let start = base + (next() % 8) * 16 * g;
            match next() % 3 {
                0 | 1 => h.note_group(start, (1 + next() % 16) * g),
                _ => h.forget_group(start),
            }
            let least = h.groups.values().copied().min().unwrap_or(u64::MAX);
            assert_eq!(h.least_group, least, "round {round}: the least group follows the notes");
            for _ in 0..20 {
                let run = base + (next() % 128) * g;
                let len = (1 + next() % 24) * g;
                let want = (1 + next() % (len / g)) * g;
                for at in [run, run + len - want] {
                    assert_eq!(
                        h.breaks_free_group(run, len, at, want),
                        plain(&h, run, len, at, want),
                        "round {round}: run {run:#x}+{len:#x}, block at {at:#x}+{want:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_count_of_global_frees_grows_only_where_memory_turns_global_free() {
        let mut h = Heap::new();
        h.add_segment(0x100_0000, 4 * MB);
        let n0 = h.global_frees_indexed();
        let a = h.take(0x100_0000, MB).map(|_| 0x100_0000).unwrap();
        let b = 0x100_0000 + MB;
        h.take(b, MB).unwrap();
        // Taking leaves the rest free as it was: not counted; nor is a free
        // on a stream.
        let n1 = h.global_frees_indexed();
        assert_eq!(n1, n0);
        assert!(h.release_block(a, Owner::Stream { stream: 3, tag: 1 }));
        assert_eq!(h.global_frees_indexed(), n1, "a pending free is no global free");
        // Its stream's frees complete: now it is.
        h.promote(3, 2);
        let n2 = h.global_frees_indexed();
        assert!(n2 > n1);
        assert!(h.release_block(b, Owner::Global));
        assert!(h.global_frees_indexed() > n2);
        assert!(h.is_global_free(a, 2 * MB));
        h.check_invariants().unwrap();
    }

    #[test]
    fn best_fit_keeps_wholly_free_groups_whole() {
        let base = 1u64 << 30;
        let mut h = Heap::new();
        h.add_reservation(base, 1024 * MB);
        assert_eq!(h.best_fit_keeping_groups(0, 1, MB), None, "no group: plain best fit");
        // Group G [0, 32) wholly free; group H [32, 160) with a live block at
        // [100, 160): one free run [0, 100) holding G.
        for (at, len) in [(0, 32), (32, 128)] {
            assert!(h.back(base + at * MB, len * MB));
            h.note_group(base + at * MB, len * MB);
        }
        assert!(h.take_range(base + 100 * MB, 60 * MB).is_some());
        // A small block goes to the run's end (beside the live block), not
        // into G; a block that fills G may take it.
        assert_eq!(h.best_fit_keeping_groups(0, 1, 8 * MB), Some(base + 92 * MB));
        assert_eq!(h.best_fit_keeping_groups(0, 1, 32 * MB), Some(base));
        // A smaller run that is a wholly free group (K [0, 16)) loses to a
        // larger one beside a live block (the tail of L [32, 160)).
        let mut two = Heap::new();
        two.add_reservation(base, 1024 * MB);
        for (at, len) in [(0, 16), (32, 128)] {
            assert!(two.back(base + at * MB, len * MB));
            two.note_group(base + at * MB, len * MB);
        }
        assert!(two.take_range(base + 32 * MB, 34 * MB).is_some());
        assert_eq!(two.best_fit_global(8 * MB), Some((base, 16 * MB)), "plain best fit takes K");
        assert_eq!(two.best_fit_keeping_groups(0, 1, 8 * MB), Some(base + 66 * MB));
        // The same for a run pending on the asking stream.
        let (stream, other) = (7, 8);
        assert!(two.take_range(base + 66 * MB, 94 * MB).is_some());
        assert!(two.release_block(base + 66 * MB, Owner::Stream { stream, tag: 1 }));
        assert_eq!(two.best_fit_keeping_groups(0, stream, 8 * MB), Some(base + 66 * MB));
        assert_eq!(
            two.best_fit_keeping_groups(0, other, 8 * MB),
            None,
            "another stream's pending run is not its own"
        );
        two.check_invariants().unwrap();
        // Where every candidate would break a wholly free group: none.
        let mut solo = Heap::new();
        solo.add_reservation(base, 256 * MB);
        assert!(solo.back(base, 128 * MB));
        solo.note_group(base, 128 * MB);
        assert_eq!(solo.best_fit_keeping_groups(0, 1, 8 * MB), None);
        assert_eq!(solo.best_fit_keeping_groups(0, 1, 128 * MB), Some(base));
        // A forgotten group (its memory unmapped) no longer counts.
        assert!(solo.unback(base, 128 * MB));
        solo.forget_group(base);
        assert_eq!(solo.best_fit_keeping_groups(0, 1, 8 * MB), None);
        h.check_invariants().unwrap();
        solo.check_invariants().unwrap();
    }

    /// Two reservations whose addresses meet (a pool's parts, or a range
    /// reserved later next to another) stay apart: a free run at the end
    /// of one is not joinable with a hole at the start of the other, while
    /// inside one reservation it is.
    #[test]
    fn free_runs_of_adjacent_reservations_are_not_joinable() {
        const MB: u64 = 1 << 20;
        let base = 1u64 << 40;
        let mut h = Heap::new();
        h.add_reservation_for(0, base, 8 * MB);
        h.add_reservation_for(1, base + 8 * MB, 8 * MB);
        // The first reservation's last 2 MB are free; the second is a hole.
        assert!(h.back(base + 6 * MB, 2 * MB));
        assert_eq!(h.usable_free_ending_at(base + 8 * MB, 0), 2 * MB, "the run ends where the hole starts");
        assert_eq!(h.joinable_free_ending_at(base + 8 * MB, 0), 0, "but lies in another reservation");
        // The same the other way: a free run at the second's start.
        assert!(h.back(base + 8 * MB, 2 * MB));
        assert!(h.unback(base + 6 * MB, 2 * MB));
        assert_eq!(h.usable_free_starting_at(base + 8 * MB, 0), 2 * MB);
        assert_eq!(h.joinable_free_starting_at(base + 8 * MB, 0), 0);
        // Inside one reservation: joinable.
        assert!(h.back(base + 2 * MB, 2 * MB));
        assert_eq!(h.joinable_free_ending_at(base + 4 * MB, 0), 2 * MB);
        assert_eq!(h.joinable_free_starting_at(base + 2 * MB, 0), 2 * MB);
        assert_eq!(h.joinable_free_ending_at(base + 4 * MB, 5), 2 * MB, "global memory is any stream's");
        h.check_invariants().unwrap();
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
        assert_eq!(h.usable_free_ending_at(base + 2 * MB, 0), MB);
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
    fn part_of_a_shadowed_block_is_used_again_and_the_rest_stays_shadowed() {
        let base = 1u64 << 30;
        let mut h = Heap::new();
        h.add_reservation(base, 64 * MB);
        assert!(h.back(base, 16 * MB));
        // 8 MiB in the middle are lent elsewhere: shadowed, not reserved.
        assert!(h.shadow(base + 4 * MB, 8 * MB));
        assert_eq!(h.reserved(), 8 * MB);
        assert!(h.is_shadowed_part(base + 6 * MB, 2 * MB));
        assert!(!h.is_shadowed_part(base + 10 * MB, 4 * MB), "runs past the shadowed block");
        // Its last 2 MiB come back: free again, merged with the free memory after.
        assert!(h.unshadow_part(base + 10 * MB, 2 * MB));
        assert_eq!(h.reserved(), 10 * MB);
        assert_eq!(h.global_free_run(base + 10 * MB, 6 * MB).map(|r| r.0), Some(6 * MB));
        // Then 2 MiB from its middle: the rest stays shadowed, in two blocks.
        assert!(h.unshadow_part(base + 6 * MB, 2 * MB));
        assert!(h.is_shadowed(base + 4 * MB, 2 * MB) && h.is_shadowed(base + 8 * MB, 2 * MB));
        assert!(!h.unshadow_part(base + 7 * MB, 2 * MB), "not shadowed any more");
        assert!(!h.unshadow_part(base, 2 * MB), "free memory is not shadowed");
        assert!(h.best_fit_global(3 * MB).is_some_and(|(a, _)| a != base + 4 * MB && a != base + 8 * MB));
        h.check_invariants().unwrap();
        assert!(h.unback_shadowed(base + 4 * MB, 2 * MB) && h.unback_shadowed(base + 8 * MB, 2 * MB));
        assert_eq!(h.reserved(), 12 * MB);
        h.check_invariants().unwrap();
        // Mapped straight into shadowed addresses (an alias's unused part):
        // never free, not reserved, and gone again with its mapping.
        assert!(h.back_shadowed(base + 20 * MB, 4 * MB));
        assert!(!h.back_shadowed(base + 22 * MB, 4 * MB), "not unbacked any more");
        assert!(h.is_shadowed(base + 20 * MB, 4 * MB));
        assert_eq!(h.reserved(), 12 * MB);
        assert!(h.best_fit_global(MB).is_none_or(|(a, _)| !(base + 20 * MB..base + 24 * MB).contains(&a)));
        h.check_invariants().unwrap();
        assert!(h.unback_shadowed(base + 20 * MB, 4 * MB));
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

    #[test]
    fn lending_keeps_the_heap_consistent_under_random_operations() {
        // A small xorshift: deterministic, no dependency.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut h = Heap::new();
        h.add_segment(0x100_0000, 64 * MB);
        let mut live: Vec<u64> = Vec::new();
        let mut tags = [1u64; 3];
        let mut log: Vec<String> = Vec::new();
        for step in 0..20_000 {
            match rnd(8) {
                0..=2 => {
                    let size = (1 + rnd(64)) * 64 * 1024;
                    let s = rnd(3);
                    let pick = h.best_fit_global(size).or_else(|| h.best_fit_pending(s, size, |_| true));
                    if let Some((a, _)) = pick {
                        log.push(format!("take {a:#x} {size:#x} by {s}"));
                        h.take(a, size);
                        live.push(a);
                    }
                }
                3..=5 if !live.is_empty() => {
                    let a = live.swap_remove(rnd(live.len() as u64) as usize);
                    let s = rnd(4);
                    let owner = if s == 3 {
                        Owner::Global
                    } else {
                        Owner::Stream { stream: s, tag: tags[s as usize] }
                    };
                    log.push(format!("free {a:#x} {owner:?}"));
                    h.release_block(a, owner);
                }
                6 => {
                    let s = rnd(3);
                    tags[s as usize] += 1;
                    let below = tags[s as usize] - rnd(2);
                    log.push(format!("promote {s} below {below}"));
                    h.promote(s, below);
                }
                _ => {
                    let except = rnd(4);
                    log.push(format!("reclaim except {except}"));
                    h.reclaim_lent((except < 3).then_some(except));
                }
            }
            if let Err(e) = h.check_invariants() {
                let tail = log.len().saturating_sub(12);
                panic!("step {step}: {e}; last operations: {:#?}", &log[tail..]);
            }
        }
    }

    #[test]
    fn places_keep_the_newest_four_of_a_size_each_once() {
        let mut p = Places::default();
        for a in [1, 2, 3] {
            p.note(a);
        }
        assert_eq!(p.as_slice(), [1, 2, 3]);
        p.note(2);
        assert_eq!(p.as_slice(), [1, 3, 2], "a place noted again becomes the newest");
        p.note(4);
        p.note(5);
        assert_eq!(p.as_slice(), [3, 2, 4, 5], "the oldest goes");
        p.note(3);
        assert_eq!(p.as_slice(), [2, 4, 5, 3]);
        p.note(3);
        assert_eq!(p.as_slice(), [2, 4, 5, 3]);
    }

    #[test]
    fn a_place_in_the_middle_of_a_free_run_is_taken_only_without_edge_only() {
        let mut h = Heap::new();
        h.keep_places();
        h.add_segment(0x100_0000, 8 * MB);
        // Three blocks; the middle one's place is remembered.
        let (a, _) = h.best_fit_global(MB).unwrap();
        h.take(a, MB);
        h.take(a + MB, MB);
        h.take(a + 2 * MB, MB);
        assert_eq!(h.places_of(MB), vec![a, a + MB, a + 2 * MB]);
        // Only the middle block is freed: its place is a whole free run.
        h.release_block(a + MB, Owner::Global);
        assert_eq!(h.place_fit(0, MB, 0, true), Some(a + MB));
        // All freed: one run from a; the middle place would split it.
        h.release_block(a, Owner::Global);
        h.release_block(a + 2 * MB, Owner::Global);
        h.check_invariants().unwrap();
        assert_eq!(h.place_fit(0, MB, 0, false), Some(a + 2 * MB), "the most recent place");
        // At an edge of the run: the first place (the run starts there).
        assert_eq!(h.place_fit(0, MB, 0, true), Some(a));
        // A stream's pending run is a place for that stream only.
        h.take(a, 3 * MB);
        h.release_block(a, Owner::Stream { stream: 4, tag: 1 });
        assert_eq!(h.place_fit(0, MB, 5, true), None);
        assert_eq!(h.place_fit(0, MB, 4, true), Some(a));
    }

    #[test]
    fn lookups_inside_allocated_blocks_and_across_segments() {
        let mut h = Heap::new();
        let (a, b) = (0x100_0000, 0x200_0000);
        h.add_reservation(a, 8 * MB);
        h.add_segment(b, 2 * MB);
        assert!(h.back(a + MB, 4 * MB));
        // [a, a+1) unbacked, [a+1, a+2) live, [a+2, a+3) free, [a+3, a+4)
        // live, [a+4, a+5) free, [a+5, a+8) unbacked; [b, b+1) live.
        for at in [a + MB, a + 3 * MB] {
            assert_eq!(h.take_range(at, MB), Some(Owner::Global));
        }
        assert_eq!(h.take(b, MB), Some(Owner::Global));
        h.check_invariants().unwrap();
        assert_eq!(h.allocated_block_containing(a + MB + 4096), Some((a + MB, MB)));
        assert_eq!(h.allocated_block_containing(a + 4 * MB - 256), Some((a + 3 * MB, MB)));
        assert_eq!(h.allocated_block_containing(a + 2 * MB), None, "free");
        assert_eq!(h.allocated_block_containing(b + MB - 1), Some((b, MB)));
        assert_eq!(h.allocated_block_containing(b + 2 * MB), None, "past every segment");
        let kinds = |from, to| h.blocks_between(from, to).collect::<Vec<_>>();
        use BlockKind::{Free, Other};
        // From inside a live block to inside a free one.
        assert_eq!(kinds(a + MB + 4096, a + 2 * MB + 1), vec![(a + MB, MB, Other), (a + 2 * MB, MB, Free)]);
        // Across the end of the reservation into the segment after it.
        assert_eq!(
            kinds(a + 6 * MB, b + MB + 1),
            vec![(a + 5 * MB, 3 * MB, Other), (b, MB, Other), (b + MB, MB, Free)]
        );
        // A range between the two holds nothing.
        assert!(kinds(a + 8 * MB, b).is_empty());
        assert_eq!(h.class_blocks(0).count(), 8);
        assert_eq!(h.blocks_in_order().count(), 8);
        assert_eq!(h.unbacked_ranges(), vec![(a, MB), (a + 5 * MB, 3 * MB)]);
        assert_eq!(h.usable_free_ending_at(a + 3 * MB, 1), MB);
        assert_eq!(h.usable_free_ending_at(a + 2 * MB, 1), 0, "a live block ends there");
        // Frees coalesce through the links: the whole backed range is one run.
        assert!(h.release_block(a + MB, Owner::Global));
        assert!(h.release_block(a + 3 * MB, Owner::Global));
        h.check_invariants().unwrap();
        assert_eq!(h.global_free_run(a + 2 * MB, MB), Some((4 * MB, h.frees())));
        assert!(h.unback(a + MB, 4 * MB));
        h.check_invariants().unwrap();
        assert_eq!(h.unbacked_ranges(), vec![(a, 8 * MB)]);
        assert!(h.remove_reservation(a));
        h.check_invariants().unwrap();
    }

    #[test]
    fn the_block_lists_match_a_model_under_random_operations() {
        // Every operation of the heap on two reservations and a segment, in
        // 64 KiB cells, against a model of what each cell is; the lists,
        // the address map and the runs are checked after every step.
        #[derive(Copy, Clone, PartialEq, Debug)]
        enum Cell {
            Unbacked,
            Free,
            Live,
            Shadowed,
        }
        const CELL: u64 = 64 << 10;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let ranges = [(0x1000_0000u64, 16 * MB), (0x2000_0000, 16 * MB), (0x3000_0000, 8 * MB)];
        let mut h = Heap::new();
        h.keep_places();
        h.add_reservation_for(0, ranges[0].0, ranges[0].1);
        h.add_reservation_for(1, ranges[1].0, ranges[1].1);
        h.add_segment(ranges[2].0, ranges[2].1);
        let mut model: Vec<(u64, Vec<Cell>)> = ranges
            .iter()
            .enumerate()
            .map(|(i, &(base, size))| {
                (base, vec![if i == 2 { Cell::Free } else { Cell::Unbacked }; (size / CELL) as usize])
            })
            .collect();
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut shadowed: Vec<(u64, u64)> = Vec::new();
        let set = |model: &mut Vec<(u64, Vec<Cell>)>, addr: u64, len: u64, c: Cell| {
            for (base, cells) in model.iter_mut() {
                if addr >= *base && addr < *base + cells.len() as u64 * CELL {
                    for k in (addr - *base) / CELL..(addr + len - *base) / CELL {
                        cells[k as usize] = c;
                    }
                }
            }
        };
        let cell_of = |model: &Vec<(u64, Vec<Cell>)>, addr: u64| {
            model.iter().find_map(|(base, cells)| {
                (addr >= *base && addr < *base + cells.len() as u64 * CELL)
                    .then(|| cells[((addr - base) / CELL) as usize])
            })
        };
        let mut tags = [1u64; 2];
        // How often each kind of change happened: back, take (address, place,
        // best fit), free, unback, shadow, unshadow, unback a shadow.
        let mut done = [0u32; 9];
        for step in 0..6000u64 {
            let r = rnd(100);
            let (base, size) = ranges[rnd(3) as usize];
            let at = base + rnd(size / CELL) * CELL;
            let len = (1 + rnd(8)) * CELL;
            match r {
                0..=14 => {
                    // Back a range: only wholly inside one unbacked block.
                    if h.back(at, len) {
                        done[0] += 1;
                        set(&mut model, at, len, Cell::Free);
                    } else {
                        assert!(!h.is_unbacked(at, len) || at + len > base + size);
                    }
                }
                15..=44 => {
                    // Take at an exact address (mid-run), a place, or best fit.
                    let class = if base == ranges[1].0 { 1 } else { 0 };
                    let how = rnd(3) as usize;
                    let got = match how {
                        0 => h.take_range(at, len).map(|_| at),
                        1 => h.take_place(class, len, rnd(2), false),
                        _ => h.best_fit_global_in(class, len).and_then(|(a, _)| h.take(a, len).map(|_| a)),
                    };
                    if let Some(a) = got {
                        done[1 + how] += 1;
                        for k in 0..len / CELL {
                            assert_eq!(
                                cell_of(&model, a + k * CELL),
                                Some(Cell::Free),
                                "step {step}: took {a:#x}"
                            );
                        }
                        set(&mut model, a, len, Cell::Live);
                        live.push((a, len));
                    }
                }
                45..=69 if !live.is_empty() => {
                    let (a, len) = live.swap_remove(rnd(live.len() as u64) as usize);
                    let s = rnd(3);
                    let owner = if s == 2 {
                        Owner::Global
                    } else {
                        Owner::Stream { stream: s, tag: tags[s as usize] }
                    };
                    assert!(h.release_block(a, owner));
                    assert!(!h.release_block(a, owner), "a second free of {a:#x} is refused");
                    done[4] += 1;
                    set(&mut model, a, len, Cell::Free);
                }
                70..=74 => {
                    let s = rnd(2) as usize;
                    tags[s] += 1;
                    h.promote(s as u64, tags[s]);
                }
                75..=77 => {
                    h.reclaim_lent(None);
                }
                78..=85 => {
                    // Give back memory: only inside one global free block.
                    let gone = h.unback(at, len);
                    if gone {
                        done[5] += 1;
                        set(&mut model, at, len, Cell::Unbacked);
                    }
                }
                86..=91 => {
                    let moved = h.shadow(at, len);
                    if moved {
                        done[6] += 1;
                        set(&mut model, at, len, Cell::Shadowed);
                        shadowed.push((at, len));
                    }
                }
                _ if !shadowed.is_empty() => {
                    let (a, len) = shadowed.swap_remove(rnd(shadowed.len() as u64) as usize);
                    if rnd(2) == 0 {
                        assert!(h.unshadow(a, len));
                        done[7] += 1;
                        set(&mut model, a, len, Cell::Free);
                    } else {
                        assert!(h.unback_shadowed(a, len));
                        done[8] += 1;
                        set(&mut model, a, len, Cell::Unbacked);
                    }
                }
                _ => {}
            }
            if let Err(e) = h.check_invariants() {
                panic!("step {step}: {e}");
            }
            // The blocks, in address order, are what the model says.
            let mut expect: Vec<(u64, Cell)> = Vec::new();
            for (base, cells) in &model {
                for (k, &c) in cells.iter().enumerate() {
                    expect
                        .push((base + k as u64 * CELL, if c == Cell::Shadowed { Cell::Unbacked } else { c }));
                }
            }
            let mut seen: Vec<(u64, Cell)> = Vec::new();
            for (a, len, kind) in h.blocks_in_order() {
                use super::super::layout::RunKind;
                let c = match kind {
                    RunKind::Live | RunKind::Cached => Cell::Live,
                    RunKind::Free | RunKind::PendingFree => Cell::Free,
                    RunKind::Unbacked => Cell::Unbacked,
                };
                // (Blocks are whole cells here.)
                for k in 0..len / CELL {
                    seen.push((a + k * CELL, c));
                }
            }
            assert_eq!(seen, expect, "step {step}");
            let live_bytes: u64 = live.iter().map(|l| l.1).sum();
            assert_eq!(h.allocated(), live_bytes, "step {step}");
            for &(a, len) in live.iter().take(4) {
                assert_eq!(h.allocated_size(a), Some(len));
                assert_eq!(h.allocated_block_containing(a + len - 1), Some((a, len)));
            }
        }
        assert!(done.iter().all(|&n| n >= 20), "every kind of change happened: {done:?}");
    }
}
