// Device code through hipmem's header under nvcc: symbols (by HIP_SYMBOL and
// by the variable itself), occupancy (template and const void* forms),
// hipLaunchKernelGGL and hipLaunchKernel, a failed launch reported by
// hipGetLastError, all on hipmem's streams and memory. nvcc only: it has kernels.
#include <hip/hip_runtime.h>

#define CHECK(call)                                                                      \
  do {                                                                                   \
    hipError_t e_ = (call);                                                              \
    if (e_ != hipSuccess) {                                                              \
      printf("%s failed: %s (%d) at line %d\n", #call, hipGetErrorName(e_), e_, __LINE__); \
      return 1;                                                                          \
    }                                                                                    \
  } while (0)

__device__ int factor;
__device__ int table[4];

__global__ void scale(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = i * factor + table[i % 4];
}

int main() {
  const int n = 1 << 16;
  int three = 3;
  int offsets[4] = {0, 1, 2, 3};
  CHECK(hipMemcpyToSymbol(HIP_SYMBOL(factor), &three, sizeof(int)));
  CHECK(hipMemcpyToSymbol(table, offsets, sizeof(offsets), 0, hipMemcpyHostToDevice));
  int back = 0;
  CHECK(hipMemcpyFromSymbol(&back, HIP_SYMBOL(factor), sizeof(int)));
  if (back != 3) { printf("hipMemcpyFromSymbol read %d\n", back); return 1; }
  void* addr = nullptr;
  size_t size = 0;
  CHECK(hipGetSymbolAddress(&addr, HIP_SYMBOL(table)));
  CHECK(hipGetSymbolSize(&size, table));
  if (addr == nullptr || size != sizeof(offsets)) { printf("symbol %p of %zu bytes\n", addr, size); return 1; }

  int grid = 0, block = 0, active = 0;
  CHECK(hipOccupancyMaxPotentialBlockSize(&grid, &block, scale, 0, 0));
  CHECK(hipOccupancyMaxPotentialBlockSize(&grid, &block, reinterpret_cast<const void*>(scale), 0, 0));
  CHECK(hipOccupancyMaxActiveBlocksPerMultiprocessor(&active, scale, block, 0));
  if (block <= 0 || active <= 0) { printf("occupancy: block %d, active %d\n", block, active); return 1; }

  int* d = nullptr;
  CHECK(hipMalloc(&d, n * sizeof(int)));
  hipStream_t s;
  CHECK(hipStreamCreate(&s));
  hipLaunchKernelGGL(scale, dim3((n + block - 1) / block), dim3(block), 0, s, d, n);
  CHECK(hipGetLastError());
  CHECK(hipStreamSynchronize(s));
  int* h = (int*)malloc(n * sizeof(int));
  CHECK(hipMemcpy(h, d, n * sizeof(int), hipMemcpyDeviceToHost));
  for (int i = 0; i < n; i++) {
    if (h[i] != i * 3 + i % 4) { printf("element %d: %d\n", i, h[i]); return 1; }
  }
  int count = n;
  void* args[] = {&d, &count};
  CHECK(hipMemsetAsync(d, 0, n * sizeof(int), s));
  CHECK(hipLaunchKernel(reinterpret_cast<const void*>(scale), dim3(n / 256), dim3(256), args, 0, s));
  CHECK(hipStreamSynchronize(s));
  CHECK(hipMemcpy(h, d, n * sizeof(int), hipMemcpyDeviceToHost));
  if (h[n - 1] != (n - 1) * 3 + (n - 1) % 4) { printf("hipLaunchKernel: %d\n", h[n - 1]); return 1; }

  // A launch the device refuses (too many threads per block) is the next error.
  hipLaunchKernelGGL(scale, dim3(1), dim3(4096), 0, s, d, n);
  hipError_t launch = hipGetLastError();
  if (launch != hipErrorInvalidConfiguration) { printf("a bad launch read %s\n", hipGetErrorName(launch)); return 1; }
  CHECK(hipGetLastError());

  CHECK(hipStreamDestroy(s));
  CHECK(hipFree(d));
  free(h);
  printf("device code: symbols, occupancy and launches ok\n");
  return 0;
}
