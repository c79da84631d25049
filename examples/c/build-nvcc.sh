#!/usr/bin/env bash
# Builds every seed listing with nvcc against libhipmem and runs it (GPU machine).
#   examples/c/build-nvcc.sh                       # builds libhipmem first
#   HIPMEM_LIB_DIR=dir examples/c/build-nvcc.sh    # uses dir/libhipmem.so
# Kernels come from CUDA (<cuda_runtime.h>, pulled in by hip/hip_runtime.h under
# nvcc); memory, streams and pools from hipmem (HIPMEM_BACKEND=cuda).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root"
# HIPMEM_LIB_DIR: a directory that already holds libhipmem.so (the GPU
# machine has no Rust toolchain); otherwise build it here.
if [ -n "${HIPMEM_LIB_DIR:-}" ]; then
  lib="$HIPMEM_LIB_DIR"
else
  cargo build --release -p hipmem-capi
  lib="$root/target/release"
fi
out="${OUT_DIR:-$root/target/examples-c}"
mkdir -p "$out"
export HIPMEM_BACKEND="${HIPMEM_BACKEND:-cuda}"
status=0
for src in examples/c/*.cpp; do
  name="$(basename "$src" .cpp)"
  if [ "$name" = unified_memory ] && ! nm -D --defined-only "$lib/libhipmem.so" | grep -q ' hipMallocManaged$'; then
    echo "== $name: skipped (libhipmem does not export hipMallocManaged yet)"
    continue
  fi
  echo "== $name"
  nvcc -x cu -Xcompiler -Wno-pointer-arith -I "$root/include" "$src" -L "$lib" -lhipmem \
    -Xlinker -rpath -Xlinker "$lib" -o "$out/$name"
  case "$name" in
    ipc_*) echo "   built (the IPC listings run as pairs: crates/hipmem-capi/tests/c_examples.rs)"; continue ;;
  esac
  if ! "$out/$name" > "$out/$name.txt"; then echo "   FAILED (rc $?)"; status=1; fi
  head -n 3 "$out/$name.txt"; [ "$(wc -l < "$out/$name.txt")" -gt 3 ] && echo "   ... ($(wc -l < "$out/$name.txt") lines)"
done
# The SOMA listings print Element i: 2*i for i in 0..1024.
for name in soma_malloc_async soma_malloc pool_set_pools; do
  if ! diff -q <(for i in $(seq 0 1023); do echo "Element $i: $((2 * i))"; done) "$out/$name.txt" >/dev/null; then
    echo "$name: output differs from Element i: 2*i"; status=1
  fi
done
exit $status
