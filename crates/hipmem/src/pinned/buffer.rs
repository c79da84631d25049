//! `PinnedBuffer<T>` and `HostRegistration<T>`: page-locked host memory in
//! the safe API, with the copies in flight that use it tracked by events.

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use super::HostMallocFlags;
use super::pool::PoolShared;
use crate::backend::DevicePtr;
use crate::backend::host_memory::{PageLockedBlock, RegisterSpan};
use crate::error::{Error, Result};
use crate::runtime::CoreStream;
use crate::runtime::DeviceSlice;
use crate::runtime::Runtime;

/// Work queued on a stream that used a piece of page-locked memory: the
/// stream and the point in its order right after that work. Queuing the work
/// costs no driver call; an event (from the runtime's pool of events) is
/// recorded only when someone must wait and the point is not yet known
/// complete, at the then current end of the stream, which is later than the
/// work and therefore safe.
#[derive(Clone)]
pub(crate) struct Use {
    stream: CoreStream,
    tag: u64,
}

impl Use {
    fn known_complete(&self) -> bool {
        self.stream.clock().completed_tag() >= self.tag
    }

    /// Whether the work has completed (asks the device when not yet known).
    pub(crate) fn is_complete(&self) -> bool {
        if self.known_complete() {
            return true;
        }
        let rt = self.stream.runtime();
        rt.refresh_clock(self.stream.device(), self.stream.clock());
        self.known_complete() || self.stream.query().unwrap_or(false)
    }

    /// Blocks until the work has completed.
    pub(crate) fn wait(&self) -> Result<()> {
        if self.is_complete() {
            return Ok(());
        }
        let rt = self.stream.runtime();
        let (tag, event) = rt.record_marker(self.stream.clock(), self.stream.raw())?;
        rt.backend().event_synchronize(event)?;
        self.stream.clock().mark_completed(tag);
        rt.retire_completed_markers(self.stream.device(), self.stream.clock());
        Ok(())
    }

    /// Makes later work on `other` wait for this work.
    fn order_before(&self, other: &CoreStream) -> Result<()> {
        if other.raw() == self.stream.raw() || self.known_complete() {
            return Ok(());
        }
        let rt = self.stream.runtime();
        let (tag, event) = rt.record_marker(self.stream.clock(), self.stream.raw())?;
        rt.backend().stream_wait_event(other.raw(), event)?;
        other.clock().learn(&crate::runtime::ordering::OrderPoint {
            clock: std::sync::Arc::clone(self.stream.clock()),
            tag,
            known: Vec::new(),
        });
        Ok(())
    }
}

/// The work in flight on one piece of memory: the latest point per stream (a
/// stream's work runs in order, so its latest point covers the earlier ones).
#[derive(Default)]
pub(crate) struct InFlight {
    uses: Mutex<Vec<Use>>,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Use>> {
        self.uses.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn from_uses(uses: Vec<Use>) -> InFlight {
        InFlight { uses: Mutex::new(uses) }
    }

    /// Records that work was just queued on `stream`.
    pub(crate) fn record(&self, stream: &CoreStream) -> Result<()> {
        let tag = stream.clock().advance();
        let mut uses = self.lock();
        uses.retain(|u| !u.known_complete());
        match uses.iter_mut().find(|u| u.stream.raw() == stream.raw()) {
            Some(u) => u.tag = u.tag.max(tag),
            None => uses.push(Use { stream: stream.clone(), tag }),
        }
        Ok(())
    }

    /// A copy of the uses, unless none of them needs looking at (`skip`
    /// holds for all): the common case copies nothing.
    fn pending(&self, skip: impl Fn(&Use) -> bool) -> Option<Vec<Use>> {
        let uses = self.lock();
        if uses.iter().all(skip) { None } else { Some(uses.clone()) }
    }

    /// Waits for every use in flight.
    pub(crate) fn wait(&self) -> Result<()> {
        for u in self.pending(Use::known_complete).unwrap_or_default() {
            u.wait()?;
        }
        Ok(())
    }

    /// Whether every use has completed.
    pub(crate) fn is_idle(&self) -> Result<bool> {
        Ok(self.pending(Use::known_complete).is_none_or(|uses| uses.iter().all(Use::is_complete)))
    }

    /// Makes `stream` wait for the work of other streams.
    fn order_before(&self, stream: &CoreStream) -> Result<()> {
        for u in self.pending(|u| u.stream.raw() == stream.raw() || u.known_complete()).unwrap_or_default() {
            u.order_before(stream)?;
        }
        Ok(())
    }

    pub(crate) fn take(&self) -> Vec<Use> {
        std::mem::take(&mut *self.lock())
    }
}

/// Reads and writes in flight on one piece of page-locked memory.
#[derive(Default)]
#[doc(hidden)]
pub struct Tracker {
    /// Copies that read the memory (to the device).
    pub(crate) reads: InFlight,
    /// Copies and kernels that write it.
    pub(crate) writes: InFlight,
}

impl Tracker {
    pub(crate) fn wait_all(&self) -> Result<()> {
        self.reads.wait()?;
        self.writes.wait()
    }

