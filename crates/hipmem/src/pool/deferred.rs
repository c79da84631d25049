//! Physical memory given back off the caller's thread.
//!
//! Giving a physical allocation back to the driver is the dearest call a
//! pool makes: on an H200 (driver 13), `cuMemRelease` took 50–90 µs per
//! 128 MiB allocation, 1.8–3.2 ms for the 4.5 GiB a large inference batch
//! leaves behind, where unmapping the same memory took 0.6 ms and creating,
//! mapping and giving access to it again 1.5–1.9 ms. On the same machine a
//! release running on another thread did not delay the caller's event
//! records and queries, stream queries, asynchronous memsets or CPU work
//! (only the driver's own memory calls wait for it). So where a pool gives
//! memory back on its allocation path (idle release, and what a large
//! growth unmapped but did not map again), it unmaps on the caller's
//! thread (the addresses are the pool's again at once, and its reserved
//! bytes drop) and queues the physical allocations here; one worker thread
//! gives them back.
//!
//! What is queued is still the pool's until the worker reaches it: a growth
//! that needs an allocation of a queued size takes it back instead of
//! creating one ([`Deferred::take`]), so memory held never exceeds what the
//! pool held before the release. The worker waits [`GRACE`] before it
//! starts, so that the growth that often follows a release at once (the
//! next batch's first large block) maps memory the release unmapped instead
//! of paying to give it back and to create it again. Whatever must be exact
//! waits for the queue to empty ([`Deferred::wait_empty`]): trim, the
//! release threshold at a synchronization, a creation the device refuses
//! for lack of memory, and the pool's end.
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::core::{CallCounts, lock};
use crate::backend::Backend;
use crate::backend::virtual_memory::VirtualMemory;

/// Physical allocations (handle, bytes) waiting to go back, and the worker
/// that gives them back.
pub(super) struct Deferred {
    shared: Arc<Shared>,
}

struct Shared {
    /// Where the memory goes back, and where that is counted.
    backend: Arc<dyn Backend>,
    calls: Arc<CallCounts>,
    state: Mutex<State>,
    /// Signalled when the worker stops (the queue is empty).
    idle: Condvar,
    /// Signalled when the worker must not wait out its grace.
    hurry: Condvar,
    /// Bytes queued, read without the lock.
    queued_bytes: AtomicU64,
}

#[derive(Default)]
struct State {
    queue: VecDeque<(u64, u64)>,
    /// Whether a worker runs (it stops once the queue is empty).
    worker: bool,
    /// Set while someone waits for the queue to empty: no grace.
    hurried: bool,
    /// Tests only: no worker starts while set.
    #[cfg(test)]
    held: bool,
}

impl Deferred {
    /// An empty queue whose memory goes back to `backend`, counted in
    /// `calls` as each allocation goes.
    pub(super) fn new(backend: Arc<dyn Backend>, calls: Arc<CallCounts>) -> Deferred {
        Deferred {
            shared: Arc::new(Shared {
                backend,
                calls,
                state: Mutex::default(),
                idle: Condvar::new(),
                hurry: Condvar::new(),
                queued_bytes: AtomicU64::new(0),
            }),
        }
    }

    /// Queues the unmapped physical allocations `handles` (handle, bytes)
    /// to go back. Starts a worker if none runs; where no thread can be
    /// started, gives them back here.
    pub(super) fn give_back(&self, handles: Vec<(u64, u64)>) {
        if handles.is_empty() {
            return;
        }
        let bytes: u64 = handles.iter().map(|&(_, len)| len).sum();
        let mut st = lock(&self.shared.state);
        st.queue.extend(handles);
        self.shared.queued_bytes.fetch_add(bytes, Ordering::Relaxed);
        #[cfg(test)]
        if st.held {
            return;
        }
        if st.worker {
            return;
        }
        st.worker = true;
        drop(st);
        let shared = Arc::clone(&self.shared);
        let started =
            std::thread::Builder::new().name("hipmem-release".into()).spawn(move || shared.work(GRACE, true));
        if let Err(e) = started {
            tracing::debug!(target: "hipmem::pool", "no release thread ({e}): giving memory back on the caller's thread");
            self.shared.work(std::time::Duration::ZERO, false);
        }
    }

    /// Takes back a queued allocation of exactly `len` bytes that the
    /// worker has not reached yet: its handle, to map again.
    pub(super) fn take(&self, len: u64) -> Option<u64> {
        if self.shared.queued_bytes.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut st = lock(&self.shared.state);
        let i = st.queue.iter().position(|&(_, l)| l == len)?;
        let (handle, _) = st.queue.remove(i)?;
        self.shared.queued_bytes.fetch_sub(len, Ordering::Relaxed);
        Some(handle)
    }

    /// Bytes queued and not yet given back (the one the worker is giving
    /// back now excluded).
    pub(super) fn queued_bytes(&self) -> u64 {
        self.shared.queued_bytes.load(Ordering::Relaxed)
    }

