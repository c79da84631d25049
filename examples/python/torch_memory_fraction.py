#!/usr/bin/env python3
"""torch.cuda.set_per_process_memory_fraction under hipmem and PyTorch's own allocator.

Each allocator runs in a fresh process:

1. The fraction is set so that the process may hold LIMIT_GIB (default 4) GiB.
2. 512 MiB tensors are made until the allocator refuses one; the refusal must
   be an out-of-memory error (torch.OutOfMemoryError from PyTorch's
   allocator; from hipmem, which can only throw a C++ exception, a
   RuntimeError saying "CUDA out of memory.", as PyTorch's message does):
   never a tensor without memory, never a crash. The count must match
   PyTorch's own allocator's within one.
3. Every tensor is freed and as many made again: memory the allocator holds
   serves under the limit.
4. With two tensors live, the fraction is lowered to 1.25 GiB: hipmem gives back
   at once what no tensor uses (PyTorch's allocator keeps its cache until
   empty_cache); the live tensors keep their data.
   A new tensor then needs memory past the limit and is refused.
5. A fraction of 1: as many tensors as step 2 plus four more fit.

    python3 torch_memory_fraction.py --lib path/to/libhipmem.so
"""

import argparse
import json
import os
import subprocess
import sys

CHUNK = 512 << 20
# The lowered limit: the two live tensors (1 GiB) and room for small ones.
LOWERED = 5 << 28
OUT_OF_MEMORY = ("OutOfMemoryError", "RuntimeError: CUDA out of memory.")


def child(allocator, lib, limit_gib):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch

    reserved = torch.cuda.memory_reserved
    if allocator == "hipmem":
        import hipmem_torch

        pool = hipmem_torch.use_hipmem(lib)

        def reserved():
            return pool.stats(torch.cuda.current_device()).reserved_current

    dev = torch.device("cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    out = {"allocator": allocator, "ok": True, "problems": []}

    def problem(text):
        out["ok"] = False
        out["problems"].append(text)

    def refusal_of(e):
        # PyTorch's allocators raise torch.OutOfMemoryError; a pluggable
        # allocator can only throw a C++ exception, which PyTorch raises as
        # RuntimeError: hipmem's says "CUDA out of memory." as PyTorch's
        # does, which is what tools that retry with less look for.
        if isinstance(e, torch.OutOfMemoryError):
            return "OutOfMemoryError"
        if isinstance(e, RuntimeError) and "CUDA out of memory." in str(e):
            return "RuntimeError: CUDA out of memory."
        return f"{type(e).__name__}: {e}"

    def fill_until_refused(most):
        tensors, refusal = [], None
        while len(tensors) < most:
            try:
                t = torch.empty(CHUNK, dtype=torch.uint8, device=dev)
            except Exception as e:
                refusal = refusal_of(e)
                break
            if t.data_ptr() == 0:
                problem("a tensor without memory (null data pointer) instead of an error")
                break
            t.fill_(len(tensors) & 0xFF)
            tensors.append(t)
        return tensors, refusal

    torch.cuda.set_per_process_memory_fraction(limit_gib * (1 << 30) / total, 0)
    tensors, refusal = fill_until_refused(64)
    out["made_under_limit"] = len(tensors)
    out["refusal"] = refusal
    out["reserved_at_refusal_gib"] = reserved() / 2**30
    if refusal not in OUT_OF_MEMORY:
        problem(f"past the limit: {refusal}")
    if reserved() > limit_gib * (1 << 30):
        problem(f"held {reserved()} bytes past a limit of {limit_gib} GiB")
    torch.cuda.synchronize()
    for k in range(len(tensors)):
        if int(tensors[k][::1 << 20].float().mean().item()) != (k & 0xFF):
            problem(f"tensor {k} lost its data")
    n = len(tensors)
    tensors.clear()

    again, refusal = fill_until_refused(n)
    if len(again) != n:
        problem(f"made {len(again)} of {n} again after freeing ({refusal})")
    keep = again[:2]
    del again
    torch.cuda.synchronize()
    before = reserved()
    torch.cuda.set_per_process_memory_fraction(LOWERED / total, 0)
    out["lowered_to_1.25gib"] = {"reserved_before_gib": before / 2**30, "reserved_after_gib": reserved() / 2**30}
    for k in range(len(keep)):
        if int(keep[k][::1 << 20].float().mean().item()) != (k & 0xFF):
            problem("a live tensor lost its data when the limit was lowered")
    if allocator == "hipmem":
        # hipmem gives back what no tensor uses at once, so a new tensor
        # needs new memory past the limit. (PyTorch's allocator keeps its
        # cache, from which it may still serve.)
        if reserved() > LOWERED:
            problem(f"held {reserved()} bytes after the limit was lowered to 1.25 GiB with 1 GiB live")
        try:
            torch.empty(CHUNK, dtype=torch.uint8, device=dev).fill_(1)
            problem("a new tensor past a lowered limit")
        except Exception as e:
            if refusal_of(e) not in OUT_OF_MEMORY:
                problem(f"past a lowered limit: {refusal_of(e)}")
    keep.clear()

    torch.cuda.set_per_process_memory_fraction(1.0, 0)
    more, refusal = fill_until_refused(n + 4)
    if len(more) != n + 4:
        problem(f"a fraction of 1 held {len(more)} tensors, not {n + 4} ({refusal})")
    del more
    torch.cuda.synchronize()
    print("RESULT " + json.dumps(out), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", default=os.environ.get("HIPMEM_LIB", ""))
    ap.add_argument("--limit-gib", type=float, default=4.0)
    ap.add_argument("--child", default="")
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.lib, args.limit_gib)
    if not args.lib:
        raise SystemExit("--lib path/to/libhipmem.so (or HIPMEM_LIB) is needed")
    results = {}
    for a in ("native", "hipmem"):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", a, "--lib",
                            os.path.abspath(args.lib), "--limit-gib", str(args.limit_gib)],
                           capture_output=True, text=True, timeout=300)
        line = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
        if not line:
            results[a] = {"allocator": a, "ok": False,
                          "problems": [f"exit {p.returncode}: " + " | ".join(p.stderr.strip().splitlines()[-4:])]}
        else:
            results[a] = json.loads(line[0][7:])
        print(json.dumps(results[a]), flush=True)
    n, h = results["native"].get("made_under_limit"), results["hipmem"].get("made_under_limit")
    same = n is not None and h is not None and abs(n - h) <= 1
    if not same:
        print(f"hipmem made {h} tensors under the limit, PyTorch's allocator {n}")
    ok = same and all(r["ok"] for r in results.values())
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
