//! `hipmem tour`: the seeds' examples, end to end, on the chosen backend.
//!
//! Each section follows one listing of the seeds step by step, prints the HIP
//! call it stands for, what it did and how long it took, and verifies the
//! result. A failed verification is an error (non-zero exit).

use std::time::{Duration, Instant};

use hipmem::vmm::{GranularityOption, MemLocation};
use hipmem::{
    AccessDesc, AccessFlags, AllocationProp, Device, DevicePtr, DeviceSlice, Error, PinnedBuffer, Result,
    Runtime,
};

use crate::report::{bytes, duration};

/// Prints steps with their times.
pub struct Tour {
    section: usize,
}

impl Tour {
    fn section(&mut self, title: &str, source: &str) {
        self.section += 1;
        println!();
        println!("== {}. {title}  ({source})", self.section);
    }

    /// Runs `f`, printing `call`, the detail it returns and its wall time.
    fn step<T>(&self, call: &str, f: impl FnOnce() -> Result<(T, String)>) -> Result<T> {
        let start = Instant::now();
        let (value, detail) = f().map_err(|e| e.context(call))?;
        let took = start.elapsed();
        println!("  {call:<64} {detail:<34} {:>10}", duration(took));
        Ok(value)
    }
}

/// Runs every section of the tour.
pub fn run(rt: &Runtime, elements: usize) -> Result<()> {
    let device = rt.device(0)?;
    let p = device.properties();
    println!("hipmem tour");
    println!("backend: {}", rt.backend().description());
    println!("device 0: {} ({} of memory)", p.name, bytes(p.total_memory));
    let mut tour = Tour { section: 0 };
    // Load the built-in kernels (the cuda backend JIT-compiles its PTX on
    // first use) so the timed steps measure the work, not the loading.
    let warm = device.alloc::<i32>(1)?;
    device.null_stream().iota(&warm, 1)?;
    device.synchronize()?;
    drop(warm);
    explicit_memory(&mut tour, &device, elements)?;
    pinned_memory(&mut tour, rt, &device, elements)?;
    stream_ordered_allocation(&mut tour, &device, elements)?;
    virtual_memory(&mut tour, &device, elements)?;
    managed_memory(&mut tour, rt, &device, elements)?;
    interprocess(&mut tour, &device, elements)?;
    println!();
    println!("tour complete: every result verified");
    Ok(())
}

/// Seed 000, "Explicit memory management": malloc, hipMalloc, hipMemcpy in,
/// kernel, hipMemcpy out, hipFree.
fn explicit_memory(tour: &mut Tour, device: &Device, n: usize) -> Result<()> {
    tour.section("Explicit memory management", "seed 000, section 1");
    let size = n * std::mem::size_of::<i32>();
    let mut a = tour.step("A = (int *) malloc(N*sizeof(int))", || {
        let a: Vec<i32> = (0..n as i32).map(|i| -i).collect();
        Ok((a, format!("N = {n} ({})", bytes(size as u64))))
    })?;
    let mut d_a = tour.step("hipMalloc((void**)&d_A, N*sizeof(int))", || {
        let d = device.alloc::<i32>(n)?;
        let detail = format!("d_A = {}", d.device_ptr());
        Ok((d, detail))
    })?;
    tour.step("hipMemcpy(d_A, A, ..., hipMemcpyHostToDevice)", || {
        let t = Instant::now();
        d_a.copy_from_host(&a)?;
        Ok(((), rate(size, t.elapsed())))
    })?;
    let stream = device.null_stream();
    tour.step("kernel<<<...>>>(d_A)  // d_A[i] = i * 2", || {
        let start = device.create_event()?;
        let end = device.create_event()?;
        start.record(&stream)?;
        stream.iota(&d_a, 2)?;
        end.record(&stream)?;
        end.synchronize()?;
        let ms = start.elapsed_ms(&end)?;
        Ok(((), format!("device time {}", duration(Duration::from_secs_f64(ms as f64 / 1e3)))))
    })?;
    tour.step("hipMemcpy(A, d_A, ..., hipMemcpyDeviceToHost)", || {
        let t = Instant::now();
        d_a.copy_to_host(&mut a)?;
        Ok(((), rate(size, t.elapsed())))
    })?;
    tour.step("// result is in A", || {
        match a.iter().enumerate().find(|&(i, &v)| v != (i as i32).wrapping_mul(2)) {
            None => Ok(((), format!("A[i] == 2*i for all {n}"))),
            Some((i, v)) => Err(Error::Unknown(format!("A[{i}] = {v}, expected {}", 2 * i))),
        }
    })?;
    tour.step("hipFree(d_A); free(A)", || {
        let ptr = d_a.device_ptr();
        drop(d_a);
        drop(a);
        Ok(((), format!("freed {ptr}")))
    })?;
    Ok(())
}

