//! The trace recorder: what it writes, from many threads, and how it fails.
//! The recorder is process-wide: these tests take turns.

use std::path::PathBuf;
use std::sync::Mutex;

use hipmem::trace::{self, EventKind, TraceReader};

static TURN: Mutex<()> = Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|p| p.into_inner())
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("hipmem-trace-test-{}-{name}", std::process::id()))
}

#[test]
fn events_from_many_threads_arrive_complete_and_in_each_threads_order() {
    let _t = turn();
    let path = temp("threads.jsonl");
    trace::set_backend("host");
    trace::start(&path).unwrap();
    assert!(trace::is_enabled());
    const THREADS: u64 = 4;
    const PER_THREAD: u64 = 50_000; // more than the queue holds: the writer must keep up
    std::thread::scope(|s| {
        for t in 0..THREADS {
            s.spawn(move || {
                for i in 0..PER_THREAD {
                    if i % 2 == 0 {
                        trace::alloc(7, t + 1, 0, 0x1000 + i * 256, i);
                    } else {
                        trace::free_requested(7, t + 1, 0, 0x1000 + (i - 1) * 256, i);
                    }
                }
            });
        }
    });
    trace::pool_grow(7, 1, 0x7f00_0000_0000, 2 << 20);
    trace::trim(7, 1, 0);
    trace::oom(7, 3, 1, 1 << 40);
    trace::pool_release(7, 1, 0x7f00_0000_0000, 2 << 20);
    trace::free_completed(7, 2, 0, 0x1000, 0);
    trace::stop().unwrap();
    assert!(!trace::is_enabled());
    let status = trace::status();
    assert_eq!(status.events_written, THREADS * PER_THREAD + 5);
    assert_eq!(status.events_dropped, 0);

    let mut reader = TraceReader::open(&path).unwrap();
    assert_eq!(reader.header().pid, std::process::id());
    assert_eq!(reader.header().backend.as_deref(), Some("host"));
    let mut next = vec![0u64; THREADS as usize + 1];
    let mut last_t = 0;
    let mut tail = Vec::new();
    for event in reader.by_ref() {
        let event = event.unwrap();
        assert!(event.time_ns >= last_t);
        last_t = event.time_ns;
        if event.pool == 7
            && event.device == 0
            && matches!(event.kind, EventKind::Alloc | EventKind::FreeRequested)
        {
            let t = event.stream as usize;
            assert_eq!(event.size, next[t], "thread {t}'s events are out of order");
            next[t] += 1;
        } else {
            tail.push(event.kind);
        }
    }
    assert!(next[1..].iter().all(|&n| n == PER_THREAD), "{next:?}");
    assert_eq!(
        tail,
        [
            EventKind::PoolGrow,
            EventKind::Trim,
            EventKind::Oom,
            EventKind::PoolRelease,
            EventKind::FreeCompleted
        ]
    );
    let end = reader.end().expect("a stopped trace has its end line");
    assert_eq!(end.events, THREADS * PER_THREAD + 5);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn flush_makes_events_readable_while_recording() {
    let _t = turn();
    let path = temp("flush.jsonl");
    trace::start(&path).unwrap();
    for i in 0..100 {
        trace::alloc(1, 1, 0, 0x10_0000 + i * 512, 512);
    }
    trace::flush().unwrap();
    let events = TraceReader::open(&path).unwrap().collect::<Result<Vec<_>, _>>().unwrap();
    assert_eq!(events.len(), 100);
    assert_eq!(events[99].addr, 0x10_0000 + 99 * 512);
    assert_eq!(trace::status().events_written, 100);
    // Starting again stops the first trace (end line written) and truncates the new file.
    let second = temp("flush2.jsonl");
    trace::start(&second).unwrap();
    let mut first = TraceReader::open(&path).unwrap();
    assert_eq!(first.by_ref().count(), 100);
    assert_eq!(first.end().map(|e| e.events), Some(100));
    trace::stop().unwrap();
    let mut empty = TraceReader::open(&second).unwrap();
    assert_eq!(empty.by_ref().count(), 0);
    assert!(empty.end().is_some());
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(&second).unwrap();
}

#[test]
fn an_unwritable_path_is_an_error_and_recording_stays_off() {
    let _t = turn();
    let path = std::env::temp_dir().join("hipmem-no-such-dir/sub/trace.jsonl");
    let err = trace::start(&path).unwrap_err();
    assert!(err.message().contains("hipmem-no-such-dir"), "{err}");
    assert!(!trace::is_enabled());
    trace::alloc(1, 1, 0, 0x1000, 1); // nothing to record into, no panic
}

#[test]
fn a_full_disk_is_reported_once_and_recording_turns_off() {
    let _t = turn();
    if !std::path::Path::new("/dev/full").exists() {
        return;
    }
    trace::start("/dev/full").unwrap();
    for i in 0..10_000 {
        trace::alloc(1, 1, 0, 0x1000 + i, 64);
    }
    let err = trace::flush().unwrap_err();
    assert!(err.message().contains("/dev/full"), "{err}");
    let status = trace::status();
    assert!(status.error.as_deref().unwrap_or("").contains("No space"), "{status:?}");
    assert!(!trace::is_enabled(), "recording turns itself off");
    // The program goes on: more events cost nothing and fail nothing.
    for i in 0..10_000 {
        trace::free_requested(1, 1, 0, 0x1000 + i, 64);
    }
    assert!(trace::stop().is_err(), "stop says the trace is incomplete");
    assert!(!trace::is_enabled());
}

/// The library records its own events: hipMalloc/hipFree, a pool's
/// allocations and frees, the memory it maps, a trim and an OutOfMemory,
/// with the pool's and the stream's ids.
#[test]
fn the_runtime_and_its_pools_record_their_own_events() {
    let _t = turn();
    let rt = hipmem::Runtime::builder().backend(hipmem::BackendChoice::Host).build().unwrap();
    let path = temp("own.jsonl");
    trace::start(&path).unwrap();
    let dev = rt.device(0).unwrap();
    let s = dev.create_stream().unwrap();
    let pool = hipmem::MemPool::create(&rt, hipmem::PoolProps::default()).unwrap();
    let a = pool.alloc_raw(3 << 20, &s).unwrap();
    let b = rt.malloc(0, 4096).unwrap();
    assert!(pool.alloc_raw(1 << 60, &s).is_err());
    rt.free_async(a, &s).unwrap();
    rt.free(b).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    trace::stop().unwrap();
    let events: Vec<_> = TraceReader::open(&path).unwrap().map(|e| e.unwrap()).collect();
    let find = |kind: EventKind, pool_id: u64, addr: u64| {
        events.iter().find(|e| e.kind == kind && e.pool == pool_id && (addr == 0 || e.addr == addr))
    };
    let alloc = find(EventKind::Alloc, pool.id(), a.0).expect("the pool's allocation");
    assert_eq!((alloc.size, alloc.stream), (3 << 20, s.id()));
    let free = find(EventKind::FreeRequested, pool.id(), a.0).expect("the pool's free");
    assert_eq!(free.stream, s.id());
    assert!(find(EventKind::PoolGrow, pool.id(), 0).is_some(), "the memory the pool mapped");
    assert!(find(EventKind::PoolRelease, pool.id(), 0).is_some(), "the memory the trim released");
    assert!(find(EventKind::Trim, pool.id(), 0).is_some());
    assert_eq!(find(EventKind::Oom, pool.id(), 0).expect("the OutOfMemory").size, 1 << 60);
    assert_eq!(find(EventKind::Alloc, 0, b.0).expect("hipMalloc").size, 4096);
    assert!(find(EventKind::FreeRequested, 0, b.0).is_some(), "hipFree");
    assert!(find(EventKind::FreeCompleted, 0, b.0).is_some(), "hipFree completes at once");
    std::fs::remove_file(&path).unwrap();
}
