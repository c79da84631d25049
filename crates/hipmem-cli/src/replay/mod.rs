//! `hipmem replay TRACE` and `hipmem trace summary TRACE`: a recorded
//! allocation sequence (a hipmem trace or a PyTorch memory snapshot) replayed
//! into hipmem's pools, the driver's pool and plain hipMalloc, compared, and
//! drawn.

pub mod engine;
pub mod progress;
pub mod pytorch;
pub mod summary;
pub mod svg;
pub mod sweep;
pub mod workload;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

use hipmem::Runtime;
use serde::Serialize;

use self::engine::{Options, PoolKind, PoolResult};
use self::progress::Progress;
use self::workload::{Anomalies, Workload};
use crate::report;

/// What `hipmem replay` was asked.
#[derive(Clone, Debug, Default)]
pub struct ReplayArgs {
    /// The trace.
    pub trace: PathBuf,
    /// The allocators (empty: all the backend has).
    pub pools: Vec<String>,
    /// The device to replay on.
    pub device: usize,
    /// JSON instead of a table.
    pub json: bool,
    /// Where to write the SVG picture.
    pub svg: Option<PathBuf>,
    /// Where to write the HTML page.
    pub html: Option<PathBuf>,
    /// hipmem's pools: the idle-release window on the trace's clock, in
    /// milliseconds (0: off).
    pub idle_release_ms: u64,
    /// KiB of other memory written between operations (0: none).
    pub evict_kib: usize,
    /// List this many of the timed pass's slowest operations (0: none).
    pub slowest: usize,
    /// Print hipmem's pools' address maps just before this operation.
    pub map_at: Option<u64>,
    /// The "second half" starts at this operation (None: the midpoint).
    pub late_from: Option<u64>,
    /// Replay hipmem's pools once per idle-release window of these many
    /// milliseconds instead (`--idle-sweep`; empty: one replay).
    pub idle_sweep: Vec<u64>,
    /// With zone placement (`--zone`).
    pub zone: bool,
}

/// `--idle-release-ms`'s default: the window hipmem's PyTorch interface uses.
pub const DEFAULT_IDLE_RELEASE_MS: u64 = 100;

/// An allocator that was not replayed, and why.
#[derive(Clone, Debug, Serialize)]
pub struct Skipped {
    /// The allocator.
    pub pool: String,
    /// Why.
    pub reason: String,
}

/// The result of `hipmem replay`.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayReport {
    /// The trace file.
    pub trace: String,
    /// `hipmem-trace` or `pytorch-snapshot`.
    pub format: String,
    /// The backend replayed on.
    pub backend: String,
    /// The device replayed on.
    pub device: usize,
    /// Events read from the trace.
    pub events: u64,
    /// Operations replayed (allocations and frees).
    pub ops: u64,
    /// Allocations.
    pub allocs: u64,
    /// Streams.
    pub streams: usize,
    /// Most live bytes (requested sizes), from the trace.
    pub peak_live_bytes: u64,
    /// Most live bytes counted in 256-byte granules (what a hipmem pool's UsedMemHigh reads).
    pub peak_live_granule_bytes: u64,
    /// When the peak was first reached (trace clock: ns, or the op index when untimed).
    pub peak_at: Option<u64>,
    /// What was odd in the trace (skipped; the replay went on).
    pub anomalies: Anomalies,
    /// One entry per allocator.
    pub pools: Vec<PoolResult>,
    /// Allocators not replayed.
    pub skipped: Vec<Skipped>,
    /// The operation where the "second half" starts (`--late-from`; else
    /// the midpoint).
    pub late_from_op: u64,
}

/// Parses `--pool` values (comma-separated or repeated); empty: every kind.
pub fn parse_pools(values: &[String]) -> Result<Vec<PoolKind>, String> {
    let mut kinds = Vec::new();
    for v in values.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|v| !v.is_empty()) {
        let kind = PoolKind::parse(v)
            .ok_or_else(|| format!("unknown pool '{v}': use vmm, segments, driver or malloc"))?;
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    if kinds.is_empty() {
        kinds = PoolKind::ALL.to_vec();
    }
    Ok(kinds)
}

