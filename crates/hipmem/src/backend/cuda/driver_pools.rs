//! The driver's own memory pools (`cuMemPool*`, `cuMemAllocFromPoolAsync`,
//! `cuMemFreeAsync`, pool IPC), for the backend trait's driver-pool methods.

use std::collections::HashSet;

use super::{CudaBackend, driver, lock, pool_ipc};
use crate::backend::{DevicePtr, RawPool, RawStream};
use crate::error::{Error, Result};

/// The driver pools a backend handed out (created ones and devices' default
/// pools), by handle.
pub(super) type PoolSet = std::sync::Mutex<HashSet<u64>>;

impl CudaBackend {
    pub(super) fn pool_default(&self, device: usize) -> Result<RawPool> {
        let dev = self.bound(device)?;
        let mut pool: driver::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: valid out-pointer; `dev.cu` is a device of this driver.
        let r = unsafe { (self.driver.cuDeviceGetDefaultMemPool)(&mut pool, dev.cu) };
        self.check(r, || format!("cuDeviceGetDefaultMemPool(device {device})"))?;
        lock(&self.driver_pools).insert(pool as u64);
        Ok(RawPool { device, handle: pool as u64 })
    }

    pub(super) fn pool_create(&self, device: usize, handle_types: u32, max_size: u64) -> Result<RawPool> {
        let dev = self.bound(device)?;
        let props = driver::CUmemPoolProps {
            allocType: driver::CU_MEM_ALLOCATION_TYPE_PINNED,
            handleTypes: handle_types,
            location: driver::CUmemLocation { type_: driver::CU_MEM_LOCATION_TYPE_DEVICE, id: dev.cu },
            win32SecurityAttributes: std::ptr::null_mut(),
            maxSize: Self::to_usize(max_size, "pool maxSize")?,
            reserved: [0; 56],
        };
        let mut pool: driver::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: valid out-pointer and a fully initialized properties struct.
        let r = unsafe { (self.driver.cuMemPoolCreate)(&mut pool, &props) };
        self.check(r, || format!("cuMemPoolCreate(device {device}, handle types {handle_types:#x})"))?;
        lock(&self.driver_pools).insert(pool as u64);
        Ok(RawPool { device, handle: pool as u64 })
    }

    pub(super) fn pool_destroy(&self, pool: RawPool) -> Result<()> {
        let (p, _ctx) = self.driver_pool(pool)?;
        // SAFETY: a pool this backend created (checked above).
        let r = unsafe { (self.driver.cuMemPoolDestroy)(p) };
        self.check(r, || format!("cuMemPoolDestroy({:#x})", pool.handle))?;
        lock(&self.driver_pools).remove(&pool.handle);
        Ok(())
    }

    pub(super) fn pool_alloc_async(&self, pool: RawPool, size: u64, stream: RawStream) -> Result<DevicePtr> {
        // The stream's context is the one the allocation runs in.
        let p = self.known_pool(pool)?;
        let t = self.target(stream)?;
        let bytes = Self::to_usize(size, "allocation size")?;
        let mut ptr: driver::CUdeviceptr = 0;
        // SAFETY: valid out-pointer, a live pool and a live stream.
        let r = unsafe { (self.driver.cuMemAllocFromPoolAsync)(&mut ptr, bytes, p, t.raw) };
        self.check(r, || format!("cuMemAllocFromPoolAsync({size} bytes, pool {:#x})", pool.handle))?;
        Ok(DevicePtr(ptr))
    }

    pub(super) fn pool_free_async(&self, ptr: DevicePtr, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        // SAFETY: a live stream; the driver validates the pointer.
        let r = unsafe { (self.driver.cuMemFreeAsync)(ptr.0, t.raw) };
        self.check(r, || format!("cuMemFreeAsync({ptr})"))
    }

    pub(super) fn pool_set_attribute(&self, pool: RawPool, attr: i32, value: u64) -> Result<()> {
        let (p, _ctx) = self.driver_pool(pool)?;
        let r = if (1..=3).contains(&attr) {
            let mut v: i32 = (value != 0) as i32;
            // SAFETY: the reuse attributes take an int.
            unsafe { (self.driver.cuMemPoolSetAttribute)(p, attr as u32, (&mut v as *mut i32).cast()) }
        } else {
            let mut v: u64 = value;
            // SAFETY: the other attributes take a cuuint64_t.
            unsafe { (self.driver.cuMemPoolSetAttribute)(p, attr as u32, (&mut v as *mut u64).cast()) }
        };
        self.check(r, || format!("cuMemPoolSetAttribute(pool {:#x}, attribute {attr}, {value})", pool.handle))
    }

    pub(super) fn pool_get_attribute(&self, pool: RawPool, attr: i32) -> Result<u64> {
        let (p, _ctx) = self.driver_pool(pool)?;
        if (1..=3).contains(&attr) {
            let mut v: i32 = 0;
            // SAFETY: the reuse attributes return an int.
            let r =
                unsafe { (self.driver.cuMemPoolGetAttribute)(p, attr as u32, (&mut v as *mut i32).cast()) };
            self.check(r, || format!("cuMemPoolGetAttribute(pool {:#x}, attribute {attr})", pool.handle))?;
            Ok(v as u64)
        } else {
            let mut v: u64 = 0;
            // SAFETY: the other attributes return a cuuint64_t.
            let r =
                unsafe { (self.driver.cuMemPoolGetAttribute)(p, attr as u32, (&mut v as *mut u64).cast()) };
            self.check(r, || format!("cuMemPoolGetAttribute(pool {:#x}, attribute {attr})", pool.handle))?;
            Ok(v)
        }
    }

