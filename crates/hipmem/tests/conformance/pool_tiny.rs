//! A pool on virtual memory keeps its tiny blocks (16 KiB or less) apart by
//! default (`MemPool::set_tiny_blocks_apart`): in a part of its addresses of
//! their own, and in each stream's cache of tiny blocks, which a request of
//! another size does not send back to the heap (a tiny block taken from it
//! sends the stream's larger cached blocks back, as a miss would). These tests check what a
//! user can see of that: where the blocks go, that a cached block serves
//! only its own stream, that data and statistics stay exact, and that a
//! trim gives everything back.

use hipmem::pool::layout::RunKind;
use hipmem::{DevicePtr, MemPool, MoveBudget, PoolBacking, PoolProps, Runtime};

use crate::pools::{fill_u32, granules, read_u32s, stream0};
use crate::private_runtime;

/// `pool_remap.rs`'s pool on virtual memory (it keeps what it holds at
/// synchronization), keeping one heap (the default budget); None (with a
/// note) where the backend has no virtual memory.
fn vmm_pool(rt: &Runtime, test: &str, tiny_apart: bool) -> Option<MemPool> {
    let pool = crate::pool_remap::vmm_pool(rt, test)?;
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    pool.set_tiny_blocks_apart(tiny_apart).unwrap();
    assert_eq!(pool.tiny_blocks_apart(), Some(tiny_apart));
    Some(pool)
}

/// What the pool's address map says lies at `at`.
fn kind_at(pool: &MemPool, at: DevicePtr) -> RunKind {
    let runs = pool.address_runs().unwrap();
    runs.iter().find(|r| r.start <= at.0 && at.0 < r.end()).map(|r| r.kind).expect("an address of the pool")
}

#[test]
fn tiny_blocks_kept_apart_have_addresses_and_a_cache_of_their_own() {
    let test = "tiny_blocks_kept_apart_have_addresses_and_a_cache_of_their_own";
    let rt = private_runtime();
    let (Some(apart), Some(together)) = (vmm_pool(&rt, test, true), vmm_pool(&rt, test, false)) else {
        return;
    };
    let s = stream0(&rt);
    let unit = apart.mapping_unit().unwrap();
    // Half a unit, then 4 KiB. Kept together, the tiny block takes the
    // rest of the first block's unit; kept apart, a unit in its own part.
    let mut blocks = Vec::new();
    for pool in [&together, &apart] {
        let half = pool.alloc_raw(unit / 2, &s).unwrap();
        let held = pool.stats().reserved_current;
        assert_eq!(held, unit, "one unit for half a unit");
        let tiny = pool.alloc_raw(4096, &s).unwrap();
        blocks.push((half, tiny, pool.stats().reserved_current - held));
    }
    let ((t_half, t_tiny, t_grew), (half, tiny, grew)) = (blocks[0], blocks[1]);
    assert_eq!(t_grew, 0, "kept together: the tiny block shares the unit");
    assert!(t_half.0 < t_tiny.0 && t_tiny.0 < t_half.0 + unit);
    assert_eq!(grew, unit, "kept apart: a unit of its own");
    assert!(tiny.0.abs_diff(half.0) >= unit, "{tiny:?} lies apart from {half:?}");
    for pool in [&together, &apart] {
        crate::expect_err(pool.set_tiny_blocks_apart(true), 1, &["mapped memory"]);
    }

    // Freed, the tiny block stays in its stream's cache over a request of
    // another size (which sends the stream's other cached blocks back),
    // and the stream's next request of its size takes it again.
    fill_u32(&rt, tiny, 4096, 0x7171_7171, &s);
    rt.free_async(tiny, &s).unwrap();
    let big = apart.alloc_raw(3 * unit, &s).unwrap();
    assert_eq!(kind_at(&apart, tiny), RunKind::Cached, "kept over the miss");
    // Another stream does not get it.
    let s2 = stream0(&rt);
    let other = apart.alloc_raw(4096, &s2).unwrap();
    assert_ne!(other, tiny, "a cached block serves its own stream only");
    let again = apart.alloc_raw(4096, &s).unwrap();
    assert_eq!(again, tiny, "the stream's next request of its size takes it");
    assert_eq!(kind_at(&apart, tiny), RunKind::Live);
    // The data written before the free is the block's own to keep or not;
    // new data lands where it should and stays beside the others'.
    fill_u32(&rt, again, 4096, 0x5a5a_5a5a, &s);
    fill_u32(&rt, other, 4096, 0x0707_0707, &s2);
    fill_u32(&rt, big, 3 * unit, 0xb1b1_b1b1, &s);
    s.synchronize().unwrap();
    s2.synchronize().unwrap();
    assert!(read_u32s(&rt, again, 4096).iter().all(|&x| x == 0x5a5a_5a5a));
    assert!(read_u32s(&rt, other, 4096).iter().all(|&x| x == 0x0707_0707));
    assert!(read_u32s(&rt, DevicePtr(big.0 + 3 * unit - 4096), 4096).iter().all(|&x| x == 0xb1b1_b1b1));

    // The statistics count blocks, cached or not.
    let used = apart.stats().used_current;
    assert_eq!(used, granules(unit / 2) + granules(4096) * 2 + granules(3 * unit));
    for (p, st) in [(again, &s), (other, &s2), (big, &s), (half, &s)] {
        rt.free_async(p, st).unwrap();
    }
    assert_eq!(apart.stats().used_current, 0);
    assert_eq!(kind_at(&apart, tiny), RunKind::Cached);
    // A trim sends every cache back first: nothing stays held.
    s.synchronize().unwrap();
    s2.synchronize().unwrap();
    apart.trim_to(0).unwrap();
    let stats = apart.stats();
    assert_eq!((stats.used_current, stats.reserved_current), (0, 0), "everything went back");
    for p in [t_half, t_tiny] {
        rt.free_async(p, &s).unwrap();
    }
    s.synchronize().unwrap();
    together.trim_to(0).unwrap();
    assert_eq!(together.stats().reserved_current, 0);
    apart.destroy().unwrap();
    together.destroy().unwrap();
}

