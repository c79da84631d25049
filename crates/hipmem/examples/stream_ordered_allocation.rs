//! Seed 000 section 3 / seed 004: stream-ordered allocation from a memory
//! pool (Example 2 of the seeds), with the pool's reuse rules and statistics.
//!
//! `cargo run --release -p hipmem --example stream_ordered_allocation`
use hipmem::{Device, DeviceSlice, PoolAttribute, Result};

fn main() -> Result<()> {
    let device = Device::get(0)?;
    let stream = device.create_stream()?;
    let pool = device.mem_pool()?; // the current pool: the default one
    pool.set_release_threshold(u64::MAX); // keep memory across synchronizations

    // Example 2: hipMallocAsync; kernel; hipFreeAsync, 100 times.
    let n = 1 << 18;
    for i in 0..100 {
        let buf = pool.alloc::<i32>(n, &stream)?; // hipMallocAsync
        stream.iota(&buf, i)?; // kernel<<<..., stream>>>
        if i == 99 {
            stream.synchronize()?;
            let v = buf.read_to_vec()?;
            assert_eq!(v[n - 1], (n as i32 - 1) * 99);
        }
        // dropping `buf` is hipFreeAsync on its stream: the next iteration's
        // allocation on the same stream gets the same memory back at once.
    }
    stream.synchronize()?;
    let stats = pool.stats();
    println!(
        "100 allocations of {} KiB: reserved {} KiB, used high {} KiB",
        (n * 4) >> 10,
        stats.reserved_current >> 10,
        stats.used_high >> 10
    );

    // Another stream reuses memory freed on `stream` once it waits on an
    // event recorded after the free (ReuseFollowEventDependencies). 8 MiB is
    // more than the pool has free, so only the freed block can serve it.
    let other = device.create_stream()?;
    let a = pool.alloc::<u8>(8 << 20, &stream)?;
    let a_ptr = a.device_ptr();
    drop(a); // freed on `stream`
    let event = device.create_event()?;
    event.record(&stream)?;
    other.wait_event(&event)?;
    let b = pool.alloc::<u8>(8 << 20, &other)?;
    println!(
        "reuse across streams after hipStreamWaitEvent: {} (follow event dependencies = {})",
        if b.device_ptr() == a_ptr { "same memory" } else { "other memory" },
        pool.attribute(PoolAttribute::ReuseFollowEventDependencies)
    );
    drop(b);
    other.synchronize()?;
    pool.trim_to(0)?;
    println!("after trim: reserved {} KiB", pool.stats().reserved_current >> 10);

    // A size limit set while the pool is in use (what PyTorch's
    // set_per_process_memory_fraction becomes through libhipmem): growth
    // past it is OutOfMemory, memory the pool holds still serves, and
    // lowering it gives back what no block uses.
    pool.set_size_limit(Some(4 << 20))?;
    let held = pool.alloc::<u8>(4 << 20, &stream)?;
    match pool.alloc::<u8>(4 << 20, &stream) {
        Err(e) => println!("past a 4 MiB size limit: {} ({e})", e.code()),
        Ok(_) => println!("unexpected: the pool grew past its size limit"),
    }
    drop(held);
    let again = pool.alloc::<u8>(4 << 20, &stream)?; // the freed block serves
    drop(again);
    stream.synchronize()?;
    pool.set_size_limit(Some(0))?; // lowered: the unused 4 MiB goes back now
    println!("size limit lowered to 0: reserved {} KiB", pool.stats().reserved_current >> 10);
    pool.set_size_limit(None)?;
    Ok(())
}
