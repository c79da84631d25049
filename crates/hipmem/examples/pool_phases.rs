//! A pool that keeps its memory (`ReleaseThreshold = u64::MAX`, as CUDA
//! programs and PyTorch's `cudaMallocAsync` backend set it) across two
//! phases of a run: first many medium blocks with small long-lived ones
//! between them, then one block larger than any free run. The driver's pool
//! would hold both phases' memory; hipmem's, on virtual memory, moves the
//! first phase's wholly free memory under the new block and holds about
//! the larger phase alone. Prints what the pool holds against the most
//! that was live.
//!
//! `cargo run --release -p hipmem --example pool_phases`
use hipmem::{MemPool, PoolAttribute, PoolProps};

const MIB: u64 = 1 << 20;

fn main() -> hipmem::Result<()> {
    let rt = hipmem::Runtime::from_env()?;
    let device = rt.device(0)?;
    let stream = device.create_stream()?;
    let pool = MemPool::create(&rt, PoolProps::default())?;
    pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX)?;
    // A run's first steps (its first 2048 frees) make its long-lived
    // state; the pool moves memory only after them.
    for i in 0..2100u64 {
        let p = pool.alloc_raw(4096 * (1 + i % 2), &stream)?;
        rt.free_async(p, &stream)?;
    }
    // Phase 1: 24 blocks of 12 MiB, a small long-lived block after every
    // fourth, then the medium blocks freed: 288 MiB free, in runs of 48 MiB.
    let mut kept = Vec::new();
    let mut medium = Vec::new();
    for i in 0..24 {
        medium.push(pool.alloc_raw(12 * MIB, &stream)?);
        if i % 4 == 3 {
            kept.push(pool.alloc_raw(64 << 10, &stream)?);
        }
    }
    for p in medium {
        rt.free_async(p, &stream)?;
    }
    stream.synchronize()?;
    let phase1 = pool.stats();
    // Phase 2: one block of 256 MiB, larger than any free run.
    let large = pool.alloc_raw(256 * MIB, &stream)?;
    let phase2 = pool.stats();
    println!(
        "phase 1: reserved {} MiB for at most {} MiB live",
        phase1.reserved_current / MIB,
        phase1.used_high / MIB
    );
    println!(
        "phase 2: reserved {} MiB at most, for at most {} MiB live in either phase ({:.3} of it; \
         keeping both phases' memory would hold {} MiB)",
        phase2.reserved_high / MIB,
        phase2.used_high / MIB,
        phase2.reserved_high as f64 / phase2.used_high as f64,
        (phase1.reserved_current + 256 * MIB) / MIB
    );
    if let Some(calls) = pool.backend_calls() {
        println!(
            "physical memory created {} MiB, released {} MiB; {} mappings moved or undone",
            calls.bytes_created / MIB,
            calls.bytes_released / MIB,
            calls.unmaps
        );
    }
    rt.free_async(large, &stream)?;
    for p in kept {
        rt.free_async(p, &stream)?;
    }
    stream.synchronize()?;
    pool.trim_to(0)?;
    println!("after trim: reserved {} MiB", pool.stats().reserved_current / MIB);
    pool.destroy()?;
    Ok(())
}
