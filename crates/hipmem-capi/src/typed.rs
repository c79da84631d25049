//! The driver-style memory functions HIP programs use: typed memsets
//! (`hipMemsetD8/D16/D32(Async)`), typed copies (`hipMemcpyHtoD/DtoH/DtoD(Async)`),
//! `hipMemGetAddressRange` and `hipPointerGetAttribute`.

use std::ffi::{c_int, c_uchar, c_uint, c_ushort, c_void};

use hipmem_rs::{AccessFlags, DevicePtr, Error, FillValue, MemoryType, Result, Runtime};

use crate::explicit::{hipMemcpy, hipMemcpyAsync};
use crate::types::*;
use crate::{call, current_device, handles, rt};

fn dptr(p: hipDeviceptr_t) -> DevicePtr {
    DevicePtr(p as usize as u64)
}

fn memset_sync(dst: hipDeviceptr_t, value: FillValue, count: usize) -> hipError_t {
    call(|| rt()?.memset_elements(dptr(dst), value, count as u64))
}

fn memset_async(dst: hipDeviceptr_t, value: FillValue, count: usize, stream: hipStream_t) -> hipError_t {
    call(|| {
        if count == 0 {
            return Ok(());
        }
        let rt = rt()?;
        let stream = handles::stream(rt, stream)?;
        rt.memset_elements_async(dptr(dst), value, count as u64, stream.raw())
    })
}

/// `hipMemsetD8`: `count` bytes of `value`. Count 0 → Success; null, host
/// memory or a range past the allocation → InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD8(dest: hipDeviceptr_t, value: c_uchar, count: usize) -> hipError_t {
    memset_sync(dest, FillValue::U8(value), count)
}

/// `hipMemsetD8Async`: as `hipMemsetD8`, queued on `stream` (a bad stream
/// → InvalidHandle).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD8Async(
    dest: hipDeviceptr_t,
    value: c_uchar,
    count: usize,
    stream: hipStream_t,
) -> hipError_t {
    memset_async(dest, FillValue::U8(value), count, stream)
}

/// `hipMemsetD16`: `count` 16-bit elements; `dest` must be 2-byte aligned
/// (InvalidValue otherwise).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD16(dest: hipDeviceptr_t, value: c_ushort, count: usize) -> hipError_t {
    memset_sync(dest, FillValue::U16(value), count)
}

/// `hipMemsetD16Async`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD16Async(
    dest: hipDeviceptr_t,
    value: c_ushort,
    count: usize,
    stream: hipStream_t,
) -> hipError_t {
    memset_async(dest, FillValue::U16(value), count, stream)
}

/// `hipMemsetD32`: `count` 32-bit elements; `dest` must be 4-byte aligned.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD32(dest: hipDeviceptr_t, value: c_int, count: usize) -> hipError_t {
    memset_sync(dest, FillValue::U32(value as u32), count)
}

/// `hipMemsetD32Async`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemsetD32Async(
    dst: hipDeviceptr_t,
    value: c_int,
    count: usize,
    stream: hipStream_t,
) -> hipError_t {
    memset_async(dst, FillValue::U32(value as u32), count, stream)
}

/// `hipMemcpyHtoD`: `hipMemcpy(dst, src, sizeBytes, hipMemcpyHostToDevice)`,
/// with its rules.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyHtoD(
    dst: hipDeviceptr_t,
    src: *mut c_void,
    sizeBytes: usize,
) -> hipError_t {
    // SAFETY: the same contract as hipMemcpy's.
    unsafe { hipMemcpy(dst, src, sizeBytes, hipMemcpyHostToDevice) }
}

/// `hipMemcpyDtoH`: `hipMemcpy(dst, src, sizeBytes, hipMemcpyDeviceToHost)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoH(
    dst: *mut c_void,
    src: hipDeviceptr_t,
    sizeBytes: usize,
) -> hipError_t {
    // SAFETY: the same contract as hipMemcpy's.
    unsafe { hipMemcpy(dst, src, sizeBytes, hipMemcpyDeviceToHost) }
}

