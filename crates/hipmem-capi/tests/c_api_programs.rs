//! The exports real HIP programs use beyond the memory functions (issue 15),
//! each with good input and every bad input `docs/hip-api-contract.md`
//! lists, checking the exact hipError_t: devices, typed memsets and copies,
//! address ranges and pointer attributes, pitched memory, stream and event
//! extras, peer access, and the kernel-side functions that only nvcc builds
//! have. Runs on the host backend with two emulated devices unless
//! HIPMEM_BACKEND / HIPMEM_HOST_DEVICES say otherwise; the two-device checks
//! skip, with a note, where there is one device.
#![allow(clippy::missing_safety_doc, non_snake_case)]

use std::ffi::{c_char, c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::Once;

use hipmem::*;

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        // SAFETY: set once, before any test touches the runtime (all go through init).
        unsafe {
            if std::env::var_os("HIPMEM_BACKEND").is_none() {
                std::env::set_var("HIPMEM_BACKEND", "host");
            }
            if std::env::var_os("HIPMEM_HOST_DEVICES").is_none() {
                std::env::set_var("HIPMEM_HOST_DEVICES", "2");
            }
        }
        // SAFETY: plain FFI call.
        assert_eq!(unsafe { hipInit(0) }, hipSuccess);
    });
}

fn device_count() -> c_int {
    let mut n = 0;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { hipGetDeviceCount(&mut n) }, hipSuccess);
    n
}

/// Whether the devices are the CPU emulation: the host backend, or the hip
/// backend over libhipmem running on it (the loopback of `.ci/run`).
fn is_host() -> bool {
    let set = |k: &str, v: &str| std::env::var(k).is_ok_and(|b| b == v);
    set("HIPMEM_BACKEND", "host")
        || (set("HIPMEM_BACKEND", "hip") && set("HIPMEM_HIP_LOOPBACK_BACKEND", "host"))
}

