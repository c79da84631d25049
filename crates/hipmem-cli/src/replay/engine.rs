//! Replaying a workload into one allocator: every allocation and free in
//! trace order, each on the replay stream standing for its trace stream.
//!
//! Two passes per allocator, each with a fresh pool and fresh streams: the
//! first is timed and does nothing but the operations; the second samples
//! the allocator's reserved bytes after every operation (for the picture and
//! the peak) and, for the hipmem pool that is drawn, takes its address map
//! when the trace's live bytes peak (and, with `--map-at`, before the
//! operation named). With `--slowest`, the timed pass also times each
//! operation and counts the backend calls it made (a clock and a counter
//! read per operation, inside the timed loop).
//!
//! hipmem's pools release idle memory on the trace's own clock, as hipmem's
//! PyTorch interface does on the wall clock (`--idle-release-ms`, default
//! 100): before each operation the pool is told the time it was recorded at
//! (`MemPool::set_idle_clock`). An untimed trace, or a window of 0, keeps
//! everything freed, as a program's caching allocator would.

use std::time::{Duration, Instant};

use hipmem::pool::layout::{AddressRun, FreeSplit, PhysicalPiece};
use hipmem::{DevicePtr, Error, MemPool, PoolAttribute, PoolBacking, PoolProps, Runtime, Stream};
use serde::Serialize;

use super::progress::Progress;
use super::workload::{OpKind, Workload};

/// An allocator to replay into.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// hipmem's pool on one reserved virtual address range (the default:
    /// each growth of 64 MiB or more mapped in one call, in groups of up to
    /// 128 MiB in a run's first steps and 64 MiB after them; tiny blocks
    /// kept apart).
    Vmm,
    /// The same, moving memory whenever that keeps it smaller
    /// (`MoveBudget::LEAST_MEMORY`).
    VmmLeastMemory,
    /// The default pool mapping each unit alone
    /// (`MemPool::set_growth_mapping(0)`), for comparison.
    VmmUnits,
    /// The default pool mapping a run's first-steps growths in pieces of
    /// up to 8 MiB (`MemPool::set_first_steps_piece`), for comparison; not
    /// in [`PoolKind::ALL`].
    VmmPieces,
    /// The default pool keeping its tiny blocks in one heap with the rest
    /// (`MemPool::set_tiny_blocks_apart(false)`, the default before stop
    /// 78), for comparison; not in [`PoolKind::ALL`].
    VmmMixed,
    /// hipmem's pool on separate device allocations.
    Segments,
    /// The driver's own pool (cuMemPool*, cuda only).
    Driver,
    /// hipMalloc / hipFree for every allocation (the baseline).
    Malloc,
}

impl PoolKind {
    /// Every kind replayed when `--pool` names none, in the order of the
    /// report (not [`PoolKind::VmmPieces`] or [`PoolKind::VmmMixed`], which
    /// are named when wanted).
    pub const ALL: [PoolKind; 6] = [
        PoolKind::Vmm,
        PoolKind::VmmLeastMemory,
        PoolKind::VmmUnits,
        PoolKind::Segments,
        PoolKind::Driver,
        PoolKind::Malloc,
    ];

    /// The name in reports.
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Vmm => "hipmem-vmm",
            PoolKind::VmmLeastMemory => "hipmem-vmm-lowmem",
            PoolKind::VmmUnits => "hipmem-vmm-units",
            PoolKind::VmmPieces => "hipmem-vmm-pieces",
            PoolKind::VmmMixed => "hipmem-vmm-mixed",
            PoolKind::Segments => "hipmem-segments",
            PoolKind::Driver => "driver-pool",
            PoolKind::Malloc => "malloc",
        }
    }

    /// The `--pool` value.
    pub fn parse(s: &str) -> Option<PoolKind> {
        match s {
            "vmm" | "hipmem-vmm" => Some(PoolKind::Vmm),
            "vmm-lowmem" | "hipmem-vmm-lowmem" => Some(PoolKind::VmmLeastMemory),
            "vmm-units" | "hipmem-vmm-units" => Some(PoolKind::VmmUnits),
            "vmm-pieces" | "hipmem-vmm-pieces" => Some(PoolKind::VmmPieces),
            "vmm-mixed" | "hipmem-vmm-mixed" => Some(PoolKind::VmmMixed),
            "segments" | "hipmem-segments" => Some(PoolKind::Segments),
            "driver" | "driver-pool" => Some(PoolKind::Driver),
            "malloc" | "direct" => Some(PoolKind::Malloc),
            _ => None,
        }
    }

    /// Whether this is one of hipmem's own pools.
    pub fn is_hipmem(self) -> bool {
        matches!(
            self,
            PoolKind::Vmm
                | PoolKind::VmmLeastMemory
                | PoolKind::VmmUnits
                | PoolKind::VmmPieces
                | PoolKind::VmmMixed
                | PoolKind::Segments
        )
    }
}

