//! `hipmem trace summary`: what a trace says about a program's memory: the
//! sizes that dominate, how fast allocations come and go, the streams, and
//! the moment of the peak with what was live then.

use std::collections::HashMap;

use serde::Serialize;

use super::workload::{Anomalies, OpKind, Source, Workload};
use crate::report;

/// A row of a size table.
#[derive(Clone, Debug, Serialize)]
pub struct SizeRow {
    /// The size (exact), or the upper bound of the class (powers of two).
    pub size: u64,
    /// Allocations.
    pub count: u64,
    /// Bytes allocated in all.
    pub bytes: u64,
}

/// One stream's share.
#[derive(Clone, Debug, Serialize)]
pub struct StreamRow {
    /// Device ordinal.
    pub device: u32,
    /// The stream's id in the recording.
    pub stream: u64,
    /// Allocations made on it.
    pub allocs: u64,
    /// Bytes allocated on it.
    pub bytes: u64,
    /// Frees issued on it.
    pub frees: u64,
    /// Of those, frees of memory allocated on another stream.
    pub cross_stream_frees: u64,
    /// Most bytes live at once of the allocations made on it.
    pub peak_live: u64,
}

/// A block live at the peak.
#[derive(Clone, Debug, Serialize)]
pub struct LiveBlock {
    /// Address in the recording.
    pub addr: u64,
    /// Bytes.
    pub size: u64,
    /// Device and stream id it was allocated on.
    pub device: u32,
    /// The stream's id in the recording.
    pub stream: u64,
    /// When it was allocated (trace clock).
    pub allocated_at: u64,
}

/// The whole summary.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    /// The file.
    pub trace: String,
    /// Where it came from.
    pub source: Source,
    /// Whether times are real (else the clock is the op index).
    pub timed: bool,
    /// The span from the first to the last operation (ns, or ops when untimed).
    pub duration: u64,
    /// Events read.
    pub events: u64,
    /// Allocations.
    pub allocs: u64,
    /// Frees.
    pub frees: u64,
    /// free_completed events.
    pub free_completed: u64,
    /// Pool growths, releases, trims.
    pub pool_grows: u64,
    /// Pool releases.
    pub pool_releases: u64,
    /// Trims.
    pub trims: u64,
    /// OutOfMemory events.
    pub ooms: u64,
    /// Bytes allocated over the whole trace.
    pub bytes_allocated: u64,
    /// bytes_allocated / peak_live: how many times over the peak's memory was allocated.
    pub churn: f64,
    /// Allocations per second of trace time (timed traces).
    pub allocs_per_second: Option<f64>,
    /// Median and 90th percentile lifetime of freed allocations (trace clock).
    pub lifetime_median: Option<u64>,
    /// 90th percentile lifetime.
    pub lifetime_p90: Option<u64>,
    /// Allocations never freed, and their bytes.
    pub never_freed: u64,
    /// Bytes never freed.
    pub never_freed_bytes: u64,
    /// Size classes (powers of two) by bytes allocated.
    pub size_classes: Vec<SizeRow>,
    /// The most frequent exact sizes.
    pub frequent_sizes: Vec<SizeRow>,
    /// The streams.
    pub streams: Vec<StreamRow>,
    /// Most live bytes.
    pub peak_live: u64,
    /// When (trace clock).
    pub peak_at: Option<u64>,
    /// Blocks live then.
    pub peak_blocks: u64,
    /// The largest of them.
    pub largest_at_peak: Vec<LiveBlock>,
    /// The recording allocator's most reserved bytes, where the trace says.
    pub recorded_peak_reserved: Option<u64>,
    /// What was odd.
    pub anomalies: Anomalies,
}

fn percentile(sorted: &[u64], p: f64) -> Option<u64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    Some(sorted[i])
}

