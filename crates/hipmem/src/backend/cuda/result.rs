//! Thin wrappers over the driver table: each calls one entry point and turns
//! its `CUresult` into a [`Result`] whose message names the call, its
//! arguments, and the driver's own error name and text.
//!
//! Functions that only pass plain values are safe. Those that take a driver
//! handle (context, stream, event, module, function) are `unsafe`: the handle
//! must be live (created by this driver and not destroyed).

use std::ffi::{CStr, c_char, c_int, c_void};

use super::driver::*;
use crate::error::{Error, Result};

/// Maps a `CUresult` error code onto hipmem's error enum with `message`.
pub fn error_from_code(code: CUresult, message: String) -> Error {
    match code {
        CUDA_ERROR_INVALID_VALUE => Error::InvalidValue(message),
        CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory(message),
        CUDA_ERROR_NOT_INITIALIZED | CUDA_ERROR_DEINITIALIZED => Error::NotInitialized(message),
        CUDA_ERROR_INVALID_DEVICE => Error::InvalidDevice(message),
        CUDA_ERROR_INVALID_HANDLE => Error::InvalidHandle(message),
        CUDA_ERROR_NOT_READY => Error::NotReady(message),
        CUDA_ERROR_CONTEXT_IS_DESTROYED => Error::ContextIsDestroyed(message),
        CUDA_ERROR_NOT_SUPPORTED => Error::NotSupported(message),
        _ => Error::Unknown(message),
    }
}

/// Formats the message of a failed call: `what: NAME: text`.
pub fn error_message(what: &str, code: CUresult, name: Option<&str>, text: Option<&str>) -> String {
    let name = name.map(str::to_owned).unwrap_or_else(|| format!("CUresult {code}"));
    match text {
        Some(text) => format!("{what}: {name}: {text}"),
        None => format!("{what}: {name}"),
    }
}

fn static_str(
    f: unsafe extern "C" fn(CUresult, *mut *const c_char) -> CUresult,
    code: CUresult,
) -> Option<String> {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: `p` is a valid out-pointer; the driver stores a pointer to a
    // static NUL-terminated string, or fails for an unknown code.
    let r = unsafe { f(code, &mut p) };
    if r != CUDA_SUCCESS || p.is_null() {
        return None;
    }
    // SAFETY: on success `p` points to a static NUL-terminated C string.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// `cuGetErrorName`, or None for a code the driver does not know.
pub fn error_name(d: &Driver, code: CUresult) -> Option<String> {
    static_str(d.cuGetErrorName, code)
}

/// `cuGetErrorString`, or None for a code the driver does not know.
pub fn error_string(d: &Driver, code: CUresult) -> Option<String> {
    static_str(d.cuGetErrorString, code)
}

/// Ok for `CUDA_SUCCESS`; otherwise the mapped error, described by `what()`.
pub fn check(d: &Driver, code: CUresult, what: impl FnOnce() -> String) -> Result<()> {
    if code == CUDA_SUCCESS {
        return Ok(());
    }
    let message =
        error_message(&what(), code, error_name(d, code).as_deref(), error_string(d, code).as_deref());
    Err(error_from_code(code, message))
}

/// Like [`check`], but `CUDA_ERROR_NOT_READY` is `Ok(false)` and success `Ok(true)`.
pub fn check_ready(d: &Driver, code: CUresult, what: impl FnOnce() -> String) -> Result<bool> {
    if code == CUDA_ERROR_NOT_READY {
        return Ok(false);
    }
    check(d, code, what).map(|()| true)
}

// ---- initialization and devices ------------------------------------------------------

/// `cuInit(0)`.
pub fn init(d: &Driver) -> Result<()> {
    // SAFETY: cuInit takes a flags value (must be 0) and has no other preconditions.
    let r = unsafe { (d.cuInit)(0) };
    check(d, r, || "cuInit(0)".into())
}

/// `cuDriverGetVersion`: e.g. 13000 for CUDA 13.0.
pub fn driver_version(d: &Driver) -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer.
    let r = unsafe { (d.cuDriverGetVersion)(&mut v) };
    check(d, r, || "cuDriverGetVersion".into())?;
    Ok(v)
}

/// `cuDeviceGetCount`.
pub fn device_count(d: &Driver) -> Result<i32> {
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer.
    let r = unsafe { (d.cuDeviceGetCount)(&mut n) };
    check(d, r, || "cuDeviceGetCount".into())?;
    Ok(n)
}

/// `cuDeviceGet(ordinal)`.
pub fn device_get(d: &Driver, ordinal: i32) -> Result<CUdevice> {
    let mut dev: CUdevice = 0;
    // SAFETY: `dev` is a valid out-pointer; the driver validates the ordinal.
    let r = unsafe { (d.cuDeviceGet)(&mut dev, ordinal) };
    check(d, r, || format!("cuDeviceGet({ordinal})"))?;
    Ok(dev)
}

