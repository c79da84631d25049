//! Virtual memory management on the CUDA driver: `cuMemCreate`,
//! `cuMemAddressReserve`, `cuMemMap`, `cuMemSetAccess`, ... loaded on first
//! use into a table of their own (a driver without them leaves the rest of
//! the backend working).

use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::OnceLock;

use super::CudaBackend;
use super::driver::{self, CUdeviceptr, CUmemAccessDesc, CUmemAllocationProp, CUmemLocation, CUresult};
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::{HANDLE_TYPE_POSIX_FD, PhysicalProperties, VirtualMemory};
use crate::error::{Error, Result};

/// `CUmemGenericAllocationHandle`.
type Handle = c_ulonglong;

/// The VMM entry points (signatures as in cuda.h of CUDA 12 and 13).
#[allow(non_snake_case)]
struct VmmDriver {
    cuMemCreate:
        unsafe extern "C" fn(*mut Handle, usize, *const CUmemAllocationProp, c_ulonglong) -> CUresult,
    cuMemRelease: unsafe extern "C" fn(Handle) -> CUresult,
    cuMemAddressReserve:
        unsafe extern "C" fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, c_ulonglong) -> CUresult,
    cuMemAddressFree: unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult,
    cuMemMap: unsafe extern "C" fn(CUdeviceptr, usize, usize, Handle, c_ulonglong) -> CUresult,
    cuMemUnmap: unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult,
    cuMemSetAccess: unsafe extern "C" fn(CUdeviceptr, usize, *const CUmemAccessDesc, usize) -> CUresult,
    cuMemGetAccess: unsafe extern "C" fn(*mut c_ulonglong, *const CUmemLocation, CUdeviceptr) -> CUresult,
    cuMemRetainAllocationHandle: unsafe extern "C" fn(*mut Handle, *mut c_void) -> CUresult,
    cuMemGetAllocationPropertiesFromHandle:
        unsafe extern "C" fn(*mut CUmemAllocationProp, Handle) -> CUresult,
    cuMemExportToShareableHandle: unsafe extern "C" fn(*mut c_void, Handle, c_uint, c_ulonglong) -> CUresult,
    cuMemImportFromShareableHandle: unsafe extern "C" fn(*mut Handle, *mut c_void, c_uint) -> CUresult,
}

static VMM: OnceLock<Result<VmmDriver>> = OnceLock::new();

fn load() -> Result<VmmDriver> {
    macro_rules! load {
        ($name:literal) => {
            // SAFETY: the field this initializes is declared with the
            // signature cuda.h gives for this symbol.
            unsafe { driver::symbol($name)? }
        };
    }
    Ok(VmmDriver {
        cuMemCreate: load!("cuMemCreate"),
        cuMemRelease: load!("cuMemRelease"),
        cuMemAddressReserve: load!("cuMemAddressReserve"),
        cuMemAddressFree: load!("cuMemAddressFree"),
        cuMemMap: load!("cuMemMap"),
        cuMemUnmap: load!("cuMemUnmap"),
        cuMemSetAccess: load!("cuMemSetAccess"),
        cuMemGetAccess: load!("cuMemGetAccess"),
        cuMemRetainAllocationHandle: load!("cuMemRetainAllocationHandle"),
        cuMemGetAllocationPropertiesFromHandle: load!("cuMemGetAllocationPropertiesFromHandle"),
        cuMemExportToShareableHandle: load!("cuMemExportToShareableHandle"),
        cuMemImportFromShareableHandle: load!("cuMemImportFromShareableHandle"),
    })
}

impl CudaBackend {
    fn vmm(&self) -> Result<&'static VmmDriver> {
        VMM.get_or_init(load).as_ref().map_err(|e| e.clone())
    }

    /// Some device's context made current (for calls that name no device).
    fn any_bound(&self) -> Result<()> {
        self.bound(0).map(|_| ())
    }

    fn ordinal_of(&self, cu: c_int) -> usize {
        self.devices.iter().position(|d| d.cu == cu).unwrap_or(cu.max(0) as usize)
    }

    fn usize_of(value: u64, what: &str) -> Result<usize> {
        usize::try_from(value).map_err(|_| Error::InvalidValue(format!("{what}: {value} does not fit usize")))
    }
}