/// Seed 000 section 2, "Efficient memory transfers with pinned host memory":
/// hipHostMalloc, an asynchronous copy that overlaps host work, pageable
/// against page-locked bandwidth, hipHostFree.
fn pinned_memory(tour: &mut Tour, rt: &Runtime, device: &Device, n: usize) -> Result<()> {
    tour.section("Efficient memory transfers with pinned host memory", "seed 000, section 2");
    let size = n * std::mem::size_of::<i32>();
    let mut h_a = tour.step("hipHostMalloc((void**)&h_A, N*sizeof(int))", || {
        let b = PinnedBuffer::<i32>::new(rt, n, 0)?;
        let detail = if b.is_page_locked() {
            format!("h_A = {:#x}, page-locked", b.host_ptr())
        } else {
            format!("h_A = {:#x}, not locked (RLIMIT_MEMLOCK)", b.host_ptr())
        };
        Ok((b, detail))
    })?;
    tour.step("for (i...) h_A[i] = i", || {
        for (i, x) in h_a.as_mut_slice()?.iter_mut().enumerate() {
            *x = i as i32;
        }
        Ok(((), format!("{} written", bytes(size as u64))))
    })?;
    let d_a = device.alloc::<i32>(n)?;
    let flag = device.alloc_zeroed::<u32>(1)?;
    let stream = device.create_stream()?;
    let delay = Duration::from_millis(100);
    let started = Instant::now();
    tour.step("kernel<<<..., stream>>>(); hipMemcpyAsync(d_A, h_A, ..., stream)", || {
        stream.delay(delay, &flag, 1)?;
        let t = Instant::now();
        stream.copy_to_device_from_pinned(&h_a, &d_a)?;
        let call = t.elapsed();
        let pending = !h_a.is_idle()?;
        let detail = if pending {
            format!("returned in {}, copy still queued", duration(call))
        } else {
            format!("returned in {} (already done)", duration(call))
        };
        Ok(((), detail))
    })?;
    tour.step("// host work while the copy is in flight", || {
        let sum: i64 = (0..n as i64).map(|i| i * 3 % 7).sum();
        let state = if stream.query()? { "copy finished" } else { "copy still pending" };
        Ok(((), format!("sum {sum}; {state}")))
    })?;
    tour.step("hipStreamSynchronize(stream)", || {
        stream.synchronize()?;
        let total = started.elapsed();
        Ok(((), format!("{} in all (delay {})", duration(total), duration(delay))))
    })?;
    tour.step("// verify d_A", || {
        let v = d_a.to_vec()?;
        match v.iter().enumerate().find(|&(i, &x)| x != i as i32) {
            None => Ok(((), format!("d_A[i] == i for all {n}"))),
            Some((i, x)) => Err(Error::Unknown(format!("d_A[{i}] = {x}, expected {i}"))),
        }
    })?;
    let pageable: Vec<i32> = (0..n as i32).collect();
    let pageable_time = tour.step("hipMemcpy(d_A, A /* malloc'ed */, ...)", || {
        rt.copy_host_to_device(d_a.device_ptr(), hipmem::bytemuck::cast_slice(&pageable))?;
        let t = Instant::now();
        rt.copy_host_to_device(d_a.device_ptr(), hipmem::bytemuck::cast_slice(&pageable))?;
        let took = t.elapsed();
        Ok((took, rate(size, took)))
    })?;
    let pinned_time = tour.step("hipMemcpyAsync(d_A, h_A /* page-locked */, ...); sync", || {
        let t = Instant::now();
        stream.copy_to_device_from_pinned(&h_a, &d_a)?;
        stream.synchronize()?;
        let took = t.elapsed();
        Ok((took, rate(size, took)))
    })?;
    tour.step("// page-locked against pageable", || {
        let x = pageable_time.as_secs_f64() / pinned_time.as_secs_f64().max(1e-12);
        Ok(((), format!("{x:.2}x the pageable bandwidth")))
    })?;
    // hipmem's answer to the slow pageable copy: the same malloc'ed source,
    // staged through pooled page-locked buffers by several threads (on
    // backends with DMA; the CPU emulation takes the plain copy).
    tour.step("rt.copy_pageable_to_device(d_A, A /* malloc'ed */)  [hipmem]", || {
        let bytes = hipmem::bytemuck::cast_slice(&pageable);
        rt.copy_pageable_to_device(d_a.device_ptr(), bytes)?; // warm the staging pool
        d_a.memset(0)?; // so the check below sees this copy's bytes
        let t = Instant::now();
        rt.copy_pageable_to_device(d_a.device_ptr(), bytes)?;
        let took = t.elapsed();
        let x = pageable_time.as_secs_f64() / took.as_secs_f64().max(1e-12);
        let how =
            if rt.backend_kind() == hipmem::BackendKind::Host { " (emulation: not staged)" } else { "" };
        Ok((took, format!("{}, {x:.2}x hipMemcpy{how}", rate(size, took))))
    })?;
    tour.step("// verify d_A", || {
        let v = d_a.to_vec()?;
        match v.iter().enumerate().find(|&(i, &x)| x != i as i32) {
            None => Ok(((), format!("d_A[i] == i for all {n}"))),
            Some((i, x)) => {
                Err(Error::Unknown(format!("after the staged copy d_A[{i}] = {x}, expected {i}")))
            }
        }
    })?;
    tour.step("hipHostFree(h_A); hipFree(d_A)", || {
        let ptr = h_a.host_ptr();
        drop(h_a);
        drop(d_a);
        Ok(((), format!("freed {ptr:#x}")))
    })?;
    Ok(())
}

