/* hip/hip_runtime.h for libhipmem: HIP's memory-management API (and the
 * streams, events and devices around it) implemented by hipmem.
 *
 * Host code compiles unchanged with a C or C++ compiler; link with -lhipmem.
 * Under nvcc (__CUDACC__) the kernel language (__global__, <<<...>>>,
 * threadIdx, dim3) comes from <cuda_runtime.h>, and hipStream_t is the
 * CUstream, so kernels launched on hipmem's streams (cuda backend) run in
 * order with its copies and allocations. */
#ifndef HIPMEM_HIP_RUNTIME_H
#define HIPMEM_HIP_RUNTIME_H

#include "hip_runtime_api.h"

#endif
