//! Explicit memory: hipMalloc, hipFree, hipMemcpy(Async), hipMemset(Async),
//! hipMemGetInfo, hipPointerGetAttributes.

use std::ffi::{c_int, c_void};

use hipmem_rs::backend::CopyDirection;
use hipmem_rs::runtime::ResolvedCopy;
use hipmem_rs::{DevicePtr, Error, FillValue, MemcpyKind, Result, Runtime, Stream};

use crate::types::*;
use crate::{call, current_device, handles, non_null, rt};

/// `hipMalloc`: device memory on the current device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMalloc(ptr: *mut *mut c_void, size: usize) -> hipError_t {
    call(|| {
        non_null(ptr, "hipMalloc: ptr")?;
        let p = rt()?.malloc(current_device(), size as u64)?;
        // SAFETY: `ptr` is non-null and, by HIP's contract, points to a writable `void*`.
        unsafe { *ptr = p.0 as usize as *mut c_void };
        Ok(())
    })
}

/// `hipFree`: NULL is fine; synchronizes the device first.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFree(ptr: *mut c_void) -> hipError_t {
    call(|| rt()?.free(DevicePtr(ptr as usize as u64)))
}

/// Carries out a synchronous copy classified (and range-checked) by
/// [`Runtime::resolve_copy`]: the backend runs it without checking again.
///
/// # Safety
/// Host sides must be valid for `size` bytes (HIP's contract).
unsafe fn copy_sync(rt: &Runtime, dst: u64, src: u64, size: usize, how: ResolvedCopy) -> Result<()> {
    match how {
        ResolvedCopy::Nothing => Ok(()),
        ResolvedCopy::HostToHost => {
            // SAFETY: both sides are host memory the caller promises is valid
            // for `size` bytes; `copy` allows them to overlap.
            unsafe { std::ptr::copy(src as usize as *const u8, dst as usize as *mut u8, size) };
            Ok(())
        }
        ResolvedCopy::Backend(CopyDirection::HostToDevice) => {
            // SAFETY: `src` is host memory the caller promises is valid for
            // `size` bytes for the duration of this synchronous call.
            let src = unsafe { std::slice::from_raw_parts(src as usize as *const u8, size) };
            rt.backend().copy_host_to_device(DevicePtr(dst), src)
        }
        ResolvedCopy::Backend(CopyDirection::DeviceToHost) => {
            // SAFETY: `dst` is host memory the caller promises is valid and
            // unaliased for `size` bytes for the duration of this call.
            let dst = unsafe { std::slice::from_raw_parts_mut(dst as usize as *mut u8, size) };
            rt.backend().copy_device_to_host(dst, DevicePtr(src))
        }
        ResolvedCopy::Backend(CopyDirection::DeviceToDevice) => {
            rt.backend().copy_device_to_device(DevicePtr(dst), DevicePtr(src), size as u64)
        }
    }
}

/// `hipMemcpy`: synchronous for the host. Size 0 succeeds before any check.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpy(
    dst: *mut c_void,
    src: *const c_void,
    sizeBytes: usize,
    kind: hipMemcpyKind,
) -> hipError_t {
    call(|| {
        if sizeBytes == 0 {
            return Ok(());
        }
        let kind = MemcpyKind::from_raw(kind)?;
        let rt = rt()?;
        let (d, s) = (dst as usize as u64, src as usize as u64);
        let how = rt.resolve_copy(d, s, sizeBytes as u64, kind)?;
        // SAFETY: HIP's contract: host sides are valid for `sizeBytes` bytes.
        unsafe { copy_sync(rt, d, s, sizeBytes, how) }
    })
}

/// `hipMemcpyAsync`. Device-to-device copies, and copies from or to
/// page-locked memory, are queued on `stream` and return at once. A copy from
/// or to ordinary (pageable) host memory cannot be left running: HIP does not
/// promise that such memory outlives the call, so it is ordered after the
/// stream's work (the stream is synchronized) and done before returning.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyAsync(
    dst: *mut c_void,
    src: *const c_void,
    sizeBytes: usize,
    kind: hipMemcpyKind,
    stream: hipStream_t,
) -> hipError_t {
    call(|| {
        if sizeBytes == 0 {
            return Ok(());
        }
        let kind = MemcpyKind::from_raw(kind)?;
        let rt = rt()?;
        handles::with_stream(rt, stream, |stream| memcpy_async(rt, dst, src, sizeBytes, kind, stream))
    })
}

