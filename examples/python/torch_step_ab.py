#!/usr/bin/env python3
"""PyTorch's caching allocator and hipmem in one process, step by step: each
timed step runs once under every allocator, back to back, so that what slows
a process down (a virtual machine's CPU running 1.6x slower for seconds at a
time, which moves a host-bound step's time between processes by more than
the allocators differ) slows both alike.

A small C++ helper (compiled with g++ against the installed PyTorch on first
use) installs a CUDA allocator that hands each allocation to the allocator
chosen for the current step:

  native         PyTorch's caching allocator (its own allocate(), DataPtr and
                 deleter, as a tensor gets them without any allocator
                 installed)
  hipmem-direct  hipmem_torch_alloc / hipmem_torch_delete, as
                 hipmem_torch.use_hipmem(lib, direct=True) calls them

(hipmem behind PyTorch's own CUDAPluggableAllocator cannot take turns with
another allocator in one process: depending on PyTorch's version its
DataPtrs' deleter asks the current allocator, whoever that is, to free
them.)

A block goes back to the allocator that made it (its DataPtr's deleter), so
memory allocated under one allocator and freed while another serves new
allocations returns where it came from. Both allocators hold their memory at
once, and hipmem's pool sees only its own steps: memory figures here mean
nothing (torch_allocators.py measures them). hipmem's idle release runs on
the wall clock, where the other allocator's steps would count as idle time:
with two allocators taking turns, hipmem's steps come half as often as in a
process of its own, and its pool would give back more often what the next
pass maps again. So the window is the library's default (100 ms) times the
allocators taking turns (hipmem's pool then sees as many of its own steps in
a window as alone), unless HIPMEM_TORCH_IDLE_RELEASE_MS or --hipmem-idle-ms
sets it. (Variable-length inference, one H100: 1192 and 2279 driver calls
in the 80 timed steps at 100 ms, 314-1189 in three processes at 200 ms;
none with idle release off. The driver calls each step made are printed.)

The workload is torch_allocators.py's (6 warm-up steps under each allocator,
then its 10 timed steps, --passes times). For each timed step index, the
order of the allocators rotates between passes. Prints, per step index, the
median step time under each allocator and the host's time to enqueue it, and
the paired ratio of each allocator to native (median over passes); then the
ratio of the summed medians, over every step and over the host-bound steps
alone (those where native's enqueue time is at least 80% of its step), and
the driver calls hipmem's pool made in the timed steps (each costs
microseconds: a step that makes them pays for memory given back and made
again).

    python3 torch_step_ab.py --lib path/to/libhipmem.so
    python3 torch_step_ab.py --lib path/to/libhipmem.so --workload cnn_train \\
        --passes 8 --cpus 1-8 --json out.json
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

# (This directory's helpers: the g++ build, the workloads.)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hipmem_torch  # noqa: E402
import torch_allocators as ta  # noqa: E402

ALLOCATORS = ["native", "hipmem-direct"]
# hipmem's PyTorch interface's idle-release window on its own (ms).
DEFAULT_IDLE_MS = 100
WARMUP, STEPS = 6, 10

HELPER = r"""
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <sys/types.h>
#include <atomic>
#include <cstdio>
#include <exception>
#include <memory>

namespace {
using c10::cuda::CUDACachingAllocator::CUDAAllocator;
using Pluggable = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
typedef void* (*malloc_fn)(ssize_t, int, cudaStream_t);
typedef void (*record_fn)(void*, cudaStream_t);

CUDAAllocator* g_native = nullptr;        // PyTorch's caching allocator
malloc_fn g_alloc = nullptr;              // hipmem_torch_alloc
c10::DeleterFnPtr g_delete = nullptr;     // hipmem_torch_delete
record_fn g_record = nullptr;             // hipmem_torch_record_stream
// 0 native, 1 hipmem's direct entry points.
std::atomic<int> g_mode{0};

void* no_malloc(ssize_t, int, cudaStream_t) { return nullptr; }
void no_free(void*, size_t, int, cudaStream_t) {}

c10::DeviceIndex current_device() {
  c10::DeviceIndex device = -1;
  C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
  return device;
}

// Allocations go to the allocator of g_mode; a DataPtr carries its own
// allocator's deleter back. Raw allocations (rare: library workspaces) stay
// with PyTorch's allocator, so that a raw free needs no lookup.
struct Switch final : Pluggable {
  Switch() : Pluggable(no_malloc, no_free) {}
  c10::DataPtr allocate(size_t size) override {
    if (g_mode.load(std::memory_order_relaxed) == 1) {
      c10::DeviceIndex device = current_device();
      void* r = g_alloc((ssize_t)size, device, c10::cuda::getCurrentCUDAStream(device));
      return {r, r, g_delete, c10::Device(c10::DeviceType::CUDA, device)};
    }
    return g_native->allocate(size);
  }
  c10::DeleterFnPtr raw_deleter() const override { return g_native->raw_deleter(); }
  void* raw_alloc(size_t size) override { return g_native->raw_alloc(size); }
  void* raw_alloc_with_stream(size_t size, cudaStream_t stream) override {
    return g_native->raw_alloc_with_stream(size, stream);
  }
  void raw_delete(void* ptr) override { g_native->raw_delete(ptr); }
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override {
    if (!ptr.get()) return;
    if (ptr.get_deleter() == g_delete) {
      if (g_record) g_record(ptr.get(), stream.stream());
    } else {
      g_native->recordStream(ptr, stream);
    }
  }
};
}  // namespace