    pub(crate) fn take_all(&self) -> Vec<Use> {
        let mut v = self.reads.take();
        v.extend(self.writes.take());
        v
    }
}

/// Page-locked host memory that copies may use asynchronously:
/// [`PinnedBuffer`] and [`HostRegistration`].
pub trait PageLockedSlice<T: Pod> {
    /// The host address of the first element.
    fn host_ptr(&self) -> u64;
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether there is no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The runtime.
    fn runtime(&self) -> &Runtime;
    #[doc(hidden)]
    fn tracker(&self) -> &Tracker;
}

/// Page-locked host memory for `len` elements of `T` (`hipHostMalloc`),
/// freed (or returned to its pool) in `Drop`.
///
/// The host sees the elements through [`PinnedBuffer::as_slice`] and
/// [`PinnedBuffer::as_mut_slice`], which first wait for the copies in
/// flight that write (or, for `as_mut_slice`, also read) the buffer, so host
/// access never races with a copy. Dropping the buffer waits for its copies
/// (a pooled buffer instead hands its events to the pool, which does not
/// reuse the block before they complete).
pub struct PinnedBuffer<T: Pod> {
    rt: Runtime,
    block: Option<PageLockedBlock>,
    len: usize,
    flags: HostMallocFlags,
    tracker: Tracker,
    pool: Option<Arc<PoolShared>>,
    _t: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("host", &format_args!("{:#x}", self.host_ptr()))
            .field("len", &self.len)
            .field("flags", &self.flags)
            .field("pooled", &self.pool.is_some())
            .finish()
    }
}

fn byte_len<T>(len: usize) -> Result<u64> {
    len.checked_mul(std::mem::size_of::<T>())
        .map(|b| b as u64)
        .ok_or_else(|| Error::OutOfMemory(format!("{len} elements overflow the address space")))
}

impl<T: Pod> PinnedBuffer<T> {
    /// Allocates page-locked memory for `len` elements with HIP's `flags`
    /// (`host_malloc_flags`); `len` 0 gives an empty buffer.
    pub fn new(rt: &Runtime, len: usize, flags: u32) -> Result<PinnedBuffer<T>> {
        let flags = HostMallocFlags::from_bits(flags)?;
        let bytes = byte_len::<T>(len)?;
        let block = if bytes == 0 { None } else { Some(rt.allocate_page_locked(bytes, flags)?) };
        Ok(PinnedBuffer::assemble(rt.clone(), block, len, flags, None, Vec::new()))
    }

    /// A page-locked copy of `data`.
    pub fn from_slice(rt: &Runtime, data: &[T], flags: u32) -> Result<PinnedBuffer<T>> {
        let mut b = PinnedBuffer::new(rt, data.len(), flags)?;
        b.as_mut_slice()?.copy_from_slice(data);
        Ok(b)
    }

    pub(crate) fn assemble(
        rt: Runtime,
        block: Option<PageLockedBlock>,
        len: usize,
        flags: HostMallocFlags,
        pool: Option<Arc<PoolShared>>,
        events: Vec<Use>,
    ) -> PinnedBuffer<T> {
        let tracker = Tracker { reads: InFlight::from_uses(events), writes: InFlight::default() };
        PinnedBuffer { rt, block, len, flags, tracker, pool, _t: PhantomData }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        (self.len * std::mem::size_of::<T>()) as u64
    }

    /// The host address (0 when empty).
    pub fn host_ptr(&self) -> u64 {
        self.block.as_ref().map_or(0, |b| b.host())
    }

    /// The device address, for memory allocated with `hipHostMallocMapped`.
    pub fn device_ptr(&self) -> Option<DevicePtr> {
        self.block.as_ref().and_then(|b| b.device())
    }

