//! Virtual memory management: granularity, hipMemCreate, hipMemAddressReserve,
//! hipMemMap, hipMemSetAccess / GetAccess, hipMemUnmap, hipMemRelease,
//! hipMemAddressFree, hipMemRetainAllocationHandle, properties, export and
//! import; the owned types and GrowableBuffer.

use std::time::Instant;

use hipmem::vmm::{GranularityOption, HANDLE_TYPE_POSIX_FD, MemLocation};
use hipmem::{
    AccessDesc, AccessFlags, AddressReservation, AllocationProp, DevicePtr, DeviceSlice, GrowableBuffer,
    Mapping, MemoryType, PhysicalAllocation, Runtime,
};

use crate::{DELAY, device, expect_err, private_runtime, runtime, second_device};

fn gran(rt: &Runtime) -> u64 {
    rt.allocation_granularity(&AllocationProp::device(0), GranularityOption::Minimum).unwrap()
}

/// A handle of `granules` granules, a reservation of `reserve` granules, the
/// handle mapped at its start with read-write access for device 0.
fn mapped(rt: &Runtime, granules: u64) -> (u64, DevicePtr, u64) {
    let g = gran(rt);
    let size = granules * g;
    let h = rt.mem_create(size, &AllocationProp::device(0), 0).unwrap();
    let p = rt.address_reserve(size, 0, DevicePtr::NULL, 0).unwrap();
    rt.mem_map(p, size, 0, h, 0).unwrap();
    rt.mem_set_access(p, size, &[AccessDesc::device(0, AccessFlags::ReadWrite)]).unwrap();
    (h, p, size)
}

fn teardown(rt: &Runtime, h: u64, p: DevicePtr, size: u64) {
    rt.mem_unmap(p, size).unwrap();
    rt.mem_release(h).unwrap();
    rt.address_free(p, size).unwrap();
}

fn write_read(rt: &Runtime, p: DevicePtr, data: &[u8]) -> Vec<u8> {
    rt.copy_host_to_device(p, data).unwrap();
    let mut back = vec![0u8; data.len()];
    rt.copy_device_to_host(&mut back, p).unwrap();
    back
}

#[test]
fn granularity_is_a_power_of_two_and_matches_the_device_properties() {
    let rt = runtime();
    for d in 0..rt.device_count() {
        let min = rt.allocation_granularity(&AllocationProp::device(d), GranularityOption::Minimum).unwrap();
        let rec =
            rt.allocation_granularity(&AllocationProp::device(d), GranularityOption::Recommended).unwrap();
        assert!(min.is_power_of_two() && min >= 4096, "granularity {min}");
        assert!(rec >= min && rec % min == 0, "recommended {rec} vs minimum {min}");
        let caps = &rt.device_properties(d).unwrap().capabilities;
        assert!(caps.virtual_memory);
        assert_eq!(caps.vmm_granularity, min);
    }
    assert!(GranularityOption::from_raw(2).is_err());
    let mut bad = AllocationProp::device(0);
    bad.alloc_type = 0;
    expect_err(rt.allocation_granularity(&bad, GranularityOption::Minimum), 1, &["pinned"]);
    let mut bad = AllocationProp::device(0);
    bad.location.location_type = 0;
    expect_err(rt.allocation_granularity(&bad, GranularityOption::Minimum), 1, &["location"]);
    let bad = AllocationProp::device(rt.device_count() + 3);
    expect_err(rt.allocation_granularity(&bad, GranularityOption::Minimum), 1, &["device"]);
}

