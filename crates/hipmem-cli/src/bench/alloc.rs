//! `hipmem bench alloc`: stream-ordered allocation, hipmem's pool against the
//! driver's pool (cuda) and direct allocation (cuMemAlloc/cuMemFree; on host,
//! the emulator's allocation), all in one run.
//!
//! Cases:
//! - `pair_latency`: one allocation + free pair on one stream, median and p99,
//!   at 256 B, 64 KiB, 2 MiB, 64 MiB (timed in batches so the clock's own cost
//!   stays out);
//! - `seeds_loop`: the seeds' Example 2 loop (allocate, iota kernel, free) for
//!   1000 iterations on one stream, per iteration, against the same loop with
//!   no allocation (`kernel-only`);
//! - `random_allocations`: RMM's workload (73% allocations, 27% frees of a
//!   random live block, sizes uniform up to 2 MiB, capped total), time and
//!   fragmentation = peak reserved / peak requested;
//! - `c_abi_pair_latency`: the pair through libhipmem's exported functions
//!   (`hipMallocAsync` + `hipFreeAsync`) on the null stream, a stream made by
//!   `hipStreamCreate` and (cuda) a stream made by the driver, and through
//!   PyTorch's pluggable and direct interfaces on the null stream, next to the
//!   same pair through the Rust API on the same kinds of stream, the median
//!   of several repetitions, with ratios (see `c_abi.rs`);
//! - `threads`: 1, 4 and 16 threads, each on its own stream, aggregate pairs/s.

use std::collections::HashMap;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use hipmem::backend::RawPool;
use hipmem::{DevicePtr, MemPool, PoolAttribute, Result, Runtime, Stream};

use super::{Progress, Report, Rng, median_p99, ns};

/// How much work to do.
#[derive(Copy, Clone, Debug)]
pub struct Scale {
    samples: usize,
    loop_iterations: usize,
    random_ops: [usize; 2],
    thread_window: Duration,
    c_abi_repetitions: usize,
}

impl Scale {
    /// Full runs (the GPU machine).
    pub fn full() -> Scale {
        Scale {
            samples: 2000,
            loop_iterations: 1000,
            random_ops: [10_000, 100_000],
            thread_window: Duration::from_millis(400),
            c_abi_repetitions: 7,
        }
    }

    /// A quick smoke run (tests, CI).
    pub fn quick() -> Scale {
        Scale {
            samples: 50,
            loop_iterations: 50,
            random_ops: [500, 2_000],
            thread_window: Duration::from_millis(30),
            c_abi_repetitions: 3,
        }
    }
}

/// One way to allocate.
#[derive(Clone)]
enum Allocator {
    /// hipmem's pool through `hipMallocFromPoolAsync` / `hipFreeAsync` semantics.
    Hipmem(MemPool),
    /// The driver's pool (`cuMemAllocFromPoolAsync` / `cuMemFreeAsync`).
    Driver(RawPool),
    /// Direct allocation (`cuMemAlloc` / `cuMemFree`, the emulator's mmap on host).
    Direct,
}

