//! A pool on virtual memory reuses physical memory before it creates more:
//! when a request finds no free run of its size, granules that hold no live
//! byte elsewhere are mapped under it (and switched between their addresses
//! as the layout changes). These tests check what a user can see of that:
//! reserved memory follows the peak of live memory rather than the history
//! of where blocks fell, live blocks keep their data while the memory around
//! them moves (several streams and threads), the statistics stay exact, and
//! trim and the release threshold still release exactly what they promise.
//! A backend without virtual memory has pools on segments: the tests say so
//! and skip what does not apply.

use hipmem::{DevicePtr, MemPool, MoveBudget, PoolAttribute, PoolBacking, PoolProps, Runtime, Stream};

use crate::pool_stats::Rng;
use crate::pools::{MIB, fill_u32, granules, read_u32s, stream0};
use crate::private_runtime;

/// A pool on virtual memory that keeps what it holds at synchronization and
/// moves memory whenever that keeps it smaller; None (with a note) where the
/// backend has no virtual memory. Its tiny blocks share the heap whatever
/// `HIPMEM_POOL_TINY_APART` says: these tests place small blocks on purpose
/// (`pool_tiny.rs` tests the setting).
pub fn vmm_pool(rt: &Runtime, test: &str) -> Option<MemPool> {
    let props = PoolProps { device: 0, handle_types: 0, max_size: 0 };
    let pool = MemPool::create_with_backing(rt, props, PoolBacking::VirtualMemory).unwrap();
    if pool.backing() != PoolBacking::VirtualMemory {
        eprintln!("{test}: skipped, the {} backend has no virtual memory", rt.backend_kind());
        return None;
    }
    pool.set_tiny_blocks_apart(false).unwrap();
    pool.set_release_threshold(u64::MAX);
    pool.set_move_budget(MoveBudget::LEAST_MEMORY).unwrap();
    Some(pool)
}

#[test]
fn a_moving_budget_is_checked() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "a_moving_budget_is_checked") else { return };
    for bad in [MoveBudget { burst_s: -1.0, share: 0.0 }, MoveBudget { burst_s: 0.0, share: 1.5 }] {
        crate::expect_err(pool.set_move_budget(bad), 1, &["budget"]);
    }
    crate::expect_err(pool.set_move_budget(MoveBudget { burst_s: f64::NAN, share: 0.0 }), 1, &["budget"]);
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let segments = MemPool::create_with_backing(&rt, PoolProps::default(), PoolBacking::Segments).unwrap();
    crate::expect_err(segments.set_move_budget(MoveBudget::LEAST_MEMORY), 1, &["segments"]);
}

/// The driver's mapping granularity on device 0 (sizes of the data-heavy
/// tests scale with it, not with the pool's larger unit).
fn granularity(rt: &Runtime) -> u64 {
    hipmem::PhysicalAllocation::granularity(&rt.device(0).unwrap()).unwrap()
}

/// The pool's physical unit (a multiple of the mapping granularity).
fn unit(pool: &MemPool) -> u64 {
    pool.mapping_unit().expect("a pool on virtual memory has a mapping unit")
}

/// Live bytes rounded up to whole granules, block by block: the physical
/// memory a perfect pool needs for them (each block at least touches its own
/// granules; small blocks may share one).
fn granule_footprint(blocks: &[(DevicePtr, u64)], g: u64) -> u64 {
    let mut granules: Vec<u64> = Vec::new();
    for &(p, n) in blocks {
        let first = p.0 / g;
        let last = (p.0 + granules_of(n) - 1) / g;
        granules.extend(first..=last);
    }
    granules.sort_unstable();
    granules.dedup();
    granules.len() as u64 * g
}

fn granules_of(n: u64) -> u64 {
    granules(n)
}

/// Phases that want the same memory in different shapes: many medium blocks,
/// then one large block, then the medium blocks again. The large block is
/// backed by the medium blocks' memory, so the pool holds about the largest
/// phase's memory, not the sum.
#[test]
fn reserved_memory_follows_the_peak_of_live_memory_across_phases() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "reserved_memory_follows_the_peak_of_live_memory_across_phases") else {
        return;
    };
    let g = unit(&pool);
    let s = stream0(&rt);
    let medium = 3 * g / 2;
    for round in 0..3 {
        let blocks: Vec<DevicePtr> = (0..16).map(|_| pool.alloc_raw(medium, &s).unwrap()).collect();
        for &p in &blocks {
            fill_u32(&rt, p, medium, 0x5555_0000 | round, &s);
        }
        for p in blocks {
            rt.free_async(p, &s).unwrap();
        }
        s.synchronize().unwrap();
        let large = pool.alloc_raw(32 * g, &s).unwrap();
        fill_u32(&rt, large, 32 * g, 0x6666_0000 | round, &s);
        s.synchronize().unwrap();
        assert!(read_u32s(&rt, large, 32 * g).iter().all(|&w| w == 0x6666_0000 | round));
        rt.free_async(large, &s).unwrap();
        s.synchronize().unwrap();
    }
    let st = pool.stats();
    // The medium phase needs 24 granules (16 blocks of 1.5), the large one
    // 32; a pool that only grew would hold 56 or more.
    assert!(
        st.reserved_high <= 34 * g,
        "the pool holds {} granules at most; the largest phase needs 32 ({st:?})",
        st.reserved_high / g
    );
    assert_eq!(st.used_current, 0);
    pool.check_invariants().unwrap();
}

/// Random allocations and frees on three streams and two threads, each block
/// filled with its own pattern, while phases of different sizes make the
/// pool move memory between addresses: every live block keeps its pattern,
/// blocks never overlap, and the statistics stay exact; at every sampling
/// point reserved memory is within a few granules of the granules the live
/// blocks touch.
#[test]
fn live_blocks_keep_their_data_while_memory_moves_under_the_rest() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "live_blocks_keep_their_data_while_memory_moves_under_the_rest") else {
        return;
    };
    let g = granularity(&rt);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2u32)
            .map(|thread| {
                let rt = rt.clone();
                let pool = pool.clone();
                scope.spawn(move || -> Result<(), String> {
                    let streams: Vec<Stream> = (0..3).map(|_| stream0(&rt)).collect();
                    let mut rng = Rng(0x51ab_1e5e_ed00_0001 ^ ((thread as u64 + 1) << 40));
                    let mut live: Vec<(DevicePtr, u64, u32, usize)> = Vec::new();
                    let mut pattern = 0x0100_0000u32 * (thread + 1);
                    for phase in 0..12u64 {
                        // Alternate small and large shapes.
                        let (lo, hi) = if phase % 2 == 0 { (g / 8, 2 * g) } else { (3 * g, 9 * g) };
                        for _ in 0..24 {
                            if live.len() < 10 || rng.below(3) != 0 {
                                let bytes = (lo + rng.below(hi - lo)).next_multiple_of(4);
                                let si = rng.below(3) as usize;
                                let p = pool.alloc_raw(bytes, &streams[si]).map_err(|e| e.to_string())?;
                                pattern = pattern.wrapping_add(1);
                                fill_u32(&rt, p, bytes, pattern, &streams[si]);
                                live.push((p, bytes, pattern, si));
                            } else {
                                let (p, _, _, si) = live.swap_remove(rng.below(live.len() as u64) as usize);
                                rt.free_async(p, &streams[si]).map_err(|e| e.to_string())?;
                            }
                        }
                        // Frees complete: their memory may move now.
                        for s in &streams {
                            s.synchronize().map_err(|e| e.to_string())?;
                        }
                        for &(p, bytes, want, _) in &live {
                            let words = read_u32s(&rt, p, bytes);
                            if let Some(i) = words.iter().position(|&w| w != want) {
                                return Err(format!(
                                    "thread {thread} phase {phase}: block {p} holds {:#x} at word {i}, expected {want:#x}",
                                    words[i]
                                ));
                            }
                        }
                        // Free most of them so the next shape needs the memory.
                        while live.len() > 4 {
                            let (p, _, _, si) = live.swap_remove(rng.below(live.len() as u64) as usize);
                            rt.free_async(p, &streams[si]).map_err(|e| e.to_string())?;
                        }
                    }
                    for (p, _, _, si) in live {
                        rt.free_async(p, &streams[si]).map_err(|e| e.to_string())?;
                    }
                    for s in &streams {
                        s.synchronize().map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a thread panicked").unwrap();
        }
    });
    pool.check_invariants().unwrap();
    let st = pool.stats();
    assert_eq!(st.used_current, 0, "{st:?}");
    assert!(st.used_high > 0 && st.used_high <= st.reserved_high, "{st:?}");
    let _ = g;
}

/// One thread, exact accounting: after each phase the pool's used bytes are
/// the live blocks' and its reserved bytes are within two granules per size
/// class of the granules the live blocks touch (nothing else is held once
/// frees are complete and the pool is trimmed to what it uses).
#[test]
fn statistics_stay_exact_and_trim_releases_what_no_block_uses() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "statistics_stay_exact_and_trim_releases_what_no_block_uses") else {
        return;
    };
    let g = unit(&pool);
    let s = stream0(&rt);
    let mut rng = Rng(0x7e57_0000_0000_0042);
    let mut live: Vec<(DevicePtr, u64)> = Vec::new();
    for phase in 0..8u64 {
        let (lo, hi) = if phase % 2 == 0 { (4096, g) } else { (2 * g, 7 * g) };
        for _ in 0..16 {
            let bytes = lo + rng.below(hi - lo);
            live.push((pool.alloc_raw(bytes, &s).unwrap(), bytes));
        }
        while live.len() > 6 {
            let (p, _) = live.swap_remove(rng.below(live.len() as u64) as usize);
            rt.free_async(p, &s).unwrap();
        }
        s.synchronize().unwrap();
        let st = pool.stats();
        let used: u64 = live.iter().map(|&(_, n)| granules(n)).sum();
        assert_eq!(st.used_current, used, "phase {phase}: {st:?}");
        pool.trim_to(0).unwrap();
        let st = pool.stats();
        let footprint = granule_footprint(&live, g);
        assert_eq!(
            st.reserved_current, footprint,
            "phase {phase}: after a trim the pool holds exactly the granules the live blocks touch ({st:?})"
        );
        pool.check_invariants().unwrap();
    }
    for (p, _) in live {
        rt.free_async(p, &s).unwrap();
    }
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0, "an empty pool trimmed to 0 holds nothing");
    // The release threshold keeps at most that much unused at synchronization.
    pool.set_attribute(PoolAttribute::ReleaseThreshold, 3 * g).unwrap();
    let blocks: Vec<DevicePtr> = (0..8).map(|_| pool.alloc_raw(g, &s).unwrap()).collect();
    for p in blocks {
        rt.free_async(p, &s).unwrap();
    }
    s.synchronize().unwrap();
    let st = pool.stats();
    assert!(
        st.reserved_current <= 3 * g,
        "threshold of 3 granules, {} held ({st:?})",
        st.reserved_current / g
    );
    pool.check_invariants().unwrap();
    let _ = MIB;
}

