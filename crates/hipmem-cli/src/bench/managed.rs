//! `hipmem bench managed`: what prefetches and hints do to managed memory.
//!
//! Cases, each on fresh managed memory of one size (1 GiB on cuda, or an
//! eighth of the device's free memory where that is less; 64 MiB on the CPU
//! emulation, whose migrations are modelled):
//! - `kernel_on_demand`: a fill kernel over memory the host wrote last, so
//!   every page migrates on demand (page faults);
//! - `prefetch_then_kernel`: the same after `hipMemPrefetchAsync` to the
//!   device: the prefetch's time and bandwidth, then the kernel's;
//! - `read_mostly_two_places`: rounds of a device read (a copy out of the
//!   managed buffer) and a host read (one element per page), with and
//!   without `hipMemAdviseSetReadMostly`: duplicated pages stop the
//!   back-and-forth;
//! - `prefetch_vs_page_locked`: the prefetch bandwidth (host to device, best
//!   of 3) against a page-locked copy of the same size in the same run
//!   (`PinnedBuffer` + `copy_to_device_from_pinned`, best of 3).
//!
//! Faults and bytes migrated are reported where the backend counts them
//! (the CPU emulation; not cuda).

use std::time::{Duration, Instant};

use hipmem::{
    Advice, BackendKind, Location, ManagedBuffer, ManagedStatistics, PinnedBuffer, Result, Runtime, Stream,
};

use super::{Progress, Report};

/// How large.
#[derive(Copy, Clone, Debug)]
pub struct Scale {
    gpu_bytes: u64,
    host_bytes: u64,
    rounds: usize,
}

impl Scale {
    /// Full runs (the GPU machine).
    pub fn full() -> Scale {
        Scale { gpu_bytes: 1 << 30, host_bytes: 64 << 20, rounds: 4 }
    }

    /// A quick smoke run.
    pub fn quick() -> Scale {
        Scale { gpu_bytes: 64 << 20, host_bytes: 16 << 20, rounds: 2 }
    }
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-9) / 1e9
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn timed(stream: &Stream, f: impl FnOnce() -> Result<()>) -> Result<Duration> {
    stream.synchronize()?;
    let start = Instant::now();
    f()?;
    stream.synchronize()?;
    Ok(start.elapsed())
}

/// Adds the migration statistics of a case, where the backend knows them.
fn push_stats(report: &mut Report, case: &str, path: &str, size: Option<u64>, s: &ManagedStatistics) {
    if let Some(f) = s.faults {
        report.push(case, path, size, "faults", f as f64, "count");
    }
    if let Some(b) = s.bytes_migrated() {
        report.push(case, path, size, "bytes_migrated", b as f64, "B");
    }
}

/// A fresh managed buffer the host wrote last (its pages are on the host).
fn fresh(rt: &Runtime, elements: usize) -> Result<ManagedBuffer<u32>> {
    let mut buf = ManagedBuffer::<u32>::new(rt, 0, elements, hipmem::AttachFlags::Global)?;
    buf.as_mut_slice()?.fill(1);
    Ok(buf)
}

