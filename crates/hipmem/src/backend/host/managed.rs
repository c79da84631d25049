//! Managed memory on the CPU emulation: a model of residency.
//!
//! A managed allocation is an anonymous mapping the emulator owns, usable by
//! the host directly and by device work (a `Managed` region of the table).
//! The data never really moves (there is one memory), but the emulator keeps,
//! page by page (4 KiB), where each page lives (the host or device N), which
//! places hold read-only duplicates of read-mostly pages, its advice
//! (read-mostly, preferred location, accessed-by set) and where it was last
//! prefetched. Pages start on the host.
//!
//! - Device work on a managed range (a kernel, a copy, a memset) is preceded
//!   in its stream by a migration step (`device_access_op`, queued by the
//!   backend's `enqueue_checked`): every page not usable where the work runs
//!   is a fault and moves there, costing `fault_latency_ns` per page plus
//!   the bytes at `migration_bandwidth` (the worker sleeps for the modelled
//!   time). A read of a read-mostly page duplicates it instead of moving it
//!   (once per place: later reads from either place cost nothing); a write
//!   drops the other copies. A place in the page's accessed-by set, or a
//!   page that sits at its preferred location, is accessed remotely: no
//!   migration.
//! - Host access (through `host_access`, which the safe API calls before it
//!   lends a slice) applies the same rules with the host as the place.
//! - A prefetch is an op in its stream: it moves (or duplicates, for
//!   read-mostly pages) the pages to the target at the modelled bandwidth,
//!   with no per-page fault cost, and sets their last prefetch location.
//! - Advice changes the pages' advice only (never the last prefetch location).
//! - Coarse-grain advice (AMD's 100/101) is NotSupported.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::device_memory::{Access, AnonymousMapping, Region, RegionKind};
use super::stream_worker::Op;
use super::{HostBackend, HostConfig};
use crate::backend::managed_memory::{
    Advice, AttachFlags, INVALID_DEVICE_ID, Location, ManagedMemory, ManagedStatistics, RangeAttribute,
};
use crate::backend::{Backend, DevicePtr, RawStream};
use crate::error::{Error, Result};

/// Page size of the residency model.
const MANAGED_PAGE: u64 = 4096;
/// Bit of the host in a page's place masks (devices use bits 0..64).
const HOST_BIT: u128 = 1 << 127;
/// No location (`hipInvalidDeviceId`).
const NONE: i32 = INVALID_DEVICE_ID;

fn bit(place: i32) -> u128 {
    if place < 0 { HOST_BIT } else { 1u128 << (place as u32).min(126) }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Page {
    /// Where the page lives (-1 the host, else a device).
    home: i32,
    /// Places holding a valid copy (the home, plus read-mostly duplicates).
    copies: u128,
    read_mostly: bool,
    /// Preferred location (-2 none).
    preferred: i32,
    /// Places that map the page instead of faulting.
    accessed_by: u128,
    /// Last prefetch location (-2 never prefetched).
    last_prefetch: i32,
}

impl Page {
    const FRESH: Page = Page {
        home: -1,
        copies: HOST_BIT,
        read_mostly: false,
        preferred: NONE,
        accessed_by: 0,
        last_prefetch: NONE,
    };
}

struct State {
    pages: Vec<Page>,
    /// The stream attachment (flags, stream handle; 0 for none or the null stream).
    attach: (AttachFlags, u64),
}

/// One managed allocation of the emulator.
pub(crate) struct ManagedAlloc {
    base: u64,
    size: u64,
    state: Mutex<State>,
    _mapping: AnonymousMapping,
}

impl ManagedAlloc {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The pages that `[addr, addr + len)` touches.
    fn pages_of(&self, addr: u64, len: u64) -> std::ops::Range<usize> {
        let first = (addr - self.base) / MANAGED_PAGE;
        let end = (addr - self.base + len.max(1)).div_ceil(MANAGED_PAGE);
        first as usize..end as usize
    }
}

/// What a batch of migrations cost and did.
#[derive(Default, Debug, Clone, Copy)]
struct Moved {
    faults: u64,
    bytes: u64,
    duplications: u64,
}

/// The emulator's managed memory: the allocations and the statistics.
pub(crate) struct HostManaged {
    allocs: Mutex<HashMap<u64, Arc<ManagedAlloc>>>,
    counters: Arc<Counters>,
    fault_latency: Duration,
    bandwidth: u64,
}

#[derive(Default)]
struct Counters {
    faults: AtomicU64,
    bytes_on_demand: AtomicU64,
    bytes_prefetched: AtomicU64,
    duplications: AtomicU64,
}

impl std::fmt::Debug for HostManaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostManaged")
            .field("allocations", &self.allocs.lock().map(|a| a.len()).unwrap_or(0))
            .finish_non_exhaustive()
    }
}

