//! The core's streams: what every layer knows of a stream.
//!
//! A [`CoreStream`] is the stream's identity below the safe API: its backend
//! handle and device, its flags, whether hipmem owns it (and destroys it
//! with its last handle), its ordering clock (see `ordering.rs`) and one
//! fast-path slot the first subsystem that asks may fill (the pool keeps
//! the stream's slot there). The subsystems take `&CoreStream`; the safe
//! API's `Stream` wraps one and dereferences to it.
//!
//! The runtime keeps a table of its owned streams by backend handle, so that
//! a raw handle (the C ABI's `hipStream_t`) finds its stream, and so that a
//! device synchronization reaches every stream's clock.
#![forbid(unsafe_code)]

use std::any::Any;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::Runtime;
use super::ordering::{OrderPoint, StreamClock};
use crate::backend::{RawEvent, RawStream, StreamFlags};
use crate::error::{Error, Result};

/// The state of one stream.
pub(crate) struct StreamState {
    pub(crate) rt: Runtime,
    pub(crate) raw: RawStream,
    pub(crate) flags: StreamFlags,
    /// hipmem created it and destroys it with the last handle.
    pub(crate) owned: bool,
    pub(crate) clock: Arc<StreamClock>,
    /// Filled by the first subsystem that asks (the pool: the slot of the
    /// first pool used on this stream).
    pub(crate) fast_slot: OnceLock<FastSlot>,
}

/// What a stream-ordered allocator keeps in a stream for its fast path: its
/// front for this stream, and the id of its owner (a process-unique id of
/// the allocator's choosing), so that another allocator tells it is not
/// its own without looking further.
pub struct FastSlot {
    /// Who filled it.
    pub owner: u64,
    /// The owner's front for this stream.
    pub front: Arc<dyn StreamFront>,
}

/// A stream-ordered allocator's front on one stream: memory it can hand out
/// to this stream at once, without any shared lock (the pools keep their
/// per-stream cache of freed blocks behind it). The core only stores it.
pub trait StreamFront: Any + Send + Sync {
    /// Takes a block of `size` bytes from the front, if it has one:
    /// (address, block size, and whether the allocator must look at the
    /// front after the hit: its statistics need a fresh sample, or other
    /// work is due).
    fn take(&self, size: u64) -> Option<(u64, u64, bool)>;
}

impl Drop for StreamState {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // Subsystems hand this stream's pending work over (pools: its cached
        // and pending frees, with a marker that tells when they complete).
        self.rt.notify_stream_retiring(self.raw.device, self.clock.stream_id);
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

/// The runtime's owned streams by backend handle.
pub(crate) type StreamTable = Mutex<HashMap<u64, Weak<StreamState>>>;

/// A stream hipmem adopted (made outside hipmem), learned once: its clock
/// outlives every handle to it, so its ordering and the pools' state for it
/// carry over from one use to the next.
pub(crate) struct Adopted {
    device: usize,
    flags: StreamFlags,
    clock: Arc<StreamClock>,
    state: Weak<StreamState>,
}

/// The runtime's adopted streams by backend handle.
pub(crate) type AdoptedTable = Mutex<HashMap<u64, Adopted>>;

/// A stream as the core and the subsystems see it. Clones are the same
/// stream; an owned stream is destroyed when the last clone (of this or of
/// a `Stream` wrapping it) is dropped.
#[derive(Clone)]
pub struct CoreStream {
    pub(crate) state: Arc<StreamState>,
}

impl std::fmt::Debug for CoreStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("raw", &self.state.raw)
            .field("non_blocking", &self.state.flags.non_blocking)
            .field("owned", &self.state.owned)
            .finish()
    }
}

impl CoreStream {
    /// The backend handle.
    #[inline]
    pub fn raw(&self) -> RawStream {
        self.state.raw
    }

    /// The device ordinal.
    #[inline]
    pub fn device(&self) -> usize {
        self.state.raw.device
    }

    /// The runtime.
    #[inline]
    pub fn runtime(&self) -> &Runtime {
        &self.state.rt
    }

    /// A process-unique id (never reused, unlike backend handles).
    #[inline]
    pub fn id(&self) -> u64 {
        self.state.clock.stream_id
    }

    /// The creation flags.
    pub fn flags(&self) -> StreamFlags {
        self.state.flags
    }

    /// Whether this is the legacy null stream.
    pub fn is_null(&self) -> bool {
        self.state.raw.is_null()
    }

    /// Whether hipmem created this stream (and destroys it with its last handle).
    pub fn is_owned(&self) -> bool {
        self.state.owned
    }

    /// The stream's ordering clock.
    #[inline]
    pub fn clock(&self) -> &Arc<StreamClock> {
        &self.state.clock
    }

