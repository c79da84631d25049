// What hipmem's context guard costs a call (crates/hipmem/src/backend/cuda/
// handles.rs, `Bound`): asking the driver for the calling thread's context
// (cuCtxGetCurrent), and making another current and the caller's current
// again (cuCtxSetCurrent twice) from no context and from another device's;
// then one small async memset with and without that switch around it.
// (docs/pool-measurements.md, stop 67, has two H200s' figures.)
//
//   nvcc -O2 -o ctx_switch_cost docs/probes/ctx_switch_cost.c -lcuda && ./ctx_switch_cost
//
// It holds 1 MiB of device memory; with one GPU the "from device 1's" figure is 0.
#include <cuda.h>
#include <stdio.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
#define CK(x) do { CUresult r = (x); if (r) { printf("%s failed: %d\n", #x, r); return 1; } } while (0)
int main(void) {
  CK(cuInit(0));
  int n; CK(cuDeviceGetCount(&n));
  CUcontext c0, c1 = NULL; CK(cuDevicePrimaryCtxRetain(&c0, 0));
  if (n > 1) CK(cuDevicePrimaryCtxRetain(&c1, 1));
  CK(cuCtxSetCurrent(c0));
  CUdeviceptr p; CK(cuMemAlloc(&p, 1 << 20));
  CUstream s; CK(cuStreamCreate(&s, 1));
  const int N = 1000000;
  for (int round = 0; round < 3; round++) {
    CUcontext cur; double t;
    CK(cuCtxSetCurrent(c0));
    t = now(); for (int i = 0; i < N; i++) cuCtxGetCurrent(&cur); double get = (now() - t) / N;
    CK(cuCtxSetCurrent(NULL));
    t = now(); for (int i = 0; i < N; i++) { cuCtxGetCurrent(&cur); cuCtxSetCurrent(c0); cuCtxSetCurrent(cur); } double from_none = (now() - t) / N;
    double from_other = 0;
    if (c1) { CK(cuCtxSetCurrent(c1)); t = now(); for (int i = 0; i < N; i++) { cuCtxGetCurrent(&cur); cuCtxSetCurrent(c0); cuCtxSetCurrent(cur); } from_other = (now() - t) / N; }
    const int M = 100000;
    CK(cuCtxSetCurrent(c0));
    t = now(); for (int i = 0; i < M; i++) cuMemsetD8Async(p, 1, 256, s); CK(cuStreamSynchronize(s)); double plain = (now() - t) / M;
    CK(cuCtxSetCurrent(NULL));
    t = now(); for (int i = 0; i < M; i++) { cuCtxGetCurrent(&cur); cuCtxSetCurrent(c0); cuMemsetD8Async(p, 1, 256, s); cuCtxSetCurrent(cur); }
    CK(cuCtxSetCurrent(c0)); CK(cuStreamSynchronize(s)); double switched = (now() - t) / M;
    printf("round %d: get %.1f ns; get+set+set back from none %.1f ns, from device 1's %.1f ns; memset %.0f ns, with the switch from none %.0f ns\n",
           round, get, from_none, from_other, plain, switched);
  }
  return 0;
}