#[test]
fn mem_create_rejects_bad_input() {
    let rt = runtime();
    let g = gran(rt);
    let prop = AllocationProp::device(0);
    expect_err(rt.mem_create(0, &prop, 0), 1, &["size 0"]);
    expect_err(rt.mem_create(g, &prop, 1), 1, &["flags"]);
    expect_err(rt.mem_create(g + 1, &prop, 0), 1, &["multiple", "granularity"]);
    expect_err(rt.mem_create(g / 2, &prop, 0), 1, &["multiple"]);
    let mut bad = prop;
    bad.alloc_type = 2;
    expect_err(rt.mem_create(g, &bad, 0), 1, &["pinned"]);
    let mut bad = prop;
    bad.location.location_type = 0;
    expect_err(rt.mem_create(g, &bad, 0), 1, &["location type"]);
    let mut bad = prop;
    bad.location.id = -1;
    expect_err(rt.mem_create(g, &bad, 0), 1, &["device"]);
    bad.location.id = rt.device_count() as i32;
    expect_err(rt.mem_create(g, &bad, 0), 1, &["device"]);
    for types in [2u32, 4, 8] {
        let mut bad = prop;
        bad.requested_handle_types = types;
        expect_err(rt.mem_create(g, &bad, 0), 801, &["handle type"]);
    }
}

#[test]
fn release_of_null_and_double_release_are_invalid_value() {
    let rt = private_runtime();
    let g = gran(&rt);
    expect_err(rt.mem_release(0), 1, &["null"]);
    let h = rt.mem_create(g, &AllocationProp::device(0), 0).unwrap();
    let props = rt.allocation_properties(h).unwrap();
    assert_eq!(props, AllocationProp::device(0));
    rt.mem_release(h).unwrap();
    expect_err(rt.mem_release(h), 1, &["already released"]);
    expect_err(rt.allocation_properties(h), 1, &["not a live"]);
}

#[test]
fn address_reserve_rejects_bad_input_with_hips_codes() {
    let rt = runtime();
    let g = gran(rt);
    expect_err(rt.address_reserve(g, 0, DevicePtr::NULL, 1), 1, &["flags"]);
    expect_err(rt.address_reserve(0, 0, DevicePtr::NULL, 0), 2, &["granularity"]);
    expect_err(rt.address_reserve(g + 4096, 0, DevicePtr::NULL, 0), 2, &["multiple"]);
    expect_err(rt.address_reserve(g, 3 * g, DevicePtr::NULL, 0), 2, &["power of two"]);
    // A larger power-of-two alignment is honoured.
    let p = rt.address_reserve(g, 4 * g, DevicePtr::NULL, 0).unwrap();
    assert_eq!(p.0 % (4 * g), 0, "{p} is not aligned to {}", 4 * g);
    rt.address_free(p, g).unwrap();
}

#[test]
fn address_free_rejects_null_unknown_partial_and_double_frees() {
    let rt = private_runtime();
    let g = gran(&rt);
    expect_err(rt.address_free(DevicePtr::NULL, g), 1, &["null"]);
    let p = rt.address_reserve(2 * g, 0, DevicePtr::NULL, 0).unwrap();
    expect_err(rt.address_free(DevicePtr(p.0 + g), g), 1, &["not the start"]);
    expect_err(rt.address_free(p, g), 1, &["bytes, not"]);
    // Not while something is mapped in it.
    let h = rt.mem_create(g, &AllocationProp::device(0), 0).unwrap();
    rt.mem_map(p, g, 0, h, 0).unwrap();
    expect_err(rt.address_free(p, 2 * g), 1, &["unmap"]);
    rt.mem_unmap(p, g).unwrap();
    rt.mem_release(h).unwrap();
    rt.address_free(p, 2 * g).unwrap();
    expect_err(rt.address_free(p, 2 * g), 1, &["not the start"]);
}

