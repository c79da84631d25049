//! AMD's HIP runtime as a table of function pointers loaded at run time.
//!
//! Nothing here links against ROCm: [`Api::get`] opens `libamdhip64.so.6`
//! (then `.so.5`, then the unversioned development link), or the file named
//! by `HIPMEM_HIP_LIBRARY`, with `libloading`, and looks up every entry point
//! hipmem uses. A missing library, or a missing entry point of the core
//! group, is an [`Error::NotInitialized`] value that names what was looked
//! for; a missing entry point of an optional group (memory pools, pool IPC,
//! virtual memory, managed memory, host registration, stream priorities,
//! pitched memory, peer access) leaves that group out and the capability
//! that needs it off (or, where the trait has one, on its portable default). The loaded library is kept in a
//! process-wide `OnceLock` and never unloaded, so the pointers stay valid
//! for the life of the process.
//!
//! The types, constants and struct layouts are HIP's, read from ROCm's
//! `include/hip/hip_runtime_api.h` (repository ROCm/HIP, tags `rocm-6.2.2`
//! and `rocm-5.2.3`; the enum values checked unchanged on the
//! `amd-staging` branch of 2024-10). HIP's structs differ from CUDA's in
//! places (`hipMemAllocationProp` before ROCm 5.3, `hipMemPoolProps` before
//! 6.2, the meaning of `hipPointerAttribute_t::type` before 6.0): the notes
//! at each struct say which layouts hipmem uses and how it tells them apart.
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code)]

use std::ffi::{c_char, c_float, c_int, c_uchar, c_uint, c_ulonglong, c_ushort, c_void};
use std::mem::{offset_of, size_of};
use std::sync::OnceLock;

use libloading::Library;

use crate::error::{Error, Result};

/// `hipError_t`: 0 is `hipSuccess`.
pub type hipError_t = c_int;
/// `hipStream_t` (null: the current device's null stream).
pub type hipStream_t = *mut c_void;
/// `hipEvent_t`.
pub type hipEvent_t = *mut c_void;
/// `hipMemPool_t`.
pub type hipMemPool_t = *mut c_void;
/// `hipMemGenericAllocationHandle_t`.
pub type hipMemGenericAllocationHandle_t = *mut c_void;
/// `hipDeviceptr_t`.
pub type hipDeviceptr_t = *mut c_void;
/// `hipHostFn_t`.
pub type hipHostFn_t = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

// ---- hipError_t codes (hip_runtime_api.h, ROCm 6.2.2) --------------------------------------

/// `hipSuccess`.
pub const hipSuccess: hipError_t = 0;
/// `hipErrorInvalidValue`.
pub const hipErrorInvalidValue: hipError_t = 1;
/// `hipErrorOutOfMemory`.
pub const hipErrorOutOfMemory: hipError_t = 2;
/// `hipErrorNotInitialized`.
pub const hipErrorNotInitialized: hipError_t = 3;
/// `hipErrorDeinitialized`.
pub const hipErrorDeinitialized: hipError_t = 4;
/// `hipErrorInvalidPitchValue`.
pub const hipErrorInvalidPitchValue: hipError_t = 12;
/// `hipErrorInvalidSymbol`.
pub const hipErrorInvalidSymbol: hipError_t = 13;
/// `hipErrorInvalidDevicePointer`.
pub const hipErrorInvalidDevicePointer: hipError_t = 17;
/// `hipErrorInvalidMemcpyDirection`.
pub const hipErrorInvalidMemcpyDirection: hipError_t = 21;
/// `hipErrorNoDevice`: `hipGetDeviceCount` found no device.
pub const hipErrorNoDevice: hipError_t = 100;
/// `hipErrorInvalidDevice`.
pub const hipErrorInvalidDevice: hipError_t = 101;
/// `hipErrorPeerAccessUnsupported`: the two devices cannot reach each other.
pub const hipErrorPeerAccessUnsupported: hipError_t = 217;
/// `hipErrorInvalidHandle` (`hipErrorInvalidResourceHandle`).
pub const hipErrorInvalidHandle: hipError_t = 400;
/// `hipErrorNotFound`.
pub const hipErrorNotFound: hipError_t = 500;
/// `hipErrorNotReady`.
pub const hipErrorNotReady: hipError_t = 600;
/// `hipErrorPeerAccessAlreadyEnabled`.
pub const hipErrorPeerAccessAlreadyEnabled: hipError_t = 704;
/// `hipErrorPeerAccessNotEnabled`.
pub const hipErrorPeerAccessNotEnabled: hipError_t = 705;
/// `hipErrorContextIsDestroyed`.
pub const hipErrorContextIsDestroyed: hipError_t = 709;
/// `hipErrorNotSupported`.
pub const hipErrorNotSupported: hipError_t = 801;
/// `hipErrorUnknown`.
pub const hipErrorUnknown: hipError_t = 999;

// ---- hipDeviceAttribute_t (same values in ROCm 5.2.3 and 6.2.2; 89-91 are 5.3+) --------------

/// `hipDeviceAttribute_t`.
pub type hipDeviceAttribute_t = c_int;
/// `hipDeviceAttributeCanMapHostMemory`.
pub const hipDeviceAttributeCanMapHostMemory: hipDeviceAttribute_t = 3;
/// `hipDeviceAttributeConcurrentManagedAccess`.
pub const hipDeviceAttributeConcurrentManagedAccess: hipDeviceAttribute_t = 9;
/// `hipDeviceAttributeComputeCapabilityMajor`.
pub const hipDeviceAttributeComputeCapabilityMajor: hipDeviceAttribute_t = 23;
/// `hipDeviceAttributeManagedMemory`.
pub const hipDeviceAttributeManagedMemory: hipDeviceAttribute_t = 24;
/// `hipDeviceAttributeComputeCapabilityMinor`.
pub const hipDeviceAttributeComputeCapabilityMinor: hipDeviceAttribute_t = 61;
/// `hipDeviceAttributeMultiprocessorCount`.
pub const hipDeviceAttributeMultiprocessorCount: hipDeviceAttribute_t = 63;
/// `hipDeviceAttributeUnifiedAddressing`.
pub const hipDeviceAttributeUnifiedAddressing: hipDeviceAttribute_t = 85;
/// `hipDeviceAttributeMemoryPoolsSupported`.
pub const hipDeviceAttributeMemoryPoolsSupported: hipDeviceAttribute_t = 88;
/// `hipDeviceAttributeVirtualMemoryManagementSupported` (ROCm 5.3+).
pub const hipDeviceAttributeVirtualMemoryManagementSupported: hipDeviceAttribute_t = 89;

