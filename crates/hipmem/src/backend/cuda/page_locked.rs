//! Page-locked host memory on the CUDA driver: `cuMemHostAlloc`,
//! `cuMemFreeHost`, `cuMemHostRegister_v2`, `cuMemHostUnregister`,
//! `cuMemHostGetDevicePointer_v2`, loaded on first use.
//!
//! Allocations and registrations are always portable (usable from every
//! device's context, as HIP's host memory is); Mapped and WriteCombined are
//! passed through. The backend keeps the table of page-locked ranges it made
//! (process-wide, as the driver's page-locked memory is), so asynchronous
//! copies from and to them can be validated and are safe to call; a free or
//! unregister removes the range first and synchronizes every device before
//! the driver releases the memory.

use std::collections::BTreeMap;
use std::ffi::{c_uint, c_void};
use std::sync::{Mutex, OnceLock};

use super::CudaBackend;
use super::driver::{self, CUdeviceptr, CUresult};
use crate::backend::host_memory::{
    PageLocked, PageLockedFlags, PageLockedMemory, RegisterFlags, RegisterSpan, Registered,
};
use crate::backend::{Backend, DevicePtr, HostSpan, RawStream};
use crate::error::{Error, Result};

const CU_MEMHOSTALLOC_PORTABLE: c_uint = 1;
const CU_MEMHOSTALLOC_DEVICEMAP: c_uint = 2;
const CU_MEMHOSTALLOC_WRITECOMBINED: c_uint = 4;
const CU_MEMHOSTREGISTER_PORTABLE: c_uint = 1;
const CU_MEMHOSTREGISTER_DEVICEMAP: c_uint = 2;

type MemHostAlloc = unsafe extern "C" fn(pp: *mut *mut c_void, bytesize: usize, flags: c_uint) -> CUresult;
type MemFreeHost = unsafe extern "C" fn(p: *mut c_void) -> CUresult;
type MemHostRegister = unsafe extern "C" fn(p: *mut c_void, bytesize: usize, flags: c_uint) -> CUresult;
type MemHostUnregister = unsafe extern "C" fn(p: *mut c_void) -> CUresult;
type MemHostGetDevicePointer =
    unsafe extern "C" fn(pdptr: *mut CUdeviceptr, p: *mut c_void, flags: c_uint) -> CUresult;

/// The entry points, loaded once.
struct Entries {
    alloc: MemHostAlloc,
    free: MemFreeHost,
    register: MemHostRegister,
    unregister: MemHostUnregister,
    device_pointer: MemHostGetDevicePointer,
}

fn entries() -> Result<&'static Entries> {
    static ENTRIES: OnceLock<Result<Entries>> = OnceLock::new();
    let loaded = ENTRIES.get_or_init(|| {
        // SAFETY: each type above is the signature cuda.h gives for the symbol.
        unsafe {
            Ok(Entries {
                alloc: driver::symbol("cuMemHostAlloc")?,
                free: driver::symbol("cuMemFreeHost")?,
                register: driver::symbol("cuMemHostRegister_v2")?,
                unregister: driver::symbol("cuMemHostUnregister")?,
                device_pointer: driver::symbol("cuMemHostGetDevicePointer_v2")?,
            })
        }
    });
    loaded.as_ref().map_err(Clone::clone)
}

struct Entry {
    len: u64,
    owner: usize,
    registered: bool,
    mapped: bool,
}

static RANGES: Mutex<BTreeMap<u64, Entry>> = Mutex::new(BTreeMap::new());

fn ranges() -> std::sync::MutexGuard<'static, BTreeMap<u64, Entry>> {
    RANGES.lock().unwrap_or_else(|p| p.into_inner())
}

fn containing(
    t: &BTreeMap<u64, Entry>,
    owner: usize,
    addr: u64,
    len: u64,
) -> std::result::Result<&Entry, String> {
    let end = addr.checked_add(len).ok_or_else(|| format!("{addr:#x} + {len} bytes overflows"))?;
    match t.range(..=addr).next_back() {
        Some((&base, e)) if e.owner == owner && addr < base + e.len.max(1) => {
            if end > base + e.len {
                Err(format!(
                    "{len} bytes at {addr:#x} run {} bytes past the end of the {}-byte page-locked range at {base:#x}",
                    end - (base + e.len),
                    e.len
                ))
            } else {
                Ok(e)
            }
        }
        _ => Err(format!("{addr:#x} is not page-locked memory of this backend")),
    }
}