/// Seed 000 section 3 and seed 004: Example 1 (hipMalloc/hipFree around every
/// kernel) against Example 2 (hipMallocAsync/hipFreeAsync from the pool).
fn stream_ordered_allocation(tour: &mut Tour, device: &Device, n: usize) -> Result<()> {
    tour.section("Stream-ordered allocation: Example 1 (slow) and Example 2 (fast)", "seed 000, section 3");
    const ITERATIONS: usize = 100;
    let stream = device.create_stream()?;
    let check =
        |v: &[i32], k: i32| match v.iter().enumerate().find(|&(i, &x)| x != (i as i32).wrapping_mul(k)) {
            None => Ok(()),
            Some((i, x)) => {
                Err(Error::Unknown(format!("element {i} is {x}, expected {}", (i as i32).wrapping_mul(k))))
            }
        };
    let slow = tour.step("for 100x: hipMalloc; kernel<<<..., stream>>>; hipFree", || {
        let t = Instant::now();
        for i in 0..ITERATIONS {
            let buf = device.alloc::<i32>(n)?;
            stream.iota(&buf, i as i32)?;
            if i + 1 == ITERATIONS {
                stream.synchronize()?;
                check(&buf.to_vec()?, i as i32)?;
            }
            drop(buf); // hipFree: waits for the device
        }
        stream.synchronize()?;
        let per = t.elapsed() / ITERATIONS as u32;
        Ok((per, format!("{} per iteration", duration(per))))
    })?;
    let pool = device.mem_pool()?;
    pool.set_release_threshold(u64::MAX);
    let fast = tour.step("for 100x: hipMallocAsync; kernel<<<..., stream>>>; hipFreeAsync", || {
        let t = Instant::now();
        for i in 0..ITERATIONS {
            let buf = pool.alloc::<i32>(n, &stream)?;
            stream.iota(&buf, i as i32)?;
            if i + 1 == ITERATIONS {
                stream.synchronize()?;
                check(&buf.read_to_vec()?, i as i32)?;
            }
            drop(buf); // hipFreeAsync: back to the pool in stream order
        }
        stream.synchronize()?;
        let per = t.elapsed() / ITERATIONS as u32;
        Ok((per, format!("{} per iteration", duration(per))))
    })?;
    let stats = pool.stats();
    tour.step("hipStreamSynchronize(stream); pool statistics", || {
        Ok(((), format!("reserved {}, used {}", bytes(stats.reserved_current), bytes(stats.used_current))))
    })?;
    tour.step("Example 2 against Example 1", || {
        Ok(((), format!("{:.1}x faster", slow.as_secs_f64() / fast.as_secs_f64().max(1e-12))))
    })?;
    Ok(())
}