#[test]
fn the_seed_sequence_allocate_reserve_map_set_access_use_free() {
    let rt = runtime();
    let dev = device(0);
    let g = gran(rt);
    let elements = 100_000usize;
    let padded = (elements as u64 * 4).next_multiple_of(g);
    let h = rt.mem_create(padded, &AllocationProp::device(0), 0).unwrap();
    let p = rt.address_reserve(padded, 0, DevicePtr::NULL, 0).unwrap();
    assert_eq!(p.0 % g, 0);
    rt.mem_map(p, padded, 0, h, 0).unwrap();
    rt.mem_set_access(p, padded, &[AccessDesc::device(0, AccessFlags::ReadWrite)]).unwrap();
    assert_eq!(rt.mem_get_access(&MemLocation::device(0), p).unwrap(), AccessFlags::ReadWrite);

    let attrs = rt.pointer_attributes(p.0 + 4096).unwrap();
    assert_eq!(attrs.memory_type, MemoryType::Device);
    assert_eq!(attrs.device, 0);

    let stream = dev.create_stream().unwrap();
    let reservation_view = ViewOf { rt, ptr: p, len: elements };
    stream.iota(&reservation_view, 3).unwrap();
    stream.synchronize().unwrap();
    let v = reservation_view.read_to_vec().unwrap();
    assert!(v.iter().enumerate().all(|(i, &x)| x == 3 * i as i32), "iota through a mapping");

    rt.mem_unmap(p, padded).unwrap();
    rt.mem_release(h).unwrap();
    rt.address_free(p, padded).unwrap();
    assert_eq!(rt.pointer_attributes(p.0).unwrap().memory_type, MemoryType::Unregistered);
}

/// An unmap that waits for the work queued on the devices (the CPU backend's
/// does, so that no queued kernel touches memory going away) holds up only
/// its own thread: other threads reserve, create, map and give access to
/// other ranges meanwhile. A stream is held behind a host function that
/// lets it go on only once those calls returned (or after 20 s); no queued
/// work uses the mapping (on a GPU, unmapping memory that queued work will
/// touch is the caller's error, and the driver need not wait for it).
#[test]
fn an_unmap_waiting_for_queued_work_does_not_hold_up_other_threads_vmm_calls() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::channel;
    use std::time::Duration;
    let rt = private_runtime();
    let (h, p, size) = mapped(&rt, 2);
    let stream = rt.device(0).unwrap().create_stream_with_flags(crate::non_blocking()).unwrap();
    let (open, gate) = channel::<()>();
    stream
        .launch_host_func(move || {
            let _ = gate.recv();
        })
        .unwrap();
    let opened = AtomicBool::new(false);
    let (done, until_done) = channel::<()>();
    std::thread::scope(|sc| {
        let opened = &opened;
        sc.spawn(move || {
            let _ = until_done.recv_timeout(Duration::from_secs(20));
            opened.store(true, Ordering::SeqCst);
            let _ = open.send(());
        });
        let unmapper = sc.spawn(|| rt.mem_unmap(p, size));
        // (Time for the unmapper to reach its wait.)
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let g = gran(&rt);
        let h2 = rt.mem_create(g, &AllocationProp::device(0), 0).unwrap();
        let p2 = rt.address_reserve(g, 0, DevicePtr::NULL, 0).unwrap();
        rt.mem_map(p2, g, 0, h2, 0).unwrap();
        rt.mem_set_access(p2, g, &[AccessDesc::device(0, AccessFlags::ReadWrite)]).unwrap();
        let waited = opened.load(Ordering::SeqCst);
        let took = t0.elapsed();
        let _ = done.send(());
        unmapper.join().unwrap().unwrap();
        assert!(!waited, "the calls returned only once the queued work could go on ({took:?})");
        stream.synchronize().unwrap();
        teardown(&rt, h2, p2, g);
    });
    // The unmapped range is gone; the rest of the sequence works.
    expect_err(rt.mem_unmap(p, size), 1, &["not mapped"]);
    rt.mem_release(h).unwrap();
    rt.address_free(p, size).unwrap();
}

/// A raw view for the tests that drive the raw API.
struct ViewOf<'a> {
    rt: &'a Runtime,
    ptr: DevicePtr,
    len: usize,
}

impl DeviceSlice<i32> for ViewOf<'_> {
    fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        self.rt
    }
}

