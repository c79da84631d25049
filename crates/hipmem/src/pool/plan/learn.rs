//! Learning a period (step 1 of the module's description, and the first
//! steps' alignment of step 5): the log of recent allocations, when each
//! was freed, the rolling hash that proposes a period, and the stretches a
//! plan is built from.
#![forbid(unsafe_code)]

use std::collections::VecDeque;

use super::super::addr_hash::AddrMap;
use super::{ALIGN_CHAIN, ALIGN_SPAN, ALIGN_WORK, KEEP, MAX_PERIOD, MIN_PERIOD, Sig, WINDOW};

/// The learner: the recent allocations and when each was freed.
#[derive(Default)]
pub(super) struct Learner {
    /// Ordinal of `log[0]`.
    base: u64,
    /// Each allocation, oldest first (one entry per allocation, so that
    /// recording one writes one place of memory: in a framework's step the
    /// learner's state is cold between two calls).
    log: VecDeque<Logged>,
    live: AddrMap<u64>,
    /// The last ordinal that ended each window hash.
    last_seen: AddrMap<u64>,
    /// Allocations since the last window never seen before.
    since_novel: u64,
    rolling: u64,
    pub(super) period: u64,
    pub(super) matched: u64,
    pub(super) min_period: u64,
    /// Allocations since learning (re)started without a plan.
    pub(super) fruitless: u64,
    /// Allocations since a period was last confirmed (planned or not) or
    /// a provisional plan made.
    pub(super) since_candidate: u64,
    /// Bytes of the blocks in `live`, and their most since learning (re)started.
    live_bytes: u64,
    pub(super) peak_live: u64,
    /// The distance back to the stretch the last allocation's window fell
    /// in step with, if it proposed one (see [`Learner::align`]).
    pub(super) proposed: Option<u64>,
    /// The last distance a provisional plan was tried for, and when.
    pub(super) tried: (u64, u64),
}

/// What the learner keeps of one allocation.
#[derive(Copy, Clone, Debug)]
struct Logged {
    sig: Sig,
    /// How many allocations had been made when it was freed (u64::MAX: live).
    freed_at: u64,
    /// The allocation before it that ended the same window (u64::MAX: none),
    /// a chain through every occurrence of a window.
    prev_same: u64,
}

/// Multiplier of the rolling hash.
const MUL: u64 = 0x100_0000_01B3;

impl Learner {
    pub(super) fn next(&self) -> u64 {
        self.base + self.log.len() as u64
    }

    fn sig(&self, ordinal: u64) -> Option<Sig> {
        self.logged(ordinal).map(|l| l.sig)
    }

    fn logged(&self, ordinal: u64) -> Option<&Logged> {
        ordinal.checked_sub(self.base).and_then(|i| self.log.get(i as usize))
    }

    /// Records an allocation; returns its ordinal and, when a period is
    /// confirmed, the period.
    pub(super) fn observe(&mut self, sig: Sig) -> (u64, Option<u64>) {
        let n = self.next();
        let h = sig.hash64();
        self.log.push_back(Logged { sig, freed_at: u64::MAX, prev_same: u64::MAX });
        self.fruitless += 1;
        self.proposed = None;
        // Rolling hash of the last WINDOW allocations.
        self.rolling = self.rolling.wrapping_mul(MUL).wrapping_add(h);
        let len = self.log.len();
        if len > WINDOW {
            let old = self.log[len - 1 - WINDOW].sig.hash64();
            self.rolling = self.rolling.wrapping_sub(old.wrapping_mul(MUL.wrapping_pow(WINDOW as u32)));
        }
        self.since_candidate += 1;
        if self.period > 0 && self.sig(n - self.period.min(n)) == Some(sig) && n >= self.period {
            self.matched += 1;
        } else {
            self.period = 0;
            self.matched = 0;
        }
        if len >= WINDOW {
            let key = self.rolling;
            // (One lookup: the window's last ordinal is replaced by this one.)
            let last = self.last_seen.insert(key, n);
            if let (Some(l), Some(f)) = (self.log.back_mut(), last) {
                l.prev_same = f;
            }
            // Windows seen before, shortly after one never seen: the
            // sequence may have fallen in step with an earlier stretch (a
            // step's start, past the first step's one-off allocations):
            // propose a provisional plan.
            if last.is_none() {
                self.since_novel = 0;
            } else if self.since_novel < ALIGN_SPAN {
                self.since_novel += 1;
                self.proposed = self.align(n, last);
            }
            if self.period == 0 {
                if let Some(f) = last {
                    // A distance shorter than the least period looked for (a
                    // repetition inside the step that was rejected, or too
                    // short) proposes its least multiple that is long enough:
                    // a step made of repeated parts, with nothing freed until
                    // its end, has no window of its own to find it by.
                    let least = self.min_period.max(MIN_PERIOD as u64);
                    let p = (n - f).max(1);
                    let p = if p < least { least.div_ceil(p) * p } else { p };
                    if p <= MAX_PERIOD as u64
                        && p <= n
                        && (0..WINDOW as u64).all(|i| self.sig(n - i) == self.sig(n - p - i.min(n - p)))
                    {
                        self.period = p;
                        self.matched = WINDOW as u64;
                    }
                }
            }
        }
        self.compact();
        let confirmed = (self.period > 0 && self.matched >= self.period).then_some(self.period);
        (n, confirmed)
    }