/// Seed 001, "Virtual memory management": granularity, hipMemCreate,
/// hipMemAddressReserve, hipMemMap, hipMemSetAccess, use, grow at the hint
/// address right after, and free.
fn virtual_memory(tour: &mut Tour, device: &Device, n: usize) -> Result<()> {
    tour.section("Virtual memory management: reserve, map, set access, grow, free", "seed 001");
    let rt = device.runtime();
    let dev = device.ordinal();
    let prop = AllocationProp::device(dev);
    let granularity = tour.step("hipMemGetAllocationGranularity(&g, &prop, Minimum)", || {
        let g = rt.allocation_granularity(&prop, GranularityOption::Minimum)?;
        Ok((g, format!("g = {}", bytes(g))))
    })?;
    let size = (n * std::mem::size_of::<i32>()) as u64;
    let padded = size.div_ceil(granularity).max(1) * granularity;
    let handle = tour.step("hipMemCreate(&allocHandle, padded_size, &prop, 0)", || {
        let h = rt.mem_create(padded, &prop, 0)?;
        Ok((h, format!("{} as handle {h:#x}", bytes(padded))))
    })?;
    let ptr = tour.step("hipMemAddressReserve(&ptr, padded_size, 0, 0, 0)", || {
        let p = rt.address_reserve(padded, 0, DevicePtr::NULL, 0)?;
        Ok((p, format!("ptr = {p}")))
    })?;
    tour.step("hipMemMap(ptr, padded_size, 0, allocHandle, 0)", || {
        rt.mem_map(ptr, padded, 0, handle, 0)?;
        let access = rt.mem_get_access(&MemLocation::device(dev), ptr)?;
        Ok(((), format!("mapped; access now {access:?}")))
    })?;
    let rw = [AccessDesc::device(dev, AccessFlags::ReadWrite)];
    tour.step("hipMemSetAccess(ptr, padded_size, &accessDesc, 1)", || {
        rt.mem_set_access(ptr, padded, &rw)?;
        Ok(((), format!("{:?}", rt.mem_get_access(&MemLocation::device(dev), ptr)?)))
    })?;
    let stream = device.create_stream()?;
    let reservation_view = RawView { rt, ptr, len: n };
    tour.step("kernel<<<...>>>(ptr)  // ptr[i] = i * 3; copy back, check", || {
        stream.iota(&reservation_view, 3)?;
        stream.synchronize()?;
        let v = reservation_view.read_to_vec()?;
        match v.iter().enumerate().find(|&(i, &x)| x != (i as i32).wrapping_mul(3)) {
            None => Ok(((), format!("ptr[i] == 3*i for all {n}"))),
            Some((i, x)) => Err(Error::Unknown(format!("ptr[{i}] = {x}, expected {}", 3 * i))),
        }
    })?;
    // Grow: a second physical allocation, reserved right after the first.
    let hint = DevicePtr(ptr.0 + padded);
    let grow = padded;
    let new_handle = tour.step("hipMemCreate(&newAllocHandle, new_size - padded_size, &prop, 0)", || {
        let h = rt.mem_create(grow, &prop, 0)?;
        Ok((h, format!("{} as handle {h:#x}", bytes(grow))))
    })?;
    let new_ptr = tour.step("hipMemAddressReserve(&new_ptr, ..., 0, ptr + padded_size, 0)", || {
        let p = rt.address_reserve(grow, 0, hint, 0)?;
        let said = if p == hint {
            "hint honoured: contiguous".to_string()
        } else {
            format!("hint NOT honoured: {p}")
        };
        Ok((p, said))
    })?;
    tour.step("hipMemMap(new_ptr, ...); hipMemSetAccess(new_ptr, ...)", || {
        rt.mem_map(new_ptr, grow, 0, new_handle, 0)?;
        rt.mem_set_access(new_ptr, grow, &[AccessDesc::device(dev, AccessFlags::ReadWrite)])?;
        Ok(((), format!("{} more at {new_ptr}", bytes(grow))))
    })?;
    tour.step("kernel<<<...>>> over the grown range; check", || {
        let (start, len) =
            if new_ptr == hint { (ptr, n + (grow / 4) as usize) } else { (new_ptr, (grow / 4) as usize) };
        let view = RawView { rt, ptr: start, len };
        stream.iota(&view, 5)?;
        stream.synchronize()?;
        let v = view.read_to_vec()?;
        match v.iter().enumerate().find(|&(i, &x)| x != (i as i32).wrapping_mul(5)) {
            None if new_ptr == hint => Ok(((), format!("one range of {} elements, no copy", len))),
            None => Ok(((), format!("new range verified alone ({len} elements)"))),
            Some((i, x)) => Err(Error::Unknown(format!("element {i} = {x}, expected {}", 5 * i))),
        }
    })?;
    tour.step("hipMemUnmap(ptr, size); hipMemRelease(handle); hipMemAddressFree(ptr, size)", || {
        rt.mem_unmap(new_ptr, grow)?;
        rt.mem_unmap(ptr, padded)?;
        rt.mem_release(new_handle)?;
        rt.mem_release(handle)?;
        rt.address_free(new_ptr, grow)?;
        rt.address_free(ptr, padded)?;
        Ok(((), "unmapped, released, freed".to_string()))
    })?;
    Ok(())
}

