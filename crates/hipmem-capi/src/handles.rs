//! The handle tables: what a `hipStream_t`, `hipEvent_t` or `hipMemPool_t`
//! value stands for. Every export looks its handles up here on every call, so
//! a stale, destroyed or made-up handle is an error code.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

use hipmem_rs::backend::RawStream;
use hipmem_rs::{Error, Event, MemPool, Result, Runtime, Stream};

use crate::current_device;
use crate::types::{hipEvent_t, hipMemPool_t, hipStream_t};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Streams created through `hipStreamCreate*`, by backend handle (the
/// `hipStream_t` value). The table owns them until `hipStreamDestroy`.
static STREAMS: Mutex<Option<HashMap<u64, Stream>>> = Mutex::new(None);

/// `hipStreamLegacy`.
pub const STREAM_LEGACY: u64 = 1;
/// `hipStreamPerThread`.
pub const STREAM_PER_THREAD: u64 = 2;

/// The stream behind a `hipStream_t`: 0, `hipStreamLegacy` and
/// `hipStreamPerThread` are the current device's null stream; others must be
/// live streams of this library (or of the runtime: `Stream::from_raw`).
pub fn stream(rt: &Runtime, handle: hipStream_t) -> Result<Stream> {
    stream_on(rt, current_device(), handle)
}

/// The stream behind a `hipStream_t` whose device the caller names (0,
/// `hipStreamLegacy` and `hipStreamPerThread` are `device`'s null stream).
pub fn stream_on(rt: &Runtime, device: usize, handle: hipStream_t) -> Result<Stream> {
    let h = handle as usize as u64;
    if h == 0 || h == STREAM_LEGACY || h == STREAM_PER_THREAD {
        return null_stream(rt, device);
    }
    let found = lock(&STREAMS).as_ref().and_then(|t| t.get(&h).cloned());
    match found {
        Some(s) => Ok(s),
        None => Stream::from_raw(rt, RawStream { device, handle: h }).map_err(|_| {
            Error::InvalidHandle(format!(
                "hipStream_t {h:#x} is not a live stream (destroyed, or never created)"
            ))
        }),
    }
}

/// The null stream of each device of the global runtime (the only runtime
/// the C ABI uses), made once: a call on stream 0 then costs a clone, and the
/// stream keeps the pool slot it learned across calls.
static NULL_STREAMS: OnceLock<Vec<Stream>> = OnceLock::new();

fn null_stream(rt: &Runtime, device: usize) -> Result<Stream> {
    let streams = NULL_STREAMS.get_or_init(|| {
        (0..rt.device_count()).map_while(|d| rt.device(d).ok()).map(|d| d.null_stream()).collect()
    });
    match streams.get(device) {
        Some(s) if s.runtime().ptr_eq(rt) => Ok(s.clone()),
        _ => Stream::from_raw(rt, RawStream::null(device)),
    }
}

/// Keeps a created stream alive under its handle.
pub fn add_stream(stream: Stream) -> hipStream_t {
    let h = stream.raw().handle;
    lock(&STREAMS).get_or_insert_with(HashMap::new).insert(h, stream);
    h as usize as hipStream_t
}

/// Removes a created stream; the caller drops it (outside the lock).
pub fn remove_stream(handle: hipStream_t) -> Result<Stream> {
    let h = handle as usize as u64;
    if h == 0 || h == STREAM_LEGACY || h == STREAM_PER_THREAD {
        return Err(Error::InvalidHandle("the null stream cannot be destroyed".into()));
    }
    lock(&STREAMS).as_mut().and_then(|t| t.remove(&h)).ok_or_else(|| {
        Error::InvalidHandle(format!("hipStream_t {h:#x} is not a live stream (destroyed, or never created)"))
    })
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
    let events = match lock(&EVENTS).as_mut() {
        Some(t) => {
            let keys: Vec<usize> = t.iter().filter(|(_, e)| e.device() == device).map(|(k, _)| *k).collect();
            keys.iter().filter_map(|k| t.remove(k)).collect()
        }
        None => Vec::new(),
    };
    (streams, events)
}