#[test]
fn a_new_mapping_has_no_access_until_set() {
    let rt = runtime();
    let g = gran(rt);
    let h = rt.mem_create(g, &AllocationProp::device(0), 0).unwrap();
    let p = rt.address_reserve(g, 0, DevicePtr::NULL, 0).unwrap();
    rt.mem_map(p, g, 0, h, 0).unwrap();
    for d in 0..rt.device_count() {
        assert_eq!(rt.mem_get_access(&MemLocation::device(d), p).unwrap(), AccessFlags::None);
    }
    // Device work on it is an error, not a crash.
    expect_err(rt.copy_host_to_device(p, &[1u8; 64]), 1, &["no access"]);
    rt.mem_set_access(p, g, &[AccessDesc::device(0, AccessFlags::ReadWrite)]).unwrap();
    assert_eq!(write_read(rt, p, &[9u8; 64]), vec![9u8; 64]);
    // Taking access away again makes it an error again.
    rt.mem_set_access(p, g, &[AccessDesc::device(0, AccessFlags::None)]).unwrap();
    assert_eq!(rt.mem_get_access(&MemLocation::device(0), p).unwrap(), AccessFlags::None);
    expect_err(rt.copy_host_to_device(p, &[1u8; 64]), 1, &["no access"]);
    let stream = device(0).create_stream().unwrap();
    expect_err(stream.iota(&ViewOf { rt, ptr: p, len: 16 }, 1), 1, &["no access"]);
    teardown(rt, h, p, g);
}

#[test]
fn a_mapping_keeps_its_memory_after_the_handle_is_released() {
    let rt = runtime();
    let g = gran(rt);
    let h = rt.mem_create(2 * g, &AllocationProp::device(0), 0).unwrap();
    let p = rt.address_reserve(2 * g, 0, DevicePtr::NULL, 0).unwrap();
    rt.mem_map(p, 2 * g, 0, h, 0).unwrap();
    rt.mem_release(h).unwrap(); // the usual idiom
    rt.mem_set_access(p, 2 * g, &[AccessDesc::device(0, AccessFlags::ReadWrite)]).unwrap();
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7) as u8).collect();
    assert_eq!(write_read(rt, DevicePtr(p.0 + g + 100), &data), data);
    // Retain gives the handle back with a reference; one release per retain.
    let r = rt.retain_allocation_handle(DevicePtr(p.0 + g + 5)).unwrap();
    let props = rt.allocation_properties(r).unwrap();
    assert_eq!(props.location, MemLocation::device(0));
    rt.mem_release(r).unwrap();
    rt.mem_unmap(p, 2 * g).unwrap();
    expect_err(rt.retain_allocation_handle(p), 1, &["not a mapped"]);
    rt.address_free(p, 2 * g).unwrap();
}

#[test]
fn retain_of_a_reserved_but_unmapped_address_is_invalid_value() {
    let rt = runtime();
    let g = gran(rt);
    expect_err(rt.retain_allocation_handle(DevicePtr::NULL), 1, &["null"]);
    let p = rt.address_reserve(g, 0, DevicePtr::NULL, 0).unwrap();
    expect_err(rt.retain_allocation_handle(p), 1, &["not a mapped"]);
    rt.address_free(p, g).unwrap();
}

#[test]
fn mem_map_rejects_bad_input() {
    let rt = runtime();
    let g = gran(rt);
    let h = rt.mem_create(2 * g, &AllocationProp::device(0), 0).unwrap();
    let p = rt.address_reserve(4 * g, 0, DevicePtr::NULL, 0).unwrap();
    expect_err(rt.mem_map(DevicePtr::NULL, g, 0, h, 0), 1, &["null"]);
    expect_err(rt.mem_map(p, g, 0, 0, 0), 1, &["null"]);
    expect_err(rt.mem_map(p, 0, 0, h, 0), 1, &["size 0"]);
    expect_err(rt.mem_map(p, g, 0, h, 1), 1, &["flags"]);
    expect_err(rt.mem_map(p, g, 2 * g, h, 0), 1, &["past the end"]);
    expect_err(rt.mem_map(p, 3 * g, 0, h, 0), 1, &["past the end"]);
    expect_err(rt.mem_map(p, g, 4096, h, 0), 1, &["multiples"]);
    expect_err(rt.mem_map(DevicePtr(p.0 + 3 * g), 2 * g, 0, h, 0), 1, &["reservation"]);
    let on_stack = 0u64;
    expect_err(
        rt.mem_map(DevicePtr(&on_stack as *const u64 as u64 & !(g - 1)), g, 0, h, 0),
        1,
        &["reservation"],
    );
    rt.mem_map(p, 2 * g, 0, h, 0).unwrap();
    expect_err(rt.mem_map(DevicePtr(p.0 + g), g, 0, h, 0), 1, &["overlap"]);
    // A freed handle cannot be mapped.
    rt.mem_release(h).unwrap();
    expect_err(rt.mem_map(DevicePtr(p.0 + 2 * g), g, 0, h, 0), 1, &["not a live"]);
    rt.mem_unmap(p, 2 * g).unwrap();
    rt.address_free(p, 4 * g).unwrap();
}

