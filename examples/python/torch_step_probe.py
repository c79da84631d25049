"""Where a training step's time goes under one allocator (run it once per allocator, in fresh processes).

    python3 examples/python/torch_step_probe.py native  path/to/libhipmem.so [workload]
    python3 examples/python/torch_step_probe.py hipmem  path/to/libhipmem.so [workload]

Prints the median step time after a warm-up, the cost of an alloc+free pair through PyTorch's
allocator interface (torch.cuda.caching_allocator_alloc/delete, Python's overhead included), the
GPU kernel time per step and the CPU time of the CUDA calls PyTorch makes (torch.profiler): when
the GPU time is the same and the step time is not, the difference is on the CPU.
"""
import os, sys, time, statistics, json
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
alloc, lib = sys.argv[1], sys.argv[2]
wl = sys.argv[3] if len(sys.argv) > 3 else "cnn_train"
os.sched_setaffinity(0, set(range(8)))
import torch_allocators as ta
torch, stats, reset = ta.setup_allocator(alloc, lib)
step, check = ta.make_workload(torch, wl, 40)
for i in range(6):
    step(i)
torch.cuda.synchronize()
times = []
for i in range(6, 26):
    t0 = time.perf_counter(); step(i); torch.cuda.synchronize(); times.append(time.perf_counter() - t0)
# allocator cost: alloc+free pairs through PyTorch's allocator interface
dev = torch.cuda.current_device(); s = torch.cuda.current_stream().cuda_stream
pair = []
for size in (4096, 1 << 20, 25 << 20):
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        p = torch.cuda.caching_allocator_alloc(size, dev, s)
        torch.cuda.caching_allocator_delete(p)
    pair.append((size, (time.perf_counter() - t0) / n * 1e9))
# python-level empty/del
t0 = time.perf_counter()
for _ in range(20000):
    x = torch.empty(1 << 18, device="cuda"); del x
empty_ns = (time.perf_counter() - t0) / 20000 * 1e9
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    for i in range(26, 29):
        step(i)
    torch.cuda.synchronize()
ka = prof.key_averages()
rows = sorted(ka, key=lambda e: -e.self_cpu_time_total)[:12]
cu = sorted([e for e in ka if e.key.startswith("cu")], key=lambda e: -e.count)[:15]
gpu_total = sum(e.self_device_time_total for e in ka if e.device_type == torch.autograd.DeviceType.CUDA) if hasattr(ka[0], "self_device_time_total") else -1
print(json.dumps({"alloc": alloc, "step_ms_median": statistics.median(times) * 1e3, "step_ms": [round(t * 1e3, 1) for t in times],
                  "pair_ns": pair, "empty_del_ns": empty_ns, "gpu_kernel_ms_per_step": gpu_total / 3 / 1e3}))
print("top self cpu:", [(e.key, e.count, round(e.self_cpu_time_total / 3)) for e in rows])
print("cu* calls:", [(e.key, e.count // 3, round(e.self_cpu_time_total / 3)) for e in cu])