impl Allocator {
    fn name(&self) -> &'static str {
        match self {
            Allocator::Hipmem(_) => "hipmem-pool",
            Allocator::Driver(_) => "driver-pool",
            Allocator::Direct => "direct",
        }
    }

    fn alloc(&self, rt: &Runtime, size: u64, stream: &Stream) -> Result<DevicePtr> {
        match self {
            Allocator::Hipmem(pool) => pool.alloc_raw(size, stream),
            Allocator::Driver(pool) => rt.backend().driver_pool_alloc_async(*pool, size, stream.raw()),
            Allocator::Direct => rt.backend().mem_alloc(stream.device(), size),
        }
    }

    fn free(&self, rt: &Runtime, ptr: DevicePtr, stream: &Stream) -> Result<()> {
        match self {
            Allocator::Hipmem(_) => rt.free_async(ptr, stream),
            Allocator::Driver(_) => rt.backend().driver_free_async(ptr, stream.raw()),
            Allocator::Direct => rt.backend().mem_free(stream.device(), ptr),
        }
    }

    fn reserved(&self, rt: &Runtime) -> Option<u64> {
        match self {
            Allocator::Hipmem(pool) => Some(pool.stats().reserved_current),
            Allocator::Driver(pool) => rt.backend().driver_pool_get_attribute(*pool, 5).ok(),
            Allocator::Direct => None,
        }
    }

    /// A fresh pool of the same kind (for workloads that measure reserved memory).
    fn fresh(&self, rt: &Runtime, device: usize) -> Result<Allocator> {
        Ok(match self {
            Allocator::Hipmem(_) => Allocator::Hipmem(new_hipmem_pool(rt, device)?),
            Allocator::Driver(_) => Allocator::Driver(new_driver_pool(rt, device)?),
            Allocator::Direct => Allocator::Direct,
        })
    }

    fn dispose(&self, rt: &Runtime) {
        if let Allocator::Driver(pool) = self {
            let _ = rt.backend().driver_pool_trim_to(*pool, 0);
            let _ = rt.backend().driver_pool_destroy(*pool);
        }
    }
}

fn new_hipmem_pool(rt: &Runtime, device: usize) -> Result<MemPool> {
    let pool = rt.device(device)?.create_mem_pool(0, 0)?;
    pool.set_release_threshold(u64::MAX);
    Ok(pool)
}

fn new_driver_pool(rt: &Runtime, device: usize) -> Result<RawPool> {
    let pool = rt.backend().driver_pool_create(device, 0, 0)?;
    rt.backend().driver_pool_set_attribute(pool, PoolAttribute::ReleaseThreshold.raw(), u64::MAX)?;
    Ok(pool)
}

/// Runs every case and returns the report.
pub fn run(rt: &Runtime, scale: Scale) -> Result<Report> {
    let device = 0;
    let mut report = Report::new("alloc", rt, device)?;
    let stream = rt.device(device)?.create_stream()?;
    let mut allocators = vec![Allocator::Hipmem(new_hipmem_pool(rt, device)?)];
    match new_driver_pool(rt, device) {
        Ok(p) => allocators.push(Allocator::Driver(p)),
        Err(e) => eprintln!("note: no driver pool on this backend ({})", e.message()),
    }
    allocators.push(Allocator::Direct);
    let sizes = [256u64, 64 << 10, 2 << 20, 64 << 20];
    let c_abi_sizes = [256u64, 64 << 10];
    let mut progress =
        Progress::new(sizes.len() * allocators.len() + c_abi_sizes.len() + 4 + 2 * allocators.len() + 3);

    // ---- pair latency ----
    let mut rust_pool_pair = HashMap::new();
    for &size in &sizes {
        let mut medians = Vec::new();
        for a in &allocators {
            progress.step(&format!("pair latency {size} B, {}", a.name()));
            let (median, p99) = pair_latency(rt, a, size, &stream, scale)?;
            report.push("pair_latency", a.name(), Some(size), "median", median, "ns");
            report.push("pair_latency", a.name(), Some(size), "p99", p99, "ns");
            medians.push((a.name(), median));
        }
        let hipmem = medians[0].1;
        rust_pool_pair.insert(size, hipmem);
        for (name, m) in &medians[1..] {
            report.push("pair_latency", name, Some(size), "median_vs_hipmem", m / hipmem, "x");
        }
    }

    // ---- the same pair through the C ABI ----
    super::c_abi::run(
        rt,
        &mut report,
        &mut progress,
        &c_abi_sizes,
        scale.samples,
        scale.c_abi_repetitions,
        &rust_pool_pair,
    )?;

    // ---- the seeds' loop ----
    let loop_size = 1u64 << 20;
    progress.step("seeds' loop, kernel only");
    let kernel_only = seeds_loop(rt, None, loop_size, &stream, scale)?;
    report.push("seeds_loop", "kernel-only", Some(loop_size), "per_iteration", kernel_only, "us");
    for a in &allocators {
        progress.step(&format!("seeds' loop, {}", a.name()));
        let t = seeds_loop(rt, Some(a), loop_size, &stream, scale)?;
        report.push("seeds_loop", a.name(), Some(loop_size), "per_iteration", t, "us");
        report.push("seeds_loop", a.name(), Some(loop_size), "vs_kernel_only", t / kernel_only, "x");
    }

    // ---- random allocations ----
    for &ops in &scale.random_ops {
        for a in &allocators {
            progress.step(&format!("random_allocations {ops} ops, {}", a.name()));
            let fresh = a.fresh(rt, device)?;
            let (time_ms, frag) = random_allocations(rt, &fresh, ops, &stream)?;
            fresh.dispose(rt);
            let case = format!("random_allocations_{ops}");
            report.push(&case, a.name(), None, "time", time_ms, "ms");
            if let Some(f) = frag {
                report.push(&case, a.name(), None, "fragmentation", f, "x");
            }
        }
    }

    // ---- threads ----
    for a in allocators.iter().filter(|a| !matches!(a, Allocator::Direct)) {
        let mut single = 0.0;
        for threads in [1usize, 4, 16] {
            progress.step(&format!("{threads} threads, {}", a.name()));
            let rate = threaded_pairs(rt, a, threads, 64 << 10, scale)?;
            if threads == 1 {
                single = rate;
            }
            report.push(
                &format!("threads_{threads}"),
                a.name(),
                Some(64 << 10),
                "pairs_per_second",
                rate,
                "pairs/s",
            );
            report.push(
                &format!("threads_{threads}"),
                a.name(),
                Some(64 << 10),
                "vs_1_thread",
                rate / single,
                "x",
            );
        }
    }
    progress.finish();
    for a in &allocators {
        a.dispose(rt);
    }
    stream.synchronize()?;
    Ok(report)
}

