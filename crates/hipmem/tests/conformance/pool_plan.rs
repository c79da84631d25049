//! Learned layouts: a pool on virtual memory that sees the same sequence of
//! allocations again and again (a training step) places each block of it
//! where an offline plan puts it, knowing when it will be freed. What a
//! user can see: the pool holds about the peak of live memory once the plan
//! runs, blocks keep their data (several streams), the statistics stay
//! exact, a changed sequence ends the plan and trim gives everything back,
//! `hipMemGetAddressRange` sees each planned block, and a free of memory the
//! plan does not hold is an error. A backend without virtual memory has
//! pools on segments, which do not plan: the tests say so.

use hipmem::{DevicePtr, MemPool, PoolAttribute, PoolBacking, PoolProps, Runtime, Stream};

use crate::pools::{MIB, fill_u32, stream0};
use crate::private_runtime;

/// A pool on virtual memory with the default budget that keeps what it
/// holds at synchronization; None (with a note) where there is none.
fn plan_pool(rt: &Runtime, test: &str) -> Option<MemPool> {
    let props = PoolProps { device: 0, handle_types: 0, max_size: 0 };
    let pool = MemPool::create_with_backing(rt, props, PoolBacking::VirtualMemory).unwrap();
    if pool.backing() != PoolBacking::VirtualMemory {
        eprintln!("{test}: skipped, the {} backend has no virtual memory", rt.backend_kind());
        assert!(pool.set_planning(true).is_err(), "a pool on segments cannot plan");
        return None;
    }
    pool.set_release_threshold(u64::MAX);
    pool.set_planning(true).unwrap();
    Some(pool)
}

