//! Every exported function, once with good input and once with each bad input
//! that hip-memory-api.md lists, checking the exact hipError_t (through the
//! Rust rlib of libhipmem). Runs on the host backend unless HIPMEM_BACKEND is set.
//! Pool IPC is tested in one process and, in `pool_ipc_with_a_child`, across two.
#![allow(clippy::missing_safety_doc, unused_assignments, non_snake_case)]

use std::ffi::{CStr, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, Once};

use hipmem::*;

fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        if std::env::var_os("HIPMEM_BACKEND").is_none() {
            // SAFETY: set once, before any test touches the runtime (all go through init).
            unsafe { std::env::set_var("HIPMEM_BACKEND", "host") };
        }
        // SAFETY: plain FFI call.
        assert_eq!(unsafe { hipInit(0) }, hipSuccess);
    });
}

/// One test at a time. A CUDA stream is a pointer: a handle the driver
/// freed may come back as another test's new stream, and hipmem rightly takes
/// a live stream it did not create, so a test that checks that a destroyed
/// stream is refused must not run while another creates streams. (In
/// parallel, `hipMemsetAsync` on a destroyed stream succeeded in 2 runs of 6
/// on an H100: its handle was a new stream of another test by then.)
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn n(p: *mut c_void) -> u64 {
    p as usize as u64
}