impl CudaBackend {
    fn owner_id(&self) -> usize {
        self as *const CudaBackend as usize
    }

    fn synchronize_all(&self) -> Result<()> {
        for dev in &self.devices {
            self.synchronize(dev)?;
        }
        Ok(())
    }

    fn remove_range(&self, addr: u64, registered: bool, what: &str) -> Result<Entry> {
        let owner = self.owner_id();
        let mut t = ranges();
        match t.get(&addr) {
            Some(e) if e.owner == owner && e.registered == registered => {}
            _ => {
                return Err(Error::InvalidValue(format!(
                    "{addr:#x} is not the start of {what} of this backend"
                )));
            }
        }
        Ok(t.remove(&addr).expect("checked above"))
    }
}

impl PageLockedMemory for CudaBackend {
    fn allocate(&self, size: u64, flags: PageLockedFlags) -> Result<PageLocked> {
        let e = entries()?;
        let len = usize::try_from(size)
            .ok()
            .filter(|&l| l > 0 && l <= isize::MAX as usize)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes of page-locked memory can never fit")))?;
        self.bound(0)?;
        let mut bits = CU_MEMHOSTALLOC_PORTABLE;
        if flags.mapped {
            bits |= CU_MEMHOSTALLOC_DEVICEMAP;
        }
        if flags.write_combined {
            bits |= CU_MEMHOSTALLOC_WRITECOMBINED;
        }
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; a context is current.
        let r = unsafe { (e.alloc)(&mut p, len, bits) };
        self.check(r, || format!("cuMemHostAlloc({size} bytes, flags {bits:#x})"))?;
        // SAFETY: the driver returned `len` bytes of host memory at `p`; zero
        // them so that safe views never see uninitialized bytes.
        unsafe { std::ptr::write_bytes(p.cast::<u8>(), 0, len) };
        let host = p as u64;
        let device = if flags.mapped {
            let mut d: CUdeviceptr = 0;
            // SAFETY: `p` is mapped page-locked memory just allocated.
            let r = unsafe { (e.device_pointer)(&mut d, p, 0) };
            if let Err(err) = self.check(r, || format!("cuMemHostGetDevicePointer_v2({host:#x})")) {
                // SAFETY: nothing else knows the memory yet.
                let _ = unsafe { (e.free)(p) };
                return Err(err);
            }
            Some(DevicePtr(d))
        } else {
            None
        };
        ranges().insert(
            host,
            Entry { len: size, owner: self.owner_id(), registered: false, mapped: flags.mapped },
        );
        Ok(PageLocked { host, device, locked: true })
    }

    unsafe fn free(&self, host: u64) -> Result<()> {
        let e = entries()?;
        let entry = self.remove_range(host, false, "a page-locked allocation")?;
        // No new copy can name the memory now; let queued ones finish.
        if let Err(err) = self.synchronize_all() {
            ranges().insert(host, entry);
            return Err(err);
        }
        self.bound(0)?;
        // SAFETY: `host` came from cuMemHostAlloc and is freed once (the entry
        // is gone); the caller promises no reference into it is used after.
        let r = unsafe { (e.free)(host as *mut c_void) };
        self.check(r, || format!("cuMemFreeHost({host:#x})"))
    }

