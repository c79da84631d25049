//! `hipmem bench trace`: what recording costs an event site.
//!
//! - off: a loop of event calls with recording off against the same loop
//!   without them (the difference is the cost of a site: one relaxed load and
//!   a branch);
//! - on, from 1 and 4 threads: the time a recording thread spends per event
//!   (timing, queueing), then how long the writer needs to finish the backlog
//!   (`trace::flush`), and the file's size per event.

use std::hint::black_box;
use std::time::Instant;

use hipmem::Runtime;

use super::Report;

/// How much to measure.
#[derive(Copy, Clone, Debug)]
pub struct Scale {
    /// Event calls in the recording-off loop.
    pub off_calls: u64,
    /// Events recorded per thread with recording on.
    pub on_events: u64,
    /// Rounds (the median is reported).
    pub rounds: usize,
}

impl Scale {
    /// The full bench.
    pub fn full() -> Scale {
        Scale { off_calls: 200_000_000, on_events: 2_000_000, rounds: 5 }
    }

    /// A smoke test.
    pub fn quick() -> Scale {
        Scale { off_calls: 5_000_000, on_events: 100_000, rounds: 3 }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The event sites of an allocate/free pair.
#[inline(always)]
fn sites(i: u64) {
    hipmem::trace::alloc(1, 2, 0, 0x7f00_0000_0000 + (i << 8), 4096);
    hipmem::trace::free_requested(1, 2, 0, 0x7f00_0000_0000 + (i << 8), 4096);
}

fn off_round(calls: u64) -> (f64, f64) {
    let pairs = calls / 2;
    let t = Instant::now();
    for i in 0..pairs {
        black_box(i);
    }
    let empty = t.elapsed().as_nanos() as f64;
    let t = Instant::now();
    for i in 0..pairs {
        sites(black_box(i));
    }
    let with = t.elapsed().as_nanos() as f64;
    (empty / calls as f64, with / calls as f64)
}

struct OnRound {
    per_event_ns: f64,
    drain_ns: f64,
    bytes_per_event: f64,
}

fn on_round(threads: u64, events: u64) -> hipmem::Result<OnRound> {
    let path = std::env::temp_dir().join(format!("hipmem-bench-trace-{}.jsonl", std::process::id()));
    hipmem::trace::start(&path)?;
    let barrier = std::sync::Barrier::new(threads as usize);
    let per_thread: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|th| {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    let t = Instant::now();
                    for i in 0..events / 2 {
                        sites(black_box(i + (th << 40)));
                    }
                    t.elapsed().as_nanos() as f64 / events as f64
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(f64::NAN)).collect()
    });
    let t = Instant::now();
    let flushed = hipmem::trace::flush();
    let drain_ns = t.elapsed().as_nanos() as f64;
    let stopped = hipmem::trace::stop();
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&path);
    flushed?;
    stopped?;
    let status = hipmem::trace::status();
    let expected = threads * (events / 2) * 2;
    if status.events_written != expected {
        return Err(hipmem::Error::Unknown(format!(
            "the trace has {} events, {expected} were recorded",
            status.events_written
        )));
    }
    Ok(OnRound {
        per_event_ns: per_thread.iter().sum::<f64>() / per_thread.len() as f64,
        drain_ns,
        bytes_per_event: bytes as f64 / expected as f64,
    })
}

/// Runs the bench.
pub fn run(rt: &Runtime, scale: Scale) -> hipmem::Result<Report> {
    if hipmem::trace::is_enabled() {
        return Err(hipmem::Error::InvalidValue(
            "a trace is being recorded (HIPMEM_TRACE): this bench records its own; unset it".into(),
        ));
    }
    let mut report = Report::new("trace", rt, 0)?;
    let mut progress = super::Progress::new(4);

    progress.step("recording off");
    let rounds: Vec<(f64, f64)> = (0..scale.rounds).map(|_| off_round(scale.off_calls)).collect();
    let empty = median(rounds.iter().map(|r| r.0).collect());
    let with = median(rounds.iter().map(|r| r.1).collect());
    report.push("event_site_off", "empty-loop", None, "per_call", empty, "ns");
    report.push("event_site_off", "trace-off", None, "per_call", with, "ns");
    report.push("event_site_off", "trace-off", None, "added_per_call", (with - empty).max(0.0), "ns");

    // A burst that fits the queue: the recording thread's own cost. Then
    // sustained recording, where the writer's pace sets the cost.
    let burst = (hipmem::trace::QUEUE_EVENTS / 2) as u64;
    for (case, threads, events) in [
        ("event_on_burst".to_string(), 1u64, burst),
        ("event_on_1_thread".to_string(), 1, scale.on_events),
        ("event_on_4_threads".to_string(), 4, scale.on_events / 4),
    ] {
        progress.step(&format!("recording on, {threads} thread(s), {events} events each"));
        let mut rounds = Vec::new();
        for _ in 0..scale.rounds {
            rounds.push(on_round(threads, events)?);
        }
        let per_event = median(rounds.iter().map(|r| r.per_event_ns).collect());
        let drain = median(rounds.iter().map(|r| r.drain_ns).collect());
        let bytes = median(rounds.iter().map(|r| r.bytes_per_event).collect());
        report.push(&case, "trace-on", None, "per_event_on_thread", per_event, "ns");
        report.push(&case, "trace-on", None, "writer_backlog_after_loop", drain / 1e6, "ms");
        report.push(&case, "trace-on", None, "file_bytes_per_event", bytes, "B");
    }
    progress.finish();
    Ok(report)
}
