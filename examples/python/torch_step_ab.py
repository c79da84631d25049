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
  hipmem-b       the same entry points of a second build (--lib-b, another
                 file: the library is loaded once more, with its own
                 runtime and pool), so that two builds take turns step by
                 step in one process; not in the default set
  floor          a control, not an allocator to use: the least an allocator
                 behind this switch can cost. One lock and one lookup of a
                 size class per call, blocks from cudaMalloc kept forever in
                 per-class lists (sizes rounded up to 512 bytes, above 1 MiB
                 to 2 MiB), the class carried to the deleter in the DataPtr,
                 no stream order (a block is reused by whichever stream asks
                 next: only for the workloads on one stream, not
                 side_stream). Its ratio to native is what the switch itself
                 adds or saves; hipmem-direct's ratio to floor's is hipmem's
                 own work. Not in the default set.

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
    # two builds and the floor control, step by step in one process:
    python3 torch_step_ab.py --lib a/libhipmem.so --lib-b b/libhipmem.so \\
        --allocators native,hipmem-direct,hipmem-b,floor --passes 8 --cpus 4-11
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
#include <mutex>
#include <unordered_map>
#include <vector>

namespace {
using c10::cuda::CUDACachingAllocator::CUDAAllocator;
using Pluggable = torch::cuda::CUDAPluggableAllocator::CUDAPluggableAllocator;
typedef void* (*malloc_fn)(ssize_t, int, cudaStream_t);
typedef void (*record_fn)(void*, cudaStream_t);

CUDAAllocator* g_native = nullptr;        // PyTorch's caching allocator
malloc_fn g_alloc = nullptr;              // hipmem_torch_alloc
c10::DeleterFnPtr g_delete = nullptr;     // hipmem_torch_delete
record_fn g_record = nullptr;             // hipmem_torch_record_stream
// The same of a second build (--lib-b), or null.
malloc_fn g_alloc_b = nullptr;
c10::DeleterFnPtr g_delete_b = nullptr;
record_fn g_record_b = nullptr;
// 0 native, 1 hipmem's direct entry points, 2 the floor control, 3 the
// second build's direct entry points.
std::atomic<int> g_mode{0};

// The floor control: a block's header, made once with the block and kept
// with it for ever (the DataPtr's context), and each size class's free list.
struct FloorBlock {
  void* ptr;
  size_t size;
};
std::mutex g_floor_lock;
std::unordered_map<size_t, std::vector<FloorBlock*>> g_floor_free;

size_t floor_class(size_t size) {
  if (size <= (size_t(1) << 20)) return (size + 511) & ~size_t(511);
  return (size + (size_t(2) << 20) - 1) & ~((size_t(2) << 20) - 1);
}

void floor_delete(void* ctx) {
  auto* b = static_cast<FloorBlock*>(ctx);
  std::lock_guard<std::mutex> g(g_floor_lock);
  g_floor_free[b->size].push_back(b);
}

c10::DataPtr floor_allocate(size_t size, c10::DeviceIndex device) {
  size_t c = floor_class(size == 0 ? 1 : size);
  FloorBlock* b = nullptr;
  {
    std::lock_guard<std::mutex> g(g_floor_lock);
    auto& list = g_floor_free[c];
    if (!list.empty()) {
      b = list.back();
      list.pop_back();
    }
  }
  if (!b) {
    void* p = nullptr;
    if (cudaMalloc(&p, c) != cudaSuccess) {
      // Out of memory: every cached block goes back (their frees were
      // ordered on the one stream; cudaFree waits for the device), then
      // once more.
      (void)cudaGetLastError();
      std::lock_guard<std::mutex> g(g_floor_lock);
      for (auto& kv : g_floor_free) {
        for (FloorBlock* f : kv.second) {
          C10_CUDA_CHECK(cudaFree(f->ptr));
          delete f;
        }
        kv.second.clear();
      }
      C10_CUDA_CHECK(cudaMalloc(&p, c));
    }
    b = new FloorBlock{p, c};
  }
  return {b->ptr, b, floor_delete, c10::Device(c10::DeviceType::CUDA, device)};
}

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
    int mode = g_mode.load(std::memory_order_relaxed);
    if (mode == 1) {
      c10::DeviceIndex device = current_device();
      void* r = g_alloc((ssize_t)size, device, c10::cuda::getCurrentCUDAStream(device));
      return {r, r, g_delete, c10::Device(c10::DeviceType::CUDA, device)};
    }
    if (mode == 3 && g_alloc_b) {
      c10::DeviceIndex device = current_device();
      void* r = g_alloc_b((ssize_t)size, device, c10::cuda::getCurrentCUDAStream(device));
      return {r, r, g_delete_b, c10::Device(c10::DeviceType::CUDA, device)};
    }
    if (mode == 2) {
      // (The same questions as the other two ask: the device and its stream.)
      c10::DeviceIndex device = current_device();
      (void)c10::cuda::getCurrentCUDAStream(device);
      return floor_allocate(size, device);
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
    } else if (g_delete_b && ptr.get_deleter() == g_delete_b) {
      if (g_record_b) g_record_b(ptr.get(), stream.stream());
    } else if (ptr.get_deleter() == floor_delete) {
      // (The floor control keeps no stream order: one-stream workloads only.)
    } else {
      g_native->recordStream(ptr, stream);
    }
  }
};
}  // namespace

