// Seed: "Memory management and transfers with HIP" (CSC), Explicit memory management.
// Glue (not in the listing): the includes, N, the kernel, the body of `...`,
// the launch configuration elided as `<<<...>>>`, and the check of the result.
#include <hip/hip_runtime.h>
#include <cstdio>
#include <cstdlib>

#define N 1024

__global__ void kernel(int* d_A) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < N) d_A[i] = 2 * d_A[i];
}

int main() {
 int *A, *d_A;
 A = (int *) malloc(N*sizeof(int));
 hipMalloc((void**)&d_A, N*sizeof(int));
 for (int i = 0; i < N; i++) A[i] = i;
 /* Copy data to GPU and launch kernel */
 hipMemcpy(d_A, A, N*sizeof(int), hipMemcpyHostToDevice);
 kernel<<<(N + 255) / 256, 256>>>(d_A);
 hipMemcpy(A, d_A, N*sizeof(int), hipMemcpyDeviceToHost);
 hipFree(d_A);
 // result is in A
 int ok = 1;
 for (int i = 0; i < N; i++) ok &= (A[i] == 2 * i);
 printf("explicit memory: %s\n", ok ? "ok" : "WRONG");
 free(A);
 return ok ? 0 : 1;
}
