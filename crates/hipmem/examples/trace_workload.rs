//! Records a memory trace of a small training-like workload: weights
//! allocated once, per step a forward pass (activations and short-lived
//! temporaries), a backward pass freeing them in reverse with gradients, a
//! loader stream whose buffers are freed a step later, one OutOfMemory and a
//! trim at the end.
//!
//! The events are recorded here, at each call, as the pool's own call sites
//! record them (allocation, free, the physical memory the pool maps and
//! unmaps, found from its address runs): this program makes the committed
//! CI fixture `crates/hipmem-cli/fixtures/traces/training_loop.jsonl`.
//!
//! `HIPMEM_BACKEND=host cargo run -p hipmem --example trace_workload -- OUT.jsonl [STEPS]`
//! then `hipmem replay OUT.jsonl --svg out.svg`.

use hipmem::pool::layout::AddressRun;
use hipmem::{DevicePtr, MemPool, PoolAttribute, Runtime, Stream, trace};

/// The pool's backed address ranges, merged.
fn backed(pool: &MemPool) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for AddressRun { kind, start, size } in pool.address_runs().unwrap_or_default() {
        if !kind.is_backed() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.1 == start => last.1 = start + size,
            _ => out.push((start, start + size)),
        }
    }
    out
}

/// The parts of `a` not in `b` (both sorted, disjoint).
fn minus(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for &(mut s, e) in a {
        for &(bs, be) in b {
            if be <= s || bs >= e {
                continue;
            }
            if bs > s {
                out.push((s, bs));
            }
            s = s.max(be);
        }
        if s < e {
            out.push((s, e));
        }
    }
    out
}

struct Recorder<'a> {
    rt: &'a Runtime,
    pool: &'a MemPool,
    device: usize,
    backed: Vec<(u64, u64)>,
}

impl Recorder<'_> {
    /// Records the chunks mapped and unmapped since the last look.
    fn physical(&mut self) {
        let now = backed(self.pool);
        for (s, e) in minus(&now, &self.backed) {
            trace::pool_grow(self.pool.id(), self.device, s, e - s);
        }
        for (s, e) in minus(&self.backed, &now) {
            trace::pool_release(self.pool.id(), self.device, s, e - s);
        }
        self.backed = now;
    }

    fn alloc(&mut self, size: u64, stream: &Stream) -> hipmem::Result<DevicePtr> {
        match self.pool.alloc_raw(size, stream) {
            Ok(ptr) => {
                self.physical();
                trace::alloc(self.pool.id(), stream.id(), self.device, ptr.0, size);
                Ok(ptr)
            }
            Err(e) => {
                if matches!(e, hipmem::Error::OutOfMemory(_)) {
                    trace::oom(self.pool.id(), stream.id(), self.device, size);
                }
                Err(e)
            }
        }
    }

    fn free(&mut self, (ptr, size): (DevicePtr, u64), stream: &Stream) -> hipmem::Result<()> {
        trace::free_requested(self.pool.id(), stream.id(), self.device, ptr.0, size);
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
    trace::start(&out)?;
    let rt = Runtime::from_env()?;
    trace::set_backend(&rt.backend_kind().to_string());
    let device = rt.device(0)?;
    let compute = device.create_stream()?;
    let loader = device.create_stream()?;
    let pool = MemPool::create(&rt, hipmem::PoolProps { device: 0, ..Default::default() })?;
    pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX)?;
    let mut rec = Recorder { rt: &rt, pool: &pool, device: 0, backed: Vec::new() };
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
    trace::trim(pool.id(), 0, 0);
    pool.trim_to(0)?;
    rec.physical();
    trace::stop()?;
    let status = trace::status();
    println!("{out}: {} events", status.events_written);
    Ok(())
}
