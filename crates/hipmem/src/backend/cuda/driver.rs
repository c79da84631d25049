//! The CUDA driver API as a table of function pointers loaded at run time.
//!
//! Nothing here links against CUDA: [`Driver::get`] opens `libcuda.so.1`
//! (falling back to `libcuda.so`) with `libloading` and looks up every entry
//! point hipmem uses. A missing library or symbol is an
//! [`Error::NotInitialized`] value that names it, never a panic. The loaded
//! library is kept in a process-wide `OnceLock` and never unloaded, so the
//! pointers stay valid for the life of the process.
//!
//! The types and constants mirror `cuda.h` (CUDA 13); the entry points are the
//! versioned symbols the header's macros resolve to (`cuMemAlloc_v2`, ...),
//! since a `dlsym` of the unversioned name gets the legacy ABI.
#![allow(non_camel_case_types, non_snake_case)]

use std::ffi::{c_char, c_int, c_uchar, c_uint, c_ushort, c_void};
use std::sync::OnceLock;

use libloading::Library;

use crate::error::{Error, Result};

/// `CUresult`: 0 is `CUDA_SUCCESS`, anything else an error code.
pub type CUresult = u32;
/// `CUdevice`: a device handle (the ordinal on every driver so far).
pub type CUdevice = c_int;
/// `CUdeviceptr`: a device address.
pub type CUdeviceptr = u64;

/// Opaque driver object behind [`CUcontext`].
#[repr(C)]
pub struct CUctx_st {
    _private: [u8; 0],
}
/// Opaque driver object behind [`CUstream`].
#[repr(C)]
pub struct CUstream_st {
    _private: [u8; 0],
}
/// Opaque driver object behind [`CUevent`].
#[repr(C)]
pub struct CUevent_st {
    _private: [u8; 0],
}
/// Opaque driver object behind [`CUmodule`].
#[repr(C)]
pub struct CUmod_st {
    _private: [u8; 0],
}
/// Opaque driver object behind [`CUfunction`].
#[repr(C)]
pub struct CUfunc_st {
    _private: [u8; 0],
}

/// `CUcontext`.
pub type CUcontext = *mut CUctx_st;
/// `CUstream`; null is the legacy default stream of the current context.
pub type CUstream = *mut CUstream_st;
/// `CUevent`.
pub type CUevent = *mut CUevent_st;
/// `CUmodule`.
pub type CUmodule = *mut CUmod_st;
/// `CUfunction`.
pub type CUfunction = *mut CUfunc_st;
/// `CUhostFn`: a host function run in stream order.
pub type CUhostFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

// ---- CUresult codes ---------------------------------------------------------------

/// `CUDA_SUCCESS`.
pub const CUDA_SUCCESS: CUresult = 0;
/// `CUDA_ERROR_INVALID_VALUE`.
pub const CUDA_ERROR_INVALID_VALUE: CUresult = 1;
/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
/// `CUDA_ERROR_NOT_INITIALIZED`.
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// `CUDA_ERROR_DEINITIALIZED`.
pub const CUDA_ERROR_DEINITIALIZED: CUresult = 4;
/// `CUDA_ERROR_NO_DEVICE`.
pub const CUDA_ERROR_NO_DEVICE: CUresult = 100;
/// `CUDA_ERROR_INVALID_DEVICE`.
pub const CUDA_ERROR_INVALID_DEVICE: CUresult = 101;
/// `CUDA_ERROR_INVALID_HANDLE`.
pub const CUDA_ERROR_INVALID_HANDLE: CUresult = 400;
/// `CUDA_ERROR_NOT_READY`.
pub const CUDA_ERROR_NOT_READY: CUresult = 600;
/// `CUDA_ERROR_CONTEXT_IS_DESTROYED`.
pub const CUDA_ERROR_CONTEXT_IS_DESTROYED: CUresult = 709;
/// `CUDA_ERROR_NOT_SUPPORTED`.
pub const CUDA_ERROR_NOT_SUPPORTED: CUresult = 801;