#[test]
fn unmap_must_cover_whole_mappings_and_may_cover_several() {
    let rt = runtime();
    let g = gran(rt);
    let h1 = rt.mem_create(2 * g, &AllocationProp::device(0), 0).unwrap();
    let h2 = rt.mem_create(g, &AllocationProp::device(0), 0).unwrap();
    let p = rt.address_reserve(4 * g, 0, DevicePtr::NULL, 0).unwrap();
    rt.mem_map(p, 2 * g, 0, h1, 0).unwrap();
    rt.mem_map(DevicePtr(p.0 + 2 * g), g, 0, h2, 0).unwrap();
    rt.mem_release(h1).unwrap();
    rt.mem_release(h2).unwrap();
    expect_err(rt.mem_unmap(DevicePtr::NULL, g), 1, &["null"]);
    expect_err(rt.mem_unmap(p, 0), 1, &["size 0"]);
    expect_err(rt.mem_unmap(p, g), 1, &["whole mappings"]);
    expect_err(rt.mem_unmap(DevicePtr(p.0 + g), g), 1, &["whole mappings"]);
    expect_err(rt.mem_unmap(p, 4 * g), 1, &["not mapped"]);
    expect_err(rt.mem_unmap(DevicePtr(p.0 + 3 * g), g), 1, &["not mapped"]);
    // Set access over both at once, and a copy that spans the two mappings.
    rt.mem_set_access(p, 3 * g, &[AccessDesc::device(0, AccessFlags::ReadWrite)]).unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
    assert_eq!(write_read(rt, DevicePtr(p.0 + 2 * g - 4096), &data), data);
    // One unmap over both.
    rt.mem_unmap(p, 3 * g).unwrap();
    assert_eq!(rt.pointer_attributes(p.0).unwrap().memory_type, MemoryType::Unregistered);
    rt.address_free(p, 4 * g).unwrap();
}

#[test]
fn set_and_get_access_reject_bad_input() {
    let rt = runtime();
    let (h, p, size) = mapped(rt, 1);
    let rw = [AccessDesc::device(0, AccessFlags::ReadWrite)];
    expect_err(rt.mem_set_access(DevicePtr::NULL, size, &rw), 1, &["null"]);
    expect_err(rt.mem_set_access(p, 0, &rw), 1, &["size 0"]);
    expect_err(rt.mem_set_access(p, size, &[]), 1, &["count 0"]);
    let bad_dev = [AccessDesc::device(rt.device_count() + 1, AccessFlags::ReadWrite)];
    expect_err(rt.mem_set_access(p, size, &bad_dev), 1, &["device"]);
    let mut bad_type = rw;
    bad_type[0].location.location_type = 0;
    expect_err(rt.mem_set_access(p, size, &bad_type), 1, &["location type"]);
    let mut bad_flags = rw;
    bad_flags[0].flags = 2;
    expect_err(rt.mem_set_access(p, size, &bad_flags), 1, &["hipMemAccessFlags"]);
    let r = rt.address_reserve(size, 0, DevicePtr::NULL, 0).unwrap();
    expect_err(rt.mem_set_access(r, size, &rw), 1, &["not mapped"]);
    expect_err(rt.mem_get_access(&MemLocation::device(0), r), 1, &["not a mapped"]);
    expect_err(rt.mem_get_access(&MemLocation::device(0), DevicePtr::NULL), 1, &["null"]);
    expect_err(rt.mem_get_access(&MemLocation::device(99), p), 1, &["device"]);
    rt.address_free(r, size).unwrap();
    // Read access reads back as Read.
    rt.mem_set_access(p, size, &[AccessDesc::device(0, AccessFlags::Read)]).unwrap();
    assert_eq!(rt.mem_get_access(&MemLocation::device(0), p).unwrap(), AccessFlags::Read);
    teardown(rt, h, p, size);
}