// ---- flags ---------------------------------------------------------------------------------

/// `hipMemcpyKind`.
pub type hipMemcpyKind = c_int;
/// `hipMemcpyHostToDevice`.
pub const hipMemcpyHostToDevice: hipMemcpyKind = 1;
/// `hipMemcpyDeviceToHost`.
pub const hipMemcpyDeviceToHost: hipMemcpyKind = 2;
/// `hipMemcpyDeviceToDevice`.
pub const hipMemcpyDeviceToDevice: hipMemcpyKind = 3;
/// `hipMemcpyDefault`: the runtime infers the direction (unified addressing).
pub const hipMemcpyDefault: hipMemcpyKind = 4;
/// `hipStreamDefault`.
pub const hipStreamDefault: c_uint = 0;
/// `hipStreamNonBlocking`.
pub const hipStreamNonBlocking: c_uint = 1;
/// `hipEventDefault`.
pub const hipEventDefault: c_uint = 0;
/// `hipEventBlockingSync`.
pub const hipEventBlockingSync: c_uint = 1;
/// `hipEventDisableTiming`.
pub const hipEventDisableTiming: c_uint = 2;
/// `hipEventInterprocess`.
pub const hipEventInterprocess: c_uint = 4;
/// `hipHostMallocPortable`.
pub const hipHostMallocPortable: c_uint = 1;
/// `hipHostMallocMapped`.
pub const hipHostMallocMapped: c_uint = 2;
/// `hipHostMallocWriteCombined`.
pub const hipHostMallocWriteCombined: c_uint = 4;
/// `hipHostRegisterPortable`.
pub const hipHostRegisterPortable: c_uint = 1;
/// `hipHostRegisterMapped`.
pub const hipHostRegisterMapped: c_uint = 2;
/// `hipCpuDeviceId`: the host as a managed-memory location.
pub const hipCpuDeviceId: c_int = -1;

// ---- memory pools and virtual memory -----------------------------------------------------

/// `hipMemLocationType`.
pub type hipMemLocationType = c_int;
/// `hipMemLocationTypeDevice`.
pub const hipMemLocationTypeDevice: hipMemLocationType = 1;
/// `hipMemAccessFlags`.
pub type hipMemAccessFlags = c_int;
/// `hipMemAllocationType`.
pub type hipMemAllocationType = c_int;
/// `hipMemAllocationTypePinned`.
pub const hipMemAllocationTypePinned: hipMemAllocationType = 1;
/// `hipMemAllocationHandleType`.
pub type hipMemAllocationHandleType = c_int;
/// `hipMemHandleTypePosixFileDescriptor`.
pub const hipMemHandleTypePosixFileDescriptor: hipMemAllocationHandleType = 1;
/// `hipMemAllocationGranularity_flags`.
pub type hipMemAllocationGranularity_flags = c_int;
/// `hipMemAllocationGranularityMinimum`.
pub const hipMemAllocationGranularityMinimum: hipMemAllocationGranularity_flags = 0;
/// `hipMemAllocationGranularityRecommended`.
pub const hipMemAllocationGranularityRecommended: hipMemAllocationGranularity_flags = 1;
/// `hipMemPoolAttr` (1 to 8; the three reuse flags are `int`, the rest `uint64_t`).
pub type hipMemPoolAttr = c_int;

/// `hipMemLocation` (8 bytes, every ROCm version).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipMemLocation {
    /// A `hipMemLocationType`.
    pub type_: hipMemLocationType,
    /// The device ordinal.
    pub id: c_int,
}

impl hipMemLocation {
    /// Device `ordinal`.
    pub fn device(ordinal: c_int) -> hipMemLocation {
        hipMemLocation { type_: hipMemLocationTypeDevice, id: ordinal }
    }
}

/// `hipMemAccessDesc` (12 bytes, every ROCm version).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipMemAccessDesc {
    /// Which device.
    pub location: hipMemLocation,
    /// 0 none, 1 read, 3 read-write.
    pub flags: hipMemAccessFlags,
}

/// `hipMemPoolProps` (88 bytes). ROCm 6.2 turned the first 8 of the 64
/// reserved bytes into `maxSize`; older runtimes want them zero, so a pool
/// with a size limit needs 6.2+.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipMemPoolProps {
    /// `hipMemAllocationTypePinned`.
    pub allocType: hipMemAllocationType,
    /// Handle types the pool can be exported as.
    pub handleTypes: hipMemAllocationHandleType,
    /// Where the memory lives.
    pub location: hipMemLocation,
    /// Windows only; null.
    pub win32SecurityAttributes: *mut c_void,
    /// Most bytes the pool may hold (0: no limit). ROCm 6.2+.
    pub maxSize: usize,
    /// Zero.
    pub reserved: [c_uchar; 56],
}

/// The `allocFlags` member of [`hipMemAllocationProp`].
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipMemAllocationPropFlags {
    /// Compression type (0).
    pub compressionType: c_uchar,
    /// Whether it may be used for GPUDirect RDMA.
    pub gpuDirectRDMACapable: c_uchar,
    /// Usage bits (0).
    pub usage: c_ushort,
}

/// `hipMemAllocationProp` (32 bytes), in the layout of ROCm 5.3 and newer
/// (CUDA's order). ROCm 5.2 had another order in the same 32 bytes
/// (`compressionType`, `location` at 4, `requestedHandleType` at 12, `type`
/// at 16): hipmem does not use virtual memory on a runtime older than 5.3.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipMemAllocationProp {
    /// `hipMemAllocationTypePinned`.
    pub type_: hipMemAllocationType,
    /// Handle types the allocation may be exported as.
    pub requestedHandleType: hipMemAllocationHandleType,
    /// Where the memory lives.
    pub location: hipMemLocation,
    /// Windows only; null.
    pub win32HandleMetaData: *mut c_void,
    /// Extra flags.
    pub allocFlags: hipMemAllocationPropFlags,
}

