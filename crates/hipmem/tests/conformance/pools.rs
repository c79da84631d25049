//! Memory pools: creation and destruction, the current pool, attributes,
//! access, and the bad inputs of hip-memory-api.md ("Stream-ordered
//! allocation and pools"). Also the helpers the other pool modules share.
//!
//! Every pool test that changes a pool's attributes, the current pool, or
//! reads statistics works in a `private_runtime()` with pools it created, so
//! that parallel tests (and their synchronizations, which release pool
//! memory) cannot change what it sees.

use std::time::{Duration, Instant};

use hipmem::pool::handle_type;
use hipmem::{
    AccessFlags, DevicePtr, DeviceSlice, FillValue, MemPool, MemoryType, MoveBudget, PoolAttribute,
    PoolProps, Runtime, Stream,
};

use crate::{expect_err, host_addr, non_blocking, private_runtime};

/// One mebibyte.
pub const MIB: u64 = 1 << 20;

/// The pool's block granule: every allocation counts whole 256-byte granules.
pub const GRANULE: u64 = 256;

/// Bytes an allocation of `size` bytes counts in the statistics.
pub fn granules(size: u64) -> u64 {
    size.max(1).next_multiple_of(GRANULE)
}

/// A new pool on device 0 of `rt` (`max_size` 0: no limit). On virtual
/// memory it maps in units of one granularity, so that the tests of reuse
/// rules and thresholds see memory move in the driver's own steps (the
/// default unit, several granules, is covered by `pool_remap`).
pub fn new_pool(rt: &Runtime, max_size: u64) -> MemPool {
    let pool = rt.device(0).unwrap().create_mem_pool(handle_type::NONE, max_size).expect("hipMemPoolCreate");
    if pool.mapping_unit().is_some() {
        let g = hipmem::PhysicalAllocation::granularity(&rt.device(0).unwrap()).unwrap();
        pool.set_mapping_unit(g).expect("a new pool takes a mapping unit of one granularity");
    }
    pool
}

/// Sets the three reuse rules (1 on, 0 off) and checks they read back.
pub fn set_reuse(pool: &MemPool, follow_events: u64, opportunistic: u64, internal: u64) {
    for (attr, value) in [
        (PoolAttribute::ReuseFollowEventDependencies, follow_events),
        (PoolAttribute::ReuseAllowOpportunistic, opportunistic),
        (PoolAttribute::ReuseAllowInternalDependencies, internal),
    ] {
        pool.set_attribute(attr, value).unwrap();
        assert_eq!(pool.attribute(attr), value, "{attr:?} does not read back");
    }
}

/// A new non-blocking stream on device 0 of `rt`.
pub fn stream0(rt: &Runtime) -> Stream {
    rt.device(0).unwrap().create_stream_with_flags(non_blocking()).unwrap()
}

/// The fill kernel on pool memory: every u32 of `[ptr, ptr + bytes)` becomes
/// `value`, in `stream`'s order (the range is checked like the kernels do).
pub fn fill_u32(rt: &Runtime, ptr: DevicePtr, bytes: u64, value: u32, stream: &Stream) {
    assert_eq!(bytes % 4, 0, "fill_u32 fills whole u32s");
    rt.check_device_range(ptr, bytes, "fill kernel").expect("fill range");
    rt.backend().launch_fill(ptr, FillValue::U32(value), bytes / 4, stream.raw()).expect("fill kernel");
}