    fn register(&self, span: RegisterSpan, flags: RegisterFlags) -> Result<Registered> {
        let e = entries()?;
        let (addr, len) = (span.addr(), span.len());
        if addr == 0 || len == 0 {
            return Err(Error::InvalidValue("hipHostRegister of a null pointer or 0 bytes".into()));
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| Error::InvalidValue(format!("{addr:#x} + {len} bytes overflows")))?;
        let size = usize::try_from(len).map_err(|_| Error::InvalidValue(format!("{len} bytes")))?;
        let mut t = ranges();
        if t.range(..end).next_back().is_some_and(|(&base, e)| base + e.len.max(1) > addr) {
            return Err(Error::InvalidValue(format!(
                "{len} bytes at {addr:#x} overlap memory that is already page-locked"
            )));
        }
        self.bound(0)?;
        let mut bits = CU_MEMHOSTREGISTER_PORTABLE;
        if flags.mapped {
            bits |= CU_MEMHOSTREGISTER_DEVICEMAP;
        }
        // SAFETY: the span's contract keeps the memory valid until unregistered.
        let r = unsafe { (e.register)(addr as *mut c_void, size, bits) };
        self.check(r, || format!("cuMemHostRegister_v2({addr:#x}, {len} bytes, flags {bits:#x})"))?;
        let device = if flags.mapped {
            let mut d: CUdeviceptr = 0;
            // SAFETY: the range was just registered as mapped.
            let r = unsafe { (e.device_pointer)(&mut d, addr as *mut c_void, 0) };
            if let Err(err) = self.check(r, || format!("cuMemHostGetDevicePointer_v2({addr:#x})")) {
                // SAFETY: registered just above; nothing uses it yet.
                let _ = unsafe { (e.unregister)(addr as *mut c_void) };
                return Err(err);
            }
            Some(DevicePtr(d))
        } else {
            None
        };
        t.insert(addr, Entry { len, owner: self.owner_id(), registered: true, mapped: flags.mapped });
        Ok(Registered { device, locked: true })
    }

    fn unregister(&self, addr: u64) -> Result<()> {
        let e = entries()?;
        let entry = self.remove_range(addr, true, "a registered range")?;
        if let Err(err) = self.synchronize_all() {
            ranges().insert(addr, entry);
            return Err(err);
        }
        self.bound(0)?;
        // SAFETY: `addr` was registered by this backend and is unregistered once.
        let r = unsafe { (e.unregister)(addr as *mut c_void) };
        self.check(r, || format!("cuMemHostUnregister({addr:#x})"))
    }

    fn device_pointer(&self, host: u64) -> Result<DevicePtr> {
        let e = entries()?;
        {
            let t = ranges();
            let entry = containing(&t, self.owner_id(), host, 1).map_err(Error::InvalidValue)?;
            if !entry.mapped {
                return Err(Error::InvalidValue(format!(
                    "{host:#x} is page-locked memory that is not mapped"
                )));
            }
        }
        self.bound(0)?;
        let mut d: CUdeviceptr = 0;
        // SAFETY: `host` lies in mapped page-locked memory of this backend.
        let r = unsafe { (e.device_pointer)(&mut d, host as *mut c_void, 0) };
        self.check(r, || format!("cuMemHostGetDevicePointer_v2({host:#x})"))?;
        Ok(DevicePtr(d))
    }

    fn copy_to_device_async(&self, dst: DevicePtr, src: u64, len: u64, stream: RawStream) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        // The lock is held until the copy is queued: a free removes the range
        // under it, then synchronizes the devices before releasing the memory.
        let t = ranges();
        containing(&t, self.owner_id(), src, len)
            .map_err(|m| Error::InvalidValue(format!("asynchronous copy source: {m}")))?;
        // SAFETY: the range is page-locked memory of this backend, valid until
        // freed or unregistered, both of which wait for the devices first.
        let span = unsafe { HostSpan::new(src as *const u8, len as usize) };
        self.copy_host_to_device_async(dst, span, stream)
    }

    fn copy_from_device_async(&self, dst: u64, src: DevicePtr, len: u64, stream: RawStream) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let t = ranges();
        containing(&t, self.owner_id(), dst, len)
            .map_err(|m| Error::InvalidValue(format!("asynchronous copy destination: {m}")))?;
        // SAFETY: as in `copy_to_device_async`; the memory's owner waits for
        // the copy before it reads the bytes.
        let span = unsafe { HostSpan::new(dst as *const u8, len as usize) };
        self.copy_device_to_host_async(span, src, stream)
    }
}
