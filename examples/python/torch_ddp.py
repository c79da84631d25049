#!/usr/bin/env python3
"""A two-GPU data-parallel training job (torch.distributed, NCCL, one process
per GPU) with hipmem as PyTorch's allocator in every process, and its checks.

    python3 torch_ddp.py --lib path/to/libhipmem.so              # hipmem in both processes
    python3 torch_ddp.py --lib path/to/libhipmem.so --allocator hipmem-direct
                                  # hipmem past the pluggable allocator's map (needs g++)
    python3 torch_ddp.py --allocator native                      # PyTorch's own, for comparison

Each process trains the same small transformer block stack under
DistributedDataParallel on its own batches (so gradients differ per rank and
the all-reduce matters), then checks:

  * an all-reduce of a tensor allocated by hipmem gives the exact expected sum;
  * after training, every parameter is bit-identical on both ranks (DDP kept
    the replicas in sync through buffers hipmem allocated);
  * every loss is finite;
  * with hipmem, a HIP library in the process sees PyTorch's device: after
    torch.cuda.set_device(rank), hipmem's hipGetDevice says the rank's
    device, and hipMallocAsync, hipMemsetAsync, hipMemcpyAsync and
    hipFreeAsync on PyTorch's current stream work there (HIP on NVIDIA
    shares the CUDA runtime's device; docs/c-abi.md);

and prints its step times, its pool's reserved bytes before and after the
timed steps, and its pool's peak reserved / peak used bytes after the
warm-up steps (reset there, as torch_allocators.py does; the warm-up's own
as warmup_reserved_high / warmup_used_high). The
parent exits non-zero if any check fails. NVLink SHARP (NVLS) stays off
(NCCL_NVLS_ENABLE=0).

The warm-up is 12 steps (about 300 ms on two H100s): DDP rebuilds its
gradient buckets in its second step, hipmem's pool starts its plan within
the first five, and it gives back what the warm-up held beyond the later
steps' needs once that has been idle for two of its 100 ms windows. After 3
warm-up steps (about 75 ms) half the rank readings still held the
warm-up's own peak when the peaks were reset (1.042-1.092 of the timed
steps' peak used bytes on two H100s, 1.006 in the others), and the plan's
start fell in the second timed step (42-62 ms against 22-30).
"""

import argparse
import os
import statistics
import sys
import time


def hip_library_check(lib, rank, torch):
    """What a HIP library linked into this process would do through
    hipmem's C ABI after PyTorch chose the rank's device: the failures."""
    import ctypes

    dll = ctypes.CDLL(os.path.abspath(lib))
    out = []
    dev = ctypes.c_int(-1)
    rc = dll.hipGetDevice(ctypes.byref(dev))
    if rc != 0 or dev.value != rank:
        out.append(f"hipGetDevice gave {dev.value} (error {rc}) after torch.cuda.set_device({rank})")
    n = 1 << 20
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    p = ctypes.c_void_p()
    rc = dll.hipMallocAsync(ctypes.byref(p), ctypes.c_size_t(n), stream)
    if rc != 0:
        return out + [f"hipMallocAsync on PyTorch's stream of device {rank} failed with error {rc}"]
    dst = torch.zeros(n, dtype=torch.uint8, device=f"cuda:{rank}")
    rcs = [
        dll.hipMemsetAsync(p, ctypes.c_int(0x5A), ctypes.c_size_t(n), stream),
        # hipMemcpyDeviceToDevice = 3
        dll.hipMemcpyAsync(ctypes.c_void_p(dst.data_ptr()), p, ctypes.c_size_t(n), ctypes.c_int(3), stream),
        dll.hipFreeAsync(p, stream),
    ]
    torch.cuda.current_stream().synchronize()
    if any(rcs):
        out.append(f"hipMemsetAsync / hipMemcpyAsync / hipFreeAsync on PyTorch's stream gave {rcs}")
    elif not bool((dst == 0x5A).all().item()):
        out.append("memory set by hipMemsetAsync on PyTorch's stream did not arrive in the tensor")
    return out


