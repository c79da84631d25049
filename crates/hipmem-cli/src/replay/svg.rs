//! The picture of a replay, as SVG written by hand: live bytes and every
//! allocator's reserved bytes over the trace's time (the gap between them is
//! what the allocator holds beyond what is live), and a map of a hipmem
//! pool's address range when the live bytes peaked. `--html` wraps it with a
//! table of the figures.

use std::fmt::Write as _;

use hipmem::pool::layout::{AddressRun, RunKind};

use super::engine::PoolResult;
use super::workload::Workload;
use crate::report;

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 96.0;
const RIGHT: f64 = 36.0;
const CHART_TOP: f64 = 84.0;
const CHART_HEIGHT: f64 = 330.0;
const PLOT_W: f64 = WIDTH - LEFT - RIGHT;

const LIVE_STROKE: &str = "#1d4ed8";
const LIVE_FILL: &str = "#bfdbfe";
const RECORDED: &str = "#111827";

fn pool_color(name: &str) -> &'static str {
    match name {
        "hipmem-vmm" => "#dc2626",
        "hipmem-segments" => "#ea580c",
        "driver-pool" => "#7c3aed",
        "malloc" => "#059669",
        _ => "#6b7280",
    }
}

/// The baseline's line is dotted: with no caching it runs along the live bytes.
fn dash_of(pool: &str) -> &'static str {
    if pool == "malloc" { r#" stroke-dasharray="2 3""# } else { "" }
}

fn run_color(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Live => "#2563eb",
        RunKind::Cached => "#93c5fd",
        RunKind::PendingFree => "#f59e0b",
        RunKind::Free => "#34d399",
        RunKind::Unbacked => "#e5e7eb",
    }
}

fn run_label(kind: RunKind) -> &'static str {
    match kind {
        RunKind::Live => "live",
        RunKind::Cached => "cached by a stream",
        RunKind::PendingFree => "freed, pending",
        RunKind::Free => "free",
        RunKind::Unbacked => "unbacked (no memory)",
    }
}

/// The last component of a path.
fn file_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.into())
}

/// XML text escaping.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => out.push('?'),
            c => out.push(c),
        }
    }
    out
}

