//! Page-locked host memory: hipHostMalloc's flags and bad inputs,
//! hipHostFree, hipHostRegister/Unregister, hipHostGetDevicePointer, pointer
//! attributes, mapped memory used by a kernel, truly asynchronous copies, the
//! pinned pool's reuse rule under copies in flight, and staged pageable
//! copies.

use hipmem::backend::host_memory::RegisterSpan;
use hipmem::backend::parallel_memcpy::Stores;
use hipmem::pinned::{StagedOptions, host_malloc_flags as hm, host_register_flags as hr};
use hipmem::{MemoryType, PinnedBuffer, PinnedPool};

/// Registered vectors are this large so that each is its own mapping: the
/// driver page-locks whole pages, and two registrations may not share one.
const REG_BYTES: usize = 256 << 10;

use crate::{DELAY, device, expect_err, private_runtime, runtime, zeroed_flag};

#[test]
fn host_malloc_accepts_every_valid_flag_combination() {
    let rt = runtime();
    for flags in [
        hm::DEFAULT,
        hm::PORTABLE,
        hm::MAPPED,
        hm::WRITE_COMBINED,
        hm::PORTABLE | hm::MAPPED | hm::WRITE_COMBINED,
        hm::COHERENT,
        hm::NON_COHERENT,
        hm::MAPPED | hm::COHERENT,
        hm::NUMA_USER,
    ] {
        let p = rt.host_malloc(4096, flags).unwrap_or_else(|e| panic!("flags {flags:#x}: {e}"));
        assert_ne!(p, 0);
        let attrs = rt.pointer_attributes(p).unwrap();
        assert_eq!(attrs.memory_type, MemoryType::Host, "flags {flags:#x}");
        assert_eq!(attrs.allocation_flags, flags);
        rt.host_free(p).unwrap();
    }
}

#[test]
fn host_malloc_bad_inputs() {
    let rt = runtime();
    // Size 0: success with null.
    assert_eq!(rt.host_malloc(0, hm::DEFAULT).unwrap(), 0);
    // Null out-pointer.
    expect_err(rt.host_malloc_into(None, 4096, 0), 1, &["null"]);
    let mut out = 1u64;
    rt.host_malloc_into(Some(&mut out), 0, 0).unwrap();
    assert_eq!(out, 0);
    // Coherent with NonCoherent.
    expect_err(rt.host_malloc(4096, hm::COHERENT | hm::NON_COHERENT), 1, &["coherent"]);
    // Unknown bits.
    expect_err(rt.host_malloc(4096, 0x100), 1, &["unknown"]);
    expect_err(rt.host_malloc(4096, 0x1000_0000), 1, &["unknown"]);
    // Impossible size.
    expect_err(rt.host_malloc(u64::MAX, 0), 2, &[]);
    expect_err(rt.host_malloc(1 << 62, 0), 2, &[]);
    // Bad flags win over size 0? HIP checks flags first.
    expect_err(rt.host_malloc(0, 0x100), 1, &["unknown"]);
}

#[test]
fn host_free_rules() {
    let rt = private_runtime();
    rt.host_free(0).unwrap();
    let p = rt.host_malloc(10_000, 0).unwrap();
    // Interior pointer.
    expect_err(rt.host_free(p + 16), 1, &["into"]);
    rt.host_free(p).unwrap();
    // Already freed.
    expect_err(rt.host_free(p), 1, &[]);
    // Never allocated (a stack address).
    let x = 5u64;
    expect_err(rt.host_free(crate::host_addr(&x)), 1, &[]);
    // Device memory.
    let d = rt.malloc(0, 4096).unwrap();
    expect_err(rt.host_free(d.0), 1, &[]);
    rt.free(d).unwrap();
    // Registered, not allocated.
    let reg = hipmem::HostRegistration::new(&rt, vec![0u8; REG_BYTES], hr::DEFAULT).unwrap();
    expect_err(rt.host_free(reg.host_ptr()), 1, &["registered"]);
    drop(reg);
    // Owned by a PinnedBuffer.
    let b = PinnedBuffer::<u8>::new(&rt, 100, 0).unwrap();
    expect_err(rt.host_free(b.host_ptr()), 1, &["pinnedbuffer"]);
    drop(b);
    assert!(rt.take_drop_errors().is_empty());
}

