//! Stream-ordered reuse: the same stream at once, other streams under the
//! three reuse rules, and internal dependencies when the pool cannot grow.
//! Every "not yet" is proved with the delay kernel: the stream that freed is
//! still busy (hipStreamQuery false) when the reuse decision is checked.

use hipmem::DevicePtr;

use crate::pools::{MIB, disjoint, new_pool, set_reuse, stream0, wait_until_idle};
use crate::{DELAY, expect_err, private_runtime, read0};

/// A size whose segment (2 MiB, the smallest) has too little left beside it
/// for a second block of the same size: a second allocation of this size is
/// served either by the freed block or by new memory, never by the rest.
const SIZE: u64 = 3 * MIB / 2;

#[test]
fn a_stream_reuses_its_own_free_at_once_while_its_kernel_still_runs() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    // From a created pool and through hipMallocAsync (the default pool).
    let pool = new_pool(&rt, 0);
    for via_pool in [true, false] {
        let alloc = |size| if via_pool { pool.alloc_raw(size, &s) } else { rt.malloc_async(size, &s) };
        let a = alloc(SIZE).unwrap();
        let t0 = std::time::Instant::now();
        s.delay(DELAY, &flag, 1).unwrap();
        rt.free_async(a, &s).unwrap();
        let b = alloc(SIZE).unwrap();
        assert_eq!(a, b, "the same stream did not get its own freed memory back (via_pool {via_pool})");
        assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
        // Smaller requests on the same stream may reuse it too; at least they are served.
        rt.free_async(b, &s).unwrap();
        let c = alloc(SIZE - 4096).unwrap();
        assert!(!c.is_null());
        rt.free_async(c, &s).unwrap();
        s.synchronize().unwrap();
    }
    // Through PoolBuffer's Drop (freed in its stream's order).
    let buf = pool.alloc::<u8>(SIZE as usize, &s).unwrap();
    let first = buf.device_ptr();
    let t0 = std::time::Instant::now();
    s.delay(DELAY, &flag, 2).unwrap();
    drop(buf);
    let again = pool.alloc::<u8>(SIZE as usize, &s).unwrap();
    assert_eq!(again.device_ptr(), first);
    assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
    drop(again);
    s.synchronize().unwrap();
    assert!(rt.take_drop_errors().is_empty());
}

#[test]
fn another_stream_without_a_dependency_gets_other_memory_while_the_free_is_pending() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    // Opportunistic reuse off: never without a dependency. On: only once the
    // free has completed, which it has not (the delay still runs).
    for opportunistic in [0, 1] {
        let pool = new_pool(&rt, 0);
        set_reuse(&pool, 1, opportunistic, 1);
        let a = pool.alloc_raw(SIZE, &s).unwrap();
        let t0 = std::time::Instant::now();
        s.delay(DELAY, &flag, 1).unwrap();
        rt.free_async(a, &s).unwrap();
        let b = pool.alloc_raw(SIZE, &t).unwrap();
        // S still busy after T's allocation: the free was pending when T's
        // block was chosen. (A host stalled past the delay, as under a
        // loaded GPU suite, may legitimately see the free complete.)
        let s_busy = !s.query().unwrap();
        assert_pending!(t0, s_busy, "the delay kernel ended too early for this test");
        if s_busy {
            assert!(
                disjoint(a, SIZE, b, SIZE),
                "stream T got {b}, overlapping {a} freed on busy stream S (opportunistic {opportunistic})"
            );
            // T was not made to wait for S: the pool could grow.
            assert!(t.query().unwrap(), "T waits for S although the pool could grow");
        }
        rt.free_async(b, &t).unwrap();
        s.synchronize().unwrap();
        t.synchronize().unwrap();
        pool.check_invariants().unwrap();
    }
}

#[test]
fn a_stream_that_waited_on_an_event_after_the_free_reuses_it_when_following_events() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let out = dev.alloc_zeroed::<u32>(1).unwrap();
    for follow in [1, 0] {
        flag.memset(0).unwrap();
        let pool = new_pool(&rt, 0);
        set_reuse(&pool, follow, 0, 1);
        let a = pool.alloc_raw(SIZE, &s).unwrap();
        let t0 = std::time::Instant::now();
        s.delay(DELAY, &flag, 5).unwrap();
        rt.free_async(a, &s).unwrap();
        let event = dev.create_event().unwrap();
        event.record(&s).unwrap();
        t.wait_event(&event).unwrap();
        let b = pool.alloc_raw(SIZE, &t).unwrap();
        assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
        if follow == 1 {
            assert_eq!(a, b, "T waited on an event recorded after the free but did not reuse the memory");
        } else {
            assert!(
                disjoint(a, SIZE, b, SIZE),
                "T reused memory freed on busy S with ReuseFollowEventDependencies 0 and opportunistic 0"
            );
        }
        // Work on T after the allocation is ordered after S's kernel either way.
        t.copy_device_to_device(&flag, &out).unwrap();
        t.synchronize().unwrap();
        assert_eq!(read0(&out), 5);
        rt.free_async(b, &t).unwrap();
        s.synchronize().unwrap();
        t.synchronize().unwrap();
        pool.check_invariants().unwrap();
    }
}

