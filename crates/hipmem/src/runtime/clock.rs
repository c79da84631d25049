//! A monotonic clock for policy that counts in milliseconds (idle release):
//! the kernel's coarse clock where its tick is fine enough (it returns the
//! time of the last tick, without reading the timestamp counter: on the CPU
//! backend the precise clock was 5% of a slow-path allocation), the precise
//! clock otherwise.
#![forbid(unsafe_code)]

use std::sync::OnceLock;
#[cfg(any(test, not(target_os = "linux")))]
use std::time::Instant;

/// Nanoseconds on a monotonic clock with an arbitrary origin, read to within
/// `resolution_ns` at worst: the coarse clock (Linux's
/// `CLOCK_MONOTONIC_COARSE`) where its tick is at most that, else the
/// precise one. On Linux both count from the same origin (a coarse reading
/// lags a precise one by less than a tick).
pub fn monotonic_ns(resolution_ns: u64) -> u64 {
    if coarse_tick_ns() <= resolution_ns {
        return coarse_ns();
    }
    precise_ns()
}

/// The precise clock (`CLOCK_MONOTONIC`: the coarse clock's timeline).
#[cfg(target_os = "linux")]
fn precise_ns() -> u64 {
    timespec_ns(rustix::time::clock_gettime(rustix::time::ClockId::Monotonic))
}

/// The precise clock, as nanoseconds since the first reading in the process.
#[cfg(not(target_os = "linux"))]
fn precise_ns() -> u64 {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// The coarse clock's tick (`clock_getres`), read once; `u64::MAX` where
/// there is none.
#[cfg(target_os = "linux")]
fn coarse_tick_ns() -> u64 {
    static TICK: OnceLock<u64> = OnceLock::new();
    *TICK.get_or_init(|| match rustix::time::clock_getres(rustix::time::ClockId::MonotonicCoarse) {
        t if t.tv_sec == 0 && t.tv_nsec == 0 => u64::MAX,
        t => timespec_ns(t),
    })
}

#[cfg(not(target_os = "linux"))]
fn coarse_tick_ns() -> u64 {
    u64::MAX
}

#[cfg(target_os = "linux")]
fn coarse_ns() -> u64 {
    timespec_ns(rustix::time::clock_gettime(rustix::time::ClockId::MonotonicCoarse))
}

#[cfg(not(target_os = "linux"))]
fn coarse_ns() -> u64 {
    precise_ns()
}

#[cfg(target_os = "linux")]
fn timespec_ns(t: rustix::time::Timespec) -> u64 {
    (t.tv_sec.max(0) as u64).saturating_mul(1_000_000_000).saturating_add(t.tv_nsec.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_never_go_backwards_and_follow_the_precise_clock() {
        for resolution in [0, 1_000_000, 10_000_000, u64::MAX] {
            let t0 = monotonic_ns(resolution);
            let start = Instant::now();
            let mut last = t0;
            while start.elapsed() < std::time::Duration::from_millis(30) {
                let t = monotonic_ns(resolution);
                assert!(t >= last, "clock went back from {last} to {t} (resolution {resolution})");
                last = t;
            }
            // 30 ms passed. A coarse reading lags by about a tick, by more
            // while a loaded machine delays its ticks: it must catch up
            // within 100 ms more.
            let tick = if coarse_tick_ns() <= resolution { coarse_tick_ns() } else { 0 };
            let want = 30_000_000u64.saturating_sub(2 * tick);
            let deadline = Instant::now() + std::time::Duration::from_millis(100);
            while last - t0 < want && Instant::now() < deadline {
                let t = monotonic_ns(resolution);
                assert!(t >= last, "clock went back from {last} to {t} (resolution {resolution})");
                last = t;
            }
            let moved = last - t0;
            assert!(moved >= want, "moved {moved} ns in 30-130 ms (resolution {resolution})");
        }
    }
}