#[test]
fn register_and_unregister_rules() {
    let rt = private_runtime();
    let reg =
        hipmem::HostRegistration::new(&rt, vec![7u32; REG_BYTES / 4], hr::MAPPED | hr::PORTABLE).unwrap();
    let attrs = rt.pointer_attributes(reg.host_ptr() + 8).unwrap();
    assert_eq!(attrs.memory_type, MemoryType::Host);
    assert_eq!(attrs.host_pointer, Some(reg.host_ptr() + 8));
    assert_eq!(attrs.device_pointer, rt.host_get_device_pointer(reg.host_ptr() + 8, 0).unwrap());
    assert!(!attrs.device_pointer.is_null());
    // Registering it again (or part of it) fails.
    // SAFETY: `reg` owns the memory for the whole test, and the calls fail.
    let span = unsafe { RegisterSpan::new(reg.host_ptr() as *mut u8, 64) };
    expect_err(rt.host_register(span, 0), 1, &["overlap"]);
    let mut around = vec![0u8; REG_BYTES];
    let base = around.as_mut_ptr();
    // SAFETY: `around` outlives the registration, which is undone below.
    let middle = unsafe { RegisterSpan::new(base.wrapping_add(4096), 4096) };
    rt.host_register(middle, 0).unwrap();
    // SAFETY: as above; the call fails.
    let whole = unsafe { RegisterSpan::new(base, 3 * 4096) };
    expect_err(rt.host_register(whole, 0), 1, &["overlap"]);
    rt.host_unregister(base as u64 + 4096).unwrap();
    expect_err(rt.host_unregister(base as u64 + 4096), 1, &["registered"]);
    // Null and empty spans.
    // SAFETY: the calls fail before anything is registered.
    expect_err(rt.host_register(unsafe { RegisterSpan::new(std::ptr::null_mut(), 64) }, 0), 1, &["null"]);
    // SAFETY: as above.
    expect_err(rt.host_register(unsafe { RegisterSpan::new(base, 0) }, 0), 1, &["0 bytes"]);
    expect_err(hipmem::HostRegistration::<u8>::new(&rt, Vec::new(), 0), 1, &[]);
    drop(around);
    expect_err(rt.host_unregister(0), 1, &["null"]);
    expect_err(rt.host_unregister(reg.host_ptr() + 4), 1, &["registered"]);
    let x = 1u64;
    expect_err(rt.host_unregister(crate::host_addr(&x)), 1, &["registered"]);
    // Unknown flag bits.
    expect_err(hipmem::HostRegistration::new(&rt, vec![0u8; 64], 0x100), 1, &["unknown"]);
    // hipHostUnregister of hipHostMalloc memory.
    let p = rt.host_malloc(4096, 0).unwrap();
    expect_err(rt.host_unregister(p), 1, &["registered"]);
    rt.host_free(p).unwrap();
    let v = reg.into_inner().unwrap();
    assert_eq!(v, vec![7u32; REG_BYTES / 4]);
    // Unregistered now: its address is unknown memory again.
    assert_eq!(rt.pointer_attributes(v.as_ptr() as u64).unwrap().memory_type, MemoryType::Unregistered);
}

