/* hip/hipmem_inline.h: the inline part of hip_runtime_api.h (included at its
 * end): HIP's C++ overloads (typed pointers, symbols by reference, kernels by
 * function), and under nvcc the device-code functions over the CUDA runtime
 * that compiled the kernels. Not meant to be included on its own. */
#ifndef HIPMEM_HIP_INLINE_H
#define HIPMEM_HIP_INLINE_H

#ifdef __CUDACC__
/* cudaError_t to hipError_t: HIP numbers its codes as the CUDA runtime does
 * wherever both have the code; others are hipErrorUnknown. */
static inline hipError_t __hipmemFromCuda(cudaError_t e) {
  switch ((int)e) {
    case 0: case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9: case 12: case 13:
    case 17: case 21: case 35: case 52: case 53: case 98: case 100: case 101: case 200: case 201:
    case 202: case 205: case 206: case 207: case 208: case 209: case 210: case 211: case 212: case 213:
    case 214: case 215: case 216: case 217: case 218: case 219: case 300: case 301: case 302: case 303:
    case 304: case 400: case 401: case 500: case 600: case 700: case 701: case 702: case 704: case 705:
    case 708: case 709: case 710: case 712: case 713: case 719: case 720: case 801: case 900: case 901:
    case 902: case 903: case 904: case 905: case 906: case 907: case 908: case 910:
      return (hipError_t)e;
    default:
      return hipErrorUnknown;
  }
}

/* The last error: libhipmem's own, else the one the CUDA runtime recorded
 * (a failed kernel launch). Both are read, so both are reset. */
#ifdef __cplusplus
extern "C" {
#endif
hipError_t __hipmemLibGetLastError(void) __asm__("hipGetLastError");
hipError_t __hipmemLibPeekAtLastError(void) __asm__("hipPeekAtLastError");
#ifdef __cplusplus
}
#endif
static inline hipError_t hipGetLastError(void) {
  hipError_t own = __hipmemLibGetLastError();
  hipError_t launch = __hipmemFromCuda(cudaGetLastError());
  return own != hipSuccess ? own : launch;
}
static inline hipError_t hipPeekAtLastError(void) {
  hipError_t own = __hipmemLibPeekAtLastError();
  return own != hipSuccess ? own : __hipmemFromCuda(cudaPeekAtLastError());
}

/* Symbols: the CUDA runtime's (HIP_SYMBOL(x) is &x here, as on HIP's NVIDIA
 * platform; the C++ overloads below also take the variable itself). */
static inline hipError_t hipGetSymbolAddress(void** devPtr, const void* symbol) {
  return __hipmemFromCuda(cudaGetSymbolAddress(devPtr, symbol));
}
static inline hipError_t hipGetSymbolSize(size_t* size, const void* symbol) {
  return __hipmemFromCuda(cudaGetSymbolSize(size, symbol));
}
static inline hipError_t hipMemcpyToSymbol(const void* symbol, const void* src, size_t sizeBytes,
                                           size_t offset __dparm(0),
                                           hipMemcpyKind kind __dparm(hipMemcpyHostToDevice)) {
  return __hipmemFromCuda(cudaMemcpyToSymbol(symbol, src, sizeBytes, offset, (cudaMemcpyKind)kind));
}
static inline hipError_t hipMemcpyToSymbolAsync(const void* symbol, const void* src, size_t sizeBytes, size_t offset,
                                                hipMemcpyKind kind, hipStream_t stream __dparm(0)) {
  return __hipmemFromCuda(cudaMemcpyToSymbolAsync(symbol, src, sizeBytes, offset, (cudaMemcpyKind)kind, stream));
}
static inline hipError_t hipMemcpyFromSymbol(void* dst, const void* symbol, size_t sizeBytes,
                                             size_t offset __dparm(0),
                                             hipMemcpyKind kind __dparm(hipMemcpyDeviceToHost)) {
  return __hipmemFromCuda(cudaMemcpyFromSymbol(dst, symbol, sizeBytes, offset, (cudaMemcpyKind)kind));
}
static inline hipError_t hipMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t sizeBytes, size_t offset,
                                                  hipMemcpyKind kind, hipStream_t stream __dparm(0)) {
  return __hipmemFromCuda(cudaMemcpyFromSymbolAsync(dst, symbol, sizeBytes, offset, (cudaMemcpyKind)kind, stream));
}

/* Occupancy and launches: the CUDA runtime's. */
static inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* f, int blockSize,
                                                                      size_t dynSharedMemPerBlk) {
  return __hipmemFromCuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, f, blockSize, dynSharedMemPerBlk));
}
static inline hipError_t hipOccupancyMaxPotentialBlockSize(int* gridSize, int* blockSize, const void* f,
                                                           size_t dynSharedMemPerBlk, int blockSizeLimit) {
  return __hipmemFromCuda(
      cudaOccupancyMaxPotentialBlockSize<const void*>(gridSize, blockSize, f, dynSharedMemPerBlk, blockSizeLimit));
}
static inline hipError_t hipLaunchKernel(const void* function_address, dim3 numBlocks, dim3 dimBlocks, void** args,
                                         size_t sharedMemBytes __dparm(0), hipStream_t stream __dparm(0)) {
  return __hipmemFromCuda(cudaLaunchKernel(function_address, numBlocks, dimBlocks, args, sharedMemBytes, stream));
}
#endif /* __CUDACC__ */