/// Summarizes `w`, listing `top` rows in each table.
pub fn summarize(w: &Workload, top: usize) -> Summary {
    let mut classes: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut exact: HashMap<u64, (u64, u64)> = HashMap::new();
    let mut bytes_allocated = 0u64;
    let mut lifetimes = Vec::new();
    let mut never_freed = 0;
    let mut never_freed_bytes = 0;
    for a in &w.allocs {
        bytes_allocated += a.size;
        let class = a.size.max(1).next_power_of_two();
        let c = classes.entry(class).or_default();
        c.0 += 1;
        c.1 += a.size;
        let e = exact.entry(a.size).or_default();
        e.0 += 1;
        e.1 += a.size;
        match a.free_op {
            Some(f) => lifetimes.push(w.time_of(f as usize) - w.time_of(a.alloc_op as usize)),
            None => {
                never_freed += 1;
                never_freed_bytes += a.size;
            }
        }
    }
    lifetimes.sort_unstable();
    let rows = |m: HashMap<u64, (u64, u64)>, by_bytes: bool| {
        let mut v: Vec<SizeRow> =
            m.into_iter().map(|(size, (count, bytes))| SizeRow { size, count, bytes }).collect();
        if by_bytes {
            v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.size.cmp(&b.size)));
        } else {
            v.sort_by(|a, b| b.count.cmp(&a.count).then(b.bytes.cmp(&a.bytes)));
        }
        v.truncate(top);
        v
    };

    // Streams: allocations, frees and each stream's own live peak.
    let mut streams: Vec<StreamRow> = w
        .streams
        .iter()
        .map(|s| StreamRow {
            device: s.device,
            stream: s.id,
            allocs: 0,
            bytes: 0,
            frees: 0,
            cross_stream_frees: 0,
            peak_live: 0,
        })
        .collect();
    let mut live = vec![0u64; w.streams.len()];
    for op in &w.ops {
        let a = &w.allocs[op.slot as usize];
        let owner = a.stream as usize;
        match op.kind {
            OpKind::Alloc => {
                streams[owner].allocs += 1;
                streams[owner].bytes += a.size;
                live[owner] += a.size;
                streams[owner].peak_live = streams[owner].peak_live.max(live[owner]);
            }
            OpKind::Free => {
                let by = op.stream as usize;
                streams[by].frees += 1;
                if by != owner {
                    streams[by].cross_stream_frees += 1;
                }
                live[owner] -= a.size;
            }
        }
    }

    let (peak_blocks, largest_at_peak) = match w.peak_op {
        Some(at) => {
            let mut slots = w.live_at(at);
            slots.sort_by_key(|&s| std::cmp::Reverse(w.allocs[s as usize].size));
            let n = slots.len() as u64;
            let blocks = slots
                .iter()
                .take(top)
                .map(|&s| {
                    let a = &w.allocs[s as usize];
                    let st = &w.streams[a.stream as usize];
                    LiveBlock {
                        addr: a.addr,
                        size: a.size,
                        device: st.device,
                        stream: st.id,
                        allocated_at: w.time_of(a.alloc_op as usize),
                    }
                })
                .collect();
            (n, blocks)
        }
        None => (0, Vec::new()),
    };
    let duration = w.duration();
    Summary {
        trace: w.name.clone(),
        source: w.source.clone(),
        timed: w.timed,
        duration,
        events: w.counts.events,
        allocs: w.allocs.len() as u64,
        frees: (w.ops.len() - w.allocs.len()) as u64,
        free_completed: w.counts.free_completed,
        pool_grows: w.counts.pool_grows,
        pool_releases: w.counts.pool_releases,
        trims: w.counts.trims,
        ooms: w.counts.ooms.len() as u64,
        bytes_allocated,
        churn: if w.peak_live == 0 { 0.0 } else { bytes_allocated as f64 / w.peak_live as f64 },
        allocs_per_second: (w.timed && duration > 0).then(|| w.allocs.len() as f64 / (duration as f64 / 1e9)),
        lifetime_median: percentile(&lifetimes, 0.5),
        lifetime_p90: percentile(&lifetimes, 0.9),
        never_freed,
        never_freed_bytes,
        size_classes: rows(classes, true),
        frequent_sizes: rows(exact, false),
        streams,
        peak_live: w.peak_live,
        peak_at: w.peak_op.map(|i| w.time_of(i)),
        peak_blocks,
        largest_at_peak,
        recorded_peak_reserved: w.recorded_reserved.iter().map(|&(_, b)| b).max(),
        anomalies: w.anomalies.clone(),
    }
}

fn when(s: &Summary, t: u64) -> String {
    if s.timed { report::duration(std::time::Duration::from_nanos(t)) } else { format!("op {t}") }
}

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 { "-".into() } else { format!("{:.1}%", part as f64 * 100.0 / whole as f64) }
}