#[test]
fn explicit_memory() {
    let _serial = serial();
    init();
    unsafe {
        let mut p: *mut c_void = null_mut();
        assert_eq!(hipMalloc(null_mut(), 16), hipErrorInvalidValue);
        assert_eq!(hipMalloc(&mut p, 0), hipSuccess);
        assert!(p.is_null());
        assert_eq!(hipMalloc(&mut p, usize::MAX / 2), hipErrorOutOfMemory);
        assert_eq!(hipMalloc(&mut p, 4096), hipSuccess);
        assert!(!p.is_null());

        // hipMemcpy
        let src: Vec<u8> = (0..4096u32).map(|i| i as u8).collect();
        let mut back = vec![0u8; 4096];
        assert_eq!(hipMemcpy(p, src.as_ptr().cast(), 4096, hipMemcpyHostToDevice), hipSuccess);
        assert_eq!(hipMemcpy(back.as_mut_ptr().cast(), p, 4096, hipMemcpyDefault), hipSuccess);
        assert_eq!(back, src);
        assert_eq!(hipMemcpy(null_mut(), null(), 0, 77), hipSuccess, "size 0 first");
        assert_eq!(
            hipMemcpy(null_mut(), src.as_ptr().cast(), 16, hipMemcpyHostToDevice),
            hipErrorInvalidValue
        );
        assert_eq!(hipMemcpy(p, null(), 16, hipMemcpyHostToDevice), hipErrorInvalidValue);
        assert_eq!(hipMemcpy(p, src.as_ptr().cast(), 16, 7), hipErrorInvalidMemcpyDirection);
        assert_eq!(hipMemcpy(p, src.as_ptr().cast(), 4097, hipMemcpyHostToDevice), hipErrorInvalidValue);
        let mut h2h = [0u8; 4];
        assert_eq!(
            hipMemcpy(h2h.as_mut_ptr().cast(), src[1..].as_ptr().cast(), 4, hipMemcpyHostToHost),
            hipSuccess
        );
        assert_eq!(h2h, [1, 2, 3, 4]);
        let mut q: *mut c_void = null_mut();
        assert_eq!(hipMalloc(&mut q, 4096), hipSuccess);
        assert_eq!(hipMemcpy(q, p, 4096, hipMemcpyDeviceToDevice), hipSuccess);

        // hipMemcpyAsync, on a created and on a destroyed stream
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        let mut back2 = vec![0u8; 4096];
        assert_eq!(hipMemcpyAsync(back2.as_mut_ptr().cast(), q, 4096, hipMemcpyDeviceToHost, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(back2, src);
        assert_eq!(hipMemcpyAsync(q, p, 0, 99, s), hipSuccess);
        assert_eq!(hipMemcpyAsync(q, null(), 16, hipMemcpyDeviceToDevice, s), hipErrorInvalidValue);
        assert_eq!(hipMemcpyAsync(q, p, 16, 9, s), hipErrorInvalidMemcpyDirection);
        assert_eq!(hipMemcpyAsync(q, p, 8192, hipMemcpyDeviceToDevice, s), hipErrorInvalidValue);
        assert_eq!(hipMemcpyAsync(q, p, 16, hipMemcpyDeviceToDevice, hipStreamPerThread()), hipSuccess);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipMemcpyAsync(q, p, 16, hipMemcpyDeviceToDevice, s), hipErrorInvalidHandle);

        // hipMemset / hipMemsetAsync
        assert_eq!(hipMemset(p, 0xab, 4096), hipSuccess);
        assert_eq!(hipMemcpy(back.as_mut_ptr().cast(), p, 4096, hipMemcpyDeviceToHost), hipSuccess);
        assert!(back.iter().all(|&b| b == 0xab));
        assert_eq!(hipMemset(null_mut(), 0, 0), hipSuccess);
        assert_eq!(hipMemset(null_mut(), 0, 16), hipErrorInvalidValue);
        assert_eq!(hipMemset(back.as_mut_ptr().cast(), 0, 16), hipErrorInvalidValue, "plain host memory");
        assert_eq!(hipMemset(p, 0, 4097), hipErrorInvalidValue);
        assert_eq!(hipMemsetAsync(p, 1, 4096, null_mut()), hipSuccess);
        assert_eq!(hipMemsetAsync(null_mut(), 1, 0, null_mut()), hipSuccess);
        assert_eq!(hipMemsetAsync(null_mut(), 1, 16, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipMemsetAsync(back.as_mut_ptr().cast(), 1, 16, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipMemsetAsync(p, 1, 4097, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipMemsetAsync(p, 1, 16, s), hipErrorInvalidHandle);
        assert_eq!(hipDeviceSynchronize(), hipSuccess);

        // hipMemGetInfo
        let (mut free, mut total) = (0usize, 0usize);
        assert_eq!(hipMemGetInfo(&mut free, &mut total), hipSuccess);
        assert!(total > 0 && free <= total);
        assert_eq!(hipMemGetInfo(null_mut(), &mut total), hipErrorInvalidValue);
        assert_eq!(hipMemGetInfo(&mut free, null_mut()), hipErrorInvalidValue);

        // hipPointerGetAttributes
        let mut a: hipPointerAttribute_t = std::mem::zeroed();
        assert_eq!(hipPointerGetAttributes(&mut a, p), hipSuccess);
        assert_eq!((a.type_, a.device, n(a.devicePointer)), (hipMemoryTypeDevice, 0, n(p)));
        let local = 5u32;
        assert_eq!(hipPointerGetAttributes(&mut a, (&raw const local).cast()), hipSuccess);
        assert_eq!(a.type_, hipMemoryTypeUnregistered);
        assert_eq!(hipPointerGetAttributes(null_mut(), p), hipErrorInvalidValue);
        assert_eq!(hipPointerGetAttributes(&mut a, null()), hipErrorInvalidValue);

        // hipFree
        assert_eq!(hipFree(null_mut()), hipSuccess);
        assert_eq!(hipFree(q), hipSuccess);
        assert_eq!(hipFree(q), hipErrorInvalidValue, "double free");
        assert_eq!(hipFree((&raw const local) as *mut c_void), hipErrorInvalidValue, "stack pointer");
        assert_eq!(hipFree(p), hipSuccess);
    }
}

unsafe fn hip_stream_per_thread() -> hipStream_t {
    2usize as hipStream_t
}
use hip_stream_per_thread as hipStreamPerThread;

#[test]
fn page_locked_memory() {
    let _serial = serial();
    init();
    unsafe {
        let mut h: *mut c_void = null_mut();
        assert_eq!(hipHostMalloc(null_mut(), 64, 0), hipErrorInvalidValue);
        assert_eq!(hipHostMalloc(&mut h, 0, 0), hipSuccess);
        assert!(h.is_null());
        assert_eq!(hipHostMalloc(&mut h, 64, 0x4000_0000 | 0x8000_0000), hipErrorInvalidValue);
        assert_eq!(hipHostMalloc(&mut h, 64, 0x100), hipErrorInvalidValue);
        assert_eq!(hipHostMalloc(&mut h, usize::MAX / 2, 0), hipErrorOutOfMemory);
        assert_eq!(hipHostMalloc(&mut h, 4096, 0x2), hipSuccess);
        let mut a: hipPointerAttribute_t = std::mem::zeroed();
        assert_eq!(hipPointerGetAttributes(&mut a, h), hipSuccess);
        assert_eq!(a.type_, hipMemoryTypeHost);

        // hipMemcpyAsync from page-locked memory takes the asynchronous path.
        let mut d: *mut c_void = null_mut();
        assert_eq!(hipMalloc(&mut d, 4096), hipSuccess);
        std::ptr::write_bytes(h.cast::<u8>(), 7, 4096);
        assert_eq!(hipMemcpyAsync(d, h, 4096, hipMemcpyHostToDevice, null_mut()), hipSuccess);
        assert_eq!(hipMemsetAsync(d, 9, 16, null_mut()), hipSuccess);
        assert_eq!(hipMemcpyAsync(h, d, 4096, hipMemcpyDeviceToHost, null_mut()), hipSuccess);
        assert_eq!(hipStreamSynchronize(null_mut()), hipSuccess);
        let bytes = std::slice::from_raw_parts(h.cast::<u8>(), 4096);
        assert!(bytes[..16].iter().all(|&b| b == 9) && bytes[16..].iter().all(|&b| b == 7));
        assert_eq!(hipFree(d), hipSuccess);

        let mut dp: *mut c_void = null_mut();
        assert_eq!(hipHostGetDevicePointer(&mut dp, h, 0), hipSuccess);
        assert!(!dp.is_null());
        assert_eq!(hipHostGetDevicePointer(null_mut(), h, 0), hipErrorInvalidValue);
        assert_eq!(hipHostGetDevicePointer(&mut dp, null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipHostGetDevicePointer(&mut dp, h, 1), hipErrorInvalidValue);

        let mut buf = vec![0u8; 8192];
        let bp: *mut c_void = buf.as_mut_ptr().cast();
        assert_eq!(hipHostRegister(null_mut(), 64, 0), hipErrorInvalidValue);
        assert_eq!(hipHostRegister(bp, 0, 0), hipErrorInvalidValue);
        assert_eq!(hipHostRegister(bp, 8192, 0x100), hipErrorInvalidValue);
        assert_eq!(hipHostRegister(bp, 8192, 0), hipSuccess);
        assert_eq!(hipHostRegister(bp, 8192, 0), hipErrorInvalidValue, "already registered");
        assert_eq!(hipHostFree(bp), hipErrorInvalidValue, "registered, not allocated");
        assert_eq!(hipHostUnregister(bp), hipSuccess);
        assert_eq!(hipHostUnregister(bp), hipErrorInvalidValue);
        assert_eq!(hipHostUnregister(null_mut()), hipErrorInvalidValue);

        assert_eq!(hipHostFree(null_mut()), hipSuccess);
        assert_eq!(hipHostFree(bp), hipErrorInvalidValue, "unknown");
        assert_eq!(hipHostFree(h), hipSuccess);
        assert_eq!(hipHostFree(h), hipErrorInvalidValue, "already freed");
        drop(buf);
    }
}

fn pool_props(device: i32) -> hipMemPoolProps {
    hipMemPoolProps {
        allocType: hipMemAllocationTypePinned,
        handleTypes: hipMemHandleTypeNone,
        location: hipMemLocation { type_: hipMemLocationTypeDevice, id: device },
        win32SecurityAttributes: null_mut(),
        maxSize: 0,
        reserved: [0; 56],
    }
}

#[test]
fn stream_ordered_allocation_and_pools() {
    let _serial = serial();
    init();
    unsafe {
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreateWithFlags(&mut s, hipStreamNonBlockingFlag()), hipSuccess);
        let mut p: *mut c_void = null_mut();
        assert_eq!(hipMallocAsync(null_mut(), 64, s), hipErrorInvalidValue);
        assert_eq!(hipMallocAsync(&mut p, 0, s), hipSuccess);
        assert!(p.is_null());
        assert_eq!(hipMallocAsync(&mut p, 1 << 20, s), hipSuccess);
        assert_eq!(hipMallocAsync(&mut p, 64, 0xdead0usize as hipStream_t), hipErrorInvalidHandle);
        assert_eq!(hipMallocAsync(&mut p, usize::MAX / 2, s), hipErrorOutOfMemory);
        assert_eq!(hipFreeAsync(null_mut(), s), hipErrorInvalidValue);
        assert_eq!(hipFreeAsync(p, 0xdead0usize as hipStream_t), hipErrorInvalidHandle);
        assert_eq!(hipFreeAsync(p, s), hipSuccess);
        assert_eq!(hipFreeAsync(p, s), hipErrorInvalidValue, "double free");
        let mut m: *mut c_void = null_mut();
        assert_eq!(hipMalloc(&mut m, 256), hipSuccess);
        assert_eq!(hipFreeAsync(m, s), hipSuccess, "hipMalloc memory is accepted");

        // pools
        let mut pool: hipMemPool_t = null_mut();
        let props = pool_props(0);
        assert_eq!(hipMemPoolCreate(null_mut(), &props), hipErrorInvalidValue);
        assert_eq!(hipMemPoolCreate(&mut pool, null()), hipErrorInvalidValue);
        let mut bad = props;
        bad.allocType = hipMemAllocationTypeInvalid;
        assert_eq!(hipMemPoolCreate(&mut pool, &bad), hipErrorInvalidValue);
        let mut bad = props;
        bad.location.type_ = hipMemLocationTypeInvalid;
        assert_eq!(hipMemPoolCreate(&mut pool, &bad), hipErrorInvalidValue);
        let mut bad = props;
        bad.location.id = 99;
        assert_eq!(hipMemPoolCreate(&mut pool, &bad), hipErrorInvalidValue);
        let mut limited = props;
        limited.maxSize = 4 << 20;
        assert_eq!(hipMemPoolCreate(&mut pool, &limited), hipSuccess);

        assert_eq!(hipMallocFromPoolAsync(null_mut(), 64, pool, s), hipErrorInvalidValue);
        assert_eq!(hipMallocFromPoolAsync(&mut p, 64, null_mut(), s), hipErrorInvalidValue);
        assert_eq!(
            hipMallocFromPoolAsync(&mut p, 64, pool, 0xdead0usize as hipStream_t),
            hipErrorInvalidHandle
        );
        assert_eq!(hipMallocFromPoolAsync(&mut p, 0, pool, s), hipSuccess);
        assert!(p.is_null());
        assert_eq!(hipMallocFromPoolAsync(&mut p, 64 << 20, pool, s), hipErrorOutOfMemory, "past maxSize");
        assert_eq!(hipMallocFromPoolAsync(&mut p, 1 << 20, pool, s), hipSuccess);

        // attributes
        let mut v: u64 = 0;
        let vp: *mut c_void = (&raw mut v).cast();
        assert_eq!(hipMemPoolGetAttribute(pool, hipMemPoolAttrUsedMemCurrent, vp), hipSuccess);
        assert!(v >= 1 << 20);
        assert_eq!(
            hipMemPoolGetAttribute(null_mut(), hipMemPoolAttrUsedMemCurrent, vp),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemPoolGetAttribute(pool, hipMemPoolAttrUsedMemCurrent, null_mut()),
            hipErrorInvalidValue
        );
        assert_eq!(hipMemPoolGetAttribute(pool, 42, vp), hipErrorInvalidValue);
        let mut flag: i32 = 0;
        assert_eq!(
            hipMemPoolGetAttribute(pool, hipMemPoolReuseAllowOpportunistic, (&raw mut flag).cast()),
            hipSuccess
        );
        assert_eq!(flag, 1);
        v = u64::MAX;
        assert_eq!(hipMemPoolSetAttribute(pool, hipMemPoolAttrReleaseThreshold, vp), hipSuccess);
        assert_eq!(
            hipMemPoolSetAttribute(null_mut(), hipMemPoolAttrReleaseThreshold, vp),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemPoolSetAttribute(pool, hipMemPoolAttrReleaseThreshold, null_mut()),
            hipErrorInvalidValue
        );
        assert_eq!(hipMemPoolSetAttribute(pool, 0, vp), hipErrorInvalidValue);
        v = 0;
        assert_eq!(hipMemPoolSetAttribute(pool, hipMemPoolAttrUsedMemCurrent, vp), hipErrorInvalidValue);
        assert_eq!(hipMemPoolSetAttribute(pool, hipMemPoolAttrUsedMemHigh, vp), hipSuccess);
        v = 5;
        assert_eq!(hipMemPoolSetAttribute(pool, hipMemPoolAttrUsedMemHigh, vp), hipErrorInvalidValue);
        flag = 0;
        assert_eq!(
            hipMemPoolSetAttribute(pool, hipMemPoolReuseAllowOpportunistic, (&raw mut flag).cast()),
            hipSuccess
        );

        // trim
        assert_eq!(hipFreeAsync(p, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipMemPoolTrimTo(pool, 0), hipSuccess);
        assert_eq!(hipMemPoolTrimTo(null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipMemPoolGetAttribute(pool, hipMemPoolAttrReservedMemCurrent, vp), hipSuccess);
        assert_eq!(v, 0);

        // access
        let rw = hipMemAccessDesc {
            location: hipMemLocation { type_: hipMemLocationTypeDevice, id: 0 },
            flags: hipMemAccessFlagsProtReadWrite,
        };
        assert_eq!(hipMemPoolSetAccess(pool, &rw, 1), hipSuccess);
        assert_eq!(hipMemPoolSetAccess(null_mut(), &rw, 1), hipErrorInvalidValue);
        assert_eq!(hipMemPoolSetAccess(pool, null(), 1), hipErrorInvalidValue);
        let many = [rw; 65];
        assert_eq!(hipMemPoolSetAccess(pool, many.as_ptr(), 65), hipErrorInvalidDevice);
        let mut bad = rw;
        bad.location.id = 99;
        assert_eq!(hipMemPoolSetAccess(pool, &bad, 1), hipErrorInvalidDevice);
        let mut bad = rw;
        bad.flags = 7;
        assert_eq!(hipMemPoolSetAccess(pool, &bad, 1), hipErrorInvalidValue);
        let mut bad = rw;
        bad.location.type_ = hipMemLocationTypeInvalid;
        assert_eq!(hipMemPoolSetAccess(pool, &bad, 1), hipErrorInvalidValue);
        let mut flags: hipMemAccessFlags = -1;
        let mut loc = rw.location;
        assert_eq!(hipMemPoolGetAccess(&mut flags, pool, &mut loc), hipSuccess);
        assert_eq!(flags, hipMemAccessFlagsProtReadWrite);
        assert_eq!(hipMemPoolGetAccess(null_mut(), pool, &mut loc), hipErrorInvalidValue);
        assert_eq!(hipMemPoolGetAccess(&mut flags, null_mut(), &mut loc), hipErrorInvalidValue);
        assert_eq!(hipMemPoolGetAccess(&mut flags, pool, null_mut()), hipErrorInvalidValue);

        // default and current pools
        let (mut def, mut cur): (hipMemPool_t, hipMemPool_t) = (null_mut(), null_mut());
        assert_eq!(hipDeviceGetDefaultMemPool(&mut def, 0), hipSuccess);
        assert_eq!(hipDeviceGetDefaultMemPool(null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceGetDefaultMemPool(&mut def, 99), hipErrorInvalidDevice);
        assert_eq!(hipDeviceGetMemPool(&mut cur, 0), hipSuccess);
        assert_eq!(cur, def);
        assert_eq!(hipDeviceGetMemPool(null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceGetMemPool(&mut cur, -1), hipErrorInvalidDevice);
        assert_eq!(hipDeviceSetMemPool(0, pool), hipSuccess);
        assert_eq!(hipDeviceSetMemPool(0, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipDeviceSetMemPool(99, pool), hipErrorInvalidDevice);
        assert_eq!(hipDeviceGetMemPool(&mut cur, 0), hipSuccess);
        assert_eq!(cur, pool);
        assert_eq!(hipMallocAsync(&mut p, 4096, s), hipSuccess, "from the current pool");

        // destroy: live allocations stay valid, the default pool becomes current again
        assert_eq!(hipMemPoolDestroy(null_mut()), hipErrorInvalidValue);
        assert_eq!(hipMemPoolDestroy(def), hipErrorInvalidValue, "a default pool");
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
        assert_eq!(hipMemPoolDestroy(pool), hipErrorInvalidValue, "double destroy");
        assert_eq!(hipMemPoolTrimTo(pool, 0), hipErrorInvalidValue, "stale handle");
        assert_eq!(hipDeviceGetMemPool(&mut cur, 0), hipSuccess);
        assert_eq!(cur, def);
        assert_eq!(hipMemsetAsync(p, 0, 4096, s), hipSuccess);
        assert_eq!(hipFreeAsync(p, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
    }
}

/// hipMemRangeGetAttribute of one 4-byte attribute: (code, value).
unsafe fn range_attr(attribute: hipMemRangeAttribute, ptr: *const c_void, count: usize) -> (hipError_t, i32) {
    let mut v: i32 = 0x5a5a;
    let code = unsafe { hipMemRangeGetAttribute((&raw mut v).cast(), 4, attribute, ptr, count) };
    (code, v)
}

/// hipmem's own extension for learned layouts: hipmemPoolSetPlanning and
/// hipmemPoolGetPlanCounts check their input, and a pool that sees the same
/// step repeat serves it from a plan (on backends whose pools sit on
/// virtual memory: host and cuda), until planning is turned off.
#[test]
fn learned_layouts_extension() {
    let _serial = serial();
    init();
    unsafe {
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreateWithFlags(&mut s, hipStreamNonBlockingFlag()), hipSuccess);
        let mut pool: hipMemPool_t = null_mut();
        assert_eq!(hipMemPoolCreate(&mut pool, &pool_props(0)), hipSuccess);
        let mut c = hipmemPlanCounts::default();
        assert_eq!(hipmemPoolGetPlanCounts(null_mut(), &mut c), hipErrorInvalidValue);
        assert_eq!(hipmemPoolGetPlanCounts(pool, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipmemPoolSetPlanning(null_mut(), 1), hipErrorInvalidValue);
        assert_eq!(hipmemPoolSetPlanning(pool, 2), hipErrorInvalidValue);
        assert_eq!(hipmemPoolSetPlanning(pool, -1), hipErrorInvalidValue);
        let on = hipmemPoolSetPlanning(pool, 1);
        let backend = std::env::var("HIPMEM_BACKEND").unwrap_or_default();
        if !matches!(backend.as_str(), "host" | "cuda") {
            // Another backend may give pools without virtual memory.
            assert!(on == hipSuccess || on == hipErrorInvalidValue, "{on}");
            if on != hipSuccess {
                eprintln!("learned_layouts_extension: the {backend} backend's pool learns no layouts");
                assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
                assert_eq!(hipStreamDestroy(s), hipSuccess);
                return;
            }
        }
        assert_eq!(on, hipSuccess);
        assert_eq!(hipmemPoolGetPlanCounts(pool, &mut c), hipSuccess);
        assert_eq!(c, hipmemPlanCounts::default(), "nothing planned yet");
        // A step: 24 blocks of 0.5 to 12 MiB (150 MiB live at its peak),
        // all freed at its end.
        let step = |pool: hipMemPool_t| {
            let mut ps = Vec::new();
            for k in 0..24usize {
                let mut p: *mut c_void = null_mut();
                assert_eq!(hipMallocFromPoolAsync(&mut p, (1 + k) << 19, pool, s), hipSuccess);
                ps.push(p);
            }
            for p in ps {
                assert_eq!(hipFreeAsync(p, s), hipSuccess);
            }
        };
        for _ in 0..8 {
            step(pool);
        }
        assert_eq!(hipmemPoolGetPlanCounts(pool, &mut c), hipSuccess);
        assert!(c.plans >= 1 && c.served >= 24, "{c:?}");
        assert_eq!((c.missed, c.ended), (0, 0), "{c:?}");
        assert_eq!(hipmemPoolSetPlanning(pool, 0), hipSuccess);
        step(pool);
        let mut after = hipmemPlanCounts::default();
        assert_eq!(hipmemPoolGetPlanCounts(pool, &mut after), hipSuccess);
        assert_eq!(after.served, c.served, "off: nothing served");
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
        assert_eq!(hipmemPoolSetPlanning(pool, 1), hipErrorInvalidValue, "stale handle");
        assert_eq!(hipStreamDestroy(s), hipSuccess);
    }
}

/// hipmem's own extension hipmemPoolGetHostWaits: it checks its input, and
/// a pool whose stream has nothing pending never blocks the caller, large
/// growths included (the blocking case, a growth waiting for its stream's
/// pending frees, is the conformance suite's
/// `a_large_growth_waits_for_its_streams_frees_only_where_a_new_peak_is_at_stake`,
/// through `MemPool::host_waits`, which this function returns).
#[test]
fn host_waits_extension() {
    let _serial = serial();
    init();
    unsafe {
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreateWithFlags(&mut s, hipStreamNonBlockingFlag()), hipSuccess);
        let mut pool: hipMemPool_t = null_mut();
        assert_eq!(hipMemPoolCreate(&mut pool, &pool_props(0)), hipSuccess);
        let mut n = u64::MAX;
        assert_eq!(hipmemPoolGetHostWaits(null_mut(), &mut n), hipErrorInvalidValue);
        assert_eq!(hipmemPoolGetHostWaits(pool, null_mut()), hipErrorInvalidValue);
        assert_eq!(n, u64::MAX, "nothing written on an error");
        assert_eq!(hipmemPoolGetHostWaits(pool, &mut n), hipSuccess);
        assert_eq!(n, 0, "a new pool has not waited");
        // Large requests, each growing the pool, the stream's earlier frees
        // completed (synchronized) first.
        for mib in [300u64, 400, 520] {
            let mut p: *mut c_void = null_mut();
            assert_eq!(hipMallocFromPoolAsync(&mut p, (mib << 20) as usize, pool, s), hipSuccess);
            assert_eq!(hipFreeAsync(p, s), hipSuccess);
            assert_eq!(hipStreamSynchronize(s), hipSuccess);
        }
        assert_eq!(hipmemPoolGetHostWaits(pool, &mut n), hipSuccess);
        assert_eq!(n, 0, "nothing was pending: no growth had to wait");
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
        assert_eq!(hipmemPoolGetHostWaits(pool, &mut n), hipErrorInvalidValue, "stale handle");
        assert_eq!(hipStreamDestroy(s), hipSuccess);
    }
}

/// hipmem's own extension hipmemPoolGetBackendCalls: it checks its input,
/// a new pool has asked nothing of the backend, an allocation that grows
/// the pool creates and maps physical memory (or allocates a segment), and
/// a trim gives it back, every count agreeing with the pool's reserved
/// bytes.
#[test]
fn backend_calls_extension() {
    let _serial = serial();
    init();
    unsafe {
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreateWithFlags(&mut s, hipStreamNonBlockingFlag()), hipSuccess);
        let mut pool: hipMemPool_t = null_mut();
        assert_eq!(hipMemPoolCreate(&mut pool, &pool_props(0)), hipSuccess);
        let mut c = hipmemBackendCalls::default();
        assert_eq!(hipmemPoolGetBackendCalls(null_mut(), &mut c), hipErrorInvalidValue);
        assert_eq!(hipmemPoolGetBackendCalls(pool, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipmemPoolGetBackendCalls(pool, &mut c), hipSuccess);
        assert_eq!(c, hipmemBackendCalls::default(), "a new pool has asked nothing");
        let reserved = |pool: hipMemPool_t| {
            let mut v: u64 = 0;
            assert_eq!(
                hipMemPoolGetAttribute(pool, hipMemPoolAttrReservedMemCurrent, (&raw mut v).cast()),
                hipSuccess
            );
            v
        };
        let mut p: *mut c_void = null_mut();
        assert_eq!(hipMallocFromPoolAsync(&mut p, 48 << 20, pool, s), hipSuccess);
        assert_eq!(hipmemPoolGetBackendCalls(pool, &mut c), hipSuccess);
        let held = reserved(pool);
        assert!(held >= 48 << 20, "{held}");
        assert_eq!(c.bytes_created, held, "{c:?}: what the pool holds is what it created");
        assert!(
            c.segments_allocated >= 1 || (c.granules_created >= 1 && c.maps >= 1),
            "{c:?}: growing made a segment or created and mapped physical memory"
        );
        assert_eq!(
            (c.segments_freed, c.granules_released, c.unmaps, c.bytes_released),
            (0, 0, 0, 0),
            "{c:?}"
        );
        assert_eq!(hipFreeAsync(p, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipMemPoolTrimTo(pool, 0), hipSuccess);
        let mut after = hipmemBackendCalls::default();
        assert_eq!(hipmemPoolGetBackendCalls(pool, &mut after), hipSuccess);
        assert_eq!(reserved(pool), 0);
        assert_eq!(after.bytes_released, after.bytes_created, "{after:?}: trimmed to nothing");
        assert!(after.segments_freed + after.granules_released >= 1, "{after:?}");
        assert!(after.released_on_worker <= after.granules_released, "{after:?}");
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
        assert_eq!(hipmemPoolGetBackendCalls(pool, &mut c), hipErrorInvalidValue, "stale handle");
        assert_eq!(hipStreamDestroy(s), hipSuccess);
    }
}

#[test]
fn pool_ipc() {
    let _serial = serial();
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    init();
    unsafe {
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        let mut plain: hipMemPool_t = null_mut();
        assert_eq!(hipMemPoolCreate(&mut plain, &pool_props(0)), hipSuccess);
        let mut pool: hipMemPool_t = null_mut();
        let props = hipMemPoolProps { handleTypes: hipMemHandleTypePosixFileDescriptor, ..pool_props(0) };
        assert_eq!(hipMemPoolCreate(&mut pool, &props), hipSuccess);

        // hipMemPoolExportToShareableHandle
        let mut fd: i32 = -1;
        let fdp: *mut c_void = (&mut fd as *mut i32).cast();
        let posix = hipMemHandleTypePosixFileDescriptor;
        assert_eq!(hipMemPoolExportToShareableHandle(null_mut(), pool, posix, 0), hipErrorInvalidValue);
        assert_eq!(hipMemPoolExportToShareableHandle(fdp, null_mut(), posix, 0), hipErrorInvalidValue);
        assert_eq!(
            hipMemPoolExportToShareableHandle(fdp, plain, posix, 0),
            hipErrorInvalidValue,
            "a pool not created for descriptors"
        );
        assert_eq!(
            hipMemPoolExportToShareableHandle(fdp, pool, hipMemHandleTypeNone, 0),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemPoolExportToShareableHandle(fdp, pool, hipMemHandleTypeWin32, 0),
            hipErrorInvalidValue
        );
        assert_eq!(hipMemPoolExportToShareableHandle(fdp, pool, posix, 1), hipErrorInvalidValue);
        assert_eq!(fd, -1, "nothing written on failure");
        assert_eq!(hipMemPoolExportToShareableHandle(fdp, pool, posix, 0), hipSuccess);
        assert!(fd >= 0);
        let exported = OwnedFd::from_raw_fd(fd);

        // A pointer of the pool, filled.
        let mut p: *mut c_void = null_mut();
        assert_eq!(hipMallocFromPoolAsync(&mut p, 4096, pool, s), hipSuccess);
        assert_eq!(hipMemsetAsync(p, 0x5a, 4096, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);

        // hipMemPoolExportPointer
        let mut data = hipMemPoolPtrExportData { reserved: [0; 64] };
        assert_eq!(hipMemPoolExportPointer(null_mut(), p), hipErrorInvalidValue);
        assert_eq!(hipMemPoolExportPointer(&mut data, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipMemPoolExportPointer(&mut data, p.add(256)), hipErrorInvalidValue, "interior pointer");
        let mut m: *mut c_void = null_mut();
        assert_eq!(hipMalloc(&mut m, 4096), hipSuccess);
        assert_eq!(hipMemPoolExportPointer(&mut data, m), hipErrorInvalidValue, "hipMalloc memory");
        let mut q: *mut c_void = null_mut();
        assert_eq!(hipMallocFromPoolAsync(&mut q, 4096, plain, s), hipSuccess);
        assert_eq!(hipMemPoolExportPointer(&mut data, q), hipErrorInvalidValue, "a pool not shareable");
        assert_eq!(hipMemPoolExportPointer(&mut data, p), hipSuccess);
        assert_ne!(data.reserved, [0; 64]);

        // hipMemPoolImportFromShareableHandle (the fd value cast to void*)
        let os = fd as usize as *mut c_void;
        let mut imp: hipMemPool_t = null_mut();
        assert_eq!(hipMemPoolImportFromShareableHandle(null_mut(), os, posix, 0), hipErrorInvalidValue);
        assert_eq!(hipMemPoolImportFromShareableHandle(&mut imp, os, posix, 1), hipErrorInvalidValue);
        assert_eq!(
            hipMemPoolImportFromShareableHandle(&mut imp, os, hipMemHandleTypeNone, 0),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemPoolImportFromShareableHandle(&mut imp, usize::MAX as *mut c_void, posix, 0),
            hipErrorInvalidValue,
            "not a descriptor"
        );
        let dev_null = std::fs::File::open("/dev/null").unwrap();
        assert_eq!(
            hipMemPoolImportFromShareableHandle(
                &mut imp,
                dev_null.as_raw_fd() as usize as *mut c_void,
                posix,
                0
            ),
            hipErrorInvalidValue,
            "a descriptor that is not an exported pool"
        );
        assert!(imp.is_null());
        assert_eq!(hipMemPoolImportFromShareableHandle(&mut imp, os, posix, 0), hipSuccess);
        assert!(!imp.is_null());
        assert_ne!(imp, pool);
        let mut r: *mut c_void = null_mut();
        assert_eq!(
            hipMallocFromPoolAsync(&mut r, 64, imp, s),
            hipErrorInvalidValue,
            "imported: cannot allocate"
        );
        let mut calls = hipmemBackendCalls::default();
        assert_eq!(
            hipmemPoolGetBackendCalls(imp, &mut calls),
            hipErrorNotSupported,
            "imported: its backend calls are the exporting process's"
        );
        let mut waits = 0u64;
        assert_eq!(
            hipmemPoolGetHostWaits(imp, &mut waits),
            hipErrorNotSupported,
            "imported: not hipmem's waits"
        );

        // hipMemPoolImportPointer
        let mut ip: *mut c_void = null_mut();
        assert_eq!(hipMemPoolImportPointer(null_mut(), imp, &mut data), hipErrorInvalidValue);
        assert_eq!(hipMemPoolImportPointer(&mut ip, null_mut(), &mut data), hipErrorInvalidValue);
        assert_eq!(hipMemPoolImportPointer(&mut ip, imp, null_mut()), hipErrorInvalidValue);
        let mut garbage = hipMemPoolPtrExportData { reserved: [0; 64] };
        for (i, b) in garbage.reserved.iter_mut().enumerate() {
            *b = (i * 37 + 11) as u8;
        }
        assert_eq!(hipMemPoolImportPointer(&mut ip, imp, &mut garbage), hipErrorInvalidValue, "garbage");
        let mut zeroed = hipMemPoolPtrExportData { reserved: [0; 64] };
        assert_eq!(hipMemPoolImportPointer(&mut ip, imp, &mut zeroed), hipErrorInvalidValue, "zeroes");
        let mut corrupted = data;
        corrupted.reserved[30] ^= 1;
        assert_eq!(hipMemPoolImportPointer(&mut ip, imp, &mut corrupted), hipErrorInvalidValue, "checksum");
        assert_eq!(
            hipMemPoolImportPointer(&mut ip, pool, &mut data),
            hipErrorInvalidValue,
            "into a pool that is not an import"
        );
        assert!(ip.is_null());
        assert_eq!(hipMemPoolImportPointer(&mut ip, imp, &mut data), hipSuccess);
        assert!(!ip.is_null());
        // The same memory: the exporter's bytes are seen, the importer's writes are seen back.
        let mut back = vec![0u8; 4096];
        assert_eq!(hipMemcpy(back.as_mut_ptr().cast(), ip, 4096, hipMemcpyDeviceToHost), hipSuccess);
        assert!(back.iter().all(|&b| b == 0x5a));
        assert_eq!(hipMemset(ip, 0x3c, 4096), hipSuccess);
        assert_eq!(hipMemcpy(back.as_mut_ptr().cast(), p, 4096, hipMemcpyDeviceToHost), hipSuccess);
        assert!(back.iter().all(|&b| b == 0x3c));
        // hipFree of an imported pointer unmaps it here only; hipFreeAsync too.
        assert_eq!(hipFree(ip), hipSuccess);
        assert_eq!(hipFree(ip), hipErrorInvalidValue, "double free");
        ip = null_mut();
        assert_eq!(hipMemPoolImportPointer(&mut ip, imp, &mut data), hipSuccess);
        assert_eq!(hipFreeAsync(ip, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipMemcpy(back.as_mut_ptr().cast(), p, 4096, hipMemcpyDeviceToHost), hipSuccess);
        assert!(back.iter().all(|&b| b == 0x3c), "the exporter's memory survives the importer's frees");

        // A destroyed imported pool is a bad handle.
        assert_eq!(hipMemPoolDestroy(imp), hipSuccess);
        assert_eq!(hipMemPoolImportPointer(&mut ip, imp, &mut data), hipErrorInvalidValue);
        assert_eq!(hipMemPoolDestroy(imp), hipErrorInvalidValue);
        drop(exported);

        assert_eq!(hipFreeAsync(p, s), hipSuccess);
        assert_eq!(hipFreeAsync(q, s), hipSuccess);
        assert_eq!(hipFree(m), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
        assert_eq!(hipMemPoolDestroy(plain), hipSuccess);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
    }
}

/// The pool IPC exports between two processes: this test binary runs itself
/// again as the importer (`HIPMEM_CAPI_IPC_SOCKET` set), and the two talk
/// through `hipmem_rs::ipc` (the descriptor travels as SCM_RIGHTS).
#[test]
fn pool_ipc_with_a_child() {
    let _serial = serial();
    use hipmem_rs::{IpcListener, IpcStream};
    use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;
    const SOCKET: &str = "HIPMEM_CAPI_IPC_SOCKET";
    init();
    let posix = hipMemHandleTypePosixFileDescriptor;
    if let Ok(path) = std::env::var(SOCKET) {
        let c = IpcStream::connect(&path).expect("connect to the parent");
        c.set_recv_timeout(Some(Duration::from_secs(120))).unwrap();
        let (bytes, fds) = c.recv().expect("the pool and the pointer");
        assert_eq!((bytes.len(), fds.len()), (64, 1));
        let mut data = hipMemPoolPtrExportData { reserved: bytes.try_into().unwrap() };
        unsafe {
            let mut imp: hipMemPool_t = null_mut();
            let os = fds[0].as_raw_fd() as usize as *mut c_void;
            assert_eq!(hipMemPoolImportFromShareableHandle(&mut imp, os, posix, 0), hipSuccess);
            let mut r: *mut c_void = null_mut();
            assert_eq!(hipMallocFromPoolAsync(&mut r, 64, imp, null_mut()), hipErrorInvalidValue);
            let mut ip: *mut c_void = null_mut();
            assert_eq!(hipMemPoolImportPointer(&mut ip, imp, &mut data), hipSuccess);
            let mut back = vec![0u8; 4096];
            assert_eq!(hipMemcpy(back.as_mut_ptr().cast(), ip, 4096, hipMemcpyDeviceToHost), hipSuccess);
            assert!(back.iter().all(|&b| b == 0x5a), "the parent's bytes");
            assert_eq!(hipMemset(ip, 0x3c, 4096), hipSuccess);
            assert_eq!(hipFree(ip), hipSuccess);
            assert_eq!(hipMemPoolDestroy(imp), hipSuccess);
        }
        c.send_value(1).unwrap();
        return;
    }
    let path = std::env::temp_dir().join(format!("hipmem-capi-ipc-{}.sock", std::process::id()));
    let listener = IpcListener::bind(&path).unwrap();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["pool_ipc_with_a_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(SOCKET, &path)
        .spawn()
        .expect("start the importing child");
    unsafe {
        let mut pool: hipMemPool_t = null_mut();
        let props = hipMemPoolProps { handleTypes: posix, ..pool_props(0) };
        assert_eq!(hipMemPoolCreate(&mut pool, &props), hipSuccess);
        let mut p: *mut c_void = null_mut();
        assert_eq!(hipMallocFromPoolAsync(&mut p, 4096, pool, null_mut()), hipSuccess);
        assert_eq!(hipMemset(p, 0x5a, 4096), hipSuccess);
        let mut fd: i32 = -1;
        assert_eq!(
            hipMemPoolExportToShareableHandle((&mut fd as *mut i32).cast(), pool, posix, 0),
            hipSuccess
        );
        let exported = OwnedFd::from_raw_fd(fd);
        let mut data = hipMemPoolPtrExportData { reserved: [0; 64] };
        assert_eq!(hipMemPoolExportPointer(&mut data, p), hipSuccess);
        let s = listener.accept().expect("the child connects");
        s.set_recv_timeout(Some(Duration::from_secs(120))).unwrap();
        s.send(&data.reserved, &[exported.as_fd()]).unwrap();
        assert_eq!(s.recv_value().unwrap(), 1);
        let status = { child }.wait().unwrap();
        assert!(status.success(), "the importing child failed: {status}");
        drop(exported);
        let mut back = vec![0u8; 4096];
        assert_eq!(hipMemcpy(back.as_mut_ptr().cast(), p, 4096, hipMemcpyDeviceToHost), hipSuccess);
        assert!(back.iter().all(|&b| b == 0x3c), "the child's write");
        assert_eq!(hipFree(p), hipSuccess);
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
    }
    let _ = std::fs::remove_file(&path);
}

#[test]
fn managed_memory() {
    let _serial = serial();
    init();
    const SIZE: usize = 1 << 20;
    const PAGE: usize = 4096;
    unsafe {
        let mut count = 0;
        assert_eq!(hipGetDeviceCount(&mut count), hipSuccess);
        assert_eq!((hipCpuDeviceId, hipInvalidDeviceId), (-1, -2));
        assert_eq!((hipMemAttachGlobal, hipMemAttachHost, hipMemAttachSingle), (1, 2, 4));

        // hipMallocManaged
        let mut p: *mut c_void = null_mut();
        assert_eq!(hipMallocManaged(null_mut(), SIZE, hipMemAttachGlobal), hipErrorInvalidValue);
        assert_eq!(hipMallocManaged(&mut p, 0, hipMemAttachGlobal), hipErrorInvalidValue);
        for flags in [0, 3, hipMemAttachSingle, 8] {
            assert_eq!(hipMallocManaged(&mut p, SIZE, flags), hipErrorInvalidValue, "flags {flags}");
        }
        assert!(p.is_null());
        assert_eq!(hipMallocManaged(&mut p, usize::MAX, hipMemAttachGlobal), hipErrorOutOfMemory);
        assert_eq!(hipMallocManaged(&mut p, SIZE, hipMemAttachGlobal), hipSuccess);
        assert!(!p.is_null());
        let mut h: *mut c_void = null_mut();
        assert_eq!(hipMallocManaged(&mut h, 3 * PAGE + 5, hipMemAttachHost), hipSuccess);
        let mut q: *mut c_void = null_mut();
        assert_eq!(hipMalloc(&mut q, SIZE), hipSuccess);

        // One address for the host and the devices.
        let bytes = p.cast::<u8>();
        for i in 0..SIZE {
            bytes.add(i).write(i as u8);
        }
        assert_eq!(hipMemcpy(q, p, SIZE, hipMemcpyDefault), hipSuccess);
        let mut back = vec![0u8; SIZE];
        assert_eq!(hipMemcpy(back.as_mut_ptr().cast(), q, SIZE, hipMemcpyDeviceToHost), hipSuccess);
        assert!(back.iter().enumerate().all(|(i, &b)| b == i as u8));
        assert_eq!(hipMemset(p, 7, 16), hipSuccess);
        assert_eq!(bytes.add(15).read(), 7);
        assert_eq!(bytes.add(16).read(), 16);

        // hipPointerGetAttributes of managed memory
        let mut a: hipPointerAttribute_t = std::mem::zeroed();
        assert_eq!(hipPointerGetAttributes(&mut a, bytes.add(100).cast()), hipSuccess);
        assert_eq!((a.type_, a.device, a.isManaged), (hipMemoryTypeManaged, 0, 1));
        assert_eq!(a.allocationFlags, hipMemAttachGlobal);
        assert_eq!((n(a.devicePointer), n(a.hostPointer)), (n(p) + 100, n(p) + 100));
        assert_eq!(hipPointerGetAttributes(&mut a, h), hipSuccess);
        assert_eq!((a.type_, a.isManaged, a.allocationFlags), (hipMemoryTypeManaged, 1, hipMemAttachHost));

        // hipMemPrefetchAsync
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        assert_eq!(hipMemPrefetchAsync(p, SIZE, 0, s), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(range_attr(hipMemRangeAttributeLastPrefetchLocation, p, SIZE), (hipSuccess, 0));
        assert_eq!(hipMemPrefetchAsync(p, SIZE, hipCpuDeviceId, null_mut()), hipSuccess);
        assert_eq!(hipDeviceSynchronize(), hipSuccess);
        assert_eq!(range_attr(hipMemRangeAttributeLastPrefetchLocation, p, SIZE), (hipSuccess, -1));
        assert_eq!(hipMemPrefetchAsync(null(), SIZE, 0, s), hipErrorInvalidValue);
        assert_eq!(hipMemPrefetchAsync(p, 0, 0, s), hipErrorInvalidValue);
        assert_eq!(hipMemPrefetchAsync(p, usize::MAX, 0, s), hipErrorInvalidValue, "overflow");
        assert_eq!(hipMemPrefetchAsync(p, SIZE + 1, 0, s), hipErrorInvalidValue, "past the end");
        assert_eq!(hipMemPrefetchAsync(q, SIZE, 0, s), hipErrorInvalidValue, "not managed");
        assert_eq!(hipMemPrefetchAsync(p, SIZE, count, s), hipErrorInvalidDevice);
        assert_eq!(hipMemPrefetchAsync(p, SIZE, hipInvalidDeviceId, s), hipErrorInvalidDevice);

        // hipMemAdvise (advice never changes the last prefetch location)
        assert_eq!(hipMemAdvise(p, SIZE, hipMemAdviseSetReadMostly, 0), hipSuccess);
        assert_eq!(range_attr(hipMemRangeAttributeReadMostly, p, SIZE), (hipSuccess, 1));
        assert_eq!(
            hipMemAdvise(p, SIZE, hipMemAdviseUnsetReadMostly, count + 5),
            hipSuccess,
            "device ignored"
        );
        assert_eq!(range_attr(hipMemRangeAttributeReadMostly, p, SIZE), (hipSuccess, 0));
        assert_eq!(hipMemAdvise(p, SIZE, hipMemAdviseSetPreferredLocation, 0), hipSuccess);
        assert_eq!(range_attr(hipMemRangeAttributePreferredLocation, p, SIZE), (hipSuccess, 0));
        assert_eq!(hipMemAdvise(p, SIZE, hipMemAdviseSetAccessedBy, hipCpuDeviceId), hipSuccess);
        assert_eq!(range_attr(hipMemRangeAttributeLastPrefetchLocation, p, SIZE), (hipSuccess, -1));
        assert_eq!(hipMemAdvise(null(), SIZE, hipMemAdviseSetPreferredLocation, 0), hipErrorInvalidValue);
        assert_eq!(hipMemAdvise(p, 0, hipMemAdviseSetPreferredLocation, 0), hipErrorInvalidValue);
        assert_eq!(hipMemAdvise(p, SIZE + 1, hipMemAdviseSetPreferredLocation, 0), hipErrorInvalidValue);
        for unknown in [0, 7, 99, 102, -1] {
            assert_eq!(hipMemAdvise(p, SIZE, unknown, 0), hipErrorInvalidValue, "advice {unknown}");
        }
        assert_eq!(hipMemAdvise(q, SIZE, hipMemAdviseSetPreferredLocation, 0), hipErrorInvalidValue);
        assert_eq!(hipMemAdvise(p, SIZE, hipMemAdviseSetPreferredLocation, count), hipErrorInvalidDevice);
        assert_eq!(
            hipMemAdvise(p, SIZE, hipMemAdviseSetAccessedBy, hipInvalidDeviceId),
            hipErrorInvalidDevice
        );
        assert_eq!(hipMemAdvise(p, SIZE, hipMemAdviseSetCoarseGrain, 0), hipErrorNotSupported, "AMD only");
        assert_eq!(hipMemAdvise(p, SIZE, hipMemAdviseUnsetCoarseGrain, 0), hipErrorNotSupported, "AMD only");

        // hipMemRangeGetAttribute: non-uniform ranges and AccessedBy
        assert_eq!(hipMemAdvise(h, PAGE, hipMemAdviseSetReadMostly, 0), hipSuccess);
        assert_eq!(hipMemAdvise(h, 1, hipMemAdviseSetPreferredLocation, 0), hipSuccess, "a whole page");
        assert_eq!(range_attr(hipMemRangeAttributeReadMostly, h, PAGE), (hipSuccess, 1));
        assert_eq!(range_attr(hipMemRangeAttributeReadMostly, h, 3 * PAGE + 5), (hipSuccess, 0));
        assert_eq!(range_attr(hipMemRangeAttributePreferredLocation, h, PAGE), (hipSuccess, 0));
        assert_eq!(range_attr(hipMemRangeAttributePreferredLocation, h, 2 * PAGE), (hipSuccess, -2));
        let mut by = [0x5a5a_i32; 3];
        assert_eq!(
            hipMemRangeGetAttribute(by.as_mut_ptr().cast(), 12, hipMemRangeAttributeAccessedBy, p, SIZE),
            hipSuccess
        );
        assert_eq!(by, [-1, -2, -2]);
        assert_eq!(
            hipMemRangeGetAttribute(null_mut(), 4, hipMemRangeAttributeReadMostly, p, SIZE),
            hipErrorInvalidValue
        );
        let mut v = 0i32;
        let vp: *mut c_void = (&raw mut v).cast();
        assert_eq!(
            hipMemRangeGetAttribute(vp, 0, hipMemRangeAttributeReadMostly, p, SIZE),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemRangeGetAttribute(vp, 4, hipMemRangeAttributeReadMostly, p, 0),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemRangeGetAttribute(vp, 4, hipMemRangeAttributeReadMostly, null(), SIZE),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemRangeGetAttribute(by.as_mut_ptr().cast(), 8, hipMemRangeAttributeReadMostly, p, SIZE),
            hipErrorInvalidValue,
            "scalar attributes need 4 bytes"
        );
        assert_eq!(
            hipMemRangeGetAttribute(by.as_mut_ptr().cast(), 6, hipMemRangeAttributeAccessedBy, p, SIZE),
            hipErrorInvalidValue,
            "AccessedBy needs a multiple of 4"
        );
        for unknown in [0, 5, 99, -1] {
            assert_eq!(
                hipMemRangeGetAttribute(vp, 4, unknown, p, SIZE),
                hipErrorInvalidValue,
                "attribute {unknown}"
            );
        }
        assert_eq!(
            hipMemRangeGetAttribute(vp, 4, hipMemRangeAttributeCoherencyMode, p, SIZE),
            hipErrorNotSupported,
            "AMD only"
        );
        assert_eq!(
            hipMemRangeGetAttribute(vp, 4, hipMemRangeAttributeReadMostly, q, SIZE),
            hipErrorInvalidValue
        );

        // hipMemRangeGetAttributes
        let (mut rm, mut pref, mut last) = (9i32, 9i32, 9i32);
        let mut acc = [9i32; 2];
        let mut data: [*mut c_void; 4] =
            [(&raw mut rm).cast(), (&raw mut pref).cast(), acc.as_mut_ptr().cast(), (&raw mut last).cast()];
        let mut sizes: [usize; 4] = [4, 4, 8, 4];
        let mut attrs: [hipMemRangeAttribute; 4] = [
            hipMemRangeAttributeReadMostly,
            hipMemRangeAttributePreferredLocation,
            hipMemRangeAttributeAccessedBy,
            hipMemRangeAttributeLastPrefetchLocation,
        ];
        let (dp, sp, ap) = (data.as_mut_ptr(), sizes.as_mut_ptr(), attrs.as_mut_ptr());
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, p, SIZE), hipSuccess);
        assert_eq!((rm, pref, acc, last), (0, 0, [-1, -2], -1));
        rm = 9;
        assert_eq!(hipMemRangeGetAttributes(null_mut(), sp, ap, 4, p, SIZE), hipErrorInvalidValue);
        assert_eq!(hipMemRangeGetAttributes(dp, null_mut(), ap, 4, p, SIZE), hipErrorInvalidValue);
        assert_eq!(hipMemRangeGetAttributes(dp, sp, null_mut(), 4, p, SIZE), hipErrorInvalidValue);
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 0, p, SIZE), hipErrorInvalidValue);
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, null(), SIZE), hipErrorInvalidValue);
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, p, 0), hipErrorInvalidValue);
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, q, SIZE), hipErrorInvalidValue, "not managed");
        data[3] = null_mut();
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, p, SIZE), hipErrorInvalidValue, "a null buffer");
        data[3] = (&raw mut last).cast();
        sizes[3] = 0;
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, p, SIZE), hipErrorInvalidValue, "a zero size");
        sizes[3] = 8;
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, p, SIZE), hipErrorInvalidValue, "a scalar of 8");
        sizes[3] = 4;
        sizes[2] = 6;
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, p, SIZE), hipErrorInvalidValue, "AccessedBy of 6");
        sizes[2] = 8;
        attrs[3] = 99;
        assert_eq!(hipMemRangeGetAttributes(dp, sp, ap, 4, p, SIZE), hipErrorInvalidValue, "unknown");
        assert_eq!(rm, 9, "nothing is written before every argument is checked");
        attrs[3] = hipMemRangeAttributeLastPrefetchLocation;

        // hipStreamAttachMemAsync
        assert_eq!(hipStreamAttachMemAsync(s, p, 0, hipMemAttachSingle), hipSuccess);
        assert_eq!(hipStreamAttachMemAsync(s, p, SIZE, hipMemAttachGlobal), hipSuccess);
        assert_eq!(hipStreamAttachMemAsync(null_mut(), h, 0, hipMemAttachHost), hipSuccess);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipStreamAttachMemAsync(s, null_mut(), 0, hipMemAttachSingle), hipErrorInvalidValue);
        for flags in [0, 3, 8, 7] {
            assert_eq!(hipStreamAttachMemAsync(s, p, 0, flags), hipErrorInvalidValue, "flags {flags}");
        }
        assert_eq!(
            hipStreamAttachMemAsync(null_mut(), p, 0, hipMemAttachSingle),
            hipErrorInvalidValue,
            "Single with the null stream"
        );
        assert_eq!(
            hipStreamAttachMemAsync(s, p, SIZE - 1, hipMemAttachSingle),
            hipErrorInvalidValue,
            "length"
        );
        assert_eq!(hipStreamAttachMemAsync(s, q, 0, hipMemAttachSingle), hipErrorInvalidValue, "not managed");

        // A destroyed stream.
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipMemPrefetchAsync(p, SIZE, 0, s), hipErrorContextIsDestroyed);
        assert_eq!(hipStreamAttachMemAsync(s, p, 0, hipMemAttachSingle), hipErrorInvalidHandle);

        // hipFree of managed memory
        assert_eq!(hipFree(bytes.add(8).cast()), hipErrorInvalidValue, "into the allocation");
        assert_eq!(hipFree(p), hipSuccess);
        assert_eq!(hipFree(p), hipErrorInvalidValue, "double free");
        assert_eq!(hipFree(h), hipSuccess);
        assert_eq!(hipFree(q), hipSuccess);
    }
}

