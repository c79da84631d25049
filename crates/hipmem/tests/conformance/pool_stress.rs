//! Data integrity of pool memory under many allocations, frees and reuses on
//! several streams and threads, and the bounds of a pool block.

use std::time::Duration;

use hipmem::{DevicePtr, Runtime, Stream};

use crate::pool_stats::{Rng, spaced_size};
use crate::pools::{GRANULE, MIB, fill_u32, granules, new_pool, read_u32s, stream0};
use crate::{expect_err, private_runtime};

struct Block {
    ptr: DevicePtr,
    bytes: u64,
    pattern: u32,
    /// The stream of the last work on the block.
    stream: usize,
}

fn check_no_overlap(live: &[Block]) {
    let mut ranges: Vec<(u64, u64)> = live.iter().map(|b| (b.ptr.0, b.bytes)).collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        assert!(
            w[0].0 + w[0].1 <= w[1].0,
            "live pool blocks overlap: {:#x}+{} and {:#x}",
            w[0].0,
            w[0].1,
            w[1].0
        );
    }
}

fn verify(rt: &Runtime, live: &[Block], when: &str) {
    for b in live {
        let words = read_u32s(rt, b.ptr, b.bytes);
        if let Some(i) = words.iter().position(|&w| w != b.pattern) {
            panic!(
                "{when}: block {} ({} bytes) holds {:#x} at word {i}, expected its pattern {:#x}",
                b.ptr, b.bytes, words[i], b.pattern
            );
        }
    }
}

/// Many allocations of random sizes on three streams, each filled with its own
/// pattern by the fill kernel (sometimes behind a short delay), freed in
/// random order on random streams with event dependencies on the stream of
/// their last use; the memory is reused all along. Every live block keeps its
/// pattern and the pool's invariants hold throughout.
#[test]
fn random_allocations_on_several_streams_keep_their_data() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let streams: Vec<Stream> = (0..3).map(|_| stream0(&rt)).collect();
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 0);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut live: Vec<Block> = Vec::new();
    let mut next_pattern = 0x1000_0001u32;
    let mut delays = 0;
    for round in 0..6 {
        for _ in 0..50 {
            match rng.below(10) {
                0..=4 => {
                    // Whole u32s; granules far apart (see spaced_size).
                    let bytes = if rng.below(10) == 0 {
                        [MIB, 2 * MIB][rng.below(2) as usize] - 4 * rng.below(64)
                    } else {
                        spaced_size(&mut rng).next_multiple_of(4)
                    };
                    let si = rng.below(3) as usize;
                    let ptr = pool.alloc_raw(bytes, &streams[si]).unwrap();
                    next_pattern = next_pattern.wrapping_add(0x0101_0101);
                    fill_u32(&rt, ptr, bytes, next_pattern, &streams[si]);
                    live.push(Block { ptr, bytes, pattern: next_pattern, stream: si });
                }
                5..=8 if !live.is_empty() => {
                    let b = live.swap_remove(rng.below(live.len() as u64) as usize);
                    let fi = rng.below(3) as usize;
                    if fi != b.stream {
                        let ev = dev.create_event().unwrap();
                        ev.record(&streams[b.stream]).unwrap();
                        streams[fi].wait_event(&ev).unwrap();
                    }
                    rt.free_async(b.ptr, &streams[fi]).unwrap();
                }
                _ if delays < 12 => {
                    // Keep a stream busy so that reuse decisions meet pending frees.
                    delays += 1;
                    streams[rng.below(3) as usize].delay(Duration::from_millis(15), &flag, delays).unwrap();
                }
                _ => {}
            }
            pool.check_invariants().unwrap_or_else(|e| panic!("round {round}: {e}"));
            check_no_overlap(&live);
        }
        let expected_used: u64 = live.iter().map(|b| granules(b.bytes)).sum();
        let st = pool.stats();
        assert_eq!(st.used_current, expected_used, "round {round}");
        assert!(st.reserved_current >= st.used_current, "round {round}: {st:?}");
        for s in &streams {
            s.synchronize().unwrap();
        }
        verify(&rt, &live, &format!("round {round}"));
        pool.check_invariants().unwrap();
    }
    assert!(live.len() >= 4, "the sequence left too few live blocks to check bounds");

    // Copies past the end of a block are InvalidValue; inside it they work.
    for b in live.iter().take(8) {
        let block = granules(b.bytes);
        let mut exact = vec![0u8; block as usize];
        rt.copy_device_to_host(&mut exact, b.ptr).expect("copying a whole block");
        let mut longer = vec![0u8; block as usize + 1];
        expect_err(rt.copy_device_to_host(&mut longer, b.ptr), 1, &[]);
        let mut tail = [0u8; 8];
        let near_end = DevicePtr(b.ptr.0 + block - 4);
        expect_err(rt.copy_device_to_host(&mut tail, near_end), 1, &[]);
        expect_err(rt.copy_host_to_device(near_end, &tail), 1, &[]);
        rt.copy_device_to_host(&mut tail[..4], near_end).unwrap();
        expect_err(rt.check_device_range(b.ptr, block + GRANULE, "test"), 1, &[]);
    }

    // Free everything on random streams; after synchronization the freed
    // blocks are no longer memory a copy may touch.
    let freed: Vec<(DevicePtr, u64)> = live.iter().map(|b| (b.ptr, b.bytes)).collect();
    for b in live.drain(..) {
        let fi = rng.below(3) as usize;
        if fi != b.stream {
            let ev = dev.create_event().unwrap();
            ev.record(&streams[b.stream]).unwrap();
            streams[fi].wait_event(&ev).unwrap();
        }
        rt.free_async(b.ptr, &streams[fi]).unwrap();
    }
    for s in &streams {
        s.synchronize().unwrap();
    }
    dev.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
    for (p, bytes) in freed {
        let mut buf = vec![0u8; bytes.min(64) as usize];
        expect_err(rt.copy_device_to_host(&mut buf, p), 1, &[]);
    }
}