// ---- CUdevice_attribute ---------------------------------------------------------

/// `CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT`.
pub const CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: c_int = 16;
/// `CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY`.
pub const CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: c_int = 19;
/// `CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING`.
pub const CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: c_int = 41;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR`.
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: c_int = 75;
/// `CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR`.
pub const CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: c_int = 76;
/// `CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY`.
pub const CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: c_int = 83;
/// `CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS`.
pub const CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: c_int = 89;
/// `CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED`.
pub const CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED: c_int = 102;
/// `CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED`.
pub const CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: c_int = 115;

// ---- CUpointer_attribute ---------------------------------------------------------

/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL` (an `int`).
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;

// ---- flags ----------------------------------------------------------------------

/// `CU_STREAM_DEFAULT`.
pub const CU_STREAM_DEFAULT: c_uint = 0;
/// `CU_STREAM_NON_BLOCKING`.
pub const CU_STREAM_NON_BLOCKING: c_uint = 1;
/// `CU_EVENT_DEFAULT`.
pub const CU_EVENT_DEFAULT: c_uint = 0;
/// `CU_EVENT_BLOCKING_SYNC`.
pub const CU_EVENT_BLOCKING_SYNC: c_uint = 1;
/// `CU_EVENT_DISABLE_TIMING`.
pub const CU_EVENT_DISABLE_TIMING: c_uint = 2;
/// `CU_EVENT_INTERPROCESS`.
pub const CU_EVENT_INTERPROCESS: c_uint = 4;
/// `CU_EVENT_WAIT_DEFAULT` (flags of `cuStreamWaitEvent`).
pub const CU_EVENT_WAIT_DEFAULT: c_uint = 0;

// ---- virtual memory management ---------------------------------------------------

/// `CUmemAllocationType`.
pub type CUmemAllocationType = c_uint;
/// `CU_MEM_ALLOCATION_TYPE_PINNED`.
pub const CU_MEM_ALLOCATION_TYPE_PINNED: CUmemAllocationType = 1;
/// `CUmemAllocationHandleType`.
pub type CUmemAllocationHandleType = c_uint;
/// `CU_MEM_HANDLE_TYPE_NONE`.
pub const CU_MEM_HANDLE_TYPE_NONE: CUmemAllocationHandleType = 0;
/// `CUmemLocationType`.
pub type CUmemLocationType = c_uint;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const CU_MEM_LOCATION_TYPE_DEVICE: CUmemLocationType = 1;
/// `CUmemAllocationGranularity_flags`.
pub type CUmemAllocationGranularity_flags = c_uint;
/// `CU_MEM_ALLOC_GRANULARITY_MINIMUM`.
pub const CU_MEM_ALLOC_GRANULARITY_MINIMUM: CUmemAllocationGranularity_flags = 0;
/// `CU_MEM_ALLOC_GRANULARITY_RECOMMENDED`.
pub const CU_MEM_ALLOC_GRANULARITY_RECOMMENDED: CUmemAllocationGranularity_flags = 1;

/// `CUmemLocation` (8 bytes). CUDA 13 makes `id` a union with a two-byte
/// `localized {deviceId, localityDomainId}` struct; the layout is unchanged.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CUmemLocation {
    /// A `CUmemLocationType`.
    pub type_: CUmemLocationType,
    /// The device ordinal (for `CU_MEM_LOCATION_TYPE_DEVICE`).
    pub id: c_int,
}

/// The anonymous `allocFlags` struct of [`CUmemAllocationProp`] (8 bytes).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CUmemAllocationPropFlags {
    /// `CU_MEM_ALLOCATION_COMP_*`.
    pub compressionType: c_uchar,
    /// Whether the allocation may be used for GPUDirect RDMA.
    pub gpuDirectRDMACapable: c_uchar,
    /// `CU_MEM_CREATE_USAGE_*` bits.
    pub usage: c_ushort,
    /// Must be zero.
    pub reserved: [c_uchar; 4],
}

