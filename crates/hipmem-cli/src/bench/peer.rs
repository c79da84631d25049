//! `hipmem bench peer`: copies between two devices, hipmem's
//! `hipMemcpyPeer` against the driver's own `cuMemcpyPeer`, both directions
//! in one run; and seed 001's point about peer access, measured: once a
//! peer may access a device's memory (`hipDeviceEnablePeerAccess`), every
//! `hipMalloc` on it also maps into the peer.
//!
//! Paths (the `allocator` column) of the `peer_copy` cases:
//! - `hipmem`: `Runtime::memcpy_peer`, what `hipMemcpyPeer` does (range
//!   checks against the allocation registry, `cuMemcpyPeerAsync` on the
//!   null stream, then a synchronization);
//! - `driver`: the backend's peer copy with no hipmem bookkeeping
//!   (`cuMemcpyPeer`, then a synchronization of the destination's context:
//!   between two devices' memory `cuMemcpyPeer` returns before the copy is
//!   done, so timed alone it measured the call, not the copy).
//!
//! The two paths take turns in a shuffled order each round, so noise falls
//! on both alike. Cases: `peer_copy_0to1`, `peer_copy_1to0` (peer access
//! enabled both ways; metrics `bandwidth` GB/s and `ratio_vs_driver`),
//! `peer_copy_0to1_no_access` (the copy the driver stages when peer access
//! is off), and `malloc_free_pair` on device 0 with device 1's access to it
//! off and on (median µs per 2 MiB hipMalloc + hipFree; `ratio_vs_access_off`).
//!
//! On the CPU emulation (`HIPMEM_HOST_DEVICES=2`) the bench runs as well,
//! but its absolute numbers are memcpy's: they only mean something on GPUs.

use std::time::Instant;

use hipmem::{DevicePtr, Error, Result, Runtime};

use super::{Progress, Report, Rng, median_p99, ns};

/// How much work to do.
#[derive(Copy, Clone, Debug)]
pub struct Scale {
    sizes: &'static [u64],
    bytes_per_case: u64,
    max_reps: usize,
    alloc_reps: usize,
}

impl Scale {
    /// Full runs (the GPU machine): 64 KiB to 1 GiB.
    pub fn full() -> Scale {
        Scale {
            sizes: &[64 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30],
            bytes_per_case: 8 << 30,
            max_reps: 500,
            alloc_reps: 300,
        }
    }

    /// A quick smoke run: up to 16 MiB.
    pub fn quick() -> Scale {
        Scale {
            sizes: &[64 << 10, 1 << 20, 16 << 20],
            bytes_per_case: 128 << 20,
            max_reps: 20,
            alloc_reps: 30,
        }
    }
}

/// Runs the bench between devices 0 and 1.
pub fn run(rt: &Runtime, scale: Scale) -> Result<Report> {
    if rt.device_count() < 2 {
        return Err(Error::NotSupported(format!(
            "bench peer needs 2 devices; the {} backend has {} (on the CPU emulation set HIPMEM_HOST_DEVICES=2)",
            rt.backend_kind(),
            rt.device_count()
        )));
    }
    if !rt.can_access_peer(0, 1)? || !rt.can_access_peer(1, 0)? {
        return Err(Error::NotSupported("devices 0 and 1 cannot access each other directly".into()));
    }
    let mut report = Report::new("peer", rt, 0)?;
    let max = scale.sizes.iter().copied().max().unwrap_or(0);
    let bufs = [rt.malloc(0, max)?, rt.malloc(1, max)?];
    rt.memset(bufs[0], hipmem::FillValue::U8(1), max)?;
    rt.memset(bufs[1], hipmem::FillValue::U8(2), max)?;
    let mut progress = Progress::new(scale.sizes.len() * 2 + 2);
    let mut rng = Rng::new(0x9ee2);
    let result = (|| {
        // Peer access both ways for the main cases (restored at the end).
        let enabled = [enable(rt, 0, 1)?, enable(rt, 1, 0)?];
        for (case, from, to) in [("peer_copy_0to1", 0, 1), ("peer_copy_1to0", 1, 0)] {
            for &size in scale.sizes {
                progress.step(&format!("{case} {}", crate::report::bytes(size)));
                copies(rt, &mut report, &mut rng, case, (bufs[to], to), (bufs[from], from), size, scale)?;
            }
        }
        if enabled[1] {
            rt.disable_peer_access(1, 0)?;
        }
        if enabled[0] {
            rt.disable_peer_access(0, 1)?;
        }
        // The copy the driver stages when peer access is off.
        let staged: Vec<u64> =
            scale.sizes.iter().copied().filter(|&s| s == 16 << 20 || s == 256 << 20).collect();
        for size in staged {
            progress.step(&format!("peer_copy_0to1_no_access {}", crate::report::bytes(size)));
            copies(
                rt,
                &mut report,
                &mut rng,
                "peer_copy_0to1_no_access",
                (bufs[1], 1),
                (bufs[0], 0),
                size,
                scale,
            )?;
        }
        progress.step("malloc_free_pair, device 1's access to device 0 off and on");
        malloc_pairs(rt, &mut report, scale)
    })();
    progress.finish();
    for b in bufs {
        rt.free(b)?;
    }
    result?;
    Ok(report)
}

