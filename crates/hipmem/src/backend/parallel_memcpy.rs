//! A host memcpy spread over a small team of persistent threads, for the
//! staged copies of pageable memory (one copy thread cannot keep up with a
//! DMA engine).
//!
//! [`copy_parallel`] is a safe function. It cuts the copy into parts and
//! publishes them as one job; the caller and every worker of the team claim
//! parts from the job's counter until none is left, so a worker that is
//! slow to wake (an idle virtual processor can take hundreds of
//! microseconds) only takes fewer parts instead of holding the copy up. The
//! caller returns once every claimed part is copied; a worker that comes
//! later claims nothing and touches no memory, so the borrowed slices
//! outlive every access, as with `std::thread::scope`, without spawning
//! threads per call.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How a copy stores to its destination.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stores {
    /// Ordinary stores: the destination ends up in the processor's caches.
    Cached,
    /// Non-temporal stores (where the processor has them): the destination
    /// goes to memory without first being read into the caches.
    Streaming,
}

/// How long a worker polls before it sleeps: waking a sleeping thread costs
/// tens to hundreds of microseconds on a virtual machine, a large part of the
/// time one chunk of a staged copy takes, and the chunks come in bursts.
const SPIN: Duration = Duration::from_micros(200);

/// One copy, cut into `parts` parts of `part` bytes (the last may be shorter).
struct Job {
    dst: usize,
    src: usize,
    len: usize,
    part: usize,
    parts: usize,
    stores: Stores,
    /// The next part to claim (claims past `parts` copy nothing).
    next: AtomicUsize,
    /// Parts copied.
    done: AtomicUsize,
}

impl Job {
    /// Claims and copies parts until none is left.
    fn help(&self) {
        loop {
            let i = self.next.fetch_add(1, Ordering::AcqRel);
            if i >= self.parts {
                return;
            }
            let off = i * self.part;
            let n = self.part.min(self.len - off);
            // SAFETY: `copy_parallel` made `dst` and `src` from a `&mut [u8]`
            // and a `&[u8]` of `len` bytes each; part `i` (claimed by exactly
            // one thread) lies within them; and `copy_parallel` does not
            // return (so the borrows do not end) before `done` counts every
            // part, this one included.
            unsafe { copy_raw((self.dst + off) as *mut u8, (self.src + off) as *const u8, n, self.stores) };
            self.done.fetch_add(1, Ordering::AcqRel);
        }
    }
}

/// The worker threads and the job they help with.
struct Team {
    /// Bumped (under `current`'s lock) each time a job is published.
    generation: AtomicU64,
    current: Mutex<Option<Arc<Job>>>,
    wake: Condvar,
    /// Workers asleep on `wake`.
    sleepers: AtomicUsize,
    /// Workers started.
    workers: AtomicUsize,
}

impl Team {
    fn work(&self) {
        let mut seen = 0u64;
        loop {
            let start = Instant::now();
            let mut generation = self.generation.load(Ordering::Acquire);
            while generation == seen && start.elapsed() < SPIN {
                std::hint::spin_loop();
                generation = self.generation.load(Ordering::Acquire);
            }
            let job = {
                let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
                if self.generation.load(Ordering::Acquire) == seen {
                    self.sleepers.fetch_add(1, Ordering::SeqCst);
                    while self.generation.load(Ordering::Acquire) == seen {
                        current = self.wake.wait(current).unwrap_or_else(|p| p.into_inner());
                    }
                    self.sleepers.fetch_sub(1, Ordering::SeqCst);
                }
                seen = self.generation.load(Ordering::Acquire);
                current.clone()
            };
            if let Some(job) = job {
                job.help();
            }
        }
    }

    fn publish(&self, job: &Arc<Job>) {
        {
            let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
            *current = Some(Arc::clone(job));
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
        // A worker counts itself a sleeper under the lock, before it checks
        // the generation, so one that will sleep is counted by now.
        if self.sleepers.load(Ordering::SeqCst) > 0 {
            self.wake.notify_all();
        }
    }
}

/// How many threads one copy may use and the smallest part one of them
/// takes. The caller passes it in (the page-locked layer reads its settings
/// once); the team is sized by the first copy's `threads`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct TeamConfig {
    /// The most threads, the caller included, that copy one job.
    pub threads: usize,
    /// The smallest piece of a copy one thread takes (rounded up to 4 KiB).
    pub min_part: usize,
}

impl Default for TeamConfig {
    /// Every processor, 64 KiB parts.
    fn default() -> TeamConfig {
        TeamConfig { threads: usize::MAX, min_part: 64 << 10 }
    }
}

/// The team, started on first use (`threads` less the caller).
fn team(threads: usize) -> &'static Team {
    static TEAM: OnceLock<&'static Team> = OnceLock::new();
    TEAM.get_or_init(|| {
        let team: &'static Team = Box::leak(Box::new(Team {
            generation: AtomicU64::new(0),
            current: Mutex::new(None),
            wake: Condvar::new(),
            sleepers: AtomicUsize::new(0),
            workers: AtomicUsize::new(0),
        }));
        for k in 0..threads.saturating_sub(1) {
            let spawned =
                std::thread::Builder::new().name(format!("hipmem-memcpy-{k}")).spawn(move || team.work());
            if spawned.is_ok() {
                team.workers.fetch_add(1, Ordering::Relaxed);
            }
        }
        team
    })
}

/// The number of threads (the caller included) a copy may use: the
/// processors of this machine, at most `limit`.
pub fn threads(limit: usize) -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, limit.max(1))
}