impl hipMemAllocationProp {
    /// A pinned allocation on device `ordinal`, exportable as `handle_types`.
    pub fn pinned_on_device(
        ordinal: c_int,
        handle_types: hipMemAllocationHandleType,
    ) -> hipMemAllocationProp {
        hipMemAllocationProp {
            type_: hipMemAllocationTypePinned,
            requestedHandleType: handle_types,
            location: hipMemLocation::device(ordinal),
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: hipMemAllocationPropFlags::default(),
        }
    }
}

/// `hipMemPoolPtrExportData`: 64 opaque bytes.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipMemPoolPtrExportData {
    /// The bytes.
    pub reserved: [c_uchar; 64],
}

/// `hipPointerAttribute_t` (32 bytes in every ROCm version). The first
/// member is `type` in ROCm 6 (0 unregistered, 1 host, 2 device, 3 managed)
/// and `memoryType` in 5.x with other values (0 host, 1 device, 2 array,
/// 3 unified); hipmem reads only `device`, which is the same in both.
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct hipPointerAttribute_t {
    /// `hipMemoryType` (see above).
    pub type_: c_int,
    /// The device of the memory.
    pub device: c_int,
    /// Device address.
    pub devicePointer: *mut c_void,
    /// Host address.
    pub hostPointer: *mut c_void,
    /// Whether the memory is managed.
    pub isManaged: c_int,
    /// Allocation flags.
    pub allocationFlags: c_uint,
}

/// `hipDeviceProp_tR0600` (1472 bytes): what `hipGetDevicePropertiesR0600`
/// fills (ROCm 6.0+; `hipGetDeviceProperties` is a macro for it). On older
/// runtimes hipmem reads the same facts with `hipDeviceGetAttribute`,
/// `hipDeviceGetName` and `hipDeviceTotalMem` instead.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct hipDeviceProp_tR0600 {
    pub name: [c_char; 256],
    pub uuid: [c_char; 16],
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
    /// `hipDeviceArch_t`: 21 one-bit flags in one `unsigned`.
    pub arch: c_uint,
    pub hdpMemFlushCntl: *mut c_uint,
    pub hdpRegFlushCntl: *mut c_uint,
    pub cooperativeMultiDeviceUnmatchedFunc: c_int,
    pub cooperativeMultiDeviceUnmatchedGridDim: c_int,
    pub cooperativeMultiDeviceUnmatchedBlockDim: c_int,
    pub cooperativeMultiDeviceUnmatchedSharedMem: c_int,
    pub isLargeBar: c_int,
    pub asicRevision: c_int,
}

impl hipDeviceProp_tR0600 {
    /// All zeros (what the runtime then overwrites).
    pub fn zeroed() -> hipDeviceProp_tR0600 {
        // SAFETY: every field is an integer, an array of integers or a raw
        // pointer, for all of which all-zero bytes are a valid value.
        unsafe { std::mem::zeroed() }
    }
}

// Layout checks (LP64 Linux). The numbers were read from ROCm/HIP
// `include/hip/hip_runtime_api.h` at tag rocm-6.2.2 by compiling its struct
// definitions with gcc and printing sizeof/offsetof.
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
    assert!(size_of::<hipMemAllocationPropFlags>() == 4);
    assert!(size_of::<hipMemAllocationProp>() == 32);
    assert!(offset_of!(hipMemAllocationProp, requestedHandleType) == 4);
    assert!(offset_of!(hipMemAllocationProp, location) == 8);
    assert!(offset_of!(hipMemAllocationProp, win32HandleMetaData) == 16);
    assert!(offset_of!(hipMemAllocationProp, allocFlags) == 24);
    assert!(size_of::<hipMemPoolPtrExportData>() == 64);
    assert!(size_of::<hipPointerAttribute_t>() == 32);
    assert!(offset_of!(hipPointerAttribute_t, device) == 4);
    assert!(offset_of!(hipPointerAttribute_t, devicePointer) == 8);
    assert!(offset_of!(hipPointerAttribute_t, hostPointer) == 16);
    assert!(offset_of!(hipPointerAttribute_t, isManaged) == 24);
    assert!(offset_of!(hipPointerAttribute_t, allocationFlags) == 28);
    assert!(size_of::<hipDeviceProp_tR0600>() == 1472);
    assert!(std::mem::align_of::<hipDeviceProp_tR0600>() == 8);
    assert!(offset_of!(hipDeviceProp_tR0600, uuid) == 256);
    assert!(offset_of!(hipDeviceProp_tR0600, totalGlobalMem) == 288);
    assert!(offset_of!(hipDeviceProp_tR0600, memPitch) == 312);
    assert!(offset_of!(hipDeviceProp_tR0600, major) == 360);
    assert!(offset_of!(hipDeviceProp_tR0600, minor) == 364);
    assert!(offset_of!(hipDeviceProp_tR0600, multiProcessorCount) == 388);
    assert!(offset_of!(hipDeviceProp_tR0600, canMapHostMemory) == 400);
    assert!(offset_of!(hipDeviceProp_tR0600, surfaceAlignment) == 568);
    assert!(offset_of!(hipDeviceProp_tR0600, unifiedAddressing) == 604);
    assert!(offset_of!(hipDeviceProp_tR0600, l2CacheSize) == 616);
    assert!(offset_of!(hipDeviceProp_tR0600, managedMemory) == 652);
    assert!(offset_of!(hipDeviceProp_tR0600, pageableMemoryAccess) == 672);
    assert!(offset_of!(hipDeviceProp_tR0600, concurrentManagedAccess) == 676);
    assert!(offset_of!(hipDeviceProp_tR0600, sharedMemPerBlockOptin) == 696);
    assert!(offset_of!(hipDeviceProp_tR0600, hostRegisterSupported) == 728);
    assert!(offset_of!(hipDeviceProp_tR0600, memoryPoolsSupported) == 744);
    assert!(offset_of!(hipDeviceProp_tR0600, memoryPoolSupportedHandleTypes) == 760);
    assert!(offset_of!(hipDeviceProp_tR0600, reserved) == 780);
    assert!(offset_of!(hipDeviceProp_tR0600, hipReserved) == 1032);
    assert!(offset_of!(hipDeviceProp_tR0600, gcnArchName) == 1160);
    assert!(offset_of!(hipDeviceProp_tR0600, maxSharedMemoryPerMultiProcessor) == 1416);
    assert!(offset_of!(hipDeviceProp_tR0600, clockInstructionRate) == 1424);
    assert!(offset_of!(hipDeviceProp_tR0600, arch) == 1428);
    assert!(offset_of!(hipDeviceProp_tR0600, hdpMemFlushCntl) == 1432);
    assert!(offset_of!(hipDeviceProp_tR0600, isLargeBar) == 1464);
    assert!(offset_of!(hipDeviceProp_tR0600, asicRevision) == 1468);
};