/// Reads `bytes / 4` u32s at `ptr` (synchronous copy).
pub fn read_u32s(rt: &Runtime, ptr: DevicePtr, bytes: u64) -> Vec<u32> {
    let mut raw = vec![0u8; bytes as usize];
    rt.copy_device_to_host(&mut raw, ptr).expect("reading pool memory back");
    raw.chunks_exact(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Waits (polling hipStreamQuery) until `stream` has finished its work.
pub fn wait_until_idle(stream: &Stream) {
    let start = Instant::now();
    while !stream.query().unwrap() {
        assert!(start.elapsed() < Duration::from_secs(20), "the stream never became idle");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Whether `[a, a + a_len)` and `[b, b + b_len)` are disjoint.
pub fn disjoint(a: DevicePtr, a_len: u64, b: DevicePtr, b_len: u64) -> bool {
    a.0 + a_len <= b.0 || b.0 + b_len <= a.0
}

// ---- creation, destruction, attributes ------------------------------------------------

#[test]
fn created_pools_know_their_properties_and_default_attributes() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let props = PoolProps { device: 0, handle_types: handle_type::POSIX_FILE_DESCRIPTOR, max_size: 8 * MIB };
    let a = MemPool::create(&rt, props).unwrap();
    let b = dev.create_mem_pool(handle_type::NONE, 0).unwrap();
    assert_eq!(a.props(), props);
    assert_eq!(b.props(), PoolProps { device: 0, handle_types: 0, max_size: 0 });
    assert_ne!(a, b);
    assert_ne!(a.id(), b.id());
    assert_eq!(a.clone(), a);
    for pool in [&a, &b] {
        assert_eq!(pool.device(), 0);
        assert!(!pool.is_default());
        assert!(!pool.is_destroyed());
        assert_ne!(*pool, rt.default_mem_pool(0).unwrap());
        // hipMemPoolAttr defaults: the reuse rules on, release threshold 0, nothing used.
        assert_eq!(pool.attribute(PoolAttribute::ReuseFollowEventDependencies), 1);
        assert_eq!(pool.attribute(PoolAttribute::ReuseAllowOpportunistic), 1);
        assert_eq!(pool.attribute(PoolAttribute::ReuseAllowInternalDependencies), 1);
        assert_eq!(pool.attribute(PoolAttribute::ReleaseThreshold), 0);
        for stat in [
            PoolAttribute::ReservedMemCurrent,
            PoolAttribute::ReservedMemHigh,
            PoolAttribute::UsedMemCurrent,
            PoolAttribute::UsedMemHigh,
        ] {
            assert_eq!(pool.attribute(stat), 0, "{stat:?} of a new pool");
        }
        assert_eq!(pool.stats(), hipmem::PoolStats::default());
        pool.check_invariants().unwrap();
    }
    // Each device has one default pool, the same every time it is asked for.
    for ordinal in 0..rt.device_count() {
        let d1 = rt.default_mem_pool(ordinal).unwrap();
        let d2 = rt.device(ordinal).unwrap().default_mem_pool().unwrap();
        assert_eq!(d1, d2);
        assert!(d1.is_default());
        assert_eq!(d1.device(), ordinal);
    }
    if rt.device_count() > 1 {
        assert_ne!(rt.default_mem_pool(0).unwrap(), rt.default_mem_pool(1).unwrap());
    }
}

#[test]
fn attribute_numbers_parse_and_unknown_ones_are_invalid_value() {
    for (i, attr) in PoolAttribute::ALL.iter().enumerate() {
        let raw = i as i32 + 1;
        assert_eq!(attr.raw(), raw);
        assert_eq!(PoolAttribute::from_raw(raw).unwrap(), *attr);
        assert_eq!(attr.is_int(), raw <= 3, "{attr:?}");
    }
    assert_eq!(PoolAttribute::ReuseFollowEventDependencies.raw(), 1);
    assert_eq!(PoolAttribute::ReleaseThreshold.raw(), 4);
    assert_eq!(PoolAttribute::UsedMemHigh.raw(), 8);
    for bad in [0, 9, -1, 100, i32::MIN, i32::MAX] {
        expect_err(PoolAttribute::from_raw(bad), 1, &[&bad.to_string()]);
    }
}

#[test]
fn reuse_flags_and_release_threshold_read_back() {
    let rt = private_runtime();
    let pool = new_pool(&rt, 0);
    set_reuse(&pool, 0, 0, 0);
    set_reuse(&pool, 1, 0, 1);
    set_reuse(&pool, 0, 1, 0);
    set_reuse(&pool, 1, 1, 1);
    for value in [u64::MAX, 0, 12345, 64 * MIB] {
        pool.set_attribute(PoolAttribute::ReleaseThreshold, value).unwrap();
        assert_eq!(pool.attribute(PoolAttribute::ReleaseThreshold), value);
    }
    pool.set_release_threshold(7 * MIB);
    assert_eq!(pool.attribute(PoolAttribute::ReleaseThreshold), 7 * MIB);
}

#[test]
fn creating_a_pool_with_bad_properties_is_invalid_value() {
    let rt = private_runtime();
    let n = rt.device_count();
    for device in [n, n + 1, 1000, usize::MAX] {
        let props = PoolProps { device, handle_types: 0, max_size: 0 };
        expect_err(MemPool::create(&rt, props), 1, &[]);
    }
    // Unknown handle type bits.
    for bits in [8u32, 0x10, 0x8000_0000] {
        let props = PoolProps { device: 0, handle_types: bits, max_size: 0 };
        expect_err(MemPool::create(&rt, props), 1, &[]);
    }
    // A failed creation left nothing behind.
    let pool = new_pool(&rt, 0);
    assert_eq!(pool.stats(), hipmem::PoolStats::default());
}

#[test]
fn the_default_pool_cannot_be_destroyed() {
    let rt = private_runtime();
    for ordinal in 0..rt.device_count() {
        let default = rt.default_mem_pool(ordinal).unwrap();
        expect_err(default.clone().destroy(), 1, &["default"]);
        assert!(!default.is_destroyed());
        // Still usable afterwards.
        let s = rt.device(ordinal).unwrap().create_stream().unwrap();
        let p = default.alloc_raw(1000, &s).unwrap();
        assert!(!p.is_null());
        rt.free_async(p, &s).unwrap();
        s.synchronize().unwrap();
    }
}

/// A destroyed pool gives its addresses back: also where its memory had gone
/// back already (at a synchronization, under the default release threshold
/// of 0), and, where blocks were live when it was destroyed, once the last
/// of them is freed. A pool on virtual memory reserves twelve times its
/// device's memory in addresses, and before this a process that made and
/// destroyed pools ran out of them (this suite, on a 141 GB H200).
#[test]
fn a_destroyed_pool_gives_its_addresses_back() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let kind = |p: DevicePtr| rt.pointer_attributes(p.0).unwrap().memory_type;
    for live_at_destroy in [false, true] {
        let pool = new_pool(&rt, 0);
        let p = pool.alloc_raw(MIB, &s).unwrap();
        assert_eq!(kind(p), MemoryType::Device);
        if !live_at_destroy {
            rt.free_async(p, &s).unwrap();
            s.synchronize().unwrap();
            assert_eq!(pool.stats().reserved_current, 0, "released at the synchronization");
        }
        pool.destroy().unwrap();
        if live_at_destroy {
            assert_eq!(kind(p), MemoryType::Device, "a live block of a destroyed pool stays valid");
            rt.free_async(p, &s).unwrap();
            s.synchronize().unwrap();
        }
        assert_eq!(kind(p), MemoryType::Unregistered, "live at the destruction: {live_at_destroy}");
    }
    // Many pools made and destroyed, one after another, each its memory
    // released at a synchronization first.
    for _ in 0..64 {
        let pool = new_pool(&rt, 0);
        let p = pool.alloc_raw(MIB, &s).expect("addresses for a new pool");
        rt.free_async(p, &s).unwrap();
        s.synchronize().unwrap();
        pool.destroy().unwrap();
    }
}

#[test]
fn double_destroy_through_a_clone_is_invalid_value() {
    let rt = private_runtime();
    let pool = new_pool(&rt, 0);
    let clone = pool.clone();
    pool.destroy().unwrap();
    assert!(clone.is_destroyed());
    expect_err(clone.clone().destroy(), 1, &["destroyed"]);
    // Dropping the last handle of a destroyed pool is harmless.
    drop(clone);
    assert!(rt.take_drop_errors().is_empty());
}

#[test]
fn access_is_read_write_on_the_own_device_and_none_elsewhere_until_set() {
    let rt = private_runtime();
    let pool = new_pool(&rt, 0);
    assert_eq!(pool.access(0).unwrap(), AccessFlags::ReadWrite);
    assert_eq!(rt.default_mem_pool(0).unwrap().access(0).unwrap(), AccessFlags::ReadWrite);
    let n = rt.device_count();
    for bad in [n, n + 7, usize::MAX] {
        expect_err(pool.set_access(bad, AccessFlags::ReadWrite), 101, &[]);
        expect_err(pool.access(bad), 101, &[]);
    }
    // Flags numbers: 0, 1, 3; anything else is InvalidValue.
    for (raw, flags) in [(0, AccessFlags::None), (1, AccessFlags::Read), (3, AccessFlags::ReadWrite)] {
        assert_eq!(AccessFlags::from_raw(raw).unwrap(), flags);
        assert_eq!(flags.raw(), raw);
    }
    for bad in [2u32, 4, 5, 0xff, u32::MAX] {
        expect_err(AccessFlags::from_raw(bad), 1, &[&bad.to_string()]);
    }
    pool.set_access(0, AccessFlags::ReadWrite).unwrap();
    assert_eq!(pool.access(0).unwrap(), AccessFlags::ReadWrite);
    if n < 2 {
        eprintln!(
            "access_is_read_write_on_the_own_device_and_none_elsewhere_until_set: \
             other-device half skipped, needs 2 devices, {n} present"
        );
        return;
    }
    assert_eq!(pool.access(1).unwrap(), AccessFlags::None);
    let other = new_pool(&rt, 0);
    pool.set_access(1, AccessFlags::Read).unwrap();
    assert_eq!(pool.access(1).unwrap(), AccessFlags::Read);
    assert_eq!(other.access(1).unwrap(), AccessFlags::None, "access is per pool");
    pool.set_access(1, AccessFlags::ReadWrite).unwrap();
    assert_eq!(pool.access(1).unwrap(), AccessFlags::ReadWrite);
    pool.set_access(1, AccessFlags::None).unwrap();
    assert_eq!(pool.access(1).unwrap(), AccessFlags::None);
    assert_eq!(pool.access(0).unwrap(), AccessFlags::ReadWrite);
}

// ---- the current pool -------------------------------------------------------------------

#[test]
fn the_current_pool_is_the_default_until_set_and_malloc_async_uses_it() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let default = rt.default_mem_pool(0).unwrap();
    default.set_release_threshold(u64::MAX);
    assert_eq!(rt.mem_pool(0).unwrap(), default);
    assert_eq!(rt.device(0).unwrap().mem_pool().unwrap(), default);
    for ordinal in 0..rt.device_count() {
        assert!(rt.mem_pool(ordinal).unwrap().is_default());
    }

    // hipMallocAsync goes to the default pool.
    let p = rt.malloc_async(1000, &s).unwrap();
    assert_eq!(default.stats().used_current, 1024);
    rt.free_async(p, &s).unwrap();
    assert_eq!(default.stats().used_current, 0);

    // hipDeviceSetMemPool: now it goes to the created pool.
    let pool = new_pool(&rt, 0);
    rt.set_mem_pool(0, &pool).unwrap();
    assert_eq!(rt.mem_pool(0).unwrap(), pool);
    let q = rt.malloc_async(3000, &s).unwrap();
    assert_eq!(pool.stats().used_current, 3072, "hipMallocAsync did not use the current pool");
    assert_eq!(default.stats().used_current, 0);
    assert!(pool.stats().reserved_current >= 3072);
    rt.free_async(q, &s).unwrap();
    assert_eq!(pool.stats().used_current, 0);
    // Other devices keep their own current pool.
    if rt.device_count() > 1 {
        assert!(rt.mem_pool(1).unwrap().is_default());
    }

    // Setting the default back works too.
    rt.device(0).unwrap().set_mem_pool(&default).unwrap();
    assert_eq!(rt.mem_pool(0).unwrap(), default);
    let r = rt.malloc_async(256, &s).unwrap();
    assert_eq!(default.stats().used_current, 256);
    assert_eq!(pool.stats().used_current, 0);
    rt.free_async(r, &s).unwrap();
    s.synchronize().unwrap();
}

#[test]
fn frees_by_pointer_find_their_pool_whichever_pool_the_stream_used_first() {
    // A stream carries the slot of the first pool it used; a free by
    // pointer asks that slot first, then the slot this thread used last on
    // the stream, then the pool that holds the address. Blocks of two pools
    // on one stream, freed on this thread and on another one (which has no
    // slot of its own for either), each go back to their own pool, and the
    // data of the blocks still live stays.
    let rt = private_runtime();
    let s = stream0(&rt);
    let default = rt.default_mem_pool(0).unwrap();
    default.set_release_threshold(u64::MAX);
    let other = new_pool(&rt, 0);
    other.set_release_threshold(u64::MAX);

    let a: Vec<DevicePtr> = (0..4).map(|i| rt.malloc_async(1000 + i * 256, &s).unwrap()).collect();
    rt.set_mem_pool(0, &other).unwrap();
    let b: Vec<DevicePtr> = (0..4).map(|i| rt.malloc_async(5000 + i * 256, &s).unwrap()).collect();
    let used_a: u64 = (0..4).map(|i| granules(1000 + i * 256)).sum();
    let used_b: u64 = (0..4).map(|i| granules(5000 + i * 256)).sum();
    assert_eq!(default.stats().used_current, used_a);
    assert_eq!(other.stats().used_current, used_b);
    for (i, &p) in a.iter().chain(&b).enumerate() {
        fill_u32(&rt, p, 1000, 0xA000 + i as u32, &s);
    }

    // This thread: the second pool's block (the stream's slot is the
    // first's), then the first pool's.
    rt.free_async(b[0], &s).unwrap();
    rt.free_async(a[0], &s).unwrap();
    assert_eq!(default.stats().used_current, used_a - granules(1000));
    assert_eq!(other.stats().used_current, used_b - granules(5000));

    // Another thread, alternating the pools.
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                for (&p, &q) in b[1..3].iter().zip(&a[1..3]) {
                    rt.free_async(p, &s).unwrap();
                    rt.free_async(q, &s).unwrap();
                }
            })
            .join()
            .unwrap();
    });
    assert_eq!(default.stats().used_current, granules(1000 + 3 * 256));
    assert_eq!(other.stats().used_current, granules(5000 + 3 * 256));
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, a[3], 1000).iter().all(|&v| v == 0xA003), "a live block lost its data");
    assert!(read_u32s(&rt, b[3], 1000).iter().all(|&v| v == 0xA007), "a live block lost its data");

    // Freed twice: refused, whichever pool.
    expect_err(rt.free_async(b[1], &s), 1, &[]);
    expect_err(rt.free_async(a[1], &s), 1, &[]);
    rt.free_async(a[3], &s).unwrap();
    rt.free_async(b[3], &s).unwrap();
    assert_eq!(default.stats().used_current, 0);
    assert_eq!(other.stats().used_current, 0);
    rt.device(0).unwrap().set_mem_pool(&default).unwrap();
    s.synchronize().unwrap();
    default.check_invariants().unwrap();
    other.check_invariants().unwrap();
}

