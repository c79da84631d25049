//! The exports real HIP programs use beyond the memory functions (issue 15),
//! each with good input and every bad input `docs/hip-api-contract.md`
//! lists, checking the exact hipError_t: devices, typed memsets and copies,
//! address ranges and pointer attributes, pitched memory, stream and event
//! extras, peer access, and the kernel-side functions that only nvcc builds
//! have. Runs on the host backend with two emulated devices unless
//! HIPMEM_BACKEND / HIPMEM_HOST_DEVICES say otherwise; the two-device checks
//! skip, with a note, where there is one device.
#![allow(clippy::missing_safety_doc, non_snake_case)]

use std::ffi::{c_char, c_int};
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