/// `cuDeviceGetName`.
pub fn device_name(d: &Driver, dev: CUdevice) -> Result<String> {
    let mut buf = [0 as c_char; 256];
    // SAFETY: `buf` is writable for the length passed; the driver NUL-terminates within it.
    let r = unsafe { (d.cuDeviceGetName)(buf.as_mut_ptr(), buf.len() as c_int, dev) };
    check(d, r, || format!("cuDeviceGetName(device {dev})"))?;
    let last = buf.len() - 1;
    buf[last] = 0;
    // SAFETY: `buf` is NUL-terminated (forced above) and lives for this call.
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned())
}

/// `cuDeviceTotalMem_v2`.
pub fn device_total_mem(d: &Driver, dev: CUdevice) -> Result<u64> {
    let mut bytes = 0usize;
    // SAFETY: `bytes` is a valid out-pointer.
    let r = unsafe { (d.cuDeviceTotalMem_v2)(&mut bytes, dev) };
    check(d, r, || format!("cuDeviceTotalMem_v2(device {dev})"))?;
    Ok(bytes as u64)
}

/// `cuDeviceGetAttribute`.
pub fn device_attribute(d: &Driver, dev: CUdevice, attribute: c_int) -> Result<i32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a valid out-pointer; the driver validates the attribute.
    let r = unsafe { (d.cuDeviceGetAttribute)(&mut v, attribute, dev) };
    check(d, r, || format!("cuDeviceGetAttribute({attribute}) on device {dev}"))?;
    Ok(v)
}

/// `cuMemGetAllocationGranularity` for `prop` and `option`.
pub fn allocation_granularity(
    d: &Driver,
    prop: &CUmemAllocationProp,
    option: CUmemAllocationGranularity_flags,
) -> Result<u64> {
    let mut g = 0usize;
    // SAFETY: `g` is a valid out-pointer and `prop` a valid, fully initialized struct.
    let r = unsafe { (d.cuMemGetAllocationGranularity)(&mut g, prop, option) };
    check(d, r, || format!("cuMemGetAllocationGranularity(option {option}) on device {}", prop.location.id))?;
    Ok(g as u64)
}

// ---- contexts ------------------------------------------------------------------------

/// `cuDevicePrimaryCtxRetain`: the device's primary context, retained once more.
pub fn primary_ctx_retain(d: &Driver, dev: CUdevice) -> Result<CUcontext> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer.
    let r = unsafe { (d.cuDevicePrimaryCtxRetain)(&mut ctx, dev) };
    check(d, r, || format!("cuDevicePrimaryCtxRetain(device {dev})"))?;
    Ok(ctx)
}

/// `cuDevicePrimaryCtxRelease_v2`.
///
/// # Safety
/// Balances one earlier [`primary_ctx_retain`] of `dev`; nothing may use the
/// context through that reference afterwards.
pub unsafe fn primary_ctx_release(d: &Driver, dev: CUdevice) -> Result<()> {
    // SAFETY: the caller owns one retain of the primary context of `dev`.
    let r = unsafe { (d.cuDevicePrimaryCtxRelease_v2)(dev) };
    check(d, r, || format!("cuDevicePrimaryCtxRelease_v2(device {dev})"))
}

/// `cuCtxGetCurrent`: the calling thread's current context (null: none).
pub fn ctx_get_current(d: &Driver) -> Result<CUcontext> {
    let mut ctx: CUcontext = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer.
    let r = unsafe { (d.cuCtxGetCurrent)(&mut ctx) };
    check(d, r, || "cuCtxGetCurrent".into())?;
    Ok(ctx)
}

/// `cuCtxGetDevice`: the device of the calling thread's current context
/// (an error where the thread has none).
pub fn ctx_get_device(d: &Driver) -> Result<CUdevice> {
    let mut dev: CUdevice = 0;
    // SAFETY: `dev` is a valid out-pointer.
    let r = unsafe { (d.cuCtxGetDevice)(&mut dev) };
    check(d, r, || "cuCtxGetDevice".into())?;
    Ok(dev)
}

/// `cuCtxSetCurrent`.
///
/// # Safety
/// `ctx` must be a live context (or null).
pub unsafe fn ctx_set_current(d: &Driver, ctx: CUcontext) -> Result<()> {
    // SAFETY: the caller guarantees `ctx` is live.
    let r = unsafe { (d.cuCtxSetCurrent)(ctx) };
    check(d, r, || format!("cuCtxSetCurrent({ctx:p})"))
}

