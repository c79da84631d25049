//! hipMemset / hipMemsetAsync (8-bit through the runtime and buffers, 16- and
//! 32-bit elements through `Runtime::memset_async` with `FillValue`).

use hipmem::{DevicePtr, FillValue};

use crate::{DELAY, device, expect_err, host_addr, non_blocking, read0, runtime, zeroed_flag};

#[test]
fn buffer_memset_sets_every_byte() {
    let dev = device(0);
    for len in [1usize, 3, 4, 5, 1001, 4096, 4099] {
        let buf = dev.alloc::<u8>(len).unwrap();
        buf.memset(0xab).unwrap();
        assert!(buf.to_vec().unwrap().iter().all(|&b| b == 0xab), "memset of {len} bytes");
    }
    let words = dev.alloc::<u32>(17).unwrap();
    words.memset(0xab).unwrap();
    assert_eq!(words.to_vec().unwrap(), vec![0xabab_abab; 17]);
    words.memset(0).unwrap();
    assert_eq!(words.to_vec().unwrap(), vec![0; 17]);
    let floats = dev.alloc::<f32>(9).unwrap();
    floats.memset(0xff).unwrap();
    assert!(floats.to_vec().unwrap().iter().all(|x| x.to_bits() == u32::MAX));
}

#[test]
fn runtime_memset_at_an_interior_offset_touches_only_its_range() {
    let rt = runtime();
    let buf = device(0).alloc_zeroed::<u8>(100).unwrap();
    let p = buf.device_ptr();
    rt.memset(DevicePtr(p.0 + 7), FillValue::U8(0x11), 13).unwrap();
    let v = buf.to_vec().unwrap();
    assert!(v[..7].iter().all(|&b| b == 0));
    assert!(v[7..20].iter().all(|&b| b == 0x11));
    assert!(v[20..].iter().all(|&b| b == 0));
    // Up to the last byte exactly.
    rt.memset(DevicePtr(p.0 + 90), FillValue::U8(0x22), 10).unwrap();
    let v = buf.to_vec().unwrap();
    assert!(v[90..].iter().all(|&b| b == 0x22));
    assert_eq!(v[89], 0);
}

#[test]
fn sixteen_and_thirty_two_bit_memsets_write_whole_elements() {
    let rt = runtime();
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let halves = dev.alloc_zeroed::<u16>(11).unwrap();
    rt.memset_async(halves.device_ptr(), FillValue::U16(0xbeef), 11, stream.raw()).unwrap();
    let words = dev.alloc_zeroed::<u32>(13).unwrap();
    rt.memset_async(words.device_ptr(), FillValue::U32(0xdead_beef), 13, stream.raw()).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(halves.to_vec().unwrap(), vec![0xbeef; 11]);
    assert_eq!(words.to_vec().unwrap(), vec![0xdead_beef; 13]);

    // Part of a buffer, at an aligned interior offset.
    let part = dev.alloc_zeroed::<u32>(10).unwrap();
    rt.memset_async(DevicePtr(part.device_ptr().0 + 8), FillValue::U32(5), 3, stream.raw()).unwrap();
    let halves2 = dev.alloc_zeroed::<u16>(10).unwrap();
    rt.memset_async(DevicePtr(halves2.device_ptr().0 + 2), FillValue::U16(9), 7, stream.raw()).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(part.to_vec().unwrap(), vec![0, 0, 5, 5, 5, 0, 0, 0, 0, 0]);
    assert_eq!(halves2.to_vec().unwrap(), vec![0, 9, 9, 9, 9, 9, 9, 9, 0, 0]);

    // The synchronous form with wide elements.
    let sync = dev.alloc_zeroed::<u32>(5).unwrap();
    rt.memset(sync.device_ptr(), FillValue::U32(0x0102_0304), 5).unwrap();
    assert_eq!(sync.to_vec().unwrap(), vec![0x0102_0304; 5]);
    rt.memset(sync.device_ptr(), FillValue::U16(0x7777), 3).unwrap();
    let bytes: Vec<u8> = hipmem::bytemuck::cast_slice(&sync.to_vec().unwrap()).to_vec();
    assert!(bytes[..6].iter().all(|&b| b == 0x77));
    assert_eq!(&bytes[6..8], &0x0102_0304u32.to_ne_bytes()[2..4]);
}