fn cstr(bytes: &[c_char]) -> String {
    let bytes: Vec<u8> = bytes.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

unsafe fn attr(a: hipDeviceAttribute_t, device: c_int) -> c_int {
    let mut v = -7;
    assert_eq!(unsafe { hipDeviceGetAttribute(&mut v, a, device) }, hipSuccess, "attribute {a}");
    v
}

// ---- devices ---------------------------------------------------------------------------

#[test]
fn device_properties_match_the_attributes() {
    init();
    let count = device_count();
    unsafe {
        let mut p: hipDeviceProp_t = std::mem::zeroed();
        assert_eq!(hipGetDevicePropertiesR0600(null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipGetDevicePropertiesR0600(&mut p, count), hipErrorInvalidDevice);
        assert_eq!(hipGetDevicePropertiesR0600(&mut p, -1), hipErrorInvalidDevice);
        for d in 0..count {
            assert_eq!(hipGetDevicePropertiesR0600(&mut p, d), hipSuccess);
            let name = cstr(&p.name);
            assert!(!name.is_empty());
            let mut buf = [0 as c_char; 256];
            assert_eq!(hipDeviceGetName(buf.as_mut_ptr(), 256, d), hipSuccess);
            assert_eq!(cstr(&buf), name);
            let mut total = 0usize;
            assert_eq!(hipDeviceTotalMem(&mut total, d), hipSuccess);
            assert_eq!(p.totalGlobalMem, total);
            assert!(total > 0);
            let (mut major, mut minor) = (-1, -1);
            assert_eq!(hipDeviceComputeCapability(&mut major, &mut minor, d), hipSuccess);
            assert_eq!((p.major, p.minor), (major, minor));
            assert_eq!(p.major, attr(hipDeviceAttributeComputeCapabilityMajor, d));
            assert_eq!(p.minor, attr(hipDeviceAttributeComputeCapabilityMinor, d));
            assert_eq!(p.multiProcessorCount, attr(hipDeviceAttributeMultiprocessorCount, d));
            assert!(p.multiProcessorCount > 0);
            assert_eq!(p.warpSize, attr(hipDeviceAttributeWarpSize, d));
            assert!(p.warpSize == 32 || p.warpSize == 64);
            assert_eq!(p.maxThreadsPerBlock, attr(hipDeviceAttributeMaxThreadsPerBlock, d));
            assert_eq!(p.maxThreadsDim[0], attr(hipDeviceAttributeMaxBlockDimX, d));
            assert_eq!(p.maxThreadsDim[2], attr(hipDeviceAttributeMaxBlockDimZ, d));
            assert_eq!(p.maxGridSize[1], attr(hipDeviceAttributeMaxGridDimY, d));
            assert_eq!(p.sharedMemPerBlock as c_int, attr(hipDeviceAttributeMaxSharedMemoryPerBlock, d));
            assert_eq!(p.memoryPoolsSupported, 1);
            assert_eq!(p.memoryPoolsSupported, attr(hipDeviceAttributeMemoryPoolsSupported, d));
            assert_eq!(p.managedMemory, attr(hipDeviceAttributeManagedMemory, d));
            assert_eq!(p.canMapHostMemory, attr(hipDeviceAttributeCanMapHostMemory, d));
            assert_eq!(p.unifiedAddressing, 1);
            assert_eq!(p.l2CacheSize, attr(hipDeviceAttributeL2CacheSize, d));
            assert_eq!(p.clockRate, attr(hipDeviceAttributeClockRate, d));
            assert_eq!(p.streamPrioritiesSupported, attr(hipDeviceAttributeStreamPrioritiesSupported, d));
            assert_eq!(p.hostRegisterSupported, 1);
            assert_eq!(
                p.totalGlobalMem.min(c_int::MAX as usize) as c_int,
                attr(hipDeviceAttributeTotalGlobalMem, d)
            );
            assert!(!cstr(&p.gcnArchName).is_empty());
            if is_host() {
                assert_eq!((p.major, p.minor, p.integrated, p.streamPrioritiesSupported), (0, 0, 1, 0));
                assert_eq!(p.maxTexture1D, 0, "the emulation has no textures");
            } else {
                assert!(p.major >= 3, "a CUDA device reports its compute capability");
                assert!(p.memoryBusWidth > 0 && p.pciBusID >= 0);
            }
        }
    }
}

#[test]
fn device_attribute_answers_every_hip_value_or_says_invalid_value() {
    init();
    unsafe {
        let mut v = 0;
        // Every value of HIP 6's enum is answered or is InvalidValue: nothing else.
        for a in (0..=91).chain(10000..=10017) {
            let r = hipDeviceGetAttribute(&mut v, a, 0);
            assert!(r == hipSuccess || r == hipErrorInvalidValue, "attribute {a}: {r}");
        }
        // Multi-dimensional limits, AMD registers and Windows ids are not scalars hipmem reports.
        for a in [
            hipDeviceAttributeMaxThreadsDim,
            hipDeviceAttributeMaxSurface2D,
            hipDeviceAttributeHdpMemFlushCntl,
            hipDeviceAttributeLuid,
            hipDeviceAttributeUnused1,
        ] {
            assert_eq!(hipDeviceGetAttribute(&mut v, a, 0), hipErrorInvalidValue, "attribute {a}");
        }
        assert_eq!(hipDeviceGetAttribute(&mut v, 92, 0), hipErrorInvalidValue, "not a HIP value");
        assert_eq!(hipDeviceGetAttribute(&mut v, -1, 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceGetAttribute(null_mut(), hipDeviceAttributeWarpSize, 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceGetAttribute(&mut v, hipDeviceAttributeWarpSize, -1), hipErrorInvalidDevice);
        assert_eq!(
            hipDeviceGetAttribute(&mut v, hipDeviceAttributeWarpSize, device_count()),
            hipErrorInvalidDevice
        );
        // What every backend answers.
        for a in [
            hipDeviceAttributeMaxThreadsPerBlock,
            hipDeviceAttributeMaxPitch,
            hipDeviceAttributeTextureAlignment,
            hipDeviceAttributeConcurrentKernels,
            hipDeviceAttributeAsyncEngineCount,
            hipDeviceAttributeVirtualMemoryManagementSupported,
            hipDeviceAttributeMemoryPoolSupportedHandleTypes,
            hipDeviceAttributeClockInstructionRate,
            hipDeviceAttributeMaxSharedMemoryPerMultiprocessor,
            hipDeviceAttributePhysicalMultiProcessorCount,
        ] {
            assert!(attr(a, 0) >= 0, "attribute {a}");
        }
        assert_eq!(attr(hipDeviceAttributeMaxThreadsPerBlock, 0), 1024);
        assert_eq!(attr(hipDeviceAttributeCooperativeMultiDeviceUnmatchedFunc, 0), 0);
        assert_eq!(attr(hipDeviceAttributeImageSupport, 0), 0);
    }
}

#[test]
fn device_name_get_total_mem_and_compute_capability() {
    init();
    let count = device_count();
    unsafe {
        let mut buf = [0x55 as c_char; 64];
        assert_eq!(
            hipDeviceGetName(null_mut(), 64, count),
            hipErrorInvalidDevice,
            "the device is checked first"
        );
        assert_eq!(hipDeviceGetName(buf.as_mut_ptr(), 64, -1), hipErrorInvalidDevice);
        assert_eq!(hipDeviceGetName(null_mut(), 64, 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceGetName(buf.as_mut_ptr(), 0, 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceGetName(buf.as_mut_ptr(), -3, 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceGetName(buf.as_mut_ptr(), 64, 0), hipSuccess);
        let full = cstr(&buf);
        let mut short = [0x55 as c_char; 8];
        assert_eq!(hipDeviceGetName(short.as_mut_ptr(), 5, 0), hipSuccess);
        assert_eq!(cstr(&short), full.chars().take(4).collect::<String>(), "truncated to len - 1");
        assert_eq!(short[4], 0, "NUL-terminated");
        assert_eq!(short[5], 0x55, "nothing written past len");
        let mut one = [0x55 as c_char; 2];
        assert_eq!(hipDeviceGetName(one.as_mut_ptr(), 1, 0), hipSuccess);
        assert_eq!(one[0], 0);

        let mut d: hipDevice_t = -1;
        assert_eq!(hipDeviceGet(&mut d, 0), hipSuccess);
        assert_eq!(d, 0);
        assert_eq!(hipDeviceGet(null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceGet(&mut d, count), hipErrorInvalidDevice);
        assert_eq!(hipDeviceGet(&mut d, -1), hipErrorInvalidDevice);
        let mut total = 0usize;
        assert_eq!(hipDeviceTotalMem(null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceTotalMem(&mut total, count), hipErrorInvalidDevice);
        let (mut major, mut minor) = (0, 0);
        assert_eq!(hipDeviceComputeCapability(null_mut(), &mut minor, 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceComputeCapability(&mut major, null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceComputeCapability(&mut major, &mut minor, count), hipErrorInvalidDevice);
    }
}

#[test]
fn driver_and_runtime_versions() {
    init();
    unsafe {
        let mut v = 0;
        assert_eq!(hipDriverGetVersion(null_mut()), hipErrorInvalidValue);
        assert_eq!(hipDriverGetVersion(&mut v), hipSuccess);
        assert!(v > 0);
        if is_host() {
            assert_eq!(v, 60_200_000);
        } else {
            assert!(v >= 12_000, "a CUDA driver version: {v}");
        }
        assert_eq!(hipRuntimeGetVersion(null_mut()), hipErrorInvalidValue);
        assert_eq!(hipRuntimeGetVersion(&mut v), hipSuccess);
        assert_eq!(v, 60_200_000);
    }
}

#[test]
fn stream_priority_range() {
    init();
    unsafe {
        assert_eq!(hipDeviceGetStreamPriorityRange(null_mut(), null_mut()), hipSuccess, "both may be null");
        let (mut least, mut greatest) = (99, 99);
        assert_eq!(hipDeviceGetStreamPriorityRange(&mut least, null_mut()), hipSuccess);
        assert_eq!(least, 0);
        assert_eq!(hipDeviceGetStreamPriorityRange(&mut least, &mut greatest), hipSuccess);
        assert!(greatest <= least);
        if is_host() {
            assert_eq!((least, greatest), (0, 0), "the emulation has no priorities");
        }
        assert_eq!(attr(hipDeviceAttributeStreamPrioritiesSupported, 0), c_int::from(greatest < least));
    }
}

// ---- typed memsets and copies, address ranges, pointer attributes ---------------------------

unsafe fn device_alloc(bytes: usize) -> *mut c_void {
    let mut p: *mut c_void = null_mut();
    assert_eq!(unsafe { hipMalloc(&mut p, bytes) }, hipSuccess);
    p
}

unsafe fn read_back(p: *const c_void, bytes: usize) -> Vec<u8> {
    let mut v = vec![0u8; bytes];
    assert_eq!(unsafe { hipMemcpy(v.as_mut_ptr().cast(), p, bytes, hipMemcpyDeviceToHost) }, hipSuccess);
    v
}

fn at(p: *mut c_void, offset: usize) -> *mut c_void {
    p.cast::<u8>().wrapping_add(offset).cast()
}

#[test]
fn typed_memsets() {
    init();
    unsafe {
        let p = device_alloc(4096);
        let local = [0u8; 64];
        let host = local.as_ptr() as *mut c_void;
        assert_eq!(hipMemsetD8(p, 0xab, 4096), hipSuccess);
        assert!(read_back(p, 4096).iter().all(|&b| b == 0xab));
        assert_eq!(hipMemsetD16(p, 0x1234, 2048), hipSuccess);
        let v = read_back(p, 4096);
        assert!(v.chunks(2).all(|c| u16::from_le_bytes([c[0], c[1]]) == 0x1234));
        assert_eq!(hipMemsetD32(p, -2, 1024), hipSuccess);
        let v = read_back(p, 4096);
        assert!(v.chunks(4).all(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) == -2));
        // A part in the middle.
        assert_eq!(hipMemsetD32(at(p, 8), 7, 2), hipSuccess);
        let v = read_back(p, 32);
        assert_eq!(i32::from_le_bytes(v[8..12].try_into().unwrap()), 7);
        assert_eq!(i32::from_le_bytes(v[16..20].try_into().unwrap()), -2);
        assert_eq!(hipMemsetD8(at(p, 1), 1, 3), hipSuccess, "bytes need no alignment");

        // count 0 first; null, host memory, past the end, misaligned.
        for r in [
            hipMemsetD8(null_mut(), 0, 0),
            hipMemsetD16(null_mut(), 0, 0),
            hipMemsetD32(null_mut(), 0, 0),
            hipMemsetD8Async(null_mut(), 0, 0, null_mut()),
            hipMemsetD16Async(null_mut(), 0, 0, null_mut()),
            hipMemsetD32Async(null_mut(), 0, 0, null_mut()),
        ] {
            assert_eq!(r, hipSuccess);
        }
        for r in [
            hipMemsetD8(null_mut(), 0, 1),
            hipMemsetD16(null_mut(), 0, 1),
            hipMemsetD32(null_mut(), 0, 1),
            hipMemsetD8(host, 0, 4),
            hipMemsetD32(host, 0, 4),
            hipMemsetD8(p, 0, 4097),
            hipMemsetD16(p, 0, 2049),
            hipMemsetD32(p, 0, 1025),
            hipMemsetD32(at(p, 4092), 0, 2),
            hipMemsetD16(at(p, 1), 0, 1),
            hipMemsetD32(at(p, 2), 0, 1),
            hipMemsetD8Async(p, 0, 4097, null_mut()),
            hipMemsetD16Async(at(p, 1), 0, 1, null_mut()),
            hipMemsetD32Async(host, 0, 1, null_mut()),
        ] {
            assert_eq!(r, hipErrorInvalidValue);
        }

        // Async: in stream order; a destroyed stream is InvalidHandle.
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        assert_eq!(hipMemsetD8Async(p, 1, 4096, s), hipSuccess);
        assert_eq!(hipMemsetD16Async(p, 0x0202, 1024, s), hipSuccess);
        assert_eq!(hipMemsetD32Async(p, 0x03030303, 256, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        let v = read_back(p, 4096);
        assert!(v[..1024].iter().all(|&b| b == 3) && v[1024..2048].iter().all(|&b| b == 2));
        assert!(v[2048..].iter().all(|&b| b == 1));
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipMemsetD8Async(p, 1, 16, s), hipErrorInvalidHandle);
        assert_eq!(hipMemsetD32Async(p, 1, 4, s), hipErrorInvalidHandle);
        assert_eq!(hipFree(p), hipSuccess);
    }
}

#[test]
fn typed_copies() {
    init();
    unsafe {
        let (a, b) = (device_alloc(1024), device_alloc(1024));
        let src: Vec<u8> = (0..1024u32).map(|i| (i * 7) as u8).collect();
        let mut back = vec![0u8; 1024];
        assert_eq!(hipMemcpyHtoD(a, src.as_ptr() as *mut c_void, 1024), hipSuccess);
        assert_eq!(hipMemcpyDtoD(b, a, 1024), hipSuccess);
        assert_eq!(hipMemcpyDtoH(back.as_mut_ptr().cast(), b, 1024), hipSuccess);
        assert_eq!(back, src);
        // Size 0 first; nulls; a direction the pointers contradict; past the end.
        assert_eq!(hipMemcpyHtoD(null_mut(), null_mut(), 0), hipSuccess);
        assert_eq!(hipMemcpyDtoH(null_mut(), null_mut(), 0), hipSuccess);
        assert_eq!(hipMemcpyDtoD(null_mut(), null_mut(), 0), hipSuccess);
        assert_eq!(hipMemcpyHtoD(null_mut(), src.as_ptr() as *mut c_void, 8), hipErrorInvalidValue);
        assert_eq!(hipMemcpyDtoH(back.as_mut_ptr().cast(), null_mut(), 8), hipErrorInvalidValue);
        assert_eq!(hipMemcpyHtoD(back.as_mut_ptr().cast(), a, 8), hipErrorInvalidValue, "dst is host memory");
        assert_eq!(hipMemcpyDtoH(a, b, 8), hipErrorInvalidValue, "dst is device memory");
        assert_eq!(
            hipMemcpyDtoD(a, src.as_ptr() as *mut c_void, 8),
            hipErrorInvalidValue,
            "src is host memory"
        );
        assert_eq!(hipMemcpyHtoD(a, src.as_ptr() as *mut c_void, 1025), hipErrorInvalidValue);
        assert_eq!(hipMemcpyDtoD(at(b, 1), a, 1024), hipErrorInvalidValue);

        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        let rev: Vec<u8> = src.iter().rev().copied().collect();
        assert_eq!(hipMemcpyHtoDAsync(a, rev.as_ptr() as *mut c_void, 1024, s), hipSuccess);
        assert_eq!(hipMemcpyDtoDAsync(b, a, 1024, s), hipSuccess);
        assert_eq!(hipMemcpyDtoHAsync(back.as_mut_ptr().cast(), b, 1024, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(back, rev);
        assert_eq!(hipMemcpyDtoDAsync(b, a, 0, s), hipSuccess);
        assert_eq!(hipMemcpyDtoDAsync(b, null_mut(), 8, s), hipErrorInvalidValue);
        assert_eq!(hipMemcpyDtoHAsync(back.as_mut_ptr().cast(), a, 2048, s), hipErrorInvalidValue);
        assert_eq!(hipMemcpyHtoDAsync(back.as_mut_ptr().cast(), a, 8, s), hipErrorInvalidValue);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipMemcpyDtoDAsync(b, a, 8, s), hipErrorInvalidHandle);
        assert_eq!(hipFree(a), hipSuccess);
        assert_eq!(hipFree(b), hipSuccess);
    }
}

#[test]
fn address_ranges() {
    init();
    unsafe {
        let p = device_alloc(4096);
        let (mut base, mut size): (hipDeviceptr_t, usize) = (null_mut(), 0);
        assert_eq!(hipMemGetAddressRange(&mut base, &mut size, at(p, 100)), hipSuccess);
        assert_eq!((base, size), (p, 4096));
        assert_eq!(
            hipMemGetAddressRange(null_mut(), &mut size, at(p, 4095)),
            hipSuccess,
            "pbase may be null"
        );
        assert_eq!(hipMemGetAddressRange(&mut base, null_mut(), p), hipSuccess, "psize may be null");
        let local = 1u64;
        assert_eq!(
            hipMemGetAddressRange(&mut base, &mut size, (&raw const local) as *mut c_void),
            hipErrorNotFound
        );
        assert_eq!(hipMemGetAddressRange(&mut base, &mut size, null_mut()), hipErrorNotFound);
        assert_eq!(hipMemGetAddressRange(&mut base, &mut size, at(p, 4096 + 4096 * 1024)), hipErrorNotFound);

        // Pool memory: its block.
        let mut q: *mut c_void = null_mut();
        assert_eq!(hipMallocAsync(&mut q, 1000, null_mut()), hipSuccess);
        assert_eq!(hipMemGetAddressRange(&mut base, &mut size, at(q, 10)), hipSuccess);
        assert_eq!(base, q);
        assert!(size >= 1000);
        assert_eq!(hipFreeAsync(q, null_mut()), hipSuccess);
        assert_eq!(hipStreamSynchronize(null_mut()), hipSuccess);

        // Page-locked memory.
        let mut h: *mut c_void = null_mut();
        assert_eq!(hipHostMalloc(&mut h, 512, 0), hipSuccess);
        assert_eq!(hipMemGetAddressRange(&mut base, &mut size, at(h, 511)), hipSuccess);
        assert_eq!((base, size), (h, 512));
        assert_eq!(hipHostFree(h), hipSuccess);
        assert_eq!(hipFree(p), hipSuccess);
        assert_eq!(hipMemGetAddressRange(&mut base, &mut size, p), hipErrorNotFound, "freed");
    }
}

unsafe fn get_u32(a: hipPointer_attribute, p: *mut c_void) -> (hipError_t, u32) {
    let mut v: u32 = 0xdead;
    let r = unsafe { hipPointerGetAttribute((&raw mut v).cast(), a, p) };
    (r, v)
}

unsafe fn get_ptr(a: hipPointer_attribute, p: *mut c_void) -> (hipError_t, *mut c_void) {
    let mut v: *mut c_void = 0xdead as *mut c_void;
    let r = unsafe { hipPointerGetAttribute((&raw mut v).cast(), a, p) };
    (r, v)
}

unsafe fn get_bool(a: hipPointer_attribute, p: *mut c_void) -> (hipError_t, bool) {
    let mut v = false;
    let r = unsafe { hipPointerGetAttribute((&raw mut v).cast(), a, p) };
    (r, v)
}

#[test]
fn pointer_attribute() {
    init();
    unsafe {
        let p = device_alloc(4096);
        let mut h: *mut c_void = null_mut();
        assert_eq!(hipHostMalloc(&mut h, 256, 0x2), hipSuccess);
        let mut m: *mut c_void = null_mut();
        assert_eq!(hipMallocManaged(&mut m, 4096, hipMemAttachGlobal), hipSuccess);
        let mut local = 0u64;
        let stack = (&raw mut local).cast::<c_void>();

        let mut v = 0u32;
        assert_eq!(
            hipPointerGetAttribute(null_mut(), HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, p),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipPointerGetAttribute((&raw mut v).cast(), HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, null_mut()),
            hipErrorInvalidValue
        );
        assert_eq!(
            get_u32(HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, at(p, 8)),
            (hipSuccess, hipMemoryTypeDevice as u32)
        );
        assert_eq!(get_u32(HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, h), (hipSuccess, hipMemoryTypeHost as u32));
        assert_eq!(get_u32(HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, m), (hipSuccess, hipMemoryTypeManaged as u32));
        assert_eq!(get_u32(HIP_POINTER_ATTRIBUTE_MEMORY_TYPE, stack), (hipErrorInvalidValue, 0));

        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_DEVICE_POINTER, at(p, 8)), (hipSuccess, at(p, 8)));
        let (r, d) = get_ptr(HIP_POINTER_ATTRIBUTE_DEVICE_POINTER, h);
        assert_eq!(r, hipSuccess);
        assert!(!d.is_null(), "mapped page-locked memory has a device pointer");
        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_DEVICE_POINTER, stack), (hipErrorInvalidValue, null_mut()));
        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_HOST_POINTER, h), (hipSuccess, h));
        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_HOST_POINTER, m), (hipSuccess, m));
        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_HOST_POINTER, p), (hipErrorInvalidValue, null_mut()));

        assert_eq!(get_bool(HIP_POINTER_ATTRIBUTE_IS_MANAGED, m), (hipSuccess, true));
        assert_eq!(get_bool(HIP_POINTER_ATTRIBUTE_IS_MANAGED, p), (hipSuccess, false));
        assert_eq!(get_bool(HIP_POINTER_ATTRIBUTE_IS_MANAGED, stack).0, hipErrorInvalidValue);
        assert_eq!(get_bool(HIP_POINTER_ATTRIBUTE_MAPPED, p), (hipSuccess, true));
        assert_eq!(get_bool(HIP_POINTER_ATTRIBUTE_MAPPED, stack), (hipErrorInvalidValue, false));
        assert_eq!(get_bool(HIP_POINTER_ATTRIBUTE_SYNC_MEMOPS, p), (hipSuccess, false));

        let mut ordinal: c_int = 5;
        assert_eq!(
            hipPointerGetAttribute((&raw mut ordinal).cast(), HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p),
            hipSuccess
        );
        assert_eq!(ordinal, 0);
        assert_eq!(
            hipPointerGetAttribute((&raw mut ordinal).cast(), HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, stack),
            hipErrorInvalidValue
        );
        assert_eq!(ordinal, -2);

        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR, at(p, 100)), (hipSuccess, p));
        let mut size = 0usize;
        assert_eq!(
            hipPointerGetAttribute((&raw mut size).cast(), HIP_POINTER_ATTRIBUTE_RANGE_SIZE, at(p, 100)),
            hipSuccess
        );
        assert_eq!(size, 4096);
        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_RANGE_START_ADDR, stack).0, hipErrorInvalidValue);
        assert_eq!(
            get_u32(HIP_POINTER_ATTRIBUTE_ACCESS_FLAGS, p),
            (hipSuccess, hipMemAccessFlagsProtReadWrite as u32)
        );

        // The pool of pool memory.
        let mut q: *mut c_void = null_mut();
        assert_eq!(hipMallocAsync(&mut q, 256, null_mut()), hipSuccess);
        let mut pool: hipMemPool_t = null_mut();
        assert_eq!(hipDeviceGetMemPool(&mut pool, 0), hipSuccess);
        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, q), (hipSuccess, pool));
        assert_eq!(get_ptr(HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p).0, hipErrorInvalidValue);
        assert_eq!(hipFreeAsync(q, null_mut()), hipSuccess);

        for a in [
            HIP_POINTER_ATTRIBUTE_CONTEXT,
            HIP_POINTER_ATTRIBUTE_P2P_TOKENS,
            HIP_POINTER_ATTRIBUTE_BUFFER_ID,
            HIP_POINTER_ATTRIBUTE_IS_LEGACY_HIP_IPC_CAPABLE,
            HIP_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES,
            HIP_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE,
        ] {
            assert_eq!(get_u32(a, p).0, hipErrorNotSupported, "attribute {a}");
        }
        assert_eq!(get_u32(0, p).0, hipErrorInvalidValue);
        assert_eq!(get_u32(99, p).0, hipErrorInvalidValue);

        assert_eq!(hipDeviceSynchronize(), hipSuccess);
        assert_eq!(hipFree(m), hipSuccess);
        assert_eq!(hipHostFree(h), hipSuccess);
        assert_eq!(hipFree(p), hipSuccess);
    }
}

