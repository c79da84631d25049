"""Where an inference batch's time goes under one allocator: wall time, the
process's CPU time, and the GPU's kernel time (run it once per allocator, in
fresh processes, and compare).

    python3 examples/python/torch_batch_probe.py native path/to/libhipmem.so
    python3 examples/python/torch_batch_probe.py hipmem path/to/libhipmem.so
    python3 examples/python/torch_batch_probe.py hipmem-segments path/to/libhipmem.so

Any allocator name of torch_allocators.py works. It loads torch_allocators.py's
variable-length inference model (a 24-layer GPT-2 shaped decoder, bf16
autocast) and runs batches of a few fixed shapes, a large one between small
ones as the workload has them, 5 untimed and 30 timed each, every batch
synchronized. Prints one JSON line: for each shape "BxT", the medians of
[wall ms, CPU ms, ms between CUDA events around the batch], and the kernel time
of a 4x64 batch (torch.profiler) with its four costliest kernels. Where the
kernel time is the same and wall time equals CPU time, the batch waits on the
CPU: PyTorch's own work and the allocator's calls.
"""
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_allocators as ta  # noqa: E402

if len(sys.argv) < 3:
    raise SystemExit(__doc__)
alloc, lib = sys.argv[1], sys.argv[2]
os.sched_setaffinity(0, ta.cpu_list(os.environ.get("PROBE_CPUS", "0-7")))
torch, stats, reset = ta.setup_allocator(alloc, lib)
dev = torch.device("cuda")
model = ta.varlen_model(torch, dev)
gen = torch.Generator(device=dev)
gen.manual_seed(1)


def batch(b, t):
    return ta.infer_batch(torch, model, gen, b, t)


out = {"alloc": alloc}
for b, t in [(4, 64), (24, 1800), (4, 64), (16, 256)]:
    for _ in range(5):
        batch(b, t)
    torch.cuda.synchronize()
    wall, cpu, span = [], [], []
    for _ in range(30):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0, c0 = time.perf_counter(), time.process_time()
        s.record()
        batch(b, t)
        e.record()
        e.synchronize()
        wall.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
        span.append(s.elapsed_time(e))
    out[f"{b}x{t}"] = [round(statistics.median(v), 3) for v in (wall, cpu, span)]

from torch.profiler import ProfilerActivity, profile  # noqa: E402

with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
    for _ in range(5):
        batch(4, 64)
    torch.cuda.synchronize()
gpu = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
out["kernel_ms_4x64"] = round(sum(e.self_device_time_total for e in gpu) / 5 / 1e3, 3)
out["top_kernels_us"] = [(e.key[:40], round(e.self_device_time_total / 5))
                         for e in sorted(gpu, key=lambda e: -e.self_device_time_total)[:4]]
print(json.dumps(out))
