//! How a pool gets memory from the backend and gives it back: separate
//! segments, or physical chunks mapped into one reserved address range.
#![forbid(unsafe_code)]

use std::sync::Mutex;
use std::sync::atomic::Ordering;

use super::AccessFlags;
use super::core::{MAX_GROWTH_STEP, MIN_SEGMENT, PoolCore, lock};
use super::placement::BLOCK_ALIGN;
use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::runtime::{Allocation, MemoryKind, Runtime};

/// How a pool gets memory from the backend.
pub(crate) enum Backing {
    /// Separate device allocations (segments); blocks coalesce within one.
    Segments,
    /// One reserved address range; physical chunks are mapped into it as the
    /// pool grows (right after free space, so free space coalesces across
    /// chunk boundaries) and unmapped and released once wholly free, while
    /// live addresses stay put. Taken where the backend has virtual memory
    /// (unless `HIPMEM_POOL_BACKING=segments`).
    Virtual(Mutex<Option<VirtualRange>>),
}

/// The reservation of a pool on virtual memory and the chunks mapped in it.
pub(crate) struct VirtualRange {
    pub(super) base: u64,
    pub(super) size: u64,
    pub(super) granularity: u64,
    /// Mapped chunks: address → (size, physical handle).
    pub(super) chunks: std::collections::BTreeMap<u64, (u64, u64)>,
}

impl Backing {
    pub(super) fn choose(rt: &Runtime, device: usize, requested: Option<super::PoolBacking>) -> Backing {
        let wanted = match requested {
            Some(b) => b == super::PoolBacking::VirtualMemory,
            None => std::env::var("HIPMEM_POOL_BACKING").map(|v| v != "segments").unwrap_or(true),
        };
        let capable = rt.device_properties(device).ok().is_some_and(|d| d.capabilities.virtual_memory);
        if wanted && capable && rt.backend().virtual_memory().is_some() {
            Backing::Virtual(Mutex::new(None))
        } else {
            Backing::Segments
        }
    }
}
impl Drop for PoolCore {
    /// The runtime is going away with this pool: every segment, chunk and
    /// reservation goes back to the backend (work still queued is waited for
    /// by the backend's own free).
    fn drop(&mut self) {
        let heap = self.heap.get_mut().unwrap_or_else(|p| p.into_inner());
        match &self.backing {
            Backing::Segments => {
                for seg in heap.segments().copied().collect::<Vec<_>>() {
                    if let Err(e) = self.backend.mem_free(self.device, DevicePtr(seg.base)) {
                        tracing::debug!(target: "hipmem", "releasing a pool segment at teardown: {e}");
                    }
                }
            }
            Backing::Virtual(range) => {
                let Some(vm) = self.backend.virtual_memory() else { return };
                if let Some(vr) = range.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = self.backend.device_synchronize(self.device);
                    for (&addr, &(size, handle)) in &vr.chunks {
                        let _ = vm.mem_unmap(DevicePtr(addr), size);
                        let _ = vm.mem_release(handle);
                    }
                    if let Err(e) = vm.address_free(DevicePtr(vr.base), vr.size) {
                        tracing::debug!(target: "hipmem", "freeing a pool's reservation at teardown: {e}");
                    }
                }
            }
        }
    }
}