#[test]
fn device_pointer_rules() {
    let rt = runtime();
    let mapped = rt.host_malloc(8192, hm::MAPPED).unwrap();
    let plain = rt.host_malloc(8192, hm::DEFAULT).unwrap();
    let d = rt.host_get_device_pointer(mapped, 0).unwrap();
    assert!(!d.is_null());
    let mut out = hipmem::DevicePtr::NULL;
    rt.host_get_device_pointer_into(Some(&mut out), mapped + 100, 0).unwrap();
    assert_eq!(out.0, d.0 + 100);
    expect_err(rt.host_get_device_pointer_into(None, mapped, 0), 1, &["null"]);
    expect_err(rt.host_get_device_pointer(0, 0), 1, &["null"]);
    expect_err(rt.host_get_device_pointer(mapped, 1), 1, &["flags"]);
    expect_err(rt.host_get_device_pointer(plain, 0), 1, &["not mapped"]);
    let x = 3u32;
    expect_err(rt.host_get_device_pointer(crate::host_addr(&x), 0), 1, &["page-locked"]);
    let attrs = rt.pointer_attributes(mapped).unwrap();
    assert_eq!(attrs.memory_type, MemoryType::Host);
    assert_eq!(attrs.device_pointer, d);
    assert_eq!(attrs.host_pointer, Some(mapped));
    assert_eq!(rt.pointer_attributes(plain).unwrap().device_pointer, hipmem::DevicePtr::NULL);
    rt.host_free(mapped).unwrap();
    rt.host_free(plain).unwrap();
}

#[test]
fn a_kernel_writes_mapped_memory_through_its_device_pointer() {
    let rt = runtime();
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let mut buf = PinnedBuffer::<u32>::new(rt, 10_000, hm::MAPPED).unwrap();
    assert!(buf.device_ptr().is_some());
    {
        let view = buf.mapped(&stream).unwrap();
        stream.fill(&view, 0xABCD_1234u32).unwrap();
    }
    // as_slice waits for the kernel (the view recorded it).
    assert!(buf.as_slice().unwrap().iter().all(|&v| v == 0xABCD_1234));
    // An unmapped buffer has no device view.
    let mut plain = PinnedBuffer::<u32>::new(rt, 16, 0).unwrap();
    expect_err(plain.mapped(&stream).map(|_| ()), 1, &["not mapped"]);
}

#[test]
fn async_copy_from_pinned_memory_returns_before_it_runs() {
    let rt = runtime();
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let flag = zeroed_flag(&dev);
    const N: usize = 1 << 16;
    let src = PinnedBuffer::from_slice(rt, &(0..N as u32).collect::<Vec<_>>(), 0).unwrap();
    let dst = dev.alloc_zeroed::<u32>(N).unwrap();
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 1).unwrap();
    stream.copy_to_device_from_pinned(&src, &dst).unwrap();
    assert_pending!(t0, !src.is_idle().unwrap(), "the copy from pinned memory ran before the delay ended");
    assert_pending!(t0, !stream.query().unwrap(), "the stream finished before the delay ended");
    // Reading the source on the host does not wait (the copy only reads it).
    assert_eq!(src.as_slice().unwrap()[5], 5);
    // And back: into a second pinned buffer; reading it waits for the copy.
    let mut back = PinnedBuffer::<u32>::new(rt, N, 0).unwrap();
    stream.copy_to_pinned_from_device(&dst, &mut back).unwrap();
    assert_pending!(t0, !back.is_idle().unwrap(), "the copy back ran before the delay ended");
    let v = back.as_slice().unwrap();
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32));
    assert_eq!(crate::read0(&flag), 1);
}

#[test]
fn async_copies_with_registered_memory() {
    let rt = runtime();
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let n = REG_BYTES / 4;
    let reg = hipmem::HostRegistration::new(rt, (0..n as u32).collect::<Vec<_>>(), hr::DEFAULT).unwrap();
    let dst = dev.alloc_zeroed::<u32>(n).unwrap();
    stream.copy_to_device_from_pinned(&reg, &dst).unwrap();
    let mut back = hipmem::HostRegistration::new(rt, vec![0u32; n], hr::DEFAULT).unwrap();
    stream.copy_to_pinned_from_device(&dst, &mut back).unwrap();
    assert_eq!(back.as_slice().unwrap(), reg.as_slice().unwrap());
    // Lengths must match.
    let short = dev.alloc::<u32>(10).unwrap();
    expect_err(stream.copy_to_device_from_pinned(&reg, &short), 1, &["lengths"]);
}

