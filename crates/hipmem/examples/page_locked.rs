//! Seed 000's pinned host memory, in Rust: a page-locked buffer, a truly
//! asynchronous copy that overlaps host work, a mapped buffer written by a
//! kernel, the caching pinned pool, and staged copies from ordinary memory.
//!
//! `cargo run -p hipmem --example page_locked` (HIPMEM_BACKEND=host|cuda)
use std::time::{Duration, Instant};

use hipmem::pinned::host_malloc_flags;
use hipmem::{Device, PinnedBuffer, PinnedPool, Result};

fn main() -> Result<()> {
    let device = Device::get(0)?;
    let rt = device.runtime().clone();
    println!("device 0: {}", device.properties().name);
    const N: usize = 1 << 20;

    // hipHostMalloc: page-locked memory, written by the host.
    let mut h_a = PinnedBuffer::<i32>::new(&rt, N, host_malloc_flags::DEFAULT)?;
    for (i, x) in h_a.as_mut_slice()?.iter_mut().enumerate() {
        *x = i as i32;
    }
    println!("hipHostMalloc: {N} ints, page-locked: {}", h_a.is_page_locked());

    // hipMemcpyAsync from page-locked memory returns while the copy is queued
    // (here behind a 50 ms kernel); the host works meanwhile.
    let d_a = device.alloc::<i32>(N)?;
    let flag = device.alloc_zeroed::<u32>(1)?;
    let stream = device.create_stream()?;
    stream.delay(Duration::from_millis(50), &flag, 1)?;
    let t = Instant::now();
    stream.copy_to_device_from_pinned(&h_a, &d_a)?;
    println!("hipMemcpyAsync returned in {:?}; copy done yet: {}", t.elapsed(), h_a.is_idle()?);
    let host_work: i64 = (0..N as i64).sum();
    stream.synchronize()?;
    assert_eq!(d_a.to_vec()?[12345], 12345);
    println!("host work ({host_work}) overlapped the copy; d_A verified");

    // Mapped memory: a kernel writes it through its device pointer.
    let mut mapped = PinnedBuffer::<u32>::new(&rt, 1024, host_malloc_flags::MAPPED)?;
    stream.fill(&mapped.mapped(&stream)?, 7u32)?;
    assert!(mapped.as_slice()?.iter().all(|&v| v == 7)); // waits for the kernel
    println!("mapped: a kernel wrote host memory at {:?}", mapped.device_ptr());

    // The caching pool: the second allocation reuses the first block.
    let pool = PinnedPool::new(&rt, host_malloc_flags::DEFAULT)?;
    let t = Instant::now();
    drop(pool.alloc::<u8>(64 << 20)?);
    let first = t.elapsed();
    let t = Instant::now();
    let again = pool.alloc::<u8>(64 << 20)?;
    let second = t.elapsed();
    println!("pinned pool, 64 MiB: {first:?} new, {second:?} from the cache ({:?})", pool.stats());
    drop(again);

    // Staged copies from ordinary memory.
    let big: Vec<u8> = (0..32 << 20).map(|i| (i % 251) as u8).collect();
    let d_big = device.alloc::<u8>(big.len())?;
    rt.copy_pageable_to_device(d_big.device_ptr(), &big)?;
    let mut back = vec![0u8; big.len()];
    rt.copy_device_to_pageable(&mut back, d_big.device_ptr())?;
    assert!(back == big);
    println!("staged pageable copies: 32 MiB there and back, verified");
    Ok(())
}
