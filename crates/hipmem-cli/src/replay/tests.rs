//! Replay, summary and pictures on the committed traces (embedded, so the
//! test executable runs anywhere): peaks checked exactly against values
//! computed here from the files' own events, bad input, anomalies, and the
//! SVG parsed as XML.

use std::collections::HashMap;
use std::path::PathBuf;

use hipmem::Runtime;
use hipmem::trace::TraceReader;

use super::engine::{Options, PoolKind};
use super::progress::Progress;
use super::workload::Workload;
use super::{ReplayReport, parse_pools, summary, svg};

/// On a GPU the malloc row's reserved bytes are the device's free memory
/// before and during its replay, which another test's replay moves when it
/// runs alongside (a pool growing or giving back tens of MiB to GiBs):
/// replays that read it hold this for writing, every other replay for
/// reading.
static DEVICE_MEMORY: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// [`super::replay`] beside other tests' replays (not beside one that reads
/// the device's free memory).
fn replay(
    rt: &Runtime,
    w: &Workload,
    kinds: &[PoolKind],
    device: usize,
    opts: &Options,
    progress: &mut Progress,
) -> Result<ReplayReport, String> {
    let _shared = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    super::replay(rt, w, kinds, device, opts, progress)
}

/// [`super::sweep::sweep`] beside other tests' replays.
fn sweep(
    rt: &Runtime,
    w: &Workload,
    kinds: &[PoolKind],
    windows_ms: &[u64],
    late_from: Option<u64>,
) -> Result<super::sweep::SweepReport, String> {
    let _shared = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
    let base = Options { late_from, ..Options::default() };
    super::sweep::sweep(rt, w, kinds, 0, windows_ms, base, &mut Progress::new(false))
}

const TRACE: &[u8] = include_bytes!("../../fixtures/traces/training_loop.jsonl");
const SNAPSHOT: &[u8] = include_bytes!("../../fixtures/traces/pytorch_snapshot.pickle");

fn granules(size: u64) -> u64 {
    size.max(1).div_ceil(256) * 256
}

/// Peak live bytes (requested, and in 256-byte granules) and the number of
/// allocations, from (action, addr, size) triples.
fn peaks<'a>(events: impl Iterator<Item = (&'a str, u64, u64)>) -> (u64, u64, u64) {
    let mut live: HashMap<u64, u64> = HashMap::new();
    let (mut cur, mut cur_g, mut peak, mut peak_g, mut allocs) = (0, 0, 0, 0, 0);
    for (action, addr, size) in events {
        match action {
            "alloc" => {
                allocs += 1;
                if let Some(old) = live.insert(addr, size) {
                    cur -= old;
                    cur_g -= granules(old);
                }
                cur += size;
                cur_g += granules(size);
            }
            "free_requested" => {
                if let Some(old) = live.remove(&addr) {
                    cur -= old;
                    cur_g -= granules(old);
                }
            }
            _ => {}
        }
        peak = peak.max(cur);
        peak_g = peak_g.max(cur_g);
    }
    (peak, peak_g, allocs)
}

/// The expected figures of the hipmem fixture, read with plain JSON.
fn expected_trace() -> (u64, u64, u64) {
    let text = std::str::from_utf8(TRACE).unwrap();
    let lines: Vec<serde_json::Value> =
        text.lines().skip(1).map(|l| serde_json::from_str(l).unwrap()).collect();
    let triples: Vec<(String, u64, u64)> = lines
        .iter()
        .map(|v| {
            let addr = v["addr"].as_str().map(|a| u64::from_str_radix(&a[2..], 16).unwrap()).unwrap_or(0);
            (v["e"].as_str().unwrap().to_string(), addr, v["size"].as_u64().unwrap_or(0))
        })
        .collect();
    peaks(triples.iter().map(|(a, b, c)| (a.as_str(), *b, *c)))
}

/// The expected figures of the snapshot fixture, read with the pickle crate directly.
fn expected_snapshot() -> (u64, u64, u64) {
    use serde_pickle::{HashableValue as H, Value as V};
    let value = serde_pickle::value_from_slice(
        SNAPSHOT,
        serde_pickle::DeOptions::new().replace_recursive_structures(),
    )
    .unwrap();
    let get = |v: &V, k: &str| match v {
        V::Dict(d) => d.get(&H::String(k.into())).cloned(),
        _ => None,
    };
    let V::List(devices) = get(&value, "device_traces").unwrap() else { panic!("device_traces") };
    let V::List(entries) = devices[0].clone() else { panic!("device 0") };
    let int = |v: Option<V>| match v {
        Some(V::I64(n)) => n as u64,
        _ => 0,
    };
    let triples: Vec<(String, u64, u64)> = entries
        .iter()
        .map(|e| {
            let Some(V::String(action)) = get(e, "action") else { panic!("action") };
            (action, int(get(e, "addr")), int(get(e, "size")))
        })
        .collect();
    peaks(triples.iter().map(|(a, b, c)| (a.as_str(), *b, *c)))
}

fn runtime() -> Runtime {
    Runtime::from_env().unwrap()
}

/// Every allocator, malloc's row included: alone on the device.
fn replay_all(w: &Workload) -> ReplayReport {
    let _alone = DEVICE_MEMORY.write().unwrap_or_else(|e| e.into_inner());
    super::replay(&runtime(), w, &PoolKind::ALL, 0, &Options::default(), &mut Progress::new(false)).unwrap()
}

fn check_replay(w: &Workload, report: &ReplayReport, (peak, peak_granules, allocs): (u64, u64, u64)) {
    assert_eq!(w.peak_live, peak, "peak live bytes from the trace");
    assert_eq!(w.peak_live_granules, peak_granules);
    assert_eq!(w.alloc_count() as u64, allocs);
    assert_eq!(report.peak_live_bytes, peak);
    let rt = runtime();
    let names: Vec<&str> = report.pools.iter().map(|p| p.pool.as_str()).collect();
    assert!(names.contains(&"hipmem-segments") && names.contains(&"malloc"), "{names:?}");
    if rt.backend().virtual_memory().is_some() {
        assert!(names.contains(&"hipmem-vmm"), "{names:?}");
    }
    for p in &report.pools {
        assert_eq!(p.failures, 0, "{}: {:?}", p.pool, p.first_failure);
        assert_eq!(p.ops, w.ops.len() as u64);
        assert_eq!(p.peak_live_bytes, peak);
        if p.pool == "malloc" {
            // Device memory in use beyond the start: on a GPU the driver may
            // fit small allocations into pages it already had.
            assert!(
                p.peak_reserved_bytes > peak / 2,
                "malloc reserved {} for {peak} live",
                p.peak_reserved_bytes
            );
        } else {
            assert!(
                p.peak_reserved_bytes >= peak,
                "{} reserved {} < live {peak}",
                p.pool,
                p.peak_reserved_bytes
            );
        }
        assert!(p.time_per_op_ns > 0.0);
        if p.pool.starts_with("hipmem") {
            // The pool counts live memory in 256-byte blocks: the same peak.
            assert_eq!(p.pool_used_high_bytes, Some(peak_granules), "{}", p.pool);
            assert!(!p.reserved_series.is_empty());
        }
    }
    for s in &report.skipped {
        assert_eq!(s.pool, "driver-pool", "only the driver's pool may be missing: {s:?}");
    }
    assert!(
        report.pools.iter().any(|p| p.layout_at_peak.is_some()),
        "the first hipmem pool's map at the peak is taken"
    );
}

#[test]
fn the_hipmem_trace_replays_into_every_pool_with_its_exact_peak() {
    let w = Workload::from_trace(TraceReader::new(TRACE, "training_loop.jsonl").unwrap()).unwrap();
    assert!(!w.anomalies.any(), "{:?}", w.anomalies);
    assert_eq!(w.streams.len(), 2);
    assert_eq!(w.counts.ooms.len(), 1);
    assert!(!w.recorded_reserved.is_empty());
    let report = replay_all(&w);
    check_replay(&w, &report, expected_trace());
    // The map at the peak holds exactly the live bytes of the pool's blocks.
    let layout = report.pools.iter().find_map(|p| p.layout_at_peak.as_ref()).unwrap();
    let live: u64 =
        layout.iter().filter(|r| r.kind == hipmem::pool::layout::RunKind::Live).map(|r| r.size).sum();
    let at_peak: u64 =
        w.live_at(w.peak_op.unwrap()).iter().map(|&s| granules(w.allocs[s as usize].size)).sum();
    assert_eq!(live, at_peak);
}