#[test]
fn pinned_copies_are_checked() {
    let rt = runtime();
    let dev = device(0);
    let d = dev.alloc::<u8>(4096).unwrap();
    let p = rt.host_malloc(4096, 0).unwrap();
    let null = dev.null_stream().raw();
    // Past the end of the page-locked allocation.
    expect_err(rt.copy_page_locked_to_device_async(d.device_ptr(), p + 1, 4096, null), 1, &["page-locked"]);
    // Pageable memory is not page-locked.
    let v = vec![0u8; 4096];
    expect_err(
        rt.copy_page_locked_to_device_async(d.device_ptr(), v.as_ptr() as u64, 4096, null),
        1,
        &["page-locked"],
    );
    // Past the end of the device allocation.
    expect_err(rt.copy_device_to_page_locked_async(p, d.device_ptr(), 4097, null), 1, &[]);
    rt.copy_device_to_page_locked_async(p, d.device_ptr(), 4096, null).unwrap();
    dev.synchronize().unwrap();
    rt.host_free(p).unwrap();
}

#[test]
fn the_pool_reuses_a_free_block_only_once_its_copies_completed() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let stream = dev.create_stream().unwrap();
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = PinnedPool::new(&rt, 0).unwrap();
    const N: usize = 300_000;
    let d = dev.alloc::<u8>(N).unwrap();
    // A block with no copy: reused at once.
    let a = pool.alloc::<u8>(N).unwrap();
    let a_ptr = a.host_ptr();
    drop(a);
    let b = pool.alloc::<u8>(N).unwrap();
    assert_eq!(b.host_ptr(), a_ptr, "an idle cached block was not reused");
    assert_eq!(pool.stats().hits, 1);
    // A block whose copy is still queued behind a delay: not handed out.
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 1).unwrap();
    stream.copy_to_device_from_pinned(&b, &d).unwrap();
    drop(b);
    let c = pool.alloc::<u8>(N).unwrap();
    assert_pending!(t0, !stream.query().unwrap(), "the delay ended too early for this test");
    if t0.elapsed() < DELAY / 2 {
        assert_ne!(c.host_ptr(), a_ptr, "a block still read by a queued copy was handed out again");
        assert!(pool.stats().skipped_in_flight >= 1);
    }
    drop(c);
    // Once the copy has completed, the block is reused.
    stream.synchronize().unwrap();
    let e = pool.alloc::<u8>(N).unwrap();
    let f = pool.alloc::<u8>(N).unwrap();
    assert!(e.host_ptr() == a_ptr || f.host_ptr() == a_ptr, "the completed block was not reused");
    drop((e, f));
    let s = pool.stats();
    assert_eq!(s.in_use_bytes, 0);
    assert!(s.cached_bytes > 0);
    assert!(s.misses >= 2);
    // Trim and limit.
    assert_eq!(pool.trim(0), s.cached_bytes);
    assert_eq!(pool.stats().cached_bytes, 0);
    pool.set_limit(0);
    drop(pool.alloc::<u8>(N).unwrap());
    assert_eq!(pool.stats().cached_bytes, 0, "a pool with limit 0 kept a block");
    assert!(rt.take_drop_errors().is_empty());
}