// ---- the function tables -------------------------------------------------------------------

/// The entry points every use of the backend needs (HIP has had all of them
/// since ROCm 3).
#[derive(Debug)]
pub struct Core {
    pub hipGetErrorName: unsafe extern "C" fn(hipError_t) -> *const c_char,
    pub hipGetErrorString: unsafe extern "C" fn(hipError_t) -> *const c_char,
    pub hipInit: unsafe extern "C" fn(flags: c_uint) -> hipError_t,
    pub hipGetDeviceCount: unsafe extern "C" fn(count: *mut c_int) -> hipError_t,
    pub hipSetDevice: unsafe extern "C" fn(device: c_int) -> hipError_t,
    pub hipGetDevice: unsafe extern "C" fn(device: *mut c_int) -> hipError_t,
    pub hipDeviceGetAttribute:
        unsafe extern "C" fn(value: *mut c_int, attr: hipDeviceAttribute_t, device: c_int) -> hipError_t,
    pub hipDeviceSynchronize: unsafe extern "C" fn() -> hipError_t,
    pub hipMemGetInfo: unsafe extern "C" fn(free: *mut usize, total: *mut usize) -> hipError_t,
    pub hipMalloc: unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize) -> hipError_t,
    pub hipFree: unsafe extern "C" fn(ptr: *mut c_void) -> hipError_t,
    pub hipPointerGetAttributes:
        unsafe extern "C" fn(attributes: *mut hipPointerAttribute_t, ptr: *const c_void) -> hipError_t,
    pub hipMemcpy: unsafe extern "C" fn(
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: hipMemcpyKind,
    ) -> hipError_t,
    pub hipMemcpyAsync: unsafe extern "C" fn(
        dst: *mut c_void,
        src: *const c_void,
        size: usize,
        kind: hipMemcpyKind,
        stream: hipStream_t,
    ) -> hipError_t,
    pub hipMemsetD8Async: unsafe extern "C" fn(
        dst: hipDeviceptr_t,
        value: c_uchar,
        count: usize,
        stream: hipStream_t,
    ) -> hipError_t,
    pub hipMemsetD16Async: unsafe extern "C" fn(
        dst: hipDeviceptr_t,
        value: c_ushort,
        count: usize,
        stream: hipStream_t,
    ) -> hipError_t,
    pub hipMemsetD32Async: unsafe extern "C" fn(
        dst: hipDeviceptr_t,
        value: c_int,
        count: usize,
        stream: hipStream_t,
    ) -> hipError_t,
    pub hipStreamCreateWithFlags: unsafe extern "C" fn(stream: *mut hipStream_t, flags: c_uint) -> hipError_t,
    pub hipStreamDestroy: unsafe extern "C" fn(stream: hipStream_t) -> hipError_t,
    pub hipStreamSynchronize: unsafe extern "C" fn(stream: hipStream_t) -> hipError_t,
    pub hipStreamQuery: unsafe extern "C" fn(stream: hipStream_t) -> hipError_t,
    pub hipStreamWaitEvent:
        unsafe extern "C" fn(stream: hipStream_t, event: hipEvent_t, flags: c_uint) -> hipError_t,
    /// `hipLaunchHostFunc`, else `hipStreamAddCallback` (ROCm 5.2 has only that one).
    pub host_func: HostFunc,
    pub hipEventCreateWithFlags: unsafe extern "C" fn(event: *mut hipEvent_t, flags: c_uint) -> hipError_t,
    pub hipEventDestroy: unsafe extern "C" fn(event: hipEvent_t) -> hipError_t,
    pub hipEventRecord: unsafe extern "C" fn(event: hipEvent_t, stream: hipStream_t) -> hipError_t,
    pub hipEventQuery: unsafe extern "C" fn(event: hipEvent_t) -> hipError_t,
    pub hipEventSynchronize: unsafe extern "C" fn(event: hipEvent_t) -> hipError_t,
    pub hipEventElapsedTime:
        unsafe extern "C" fn(ms: *mut c_float, start: hipEvent_t, stop: hipEvent_t) -> hipError_t,
    /// `hipHostMalloc`, or `hipExtHostAlloc` (its replacement, same signature).
    pub hipHostMalloc: unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hipError_t,
    /// `hipHostFree`, or `hipFreeHost` (its replacement, same signature).
    pub hipHostFree: unsafe extern "C" fn(ptr: *mut c_void) -> hipError_t,
    pub hipHostGetDevicePointer:
        unsafe extern "C" fn(dev: *mut *mut c_void, host: *mut c_void, flags: c_uint) -> hipError_t,
}

/// `hipStreamCallback_t`: what `hipStreamAddCallback` runs.
pub type hipStreamCallback_t =
    Option<unsafe extern "C" fn(stream: hipStream_t, status: hipError_t, user_data: *mut c_void)>;

/// How host functions are queued on a stream.
#[derive(Copy, Clone, Debug)]
pub enum HostFunc {
    /// `hipLaunchHostFunc(stream, fn, userData)` (ROCm 5.3+).
    Launch(unsafe extern "C" fn(stream: hipStream_t, f: hipHostFn_t, user_data: *mut c_void) -> hipError_t),
    /// `hipStreamAddCallback(stream, callback, userData, 0)`: the same
    /// stream-ordered host call, with the stream and its status as arguments.
    AddCallback(
        unsafe extern "C" fn(
            stream: hipStream_t,
            callback: hipStreamCallback_t,
            user_data: *mut c_void,
            flags: c_uint,
        ) -> hipError_t,
    ),
}

