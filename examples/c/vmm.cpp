// Seed: HIP documentation, "Virtual memory management": the listings in order
// (allocate physical memory, reserve, map, set access, grow, free).
// Glue (not in the listings): the includes, main, ROUND_UP, size, currentDev,
// the declarations, the second physical allocation the growth listing maps,
// reading and writing the memory, checking where the growth landed, and freeing it.
#include <hip/hip_runtime.h>
#include <cstdio>
#include <vector>

#define ROUND_UP(x, n) ((((x) + (n) - 1) / (n)) * (n))

static bool readWrite(void* p, size_t bytes, unsigned char seed) {
  std::vector<unsigned char> in(bytes), out(bytes);
  for (size_t i = 0; i < bytes; i++) in[i] = (unsigned char)(i * 7 + seed);
  hipMemcpy(p, in.data(), bytes, hipMemcpyHostToDevice);
  hipMemcpy(out.data(), p, bytes, hipMemcpyDeviceToHost);
  return in == out;
}

int main() {
  int currentDev = 0;
  hipSetDevice(currentDev);
  size_t size = 4 << 20;
  size_t padded_size;
  void* ptr;

size_t granularity = 0;
hipMemGenericAllocationHandle_t allocHandle;
hipMemAllocationProp prop = {};
prop.type = HIP_MEM_ALLOCATION_TYPE_PINNED;
prop.location.type = HIP_MEM_LOCATION_TYPE_DEVICE;
prop.location.id = currentDev;
hipMemGetAllocationGranularity(&granularity, &prop, HIP_MEM_ALLOC_GRANULARITY_MINIMUM);
padded_size = ROUND_UP(size, granularity);
hipMemCreate(&allocHandle, padded_size, &prop, 0);

hipMemAddressReserve(&ptr, padded_size, 0, 0, 0);
hipMemMap(ptr, padded_size, 0, allocHandle, 0);

hipMemAccessDesc accessDesc = {};
accessDesc.location.type = HIP_MEM_LOCATION_TYPE_DEVICE;
accessDesc.location.id = currentDev;
accessDesc.flags = HIP_MEM_ACCESS_FLAGS_PROT_READWRITE;
hipMemSetAccess(ptr, padded_size, &accessDesc, 1);

  printf("VMM: mapped %zu bytes, read back %s\n", padded_size, readWrite(ptr, padded_size, 1) ? "ok" : "WRONG");

  size_t new_size = padded_size + ROUND_UP(size, granularity);
  hipMemGenericAllocationHandle_t newAllocHandle;
  hipMemCreate(&newAllocHandle, new_size - padded_size, &prop, 0);
  void* new_ptr;

hipMemAddressReserve(&new_ptr, (new_size - padded_size), 0, ptr + padded_size, 0);
hipMemMap(new_ptr, (new_size - padded_size), 0, newAllocHandle, 0);
hipMemSetAccess(new_ptr, (new_size - padded_size), &accessDesc, 1);

  bool contiguous = new_ptr == (char*)ptr + padded_size;
  printf("VMM: grew to %zu bytes (%s), read back %s\n", new_size,
         contiguous ? "contiguous" : "not contiguous: the hint was not honoured",
         readWrite(new_ptr, new_size - padded_size, 2) ? "ok" : "WRONG");
  if (contiguous) printf("VMM: whole range read back %s\n", readWrite(ptr, new_size, 3) ? "ok" : "WRONG");
  hipMemUnmap(new_ptr, new_size - padded_size);
  hipMemRelease(newAllocHandle);
  hipMemAddressFree(new_ptr, new_size - padded_size);

hipMemUnmap(ptr, size);
hipMemRelease(allocHandle);
hipMemAddressFree(ptr, size);

  hipError_t last = hipGetLastError();
  printf("VMM: freed, last error %s\n", hipGetErrorName(last));
  return last == hipSuccess ? 0 : 1;
}
