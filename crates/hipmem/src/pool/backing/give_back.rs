//! Giving physical memory back: unused units and groups unmapped and
//! released (at once or on the release worker), whole segments, loans sent
//! home, and the checks and maps of what the pool holds.
#![forbid(unsafe_code)]

use std::sync::atomic::Ordering;

use super::*;
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::VirtualMemory;
use crate::pool::core::{CallCounts, PoolCore, lock};
use crate::pool::lend::Loan;
use crate::pool::placement::{BlockKind, CLASSES, Owner};
use crate::runtime::{MemoryKind, Runtime};

impl PoolCore {
    /// Releases unused memory: whole free segments (largest first), or
    /// granules not in use (the longest unused first), until `bytes` are
    /// released or none is left, keeping at least `floor` bytes reserved.
    /// Returns the bytes released. With `keep`, the physical allocations
    /// on virtual memory are unmapped but not given back: they are listed
    /// there (counted as released) for the growth that follows
    /// ([`PoolCore::grow_reusing`]) or the release worker.
    pub(in crate::pool) fn release_unused_keeping(
        &self,
        rt: &Runtime,
        bytes: u64,
        floor: u64,
        keep: Option<&mut Unmapped>,
    ) -> u64 {
        self.release_unused_in_order(rt, bytes, floor, keep, false)
    }

    /// [`PoolCore::release_unused_keeping`], on virtual memory wholly free
    /// groups first where `groups_first` (each moves or goes back in one
    /// unmap, whatever its size), then units.
    pub(in crate::pool) fn release_unused_in_order(
        &self,
        rt: &Runtime,
        bytes: u64,
        floor: u64,
        mut keep: Option<&mut Unmapped>,
        groups_first: bool,
    ) -> u64 {
        match &self.backing {
            Backing::Segments => {
                let mut released = 0;
                while released < bytes {
                    match self.release_segment(rt, floor) {
                        Some(n) => released += n,
                        None => break,
                    }
                }
                released
            }
            Backing::Virtual(range) => {
                let Some(vm) = rt.backend().virtual_memory() else { return 0 };
                let mut guard = lock(range);
                let Some(vr) = guard.as_mut() else { return 0 };
                let mut released = 0;
                if groups_first {
                    self.give_back_groups(vm, vr, bytes, floor, &mut released, keep.as_deref_mut());
                    self.give_back_units(vm, vr, bytes, floor, &mut released, keep);
                } else {
                    self.give_back_units(vm, vr, bytes, floor, &mut released, keep.as_deref_mut());
                    self.give_back_groups(vm, vr, bytes, floor, &mut released, keep);
                }
                self.free_addresses_if_destroyed(rt, vm, &mut guard);
                released
            }
        }
    }

    /// Units alone that are wholly free go back (or into `keep`), the
    /// longest unused first, until `released` reaches `bytes`, never taking
    /// the pool below `floor`.
    fn give_back_units(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        bytes: u64,
        floor: u64,
        released: &mut u64,
        mut keep: Option<&mut Unmapped>,
    ) {
        let g = vr.granularity;
        let mut victims = {
            let heap = lock(&self.heap);
            vr.donors(&heap)
        };
        victims.sort_by_key(|d| (d.freed, d.active));
        for d in victims {
            if *released >= bytes {
                break;
            }
            let mut heap = lock(&self.heap);
            if heap.reserved().saturating_sub(g) < floor || !heap.unback(d.active, g) {
                continue;
            }
            let Some(p) = vr.phys.remove(&d.pid) else { continue };
            tracing::trace!(target: "hipmem::pool", "released granule {:#x} aliases={:x?}", d.pid, p.aliases);
            for &a in &p.aliases {
                if a != p.active {
                    heap.unback_shadowed(a, g);
                }
                vr.aliases.remove(&a);
            }
            drop(heap);
            for &a in &p.aliases {
                match vm.mem_unmap(DevicePtr(a), g) {
                    Ok(()) => CallCounts::add(&self.calls.unmaps),
                    Err(e) => {
                        tracing::warn!(target: "hipmem", "unmapping a pool granule failed: {e}")
                    }
                }
            }
            crate::trace::pool_release(self.id, self.device, p.active, g);
            self.release_or_keep(d.pid, g, keep.as_deref_mut());
            *released += g;
        }
    }