/// Entry points that only describe (each may be missing).
#[derive(Debug, Default)]
pub struct Info {
    pub hipGetDevicePropertiesR0600:
        Option<unsafe extern "C" fn(prop: *mut hipDeviceProp_tR0600, device: c_int) -> hipError_t>,
    pub hipDeviceGetName:
        Option<unsafe extern "C" fn(name: *mut c_char, len: c_int, device: c_int) -> hipError_t>,
    pub hipDeviceTotalMem: Option<unsafe extern "C" fn(bytes: *mut usize, device: c_int) -> hipError_t>,
    pub hipRuntimeGetVersion: Option<unsafe extern "C" fn(version: *mut c_int) -> hipError_t>,
    pub hipDriverGetVersion: Option<unsafe extern "C" fn(version: *mut c_int) -> hipError_t>,
    /// `hipDeviceGetUuid(hipUUID*, hipDevice_t)` (ROCm 5.2+; `hipUUID` is 16 bytes).
    pub hipDeviceGetUuid: Option<unsafe extern "C" fn(uuid: *mut [c_char; 16], device: c_int) -> hipError_t>,
    pub hipMemGetAddressRange: Option<
        unsafe extern "C" fn(base: *mut hipDeviceptr_t, size: *mut usize, ptr: hipDeviceptr_t) -> hipError_t,
    >,
    /// libhipmem's own `hipmemSetInnerBackend`: present only when the
    /// library is hipmem's (the loopback).
    pub hipmemSetInnerBackend: Option<unsafe extern "C" fn(name: *const c_char) -> hipError_t>,
    /// `hipStreamGetDevice` (HIP 6): the device of a stream; the runtime
    /// checks the handle is a live stream (AMD's: `hip::isValid`).
    pub hipStreamGetDevice:
        Option<unsafe extern "C" fn(stream: hipStream_t, device: *mut c_int) -> hipError_t>,
    /// `hipStreamGetFlags`.
    pub hipStreamGetFlags:
        Option<unsafe extern "C" fn(stream: hipStream_t, flags: *mut c_uint) -> hipError_t>,
}

/// Registration of existing host memory.
#[derive(Debug)]
pub struct HostRegister {
    pub hipHostRegister: unsafe extern "C" fn(ptr: *mut c_void, size: usize, flags: c_uint) -> hipError_t,
    pub hipHostUnregister: unsafe extern "C" fn(ptr: *mut c_void) -> hipError_t,
}

