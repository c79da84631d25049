#!/usr/bin/env python3
"""What one allocation and one free cost through PyTorch's allocator
interface, hipmem and PyTorch's own allocators side by side, without Python
in the loop.

A small C++ helper (compiled with g++ against the installed PyTorch on first
use) replays a sequence of allocations and frees in a tight loop, through

  native        PyTorch's caching allocator, called as a tensor calls it (c10's
                allocate(), on the current stream; the DataPtr's deleter)
  expandable    the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  cudamallocasync  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (the driver's pool)
  hipmem        hipmem_torch_malloc / hipmem_torch_free called directly: hipmem's own cost
  hipmem-pluggable  hipmem through torch.cuda.memory.CUDAPluggableAllocator, called
                as a tensor calls it: hipmem plus the pluggable interface's own
                cost (a lock and a map of live blocks)
  hipmem-direct hipmem_torch.use_hipmem(lib, direct=True): the same interface with
                allocations going straight to hipmem (hipmem_torch_alloc) and
                tensors carrying only their pointer to the deleter
                (hipmem_torch_delete), past the pluggable allocator's map
  hipmem-noplan hipmem_torch_malloc without learned layouts (HIPMEM_POOL_PLAN=0)
  hipmem-keep   hipmem_torch_malloc without idle release (HIPMEM_TORCH_IDLE_RELEASE_MS=0):
                hipmem gives memory idle for two windows of 100 ms back on its
                allocation path, and a run slowed down by --evict-kib has many
                more such windows than the same calls in a real step

The sequences:

  alloc_calls   torch_allocators.py's alloc_calls: per step 4096 allocations of
                8 bytes to 8 MiB in an order that changes every step, each freed
                16 allocations later
  FILE.pickle[.gz]  a recorded PyTorch memory snapshot
                (torch.cuda.memory._dump_snapshot, as torch_allocators.py --record
                writes them): its allocations and frees in their order, on as many
                streams as it used (the first on PyTorch's current stream)

Each (sequence, allocator) runs in a fresh process, allocators alternating
over --reps repetitions. In a process the sequence runs --passes times
(allocations still live at the end of a pass are freed, untimed); the first
pass warms the allocator up and the figure is the median of the other
passes' time per operation (an allocation or a free). The table gives the
median over the processes and the ratio to native's; "paired" is the median
of each repetition's ratio to the native process next to it.

    python3 torch_call_cost.py --lib path/to/libhipmem.so
    python3 torch_call_cost.py --lib path/to/libhipmem.so --sequences alloc_calls,varlen_infer.pickle.gz \\
        --allocators native,hipmem,hipmem-pluggable --reps 5 --cpus 0-7

No GPU work runs: the frees complete at once, so these are the allocators'
CPU costs as a CPU-bound training or inference step pays them. Back to back,
the allocators' state stays in the CPU's caches; in a framework's step other
work runs between two calls and evicts it: --evict-kib 1024 writes 1 MiB
before each operation and times each alone (set HIPMEM_TORCH_IDLE_RELEASE_MS=0
then: the slower loop has far more 100 ms windows than a real step, and hipmem
gives idle memory back on its allocation path). A pass ends with every block
freed: a sequence that repeats a step (training) is learned again in each
pass, as after any change of phase. (Before 2026-11-26 the eviction wrote
every word of the other memory, not one per 64-byte line: the same lines
and eight times the stores, too slow under valgrind; earlier cold figures
come from that loop.)

Without PyTorch or a GPU, --without-torch runs hipmem's own allocators
(hipmem, hipmem-noplan, hipmem-keep; hipmem unless --allocators says) through the same loop built with g++
alone, on the CPU backend unless HIPMEM_BACKEND says otherwise, streams
other than the first made with hipStreamCreate. Under valgrind's cache
simulator it shows which of hipmem's calls touch which memory, e.g.

    HIPMEM_POOL_BACKING=segments HIPMEM_HOST_MEMORY=12884901888 HIPMEM_TORCH_IDLE_RELEASE_MS=0 \
    valgrind --tool=callgrind --cache-sim=yes --D1=32768,8,64 --LL=524288,8,64 \
        python3 torch_call_cost.py --child --without-torch --allocator hipmem --lib libhipmem.so \
        --sequence varlen_infer.pickle.gz --passes 2 --evict-kib 1024

(the interpreter itself, not a launcher script that starts it; separate
device allocations, since valgrind refuses the pool's large address
reservation; the cache simulated small enough that 1 MiB written between
calls empties it).
"""

