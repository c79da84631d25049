#!/usr/bin/env python3
"""Records a PyTorch memory snapshot of a small training workload, the kind
of file users already have (torch.cuda.memory._dump_snapshot), for
`hipmem replay` and `hipmem trace summary` and for hipmem's CI fixture
crates/hipmem-cli/fixtures/traces/pytorch_snapshot.pickle.

The workload (PyTorch's own caching allocator, not hipmem): a small MLP
trained with AdamW for a few steps, each batch prepared on a side stream
(record_stream, so frees complete late and two streams appear), activations
of varying sequence lengths (so sizes vary and blocks get split and reused),
then empty_cache at the end (segment frees). Recording starts before the
first CUDA allocation, so every free in the trace has its allocation.

    python3 examples/python/record_snapshot.py [OUT.pickle] [--steps N]

Needs a CUDA GPU and PyTorch 2.1 or later. Keeps the file to a few MB
(Python frames only, a bounded number of entries) and says how big it is.
"""
import argparse
import os
import sys

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", default="crates/hipmem-cli/fixtures/traces/pytorch_snapshot.pickle")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--max-entries", type=int, default=20000)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("record_snapshot.py: no CUDA device")

    torch.manual_seed(14)
    device = torch.device("cuda", 0)
    # Start recording before anything is allocated on the device.
    torch.cuda.memory._record_memory_history(
        enabled="all", context="all", stacks="python", max_entries=args.max_entries
    )

    width = 1024
    model = torch.nn.Sequential(
        torch.nn.Linear(256, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, width),
        torch.nn.GELU(),
        torch.nn.Linear(width, 256),
    ).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.cuda.Stream(device)
    main_stream = torch.cuda.current_stream(device)

    def batch(step):
        # Prepared on the loader stream, used on the main stream.
        rows = 512 + 256 * (step % 4)
        with torch.cuda.stream(loader):
            x = torch.randn(rows, 256, device=device)
            y = torch.randn(rows, 256, device=device)
        main_stream.wait_stream(loader)
        x.record_stream(main_stream)
        y.record_stream(main_stream)
        return x, y

    for step in range(args.steps):
        x, y = batch(step)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        del x, y, loss
    torch.cuda.synchronize(device)
    del model, optimizer
    torch.cuda.empty_cache()

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    torch.cuda.memory._dump_snapshot(args.out)
    torch.cuda.memory._record_memory_history(enabled=None)
    size = os.path.getsize(args.out)
    print(f"{args.out}: {size / 1e6:.2f} MB, torch {torch.__version__}")
    if size > 4_000_000:
        print("record_snapshot.py: larger than a few MB; use fewer --steps or --max-entries for a fixture")


if __name__ == "__main__":
    main()