/// Copies `src` into `dst` (same length) with up to `config.threads`
/// threads (the team's size is fixed by the first call).
///
/// # Panics
/// If the lengths differ (as `copy_from_slice`).
pub fn copy_parallel(dst: &mut [u8], src: &[u8], stores: Stores, config: TeamConfig) {
    assert_eq!(dst.len(), src.len(), "copy_parallel: lengths differ");
    let len = dst.len();
    let team = team(threads(config.threads));
    let threads = team.workers.load(Ordering::Relaxed) + 1;
    // About four parts per thread, so that threads that start late or run
    // slow even out, each part long enough to stream.
    let part = (len / (threads * 4))
        .clamp(config.min_part.next_multiple_of(4096).min(4 << 20), 4 << 20)
        .next_multiple_of(4096);
    let parts = len.div_ceil(part);
    if threads == 1 || parts <= 1 {
        // SAFETY: two live slices of the same length; a `&mut` and a `&` cannot overlap.
        unsafe { copy_raw(dst.as_mut_ptr(), src.as_ptr(), len, stores) };
        return;
    }
    let job = Arc::new(Job {
        dst: dst.as_mut_ptr() as usize,
        src: src.as_ptr() as usize,
        len,
        part,
        parts,
        stores,
        next: AtomicUsize::new(0),
        done: AtomicUsize::new(0),
    });
    team.publish(&job);
    // Nothing below can unwind before every part is done: `help` only
    // copies bytes and counts.
    job.help();
    let start = Instant::now();
    while job.done.load(Ordering::Acquire) < parts {
        if start.elapsed() < SPIN {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// # Safety
/// `dst` and `src` must be valid for `len` bytes and must not overlap.
unsafe fn copy_raw(dst: *mut u8, src: *const u8, len: usize, stores: Stores) {
    match stores {
        // SAFETY: the caller's contract.
        Stores::Cached => unsafe { std::ptr::copy_nonoverlapping(src, dst, len) },
        // SAFETY: the caller's contract.
        Stores::Streaming => unsafe { stream_copy_raw(dst, src, len) },
    }
}

/// Non-temporal stores: a 16-byte aligned loop of streaming stores, then a
/// store fence.
///
/// # Safety
/// `dst` and `src` must be valid for `len` bytes and must not overlap.
unsafe fn stream_copy_raw(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        if len < 4096 {
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
            return;
        }
        let head = dst.align_offset(16).min(len);
        // SAFETY (whole block): the caller's contract covers every byte below
        // `len`; SSE2 is part of the x86-64 baseline; every stream store
        // goes to a 16-byte-aligned address (`dst + head` is aligned and `i`
        // advances by 64); the fence orders the non-temporal stores before
        // whatever the caller does next (a DMA, or counting the part done).
        unsafe {
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i + 64 <= len {
                let s = src.add(i) as *const __m128i;
                let d = dst.add(i) as *mut __m128i;
                let (a, b, c, e) = (
                    _mm_loadu_si128(s),
                    _mm_loadu_si128(s.add(1)),
                    _mm_loadu_si128(s.add(2)),
                    _mm_loadu_si128(s.add(3)),
                );
                _mm_stream_si128(d, a);
                _mm_stream_si128(d.add(1), b);
                _mm_stream_si128(d.add(2), c);
                _mm_stream_si128(d.add(3), e);
                i += 64;
            }
            std::ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
            _mm_sfence();
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 4096 + seed) as u8).collect()
    }

    #[test]
    fn copies_exactly_at_every_size_with_both_stores() {
        const MIN_PART: usize = 64 << 10;
        for stores in [Stores::Cached, Stores::Streaming] {
            for len in [0usize, 1, 4095, MIN_PART, 3 * MIN_PART + 17, 9 * MIN_PART + 1, 200 * MIN_PART + 5] {
                let src = pattern(len, 0);
                let mut dst = vec![0u8; len];
                copy_parallel(&mut dst, &src, stores, TeamConfig::default());
                assert!(dst == src, "{len} bytes, {stores:?}");
            }
        }
    }

    #[test]
    fn concurrent_callers_each_get_their_own_bytes() {
        // Several threads copy at once through the one team: a worker may
        // help with any job, and every job must still complete exactly.
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    for round in 0..20 {
                        let len = (round + 1) * 97 * 1024 + t;
                        let src = pattern(len, t * 31 + round);
                        let mut dst = vec![0u8; len];
                        let stores = if t % 2 == 0 { Stores::Cached } else { Stores::Streaming };
                        copy_parallel(&mut dst, &src, stores, TeamConfig::default());
                        assert!(dst == src, "thread {t}, round {round}");
                    }
                });
            }
        });
    }

    fn stream_copy(dst: &mut [u8], src: &[u8]) {
        // SAFETY: two live slices of the same length.
        unsafe { stream_copy_raw(dst.as_mut_ptr(), src.as_ptr(), dst.len()) }
    }

    #[test]
    fn stream_copy_is_exact_at_odd_offsets_and_lengths() {
        let src: Vec<u8> = (0..70_000u32).map(|i| (i * 31 + 7) as u8).collect();
        for (off, len) in [(0usize, 0usize), (1, 4095), (3, 4096), (5, 65_537), (15, 69_000)] {
            let mut dst = vec![0u8; len + 32];
            stream_copy(&mut dst[off..off + len], &src[..len]);
            assert_eq!(&dst[off..off + len], &src[..len], "offset {off}, {len} bytes");
            assert!(dst[..off].iter().all(|&b| b == 0) && dst[off + len..].iter().all(|&b| b == 0));
        }
    }
}
