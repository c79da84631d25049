//! Events hipmem records for itself: markers that tell when a stream passes
//! a point (pools use them to learn that frees completed, page-locked
//! buffers to wait for copies), taken from a per-device pool of events so
//! that recording one costs no event creation.
#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};

use super::Runtime;
use super::ordering::StreamClock;
use crate::backend::{Backend, EventFlags, RawEvent, RawStream};
use crate::error::Result;

/// Idle marker events, per device.
pub(crate) struct EventPool {
    free: Vec<Mutex<Vec<RawEvent>>>,
}

impl EventPool {
    pub(crate) fn new(devices: usize) -> EventPool {
        EventPool { free: (0..devices).map(|_| Mutex::new(Vec::new())).collect() }
    }

    /// Destroys every idle event (the runtime is going away).
    pub(crate) fn destroy_all(&mut self, backend: &dyn Backend) {
        for (device, pool) in self.free.iter_mut().enumerate() {
            for event in pool.get_mut().unwrap_or_else(|e| e.into_inner()).drain(..) {
                if let Err(e) = backend.event_destroy(event) {
                    tracing::debug!(target: "hipmem", "destroying a pooled event of device {device}: {e}");
                }
            }
        }
    }
}

impl Runtime {
    /// An event from the event pool (timing disabled), or a new one.
    pub fn pooled_event(&self, device: usize) -> Result<RawEvent> {
        let pooled = self
            .inner
            .events
            .free
            .get(device)
            .and_then(|p| p.lock().unwrap_or_else(|e| e.into_inner()).pop());
        match pooled {
            Some(e) => Ok(e),
            None => {
                self.backend().event_create(device, EventFlags { disable_timing: true, ..Default::default() })
            }
        }
    }

    /// Returns marker events to the event pool.
    pub fn recycle_events(&self, device: usize, events: Vec<RawEvent>) {
        if events.is_empty() {
            return;
        }
        if let Some(pool) = self.inner.events.free.get(device) {
            pool.lock().unwrap_or_else(|e| e.into_inner()).extend(events);
        }
    }

    /// Records a marker event (from the event pool) at the current end of a
    /// stream; returns the point's tag and the event. The clock keeps the
    /// marker until it is known complete.
    pub fn record_marker(&self, clock: &Arc<StreamClock>, raw: RawStream) -> Result<(u64, RawEvent)> {
        let event = self.pooled_event(raw.device)?;
        let tag = clock.advance();
        if let Err(e) = self.backend().event_record(event, raw) {
            self.recycle_events(raw.device, vec![event]);
            return Err(e);
        }
        clock.add_marker(tag, event);
        Ok((tag, event))
    }

    /// Asks the device which of `clock`'s markers completed, marks the
    /// stream complete up to the newest of them and recycles their events.
    pub fn refresh_clock(&self, device: usize, clock: &StreamClock) {
        self.recycle_events(device, clock.refresh(self.backend().as_ref()));
    }

    /// Recycles the events of `clock`'s markers already known complete
    /// (after a synchronization).
    pub fn retire_completed_markers(&self, device: usize, clock: &StreamClock) {
        self.recycle_events(device, clock.retire_completed_markers());
    }
}
