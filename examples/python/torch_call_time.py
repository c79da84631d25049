#!/usr/bin/env python3
"""Each allocator's own time inside real PyTorch steps: every allocation and
every free of torch_allocators.py's workloads, timed where PyTorch calls the
allocator, hipmem and PyTorch's allocators side by side.

A small C++ helper (compiled with g++ against the installed PyTorch on first
use) installs a CUDA allocator that passes every allocation, free and
record_stream to the allocator under test and times each allocation and free
(two reads of the steady clock around the call, the same code for every
allocator):

  native        PyTorch's caching allocator (its raw_alloc_with_stream and
                raw_delete: the work of a tensor's allocation and free)
  expandable    the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  cudamallocasync  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (the driver's pool)
  hipmem        hipmem_torch_alloc / hipmem_torch_delete: hipmem's pool, as
                hipmem_torch.use_hipmem(lib, direct=True) calls it
  hipmem-pluggable  hipmem through PyTorch's CUDAPluggableAllocator (its map of
                live blocks and lock, then hipmem_torch_malloc / hipmem_torch_free),
                as hipmem_torch.use_hipmem(lib) installs it

In a step, PyTorch's own work runs between two allocator calls and evicts
the allocator's state from the CPU's caches: these are the costs a step
pays, which a loop of calls back to back (torch_call_cost.py) understates.
Step times move by 5-15% between processes on a shared machine, under every
allocator alike, which hides differences of a few per cent; the time inside
the allocator is the part of the step the allocator decides.

Each (workload, allocator) pair runs in fresh processes, the allocators
alternating over --reps repetitions. A process runs the workload's warm-up
(6 steps), then its 10 timed steps twice over the same inputs, as
torch_allocators.py does, and reports the second pass: the median over its
steps of the time inside the allocator per step, the calls (allocations and
frees) per step, the time per call (the pass's time inside over its calls)
and the step's wall time, and the workload's own check; and the calls that
took 10 us or more (where the allocator asked the driver for memory or
gave some back, or waited), their time, and the time per call without them. The table gives
medians over the processes and the ratio to native's. The clock reads are in
every allocator's figure alike (about 20-40 ns a call).

    python3 torch_call_time.py --lib path/to/libhipmem.so
    python3 torch_call_time.py --lib path/to/libhipmem.so --workloads varlen_infer \\
        --allocators native,hipmem --reps 5 --cpus 0-7
"""

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time

# (This directory's helpers: the g++ build, the workloads.)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hipmem_torch  # noqa: E402
import torch_allocators as ta  # noqa: E402

ALLOCATORS = ["native", "expandable", "cudamallocasync", "hipmem", "hipmem-pluggable"]
WARMUP, STEPS, PASSES = 6, 10, 2

