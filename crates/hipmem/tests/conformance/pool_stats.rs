//! Pool statistics (Reserved/Used, Current/High), the release threshold and
//! hipMemPoolTrimTo.

use hipmem::{DevicePtr, MemPool, PoolAttribute, Stream};

use crate::pools::{GRANULE, MIB, granules, new_pool, stream0};
use crate::{DELAY, expect_err, private_runtime};

/// A deterministic xorshift generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn assert_sane(pool: &MemPool, what: &str) {
    let st = pool.stats();
    assert!(st.reserved_current >= st.used_current, "{what}: reserved < used in {st:?}");
    assert!(st.reserved_high >= st.reserved_current, "{what}: reserved high < current in {st:?}");
    assert!(st.used_high >= st.used_current, "{what}: used high < current in {st:?}");
    assert_eq!(pool.attribute(PoolAttribute::ReservedMemCurrent), st.reserved_current);
    assert_eq!(pool.attribute(PoolAttribute::ReservedMemHigh), st.reserved_high);
    assert_eq!(pool.attribute(PoolAttribute::UsedMemCurrent), st.used_current);
    assert_eq!(pool.attribute(PoolAttribute::UsedMemHigh), st.used_high);
    pool.check_invariants().unwrap_or_else(|e| panic!("{what}: {e}"));
}

// ---- statistics ------------------------------------------------------------------------------

#[test]
fn used_memory_counts_at_call_time_in_256_byte_granules() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 0);
    assert_eq!(granules(1000), 1024);
    // The stream is busy: the device gets to none of these calls before the checks.
    let t0 = std::time::Instant::now();
    s.delay(DELAY, &flag, 1).unwrap();
    let mut live: Vec<(DevicePtr, u64)> = Vec::new();
    let mut expected = 0;
    for (size, counted) in
        [(1000u64, 1024u64), (1, 256), (256, 256), (257, 512), (4096, 4096), (MIB + 1, MIB + 256)]
    {
        let p = pool.alloc_raw(size, &s).unwrap();
        expected += counted;
        live.push((p, counted));
        assert_eq!(pool.stats().used_current, expected, "after allocating {size} bytes");
        assert_sane(&pool, "after an allocation");
    }
    assert_eq!(pool.stats().used_high, expected);
    for (p, counted) in live {
        rt.free_async(p, &s).unwrap();
        expected -= counted;
        assert_eq!(pool.stats().used_current, expected, "the free of {p} was not counted at once");
        assert_sane(&pool, "after a free");
    }
    assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
    assert_eq!(pool.stats().used_current, 0);
    s.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
}

#[test]
fn high_watermarks_are_maxima_and_reset_to_the_current_value_only_by_setting_zero() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    let a = pool.alloc_raw(3 * MIB, &s).unwrap();
    let b = pool.alloc_raw(5 * MIB, &s).unwrap();
    let c = pool.alloc_raw(1000, &s).unwrap();
    let peak_used = 8 * MIB + 1024;
    rt.free_async(b, &s).unwrap();
    rt.free_async(a, &s).unwrap();
    let st = pool.stats();
    assert_eq!(st.used_current, 1024);
    assert_eq!(st.used_high, peak_used, "UsedMemHigh is not the maximum");
    let peak_reserved = st.reserved_high;
    assert!(peak_reserved >= peak_used);
    // Synchronizing releases the unused segments (threshold 0): reserved
    // drops, its high value does not.
    s.synchronize().unwrap();
    let st = pool.stats();
    assert!(st.reserved_current < peak_reserved, "nothing was released at synchronization: {st:?}");
    assert_eq!(st.reserved_high, peak_reserved);
    assert_eq!(st.used_high, peak_used);

    // Read-only and reset-only rules.
    for attr in [PoolAttribute::ReservedMemCurrent, PoolAttribute::UsedMemCurrent] {
        for value in [0, 1, 4096, u64::MAX] {
            expect_err(pool.set_attribute(attr, value), 1, &[]);
        }
    }
    for attr in [PoolAttribute::ReservedMemHigh, PoolAttribute::UsedMemHigh] {
        for value in [1, 256, st.reserved_current, u64::MAX] {
            expect_err(pool.set_attribute(attr, value), 1, &[]);
        }
    }
    assert_eq!(pool.stats(), st, "a refused set changed the statistics");

    // Setting 0 resets a High value to the current value.
    pool.set_attribute(PoolAttribute::UsedMemHigh, 0).unwrap();
    assert_eq!(pool.stats().used_high, 1024);
    assert_eq!(pool.stats().reserved_high, peak_reserved, "resetting UsedMemHigh changed ReservedMemHigh");
    pool.set_attribute(PoolAttribute::ReservedMemHigh, 0).unwrap();
    let st = pool.stats();
    assert_eq!(st.reserved_high, st.reserved_current);
    assert_eq!(st.used_high, 1024);
    // And they grow again from there.
    let d = pool.alloc_raw(2000, &s).unwrap();
    assert_eq!(pool.stats().used_high, 1024 + 2048);
    rt.free_async(d, &s).unwrap();
    rt.free_async(c, &s).unwrap();
    assert_eq!(pool.stats().used_high, 1024 + 2048);
    pool.set_attribute(PoolAttribute::UsedMemHigh, 0).unwrap();
    assert_eq!(pool.stats().used_high, 0);
    s.synchronize().unwrap();
    assert_sane(&pool, "at the end");
}