// ---- pitched memory ----------------------------------------------------------------------

#[test]
fn malloc_pitch() {
    init();
    unsafe {
        let mut p: *mut c_void = null_mut();
        let mut pitch = 7usize;
        assert_eq!(hipMallocPitch(null_mut(), &mut pitch, 100, 10), hipErrorInvalidValue);
        assert_eq!(hipMallocPitch(&mut p, null_mut(), 100, 10), hipErrorInvalidValue);
        assert_eq!(hipMallocPitch(&mut p, &mut pitch, 0, 10), hipSuccess);
        assert!(p.is_null());
        assert_eq!(pitch, 7, "untouched for an empty allocation");
        assert_eq!(hipMallocPitch(&mut p, &mut pitch, 100, 0), hipSuccess);
        assert!(p.is_null());
        assert_eq!(hipMallocPitch(&mut p, &mut pitch, usize::MAX - 10, 1), hipErrorInvalidValue);
        assert_eq!(hipMallocPitch(&mut p, &mut pitch, 1 << 40, 1 << 30), hipErrorInvalidValue);
        assert_eq!(hipMallocPitch(&mut p, &mut pitch, 1 << 50, 1), hipErrorOutOfMemory);
        assert_eq!(hipMallocPitch(&mut p, &mut pitch, 100, 10), hipSuccess);
        assert!(!p.is_null() && pitch >= 100 && pitch % 32 == 0, "pitch {pitch}");
        let (mut base, mut size): (hipDeviceptr_t, usize) = (null_mut(), 0);
        assert_eq!(hipMemGetAddressRange(&mut base, &mut size, p), hipSuccess);
        assert_eq!((base, size), (p, pitch * 10));
        assert_eq!(hipFree(p), hipSuccess);
    }
}

