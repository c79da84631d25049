//! Streams: ordered queues of device work, with the built-in kernels and
//! borrow-checked asynchronous copies.
#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::Duration;

use bytemuck::Pod;

use crate::backend::lend::{LendScope, lend_scope};
use crate::backend::{FillValue, RawStream, StreamFlags};
use crate::buffer::DeviceSlice;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::runtime::Runtime;
use crate::runtime::ordering::StreamClock;

pub(crate) struct StreamInner {
    pub(crate) rt: Runtime,
    pub(crate) raw: RawStream,
    pub(crate) flags: StreamFlags,
    pub(crate) owned: bool,
    pub(crate) clock: Arc<StreamClock>,
    /// The slot of the first pool used on this stream (its fast path).
    pub(crate) primary_slot: std::sync::OnceLock<Arc<crate::pool::stream_cache::Slot>>,
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        if self.owned {
            // Pools hand this stream's cached and pending frees over (with a
            // marker that tells when they complete) before the stream goes.
            for pool in self.rt.inner.pools.hipmem_pools_of(self.raw.device) {
                pool.retire_stream(&self.rt.inner, self.clock.stream_id);
            }
            let mut streams = self.rt.inner.streams.lock().unwrap_or_else(|p| p.into_inner());
            if streams.get(&self.raw.handle).is_some_and(|w| w.strong_count() == 0) {
                streams.remove(&self.raw.handle);
            }
            drop(streams);
            if let Err(e) = self.rt.backend().stream_destroy(self.raw) {
                self.rt.record_drop_error("hipStreamDestroy", e);
            }
        }
    }
}