HELPER = r"""
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>

namespace {
using c10::cuda::CUDACachingAllocator::CUDAAllocator;
using Pluggable = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
typedef void* (*malloc_fn)(ssize_t, int, cudaStream_t);
typedef void (*free_fn)(void*, size_t, int, cudaStream_t);
typedef void (*record_fn)(void*, cudaStream_t);

// The allocator under test: a CUDAAllocator, or hipmem's direct entry points.
CUDAAllocator* g_inner = nullptr;
std::shared_ptr<Pluggable> g_pluggable;  // kind 2's, kept alive
malloc_fn g_alloc = nullptr;             // hipmem_torch_alloc
c10::DeleterFnPtr g_delete = nullptr;    // hipmem_torch_delete
record_fn g_record = nullptr;            // hipmem_torch_record_stream
// ns in allocations, allocations, ns in frees, frees, then ns in the calls
// of them that took 10 us or more (the allocator asked the driver for
// something, or waited), and how many.
std::atomic<uint64_t> g_times[6];
constexpr uint64_t LONG_NS = 10000;

inline uint64_t now() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

inline void count(int which, uint64_t ns) {
  g_times[which] += ns;
  g_times[which + 1] += 1;
  if (ns >= LONG_NS) {
    g_times[4] += ns;
    g_times[5] += 1;
  }
}

void timed_delete(void* p) {
  uint64_t t0 = now();
  if (g_delete) g_delete(p); else g_inner->raw_delete(p);
  count(2, now() - t0);
}

void* no_malloc(ssize_t, int, cudaStream_t) { return nullptr; }
void no_free(void*, size_t, int, cudaStream_t) {}

c10::DeviceIndex current_device() {
  c10::DeviceIndex device = -1;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  return device;
}

// PyTorch's pluggable allocator with every allocation, free and
// record_stream going to the allocator under test; allocations and frees
// timed, nothing else.
struct Timed final : Pluggable {
  Timed() : Pluggable(no_malloc, no_free) {}
  void* timed_alloc(size_t size, c10::DeviceIndex device, cudaStream_t stream) {
    uint64_t t0 = now();
    void* r = g_alloc ? g_alloc((ssize_t)size, device, stream) : g_inner->raw_alloc_with_stream(size, stream);
    count(0, now() - t0);
    return r;
  }
  c10::DataPtr allocate(size_t size) override {
    c10::DeviceIndex device = current_device();
    void* r = timed_alloc(size, device, c10::cuda::getCurrentCUDAStream(device));
    return {r, r, timed_delete, c10::Device(c10::DeviceType::CUDA, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return timed_delete; }
  void* raw_alloc(size_t size) override {
    c10::DeviceIndex device = current_device();
    return timed_alloc(size, device, c10::cuda::getCurrentCUDAStream(device));
  }
  void* raw_alloc_with_stream(size_t size, cudaStream_t stream) override {
    return timed_alloc(size, current_device(), stream);
  }
  void raw_delete(void* ptr) override { timed_delete(ptr); }
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (!ptr.get()) return;
    if (g_alloc) {
      if (g_record) g_record(ptr.get(), stream.stream());
      return;
    }
    // The allocator under test records only blocks whose deleter is its own:
    // the same block under that deleter, which is then let go unfreed.
    c10::DataPtr own(ptr.get(), ptr.get(), g_inner->raw_deleter(), ptr.device());
    g_inner->recordStream(own, stream);
    (void)own.release_context();
  }
};
}  // namespace

// kind 0: PyTorch's current allocator (before any CUDA allocation: the
// caching allocator or the driver's pool, as PYTORCH_CUDA_ALLOC_CONF chose);
// 1: hipmem's direct entry points (a: hipmem_torch_alloc, b: hipmem_torch_delete);
// 2: PyTorch's pluggable allocator over a: hipmem_torch_malloc, b: hipmem_torch_free.
// record: hipmem_torch_record_stream (kinds 1 and 2).
extern "C" int timed_install(int kind, void* a, void* b, void* record, char* why, size_t why_len) {
  try {
    if (kind == 0) {
      g_inner = c10::cuda::CUDACachingAllocator::get();
    } else if (kind == 1) {
      g_alloc = (malloc_fn)a;
      g_delete = (c10::DeleterFnPtr)b;
      g_record = (record_fn)record;
    } else {
      g_pluggable = std::make_shared<Pluggable>((malloc_fn)a, (free_fn)b);
      g_pluggable->set_record_stream_fn((record_fn)record);
      g_inner = g_pluggable.get();
    }
    auto timed = std::make_shared<Timed>();
    timed->init(0);
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(timed);
    if (g_inner) g_inner->init(c10::cuda::device_count());
    return 0;
  } catch (const std::exception& e) {
    snprintf(why, why_len, "%s", e.what());
  } catch (...) {
    snprintf(why, why_len, "an unknown C++ exception");
  }
  return -1;
}

// Reads and resets the six counts (see g_times).
extern "C" void timed_read(uint64_t* out) {
  for (int i = 0; i < 6; i++) out[i] = g_times[i].exchange(0);
}
"""


def install(torch, alloc, lib):
    """Installs the timing allocator over `alloc` (before any CUDA
    allocation); returns its reader."""
    h = hipmem_torch.build_against_torch(torch, HELPER, "call-time", ["torch_cuda", "torch", "c10_cuda", "c10"])
    h.timed_install.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_char_p, ctypes.c_size_t]
    kind, a, b, record = 0, None, None, None
    if alloc.startswith("hipmem"):
        dll = ctypes.CDLL(os.path.abspath(lib))

        def address(name):
            return ctypes.cast(getattr(dll, name), ctypes.c_void_p).value

        record = address("hipmem_torch_record_stream")
        if alloc == "hipmem":
            kind, a, b = 1, address("hipmem_torch_alloc"), address("hipmem_torch_delete")
        else:
            kind, a, b = 2, address("hipmem_torch_malloc"), address("hipmem_torch_free")
    why = ctypes.create_string_buffer(4096)
    if h.timed_install(kind, a, b, record, why, len(why)) != 0:
        raise RuntimeError("PyTorch refused the timing allocator: " + why.value.decode(errors="replace"))
    return h.timed_read