#[test]
fn dropping_the_last_handle_of_the_current_pool_makes_the_default_current() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let default = rt.default_mem_pool(0).unwrap();
    let pool = new_pool(&rt, 0);
    rt.set_mem_pool(0, &pool).unwrap();
    let current = rt.mem_pool(0).unwrap();
    assert_eq!(current, pool);
    drop(current);
    drop(pool);
    // The pool is gone with its last handle.
    assert!(rt.mem_pool(0).unwrap().is_default());
    let used_before = default.stats().used_current;
    let p = rt.malloc_async(1000, &s).unwrap();
    assert_eq!(default.stats().used_current, used_before + 1024, "hipMallocAsync did not fall back");
    rt.free_async(p, &s).unwrap();
    s.synchronize().unwrap();
    assert!(rt.take_drop_errors().is_empty());
}

#[test]
fn destroying_the_current_pool_makes_the_default_current() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let default = rt.default_mem_pool(0).unwrap();
    let pool = new_pool(&rt, 0);
    rt.set_mem_pool(0, &pool).unwrap();
    pool.clone().destroy().unwrap();
    assert!(pool.is_destroyed());
    let now = rt.mem_pool(0).unwrap();
    assert!(now.is_default(), "the destroyed pool is still current");
    assert_eq!(now, default);
    let p = rt.malloc_async(1000, &s).unwrap();
    assert_eq!(default.stats().used_current, 1024);
    assert_eq!(pool.stats().used_current, 0);
    rt.free_async(p, &s).unwrap();
    // A destroyed pool cannot become current again.
    expect_err(rt.set_mem_pool(0, &pool), 1, &["destroyed"]);
    assert!(rt.mem_pool(0).unwrap().is_default());
    s.synchronize().unwrap();
}

#[test]
fn a_pool_with_live_allocations_may_be_destroyed_and_they_stay_valid() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
    let a = pool.alloc_raw(data.len() as u64, &s).unwrap();
    let b = pool.alloc::<u32>(1000, &s).unwrap();
    fill_u32(&rt, b.device_ptr(), 4000, 0xB0B0_B0B0, &s);
    s.synchronize().unwrap();
    rt.copy_host_to_device(a, &data).unwrap();

    pool.clone().destroy().unwrap();
    assert!(pool.is_destroyed());

    // The memory is still there: copy in and out.
    let mut back = vec![0u8; data.len()];
    rt.copy_device_to_host(&mut back, a).unwrap();
    assert_eq!(back, data, "a live allocation lost its data when its pool was destroyed");
    let twice: Vec<u8> = data.iter().map(|x| x.wrapping_mul(2)).collect();
    rt.copy_host_to_device(a, &twice).unwrap();
    rt.copy_device_to_host(&mut back, a).unwrap();
    assert_eq!(back, twice);
    assert_eq!(read_u32s(&rt, b.device_ptr(), 4000), vec![0xB0B0_B0B0; 1000]);
    fill_u32(&rt, b.device_ptr(), 4000, 0x1234_5678, &s);
    s.synchronize().unwrap();
    assert_eq!(read_u32s(&rt, b.device_ptr(), 4000), vec![0x1234_5678; 1000]);

    // Their later frees succeed (once), in stream order and through Drop.
    rt.free_async(a, &s).unwrap();
    expect_err(rt.free_async(a, &s), 1, &[]);
    drop(b);
    s.synchronize().unwrap();
    assert!(rt.take_drop_errors().is_empty(), "freeing a PoolBuffer of a destroyed pool failed");
    assert_eq!(pool.stats().used_current, 0);
}

/// CUDA's rule (cuMemPoolDestroy): a pool destroyed with allocations or frees
/// outstanding releases its memory once they are done. The release threshold
/// of a destroyed pool must not keep that memory forever.
#[test]
fn a_destroyed_pool_gives_its_memory_back_once_its_frees_complete() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 0);
    pool.set_release_threshold(u64::MAX);
    let live = pool.alloc_raw(MIB, &s).unwrap();
    let pending = pool.alloc_raw(3 * MIB, &s).unwrap();
    let t0 = std::time::Instant::now();
    s.delay(crate::DELAY, &flag, 1).unwrap();
    rt.free_async(pending, &s).unwrap();
    let watcher = pool.clone();
    pool.destroy().unwrap();
    assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
    rt.free_async(live, &s).unwrap();
    s.synchronize().unwrap();
    let stats = watcher.stats();
    assert_eq!(stats.used_current, 0);
    assert_eq!(
        stats.reserved_current, 0,
        "the destroyed pool still holds {} bytes after all its frees completed",
        stats.reserved_current
    );
}

/// Many frees into a destroyed pool, from the thread that destroyed it and
/// from another one, with the stream's default pool used first (so the pool
/// is reached through the thread's table of slots): every free succeeds once
/// and the memory goes back.
#[test]
fn many_frees_into_a_destroyed_pool_all_succeed_and_release_it() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let warm = rt.malloc_async(4096, &s).unwrap();
    rt.free_async(warm, &s).unwrap();
    let pool = new_pool(&rt, 0);
    let ptrs: Vec<DevicePtr> = (0..40).map(|i| pool.alloc_raw(4096 + i * 256, &s).unwrap()).collect();
    let watcher = pool.clone();
    pool.destroy().unwrap();
    let (here, there) = ptrs.split_at(20);
    for &p in here {
        rt.free_async(p, &s).unwrap();
    }
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for &p in there {
                rt.free_async(p, &s).unwrap();
            }
        });
    });
    for &p in &ptrs {
        expect_err(rt.free_async(p, &s), 1, &[]);
    }
    s.synchronize().unwrap();
    let stats = watcher.stats();
    assert_eq!(stats.used_current, 0);
    assert_eq!(stats.reserved_current, 0, "the destroyed pool still holds {} bytes", stats.reserved_current);
}

// ---- bad inputs ---------------------------------------------------------------------------

#[test]
fn size_zero_allocations_are_null_and_succeed() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    assert_eq!(rt.malloc_async(0, &s).unwrap(), DevicePtr::NULL);
    assert_eq!(pool.alloc_raw(0, &s).unwrap(), DevicePtr::NULL);
    let empty = pool.alloc::<u64>(0, &s).unwrap();
    assert!(empty.is_empty());
    assert_eq!(empty.device_ptr(), DevicePtr::NULL);
    assert_eq!(empty.size_bytes(), 0);
    drop(empty);
    assert_eq!(pool.stats().used_current, 0);
    assert_eq!(rt.default_mem_pool(0).unwrap().stats().used_current, 0);
    assert!(rt.take_drop_errors().is_empty());
}

#[test]
fn free_async_of_null_foreign_or_freed_pointers_is_invalid_value() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    expect_err(rt.free_async(DevicePtr::NULL, &s), 1, &["null"]);
    let on_stack = [0u64; 8];
    expect_err(rt.free_async(DevicePtr(host_addr(&on_stack)), &s), 1, &[]);
    let on_heap = vec![0u8; 4096];
    expect_err(rt.free_async(DevicePtr(on_heap.as_ptr() as u64), &s), 1, &[]);

    // Double free, from the default pool and from a created pool, on the
    // same stream and on another one.
    let t = stream0(&rt);
    for (from_pool, second_on) in [(false, &s), (true, &s), (false, &t), (true, &t)] {
        let p =
            if from_pool { pool.alloc_raw(1000, &s).unwrap() } else { rt.malloc_async(1000, &s).unwrap() };
        rt.free_async(p, &s).unwrap();
        expect_err(rt.free_async(p, second_on), 1, &[]);
    }
    // A pointer into the middle of a live block is not a pool allocation.
    let p = pool.alloc_raw(4096, &s).unwrap();
    expect_err(rt.free_async(DevicePtr(p.0 + 256), &s), 1, &[]);
    assert_eq!(pool.stats().used_current, 4096, "a bad free changed the statistics");
    rt.free_async(p, &s).unwrap();
    // A PoolBuffer freed on another stream, then its pointer freed again.
    let buf = pool.alloc::<u32>(100, &s).unwrap();
    let ptr = buf.device_ptr();
    buf.free_on(&t).unwrap();
    expect_err(rt.free_async(ptr, &s), 1, &[]);
    s.synchronize().unwrap();
    t.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    assert!(rt.take_drop_errors().is_empty());
}