/// hipMemsetAsync is ordered after earlier work of its stream.
#[test]
fn stream_memset_runs_in_stream_order() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 7).unwrap();
    stream.memset(&flag, 0).unwrap();
    assert_pending!(t0, !stream.query().unwrap(), "the delay kernel finished at once");
    stream.synchronize().unwrap();
    assert_eq!(read0(&flag), 0, "the memset ran before the delay kernel queued ahead of it");

    let bytes = dev.alloc_zeroed::<u8>(33).unwrap();
    stream.memset(&bytes, 0x5c).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(bytes.to_vec().unwrap(), vec![0x5c; 33]);
}

/// hipMemset on the null stream is synchronous for the host: it waits for
/// earlier work (including work of blocking streams) and is done when it
/// returns.
#[test]
fn synchronous_memset_is_done_when_it_returns() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let flag = zeroed_flag(&dev);
    stream.delay(DELAY, &flag, 7).unwrap();
    flag.memset(0).unwrap();
    assert!(stream.query().unwrap(), "hipMemset returned before earlier blocking-stream work finished");
    assert_eq!(read0(&flag), 0);
}

#[test]
fn zero_size_memsets_succeed_before_any_other_check() {
    let rt = runtime();
    let stack = [0u8; 4];
    let stream = device(0).create_stream().unwrap();
    for value in [FillValue::U8(1), FillValue::U16(2), FillValue::U32(3)] {
        rt.memset(DevicePtr::NULL, value, 0).unwrap();
        rt.memset(DevicePtr(host_addr(&stack)), value, 0).unwrap();
        rt.memset_async(DevicePtr::NULL, value, 0, stream.raw()).unwrap();
        rt.memset_async(DevicePtr(host_addr(&stack)), value, 0, stream.raw()).unwrap();
    }
    stream.synchronize().unwrap();
    assert_eq!(stack, [0; 4]);
}

#[test]
fn memset_of_null_is_invalid_value() {
    let rt = runtime();
    let stream = device(0).create_stream().unwrap();
    expect_err(rt.memset(DevicePtr::NULL, FillValue::U8(1), 4), 1, &[]);
    expect_err(rt.memset_async(DevicePtr::NULL, FillValue::U8(1), 4, stream.raw()), 1, &["null"]);
    expect_err(rt.memset_async(DevicePtr::NULL, FillValue::U32(1), 1, stream.raw()), 1, &["null"]);
}

#[test]
fn memset_of_host_memory_is_invalid_value() {
    let rt = runtime();
    let stream = device(0).create_stream().unwrap();
    let stack = [0u32; 8];
    let heap: Vec<u8> = std::iter::repeat_n(0, 64).collect();
    for addr in [host_addr(&stack), heap.as_ptr() as u64] {
        expect_err(rt.memset(DevicePtr(addr), FillValue::U8(1), 4), 1, &["not device memory"]);
        expect_err(
            rt.memset_async(DevicePtr(addr), FillValue::U8(1), 4, stream.raw()),
            1,
            &["not inside any live"],
        );
        expect_err(
            rt.memset_async(DevicePtr(addr), FillValue::U32(1), 2, stream.raw()),
            1,
            &["not inside any live"],
        );
    }
    stream.synchronize().unwrap();
    assert_eq!(stack, [0; 8]);
    assert!(heap.iter().all(|&b| b == 0));
}

#[test]
fn memset_past_the_end_is_invalid_value_and_writes_nothing() {
    let rt = runtime();
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let buf = dev.alloc_zeroed::<u8>(10).unwrap();
    let p = buf.device_ptr();
    expect_err(rt.memset(p, FillValue::U8(1), 11), 1, &["past the end"]);
    expect_err(rt.memset(DevicePtr(p.0 + 9), FillValue::U8(1), 2), 1, &["past the end"]);
    expect_err(rt.memset_async(p, FillValue::U16(1), 6, stream.raw()), 1, &["past the end"]);
    expect_err(rt.memset_async(p, FillValue::U32(1), 3, stream.raw()), 1, &["past the end"]);
    expect_err(rt.memset_async(DevicePtr(p.0 + 8), FillValue::U32(1), 1, stream.raw()), 1, &["past the end"]);
    // An element count whose byte size overflows.
    expect_err(rt.memset_async(p, FillValue::U32(1), u64::MAX, stream.raw()), 1, &["overflow"]);
    expect_err(rt.memset_async(p, FillValue::U16(1), u64::MAX / 2 + 1, stream.raw()), 1, &["overflow"]);
    stream.synchronize().unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![0; 10]);
}