fn pair_latency(rt: &Runtime, a: &Allocator, size: u64, stream: &Stream, scale: Scale) -> Result<(f64, f64)> {
    let (batch, samples) = match a {
        Allocator::Hipmem(_) => (32, scale.samples),
        Allocator::Driver(_) => (8, scale.samples),
        Allocator::Direct => (1, (scale.samples / 10).max(5)),
    };
    // Warm up: the pools grow once, the code paths get hot.
    for _ in 0..batch * 4 {
        let p = a.alloc(rt, size, stream)?;
        a.free(rt, p, stream)?;
    }
    let mut per_pair = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        for _ in 0..batch {
            let p = a.alloc(rt, size, stream)?;
            a.free(rt, p, stream)?;
        }
        per_pair.push(ns(t.elapsed()) / batch as f64);
    }
    stream.synchronize()?;
    Ok(median_p99(&mut per_pair))
}

/// Microseconds per iteration of the seeds' loop (median of 5 runs).
fn seeds_loop(rt: &Runtime, a: Option<&Allocator>, size: u64, stream: &Stream, scale: Scale) -> Result<f64> {
    let device = rt.device(stream.device())?;
    let fixed = device.alloc::<i32>((size / 4) as usize)?;
    let elements = size / 4;
    let iterations = match a {
        Some(Allocator::Direct) => (scale.loop_iterations / 10).max(10),
        _ => scale.loop_iterations,
    };
    let mut runs = Vec::new();
    for run in 0..6 {
        stream.synchronize()?;
        let t = Instant::now();
        for i in 0..iterations {
            match a {
                // The same unchecked launch as the allocator runs, so the
                // ratio measures the allocator alone.
                None => rt.backend().launch_iota(fixed.device_ptr(), elements, i as i32, stream.raw())?,
                Some(a) => {
                    let p = a.alloc(rt, size, stream)?;
                    rt.backend().launch_iota(p, elements, i as i32, stream.raw())?;
                    a.free(rt, p, stream)?;
                }
            }
        }
        stream.synchronize()?;
        if run > 0 {
            runs.push(t.elapsed().as_secs_f64() * 1e6 / iterations as f64);
        }
    }
    Ok(median_p99(&mut runs).0)
}

