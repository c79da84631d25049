//! hipmem's stream-ordered pool: the slots, the shared heap and the reuse rules.
//!
//! Allocation on stream `S`, cheapest first:
//! 1. `S`'s slot cache: a block freed on `S` (no shared lock, no driver call).
//! 2. The shared heap, best fit among blocks free for every stream and blocks
//!    pending on `S` itself.
//! 3. Blocks pending on another stream `T`, if a reuse rule allows it:
//!    follow event dependencies (`S` waited on an event recorded on `T` after
//!    the free) or opportunistic (the free has completed on the device).
//!    Before this step the other streams' caches are flushed into the heap.
//! 4. Growth: a new segment from the backend (within the pool's maxSize).
//! 5. Internal dependencies, when growing is impossible: make `S` wait for `T`
//!    (an event from the event pool) and take `T`'s pending block.
//! 6. Release what the pool caches and completed frees, retry growth once.
//! 7. OutOfMemory, stating the request, the pool's used and reserved bytes and
//!    the device's free memory.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::placement::{BLOCK_ALIGN, Heap, Owner, block_size};
use super::stream_cache::{CachedBlock, Slot, recent_slot, remember_slot};
use super::{AccessFlags, PoolAttribute, PoolProps, PoolStats};
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};
use crate::runtime::ordering::StreamClock;
use crate::runtime::{Allocation, MemoryKind, RuntimeInner};

/// Smallest segment the pool asks the backend for.
pub const MIN_SEGMENT: u64 = 2 << 20;
/// Largest growth step for small requests.
pub const MAX_GROWTH_STEP: u64 = 128 << 20;

/// What the pool needs to know of the stream an operation is ordered in.
#[derive(Copy, Clone)]
pub(crate) struct StreamRef<'a> {
    /// The stream's ordering clock.
    pub(crate) clock: &'a Arc<StreamClock>,
    /// The backend handle.
    pub(crate) raw: RawStream,
    /// Where the stream caches the slot of the first pool it uses.
    pub(crate) primary: Option<&'a std::sync::OnceLock<Arc<Slot>>>,
}

/// Id of the slot that holds blocks of destroyed streams.
const ORPHAN_STREAM: u64 = u64::MAX;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How a pool gets memory from the backend.
enum Backing {
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
struct VirtualRange {
    base: u64,
    size: u64,
    granularity: u64,
    /// Mapped chunks: address → (size, physical handle).
    chunks: std::collections::BTreeMap<u64, (u64, u64)>,
}

impl Backing {
    fn choose(rt: &RuntimeInner, device: usize, requested: Option<super::PoolBacking>) -> Backing {
        let wanted = match requested {
            Some(b) => b == super::PoolBacking::VirtualMemory,
            None => std::env::var("HIPMEM_POOL_BACKING").map(|v| v != "segments").unwrap_or(true),
        };
        let capable = rt.devices.get(device).is_some_and(|d| d.capabilities.virtual_memory);
        if wanted && capable && rt.backend.virtual_memory().is_some() {
            Backing::Virtual(Mutex::new(None))
        } else {
            Backing::Segments
        }
    }
}

/// The three reuse rules (`hipMemPoolReuse*`), each on by default.
#[derive(Debug)]
struct ReusePolicy {
    follow_event_dependencies: AtomicBool,
    allow_opportunistic: AtomicBool,
    allow_internal_dependencies: AtomicBool,
}

/// One hipmem pool.
pub(crate) struct PoolCore {
    pub(crate) id: u64,
    pub(crate) device: usize,
    pub(crate) props: PoolProps,
    pub(crate) is_default: bool,
    rt: Weak<RuntimeInner>,
    backend: Arc<dyn crate::backend::Backend>,
    backing: Backing,
    heap: Mutex<Heap>,
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    policy: ReusePolicy,
    release_threshold: AtomicU64,
    reserved_high: AtomicU64,
    used_high: Mutex<u64>,
    access: Mutex<Vec<AccessFlags>>,
    destroyed: AtomicBool,
    /// The pool's identity in pointer export data (random, chosen on first export).
    ipc_uid: std::sync::OnceLock<[u8; 16]>,
}

/// Where a shareable pool's memory is, for an importer: the size and
/// alignment of its reservation.
#[derive(Copy, Clone, Debug)]
pub(crate) struct IpcInfo {
    pub(crate) uid: [u8; 16],
    pub(crate) device: usize,
    pub(crate) size: u64,
    pub(crate) granularity: u64,
}

/// One mapped chunk, exported: its offset in the reservation, size, id
/// (the physical handle, never reused) and descriptor.
pub(crate) type IpcChunk = (u64, u64, u64, std::os::fd::OwnedFd);

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

impl std::fmt::Debug for PoolCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool").field("id", &self.id).field("device", &self.device).finish()
    }
}

