#!/usr/bin/env python3
"""PyTorch workloads under four allocators, side by side.

Runs each (workload, allocator) pair in a fresh process, over several
repetitions whose allocator order alternates, and prints, for each pair, the
median step time (against native's: of the medians, and "paired", the median
of each repetition's ratio to the native process that ran next to it, which
moves less with the machine) and the peak reserved / peak allocated memory
after a warm-up (and, as "warm-up", the same ratio over the warm-up's steps,
where an allocator learns):

  native       PyTorch's caching allocator
  expandable   the caching allocator with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  cudamallocasync  PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync (the driver's pool)
  hipmem       libhipmem through torch.cuda.memory.CUDAPluggableAllocator
               (peaks: the pool's ReservedMemHigh / UsedMemHigh, reset after the warm-up)
  hipmem-lowmem  the same with an unlimited budget for moving memory
               (HIPMEM_POOL_MOVE_BURST_MS=60000): least memory, more driver time
               and waits for the GPU before moving memory (not in the default
               set; name it with --allocators)
  hipmem-units  hipmem mapping each 2 MiB unit alone, not each growth of
               128 MiB or more in one call (HIPMEM_POOL_GROUP_MIB=0; not in the
               default set)
  hipmem-segments  hipmem's pool on separate device allocations, no virtual
               memory (HIPMEM_POOL_BACKING=segments; not in the default set)
  hipmem-noplan  hipmem without learned layouts (HIPMEM_POOL_PLAN=0; not in
               the default set)
  pluggable-async  the driver's pool (cudaMallocAsync) through
               CUDAPluggableAllocator, as hipmem is plugged in: what the
               pluggable interface itself costs a step, against
               "cudamallocasync", the same pool called from inside PyTorch (a
               20-line shim compiled with g++ on first use; not in the
               default set)
  hipmem-zone  hipmem with zone placement (HIPMEM_TORCH_ZONE=1; not in the
               default set)
  hipmem-nolend  hipmem whose pools lend no group's free units to a growth
               (HIPMEM_POOL_LEND=0; not in the default set)
  hipmem-keep  hipmem keeping memory it no longer needs, as PyTorch's
               allocators do (no idle release: HIPMEM_TORCH_IDLE_RELEASE_MS=0;
               not in the default set)
  hipmem-nowait  hipmem whose large growths (256 MiB or more) do not wait for
               the GPU to finish the stream's frees before giving memory
               back (HIPMEM_POOL_GROWTH_WAIT=0: only frees already complete
               go back first; not in the default set)
  hipmem-lendpending  hipmem whose growths also lend memory whose frees
               are still pending on their stream, so that a large growth
               need not wait for the GPU to finish them first
               (HIPMEM_POOL_LEND_PENDING=1; not in the default set)
  hipmem-usualplan  hipmem whose plans give back all unused memory before
               their arena is laid out, as before 2026-11-28
               (HIPMEM_POOL_PLAN_IN_PLACE=0; not in the default set)
  hipmem-pieces  hipmem whose run's first steps map their growths in pieces
               of up to 8 MiB, not 2 MiB units: about a third of the driver
               calls (HIPMEM_POOL_FIRST_PIECE_MIB=8; not in the default set)
  hipmem-mixed  hipmem whose pools keep tiny blocks (16 KiB or less) in one
               heap with the rest, as before stop 78, not apart with a cache
               of their own per stream (HIPMEM_POOL_TINY_APART=0; not in the
               default set)
  hipmem-direct  hipmem with tensors' allocations going to it straight from
               PyTorch's allocator interface, past the pluggable allocator's
               locked map of live blocks (hipmem_torch.use_hipmem(lib,
               direct=True): a small C++ subclass compiled with g++ on first
               use; not in the default set)
  hipmem-b     hipmem from a second library (--lib-b): two builds compared
               in the same run, alternating as every allocator does (not in
               the default set)

The warm-up is 6 steps: hipmem's pool learns a repeating step and starts
its plan within the first four or five. The timed steps (10) then run twice
over the same inputs (--passes): "step ms" is the second pass's median,
"1st pass ms" the first's. Where batch shapes vary (variable-length
inference), a shape's first step is dominated by PyTorch choosing kernels
for it and varies by a third between processes under every allocator; the
second pass compares the allocators. The memory peaks cover both passes.
Each pass starts after a full garbage collection, and Python's collector is
off in the timed steps (--gc on leaves it on): a collection lands in
whichever step the interpreter's object count triggers it, which differs
between allocators (with neither, every hipmem process of the side stream
ran its 20th step 0.5-1 ms slow, and no native one did).

    python3 torch_allocators.py --lib path/to/libhipmem.so            # everything
    python3 torch_allocators.py --workloads gpt_train,varlen_infer --reps 3 --json out.json
    HIPMEM_LOG=debug python3 torch_allocators.py --lib L --allocators hipmem --logs DIR
                                                # each child's output, with the pool's log
    python3 torch_allocators.py --record DIR    # PyTorch memory snapshots (native allocator)
                                                # of each workload, for `hipmem replay`
    python3 torch_allocators.py --record DIR --workloads varlen_infer --varlen-seed 11 --passes 1
                                                # inference on other batch shapes
    python3 torch_allocators.py --lib path/to/libhipmem.so --workloads alloc_calls \
        --allocators native,hipmem,pluggable-async      # each allocator's cost per call
    python3 torch_allocators.py --lib path/to/libhipmem.so --allocators native,hipmem \
        --side-by-side 0:1-8,1:9-16     # a round's processes at once, one per GPU, each
                                        # timed step started in both together

After each step of the last pass the child times a fixed piece of host work
(`last_pass_probe_ms` in --json): on a virtual machine a CPU runs it, and a
host-bound step, up to 1.6x slower for seconds at a time, which is most of the
spread between processes of one allocator. torch_step_ab.py compares
allocators inside one process, step by step, where that spread cannot reach.

The workloads: gpt_train, varlen_infer, cnn_train, ckpt_train, side_stream
and, not in the default set, alloc_calls: no GPU work, 4096 tensors of 8
bytes to 8 MiB per step in an order that differs every step, each freed 16
later; it prints what one tensor made and freed costs under each allocator
(Python included, so the differences between allocators are what counts).

Each child checks its own result (finite losses, data that crossed a side
stream intact) and the parent reports a failed check as a failure.
"""

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time

