//! Growing a pool: where a request that finds no free run gets its memory
//! (physical memory of wholly free units moved under it, a group's free
//! units lent, or new physical memory created and mapped, in units or one
//! group), and reserving the pool's address range.
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;

use super::*;
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::VirtualMemory;
use crate::error::{Error, Result};
use crate::pool::AccessFlags;
use crate::pool::core::{CallCounts, MAX_GROWTH_STEP, MIN_SEGMENT, PoolCore, lock};
use crate::pool::lend::{self, Source};
use crate::pool::placement::{BLOCK_ALIGN, CLASSES, Owner};
use crate::pool::remap::{self, Donor, Hole};
use crate::runtime::{Allocation, MemoryKind, Runtime};

/// Who asks a growth ([`PoolCore::grow_virtual`]).
#[derive(Copy, Clone, Debug)]
pub(in crate::pool) struct Asker {
    /// The stream asking.
    pub(in crate::pool) stream: u64,
    /// Whether groups' free runs (also those pending on the stream) are
    /// lent to the block even where it sets no new peak.
    pub(in crate::pool) lend: bool,
    /// Whether the growth's unmapped memory was unmapped to move under the
    /// block: all of it is mapped again, none given back (`release.rs`,
    /// `moves_before_new_peak`).
    pub(in crate::pool) move_free: bool,
}

/// What is done before a large growth (`release.rs`,
/// `release_before_large_growth`), for [`PoolCore::grow_reusing`].
#[derive(Debug, Default)]
pub(in crate::pool) struct BeforeGrowth {
    /// Physical allocations given back but not released: the growth maps
    /// those of a size it needs and releases the rest.
    pub(in crate::pool) unmapped: Unmapped,
    /// Whether groups' free runs (also those pending on the stream) are lent
    /// to the block even where it sets no new peak.
    pub(in crate::pool) lend: bool,
    /// Whether `unmapped` holds wholly free memory unmapped to move under
    /// the block (a pool that keeps its memory): all of it is mapped again.
    pub(in crate::pool) move_free: bool,
}

/// What a growth asks of [`PoolCore::map_for`].
#[derive(Copy, Clone, Debug)]
struct Ask {
    /// The block's size.
    want: u64,
    /// How much to map (at least `want`; the rest stays free).
    span: u64,
    /// The stream asking: free memory pending on it joins the block.
    stream: u64,
    /// Whether granules not in use elsewhere may be moved under the block.
    use_donors: bool,
    /// Whether groups' free runs are lent also where the growth sets no
    /// new peak (a large growth that did not wait for its stream's frees,
    /// `release.rs`).
    lend_anyway: bool,
    /// Whether every physical allocation in the growth's `unmapped` is
    /// mapped again, none given back (a pool that keeps its memory moving
    /// its wholly free memory under a growth past its high watermark:
    /// `release.rs`): first under the block, the rest after it or in
    /// another hole ([`remap::place_moved`]).
    move_free: bool,
}

impl PoolCore {
    /// Gets memory for a block of `want` bytes from the backend and takes
    /// the block (so no other thread can take the new memory first):
    /// returns (address, size). On virtual memory, physical memory of wholly
    /// free chunks is moved under the block first and new memory is created
    /// only for the rest (`remap.rs`); with segments, a new segment.
    pub(crate) fn grow(&self, rt: &Runtime, want: u64, stream: u64) -> Result<(u64, u64)> {
        self.grow_in(rt, want, false, stream)
    }

    /// [`PoolCore::grow`]; `zone`: for a zone block (`zone.rs`), in the
    /// zone's part of the address range.
    pub(crate) fn grow_in(&self, rt: &Runtime, want: u64, zone: bool, stream: u64) -> Result<(u64, u64)> {
        self.grow_reusing(rt, want, zone, stream, BeforeGrowth::default())
    }

    /// [`PoolCore::grow`] after `before`: the physical allocations in its
    /// `unmapped` are mapped where memory of their size is needed and the
    /// rest go back before anything is created; with its `lend`, groups'
    /// free runs (also those pending on `stream`) are lent to the block
    /// even where it sets no new peak; with its `move_free`, every one of
    /// the physical allocations in `unmapped` is mapped again (under the
    /// block first) and none goes back while some hole can take it.
    pub(in crate::pool) fn grow_reusing(
        &self,
        rt: &Runtime,
        want: u64,
        zone: bool,
        stream: u64,
        before: BeforeGrowth,
    ) -> Result<(u64, u64)> {
        let BeforeGrowth { mut unmapped, lend, move_free } = before;
        if let Backing::Virtual(range) = &self.backing {
            let asker = Asker { stream, lend, move_free };
            let grown = self.grow_virtual(rt, range, want, zone, asker, &mut unmapped);
            // What the growth did not map again goes back off this thread.
            self.release_later(unmapped);
            return grown;
        }
        let reserved = lock(&self.heap).reserved();
        let step = (reserved / 32).clamp(MIN_SEGMENT, MAX_GROWTH_STEP);
        let mut size = want
            .max(step)
            .checked_next_multiple_of(MIN_SEGMENT)
            .ok_or_else(|| Error::OutOfMemory(format!("{want} bytes do not fit the address space")))?;
        if let Some(capacity) = self.capacity() {
            let room = capacity.saturating_sub(reserved);
            if want > room {
                return Err(Error::OutOfMemory(self.capacity_reached(reserved)));
            }
            size = size.min(room).max(want);
        }
        let ptr = match rt.backend().mem_alloc(self.device, size) {
            Ok(p) => p,
            Err(_) if size > want => {
                size = want;
                rt.backend().mem_alloc(self.device, size)?
            }
            Err(e) => return Err(e),
        };
        debug_assert!(ptr.0 % BLOCK_ALIGN == 0);
        CallCounts::add(&self.calls.segments_allocated);
        CallCounts::add_bytes(&self.calls.bytes_created, size);
        rt.allocations().insert(Allocation {
            base: ptr,
            size,
            kind: MemoryKind::PoolSegment(self.id),
            device: self.device,
        });
        crate::trace::pool_grow(self.id, self.device, ptr.0, size);
        let mut heap = lock(&self.heap);
        heap.add_segment(ptr.0, size);
        self.reserved_high.fetch_max(heap.reserved(), Ordering::AcqRel);
        heap.take(ptr.0, want);
        Ok((ptr.0, want))
    }