/// Many threads allocating random sizes, writing and checking them, and now
/// and then freeing on another thread's stream after an event: with plenty of
/// device memory, no allocation fails (an allocation that can be satisfied by
/// waiting or reclaiming must not be OutOfMemory).
#[test]
fn concurrent_allocations_that_fit_never_fail() {
    let rt = private_runtime();
    // A pool as hipMallocAsync's default is: default unit, release threshold 0.
    let pool = MemPool::create(&rt, PoolProps::default()).unwrap();
    let dev = rt.device(0).unwrap();
    // Longer runs: HIPMEM_STRESS_THREADS / HIPMEM_STRESS_CYCLES.
    let env =
        |name: &str, default: u32| std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let threads = env("HIPMEM_STRESS_THREADS", 8);
    let cycles = env("HIPMEM_STRESS_CYCLES", 300);
    let streams: Vec<Stream> = (0..threads).map(|_| stream0(&rt)).collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let rt = rt.clone();
                let pool = pool.clone();
                let dev = dev.clone();
                let streams = streams.clone();
                scope.spawn(move || -> Result<(), String> {
                    let mine = &streams[thread as usize];
                    let mut rng = Rng(0xc0ff_ee00_0000_0001 ^ ((thread as u64 + 7) << 33));
                    for cycle in 0..cycles {
                        let bytes = (1 + rng.below(8 * MIB - 1)).next_multiple_of(4);
                        let p = pool
                            .alloc_raw(bytes, mine)
                            .map_err(|e| format!("thread {thread} cycle {cycle}: {bytes} bytes: {e}"))?;
                        let pattern = (thread << 24) | cycle;
                        let words = (bytes / 4).min(1024) * 4;
                        fill_u32(&rt, p, words, pattern, mine);
                        mine.synchronize().map_err(|e| e.to_string())?;
                        let back = read_u32s(&rt, p, words);
                        if back.iter().any(|&w| w != pattern) {
                            return Err(format!("thread {thread} cycle {cycle}: data lost"));
                        }
                        if cycle % 8 == 0 {
                            // Free on another thread's stream, after an event.
                            let other = &streams[((thread + 1) % threads) as usize];
                            let ev = dev.create_event().map_err(|e| e.to_string())?;
                            ev.record(mine).map_err(|e| e.to_string())?;
                            other.wait_event(&ev).map_err(|e| e.to_string())?;
                            rt.free_async(p, other).map_err(|e| e.to_string())?;
                        } else {
                            rt.free_async(p, mine).map_err(|e| e.to_string())?;
                        }
                    }
                    mine.synchronize().map_err(|e| e.to_string())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a thread panicked").unwrap();
        }
    });
    for s in &streams {
        s.synchronize().unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.stats().used_current, 0);
}

/// A pool that only grows may map a large growth as one physical
/// allocation (one create, one map, one access call): its data is intact,
/// its statistics exact, and it goes back to the backend only whole, when
/// every unit of it is free.
#[test]
fn a_large_growth_is_one_mapping_released_only_whole() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "a_large_growth_is_one_mapping_released_only_whole") else { return };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let u = unit(&pool);
    pool.set_growth_mapping(8 * u).unwrap();
    assert_eq!(pool.growth_mapping(), Some(8 * u));
    let s = stream0(&rt);
    let before = pool.backend_calls().unwrap();
    // Ten units in one growth: one group.
    let big = pool.alloc_raw(10 * u, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.granules_created - before.granules_created, 1, "one physical allocation");
    assert_eq!(after.maps - before.maps, 1, "one mapping");
    assert_eq!(pool.stats().reserved_current, 10 * u);
    fill_u32(&rt, big, 10 * u, 0x5a5a_0001, &s);
    // A small request grows by one unit, alone.
    let small = pool.alloc_raw(u / 2, &s).unwrap();
    fill_u32(&rt, small, u / 2, 0x5a5a_0002, &s);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, big, 10 * u).iter().all(|&v| v == 0x5a5a_0001));
    assert!(read_u32s(&rt, small, u / 2).iter().all(|&v| v == 0x5a5a_0002));
    assert_eq!(pool.stats().reserved_current, 11 * u);
    // One unit of the group in use: the group stays; the lone unit goes.
    rt.free_async(big, &s).unwrap();
    let inside = pool.alloc_raw(u, &s).unwrap();
    rt.free_async(small, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 10 * u, "a group goes back only whole");
    assert_eq!(pool.stats().used_current, granules(u));
    rt.free_async(inside, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let st = pool.stats();
    assert_eq!((st.reserved_current, st.used_current), (0, 0));
    let end = pool.backend_calls().unwrap();
    assert_eq!(end.granules_released - before.granules_released, 2, "the group and the lone unit");
    pool.check_invariants().unwrap();
    // Off again: each unit alone.
    pool.set_growth_mapping(0).unwrap();
    let before = pool.backend_calls().unwrap();
    let big = pool.alloc_raw(10 * u, &s).unwrap();
    assert_eq!(pool.backend_calls().unwrap().granules_created - before.granules_created, 10);
    rt.free_async(big, &s).unwrap();
    s.synchronize().unwrap();
}

