//! The process-wide recorder: one bounded lock-free queue (`std::sync::mpsc`'s
//! array channel), one background writer thread.
//!
//! - Off: each event site loads [`STATE`] (relaxed) and branches; nothing else.
//! - On: the recording thread takes the time, finds its clone of the queue's
//!   sender in a thread-local (refreshed when a new trace starts) and pushes a
//!   48-byte event. It never wakes the writer: the writer drains the queue
//!   every [`TICK`] and writes the lines to the file (and to the kernel: it
//!   flushes after every drain), so a crash loses at most the last tick.
//!   A full queue first wakes the writer, then waits for room.
//! - The main thread's thread-local destructor, which glibc runs from
//!   `exit()` (return from `main` in Rust and C alike), stops the trace: the
//!   queue is drained and the end line written. A trace started on another
//!   thread while the main thread never records is flushed at exit only if
//!   the program calls [`stop`] or [`flush`].
//! - An error writing the file is reported once (`tracing::warn!`, and on
//!   stderr when no tracing subscriber is installed) and recording turns off.
#![forbid(unsafe_code)]

use std::cell::RefCell;
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::thread::Thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::format::{Event, EventKind, Header, TraceWriter};
use crate::error::{Error, Result};

/// `HIPMEM_TRACE` not read yet: the next event reads it.
const UNINIT: u8 = 0;
/// Not recording.
const OFF: u8 = 1;
/// Recording.
const ON: u8 = 2;

/// The one word every event site reads.
pub(super) static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Bumped at every start and stop: a thread's cached sender is stale when it differs.
static GENERATION: AtomicU64 = AtomicU64::new(0);
static CONTROL: Mutex<Control> = Mutex::new(Control { active: None, last: None });
static ENV_ONCE: Once = Once::new();
static BACKEND: Mutex<Option<String>> = Mutex::new(None);

/// Events the queue holds before a recording thread waits for the writer.
pub const QUEUE_EVENTS: usize = 1 << 16;
/// How often the writer drains the queue and flushes the file.
pub const TICK: Duration = Duration::from_millis(5);
/// How long [`flush`] and [`stop`] wait for the writer.
const WAIT: Duration = Duration::from_secs(10);

/// Where a trace stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TraceStatus {
    /// The file (None: no trace was started in this process).
    pub path: Option<PathBuf>,
    /// Whether events are being recorded now.
    pub recording: bool,
    /// Event lines written to the file so far.
    pub events_written: u64,
    /// Events lost (recorded while the writer had failed, or racing a stop).
    pub events_dropped: u64,
    /// The write error that stopped the trace, if any.
    pub error: Option<String>,
}

enum Msg {
    Event(Event),
    Flush(SyncSender<()>),
    Stop(SyncSender<()>),
}

/// What the writer and the recording threads share.
#[derive(Default)]
struct Shared {
    written: AtomicU64,
    dropped: AtomicU64,
    error: Mutex<Option<String>>,
}

struct Active {
    tx: SyncSender<Msg>,
    start: Instant,
    generation: u64,
    path: PathBuf,
    writer: Option<std::thread::JoinHandle<()>>,
    thread: Thread,
    pid: u32,
    shared: Arc<Shared>,
}

struct Control {
    active: Option<Active>,
    last: Option<TraceStatus>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn status_of(path: &Path, shared: &Shared, recording: bool) -> TraceStatus {
    TraceStatus {
        path: Some(path.to_path_buf()),
        recording,
        events_written: shared.written.load(Ordering::Relaxed),
        events_dropped: shared.dropped.load(Ordering::Relaxed),
        error: lock(&shared.error).clone(),
    }
}

/// Reports a problem once per trace: `tracing::warn!`, and stderr when no
/// subscriber would show it (a C program, say).
fn report(message: &str) {
    tracing::warn!("{message}");
    if !tracing::dispatcher::has_been_set() {
        eprintln!("hipmem: {message}");
    }
}

// ---- the per-thread side ------------------------------------------------------------

/// A thread's clone of the active trace's sender.
struct Local {
    generation: u64,
    sink: Option<Sink>,
}

#[derive(Clone)]
struct Sink {
    tx: SyncSender<Msg>,
    start: Instant,
    thread: Thread,
    pid: u32,
    shared: Arc<Shared>,
}

impl Sink {
    fn of(active: &Active) -> Sink {
        Sink {
            tx: active.tx.clone(),
            start: active.start,
            thread: active.thread.clone(),
            pid: active.pid,
            shared: Arc::clone(&active.shared),
        }
    }