/// A device range as `i32` elements (for the kernels and copies).
struct RawView<'a> {
    rt: &'a Runtime,
    ptr: DevicePtr,
    len: usize,
}

impl DeviceSlice<i32> for RawView<'_> {
    fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        self.rt
    }
}

/// Seed 000, "Unified Memory management" and "Unified memory: Prefetching":
/// hipMallocManaged, a kernel, hipStreamSynchronize(0), the result used on
/// the host, hipFree; then the same with hipMemPrefetchAsync first.
fn managed_memory(tour: &mut Tour, rt: &Runtime, device: &Device, n: usize) -> Result<()> {
    tour.section("Unified memory, then prefetching", "seed 000, unified memory; seed 003");
    if !device.properties().capabilities.managed_memory {
        println!("  (device 0 has no managed memory; section skipped)");
        return Ok(());
    }
    let stats = || rt.managed_statistics().unwrap_or_default();
    let migrated = |before: &hipmem::ManagedStatistics| match stats().since(before).faults {
        Some(f) => format!("{f} page faults"),
        None => "faults not observable".to_string(),
    };
    let null = device.null_stream();
    let mut a = tour.step("hipMallocManaged((void**)&A, N*sizeof(int))", || {
        let mut a = device.alloc_managed::<i32>(n)?;
        a.as_mut_slice()?.fill(-1); // the host touches it first
        Ok((a, String::from("A usable on host and device")))
    })?;
    let before = stats();
    tour.step("kernel<<<...>>>(A)  // A[i] = i * 2, pages migrate on demand", || {
        null.iota(&a, 2)?;
        Ok(((), String::from("queued")))
    })?;
    tour.step("hipStreamSynchronize(0)", || {
        null.synchronize()?;
        Ok(((), migrated(&before)))
    })?;
    tour.step("// result is in A: use it on the host", || {
        let v = a.as_slice()?;
        match v.iter().enumerate().find(|&(i, &x)| x != (i as i32).wrapping_mul(2)) {
            None => Ok(((), format!("A[i] == 2*i for all {n}"))),
            Some((i, &x)) => Err(Error::Unknown(format!("A[{i}] = {x}, expected {}", 2 * i))),
        }
    })?;
    tour.step("hipFree(A)", || {
        drop(a);
        Ok(((), String::from("freed")))
    })?;
    a = device.alloc_managed::<i32>(n)?;
    a.as_mut_slice()?.fill(-1);
    let size = n * std::mem::size_of::<i32>();
    let stream = device.create_stream()?;
    let before = stats();
    tour.step("hipMemPrefetchAsync(A, N*sizeof(int), 0, stream)", || {
        a.prefetch(hipmem::Location::Device(device.ordinal()), &stream)?;
        stream.synchronize()?;
        Ok(((), format!("{} moved ahead", bytes(size as u64))))
    })?;
    tour.step("kernel<<<..., stream>>>(A)  // after the prefetch", || {
        stream.iota(&a, 2)?;
        stream.synchronize()?;
        Ok(((), migrated(&before)))
    })?;
    tour.step("hipMemPrefetchAsync(A, ..., hipCpuDeviceId, stream); use on host", || {
        a.prefetch(hipmem::Location::Host, &stream)?;
        stream.synchronize()?;
        let ok = a.as_slice()?.iter().enumerate().all(|(i, &x)| x == (i as i32).wrapping_mul(2));
        if !ok {
            return Err(Error::Unknown("A after the prefetched kernel is wrong".into()));
        }
        Ok(((), format!("verified; last prefetch {:?}", a.last_prefetch_location()?)))
    })?;
    drop(a);
    Ok(())
}