/// How a replay runs, besides the allocators.
#[derive(Copy, Clone, Debug, Default)]
pub struct Options {
    /// hipmem's pools: release memory idle for two windows of this much of
    /// the trace's time (None: keep everything freed).
    pub idle: Option<Duration>,
    /// KiB of other memory written between operations in the timed pass.
    pub evict_kib: usize,
    /// Time each operation of the timed pass and keep this many of the
    /// slowest (0: only the whole pass is timed).
    pub slowest: usize,
    /// hipmem's pools: take the address map just before this operation.
    pub map_at: Option<u64>,
    /// Where the trace's "second half" starts (its late peaks, times and
    /// backend calls): this operation, or the midpoint (None).
    pub late_from: Option<u64>,
    /// hipmem's pool on virtual memory places blocks by zones where idle
    /// release is on (`MemPool::set_zone_placement`), as hipmem's PyTorch
    /// interface does with `HIPMEM_TORCH_ZONE=1`.
    pub zone: bool,
}

impl Options {
    /// The operation where `w`'s "second half" starts: `late_from` (at
    /// most the trace's length), else its midpoint.
    pub fn late_from_op(&self, w: &Workload) -> usize {
        self.late_from.map_or(w.ops.len() / 2, |op| (op as usize).min(w.ops.len()))
    }
}

/// One operation of the timed pass, as `--slowest` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct SlowOp {
    /// Its index in the trace's operations.
    pub op: u64,
    /// `alloc` or `free`.
    pub kind: &'static str,
    /// The block's requested size.
    pub bytes: u64,
    /// The trace's stream.
    pub stream: u32,
    /// How long the call took.
    pub time_ns: u64,
    /// hipmem's pools: the backend calls it made (maps, unmaps, physical
    /// allocations made and given back).
    pub backend_calls: Option<u64>,
}

/// Where the timed pass's time went, operation by operation (`--slowest`).
#[derive(Clone, Debug, Serialize)]
pub struct OpProfile {
    /// The slowest operations, slowest first.
    pub slowest: Vec<SlowOp>,
    /// The time of every operation, summed (without the loop around them).
    pub time_ns: u64,
    /// The same in the trace's second half.
    pub time_second_half_ns: u64,
    /// hipmem's pools: the operations that made backend calls, and their
    /// time (whole trace, then second half).
    pub with_backend_calls: Option<[u64; 4]>,
}

/// A hipmem pool's address map just before an operation (`--map-at`).
#[derive(Clone, Debug, Serialize)]
pub struct AddressMap {
    /// The operation it was taken before.
    pub op: u64,
    /// The address runs, in address order.
    pub runs: Vec<AddressRun>,
    /// The physical pieces behind them.
    pub pieces: Vec<PhysicalPiece>,
    /// Where the free memory lies: in wholly free pieces, or beside live blocks.
    pub free: FreeSplit,
}