    /// Wholly free loans go home (`lend.rs`: their addresses come back, and
    /// their groups may go back whole); then groups whose every unit is free
    /// go back whole (or into `keep`), the longest unused first, until
    /// `released` reaches `bytes`, never taking the pool below `floor`.
    fn give_back_groups(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        bytes: u64,
        floor: u64,
        released: &mut u64,
        mut keep: Option<&mut Unmapped>,
    ) {
        self.unmap_idle_loans(vm, vr);
        let mut idle: Vec<(u64, u64, Group)> = {
            let heap = lock(&self.heap);
            vr.groups
                .iter()
                .filter_map(|(&base, &gr)| Some((vr.group_idle(&heap, base, gr.len)?, base, gr)))
                .collect()
        };
        idle.sort_unstable_by_key(|&(freed, base, _)| (freed, base));
        for (_, base, gr) in idle {
            if *released >= bytes {
                break;
            }
            if self.release_group(vm, vr, base, gr, floor, keep.as_deref_mut()) {
                *released += gr.len;
            }
        }
    }

    /// A destroyed pool with nothing mapped gives its addresses back: its
    /// reservation is freed and `guard` (the pool's range) emptied.
    fn free_addresses_if_destroyed(
        &self,
        rt: &Runtime,
        vm: &dyn VirtualMemory,
        guard: &mut Option<super::range::VirtualRange>,
    ) {
        let Some(vr) = guard.as_ref() else { return };
        let part = vr.part();
        if self.is_destroyed()
            && vr.aliases.is_empty()
            && (0..CLASSES as u64).all(|k| lock(&self.heap).remove_reservation(vr.base + k * part))
            && vr.extra.iter().all(|e| lock(&self.heap).remove_reservation(e.base))
        {
            for (base, size) in vr.ranges() {
                rt.allocations().remove_if(DevicePtr(base), |a| a.kind == MemoryKind::PoolSegment(self.id));
                if let Err(e) = vm.address_free(DevicePtr(base), size) {
                    tracing::warn!(target: "hipmem", "freeing a pool's reservation failed: {e}");
                }
            }
            *guard = None;
        }
    }

    /// [`PoolCore::free_addresses_if_destroyed`] on its own, for a destroyed
    /// pool whose memory went back before it was destroyed (at a
    /// synchronization): with nothing to release, no give-back reaches it.
    pub(in crate::pool) fn give_back_addresses_if_destroyed(&self, rt: &Runtime) {
        let Backing::Virtual(range) = &self.backing else { return };
        let Some(vm) = rt.backend().virtual_memory() else { return };
        self.free_addresses_if_destroyed(rt, vm, &mut lock(range));
    }

    /// Gives back (on the release worker) the physical allocations in
    /// `unmapped` that no size in `needed` (each used once) asks for.
    pub(super) fn release_unmapped_but(&self, unmapped: &mut Unmapped, needed: &[u64]) {
        let mut needed = needed.to_vec();
        let mut unneeded = Vec::new();
        unmapped.retain(|&(handle, len)| {
            if let Some(i) = needed.iter().position(|&n| n == len) {
                needed.swap_remove(i);
                return true;
            }
            unneeded.push((handle, len));
            false
        });
        self.release_later(unneeded);
    }

    /// Gives back the unmapped physical allocation `handle` of `len` bytes,
    /// or with `keep` lists it there for the growth that follows
    /// ([`PoolCore::grow_reusing`]).
    fn release_or_keep(&self, handle: u64, len: u64, keep: Option<&mut Unmapped>) {
        match keep {
            Some(keep) => keep.push((handle, len)),
            None => {
                if let Some(vm) = self.backend.virtual_memory() {
                    crate::pool::deferred::release_now(vm, &self.calls, handle, len);
                }
            }
        }
    }

    /// Whether loans taken from frees still pending on `stream` are out
    /// (`lend.rs`): the pool keeps the stream's clock for them.
    pub(in crate::pool) fn has_busy_loans(&self, stream: u64) -> bool {
        let Backing::Virtual(range) = &self.backing else { return false };
        lock(range).as_ref().is_some_and(|vr| {
            vr.busy.values().any(|o| matches!(o, Owner::Stream { stream: s, .. } if *s == stream))
        })
    }

    /// For each stream whose pending frees loans were taken from, the tag
    /// below which its frees are known complete (read before the heap is
    /// locked).
    fn completed_clocks(&self, vr: &VirtualRange) -> Vec<(u64, u64)> {
        if vr.busy.is_empty() {
            return Vec::new();
        }
        let slots = lock(&self.slots);
        vr.busy_streams()
            .into_iter()
            .filter_map(|s| Some((s, slots.get(&s)?.clock.completed_tag())))
            .collect()
    }