fn hipStreamNonBlockingFlag() -> u32 {
    1
}

#[test]
fn virtual_memory_management() {
    let _serial = serial();
    init();
    unsafe {
        let prop = hipMemAllocationProp {
            type_: hipMemAllocationTypePinned,
            requestedHandleType: hipMemHandleTypePosixFileDescriptor,
            location: hipMemLocation { type_: hipMemLocationTypeDevice, id: 0 },
            win32HandleMetaData: null_mut(),
            allocFlags: Default::default(),
        };
        let mut g = 0usize;
        assert_eq!(
            hipMemGetAllocationGranularity(&mut g, &prop, hipMemAllocationGranularityMinimum),
            hipSuccess
        );
        assert!(g > 0);
        assert_eq!(hipMemGetAllocationGranularity(null_mut(), &prop, 0), hipErrorInvalidValue);
        assert_eq!(hipMemGetAllocationGranularity(&mut g, null(), 0), hipErrorInvalidValue);
        assert_eq!(hipMemGetAllocationGranularity(&mut g, &prop, 5), hipErrorInvalidValue);

        let mut h: hipMemGenericAllocationHandle_t = null_mut();
        assert_eq!(hipMemCreate(null_mut(), g, &prop, 0), hipErrorInvalidValue);
        assert_eq!(hipMemCreate(&mut h, g, null(), 0), hipErrorInvalidValue);
        assert_eq!(hipMemCreate(&mut h, 0, &prop, 0), hipErrorInvalidValue);
        assert_eq!(hipMemCreate(&mut h, g, &prop, 1), hipErrorInvalidValue);
        assert_eq!(hipMemCreate(&mut h, g + 1, &prop, 0), hipErrorInvalidValue);
        let mut bad = prop;
        bad.type_ = hipMemAllocationTypeInvalid;
        assert_eq!(hipMemCreate(&mut h, g, &bad, 0), hipErrorInvalidValue);
        let mut bad = prop;
        bad.location.id = 99;
        assert_eq!(hipMemCreate(&mut h, g, &bad, 0), hipErrorInvalidValue);
        let mut bad = prop;
        bad.requestedHandleType = hipMemHandleTypeWin32;
        assert_eq!(hipMemCreate(&mut h, g, &bad, 0), hipErrorNotSupported);
        assert_eq!(hipMemCreate(&mut h, 2 * g, &prop, 0), hipSuccess);

        let mut va: *mut c_void = null_mut();
        assert_eq!(hipMemAddressReserve(null_mut(), 2 * g, 0, null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipMemAddressReserve(&mut va, 2 * g, 0, null_mut(), 1), hipErrorInvalidValue);
        assert_eq!(hipMemAddressReserve(&mut va, 0, 0, null_mut(), 0), hipErrorOutOfMemory);
        assert_eq!(hipMemAddressReserve(&mut va, g + 1, 0, null_mut(), 0), hipErrorOutOfMemory);
        assert_eq!(hipMemAddressReserve(&mut va, 2 * g, 3, null_mut(), 0), hipErrorOutOfMemory);
        assert_eq!(hipMemAddressReserve(&mut va, 2 * g, 0, null_mut(), 0), hipSuccess);

        assert_eq!(hipMemMap(null_mut(), 2 * g, 0, h, 0), hipErrorInvalidValue);
        assert_eq!(hipMemMap(va, 2 * g, 0, null_mut(), 0), hipErrorInvalidValue);
        assert_eq!(hipMemMap(va, 0, 0, h, 0), hipErrorInvalidValue);
        assert_eq!(hipMemMap(va, 2 * g, 0, h, 1), hipErrorInvalidValue);
        // A nonzero offset into a physical allocation (on an allocation that
        // is not exportable: on CUDA an exportable one is one driver
        // allocation, which maps only from its start).
        let plain = hipMemAllocationProp { requestedHandleType: hipMemHandleTypeNone, ..prop };
        let mut h2: hipMemGenericAllocationHandle_t = null_mut();
        assert_eq!(hipMemCreate(&mut h2, 2 * g, &plain, 0), hipSuccess);
        assert_eq!(hipMemMap(va, g, g, h2, 0), hipSuccess, "a nonzero offset into the allocation");
        assert_eq!(hipMemUnmap(va, g), hipSuccess);
        assert_eq!(hipMemRelease(h2), hipSuccess);
        assert_eq!(hipMemMap(va, 2 * g, 0, h, 0), hipSuccess);

        let rw = hipMemAccessDesc {
            location: hipMemLocation { type_: hipMemLocationTypeDevice, id: 0 },
            flags: hipMemAccessFlagsProtReadWrite,
        };
        let mut f: u64 = 99;
        let loc = rw.location;
        assert_eq!(hipMemGetAccess(&mut f, &loc, va), hipSuccess);
        assert_eq!(f, 0, "a new mapping has no access");
        assert_eq!(hipMemSetAccess(null_mut(), 2 * g, &rw, 1), hipErrorInvalidValue);
        assert_eq!(hipMemSetAccess(va, 0, &rw, 1), hipErrorInvalidValue);
        assert_eq!(hipMemSetAccess(va, 2 * g, null(), 1), hipErrorInvalidValue);
        assert_eq!(hipMemSetAccess(va, 2 * g, &rw, 0), hipErrorInvalidValue);
        let mut bad = rw;
        bad.location.id = 99;
        assert_eq!(hipMemSetAccess(va, 2 * g, &bad, 1), hipErrorInvalidValue);
        assert_eq!(hipMemSetAccess(va, 2 * g, &rw, 1), hipSuccess);
        assert_eq!(hipMemGetAccess(&mut f, &loc, va), hipSuccess);
        assert_eq!(f, hipMemAccessFlagsProtReadWrite as u64);
        assert_eq!(hipMemGetAccess(null_mut(), &loc, va), hipErrorInvalidValue);
        assert_eq!(hipMemGetAccess(&mut f, null(), va), hipErrorInvalidValue);
        assert_eq!(hipMemGetAccess(&mut f, &loc, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipMemset(va, 3, 2 * g), hipSuccess);

        // retain / properties / export / import
        let mut r: hipMemGenericAllocationHandle_t = null_mut();
        assert_eq!(hipMemRetainAllocationHandle(&mut r, va), hipSuccess);
        assert_eq!(r, h);
        assert_eq!(hipMemRetainAllocationHandle(null_mut(), va), hipErrorInvalidValue);
        assert_eq!(hipMemRelease(r), hipSuccess);
        let mut out: hipMemAllocationProp = std::mem::zeroed();
        assert_eq!(hipMemGetAllocationPropertiesFromHandle(&mut out, h), hipSuccess);
        assert_eq!(
            (out.type_, out.requestedHandleType, out.location),
            (prop.type_, prop.requestedHandleType, prop.location)
        );
        assert_eq!(hipMemGetAllocationPropertiesFromHandle(null_mut(), h), hipErrorInvalidValue);
        assert_eq!(
            hipMemGetAllocationPropertiesFromHandle(&mut out, 0x1234usize as *mut c_void),
            hipErrorInvalidValue
        );
        let mut fd: i32 = -1;
        let fdp: *mut c_void = (&raw mut fd).cast();
        assert_eq!(
            hipMemExportToShareableHandle(null_mut(), h, hipMemHandleTypePosixFileDescriptor, 0),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemExportToShareableHandle(fdp, h, hipMemHandleTypePosixFileDescriptor, 1),
            hipErrorInvalidValue
        );
        assert_eq!(hipMemExportToShareableHandle(fdp, h, hipMemHandleTypeNone, 0), hipErrorInvalidValue);
        assert_eq!(hipMemExportToShareableHandle(fdp, h, hipMemHandleTypePosixFileDescriptor, 0), hipSuccess);
        assert!(fd >= 0);
        let mut imp: hipMemGenericAllocationHandle_t = null_mut();
        let os = fd as usize as *mut c_void;
        assert_eq!(
            hipMemImportFromShareableHandle(null_mut(), os, hipMemHandleTypePosixFileDescriptor),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemImportFromShareableHandle(&mut imp, os, hipMemHandleTypeWin32),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipMemImportFromShareableHandle(&mut imp, os, hipMemHandleTypePosixFileDescriptor),
            hipSuccess
        );
        assert_eq!(hipMemRelease(imp), hipSuccess);

        // unmap / release / free
        assert_eq!(hipMemUnmap(va, g), hipErrorInvalidValue, "must cover whole mappings");
        assert_eq!(hipMemAddressFree(va, 2 * g), hipErrorInvalidValue, "still mapped");
        assert_eq!(hipMemRelease(h), hipSuccess, "the mapping keeps the memory alive");
        assert_eq!(hipMemset(va, 4, 2 * g), hipSuccess);
        assert_eq!(hipMemRelease(h), hipErrorInvalidValue, "double release");
        assert_eq!(hipMemRelease(null_mut()), hipErrorInvalidValue);
        assert_eq!(hipMemUnmap(va, 2 * g), hipSuccess);
        assert_eq!(hipMemRetainAllocationHandle(&mut r, va), hipErrorInvalidValue, "reserved but unmapped");
        assert_eq!(hipMemAddressFree(null_mut(), 2 * g), hipErrorInvalidValue);
        assert_eq!(hipMemAddressFree(va, 2 * g), hipSuccess);
        assert_eq!(hipMemAddressFree(va, 2 * g), hipErrorInvalidValue);
    }
}

static HOST_FN_CALLS: AtomicUsize = AtomicUsize::new(0);
unsafe extern "C" fn count_call(user: *mut c_void) {
    HOST_FN_CALLS.fetch_add(user as usize, Ordering::SeqCst);
}

#[test]
fn devices_streams_events_and_errors() {
    let _serial = serial();
    init();
    unsafe {
        assert_eq!(hipInit(1), hipErrorInvalidValue);
        let mut count = 0;
        assert_eq!(hipGetDeviceCount(&mut count), hipSuccess);
        assert!(count >= 1);
        assert_eq!(hipGetDeviceCount(null_mut()), hipErrorInvalidValue);
        assert_eq!(hipSetDevice(0), hipSuccess);
        assert_eq!(hipSetDevice(count), hipErrorInvalidDevice);
        assert_eq!(hipSetDevice(-1), hipErrorInvalidDevice);
        let mut dev = -1;
        assert_eq!(hipGetDevice(&mut dev), hipSuccess);
        assert_eq!(dev, 0);
        assert_eq!(hipGetDevice(null_mut()), hipErrorInvalidValue);
        let mut v = 0;
        assert_eq!(hipDeviceGetAttribute(&mut v, hipDeviceAttributeMemoryPoolsSupported, 0), hipSuccess);
        assert_eq!(v, 1);
        assert_eq!(hipDeviceGetAttribute(&mut v, hipDeviceAttributeMultiprocessorCount, 0), hipSuccess);
        assert_eq!(
            hipDeviceGetAttribute(null_mut(), hipDeviceAttributeMemoryPoolsSupported, 0),
            hipErrorInvalidValue
        );
        assert_eq!(
            hipDeviceGetAttribute(&mut v, hipDeviceAttributeMemoryPoolsSupported, count),
            hipErrorInvalidDevice
        );
        assert_eq!(hipDeviceGetAttribute(&mut v, 123456, 0), hipErrorInvalidValue);
        assert_eq!(hipDeviceSynchronize(), hipSuccess);

        // streams
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(null_mut()), hipErrorInvalidValue);
        assert_eq!(hipStreamCreateWithFlags(&mut s, 0x10), hipErrorInvalidValue);
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        assert_eq!(hipStreamQuery(s), hipSuccess);
        assert_eq!(hipLaunchHostFunc(s, Some(count_call), 3usize as *mut c_void), hipSuccess);
        assert_eq!(hipLaunchHostFunc(s, None, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(HOST_FN_CALLS.load(Ordering::SeqCst), 3);
        assert_eq!(hipStreamSynchronize(hip_stream_legacy()), hipSuccess);

        // events
        let (mut e1, mut e2): (hipEvent_t, hipEvent_t) = (null_mut(), null_mut());
        assert_eq!(hipEventCreate(null_mut()), hipErrorInvalidValue);
        assert_eq!(hipEventCreateWithFlags(&mut e1, 0x40), hipErrorInvalidValue);
        assert_eq!(
            hipEventCreateWithFlags(&mut e1, 0x4),
            hipErrorInvalidValue,
            "interprocess needs disable-timing"
        );
        assert_eq!(hipEventCreate(&mut e1), hipSuccess);
        assert_eq!(hipEventCreateWithFlags(&mut e2, 0), hipSuccess);
        assert_eq!(hipEventRecord(e1, s), hipSuccess);
        assert_eq!(hipEventRecord(e2, s), hipSuccess);
        assert_eq!(hipEventRecord(null_mut(), s), hipErrorInvalidHandle);
        assert_eq!(hipStreamWaitEvent(null_mut(), e2, 0), hipSuccess);
        assert_eq!(hipStreamWaitEvent(null_mut(), e2, 1), hipErrorInvalidValue);
        assert_eq!(hipStreamWaitEvent(null_mut(), null_mut(), 0), hipErrorInvalidHandle);
        assert_eq!(hipEventSynchronize(e2), hipSuccess);
        assert_eq!(hipEventQuery(e2), hipSuccess);
        assert_eq!(hipEventQuery(null_mut()), hipErrorInvalidHandle);
        assert_eq!(hipEventSynchronize(null_mut()), hipErrorInvalidHandle);
        let mut ms = -1.0f32;
        assert_eq!(hipEventElapsedTime(&mut ms, e1, e2), hipSuccess);
        assert!(ms >= 0.0);
        assert_eq!(hipEventElapsedTime(null_mut(), e1, e2), hipErrorInvalidValue);
        assert_eq!(hipEventElapsedTime(&mut ms, e1, null_mut()), hipErrorInvalidHandle);
        assert_eq!(hipEventDestroy(e1), hipSuccess);
        assert_eq!(hipEventDestroy(e1), hipErrorInvalidHandle, "double destroy");
        assert_eq!(hipEventRecord(e1, s), hipErrorInvalidHandle, "destroyed event");

        // a pending stream reads NotReady: a host function holds it
        static GATE: AtomicUsize = AtomicUsize::new(0);
        unsafe extern "C" fn wait_gate(_: *mut c_void) {
            while GATE.load(Ordering::SeqCst) == 0 {
                std::thread::yield_now();
            }
        }
        assert_eq!(hipLaunchHostFunc(s, Some(wait_gate), null_mut()), hipSuccess);
        assert_eq!(hipEventRecord(e2, s), hipSuccess);
        assert_eq!(hipStreamQuery(s), hipErrorNotReady);
        assert_eq!(hipEventQuery(e2), hipErrorNotReady);
        GATE.store(1, Ordering::SeqCst);
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipEventDestroy(e2), hipSuccess);

        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipStreamDestroy(s), hipErrorInvalidHandle, "double destroy");
        assert_eq!(hipStreamDestroy(null_mut()), hipErrorInvalidHandle);
        assert_eq!(hipStreamSynchronize(s), hipErrorInvalidHandle);
        assert_eq!(hipStreamQuery(s), hipErrorInvalidHandle);
        assert_eq!(hipStreamWaitEvent(s, null_mut(), 0), hipErrorInvalidHandle);
        assert_eq!(hipLaunchHostFunc(s, Some(count_call), null_mut()), hipErrorInvalidHandle);
        assert_eq!(hipEventRecord(e2, s), hipErrorInvalidHandle);
        assert_eq!(hipStreamSynchronize(0xbad0usize as hipStream_t), hipErrorInvalidHandle, "foreign handle");
    }
}

unsafe fn hip_stream_legacy() -> hipStream_t {
    1usize as hipStream_t
}

#[test]
fn last_error_and_error_names() {
    let _serial = serial();
    init();
    std::thread::spawn(|| unsafe {
        assert_eq!(hipGetLastError(), hipSuccess);
        assert_eq!(hipMalloc(null_mut(), 1), hipErrorInvalidValue);
        assert_eq!(hipDeviceSynchronize(), hipSuccess, "success does not reset it");
        assert_eq!(hipPeekAtLastError(), hipErrorInvalidValue);
        assert_eq!(hipPeekAtLastError(), hipErrorInvalidValue);
        std::thread::spawn(|| assert_eq!(hipGetLastError(), hipSuccess, "per thread")).join().unwrap();
        assert_eq!(hipGetLastError(), hipErrorInvalidValue);
        assert_eq!(hipGetLastError(), hipSuccess, "reset");
    })
    .join()
    .unwrap();
    for (code, name, text) in hipmem::runtime_api::ERROR_TEXTS {
        let got_name = unsafe { CStr::from_ptr(hipGetErrorName(code)) };
        let got_text = unsafe { CStr::from_ptr(hipGetErrorString(code)) };
        assert_eq!(got_name, name);
        assert_eq!(got_text, text);
        assert_eq!(got_name.to_str().unwrap(), hipmem_rs_name(code));
    }
    assert_eq!(unsafe { CStr::from_ptr(hipGetErrorName(12345)) }, c"hipErrorUnknown");
    assert_eq!(unsafe { CStr::from_ptr(hipGetErrorString(12345)) }, c"unknown error");
    assert_eq!(unsafe { CStr::from_ptr(hipGetErrorName(hipErrorMemoryAllocation)) }, c"hipErrorOutOfMemory");
}

fn hipmem_rs_name(code: i32) -> &'static str {
    match code {
        0 => "hipSuccess",
        1 => "hipErrorInvalidValue",
        2 => "hipErrorOutOfMemory",
        3 => "hipErrorNotInitialized",
        12 => "hipErrorInvalidPitchValue",
        13 => "hipErrorInvalidSymbol",
        17 => "hipErrorInvalidDevicePointer",
        21 => "hipErrorInvalidMemcpyDirection",
        101 => "hipErrorInvalidDevice",
        400 => "hipErrorInvalidHandle",
        500 => "hipErrorNotFound",
        600 => "hipErrorNotReady",
        704 => "hipErrorPeerAccessAlreadyEnabled",
        705 => "hipErrorPeerAccessNotEnabled",
        709 => "hipErrorContextIsDestroyed",
        801 => "hipErrorNotSupported",
        _ => "hipErrorUnknown",
    }
}