#[test]
fn free_async_accepts_a_plain_malloc_pointer_and_frees_it_at_once() {
    let rt = private_runtime();
    let s = stream0(&rt);
    // Use a pool first so that the stream has pool state of its own.
    let warm = rt.malloc_async(1000, &s).unwrap();
    let p = rt.malloc(0, 4096).unwrap();
    rt.copy_host_to_device(p, &[1u8; 4096]).unwrap();
    rt.free_async(p, &s).unwrap();
    assert!(rt.allocations().get(p).is_none(), "the hipMalloc pointer was not freed synchronously");
    expect_err(rt.free(p), 1, &[]);
    expect_err(rt.free_async(p, &s), 1, &[]);
    rt.free_async(warm, &s).unwrap();
    s.synchronize().unwrap();
}

#[test]
fn hip_free_accepts_a_pool_pointer_and_returns_it_to_its_pool() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    let a = pool.alloc_raw(1000, &s).unwrap();
    let b = rt.malloc_async(5000, &s).unwrap();
    fill_u32(&rt, a, 1000, 7, &s);
    s.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 1024);
    rt.free(a).expect("hipFree of a pointer from a created pool");
    assert_eq!(pool.stats().used_current, 0, "hipFree did not give the block back to its pool");
    rt.free(b).expect("hipFree of a pointer from the default pool");
    assert_eq!(rt.default_mem_pool(0).unwrap().stats().used_current, 0);
    // Freed once: a second free of either kind is InvalidValue.
    expect_err(rt.free_async(a, &s), 1, &[]);
    expect_err(rt.free(b), 1, &[]);
    pool.check_invariants().unwrap();
}

#[test]
fn allocations_past_max_size_or_the_device_are_out_of_memory() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 2 * MIB);
    let too_big = 2 * MIB + 256;
    expect_err(pool.alloc_raw(too_big, &s), 2, &[&too_big.to_string()]);
    let all = pool.alloc_raw(2 * MIB, &s).expect("exactly maxSize fits");
    expect_err(pool.alloc_raw(1, &s), 2, &[]);
    assert!(pool.stats().reserved_current <= 2 * MIB, "the pool grew past its maxSize");
    rt.free_async(all, &s).unwrap();
    s.synchronize().unwrap();
    // After the free completed the memory is available again.
    let again = pool.alloc_raw(2 * MIB, &s).unwrap();
    rt.free_async(again, &s).unwrap();

    // An impossible size, from a created pool, the default pool and hipMallocAsync.
    let unbounded = new_pool(&rt, 0);
    for size in [1u64 << 50, 1 << 62] {
        expect_err(unbounded.alloc_raw(size, &s), 2, &[]);
        expect_err(rt.malloc_async(size, &s), 2, &[]);
        expect_err(rt.default_mem_pool(0).unwrap().alloc_raw(size, &s), 2, &[]);
    }
    expect_err(unbounded.alloc::<u64>(usize::MAX, &s), 2, &[]);
    assert_eq!(unbounded.stats().used_current, 0);
    unbounded.check_invariants().unwrap();
    // The failures left the pools usable.
    let ok = unbounded.alloc_raw(4096, &s).unwrap();
    rt.free_async(ok, &s).unwrap();
    s.synchronize().unwrap();
}

/// A size limit set on a pool in use (`MemPool::set_size_limit`, what
/// PyTorch's `set_per_process_memory_fraction` becomes): memory the pool
/// holds still serves; growth past the limit is OutOfMemory naming it and
/// changes nothing; memory no block uses is reused or given back before a
/// growth fails; lowering the limit gives back unused memory at once and
/// keeps live blocks (and their data); lifting it lets the pool grow.
#[test]
fn a_size_limit_set_on_a_pool_in_use_bounds_what_it_holds() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    assert_eq!(pool.size_limit(), None);
    let x = pool.alloc_raw(4 * MIB, &s).unwrap();
    let y = pool.alloc_raw(4 * MIB, &s).unwrap();
    fill_u32(&rt, y, 4 * MIB, 0x5eed, &s);
    let held = pool.stats().reserved_current;
    assert!(held >= 8 * MIB, "{held}");
    pool.set_size_limit(Some(held)).unwrap();
    assert_eq!(pool.size_limit(), Some(held));
    assert_eq!(pool.stats().reserved_current, held, "a limit the pool is within changes nothing");
    rt.free_async(x, &s).unwrap();
    s.synchronize().unwrap();
    let x2 = pool.alloc_raw(4 * MIB, &s).expect("memory the pool holds serves under its limit");
    expect_err(pool.alloc_raw(4 * MIB, &s), 2, &["size limit", &held.to_string()]);
    assert_eq!(pool.stats().reserved_current, held, "a growth that failed changed what the pool holds");
    assert_eq!(pool.stats().used_current, 8 * MIB);
    pool.check_invariants().unwrap();

    // Room for 2 MiB more than the pool holds, and a request that fits
    // only if the free memory beside `y` is reused under it (or given back
    // first): it succeeds within the limit.
    rt.free_async(x2, &s).unwrap();
    s.synchronize().unwrap();
    let limit = held + 2 * MIB;
    pool.set_size_limit(Some(limit)).unwrap();
    let free = held - 4 * MIB;
    let z = pool.alloc_raw(free + 2 * MIB, &s).expect("unused memory makes room under the limit");
    assert!(pool.stats().reserved_current <= limit, "{} > {limit}", pool.stats().reserved_current);
    fill_u32(&rt, z, free + 2 * MIB, 0xabc, &s);

    // Lowered below what the pool holds: unused memory goes now; below what
    // is live: the live blocks stay, valid, and nothing new grows.
    rt.free_async(y, &s).unwrap();
    s.synchronize().unwrap();
    let live = pool.stats().used_current;
    pool.set_size_limit(Some(live)).unwrap();
    assert!(pool.stats().reserved_current <= live, "{:?} after lowering the limit to {live}", pool.stats());
    pool.set_size_limit(Some(2 * MIB)).unwrap();
    assert_eq!(pool.stats().used_current, live);
    expect_err(pool.alloc_raw(4 * MIB, &s), 2, &["size limit"]);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, z, free + 2 * MIB).iter().all(|&v| v == 0xabc), "a live block lost its data");

    // Lifted: the pool grows again.
    pool.set_size_limit(None).unwrap();
    assert_eq!(pool.size_limit(), None);
    let big = pool.alloc_raw(held + 8 * MIB, &s).expect("no limit");
    rt.free_async(big, &s).unwrap();
    rt.free_async(z, &s).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();

    // With a maxSize from creation too, the lower of the two binds.
    let capped = new_pool(&rt, 8 * MIB);
    capped.set_size_limit(Some(64 * MIB)).unwrap();
    expect_err(capped.alloc_raw(10 * MIB, &s), 2, &["maxSize"]);
    capped.set_size_limit(Some(4 * MIB)).unwrap();
    expect_err(capped.alloc_raw(6 * MIB, &s), 2, &["size limit"]);
    let ok = capped.alloc_raw(4 * MIB, &s).unwrap();
    rt.free_async(ok, &s).unwrap();
    s.synchronize().unwrap();
}

/// Sizes whose granule count still fits in 64 bits, but no device can hold.
#[test]
fn sizes_near_the_top_of_the_address_space_are_out_of_memory() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    // The stream has a freed block cached, as in any program that reuses memory.
    let warm = pool.alloc_raw(4096, &s).unwrap();
    rt.free_async(warm, &s).unwrap();
    for size in [u64::MAX, u64::MAX - 255, u64::MAX / 8 * 7, u64::MAX / 2 + 1] {
        expect_err(pool.alloc_raw(size, &s), 2, &[]);
        expect_err(rt.malloc_async(size, &s), 2, &[]);
    }
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
    s.synchronize().unwrap();
}

