//! `hipmem replay --idle-sweep`: one trace replayed into hipmem's pools once
//! per idle-release window, and the spread of what they held.
//!
//! hipmem's PyTorch interface gives memory back after windows of wall-clock
//! time, so a process that runs slower (another job on the machine, a GPU
//! in a slow episode) fits fewer of its steps into a window, and where a
//! step's blocks lie when its largest request comes changes with it. On the
//! replay's clock a shorter window plays a slower run: the spread over a few
//! windows is what a live run's processes may hold, where one window shows
//! one of them (the recorded variable-length inference run held 1.003 of its
//! timed batches' peak at 100 ms and 1.027 at 50).

use serde::Serialize;

use super::engine::{Options, PoolKind, PoolResult};
use super::progress::Progress;
use super::workload::Workload;
use hipmem::Runtime;

/// One window of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepWindow {
    /// The idle-release window on the trace's clock, in milliseconds (0: off).
    pub idle_release_ms: u64,
    /// What each hipmem pool did (without the reserved series and the
    /// layout at the peak, which a sweep does not draw).
    pub pools: Vec<PoolResult>,
}

/// The spread of one pool's second-half figure over the windows.
#[derive(Clone, Debug, Serialize)]
pub struct Spread {
    /// The pool.
    pub pool: String,
    /// The least peak reserved / peak live of the second half.
    pub least: f64,
    /// The median (the lower middle one where the count is even).
    pub median: f64,
    /// The most.
    pub most: f64,
    /// The window where it held the most (the first such, in the order given).
    pub most_at_ms: u64,
    /// Windows whose second half held more than `bound` of its peak.
    pub over_bound: usize,
}

/// The result of `hipmem replay --idle-sweep`.
#[derive(Clone, Debug, Serialize)]
pub struct SweepReport {
    /// The trace file.
    pub trace: String,
    /// The backend replayed on.
    pub backend: String,
    /// Operations replayed per window.
    pub ops: u64,
    /// Where the second half starts (`--late-from`; else the midpoint).
    pub late_from_op: u64,
    /// The ratio `Spread::over_bound` counts windows above.
    pub bound: f64,
    /// One entry per window, in the order given.
    pub windows: Vec<SweepWindow>,
    /// One entry per pool.
    pub spread: Vec<Spread>,
}

/// The ratio a sweep counts windows above: issue 13's target for a pool's
/// peak reserved over peak live after a warm-up.
pub const BOUND: f64 = 1.03;

/// Replays `w` into hipmem's pools among `kinds` once per window of
/// `windows_ms` (0: no idle release), otherwise as `base` says (where the
/// second half starts, zone placement; its own window is not used). Err: no hipmem pool named, no window, a window repeated, or
/// a trace without times (a window needs the trace's clock).
pub fn sweep(
    rt: &Runtime,
    w: &Workload,
    kinds: &[PoolKind],
    device: usize,
    windows_ms: &[u64],
    base: Options,
    progress: &mut Progress,
) -> Result<SweepReport, String> {
    let kinds: Vec<PoolKind> = kinds.iter().copied().filter(|k| k.is_hipmem()).collect();
    if kinds.is_empty() {
        return Err(
            "--idle-sweep replays hipmem's pools only: name vmm, vmm-lowmem, vmm-units, vmm-pieces, vmm-mixed or segments".into()
        );
    }
    if windows_ms.is_empty() {
        return Err("--idle-sweep needs at least one window (milliseconds, comma-separated)".into());
    }
    if let Some(ms) =
        windows_ms.iter().enumerate().find_map(|(i, ms)| windows_ms[..i].contains(ms).then_some(ms))
    {
        return Err(format!("--idle-sweep names the window {ms} ms twice"));
    }
    if !w.timed {
        return Err(format!("{}: the trace has no times, so an idle-release window means nothing", w.name));
    }
    let mut windows = Vec::new();
    let mut late_from_op = 0;
    for &ms in windows_ms {
        let opts = Options { idle: (ms > 0).then(|| std::time::Duration::from_millis(ms)), ..base };
        let report = super::replay(rt, w, &kinds, device, &opts, progress)?;
        if let Some(s) = report.skipped.first() {
            return Err(format!("{}: {}", s.pool, s.reason));
        }
        late_from_op = report.late_from_op;
        let pools = report
            .pools
            .into_iter()
            .map(|mut p| {
                p.reserved_series = Vec::new();
                p.layout_at_peak = None;
                p
            })
            .collect();
        windows.push(SweepWindow { idle_release_ms: ms, pools });
    }
    let spread = kinds.iter().map(|k| spread_of(k.name(), &windows)).collect();
    Ok(SweepReport {
        trace: w.name.clone(),
        backend: rt.backend_kind().to_string(),
        ops: w.ops.len() as u64,
        late_from_op,
        bound: BOUND,
        windows,
        spread,
    })
}

