// Whether the driver's virtual-memory calls wait for kernels already running
// on the device: a kernel that spins for about 100 ms is launched on a
// stream of its own, then each call is timed on the host on memory the
// kernel never touches. A call that returns after about 100 ms (the kernel
// done when it returns) waited for the device; one that returns in
// microseconds (the kernel still running) did not.
// The last two rounds time the same calls with the device idle.
// (docs/pool-measurements.md, stop 70, has one GPU's figures.)
//
//   nvcc -O2 -o vmm_sync docs/probes/vmm_sync.cu -lcuda && ./vmm_sync
//
// It holds at most 64 MiB of device memory; everything is given back
// before it ends.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1);} } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }

__global__ void spin(long long cycles, int *done) {
  long long t0 = clock64();
  while (clock64() - t0 < cycles) {}
  if (threadIdx.x == 0) *done = 1;
}

static CUmemAllocationProp prop; static CUmemAccessDesc acc; static size_t G;
static cudaStream_t busy; static long long cycles; static int *flag;

// Starts a ~100 ms kernel and waits until it surely runs.
static int with_kernel = 1;
static void start_kernel(void) {
  if (!with_kernel) return;
  spin<<<1, 32, 0, busy>>>(cycles, flag);
  usleep(2000);
}

// After a timed call: whether the kernel was still running.
static const char *kernel_state(void) {
  cudaError_t q = cudaStreamQuery(busy);
  const char *s = !with_kernel ? "no kernel" : q == cudaErrorNotReady ? "kernel still running" : "kernel done";
  cudaStreamSynchronize(busy);
  return s;
}

int main(void) {
  cudaSetDevice(0); cudaFree(0);
  CUcontext ctx; CK(cuCtxGetCurrent(&ctx));
  cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking);
  cudaMalloc(&flag, 4);
  int khz = 0; cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  cycles = (long long)khz * 100;  // about 100 ms
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
  CK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  // The kernel alone, for the baseline.
  double t = now(); start_kernel(); cudaStreamSynchronize(busy);
  printf("the kernel alone: %.1f ms\n", (now() - t) / 1e3);
  // Calls that never wait, for scale: each timed alone, at three kernel lengths.
  for (int scale = 1; scale <= 4; scale *= 2) {
    long long keep = cycles; cycles = keep * scale / 2;
    size_t fr, tot;
    start_kernel(); t = now(); CK(cuMemGetInfo(&fr, &tot)); double a = now() - t;
    t = now(); CK(cuMemGetInfo(&fr, &tot)); double b = now() - t;
    { const char *k = kernel_state(); printf("kernel of %lld cycles: cuMemGetInfo %.1f us, again %.1f us, %s\n", cycles, a, b, k); }
    start_kernel(); t = now(); CUmemGenericAllocationHandle h1; CK(cuMemCreate(&h1, G, &prop, 0)); a = now() - t;
    t = now(); CUmemGenericAllocationHandle h2; CK(cuMemCreate(&h2, G, &prop, 0)); b = now() - t;
    { const char *k = kernel_state(); printf("kernel of %lld cycles: cuMemCreate %.1f us, again %.1f us, %s\n", cycles, a, b, k); }
    CK(cuMemRelease(h1)); CK(cuMemRelease(h2));
    cycles = keep;
  }
  CUdeviceptr base; size_t span = 64 * G; CK(cuMemAddressReserve(&base, span, G, 0, 0));
  for (int round = 0; round < 4; round++) {
    // Rounds 0 and 1 with the kernel running, 2 and 3 with the device idle.
    with_kernel = round < 2;
    const int n = 16;
    CUmemGenericAllocationHandle h[16];
    start_kernel(); t = now();
    for (int i = 0; i < n; i++) CK(cuMemCreate(&h[i], G, &prop, 0));
    { double e = now() - t; const char *k = kernel_state(); printf("round %d: cuMemCreate x%d: %.1f us, %s\n", round, n, e, k); }
    start_kernel(); t = now();
    for (int i = 0; i < n; i++) CK(cuMemMap(base + i * G, G, 0, h[i], 0));
    { double e = now() - t; const char *k = kernel_state(); printf("round %d: cuMemMap x%d: %.1f us, %s\n", round, n, e, k); }
    start_kernel(); t = now();
    CK(cuMemSetAccess(base, n * G, &acc, 1));
    { double e = now() - t; const char *k = kernel_state(); printf("round %d: cuMemSetAccess over %d mappings: %.1f us, %s\n", round, n, e, k); }
    // Use the memory on the busy stream's device, then let it finish.
    CK(cuMemsetD32(base, 7, n * G / 4)); CK(cuCtxSynchronize());
    start_kernel(); t = now();
    for (int i = 0; i < n / 2; i++) CK(cuMemUnmap(base + i * G, G));
    { double e = now() - t; const char *k = kernel_state(); printf("round %d: cuMemUnmap x%d: %.1f us, %s\n", round, n / 2, e, k); }
    start_kernel(); t = now();
    CK(cuMemUnmap(base + (n / 2) * G, (n / 2) * G));
    { double e = now() - t; const char *k = kernel_state(); printf("round %d: cuMemUnmap of %d mappings in one call: %.1f us, %s\n", round, n / 2, e, k); }
    start_kernel(); t = now();
    for (int i = 0; i < n; i++) CK(cuMemRelease(h[i]));
    { double e = now() - t; const char *k = kernel_state(); printf("round %d: cuMemRelease x%d: %.1f us, %s\n", round, n, e, k); }
    // A kernel launch from the host while nothing else runs, for scale.
    start_kernel(); t = now();
    void *p = 0; cudaMalloc(&p, G);
    { double e = now() - t; const char *k = kernel_state(); printf("round %d: cudaMalloc: %.1f us, %s\n", round, e, k); }
    start_kernel(); t = now();
    cudaFree(p);
    { double e = now() - t; const char *k = kernel_state(); printf("round %d: cudaFree: %.1f us, %s\n", round, e, k); }
  }
  CK(cuMemAddressFree(base, span));
  cudaFree(flag); cudaStreamDestroy(busy);
  return 0;
}
