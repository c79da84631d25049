// Whether the driver's virtual-memory calls for one growth run faster when
// several threads share them: N physical allocations of one granule each,
// created and mapped in a row of addresses, access given, then unmapped and
// released, by 1, 2, 4 and 8 threads each taking a contiguous slice.
// (docs/pool-measurements.md, stop 71, has one GPU's figures.)
//
//   nvcc -O2 -o vmm_parallel docs/probes/vmm_parallel.c -lcuda -lpthread && ./vmm_parallel
//
// It reserves 4 GiB of addresses and holds at most 384 MiB of device memory
// at once; everything is given back before it ends.
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1);} } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static CUmemAllocationProp prop; static CUmemAccessDesc acc; static size_t G;
static CUcontext ctx; static CUdeviceptr base;
#define MAXN 192
static CUmemGenericAllocationHandle h[MAXN];
static pthread_barrier_t bar;
static int nthreads, nunits;
enum { CREATE_MAP, ACCESS, UNMAP_RELEASE, QUIT };
static volatile int phase;

static void slice(int t, int *from, int *to) {
  int per = (nunits + nthreads - 1) / nthreads;
  *from = t * per; *to = *from + per; if (*to > nunits) *to = nunits; if (*from > nunits) *from = nunits;
}

static void work(int t) {
  int a, b; slice(t, &a, &b);
  if (phase == CREATE_MAP) {
    for (int i = a; i < b; i++) { CK(cuMemCreate(&h[i], G, &prop, 0)); CK(cuMemMap(base + i * G, G, 0, h[i], 0)); }
  } else if (phase == ACCESS) {
    if (b > a) CK(cuMemSetAccess(base + a * G, (b - a) * G, &acc, 1));
  } else if (phase == UNMAP_RELEASE) {
    for (int i = a; i < b; i++) { CK(cuMemUnmap(base + i * G, G)); CK(cuMemRelease(h[i])); }
  }
}

static void *worker(void *arg) {
  int t = (int)(long)arg;
  CK(cuCtxSetCurrent(ctx));
  for (;;) {
    pthread_barrier_wait(&bar);
    if (phase == QUIT) return NULL;
    work(t);
    pthread_barrier_wait(&bar);
  }
}

// Runs one phase on every thread (the calling thread is thread 0) and
// returns its time in microseconds.
static double run(int p) {
  phase = p;
  double t0 = now();
  if (nthreads > 1) pthread_barrier_wait(&bar);
  work(0);
  if (nthreads > 1) pthread_barrier_wait(&bar);
  return now() - t0;
}

int main(void) {
  CUdevice dev;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  int ver = 0; CK(cuDriverGetVersion(&ver));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
  CK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t span = (size_t)4 << 30; CK(cuMemAddressReserve(&base, span, G, 0, 0));
  printf("driver %d, granularity %zu\n", ver, G);
  int sizes[] = {24, 96, 192};
  int threads[] = {1, 2, 4, 8};
  for (int si = 0; si < 3; si++) {
    nunits = sizes[si];
    for (int round = 0; round < 3; round++) {
      for (int ti = 0; ti < 4; ti++) {
        nthreads = threads[ti];
        pthread_t tid[8];
        if (nthreads > 1) {
          pthread_barrier_init(&bar, NULL, nthreads);
          for (int t = 1; t < nthreads; t++) pthread_create(&tid[t], NULL, worker, (void *)(long)t);
        }
        double c = run(CREATE_MAP);
        double a = run(ACCESS);
        // Data check: every granule written and read back through its mapping.
        CK(cuMemsetD32(base, 0x5EED0000u + nunits, nunits * G / 4));
        CK(cuCtxSynchronize());
        unsigned v; int bad = 0;
        for (int i = 0; i < nunits; i++) { CK(cuMemcpyDtoH(&v, base + i * G + G - 4, 4)); if (v != 0x5EED0000u + nunits) bad++; }
        double u = run(UNMAP_RELEASE);
        printf("%3d MiB (%3d units) %d thread%s: create+map %6.0f us, access %6.0f us, together %6.0f us | unmap+release %6.0f us%s\n",
               (int)(nunits * G >> 20), nunits, nthreads, nthreads > 1 ? "s" : " ", c, a, c + a, u, bad ? " DATA WRONG" : "");
        if (nthreads > 1) {
          phase = QUIT; pthread_barrier_wait(&bar);
          for (int t = 1; t < nthreads; t++) pthread_join(tid[t], NULL);
          pthread_barrier_destroy(&bar);
        }
      }
    }
  }
  CK(cuMemAddressFree(base, span));
  return 0;
}
