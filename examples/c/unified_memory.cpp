// Seed: "Memory management and transfers with HIP" (CSC), Unified Memory management.
// Needs hipMallocManaged (managed memory, issue 6), which libhipmem exports; the
// kernel makes it nvcc-only (build-nvcc.sh).
// Glue (not in the listing): the includes, N, the kernel, the body of `...`,
// the launch configuration elided as `<<<...>>>`, and the check of the result.
#include <hip/hip_runtime.h>
#include <cstdio>

#define N 1024

__global__ void kernel(int* A) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) A[i] = 2 * A[i];
}

int main() {
 int *A;
 hipMallocManaged((void**)&A, N*sizeof(int));
 for (int i = 0; i < N; i++) A[i] = i;
 /* Launch GPU kernel */
 kernel<<<(N + 255) / 256, 256>>>(A);
 hipStreamSynchronize(0);
 // result is in A
 int ok = 1;
 for (int i = 0; i < N; i++) ok &= (A[i] == 2 * i);
 printf("unified memory: %s\n", ok ? "ok" : "WRONG");
 hipFree(A);
 return ok ? 0 : 1;
}