/// PyTorch's allocator interface: hipmem_torch_malloc / _free on the null
/// stream, their bad input (a negative size, an unknown device: null and
/// the code recorded, never a crash), and the statistics, peak reset and
/// empty_cache that stand in for PyTorch's own.
#[test]
fn pytorch_allocator_interface() {
    let _serial = serial();
    init();
    unsafe {
        // Failures as null (raising, the default, needs a C++ runtime,
        // which a Rust test process need not have: c_examples covers it).
        let raise = hipmem_torch_raise_on_failure(1);
        assert!(raise == hipSuccess || raise == hipErrorNotSupported, "{raise}");
        assert_eq!(hipmem_torch_raise_on_failure(2), hipErrorInvalidValue);
        assert_eq!(hipmem_torch_raise_on_failure(0), hipSuccess);
        let _ = hipGetLastError();
        let p = hipmem_torch_malloc(1 << 20, 0, null_mut());
        assert!(!p.is_null());
        assert_eq!(hipMemsetAsync(p, 7, 1 << 20, null_mut()), hipSuccess);
        assert!(hipmem_torch_malloc(0, 0, null_mut()).is_null(), "size 0");
        assert_eq!(hipGetLastError(), hipSuccess, "size 0 is no error");
        assert!(hipmem_torch_malloc(-1, 0, null_mut()).is_null());
        assert_eq!(hipGetLastError(), hipErrorInvalidValue, "a negative size");
        assert!(hipmem_torch_malloc(64, 99, null_mut()).is_null());
        assert_eq!(hipGetLastError(), hipErrorInvalidDevice, "an unknown device");
        assert!(hipmem_torch_malloc(isize::MAX, 0, null_mut()).is_null());
        assert_eq!(hipGetLastError(), hipErrorOutOfMemory);

        let mut st = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut st), hipSuccess);
        assert!(st.used_current >= 1 << 20 && st.reserved_current >= st.used_current, "{st:?}");
        assert!(st.used_high >= st.used_current && st.reserved_high >= st.reserved_current, "{st:?}");
        assert_eq!(hipmem_torch_stats(0, null_mut()), hipErrorInvalidValue);
        assert_eq!(hipmem_torch_stats(99, &mut st), hipErrorInvalidDevice);
        assert_eq!(hipmem_torch_reset_peak(99), hipErrorInvalidDevice);
        assert_eq!(hipmem_torch_reset_peak(0), hipSuccess);
        let mut now = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut now), hipSuccess);
        assert_eq!((now.used_high, now.reserved_high), (now.used_current, now.reserved_current), "{now:?}");

        // A free naming an unknown device is logged and returns; the block
        // stays allocated until a good free.
        hipmem_torch_free(p, 1 << 20, 99, null_mut());
        assert_eq!(hipGetLastError(), hipErrorInvalidDevice);
        assert_eq!(hipMemsetAsync(p, 8, 1 << 20, null_mut()), hipSuccess, "still allocated");
        hipmem_torch_free(null_mut(), 0, 0, null_mut());
        assert_eq!(hipGetLastError(), hipSuccess, "freeing null is nothing");
        hipmem_torch_free(p, 1 << 20, 0, null_mut());
        assert_eq!(hipGetLastError(), hipSuccess);
        assert_eq!(hipmem_torch_stats(0, &mut now), hipSuccess);
        assert_eq!(now.used_current + (1 << 20), st.used_current, "{now:?} {st:?}");

        assert_eq!(hipmem_torch_empty_cache(99), hipErrorInvalidDevice);
        assert_eq!(hipmem_torch_empty_cache(0), hipSuccess);
        let mut after = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut after), hipSuccess);
        assert!(after.reserved_current <= now.reserved_current, "{after:?} {now:?}");
        assert!(after.reserved_current >= after.used_current);
        // Nothing was left to give back.
        assert_eq!(hipmem_torch_empty_cache(0), hipSuccess);
        let mut again = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut again), hipSuccess);
        assert_eq!(again.reserved_current, after.reserved_current);

        // torch.cuda.empty_cache() (PyTorch's reset_fn): every device's pool
        // gives back what no live block uses.
        let q = hipmem_torch_malloc(4 << 20, 0, null_mut());
        assert!(!q.is_null());
        hipmem_torch_free(q, 4 << 20, 0, null_mut());
        let mut cached = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut cached), hipSuccess);
        assert!(cached.reserved_current >= again.reserved_current + (4 << 20), "{cached:?} {again:?}");
        let _ = hipGetLastError(); // (hipmem_torch_empty_cache(99) above)
        hipmem_torch_reset();
        assert_eq!(hipGetLastError(), hipSuccess);
        let mut reset = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut reset), hipSuccess);
        assert_eq!(reset.reserved_current, again.reserved_current, "{reset:?} {again:?}");
    }
}

