// Seed: HIP documentation, "Stream Ordered Memory Allocator" (listing as printed).
#include <iostream>
#include <hip/hip_runtime.h>

// Kernel to perform some computation on allocated memory.
__global__ void myKernel(int* data, size_t numElements) {
    int tid = threadIdx.x + blockIdx.x * blockDim.x;
    if (tid < numElements) {
        data[tid] = tid * 2;
    }
}

int main() {
    // Initialize HIP.
    hipInit(0);

    // Stream 0.
    constexpr hipStream_t streamId = 0;

    // Allocate memory with stream ordered semantics.
    constexpr size_t numElements = 1024;
    int* devData;
    hipMallocAsync(&devData, numElements * sizeof(*devData), streamId);

    // Launch the kernel to perform computation.
    dim3 blockSize(256);
    dim3 gridSize((numElements + blockSize.x - 1) / blockSize.x);
    myKernel<<<gridSize, blockSize>>>(devData, numElements);

    // Copy data back to host.
    int* hostData = new int[numElements];
    hipMemcpy(hostData, devData, numElements * sizeof(*devData), hipMemcpyDeviceToHost);

    // Print the array.
    for (size_t i = 0; i < numElements; ++i) {
        std::cout << "Element " << i << ": " << hostData[i] << std::endl;
    }

    // Free memory with stream ordered semantics.
    hipFreeAsync(devData, streamId);
    delete[] hostData;

    // Synchronize to ensure completion.
    hipDeviceSynchronize();

    return 0;
}
