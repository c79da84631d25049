//! Peer access between two devices: the argument rules of
//! hipDeviceCanAccessPeer / Enable / DisablePeerAccess, copies between the
//! devices (synchronous and in stream order), and which memory of device 0
//! a kernel on device 1 reaches: plain memory after peer access is enabled,
//! pool memory after hipMemPoolSetAccess, virtual memory after
//! hipMemSetAccess. Every two-device test skips, with a note, where there
//! is one device; peer state is process-wide, so these tests take turns.

use std::sync::{Mutex, MutexGuard};

use hipmem::{AccessFlags, AddressReservation, DevicePtr, Mapping, PhysicalAllocation};

use crate::{DELAY, device, expect_err, runtime, second_device};

static PEER_STATE: Mutex<()> = Mutex::new(());

fn turn() -> MutexGuard<'static, ()> {
    PEER_STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Devices 0 and 1 when both exist and can reach each other, with access
/// from 1 to 0 off; `None` (with a note) otherwise.
fn peers(test: &str) -> Option<(hipmem::Device, hipmem::Device)> {
    let dev1 = second_device(test)?;
    let dev0 = device(0);
    if !dev1.can_access_peer(&dev0).unwrap() {
        eprintln!("{test}: skipped, device 1 cannot access device 0 directly");
        return None;
    }
    if runtime().peer_access_enabled(1, 0).unwrap() {
        dev1.disable_peer_access(&dev0).unwrap();
    }
    Some((dev0, dev1))
}

#[test]
fn a_device_is_not_its_own_peer_and_bad_ordinals_are_invalid_device() {
    let rt = runtime();
    let n = rt.device_count();
    assert!(!rt.can_access_peer(0, 0).unwrap(), "a device is not its own peer");
    assert!(!rt.peer_access_enabled(0, 0).unwrap());
    expect_err(rt.can_access_peer(0, n), 101, &[&n.to_string()]);
    expect_err(rt.can_access_peer(n, 0), 101, &[]);
    expect_err(rt.enable_peer_access(0, 0), 101, &["peer of itself"]);
    expect_err(rt.disable_peer_access(0, 0), 101, &["peer of itself"]);
    expect_err(rt.enable_peer_access(0, n), 101, &[]);
    expect_err(rt.disable_peer_access(n, 0), 101, &[]);
    expect_err(rt.peer_access_enabled(0, n), 101, &[]);
}

#[test]
fn enabling_twice_and_disabling_what_is_off_have_their_own_codes() {
    let _turn = turn();
    let Some((dev0, dev1)) = peers("enabling_twice_and_disabling_what_is_off_have_their_own_codes") else {
        return;
    };
    let rt = runtime();
    expect_err(rt.disable_peer_access(1, 0), 705, &["never enabled"]);
    dev1.enable_peer_access(&dev0).unwrap();
    assert!(rt.peer_access_enabled(1, 0).unwrap());
    assert!(!rt.peer_access_enabled(0, 1).unwrap(), "access is per direction");
    expect_err(rt.enable_peer_access(1, 0), 704, &["already enabled"]);
    dev1.disable_peer_access(&dev0).unwrap();
    assert!(!rt.peer_access_enabled(1, 0).unwrap());
    expect_err(rt.disable_peer_access(1, 0), 705, &[]);
}

