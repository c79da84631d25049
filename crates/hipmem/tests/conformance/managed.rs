//! Managed memory: hipMallocManaged, hipFree of managed memory, pointer
//! attributes, host access after device work, hipMemPrefetchAsync (ordered
//! in its stream), hipMemAdvise (every value, whole pages, never the last
//! prefetch location), hipMemRangeGetAttribute(s) over uniform and
//! non-uniform ranges, hipStreamAttachMemAsync, and every bad input of
//! hip-memory-api.md for them. Sizes stay at a few MiB.

use std::time::Instant;

use hipmem::backend::managed_memory::{CPU_DEVICE_ID, INVALID_DEVICE_ID};
use hipmem::{Advice, AttachFlags, DevicePtr, DeviceSlice, Location, ManagedBuffer, MemoryType};

use crate::{DELAY, device, expect_err, private_runtime, runtime, zeroed_flag};

const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;
const READ_MOSTLY: i32 = 1;
const PREFERRED: i32 = 2;
const ACCESSED_BY: i32 = 3;
const LAST_PREFETCH: i32 = 4;

fn attr(ptr: DevicePtr, count: u64, attribute: i32) -> i32 {
    let mut data = [0u8; 4];
    runtime().mem_range_get_attribute(Some(&mut data), attribute, ptr, count).unwrap();
    i32::from_ne_bytes(data)
}