ALLOCATORS = ["native", "expandable", "cudamallocasync", "hipmem"]
WORKLOADS = ["gpt_train", "varlen_infer", "cnn_train", "ckpt_train", "side_stream"]
# Not in the default set: the allocator's cost per call through PyTorch.
EXTRA_WORKLOADS = ["alloc_calls"]
# Allocations per step of alloc_calls, and their sizes.
ALLOC_CALLS = 4096
ALLOC_CALL_SIZES = [8, 256, 2048, 6144, 8192, 2 << 20, 6 << 20, 8 << 20]


# ---- the child: one workload under one allocator ------------------------------------------

# PyTorch's own allocators other than native, by the setting that chooses them.
TORCH_ALLOC_CONF = {"expandable": "expandable_segments:True", "cudamallocasync": "backend:cudaMallocAsync"}


def choose_torch_allocator(name):
    """Sets PYTORCH_CUDA_ALLOC_CONF for allocator `name` (expandable,
    cudamallocasync; unset for any other), before torch is imported."""
    if name in TORCH_ALLOC_CONF:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = TORCH_ALLOC_CONF[name]
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)


def setup_allocator(name, lib):
    """Chooses the allocator before torch touches the GPU; returns a stats reader."""
    choose_torch_allocator(name)
    import torch

    if name == "hipmem-lowmem":
        os.environ["HIPMEM_POOL_MOVE_BURST_MS"] = "60000"
        os.environ["HIPMEM_POOL_MOVE_SHARE"] = "100"
    if name == "hipmem-units":
        os.environ["HIPMEM_POOL_GROUP_MIB"] = "0"
    if name == "hipmem-segments":
        os.environ["HIPMEM_POOL_BACKING"] = "segments"
    if name == "hipmem-noplan":
        os.environ["HIPMEM_POOL_PLAN"] = "0"
    if name == "hipmem-nolend":
        os.environ["HIPMEM_POOL_LEND"] = "0"
    if name == "hipmem-keep":
        os.environ["HIPMEM_TORCH_IDLE_RELEASE_MS"] = "0"
    if name == "hipmem-nowait":
        os.environ["HIPMEM_POOL_GROWTH_WAIT"] = "0"
    if name == "hipmem-lendpending":
        os.environ["HIPMEM_POOL_LEND_PENDING"] = "1"
    if name == "hipmem-zone":
        os.environ["HIPMEM_TORCH_ZONE"] = "1"
    if name == "hipmem-usualplan":
        os.environ["HIPMEM_POOL_PLAN_IN_PLACE"] = "0"
    if name == "hipmem-pieces":
        os.environ["HIPMEM_POOL_FIRST_PIECE_MIB"] = "8"
    if name == "hipmem-mixed":
        os.environ["HIPMEM_POOL_TINY_APART"] = "0"
    if name == "pluggable-async":
        return (torch,) + pluggable_async(torch)
    if not name.startswith("hipmem"):
        def stats():
            return {
                "reserved_high": torch.cuda.max_memory_reserved(),
                "allocated_high": torch.cuda.max_memory_allocated(),
                "reserved_now": torch.cuda.memory_reserved(),
                "allocated_now": torch.cuda.memory_allocated(),
            }

        def reset():
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

        return torch, stats, reset

    import hipmem_torch

    pool = hipmem_torch.use_hipmem(lib, direct=name == "hipmem-direct")

    def stats():
        dev = torch.cuda.current_device()
        s = pool.stats(dev)
        c = pool.plan_counts(dev)
        return {"reserved_high": s.reserved_high, "allocated_high": s.used_high,
                "reserved_now": s.reserved_current, "allocated_now": s.used_current,
                "plan": {"plans": c.plans, "served": c.served, "missed": c.missed, "ended": c.ended},
                "backend_calls": pool.backend_calls(dev)["calls"]}

    def reset():
        torch.cuda.synchronize()
        pool.reset_peak(torch.cuda.current_device())

    return torch, stats, reset


SHIM = r"""
#include <cuda_runtime.h>
#include <stdint.h>
#include <sys/types.h>
extern "C" {
void* shim_malloc(ssize_t size, int device, cudaStream_t stream) {
    void* p = nullptr;
    if (size < 0 || cudaMallocAsync(&p, (size_t)size, stream) != cudaSuccess) return nullptr;
    return p;
}
void shim_free(void* ptr, size_t size, int device, cudaStream_t stream) { cudaFreeAsync(ptr, stream); }
/* The device's default pool: keep everything (as PyTorch's cudaMallocAsync backend does), read
   and reset its peaks. */
int shim_pool(int device, int attr, uint64_t* value, int set) {
    cudaMemPool_t pool;
    if (cudaDeviceGetDefaultMemPool(&pool, device) != cudaSuccess) return -1;
    return set ? cudaMemPoolSetAttribute(pool, (cudaMemPoolAttr)attr, value)
               : cudaMemPoolGetAttribute(pool, (cudaMemPoolAttr)attr, value);
}
}
"""


