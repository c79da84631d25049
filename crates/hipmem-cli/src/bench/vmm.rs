//! `hipmem bench vmm`: growing a buffer in steps, with virtual memory
//! (`GrowableBuffer`: map new chunks at the end, no copy) and with
//! allocate-copy-free (`DeviceBuffer`: a larger buffer, a device-to-device
//! copy of the old contents, then free the old one).
//!
//! The buffer grows in equal steps to 16 GiB on cuda (2 GiB on the CPU
//! emulation), or half the device's free memory where that is less. Every
//! step also writes its new tail (a memset on the stream), so both paths
//! touch the same bytes; the copy path's extra work is the copy.
//!
//! Reported per path: total time, time per step, peak live bytes (the sum of
//! live allocations, tracked), peak device memory in use (the drop in the
//! device's free memory from before the run), both as a ratio to the final
//! size, and the number of chunks mapped (growable paths).
//!
//! Paths: `growable-exact` maps exactly what each step needs (rounded to the
//! granularity); `growable` is the default policy (geometric chunks, at most
//! 1/8 over what is mapped); `copy` is allocate-copy-free.

use std::time::Instant;

use hipmem::{
    BackendKind, DeviceBuffer, DevicePtr, DeviceSlice, FillValue, GrowableBuffer, PhysicalAllocation, Result,
    Runtime, Stream,
};
use hipmem::{MemPool, PoolBacking, PoolProps};

use super::{Progress, Report};

/// How far to grow.
#[derive(Copy, Clone, Debug)]
pub struct Scale {
    /// Final size on cuda (capped by half the free memory).
    gpu_bytes: u64,
    /// Final size on the CPU emulation.
    host_bytes: u64,
    /// Number of equal steps.
    steps: u64,
    /// Operation counts of the random_allocations runs.
    random_ops: [usize; 2],
}

impl Scale {
    /// Full runs (the GPU machine).
    pub fn full() -> Scale {
        Scale { gpu_bytes: 16 << 30, host_bytes: 2 << 30, steps: 32, random_ops: [10_000, 100_000] }
    }

    /// A quick smoke run.
    pub fn quick() -> Scale {
        Scale { gpu_bytes: 512 << 20, host_bytes: 256 << 20, steps: 8, random_ops: [500, 2_000] }
    }
}

/// What one path measured.
struct Outcome {
    total_ms: f64,
    peak_live: u64,
    peak_device: u64,
    chunks: Option<usize>,
}

/// Peak tracking of the device's used memory (free-memory deltas).
struct Usage<'a> {
    rt: &'a Runtime,
    device: usize,
    baseline_free: u64,
    peak: u64,
}

impl Usage<'_> {
    fn sample(&mut self) -> Result<()> {
        let free = self.rt.mem_get_info(self.device)?.free;
        self.peak = self.peak.max(self.baseline_free.saturating_sub(free));
        Ok(())
    }
}