/// Replays `w` into every allocator of `kinds` that the backend has, as
/// `opts` says (hipmem's pools release memory idle for windows of
/// `opts.idle` on the trace's clock, where the trace is timed).
pub fn replay(
    rt: &Runtime,
    w: &Workload,
    kinds: &[PoolKind],
    device: usize,
    opts: &Options,
    progress: &mut Progress,
) -> Result<ReplayReport, String> {
    rt.check_device(device).map_err(|e| e.to_string())?;
    let mut pools = Vec::new();
    let mut skipped = Vec::new();
    // The map is drawn for the first hipmem pool replayed.
    let mut want_layout = true;
    for &kind in kinds {
        match engine::replay(rt, kind, device, w, want_layout && kind.is_hipmem(), opts, progress) {
            Ok(result) => {
                if kind.is_hipmem() && result.layout_at_peak.is_some() {
                    want_layout = false;
                }
                pools.push(result);
            }
            Err(reason) => {
                progress.done();
                skipped.push(Skipped { pool: kind.name().into(), reason });
            }
        }
    }
    Ok(ReplayReport {
        trace: w.name.clone(),
        format: match w.source {
            workload::Source::Hipmem { .. } => "hipmem-trace".into(),
            workload::Source::PytorchSnapshot { .. } => "pytorch-snapshot".into(),
        },
        backend: rt.backend_kind().to_string(),
        device,
        events: w.counts.events,
        ops: w.ops.len() as u64,
        allocs: w.alloc_count() as u64,
        streams: w.streams.len(),
        peak_live_bytes: w.peak_live,
        peak_live_granule_bytes: w.peak_live_granules,
        peak_at: w.peak_op.map(|i| w.time_of(i)),
        anomalies: w.anomalies.clone(),
        late_from_op: opts.late_from_op(w) as u64,
        pools,
        skipped,
    })
}

fn write_file(path: &Path, text: &str) -> hipmem::Result<()> {
    std::fs::write(path, text)
        .map_err(|e| hipmem::Error::InvalidValue(format!("cannot write {}: {e}", path.display())))
}

/// `hipmem replay`.
pub fn run(rt: &Runtime, args: &ReplayArgs) -> hipmem::Result<()> {
    let kinds = parse_pools(&args.pools).map_err(hipmem::Error::InvalidValue)?;
    // Recording the replay into the file being replayed would overwrite it.
    if let Some(out) = std::env::var_os("HIPMEM_TRACE").filter(|p| !p.is_empty()) {
        let same = |a: &Path, b: &Path| {
            a.canonicalize().ok().zip(b.canonicalize().ok()).is_some_and(|(a, b)| a == b)
        };
        if same(Path::new(&out), &args.trace) {
            return Err(hipmem::Error::InvalidValue(format!(
                "HIPMEM_TRACE names {}, the trace being replayed: recording would overwrite it",
                args.trace.display()
            )));
        }
    }
    let w = Workload::load(&args.trace).map_err(hipmem::Error::InvalidValue)?;
    let mut progress = Progress::on_terminal();
    let idle = (args.idle_release_ms > 0).then(|| std::time::Duration::from_millis(args.idle_release_ms));
    for (flag, op) in [("--map-at", args.map_at), ("--late-from", args.late_from)] {
        if let Some(op) = op.filter(|&op| op >= w.ops.len() as u64) {
            return Err(hipmem::Error::InvalidValue(format!(
                "{flag} {op}: the trace has {} operations (0 to {})",
                w.ops.len(),
                w.ops.len().saturating_sub(1)
            )));
        }
    }
    if !args.idle_sweep.is_empty() {
        return run_sweep(rt, args, &w, &kinds, &mut progress);
    }
    let opts = Options {
        idle,
        evict_kib: args.evict_kib,
        slowest: args.slowest,
        map_at: args.map_at,
        late_from: args.late_from,
        zone: args.zone,
    };
    let report =
        replay(rt, &w, &kinds, args.device, &opts, &mut progress).map_err(hipmem::Error::InvalidValue)?;
    let backend = format!("{} device {}", report.backend, report.device);
    if let Some(path) = &args.svg {
        write_file(path, &svg::render(&w, &report.pools, &backend))?;
    }
    if let Some(path) = &args.html {
        let skipped: Vec<(String, String)> =
            report.skipped.iter().map(|s| (s.pool.clone(), s.reason.clone())).collect();
        write_file(path, &svg::render_html(&w, &report.pools, &skipped, &backend))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        print_table(&report, &w);
        for path in [&args.svg, &args.html].into_iter().flatten() {
            println!("picture: {}", path.display());
        }
    }
    Ok(())
}