    /// How much of a growth of `want` bytes on `stream` lending could cover
    /// now (`lend.rs`): free runs of groups, global or pending on that
    /// stream.
    pub(in crate::pool) fn lendable_for(&self, stream: u64, want: u64) -> u64 {
        let Backing::Virtual(range) = &self.backing else { return 0 };
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return 0 };
        let heap = lock(&self.heap);
        let sources = vr.lendable(&heap, Some(stream));
        let holes = heap.unbacked_ranges();
        drop(heap);
        crate::pool::lend::coverable(want, vr.granularity, &sources, &holes, crate::pool::lend::MOST_SOURCES)
    }

    /// Whether frees owned as `owner` are known complete (global memory
    /// always; a stream's pending frees once its clock has passed them; a
    /// stream the pool no longer knows: not known).
    fn owner_complete(&self, owner: Owner) -> bool {
        match owner {
            Owner::Global => true,
            Owner::Stream { stream, tag } => self.clock_of(stream).is_some_and(|c| tag < c.completed_tag()),
        }
    }

    /// Gives back the unmapped physical allocations in `unmapped` on the
    /// release worker (`deferred.rs`): what the allocation path gives back.
    pub(in crate::pool) fn release_later(&self, unmapped: Unmapped) {
        self.deferred.give_back(unmapped);
    }

    /// On virtual memory: each physical unit is used at exactly one
    /// address (the heap's reserved bytes are the units'), and every loan's
    /// group is mapped (for tests, [`PoolCore::check_invariants`]).
    pub(crate) fn check_physical(&self) -> std::result::Result<(), String> {
        let Backing::Virtual(range) = &self.backing else { return Ok(()) };
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return Ok(()) };
        let reserved = lock(&self.heap).reserved();
        if reserved != vr.physical_bytes() {
            return Err(format!("the heap uses {reserved} bytes but {} are mapped", vr.physical_bytes()));
        }
        match vr.loans.iter().find(|(_, l)| !vr.groups.contains_key(&l.group)) {
            Some((at, l)) => Err(format!("the loan at {at:#x} is of a group at {:#x} that is gone", l.group)),
            None => Ok(()),
        }
    }

    /// Sends every wholly free loan home (`lend.rs`), on the slow path
    /// before best fit: no driver call. Skipped while another thread holds
    /// the range (a growth mapping memory): the slow path never waits for
    /// the driver, and the next one sends them.
    pub(in crate::pool) fn switch_loans_home(&self) {
        if !self.lending.load(Ordering::Relaxed) {
            return;
        }
        let Backing::Virtual(range) = &self.backing else { return };
        let Ok(mut guard) = range.try_lock() else { return };
        let Some(vr) = guard.as_mut() else { return };
        let completed = self.completed_clocks(vr);
        vr.send_free_loans_home(&mut lock(&self.heap), &completed);
    }

    /// Unmaps every loan that holds no unit in use there (`lend.rs`):
    /// wholly free ones go home first. Returns how many went.
    pub(super) fn unmap_idle_loans(&self, vm: &dyn VirtualMemory, vr: &mut VirtualRange) -> usize {
        let completed = self.completed_clocks(vr);
        let gone: Vec<(u64, Loan)> = {
            let mut heap = lock(&self.heap);
            vr.send_free_loans_home(&mut heap, &completed);
            let idle: Vec<(u64, Loan)> = vr
                .loans
                .iter()
                .filter(|(at, l)| {
                    let (alias, whole) = l.alias(**at);
                    heap.blocks_between(alias, alias + whole).all(|b| b.2 == BlockKind::Shadowed)
                })
                .map(|(&at, &l)| (at, l))
                .collect();
            for &(at, l) in &idle {
                let (alias, whole) = l.alias(at);
                unback_mapping(&mut heap, alias, whole);
                heap.forget_group(at);
            }
            idle
        };
        for &(at, l) in &gone {
            vr.loans.remove(&at);
            tracing::trace!(target: "hipmem::pool", "unmapped a loan of {} units at={at:#x}", l.len / vr.granularity);
            let (alias, whole) = l.alias(at);
            match vm.mem_unmap(DevicePtr(alias), whole) {
                Ok(()) => CallCounts::add(&self.calls.unmaps),
                Err(e) => tracing::warn!(target: "hipmem", "unmapping a pool loan failed: {e}"),
            }
        }
        if vr.loans.is_empty() {
            self.lending.store(false, Ordering::Relaxed);
        }
        gone.len()
    }

    /// Unmaps and releases the group at `base` if every unit of it is global
    /// free memory and `floor` bytes stay reserved without it. Returns
    /// whether it went.
    fn release_group(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        base: u64,
        gr: Group,
        floor: u64,
        keep: Option<&mut Unmapped>,
    ) -> bool {
        let g = vr.granularity;
        // A loan taken from frees still pending keeps its group until they
        // are known complete (`lend.rs`): its home may still be in use by
        // the work queued before them.
        let loans: Vec<u64> = if vr.busy.is_empty() {
            Vec::new()
        } else {
            vr.loans.iter().filter(|(_, l)| l.group == base).map(|(&at, _)| at).collect()
        };
        if loans.iter().any(|at| vr.busy.get(at).is_some_and(|&o| !self.owner_complete(o))) {
            return false;
        }
        let mut heap = lock(&self.heap);
        if heap.reserved().saturating_sub(gr.len) < floor || vr.group_idle(&heap, base, gr.len).is_none() {
            return false;
        }
        for at in &loans {
            vr.busy.remove(at);
        }
        // Every unit is free where it is used (checked above): every
        // mapping of the group becomes unbacked, free and shadowed blocks
        // alike.
        let mappings = vr.mappings_of(base, gr.len);
        for &(key, at, m) in &mappings {
            unback_mapping(&mut heap, at, m);
            if let Some(key) = key {
                vr.loans.remove(&key);
                heap.forget_group(key);
            }
        }
        for at in (base..base + gr.len).step_by(g as usize) {
            if let Some(alias) = vr.aliases.remove(&at) {
                vr.phys.remove(&alias.pid);
            }
        }
        vr.groups.remove(&base);
        heap.forget_group(base);
        drop(heap);
        tracing::trace!(target: "hipmem::pool", "released a group of {} units at={base:#x}", gr.len / g);
        for (_, alias, whole) in mappings.into_iter().skip(1) {
            match vm.mem_unmap(DevicePtr(alias), whole) {
                Ok(()) => CallCounts::add(&self.calls.unmaps),
                Err(e) => tracing::warn!(target: "hipmem", "unmapping a loan of a pool group failed: {e}"),
            }
        }
        match vm.mem_unmap(DevicePtr(base), gr.len) {
            Ok(()) => CallCounts::add(&self.calls.unmaps),
            Err(e) => tracing::warn!(target: "hipmem", "unmapping a pool group failed: {e}"),
        }
        crate::trace::pool_release(self.id, self.device, base, gr.len);
        self.release_or_keep(gr.handle, gr.len, keep);
        true
    }

    /// The physical pieces behind the pool's memory, (address, bytes) in
    /// address order: each segment, or on virtual memory each group mapped
    /// in one call and each unit mapped alone, at the address the heap uses
    /// it. A piece goes back to the backend (or moves) only whole.
    pub(in crate::pool) fn physical_pieces(&self) -> Vec<(u64, u64)> {
        let mut pieces: Vec<(u64, u64)> = match &self.backing {
            Backing::Segments => lock(&self.heap).segments().map(|s| (s.base, s.size)).collect(),
            Backing::Virtual(range) => {
                let guard = lock(range);
                let Some(vr) = guard.as_ref() else { return Vec::new() };
                let g = vr.granularity;
                vr.phys
                    .values()
                    .filter(|p| p.group.is_none())
                    .map(|p| (p.active, g))
                    .chain(vr.groups.iter().map(|(&base, gr)| (base, gr.len)))
                    .chain(vr.loans.iter().map(|(&at, l)| (at, l.len)))
                    .collect()
            }
        };
        pieces.sort_unstable();
        pieces
    }

    /// What giving back all unused memory now would unmap: each wholly free
    /// unit and each group whose every unit is free (address, length), in
    /// address order. Empty where the pool is not on virtual memory.
    pub(in crate::pool) fn releasable_spans(&self) -> Vec<(u64, u64)> {
        let Backing::Virtual(range) = &self.backing else { return Vec::new() };
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return Vec::new() };
        let heap = lock(&self.heap);
        let g = vr.granularity;
        let mut spans: Vec<(u64, u64)> = vr.donors(&heap).into_iter().map(|d| (d.active, g)).collect();
        spans.extend(
            vr.groups
                .iter()
                .filter(|&(&base, gr)| vr.group_idle(&heap, base, gr.len).is_some())
                .map(|(&base, gr)| (base, gr.len)),
        );
        spans.sort_unstable();
        spans
    }

    /// The longest run of consecutive groups whose every unit is global free
    /// memory: each group's (address, length), in address order (empty if
    /// there is none, or the pool is not on virtual memory). A plan's new
    /// piece goes there (`planned.rs`): the physical memory of the arena
    /// before it, kept mapped where it is rather than given back and
    /// created again.
    pub(in crate::pool) fn free_group_chain(&self) -> Vec<(u64, u64)> {
        let Backing::Virtual(range) = &self.backing else { return Vec::new() };
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return Vec::new() };
        let heap = lock(&self.heap);
        // The longest run and the current one: (first index, groups, bytes).
        let groups: Vec<(u64, u64)> = vr.groups.iter().map(|(&base, gr)| (base, gr.len)).collect();
        let (mut best, mut run) = ((0, 0, 0u64), (0, 0, 0u64));
        for (i, &(base, len)) in groups.iter().enumerate() {
            let follows = run.1 > 0 && groups[i - 1].0 + groups[i - 1].1 == base;
            if heap.global_free_run(base, len).is_none() {
                run = (i + 1, 0, 0);
                continue;
            }
            run = if follows { (run.0, run.1 + 1, run.2 + len) } else { (i, 1, len) };
            if run.2 > best.2 {
                best = run;
            }
        }
        groups[best.0..best.0 + best.1].to_vec()
    }

    /// Whether the pool holds no addresses: on virtual memory, its
    /// reservation is freed (or was never made); with segments, it has none.
    pub(in crate::pool) fn addresses_given_back(&self) -> bool {
        match &self.backing {
            Backing::Segments => lock(&self.heap).segments().next().is_none(),
            Backing::Virtual(range) => lock(range).is_none(),
        }
    }

    /// Whether memory for `len` bytes (rounded up to whole units) can be
    /// mapped at `at`: its addresses are unbacked.
    pub(in crate::pool) fn can_map_at(&self, at: u64, len: u64) -> bool {
        let Backing::Virtual(range) = &self.backing else { return false };
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return false };
        let Some(len) = len.checked_next_multiple_of(vr.granularity) else { return false };
        lock(&self.heap).is_unbacked(at, len)
    }

    /// Unmaps and releases the groups at `bases` whose every unit is global
    /// free memory. Returns the bytes released.
    pub(in crate::pool) fn release_groups(&self, rt: &Runtime, bases: &[u64]) -> u64 {
        let Backing::Virtual(range) = &self.backing else { return 0 };
        let Some(vm) = rt.backend().virtual_memory() else { return 0 };
        let mut guard = lock(range);
        let Some(vr) = guard.as_mut() else { return 0 };
        let mut released = 0;
        for &base in bases {
            let Some(&gr) = vr.groups.get(&base) else { continue };
            if self.release_group(vm, vr, base, gr, 0, None) {
                released += gr.len;
            }
        }
        released
    }

    /// Releases the largest whole free segment that keeps `floor` bytes
    /// reserved; its size, or None.
    fn release_segment(&self, rt: &Runtime, floor: u64) -> Option<u64> {
        match &self.backing {
            Backing::Segments => {
                let seg = {
                    let mut heap = lock(&self.heap);
                    let reserved = heap.reserved();
                    let mut candidates: Vec<_> = heap
                        .releasable_segments()
                        .into_iter()
                        .filter(|s| reserved.saturating_sub(s.size) >= floor)
                        .collect();
                    candidates.sort_by_key(|s| std::cmp::Reverse(s.size));
                    let seg = candidates.into_iter().next()?;
                    heap.remove_segment(seg.base);
                    seg
                };
                rt.allocations()
                    .remove_if(DevicePtr(seg.base), |a| a.kind == MemoryKind::PoolSegment(self.id));
                crate::trace::pool_release(self.id, self.device, seg.base, seg.size);
                match rt.backend().mem_free(self.device, DevicePtr(seg.base)) {
                    Ok(()) => {
                        CallCounts::add(&self.calls.segments_freed);
                        CallCounts::add_bytes(&self.calls.bytes_released, seg.size);
                    }
                    Err(e) => tracing::warn!(target: "hipmem", "releasing a pool segment failed: {e}"),
                }
                Some(seg.size)
            }
            Backing::Virtual(_) => None,
        }
    }
}