fn accessed_by(ptr: DevicePtr, count: u64, slots: usize) -> Vec<i32> {
    let mut data = vec![0u8; 4 * slots];
    runtime().mem_range_get_attribute(Some(&mut data), ACCESSED_BY, ptr, count).unwrap();
    data.chunks_exact(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect()
}

#[test]
fn malloc_managed_rules_and_bad_inputs() {
    let rt = runtime();
    expect_err(rt.malloc_managed(0, 0, AttachFlags::GLOBAL), 1, &["0 bytes"]);
    for flags in [0, 3, AttachFlags::SINGLE, 8] {
        expect_err(rt.malloc_managed(0, 4096, flags), 1, &["flags"]);
    }
    expect_err(rt.malloc_managed_into(None, 0, 4096, AttachFlags::GLOBAL), 1, &["null"]);
    expect_err(rt.malloc_managed(0, u64::MAX, AttachFlags::GLOBAL), 2, &[]);
    for flags in [AttachFlags::GLOBAL, AttachFlags::HOST] {
        let mut p = DevicePtr::NULL;
        rt.malloc_managed_into(Some(&mut p), 0, 3 * PAGE + 5, flags).unwrap();
        assert!(!p.is_null());
        let a = rt.pointer_attributes(p.0 + 100).unwrap();
        assert_eq!(a.memory_type, MemoryType::Managed);
        assert!(a.is_managed);
        assert_eq!(a.device, 0);
        assert_eq!(a.allocation_flags, flags);
        assert_eq!(a.host_pointer, Some(p.0 + 100));
        assert_eq!(a.device_pointer, DevicePtr(p.0 + 100));
        expect_err(rt.free(DevicePtr(p.0 + 8)), 1, &["into the allocation"]);
        rt.free(p).unwrap();
    }
}

#[test]
fn double_free_of_managed_memory_is_invalid_value() {
    let rt = private_runtime();
    let p = rt.malloc_managed(0, MIB, AttachFlags::GLOBAL).unwrap();
    rt.free(p).unwrap();
    expect_err(rt.free(p), 1, &[]);
}

#[test]
fn a_managed_buffer_is_not_freed_by_hipfree() {
    let buf = ManagedBuffer::<u32>::new(runtime(), 0, 1024, AttachFlags::Global).unwrap();
    expect_err(runtime().free(buf.ptr()), 1, &["ManagedBuffer"]);
    expect_err(ManagedBuffer::<u32>::new(runtime(), 0, 0, AttachFlags::Global), 1, &[]);
    expect_err(ManagedBuffer::<u32>::new(runtime(), 0, 4, AttachFlags::Single), 1, &["Single"]);
}

#[test]
fn the_seeds_unified_memory_example() {
    // hipMallocManaged, a kernel, hipStreamSynchronize(0), use on the host, hipFree.
    let dev = device(0);
    let mut a = dev.alloc_managed::<i32>(1 << 16).unwrap();
    let null = dev.null_stream();
    null.iota(&a, 3).unwrap();
    null.synchronize().unwrap();
    let host = a.as_slice().unwrap();
    assert_eq!(host[0], 0);
    assert_eq!(host[1000], 3000);
    assert_eq!(host[(1 << 16) - 1], 3 * ((1 << 16) - 1));
}

#[test]
fn host_access_waits_for_the_device_work_and_sees_its_writes() {
    let dev = device(0);
    let stream = dev.create_stream_with_flags(crate::non_blocking()).unwrap();
    let flag = zeroed_flag(&dev);
    let mut buf = dev.alloc_managed::<u32>(256 << 10).unwrap();
    stream.delay(DELAY, &flag, 1).unwrap();
    stream.fill(&buf, 0xabcd_0123).unwrap();
    // No synchronization: host access waits for the devices itself.
    let host = buf.as_slice().unwrap();
    assert!(host.iter().all(|&v| v == 0xabcd_0123));
    // Host writes are seen by device work.
    buf.as_mut_slice().unwrap()[7] = 42;
    let copy = dev.alloc::<u32>(buf.len()).unwrap();
    stream.copy_device_to_device(&buf, &copy).unwrap();
    stream.synchronize().unwrap();
    let back = copy.to_vec().unwrap();
    assert_eq!(back[7], 42);
    assert_eq!(back[8], 0xabcd_0123);
    // Synchronous copies accept managed memory too.
    let mut small = [0u32; 4];
    buf.read_into(&mut small[..]).unwrap_err();
    let mut all = vec![0u32; buf.len()];
    buf.read_into(&mut all).unwrap();
    assert_eq!(all[7], 42);
}

#[test]
fn prefetch_is_ordered_in_its_stream() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let stream = dev.create_stream().unwrap();
    let flag = zeroed_flag(&dev);
    let buf = ManagedBuffer::<u8>::new(&rt, 0, (2 * MIB) as usize, AttachFlags::Global).unwrap();
    let before = rt.managed_statistics().unwrap();
    let start = Instant::now();
    stream.delay(DELAY, &flag, 7).unwrap();
    buf.prefetch(Location::Device(0), &stream).unwrap();
    assert_pending!(start, !stream.query().unwrap(), "the prefetch ran before the delay kernel ended");
    if let Some(bytes) = rt.managed_statistics().unwrap().since(&before).bytes_prefetched {
        assert_pending!(start, bytes == 0, "the prefetch moved {bytes} bytes before the delay ended");
    }
    stream.synchronize().unwrap();
    assert_eq!(flag.to_vec().unwrap()[0], 7);
    assert_eq!(buf.last_prefetch_location().unwrap(), Some(Location::Device(0)));
    if let Some(bytes) = rt.managed_statistics().unwrap().since(&before).bytes_prefetched {
        assert_eq!(bytes, 2 * MIB);
    }
    // Back to the host.
    buf.prefetch(Location::Host, &stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(buf.last_prefetch_location().unwrap(), Some(Location::Host));
}

#[test]
fn prefetch_bad_inputs() {
    let rt = runtime();
    let p = rt.malloc_managed(0, MIB, AttachFlags::GLOBAL).unwrap();
    let null = hipmem::backend::RawStream::null(0);
    expect_err(rt.mem_prefetch_async(DevicePtr::NULL, MIB, 0, null), 1, &["null"]);
    expect_err(rt.mem_prefetch_async(p, 0, 0, null), 1, &["count 0"]);
    expect_err(rt.mem_prefetch_async(p, u64::MAX, 0, null), 1, &["overflow"]);
    expect_err(rt.mem_prefetch_async(p, MIB + 1, 0, null), 1, &["past the end"]);
    let count = rt.device_count() as i32;
    expect_err(rt.mem_prefetch_async(p, MIB, count, null), 101, &[]);
    expect_err(rt.mem_prefetch_async(p, MIB, INVALID_DEVICE_ID, null), 101, &[]);
    let plain = device(0).alloc::<u8>(4096).unwrap();
    expect_err(rt.mem_prefetch_async(plain.device_ptr(), 4096, 0, null), 1, &["not managed"]);
    rt.mem_prefetch_async(p, MIB, CPU_DEVICE_ID, null).unwrap();
    rt.mem_prefetch_async(DevicePtr(p.0 + 100), 10, 0, null).unwrap();
    rt.device_synchronize(0).unwrap();
    rt.free(p).unwrap();
}

#[test]
fn prefetch_on_a_destroyed_stream_is_a_handle_error() {
    let rt = private_runtime();
    let p = rt.malloc_managed(0, MIB, AttachFlags::GLOBAL).unwrap();
    let raw = {
        let s = rt.device(0).unwrap().create_stream().unwrap();
        s.raw()
    };
    let e = rt.mem_prefetch_async(p, MIB, 0, raw).unwrap_err();
    assert!(matches!(e.code(), 400 | 709), "expected a handle error, got {e}");
    rt.free(p).unwrap();
}

#[test]
fn advise_bad_inputs_and_devices() {
    let rt = runtime();
    let p = rt.malloc_managed(0, MIB, AttachFlags::GLOBAL).unwrap();
    let set_pref = Advice::SetPreferredLocation.raw();
    expect_err(rt.mem_advise(DevicePtr::NULL, MIB, set_pref, 0), 1, &["null"]);
    expect_err(rt.mem_advise(p, 0, set_pref, 0), 1, &["count is 0"]);
    expect_err(rt.mem_advise(p, MIB + 1, set_pref, 0), 1, &["past the end"]);
    expect_err(rt.mem_advise(DevicePtr(p.0 + 4096), MIB, set_pref, 0), 1, &["past the end"]);
    for unknown in [0, 7, 99, 102, -1] {
        expect_err(rt.mem_advise(p, MIB, unknown, 0), 1, &["hipMemoryAdvise"]);
    }
    let plain = device(0).alloc::<u8>(4096).unwrap();
    expect_err(rt.mem_advise(plain.device_ptr(), 4096, set_pref, 0), 1, &["not managed"]);
    let host_value = 5u64;
    expect_err(rt.mem_advise(DevicePtr(crate::host_addr(&host_value)), 8, set_pref, 0), 1, &[]);
    let count = rt.device_count() as i32;
    for advice in [Advice::SetPreferredLocation, Advice::SetAccessedBy, Advice::UnsetAccessedBy] {
        expect_err(rt.mem_advise(p, MIB, advice.raw(), count), 101, &[]);
        expect_err(rt.mem_advise(p, MIB, advice.raw(), -2), 101, &[]);
    }
    // ReadMostly ignores the device; hipCpuDeviceId is valid.
    rt.mem_advise(p, MIB, Advice::SetReadMostly.raw(), count + 5).unwrap();
    rt.mem_advise(p, MIB, Advice::UnsetReadMostly.raw(), -7).unwrap();
    rt.mem_advise(p, MIB, set_pref, CPU_DEVICE_ID).unwrap();
    assert_eq!(attr(p, MIB, PREFERRED), CPU_DEVICE_ID);
    rt.mem_advise(p, MIB, Advice::UnsetPreferredLocation.raw(), 0).unwrap();
    assert_eq!(attr(p, MIB, PREFERRED), INVALID_DEVICE_ID);
    // AMD's coarse-grain advice is not supported.
    for coarse in [Advice::SetCoarseGrain, Advice::UnsetCoarseGrain] {
        expect_err(rt.mem_advise(p, MIB, coarse.raw(), 0), 801, &["coarse"]);
    }
    rt.free(p).unwrap();
}

#[test]
fn every_advice_value_takes_effect() {
    let dev = device(0);
    let buf = dev.alloc_managed::<u8>(MIB as usize).unwrap();
    assert!(!buf.is_read_mostly().unwrap());
    buf.advise(Advice::SetReadMostly, Location::Device(0)).unwrap();
    assert!(buf.is_read_mostly().unwrap());
    buf.advise(Advice::UnsetReadMostly, Location::Device(0)).unwrap();
    assert!(!buf.is_read_mostly().unwrap());
    assert_eq!(buf.preferred_location().unwrap(), None);
    buf.advise(Advice::SetPreferredLocation, Location::Device(0)).unwrap();
    assert_eq!(buf.preferred_location().unwrap(), Some(Location::Device(0)));
    buf.advise(Advice::UnsetPreferredLocation, Location::Device(0)).unwrap();
    assert_eq!(buf.preferred_location().unwrap(), None);
    assert_eq!(buf.accessed_by().unwrap(), vec![]);
    buf.advise(Advice::SetAccessedBy, Location::Device(0)).unwrap();
    assert_eq!(buf.accessed_by().unwrap(), vec![Location::Device(0)]);
    buf.advise(Advice::UnsetAccessedBy, Location::Device(0)).unwrap();
    assert_eq!(buf.accessed_by().unwrap(), vec![]);
    expect_err(buf.advise(Advice::SetCoarseGrain, Location::Device(0)), 801, &[]);
}

#[test]
fn advice_never_changes_the_last_prefetch_location() {
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let buf = dev.alloc_managed::<u8>(MIB as usize).unwrap();
    assert_eq!(buf.last_prefetch_location().unwrap(), None);
    buf.advise(Advice::SetPreferredLocation, Location::Host).unwrap();
    assert_eq!(buf.last_prefetch_location().unwrap(), None);
    buf.prefetch(Location::Device(0), &stream).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(buf.last_prefetch_location().unwrap(), Some(Location::Device(0)));
    for advice in [Advice::SetReadMostly, Advice::UnsetPreferredLocation, Advice::SetAccessedBy] {
        buf.advise(advice, Location::Device(0)).unwrap();
        assert_eq!(buf.last_prefetch_location().unwrap(), Some(Location::Device(0)), "after {advice:?}");
    }
}

#[test]
fn advice_on_part_of_a_page_applies_to_the_whole_page() {
    let rt = runtime();
    let p = rt.malloc_managed(0, 4 * MIB, AttachFlags::GLOBAL).unwrap();
    rt.mem_advise(DevicePtr(p.0 + 100), 1, Advice::SetReadMostly.raw(), 0).unwrap();
    assert_eq!(attr(p, PAGE, READ_MOSTLY), 1, "the whole first page is read-mostly");
    assert_eq!(attr(DevicePtr(p.0 + PAGE - 1), 1, READ_MOSTLY), 1);
    assert_eq!(attr(DevicePtr(p.0 + 3 * MIB), PAGE, READ_MOSTLY), 0, "far pages are untouched");
    rt.mem_advise(DevicePtr(p.0 + 3 * MIB + 10), 20, Advice::SetPreferredLocation.raw(), CPU_DEVICE_ID)
        .unwrap();
    assert_eq!(attr(DevicePtr(p.0 + 3 * MIB), PAGE, PREFERRED), CPU_DEVICE_ID);
    rt.free(p).unwrap();
}

#[test]
fn range_attributes_over_uniform_and_non_uniform_ranges() {
    let rt = runtime();
    let size = 4 * MIB;
    let half = 2 * MIB;
    let p = rt.malloc_managed(0, size, AttachFlags::GLOBAL).unwrap();
    let second = DevicePtr(p.0 + half);
    // Fresh memory: no advice, never prefetched.
    assert_eq!(attr(p, size, READ_MOSTLY), 0);
    assert_eq!(attr(p, size, PREFERRED), INVALID_DEVICE_ID);
    assert_eq!(attr(p, size, LAST_PREFETCH), INVALID_DEVICE_ID);
    assert_eq!(accessed_by(p, size, 3), vec![-2, -2, -2]);
    // ReadMostly on the first half: the whole range reads 0.
    rt.mem_advise(p, half, Advice::SetReadMostly.raw(), 0).unwrap();
    assert_eq!(attr(p, half, READ_MOSTLY), 1);
    assert_eq!(attr(p, size, READ_MOSTLY), 0);
    // PreferredLocation: device 0 on the first half, the CPU on the second.
    rt.mem_advise(p, half, Advice::SetPreferredLocation.raw(), 0).unwrap();
    rt.mem_advise(second, half, Advice::SetPreferredLocation.raw(), CPU_DEVICE_ID).unwrap();
    assert_eq!(attr(p, half, PREFERRED), 0);
    assert_eq!(attr(second, half, PREFERRED), CPU_DEVICE_ID);
    assert_eq!(attr(p, size, PREFERRED), INVALID_DEVICE_ID);
    // LastPrefetchLocation: the first half only.
    let stream = device(0).create_stream().unwrap();
    rt.mem_prefetch_async(p, half, 0, stream.raw()).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(attr(p, half, LAST_PREFETCH), 0);
    assert_eq!(attr(p, size, LAST_PREFETCH), INVALID_DEVICE_ID);
    rt.mem_prefetch_async(second, half, CPU_DEVICE_ID, stream.raw()).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(attr(second, half, LAST_PREFETCH), CPU_DEVICE_ID);
    assert_eq!(attr(p, size, LAST_PREFETCH), INVALID_DEVICE_ID);
    // AccessedBy: ids of the devices set for the whole range, padded with -2.
    rt.mem_advise(p, size, Advice::SetAccessedBy.raw(), 0).unwrap();
    assert_eq!(accessed_by(p, size, 3), vec![0, -2, -2]);
    assert_eq!(accessed_by(p, size, 1), vec![0]);
    rt.mem_advise(second, half, Advice::UnsetAccessedBy.raw(), 0).unwrap();
    assert_eq!(accessed_by(p, half, 2), vec![0, -2]);
    assert_eq!(accessed_by(p, size, 2), vec![-2, -2], "not set over the whole range");
    // The plural form reads several at once.
    let (mut a, mut b, mut c) = ([0u8; 4], [0u8; 8], [0u8; 4]);
    let mut data = [Some(&mut a[..]), Some(&mut b[..]), Some(&mut c[..])];
    rt.mem_range_get_attributes(&mut data, &[READ_MOSTLY, ACCESSED_BY, PREFERRED], p, half).unwrap();
    assert_eq!(i32::from_ne_bytes(a), 1);
    assert_eq!(i32::from_ne_bytes(b[..4].try_into().unwrap()), 0);
    assert_eq!(i32::from_ne_bytes(b[4..].try_into().unwrap()), -2);
    assert_eq!(i32::from_ne_bytes(c), 0);
    rt.free(p).unwrap();
}

#[test]
fn range_attribute_bad_inputs() {
    let rt = runtime();
    let p = rt.malloc_managed(0, MIB, AttachFlags::GLOBAL).unwrap();
    let mut four = [0u8; 4];
    let mut eight = [0u8; 8];
    let mut six = [0u8; 6];
    let mut empty = [0u8; 0];
    expect_err(rt.mem_range_get_attribute(None, READ_MOSTLY, p, MIB), 1, &["null"]);
    expect_err(rt.mem_range_get_attribute(Some(&mut empty), READ_MOSTLY, p, MIB), 1, &["data_size"]);
    for scalar in [READ_MOSTLY, PREFERRED, LAST_PREFETCH] {
        expect_err(rt.mem_range_get_attribute(Some(&mut eight), scalar, p, MIB), 1, &["data_size of 4"]);
    }
    expect_err(rt.mem_range_get_attribute(Some(&mut six), ACCESSED_BY, p, MIB), 1, &["multiple of 4"]);
    for unknown in [0, 5, 99, -1] {
        expect_err(
            rt.mem_range_get_attribute(Some(&mut four), unknown, p, MIB),
            1,
            &["hipMemRangeAttribute"],
        );
    }
    expect_err(rt.mem_range_get_attribute(Some(&mut four), READ_MOSTLY, DevicePtr::NULL, MIB), 1, &["null"]);
    expect_err(rt.mem_range_get_attribute(Some(&mut four), READ_MOSTLY, p, 0), 1, &["count is 0"]);
    expect_err(rt.mem_range_get_attribute(Some(&mut four), READ_MOSTLY, p, MIB + 1), 1, &["past the end"]);
    let plain = device(0).alloc::<u8>(4096).unwrap();
    expect_err(
        rt.mem_range_get_attribute(Some(&mut four), READ_MOSTLY, plain.device_ptr(), 4096),
        1,
        &["not managed"],
    );
    // The plural form.
    expect_err(rt.mem_range_get_attributes(&mut [], &[], p, MIB), 1, &["num_attributes"]);
    let mut one = [Some(&mut four[..])];
    expect_err(rt.mem_range_get_attributes(&mut one, &[READ_MOSTLY, PREFERRED], p, MIB), 1, &[]);
    expect_err(rt.mem_range_get_attributes(&mut [None], &[READ_MOSTLY], p, MIB), 1, &["null"]);
    let mut bad = [Some(&mut eight[..])];
    expect_err(rt.mem_range_get_attributes(&mut bad, &[READ_MOSTLY], p, MIB), 1, &["data_size"]);
    let mut ok = [Some(&mut four[..])];
    expect_err(rt.mem_range_get_attributes(&mut ok, &[READ_MOSTLY], p, 0), 1, &[]);
    rt.free(p).unwrap();
}

#[test]
fn stream_attach_rules() {
    let rt = runtime();
    let dev = device(0);
    let stream = dev.create_stream().unwrap();
    let null = hipmem::backend::RawStream::null(0);
    let size = MIB;
    let p = rt.malloc_managed(0, size, AttachFlags::GLOBAL).unwrap();
    expect_err(
        rt.stream_attach_mem_async(stream.raw(), DevicePtr::NULL, 0, AttachFlags::GLOBAL),
        1,
        &["null"],
    );
    for flags in [0, 3, 5, 8] {
        expect_err(rt.stream_attach_mem_async(stream.raw(), p, 0, flags), 1, &["flags"]);
    }
    expect_err(rt.stream_attach_mem_async(null, p, 0, AttachFlags::SINGLE), 1, &["null stream"]);
    expect_err(rt.stream_attach_mem_async(stream.raw(), p, size / 2, AttachFlags::GLOBAL), 1, &["length"]);
    expect_err(rt.stream_attach_mem_async(stream.raw(), p, size + 1, AttachFlags::GLOBAL), 1, &["length"]);
    let plain = dev.alloc::<u8>(4096).unwrap();
    expect_err(rt.stream_attach_mem_async(stream.raw(), plain.device_ptr(), 0, AttachFlags::GLOBAL), 1, &[]);
    rt.stream_attach_mem_async(stream.raw(), p, 0, AttachFlags::SINGLE).unwrap();
    rt.stream_attach_mem_async(stream.raw(), p, size, AttachFlags::HOST).unwrap();
    rt.stream_attach_mem_async(null, p, size, AttachFlags::GLOBAL).unwrap();
    stream.synchronize().unwrap();
    rt.device_synchronize(0).unwrap();
    // Work still runs on it after attaching Global again.
    let mut buf = ManagedBuffer::<i32>::new(rt, 0, 1024, AttachFlags::Host).unwrap();
    buf.attach(&stream, AttachFlags::Single).unwrap();
    stream.iota(&buf, 1).unwrap();
    stream.synchronize().unwrap();
    buf.attach(&stream, AttachFlags::Global).unwrap();
    assert_eq!(buf.as_slice().unwrap()[1023], 1023);
    rt.free(p).unwrap();
}

#[test]
fn read_mostly_pages_are_duplicated_not_moved() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let pages = 64usize;
    let mut buf = ManagedBuffer::<u8>::new(&rt, 0, pages * PAGE as usize, AttachFlags::Global).unwrap();
    buf.as_mut_slice().unwrap().fill(9);
    buf.advise(Advice::SetReadMostly, Location::Device(0)).unwrap();
    let scratch = dev.alloc::<u8>(buf.len()).unwrap();
    let stream = dev.create_stream().unwrap();
    let before = rt.managed_statistics().unwrap();
    for _ in 0..4 {
        stream.copy_device_to_device(&buf, &scratch).unwrap(); // a device read
        assert_eq!(buf.as_slice().unwrap()[5], 9); // a host read
    }
    let s = rt.managed_statistics().unwrap().since(&before);
    if let Some(faults) = s.faults {
        assert_eq!(faults, pages as u64, "only the first device read copies each page: {s:?}");
        assert_eq!(s.read_duplications, Some(pages as u64));
    }
    // Without the advice, the pages move back and forth.
    buf.advise(Advice::UnsetReadMostly, Location::Device(0)).unwrap();
    let before = rt.managed_statistics().unwrap();
    for _ in 0..2 {
        stream.copy_device_to_device(&buf, &scratch).unwrap();
        assert_eq!(buf.as_slice().unwrap()[5], 9);
    }
    if let Some(faults) = rt.managed_statistics().unwrap().since(&before).faults {
        assert_eq!(faults, 4 * pages as u64);
    }
}