impl PoolCore {
    pub(crate) fn new(
        rt: &Arc<RuntimeInner>,
        id: u64,
        device: usize,
        props: PoolProps,
        is_default: bool,
        backing: Option<super::PoolBacking>,
    ) -> PoolCore {
        let mut access = vec![AccessFlags::None; rt.devices.len()];
        access[device] = AccessFlags::ReadWrite;
        PoolCore {
            id,
            device,
            props,
            is_default,
            rt: Arc::downgrade(rt),
            backend: Arc::clone(&rt.backend),
            backing: Backing::choose(rt, device, backing),
            heap: Mutex::new(Heap::new()),
            slots: Mutex::new(HashMap::new()),
            policy: ReusePolicy {
                follow_event_dependencies: AtomicBool::new(true),
                allow_opportunistic: AtomicBool::new(true),
                allow_internal_dependencies: AtomicBool::new(true),
            },
            release_threshold: AtomicU64::new(0),
            reserved_high: AtomicU64::new(0),
            used_high: Mutex::new(0),
            access: Mutex::new(access),
            destroyed: AtomicBool::new(false),
            ipc_uid: std::sync::OnceLock::new(),
        }
    }

    fn runtime(&self) -> Result<Arc<RuntimeInner>> {
        self.rt.upgrade().ok_or_else(|| Error::ContextIsDestroyed("the runtime of this pool is gone".into()))
    }