impl VirtualMemory for CudaBackend {
    fn granularity(&self, device: usize, recommended: bool) -> Result<u64> {
        let dev = self.device(device)?;
        let prop = CUmemAllocationProp::pinned_on_device(dev.cu);
        let option = if recommended {
            driver::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
        } else {
            driver::CU_MEM_ALLOC_GRANULARITY_MINIMUM
        };
        super::result::allocation_granularity(self.driver, &prop, option)
    }

    fn mem_create(&self, device: usize, size: u64, handle_types: u32) -> Result<u64> {
        let v = self.vmm()?;
        let dev = self.bound(device)?;
        let mut prop = CUmemAllocationProp::pinned_on_device(dev.cu);
        prop.requestedHandleTypes = handle_types;
        let mut handle: Handle = 0;
        let len = Self::usize_of(size, "cuMemCreate size")?;
        // SAFETY: valid out-pointer and a fully initialized properties struct.
        let r = unsafe { (v.cuMemCreate)(&mut handle, len, &prop, 0) };
        self.check(r, || {
            format!("cuMemCreate({size} bytes on device {device}, handle types {handle_types:#x})")
        })?;
        Ok(handle)
    }

    fn mem_release(&self, handle: u64) -> Result<()> {
        let v = self.vmm()?;
        self.any_bound()?;
        // SAFETY: the driver validates the handle value (the runtime passes
        // only handles it knows to be live).
        let r = unsafe { (v.cuMemRelease)(handle) };
        self.check(r, || format!("cuMemRelease({handle:#x})"))
    }

    fn address_reserve(&self, size: u64, alignment: u64, hint: DevicePtr) -> Result<DevicePtr> {
        let v = self.vmm()?;
        self.any_bound()?;
        let mut ptr: CUdeviceptr = 0;
        let len = Self::usize_of(size, "cuMemAddressReserve size")?;
        let align = Self::usize_of(alignment, "cuMemAddressReserve alignment")?;
        // SAFETY: valid out-pointer; the hint is only a number to the driver.
        let r = unsafe { (v.cuMemAddressReserve)(&mut ptr, len, align, hint.0, 0) };
        self.check(r, || format!("cuMemAddressReserve({size} bytes, alignment {alignment}, hint {hint})"))?;
        Ok(DevicePtr(ptr))
    }

    fn address_free(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let v = self.vmm()?;
        self.any_bound()?;
        let len = Self::usize_of(size, "cuMemAddressFree size")?;
        // SAFETY: plain numbers; the driver validates the range.
        let r = unsafe { (v.cuMemAddressFree)(ptr.0, len) };
        self.check(r, || format!("cuMemAddressFree({ptr}, {size} bytes)"))
    }

    fn mem_map(&self, ptr: DevicePtr, size: u64, offset: u64, handle: u64) -> Result<()> {
        let v = self.vmm()?;
        self.any_bound()?;
        let len = Self::usize_of(size, "cuMemMap size")?;
        let off = Self::usize_of(offset, "cuMemMap offset")?;
        // SAFETY: plain numbers; the driver validates the range and handle.
        let r = unsafe { (v.cuMemMap)(ptr.0, len, off, handle, 0) };
        self.check(r, || format!("cuMemMap({ptr}, {size} bytes, offset {offset}, handle {handle:#x})"))
    }

    fn mem_unmap(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let v = self.vmm()?;
        self.any_bound()?;
        let len = Self::usize_of(size, "cuMemUnmap size")?;
        // SAFETY: plain numbers; the driver validates the range. Device work
        // still using it would fault on the device, not in this process.
        let r = unsafe { (v.cuMemUnmap)(ptr.0, len) };
        self.check(r, || format!("cuMemUnmap({ptr}, {size} bytes)"))
    }

