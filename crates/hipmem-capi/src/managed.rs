//! Managed (unified) memory: hipMallocManaged, hipMemPrefetchAsync,
//! hipMemAdvise, hipMemRangeGetAttribute(s), hipStreamAttachMemAsync.
//!
//! hipFree and hipPointerGetAttributes handle managed memory through the
//! runtime (its allocation registry knows managed allocations), so they need
//! nothing here.

use std::ffi::{c_int, c_uint, c_void};

use hipmem_rs::{DevicePtr, Error};

use crate::types::*;
use crate::{call, current_device, handles, non_null, rt};

fn dptr(ptr: *const c_void) -> DevicePtr {
    DevicePtr(ptr as usize as u64)
}

/// `hipMallocManaged`: managed memory for the current device, attached
/// `hipMemAttachGlobal` or `hipMemAttachHost`. Null `dev_ptr`, size 0 or
/// other flags are InvalidValue; an impossible size is OutOfMemory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocManaged(
    dev_ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> hipError_t {
    call(|| {
        non_null(dev_ptr, "hipMallocManaged: dev_ptr")?;
        let p = rt()?.malloc_managed(current_device(), size as u64, flags)?;
        // SAFETY: `dev_ptr` is non-null and, by HIP's contract, points to a writable `void*`.
        unsafe { *dev_ptr = p.0 as usize as *mut c_void };
        Ok(())
    })
}

/// `hipMemPrefetchAsync`: migrates the pages of the range to `device`
/// (hipCpuDeviceId for the host) in `stream`'s order. A destroyed stream is
/// ContextIsDestroyed (HIP's code for this function).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPrefetchAsync(
    dev_ptr: *const c_void,
    count: usize,
    device: c_int,
    stream: hipStream_t,
) -> hipError_t {
    call(|| {
        let rt = rt()?;
        // The stream's own errors are the lookup's (the inner result is the prefetch's).
        handles::with_stream(rt, stream, |s| {
            Ok(rt.mem_prefetch_async(dptr(dev_ptr), count as u64, device, s.raw()))
        })
        .map_err(|e| match e {
            Error::InvalidHandle(m) => Error::ContextIsDestroyed(format!("hipMemPrefetchAsync: {m}")),
            e => e,
        })?
    })
}

/// `hipMemAdvise`: applies `advice` for `device` to the whole pages of the range.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemAdvise(
    dev_ptr: *const c_void,
    count: usize,
    advice: hipMemoryAdvise,
    device: c_int,
) -> hipError_t {
    call(|| rt()?.mem_advise(dptr(dev_ptr), count as u64, advice, device))
}

/// `hipMemRangeGetAttribute`: writes `attribute` of the range into `data`
/// (`data_size` bytes: 4 for the scalar attributes, a multiple of 4 for
/// AccessedBy).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemRangeGetAttribute(
    data: *mut c_void,
    data_size: usize,
    attribute: hipMemRangeAttribute,
    dev_ptr: *const c_void,
    count: usize,
) -> hipError_t {
    call(|| {
        non_null(data, "hipMemRangeGetAttribute: data")?;
        // SAFETY: non-null; by HIP's contract `data` is writable for
        // `data_size` bytes and not otherwise accessed during the call.
        let buf = unsafe { std::slice::from_raw_parts_mut(data.cast::<u8>(), data_size) };
        rt()?.mem_range_get_attribute(Some(buf), attribute, dptr(dev_ptr), count as u64)
    })
}

/// `hipMemRangeGetAttributes`: `num_attributes` attributes of the range,
/// `data[i]` (`data_sizes[i]` bytes) receiving `attributes[i]`. Every
/// argument is checked before any buffer is written.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemRangeGetAttributes(
    data: *mut *mut c_void,
    data_sizes: *mut usize,
    attributes: *mut hipMemRangeAttribute,
    num_attributes: usize,
    dev_ptr: *const c_void,
    count: usize,
) -> hipError_t {
    call(|| {
        non_null(data, "hipMemRangeGetAttributes: data")?;
        non_null(data_sizes, "hipMemRangeGetAttributes: data_sizes")?;
        non_null(attributes, "hipMemRangeGetAttributes: attributes")?;
        if num_attributes == 0 {
            return Err(Error::InvalidValue("hipMemRangeGetAttributes: num_attributes is 0".into()));
        }
        // SAFETY: non-null; by HIP's contract each array holds `num_attributes` elements.
        let (bufs, sizes, attrs) = unsafe {
            (
                std::slice::from_raw_parts(data.cast_const(), num_attributes),
                std::slice::from_raw_parts(data_sizes.cast_const(), num_attributes),
                std::slice::from_raw_parts(attributes.cast_const(), num_attributes),
            )
        };
        // The answers go to scratch buffers first, so that buffers the caller
        // passed twice (or overlapping) are never borrowed mutably twice.
        let mut scratch: Vec<Vec<u8>> = Vec::with_capacity(num_attributes);
        for &n in sizes {
            let mut s = Vec::new();
            s.try_reserve_exact(n).map_err(|_| {
                Error::OutOfMemory(format!("hipMemRangeGetAttributes: no room for a {n}-byte answer"))
            })?;
            s.resize(n, 0u8);
            scratch.push(s);
        }
        let mut views: Vec<Option<&mut [u8]>> = scratch
            .iter_mut()
            .zip(bufs)
            .map(|(s, b)| if b.is_null() { None } else { Some(s.as_mut_slice()) })
            .collect();
        rt()?.mem_range_get_attributes(&mut views, attrs, dptr(dev_ptr), count as u64)?;
        for (s, &b) in scratch.iter().zip(bufs) {
            // SAFETY: `b` is non-null (checked by the call above) and, by
            // HIP's contract, writable for `s.len()` = data_sizes[i] bytes;
            // `s` is this function's own buffer, so they do not overlap.
            unsafe { std::ptr::copy_nonoverlapping(s.as_ptr(), b.cast::<u8>(), s.len()) };
        }
        Ok(())
    })
}

/// `hipStreamAttachMemAsync`: attaches the managed allocation at `dev_ptr`
/// (`length` 0 or its whole size) to `stream` with `flags`, in stream order.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamAttachMemAsync(
    stream: hipStream_t,
    dev_ptr: *mut c_void,
    length: usize,
    flags: c_uint,
) -> hipError_t {
    call(|| {
        let rt = rt()?;
        handles::with_stream(rt, stream, |s| {
            rt.stream_attach_mem_async(s.raw(), dptr(dev_ptr), length as u64, flags)
        })
    })
}