import argparse
import ctypes
import gzip
import json
import os
import pickle
import random
import statistics
import subprocess
import sys
import time

# (This directory's helpers: the g++ build, and alloc_calls' definition.)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hipmem_torch  # noqa: E402
from torch_allocators import ALLOC_CALL_SIZES, ALLOC_CALLS, choose_torch_allocator, cpu_list  # noqa: E402

ALLOCATORS = ["native", "hipmem", "hipmem-pluggable", "hipmem-direct"]
KNOWN = ["native", "expandable", "cudamallocasync", "hipmem", "hipmem-pluggable", "hipmem-direct",
         "hipmem-noplan", "hipmem-keep"]
SEQUENCES = ["alloc_calls"]
# hipmem's entry points called directly: what --without-torch can run.
WITHOUT_TORCH = ["hipmem", "hipmem-noplan", "hipmem-keep"]

# Built with PyTorch (WITH_TORCH defined: every allocator) or, for
# --without-torch, alone (hipmem's entry points only).
HELPER = r"""
#ifdef WITH_TORCH
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>
#else
typedef void* cudaStream_t;
#endif
#include <chrono>
#include <cstdint>
#include <vector>
#include <sys/types.h>

typedef void* (*malloc_fn)(ssize_t, int, cudaStream_t);
typedef void (*free_fn)(void*, size_t, int, cudaStream_t);

// kinds[i]: 0 allocates slots[i], 1 frees it; sizes and streams per slot.
// direct: call mfn/ffn (hipmem_torch_malloc/free); else c10's current
// allocator as a tensor calls it (allocate() on the current stream, the
// DataPtr's deleter). Writes each pass's ns per operation to ns_out. Returns
// 0, or -(1 + op) for an allocation that failed.
// evict: bytes of other memory written before each operation (0: the
// operations run back to back and the whole loop is timed; else each one is
// timed alone, as a framework's own work between two allocator calls evicts
// the allocator's state from the CPU's caches).
extern "C" int64_t cost_run(int direct, void* mfn, void* ffn, int device, const uint8_t* kinds,
                            const int32_t* slots, int64_t n_ops, const int64_t* sizes,
                            const uint64_t* streams, int64_t n_slots, int passes, double* ns_out,
                            int64_t evict) {
  malloc_fn m = (malloc_fn)mfn;
  free_fn f = (free_fn)ffn;
  std::vector<void*> ptr(n_slots, nullptr);
#ifdef WITH_TORCH
  c10::Allocator* a = c10::cuda::CUDACachingAllocator::get();
  std::vector<c10::DataPtr> data(n_slots);
  uint64_t current = (uint64_t)(uintptr_t)c10::cuda::getCurrentCUDAStream(device).stream();
  auto use = [&](uint64_t s) {
    if (s != current) {
      c10::cuda::setCurrentCUDAStream(c10::cuda::getStreamFromExternal((cudaStream_t)s, device));
      current = s;
    }
  };
#else
  if (!direct) return -1;
#endif
  std::vector<uint64_t> other(evict / 8 + 1);
  uint64_t stamp = 0;
  for (int p = 0; p < passes; p++) {
    std::chrono::nanoseconds in_ops{0};
    auto t0 = std::chrono::steady_clock::now();
    auto op_start = t0;
    for (int64_t i = 0; i < n_ops; i++) {
      if (evict > 0) {
        stamp++;
        // One word per 64-byte line: every line written, 8x fewer stores.
        for (size_t w = 0; w < other.size(); w += 8) other[w] = stamp;
        asm volatile("" : : "r"(other.data()) : "memory");  // the writes happen
        op_start = std::chrono::steady_clock::now();
      }
      int32_t s = slots[i];
      if (direct) {
        cudaStream_t st = (cudaStream_t)streams[s];
        if (kinds[i] == 0) {
          if (!(ptr[s] = m((ssize_t)sizes[s], device, st))) return -(1 + i);
        } else {
          f(ptr[s], (size_t)sizes[s], device, st);
          ptr[s] = nullptr;
        }
      }
#ifdef WITH_TORCH
      else if (kinds[i] == 0) {
        use(streams[s]);
        data[s] = a->allocate((size_t)sizes[s]);
        if (!data[s].get()) return -(1 + i);
      } else {
        data[s].clear();
      }
#endif
      if (evict > 0) in_ops += std::chrono::steady_clock::now() - op_start;
    }
    auto t1 = std::chrono::steady_clock::now();
    auto took = evict > 0 ? in_ops : t1 - t0;
    ns_out[p] = std::chrono::duration<double, std::nano>(took).count() / (double)n_ops;
    for (int64_t s = 0; s < n_slots; s++) {
      if (ptr[s]) f(ptr[s], (size_t)sizes[s], device, (cudaStream_t)streams[s]);
      ptr[s] = nullptr;
#ifdef WITH_TORCH
      data[s].clear();
#endif
    }
  }
#ifdef WITH_TORCH
  use((uint64_t)(uintptr_t)streams[0]);
#endif
  return 0;
}
"""