    /// [`PoolCore::grow`] on virtual memory (see `remap.rs`): switch an
    /// existing run, else map granules not in use and new ones.
    pub(in crate::pool) fn grow_virtual(
        &self,
        rt: &Runtime,
        range: &Mutex<Option<VirtualRange>>,
        want: u64,
        zone: bool,
        asker: Asker,
        unmapped: &mut Unmapped,
    ) -> Result<(u64, u64)> {
        let Asker { stream, lend, move_free } = asker;
        let vm = rt
            .backend()
            .virtual_memory()
            .ok_or_else(|| Error::NotSupported("the backend lost its virtual memory".into()))?;
        let mut guard = lock(range);
        self.reserve_virtual(rt, vm, &mut guard)?;
        let vr = guard.as_mut().expect("reserved above");
        // (After the reservation: it chooses whether the classes are kept apart.)
        let class = self.class_for(want, zone);
        // Moving memory costs driver time (on a GPU about 30 µs per MiB:
        // cuMemSetAccess dominates); it is spent only while the pool's
        // budget lasts (a share of wall-clock time). Past it the pool grows
        // as a caching allocator would, and moves memory only when it
        // cannot grow.
        let started = std::time::Instant::now();
        if vr.budget_spent(started, self.move_budget()) {
            // Growing is not charged: a caching allocator pays it too. Like
            // one, it grows by more than asked (up to twice the request, at
            // most 1/32 of what the pool holds), so that the requests that
            // follow fit without growing again. Twice, not more: what a
            // growth maps past the peak is held for nothing (replayed
            // PyTorch CNN training: 1.019 of its peak live bytes with eight
            // times, 1.009 with two; the other replays unchanged). Not while
            // a plan runs ([`PoolCore::growth_is_exact`]).
            let span = if self.growth_is_exact() || move_free {
                want
            } else {
                (vr.physical_bytes() / 32).min(want.saturating_mul(2)).max(want)
            };
            let ask = Ask { want, span, stream, use_donors: false, lend_anyway: lend, move_free };
            match self.map_for(vm, vr, class, ask, unmapped) {
                Ok(found) => return Ok(found),
                // Addresses, not memory, may have run out: loans holding
                // no unit in use there give theirs back (`lend.rs`).
                Err(_) if self.unmap_idle_loans(vm, vr) > 0 => {
                    if let Ok(found) = self.map_for(vm, vr, class, ask, unmapped) {
                        return Ok(found);
                    }
                }
                Err(_) => {}
            }
        }
        self.release_later(std::mem::take(unmapped));
        self.wait_for_own_frees(rt, stream);
        let before = self.calls.snapshot();
        let result = self.grow_by_moving(rt, vm, vr, class, want, stream);
        let after = self.calls.snapshot();
        // Charged only if memory moved (an unmap, or a map of a granule that
        // existed): plain growth is what any allocator pays.
        if after.unmaps > before.unmaps
            || after.maps - before.maps > after.granules_created - before.granules_created
        {
            vr.charge(started.elapsed());
        }
        result
    }

    /// Before memory moves: waits for `stream`'s pending frees, so that the
    /// memory they hold may move. Only memory whose frees have completed
    /// moves, and a pool that may move keeps its size classes apart; where
    /// the device runs behind the host (a PyTorch training loop), nothing
    /// would be left to move, and such a pool held more than one that only
    /// grows. Waiting is what moving trades time for.
    pub(in crate::pool) fn wait_for_own_frees(&self, rt: &Runtime, stream: u64) {
        if stream == crate::pool::core::ORPHAN_STREAM || !lock(&self.heap).has_pending(stream) {
            return;
        }
        let Some((clock, raw)) = self.stream_of(stream) else { return };
        let t0 = std::time::Instant::now();
        if self.learn_completed(rt, &clock, raw, true) {
            lock(&self.heap).promote(stream, clock.completed_tag());
        }
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: waited {:?} for stream {stream}'s frees", self.id, t0.elapsed());
    }

    /// [`PoolCore::grow_virtual`] with memory moved where it helps: revisit
    /// a place, the run with the fewest repairs, or a plan of idle and new
    /// granules.
    fn grow_by_moving(
        &self,
        rt: &Runtime,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        class: usize,
        want: u64,
        stream: u64,
    ) -> Result<(u64, u64)> {
        // 1. Where a block of this size went last: switch its granules back,
        //    and point the few aliases whose granule is in use elsewhere at
        //    other granules (a layout that repeats converges to no mapping).
        let last = {
            let heap = lock(&self.heap);
            let places = heap.places_of(want);
            places
                .iter()
                .rev()
                .filter_map(|&at| Some((at, vr.revisit(&heap, at, want)?)))
                .min_by_key(|(_, (_, repairs))| repairs.len())
        };
        if let Some((at, (switches, repairs))) = last {
            if repairs.len() as u64 * vr.granularity <= want / 2 + vr.granularity {
                if let Ok(found) = self.revisit_place(vm, vr, at, want, &switches, &repairs) {
                    return Ok(found);
                }
            }
        }
        // 2. The existing run that needs the fewest repairs, if they are few.
        let run = {
            let heap = lock(&self.heap);
            remap::find_run(want, vr.granularity, vr.switch_pieces(&heap, class))
        };
        if let Some(run) = run {
            if run.repairs.len() as u64 * vr.granularity <= want / 2 + vr.granularity {
                if let Ok(found) = self.revisit_place(vm, vr, run.start, want, &run.switches, &run.repairs) {
                    return Ok(found);
                }
            }
        }
        // 3. Map: granules not in use elsewhere, new ones for the rest.
        let mut result = self.map_for(
            vm,
            vr,
            class,
            Ask { want, span: want, stream, use_donors: true, lend_anyway: false, move_free: false },
            &mut Vec::new(),
        );
        if result.is_err() && self.evict_aliases(vm, vr, Some(class), usize::MAX) > 0 {
            // Addresses ran out in this class: its shadowed aliases went.
            result = self.map_for(
                vm,
                vr,
                class,
                Ask { want, span: want, stream, use_donors: true, lend_anyway: false, move_free: false },
                &mut Vec::new(),
            );
        }
        // Addresses, not memory, may have run out: live blocks spread over
        // this class's part can leave no hole of this size there (the parts
        // are a few times the device's memory, less where addresses run
        // short, down to a quarter of it).
        // (The largest hole of each class, looked at once.)
        let holes: Option<[u64; CLASSES]> = (result.is_err() && !self.zone.is_on()).then(|| {
            let heap = lock(&self.heap);
            std::array::from_fn(|c| heap.unbacked_ranges_of(c).iter().map(|&(_, len)| len).max().unwrap_or(0))
        });
        if let Some(holes) = holes.filter(|h| h[class] < want) {
            let ask =
                Ask { want, span: want, stream, use_donors: true, lend_anyway: false, move_free: false };
            // Another class's part takes the block, as blocks go to other
            // classes' free memory where the pool cannot grow (`reuse.rs`,
            // step 4b).
            for other in (0..CLASSES).filter(|&c| c != class && holes[c] >= want) {
                if let Ok(found) = self.map_for(vm, vr, other, ask, &mut Vec::new()) {
                    tracing::debug!(target: "hipmem::pool", "pool {:#x}: no hole of {want} bytes in size class {class}'s addresses; placed in class {other}'s", self.id);
                    result = Ok(found);
                    break;
                }
            }
            // No part has room: a range of its own for the class.
            if result.is_err() && holes.iter().all(|&h| h < want) {
                match self.reserve_more(rt, vm, vr, class, want) {
                    Ok(()) => result = self.map_for(vm, vr, class, ask, &mut Vec::new()),
                    Err(e) => {
                        tracing::debug!(target: "hipmem::pool", "pool {:#x}: no more addresses for {want} bytes: {e}", self.id)
                    }
                }
            }
        }
        let mapped = vr.aliases.len();
        if mapped > ALIASES_HIGH * vr.phys.len().max(1) {
            let excess = mapped - ALIASES_LOW * vr.phys.len().max(1);
            self.evict_aliases(vm, vr, None, excess);
        }
        result
    }

