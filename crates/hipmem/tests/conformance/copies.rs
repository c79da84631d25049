//! hipMemcpy / hipMemcpyAsync: round trips, device-to-device, copy kinds and
//! direction checks, ranges, null pointers and size 0.

use hipmem::backend::{CopyDirection, HostSpan};
use hipmem::bytemuck::Pod;
use hipmem::runtime::ResolvedCopy;
use hipmem::{DevicePtr, MemcpyKind};

use crate::{DELAY, device, expect_err, host_addr, non_blocking, read0, runtime, second_device, zeroed_flag};

fn round_trip<T: Pod + PartialEq + std::fmt::Debug>(data: &[T]) {
    let dev = device(0);
    // Through alloc_from_slice / to_vec.
    let buf = dev.alloc_from_slice(data).unwrap();
    assert_eq!(buf.len(), data.len());
    assert_eq!(buf.to_vec().unwrap(), data, "round trip of {} {}", data.len(), std::any::type_name::<T>());
    // Through copy_from_host / copy_to_host.
    let mut buf = dev.alloc::<T>(data.len()).unwrap();
    buf.copy_from_host(data).unwrap();
    let mut back = vec![T::zeroed(); data.len()];
    buf.copy_to_host(&mut back).unwrap();
    assert_eq!(back, data);
    // Through an asynchronous scope on a stream.
    let stream = dev.create_stream().unwrap();
    let mut back = vec![T::zeroed(); data.len()];
    let copy = dev.alloc::<T>(data.len()).unwrap();
    stream
        .scope(|s| {
            s.copy_to_device(data, &copy)?;
            s.copy_to_host(&copy, &mut back)
        })
        .unwrap()
        .unwrap();
    assert_eq!(back, data);
}

#[test]
fn round_trips_of_bytes_of_odd_lengths() {
    for len in [1usize, 2, 3, 5, 7, 4095, 4097, 65_537] {
        let data: Vec<u8> = (0..len).map(|i| (i * 31 + 7) as u8).collect();
        round_trip(&data);
    }
}

#[test]
fn round_trips_of_wider_element_types() {
    round_trip(&(0..7u16).map(|i| i.wrapping_mul(40_000)).collect::<Vec<_>>());
    round_trip(&(-500..501i32).collect::<Vec<_>>());
    round_trip(&(0..333).map(|i| i as f64 * -0.25).collect::<Vec<_>>());
    round_trip(&(0..129u64).map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15)).collect::<Vec<_>>());
    round_trip(&[[1.5f32, -2.0, 3.25], [0.0, f32::MAX, f32::MIN_POSITIVE]]);
    round_trip(&[i8::MIN, -1, 0, 1, i8::MAX]);
    round_trip(&[[0u8; 3], [1, 2, 3], [255, 254, 253]]);
}

#[test]
fn a_large_copy_round_trips() {
    let data: Vec<u32> = (0..(1u32 << 20)).map(|i| i ^ 0xa5a5_5a5a).collect();
    round_trip(&data);
}

#[test]
fn device_to_device_copies_synchronous_and_in_stream_order() {
    let dev = device(0);
    let data: Vec<i32> = (0..1001).map(|i| i * 3 - 7).collect();
    let src = dev.alloc_from_slice(&data).unwrap();
    let mut dst = dev.alloc_zeroed::<i32>(1001).unwrap();
    dst.copy_from_device(&src).unwrap();
    assert_eq!(dst.to_vec().unwrap(), data);

    let stream = dev.create_stream().unwrap();
    let dst2 = dev.alloc_zeroed::<i32>(1001).unwrap();
    stream.copy_device_to_device(&src, &dst2).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(dst2.to_vec().unwrap(), data);

    // Raw runtime copies between interior offsets.
    let rt = runtime();
    rt.copy_device_to_device(DevicePtr(dst.device_ptr().0 + 8), DevicePtr(src.device_ptr().0 + 4), 12)
        .unwrap();
    let mut expect = data.clone();
    expect[2..5].copy_from_slice(&data[1..4]);
    assert_eq!(dst.to_vec().unwrap(), expect);
}

