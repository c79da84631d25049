// Seed: "Memory management and transfers with HIP" (CSC), Memory pools - Example 2 - fast.
// Glue (not in the listing): the includes, the kernel, main, ptr, size, the
// stream, the launch configuration elided as `<<<..., stream>>>`, the timing.
#include <hip/hip_runtime.h>
#include <chrono>
#include <cstdio>

__global__ void kernel(int* ptr) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1024) ptr[i] = i;
}

int main() {
  int* ptr;
  size_t size = 1024 * sizeof(int);
  hipStream_t stream;
  hipStreamCreate(&stream);
  auto t0 = std::chrono::steady_clock::now();
for (int i = 0; i < 100; i++) {
  // Obtain unused memory from the current memory pool, 
  // more memory is allocated for the pool if needed
  hipMallocAsync(&ptr, size, stream); 
  // Run GPU kernel
  kernel<<<4, 256, 0, stream>>>(ptr);
  // Return memory to the current memory pool
  hipFreeAsync(ptr, stream); 
}
// Synchronize 
hipStreamSynchronize(stream); 
  auto t1 = std::chrono::steady_clock::now();
  hipStreamDestroy(stream);
  printf("fast loop (hipMallocAsync/hipFreeAsync): %.3f ms, last error %s\n",
         std::chrono::duration<double, std::milli>(t1 - t0).count(), hipGetErrorName(hipGetLastError()));
  return 0;
}