/// A stream of another runtime is a bad stream handle for this one
/// (hipMallocAsync / hipFreeAsync: "a bad stream handle → InvalidHandle").
#[test]
fn stream_ordered_calls_reject_a_stream_of_another_runtime() {
    let rt = private_runtime();
    let other = private_runtime();
    let foreign = stream0(&other);
    let own = stream0(&rt);
    let pool = new_pool(&rt, 0);
    let mut wrong = Vec::new();
    match pool.alloc_raw(1000, &foreign) {
        Err(e) if e.code() == 400 => {}
        r => wrong.push(format!("hipMallocFromPoolAsync on a foreign stream gave {r:?}")),
    }
    match rt.malloc_async(1000, &foreign) {
        Err(e) if e.code() == 400 => {}
        r => wrong.push(format!("hipMallocAsync on a foreign stream gave {r:?}")),
    }
    let p = rt.malloc_async(1000, &own).unwrap();
    match rt.free_async(p, &foreign) {
        Err(e) if e.code() == 400 => rt.free_async(p, &own).unwrap(),
        r => wrong.push(format!("hipFreeAsync on a foreign stream gave {r:?}")),
    }
    own.synchronize().unwrap();
    foreign.synchronize().unwrap();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The driver's own pool kind behind the same API: where the backend has
/// driver pools it allocates, frees, reports and is the current pool like any
/// pool; where it has none, creating one is NotSupported.
#[test]
fn the_driver_pool_kind_works_behind_the_same_api_where_the_backend_has_one() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let props = PoolProps { device: 0, handle_types: 0, max_size: 0 };
    let pool = match MemPool::create_driver(&rt, props) {
        Err(e) => {
            assert_eq!(e.code(), 801, "no driver pools must be NotSupported: {e}");
            assert!(MemPool::driver_default(&rt, 0).is_err());
            return;
        }
        Ok(p) => p,
    };
    assert!(pool.is_driver_pool() && !pool.is_default());
    let s = dev.create_stream().unwrap();
    let buf = pool.alloc::<u32>(1000, &s).unwrap();
    s.fill(&buf, 7u32).unwrap();
    s.synchronize().unwrap();
    assert_eq!(buf.read_to_vec().unwrap(), vec![7u32; 1000]);
    assert!(pool.stats().used_current >= 4000);
    assert!(pool.stats().reserved_current >= pool.stats().used_current);
    expect_err(pool.set_attribute(PoolAttribute::ReservedMemCurrent, 0), 1, &["read-only"]);
    expect_err(pool.set_attribute(PoolAttribute::UsedMemHigh, 5), 1, &["reset"]);
    pool.set_attribute(PoolAttribute::UsedMemHigh, 0).unwrap();
    expect_err(pool.set_size_limit(Some(MIB)), 1, &["own pools"]);
    assert_eq!(pool.access(0).unwrap(), AccessFlags::ReadWrite);
    // Raw pointers: hipFreeAsync finds the pool; a double free is InvalidValue.
    let p = pool.alloc_raw(4096, &s).unwrap();
    assert_eq!(rt.pointer_attributes(p.0).unwrap().memory_type, hipmem::MemoryType::Device);
    rt.free_async(p, &s).unwrap();
    expect_err(rt.free_async(p, &s), 1, &[]);
    // As the current pool, hipMallocAsync uses it; hipFree works on its memory.
    rt.set_mem_pool(0, &pool).unwrap();
    assert!(rt.mem_pool(0).unwrap() == pool);
    let q = rt.malloc_async(1 << 20, &s).unwrap();
    let mut host = vec![3u8; 1 << 20];
    s.synchronize().unwrap();
    rt.copy_host_to_device(q, &host).unwrap();
    host.fill(0);
    rt.copy_device_to_host(&mut host, q).unwrap();
    assert!(host.iter().all(|&b| b == 3));
    rt.free(q).unwrap();
    drop(buf);
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    // The driver's default pool is a default: it cannot be destroyed.
    let default = MemPool::driver_default(&rt, 0).unwrap();
    assert!(default.is_default());
    expect_err(default.destroy(), 1, &["default"]);
    pool.clone().destroy().unwrap();
    expect_err(pool.destroy(), 1, &["already"]);
    assert!(
        !rt.mem_pool(0).unwrap().is_driver_pool(),
        "destroying the current pool makes the default current"
    );
}

/// Runs `rounds` idle windows on `pool`: each waits a window and a half,
/// then allocates and frees a block of a size not seen before (the slow
/// path, where idle release is asked). Returns the reserved bytes after.
fn idle_windows(rt: &Runtime, pool: &MemPool, s: &Stream, window: Duration, rounds: u64) -> u64 {
    for k in 0..rounds {
        std::thread::sleep(window + window / 2);
        let p = pool.alloc_raw(MIB + (k + 1) * 4096, s).unwrap();
        rt.free_async(p, s).unwrap();
    }
    pool.stats().reserved_current
}

/// Idle release (what PyTorch's interface turns on): memory beyond what the
/// last two windows needed goes back on the slow path, live blocks keep
/// their data, the statistics stay exact, the release threshold still
/// holds memory, and a pool without it keeps what it has. No stream is
/// synchronized until the end (a synchronization applies the release
/// threshold itself): the pool learns which frees completed by asking.
#[test]
fn idle_release_gives_back_memory_unused_for_two_windows() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let window = Duration::from_millis(40);
    let pool = new_pool(&rt, 0);
    assert_eq!(pool.idle_release(), None, "off by default");
    expect_err(pool.set_idle_release(Some(Duration::ZERO)), 1, &["window"]);
    pool.set_idle_release(Some(window)).unwrap();
    assert_eq!(pool.idle_release(), Some(window));
    let keep = pool.alloc_raw(MIB, &s).unwrap();
    fill_u32(&rt, keep, MIB, 0x1d1e_0001, &s);
    // A peak of 64 MiB, freed at once.
    let peak: Vec<DevicePtr> = (0..8).map(|_| pool.alloc_raw(8 * MIB, &s).unwrap()).collect();
    for p in peak {
        rt.free_async(p, &s).unwrap();
    }
    let held = pool.stats().reserved_current;
    assert!(held >= 65 * MIB, "{held}");
    // The peak's window and the next still count; by the third it is idle.
    let after = idle_windows(&rt, &pool, &s, window, 4);
    assert!(after <= 16 * MIB, "reserved {after} bytes after four idle windows (held {held})");
    let st = pool.stats();
    assert_eq!(st.used_current, granules(MIB));
    assert!(st.reserved_high >= held, "the high watermark is history");
    assert!(read_u32s(&rt, keep, MIB).iter().all(|&v| v == 0x1d1e_0001), "a live block keeps its data");

    // The release threshold holds memory as at a synchronization.
    let grow: Vec<DevicePtr> = (0..8).map(|_| pool.alloc_raw(8 * MIB, &s).unwrap()).collect();
    for p in grow {
        rt.free_async(p, &s).unwrap();
    }
    pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
    let held = idle_windows(&rt, &pool, &s, window, 4);
    assert!(held >= 65 * MIB, "the threshold keeps it: {held}");
    // Off: nothing goes either.
    pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
    pool.set_idle_release(None).unwrap();
    assert_eq!(idle_windows(&rt, &pool, &s, window, 4), held);
    rt.free_async(keep, &s).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// Idle release waits while the pool grows: a pool that grows in every
/// window (a loop learning its steps) keeps what it holds; once it stops
/// growing for two windows, what it no longer needs goes back.
#[test]
fn idle_release_waits_while_the_pool_grows() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let window = Duration::from_millis(30);
    let pool = new_pool(&rt, 0);
    pool.set_idle_release(Some(window)).unwrap();
    let mut held = 0;
    let mut last: Option<DevicePtr> = None;
    for k in 1..=6u64 {
        std::thread::sleep(window + window / 2);
        // A larger block each window: the pool must grow.
        let p = pool.alloc_raw(k * 8 * MIB, &s).unwrap();
        if let Some(old) = last.replace(p) {
            rt.free_async(old, &s).unwrap();
        }
        let now = pool.stats().reserved_current;
        assert!(now >= held, "window {k}: reserved fell from {held} to {now} while the pool grew");
        held = now;
    }
    rt.free_async(last.take().unwrap(), &s).unwrap();
    let after = idle_windows(&rt, &pool, &s, window, 4);
    assert!(after <= held / 2, "reserved {after} of {held} after four windows without growth");
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
}

/// Idle release unmaps on the caller's thread and gives the physical
/// memory back on a worker thread (`pool/deferred.rs`): the pool's reserved
/// bytes drop at once; the next batch, right after, grows again (mapping
/// memory still queued to go back, or new) and its blocks hold what is
/// written; a live block keeps its data throughout; trim waits for the
/// worker, so that after it the pool has given back every byte it created
/// beyond what it holds.
#[test]
fn idle_release_gives_back_on_a_worker_and_trim_waits_for_it() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    pool.set_planning(false).unwrap();
    let keep = pool.alloc_raw(MIB, &s).unwrap();
    fill_u32(&rt, keep, MIB, 0x1d1e_0003, &s);
    s.synchronize().unwrap();
    let held_at_start = pool.stats().reserved_current;
    let start = pool.backend_calls().unwrap();
    pool.set_idle_release(Some(Duration::from_millis(100))).unwrap();
    let at = |ms: u64| pool.set_idle_clock(Some(Duration::from_millis(ms))).unwrap();
    for round in 0..4u64 {
        let t0 = round * 1000;
        at(t0);
        assert!(read_u32s(&rt, keep, MIB).iter().all(|&v| v == 0x1d1e_0003), "a live block keeps its data");
        // A batch of 512 MiB in four blocks, written and read back.
        let batch: Vec<DevicePtr> = (0..4).map(|_| pool.alloc_raw(128 * MIB, &s).unwrap()).collect();
        for (k, &p) in batch.iter().enumerate() {
            fill_u32(&rt, p, MIB, 0xba7c_0000 | (round as u32) << 8 | k as u32, &s);
            fill_u32(&rt, DevicePtr(p.0 + 127 * MIB), MIB, 0xe0d0_0000 | k as u32, &s);
        }
        s.synchronize().unwrap();
        for (k, &p) in batch.iter().enumerate() {
            let head = read_u32s(&rt, p, MIB);
            assert!(
                head.iter().all(|&v| v == 0xba7c_0000 | (round as u32) << 8 | k as u32),
                "round {round} block {k}"
            );
            let tail = read_u32s(&rt, DevicePtr(p.0 + 127 * MIB), MIB);
            assert!(tail.iter().all(|&v| v == 0xe0d0_0000 | k as u32), "round {round} block {k}'s end");
        }
        for p in batch {
            rt.free_async(p, &s).unwrap();
        }
        // Known complete, without the synchronization's own release.
        pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
        s.synchronize().unwrap();
        pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
        assert!(pool.stats().reserved_current >= 512 * MIB);
        // Two windows without growth, each ended by a small request (that
        // fits beside the live block): the batch's memory goes back at the
        // second.
        for (k, t) in [300, 600].into_iter().enumerate() {
            at(t0 + t);
            let p = pool.alloc_raw(64 * 1024 + (round * 2 + k as u64 + 1) * 4096, &s).unwrap();
            rt.free_async(p, &s).unwrap();
        }
        let after = pool.stats().reserved_current;
        assert_eq!(after, held_at_start, "round {round}: reserved after the idle release");
    }
    // Right after the last release (no synchronization, which waits too).
    pool.trim_to(0).unwrap();
    let end = pool.backend_calls().unwrap();
    let st = pool.stats();
    assert_eq!(st.reserved_current, held_at_start, "only the live block's memory stays");
    assert_eq!(
        end.bytes_created - start.bytes_created,
        end.bytes_released - start.bytes_released,
        "after trim every byte created since is given back: {start:?} -> {end:?}"
    );
    assert!(read_u32s(&rt, keep, MIB).iter().all(|&v| v == 0x1d1e_0003), "a live block keeps its data");
    rt.free_async(keep, &s).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// A large request (256 MiB or more, and at least 1/8 of the pool) that