/// An asynchronous copy is queued behind earlier work of its stream.
#[test]
fn asynchronous_copies_run_in_stream_order() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let out = zeroed_flag(&dev);
    let mut host = [0u32];
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 7).unwrap();
    stream.copy_device_to_device(&flag, &out).unwrap();
    assert_pending!(t0, !stream.query().unwrap(), "the delay kernel finished at once");
    stream
        .scope(|s| {
            // Queued after the delay: it must see the flag the delay wrote.
            s.copy_to_host(&flag, &mut host)
        })
        .unwrap()
        .unwrap();
    assert_eq!(host, [7], "the asynchronous copy ran before the earlier kernel");
    assert_eq!(read0(&out), 7);
}

/// An asynchronous copy returns before it runs (it is queued behind a delay).
#[test]
fn asynchronous_copy_returns_before_the_copy_runs() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let buf = dev.alloc_zeroed::<u8>(4096).unwrap();
    let input = vec![0x3cu8; 4096];
    stream
        .scope(|s| {
            let t0 = std::time::Instant::now();
            s.stream().delay(DELAY, &flag, 1)?;
            s.copy_to_device(&input, &buf)?;
            assert_pending!(t0, !s.stream().query()?, "the copy behind a delay already finished");
            Ok::<_, hipmem::Error>(())
        })
        .unwrap()
        .unwrap();
    assert!(stream.query().unwrap(), "scope returned before its stream finished");
    assert!(buf.to_vec().unwrap().iter().all(|&b| b == 0x3c));
}

/// The scope waits for its stream also when its body panics, so no lent
/// slice is released while a copy may still write it.
#[test]
fn an_async_scope_waits_for_its_copies_even_when_it_panics() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let buf = dev.alloc_from_slice(&[5u8; 256]).unwrap();
    let mut out = vec![0u8; 256];
    let t0 = std::time::Instant::now();
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        stream.scope(|s| {
            s.stream().delay(DELAY, &flag, 1)?;
            s.copy_to_host(&buf, &mut out)?;
            if s.stream().query()? {
                return Ok::<(), hipmem::Error>(()); // the delay finished at once: asserted below
            }
            panic!("deliberate panic inside a stream scope (expected by this test)");
        })
    }));
    assert_pending!(t0, result.is_err(), "the scope body did not panic (the delay kernel finished at once?)");
    assert!(stream.query().unwrap(), "the scope let a panic through before its stream finished");
    assert_eq!(out, vec![5u8; 256]);
}

#[test]
fn copies_at_interior_offsets_touch_only_their_range() {
    let rt = runtime();
    let dev = device(0);
    let buf = dev.alloc_zeroed::<u8>(64).unwrap();
    let base = buf.device_ptr();
    rt.copy_host_to_device(DevicePtr(base.0 + 10), &[1, 2, 3, 4, 5]).unwrap();
    let mut back = [0u8; 3];
    rt.copy_device_to_host(&mut back, DevicePtr(base.0 + 11)).unwrap();
    assert_eq!(back, [2, 3, 4]);
    let all = buf.to_vec().unwrap();
    assert!(all[..10].iter().all(|&b| b == 0));
    assert_eq!(&all[10..15], &[1, 2, 3, 4, 5]);
    assert!(all[15..].iter().all(|&b| b == 0));
    // The last byte.
    rt.copy_host_to_device(DevicePtr(base.0 + 63), &[9]).unwrap();
    assert_eq!(buf.to_vec().unwrap()[63], 9);
}