    fn mem_set_access(&self, ptr: DevicePtr, size: u64, device: usize, flags: u32) -> Result<()> {
        let v = self.vmm()?;
        let dev = self.bound(device)?;
        let desc = CUmemAccessDesc {
            location: CUmemLocation { type_: driver::CU_MEM_LOCATION_TYPE_DEVICE, id: dev.cu },
            flags,
        };
        let len = Self::usize_of(size, "cuMemSetAccess size")?;
        // SAFETY: one valid, fully initialized descriptor.
        let r = unsafe { (v.cuMemSetAccess)(ptr.0, len, &desc, 1) };
        self.check(r, || format!("cuMemSetAccess({ptr}, {size} bytes, device {device}, flags {flags})"))
    }

    fn mem_get_access(&self, ptr: DevicePtr, device: usize) -> Result<u32> {
        let v = self.vmm()?;
        let dev = self.bound(device)?;
        let location = CUmemLocation { type_: driver::CU_MEM_LOCATION_TYPE_DEVICE, id: dev.cu };
        let mut flags: c_ulonglong = 0;
        // SAFETY: valid out-pointer and location.
        let r = unsafe { (v.cuMemGetAccess)(&mut flags, &location, ptr.0) };
        self.check(r, || format!("cuMemGetAccess({ptr}, device {device})"))?;
        Ok(flags as u32)
    }

    fn retain_allocation_handle(&self, ptr: DevicePtr) -> Result<u64> {
        let v = self.vmm()?;
        self.any_bound()?;
        let mut handle: Handle = 0;
        // SAFETY: valid out-pointer; the address is only looked up by the driver.
        let r = unsafe { (v.cuMemRetainAllocationHandle)(&mut handle, ptr.0 as *mut c_void) };
        self.check(r, || format!("cuMemRetainAllocationHandle({ptr})"))?;
        Ok(handle)
    }

    fn allocation_properties(&self, handle: u64) -> Result<PhysicalProperties> {
        let v = self.vmm()?;
        self.any_bound()?;
        let mut prop = CUmemAllocationProp::pinned_on_device(0);
        // SAFETY: valid out-pointer to a properties struct of cuda.h's layout.
        let r = unsafe { (v.cuMemGetAllocationPropertiesFromHandle)(&mut prop, handle) };
        self.check(r, || format!("cuMemGetAllocationPropertiesFromHandle({handle:#x})"))?;
        // The driver does not report the size; the runtime keeps it.
        Ok(PhysicalProperties {
            device: self.ordinal_of(prop.location.id),
            size: 0,
            handle_types: prop.requestedHandleTypes,
        })
    }

    fn export_to_fd(&self, handle: u64) -> Result<OwnedFd> {
        let v = self.vmm()?;
        self.any_bound()?;
        let mut fd: c_int = -1;
        // SAFETY: for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR the driver
        // writes an int through the pointer.
        let r = unsafe {
            (v.cuMemExportToShareableHandle)((&mut fd as *mut c_int).cast(), handle, HANDLE_TYPE_POSIX_FD, 0)
        };
        self.check(r, || format!("cuMemExportToShareableHandle({handle:#x}, POSIX fd)"))?;
        if fd < 0 {
            return Err(Error::Unknown(format!(
                "cuMemExportToShareableHandle({handle:#x}) gave no descriptor"
            )));
        }
        // SAFETY: the driver created this descriptor for the caller to own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn import_from_fd(&self, fd: BorrowedFd<'_>) -> Result<u64> {
        let v = self.vmm()?;
        self.any_bound()?;
        let mut handle: Handle = 0;
        // SAFETY: for POSIX descriptors the driver takes the descriptor's
        // value cast to a pointer, and does not take ownership of it.
        let r = unsafe {
            (v.cuMemImportFromShareableHandle)(
                &mut handle,
                fd.as_raw_fd() as isize as *mut c_void,
                HANDLE_TYPE_POSIX_FD,
            )
        };
        self.check(r, || "cuMemImportFromShareableHandle(POSIX fd)".to_string())?;
        Ok(handle)
    }
}
