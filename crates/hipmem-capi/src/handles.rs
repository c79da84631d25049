//! The handle tables: what a `hipStream_t`, `hipEvent_t` or `hipMemPool_t`
//! value stands for. Every export looks its handles up here on every call, so
//! a stale, destroyed or made-up handle is an error code.
//!
//! # Streams
//!
//! A `hipStream_t` is one of:
//! - 0, `hipStreamLegacy` (1) or `hipStreamPerThread` (2): the device's null
//!   stream, made once per device and lent to every call;
//! - a stream created through `hipStreamCreate*` (kept in a table here until
//!   `hipStreamDestroy`);
//! - a stream made outside hipmem (by the CUDA runtime, PyTorch, NCCL, ...):
//!   the first call that names it asks the runtime to adopt it
//!   ([`Stream::adopt`]: on CUDA the driver checks it is a live stream of the
//!   device's primary context, on hip the HIP runtime that it is a live
//!   stream of the device; the CPU backend has no such streams and says
//!   InvalidHandle), after which it is kept in a table here like a created
//!   one. It is adopted as a stream of its own device where the backend
//!   can tell it (cuda: the device of the stream's context; hip: the
//!   runtime's `hipStreamGetDevice`; as `cudaMallocAsync` takes the
//!   stream's device), else of the device the call names (the calling
//!   thread's current device for HIP's functions);
//! - anything else: InvalidHandle.
//!
//! `hipStreamDestroy` takes created streams and adopted ones (HIP allows
//! destroying a stream made elsewhere). A handle the library has never seen
//! is InvalidHandle without any driver call, and a foreign handle destroyed
//! through `hipStreamDestroy` is refused without any driver call: the
//! driver has no check of its own for a freed handle (it crashes on one),
//! so hipmem never hands it one it knows is dead. hipmem forgets such a
//! stream at once but keeps the driver's stream *parked*, alive and unused,
//! until [`PARKED_STREAMS`] newer ones are: the driver reuses the address
//! of a stream it destroyed for the next one it makes, and while the old
//! stream is parked no new stream can get the address that hipmem refuses.
//! The oldest parked stream is then destroyed and its handle forgotten: a
//! stream made later at that address is adopted like any other (and a call
//! that still names the old stream is then the driver's undefined
//! behaviour, as with the CUDA API).
//!
//! # The fast path
//!
//! The lookup of a stream is lock-free on the hot path: the null streams
//! are lent from a table made once, and each thread keeps a small cache of
//! the created and adopted streams it used, lent (not cloned) to the call.
//! A global generation, bumped by every `hipStreamDestroy` (and by
//! [`streams_changed`]), tells a thread that its cache may hold a dead
//! handle: the cache is then dropped and the tables are asked again, so a
//! destroyed handle is never served from a cache. A thread's cached clone of
//! a destroyed stream is released on that thread's next lookup (or when it
//! exits); until then hipmem's own stream stays alive, as when another
//! thread is still using it, and is destroyed then.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use hipmem_rs::backend::RawStream;
use hipmem_rs::{Error, Event, MemPool, Result, Runtime, Stream};

