#!/usr/bin/env python3
"""tensor.record_stream under an allocator: is memory still read on another
stream kept from reuse?

Each trial makes a tensor on a side stream, has the main stream wait for it,
keep busy (torch.cuda._sleep) and then read it, records the main stream on the
tensor (`x.record_stream(main)`) and drops it: PyTorch frees it in the side
stream's order. The side stream then allocates a tensor of the same size at
once and fills it. If the allocator reused the first tensor's memory there,
the main stream, still busy, reads the second tensor's values: the trial is
corrupted.

    python3 torch_record_stream.py --lib path/to/libhipmem.so
        # native, hipmem, hipmem-direct, hipmem-norecord

`hipmem` registers `hipmem_torch_record_stream` with the pluggable allocator
(`hipmem_torch.use_hipmem`), `hipmem-direct` with the direct one
(`use_hipmem(lib, direct=True)`); `hipmem-norecord` does not, as hipmem's PyTorch
interface did before, and is expected to corrupt trials: it shows that the
check can fail. Each allocator runs in a fresh process; the exit status is
non-zero if native, hipmem or hipmem-direct corrupts a trial, or if hipmem-norecord never does.
"""

import argparse
import json
import os
import subprocess
import sys


def child(args):
    if args.allocator.startswith("hipmem"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import hipmem_torch

        hipmem_torch.use_hipmem(args.lib, record_stream=args.allocator != "hipmem-norecord",
                                direct=args.allocator == "hipmem-direct")
    import torch

    dev = torch.device("cuda")
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    n = 1 << 22
    bad = 0
    for k in range(args.trials):
        with torch.cuda.stream(side):
            x = torch.full((n,), float(k), device=dev)
        main.wait_stream(side)
        torch.cuda._sleep(args.sleep_cycles)  # the main stream stays busy ...
        y = x * 1.0                           # ... then reads x
        x.record_stream(main)
        del x                                 # freed in the side stream's order
        with torch.cuda.stream(side):
            z = torch.full((n,), -1.0, device=dev)  # the side stream allocates again at once
        torch.cuda.synchronize()
        if not bool((y == float(k)).all()):
            bad += 1
        del y, z
    print("RESULT " + json.dumps({"allocator": args.allocator, "trials": args.trials, "corrupted": bad}),
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", help="libhipmem.so (for the hipmem allocators)")
    ap.add_argument("--allocators", default="native,hipmem,hipmem-direct,hipmem-norecord")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--sleep-cycles", type=int, default=20_000_000)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--allocator", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    failed = False
    for name in args.allocators.split(","):
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--allocator", name,
               "--trials", str(args.trials), "--sleep-cycles", str(args.sleep_cycles)]
        if args.lib:
            cmd += ["--lib", args.lib]
        out = subprocess.run(cmd, capture_output=True, text=True)
        results = [json.loads(line[7:]) for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode != 0 or not results:
            print(f"{name}: failed to run (exit {out.returncode})\n{out.stderr[-2000:]}")
            failed = True
            continue
        r = results[0]
        expect_corruption = name == "hipmem-norecord"
        ok = (r["corrupted"] > 0) if expect_corruption else (r["corrupted"] == 0)
        verdict = "as expected" if ok else "UNEXPECTED"
        print(f"{name:16} {r['corrupted']:3d} of {r['trials']} trials corrupted ({verdict})")
        failed |= not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
