//! Events: markers recorded in streams, for waiting, querying and timing.
#![forbid(unsafe_code)]

use std::sync::Arc;

use crate::backend::{EventFlags, RawEvent};
use crate::error::Result;
use crate::runtime::Runtime;
use crate::stream::Stream;

pub(crate) struct EventInner {
    pub(crate) rt: Runtime,
    pub(crate) raw: RawEvent,
    pub(crate) flags: EventFlags,
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
        f.debug_struct("Event")
            .field("raw", &self.inner.raw)
            .field("flags", &self.inner.flags)
            .finish()
    }
}

impl Event {
    pub(crate) fn create(rt: &Runtime, device: usize, flags: EventFlags) -> Result<Event> {
        rt.check_device(device)?;
        let raw = rt.backend().event_create(device, flags)?;
        Ok(Event {
            inner: Arc::new(EventInner {
                rt: rt.clone(),
                raw,
                flags,
            }),
        })
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
    pub fn record(&self, stream: &Stream) -> Result<()> {
        self.inner
            .rt
            .backend()
            .event_record(self.inner.raw, stream.raw())
    }

    /// Whether the recorded work has completed (`hipEventQuery`; a never
    /// recorded event counts as complete).
    pub fn query(&self) -> Result<bool> {
        self.inner.rt.backend().event_query(self.inner.raw)
    }

    /// Waits for the recorded work (`hipEventSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.inner.rt.backend().event_synchronize(self.inner.raw)
    }

    /// Milliseconds from `self`'s completion to `end`'s (`hipEventElapsedTime`).
    /// Both must be recorded and complete (NotReady otherwise) and have timing.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        self.inner
            .rt
            .backend()
            .event_elapsed_ms(self.inner.raw, end.inner.raw)
    }
}
