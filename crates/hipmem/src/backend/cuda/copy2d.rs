//! Pitched memory on the CUDA driver: `cuMemcpy2DAsync_v2` (one driver call
//! per 2D copy), `cuMemsetD2D8Async` and `cuMemAllocPitch_v2`.

use std::ffi::{c_uchar, c_uint, c_void};
use std::sync::OnceLock;

use super::driver::{self, CUdeviceptr, CUresult, CUstream};
use super::{CudaBackend, result};
use crate::backend::copy2d::{Copy2D, Side2D};
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};

/// `CUmemorytype`: `CU_MEMORYTYPE_HOST`.
const CU_MEMORYTYPE_HOST: c_uint = 1;
/// `CU_MEMORYTYPE_UNIFIED`: the driver classifies the (unified) address.
const CU_MEMORYTYPE_UNIFIED: c_uint = 4;

/// `CUDA_MEMCPY2D` (128 bytes on LP64).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
struct CudaMemcpy2D {
    src_x_in_bytes: usize,
    src_y: usize,
    src_memory_type: c_uint,
    src_host: *const c_void,
    src_device: CUdeviceptr,
    src_array: *mut c_void,
    src_pitch: usize,
    dst_x_in_bytes: usize,
    dst_y: usize,
    dst_memory_type: c_uint,
    dst_host: *mut c_void,
    dst_device: CUdeviceptr,
    dst_array: *mut c_void,
    dst_pitch: usize,
    width_in_bytes: usize,
    height: usize,
}

const _: () = {
    assert!(std::mem::size_of::<CudaMemcpy2D>() == 128);
    assert!(std::mem::offset_of!(CudaMemcpy2D, src_host) == 24);
    assert!(std::mem::offset_of!(CudaMemcpy2D, dst_memory_type) == 72);
    assert!(std::mem::offset_of!(CudaMemcpy2D, width_in_bytes) == 112);
};

type Memcpy2DAsync = unsafe extern "C" fn(copy: *const CudaMemcpy2D, stream: CUstream) -> CUresult;
type MemsetD2D8Async = unsafe extern "C" fn(
    dst: CUdeviceptr,
    pitch: usize,
    value: c_uchar,
    width: usize,
    height: usize,
    stream: CUstream,
) -> CUresult;
type MemAllocPitch = unsafe extern "C" fn(
    dptr: *mut CUdeviceptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
    element_size: c_uint,
) -> CUresult;

struct Entries {
    copy: Memcpy2DAsync,
    memset: MemsetD2D8Async,
    alloc_pitch: MemAllocPitch,
}

fn entries() -> Result<&'static Entries> {
    static ENTRIES: OnceLock<Result<Entries>> = OnceLock::new();
    let loaded = ENTRIES.get_or_init(|| {
        // SAFETY: each type above is the signature cuda.h gives for the symbol.
        unsafe {
            Ok(Entries {
                copy: driver::symbol("cuMemcpy2DAsync_v2")?,
                memset: driver::symbol("cuMemsetD2D8Async")?,
                alloc_pitch: driver::symbol("cuMemAllocPitch_v2")?,
            })
        }
    });
    loaded.as_ref().map_err(Clone::clone)
}

fn usize_of(v: u64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| Error::InvalidValue(format!("{what}: {v} does not fit usize")))
}

impl CudaBackend {
    pub(super) fn cuda_copy_2d_async(&self, copy: &Copy2D, stream: RawStream) -> Result<()> {
        copy.check()?;
        let t = self.target(stream)?;
        if copy.width == 0 || copy.height == 0 {
            return Ok(());
        }
        let e = entries()?;
        let mut desc = CudaMemcpy2D {
            src_x_in_bytes: 0,
            src_y: 0,
            src_memory_type: CU_MEMORYTYPE_UNIFIED,
            src_host: std::ptr::null(),
            src_device: 0,
            src_array: std::ptr::null_mut(),
            src_pitch: usize_of(copy.src_pitch, "source pitch")?,
            dst_x_in_bytes: 0,
            dst_y: 0,
            dst_memory_type: CU_MEMORYTYPE_UNIFIED,
            dst_host: std::ptr::null_mut(),
            dst_device: 0,
            dst_array: std::ptr::null_mut(),
            dst_pitch: usize_of(copy.dst_pitch, "destination pitch")?,
            width_in_bytes: usize_of(copy.width, "width")?,
            height: usize_of(copy.height, "height")?,
        };
        match copy.src {
            Side2D::Device(p) => desc.src_device = p.0,
            Side2D::Host(span) => {
                desc.src_memory_type = CU_MEMORYTYPE_HOST;
                desc.src_host = span.as_ptr().cast();
            }
        }
        match copy.dst {
            Side2D::Device(p) => desc.dst_device = p.0,
            Side2D::Host(span) => {
                desc.dst_memory_type = CU_MEMORYTYPE_HOST;
                desc.dst_host = span.as_mut_ptr().cast();
            }
        }
        // SAFETY: `desc` is a fully initialized CUDA_MEMCPY2D; host sides are
        // `HostSpan`s whose contract (checked to cover the extent by
        // `Copy2D::check`) keeps them valid until the queued copy completes;
        // device addresses are validated by the driver; the stream is live.
        let r = unsafe { (e.copy)(&desc, t.raw) };
        self.check(r, || {
            format!(
                "cuMemcpy2DAsync_v2({} rows of {} bytes, pitches {} <- {}) on device {}",
                copy.height, copy.width, copy.dst_pitch, copy.src_pitch, t.dev.ordinal
            )
        })
    }

    pub(super) fn cuda_memset_2d_async(
        &self,
        dst: DevicePtr,
        pitch: u64,
        value: u8,
        width: u64,
        height: u64,
        stream: RawStream,
    ) -> Result<()> {
        let t = self.target(stream)?;
        if width == 0 || height == 0 {
            return Ok(());
        }
        if pitch < width {
            return Err(Error::InvalidValue(format!(
                "the pitch {pitch} is smaller than the row width {width}"
            )));
        }
        let e = entries()?;
        let (p, w, h) = (usize_of(pitch, "pitch")?, usize_of(width, "width")?, usize_of(height, "height")?);
        // SAFETY: device address (validated by the driver); live stream.
        let r = unsafe { (e.memset)(dst.0, p, value, w, h, t.raw) };
        self.check(r, || {
            format!(
                "cuMemsetD2D8Async({dst}, pitch {pitch}, {height} rows of {width}) on device {}",
                t.dev.ordinal
            )
        })
    }

    pub(super) fn cuda_mem_alloc_pitch(
        &self,
        device: usize,
        width: u64,
        height: u64,
    ) -> Result<(DevicePtr, u64)> {
        let e = entries()?;
        let _ctx = self.bound(device)?;
        let (w, h) = (usize_of(width, "width")?, usize_of(height, "height")?);
        let (mut ptr, mut pitch): (CUdeviceptr, usize) = (0, 0);
        // SAFETY: valid out-pointers; the device's context is current; an
        // element size of 16 bytes is one the driver accepts (4, 8 or 16).
        let r = unsafe { (e.alloc_pitch)(&mut ptr, &mut pitch, w, h, 16) };
        result::check(self.driver, r, || {
            format!("cuMemAllocPitch_v2({height} rows of {width} bytes) on device {device}")
        })?;
        Ok((DevicePtr(ptr), pitch as u64))
    }
}