/// alloc a on A, free a on A, alloc b on B, alloc c on A: UsedMemHigh is
/// exactly max(a, b + c), whatever the sizes.
#[test]
fn used_high_is_exact_for_sequences_on_two_streams_from_one_thread() {
    let rt = private_runtime();
    let a_stream = stream0(&rt);
    let b_stream = stream0(&rt);
    let kib = 1024;
    let cases = [
        (64 * kib, 16 * kib, 16 * kib),
        (64 * kib, 16 * kib, 48 * kib),
        (64 * kib, 16 * kib, 64 * kib),
        (16 * kib, 64 * kib, 1000),
        (1000, 1000, 1000),
        (MIB, 256, MIB / 2),
        (MIB, MIB / 2, MIB / 2),
        (3 * MIB, MIB, MIB),
        (256, 3 * MIB, 256),
    ];
    for (a, b, c) in cases {
        let pool = new_pool(&rt, 0);
        let pa = pool.alloc_raw(a, &a_stream).unwrap();
        rt.free_async(pa, &a_stream).unwrap();
        let pb = pool.alloc_raw(b, &b_stream).unwrap();
        let pc = pool.alloc_raw(c, &a_stream).unwrap();
        let (ga, gb, gc) = (granules(a), granules(b), granules(c));
        let st = pool.stats();
        assert_eq!(st.used_current, gb + gc, "case {:?}", (a, b, c));
        assert_eq!(
            st.used_high,
            ga.max(gb + gc),
            "UsedMemHigh is not the true maximum, case {:?}",
            (a, b, c)
        );
        rt.free_async(pb, &b_stream).unwrap();
        rt.free_async(pc, &a_stream).unwrap();
        assert_eq!(pool.stats().used_high, ga.max(gb + gc));
        assert_eq!(pool.stats().used_current, 0);
    }
    a_stream.synchronize().unwrap();
    b_stream.synchronize().unwrap();
}

/// A request size whose granule is one of a few sizes at least 4 times apart
/// (jittered inside the granule), so that reusing a freed block never hands
/// out a block of another granule count.
pub fn spaced_size(rng: &mut Rng) -> u64 {
    let base = [GRANULE, 1024, 4096, 16 * 1024, 64 * 1024, 256 * 1024][rng.below(6) as usize];
    base - rng.below(GRANULE)
}

/// A request served from a larger block freed earlier on the same stream
/// still counts its own granules, exactly as a fresh allocation does.
#[test]
fn a_reused_block_counts_the_granules_of_the_new_request() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    for (first, second) in [(MIB, MIB - 256), (4096, 3840), (64 * 1024, 60 * 1024), (2048, 1900)] {
        let a = pool.alloc_raw(first, &s).unwrap();
        rt.free_async(a, &s).unwrap();
        let b = pool.alloc_raw(second, &s).unwrap();
        let used = pool.stats().used_current;
        rt.free_async(b, &s).unwrap();
        assert_eq!(
            used,
            granules(second),
            "{second} bytes (after freeing {first} on the same stream) count {used} bytes of UsedMemCurrent"
        );
        assert_eq!(pool.stats().used_current, 0);
    }
    s.synchronize().unwrap();
}

