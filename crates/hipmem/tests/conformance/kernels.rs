//! The built-in kernels: fill, iota (the seeds' `data[i] = i * k`) and delay.

use std::time::Duration;

use hipmem::FillElement;
use hipmem::bytemuck::Pod;

use crate::{DELAY, device, expect_err, non_blocking, read0, second_device, zeroed_flag};

fn check_fill<T: FillElement + PartialEq + std::fmt::Debug>(value: T, lens: &[usize]) {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    for &len in lens {
        let buf = dev.alloc_zeroed::<T>(len).unwrap();
        stream.fill(&buf, value).unwrap();
        stream.synchronize().unwrap();
        let got = buf.to_vec().unwrap();
        assert_eq!(got, vec![value; len], "fill of {len} {}", std::any::type_name::<T>());
    }
}

fn bits_eq<T: Pod>(a: &[T], b: &[T]) -> bool {
    hipmem::bytemuck::cast_slice::<T, u8>(a) == hipmem::bytemuck::cast_slice::<T, u8>(b)
}

#[test]
fn fill_writes_every_element_of_every_width() {
    check_fill(0xa7u8, &[1, 3, 4, 5, 1001, 4099]);
    check_fill(-3i8, &[1, 7]);
    check_fill(0xbeefu16, &[1, 3, 7, 1001]);
    check_fill(-12_345i16, &[2, 9]);
    check_fill(0xdead_beefu32, &[1, 5, 1001, 65_537]);
    check_fill(-7i32, &[3, 100]);
    check_fill(1.5f32, &[1, 6, 1000]);
    check_fill(-0.0f32, &[3]);
}

#[test]
fn fill_keeps_float_bit_patterns() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let nan = f32::from_bits(0x7fc0_1234);
    let buf = dev.alloc_zeroed::<f32>(5).unwrap();
    stream.fill(&buf, nan).unwrap();
    stream.synchronize().unwrap();
    assert!(bits_eq(&buf.to_vec().unwrap(), &[nan; 5]));
}

#[test]
fn fill_replaces_only_its_buffer() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let a = dev.alloc_zeroed::<u16>(7).unwrap();
    let b = dev.alloc_zeroed::<u16>(7).unwrap();
    stream.fill(&a, 1).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(a.to_vec().unwrap(), vec![1; 7]);
    assert_eq!(b.to_vec().unwrap(), vec![0; 7]);
}

#[test]
fn iota_writes_i_times_k() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    for (len, k) in [(1usize, 5), (7, 1), (1000, 2), (1001, -3), (4099, 0), (65_536, 7)] {
        let buf = dev.alloc_zeroed::<i32>(len).unwrap();
        stream.iota(&buf, k).unwrap();
        stream.synchronize().unwrap();
        let want: Vec<i32> = (0..len as i32).map(|i| i * k).collect();
        assert_eq!(buf.to_vec().unwrap(), want, "iota of {len} with k = {k}");
    }
}

/// The example of the crate documentation: `buf[21] == 42` after iota(2).
#[test]
fn iota_matches_the_documented_example() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let buf = dev.alloc::<i32>(1 << 16).unwrap();
    stream.iota(&buf, 2).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(buf.to_vec().unwrap()[21], 42);
}

#[test]
fn kernels_on_one_stream_run_in_order() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let buf = dev.alloc_zeroed::<i32>(100).unwrap();
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 1).unwrap();
    stream.fill(&buf, 9).unwrap();
    stream.iota(&buf, 3).unwrap();
    assert_pending!(t0, !stream.query().unwrap(), "queued work finished at once");
    stream.synchronize().unwrap();
    assert_eq!(buf.to_vec().unwrap(), (0..100).map(|i| i * 3).collect::<Vec<_>>());
    stream.iota(&buf, 3).unwrap();
    stream.fill(&buf, -1).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![-1; 100]);
}

#[test]
fn delay_writes_its_flag_after_the_duration() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let out = zeroed_flag(&dev);
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 0xfeed).unwrap();
    // What the stream copies right behind the kernel is the flag it wrote.
    stream.copy_device_to_device(&flag, &out).unwrap();
    assert_pending!(t0, !stream.query().unwrap(), "queued work finished at once");
    stream.synchronize().unwrap();
    assert_eq!(read0(&flag), 0xfeed);
    assert_eq!(read0(&out), 0xfeed);
    // A zero duration just writes the flag; only element 0 is written.
    let wide = dev.alloc_zeroed::<u32>(4).unwrap();
    stream.delay(Duration::ZERO, &wide, 3).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(wide.to_vec().unwrap(), vec![3, 0, 0, 0]);
}

#[test]
fn delay_with_an_empty_flag_buffer_is_invalid_value() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let empty = dev.alloc::<u32>(0).unwrap();
    expect_err(stream.delay(DELAY, &empty, 1), 1, &["empty"]);
    assert!(stream.query().unwrap(), "a refused delay kernel was queued anyway");
}

#[test]
fn kernels_run_on_the_null_stream_and_on_device_one() {
    let dev = device(0);
    let null = dev.null_stream();
    let buf = dev.alloc_zeroed::<u32>(10).unwrap();
    null.fill(&buf, 4).unwrap();
    null.synchronize().unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![4; 10]);
    let Some(dev1) = second_device("kernels_run_on_the_null_stream_and_on_device_one") else {
        return;
    };
    let ints = dev1.alloc_zeroed::<i32>(33).unwrap();
    let s1 = dev1.create_stream().unwrap();
    s1.iota(&ints, 4).unwrap();
    s1.synchronize().unwrap();
    assert_eq!(ints.to_vec().unwrap(), (0..33).map(|i| i * 4).collect::<Vec<_>>());
    dev1.null_stream().fill(&ints, -2).unwrap();
    dev1.null_stream().synchronize().unwrap();
    assert_eq!(ints.to_vec().unwrap(), vec![-2; 33]);
}