/// The spread of `pool`'s second-half figure over `windows`.
fn spread_of(pool: &str, windows: &[SweepWindow]) -> Spread {
    let figures: Vec<(f64, u64)> = windows
        .iter()
        .filter_map(|w| {
            let p = w.pools.iter().find(|p| p.pool == pool)?;
            Some((p.reserved_over_live_second_half, w.idle_release_ms))
        })
        .collect();
    let mut sorted: Vec<f64> = figures.iter().map(|&(f, _)| f).collect();
    sorted.sort_by(f64::total_cmp);
    let (most, most_at_ms) =
        figures.iter().copied().fold((f64::NEG_INFINITY, 0), |m, (f, ms)| if f > m.0 { (f, ms) } else { m });
    Spread {
        pool: pool.into(),
        least: sorted.first().copied().unwrap_or(0.0),
        median: sorted.get(sorted.len().saturating_sub(1) / 2).copied().unwrap_or(0.0),
        most: if figures.is_empty() { 0.0 } else { most },
        most_at_ms,
        over_bound: sorted.iter().filter(|&&f| f > BOUND).count(),
    }
}

/// Prints a sweep as a table: a row per window and pool, then each pool's
/// spread.
pub fn print(r: &SweepReport) {
    println!(
        "trace: {} replayed on {} ({} operations), once per idle-release window; the second half from operation {}",
        r.trace, r.backend, r.ops, r.late_from_op
    );
    println!();
    println!(
        "{:>10} {:<18} {:>15} {:>11} {:>16} {:>14} {:>20}",
        "window ms", "pool", "reserved/live", "second half", "late peak op", "beside live", "backend calls"
    );
    for w in &r.windows {
        for p in &w.pools {
            println!(
                "{:>10} {:<18} {:>15.3} {:>11.3} {:>16} {:>14} {:>20}",
                w.idle_release_ms,
                p.pool,
                p.reserved_over_live,
                p.reserved_over_live_second_half,
                p.peak_reserved_op_second_half.map_or_else(|| "-".into(), |op| op.to_string()),
                p.free_at_peak_second_half
                    .map_or_else(|| "-".into(), |f| crate::report::bytes(f.beside_live)),
                super::calls_cell(p)
            );
        }
    }
    println!();
    for s in &r.spread {
        println!(
            "{}: the second half held {:.3} to {:.3} of its peak (median {:.3}; the most at {} ms), above {} in {} of {} windows",
            s.pool,
            s.least,
            s.most,
            s.median,
            s.most_at_ms,
            r.bound,
            s.over_bound,
            r.windows.len()
        );
    }
    println!(
        "a shorter window on the trace's clock plays a slower run of the same steps (hipmem's PyTorch interface measures its window on the wall clock, 100 ms); 0: no idle release"
    );
    println!(
        "beside live: free memory in physical pieces that also held live blocks just after the late peak op (held until those blocks are freed)"
    );
}
