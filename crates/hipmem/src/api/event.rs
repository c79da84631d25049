//! Events: markers recorded in streams, for waiting, querying and timing.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};

use crate::backend::{EventFlags, RawEvent};
use crate::error::{Error, Result};
use crate::runtime::ordering::OrderPoint;
use crate::runtime::{CoreStream, Runtime};

pub(crate) struct EventInner {
    pub(crate) rt: Runtime,
    pub(crate) raw: RawEvent,
    pub(crate) flags: EventFlags,
    /// The point in its stream's order of the latest record.
    pub(crate) point: Mutex<Option<OrderPoint>>,
}

impl Drop for EventInner {
    fn drop(&mut self) {
        if let Err(e) = self.rt.backend().event_destroy(self.raw) {
            self.rt.record_drop_error("hipEventDestroy", e);
        }
    }
}

/// An event (`hipEvent_t`). Clones share the same event; it is destroyed when
/// the last clone is dropped.
#[derive(Clone)]
pub struct Event {
    pub(crate) inner: Arc<EventInner>,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("raw", &self.inner.raw).field("flags", &self.inner.flags).finish()
    }
}

impl Event {
    pub(crate) fn create(rt: &Runtime, device: usize, flags: EventFlags) -> Result<Event> {
        rt.check_device(device)?;
        if flags.interprocess && !flags.disable_timing {
            return Err(Error::InvalidValue("hipEventInterprocess requires hipEventDisableTiming".into()));
        }
        let raw = rt.backend().event_create(device, flags)?;
        Ok(Event { inner: Arc::new(EventInner { rt: rt.clone(), raw, flags, point: Mutex::new(None) }) })
    }

    /// The point of the latest record, if any.
    pub fn point(&self) -> Option<OrderPoint> {
        self.inner.point.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn completed(&self) {
        if let Some(point) = self.point() {
            self.inner.rt.point_completed(&point, self.device());
        }
    }

    /// The backend handle.
    pub fn raw(&self) -> RawEvent {
        self.inner.raw
    }

    /// The flags it was created with.
    pub fn flags(&self) -> EventFlags {
        self.inner.flags
    }

    /// The device it belongs to.
    pub fn device(&self) -> usize {
        self.inner.raw.device
    }

    /// Records the event at the current end of `stream` (`hipEventRecord`).
    pub fn record(&self, stream: &CoreStream) -> Result<()> {
        let point = stream.point();
        self.inner.rt.backend().event_record(self.inner.raw, stream.raw())?;
        *self.inner.point.lock().unwrap_or_else(|p| p.into_inner()) = Some(point);
        Ok(())
    }

    /// Whether the recorded work has completed (`hipEventQuery`; a never
    /// recorded event counts as complete).
    pub fn query(&self) -> Result<bool> {
        let done = self.inner.rt.backend().event_query(self.inner.raw)?;
        if done {
            if let Some(point) = self.point() {
                point.clock.mark_completed(point.tag);
            }
        }
        Ok(done)
    }

    /// Waits for the recorded work (`hipEventSynchronize`); frees made on the
    /// recorded stream before the record are then complete.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.rt.backend().event_synchronize(self.inner.raw)?;
        self.completed();
        Ok(())
    }

    /// Milliseconds from `self`'s completion to `end`'s (`hipEventElapsedTime`).
    /// Both must be recorded and complete (NotReady otherwise) and have timing.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        self.inner.rt.backend().event_elapsed_ms(self.inner.raw, end.inner.raw)
    }
}