#[test]
fn offsets_and_two_mappings_of_the_same_physical_memory() {
    let rt = runtime();
    let g = gran(rt);
    let h = rt.mem_create(2 * g, &AllocationProp::device(0), 0).unwrap();
    // Reservation A maps the allocation in order; B maps its halves swapped.
    let a = rt.address_reserve(2 * g, 0, DevicePtr::NULL, 0).unwrap();
    let b = rt.address_reserve(2 * g, 0, DevicePtr::NULL, 0).unwrap();
    rt.mem_map(a, 2 * g, 0, h, 0).unwrap();
    rt.mem_map(b, g, g, h, 0).unwrap();
    rt.mem_map(DevicePtr(b.0 + g), g, 0, h, 0).unwrap();
    rt.mem_release(h).unwrap();
    let rw = [AccessDesc::device(0, AccessFlags::ReadWrite)];
    rt.mem_set_access(a, 2 * g, &rw).unwrap();
    rt.mem_set_access(b, 2 * g, &rw).unwrap();
    rt.copy_host_to_device(a, &[0x11u8; 256]).unwrap();
    rt.copy_host_to_device(DevicePtr(a.0 + g), &[0x22u8; 256]).unwrap();
    let mut back = [0u8; 256];
    rt.copy_device_to_host(&mut back, b).unwrap();
    assert_eq!(back, [0x22u8; 256], "B's first half is the allocation's second half");
    rt.copy_device_to_host(&mut back, DevicePtr(b.0 + g)).unwrap();
    assert_eq!(back, [0x11u8; 256]);
    // A write through B is seen through A.
    rt.copy_host_to_device(DevicePtr(b.0 + g + 8), &[0x33u8; 8]).unwrap();
    let mut eight = [0u8; 8];
    rt.copy_device_to_host(&mut eight, DevicePtr(a.0 + 8)).unwrap();
    assert_eq!(eight, [0x33u8; 8]);
    rt.mem_unmap(a, 2 * g).unwrap();
    // Still mapped through B: the memory lives on.
    rt.copy_device_to_host(&mut eight, DevicePtr(b.0 + g + 8)).unwrap();
    assert_eq!(eight, [0x33u8; 8]);
    rt.mem_unmap(b, 2 * g).unwrap();
    rt.address_free(a, 2 * g).unwrap();
    rt.address_free(b, 2 * g).unwrap();
}

#[test]
fn grow_by_reserving_at_the_hint_right_after() {
    let rt = runtime();
    let g = gran(rt);
    let (h, p, size) = mapped(rt, 1);
    let hint = DevicePtr(p.0 + size);
    let h2 = rt.mem_create(g, &AllocationProp::device(0), 0).unwrap();
    let q = rt.address_reserve(g, 0, hint, 0).unwrap();
    rt.mem_map(q, g, 0, h2, 0).unwrap();
    rt.mem_set_access(q, g, &[AccessDesc::device(0, AccessFlags::ReadWrite)]).unwrap();
    if q == hint {
        // Contiguous: one copy may span both.
        let data: Vec<u8> = (0..8192u32).map(|i| (i % 253) as u8).collect();
        assert_eq!(write_read(rt, DevicePtr(hint.0 - 4096), &data), data);
    } else {
        eprintln!("note: the hint {hint} was not honoured (got {q}); checking each range alone");
        assert_eq!(write_read(rt, q, &[5u8; 100]), vec![5u8; 100]);
    }
    teardown(rt, h2, q, g);
    teardown(rt, h, p, size);
}