/// The direct PyTorch interface: hipmem_torch_alloc remembers each block's
/// stream (blocks of the first call's stream need no record), so that
/// hipmem_torch_delete frees it by its address alone in that stream's order (the block is the stream's to reuse at once); bad input is
/// null and the code recorded, a pointer that is no live block of
/// hipmem_torch_alloc (freed already, or freed with hipmem_torch_free) is
/// hipErrorInvalidValue, never a crash or a second free.
#[test]
fn pytorch_direct_allocator_interface() {
    let _serial = serial();
    init();
    const MIB: isize = 1 << 20;
    unsafe {
        assert_eq!(hipmem_torch_raise_on_failure(0), hipSuccess, "failures as null");
        let _ = hipGetLastError();
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        let mut before = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut before), hipSuccess);

        // Freed by address on the stream it was allocated on: that stream's
        // next allocation of the size gets the same block back.
        let a = hipmem_torch_alloc(3 * MIB, 0, s);
        assert!(!a.is_null());
        assert_eq!(hipMemsetAsync(a, 1, 3 << 20, s), hipSuccess);
        let mut st = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut st), hipSuccess);
        assert_eq!(st.used_current, before.used_current + (3 << 20), "{st:?} {before:?}");
        hipmem_torch_delete(a);
        assert_eq!(hipGetLastError(), hipSuccess);
        assert_eq!(hipmem_torch_stats(0, &mut st), hipSuccess);
        assert_eq!(st.used_current, before.used_current, "{st:?} {before:?}");
        let b = hipmem_torch_alloc(3 * MIB, 0, s);
        assert_eq!(b, a, "the block went back to its own stream");
        // The null stream too.
        let n = hipmem_torch_alloc(MIB, 0, null_mut());
        assert!(!n.is_null());
        hipmem_torch_delete(n);
        assert_eq!(hipGetLastError(), hipSuccess);
        // Blocks of two streams, freed in the other order: each goes back to
        // the stream it was allocated on (the first call's stream, `s`, needs
        // no record; `s2`'s blocks have one).
        let mut s2: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s2), hipSuccess);
        let x = hipmem_torch_alloc(5 * MIB, 0, s2);
        let y = hipmem_torch_alloc(5 * MIB, 0, s);
        assert!(!x.is_null() && !y.is_null());
        hipmem_torch_delete(x);
        hipmem_torch_delete(y);
        assert_eq!(hipGetLastError(), hipSuccess);
        let x2 = hipmem_torch_alloc(5 * MIB, 0, s2);
        let y2 = hipmem_torch_alloc(5 * MIB, 0, s);
        assert_eq!((x2, y2), (x, y), "each block went back to its own stream");
        hipmem_torch_delete(y2);
        hipmem_torch_delete(x2);
        assert_eq!(hipGetLastError(), hipSuccess);
        hipmem_torch_delete(x2);
        assert_eq!(hipGetLastError(), hipErrorInvalidValue, "a recorded block freed already");
        assert_eq!(hipStreamSynchronize(s2), hipSuccess);
        assert_eq!(hipStreamDestroy(s2), hipSuccess);

        // A second delete, a null, and a pointer never handed out.
        hipmem_torch_delete(b);
        assert_eq!(hipGetLastError(), hipSuccess);
        hipmem_torch_delete(b);
        assert_eq!(hipGetLastError(), hipErrorInvalidValue, "freed already");
        hipmem_torch_delete(null_mut());
        assert_eq!(hipGetLastError(), hipSuccess, "null is nothing");
        let mut plain: *mut c_void = null_mut();
        assert_eq!(hipMalloc(&mut plain, 4096), hipSuccess);
        hipmem_torch_delete(plain);
        assert_eq!(hipGetLastError(), hipErrorInvalidValue, "not hipmem_torch_alloc's");
        assert_eq!(hipMemset(plain, 0, 4096), hipSuccess, "left as it was");
        assert_eq!(hipFree(plain), hipSuccess);

        // Freed through the pluggable interface instead: its record goes
        // with it, so a later delete of the address is refused.
        let c = hipmem_torch_alloc(MIB, 0, s);
        assert!(!c.is_null());
        hipmem_torch_free(c, 1 << 20, 0, s);
        assert_eq!(hipGetLastError(), hipSuccess);
        hipmem_torch_delete(c);
        assert_eq!(hipGetLastError(), hipErrorInvalidValue, "freed with hipmem_torch_free");

        // Bad input as hipmem_torch_malloc's.
        assert!(hipmem_torch_alloc(0, 0, s).is_null(), "size 0");
        assert_eq!(hipGetLastError(), hipSuccess);
        assert!(hipmem_torch_alloc(-1, 0, s).is_null());
        assert_eq!(hipGetLastError(), hipErrorInvalidValue);
        assert!(hipmem_torch_alloc(64, 99, s).is_null());
        assert_eq!(hipGetLastError(), hipErrorInvalidDevice);

        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipmem_torch_stats(0, &mut st), hipSuccess);
        assert_eq!(st.used_current, before.used_current, "{st:?} {before:?}");
        assert_eq!(hipStreamDestroy(s), hipSuccess);
    }
}