#[test]
fn memcpy_2d() {
    init();
    unsafe {
        let (w, h) = (100usize, 10usize);
        let mut d: *mut c_void = null_mut();
        let mut dp = 0usize;
        assert_eq!(hipMallocPitch(&mut d, &mut dp, w, h), hipSuccess);
        let src: Vec<u8> = (0..w * h).map(|i| (i % 251) as u8).collect();
        assert_eq!(hipMemcpy2D(d, dp, src.as_ptr().cast(), w, w, h, hipMemcpyHostToDevice), hipSuccess);
        // Back with a wider pitch: the padding bytes stay as they were.
        let hp = 128usize;
        let mut back = vec![0xeeu8; hp * h];
        assert_eq!(hipMemcpy2D(back.as_mut_ptr().cast(), hp, d, dp, w, h, hipMemcpyDefault), hipSuccess);
        for r in 0..h {
            assert_eq!(&back[r * hp..r * hp + w], &src[r * w..(r + 1) * w], "row {r}");
            assert!(back[r * hp + w..(r + 1) * hp].iter().all(|&b| b == 0xee), "padding of row {r}");
        }
        // Device to device, then a column slice (width < pitch on both sides).
        let mut e: *mut c_void = null_mut();
        let mut ep = 0usize;
        assert_eq!(hipMallocPitch(&mut e, &mut ep, w, h), hipSuccess);
        assert_eq!(hipMemset2D(e, ep, 0, w, h), hipSuccess);
        assert_eq!(hipMemcpy2D(e, ep, at(d, 10), dp, 20, h, hipMemcpyDeviceToDevice), hipSuccess);
        let mut col = vec![0u8; w * h];
        assert_eq!(hipMemcpy2D(col.as_mut_ptr().cast(), w, e, ep, w, h, hipMemcpyDeviceToHost), hipSuccess);
        for r in 0..h {
            assert_eq!(&col[r * w..r * w + 20], &src[r * w + 10..r * w + 30], "row {r}");
            assert!(col[r * w + 20..(r + 1) * w].iter().all(|&b| b == 0));
        }
        // Host to host.
        let mut hh = vec![0u8; w * h];
        assert_eq!(
            hipMemcpy2D(hh.as_mut_ptr().cast(), w, src.as_ptr().cast(), w, w, h, hipMemcpyHostToHost),
            hipSuccess
        );
        assert_eq!(hh, src);

        // Width or height 0 first; then kind, pitch, null, overflow, mismatch, range.
        assert_eq!(hipMemcpy2D(null_mut(), 0, null(), 0, 0, 5, 77), hipSuccess);
        assert_eq!(hipMemcpy2D(null_mut(), 0, null(), 0, 5, 0, 77), hipSuccess);
        assert_eq!(hipMemcpy2D(d, dp, src.as_ptr().cast(), w, w, h, 9), hipErrorInvalidMemcpyDirection);
        assert_eq!(
            hipMemcpy2D(d, w - 1, src.as_ptr().cast(), w, w, h, hipMemcpyHostToDevice),
            hipErrorInvalidPitchValue
        );
        assert_eq!(
            hipMemcpy2D(d, dp, src.as_ptr().cast(), w - 1, w, h, hipMemcpyHostToDevice),
            hipErrorInvalidPitchValue
        );
        assert_eq!(
            hipMemcpy2D(null_mut(), dp, src.as_ptr().cast(), w, w, h, hipMemcpyHostToDevice),
            hipErrorInvalidValue
        );
        assert_eq!(hipMemcpy2D(d, dp, null(), w, w, h, hipMemcpyHostToDevice), hipErrorInvalidValue);
        assert_eq!(
            hipMemcpy2D(d, dp, src.as_ptr().cast(), usize::MAX / 2, w, 4, hipMemcpyHostToDevice),
            hipErrorInvalidValue,
            "the source extent overflows"
        );
        assert_eq!(
            hipMemcpy2D(d, dp, src.as_ptr().cast(), w, w, h + 1, hipMemcpyHostToDevice),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemcpy2D(d, dp, src.as_ptr().cast(), w, w, h, hipMemcpyDeviceToHost),
            hipErrorInvalidValue
        );

        // Async: page-locked memory on a stream; a destroyed stream.
        let mut pinned: *mut c_void = null_mut();
        assert_eq!(hipHostMalloc(&mut pinned, w * h, 0), hipSuccess);
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        assert_eq!(hipMemcpy2DAsync(pinned, w, d, dp, w, h, hipMemcpyDeviceToHost, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(std::slice::from_raw_parts(pinned.cast::<u8>(), w * h), &src[..]);
        assert_eq!(hipMemcpy2DAsync(e, ep, d, dp, w, h, hipMemcpyDeviceToDevice, s), hipSuccess);
        assert_eq!(
            hipMemcpy2DAsync(back.as_mut_ptr().cast(), hp, e, ep, w, h, hipMemcpyDeviceToHost, s),
            hipSuccess
        );
        assert_eq!(&back[..w], &src[..w], "pageable memory: done before returning");
        assert_eq!(hipMemcpy2DAsync(e, ep, d, dp, 0, h, 99, s), hipSuccess);
        assert_eq!(
            hipMemcpy2DAsync(e, w - 1, d, dp, w, h, hipMemcpyDeviceToDevice, s),
            hipErrorInvalidPitchValue
        );
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipMemcpy2DAsync(e, ep, d, dp, w, h, hipMemcpyDeviceToDevice, s), hipErrorInvalidHandle);
        assert_eq!(hipHostFree(pinned), hipSuccess);
        assert_eq!(hipFree(e), hipSuccess);
        assert_eq!(hipFree(d), hipSuccess);
    }
}

#[test]
fn memset_2d() {
    init();
    unsafe {
        let (w, h) = (64usize, 8usize);
        let mut d: *mut c_void = null_mut();
        let mut dp = 0usize;
        assert_eq!(hipMallocPitch(&mut d, &mut dp, w, h), hipSuccess);
        assert_eq!(hipMemset(d, 1, dp * h), hipSuccess);
        assert_eq!(hipMemset2D(d, dp, 0x1ab, 16, h), hipSuccess, "the low byte");
        let v = read_back(d, dp * h);
        for r in 0..h {
            assert!(v[r * dp..r * dp + 16].iter().all(|&b| b == 0xab), "row {r}");
            assert!(v[r * dp + 16..(r + 1) * dp].iter().all(|&b| b == 1), "rest of row {r}");
        }
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        assert_eq!(hipMemset2DAsync(at(d, 16), dp, 2, 16, h, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        let v = read_back(d, dp * h);
        assert!((0..h).all(|r| v[r * dp + 16..r * dp + 32].iter().all(|&b| b == 2)));

        let local = [0u8; 64];
        assert_eq!(hipMemset2D(null_mut(), dp, 0, 0, h), hipSuccess);
        assert_eq!(hipMemset2D(null_mut(), dp, 0, w, h), hipErrorInvalidValue);
        assert_eq!(hipMemset2D(d, w - 1, 0, w, h), hipErrorInvalidValue, "pitch below width");
        assert_eq!(hipMemset2D(d, dp, 0, w, h + 1), hipErrorInvalidValue, "past the end");
        assert_eq!(hipMemset2D(d, usize::MAX / 2, 0, w, 4), hipErrorInvalidValue, "overflow");
        assert_eq!(hipMemset2D(local.as_ptr() as *mut c_void, 64, 0, 64, 1), hipErrorInvalidValue);
        assert_eq!(hipMemset2DAsync(d, dp, 0, w, 0, s), hipSuccess);
        assert_eq!(hipMemset2DAsync(d, dp, 0, w, h + 1, s), hipErrorInvalidValue);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipMemset2DAsync(d, dp, 0, w, h, s), hipErrorInvalidHandle);
        assert_eq!(hipFree(d), hipSuccess);
    }
}

// ---- streams and events ------------------------------------------------------------------

#[test]
fn stream_priorities_and_flags() {
    init();
    unsafe {
        let (mut least, mut greatest) = (0, 0);
        assert_eq!(hipDeviceGetStreamPriorityRange(&mut least, &mut greatest), hipSuccess);
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreateWithPriority(null_mut(), 0, 0), hipErrorInvalidValue);
        assert_eq!(hipStreamCreateWithPriority(&mut s, 0x10, 0), hipErrorInvalidValue);
        let mut pr = 99;
        assert_eq!(hipStreamCreateWithPriority(&mut s, 1, -1000), hipSuccess);
        assert_eq!(hipStreamGetPriority(s, &mut pr), hipSuccess);
        assert_eq!(pr, greatest, "clamped to the highest priority");
        let mut f = 99u32;
        assert_eq!(hipStreamGetFlags(s, &mut f), hipSuccess);
        assert_eq!(f, 1);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipStreamGetPriority(s, &mut pr), hipErrorInvalidHandle);
        assert_eq!(hipStreamGetFlags(s, &mut f), hipErrorInvalidHandle);
        assert_eq!(hipStreamCreateWithPriority(&mut s, 0, 1000), hipSuccess);
        assert_eq!(hipStreamGetPriority(s, &mut pr), hipSuccess);
        assert_eq!(pr, least, "clamped to the lowest priority");
        assert_eq!(hipStreamGetFlags(s, &mut f), hipSuccess);
        assert_eq!(f, 0);
        // It is a working stream.
        let p = device_alloc(64);
        assert_eq!(hipMemsetAsync(p, 5, 64, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert!(read_back(p, 64).iter().all(|&b| b == 5));
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipFree(p), hipSuccess);

        assert_eq!(hipStreamGetPriority(null_mut(), null_mut()), hipErrorInvalidValue);
        assert_eq!(hipStreamGetPriority(null_mut(), &mut pr), hipSuccess);
        assert_eq!(pr, 0, "the null stream");
        assert_eq!(hipStreamGetFlags(null_mut(), &mut f), hipErrorInvalidValue, "HIP: the null stream");
        assert_eq!(hipStreamGetFlags(2usize as hipStream_t, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipStreamGetFlags(1usize as hipStream_t, &mut f), hipSuccess);
        assert_eq!(f, 0);
    }
}

static CALLBACKS: std::sync::Mutex<Vec<(usize, hipError_t, usize)>> = std::sync::Mutex::new(Vec::new());

unsafe extern "C" fn record_callback(stream: hipStream_t, status: hipError_t, user: *mut c_void) {
    CALLBACKS.lock().unwrap().push((stream as usize, status, user as usize));
}

#[test]
fn stream_add_callback() {
    init();
    let _second = second_device_lock();
    unsafe {
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        let p = device_alloc(64);
        assert_eq!(hipMemsetAsync(p, 9, 64, s), hipSuccess);
        assert_eq!(hipStreamAddCallback(s, Some(record_callback), 0x5150 as *mut c_void, 0), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        let seen = CALLBACKS.lock().unwrap().clone();
        assert!(seen.contains(&(s as usize, hipSuccess, 0x5150)), "{seen:?}");
        assert_eq!(hipStreamAddCallback(s, None, null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipStreamAddCallback(s, Some(record_callback), null_mut(), 1), hipErrorInvalidValue);
        assert_eq!(
            hipStreamAddCallback(null_mut(), Some(record_callback), 0x77 as *mut c_void, 0),
            hipSuccess
        );
        assert_eq!(hipDeviceSynchronize(), hipSuccess);
        assert!(CALLBACKS.lock().unwrap().contains(&(0, hipSuccess, 0x77)));
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipStreamAddCallback(s, Some(record_callback), null_mut(), 0), hipErrorInvalidHandle);
        assert_eq!(hipFree(p), hipSuccess);
    }
}

#[test]
fn event_create_with_flags() {
    init();
    unsafe {
        let mut e: hipEvent_t = null_mut();
        assert_eq!(hipEventCreateWithFlags(null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipEventCreateWithFlags(&mut e, 0x100), hipErrorInvalidValue);
        assert_eq!(
            hipEventCreateWithFlags(&mut e, 4),
            hipErrorInvalidValue,
            "Interprocess needs DisableTiming"
        );
        for flags in [0, 1, 2, 3, 6] {
            assert_eq!(hipEventCreateWithFlags(&mut e, flags), hipSuccess, "flags {flags}");
            assert_eq!(hipEventRecord(e, null_mut()), hipSuccess);
            assert_eq!(hipEventSynchronize(e), hipSuccess);
            let mut ms = 0f32;
            let timing = hipEventElapsedTime(&mut ms, e, e);
            assert_eq!(timing == hipSuccess, flags & 2 == 0, "flags {flags}: {timing}");
            assert_eq!(hipEventDestroy(e), hipSuccess);
        }
    }
}

// ---- peer access ---------------------------------------------------------------------------

/// Tests that use the second device hold this: one of them resets it.
static SECOND_DEVICE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn second_device_lock() -> std::sync::MutexGuard<'static, ()> {
    SECOND_DEVICE.lock().unwrap_or_else(|p| p.into_inner())
}

fn two_devices(test: &str) -> bool {
    let n = device_count();
    if n < 2 {
        eprintln!("{test}: skipped, needs 2 devices, {n} present");
    }
    n >= 2
}

#[test]
fn peer_access() {
    init();
    let _second = second_device_lock();
    let count = device_count();
    unsafe {
        let mut can = 9;
        assert_eq!(hipDeviceCanAccessPeer(null_mut(), 0, 1), hipErrorInvalidValue);
        assert_eq!(hipDeviceCanAccessPeer(&mut can, 0, 0), hipSuccess);
        assert_eq!(can, 0, "a device is not its own peer");
        can = 9;
        assert_eq!(hipDeviceCanAccessPeer(&mut can, 77, 77), hipSuccess, "HIP answers 0 before checking");
        assert_eq!(can, 0);
        assert_eq!(hipDeviceCanAccessPeer(&mut can, 0, count), hipErrorInvalidDevice);
        assert_eq!(hipDeviceCanAccessPeer(&mut can, -1, 0), hipErrorInvalidDevice);
        assert_eq!(hipSetDevice(0), hipSuccess);
        assert_eq!(hipDeviceEnablePeerAccess(0, 0), hipErrorInvalidDevice, "itself");
        assert_eq!(hipDeviceEnablePeerAccess(count, 0), hipErrorInvalidDevice);
        assert_eq!(hipDeviceEnablePeerAccess(-1, 0), hipErrorInvalidDevice);
        assert_eq!(hipDeviceEnablePeerAccess(1, 1), hipErrorInvalidValue, "flags");
        assert_eq!(hipDeviceDisablePeerAccess(0), hipErrorInvalidDevice);
        assert_eq!(hipDeviceDisablePeerAccess(count), hipErrorInvalidDevice);
        if !two_devices("peer_access") {
            return;
        }
        assert_eq!(hipDeviceCanAccessPeer(&mut can, 0, 1), hipSuccess);
        if can == 0 {
            eprintln!("peer_access: devices 0 and 1 cannot access each other; enable/disable not checked");
            assert_eq!(hipDeviceEnablePeerAccess(1, 0), hipErrorInvalidDevice);
            return;
        }
        // On device 1 (its own thread's current device), toward device 0.
        std::thread::spawn(|| {
            assert_eq!(hipSetDevice(1), hipSuccess);
            assert_eq!(hipDeviceDisablePeerAccess(0), hipErrorPeerAccessNotEnabled);
            assert_eq!(hipDeviceEnablePeerAccess(0, 0), hipSuccess);
            assert_eq!(hipDeviceEnablePeerAccess(0, 0), hipErrorPeerAccessAlreadyEnabled);
            // Device 0's memory is now read-write for device 1.
            assert_eq!(hipSetDevice(0), hipSuccess);
            let p = device_alloc(64);
            assert_eq!(hipSetDevice(1), hipSuccess);
            assert_eq!(get_u32(HIP_POINTER_ATTRIBUTE_ACCESS_FLAGS, p), (hipSuccess, 3));
            assert_eq!(hipDeviceDisablePeerAccess(0), hipSuccess);
            assert_eq!(get_u32(HIP_POINTER_ATTRIBUTE_ACCESS_FLAGS, p), (hipSuccess, 0));
            assert_eq!(hipDeviceDisablePeerAccess(0), hipErrorPeerAccessNotEnabled);
            assert_eq!(hipFree(p), hipSuccess);
            // Disabling waits for the work still to run through the access:
            // copies of 64 MiB from device 1 into device 0, queued on a
            // stream of device 1 (the driver would take the mapping away
            // under them).
            const BIG: usize = 64 << 20;
            assert_eq!(hipDeviceEnablePeerAccess(0, 0), hipSuccess);
            assert_eq!(hipSetDevice(0), hipSuccess);
            let dst = device_alloc(BIG);
            assert_eq!(hipMemset(dst, 0, BIG), hipSuccess);
            assert_eq!(hipSetDevice(1), hipSuccess);
            let src = device_alloc(BIG);
            assert_eq!(hipMemset(src, 0x5a, BIG), hipSuccess);
            let mut s: hipStream_t = null_mut();
            assert_eq!(hipStreamCreate(&mut s), hipSuccess);
            for _ in 0..4 {
                assert_eq!(hipMemcpyPeerAsync(dst, 0, src, 1, BIG, s), hipSuccess);
            }
            assert_eq!(hipDeviceDisablePeerAccess(0), hipSuccess);
            assert_eq!(hipStreamQuery(s), hipSuccess, "the copies ran before access went away");
            assert!(read_back(at(dst, BIG - 4096), 4096).iter().all(|&x| x == 0x5a));
            assert_eq!(hipStreamDestroy(s), hipSuccess);
            assert_eq!(hipFree(src), hipSuccess);
            assert_eq!(hipFree(dst), hipSuccess);
        })
        .join()
        .unwrap();
    }
}

#[test]
fn memcpy_peer() {
    init();
    let _second = second_device_lock();
    let count = device_count();
    unsafe {
        assert_eq!(hipSetDevice(0), hipSuccess);
        let a = device_alloc(4096);
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 13) as u8).collect();
        assert_eq!(hipMemcpy(a, data.as_ptr().cast(), 4096, hipMemcpyHostToDevice), hipSuccess);
        // Bad ordinals come first, even with size 0.
        assert_eq!(hipMemcpyPeer(a, count, a, 0, 0), hipErrorInvalidDevice);
        assert_eq!(hipMemcpyPeer(a, 0, a, -1, 16), hipErrorInvalidDevice);
        assert_eq!(hipMemcpyPeerAsync(a, 0, a, count, 0, null_mut()), hipErrorInvalidDevice);
        assert_eq!(hipMemcpyPeer(null_mut(), 0, null(), 0, 0), hipSuccess, "then size 0");
        assert_eq!(hipMemcpyPeer(null_mut(), 0, a, 0, 16), hipErrorInvalidValue);
        assert_eq!(hipMemcpyPeer(a, 0, data.as_ptr().cast(), 0, 16), hipErrorInvalidValue, "host memory");
        assert_eq!(hipMemcpyPeer(a, 0, a, 0, 4097), hipErrorInvalidValue, "past the end");
        let other = if count >= 2 { 1 } else { 0 };
        assert_eq!(hipSetDevice(other), hipSuccess);
        let b = device_alloc(4096);
        assert_eq!(hipSetDevice(0), hipSuccess);
        assert_eq!(hipMemcpyPeer(b, other, a, 0, 4096), hipSuccess);
        assert_eq!(read_back(b, 4096), data);
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        assert_eq!(hipMemset(a, 0, 4096), hipSuccess);
        assert_eq!(hipMemcpyPeerAsync(a, 0, at(b, 1024), other, 1024, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        let back = read_back(a, 4096);
        assert_eq!(&back[..1024], &data[1024..2048]);
        assert!(back[1024..].iter().all(|&x| x == 0));
        assert_eq!(hipMemcpyPeerAsync(a, 0, b, other, 4097, s), hipErrorInvalidValue);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipMemcpyPeerAsync(a, 0, b, other, 16, s), hipErrorInvalidHandle);
        assert_eq!(hipFree(a), hipSuccess);
        assert_eq!(hipFree(b), hipSuccess);
    }
}

#[test]
fn pool_memory_for_a_peer() {
    init();
    let _second = second_device_lock();
    if !two_devices("pool_memory_for_a_peer") {
        return;
    }
    unsafe {
        let mut pool: hipMemPool_t = null_mut();
        let props = hipMemPoolProps {
            allocType: hipMemAllocationTypePinned,
            handleTypes: hipMemHandleTypeNone,
            location: hipMemLocation { type_: hipMemLocationTypeDevice, id: 0 },
            win32SecurityAttributes: null_mut(),
            maxSize: 0,
            reserved: [0; 56],
        };
        assert_eq!(hipMemPoolCreate(&mut pool, &props), hipSuccess);
        assert_eq!(hipSetDevice(0), hipSuccess);
        let mut p: *mut c_void = null_mut();
        assert_eq!(hipMallocFromPoolAsync(&mut p, 4096, pool, null_mut()), hipSuccess);
        assert_eq!(hipStreamSynchronize(null_mut()), hipSuccess);
        let (pa, poola) = (p as usize, pool as usize);
        std::thread::spawn(move || {
            let p = pa as *mut c_void;
            let pool = poola as hipMemPool_t;
            assert_eq!(hipSetDevice(1), hipSuccess);
            assert_eq!(get_u32(HIP_POINTER_ATTRIBUTE_ACCESS_FLAGS, p), (hipSuccess, 0), "not granted yet");
            let desc = hipMemAccessDesc {
                location: hipMemLocation { type_: hipMemLocationTypeDevice, id: 1 },
                flags: hipMemAccessFlagsProtReadWrite,
            };
            assert_eq!(hipMemPoolSetAccess(pool, &desc, 1), hipSuccess);
            assert_eq!(get_u32(HIP_POINTER_ATTRIBUTE_ACCESS_FLAGS, p), (hipSuccess, 3));
            // Device 1's stream writes it, and device 0 reads it back.
            let mut s: hipStream_t = null_mut();
            assert_eq!(hipStreamCreate(&mut s), hipSuccess);
            assert_eq!(hipMemsetAsync(p, 0x42, 4096, s), hipSuccess);
            assert_eq!(hipStreamSynchronize(s), hipSuccess);
            assert_eq!(hipStreamDestroy(s), hipSuccess);
        })
        .join()
        .unwrap();
        assert!(read_back(p, 4096).iter().all(|&b| b == 0x42));
        assert_eq!(hipFreeAsync(p, null_mut()), hipSuccess);
        assert_eq!(hipStreamSynchronize(null_mut()), hipSuccess);
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
    }
}

// ---- reset, hipMemcpyWithStream, deprecated spellings, device code ------------------------

#[test]
fn memcpy_with_stream_and_deprecated_host_allocation() {
    init();
    unsafe {
        let d = device_alloc(256);
        let mut h: *mut c_void = null_mut();
        assert_eq!(hipHostAlloc(&mut h, 256, 0x2), hipSuccess);
        std::ptr::write_bytes(h.cast::<u8>(), 0x31, 256);
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        assert_eq!(hipMemcpyWithStream(d, h, 256, hipMemcpyHostToDevice, s), hipSuccess);
        assert_eq!(hipStreamQuery(s), hipSuccess, "waited for");
        assert!(read_back(d, 256).iter().all(|&b| b == 0x31));
        assert_eq!(hipMemcpyWithStream(d, h, 0, 99, s), hipSuccess, "size 0 first");
        assert_eq!(hipMemcpyWithStream(d, h, 16, 99, s), hipErrorInvalidMemcpyDirection);
        assert_eq!(hipMemcpyWithStream(d, h, 257, hipMemcpyHostToDevice, s), hipErrorInvalidValue);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipMemcpyWithStream(d, h, 16, hipMemcpyHostToDevice, s), hipErrorInvalidHandle);
        assert_eq!(hipFreeHost(h), hipSuccess);
        assert_eq!(hipFreeHost(h), hipErrorInvalidValue, "already freed");
        assert_eq!(hipHostAlloc(null_mut(), 16, 0), hipErrorInvalidValue);
        assert_eq!(hipHostAlloc(&mut h, 16, 0x100), hipErrorInvalidValue);
        assert_eq!(hipMallocHost(null_mut(), 16), hipErrorInvalidValue);
        assert_eq!(hipMallocHost(&mut h, 64), hipSuccess);
        let mut a: hipPointerAttribute_t = std::mem::zeroed();
        assert_eq!(hipPointerGetAttributes(&mut a, h), hipSuccess);
        assert_eq!(a.type_, hipMemoryTypeHost);
        assert_eq!(hipHostFree(h), hipSuccess);
        assert_eq!(hipFree(d), hipSuccess);
    }
}

#[test]
fn device_reset_frees_the_device_and_its_handles() {
    init();
    let _second = second_device_lock();
    // On the last device, in a thread of its own (the current device is per
    // thread), so that the other tests' memory on device 0 is not touched.
    let last = device_count() - 1;
    if last == 0 {
        eprintln!(
            "device_reset_frees_the_device_and_its_handles: skipped, resets device 0 (needs 2 devices)"
        );
        return;
    }
    std::thread::spawn(move || unsafe {
        assert_eq!(hipSetDevice(last), hipSuccess);
        let p = device_alloc(4096);
        let mut pitched: *mut c_void = null_mut();
        let mut pitch = 0usize;
        assert_eq!(hipMallocPitch(&mut pitched, &mut pitch, 10, 10), hipSuccess);
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        let mut e: hipEvent_t = null_mut();
        assert_eq!(hipEventCreate(&mut e), hipSuccess);
        let mut h: *mut c_void = null_mut();
        assert_eq!(hipHostMalloc(&mut h, 64, 0), hipSuccess);
        assert_eq!(hipDeviceReset(), hipSuccess);
        // Freed by the reset: no longer memory of this device. (Not checked
        // with hipFree: another test's thread may have been given the same
        // address on device 0 meanwhile, and a free would take its memory.)
        for gone in [p, pitched] {
            let mut ordinal: c_int = 5;
            let r =
                hipPointerGetAttribute((&raw mut ordinal).cast(), HIP_POINTER_ATTRIBUTE_DEVICE_ORDINAL, gone);
            assert!(
                r == hipErrorInvalidValue || (r == hipSuccess && ordinal != last),
                "freed by the reset: {r} {ordinal}"
            );
        }
        assert_eq!(hipStreamSynchronize(s), hipErrorInvalidHandle, "destroyed by the reset");
        assert_eq!(hipEventQuery(e), hipErrorInvalidHandle, "destroyed by the reset");
        assert_eq!(hipHostFree(h), hipSuccess, "page-locked memory is not the device's");
        let q = device_alloc(64);
        assert_eq!(hipFree(q), hipSuccess, "the device works after a reset");
    })
    .join()
    .unwrap();
}

#[test]
fn device_code_functions_without_nvcc_are_not_supported() {
    init();
    unsafe {
        let mut sym = 0u64;
        let symp: *const c_void = (&raw const sym).cast();
        let mut v = 0u32;
        let mut addr: *mut c_void = null_mut();
        let mut size = 0usize;
        let (mut a, mut b) = (0, 0);
        let r = [
            hipGetSymbolAddress(&mut addr, symp),
            hipGetSymbolSize(&mut size, symp),
            hipMemcpyToSymbol(symp, (&raw const v).cast(), 4, 0, hipMemcpyHostToDevice),
            hipMemcpyToSymbolAsync(symp, (&raw const v).cast(), 4, 0, hipMemcpyHostToDevice, null_mut()),
            hipMemcpyFromSymbol((&raw mut v).cast(), symp, 4, 0, hipMemcpyDeviceToHost),
            hipMemcpyFromSymbolAsync((&raw mut v).cast(), symp, 4, 0, hipMemcpyDeviceToHost, null_mut()),
            hipOccupancyMaxPotentialBlockSize(&mut a, &mut b, symp, 0, 0),
            hipOccupancyMaxActiveBlocksPerMultiprocessor(&mut a, symp, 256, 0),
            hipLaunchKernel(
                symp,
                dim3 { x: 1, y: 1, z: 1 },
                dim3 { x: 1, y: 1, z: 1 },
                null_mut(),
                0,
                null_mut(),
            ),
        ];
        for (i, code) in r.into_iter().enumerate() {
            assert_eq!(code, hipErrorNotSupported, "function {i}");
        }
        assert_eq!(hipGetLastError(), hipErrorNotSupported);
        sym += 1;
        assert_eq!((sym, v, size, addr), (1, 0, 0, null_mut()), "nothing written");
    }
}

/// `hipStreamGetDevice`: a created stream answers the device it was made
/// on (the current one at its creation), the null stream the current
/// device; a null output is InvalidValue, a destroyed or made-up handle
/// InvalidHandle. (On cuda a stream made by the driver answers its own
/// device: `the_current_device_follows_the_cuda_runtimes_device`.)
#[test]
fn stream_get_device() {
    init();
    let _second = second_device_lock();
    unsafe {
        let last = device_count() - 1;
        let mut d: hipDevice_t = -1;
        assert_eq!(hipSetDevice(last), hipSuccess);
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        assert_eq!(hipSetDevice(0), hipSuccess);
        assert_eq!(hipStreamGetDevice(s, &mut d), hipSuccess);
        assert_eq!(d, last, "a stream made while device {last} was current");
        for null in [0usize, 1, 2] {
            d = -1;
            assert_eq!(hipStreamGetDevice(null as hipStream_t, &mut d), hipSuccess);
            assert_eq!(d, 0, "the null stream {null}: the current device");
        }
        if last != 0 {
            assert_eq!(hipSetDevice(last), hipSuccess);
            assert_eq!(hipStreamGetDevice(null_mut(), &mut d), hipSuccess);
            assert_eq!(d, last);
            assert_eq!(hipSetDevice(0), hipSuccess);
        }
        assert_eq!(hipStreamGetDevice(s, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipStreamGetDevice(s, &mut d), hipErrorInvalidHandle, "a destroyed stream");
        assert_eq!(hipStreamGetDevice(0xdead0usize as hipStream_t, &mut d), hipErrorInvalidHandle);
    }
}
