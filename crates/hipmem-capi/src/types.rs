//! HIP's types, enum values and struct layouts (HIP's, not CUDA's), with
//! compile-time checks of sizes and offsets against ROCm's
//! `hip/hip_runtime_api.h` on LP64 Linux.

use std::ffi::{c_int, c_uchar, c_uint, c_ushort, c_void};
use std::mem::{offset_of, size_of};

use hipmem_rs::error::code;

/// `hipError_t`.
pub type hipError_t = c_int;
pub const hipSuccess: hipError_t = code::SUCCESS;
pub const hipErrorInvalidValue: hipError_t = code::INVALID_VALUE;
pub const hipErrorOutOfMemory: hipError_t = code::OUT_OF_MEMORY;
pub const hipErrorMemoryAllocation: hipError_t = code::OUT_OF_MEMORY;
pub const hipErrorNotInitialized: hipError_t = code::NOT_INITIALIZED;
pub const hipErrorInvalidDevicePointer: hipError_t = code::INVALID_DEVICE_POINTER;
pub const hipErrorInvalidMemcpyDirection: hipError_t = code::INVALID_MEMCPY_DIRECTION;
pub const hipErrorInvalidDevice: hipError_t = code::INVALID_DEVICE;
pub const hipErrorInvalidHandle: hipError_t = code::INVALID_HANDLE;
pub const hipErrorInvalidResourceHandle: hipError_t = code::INVALID_HANDLE;
pub const hipErrorNotReady: hipError_t = code::NOT_READY;
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

/// `hipDeviceAttribute_t` (the values this library answers).
pub type hipDeviceAttribute_t = c_int;
pub const hipDeviceAttributeCanMapHostMemory: hipDeviceAttribute_t = 3;
pub const hipDeviceAttributeComputeCapabilityMajor: hipDeviceAttribute_t = 23;
pub const hipDeviceAttributeComputeCapabilityMinor: hipDeviceAttribute_t = 61;
pub const hipDeviceAttributeMultiprocessorCount: hipDeviceAttribute_t = 63;
pub const hipDeviceAttributeUnifiedAddressing: hipDeviceAttribute_t = 85;
pub const hipDeviceAttributeMemoryPoolsSupported: hipDeviceAttribute_t = 88;
pub const hipDeviceAttributeVirtualMemoryManagementSupported: hipDeviceAttribute_t = 89;
pub const hipDeviceAttributeHostRegisterSupported: hipDeviceAttribute_t = 90;
pub const hipDeviceAttributeMemoryPoolSupportedHandleTypes: hipDeviceAttribute_t = 91;

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