/// What one allocator did with the workload.
#[derive(Clone, Debug, Serialize)]
pub struct PoolResult {
    /// The allocator.
    pub pool: String,
    /// Operations issued (allocations and frees).
    pub ops: u64,
    /// Allocations that failed (their frees are skipped).
    pub failures: u64,
    /// The first failure's message.
    pub first_failure: Option<String>,
    /// Most live bytes (from the trace, requested sizes).
    pub peak_live_bytes: u64,
    /// Most bytes the allocator held from the device (its ReservedMemHigh; for
    /// malloc, the device memory in use beyond what was in use before).
    pub peak_reserved_bytes: u64,
    /// peak_reserved_bytes / peak_live_bytes.
    pub reserved_over_live: f64,
    /// Mean time of one operation in the timed pass, in nanoseconds.
    pub time_per_op_ns: f64,
    /// The same over the trace's second half (a repeating workload's steady
    /// state, after what the pool does once).
    pub time_per_op_second_half_ns: f64,
    /// The pool's UsedMemHigh (hipmem and driver pools): live bytes as the pool counts them.
    pub pool_used_high_bytes: Option<u64>,
    /// hipmem's pools: the backend calls (maps, unmaps, granules or
    /// segments made and given back) of the timed pass.
    pub backend_calls: Option<u64>,
    /// The same in the second half of the trace (a repeating workload's
    /// steady state), made on the replaying thread: the pool's release
    /// worker gives memory back off it (`pool/deferred.rs`), delaying no
    /// operation, and its releases are counted apart.
    pub backend_calls_second_half: Option<u64>,
    /// hipmem's pools: of [`PoolResult::backend_calls`], the releases the
    /// pool's release worker made, off the replaying thread.
    pub backend_releases_on_worker: Option<u64>,
    /// Most reserved bytes in the trace's second half (peaks reset at its
    /// midpoint, as a measurement after a warm-up is).
    pub peak_reserved_second_half: u64,
    /// Most live bytes in the trace's second half.
    pub peak_live_second_half: u64,
    /// peak_reserved_second_half / peak_live_second_half.
    pub reserved_over_live_second_half: f64,
    /// hipmem's pools: what learned layouts did in the timed pass.
    pub plan: Option<hipmem::pool::PlanCounts>,
    /// The operation after which the reserved bytes first reached their
    /// most (sampled between operations): with `first_planned_op`, whether
    /// the peak fell in the steps a pool learned from or while a plan ran.
    pub peak_reserved_op: Option<u64>,
    /// The operation after which the reserved bytes first reached their
    /// most in the second half (from `--late-from`): where to look with
    /// `--map-at` when the second half's peak is the one that matters.
    pub peak_reserved_op_second_half: Option<u64>,
    /// hipmem's pools: where the free memory lay just after that operation:
    /// in wholly free physical pieces, or beside live blocks (held until
    /// they are freed). Where no plan runs, what the second half holds
    /// beyond its live bytes is this free memory; a plan's arena is held
    /// whole while the plan runs, and its unused bytes count as live.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub free_at_peak_second_half: Option<FreeSplit>,
    /// hipmem's pools: the first operation a learned layout served.
    pub first_planned_op: Option<u64>,
    /// hipmem's pools: the idle-release window on the trace's clock, in
    /// milliseconds (None: off; the pool keeps what is freed).
    pub idle_release_ms: Option<u64>,
    /// Reserved bytes after each op where they changed: (op index, bytes).
    #[serde(skip)]
    pub reserved_series: Vec<(u32, u64)>,
    /// The pool's address runs when the trace's live bytes peaked (the pool that is drawn).
    #[serde(skip)]
    pub layout_at_peak: Option<Vec<AddressRun>>,
    /// Where the timed pass's time went (`--slowest`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<OpProfile>,
    /// hipmem's pools: the address map before the operation `--map-at` names.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub map_at: Option<AddressMap>,
}

/// An allocator set up for one pass.
enum Target {
    Pool(MemPool),
    Malloc { baseline_used: u64 },
}

