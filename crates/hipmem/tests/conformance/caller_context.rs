//! The calling thread's context: hipmem makes its device's context current
//! for a call and gives the caller its own back when the call returns. The
//! CUDA runtime, PyTorch and cuDNN keep a context current on their threads
//! and act on whatever is current there: a hipmem call that left another
//! device's context (or any context) current moved their later calls with it
//! (PyTorch's two-GPU job failed in cuDNN with `cudaMemsetAsync: invalid
//! argument` once a pool's unmap had made device 0's context current on
//! device 1's autograd thread). And hipmem must notice a context the caller
//! changed behind it. The CPU backend has no contexts and says nothing here.

use hipmem::backend::{BackendKind, FillValue};
use hipmem::{MemPool, PinnedBuffer, PoolProps, Runtime};

use crate::{cuda, runtime};

/// What a thread does with hipmem's memory on `device`, calling `check`
/// after each step: a pool's growth, a memset, an event, copies, a pointer
/// query, a free and synchronization, a trim that unmaps and releases,
/// page-locked memory, and the pool's and stream's destruction.
fn work(rt: &Runtime, device: usize, check: &dyn Fn(&str)) {
    const N: u64 = 3 << 20;
    let dev = rt.device(device).unwrap();
    let stream = dev.create_stream().unwrap();
    check("creating a stream");
    let pool = MemPool::create(rt, PoolProps { device, ..PoolProps::default() }).unwrap();
    check("creating a pool");
    let a = pool.alloc_raw(N, &stream).unwrap();
    check("an allocation that grows the pool");
    rt.memset_async(a, FillValue::U8(0x6b), N, stream.raw()).unwrap();
    check("a memset");
    let ev = dev.create_event().unwrap();
    ev.record(&stream).unwrap();
    ev.synchronize().unwrap();
    check("recording and waiting for an event");
    let mut host = vec![0u8; N as usize];
    rt.copy_device_to_host(&mut host, a).unwrap();
    assert!(host.iter().all(|&x| x == 0x6b), "the memset on device {device} reached the block");
    check("a copy to the host");
    rt.pointer_attributes(a.0).unwrap();
    check("a pointer query");
    rt.free_async(a, &stream).unwrap();
    stream.synchronize().unwrap();
    check("a free and a synchronization");
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0, "the trim gave the pool's memory back");
    check("a trim that unmaps and releases");
    drop(PinnedBuffer::<u8>::new(rt, 1 << 16, 0).unwrap());
    check("page-locked memory");
    drop(ev);
    drop(pool);
    drop(stream);
    check("destroying the event, the pool and the stream");
}

#[test]
fn a_thread_without_a_context_is_left_without_one() {
    let rt = runtime();
    if rt.backend_kind() != BackendKind::Cuda {
        return;
    }
    std::thread::spawn(move || {
        let drv = cuda::Driver::open();
        assert!(drv.current().is_none(), "a new thread starts without a context");
        work(rt, 0, &|what| assert!(drv.current().is_none(), "{what} left a context current"));
    })
    .join()
    .unwrap();
}

#[test]
fn the_callers_context_stays_current_whatever_device_hipmem_works_on() {
    let rt = runtime();
    if rt.backend_kind() != BackendKind::Cuda {
        return;
    }
    let n = rt.device_count().min(2);
    for mine in 0..n {
        for theirs in 0..n {
            std::thread::spawn(move || {
                let drv = cuda::Driver::open();
                let ctx = drv.primary_context(mine);
                drv.set_current(ctx);
                work(rt, theirs, &|what| {
                    assert_eq!(
                        drv.current(),
                        ctx,
                        "{what} on device {theirs} changed the context of a thread working on device {mine}"
                    )
                });
            })
            .join()
            .unwrap();
        }
    }
}

#[test]
fn hipmem_notices_a_context_the_caller_changed_behind_it() {
    let rt = runtime();
    if rt.backend_kind() != BackendKind::Cuda {
        return;
    }
    std::thread::spawn(move || {
        let drv = cuda::Driver::open();
        let dev = rt.device(0).unwrap();
        let stream = dev.create_stream().unwrap();
        let pool = MemPool::create(rt, PoolProps::default()).unwrap();
        let a = pool.alloc_raw(1 << 20, &stream).unwrap();
        // The caller makes device 0's context current, then none, between
        // hipmem's calls; each call still runs in device 0's context.
        for ctx in [drv.primary_context(0), cuda::Context::NONE] {
            drv.set_current(ctx);
            rt.memset_async(a, FillValue::U8(0x2c), 1 << 20, stream.raw()).unwrap();
            stream.synchronize().unwrap();
            let mut host = vec![0u8; 1 << 20];
            rt.copy_device_to_host(&mut host, a).unwrap();
            assert!(host.iter().all(|&x| x == 0x2c));
            assert_eq!(drv.current(), ctx, "the caller's context is current after the calls");
        }
        rt.free_async(a, &stream).unwrap();
        stream.synchronize().unwrap();
    })
    .join()
    .unwrap();
}

#[test]
fn make_current_leaves_the_devices_context_current_as_cuda_set_device_does() {
    let rt = runtime();
    let n = rt.device_count();
    crate::expect_err(rt.make_current(n), 101, &["does not exist"]);
    if rt.backend_kind() != BackendKind::Cuda {
        rt.make_current(0).unwrap();
        return;
    }
    std::thread::spawn(move || {
        let drv = cuda::Driver::open();
        for device in (0..n.min(2)).rev() {
            drv.set_current(cuda::Context::NONE);
            rt.make_current(device).unwrap();
            assert_eq!(
                drv.current(),
                drv.primary_context(device),
                "device {device}'s context is current after"
            );
            // hipmem's other calls leave it there.
            work(rt, 0, &|what| {
                assert_eq!(
                    drv.current(),
                    drv.primary_context(device),
                    "{what} moved the thread off device {device}"
                )
            });
        }
    })
    .join()
    .unwrap();
}