#[test]
fn the_pytorch_snapshot_replays_with_its_exact_peak() {
    let w = Workload::from_pickle(SNAPSHOT, "pytorch_snapshot.pickle").unwrap();
    assert!(!w.anomalies.any(), "{:?}", w.anomalies);
    assert!(w.streams.len() >= 2, "raw CUDA streams become replay streams: {:?}", w.streams);
    assert!(w.timed);
    assert!(
        w.counts.free_completed > 0 && w.counts.free_completed <= w.ops.len() as u64 - w.alloc_count() as u64
    );
    // Reserved bytes from the segment events, anchored on the final segments.
    assert!(!w.recorded_reserved.is_empty());
    let report = replay_all(&w);
    check_replay(&w, &report, expected_snapshot());
}

/// `--evict-kib`: the same operations, the same memory and driver calls
/// (one stream, so that nothing depends on when the device completes a
/// free), only the timing differs; the malloc baseline runs too.
/// Six steps on one stream, each allocating 1 to 8 MiB and freeing them in
/// reverse order (48 allocations, 96 operations).
fn steps_workload() -> Workload {
    const MIB: u64 = 1 << 20;
    let header = std::str::from_utf8(TRACE).unwrap().lines().next().unwrap();
    let line = |t: u64, e: &str, addr: u64, size: u64| {
        format!(
            "{{\"t\":{t},\"e\":\"{e}\",\"pool\":1,\"stream\":5,\"dev\":0,\"addr\":\"{addr:#x}\",\"size\":{size}}}\n"
        )
    };
    let mut text = format!("{header}\n");
    for step in 0..6u64 {
        for i in 0..8u64 {
            text += &line(step * 100 + i, "alloc", 0x1000_0000 + i * 64 * MIB, (i + 1) * MIB);
        }
        for i in (0..8u64).rev() {
            text += &line(step * 100 + 50 + i, "free_requested", 0x1000_0000 + i * 64 * MIB, (i + 1) * MIB);
        }
    }
    let w = Workload::from_trace(TraceReader::new(text.as_bytes(), "steps.jsonl").unwrap()).unwrap();
    assert_eq!((w.alloc_count(), w.ops.len(), w.streams.len()), (48, 96, 1));
    w
}

/// `--late-from`: the "second half" starts where the caller says (after a
/// warm-up), not at the midpoint; from operation 0 it is the whole trace.
/// An operation past the trace's end is an error that says how many it has.
#[test]
fn the_second_half_starts_where_late_from_says() {
    let w = steps_workload();
    let rt = runtime();
    let kinds = [PoolKind::Vmm, PoolKind::Segments];
    let run = |late_from| {
        replay(&rt, &w, &kinds, 0, &Options { late_from, ..Options::default() }, &mut Progress::new(false))
            .unwrap()
    };
    let (whole, half) = (run(Some(0)), run(None));
    assert_eq!((whole.late_from_op, half.late_from_op), (0, 48));
    assert!(!whole.pools.is_empty(), "{:?}", whole.skipped);
    for (p, q) in whole.pools.iter().zip(&half.pools) {
        assert_eq!(
            p.peak_reserved_second_half, p.peak_reserved_bytes,
            "{}: from op 0, the whole trace",
            p.pool
        );
        let worker = p.backend_releases_on_worker.expect("hipmem's pools count the release worker's calls");
        assert_eq!(p.backend_calls_second_half, p.backend_calls.map(|c| c - worker), "{}", p.pool);
        // From the midpoint, the first step's growth is not late.
        let (Some(all), Some(late)) = (q.backend_calls, q.backend_calls_second_half) else {
            panic!("{}: hipmem's pools count their backend calls", q.pool)
        };
        assert!(all >= 1 && late < all, "{}: {late} of {all} late", q.pool);
    }
    let err =
        refused(&rt, |trace| super::ReplayArgs { trace, late_from: Some(1 << 40), ..Default::default() });
    assert!(err.contains("--late-from") && err.contains("operations"), "{err}");
}

/// What `hipmem replay` (the CLI's run, hipmem's pool on virtual memory)
/// says when it refuses the arguments `args` makes for the test trace.
fn refused(rt: &Runtime, args: impl FnOnce(PathBuf) -> super::ReplayArgs) -> String {
    let path = temp_file("refused.jsonl", TRACE);
    let args = super::ReplayArgs { pools: vec!["vmm".into()], ..args(path.clone()) };
    let err = {
        let _shared = DEVICE_MEMORY.read().unwrap_or_else(|e| e.into_inner());
        super::run(rt, &args).unwrap_err().to_string()
    };
    std::fs::remove_file(&path).unwrap();
    err
}

#[test]
fn evicting_between_operations_times_the_calls_and_changes_nothing_else() {
    let w = steps_workload();
    let rt = runtime();
    let run = |evict_kib| {
        let kinds = [PoolKind::Vmm, PoolKind::Segments, PoolKind::Malloc];
        replay(&rt, &w, &kinds, 0, &Options { evict_kib, ..Options::default() }, &mut Progress::new(false))
            .unwrap()
            .pools
    };
    let (plain, evicted) = (run(0), run(256));
    assert_eq!(plain.len(), 3);
    for (a, b) in plain.iter().zip(&evicted) {
        assert_eq!(a.pool, b.pool);
        assert_eq!((a.failures, b.failures), (0, 0), "{}", a.pool);
        assert!(b.time_per_op_ns > 0.0 && b.time_per_op_second_half_ns > 0.0, "{}", b.pool);
        if a.pool.starts_with("hipmem") {
            // (The baseline's reserved bytes are the device's, which other
            // processes move.)
            assert_eq!(a.peak_reserved_bytes, b.peak_reserved_bytes, "{}", a.pool);
            assert_eq!(a.backend_calls, b.backend_calls, "{}", a.pool);
        }
    }
}

/// `--slowest` and `--map-at`: each operation of the timed pass timed (the
/// slowest listed with what they were and the backend calls they made),
/// and hipmem's pools' address maps before the operation named, with their
/// free memory split by physical pieces; an operation past the trace's end
/// is an error that says how many it has.
#[test]
fn the_slowest_operations_and_the_map_before_an_operation_are_reported() {
    const MIB: u64 = 1 << 20;
    let w = steps_workload();
    let rt = runtime();
    let kinds = [PoolKind::Vmm, PoolKind::Segments, PoolKind::Malloc];
    // Before op 8: the first step's eight blocks (1 to 8 MiB) are live.
    let opts = Options { slowest: 5, map_at: Some(8), ..Options::default() };
    let report = replay(&rt, &w, &kinds, 0, &opts, &mut Progress::new(false)).unwrap();
    assert!(report.pools.len() >= 2, "{:?}", report.skipped);
    for p in &report.pools {
        let hipmem = p.pool.starts_with("hipmem");
        let profile = p.profile.as_ref().unwrap_or_else(|| panic!("{}: no profile", p.pool));
        assert_eq!(profile.slowest.len(), 5, "{}", p.pool);
        assert!(profile.slowest.windows(2).all(|o| o[0].time_ns >= o[1].time_ns), "slowest first");
        let listed: u64 = profile.slowest.iter().map(|o| o.time_ns).sum();
        assert!(0 < listed && listed <= profile.time_ns && profile.time_second_half_ns <= profile.time_ns);
        for o in &profile.slowest {
            let op = &w.ops[o.op as usize];
            assert_eq!(o.bytes, w.allocs[op.slot as usize].size);
            assert_eq!(
                o.kind,
                if matches!(op.kind, super::workload::OpKind::Alloc) { "alloc" } else { "free" }
            );
            assert_eq!(o.backend_calls.is_some(), hipmem, "{}", p.pool);
        }
        match profile.with_backend_calls {
            Some([n, t, n_late, t_late]) => {
                assert!(hipmem);
                // The first step grows the pool; the counts are the timed pass's.
                assert!(n >= 1 && n_late <= n && t_late <= t && t <= profile.time_ns, "{}", p.pool);
            }
            None => assert!(!hipmem, "{}", p.pool),
        }
        let Some(map) = &p.map_at else {
            assert!(!hipmem, "{}: no map", p.pool);
            continue;
        };
        assert!(hipmem);
        assert_eq!(map.op, 8);
        let live: u64 =
            map.runs.iter().filter(|r| r.kind == hipmem::pool::layout::RunKind::Live).map(|r| r.size).sum();
        assert_eq!(live, 36 * MIB, "{}: blocks of 1 to 8 MiB", p.pool);
        let held: u64 = map.pieces.iter().map(|q| q.size).sum();
        assert!(held >= live + map.free.free, "{}: {held} held", p.pool);
        assert_eq!(map.free.in_whole_pieces + map.free.beside_live, map.free.free);
    }
    assert!(report.pools.iter().any(|p| p.map_at.is_some()));
    // The CLI refuses an operation the trace does not have.
    let err = refused(&rt, |trace| super::ReplayArgs { trace, map_at: Some(1 << 40), ..Default::default() });
    assert!(err.contains("--map-at") && err.contains("operations"), "{err}");
}

