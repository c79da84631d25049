/* hip/hip_version.h for libhipmem: the HIP version libhipmem implements
 * (hipRuntimeGetVersion returns HIP_VERSION). */
#ifndef HIPMEM_HIP_VERSION_H
#define HIPMEM_HIP_VERSION_H

#define HIP_VERSION_MAJOR 6
#define HIP_VERSION_MINOR 2
#define HIP_VERSION_PATCH 0
#define HIP_VERSION_GITHASH "hipmem"
#define HIP_VERSION_BUILD_ID 0
#define HIP_VERSION_BUILD_NAME "hipmem"
#define HIP_VERSION (HIP_VERSION_MAJOR * 10000000 + HIP_VERSION_MINOR * 100000 + HIP_VERSION_PATCH)

#endif