def pluggable_async(torch):
    """cudaMallocAsync through CUDAPluggableAllocator (see "pluggable-async")."""
    import ctypes
    import hipmem_torch
    so = hipmem_torch.build_against_torch(torch, SHIM, "pluggable-async", [])
    alloc = torch.cuda.memory.CUDAPluggableAllocator(so._name, "shim_malloc", "shim_free")
    torch.cuda.memory.change_current_allocator(alloc)
    # cudaMemPoolAttrReleaseThreshold, ReservedMemCurrent, ReservedMemHigh, UsedMemCurrent, UsedMemHigh
    THRESHOLD, RES, RES_HIGH, USED, USED_HIGH = 4, 5, 6, 7, 8

    def attr(a, value=None):
        v = ctypes.c_uint64(0 if value is None else value)
        if so.shim_pool(torch.cuda.current_device(), a, ctypes.byref(v), value is not None) != 0:
            raise RuntimeError(f"cudaMemPool attribute {a}")
        return v.value

    torch.cuda.init()
    attr(THRESHOLD, 2**64 - 1)

    def stats():
        return {"reserved_high": attr(RES_HIGH), "allocated_high": attr(USED_HIGH),
                "reserved_now": attr(RES), "allocated_now": attr(USED)}

    def reset():
        torch.cuda.synchronize()
        attr(RES_HIGH, 0)
        attr(USED_HIGH, 0)

    return stats, reset


def gpt(torch, n_layer, n_head, n_embd, vocab, block, checkpoint=False):
    """A GPT-2 shaped decoder (nanoGPT style), randomly initialized."""
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(n_embd)
            self.attn = nn.Linear(n_embd, 3 * n_embd)
            self.proj = nn.Linear(n_embd, n_embd)
            self.ln2 = nn.LayerNorm(n_embd)
            self.fc = nn.Linear(n_embd, 4 * n_embd)
            self.fc2 = nn.Linear(4 * n_embd, n_embd)

        def attention(self, x):
            b, t, c = x.shape
            q, k, v = self.attn(self.ln1(x)).split(n_embd, dim=2)
            q = q.view(b, t, n_head, c // n_head).transpose(1, 2)
            k = k.view(b, t, n_head, c // n_head).transpose(1, 2)
            v = v.view(b, t, n_head, c // n_head).transpose(1, 2)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))

        def body(self, x):
            x = x + self.attention(x)
            return x + self.fc2(F.gelu(self.fc(self.ln2(x))))

        def forward(self, x):
            if checkpoint and self.training:
                return torch.utils.checkpoint.checkpoint(self.body, x, use_reentrant=False)
            return self.body(x)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, n_embd)
            self.wpe = nn.Embedding(block, n_embd)
            self.blocks = nn.ModuleList([Block() for _ in range(n_layer)])
            self.ln = nn.LayerNorm(n_embd)
            self.head = nn.Linear(n_embd, vocab, bias=False)
            self.head.weight = self.wte.weight

        def forward(self, idx, targets=None):
            t = idx.shape[1]
            x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x))
            if targets is None:
                return logits
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def varlen_model(torch, dev):
    """Variable-length inference's model: a 24-layer GPT-2 shaped decoder, for inference."""
    return gpt(torch, 24, 16, 1024, 50304, 2048).to(dev).eval()


# When the last step finished enqueuing its work, before it waited for the
# GPU (time.perf_counter()); set by every workload's step but alloc_calls's,
# so that a slow step can be told host-bound from GPU-bound.
ENQUEUED = [None]


def infer_batch(torch, model, gen, b, t):
    """One batch of variable-length inference: `b` sequences of `t` random
    tokens, bf16 autocast; returns the sum of the next tokens (synchronizes)."""
    x = torch.randint(0, 50304, (b, t), device="cuda", generator=gen)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
        # Only the last position's logits leave the step (generation).
        nxt = logits[:, -1, :].float().softmax(-1).argmax(-1)
    total = nxt.sum()
    ENQUEUED[0] = time.perf_counter()
    return int(total.item())