/// fits no free run gives back the memory no block uses before the pool
/// grows for it, up to the request's size: the pool then holds what is live
/// and the new block, not also the free memory beside them. A live block in
/// the middle keeps its data; the release threshold still keeps memory; a
/// smaller request grows as before. A pool whose budget for moving memory
/// is spent does the same (it moved nothing and gave nothing back before).
#[test]
fn a_large_request_gives_back_unused_memory_before_the_pool_grows() {
    let rt = private_runtime();
    let s = stream0(&rt);
    // A budget for moving memory that is spent at once: such a pool grows,
    // and gives back first, as one that never moves does.
    let spent = MoveBudget { burst_s: 0.0, share: 1e-9 };
    // (threshold, first block, request, whether memory goes back first,
    // the budget)
    for (threshold, first, want, gives_back, budget) in [
        (0, 299 * MIB, 400 * MIB, true, MoveBudget::GROW_FIRST),
        (u64::MAX, 299 * MIB, 400 * MIB, false, MoveBudget::GROW_FIRST),
        (0, 149 * MIB, 200 * MIB, false, MoveBudget::GROW_FIRST),
        (0, 299 * MIB, 400 * MIB, true, spent),
    ] {
        let pool = new_pool(&rt, 0);
        if pool.mapping_unit().is_some() {
            pool.set_move_budget(budget).unwrap();
        }
        pool.set_planning(false).unwrap();
        // Each unit its own physical allocation (a group goes back only whole).
        if pool.mapping_unit().is_some() {
            pool.set_growth_mapping(0).unwrap();
        }
        pool.set_attribute(PoolAttribute::ReleaseThreshold, threshold).unwrap();
        // A block, then one in the free tail of its last unit that stays
        // live: the first, freed, cannot grow past it.
        let big = pool.alloc_raw(first, &s).unwrap();
        let pin = pool.alloc_raw(MIB / 2, &s).unwrap();
        fill_u32(&rt, pin, MIB / 2, 0x1a26_e001, &s);
        rt.free_async(big, &s).unwrap();
        let held = pool.stats().reserved_current;
        assert!(held >= first, "{held}");
        let next = pool.alloc_raw(want, &s).unwrap();
        fill_u32(&rt, next, want, 0x1a26_e002, &s);
        let st = pool.stats();
        if gives_back {
            assert!(
                st.reserved_current <= want + 8 * MIB,
                "reserved {} for {want} live bytes after giving back (held {held})",
                st.reserved_current
            );
            assert!(st.reserved_high <= held.max(st.reserved_current), "the peak is not both at once");
        } else {
            assert!(
                st.reserved_current >= held + want,
                "kept: reserved {} (held {held})",
                st.reserved_current
            );
        }
        assert_eq!(st.used_current, granules(MIB / 2) + want);
        s.synchronize().unwrap();
        assert!(
            read_u32s(&rt, pin, MIB / 2).iter().all(|&v| v == 0x1a26_e001),
            "a live block keeps its data"
        );
        let tail = read_u32s(&rt, DevicePtr(next.0 + want - MIB), MIB);
        assert!(tail.iter().all(|&v| v == 0x1a26_e002), "the new block holds what was written");
        rt.free_async(next, &s).unwrap();
        rt.free_async(pin, &s).unwrap();
        s.synchronize().unwrap();
        pool.check_invariants().unwrap();
        pool.destroy().unwrap();
    }
}

/// A large growth waits for its stream's frees (so that their memory goes
/// back before the pool grows) only where growing could take the pool past
/// its high watermark. Below it, the growth does not wait for the stream's
/// queued work (`MemPool::host_waits` stays): a free held behind a host
/// function stays pending, and its memory goes back once it completes.
/// Above it, the request returns only once the host function let the
/// stream go on.
#[test]
fn a_large_growth_waits_for_its_streams_frees_only_where_a_new_peak_is_at_stake() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::channel;
    let rt = private_runtime();
    let s = stream0(&rt);
    for below_peak in [true, false] {
        let pool = new_pool(&rt, 0);
        pool.set_planning(false).unwrap();
        // Each unit its own physical allocation (a group goes back only whole).
        if pool.mapping_unit().is_some() {
            pool.set_growth_mapping(0).unwrap();
        }
        pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
        if below_peak {
            // A peak of 1 GiB, given back (trim waits for the release
            // worker, which gives physical memory back off this thread;
            // without it, on CUDA, the request below waited for the held
            // stream).
            let peak = pool.alloc_raw(1024 * MIB, &s).unwrap();
            rt.free_async(peak, &s).unwrap();
            s.synchronize().unwrap();
            pool.trim_to(0).unwrap();
            assert!(pool.stats().reserved_current < 8 * MIB, "{:?}", pool.stats());
        }
        // A block, and one in the free tail of its last unit that stays
        // live; the first is freed behind a gate, so its free is pending.
        let first = pool.alloc_raw(299 * MIB, &s).unwrap();
        let pin = pool.alloc_raw(MIB / 2, &s).unwrap();
        fill_u32(&rt, pin, MIB / 2, 0x0617_e001, &s);
        let (open, gate) = channel::<()>();
        s.launch_host_func(move || {
            let _ = gate.recv();
        })
        .unwrap();
        rt.free_async(first, &s).unwrap();
        // The gate opens after `delay`, or at once when the request returns.
        let delay = if below_peak { Duration::from_secs(5) } else { Duration::from_millis(200) };
        let opened = Arc::new(AtomicBool::new(false));
        let (returned, until_returned) = channel::<()>();
        let opener = {
            let opened = Arc::clone(&opened);
            std::thread::spawn(move || {
                let _ = until_returned.recv_timeout(delay);
                opened.store(true, Ordering::SeqCst);
                let _ = open.send(());
            })
        };
        let waits_before = pool.host_waits().unwrap();
        let next = pool.alloc_raw(400 * MIB, &s).unwrap();
        let after_gate = opened.load(Ordering::SeqCst);
        let _ = returned.send(());
        opener.join().unwrap();
        // (Whether the request blocked is read from the pool's own count:
        // on a shared device other threads' driver calls may wait for the
        // held stream too, and the clock would blame the pool.)
        let waits = pool.host_waits().unwrap() - waits_before;
        assert_eq!(
            waits,
            u64::from(!below_peak),
            "below the high watermark: {below_peak}; the request waited for its stream {waits} times"
        );
        if !below_peak {
            assert!(after_gate, "the request returned before its stream's queued work was done");
        }
        fill_u32(&rt, next, 400 * MIB, 0x0617_e002, &s);
        s.synchronize().unwrap();
        // The free completed: its memory went back (release threshold 0).
        let st = pool.stats();
        assert_eq!(st.used_current, granules(MIB / 2) + 400 * MIB);
        assert!(st.reserved_current <= 400 * MIB + 8 * MIB, "{st:?}");
        if below_peak {
            assert!(st.reserved_high <= 1024 * MIB + 8 * MIB, "no new peak: {st:?}");
        }
        assert!(
            read_u32s(&rt, pin, MIB / 2).iter().all(|&v| v == 0x0617_e001),
            "a live block keeps its data"
        );
        let tail = read_u32s(&rt, DevicePtr(next.0 + 400 * MIB - MIB), MIB);
        assert!(tail.iter().all(|&v| v == 0x0617_e002), "the new block holds what was written");
        rt.free_async(next, &s).unwrap();
        rt.free_async(pin, &s).unwrap();
        s.synchronize().unwrap();
        pool.check_invariants().unwrap();
        pool.destroy().unwrap();
    }
}

