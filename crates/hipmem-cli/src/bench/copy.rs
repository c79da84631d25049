//! `hipmem bench copy`: host-device copies by path, both directions, and
//! page-locked allocation, direct against the pinned pool.
//!
//! Paths (the `allocator` column):
//! - `driver-pageable`: the driver's own copy from a `Vec` (`hipMemcpy`);
//! - `hipmem-staged`: `Runtime::copy_pageable_to_device` / back, the path
//!   users get: staged through page-locked buffers above the threshold;
//! - `staged-always`: the staged pipeline at every size (to tune the threshold);
//! - `page-locked`: a `PinnedBuffer` copied asynchronously, then synchronized;
//! - `driver-page-locked`: the backend's page-locked copy with no hipmem
//!   bookkeeping (the raw driver's page-locked copy, for the 97% target);
//! - `host-memcpy-only`: no device work, only the staged path's host side
//!   (the parallel memcpy between the `Vec` and page-locked memory), the
//!   ceiling of the staged path where the DMA is faster.
//!
//! The pageable paths take turns (one copy each per round), so noise on the
//! machine falls on all of them alike; so do the two page-locked ones. `HIPMEM_BENCH_COPY_PATHS=a,b` measures only
//! the paths named.
//!
//! Cases: `h2d` and `d2h` (metrics `bandwidth` GB/s and `ratio_vs_driver_pageable`),
//! `pinned_alloc` (median allocation time, `direct` and `pool`).

use std::time::Instant;

use hipmem::backend::parallel_memcpy::Stores;
use hipmem::pinned::{StagedOptions, copy_parallel};
use hipmem::{DeviceBuffer, PinnedBuffer, PinnedPool, Result, Runtime, Stream};

use super::{Progress, Report, Rng, median_p99, ns};

/// How much work to do.
#[derive(Copy, Clone, Debug)]
pub struct Scale {
    max_size: u64,
    bytes_per_case: u64,
    max_reps: usize,
    alloc_reps: usize,
}

impl Scale {
    /// Full runs (the GPU machine): 4 KiB to 1 GiB.
    pub fn full() -> Scale {
        Scale { max_size: 1 << 30, bytes_per_case: 1 << 30, max_reps: 2000, alloc_reps: 200 }
    }

    /// A quick smoke run: up to 16 MiB.
    pub fn quick() -> Scale {
        Scale { max_size: 16 << 20, bytes_per_case: 64 << 20, max_reps: 50, alloc_reps: 20 }
    }
}

const PATHS: [&str; 6] = [
    "driver-pageable",
    "hipmem-staged",
    "staged-always",
    "page-locked",
    "driver-page-locked",
    "host-memcpy-only",
];

/// The staged path with each kind of host stores (for tuning; measured
/// only when named in `HIPMEM_BENCH_COPY_PATHS`, with the pageable paths).
const STORES_VARIANTS: [(&str, Stores); 2] =
    [("staged-nt", Stores::Streaming), ("staged-cached", Stores::Cached)];

