// Seed: HIP documentation, "Stream Ordered Memory Allocator" (listing as printed).
#include <iostream>
#include <hip/hip_runtime.h>

// Sample helper functions for getting the usage statistics in bulk.
struct usageStatistics {
    uint64_t reservedMemCurrent;
    uint64_t reservedMemHigh;
    uint64_t usedMemCurrent;
    uint64_t usedMemHigh;
};

void getUsageStatistics(hipMemPool_t memPool, struct usageStatistics *statistics) {
    hipMemPoolGetAttribute(memPool, hipMemPoolAttrReservedMemCurrent, &statistics->reservedMemCurrent);
    hipMemPoolGetAttribute(memPool, hipMemPoolAttrReservedMemHigh, &statistics->reservedMemHigh);
    hipMemPoolGetAttribute(memPool, hipMemPoolAttrUsedMemCurrent, &statistics->usedMemCurrent);
    hipMemPoolGetAttribute(memPool, hipMemPoolAttrUsedMemHigh, &statistics->usedMemHigh);
}

// Resetting the watermarks resets them to the current value.
void resetStatistics(hipMemPool_t memPool) {
    uint64_t value = 0;
    hipMemPoolSetAttribute(memPool, hipMemPoolAttrReservedMemHigh, &value);
    hipMemPoolSetAttribute(memPool, hipMemPoolAttrUsedMemHigh, &value);
}

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

    // Get and print usage statistics before resetting.
    usageStatistics statsBefore;
    getUsageStatistics(memPool, &statsBefore);
    std::cout << "Before resetting statistics:" << std::endl;
    std::cout << "Reserved Memory Current: " << statsBefore.reservedMemCurrent << " bytes" << std::endl;
    std::cout << "Reserved Memory High: " << statsBefore.reservedMemHigh << " bytes" << std::endl;
    std::cout << "Used Memory Current: " << statsBefore.usedMemCurrent << " bytes" << std::endl;
    std::cout << "Used Memory High: " << statsBefore.usedMemHigh << " bytes" << std::endl;

    // Reset the statistics.
    resetStatistics(memPool);

    // Get and print usage statistics after resetting.
    usageStatistics statsAfter;
    getUsageStatistics(memPool, &statsAfter);
    std::cout << "After resetting statistics:" << std::endl;
    std::cout << "Reserved Memory Current: " << statsAfter.reservedMemCurrent << " bytes" << std::endl;
    std::cout << "Reserved Memory High: " << statsAfter.reservedMemHigh << " bytes" << std::endl;
    std::cout << "Used Memory Current: " << statsAfter.usedMemCurrent << " bytes" << std::endl;
    std::cout << "Used Memory High: " << statsAfter.usedMemHigh << " bytes" << std::endl;

    // Clean up.
    hipMemPoolDestroy(memPool);

    return 0;
}