/// Idle release on the caller's clock (`MemPool::set_idle_clock`, what
/// `hipmem replay` uses to replay a trace on its own time): wall time does
/// not count, the caller's does, a time earlier than the last counts as the
/// last; a peak left behind (more than twice what the last window needed)
/// goes back in part after one window without growth, the rest after two;
/// memory less than twice the last window's need waits two windows.
#[test]
fn idle_release_runs_on_the_callers_clock() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let window = Duration::from_millis(100);
    let pool = new_pool(&rt, 0);
    // Units alone in the first steps whatever HIPMEM_POOL_FIRST_PIECE_MIB
    // says (a pool on segments has no pieces): the figures below count
    // what goes back unit by unit.
    let _ = pool.set_first_steps_piece(0);
    pool.set_idle_release(Some(window)).unwrap();
    pool.set_idle_clock(Some(Duration::ZERO)).unwrap();
    // One slow-path request at `t` ms on the caller's clock, of a size not
    // seen before, freed at once; returns the reserved bytes after.
    let mut k = 0;
    let mut at = |t: u64| {
        pool.set_idle_clock(Some(Duration::from_millis(t))).unwrap();
        k += 1;
        let p = pool.alloc_raw(MIB + k * 4096, &s).unwrap();
        rt.free_async(p, &s).unwrap();
        pool.stats().reserved_current
    };
    let keep = pool.alloc_raw(MIB, &s).unwrap();
    fill_u32(&rt, keep, MIB, 0x1d1e_0002, &s);
    // A peak of 96 MiB, then one of 48 MiB a window later; both freed.
    let peak: Vec<DevicePtr> = (0..12).map(|_| pool.alloc_raw(8 * MIB, &s).unwrap()).collect();
    for p in peak {
        rt.free_async(p, &s).unwrap();
    }
    let held = at(0);
    assert!(held >= 97 * MIB, "{held}");
    // Wall time alone does nothing.
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(at(0), held, "the wall clock does not drive a pool on the caller's clock");
    let second: Vec<DevicePtr> = (0..6).map(|_| pool.alloc_raw(8 * MIB, &s).unwrap()).collect();
    assert_eq!(at(150), held, "the second window starts; no growth, but too soon");
    for p in second {
        rt.free_async(p, &s).unwrap();
    }
    // Known complete (on a GPU the frees complete long before the next
    // window of a real clock): a synchronization, with a threshold that
    // keeps everything, so that it releases nothing itself.
    pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
    s.synchronize().unwrap();
    pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
    // An earlier time counts as the last one.
    assert_eq!(at(20), held);
    // The pool looks at the end of each step of 25 ms (a quarter window),
    // at the first request after it. It grew before 150; at 260 it has not
    // grown for a window and holds more than twice what that window needed
    // (1 MiB): a peak left behind, so what is beyond half of the last two
    // windows' need (48 MiB, at 150) goes; at 370, two windows without
    // growth, what the last two windows did not need goes (the 48 MiB at
    // 150 is older).
    let reserved: Vec<u64> = [260, 370, 480, 590].into_iter().map(&mut at).collect();
    assert!(
        reserved[0] >= 24 * MIB && reserved[0] <= 32 * MIB,
        "a peak left behind: half of 48 MiB stays after one window: {reserved:?}"
    );
    assert!(reserved[1] <= 8 * MIB, "after two windows the rest goes: {reserved:?}");
    assert!(reserved[3] <= reserved[2] && reserved[2] <= reserved[1], "never grows back: {reserved:?}");
    assert_eq!(pool.stats().used_current, granules(MIB), "only the kept block is live");
    assert!(read_u32s(&rt, keep, MIB).iter().all(|&v| v == 0x1d1e_0002), "a live block keeps its data");
    // Not a peak left behind: 32 MiB live and 16 MiB freed, the pool grown
    // for them after 590 (seen at 700).
    let hold = pool.alloc_raw(32 * MIB, &s).unwrap();
    let extra = pool.alloc_raw(16 * MIB, &s).unwrap();
    rt.free_async(extra, &s).unwrap();
    pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
    s.synchronize().unwrap();
    pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
    let grown = at(700);
    assert!(grown >= 49 * MIB, "{grown}");
    // At 810, one window later, the pool holds less than twice what the
    // window needed (33 MiB): it waits; at 920, two windows, the 16 MiB
    // nothing needed go.
    let reserved: Vec<u64> = [810, 920, 1030].into_iter().map(&mut at).collect();
    assert_eq!(reserved[0], grown, "one window is not enough for memory in use: {reserved:?}");
    assert!(
        reserved[1] >= 33 * MIB && reserved[1] < grown && reserved[2] <= reserved[1],
        "after two windows what they needed stays: {reserved:?}"
    );
    assert!(read_u32s(&rt, keep, MIB).iter().all(|&v| v == 0x1d1e_0002), "a live block keeps its data");
    rt.free_async(hold, &s).unwrap();
    // Back on the wall clock: a new window starts, on wall time.
    pool.set_idle_clock(None).unwrap();
    rt.free_async(keep, &s).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// Idle release looks at the first request after a step of its windows
/// ends, also where the stream's cache serves that request: a run whose
/// first request after an idle gap is a size it just freed gives the idle
/// memory back then, not at its next request of another size.
#[test]
fn idle_release_looks_at_a_request_the_cache_serves() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    let _ = pool.set_first_steps_piece(0);
    pool.set_idle_release(Some(Duration::from_millis(100))).unwrap();
    let at = |ms: u64| pool.set_idle_clock(Some(Duration::from_millis(ms))).unwrap();
    at(0);
    let keep = pool.alloc_raw(MIB, &s).unwrap();
    fill_u32(&rt, keep, MIB, 0x1d1e_0003, &s);
    // A peak of 96 MiB at 0 ms, freed, the frees known complete (a
    // threshold that keeps everything, so that the synchronization
    // releases nothing itself).
    let peak: Vec<DevicePtr> = (0..12).map(|_| pool.alloc_raw(8 * MIB, &s).unwrap()).collect();
    for p in peak {
        rt.free_async(p, &s).unwrap();
    }
    pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
    s.synchronize().unwrap();
    pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
    // At 30 ms a request of a new size (the slow path: the pool sees its
    // growth), freed into the stream's cache.
    at(30);
    // (Larger than a tiny block: where tiny blocks are kept apart, the
    // default, a tiny one would grow the tiny blocks' part, and idle release
    // waits a step after any growth.)
    let small = 20 * 4096;
    let p = pool.alloc_raw(small, &s).unwrap();
    rt.free_async(p, &s).unwrap();
    let held = pool.stats().reserved_current;
    assert!(held >= 97 * MIB, "{held}");
    // A second later the same size again: the cache has it, and the idle
    // memory goes back first.
    at(1030);
    let q = pool.alloc_raw(small, &s).unwrap();
    let after = pool.stats().reserved_current;
    assert!(
        after <= 8 * MIB,
        "idle for ten windows, 96 MiB should have gone back at the request the cache served: {held} then {after} bytes held"
    );
    assert!(read_u32s(&rt, keep, MIB).iter().all(|&v| v == 0x1d1e_0003), "a live block keeps its data");
    rt.free_async(q, &s).unwrap();
    rt.free_async(keep, &s).unwrap();
    pool.set_idle_clock(None).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// On virtual memory idle release gives nothing back where all it could
