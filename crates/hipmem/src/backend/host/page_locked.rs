//! Page-locked host memory on the CPU emulation.
//!
//! An allocation is an anonymous mapping locked with `mlock` where
//! `RLIMIT_MEMLOCK` allows it (else it stays pageable and says so);
//! registering locks the user's range. Host and devices share one address
//! space, so the device pointer of mapped memory is its host address; mapped
//! ranges enter the emulator's region table so that device work (copies,
//! kernels) may touch them.
//!
//! The table of page-locked ranges is process-wide (host addresses are
//! unique in the process) and each entry names the backend that owns it.
//! Asynchronous copies are validated against it while its lock is held, and
//! a free or unregister removes the entry first and then drains the devices,
//! so no queued copy outlives the memory.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::device_memory::{AnonymousMapping, Region, RegionKind};
use super::{HostBackend, PAGE};
use crate::backend::host_memory::{
    PageLocked, PageLockedFlags, PageLockedMemory, RegisterFlags, RegisterSpan, Registered,
};
use crate::backend::{Backend, DevicePtr, HostSpan, RawStream};
use crate::error::{Error, Result};

enum Backing {
    /// Memory the emulator allocated (unmapped when the entry goes).
    Allocated(#[allow(dead_code)] AnonymousMapping),
    /// The user's memory, registered.
    Registered,
}

struct Entry {
    len: u64,
    owner: usize,
    backing: Backing,
    mapped: bool,
    locked: bool,
}

static TABLE: Mutex<BTreeMap<u64, Entry>> = Mutex::new(BTreeMap::new());

fn table() -> std::sync::MutexGuard<'static, BTreeMap<u64, Entry>> {
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The entry of `owner` that contains `[addr, addr + len)`, if any.
fn containing(
    table: &BTreeMap<u64, Entry>,
    owner: usize,
    addr: u64,
    len: u64,
) -> std::result::Result<(u64, &Entry), String> {
    let end = addr.checked_add(len).ok_or_else(|| format!("{addr:#x} + {len} bytes overflows"))?;
    match table.range(..=addr).next_back() {
        Some((&base, e)) if e.owner == owner && addr < base + e.len.max(1) => {
            if end > base + e.len {
                Err(format!(
                    "{len} bytes at {addr:#x} run {} bytes past the end of the {}-byte page-locked range at {base:#x}",
                    end - (base + e.len),
                    e.len
                ))
            } else {
                Ok((base, e))
            }
        }
        _ => Err(format!("{addr:#x} is not page-locked memory of this backend")),
    }
}

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

    fn drain_all_devices(&self) {
        for device in &self.devices {
            self.sync_device(device);
        }
    }

    /// Removes the entry at exactly `addr` if `accept` agrees, then (with no
    /// new work able to name it) its region, then drains the devices.
    fn remove_page_locked(
        &self,
        addr: u64,
        accept: impl FnOnce(&Entry) -> bool,
        what: &str,
    ) -> Result<Entry> {
        let owner = self.owner_id();
        let entry = {
            let mut t = table();
            match t.get(&addr) {
                Some(e) if e.owner == owner && accept(e) => t.remove(&addr),
                _ => None,
            }
        }
        .ok_or_else(|| {
            Error::InvalidValue(format!("{addr:#x} is not the start of {what} of this backend"))
        })?;
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
        table().insert(
            host,
            Entry {
                len: size,
                owner: self.owner_id(),
                backing: Backing::Allocated(mapping),
                mapped: flags.mapped,
                locked,
            },
        );
        Ok(PageLocked { host, device: flags.mapped.then_some(DevicePtr(host)), locked })
    }

    unsafe fn free(&self, host: u64) -> Result<()> {
        let entry = self.remove_page_locked(
            host,
            |e| matches!(e.backing, Backing::Allocated(_)),
            "a page-locked allocation",
        )?;
        // Dropping the entry unmaps the memory (which also unlocks it).
        drop(entry);
        Ok(())
    }

    fn register(&self, span: RegisterSpan, flags: RegisterFlags) -> Result<Registered> {
        let (addr, len) = (span.addr(), span.len());
        if addr == 0 || len == 0 {
            return Err(Error::InvalidValue("hipHostRegister of a null pointer or 0 bytes".into()));
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| Error::InvalidValue(format!("{addr:#x} + {len} bytes overflows")))?;
        let owner = self.owner_id();
        let mut t = table();
        let overlaps = t.range(..end).next_back().is_some_and(|(&base, e)| base + e.len.max(1) > addr);
        if overlaps {
            return Err(Error::InvalidValue(format!(
                "{len} bytes at {addr:#x} overlap memory that is already page-locked"
            )));
        }
        let locked = try_mlock(addr, len);
        if flags.mapped {
            self.regions.insert(addr, Region { len, device: 0, kind: RegionKind::PageLocked });
        }
        t.insert(addr, Entry { len, owner, backing: Backing::Registered, mapped: flags.mapped, locked });
        Ok(Registered { device: flags.mapped.then_some(DevicePtr(addr)), locked })
    }

    fn unregister(&self, addr: u64) -> Result<()> {
        let entry = self.remove_page_locked(
            addr,
            |e| matches!(e.backing, Backing::Registered),
            "a registered range",
        )?;
        if entry.locked {
            munlock(addr, entry.len);
        }
        Ok(())
    }

    fn device_pointer(&self, host: u64) -> Result<DevicePtr> {
        let t = table();
        let (_, e) = containing(&t, self.owner_id(), host, 1).map_err(Error::InvalidValue)?;
        if !e.mapped {
            return Err(Error::InvalidValue(format!("{host:#x} is page-locked memory that is not mapped")));
        }
        Ok(DevicePtr(host))
    }

    fn copy_to_device_async(&self, dst: DevicePtr, src: u64, len: u64, stream: RawStream) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // Hold the table's lock until the copy is queued: a free removes the
        // entry under it and then drains the devices.
        let t = table();
        containing(&t, self.owner_id(), src, len)
            .map_err(|m| Error::InvalidValue(format!("asynchronous copy source: {m}")))?;
        // SAFETY: the range lies in page-locked memory this backend owns or
        // registered; it stays valid until freed or unregistered, and both
        // drain every device (so this copy) before the memory goes.
        let span = unsafe { HostSpan::new(src as *const u8, len as usize) };
        self.copy_host_to_device_async(dst, span, stream)
    }

    fn copy_from_device_async(&self, dst: u64, src: DevicePtr, len: u64, stream: RawStream) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let t = table();
        containing(&t, self.owner_id(), dst, len)
            .map_err(|m| Error::InvalidValue(format!("asynchronous copy destination: {m}")))?;
        // SAFETY: as in `copy_to_device_async`; the owner of the memory waits
        // for the copy before it reads the bytes.
        let span = unsafe { HostSpan::new(dst as *const u8, len as usize) };
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
