//! The runtime's own memory pools (`hipMemPoolCreate`,
//! `hipMallocFromPoolAsync`, ...) and their interprocess sharing, behind the
//! backend trait's `driver_pool_*` methods. The group is off (NotSupported,
//! naming the missing entry point) where the library lacks one of them.
//!
//! AMD's runtime (ROCm/clr `hipamd/src/hip_mempool_impl.cpp`) differs from
//! CUDA in what it does with the attributes: it stores and reports all
//! eight, releases memory above the release threshold when a stream, event
//! or device is synchronized, resets the two high-water marks only to 0, and
//! of the three reuse flags honours only `hipMemPoolReuseAllowOpportunistic`
//! when it looks for memory to reuse (the other two are stored and read back
//! but change nothing). hipmem passes them through unchanged.

use std::ffi::{c_int, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use super::sys::{self, hipMemPool_t};
use super::{HipBackend, lock, ptr, to_usize};
use crate::backend::{DevicePtr, RawPool, RawStream};
use crate::error::{Error, Result};

impl HipBackend {
    fn pools(&self) -> Result<&'static sys::Pools> {
        self.api.pools.as_ref().map_err(|missing| {
            Error::NotSupported(format!(
                "the HIP library {} has no {missing}: its memory pools are not available",
                self.api.library
            ))
        })
    }

    fn pool_ipc(&self) -> Result<&'static sys::PoolIpc> {
        self.api.pool_ipc.as_ref().map_err(|missing| {
            Error::NotSupported(format!(
                "the HIP library {} has no {missing}: its pools cannot be shared between processes",
                self.api.library
            ))
        })
    }

    /// A pool this backend knows (created, imported or a device's default),
    /// with its device made current.
    fn known_pool(&self, pool: RawPool) -> Result<hipMemPool_t> {
        if !lock(&self.driver_pools).contains(&pool.handle) {
            return Err(Error::InvalidValue(format!(
                "HIP memory pool {:#x} does not exist or was destroyed",
                pool.handle
            )));
        }
        let _device = self.bound(pool.device)?;
        Ok(pool.handle as usize as hipMemPool_t)
    }

    pub(super) fn pool_default(&self, device: usize) -> Result<RawPool> {
        let p = self.pools()?;
        let _device = self.bound(device)?;
        let mut pool: hipMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime validates the device.
        let r = unsafe { (p.hipDeviceGetDefaultMemPool)(&mut pool, device as c_int) };
        self.check(r, || format!("hipDeviceGetDefaultMemPool(device {device})"))?;
        lock(&self.driver_pools).insert(pool as u64);
        Ok(RawPool { device, handle: pool as u64 })
    }

    pub(super) fn pool_create(&self, device: usize, handle_types: u32, max_size: u64) -> Result<RawPool> {
        let p = self.pools()?;
        let _device = self.bound(device)?;
        if max_size != 0 && !self.pool_max_size_known() {
            return Err(Error::NotSupported(format!(
                "a pool size limit needs hipMemPoolProps::maxSize, which HIP has since ROCm 6.2 (this runtime is {})",
                self.runtime_version.map(|v| v.to_string()).unwrap_or_default()
            )));
        }
        let props = sys::hipMemPoolProps {
            allocType: sys::hipMemAllocationTypePinned,
            handleTypes: handle_types as c_int,
            location: sys::hipMemLocation::device(device as c_int),
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: to_usize(max_size, "pool maxSize")?,
            reserved: [0; 56],
        };
        let mut pool: hipMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer and a fully initialized properties struct.
        let r = unsafe { (p.hipMemPoolCreate)(&mut pool, &props) };
        self.check(r, || format!("hipMemPoolCreate(device {device}, handle types {handle_types:#x})"))?;
        lock(&self.driver_pools).insert(pool as u64);
        Ok(RawPool { device, handle: pool as u64 })
    }

    pub(super) fn pool_destroy(&self, pool: RawPool) -> Result<()> {
        let p = self.pools()?;
        let h = self.known_pool(pool)?;
        // SAFETY: a pool this backend knows (checked above).
        let r = unsafe { (p.hipMemPoolDestroy)(h) };
        self.check(r, || format!("hipMemPoolDestroy({:#x})", pool.handle))?;
        lock(&self.driver_pools).remove(&pool.handle);
        Ok(())
    }

    pub(super) fn pool_alloc_async(&self, pool: RawPool, size: u64, stream: RawStream) -> Result<DevicePtr> {
        let p = self.pools()?;
        let h = self.known_pool(pool)?;
        let t = self.target(stream)?;
        let bytes = to_usize(size, "allocation size")?;
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer, a live pool and a live stream.
        let r = unsafe { (p.hipMallocFromPoolAsync)(&mut out, bytes, h, t.raw) };
        self.check(r, || format!("hipMallocFromPoolAsync({size} bytes, pool {:#x})", pool.handle))?;
        Ok(DevicePtr(out as u64))
    }

    pub(super) fn pool_free_async(&self, p: DevicePtr, stream: RawStream) -> Result<()> {
        let pools = self.pools()?;
        let t = self.target(stream)?;
        // SAFETY: a live stream; the runtime validates the pointer.
        let r = unsafe { (pools.hipFreeAsync)(ptr(p), t.raw) };
        self.check(r, || format!("hipFreeAsync({p})"))
    }

    pub(super) fn pool_set_attribute(&self, pool: RawPool, attr: i32, value: u64) -> Result<()> {
        let p = self.pools()?;
        let h = self.known_pool(pool)?;
        let r = if (1..=3).contains(&attr) {
            let mut v: c_int = (value != 0) as c_int;
            // SAFETY: the reuse attributes take an int.
            unsafe { (p.hipMemPoolSetAttribute)(h, attr, (&mut v as *mut c_int).cast()) }
        } else {
            let mut v: u64 = value;
            // SAFETY: the other attributes take a uint64_t.
            unsafe { (p.hipMemPoolSetAttribute)(h, attr, (&mut v as *mut u64).cast()) }
        };
        self.check(r, || {
            format!("hipMemPoolSetAttribute(pool {:#x}, attribute {attr}, {value})", pool.handle)
        })
    }

    pub(super) fn pool_get_attribute(&self, pool: RawPool, attr: i32) -> Result<u64> {
        let p = self.pools()?;
        let h = self.known_pool(pool)?;
        let what = || format!("hipMemPoolGetAttribute(pool {:#x}, attribute {attr})", pool.handle);
        if (1..=3).contains(&attr) {
            let mut v: c_int = 0;
            // SAFETY: the reuse attributes return an int.
            let r = unsafe { (p.hipMemPoolGetAttribute)(h, attr, (&mut v as *mut c_int).cast()) };
            self.check(r, what)?;
            Ok(v as u64)
        } else {
            let mut v: u64 = 0;
            // SAFETY: the other attributes return a uint64_t.
            let r = unsafe { (p.hipMemPoolGetAttribute)(h, attr, (&mut v as *mut u64).cast()) };
            self.check(r, what)?;
            Ok(v)
        }
    }

    pub(super) fn pool_trim_to(&self, pool: RawPool, keep: u64) -> Result<()> {
        let p = self.pools()?;
        let h = self.known_pool(pool)?;
        let keep_bytes = to_usize(keep, "bytes to keep")?;
        // SAFETY: a live pool.
        let r = unsafe { (p.hipMemPoolTrimTo)(h, keep_bytes) };
        self.check(r, || format!("hipMemPoolTrimTo(pool {:#x}, {keep})", pool.handle))
    }

    pub(super) fn pool_set_access(&self, pool: RawPool, device: usize, flags: u32) -> Result<()> {
        let p = self.pools()?;
        let h = self.known_pool(pool)?;
        self.device(device)?;
        let desc = sys::hipMemAccessDesc {
            location: sys::hipMemLocation::device(device as c_int),
            flags: flags as c_int,
        };
        // SAFETY: a live pool and one valid descriptor.
        let r = unsafe { (p.hipMemPoolSetAccess)(h, &desc, 1) };
        self.check(r, || format!("hipMemPoolSetAccess(pool {:#x}, device {device}, {flags})", pool.handle))
    }

    pub(super) fn pool_get_access(&self, pool: RawPool, device: usize) -> Result<u32> {
        let p = self.pools()?;
        let h = self.known_pool(pool)?;
        self.device(device)?;
        let mut location = sys::hipMemLocation::device(device as c_int);
        let mut flags: sys::hipMemAccessFlags = 0;
        // SAFETY: a live pool and valid pointers.
        let r = unsafe { (p.hipMemPoolGetAccess)(&mut flags, h, &mut location) };
        self.check(r, || format!("hipMemPoolGetAccess(pool {:#x}, device {device})", pool.handle))?;
        Ok(flags.max(0) as u32)
    }

    pub(super) fn pool_export_fd(&self, pool: RawPool) -> Result<OwnedFd> {
        let ipc = self.pool_ipc()?;
        let h = self.known_pool(pool)?;
        let mut fd: c_int = -1;
        // SAFETY: a live pool; for the POSIX descriptor type the out-pointer is an int.
        let r = unsafe {
            (ipc.hipMemPoolExportToShareableHandle)(
                (&mut fd as *mut c_int).cast(),
                h,
                sys::hipMemHandleTypePosixFileDescriptor,
                0,
            )
        };
        self.check(r, || format!("hipMemPoolExportToShareableHandle(pool {:#x})", pool.handle))?;
        if fd < 0 {
            return Err(Error::Unknown("hipMemPoolExportToShareableHandle gave no descriptor".into()));
        }
        // SAFETY: the runtime just created this descriptor for the caller, who owns it.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    pub(super) fn pool_import_fd(&self, fd: BorrowedFd<'_>) -> Result<RawPool> {
        let ipc = self.pool_ipc()?;
        let _device = self.bound(0)?;
        let mut pool: hipMemPool_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; for the POSIX descriptor type the handle
        // argument is the descriptor's value, which the caller keeps open.
        let r = unsafe {
            (ipc.hipMemPoolImportFromShareableHandle)(
                &mut pool,
                fd.as_raw_fd() as isize as *mut c_void,
                sys::hipMemHandleTypePosixFileDescriptor,
                0,
            )
        };
        self.check(r, || "hipMemPoolImportFromShareableHandle(POSIX fd)".to_string())?;
        lock(&self.driver_pools).insert(pool as u64);
        // The pool's device is the one with read-write access to it.
        let device = (0..self.devices.len())
            .find(|&d| self.pool_get_access(RawPool { device: d, handle: pool as u64 }, d).ok() == Some(3))
            .unwrap_or(0);
        Ok(RawPool { device, handle: pool as u64 })
    }

    pub(super) fn pool_export_pointer(&self, p: DevicePtr) -> Result<[u8; 64]> {
        let ipc = self.pool_ipc()?;
        let device = self.owner_of(p).unwrap_or(0);
        let _device = self.bound(device)?;
        let mut data = sys::hipMemPoolPtrExportData { reserved: [0; 64] };
        // SAFETY: valid out-pointer; the runtime validates the pointer.
        let r = unsafe { (ipc.hipMemPoolExportPointer)(&mut data, ptr(p)) };
        self.check(r, || format!("hipMemPoolExportPointer({p})"))?;
        Ok(data.reserved)
    }

    pub(super) fn pool_import_pointer(&self, pool: RawPool, data: &[u8; 64]) -> Result<DevicePtr> {
        let ipc = self.pool_ipc()?;
        let h = self.known_pool(pool)?;
        let mut share = sys::hipMemPoolPtrExportData { reserved: *data };
        let mut out: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid pointers and a live (imported) pool; the runtime validates the data.
        let r = unsafe { (ipc.hipMemPoolImportPointer)(&mut out, h, &mut share) };
        self.check(r, || format!("hipMemPoolImportPointer(pool {:#x})", pool.handle))?;
        Ok(DevicePtr(out as u64))
    }

    pub(super) fn pointer_range(&self, p: DevicePtr) -> Result<u64> {
        let f = self.api.info.hipMemGetAddressRange.ok_or_else(|| {
            Error::NotSupported(format!("the HIP library {} has no hipMemGetAddressRange", self.api.library))
        })?;
        let device = self.owner_of(p).unwrap_or(0);
        let _device = self.bound(device)?;
        let (mut base, mut size): (*mut c_void, usize) = (std::ptr::null_mut(), 0);
        // SAFETY: valid out-pointers; the runtime validates the pointer.
        let r = unsafe { f(&mut base, &mut size, ptr(p)) };
        self.check(r, || format!("hipMemGetAddressRange({p})"))?;
        Ok((base as u64 + size as u64).saturating_sub(p.0))
    }
}