/// give back is under 1/64 of what the pool holds: here one free unit,
/// while the rest of the pool is a growth of 128 MiB mapped in one call
/// that a small live block keeps from going back. A loop that needed the
/// unit again would pay driver calls to map it back, for a saving of under
/// 1.6%. Once the growth could go too, the unit goes.
#[test]
fn idle_release_keeps_what_is_too_little_to_give_back() {
    if std::env::var_os("HIPMEM_POOL_GROUP_MIB").is_some() {
        return;
    }
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    let Some(unit) = pool.mapping_unit().filter(|&u| u <= 2 * MIB) else {
        eprintln!(
            "idle_release_keeps_what_is_too_little_to_give_back: skipped, no virtual memory in units of 2 MiB"
        );
        return;
    };
    let _ = pool.set_first_steps_piece(0);
    pool.set_planning(false).unwrap();
    pool.set_idle_release(Some(Duration::from_millis(100))).unwrap();
    let at = |ms: u64| pool.set_idle_clock(Some(Duration::from_millis(ms))).unwrap();
    // (The frees known complete; a threshold that keeps everything, so that
    // the synchronization releases nothing itself.)
    let synchronize = || {
        pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
        s.synchronize().unwrap();
        pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
    };
    at(0);
    // A unit of its own; 127 MiB: one growth of 128 MiB in one mapping;
    // a small block in its free tail.
    let alone = pool.alloc_raw(unit, &s).unwrap();
    let large = pool.alloc_raw(127 * MIB, &s).unwrap();
    let pin = pool.alloc_raw(MIB / 2, &s).unwrap();
    fill_u32(&rt, pin, MIB / 2, 0x1d1e_0004, &s);
    let held = pool.stats().reserved_current;
    assert_eq!(held, 128 * MIB + unit, "{:?}", pool.stats());
    rt.free_async(large, &s).unwrap();
    rt.free_async(alone, &s).unwrap();
    synchronize();
    // Idle for ten windows, asked at two requests of new sizes: only the
    // unit could go (1/65 of the pool), and it stays.
    // (Larger than tiny blocks: kept apart, the default, those grow a part
    // of their own.)
    at(30);
    let p = pool.alloc_raw(20 * 4096, &s).unwrap();
    rt.free_async(p, &s).unwrap();
    at(1030);
    let p = pool.alloc_raw(22 * 4096, &s).unwrap();
    rt.free_async(p, &s).unwrap();
    assert_eq!(pool.stats().reserved_current, held, "too little to give back");
    // The small block freed: the growth could go too, so the unit goes.
    assert!(read_u32s(&rt, pin, MIB / 2).iter().all(|&v| v == 0x1d1e_0004), "a live block keeps its data");
    rt.free_async(pin, &s).unwrap();
    synchronize();
    for (k, ms) in [1100u64, 3100, 6100].into_iter().enumerate() {
        at(ms);
        let p = pool.alloc_raw((24 + 2 * k as u64) * 4096, &s).unwrap();
        rt.free_async(p, &s).unwrap();
    }
    // (The growth of 128 MiB stays: it goes back only whole, and the
    // requests' few KiB must be kept.)
    let after = pool.stats().reserved_current;
    assert_eq!(after, 128 * MIB, "the unit went with the rest: {held} then {after} bytes held");
    pool.set_idle_clock(None).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// A peak left behind goes back after one window, but a peak that the
/// pool gave back and then needed again (a loop that comes back to the same
/// largest batch) waits twice as long the next time, so that its memory is
/// not given back and mapped again every pass; after two windows without
/// growth it still goes. Live blocks keep their data throughout.
#[test]
fn a_peak_that_comes_back_is_kept_longer() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    let _ = pool.set_first_steps_piece(0);
    pool.set_planning(false).unwrap();
    pool.set_idle_release(Some(Duration::from_millis(100))).unwrap();
    pool.set_idle_clock(Some(Duration::ZERO)).unwrap();
    let keep = pool.alloc_raw(MIB, &s).unwrap();
    fill_u32(&rt, keep, MIB, 0x9ea4_0001, &s);
    // The frees are known complete (a synchronization with a threshold
    // that keeps everything, so that it releases nothing itself).
    let complete = || {
        pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
        s.synchronize().unwrap();
        pool.set_attribute(PoolAttribute::ReleaseThreshold, 0).unwrap();
    };
    let mut k = 0;
    // One small request of a size not seen before at `t` ms; the reserved
    // bytes after it.
    let mut at = |t: u64| {
        pool.set_idle_clock(Some(Duration::from_millis(t))).unwrap();
        k += 1;
        let p = pool.alloc_raw(64 * 1024 + k * 4096, &s).unwrap();
        rt.free_async(p, &s).unwrap();
        pool.stats().reserved_current
    };
    // The same peak (96 MiB) every 400 ms; small requests every 25 ms.
    let mut seen = Vec::new();
    for round in 0..2u64 {
        let t0 = round * 400;
        pool.set_idle_clock(Some(Duration::from_millis(t0))).unwrap();
        let peak: Vec<DevicePtr> = (0..12).map(|_| pool.alloc_raw(8 * MIB, &s).unwrap()).collect();
        for (i, &p) in peak.iter().enumerate() {
            fill_u32(&rt, p, MIB, 0x9ea4_1000 | (round as u32) << 8 | i as u32, &s);
        }
        s.synchronize().unwrap();
        for (i, &p) in peak.iter().enumerate() {
            let v = read_u32s(&rt, p, MIB);
            assert!(
                v.iter().all(|&x| x == 0x9ea4_1000 | (round as u32) << 8 | i as u32),
                "round {round} block {i}"
            );
        }
        for p in peak {
            rt.free_async(p, &s).unwrap();
        }
        complete();
        let reserved: Vec<u64> = (1..16).map(|i| at(t0 + 25 * i)).collect();
        seen.push(reserved);
    }
    let (first, second) = (&seen[0], &seen[1]);
    // Round 0: the peak goes back (at least half of it) one window after
    // the growth was seen (at 25 ms): by 150 ms.
    assert!(first[0] >= 96 * MIB, "the peak is held at first: {first:?}");
    assert!(first[5] <= 56 * MIB, "a peak left behind goes back after one window: {first:?}");
    // Round 1: the same peak came back; one window after, it is still held.
    assert!(second[5] >= 96 * MIB, "a peak that came back waits longer: {second:?}");
    // Two windows without growth: it goes all the same.
    assert!(second[14] <= 8 * MIB, "after two windows it goes: {second:?}");
    assert!(read_u32s(&rt, keep, MIB).iter().all(|&v| v == 0x9ea4_0001), "a live block keeps its data");
    pool.set_idle_clock(None).unwrap();
    rt.free_async(keep, &s).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// Zone placement (`MemPool::set_zone_placement`): off by default, refused
/// where the pool cannot have it, and with it on, steps whose sizes vary
/// keep every block's data while the pool learns which blocks are live at
/// each step's largest one and packs them; the statistics stay exact and
/// the largest blocks of the later steps come right after the blocks live
/// across them.
#[test]
fn zone_placement_packs_the_blocks_live_at_each_steps_largest_and_keeps_data() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    assert!(!pool.zone_placement(), "off by default");
    if pool.backing() != hipmem::PoolBacking::VirtualMemory {
        expect_err(pool.set_zone_placement(true), 801, &["virtual memory"]);
        return;
    }
    let segments =
        MemPool::create_with_backing(&rt, PoolProps::default(), hipmem::PoolBacking::Segments).unwrap();
    expect_err(segments.set_zone_placement(true), 801, &["virtual memory"]);
    segments.set_zone_placement(false).unwrap();
    // The stream's slot exists before zone placement turns on (its frees
    // must then reach the zone all the same).
    let early = pool.alloc_raw(MIB, &s).unwrap();
    rt.free_async(early, &s).unwrap();
    s.synchronize().unwrap();
    pool.set_zone_placement(true).unwrap();
    assert!(pool.zone_placement());
    // Long-lived blocks first (a model's weights).
    let weights: Vec<DevicePtr> = (0..4).map(|_| pool.alloc_raw(2 * MIB, &s).unwrap()).collect();
    for (i, &w) in weights.iter().enumerate() {
        fill_u32(&rt, w, 2 * MIB, 0x3e00_0000 + i as u32, &s);
    }
    // Steps of 24 allocations; counts 6 and 15 live across the largest (at
    // 20), whose size changes from step to step.
    for step in 0..10u32 {
        let scale = 1 + u64::from(step % 3);
        let mut live: Vec<(DevicePtr, u64, u32)> = Vec::new();
        for i in 0..24u32 {
            let size = if i == 20 { 16 * MIB * scale } else { MIB * scale / 2 + u64::from(i) * 4096 };
            let p = pool.alloc_raw(size, &s).unwrap();
            let tag = (step << 16) | i;
            fill_u32(&rt, p, size & !3, tag, &s);
            if i == 6 || i == 15 || i >= 20 {
                live.push((p, size, tag));
            } else {
                s.synchronize().unwrap();
                assert!(read_u32s(&rt, p, size & !3).iter().all(|&v| v == tag), "step {step} block {i}");
                rt.free_async(p, &s).unwrap();
            }
        }
        if step >= 6 {
            // Learned: the largest block lies above the two blocks live
            // across it, within what those two and their alignment take.
            let big = live.iter().find(|&&(_, _, t)| t & 0xffff == 20).unwrap().0.0;
            let kept: Vec<u64> =
                live.iter().filter(|&&(_, _, t)| t & 0xffff < 20).map(|&(p, _, _)| p.0).collect();
            assert!(
                kept.iter().all(|&k| k < big && big - k < 4 * MIB * scale),
                "step {step}: {kept:x?} then {big:#x}"
            );
        }
        s.synchronize().unwrap();
        for (p, size, tag) in live {
            assert!(read_u32s(&rt, p, size & !3).iter().all(|&v| v == tag), "step {step}: tag {tag:#x}");
            rt.free_async(p, &s).unwrap();
        }
        s.synchronize().unwrap();
        assert_eq!(
            pool.stats().used_current,
            granules(2 * MIB) * 4,
            "step {step}: only the weights are live"
        );
    }
    s.synchronize().unwrap();
    for (i, &w) in weights.iter().enumerate() {
        assert!(read_u32s(&rt, w, 2 * MIB).iter().all(|&v| v == 0x3e00_0000 + i as u32), "weights {i}");
        rt.free_async(w, &s).unwrap();
    }
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
    // Off again: it forgets, and the pool places as before.
    pool.set_zone_placement(false).unwrap();
    assert!(!pool.zone_placement());
    let p = pool.alloc_raw(MIB, &s).unwrap();
    rt.free_async(p, &s).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}