/// `CUmemAllocationProp` (32 bytes on 64-bit targets).
#[repr(C)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CUmemAllocationProp {
    /// A `CUmemAllocationType`.
    pub type_: CUmemAllocationType,
    /// `CUmemAllocationHandleType` bits that the allocation may be exported as.
    pub requestedHandleTypes: CUmemAllocationHandleType,
    /// Where the memory lives.
    pub location: CUmemLocation,
    /// Windows only; must be null elsewhere.
    pub win32HandleMetaData: *mut c_void,
    /// Extra flags.
    pub allocFlags: CUmemAllocationPropFlags,
}

impl CUmemAllocationProp {
    /// Properties of a plain pinned allocation on device `ordinal`.
    pub fn pinned_on_device(ordinal: CUdevice) -> CUmemAllocationProp {
        CUmemAllocationProp {
            type_: CU_MEM_ALLOCATION_TYPE_PINNED,
            requestedHandleTypes: CU_MEM_HANDLE_TYPE_NONE,
            location: CUmemLocation { type_: CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal },
            win32HandleMetaData: std::ptr::null_mut(),
            allocFlags: CUmemAllocationPropFlags::default(),
        }
    }
}

/// Opaque driver object behind [`CUmemoryPool`].
#[repr(C)]
pub struct CUmemPoolHandle_st {
    _private: [u8; 0],
}
/// `CUmemoryPool`.
pub type CUmemoryPool = *mut CUmemPoolHandle_st;

/// `CUmemPoolProps` (88 bytes).
#[repr(C)]
#[derive(Copy, Clone, Debug)]
pub struct CUmemPoolProps {
    /// A `CUmemAllocationType` (pinned).
    pub allocType: CUmemAllocationType,
    /// `CUmemAllocationHandleType` bits the pool can be exported as.
    pub handleTypes: CUmemAllocationHandleType,
    /// Where the memory lives.
    pub location: CUmemLocation,
    /// Windows only; null elsewhere.
    pub win32SecurityAttributes: *mut c_void,
    /// Most bytes the pool may reserve (0: no limit).
    pub maxSize: usize,
    /// `usage` (CUDA 12.x+) and reserved bytes; zero.
    pub reserved: [c_uchar; 56],
}

/// `CUmemAccessDesc` (12 bytes).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CUmemAccessDesc {
    /// Which device.
    pub location: CUmemLocation,
    /// A `CUmemAccess_flags` value (0 none, 1 read, 3 read-write).
    pub flags: c_uint,
}

// Layout checks against cuda.h (x86-64 / aarch64 LP64).
const _: () = {
    assert!(std::mem::size_of::<CUmemPoolProps>() == 88);
    assert!(std::mem::offset_of!(CUmemPoolProps, maxSize) == 24);
    assert!(std::mem::size_of::<CUmemAccessDesc>() == 12);
    assert!(std::mem::size_of::<CUmemLocation>() == 8);
    assert!(std::mem::size_of::<CUmemAllocationPropFlags>() == 8);
    assert!(std::mem::size_of::<CUmemAllocationProp>() == 32);
    assert!(std::mem::offset_of!(CUmemAllocationProp, location) == 8);
    assert!(std::mem::offset_of!(CUmemAllocationProp, win32HandleMetaData) == 16);
    assert!(std::mem::offset_of!(CUmemAllocationProp, allocFlags) == 24);
};

// ---- the function table ------------------------------------------------------------

/// `cuCtxSynchronize`, in whichever form the driver exports.
#[derive(Copy, Clone, Debug)]
pub enum CtxSynchronize {
    /// `cuCtxSynchronize_v2(CUcontext)` (CUDA 12.9 and newer): synchronizes the named context.
    V2(unsafe extern "C" fn(ctx: CUcontext) -> CUresult),
    /// `cuCtxSynchronize()`: synchronizes the calling thread's current context.
    V1(unsafe extern "C" fn() -> CUresult),
}