def make_workload(torch, name, steps, varlen_seed=7):
    """Returns (step function, check function). Every step synchronizes.
    `varlen_seed` chooses variable-length inference's batch shapes."""
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)
    losses = []

    if name in ("gpt_train", "ckpt_train"):
        ckpt = name == "ckpt_train"
        batch, seq = (16, 1024) if ckpt else (8, 1024)
        model = gpt(torch, 12, 12, 768, 50304, 1024, checkpoint=ckpt).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)

        def step(i):
            x = torch.randint(0, 50304, (batch, seq), device=dev, generator=gen)
            y = torch.randint(0, 50304, (batch, seq), device=dev, generator=gen)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ENQUEUED[0] = time.perf_counter()
            losses.append(loss.item())

        def check():
            return all(l == l and abs(l) < 1e4 for l in losses), f"final loss {losses[-1]:.4f}"

        return step, check

    if name == "varlen_infer":
        model = varlen_model(torch, dev)
        rng = random.Random(varlen_seed)
        shapes = [(rng.randint(1, 32), rng.randint(16, 2048)) for _ in range(1000)]
        sums = []

        def step(i):
            b, t = shapes[i % len(shapes)]
            sums.append(infer_batch(torch, model, gen, b, t))

        def check():
            return len(sums) > 0, f"{len(sums)} batches"

        return step, check

    if name == "cnn_train":
        import torchvision

        model = torchvision.models.resnet50(weights=None).to(dev).to(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        lossf = torch.nn.CrossEntropyLoss()

        def step(i):
            x = torch.randn(64, 3, 224, 224, device=dev, generator=gen).to(memory_format=torch.channels_last)
            y = torch.randint(0, 1000, (64,), device=dev, generator=gen)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = lossf(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ENQUEUED[0] = time.perf_counter()
            losses.append(loss.item())

        def check():
            return all(l == l and abs(l) < 1e4 for l in losses), f"final loss {losses[-1]:.4f}"

        return step, check

    if name == "side_stream":
        # A data pipeline: batches are copied from page-locked host memory on
        # a side stream into tensors allocated on that stream, handed to the
        # default stream (wait_stream + record_stream), and consumed there.
        side = torch.cuda.Stream()
        model = torch.nn.Sequential(
            torch.nn.Linear(4096, 8192), torch.nn.GELU(), torch.nn.Linear(8192, 4096)
        ).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        host = [torch.randn(256, 4096, generator=torch.Generator().manual_seed(k)).pin_memory() for k in range(4)]
        expect = [float(h.double().sum()) for h in host]
        seen = []

        def step(i):
            k = i % len(host)
            with torch.cuda.stream(side):
                x = host[k].to(dev, non_blocking=True)          # allocated on the side stream
                scratch = torch.empty(1 << 24, device=dev)      # side-stream temporaries
                scratch.fill_(1.0)
                del scratch
            torch.cuda.current_stream().wait_stream(side)
            x.record_stream(torch.cuda.current_stream())
            seen.append((k, float(x.double().sum())))
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            ENQUEUED[0] = time.perf_counter()
            losses.append(loss.item())
            del x

        def check():
            bad = [(k, s) for k, s in seen if abs(s - expect[k]) > 1e-3 * max(1.0, abs(expect[k]))]
            ok = not bad and all(l == l for l in losses)
            return ok, f"{len(seen)} batches crossed the side stream" + (f", {len(bad)} corrupted" if bad else "")

        return step, check

    if name == "alloc_calls":
        # The allocator's own cost as PyTorch calls it, without GPU work:
        # each step makes 4096 tensors of the sizes variable-length
        # inference allocates most (8 bytes to 8 MiB), in an order that
        # differs every step (nothing repeats, as with varying shapes), and
        # frees each 16 tensors later. The step time divided by 4096 is one
        # allocation and one free through PyTorch, Python included.
        made = []

        def step(i):
            rng = random.Random(i)
            live = []
            for _ in range(ALLOC_CALLS):
                live.append(torch.empty(rng.choice(ALLOC_CALL_SIZES), dtype=torch.uint8, device=dev))
                if len(live) > 16:
                    live.pop(0)
            made.append(len(live))
            live.clear()

        def check():
            return all(n == 16 for n in made), f"{ALLOC_CALLS} allocations and frees per step"

        return step, check

    raise SystemExit(f"unknown workload {name}")


class SmClock:
    """The GPU's current SM clock in MHz through NVML (read only), or None
    where NVML is not there: a slow step on a GPU clocked lower is the
    GPU's, not the allocator's."""

    def __init__(self, torch):
        self.get = None
        try:
            import ctypes

            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() != 0:
                return
            handle = ctypes.c_void_p()
            bus = torch.cuda.get_device_properties(torch.cuda.current_device())
            bus_id = "{:08x}:{:02x}:{:02x}.0".format(
                getattr(bus, "pci_domain_id", 0), getattr(bus, "pci_bus_id", 0), getattr(bus, "pci_device_id", 0))
            if lib.nvmlDeviceGetHandleByPciBusId_v2(bus_id.encode(), ctypes.byref(handle)) != 0:
                # (Where PyTorch does not tell the bus: the only GPU there is.)
                count = ctypes.c_uint()
                if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or count.value != 1:
                    return
                if lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) != 0:
                    return
            mhz = ctypes.c_uint()

            def get():
                # NVML_CLOCK_SM = 1
                return mhz.value if lib.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(mhz)) == 0 else None

            self.get = get
        except (OSError, AttributeError):
            self.get = None

    def __call__(self):
        return self.get() if self.get else None


def proc_stat(path):
    """A /proc stat file (Linux): (the thread's name, the CPU it last ran on,
    its user+system CPU time in clock ticks), or None where it cannot be read."""
    try:
        with open(path) as f:
            text = f.read()
        fields = text.rsplit(")", 1)[1].split()
        return text[text.index("(") + 1:text.rindex(")")], int(fields[36]), int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return None


def cpu_now():
    """The CPU this process last ran on, or None."""
    stat = proc_stat("/proc/self/stat")
    return stat[1] if stat else None


class GcTimer:
    """The time Python's garbage collections took (gc.callbacks): a
    collection lands inside whichever step the interpreter's count of new
    objects happens to trigger it."""

    def __init__(self):
        self.ms, self._t = 0.0, None
        gc.callbacks.append(self._note)

    def _note(self, phase, info):
        if phase == "start":
            self._t = time.perf_counter()
        elif self._t is not None:
            self.ms += (time.perf_counter() - self._t) * 1e3
            self._t = None


