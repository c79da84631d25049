//! HIP's types, enum values and struct layouts (HIP's, not CUDA's), with
//! compile-time checks of sizes and offsets against ROCm's
//! `hip/hip_runtime_api.h` on LP64 Linux.

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ushort, c_void};
use std::mem::{offset_of, size_of};

use hipmem_rs::error::code;

/// `hipError_t`.
pub type hipError_t = c_int;
pub const hipSuccess: hipError_t = code::SUCCESS;
pub const hipErrorInvalidValue: hipError_t = code::INVALID_VALUE;
pub const hipErrorOutOfMemory: hipError_t = code::OUT_OF_MEMORY;
pub const hipErrorMemoryAllocation: hipError_t = code::OUT_OF_MEMORY;
pub const hipErrorNotInitialized: hipError_t = code::NOT_INITIALIZED;
pub const hipErrorInvalidPitchValue: hipError_t = code::INVALID_PITCH_VALUE;
pub const hipErrorInvalidSymbol: hipError_t = code::INVALID_SYMBOL;
pub const hipErrorInvalidDevicePointer: hipError_t = code::INVALID_DEVICE_POINTER;
pub const hipErrorInvalidMemcpyDirection: hipError_t = code::INVALID_MEMCPY_DIRECTION;
pub const hipErrorInvalidDevice: hipError_t = code::INVALID_DEVICE;
pub const hipErrorInvalidHandle: hipError_t = code::INVALID_HANDLE;
pub const hipErrorInvalidResourceHandle: hipError_t = code::INVALID_HANDLE;
pub const hipErrorNotFound: hipError_t = code::NOT_FOUND;
pub const hipErrorNotReady: hipError_t = code::NOT_READY;
pub const hipErrorPeerAccessAlreadyEnabled: hipError_t = code::PEER_ACCESS_ALREADY_ENABLED;
pub const hipErrorPeerAccessNotEnabled: hipError_t = code::PEER_ACCESS_NOT_ENABLED;
pub const hipErrorContextIsDestroyed: hipError_t = code::CONTEXT_IS_DESTROYED;
pub const hipErrorNotSupported: hipError_t = code::NOT_SUPPORTED;
pub const hipErrorUnknown: hipError_t = code::UNKNOWN;

/// `hipStream_t`: the backend's stream handle (a `CUstream` on cuda); 0 is
/// the null stream, 1 `hipStreamLegacy`, 2 `hipStreamPerThread`.
pub type hipStream_t = *mut c_void;
/// `hipEvent_t`: a handle handed out by this library's event table.
pub type hipEvent_t = *mut c_void;
/// `hipMemPool_t`: a handle handed out by this library's pool table.
pub type hipMemPool_t = *mut c_void;
/// `hipMemGenericAllocationHandle_t`: hipmem's id of a physical allocation.
pub type hipMemGenericAllocationHandle_t = *mut c_void;
/// `hipHostFn_t`.
pub type hipHostFn_t = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// `hipMemcpyKind`.
pub type hipMemcpyKind = c_int;
pub const hipMemcpyHostToHost: hipMemcpyKind = 0;
pub const hipMemcpyHostToDevice: hipMemcpyKind = 1;
pub const hipMemcpyDeviceToHost: hipMemcpyKind = 2;
pub const hipMemcpyDeviceToDevice: hipMemcpyKind = 3;
pub const hipMemcpyDefault: hipMemcpyKind = 4;

/// `hipMemoryType`.
pub type hipMemoryType = c_int;
pub const hipMemoryTypeUnregistered: hipMemoryType = 0;
pub const hipMemoryTypeHost: hipMemoryType = 1;
pub const hipMemoryTypeDevice: hipMemoryType = 2;
pub const hipMemoryTypeManaged: hipMemoryType = 3;

/// Attach flags of `hipMallocManaged` / `hipStreamAttachMemAsync`.
pub const hipMemAttachGlobal: c_uint = 0x01;
pub const hipMemAttachHost: c_uint = 0x02;
pub const hipMemAttachSingle: c_uint = 0x04;

/// `hipCpuDeviceId`: the host as a managed-memory location.
pub const hipCpuDeviceId: c_int = -1;
/// `hipInvalidDeviceId`: no location (or no single one).
pub const hipInvalidDeviceId: c_int = -2;

/// `hipMemoryAdvise` (AMD adds the coarse-grain pair).
pub type hipMemoryAdvise = c_int;
pub const hipMemAdviseSetReadMostly: hipMemoryAdvise = 1;
pub const hipMemAdviseUnsetReadMostly: hipMemoryAdvise = 2;
pub const hipMemAdviseSetPreferredLocation: hipMemoryAdvise = 3;
pub const hipMemAdviseUnsetPreferredLocation: hipMemoryAdvise = 4;
pub const hipMemAdviseSetAccessedBy: hipMemoryAdvise = 5;
pub const hipMemAdviseUnsetAccessedBy: hipMemoryAdvise = 6;
pub const hipMemAdviseSetCoarseGrain: hipMemoryAdvise = 100;
pub const hipMemAdviseUnsetCoarseGrain: hipMemoryAdvise = 101;

