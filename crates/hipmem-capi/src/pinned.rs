//! Page-locked host memory: hipHostMalloc, hipHostFree, hipHostRegister,
//! hipHostUnregister, hipHostGetDevicePointer.

use std::ffi::{c_uint, c_void};

use hipmem_rs::Error;
use hipmem_rs::backend::host_memory::RegisterSpan;

use crate::types::*;
use crate::{call, non_null, rt};

/// `hipHostMalloc`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostMalloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hipError_t {
    call(|| {
        non_null(ptr, "hipHostMalloc: ptr")?;
        let p = rt()?.host_malloc(size as u64, flags)?;
        // SAFETY: non-null; points to a writable `void*` (HIP's contract).
        unsafe { *ptr = p as usize as *mut c_void };
        Ok(())
    })
}

/// `hipHostFree`: NULL is fine.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostFree(ptr: *mut c_void) -> hipError_t {
    call(|| rt()?.host_free(ptr as usize as u64))
}

/// `hipHostRegister`: page-locks `sizeBytes` bytes of the caller's memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostRegister(
    hostPtr: *mut c_void,
    sizeBytes: usize,
    flags: c_uint,
) -> hipError_t {
    call(|| {
        if hostPtr.is_null() || sizeBytes == 0 {
            return Err(Error::InvalidValue("hipHostRegister of a null pointer or 0 bytes".into()));
        }
        // SAFETY: HIP's contract for hipHostRegister: the memory stays valid
        // until hipHostUnregister and the device work that used it has completed.
        let span = unsafe { RegisterSpan::new(hostPtr as *mut u8, sizeBytes) };
        rt()?.host_register(span, flags)
    })
}

/// `hipHostUnregister`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostUnregister(hostPtr: *mut c_void) -> hipError_t {
    call(|| rt()?.host_unregister(hostPtr as usize as u64))
}

/// `hipHostGetDevicePointer`: the device address of mapped page-locked memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipHostGetDevicePointer(
    devPtr: *mut *mut c_void,
    hostPtr: *mut c_void,
    flags: c_uint,
) -> hipError_t {
    call(|| {
        non_null(devPtr, "hipHostGetDevicePointer: devPtr")?;
        let p = rt()?.host_get_device_pointer(hostPtr as usize as u64, flags)?;
        // SAFETY: non-null; points to a writable `void*` (HIP's contract).
        unsafe { *devPtr = p.0 as usize as *mut c_void };
        Ok(())
    })
}