/// An event recorded *before* the free does not order T after the free.
#[test]
fn an_event_recorded_before_the_free_is_no_dependency_on_it() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 0);
    set_reuse(&pool, 1, 0, 1);
    let a = pool.alloc_raw(SIZE, &s).unwrap();
    let event = dev.create_event().unwrap();
    s.delay(DELAY, &flag, 1).unwrap();
    event.record(&s).unwrap();
    let t0 = std::time::Instant::now();
    s.delay(DELAY / 3, &flag, 2).unwrap();
    rt.free_async(a, &s).unwrap();
    t.wait_event(&event).unwrap();
    let b = pool.alloc_raw(SIZE, &t).unwrap();
    assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
    assert!(disjoint(a, SIZE, b, SIZE), "T reused a block freed after the event it waited on");
    rt.free_async(b, &t).unwrap();
    s.synchronize().unwrap();
    t.synchronize().unwrap();
}

#[test]
fn opportunistic_reuse_takes_memory_whose_free_has_completed() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    // Completion seen by hipStreamSynchronize (keep the memory across it) or
    // by hipStreamQuery.
    for by_synchronize in [true, false] {
        let pool = new_pool(&rt, 0);
        set_reuse(&pool, 0, 1, 0);
        pool.set_release_threshold(u64::MAX);
        let a = pool.alloc_raw(SIZE, &s).unwrap();
        s.delay(DELAY / 3, &flag, 1).unwrap();
        rt.free_async(a, &s).unwrap();
        if by_synchronize {
            s.synchronize().unwrap();
        } else {
            wait_until_idle(&s);
        }
        let b = pool.alloc_raw(SIZE, &t).unwrap();
        assert_eq!(a, b, "T did not reuse memory whose free completed (by_synchronize {by_synchronize})");
        assert!(t.query().unwrap(), "opportunistic reuse made T wait");
        rt.free_async(b, &t).unwrap();
        t.synchronize().unwrap();
        pool.check_invariants().unwrap();
    }
}

/// Memory freed on a stream that has since gone idle, seen by no
/// synchronize, query or marker of hipmem's, is reused by another stream
/// (opportunistic reuse) instead of new memory: the pool asks the idle
/// stream when it finds nothing it knows is free.
#[test]
fn opportunistic_reuse_asks_a_stream_that_went_idle() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 0);
    set_reuse(&pool, 0, 1, 0);
    pool.set_release_threshold(u64::MAX);
    let a = pool.alloc_raw(SIZE, &s).unwrap();
    let reserved = pool.stats().reserved_current;
    s.delay(DELAY / 3, &flag, 1).unwrap();
    rt.free_async(a, &s).unwrap();
    // Wait for S through the backend, behind the pool's back.
    let start = std::time::Instant::now();
    while !rt.backend().stream_query(s.raw()).unwrap() {
        assert!(start.elapsed() < std::time::Duration::from_secs(20), "S never became idle");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let b = pool.alloc_raw(SIZE, &t).unwrap();
    assert_eq!(a, b, "T did not reuse memory freed on a stream that had gone idle");
    assert_eq!(pool.stats().reserved_current, reserved, "the pool grew");
    assert!(t.query().unwrap(), "opportunistic reuse made T wait");
    rt.free_async(b, &t).unwrap();
    t.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// The pool cannot grow (maxSize reached): with internal dependencies the
/// allocation on T takes the block freed on busy S and T waits for S; without
/// them it is OutOfMemory.
#[test]
fn internal_dependencies_make_the_allocating_stream_wait_when_the_pool_cannot_grow() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let out = dev.alloc_zeroed::<u32>(1).unwrap();
    let keep_size = 4096;
    let big = 2 * MIB - 64 * 1024;
    for internal in [1, 0] {
        flag.memset(0).unwrap();
        out.memset(0).unwrap();
        let pool = new_pool(&rt, 2 * MIB);
        set_reuse(&pool, 1, 0, internal);
        let keep = pool.alloc_raw(keep_size, &s).unwrap();
        let a = pool.alloc_raw(big, &s).unwrap();
        let t0 = std::time::Instant::now();
        s.delay(DELAY, &flag, 9).unwrap();
        rt.free_async(a, &s).unwrap();
        if internal == 1 {
            let b = pool.alloc_raw(big, &t).expect("internal dependencies should allow the allocation");
            assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
            assert_eq!(a, b, "the only block that fits is the one freed on S");
            // T waits for S: its next work sees what S's kernel wrote.
            t.copy_device_to_device(&flag, &out).unwrap();
            t.synchronize().unwrap();
            assert_eq!(read0(&out), 9, "work on T after the allocation ran before S's kernel finished");
            rt.free_async(b, &t).unwrap();
        } else {
            let stats = pool.stats();
            assert_eq!(stats.used_current, keep_size);
            let result = pool.alloc_raw(big, &t);
            if t0.elapsed() < crate::DELAY / 2 {
                let err = expect_err(
                    result,
                    2,
                    &[&big.to_string(), &stats.used_current.to_string(), &stats.reserved_current.to_string()],
                );
                assert_pending!(
                    t0,
                    !s.query().unwrap(),
                    "the delay kernel ended too early for this test: {err}"
                );
                assert!(t.query().unwrap(), "a failed allocation left T waiting");
            } else if let Ok(b) = result {
                // The host stalled past the delay: S's free really completed,
                // and releasing completed frees before failing found it.
                eprintln!("note: the host stalled past the delay; the out-of-memory case was not checked");
                rt.free_async(b, &t).unwrap();
            }
        }
        rt.free_async(keep, &s).unwrap();
        s.synchronize().unwrap();
        t.synchronize().unwrap();
        pool.check_invariants().unwrap();
        assert_eq!(pool.stats().used_current, 0);
    }
}

