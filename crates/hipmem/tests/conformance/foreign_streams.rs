//! Streams hipmem did not create (issue 13): adopted once, then usable
//! everywhere a stream is taken, with the pools' reuse rules. On CUDA the
//! foreign streams here come straight from the driver (`cuStreamCreate`
//! through a table loaded at run time, as PyTorch's or the CUDA runtime's
//! would); the CPU backend has no streams made outside hipmem and says so.

use hipmem::backend::{BackendKind, FillValue, RawStream};
use hipmem::{MemPool, PoolProps, Stream};

use crate::{cuda, expect_err, non_blocking, private_runtime, runtime};

#[test]
fn the_cpu_backend_says_it_has_no_foreign_streams() {
    let rt = runtime();
    if rt.backend_kind() != BackendKind::Host {
        return;
    }
    let made_up = RawStream { device: 0, handle: 0x7f00_dead_0000 };
    expect_err(Stream::adopt(rt, made_up), 400, &["no streams made outside hipmem"]);
    // hipmem's own streams and the null stream adopt as themselves.
    let own = rt.device(0).unwrap().create_stream().unwrap();
    assert_eq!(Stream::adopt(rt, own.raw()).unwrap().id(), own.id());
    assert!(Stream::adopt(rt, RawStream::null(0)).unwrap().is_null());
    expect_err(Stream::adopt(rt, RawStream { device: 9, handle: 0x10 }), 101, &[]);
}

#[test]
fn a_foreign_stream_is_refused_where_it_is_no_stream() {
    let rt = private_runtime();
    if rt.backend_kind() != BackendKind::Cuda {
        return;
    }
    // Handles outside readable memory, misaligned, destroyed by hipmem.
    for h in [0xdead0u64, 0xbad0, 0x7f00_0000_0003] {
        expect_err(Stream::adopt(&rt, RawStream { device: 0, handle: h }), 400, &[]);
    }
    let raw = rt.device(0).unwrap().create_stream().unwrap().raw();
    expect_err(Stream::adopt(&rt, raw), 400, &["destroyed"]);
    // A stream of device 0 named as device 1's.
    if rt.device_count() > 1 {
        let drv = cuda::Driver::open();
        let h = drv.create_stream(0, 0);
        expect_err(Stream::adopt(&rt, RawStream { device: 1, handle: h }), 400, &["device 0"]);
        drv.destroy_stream(h);
    }
}