def worker(rank, args, world):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(args.port))
    import torch

    stats = None
    reset_peak = None
    plan = None
    if args.allocator.startswith("hipmem"):
        import hipmem_torch

        pool = hipmem_torch.use_hipmem(args.lib, direct=args.allocator == "hipmem-direct")

        def stats():
            s = pool.stats(rank)
            return s.reserved_high, s.used_high, s.reserved_current

        def reset_peak():
            pool.reset_peak(rank)

        def plan():
            c = pool.plan_counts(rank)
            return f" plans={c.plans} served={c.served} missed={c.missed} ended={c.ended} rejected={c.rejected}"

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
    failures = []

    # 1. A plain all-reduce of hipmem memory.
    t = torch.full((1 << 20,), float(rank + 1), device=dev)
    dist.all_reduce(t)
    want = float(sum(range(1, world + 1)))
    if not torch.all(t == want).item():
        failures.append(f"all_reduce gave {t.min().item()}..{t.max().item()}, not {want}")

    # 2. DDP training on per-rank batches.
    torch.manual_seed(0)
    width, layers = 1024, 8
    model = torch.nn.Sequential(*[
        torch.nn.TransformerEncoderLayer(width, 16, 4 * width, batch_first=True, dropout=0.0)
        for _ in range(layers)
    ]).to(dev)
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1000 + rank)
    losses, times = [], []
    reserved_at = []
    warmup_high = None
    for step in range(args.warmup + args.steps):
        if step == args.warmup and stats is not None:
            # As torch_allocators.py: the peaks start again after the
            # warm-up (the first steps' are printed apart).
            warmup_high = stats()
            reserved_at.append(warmup_high[2])
            reset_peak()
        t0 = time.perf_counter()
        x = torch.randn(16, 256, width, device=dev, generator=gen)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = ddp(x).float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    if stats is not None:
        reserved_at.append(stats()[2])
    if not all(l == l and abs(l) < 1e6 for l in losses):
        failures.append(f"a loss is not finite: {losses}")

    # 3. The replicas are identical: every rank's parameters equal rank 0's.
    flat = torch.cat([p.detach().reshape(-1).float() for p in model.parameters()])
    ref = flat.clone()
    dist.broadcast(ref, 0)
    diff = (flat - ref).abs().max().item()
    if diff != 0.0:
        failures.append(f"rank {rank}'s parameters differ from rank 0's by up to {diff}")

    # 4. A HIP library's calls on this rank's device and PyTorch's stream.
    if args.allocator.startswith("hipmem"):
        failures.extend(hip_library_check(args.lib, rank, torch))

    res = used = 0
    if stats is not None:
        res, used, _ = stats()
    ok = torch.tensor([0 if failures else 1], device=dev)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    print(f"RESULT rank={rank} allocator={args.allocator} ok={not failures} "
          f"step_ms={statistics.median(times) * 1e3:.1f} final_loss={losses[-1]:.5f} "
          f"reserved_high={res} used_high={used} "
          f"warmup_reserved_high={warmup_high[0] if warmup_high else 0} "
          f"warmup_used_high={warmup_high[1] if warmup_high else 0} params={flat.numel()} "
          f"reserved_before_after_timed={reserved_at} step_ms_each={[round(t * 1e3, 1) for t in times]}"
          + (plan() if plan is not None else "")
          + ("" if not failures else " failures=" + " | ".join(failures)), flush=True)
    dist.destroy_process_group()
    if not failures and ok.item() != 1:
        failures.append("another rank failed")
    if failures:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--allocator", choices=["hipmem", "hipmem-direct", "native"], default="hipmem")
    ap.add_argument("--lib", default=os.environ.get("HIPMEM_LIB", ""), help="path of libhipmem.so")
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=12)
    ap.add_argument("--port", type=int, default=29531)
    args = ap.parse_args()
    if args.allocator.startswith("hipmem"):
        if not args.lib:
            raise SystemExit("--lib path/to/libhipmem.so (or HIPMEM_LIB) is needed for the hipmem allocator")
        args.lib = os.path.abspath(args.lib)
    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < args.gpus:
        raise SystemExit(f"{args.gpus} GPUs are needed; this machine has {torch.cuda.device_count()}")
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    try:
        mp.spawn(worker, args=(args, args.gpus), nprocs=args.gpus, join=True)
    except Exception as e:  # a worker's non-zero exit
        print(f"FAILED: {e}", flush=True)
        return 1
    print("all ranks passed their checks", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
