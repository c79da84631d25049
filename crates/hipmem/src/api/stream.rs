//! Streams in the safe API: the built-in kernels on typed buffers, memsets
//! and copies between buffers, and borrow-checked asynchronous host copies.
#![forbid(unsafe_code)]

use std::time::Duration;

use bytemuck::Pod;

use super::event::Event;
use crate::backend::lend::{LendScope, lend_scope};
use crate::backend::{FillValue, RawStream};
use crate::error::{Error, Result};
use crate::runtime::{CoreStream, DeviceSlice, Runtime};

/// A stream (`hipStream_t`): the core's stream ([`CoreStream`], which it
/// dereferences to, so `&stream` goes wherever a `&CoreStream` is asked
/// for) with the safe API's typed operations: the built-in kernels on
/// buffers, memsets and copies between buffers, and borrow-checked
/// asynchronous host copies ([`Stream::scope`]). Clones share the same
/// stream; an owned stream is destroyed when the last clone is dropped (work
/// already queued still runs).
#[derive(Clone)]
pub struct Stream {
    core: CoreStream,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.core.fmt(f)
    }
}

impl std::ops::Deref for Stream {
    type Target = CoreStream;
    #[inline]
    fn deref(&self) -> &CoreStream {
        &self.core
    }
}

impl From<CoreStream> for Stream {
    fn from(core: CoreStream) -> Stream {
        Stream { core }
    }
}

impl From<Stream> for CoreStream {
    fn from(stream: Stream) -> CoreStream {
        stream.core
    }
}

/// An element type the fill kernel can write (1, 2 or 4 bytes).
pub trait FillElement: Pod {
    /// The element as the kernel's fill value.
    fn fill_value(self) -> FillValue;
}

macro_rules! fill_element {
    ($($t:ty => $variant:ident as $bits:ty),*) => {$(
        impl FillElement for $t {
            fn fill_value(self) -> FillValue {
                FillValue::$variant(bytemuck::cast::<$t, $bits>(self))
            }
        }
    )*};
}
fill_element!(u8 => U8 as u8, i8 => U8 as u8, u16 => U16 as u16, i16 => U16 as u16,
              u32 => U32 as u32, i32 => U32 as u32, f32 => U32 as u32);

impl Stream {
    /// The stream behind a raw handle of `rt` (the C ABI's lookup): handle 0
    /// is the device's null stream; a destroyed or unknown handle is
    /// InvalidHandle.
    pub fn from_raw(rt: &Runtime, raw: RawStream) -> Result<Stream> {
        rt.stream_from_raw(raw).map(Stream::from)
    }

    /// A stream hipmem did not create (made by the vendor's runtime, or by a
    /// library such as PyTorch or NCCL), learned once: see
    /// [`Runtime::adopt_stream`]. hipmem's own streams and the null stream
    /// are found as by [`Stream::from_raw`].
    pub fn adopt(rt: &Runtime, raw: RawStream) -> Result<Stream> {
        rt.adopt_stream(raw).map(Stream::from)
    }

    /// The core's stream.
    pub fn core(&self) -> &CoreStream {
        &self.core
    }