// Before any CUDA allocation: keeps PyTorch's caching allocator and
// installs the switch.
extern "C" int ab_install(void* alloc, void* del, void* record, void* alloc_b, void* del_b,
                          void* record_b, char* why, size_t why_len) {
  try {
    g_native = c10::cuda::CUDACachingAllocator::get();
    g_alloc = (malloc_fn)alloc;
    g_delete = (c10::DeleterFnPtr)del;
    g_record = (record_fn)record;
    g_alloc_b = (malloc_fn)alloc_b;
    g_delete_b = (c10::DeleterFnPtr)del_b;
    g_record_b = (record_fn)record_b;
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

MODES = {"native": 0, "hipmem-direct": 1, "floor": 2, "hipmem-b": 3}


def install(torch, lib, lib_b=""):
    """Installs the switching allocator (before any CUDA allocation);
    returns the function that chooses the allocator by name."""
    h = hipmem_torch.build_against_torch(torch, HELPER, "step-ab", ["torch_cuda", "torch", "c10_cuda", "c10"])
    h.ab_install.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_char_p, ctypes.c_size_t]
    h.ab_mode.argtypes = [ctypes.c_int]
    dll = ctypes.CDLL(os.path.abspath(lib))
    # (ctypes loads each library locally: a second file is a second
    # instance, with its own statics, runtime and pool.)
    dll_b = ctypes.CDLL(os.path.abspath(lib_b)) if lib_b else None

    def address(d, name):
        return ctypes.cast(getattr(d, name), ctypes.c_void_p).value if d else None

    names = ("hipmem_torch_alloc", "hipmem_torch_delete", "hipmem_torch_record_stream")
    why = ctypes.create_string_buffer(4096)
    rc = h.ab_install(*[address(dll, n) for n in names], *[address(dll_b, n) for n in names], why, len(why))
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
    ap.add_argument("--lib-b", default="", help="a second build's libhipmem.so, another file (the hipmem-b allocator)")
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
    if "floor" in allocators and args.workload == "side_stream":
        raise SystemExit("--allocators: the floor control keeps no stream order; not for side_stream")
    if ("hipmem-b" in allocators) != bool(args.lib_b):
        raise SystemExit("--allocators hipmem-b and --lib-b go together")
    if args.lib_b and os.path.samefile(args.lib, args.lib_b):
        raise SystemExit("--lib-b must be another file than --lib (the same file loads only once)")
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

    use = install(torch, args.lib, args.lib_b)
    pools = {"hipmem-direct": hipmem_torch.Pool(os.path.abspath(args.lib))}
    if args.lib_b:
        pools["hipmem-b"] = hipmem_torch.Pool(os.path.abspath(args.lib_b))
    step, check = ta.make_workload(torch, args.workload, WARMUP + STEPS, args.varlen_seed)
    for i in range(WARMUP):
        for a in allocators:
            use(a)
            step(i)
    torch.cuda.synchronize()
    # times[a][k]: step k's times under a, one per pass; enq likewise.
    times = {a: [[] for _ in range(STEPS)] for a in allocators}
    enq = {a: [[] for _ in range(STEPS)] for a in allocators}
    # calls[a][k]: the driver calls hipmem's pool made in each of step k's
    # timed runs under hipmem allocator a (maps, unmaps, physical
    # allocations and releases: each costs microseconds; read outside the
    # timed span).
    calls = {a: [[] for _ in range(STEPS)] for a in pools}
    # waits[a][k]: the times hipmem's pool blocked the host on a stream of its
    # own accord in each of step k's timed runs (a growth waiting for its
    # stream's frees; the GPU idles after each until work is queued again).
    waits = {a: [[] for _ in range(STEPS)] for a in pools}
    device = torch.cuda.current_device()

    def driver_calls(a):
        return pools[a].backend_calls(device)["calls"]

    gc.collect()
    gc.disable()
    for p in range(args.passes):
        for k, i in enumerate(range(WARMUP, WARMUP + STEPS)):
            # Each allocator first in turn, pass by pass and step by step.
            r = (p + k) % len(allocators)
            for a in allocators[r:] + allocators[:r]:
                use(a)
                hipmem = a in pools
                before = driver_calls(a) if hipmem else 0
                waits_before = pools[a].host_waits(device) if hipmem else 0
                ta.ENQUEUED[0] = None
                t0 = time.perf_counter()
                step(i)
                torch.cuda.synchronize()
                t1 = time.perf_counter()
                if hipmem:
                    calls[a][k].append(driver_calls(a) - before)
                    waits[a][k].append(pools[a].host_waits(device) - waits_before)
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
              + "".join(f"  {a}: driver calls {sum(calls[a][k])}, host waits {sum(waits[a][k])}"
                        for a in allocators if a in pools)
              + ("  host-bound" if k in host_bound else ""))
    for a in allocators:
        if a == "native":
            continue
        total = sum(med[a]) / sum(med["native"])
        hb = (sum(med[a][k] for k in host_bound) / sum(med["native"][k] for k in host_bound)
              if host_bound else float("nan"))
        line = f"{a} / native: every step {total:.3f}x, the {len(host_bound)} host-bound steps {hb:.3f}x"
        if a in pools:
            line += (f"; hipmem's pool made {sum(map(sum, calls[a]))} driver calls in the timed steps "
                     f"({sum(1 for c in calls[a] for x in c if x)} of {sum(map(len, calls[a]))} steps made any) "
                     f"and blocked the host on a stream {sum(map(sum, waits[a]))} times")
        print(line)
    # hipmem's own work (each step's paired ratio to the floor control), and
    # the second build against the first.
    for x_name, y_name in (("hipmem-direct", "floor"), ("hipmem-b", "floor"), ("hipmem-b", "hipmem-direct")):
        if x_name not in allocators or y_name not in allocators:
            continue
        pairs = [statistics.median(x / y for x, y in zip(times[x_name][k], times[y_name][k]))
                 for k in range(STEPS)]
        hb = [pairs[k] for k in host_bound]
        print(f"{x_name} / {y_name}: median of the steps' paired ratios {statistics.median(pairs):.3f}x"
              + (f", of the host-bound steps' {statistics.median(hb):.3f}x" if hb else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"workload": args.workload, "allocators": allocators, "passes": args.passes,
                       "ok": ok, "hipmem_idle_release_ms": idle_ms, "times_ms": times, "enqueue_ms": enq,
                       "hipmem_driver_calls": calls.get("hipmem-direct", []),
                       "hipmem_host_waits": waits.get("hipmem-direct", []),
                       "hipmem_b_driver_calls": calls.get("hipmem-b", []),
                       "hipmem_b_host_waits": waits.get("hipmem-b", [])}, f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