/// `hipmem replay --idle-sweep`: the options that draw or time one replay
/// are refused with it (each names a single replay).
fn run_sweep(
    rt: &Runtime,
    args: &ReplayArgs,
    w: &Workload,
    kinds: &[PoolKind],
    progress: &mut Progress,
) -> hipmem::Result<()> {
    let single = [
        ("--svg", args.svg.is_some()),
        ("--html", args.html.is_some()),
        ("--map-at", args.map_at.is_some()),
        ("--slowest", args.slowest > 0),
        ("--evict-kib", args.evict_kib > 0),
    ];
    if let Some((flag, _)) = single.iter().find(|(_, on)| *on) {
        return Err(hipmem::Error::InvalidValue(format!(
            "{flag} describes one replay, and --idle-sweep makes one per window: run it with --idle-release-ms instead"
        )));
    }
    let report = sweep::sweep(
        rt,
        w,
        kinds,
        args.device,
        &args.idle_sweep,
        Options { late_from: args.late_from, zone: args.zone, ..Options::default() },
        progress,
    )
    .map_err(hipmem::Error::InvalidValue)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    } else {
        sweep::print(&report);
    }
    Ok(())
}

/// A pool's driver calls for a table: all of them, and the second half's
/// ("-" for an allocator that does not count them).
pub(crate) fn calls_cell(p: &PoolResult) -> String {
    match (p.backend_calls, p.backend_calls_second_half) {
        (Some(all), Some(late)) => match p.backend_releases_on_worker {
            Some(w) if w > 0 => format!("{all} ({late} late, {w} worker)"),
            _ => format!("{all} ({late} late)"),
        },
        _ => "-".into(),
    }
}

fn print_table(r: &ReplayReport, w: &Workload) {
    println!("trace: {} ({}, {} events, {} streams)", r.trace, r.format, r.events, r.streams);
    println!(
        "replayed on {} device {}: {} operations ({} allocations); peak live {} ({} bytes) at {}",
        r.backend,
        r.device,
        r.ops,
        r.allocs,
        report::bytes(r.peak_live_bytes),
        r.peak_live_bytes,
        match r.peak_at {
            Some(t) if w.timed => report::duration(std::time::Duration::from_nanos(t)),
            Some(t) => format!("op {t}"),
            None => "-".into(),
        }
    );
    if r.anomalies.any() {
        println!(
            "trace anomalies (skipped, the replay went on): {} frees of unknown addresses, {} double frees, {} allocations over live addresses",
            r.anomalies.unknown_frees, r.anomalies.double_frees, r.anomalies.allocs_over_live
        );
    }
    println!();
    println!(
        "{:<16} {:>10} {:>9} {:>12} {:>14} {:>15} {:>11} {:>10} {:>10} {:>14}",
        "pool",
        "ops",
        "failures",
        "peak live",
        "peak reserved",
        "reserved/live",
        "second half",
        "time/op",
        "late t/op",
        "backend calls"
    );
    for p in &r.pools {
        println!(
            "{:<16} {:>10} {:>9} {:>12} {:>14} {:>15.3} {:>11.3} {:>10} {:>10} {:>14}",
            p.pool,
            p.ops,
            p.failures,
            report::bytes(p.peak_live_bytes),
            report::bytes(p.peak_reserved_bytes),
            p.reserved_over_live,
            p.reserved_over_live_second_half,
            report::duration(std::time::Duration::from_nanos(p.time_per_op_ns.round() as u64)),
            report::duration(std::time::Duration::from_nanos(p.time_per_op_second_half_ns.round() as u64)),
            calls_cell(p)
        );
    }
    if r.pools.iter().any(|p| p.backend_calls.is_some()) {
        let from = if r.late_from_op == r.ops / 2 {
            "its midpoint".to_string()
        } else {
            format!("operation {} (--late-from)", r.late_from_op)
        };
        println!(
            "second half, late t/op: peak reserved / peak live, and time per operation, in the trace's second half (peaks reset at {from}, as after a warm-up)\nbackend calls: hipmem's maps, unmaps and physical allocations in the timed pass (late: in the trace's second half, on the replaying thread; worker: releases the pool's release worker made off it)"
        );
    }
    if let Some(ms) = r.pools.iter().find_map(|p| p.idle_release_ms) {
        println!(
            "hipmem's pools released memory idle for two windows of {ms} ms on the trace's clock (a peak left behind: one), as hipmem's PyTorch interface does (--idle-release-ms 0: off)"
        );
    }
    for p in r.pools.iter().filter(|p| p.backend_calls.is_some()) {
        if let Some(op) = p.peak_reserved_op_second_half {
            println!(
                "{}: the second half's most memory was held after op {op} (--map-at {} shows the pool just after it)",
                p.pool,
                op + 1
            );
            if let Some(f) = &p.free_at_peak_second_half {
                println!(
                    "{}: then {} lay free beside live blocks in physical pieces ({:.1}% of the second half's peak live bytes; held until those blocks are freed) and {} in wholly free pieces",
                    p.pool,
                    report::bytes(f.beside_live),
                    percent(f.beside_live, p.peak_live_second_half),
                    report::bytes(f.in_whole_pieces)
                );
            }
        }
    }
    for p in &r.pools {
        if let Some(c) = p.plan.filter(|c| c.plans > 0) {
            println!(
                "{}: learned layouts: {} plan(s), {} allocations served from a plan, {} took the usual path, {} plan(s) ended",
                p.pool, c.plans, c.served, c.missed, c.ended
            );
        }
        if let (Some(first), Some(peak)) = (p.first_planned_op, p.peak_reserved_op) {
            println!(
                "{}: a plan served from op {first} of {}; the most memory was held after op {peak}, {}",
                p.pool,
                p.ops,
                if peak < first {
                    "while the pool learned (the trace's first steps: see the second half)"
                } else {
                    "while a plan ran"
                }
            );
        }
    }
    for p in &r.pools {
        if let Some(profile) = &p.profile {
            print_profile(p, profile);
        }
        if let Some(map) = &p.map_at {
            print_map(p, map);
        }
    }
    for p in r.pools.iter().filter(|p| p.first_failure.is_some()) {
        println!("{}: first failure: {}", p.pool, p.first_failure.as_deref().unwrap_or(""));
    }
    for s in &r.skipped {
        println!("{}: not replayed ({})", s.pool, s.reason);
    }
}