def threads_now():
    """Every thread of this process: tid -> proc_stat's (name, CPU, ticks);
    empty where /proc cannot be read."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return {}
    stats = ((int(tid), proc_stat(f"/proc/self/task/{tid}/stat")) for tid in tids)
    return {tid: stat for tid, stat in stats if stat}


def thread_report(start, ends):
    """The threads that used CPU time between `start` and the last snapshot
    in `ends` (one per step): name, CPU milliseconds, and the CPUs each was
    last seen on at a step's end, busiest first."""
    if not ends:
        return []
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    rows = []
    for tid, (name, _, ticks) in ends[-1].items():
        used = ticks - start.get(tid, (name, 0, 0))[2]
        if used > 0:
            seen = sorted({e[tid][1] for e in ends if tid in e})
            rows.append({"thread": name, "cpu_ms": round(used * 1e3 / hz), "cpus": seen})
    return sorted(rows, key=lambda r: -r["cpu_ms"])


def host_probe():
    """Times a fixed piece of host work like a step's own (Python objects
    made, looked up and dropped; no GPU, no allocator): ms. Taken after each
    step of the last pass, untimed, it tells whether a slow process had a
    slow CPU (processes of one allocator ran the same steps at 9 to 21 ms)."""
    t0 = time.perf_counter()
    d = {}
    for i in range(4000):
        d[i] = (i, str(i))
    sum(len(v[1]) for v in d.values())
    del d
    return round((time.perf_counter() - t0) * 1e3, 4)


def child(args):
    if args.cpus:
        os.sched_setaffinity(0, cpu_list(args.cpus))
    torch, stats, reset = setup_allocator(args.allocator, args.lib)
    if args.record:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, stacks="python",
                                                 max_entries=2_000_000)
    step, check = make_workload(torch, args.workload, args.warmup + args.steps, args.varlen_seed)
    for i in range(args.warmup):
        step(i)
    torch.cuda.synchronize()
    warm = stats()
    reset()
    # The timed steps run `passes` times over the same inputs (the same
    # batch shapes): the first time a shape is seen, PyTorch and its
    # libraries choose kernels for it, which costs more than the step's work
    # and varies between processes under every allocator (variable-length
    # inference on an H100: 60-100 ms per step in the first pass, 18 ms in
    # the second). The step time is the last pass's median, where what
    # differs between allocators is the allocator; the first pass's median
    # is reported too. The memory peaks cover every pass.
    passes = []
    # hipmem: its pool's driver calls (maps, unmaps, physical allocations
    # and releases) at the start of each pass, and at the end.
    calls_at = []
    # Per step of the last pass, to tell a slow step's cause: the CPU the
    # process ran on at the step's end, the host thread's CPU time (a spin
    # while CUDA synchronizes counts too), and hipmem's driver calls.
    step_cpu, step_thread_ms, step_calls = [], [], []
    # And how long the host took to enqueue the step's work (the rest of the
    # step was the wait for the GPU; a step of a training workload's main
    # thread also waits for the backward pass's thread), and the GPU's SM
    # clock at the step's end.
    step_enqueue_ms, step_sm_mhz = [], []
    # And how long a fixed piece of host work took right after the step
    # (`host_probe`): how fast this process's CPU ran then.
    step_probe_ms = []
    sm_clock = SmClock(torch)
    # Python's collector (see the module's description): a full collection
    # before each pass, none in its timed steps unless --gc on; reading
    # hipmem's statistics makes Python objects that native's reads do not,
    # so a collection would fall in other steps under each allocator.
    gc_timer = GcTimer()
    step_gc_ms = []
    # Every thread's CPUs and CPU time over the last pass (who competes for
    # the cores the process runs on).
    threads_start, threads_at_steps = {}, []
    for p in range(max(1, args.passes)):
        calls_at.append(stats().get("backend_calls"))
        times = []
        last = p == max(1, args.passes) - 1
        if last:
            threads_start = threads_now()
        gc.collect()
        if args.gc == "off":
            gc.disable()
        for i in range(args.warmup, args.warmup + args.steps):
            if args.barrier:
                # (--side-by-side: the parent starts this step in every
                # process of the round at once.)
                print("WAIT", flush=True)
                if not sys.stdin.readline():
                    raise SystemExit("the parent went away")
            c0 = stats().get("backend_calls") if last else None
            g0 = gc_timer.ms
            t0, th0 = time.perf_counter(), time.thread_time()
            ENQUEUED[0] = None
            step(i)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            g1 = gc_timer.ms
            if last:
                step_enqueue_ms.append(None if ENQUEUED[0] is None else round((ENQUEUED[0] - t0) * 1e3, 3))
                step_sm_mhz.append(sm_clock())
                step_thread_ms.append(round((time.thread_time() - th0) * 1e3, 3))
                step_cpu.append(cpu_now())
                threads_at_steps.append(threads_now())
                step_gc_ms.append(round(g1 - g0, 3))
                c1 = stats().get("backend_calls")
                step_calls.append(None if c0 is None else c1 - c0)
                step_probe_ms.append(host_probe())
        gc.enable()
        passes.append(times)
    times = passes[-1]
    s = stats()
    calls_at.append(s.get("backend_calls"))
    timed_calls = last_pass_calls = None
    if calls_at[0] is not None:
        timed_calls, last_pass_calls = calls_at[-1] - calls_at[0], calls_at[-1] - calls_at[-2]
    ok, detail = check()
    # torch.cuda.empty_cache() gives back what no live tensor uses (under
    # hipmem through the reset function hipmem_torch.use_hipmem registers).
    torch.cuda.synchronize()
    before = stats()
    torch.cuda.empty_cache()
    after = stats()
    detail += "; empty_cache: reserved {:.2f} -> {:.2f} GiB, allocated {:.2f}".format(
        before["reserved_now"] / 2**30, after["reserved_now"] / 2**30, after["allocated_now"] / 2**30)
    if "plan" in s:
        detail += "; plans {plans}, served {served}, missed {missed}, ended {ended}".format(**s["plan"])
    if timed_calls is not None:
        detail += f"; driver calls in the timed steps {timed_calls} (last pass {last_pass_calls})"
    if args.record:
        os.makedirs(args.record, exist_ok=True)
        torch.cuda.memory._dump_snapshot(os.path.join(args.record, f"{args.workload}.pickle"))
        torch.cuda.memory._record_memory_history(enabled=None)
    print("RESULT " + json.dumps({
        "workload": args.workload, "allocator": args.allocator, "ok": ok, "detail": detail,
        "step_ms": statistics.median(times) * 1e3, "steps": len(times), "passes": len(passes),
        "first_pass_step_ms": statistics.median(passes[0]) * 1e3,
        # Every timed step, pass by pass (in --json's output).
        "pass_step_ms": [[round(t * 1e3, 3) for t in p] for p in passes],
        # The last pass, step by step: the CPU at its end, the host thread's
        # CPU time, hipmem's driver calls (None for PyTorch's allocators).
        "last_pass_cpu": step_cpu, "last_pass_thread_ms": step_thread_ms, "last_pass_calls": step_calls,
        # The host's time to enqueue it (every workload but alloc_calls marks it); and
        # the GPU's SM clock at its end (NVML; None without).
        "last_pass_enqueue_ms": step_enqueue_ms, "last_pass_sm_mhz": step_sm_mhz,
        # The host probe after each step (ms; `host_probe`).
        "last_pass_probe_ms": step_probe_ms,
        # Python's garbage collections in each step of the last pass (ms; 0
        # with --gc off, the default).
        "last_pass_gc_ms": step_gc_ms, "gc": args.gc,
        # The threads that ran in the last pass: CPU time and the CPUs seen.
        "last_pass_threads": thread_report(threads_start, threads_at_steps),
        # hipmem: its pool's driver calls in the timed steps, and in the last
        # pass alone (None for PyTorch's allocators).
        "backend_calls_timed": timed_calls, "backend_calls_last_pass": last_pass_calls,
        "reserved_high": s["reserved_high"], "allocated_high": s["allocated_high"],
        # The warm-up's peaks: the run's first steps, where an allocator learns.
        "warmup_reserved_high": warm["reserved_high"], "warmup_allocated_high": warm["allocated_high"],
    }), flush=True)


