//! Pitched memory on HIP: `hipMallocPitch`, `hipMemcpy2DAsync` (one runtime
//! call per 2D copy) and `hipMemset2DAsync`. A library without them gets
//! the trait's portable defaults (padded rows in one `hipMalloc`, one
//! queued copy or memset per row).

use std::ffi::{c_int, c_void};

use super::{HipBackend, ptr, to_usize};
use crate::backend::copy2d::{self, Copy2D, Side2D};
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};

impl HipBackend {
    fn pitched(&self) -> Option<&'static super::sys::Pitched> {
        self.api.pitched.as_ref().ok()
    }

    pub(super) fn hip_mem_alloc_pitch(
        &self,
        device: usize,
        width: u64,
        height: u64,
    ) -> Result<(DevicePtr, u64)> {
        let Some(p) = self.pitched() else {
            return copy2d::mem_alloc_pitch_padded(self, device, width, height);
        };
        let _device = self.bound(device)?;
        let (w, h) = (to_usize(width, "width")?, to_usize(height, "height")?);
        let (mut dptr, mut pitch): (*mut c_void, usize) = (std::ptr::null_mut(), 0);
        // SAFETY: valid out-pointers; the device is current.
        let r = unsafe { (p.hipMallocPitch)(&mut dptr, &mut pitch, w, h) };
        self.check(r, || format!("hipMallocPitch({height} rows of {width} bytes) on device {device}"))?;
        Ok((DevicePtr(dptr as u64), pitch as u64))
    }

    pub(super) fn hip_copy_2d_async(&self, copy: &Copy2D, stream: RawStream) -> Result<()> {
        let Some(p) = self.pitched() else {
            return copy2d::copy_2d_by_rows(self, copy, stream);
        };
        copy.check()?;
        let t = self.target(stream)?;
        if copy.width == 0 || copy.height == 0 {
            return Ok(());
        }
        let (dst, dst_on_device): (*mut c_void, bool) = match copy.dst {
            Side2D::Device(d) => (ptr(d), true),
            Side2D::Host(span) => (span.as_mut_ptr().cast(), false),
        };
        let (src, src_on_device): (*const c_void, bool) = match copy.src {
            Side2D::Device(s) => (ptr(s).cast_const(), true),
            Side2D::Host(span) => (span.as_ptr().cast(), false),
        };
        let kind = match (dst_on_device, src_on_device) {
            (true, true) => super::sys::hipMemcpyDeviceToDevice,
            (true, false) => super::sys::hipMemcpyHostToDevice,
            (false, true) => super::sys::hipMemcpyDeviceToHost,
            (false, false) => {
                return Err(Error::InvalidValue(
                    "a host-to-host 2D copy is not device work (the runtime copies it on the host)".into(),
                ));
            }
        };
        let (dpitch, spitch) =
            (to_usize(copy.dst_pitch, "destination pitch")?, to_usize(copy.src_pitch, "source pitch")?);
        let (w, h) = (to_usize(copy.width, "width")?, to_usize(copy.height, "height")?);
        // SAFETY: host sides are `HostSpan`s whose contract (checked to
        // cover the extent by `Copy2D::check`) keeps them valid until the
        // queued copy completes; device addresses are validated by the
        // runtime; the stream is live (held by `t`).
        let r = unsafe { (p.hipMemcpy2DAsync)(dst, dpitch, src, spitch, w, h, kind, t.raw) };
        self.check(r, || {
            format!(
                "hipMemcpy2DAsync({} rows of {} bytes, pitches {} <- {}, kind {kind}) on device {}",
                copy.height, copy.width, copy.dst_pitch, copy.src_pitch, t.device
            )
        })
    }

    pub(super) fn hip_memset_2d_async(
        &self,
        dst: DevicePtr,
        pitch: u64,
        value: u8,
        width: u64,
        height: u64,
        stream: RawStream,
    ) -> Result<()> {
        let Some(p) = self.pitched() else {
            return copy2d::memset_2d_by_rows(self, dst, pitch, value, width, height, stream);
        };
        let t = self.target(stream)?;
        if width == 0 || height == 0 {
            return Ok(());
        }
        if pitch < width {
            return Err(Error::InvalidValue(format!(
                "the pitch {pitch} is smaller than the row width {width}"
            )));
        }
        let (pt, w, h) = (to_usize(pitch, "pitch")?, to_usize(width, "width")?, to_usize(height, "height")?);
        // SAFETY: a device address (validated by the runtime); a live stream.
        let r = unsafe { (p.hipMemset2DAsync)(ptr(dst), pt, c_int::from(value), w, h, t.raw) };
        self.check(r, || {
            format!("hipMemset2DAsync({dst}, pitch {pitch}, {height} rows of {width}) on device {}", t.device)
        })
    }
}