/// Memory no stream ever used is free for every stream: a pending free on S
/// must not make the untouched rest of a segment unusable for T. Many blocks
/// freed on S in reverse order (more than any per-stream cache holds) put the
/// block next to the untouched rest back into the shared heap while S is busy.
#[test]
fn a_pending_free_does_not_lock_up_memory_no_stream_used() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 2 * MIB);
    set_reuse(&pool, 1, 0, 0);
    let blocks: Vec<DevicePtr> = (0..64).map(|_| pool.alloc_raw(256, &s).unwrap()).collect();
    let t0 = std::time::Instant::now();
    s.delay(DELAY, &flag, 1).unwrap();
    for &b in blocks.iter().rev() {
        rt.free_async(b, &s).unwrap();
    }
    let stats = pool.stats();
    assert_eq!(stats.used_current, 0);
    assert!(stats.reserved_current - 64 * 256 >= MIB, "the test expects most of the segment untouched");
    let c = pool.alloc_raw(256, &t);
    assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
    let c = c.unwrap_or_else(|e| {
        panic!("T could not get 256 bytes while ~2 MiB of the pool were never used by any stream: {e}")
    });
    for &b in &blocks {
        assert!(disjoint(b, 256, c, 256), "T got {c}, a block freed on busy S");
    }
    rt.free_async(c, &t).unwrap();
    s.synchronize().unwrap();
    t.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

/// A busy stream's free joins the free memory next to it at once: the
/// stream may allocate across both (stream order makes its own free safe to
/// reuse, and the rest was free for everyone), as it may in PyTorch's
/// allocator, where every free block belongs to a stream. Another stream
/// still gets the part that was free for everyone back.
#[test]
fn a_busy_streams_free_joins_the_free_memory_next_to_it() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let t = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    // No growth past 2 MiB, no reuse across streams without an event.
    let pool = new_pool(&rt, 2 * MIB);
    set_reuse(&pool, 1, 0, 0);
    let a = pool.alloc_raw(MIB, &s).unwrap();
    assert_eq!(pool.stats().reserved_current, 2 * MIB, "the test expects one 2 MiB run");
    let t0 = std::time::Instant::now();
    s.delay(DELAY, &flag, 1).unwrap();
    rt.free_async(a, &s).unwrap();
    // 1.5 MiB fits only across S's pending MiB and the free MiB after it.
    let b = pool.alloc_raw(3 * MIB / 2, &s);
    assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
    let b =
        b.unwrap_or_else(|e| panic!("S could not reuse its own free with the free memory next to it: {e}"));
    assert_eq!(b, a, "S's block starts where its free was");
    pool.check_invariants().unwrap();
    // T gets the last half MiB, which no stream's free touched.
    let c = pool.alloc_raw(MIB / 2, &t);
    assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
    let c = c.unwrap_or_else(|e| panic!("T could not get the memory that was free for everyone: {e}"));
    assert!(disjoint(c, MIB / 2, b, 3 * MIB / 2), "T got {c}, inside S's block {b}");
    pool.check_invariants().unwrap();
    rt.free_async(b, &s).unwrap();
    rt.free_async(c, &t).unwrap();
    s.synchronize().unwrap();
    t.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0, "trim releases everything once the frees completed");
    pool.check_invariants().unwrap();
}