# ---- the parent: fresh processes, alternating order -----------------------------------------

def cpu_list(text):
    """"0-3,8" -> {0, 1, 2, 3, 8}."""
    cpus = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def child_cmd(script, workload, allocator, args, cpus):
    """The command line of a child running `workload` under `allocator` on
    `cpus` (empty: any)."""
    cmd = [sys.executable, script, "--child", "--workload", workload, "--allocator", allocator,
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--passes", str(args.passes),
           "--varlen-seed", str(args.varlen_seed), "--gc", args.gc]
    if allocator == "hipmem-b":
        cmd += ["--lib", args.lib_b]
    elif args.lib:
        cmd += ["--lib", args.lib]
    if args.record:
        cmd += ["--record", args.record]
    if cpus:
        cmd += ["--cpus", cpus]
    return cmd


def run_child(script, workload, allocator, args, rep=0):
    cmd = child_cmd(script, workload, allocator, args, args.cpus)
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if args.logs:
        # Everything the child printed (with HIPMEM_LOG=debug, the pool's
        # own account of its growths, releases, waits and plans).
        os.makedirs(args.logs, exist_ok=True)
        with open(os.path.join(args.logs, f"{workload}-{allocator}-rep{rep}.log"), "w") as f:
            f.write(p.stdout)
            f.write(p.stderr)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            r["wall_s"] = time.time() - t0
            return r
    tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
    return {"workload": workload, "allocator": allocator, "ok": False, "wall_s": time.time() - t0,
            "detail": f"exit {p.returncode}: " + " | ".join(tail)}


def side_by_side_slots(text):
    """"0:0-7,1:16-23+40-47" -> [("0", "0-7"), ("1", "16-23,40-47")]: a GPU
    and the CPUs its process runs on, per slot of --side-by-side (a slot's
    CPU ranges joined by "+")."""
    slots = []
    for part in text.split(","):
        gpu, sep, cpus = part.partition(":")
        cpus = cpus.replace("+", ",")
        if not gpu.strip().isdigit() or not sep or not cpus.strip():
            raise SystemExit(f"--side-by-side: {part!r} is not GPU:CPUS (e.g. 0:0-7,1:16-23)")
        try:
            cpu_list(cpus)
        except ValueError:
            raise SystemExit(f"--side-by-side: {cpus!r} is not a list of CPUs (e.g. 0-7 or 0-3,8)")
        slots.append((gpu.strip(), cpus.strip()))
    if len({g for g, _ in slots}) != len(slots):
        raise SystemExit("--side-by-side: each slot needs a GPU of its own")
    return slots