fn rate(bytes: usize, took: Duration) -> String {
    let gbps = bytes as f64 / took.as_secs_f64().max(1e-9) / 1e9;
    format!("{gbps:.2} GB/s")
}

/// Seed 004, "Interprocess memory handling": a shareable pool and a pointer
/// from it exported by this process, imported by a child process (this
/// program again, `hipmem tour-ipc-child`). The seed passes the handle
/// through a FIFO of mode 0666; hipmem's transport is an owner-only socket
/// whose peer is checked, with the descriptor passed as SCM_RIGHTS.
fn interprocess(tour: &mut Tour, device: &Device, n: usize) -> Result<()> {
    use hipmem::pool::handle_type;
    use hipmem::{IpcListener, MemPool, PoolProps};
    tour.section("Interprocess memory: device pointer and shareable handle, parent and child", "seed 004");
    let rt = device.runtime();
    let props =
        PoolProps { device: device.ordinal(), handle_types: handle_type::POSIX_FILE_DESCRIPTOR, max_size: 0 };
    let pool = tour.step("hipMemPoolCreate(&memPool, {handleTypes = PosixFileDescriptor})", || {
        let p = MemPool::create(rt, props)?;
        let detail = format!("pool {:#x}, {:?}", p.id(), p.backing());
        Ok((p, detail))
    })?;
    let stream = device.create_stream()?;
    let buf = tour.step("hipMallocFromPoolAsync(&devPtr, n * 4, memPool, stream); fill 7", || {
        let b = pool.alloc::<i32>(n, &stream)?;
        stream.fill(&b, 7i32)?;
        stream.synchronize()?;
        let detail = format!("{} at {}", bytes((n * 4) as u64), DeviceSlice::device_ptr(&b));
        Ok((b, detail))
    })?;
    let fd = tour.step("hipMemPoolExportToShareableHandle(&fd, memPool, PosixFd, 0)", || {
        let fd = pool.export_shareable_handle(handle_type::POSIX_FILE_DESCRIPTOR, 0)?;
        Ok((fd, "a descriptor".to_string()))
    })?;
    let data = tour.step("hipMemPoolExportPointer(&exportData, devPtr)", || {
        let d = buf.export_pointer()?;
        Ok((d, "64 bytes".to_string()))
    })?;
    let path = std::env::temp_dir().join(format!("hipmem-tour-{}.sock", std::process::id()));
    let listener = tour.step("IpcListener::bind(path)  // the seed's mkfifo(0666)", || {
        let l = IpcListener::bind(&path)?;
        Ok((l, "socket 0600, peers checked".to_string()))
    })?;
    let exe = std::env::current_exe().map_err(|e| Error::Unknown(format!("this program: {e}")))?;
    let mut child = std::process::Command::new(exe)
        .args(["--backend", &rt.backend_kind().to_string().to_lowercase(), "tour-ipc-child", "--socket"])
        .arg(&path)
        .spawn()
        .map_err(|e| Error::Unknown(format!("starting the child process: {e}")))?;
    let conn = tour.step("accept; send fd (SCM_RIGHTS) and exportData", || {
        let c = listener.accept()?;
        c.send_pool_handle(std::os::fd::AsFd::as_fd(&fd))?;
        c.send_pointer(&data)?;
        Ok((c, "to the child process".to_string()))
    })?;
    let done = conn.recv_value();
    let status = child.wait().map_err(|e| Error::Unknown(format!("waiting for the child: {e}")))?;
    if done.is_err() || !status.success() {
        return Err(Error::Unknown(format!("the child process failed ({status})")));
    }
    tour.step("copy back: the child's writes, seen by the parent", || {
        let v = buf.read_to_vec()?;
        match v.iter().enumerate().find(|&(i, &x)| x != (i as i32).wrapping_mul(5)) {
            None => Ok(((), format!("devPtr[i] == 5*i for all {n}"))),
            Some((i, x)) => Err(Error::Unknown(format!("devPtr[{i}] = {x}, expected {}", 5 * i))),
        }
    })?;
    Ok(())
}