/// A stream (`hipStream_t`). Clones share the same stream; an owned stream is
/// destroyed when the last clone is dropped (work already queued still runs).
#[derive(Clone)]
pub struct Stream {
    pub(crate) inner: Arc<StreamInner>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.inner.raw)
            .field("non_blocking", &self.inner.flags.non_blocking)
            .finish()
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
    pub(crate) fn register(rt: &Runtime, raw: RawStream, flags: StreamFlags, owned: bool) -> Stream {
        let clock = if owned {
            Arc::new(StreamClock::new(rt.next_id()))
        } else {
            Arc::clone(&rt.inner.null_clocks[raw.device])
        };
        let inner = Arc::new(StreamInner {
            rt: rt.clone(),
            raw,
            flags,
            owned,
            clock,
            primary_slot: Default::default(),
        });
        if owned {
            rt.inner
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(raw.handle, Arc::downgrade(&inner));
        }
        Stream { inner }
    }

    /// The stream behind a raw handle of this runtime (the C ABI's lookup):
    /// handle 0 is the device's null stream; a destroyed or unknown handle is
    /// InvalidHandle.
    pub fn from_raw(rt: &Runtime, raw: RawStream) -> Result<Stream> {
        rt.check_device(raw.device)?;
        if raw.is_null() {
            return Ok(rt.device(raw.device)?.null_stream());
        }
        // The upgraded handle is dropped (if at all) after the lock is
        // released: dropping the last one destroys the stream, which takes it.
        let found = rt
            .inner
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&raw.handle)
            .and_then(|w| w.upgrade());
        found.filter(|s| s.raw.device == raw.device).map(|inner| Stream { inner }).ok_or_else(|| {
            Error::InvalidHandle(format!("stream {:#x} does not exist or was destroyed", raw.handle))
        })
    }

    /// The backend handle.
    pub fn raw(&self) -> RawStream {
        self.inner.raw
    }

    /// The device ordinal.
    pub fn device(&self) -> usize {
        self.inner.raw.device
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.inner.rt
    }

    /// A process-unique id (never reused, unlike backend handles).
    pub fn id(&self) -> u64 {
        self.inner.clock.stream_id
    }

    /// The creation flags.
    pub fn flags(&self) -> StreamFlags {
        self.inner.flags
    }

    /// Whether this is the legacy null stream.
    pub fn is_null(&self) -> bool {
        self.inner.raw.is_null()
    }

    /// Waits for all work queued so far (`hipStreamSynchronize`). Frees made
    /// on the stream before it are then complete, and pools apply their
    /// release thresholds.
    pub fn synchronize(&self) -> Result<()> {
        let tag = self.inner.clock.advance();
        self.inner.rt.backend().stream_synchronize(self.inner.raw)?;
        let rt = &self.inner.rt.inner;
        self.inner.clock.mark_completed(tag);
        rt.recycle_events(self.inner.raw.device, self.inner.clock.retire_completed_markers());
        rt.after_stream_synchronized(self.inner.raw.device, self.inner.clock.stream_id);
        Ok(())
    }

    /// Whether all queued work has completed (`hipStreamQuery`).
    pub fn query(&self) -> Result<bool> {
        let tag = self.inner.clock.advance();
        let idle = self.inner.rt.backend().stream_query(self.inner.raw)?;
        if idle {
            self.inner.clock.mark_completed(tag);
        }
        Ok(idle)
    }

    /// The stream's ordering clock.
    pub(crate) fn clock(&self) -> &Arc<StreamClock> {
        &self.inner.clock
    }

    /// Makes later work on this stream wait for `event` (`hipStreamWaitEvent`).
    /// Pool memory freed on the event's stream before the event's record
    /// becomes reusable here (follow event dependencies).
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        self.inner.rt.backend().stream_wait_event(self.inner.raw, event.raw())?;
        if let Some(point) = event.point() {
            self.inner.clock.learn(&point);
        }
        Ok(())
    }

    /// Records `event` here (same as `event.record(self)`).
    pub fn record_event(&self, event: &Event) -> Result<()> {
        event.record(self)
    }

    /// Runs `f` on a host thread when the stream reaches this point
    /// (`hipLaunchHostFunc`). `f` must not call back into stream operations
    /// that wait for this stream.
    pub fn launch_host_func<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<()> {
        self.inner.rt.backend().launch_host_func(self.inner.raw, Box::new(f))
    }

    // ---- built-in kernels --------------------------------------------------------

    /// Fill kernel: sets every element of `buf` to `value`.
    pub fn fill<T: FillElement>(&self, buf: &impl DeviceSlice<T>, value: T) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        self.inner.rt.check_kernel_range_on(
            self.inner.raw.device,
            buf.device_ptr(),
            buf.size_bytes(),
            "fill kernel",
        )?;
        self.inner.rt.backend().launch_fill(
            buf.device_ptr(),
            value.fill_value(),
            buf.len() as u64,
            self.inner.raw,
        )
    }

    /// Iota kernel (the seeds' kernel): `buf[i] = i * k`.
    pub fn iota(&self, buf: &impl DeviceSlice<i32>, k: i32) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        self.inner.rt.check_kernel_range_on(
            self.inner.raw.device,
            buf.device_ptr(),
            buf.size_bytes(),
            "iota kernel",
        )?;
        self.inner.rt.backend().launch_iota(buf.device_ptr(), buf.len() as u64, k, self.inner.raw)
    }

    /// Delay kernel: occupies the stream for `duration`, then writes `value`
    /// into `flag[0]`. Tests use it to prove stream ordering.
    pub fn delay(&self, duration: Duration, flag: &impl DeviceSlice<u32>, value: u32) -> Result<()> {
        if flag.is_empty() {
            return Err(Error::InvalidValue("the delay kernel's flag buffer is empty".into()));
        }
        self.inner.rt.check_kernel_range_on(
            self.inner.raw.device,
            flag.device_ptr(),
            4,
            "delay kernel flag",
        )?;
        self.inner.rt.backend().launch_delay(duration, flag.device_ptr(), value, self.inner.raw)
    }

    // ---- asynchronous memory operations --------------------------------------------

    /// Sets every byte of `buf` to `byte`, in stream order (`hipMemsetAsync`).
    pub fn memset<T: Pod>(&self, buf: &impl DeviceSlice<T>, byte: u8) -> Result<()> {
        self.inner.rt.memset_async(buf.device_ptr(), FillValue::U8(byte), buf.size_bytes(), self.inner.raw)
    }

    /// Copies `src` into `dst` in stream order; the lengths must match.
    pub fn copy_device_to_device<T: Pod>(
        &self,
        src: &impl DeviceSlice<T>,
        dst: &impl DeviceSlice<T>,
    ) -> Result<()> {
        check_lengths(src.len(), dst.len())?;
        self.inner.rt.copy_device_to_device_async(
            dst.device_ptr(),
            src.device_ptr(),
            src.size_bytes(),
            self.inner.raw,
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
        stream.inner.rt.copy_host_to_device_async(dst.device_ptr(), span, stream.raw())
    }

    /// Queues a copy of `src` into `dst` (same length) and returns at once; `dst`
    /// is readable again after the scope.
    pub fn copy_to_host<T: Pod>(&'scope self, src: &impl DeviceSlice<T>, dst: &'env mut [T]) -> Result<()> {
        check_lengths(src.len(), dst.len())?;
        let span = self.lend_mut(bytemuck::cast_slice_mut(dst));
        let stream = self.context();
        stream.inner.rt.copy_device_to_host_async(span, src.device_ptr(), stream.raw())
    }
}