#[test]
fn hipfree_of_mapped_memory_is_invalid_value() {
    let rt = runtime();
    let (h, p, size) = mapped(rt, 1);
    expect_err(rt.free(p), 1, &[]);
    assert_eq!(write_read(rt, p, &[1, 2, 3]), vec![1, 2, 3]);
    teardown(rt, h, p, size);
}

#[test]
fn second_device_access_through_set_access() {
    let Some(_dev1) = second_device("second_device_access_through_set_access") else { return };
    let rt = runtime();
    let (h, p, size) = mapped(rt, 1);
    assert_eq!(rt.mem_get_access(&MemLocation::device(1), p).unwrap(), AccessFlags::None);
    rt.mem_set_access(p, size, &[AccessDesc::device(1, AccessFlags::ReadWrite)]).unwrap();
    assert_eq!(rt.mem_get_access(&MemLocation::device(1), p).unwrap(), AccessFlags::ReadWrite);
    assert_eq!(rt.mem_get_access(&MemLocation::device(0), p).unwrap(), AccessFlags::ReadWrite);
    teardown(rt, h, p, size);
}

#[test]
fn export_and_import_through_a_file_descriptor() {
    let rt = runtime();
    let g = gran(rt);
    let plain = rt.mem_create(g, &AllocationProp::device(0), 0).unwrap();
    expect_err(rt.export_shareable_handle(plain, HANDLE_TYPE_POSIX_FD, 0), 1, &["not requested"]);
    rt.mem_release(plain).unwrap();
    let mut prop = AllocationProp::device(0);
    prop.requested_handle_types = HANDLE_TYPE_POSIX_FD;
    let physical = PhysicalAllocation::with_prop(rt, g, &prop).unwrap();
    expect_err(rt.export_shareable_handle(physical.handle(), HANDLE_TYPE_POSIX_FD, 1), 1, &["flags"]);
    expect_err(rt.export_shareable_handle(physical.handle(), 2, 0), 1, &["not requested"]);
    let fd = physical.export_fd().unwrap();
    use std::os::fd::AsFd;
    expect_err(rt.import_shareable_handle(fd.as_fd(), 0), 1, &["POSIX"]);
    let imported = rt.import_shareable_handle(fd.as_fd(), HANDLE_TYPE_POSIX_FD).unwrap();
    let a = AddressReservation::new(rt, g, 0, DevicePtr::NULL).unwrap();
    let ma = Mapping::new(&a, 0, &physical, 0, g).unwrap();
    ma.set_access(0, AccessFlags::ReadWrite).unwrap();
    let b = rt.address_reserve(g, 0, DevicePtr::NULL, 0).unwrap();
    rt.mem_map(b, g, 0, imported, 0).unwrap();
    rt.mem_set_access(b, g, &[AccessDesc::device(0, AccessFlags::ReadWrite)]).unwrap();
    rt.copy_host_to_device(ma.ptr(), &[0x44u8; 32]).unwrap();
    let mut back = [0u8; 32];
    rt.copy_device_to_host(&mut back, b).unwrap();
    assert_eq!(back, [0x44u8; 32], "the imported handle is the same memory");
    teardown(rt, imported, b, g);
}

