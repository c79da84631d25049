//! Virtual memory management: hipMemCreate, hipMemAddressReserve, hipMemMap,
//! hipMemSetAccess, ... on the runtime's VMM table. A
//! `hipMemGenericAllocationHandle_t` is hipmem's id of the physical
//! allocation; the runtime checks it on every call.

use std::ffi::{c_int, c_ulonglong, c_void};

use hipmem_rs::vmm::GranularityOption;
use hipmem_rs::{AccessDesc, AllocationProp, DevicePtr, Error, MemLocation};

use crate::types::*;
use crate::{call, non_null, rt};

fn location(loc: &hipMemLocation) -> MemLocation {
    MemLocation { location_type: loc.type_ as u32, id: loc.id }
}

fn allocation_prop(prop: &hipMemAllocationProp) -> AllocationProp {
    AllocationProp {
        alloc_type: prop.type_ as u32,
        requested_handle_types: prop.requestedHandleType as u32,
        location: location(&prop.location),
    }
}

fn handle_id(handle: hipMemGenericAllocationHandle_t) -> u64 {
    handle as usize as u64
}

fn dptr(ptr: *const c_void) -> DevicePtr {
    DevicePtr(ptr as usize as u64)
}

/// `hipMemGetAllocationGranularity`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const hipMemAllocationProp,
    option: hipMemAllocationGranularity_flags,
) -> hipError_t {
    call(|| {
        non_null(granularity, "hipMemGetAllocationGranularity: granularity")?;
        non_null(prop, "hipMemGetAllocationGranularity: prop")?;
        let option = u32::try_from(option)
            .map_err(|_| Error::InvalidValue(format!("{option} is not a granularity option")))
            .and_then(GranularityOption::from_raw)?;
        // SAFETY: non-null; points to a readable hipMemAllocationProp (HIP's contract).
        let prop = allocation_prop(unsafe { &*prop });
        let g = rt()?.allocation_granularity(&prop, option)?;
        // SAFETY: non-null; points to a writable size_t (HIP's contract).
        unsafe { *granularity = g as usize };
        Ok(())
    })
}

/// `hipMemCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemCreate(
    handle: *mut hipMemGenericAllocationHandle_t,
    size: usize,
    prop: *const hipMemAllocationProp,
    flags: c_ulonglong,
) -> hipError_t {
    call(|| {
        non_null(handle, "hipMemCreate: handle")?;
        non_null(prop, "hipMemCreate: prop")?;
        // SAFETY: non-null; points to a readable hipMemAllocationProp (HIP's contract).
        let prop = allocation_prop(unsafe { &*prop });
        let h = rt()?.mem_create(size as u64, &prop, flags)?;
        // SAFETY: non-null; points to a writable handle (HIP's contract).
        unsafe { *handle = h as usize as hipMemGenericAllocationHandle_t };
        Ok(())
    })
}

/// `hipMemAddressReserve`: `addr` is a hint; check where it landed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemAddressReserve(
    ptr: *mut *mut c_void,
    size: usize,
    alignment: usize,
    addr: *mut c_void,
    flags: c_ulonglong,
) -> hipError_t {
    call(|| {
        non_null(ptr, "hipMemAddressReserve: ptr")?;
        let p = rt()?.address_reserve(size as u64, alignment as u64, dptr(addr), flags)?;
        // SAFETY: non-null; points to a writable `void*` (HIP's contract).
        unsafe { *ptr = p.0 as usize as *mut c_void };
        Ok(())
    })
}

/// `hipMemMap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemMap(
    ptr: *mut c_void,
    size: usize,
    offset: usize,
    handle: hipMemGenericAllocationHandle_t,
    flags: c_ulonglong,
) -> hipError_t {
    call(|| rt()?.mem_map(dptr(ptr), size as u64, offset as u64, handle_id(handle), flags))
}

/// `hipMemSetAccess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemSetAccess(
    ptr: *mut c_void,
    size: usize,
    desc: *const hipMemAccessDesc,
    count: usize,
) -> hipError_t {
    call(|| {
        non_null(desc, "hipMemSetAccess: desc")?;
        // SAFETY: non-null; HIP's contract: `count` readable descriptors.
        let descs = unsafe { std::slice::from_raw_parts(desc, count) };
        let descs: Vec<AccessDesc> = descs
            .iter()
            .map(|d| AccessDesc { location: location(&d.location), flags: d.flags as u32 })
            .collect();
        rt()?.mem_set_access(dptr(ptr), size as u64, &descs)
    })
}

