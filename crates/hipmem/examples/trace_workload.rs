//! Records a memory trace of a small training-like workload: weights
//! allocated once, per step a forward pass (activations and short-lived
//! temporaries), a backward pass freeing them in reverse with gradients, a
//! loader stream whose buffers are freed a step later, one OutOfMemory and a
//! trim at the end.
//!
//! Nothing here records by hand: the pool records every event itself
//! (allocations, frees, the physical memory it maps and unmaps, the trim,
//! the OutOfMemory) once a trace is started, as it does for any program run
//! with `HIPMEM_TRACE=path`. This program makes the committed CI fixture
//! `crates/hipmem-cli/fixtures/traces/training_loop.jsonl`.
//!
//! `HIPMEM_BACKEND=host HIPMEM_TRACE=OUT.jsonl cargo run -p hipmem --example trace_workload`
//! (or `-- OUT.jsonl [STEPS]` without `HIPMEM_TRACE`), then
//! `hipmem replay OUT.jsonl --svg out.svg`.

use hipmem::{DevicePtr, MemPool, PoolAttribute, Runtime, Stream, trace};

/// The workload's allocations, from one pool.
struct Workload<'a> {
    rt: &'a Runtime,
    pool: &'a MemPool,
}

impl Workload<'_> {
    fn alloc(&self, size: u64, stream: &Stream) -> hipmem::Result<DevicePtr> {
        self.pool.alloc_raw(size, stream)
    }

    fn free(&self, (ptr, _size): (DevicePtr, u64), stream: &Stream) -> hipmem::Result<()> {
        self.rt.free_async(ptr, stream)
    }
}

/// A small deterministic generator.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn main() -> hipmem::Result<()> {
    let mut args = std::env::args().skip(1);
    let out = args.next().unwrap_or_else(|| "trace_workload.jsonl".into());
    let steps: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(12);
    // HIPMEM_TRACE, where set, records the run by itself (the runtime reads
    // it when it opens); otherwise the trace is started here.
    let rt = Runtime::from_env()?;
    if std::env::var_os("HIPMEM_TRACE").is_none() {
        trace::start(&out)?;
    }
    let device = rt.device(0)?;
    let compute = device.create_stream()?;
    let loader = device.create_stream()?;
    let pool = MemPool::create(&rt, hipmem::PoolProps { device: 0, ..Default::default() })?;
    pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX)?;
    let rec = Workload { rt: &rt, pool: &pool };
    let mut rng = Lcg(0x5eed);

    // Weights: allocated once.
    let mut weights = Vec::new();
    for i in 0..8u64 {
        let size = (1 + i % 4) << 20;
        weights.push((rec.alloc(size, &compute)?, size));
    }
    let mut loader_buffers: Vec<(DevicePtr, u64)> = Vec::new();
    for step in 0..steps {
        // The loader stream stages the next batch; last step's batch is freed.
        let batch = (3 << 20) + (rng.next(8) << 16);
        let staged = (rec.alloc(batch, &loader)?, batch);
        if let Some(old) = loader_buffers.pop() {
            rec.free(old, &compute)?;
        }
        loader_buffers.push(staged);
        // Forward: an activation per layer, temporaries freed at once.
        let mut activations = Vec::new();
        for layer in 0..10u64 {
            let size = (256 << 10) * (1 + (layer * 7 + step as u64) % 8) + rng.next(64) * 256;
            activations.push((rec.alloc(size, &compute)?, size));
            for _ in 0..3 {
                let tmp = 4096 * (1 + rng.next(16));
                let p = rec.alloc(tmp, &compute)?;
                rec.free((p, tmp), &compute)?;
            }
        }
        // Backward: gradients, activations freed in reverse.
        while let Some(act) = activations.pop() {
            let grad_size = act.1 / 2 + 256;
            let grad = rec.alloc(grad_size, &compute)?;
            rec.free(act, &compute)?;
            rec.free((grad, grad_size), &compute)?;
        }
        if step == steps / 2 {
            // A request far beyond the device: OutOfMemory, recorded, survived.
            let _ = rec.alloc(1 << 50, &compute);
        }
    }
    for b in loader_buffers.drain(..) {
        rec.free(b, &compute)?;
    }
    for w in weights.drain(..) {
        rec.free(w, &compute)?;
    }
    device.synchronize()?;
    pool.trim_to(0)?;
    trace::stop()?;
    let status = trace::status();
    println!(
        "{}: {} events",
        status.path.as_ref().map(|p| p.display().to_string()).unwrap_or(out),
        status.events_written
    );
    Ok(())
}
