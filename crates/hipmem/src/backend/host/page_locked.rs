//! Page-locked host memory on the CPU emulation.
//!
//! An allocation is an anonymous mapping locked with `mlock` where
//! `RLIMIT_MEMLOCK` allows it (else it stays pageable and says so);
//! registering locks the user's range. Host and devices share one address
//! space, so the device pointer of mapped memory is its host address; mapped
//! ranges enter the emulator's region table so that device work (copies,
//! kernels) may touch them.
//!
//! The ranges are kept in a `page_locked_ranges` table (process-wide, each
//! entry naming the backend that owns it). Asynchronous copies are validated
//! against it while its lock is held, and a free or unregister removes the
//! entry first and then drains the devices, so no queued copy outlives the
//! memory.

use super::device_memory::{AnonymousMapping, Region, RegionKind};
use super::{HostBackend, PAGE};
use crate::backend::host_memory::{
    PageLocked, PageLockedFlags, PageLockedMemory, RegisterFlags, RegisterSpan, Registered,
};
use crate::backend::page_locked_ranges::{PageLockedRanges, RangeEntry};
use crate::backend::{Backend, DevicePtr, RawStream};
use crate::error::{Error, Result};

/// What the emulator records of a range besides the shared fields.
struct HostRange {
    /// Memory the emulator allocated (unmapped when the entry goes); `None`
    /// for the user's registered memory.
    #[allow(dead_code)]
    mapping: Option<AnonymousMapping>,
    /// Whether `mlock` succeeded.
    locked: bool,
}

static RANGES: PageLockedRanges<HostRange> = PageLockedRanges::new();

/// Tries to lock `[addr, addr + len)`; false where the limits do not allow it.
fn try_mlock(addr: u64, len: u64) -> bool {
    // SAFETY: mlock changes no memory contents; the kernel checks the range
    // (an unmapped range is an error value).
    unsafe { rustix::mm::mlock(addr as *mut _, len as usize) }.is_ok()
}

fn munlock(addr: u64, len: u64) {
    // SAFETY: as in `try_mlock`; unlocking never invalidates memory.
    if let Err(e) = unsafe { rustix::mm::munlock(addr as *mut _, len as usize) } {
        tracing::debug!(target: "hipmem", "munlock of {len} bytes at {addr:#x}: {e}");
    }
}

impl HostBackend {
    fn owner_id(&self) -> usize {
        self as *const HostBackend as usize
    }

    /// Takes out the entry at exactly `addr` (a registration or not), then
    /// (with no new work able to name it) its region, then drains the devices.
    fn remove_page_locked(&self, addr: u64, registered: bool, what: &str) -> Result<RangeEntry<HostRange>> {
        let entry = RANGES.take(self.owner_id(), addr, registered, what)?;
        if entry.mapped {
            self.regions.remove_if(addr, |r| r.kind == RegionKind::PageLocked);
        }
        self.drain_all_devices();
        Ok(entry)
    }
}

impl PageLockedMemory for HostBackend {
    fn allocate(&self, size: u64, flags: PageLockedFlags) -> Result<PageLocked> {
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes of page-locked memory".into()));
        }
        let rounded = size
            .checked_next_multiple_of(PAGE)
            .filter(|&r| r <= isize::MAX as u64)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes of page-locked memory can never fit")))?;
        let mapping = AnonymousMapping::new(rounded)?;
        let host = mapping.addr();
        let locked = try_mlock(host, rounded);
        if flags.mapped {
            self.regions.insert(host, Region { len: size, device: 0, kind: RegionKind::PageLocked });
        }
        RANGES.lock().insert(
            host,
            RangeEntry {
                len: size,
                owner: self.owner_id(),
                mapped: flags.mapped,
                registered: false,
                extra: HostRange { mapping: Some(mapping), locked },
            },
        );
        Ok(PageLocked { host, device: flags.mapped.then_some(DevicePtr(host)), locked })
    }

    unsafe fn free(&self, host: u64) -> Result<()> {
        let entry = self.remove_page_locked(host, false, "a page-locked allocation")?;
        // Dropping the entry unmaps the memory (which also unlocks it).
        drop(entry);
        Ok(())
    }

    fn register(&self, span: RegisterSpan, flags: RegisterFlags) -> Result<Registered> {
        let (addr, len) = (span.addr(), span.len());
        let mut table = RANGES.lock();
        PageLockedRanges::check_registrable(&table, addr, len)?;
        let locked = try_mlock(addr, len);
        if flags.mapped {
            self.regions.insert(addr, Region { len, device: 0, kind: RegionKind::PageLocked });
        }
        table.insert(
            addr,
            RangeEntry {
                len,
                owner: self.owner_id(),
                mapped: flags.mapped,
                registered: true,
                extra: HostRange { mapping: None, locked },
            },
        );
        Ok(Registered { device: flags.mapped.then_some(DevicePtr(addr)), locked })
    }

    fn unregister(&self, addr: u64) -> Result<()> {
        let entry = self.remove_page_locked(addr, true, "a registered range")?;
        if entry.extra.locked {
            munlock(addr, entry.len);
        }
        Ok(())
    }

    fn device_pointer(&self, host: u64) -> Result<DevicePtr> {
        RANGES.check_mapped(self.owner_id(), host)?;
        Ok(DevicePtr(host))
    }

    fn copy_to_device_async(&self, dst: DevicePtr, src: u64, len: u64, stream: RawStream) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // The guard keeps the range alive until the copy is queued.
        let (_lent, span) = RANGES.lend(self.owner_id(), src, len, "source")?;
        self.copy_host_to_device_async(dst, span, stream)
    }

    fn copy_from_device_async(&self, dst: u64, src: DevicePtr, len: u64, stream: RawStream) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // As above; the owner of the memory waits for the copy before it
        // reads the bytes.
        let (_lent, span) = RANGES.lend(self.owner_id(), dst, len, "destination")?;
        self.copy_device_to_host_async(span, src, stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::host::HostConfig;

    fn backend() -> HostBackend {
        HostBackend::new(HostConfig { devices: 1, ..HostConfig::default() }).unwrap()
    }

    #[test]
    fn allocate_copy_free() {
        let b = backend();
        let p = b.allocate(10_000, PageLockedFlags { mapped: true, ..Default::default() }).unwrap();
        assert_eq!(p.device, Some(DevicePtr(p.host)));
        assert_eq!(b.device_pointer(p.host + 10).unwrap(), DevicePtr(p.host + 10));
        let dev = b.mem_alloc(0, 10_000).unwrap();
        b.copy_to_device_async(dev, p.host, 10_000, RawStream::null(0)).unwrap();
        let e = b.copy_to_device_async(dev, p.host, 10_001, RawStream::null(0)).unwrap_err();
        assert!(e.message().contains("past the end"), "{e}");
        b.device_synchronize(0).unwrap();
        // SAFETY: no reference into the block exists.
        unsafe { b.free(p.host) }.unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { b.free(p.host) }.unwrap_err().code(), 1);
        assert!(b.copy_to_device_async(dev, p.host, 1, RawStream::null(0)).is_err());
        b.mem_free(0, dev).unwrap();
    }
}