/// `torch.cuda.set_per_process_memory_fraction` (PyTorch's memory-fraction
/// function, `hipmem_torch_set_memory_fraction`): the device's current pool
/// holds at most that fraction of the device's memory; memory it holds still
/// serves, growth past it is null with hipErrorOutOfMemory, lowering it gives
/// unused memory back, and a fraction of 1 lets it grow again. Bad fractions
/// and devices change nothing.
#[test]
fn pytorch_memory_fraction() {
    let _serial = serial();
    init();
    const MIB: u64 = 1 << 20;
    unsafe {
        assert_eq!(hipmem_torch_raise_on_failure(0), hipSuccess, "failures as null");
        let _ = hipGetLastError();
        let (mut free, mut total) = (0usize, 0usize);
        assert_eq!(hipMemGetInfo(&mut free, &mut total), hipSuccess);
        let total = total as f64;
        // A pool holding only what is live (earlier tests' cached memory gone).
        hipmem_torch_reset();
        let mut st = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut st), hipSuccess);
        let base = st.reserved_current;

        for bad in [-0.25, 1.5, f64::NAN, f64::INFINITY] {
            hipmem_torch_set_memory_fraction(bad, 0);
            assert_eq!(hipGetLastError(), hipErrorInvalidValue, "fraction {bad}");
        }
        hipmem_torch_set_memory_fraction(0.5, 99);
        assert_eq!(hipGetLastError(), hipErrorInvalidDevice);
        // None of them limited the pool: 64 MiB grows it.
        let p = hipmem_torch_malloc(64 << 20, 0, null_mut());
        assert!(!p.is_null(), "a bad fraction limited the pool");
        hipmem_torch_free(p, 64 << 20, 0, null_mut());
        hipmem_torch_reset();

        // Room for 8 MiB more than the pool holds.
        hipmem_torch_set_memory_fraction((base + 8 * MIB) as f64 / total, 0);
        assert_eq!(hipGetLastError(), hipSuccess);
        let a = hipmem_torch_malloc(6 << 20, 0, null_mut());
        assert!(!a.is_null(), "within the fraction");
        assert!(hipmem_torch_malloc(16 << 20, 0, null_mut()).is_null(), "past the fraction");
        assert_eq!(hipGetLastError(), hipErrorOutOfMemory);
        assert_eq!(hipmem_torch_stats(0, &mut st), hipSuccess);
        assert!(st.reserved_current <= base + 8 * MIB, "{st:?} past {}", base + 8 * MIB);
        // Memory the pool holds serves: freed and allocated again.
        hipmem_torch_free(a, 6 << 20, 0, null_mut());
        let b = hipmem_torch_malloc(6 << 20, 0, null_mut());
        assert!(!b.is_null(), "memory the pool holds serves under the fraction");
        hipmem_torch_free(b, 6 << 20, 0, null_mut());
        // (No synchronization: it would give the cached memory back itself.)
        let k = hipmem_torch_malloc(2 << 20, 0, null_mut());
        assert!(!k.is_null());

        // Lowered to what is live: the unused memory goes at once.
        assert_eq!(hipmem_torch_stats(0, &mut st), hipSuccess);
        assert!(st.reserved_current > st.used_current, "{st:?}");
        hipmem_torch_set_memory_fraction(st.used_current as f64 / total, 0);
        assert_eq!(hipGetLastError(), hipSuccess);
        let mut low = hipmemPoolStats::default();
        assert_eq!(hipmem_torch_stats(0, &mut low), hipSuccess);
        assert!(low.reserved_current <= st.used_current + MIB, "{low:?} {st:?}");
        assert_eq!(low.used_current, st.used_current, "a live block went");
        hipmem_torch_free(k, 2 << 20, 0, null_mut());

        // The whole device again: it grows.
        hipmem_torch_set_memory_fraction(1.0, 0);
        assert_eq!(hipGetLastError(), hipSuccess);
        let c = hipmem_torch_malloc(64 << 20, 0, null_mut());
        assert!(!c.is_null(), "a fraction of 1 limits nothing a device can hold");
        hipmem_torch_free(c, 64 << 20, 0, null_mut());
        assert_eq!(hipDeviceSynchronize(), hipSuccess);
    }
}

/// PyTorch's `record_stream` (`hipmem_torch_record_stream`): a block read on
/// a second stream that is still busy is not handed out again by its own
/// stream's next allocation, the data the second stream reads is intact,
/// and its own stream gets no wait for the second (its work runs on). The
/// same sequence without the record gets the block straight back (what
/// PyTorch did with hipmem before it could pass records on). Bad records
/// (null, the block's own stream, twice, a handle that is no stream) change
/// nothing and never lose the block.
#[test]
fn pytorch_record_stream() {
    let _serial = serial();
    init();
    static HOLD: AtomicUsize = AtomicUsize::new(0);
    unsafe extern "C" fn hold(_: *mut c_void) {
        let start = std::time::Instant::now();
        // (Released by the test; after 20 s anyway, so that a failing test
        // fails instead of hanging.)
        while HOLD.load(Ordering::SeqCst) == 0 && start.elapsed() < std::time::Duration::from_secs(20) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
    const N: usize = 1 << 20;
    unsafe {
        let _ = hipGetLastError();
        let (mut a, mut b): (hipStream_t, hipStream_t) = (null_mut(), null_mut());
        assert_eq!(hipStreamCreate(&mut a), hipSuccess);
        assert_eq!(hipStreamCreate(&mut b), hipSuccess);
        let mut host = vec![0u8; N];
        // What stream b reads (a copy to pageable host memory would wait for
        // b on the calling thread).
        let mut seen: *mut c_void = null_mut();
        assert_eq!(hipMalloc(&mut seen, N), hipSuccess);
        let stats = || {
            let mut st = hipmemPoolStats::default();
            assert_eq!(hipmem_torch_stats(0, &mut st), hipSuccess);
            st
        };

        // Without a record: the block comes back to its stream at once,
        // while stream b has yet to read it.
        let p = hipmem_torch_malloc(N as isize, 0, a);
        assert!(!p.is_null());
        assert_eq!(hipMemsetAsync(p, 0x11, N, a), hipSuccess);
        assert_eq!(hipStreamSynchronize(a), hipSuccess);
        HOLD.store(0, Ordering::SeqCst);
        assert_eq!(hipLaunchHostFunc(b, Some(hold), null_mut()), hipSuccess);
        assert_eq!(hipMemcpyAsync(seen, p, N, hipMemcpyDeviceToDevice, b), hipSuccess);
        hipmem_torch_free(p, N, 0, a);
        let q = hipmem_torch_malloc(N as isize, 0, a);
        assert_eq!(q, p, "without a record the block is reused by its stream at once");
        HOLD.store(1, Ordering::SeqCst);
        assert_eq!(hipStreamSynchronize(b), hipSuccess);
        assert_eq!(hipMemcpy(host.as_mut_ptr().cast(), seen, N, hipMemcpyDeviceToHost), hipSuccess);
        assert!(host.iter().all(|&x| x == 0x11));

        // With a record on b.
        assert_eq!(hipMemsetAsync(q, 0x22, N, a), hipSuccess);
        assert_eq!(hipStreamSynchronize(a), hipSuccess);
        HOLD.store(0, Ordering::SeqCst);
        assert_eq!(hipLaunchHostFunc(b, Some(hold), null_mut()), hipSuccess);
        assert_eq!(hipMemcpyAsync(seen, q, N, hipMemcpyDeviceToDevice, b), hipSuccess);
        hipmem_torch_record_stream(q, b);
        hipmem_torch_record_stream(q, b); // twice: one record
        hipmem_torch_record_stream(q, a); // its own stream: nothing more
        hipmem_torch_record_stream(null_mut(), b); // ignored
        let before = stats();
        hipmem_torch_free(q, N, 0, a);
        assert_eq!(hipGetLastError(), hipSuccess);
        assert_eq!(stats().used_current + N as u64, before.used_current, "the block is no longer live");
        let r = hipmem_torch_malloc(N as isize, 0, a);
        assert!(!r.is_null());
        assert_ne!(r, q, "a block recorded on a busy stream is not handed out again");
        assert_eq!(hipMemsetAsync(r, 0x33, N, a), hipSuccess);
        let t0 = std::time::Instant::now();
        assert_eq!(hipStreamSynchronize(a), hipSuccess);
        assert!(t0.elapsed() < std::time::Duration::from_secs(10), "stream a was made to wait for stream b");
        assert_eq!(hipStreamQuery(b), hipErrorNotReady, "b is still held");
        HOLD.store(1, Ordering::SeqCst);
        assert_eq!(hipStreamSynchronize(b), hipSuccess);
        assert_eq!(hipMemcpy(host.as_mut_ptr().cast(), seen, N, hipMemcpyDeviceToHost), hipSuccess);
        assert!(host.iter().all(|&x| x == 0x22), "stream b read the recorded block intact");
        assert_eq!(hipMemcpy(host.as_mut_ptr().cast(), r, N, hipMemcpyDeviceToHost), hipSuccess);
        assert!(host.iter().all(|&x| x == 0x33));

        // Once b is done, the block is free for every stream again: after a
        // device synchronization b gets it.
        assert_eq!(hipDeviceSynchronize(), hipSuccess);
        let again = hipmem_torch_malloc(N as isize, 0, b);
        assert_eq!(again, q, "the recorded block is reusable once its streams are done");
        hipmem_torch_free(again, N, 0, b);

        // Recorded on a stream that has finished its work by the free: the
        // block goes back to its own stream as one without records does (its
        // stream reuses it at once, even while that stream is still busy),
        // and the record is gone with it.
        let v = hipmem_torch_malloc(N as isize, 0, a);
        assert!(!v.is_null());
        assert_eq!(hipMemcpyAsync(seen, v, N, hipMemcpyDeviceToDevice, b), hipSuccess);
        hipmem_torch_record_stream(v, b);
        assert_eq!(hipStreamSynchronize(b), hipSuccess);
        HOLD.store(0, Ordering::SeqCst);
        assert_eq!(hipLaunchHostFunc(a, Some(hold), null_mut()), hipSuccess);
        hipmem_torch_free(v, N, 0, a);
        assert_eq!(hipGetLastError(), hipSuccess);
        let w = hipmem_torch_malloc(N as isize, 0, a);
        assert_eq!(w, v, "recorded on an idle stream: reused by its own (busy) stream at once");
        HOLD.store(1, Ordering::SeqCst);
        assert_eq!(hipStreamSynchronize(a), hipSuccess);
        hipmem_torch_free(w, N, 0, a);
        let w2 = hipmem_torch_malloc(N as isize, 0, a);
        assert_eq!(w2, v, "the record went with the free");
        hipmem_torch_free(w2, N, 0, a);

        // A record of a handle that is no stream: the free still happens
        // (after the device is synchronized), nothing is lost or reported.
        let used = stats().used_current;
        hipmem_torch_record_stream(r, 0xbad0usize as hipStream_t);
        hipmem_torch_free(r, N, 0, a);
        assert_eq!(hipGetLastError(), hipSuccess);
        assert_eq!(stats().used_current + N as u64, used);
        // A stale record (a block freed without hipmem_torch_free) does not
        // follow its address to the next block there.
        let s = hipmem_torch_malloc(N as isize, 0, a);
        hipmem_torch_record_stream(s, b);
        assert_eq!(hipFreeAsync(s, a), hipSuccess);
        let t = hipmem_torch_malloc(N as isize, 0, a);
        assert_eq!(t, s, "the same address, a new block");
        hipmem_torch_free(t, N, 0, a);
        let u = hipmem_torch_malloc(N as isize, 0, a);
        assert_eq!(u, t, "freed without a record: reused by its stream at once");
        hipmem_torch_free(u, N, 0, a);
        assert_eq!(hipFree(seen), hipSuccess);
        assert_eq!(hipStreamDestroy(a), hipSuccess);
        assert_eq!(hipStreamDestroy(b), hipSuccess);
        let _ = hipGetLastError();
    }
}

/// hipmem's own extension for the hip backend's loopback: the runtime is
/// already open here (on host, or cuda, or hip where HIPMEM_BACKEND says so),
/// so naming its backend (or auto) succeeds and naming another fails.
#[test]
fn hipmem_set_inner_backend() {
    let _serial = serial();
    init();
    unsafe {
        assert_eq!(hipmemSetInnerBackend(null()), hipErrorInvalidValue);
        assert_eq!(hipmemSetInnerBackend(c"no-such-backend".as_ptr()), hipErrorInvalidValue);
        assert_eq!(hipmemSetInnerBackend(c"hip".as_ptr()), hipErrorInvalidValue);
        assert_eq!(hipmemSetInnerBackend(c"rocm".as_ptr()), hipErrorInvalidValue);
        let host = hipmemSetInnerBackend(c"host".as_ptr());
        let cuda = hipmemSetInnerBackend(c"cuda".as_ptr());
        let auto = hipmemSetInnerBackend(c"auto".as_ptr());
        for code in [host, cuda, auto] {
            assert!(code == hipSuccess || code == hipErrorInvalidValue, "unexpected {code}");
        }
        if auto == hipSuccess {
            assert!((host == hipSuccess) != (cuda == hipSuccess), "host gave {host}, cuda {cuda}");
        } else {
            // Open on hip (HIPMEM_BACKEND=hip): libhipmem under a hip backend refuses everything.
            assert_eq!((host, cuda), (hipErrorInvalidValue, hipErrorInvalidValue));
        }
        // A failing call is recorded for hipGetLastError like any other.
        assert_eq!(hipmemSetInnerBackend(c"hip".as_ptr()), hipErrorInvalidValue);
        assert_eq!(hipGetLastError(), hipErrorInvalidValue);
    }
}

// ---- streams made outside hipmem (issue 13) ----------------------------------------------

/// The backend the C ABI's runtime runs on.
fn backend_kind() -> hipmem_rs::backend::BackendKind {
    init();
    hipmem_rs::Runtime::global().expect("the global runtime").backend_kind()
}

/// Every export that takes a stream, called on `s`: (name, code).
unsafe fn every_stream_call(
    s: hipStream_t,
    pool: hipMemPool_t,
    live: *mut c_void,
) -> Vec<(&'static str, i32)> {
    unsafe {
        let mut p: *mut c_void = null_mut();
        let mut e: hipEvent_t = null_mut();
        assert_eq!(hipEventCreate(&mut e), hipSuccess);
        let mut host = [0u8; 64];
        let out = vec![
            ("hipMallocAsync", hipMallocAsync(&mut p, 64, s)),
            ("hipFreeAsync", hipFreeAsync(live, s)),
            ("hipMallocFromPoolAsync", hipMallocFromPoolAsync(&mut p, 64, pool, s)),
            ("hipMemcpyAsync", hipMemcpyAsync(host.as_mut_ptr().cast(), live, 64, hipMemcpyDeviceToHost, s)),
            ("hipMemsetAsync", hipMemsetAsync(live, 1, 64, s)),
            ("hipEventRecord", hipEventRecord(e, s)),
            ("hipStreamWaitEvent", hipStreamWaitEvent(s, e, 0)),
            ("hipStreamSynchronize", hipStreamSynchronize(s)),
            ("hipStreamQuery", hipStreamQuery(s)),
            ("hipLaunchHostFunc", hipLaunchHostFunc(s, Some(count_call), null_mut())),
            ("hipMemPrefetchAsync", hipMemPrefetchAsync(live, 64, 0, s)),
            ("hipStreamAttachMemAsync", hipStreamAttachMemAsync(s, live, 0, hipMemAttachGlobal)),
            (
                "hipmem_torch_malloc",
                if hipmem_torch_malloc(64, 0, s).is_null() { hipGetLastError() } else { hipSuccess },
            ),
            ("hipStreamDestroy", hipStreamDestroy(s)),
        ];
        assert!(p.is_null(), "no allocation on a refused stream");
        assert_eq!(hipEventDestroy(e), hipSuccess);
        out
    }
}

/// Checks that every stream call on `s` is InvalidHandle (hipMemPrefetchAsync:
/// ContextIsDestroyed, HIP's code there) and that `live` stayed allocated.
unsafe fn assert_refused_everywhere(s: hipStream_t, what: &str) {
    unsafe {
        let mut pool: hipMemPool_t = null_mut();
        assert_eq!(hipMemPoolCreate(&mut pool, &pool_props(0)), hipSuccess);
        let mut live: *mut c_void = null_mut();
        assert_eq!(hipMallocFromPoolAsync(&mut live, 4096, pool, null_mut()), hipSuccess);
        for (call, code) in every_stream_call(s, pool, live) {
            let want = if call == "hipMemPrefetchAsync" {
                hipErrorContextIsDestroyed
            } else {
                hipErrorInvalidHandle
            };
            assert_eq!(code, want, "{call} on {what} {s:p}");
        }
        // hipmem_torch_free logs and returns; the block stays allocated.
        hipmem_torch_free(live, 4096, 0, s);
        let mut used: u64 = 0;
        assert_eq!(
            hipMemPoolGetAttribute(pool, hipMemPoolAttrUsedMemCurrent, (&raw mut used).cast()),
            hipSuccess
        );
        assert_eq!(used, 4096, "nothing was freed on {what} {s:p}");
        assert_eq!(hipFreeAsync(live, null_mut()), hipSuccess);
        assert_eq!(hipStreamSynchronize(null_mut()), hipSuccess);
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
    }
}

#[test]
fn foreign_handles_are_invalid_everywhere_on_the_cpu_backend() {
    let _serial = serial();
    if backend_kind() != hipmem_rs::backend::BackendKind::Host {
        return;
    }
    // SAFETY (whole block): plain FFI calls with valid out-pointers.
    unsafe {
        for h in [0xdead0usize, 0xbad0, 0x7f00_dead_0000, 0x10] {
            assert_refused_everywhere(h as hipStream_t, "a made-up handle");
        }
        // A destroyed stream of hipmem's, on every function.
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreate(&mut s), hipSuccess);
        let mut p: *mut c_void = null_mut();
        assert_eq!(hipMallocAsync(&mut p, 256, s), hipSuccess, "cached by this thread");
        assert_eq!(hipFreeAsync(p, s), hipSuccess);
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_refused_everywhere(s, "a destroyed stream");
    }
}