/// `hipMemRangeAttribute` (AMD adds CoherencyMode).
pub type hipMemRangeAttribute = c_int;
pub const hipMemRangeAttributeReadMostly: hipMemRangeAttribute = 1;
pub const hipMemRangeAttributePreferredLocation: hipMemRangeAttribute = 2;
pub const hipMemRangeAttributeAccessedBy: hipMemRangeAttribute = 3;
pub const hipMemRangeAttributeLastPrefetchLocation: hipMemRangeAttribute = 4;
pub const hipMemRangeAttributeCoherencyMode: hipMemRangeAttribute = 100;

/// `hipMemPoolAttr`.
pub type hipMemPoolAttr = c_int;
pub const hipMemPoolReuseFollowEventDependencies: hipMemPoolAttr = 1;
pub const hipMemPoolReuseAllowOpportunistic: hipMemPoolAttr = 2;
pub const hipMemPoolReuseAllowInternalDependencies: hipMemPoolAttr = 3;
pub const hipMemPoolAttrReleaseThreshold: hipMemPoolAttr = 4;
pub const hipMemPoolAttrReservedMemCurrent: hipMemPoolAttr = 5;
pub const hipMemPoolAttrReservedMemHigh: hipMemPoolAttr = 6;
pub const hipMemPoolAttrUsedMemCurrent: hipMemPoolAttr = 7;
pub const hipMemPoolAttrUsedMemHigh: hipMemPoolAttr = 8;

/// `hipMemLocationType`.
pub type hipMemLocationType = c_int;
pub const hipMemLocationTypeInvalid: hipMemLocationType = 0;
pub const hipMemLocationTypeDevice: hipMemLocationType = 1;

/// `hipMemAccessFlags`.
pub type hipMemAccessFlags = c_int;
pub const hipMemAccessFlagsProtNone: hipMemAccessFlags = 0;
pub const hipMemAccessFlagsProtRead: hipMemAccessFlags = 1;
pub const hipMemAccessFlagsProtReadWrite: hipMemAccessFlags = 3;

/// `hipMemAllocationType`.
pub type hipMemAllocationType = c_int;
pub const hipMemAllocationTypeInvalid: hipMemAllocationType = 0;
pub const hipMemAllocationTypePinned: hipMemAllocationType = 1;

/// `hipMemAllocationHandleType`.
pub type hipMemAllocationHandleType = c_int;
pub const hipMemHandleTypeNone: hipMemAllocationHandleType = 0;
pub const hipMemHandleTypePosixFileDescriptor: hipMemAllocationHandleType = 1;
pub const hipMemHandleTypeWin32: hipMemAllocationHandleType = 2;
pub const hipMemHandleTypeWin32Kmt: hipMemAllocationHandleType = 4;

/// `hipMemAllocationGranularity_flags`.
pub type hipMemAllocationGranularity_flags = c_int;
pub const hipMemAllocationGranularityMinimum: hipMemAllocationGranularity_flags = 0;
pub const hipMemAllocationGranularityRecommended: hipMemAllocationGranularity_flags = 1;