    /// Step 1 of [`PoolCore::grow_virtual`]: makes `[at, at + want)` free by
    /// `switches` and by pointing the shadowed aliases `repairs` at granules
    /// not in use (or new ones), then takes it.
    fn revisit_place(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        at: u64,
        want: u64,
        switches: &[Switch],
        repairs: &[u64],
    ) -> Result<(u64, u64)> {
        let g = vr.granularity;
        let end = at + want;
        let access = lock(&self.access).clone();
        // The repairs' new granules: not in use, not switched here, not active here.
        let donors: Vec<Donor> = if repairs.is_empty() {
            Vec::new()
        } else {
            let heap = lock(&self.heap);
            let mut d: Vec<Donor> = vr
                .donors(&heap)
                .into_iter()
                .filter(|d| !(switches.iter().any(|s| s.0 == d.pid) || (d.active + g > at && d.active < end)))
                .collect();
            d.sort_by_key(|d| (d.freed, d.active));
            d
        };
        if donors.len() < repairs.len() {
            // Repairs come from granules not in use, never from new ones: a
            // place that needs new memory is no better than growing, and
            // growing makes only what is missing. (Without this rule a pool
            // whose frees lag behind the host, as a GPU's do, revisited
            // places with new granules while its old ones waited: PyTorch
            // GPT training with HIPMEM_POOL_MOVE_BURST_MS held 1.22 of its
            // peak live bytes, against 1.10 without moving.)
            return Err(Error::OutOfMemory(format!(
                "{} granules not in use for {} repairs at {at:#x}",
                donors.len(),
                repairs.len()
            )));
        }
        let mut heap = lock(&self.heap);
        for &(pid, _, to) in switches {
            if !vr.switch(&mut heap, pid, to) {
                return Err(Error::Unknown("a planned switch failed".into()));
            }
        }
        let mut donors = donors.into_iter();
        for &r in repairs {
            // The alias at `r` goes; another granule is mapped there.
            if !heap.is_shadowed(r, g) {
                return Err(Error::Unknown("a planned repair is not shadowed".into()));
            }
            drop(heap);
            tracing::trace!(target: "hipmem::pool", "repaired the alias at {r:#x}");
            vm.mem_unmap(DevicePtr(r), g)?;
            CallCounts::add(&self.calls.unmaps);
            heap = lock(&self.heap);
            heap.unback_shadowed(r, g);
            if let Some(old) = vr.aliases.remove(&r) {
                if let Some(p) = vr.phys.get_mut(&old.pid) {
                    p.aliases.retain(|&a| a != r);
                }
            }
            let now = vr.tick();
            // The donors were listed before the heap lock was dropped: one
            // another thread has taken since is skipped.
            match donors.find(|d| heap.shadow(d.active, g)) {
                Some(d) => {
                    drop(heap);
                    let mapped = map_with_access(&self.calls, vm, &access, r, g, d.pid);
                    heap = lock(&self.heap);
                    if let Err(e) = mapped {
                        let _ = vm.mem_unmap(DevicePtr(r), g);
                        heap.unshadow(d.active, g);
                        return Err(e);
                    }
                    heap.back(r, g);
                    vr.aliases.insert(r, Alias { pid: d.pid, used: now });
                    if let Some(p) = vr.phys.get_mut(&d.pid) {
                        p.active = r;
                        p.aliases.push(r);
                    }
                }
                None => {
                    if self.capacity().is_some_and(|c| vr.physical_bytes() + g > c) {
                        return Err(Error::OutOfMemory(self.capacity_reached(vr.physical_bytes())));
                    }
                    drop(heap);
                    let made = self.map_new_granule(vm, &access, r, g, &mut Vec::new());
                    heap = lock(&self.heap);
                    let pid = made?;
                    crate::trace::pool_grow(self.id, self.device, r, g);
                    heap.back(r, g);
                    vr.aliases.insert(r, Alias { pid, used: now });
                    vr.phys.insert(pid, Phys { active: r, aliases: vec![r], group: None });
                }
            }
        }
        self.reserved_high.fetch_max(heap.reserved(), Ordering::AcqRel);
        tracing::trace!(target: "hipmem::pool", want, switches = switches.len(), repairs = repairs.len(), "revisited a place");
        match heap.take_range(at, want) {
            Some(_) => {
                drop(heap);
                Ok((at, want))
            }
            None => {
                Err(Error::Unknown(format!("pool {:#x}: {at:#x} is not free after revisiting it", self.id)))
            }
        }
    }

