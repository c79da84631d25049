// Seed: HIP documentation, "Stream Ordered Memory Allocator", Trim pools (the
// release-threshold snippet). Glue (not in the listing): the includes, main,
// memPool (the device's default pool) and the read-back that prints it.
#include <hip/hip_runtime.h>
#include <cstdint>
#include <iostream>

int main() {
    hipMemPool_t memPool;
    hipDeviceGetDefaultMemPool(&memPool, 0);

uint64_t threshold = UINT64_MAX;
hipMemPoolSetAttribute(memPool, hipMemPoolAttrReleaseThreshold, &threshold);

    uint64_t readBack = 0;
    hipMemPoolGetAttribute(memPool, hipMemPoolAttrReleaseThreshold, &readBack);
    std::cout << "Release threshold: " << readBack << " bytes" << std::endl;
    return hipGetLastError() == hipSuccess ? 0 : 1;
}
