//! Emulated streams and events.
//!
//! Each stream is a queue drained by its own worker thread, so asynchronous
//! calls really return before their work runs. Every queued operation gets a
//! sequence number; the worker publishes the number of the last completed
//! one, which is all that synchronization, queries and cross-stream waits need.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::backend::{FillValue, HostCallback};

/// One operation in a stream's queue. Addresses were validated when queued.
pub enum Op {
    /// Copy `len` bytes (overlap allowed).
    Copy { dst: u64, src: u64, len: u64 },
    /// Write `count` elements of `value`.
    Fill { dst: u64, value: FillValue, count: u64 },
    /// `data[i] = i * k` for 32-bit ints.
    Iota { dst: u64, count: u64, k: i32 },
    /// Sleep, then write a 32-bit flag.
    Delay { duration: Duration, flag: u64, value: u32 },
    /// Run a host function.
    HostFunc(HostCallback),
    /// Complete record number `generation` of an event.
    RecordEvent(Arc<HostEvent>, u64),
    /// Wait until an event's record number `generation` has completed.
    WaitEvent(Arc<HostEvent>, u64),
    /// Wait until another stream has completed operation `seq`.
    WaitStream(Arc<StreamShared>, u64),
}

struct Queue {
    ops: VecDeque<(u64, Op)>,
    shutdown: bool,
}

/// The state a stream's worker and its callers share.
pub struct StreamShared {
    /// Backend handle.
    pub handle: u64,
    /// Device ordinal.
    pub device: usize,
    /// Whether the stream skips legacy null-stream synchronization.
    pub non_blocking: bool,
    queue: Mutex<Queue>,
    work_ready: Condvar,
    submitted: AtomicU64,
    completed: AtomicU64,
    waiters: AtomicUsize,
    progress_lock: Mutex<()>,
    progress: Condvar,
    exited: AtomicBool,
}

impl std::fmt::Debug for StreamShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamShared")
            .field("handle", &self.handle)
            .field("device", &self.device)
            .field("submitted", &self.submitted.load(Ordering::Relaxed))
            .field("completed", &self.completed.load(Ordering::Relaxed))
            .finish()
    }
}

impl StreamShared {
    /// Creates a stream and starts its worker thread.
    pub fn spawn(handle: u64, device: usize, non_blocking: bool) -> std::io::Result<Arc<StreamShared>> {
        let shared = Arc::new(StreamShared {
            handle,
            device,
            non_blocking,
            queue: Mutex::new(Queue { ops: VecDeque::new(), shutdown: false }),
            work_ready: Condvar::new(),
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            waiters: AtomicUsize::new(0),
            progress_lock: Mutex::new(()),
            progress: Condvar::new(),
            exited: AtomicBool::new(false),
        });
        let worker = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(format!("hipmem-stream-{device}-{handle:#x}"))
            .spawn(move || worker.run())?;
        Ok(shared)
    }

    /// Appends operations (in order) and returns the sequence number of the last.
    pub fn push_all(&self, ops: impl IntoIterator<Item = Op>) -> u64 {
        let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let mut seq = self.submitted.load(Ordering::Relaxed);
        for op in ops {
            seq += 1;
            queue.ops.push_back((seq, op));
        }
        self.submitted.store(seq, Ordering::SeqCst);
        drop(queue);
        self.work_ready.notify_one();
        seq
    }

    /// Sequence number of the last queued operation.
    pub fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::SeqCst)
    }

    /// Sequence number of the last completed operation.
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::SeqCst)
    }

    /// Whether every queued operation has completed.
    pub fn is_idle(&self) -> bool {
        self.completed() >= self.submitted()
    }

    /// Blocks until operation `seq` has completed.
    pub fn wait_for(&self, seq: u64) {
        if self.completed() >= seq {
            return;
        }
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = self.progress_lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.completed.load(Ordering::SeqCst) < seq {
            guard = self.progress.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
        drop(guard);
        self.waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Blocks until everything queued so far has completed.
    pub fn synchronize(&self) {
        self.wait_for(self.submitted());
    }

    /// Stops accepting work; the worker exits once the queue is drained.
    pub fn shut_down(&self) {
        self.queue.lock().unwrap_or_else(|p| p.into_inner()).shutdown = true;
        self.work_ready.notify_one();
    }

    /// Whether the worker has exited (the stream was destroyed and drained).
    pub fn has_exited(&self) -> bool {
        self.exited.load(Ordering::SeqCst)
    }

    fn run(self: Arc<Self>) {
        loop {
            let next = {
                let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(item) = queue.ops.pop_front() {
                        break Some(item);
                    }
                    if queue.shutdown {
                        break None;
                    }
                    queue = self.work_ready.wait(queue).unwrap_or_else(|p| p.into_inner());
                }
            };
            let Some((seq, op)) = next else { break };
            execute(op);
            self.completed.store(seq, Ordering::SeqCst);
            if self.waiters.load(Ordering::SeqCst) > 0 {
                let _guard = self.progress_lock.lock().unwrap_or_else(|p| p.into_inner());
                self.progress.notify_all();
            }
        }
        self.exited.store(true, Ordering::SeqCst);
    }
}