#if defined(__cplusplus) && !defined(__HIP_DISABLE_CPP_FUNCTIONS__)
#include <type_traits>

/* HIP's typed conveniences. */
template <class T>
static inline hipError_t hipMalloc(T** devPtr, size_t size) {
  return hipMalloc((void**)devPtr, size);
}
template <class T>
static inline hipError_t hipHostMalloc(T** ptr, size_t size, unsigned int flags = hipHostMallocDefault) {
  return hipHostMalloc((void**)ptr, size, flags);
}
template <class T>
static inline hipError_t hipMallocManaged(T** devPtr, size_t size, unsigned int flags = hipMemAttachGlobal) {
  return hipMallocManaged((void**)devPtr, size, flags);
}
static inline hipError_t hipMallocAsync(void** dev_ptr, size_t size, hipMemPool_t mem_pool, hipStream_t stream) {
  return hipMallocFromPoolAsync(dev_ptr, size, mem_pool, stream);
}
template <class T>
static inline hipError_t hipMallocAsync(T** dev_ptr, size_t size, hipMemPool_t mem_pool, hipStream_t stream) {
  return hipMallocFromPoolAsync(reinterpret_cast<void**>(dev_ptr), size, mem_pool, stream);
}
template <class T>
static inline hipError_t hipMallocAsync(T** dev_ptr, size_t size, hipStream_t stream) {
  return hipMallocAsync(reinterpret_cast<void**>(dev_ptr), size, stream);
}
template <class T>
static inline hipError_t hipMallocFromPoolAsync(T** dev_ptr, size_t size, hipMemPool_t mem_pool, hipStream_t stream) {
  return hipMallocFromPoolAsync(reinterpret_cast<void**>(dev_ptr), size, mem_pool, stream);
}

/* Symbols by reference (the variable itself, as HIP's AMD platform takes
 * it); a pointer goes to the const void* functions above. */
#define __HIPMEM_NOT_POINTER(T) typename std::enable_if<!std::is_pointer<T>::value, int>::type = 0
template <typename T, __HIPMEM_NOT_POINTER(T)>
hipError_t hipGetSymbolAddress(void** devPtr, const T& symbol) {
  return ::hipGetSymbolAddress(devPtr, (const void*)&symbol);
}
template <typename T, __HIPMEM_NOT_POINTER(T)>
hipError_t hipGetSymbolSize(size_t* size, const T& symbol) {
  return ::hipGetSymbolSize(size, (const void*)&symbol);
}
template <typename T, __HIPMEM_NOT_POINTER(T)>
hipError_t hipMemcpyToSymbol(const T& symbol, const void* src, size_t sizeBytes, size_t offset = 0,
                             hipMemcpyKind kind = hipMemcpyHostToDevice) {
  return ::hipMemcpyToSymbol((const void*)&symbol, src, sizeBytes, offset, kind);
}
template <typename T, __HIPMEM_NOT_POINTER(T)>
hipError_t hipMemcpyToSymbolAsync(const T& symbol, const void* src, size_t sizeBytes, size_t offset,
                                  hipMemcpyKind kind, hipStream_t stream = 0) {
  return ::hipMemcpyToSymbolAsync((const void*)&symbol, src, sizeBytes, offset, kind, stream);
}
template <typename T, __HIPMEM_NOT_POINTER(T)>
hipError_t hipMemcpyFromSymbol(void* dst, const T& symbol, size_t sizeBytes, size_t offset = 0,
                               hipMemcpyKind kind = hipMemcpyDeviceToHost) {
  return ::hipMemcpyFromSymbol(dst, (const void*)&symbol, sizeBytes, offset, kind);
}
template <typename T, __HIPMEM_NOT_POINTER(T)>
hipError_t hipMemcpyFromSymbolAsync(void* dst, const T& symbol, size_t sizeBytes, size_t offset,
                                    hipMemcpyKind kind, hipStream_t stream = 0) {
  return ::hipMemcpyFromSymbolAsync(dst, (const void*)&symbol, sizeBytes, offset, kind, stream);
}
#undef __HIPMEM_NOT_POINTER

/* Kernels by function. */
template <class T>
inline hipError_t hipOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, T f, int blockSize,
                                                               size_t dynSharedMemPerBlk) {
  return hipOccupancyMaxActiveBlocksPerMultiprocessor(numBlocks, reinterpret_cast<const void*>(f), blockSize,
                                                      dynSharedMemPerBlk);
}
template <typename T>
static inline hipError_t hipOccupancyMaxPotentialBlockSize(int* gridSize, int* blockSize, T f,
                                                           size_t dynSharedMemPerBlk = 0, int blockSizeLimit = 0) {
#ifdef __CUDACC__
  return __hipmemFromCuda(cudaOccupancyMaxPotentialBlockSize(gridSize, blockSize, f, dynSharedMemPerBlk, blockSizeLimit));
#else
  return hipOccupancyMaxPotentialBlockSize(gridSize, blockSize, reinterpret_cast<const void*>(f), dynSharedMemPerBlk,
                                           blockSizeLimit);
#endif
}
#endif /* __cplusplus */

#endif /* HIPMEM_HIP_INLINE_H */
