//! Pitched (2D) memory: rows of `width` bytes laid out `pitch` bytes apart.
//!
//! The operations ([`Backend::copy_2d_async`], [`Backend::memset_2d_async`],
//! [`Backend::mem_alloc_pitch`]) have defaults here built on the backend's
//! 1D operations (one queued copy or memset per row, or one for the whole
//! extent when the rows are contiguous); a backend with native 2D
//! operations (CUDA's `cuMemcpy2DAsync`, `cuMemsetD2D8Async`) overrides them.
//!
//! [`Backend::copy_2d_async`]: super::Backend::copy_2d_async
//! [`Backend::memset_2d_async`]: super::Backend::memset_2d_async
//! [`Backend::mem_alloc_pitch`]: super::Backend::mem_alloc_pitch

use super::{Backend, DevicePtr, FillValue, HostSpan, RawStream};
use crate::error::{Error, Result};

/// Rows of pitched allocations start at multiples of this many bytes
/// (CUDA's `cudaMallocPitch` alignment on current GPUs).
pub const PITCH_ALIGNMENT: u64 = 512;

/// One side of a 2D copy.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Side2D {
    /// Device memory (or memory the device addresses: mapped, managed).
    Device(DevicePtr),
    /// Host memory lent for the whole extent of the copy
    /// (`(height - 1) * pitch + width` bytes).
    Host(HostSpan),
}

/// A 2D copy: `height` rows of `width` bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Copy2D {
    /// Destination.
    pub dst: Side2D,
    /// Bytes from one destination row to the next.
    pub dst_pitch: u64,
    /// Source.
    pub src: Side2D,
    /// Bytes from one source row to the next.
    pub src_pitch: u64,
    /// Bytes per row.
    pub width: u64,
    /// Rows.
    pub height: u64,
}

/// Bytes spanned by `height` rows of `width` bytes `pitch` apart:
/// `(height - 1) * pitch + width` (0 rows span nothing). Overflow is
/// InvalidValue.
pub fn extent(pitch: u64, width: u64, height: u64) -> Result<u64> {
    if height == 0 || width == 0 {
        return Ok(0);
    }
    (height - 1).checked_mul(pitch).and_then(|b| b.checked_add(width)).ok_or_else(|| {
        Error::InvalidValue(format!("{height} rows of {width} bytes, {pitch} bytes apart, overflow"))
    })
}

impl Copy2D {
    /// Checks the shape: pitches at least the width, and host spans that
    /// cover the extent of their side.
    pub fn check(&self) -> Result<()> {
        for (side, pitch, name) in
            [(self.dst, self.dst_pitch, "destination"), (self.src, self.src_pitch, "source")]
        {
            if pitch < self.width {
                return Err(Error::InvalidPitchValue(format!(
                    "the {name} pitch {pitch} is smaller than the row width {}",
                    self.width
                )));
            }
            let need = extent(pitch, self.width, self.height)?;
            if let Side2D::Host(span) = side {
                if span.len() < need {
                    return Err(Error::InvalidValue(format!(
                        "the {name} host span holds {} bytes; {} rows of {} bytes, {pitch} apart, need {need}",
                        span.len(),
                        self.height,
                        self.width
                    )));
                }
            }
        }
        Ok(())
    }

    /// Whether both sides are contiguous (pitch == width, or a single row).
    fn contiguous(&self) -> bool {
        self.height <= 1 || (self.dst_pitch == self.width && self.src_pitch == self.width)
    }
}

/// Row `row` of a side: its start, and for host memory the row's sub-span.
fn row_of(side: Side2D, pitch: u64, row: u64, width: u64) -> Side2D {
    let offset = row * pitch;
    match side {
        Side2D::Device(p) => Side2D::Device(DevicePtr(p.0 + offset)),
        // SAFETY: `Copy2D::check` ensured the parent span covers
        // `(height - 1) * pitch + width` bytes, so this row lies inside it;
        // the parent's promise (valid until the queued work completes)
        // covers every part of it.
        Side2D::Host(span) => {
            Side2D::Host(unsafe { HostSpan::new(span.as_ptr().add(offset as usize), width as usize) })
        }
    }
}

fn copy_1d(
    backend: &(impl Backend + ?Sized),
    dst: Side2D,
    src: Side2D,
    size: u64,
    stream: RawStream,
) -> Result<()> {
    match (dst, src) {
        (Side2D::Device(d), Side2D::Device(s)) => backend.copy_device_to_device_async(d, s, size, stream),
        (Side2D::Device(d), Side2D::Host(s)) => backend.copy_host_to_device_async(d, s, stream),
        (Side2D::Host(d), Side2D::Device(s)) => backend.copy_device_to_host_async(d, s, stream),
        (Side2D::Host(_), Side2D::Host(_)) => Err(Error::InvalidValue(
            "a host-to-host 2D copy is not device work (the runtime copies it on the host)".into(),
        )),
    }
}

/// The default [`Backend::copy_2d_async`]: one queued copy for contiguous
/// rows, else one per row.
pub fn copy_2d_by_rows(backend: &(impl Backend + ?Sized), copy: &Copy2D, stream: RawStream) -> Result<()> {
    copy.check()?;
    if copy.width == 0 || copy.height == 0 {
        return Ok(());
    }
    if copy.contiguous() {
        let size = extent(copy.width, copy.width, copy.height)?;
        let whole = |side: Side2D| match side {
            Side2D::Device(p) => Side2D::Device(p),
            // SAFETY: contiguous rows: the extent is `size` bytes, which
            // `check` proved the span covers.
            Side2D::Host(s) => Side2D::Host(unsafe { HostSpan::new(s.as_ptr(), size as usize) }),
        };
        return copy_1d(backend, whole(copy.dst), whole(copy.src), size, stream);
    }
    for row in 0..copy.height {
        let dst = row_of(copy.dst, copy.dst_pitch, row, copy.width);
        let src = row_of(copy.src, copy.src_pitch, row, copy.width);
        copy_1d(backend, dst, src, copy.width, stream)?;
    }
    Ok(())
}

/// The default [`Backend::memset_2d_async`]: one queued memset for
/// contiguous rows, else one per row.
pub fn memset_2d_by_rows(
    backend: &(impl Backend + ?Sized),
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
    if pitch < width {
        return Err(Error::InvalidValue(format!("the pitch {pitch} is smaller than the row width {width}")));
    }
    extent(pitch, width, height)?;
    if height == 1 || pitch == width {
        return backend.memset_async(dst, FillValue::U8(value), width * height, stream);
    }
    for row in 0..height {
        backend.memset_async(DevicePtr(dst.0 + row * pitch), FillValue::U8(value), width, stream)?;
    }
    Ok(())
}

/// The default [`Backend::mem_alloc_pitch`]: rows padded to
/// [`PITCH_ALIGNMENT`], one allocation of `pitch * height` bytes.
pub fn mem_alloc_pitch_padded(
    backend: &(impl Backend + ?Sized),
    device: usize,
    width: u64,
    height: u64,
) -> Result<(DevicePtr, u64)> {
    let pitch = width.checked_next_multiple_of(PITCH_ALIGNMENT).ok_or_else(|| {
        Error::InvalidValue(format!("a row of {width} bytes cannot be padded to {PITCH_ALIGNMENT} bytes"))
    })?;
    let size = pitch
        .checked_mul(height)
        .ok_or_else(|| Error::InvalidValue(format!("{height} rows of {pitch} bytes overflow")))?;
    Ok((backend.mem_alloc(device, size)?, pitch))
}