/// `hipDeviceAttribute_t`: every value of HIP 6's enum (libhipmem answers
/// those `devices.rs` lists; the others are InvalidValue, as HIP on NVIDIA).
pub type hipDeviceAttribute_t = c_int;
pub const hipDeviceAttributeCudaCompatibleBegin: hipDeviceAttribute_t = 0;
pub const hipDeviceAttributeEccEnabled: hipDeviceAttribute_t = 0;
pub const hipDeviceAttributeAccessPolicyMaxWindowSize: hipDeviceAttribute_t = 1;
pub const hipDeviceAttributeAsyncEngineCount: hipDeviceAttribute_t = 2;
pub const hipDeviceAttributeCanMapHostMemory: hipDeviceAttribute_t = 3;
pub const hipDeviceAttributeCanUseHostPointerForRegisteredMem: hipDeviceAttribute_t = 4;
pub const hipDeviceAttributeClockRate: hipDeviceAttribute_t = 5;
pub const hipDeviceAttributeComputeMode: hipDeviceAttribute_t = 6;
pub const hipDeviceAttributeComputePreemptionSupported: hipDeviceAttribute_t = 7;
pub const hipDeviceAttributeConcurrentKernels: hipDeviceAttribute_t = 8;
pub const hipDeviceAttributeConcurrentManagedAccess: hipDeviceAttribute_t = 9;
pub const hipDeviceAttributeCooperativeLaunch: hipDeviceAttribute_t = 10;
pub const hipDeviceAttributeCooperativeMultiDeviceLaunch: hipDeviceAttribute_t = 11;
pub const hipDeviceAttributeDeviceOverlap: hipDeviceAttribute_t = 12;
pub const hipDeviceAttributeDirectManagedMemAccessFromHost: hipDeviceAttribute_t = 13;
pub const hipDeviceAttributeGlobalL1CacheSupported: hipDeviceAttribute_t = 14;
pub const hipDeviceAttributeHostNativeAtomicSupported: hipDeviceAttribute_t = 15;
pub const hipDeviceAttributeIntegrated: hipDeviceAttribute_t = 16;
pub const hipDeviceAttributeIsMultiGpuBoard: hipDeviceAttribute_t = 17;
pub const hipDeviceAttributeKernelExecTimeout: hipDeviceAttribute_t = 18;
pub const hipDeviceAttributeL2CacheSize: hipDeviceAttribute_t = 19;
pub const hipDeviceAttributeLocalL1CacheSupported: hipDeviceAttribute_t = 20;
pub const hipDeviceAttributeLuid: hipDeviceAttribute_t = 21;
pub const hipDeviceAttributeLuidDeviceNodeMask: hipDeviceAttribute_t = 22;
pub const hipDeviceAttributeComputeCapabilityMajor: hipDeviceAttribute_t = 23;
pub const hipDeviceAttributeManagedMemory: hipDeviceAttribute_t = 24;
pub const hipDeviceAttributeMaxBlocksPerMultiProcessor: hipDeviceAttribute_t = 25;
pub const hipDeviceAttributeMaxBlockDimX: hipDeviceAttribute_t = 26;
pub const hipDeviceAttributeMaxBlockDimY: hipDeviceAttribute_t = 27;
pub const hipDeviceAttributeMaxBlockDimZ: hipDeviceAttribute_t = 28;
pub const hipDeviceAttributeMaxGridDimX: hipDeviceAttribute_t = 29;
pub const hipDeviceAttributeMaxGridDimY: hipDeviceAttribute_t = 30;
pub const hipDeviceAttributeMaxGridDimZ: hipDeviceAttribute_t = 31;
pub const hipDeviceAttributeMaxSurface1D: hipDeviceAttribute_t = 32;
pub const hipDeviceAttributeMaxSurface1DLayered: hipDeviceAttribute_t = 33;
pub const hipDeviceAttributeMaxSurface2D: hipDeviceAttribute_t = 34;
pub const hipDeviceAttributeMaxSurface2DLayered: hipDeviceAttribute_t = 35;
pub const hipDeviceAttributeMaxSurface3D: hipDeviceAttribute_t = 36;
pub const hipDeviceAttributeMaxSurfaceCubemap: hipDeviceAttribute_t = 37;
pub const hipDeviceAttributeMaxSurfaceCubemapLayered: hipDeviceAttribute_t = 38;
pub const hipDeviceAttributeMaxTexture1DWidth: hipDeviceAttribute_t = 39;
pub const hipDeviceAttributeMaxTexture1DLayered: hipDeviceAttribute_t = 40;
pub const hipDeviceAttributeMaxTexture1DLinear: hipDeviceAttribute_t = 41;
pub const hipDeviceAttributeMaxTexture1DMipmap: hipDeviceAttribute_t = 42;
pub const hipDeviceAttributeMaxTexture2DWidth: hipDeviceAttribute_t = 43;
pub const hipDeviceAttributeMaxTexture2DHeight: hipDeviceAttribute_t = 44;
pub const hipDeviceAttributeMaxTexture2DGather: hipDeviceAttribute_t = 45;
pub const hipDeviceAttributeMaxTexture2DLayered: hipDeviceAttribute_t = 46;
pub const hipDeviceAttributeMaxTexture2DLinear: hipDeviceAttribute_t = 47;
pub const hipDeviceAttributeMaxTexture2DMipmap: hipDeviceAttribute_t = 48;
pub const hipDeviceAttributeMaxTexture3DWidth: hipDeviceAttribute_t = 49;
pub const hipDeviceAttributeMaxTexture3DHeight: hipDeviceAttribute_t = 50;
pub const hipDeviceAttributeMaxTexture3DDepth: hipDeviceAttribute_t = 51;
pub const hipDeviceAttributeMaxTexture3DAlt: hipDeviceAttribute_t = 52;
pub const hipDeviceAttributeMaxTextureCubemap: hipDeviceAttribute_t = 53;
pub const hipDeviceAttributeMaxTextureCubemapLayered: hipDeviceAttribute_t = 54;
pub const hipDeviceAttributeMaxThreadsDim: hipDeviceAttribute_t = 55;
pub const hipDeviceAttributeMaxThreadsPerBlock: hipDeviceAttribute_t = 56;
pub const hipDeviceAttributeMaxThreadsPerMultiProcessor: hipDeviceAttribute_t = 57;
pub const hipDeviceAttributeMaxPitch: hipDeviceAttribute_t = 58;
pub const hipDeviceAttributeMemoryBusWidth: hipDeviceAttribute_t = 59;
pub const hipDeviceAttributeMemoryClockRate: hipDeviceAttribute_t = 60;
pub const hipDeviceAttributeComputeCapabilityMinor: hipDeviceAttribute_t = 61;
pub const hipDeviceAttributeMultiGpuBoardGroupID: hipDeviceAttribute_t = 62;
pub const hipDeviceAttributeMultiprocessorCount: hipDeviceAttribute_t = 63;
pub const hipDeviceAttributeUnused1: hipDeviceAttribute_t = 64;
pub const hipDeviceAttributePageableMemoryAccess: hipDeviceAttribute_t = 65;
pub const hipDeviceAttributePageableMemoryAccessUsesHostPageTables: hipDeviceAttribute_t = 66;
pub const hipDeviceAttributePciBusId: hipDeviceAttribute_t = 67;
pub const hipDeviceAttributePciDeviceId: hipDeviceAttribute_t = 68;
pub const hipDeviceAttributePciDomainID: hipDeviceAttribute_t = 69;
pub const hipDeviceAttributePersistingL2CacheMaxSize: hipDeviceAttribute_t = 70;
pub const hipDeviceAttributeMaxRegistersPerBlock: hipDeviceAttribute_t = 71;
pub const hipDeviceAttributeMaxRegistersPerMultiprocessor: hipDeviceAttribute_t = 72;
pub const hipDeviceAttributeReservedSharedMemPerBlock: hipDeviceAttribute_t = 73;
pub const hipDeviceAttributeMaxSharedMemoryPerBlock: hipDeviceAttribute_t = 74;
pub const hipDeviceAttributeSharedMemPerBlockOptin: hipDeviceAttribute_t = 75;
pub const hipDeviceAttributeSharedMemPerMultiprocessor: hipDeviceAttribute_t = 76;
pub const hipDeviceAttributeSingleToDoublePrecisionPerfRatio: hipDeviceAttribute_t = 77;
pub const hipDeviceAttributeStreamPrioritiesSupported: hipDeviceAttribute_t = 78;
pub const hipDeviceAttributeSurfaceAlignment: hipDeviceAttribute_t = 79;
pub const hipDeviceAttributeTccDriver: hipDeviceAttribute_t = 80;
pub const hipDeviceAttributeTextureAlignment: hipDeviceAttribute_t = 81;
pub const hipDeviceAttributeTexturePitchAlignment: hipDeviceAttribute_t = 82;
pub const hipDeviceAttributeTotalConstantMemory: hipDeviceAttribute_t = 83;
pub const hipDeviceAttributeTotalGlobalMem: hipDeviceAttribute_t = 84;
pub const hipDeviceAttributeUnifiedAddressing: hipDeviceAttribute_t = 85;
pub const hipDeviceAttributeUnused2: hipDeviceAttribute_t = 86;
pub const hipDeviceAttributeWarpSize: hipDeviceAttribute_t = 87;
pub const hipDeviceAttributeMemoryPoolsSupported: hipDeviceAttribute_t = 88;
pub const hipDeviceAttributeVirtualMemoryManagementSupported: hipDeviceAttribute_t = 89;
pub const hipDeviceAttributeHostRegisterSupported: hipDeviceAttribute_t = 90;
pub const hipDeviceAttributeMemoryPoolSupportedHandleTypes: hipDeviceAttribute_t = 91;
pub const hipDeviceAttributeCudaCompatibleEnd: hipDeviceAttribute_t = 9999;
pub const hipDeviceAttributeAmdSpecificBegin: hipDeviceAttribute_t = 10000;
pub const hipDeviceAttributeClockInstructionRate: hipDeviceAttribute_t = 10000;
pub const hipDeviceAttributeUnused3: hipDeviceAttribute_t = 10001;
pub const hipDeviceAttributeMaxSharedMemoryPerMultiprocessor: hipDeviceAttribute_t = 10002;
pub const hipDeviceAttributeUnused4: hipDeviceAttribute_t = 10003;
pub const hipDeviceAttributeUnused5: hipDeviceAttribute_t = 10004;
pub const hipDeviceAttributeHdpMemFlushCntl: hipDeviceAttribute_t = 10005;
pub const hipDeviceAttributeHdpRegFlushCntl: hipDeviceAttribute_t = 10006;
pub const hipDeviceAttributeCooperativeMultiDeviceUnmatchedFunc: hipDeviceAttribute_t = 10007;
pub const hipDeviceAttributeCooperativeMultiDeviceUnmatchedGridDim: hipDeviceAttribute_t = 10008;
pub const hipDeviceAttributeCooperativeMultiDeviceUnmatchedBlockDim: hipDeviceAttribute_t = 10009;
pub const hipDeviceAttributeCooperativeMultiDeviceUnmatchedSharedMem: hipDeviceAttribute_t = 10010;
pub const hipDeviceAttributeIsLargeBar: hipDeviceAttribute_t = 10011;
pub const hipDeviceAttributeAsicRevision: hipDeviceAttribute_t = 10012;
pub const hipDeviceAttributeCanUseStreamWaitValue: hipDeviceAttribute_t = 10013;
pub const hipDeviceAttributeImageSupport: hipDeviceAttribute_t = 10014;
pub const hipDeviceAttributePhysicalMultiProcessorCount: hipDeviceAttribute_t = 10015;
pub const hipDeviceAttributeFineGrainSupport: hipDeviceAttribute_t = 10016;
pub const hipDeviceAttributeWallClockRate: hipDeviceAttribute_t = 10017;
pub const hipDeviceAttributeAmdSpecificEnd: hipDeviceAttribute_t = 19999;
pub const hipDeviceAttributeVendorSpecificBegin: hipDeviceAttribute_t = 20000;

