//! hipPointerGetAttributes.

use hipmem::runtime::MemoryKind;
use hipmem::{DevicePtr, MemoryType};

use crate::{device, expect_err, host_addr, private_runtime, runtime, second_device};

#[test]
fn memory_type_numbers_match_hip() {
    assert_eq!(MemoryType::Unregistered.raw(), 0);
    assert_eq!(MemoryType::Host.raw(), 1);
    assert_eq!(MemoryType::Device.raw(), 2);
    assert_eq!(MemoryType::Managed.raw(), 3);
}

#[test]
fn device_memory_reads_as_device_memory_of_its_device() {
    let rt = runtime();
    let buf = device(0).alloc_zeroed::<u8>(1000).unwrap();
    let p = buf.device_ptr();
    let a = rt.pointer_attributes(p.0).unwrap();
    assert_eq!(a.memory_type, MemoryType::Device);
    assert_eq!(a.memory_type.raw(), 2);
    assert_eq!(a.device, 0);
    assert_eq!(a.device_pointer, p);
    assert!(!a.is_managed);
    assert_eq!(a.allocation_flags, 0);
    let alloc = a.allocation.expect("device memory has an allocation");
    assert_eq!(alloc.base, p);
    assert_eq!(alloc.size, 1000);
    assert_eq!(alloc.device, 0);
    assert_eq!(alloc.kind, MemoryKind::Device);
    assert_eq!(alloc.end(), p.0 + 1000);
    assert!(alloc.contains(p.0) && alloc.contains(p.0 + 999) && !alloc.contains(p.0 + 1000));
}

#[test]
fn an_interior_pointer_belongs_to_the_same_allocation() {
    let rt = runtime();
    let buf = device(0).alloc_zeroed::<u32>(256).unwrap();
    let p = buf.device_ptr();
    for offset in [1u64, 4, 511, 1023] {
        let a = rt.pointer_attributes(p.0 + offset).unwrap();
        assert_eq!(a.memory_type, MemoryType::Device);
        assert_eq!(a.device, 0);
        assert_eq!(a.device_pointer, DevicePtr(p.0 + offset), "devicePointer of an interior pointer");
        let alloc = a.allocation.unwrap();
        assert_eq!((alloc.base, alloc.size), (p, 1024));
    }
}

#[test]
fn memory_of_the_second_device_reads_as_that_device() {
    let Some(dev1) = second_device("memory_of_the_second_device_reads_as_that_device") else {
        return;
    };
    let buf = dev1.alloc_zeroed::<u8>(64).unwrap();
    let a = runtime().pointer_attributes(buf.device_ptr().0 + 10).unwrap();
    assert_eq!(a.memory_type, MemoryType::Device);
    assert_eq!(a.device, 1);
    assert_eq!(a.allocation.unwrap().device, 1);
}

#[test]
fn host_memory_reads_as_unregistered() {
    let rt = runtime();
    let stack = [0u64; 8];
    let heap = vec![0u8; 4096];
    let boxed = Box::new(17u32);
    for addr in [host_addr(&stack), heap.as_ptr() as u64, host_addr(&*boxed), host_addr(&stack[3])] {
        let a = rt.pointer_attributes(addr).unwrap();
        assert_eq!(a.memory_type, MemoryType::Unregistered, "host memory {addr:#x}");
        assert_eq!(a.memory_type.raw(), 0);
        assert_eq!(a.device, -2, "hipInvalidDeviceId for unregistered memory");
        assert!(a.device_pointer.is_null());
        assert!(!a.is_managed);
        assert!(a.allocation.is_none());
    }
}

#[test]
fn attributes_of_null_are_invalid_value() {
    expect_err(runtime().pointer_attributes(0), 1, &["null"]);
}

#[test]
fn freed_memory_reads_as_unregistered() {
    let rt = private_runtime();
    let p = rt.malloc(0, 512).unwrap();
    assert_eq!(rt.pointer_attributes(p.0).unwrap().memory_type, MemoryType::Device);
    rt.free(p).unwrap();
    let a = rt.pointer_attributes(p.0).unwrap();
    assert_eq!(a.memory_type, MemoryType::Unregistered);
    assert!(a.allocation.is_none());
}