    /// Whether the worker runs (something is queued or going back now).
    pub(super) fn busy(&self) -> bool {
        lock(&self.shared.state).worker
    }

    /// Waits until everything queued has gone back (what no worker is
    /// giving back goes back here).
    pub(super) fn wait_empty(&self) {
        let mut st = lock(&self.shared.state);
        if !st.worker && !st.queue.is_empty() {
            st.worker = true;
            drop(st);
            self.shared.work(std::time::Duration::ZERO, false);
            return;
        }
        if st.worker {
            st.hurried = true;
            self.shared.hurry.notify_all();
        }
        while st.worker {
            st = self.shared.idle.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Shared {
    /// The worker: gives back what is queued, oldest first, until nothing
    /// is (`on_worker`: on the worker thread, counted apart).
    fn work(&self, grace: std::time::Duration, on_worker: bool) {
        let deadline = std::time::Instant::now() + grace;
        let mut st = lock(&self.state);
        while !st.hurried && !grace.is_zero() {
            let now = std::time::Instant::now();
            if now >= deadline {
                break;
            }
            st = self.hurry.wait_timeout(st, deadline - now).unwrap_or_else(|p| p.into_inner()).0;
        }
        drop(st);
        loop {
            let next = {
                let mut st = lock(&self.state);
                match st.queue.pop_front() {
                    Some(next) => {
                        self.queued_bytes.fetch_sub(next.1, Ordering::Relaxed);
                        next
                    }
                    None => {
                        st.worker = false;
                        st.hurried = false;
                        self.idle.notify_all();
                        return;
                    }
                }
            };
            if let Some(vm) = self.backend.virtual_memory() {
                if release_now(vm, &self.calls, next.0, next.1) && on_worker {
                    CallCounts::add(&self.calls.released_on_worker);
                }
            }
        }
    }
}

/// How long a worker waits before it gives anything back: what a growth
/// right after a release needs is taken back, not created again. Replayed
/// on an H200 (three replays each, second halves against the driver's
/// pool), variable-length inference took 1.13-1.22x the driver's time per
/// operation with 2 ms and 1.22-1.33x with none (1.29-1.37x releasing on
/// the caller's thread); one recording 1.11-1.40x (none: 1.58-2.05x); 10 ms
/// was no better than 2. Memory is the same either way: the pool's reserved
/// bytes drop at the release, and a growth takes back before it creates.
const GRACE: std::time::Duration = std::time::Duration::from_millis(2);

/// Gives back the unmapped physical allocation `handle` of `len` bytes now,
/// counted in `calls`; a failure is logged (the memory is lost to the pool
/// either way). Returns whether it went.
pub(super) fn release_now(vm: &dyn VirtualMemory, calls: &CallCounts, handle: u64, len: u64) -> bool {
    match vm.mem_release(handle) {
        Ok(()) => {
            CallCounts::add(&calls.granules_released);
            CallCounts::add_bytes(&calls.bytes_released, len);
            true
        }
        Err(e) => {
            tracing::warn!(target: "hipmem", "releasing pool memory failed: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::host::{HostBackend, HostConfig};

    const MIB: u64 = 1 << 20;

    fn setup() -> (Arc<dyn Backend>, Arc<CallCounts>, Deferred) {
        let backend: Arc<dyn Backend> = Arc::new(HostBackend::new(HostConfig::default()).unwrap());
        let calls: Arc<CallCounts> = Arc::default();
        let d = Deferred::new(Arc::clone(&backend), Arc::clone(&calls));
        (backend, calls, d)
    }

    fn create(backend: &Arc<dyn Backend>, sizes: &[u64]) -> Vec<(u64, u64)> {
        let vm = backend.virtual_memory().unwrap();
        sizes.iter().map(|&len| (vm.mem_create(0, len, 0).unwrap(), len)).collect()
    }

    /// What the worker has not reached can be taken back, by exact size;
    /// the rest goes back, counted, and `wait_empty` returns only then.
    #[test]
    fn queued_memory_is_taken_back_or_given_back_counted() {
        let (backend, calls, d) = setup();
        lock(&d.shared.state).held = true;
        let handles = create(&backend, &[2 * MIB, 4 * MIB, 2 * MIB]);
        d.give_back(handles.clone());
        assert_eq!(d.queued_bytes(), 8 * MIB);
        assert!(!d.busy(), "held: no worker");
        assert_eq!(d.take(8 * MIB), None, "no allocation of that size");
        assert_eq!(d.take(4 * MIB), Some(handles[1].0));
        assert_eq!(d.queued_bytes(), 4 * MIB);
        // Released: the worker starts with the next batch.
        lock(&d.shared.state).held = false;
        d.give_back(create(&backend, &[6 * MIB]));
        d.wait_empty();
        assert_eq!(d.queued_bytes(), 0);
        assert!(!d.busy());
        assert_eq!(d.take(2 * MIB), None, "everything went back");
        let snap = calls.snapshot();
        assert_eq!((snap.granules_released, snap.bytes_released), (3, 10 * MIB));
        assert_eq!(snap.released_on_worker, 3, "on the worker thread, counted apart");
        assert_eq!(snap.on_callers(), 0);
        let vm = backend.virtual_memory().unwrap();
        assert!(vm.mem_release(handles[0].0).is_err(), "given back already");
        vm.mem_release(handles[1].0).expect("the allocation taken back is still live");
    }

    /// What is queued with no worker to give it back (one that could not
    /// start) goes back in `wait_empty`.
    #[test]
    fn waiting_gives_back_what_no_worker_does() {
        let (backend, calls, d) = setup();
        lock(&d.shared.state).held = true;
        d.give_back(create(&backend, &[2 * MIB, 2 * MIB]));
        lock(&d.shared.state).held = false;
        assert!(!d.busy());
        d.wait_empty();
        assert_eq!(d.queued_bytes(), 0);
        let snap = calls.snapshot();
        assert_eq!(snap.bytes_released, 4 * MIB);
        assert_eq!((snap.released_on_worker, snap.on_callers()), (0, 2), "on the waiting thread");
    }

    /// Batches queued while the worker runs go back with it; an empty
    /// batch starts nothing.
    #[test]
    fn batches_from_many_threads_all_go_back() {
        let (backend, calls, d) = setup();
        d.give_back(Vec::new());
        assert!(!d.busy());
        std::thread::scope(|s| {
            for _ in 0..4 {
                let (d, backend) = (&d, &backend);
                s.spawn(move || {
                    for _ in 0..8 {
                        d.give_back(create(backend, &[2 * MIB, 2 * MIB]));
                    }
                });
            }
        });
        d.wait_empty();
        let snap = calls.snapshot();
        assert_eq!((snap.granules_released, snap.bytes_released), (64, 128 * MIB));
        assert_eq!(d.queued_bytes(), 0);
    }

    /// A pool's growth that the device refuses while memory the pool gave
    /// back is still queued waits for the queue and tries again, and gives
    /// back nothing else for it: on an emulated device of 1 GiB, 896 MiB
    /// queued (groups of 128 MiB) and a request of 200 MiB in units mapped
    /// alone (none is taken back). The pool's last resort before
    /// OutOfMemory (releasing all unused memory, then growing again) would
    /// also serve it, after giving back what the refused growth had made.
    #[test]
    fn a_growth_the_device_refuses_waits_for_queued_memory() {
        use crate::backend::BackendChoice;
        use crate::pool::PoolAttribute;
        use crate::pool::mem_pool::PoolRef;
        use crate::runtime::Runtime;
        let config = HostConfig { devices: 1, memory_per_device: 1 << 30, ..HostConfig::default() };
        let rt = Runtime::builder().backend(BackendChoice::Host).host_config(config).build().unwrap();
        let dev = rt.device(0).unwrap();
        let pool = dev.create_mem_pool(0, 0).unwrap();
        let PoolRef::Hipmem(core) = &pool.pool else { panic!("a hipmem pool") };
        assert!(pool.mapping_unit().is_some(), "the host backend has virtual memory");
        pool.set_planning(false).unwrap();
        let s = dev.create_stream().unwrap();
        // Known complete, without the synchronization's own release.
        let complete = || {
            pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
            s.synchronize().unwrap();
            pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
        };
        let blocks: Vec<_> = (0..7).map(|_| pool.alloc_raw(128 * MIB, &s).unwrap()).collect();
        for b in blocks {
            rt.free_async(b, &s).unwrap();
        }
        complete();
        // The pool gives its memory back through the queue, held.
        lock(&core.deferred.shared.state).held = true;
        let mut unmapped = Vec::new();
        let released = core.release_unused_keeping(&rt, u64::MAX, 0, Some(&mut unmapped));
        assert_eq!(released, 896 * MIB);
        core.release_later(unmapped);
        lock(&core.deferred.shared.state).held = false;
        assert_eq!((pool.stats().reserved_current, core.deferred.queued_bytes()), (0, 896 * MIB));
        // Each unit mapped alone now: nothing queued is of its size.
        pool.set_growth_mapping(0).unwrap();
        let before = pool.backend_calls().unwrap();
        let big = pool.alloc_raw(200 * MIB, &s).expect("served once the queued memory went back");
        let after = pool.backend_calls().unwrap();
        assert_eq!(core.deferred.queued_bytes(), 0);
        // Only the queue went back, not the units the refused growth had
        // made (the last resort would give those back and make them again).
        assert_eq!(after.bytes_released - before.bytes_released, 896 * MIB, "{before:?} -> {after:?}");
        assert_eq!(after.bytes_created - before.bytes_created, 200 * MIB, "{before:?} -> {after:?}");
        assert_eq!(pool.stats().reserved_current, 200 * MIB);
        rt.free_async(big, &s).unwrap();
        s.synchronize().unwrap();
        pool.check_invariants().unwrap();
    }
}