/// The body of `hipMemcpyAsync` once the stream is known.
fn memcpy_async(
    rt: &Runtime,
    dst: *mut c_void,
    src: *const c_void,
    sizeBytes: usize,
    kind: MemcpyKind,
    stream: &Stream,
) -> Result<()> {
    {
        let (d, s, n) = (dst as usize as u64, src as usize as u64, sizeBytes as u64);
        // Both ranges are checked here; the copies below go straight to the
        // backend (which checks its own tables of page-locked ranges).
        let how = rt.resolve_copy(d, s, n, kind)?;
        let page_locked = || {
            rt.backend().page_locked_memory().ok_or_else(|| {
                Error::NotSupported(format!(
                    "the {} backend has no page-locked host memory",
                    rt.backend_kind()
                ))
            })
        };
        match how {
            ResolvedCopy::Backend(CopyDirection::DeviceToDevice) => {
                rt.backend().copy_device_to_device_async(DevicePtr(d), DevicePtr(s), n, stream.raw())
            }
            ResolvedCopy::Backend(CopyDirection::HostToDevice) if rt.page_locked_range(s, n).is_some() => {
                page_locked()?.copy_to_device_async(DevicePtr(d), s, n, stream.raw())
            }
            ResolvedCopy::Backend(CopyDirection::DeviceToHost) if rt.page_locked_range(d, n).is_some() => {
                page_locked()?.copy_from_device_async(d, DevicePtr(s), n, stream.raw())
            }
            ResolvedCopy::Nothing => Ok(()),
            how => {
                stream.synchronize()?;
                // SAFETY: HIP's contract: host sides are valid for `sizeBytes`
                // bytes during the call; the copy is done before it returns.
                unsafe { copy_sync(rt, d, s, sizeBytes, how) }
            }
        }
    }
}

/// `hipMemset`: `sizeBytes` bytes of `value` (its low byte), synchronously.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemset(dst: *mut c_void, value: c_int, sizeBytes: usize) -> hipError_t {
    call(|| rt()?.memset(DevicePtr(dst as usize as u64), FillValue::U8(value as u8), sizeBytes as u64))
}

/// `hipMemsetAsync`: queued on `stream`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetAsync(
    dst: *mut c_void,
    value: c_int,
    sizeBytes: usize,
    stream: hipStream_t,
) -> hipError_t {
    call(|| {
        if sizeBytes == 0 {
            return Ok(());
        }
        non_null(dst, "hipMemsetAsync: dst")?;
        let rt = rt()?;
        handles::with_stream(rt, stream, |s| {
            rt.memset_async(
                DevicePtr(dst as usize as u64),
                FillValue::U8(value as u8),
                sizeBytes as u64,
                s.raw(),
            )
        })
    })
}

/// `hipMemGetInfo` of the current device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetInfo(free: *mut usize, total: *mut usize) -> hipError_t {
    call(|| {
        non_null(free, "hipMemGetInfo: free")?;
        non_null(total, "hipMemGetInfo: total")?;
        let info = rt()?.mem_get_info(current_device())?;
        // SAFETY: both pointers are non-null and point to writable size_t (HIP's contract).
        unsafe {
            *free = info.free as usize;
            *total = info.total as usize;
        }
        Ok(())
    })
}

/// `hipPointerGetAttributes`: unknown memory reads as unregistered.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipPointerGetAttributes(
    attributes: *mut hipPointerAttribute_t,
    ptr: *const c_void,
) -> hipError_t {
    call(|| {
        non_null(attributes, "hipPointerGetAttributes: attributes")?;
        if ptr.is_null() {
            return Err(Error::InvalidValue("hipPointerGetAttributes of a null pointer".into()));
        }
        let a = rt()?.pointer_attributes(ptr as usize as u64)?;
        let out = hipPointerAttribute_t {
            type_: a.memory_type.raw(),
            device: a.device,
            devicePointer: a.device_pointer.0 as usize as *mut c_void,
            hostPointer: a.host_pointer.unwrap_or(0) as usize as *mut c_void,
            isManaged: a.is_managed as c_int,
            allocationFlags: a.allocation_flags,
        };
        // SAFETY: non-null, points to a writable hipPointerAttribute_t (HIP's contract).
        unsafe { attributes.write(out) };
        Ok(())
    })
}