/// Occupies the calling thread for `d` (spins below 50 µs, where a sleep
/// would overshoot).
fn spend(d: Duration) {
    if d.is_zero() {
        return;
    }
    let end = Instant::now() + d;
    if d < Duration::from_micros(50) {
        while Instant::now() < end {
            std::hint::spin_loop();
        }
        return;
    }
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        std::thread::sleep(end - now);
    }
}

impl HostManaged {
    pub(crate) fn new(config: &HostConfig) -> HostManaged {
        HostManaged {
            allocs: Mutex::new(HashMap::new()),
            counters: Arc::new(Counters::default()),
            fault_latency: Duration::from_nanos(config.fault_latency_ns),
            bandwidth: config.migration_bandwidth.max(1),
        }
    }

    fn get(&self, base: u64) -> Option<Arc<ManagedAlloc>> {
        self.allocs.lock().unwrap_or_else(|p| p.into_inner()).get(&base).cloned()
    }

    /// The allocation containing `[ptr, ptr + len)`.
    fn containing(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<Arc<ManagedAlloc>> {
        let allocs = self.allocs.lock().unwrap_or_else(|p| p.into_inner());
        let a = allocs.values().find(|a| ptr.0 >= a.base && ptr.0 < a.base + a.size).cloned().ok_or_else(
            || Error::InvalidValue(format!("{what}: {ptr} is not managed memory of this backend")),
        )?;
        let end = ptr
            .0
            .checked_add(len)
            .ok_or_else(|| Error::InvalidValue(format!("{what}: {ptr} + {len} bytes overflows")))?;
        if end > a.base + a.size {
            return Err(Error::InvalidValue(format!(
                "{what}: {len} bytes at {ptr} run {} bytes past the end of the {}-byte managed allocation at {:#x}",
                end - (a.base + a.size),
                a.size,
                a.base
            )));
        }
        Ok(a)
    }

    /// Makes pages of `[addr, addr + len)` usable at `place`; counts and
    /// returns what moved.
    fn access(alloc: &ManagedAlloc, addr: u64, len: u64, place: i32, access: Access) -> Moved {
        let mut moved = Moved::default();
        let mut state = alloc.lock();
        let here = bit(place);
        for page in &mut state.pages[alloc.pages_of(addr, len)] {
            if page.copies & here != 0 {
                if access == Access::Write && page.copies != here {
                    // A write invalidates the other copies; the writer's place is the home.
                    page.copies = here;
                    page.home = place;
                }
                continue;
            }
            if page.accessed_by & here != 0 || (page.preferred != NONE && page.preferred == page.home) {
                // Mapped remotely: accessed where it lives, no migration.
                continue;
            }
            moved.faults += 1;
            moved.bytes += MANAGED_PAGE;
            if page.read_mostly && access == Access::Read {
                page.copies |= here;
                moved.duplications += 1;
            } else {
                page.copies = here;
                page.home = place;
            }
        }
        moved
    }

    fn account_on_demand(&self, moved: Moved) -> Duration {
        self.model().on_demand(moved)
    }

    /// The migration step queued before device work on `[addr, addr + len)`
    /// of the allocation at `base`, run by the stream's worker for `device`.
    pub(crate) fn device_access_op(
        &self,
        base: u64,
        addr: u64,
        len: u64,
        device: usize,
        access: Access,
    ) -> Result<Op> {
        let alloc =
            self.get(base).ok_or_else(|| Error::InvalidValue(format!("{addr:#x} is not managed memory")))?;
        let model = self.model();
        Ok(Op::HostFunc(Box::new(move || {
            let moved = Self::access(&alloc, addr, len, device as i32, access);
            spend(model.on_demand(moved));
        })))
    }

    fn model(&self) -> Model {
        Model {
            counters: Arc::clone(&self.counters),
            fault_latency: self.fault_latency,
            bandwidth: self.bandwidth,
        }
    }
}

/// The cost model and counters, for work that runs on a stream's worker.
struct Model {
    counters: Arc<Counters>,
    fault_latency: Duration,
    bandwidth: u64,
}

impl Model {
    fn on_demand(&self, moved: Moved) -> Duration {
        let c = &self.counters;
        c.faults.fetch_add(moved.faults, Ordering::Relaxed);
        c.bytes_on_demand.fetch_add(moved.bytes, Ordering::Relaxed);
        c.duplications.fetch_add(moved.duplications, Ordering::Relaxed);
        self.fault_latency.saturating_mul(moved.faults.min(u32::MAX as u64) as u32)
            + Duration::from_secs_f64(moved.bytes as f64 / self.bandwidth as f64)
    }