impl Target {
    fn create(
        rt: &Runtime,
        kind: PoolKind,
        device: usize,
        (idle, zone): (Option<Duration>, bool),
    ) -> Result<Target, String> {
        let props = PoolProps { device, ..Default::default() };
        let pool = match kind {
            PoolKind::Vmm
            | PoolKind::VmmLeastMemory
            | PoolKind::VmmUnits
            | PoolKind::VmmPieces
            | PoolKind::VmmMixed
            | PoolKind::Segments => {
                let backing = if kind == PoolKind::Segments {
                    PoolBacking::Segments
                } else {
                    PoolBacking::VirtualMemory
                };
                let pool = MemPool::create_with_backing(rt, props, backing).map_err(|e| e.to_string())?;
                if pool.backing() != backing {
                    return Err(format!(
                        "the {} backend has no virtual memory management",
                        rt.backend_kind()
                    ));
                }
                if kind == PoolKind::VmmLeastMemory {
                    pool.set_move_budget(hipmem::MoveBudget::LEAST_MEMORY).map_err(|e| e.to_string())?;
                }
                if kind == PoolKind::VmmUnits {
                    pool.set_growth_mapping(0).map_err(|e| e.to_string())?;
                }
                if kind == PoolKind::VmmPieces {
                    pool.set_first_steps_piece(8 << 20).map_err(|e| e.to_string())?;
                }
                if kind == PoolKind::VmmMixed {
                    pool.set_tiny_blocks_apart(false).map_err(|e| e.to_string())?;
                }
                pool
            }
            PoolKind::Driver => MemPool::create_driver(rt, props).map_err(|e| match e {
                Error::NotSupported(_) => format!("the {} backend has no driver pools", rt.backend_kind()),
                e => e.to_string(),
            })?,
            PoolKind::Malloc => {
                let info = rt.mem_get_info(device).map_err(|e| e.to_string())?;
                return Ok(Target::Malloc { baseline_used: info.total - info.free });
            }
        };
        // (`idle` is Some only for hipmem's pools: see `replay`.)
        match idle {
            // Memory idle for two windows of the trace's time goes back
            // (a peak left behind: one).
            Some(window) => {
                pool.set_idle_release(Some(window)).map_err(|e| e.to_string())?;
                pool.set_idle_clock(Some(Duration::ZERO)).map_err(|e| e.to_string())?;
                // As hipmem's PyTorch interface with HIPMEM_TORCH_ZONE=1:
                // zone placement with idle release, where the pool can have
                // it (the default pool on virtual memory).
                if zone && kind == PoolKind::Vmm {
                    pool.set_zone_placement(true).map_err(|e| e.to_string())?;
                }
            }
            // Keep what is freed, as a program's caching allocator would:
            // the replay has no synchronizations, and the peak is what is
            // compared.
            None => {
                pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).map_err(|e| e.to_string())?
            }
        }
        Ok(Target::Pool(pool))
    }

    /// Tells a pool with idle release the trace's time.
    fn set_time(&self, t: Duration) {
        if let Target::Pool(pool) = self {
            let _ = pool.set_idle_clock(Some(t));
        }
    }

    fn alloc(&self, rt: &Runtime, device: usize, size: u64, stream: &Stream) -> hipmem::Result<DevicePtr> {
        match self {
            Target::Pool(pool) => pool.alloc_raw(size, stream),
            Target::Malloc { .. } => rt.malloc(device, size),
        }
    }

    fn free(&self, rt: &Runtime, ptr: DevicePtr, stream: &Stream) -> hipmem::Result<()> {
        match self {
            Target::Pool(_) => rt.free_async(ptr, stream),
            Target::Malloc { .. } => rt.free(ptr),
        }
    }

    fn reserved(&self, rt: &Runtime, device: usize) -> u64 {
        match self {
            Target::Pool(pool) => pool.attribute(PoolAttribute::ReservedMemCurrent),
            Target::Malloc { baseline_used } => rt
                .mem_get_info(device)
                .map(|i| (i.total - i.free).saturating_sub(*baseline_used))
                .unwrap_or(0),
        }
    }
}

struct Pass {
    elapsed: Duration,
    elapsed_second_half: Duration,
    calls: Option<u64>,
    calls_second_half: Option<u64>,
    releases_on_worker: Option<u64>,
    failures: u64,
    first_failure: Option<String>,
    series: Vec<(u32, u64)>,
    peak_reserved: u64,
    peak_op: Option<u64>,
    first_planned_op: Option<u64>,
    late_reserved: u64,
    late_peak_op: Option<u64>,
    late_free: Option<FreeSplit>,
    late_live: u64,
    plan: Option<hipmem::pool::PlanCounts>,
    used_high: Option<u64>,
    layout: Option<Vec<AddressRun>>,
    profile: Option<OpProfile>,
    map_at: Option<AddressMap>,
}

/// What a pass records besides the operations.
#[derive(Copy, Clone)]
enum Record {
    /// Nothing but, with `slowest` > 0, each operation's time (the timed pass).
    Nothing { slowest: usize },
    /// The reserved bytes after every operation, the address map at the
    /// peak if `layout`, and the map before operation `map_at`.
    Samples { layout: bool, map_at: Option<u64> },
}