    /// Whether the pages are really locked (the CPU emulation may not be
    /// allowed to lock them: `RLIMIT_MEMLOCK`; they are then still usable).
    pub fn is_page_locked(&self) -> bool {
        self.block.as_ref().is_none_or(|b| b.is_locked())
    }

    /// HIP's flag bits it was allocated with.
    pub fn flags(&self) -> u32 {
        self.flags.bits()
    }

    /// Whether it came from a [`super::PinnedPool`].
    pub fn is_pooled(&self) -> bool {
        self.pool.is_some()
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    fn bytes_len(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }

    /// The elements, once the copies that write the buffer have completed.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.tracker.writes.wait()?;
        Ok(match &self.block {
            Some(b) => bytemuck::cast_slice(&b.bytes()[..self.bytes_len()]),
            None => &[],
        })
    }

    /// The elements for writing, once every copy that uses the buffer has
    /// completed.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.tracker.wait_all()?;
        let n = self.bytes_len();
        Ok(match &mut self.block {
            Some(b) => bytemuck::cast_slice_mut(&mut b.bytes_mut()[..n]),
            None => &mut [],
        })
    }

    /// The elements as a vector (waits like [`PinnedBuffer::as_slice`]).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        Ok(self.as_slice()?.to_vec())
    }

    /// Waits for every copy in flight that uses the buffer.
    pub fn synchronize(&self) -> Result<()> {
        self.tracker.wait_all()
    }

    /// Whether no copy that uses the buffer is still in flight.
    pub fn is_idle(&self) -> Result<bool> {
        Ok(self.tracker.reads.is_idle()? && self.tracker.writes.is_idle()?)
    }

    /// The buffer as device memory (mapped buffers only) for kernels queued
    /// on `stream`: when the returned view is dropped, the buffer records
    /// that work, so host access waits for it.
    pub fn mapped<'a>(&'a mut self, stream: &'a CoreStream) -> Result<MappedSlice<'a, T>> {
        let ptr = self.device_ptr().ok_or_else(|| {
            Error::InvalidValue(
                "the pinned buffer is not mapped (allocate it with hipHostMallocMapped)".into(),
            )
        })?;
        self.tracker.reads.order_before(stream)?;
        self.tracker.writes.order_before(stream)?;
        Ok(MappedSlice { buffer: self, stream, ptr })
    }
}

impl<T: Pod> PageLockedSlice<T> for PinnedBuffer<T> {
    fn host_ptr(&self) -> u64 {
        PinnedBuffer::host_ptr(self)
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        &self.rt
    }
    fn tracker(&self) -> &Tracker {
        &self.tracker
    }
}

impl<T: Pod> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        let Some(block) = self.block.take() else { return };
        if let Some(pool) = self.pool.take() {
            // The pool keeps the events and reuses the block once they complete.
            pool.give_back(block, self.tracker.take_all());
            return;
        }
        if let Err(e) = self.tracker.wait_all() {
            self.rt.record_drop_error("waiting for the copies of a pinned buffer", e);
        }
        if let Err(e) = self.rt.release_page_locked(block) {
            self.rt.record_drop_error("hipHostFree", e);
        }
    }
}

/// A mapped [`PinnedBuffer`] seen as device memory by kernels on one stream.
pub struct MappedSlice<'a, T: Pod> {
    buffer: &'a mut PinnedBuffer<T>,
    stream: &'a CoreStream,
    ptr: DevicePtr,
}

impl<T: Pod> DeviceSlice<T> for MappedSlice<'_, T> {
    fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.buffer.len
    }
    fn runtime(&self) -> &Runtime {
        &self.buffer.rt
    }
}

impl<T: Pod> Drop for MappedSlice<'_, T> {
    fn drop(&mut self) {
        if let Err(e) = self.buffer.tracker.writes.record(self.stream) {
            // Without the event the host could race the kernels: wait now.
            self.buffer.rt.record_drop_error("recording the work on a mapped pinned buffer", e);
            if let Err(e) = self.stream.synchronize() {
                self.buffer.rt.record_drop_error("hipStreamSynchronize", e);
            }
        }
    }
}

/// Existing host memory (a `Vec<T>`), page-locked while this guard lives
/// (`hipHostRegister` / `hipHostUnregister`). The guard owns the vector so
/// the memory cannot go while registered; [`HostRegistration::into_inner`]
/// unregisters and gives it back.
pub struct HostRegistration<T: Pod> {
    rt: Runtime,
    data: Option<Box<[T]>>,
    flags: u32,
    tracker: Tracker,
}