#[test]
fn copies_past_the_end_of_the_allocation_are_invalid_value() {
    let rt = runtime();
    let dev = device(0);
    let a = dev.alloc_zeroed::<u8>(100).unwrap();
    let b = dev.alloc_zeroed::<u8>(100).unwrap();
    let (pa, pb) = (a.device_ptr(), b.device_ptr());
    expect_err(rt.copy_host_to_device(pa, &[0u8; 101]), 1, &["past the end"]);
    expect_err(rt.copy_host_to_device(DevicePtr(pa.0 + 99), &[0u8; 2]), 1, &["past the end"]);
    let mut out = [0u8; 101];
    expect_err(rt.copy_device_to_host(&mut out, pa), 1, &["past the end"]);
    let mut out = [0u8; 50];
    expect_err(rt.copy_device_to_host(&mut out, DevicePtr(pa.0 + 51)), 1, &["past the end"]);
    expect_err(rt.copy_device_to_device(pb, pa, 101), 1, &["past the end"]);
    expect_err(rt.copy_device_to_device(DevicePtr(pb.0 + 1), pa, 100), 1, &["past the end"]);
    expect_err(rt.copy_device_to_device(pb, DevicePtr(pa.0 + 1), 100), 1, &["past the end"]);
    expect_err(rt.copy_device_to_device(pb, pa, u64::MAX), 1, &[]);
    let stream = dev.create_stream().unwrap();
    expect_err(rt.copy_device_to_device_async(pb, pa, 101, stream.raw()), 1, &["past the end"]);
    let host = [0u8; 101];
    // SAFETY: `host` outlives the call, and the call fails before queuing anything.
    let span = unsafe { HostSpan::new(host.as_ptr(), host.len()) };
    expect_err(rt.copy_host_to_device_async(pa, span, stream.raw()), 1, &["past the end"]);
    expect_err(rt.copy_device_to_host_async(span, pa, stream.raw()), 1, &["past the end"]);
    expect_err(rt.resolve_copy(pa.0, host_addr(&host), 101, MemcpyKind::Default), 1, &["past the end"]);
    expect_err(rt.resolve_copy(pb.0, pa.0 + 1, 100, MemcpyKind::DeviceToDevice), 1, &["past the end"]);
    stream.synchronize().unwrap();
    // Nothing was written.
    assert!(a.to_vec().unwrap().iter().all(|&x| x == 0));
    assert!(b.to_vec().unwrap().iter().all(|&x| x == 0));
}

#[test]
fn copies_with_null_pointers_are_invalid_value() {
    let rt = runtime();
    let dev = device(0);
    let buf = dev.alloc_zeroed::<u8>(16).unwrap();
    let p = buf.device_ptr();
    let host = [0u8; 16];
    expect_err(rt.copy_host_to_device(DevicePtr::NULL, &[1, 2]), 1, &["null"]);
    let mut out = [0u8; 2];
    expect_err(rt.copy_device_to_host(&mut out, DevicePtr::NULL), 1, &["null"]);
    expect_err(rt.copy_device_to_device(DevicePtr::NULL, p, 4), 1, &["null"]);
    expect_err(rt.copy_device_to_device(p, DevicePtr::NULL, 4), 1, &["null"]);
    for kind in
        [MemcpyKind::Default, MemcpyKind::HostToDevice, MemcpyKind::DeviceToHost, MemcpyKind::HostToHost]
    {
        expect_err(rt.resolve_copy(0, p.0, 4, kind), 1, &["null", "destination"]);
        expect_err(rt.resolve_copy(host_addr(&host), 0, 4, kind), 1, &["null", "source"]);
    }
    let stream = dev.create_stream().unwrap();
    expect_err(rt.copy_device_to_device_async(DevicePtr::NULL, p, 4, stream.raw()), 1, &["null"]);
    // SAFETY: `host` outlives the calls, which fail before queuing anything.
    let span = unsafe { HostSpan::new(host.as_ptr(), 4) };
    expect_err(rt.copy_host_to_device_async(DevicePtr::NULL, span, stream.raw()), 1, &["null"]);
    expect_err(rt.copy_device_to_host_async(span, DevicePtr::NULL, stream.raw()), 1, &["null"]);
}