/// Waits for all work of `ctx` (`cuCtxSynchronize_v2(ctx)`), or with the older
/// driver entry point, of the calling thread's current context, which the
/// caller must have made `ctx`.
///
/// # Safety
/// `ctx` must be live and, for the older entry point, current on this thread.
pub unsafe fn ctx_synchronize(d: &Driver, ctx: CUcontext, what: impl FnOnce() -> String) -> Result<()> {
    let r = match d.cuCtxSynchronize {
        // SAFETY: the caller guarantees `ctx` is live.
        CtxSynchronize::V2(f) => unsafe { f(ctx) },
        // SAFETY: the caller made `ctx` current on this thread.
        CtxSynchronize::V1(f) => unsafe { f() },
    };
    check(d, r, what)
}

// ---- memory --------------------------------------------------------------------------

/// `cuMemGetInfo_v2` of the current context's device: (free, total).
pub fn mem_get_info(d: &Driver) -> Result<(u64, u64)> {
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: both are valid out-pointers.
    let r = unsafe { (d.cuMemGetInfo_v2)(&mut free, &mut total) };
    check(d, r, || "cuMemGetInfo_v2".into())?;
    Ok((free as u64, total as u64))
}

/// `cuMemAlloc_v2` in the current context.
pub fn mem_alloc(d: &Driver, size: usize, what: impl FnOnce() -> String) -> Result<CUdeviceptr> {
    let mut p: CUdeviceptr = 0;
    // SAFETY: `p` is a valid out-pointer.
    let r = unsafe { (d.cuMemAlloc_v2)(&mut p, size) };
    check(d, r, what)?;
    Ok(p)
}

/// `cuMemFree_v2`.
///
/// # Safety
/// No queued or running device work may still access the allocation.
pub unsafe fn mem_free(d: &Driver, ptr: CUdeviceptr, what: impl FnOnce() -> String) -> Result<()> {
    // SAFETY: the driver validates `ptr`; the caller guarantees no work uses it.
    let r = unsafe { (d.cuMemFree_v2)(ptr) };
    check(d, r, what)
}

/// The device ordinal of the allocation that contains `ptr`
/// (`cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)`).
pub fn pointer_device_ordinal(d: &Driver, ptr: CUdeviceptr) -> Result<i32> {
    let mut ordinal: c_int = -1;
    // SAFETY: the attribute's value is an int and `ordinal` is a valid
    // out-pointer of that size; the driver validates `ptr`.
    let r = unsafe {
        (d.cuPointerGetAttribute)(
            (&mut ordinal as *mut c_int).cast::<c_void>(),
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
            ptr,
        )
    };
    check(d, r, || format!("cuPointerGetAttribute(DEVICE_ORDINAL, {ptr:#x})"))?;
    Ok(ordinal)
}

// ---- streams, events, modules ----------------------------------------------------------

/// `cuStreamCreate` in the current context.
pub fn stream_create(d: &Driver, flags: u32, what: impl FnOnce() -> String) -> Result<CUstream> {
    let mut s: CUstream = std::ptr::null_mut();
    // SAFETY: `s` is a valid out-pointer.
    let r = unsafe { (d.cuStreamCreate)(&mut s, flags) };
    check(d, r, what)?;
    Ok(s)
}

/// `cuEventCreate` in the current context.
pub fn event_create(d: &Driver, flags: u32, what: impl FnOnce() -> String) -> Result<CUevent> {
    let mut e: CUevent = std::ptr::null_mut();
    // SAFETY: `e` is a valid out-pointer.
    let r = unsafe { (d.cuEventCreate)(&mut e, flags) };
    check(d, r, what)?;
    Ok(e)
}

/// `cuModuleLoadData` of a NUL-terminated PTX image, in the current context.
pub fn module_load_ptx(d: &Driver, ptx: &CStr, what: impl FnOnce() -> String) -> Result<CUmodule> {
    let mut m: CUmodule = std::ptr::null_mut();
    // SAFETY: `ptx` is a NUL-terminated text image that outlives the call
    // (the driver copies it); `m` is a valid out-pointer.
    let r = unsafe { (d.cuModuleLoadData)(&mut m, ptx.as_ptr().cast::<c_void>()) };
    check(d, r, what)?;
    Ok(m)
}

/// `cuModuleGetFunction`.
///
/// # Safety
/// `module` must be live.
pub unsafe fn module_get_function(d: &Driver, module: CUmodule, name: &CStr) -> Result<CUfunction> {
    let mut f: CUfunction = std::ptr::null_mut();
    // SAFETY: `module` is live (caller), `name` is NUL-terminated, `f` a valid out-pointer.
    let r = unsafe { (d.cuModuleGetFunction)(&mut f, module, name.as_ptr()) };
    check(d, r, || format!("cuModuleGetFunction({})", name.to_string_lossy()))?;
    Ok(f)
}