/// A "nice" step (1, 2, 2.5 or 5 times a power of ten) for about `ticks` ticks up to `max`.
fn nice_step(max: f64, ticks: f64) -> f64 {
    if max <= 0.0 {
        return 1.0;
    }
    let raw = max / ticks;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 2.5 {
        2.5
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * mag
}

fn trim_number(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The byte unit for values up to `max`: (divisor, name).
fn byte_unit(max: u64) -> (f64, &'static str) {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut div = 1.0;
    while max as f64 / div >= 1024.0 && unit + 1 < UNITS.len() {
        div *= 1024.0;
        unit += 1;
    }
    (div, UNITS[unit])
}

/// The time unit for spans up to `max` ns: (divisor, name).
fn time_unit(max: u64) -> (f64, &'static str) {
    match max {
        0..1_000 => (1.0, "ns"),
        1_000..1_000_000 => (1e3, "µs"),
        1_000_000..1_000_000_000 => (1e6, "ms"),
        _ => (1e9, "s"),
    }
}

/// Bucketed step series: for each pixel column with data, the value before
/// it, its maximum and its last value, so peaks survive any downsampling.
struct Columns {
    cols: Vec<Option<(u64, u64)>>, // (max, last)
}

impl Columns {
    fn new() -> Columns {
        Columns { cols: vec![None; PLOT_W as usize + 1] }
    }

    fn add(&mut self, col: usize, value: u64) {
        let col = col.min(self.cols.len() - 1);
        let entry = self.cols[col].get_or_insert((value, value));
        entry.0 = entry.0.max(value);
        entry.1 = value;
    }

    /// The step line as SVG path data; `y` maps a value to its y.
    fn path(&self, y: impl Fn(u64) -> f64, start: u64) -> String {
        let mut d = String::new();
        let mut prev = start;
        let _ = write!(d, "M{:.1},{:.1}", LEFT, y(start));
        for (c, entry) in self.cols.iter().enumerate() {
            if let Some((max, last)) = entry {
                let x = LEFT + c as f64;
                let _ = write!(d, " L{x:.1},{:.1}", y(prev));
                if *max != prev {
                    let _ = write!(d, " L{x:.1},{:.1}", y(*max));
                }
                if *last != *max {
                    let _ = write!(d, " L{x:.1},{:.1}", y(*last));
                }
                prev = *last;
            }
        }
        let _ = write!(d, " L{:.1},{:.1}", LEFT + PLOT_W, y(prev));
        d
    }
}

/// The figures drawn, in the order of the legend.
struct Figure<'a> {
    w: &'a Workload,
    results: &'a [PoolResult],
    subtitle: String,
}

/// The picture, as a standalone SVG document.
pub fn render(w: &Workload, results: &[PoolResult], backend: &str) -> String {
    let subtitle = format!(
        "{} allocations, {} frees, {} stream{}; peak live {} at {}; replayed on {backend}",
        w.alloc_count(),
        w.ops.len() - w.alloc_count(),
        w.streams.len(),
        if w.streams.len() == 1 { "" } else { "s" },
        report::bytes(w.peak_live),
        w.peak_op.map(|i| time_label(w, w.time_of(i))).unwrap_or_else(|| "-".into()),
    );
    Figure { w, results, subtitle }.svg()
}

fn time_label(w: &Workload, t: u64) -> String {
    if w.timed {
        let (div, unit) = time_unit(w.duration().max(1));
        format!("t = {} {unit}", trim_number(t as f64 / div))
    } else {
        format!("operation {t}")
    }
}

impl Figure<'_> {
    fn svg(&self) -> String {
        let w = self.w;
        let mut s = String::new();
        let map = self.map_runs();
        let legend_rows = (self.results.len() + 2).div_ceil(2);
        let chart_bottom = CHART_TOP + CHART_HEIGHT;
        let legend_top = chart_bottom + 66.0;
        let map_top = legend_top + legend_rows as f64 * 22.0 + 36.0;
        let height = if map.is_some() { map_top + 268.0 } else { map_top };
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="13">"#
        );
        let _ = writeln!(s, r#"<title>hipmem replay: {}</title>"#, esc(&w.name));
        let _ = writeln!(s, r#"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="white"/>"#);
        let _ = writeln!(
            s,
            r#"<text x="{LEFT}" y="32" font-size="20" font-weight="bold">Memory over time: {}</text>"#,
            esc(&file_name(&w.name))
        );
        let _ = writeln!(s, r##"<text x="{LEFT}" y="56" fill="#374151">{}</text>"##, esc(&self.subtitle));
        self.chart(&mut s);
        self.legend(&mut s, legend_top);
        if let Some((pool, runs)) = map {
            address_map(&mut s, map_top, pool, runs, w);
        }
        s.push_str("</svg>\n");
        s
    }

    fn max_bytes(&self) -> u64 {
        let reserved = self.results.iter().map(|r| r.peak_reserved_bytes).max().unwrap_or(0);
        let recorded = self.w.recorded_reserved.iter().map(|&(_, b)| b).max().unwrap_or(0);
        self.w.peak_live.max(reserved).max(recorded).max(1)
    }

    fn chart(&self, s: &mut String) {
        let w = self.w;
        let bottom = CHART_TOP + CHART_HEIGHT;
        let max_bytes = self.max_bytes();
        let (bdiv, bunit) = byte_unit(max_bytes);
        let step = nice_step(max_bytes as f64 / bdiv, 5.0);
        let top_value = ((max_bytes as f64 / bdiv / step).ceil() * step).max(step);
        let y = |v: u64| bottom - (v as f64 / bdiv) / top_value * CHART_HEIGHT;
        let span = w.duration().max(1);
        let x_col = |t: u64| ((t as f64 / span as f64) * PLOT_W) as usize;

        // Grid and axes.
        let _ = writeln!(s, r#"<g id="axes" stroke-width="1">"#);
        let mut v = 0.0;
        while v <= top_value + step * 0.01 {
            let yy = bottom - v / top_value * CHART_HEIGHT;
            let _ = writeln!(
                s,
                r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#e5e7eb"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#374151">{} {bunit}</text>"##,
                LEFT + PLOT_W,
                LEFT - 8.0,
                yy + 4.0,
                trim_number(v)
            );
            v += step;
        }
        let (tdiv, tunit) = if w.timed { time_unit(span) } else { (1.0, "") };
        let tstep = nice_step(span as f64 / tdiv, 8.0);
        let mut t = 0.0;
        while t <= span as f64 / tdiv + tstep * 0.01 {
            let xx = LEFT + t * tdiv / span as f64 * PLOT_W;
            let _ = writeln!(
                s,
                r##"<line x1="{xx:.1}" y1="{bottom:.1}" x2="{xx:.1}" y2="{:.1}" stroke="#6b7280"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle" fill="#374151">{}{}</text>"##,
                bottom + 5.0,
                bottom + 20.0,
                trim_number(t),
                if tunit.is_empty() { String::new() } else { format!(" {tunit}") }
            );
            t += tstep;
        }
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" y1="{CHART_TOP}" x2="{LEFT}" y2="{bottom}" stroke="#374151"/><line x1="{LEFT}" y1="{bottom}" x2="{:.1}" y2="{bottom}" stroke="#374151"/>"##,
            LEFT + PLOT_W
        );
        let axis_name = if w.timed { "trace time" } else { "operation (the trace has no times)" };
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#111827">{axis_name}</text>"##,
            LEFT + PLOT_W / 2.0,
            bottom + 40.0
        );
        let _ = writeln!(
            s,
            r##"<text transform="translate(22,{:.1}) rotate(-90)" text-anchor="middle" fill="#111827">bytes</text>"##,
            CHART_TOP + CHART_HEIGHT / 2.0
        );
        s.push_str("</g>\n");

        // Live bytes: a filled step area under everything, its line over everything.
        let mut live = Columns::new();
        for (i, &bytes) in w.live_after.iter().enumerate() {
            live.add(x_col(w.time_of(i)), bytes);
        }
        let line = live.path(y, 0);
        let _ = writeln!(
            s,
            r#"<g id="live-area"><path d="{line} L{:.1},{bottom:.1} L{LEFT},{bottom:.1} Z" fill="{LIVE_FILL}" fill-opacity="0.8" stroke="none"/></g>"#,
            LEFT + PLOT_W
        );

        // The recording allocator's own reserved bytes.
        if !w.recorded_reserved.is_empty() {
            let mut rec = Columns::new();
            for &(t, bytes) in &w.recorded_reserved {
                rec.add(x_col(if w.timed { t } else { 0 }), bytes);
            }
            let peak = w.recorded_reserved.iter().map(|&(_, b)| b).max().unwrap_or(0);
            let _ = writeln!(
                s,
                r#"<g id="series-recorded" data-series="recorded" data-peak="{peak}"><path d="{}" fill="none" stroke="{RECORDED}" stroke-width="1.5" stroke-dasharray="6 4"/></g>"#,
                rec.path(y, w.recorded_reserved[0].1)
            );
        }

        // Each allocator's reserved bytes.
        for r in self.results {
            let mut cols = Columns::new();
            for &(op, bytes) in &r.reserved_series {
                cols.add(x_col(w.time_of(op as usize)), bytes);
            }
            let _ = writeln!(
                s,
                r#"<g id="series-reserved-{0}" data-series="reserved" data-pool="{0}" data-peak="{1}"><path d="{2}" fill="none" stroke="{3}" stroke-width="2" stroke-opacity="0.9"{4}/></g>"#,
                esc(&r.pool),
                r.peak_reserved_bytes,
                cols.path(y, 0),
                pool_color(&r.pool),
                dash_of(&r.pool)
            );
        }

        let _ = writeln!(
            s,
            r#"<g id="series-live" data-series="live" data-peak="{}"><path d="{line}" fill="none" stroke="{LIVE_STROKE}" stroke-width="1.6"/></g>"#,
            w.peak_live
        );

        // The peak of live bytes.
        if let Some(i) = w.peak_op {
            let xx = LEFT + x_col(w.time_of(i)) as f64;
            let yy = y(w.peak_live);
            let anchor = if xx > LEFT + PLOT_W * 0.75 { "end" } else { "start" };
            let dx = if anchor == "end" { -6.0 } else { 6.0 };
            let _ = writeln!(
                s,
                r##"<g id="peak-marker"><line x1="{xx:.1}" y1="{CHART_TOP}" x2="{xx:.1}" y2="{bottom}" stroke="#1d4ed8" stroke-dasharray="3 3"/><circle cx="{xx:.1}" cy="{yy:.1}" r="4" fill="#1d4ed8"/><text x="{:.1}" y="{:.1}" text-anchor="{anchor}" fill="#1d4ed8" font-weight="bold">peak live {}</text></g>"##,
                xx + dx,
                (yy - 8.0).max(CHART_TOP + 12.0),
                report::bytes(w.peak_live)
            );
        }
    }

    fn legend(&self, s: &mut String, top: f64) {
        let mut entries: Vec<(String, String, &str)> =
            vec![(format!("live bytes (peak {})", report::bytes(self.w.peak_live)), LIVE_STROKE.into(), "")];
        if !self.w.recorded_reserved.is_empty() {
            let peak = self.w.recorded_reserved.iter().map(|&(_, b)| b).max().unwrap_or(0);
            entries.push((
                format!("reserved by the recording allocator (peak {})", report::bytes(peak)),
                RECORDED.into(),
                "6 4",
            ));
        }
        for r in self.results {
            let failures = if r.failures > 0 { format!(", {} failed", r.failures) } else { String::new() };
            entries.push((
                format!(
                    "{}: reserved (peak {}, {:.2}× live{failures})",
                    r.pool,
                    report::bytes(r.peak_reserved_bytes),
                    r.reserved_over_live
                ),
                pool_color(&r.pool).into(),
                if r.pool == "malloc" { "2 3" } else { "" },
            ));
        }
        let _ = writeln!(s, r#"<g id="legend">"#);
        for (i, (label, color, dash)) in entries.iter().enumerate() {
            let x = LEFT + (i % 2) as f64 * (PLOT_W / 2.0);
            let y = top + (i / 2) as f64 * 22.0;
            let dash = if dash.is_empty() { String::new() } else { format!(r#" stroke-dasharray="{dash}""#) };
            let width = if dash.contains("2 3") { 2 } else { 3 };
            let _ = writeln!(
                s,
                r#"<line x1="{x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{color}" stroke-width="{width}"{dash}/><text x="{:.1}" y="{:.1}">{}</text>"#,
                y - 4.0,
                x + 28.0,
                y - 4.0,
                x + 36.0,
                y,
                esc(label)
            );
        }
        s.push_str("</g>\n");
    }

    /// The hipmem pool whose map is drawn (virtual memory first) and its runs.
    fn map_runs(&self) -> Option<(&str, &[AddressRun])> {
        ["hipmem-vmm", "hipmem-segments"].into_iter().find_map(|name| {
            let r = self.results.iter().find(|r| r.pool == name)?;
            let runs = r.layout_at_peak.as_deref()?;
            runs.iter().any(|r| r.kind.is_backed()).then_some((name, runs))
        })
    }
}

const MAP_ROWS: usize = 4;
const CELL: f64 = 2.0;
const ROW_H: f64 = 26.0;
const ROW_GAP: f64 = 22.0;

const KINDS: [RunKind; 5] =
    [RunKind::Live, RunKind::Cached, RunKind::PendingFree, RunKind::Free, RunKind::Unbacked];

fn kind_index(kind: RunKind) -> usize {
    KINDS.iter().position(|&k| k == kind).unwrap_or(0)
}

/// The map of `runs` (from the first to the last backed byte; segments side
/// by side), as rows of cells coloured by the kind holding most of each cell.
fn address_map(s: &mut String, top: f64, pool: &str, runs: &[AddressRun], w: &Workload) {
    let first = runs.iter().position(|r| r.kind.is_backed()).unwrap_or(0);
    let last = runs.iter().rposition(|r| r.kind.is_backed()).unwrap_or(0);
    let shown = &runs[first..=last];
    let extent: u64 = shown.iter().map(|r| r.size).sum();
    let beyond: u64 = runs[..first].iter().chain(&runs[last + 1..]).map(|r| r.size).sum();
    let mut totals = [0u64; 5];
    let mut counts = [0u64; 5];
    let mut largest_free = 0u64;
    for r in shown {
        totals[kind_index(r.kind)] += r.size;
        counts[kind_index(r.kind)] += 1;
        if r.kind == RunKind::Free {
            largest_free = largest_free.max(r.size);
        }
    }
    // Long unbacked stretches (between a pool's size-class parts, each as
    // large as twice the device) are drawn short, so the backed memory gets
    // the room: at most a twentieth of the backed bytes each.
    let backed: u64 = shown.iter().filter(|r| r.kind.is_backed()).map(|r| r.size).sum();
    let gap = (backed / 20).max(1);
    let drawn = |r: &AddressRun| if r.kind == RunKind::Unbacked { r.size.min(gap) } else { r.size };
    let drawn_extent: u64 = shown.iter().map(drawn).sum();
    let cells_per_row = (PLOT_W / CELL) as usize;
    let cells = cells_per_row * MAP_ROWS;
    let per_cell = (drawn_extent as f64 / cells as f64).max(1.0);
    let mut bytes = vec![[0f64; 5]; cells];
    let mut boundaries = Vec::new();
    let mut offset = 0u64;
    let mut prev_end = None;
    for r in shown {
        if prev_end.is_some_and(|e| e != r.start) {
            boundaries.push(offset);
        }
        prev_end = Some(r.end());
        let size = drawn(r);
        let (a, b) = (offset as f64 / per_cell, (offset + size) as f64 / per_cell);
        let k = kind_index(r.kind);
        let mut c = a.floor() as usize;
        while (c as f64) < b && c < cells {
            let lo = a.max(c as f64);
            let hi = b.min(c as f64 + 1.0);
            bytes[c][k] += (hi - lo) * per_cell;
            c += 1;
        }
        offset += size;
    }
    let dominant: Vec<Option<usize>> = bytes
        .iter()
        .map(|b| {
            let (k, v) =
                b.iter().enumerate().fold((0, 0.0), |best, (k, &v)| if v > best.1 { (k, v) } else { best });
            (v > 0.0).then_some(k)
        })
        .collect();

    let title = format!(
        "Address map of {pool} at the peak of live bytes ({})",
        w.peak_op.map(|i| time_label(w, w.time_of(i))).unwrap_or_default()
    );
    let detail = format!(
        "{} of addresses from {:#x}, from the first to the last byte with memory behind it{}",
        report::bytes(extent),
        shown.first().map(|r| r.start).unwrap_or(0),
        if beyond > 0 {
            format!("; {} more reserved, unbacked", report::bytes(beyond))
        } else {
            String::new()
        } + if drawn_extent < extent { "; long gaps drawn short" } else { "" }
    );
    let _ = writeln!(s, r#"<g id="address-map" data-pool="{}" data-extent="{extent}">"#, esc(pool));
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{top:.1}" font-size="15" font-weight="bold">{}</text>"#,
        esc(&title)
    );
    let _ = writeln!(s, r##"<text x="{LEFT}" y="{:.1}" fill="#374151">{}</text>"##, top + 20.0, esc(&detail));
    let rows_top = top + 34.0;
    let row_bytes = drawn_extent as f64 / MAP_ROWS as f64;
    let (bdiv, bunit) = byte_unit(drawn_extent);
    for row in 0..MAP_ROWS {
        let y = rows_top + row as f64 * (ROW_H + ROW_GAP);
        let _ = writeln!(
            s,
            r##"<rect x="{LEFT}" y="{y:.1}" width="{PLOT_W}" height="{ROW_H}" fill="white" stroke="#9ca3af"/>"##
        );
        let cells_row = &dominant[row * cells_per_row..(row + 1) * cells_per_row];
        let mut c = 0;
        while c < cells_row.len() {
            let kind = cells_row[c];
            let mut end = c + 1;
            while end < cells_row.len() && cells_row[end] == kind {
                end += 1;
            }
            if let Some(k) = kind {
                let _ = writeln!(
                    s,
                    r#"<rect class="run-{}" x="{:.1}" y="{y:.1}" width="{:.1}" height="{ROW_H}" fill="{}"/>"#,
                    KINDS[k].name(),
                    LEFT + c as f64 * CELL,
                    (end - c) as f64 * CELL,
                    run_color(KINDS[k])
                );
            }
            c = end;
        }
        // Offsets along the row.
        for tick in 0..=4 {
            let frac = tick as f64 / 4.0;
            let x = LEFT + frac * PLOT_W;
            let at = row_bytes * (row as f64 + frac);
            let anchor = match tick {
                0 => "start",
                4 => "end",
                _ => "middle",
            };
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#6b7280"/><text x="{x:.1}" y="{:.1}" text-anchor="{anchor}" font-size="11" fill="#4b5563">+{} {bunit}</text>"##,
                y + ROW_H,
                y + ROW_H + 4.0,
                y + ROW_H + 15.0,
                trim_number(at / bdiv)
            );
        }
    }
    // Boundaries between segments (pools without virtual memory).
    if boundaries.len() <= 500 {
        for b in boundaries {
            let cell = (b as f64 / per_cell) as usize;
            let (row, col) = (cell / cells_per_row, cell % cells_per_row);
            if row < MAP_ROWS {
                let x = LEFT + col as f64 * CELL;
                let y = rows_top + row as f64 * (ROW_H + ROW_GAP);
                let _ = writeln!(
                    s,
                    r##"<line class="segment-boundary" x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#111827" stroke-width="1.5"/>"##,
                    y - 3.0,
                    y + ROW_H + 3.0
                );
            }
        }
    }
    // Legend with the totals.
    let legend_y = rows_top + MAP_ROWS as f64 * (ROW_H + ROW_GAP) + 8.0;
    let mut x = LEFT;
    for (k, kind) in KINDS.iter().enumerate() {
        if totals[k] == 0 && *kind != RunKind::Live && *kind != RunKind::Free {
            continue;
        }
        let extra = if *kind == RunKind::Free && largest_free > 0 {
            format!(", largest {}", report::bytes(largest_free))
        } else {
            String::new()
        };
        let label = format!(
            "{} {} in {} run{}{extra}",
            run_label(*kind),
            report::bytes(totals[k]),
            counts[k],
            if counts[k] == 1 { "" } else { "s" }
        );
        let _ = writeln!(
            s,
            r##"<rect x="{x:.1}" y="{:.1}" width="14" height="14" fill="{}" stroke="#6b7280"/><text x="{:.1}" y="{legend_y:.1}" font-size="12">{}</text>"##,
            legend_y - 11.0,
            run_color(*kind),
            x + 19.0,
            esc(&label)
        );
        x += 19.0 + label.chars().count() as f64 * 6.6 + 18.0;
    }
    s.push_str("</g>\n");
}

/// The picture wrapped in an HTML page with the figures as a table.
pub fn render_html(
    w: &Workload,
    results: &[PoolResult],
    skipped: &[(String, String)],
    backend: &str,
) -> String {
    let svg = render(w, results, backend);
    let mut h = String::new();
    let _ = writeln!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>hipmem replay: {0}</title>\n<style>body{{font-family:DejaVu Sans,Helvetica,Arial,sans-serif;margin:24px;color:#111827}}table{{border-collapse:collapse;margin:12px 0 20px}}th,td{{border:1px solid #d1d5db;padding:4px 10px;text-align:right}}th:first-child,td:first-child{{text-align:left}}th{{background:#f3f4f6}}p{{color:#374151}}</style></head><body>\n<h1>hipmem replay: {0}</h1>",
        esc(&w.name)
    );
    let _ = writeln!(
        h,
        "<p>{} operations on {} stream(s); peak live bytes {} ({} bytes). Replayed on {}.</p>",
        w.ops.len(),
        w.streams.len(),
        report::bytes(w.peak_live),
        w.peak_live,
        esc(backend)
    );
    h.push_str("<table><tr><th>pool</th><th>operations</th><th>failures</th><th>peak live</th><th>peak reserved</th><th>reserved / live</th><th>time per operation</th></tr>\n");
    for r in results {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.3}</td><td>{}</td></tr>",
            esc(&r.pool),
            r.ops,
            r.failures,
            report::bytes(r.peak_live_bytes),
            report::bytes(r.peak_reserved_bytes),
            r.reserved_over_live,
            report::duration(std::time::Duration::from_nanos(r.time_per_op_ns.round() as u64))
        );
    }
    h.push_str("</table>\n");
    for (pool, why) in skipped {
        let _ = writeln!(h, "<p>{}: not replayed ({}).</p>", esc(pool), esc(why));
    }
    if w.anomalies.any() {
        let _ = writeln!(
            h,
            "<p>Trace anomalies (skipped, the replay went on): {} frees of unknown addresses, {} double frees, {} allocations over live addresses.</p>",
            w.anomalies.unknown_frees, w.anomalies.double_frees, w.anomalies.allocs_over_live
        );
    }
    h.push_str(&svg);
    h.push_str("</body></html>\n");
    h
}