    /// How the pool gets its memory.
    pub(crate) fn backing(&self) -> super::PoolBacking {
        match self.backing {
            Backing::Segments => super::PoolBacking::Segments,
            Backing::Virtual(_) => super::PoolBacking::VirtualMemory,
        }
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// The slot of a stream, created on first use; the first pool a stream
    /// uses also caches its slot in the stream itself.
    fn slot_of(&self, stream: &StreamRef<'_>) -> Arc<Slot> {
        if let Some(s) = stream.primary.and_then(|p| p.get()).filter(|s| s.pool_id == self.id) {
            return Arc::clone(s);
        }
        let slot = self.slot(stream.clock, stream.raw);
        if let Some(p) = stream.primary {
            let _ = p.set(Arc::clone(&slot));
        }
        slot
    }

    /// The slot of a stream, created on first use.
    fn slot(&self, clock: &Arc<StreamClock>, raw: RawStream) -> Arc<Slot> {
        if let Some(s) = recent_slot(self.id, clock.stream_id) {
            return s;
        }
        let slot = Arc::clone(
            lock(&self.slots)
                .entry(clock.stream_id)
                .or_insert_with(|| Arc::new(Slot::new(self.id, Arc::clone(clock), raw))),
        );
        remember_slot(&slot);
        slot
    }

    fn all_slots(&self) -> Vec<Arc<Slot>> {
        lock(&self.slots).values().cloned().collect()
    }

    // ---- allocation ------------------------------------------------------------------

    /// Allocates `size` bytes for use on the stream with `clock`/`raw`.
    pub(crate) fn alloc(&self, size: u64, stream: &StreamRef<'_>) -> Result<DevicePtr> {
        let (clock, raw) = (stream.clock, stream.raw);
        if self.is_destroyed() {
            return Err(Error::InvalidValue(format!("memory pool {:#x} was destroyed", self.id)));
        }
        let want = block_size(size)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes can never be allocated")))?;
        // 1. The stream's own cache: through the slot the stream carries for
        // its first pool, else this thread's table of slots.
        // Each slot's cache is tried once; a miss goes on with that slot.
        let slot = if let Some(slot) = stream.primary.and_then(|p| p.get()).filter(|s| s.pool_id == self.id) {
            if let Some((addr, _, sample)) = slot.alloc_fast(want) {
                if sample {
                    self.sample_usage(slot);
                }
                return Ok(DevicePtr(addr));
            }
            Arc::clone(slot)
        } else {
            match super::stream_cache::with_recent_slot(self.id, clock.stream_id, |s| s.alloc_fast(want)) {
                Some(Some((addr, _, sample))) => {
                    if sample {
                        self.sample_usage(&self.slot(clock, raw));
                    }
                    return Ok(DevicePtr(addr));
                }
                Some(None) => self.slot_of(stream),
                None => {
                    let slot = self.slot_of(stream);
                    if let Some((addr, _, sample)) = slot.alloc_fast(want) {
                        if sample {
                            self.sample_usage(&slot);
                        }
                        return Ok(DevicePtr(addr));
                    }
                    slot
                }
            }
        };
        let (addr, got) = self.alloc_slow(want, size, &slot)?;
        let mut state = slot.lock();
        state.insert_live(addr, got);
        state.used += got as i64;
        let sample = state.used > state.baseline;
        drop(state);
        if sample {
            self.sample_usage(&slot);
        }
        Ok(DevicePtr(addr))
    }

    fn alloc_slow(&self, want: u64, requested: u64, slot: &Arc<Slot>) -> Result<(u64, u64)> {
        let me = slot.stream_id();
        let rt = self.runtime()?;
        // Once enough of this stream's frees are pending, ask whether the
        // stream is idle: its completed frees then coalesce with free space.
        let pending = lock(&self.heap).pending_bytes(me);
        if pending >= MIN_SEGMENT {
            self.promote_if_idle(&rt, slot);
        }
        // 2-3. Reuse from the heap.
        if let Some(found) = self.reuse_from_heap(&rt, want, slot, false) {
            return Ok(found);
        }
        if self.flush_other_caches(me) {
            if let Some(found) = self.reuse_from_heap(&rt, want, slot, false) {
                return Ok(found);
            }
        }
        // Before growing: if this stream's own frees have completed (the
        // stream is idle), they turn global and merge with their neighbours.
        if self.promote_if_idle(&rt, slot) {
            if let Some(found) = self.reuse_from_heap(&rt, want, slot, false) {
                return Ok(found);
            }
        }
        // 4. Grow.
        let grow_err = match self.grow(&rt, want) {
            Ok(()) => {
                if let Some(found) = self.reuse_from_heap(&rt, want, slot, false) {
                    return Ok(found);
                }
                None
            }
            Err(e) => Some(e),
        };
        // 5. Internal dependencies.
        if self.policy.allow_internal_dependencies.load(Ordering::Relaxed) {
            if let Some(found) = self.reuse_from_heap(&rt, want, slot, true) {
                return Ok(found);
            }
        }
        // 6. Release cached memory and completed frees (this pool and the
        //    device's other hipmem pools), then try growing once more.
        for pool in rt.pools.hipmem_pools_of(self.device) {
            pool.release_unused_to(&rt, 0);
        }
        if self.grow(&rt, want).is_ok() {
            if let Some(found) = self.reuse_from_heap(&rt, want, slot, false) {
                return Ok(found);
            }
        }
        // 7. Out of memory.
        let stats = self.stats();
        let free = rt.backend.mem_get_info(self.device).map(|m| m.free).unwrap_or(0);
        let cause = grow_err.map(|e| format!(" ({})", e.message())).unwrap_or_default();
        Err(Error::OutOfMemory(format!(
            "pool {:#x} on device {}: cannot allocate {requested} bytes: the pool uses {} and reserves {} bytes{}, the device has {free} bytes free{cause}",
            self.id,
            self.device,
            stats.used_current,
            stats.reserved_current,
            if self.props.max_size > 0 {
                format!(" of at most {}", self.props.max_size)
            } else {
                String::new()
            },
        )))
    }

    /// Finds and takes a block under the reuse rules. With `insert_waits`, a
    /// block pending on another stream may be taken by making this stream
    /// wait for that one (internal dependencies).
    fn reuse_from_heap(
        &self,
        rt: &RuntimeInner,
        want: u64,
        slot: &Arc<Slot>,
        insert_waits: bool,
    ) -> Option<(u64, u64)> {
        let me = slot.stream_id();
        let mut heap = lock(&self.heap);
        // Best fit among global blocks and this stream's own pending blocks.
        let global = heap.best_fit_global(want);
        let own = heap.best_fit_pending(me, want, |_| true);
        let pick = match (global, own) {
            (Some(g), Some(o)) => Some(if o.1 <= g.1 { o } else { g }),
            (g, o) => g.or(o),
        };
        if let Some((addr, _)) = pick {
            heap.take(addr, want);
            return Some((addr, want));
        }
        // Other streams' pending blocks.
        let follow = self.policy.follow_event_dependencies.load(Ordering::Relaxed);
        let opportunistic = self.policy.allow_opportunistic.load(Ordering::Relaxed);
        let mut best: Option<(u64, u64, u64)> = None; // (addr, size, stream)
        let mut waits: Vec<u64> = Vec::new();
        for other in heap.pending_streams() {
            if other == me {
                continue;
            }
            let other_clock = self.clock_of(other);
            if opportunistic {
                if let Some(c) = &other_clock {
                    rt.recycle_events(self.device, c.refresh(rt.backend.as_ref()));
                }
            }
            let candidate = heap.best_fit_pending(other, want, |tag| {
                (follow && slot.clock.knows(other, tag))
                    || (opportunistic && other_clock.as_ref().is_some_and(|c| c.is_complete(tag)))
            });
            match candidate {
                Some((a, s)) if best.is_none_or(|b| s < b.1) => best = Some((a, s, other)),
                Some(_) => {}
                None => waits.push(other),
            }
        }
        if let Some((addr, _, _)) = best {
            heap.take(addr, want);
            return Some((addr, want));
        }
        // Make progress visible for next time: a marker on streams whose
        // frees were not yet known complete (only when opportunistic reuse can use it).
        if opportunistic && !insert_waits {
            drop(heap);
            for other in waits {
                if let Some((c, raw)) = self.stream_of(other) {
                    if c.newest_pending_marker().is_none() && c.completed_tag() <= c.free_tag() {
                        let _ = rt.record_marker(&c, raw);
                    }
                }
            }
            return None;
        }
        if !insert_waits {
            return None;
        }
        // Internal dependencies: the best-fitting pending block of any stream;
        // this stream waits for that stream.
        let mut best: Option<(u64, u64, u64)> = None;
        for other in heap.pending_streams() {
            if other == me {
                continue;
            }
            if let Some((a, s)) = heap.best_fit_pending(other, want, |_| true) {
                if best.is_none_or(|b| s < b.1) {
                    best = Some((a, s, other));
                }
            }
        }
        let (addr, _, other) = best?;
        let (tag_stream, tag) = heap.pending_tag(addr)?;
        debug_assert_eq!(tag_stream, other);
        let (other_clock, other_raw) = self.stream_of(other)?;
        // The marker must come after the free in the other stream's order;
        // the free's tag is below the marker's new epoch by construction.
        let point = rt.record_marker(&other_clock, other_raw).ok()?;
        if rt.backend.stream_wait_event(slot.raw, point.1).is_err() {
            return None;
        }
        slot.clock.learn(&crate::runtime::ordering::OrderPoint {
            clock: Arc::clone(&other_clock),
            tag: point.0,
            known: Vec::new(),
        });
        debug_assert!(tag < point.0);
        heap.take(addr, want);
        Some((addr, want))
    }

    /// Promotes the stream's pending blocks if the stream has no work left.
    /// Returns whether anything turned global.
    fn promote_if_idle(&self, rt: &RuntimeInner, slot: &Slot) -> bool {
        if !lock(&self.heap).has_pending(slot.stream_id()) {
            return false;
        }
        let before = slot.clock.advance();
        if !rt.backend.stream_query(slot.raw).unwrap_or(false) {
            return false;
        }
        slot.clock.mark_completed(before);
        lock(&self.heap).promote(slot.stream_id(), slot.clock.completed_tag()) > 0
    }

    fn clock_of(&self, stream: u64) -> Option<Arc<StreamClock>> {
        lock(&self.slots).get(&stream).map(|s| Arc::clone(&s.clock))
    }

    fn stream_of(&self, stream: u64) -> Option<(Arc<StreamClock>, RawStream)> {
        lock(&self.slots).get(&stream).map(|s| (Arc::clone(&s.clock), s.raw))
    }

    /// Moves every other stream's cached blocks into the heap (as pending on
    /// that stream). Returns whether anything moved.
    fn flush_other_caches(&self, me: u64) -> bool {
        let mut moved = false;
        for slot in self.all_slots() {
            if slot.stream_id() != me {
                moved |= self.flush_slot_cache(&slot);
            }
        }
        moved
    }

    fn flush_slot_cache(&self, slot: &Slot) -> bool {
        let blocks: Vec<CachedBlock> = std::mem::take(&mut slot.lock().cache);
        if blocks.is_empty() {
            return false;
        }
        let mut heap = lock(&self.heap);
        for b in blocks {
            heap.release_block(b.addr, Owner::Stream { stream: slot.stream_id(), tag: b.tag });
        }
        true
    }

    /// Adds a segment large enough for `want`, within maxSize.
    fn grow(&self, rt: &RuntimeInner, want: u64) -> Result<()> {
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
        let ptr = match rt.backend.mem_alloc(self.device, size) {
            Ok(p) => p,
            Err(_) if size > want => {
                size = want;
                rt.backend.mem_alloc(self.device, size)?
            }
            Err(e) => return Err(e),
        };
        debug_assert!(ptr.0 % BLOCK_ALIGN == 0);
        rt.allocations.insert(Allocation {
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
    fn grow_virtual(&self, rt: &RuntimeInner, range: &Mutex<Option<VirtualRange>>, want: u64) -> Result<()> {
        let vm = rt
            .backend
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
    fn reserve_virtual(
        &self,
        rt: &RuntimeInner,
        vm: &dyn crate::backend::virtual_memory::VirtualMemory,
        guard: &mut Option<VirtualRange>,
    ) -> Result<()> {
        if guard.is_some() {
            return Ok(());
        }
        let granularity = vm.granularity(self.device, false)?.max(BLOCK_ALIGN);
        let total = rt.devices.get(self.device).map(|d| d.total_memory).unwrap_or(1 << 30);
        let size = (total.saturating_mul(2)).clamp(1 << 30, 1 << 42).next_multiple_of(granularity);
        let base = vm.address_reserve(size, granularity, DevicePtr::NULL)?;
        rt.allocations.insert(Allocation {
            base,
            size,
            kind: MemoryKind::PoolSegment(self.id),
            device: self.device,
        });
        lock(&self.heap).add_reservation(base.0, size);
        *guard = Some(VirtualRange { base: base.0, size, granularity, chunks: Default::default() });
        Ok(())
    }

    // ---- interprocess sharing ---------------------------------------------------------

    /// The pool's random identity (pointer export data names it).
    pub(crate) fn ipc_uid(&self) -> [u8; 16] {
        *self.ipc_uid.get_or_init(super::ipc::random_uid)
    }

    /// What an importer needs to know; reserves the range if the pool has
    /// none yet. NotSupported unless the pool is on virtual memory and was
    /// created with the POSIX file descriptor handle type.
    pub(crate) fn ipc_info(&self) -> Result<IpcInfo> {
        let rt = self.runtime()?;
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::NotSupported(format!(
                "pool {:#x} is backed by segments; only pools on virtual memory can be shared",
                self.id
            )));
        };
        if self.props.handle_types & super::handle_type::POSIX_FILE_DESCRIPTOR == 0 {
            return Err(Error::InvalidValue(format!(
                "pool {:#x} was not created with the POSIX file descriptor handle type",
                self.id
            )));
        }
        let vm =
            rt.backend.virtual_memory().ok_or_else(|| Error::NotSupported("no virtual memory".into()))?;
        let mut guard = lock(range);
        self.reserve_virtual(&rt, vm, &mut guard)?;
        let vr = guard.as_ref().expect("reserved above");
        Ok(IpcInfo { uid: self.ipc_uid(), device: self.device, size: vr.size, granularity: vr.granularity })
    }

    /// The mapped chunks that overlap `[offset, offset + size)` of the
    /// reservation (at most `max`, in address order), each exported as a
    /// descriptor.
    pub(crate) fn ipc_chunks(&self, offset: u64, size: u64, max: usize) -> Result<Vec<IpcChunk>> {
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::NotSupported("the pool is not on virtual memory".into()));
        };
        let vm =
            self.backend.virtual_memory().ok_or_else(|| Error::NotSupported("no virtual memory".into()))?;
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return Ok(Vec::new()) };
        if offset.checked_add(size).is_none_or(|e| e > vr.size) {
            return Err(Error::InvalidValue(format!(
                "{size} bytes at offset {offset} are outside the pool's {}-byte reservation",
                vr.size
            )));
        }
        let (start, end) = (vr.base + offset, vr.base + offset + size);
        let first =
            vr.chunks.range(..=start).next_back().filter(|(a, (s, _))| *a + s > start).map(|(a, _)| *a);
        let from = first.unwrap_or(start);
        let mut out = Vec::new();
        for (&addr, &(csize, handle)) in vr.chunks.range(from..end) {
            if out.len() == max {
                break;
            }
            out.push((addr - vr.base, csize, handle, vm.export_to_fd(handle)?));
        }
        Ok(out)
    }

