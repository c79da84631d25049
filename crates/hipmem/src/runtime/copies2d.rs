//! Pitched memory with HIP's argument rules: `hipMallocPitch`,
//! `hipMemcpy2D(Async)` and `hipMemset2D(Async)`.
//!
//! A 2D region is `height` rows of `width` bytes, `pitch` bytes apart; it
//! spans `(height - 1) * pitch + width` bytes from its start, and every byte
//! of that extent on a device side must lie in one live allocation.
#![forbid(unsafe_code)]

use super::{Allocation, MemcpyKind, MemoryKind, Runtime};
use crate::backend::copy2d::{Copy2D, Side2D, extent};
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};

/// Where the two sides of a 2D copy live, once checked.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Resolved2D {
    /// The destination is memory device work addresses.
    pub dst_on_device: bool,
    /// The source is memory device work addresses.
    pub src_on_device: bool,
    /// Bytes spanned on the destination side.
    pub dst_extent: u64,
    /// Bytes spanned on the source side.
    pub src_extent: u64,
}

impl Runtime {
    /// `hipMallocPitch` on `device`: `height` rows of `width` bytes, each
    /// row padded to the returned pitch. Width or height 0: the null pointer
    /// and pitch 0, nothing allocated. A width whose padding overflows, or a
    /// pitch times height that does, is InvalidValue; too much memory is
    /// OutOfMemory.
    pub fn malloc_pitch(&self, device: usize, width: u64, height: u64) -> Result<(DevicePtr, u64)> {
        self.check_device(device)?;
        if width == 0 || height == 0 {
            return Ok((DevicePtr::NULL, 0));
        }
        // Rows are padded to at least this much on every backend: a width or
        // size that overflows even then is InvalidValue before any backend
        // sees it.
        let min_pitch =
            width.checked_next_multiple_of(crate::backend::copy2d::PITCH_ALIGNMENT).ok_or_else(|| {
                Error::InvalidValue(format!("hipMallocPitch: a row of {width} bytes cannot be padded"))
            })?;
        let least = min_pitch.checked_mul(height).ok_or_else(|| {
            Error::InvalidValue(format!("hipMallocPitch: {height} rows of {min_pitch} bytes overflow"))
        })?;
        let total = self.device_properties(device)?.total_memory;
        if least > total {
            return Err(Error::OutOfMemory(format!(
                "hipMallocPitch: {height} rows of at least {min_pitch} bytes can never fit device {device} ({total} bytes)"
            )));
        }
        let (ptr, pitch) = self.backend().mem_alloc_pitch(device, width, height)?;
        let size = pitch.checked_mul(height).ok_or_else(|| {
            Error::InvalidValue(format!("hipMallocPitch: {height} rows of {pitch} bytes overflow"))
        })?;
        self.inner.allocations.insert(Allocation { base: ptr, size, kind: MemoryKind::Device, device });
        Ok((ptr, pitch))
    }