    fn prefetched(&self, bytes: u64) -> Duration {
        self.counters.bytes_prefetched.fetch_add(bytes, Ordering::Relaxed);
        if bytes == 0 {
            return Duration::ZERO;
        }
        self.fault_latency + Duration::from_secs_f64(bytes as f64 / self.bandwidth as f64)
    }
}

/// Moves (or duplicates) the pages of `[addr, addr + len)` to `place`;
/// returns the bytes moved.
fn prefetch_pages(alloc: &ManagedAlloc, addr: u64, len: u64, place: i32) -> u64 {
    let mut bytes = 0;
    let here = bit(place);
    let mut state = alloc.lock();
    for page in &mut state.pages[alloc.pages_of(addr, len)] {
        if page.copies & here == 0 {
            bytes += MANAGED_PAGE;
            if page.read_mostly {
                page.copies |= here;
            } else {
                page.copies = here;
                page.home = place;
            }
        }
        page.last_prefetch = place;
    }
    bytes
}

fn uniform(mut values: impl Iterator<Item = i32>) -> i32 {
    let Some(first) = values.next() else { return NONE };
    if values.all(|v| v == first) { first } else { NONE }
}

impl ManagedMemory for HostBackend {
    fn allocate(&self, device: usize, size: u64, attach: AttachFlags) -> Result<DevicePtr> {
        self.device(device)?;
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes of managed memory".into()));
        }
        let rounded = size
            .checked_next_multiple_of(MANAGED_PAGE)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes of managed memory can never fit")))?;
        let pages = usize::try_from(rounded / MANAGED_PAGE)
            .map_err(|_| Error::OutOfMemory(format!("{size} bytes of managed memory can never fit")))?;
        let mapping = AnonymousMapping::new(rounded)?;
        let base = mapping.addr();
        let mut page_table = Vec::new();
        page_table
            .try_reserve_exact(pages)
            .map_err(|_| Error::OutOfMemory(format!("no memory for the page table of {size} bytes")))?;
        page_table.resize(pages, Page::FRESH);
        let alloc = Arc::new(ManagedAlloc {
            base,
            size,
            state: Mutex::new(State { pages: page_table, attach: (attach, 0) }),
            _mapping: mapping,
        });
        self.managed.allocs.lock().unwrap_or_else(|p| p.into_inner()).insert(base, alloc);
        self.regions.insert(base, Region { len: size, device, kind: RegionKind::Managed });
        Ok(DevicePtr(base))
    }