def run_side_by_side(script, workload, allocators, slots, args, rep):
    """Runs one process per allocator at the same time, each on its own GPU
    and CPUs (allocator i on slot (i + rep) mod the slots: every allocator
    takes every slot in turn), and starts each timed step in all of them at
    once: what slows the machine down (another tenant, the host's memory)
    slows every allocator's step alike, and the ratio of two processes of
    one round compares the allocators, not the moments they ran at."""
    import queue
    import tempfile
    import threading
    procs = []
    for i, a in enumerate(allocators):
        gpu, cpus = slots[(i + rep) % len(slots)]
        cmd = child_cmd(script, workload, a, args, cpus) + ["--barrier"]
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
        err = tempfile.TemporaryFile(mode="w+")
        p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                             bufsize=1, env=env)
        lines = queue.Queue()

        def pump(out=p.stdout, q=lines):
            for line in out:
                q.put(line.rstrip("\n"))
            q.put(None)

        threading.Thread(target=pump, daemon=True).start()
        procs.append({"allocator": a, "gpu": gpu, "cpus": cpus, "p": p, "lines": lines, "err": err,
                      "out": [], "done": False, "t0": time.time()})
    deadline = time.time() + args.timeout
    try:
        while not all(c["done"] for c in procs):
            waiting = []
            for c in procs:
                while not c["done"]:
                    try:
                        line = c["lines"].get(timeout=max(0.1, deadline - time.time()))
                    except queue.Empty:
                        raise subprocess.TimeoutExpired(c["allocator"], args.timeout)
                    if line is None:
                        c["done"] = True
                        c["wall_s"] = time.time() - c["t0"]
                    elif line == "WAIT":
                        waiting.append(c)
                        break
                    else:
                        c["out"].append(line)
            for c in waiting:
                c["p"].stdin.write("GO\n")
                c["p"].stdin.flush()
    except subprocess.TimeoutExpired:
        for c in procs:
            c["p"].kill()
            c.setdefault("wall_s", time.time() - c["t0"])
    results = []
    for c in procs:
        c["p"].wait()
        c["err"].seek(0)
        stderr = c["err"].read()
        if args.logs:
            os.makedirs(args.logs, exist_ok=True)
            with open(os.path.join(args.logs, f"{workload}-{c['allocator']}-rep{rep}.log"), "w") as f:
                f.write("\n".join(c["out"]) + "\n" + stderr)
        r = None
        for line in c["out"]:
            if line.startswith("RESULT "):
                r = json.loads(line[7:])
        if r is None:
            tail = (stderr or "\n".join(c["out"])).strip().splitlines()[-5:]
            r = {"workload": workload, "allocator": c["allocator"], "ok": False,
                 "detail": f"exit {c['p'].returncode}: " + " | ".join(tail)}
        r.update(wall_s=c["wall_s"], gpu=c["gpu"], cpus=c["cpus"])
        results.append(r)
    return results


def side_by_side_summary(results, allocators, workloads):
    """Each allocator against native's process of the same round (which ran
    its steps at the same moments): the rounds' ratios of median steps, how
    many of them the allocator won, and the median of the steps' own ratios
    (step i of the last pass against native's step i)."""
    for w in workloads:
        native = {r["rep"]: r for r in results
                  if r["workload"] == w and r["allocator"] == "native" and r.get("ok")}
        for a in allocators:
            if a == "native":
                continue
            rounds, steps = [], []
            for r in results:
                n = native.get(r.get("rep"))
                if r["workload"] != w or r["allocator"] != a or not r.get("ok") or n is None:
                    continue
                rounds.append(r["step_ms"] / n["step_ms"])
                mine, theirs = r["pass_step_ms"][-1], n["pass_step_ms"][-1]
                steps.append(statistics.median(x / y for x, y in zip(mine, theirs)))
            if rounds:
                won = sum(x < 1 for x in rounds)
                print(f"side by side: {w} {a} against native in the same round: "
                      f"median {statistics.median(rounds):.3f}x over {len(rounds)} rounds "
                      f"(faster in {won}), steps' ratios {statistics.median(steps):.3f}x; rounds: "
                      + " ".join(f"{x:.3f}" for x in sorted(rounds)))