/// In its first steps a pool that only grows maps a growth of several units
/// one physical allocation per unit by default; with
/// [`MemPool::set_first_steps_piece`] it cuts the growth into pieces of
/// powers of two units up to the piece, one physical allocation, one
/// mapping each (fewer driver calls), the data intact, and a piece goes
/// back only whole.
#[test]
fn first_steps_growths_are_cut_into_pieces_when_asked() {
    if ["HIPMEM_POOL_FIRST_PIECE_MIB", "HIPMEM_POOL_FIRST_STEPS"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
    {
        return;
    }
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "first_steps_growths_are_cut_into_pieces_when_asked") else { return };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let u = unit(&pool);
    let s = stream0(&rt);
    // By default: one physical allocation per unit.
    let before = pool.backend_calls().unwrap();
    let a = pool.alloc_raw(7 * u, &s).unwrap();
    assert_eq!(pool.backend_calls().unwrap().granules_created - before.granules_created, 7);
    rt.free_async(a, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0);
    crate::expect_err(pool.set_first_steps_piece(u64::MAX), 1, &["piece"]);
    // Pieces of at most four units: eleven units are 4 + 4 + 2 + 1.
    pool.set_first_steps_piece(4 * u).unwrap();
    let before = pool.backend_calls().unwrap();
    let big = pool.alloc_raw(11 * u, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.granules_created - before.granules_created, 4, "four physical allocations");
    assert_eq!(after.maps - before.maps, 4, "four mappings");
    assert_eq!(pool.stats().reserved_current, 11 * u);
    let mut sizes: Vec<u64> = pool.physical_pieces().unwrap().iter().map(|p| p.size).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![u, 2 * u, 4 * u, 4 * u]);
    fill_u32(&rt, big, 11 * u, 0x5a5a_0011, &s);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, big, 11 * u).iter().all(|&v| v == 0x5a5a_0011));
    // One unit in use again: its piece stays, the others go back.
    rt.free_async(big, &s).unwrap();
    let inside = pool.alloc_raw(u, &s).unwrap();
    fill_u32(&rt, inside, u, 0x5a5a_0012, &s);
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let pieces = pool.physical_pieces().unwrap();
    assert_eq!(pieces.len(), 1, "{pieces:?}");
    assert!(pieces[0].start <= inside.0 && inside.0 + u <= pieces[0].start + pieces[0].size);
    assert_eq!(pool.stats().reserved_current, pieces[0].size);
    assert!(read_u32s(&rt, inside, u).iter().all(|&v| v == 0x5a5a_0012));
    rt.free_async(inside, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let st = pool.stats();
    assert_eq!((st.reserved_current, st.used_current), (0, 0));
    let end = pool.backend_calls().unwrap();
    assert_eq!(end.granules_released - before.granules_released, 4, "each piece once, whole");
    pool.check_invariants().unwrap();
    // A pool on segments has no pieces to cut.
    let segments = MemPool::create_with_backing(&rt, PoolProps::default(), PoolBacking::Segments).unwrap();
    crate::expect_err(segments.set_first_steps_piece(8 * MIB), 1, &["segments"]);
}

/// The address map shows where free memory lies: a physical piece that a
/// live block shares keeps its free bytes held ([`FreeSplit`]'s
/// `beside_live`), and once the block is freed the whole piece is free.
#[test]
fn the_address_map_shows_free_memory_a_live_block_holds() {
    use hipmem::pool::layout::FreeSplit;
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "the_address_map_shows_free_memory_a_live_block_holds") else { return };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let u = unit(&pool);
    pool.set_growth_mapping(8 * u).unwrap();
    let s = stream0(&rt);
    let big = pool.alloc_raw(10 * u, &s).unwrap();
    let pieces = pool.physical_pieces().unwrap();
    assert_eq!(pieces.len(), 1, "one growth, one group: {pieces:?}");
    assert_eq!(pieces[0].size, 10 * u);
    assert!(pieces[0].start <= big.0 && big.0 + 10 * u <= pieces[0].start + pieces[0].size);
    let split =
        |pool: &MemPool| FreeSplit::of(&pool.address_runs().unwrap(), &pool.physical_pieces().unwrap());
    assert_eq!(split(&pool), FreeSplit::default(), "all of it live");
    // One unit of the group live again: the other nine are free but held.
    rt.free_async(big, &s).unwrap();
    let inside = pool.alloc_raw(u, &s).unwrap();
    assert_eq!(split(&pool), FreeSplit { free: 9 * u, in_whole_pieces: 0, beside_live: 9 * u });
    rt.free_async(inside, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(split(&pool), FreeSplit { free: 10 * u, in_whole_pieces: 10 * u, beside_live: 0 });
    pool.trim_to(0).unwrap();
    assert!(pool.physical_pieces().unwrap().is_empty(), "trimmed: nothing held");
    // A pool on segments: each segment is a piece.
    let segments = MemPool::create_with_backing(&rt, PoolProps::default(), PoolBacking::Segments).unwrap();
    let p = segments.alloc_raw(MIB, &s).unwrap();
    let pieces = segments.physical_pieces().unwrap();
    assert!(pieces.iter().any(|q| q.start <= p.0 && p.0 + MIB <= q.start + q.size), "{pieces:?}");
    rt.free_async(p, &s).unwrap();
    s.synchronize().unwrap();
}

/// By default a new pool that only grows maps each growth of 64 MiB or
/// more (half its 128 MiB growth mapping) as one physical allocation
/// (unless `HIPMEM_POOL_GROUP_MIB` says otherwise), and its data is intact;
/// a smaller growth maps a physical allocation per unit, each released
/// alone.
#[test]
fn a_new_pool_maps_a_growth_of_64_mib_or_more_in_one_call() {
    // (Settings that change what a new pool does by default.)
    if ["HIPMEM_POOL_GROUP_MIB", "HIPMEM_POOL_FIRST_PIECE_MIB"].iter().any(|v| std::env::var_os(v).is_some())
    {
        eprintln!(
            "a_new_pool_maps_a_growth_of_64_mib_or_more_in_one_call: skipped, a HIPMEM_POOL_* setting changes the defaults"
        );
        return;
    }
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "a_new_pool_maps_a_growth_of_64_mib_or_more_in_one_call") else { return };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let group = 128u64 << 20;
    assert_eq!(pool.growth_mapping(), Some(group));
    let u = unit(&pool);
    if u > group / 4 {
        eprintln!("a unit of {u} bytes: a 128 MiB growth is too few units to check");
        return;
    }
    let s = stream0(&rt);
    let before = pool.backend_calls().unwrap();
    let big = pool.alloc_raw(group, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.granules_created - before.granules_created, 1, "one physical allocation");
    assert_eq!(after.maps - before.maps, 1, "one mapping");
    fill_u32(&rt, big, group, 0x6464_0001, &s);
    // Half a group: one physical allocation still.
    let half = pool.alloc_raw(group / 2, &s).unwrap();
    let halved = pool.backend_calls().unwrap();
    assert_eq!(halved.granules_created - after.granules_created, 1, "half a group is one allocation");
    fill_u32(&rt, half, group / 2, 0x6464_0002, &s);
    // A quarter of a group: one physical allocation per unit.
    let quarter = pool.alloc_raw(group / 4, &s).unwrap();
    let units = pool.backend_calls().unwrap();
    assert_eq!(units.granules_created - halved.granules_created, group / 4 / u, "a unit each");
    fill_u32(&rt, quarter, group / 4, 0x6464_0003, &s);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, big, group).iter().all(|&v| v == 0x6464_0001));
    assert!(read_u32s(&rt, half, group / 2).iter().all(|&v| v == 0x6464_0002));
    assert!(read_u32s(&rt, quarter, group / 4).iter().all(|&v| v == 0x6464_0003));
    rt.free_async(quarter, &s).unwrap();
    rt.free_async(half, &s).unwrap();
    rt.free_async(big, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0);
    pool.check_invariants().unwrap();
}