use crate::types::{hipEvent_t, hipMemPool_t, hipStream_t};
use crate::{current_device, rt};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Streams created through `hipStreamCreate*`, by backend handle (the
/// `hipStream_t` value). The table owns them until `hipStreamDestroy`.
static STREAMS: Mutex<Option<HashMap<u64, Stream>>> = Mutex::new(None);

/// How many foreign streams destroyed through `hipStreamDestroy` stay
/// parked (alive in the driver, unused) at most (see the module docs).
pub const PARKED_STREAMS: usize = 256;

/// Streams made outside hipmem.
#[derive(Default)]
struct Foreign {
    /// Adopted, by handle: kept so that the stream keeps its pool slot
    /// across calls (the runtime keeps its ordering clock).
    adopted: HashMap<u64, Stream>,
    /// Destroyed through `hipStreamDestroy` and still parked: refused
    /// without a driver call.
    destroyed: HashSet<u64>,
    /// The parked streams, oldest first (their handles are `destroyed`).
    parked: VecDeque<RawStream>,
}

impl Foreign {
    /// Parks a stream destroyed through `hipStreamDestroy` (its handle is
    /// in `destroyed` already). Returns the oldest parked stream where more
    /// than `most` are, for the caller to destroy and then to stop refusing
    /// ([`Foreign::unpark`]).
    fn park(&mut self, raw: RawStream, most: usize) -> Option<RawStream> {
        self.parked.push_back(raw);
        if self.parked.len() <= most { None } else { self.parked.pop_front() }
    }

    /// Stops refusing the handle of a parked stream now destroyed: the
    /// driver may give its address to a new stream.
    fn unpark(&mut self, destroyed: RawStream) {
        self.destroyed.remove(&destroyed.handle);
    }
}

/// The foreign streams. Adoption happens under this lock, so two threads
/// that name a new foreign stream at once adopt it once.
static FOREIGN: Mutex<Option<Foreign>> = Mutex::new(None);

/// Runs `f` on the foreign streams, under their lock.
fn with_foreign<R>(f: impl FnOnce(&mut Foreign) -> R) -> R {
    f(lock(&FOREIGN).get_or_insert_with(Foreign::default))
}

/// hipmem's own streams destroyed through `hipStreamDestroy` that another
/// thread's cache may still hold (handle, device and the stream's
/// process-unique id): the runtime's table of owned streams still finds
/// such a stream by handle until its last clone goes, so a lookup that
/// reaches the runtime checks the id against this list.
static RETIRED: Mutex<Vec<(RawStream, u64)>> = Mutex::new(Vec::new());

/// Bumped whenever a stream handle may have died (see the module docs).
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// Most streams a thread's cache holds.
const CACHED_STREAMS: usize = 8;

/// A thread's cache of created and adopted streams, valid while
/// `generation` is the global one.
struct StreamCache {
    generation: u64,
    /// (handle, stream), most recently added last.
    entries: Vec<(u64, Stream)>,
}

thread_local! {
    static CACHE: RefCell<StreamCache> =
        const { RefCell::new(StreamCache { generation: 0, entries: Vec::new() }) };
}

/// `hipStreamLegacy`.
pub const STREAM_LEGACY: u64 = 1;
/// `hipStreamPerThread`.
pub const STREAM_PER_THREAD: u64 = 2;

fn is_null_handle(h: u64) -> bool {
    h == 0 || h == STREAM_LEGACY || h == STREAM_PER_THREAD
}

/// The stream behind a `hipStream_t`: 0, `hipStreamLegacy` and
/// `hipStreamPerThread` are the current device's null stream; others must be
/// streams created through `hipStreamCreate*`, streams of the runtime
/// (`Stream::from_raw`), or streams made outside hipmem, adopted on the
/// current device (see the module docs).
pub fn stream(rt: &Runtime, handle: hipStream_t) -> Result<Stream> {
    stream_on(rt, current_device(), handle)
}

/// The stream behind a `hipStream_t` whose device the caller names (0,
/// `hipStreamLegacy` and `hipStreamPerThread` are `device`'s null stream; a
/// foreign stream is adopted on its own device where the backend can tell
/// it, else as a stream of `device`: callers that need `device` check the
/// stream's own device).
pub fn stream_on(rt: &Runtime, device: usize, handle: hipStream_t) -> Result<Stream> {
    match crate::rt() {
        Ok(global) if global.ptr_eq(rt) => with_stream_on(global, device, handle, |s| Ok(s.clone())),
        // Another runtime: only its null streams and its own streams.
        _ => {
            let h = handle as usize as u64;
            let raw =
                if is_null_handle(h) { RawStream::null(device) } else { RawStream { device, handle: h } };
            Stream::from_raw(rt, raw).map_err(|_| not_live(h))
        }
    }
}

/// The current device's null stream if `handle` names it (0,
/// `hipStreamLegacy`, `hipStreamPerThread`) and the device exists: the
/// allocator's hot path, with no closure and no cache (the null streams are
/// made once and live as long as the process). None: ask [`with_stream`].
#[inline]
pub(crate) fn null_stream(rt: &'static Runtime, handle: hipStream_t) -> Option<&'static Stream> {
    if is_null_handle(handle as usize as u64) { null_stream_of(rt, current_device()) } else { None }
}

/// Runs `f` on the stream behind `handle` if this thread's cache holds it
/// (a created or adopted stream this thread used before, and no stream was
/// destroyed since): the allocator's hot path for streams other than the
/// null stream. None: ask [`with_stream`] (`f` is dropped unused).
#[inline]
pub(crate) fn with_cached_stream<R>(handle: hipStream_t, f: impl FnOnce(&Stream) -> R) -> Option<R> {
    cached(handle as usize as u64, GENERATION.load(Ordering::Acquire), f)
}

/// Runs `f` on the stream this thread's cache holds under handle `h`, if
/// the cache is of `generation`.
#[inline]
fn cached<R>(h: u64, generation: u64, f: impl FnOnce(&Stream) -> R) -> Option<R> {
    CACHE
        .try_with(|c| {
            let cache = c.try_borrow().ok().filter(|c| c.generation == generation)?;
            let (_, s) = cache.entries.iter().rev().find(|(k, _)| *k == h)?;
            Some(f(s))
        })
        .ok()
        .flatten()
}

/// Runs `f` on the stream behind `handle` on the current device (see
/// [`stream`]), lent from the tables or this thread's cache: no reference
/// count is touched when the stream was used before.
pub(crate) fn with_stream<R>(
    rt: &'static Runtime,
    handle: hipStream_t,
    f: impl FnOnce(&Stream) -> Result<R>,
) -> Result<R> {
    with_stream_on(rt, current_device(), handle, f)
}

/// Runs `f` on the stream behind `handle`, whose device the caller names
/// (see [`stream_on`]); lent as by [`with_stream`].
pub(crate) fn with_stream_on<R>(
    rt: &'static Runtime,
    device: usize,
    handle: hipStream_t,
    f: impl FnOnce(&Stream) -> Result<R>,
) -> Result<R> {
    let h = handle as usize as u64;
    if is_null_handle(h) {
        return match null_stream_of(rt, device) {
            Some(s) => f(s),
            None => f(&Stream::from_raw(rt, RawStream::null(device))?),
        };
    }
    // Read before any table: an entry cached under it was looked up after
    // every destruction that the generation counts.
    let generation = GENERATION.load(Ordering::Acquire);
    let mut f = Some(f);
    if let Some(Some(result)) = cached(h, generation, |s| f.take().map(|f| f(s))) {
        return result;
    }
    let Some(f) = f else {
        return Err(Error::Unknown("stream lookup: the call ran without its result".into()));
    };
    drop(refresh_cache(generation));
    let (s, cacheable) = resolve(rt, device, h)?;
    if cacheable {
        drop(cache_stream(generation, h, &s));
    }
    f(&s)
}

/// Drops this thread's cache if it is older than `generation`; returns the
/// dropped streams, for the caller to drop outside the cache.
fn refresh_cache(generation: u64) -> Vec<(u64, Stream)> {
    CACHE
        .try_with(|c| match c.try_borrow_mut() {
            Ok(mut cache) if cache.generation < generation => {
                cache.generation = generation;
                std::mem::take(&mut cache.entries)
            }
            _ => Vec::new(),
        })
        .unwrap_or_default()
}

/// Caches `stream` under `handle` if the cache is of `generation`; returns
/// what it evicts.
fn cache_stream(generation: u64, handle: u64, stream: &Stream) -> Option<(u64, Stream)> {
    CACHE
        .try_with(|c| {
            let mut cache = c.try_borrow_mut().ok().filter(|c| c.generation == generation)?;
            let evicted =
                if cache.entries.len() >= CACHED_STREAMS { Some(cache.entries.remove(0)) } else { None };
            cache.entries.push((handle, stream.clone()));
            evicted
        })
        .ok()
        .flatten()
}

/// Drops this thread's cache (a stream it may hold was destroyed).
fn clear_cache() {
    let old = CACHE.try_with(|c| c.try_borrow_mut().map(|mut c| std::mem::take(&mut c.entries)).ok());
    drop(old);
}

/// Marks every cached stream as possibly dead: each thread's next lookup
/// asks the tables again. Call after removing streams from the tables other
/// than through [`remove_stream`] (which calls it), e.g. on a device reset.
pub fn streams_changed() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    clear_cache();
}

/// The stream behind a handle that is no null stream, from the tables (or
/// adopted now): the stream and whether it may be cached (it is one of the
/// tables').
fn resolve(rt: &'static Runtime, device: usize, h: u64) -> Result<(Stream, bool)> {
    if let Some(s) = lock(&STREAMS).as_ref().and_then(|t| t.get(&h).cloned()) {
        return Ok((s, true));
    }
    let mut foreign = lock(&FOREIGN);
    let foreign = foreign.get_or_insert_with(Foreign::default);
    if let Some(s) = foreign.adopted.get(&h) {
        return Ok((s.clone(), true));
    }
    if foreign.destroyed.contains(&h) {
        return Err(Error::InvalidHandle(format!(
            "hipStream_t {h:#x} was destroyed by hipStreamDestroy (a stream made outside hipmem)"
        )));
    }
    // hipmem's own streams made through the Rust API, streams adopted
    // through it, and new foreign streams: the runtime decides (the backend
    // checks a new one). A stream is taken on its own device where the
    // backend can tell it (cuda: its context's), as `cudaMallocAsync` takes
    // the stream's device; else on the device the call names.
    let device = rt.stream_device(h).unwrap_or(device);
    let s = Stream::adopt(rt, RawStream { device, handle: h }).map_err(|e| match e {
        Error::InvalidHandle(m) => Error::InvalidHandle(format!(
            "hipStream_t {h:#x} is not a live stream (destroyed, or never created): {m}"
        )),
        e => e,
    })?;
    if s.is_owned() {
        if lock(&RETIRED).iter().any(|&(_, id)| id == s.id()) {
            return Err(not_live(h));
        }
        // Not the C ABI's to keep alive: looked up again on every call.
        return Ok((s, false));
    }
    foreign.adopted.insert(h, s.clone());
    Ok((s, true))
}

fn not_live(h: u64) -> Error {
    Error::InvalidHandle(format!("hipStream_t {h:#x} is not a live stream (destroyed, or never created)"))
}

/// The null stream of each device of the global runtime (the only runtime
/// the C ABI uses), made once: a call on stream 0 borrows it, and the stream
/// keeps the pool slot it learned across calls.
static NULL_STREAMS: OnceLock<Vec<Stream>> = OnceLock::new();

/// The first devices' null streams again, in one cache line (a call on
/// stream 0 otherwise reads the vector's header and then its buffer, two
/// lines that a framework's step has evicted between calls;
/// docs/pool-measurements.md, "Stop 79").
#[repr(align(64))]
struct FirstNullStreams([OnceLock<Stream>; FIRST_NULL_STREAMS]);
const FIRST_NULL_STREAMS: usize = 4;
static FIRST_NULL: FirstNullStreams = FirstNullStreams([const { OnceLock::new() }; FIRST_NULL_STREAMS]);

/// The null stream of `device` of the global runtime, if the device exists.
#[inline]
fn null_stream_of(rt: &'static Runtime, device: usize) -> Option<&'static Stream> {
    if let Some(s) = FIRST_NULL.0.get(device).and_then(OnceLock::get) {
        return Some(s);
    }
    let s = null_streams(rt).get(device)?;
    Some(match FIRST_NULL.0.get(device) {
        Some(first) => first.get_or_init(|| s.clone()),
        None => s,
    })
}

fn null_streams(rt: &'static Runtime) -> &'static [Stream] {
    let streams = NULL_STREAMS.get_or_init(|| {
        (0..rt.device_count()).map_while(|d| rt.device(d).ok()).map(|d| d.null_stream()).collect()
    });
    // Made from the global runtime; `rt` is always that one here.
    if streams.first().is_none_or(|s| s.runtime().ptr_eq(rt)) { streams } else { &[] }
}

/// Keeps a created stream alive under its handle.
pub fn add_stream(stream: Stream) -> hipStream_t {
    let h = stream.raw().handle;
    lock(&STREAMS).get_or_insert_with(HashMap::new).insert(h, stream);
    // The driver may have handed out the address of a foreign stream
    // destroyed earlier: it is hipmem's own stream now.
    if let Some(f) = lock(&FOREIGN).as_mut() {
        f.destroyed.remove(&h);
    }
    h as usize as hipStream_t
}

/// Removes a created stream; the caller drops it (outside the lock). Every
/// thread's cache forgets it (see the module docs).
pub fn remove_stream(handle: hipStream_t) -> Result<Stream> {
    let h = handle as usize as u64;
    if is_null_handle(h) {
        return Err(Error::InvalidHandle("the null stream cannot be destroyed".into()));
    }
    let s = {
        let mut streams = lock(&STREAMS);
        let s = streams.as_mut().and_then(|t| t.remove(&h)).ok_or_else(|| not_live(h))?;
        // Before anyone can miss it in the table: a lookup that then finds
        // it in the runtime (alive through another thread's cache) refuses it.
        lock(&RETIRED).push((s.raw(), s.id()));
        s
    };
    // After the removal: a lookup that read the old generation may have
    // found the stream, and will not keep it.
    streams_changed();
    Ok(s)
}

/// `hipStreamDestroy`: a created stream is released (destroyed with its
/// last use), an adopted one destroyed through the runtime; anything else
/// is InvalidHandle without a driver call (see the module docs).
pub fn destroy_stream(handle: hipStream_t) -> Result<()> {
    let h = handle as usize as u64;
    if is_null_handle(h) {
        return Err(Error::InvalidHandle("the null stream cannot be destroyed".into()));
    }
    if let Ok(s) = remove_stream(handle) {
        drop(s);
        prune_retired();
        return Ok(());
    }
    let rt = rt()?;
    let raw = with_foreign(|foreign| {
        let raw = match foreign.adopted.remove(&h) {
            Some(s) => s.raw(),
            // Adopted through the Rust API, on any device.
            None => (0..rt.device_count())
                .map(|device| RawStream { device, handle: h })
                .find(|&raw| rt.is_adopted_stream(raw))
                .ok_or_else(|| not_live(h))?,
        };
        // (Refused from now on, by every thread.)
        foreign.destroyed.insert(h);
        Ok::<_, Error>(raw)
    })?;
    streams_changed();
    rt.forget_adopted_stream(raw)?;
    let Some(old) = with_foreign(|f| f.park(raw, PARKED_STREAMS)) else { return Ok(()) };
    // (Its pools and the runtime forgot it when it was parked; its handle
    // is refused until the driver has destroyed it.)
    if let Err(e) = rt.backend().stream_destroy(old) {
        // (The stream this call destroyed is gone all the same.)
        tracing::warn!(target: "hipmem::streams", "destroying the parked stream {:#x}: {e}", old.handle);
    }
    with_foreign(|f| f.unpark(old));
    Ok(())
}

/// Forgets retired streams whose last clone is gone (the runtime no longer
/// finds them, or finds another stream under the handle).
fn prune_retired() {
    let Ok(rt) = rt() else { return };
    let retired: Vec<(RawStream, u64)> = lock(&RETIRED).clone();
    let gone: Vec<u64> = retired
        .into_iter()
        .filter(|&(raw, id)| !rt.stream_from_raw(raw).is_ok_and(|s| s.id() == id))
        .map(|(_, id)| id)
        .collect();
    lock(&RETIRED).retain(|(_, id)| !gone.contains(id));
}

/// Events, by the `hipEvent_t` value handed out (never reused).
static EVENTS: Mutex<Option<HashMap<usize, Event>>> = Mutex::new(None);
static NEXT_EVENT: AtomicUsize = AtomicUsize::new(0x0e00_0000);

/// Registers an event and returns its new handle.
pub fn add_event(event: Event) -> hipEvent_t {
    let h = NEXT_EVENT.fetch_add(0x10, Ordering::Relaxed);
    lock(&EVENTS).get_or_insert_with(HashMap::new).insert(h, event);
    h as hipEvent_t
}

/// The event behind a handle (InvalidHandle if null, destroyed or unknown).
pub fn event(handle: hipEvent_t) -> Result<Event> {
    let h = handle as usize;
    lock(&EVENTS).as_ref().and_then(|t| t.get(&h).cloned()).ok_or_else(|| {
        Error::InvalidHandle(format!("hipEvent_t {h:#x} is not a live event (destroyed, or never created)"))
    })
}

/// Removes an event; the caller drops it (outside the lock).
pub fn remove_event(handle: hipEvent_t) -> Result<Event> {
    let h = handle as usize;
    lock(&EVENTS).as_mut().and_then(|t| t.remove(&h)).ok_or_else(|| {
        Error::InvalidHandle(format!("hipEvent_t {h:#x} is not a live event (destroyed, or never created)"))
    })
}

/// Pools (created and default), by `hipMemPool_t` value: the pool's
/// process-unique id, so the same pool always has the same handle.
static POOLS: Mutex<Option<HashMap<usize, MemPool>>> = Mutex::new(None);

/// Registers a pool (idempotent) and returns its handle.
pub fn add_pool(pool: MemPool) -> hipMemPool_t {
    let h = pool.id() as usize;
    lock(&POOLS).get_or_insert_with(HashMap::new).entry(h).or_insert(pool);
    h as hipMemPool_t
}

/// The pool behind a handle (InvalidValue if null, destroyed or unknown:
/// HIP's code for a bad pool).
pub fn pool(handle: hipMemPool_t) -> Result<MemPool> {
    let h = handle as usize;
    if h == 0 {
        return Err(Error::InvalidValue("hipMemPool_t is null".into()));
    }
    lock(&POOLS).as_ref().and_then(|t| t.get(&h).cloned()).filter(|p| !p.is_destroyed()).ok_or_else(|| {
        Error::InvalidValue(format!("hipMemPool_t {h:#x} is not a live pool (destroyed, or never created)"))
    })
}

/// Removes a destroyed pool from the table; the caller drops it outside the lock.
pub fn remove_pool(handle: hipMemPool_t) -> Option<MemPool> {
    lock(&POOLS).as_mut().and_then(|t| t.remove(&(handle as usize)))
}

/// Removes every created stream and event of `device` (`hipDeviceReset`);
/// the caller drops them (outside the locks).
pub fn remove_device_handles(device: usize) -> (Vec<Stream>, Vec<Event>) {
    let streams = match lock(&STREAMS).as_mut() {
        Some(t) => {
            let keys: Vec<u64> = t.iter().filter(|(_, s)| s.device() == device).map(|(k, _)| *k).collect();
            keys.iter().filter_map(|k| t.remove(k)).collect()
        }
        None => Vec::new(),
    };
    streams_changed();
    let events = match lock(&EVENTS).as_mut() {
        Some(t) => {
            let keys: Vec<usize> = t.iter().filter(|(_, e)| e.device() == device).map(|(k, _)| *k).collect();
            keys.iter().filter_map(|k| t.remove(k)).collect()
        }
        None => Vec::new(),
    };
    (streams, events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(handle: u64) -> RawStream {
        RawStream { device: 0, handle }
    }

    #[test]
    fn a_parked_stream_stays_refused_until_it_is_destroyed_and_unparked() {
        let mut f = Foreign::default();
        for h in [0x10, 0x20] {
            f.destroyed.insert(h);
            assert_eq!(f.park(raw(h), 2), None, "two parked at most: none goes yet");
        }
        f.destroyed.insert(0x30);
        // The third pushes out the oldest, which stays refused until the
        // caller has destroyed it.
        assert_eq!(f.park(raw(0x30), 2), Some(raw(0x10)));
        assert!(f.destroyed.contains(&0x10));
        f.unpark(raw(0x10));
        assert!(!f.destroyed.contains(&0x10));
        assert!(f.destroyed.contains(&0x20) && f.destroyed.contains(&0x30));
        assert_eq!(f.parked, [raw(0x20), raw(0x30)]);
    }
}