    /// Makes later work on this stream wait for `event` (`hipStreamWaitEvent`).
    /// Pool memory freed on the event's stream before the event's record
    /// becomes reusable here (follow event dependencies).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.core.wait_raw_event(event.raw(), event.point().as_ref())
    }

    /// Records `event` here (same as `event.record(self)`).
    pub fn record_event(&self, event: &Event) -> Result<()> {
        event.record(self)
    }

    // ---- built-in kernels --------------------------------------------------------

    /// Fill kernel: sets every element of `buf` to `value`.
    pub fn fill<T: FillElement>(&self, buf: &impl DeviceSlice<T>, value: T) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        self.runtime().check_kernel_range_on(
            self.device(),
            buf.device_ptr(),
            buf.size_bytes(),
            "fill kernel",
        )?;
        self.runtime().backend().launch_fill(
            buf.device_ptr(),
            value.fill_value(),
            buf.len() as u64,
            self.raw(),
        )
    }

    /// Iota kernel (the seeds' kernel): `buf[i] = i * k`.
    pub fn iota(&self, buf: &impl DeviceSlice<i32>, k: i32) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        self.runtime().check_kernel_range_on(
            self.device(),
            buf.device_ptr(),
            buf.size_bytes(),
            "iota kernel",
        )?;
        self.runtime().backend().launch_iota(buf.device_ptr(), buf.len() as u64, k, self.raw())
    }

    /// Delay kernel: occupies the stream for `duration`, then writes `value`
    /// into `flag[0]`. Tests use it to prove stream ordering.
    pub fn delay(&self, duration: Duration, flag: &impl DeviceSlice<u32>, value: u32) -> Result<()> {
        if flag.is_empty() {
            return Err(Error::InvalidValue("the delay kernel's flag buffer is empty".into()));
        }
        self.runtime().check_kernel_range_on(self.device(), flag.device_ptr(), 4, "delay kernel flag")?;
        self.runtime().backend().launch_delay(duration, flag.device_ptr(), value, self.raw())
    }

    // ---- asynchronous memory operations --------------------------------------------

    /// Sets every byte of `buf` to `byte`, in stream order (`hipMemsetAsync`).
    pub fn memset<T: Pod>(&self, buf: &impl DeviceSlice<T>, byte: u8) -> Result<()> {
        self.runtime().memset_async(buf.device_ptr(), FillValue::U8(byte), buf.size_bytes(), self.raw())
    }

    /// Copies `src` into `dst` in stream order; the lengths must match.
    pub fn copy_device_to_device<T: Pod>(
        &self,
        src: &impl DeviceSlice<T>,
        dst: &impl DeviceSlice<T>,
    ) -> Result<()> {
        check_lengths(src.len(), dst.len())?;
        self.runtime().copy_device_to_device_async(
            dst.device_ptr(),
            src.device_ptr(),
            src.size_bytes(),
            self.raw(),
        )
    }

    /// Runs `body`, in which host slices can be copied to and from the device
    /// asynchronously, then waits for this stream before returning (also on
    /// panic). The borrow checker keeps every lent slice alive and untouched
    /// until then.
    ///
    /// ```no_run
    /// # fn main() -> hipmem::Result<()> {
    /// let device = hipmem::Device::get(0)?;
    /// let stream = device.create_stream()?;
    /// let input: Vec<i32> = (0..1024).collect();
    /// let mut output = vec![0i32; 1024];
    /// let buf = device.alloc::<i32>(1024)?;
    /// stream.scope(|s| {
    ///     s.copy_to_device(&input, &buf)?;
    ///     s.copy_to_host(&buf, &mut output)
    /// })??;
    /// assert_eq!(input, output);
    /// # Ok(()) }
    /// ```
    pub fn scope<'env, F, T>(&self, body: F) -> Result<T>
    where
        F: for<'scope> FnOnce(&'scope AsyncScope<'scope, 'env>) -> T,
    {
        lend_scope(self.clone(), || self.synchronize(), body)
    }
}

fn check_lengths(src: usize, dst: usize) -> Result<()> {
    if src != dst {
        return Err(Error::InvalidValue(format!(
            "copy between buffers of different lengths ({src} and {dst} elements)"
        )));
    }
    Ok(())
}

/// Asynchronous host copies on one stream, inside [`Stream::scope`].
pub type AsyncScope<'scope, 'env> = LendScope<'scope, 'env, Stream>;

impl<'scope, 'env> LendScope<'scope, 'env, Stream> {
    /// The stream the copies are queued on.
    pub fn stream(&self) -> &Stream {
        self.context()
    }

    /// Queues a copy of `src` into `dst` (same length) and returns at once.
    pub fn copy_to_device<T: Pod>(&'scope self, src: &'env [T], dst: &impl DeviceSlice<T>) -> Result<()> {
        check_lengths(src.len(), dst.len())?;
        let span = self.lend(bytemuck::cast_slice(src));
        let stream = self.context();
        stream.runtime().copy_host_to_device_async(dst.device_ptr(), span, stream.raw())
    }

    /// Queues a copy of `src` into `dst` (same length) and returns at once; `dst`
    /// is readable again after the scope.
    pub fn copy_to_host<T: Pod>(&'scope self, src: &impl DeviceSlice<T>, dst: &'env mut [T]) -> Result<()> {
        check_lengths(src.len(), dst.len())?;
        let span = self.lend_mut(bytemuck::cast_slice_mut(dst));
        let stream = self.context();
        stream.runtime().copy_device_to_host_async(span, src.device_ptr(), stream.raw())
    }
}
