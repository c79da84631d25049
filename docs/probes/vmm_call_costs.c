// What the CUDA driver's virtual-memory calls cost on this GPU, and whether a
// second thread's creates and releases slow the first thread's maps.
// (docs/pool-measurements.md, stop 63, has one H100's figures.)
//
//   nvcc -O2 -o vmm_call_costs docs/probes/vmm_call_costs.c -lcuda -lpthread && ./vmm_call_costs
//
// It reserves 8 GiB of addresses and creates at most 512 allocations of
// 2 MiB (1 GiB) at once; everything is given back before it ends.
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <stdatomic.h>
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1);} } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static CUdevice dev; static CUcontext ctx;
static CUmemAllocationProp prop; static CUmemAccessDesc acc;
static size_t G;
static CUmemGenericAllocationHandle mk(size_t n) { CUmemGenericAllocationHandle h; CK(cuMemCreate(&h, n, &prop, 0)); return h; }
static atomic_int stop_bg; static atomic_long bg_ops;
static void *bg_create_release(void *arg) {
  CK(cuCtxSetCurrent(ctx));
  while (!atomic_load(&stop_bg)) { CUmemGenericAllocationHandle h = mk(G); CK(cuMemRelease(h)); atomic_fetch_add(&bg_ops, 1); }
  return NULL;
}
static void *bg_create_only(void *arg) {
  // creates N handles as fast as it can, stores them
  CUmemGenericAllocationHandle *hs = arg; CK(cuCtxSetCurrent(ctx));
  for (int i = 0; i < 512 && !atomic_load(&stop_bg); i++) { hs[i] = mk(G); atomic_fetch_add(&bg_ops, 1); }
  return NULL;
}
int main(int argc, char **argv) {
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
  CK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t span = (size_t)8 << 30; CUdeviceptr base; CK(cuMemAddressReserve(&base, span, G, 0, 0));
  printf("granularity %zu\n", G);
  // 1. per-phase cost by size, N allocations each
  size_t sizes[] = {G, 4 * G, 16 * G};
  for (int si = 0; si < 3; si++) {
    size_t sz = sizes[si]; int n = si == 0 ? 256 : (si == 1 ? 64 : 32);
    CUmemGenericAllocationHandle *h = malloc(n * sizeof *h);
    double t0 = now(); for (int i = 0; i < n; i++) h[i] = mk(sz);
    double t1 = now(); for (int i = 0; i < n; i++) CK(cuMemMap(base + i * sz, sz, 0, h[i], 0));
    double t2 = now(); for (int i = 0; i < n; i++) CK(cuMemSetAccess(base + i * sz, sz, &acc, 1));
    double t3 = now(); for (int i = 0; i < n; i++) CK(cuMemUnmap(base + i * sz, sz));
    double t4 = now(); for (int i = 0; i < n; i++) CK(cuMemMap(base + i * sz, sz, 0, h[i], 0));
    double t5 = now(); CK(cuMemSetAccess(base, n * sz, &acc, 1));
    double t6 = now(); CK(cuMemUnmap(base, n * sz));
    double t7 = now(); for (int i = 0; i < n; i++) CK(cuMemRelease(h[i]));
    double t8 = now();
    printf("size %6zu KiB x%3d: create %.1f map %.1f access(each) %.1f unmap(each) %.1f | access(one call, per alloc) %.1f unmap(one call, per alloc) %.1f release %.1f us\n",
      sz >> 10, n, (t1-t0)/n, (t2-t1)/n, (t3-t2)/n, (t4-t3)/n, (t6-t5)/n, (t7-t6)/n, (t8-t7)/n);
    free(h);
  }
  // 2. main thread: map+access+unmap loop of pre-created 2 MiB handles, alone vs with a background create/release thread
  int n = 256; CUmemGenericAllocationHandle *h = malloc(n * sizeof *h);
  for (int i = 0; i < n; i++) h[i] = mk(G);
  for (int round = 0; round < 2; round++) {
    for (int bg = 0; bg < 2; bg++) {
      pthread_t th; atomic_store(&stop_bg, 0); atomic_store(&bg_ops, 0);
      if (bg) pthread_create(&th, NULL, bg_create_release, NULL);
      double t0 = now();
      for (int rep = 0; rep < 4; rep++) {
        for (int i = 0; i < n; i++) CK(cuMemMap(base + i * G, G, 0, h[i], 0));
        CK(cuMemSetAccess(base, n * G, &acc, 1));
        for (int i = 0; i < n; i++) CK(cuMemUnmap(base + i * G, G));
      }
      double t1 = now();
      atomic_store(&stop_bg, 1); if (bg) pthread_join(th, NULL);
      printf("map+access/256+unmap per unit, %s: %.1f us (bg create+release pairs %ld)\n", bg ? "bg create/release running" : "alone", (t1 - t0) / (4 * n), atomic_load(&bg_ops));
    }
  }
  for (int i = 0; i < n; i++) CK(cuMemRelease(h[i]));
  // 3. a growth: create+map 256 units + one access, serial vs handles created ahead on a worker while main thread does other CPU work
  for (int round = 0; round < 2; round++) {
    double t0 = now();
    for (int i = 0; i < n; i++) { CUmemGenericAllocationHandle x = mk(G); CK(cuMemMap(base + i * G, G, 0, x, 0)); h[i] = x; }
    CK(cuMemSetAccess(base, n * G, &acc, 1));
    double t1 = now();
    for (int i = 0; i < n; i++) { CK(cuMemUnmap(base + i * G, G)); CK(cuMemRelease(h[i])); }
    double t2 = now();
    printf("growth serial: create+map+access %.1f us/unit; unmap+release %.1f us/unit\n", (t1 - t0) / n, (t2 - t1) / n);
    // now: worker creates while main thread maps as handles appear (pipelined)
    CUmemGenericAllocationHandle *hs = calloc(512, sizeof *hs);
    pthread_t th; atomic_store(&stop_bg, 0); atomic_store(&bg_ops, 0);
    double t3 = now();
    pthread_create(&th, NULL, bg_create_only, hs);
    pthread_join(th, NULL);
    double t4 = now();
    for (int i = 0; i < n; i++) CK(cuMemMap(base + i * G, G, 0, hs[i], 0));
    CK(cuMemSetAccess(base, n * G, &acc, 1));
    double t5 = now();
    // release on a worker while main maps the other 256
    printf("created ahead: create on worker %.1f us/unit; main thread map+access %.1f us/unit\n", (t4 - t3) / 512, (t5 - t4) / n);
    // main thread maps hs[256..512] at a second range while a worker unmaps+releases the first 256
    double t6 = now();
    for (int i = 0; i < n; i++) CK(cuMemMap(base + (n + i) * G, G, 0, hs[n + i], 0));
    CK(cuMemSetAccess(base + n * G, n * G, &acc, 1));
    double t7 = now();
    printf("  main map+access with nothing else: %.1f us/unit\n", (t7 - t6) / n);
    for (int i = 0; i < 2 * n; i++) { CK(cuMemUnmap(base + i * G, G)); CK(cuMemRelease(hs[i])); }
    free(hs);
  }
  // 4. main maps (pre-created) while a worker releases: contention?
  {
    CUmemGenericAllocationHandle *rel = malloc(n * sizeof *rel);
    for (int i = 0; i < n; i++) rel[i] = mk(G);
    for (int i = 0; i < n; i++) h[i] = mk(G);
    double t0 = now();
    for (int i = 0; i < n; i++) CK(cuMemMap(base + i * G, G, 0, h[i], 0));
    CK(cuMemSetAccess(base, n * G, &acc, 1));
    double t1 = now();
    CK(cuMemUnmap(base, n * G));
    printf("map+access alone %.1f us/unit\n", (t1 - t0) / n);
    atomic_store(&stop_bg, 0); atomic_store(&bg_ops, 0);
    pthread_t th; pthread_create(&th, NULL, bg_create_release, NULL);
    double t2 = now();
    for (int i = 0; i < n; i++) CK(cuMemMap(base + i * G, G, 0, h[i], 0));
    CK(cuMemSetAccess(base, n * G, &acc, 1));
    double t3 = now();
    atomic_store(&stop_bg, 1); pthread_join(th, NULL);
    printf("map+access with a worker creating+releasing %.1f us/unit (worker pairs %ld)\n", (t3 - t2) / n, atomic_load(&bg_ops));
    CK(cuMemUnmap(base, n * G));
    for (int i = 0; i < n; i++) { CK(cuMemRelease(h[i])); CK(cuMemRelease(rel[i])); }
  }
  return 0;
}