fn pass(
    rt: &Runtime,
    kind: PoolKind,
    device: usize,
    w: &Workload,
    record: Record,
    (idle, evict_kib, half, zone): (Option<Duration>, usize, usize, bool),
    progress: &mut Progress,
) -> Result<Pass, String> {
    let (sample, want_layout, slowest, map_at) = match record {
        Record::Nothing { slowest } => (false, false, slowest, None),
        Record::Samples { layout, map_at } => (true, layout, 0, map_at),
    };
    let target = Target::create(rt, kind, device, (idle, zone))?;
    let clocked = idle.is_some();
    let dev = rt.device(device).map_err(|e| e.to_string())?;
    let streams: Vec<Stream> = w
        .streams
        .iter()
        .map(|_| dev.create_stream())
        .collect::<hipmem::Result<_>>()
        .map_err(|e| e.to_string())?;
    let mut ptrs = vec![DevicePtr::NULL; w.allocs.len()];
    let mut failures = 0;
    let mut first_failure = None;
    let mut series = Vec::new();
    let mut last_reserved = u64::MAX;
    let mut peak_reserved = 0;
    let mut peak_reserved_op = None;
    let mut first_planned_op = None;
    let (mut late_reserved, mut late_live, mut live) = (0u64, 0u64, 0u64);
    let mut late_peak_op = None;
    let mut late_free = None;
    let mut layout = None;
    let peak_op = w.peak_op.unwrap_or(usize::MAX);
    // (On the replaying thread: the release worker's releases apart.)
    let snapshot = || match &target {
        Target::Pool(pool) => pool.backend_calls(),
        Target::Malloc { .. } => None,
    };
    let calls = || snapshot().map(|c| c.on_callers());
    let mut calls_at_half = None;
    let mut at_half = None;
    let mut used_high_first_half = 0;
    // With `evict_kib`, other memory is written between operations (as a
    // framework's own work would evict the pool's state from the caches),
    // and only the allocator's calls are timed.
    let mut other = vec![0u8; evict_kib << 10];
    let mut in_calls = Duration::ZERO;
    let mut in_calls_at_half = Duration::ZERO;
    let mut map = None;
    // (time, op, backend calls) of every operation, with `slowest`.
    let mut timed_ops: Vec<(Duration, u32, Option<u64>)> = Vec::new();
    let started = Instant::now();
    for (i, op) in w.ops.iter().enumerate() {
        if map_at == Some(i as u64) {
            if let Target::Pool(pool) = &target {
                map = address_map(pool, i as u64);
            }
        }
        let calls_before = if slowest > 0 { calls() } else { None };
        if i == half {
            calls_at_half = calls();
            at_half = Some(Instant::now());
            in_calls_at_half = in_calls;
            // The pool's high watermarks start again, as a PyTorch run's are
            // reset after its warm-up (`torch_allocators.py`): the pool
            // reads its own (zone placement's wait, lending's new peak).
            if let Target::Pool(pool) = &target {
                used_high_first_half = pool.attribute(PoolAttribute::UsedMemHigh);
                peak_reserved = peak_reserved.max(pool.attribute(PoolAttribute::ReservedMemHigh));
                let _ = pool.set_attribute(PoolAttribute::ReservedMemHigh, 0);
                let _ = pool.set_attribute(PoolAttribute::UsedMemHigh, 0);
            }
        }
        if !other.is_empty() {
            for byte in other.iter_mut().step_by(64) {
                *byte = byte.wrapping_add(1);
            }
            std::hint::black_box(&other);
        }
        let call = Instant::now();
        let stream = &streams[op.stream as usize];
        let slot = op.slot as usize;
        if clocked {
            target.set_time(Duration::from_nanos(op.t_ns));
        }
        match op.kind {
            OpKind::Alloc => match target.alloc(rt, device, w.allocs[slot].size, stream) {
                Ok(ptr) => {
                    ptrs[slot] = ptr;
                    live += w.allocs[slot].size;
                }
                Err(e) => {
                    failures += 1;
                    first_failure.get_or_insert_with(|| format!("op {i}: {e}"));
                }
            },
            OpKind::Free => {
                let ptr = std::mem::replace(&mut ptrs[slot], DevicePtr::NULL);
                if !ptr.is_null() {
                    live -= w.allocs[slot].size;
                    if let Err(e) = target.free(rt, ptr, stream) {
                        failures += 1;
                        first_failure.get_or_insert_with(|| format!("op {i}: {e}"));
                    }
                }
            }
        }
        if !other.is_empty() {
            in_calls += call.elapsed();
        }
        if slowest > 0 {
            let took = call.elapsed();
            timed_ops.push((took, i as u32, calls().zip(calls_before).map(|(after, before)| after - before)));
        }
        if sample {
            let reserved = target.reserved(rt, device);
            if reserved != last_reserved {
                series.push((i as u32, reserved));
                last_reserved = reserved;
                if reserved > peak_reserved {
                    peak_reserved = reserved;
                    peak_reserved_op = Some(i as u64);
                }
            }
            if i >= half {
                if reserved > late_reserved || late_peak_op.is_none() {
                    late_reserved = reserved;
                    late_peak_op = Some(i as u64);
                    // (Other pools cannot show their layout: no error
                    // built and dropped at each new peak.)
                    if let (true, Target::Pool(pool)) = (kind.is_hipmem(), &target) {
                        late_free = free_split(pool);
                    }
                }
                late_live = late_live.max(live);
            }
            if first_planned_op.is_none() && kind.is_hipmem() {
                if let Target::Pool(pool) = &target {
                    if pool.plan_counts().served > 0 {
                        first_planned_op = Some(i as u64);
                    }
                }
            }
            if want_layout && i == peak_op {
                if let Target::Pool(pool) = &target {
                    layout = pool.address_runs().ok();
                }
            }
        }
        if i % 4096 == 0 {
            progress.update(i as u64);
        }
    }
    let (elapsed, elapsed_second_half) = if other.is_empty() {
        (started.elapsed(), at_half.map(|t| t.elapsed()).unwrap_or_default())
    } else {
        (in_calls, in_calls - in_calls_at_half)
    };
    let profile = (slowest > 0).then(|| profile_of(w, timed_ops, half, slowest));
    let at_end = snapshot();
    let (calls_at_end, releases_on_worker) =
        (at_end.map(|c| c.on_callers()), at_end.map(|c| c.released_on_worker));
    let plan = match &target {
        Target::Pool(pool) if kind.is_hipmem() => Some(pool.plan_counts()),
        _ => None,
    };
    let calls_second_half = calls_at_end.zip(calls_at_half).map(|(end, half)| end - half);
    // What the trace left live is freed now, untimed.
    for (slot, ptr) in ptrs.iter().enumerate() {
        if !ptr.is_null() {
            let _ = target.free(rt, *ptr, &streams[w.allocs[slot].stream as usize]);
        }
    }
    dev.synchronize().map_err(|e| e.to_string())?;
    let used_high = match &target {
        Target::Pool(pool) => {
            peak_reserved = peak_reserved.max(pool.attribute(PoolAttribute::ReservedMemHigh));
            Some(pool.attribute(PoolAttribute::UsedMemHigh).max(used_high_first_half))
        }
        Target::Malloc { .. } => None,
    };
    Ok(Pass {
        elapsed,
        elapsed_second_half,
        calls: calls_at_end.zip(releases_on_worker).map(|(c, w)| c + w),
        calls_second_half,
        releases_on_worker,
        failures,
        first_failure,
        series,
        peak_reserved,
        peak_op: peak_reserved_op,
        first_planned_op,
        late_reserved,
        late_peak_op,
        late_free,
        late_live,
        plan,
        used_high,
        layout,
        profile,
        map_at: map,
    })
}