#[test]
fn statistics_count_on_demand_migrations_where_known() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let stream = dev.create_stream().unwrap();
    let mut buf = ManagedBuffer::<u32>::new(&rt, 0, (MIB / 4) as usize, AttachFlags::Global).unwrap();
    let before = rt.managed_statistics().unwrap();
    stream.fill(&buf, 5).unwrap();
    stream.synchronize().unwrap();
    let after_kernel = rt.managed_statistics().unwrap();
    assert_eq!(buf.as_slice().unwrap()[17], 5);
    let after_host = rt.managed_statistics().unwrap();
    if let Some(bytes) = after_kernel.since(&before).bytes_migrated_on_demand {
        assert_eq!(bytes, MIB);
        assert_eq!(after_kernel.since(&before).faults, Some(MIB / PAGE));
        assert_eq!(after_host.since(&after_kernel).bytes_migrated_on_demand, Some(MIB));
    } else {
        // A backend that cannot observe migrations (the CUDA driver and
        // HIP's runtime report none) reports none of them, here or later;
        // the CPU emulation always observes its own.
        assert_ne!(rt.backend_kind(), hipmem::BackendKind::Host, "the emulation counts its migrations");
        for s in [before, after_kernel, after_host] {
            assert_eq!(s, hipmem::ManagedStatistics::default(), "statistics known only in part: {s:?}");
        }
    }
    // After a prefetch, the kernel faults on nothing.
    buf.prefetch(Location::Device(0), &stream).unwrap();
    let before = rt.managed_statistics().unwrap();
    stream.fill(&buf, 6).unwrap();
    stream.synchronize().unwrap();
    if let Some(faults) = rt.managed_statistics().unwrap().since(&before).faults {
        assert_eq!(faults, 0);
    }
}