/// Runs the bench on device 0.
pub fn run(rt: &Runtime, mut scale: Scale) -> Result<Report> {
    let device = 0;
    let mut report = Report::new("copy", rt, device)?;
    if rt.backend_kind() == hipmem::BackendKind::Host {
        scale.max_size = scale.max_size.min(256 << 20);
    }
    let sizes: Vec<u64> =
        [4u64 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
            .into_iter()
            .filter(|&s| s <= scale.max_size)
            .collect();
    let paths = paths()?;
    let stream = rt.device(device)?.create_stream()?;
    let mut progress = Progress::new(sizes.len() * 2 + 2);
    for &size in &sizes {
        let n = size as usize;
        let dev = rt.device(device)?.alloc::<u8>(n)?;
        let mut pageable: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let mut pinned = PinnedBuffer::<u8>::from_slice(rt, &pageable, 0)?;
        let reps = ((scale.bytes_per_case / size) as usize).clamp(3, scale.max_reps);
        for h2d in [true, false] {
            let case = if h2d { "h2d" } else { "d2h" };
            progress.step(&format!("{case} {}", crate::report::bytes(size)));
            // The paths of a group take turns, one copy each per round, in an
            // order shuffled every round: machine noise (another tenant, a
            // frequency change) then falls on every path alike instead of on
            // whichever path was being measured at that moment. Page-locked
            // copies are compared among themselves: what the processor's
            // caches hold of their buffer (which the pageable paths change)
            // moves a DMA's speed by up to half.
            let mut samples = vec![Vec::with_capacity(reps); paths.len()];
            for &path in &paths {
                copy_once(rt, path, h2d, &dev, &mut pageable, &mut pinned, &stream)?; // warm-up
            }
            for page_locked in [false, true] {
                let mut order: Vec<usize> =
                    (0..paths.len()).filter(|&p| paths[p].contains("page-locked") == page_locked).collect();
                let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15u64 ^ size ^ u64::from(h2d) << 63);
                for _ in 0..reps {
                    rng.shuffle(&mut order);
                    for &p in &order {
                        let t = Instant::now();
                        copy_once(rt, paths[p], h2d, &dev, &mut pageable, &mut pinned, &stream)?;
                        samples[p].push(t.elapsed().as_secs_f64());
                    }
                }
            }
            let mut bandwidths = std::collections::HashMap::new();
            for (&path, samples) in paths.iter().zip(&mut samples) {
                let (median, _) = median_p99(samples);
                let gbps = size as f64 / median.max(1e-12) / 1e9;
                report.push(case, path, Some(size), "bandwidth", gbps, "GB/s");
                bandwidths.insert(path, gbps);
            }
            let mut ratio = |path: &str, peer: &str, metric: &str| {
                if let (Some(a), Some(b)) = (bandwidths.get(path), bandwidths.get(peer)) {
                    report.push(case, path, Some(size), metric, a / b, "x");
                }
            };
            for path in ["hipmem-staged", "staged-always", "page-locked", "driver-page-locked"] {
                ratio(path, "driver-pageable", "ratio_vs_driver_pageable");
            }
            ratio("page-locked", "driver-page-locked", "ratio_vs_driver_page_locked");
        }
        // Data check: every device-to-host path ran last round, each
        // bringing back what the host-to-device rounds sent.
        let wrong = |data: &[u8]| data.iter().enumerate().any(|(i, &b)| b != i as u8);
        if wrong(pinned.as_slice()?) || wrong(&pageable) {
            return Err(hipmem::Error::Unknown(format!("copy bench: wrong data at {size} bytes")));
        }
    }
    for size in [1u64 << 20, 64 << 20] {
        progress.step(&format!("page-locked allocation {}", crate::report::bytes(size)));
        alloc_times(rt, &mut report, size, scale)?;
    }
    progress.finish();
    Ok(report)
}

/// The paths to measure: all, or those `HIPMEM_BENCH_COPY_PATHS` names
/// (comma-separated), to look at a few closely.
fn paths() -> Result<Vec<&'static str>> {
    let Ok(names) = std::env::var("HIPMEM_BENCH_COPY_PATHS") else { return Ok(PATHS.to_vec()) };
    names
        .split(',')
        .map(|name| {
            let known = PATHS.iter().copied().chain(STORES_VARIANTS.iter().map(|&(name, _)| name));
            known.clone().find(|p| *p == name.trim()).ok_or_else(|| {
                hipmem::Error::InvalidValue(format!(
                    "HIPMEM_BENCH_COPY_PATHS: unknown path {name:?} (known: {})",
                    known.collect::<Vec<_>>().join(", ")
                ))
            })
        })
        .collect()
}

