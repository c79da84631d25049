// Seed: HIP documentation, "Stream Ordered Memory Allocator" (listing as printed).
#include <hip/hip_runtime.h>
#include <iostream>

int main() {
    hipMemPool_t memPool;
    hipDevice_t device = 0; // Specify the device index.

    // Initialize the device.
    hipSetDevice(device);

    // Get the default memory pool for the device.
    hipDeviceGetDefaultMemPool(&memPool, device);

    // Allocate memory from the pool (e.g., 1 MB).
    size_t allocSize = 1 * 1024 * 1024;
    void* ptr;
    hipMalloc(&ptr, allocSize);

    // Free the allocated memory.
    hipFree(ptr);

    // Trim the memory pool to a specific size (e.g., 512 KB).
    size_t newSize = 512 * 1024;
    hipMemPoolTrimTo(memPool, newSize);

    // Clean up.
    hipMemPoolDestroy(memPool);

    std::cout << "Memory pool trimmed to " << newSize << " bytes." << std::endl;
    return 0;
}