/// Where a hipmem pool's free memory lies now (None for other pools).
fn free_split(pool: &MemPool) -> Option<FreeSplit> {
    Some(FreeSplit::of(&pool.address_runs().ok()?, &pool.physical_pieces().ok()?))
}

/// A hipmem pool's address map now, taken before operation `op`.
fn address_map(pool: &MemPool, op: u64) -> Option<AddressMap> {
    let runs = pool.address_runs().ok()?;
    let pieces = pool.physical_pieces().ok()?;
    let free = FreeSplit::of(&runs, &pieces);
    Some(AddressMap { op, runs, pieces, free })
}

/// The profile of the timed pass from each operation's (time, index,
/// backend calls): the `slowest` slowest, and the time of the operations
/// that called the backend.
fn profile_of(
    w: &Workload,
    mut ops: Vec<(Duration, u32, Option<u64>)>,
    half: usize,
    slowest: usize,
) -> OpProfile {
    let ns = |d: Duration| d.as_nanos() as u64;
    let late = |op: u32| op as usize >= half;
    let time_ns = ops.iter().map(|o| ns(o.0)).sum();
    let time_second_half_ns = ops.iter().filter(|o| late(o.1)).map(|o| ns(o.0)).sum();
    let with_backend_calls = ops.iter().all(|o| o.2.is_some()).then(|| {
        let called: Vec<&(Duration, u32, Option<u64>)> = ops.iter().filter(|o| o.2 > Some(0)).collect();
        let called_late: Vec<_> = called.iter().filter(|o| late(o.1)).collect();
        [
            called.len() as u64,
            called.iter().map(|o| ns(o.0)).sum(),
            called_late.len() as u64,
            called_late.iter().map(|o| ns(o.0)).sum(),
        ]
    });
    ops.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let slowest = ops
        .iter()
        .take(slowest)
        .map(|&(took, i, calls)| {
            let op = &w.ops[i as usize];
            SlowOp {
                op: i as u64,
                kind: match op.kind {
                    OpKind::Alloc => "alloc",
                    OpKind::Free => "free",
                },
                bytes: w.allocs[op.slot as usize].size,
                stream: op.stream,
                time_ns: ns(took),
                backend_calls: calls,
            }
        })
        .collect();
    OpProfile { slowest, time_ns, time_second_half_ns, with_backend_calls }
}