/// Random allocations and frees on three streams from one thread (frees
/// often on another stream than the allocation, resets in between): the
/// statistics always equal a simple model.
#[test]
fn random_sequences_on_three_streams_keep_exact_used_statistics() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let streams: Vec<Stream> = (0..3).map(|_| stream0(&rt)).collect();
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 0);
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut live: Vec<(DevicePtr, u64, usize)> = Vec::new();
    let (mut used, mut high) = (0u64, 0u64);
    streams[0].delay(DELAY / 3, &flag, 1).unwrap();
    for step in 0..1500 {
        match rng.below(20) {
            0..=9 => {
                let size = spaced_size(&mut rng);
                let si = rng.below(3) as usize;
                let p = pool.alloc_raw(size, &streams[si]).unwrap();
                live.push((p, granules(size), si));
                used += granules(size);
                high = high.max(used);
            }
            10..=18 if !live.is_empty() => {
                let (p, g, alloc_on) = live.swap_remove(rng.below(live.len() as u64) as usize);
                let fi = rng.below(3) as usize;
                if fi != alloc_on {
                    let ev = dev.create_event().unwrap();
                    ev.record(&streams[alloc_on]).unwrap();
                    streams[fi].wait_event(&ev).unwrap();
                }
                rt.free_async(p, &streams[fi]).unwrap();
                used -= g;
            }
            19 if step % 3 == 0 => {
                pool.set_attribute(PoolAttribute::UsedMemHigh, 0).unwrap();
                high = used;
            }
            _ => {}
        }
        let st = pool.stats();
        assert_eq!((st.used_current, st.used_high), (used, high), "step {step}: (current, high)");
        assert!(st.reserved_current >= st.used_current, "step {step}: {st:?}");
    }
    for (p, _, si) in live.drain(..) {
        rt.free_async(p, &streams[si]).unwrap();
    }
    for s in &streams {
        s.synchronize().unwrap();
    }
    assert_eq!(pool.stats().used_current, 0);
    assert_sane(&pool, "at the end");
}

// ---- release threshold -------------------------------------------------------------------

/// Makes segments of the pool: a live block of 1 MiB, then 3 MiB and 6 MiB
/// blocks freed on `s` (each needs a new segment). Returns the live block.
fn live_and_freed(rt: &hipmem::Runtime, pool: &MemPool, s: &Stream) -> DevicePtr {
    let live = pool.alloc_raw(MIB, s).unwrap();
    let p = pool.alloc_raw(3 * MIB, s).unwrap();
    let q = pool.alloc_raw(6 * MIB, s).unwrap();
    rt.free_async(p, s).unwrap();
    rt.free_async(q, s).unwrap();
    live
}

#[test]
fn release_threshold_zero_releases_unused_memory_at_every_kind_of_synchronization() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    for how in ["stream", "device", "event"] {
        let pool = new_pool(&rt, 0);
        assert_eq!(pool.attribute(PoolAttribute::ReleaseThreshold), 0);
        let live = live_and_freed(&rt, &pool, &s);
        let before = pool.stats();
        assert!(before.reserved_current >= 10 * MIB, "{how}: {before:?}");
        match how {
            "stream" => s.synchronize().unwrap(),
            "device" => dev.synchronize().unwrap(),
            _ => {
                let ev = dev.create_event().unwrap();
                ev.record(&s).unwrap();
                ev.synchronize().unwrap();
            }
        }
        let after = pool.stats();
        assert_eq!(after.used_current, MIB);
        assert!(after.reserved_current < before.reserved_current, "{how} synchronization released nothing");
        assert!(after.reserved_current >= after.used_current, "{how}: {after:?}");
        assert!(
            after.reserved_current - after.used_current < 2 * MIB,
            "{how} synchronization kept {} unused bytes with threshold 0",
            after.reserved_current - after.used_current
        );
        rt.free_async(live, &s).unwrap();
        s.synchronize().unwrap();
        assert_eq!(pool.stats().reserved_current, 0, "{how}: an unused pool kept memory with threshold 0");
    }
}

#[test]
fn release_threshold_max_keeps_memory_across_synchronization() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    pool.set_attribute(PoolAttribute::ReleaseThreshold, u64::MAX).unwrap();
    let live = live_and_freed(&rt, &pool, &s);
    let before = pool.stats().reserved_current;
    s.synchronize().unwrap();
    dev.synchronize().unwrap();
    let ev = dev.create_event().unwrap();
    ev.record(&s).unwrap();
    ev.synchronize().unwrap();
    assert_eq!(pool.stats().reserved_current, before, "memory was released with threshold UINT64_MAX");
    rt.free_async(live, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(pool.stats().reserved_current, before);
    // Kept memory serves new allocations without growing.
    let again = pool.alloc_raw(6 * MIB, &s).unwrap();
    assert_eq!(pool.stats().reserved_current, before);
    rt.free_async(again, &s).unwrap();
    // Lowering the threshold releases at the next synchronization.
    pool.set_release_threshold(0);
    s.synchronize().unwrap();
    assert_eq!(pool.stats().reserved_current, 0);
}