#[test]
fn pooled_buffers_read_back_what_was_written() {
    let rt = runtime();
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let pool = PinnedPool::new(rt, hm::PORTABLE).unwrap();
    let d = dev.alloc::<u64>(1000).unwrap();
    for round in 0..5u64 {
        let mut src = pool.alloc::<u64>(1000).unwrap();
        for (i, x) in src.as_mut_slice().unwrap().iter_mut().enumerate() {
            *x = i as u64 * round;
        }
        stream.copy_to_device_from_pinned(&src, &d).unwrap();
        let mut dst = pool.alloc::<u64>(1000).unwrap();
        stream.copy_to_pinned_from_device(&d, &mut dst).unwrap();
        assert!(dst.as_slice().unwrap().iter().enumerate().all(|(i, &x)| x == i as u64 * round));
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed ^ (i >> 12) as u8)).collect()
}

#[test]
fn staged_copies_from_several_threads_at_once_are_exact() {
    // The host copy threads are shared: parts of different copies interleave
    // on them, with cached and with non-temporal stores.
    let rt = runtime();
    std::thread::scope(|s| {
        for t in 0..3usize {
            s.spawn(move || {
                let stores = if t % 2 == 0 { Stores::Cached } else { Stores::Streaming };
                for round in 0..4usize {
                    let size = (3 << 20) + t * 4097 + round * 65_537;
                    let src = pattern(size, (t * 16 + round) as u8);
                    let d = device(0).alloc::<u8>(size).unwrap();
                    let to = StagedOptions { stores, ..StagedOptions::with_chunk(1 << 20, true) };
                    rt.copy_pageable_to_device_staged(d.device_ptr(), &src, &to).unwrap();
                    let mut back = vec![0u8; size];
                    let from = StagedOptions { stores, ..StagedOptions::with_chunk(512 << 10, false) };
                    rt.copy_device_to_pageable_staged(&mut back, d.device_ptr(), &from).unwrap();
                    assert!(back == src, "thread {t}, round {round}, {stores:?}");
                }
            });
        }
    });
}

#[test]
fn staged_copies_are_exact_at_odd_sizes_and_across_many_chunks() {
    let rt = runtime();
    let dev = device(0);
    // (size, chunk): single partial chunk, odd sizes, many chunks, more
    // chunks than the ring holds, and a chunk that splits over threads.
    for (size, chunk) in [
        (1usize, 4096usize),
        (4095, 4096),
        (4097, 4096),
        (100_003, 4096),
        (1_000_001, 65_536),
        (3 << 20 | 17, 1 << 20),
        (5 << 20, 4 << 20),
    ] {
        let src = pattern(size, size as u8);
        let d = dev.alloc::<u8>(size).unwrap();
        rt.copy_pageable_to_device_staged(d.device_ptr(), &src, &StagedOptions::with_chunk(chunk, true))
            .unwrap();
        assert!(d.to_vec().unwrap() == src, "host to device, {size} bytes in chunks of {chunk}");
        let mut back = vec![0u8; size];
        rt.copy_device_to_pageable_staged(
            &mut back,
            d.device_ptr(),
            &StagedOptions::with_chunk(chunk, false),
        )
        .unwrap();
        assert!(back == src, "device to host, {size} bytes in chunks of {chunk}");
        // The size-chosen path.
        let mut again = vec![0u8; size];
        rt.copy_device_to_pageable(&mut again, d.device_ptr()).unwrap();
        assert!(again == src);
        rt.copy_pageable_to_device(d.device_ptr(), &again).unwrap();
    }
    // Into the middle of an allocation, and past its end.
    let d = dev.alloc::<u8>(50_000).unwrap();
    let src = pattern(20_000, 9);
    rt.copy_pageable_to_device_staged(
        d.device_ptr().offset(1000).unwrap(),
        &src,
        &StagedOptions::with_chunk(4096, true),
    )
    .unwrap();
    assert!(d.to_vec().unwrap()[1000..21_000] == src[..]);
    expect_err(
        rt.copy_pageable_to_device_staged(
            d.device_ptr().offset(40_000).unwrap(),
            &src,
            &StagedOptions::with_chunk(4096, true),
        ),
        1,
        &[],
    );
}