/// `hipMemGetAccess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetAccess(
    flags: *mut c_ulonglong,
    location_: *const hipMemLocation,
    ptr: *mut c_void,
) -> hipError_t {
    call(|| {
        non_null(flags, "hipMemGetAccess: flags")?;
        non_null(location_, "hipMemGetAccess: location")?;
        // SAFETY: non-null; points to a readable hipMemLocation (HIP's contract).
        let loc = location(unsafe { &*location_ });
        let access = rt()?.mem_get_access(&loc, dptr(ptr))?;
        // SAFETY: non-null; points to a writable unsigned long long (HIP's contract).
        unsafe { *flags = access.raw() as c_ulonglong };
        Ok(())
    })
}

/// `hipMemUnmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemUnmap(ptr: *mut c_void, size: usize) -> hipError_t {
    call(|| rt()?.mem_unmap(dptr(ptr), size as u64))
}

/// `hipMemRelease`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemRelease(handle: hipMemGenericAllocationHandle_t) -> hipError_t {
    call(|| rt()?.mem_release(handle_id(handle)))
}

/// `hipMemAddressFree`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemAddressFree(devPtr: *mut c_void, size: usize) -> hipError_t {
    call(|| rt()?.address_free(dptr(devPtr), size as u64))
}

/// `hipMemRetainAllocationHandle`: one hipMemRelease per retain.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemRetainAllocationHandle(
    handle: *mut hipMemGenericAllocationHandle_t,
    addr: *mut c_void,
) -> hipError_t {
    call(|| {
        non_null(handle, "hipMemRetainAllocationHandle: handle")?;
        let h = rt()?.retain_allocation_handle(dptr(addr))?;
        // SAFETY: non-null; points to a writable handle (HIP's contract).
        unsafe { *handle = h as usize as hipMemGenericAllocationHandle_t };
        Ok(())
    })
}

/// `hipMemGetAllocationPropertiesFromHandle`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetAllocationPropertiesFromHandle(
    prop: *mut hipMemAllocationProp,
    handle: hipMemGenericAllocationHandle_t,
) -> hipError_t {
    call(|| {
        non_null(prop, "hipMemGetAllocationPropertiesFromHandle: prop")?;
        let p = rt()?.allocation_properties(handle_id(handle))?;
        let out = hipMemAllocationProp {
            type_: p.alloc_type as c_int,
            requestedHandleType: p.requested_handle_types as c_int,
            location: hipMemLocation { type_: p.location.location_type as c_int, id: p.location.id },
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: hipMemAllocationPropFlags::default(),
        };
        // SAFETY: non-null; points to a writable hipMemAllocationProp (HIP's contract).
        unsafe { prop.write(out) };
        Ok(())
    })
}

/// `hipMemExportToShareableHandle`: for `hipMemHandleTypePosixFileDescriptor`,
/// writes a new file descriptor (an `int`) to `*shareableHandle`; the caller
/// owns and closes it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemExportToShareableHandle(
    shareableHandle: *mut c_void,
    handle: hipMemGenericAllocationHandle_t,
    handleType: hipMemAllocationHandleType,
    flags: c_ulonglong,
) -> hipError_t {
    call(|| {
        use std::os::fd::IntoRawFd;
        non_null(shareableHandle, "hipMemExportToShareableHandle: shareableHandle")?;
        let fd = rt()?.export_shareable_handle(handle_id(handle), handleType as u32, flags)?;
        // SAFETY: non-null; for POSIX descriptors HIP's contract is a writable `int`.
        unsafe { (shareableHandle as *mut c_int).write_unaligned(fd.into_raw_fd()) };
        Ok(())
    })
}

/// `hipMemImportFromShareableHandle`: for `hipMemHandleTypePosixFileDescriptor`,
/// `osHandle` is the descriptor itself cast to a pointer
/// (`(void*)(uintptr_t)fd`, CUDA's convention); it stays the caller's.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemImportFromShareableHandle(
    handle: *mut hipMemGenericAllocationHandle_t,
    osHandle: *mut c_void,
    shHandleType: hipMemAllocationHandleType,
) -> hipError_t {
    call(|| {
        use std::os::fd::BorrowedFd;
        non_null(handle, "hipMemImportFromShareableHandle: handle")?;
        let fd = c_int::try_from(osHandle as usize)
            .ok()
            .filter(|fd| *fd >= 0)
            .ok_or_else(|| Error::InvalidValue(format!("{osHandle:p} is not a file descriptor")))?;
        // SAFETY: HIP's contract: `osHandle` is an open descriptor of the
        // caller's that stays open for the duration of this call.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let h = rt()?.import_shareable_handle(fd, shHandleType as u32)?;
        // SAFETY: non-null; points to a writable handle (HIP's contract).
        unsafe { *handle = h as usize as hipMemGenericAllocationHandle_t };
        Ok(())
    })
}