    pub(super) fn pool_trim_to(&self, pool: RawPool, keep: u64) -> Result<()> {
        let (p, _ctx) = self.driver_pool(pool)?;
        let keep_bytes = Self::to_usize(keep, "bytes to keep")?;
        // SAFETY: a live pool.
        let r = unsafe { (self.driver.cuMemPoolTrimTo)(p, keep_bytes) };
        self.check(r, || format!("cuMemPoolTrimTo(pool {:#x}, {keep})", pool.handle))
    }

    pub(super) fn pool_set_access(&self, pool: RawPool, device: usize, flags: u32) -> Result<()> {
        let (p, _ctx) = self.driver_pool(pool)?;
        let dev = self.device(device)?;
        let desc = driver::CUmemAccessDesc {
            location: driver::CUmemLocation { type_: driver::CU_MEM_LOCATION_TYPE_DEVICE, id: dev.cu },
            flags,
        };
        // SAFETY: a live pool and one valid descriptor.
        let r = unsafe { (self.driver.cuMemPoolSetAccess)(p, &desc, 1) };
        self.check(r, || format!("cuMemPoolSetAccess(pool {:#x}, device {device}, {flags})", pool.handle))
    }

    pub(super) fn pool_get_access(&self, pool: RawPool, device: usize) -> Result<u32> {
        let (p, _ctx) = self.driver_pool(pool)?;
        let dev = self.device(device)?;
        let mut location = driver::CUmemLocation { type_: driver::CU_MEM_LOCATION_TYPE_DEVICE, id: dev.cu };
        let mut flags: u32 = 0;
        // SAFETY: a live pool and valid pointers.
        let r = unsafe { (self.driver.cuMemPoolGetAccess)(&mut flags, p, &mut location) };
        self.check(r, || format!("cuMemPoolGetAccess(pool {:#x}, device {device})", pool.handle))?;
        Ok(flags)
    }

    pub(super) fn pool_export_fd(&self, pool: RawPool) -> Result<std::os::fd::OwnedFd> {
        let e = pool_ipc::entries()?;
        let (p, _ctx) = self.driver_pool(pool)?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: a live pool; for the POSIX descriptor type the out-pointer is an int.
        let r = unsafe {
            (e.export_pool)((&mut fd as *mut std::ffi::c_int).cast(), p, pool_ipc::HANDLE_TYPE_POSIX_FD, 0)
        };
        self.check(r, || format!("cuMemPoolExportToShareableHandle(pool {:#x})", pool.handle))?;
        if fd < 0 {
            return Err(Error::Unknown("cuMemPoolExportToShareableHandle gave no descriptor".into()));
        }
        // SAFETY: the driver just created this descriptor for the caller, who owns it.
        Ok(unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    }

    pub(super) fn pool_import_fd(&self, fd: std::os::fd::BorrowedFd<'_>) -> Result<RawPool> {
        let e = pool_ipc::entries()?;
        let _ctx = self.any_bound()?;
        let mut pool: driver::CUmemoryPool = std::ptr::null_mut();
        let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
        // SAFETY: valid out-pointer; for the POSIX descriptor type the handle
        // argument is the descriptor's value, which the caller keeps open.
        let r = unsafe {
            (e.import_pool)(
                &mut pool,
                raw as isize as *mut std::ffi::c_void,
                pool_ipc::HANDLE_TYPE_POSIX_FD,
                0,
            )
        };
        self.check(r, || "cuMemPoolImportFromShareableHandle".to_string())?;
        lock(&self.driver_pools).insert(pool as u64);
        // The pool's device is the one with read-write access to it.
        let mut device = 0;
        for d in 0..self.devices.len() {
            if self.pool_get_access(RawPool { device: d, handle: pool as u64 }, d).ok() == Some(3) {
                device = d;
                break;
            }
        }
        Ok(RawPool { device, handle: pool as u64 })
    }

    pub(super) fn pool_export_pointer(&self, ptr: DevicePtr) -> Result<[u8; 64]> {
        let e = pool_ipc::entries()?;
        let _ctx = self.any_bound()?;
        let mut data = pool_ipc::CUmemPoolPtrExportData { reserved: [0; 64] };
        // SAFETY: valid out-pointer; the driver validates the pointer.
        let r = unsafe { (e.export_pointer)(&mut data, ptr.0) };
        self.check(r, || format!("cuMemPoolExportPointer({ptr})"))?;
        Ok(data.reserved)
    }

    pub(super) fn pool_import_pointer(&self, pool: RawPool, data: &[u8; 64]) -> Result<DevicePtr> {
        let e = pool_ipc::entries()?;
        let (p, _ctx) = self.driver_pool(pool)?;
        let mut share = pool_ipc::CUmemPoolPtrExportData { reserved: *data };
        let mut ptr: driver::CUdeviceptr = 0;
        // SAFETY: valid pointers and a live (imported) pool; the driver validates the data.
        let r = unsafe { (e.import_pointer)(&mut ptr, p, &mut share) };
        self.check(r, || format!("cuMemPoolImportPointer(pool {:#x})", pool.handle))?;
        Ok(DevicePtr(ptr))
    }

    pub(super) fn pool_pointer_range(&self, ptr: DevicePtr) -> Result<u64> {
        let e = pool_ipc::entries()?;
        let _ctx = self.any_bound()?;
        let (mut base, mut size): (driver::CUdeviceptr, usize) = (0, 0);
        // SAFETY: valid out-pointers; the driver validates the pointer.
        let r = unsafe { (e.address_range)(&mut base, &mut size, ptr.0) };
        self.check(r, || format!("cuMemGetAddressRange({ptr})"))?;
        Ok((base + size as u64).saturating_sub(ptr.0))
    }
}