/// The summary as text.
pub fn print(s: &Summary) {
    println!("trace: {}", s.trace);
    match &s.source {
        Source::Hipmem { version, pid, backend, argv, complete, skipped_lines } => {
            println!(
                "  hipmem trace v{version}, pid {pid}, backend {}, command: {}",
                backend.as_deref().unwrap_or("unknown"),
                if argv.is_empty() { "unknown".into() } else { argv.join(" ") }
            );
            if !complete {
                println!(
                    "  no end line: the recording process did not stop the trace (its last events may be missing)"
                );
            }
            if *skipped_lines > 0 {
                println!("  {skipped_lines} lines of kinds this hipmem does not know were skipped");
            }
        }
        Source::PytorchSnapshot { devices, other_entries } => {
            println!("  PyTorch memory snapshot, {devices} device trace(s), {other_entries} other entries");
        }
    }
    println!(
        "  {} events over {}: {} allocations, {} frees, {} frees completed, {} pool growths, {} releases, {} trims, {} OutOfMemory",
        s.events,
        when(s, s.duration),
        s.allocs,
        s.frees,
        s.free_completed,
        s.pool_grows,
        s.pool_releases,
        s.trims,
        s.ooms
    );
    println!();
    println!(
        "peak: {} live in {} blocks at {}",
        report::bytes(s.peak_live),
        s.peak_blocks,
        s.peak_at.map(|t| when(s, t)).unwrap_or_else(|| "-".into())
    );
    if let Some(r) = s.recorded_peak_reserved {
        println!(
            "  the recording allocator reserved at most {} ({:.2}× the peak live)",
            report::bytes(r),
            r as f64 / s.peak_live.max(1) as f64
        );
    }
    if !s.largest_at_peak.is_empty() {
        println!("  largest blocks live then:");
        println!(
            "    {:>18}  {:>12}  {:>6}  {:>18}  {:>12}",
            "address", "size", "device", "stream", "allocated at"
        );
        for b in &s.largest_at_peak {
            println!(
                "    {:>18}  {:>12}  {:>6}  {:>18}  {:>12}",
                format!("{:#x}", b.addr),
                report::bytes(b.size),
                b.device,
                format!("{:#x}", b.stream),
                when(s, b.allocated_at)
            );
        }
    }
    println!();
    println!("churn: {} allocated in all, {:.1}× the peak live", report::bytes(s.bytes_allocated), s.churn);
    if let Some(rate) = s.allocs_per_second {
        println!("  {rate:.0} allocations per second of trace time");
    }
    if let (Some(m), Some(p)) = (s.lifetime_median, s.lifetime_p90) {
        println!("  lifetime of freed allocations: median {}, 90th percentile {}", when(s, m), when(s, p));
    }
    if s.never_freed > 0 {
        println!(
            "  {} allocations ({}) never freed in the trace",
            s.never_freed,
            report::bytes(s.never_freed_bytes)
        );
    }
    println!();
    println!("sizes that dominate (power-of-two classes, by bytes):");
    println!("    {:>12}  {:>10}  {:>7}  {:>12}  {:>7}", "class ≤", "allocs", "", "bytes", "");
    for r in &s.size_classes {
        println!(
            "    {:>12}  {:>10}  {:>7}  {:>12}  {:>7}",
            report::bytes(r.size),
            r.count,
            pct(r.count, s.allocs),
            report::bytes(r.bytes),
            pct(r.bytes, s.bytes_allocated)
        );
    }
    println!("most frequent sizes:");
    for r in &s.frequent_sizes {
        println!("    {:>12} bytes  {:>10} allocations  {:>7}", r.size, r.count, pct(r.count, s.allocs));
    }
    println!();
    println!("streams:");
    println!(
        "    {:>6}  {:>18}  {:>10}  {:>12}  {:>10}  {:>12}  {:>12}",
        "device", "stream", "allocs", "bytes", "frees", "cross-stream", "peak live"
    );
    for r in &s.streams {
        println!(
            "    {:>6}  {:>18}  {:>10}  {:>12}  {:>10}  {:>12}  {:>12}",
            r.device,
            format!("{:#x}", r.stream),
            r.allocs,
            report::bytes(r.bytes),
            r.frees,
            r.cross_stream_frees,
            report::bytes(r.peak_live)
        );
    }
    if s.anomalies.any() {
        println!();
        println!(
            "anomalies: {} frees of unknown addresses, {} double frees, {} allocations over live addresses",
            s.anomalies.unknown_frees, s.anomalies.double_frees, s.anomalies.allocs_over_live
        );
    }
}