    /// Drops the oldest allocations beyond [`KEEP`].
    fn compact(&mut self) {
        if (self.log.len() as u64) < KEEP + MAX_PERIOD as u64 {
            return;
        }
        let drop = MAX_PERIOD;
        self.log.drain(..drop);
        self.base += drop as u64;
        let base = self.base;
        self.last_seen.retain(|_, &mut o| o >= base);
        self.live.retain(|_, &mut o| o >= base);
        let log = &self.log;
        self.live_bytes = self.live.values().map(|&o| log[(o - base) as usize].sig.size).sum();
    }

    pub(super) fn allocated(&mut self, ordinal: u64, addr: u64) {
        if let Some(sig) = self.sig(ordinal) {
            if let Some(old) = self.live.insert(addr, ordinal) {
                // An address handed out again without a free seen: forget the old.
                self.live_bytes -= self.sig(old).map_or(0, |s| s.size).min(self.live_bytes);
            }
            self.live_bytes += sig.size;
            self.peak_live = self.peak_live.max(self.live_bytes);
        }
    }

    pub(super) fn freed(&mut self, addr: u64) {
        let Some(o) = self.live.remove(&addr) else { return };
        let now = self.next();
        if let Some(l) = o.checked_sub(self.base).and_then(|i| self.log.get_mut(i as usize)) {
            l.freed_at = now;
            self.live_bytes -= l.sig.size.min(self.live_bytes);
        }
    }

    /// The sizes, streams and lifetimes of the period before the last
    /// `period` allocations.
    pub(super) fn period_before(&self, period: u64) -> Option<(Vec<Sig>, Vec<Option<u64>>)> {
        self.stretch_ending(self.next().checked_sub(period)?, period)
    }

    /// The sizes, streams and lifetimes (None: not freed yet) of the `len`
    /// allocations before ordinal `end`, if the log still has them.
    fn stretch_ending(&self, end: u64, len: u64) -> Option<(Vec<Sig>, Vec<Option<u64>>)> {
        let start = end.checked_sub(len)?;
        if start < self.base {
            return None;
        }
        let (mut sigs, mut lens) = (Vec::new(), Vec::new());
        for o in start..end {
            let i = (o - self.base) as usize;
            let l = &self.log[i];
            sigs.push(l.sig);
            let f = l.freed_at;
            lens.push((f != u64::MAX).then(|| f - o));
        }
        Some((sigs, lens))
    }

    /// The distance to the earlier occurrence of the window ending at `n`
    /// (more than two windows back) that the sequence before the window
    /// matches longest, going back past blocks the earlier stretch never
    /// freed (one-off allocations of a first step); the newest of equals.
    /// None if none matches a single allocation before the window (a
    /// window inside repeated layers matches every layer alike). `last` is
    /// the window's latest occurrence before `n`, where the chain starts.
    fn align(&self, n: u64, last: Option<u64>) -> Option<u64> {
        let mut best: Option<(u64, u64)> = None; // (score, distance)
        let mut f = last;
        // (At most ALIGN_CHAIN occurrences and ALIGN_WORK comparisons: a
        // window inside repeated layers has many, each matching long.)
        let (mut seen, mut work) = (0, 0);
        while let Some(at) = f.filter(|&at| at >= self.base && at != u64::MAX) {
            seen += 1;
            if seen > ALIGN_CHAIN || work >= ALIGN_WORK {
                break;
            }
            let d = n - at;
            if d > MAX_PERIOD as u64 {
                break;
            }
            if d > 2 * WINDOW as u64 && (0..WINDOW as u64).all(|i| self.sig(n - i) == self.sig(at - i)) {
                let score = self.match_back(
                    n - WINDOW as u64,
                    at.saturating_sub(WINDOW as u64),
                    at,
                    ALIGN_WORK - work,
                );
                work += score + 1;
                // (Occurrences come newest first: on a tie the newest wins,
                // the stretch most like what follows.)
                if best.is_none_or(|(b, _)| score > b) {
                    best = Some((score, d));
                }
            }
            f = self.logged(at).map(|l| l.prev_same);
        }
        let (score, d) = best?;
        tracing::trace!(target: "hipmem::pool", "aligned at {n} with {d} back: {score} more matched");
        (score >= 1).then_some(d)
    }

    /// How many allocations before `a` match those before `b` (both
    /// included), skipping on `b`'s side blocks never freed; `a` stays
    /// above `floor`; at most `limit` steps.
    fn match_back(&self, mut a: u64, mut b: u64, floor: u64, limit: u64) -> u64 {
        let mut score = 0;
        for _ in 0..limit.min(512) {
            if a <= floor || b < self.base {
                break;
            }
            if self.sig(a) == self.sig(b) {
                score += 1;
                a -= 1;
            } else if self.logged(b).is_none_or(|l| l.freed_at != u64::MAX) {
                break;
            }
            let Some(earlier) = b.checked_sub(1) else { break };
            b = earlier;
        }
        score
    }

    /// The sizes, streams and lifetimes (so far) of the stretch a distance
    /// was just proposed for: the `period` allocations before the window
    /// that proposed it (the window starts the next occurrence).
    pub(super) fn occurrence(&self, period: u64) -> Option<(Vec<Sig>, Vec<Option<u64>>)> {
        self.stretch_ending(self.next().checked_sub(WINDOW as u64)?, period)
    }

    pub(super) fn forget(&mut self) {
        *self = Learner { base: self.next(), ..Learner::default() };
    }
}