/// Managed memory.
#[derive(Debug)]
pub struct Managed {
    pub hipMallocManaged:
        unsafe extern "C" fn(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> hipError_t,
    pub hipMemPrefetchAsync: unsafe extern "C" fn(
        ptr: *const c_void,
        count: usize,
        device: c_int,
        stream: hipStream_t,
    ) -> hipError_t,
    pub hipMemAdvise:
        unsafe extern "C" fn(ptr: *const c_void, count: usize, advice: c_int, device: c_int) -> hipError_t,
    pub hipMemRangeGetAttribute: unsafe extern "C" fn(
        data: *mut c_void,
        data_size: usize,
        attribute: c_int,
        ptr: *const c_void,
        count: usize,
    ) -> hipError_t,
    pub hipStreamAttachMemAsync: unsafe extern "C" fn(
        stream: hipStream_t,
        ptr: *mut c_void,
        length: usize,
        flags: c_uint,
    ) -> hipError_t,
}

/// The runtime's memory pools.
#[derive(Debug)]
pub struct Pools {
    pub hipDeviceGetDefaultMemPool:
        unsafe extern "C" fn(pool: *mut hipMemPool_t, device: c_int) -> hipError_t,
    pub hipMemPoolCreate:
        unsafe extern "C" fn(pool: *mut hipMemPool_t, props: *const hipMemPoolProps) -> hipError_t,
    pub hipMemPoolDestroy: unsafe extern "C" fn(pool: hipMemPool_t) -> hipError_t,
    pub hipMallocFromPoolAsync: unsafe extern "C" fn(
        ptr: *mut *mut c_void,
        size: usize,
        pool: hipMemPool_t,
        stream: hipStream_t,
    ) -> hipError_t,
    pub hipFreeAsync: unsafe extern "C" fn(ptr: *mut c_void, stream: hipStream_t) -> hipError_t,
    pub hipMemPoolSetAttribute:
        unsafe extern "C" fn(pool: hipMemPool_t, attr: hipMemPoolAttr, value: *mut c_void) -> hipError_t,
    pub hipMemPoolGetAttribute:
        unsafe extern "C" fn(pool: hipMemPool_t, attr: hipMemPoolAttr, value: *mut c_void) -> hipError_t,
    pub hipMemPoolTrimTo: unsafe extern "C" fn(pool: hipMemPool_t, keep: usize) -> hipError_t,
    pub hipMemPoolSetAccess:
        unsafe extern "C" fn(pool: hipMemPool_t, descs: *const hipMemAccessDesc, count: usize) -> hipError_t,
    pub hipMemPoolGetAccess: unsafe extern "C" fn(
        flags: *mut hipMemAccessFlags,
        pool: hipMemPool_t,
        location: *mut hipMemLocation,
    ) -> hipError_t,
}

/// Interprocess sharing of pools.
#[derive(Debug)]
pub struct PoolIpc {
    pub hipMemPoolExportToShareableHandle: unsafe extern "C" fn(
        handle: *mut c_void,
        pool: hipMemPool_t,
        handle_type: hipMemAllocationHandleType,
        flags: c_uint,
    ) -> hipError_t,
    pub hipMemPoolImportFromShareableHandle: unsafe extern "C" fn(
        pool: *mut hipMemPool_t,
        handle: *mut c_void,
        handle_type: hipMemAllocationHandleType,
        flags: c_uint,
    ) -> hipError_t,
    pub hipMemPoolExportPointer:
        unsafe extern "C" fn(data: *mut hipMemPoolPtrExportData, ptr: *mut c_void) -> hipError_t,
    pub hipMemPoolImportPointer: unsafe extern "C" fn(
        ptr: *mut *mut c_void,
        pool: hipMemPool_t,
        data: *mut hipMemPoolPtrExportData,
    ) -> hipError_t,
}

/// Virtual memory management.
#[derive(Debug)]
pub struct Vmm {
    pub hipMemGetAllocationGranularity: unsafe extern "C" fn(
        granularity: *mut usize,
        prop: *const hipMemAllocationProp,
        option: hipMemAllocationGranularity_flags,
    ) -> hipError_t,
    pub hipMemCreate: unsafe extern "C" fn(
        handle: *mut hipMemGenericAllocationHandle_t,
        size: usize,
        prop: *const hipMemAllocationProp,
        flags: c_ulonglong,
    ) -> hipError_t,
    pub hipMemRelease: unsafe extern "C" fn(handle: hipMemGenericAllocationHandle_t) -> hipError_t,
    pub hipMemAddressReserve: unsafe extern "C" fn(
        ptr: *mut *mut c_void,
        size: usize,
        alignment: usize,
        addr: *mut c_void,
        flags: c_ulonglong,
    ) -> hipError_t,
    pub hipMemAddressFree: unsafe extern "C" fn(ptr: *mut c_void, size: usize) -> hipError_t,
    pub hipMemMap: unsafe extern "C" fn(
        ptr: *mut c_void,
        size: usize,
        offset: usize,
        handle: hipMemGenericAllocationHandle_t,
        flags: c_ulonglong,
    ) -> hipError_t,
    pub hipMemUnmap: unsafe extern "C" fn(ptr: *mut c_void, size: usize) -> hipError_t,
    pub hipMemSetAccess: unsafe extern "C" fn(
        ptr: *mut c_void,
        size: usize,
        desc: *const hipMemAccessDesc,
        count: usize,
    ) -> hipError_t,
    pub hipMemGetAccess: unsafe extern "C" fn(
        flags: *mut c_ulonglong,
        location: *const hipMemLocation,
        ptr: *mut c_void,
    ) -> hipError_t,
    pub hipMemRetainAllocationHandle:
        unsafe extern "C" fn(handle: *mut hipMemGenericAllocationHandle_t, addr: *mut c_void) -> hipError_t,
    pub hipMemGetAllocationPropertiesFromHandle: unsafe extern "C" fn(
        prop: *mut hipMemAllocationProp,
        handle: hipMemGenericAllocationHandle_t,
    ) -> hipError_t,
    pub hipMemExportToShareableHandle: unsafe extern "C" fn(
        shareable: *mut c_void,
        handle: hipMemGenericAllocationHandle_t,
        handle_type: hipMemAllocationHandleType,
        flags: c_ulonglong,
    ) -> hipError_t,
    pub hipMemImportFromShareableHandle: unsafe extern "C" fn(
        handle: *mut hipMemGenericAllocationHandle_t,
        os_handle: *mut c_void,
        handle_type: hipMemAllocationHandleType,
    ) -> hipError_t,
}

/// Stream priorities.
#[derive(Debug)]
pub struct Priorities {
    /// The range of the current device: `least` (the default) and `greatest`.
    pub hipDeviceGetStreamPriorityRange:
        unsafe extern "C" fn(least: *mut c_int, greatest: *mut c_int) -> hipError_t,
    pub hipStreamCreateWithPriority:
        unsafe extern "C" fn(stream: *mut hipStream_t, flags: c_uint, priority: c_int) -> hipError_t,
    pub hipStreamGetPriority: unsafe extern "C" fn(stream: hipStream_t, priority: *mut c_int) -> hipError_t,
}

/// Pitched memory: allocation, 2D copies and memsets.
#[derive(Debug)]
pub struct Pitched {
    pub hipMallocPitch: unsafe extern "C" fn(
        ptr: *mut *mut c_void,
        pitch: *mut usize,
        width: usize,
        height: usize,
    ) -> hipError_t,
    pub hipMemcpy2DAsync: unsafe extern "C" fn(
        dst: *mut c_void,
        dpitch: usize,
        src: *const c_void,
        spitch: usize,
        width: usize,
        height: usize,
        kind: hipMemcpyKind,
        stream: hipStream_t,
    ) -> hipError_t,
    pub hipMemset2DAsync: unsafe extern "C" fn(
        dst: *mut c_void,
        pitch: usize,
        value: c_int,
        width: usize,
        height: usize,
        stream: hipStream_t,
    ) -> hipError_t,
}

/// Peer access between devices.
#[derive(Debug)]
pub struct Peer {
    pub hipDeviceCanAccessPeer:
        unsafe extern "C" fn(can_access: *mut c_int, device: c_int, peer: c_int) -> hipError_t,
    /// Enables access from the current device to `peer`'s memory (flags 0).
    pub hipDeviceEnablePeerAccess: unsafe extern "C" fn(peer: c_int, flags: c_uint) -> hipError_t,
    /// Disables access from the current device to `peer`'s memory.
    pub hipDeviceDisablePeerAccess: unsafe extern "C" fn(peer: c_int) -> hipError_t,
    pub hipMemcpyPeer: unsafe extern "C" fn(
        dst: *mut c_void,
        dst_device: c_int,
        src: *const c_void,
        src_device: c_int,
        size: usize,
    ) -> hipError_t,
    pub hipMemcpyPeerAsync: unsafe extern "C" fn(
        dst: *mut c_void,
        dst_device: c_int,
        src: *const c_void,
        src_device: c_int,
        size: usize,
        stream: hipStream_t,
    ) -> hipError_t,
}

/// An optional group: its table, or why it is missing (the first symbol
/// that was not found).
pub type Group<T> = std::result::Result<T, String>;

/// Every entry point hipmem uses, with the file they came from.
#[derive(Debug)]
pub struct Api {
    /// The file that was opened.
    pub library: String,
    /// The core group.
    pub core: Core,
    /// Descriptive entry points.
    pub info: Info,
    /// `hipHostRegister` / `hipHostUnregister`.
    pub host_register: Group<HostRegister>,
    /// Managed memory.
    pub managed: Group<Managed>,
    /// Memory pools.
    pub pools: Group<Pools>,
    /// Pool IPC.
    pub pool_ipc: Group<PoolIpc>,
    /// Virtual memory.
    pub vmm: Group<Vmm>,
    /// Stream priorities.
    pub priorities: Group<Priorities>,
    /// Pitched memory.
    pub pitched: Group<Pitched>,
    /// Peer access.
    pub peer: Group<Peer>,
}

/// The library names tried, in order, when `HIPMEM_HIP_LIBRARY` is unset.
pub const LIBRARY_NAMES: [&str; 3] = ["libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"];

/// The variable that names another library with HIP's ABI to load instead.
pub const LIBRARY_VARIABLE: &str = "HIPMEM_HIP_LIBRARY";

/// The process-wide table. The `Library` inside is never dropped, so every
/// pointer in the table stays valid.
static API: OnceLock<std::result::Result<(Library, Api), Error>> = OnceLock::new();

impl Api {
    /// The process-wide table, loading the library on the first call: the
    /// file `HIPMEM_HIP_LIBRARY` names, else the first of [`LIBRARY_NAMES`]
    /// that loads.
    pub fn get() -> Result<&'static Api> {
        let loaded = API.get_or_init(|| match std::env::var(LIBRARY_VARIABLE) {
            Ok(path) if !path.trim().is_empty() => {
                load(&[path.trim()]).map_err(|e| e.context(format!("{LIBRARY_VARIABLE}={path}")))
            }
            _ => load(&LIBRARY_NAMES),
        });
        match loaded {
            Ok((_, api)) => Ok(api),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Opens a library: with `RTLD_DEEPBIND` on glibc, so that a HIP runtime
/// loaded into a program that also exports HIP's names (a program linked
/// with libhipmem) binds its own internal calls to itself.
fn open(name: &str) -> std::result::Result<Library, libloading::Error> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};
        /// `RTLD_DEEPBIND` of glibc's `<dlfcn.h>`.
        const RTLD_DEEPBIND: c_int = 0x0008;
        // SAFETY: loading a HIP runtime runs its initializers; the library is
        // made to be dlopen'ed by any process and they have no preconditions.
        unsafe { UnixLibrary::open(Some(name), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND) }.map(Library::from)
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        // SAFETY: as above.
        unsafe { Library::new(name) }
    }
}

