//! A trace is complete when the program just returns from `main` (no `stop`):
//! the main thread's thread-local destructor, run by `exit()`, writes the
//! queue and the end line. This test re-runs its own executable as the
//! recording program (`harness = false`: `main` here is the program's main).

use std::process::Command;

use hipmem::trace::{EventKind, TraceReader};

const CHILD: &str = "HIPMEM_TRACE_EXIT_TEST_CHILD";
const EVENTS: u64 = 20_000;

fn child() {
    // Recording starts from HIPMEM_TRACE at the first event.
    for i in 0..EVENTS {
        hipmem::trace::alloc(1, 2, 0, 0x1000 + i * 256, 256);
    }
    // A worker thread that ends first changes nothing.
    std::thread::spawn(|| hipmem::trace::trim(1, 0, 0)).join().unwrap();
    // Returning from main: no stop(), no flush().
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let path = std::env::temp_dir().join(format!("hipmem-trace-exit-{}.jsonl", std::process::id()));
    let status = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, "1")
        .env("HIPMEM_TRACE", &path)
        .status()
        .unwrap();
    assert!(status.success());
    let mut reader = TraceReader::open(&path).unwrap();
    let events = reader.by_ref().collect::<Result<Vec<_>, _>>().unwrap();
    assert_eq!(events.len() as u64, EVENTS + 1, "every event reached the file");
    assert_eq!(events.last().unwrap().kind, EventKind::Trim);
    assert_eq!(reader.end().map(|e| e.events), Some(EVENTS + 1), "the end line was written at exit");
    std::fs::remove_file(&path).unwrap();
    println!("test trace_exit ... ok\n1 passed, 0 failed");
}
