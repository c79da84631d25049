/* hip/hip_runtime.h for libhipmem: HIP's runtime API as libhipmem implements
 * it (hip_runtime_api.h), the standard headers HIP's own hip_runtime.h makes
 * visible, and under nvcc HIP's kernel-language macros.
 *
 * Host code compiles unchanged with a C or C++ compiler; link with -lhipmem.
 * Under nvcc (__CUDACC__) the kernel language (__global__, <<<...>>>,
 * threadIdx, dim3) comes from <cuda_runtime.h>, and hipStream_t is the
 * CUstream, so kernels launched on hipmem's streams (cuda backend) run in
 * order with its copies and allocations. */
#ifndef HIPMEM_HIP_RUNTIME_H
#define HIPMEM_HIP_RUNTIME_H

/* The standard headers a HIP program sees through ROCm 6's hip_runtime.h
 * (stdint.h, stdio.h, stdlib.h, assert.h, <thread>), amd_hip_runtime.h
 * (<cstddef>, <cmath>, <cstdint>, <tuple>), its vector types (<array>,
 * <iosfwd>, <type_traits>), its math functions (<algorithm>, <limits>,
 * limits.h) and the HIP runtime wrapper hipcc puts before every file
 * (<cmath>, <cstdlib>, <algorithm>, <complex>, <new>). Programs written for
 * hipcc rely on them, e.g. std::string through <complex>. */
#include <assert.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#ifdef __cplusplus
#include <algorithm>
#include <array>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iosfwd>
#include <limits>
#include <new>
#include <thread>
#include <tuple>
#include <type_traits>
#else
#include <math.h>
#endif

#include "hip_runtime_api.h"

#ifdef __CUDACC__
/* HIP's kernel language on NVIDIA (HIP's nvidia_hip_runtime.h). */
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define HIP_SYMBOL(X) &X
typedef int hipLaunchParm;
#define hipLaunchKernelGGLInternal(kernelName, numBlocks, numThreads, memPerBlock, streamId, ...) \
  do {                                                                                           \
    kernelName<<<numBlocks, numThreads, memPerBlock, streamId>>>(__VA_ARGS__);                   \
  } while (0)
#define hipLaunchKernelGGL(kernelName, ...) hipLaunchKernelGGLInternal((kernelName), __VA_ARGS__)

#define hipThreadIdx_x threadIdx.x
#define hipThreadIdx_y threadIdx.y
#define hipThreadIdx_z threadIdx.z
#define hipBlockIdx_x blockIdx.x
#define hipBlockIdx_y blockIdx.y
#define hipBlockIdx_z blockIdx.z
#define hipBlockDim_x blockDim.x
#define hipBlockDim_y blockDim.y
#define hipBlockDim_z blockDim.z
#define hipGridDim_x gridDim.x
#define hipGridDim_y gridDim.y
#define hipGridDim_z gridDim.z
#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ type var[];
#define HIP_DYNAMIC_SHARED_ATTRIBUTE
#define __clock() clock()
#define __clock64() clock64()
#else
/* Without nvcc there is no device code: a symbol is named by the variable
 * (HIP's AMD spelling); the kernel-side functions return hipErrorNotSupported. */
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define HIP_SYMBOL(X) X
#endif

#endif