#[test]
fn copies_to_or_from_memory_that_is_not_device_memory_are_invalid_value() {
    let rt = runtime();
    let stack = [0u8; 64];
    let p = DevicePtr(host_addr(&stack));
    expect_err(rt.copy_host_to_device(p, &[1, 2, 3]), 1, &["not inside any live"]);
    let mut out = [0u8; 3];
    expect_err(rt.copy_device_to_host(&mut out, p), 1, &["not inside any live"]);
    let dev_buf = device(0).alloc_zeroed::<u8>(8).unwrap();
    expect_err(rt.copy_device_to_device(dev_buf.device_ptr(), p, 8), 1, &["not inside any live"]);
    expect_err(rt.copy_device_to_device(p, dev_buf.device_ptr(), 8), 1, &["not inside any live"]);
    assert_eq!(stack, [0u8; 64]);
}

#[test]
fn zero_byte_copies_succeed_before_any_other_check() {
    let rt = runtime();
    let stack = [0u8; 4];
    let odd = DevicePtr(host_addr(&stack));
    rt.copy_host_to_device(DevicePtr::NULL, &[]).unwrap();
    rt.copy_host_to_device(odd, &[]).unwrap();
    rt.copy_device_to_host(&mut [], DevicePtr::NULL).unwrap();
    rt.copy_device_to_host(&mut [], odd).unwrap();
    rt.copy_device_to_device(DevicePtr::NULL, DevicePtr::NULL, 0).unwrap();
    rt.copy_device_to_device(odd, DevicePtr(0x10), 0).unwrap();
    let stream = device(0).create_stream().unwrap();
    // SAFETY: an empty span touches no memory.
    let empty = unsafe { HostSpan::new(std::ptr::null(), 0) };
    rt.copy_host_to_device_async(DevicePtr::NULL, empty, stream.raw()).unwrap();
    rt.copy_device_to_host_async(empty, DevicePtr::NULL, stream.raw()).unwrap();
    rt.copy_device_to_device_async(DevicePtr::NULL, DevicePtr::NULL, 0, stream.raw()).unwrap();
    stream.synchronize().unwrap();
}

/// hipMemcpy(dst, src, 0, kind) is hipSuccess before any other check, so
/// resolving a copy of 0 bytes must not fail on null or mismatched pointers.
#[test]
fn resolving_a_zero_byte_copy_succeeds_before_any_other_check() {
    let rt = runtime();
    let buf = device(0).alloc_zeroed::<u8>(8).unwrap();
    let host = [0u8; 8];
    for kind in [
        MemcpyKind::HostToHost,
        MemcpyKind::HostToDevice,
        MemcpyKind::DeviceToHost,
        MemcpyKind::DeviceToDevice,
        MemcpyKind::Default,
    ] {
        for (dst, src) in [(0, 0), (0, buf.device_ptr().0), (host_addr(&host), 0)] {
            let r = rt.resolve_copy(dst, src, 0, kind);
            assert!(r.is_ok(), "hipMemcpy of 0 bytes ({dst:#x} <- {src:#x}, {kind:?}) failed: {r:?}");
        }
    }
}

#[test]
fn memcpy_kinds_parse_from_their_numbers() {
    let kinds = [
        (0, MemcpyKind::HostToHost),
        (1, MemcpyKind::HostToDevice),
        (2, MemcpyKind::DeviceToHost),
        (3, MemcpyKind::DeviceToDevice),
        (4, MemcpyKind::Default),
    ];
    for (raw, kind) in kinds {
        assert_eq!(MemcpyKind::from_raw(raw).unwrap(), kind);
        assert_eq!(kind.raw(), raw);
    }
    for bad in [5, 7, -1, 100, i32::MIN, i32::MAX] {
        expect_err(MemcpyKind::from_raw(bad), 21, &[&bad.to_string()]);
    }
}