#[test]
fn owned_types_release_in_any_drop_order() {
    let rt = runtime();
    let dev = device(0);
    let g = PhysicalAllocation::granularity(&dev).unwrap();
    let before = rt.take_drop_errors().len();
    let reservation = AddressReservation::new(rt, 3 * g, 0, DevicePtr::NULL).unwrap();
    let physical = PhysicalAllocation::new(&dev, 2 * g).unwrap();
    expect_err(PhysicalAllocation::new(&dev, g + 1), 1, &["multiple"]);
    let m1 = Mapping::new(&reservation, 0, &physical, g, g).unwrap();
    let m2 = Mapping::new(&reservation, g, &physical, 0, g).unwrap();
    expect_err(Mapping::new(&reservation, 2 * g, &physical, 0, 2 * g), 1, &["past"]);
    assert_eq!(m1.access(0).unwrap(), AccessFlags::None);
    m1.set_access(0, AccessFlags::ReadWrite).unwrap();
    m2.set_access(0, AccessFlags::ReadWrite).unwrap();
    let stream = dev.create_stream().unwrap();
    let view = reservation.view::<i32>(0, (2 * g / 4) as usize).unwrap();
    stream.fill(&view, 77).unwrap();
    stream.synchronize().unwrap();
    assert!(view.read_to_vec().unwrap().iter().all(|&x| x == 77));
    assert!(reservation.view::<i32>(g, (3 * g / 4) as usize).is_err());
    // Drop the handle and the reservation first: the mappings keep both.
    let base = reservation.ptr();
    drop(physical);
    drop(reservation);
    assert_eq!(m2.view::<i32>().read_to_vec().unwrap()[0], 77);
    // A mapping waits for queued work before it unmaps.
    let flag_view = m1.view::<u32>();
    let start = Instant::now();
    stream.delay(DELAY, &flag_view, 5).unwrap();
    drop(m1);
    assert!(stream.query().unwrap(), "work on the mapping finished before the unmap");
    let _ = start;
    drop(m2);
    assert_eq!(rt.pointer_attributes(base.0).unwrap().memory_type, MemoryType::Unregistered);
    let errors = rt.take_drop_errors();
    assert!(errors.len() <= before || errors.is_empty(), "drop errors: {errors:?}");
}

#[test]
fn growable_buffer_grows_and_shrinks_in_place_and_keeps_its_data() {
    let dev = device(0);
    let g = PhysicalAllocation::granularity(&dev).unwrap();
    let mut buf = GrowableBuffer::<i32>::with_reservation(&dev, 16 * g).unwrap();
    assert_eq!(buf.len(), 0);
    assert_eq!(buf.device_ptr(), DevicePtr::NULL);
    let base = buf.base();
    let stream = dev.create_stream().unwrap();
    let per_granule = (g / 4) as usize;
    buf.resize(per_granule / 2).unwrap();
    stream.iota(&buf, 1).unwrap();
    stream.synchronize().unwrap();
    let mut sizes = vec![per_granule / 2];
    for step in [per_granule + 5, 3 * per_granule, 5 * per_granule + 1, 9 * per_granule] {
        let old = buf.len();
        buf.resize(step).unwrap();
        assert_eq!(buf.device_ptr(), base, "the buffer moved");
        assert!(buf.mapped_bytes() >= step as u64 * 4);
        assert!(buf.mapped_bytes() <= buf.reserved_bytes());
        let v = buf.read_to_vec().unwrap();
        assert!(
            v[..old].iter().enumerate().all(|(i, &x)| x == i as i32),
            "data kept across growth to {step}"
        );
        stream.iota(&buf, 1).unwrap();
        stream.synchronize().unwrap();
        sizes.push(step);
    }
    assert!(buf.chunk_count() >= 2);
    let mapped = buf.mapped_bytes();
    buf.resize(per_granule).unwrap();
    assert!(buf.mapped_bytes() < mapped, "shrinking unmapped nothing");
    assert_eq!(buf.device_ptr(), base);
    let v = buf.read_to_vec().unwrap();
    assert!(v.iter().enumerate().all(|(i, &x)| x == i as i32));
    buf.resize(2 * per_granule).unwrap();
    assert_eq!(buf.device_ptr(), base);
    let err = expect_err(buf.resize(17 * per_granule), 2, &["reservation", "exhausted"]);
    drop(err);
    assert_eq!(buf.len(), 2 * per_granule, "a failed grow keeps the length");
}