/// Share of `part` in `whole`, in percent.
fn percent(part: u64, whole: u64) -> f64 {
    if whole == 0 { 0.0 } else { 100.0 * part as f64 / whole as f64 }
}

fn ns(n: u64) -> String {
    report::duration(std::time::Duration::from_nanos(n))
}

/// `--slowest`: where the timed pass's time went.
fn print_profile(p: &PoolResult, profile: &engine::OpProfile) {
    println!();
    println!(
        "{}: the timed pass's operations took {} ({} in the second half)",
        p.pool,
        ns(profile.time_ns),
        ns(profile.time_second_half_ns)
    );
    if let Some([n, t, n_late, t_late]) = profile.with_backend_calls {
        println!(
            "{}: {n} operations made backend calls and took {:.1}% of it ({n_late} and {:.1}% in the second half); the rest is the pool's own work",
            p.pool,
            percent(t, profile.time_ns),
            percent(t_late, profile.time_second_half_ns)
        );
    }
    if profile.slowest.is_empty() {
        return;
    }
    println!("{}: the {} slowest operations:", p.pool, profile.slowest.len());
    println!(
        "  {:>9}  {:<5} {:>12} {:>6} {:>10} {:>13}",
        "op", "what", "bytes", "stream", "time", "backend calls"
    );
    for o in &profile.slowest {
        println!(
            "  {:>9}  {:<5} {:>12} {:>6} {:>10} {:>13}",
            o.op,
            o.kind,
            report::bytes(o.bytes),
            o.stream,
            ns(o.time_ns),
            o.backend_calls.map_or("-".to_string(), |c| c.to_string())
        );
    }
}

/// Runs printed by `--map-at` at most (the JSON has them all).
const MAP_LINES: usize = 200;

/// `--map-at`: a hipmem pool's address map before an operation.
fn print_map(p: &PoolResult, map: &engine::AddressMap) {
    let f = map.free;
    println!();
    println!(
        "{}: before op {}: {} free in {} physical pieces ({} of memory): {} in wholly free pieces (the pool can give it back or move it under a request), {} beside live blocks in the same piece (usable where it lies, but neither given back nor moved while they live)",
        p.pool,
        map.op,
        report::bytes(f.free),
        map.pieces.len(),
        report::bytes(map.pieces.iter().map(|q| q.size).sum()),
        report::bytes(f.in_whole_pieces),
        report::bytes(f.beside_live),
    );
    println!("  {:<18} {:>12}  what", "address", "bytes");
    for run in map.runs.iter().take(MAP_LINES) {
        println!("  {:#018x} {:>12}  {}", run.start, report::bytes(run.size), run.kind.name());
    }
    if map.runs.len() > MAP_LINES {
        println!("  ... {} more runs (--json lists them all)", map.runs.len() - MAP_LINES);
    }
}

/// `hipmem trace summary`.
pub fn run_summary(trace: &Path, json: bool, top: usize) -> hipmem::Result<()> {
    let w = Workload::load(trace).map_err(hipmem::Error::InvalidValue)?;
    let s = summary::summarize(&w, top);
    if json {
        println!("{}", serde_json::to_string_pretty(&s).unwrap_or_default());
    } else {
        summary::print(&s);
    }
    Ok(())
}