    /// The slot the first subsystem that asks may fill (see the module docs).
    #[inline]
    pub(crate) fn fast_slot(&self) -> &OnceLock<FastSlot> {
        &self.state.fast_slot
    }

    /// Whether both handles are the same stream.
    pub fn same(&self, other: &CoreStream) -> bool {
        Arc::ptr_eq(&self.state, &other.state) || self.id() == other.id()
    }

    /// Waits for all work queued so far (`hipStreamSynchronize`). Work
    /// ordered before it is then complete, and the subsystems hear of it
    /// (pools apply their release thresholds).
    pub fn synchronize(&self) -> Result<()> {
        let rt = &self.state.rt;
        let tag = self.state.clock.advance();
        rt.backend().stream_synchronize(self.state.raw)?;
        self.state.clock.mark_completed(tag);
        rt.retire_completed_markers(self.device(), &self.state.clock);
        rt.notify_stream_synchronized(self.device(), self.id());
        Ok(())
    }

    /// The stream's priority (`hipStreamGetPriority`); 0 for the null stream.
    pub fn priority(&self) -> Result<i32> {
        self.state.rt.backend().stream_priority(self.state.raw)
    }

    /// Whether all queued work has completed (`hipStreamQuery`).
    pub fn query(&self) -> Result<bool> {
        let tag = self.state.clock.advance();
        let idle = self.state.rt.backend().stream_query(self.state.raw)?;
        if idle {
            self.state.clock.mark_completed(tag);
        }
        Ok(idle)
    }

    /// A point at the current end of this stream (for an event recorded now).
    pub fn point(&self) -> OrderPoint {
        self.state.clock.point()
    }

    /// Makes later work on this stream wait for `event`'s last record
    /// (`hipStreamWaitEvent`); `point`, where the record was made, is what the
    /// stream learns: memory freed before it becomes reusable here.
    pub fn wait_raw_event(&self, event: RawEvent, point: Option<&OrderPoint>) -> Result<()> {
        self.state.rt.backend().stream_wait_event(self.state.raw, event)?;
        if let Some(point) = point {
            self.state.clock.learn(point);
        }
        Ok(())
    }

    /// Makes later work on this stream wait for all work queued so far on
    /// `other` (an event from the runtime's event pool, recorded on `other`
    /// and waited on here, then pooled again: a wait takes the record as it
    /// stands when queued). What `other` had freed by then becomes reusable
    /// here, as after `hipStreamWaitEvent`. Nothing to do if both are the
    /// same stream.
    pub fn wait_for(&self, other: &CoreStream) -> Result<()> {
        if self.same(other) {
            return Ok(());
        }
        let rt = &self.state.rt;
        let device = other.device();
        let event = rt.pooled_event(device)?;
        let point = other.point();
        let waited = rt
            .backend()
            .event_record(event, other.raw())
            .and_then(|()| self.wait_raw_event(event, Some(&point)));
        rt.recycle_events(device, vec![event]);
        waited
    }

    /// Runs `f` on a host thread when the stream reaches this point
    /// (`hipLaunchHostFunc`). `f` must not call back into stream operations
    /// that wait for this stream.
    pub fn launch_host_func<F: FnOnce() + Send + 'static>(&self, f: F) -> Result<()> {
        self.state.rt.backend().launch_host_func(self.state.raw, Box::new(f))
    }
}

impl Runtime {
    /// A stream's state on `clock`, with an empty fast-path slot.
    fn stream_state(
        &self,
        raw: RawStream,
        flags: StreamFlags,
        owned: bool,
        clock: Arc<StreamClock>,
    ) -> Arc<StreamState> {
        Arc::new(StreamState { rt: self.clone(), raw, flags, owned, clock, fast_slot: OnceLock::new() })
    }

    /// Wraps a backend stream. An owned stream goes into the table of raw
    /// handles and is destroyed with its last handle.
    fn register_stream(&self, raw: RawStream, flags: StreamFlags, owned: bool) -> CoreStream {
        let clock = if owned {
            Arc::new(StreamClock::new(self.next_id()))
        } else {
            Arc::clone(&self.inner.null_clocks[raw.device])
        };
        let state = self.stream_state(raw, flags, owned, clock);
        if owned {
            self.inner
                .streams
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(raw.handle, Arc::downgrade(&state));
        }
        CoreStream { state }
    }

    /// A new stream on `device` (`hipStreamCreateWithFlags`).
    pub fn create_stream(&self, device: usize, flags: StreamFlags) -> Result<CoreStream> {
        self.check_device(device)?;
        let raw = self.backend().stream_create(device, flags)?;
        Ok(self.register_stream(raw, flags, true))
    }