#[test]
fn release_threshold_bounds_the_unused_memory_kept() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    let threshold = 5 * MIB;
    pool.set_release_threshold(threshold);
    let live = live_and_freed(&rt, &pool, &s);
    s.synchronize().unwrap();
    let st = pool.stats();
    assert!(st.reserved_current >= st.used_current);
    assert!(
        st.reserved_current - st.used_current <= threshold,
        "{} unused bytes kept above the threshold {threshold}",
        st.reserved_current - st.used_current
    );
    rt.free_async(live, &s).unwrap();
    s.synchronize().unwrap();
    assert!(pool.stats().reserved_current <= threshold);
}

// ---- hipMemPoolTrimTo ------------------------------------------------------------------------

#[test]
fn trim_never_releases_live_or_pending_memory() {
    let rt = private_runtime();
    let dev = rt.device(0).unwrap();
    let s = stream0(&rt);
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    let pool = new_pool(&rt, 0);
    pool.set_release_threshold(u64::MAX);
    let live = pool.alloc_raw(MIB, &s).unwrap();
    let p = pool.alloc_raw(3 * MIB, &s).unwrap();
    let q = pool.alloc_raw(6 * MIB, &s).unwrap();
    let reserved = pool.stats().reserved_current;
    // The frees are queued behind a kernel: not complete yet.
    let t0 = std::time::Instant::now();
    s.delay(DELAY, &flag, 1).unwrap();
    rt.free_async(p, &s).unwrap();
    rt.free_async(q, &s).unwrap();
    pool.trim_to(0).unwrap();
    assert_pending!(t0, !s.query().unwrap(), "the delay kernel ended too early for this test");
    let st = pool.stats();
    assert!(
        st.reserved_current >= MIB + 3 * MIB + 6 * MIB,
        "trim released memory of a live allocation or of frees not completed: {st:?}"
    );
    assert_eq!(st.reserved_current, reserved);
    // The live allocation is intact and usable.
    rt.copy_host_to_device(live, &[0x5a; 4096]).unwrap();
    // Once the frees completed, trim releases everything but the live block's segment.
    s.synchronize().unwrap();
    assert_eq!(pool.stats().reserved_current, reserved, "threshold UINT64_MAX released memory");
    pool.trim_to(0).unwrap();
    let st = pool.stats();
    assert!(st.reserved_current >= MIB && st.reserved_current < reserved, "after trim_to(0): {st:?}");
    let mut back = [0u8; 4096];
    rt.copy_device_to_host(&mut back, live).unwrap();
    assert_eq!(back, [0x5a; 4096]);
    rt.free_async(live, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0);
    pool.check_invariants().unwrap();
}

#[test]
fn trim_keeps_at_least_the_bytes_asked_for() {
    let rt = private_runtime();
    let s = stream0(&rt);
    let pool = new_pool(&rt, 0);
    pool.set_release_threshold(u64::MAX);
    let blocks: Vec<DevicePtr> =
        [MIB, 3 * MIB, 6 * MIB, 12 * MIB].iter().map(|&n| pool.alloc_raw(n, &s).unwrap()).collect();
    for b in blocks {
        rt.free_async(b, &s).unwrap();
    }
    s.synchronize().unwrap();
    let mut reserved = pool.stats().reserved_current;
    assert!(reserved >= 22 * MIB);
    // Keeping more than is reserved releases nothing.
    pool.trim_to(reserved + 1).unwrap();
    assert_eq!(pool.stats().reserved_current, reserved);
    pool.trim_to(reserved).unwrap();
    assert_eq!(pool.stats().reserved_current, reserved);
    for keep in [reserved - 1, 15 * MIB, 7 * MIB, 3 * MIB, MIB, 1] {
        pool.trim_to(keep).unwrap();
        let now = pool.stats().reserved_current;
        assert!(now >= keep, "trim_to({keep}) left only {now} bytes reserved");
        assert!(now <= reserved, "trim grew the pool");
        reserved = now;
    }
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0);
    // The pool still works after being trimmed to nothing.
    let p = pool.alloc_raw(4096, &s).unwrap();
    rt.free_async(p, &s).unwrap();
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}