/// `hipMemcpyDtoD`: `hipMemcpy(dst, src, sizeBytes, hipMemcpyDeviceToDevice)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoD(
    dst: hipDeviceptr_t,
    src: hipDeviceptr_t,
    sizeBytes: usize,
) -> hipError_t {
    // SAFETY: the same contract as hipMemcpy's.
    unsafe { hipMemcpy(dst, src, sizeBytes, hipMemcpyDeviceToDevice) }
}

/// `hipMemcpyHtoDAsync`: `hipMemcpyAsync` with `hipMemcpyHostToDevice`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyHtoDAsync(
    dst: hipDeviceptr_t,
    src: *mut c_void,
    sizeBytes: usize,
    stream: hipStream_t,
) -> hipError_t {
    // SAFETY: the same contract as hipMemcpyAsync's.
    unsafe { hipMemcpyAsync(dst, src, sizeBytes, hipMemcpyHostToDevice, stream) }
}

/// `hipMemcpyDtoHAsync`: `hipMemcpyAsync` with `hipMemcpyDeviceToHost`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoHAsync(
    dst: *mut c_void,
    src: hipDeviceptr_t,
    sizeBytes: usize,
    stream: hipStream_t,
) -> hipError_t {
    // SAFETY: the same contract as hipMemcpyAsync's.
    unsafe { hipMemcpyAsync(dst, src, sizeBytes, hipMemcpyDeviceToHost, stream) }
}

/// `hipMemcpyDtoDAsync`: `hipMemcpyAsync` with `hipMemcpyDeviceToDevice`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyDtoDAsync(
    dst: hipDeviceptr_t,
    src: hipDeviceptr_t,
    sizeBytes: usize,
    stream: hipStream_t,
) -> hipError_t {
    // SAFETY: the same contract as hipMemcpyAsync's.
    unsafe { hipMemcpyAsync(dst, src, sizeBytes, hipMemcpyDeviceToDevice, stream) }
}

/// `hipMemGetAddressRange`: the base and size of the allocation holding
/// `dptr` (for pool memory, its block). Either output may be null (it is
/// then not written, CUDA's rule); an address in no allocation (null
/// included) → NotFound.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemGetAddressRange(
    pbase: *mut hipDeviceptr_t,
    psize: *mut usize,
    dptr: hipDeviceptr_t,
) -> hipError_t {
    call(|| {
        let (base, size) = rt()?.address_range(dptr as usize as u64)?;
        // SAFETY: each output is written only when non-null; HIP's contract
        // makes a non-null one writable.
        unsafe {
            if !pbase.is_null() {
                *pbase = base.0 as usize as hipDeviceptr_t;
            }
            if !psize.is_null() {
                *psize = size as usize;
            }
        }
        Ok(())
    })
}

/// What `hipPointerGetAttribute` writes: HIP's type for each attribute.
enum Value {
    U32(u32),
    I32(i32),
    Bool(bool),
    Ptr(u64),
    Size(u64),
}

/// The access of the current device to the memory at `ptr` (`hipMemAccessFlags`).
fn access_of(rt: &Runtime, device: usize, ptr: u64, attrs: &hipmem_rs::PointerAttributes) -> Result<u32> {
    let Some(a) = attrs.allocation else { return Ok(0) };
    Ok(match rt.pointer_access(device, &a, DevicePtr(ptr))? {
        AccessFlags::None => hipMemAccessFlagsProtNone,
        AccessFlags::Read => hipMemAccessFlagsProtRead,
        AccessFlags::ReadWrite => hipMemAccessFlagsProtReadWrite,
    } as u32)
}