    fn send(&self, event: Event) {
        match self.tx.try_send(Msg::Event(event)) {
            Ok(()) => {}
            Err(TrySendError::Full(msg)) => {
                if std::process::id() != self.pid {
                    // A forked child: no writer drains this queue here.
                    STATE.store(OFF, Ordering::Relaxed);
                    self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                self.thread.unpark();
                if self.tx.send(msg).is_err() {
                    self.shared.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

impl Local {
    fn sink(&mut self) -> Option<&Sink> {
        let generation = GENERATION.load(Ordering::Acquire);
        if generation != self.generation {
            let control = lock(&CONTROL);
            self.sink = control.active.as_ref().filter(|a| a.generation == generation).map(Sink::of);
            self.generation = generation;
        }
        self.sink.as_ref()
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        // glibc runs the exiting thread's thread-local destructors from
        // exit(); on the main thread that is the process ending.
        if STATE.load(Ordering::Acquire) == ON && is_main_thread() {
            self.sink = None;
            let _ = stop();
        }
    }
}

fn is_main_thread() -> bool {
    rustix::thread::gettid().as_raw_nonzero().get() == rustix::process::getpid().as_raw_nonzero().get()
}

thread_local! {
    static LOCAL: RefCell<Local> = const { RefCell::new(Local { generation: 0, sink: None }) };
}

/// Registers this thread's [`Local`] (so the main thread stops the trace at exit).
fn touch_local() {
    let _ = LOCAL.try_with(|_| {});
}

// ---- recording ------------------------------------------------------------------------

/// Whether an event site must call [`record`]: one relaxed load.
#[inline(always)]
pub(super) fn wanted() -> bool {
    STATE.load(Ordering::Relaxed) != OFF
}

/// Records one event (the slow side of an event site: recording is on, or
/// `HIPMEM_TRACE` has not been read yet).
#[cold]
#[inline(never)]
pub(super) fn record(kind: EventKind, pool: u64, stream: u64, device: usize, addr: u64, size: u64) {
    let mut state = STATE.load(Ordering::Acquire);
    if state == UNINIT {
        init_from_env();
        state = STATE.load(Ordering::Acquire);
    }
    if state != ON {
        return;
    }
    let now = Instant::now();
    let make = |start: Instant| Event {
        time_ns: now.saturating_duration_since(start).as_nanos() as u64,
        kind,
        pool,
        stream,
        device: device as u32,
        addr,
        size,
    };
    let done = LOCAL.try_with(|local| match local.try_borrow_mut() {
        Ok(mut local) => {
            if let Some(sink) = local.sink() {
                sink.send(make(sink.start));
            }
            true
        }
        Err(_) => false,
    });
    if done != Ok(true) {
        // This thread's local is being destroyed (an event from another
        // thread-local's destructor): go through the control block.
        let sink = lock(&CONTROL).active.as_ref().map(Sink::of);
        if let Some(sink) = sink {
            sink.send(make(sink.start));
        }
    }
}

// ---- control --------------------------------------------------------------------------

/// Reads `HIPMEM_TRACE` once and starts recording to that path if it is set
/// (and no trace was started with [`start`] before). A path that cannot be
/// written is reported once and recording stays off. The first event and
/// [`is_enabled`] call this; the runtime may call it at creation.
pub fn init_from_env() {
    ENV_ONCE.call_once(|| {
        if let Some(path) = std::env::var_os("HIPMEM_TRACE").filter(|p| !p.is_empty()) {
            let path = env_trace_path(Path::new(&path), std::process::id());
            if let Err(e) = start_inner(&path) {
                report(&format!("HIPMEM_TRACE: {}; not recording", e.message()));
            }
        }
        let _ = STATE.compare_exchange(UNINIT, OFF, Ordering::AcqRel, Ordering::Acquire);
    });
}

/// The file `HIPMEM_TRACE` names for process `pid`: `%p` in it becomes the
/// process id; without one, a file another live process is recording (a
/// parent whose children inherited `HIPMEM_TRACE`, say) is left to it and
/// this process records to `path.<pid>` beside it.
fn env_trace_path(path: &Path, pid: u32) -> PathBuf {
    let text = path.to_string_lossy();
    if text.contains("%p") {
        return PathBuf::from(text.replace("%p", &pid.to_string()));
    }
    if let Some(owner) = recording_process(path) {
        if owner != pid && Path::new(&format!("/proc/{owner}")).exists() {
            let mut other = path.as_os_str().to_os_string();
            other.push(format!(".{pid}"));
            return PathBuf::from(other);
        }
    }
    path.to_path_buf()
}

/// The process id in the header of the trace at `path`, if it has one.
fn recording_process(path: &Path) -> Option<u32> {
    use std::io::BufRead;
    let mut line = String::new();
    std::io::BufReader::new(File::open(path).ok()?).read_line(&mut line).ok()?;
    let header: serde_json::Value = serde_json::from_str(&line).ok()?;
    header.get("pid")?.as_u64().and_then(|p| u32::try_from(p).ok())
}

/// Starts recording every allocation event of this process to `path` (created
/// or truncated). A trace being recorded is stopped first. `HIPMEM_TRACE` is
/// not read once this was called. An error if the file cannot be created.
pub fn start(path: impl AsRef<Path>) -> Result<()> {
    ENV_ONCE.call_once(|| {});
    start_inner(path.as_ref())
}

fn start_inner(path: &Path) -> Result<()> {
    let mut control = lock(&CONTROL);
    if control.active.is_some() {
        stop_locked(&mut control);
    }
    let file = File::create(path)
        .map_err(|e| Error::InvalidValue(format!("cannot create the trace file {}: {e}", path.display())))?;
    let (tx, rx) = mpsc::sync_channel(QUEUE_EVENTS);
    let start = Instant::now();
    let start_unix_ns =
        SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
    let shared = Arc::new(Shared::default());
    let generation = GENERATION.fetch_add(1, Ordering::AcqRel) + 1;
    let writer = Writer {
        rx,
        file: Some(BufWriter::with_capacity(1 << 16, file)),
        out: None,
        start,
        start_unix_ns,
        path: path.to_path_buf(),
        shared: Arc::clone(&shared),
        generation,
    };
    let handle = std::thread::Builder::new()
        .name("hipmem-trace".into())
        .spawn(move || writer.run())
        .map_err(|e| Error::Unknown(format!("cannot start the trace writer thread: {e}")))?;
    control.active = Some(Active {
        tx,
        start,
        generation,
        path: path.to_path_buf(),
        thread: handle.thread().clone(),
        writer: Some(handle),
        pid: std::process::id(),
        shared,
    });
    STATE.store(ON, Ordering::Release);
    drop(control);
    touch_local();
    Ok(())
}

/// Stops recording: the events recorded so far are written, then the end
/// line, and the file is closed. Nothing to do when not recording. An error
/// if the trace could not be written completely.
pub fn stop() -> Result<()> {
    ENV_ONCE.call_once(|| {});
    let _ = STATE.compare_exchange(UNINIT, OFF, Ordering::AcqRel, Ordering::Acquire);
    let mut control = lock(&CONTROL);
    if control.active.is_none() {
        return Ok(());
    }
    let status = stop_locked(&mut control);
    match status.error {
        Some(e) => Err(Error::Unknown(format!("the trace {} is incomplete: {e}", display(&status.path)))),
        None => Ok(()),
    }
}

fn display(path: &Option<PathBuf>) -> String {
    path.as_ref().map(|p| p.display().to_string()).unwrap_or_default()
}

fn stop_locked(control: &mut Control) -> TraceStatus {
    let Some(mut active) = control.active.take() else {
        return TraceStatus::default();
    };
    GENERATION.fetch_add(1, Ordering::AcqRel);
    STATE.store(OFF, Ordering::Release);
    let (ack_tx, ack_rx) = mpsc::sync_channel(1);
    let acknowledged = active.tx.send(Msg::Stop(ack_tx)).is_ok() && {
        active.thread.unpark();
        ack_rx.recv_timeout(WAIT).is_ok()
    };
    // The writer returns right after acknowledging; one that failed returns
    // on its own. Never wait on a writer stuck in a write.
    if let Some(handle) = active.writer.take() {
        if acknowledged || handle.is_finished() {
            let _ = handle.join();
        }
    }
    if !acknowledged && lock(&active.shared.error).is_none() {
        *lock(&active.shared.error) = Some("the writer did not finish in time".into());
    }
    let status = status_of(&active.path, &active.shared, false);
    control.last = Some(status.clone());
    status
}

/// Writes everything recorded so far (by any thread, before this call) to the
/// file and returns once it is with the kernel. Nothing to do when not
/// recording. An error if the trace failed to write.
pub fn flush() -> Result<()> {
    let (tx, thread, shared, path) = {
        let control = lock(&CONTROL);
        match &control.active {
            None => return Ok(()),
            Some(a) => (a.tx.clone(), a.thread.clone(), Arc::clone(&a.shared), a.path.clone()),
        }
    };
    let failed = |shared: &Shared| {
        let e = lock(&shared.error).clone().unwrap_or_else(|| "the writer has stopped".into());
        Err(Error::Unknown(format!("the trace {} is incomplete: {e}", path.display())))
    };
    let (ack_tx, ack_rx) = mpsc::sync_channel(1);
    if tx.send(Msg::Flush(ack_tx)).is_err() {
        return failed(&shared);
    }
    thread.unpark();
    match ack_rx.recv_timeout(WAIT) {
        Ok(()) if lock(&shared.error).is_none() => Ok(()),
        Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => failed(&shared),
        Err(mpsc::RecvTimeoutError::Timeout) => {
            Err(Error::Unknown(format!("flushing the trace {} timed out", path.display())))
        }
    }
}

/// Whether events are being recorded (reads `HIPMEM_TRACE` first if it was not read yet).
pub fn is_enabled() -> bool {
    init_from_env();
    STATE.load(Ordering::Acquire) == ON
}

/// The active trace's status, else the last stopped one's, else the default.
pub fn status() -> TraceStatus {
    let control = lock(&CONTROL);
    match &control.active {
        Some(a) => status_of(&a.path, &a.shared, STATE.load(Ordering::Acquire) == ON),
        None => control.last.clone().unwrap_or_default(),
    }
}

/// Names the backend (`host`, `cuda`, ...) for the header of traces whose
/// first line is written after this call. The runtime calls it at creation;
/// the first name given is kept.
pub fn set_backend(name: &str) {
    let mut backend = lock(&BACKEND);
    if backend.is_none() {
        *backend = Some(name.to_string());
    }
}

// ---- the writer thread ----------------------------------------------------------------

struct Writer {
    rx: Receiver<Msg>,
    /// The file until the header is written (at the first message, so that
    /// the backend named by then is in it).
    file: Option<BufWriter<File>>,
    out: Option<TraceWriter<BufWriter<File>>>,
    start: Instant,
    start_unix_ns: u64,
    path: PathBuf,
    shared: Arc<Shared>,
    generation: u64,
}

impl Writer {
    fn run(mut self) {
        loop {
            match self.drain() {
                Ok(Some(ack)) => {
                    let result = self.finish();
                    let _ = ack.send(());
                    if let Err(e) = result {
                        self.fail(e);
                    }
                    return;
                }
                Ok(None) => {}
                Err(e) => {
                    self.fail(e);
                    return;
                }
            }
            std::thread::park_timeout(TICK);
        }
    }

    fn out(&mut self) -> std::io::Result<&mut TraceWriter<BufWriter<File>>> {
        if self.out.is_none() {
            let file = self.file.take().expect("the file until the header is written");
            let header = Header::for_this_process(lock(&BACKEND).clone(), self.start_unix_ns);
            self.out = Some(TraceWriter::new(file, &header)?);
        }
        Ok(self.out.as_mut().expect("set above"))
    }

    /// Writes what is queued; Some(ack) when a stop was asked for.
    fn drain(&mut self) -> std::io::Result<Option<SyncSender<()>>> {
        let mut wrote = false;
        let stop = loop {
            match self.rx.try_recv() {
                Ok(Msg::Event(event)) => {
                    self.out()?.write_event(&event)?;
                    wrote = true;
                }
                Ok(Msg::Flush(ack)) => {
                    self.flush_out()?;
                    wrote = false;
                    let _ = ack.send(());
                }
                Ok(Msg::Stop(ack)) => break Some(ack),
                Err(TryRecvError::Empty) => break None,
                Err(TryRecvError::Disconnected) => break None,
            }
        };
        if wrote {
            self.flush_out()?;
        }
        Ok(stop)
    }

    fn flush_out(&mut self) -> std::io::Result<()> {
        let out = self.out()?;
        out.flush()?;
        let events = out.events();
        self.shared.written.store(events, Ordering::Relaxed);
        Ok(())
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.out()?;
        let out = self.out.take().expect("written above");
        self.shared.written.store(out.events(), Ordering::Relaxed);
        let t = self.start.elapsed().as_nanos() as u64;
        out.finish(t, self.shared.dropped.load(Ordering::Relaxed))?;
        Ok(())
    }

    /// A write failed: report once, stop recording, drop the queue (senders
    /// then fail at once instead of waiting).
    fn fail(self, e: std::io::Error) {
        let message = format!("cannot write the trace {}: {e}", self.path.display());
        *lock(&self.shared.error) = Some(e.to_string());
        if GENERATION.load(Ordering::Acquire) == self.generation {
            STATE.store(OFF, Ordering::Release);
        }
        report(&format!("{message}; recording stopped"));
        // Whatever is queued is lost.
        let lost = self.rx.try_iter().filter(|m| matches!(m, Msg::Event(_))).count() as u64;
        self.shared.dropped.fetch_add(lost, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_paths_are_per_process_where_another_process_records() {
        let dir = std::env::temp_dir();
        let me = std::process::id();
        assert_eq!(env_trace_path(Path::new("/x/run-%p.jsonl"), 42), PathBuf::from("/x/run-42.jsonl"));
        let fresh = dir.join(format!("hipmem-env-path-{me}-fresh.jsonl"));
        assert_eq!(env_trace_path(&fresh, me), fresh, "no file yet: the path itself");
        // A file whose header names a live process (pid 1) is left to it.
        let taken = dir.join(format!("hipmem-env-path-{me}-taken.jsonl"));
        std::fs::write(&taken, "{\"format\":\"hipmem-trace\",\"pid\":1}\n").unwrap();
        let mut other = taken.clone().into_os_string();
        other.push(format!(".{me}"));
        assert_eq!(env_trace_path(&taken, me), PathBuf::from(other));
        // One of this process's own, or of a process that is gone, is reused.
        std::fs::write(&taken, format!("{{\"pid\":{me}}}\n")).unwrap();
        assert_eq!(env_trace_path(&taken, me), taken);
        std::fs::write(&taken, "{\"pid\":4294967}\n").unwrap();
        assert_eq!(env_trace_path(&taken, me), taken);
        std::fs::remove_file(&taken).unwrap();
    }
}