/// `hipMemLocation`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipMemLocation {
    pub type_: hipMemLocationType,
    pub id: c_int,
}

/// `hipMemAccessDesc`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipMemAccessDesc {
    pub location: hipMemLocation,
    pub flags: hipMemAccessFlags,
}

/// `hipMemPoolProps` (HIP's layout: 56 reserved bytes).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipMemPoolProps {
    pub allocType: hipMemAllocationType,
    pub handleTypes: hipMemAllocationHandleType,
    pub location: hipMemLocation,
    pub win32SecurityAttributes: *mut c_void,
    pub maxSize: usize,
    pub reserved: [c_uchar; 56],
}

/// `hipMemPoolPtrExportData`.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipMemPoolPtrExportData {
    pub reserved: [c_uchar; 64],
}

/// The `allocFlags` member of `hipMemAllocationProp`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipMemAllocationPropFlags {
    pub compressionType: c_uchar,
    pub gpuDirectRDMACapable: c_uchar,
    pub usage: c_ushort,
}

/// `hipMemAllocationProp` (HIP's layout).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipMemAllocationProp {
    pub type_: hipMemAllocationType,
    pub requestedHandleType: hipMemAllocationHandleType,
    pub location: hipMemLocation,
    pub win32HandleMetaData: *mut c_void,
    pub allocFlags: hipMemAllocationPropFlags,
}