/// A stream destroyed on one thread is refused on every other, including
/// threads whose cache holds it: while one of them still holds its clone
/// (so the runtime still finds it by handle), another's lookup refuses it.
#[test]
fn a_destroyed_stream_is_refused_by_threads_that_cached_it() {
    let _serial = serial();
    use std::sync::{Arc, Barrier};
    init();
    let mut s: hipStream_t = null_mut();
    // SAFETY: a valid out-pointer.
    assert_eq!(unsafe { hipStreamCreate(&mut s) }, hipSuccess);
    let h = s as usize;
    let steps = Arc::new(Barrier::new(3));
    // Each thread returns its codes (asserted after the join, so a failure
    // never leaves the others waiting at a barrier).
    let spawn = |holder: bool| {
        let steps = Arc::clone(&steps);
        std::thread::spawn(move || -> Vec<(&'static str, i32)> {
            let s = h as hipStream_t;
            let mut p: *mut c_void = null_mut();
            let mut codes = Vec::new();
            // SAFETY: plain FFI calls with valid out-pointers.
            unsafe {
                codes.push(("hipMallocAsync before", hipMallocAsync(&mut p, 512, s)));
                codes.push(("hipFreeAsync before", hipFreeAsync(p, s)));
                steps.wait(); // both threads cached the stream
                steps.wait(); // the main thread destroyed it
                if !holder {
                    // The holder's clone keeps the stream alive meanwhile.
                    codes.push(("hipStreamQuery after", hipStreamQuery(s)));
                    codes.push(("hipMallocAsync after", hipMallocAsync(&mut p, 512, s)));
                }
                steps.wait(); // the asker is done; the holder looks now
                if holder {
                    codes.push(("hipStreamSynchronize after", hipStreamSynchronize(s)));
                }
            }
            codes
        })
    };
    let (holder, asker) = (spawn(true), spawn(false));
    steps.wait();
    // SAFETY: a live stream, destroyed once; then plain FFI calls.
    let (destroyed, query) = unsafe { (hipStreamDestroy(s), hipStreamQuery(s)) };
    steps.wait();
    steps.wait();
    let codes: Vec<_> = [asker, holder].into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert_eq!(destroyed, hipSuccess);
    assert_eq!(query, hipErrorInvalidHandle, "the destroying thread");
    assert_eq!(codes.len(), 7);
    for (call, code) in codes {
        let want = if call.ends_with("before") { hipSuccess } else { hipErrorInvalidHandle };
        assert_eq!(code, want, "{call} on another thread");
    }
}

/// 16 threads, each with streams of its own and one shared stream, allocate
/// from one pool and free across streams and threads (blocks change hands
/// through a shared list) while streams are created and destroyed under
/// them: no call fails, and the pool's used bytes come back to 0.
#[test]
fn streams_under_16_threads_free_across_streams_and_threads() {
    let _serial = serial();
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};
    init();
    let mut pool: hipMemPool_t = null_mut();
    let mut shared: hipStream_t = null_mut();
    // SAFETY: valid out-pointers.
    unsafe {
        assert_eq!(hipMemPoolCreate(&mut pool, &pool_props(0)), hipSuccess);
        assert_eq!(hipStreamCreateWithFlags(&mut shared, hipStreamNonBlockingFlag()), hipSuccess);
    }
    let (pool_h, shared_h) = (pool as usize, shared as usize);
    let handoff: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(Vec::new()));
    let window = Duration::from_millis(1200);
    let threads: Vec<_> = (0..16u64)
        .map(|t| {
            let handoff = Arc::clone(&handoff);
            std::thread::spawn(move || -> u64 {
                let (pool, shared) = (pool_h as hipMemPool_t, shared_h as hipStream_t);
                let mut ops = 0u64;
                // SAFETY: plain FFI calls; every pointer freed was allocated
                // here or handed over by another thread and is freed once.
                unsafe {
                    let (mut a, mut b): (hipStream_t, hipStream_t) = (null_mut(), null_mut());
                    assert_eq!(hipStreamCreate(&mut a), hipSuccess);
                    assert_eq!(hipStreamCreateWithFlags(&mut b, hipStreamNonBlockingFlag()), hipSuccess);
                    let streams = [a, b, shared, null_mut()];
                    let t0 = Instant::now();
                    let mut i = t as usize;
                    let mut born = 0;
                    while t0.elapsed() < window {
                        let (on, off) = (streams[i % 4], streams[(i + 1) % 4]);
                        let size = 256 << (i % 7);
                        let (mut p, mut q): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
                        assert_eq!(hipMallocFromPoolAsync(&mut p, size, pool, on), hipSuccess);
                        assert_eq!(hipMallocFromPoolAsync(&mut q, size, pool, off), hipSuccess);
                        assert_eq!(hipFreeAsync(p, off), hipSuccess, "cross-stream free");
                        if i % 3 == 0 {
                            // Someone else frees it, on their streams.
                            handoff.lock().unwrap().push(q as usize);
                        } else {
                            assert_eq!(hipFreeAsync(q, on), hipSuccess);
                        }
                        let theirs = handoff.lock().unwrap().pop();
                        if let Some(r) = theirs {
                            assert_eq!(hipFreeAsync(r as *mut c_void, on), hipSuccess, "cross-thread free");
                        }
                        if i % 64 == 0 && born < 16 {
                            // A stream born and destroyed: every thread's cache refreshes.
                            // (A few only: the CPU backend's handles count up, and
                            // other tests use made-up handles such as 0xbad0.)
                            born += 1;
                            let mut c: hipStream_t = null_mut();
                            assert_eq!(hipStreamCreate(&mut c), hipSuccess);
                            assert_eq!(hipMallocFromPoolAsync(&mut p, 4096, pool, c), hipSuccess);
                            assert_eq!(hipFreeAsync(p, c), hipSuccess);
                            assert_eq!(hipStreamDestroy(c), hipSuccess);
                            match hipStreamQuery(c) {
                                e if e == hipErrorInvalidHandle => {
                                    assert_eq!(
                                        hipGetLastError(),
                                        hipErrorInvalidHandle,
                                        "the refusal is recorded"
                                    )
                                }
                                // The CUDA driver may give the destroyed stream's handle to
                                // a stream another thread creates meanwhile (3 of 25 runs
                                // on an H200): the handle then names that live stream.
                                e => {
                                    assert!(e == hipSuccess || e == hipErrorNotReady, "a reused handle: {e}")
                                }
                            }
                        }
                        i += 1;
                        ops += 1;
                    }
                    assert_eq!(hipStreamSynchronize(a), hipSuccess);
                    assert_eq!(hipStreamSynchronize(b), hipSuccess);
                    assert_eq!(hipStreamDestroy(a), hipSuccess);
                    assert_eq!(hipStreamDestroy(b), hipSuccess);
                    assert_eq!(hipGetLastError(), hipSuccess, "no call failed on thread {t}");
                }
                ops
            })
        })
        .collect();
    let ops: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(ops > 16 * 10, "only {ops} rounds in all");
    // SAFETY: plain FFI calls; the handed-over pointers are live and freed once.
    unsafe {
        for r in handoff.lock().unwrap().drain(..) {
            assert_eq!(hipFreeAsync(r as *mut c_void, shared), hipSuccess);
        }
        assert_eq!(hipStreamSynchronize(shared), hipSuccess);
        assert_eq!(hipStreamDestroy(shared), hipSuccess);
        let mut used: u64 = u64::MAX;
        assert_eq!(
            hipMemPoolGetAttribute(pool, hipMemPoolAttrUsedMemCurrent, (&raw mut used).cast()),
            hipSuccess
        );
        assert_eq!(used, 0, "every block came back to the pool");
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);
    }
}

/// The CUDA driver calls a foreign stream needs, loaded at run time (as
/// the conformance suite's `foreign_streams` does).
mod cuda {
    use std::ffi::{c_int, c_uint, c_void};

    type Ctx = *mut c_void;
    type CuStream = *mut c_void;

    pub struct Driver {
        _lib: libloading::Library,
        retain: unsafe extern "C" fn(*mut Ctx, c_int) -> u32,
        get_current: unsafe extern "C" fn(*mut Ctx) -> u32,
        set_current: unsafe extern "C" fn(Ctx) -> u32,
        create: unsafe extern "C" fn(*mut CuStream, c_uint) -> u32,
        destroy: unsafe extern "C" fn(CuStream) -> u32,
    }

    impl Driver {
        pub fn open() -> Driver {
            // SAFETY: loading libcuda runs its initializers, which have no
            // preconditions; the symbols are looked up with the signatures
            // cuda.h declares for them.
            unsafe {
                let lib = libloading::Library::new("libcuda.so.1").expect("libcuda.so.1");
                let retain = *lib.get(b"cuDevicePrimaryCtxRetain\0").expect("cuDevicePrimaryCtxRetain");
                let get_current = *lib.get(b"cuCtxGetCurrent\0").expect("cuCtxGetCurrent");
                let set_current = *lib.get(b"cuCtxSetCurrent\0").expect("cuCtxSetCurrent");
                let create = *lib.get(b"cuStreamCreate\0").expect("cuStreamCreate");
                let destroy = *lib.get(b"cuStreamDestroy_v2\0").expect("cuStreamDestroy_v2");
                Driver { _lib: lib, retain, get_current, set_current, create, destroy }
            }
        }

        /// A stream of `device`'s primary context, made by the driver.
        pub fn create_stream(&self, device: usize, flags: u32) -> super::hipStream_t {
            let mut ctx: Ctx = std::ptr::null_mut();
            let mut s: CuStream = std::ptr::null_mut();
            // SAFETY: valid out-pointers; the runtime already initialized the
            // driver (cuInit) and retains the same primary context.
            unsafe {
                assert_eq!((self.retain)(&mut ctx, device as c_int), 0, "cuDevicePrimaryCtxRetain");
                assert_eq!((self.set_current)(ctx), 0, "cuCtxSetCurrent");
                assert_eq!((self.create)(&mut s, flags), 0, "cuStreamCreate");
            }
            s
        }

        /// The calling thread's current context, as an address (0: none).
        pub fn current(&self) -> usize {
            let mut ctx: Ctx = std::ptr::null_mut();
            // SAFETY: a valid out-pointer.
            assert_eq!(unsafe { (self.get_current)(&mut ctx) }, 0, "cuCtxGetCurrent");
            ctx as usize
        }

        /// Makes `device`'s primary context current on the calling thread,
        /// or none.
        pub fn make_current(&self, device: Option<usize>) {
            let mut ctx: Ctx = std::ptr::null_mut();
            // SAFETY: a valid out-pointer, then a retained context or null.
            unsafe {
                if let Some(d) = device {
                    assert_eq!((self.retain)(&mut ctx, d as c_int), 0, "cuDevicePrimaryCtxRetain");
                }
                assert_eq!((self.set_current)(ctx), 0, "cuCtxSetCurrent");
            }
        }

        pub fn destroy_stream(&self, s: super::hipStream_t) {
            // SAFETY: a stream this driver created and nobody destroyed.
            assert_eq!(unsafe { (self.destroy)(s) }, 0, "cuStreamDestroy");
        }
    }
}

/// On cuda: PyTorch's entry points and the stream functions leave the
/// calling thread's context as they found it: device 0's primary context
/// (current where PyTorch works on device 0), or none. PyTorch, cuDNN and the
/// CUDA runtime act on the thread's current context; a pool's growth and a
/// trim that unmaps must not leave another one there.
#[test]
fn the_entry_points_leave_the_callers_context_current() {
    let _serial = serial();
    if backend_kind() != hipmem_rs::backend::BackendKind::Cuda {
        return;
    }
    init();
    std::thread::spawn(|| {
        let drv = cuda::Driver::open();
        // Leaves device 0's primary context current, as PyTorch's threads have it.
        let f = drv.create_stream(0, 1);
        let primary = drv.current();
        assert_ne!(primary, 0);
        for (device, want) in [(None, 0), (Some(0), primary)] {
            drv.make_current(device);
            // SAFETY: FFI calls with valid arguments; each block is freed once.
            unsafe {
                let p = hipmem_torch_malloc(24 << 20, 0, f);
                assert!(!p.is_null());
                assert_eq!(drv.current(), want, "hipmem_torch_malloc (a growth)");
                assert_eq!(hipMemsetAsync(p, 1, 24 << 20, f), hipSuccess);
                assert_eq!(drv.current(), want, "hipMemsetAsync");
                hipmem_torch_free(p, 24 << 20, 0, f);
                assert_eq!(hipStreamSynchronize(f), hipSuccess);
                assert_eq!(drv.current(), want, "hipmem_torch_free and hipStreamSynchronize");
                assert_eq!(hipmem_torch_empty_cache(0), hipSuccess);
                assert_eq!(drv.current(), want, "hipmem_torch_empty_cache (a trim that unmaps)");
                let mut q: *mut c_void = null_mut();
                assert_eq!(hipMallocAsync(&mut q, 4 << 20, f), hipSuccess);
                assert_eq!(hipFreeAsync(q, f), hipSuccess);
                assert_eq!(hipDeviceSynchronize(), hipSuccess);
                assert_eq!(drv.current(), want, "hipMallocAsync, hipFreeAsync, hipDeviceSynchronize");
            }
        }
        // hipmem adopted it: destroyed through hipmem, which forgets it
        // (docs/c-abi.md: a stream destroyed behind hipmem's back could come
        // back from the driver under the same handle).
        // SAFETY: a live stream, destroyed once.
        assert_eq!(unsafe { hipStreamDestroy(f) }, hipSuccess);
    })
    .join()
    .unwrap();
}