/// The driver entry points hipmem uses, with the symbol each was loaded from.
#[derive(Debug)]
pub struct Driver {
    /// Which file was opened (`libcuda.so.1` or `libcuda.so`).
    pub library_name: &'static str,
    /// Symbol name `cuEventElapsedTime` was resolved to.
    pub event_elapsed_time_symbol: &'static str,
    /// `cuGetErrorName`.
    pub cuGetErrorName: unsafe extern "C" fn(error: CUresult, name: *mut *const c_char) -> CUresult,
    /// `cuGetErrorString`.
    pub cuGetErrorString: unsafe extern "C" fn(error: CUresult, text: *mut *const c_char) -> CUresult,
    /// `cuInit`.
    pub cuInit: unsafe extern "C" fn(flags: c_uint) -> CUresult,
    /// `cuDriverGetVersion`.
    pub cuDriverGetVersion: unsafe extern "C" fn(version: *mut c_int) -> CUresult,
    /// `cuDeviceGetCount`.
    pub cuDeviceGetCount: unsafe extern "C" fn(count: *mut c_int) -> CUresult,
    /// `cuDeviceGet`.
    pub cuDeviceGet: unsafe extern "C" fn(device: *mut CUdevice, ordinal: c_int) -> CUresult,
    /// `cuDeviceGetName`.
    pub cuDeviceGetName: unsafe extern "C" fn(name: *mut c_char, len: c_int, dev: CUdevice) -> CUresult,
    /// `cuDeviceTotalMem_v2`.
    pub cuDeviceTotalMem_v2: unsafe extern "C" fn(bytes: *mut usize, dev: CUdevice) -> CUresult,
    /// `cuDeviceGetAttribute`.
    pub cuDeviceGetAttribute:
        unsafe extern "C" fn(value: *mut c_int, attrib: c_int, dev: CUdevice) -> CUresult,
    /// `cuDevicePrimaryCtxRetain`.
    pub cuDevicePrimaryCtxRetain: unsafe extern "C" fn(ctx: *mut CUcontext, dev: CUdevice) -> CUresult,
    /// `cuDevicePrimaryCtxRelease_v2`.
    pub cuDevicePrimaryCtxRelease_v2: unsafe extern "C" fn(dev: CUdevice) -> CUresult,
    /// `cuCtxGetCurrent`.
    pub cuCtxGetCurrent: unsafe extern "C" fn(ctx: *mut CUcontext) -> CUresult,
    /// `cuCtxSetCurrent`.
    pub cuCtxSetCurrent: unsafe extern "C" fn(ctx: CUcontext) -> CUresult,
    /// `cuCtxGetDevice`: the device of the current context.
    pub cuCtxGetDevice: unsafe extern "C" fn(device: *mut CUdevice) -> CUresult,
    /// `cuCtxSynchronize_v2`, else `cuCtxSynchronize`.
    pub cuCtxSynchronize: CtxSynchronize,
    /// `cuMemGetInfo_v2`.
    pub cuMemGetInfo_v2: unsafe extern "C" fn(free: *mut usize, total: *mut usize) -> CUresult,
    /// `cuMemAlloc_v2`.
    pub cuMemAlloc_v2: unsafe extern "C" fn(dptr: *mut CUdeviceptr, bytesize: usize) -> CUresult,
    /// `cuMemFree_v2`.
    pub cuMemFree_v2: unsafe extern "C" fn(dptr: CUdeviceptr) -> CUresult,
    /// `cuPointerGetAttribute`.
    pub cuPointerGetAttribute:
        unsafe extern "C" fn(data: *mut c_void, attribute: c_int, ptr: CUdeviceptr) -> CUresult,
    /// `cuMemGetAllocationGranularity`.
    pub cuMemGetAllocationGranularity: unsafe extern "C" fn(
        granularity: *mut usize,
        prop: *const CUmemAllocationProp,
        option: CUmemAllocationGranularity_flags,
    ) -> CUresult,
    /// `cuDeviceGetDefaultMemPool`.
    pub cuDeviceGetDefaultMemPool: unsafe extern "C" fn(pool: *mut CUmemoryPool, dev: CUdevice) -> CUresult,
    /// `cuMemPoolCreate`.
    pub cuMemPoolCreate:
        unsafe extern "C" fn(pool: *mut CUmemoryPool, props: *const CUmemPoolProps) -> CUresult,
    /// `cuMemPoolDestroy`.
    pub cuMemPoolDestroy: unsafe extern "C" fn(pool: CUmemoryPool) -> CUresult,
    /// `cuMemAllocFromPoolAsync`.
    pub cuMemAllocFromPoolAsync: unsafe extern "C" fn(
        dptr: *mut CUdeviceptr,
        bytes: usize,
        pool: CUmemoryPool,
        stream: CUstream,
    ) -> CUresult,
    /// `cuMemFreeAsync`.
    pub cuMemFreeAsync: unsafe extern "C" fn(dptr: CUdeviceptr, stream: CUstream) -> CUresult,
    /// `cuMemPoolSetAttribute`.
    pub cuMemPoolSetAttribute:
        unsafe extern "C" fn(pool: CUmemoryPool, attr: c_uint, value: *mut c_void) -> CUresult,
    /// `cuMemPoolGetAttribute`.
    pub cuMemPoolGetAttribute:
        unsafe extern "C" fn(pool: CUmemoryPool, attr: c_uint, value: *mut c_void) -> CUresult,
    /// `cuMemPoolTrimTo`.
    pub cuMemPoolTrimTo: unsafe extern "C" fn(pool: CUmemoryPool, min_bytes_to_keep: usize) -> CUresult,
    /// `cuMemPoolSetAccess`.
    pub cuMemPoolSetAccess:
        unsafe extern "C" fn(pool: CUmemoryPool, map: *const CUmemAccessDesc, count: usize) -> CUresult,
    /// `cuMemPoolGetAccess`.
    pub cuMemPoolGetAccess: unsafe extern "C" fn(
        flags: *mut c_uint,
        pool: CUmemoryPool,
        location: *mut CUmemLocation,
    ) -> CUresult,
    /// `cuMemcpyHtoD_v2`.
    pub cuMemcpyHtoD_v2: unsafe extern "C" fn(dst: CUdeviceptr, src: *const c_void, bytes: usize) -> CUresult,
    /// `cuMemcpyDtoH_v2`.
    pub cuMemcpyDtoH_v2: unsafe extern "C" fn(dst: *mut c_void, src: CUdeviceptr, bytes: usize) -> CUresult,
    /// `cuMemcpyDtoD_v2`.
    pub cuMemcpyDtoD_v2: unsafe extern "C" fn(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize) -> CUresult,
    /// `cuMemcpyHtoDAsync_v2`.
    pub cuMemcpyHtoDAsync_v2: unsafe extern "C" fn(
        dst: CUdeviceptr,
        src: *const c_void,
        bytes: usize,
        stream: CUstream,
    ) -> CUresult,
    /// `cuMemcpyDtoHAsync_v2`.
    pub cuMemcpyDtoHAsync_v2:
        unsafe extern "C" fn(dst: *mut c_void, src: CUdeviceptr, bytes: usize, stream: CUstream) -> CUresult,
    /// `cuMemcpyDtoDAsync_v2`.
    pub cuMemcpyDtoDAsync_v2:
        unsafe extern "C" fn(dst: CUdeviceptr, src: CUdeviceptr, bytes: usize, stream: CUstream) -> CUresult,
    /// `cuMemsetD8Async`.
    pub cuMemsetD8Async:
        unsafe extern "C" fn(dst: CUdeviceptr, value: c_uchar, count: usize, stream: CUstream) -> CUresult,
    /// `cuMemsetD16Async`.
    pub cuMemsetD16Async:
        unsafe extern "C" fn(dst: CUdeviceptr, value: c_ushort, count: usize, stream: CUstream) -> CUresult,
    /// `cuMemsetD32Async`.
    pub cuMemsetD32Async:
        unsafe extern "C" fn(dst: CUdeviceptr, value: c_uint, count: usize, stream: CUstream) -> CUresult,
    /// `cuStreamCreate`.
    pub cuStreamCreate: unsafe extern "C" fn(stream: *mut CUstream, flags: c_uint) -> CUresult,
    /// `cuStreamDestroy_v2`.
    pub cuStreamDestroy_v2: unsafe extern "C" fn(stream: CUstream) -> CUresult,
    /// `cuStreamSynchronize`.
    pub cuStreamSynchronize: unsafe extern "C" fn(stream: CUstream) -> CUresult,
    /// `cuStreamQuery`.
    pub cuStreamQuery: unsafe extern "C" fn(stream: CUstream) -> CUresult,
    /// `cuStreamGetCtx`: the context a stream belongs to.
    pub cuStreamGetCtx: unsafe extern "C" fn(stream: CUstream, ctx: *mut CUcontext) -> CUresult,
    /// `cuStreamGetFlags`.
    pub cuStreamGetFlags: unsafe extern "C" fn(stream: CUstream, flags: *mut c_uint) -> CUresult,
    /// `cuStreamWaitEvent`.
    pub cuStreamWaitEvent: unsafe extern "C" fn(stream: CUstream, event: CUevent, flags: c_uint) -> CUresult,
    /// `cuLaunchHostFunc`.
    pub cuLaunchHostFunc:
        unsafe extern "C" fn(stream: CUstream, func: CUhostFn, user_data: *mut c_void) -> CUresult,
    /// `cuEventCreate`.
    pub cuEventCreate: unsafe extern "C" fn(event: *mut CUevent, flags: c_uint) -> CUresult,
    /// `cuEventDestroy_v2`.
    pub cuEventDestroy_v2: unsafe extern "C" fn(event: CUevent) -> CUresult,
    /// `cuEventRecord`.
    pub cuEventRecord: unsafe extern "C" fn(event: CUevent, stream: CUstream) -> CUresult,
    /// `cuEventQuery`.
    pub cuEventQuery: unsafe extern "C" fn(event: CUevent) -> CUresult,
    /// `cuEventSynchronize`.
    pub cuEventSynchronize: unsafe extern "C" fn(event: CUevent) -> CUresult,
    /// `cuEventElapsedTime_v2` (CUDA 12.8+), else `cuEventElapsedTime`; same signature.
    pub cuEventElapsedTime: unsafe extern "C" fn(ms: *mut f32, start: CUevent, end: CUevent) -> CUresult,
    /// `cuModuleLoadData`.
    pub cuModuleLoadData: unsafe extern "C" fn(module: *mut CUmodule, image: *const c_void) -> CUresult,
    /// `cuModuleUnload`.
    pub cuModuleUnload: unsafe extern "C" fn(module: CUmodule) -> CUresult,
    /// `cuModuleGetFunction`.
    pub cuModuleGetFunction:
        unsafe extern "C" fn(func: *mut CUfunction, module: CUmodule, name: *const c_char) -> CUresult,
    /// `cuLaunchKernel`.
    pub cuLaunchKernel: unsafe extern "C" fn(
        func: CUfunction,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        shared_mem_bytes: c_uint,
        stream: CUstream,
        kernel_params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> CUresult,
}

/// The library names tried, in order.
pub const LIBRARY_NAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

/// The process-wide table, loaded on first use. The `Library` inside the
/// `OnceLock` is never dropped, so every pointer in the table stays valid.
static DRIVER: OnceLock<std::result::Result<(Library, Driver), Error>> = OnceLock::new();

impl Driver {
    /// The process-wide driver table, loading `libcuda` on the first call.
    pub fn get() -> Result<&'static Driver> {
        match DRIVER.get_or_init(|| load(&LIBRARY_NAMES)) {
            Ok((_, driver)) => Ok(driver),
            Err(e) => Err(e.clone()),
        }
    }
}