/// `hipPointerAttribute_t` (ROCm 6 layout).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipPointerAttribute_t {
    pub type_: hipMemoryType,
    pub device: c_int,
    pub devicePointer: *mut c_void,
    pub hostPointer: *mut c_void,
    pub isManaged: c_int,
    pub allocationFlags: c_uint,
}

const _: () = {
    assert!(size_of::<hipMemLocation>() == 8);
    assert!(offset_of!(hipMemLocation, id) == 4);
    assert!(size_of::<hipMemAccessDesc>() == 12);
    assert!(offset_of!(hipMemAccessDesc, flags) == 8);
    assert!(size_of::<hipMemPoolProps>() == 88);
    assert!(offset_of!(hipMemPoolProps, handleTypes) == 4);
    assert!(offset_of!(hipMemPoolProps, location) == 8);
    assert!(offset_of!(hipMemPoolProps, win32SecurityAttributes) == 16);
    assert!(offset_of!(hipMemPoolProps, maxSize) == 24);
    assert!(offset_of!(hipMemPoolProps, reserved) == 32);
    assert!(size_of::<hipMemPoolPtrExportData>() == 64);
    assert!(size_of::<hipMemAllocationPropFlags>() == 4);
    assert!(size_of::<hipMemAllocationProp>() == 32);
    assert!(offset_of!(hipMemAllocationProp, requestedHandleType) == 4);
    assert!(offset_of!(hipMemAllocationProp, location) == 8);
    assert!(offset_of!(hipMemAllocationProp, win32HandleMetaData) == 16);
    assert!(offset_of!(hipMemAllocationProp, allocFlags) == 24);
    assert!(size_of::<hipPointerAttribute_t>() == 32);
    assert!(offset_of!(hipPointerAttribute_t, device) == 4);
    assert!(offset_of!(hipPointerAttribute_t, devicePointer) == 8);
    assert!(offset_of!(hipPointerAttribute_t, hostPointer) == 16);
    assert!(offset_of!(hipPointerAttribute_t, isManaged) == 24);
    assert!(offset_of!(hipPointerAttribute_t, allocationFlags) == 28);
};

/// `hipDevice_t`.
pub type hipDevice_t = c_int;

/// `hipUUID`.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipUUID {
    pub bytes: [c_char; 16],
}

/// `hipDeviceArch_t`: 17 one-bit flags in one `unsigned` (bit 0
/// hasGlobalInt32Atomics ... bit 16 hasDynamicParallelism, HIP's order).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipDeviceArch_t {
    pub bits: c_uint,
}