/// Runs the bench on device 0.
pub fn run(rt: &Runtime, scale: Scale) -> Result<Report> {
    let device = rt.device(0)?;
    let mut report = Report::new("vmm", rt, 0)?;
    let g = PhysicalAllocation::granularity(&device)?;
    let free = rt.mem_get_info(0)?.free;
    let cap = if rt.backend_kind() != BackendKind::Host { scale.gpu_bytes } else { scale.host_bytes };
    let target = cap.min(free / 2);
    let step = (target / scale.steps / g * g).max(g);
    let final_size = step * scale.steps;
    eprintln!(
        "note: growing to {} in {} steps of {} (granularity {})",
        crate::report::bytes(final_size),
        scale.steps,
        crate::report::bytes(step),
        crate::report::bytes(g)
    );
    let stream = device.create_stream()?;
    // Warm the kernels and the driver so the first path pays no setup.
    {
        let warm = device.alloc::<u8>(4096)?;
        stream.memset(&warm, 0)?;
        stream.synchronize()?;
    }
    let paths = ["growable-exact", "growable", "copy"];
    let mut progress = Progress::new(paths.len());
    let mut outcomes = Vec::new();
    for path in paths {
        progress.step(path);
        device.synchronize()?;
        let outcome = match path {
            "copy" => grow_by_copy(rt, &stream, step, scale.steps)?,
            _ => grow_in_place(rt, &stream, step, scale.steps, final_size, path == "growable-exact")?,
        };
        outcomes.push((path, outcome));
    }
    progress.finish();
    let size = Some(final_size);
    let steps = scale.steps as f64;
    for (path, o) in &outcomes {
        report.push("grow_in_steps", path, size, "total_time", o.total_ms, "ms");
        report.push("grow_in_steps", path, size, "per_step", o.total_ms * 1e3 / steps, "us");
        report.push("grow_in_steps", path, size, "peak_live_bytes", o.peak_live as f64, "B");
        report.push(
            "grow_in_steps",
            path,
            size,
            "peak_live_vs_final",
            o.peak_live as f64 / final_size as f64,
            "x",
        );
        report.push("grow_in_steps", path, size, "peak_device_bytes", o.peak_device as f64, "B");
        report.push(
            "grow_in_steps",
            path,
            size,
            "peak_device_vs_final",
            o.peak_device as f64 / final_size as f64,
            "x",
        );
        if let Some(c) = o.chunks {
            report.push("grow_in_steps", path, size, "chunks_mapped", c as f64, "count");
        }
    }
    if let (Some((_, fast)), Some((_, copy))) = (outcomes.first(), outcomes.last()) {
        report.push(
            "grow_in_steps",
            "copy",
            size,
            "time_vs_growable_exact",
            copy.total_ms / fast.total_ms,
            "x",
        );
    }
    // What a pool on virtual memory pays per granule: creating one, mapping
    // it (with access), mapping it at a second address, unmapping.
    let ops = granule_ops(rt, g, 256)?;
    for (op, us) in ops {
        report.push("granule_ops", op, Some(g), "per_granule", us, "us");
    }
    // The same per MiB when one physical allocation holds many granules
    // (created, mapped and given access in one call each).
    for chunk in [1u64, 4, 16, 32, 64, 256] {
        for (op, us) in chunk_ops(rt, g, chunk * g, 256 * g, chunk * g)? {
            report.push("chunk_ops", op, Some(chunk * g), "per_mib", us, "us");
        }
    }
    // Each step alone, and moving a whole allocation to other addresses
    // (unmap, map, access) against giving it back and creating as much
    // again (unmap, release, create, map, access).
    for chunk in [32u64, 128, 512] {
        for (op, us) in chunk_steps(rt, g, chunk * g, 512 * g)? {
            report.push("chunk_steps", op, Some(chunk * g), "per_mib", us, "us");
        }
    }
    // A large physical allocation mapped in 4-granule slices (one map and
    // one access call per slice), as a pool's units would be.
    for chunk in [64u64, 256] {
        for (op, us) in chunk_ops(rt, g, chunk * g, 256 * g, 4 * g)? {
            report.push("chunk_ops_sliced", op, Some(chunk * g), "per_mib", us, "us");
        }
    }
    // RMM's random_allocations on hipmem's pool, without and with
    // virtual-memory backing: fragmentation = peak reserved / peak requested.
    for ops in scale.random_ops {
        for (name, backing) in
            [("hipmem-pool-segments", PoolBacking::Segments), ("hipmem-pool-vmm", PoolBacking::VirtualMemory)]
        {
            let props = PoolProps { device: 0, handle_types: 0, max_size: 0 };
            let pool = MemPool::create_with_backing(rt, props, backing)?;
            pool.set_release_threshold(u64::MAX);
            let (time_ms, frag) = super::alloc::pool_random_allocations(rt, &pool, ops, &stream)?;
            let case = format!("random_allocations_{ops}");
            report.push(&case, name, None, "fragmentation", frag, "x");
            report.push(&case, name, None, "time_observed", time_ms, "ms");
            if pool.backing() != backing {
                eprintln!("note: {name}: this backend has no virtual memory; the pool used segments");
            }
            pool.destroy()?;
        }
    }
    Ok(report)
}

fn grow_in_place(
    rt: &Runtime,
    stream: &Stream,
    step: u64,
    steps: u64,
    final_size: u64,
    exact: bool,
) -> Result<Outcome> {
    let device = rt.device(stream.device())?;
    let mut usage =
        Usage { rt, device: stream.device(), baseline_free: rt.mem_get_info(stream.device())?.free, peak: 0 };
    let start = Instant::now();
    // Reserve room for the geometric policy's overshoot as well.
    let mut buf = GrowableBuffer::<u8>::with_reservation(&device, final_size + final_size / 4)?;
    if exact {
        buf.set_max_overshoot(0.0);
    }
    let mut peak_live = 0;
    for i in 1..=steps {
        let old = buf.len() as u64;
        buf.resize((i * step) as usize)?;
        rt.memset_async(DevicePtr(buf.base().0 + old), FillValue::U8(i as u8), step, stream.raw())?;
        stream.synchronize()?;
        peak_live = peak_live.max(buf.mapped_bytes());
        usage.sample()?;
    }
    let total_ms = start.elapsed().as_secs_f64() * 1e3;
    check_tail(&buf, steps)?;
    Ok(Outcome { total_ms, peak_live, peak_device: usage.peak, chunks: Some(buf.chunk_count()) })
}