/// Enables access from `device` to `peer`; false if it was on already.
fn enable(rt: &Runtime, device: usize, peer: usize) -> Result<bool> {
    match rt.enable_peer_access(device, peer) {
        Ok(()) => Ok(true),
        Err(Error::PeerAccessAlreadyEnabled(_)) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Both paths at one size, taking turns in a shuffled order each round.
#[allow(clippy::too_many_arguments)]
fn copies(
    rt: &Runtime,
    report: &mut Report,
    rng: &mut Rng,
    case: &str,
    (dst, dst_device): (DevicePtr, usize),
    (src, src_device): (DevicePtr, usize),
    size: u64,
    scale: Scale,
) -> Result<()> {
    let peer = rt.backend().peer_access().ok_or_else(|| {
        Error::NotSupported(format!("the {} backend has no peer access", rt.backend_kind()))
    })?;
    let reps = (scale.bytes_per_case / size).clamp(3, scale.max_reps as u64) as usize;
    // One of each first: the driver sets up the peer mappings on first use.
    rt.memcpy_peer(dst, dst_device, src, src_device, size)?;
    peer.copy_peer(dst, dst_device, src, src_device, size)?;
    let mut samples = [Vec::with_capacity(reps), Vec::with_capacity(reps)];
    let mut order = [0usize, 1];
    for _ in 0..reps {
        rng.shuffle(&mut order);
        for &path in &order {
            let t = Instant::now();
            if path == 0 {
                rt.memcpy_peer(dst, dst_device, src, src_device, size)?;
            } else {
                peer.copy_peer(dst, dst_device, src, src_device, size)?;
            }
            samples[path].push(ns(t.elapsed()));
        }
    }
    let gbps = |s: &mut Vec<f64>| {
        let (median, _) = median_p99(s);
        size as f64 / median
    };
    let hipmem = gbps(&mut samples[0]);
    let driver = gbps(&mut samples[1]);
    report.push(case, "hipmem", Some(size), "bandwidth", hipmem, "GB/s");
    report.push(case, "driver", Some(size), "bandwidth", driver, "GB/s");
    report.push(case, "hipmem", Some(size), "ratio_vs_driver", hipmem / driver, "x");
    Ok(())
}

/// 2 MiB hipMalloc + hipFree pairs on device 0, with device 1's access to
/// device 0 off, then on (the driver then maps each allocation into device
/// 1 as well), in alternating blocks.
fn malloc_pairs(rt: &Runtime, report: &mut Report, scale: Scale) -> Result<()> {
    const SIZE: u64 = 2 << 20;
    let mut off = Vec::with_capacity(scale.alloc_reps);
    let mut on = Vec::with_capacity(scale.alloc_reps);
    let was_on = rt.peer_access_enabled(1, 0)?;
    let pair = |samples: &mut Vec<f64>| -> Result<()> {
        let t = Instant::now();
        let p = rt.malloc(0, SIZE)?;
        rt.free(p)?;
        samples.push(ns(t.elapsed()) / 1e3);
        Ok(())
    };
    let blocks = 10usize;
    let per_block = (scale.alloc_reps / blocks).max(1);
    for _ in 0..blocks {
        if rt.peer_access_enabled(1, 0)? {
            rt.disable_peer_access(1, 0)?;
        }
        for _ in 0..per_block {
            pair(&mut off)?;
        }
        rt.enable_peer_access(1, 0)?;
        for _ in 0..per_block {
            pair(&mut on)?;
        }
    }
    if !was_on {
        rt.disable_peer_access(1, 0)?;
    }
    let (off_median, off_p99) = median_p99(&mut off);
    let (on_median, on_p99) = median_p99(&mut on);
    let case = "malloc_free_pair";
    report.push(case, "peer-access-off", Some(SIZE), "median", off_median, "us");
    report.push(case, "peer-access-off", Some(SIZE), "p99", off_p99, "us");
    report.push(case, "peer-access-on", Some(SIZE), "median", on_median, "us");
    report.push(case, "peer-access-on", Some(SIZE), "p99", on_p99, "us");
    report.push(case, "peer-access-on", Some(SIZE), "ratio_vs_access_off", on_median / off_median, "x");
    Ok(())
}
