//! hipMalloc / hipFree through the runtime and through `DeviceBuffer`.

use hipmem::DevicePtr;

use crate::{DELAY, device, expect_err, host_addr, private_runtime, runtime, zeroed_flag};

#[test]
fn malloc_of_zero_bytes_is_null_and_free_of_null_succeeds() {
    let rt = runtime();
    for ordinal in 0..rt.device_count() {
        assert_eq!(rt.malloc(ordinal, 0).unwrap(), DevicePtr::NULL);
    }
    rt.free(DevicePtr::NULL).unwrap();
    rt.free(DevicePtr::NULL).unwrap();
}

#[test]
fn malloc_returns_distinct_usable_allocations() {
    let rt = runtime();
    let sizes = [1u64, 3, 4, 255, 4096, 4097, 65_536, 1 << 20];
    let ptrs: Vec<DevicePtr> = sizes.iter().map(|&s| rt.malloc(0, s).unwrap()).collect();
    for (i, (&p, &s)) in ptrs.iter().zip(&sizes).enumerate() {
        assert!(!p.is_null(), "hipMalloc({s}) gave null");
        let a = rt.allocations().get(p).expect("the allocation is registered");
        assert_eq!((a.base, a.size, a.device), (p, s, 0));
        for (&q, &t) in ptrs.iter().zip(&sizes).skip(i + 1) {
            let disjoint = p.0 + s <= q.0 || q.0 + t <= p.0;
            assert!(disjoint, "allocations {p}+{s} and {q}+{t} overlap");
        }
        // The whole range is usable: write the last byte, read it back.
        let last = DevicePtr(p.0 + s - 1);
        rt.copy_host_to_device(last, &[0x5a]).unwrap();
        let mut back = [0u8];
        rt.copy_device_to_host(&mut back, last).unwrap();
        assert_eq!(back, [0x5a]);
    }
    for p in ptrs {
        rt.free(p).unwrap();
    }
}

#[test]
fn impossible_sizes_are_out_of_memory() {
    let rt = runtime();
    let total = rt.mem_get_info(0).unwrap().total;
    for size in [1u64 << 60, u64::MAX, u64::MAX - 4095, total.saturating_mul(4)] {
        let err = expect_err(rt.malloc(0, size), 2, &[]);
        assert_eq!(err.name(), "hipErrorOutOfMemory");
    }
    expect_err(device(0).alloc::<u64>(usize::MAX), 2, &[]);
    expect_err(device(0).alloc::<[u8; 16]>(usize::MAX / 2), 2, &[]);
    // The failed requests left nothing behind: a normal allocation still works.
    let ok = device(0).alloc_from_slice(&[1u8, 2, 3]).unwrap();
    assert_eq!(ok.to_vec().unwrap(), vec![1, 2, 3]);
}

#[test]
fn free_of_memory_never_allocated_is_invalid_value() {
    let rt = runtime();
    let on_stack = [0u64; 4];
    expect_err(rt.free(DevicePtr(host_addr(&on_stack))), 1, &["not a live"]);
    let on_heap: Vec<u8> = std::iter::repeat_n(0, 64).collect();
    expect_err(rt.free(DevicePtr(on_heap.as_ptr() as u64)), 1, &["not a live"]);
    expect_err(rt.free(DevicePtr(0x10)), 1, &["not a live"]);
}

#[test]
fn free_of_an_interior_pointer_is_invalid_value_and_keeps_the_allocation() {
    let rt = runtime();
    let base = rt.malloc(0, 4096).unwrap();
    for offset in [1u64, 4, 2048, 4095] {
        let err = expect_err(rt.free(DevicePtr(base.0 + offset)), 1, &[&format!("{offset} bytes into")]);
        assert!(err.message().contains(&base.to_string()), "message does not name the allocation: {err}");
    }
    // Still live and usable.
    rt.copy_host_to_device(base, &[7u8; 4096]).unwrap();
    let mut back = vec![0u8; 4096];
    rt.copy_device_to_host(&mut back, base).unwrap();
    assert!(back.iter().all(|&b| b == 7));
    rt.free(base).unwrap();
}

#[test]
fn double_free_is_invalid_value() {
    let rt = private_runtime();
    let p = rt.malloc(0, 1024).unwrap();
    rt.free(p).unwrap();
    expect_err(rt.free(p), 1, &["not a live", "already freed"]);
    assert!(rt.allocations().get(p).is_none());
    // A freed pointer is no longer device memory for anything else either.
    expect_err(rt.copy_host_to_device(p, &[1, 2, 3]), 1, &["not inside any live"]);
    let mut back = [0u8; 3];
    expect_err(rt.copy_device_to_host(&mut back, p), 1, &["not inside any live"]);
}

#[test]
fn free_on_each_device() {
    let rt = runtime();
    for ordinal in 0..rt.device_count() {
        let p = rt.malloc(ordinal, 100).unwrap();
        assert_eq!(rt.allocations().get(p).unwrap().device, ordinal);
        rt.free(p).unwrap();
    }
}