/// A pool of eight groups or more (1 GiB by default) that must grow for a
/// small request maps a whole group (128 MiB by default: a GPU maps ranges
/// under 64 MiB at twenty times the cost per MiB); the requests that follow
/// use the rest without growing, and trim gives it all back. Not in a run's
/// first steps (the pool's first 2048 frees), where the long-lived state is
/// made: a small growth then creates only the units it needs.
#[test]
fn a_large_pool_grows_by_whole_groups_even_for_small_requests() {
    if ["HIPMEM_POOL_GROUP_MIB", "HIPMEM_POOL_FIRST_STEPS"].iter().any(|v| std::env::var_os(v).is_some()) {
        return;
    }
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "a_large_pool_grows_by_whole_groups_even_for_small_requests") else {
        return;
    };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let u = unit(&pool);
    let group = 128u64 << 20;
    assert_eq!(pool.growth_mapping(), Some(group));
    if u > group / 4 {
        eprintln!("a unit of {u} bytes: a 128 MiB group is too few units to check");
        return;
    }
    let s = stream0(&rt);
    let large = 8 * group;
    let big = pool.alloc_raw(large, &s).unwrap();
    assert_eq!(pool.stats().reserved_current, large);
    // In the first steps: one unit for a small request, not a group.
    let before = pool.backend_calls().unwrap();
    let first = pool.alloc_raw(u / 2, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.bytes_created - before.bytes_created, u, "only the unit it needs");
    assert_eq!(pool.stats().reserved_current, large + u);
    fill_u32(&rt, first, u / 2, 0x6400_fffe, &s);
    past_the_first_steps(&rt, &pool, &s);
    assert_eq!(pool.stats().reserved_current, large + u, "the first steps fit in that unit");
    // Past them: a whole group for a request of one unit.
    let before = pool.backend_calls().unwrap();
    let small = pool.alloc_raw(u, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.granules_created - before.granules_created, 1, "one physical allocation");
    assert_eq!(after.maps - before.maps, 1, "one mapping");
    assert_eq!(pool.stats().reserved_current, large + u + group, "a whole group");
    // What is left of the group serves the next requests without growing.
    let mut rest = Vec::new();
    for k in 0..(group / u - 1) {
        let p = pool.alloc_raw(u, &s).unwrap();
        fill_u32(&rt, p, u, 0x6400_0000 + k as u32, &s);
        rest.push(p);
    }
    assert_eq!(pool.backend_calls().unwrap().granules_created, after.granules_created, "no growth");
    assert_eq!(pool.stats().reserved_current, large + u + group);
    fill_u32(&rt, small, u, 0x6400_ffff, &s);
    s.synchronize().unwrap();
    for (k, &p) in rest.iter().enumerate() {
        assert!(read_u32s(&rt, p, u).iter().all(|&v| v == 0x6400_0000 + k as u32), "block {k}");
    }
    assert!(read_u32s(&rt, small, u).iter().all(|&v| v == 0x6400_ffff));
    assert!(read_u32s(&rt, first, u / 2).iter().all(|&v| v == 0x6400_fffe));
    for p in rest.into_iter().chain([small, first, big]) {
        rt.free_async(p, &s).unwrap();
    }
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let st = pool.stats();
    assert_eq!((st.reserved_current, st.used_current), (0, 0));
    pool.check_invariants().unwrap();
}

/// Phases of different shapes on one stream, the device running behind the
/// host from the second round on (a delay first, so every free is still
/// pending when the next phase allocates): what the pool holds at most.
fn lagged_phases(rt: &Runtime, pool: &MemPool) -> u64 {
    let g = unit(pool);
    let s = stream0(rt);
    let flag = rt.device(0).unwrap().alloc_zeroed::<u32>(1).unwrap();
    let shapes: [(u64, usize); 4] = [(3 * g / 2, 16), (32 * g, 1), (g / 2, 40), (20 * g, 2)];
    for round in 0..4u32 {
        if round > 0 {
            s.delay(std::time::Duration::from_millis(50), &flag, round).unwrap();
        }
        for &(size, count) in &shapes {
            let blocks: Vec<DevicePtr> = (0..count).map(|_| pool.alloc_raw(size, &s).unwrap()).collect();
            for p in blocks {
                rt.free_async(p, &s).unwrap();
            }
        }
        s.synchronize().unwrap();
    }
    pool.check_invariants().unwrap();
    pool.stats().reserved_high
}

/// Moving memory never makes a pool hold more than growing would, also when
/// frees lag behind the host (as a GPU's do): memory still in use cannot
/// move, and a place is revisited only with memory that can.
#[test]
fn a_pool_that_may_move_holds_no_more_than_one_that_grows_while_frees_lag() {
    let rt = private_runtime();
    let Some(moving) =
        vmm_pool(&rt, "a_pool_that_may_move_holds_no_more_than_one_that_grows_while_frees_lag")
    else {
        return;
    };
    let g = unit(&moving);
    let growing = vmm_pool(&rt, "").unwrap();
    growing.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let (m, gr) = (lagged_phases(&rt, &moving), lagged_phases(&rt, &growing));
    assert!(m <= gr + g, "the pool that may move holds {} units, the one that grows {}", m / g, gr / g);
}

/// A large request that finds no free run of its size gives back what no
/// block uses before the pool grows for it; the physical allocations it
/// unmaps are mapped again under the new block where the growth needs one
/// of their size, instead of given back and created again: the growth
/// creates only the rest, gives nothing back, the block's data is intact,
/// and trim still gives everything back.
#[test]
fn a_large_growth_maps_the_memory_a_release_before_it_unmapped() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "a_large_growth_maps_the_memory_a_release_before_it_unmapped") else {
        return;
    };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    if pool.planning() {
        pool.set_planning(false).unwrap();
    }
    let u = unit(&pool);
    if u > 16 * MIB || std::env::var_os("HIPMEM_POOL_GROUP_MIB").is_some() {
        eprintln!("units of {u} bytes or a growth mapping set: the groups this test expects are not made");
        return;
    }
    pool.set_release_threshold(0);
    let s = stream0(&rt);
    let start = pool.backend_calls().unwrap();
    // 512 MiB: four physical allocations of 128 MiB.
    let first = pool.alloc_raw(512 * MIB, &s).unwrap();
    let made = pool.backend_calls().unwrap();
    assert_eq!(made.bytes_created - start.bytes_created, 512 * MIB);
    assert_eq!(made.granules_created - start.granules_created, 4, "four groups of 128 MiB");
    rt.free_async(first, &s).unwrap();
    // 640 MiB does not fit: the four groups are unmapped and mapped again
    // under it, 128 MiB are new.
    let big = pool.alloc_raw(640 * MIB, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.bytes_created - made.bytes_created, 128 * MIB, "{after:?}");
    assert_eq!(after.bytes_released - made.bytes_released, 0, "nothing given back: {after:?}");
    assert_eq!(after.unmaps - made.unmaps, 4);
    assert_eq!(pool.stats().reserved_current, 640 * MIB);
    let offsets: Vec<u64> = (0..10).map(|k| k * 64 * MIB + (k % 3) * 4096).collect();
    for (k, &off) in offsets.iter().enumerate() {
        fill_u32(&rt, DevicePtr(big.0 + off), 4096, 0x7e57_0000 | k as u32, &s);
    }
    s.synchronize().unwrap();
    for (k, &off) in offsets.iter().enumerate() {
        let got = read_u32s(&rt, DevicePtr(big.0 + off), 4096);
        assert!(got.iter().all(|&v| v == 0x7e57_0000 | k as u32), "block data at +{off:#x}");
    }
    rt.free_async(big, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let end = pool.backend_calls().unwrap();
    assert_eq!(pool.stats().reserved_current, 0);
    assert_eq!(end.bytes_released - start.bytes_released, end.bytes_created - start.bytes_created);
    pool.check_invariants().unwrap();
}