/// `hipDeviceProp_tR0600`: HIP 6's `hipDeviceProp_t` (what the header's
/// `hipDeviceProp_t` names), layout checked below field by field.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipDeviceProp_tR0600 {
    pub name: [c_char; 256],
    pub uuid: hipUUID,
    pub luid: [c_char; 8],
    pub luidDeviceNodeMask: c_uint,
    pub totalGlobalMem: usize,
    pub sharedMemPerBlock: usize,
    pub regsPerBlock: c_int,
    pub warpSize: c_int,
    pub memPitch: usize,
    pub maxThreadsPerBlock: c_int,
    pub maxThreadsDim: [c_int; 3],
    pub maxGridSize: [c_int; 3],
    pub clockRate: c_int,
    pub totalConstMem: usize,
    pub major: c_int,
    pub minor: c_int,
    pub textureAlignment: usize,
    pub texturePitchAlignment: usize,
    pub deviceOverlap: c_int,
    pub multiProcessorCount: c_int,
    pub kernelExecTimeoutEnabled: c_int,
    pub integrated: c_int,
    pub canMapHostMemory: c_int,
    pub computeMode: c_int,
    pub maxTexture1D: c_int,
    pub maxTexture1DMipmap: c_int,
    pub maxTexture1DLinear: c_int,
    pub maxTexture2D: [c_int; 2],
    pub maxTexture2DMipmap: [c_int; 2],
    pub maxTexture2DLinear: [c_int; 3],
    pub maxTexture2DGather: [c_int; 2],
    pub maxTexture3D: [c_int; 3],
    pub maxTexture3DAlt: [c_int; 3],
    pub maxTextureCubemap: c_int,
    pub maxTexture1DLayered: [c_int; 2],
    pub maxTexture2DLayered: [c_int; 3],
    pub maxTextureCubemapLayered: [c_int; 2],
    pub maxSurface1D: c_int,
    pub maxSurface2D: [c_int; 2],
    pub maxSurface3D: [c_int; 3],
    pub maxSurface1DLayered: [c_int; 2],
    pub maxSurface2DLayered: [c_int; 3],
    pub maxSurfaceCubemap: c_int,
    pub maxSurfaceCubemapLayered: [c_int; 2],
    pub surfaceAlignment: usize,
    pub concurrentKernels: c_int,
    pub ECCEnabled: c_int,
    pub pciBusID: c_int,
    pub pciDeviceID: c_int,
    pub pciDomainID: c_int,
    pub tccDriver: c_int,
    pub asyncEngineCount: c_int,
    pub unifiedAddressing: c_int,
    pub memoryClockRate: c_int,
    pub memoryBusWidth: c_int,
    pub l2CacheSize: c_int,
    pub persistingL2CacheMaxSize: c_int,
    pub maxThreadsPerMultiProcessor: c_int,
    pub streamPrioritiesSupported: c_int,
    pub globalL1CacheSupported: c_int,
    pub localL1CacheSupported: c_int,
    pub sharedMemPerMultiprocessor: usize,
    pub regsPerMultiprocessor: c_int,
    pub managedMemory: c_int,
    pub isMultiGpuBoard: c_int,
    pub multiGpuBoardGroupID: c_int,
    pub hostNativeAtomicSupported: c_int,
    pub singleToDoublePrecisionPerfRatio: c_int,
    pub pageableMemoryAccess: c_int,
    pub concurrentManagedAccess: c_int,
    pub computePreemptionSupported: c_int,
    pub canUseHostPointerForRegisteredMem: c_int,
    pub cooperativeLaunch: c_int,
    pub cooperativeMultiDeviceLaunch: c_int,
    pub sharedMemPerBlockOptin: usize,
    pub pageableMemoryAccessUsesHostPageTables: c_int,
    pub directManagedMemAccessFromHost: c_int,
    pub maxBlocksPerMultiProcessor: c_int,
    pub accessPolicyMaxWindowSize: c_int,
    pub reservedSharedMemPerBlock: usize,
    pub hostRegisterSupported: c_int,
    pub sparseHipArraySupported: c_int,
    pub hostRegisterReadOnlySupported: c_int,
    pub timelineSemaphoreInteropSupported: c_int,
    pub memoryPoolsSupported: c_int,
    pub gpuDirectRDMASupported: c_int,
    pub gpuDirectRDMAFlushWritesOptions: c_uint,
    pub gpuDirectRDMAWritesOrdering: c_int,
    pub memoryPoolSupportedHandleTypes: c_uint,
    pub deferredMappingHipArraySupported: c_int,
    pub ipcEventSupported: c_int,
    pub clusterLaunch: c_int,
    pub unifiedFunctionPointers: c_int,
    pub reserved: [c_int; 63],
    pub hipReserved: [c_int; 32],
    pub gcnArchName: [c_char; 256],
    pub maxSharedMemoryPerMultiProcessor: usize,
    pub clockInstructionRate: c_int,
    pub arch: hipDeviceArch_t,
    pub hdpMemFlushCntl: *mut c_uint,
    pub hdpRegFlushCntl: *mut c_uint,
    pub cooperativeMultiDeviceUnmatchedFunc: c_int,
    pub cooperativeMultiDeviceUnmatchedGridDim: c_int,
    pub cooperativeMultiDeviceUnmatchedBlockDim: c_int,
    pub cooperativeMultiDeviceUnmatchedSharedMem: c_int,
    pub isLargeBar: c_int,
    pub asicRevision: c_int,
}

/// `hipDeviceProp_t` as HIP 6 defines it.
pub type hipDeviceProp_t = hipDeviceProp_tR0600;