/// hipFree waits for the device's queued work before the memory goes away.
#[test]
fn free_waits_for_work_queued_on_the_memory() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(crate::non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let t0 = std::time::Instant::now();
    stream.delay(DELAY, &flag, 7).unwrap();
    assert_pending!(t0, !stream.query().unwrap(), "the delay kernel finished at once");
    drop(flag); // hipFree
    assert!(stream.query().unwrap(), "hipFree returned while a kernel still used the memory");
}

#[test]
fn device_buffers_free_themselves_and_report_their_shape() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let buf = dev.alloc::<u16>(1001).unwrap();
    assert_eq!(buf.len(), 1001);
    assert!(!buf.is_empty());
    assert_eq!(buf.size_bytes(), 2002);
    assert_eq!(buf.device(), 0);
    assert_eq!(buf.runtime().device_count(), rt.device_count());
    let ptr = buf.device_ptr();
    assert_eq!(rt.allocations().get(ptr).unwrap().size, 2002);
    assert_eq!(rt.allocations().len(), 1);
    drop(buf);
    assert!(rt.allocations().get(ptr).is_none(), "dropping the buffer did not free it");
    assert!(rt.allocations().is_empty());
    expect_err(rt.free(ptr), 1, &["not a live"]);
    assert!(rt.take_drop_errors().is_empty());
}

#[test]
fn empty_buffers_are_null_and_every_operation_on_them_succeeds() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let mut buf = dev.alloc::<i32>(0).unwrap();
    assert!(buf.is_empty());
    assert_eq!(buf.size_bytes(), 0);
    assert!(buf.device_ptr().is_null());
    assert_eq!(buf.to_vec().unwrap(), Vec::<i32>::new());
    buf.copy_from_host(&[]).unwrap();
    buf.memset(3).unwrap();
    stream.fill(&buf, 5).unwrap();
    stream.iota(&buf, 2).unwrap();
    stream.memset(&buf, 1).unwrap();
    let other = dev.alloc_from_slice::<i32>(&[]).unwrap();
    buf.copy_from_device(&other).unwrap();
    stream.copy_device_to_device(&other, &buf).unwrap();
    stream.synchronize().unwrap();
    let zeroed = dev.alloc_zeroed::<f64>(0).unwrap();
    assert!(zeroed.device_ptr().is_null());
}

#[test]
fn alloc_zeroed_and_alloc_from_slice_initialize_the_memory() {
    let dev = device(0);
    let z = dev.alloc_zeroed::<u8>(12_345).unwrap();
    assert!(z.to_vec().unwrap().iter().all(|&b| b == 0));
    let z = dev.alloc_zeroed::<f32>(777).unwrap();
    assert!(z.to_vec().unwrap().iter().all(|&x| x.to_bits() == 0));
    let data: Vec<u64> = (0..513).map(|i| i * 0x0101_0101_0101).collect();
    assert_eq!(dev.alloc_from_slice(&data).unwrap().to_vec().unwrap(), data);
}

/// A `DeviceBuffer` whose memory was freed behind its back records one drop
/// error (hipFree fails in Drop) and does not panic.
#[test]
fn dropping_a_buffer_freed_behind_its_back_records_one_drop_error() {
    let rt = private_runtime();
    assert!(rt.take_drop_errors().is_empty());
    let dev = rt.device(0).unwrap();
    let buf = dev.alloc_from_slice(&[1u32, 2, 3]).unwrap();
    let ptr = buf.device_ptr();
    rt.free(ptr).unwrap();
    drop(buf);
    let errors = rt.take_drop_errors();
    assert_eq!(errors.len(), 1, "expected one drop error, got {errors:?}");
    let err = &errors[0];
    assert_eq!(err.code(), 1, "{err}");
    assert!(err.message().contains("hipFree"), "drop error does not say what failed: {err}");
    assert!(err.message().contains(&ptr.to_string()), "drop error does not name the pointer: {err}");
    assert!(rt.take_drop_errors().is_empty(), "take_drop_errors did not clear the log");
    // The runtime goes on working.
    let again = dev.alloc_from_slice(&[4u32]).unwrap();
    assert_eq!(again.to_vec().unwrap(), vec![4]);
    drop(again);
    assert!(rt.take_drop_errors().is_empty(), "a normal drop recorded an error");
}

#[test]
fn buffers_of_zero_sized_elements_hold_no_memory() {
    let dev = device(0);
    let mut buf = dev.alloc::<[u8; 0]>(5).unwrap();
    assert_eq!(buf.len(), 5);
    assert_eq!(buf.size_bytes(), 0);
    assert!(buf.device_ptr().is_null());
    assert_eq!(buf.to_vec().unwrap().len(), 5);
    buf.copy_from_host(&[[]; 5]).unwrap();
    buf.memset(1).unwrap();
}

#[test]
fn device_pointer_offsets_are_checked() {
    assert_eq!(DevicePtr(0x1000).offset(0x10).unwrap(), DevicePtr(0x1010));
    assert_eq!(DevicePtr(0x1000).to_string(), "0x1000");
    assert!(DevicePtr::NULL.is_null() && !DevicePtr(1).is_null());
    expect_err(DevicePtr(u64::MAX).offset(1), 1, &["overflow"]);
    expect_err(DevicePtr(u64::MAX - 3).offset(8), 1, &["overflow"]);
}
