//! Page-locked host memory on the HIP runtime: `hipHostMalloc`,
//! `hipHostFree`, `hipHostRegister`, `hipHostUnregister`,
//! `hipHostGetDevicePointer`.
//!
//! Allocations and registrations are always portable (usable from every
//! device, as hipmem's page-locked memory is); Mapped and WriteCombined are
//! passed through. The backend keeps the table of page-locked ranges it made
//! (process-wide, as the runtime's page-locked memory is), so asynchronous
//! copies from and to them can be validated and are safe to call; a free or
//! unregister removes the range first and synchronizes every device before
//! the runtime releases the memory.

use std::ffi::c_void;

use super::HipBackend;
use super::sys;
use crate::backend::host_memory::{
    PageLocked, PageLockedFlags, PageLockedMemory, RegisterFlags, RegisterSpan, Registered,
};
use crate::backend::page_locked_ranges::{PageLockedRanges, RangeEntry};
use crate::backend::{Backend, DevicePtr, RawStream};
use crate::error::{Error, Result};

static RANGES: PageLockedRanges<()> = PageLockedRanges::new();

impl HipBackend {
    fn owner_id(&self) -> usize {
        self as *const HipBackend as usize
    }

    fn host_register(&self) -> Result<&'static sys::HostRegister> {
        self.api.host_register.as_ref().map_err(|missing| {
            Error::NotSupported(format!(
                "the HIP library {} has no {missing}: host memory cannot be registered",
                self.api.library
            ))
        })
    }

    fn mapped_pointer(&self, host: u64) -> Result<DevicePtr> {
        let mut d: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime validates `host`.
        let r = unsafe { (self.api.core.hipHostGetDevicePointer)(&mut d, host as usize as *mut c_void, 0) };
        self.check(r, || format!("hipHostGetDevicePointer({host:#x})"))?;
        Ok(DevicePtr(d as u64))
    }
}

impl PageLockedMemory for HipBackend {
    fn allocate(&self, size: u64, flags: PageLockedFlags) -> Result<PageLocked> {
        let len = usize::try_from(size)
            .ok()
            .filter(|&l| l > 0 && l <= isize::MAX as usize)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes of page-locked memory can never fit")))?;
        let _device = self.bound(0)?;
        let mut bits = sys::hipHostMallocPortable;
        if flags.mapped {
            bits |= sys::hipHostMallocMapped;
        }
        if flags.write_combined {
            bits |= sys::hipHostMallocWriteCombined;
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        let r = unsafe { (self.api.core.hipHostMalloc)(&mut p, len, bits) };
        self.check(r, || format!("hipHostMalloc({size} bytes, flags {bits:#x})"))?;
        // SAFETY: the runtime returned `len` bytes of host memory at `p`; zero
        // them so that safe views never see uninitialized bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        let host = p as u64;
        let device = if flags.mapped {
            match self.mapped_pointer(host) {
                Ok(d) => Some(d),
                Err(err) => {
                    // SAFETY: nothing else knows the memory yet.
                    let _ = unsafe { (self.api.core.hipHostFree)(p) };
                    return Err(err);
                }
            }
        } else {
            None
        };
        RANGES.lock().insert(
            host,
            RangeEntry {
                len: size,
                owner: self.owner_id(),
                mapped: flags.mapped,
                registered: false,
                extra: (),
            },
        );
        Ok(PageLocked { host, device, locked: true })
    }

    unsafe fn free(&self, host: u64) -> Result<()> {
        let entry = RANGES.take(self.owner_id(), host, false, "a page-locked allocation")?;
        // No new copy can name the memory now; let queued ones finish.
        if let Err(err) = self.synchronize_all() {
            RANGES.restore(host, entry);
            return Err(err);
        }
        // SAFETY: `host` came from hipHostMalloc and is freed once (the entry
        // is gone); the caller promises no reference into it is used after.
        let r = unsafe { (self.api.core.hipHostFree)(host as usize as *mut c_void) };
        self.check(r, || format!("hipHostFree({host:#x})"))
    }

    fn register(&self, span: RegisterSpan, flags: RegisterFlags) -> Result<Registered> {
        let reg = self.host_register()?;
        let (addr, len) = (span.addr(), span.len());
        let mut table = RANGES.lock();
        PageLockedRanges::check_registrable(&table, addr, len)?;
        let size = usize::try_from(len).map_err(|_| Error::InvalidValue(format!("{len} bytes")))?;
        let _device = self.bound(0)?;
        let mut bits = sys::hipHostRegisterPortable;
        if flags.mapped {
            bits |= sys::hipHostRegisterMapped;
        }
        // SAFETY: the span's contract keeps the memory valid until unregistered.
        let r = unsafe { (reg.hipHostRegister)(addr as usize as *mut c_void, size, bits) };
        self.check(r, || format!("hipHostRegister({addr:#x}, {len} bytes, flags {bits:#x})"))?;
        let device = if flags.mapped {
            match self.mapped_pointer(addr) {
                Ok(d) => Some(d),
                Err(err) => {
                    // SAFETY: registered just above; nothing uses it yet.
                    let _ = unsafe { (reg.hipHostUnregister)(addr as usize as *mut c_void) };
                    return Err(err);
                }
            }
        } else {
            None
        };
        table.insert(
            addr,
            RangeEntry { len, owner: self.owner_id(), mapped: flags.mapped, registered: true, extra: () },
        );
        Ok(Registered { device, locked: true })
    }

    fn unregister(&self, addr: u64) -> Result<()> {
        let reg = self.host_register()?;
        let entry = RANGES.take(self.owner_id(), addr, true, "a registered range")?;
        if let Err(err) = self.synchronize_all() {
            RANGES.restore(addr, entry);
            return Err(err);
        }
        // SAFETY: `addr` was registered by this backend and is unregistered once.
        let r = unsafe { (reg.hipHostUnregister)(addr as usize as *mut c_void) };
        self.check(r, || format!("hipHostUnregister({addr:#x})"))
    }

    fn device_pointer(&self, host: u64) -> Result<DevicePtr> {
        RANGES.check_mapped(self.owner_id(), host)?;
        let _device = self.bound(0)?;
        self.mapped_pointer(host)
    }

    fn copy_to_device_async(&self, dst: DevicePtr, src: u64, len: u64, stream: RawStream) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // The guard keeps the range alive until the copy is queued: a free
        // takes the range out under its lock, then synchronizes the devices
        // before releasing the memory.
        let (_lent, span) = RANGES.lend(self.owner_id(), src, len, "source")?;
        self.copy_host_to_device_async(dst, span, stream)
    }

    fn copy_from_device_async(&self, dst: u64, src: DevicePtr, len: u64, stream: RawStream) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let (_lent, span) = RANGES.lend(self.owner_id(), dst, len, "destination")?;
        self.copy_device_to_host_async(span, src, stream)
    }
}