    /// The live block that starts at `ptr`: (offset in the reservation, size).
    pub(crate) fn ipc_block(&self, ptr: DevicePtr) -> Result<(u64, u64)> {
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::NotSupported("the pool is not on virtual memory".into()));
        };
        if self.props.handle_types & super::handle_type::POSIX_FILE_DESCRIPTOR == 0 {
            return Err(Error::InvalidValue(format!(
                "{ptr} is from pool {:#x}, which was not created shareable (POSIX file descriptor)",
                self.id
            )));
        }
        let base = lock(range).as_ref().map(|vr| vr.base).unwrap_or(0);
        match lock(&self.heap).allocated_block_containing(ptr.0) {
            Some((b, size)) if b == ptr.0 && base != 0 => Ok((b - base, size)),
            _ => Err(Error::InvalidValue(format!(
                "{ptr} is not the start of a live allocation of pool {:#x}",
                self.id
            ))),
        }
    }

    /// Releases one piece of unused memory (a whole free segment or chunk),
    /// the largest that keeps at least `floor` bytes reserved. Returns false
    /// if there is none.
    fn release_one(&self, rt: &RuntimeInner, floor: u64) -> bool {
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
                rt.allocations.remove_if(DevicePtr(seg.base), |a| a.kind == MemoryKind::PoolSegment(self.id));
                if let Err(e) = rt.backend.mem_free(self.device, DevicePtr(seg.base)) {
                    tracing::warn!(target: "hipmem", "releasing a pool segment failed: {e}");
                }
                true
            }
            Backing::Virtual(range) => {
                let Some(vm) = rt.backend.virtual_memory() else { return false };
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
                    rt.allocations
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

    // ---- free ------------------------------------------------------------------------

    /// Frees a block of this pool in the order of the stream with `clock`.
    /// Returns false if `ptr` is not a live block of this pool.
    pub(crate) fn free(&self, ptr: DevicePtr, stream: &StreamRef<'_>) -> bool {
        use super::stream_cache::FastFree;
        let primary = stream.primary.and_then(|p| p.get()).filter(|s| s.pool_id == self.id);
        let other;
        let slot = match primary {
            Some(slot) => slot,
            None => {
                other = self.slot_of(stream);
                &other
            }
        };
        let evicted = match slot.free_fast(ptr.0) {
            FastFree::Done => None,
            FastFree::Evicted(b) => Some(b),
            FastFree::NotHere => {
                let Some(size) = self.take_live_elsewhere(ptr.0, slot.stream_id()) else { return false };
                let mut state = slot.lock();
                state.used -= size as i64;
                state.cache_block(CachedBlock { addr: ptr.0, size, tag: stream.clock.free_tag() })
            }
        };
        self.after_free(slot, evicted);
        true
    }

    /// Finishes a free into `slot`'s cache: a block the cache evicted goes to
    /// the heap, and a destroyed pool gives back what is now unused.
    pub(crate) fn after_free(&self, slot: &Slot, evicted: Option<CachedBlock>) {
        if let Some(b) = evicted {
            self.return_evicted(slot.stream_id(), b);
        }
        if self.is_destroyed() {
            self.flush_slot_cache(slot);
            if let Ok(rt) = self.runtime() {
                self.release_unused_to(&rt, 0);
            }
        }
    }

    /// The slot of a stream (for a free that went through this thread's
    /// table of slots).
    pub(crate) fn slot_for(&self, stream: &StreamRef<'_>) -> Arc<Slot> {
        self.slot_of(stream)
    }

    /// Puts a block evicted from a stream's cache into the heap, pending on
    /// that stream.
    pub(crate) fn return_evicted(&self, stream: u64, b: CachedBlock) {
        lock(&self.heap).release_block(b.addr, Owner::Stream { stream, tag: b.tag });
    }

    /// Removes `addr` from another slot's live map (a block allocated on one
    /// stream and freed on another) and returns its size. The allocating
    /// slot keeps the bytes it added; the freeing slot subtracts them, so the
    /// pool's total stays exact.
    fn take_live_elsewhere(&self, addr: u64, except: u64) -> Option<u64> {
        self.all_slots()
            .into_iter()
            .filter(|slot| slot.stream_id() != except)
            .find_map(|slot| slot.lock().remove_live(addr))
    }

    /// The allocated block of this pool that contains `addr`: (base, size).
    /// Blocks cached by a stream after their free still count as allocated.
    pub(crate) fn block_containing(&self, addr: u64) -> Option<(u64, u64)> {
        lock(&self.heap).allocated_block_containing(addr)
    }

    // ---- synchronization, release, trim -------------------------------------------------

    /// The stream with `clock` has completed everything before its
    /// `completed_tag`: its frees become reusable by all, then the release
    /// threshold applies.
    pub(crate) fn on_stream_synchronized(&self, rt: &RuntimeInner, stream: u64) {
        let slot = lock(&self.slots).get(&stream).cloned();
        let Some(slot) = slot else { return };
        self.flush_slot_cache(&slot);
        let completed = slot.clock.completed_tag();
        lock(&self.heap).promote(stream, completed);
        self.apply_release_threshold(rt);
    }

    /// Every stream of the device has completed: all pending frees complete.
    pub(crate) fn on_device_synchronized(&self, rt: &RuntimeInner) {
        for slot in self.all_slots() {
            self.flush_slot_cache(&slot);
            let completed = slot.clock.completed_tag();
            lock(&self.heap).promote(slot.stream_id(), completed);
        }
        self.apply_release_threshold(rt);
    }

    fn apply_release_threshold(&self, rt: &RuntimeInner) {
        // A destroyed pool keeps nothing it does not have to.
        let threshold = if self.is_destroyed() { 0 } else { self.release_threshold.load(Ordering::Relaxed) };
        self.release_down_to(rt, |reserved, live| reserved.saturating_sub(live) > threshold);
    }

    /// Releases whole free segments or chunks (largest first) while
    /// `more(reserved, live)`.
    fn release_down_to(&self, rt: &RuntimeInner, more: impl Fn(u64, u64) -> bool) {
        loop {
            let reserved = lock(&self.heap).reserved();
            if !more(reserved, self.used_current()) || !self.release_one(rt, 0) {
                return;
            }
        }
    }

    /// `hipMemPoolTrimTo`: releases unused memory until at most `keep` bytes
    /// stay reserved; memory of live blocks and of frees not yet completed is
    /// never released.
    pub(crate) fn trim_to(&self, keep: u64) -> Result<()> {
        let rt = self.runtime()?;
        self.release_unused_to(&rt, keep);
        Ok(())
    }

    fn release_unused_to(&self, rt: &RuntimeInner, keep: u64) {
        for slot in self.all_slots() {
            self.flush_slot_cache(&slot);
            let before = slot.clock.advance();
            rt.recycle_events(self.device, slot.clock.refresh(rt.backend.as_ref()));
            if slot.stream_id() != ORPHAN_STREAM && rt.backend.stream_query(slot.raw).unwrap_or(false) {
                slot.clock.mark_completed(before);
            }
            lock(&self.heap).promote(slot.stream_id(), slot.clock.completed_tag());
        }
        // Release whole segments or chunks, largest first, never below `keep`.
        while lock(&self.heap).reserved() > keep && self.release_one(rt, keep) {}
    }

    /// The stream is being destroyed: its cache goes to the heap (pending,
    /// completed once a marker recorded now completes), its live blocks to the
    /// orphan slot.
    pub(crate) fn retire_stream(&self, rt: &RuntimeInner, stream: u64) {
        let slot = lock(&self.slots).get(&stream).cloned();
        let Some(slot) = slot else { return };
        self.flush_slot_cache(&slot);
        if lock(&self.heap).has_pending(stream) {
            let _ = rt.record_marker(&slot.clock, slot.raw);
        }
        let (live, used) = {
            let mut s = slot.lock();
            (s.take_all_live(), std::mem::replace(&mut s.used, 0))
        };
        let orphan = {
            let mut slots = lock(&self.slots);
            Arc::clone(slots.entry(ORPHAN_STREAM).or_insert_with(|| {
                Arc::new(Slot::new(self.id, Arc::new(StreamClock::new(ORPHAN_STREAM)), slot.raw))
            }))
        };
        {
            let mut o = orphan.lock();
            o.extend_live(live);
            o.used += used;
        }
        // Keep the slot while the heap holds blocks pending on it (its clock
        // learns when they complete); otherwise forget it.
        if !lock(&self.heap).has_pending(stream) {
            lock(&self.slots).remove(&stream);
        }
    }

    /// Marks the pool destroyed and releases what it can; live blocks stay
    /// valid and their frees release the rest.
    pub(crate) fn destroy(&self) {
        self.destroyed.store(true, Ordering::Release);
        for slot in self.all_slots() {
            slot.pool_alive.store(false, Ordering::Release);
        }
        if let Ok(rt) = self.runtime() {
            self.release_unused_to(&rt, 0);
        }
    }

    // ---- statistics and attributes ---------------------------------------------------------

    fn used_current(&self) -> u64 {
        let total: i64 = self.all_slots().iter().map(|s| s.lock().used).sum();
        total.max(0) as u64
    }

    /// Takes an exact sample of the used bytes after `slot` went past its
    /// baseline, raises the high watermark, and rebalances the baselines so
    /// that their sum stays at most the high watermark (see `usage.rs`).
    fn sample_usage(&self, slot: &Slot) {
        let mut high = lock(&self.used_high);
        let slots = self.all_slots();
        let total: i64 = slots.iter().map(|s| s.lock().used).sum();
        *high = (*high).max(total.max(0) as u64);
        let high_now = *high as i64;
        {
            let mut me = slot.lock();
            me.baseline = me.used;
        }
        super::usage::rebalance(&slots, high_now);
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let heap = lock(&self.heap);
        let reserved = heap.reserved();
        drop(heap);
        PoolStats {
            reserved_current: reserved,
            reserved_high: self.reserved_high.load(Ordering::Acquire).max(reserved),
            used_current: self.used_current(),
            used_high: *lock(&self.used_high),
        }
    }

    pub(crate) fn get_attribute(&self, attr: PoolAttribute) -> u64 {
        let flag = |b: &AtomicBool| b.load(Ordering::Relaxed) as u64;
        match attr {
            PoolAttribute::ReuseFollowEventDependencies => flag(&self.policy.follow_event_dependencies),
            PoolAttribute::ReuseAllowOpportunistic => flag(&self.policy.allow_opportunistic),
            PoolAttribute::ReuseAllowInternalDependencies => flag(&self.policy.allow_internal_dependencies),
            PoolAttribute::ReleaseThreshold => self.release_threshold.load(Ordering::Relaxed),
            PoolAttribute::ReservedMemCurrent => self.stats().reserved_current,
            PoolAttribute::ReservedMemHigh => self.stats().reserved_high,
            PoolAttribute::UsedMemCurrent => self.stats().used_current,
            PoolAttribute::UsedMemHigh => self.stats().used_high,
        }
    }

    pub(crate) fn set_attribute(&self, attr: PoolAttribute, value: u64) -> Result<()> {
        let set = |b: &AtomicBool| b.store(value != 0, Ordering::Relaxed);
        match attr {
            PoolAttribute::ReuseFollowEventDependencies => set(&self.policy.follow_event_dependencies),
            PoolAttribute::ReuseAllowOpportunistic => set(&self.policy.allow_opportunistic),
            PoolAttribute::ReuseAllowInternalDependencies => set(&self.policy.allow_internal_dependencies),
            PoolAttribute::ReleaseThreshold => self.release_threshold.store(value, Ordering::Relaxed),
            PoolAttribute::ReservedMemCurrent | PoolAttribute::UsedMemCurrent => {
                return Err(Error::InvalidValue(format!("{attr:?} is read-only")));
            }
            PoolAttribute::ReservedMemHigh | PoolAttribute::UsedMemHigh if value != 0 => {
                return Err(Error::InvalidValue(format!(
                    "{attr:?} can only be reset, by setting 0 (not {value})"
                )));
            }
            PoolAttribute::ReservedMemHigh => {
                let reserved = lock(&self.heap).reserved();
                self.reserved_high.store(reserved, Ordering::Release);
            }
            PoolAttribute::UsedMemHigh => {
                let mut high = lock(&self.used_high);
                let slots = self.all_slots();
                let mut total = 0i64;
                for s in &slots {
                    let mut st = s.lock();
                    st.baseline = st.used;
                    total += st.used;
                }
                *high = total.max(0) as u64;
            }
        }
        Ok(())
    }

    pub(crate) fn set_access(&self, device: usize, flags: AccessFlags) -> Result<()> {
        let mut access = lock(&self.access);
        let slot = access
            .get_mut(device)
            .ok_or_else(|| Error::InvalidDevice(format!("device {device} does not exist")))?;
        if device == self.device && flags != AccessFlags::ReadWrite {
            return Err(Error::InvalidValue(format!(
                "the pool's own device {device} always has read-write access"
            )));
        }
        *slot = flags;
        drop(access);
        // A pool on virtual memory maps the access into every chunk it has.
        if let (Backing::Virtual(range), Some(vm)) = (&self.backing, self.backend.virtual_memory()) {
            if let Some(vr) = lock(range).as_ref() {
                for (&addr, &(size, _)) in &vr.chunks {
                    vm.mem_set_access(DevicePtr(addr), size, device, flags.raw())?;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn access(&self, device: usize) -> Result<AccessFlags> {
        lock(&self.access)
            .get(device)
            .copied()
            .ok_or_else(|| Error::InvalidDevice(format!("device {device} does not exist")))
    }

    /// The heap's blocks in address order and the blocks the streams' caches
    /// hold (address, size), for `layout.rs`.
    pub(crate) fn layout_parts(&self) -> super::layout::LayoutParts {
        let mut cached = Vec::new();
        for slot in self.all_slots() {
            cached.extend(slot.lock().cache.iter().map(|b| (b.addr, b.size)));
        }
        (lock(&self.heap).blocks_in_order().collect(), cached)
    }

    /// Checks the heap's invariants (for tests).
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        lock(&self.heap).check_invariants()
    }
}