def child(workload, alloc, lib):
    """One process: `workload` under `alloc`; prints one JSON line."""
    ta.choose_torch_allocator(alloc)
    if alloc.startswith("hipmem"):
        os.environ.setdefault("HIPMEM_BACKEND", "cuda")
    import torch

    read = install(torch, alloc, lib)
    if alloc == "cudamallocasync":
        # The driver's pool was chosen when PyTorch loaded; PyTorch checks
        # the setting again later against its current allocator (the timing
        # one) and would stop.
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF")
    times = (ctypes.c_uint64 * 6)()
    step, check = ta.make_workload(torch, workload, WARMUP + STEPS)
    for i in range(WARMUP):
        step(i)
    torch.cuda.synchronize()
    for _ in range(PASSES):
        inside, calls, wall, long_us, long_calls = [], [], [], [], []
        for i in range(WARMUP, WARMUP + STEPS):
            read(times)
            t0 = time.perf_counter()
            step(i)
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - t0) * 1e3)
            read(times)
            inside.append((times[0] + times[2]) / 1e3)
            calls.append(times[1] + times[3])
            long_us.append(times[4] / 1e3)
            long_calls.append(times[5])
    ok, detail = check()
    print(json.dumps({
        "ok": ok, "detail": detail,
        "us_inside_per_step": statistics.median(inside),
        "calls_per_step": statistics.median(calls),
        "ns_per_call": sum(inside) * 1e3 / max(sum(calls), 1),
        "us_in_long_calls_per_step": statistics.median(long_us),
        "long_calls_per_step": sum(long_calls) / len(long_calls),
        "ns_per_call_without_long": (sum(inside) - sum(long_us)) * 1e3 / max(sum(calls) - sum(long_calls), 1),
        "step_ms": statistics.median(wall),
    }))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default="target/release/libhipmem.so", help="libhipmem.so")
    ap.add_argument("--workloads", default=",".join(ta.WORKLOADS))
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--reps", type=int, default=3, help="processes per pair (allocators alternating)")
    ap.add_argument("--cpus", default=None, help="CPUs the processes run on (e.g. 0-7)")
    ap.add_argument("--json", help="write every process's figures here")
    ap.add_argument("--child", nargs=2, metavar=("WORKLOAD", "ALLOCATOR"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cpus:
        os.sched_setaffinity(0, ta.cpu_list(args.cpus))
    if args.child:
        return child(*args.child, args.lib)
    workloads, allocs = args.workloads.split(","), args.allocators.split(",")
    unknown = [a for a in allocs if a not in ALLOCATORS] + [w for w in workloads if w not in ta.WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown {unknown}; allocators: {ALLOCATORS}, workloads: {ta.WORKLOADS}")
    runs, failed = [], []
    for workload in workloads:
        for rep in range(args.reps):
            for alloc in allocs if rep % 2 == 0 else allocs[::-1]:
                p = subprocess.run([sys.executable, __file__, "--child", workload, alloc, "--lib", args.lib],
                                   capture_output=True, text=True)
                lines = p.stdout.strip().splitlines()
                if p.returncode != 0 or not lines:
                    failed.append((workload, alloc, rep))
                    print(f"rep {rep} {workload} {alloc} failed:\n{p.stderr[-3000:]}", flush=True)
                    continue
                r = json.loads(lines[-1])
                r.update(workload=workload, allocator=alloc, rep=rep)
                runs.append(r)
                if not r["ok"]:
                    failed.append((workload, alloc, rep))
                print(f"rep {rep} {workload:13s} {alloc:17s} {r['us_inside_per_step']:8.0f} us inside per step, "
                      f"{r['calls_per_step']:5.0f} calls, {r['ns_per_call']:5.0f} ns a call "
                      f"({r['long_calls_per_step']:.1f} calls of 10 us or more, {r['us_in_long_calls_per_step']:.0f} us; "
                      f"{r['ns_per_call_without_long']:.0f} ns a call without them), "
                      f"step {r['step_ms']:6.2f} ms; {'ok' if r['ok'] else 'CHECK FAILED'}: {r['detail']}",
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)

    def med(workload, alloc, key):
        v = [r[key] for r in runs if r["workload"] == workload and r["allocator"] == alloc and r["ok"]]
        return statistics.median(v) if v else float("nan")

    print("\nInside the allocator per step, us (vs native), per call, ns, and the step, ms: "
          "medians over the processes")
    print(f"{'workload':13s} {'allocator':17s} {'us/step':>8s} {'vs native':>9s} {'calls':>6s} "
          f"{'ns/call':>7s} {'vs native':>9s} {'step ms':>8s} {'long/step':>9s} {'us long':>7s} {'ns/call short':>13s}")
    for workload in workloads:
        for alloc in allocs:
            us, ns = med(workload, alloc, "us_inside_per_step"), med(workload, alloc, "ns_per_call")
            nat_us, nat_ns = med(workload, "native", "us_inside_per_step"), med(workload, "native", "ns_per_call")
            print(f"{workload:13s} {alloc:17s} {us:8.0f} {us / nat_us:8.2f}x "
                  f"{med(workload, alloc, 'calls_per_step'):6.0f} {ns:7.0f} {ns / nat_ns:8.2f}x "
                  f"{med(workload, alloc, 'step_ms'):8.2f} {med(workload, alloc, 'long_calls_per_step'):9.1f} "
                  f"{med(workload, alloc, 'us_in_long_calls_per_step'):7.0f} "
                  f"{med(workload, alloc, 'ns_per_call_without_long'):13.0f}")
    if failed:
        raise SystemExit(f"failed or checks failed: {failed}")


if __name__ == "__main__":
    main()