/// The child of the IPC section: imports the pool and the pointer, checks
/// the parent's data, writes its own, frees the import.
pub fn ipc_child(rt: &Runtime, socket: &str) -> Result<()> {
    use hipmem::IpcStream;
    let tour = Tour { section: 0 };
    let conn = IpcStream::connect(socket)?;
    let pool = tour.step("[child] hipMemPoolImportFromShareableHandle(&memPool, fd, PosixFd, 0)", || {
        let p = conn.recv_pool(rt)?;
        Ok((p, "imported (cannot allocate)".to_string()))
    })?;
    let imported = tour.step("[child] hipMemPoolImportPointer(&importedDevPtr, memPool, &data)", || {
        let b = pool.import_pointer::<i32>(&conn.recv_pointer()?)?;
        let detail = format!("{} elements at {}", b.len(), b.device_ptr());
        Ok((b, detail))
    })?;
    let stream = rt.device(pool.device())?.create_stream()?;
    tour.step("[child] read the parent's data; kernel: importedDevPtr[i] = 5*i", || {
        if let Some((i, x)) = imported.read_to_vec()?.iter().enumerate().find(|&(_, &x)| x != 7) {
            return Err(Error::Unknown(format!("importedDevPtr[{i}] = {x}, expected 7")));
        }
        stream.iota(&imported, 5)?;
        stream.synchronize()?;
        Ok(((), "parent's 7s seen; written".to_string()))
    })?;
    tour.step("[child] hipFree(importedDevPtr)  // unmaps here only", || {
        drop(imported);
        Ok(((), "the parent's memory stays".to_string()))
    })?;
    conn.send_value(1)
}