/// `hipPointerGetAttribute`: one attribute of `ptr`, written to `data` as
/// HIP types it (MEMORY_TYPE `unsigned` hipMemoryType, DEVICE_POINTER and
/// HOST_POINTER and RANGE_START_ADDR `void*`, IS_MANAGED, SYNC_MEMOPS and
/// MAPPED `bool`, DEVICE_ORDINAL `int`, RANGE_SIZE `size_t`, ACCESS_FLAGS
/// `unsigned` hipMemAccessFlags of the current device, MEMPOOL_HANDLE
/// `hipMemPool_t`). Null `data` or `ptr` → InvalidValue; memory hipmem did
/// not allocate → InvalidValue (after writing HIP's default: 0, NULL,
/// false, or -2 for the ordinal); HOST_POINTER of memory the host cannot
/// address → InvalidValue; CONTEXT, P2P_TOKENS, BUFFER_ID,
/// IS_LEGACY_HIP_IPC_CAPABLE, ALLOWED_HANDLE_TYPES and
/// IS_GPU_DIRECT_RDMA_CAPABLE → NotSupported; another value → InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipPointerGetAttribute(
    data: *mut c_void,
    attribute: hipPointer_attribute,
    ptr: hipDeviceptr_t,
) -> hipError_t {
    call(|| {
        if data.is_null() || ptr.is_null() {
            return Err(Error::InvalidValue(format!(
                "hipPointerGetAttribute: null {}",
                if data.is_null() { "data" } else { "ptr" }
            )));
        }
        let rt = rt()?;
        let p = ptr as usize as u64;
        let attrs = rt.pointer_attributes(p)?;
        let known = attrs.memory_type != MemoryType::Unregistered;
        let unknown = |what: &str| {
            Error::InvalidValue(format!(
                "hipPointerGetAttribute({what}): {p:#x} is not memory hipmem allocated or registered"
            ))
        };
        let not_supported = |what: &str| {
            Error::NotSupported(format!(
                "hipPointerGetAttribute: {what} is not an attribute libhipmem reports"
            ))
        };
        // The value, and the error to return after writing it (HIP writes a
        // default for unknown memory and still fails).
        let (value, fail) = match attribute {
            HIP_POINTER_ATTRIBUTE_MEMORY_TYPE => {
                (Value::U32(attrs.memory_type.raw() as u32), (!known).then(|| unknown("MEMORY_TYPE")))
            }
            HIP_POINTER_ATTRIBUTE_DEVICE_POINTER => {
                let d = attrs.device_pointer.0;
                let fail = if !known {
                    Some(unknown("DEVICE_POINTER"))
                } else if d == 0 {
                    Some(Error::InvalidValue(format!(
                        "hipPointerGetAttribute(DEVICE_POINTER): {p:#x} is host memory not mapped into the devices"
                    )))
                } else {
                    None
                };
                (Value::Ptr(d), fail)
            }
            HIP_POINTER_ATTRIBUTE_HOST_POINTER => match (known, attrs.host_pointer) {
                (true, Some(h)) => (Value::Ptr(h), None),
                (true, None) => (
                    Value::Ptr(0),
                    Some(Error::InvalidValue(format!(
                        "hipPointerGetAttribute(HOST_POINTER): {p:#x} is device memory the host cannot address"
                    ))),
                ),
                (false, _) => (Value::Ptr(0), Some(unknown("HOST_POINTER"))),
            },
            HIP_POINTER_ATTRIBUTE_IS_MANAGED => {
                (Value::Bool(attrs.is_managed), (!known).then(|| unknown("IS_MANAGED")))
            }
            HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL => (
                Value::I32(if known { attrs.device } else { -2 }),
                (!known).then(|| unknown("DEVICE_ORDINAL")),
            ),
            HIP_POINTER_ATTRIBUTE_SYNC_MEMOPS => {
                (Value::Bool(false), (!known).then(|| unknown("SYNC_MEMOPS")))
            }
            HIP_POINTER_ATTRIBUTE_MAPPED => (Value::Bool(known), (!known).then(|| unknown("MAPPED"))),
            HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR | HIP_POINTER_ATTRIBUTE_RANGE_SIZE => {
                let what = if attribute == HIP_POINTER_ATTRIBUTE_RANGE_SIZE {
                    "RANGE_SIZE"
                } else {
                    "RANGE_START_ADDR"
                };
                let range = if known { rt.address_range(p).ok() } else { None };
                let (base, size) = range.map(|(b, s)| (b.0, s)).unwrap_or((0, 0));
                let v = if attribute == HIP_POINTER_ATTRIBUTE_RANGE_SIZE {
                    Value::Size(size)
                } else {
                    Value::Ptr(base)
                };
                (v, range.is_none().then(|| unknown(what)))
            }
            HIP_POINTER_ATTRIBUTE_ACCESS_FLAGS => {
                if known {
                    (Value::U32(access_of(rt, current_device(), p, &attrs)?), None)
                } else {
                    (Value::U32(0), Some(unknown("ACCESS_FLAGS")))
                }
            }
            HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE => {
                let handle = attrs.allocation.and_then(|a| pool_handle(rt, &a));
                match handle {
                    Some(h) => (Value::Ptr(h as usize as u64), None),
                    None => (
                        Value::Ptr(0),
                        Some(Error::InvalidValue(format!(
                            "hipPointerGetAttribute(MEMPOOL_HANDLE): {p:#x} is not memory of a pool libhipmem handed out"
                        ))),
                    ),
                }
            }
            HIP_POINTER_ATTRIBUTE_CONTEXT => return Err(not_supported("CONTEXT (HIP has no contexts here)")),
            HIP_POINTER_ATTRIBUTE_P2P_TOKENS => return Err(not_supported("P2P_TOKENS")),
            HIP_POINTER_ATTRIBUTE_BUFFER_ID => return Err(not_supported("BUFFER_ID")),
            HIP_POINTER_ATTRIBUTE_IS_LEGACY_HIP_IPC_CAPABLE => {
                return Err(not_supported("IS_LEGACY_HIP_IPC_CAPABLE"));
            }
            HIP_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES => return Err(not_supported("ALLOWED_HANDLE_TYPES")),
            HIP_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE => {
                return Err(not_supported("IS_GPU_DIRECT_RDMA_CAPABLE"));
            }
            other => {
                return Err(Error::InvalidValue(format!(
                    "hipPointerGetAttribute: {other} is not a hipPointer_attribute"
                )));
            }
        };
        // SAFETY: `data` is non-null and, by HIP's contract, points to
        // storage of the attribute's type, which is what is written.
        unsafe {
            match value {
                Value::U32(v) => data.cast::<c_uint>().write_unaligned(v),
                Value::I32(v) => data.cast::<c_int>().write_unaligned(v),
                Value::Bool(v) => data.cast::<bool>().write(v),
                Value::Ptr(v) => data.cast::<*mut c_void>().write_unaligned(v as usize as *mut c_void),
                Value::Size(v) => data.cast::<usize>().write_unaligned(v as usize),
            }
        }
        match fail {
            Some(e) => Err(e),
            None => Ok(()),
        }
    })
}

/// The `hipMemPool_t` of pool memory: the pool's handle if the C ABI
/// handed it out, or the device's default or current pool.
fn pool_handle(rt: &Runtime, a: &hipmem_rs::runtime::Allocation) -> Option<hipMemPool_t> {
    use hipmem_rs::runtime::MemoryKind;
    let id = match a.kind {
        MemoryKind::PoolSegment(id) | MemoryKind::DriverPool(id) => id,
        _ => return None,
    };
    let handle = id as usize as hipMemPool_t;
    if handles::pool(handle).is_ok() {
        return Some(handle);
    }
    [rt.default_mem_pool(a.device), rt.mem_pool(a.device)]
        .into_iter()
        .flatten()
        .find(|p| p.id() == id)
        .map(handles::add_pool)
}
