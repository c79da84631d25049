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
use std::ptr::null_mut;
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

fn is_host() -> bool {
    std::env::var("HIPMEM_BACKEND").is_ok_and(|b| b == "host")
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