/// RMM's random_allocations: the time in ms of an unobserved run, and the
/// fragmentation (peak reserved / peak requested) of an identical run on a
/// fresh pool that reads its reserved memory after every allocation.
fn random_allocations(
    rt: &Runtime,
    a: &Allocator,
    ops: usize,
    stream: &Stream,
) -> Result<(f64, Option<f64>)> {
    let (time_ms, _) = random_run(rt, a, ops, stream, false)?;
    if matches!(a, Allocator::Direct) {
        return Ok((time_ms, None));
    }
    let observed = a.fresh(rt, stream.device())?;
    let result = random_run(rt, &observed, ops, stream, true);
    observed.dispose(rt);
    Ok((time_ms, result?.1))
}

/// RMM's random_allocations on `pool` (one observed run): time in ms and
/// fragmentation (peak reserved / peak requested).
pub(super) fn pool_random_allocations(
    rt: &Runtime,
    pool: &MemPool,
    ops: usize,
    stream: &Stream,
) -> Result<(f64, f64)> {
    let (time_ms, frag) = random_run(rt, &Allocator::Hipmem(pool.clone()), ops, stream, true)?;
    Ok((time_ms, frag.unwrap_or(0.0)))
}

fn random_run(
    rt: &Runtime,
    a: &Allocator,
    ops: usize,
    stream: &Stream,
    observe: bool,
) -> Result<(f64, Option<f64>)> {
    let max_size = 2u64 << 20;
    let free_mem = rt.mem_get_info(stream.device())?.free;
    let max_usage = (16_000u64 << 20).min(free_mem / 2);
    let mut rng = Rng::new(0x5eed);
    let mut live: Vec<(DevicePtr, u64)> = Vec::new();
    let (mut used, mut peak_used, mut peak_reserved) = (0u64, 0u64, 0u64);
    let t = Instant::now();
    for _ in 0..ops {
        let size = rng.range(1, max_size);
        let roll = rng.range(0, 99);
        if live.is_empty() || (roll < 73 && used + size < max_usage) {
            let p = a.alloc(rt, size, stream)?;
            live.push((p, size));
            used += size;
            if observe {
                peak_used = peak_used.max(used);
                peak_reserved = peak_reserved.max(a.reserved(rt).unwrap_or(0));
            }
        } else {
            let i = (rng.next_u64() % live.len() as u64) as usize;
            let (p, s) = live.swap_remove(i);
            a.free(rt, p, stream)?;
            used -= s;
        }
    }
    let time_ms = t.elapsed().as_secs_f64() * 1e3;
    for (p, _) in live.drain(..) {
        a.free(rt, p, stream)?;
    }
    stream.synchronize()?;
    Ok((time_ms, observe.then(|| peak_reserved as f64 / peak_used.max(1) as f64)))
}

/// Aggregate alloc+free pairs per second of `threads` threads, each on its
/// own stream, over the scale's time window.
fn threaded_pairs(rt: &Runtime, a: &Allocator, threads: usize, size: u64, scale: Scale) -> Result<f64> {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let mut handles = Vec::new();
    for _ in 0..threads {
        let (rt, a, barrier) = (rt.clone(), a.clone(), Arc::clone(&barrier));
        let window = scale.thread_window;
        handles.push(std::thread::spawn(move || -> Result<(u64, Duration)> {
            let stream = rt.device(0)?.create_stream()?;
            for _ in 0..64 {
                let p = a.alloc(&rt, size, &stream)?;
                a.free(&rt, p, &stream)?;
            }
            barrier.wait();
            let t = Instant::now();
            let mut pairs = 0u64;
            while t.elapsed() < window {
                for _ in 0..64 {
                    let p = a.alloc(&rt, size, &stream)?;
                    a.free(&rt, p, &stream)?;
                }
                pairs += 64;
            }
            let took = t.elapsed();
            stream.synchronize()?;
            Ok((pairs, took))
        }));
    }
    barrier.wait();
    let mut total = 0.0;
    for h in handles {
        let (pairs, took) =
            h.join().map_err(|_| hipmem::Error::Unknown("a benchmark thread panicked".into()))??;
        total += pairs as f64 / took.as_secs_f64();
    }
    Ok(total)
}
