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

use std::ffi::{c_uint, c_void};
use std::sync::OnceLock;

use super::CudaBackend;
use super::driver::{self, CUdeviceptr, CUresult};
use crate::backend::host_memory::{
    PageLocked, PageLockedFlags, PageLockedMemory, RegisterFlags, RegisterSpan, Registered,
};
use crate::backend::page_locked_ranges::{PageLockedRanges, RangeEntry};
use crate::backend::{Backend, DevicePtr, RawStream};
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

static RANGES: PageLockedRanges<()> = PageLockedRanges::new();

impl CudaBackend {
    fn owner_id(&self) -> usize {
        self as *const CudaBackend as usize
    }
}

impl PageLockedMemory for CudaBackend {
    fn allocate(&self, size: u64, flags: PageLockedFlags) -> Result<PageLocked> {
        let e = entries()?;
        let len = usize::try_from(size)
            .ok()
            .filter(|&l| l > 0 && l <= isize::MAX as usize)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes of page-locked memory can never fit")))?;
        let _ctx = self.any_bound()?;
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
        let e = entries()?;
        let entry = RANGES.take(self.owner_id(), host, false, "a page-locked allocation")?;
        // No new copy can name the memory now; let queued ones finish.
        if let Err(err) = self.synchronize_all() {
            RANGES.restore(host, entry);
            return Err(err);
        }
        let _ctx = self.any_bound()?;
        // SAFETY: `host` came from cuMemHostAlloc and is freed once (the entry
        // is gone); the caller promises no reference into it is used after.
        let r = unsafe { (e.free)(host as *mut c_void) };
        self.check(r, || format!("cuMemFreeHost({host:#x})"))
    }

    fn register(&self, span: RegisterSpan, flags: RegisterFlags) -> Result<Registered> {
        let e = entries()?;
        let (addr, len) = (span.addr(), span.len());
        let mut table = RANGES.lock();
        PageLockedRanges::check_registrable(&table, addr, len)?;
        let size = usize::try_from(len).map_err(|_| Error::InvalidValue(format!("{len} bytes")))?;
        let _ctx = self.any_bound()?;
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
        table.insert(
            addr,
            RangeEntry { len, owner: self.owner_id(), mapped: flags.mapped, registered: true, extra: () },
        );
        Ok(Registered { device, locked: true })
    }

    fn unregister(&self, addr: u64) -> Result<()> {
        let e = entries()?;
        let entry = RANGES.take(self.owner_id(), addr, true, "a registered range")?;
        if let Err(err) = self.synchronize_all() {
            RANGES.restore(addr, entry);
            return Err(err);
        }
        let _ctx = self.any_bound()?;
        // SAFETY: `addr` was registered by this backend and is unregistered once.
        let r = unsafe { (e.unregister)(addr as *mut c_void) };
        self.check(r, || format!("cuMemHostUnregister({addr:#x})"))
    }

    fn device_pointer(&self, host: u64) -> Result<DevicePtr> {
        let e = entries()?;
        RANGES.check_mapped(self.owner_id(), host)?;
        let _ctx = self.any_bound()?;
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
        // As above; the memory's owner waits for the copy before it reads
        // the bytes.
        let (_lent, span) = RANGES.lend(self.owner_id(), dst, len, "destination")?;
        self.copy_device_to_host_async(span, src, stream)
    }
}
