//! The pool's used-bytes statistics without a shared counter.
//!
//! `UsedMemCurrent` must count every allocation and free when it is called,
//! and `UsedMemHigh` is its maximum. One shared counter would make every
//! allocation on every thread write the same cache line; instead each stream
//! slot counts its own bytes (`used`), and the current value is their sum.
//!
//! For the maximum, each slot also holds a *baseline*. Invariant: the sum of
//! all baselines is at most the high watermark. As long as every slot's
//! `used` stays at or below its baseline, the total cannot exceed the
//! watermark, so the fast path only compares two numbers under the slot's
//! own lock. When a slot goes past its baseline, the pool takes an exact
//! sample (the sum over all slots), raises the watermark if needed, sets
//! that slot's baseline to its `used`, and lowers other slots' baselines
//! toward their `used` until the invariant holds again (`rebalance`).
//!
//! For any sequence of pool calls that do not overlap in time (one thread, or
//! threads that synchronize) the watermark is exact. Calls that do overlap
//! are counted exactly in `UsedMemCurrent`; their transient peak is caught by
//! whichever sample sees it.
#![forbid(unsafe_code)]

use std::sync::Arc;

use super::stream_cache::Slot;

/// Lowers baselines (never below a slot's `used`) until their sum is at most
/// `high`. Slots with the most slack give first.
pub fn rebalance(slots: &[Arc<Slot>], high: i64) {
    let mut views: Vec<(usize, i64, i64)> = slots
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let st = s.lock();
            (i, st.used, st.baseline.max(st.used))
        })
        .collect();
    let mut excess: i64 = views.iter().map(|v| v.2).sum::<i64>() - high;
    if excess <= 0 {
        return;
    }
    views.sort_by_key(|v| std::cmp::Reverse(v.2 - v.1));
    for (i, _, _) in views {
        if excess <= 0 {
            break;
        }
        let mut st = slots[i].lock();
        let slack = (st.baseline - st.used).max(0);
        let cut = slack.min(excess);
        st.baseline -= cut;
        excess -= cut;
    }
}