/// A pool whose release threshold keeps its memory (here `u64::MAX`, as
/// PyTorch's `cudaMallocAsync` backend sets it) gives nothing back before a
/// large growth. Past a run's first steps, a growth of 256 MiB or more that
/// would take it past its high watermark instead moves the physical memory
/// of wholly free units and groups under the new block and creates only
/// the rest: the pool holds the peak of what was needed at once, not the
/// sum of two phases. With each unit its own physical allocation the moved
/// memory covers the block exactly; a group moves only whole, so with
/// groups part of the block may still be new. Nothing is released, the
/// live blocks between the free memory keep their data, the statistics
/// stay exact, and once every block is freed trim gives back all of it.
#[test]
fn a_pool_that_keeps_its_memory_moves_free_memory_under_a_new_peak() {
    // (It counts the frees that end a run's first steps.)
    if std::env::var_os("HIPMEM_POOL_FIRST_STEPS").is_some() {
        return;
    }
    for units_alone in [true, false] {
        let rt = private_runtime();
        let Some(pool) = vmm_pool(&rt, "a_pool_that_keeps_its_memory_moves_free_memory_under_a_new_peak")
        else {
            return;
        };
        pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
        if pool.planning() {
            pool.set_planning(false).unwrap();
        }
        if units_alone && pool.mapping_unit().is_some() {
            pool.set_growth_mapping(0).unwrap();
        }
        assert_eq!(pool.attribute(PoolAttribute::ReleaseThreshold), u64::MAX);
        let u = unit(&pool);
        let s = stream0(&rt);
        past_the_first_steps(&rt, &pool, &s);
        // Two runs of 160 MiB, each with a live unit after it: freed,
        // neither fits 288 MiB.
        let a = pool.alloc_raw(160 * MIB, &s).unwrap();
        let pin_a = pool.alloc_raw(u, &s).unwrap();
        let b = pool.alloc_raw(160 * MIB, &s).unwrap();
        let pin_b = pool.alloc_raw(u, &s).unwrap();
        fill_u32(&rt, pin_a, u, 0x5eed_0a01, &s);
        fill_u32(&rt, pin_b, u, 0x5eed_0b01, &s);
        rt.free_async(a, &s).unwrap();
        rt.free_async(b, &s).unwrap();
        s.synchronize().unwrap();
        let held = pool.stats().reserved_current;
        assert_eq!(held, pool.stats().reserved_high, "{:?}", pool.stats());
        assert!(held >= 320 * MIB + 2 * u, "{held}");
        let before = pool.backend_calls().unwrap();
        let big = pool.alloc_raw(288 * MIB, &s).unwrap();
        let after = pool.backend_calls().unwrap();
        let created = after.bytes_created - before.bytes_created;
        let most = if units_alone { 2 * u } else { 144 * MIB };
        assert!(
            created <= most,
            "units alone {units_alone}: {created} bytes created for 288 MiB while 320 MiB lay free: {after:?}"
        );
        assert_eq!(
            after.bytes_released, before.bytes_released,
            "a pool that keeps its memory gives none back"
        );
        assert!(after.unmaps > before.unmaps, "the free memory moved: {after:?}");
        // (Memory moved and not mapped again would be missing here.)
        let st = pool.stats();
        assert_eq!(st.reserved_current, held + created, "{st:?}");
        assert_eq!(st.reserved_high, st.reserved_current, "{st:?}");
        let used = 2 * u + 288 * MIB;
        assert!(st.used_current >= used && st.used_current < used + u, "{st:?}");
        pool.check_invariants().unwrap();
        // Data: the new block across the moved memory, and the live blocks
        // beside the memory that moved away.
        let offsets: Vec<u64> = (0..9).map(|k| k * 32 * MIB + (k % 3) * 4096).collect();
        for (k, &off) in offsets.iter().enumerate() {
            fill_u32(&rt, DevicePtr(big.0 + off), 4096, 0x6b16_0000 | k as u32, &s);
        }
        s.synchronize().unwrap();
        for (k, &off) in offsets.iter().enumerate() {
            let got = read_u32s(&rt, DevicePtr(big.0 + off), 4096);
            assert!(got.iter().all(|&v| v == 0x6b16_0000 | k as u32), "block data at +{off:#x}");
        }
        assert!(read_u32s(&rt, pin_a, u).iter().all(|&v| v == 0x5eed_0a01), "a live block kept its data");
        assert!(read_u32s(&rt, pin_b, u).iter().all(|&v| v == 0x5eed_0b01), "a live block kept its data");
        // Freed, the memory stays (the threshold keeps it); trimmed, it goes.
        let kept = pool.stats().reserved_current;
        rt.free_async(big, &s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(pool.stats().reserved_current, kept);
        rt.free_async(pin_a, &s).unwrap();
        rt.free_async(pin_b, &s).unwrap();
        s.synchronize().unwrap();
        pool.trim_to(0).unwrap();
        assert_eq!(pool.stats().reserved_current, 0);
        let end = pool.backend_calls().unwrap();
        assert_eq!(end.bytes_released, end.bytes_created, "{end:?}");
        pool.check_invariants().unwrap();
    }
}

/// A pool that moves memory under its requests still gives back memory
/// idle for two windows. A request served by moving wholly free memory
/// under it creates nothing, so it is not a growth, the kind of change
/// idle release waits to see none of. Here every window asks for a block
/// larger than any free run, which moves memory each time. While each of
/// those counted as a growth, the pool kept its old peak for as long as
/// the requests went on (replayed variable-length inference under
/// [`MoveBudget::LEAST_MEMORY`]: 1.551 of its peak after the warm-up,
/// 1.003 once moves no longer count).
#[test]
fn a_pool_that_moves_memory_still_gives_back_idle_memory() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "a_pool_that_moves_memory_still_gives_back_idle_memory") else {
        return;
    };
    let _ = pool.set_first_steps_piece(0);
    if pool.planning() {
        pool.set_planning(false).unwrap();
    }
    pool.set_idle_release(Some(std::time::Duration::from_millis(100))).unwrap();
    let at = |ms: u64| pool.set_idle_clock(Some(std::time::Duration::from_millis(ms))).unwrap();
    let u = unit(&pool);
    let s = stream0(&rt);
    // (A synchronization that gives nothing back itself: the threshold
    // keeps everything while it runs.)
    let synchronize = || {
        pool.set_release_threshold(u64::MAX);
        s.synchronize().unwrap();
        pool.set_release_threshold(0);
    };
    at(0);
    // Sixteen blocks of two units; every other one freed: eight free runs
    // of two units between live blocks.
    let blocks: Vec<DevicePtr> = (0..16).map(|_| pool.alloc_raw(2 * u, &s).unwrap()).collect();
    let live: Vec<DevicePtr> = blocks.iter().step_by(2).copied().collect();
    for (i, &p) in live.iter().enumerate() {
        fill_u32(&rt, p, 2 * u, 0x1d1e_5e00 | i as u32, &s);
    }
    for &p in blocks.iter().skip(1).step_by(2) {
        rt.free_async(p, &s).unwrap();
    }
    synchronize();
    let peak = pool.stats().reserved_current;
    assert_eq!(peak, 32 * u, "{:?}", pool.stats());
    let before = pool.backend_calls().unwrap();
    // One request a window, each larger than any free run: 4 to 9 units of
    // the 16 free ones, moved under it.
    let mut held = Vec::new();
    for k in 0..6u64 {
        at(30 + 100 * k);
        let p = pool.alloc_raw((4 + k) * u, &s).unwrap();
        fill_u32(&rt, p, u, 0x7e57_0000 | k as u32, &s);
        synchronize();
        assert!(
            read_u32s(&rt, p, u).iter().all(|&v| v == 0x7e57_0000 | k as u32),
            "a moved block takes data"
        );
        rt.free_async(p, &s).unwrap();
        held.push(pool.stats().reserved_current);
    }
    let after = pool.backend_calls().unwrap();
    // (A granule mapped at a new address without being created moved.)
    assert!(
        after.maps - before.maps > after.granules_created - before.granules_created,
        "memory moved under the requests: {before:?} then {after:?}"
    );
    // The live blocks need 16 units and each window's request at most 9:
    // what no window needed goes back.
    let last = *held.last().unwrap();
    assert!(last < peak, "held {held:?} bytes against a peak of {peak}: idle memory stayed");
    for (i, &p) in live.iter().enumerate() {
        assert!(
            read_u32s(&rt, p, 2 * u).iter().all(|&v| v == 0x1d1e_5e00 | i as u32),
            "a live block kept its data"
        );
    }
    for p in live {
        rt.free_async(p, &s).unwrap();
    }
    pool.set_idle_clock(None).unwrap();
    synchronize();
    pool.check_invariants().unwrap();
}

/// Enough frees reaching the pool's heap for it to lend (past a run's first
/// steps, `hipmem::pool` lends nothing before 2048): small blocks of two
/// sizes in turn, so that each allocation misses the stream's cache and
/// sends the last free to the heap.
fn past_the_first_steps(rt: &Runtime, pool: &MemPool, s: &Stream) {
    for i in 0..2100u64 {
        let p = pool.alloc_raw(4096 * (1 + i % 2), s).unwrap();
        rt.free_async(p, s).unwrap();
    }
    s.synchronize().unwrap();
}