#[test]
fn default_kind_is_inferred_from_the_pointers() {
    let rt = runtime();
    let a = device(0).alloc_zeroed::<u8>(64).unwrap();
    let b = device(0).alloc_zeroed::<u8>(64).unwrap();
    let host = [0u8; 64];
    let h = host_addr(&host);
    let (da, db) = (a.device_ptr().0, b.device_ptr().0);
    assert_eq!(rt.resolve_copy(h, h, 64, MemcpyKind::Default).unwrap(), ResolvedCopy::HostToHost);
    assert_eq!(
        rt.resolve_copy(da, h, 64, MemcpyKind::Default).unwrap(),
        ResolvedCopy::Backend(CopyDirection::HostToDevice)
    );
    assert_eq!(
        rt.resolve_copy(h, da, 64, MemcpyKind::Default).unwrap(),
        ResolvedCopy::Backend(CopyDirection::DeviceToHost)
    );
    assert_eq!(
        rt.resolve_copy(da, db, 64, MemcpyKind::Default).unwrap(),
        ResolvedCopy::Backend(CopyDirection::DeviceToDevice)
    );
    // Interior pointers are device memory too.
    assert_eq!(
        rt.resolve_copy(da + 10, db + 20, 44, MemcpyKind::Default).unwrap(),
        ResolvedCopy::Backend(CopyDirection::DeviceToDevice)
    );
    // Explicit kinds that agree with the pointers.
    assert_eq!(rt.resolve_copy(h, h, 64, MemcpyKind::HostToHost).unwrap(), ResolvedCopy::HostToHost);
    assert_eq!(
        rt.resolve_copy(da, h, 64, MemcpyKind::HostToDevice).unwrap(),
        ResolvedCopy::Backend(CopyDirection::HostToDevice)
    );
    assert_eq!(
        rt.resolve_copy(h, da, 64, MemcpyKind::DeviceToHost).unwrap(),
        ResolvedCopy::Backend(CopyDirection::DeviceToHost)
    );
    assert_eq!(
        rt.resolve_copy(da, db, 64, MemcpyKind::DeviceToDevice).unwrap(),
        ResolvedCopy::Backend(CopyDirection::DeviceToDevice)
    );
}

#[test]
fn a_kind_that_contradicts_the_pointers_is_rejected() {
    let rt = runtime();
    let a = device(0).alloc_zeroed::<u8>(64).unwrap();
    let b = device(0).alloc_zeroed::<u8>(64).unwrap();
    let host = [0u8; 64];
    let h = host_addr(&host);
    let (da, db) = (a.device_ptr().0, b.device_ptr().0);
    let wrong = [
        (h, h, MemcpyKind::HostToDevice),
        (h, h, MemcpyKind::DeviceToHost),
        (h, h, MemcpyKind::DeviceToDevice),
        (da, h, MemcpyKind::DeviceToHost),
        (da, h, MemcpyKind::HostToHost),
        (da, h, MemcpyKind::DeviceToDevice),
        (h, da, MemcpyKind::HostToDevice),
        (h, da, MemcpyKind::HostToHost),
        (h, da, MemcpyKind::DeviceToDevice),
        (da, db, MemcpyKind::HostToDevice),
        (da, db, MemcpyKind::DeviceToHost),
        (da, db, MemcpyKind::HostToHost),
    ];
    for (dst, src, kind) in wrong {
        let err = expect_err(rt.resolve_copy(dst, src, 64, kind), 1, &[&format!("{kind:?}")]);
        let text = err.message().to_lowercase();
        assert!(text.contains("destination") && text.contains("source"), "{err}");
    }
}

#[test]
fn copies_between_devices() {
    let Some(dev1) = second_device("copies_between_devices") else {
        return;
    };
    let dev0 = device(0);
    let data: Vec<u16> = (0..999).collect();
    let a = dev0.alloc_from_slice(&data).unwrap();
    let b = dev1.alloc_zeroed::<u16>(999).unwrap();
    let rt = runtime();
    rt.copy_device_to_device(b.device_ptr(), a.device_ptr(), 999 * 2).unwrap();
    assert_eq!(b.to_vec().unwrap(), data);
    assert_eq!(
        rt.resolve_copy(b.device_ptr().0, a.device_ptr().0, 1998, MemcpyKind::Default).unwrap(),
        ResolvedCopy::Backend(CopyDirection::DeviceToDevice)
    );
    let c = dev0.alloc_zeroed::<u16>(999).unwrap();
    let s1 = dev1.create_stream().unwrap();
    s1.copy_device_to_device(&b, &c).unwrap();
    s1.synchronize().unwrap();
    assert_eq!(c.to_vec().unwrap(), data);
}