fn copy_once(
    rt: &Runtime,
    path: &str,
    h2d: bool,
    dev: &DeviceBuffer<u8>,
    pageable: &mut [u8],
    pinned: &mut PinnedBuffer<u8>,
    stream: &Stream,
) -> Result<()> {
    let d = dev.device_ptr();
    let n = pageable.len();
    match (path, h2d) {
        ("driver-pageable", true) => rt.copy_host_to_device(d, pageable),
        ("driver-pageable", false) => rt.copy_device_to_host(pageable, d),
        ("hipmem-staged", true) => rt.copy_pageable_to_device(d, pageable),
        ("hipmem-staged", false) => rt.copy_device_to_pageable(pageable, d),
        ("staged-always", true) => {
            rt.copy_pageable_to_device_staged(d, pageable, &StagedOptions::for_len(n, true))
        }
        ("staged-always", false) => {
            rt.copy_device_to_pageable_staged(pageable, d, &StagedOptions::for_len(n, false))
        }
        (variant, h2d) if variant.starts_with("staged-") => {
            let (_, stores) = STORES_VARIANTS
                .iter()
                .find(|(name, _)| *name == variant)
                .ok_or_else(|| hipmem::Error::InvalidValue(format!("unknown copy path {variant:?}")))?;
            let options = StagedOptions { stores: *stores, ..StagedOptions::for_len(n, h2d) };
            if h2d {
                rt.copy_pageable_to_device_staged(d, pageable, &options)
            } else {
                rt.copy_device_to_pageable_staged(pageable, d, &options)
            }
        }
        ("host-memcpy-only", true) => {
            copy_parallel(pinned.as_mut_slice()?, pageable, StagedOptions::for_len(n, true).stores);
            Ok(())
        }
        ("host-memcpy-only", false) => {
            copy_parallel(pageable, pinned.as_slice()?, StagedOptions::for_len(n, false).stores);
            Ok(())
        }
        ("page-locked", true) => {
            stream.copy_to_device_from_pinned(pinned, dev)?;
            stream.synchronize()
        }
        ("page-locked", false) => {
            stream.copy_to_pinned_from_device(dev, pinned)?;
            stream.synchronize()
        }
        (_, h2d) => {
            let pl = rt
                .backend()
                .page_locked_memory()
                .ok_or_else(|| hipmem::Error::NotSupported("no page-locked memory".into()))?;
            let len = pinned.size_bytes();
            if h2d {
                pl.copy_to_device_async(d, pinned.host_ptr(), len, stream.raw())?;
            } else {
                pl.copy_from_device_async(pinned.host_ptr(), d, len, stream.raw())?;
            }
            rt.backend().stream_synchronize(stream.raw())
        }
    }
}

fn alloc_times(rt: &Runtime, report: &mut Report, size: u64, scale: Scale) -> Result<()> {
    let n = size as usize;
    let direct_reps = if size >= 64 << 20 { 5 } else { scale.alloc_reps.min(50) };
    let mut direct = Vec::with_capacity(direct_reps);
    for _ in 0..direct_reps {
        let t = Instant::now();
        let b = PinnedBuffer::<u8>::new(rt, n, 0)?;
        direct.push(ns(t.elapsed()) / 1e3);
        drop(b);
    }
    let pool = PinnedPool::new(rt, 0)?;
    drop(pool.alloc::<u8>(n)?); // one block cached
    let mut pooled = Vec::with_capacity(scale.alloc_reps);
    for _ in 0..scale.alloc_reps {
        let t = Instant::now();
        let b = pool.alloc::<u8>(n)?;
        pooled.push(ns(t.elapsed()) / 1e3);
        drop(b);
    }
    let (d_med, d_p99) = median_p99(&mut direct);
    let (p_med, p_p99) = median_p99(&mut pooled);
    report.push("pinned_alloc", "direct", Some(size), "median", d_med, "us");
    report.push("pinned_alloc", "direct", Some(size), "p99", d_p99, "us");
    report.push("pinned_alloc", "pool", Some(size), "median", p_med, "us");
    report.push("pinned_alloc", "pool", Some(size), "p99", p_p99, "us");
    report.push("pinned_alloc", "pool", Some(size), "speedup_vs_direct", d_med / p_med.max(1e-9), "x");
    let stats = pool.stats();
    report.push("pinned_alloc", "pool", Some(size), "hits", stats.hits as f64, "count");
    Ok(())
}