fn grow_by_copy(rt: &Runtime, stream: &Stream, step: u64, steps: u64) -> Result<Outcome> {
    let device = rt.device(stream.device())?;
    let mut usage =
        Usage { rt, device: stream.device(), baseline_free: rt.mem_get_info(stream.device())?.free, peak: 0 };
    let start = Instant::now();
    let mut current: Option<DeviceBuffer<u8>> = None;
    let mut peak_live = 0;
    for i in 1..=steps {
        let size = i * step;
        let next = device.alloc::<u8>(size as usize)?;
        let old = match &current {
            Some(old) => {
                rt.copy_device_to_device_async(
                    next.device_ptr(),
                    old.device_ptr(),
                    old.size_bytes(),
                    stream.raw(),
                )?;
                old.size_bytes()
            }
            None => 0,
        };
        rt.memset_async(DevicePtr(next.device_ptr().0 + old), FillValue::U8(i as u8), step, stream.raw())?;
        stream.synchronize()?;
        peak_live = peak_live.max(old + size);
        usage.sample()?;
        current = Some(next); // drops (hipFree) the old buffer
    }
    let total_ms = start.elapsed().as_secs_f64() * 1e3;
    if let Some(buf) = &current {
        let mut last = [0u8; 1];
        rt.copy_device_to_host(&mut last, DevicePtr(buf.device_ptr().0 + buf.size_bytes() - 1))?;
        if last[0] != steps as u8 {
            return Err(hipmem::Error::Unknown(format!(
                "copy path: last byte {} != {}",
                last[0], steps as u8
            )));
        }
    }
    Ok(Outcome { total_ms, peak_live, peak_device: usage.peak, chunks: None })
}

fn check_tail(buf: &GrowableBuffer<u8>, steps: u64) -> Result<()> {
    let mut first_last = [0u8; 2];
    buf.runtime().copy_device_to_host(&mut first_last[..1], buf.base())?;
    buf.runtime()
        .copy_device_to_host(&mut first_last[1..], DevicePtr(buf.base().0 + buf.len() as u64 - 1))?;
    if first_last != [1, steps as u8] {
        return Err(hipmem::Error::Unknown(format!("growable buffer lost data: {first_last:?}")));
    }
    Ok(())
}

/// Times the backend's virtual-memory calls on `n` single-granule physical
/// allocations: create, map with access, a second mapping (an alias),
/// unmap of the alias, unmap and release. Returns (operation, µs per granule).
fn granule_ops(rt: &Runtime, g: u64, n: u64) -> Result<Vec<(&'static str, f64)>> {
    let Some(vm) = rt.backend().virtual_memory() else { return Ok(Vec::new()) };
    let per = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / n as f64;
    let a = vm.address_reserve(2 * n * g, g, DevicePtr::NULL)?;
    let b = a.0 + n * g;
    let t = Instant::now();
    let handles = (0..n).map(|_| vm.mem_create(0, g, 0)).collect::<Result<Vec<u64>>>()?;
    let create = per(t);
    let t = Instant::now();
    for (i, &h) in handles.iter().enumerate() {
        vm.mem_map(DevicePtr(a.0 + i as u64 * g), g, 0, h)?;
        vm.mem_set_access(DevicePtr(a.0 + i as u64 * g), g, 0, 3)?;
    }
    let map = per(t);
    let t = Instant::now();
    for (i, &h) in handles.iter().enumerate() {
        vm.mem_map(DevicePtr(b + i as u64 * g), g, 0, h)?;
        vm.mem_set_access(DevicePtr(b + i as u64 * g), g, 0, 3)?;
    }
    let alias = per(t);
    let t = Instant::now();
    for i in 0..n {
        vm.mem_unmap(DevicePtr(b + i * g), g)?;
    }
    let unmap = per(t);
    // The parts of a mapping: the map alone, then access granule by granule,
    // then access for the whole run in one call.
    let t = Instant::now();
    for (i, &h) in handles.iter().enumerate() {
        vm.mem_map(DevicePtr(b + i as u64 * g), g, 0, h)?;
    }
    let map_only = per(t);
    let t = Instant::now();
    for i in 0..n {
        vm.mem_set_access(DevicePtr(b + i * g), g, 0, 3)?;
    }
    let access = per(t);
    for i in 0..n {
        vm.mem_unmap(DevicePtr(b + i * g), g)?;
    }
    for (i, &h) in handles.iter().enumerate() {
        vm.mem_map(DevicePtr(b + i as u64 * g), g, 0, h)?;
    }
    let t = Instant::now();
    vm.mem_set_access(DevicePtr(b), n * g, 0, 3)?;
    let access_run = per(t);
    for i in 0..n {
        vm.mem_unmap(DevicePtr(b + i * g), g)?;
    }
    let t = Instant::now();
    for (i, &h) in handles.iter().enumerate() {
        vm.mem_unmap(DevicePtr(a.0 + i as u64 * g), g)?;
        vm.mem_release(h)?;
    }
    let release = per(t);
    vm.address_free(a, 2 * n * g)?;
    Ok(vec![
        ("create", create),
        ("map_with_access", map),
        ("map_alias_with_access", alias),
        ("map_only", map_only),
        ("set_access_per_granule", access),
        ("set_access_one_call_per_run", access_run),
        ("unmap", unmap),
        ("unmap_and_release", release),
    ])
}