/// Replays `w` into `kind` on `device` as `opts` says: hipmem's pools with
/// idle release of windows of `opts.idle` on the trace's clock where the
/// trace is timed, `opts.evict_kib` KiB of other memory written between
/// operations in the timed pass (then only the calls are timed), each
/// operation timed with `opts.slowest`, the address map taken before
/// `opts.map_at`. Err: the allocator cannot be set up here (the reason, for
/// a note).
pub fn replay(
    rt: &Runtime,
    kind: PoolKind,
    device: usize,
    w: &Workload,
    want_layout: bool,
    opts: &Options,
    progress: &mut Progress,
) -> Result<PoolResult, String> {
    let idle = opts.idle.filter(|_| w.timed && kind.is_hipmem());
    progress.begin(&format!("{} (timed)", kind.name()), w.ops.len() as u64);
    let record = Record::Nothing { slowest: opts.slowest };
    let zone = opts.zone;
    let timed =
        pass(rt, kind, device, w, record, (idle, opts.evict_kib, opts.late_from_op(w), zone), progress)?;
    progress.begin(&format!("{} (sampled)", kind.name()), w.ops.len() as u64);
    let record = Record::Samples { layout: want_layout, map_at: opts.map_at.filter(|_| kind.is_hipmem()) };
    let sampled = pass(rt, kind, device, w, record, (idle, 0, opts.late_from_op(w), zone), progress)?;
    progress.done();
    let ops = w.ops.len() as u64;
    Ok(PoolResult {
        pool: kind.name().into(),
        ops,
        failures: timed.failures.max(sampled.failures),
        first_failure: timed.first_failure.or(sampled.first_failure),
        peak_live_bytes: w.peak_live,
        peak_reserved_bytes: sampled.peak_reserved,
        reserved_over_live: if w.peak_live == 0 {
            0.0
        } else {
            sampled.peak_reserved as f64 / w.peak_live as f64
        },
        time_per_op_ns: if ops == 0 { 0.0 } else { timed.elapsed.as_nanos() as f64 / ops as f64 },
        time_per_op_second_half_ns: {
            let late = ops - (ops / 2);
            if late == 0 { 0.0 } else { timed.elapsed_second_half.as_nanos() as f64 / late as f64 }
        },
        pool_used_high_bytes: sampled.used_high,
        backend_calls: timed.calls,
        backend_calls_second_half: timed.calls_second_half,
        backend_releases_on_worker: timed.releases_on_worker,
        peak_reserved_second_half: sampled.late_reserved,
        peak_live_second_half: sampled.late_live,
        reserved_over_live_second_half: if sampled.late_live == 0 {
            0.0
        } else {
            sampled.late_reserved as f64 / sampled.late_live as f64
        },
        plan: timed.plan,
        peak_reserved_op: sampled.peak_op,
        peak_reserved_op_second_half: sampled.late_peak_op,
        free_at_peak_second_half: sampled.late_free,
        first_planned_op: sampled.first_planned_op,
        idle_release_ms: idle.map(|w| w.as_millis() as u64),
        reserved_series: sampled.series,
        layout_at_peak: sampled.layout,
        profile: timed.profile,
        map_at: sampled.map_at,
    })
}