#[test]
fn copies_between_devices_with_and_without_peer_access() {
    let _turn = turn();
    let Some((dev0, dev1)) = peers("copies_between_devices_with_and_without_peer_access") else {
        return;
    };
    let rt = runtime();
    let data: Vec<u32> = (0..4096).map(|i| i * 7 + 1).collect();
    let a = dev0.alloc_from_slice(&data).unwrap();
    let b = dev1.alloc::<u32>(4096).unwrap();
    rt.memcpy_peer(b.device_ptr(), 1, a.device_ptr(), 0, 4096 * 4).unwrap();
    assert_eq!(b.to_vec().unwrap(), data, "a peer copy without peer access (staged by the driver)");
    dev1.enable_peer_access(&dev0).unwrap();
    let c = dev0.alloc_zeroed::<u32>(4096).unwrap();
    rt.memcpy_peer(c.device_ptr(), 0, b.device_ptr(), 1, 4096 * 4).unwrap();
    assert_eq!(c.to_vec().unwrap(), data, "a peer copy with peer access");
    dev1.disable_peer_access(&dev0).unwrap();
    // Bad input.
    expect_err(rt.memcpy_peer(b.device_ptr(), 9, a.device_ptr(), 0, 16), 101, &[]);
    expect_err(rt.memcpy_peer(DevicePtr::NULL, 1, a.device_ptr(), 0, 16), 1, &["null"]);
    expect_err(rt.memcpy_peer(b.device_ptr(), 1, a.device_ptr(), 0, 4096 * 4 + 1), 1, &["past"]);
    rt.memcpy_peer(DevicePtr::NULL, 1, DevicePtr::NULL, 0, 0).unwrap();
}

#[test]
fn disabling_peer_access_waits_for_the_work_that_uses_it() {
    let _turn = turn();
    let Some((dev0, dev1)) = peers("disabling_peer_access_waits_for_the_work_that_uses_it") else {
        return;
    };
    let rt = runtime();
    // A peer copy queued behind a delay on device 1, through device 1's
    // access to device 0, is still to run when access is disabled. On CUDA
    // the driver takes the mapping away at once: the copy then took an MMU
    // fault and every later call on both devices failed (two H200s).
    let n = 1usize << 20;
    let data: Vec<u32> = (0..n as u32).map(|i| i ^ 0x5eed_0000).collect();
    let src = dev1.alloc_from_slice(&data).unwrap();
    let dst = dev0.alloc_zeroed::<u32>(n).unwrap();
    let flag = dev1.alloc_zeroed::<u32>(1).unwrap();
    dev1.enable_peer_access(&dev0).unwrap();
    let stream = dev1.create_stream().unwrap();
    stream.delay(DELAY, &flag, 1).unwrap();
    rt.memcpy_peer_async(dst.device_ptr(), 0, src.device_ptr(), 1, (n * 4) as u64, stream.raw()).unwrap();
    dev1.disable_peer_access(&dev0).unwrap();
    assert!(stream.query().unwrap(), "disabling peer access returned before the copy that used it ran");
    assert!(!rt.peer_access_enabled(1, 0).unwrap());
    stream.synchronize().unwrap();
    assert_eq!(dst.to_vec().unwrap(), data, "the copy queued before the disable carried its data");
    // Disabling what is off reports it (and has nothing to wait for).
    expect_err(rt.disable_peer_access(1, 0), 705, &[]);
}

#[test]
fn a_peer_copy_waits_for_the_work_before_it_in_its_stream() {
    let _turn = turn();
    let Some((dev0, dev1)) = peers("a_peer_copy_waits_for_the_work_before_it_in_its_stream") else {
        return;
    };
    let rt = runtime();
    let src = dev0.alloc_zeroed::<u32>(1).unwrap();
    let dst = dev1.alloc_zeroed::<u32>(1).unwrap();
    let stream = dev0.create_stream().unwrap();
    let t0 = std::time::Instant::now();
    // The delay kernel writes 42 into src after DELAY; the copy behind it
    // must carry 42, not the 0 that is there when it is queued.
    stream.delay(DELAY, &src, 42).unwrap();
    rt.memcpy_peer_async(dst.device_ptr(), 1, src.device_ptr(), 0, 4, stream.raw()).unwrap();
    assert_pending!(t0, !stream.query().unwrap(), "the delay and the copy finished at once");
    stream.synchronize().unwrap();
    assert_eq!(crate::read0(&dst), 42, "the peer copy ran before the kernel before it");
}

