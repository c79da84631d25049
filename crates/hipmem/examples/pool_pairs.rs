//! Stream-ordered allocation from hipmem's pool: a hot loop of allocate/free
//! pairs on one stream, as `hipMallocAsync`/`hipFreeAsync` are used around
//! kernels. Prints the time per pair.
//!
//! `cargo run --release -p hipmem --example pool_pairs [pairs]`
use std::time::Instant;

fn main() -> hipmem::Result<()> {
    let pairs: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let rt = hipmem::Runtime::from_env()?;
    let device = rt.device(0)?;
    let stream = device.create_stream()?;
    let pool = device.mem_pool()?;
    let t = Instant::now();
    for _ in 0..pairs {
        let p = pool.alloc_raw(64 << 10, &stream)?;
        rt.free_async(p, &stream)?;
    }
    let took = t.elapsed();
    stream.synchronize()?;
    println!("{pairs} pairs: {:.1} ns per allocate+free pair", took.as_secs_f64() * 1e9 / pairs as f64);
    Ok(())
}