    unsafe fn free(&self, ptr: DevicePtr) -> Result<()> {
        self.regions.remove_if(ptr.0, |r| r.kind == RegionKind::Managed).ok_or_else(|| {
            Error::InvalidValue(format!("{ptr} is not the start of a live managed allocation"))
        })?;
        // No new work can name the range now; drain what was queued before.
        for d in 0..self.device_count() {
            self.device_synchronize(d)?;
        }
        let alloc = self.managed.allocs.lock().unwrap_or_else(|p| p.into_inner()).remove(&ptr.0);
        // The mapping goes with the last reference (migration steps still
        // queued hold one; the devices have drained, so none is left).
        drop(alloc);
        Ok(())
    }

    fn prefetch(&self, ptr: DevicePtr, len: u64, location: Location, stream: RawStream) -> Result<()> {
        if let Location::Device(d) = location {
            self.device(d)?;
        }
        let regions = self.regions.read();
        regions.check(ptr, len.max(1), "managed prefetch")?;
        let alloc = self.managed.containing(ptr, len.max(1), "managed prefetch")?;
        let model = self.managed.model();
        let (addr, place) = (ptr.0, location.raw());
        let op = Op::HostFunc(Box::new(move || {
            let bytes = prefetch_pages(&alloc, addr, len, place);
            spend(model.prefetched(bytes));
        }));
        self.enqueue(stream, op)?;
        drop(regions);
        Ok(())
    }

    fn advise(&self, ptr: DevicePtr, len: u64, advice: Advice, location: Location) -> Result<()> {
        let alloc = self.managed.containing(ptr, len.max(1), "hipMemAdvise")?;
        if let Location::Device(d) = location {
            if !advice.ignores_device() {
                self.device(d)?;
            }
        }
        let place = location.raw();
        let mut state = alloc.lock();
        let range = alloc.pages_of(ptr.0, len);
        let pages = &mut state.pages[range];
        match advice {
            Advice::SetCoarseGrain | Advice::UnsetCoarseGrain => {
                return Err(Error::NotSupported(format!(
                    "coarse-grain advice ({}) is AMD-only; the host backend does not model it",
                    advice.raw()
                )));
            }
            Advice::SetReadMostly => pages.iter_mut().for_each(|p| p.read_mostly = true),
            Advice::UnsetReadMostly => pages.iter_mut().for_each(|p| {
                p.read_mostly = false;
                p.copies = bit(p.home);
            }),
            Advice::SetPreferredLocation => pages.iter_mut().for_each(|p| p.preferred = place),
            Advice::UnsetPreferredLocation => pages.iter_mut().for_each(|p| p.preferred = NONE),
            Advice::SetAccessedBy => pages.iter_mut().for_each(|p| p.accessed_by |= bit(place)),
            Advice::UnsetAccessedBy => pages.iter_mut().for_each(|p| p.accessed_by &= !bit(place)),
        }
        Ok(())
    }

    fn range_attribute(
        &self,
        ptr: DevicePtr,
        len: u64,
        attribute: RangeAttribute,
        out: &mut [i32],
    ) -> Result<()> {
        let alloc = self.managed.containing(ptr, len.max(1), "hipMemRangeGetAttribute")?;
        if out.is_empty() {
            return Err(Error::InvalidValue("hipMemRangeGetAttribute: no room for the answer".into()));
        }
        let state = alloc.lock();
        let pages = &state.pages[alloc.pages_of(ptr.0, len)];
        match attribute {
            RangeAttribute::ReadMostly => out[0] = pages.iter().all(|p| p.read_mostly) as i32,
            RangeAttribute::PreferredLocation => out[0] = uniform(pages.iter().map(|p| p.preferred)),
            RangeAttribute::LastPrefetchLocation => out[0] = uniform(pages.iter().map(|p| p.last_prefetch)),
            RangeAttribute::AccessedBy => {
                let all = pages.iter().fold(u128::MAX, |m, p| m & p.accessed_by);
                let mut ids = Vec::new();
                if all & HOST_BIT != 0 {
                    ids.push(-1);
                }
                ids.extend((0..127i32).filter(|&d| all & (1u128 << d) != 0));
                for (i, slot) in out.iter_mut().enumerate() {
                    *slot = ids.get(i).copied().unwrap_or(NONE);
                }
            }
        }
        Ok(())
    }

