//! What the host knows about the order of work between streams.
//!
//! The pool's reuse rules need three facts about a free made on stream `T`:
//! 1. has `T` itself moved past it (the same stream may reuse at once),
//! 2. has stream `U` waited on an event recorded on `T` after it
//!    (`hipStreamWaitEvent`: follow event dependencies),
//! 3. has the device completed it (opportunistic reuse, release, trim).
//!
//! Each stream has a [`StreamClock`]. Its *epoch* counts the points in the
//! stream's order that the host can name: every event record, and every host
//! synchronization, starts a new epoch. A free is tagged with the epoch it was
//! made in; a point recorded at epoch `t` follows every free tagged `< t`.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend::{Backend, RawEvent};

/// A point in a stream's order: frees tagged below `tag` came before it.
#[derive(Clone, Debug)]
pub struct OrderPoint {
    /// The stream's clock.
    pub clock: Arc<StreamClock>,
    /// The epoch that began at this point.
    pub tag: u64,
    /// What the stream knew about other streams at this point (transitive
    /// dependencies: waiting on this point also waits on those).
    pub known: Vec<(u64, u64)>,
}

/// The ordering facts of one stream.
#[derive(Debug)]
pub struct StreamClock {
    /// The stream's process-unique id.
    pub stream_id: u64,
    epoch: AtomicU64,
    completed: AtomicU64,
    known: Mutex<Vec<(u64, u64)>>,
    /// Events recorded by hipmem itself (from the event pool) to learn when
    /// the stream passes a point: (tag, event), oldest first.
    markers: Mutex<Vec<(u64, RawEvent)>>,
}

impl StreamClock {
    /// A clock for a new stream.
    pub fn new(stream_id: u64) -> StreamClock {
        StreamClock {
            stream_id,
            epoch: AtomicU64::new(1),
            completed: AtomicU64::new(0),
            known: Mutex::new(Vec::new()),
            markers: Mutex::new(Vec::new()),
        }
    }

    /// Remembers a marker event recorded at point `tag`.
    pub fn add_marker(&self, tag: u64, event: RawEvent) {
        self.markers.lock().unwrap_or_else(|p| p.into_inner()).push((tag, event));
    }

    /// The tag of the newest marker not yet known complete, if any.
    pub fn newest_pending_marker(&self) -> Option<u64> {
        self.markers.lock().unwrap_or_else(|p| p.into_inner()).last().map(|&(t, _)| t)
    }

    /// Queries the markers oldest first, marks the stream complete up to the
    /// newest one that has completed, and returns the completed markers'
    /// events for reuse.
    pub fn refresh(&self, backend: &dyn Backend) -> Vec<RawEvent> {
        let mut markers = self.markers.lock().unwrap_or_else(|p| p.into_inner());
        let mut done = 0;
        for &(tag, event) in markers.iter() {
            // An error (a destroyed context) leaves the marker pending.
            if backend.event_query(event).unwrap_or(false) {
                self.mark_completed(tag);
                done += 1;
            } else {
                break;
            }
        }
        markers.drain(..done).map(|(_, e)| e).collect()
    }

    /// Drops every marker whose point is already known complete (after a
    /// synchronization) and returns their events for reuse.
    pub fn retire_completed_markers(&self) -> Vec<RawEvent> {
        let completed = self.completed_tag();
        let mut markers = self.markers.lock().unwrap_or_else(|p| p.into_inner());
        let keep = markers.iter().position(|&(t, _)| t > completed).unwrap_or(markers.len());
        markers.drain(..keep).map(|(_, e)| e).collect()
    }

    /// The tag for a free made now.
    pub fn free_tag(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Starts a new epoch (an event record or synchronization at the current
    /// end of the stream) and returns its tag.
    pub fn advance(&self) -> u64 {
        self.epoch.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Records that the stream has completed everything before point `tag`.
    pub fn mark_completed(&self, tag: u64) {
        self.completed.fetch_max(tag, Ordering::AcqRel);
    }

    /// Whether the free tagged `free_tag` is known to have completed.
    pub fn is_complete(&self, free_tag: u64) -> bool {
        free_tag < self.completed.load(Ordering::Acquire)
    }

    /// Everything before this tag is known complete.
    pub fn completed_tag(&self) -> u64 {
        self.completed.load(Ordering::Acquire)
    }

    /// A point at the current end of this stream (starts a new epoch).
    pub fn point(self: &Arc<Self>) -> OrderPoint {
        let tag = self.advance();
        OrderPoint { clock: Arc::clone(self), tag, known: self.known_snapshot() }
    }

    /// What this stream knows of others: (stream id, tag) pairs.
    pub fn known_snapshot(&self) -> Vec<(u64, u64)> {
        self.known.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records that later work on this stream waits for `point`.
    pub fn learn(&self, point: &OrderPoint) {
        let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let mut merge = |stream: u64, tag: u64| {
            if stream == self.stream_id {
                return;
            }
            match known.iter_mut().find(|(s, _)| *s == stream) {
                Some((_, t)) => *t = (*t).max(tag),
                None => known.push((stream, tag)),
            }
        };
        merge(point.clock.stream_id, point.tag);
        for &(s, t) in &point.known {
            merge(s, t);
        }
    }

    /// Whether later work on this stream is ordered after the free tagged
    /// `free_tag` on stream `other` (through waited-on events).
    pub fn knows(&self, other: u64, free_tag: u64) -> bool {
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        known.iter().any(|&(s, t)| s == other && free_tag < t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frees_before_a_point_are_covered_and_later_ones_not() {
        let t = Arc::new(StreamClock::new(1));
        let u = StreamClock::new(2);
        let before = t.free_tag();
        let point = t.point();
        let after = t.free_tag();
        assert!(!u.knows(1, before));
        u.learn(&point);
        assert!(u.knows(1, before));
        assert!(!u.knows(1, after));
        assert!(!t.is_complete(before));
        t.mark_completed(point.tag);
        assert!(t.is_complete(before));
        assert!(!t.is_complete(after));
    }

    #[test]
    fn knowledge_is_transitive() {
        let a = Arc::new(StreamClock::new(1));
        let b = Arc::new(StreamClock::new(2));
        let c = StreamClock::new(3);
        let free_on_a = a.free_tag();
        b.learn(&a.point());
        c.learn(&b.point());
        assert!(c.knows(1, free_on_a));
    }
}
