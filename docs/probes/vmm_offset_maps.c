// Whether one physical allocation can be mapped granule by granule (a
// nonzero offset in cuMemMap) on this driver, what that costs against one
// allocation per granule, and what the driver's own pool pays to grow.
// (docs/pool-measurements.md, stop 66, has one GPU's figures. Where the
// driver refuses the offset, only the per-granule allocations, the single
// mapping and the driver's pool are timed.)
//
//   nvcc -O2 -o vmm_offset_maps docs/probes/vmm_offset_maps.c -lcuda && ./vmm_offset_maps
//
// It reserves 4 GiB of addresses and holds at most 512 MiB of device memory
// at once; everything is given back before it ends.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define CK(x) do { CUresult r = (x); if (r != CUDA_SUCCESS) { const char *s; cuGetErrorString(r, &s); fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s); exit(1);} } while (0)
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static CUmemAllocationProp prop; static CUmemAccessDesc acc; static size_t G;
static CUmemGenericAllocationHandle mk(size_t n) { CUmemGenericAllocationHandle h; CK(cuMemCreate(&h, n, &prop, 0)); return h; }

int main(void) {
  CUdevice dev; CUcontext ctx;
  CK(cuInit(0)); CK(cuDeviceGet(&dev, 0)); CK(cuDevicePrimaryCtxRetain(&ctx, dev)); CK(cuCtxSetCurrent(ctx));
  int ver = 0; CK(cuDriverGetVersion(&ver));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED; prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE; prop.location.id = 0;
  CK(cuMemGetAllocationGranularity(&G, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  acc.location = prop.location; acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t span = (size_t)4 << 30; CUdeviceptr base; CK(cuMemAddressReserve(&base, span, G, 0, 0));
  printf("driver %d, granularity %zu\n", ver, G);
  const int n = 24; // a 48 MiB growth
  CUmemGenericAllocationHandle one = mk(n * G);
  // 1. Does a nonzero offset work? Map granule 1 of `one` alone.
  CUresult r = cuMemMap(base, G, G, one, 0);
  const char *s = ""; if (r != CUDA_SUCCESS) cuGetErrorString(r, &s);
  printf("cuMemMap with offset %zu: %s\n", G, r == CUDA_SUCCESS ? "accepted" : s);
  int offsets = r == CUDA_SUCCESS;
  if (offsets) CK(cuMemUnmap(base, G));
  // 2. Data: granule i mapped alone (every other slot, out of order) must
  //    show what the whole allocation, mapped once elsewhere, holds there.
  CUdeviceptr whole = base + span / 2;
  if (offsets) {
  CK(cuMemMap(whole, n * G, 0, one, 0)); CK(cuMemSetAccess(whole, n * G, &acc, 1));
  for (int i = 0; i < n; i++) CK(cuMemsetD32(whole + i * G, 0xC0DE0000u + i, G / 4));
  CK(cuCtxSynchronize());
  int bad = 0;
  for (int i = 0; i < n; i++) {
    int slot = 2 * (n - 1 - i);
    CK(cuMemMap(base + slot * G, G, i * G, one, 0)); CK(cuMemSetAccess(base + slot * G, G, &acc, 1));
    unsigned v[2]; CK(cuMemcpyDtoH(v, base + slot * G + G - 8, 8));
    if (v[0] != 0xC0DE0000u + i || v[1] != 0xC0DE0000u + i) bad++;
  }
  printf("granule-by-granule mappings read what the whole mapping wrote: %s\n", bad ? "NO" : "yes");
  for (int i = 0; i < n; i++) CK(cuMemUnmap(base + 2 * (n - 1 - i) * G, G));
  CK(cuMemUnmap(whole, n * G));
  }
  // 3. Costs, five rounds each: (a) n allocations of one granule, mapped in
  //    a row, access in one call; (b) one allocation mapped granule by
  //    granule in a row, access in one call; (c) the same, access per
  //    mapping; (d) one allocation mapped once. Then unmap (+ release).
  for (int round = 0; round < 5; round++) {
    double t[8];
    CUmemGenericAllocationHandle h[64];
    t[0] = now();
    for (int i = 0; i < n; i++) { h[i] = mk(G); CK(cuMemMap(base + i * G, G, 0, h[i], 0)); }
    CK(cuMemSetAccess(base, n * G, &acc, 1));
    t[1] = now();
    for (int i = 0; i < n; i++) { CK(cuMemUnmap(base + i * G, G)); CK(cuMemRelease(h[i])); }
    t[2] = now();
    for (int i = 0; offsets && i < n; i++) CK(cuMemMap(base + i * G, G, i * G, one, 0));
    if (offsets) CK(cuMemSetAccess(base, n * G, &acc, 1));
    t[3] = now();
    for (int i = 0; offsets && i < n; i++) CK(cuMemUnmap(base + i * G, G));
    t[4] = now();
    for (int i = 0; offsets && i < n; i++) { CK(cuMemMap(base + i * G, G, i * G, one, 0)); CK(cuMemSetAccess(base + i * G, G, &acc, 1)); }
    t[5] = now();
    for (int i = 0; offsets && i < n; i++) CK(cuMemUnmap(base + i * G, G));
    t[6] = now();
    CUmemGenericAllocationHandle x = mk(n * G);
    CK(cuMemMap(base, n * G, 0, x, 0)); CK(cuMemSetAccess(base, n * G, &acc, 1));
    t[7] = now();
    CK(cuMemUnmap(base, n * G)); CK(cuMemRelease(x));
    double t8 = now();
    printf("48 MiB, us: %d allocations create+map+access %.0f, unmap+release %.0f | one allocation by granule map+access(one call) %.0f, unmap %.0f | map+access(each) %.0f, unmap %.0f | one mapping create+map+access %.0f, unmap+release %.0f\n",
           n, t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], t[5] - t[4], t[6] - t[5], t[7] - t[6], t8 - t[7]);
  }
  CK(cuMemRelease(one));
  // 4. The driver's pool growing by 48 MiB blocks from empty (release
  //    threshold 0: trimmed to nothing before each round).
  CUmemoryPool pool; CUmemPoolProps pp; memset(&pp, 0, sizeof pp);
  pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED; pp.location = prop.location;
  CK(cuMemPoolCreate(&pool, &pp));
  CUstream st; CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  for (int round = 0; round < 5; round++) {
    CUdeviceptr p[10];
    double t0 = now();
    for (int i = 0; i < 10; i++) CK(cuMemAllocFromPoolAsync(&p[i], n * G, pool, st));
    double t1 = now();
    for (int i = 0; i < 10; i++) CK(cuMemFreeAsync(p[i], st));
    CK(cuStreamSynchronize(st));
    double t2 = now();
    CK(cuMemPoolTrimTo(pool, 0));
    double t3 = now();
    printf("driver's pool: ten 48 MiB blocks from empty %.0f us (%.0f each), freed+synced %.0f, trimmed %.0f\n", t1 - t0, (t1 - t0) / 10, t2 - t1, t3 - t2);
  }
  CK(cuStreamDestroy(st)); CK(cuMemPoolDestroy(pool));
  CK(cuMemAddressFree(base, span));
  return 0;
}