impl PoolCore {
    /// Adds a segment large enough for `want`, within maxSize.
    pub(crate) fn grow(&self, rt: &Runtime, want: u64) -> Result<()> {
        if let Backing::Virtual(range) = &self.backing {
            return self.grow_virtual(rt, range, want);
        }
        let reserved = lock(&self.heap).reserved();
        let step = (reserved / 32).clamp(MIN_SEGMENT, MAX_GROWTH_STEP);
        let mut size = want
            .max(step)
            .checked_next_multiple_of(MIN_SEGMENT)
            .ok_or_else(|| Error::OutOfMemory(format!("{want} bytes do not fit the address space")))?;
        if self.props.max_size > 0 {
            let room = self.props.max_size.saturating_sub(reserved);
            if want > room {
                return Err(Error::OutOfMemory(format!(
                    "the pool's maxSize of {} bytes is reached ({reserved} reserved)",
                    self.props.max_size
                )));
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
        rt.allocations().insert(Allocation {
            base: ptr,
            size,
            kind: MemoryKind::PoolSegment(self.id),
            device: self.device,
        });
        let mut heap = lock(&self.heap);
        heap.add_segment(ptr.0, size);
        self.reserved_high.fetch_max(heap.reserved(), Ordering::AcqRel);
        Ok(())
    }

    /// Grows a pool on virtual memory: maps a chunk into the reservation where
    /// it joins the most free space (the end of a free block), so that the
    /// request fits in one run; reserves the range on first use.
    pub(super) fn grow_virtual(
        &self,
        rt: &Runtime,
        range: &Mutex<Option<VirtualRange>>,
        want: u64,
    ) -> Result<()> {
        let vm = rt
            .backend()
            .virtual_memory()
            .ok_or_else(|| Error::NotSupported("the backend lost its virtual memory".into()))?;
        let mut guard = lock(range);
        self.reserve_virtual(rt, vm, &mut guard)?;
        let vr = guard.as_mut().expect("reserved above");
        let g = vr.granularity;
        let (addr, chunk) = {
            let heap = lock(&self.heap);
            let reserved = heap.reserved();
            // Geometric at first (the step doubles the pool up to 32 MiB),
            // then 1/64 of what is reserved: few mappings, little over-mapping.
            let step =
                (reserved / 64).max(reserved.min(32 << 20)).clamp(g, MAX_GROWTH_STEP).next_multiple_of(g);
            let mut best: Option<(u64, u64, u64)> = None; // (need, addr, chunk)
            for (start, size) in heap.unbacked_ranges() {
                let before = heap.global_free_ending_at(start);
                let need = want.saturating_sub(before).max(1).checked_next_multiple_of(g).unwrap_or(u64::MAX);
                if need > size {
                    continue;
                }
                let chunk = need.max(step).min(size);
                if best.is_none_or(|b| need < b.0) {
                    best = Some((need, start, chunk));
                }
            }
            let Some((need, addr, mut chunk)) = best else {
                return Err(Error::OutOfMemory(format!(
                    "the pool's {}-byte address reservation has no room for {want} more bytes",
                    vr.size
                )));
            };
            if self.props.max_size > 0 {
                let room = self.props.max_size.saturating_sub(reserved) / g * g;
                if need > room {
                    return Err(Error::OutOfMemory(format!(
                        "the pool's maxSize of {} bytes is reached ({reserved} reserved)",
                        self.props.max_size
                    )));
                }
                chunk = chunk.min(room).max(need);
            }
            (addr, chunk)
        };
        let handle = vm.mem_create(self.device, chunk, self.props.handle_types)?;
        let mapped = vm.mem_map(DevicePtr(addr), chunk, 0, handle).and_then(|()| {
            let access = lock(&self.access).clone();
            for (device, flags) in access.iter().enumerate() {
                if *flags != AccessFlags::None {
                    vm.mem_set_access(DevicePtr(addr), chunk, device, flags.raw())?;
                }
            }
            Ok(())
        });
        if let Err(e) = mapped {
            let _ = vm.mem_unmap(DevicePtr(addr), chunk);
            let _ = vm.mem_release(handle);
            return Err(e);
        }
        vr.chunks.insert(addr, (chunk, handle));
        let mut heap = lock(&self.heap);
        heap.back(addr, chunk);
        self.reserved_high.fetch_max(heap.reserved(), Ordering::AcqRel);
        Ok(())
    }

    /// Reserves the pool's address range on first use.
    pub(super) fn reserve_virtual(
        &self,
        rt: &Runtime,
        vm: &dyn crate::backend::virtual_memory::VirtualMemory,
        guard: &mut Option<VirtualRange>,
    ) -> Result<()> {
        if guard.is_some() {
            return Ok(());
        }
        let granularity = vm.granularity(self.device, false)?.max(BLOCK_ALIGN);
        let total = rt.device_properties(self.device).ok().map(|d| d.total_memory).unwrap_or(1 << 30);
        let size = (total.saturating_mul(2)).clamp(1 << 30, 1 << 42).next_multiple_of(granularity);
        let base = vm.address_reserve(size, granularity, DevicePtr::NULL)?;
        rt.allocations().insert(Allocation {
            base,
            size,
            kind: MemoryKind::PoolSegment(self.id),
            device: self.device,
        });
        lock(&self.heap).add_reservation(base.0, size);
        *guard = Some(VirtualRange { base: base.0, size, granularity, chunks: Default::default() });
        Ok(())
    }

    /// Releases one piece of unused memory (a whole free segment or chunk),
    /// the largest that keeps at least `floor` bytes reserved. Returns false
    /// if there is none.
    pub(crate) fn release_one(&self, rt: &Runtime, floor: u64) -> bool {
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
                    let Some(seg) = candidates.into_iter().next() else { return false };
                    heap.remove_segment(seg.base);
                    seg
                };
                rt.allocations()
                    .remove_if(DevicePtr(seg.base), |a| a.kind == MemoryKind::PoolSegment(self.id));
                if let Err(e) = rt.backend().mem_free(self.device, DevicePtr(seg.base)) {
                    tracing::warn!(target: "hipmem", "releasing a pool segment failed: {e}");
                }
                true
            }
            Backing::Virtual(range) => {
                let Some(vm) = rt.backend().virtual_memory() else { return false };
                let mut guard = lock(range);
                let Some(vr) = guard.as_mut() else { return false };
                let victim = {
                    let mut heap = lock(&self.heap);
                    let reserved = heap.reserved();
                    let mut candidates: Vec<(u64, u64, u64)> = vr
                        .chunks
                        .iter()
                        .filter(|&(&a, &(size, _))| {
                            heap.is_global_free(a, size) && reserved.saturating_sub(size) >= floor
                        })
                        .map(|(&a, &(size, h))| (a, size, h))
                        .collect();
                    candidates.sort_by_key(|c| std::cmp::Reverse(c.1));
                    let Some(victim) = candidates.into_iter().next() else { return false };
                    heap.unback(victim.0, victim.1);
                    victim
                };
                vr.chunks.remove(&victim.0);
                if let Err(e) = vm.mem_unmap(DevicePtr(victim.0), victim.1) {
                    tracing::warn!(target: "hipmem", "unmapping a pool chunk failed: {e}");
                }
                if let Err(e) = vm.mem_release(victim.2) {
                    tracing::warn!(target: "hipmem", "releasing a pool chunk failed: {e}");
                }
                // A destroyed pool with nothing backed gives its addresses back.
                if self.is_destroyed() && vr.chunks.is_empty() && lock(&self.heap).remove_reservation(vr.base)
                {
                    rt.allocations()
                        .remove_if(DevicePtr(vr.base), |a| a.kind == MemoryKind::PoolSegment(self.id));
                    if let Err(e) = vm.address_free(DevicePtr(vr.base), vr.size) {
                        tracing::warn!(target: "hipmem", "freeing a pool's reservation failed: {e}");
                    }
                    *guard = None;
                }
                true
            }
        }
    }
}