    /// Step 3 of [`PoolCore::grow_virtual`].
    fn map_for(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        class: usize,
        ask: Ask,
        unmapped: &mut Unmapped,
    ) -> Result<(u64, u64)> {
        let Ask { want, span, stream, use_donors, lend_anyway, move_free } = ask;
        let g = vr.granularity;
        // Memory unmapped to move here: all of it is mapped again.
        let moving = move_free && !unmapped.is_empty();
        let moved = if moving { unmapped.iter().map(|&(_, len)| len).sum::<u64>() } else { 0 };
        let span = span.max(want);
        let group_min = self.growth_mapping();
        let least_group = least_plain_group(group_min);
        let (mut plan, owners, lent, first_steps, placed, padded) = {
            let mut heap = lock(&self.heap);
            let first_steps = heap.frees() < super::first_steps();
            let reserved = vr.physical_bytes();
            let holes: Vec<Hole> = heap
                .unbacked_ranges_of(class)
                .into_iter()
                .map(|(start, size)| Hole {
                    start,
                    size,
                    before: heap.joinable_free_ending_at(start, stream),
                    after: heap.joinable_free_starting_at(start + size, stream),
                })
                .collect();
            let donors = if use_donors { vr.donors(&heap) } else { Vec::new() };
            let room = self.capacity().map(|c| c.saturating_sub(reserved) / g);
            let plan = (span > want).then(|| remap::plan(span, g, &holes, &donors, room)).flatten();
            let Some(mut plan) = plan.or_else(|| remap::plan(want, g, &holes, &donors, room)) else {
                let largest = holes.iter().map(|h| h.size).max().unwrap_or(0);
                return Err(Error::OutOfMemory(match room {
                    Some(room) if room * g + donors.len() as u64 * g < want => {
                        self.capacity_reached(reserved)
                    }
                    _ => format!(
                        "the pool's {}-byte address reservation has no room for {want} more bytes (largest unbacked range {largest})",
                        vr.size
                    ),
                }));
            };
            // Out of the free space until the block is taken: the runs it
            // joins, and the granules it takes over (their old addresses).
            // (Each keeps its owner: global, or pending on this stream.)
            let mut owners = (
                plan.prefix.and_then(|(addr, len)| heap.take(addr, len)),
                plan.suffix.and_then(|(addr, len)| heap.take(addr, len)),
            );
            for &(pid, _) in &plan.reuse {
                if let Some(p) = vr.phys.get(&pid) {
                    heap.shadow(p.active, g);
                }
            }
            // Before anything is created, where the growth would set a new
            // peak: the groups' free units at the ends of their groups, and
            // wholly free groups (`lend.rs`), in aliases of their groups laid
            // out in a hole of their own. Only if that creates less than the
            // plan above (which may join free memory around its hole). (Not
            // for a plan's new piece, which is one group of its own.)
            let mut lent: Vec<(Source, u64, Owner)> = Vec::new();
            let arena =
                self.exact_growth.load(Ordering::Relaxed) || self.arena_growth.load(Ordering::Relaxed);
            if lend::enabled()
                && !self.lending_refused.load(Ordering::Relaxed)
                && !use_donors
                && !arena
                && !first_steps
                && plan.reuse.is_empty()
                && !plan.new_granules.is_empty()
                && !vr.groups.is_empty()
            {
                let end = plan.block + want;
                let planned_new = plan.new_granules.iter().filter(|&&a| a < end).count() as u64 * g;
                let peak = self.reserved_high.load(Ordering::Acquire);
                let start = plan.prefix.map_or(plan.block, |(a, n)| a + n);
                let growth = lend::Growth {
                    start,
                    size: holes.iter().find(|h| h.start == start).map_or(0, |h| h.size),
                    before: plan.prefix.map_or(0, |p| p.1),
                };
                let spaces: Vec<(u64, u64)> = holes.iter().map(|h| (h.start, h.size)).collect();
                // (Frees still pending on this stream lend too: its later
                // work, this block's, runs after the work before them.)
                let pending_too = self.lend_pending.load(Ordering::Relaxed).then_some(stream);
                let layout = (lend_anyway || heap.reserved() + planned_new > peak)
                    .then(|| {
                        let sources = vr.lendable(&heap, pending_too);
                        lend::layout(want, g, &sources, growth, &spaces, lend::MOST_SOURCES)
                    })
                    .flatten()
                    // (Memory moved here covers new units either way: the
                    // layout is taken where it creates less.)
                    .filter(|l| {
                        (l.new_units.len() as u64 * g).saturating_sub(moved)
                            < planned_new.saturating_sub(moved)
                    });
                if let Some(l) = layout {
                    let mut shadowed = Vec::new();
                    for &(s, at) in &l.lent {
                        match heap.shadow_usable(s.at, s.loan.len, stream) {
                            Some(owner) => shadowed.push((s, at, owner)),
                            None => break,
                        }
                    }
                    if shadowed.len() == l.lent.len() {
                        // The runs the plan was to join and the layout does
                        // not stay free.
                        if !l.joins_before {
                            if let (Some((addr, _)), Some(owner)) = (plan.prefix, owners.0.take()) {
                                heap.release_block(addr, owner);
                            }
                        }
                        if let (Some((addr, _)), Some(owner)) = (plan.suffix, owners.1.take()) {
                            heap.release_block(addr, owner);
                        }
                        plan = remap::Plan {
                            block: l.block,
                            prefix: if l.joins_before { plan.prefix } else { None },
                            suffix: None,
                            reuse: Vec::new(),
                            new_granules: l.new_units,
                            room: 0,
                        };
                        lent = shadowed;
                    } else {
                        for (s, _, owner) in shadowed {
                            heap.unshadow_part_as(s.at, s.loan.len, owner);
                        }
                    }
                }
            }
            // A growth of fewer new units than one group maps a whole group
            // where the pool is large enough (a group is at most 1/8 of
            // it) and the hole has room: one driver allocation instead of
            // one per unit (about 55 µs each on an H100), and the rest stays free
            // for the requests that follow. (Not in a run's first steps,
            // [`FIRST_STEPS`]; not for a plan's new piece, which is grown
            // exactly; not in a pool with a maxSize; in one with a size
            // limit, only where the whole group fits under it; not where
            // units were lent.) It is one group whatever `max_group` says
            // (padding to 64 MiB groups instead held more: stop 78).
            let least = group_min / g;
            let n = plan.new_granules.len() as u64;
            let mut padded = false;
            if !use_donors
                && !moving
                && !first_steps
                && lent.is_empty()
                && !self.growth_is_exact()
                && group_min > 0
                && self.props.handle_types == 0
                && plan.reuse.is_empty()
                && n > 0
                && n < least
                && reserved / 8 >= group_min
                && self.props.max_size == 0
                && room.is_none_or(|r| r >= least)
                && plan.room >= (least - n) * g
            {
                let last = *plan.new_granules.last().expect("n > 0");
                plan.new_granules.extend((1..=least - n).map(|i| last + i * g));
                padded = true;
            }
            // Memory moved here goes under the block first; what the block
            // does not cover right after it where the hole has room, else in
            // another hole (it stays free there).
            let n = plan.new_granules.len() as u64;
            let moved_units = moved / g;
            if moving && moved_units > n && plan.room >= (moved_units - n) * g {
                if let Some(&last) = plan.new_granules.last() {
                    plan.new_granules.extend((1..=moved_units - n).map(|i| last + i * g));
                }
            }
            let placed = if moving {
                let taken: Vec<(u64, u64)> = lent.iter().map(|(s, at, _)| s.loan.alias(*at)).collect();
                let mut spaces: Vec<(u64, u64)> = holes.iter().map(|h| (h.start, h.size)).collect();
                spaces.sort_unstable();
                let m = remap::place_moved(g, &plan.new_granules, &taken, &spaces, unmapped);
                // (Places past the block that no moved memory took stay unbacked.)
                plan.new_granules.truncate((n as usize).max(m.places_used));
                plan.new_granules.drain(..m.places_used);
                *unmapped = m.left;
                m.placed
            } else {
                Vec::new()
            };
            (plan, owners, lent, first_steps, placed, padded)
        };
        tracing::trace!(target: "hipmem::pool", want, moved = plan.reuse.len(), new = plan.new_granules.len(), "remapping");
        // Without the heap's lock: map.
        let access = lock(&self.access).clone();
        let mut mapped: Vec<(u64, u64, bool)> = Vec::new(); // (at, pid, new)
        let mut undo: Vec<u64> = Vec::new(); // old active aliases to give back
        let mut failed: Option<Error> = None;
        // Lent units first: each in an alias of its whole group (the driver
        // maps a physical allocation only whole), access once for aliases
        // that follow each other.
        let mut loans_made: Vec<(Source, u64, Owner)> = Vec::new();
        let mut loans_failed: Vec<(Source, Owner)> = Vec::new();
        for &(s, at, owner) in &lent {
            let (alias, whole) = s.loan.alias(at);
            let handle = vr.groups.get(&s.loan.group).map(|gr| gr.handle);
            let mapped = match handle {
                Some(h) => vm.mem_map(DevicePtr(alias), whole, 0, h),
                None => {
                    Err(Error::Unknown(format!("pool {:#x}: lent units of a group that is gone", self.id)))
                }
            };
            match mapped {
                Ok(()) => {
                    CallCounts::add(&self.calls.maps);
                    loans_made.push((s, at, owner));
                }
                Err(e) => {
                    // Made new instead (below), and never asked again.
                    tracing::warn!(target: "hipmem", "pool {:#x}: mapping a second alias of a group failed ({e}); the pool lends no more", self.id);
                    self.lending_refused.store(true, Ordering::Relaxed);
                    loans_failed.push((s, owner));
                    plan.new_granules.extend((at..at + s.loan.len).step_by(g as usize));
                }
            }
        }
        if !loans_failed.is_empty() {
            plan.new_granules.sort_unstable();
        }
        let spans: Vec<(u64, u64)> = loans_made.iter().map(|(s, at, _)| s.loan.alias(*at)).collect();
        let mut kept = Vec::with_capacity(loans_made.len());
        for run in adjacent_runs(&spans) {
            let start = spans[run.start].0;
            let (last, whole) = spans[run.end - 1];
            match give_access(vm, &access, start, last + whole - start) {
                Ok(()) => {
                    for (s, _, _) in &loans_made[run.clone()] {
                        CallCounts::add_bytes(&self.calls.bytes_lent, s.loan.len);
                    }
                    kept.extend_from_slice(&loans_made[run]);
                }
                Err(e) => {
                    for (&(alias, whole), &(s, _, owner)) in spans[run.clone()].iter().zip(&loans_made[run]) {
                        let _ = vm.mem_unmap(DevicePtr(alias), whole);
                        loans_failed.push((s, owner));
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        let loans_made = kept;
        if failed.is_some() {
            // Nothing new is made on a failed growth.
            plan.new_granules.clear();
        }
        // Memory unmapped to move here first (units alone, groups whole).
        let mut moved_groups: Vec<(u64, Group)> = Vec::new();
        if !placed.is_empty() {
            if let Err(e) = self.map_moved(vm, &access, g, placed, unmapped, &mut mapped, &mut moved_groups) {
                failed.get_or_insert(e);
            }
        }
        for &(pid, at) in &plan.reuse {
            match map_with_access(&self.calls, vm, &access, at, g, pid) {
                Ok(()) => mapped.push((at, pid, false)),
                Err(e) => {
                    let _ = vm.mem_unmap(DevicePtr(at), g);
                    if let Some(p) = vr.phys.get(&pid) {
                        undo.push(p.active);
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        // New units in one run, enough of them: one physical allocation and
        // one mapping (a pool that only grows, and is not shared: its units
        // never move, and export hands out one handle per unit).
        // In a run's first steps, a growth of two units or more is mapped
        // in pieces of at most [`PoolCore::first_steps_piece`] (powers of
        // two), not unit by unit: each costs about as much as one unit. (Not
        // a plan's arena, which is one group.)
        let piece = self.first_steps_piece();
        let pieces = first_steps
            && piece > g
            && plan.new_granules.len() > 1
            && !self.growth_is_exact()
            && !self.arena_growth.load(Ordering::Relaxed);
        let grouped = failed.is_none()
            && !use_donors
            && group_min > 0
            && self.props.handle_types == 0
            && plan.reuse.is_empty()
            && (plan.new_granules.len() as u64 * g >= least_group
                || self.arena_growth.load(Ordering::Relaxed)
                || pieces)
            && plan.new_granules.windows(2).all(|w| w[1] == w[0] + g);
        let mut groups: Vec<(u64, Group)> = Vec::new();
        if grouped {
            // Groups of at most MAX_GROUP in a run's first steps, half that
            // after them: memory that a long-lived block keeps from going
            // back is at most one group around it (`max_group`).
            // (A remainder smaller than the least group joins the last.)
            let n = plan.new_granules.len();
            // (A plan's arena piece goes back whole anyway: one group.)
            let per = if self.exact_growth.load(Ordering::Relaxed) || padded {
                n
            } else {
                (max_group(group_min, first_steps || self.zone.is_on()) / g).max(1) as usize
            };
            let least = (least_group / g).max(1) as usize;
            let mut chunks = Vec::new();
            let mut i = 0;
            if pieces && (n as u64) * g < least_group {
                let most = (piece / g).max(1) as usize;
                while i < n {
                    // The largest power of two of units that is left, at most `most`.
                    let left = (n - i).min(most);
                    let len = 1usize << left.ilog2();
                    chunks.push(&plan.new_granules[i..i + len]);
                    i += len;
                }
            }
            while i < n {
                let mut len = per.min(n - i);
                if n - i - len < least {
                    len = n - i;
                }
                chunks.push(&plan.new_granules[i..i + len]);
                i += len;
            }
            let lens: Vec<u64> = chunks.iter().map(|c| c.len() as u64 * g).collect();
            self.release_unmapped_but(unmapped, &lens);
            for chunk in chunks {
                let (first, len) = (chunk[0], chunk.len() as u64 * g);
                match self.create_and_map(vm, first, len, unmapped) {
                    Ok(handle) => groups.push((first, Group { handle, len })),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            // Access in one call for the groups mapped (consecutive, as the
            // units are): one driver call, not one per group. (It saves
            // calls, not time: on an H200 setting access costs 34-42 µs per
            // physical allocation covered, from 2 to 128 MiB, in one call or
            // in one each; docs/pool-measurements.md, stops 63 and 79.)
            if let (Some(&(start, _)), Some(&(last, gr))) = (groups.first(), groups.last()) {
                if let Err(e) = give_access(vm, &access, start, last + gr.len - start) {
                    for (at, gr) in groups.drain(..) {
                        unmap_and_release(&self.calls, vm, at, gr.len, gr.handle);
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        if failed.is_none() && !grouped {
            // Each unit its own physical allocation (it goes back alone),
            // access given once per run of consecutive units (one call, not
            // one per unit). On an H200 a unit costs about 48 µs to create,
            // map and give access, 33 µs of it access, which is paid per
            // physical allocation however the calls cover them: what makes
            // a run's first steps slow is the count of units.
            let mut fresh: Vec<(u64, u64)> = Vec::new(); // (at, pid), no access yet
            self.release_unmapped_but(unmapped, &vec![g; plan.new_granules.len()]);
            for &at in &plan.new_granules {
                match self.create_and_map(vm, at, g, unmapped) {
                    Ok(pid) => fresh.push((at, pid)),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let spans: Vec<(u64, u64)> = fresh.iter().map(|&(at, _)| (at, g)).collect();
            for run in adjacent_runs(&spans) {
                let (start, len) = (fresh[run.start].0, run.len() as u64 * g);
                match give_access(vm, &access, start, len) {
                    Ok(()) => mapped.extend(fresh[run].iter().map(|&(at, pid)| (at, pid, true))),
                    Err(e) => {
                        for &(at, pid) in &fresh[run] {
                            unmap_and_release(&self.calls, vm, at, g, pid);
                        }
                        failed.get_or_insert(e);
                    }
                }
            }
        }
        groups.extend(moved_groups);
        let now = vr.tick();
        let mut heap = lock(&self.heap);
        for &(at, pid, new) in &mapped {
            tracing::trace!(target: "hipmem::pool", "mapped granule {pid:#x} at={at:#x} new={new}");
            heap.back(at, g);
            vr.aliases.insert(at, Alias { pid, used: now });
            if new {
                crate::trace::pool_grow(self.id, self.device, at, g);
                vr.phys.insert(pid, Phys { active: at, aliases: vec![at], group: None });
            } else if let Some(p) = vr.phys.get_mut(&pid) {
                p.active = at;
                p.aliases.push(at);
            }
        }
        for (first, gr) in groups {
            tracing::trace!(target: "hipmem::pool", "mapped a group of {} units at={first:#x}", gr.len / g);
            heap.back(first, gr.len);
            crate::trace::pool_grow(self.id, self.device, first, gr.len);
            for at in (first..first + gr.len).step_by(g as usize) {
                vr.next_unit += 1;
                let id = GROUPED_UNIT | vr.next_unit;
                vr.aliases.insert(at, Alias { pid: id, used: now });
                vr.phys.insert(id, Phys { active: at, aliases: vec![at], group: Some(first) });
            }
            heap.note_group(first, gr.len);
            vr.groups.insert(first, gr);
        }
        for old in undo {
            heap.unshadow(old, g);
        }
        for &(s, at, owner) in &loans_made {
            tracing::trace!(target: "hipmem::pool", "lent {} units of the group at {:#x} at={at:#x} ({owner:?})", s.loan.len / g, s.loan.group);
            if owner != Owner::Global {
                vr.busy.insert(at, owner);
            }
            let (alias, whole) = s.loan.alias(at);
            // The alias is used only where the lent units are: the rest of
            // it is shadowed at once (never free, so no neighbour's free
            // run can take it in).
            if at > alias {
                heap.back_shadowed(alias, at - alias);
            }
            if alias + whole > at + s.loan.len {
                heap.back_shadowed(at + s.loan.len, alias + whole - at - s.loan.len);
            }
            heap.back(at, s.loan.len);
            vr.loans.insert(at, s.loan);
            self.lending.store(true, Ordering::Relaxed);
            // Best fit keeps a wholly free loan whole where it can, as it
            // does a group: it goes home at the next slow allocation.
            heap.note_group(at, s.loan.len);
        }
        for (s, owner) in loans_failed {
            // The units are used at home again (owned as before).
            heap.unshadow_part_as(s.at, s.loan.len, owner);
        }
        self.reserved_high.fetch_max(heap.reserved(), Ordering::AcqRel);
        // The runs the block was to join go back to the free space (and
        // merge with what was just mapped next to them).
        if let (Some((addr, _)), Some(owner)) = (plan.prefix, owners.0) {
            heap.release_block(addr, owner);
        }
        if let (Some((addr, _)), Some(owner)) = (plan.suffix, owners.1) {
            heap.release_block(addr, owner);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        match heap.take_range(plan.block, want) {
            Some(_) => Ok((plan.block, want)),
            None => Err(Error::Unknown(format!(
                "pool {:#x}: the run planned at {:#x} for {want} bytes is not free after mapping it",
                self.id, plan.block
            ))),
        }
    }

    /// Unmaps up to `count` shadowed aliases (of size class `class`, or any),
    /// least recently used first. Returns how many went.
    fn evict_aliases(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        class: Option<usize>,
        count: usize,
    ) -> usize {
        let g = vr.granularity;
        let heap = lock(&self.heap);
        let mut victims: Vec<(u64, u64, u64)> = vr
            .aliases
            .iter()
            .filter(|&(&a, al)| {
                class.is_none_or(|c| vr.class_of(a) == Some(c))
                    && vr.phys.get(&al.pid).is_some_and(|p| p.active != a && p.group.is_none())
                    && heap.is_shadowed(a, g)
            })
            .map(|(&a, al)| (al.used, a, al.pid))
            .collect();
        victims.sort_unstable();
        victims.truncate(count);
        drop(heap);
        let mut gone = 0;
        for &(_, addr, pid) in &victims {
            tracing::trace!(target: "hipmem::pool", "evicted an alias of granule {pid:#x} at={addr:#x}");
            if vm.mem_unmap(DevicePtr(addr), g).is_err() {
                continue;
            }
            CallCounts::add(&self.calls.unmaps);
            lock(&self.heap).unback_shadowed(addr, g);
            vr.aliases.remove(&addr);
            if let Some(p) = vr.phys.get_mut(&pid) {
                p.aliases.retain(|&a| a != addr);
            }
            gone += 1;
        }
        gone
    }

    /// Reserves the pool's address range on first use.
    pub(in crate::pool) fn reserve_virtual(
        &self,
        rt: &Runtime,
        vm: &dyn crate::backend::virtual_memory::VirtualMemory,
        guard: &mut Option<VirtualRange>,
    ) -> Result<()> {
        if guard.is_some() {
            return Ok(());
        }
        let granularity = self.unit_for(vm)?;
        let total = rt.device_properties(self.device).ok().map(|d| d.total_memory).unwrap_or(1 << 30);
        // One part per size class, each four times the device's memory:
        // addresses are plentiful, physical memory moves between the parts,
        // and lent units (`lend.rs`) leave their homes' addresses taken.
        // Where the device's addresses run short (every pool of a process
        // reserves twelve times the device's memory: on a 141 GB H200, a
        // test suite's pools made side by side ran out), smaller parts, down
        // to a quarter of the device's memory each.
        let part_for = |bytes: u64| bytes.clamp(1 << 30, 1 << 42).next_multiple_of(granularity);
        let least = part_for(total / 4);
        let part = part_for(total.saturating_mul(4));
        // A part set for the pool (`MemPool::set_address_part`) is taken as
        // it is (in whole units: the unit may have been set after it), and
        // halved only down to a unit where addresses run short.
        let (mut part, least) = match self.address_part.load(Ordering::Relaxed) {
            0 => (part, least),
            set => {
                let set = set.next_multiple_of(granularity);
                (set, set.min(least).max(granularity))
            }
        };
        let (base, size) = loop {
            let size = part * CLASSES as u64;
            match vm.address_reserve(size, granularity, DevicePtr::NULL) {
                Ok(base) => break (base, size),
                Err(Error::OutOfMemory(why)) if part > least => {
                    tracing::debug!(target: "hipmem::pool", "pool {:#x}: reserving {size} bytes of addresses failed ({why}); trying half", self.id);
                    part = (part / 2).next_multiple_of(granularity).max(least);
                }
                Err(e) => return Err(e),
            }
        };
        rt.allocations().insert(Allocation {
            base,
            size,
            kind: MemoryKind::PoolSegment(self.id),
            device: self.device,
        });
        let mut heap = lock(&self.heap);
        heap.keep_places();
        for class in 0..CLASSES {
            heap.add_reservation_for(class, base.0 + class as u64 * part, part);
        }
        // Zone blocks (`zone.rs`) use the largest class's part.
        let zone = crate::pool::zone::ZONE_CLASS as u64;
        self.zone.set_range(base.0 + zone * part, base.0 + (zone + 1) * part);
        drop(heap);
        let mut vr = VirtualRange::new(base.0, size, granularity);
        let budget = self.move_budget();
        vr.tokens = budget.burst_s;
        self.one_class.store(!budget.never_runs_out(), Ordering::Relaxed);
        // Where such a pool keeps tiny blocks apart, its streams' caches keep
        // them over a miss (slots made from now on ask `keeps_tiny_apart`).
        if self.keeps_tiny_apart() {
            for slot in self.all_slots() {
                slot.keep_tiny_apart();
            }
        }
        *guard = Some(vr);
        Ok(())
    }

    /// Reserves another address range for size class `class`, where no
    /// part of the pool's addresses has a hole of `want` bytes: the size of
    /// a part if the device's addresses allow, else just `want` (rounded to
    /// units). At most [`MAX_EXTRA_RANGES`]; none for a pool shared between
    /// processes, which exports its one range by offsets (`sharing.rs`).
    fn reserve_more(
        &self,
        rt: &Runtime,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        class: usize,
        want: u64,
    ) -> Result<()> {
        if self.props.handle_types != 0 {
            return Err(Error::OutOfMemory("a shareable pool keeps one address range".into()));
        }
        // (No addresses for a block the device could never hold.)
        let total = rt.device_properties(self.device).map(|d| d.total_memory).unwrap_or(u64::MAX);
        if want > total {
            return Err(Error::OutOfMemory(format!("{want} bytes are more than the device's {total}")));
        }
        // Extra ranges with nothing mapped in them go back first.
        self.free_empty_extra_ranges(rt, vm, vr);
        if vr.extra.len() >= MAX_EXTRA_RANGES {
            return Err(Error::OutOfMemory(format!(
                "the pool has {MAX_EXTRA_RANGES} more address ranges in use already"
            )));
        }
        let g = vr.granularity;
        let need = want
            .checked_next_multiple_of(g)
            .ok_or_else(|| Error::OutOfMemory(format!("{want} bytes can never be reserved")))?;
        let part = vr.part();
        // (Room for twice the request, at least a part's, first: later
        // requests of the class then fit. Just the request where addresses
        // are short.)
        let roomy = need
            .checked_mul(2)
            .map(|n| n.max(part))
            .and_then(|n| n.checked_next_multiple_of(g))
            .unwrap_or(need);
        let sizes = if need < roomy { vec![roomy, need] } else { vec![need] };
        let mut last = None;
        for size in sizes {
            match vm.address_reserve(size, g, DevicePtr::NULL) {
                Ok(base) => {
                    rt.allocations().insert(Allocation {
                        base,
                        size,
                        kind: MemoryKind::PoolSegment(self.id),
                        device: self.device,
                    });
                    lock(&self.heap).add_reservation_for(class, base.0, size);
                    vr.extra.push(super::range::ExtraRange { base: base.0, size, class });
                    tracing::debug!(target: "hipmem::pool", "pool {:#x}: reserved {size} more bytes of addresses for size class {class} at {base}", self.id);
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::OutOfMemory("no address range".into())))
    }

    /// Gives back the extra address ranges (`reserve_more`) that have
    /// nothing mapped in them.
    fn free_empty_extra_ranges(&self, rt: &Runtime, vm: &dyn VirtualMemory, vr: &mut VirtualRange) {
        let mut i = 0;
        while i < vr.extra.len() {
            let e = vr.extra[i];
            let mapped = vr.aliases.range(e.base..e.base + e.size).next().is_some();
            if !mapped && lock(&self.heap).remove_reservation(e.base) {
                rt.allocations().remove_if(DevicePtr(e.base), |a| a.kind == MemoryKind::PoolSegment(self.id));
                if let Err(err) = vm.address_free(DevicePtr(e.base), e.size) {
                    tracing::warn!(target: "hipmem", "freeing a pool's extra address range failed: {err}");
                }
                vr.extra.swap_remove(i);
            } else {
                i += 1;
            }
        }
    }

    /// Maps physical memory of `size` bytes at `at` with the pool's access
    /// ([`PoolCore::create_and_map`], then access); returns its handle.
    fn map_new_granule(
        &self,
        vm: &dyn VirtualMemory,
        access: &[AccessFlags],
        at: u64,
        size: u64,
        unmapped: &mut Unmapped,
    ) -> Result<u64> {
        let handle = self.create_and_map(vm, at, size, unmapped)?;
        if let Err(e) = give_access(vm, access, at, size) {
            unmap_and_release(&self.calls, vm, at, size, handle);
            return Err(e);
        }
        Ok(handle)
    }

    /// Maps memory moved from elsewhere in the pool where
    /// [`remap::place_moved`] placed it (`placed`: handle, length, address):
    /// a unit alone into `mapped` (its handle is its id), a group whole
    /// into `groups`, access once per run of adjacent mappings. After an
    /// error the rest go to `unmapped` (they go back); what was mapped
    /// stays.
    #[allow(clippy::too_many_arguments)]
    fn map_moved(
        &self,
        vm: &dyn VirtualMemory,
        access: &[AccessFlags],
        g: u64,
        mut placed: Vec<(u64, u64, u64)>,
        unmapped: &mut Unmapped,
        mapped: &mut Vec<(u64, u64, bool)>,
        groups: &mut Vec<(u64, Group)>,
    ) -> Result<()> {
        placed.sort_unstable_by_key(|&(_, _, at)| at);
        let mut done: Vec<(u64, u64, u64)> = Vec::new(); // (handle, len, at)
        let mut error = None;
        for (handle, len, at) in placed {
            if error.is_some() {
                unmapped.push((handle, len));
                continue;
            }
            match vm.mem_map(DevicePtr(at), len, 0, handle) {
                Ok(()) => {
                    CallCounts::add(&self.calls.maps);
                    done.push((handle, len, at));
                }
                Err(e) => {
                    unmapped.push((handle, len));
                    error = Some(e);
                }
            }
        }
        let spans: Vec<(u64, u64)> = done.iter().map(|&(_, len, at)| (at, len)).collect();
        let mut kept = Vec::with_capacity(done.len());
        for run in adjacent_runs(&spans) {
            let (start, (last, len)) = (spans[run.start].0, spans[run.end - 1]);
            match give_access(vm, access, start, last + len - start) {
                Ok(()) => kept.extend_from_slice(&done[run]),
                Err(e) => {
                    // Mapped without access: unmapped again, and they go back.
                    for &(handle, len, at) in &done[run] {
                        let _ = vm.mem_unmap(DevicePtr(at), len);
                        unmapped.push((handle, len));
                    }
                    error.get_or_insert(e);
                }
            }
        }
        let bytes: u64 = kept.iter().map(|&(_, len, _)| len).sum();
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: moved {} physical allocations ({bytes} bytes) under a growth; {} go back", self.id, kept.len(), unmapped.len());
        for (handle, len, at) in kept {
            if len == g {
                mapped.push((at, handle, true));
            } else {
                groups.push((at, Group { handle, len }));
            }
        }
        error.map_or(Ok(()), Err)
    }

    /// Maps physical memory of `size` bytes at `at`, with no access yet
    /// ([`give_access`]): an allocation of that size out of `unmapped` if
    /// there is one, else a new one. Returns its handle.
    fn create_and_map(
        &self,
        vm: &dyn VirtualMemory,
        at: u64,
        size: u64,
        unmapped: &mut Unmapped,
    ) -> Result<u64> {
        let calls = &self.calls;
        let handle = match unmapped.iter().position(|&(_, len)| len == size) {
            Some(i) => unmapped.swap_remove(i).0,
            None => match self.deferred.take(size) {
                // Queued to go back and not gone yet: mapped again instead.
                Some(handle) => handle,
                None => {
                    let created = match vm.mem_create_whole(self.device, size, self.props.handle_types) {
                        // Memory still queued to go back may be what the
                        // device lacks: once it has gone, try again.
                        Err(Error::OutOfMemory(_))
                            if self.deferred.queued_bytes() > 0 || self.deferred.busy() =>
                        {
                            self.deferred.wait_empty();
                            vm.mem_create_whole(self.device, size, self.props.handle_types)
                        }
                        other => other,
                    };
                    let handle = created?;
                    CallCounts::add(&calls.granules_created);
                    CallCounts::add_bytes(&calls.bytes_created, size);
                    handle
                }
            },
        };
        if let Err(e) = vm.mem_map(DevicePtr(at), size, 0, handle) {
            unmap_and_release(calls, vm, at, size, handle);
            return Err(e);
        }
        CallCounts::add(&calls.maps);
        Ok(handle)
    }
}