/// Opens the first of `names` that loads and resolves the core group.
pub(super) fn load(names: &[&str]) -> std::result::Result<(Library, Api), Error> {
    let mut failures = Vec::new();
    for &name in names {
        match open(name) {
            Ok(lib) => {
                let api = resolve(&lib, name)?;
                return Ok((lib, api));
            }
            Err(e) => match std::error::Error::source(&e) {
                Some(why) => failures.push(format!("{name}: {why}")),
                None => failures.push(format!("{name}: {e}")),
            },
        }
    }
    Err(Error::NotInitialized(format!(
        "cannot load AMD's HIP runtime (tried {}; set {LIBRARY_VARIABLE} to the file's path if it is elsewhere): {}",
        names.join(", "),
        failures.join("; ")
    )))
}

/// Looks up one symbol as a value of the function-pointer type `T`.
///
/// # Safety
/// `T` must be the exact `extern "C"` function-pointer type of `symbol`.
unsafe fn sym<T: Copy>(lib: &Library, symbol: &str) -> std::result::Result<T, String> {
    // SAFETY: the caller guarantees `T` matches the symbol's C signature.
    match unsafe { lib.get::<T>(symbol.as_bytes()) } {
        Ok(s) => Ok(*s),
        Err(_) => Err(symbol.to_string()),
    }
}