    /// A new stream on `device` with a priority (`hipStreamCreateWithPriority`);
    /// a priority outside the device's range
    /// ([`Runtime::stream_priority_range`]) is clamped into it.
    pub fn create_stream_with_priority(
        &self,
        device: usize,
        flags: StreamFlags,
        priority: i32,
    ) -> Result<CoreStream> {
        let priority = self.stream_priority_range(device)?.clamp(priority);
        let raw = self.backend().stream_create_with_priority(device, flags, priority)?;
        Ok(self.register_stream(raw, flags, true))
    }

    /// `device`'s legacy null stream: work on it waits for all blocking
    /// streams of the device, and they wait for it.
    pub fn null_stream(&self, device: usize) -> Result<CoreStream> {
        self.check_device(device)?;
        Ok(self.register_stream(RawStream::null(device), StreamFlags::default(), false))
    }

    /// A stream of `device` that hipmem did not create: made by the vendor's
    /// runtime or driver API, or by a library such as PyTorch or NCCL. The
    /// first call asks the backend to check that `raw.handle` is a live
    /// stream of the device (on CUDA: the stream's context is the device's
    /// primary context) and learns its flags; later calls find it in the
    /// runtime's table. hipmem's own streams and the null stream are found
    /// as by [`Runtime::stream_from_raw`]. An adopted stream keeps one
    /// ordering clock for the runtime's life, so the pools' reuse rules hold
    /// across calls; hipmem never destroys it (see
    /// [`Runtime::destroy_adopted_stream`]).
    ///
    /// Errors: InvalidDevice for a bad device; InvalidHandle for a handle the
    /// backend does not know as a live stream of the device (the CPU backend
    /// has no streams made outside hipmem; on CUDA, a stream of another
    /// device or context, a stream hipmem destroyed, a handle outside
    /// readable memory). As with the vendor's own API, a handle that points
    /// at readable memory but is no stream (freed by its owner, made up) is
    /// undefined behaviour inside the driver: the driver offers no check.
    pub fn adopt_stream(&self, raw: RawStream) -> Result<CoreStream> {
        if let Ok(s) = self.stream_from_raw(raw) {
            return Ok(s);
        }
        self.check_device(raw.device)?;
        let mut table = self.inner.adopted.lock().unwrap_or_else(|p| p.into_inner());
        // Another thread may have adopted it since the look above.
        if let Some(s) = self.adopted_in(&mut table, raw) {
            return Ok(s);
        }
        // New, or named with another device: the backend decides (its owner
        // may have destroyed it and made one with the same handle elsewhere).
        let flags = self.backend().stream_adopt(raw.device, raw.handle)?;
        let clock = Arc::new(StreamClock::new(self.next_id()));
        let state = self.stream_state(raw, flags, false, Arc::clone(&clock));
        let old = table
            .insert(raw.handle, Adopted { device: raw.device, flags, clock, state: Arc::downgrade(&state) });
        drop(table);
        if let Some(old) = old {
            // The handle moved to another device: what the pools hold for
            // the old stream is handed over like a retiring stream's.
            self.notify_stream_retiring(old.device, old.clock.stream_id);
        }
        Ok(CoreStream { state })
    }

    /// The device a stream belongs to, asked of the backend (see
    /// [`Backend::stream_device`](crate::backend::Backend::stream_device)):
    /// a stream made outside hipmem is on the device of its context, and
    /// `cudaMallocAsync` takes the stream's device. InvalidHandle where the
    /// backend cannot tell (the CPU backend, a hip runtime without
    /// `hipStreamGetDevice`, a dead handle).
    pub fn stream_device(&self, handle: u64) -> Result<usize> {
        self.backend().stream_device(handle)
    }

    /// The adopted stream `raw`, if this runtime has adopted it: a live
    /// handle's state, or a new one on the stream's lasting clock.
    fn adopted_stream(&self, raw: RawStream) -> Option<CoreStream> {
        let mut table = self.inner.adopted.lock().unwrap_or_else(|p| p.into_inner());
        self.adopted_in(&mut table, raw)
    }

    /// [`Runtime::adopted_stream`] in the locked table.
    fn adopted_in(&self, table: &mut HashMap<u64, Adopted>, raw: RawStream) -> Option<CoreStream> {
        let a = table.get_mut(&raw.handle).filter(|a| a.device == raw.device)?;
        if let Some(state) = a.state.upgrade() {
            return Some(CoreStream { state });
        }
        let state = self.stream_state(raw, a.flags, false, Arc::clone(&a.clock));
        a.state = Arc::downgrade(&state);
        Some(CoreStream { state })
    }