#[test]
fn keeping_tiny_blocks_apart_is_a_setting_of_pools_on_virtual_memory() {
    let rt = private_runtime();
    let segments = MemPool::create_with_backing(&rt, PoolProps::default(), PoolBacking::Segments).unwrap();
    assert_eq!(segments.tiny_blocks_apart(), None);
    crate::expect_err(segments.set_tiny_blocks_apart(true), 1, &["segments"]);
    segments.destroy().unwrap();
}

/// New pools on virtual memory keep their tiny blocks apart (stop 78),
/// unless `HIPMEM_POOL_TINY_APART=0` says otherwise.
#[test]
fn new_pools_keep_tiny_blocks_apart_unless_told_not_to() {
    let rt = private_runtime();
    let pool = MemPool::create_with_backing(&rt, PoolProps::default(), PoolBacking::VirtualMemory).unwrap();
    if pool.backing() == PoolBacking::VirtualMemory {
        let off = std::env::var("HIPMEM_POOL_TINY_APART").is_ok_and(|v| v == "0");
        assert_eq!(pool.tiny_blocks_apart(), Some(!off));
    } else {
        assert_eq!(pool.tiny_blocks_apart(), None);
    }
    pool.destroy().unwrap();
}

/// A tiny block taken from the stream's cache of tiny blocks sends the
/// stream's larger cached blocks back to the heap, as the request would
/// have as a miss without that cache: the larger blocks then land where
/// they would in a pool without it (replayed, the cache had moved the
/// variable-length recordings' peaks up or down by where large blocks
/// landed: docs/pool-measurements.md, "Stop 78"). A larger block taken
/// from the cache leaves the tiny ones cached.
#[test]
fn a_tiny_block_from_its_cache_sends_the_larger_cached_blocks_back() {
    let test = "a_tiny_block_from_its_cache_sends_the_larger_cached_blocks_back";
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, test, true) else {
        return;
    };
    let s = stream0(&rt);
    let unit = pool.mapping_unit().unwrap();
    let tiny = pool.alloc_raw(4096, &s).unwrap();
    let big = pool.alloc_raw(unit / 2, &s).unwrap();
    fill_u32(&rt, big, unit / 2, 0x7878_7878, &s);
    rt.free_async(tiny, &s).unwrap();
    rt.free_async(big, &s).unwrap();
    assert_eq!((kind_at(&pool, tiny), kind_at(&pool, big)), (RunKind::Cached, RunKind::Cached));
    let again = pool.alloc_raw(4096, &s).unwrap();
    assert_eq!(again, tiny, "the cache of tiny blocks serves the tiny request");
    let back = kind_at(&pool, big);
    assert!(
        matches!(back, RunKind::PendingFree | RunKind::Free),
        "the larger cached block went back to the heap, not {back:?}"
    );
    // A larger block taken from the cache leaves the tiny ones there.
    rt.free_async(again, &s).unwrap();
    let big2 = pool.alloc_raw(unit / 2, &s).unwrap();
    rt.free_async(big2, &s).unwrap();
    let big3 = pool.alloc_raw(unit / 2, &s).unwrap();
    assert_eq!(big3, big2, "the stream's cache serves its own size");
    assert_eq!(kind_at(&pool, tiny), RunKind::Cached, "the tiny block stays cached");
    fill_u32(&rt, big3, unit / 2, 0x5656_5656, &s);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, big3, unit / 2).iter().all(|&x| x == 0x5656_5656));
    assert_eq!(pool.stats().used_current, granules(unit / 2));
    rt.free_async(big3, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0, "a trim gives everything back");
    pool.destroy().unwrap();
}