    /// The checks of `hipMemcpy2D`, in HIP's order: width or height 0 →
    /// nothing to do (`None`, before any other check); a pitch smaller than
    /// the width → InvalidPitchValue; a null pointer, an extent that
    /// overflows, a kind that does not match the pointers, or a device side
    /// whose extent runs past its allocation → InvalidValue.
    #[allow(clippy::too_many_arguments)]
    pub fn resolve_copy_2d(
        &self,
        dst: u64,
        dst_pitch: u64,
        src: u64,
        src_pitch: u64,
        width: u64,
        height: u64,
        kind: MemcpyKind,
    ) -> Result<Option<Resolved2D>> {
        if width == 0 || height == 0 {
            return Ok(None);
        }
        for (pitch, side) in [(dst_pitch, "destination"), (src_pitch, "source")] {
            if pitch < width {
                return Err(Error::InvalidPitchValue(format!(
                    "hipMemcpy2D: the {side} pitch {pitch} is smaller than the width {width}"
                )));
            }
        }
        if dst == 0 || src == 0 {
            return Err(Error::InvalidValue(format!(
                "hipMemcpy2D: null {} pointer",
                if dst == 0 { "destination" } else { "source" }
            )));
        }
        let dst_extent =
            extent(dst_pitch, width, height).map_err(|e| e.context("hipMemcpy2D destination"))?;
        let src_extent = extent(src_pitch, width, height).map_err(|e| e.context("hipMemcpy2D source"))?;
        for (start, len, side) in [(dst, dst_extent, "destination"), (src, src_extent, "source")] {
            if start.checked_add(len).is_none() {
                return Err(Error::InvalidValue(format!(
                    "hipMemcpy2D: the {side} extent of {len} bytes at {start:#x} overflows the address space"
                )));
            }
        }
        let on_device =
            |p: u64| self.inner.allocations.find(p).is_some_and(|a| a.kind.is_device_accessible());
        let (d, s) = (on_device(dst), on_device(src));
        let ok = match kind {
            MemcpyKind::Default => true,
            MemcpyKind::HostToHost => !d && !s,
            MemcpyKind::HostToDevice => d && !s,
            MemcpyKind::DeviceToHost => !d && s,
            MemcpyKind::DeviceToDevice => d && s,
        };
        if !ok {
            let side = |dev: bool| if dev { "device" } else { "host" };
            return Err(Error::InvalidValue(format!(
                "hipMemcpy2D kind {kind:?} does not match the pointers: destination is {} memory, source is {} memory",
                side(d),
                side(s)
            )));
        }
        if d {
            self.check_device_range(DevicePtr(dst), dst_extent, "hipMemcpy2D destination")?;
        }
        if s {
            self.check_device_range(DevicePtr(src), src_extent, "hipMemcpy2D source")?;
        }
        Ok(Some(Resolved2D { dst_on_device: d, src_on_device: s, dst_extent, src_extent }))
    }

    /// Queues a 2D copy whose sides [`Runtime::resolve_copy_2d`] checked
    /// (device sides are checked again here) on `stream`.
    pub fn memcpy_2d_async(&self, copy: &Copy2D, stream: RawStream) -> Result<()> {
        copy.check()?;
        if copy.width == 0 || copy.height == 0 {
            return Ok(());
        }
        for (side, pitch, what) in
            [(copy.dst, copy.dst_pitch, "2D copy destination"), (copy.src, copy.src_pitch, "2D copy source")]
        {
            if let Side2D::Device(p) = side {
                self.check_device_range(p, extent(pitch, copy.width, copy.height)?, what)?;
            }
        }
        self.backend().copy_2d_async(copy, stream)
    }

    /// `hipMemset2DAsync`: `height` rows of `width` bytes, `pitch` apart,
    /// set to `value`. Width or height 0 → nothing (before any check); null
    /// → InvalidValue; a pitch smaller than the width, an extent that
    /// overflows, or one past the allocation → InvalidValue.
    #[allow(clippy::too_many_arguments)]
    pub fn memset_2d_async(
        &self,
        dst: DevicePtr,
        pitch: u64,
        value: u8,
        width: u64,
        height: u64,
        stream: RawStream,
    ) -> Result<()> {
        if width == 0 || height == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return Err(Error::InvalidValue("hipMemset2D: null destination".into()));
        }
        if pitch < width {
            return Err(Error::InvalidValue(format!(
                "hipMemset2D: the pitch {pitch} is smaller than the width {width}"
            )));
        }
        let bytes = extent(pitch, width, height).map_err(|e| e.context("hipMemset2D"))?;
        self.check_device_range(dst, bytes, "hipMemset2D destination")?;
        self.backend().memset_2d_async(dst, pitch, value, width, height, stream)
    }

    /// `hipMemset2D`: [`Runtime::memset_2d_async`] on the null stream of the
    /// memory's device, then waits for it.
    pub fn memset_2d(&self, dst: DevicePtr, pitch: u64, value: u8, width: u64, height: u64) -> Result<()> {
        if width == 0 || height == 0 {
            return Ok(());
        }
        let device = self
            .inner
            .allocations
            .find(dst.0)
            .map(|a| a.device)
            .ok_or_else(|| Error::InvalidValue(format!("hipMemset2D: {dst} is not device memory")))?;
        let null = RawStream::null(device);
        self.memset_2d_async(dst, pitch, value, width, height, null)?;
        self.backend().stream_synchronize(null)
    }
}
