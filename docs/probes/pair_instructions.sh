#!/usr/bin/env bash
# Instructions hipmem's PyTorch entry points execute per allocation and free
# on recorded variable-length inference, on the CPU backend, under
# callgrind: hipmem_torch_malloc and hipmem_torch_free, inclusive, over
# PASSES_B passes less PASSES_A passes (what the first pass's growth and the
# harness cost drops out), divided by the pairs of the extra passes.
# (docs/pool-measurements.md, stop 80.)
#
#   docs/probes/pair_instructions.sh target/release/libhipmem.so [REPS]
#
# Needs valgrind and python3. Idle release is off: with it on, the pool
# reads the kernel's clock through the vDSO, which rustix cannot find
# under valgrind (it stops the process). The counts move by a few
# instructions between runs (the CPU backend's streams complete on their own
# threads); the harness's own (Python's) count moves by hundreds, which is
# why only hipmem's functions are counted.
set -euo pipefail
lib=$(realpath "$1")
reps=${2:-1}
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
seq="$root/crates/hipmem-cli/fixtures/traces/pytorch/varlen_infer.pickle.gz"
# (The interpreter itself, not a launcher script in front of it: valgrind
# follows the process it starts.)
py=$(python3 -c 'import sys; print(sys.executable)')
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
PASSES_A=2 PASSES_B=4
count() { # callgrind output -> hipmem_torch_malloc + hipmem_torch_free, inclusive
  callgrind_annotate --auto=no --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    python3 -c '
import re, sys
print(sum(int(l.split()[0].replace(",", "")) for l in sys.stdin
          if re.search(r"torch\.rs:hipmem_torch_(malloc|free) \[", l)))'
}
run() { # passes -> callgrind output
  (cd "$root/examples/python" &&
    HIPMEM_BACKEND=host HIPMEM_TORCH_IDLE_RELEASE_MS=0 HIPMEM_HOST_MEMORY=12884901888 \
      HIPMEM_HOST_ADDRESS_SPACE=68719476736 \
      valgrind --tool=callgrind --callgrind-out-file="$out/cg.$1" "$py" torch_call_cost.py --child \
      --without-torch --allocator hipmem --lib "$lib" --sequence "$seq" --passes "$1" --evict-kib 0 \
      >/dev/null 2>&1)
}
# Pairs per pass: the recording's allocations.
pairs=$(cd "$root/examples/python" && HIPMEM_BACKEND=host HIPMEM_TORCH_IDLE_RELEASE_MS=0 \
  python3 torch_call_cost.py --child --without-torch --allocator hipmem --lib "$lib" --sequence "$seq" \
  --passes 1 --evict-kib 0 2>/dev/null | sed -n 's/^RESULT //p' | python3 -c 'import json,sys; print(json.load(sys.stdin)["ops"] // 2)')
for _ in $(seq "$reps"); do
  run $PASSES_A
  run $PASSES_B
  a=$(count "$out/cg.$PASSES_A")
  b=$(count "$out/cg.$PASSES_B")
  python3 -c "print(f'{($b - $a) / (($PASSES_B - $PASSES_A) * $pairs):.0f} instructions per allocation and free ($pairs pairs a pass)')"
done