/// A pool that only grows maps large growths as groups, which go back only
/// whole: a live block in one keeps its free units from going back. Once
/// past a run's first steps, a growth that would set a new peak takes free
/// units at the end of a group first (an alias of the whole group, used
/// only where those units are) and creates only what is missing; the block
/// beside them keeps its data, the statistics stay exact, and trim still
/// gives back exactly the memory no live block uses.
#[test]
fn a_groups_free_units_are_lent_to_a_growth() {
    // (It counts the frees that end a run's first steps.)
    if std::env::var_os("HIPMEM_POOL_FIRST_STEPS").is_some() {
        return;
    }
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "a_groups_free_units_are_lent_to_a_growth") else { return };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let u = unit(&pool);
    pool.set_growth_mapping(8 * u).unwrap();
    let s = stream0(&rt);
    // Two groups of 16 units side by side: the first holds a small live
    // block at its start (its other 15 units free), the second one block.
    let q = pool.alloc_raw(16 * u, &s).unwrap();
    let r = pool.alloc_raw(16 * u, &s).unwrap();
    assert_eq!(r.0, q.0 + 16 * u, "the second growth maps right after the first");
    rt.free_async(q, &s).unwrap();
    s.synchronize().unwrap();
    let canary = pool.alloc_raw(u / 2, &s).unwrap();
    assert_eq!(canary.0, q.0, "best fit puts it at the start of the free group");
    fill_u32(&rt, canary, u / 2, 0xc0ff_ee01, &s);
    fill_u32(&rt, r, 16 * u, 0xc0ff_ee02, &s);
    assert_eq!(pool.stats().reserved_current, 32 * u);
    // In a run's first steps a growth creates all it needs.
    let before = pool.backend_calls().unwrap();
    let early = pool.alloc_raw(24 * u, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.bytes_lent - before.bytes_lent, 0, "nothing lent before 2048 frees");
    assert_eq!(pool.stats().reserved_current, 56 * u);
    rt.free_async(early, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 32 * u, "the groups stay for their live blocks");
    past_the_first_steps(&rt, &pool, &s);
    pool.check_invariants().unwrap();
    // Below the high watermark (56 units) nothing is lent either.
    let before = pool.backend_calls().unwrap();
    let under = pool.alloc_raw(24 * u, &s).unwrap();
    assert_eq!(pool.backend_calls().unwrap().bytes_lent, before.bytes_lent, "no new peak, nothing lent");
    rt.free_async(under, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    // A new peak: the first group's free units at its end (14, or 13
    // where a small block the stream's cache holds sits in one) go under
    // the growth.
    pool.set_attribute(PoolAttribute::ReservedMemHigh, 0).unwrap();
    let before = pool.backend_calls().unwrap();
    let big = pool.alloc_raw(24 * u, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    let lent = after.bytes_lent - before.bytes_lent;
    assert!(lent >= 14 * u && lent <= 15 * u, "lent {lent} bytes of the group's 15 free units: {after:?}");
    assert_eq!(after.bytes_created - before.bytes_created, 24 * u - lent, "only the rest is created");
    let st = pool.stats();
    assert_eq!(st.reserved_current, 32 * u + 24 * u - lent);
    assert!(st.used_current >= granules(u / 2) + 16 * u + 24 * u, "{st:?}");
    pool.check_invariants().unwrap();
    // Data: the blocks beside the lent units, and the block across them.
    fill_u32(&rt, big, 24 * u, 0xb16b_0001, &s);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, big, 24 * u).iter().all(|&v| v == 0xb16b_0001));
    assert!(read_u32s(&rt, canary, u / 2).iter().all(|&v| v == 0xc0ff_ee01), "the live block kept its data");
    assert!(read_u32s(&rt, r, 16 * u).iter().all(|&v| v == 0xc0ff_ee02), "the live block kept its data");
    // Freed and trimmed: the lent units go home, the new memory goes back,
    // the groups stay for their live blocks.
    rt.free_async(big, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 32 * u);
    pool.check_invariants().unwrap();
    // The group lends again, and its home is usable in place once it is back.
    pool.set_attribute(PoolAttribute::ReservedMemHigh, 0).unwrap();
    let before = pool.backend_calls().unwrap();
    let again = pool.alloc_raw(20 * u, &s).unwrap();
    assert!(pool.backend_calls().unwrap().bytes_lent > before.bytes_lent, "lent again");
    fill_u32(&rt, again, 20 * u, 0xb16b_0002, &s);
    rt.free_async(again, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let inside = pool.alloc_raw(8 * u, &s).unwrap();
    assert!(
        q.0 <= inside.0 && inside.0 + 8 * u <= q.0 + 16 * u,
        "the group's own addresses hold its units again"
    );
    fill_u32(&rt, inside, 8 * u, 0xb16b_0003, &s);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, inside, 8 * u).iter().all(|&v| v == 0xb16b_0003));
    assert!(read_u32s(&rt, canary, u / 2).iter().all(|&v| v == 0xc0ff_ee01));
    assert!(read_u32s(&rt, r, 16 * u).iter().all(|&v| v == 0xc0ff_ee02));
    for p in [inside, canary, r] {
        rt.free_async(p, &s).unwrap();
    }
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let st = pool.stats();
    assert_eq!((st.reserved_current, st.used_current), (0, 0));
    let end = pool.backend_calls().unwrap();
    assert_eq!(end.bytes_released, end.bytes_created, "every byte made went back: {end:?}");
    pool.check_invariants().unwrap();
}

/// With pending lending on (`MemPool::set_pending_lending`), a growth that
/// would set a new peak lends its own stream's frees while they are still
/// pending (the device behind the host), mapping it in an alias: the
/// stream's work queued before the frees still runs on their memory at its
/// old addresses, the block's after it at the new ones, in stream order.
/// While that work is queued the memory serves no other stream, and it does
/// not go back while its stream's frees are pending, also when the block is
/// freed on another stream and that free completes first; once the stream
/// is done, trim gives back exactly what no live block uses.
#[test]
fn a_growth_lends_its_streams_pending_frees_without_waiting() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "a_growth_lends_its_streams_pending_frees_without_waiting") else {
        return;
    };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    if pool.planning() {
        pool.set_planning(false).unwrap();
    }
    if std::env::var("HIPMEM_POOL_LEND").is_ok_and(|v| v == "0") {
        eprintln!("lending is off (HIPMEM_POOL_LEND=0): skipped");
        return;
    }
    pool.set_pending_lending(true).unwrap();
    let segments = MemPool::create_with_backing(&rt, PoolProps::default(), PoolBacking::Segments).unwrap();
    crate::expect_err(segments.set_pending_lending(true), 1, &["segments"]);
    let u = unit(&pool);
    pool.set_growth_mapping(8 * u).unwrap();
    let (s, other) = (stream0(&rt), stream0(&rt));
    past_the_first_steps(&rt, &pool, &s);
    // Two groups of 16 units: `a` (to be freed), then a live block, so
    // that a growth's hole is not next to `a`.
    let a = pool.alloc_raw(16 * u, &s).unwrap();
    let live = pool.alloc_raw(16 * u, &s).unwrap();
    assert_eq!(live.0, a.0 + 16 * u, "the second growth maps right after the first");
    fill_u32(&rt, live, 16 * u, 0x11fe_0001, &s);
    s.synchronize().unwrap();
    let held = pool.stats().reserved_current;
    // The device runs behind: a delay, a write to `a`, its free, all queued.
    let flag = rt.device(0).unwrap().alloc_zeroed::<u32>(1).unwrap();
    s.delay(std::time::Duration::from_millis(1500), &flag, 1).unwrap();
    fill_u32(&rt, a, 16 * u, 0xaaaa_0001, &s);
    rt.free_async(a, &s).unwrap();
    pool.set_attribute(PoolAttribute::ReservedMemHigh, 0).unwrap();
    let before = pool.backend_calls().unwrap();
    let b = pool.alloc_raw(24 * u, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    // (The growth itself does not wait: mapping an alias of memory a
    // kernel still uses does not wait for the kernel, on an H100 either.
    // But on a GPU shared with the suite's other tests, this thread may
    // be held up until the device is idle, ours included: the frees are
    // then complete, and the checks that need them pending are skipped.)
    if s.query().unwrap() {
        eprintln!(
            "the stream finished before the growth's check (this thread was held up): lent what was free"
        );
    }
    // (`a` may have joined a free unit before its group: 15 or 16 units.)
    let lent = after.bytes_lent - before.bytes_lent;
    assert!((15 * u..=16 * u).contains(&lent), "`a`'s group lent while its free is pending: {after:?}");
    let created = after.bytes_created - before.bytes_created;
    assert_eq!(created, 24 * u - lent, "only the rest created: {after:?}");
    assert_eq!(pool.stats().reserved_current, held + created);
    pool.check_invariants().unwrap();
    // Another stream gets none of that memory while the free is pending.
    let elsewhere = pool.alloc_raw(16 * u, &other).unwrap();
    assert!(elsewhere.0 + 16 * u <= a.0 || elsewhere.0 >= a.0 + 16 * u, "`a`'s home went to another stream");
    assert!(elsewhere.0 + 16 * u <= b.0 || elsewhere.0 >= b.0 + 24 * u, "blocks overlap");
    rt.free_async(elsewhere, &other).unwrap();
    // The block's work runs after the write to `a` on the same memory.
    fill_u32(&rt, b, 24 * u, 0xbbbb_0002, &s);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, b, 24 * u).iter().all(|&v| v == 0xbbbb_0002), "the block's data");
    assert!(read_u32s(&rt, live, 16 * u).iter().all(|&v| v == 0x11fe_0001), "the live block kept its data");
    rt.free_async(b, &s).unwrap();
    s.synchronize().unwrap();
    other.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let base = pool.stats().reserved_current;
    assert!(base <= 17 * u, "the live block's group (and a unit) stay: {base}");
    pool.check_invariants().unwrap();
    // Again, the block freed on another stream (it was never used on the
    // first): that free completes while the first stream still has work
    // queued on the lent memory's home, which must then neither go back
    // nor serve anyone else.
    let a2 = pool.alloc_raw(16 * u, &s).unwrap();
    let spacer = pool.alloc_raw(16 * u, &s).unwrap();
    s.delay(std::time::Duration::from_millis(1500), &flag, 2).unwrap();
    fill_u32(&rt, a2, 16 * u, 0xaaaa_0003, &s);
    rt.free_async(a2, &s).unwrap();
    pool.set_attribute(PoolAttribute::ReservedMemHigh, 0).unwrap();
    let before = pool.backend_calls().unwrap();
    let b2 = pool.alloc_raw(24 * u, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert!(after.bytes_lent - before.bytes_lent >= 15 * u, "lent again: {after:?}");
    rt.free_async(b2, &other).unwrap();
    other.synchronize().unwrap();
    if s.query().unwrap() {
        eprintln!("the stream finished before the trim's check (this thread was held up): skipped");
    } else {
        // (The CPU backend's unmap waits for all queued work; a GPU's does not.)
        pool.trim_to(0).unwrap();
        assert!(
            pool.stats().reserved_current >= base + 31 * u,
            "the lent memory's home went back while in use: {:?}",
            pool.stats()
        );
    }
    pool.check_invariants().unwrap();
    s.synchronize().unwrap();
    other.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert!(
        pool.stats().reserved_current <= base + 17 * u,
        "the live blocks' groups stay: {:?}",
        pool.stats()
    );
    assert!(read_u32s(&rt, live, 16 * u).iter().all(|&v| v == 0x11fe_0001), "the live block kept its data");
    for p in [live, spacer] {
        rt.free_async(p, &s).unwrap();
    }
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let st = pool.stats();
    assert_eq!((st.reserved_current, st.used_current), (0, 0));
    let end = pool.backend_calls().unwrap();
    assert_eq!(end.bytes_released, end.bytes_created, "every byte made went back: {end:?}");
    pool.check_invariants().unwrap();
}

