//! Device count, properties, memory information, invalid ordinals and
//! device-wide synchronization.

use hipmem::backend::RawStream;
use hipmem::{Device, Stream};

use crate::{DELAY, device, expect_err, non_blocking, runtime, second_device, zeroed_flag};

#[test]
fn there_is_at_least_one_device_and_each_describes_itself() {
    let rt = runtime();
    assert!(rt.device_count() >= 1, "hipGetDeviceCount returned 0");
    for ordinal in 0..rt.device_count() {
        let props = rt.device_properties(ordinal).unwrap();
        assert_eq!(props.ordinal, ordinal);
        assert!(!props.name.trim().is_empty(), "device {ordinal} has no name");
        assert!(props.total_memory > 0, "device {ordinal} reports no memory");
        assert!(props.multiprocessor_count > 0, "device {ordinal} has no multiprocessors");
        let dev = rt.device(ordinal).unwrap();
        assert_eq!(dev.ordinal(), ordinal);
        assert_eq!(dev.properties(), props);
        assert_eq!(dev.runtime().device_count(), rt.device_count());
        rt.check_device(ordinal).unwrap();
    }
}

#[test]
fn invalid_device_ordinal_is_invalid_device_everywhere() {
    let rt = runtime();
    let count = rt.device_count();
    for bad in [count, count + 1, 1000, usize::MAX] {
        let text = bad.to_string();
        expect_err(rt.device(bad), 101, &[&text]);
        expect_err(rt.device_properties(bad), 101, &[&text]);
        expect_err(rt.check_device(bad), 101, &[&text]);
        expect_err(rt.malloc(bad, 256), 101, &[&text]);
        expect_err(rt.malloc(bad, 0), 101, &[&text]);
        expect_err(rt.mem_get_info(bad), 101, &[&text]);
        expect_err(rt.device_synchronize(bad), 101, &[&text]);
        expect_err(Stream::from_raw(rt, RawStream::null(bad)), 101, &[&text]);
        expect_err(Stream::from_raw(rt, RawStream { device: bad, handle: 0x1230 }), 101, &[&text]);
    }
}

#[test]
fn process_wide_device_lookup_checks_the_ordinal() {
    let dev = Device::get(0).unwrap();
    assert_eq!(dev.ordinal(), 0);
    expect_err(Device::get(usize::MAX), 101, &[]);
}

#[test]
fn mem_get_info_reports_free_within_total() {
    let rt = runtime();
    for ordinal in 0..rt.device_count() {
        let info = rt.mem_get_info(ordinal).unwrap();
        assert!(info.total > 0, "device {ordinal}: total is 0");
        assert!(info.free > 0, "device {ordinal}: nothing free");
        assert!(info.free <= info.total, "device {ordinal}: free {} > total {}", info.free, info.total);
        assert_eq!(info.total, rt.device_properties(ordinal).unwrap().total_memory);
        assert_eq!(device(ordinal).mem_info().unwrap().total, info.total);
    }
}

/// A large-ish allocation lowers free memory by at least its size, and
/// freeing it gives it back. Other tests allocate and free small buffers
/// concurrently (and hipFree waits for the device, a window in which they
/// do), so each side is measured a few times, must hold at least once, and
/// may miss by a slack far below the allocation's size.
#[test]
fn mem_get_info_free_follows_a_large_allocation() {
    let rt = runtime();
    let total = rt.mem_get_info(0).unwrap().total;
    let size = (256u64 << 20).min(total / 4);
    let slack = size / 8;
    let mut dropped = Vec::new();
    let mut ptr = hipmem::DevicePtr::NULL;
    let mut ok = false;
    for _ in 0..5 {
        let before = rt.mem_get_info(0).unwrap().free;
        ptr = rt.malloc(0, size).unwrap();
        let after = rt.mem_get_info(0).unwrap().free;
        dropped.push((before, after));
        if before >= after && before - after >= size - slack {
            ok = true;
            break;
        }
        rt.free(ptr).unwrap();
        ptr = hipmem::DevicePtr::NULL;
    }
    assert!(ok, "free memory did not drop by {size} bytes after hipMalloc: (before, after) = {dropped:?}");
    let mut rose = Vec::new();
    let mut ok = false;
    for attempt in 0..5 {
        if attempt > 0 {
            ptr = rt.malloc(0, size).unwrap();
        }
        let before = rt.mem_get_info(0).unwrap().free;
        rt.free(ptr).unwrap();
        let after = rt.mem_get_info(0).unwrap().free;
        rose.push((before, after));
        if after >= before && after - before >= size - slack {
            ok = true;
            break;
        }
    }
    assert!(ok, "free memory did not rise by {size} bytes after hipFree: (before, after) = {rose:?}");
}

#[test]
fn device_synchronize_waits_for_every_stream_of_the_device() {
    let dev = device(0);
    let (f1, f2, f3) = (zeroed_flag(&dev), zeroed_flag(&dev), zeroed_flag(&dev));
    let blocking = dev.create_stream().unwrap();
    let nb = dev.create_stream_with_flags(non_blocking()).unwrap();
    let t0 = std::time::Instant::now();
    blocking.delay(DELAY, &f1, 1).unwrap();
    nb.delay(DELAY, &f2, 2).unwrap();
    dev.null_stream().delay(DELAY, &f3, 3).unwrap();
    assert_pending!(t0, !blocking.query().unwrap() && !nb.query().unwrap(), "the delays finished at once");
    dev.synchronize().unwrap();
    assert!(blocking.query().unwrap(), "hipDeviceSynchronize returned before a blocking stream");
    assert!(nb.query().unwrap(), "hipDeviceSynchronize returned before a non-blocking stream");
    assert_eq!(crate::read0(&f1), 1);
    assert_eq!(crate::read0(&f2), 2);
    assert_eq!(crate::read0(&f3), 3);
    runtime().device_synchronize(0).unwrap();
}

#[test]
fn two_devices_have_their_own_memory_and_streams() {
    let Some(dev1) = second_device("two_devices_have_their_own_memory_and_streams") else {
        return;
    };
    let dev0 = device(0);
    let a = dev0.alloc_from_slice(&[1u32, 2, 3, 4, 5]).unwrap();
    let mut b = dev1.alloc::<u32>(5).unwrap();
    assert_eq!(b.device(), 1);
    b.copy_from_device(&a).unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![1, 2, 3, 4, 5]);
    let s1 = dev1.create_stream().unwrap();
    assert_eq!(s1.device(), 1);
    s1.fill(&b, 9).unwrap();
    s1.synchronize().unwrap();
    assert_eq!(b.to_vec().unwrap(), vec![9; 5]);
    assert_eq!(a.to_vec().unwrap(), vec![1, 2, 3, 4, 5], "work on device 1 changed device 0's memory");
    let attrs = runtime().pointer_attributes(b.device_ptr().0).unwrap();
    assert_eq!(attrs.device, 1);
}