#[test]
fn plain_memory_of_a_peer_is_reachable_by_kernels_only_with_peer_access() {
    let _turn = turn();
    let Some((dev0, dev1)) = peers("plain_memory_of_a_peer_is_reachable_by_kernels_only_with_peer_access")
    else {
        return;
    };
    let buf = dev0.alloc_zeroed::<u32>(1024).unwrap();
    let s1 = dev1.create_stream().unwrap();
    expect_err(s1.fill(&buf, 7u32), 1, &["hipDeviceEnablePeerAccess", "device 1"]);
    dev1.enable_peer_access(&dev0).unwrap();
    s1.fill(&buf, 7u32).unwrap();
    s1.synchronize().unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![7; 1024], "device 1's kernel wrote device 0's memory");
    dev1.disable_peer_access(&dev0).unwrap();
    expect_err(s1.fill(&buf, 8u32), 1, &["hipDeviceEnablePeerAccess"]);
    assert_eq!(buf.to_vec().unwrap(), vec![7; 1024], "a refused kernel wrote nothing");
}

#[test]
fn pool_memory_of_a_peer_is_reachable_after_mem_pool_set_access() {
    let _turn = turn();
    let Some((dev0, dev1)) = peers("pool_memory_of_a_peer_is_reachable_after_mem_pool_set_access") else {
        return;
    };
    let pool = dev0.create_mem_pool(0, 0).unwrap();
    let s0 = dev0.create_stream().unwrap();
    let buf = pool.alloc::<u32>(2048, &s0).unwrap();
    s0.fill(&buf, 1u32).unwrap();
    s0.synchronize().unwrap();
    let s1 = dev1.create_stream().unwrap();
    assert_eq!(pool.access(1).unwrap(), AccessFlags::None);
    expect_err(s1.fill(&buf, 5u32), 1, &["hipMemPoolSetAccess"]);
    pool.set_access(1, AccessFlags::ReadWrite).unwrap();
    if pool.backing() == hipmem::PoolBacking::Segments {
        // Separate allocations are plain device memory: peer access maps them.
        dev1.enable_peer_access(&dev0).unwrap();
    }
    s1.fill(&buf, 5u32).unwrap();
    s1.synchronize().unwrap();
    let mut back = vec![0u32; 2048];
    runtime().copy_device_to_host(bytemuck_bytes(&mut back), buf.device_ptr()).unwrap();
    assert_eq!(back, vec![5; 2048], "device 1's kernel wrote device 0's pool memory");
    if runtime().peer_access_enabled(1, 0).unwrap() {
        dev1.disable_peer_access(&dev0).unwrap();
    }
    pool.set_access(1, AccessFlags::None).unwrap();
    expect_err(s1.fill(&buf, 6u32), 1, &["hipMemPoolSetAccess"]);
    buf.free_on(&s0).unwrap();
    s0.synchronize().unwrap();
}

#[test]
fn virtual_memory_is_reachable_by_a_peer_after_mem_set_access() {
    let _turn = turn();
    let Some((dev0, dev1)) = peers("virtual_memory_is_reachable_by_a_peer_after_mem_set_access") else {
        return;
    };
    let rt = runtime();
    let g = PhysicalAllocation::granularity(&dev0).unwrap();
    let physical = PhysicalAllocation::new(&dev0, g).unwrap();
    let reservation = AddressReservation::new(rt, g, 0, DevicePtr::NULL).unwrap();
    let mapping = Mapping::new(&reservation, 0, &physical, 0, g).unwrap();
    mapping.set_access(0, AccessFlags::ReadWrite).unwrap();
    let view = mapping.view::<u32>();
    let s0 = dev0.create_stream().unwrap();
    s0.fill(&view, 2u32).unwrap();
    s0.synchronize().unwrap();
    let s1 = dev1.create_stream().unwrap();
    assert_eq!(mapping.access(1).unwrap(), AccessFlags::None);
    expect_err(s1.fill(&view, 3u32), 1, &["hipMemSetAccess", "device 1"]);
    // Peer access does not reach virtual memory: only hipMemSetAccess does.
    dev1.enable_peer_access(&dev0).unwrap();
    expect_err(s1.fill(&view, 3u32), 1, &["hipMemSetAccess"]);
    dev1.disable_peer_access(&dev0).unwrap();
    mapping.set_access(1, AccessFlags::ReadWrite).unwrap();
    s1.fill(&view, 3u32).unwrap();
    s1.synchronize().unwrap();
    let mut back = vec![0u32; (g / 4) as usize];
    rt.copy_device_to_host(bytemuck_bytes(&mut back), mapping.ptr()).unwrap();
    assert!(back.iter().all(|&v| v == 3), "device 1's kernel wrote the mapping on device 0's memory");
    drop(mapping);
}