    /// Whether `raw` is a stream this runtime adopted.
    pub fn is_adopted_stream(&self, raw: RawStream) -> bool {
        self.inner
            .adopted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&raw.handle)
            .is_some_and(|a| a.device == raw.device)
    }

    /// Destroys an adopted stream at its user's request (`hipStreamDestroy`
    /// of a stream hipmem did not create, which HIP allows): the pools hand
    /// over what they hold for it, the runtime forgets it, and the backend
    /// destroys it; work already queued still runs to completion.
    /// InvalidHandle if `raw` is not an adopted stream.
    pub fn destroy_adopted_stream(&self, raw: RawStream) -> Result<()> {
        self.forget_adopted_stream(raw)?;
        self.backend().stream_destroy(raw)
    }

    /// [`Runtime::destroy_adopted_stream`] without the backend's destroy:
    /// the pools hand over what they hold for the stream and the runtime
    /// forgets it, while the stream itself stays alive in its backend (the
    /// caller destroys it later with the backend's `stream_destroy`). The C
    /// ABI keeps a foreign stream so for a while after `hipStreamDestroy`,
    /// so that the driver cannot give its address to a new stream while the
    /// old handle is refused. InvalidHandle if `raw` is not an adopted stream.
    pub fn forget_adopted_stream(&self, raw: RawStream) -> Result<()> {
        let removed = {
            let mut table = self.inner.adopted.lock().unwrap_or_else(|p| p.into_inner());
            match table.get(&raw.handle) {
                Some(a) if a.device == raw.device => table.remove(&raw.handle),
                _ => None,
            }
        };
        let a = removed.ok_or_else(|| {
            Error::InvalidHandle(format!(
                "stream {:#x} is not a stream hipmem adopted on device {}",
                raw.handle, raw.device
            ))
        })?;
        self.notify_stream_retiring(a.device, a.clock.stream_id);
        Ok(())
    }

    /// The stream behind a raw handle of this runtime (the C ABI's lookup):
    /// handle 0 is the device's null stream; a destroyed or unknown handle is
    /// InvalidHandle.
    pub fn stream_from_raw(&self, raw: RawStream) -> Result<CoreStream> {
        self.check_device(raw.device)?;
        if raw.is_null() {
            return self.null_stream(raw.device);
        }
        // The upgraded handle is dropped (if at all) after the lock is
        // released: dropping the last one destroys the stream, which takes it.
        let found = self
            .inner
            .streams
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&raw.handle)
            .and_then(|w| w.upgrade());
        if let Some(state) = found.filter(|s| s.raw.device == raw.device) {
            return Ok(CoreStream { state });
        }
        // A stream adopted earlier (no backend call).
        self.adopted_stream(raw).ok_or_else(|| {
            Error::InvalidHandle(format!("stream {:#x} does not exist or was destroyed", raw.handle))
        })
    }

    /// Every live stream clock of `device`, the null stream's included.
    pub fn clocks_of(&self, device: usize) -> Vec<(Arc<StreamClock>, RawStream)> {
        let mut clocks = Vec::new();
        if let Some(null) = self.inner.null_clocks.get(device) {
            clocks.push((Arc::clone(null), RawStream::null(device)));
        }
        // Upgrade under the lock, but let the upgraded handles go only after
        // it is released: dropping the last one destroys the stream, and
        // that takes the same lock.
        let live: Vec<Arc<StreamState>> = {
            let streams = self.inner.streams.lock().unwrap_or_else(|p| p.into_inner());
            streams.values().filter_map(|w| w.upgrade()).collect()
        };
        for s in &live {
            if s.raw.device == device {
                clocks.push((Arc::clone(&s.clock), s.raw));
            }
        }
        drop(live);
        let adopted = self.inner.adopted.lock().unwrap_or_else(|p| p.into_inner());
        for (&handle, a) in adopted.iter().filter(|(_, a)| a.device == device) {
            clocks.push((Arc::clone(&a.clock), RawStream { device, handle }));
        }
        drop(adopted);
        clocks
    }

    /// `hipDeviceSynchronize`: waits for every stream of the device; work
    /// ordered before it is then complete, and the subsystems hear of it
    /// (pools apply their release thresholds).
    pub fn device_synchronize(&self, device: usize) -> Result<()> {
        self.check_device(device)?;
        let points: Vec<_> = self.clocks_of(device).into_iter().map(|(c, _)| (c.advance(), c)).collect();
        self.backend().device_synchronize(device)?;
        for (tag, clock) in points {
            clock.mark_completed(tag);
            self.retire_completed_markers(device, &clock);
        }
        self.notify_device_synchronized(device);
        Ok(())
    }

    /// An event recorded at `point` completed: the stream completed
    /// everything before it, and the subsystems hear of it.
    pub fn point_completed(&self, point: &OrderPoint, device: usize) {
        point.clock.mark_completed(point.tag);
        self.retire_completed_markers(device, &point.clock);
        self.notify_stream_synchronized(device, point.clock.stream_id);
    }
}