/// Blocks freed on one stream and reused by another after an event dependency
/// are not overwritten by the first stream's late work.
#[test]
fn reuse_across_streams_after_an_event_never_sees_late_writes() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 0);
    let size = 3 * MIB / 2;
    for round in 0..4u32 {
        let a = pool.alloc_raw(size, &s).unwrap();
        // S writes its pattern only after a delay, then frees the block.
        s.delay(Duration::from_millis(60), &flag, round).unwrap();
        fill_u32(&rt, a, size, 0xAAAA_0000 | round, &s);
        rt.free_async(a, &s).unwrap();
        let ev = dev.create_event().unwrap();
        ev.record(&s).unwrap();
        t.wait_event(&ev).unwrap();
        let b = pool.alloc_raw(size, &t).unwrap();
        fill_u32(&rt, b, size, 0xBBBB_0000 | round, &t);
        t.synchronize().unwrap();
        s.synchronize().unwrap();
        let words = read_u32s(&rt, b, size);
        assert!(
            words.iter().all(|&w| w == 0xBBBB_0000 | round),
            "round {round}: the reused block holds a write made before its free"
        );
        rt.free_async(b, &t).unwrap();
    }
    s.synchronize().unwrap();
    t.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// Four threads, each with its own stream, 2,000 alloc/free pairs each on a
/// shared pool; some blocks are filled and checked.
#[test]
fn four_threads_allocate_and_free_on_a_shared_pool() {
    let rt = private_runtime();
    let pool = new_pool(&rt, 0);
    let sizes = [256u64, 1000, 4096, 10_000, 65_536, 300_000, 1 << 20];
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4u32)
            .map(|thread| {
                let rt = rt.clone();
                let pool = pool.clone();
                scope.spawn(move || -> Result<(), String> {
                    let s = stream0(&rt);
                    let mut rng = Rng(0x1234_5678_9abc_def1 ^ ((thread as u64 + 1) << 32));
                    let mut held: Vec<DevicePtr> = Vec::new();
                    for i in 0..2000u32 {
                        let size = sizes[rng.below(sizes.len() as u64) as usize] + 4 * rng.below(64);
                        let p = pool
                            .alloc_raw(size, &s)
                            .map_err(|e| format!("thread {thread} alloc {i}: {e}"))?;
                        if i % 250 == 0 {
                            let pattern = (thread << 24) | i;
                            let bytes = size / 4 * 4;
                            fill_u32(&rt, p, bytes, pattern, &s);
                            s.synchronize().map_err(|e| e.to_string())?;
                            let words = read_u32s(&rt, p, bytes);
                            if words.iter().any(|&w| w != pattern) {
                                return Err(format!(
                                    "thread {thread}: block {p} lost its pattern at step {i}"
                                ));
                            }
                        }
                        held.push(p);
                        if held.len() > 6 {
                            let victim = held.remove(rng.below(held.len() as u64) as usize);
                            rt.free_async(victim, &s)
                                .map_err(|e| format!("thread {thread} free {i}: {e}"))?;
                        }
                    }
                    for p in held {
                        rt.free_async(p, &s).map_err(|e| format!("thread {thread} final free: {e}"))?;
                    }
                    s.synchronize().map_err(|e| e.to_string())
                })
            })
            .collect();
        for h in handles {
            h.join().expect("a thread panicked").unwrap();
        }
    });
    pool.check_invariants().unwrap();
    let st = pool.stats();
    assert_eq!(st.used_current, 0, "UsedMemCurrent did not return to 0: {st:?}");
    assert!(st.used_high > 0 && st.used_high <= st.reserved_high, "{st:?}");
    assert!(rt.take_drop_errors().is_empty());
}