#[test]
fn taking_a_peers_access_away_waits_for_the_peers_work_that_uses_it() {
    let _turn = turn();
    let Some((dev0, dev1)) = peers("taking_a_peers_access_away_waits_for_the_peers_work_that_uses_it") else {
        return;
    };
    let rt = runtime();
    let s1 = dev1.create_stream().unwrap();
    let flag = dev1.alloc_zeroed::<u32>(1).unwrap();
    // Pool memory of device 0, written by a kernel of device 1 queued
    // behind a delay, when hipMemPoolSetAccess takes the access away.
    let pool = dev0.create_mem_pool(0, 0).unwrap();
    let s0 = dev0.create_stream().unwrap();
    let buf = pool.alloc::<u32>(2048, &s0).unwrap();
    s0.synchronize().unwrap();
    pool.set_access(1, AccessFlags::ReadWrite).unwrap();
    let segments = pool.backing() == hipmem::PoolBacking::Segments;
    if segments {
        dev1.enable_peer_access(&dev0).unwrap();
    }
    s1.delay(DELAY, &flag, 1).unwrap();
    s1.fill(&buf, 9u32).unwrap();
    if segments {
        // (Separate allocations are reached through peer access: its
        // disable is what takes the mapping away.)
        dev1.disable_peer_access(&dev0).unwrap();
    }
    pool.set_access(1, AccessFlags::None).unwrap();
    assert!(s1.query().unwrap(), "hipMemPoolSetAccess took the access away before device 1's kernel ran");
    let mut back = vec![0u32; 2048];
    rt.copy_device_to_host(bytemuck_bytes(&mut back), buf.device_ptr()).unwrap();
    assert_eq!(back, vec![9; 2048], "the kernel queued before the change wrote the pool's memory");
    buf.free_on(&s0).unwrap();
    s0.synchronize().unwrap();
    // A mapping of device 0's memory, the same through hipMemSetAccess.
    let g = PhysicalAllocation::granularity(&dev0).unwrap();
    let physical = PhysicalAllocation::new(&dev0, g).unwrap();
    let reservation = AddressReservation::new(rt, g, 0, DevicePtr::NULL).unwrap();
    let mapping = Mapping::new(&reservation, 0, &physical, 0, g).unwrap();
    mapping.set_access(0, AccessFlags::ReadWrite).unwrap();
    mapping.set_access(1, AccessFlags::ReadWrite).unwrap();
    let view = mapping.view::<u32>();
    s1.delay(DELAY, &flag, 2).unwrap();
    s1.fill(&view, 4u32).unwrap();
    mapping.set_access(1, AccessFlags::None).unwrap();
    assert!(s1.query().unwrap(), "hipMemSetAccess took the access away before device 1's kernel ran");
    assert_eq!(mapping.access(1).unwrap(), AccessFlags::None);
    let mut back = vec![0u32; (g / 4) as usize];
    rt.copy_device_to_host(bytemuck_bytes(&mut back), mapping.ptr()).unwrap();
    assert!(back.iter().all(|&v| v == 4), "the kernel queued before the change wrote the mapping");
    drop(mapping);
}

fn bytemuck_bytes(v: &mut [u32]) -> &mut [u8] {
    hipmem::bytemuck::cast_slice_mut(v)
}