/// Lending under load: two threads, three streams each, alternating small
/// and large shapes in a pool that only grows with groups of a few units;
/// every live block keeps its data while other blocks' units are lent
/// under new ones, blocks never overlap, the physical memory stays
/// accounted (each unit used at one address), and trim empties the pool.
#[test]
fn live_blocks_keep_their_data_while_units_around_them_are_lent() {
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, "live_blocks_keep_their_data_while_units_around_them_are_lent") else {
        return;
    };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let u = unit(&pool);
    pool.set_growth_mapping(4 * u).unwrap();
    past_the_first_steps(&rt, &pool, &stream0(&rt));
    let start = pool.backend_calls().unwrap();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2u32)
            .map(|thread| {
                let rt = rt.clone();
                let pool = pool.clone();
                scope.spawn(move || -> Result<(), String> {
                    let streams: Vec<Stream> = (0..3).map(|_| stream0(&rt)).collect();
                    let mut rng = Rng(0x1e4d_0000_0000_0001 ^ ((thread as u64 + 1) << 40));
                    let mut live: Vec<(DevicePtr, u64, u32, usize)> = Vec::new();
                    let mut pattern = 0x0200_0000u32 * (thread + 1);
                    for phase in 0..16u64 {
                        // Each phase's growths are new peaks: they may lend.
                        pool.set_attribute(PoolAttribute::ReservedMemHigh, 0).map_err(|e| e.to_string())?;
                        let (lo, hi) = if phase % 2 == 0 { (u / 4, 3 * u) } else { (2 * u, 12 * u) };
                        for _ in 0..16 {
                            if live.len() < 6 || rng.below(3) != 0 {
                                let bytes = (lo + rng.below(hi - lo)).next_multiple_of(4);
                                let si = rng.below(3) as usize;
                                let p = pool.alloc_raw(bytes, &streams[si]).map_err(|e| e.to_string())?;
                                pattern = pattern.wrapping_add(1);
                                fill_u32(&rt, p, bytes, pattern, &streams[si]);
                                live.push((p, bytes, pattern, si));
                            } else {
                                let (p, _, _, si) = live.swap_remove(rng.below(live.len() as u64) as usize);
                                rt.free_async(p, &streams[si]).map_err(|e| e.to_string())?;
                            }
                        }
                        for s in &streams {
                            s.synchronize().map_err(|e| e.to_string())?;
                        }
                        for &(p, bytes, want, _) in &live {
                            let words = read_u32s(&rt, p, bytes);
                            if let Some(i) = words.iter().position(|&w| w != want) {
                                return Err(format!(
                                    "thread {thread} phase {phase}: block {p} holds {:#x} at word {i}, expected {want:#x}",
                                    words[i]
                                ));
                            }
                        }
                        for (i, a) in live.iter().enumerate() {
                            for b in &live[i + 1..] {
                                if !crate::pools::disjoint(a.0, a.1, b.0, b.1) {
                                    return Err(format!("blocks {} and {} overlap", a.0, b.0));
                                }
                            }
                        }
                        // Keep a few long-lived blocks in their groups.
                        while live.len() > 3 {
                            let (p, _, _, si) = live.swap_remove(rng.below(live.len() as u64) as usize);
                            rt.free_async(p, &streams[si]).map_err(|e| e.to_string())?;
                        }
                    }
                    for (p, _, _, si) in live {
                        rt.free_async(p, &streams[si]).map_err(|e| e.to_string())?;
                    }
                    for s in &streams {
                        s.synchronize().map_err(|e| e.to_string())?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("thread panicked").unwrap();
        }
    });
    pool.check_invariants().unwrap();
    let calls = pool.backend_calls().unwrap();
    assert!(calls.bytes_lent > start.bytes_lent, "no unit was lent: {calls:?}");
    pool.trim_to(0).unwrap();
    let st = pool.stats();
    assert_eq!((st.reserved_current, st.used_current), (0, 0));
    pool.check_invariants().unwrap();
}

/// With small address parts (`MemPool::set_address_part`), live blocks
/// spread over a size class's part leave no hole there for a request the
/// device has memory for: it goes to another class's part, and one larger
/// than any part gets an address range of its own. Live data stays, the
/// statistics stay exact, and everything goes back.
#[test]
fn requests_with_no_hole_in_their_part_go_to_another_part_or_range() {
    let rt = private_runtime();
    let test = "requests_with_no_hole_in_their_part_go_to_another_part_or_range";
    let Some(pool) = vmm_pool(&rt, test) else { return };
    if rt.mem_get_info(0).unwrap().free < 1 << 30 {
        eprintln!("{test}: skipped, the device has less than 1 GiB free");
        return;
    }
    let s = stream0(&rt);
    let unit = pool.mapping_unit().unwrap();
    crate::expect_err(pool.set_address_part(unit + 1), 1, &["multiple"]);
    crate::expect_err(pool.set_address_part(0), 1, &["multiple"]);
    let part = (256 * MIB).next_multiple_of(unit);
    pool.set_address_part(part).unwrap();
    assert_eq!(pool.address_part(), Some(part));
    // Three blocks side by side in the large blocks' part (64 MiB and
    // more); the middle one stays live.
    let block = 80 * MIB;
    let a = pool.alloc_raw(block, &s).unwrap();
    let b = pool.alloc_raw(block, &s).unwrap();
    let c = pool.alloc_raw(block, &s).unwrap();
    crate::expect_err(pool.set_address_part(part), 1, &["reserved"]);
    fill_u32(&rt, b, block, 0xb0b0_b0b0, &s);
    rt.free_async(a, &s).unwrap();
    rt.free_async(c, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    // More than the part's largest hole: another part.
    let d_len = 120 * MIB;
    let d = pool.alloc_raw(d_len, &s).expect("served in another part");
    // More than a part: a range of its own.
    let e_len = part + 64 * MIB;
    let e = pool.alloc_raw(e_len, &s).expect("served in a range of its own");
    fill_u32(&rt, d, d_len, 0xd0d0_d0d0, &s);
    fill_u32(&rt, e, e_len, 0xe0e0_e0e0, &s);
    s.synchronize().unwrap();
    for (p, len, v) in [(b, block, 0xb0b0_b0b0u32), (d, d_len, 0xd0d0_d0d0), (e, e_len, 0xe0e0_e0e0)] {
        for at in [p, DevicePtr(p.0 + len - MIB)] {
            assert!(read_u32s(&rt, at, MIB).iter().all(|&x| x == v), "{at:?} kept its data");
        }
    }
    let used = pool.stats().used_current;
    assert_eq!(used, granules(block) + granules(d_len) + granules(e_len));
    for p in [b, d, e] {
        rt.free_async(p, &s).unwrap();
    }
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let stats = pool.stats();
    assert_eq!((stats.used_current, stats.reserved_current), (0, 0), "everything went back");
    pool.destroy().unwrap();
}

/// Random allocations and frees on three streams in a pool with small
/// address parts (`MemPool::set_address_part`): requests that find no hole
/// in their class's part go to other parts and ranges of their own while
/// blocks come and go. Every block keeps its data, no two overlap, the
/// statistics stay exact, and everything goes back.
#[test]
fn blocks_placed_outside_their_part_keep_their_data_under_random_use() {
    use crate::pool_stats::Rng;
    let rt = private_runtime();
    let test = "blocks_placed_outside_their_part_keep_their_data_under_random_use";
    let Some(pool) = vmm_pool(&rt, test) else { return };
    if rt.mem_get_info(0).unwrap().free < 4 << 30 {
        eprintln!("{test}: skipped, the device has less than 4 GiB free");
        return;
    }
    let unit = pool.mapping_unit().unwrap();
    pool.set_address_part((128 * MIB).next_multiple_of(unit)).unwrap();
    let streams: Vec<Stream> = (0..3).map(|_| stream0(&rt)).collect();
    let mut rng = Rng(0x5eed_0a11_7c0f_fee5);
    // (address, bytes, pattern, stream)
    let mut live: Vec<(DevicePtr, u64, u32, usize)> = Vec::new();
    let mut pattern = 0x2000_0001u32;
    for step in 0..400 {
        if live.len() < 10 && (live.is_empty() || rng.below(2) == 0) {
            let bytes = match rng.below(4) {
                0 => 4 * (1 + rng.below(60_000)),
                1 => MIB + 4 * rng.below(15 * MIB / 4),
                2 => 40 * MIB + 4 * rng.below(20 * MIB / 4),
                _ => 64 * MIB + 4 * rng.below(100 * MIB / 4),
            };
            let si = rng.below(3) as usize;
            let p = pool.alloc_raw(bytes, &streams[si]).unwrap_or_else(|e| panic!("step {step}: {e}"));
            pattern = pattern.wrapping_add(0x0101_0101);
            fill_u32(&rt, p, bytes, pattern, &streams[si]);
            live.push((p, bytes, pattern, si));
        } else {
            let (p, _, _, si) = live.swap_remove(rng.below(live.len() as u64) as usize);
            // Freed on its own stream, or on another after an event.
            let fi = rng.below(3) as usize;
            if fi != si {
                let ev = rt.device(0).unwrap().create_event().unwrap();
                ev.record(&streams[si]).unwrap();
                streams[fi].wait_event(&ev).unwrap();
            }
            rt.free_async(p, &streams[fi]).unwrap();
        }
        let mut spans: Vec<(u64, u64)> = live.iter().map(|&(p, n, _, _)| (p.0, n)).collect();
        spans.sort_unstable();
        assert!(spans.windows(2).all(|w| w[0].0 + w[0].1 <= w[1].0), "step {step}: live blocks overlap");
        if step % 50 == 49 {
            for s in &streams {
                s.synchronize().unwrap();
            }
            for &(p, n, v, _) in &live {
                for at in [p, DevicePtr(p.0 + n - 4 * (n / 4).min(1024))] {
                    let words = read_u32s(&rt, at, 4 * (n / 4).min(1024));
                    assert!(words.iter().all(|&w| w == v), "step {step}: {p:?} lost its data");
                }
            }
            pool.check_invariants().unwrap_or_else(|e| panic!("step {step}: {e}"));
            let used: u64 = live.iter().map(|&(_, n, _, _)| granules(n)).sum();
            assert_eq!(pool.stats().used_current, used, "step {step}");
        }
    }
    for (p, _, _, si) in live.drain(..) {
        rt.free_async(p, &streams[si]).unwrap();
    }
    for s in &streams {
        s.synchronize().unwrap();
    }
    pool.trim_to(0).unwrap();
    let stats = pool.stats();
    assert_eq!((stats.used_current, stats.reserved_current), (0, 0), "everything went back");
    pool.check_invariants().unwrap();
    pool.destroy().unwrap();
}

/// A pool that only grows maps a large growth as groups (one physical
/// allocation each, which goes back only whole): of at most 128 MiB in a
/// run's first steps, where the growths are a training run's weights,
/// state and first plan's memory, and of at most 64 MiB after them, where
/// they are a varying workload's new peaks whose memory blocks of other
/// sizes later share, so that a long-lived block keeps less from going back
/// (replayed: docs/pool-measurements.md, "Stop 78"). The data stays, and a
/// trim gives everything back.
#[test]
fn large_growths_map_smaller_groups_after_the_first_steps() {
    if ["HIPMEM_POOL_GROUP_MIB", "HIPMEM_POOL_FIRST_STEPS"].iter().any(|v| std::env::var_os(v).is_some()) {
        return;
    }
    let test = "large_growths_map_smaller_groups_after_the_first_steps";
    let rt = private_runtime();
    let Some(pool) = vmm_pool(&rt, test) else {
        return;
    };
    pool.set_move_budget(MoveBudget::GROW_FIRST).unwrap();
    let u = unit(&pool);
    let mib = 1u64 << 20;
    if u > 16 * mib {
        eprintln!("{test}: a unit of {u} bytes is too large to check groups of 64 MiB");
        return;
    }
    let s = stream0(&rt);
    let large = 256 * mib;
    // The pieces behind a block, by size.
    let pieces_under = |p: DevicePtr| -> Vec<u64> {
        let mut v: Vec<u64> = pool
            .physical_pieces()
            .unwrap()
            .iter()
            .filter(|q| q.start < p.0 + large && p.0 < q.start + q.size)
            .map(|q| q.size)
            .collect();
        v.sort_unstable();
        v
    };
    let before = pool.backend_calls().unwrap();
    let first = pool.alloc_raw(large, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.granules_created - before.granules_created, 2, "in the first steps: two groups");
    assert_eq!(pieces_under(first), [128 * mib, 128 * mib]);
    fill_u32(&rt, first, large, 0x6464_0101, &s);
    s.synchronize().unwrap();
    assert!(read_u32s(&rt, DevicePtr(first.0 + large - 4096), 4096).iter().all(|&v| v == 0x6464_0101));
    rt.free_async(first, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0);
    past_the_first_steps(&rt, &pool, &s);
    pool.trim_to(0).unwrap();
    let before = pool.backend_calls().unwrap();
    let later = pool.alloc_raw(large, &s).unwrap();
    let after = pool.backend_calls().unwrap();
    assert_eq!(after.granules_created - before.granules_created, 4, "after them: four groups");
    assert_eq!(after.maps - before.maps, 4, "a mapping each");
    assert_eq!(pieces_under(later), [64 * mib; 4]);
    fill_u32(&rt, later, large, 0x6464_0202, &s);
    s.synchronize().unwrap();
    for off in [0, 64 * mib, 128 * mib, large - 4096] {
        assert!(read_u32s(&rt, DevicePtr(later.0 + off), 4096).iter().all(|&v| v == 0x6464_0202), "at {off}");
    }
    rt.free_async(later, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0, "a trim gives every group back");
    pool.check_invariants().unwrap();
    pool.destroy().unwrap();
}