const _: () = {
    assert!(size_of::<hipDeviceProp_tR0600>() == 1472);
    assert!(size_of::<hipUUID>() == 16);
    assert!(size_of::<hipDeviceArch_t>() == 4);
    assert!(offset_of!(hipDeviceProp_tR0600, name) == 0);
    assert!(offset_of!(hipDeviceProp_tR0600, uuid) == 256);
    assert!(offset_of!(hipDeviceProp_tR0600, luid) == 272);
    assert!(offset_of!(hipDeviceProp_tR0600, luidDeviceNodeMask) == 280);
    assert!(offset_of!(hipDeviceProp_tR0600, totalGlobalMem) == 288);
    assert!(offset_of!(hipDeviceProp_tR0600, sharedMemPerBlock) == 296);
    assert!(offset_of!(hipDeviceProp_tR0600, regsPerBlock) == 304);
    assert!(offset_of!(hipDeviceProp_tR0600, warpSize) == 308);
    assert!(offset_of!(hipDeviceProp_tR0600, memPitch) == 312);
    assert!(offset_of!(hipDeviceProp_tR0600, maxThreadsPerBlock) == 320);
    assert!(offset_of!(hipDeviceProp_tR0600, maxThreadsDim) == 324);
    assert!(offset_of!(hipDeviceProp_tR0600, maxGridSize) == 336);
    assert!(offset_of!(hipDeviceProp_tR0600, clockRate) == 348);
    assert!(offset_of!(hipDeviceProp_tR0600, totalConstMem) == 352);
    assert!(offset_of!(hipDeviceProp_tR0600, major) == 360);
    assert!(offset_of!(hipDeviceProp_tR0600, minor) == 364);
    assert!(offset_of!(hipDeviceProp_tR0600, textureAlignment) == 368);
    assert!(offset_of!(hipDeviceProp_tR0600, texturePitchAlignment) == 376);
    assert!(offset_of!(hipDeviceProp_tR0600, deviceOverlap) == 384);
    assert!(offset_of!(hipDeviceProp_tR0600, multiProcessorCount) == 388);
    assert!(offset_of!(hipDeviceProp_tR0600, kernelExecTimeoutEnabled) == 392);
    assert!(offset_of!(hipDeviceProp_tR0600, integrated) == 396);
    assert!(offset_of!(hipDeviceProp_tR0600, canMapHostMemory) == 400);
    assert!(offset_of!(hipDeviceProp_tR0600, computeMode) == 404);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture1D) == 408);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture1DMipmap) == 412);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture1DLinear) == 416);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture2D) == 420);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture2DMipmap) == 428);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture2DLinear) == 436);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture2DGather) == 448);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture3D) == 456);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture3DAlt) == 468);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTextureCubemap) == 480);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture1DLayered) == 484);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTexture2DLayered) == 492);
    assert!(offset_of!(hipDeviceProp_tR0600, maxTextureCubemapLayered) == 504);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSurface1D) == 512);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSurface2D) == 516);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSurface3D) == 524);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSurface1DLayered) == 536);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSurface2DLayered) == 544);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSurfaceCubemap) == 556);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSurfaceCubemapLayered) == 560);
    assert!(offset_of!(hipDeviceProp_tR0600, surfaceAlignment) == 568);
    assert!(offset_of!(hipDeviceProp_tR0600, concurrentKernels) == 576);
    assert!(offset_of!(hipDeviceProp_tR0600, ECCEnabled) == 580);
    assert!(offset_of!(hipDeviceProp_tR0600, pciBusID) == 584);
    assert!(offset_of!(hipDeviceProp_tR0600, pciDeviceID) == 588);
    assert!(offset_of!(hipDeviceProp_tR0600, pciDomainID) == 592);
    assert!(offset_of!(hipDeviceProp_tR0600, tccDriver) == 596);
    assert!(offset_of!(hipDeviceProp_tR0600, asyncEngineCount) == 600);
    assert!(offset_of!(hipDeviceProp_tR0600, unifiedAddressing) == 604);
    assert!(offset_of!(hipDeviceProp_tR0600, memoryClockRate) == 608);
    assert!(offset_of!(hipDeviceProp_tR0600, memoryBusWidth) == 612);
    assert!(offset_of!(hipDeviceProp_tR0600, l2CacheSize) == 616);
    assert!(offset_of!(hipDeviceProp_tR0600, persistingL2CacheMaxSize) == 620);
    assert!(offset_of!(hipDeviceProp_tR0600, maxThreadsPerMultiProcessor) == 624);
    assert!(offset_of!(hipDeviceProp_tR0600, streamPrioritiesSupported) == 628);
    assert!(offset_of!(hipDeviceProp_tR0600, globalL1CacheSupported) == 632);
    assert!(offset_of!(hipDeviceProp_tR0600, localL1CacheSupported) == 636);
    assert!(offset_of!(hipDeviceProp_tR0600, sharedMemPerMultiprocessor) == 640);
    assert!(offset_of!(hipDeviceProp_tR0600, regsPerMultiprocessor) == 648);
    assert!(offset_of!(hipDeviceProp_tR0600, managedMemory) == 652);
    assert!(offset_of!(hipDeviceProp_tR0600, isMultiGpuBoard) == 656);
    assert!(offset_of!(hipDeviceProp_tR0600, multiGpuBoardGroupID) == 660);
    assert!(offset_of!(hipDeviceProp_tR0600, hostNativeAtomicSupported) == 664);
    assert!(offset_of!(hipDeviceProp_tR0600, singleToDoublePrecisionPerfRatio) == 668);
    assert!(offset_of!(hipDeviceProp_tR0600, pageableMemoryAccess) == 672);
    assert!(offset_of!(hipDeviceProp_tR0600, concurrentManagedAccess) == 676);
    assert!(offset_of!(hipDeviceProp_tR0600, computePreemptionSupported) == 680);
    assert!(offset_of!(hipDeviceProp_tR0600, canUseHostPointerForRegisteredMem) == 684);
    assert!(offset_of!(hipDeviceProp_tR0600, cooperativeLaunch) == 688);
    assert!(offset_of!(hipDeviceProp_tR0600, cooperativeMultiDeviceLaunch) == 692);
    assert!(offset_of!(hipDeviceProp_tR0600, sharedMemPerBlockOptin) == 696);
    assert!(offset_of!(hipDeviceProp_tR0600, pageableMemoryAccessUsesHostPageTables) == 704);
    assert!(offset_of!(hipDeviceProp_tR0600, directManagedMemAccessFromHost) == 708);
    assert!(offset_of!(hipDeviceProp_tR0600, maxBlocksPerMultiProcessor) == 712);
    assert!(offset_of!(hipDeviceProp_tR0600, accessPolicyMaxWindowSize) == 716);
    assert!(offset_of!(hipDeviceProp_tR0600, reservedSharedMemPerBlock) == 720);
    assert!(offset_of!(hipDeviceProp_tR0600, hostRegisterSupported) == 728);
    assert!(offset_of!(hipDeviceProp_tR0600, sparseHipArraySupported) == 732);
    assert!(offset_of!(hipDeviceProp_tR0600, hostRegisterReadOnlySupported) == 736);
    assert!(offset_of!(hipDeviceProp_tR0600, timelineSemaphoreInteropSupported) == 740);
    assert!(offset_of!(hipDeviceProp_tR0600, memoryPoolsSupported) == 744);
    assert!(offset_of!(hipDeviceProp_tR0600, gpuDirectRDMASupported) == 748);
    assert!(offset_of!(hipDeviceProp_tR0600, gpuDirectRDMAFlushWritesOptions) == 752);
    assert!(offset_of!(hipDeviceProp_tR0600, gpuDirectRDMAWritesOrdering) == 756);
    assert!(offset_of!(hipDeviceProp_tR0600, memoryPoolSupportedHandleTypes) == 760);
    assert!(offset_of!(hipDeviceProp_tR0600, deferredMappingHipArraySupported) == 764);
    assert!(offset_of!(hipDeviceProp_tR0600, ipcEventSupported) == 768);
    assert!(offset_of!(hipDeviceProp_tR0600, clusterLaunch) == 772);
    assert!(offset_of!(hipDeviceProp_tR0600, unifiedFunctionPointers) == 776);
    assert!(offset_of!(hipDeviceProp_tR0600, reserved) == 780);
    assert!(offset_of!(hipDeviceProp_tR0600, hipReserved) == 1032);
    assert!(offset_of!(hipDeviceProp_tR0600, gcnArchName) == 1160);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSharedMemoryPerMultiProcessor) == 1416);
    assert!(offset_of!(hipDeviceProp_tR0600, clockInstructionRate) == 1424);
    assert!(offset_of!(hipDeviceProp_tR0600, arch) == 1428);
    assert!(offset_of!(hipDeviceProp_tR0600, hdpMemFlushCntl) == 1432);
    assert!(offset_of!(hipDeviceProp_tR0600, hdpRegFlushCntl) == 1440);
    assert!(offset_of!(hipDeviceProp_tR0600, cooperativeMultiDeviceUnmatchedFunc) == 1448);
    assert!(offset_of!(hipDeviceProp_tR0600, cooperativeMultiDeviceUnmatchedGridDim) == 1452);
    assert!(offset_of!(hipDeviceProp_tR0600, cooperativeMultiDeviceUnmatchedBlockDim) == 1456);
    assert!(offset_of!(hipDeviceProp_tR0600, cooperativeMultiDeviceUnmatchedSharedMem) == 1460);
    assert!(offset_of!(hipDeviceProp_tR0600, isLargeBar) == 1464);
    assert!(offset_of!(hipDeviceProp_tR0600, asicRevision) == 1468);
};