def summarize(results, allocators, workloads):
    rows = []
    for w in workloads:
        native = [r for r in results if r["workload"] == w and r["allocator"] == "native" and r["ok"]]
        base = statistics.median(r["step_ms"] for r in native) if native else None
        first_base = statistics.median(r.get("first_pass_step_ms", r["step_ms"]) for r in native) if native else None
        for a in allocators:
            rs = [r for r in results if r["workload"] == w and r["allocator"] == a]
            if not rs:
                continue
            good = [r for r in rs if r["ok"]]
            if not good:
                rows.append((w, a, "FAILED") + ("",) * 8 + (rs[-1].get("detail", ""),))
                continue
            step = statistics.median(r["step_ms"] for r in good)
            # The same repetition's native process ran next to this one:
            # the median of those ratios moves less with the machine.
            by_rep = {r["rep"]: r["step_ms"] for r in native if "rep" in r}
            pairs = [r["step_ms"] / by_rep[r["rep"]] for r in good if r.get("rep") in by_rep]
            first = statistics.median(r.get("first_pass_step_ms", r["step_ms"]) for r in good)
            res = max(r["reserved_high"] for r in good)
            alloc = max(r["allocated_high"] for r in good)
            ratios = [r["reserved_high"] / r["allocated_high"] for r in good if r["allocated_high"]]
            warm = [r["warmup_reserved_high"] / r["warmup_allocated_high"]
                    for r in good if r.get("warmup_allocated_high")]
            rows.append((w, a, f"{step:.1f}", f"{step / base:.3f}" if base else "-",
                         f"{statistics.median(pairs):.3f}" if pairs else "-",
                         f"{first:.1f}", f"{first / first_base:.3f}" if first_base else "-",
                         f"{res / 2**30:.2f}", f"{alloc / 2**30:.2f}",
                         f"{max(ratios):.3f}" if ratios else "-",
                         f"{max(warm):.3f}" if warm else "-",
                         f"{len(good)}/{len(rs)} ok; " + good[-1].get("detail", "")))
    head = ("workload", "allocator", "step ms", "vs native", "paired", "1st pass ms", "vs native", "reserved GiB",
            "allocated GiB", "res/alloc", "warm-up", "check")
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)] if rows else [len(h) for h in head]
    for row in [head] + rows:
        print("  ".join(str(x).ljust(wd) for x, wd in zip(row, widths)))
    if "alloc_calls" in workloads:
        # One allocation and one free through PyTorch (Python included).
        per = {}
        for a in allocators:
            good = [r for r in results if r["workload"] == "alloc_calls" and r["allocator"] == a and r["ok"]]
            if good:
                per[a] = statistics.median(r["step_ms"] for r in good) * 1e6 / ALLOC_CALLS
        base = per.get("native")
        print("alloc_calls, one tensor made and freed: " + ", ".join(
            f"{a} {ns:.0f} ns" + (f" ({ns - base:+.0f})" if base and a != "native" else "") for a, ns in per.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--workload", help=argparse.SUPPRESS)
    ap.add_argument("--allocator", help=argparse.SUPPRESS)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--lib", default=os.environ.get("HIPMEM_LIB", ""), help="path of libhipmem.so")
    ap.add_argument("--lib-b", default="", help="path of a second libhipmem.so (the hipmem-b allocator)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--varlen-seed", type=int, default=7,
                    help="the seed of variable-length inference's batch shapes")
    ap.add_argument("--passes", type=int, default=2,
                    help="times the timed steps run over the same inputs; the step time is the last pass's")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--record", default="", help="record PyTorch memory snapshots into this folder (native allocator)")
    ap.add_argument("--json", default="", help="write every result here")
    ap.add_argument("--logs", default="", help="write each child's output (stdout and stderr) to a file "
                    "in this folder: with HIPMEM_LOG=debug, what hipmem's pool did")
    ap.add_argument("--gc", choices=["off", "on"], default="off",
                    help="Python's garbage collector in the timed steps (default off, as timeit: a "
                    "collection lands in whichever step the interpreter's allocation count triggers it)")
    ap.add_argument("--side-by-side", default="", metavar="GPU:CPUS,...",
                    help="run a round's allocators at the same time, one per slot (a GPU and the CPUs "
                    "its process runs on, e.g. 0:0-7,1:16-23+40-47; at least as many slots as allocators), "
                    "each timed step started in all of them at once, slots rotating between rounds")
    ap.add_argument("--barrier", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cpus", default="", help="run every child on these CPUs (e.g. 0-7): the same cores "
                    "for every allocator, less noise in the step times of CPU-bound workloads")
    args = ap.parse_args()
    if args.child:
        return child(args)

    workloads = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in workloads if w not in WORKLOADS + EXTRA_WORKLOADS]
    if unknown:
        raise SystemExit(f"unknown workload(s) {', '.join(unknown)}: the workloads are "
                         + ", ".join(WORKLOADS + EXTRA_WORKLOADS))
    allocators = [a for a in args.allocators.split(",") if a]
    if args.record:
        allocators = ["native"]
    if any(a.startswith("hipmem") for a in allocators) and not args.lib:
        raise SystemExit("--lib path/to/libhipmem.so (or HIPMEM_LIB) is needed for the hipmem allocator")
    if args.lib:
        args.lib = os.path.abspath(args.lib)
    if "hipmem-b" in allocators and not args.lib_b:
        raise SystemExit("--lib-b path/to/libhipmem.so is needed for the hipmem-b allocator")
    if args.lib_b:
        args.lib_b = os.path.abspath(args.lib_b)
    script = os.path.abspath(__file__)
    results = []
    slots = side_by_side_slots(args.side_by_side) if args.side_by_side else []
    if slots and len(slots) < len(allocators):
        raise SystemExit(f"--side-by-side: {len(allocators)} allocators need as many slots, not {len(slots)}")
    if slots and args.record:
        raise SystemExit("--side-by-side does not record (--record runs native alone)")
    def round_results(rep, w):
        # A round's processes at once (--side-by-side), or one after another
        # in an order that alternates between repetitions.
        if slots:
            yield from run_side_by_side(script, w, allocators, slots, args, rep)
            return
        for a in allocators if rep % 2 == 0 else list(reversed(allocators)):
            yield run_child(script, w, a, args, rep)

    for rep in range(args.reps):
        for w in workloads:
            for r in round_results(rep, w):
                r["rep"] = rep
                results.append(r)
                if args.json:
                    # Written after every child, so that a run cut short keeps what it measured.
                    with open(args.json, "w") as f:
                        json.dump(results, f, indent=1)
                where = f"GPU {r['gpu']} " if "gpu" in r else ""
                print(f"rep {rep} {w:13s} {r['allocator']:16s} {where}" + (
                    f"{r['step_ms']:8.1f} ms  reserved {r['reserved_high'] / 2**30:6.2f} GiB  "
                    f"allocated {r['allocated_high'] / 2**30:6.2f} GiB  {r['detail']}  ({r['wall_s']:.0f} s)"
                    if r.get("ok") else f"FAILED {r.get('detail', '')}"), flush=True)
    summarize(results, allocators, workloads)
    if slots:
        side_by_side_summary(results, allocators, workloads)
    return 0 if all(r.get("ok") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