impl<T: Pod> std::fmt::Debug for HostRegistration<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostRegistration")
            .field("host", &format_args!("{:#x}", self.host_ptr()))
            .field("len", &self.len())
            .field("flags", &self.flags)
            .finish()
    }
}

impl<T: Pod> HostRegistration<T> {
    /// Registers `data` with HIP's `hipHostRegister` flags. An empty vector is
    /// InvalidValue (there is nothing to register).
    pub fn new(rt: &Runtime, data: Vec<T>, flags: u32) -> Result<HostRegistration<T>> {
        if std::mem::size_of::<T>() == 0 {
            return Err(Error::InvalidValue("cannot register zero-sized elements".into()));
        }
        let mut data = data.into_boxed_slice();
        let span = RegisterSpan::of_owned(bytemuck::cast_slice_mut(&mut data));
        rt.host_register(span, flags)?;
        Ok(HostRegistration { rt: rt.clone(), data: Some(data), flags, tracker: Tracker::default() })
    }

    fn data(&self) -> &[T] {
        self.data.as_deref().unwrap_or(&[])
    }

    /// The host address of the first element.
    pub fn host_ptr(&self) -> u64 {
        self.data().as_ptr() as u64
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.data().len()
    }

    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The device address (registered with `hipHostRegisterMapped`).
    pub fn device_ptr(&self) -> Result<DevicePtr> {
        self.rt.host_get_device_pointer(self.host_ptr(), 0)
    }

    /// The elements, once the copies that write them have completed.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.tracker.writes.wait()?;
        Ok(self.data())
    }

    /// The elements for writing, once every copy that uses them has completed.
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.tracker.wait_all()?;
        Ok(self.data.as_deref_mut().unwrap_or(&mut []))
    }

    /// Waits for the copies in flight, unregisters and returns the vector.
    pub fn into_inner(mut self) -> Result<Vec<T>> {
        self.tracker.wait_all()?;
        self.rt.host_unregister(self.host_ptr())?;
        Ok(self.data.take().map(Vec::from).unwrap_or_default())
    }
}

impl<T: Pod> PageLockedSlice<T> for HostRegistration<T> {
    fn host_ptr(&self) -> u64 {
        HostRegistration::host_ptr(self)
    }
    fn len(&self) -> usize {
        HostRegistration::len(self)
    }
    fn runtime(&self) -> &Runtime {
        &self.rt
    }
    fn tracker(&self) -> &Tracker {
        &self.tracker
    }
}

impl<T: Pod> Drop for HostRegistration<T> {
    fn drop(&mut self) {
        let Some(data) = self.data.take() else { return };
        let result = self.tracker.wait_all().and_then(|()| self.rt.host_unregister(data.as_ptr() as u64));
        if let Err(e) = result {
            // Still registered (or in use): the memory must outlive that.
            self.rt.record_drop_error("hipHostUnregister", e);
            std::mem::forget(data);
        }
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

impl CoreStream {
    /// Queues a copy of page-locked `src` into device memory `dst` (same
    /// length) and returns at once: a real asynchronous copy (DMA), which may
    /// still be queued behind earlier work when this returns. `src` records
    /// the copy, so writing it from the host waits for the copy.
    pub fn copy_to_device_from_pinned<T: Pod>(
        &self,
        src: &impl PageLockedSlice<T>,
        dst: &impl DeviceSlice<T>,
    ) -> Result<()> {
        check_lengths(src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        src.tracker().writes.order_before(self)?;
        let bytes = byte_len::<T>(src.len())?;
        self.runtime().copy_page_locked_to_device_typed(
            dst.device_ptr(),
            src.host_ptr(),
            bytes,
            self.raw(),
        )?;
        src.tracker().reads.record(self)
    }

    /// Queues a copy of device memory `src` into page-locked `dst` (same
    /// length) and returns at once; reading `dst` from the host waits for it.
    pub fn copy_to_pinned_from_device<T: Pod>(
        &self,
        src: &impl DeviceSlice<T>,
        dst: &mut impl PageLockedSlice<T>,
    ) -> Result<()> {
        check_lengths(src.len(), dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        dst.tracker().reads.order_before(self)?;
        dst.tracker().writes.order_before(self)?;
        let bytes = byte_len::<T>(dst.len())?;
        self.runtime().copy_device_to_page_locked_typed(
            dst.host_ptr(),
            src.device_ptr(),
            bytes,
            self.raw(),
        )?;
        dst.tracker().writes.record(self)
    }
}