/// `hipPointer_attribute` (`hipPointerGetAttribute`).
pub type hipPointer_attribute = c_int;
pub const HIP_POINTER_ATTRIBUTE_CONTEXT: hipPointer_attribute = 1;
pub const HIP_POINTER_ATTRIBUTE_MEMORY_TYPE: hipPointer_attribute = 2;
pub const HIP_POINTER_ATTRIBUTE_DEVICE_POINTER: hipPointer_attribute = 3;
pub const HIP_POINTER_ATTRIBUTE_HOST_POINTER: hipPointer_attribute = 4;
pub const HIP_POINTER_ATTRIBUTE_P2P_TOKENS: hipPointer_attribute = 5;
pub const HIP_POINTER_ATTRIBUTE_SYNC_MEMOPS: hipPointer_attribute = 6;
pub const HIP_POINTER_ATTRIBUTE_BUFFER_ID: hipPointer_attribute = 7;
pub const HIP_POINTER_ATTRIBUTE_IS_MANAGED: hipPointer_attribute = 8;
pub const HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL: hipPointer_attribute = 9;
pub const HIP_POINTER_ATTRIBUTE_IS_LEGACY_HIP_IPC_CAPABLE: hipPointer_attribute = 10;
pub const HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR: hipPointer_attribute = 11;
pub const HIP_POINTER_ATTRIBUTE_RANGE_SIZE: hipPointer_attribute = 12;
pub const HIP_POINTER_ATTRIBUTE_MAPPED: hipPointer_attribute = 13;
pub const HIP_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: hipPointer_attribute = 14;
pub const HIP_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: hipPointer_attribute = 15;
pub const HIP_POINTER_ATTRIBUTE_ACCESS_FLAGS: hipPointer_attribute = 16;
pub const HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: hipPointer_attribute = 17;

/// `hipStreamCallback_t`.
pub type hipStreamCallback_t =
    Option<unsafe extern "C" fn(stream: hipStream_t, status: hipError_t, user_data: *mut c_void)>;

/// `hipDeviceptr_t`.
pub type hipDeviceptr_t = *mut c_void;