fn resolve(lib: &Library, name: &str) -> Result<Api> {
    let missing =
        |symbol: String| Error::NotInitialized(format!("{name} has no symbol {symbol}, which hipmem needs"));
    macro_rules! req {
        ($sym:literal) => {
            // SAFETY: the field this initializes is declared with the
            // signature hip_runtime_api.h gives for this symbol.
            unsafe { sym(lib, $sym).map_err(missing)? }
        };
    }
    macro_rules! opt {
        ($sym:literal) => {
            // SAFETY: as above.
            unsafe { sym(lib, $sym) }?
        };
    }
    macro_rules! maybe {
        ($sym:literal) => {
            // SAFETY: as above.
            unsafe { sym(lib, $sym) }.ok()
        };
    }
    // Deprecated in ROCm 6.3 in favour of same-signature replacements.
    // SAFETY: hipHostMalloc and hipExtHostAlloc are both (void**, size_t, unsigned).
    let host_malloc = unsafe { sym(lib, "hipHostMalloc").or_else(|_| sym(lib, "hipExtHostAlloc")) }
        .map_err(|_| missing("hipHostMalloc (or hipExtHostAlloc)".into()))?;
    // SAFETY: hipHostFree and hipFreeHost are both (void*).
    let host_free = unsafe { sym(lib, "hipHostFree").or_else(|_| sym(lib, "hipFreeHost")) }
        .map_err(|_| missing("hipHostFree (or hipFreeHost)".into()))?;
    // SAFETY: each is declared with the signature hip_runtime_api.h gives it.
    let host_func = match unsafe { sym(lib, "hipLaunchHostFunc") } {
        Ok(f) => HostFunc::Launch(f),
        // SAFETY: as above.
        Err(_) => HostFunc::AddCallback(
            unsafe { sym(lib, "hipStreamAddCallback") }
                .map_err(|_| missing("hipLaunchHostFunc (or hipStreamAddCallback)".into()))?,
        ),
    };
    let core = Core {
        hipGetErrorName: req!("hipGetErrorName"),
        hipGetErrorString: req!("hipGetErrorString"),
        hipInit: req!("hipInit"),
        hipGetDeviceCount: req!("hipGetDeviceCount"),
        hipSetDevice: req!("hipSetDevice"),
        hipGetDevice: req!("hipGetDevice"),
        hipDeviceGetAttribute: req!("hipDeviceGetAttribute"),
        hipDeviceSynchronize: req!("hipDeviceSynchronize"),
        hipMemGetInfo: req!("hipMemGetInfo"),
        hipMalloc: req!("hipMalloc"),
        hipFree: req!("hipFree"),
        hipPointerGetAttributes: req!("hipPointerGetAttributes"),
        hipMemcpy: req!("hipMemcpy"),
        hipMemcpyAsync: req!("hipMemcpyAsync"),
        hipMemsetD8Async: req!("hipMemsetD8Async"),
        hipMemsetD16Async: req!("hipMemsetD16Async"),
        hipMemsetD32Async: req!("hipMemsetD32Async"),
        hipStreamCreateWithFlags: req!("hipStreamCreateWithFlags"),
        hipStreamDestroy: req!("hipStreamDestroy"),
        hipStreamSynchronize: req!("hipStreamSynchronize"),
        hipStreamQuery: req!("hipStreamQuery"),
        hipStreamWaitEvent: req!("hipStreamWaitEvent"),
        host_func,
        hipEventCreateWithFlags: req!("hipEventCreateWithFlags"),
        hipEventDestroy: req!("hipEventDestroy"),
        hipEventRecord: req!("hipEventRecord"),
        hipEventQuery: req!("hipEventQuery"),
        hipEventSynchronize: req!("hipEventSynchronize"),
        hipEventElapsedTime: req!("hipEventElapsedTime"),
        hipHostMalloc: host_malloc,
        hipHostFree: host_free,
        hipHostGetDevicePointer: req!("hipHostGetDevicePointer"),
    };
    let info = Info {
        hipGetDevicePropertiesR0600: maybe!("hipGetDevicePropertiesR0600"),
        hipDeviceGetName: maybe!("hipDeviceGetName"),
        hipDeviceTotalMem: maybe!("hipDeviceTotalMem"),
        hipRuntimeGetVersion: maybe!("hipRuntimeGetVersion"),
        hipDriverGetVersion: maybe!("hipDriverGetVersion"),
        hipDeviceGetUuid: maybe!("hipDeviceGetUuid"),
        hipMemGetAddressRange: maybe!("hipMemGetAddressRange"),
        hipmemSetInnerBackend: maybe!("hipmemSetInnerBackend"),
        hipStreamGetDevice: maybe!("hipStreamGetDevice"),
        hipStreamGetFlags: maybe!("hipStreamGetFlags"),
    };
    let host_register = (|| -> Group<HostRegister> {
        Ok(HostRegister {
            hipHostRegister: opt!("hipHostRegister"),
            hipHostUnregister: opt!("hipHostUnregister"),
        })
    })();
    let managed = (|| -> Group<Managed> {
        Ok(Managed {
            hipMallocManaged: opt!("hipMallocManaged"),
            hipMemPrefetchAsync: opt!("hipMemPrefetchAsync"),
            hipMemAdvise: opt!("hipMemAdvise"),
            hipMemRangeGetAttribute: opt!("hipMemRangeGetAttribute"),
            hipStreamAttachMemAsync: opt!("hipStreamAttachMemAsync"),
        })
    })();
    let pools = (|| -> Group<Pools> {
        Ok(Pools {
            hipDeviceGetDefaultMemPool: opt!("hipDeviceGetDefaultMemPool"),
            hipMemPoolCreate: opt!("hipMemPoolCreate"),
            hipMemPoolDestroy: opt!("hipMemPoolDestroy"),
            hipMallocFromPoolAsync: opt!("hipMallocFromPoolAsync"),
            hipFreeAsync: opt!("hipFreeAsync"),
            hipMemPoolSetAttribute: opt!("hipMemPoolSetAttribute"),
            hipMemPoolGetAttribute: opt!("hipMemPoolGetAttribute"),
            hipMemPoolTrimTo: opt!("hipMemPoolTrimTo"),
            hipMemPoolSetAccess: opt!("hipMemPoolSetAccess"),
            hipMemPoolGetAccess: opt!("hipMemPoolGetAccess"),
        })
    })();
    let pool_ipc = (|| -> Group<PoolIpc> {
        Ok(PoolIpc {
            hipMemPoolExportToShareableHandle: opt!("hipMemPoolExportToShareableHandle"),
            hipMemPoolImportFromShareableHandle: opt!("hipMemPoolImportFromShareableHandle"),
            hipMemPoolExportPointer: opt!("hipMemPoolExportPointer"),
            hipMemPoolImportPointer: opt!("hipMemPoolImportPointer"),
        })
    })();
    let vmm = (|| -> Group<Vmm> {
        Ok(Vmm {
            hipMemGetAllocationGranularity: opt!("hipMemGetAllocationGranularity"),
            hipMemCreate: opt!("hipMemCreate"),
            hipMemRelease: opt!("hipMemRelease"),
            hipMemAddressReserve: opt!("hipMemAddressReserve"),
            hipMemAddressFree: opt!("hipMemAddressFree"),
            hipMemMap: opt!("hipMemMap"),
            hipMemUnmap: opt!("hipMemUnmap"),
            hipMemSetAccess: opt!("hipMemSetAccess"),
            hipMemGetAccess: opt!("hipMemGetAccess"),
            hipMemRetainAllocationHandle: opt!("hipMemRetainAllocationHandle"),
            hipMemGetAllocationPropertiesFromHandle: opt!("hipMemGetAllocationPropertiesFromHandle"),
            hipMemExportToShareableHandle: opt!("hipMemExportToShareableHandle"),
            hipMemImportFromShareableHandle: opt!("hipMemImportFromShareableHandle"),
        })
    })();
    let priorities = (|| -> Group<Priorities> {
        Ok(Priorities {
            hipDeviceGetStreamPriorityRange: opt!("hipDeviceGetStreamPriorityRange"),
            hipStreamCreateWithPriority: opt!("hipStreamCreateWithPriority"),
            hipStreamGetPriority: opt!("hipStreamGetPriority"),
        })
    })();
    let pitched = (|| -> Group<Pitched> {
        Ok(Pitched {
            hipMallocPitch: opt!("hipMallocPitch"),
            hipMemcpy2DAsync: opt!("hipMemcpy2DAsync"),
            hipMemset2DAsync: opt!("hipMemset2DAsync"),
        })
    })();
    let peer = (|| -> Group<Peer> {
        Ok(Peer {
            hipDeviceCanAccessPeer: opt!("hipDeviceCanAccessPeer"),
            hipDeviceEnablePeerAccess: opt!("hipDeviceEnablePeerAccess"),
            hipDeviceDisablePeerAccess: opt!("hipDeviceDisablePeerAccess"),
            hipMemcpyPeer: opt!("hipMemcpyPeer"),
            hipMemcpyPeerAsync: opt!("hipMemcpyPeerAsync"),
        })
    })();
    Ok(Api {
        library: name.to_string(),
        core,
        info,
        host_register,
        managed,
        pools,
        pool_ipc,
        vmm,
        priorities,
        pitched,
        peer,
    })
}

/// `HIP_VERSION` as `hipRuntimeGetVersion` reports it:
/// `major * 10_000_000 + minor * 100_000 + patch`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct HipVersion {
    /// Major version (6 for ROCm 6.x).
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch (a build number on AMD's releases).
    pub patch: u32,
}

impl HipVersion {
    /// Decodes `HIP_VERSION`; None for a value that is not one.
    pub fn from_raw(raw: i32) -> Option<HipVersion> {
        if raw <= 0 {
            return None;
        }
        let raw = raw as u32;
        Some(HipVersion { major: raw / 10_000_000, minor: (raw / 100_000) % 100, patch: raw % 100_000 })
    }

    /// Whether this is `major.minor` or newer.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl std::fmt::Display for HipVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}
