#!/usr/bin/env bash
# Builds every program of the corpus (programs.txt) with nvcc against libhipmem,
# unchanged, runs it on the GPU and checks its own verdict or expected output.
# Prints one PASS / FAIL / SKIP line per program and a closing "N passed, N failed".
#
#   examples/hip-programs/build-nvcc.sh                      # builds libhipmem first (needs cargo)
#   HIPMEM_LIB_DIR=dir examples/hip-programs/build-nvcc.sh   # uses dir/libhipmem.so (the GPU machine)
#   examples/hip-programs/build-nvcc.sh NAME...              # only these programs
#
# Every program is built with exactly: nvcc -x cu -I include SOURCES -L LIB -lhipmem
# (plus an rpath to LIB). -x cu makes nvcc compile .cpp files as CUDA, which is
# what hipcc does on NVIDIA. Kernels and the kernel-side functions (symbols,
# occupancy, launches) come from the CUDA runtime; memory, streams, events,
# devices and peer access from libhipmem (HIPMEM_BACKEND=cuda).
# Environment: NVCC (default nvcc), OUT_DIR (default target/hip-programs),
# HIPMEM_BACKEND (default cuda), TIMEOUT per program in seconds (default 300).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root"
if [ -n "${HIPMEM_LIB_DIR:-}" ]; then
  lib="$(cd "$HIPMEM_LIB_DIR" && pwd)"
else
  cargo build --release -p hipmem-capi || exit 1
  lib="$root/target/release"
fi
if [ ! -f "$lib/libhipmem.so" ]; then
  echo "no libhipmem.so in $lib" >&2
  exit 1
fi
nvcc="${NVCC:-nvcc}"
out="${OUT_DIR:-$root/target/hip-programs}"
mkdir -p "$out"
export HIPMEM_BACKEND="${HIPMEM_BACKEND:-cuda}"
timeout_s="${TIMEOUT:-300}"
gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
[ -n "$gpus" ] && [ "$gpus" -gt 0 ] || gpus=1

# check OUTPUT_FILE CHECKS: every check of the manifest line must hold.
check() {
  local file="$1" checks="$2" c ok=0
  while [ -n "$checks" ]; do
    c="${checks%% ;; *}"
    if [ "$c" = "$checks" ]; then checks=""; else checks="${checks#* ;; }"; fi
    c="$(echo "$c" | sed 's/^ *//; s/ *$//')"
    case "$c" in
      line:*) grep -qxF -- "${c#line:}" "$file" || { echo "      missing line: ${c#line:}"; ok=1; } ;;
      has:*) grep -qF -- "${c#has:}" "$file" || { echo "      missing: ${c#has:}"; ok=1; } ;;
      '!has:'*) if grep -qF -- "${c#!has:}" "$file"; then echo "      unexpected: ${c#!has:}"; ok=1; fi ;;
      '') ;;
      *) echo "      unknown check: $c"; ok=1 ;;
    esac
  done
  return $ok
}

pass=0; fail=0; skip=0
while IFS='|' read -r name kfree need sources checks; do
  name="$(echo "$name" | xargs)"
  case "$name" in ''|'#'*) continue ;; esac
  if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF "$name"; then continue; fi
  need="$(echo "$need" | xargs)"
  srcs=()
  for s in $sources; do srcs+=("$here/$s"); done
  exe="$out/$name"
  if ! "$nvcc" -x cu -I "$root/include" "${srcs[@]}" -L "$lib" -lhipmem \
      -Xlinker -rpath -Xlinker "$lib" -o "$exe" >"$out/$name.build.txt" 2>&1; then
    fail=$((fail + 1)); echo "FAIL  $name (build)"; head -n 20 "$out/$name.build.txt" | sed 's/^/      /'
    continue
  fi
  if [ "$need" -gt "$gpus" ]; then
    skip=$((skip + 1)); echo "SKIP  $name (built; needs $need GPUs, $gpus present)"
    continue
  fi
  (cd "$(dirname "${srcs[0]}")" && timeout "$timeout_s" "$exe") >"$out/$name.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    fail=$((fail + 1)); echo "FAIL  $name (exit status $rc)"; tail -n 20 "$out/$name.txt" | sed 's/^/      /'
  elif report="$(check "$out/$name.txt" "$checks")"; then
    pass=$((pass + 1)); echo "PASS  $name"
  else
    fail=$((fail + 1)); echo "FAIL  $name (output)"; echo "$report"; tail -n 10 "$out/$name.txt" | sed 's/^/      /'
  fi
done <"$here/programs.txt"
echo "skipped: $skip"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