/// Writes `bytes` to a file of its own named after `name` (tests run in
/// parallel, and several write a file of the same name).
fn temp_file(name: &str, bytes: &[u8]) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("hipmem-replay-test-{}-{n}-{name}", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn load_err(name: &str, bytes: &[u8]) -> String {
    let path = temp_file(name, bytes);
    let err = Workload::load(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(err.contains(&path.display().to_string()), "the error names the file: {err}");
    err
}

#[test]
fn bad_input_is_an_error_naming_the_file_and_where() {
    // Truncated in the middle of line 100.
    let line_starts: Vec<usize> =
        TRACE.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect();
    let cut = &TRACE[..line_starts[98] + 30];
    let err = load_err("cut.jsonl", cut);
    assert!(err.contains(&format!("line 100 (byte offset {})", line_starts[98])), "{err}");
    assert!(err.contains("truncated"), "{err}");
    // Garbage in the middle.
    let mut garbage = TRACE[..line_starts[9]].to_vec();
    garbage.extend_from_slice(
        b"{\"t\":5,\"e\":\"alloc\",\"pool\":1,\"stream\":2,\"dev\":0,\"addr\":\"zz\",\"size\":1}\n",
    );
    let err = load_err("garbage.jsonl", &garbage);
    assert!(err.contains("line 11 (byte offset"), "{err}");
    assert!(err.contains("addr"), "{err}");
    // Foreign files.
    let err = load_err("picture.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR");
    assert!(err.contains("not a hipmem trace"), "{err}");
    let err = load_err("other.json", b"{\"traceEvents\":[]}\n");
    assert!(err.contains("not a hipmem trace"), "{err}");
    // A truncated pickle, a pickle of something else.
    let err = load_err("cut.pickle", &SNAPSHOT[..SNAPSHOT.len() / 2]);
    assert!(err.contains("not a readable pickle"), "{err}");
    assert!(err.contains("offset"), "{err}");
    let list_pickle = b"\x80\x04\x95\x09\x00\x00\x00\x00\x00\x00\x00]\x94(K\x01K\x02e.";
    let err = load_err("list.pickle", list_pickle);
    assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
    // A missing file.
    let err = Workload::load(std::path::Path::new("/nonexistent/trace.jsonl")).unwrap_err();
    assert!(err.contains("/nonexistent/trace.jsonl"), "{err}");
}

#[test]
fn unknown_and_double_frees_are_counted_and_the_replay_goes_on() {
    let header = std::str::from_utf8(TRACE).unwrap().lines().next().unwrap();
    let line = |t: u64, e: &str, addr: u64, size: u64| {
        format!(
            "{{\"t\":{t},\"e\":\"{e}\",\"pool\":1,\"stream\":5,\"dev\":0,\"addr\":\"{addr:#x}\",\"size\":{size}}}\n"
        )
    };
    let mut text = format!("{header}\n");
    text += &line(1, "alloc", 0x1000, 1000);
    text += &line(2, "free_requested", 0x1000, 1000);
    text += &line(3, "free_requested", 0x1000, 1000); // double free
    text += &line(4, "free_requested", 0x9000, 64); // never allocated
    text += &line(5, "alloc", 0x2000, 3000);
    text += &line(6, "alloc", 0x2000, 500); // over a live allocation: its free was missed
    text += &line(7, "alloc", 0x3000, 700);
    text += &line(8, "free_requested", 0x2000, 500);
    let w = Workload::from_trace(TraceReader::new(text.as_bytes(), "odd.jsonl").unwrap()).unwrap();
    assert_eq!(w.anomalies.double_frees, 1);
    assert_eq!(w.anomalies.unknown_frees, 1);
    assert_eq!(w.anomalies.allocs_over_live, 1);
    assert_eq!(w.peak_live, 3000);
    let report = replay_all(&w);
    assert_eq!(report.anomalies, w.anomalies);
    for p in &report.pools {
        assert_eq!(p.failures, 0, "{}", p.pool);
        assert_eq!(p.ops, 7, "4 allocations, 2 frees and the implied one");
    }
}

#[test]
fn the_svg_is_well_formed_with_every_series_and_the_map() {
    let w = Workload::from_trace(TraceReader::new(TRACE, "training_loop.jsonl").unwrap()).unwrap();
    let report = replay_all(&w);
    let text = svg::render(&w, &report.pools, "test");
    let doc = roxmltree::Document::parse(&text).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let by_id = |id: &str| doc.descendants().find(|n| n.attribute("id") == Some(id));
    let live = by_id("series-live").expect("the live series");
    assert_eq!(live.attribute("data-peak"), Some(w.peak_live.to_string().as_str()));
    let path = live.descendants().find(|n| n.has_tag_name("path")).unwrap();
    assert!(path.attribute("d").unwrap().matches('L').count() > 100, "a real line, not a stub");
    for p in &report.pools {
        let g = by_id(&format!("series-reserved-{}", p.pool)).unwrap_or_else(|| panic!("{} series", p.pool));
        assert_eq!(g.attribute("data-peak"), Some(p.peak_reserved_bytes.to_string().as_str()));
        let legend = by_id("legend").unwrap();
        assert!(legend.descendants().any(|n| n.text().is_some_and(|t| t.starts_with(&p.pool))));
    }
    assert!(by_id("series-recorded").is_some(), "the recording pool's own reserved bytes");
    let map = by_id("address-map").expect("the address map");
    let kinds: Vec<&str> = map.descendants().filter_map(|n| n.attribute("class")).collect();
    assert!(kinds.contains(&"run-live"), "{kinds:?}");
    assert!(doc.descendants().filter(|n| n.has_tag_name("text")).any(|n| n.text() == Some("trace time")));

    let html = svg::render_html(&w, &report.pools, &[("driver-pool".into(), "none here".into())], "test");
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg"));
    for p in &report.pools {
        assert!(html.contains(&format!("<tr><td>{}</td>", p.pool)));
    }
}

#[test]
fn the_summary_finds_the_peak_and_what_was_live() {
    let w = Workload::from_trace(TraceReader::new(TRACE, "training_loop.jsonl").unwrap()).unwrap();
    let s = summary::summarize(&w, 5);
    let (peak, _, allocs) = expected_trace();
    assert_eq!(s.peak_live, peak);
    assert_eq!(s.allocs, allocs);
    assert_eq!(s.ooms, 1);
    assert_eq!(s.largest_at_peak.len(), 5);
    assert!(s.largest_at_peak.windows(2).all(|p| p[0].size >= p[1].size));
    let live_sizes: u64 = w.live_at(w.peak_op.unwrap()).iter().map(|&i| w.allocs[i as usize].size).sum();
    assert_eq!(live_sizes, peak);
    assert_eq!(s.streams.iter().map(|r| r.allocs).sum::<u64>(), allocs);
    assert_eq!(s.size_classes.iter().map(|r| r.bytes).max(), s.size_classes.first().map(|r| r.bytes));
    let json = serde_json::to_value(&s).unwrap();
    assert_eq!(json["peak_live"], peak);
}

#[test]
fn pool_names_parse() {
    assert_eq!(parse_pools(&["vmm,malloc".into()]).unwrap(), [PoolKind::Vmm, PoolKind::Malloc]);
    assert_eq!(parse_pools(&[]).unwrap(), PoolKind::ALL);
    assert_eq!(parse_pools(&["vmm-pieces".into()]).unwrap(), [PoolKind::VmmPieces]);
    assert!(!PoolKind::ALL.contains(&PoolKind::VmmPieces), "named only when wanted");
    assert_eq!(parse_pools(&["vmm-mixed".into()]).unwrap(), [PoolKind::VmmMixed]);
    assert!(!PoolKind::ALL.contains(&PoolKind::VmmMixed), "named only when wanted");
    assert!(parse_pools(&["nope".into()]).unwrap_err().contains("nope"));
}

/// Idle release on the trace's clock: a peak of 96 MiB at the start, then a
/// small block every 20 ms for a second. With windows of 100 ms the peak's
/// memory goes back in the trace's second half; with the window off (and on
/// an untimed copy of the trace) hipmem's pool keeps it, as does the
/// replay's report.
#[test]
fn replay_releases_idle_memory_on_the_traces_clock() {
    const MIB: u64 = 1 << 20;
    let header = std::str::from_utf8(TRACE).unwrap().lines().next().unwrap();
    let trace = |timed: bool| {
        let line = |t: u64, e: &str, addr: u64, size: u64| {
            let t = if timed { t } else { 0 };
            format!(
                "{{\"t\":{t},\"e\":\"{e}\",\"pool\":1,\"stream\":5,\"dev\":0,\"addr\":\"{addr:#x}\",\"size\":{size}}}\n"
            )
        };
        let mut text = format!("{header}\n");
        for i in 0..12 {
            text += &line(1000 + i, "alloc", 0x1000_0000 + i * 8 * MIB, 8 * MIB);
        }
        for i in 0..12 {
            text += &line(2000 + i, "free_requested", 0x1000_0000 + i * 8 * MIB, 8 * MIB);
        }
        for k in 1..=50u64 {
            let t = k * 20_000_000;
            text += &line(t, "alloc", 0x2000_0000, MIB + k * 4096);
            text += &line(t + 1000, "free_requested", 0x2000_0000, MIB + k * 4096);
        }
        Workload::from_trace(TraceReader::new(text.as_bytes(), "idle.jsonl").unwrap()).unwrap()
    };
    let rt = runtime();
    let run = |w: &Workload, idle: Option<std::time::Duration>| {
        let r = replay(
            &rt,
            w,
            &[PoolKind::Vmm],
            0,
            &Options { idle, ..Options::default() },
            &mut Progress::new(false),
        )
        .unwrap();
        r.pools.into_iter().next().unwrap()
    };
    let window = Some(std::time::Duration::from_millis(100));
    let timed = trace(true);
    assert!(timed.timed);
    let released = run(&timed, window);
    assert_eq!(released.failures, 0);
    assert_eq!(released.idle_release_ms, Some(100));
    assert!(released.peak_reserved_bytes >= 96 * MIB, "the peak was held: {}", released.peak_reserved_bytes);
    assert!(
        released.peak_reserved_second_half <= 8 * MIB,
        "the peak went back before the second half: {} bytes held there",
        released.peak_reserved_second_half
    );
    for (w, idle) in [(&timed, None), (&trace(false), window)] {
        let kept = run(w, idle);
        assert_eq!(kept.idle_release_ms, None);
        assert!(kept.peak_reserved_second_half >= 96 * MIB, "{}", kept.peak_reserved_second_half);
    }
}

/// Five PyTorch runs on an H100 under PyTorch's native allocator
/// (`examples/python/torch_allocators.py --record`, gzip-compressed): four
/// warm-up steps and eight timed ones of the training workloads, 36 batches
/// of variable-length inference; and hipmem's own traces of two live
/// variable-length runs (`HIPMEM_TRACE`): 36 batches, and the 16 of the
/// side-by-side comparison (6 warm-up, 10 measured), whose replay held
/// what the live run held (1.036 of its peak after the warm-up, on an H100
/// and here, with groups of up to 256 MiB; 1.015 live on an H200 and 1.003
/// here with groups of up to 128). See `fixtures/traces/README.md`.
const RECORDED: [(&str, &[u8]); 12] = [
    ("gpt_train", include_bytes!("../../fixtures/traces/pytorch/gpt_train.pickle.gz")),
    ("ckpt_train", include_bytes!("../../fixtures/traces/pytorch/ckpt_train.pickle.gz")),
    ("cnn_train", include_bytes!("../../fixtures/traces/pytorch/cnn_train.pickle.gz")),
    ("side_stream", include_bytes!("../../fixtures/traces/pytorch/side_stream.pickle.gz")),
    ("varlen_infer", include_bytes!("../../fixtures/traces/pytorch/varlen_infer.pickle.gz")),
    ("varlen_infer.hipmem", include_bytes!("../../fixtures/traces/pytorch/varlen_infer.hipmem.jsonl.gz")),
    (
        "varlen_infer_16.hipmem",
        include_bytes!("../../fixtures/traces/pytorch/varlen_infer_16.hipmem.jsonl.gz"),
    ),
    // Other batch shapes (torch_allocators.py --record DIR --workloads
    // varlen_infer --varlen-seed N --passes 1: 6 warm-up and 10 timed batches).
    ("varlen_infer_seed11", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed11.pickle.gz")),
    ("varlen_infer_seed13", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed13.pickle.gz")),
    ("varlen_infer_seed17", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed17.pickle.gz")),
    // Live runs slowed down by their own tracing (HIPMEM_TRACE, H200, stop
    // 70): their idle periods differ from the untraced runs', and the live
    // pools (units in one, first-steps pieces in the other) held 1.030 and
    // 1.042 of their peaks after the warm-up.
    (
        "varlen_infer_traced_units.hipmem",
        include_bytes!("../../fixtures/traces/pytorch/varlen_infer_traced_units.hipmem.jsonl.gz"),
    ),
    (
        "varlen_infer_traced_pieces.hipmem",
        include_bytes!("../../fixtures/traces/pytorch/varlen_infer_traced_pieces.hipmem.jsonl.gz"),
    ),
];

/// Variable-length inference recorded with other batch shapes
/// (`torch_allocators.py --varlen-seed N`), see
/// `varlen_batch_shapes_replay_close_to_their_peak`.
const VARLEN_SEEDS: [(&str, &[u8]); 15] = [
    ("varlen_infer_seed7", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed7.pickle.gz")),
    ("varlen_infer_seed11", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed11.pickle.gz")),
    ("varlen_infer_seed13", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed13.pickle.gz")),
    ("varlen_infer_seed17", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed17.pickle.gz")),
    ("varlen_infer_seed19", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed19.pickle.gz")),
    ("varlen_infer_seed23", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed23.pickle.gz")),
    ("varlen_infer_seed29", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed29.pickle.gz")),
    ("varlen_infer_seed31", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed31.pickle.gz")),
    ("varlen_infer_seed37", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed37.pickle.gz")),
    ("varlen_infer_seed41", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed41.pickle.gz")),
    ("varlen_infer_seed43", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed43.pickle.gz")),
    ("varlen_infer_seed47", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed47.pickle.gz")),
    ("varlen_infer_seed53", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed53.pickle.gz")),
    ("varlen_infer_seed59", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed59.pickle.gz")),
    ("varlen_infer_seed61", include_bytes!("../../fixtures/traces/pytorch/varlen_infer_seed61.pickle.gz")),
];

/// What hipmem's pool holds on the recorded runs, replayed with idle release
/// on the traces' clocks (as hipmem's PyTorch interface runs): peak reserved
/// / peak live over the whole trace and over its second half (peaks reset
/// at the midpoint, as after a warm-up), no failed allocation, and every
/// training step from the second on served from a learned layout (the
/// second and third from a plan of the step before them). The
/// bounds are the figures of this build with a little room (the CPU
/// backend completes frees on its own threads, so a run may differ
/// slightly): a regression in the pool's placement, growth or release
/// policy fails here without a GPU.
#[test]
fn recorded_pytorch_runs_replay_close_to_their_peak() {
    // (whole trace, second half) at most; the whole trace includes the
    // steps before a plan starts.
    let bounds = |name: &str| match name {
        "gpt_train" => (1.02, 1.02),
        "ckpt_train" => (1.045, 1.03),
        "cnn_train" => (1.02, 1.02),
        // The whole trace: the first steps, before a plan, hold 1.05 or
        // 1.27 by whether the side stream's 64 MiB scratch block is known
        // free when the default stream next asks for 128 MiB (the CPU
        // backend completes it on its own thread).
        "side_stream" => (1.30, 1.03),
        // The whole trace's peak is the warm-up's first batch, while the
        // pool grows. (With groups of up to 256 MiB its second half held
        // 1.036: batch-lived blocks of a few MiB, autocast's bf16 copies of
        // the weights, kept free runs inside one group at the peak batch.)
        "varlen_infer_16.hipmem" => (1.05, 1.01),
        // Other batch shapes (the second half: from the first timed batch,
        // op 8272; all fifteen recordings are bounded together in
        // `varlen_batch_shapes_replay_close_to_their_peak`). Seed 17's whole
        // trace peaks in its first batch, while the pool grows.
        "varlen_infer_seed11" => (1.045, 1.045),
        // (Seeds 13 and 17 held 1.006 and 1.004 here while the first
        // steps' small growths were padded to groups, 1.022 and 1.025 since
        // they map unit by unit; `replay_sweep.py` over five windows: 8 of
        // 90 cases above 1.03 against 10.)
        "varlen_infer_seed13" => (1.025, 1.025),
        "varlen_infer_seed17" => (1.08, 1.03),
        _ => (1.03, 1.03),
    };
    // Where the second half starts: after the warm-up where the recording
    // has one (torch_allocators.py's 6 batches), else the midpoint.
    let late_from = |name: &str| {
        (name.starts_with("varlen_infer_seed") || name.starts_with("varlen_infer_traced")).then_some(8272)
    };
    // Driver calls (maps, unmaps, physical allocations and releases) over
    // the whole trace, at most: on a GPU they are most of the learning
    // steps' time. Growths of 64 MiB or more map as one physical
    // allocation; in a run's first 2048 frees smaller ones map unit by
    // unit (`FIRST_STEPS` in `pool/backing/mod.rs`: the first steps make
    // the long-lived state), after them a whole 128 MiB group. (With every
    // small growth padded to a group from the start: GPT-2 1228, the CNN
    // 810, the checkpointed run 966, the variable-length recordings
    // 1400 or less; replayed on an H100, the whole GPT-2 trace took 5.2 µs
    // per operation against 2.8.)
    let most_calls = |name: &str| match name {
        "gpt_train" => 5000,
        "cnn_train" => 4100,
        "ckpt_train" => 1200,
        "side_stream" => 200,
        // 36 batches whose shapes swing: the idle release gives memory back
        // between large batches, and growths after the first steps map
        // groups of at most 64 MiB (2243 and 2419 calls on the CPU backend,
        // 2286 and 2760 on an H200, whose frees complete at other points of
        // the trace's clock; 1761 and 1890 with 128 MiB groups, which held
        // more: `backing::max_group`).
        "varlen_infer" | "varlen_infer.hipmem" => 3000,
        _ => 3300,
    };
    // The planned training runs' steps after the first ones: none.
    let planned = |name: &str| matches!(name, "gpt_train" | "ckpt_train" | "cnn_train" | "side_stream");
    let rt = runtime();
    let window = Some(std::time::Duration::from_millis(100));
    for (name, bytes) in RECORDED {
        let w = Workload::from_bytes(bytes, name).unwrap();
        assert!(w.timed, "{name}: the recording has times");
        let report = replay(
            &rt,
            &w,
            &[PoolKind::Vmm],
            0,
            &Options { idle: window, late_from: late_from(name), ..Options::default() },
            &mut Progress::new(false),
        )
        .unwrap();
        let r = &report.pools[0];
        assert_eq!((r.failures, &r.first_failure), (0, &None), "{name}");
        let (whole, late) = bounds(name);
        assert!(
            r.reserved_over_live <= whole && r.reserved_over_live_second_half <= late,
            "{name}: reserved/live {:.3} over the whole trace (at most {whole}), {:.3} in its second half (at most {late})",
            r.reserved_over_live,
            r.reserved_over_live_second_half
        );
        let calls = r.backend_calls.expect("hipmem's pool counts its driver calls");
        assert!(calls <= most_calls(name), "{name}: {calls} driver calls (at most {})", most_calls(name));
        if planned(name) {
            assert_eq!(r.backend_calls_second_half, Some(0), "{name}: driver calls in the planned steps");
        }
        let plan = r.plan.expect("hipmem's pool reports its plans");
        let peak_op = r.peak_reserved_op.expect("the sampled pass finds the peak");
        assert!(peak_op < r.ops, "{name}: peak after op {peak_op} of {}", r.ops);
        // The second half's peak lies in it, and is the whole trace's where
        // that came in the second half.
        let late_start = Options { late_from: late_from(name), ..Options::default() }.late_from_op(&w) as u64;
        let late_op = r.peak_reserved_op_second_half.expect("the sampled pass finds the second half's peak");
        assert!(
            (late_start..r.ops).contains(&late_op),
            "{name}: the second half's peak after op {late_op}, outside {late_start}..{}",
            r.ops
        );
        if peak_op >= late_start {
            assert_eq!(late_op, peak_op, "{name}: the whole trace's peak came in its second half");
        }
        // Where the free memory lay just after that op: with the live
        // blocks (at most the pool's UsedMemHigh) it is what the pool held.
        // (A plan's arena is held whole while the plan runs: its unused
        // bytes count as live.)
        let f = r
            .free_at_peak_second_half
            .expect("hipmem's pool splits its free memory at the second half's peak");
        assert_eq!(f.beside_live + f.in_whole_pieces, f.free, "{name}: {f:?}");
        assert!(
            f.free <= r.peak_reserved_second_half,
            "{name}: {f:?} of {} reserved",
            r.peak_reserved_second_half
        );
        if plan.served == 0 {
            let used = r.pool_used_high_bytes.expect("hipmem's pool counts its used bytes");
            assert!(
                r.peak_reserved_second_half - f.free <= used,
                "{name}: {f:?} free of {} reserved, {used} used at most",
                r.peak_reserved_second_half
            );
            // What the second half holds beyond its live bytes is that
            // free memory and the live blocks' rounding (to 256 bytes: at
            // most 1 MiB for the few thousand blocks live).
            let beyond = r.peak_reserved_second_half.saturating_sub(r.peak_live_second_half);
            assert!(beyond <= f.free + (1 << 20), "{name}: {beyond} bytes beyond the live ones, {f:?}");
        }
        if name.ends_with("_train") || name == "side_stream" {
            assert!(plan.plans >= 1 && plan.served > 0, "{name}: the training step is planned: {plan:?}");
            let first = r.first_planned_op.expect("a planned run says where its plan began");
            // The training runs' second steps are planned (what comes
            // before, model set-up and the first step, is about a tenth of
            // the trace); the side stream's period is too short for a plan
            // of one step before it is confirmed.
            let by = if name == "side_stream" { r.ops / 2 } else { r.ops / 8 };
            assert!(first < by, "{name}: the plan serves from op {first} of {}", r.ops);
            // What the whole trace holds beyond the steady state's bound
            // comes from the steps before a plan.
            if r.reserved_over_live > late && name == "side_stream" {
                assert!(
                    peak_op < first,
                    "{name}: the peak (after op {peak_op}) came while a plan ran (from op {first})"
                );
            }
        } else {
            assert_eq!(r.first_planned_op.is_some(), plan.served > 0, "{name}");
        }
    }
}

/// Longer runs of three training workloads, recorded on the GPU machine:
/// GPT-2 and the CNN under PyTorch's native allocator over 6 warm-up and 54
/// timed steps (`torch_allocators.py --record DIR --workloads
/// gpt_train,cnn_train --warmup 6 --steps 54 --passes 1`), and hipmem's own
/// trace of rank 0 of the two-GPU job over 12 warm-up and 54 timed steps
/// (`HIPMEM_TRACE=... torch_ddp.py --steps 54`). See
/// `fixtures/traces/README.md`.
const LONG_RUNS: [(&str, &[u8]); 3] = [
    ("gpt_train_60", include_bytes!("../../fixtures/traces/pytorch/gpt_train_60.pickle.gz")),
    ("cnn_train_60", include_bytes!("../../fixtures/traces/pytorch/cnn_train_60.pickle.gz")),
    ("ddp_rank0_66.hipmem", include_bytes!("../../fixtures/traces/pytorch/ddp_rank0_66.hipmem.jsonl.gz")),
];

/// A training run's driver calls are its first steps': the same in a run of
/// 60 steps as in one of 12 (the bounds of
/// `recorded_pytorch_runs_replay_close_to_their_peak`), none once a plan
/// serves, every allocation after the first steps served by a plan, and the
/// whole run close to its peak. This is what makes a long run's time per
/// operation fall below the driver's pool's on a GPU (on an H100: GPT-2
/// 1.25-1.72 µs against 2.09-3.00 over 60 steps, 5.1-5.5 against 2.7-4.0
/// over 12), where a short run's is dominated by its first steps' calls.
#[test]
fn long_training_runs_make_their_driver_calls_in_the_first_steps() {
    // (driver calls over the whole run, in its second half) at most.
    // (A plan laid out where the first steps left memory mapped keeps it:
    // 4612 and 3774 calls before, unmapping it all at the plan's start.)
    let most_calls = |name: &str| match name {
        "gpt_train_60" => (3300, 0),
        "cnn_train_60" => (2300, 0),
        // The check after training copies the parameters four times.
        _ => (3300, 16),
    };
    let rt = runtime();
    let window = Some(std::time::Duration::from_millis(100));
    for (name, bytes) in LONG_RUNS {
        let w = Workload::from_bytes(bytes, name).unwrap();
        let report = replay(
            &rt,
            &w,
            &[PoolKind::Vmm],
            0,
            &Options { idle: window, ..Options::default() },
            &mut Progress::new(false),
        )
        .unwrap();
        let r = &report.pools[0];
        assert_eq!((r.failures, &r.first_failure), (0, &None), "{name}");
        assert!(
            r.reserved_over_live <= 1.02 && r.reserved_over_live_second_half <= 1.02,
            "{name}: reserved/live {:.3} over the whole run, {:.3} in its second half",
            r.reserved_over_live,
            r.reserved_over_live_second_half
        );
        let (whole, late) = most_calls(name);
        let calls = r.backend_calls.expect("hipmem's pool counts its driver calls");
        let late_calls = r.backend_calls_second_half.expect("and those of the second half");
        assert!(
            calls <= whole && late_calls <= late,
            "{name}: {calls} driver calls (at most {whole}), {late_calls} in the second half (at most {late})"
        );
        // Every allocation from the first plan on is the plan's (the first
        // steps are at most a tenth of a run this long).
        let plan = r.plan.expect("hipmem's pool reports its plans");
        let first = r.first_planned_op.expect("a planned run says where its plan began");
        assert!(first < r.ops / 10, "{name}: the plan serves from op {first} of {}", r.ops);
        assert_eq!(plan.missed, 0, "{name}: {plan:?}");
        assert!(
            plan.served * 10 >= report.allocs * 9,
            "{name}: {} of {} allocations from a plan",
            plan.served,
            report.allocs
        );
    }
}

/// The two-GPU job's closing check allocates four blocks of 384 MiB after its
/// plan has ended. Without idle release to give the plan's arena back first,
/// the third block joined the free memory at the top of the range and took
/// its last 4 MiB as a loan from the free start of the old arena's group;
/// shadowed there, the loan cut the group's remaining 100 MiB off from the
/// 760 MiB hole below it, and the fourth block grew 384 MiB anew: 1.042 of
/// the second half's peak (1.030 in two live runs of nine on two H200s).
/// Such a small part of a large run beside a hole is no longer lent
/// (`lend::KEEP_JOINABLE`).
#[test]
fn a_loan_does_not_cut_a_large_free_run_off_from_its_hole() {
    let name = "ddp_rank0_67.hipmem";
    let bytes: &[u8] = include_bytes!("../../fixtures/traces/pytorch/ddp_rank0_67.hipmem.jsonl.gz");
    let w = Workload::from_bytes(bytes, name).unwrap();
    let rt = runtime();
    let report =
        replay(&rt, &w, &[PoolKind::Vmm], 0, &Options::default(), &mut Progress::new(false)).unwrap();
    let r = &report.pools[0];
    assert_eq!(r.failures, 0);
    assert!(
        r.reserved_over_live_second_half <= 1.02,
        "{name}, no idle release: {:.3} of the second half's peak",
        r.reserved_over_live_second_half
    );
}

/// Without idle release the replay keeps everything freed (the release
/// threshold at its maximum, as a program's caching allocator would). Such
/// a pool gives nothing back before a large growth, so the free memory of
/// batches past left scattered between live blocks used to stay beside the
/// new memory of each larger batch: variable-length inference held 1.250 of
/// its peak, seed 13 1.471, seed 29 1.230; with tiny blocks kept apart the
/// two-GPU job's closing check held 1.090 of its second half's peak. Past
/// the first steps, a growth of 256 MiB or more that would set a new peak
/// now moves the wholly free memory under the block (`release.rs`,
/// `moves_before_new_peak`).
#[test]
fn a_pool_that_keeps_its_memory_moves_it_under_a_new_peak() {
    let rt = runtime();
    let ddp: (&str, &[u8]) =
        ("ddp_rank0_67.hipmem", include_bytes!("../../fixtures/traces/pytorch/ddp_rank0_67.hipmem.jsonl.gz"));
    let varlen = RECORDED
        .iter()
        .chain(VARLEN_SEEDS.iter())
        .filter(|(n, _)| ["varlen_infer", "varlen_infer_seed13", "varlen_infer_seed29"].contains(n));
    for &(name, bytes) in varlen.chain([&ddp]) {
        let w = Workload::from_bytes(bytes, name).unwrap();
        for tiny in [false, true] {
            let kind = if tiny { PoolKind::Vmm } else { PoolKind::VmmMixed };
            let report = replay(&rt, &w, &[kind], 0, &Options::default(), &mut Progress::new(false)).unwrap();
            let r = &report.pools[0];
            assert_eq!(r.failures, 0, "{name}");
            // (Seed 13 holds 1.031 with tiny blocks apart, the default
            // since stop 78: at its peak 107 MiB lie free in a 128 MiB group
            // of the first steps. Over the 27 variable-length recordings
            // replayed without idle release, the default's whole traces
            // hold 1.032 of their peaks on average, the mixed heap's 1.044.)
            let (ratio, most) = if name.starts_with("ddp") {
                (r.reserved_over_live_second_half, 1.02)
            } else if tiny {
                (r.reserved_over_live, 1.035)
            } else {
                (r.reserved_over_live, 1.03)
            };
            assert!(
                ratio <= most,
                "{name}, tiny blocks apart {tiny}, no idle release: {ratio:.3} of the peak"
            );
        }
    }
}

/// The live variable-length inference run's warm-up has its largest batch
/// first (6.26 GiB; the measured batches need at most 4.04): its memory must
/// go back before the measured batches start, in a run as fast as the
/// recorded one and in one three times as fast (idle windows three times as
/// long on the trace's clock). With whole windows, needing two without
/// growth, the faster run held 1.6 of the measured peak; on an H100 2 of 7
/// processes held 1.47 so.
#[test]
fn a_warm_up_peak_goes_back_before_the_measured_batches() {
    let (name, bytes) = RECORDED.iter().find(|(n, _)| *n == "varlen_infer_16.hipmem").copied().unwrap();
    let w = Workload::from_bytes(bytes, name).unwrap();
    let rt = runtime();
    for ms in [100, 300] {
        let idle = Some(std::time::Duration::from_millis(ms));
        let opts = Options { idle, late_from: Some(8272), ..Options::default() };
        let report = replay(&rt, &w, &[PoolKind::Vmm], 0, &opts, &mut Progress::new(false)).unwrap();
        let r = &report.pools[0];
        assert_eq!(r.failures, 0);
        assert!(
            r.reserved_over_live_second_half <= 1.045,
            "windows of {ms} ms: {:.3} of the measured batches' peak",
            r.reserved_over_live_second_half
        );
    }
}

/// Variable-length inference on fifteen sets of batch shapes
/// (`torch_allocators.py --record DIR --workloads varlen_infer --varlen-seed
/// N --passes 1` on an H100: 6 warm-up and 10 timed batches each), the
/// pool's placement judged on many runs rather than tuned to one. Over the
/// whole trace (the warm-up included, while the pool grows) the pool holds
/// at most 1.03 of the peak live bytes on average and 1.08 at worst; after
/// the warm-up (from op 8272), at most 1.05 and 1.03 on average, except
/// (at most two) where the warm-up's largest batch is still held when the
/// timed batches start (a peak of the warm-up that ended less than one idle window
/// before: seeds 43 and 61, 60 ms; no idle release can see it go yet).
/// With groups of up to 256 MiB these were 1.036 and 1.031 on average,
/// 1.073 at worst.
#[test]
fn varlen_batch_shapes_replay_close_to_their_peak() {
    let rt = runtime();
    let opts = Options {
        idle: Some(std::time::Duration::from_millis(100)),
        late_from: Some(8272),
        ..Options::default()
    };
    let (mut whole, mut late, mut held_over) = (Vec::new(), Vec::new(), Vec::new());
    for (name, bytes) in VARLEN_SEEDS {
        let w = Workload::from_bytes(bytes, name).unwrap();
        let report = replay(&rt, &w, &[PoolKind::Vmm], 0, &opts, &mut Progress::new(false)).unwrap();
        let r = &report.pools[0];
        assert_eq!((r.failures, &r.first_failure), (0, &None), "{name}");
        assert!(
            r.reserved_over_live <= 1.08,
            "{name}: {:.3} of its peak over the whole trace",
            r.reserved_over_live
        );
        whole.push(r.reserved_over_live);
        // What the pool held when the timed batches started.
        let at_start =
            r.reserved_series.iter().take_while(|&&(op, _)| op < 8272).last().map_or(0, |&(_, bytes)| bytes);
        let after = r.reserved_over_live_second_half;
        if after > 1.05 {
            assert!(
                r.peak_reserved_second_half <= at_start,
                "{name}: {after:.3} of its peak after the warm-up, more than it held when the warm-up ended"
            );
            held_over.push((name, after));
        } else {
            late.push(after);
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    assert!(
        mean(&whole) <= 1.03,
        "{:.4} of the peak on average over the whole traces: {whole:?}",
        mean(&whole)
    );
    assert!(held_over.len() <= 2, "the warm-up's memory still held in the timed batches: {held_over:?}");
    assert!(mean(&late) <= 1.03, "{:.4} of the peak on average after the warm-up: {late:?}", mean(&late));
}

/// Zone placement (`MemPool::set_zone_placement`, `--zone`) on every
/// variable-length recording at three idle-release windows: after the
/// warm-up, each holds at most 1.03 of its peak live bytes, unless it still
/// holds the warm-up's memory (its most was held when the warm-up ended);
/// without zone placement several hold more (`replay_sweep.py`: 22 of 90
/// cases at five windows, up to 1.063).
#[test]
fn zone_placement_holds_every_varlen_recording_within_3_percent() {
    let rt = runtime();
    let live16: (&str, &[u8]) = (
        "varlen_infer_16.hipmem",
        include_bytes!("../../fixtures/traces/pytorch/varlen_infer_16.hipmem.jsonl.gz"),
    );
    let mut checked = 0;
    for (name, bytes) in VARLEN_SEEDS.iter().copied().chain([live16]) {
        let w = Workload::from_bytes(bytes, name).unwrap();
        for ms in [50, 100, 200] {
            let opts = Options {
                idle: Some(std::time::Duration::from_millis(ms)),
                late_from: Some(8272),
                zone: true,
                ..Options::default()
            };
            let report = replay(&rt, &w, &[PoolKind::Vmm], 0, &opts, &mut Progress::new(false)).unwrap();
            let r = &report.pools[0];
            assert_eq!((r.failures, &r.first_failure), (0, &None), "{name} at {ms} ms");
            let after = r.reserved_over_live_second_half;
            if after > 1.03 {
                let at_start = r
                    .reserved_series
                    .iter()
                    .take_while(|&&(op, _)| op < 8272)
                    .last()
                    .map_or(0, |&(_, bytes)| bytes);
                assert!(
                    r.peak_reserved_second_half <= at_start,
                    "{name} at {ms} ms: {after:.3} of its peak after the warm-up with zone placement"
                );
            } else {
                checked += 1;
            }
        }
    }
    // (Seeds 43, 53 and 61 keep their warm-up's memory at the longer
    // windows, 11 and 17 at 200 ms.)
    assert!(checked >= 39, "only {checked} of 48 cases were placement's");
}

/// Checkpointed training with zone placement at five idle-release windows:
/// the optimizer's state, made in one run of 444 allocations in the first
/// step that runs it, is packed in the zone's part, so the plan's arena is
/// laid out with no holes pinned by it beside. Without the rule that puts
/// such runs in the zone (`zone.rs`) the second half held 1.018-1.033;
/// with it, 1.006-1.008. And the whole trace: where a plan's new piece
/// grows past the kept arena of the plan before and that arena lies in
/// the zone's part, the kept groups go back first (the CNN's whole trace
/// held 1.52 of its peak when both were held at once).
#[test]
fn zone_placement_packs_checkpointed_trainings_optimizer_state() {
    let rt = runtime();
    let load = |name: &str, bytes: &[u8]| Workload::from_bytes(bytes, name).unwrap();
    let ckpt = load("ckpt_train", include_bytes!("../../fixtures/traces/pytorch/ckpt_train.pickle.gz"));
    let cnn = load("cnn_train", include_bytes!("../../fixtures/traces/pytorch/cnn_train.pickle.gz"));
    for ms in [25, 50, 100, 133, 200] {
        let opts =
            Options { idle: Some(std::time::Duration::from_millis(ms)), zone: true, ..Options::default() };
        let report = replay(&rt, &ckpt, &[PoolKind::Vmm], 0, &opts, &mut Progress::new(false)).unwrap();
        let r = &report.pools[0];
        assert_eq!((r.failures, &r.first_failure), (0, &None), "at {ms} ms");
        assert!(
            r.reserved_over_live_second_half <= 1.015 && r.reserved_over_live <= 1.03,
            "at {ms} ms: {:.3} of its peak in the second half, {:.3} over the whole trace",
            r.reserved_over_live_second_half,
            r.reserved_over_live
        );
    }
    let opts =
        Options { idle: Some(std::time::Duration::from_millis(100)), zone: true, ..Options::default() };
    let report = replay(&rt, &cnn, &[PoolKind::Vmm], 0, &opts, &mut Progress::new(false)).unwrap();
    let r = &report.pools[0];
    assert!(
        r.reserved_over_live <= 1.045 && r.reserved_over_live_second_half <= 1.02,
        "the CNN: {:.3} of its peak over the whole trace, {:.3} in its second half",
        r.reserved_over_live,
        r.reserved_over_live_second_half
    );
}

#[test]
fn compressed_traces_read_like_plain_ones_and_bad_ones_are_errors() {
    use std::io::Write;
    let gz = |bytes: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    };
    for (name, plain) in [("trace.jsonl", TRACE), ("snapshot.pickle", SNAPSHOT)] {
        let a = Workload::from_bytes(plain, name).unwrap();
        let b = Workload::from_bytes(&gz(plain), name).unwrap();
        assert_eq!(
            (a.ops.len(), a.peak_live, a.alloc_count()),
            (b.ops.len(), b.peak_live, b.alloc_count()),
            "{name}"
        );
        let path = temp_file(&format!("{name}.gz"), &gz(plain));
        let c = Workload::load(&path).unwrap();
        assert_eq!((a.ops.len(), a.peak_live), (c.ops.len(), c.peak_live), "{name} from a file");
        let _ = std::fs::remove_file(path);
    }
    let truncated = gz(SNAPSHOT);
    let err = Workload::from_bytes(&truncated[..truncated.len() / 2], "cut.pickle.gz").unwrap_err();
    assert!(err.contains("cut.pickle.gz") && err.contains("gzip"), "{err}");
    let err = Workload::from_bytes(&gz(&gz(TRACE)), "twice.gz").unwrap_err();
    assert!(err.contains("twice.gz") && err.contains("compressed twice"), "{err}");
}

/// `--idle-sweep` replays hipmem's pools once per window, each replay the
/// same as one with `--idle-release-ms` at that window, and its spread is
/// that of the windows' second halves.
#[test]
fn an_idle_sweep_replays_once_per_window_and_reports_the_spread() {
    let (name, bytes) = RECORDED.iter().find(|(n, _)| *n == "varlen_infer_16.hipmem").copied().unwrap();
    let w = Workload::from_bytes(bytes, name).unwrap();
    let rt = runtime();
    let windows = [100, 50, 0];
    let late = Some(8272);
    // The driver's pool and malloc are not swept (they release nothing idle).
    let kinds = [PoolKind::Vmm, PoolKind::Malloc];
    let r = sweep(&rt, &w, &kinds, &windows, late).unwrap();
    assert_eq!(r.windows.iter().map(|x| x.idle_release_ms).collect::<Vec<_>>(), windows);
    assert_eq!((r.ops, r.late_from_op), (w.ops.len() as u64, 8272));
    let mut figures = Vec::new();
    for win in &r.windows {
        let [p] = &win.pools[..] else { panic!("one pool per window: {:?}", win.pools.len()) };
        assert_eq!(p.pool, "hipmem-vmm");
        assert!(p.reserved_series.is_empty() && p.layout_at_peak.is_none(), "a sweep keeps figures only");
        assert_eq!(p.idle_release_ms, (win.idle_release_ms > 0).then_some(win.idle_release_ms));
        let idle = (win.idle_release_ms > 0).then(|| std::time::Duration::from_millis(win.idle_release_ms));
        let one = replay(
            &rt,
            &w,
            &[PoolKind::Vmm],
            0,
            &Options { idle, late_from: late, ..Options::default() },
            &mut Progress::new(false),
        )
        .unwrap();
        let q = &one.pools[0];
        assert_eq!(
            (q.peak_reserved_bytes, q.peak_reserved_second_half, q.peak_reserved_op_second_half),
            (p.peak_reserved_bytes, p.peak_reserved_second_half, p.peak_reserved_op_second_half),
            "window {} ms: the sweep's replay is the single replay's",
            win.idle_release_ms
        );
        figures.push((p.reserved_over_live_second_half, win.idle_release_ms));
    }
    let [s] = &r.spread[..] else { panic!("one spread per hipmem pool") };
    let least = figures.iter().map(|f| f.0).fold(f64::INFINITY, f64::min);
    let most = figures.iter().copied().fold((f64::NEG_INFINITY, 0), |m, f| if f.0 > m.0 { f } else { m });
    let mut sorted: Vec<f64> = figures.iter().map(|f| f.0).collect();
    sorted.sort_by(f64::total_cmp);
    assert_eq!((s.least, s.most, s.most_at_ms, s.median), (least, most.0, most.1, sorted[1]));
    assert_eq!(s.over_bound, figures.iter().filter(|f| f.0 > super::sweep::BOUND).count());
    // Without idle release the warm-up's largest batch stays held through
    // the timed ones: the sweep's most.
    assert_eq!(s.most_at_ms, 0, "{figures:?}");
}

#[test]
fn an_idle_sweep_refuses_what_it_cannot_do() {
    let rt = runtime();
    for (flag, args) in [
        ("--map-at", super::ReplayArgs { map_at: Some(1), ..Default::default() }),
        ("--slowest", super::ReplayArgs { slowest: 3, ..Default::default() }),
        ("--evict-kib", super::ReplayArgs { evict_kib: 64, ..Default::default() }),
        ("--svg", super::ReplayArgs { svg: Some(PathBuf::from("unused.svg")), ..Default::default() }),
    ] {
        let err = refused(&rt, |trace| super::ReplayArgs { trace, idle_sweep: vec![50, 100], ..args });
        assert!(err.contains(flag) && err.contains("--idle-sweep"), "{flag}: {err}");
    }
    let err =
        refused(&rt, |trace| super::ReplayArgs { trace, idle_sweep: vec![50, 50], ..Default::default() });
    assert!(err.contains("50 ms twice"), "{err}");
    let w = Workload::from_bytes(TRACE, "training_loop").unwrap();
    let only_malloc = sweep(&rt, &w, &[PoolKind::Malloc], &[100], None);
    assert!(only_malloc.unwrap_err().contains("hipmem's pools only"));
    let none = sweep(&rt, &w, &[PoolKind::Vmm], &[], None);
    assert!(none.unwrap_err().contains("at least one window"));
    // A trace whose events all carry time 0 has no clock for a window.
    let header = std::str::from_utf8(TRACE).unwrap().lines().next().unwrap();
    let mut text = format!("{header}\n");
    for e in ["alloc", "free_requested"] {
        text += &format!(
            "{{\"t\":0,\"e\":\"{e}\",\"pool\":1,\"stream\":5,\"dev\":0,\"addr\":\"0x10000000\",\"size\":4096}}\n"
        );
    }
    let untimed = Workload::from_trace(TraceReader::new(text.as_bytes(), "untimed.jsonl").unwrap()).unwrap();
    assert!(!untimed.timed);
    let err = sweep(&rt, &untimed, &[PoolKind::Vmm], &[100], None);
    assert!(err.unwrap_err().contains("no times"));
}

/// The default pool keeps its tiny blocks apart (stop 78; `--pool
/// vmm-mixed` replays the mixed heap before it): it replays the recorded
/// training run and variable-length inference with no failure, within 1.03
/// of their peaks over the whole trace and its second half. It changes
/// where the large blocks land, so other recordings move up or down
/// (docs/pool-measurements.md, "Stop 74", "Stop 75" and "Stop 78"). Also:
/// - GPT-2's second plan is laid out in place, as the mixed heap's is:
///   at most 3 300 driver calls (3 026-3 088; 3 794-4 324 where the slack for
///   that choice was 1/256, `planned.rs`'s `IN_PLACE_SLACK`).
/// - Seed 53's warm-up peak has gone back when the timed batches begin
///   (1.024 of their peak). Their first request is a tiny block the cache
///   serves; idle release looked only at requests the cache missed, and the
///   4.3 GB went back five requests later (1.181).
#[test]
fn the_default_pool_keeps_tiny_blocks_apart_close_to_the_peak() {
    let rt = runtime();
    if rt.backend().virtual_memory().is_none() {
        return;
    }
    let seed53 = VARLEN_SEEDS.iter().find(|(n, _)| *n == "varlen_infer_seed53").expect("the recording");
    let runs = RECORDED.iter().filter(|(n, _)| ["gpt_train", "varlen_infer"].contains(n)).chain([seed53]);
    for (name, bytes) in runs {
        let w = Workload::from_bytes(bytes, name).unwrap();
        let late_from = (*name == "varlen_infer_seed53").then_some(8272);
        let options =
            Options { idle: Some(std::time::Duration::from_millis(100)), late_from, ..Options::default() };
        let report = replay(&rt, &w, &[PoolKind::Vmm], 0, &options, &mut Progress::new(false)).unwrap();
        let r = &report.pools[0];
        assert_eq!(r.pool, "hipmem-vmm");
        assert_eq!((r.failures, &r.first_failure), (0, &None), "{name}");
        // (Over its whole trace seed 53 holds 1.045, the mixed heap 1.038:
        // its warm-up, where 374 MiB lie free in 128 MiB groups beside the
        // first batches' blocks either way.)
        let whole = if late_from.is_some() { 1.05 } else { 1.03 };
        assert!(
            r.reserved_over_live <= whole && r.reserved_over_live_second_half <= 1.03,
            "{name}: {:.3} over the whole trace, {:.3} in its second half",
            r.reserved_over_live,
            r.reserved_over_live_second_half
        );
        if *name == "gpt_train" {
            let calls = r.backend_calls.expect("hipmem's pool counts its driver calls");
            assert!(calls <= 3300, "{name}: {calls} driver calls (at most 3300)");
        }
    }
}

/// `--pool vmm-pieces`: the recorded training runs' first steps in pieces
/// of up to 8 MiB make far fewer driver calls than units alone, and their
/// steps after the warm-up hold at most 1.03 of their peak. GPT-2 (replayed:
/// 1040-1096 calls against 3029, 1.004 against 1.005) needs fewer than
/// half. The CNN (650 against 2034, 1.010 against 1.005) needs fewer than
/// two fifths: its third plan lays itself out in place over the pieces
/// for 0.6% more memory rather than giving them back and mapping its arena
/// anew (404 driver calls), which the slack a pool with pieces takes for
/// that choice allows (`planned.rs`'s `IN_PLACE_SLACK`: 1168 calls at
/// 1/256).
#[test]
fn first_steps_in_pieces_make_fewer_driver_calls() {
    let rt = runtime();
    // (The setting would cut the default pool's first steps too.)
    if rt.backend().virtual_memory().is_none() || std::env::var_os("HIPMEM_POOL_FIRST_PIECE_MIB").is_some() {
        return;
    }
    // (Each run, and the most pieces may make of units' calls: num / den.)
    for (run, num, den) in [("gpt_train", 1, 2), ("cnn_train", 2, 5)] {
        let (name, bytes) = RECORDED.iter().find(|(n, _)| *n == run).expect("the recording");
        let w = Workload::from_bytes(bytes, name).unwrap();
        let options = Options { idle: Some(std::time::Duration::from_millis(100)), ..Options::default() };
        let report =
            replay(&rt, &w, &[PoolKind::Vmm, PoolKind::VmmPieces], 0, &options, &mut Progress::new(false))
                .unwrap();
        let (units, pieces) = (&report.pools[0], &report.pools[1]);
        assert_eq!(pieces.pool, "hipmem-vmm-pieces");
        for r in [units, pieces] {
            assert_eq!((r.failures, &r.first_failure), (0, &None), "{run}: {}", r.pool);
            assert!(
                r.reserved_over_live_second_half <= 1.03,
                "{run}: {}: {:.3}",
                r.pool,
                r.reserved_over_live_second_half
            );
        }
        let (u, p) = (units.backend_calls.unwrap(), pieces.backend_calls.unwrap());
        assert!(den * p < num * u, "{run}: pieces: {p} driver calls, units: {u}");
    }
}