/// Reads 4 KiB at `ptr + off` as u32s.
fn read_at(rt: &Runtime, ptr: DevicePtr, off: u64) -> Vec<u32> {
    let mut raw = vec![0u8; 4096];
    rt.copy_device_to_host(&mut raw, DevicePtr(ptr.0 + off)).expect("reading pool memory");
    raw.chunks_exact(4).map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Checks a block's canary at its start, middle and end.
fn check(rt: &Runtime, ptr: DevicePtr, bytes: u64, value: u32) {
    for off in [0, (bytes / 2) & !4095, bytes - 4096] {
        let got = read_at(rt, ptr, off);
        assert!(
            got.iter().all(|&v| v == value),
            "block {ptr} changed at +{off:#x}: {:#x} != {value:#x}",
            got[0]
        );
    }
}

/// One training-like step on `streams` (block i on stream i % len): a
/// forward pass keeps 16 blocks, a backward pass allocates 8 temporaries
/// and frees the forward blocks newest first; every block carries a canary
/// checked before its free. Returns the most bytes live at once.
fn step(rt: &Runtime, pool: &MemPool, streams: &[&Stream], seed: u32) -> u64 {
    let size = |i: u64| (1 + (i * 7) % 13) * MIB;
    let mut live: Vec<(DevicePtr, u64, u32, usize)> = Vec::new();
    let (mut now, mut peak) = (0u64, 0u64);
    for i in 0..16u64 {
        let s = (i as usize) % streams.len();
        let bytes = size(i);
        let p = pool.alloc_raw(bytes, streams[s]).unwrap();
        let value = seed.wrapping_mul(1000).wrapping_add(i as u32);
        fill_u32(rt, p, bytes, value, streams[s]);
        live.push((p, bytes, value, s));
        now += bytes;
        peak = peak.max(now);
    }
    for i in 16..24u64 {
        let s = (i as usize) % streams.len();
        let bytes = size(i);
        let t = pool.alloc_raw(bytes, streams[s]).unwrap();
        fill_u32(rt, t, bytes, 0xdead_0000 | i as u32, streams[s]);
        peak = peak.max(now + bytes);
        streams[s].synchronize().unwrap();
        check(rt, t, bytes, 0xdead_0000 | i as u32);
        rt.free_async(t, streams[s]).unwrap();
        for _ in 0..2 {
            let (p, bytes, value, s) = live.pop().unwrap();
            streams[s].synchronize().unwrap();
            check(rt, p, bytes, value);
            rt.free_async(p, streams[s]).unwrap();
            now -= bytes;
        }
    }
    assert!(live.is_empty());
    peak
}

fn reset_peaks(pool: &MemPool) {
    pool.set_attribute(PoolAttribute::ReservedMemHigh, 0).unwrap();
    pool.set_attribute(PoolAttribute::UsedMemHigh, 0).unwrap();
}

#[test]
fn a_repeating_step_is_planned_and_the_pool_holds_its_peak() {
    let rt = private_runtime();
    let Some(pool) = plan_pool(&rt, "a_repeating_step_is_planned_and_the_pool_holds_its_peak") else {
        return;
    };
    let s = stream0(&rt);
    for k in 0..4 {
        step(&rt, &pool, &[&s], k);
    }
    let c = pool.plan_counts();
    assert_eq!(c.plans, 1, "{c:?}");
    s.synchronize().unwrap();
    reset_peaks(&pool);
    let served = pool.plan_counts().served;
    let mut peak = 0;
    for k in 4..8 {
        peak = peak.max(step(&rt, &pool, &[&s], k));
    }
    let c = pool.plan_counts();
    assert_eq!(c.served - served, 4 * 24, "every allocation of a step is served: {c:?}");
    assert_eq!(c.ended, 0, "{c:?}");
    let st = pool.stats();
    assert_eq!(st.used_high, peak, "UsedMemHigh is the step's peak");
    let ratio = st.reserved_high as f64 / peak as f64;
    assert!(ratio <= 1.03, "the pool holds {} bytes for a peak of {peak} ({ratio:.3})", st.reserved_high);
    s.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
    // Trim gives everything back, the running plan's arena too; the plan
    // makes a new one at its next quiet point and serves again.
    pool.trim_to(0).unwrap();
    assert_eq!(pool.stats().reserved_current, 0);
    let served = pool.plan_counts().served;
    step(&rt, &pool, &[&s], 9);
    assert_eq!(pool.plan_counts().served - served, 24);
}

#[test]
fn planned_blocks_keep_their_data_on_several_streams() {
    let rt = private_runtime();
    let Some(pool) = plan_pool(&rt, "planned_blocks_keep_their_data_on_several_streams") else { return };
    let (a, b) = (stream0(&rt), stream0(&rt));
    for k in 0..8 {
        step(&rt, &pool, &[&a, &b], k);
    }
    let c = pool.plan_counts();
    assert_eq!(c.plans, 1, "{c:?}");
    assert!(c.served > 0, "{c:?}");
    a.synchronize().unwrap();
    b.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
}

#[test]
fn a_changed_sequence_ends_the_plan_and_its_memory_goes_back() {
    let rt = private_runtime();
    let Some(pool) = plan_pool(&rt, "a_changed_sequence_ends_the_plan_and_its_memory_goes_back") else {
        return;
    };
    let s = stream0(&rt);
    for k in 0..4 {
        step(&rt, &pool, &[&s], k);
    }
    // A planned block: hipMemGetAddressRange sees it, not the arena.
    let before = pool.plan_counts().served;
    let p = pool.alloc_raw(MIB, &s).unwrap();
    assert_eq!(pool.plan_counts().served, before + 1, "the step's first block is planned");
    assert_eq!(rt.address_range(p.0 + 4096).unwrap(), (p, MIB));
    rt.free_async(p, &s).unwrap();
    // A double free of a planned block is an error, and changes nothing.
    assert!(rt.free_async(p, &s).is_err());
    // Something the plan does not expect ends it.
    let odd = pool.alloc_raw(3 * MIB + 512, &s).unwrap();
    assert_eq!(pool.plan_counts().ended, 1);
    fill_u32(&rt, odd, 3 * MIB + 512, 7, &s);
    s.synchronize().unwrap();
    check(&rt, odd, 3 * MIB, 7);
    rt.free_async(odd, &s).unwrap();
    s.synchronize().unwrap();
    pool.trim_to(0).unwrap();
    let st = pool.stats();
    assert_eq!((st.used_current, st.reserved_current), (0, 0));
    pool.check_invariants().unwrap();
    // Turned off, a pool does not plan again.
    pool.set_planning(false).unwrap();
    assert!(!pool.planning());
    let plans = pool.plan_counts().plans;
    for k in 0..4 {
        step(&rt, &pool, &[&s], k);
    }
    assert_eq!(pool.plan_counts().plans, plans);
}

/// One step of `a_miss_while_a_plan_runs_grows_by_what_it_needs`: 16 small
/// blocks of 1–4 MiB one after the other (each freed before the next,
/// except the one `hold` names, freed only after its successor is
/// allocated: the successor's planned place is still in use), and a 64 MiB
/// block live from the eighth to the step's end. Returns the reserved bytes
/// just after the successor.
fn step_with_hold(rt: &Runtime, pool: &MemPool, s: &Stream, hold: Option<usize>) -> u64 {
    let mut big = None;
    let mut held: Option<(DevicePtr, u64)> = None;
    let mut reserved_after = 0;
    for i in 0..16usize {
        if i == 8 {
            let p = pool.alloc_raw(64 * MIB, s).unwrap();
            fill_u32(rt, p, 64 * MIB, 0x64, s);
            big = Some(p);
        }
        let bytes = (1 + i as u64 % 4) * MIB;
        let p = pool.alloc_raw(bytes, s).unwrap();
        fill_u32(rt, p, bytes, 0x5000 + i as u32, s);
        if let Some((h, hb)) = held.take() {
            reserved_after = pool.stats().reserved_current;
            s.synchronize().unwrap();
            check(rt, h, hb, 0x5000 + i as u32 - 1);
            rt.free_async(h, s).unwrap();
        }
        if hold == Some(i) {
            held = Some((p, bytes));
        } else {
            s.synchronize().unwrap();
            check(rt, p, bytes, 0x5000 + i as u32);
            rt.free_async(p, s).unwrap();
        }
    }
    let big = big.expect("allocated at the eighth block");
    s.synchronize().unwrap();
    check(rt, big, 64 * MIB, 0x64);
    rt.free_async(big, s).unwrap();
    reserved_after
}

/// A planned allocation whose place is still in use takes the usual path;
/// while a plan runs, the usual path grows by what the request needs (in
/// whole units), not by more as it does while the pool learns: the plan
/// serves the steps, and a miss is a one-off. The plan goes on.
#[test]
fn a_miss_while_a_plan_runs_grows_by_what_it_needs() {
    let rt = private_runtime();
    let Some(pool) = plan_pool(&rt, "a_miss_while_a_plan_runs_grows_by_what_it_needs") else { return };
    let s = stream0(&rt);
    // A pool of 1 GiB: the usual path would grow by up to twice a request.
    let keep = pool.alloc_raw(1024 * MIB, &s).unwrap();
    for _ in 0..6 {
        step_with_hold(&rt, &pool, &s, None);
    }
    let c = pool.plan_counts();
    assert_eq!((c.plans, c.ended), (1, 0), "{c:?}");
    let before = pool.stats().reserved_current;
    // Block 10 (3 MiB) is held past block 11's allocation (4 MiB).
    let after = step_with_hold(&rt, &pool, &s, Some(10));
    let c2 = pool.plan_counts();
    assert!(c2.missed > c.missed, "block 11's place was in use: {c2:?}");
    assert_eq!(c2.ended, 0, "a miss does not end the plan: {c2:?}");
    let unit = pool.mapping_unit().unwrap();
    let need = (4 * MIB).div_ceil(unit) * unit;
    assert!(
        after - before <= need,
        "the miss grew the pool by {} bytes for a request of 4 MiB (units of {unit})",
        after - before
    );
    // The next steps are served again.
    let served = pool.plan_counts().served;
    step_with_hold(&rt, &pool, &s, None);
    assert_eq!(pool.plan_counts().served - served, 17, "{:?}", pool.plan_counts());
    rt.free_async(keep, &s).unwrap();
    s.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
}

/// One longer training-like step for the first-steps tests: 40 blocks kept
/// (the first 32 small), then 20 temporaries each freeing two of them,
/// newest first; every block carries a canary checked before its free. A
/// first step also allocates a one-off block at its fourth allocation (a
/// library's workspace) and four at its end (an optimizer's state), kept
/// and returned. With `odd`, the allocation at that position asks for a
/// size the step never had. Returns the most bytes live at once (one-offs
/// not counted) and the one-offs.
fn long_step(
    rt: &Runtime,
    pool: &MemPool,
    s: &Stream,
    seed: u32,
    first: bool,
    odd: Option<u64>,
) -> (u64, Vec<DevicePtr>) {
    long_step_scaled(rt, pool, s, seed, first, odd, 1)
}

/// [`long_step`] with its large blocks `scale` times as large.
fn long_step_scaled(
    rt: &Runtime,
    pool: &MemPool,
    s: &Stream,
    seed: u32,
    first: bool,
    odd: Option<u64>,
    scale: u64,
) -> (u64, Vec<DevicePtr>) {
    let size = |i: u64| {
        if odd == Some(i) {
            77 * MIB
        } else if i < 32 {
            (64 + 4 * i) << 10
        } else {
            scale * ((1 + i % 4) * 8 * MIB + i * (64 << 10))
        }
    };
    let mut one_offs = Vec::new();
    let mut live: Vec<(DevicePtr, u64, u32)> = Vec::new();
    let (mut now, mut peak) = (0u64, 0u64);
    let alloc = |i: u64, live: &mut Vec<(DevicePtr, u64, u32)>| {
        let bytes = size(i);
        let p = pool.alloc_raw(bytes, s).unwrap();
        let value = seed.wrapping_mul(1000).wrapping_add(i as u32);
        fill_u32(rt, p, bytes, value, s);
        live.push((p, bytes, value));
    };
    for i in 0..40u64 {
        if first && i == 3 {
            one_offs.push(pool.alloc_raw(8 * MIB, s).unwrap());
        }
        alloc(i, &mut live);
        now += size(i);
        peak = peak.max(now);
    }
    for i in 40..60u64 {
        alloc(i, &mut live);
        peak = peak.max(now + size(i));
        let free = |(p, bytes, value): (DevicePtr, u64, u32)| {
            s.synchronize().unwrap();
            check(rt, p, bytes, value);
            rt.free_async(p, s).unwrap();
        };
        free(live.pop().unwrap());
        for _ in 0..2 {
            let b = live.pop().unwrap();
            now -= b.1;
            free(b);
        }
    }
    assert!(live.is_empty());
    if first {
        for j in 0..4 {
            one_offs.push(pool.alloc_raw(4 * MIB + j * 4096, s).unwrap());
        }
    }
    (peak, one_offs)
}

/// The first steps of a training loop are where a pool that learns holds
/// the most: the first step has one-off allocations (a workspace, an
/// optimizer's state) and the period is confirmed only over the second and
/// third. The second step falls in step with the first past its one-offs
/// and is planned from it (provisionally, for the rest of that step), the
/// third from the second: the pool holds about the peak from the second
/// step on, and every block keeps its data.
#[test]
fn the_first_steps_are_planned_from_the_step_before() {
    let rt = private_runtime();
    let Some(pool) = plan_pool(&rt, "the_first_steps_are_planned_from_the_step_before") else { return };
    let s = stream0(&rt);
    let (_, one_offs) = long_step(&rt, &pool, &s, 0, true, None);
    let kept: u64 = 8 * MIB + (0..4).map(|j| 4 * MIB + j * 4096).sum::<u64>();
    assert_eq!(pool.plan_counts().served, 0, "the first step is learned");
    s.synchronize().unwrap();
    reset_peaks(&pool);
    let mut peak = 0;
    for k in 1..3 {
        let served = pool.plan_counts().served;
        peak = peak.max(long_step(&rt, &pool, &s, k, false, None).0);
        let c = pool.plan_counts();
        assert!(c.served - served >= 20, "step {k} is served from a plan of the step before: {c:?}");
    }
    let st = pool.stats();
    let ratio = st.reserved_high as f64 / (peak + kept) as f64;
    assert!(
        ratio <= 1.05,
        "the second and third steps held {} bytes for a peak of {} ({ratio:.3})",
        st.reserved_high,
        peak + kept
    );
    for k in 3..6 {
        long_step(&rt, &pool, &s, k, false, None);
    }
    let c = pool.plan_counts();
    assert_eq!((c.missed, c.ended), (0, 0), "{c:?}");
    for p in one_offs {
        rt.free_async(p, &s).unwrap();
    }
    s.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
}

/// A plan that an unexpected allocation ends in the middle of a step gives
/// its arena back at once, its live blocks taken over by the pool's usual
/// path: the rest of the step reuses the arena's free memory instead of
/// growing the pool, the taken-over blocks keep their data and free as any
/// other, and the statistics stay exact.
#[test]
fn an_ended_plans_arena_serves_the_rest_of_its_step() {
    let rt = private_runtime();
    let Some(pool) = plan_pool(&rt, "an_ended_plans_arena_serves_the_rest_of_its_step") else { return };
    let s = stream0(&rt);
    for k in 0..5 {
        long_step(&rt, &pool, &s, k, false, None);
    }
    let c = pool.plan_counts();
    assert!(c.served > 0 && c.ended == 0, "{c:?}");
    s.synchronize().unwrap();
    let before = pool.stats().reserved_current;
    // The 36th allocation (34 blocks live) is one the plan does not expect.
    long_step(&rt, &pool, &s, 5, false, Some(35));
    let c = pool.plan_counts();
    assert_eq!(c.ended, 1, "{c:?}");
    let after = pool.stats().reserved_current;
    assert!(
        after <= before + 77 * MIB,
        "the rest of the step grew the pool from {before} to {after} bytes (77 MiB were new to it)"
    );
    s.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
    // The pool learns again and plans the steps that follow.
    for k in 6..12 {
        long_step(&rt, &pool, &s, k, false, None);
    }
    assert!(pool.plan_counts().plans > c.plans, "{:?}", pool.plan_counts());
    s.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
}

/// Each new plan's arena takes over the physical memory of the arena
/// before it where that is wholly free (kept mapped where it is, the new
/// piece laid over it), instead of giving it back and creating as much
/// again: a plan that follows another creates and gives back only about
/// the difference in size, the pool still holds about the step's peak, and
/// every block keeps its data (`long_step` checks each).
#[test]
fn a_new_plans_arena_keeps_the_memory_of_the_arena_before_it() {
    let rt = private_runtime();
    let Some(pool) = plan_pool(&rt, "a_new_plans_arena_keeps_the_memory_of_the_arena_before_it") else {
        return;
    };
    let s = stream0(&rt);
    let mut peak = 0;
    let mut followed = 0;
    for k in 0..3 {
        let plans = pool.plan_counts().plans;
        let before = pool.backend_calls().unwrap();
        peak = peak.max(long_step_scaled(&rt, &pool, &s, k, false, None, 3).0);
        let after = pool.backend_calls().unwrap();
        let reserved = pool.stats().reserved_current;
        let (created, released) =
            (after.bytes_created - before.bytes_created, after.bytes_released - before.bytes_released);
        if plans >= 1 && pool.plan_counts().plans > plans {
            followed += 1;
            assert!(
                created <= reserved / 4 && released <= reserved / 4,
                "step {k}: a plan that followed another created {created} and released {released} bytes ({reserved} reserved)"
            );
        }
    }
    assert!(followed >= 1, "a plan followed another: {:?}", pool.plan_counts());
    let st = pool.stats();
    let ratio = st.reserved_high as f64 / peak as f64;
    assert!(ratio <= 1.05, "the pool held {} bytes for a peak of {peak} ({ratio:.3})", st.reserved_high);
    s.synchronize().unwrap();
    assert_eq!(pool.stats().used_current, 0);
    pool.check_invariants().unwrap();
}

/// A plan's first arena is laid out in the memory the first steps left
/// mapped where that holds no more than giving it back and growing anew:
/// the units under the plan's blocks stay mapped. The learning steps map
/// their blocks unit by unit; at the plan's start (everything free) the
/// pool unmaps at most a quarter of them, creates no more than it unmaps,
/// and then holds at most 1.03 of the step's peak with every block
/// keeping its data. (Giving everything back first, the usual way before,
/// unmapped every unit and created the arena anew.)
#[test]
fn a_plan_starts_in_the_memory_the_first_steps_left_mapped() {
    let rt = private_runtime();
    let Some(pool) = plan_pool(&rt, "a_plan_starts_in_the_memory_the_first_steps_left_mapped") else {
        return;
    };
    let s = stream0(&rt);
    step(&rt, &pool, &[&s], 0);
    let learned = pool.backend_calls().unwrap();
    assert!(learned.maps >= 16, "the first step maps its blocks unit by unit: {learned:?}");
    let mut k = 1;
    while pool.plan_counts().served == 0 && k < 8 {
        step(&rt, &pool, &[&s], k);
        k += 1;
    }
    let c = pool.plan_counts();
    assert!(c.served > 0, "a plan serves: {c:?}");
    let after = pool.backend_calls().unwrap();
    let unmaps = after.unmaps - learned.unmaps;
    let created = after.bytes_created - learned.bytes_created;
    assert!(
        unmaps * 4 <= learned.maps,
        "{unmaps} unmaps at the plan's start, of {} units mapped: {learned:?} -> {after:?}",
        learned.maps
    );
    assert!(
        created <= learned.bytes_created / 4,
        "{created} bytes created for the arena, {} in the first step: {learned:?} -> {after:?}",
        learned.bytes_created
    );
    s.synchronize().unwrap();
    reset_peaks(&pool);
    let mut peak = 0;
    for k in 10..13 {
        peak = peak.max(step(&rt, &pool, &[&s], k));
    }
    let st = pool.stats();
    let ratio = st.reserved_high as f64 / peak as f64;
    assert!(ratio <= 1.03, "the pool holds {} bytes for a peak of {peak} ({ratio:.3})", st.reserved_high);
    assert_eq!(pool.plan_counts().ended, 0);
    s.synchronize().unwrap();
    pool.check_invariants().unwrap();
}
