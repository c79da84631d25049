//! Learned layouts: a loop that allocates the same blocks every step (a
//! training step: activations kept through a forward pass, temporaries and
//! frees in a backward pass). After a few steps the pool has learned the
//! step and places every block where its plan says; the pool then holds
//! about the step's peak. Prints, per step, what the pool holds against the
//! peak of live bytes, and what the planner did.
//!
//! `cargo run --release -p hipmem --example learned_layout [steps]`
use hipmem::{DevicePtr, PoolAttribute};

fn main() -> hipmem::Result<()> {
    let steps: u32 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(8);
    let rt = hipmem::Runtime::from_env()?;
    let device = rt.device(0)?;
    let stream = device.create_stream()?;
    let pool = device.mem_pool()?;
    pool.set_release_threshold(u64::MAX); // keep memory, as a training loop's allocator does
    const MIB: u64 = 1 << 20;
    let size = |i: u64| (1 + (i * 7) % 13) * MIB;
    for step in 0..steps {
        pool.set_attribute(PoolAttribute::ReservedMemHigh, 0)?;
        pool.set_attribute(PoolAttribute::UsedMemHigh, 0)?;
        // Forward: 16 activations stay live.
        let mut kept: Vec<DevicePtr> = Vec::new();
        for i in 0..16 {
            kept.push(pool.alloc_raw(size(i), &stream)?);
        }
        // Backward: a temporary per layer, and the activations go newest first.
        for i in 16..24 {
            let t = pool.alloc_raw(size(i), &stream)?;
            rt.free_async(t, &stream)?;
            for _ in 0..2 {
                rt.free_async(kept.pop().expect("16 kept"), &stream)?;
            }
        }
        let s = pool.stats();
        let c = pool.plan_counts();
        println!(
            "step {step}: holds {:>4} MiB for a peak of {:>4} MiB ({:.3}); plans {}, served {}, missed {}",
            s.reserved_high / MIB,
            s.used_high / MIB,
            s.reserved_high as f64 / s.used_high.max(1) as f64,
            c.plans,
            c.served,
            c.missed
        );
    }
    stream.synchronize()?;
    if !pool.planning() && pool.plan_counts().plans == 0 {
        println!("(this pool does not learn layouts: it has no virtual memory, or HIPMEM_POOL_PLAN=0)");
    }
    Ok(())
}
