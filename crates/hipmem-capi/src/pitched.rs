//! Pitched memory: `hipMallocPitch`, `hipMemcpy2D(Async)`, `hipMemset2D(Async)`.

use std::ffi::{c_int, c_void};

use hipmem_rs::backend::HostSpan;
use hipmem_rs::backend::copy2d::{Copy2D, Side2D};
use hipmem_rs::{DevicePtr, MemcpyKind, Result, Stream};

use crate::types::*;
use crate::{call, current_device, handles, non_null, rt};

/// `hipMallocPitch` on the current device: null `ptr` or `pitch` →
/// InvalidValue; width or height 0 → Success with `*ptr = NULL` (`*pitch`
/// untouched, as HIP leaves it); a width whose padding or a pitch × height
/// that overflows → InvalidValue; too much memory → OutOfMemory. Free it
/// with `hipFree`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocPitch(
    ptr: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
) -> hipError_t {
    call(|| {
        non_null(ptr, "hipMallocPitch: ptr")?;
        non_null(pitch, "hipMallocPitch: pitch")?;
        let (p, row) = rt()?.malloc_pitch(current_device(), width as u64, height as u64)?;
        // SAFETY: both non-null and, by HIP's contract, writable.
        unsafe {
            *ptr = p.0 as usize as *mut c_void;
            if !p.is_null() {
                *pitch = row as usize;
            }
        }
        Ok(())
    })
}

/// `hipMemcpy2D`: `height` rows of `width` bytes from `src` (rows `spitch`
/// apart) to `dst` (rows `dpitch` apart); synchronous for the host. Width
/// or height 0 → Success before any check; an unknown kind →
/// InvalidMemcpyDirection; a pitch smaller than the width →
/// InvalidPitchValue; null pointers, an extent that overflows, a kind the
/// pointers contradict, or a device side past its allocation → InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpy2D(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: hipMemcpyKind,
) -> hipError_t {
    call(|| {
        if width == 0 || height == 0 {
            return Ok(());
        }
        let kind = MemcpyKind::from_raw(kind)?;
        let rt = rt()?;
        let stream = handles::stream(rt, std::ptr::null_mut())?;
        // SAFETY: forwards HIP's contract on the host sides; the copy is
        // waited for.
        unsafe { copy_2d_on(rt, &stream, dst, dpitch, src, spitch, width, height, kind, true) }
    })
}

/// Carries out a checked 2D copy on `stream`; `wait`: finish it before
/// returning (the synchronous form, or pageable host memory).
///
/// # Safety
/// Host sides must be valid for their extent, `(height - 1) * pitch +
/// width` bytes, until the copy is done (HIP's contract).
#[allow(clippy::too_many_arguments)]
unsafe fn copy_2d_on(
    rt: &hipmem_rs::Runtime,
    stream: &Stream,
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: MemcpyKind,
    wait: bool,
) -> Result<()> {
    let (d, s) = (dst as usize as u64, src as usize as u64);
    let Some(how) =
        rt.resolve_copy_2d(d, dpitch as u64, s, spitch as u64, width as u64, height as u64, kind)?
    else {
        return Ok(());
    };
    if !how.dst_on_device && !how.src_on_device {
        // Host to host: in stream order, on the host, before returning.
        stream.synchronize()?;
        for row in 0..height {
            // SAFETY: HIP's contract: both host sides are valid for their
            // extents; each row lies inside them (pitch >= width, checked);
            // `copy` allows overlap.
            unsafe {
                std::ptr::copy(src.cast::<u8>().add(row * spitch), dst.cast::<u8>().add(row * dpitch), width)
            };
        }
        return Ok(());
    }
    // A host side that is not page-locked is not promised to outlive the
    // call: such a copy is ordered after the stream's work and finished
    // before returning (as hipMemcpyAsync does with pageable memory).
    let mut page_locked = true;
    let mut side = |on_device: bool, addr: u64, extent: u64| {
        if on_device {
            Side2D::Device(DevicePtr(addr))
        } else {
            page_locked &= rt.page_locked_range(addr, extent).is_some();
            // SAFETY: HIP's contract keeps the host side valid for its extent
            // until the copy is done; if it is not page-locked the copy is
            // waited for below, before this call returns.
            Side2D::Host(unsafe { HostSpan::new(addr as usize as *const u8, extent as usize) })
        }
    };
    let copy = Copy2D {
        dst: side(how.dst_on_device, d, how.dst_extent),
        dst_pitch: dpitch as u64,
        src: side(how.src_on_device, s, how.src_extent),
        src_pitch: spitch as u64,
        width: width as u64,
        height: height as u64,
    };
    if !page_locked {
        stream.synchronize()?;
    }
    rt.memcpy_2d_async(&copy, stream.raw())?;
    if wait || !page_locked { stream.synchronize() } else { Ok(()) }
}

/// `hipMemcpy2DAsync`: as `hipMemcpy2D`, queued on `stream` (a destroyed
/// stream → InvalidHandle). Device-to-device copies and copies from or to
/// page-locked memory return at once; with pageable host memory the copy
/// is ordered after the stream's work and done before returning.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpy2DAsync(
    dst: *mut c_void,
    dpitch: usize,
    src: *const c_void,
    spitch: usize,
    width: usize,
    height: usize,
    kind: hipMemcpyKind,
    stream: hipStream_t,
) -> hipError_t {
    call(|| {
        if width == 0 || height == 0 {
            return Ok(());
        }
        let kind = MemcpyKind::from_raw(kind)?;
        let rt = rt()?;
        let stream = handles::stream(rt, stream)?;
        // SAFETY: forwards HIP's contract on the host sides.
        unsafe { copy_2d_on(rt, &stream, dst, dpitch, src, spitch, width, height, kind, false) }
    })
}

/// `hipMemset2D`: `height` rows of `width` bytes, `pitch` apart, set to
/// the low byte of `value`; synchronous. Width or height 0 → Success; null,
/// host memory, a pitch smaller than the width, an extent that overflows
/// or runs past the allocation → InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemset2D(
    dst: *mut c_void,
    pitch: usize,
    value: c_int,
    width: usize,
    height: usize,
) -> hipError_t {
    call(|| {
        rt()?.memset_2d(
            DevicePtr(dst as usize as u64),
            pitch as u64,
            value as u8,
            width as u64,
            height as u64,
        )
    })
}

/// `hipMemset2DAsync`: as `hipMemset2D`, queued on `stream` (a destroyed
/// stream → InvalidHandle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemset2DAsync(
    dst: *mut c_void,
    pitch: usize,
    value: c_int,
    width: usize,
    height: usize,
    stream: hipStream_t,
) -> hipError_t {
    call(|| {
        if width == 0 || height == 0 {
            return Ok(());
        }
        let rt = rt()?;
        let stream = handles::stream(rt, stream)?;
        rt.memset_2d_async(
            DevicePtr(dst as usize as u64),
            pitch as u64,
            value as u8,
            width as u64,
            height as u64,
            stream.raw(),
        )
    })
}