/// The loaded driver library, for tables of optional entry points that
/// features load on first use (virtual memory, host memory, ...).
#[allow(dead_code)] // used by the feature tables as they land
pub(super) fn library() -> Result<&'static Library> {
    Driver::get()?;
    match DRIVER.get() {
        Some(Ok((lib, _))) => Ok(lib),
        _ => Err(Error::NotInitialized("the CUDA driver is not loaded".into())),
    }
}

/// Looks up one entry point of the loaded driver as the function-pointer
/// type `T`; a missing symbol is NotInitialized naming it.
///
/// # Safety
/// `T` must be the exact `extern "C"` function-pointer type of `symbol`.
#[allow(dead_code)] // used by the feature tables as they land
pub(super) unsafe fn symbol<T: Copy>(name: &str) -> Result<T> {
    let lib = library()?;
    // SAFETY: the caller guarantees `T` matches the symbol's C signature.
    unsafe { sym(lib, "libcuda", name) }
}

/// Opens the first of `names` that loads and resolves every entry point.
/// The returned `Library` must outlive every use of the returned table.
pub(super) fn load(names: &[&'static str]) -> std::result::Result<(Library, Driver), Error> {
    let mut failures = Vec::new();
    for &name in names {
        // SAFETY: loading libcuda runs its initializers; the CUDA driver
        // library is designed to be dlopen'ed by any process and its
        // initializers have no preconditions on the caller.
        match unsafe { Library::new(name) } {
            Ok(lib) => {
                let driver = resolve(&lib, name)?;
                return Ok((lib, driver));
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    Err(Error::NotInitialized(format!("cannot load the CUDA driver library ({})", failures.join("; "))))
}

/// Looks up one symbol as a value of the function-pointer type `T`.
///
/// # Safety
/// `T` must be the exact `extern "C"` function-pointer type of `symbol`.
unsafe fn sym<T: Copy>(lib: &Library, library: &str, symbol: &str) -> Result<T> {
    // SAFETY: the caller guarantees `T` matches the symbol's C signature.
    match unsafe { lib.get::<T>(symbol) } {
        Ok(s) => Ok(*s),
        Err(e) => {
            Err(Error::NotInitialized(format!("{library} has no symbol {symbol} (driver too old?): {e}")))
        }
    }
}

fn resolve(lib: &Library, name: &'static str) -> Result<Driver> {
    macro_rules! load {
        ($sym:literal) => {
            // SAFETY: the field this initializes is declared with the
            // signature cuda.h gives for this symbol.
            unsafe { sym(lib, name, $sym)? }
        };
    }
    // Newest name first: CUDA 12.8 added cuEventElapsedTime_v2 (same signature).
    // SAFETY: both symbols have the signature (float*, CUevent, CUevent).
    let (event_elapsed_time_symbol, cuEventElapsedTime) =
        match unsafe { sym(lib, name, "cuEventElapsedTime_v2") } {
            Ok(f) => ("cuEventElapsedTime_v2", f),
            Err(_) => ("cuEventElapsedTime", load!("cuEventElapsedTime")),
        };
    // CUDA 12.9 added cuCtxSynchronize_v2(CUcontext); older drivers only have
    // the form that synchronizes the current context.
    // SAFETY: cuCtxSynchronize_v2 is CUresult(CUcontext).
    let cuCtxSynchronize = match unsafe { sym(lib, name, "cuCtxSynchronize_v2") } {
        Ok(f) => CtxSynchronize::V2(f),
        Err(_) => CtxSynchronize::V1(load!("cuCtxSynchronize")),
    };
    Ok(Driver {
        library_name: name,
        event_elapsed_time_symbol,
        cuGetErrorName: load!("cuGetErrorName"),
        cuGetErrorString: load!("cuGetErrorString"),
        cuInit: load!("cuInit"),
        cuDriverGetVersion: load!("cuDriverGetVersion"),
        cuDeviceGetCount: load!("cuDeviceGetCount"),
        cuDeviceGet: load!("cuDeviceGet"),
        cuDeviceGetName: load!("cuDeviceGetName"),
        cuDeviceTotalMem_v2: load!("cuDeviceTotalMem_v2"),
        cuDeviceGetAttribute: load!("cuDeviceGetAttribute"),
        cuDevicePrimaryCtxRetain: load!("cuDevicePrimaryCtxRetain"),
        cuDevicePrimaryCtxRelease_v2: load!("cuDevicePrimaryCtxRelease_v2"),
        cuCtxGetCurrent: load!("cuCtxGetCurrent"),
        cuCtxSetCurrent: load!("cuCtxSetCurrent"),
        cuCtxGetDevice: load!("cuCtxGetDevice"),
        cuCtxSynchronize,
        cuMemGetInfo_v2: load!("cuMemGetInfo_v2"),
        cuMemAlloc_v2: load!("cuMemAlloc_v2"),
        cuMemFree_v2: load!("cuMemFree_v2"),
        cuPointerGetAttribute: load!("cuPointerGetAttribute"),
        cuMemGetAllocationGranularity: load!("cuMemGetAllocationGranularity"),
        cuDeviceGetDefaultMemPool: load!("cuDeviceGetDefaultMemPool"),
        cuMemPoolCreate: load!("cuMemPoolCreate"),
        cuMemPoolDestroy: load!("cuMemPoolDestroy"),
        cuMemAllocFromPoolAsync: load!("cuMemAllocFromPoolAsync"),
        cuMemFreeAsync: load!("cuMemFreeAsync"),
        cuMemPoolSetAttribute: load!("cuMemPoolSetAttribute"),
        cuMemPoolGetAttribute: load!("cuMemPoolGetAttribute"),
        cuMemPoolTrimTo: load!("cuMemPoolTrimTo"),
        cuMemPoolSetAccess: load!("cuMemPoolSetAccess"),
        cuMemPoolGetAccess: load!("cuMemPoolGetAccess"),
        cuMemcpyHtoD_v2: load!("cuMemcpyHtoD_v2"),
        cuMemcpyDtoH_v2: load!("cuMemcpyDtoH_v2"),
        cuMemcpyDtoD_v2: load!("cuMemcpyDtoD_v2"),
        cuMemcpyHtoDAsync_v2: load!("cuMemcpyHtoDAsync_v2"),
        cuMemcpyDtoHAsync_v2: load!("cuMemcpyDtoHAsync_v2"),
        cuMemcpyDtoDAsync_v2: load!("cuMemcpyDtoDAsync_v2"),
        cuMemsetD8Async: load!("cuMemsetD8Async"),
        cuMemsetD16Async: load!("cuMemsetD16Async"),
        cuMemsetD32Async: load!("cuMemsetD32Async"),
        cuStreamCreate: load!("cuStreamCreate"),
        cuStreamDestroy_v2: load!("cuStreamDestroy_v2"),
        cuStreamSynchronize: load!("cuStreamSynchronize"),
        cuStreamQuery: load!("cuStreamQuery"),
        cuStreamGetCtx: load!("cuStreamGetCtx"),
        cuStreamGetFlags: load!("cuStreamGetFlags"),
        cuStreamWaitEvent: load!("cuStreamWaitEvent"),
        cuLaunchHostFunc: load!("cuLaunchHostFunc"),
        cuEventCreate: load!("cuEventCreate"),
        cuEventDestroy_v2: load!("cuEventDestroy_v2"),
        cuEventRecord: load!("cuEventRecord"),
        cuEventQuery: load!("cuEventQuery"),
        cuEventSynchronize: load!("cuEventSynchronize"),
        cuEventElapsedTime,
        cuModuleLoadData: load!("cuModuleLoadData"),
        cuModuleUnload: load!("cuModuleUnload"),
        cuModuleGetFunction: load!("cuModuleGetFunction"),
        cuLaunchKernel: load!("cuLaunchKernel"),
    })
}