/// Blocks allocated on a stream by one thread and freed on the same stream
/// by another thread that never used it (the stream's own slot takes them
/// back), and blocks of a second pool on that stream (not the stream's own
/// slot: found through the registry): every free lands, the statistics are
/// exact, and a block freed on the stream comes back at once there.
#[test]
fn blocks_freed_on_their_stream_by_another_thread() {
    let rt = private_runtime();
    let (first, second) = (new_pool(&rt, 0), new_pool(&rt, 0));
    let s = stream0(&rt);
    let size = 64 << 10;
    let mut blocks: Vec<DevicePtr> = (0..8).map(|_| first.alloc_raw(size, &s).unwrap()).collect();
    blocks.extend((0..8).map(|_| second.alloc_raw(size, &s).unwrap()));
    assert_eq!(first.stats().used_current, 8 * size);
    assert_eq!(second.stats().used_current, 8 * size);
    let freed = blocks.clone();
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                for p in freed {
                    rt.free_async(p, &s).unwrap();
                }
            })
            .join()
            .unwrap();
    });
    assert_eq!(first.stats().used_current, 0, "{:?}", first.stats());
    assert_eq!(second.stats().used_current, 0, "{:?}", second.stats());
    let again = first.alloc_raw(size, &s).unwrap();
    assert!(blocks[..8].contains(&again), "a block freed on the stream comes back there at once");
    rt.free_async(again, &s).unwrap();
    expect_err(rt.free_async(blocks[0], &s), 1, &[]);
    s.synchronize().unwrap();
    first.check_invariants().unwrap();
    second.check_invariants().unwrap();
    assert!(rt.take_drop_errors().is_empty());
}

/// Two runtimes in one process (and one thread) keep separate pools: what one
/// allocates never shows in the other's statistics or memory.
#[test]
fn pools_of_two_runtimes_used_from_one_thread_stay_separate() {
    let rt_a = private_runtime();
    let rt_b = private_runtime();
    let pool_a = new_pool(&rt_a, 0);
    let pool_b = new_pool(&rt_b, 0);
    let s_a = stream0(&rt_a);
    let s_b = stream0(&rt_b);
    let a = pool_a.alloc_raw(1000, &s_a).unwrap();
    let b = pool_b.alloc_raw(3000, &s_b).unwrap();
    assert_eq!(pool_a.stats().used_current, 1024, "runtime A's pool counts another runtime's allocation");
    assert_eq!(pool_b.stats().used_current, 3072, "runtime B's pool missed its own allocation");
    rt_a.free_async(a, &s_a).unwrap();
    rt_b.free_async(b, &s_b).unwrap();
    assert_eq!(pool_a.stats().used_current, 0);
    assert_eq!(pool_b.stats().used_current, 0);
    // A block freed in runtime B is never handed out by runtime A.
    let a2 = pool_a.alloc_raw(3000, &s_a).unwrap();
    assert!(rt_a.check_device_range(a2, 3000, "test").is_ok());
    rt_a.free_async(a2, &s_a).unwrap();
    s_a.synchronize().unwrap();
    s_b.synchronize().unwrap();
    pool_a.check_invariants().unwrap();
    pool_b.check_invariants().unwrap();
}