/// Runs the bench on device 0.
pub fn run(rt: &Runtime, scale: Scale) -> Result<Report> {
    let device = rt.device(0)?;
    let mut report = Report::new("managed", rt, 0)?;
    let free = rt.mem_get_info(0)?.free;
    let size = if rt.backend_kind() != BackendKind::Host {
        // Never more managed memory than the GPU has free: an eighth of it at most.
        scale.gpu_bytes.min(free / 8)
    } else {
        scale.host_bytes
    } / 4096
        * 4096;
    let elements = (size / 4) as usize;
    let sz = Some(size);
    eprintln!("note: {} of managed memory per case", crate::report::bytes(size));
    let stream = device.create_stream()?;
    {
        let warm = device.alloc::<u32>(1024)?;
        stream.fill(&warm, 0)?;
        stream.synchronize()?;
    }
    let mut progress = Progress::new(4);

    progress.step("kernel_on_demand");
    let buf = fresh(rt, elements)?;
    let before = rt.managed_statistics()?;
    let t = timed(&stream, || stream.fill(&buf, 7))?;
    let s = rt.managed_statistics()?.since(&before);
    report.push("kernel_on_demand", "managed", sz, "kernel_time", ms(t), "ms");
    report.push("kernel_on_demand", "managed", sz, "bandwidth", gbps(size, t), "GB/s");
    push_stats(&mut report, "kernel_on_demand", "managed", sz, &s);
    let on_demand = t;
    drop(buf);

    progress.step("prefetch_then_kernel");
    let buf = fresh(rt, elements)?;
    let before = rt.managed_statistics()?;
    let tp = timed(&stream, || buf.prefetch(Location::Device(0), &stream))?;
    let mid = rt.managed_statistics()?;
    let tk = timed(&stream, || stream.fill(&buf, 7))?;
    let after = rt.managed_statistics()?;
    report.push("prefetch_then_kernel", "prefetch", sz, "prefetch_time", ms(tp), "ms");
    report.push("prefetch_then_kernel", "prefetch", sz, "bandwidth", gbps(size, tp), "GB/s");
    push_stats(&mut report, "prefetch_then_kernel", "prefetch", sz, &mid.since(&before));
    report.push("prefetch_then_kernel", "kernel", sz, "kernel_time", ms(tk), "ms");
    report.push("prefetch_then_kernel", "kernel", sz, "bandwidth", gbps(size, tk), "GB/s");
    push_stats(&mut report, "prefetch_then_kernel", "kernel", sz, &after.since(&mid));
    report.push(
        "prefetch_then_kernel",
        "kernel",
        sz,
        "on_demand_vs_prefetched_kernel",
        ms(on_demand) / ms(tk),
        "x",
    );
    report.push(
        "prefetch_then_kernel",
        "prefetch+kernel",
        sz,
        "on_demand_vs_prefetch_plus_kernel",
        ms(on_demand) / ms(tp + tk),
        "x",
    );
    drop(buf);

    progress.step("read_mostly_two_places");
    let scratch = device.alloc::<u32>(elements)?;
    for (path, advice) in [("no_advice", None), ("read_mostly", Some(Advice::SetReadMostly))] {
        let mut buf = fresh(rt, elements)?;
        if let Some(a) = advice {
            buf.advise(a, Location::Device(0))?;
        }
        let before = rt.managed_statistics()?;
        let start = Instant::now();
        let mut sum = 0u64;
        for _ in 0..scale.rounds {
            stream.copy_device_to_device(&buf, &scratch)?;
            stream.synchronize()?;
            sum += buf.as_slice()?.iter().step_by(1024).map(|&v| v as u64).sum::<u64>();
        }
        let t = start.elapsed();
        std::hint::black_box(sum);
        let s = rt.managed_statistics()?.since(&before);
        let per_round = t / scale.rounds as u32;
        report.push("read_mostly_two_places", path, sz, "time_per_round", ms(per_round), "ms");
        push_stats(&mut report, "read_mostly_two_places", path, sz, &s);
    }
    drop(scratch);

    progress.step("prefetch_vs_page_locked");
    let buf = fresh(rt, elements)?;
    let mut best_prefetch = Duration::MAX;
    for _ in 0..3 {
        timed(&stream, || buf.prefetch(Location::Host, &stream))?;
        best_prefetch = best_prefetch.min(timed(&stream, || buf.prefetch(Location::Device(0), &stream))?);
    }
    drop(buf);
    let pinned = PinnedBuffer::<u32>::new(rt, elements, 0)?;
    let dst = device.alloc::<u32>(elements)?;
    let mut best_copy = Duration::MAX;
    for _ in 0..3 {
        best_copy = best_copy.min(timed(&stream, || stream.copy_to_device_from_pinned(&pinned, &dst))?);
    }
    progress.finish();
    let (p, c) = (gbps(size, best_prefetch), gbps(size, best_copy));
    report.push("prefetch_vs_page_locked", "prefetch", sz, "bandwidth", p, "GB/s");
    report.push("prefetch_vs_page_locked", "page_locked_copy", sz, "bandwidth", c, "GB/s");
    report.push("prefetch_vs_page_locked", "prefetch", sz, "vs_page_locked", p / c, "x");
    Ok(report)
}