/// `total` bytes in physical allocations of `chunk` bytes, each step timed
/// alone: create, map, access, then moving each allocation to a second
/// range (unmap, map, access there), then unmap and release. Returns
/// (step, µs per MiB).
fn chunk_steps(rt: &Runtime, g: u64, chunk: u64, total: u64) -> Result<Vec<(&'static str, f64)>> {
    let Some(vm) = rt.backend().virtual_memory() else { return Ok(Vec::new()) };
    let n = (total / chunk).max(1);
    let per_mib = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / ((n * chunk) as f64 / (1 << 20) as f64);
    let a = vm.address_reserve(n * chunk, g, DevicePtr::NULL)?;
    let b = vm.address_reserve(n * chunk, g, DevicePtr::NULL)?;
    let at = |base: DevicePtr, i: u64| DevicePtr(base.0 + i * chunk);
    let t = Instant::now();
    let handles = (0..n).map(|_| vm.mem_create(0, chunk, 0)).collect::<Result<Vec<u64>>>()?;
    let create = per_mib(t);
    let t = Instant::now();
    for (i, &h) in (0..).zip(&handles) {
        vm.mem_map(at(a, i), chunk, 0, h)?;
    }
    let map = per_mib(t);
    let t = Instant::now();
    for i in 0..n {
        vm.mem_set_access(at(a, i), chunk, 0, 3)?;
    }
    let access = per_mib(t);
    let t = Instant::now();
    for (i, &h) in (0..).zip(&handles) {
        vm.mem_unmap(at(a, i), chunk)?;
        vm.mem_map(at(b, i), chunk, 0, h)?;
        vm.mem_set_access(at(b, i), chunk, 0, 3)?;
    }
    let moved = per_mib(t);
    let t = Instant::now();
    for i in 0..n {
        vm.mem_unmap(at(b, i), chunk)?;
    }
    let unmap = per_mib(t);
    let t = Instant::now();
    for &h in &handles {
        vm.mem_release(h)?;
    }
    let release = per_mib(t);
    vm.address_free(a, n * chunk)?;
    vm.address_free(b, n * chunk)?;
    Ok(vec![
        ("create", create),
        ("map", map),
        ("access", access),
        ("move", moved),
        ("unmap", unmap),
        ("release", release),
    ])
}

/// Creates, maps with access, then unmaps and releases `total` bytes in
/// physical allocations of `chunk` bytes each, each mapped in slices of
/// `slice` bytes: the cost per MiB of each half.
fn chunk_ops(rt: &Runtime, g: u64, chunk: u64, total: u64, slice: u64) -> Result<Vec<(&'static str, f64)>> {
    let Some(vm) = rt.backend().virtual_memory() else { return Ok(Vec::new()) };
    let n = (total / chunk).max(1);
    let per_mib = |t: Instant| t.elapsed().as_secs_f64() * 1e6 / ((n * chunk) as f64 / (1 << 20) as f64);
    let a = vm.address_reserve(n * chunk, g, DevicePtr::NULL)?;
    let t = Instant::now();
    let mut handles = Vec::new();
    for i in 0..n {
        // Mapped whole: one driver allocation (cuda and hip cut a small
        // allocation per granule otherwise, to map it at any offset).
        let h = if slice == chunk { vm.mem_create_whole(0, chunk, 0)? } else { vm.mem_create(0, chunk, 0)? };
        handles.push(h);
        for off in (0..chunk).step_by(slice as usize) {
            let at = DevicePtr(a.0 + i * chunk + off);
            vm.mem_map(at, slice, off, h)?;
            vm.mem_set_access(at, slice, 0, 3)?;
        }
    }
    let make = per_mib(t);
    let t = Instant::now();
    for (i, &h) in handles.iter().enumerate() {
        for off in (0..chunk).step_by(slice as usize) {
            vm.mem_unmap(DevicePtr(a.0 + i as u64 * chunk + off), slice)?;
        }
        vm.mem_release(h)?;
    }
    let release = per_mib(t);
    vm.address_free(a, n * chunk)?;
    Ok(vec![("create_map_access", make), ("unmap_release", release)])
}