fn execute(op: Op) {
    match op {
        Op::Copy { dst, src, len } => {
            // SAFETY: both ranges were validated against the region table (or
            // lent through an unsafe HostSpan promise) when the copy was queued,
            // and memory is only unmapped after the device has drained.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len as usize) }
        }
        Op::Fill { dst, value, count } => {
            let count = count as usize;
            // SAFETY: the range [dst, dst + count * size) was validated when queued.
            unsafe {
                match value {
                    FillValue::U8(v) => std::ptr::write_bytes(dst as *mut u8, v, count),
                    FillValue::U16(v) => {
                        let p = dst as *mut u16;
                        for i in 0..count {
                            p.add(i).write_unaligned(v);
                        }
                    }
                    FillValue::U32(v) => {
                        let p = dst as *mut u32;
                        for i in 0..count {
                            p.add(i).write_unaligned(v);
                        }
                    }
                }
            }
        }
        Op::Iota { dst, count, k } => {
            let p = dst as *mut i32;
            for i in 0..count as usize {
                // SAFETY: the range [dst, dst + 4 * count) was validated when queued.
                unsafe { p.add(i).write_unaligned((i as i32).wrapping_mul(k)) }
            }
        }
        Op::Delay { duration, flag, value } => {
            let end = Instant::now() + duration;
            loop {
                let now = Instant::now();
                if now >= end {
                    break;
                }
                std::thread::sleep(end - now);
            }
            // SAFETY: the 4-byte flag was validated when queued. A volatile write
            // so that it is one store another thread may poll.
            unsafe { (flag as *mut u32).write_volatile(value) }
        }
        Op::HostFunc(callback) => {
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(callback)).is_err() {
                tracing::error!(target: "hipmem", "a host function panicked; the stream goes on");
            }
        }
        Op::RecordEvent(event, generation) => event.complete(generation),
        Op::WaitEvent(event, generation) => event.wait_for(generation),
        Op::WaitStream(stream, seq) => stream.wait_for(seq),
    }
}

#[derive(Debug, Default)]
struct EventState {
    /// Number of records so far.
    recorded: u64,
    /// Highest record number whose work has completed.
    done: u64,
    /// When the highest completed record completed.
    time: Option<Instant>,
}

/// An emulated event.
#[derive(Debug)]
pub struct HostEvent {
    /// Backend handle.
    pub handle: u64,
    /// Device ordinal.
    pub device: usize,
    /// Whether timing is disabled.
    pub disable_timing: bool,
    state: Mutex<EventState>,
    cv: Condvar,
}

impl HostEvent {
    /// Creates an event that was never recorded.
    pub fn new(handle: u64, device: usize, disable_timing: bool) -> HostEvent {
        HostEvent { handle, device, disable_timing, state: Mutex::default(), cv: Condvar::new() }
    }

    /// Starts a new record and returns its number.
    pub fn begin_record(&self) -> u64 {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.recorded += 1;
        s.recorded
    }

    /// Marks record `generation` complete (a later one stays as it is).
    pub fn complete(&self, generation: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if generation > s.done {
            s.done = generation;
            s.time = Some(Instant::now());
        }
        drop(s);
        self.cv.notify_all();
    }

    /// The number of the latest record (0 if never recorded).
    pub fn latest(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).recorded
    }

    /// Whether the latest record has completed.
    pub fn is_complete(&self) -> bool {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.done >= s.recorded
    }

    /// Blocks until record number `generation` has completed.
    pub fn wait_for(&self, generation: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.done < generation {
            s = self.cv.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// `Some(time)` of the latest record if it has completed, `None` if it is
    /// still pending; `Err(())` if the event was never recorded.
    pub fn completion_time(&self) -> Result<Option<Instant>, ()> {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.recorded == 0 {
            return Err(());
        }
        Ok(if s.done >= s.recorded { s.time } else { None })
    }
}