#[test]
fn a_foreign_stream_works_everywhere_a_stream_is_taken() {
    let rt = private_runtime();
    if rt.backend_kind() != BackendKind::Cuda {
        return;
    }
    let drv = cuda::Driver::open();
    let h = drv.create_stream(0, 1);
    let raw = RawStream { device: 0, handle: h };
    let foreign = Stream::adopt(&rt, raw).unwrap();
    assert!(!foreign.is_owned());
    assert!(foreign.flags().non_blocking, "the driver's flags are learned");
    assert!(rt.is_adopted_stream(raw));
    // Learned once: a second adoption is the same stream (same clock).
    let again = Stream::adopt(&rt, raw).unwrap();
    assert_eq!(again.id(), foreign.id());
    // Once adopted, the handle is a stream of this runtime.
    assert_eq!(Stream::from_raw(&rt, raw).unwrap().id(), foreign.id());

    let own = rt.device(0).unwrap().create_stream_with_flags(non_blocking()).unwrap();
    let pool = MemPool::create(&rt, PoolProps::default()).unwrap();
    const N: usize = 1 << 20;
    // Allocation, memset, copies on the foreign stream.
    let a = pool.alloc_raw(N as u64, &foreign).unwrap();
    rt.memset_async(a, FillValue::U8(0x5a), N as u64, foreign.raw()).unwrap();
    let b = pool.alloc_raw(N as u64, &foreign).unwrap();
    rt.copy_device_to_device_async(b, a, N as u64, foreign.raw()).unwrap();
    foreign.synchronize().unwrap();
    let mut host = vec![0u8; N];
    rt.copy_device_to_host(&mut host, b).unwrap();
    assert!(host.iter().all(|&x| x == 0x5a));
    // Free on the foreign stream, drop every handle to it, adopt it again
    // and allocate: the stream is the same (its clock outlived the handles)
    // and its own free is reusable at once, so the same block comes back.
    rt.free_async(a, &foreign).unwrap();
    let id = foreign.id();
    drop((foreign, again));
    let foreign2 = Stream::adopt(&rt, raw).unwrap();
    assert_eq!(foreign2.id(), id, "the adopted stream keeps its identity");
    let a2 = pool.alloc_raw(N as u64, &foreign2).unwrap();
    assert_eq!(a2, a, "a block freed on the foreign stream is reused there at once");
    // Frees across: foreign memory freed on hipmem's stream and back, with
    // an event ordering them.
    let ev = rt.device(0).unwrap().create_event().unwrap();
    ev.record(&foreign2).unwrap();
    own.wait_event(&ev).unwrap();
    rt.free_async(b, &own).unwrap();
    let c = pool.alloc_raw(N as u64, &own).unwrap();
    own.record_event(&ev).unwrap();
    foreign2.wait_event(&ev).unwrap();
    rt.free_async(c, &foreign2).unwrap();
    rt.free_async(a2, &foreign2).unwrap();
    foreign2.synchronize().unwrap();
    own.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0, "every block came back");
    // A device synchronization reaches the foreign stream's clock.
    rt.device(0).unwrap().synchronize().unwrap();
    // hipStreamDestroy of a foreign stream: hipmem destroys it when asked.
    drop(foreign2);
    rt.destroy_adopted_stream(raw).unwrap();
    assert!(!rt.is_adopted_stream(raw));
    expect_err(rt.destroy_adopted_stream(raw), 400, &[]);
    assert!(rt.take_drop_errors().is_empty());
}

/// `Runtime::stream_device`: on cuda a stream made outside hipmem names the
/// device of its context, whatever context the calling thread has current
/// (and the thread keeps it), so the C ABI adopts it there; a handle that is
/// no stream is InvalidHandle. The CPU backend cannot tell and says so; on
/// hip the runtime answers (`hip_loopback`'s
/// `the_hip_backend_takes_streams_made_outside_hipmem` makes such streams).
#[test]
fn a_foreign_streams_device_is_its_contexts() {
    let rt = private_runtime();
    match rt.backend_kind() {
        BackendKind::Cuda => {}
        BackendKind::Host => {
            expect_err(rt.stream_device(0x7f00_dead_0000), 400, &["cannot tell"]);
            return;
        }
        _ => {
            // hip: the runtime says (the loopback's tests make such streams).
            expect_err(rt.stream_device(0x7f00_dead_0000), 400, &[]);
            return;
        }
    }
    let drv = cuda::Driver::open();
    expect_err(rt.stream_device(0xdead0), 400, &[]);
    let own = rt.device(0).unwrap().create_stream().unwrap();
    assert_eq!(rt.stream_device(own.raw().handle).unwrap(), 0, "hipmem's own stream");
    let n = rt.device_count();
    for device in 0..n.min(2) {
        let h = drv.create_stream(device, 0);
        for current in [None, Some(0), Some(n - 1)] {
            let ctx = current.map_or(cuda::Context::NONE, |d| drv.primary_context(d));
            drv.set_current(ctx);
            assert_eq!(
                rt.stream_device(h).unwrap(),
                device,
                "a stream of device {device}, {current:?} current"
            );
            assert_eq!(drv.current(), ctx, "the caller's context stays current");
        }
        // Adopted on that device, it answers the same.
        Stream::adopt(&rt, RawStream { device, handle: h }).unwrap();
        assert_eq!(rt.stream_device(h).unwrap(), device);
        rt.destroy_adopted_stream(RawStream { device, handle: h }).unwrap();
    }
}