// Before any CUDA allocation: keeps PyTorch's caching allocator and
// installs the switch.
extern "C" int ab_install(void* alloc, void* del, void* record, char* why, size_t why_len) {
  try {
    g_native = c10::cuda::CUDACachingAllocator::get();
    g_alloc = (malloc_fn)alloc;
    g_delete = (c10::DeleterFnPtr)del;
    g_record = (record_fn)record;
    auto s = std::make_shared<Switch>();
    s->init(0);
    torch::cuda::CUDAPluggableAllocator::changeCurrentAllocator(s);
    g_native->init(c10::cuda::device_count());
    return 0;
  } catch (const std::exception& e) {
    snprintf(why, why_len, "%s", e.what());
  } catch (...) {
    snprintf(why, why_len, "an unknown C++ exception");
  }
  return -1;
}

extern "C" void ab_mode(int mode) { g_mode.store(mode); }
"""

MODES = {"native": 0, "hipmem-direct": 1}


def install(torch, lib):
    """Installs the switching allocator (before any CUDA allocation);
    returns the function that chooses the allocator by name."""
    h = hipmem_torch.build_against_torch(torch, HELPER, "step-ab", ["torch_cuda", "torch", "c10_cuda", "c10"])
    h.ab_install.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_char_p, ctypes.c_size_t]
    h.ab_mode.argtypes = [ctypes.c_int]
    dll = ctypes.CDLL(os.path.abspath(lib))

    def address(name):
        return ctypes.cast(getattr(dll, name), ctypes.c_void_p).value

    why = ctypes.create_string_buffer(4096)
    rc = h.ab_install(address("hipmem_torch_alloc"), address("hipmem_torch_delete"),
                      address("hipmem_torch_record_stream"), why, len(why))
    if rc != 0:
        raise RuntimeError("PyTorch refused the switching allocator: " + why.value.decode(errors="replace"))
    # (hipmem's idle-release window, HIPMEM_TORCH_IDLE_RELEASE_MS, is set on
    # hipmem_torch_alloc's first call, as under use_hipmem.)
    return lambda name: h.ab_mode(MODES[name])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("HIPMEM_LIB", ""), help="path of libhipmem.so")
    ap.add_argument("--workload", default="varlen_infer", choices=ta.WORKLOADS)
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--varlen-seed", type=int, default=7)
    ap.add_argument("--cpus", default="", help="run on these CPUs (e.g. 1-8)")
    ap.add_argument("--json", default="", help="write every step's time here")
    ap.add_argument("--hipmem-idle-ms", type=int, default=None,
                    help="hipmem's idle-release window (default: HIPMEM_TORCH_IDLE_RELEASE_MS if set, "
                         "else 100 ms times the allocators taking turns; 0: off)")
    args = ap.parse_args()
    allocators = [a for a in args.allocators.split(",") if a]
    bad = [a for a in allocators if a not in MODES]
    if bad or "native" not in allocators or len(set(allocators)) != len(allocators):
        raise SystemExit(f"--allocators: native and any of {', '.join(MODES)}, each once")
    if not args.lib:
        raise SystemExit("--lib path/to/libhipmem.so (or HIPMEM_LIB) is needed")
    if args.cpus:
        os.sched_setaffinity(0, ta.cpu_list(args.cpus))
    os.environ.setdefault("HIPMEM_BACKEND", "cuda")
    # (Read by hipmem on its first allocation, below.)
    if args.hipmem_idle_ms is not None:
        if args.hipmem_idle_ms < 0:
            raise SystemExit("--hipmem-idle-ms must be at least 0")
        os.environ["HIPMEM_TORCH_IDLE_RELEASE_MS"] = str(args.hipmem_idle_ms)
    else:
        os.environ.setdefault("HIPMEM_TORCH_IDLE_RELEASE_MS", str(DEFAULT_IDLE_MS * len(allocators)))
    idle_ms = os.environ["HIPMEM_TORCH_IDLE_RELEASE_MS"]
    if not idle_ms.strip().isdigit():
        raise SystemExit(f"HIPMEM_TORCH_IDLE_RELEASE_MS must be a count of milliseconds, not {idle_ms!r}")
    idle_ms = int(idle_ms)
    import gc

    import torch

    use = install(torch, args.lib)
    pool = hipmem_torch.Pool(os.path.abspath(args.lib))
    step, check = ta.make_workload(torch, args.workload, WARMUP + STEPS, args.varlen_seed)
    for i in range(WARMUP):
        for a in allocators:
            use(a)
            step(i)
    torch.cuda.synchronize()
    # times[a][k]: step k's times under a, one per pass; enq likewise.
    times = {a: [[] for _ in range(STEPS)] for a in allocators}
    enq = {a: [[] for _ in range(STEPS)] for a in allocators}
    # calls[k]: the driver calls hipmem's pool made in each of step k's
    # timed runs under hipmem (maps, unmaps, physical allocations and
    # releases: each costs microseconds; read outside the timed span).
    calls = [[] for _ in range(STEPS)]
    # waits[k]: the times hipmem's pool blocked the host on a stream of its
    # own accord in each of step k's timed runs (a growth waiting for its
    # stream's frees; the GPU idles after each until work is queued again).
    waits = [[] for _ in range(STEPS)]
    device = torch.cuda.current_device()

    def driver_calls():
        return pool.backend_calls(device)["calls"]

    gc.collect()
    gc.disable()
    for p in range(args.passes):
        for k, i in enumerate(range(WARMUP, WARMUP + STEPS)):
            # Each allocator first in turn, pass by pass and step by step.
            r = (p + k) % len(allocators)
            for a in allocators[r:] + allocators[:r]:
                use(a)
                hipmem = a != "native"
                before = driver_calls() if hipmem else 0
                waits_before = pool.host_waits(device) if hipmem else 0
                ta.ENQUEUED[0] = None
                t0 = time.perf_counter()
                step(i)
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                if hipmem:
                    calls[k].append(driver_calls() - before)
                    waits[k].append(pool.host_waits(device) - waits_before)
                times[a][k].append((t1 - t0) * 1e3)
                enq[a][k].append(None if ta.ENQUEUED[0] is None else (ta.ENQUEUED[0] - t0) * 1e3)
    gc.enable()
    use("native")
    ok, detail = check()
    med = {a: [statistics.median(t) for t in times[a]] for a in allocators}
    med_enq = {a: [statistics.median(e) if None not in e else None for e in enq[a]] for a in allocators}
    host_bound = [k for k in range(STEPS)
                  if med_enq["native"][k] is not None and med_enq["native"][k] >= 0.8 * med["native"][k]]
    print(f"{args.workload}: {args.passes} passes, every step under each allocator back to back; "
          f"check {'ok' if ok else 'FAILED'} ({detail}); hipmem's idle-release window {idle_ms} ms")
    print("step  " + "  ".join(f"{a:>14s} ms (enq)" for a in allocators) + "  " +
          "  ".join(f"{a}/native" for a in allocators if a != "native"))
    for k in range(STEPS):
        cells = [f"{med[a][k]:14.2f} ({med_enq[a][k] or 0:5.2f})" for a in allocators]
        pairs = [statistics.median(x / y for x, y in zip(times[a][k], times["native"][k]))
                 for a in allocators if a != "native"]
        print(f"{k:4d}  " + "  ".join(cells) + "  " + "  ".join(f"{x:.3f}" for x in pairs)
              + f"  driver calls {sum(calls[k])}  host waits {sum(waits[k])}"
              + ("  host-bound" if k in host_bound else ""))
    for a in allocators:
        if a == "native":
            continue
        total = sum(med[a]) / sum(med["native"])
        hb = (sum(med[a][k] for k in host_bound) / sum(med["native"][k] for k in host_bound)
              if host_bound else float("nan"))
        print(f"{a} / native: every step {total:.3f}x, the {len(host_bound)} host-bound steps {hb:.3f}x; "
              f"hipmem's pool made {sum(map(sum, calls))} driver calls in the timed steps "
              f"({sum(1 for c in calls for x in c if x)} of {sum(map(len, calls))} steps made any) "
              f"and blocked the host on a stream {sum(map(sum, waits))} times")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": args.workload, "allocators": allocators, "passes": args.passes,
                       "ok": ok, "hipmem_idle_release_ms": idle_ms, "times_ms": times, "enqueue_ms": enq,
                       "hipmem_driver_calls": calls, "hipmem_host_waits": waits}, f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