    fn stream_attach(&self, stream: RawStream, ptr: DevicePtr, len: u64, flags: AttachFlags) -> Result<()> {
        let alloc = self.managed.containing(ptr, len.max(1), "hipStreamAttachMemAsync")?;
        if len != 0 && (ptr.0 != alloc.base || len != alloc.size) {
            return Err(Error::InvalidValue(format!(
                "hipStreamAttachMemAsync: the length must be 0 or the whole {}-byte allocation, not {len} bytes at {ptr}",
                alloc.size
            )));
        }
        let handle = stream.handle;
        let op = Op::HostFunc(Box::new(move || alloc.lock().attach = (flags, handle)));
        let regions = self.regions.read();
        regions.check(ptr, 1, "hipStreamAttachMemAsync")?;
        self.enqueue(stream, op)?;
        Ok(())
    }

    fn host_access(&self, ptr: DevicePtr, len: u64, write: bool) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let alloc = self.managed.containing(ptr, len, "host access to managed memory")?;
        let access = if write { Access::Write } else { Access::Read };
        let moved = HostManaged::access(&alloc, ptr.0, len, -1, access);
        spend(self.managed.account_on_demand(moved));
        Ok(())
    }

    fn statistics(&self) -> ManagedStatistics {
        let c = &self.managed.counters;
        ManagedStatistics {
            faults: Some(c.faults.load(Ordering::Relaxed)),
            bytes_migrated_on_demand: Some(c.bytes_on_demand.load(Ordering::Relaxed)),
            bytes_prefetched: Some(c.bytes_prefetched.load(Ordering::Relaxed)),
            read_duplications: Some(c.duplications.load(Ordering::Relaxed)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backend() -> HostBackend {
        HostBackend::new(HostConfig { devices: 2, fault_latency_ns: 0, ..HostConfig::default() }).unwrap()
    }

    #[test]
    fn device_work_migrates_and_host_access_brings_pages_back() {
        let b = backend();
        let p = b.allocate(0, 3 * MANAGED_PAGE, AttachFlags::Global).unwrap();
        let before = ManagedMemory::statistics(&b);
        b.launch_fill(p, crate::backend::FillValue::U8(7), 3 * MANAGED_PAGE, RawStream::null(0)).unwrap();
        b.device_synchronize(0).unwrap();
        let s = ManagedMemory::statistics(&b).since(&before);
        assert_eq!(s.faults, Some(3));
        assert_eq!(s.bytes_migrated_on_demand, Some(3 * MANAGED_PAGE));
        b.host_access(p, MANAGED_PAGE, false).unwrap();
        assert_eq!(ManagedMemory::statistics(&b).since(&before).faults, Some(4));
        // SAFETY: the allocation is freed once; no reference into it exists.
        unsafe { ManagedMemory::free(&b, p).unwrap() };
    }

    #[test]
    fn read_mostly_pages_duplicate_once() {
        let b = backend();
        let p = b.allocate(0, MANAGED_PAGE, AttachFlags::Global).unwrap();
        b.advise(p, 1, Advice::SetReadMostly, Location::Host).unwrap();
        let before = ManagedMemory::statistics(&b);
        let mut out = [0u8; 16];
        for _ in 0..3 {
            b.copy_device_to_host(&mut out, p).unwrap();
            b.host_access(p, MANAGED_PAGE, false).unwrap();
        }
        let s = ManagedMemory::statistics(&b).since(&before);
        assert_eq!(s.faults, Some(1), "{s:?}");
        assert_eq!(s.read_duplications, Some(1));
        // SAFETY: the allocation is freed once; no reference into it exists.
        unsafe { ManagedMemory::free(&b, p).unwrap() };
    }
}