# ---- sequences ---------------------------------------------------------------------------------

def alloc_calls_sequence(steps=8):
    """torch_allocators.py's alloc_calls, `steps` steps: (kinds, slots, sizes, stream of each slot)."""
    kinds, slots, slot_size, slot_stream = [], [], [], []
    for i in range(steps):
        rng = random.Random(i)
        live = []
        for _ in range(ALLOC_CALLS):
            s = len(slot_size)
            slot_size.append(rng.choice(ALLOC_CALL_SIZES))
            slot_stream.append(0)
            kinds.append(0)
            slots.append(s)
            live.append(s)
            if len(live) > 16:
                kinds.append(1)
                slots.append(live.pop(0))
        for s in live:
            kinds.append(1)
            slots.append(s)
    return kinds, slots, slot_size, slot_stream


def snapshot_sequence(path, device=0):
    """A memory snapshot's allocations and frees (a free of a block allocated
    before the recording started is left out), streams numbered in order of
    first use."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        snap = pickle.load(f)
    traces = snap["device_traces"][device]
    kinds, slots, slot_size, slot_stream = [], [], [], []
    live, stream_ids = {}, {}
    for e in traces:
        action = e["action"]
        if action == "alloc":
            s = len(slot_size)
            slot_size.append(max(1, int(e["size"])))
            slot_stream.append(stream_ids.setdefault(e.get("stream", 0), len(stream_ids)))
            live[e["addr"]] = s
            kinds.append(0)
            slots.append(s)
        elif action == "free_requested" and e["addr"] in live:
            kinds.append(1)
            slots.append(live.pop(e["addr"]))
    return kinds, slots, slot_size, slot_stream


def sequence(name):
    if name == "alloc_calls":
        return alloc_calls_sequence()
    if os.path.exists(name):
        return snapshot_sequence(name)
    raise SystemExit(f"unknown sequence {name} (alloc_calls, or a snapshot file)")


# ---- the child: one sequence under one allocator ---------------------------------------------

def child(args):
    if args.cpus:
        os.sched_setaffinity(0, cpu_list(args.cpus))
    a = args.allocator
    choose_torch_allocator(a)
    if a == "hipmem-noplan":
        os.environ["HIPMEM_POOL_PLAN"] = "0"
    if a == "hipmem-keep":
        os.environ["HIPMEM_TORCH_IDLE_RELEASE_MS"] = "0"
    kinds, slots, slot_size, slot_stream = sequence(args.sequence)
    n_streams = max(slot_stream) + 1 if slot_stream else 1
    torch = None
    if not args.without_torch:
        import torch
    direct, mfn, ffn = 0, None, None
    if a in WITHOUT_TORCH:
        os.environ.setdefault("HIPMEM_BACKEND", "host" if args.without_torch else "cuda")
        hip = ctypes.CDLL(args.lib)
        direct = 1
        mfn = ctypes.cast(hip.hipmem_torch_malloc, ctypes.c_void_p).value
        ffn = ctypes.cast(hip.hipmem_torch_free, ctypes.c_void_p).value
    elif args.without_torch:
        raise SystemExit(f"{a} needs PyTorch (without it: {', '.join(WITHOUT_TORCH)})")
    elif a in ("hipmem-pluggable", "hipmem-direct"):
        hipmem_torch.use_hipmem(args.lib, direct=a == "hipmem-direct")
    elif a not in ("native", "expandable", "cudamallocasync"):
        raise SystemExit(f"unknown allocator {a}")
    if args.without_torch:
        helper = hipmem_torch.build_cpp(HELPER, "call-cost")
        dev = 0
        # The first stream is the null stream, the others hipmem's own.
        handles = [0]
        for _ in range(n_streams - 1):
            h = ctypes.c_void_p()
            if hip.hipStreamCreate(ctypes.byref(h)) != 0:
                raise SystemExit("hipStreamCreate failed")
            handles.append(h.value)
    else:
        helper = hipmem_torch.build_against_torch(torch, "#define WITH_TORCH 1\n" + HELPER, "call-cost",
                                                  ["c10", "c10_cuda"])
        torch.cuda.init()
        dev = torch.cuda.current_device()
        # The first stream is PyTorch's current one, the others its pool's.
        handles = [torch.cuda.current_stream().cuda_stream] + [
            torch.cuda.Stream().cuda_stream for _ in range(n_streams - 1)]
    n_ops, n_slots = len(kinds), len(slot_size)
    K = (ctypes.c_uint8 * n_ops)(*kinds)
    S = (ctypes.c_int32 * n_ops)(*slots)
    Z = (ctypes.c_int64 * n_slots)(*slot_size)
    T = (ctypes.c_uint64 * n_slots)(*[handles[s] for s in slot_stream])
    out = (ctypes.c_double * args.passes)()
    helper.cost_run.restype = ctypes.c_int64
    if torch is not None:
        torch.cuda.synchronize()
    rc = helper.cost_run(direct, ctypes.c_void_p(mfn), ctypes.c_void_p(ffn), dev, K, S,
                         ctypes.c_int64(n_ops), Z, T, ctypes.c_int64(n_slots), args.passes, out,
                         ctypes.c_int64(args.evict_kib << 10))
    if torch is not None:
        torch.cuda.synchronize()
    ok = rc == 0
    ns = list(out)
    print("RESULT " + json.dumps({
        "sequence": args.sequence, "allocator": a, "ok": ok,
        "detail": "" if ok else f"allocation {-rc - 1} failed",
        "ops": n_ops, "ns_per_op": statistics.median(ns[1:]) if len(ns) > 1 else ns[0],
        "first_pass_ns_per_op": ns[0], "pass_ns_per_op": [round(x, 1) for x in ns],
    }), flush=True)


# ---- the parent: fresh processes, alternating order ------------------------------------------

def run_child(seq, allocator, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--sequence", seq, "--allocator", allocator,
           "--passes", str(args.passes), "--evict-kib", str(args.evict_kib)]
    if args.lib:
        cmd += ["--lib", args.lib]
    if args.cpus:
        cmd += ["--cpus", args.cpus]
    if args.without_torch:
        cmd += ["--without-torch"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
    return {"sequence": seq, "allocator": allocator, "ok": False,
            "detail": f"exit {p.returncode}: " + " | ".join(tail)}


def summarize(results, allocators, sequences):
    head = ("sequence", "allocator", "ops", "ns per op", "vs native", "paired", "1st pass ns", "processes")
    rows = []
    for seq in sequences:
        native = [r for r in results if r["sequence"] == seq and r["allocator"] == "native" and r["ok"]]
        base = statistics.median(r["ns_per_op"] for r in native) if native else None
        by_rep = {r["rep"]: r["ns_per_op"] for r in native}
        for a in allocators:
            rs = [r for r in results if r["sequence"] == seq and r["allocator"] == a]
            good = [r for r in rs if r["ok"]]
            if not good:
                rows.append((os.path.basename(seq), a, "", "FAILED", "", "", "", rs[-1]["detail"] if rs else ""))
                continue
            ns = statistics.median(r["ns_per_op"] for r in good)
            pairs = [r["ns_per_op"] / by_rep[r["rep"]] for r in good if r["rep"] in by_rep]
            rows.append((os.path.basename(seq), a, str(good[0]["ops"]), f"{ns:.0f}",
                         f"{ns / base:.2f}" if base else "-",
                         f"{statistics.median(pairs):.2f}" if pairs else "-",
                         f"{statistics.median(r['first_pass_ns_per_op'] for r in good):.0f}",
                         f"{len(good)}/{len(rs)}: " + " ".join(f"{r['ns_per_op']:.0f}" for r in good)))
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for row in [head] + rows:
        print("  ".join(str(x).ljust(w) for x, w in zip(row, widths)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="libhipmem.so (needed for the hipmem allocators)")
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--sequences", default=",".join(SEQUENCES),
                    help="alloc_calls and/or snapshot files, separated by commas")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--passes", type=int, default=6, help="passes over the sequence per process (the first warms up)")
    ap.add_argument("--cpus", help="pin every process to these CPUs (e.g. 0-7)")
    ap.add_argument("--evict-kib", type=int, default=0,
                    help="write this many KiB of other memory before each operation and time each alone "
                         "(the allocator's state is then cold, as between a framework's calls; the times "
                         "include two clock reads per operation)")
    ap.add_argument("--without-torch", action="store_true",
                    help="hipmem's allocators only (hipmem, hipmem-noplan, hipmem-keep), through a helper "
                         "built with g++ alone: no PyTorch and no GPU needed (HIPMEM_BACKEND defaults to host)")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--json", help="write every process's result to this file")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--sequence", help=argparse.SUPPRESS)
    ap.add_argument("--allocator", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.passes < 1 or args.evict_kib < 0:
        raise SystemExit("--passes must be at least 1 and --evict-kib at least 0")
    if args.child:
        return child(args)
    allocators = args.allocators.split(",")
    sequences = args.sequences.split(",")
    for a in allocators:
        if a not in KNOWN:
            raise SystemExit(f"unknown allocator {a} (known: {', '.join(KNOWN)})")
    for s in sequences:
        if s != "alloc_calls" and not os.path.exists(s):
            raise SystemExit(f"unknown sequence {s} (alloc_calls, or a snapshot file)")
    if any(a.startswith("hipmem") for a in allocators) and not args.lib:
        raise SystemExit("--lib path/to/libhipmem.so is needed for the hipmem allocators")
    if args.without_torch:
        if args.allocators == ap.get_default("allocators"):
            allocators = ["hipmem"]
        needs_torch = [a for a in allocators if a not in WITHOUT_TORCH]
        if needs_torch:
            raise SystemExit(f"--without-torch runs {', '.join(WITHOUT_TORCH)} only, not {', '.join(needs_torch)}")
    results = []
    for rep in range(args.reps):
        order = allocators if rep % 2 == 0 else allocators[::-1]
        for seq in sequences:
            for a in order:
                t0 = time.time()
                r = run_child(seq, a, args)
                r["rep"] = rep
                results.append(r)
                print(f"rep {rep} {os.path.basename(seq)} {a}: " +
                      (f"{r['ns_per_op']:.0f} ns per op" if r["ok"] else "FAILED " + r["detail"]) +
                      f" ({time.time() - t0:.0f} s)", flush=True)
    summarize(results, allocators, sequences)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
