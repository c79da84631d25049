// hipmem's own extension (not HIP's): what a pool has asked of the backend.
// A 48 MiB allocation grows a new pool; a free and a trim give the memory
// back. On a GPU each backend call costs microseconds, an allocation from
// the pool tens of nanoseconds: these counts say where a pool's time goes.
#include <cstdio>
#include <hip/hip_runtime.h>

static void print(const char* when, hipMemPool_t pool) {
    hipmemBackendCalls c;
    hipError_t e = hipmemPoolGetBackendCalls(pool, &c);
    if (e != hipSuccess) {
        printf("%s: %s\n", when, hipGetErrorName(e));
        return;
    }
    uint64_t reserved = 0;
    hipMemPoolGetAttribute(pool, hipMemPoolAttrReservedMemCurrent, &reserved);
    unsigned long long calls = c.segments_allocated + c.segments_freed + c.granules_created +
                               c.granules_released + c.maps + c.unmaps;
    printf("%s: reserved %llu, created %llu, released %llu, calls %llu\n", when,
           (unsigned long long)reserved, (unsigned long long)c.bytes_created,
           (unsigned long long)c.bytes_released, calls);
}

int main() {
    hipStream_t stream;
    hipStreamCreate(&stream);
    hipMemPoolProps props = {};
    props.allocType = hipMemAllocationTypePinned;
    props.location.type = hipMemLocationTypeDevice;
    props.location.id = 0;
    hipMemPool_t pool;
    if (hipMemPoolCreate(&pool, &props) != hipSuccess) {
        printf("hipMemPoolCreate failed\n");
        return 1;
    }
    print("new pool", pool);

    void* p = nullptr;
    hipMallocFromPoolAsync(&p, 48 << 20, pool, stream);
    print("after a 48 MiB allocation", pool);

    hipFreeAsync(p, stream);
    hipStreamSynchronize(stream);
    hipMemPoolTrimTo(pool, 0);
    print("after the free and a trim", pool);

    hipmemBackendCalls c;
    printf("a null pool: %s\n", hipGetErrorName(hipmemPoolGetBackendCalls(nullptr, &c)));

    hipMemPoolDestroy(pool);
    hipStreamDestroy(stream);
    return 0;
}