/// On cuda: a stream made by the driver and destroyed through
/// `hipStreamDestroy` stays refused, and the streams the driver makes after
/// it are accepted. (hipmem keeps a destroyed foreign stream parked, alive
/// in the driver, for a while: the driver gives a new stream the address of
/// the one it destroyed last, which hipmem would refuse as destroyed.)
#[test]
fn streams_made_after_a_foreign_one_was_destroyed_are_accepted() {
    let _serial = serial();
    if backend_kind() != hipmem_rs::backend::BackendKind::Cuda {
        return;
    }
    init();
    std::thread::spawn(|| {
        let drv = cuda::Driver::open();
        let mut handles = std::collections::HashSet::new();
        for i in 0..32 {
            let s = drv.create_stream(0, 1);
            // SAFETY: FFI calls with valid arguments; each block is freed once.
            unsafe {
                let mut p: *mut c_void = null_mut();
                assert_eq!(hipMallocAsync(&mut p, 1 << 20, s), hipSuccess, "stream {i} at {s:p}");
                assert_eq!(hipFreeAsync(p, s), hipSuccess);
                assert_eq!(hipStreamSynchronize(s), hipSuccess);
                assert_eq!(hipStreamDestroy(s), hipSuccess);
                assert_eq!(hipMallocAsync(&mut p, 1 << 20, s), hipErrorInvalidHandle, "destroyed stream {i}");
                assert_eq!(hipStreamSynchronize(s), hipErrorInvalidHandle);
            }
            handles.insert(s as usize);
        }
        assert_eq!(handles.len(), 32, "no two of the driver's streams at one address while one is parked");
    })
    .join()
    .unwrap();
}

/// `hipSetDevice` on cuda leaves the device's primary context current, as
/// `cudaSetDevice` does, so the CUDA runtime's later calls on the thread
/// (a HIP program's kernels on NVIDIA) go to the device chosen; hipmem's
/// other calls leave it there. Elsewhere it sets hipmem's current device.
#[test]
fn hip_set_device_makes_the_devices_context_current_for_the_cuda_runtime() {
    let _serial = serial();
    init();
    let cuda = backend_kind() == hipmem_rs::backend::BackendKind::Cuda;
    std::thread::spawn(move || {
        let mut n: std::ffi::c_int = 0;
        // SAFETY (whole block): FFI calls with valid out-pointers; each
        // block is freed once.
        unsafe {
            assert_eq!(hipGetDeviceCount(&mut n), hipSuccess);
            assert_eq!(hipSetDevice(n), hipErrorInvalidDevice);
            let drv = cuda.then(cuda::Driver::open);
            for device in (0..n.min(2)).rev() {
                let want = drv.as_ref().map(|d| {
                    d.make_current(Some(device as usize));
                    let ctx = d.current();
                    d.make_current(None);
                    ctx
                });
                assert_eq!(hipSetDevice(device), hipSuccess);
                let mut got: std::ffi::c_int = -1;
                assert_eq!(hipGetDevice(&mut got), hipSuccess);
                assert_eq!(got, device);
                let mut p: *mut c_void = null_mut();
                assert_eq!(hipMalloc(&mut p, 1 << 20), hipSuccess);
                assert_eq!(hipMemset(p, 3, 1 << 20), hipSuccess);
                assert_eq!(hipFree(p), hipSuccess);
                if let (Some(d), Some(want)) = (drv.as_ref(), want) {
                    assert_eq!(d.current(), want, "device {device}'s context is current after hipSetDevice");
                }
            }
            assert_eq!(hipSetDevice(0), hipSuccess);
        }
    })
    .join()
    .unwrap();
}

/// The device a pointer's memory is on (`hipPointerGetAttributes`).
fn device_of(p: *const c_void) -> std::ffi::c_int {
    // SAFETY: zeroed plain data, then a valid out-pointer.
    let mut a: hipPointerAttribute_t = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { hipPointerGetAttributes(&mut a, p) }, hipSuccess);
    a.device
}

/// On cuda the calling thread's current device follows the CUDA runtime's,
/// as HIP on NVIDIA (a header over the CUDA runtime) shares it: after
/// `cudaSetDevice(d)` or `torch.cuda.set_device(d)` (device d's primary
/// context current on the thread) `hipGetDevice` says d, `hipMalloc` and
/// `hipMallocAsync` on the null stream allocate on d, and a stream the
/// program made on d is taken on d. A stream of another device than the
/// current one is taken on its own (PyTorch's interface, which names the
/// device, refuses it for another). A thread with no context has the last
/// `hipSetDevice`'s device. (Elsewhere the device is `hipSetDevice`'s alone.)
#[test]
fn the_current_device_follows_the_cuda_runtimes_device() {
    let _serial = serial();
    if backend_kind() != hipmem_rs::backend::BackendKind::Cuda {
        return;
    }
    init();
    std::thread::spawn(|| {
        const N: usize = 1 << 20;
        let drv = cuda::Driver::open();
        let mut n: std::ffi::c_int = 0;
        // SAFETY (whole block): FFI calls with valid out-pointers; every
        // block is freed once, every stream destroyed once.
        unsafe {
            assert_eq!(hipGetDeviceCount(&mut n), hipSuccess);
            // The loop's foreign streams live to the end: a stream destroyed
            // through hipStreamDestroy stays refused, and one made later at
            // its address (the driver reuses them) would be too (see
            // handles.rs).
            let mut made = Vec::new();
            for device in (0..n.min(2)).rev() {
                // What cudaSetDevice(device) leaves on the thread.
                drv.make_current(Some(device as usize));
                let ctx = drv.current();
                let mut got: std::ffi::c_int = -1;
                assert_eq!(hipGetDevice(&mut got), hipSuccess);
                assert_eq!(got, device, "hipGetDevice after the CUDA runtime chose device {device}");
                let mut p: *mut c_void = null_mut();
                assert_eq!(hipMalloc(&mut p, N), hipSuccess);
                assert_eq!(device_of(p), device, "hipMalloc");
                assert_eq!(hipFree(p), hipSuccess);
                assert_eq!(hipMallocAsync(&mut p, N, null_mut()), hipSuccess);
                assert_eq!(device_of(p), device, "hipMallocAsync on the null stream");
                assert_eq!(hipMemsetAsync(p, 7, N, null_mut()), hipSuccess);
                assert_eq!(hipFreeAsync(p, null_mut()), hipSuccess);
                assert_eq!(hipStreamSynchronize(null_mut()), hipSuccess);
                // A stream the program made on the device (as PyTorch's are).
                let f = drv.create_stream(device as usize, 1);
                assert_eq!(hipMallocAsync(&mut p, N, f), hipSuccess, "a foreign stream of device {device}");
                assert_eq!(device_of(p), device, "hipMallocAsync on a foreign stream");
                assert_eq!(hipFreeAsync(p, f), hipSuccess);
                assert_eq!(hipStreamSynchronize(f), hipSuccess);
                made.push(f);
                assert_eq!(drv.current(), ctx, "the thread keeps device {device}'s context");
            }
            // A stream the program made on the last device, named while
            // device 0's context is current: taken on its own device, as
            // cudaMallocAsync takes the stream's device.
            let last = n - 1;
            let f = drv.create_stream(last as usize, 1);
            drv.make_current(Some(0));
            let mut d: hipDevice_t = -1;
            assert_eq!(hipStreamGetDevice(f, &mut d), hipSuccess);
            assert_eq!(d, last, "hipStreamGetDevice of a foreign stream of device {last}");
            let mut p: *mut c_void = null_mut();
            assert_eq!(hipMallocAsync(&mut p, N, f), hipSuccess, "a foreign stream of another device");
            assert_eq!(device_of(p), last, "hipMallocAsync on a foreign stream of device {last}");
            assert_eq!(hipFreeAsync(p, f), hipSuccess);
            if last != 0 {
                // PyTorch's interface names the device: a stream of another one is refused.
                assert_eq!(hipmem_torch_raise_on_failure(0), hipSuccess, "failures as null");
                assert!(
                    hipmem_torch_malloc(N as isize, 0, f).is_null(),
                    "a stream of device {last} for device 0"
                );
                assert_eq!(hipGetLastError(), hipErrorInvalidValue);
                let _ = hipmem_torch_raise_on_failure(1);
            }
            let q = hipmem_torch_malloc(N as isize, last, f);
            assert!(!q.is_null());
            hipmem_torch_free(q, N, last, f);
            assert_eq!(hipStreamSynchronize(f), hipSuccess);
            assert_eq!(hipStreamDestroy(f), hipSuccess);

            // No context: the last hipSetDevice's device.
            assert_eq!(hipSetDevice(last), hipSuccess);
            drv.make_current(None);
            let mut got: std::ffi::c_int = -1;
            assert_eq!(hipGetDevice(&mut got), hipSuccess);
            assert_eq!(got, last, "a thread without a context: hipSetDevice's device");
            let mut p: *mut c_void = null_mut();
            assert_eq!(hipMalloc(&mut p, N), hipSuccess);
            assert_eq!(device_of(p), last);
            assert_eq!(hipFree(p), hipSuccess);
            assert_eq!(drv.current(), 0, "hipMalloc leaves a thread without a context without one");
            assert_eq!(hipSetDevice(0), hipSuccess);
            for f in made {
                assert_eq!(hipStreamDestroy(f), hipSuccess);
            }
        }
    })
    .join()
    .unwrap();
}

/// Host function for the foreign stream test.
static FOREIGN_HOST_FN_CALLS: AtomicUsize = AtomicUsize::new(0);
unsafe extern "C" fn count_foreign_call(_: *mut c_void) {
    FOREIGN_HOST_FN_CALLS.fetch_add(1, Ordering::SeqCst);
}

/// On cuda (`HIPMEM_BACKEND=cuda`): a stream made by `cuStreamCreate` works
/// in every function that takes a stream, memory crosses between it and a
/// hipmem stream in both directions (ordered by events), a block freed on it
/// comes back at once on it, and `hipStreamDestroy` destroys it.
#[test]
fn a_foreign_cuda_stream_works_in_every_stream_function() {
    let _serial = serial();
    if backend_kind() != hipmem_rs::backend::BackendKind::Cuda {
        return;
    }
    // Small: hipMallocAsync uses the device's current pool, which another
    // test may briefly set to a pool of 4 MiB.
    const N: usize = 256 << 10;
    let drv = cuda::Driver::open();
    let f = drv.create_stream(0, 1);
    // SAFETY (whole block): FFI calls with valid out-pointers and host
    // buffers of the sizes given; every device pointer is freed once.
    unsafe {
        let mut s: hipStream_t = null_mut();
        assert_eq!(hipStreamCreateWithFlags(&mut s, hipStreamNonBlockingFlag()), hipSuccess);
        let mut e: hipEvent_t = null_mut();
        assert_eq!(hipEventCreate(&mut e), hipSuccess);
        let mut host = vec![0u8; N];

        // Allocation, memset, copy, query and synchronize on the foreign stream.
        let (mut a, mut b): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        assert_eq!(hipMallocAsync(&mut a, N, f), hipSuccess);
        assert_eq!(hipMemsetAsync(a, 0x5a, N, f), hipSuccess);
        assert_eq!(hipMallocAsync(&mut b, N, f), hipSuccess);
        assert_eq!(hipMemcpyAsync(b, a, N, hipMemcpyDeviceToDevice, f), hipSuccess);
        assert_eq!(hipLaunchHostFunc(f, Some(count_foreign_call), null_mut()), hipSuccess);
        assert_eq!(hipStreamSynchronize(f), hipSuccess);
        assert_eq!(FOREIGN_HOST_FN_CALLS.load(Ordering::SeqCst), 1);
        assert_eq!(hipStreamQuery(f), hipSuccess);
        assert_eq!(hipMemcpy(host.as_mut_ptr().cast(), b, N, hipMemcpyDeviceToHost), hipSuccess);
        assert!(host.iter().all(|&x| x == 0x5a), "memset and copy on the foreign stream");

        // Memory of the hipmem stream, written there, read and freed on the
        // foreign one after an event.
        let mut c: *mut c_void = null_mut();
        assert_eq!(hipMallocAsync(&mut c, N, s), hipSuccess);
        assert_eq!(hipMemsetAsync(c, 0x33, N, s), hipSuccess);
        assert_eq!(hipEventRecord(e, s), hipSuccess);
        assert_eq!(hipStreamWaitEvent(f, e, 0), hipSuccess);
        assert_eq!(hipMemcpyAsync(b, c, N, hipMemcpyDeviceToDevice, f), hipSuccess);
        assert_eq!(hipFreeAsync(c, f), hipSuccess, "hipmem-stream memory freed on the foreign stream");
        // Memory of the foreign stream, written there, read and freed on the
        // hipmem stream after an event.
        let mut d: *mut c_void = null_mut();
        assert_eq!(hipMallocAsync(&mut d, N, f), hipSuccess);
        assert_eq!(hipMemsetAsync(d, 0x44, N, f), hipSuccess);
        assert_eq!(hipEventRecord(e, f), hipSuccess);
        assert_eq!(hipStreamWaitEvent(s, e, 0), hipSuccess);
        assert_eq!(hipMemcpyAsync(a, d, N, hipMemcpyDeviceToDevice, s), hipSuccess);
        assert_eq!(hipFreeAsync(d, s), hipSuccess, "foreign-stream memory freed on the hipmem stream");
        assert_eq!(hipStreamSynchronize(s), hipSuccess);
        assert_eq!(hipStreamSynchronize(f), hipSuccess);
        assert_eq!(hipMemcpy(host.as_mut_ptr().cast(), b, N, hipMemcpyDeviceToHost), hipSuccess);
        assert!(host.iter().all(|&x| x == 0x33), "the foreign stream read after the hipmem stream's event");
        assert_eq!(hipMemcpy(host.as_mut_ptr().cast(), a, N, hipMemcpyDeviceToHost), hipSuccess);
        assert!(host.iter().all(|&x| x == 0x44), "the hipmem stream read after the foreign stream's event");

        // A block freed on the foreign stream comes back at once there
        // (a pool of this test's own, so no other test's synchronization
        // moves its blocks).
        let mut pool: hipMemPool_t = null_mut();
        assert_eq!(hipMemPoolCreate(&mut pool, &pool_props(0)), hipSuccess);
        let keep = u64::MAX;
        assert_eq!(
            hipMemPoolSetAttribute(pool, hipMemPoolAttrReleaseThreshold, (&raw const keep) as *mut c_void),
            hipSuccess
        );
        let (mut x, mut y): (*mut c_void, *mut c_void) = (null_mut(), null_mut());
        assert_eq!(hipMallocFromPoolAsync(&mut x, N, pool, f), hipSuccess);
        assert_eq!(hipMemsetAsync(x, 1, N, f), hipSuccess);
        assert_eq!(hipFreeAsync(x, f), hipSuccess);
        assert_eq!(hipMallocFromPoolAsync(&mut y, N, pool, f), hipSuccess);
        assert_eq!(y, x, "a block freed on the foreign stream is reused there at once");
        assert_eq!(hipFreeAsync(y, f), hipSuccess);
        // PyTorch's entry points on the foreign stream.
        let t = hipmem_torch_malloc(N as isize, 0, f);
        assert!(!t.is_null());
        hipmem_torch_free(t, N, 0, f);
        assert_eq!(hipStreamSynchronize(f), hipSuccess);
        let mut used: u64 = u64::MAX;
        assert_eq!(
            hipMemPoolGetAttribute(pool, hipMemPoolAttrUsedMemCurrent, (&raw mut used).cast()),
            hipSuccess
        );
        assert_eq!(used, 0);
        assert_eq!(hipMemPoolDestroy(pool), hipSuccess);

        // hipStreamDestroy of the foreign stream destroys it; the handle is
        // then refused without reaching the driver.
        assert_eq!(hipFreeAsync(a, f), hipSuccess);
        assert_eq!(hipFreeAsync(b, f), hipSuccess);
        assert_eq!(hipStreamDestroy(f), hipSuccess);
        assert_eq!(hipStreamSynchronize(f), hipErrorInvalidHandle);
        assert_eq!(hipStreamQuery(f), hipErrorInvalidHandle);
        assert_eq!(hipMallocAsync(&mut a, 64, f), hipErrorInvalidHandle);
        assert_eq!(hipStreamDestroy(f), hipErrorInvalidHandle, "destroyed once");

        // A foreign stream hipmem never saw: hipStreamDestroy refuses it
        // without asking the driver; its owner destroys it.
        let g = drv.create_stream(0, 0);
        assert_eq!(hipStreamDestroy(g), hipErrorInvalidHandle);
        drv.destroy_stream(g);

        // Handles outside readable memory are refused by the readability check.
        for h in [0xdead0usize, 0xbad0] {
            assert_eq!(hipStreamQuery(h as hipStream_t), hipErrorInvalidHandle);
        }
        assert_eq!(hipStreamDestroy(s), hipSuccess);
        assert_eq!(hipEventDestroy(e), hipSuccess);
        let _ = hipGetLastError();
    }
}
