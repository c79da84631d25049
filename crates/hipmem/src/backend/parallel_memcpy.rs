//! A host memcpy spread over a small pool of persistent threads, for the
//! staged copies of pageable memory (one copy thread cannot keep up with a
//! DMA engine).
//!
//! [`copy_parallel`] is a safe function: it splits the copy into parts,
//! hands all but the first to the pool's threads as raw addresses, copies the
//! first itself and returns only once every part is done (also when
//! unwinding), so the borrowed slices outlive every access, as with
//! `std::thread::scope`, without spawning threads per call.

use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Each part is at least this many bytes.
pub const MIN_PART: usize = 1 << 20;

struct Latch {
    left: Mutex<usize>,
    done: Condvar,
    /// Mirror of `left` that the waiter polls before it sleeps.
    pending: std::sync::atomic::AtomicUsize,
}

/// How long a worker or a waiter polls before it sleeps: waking a sleeping
/// thread costs tens of microseconds on a virtual machine, a large part of
/// the time one chunk of a staged copy takes.
const SPIN: std::time::Duration = std::time::Duration::from_micros(200);

impl Latch {
    fn count_down(&self) {
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        *left -= 1;
        self.pending.store(*left, std::sync::atomic::Ordering::Release);
        if *left == 0 {
            self.done.notify_all();
        }
    }

    fn wait(&self) {
        let start = std::time::Instant::now();
        while self.pending.load(std::sync::atomic::Ordering::Acquire) > 0 && start.elapsed() < SPIN {
            std::hint::spin_loop();
        }
        let mut left = self.left.lock().unwrap_or_else(|p| p.into_inner());
        while *left > 0 {
            left = self.done.wait(left).unwrap_or_else(|p| p.into_inner());
        }
    }
}

struct Job {
    dst: usize,
    src: usize,
    len: usize,
    latch: Arc<Latch>,
}

struct Workers {
    queues: Vec<Sender<Job>>,
}

/// The worker threads, started on first use ([`threads`] less the caller).
fn workers() -> &'static Workers {
    static WORKERS: OnceLock<Workers> = OnceLock::new();
    WORKERS.get_or_init(|| {
        let mut queues = Vec::new();
        for k in 0..threads().saturating_sub(1) {
            let (tx, rx) = channel::<Job>();
            let spawned = std::thread::Builder::new().name(format!("hipmem-memcpy-{k}")).spawn(move || {
                let next = |rx: &std::sync::mpsc::Receiver<Job>| {
                    // Poll a little before sleeping: jobs come in bursts.
                    let start = std::time::Instant::now();
                    while start.elapsed() < SPIN {
                        match rx.try_recv() {
                            Ok(job) => return Some(job),
                            Err(std::sync::mpsc::TryRecvError::Disconnected) => return None,
                            Err(std::sync::mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
                        }
                    }
                    rx.recv().ok()
                };
                while let Some(job) = next(&rx) {
                    // SAFETY: `copy_parallel` made `dst` and `src` from disjoint
                    // parts of a `&mut [u8]` and a `&[u8]` of `len` bytes each,
                    // and does not return (so the borrows do not end) before
                    // this job has counted down its latch.
                    unsafe { stream_copy_raw(job.dst as *mut u8, job.src as *const u8, job.len) };
                    job.latch.count_down();
                }
            });
            if spawned.is_ok() {
                queues.push(tx);
            }
        }
        Workers { queues }
    })
}

/// The number of threads (the caller included) a copy may use.
pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, crate::pinned::StagingConfig::get().threads)
}

/// Copies `src` into `dst` (same length) with up to [`threads`] threads.
///
/// # Panics
/// If the lengths differ (as `copy_from_slice`).
pub fn copy_parallel(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy_parallel: lengths differ");
    let pool = workers();
    let len = dst.len();
    let parts = (pool.queues.len() + 1).min(len / MIN_PART).max(1);
    if parts == 1 {
        stream_copy(dst, src);
        return;
    }
    let part = len.div_ceil(parts).next_multiple_of(4096);
    let latch = Arc::new(Latch { left: Mutex::new(0), done: Condvar::new(), pending: Default::default() });
    // Waits for the handed-out parts when this frame ends, also on unwinding.
    struct WaitOnDrop(Arc<Latch>);
    impl Drop for WaitOnDrop {
        fn drop(&mut self) {
            self.0.wait();
        }
    }
    let guard = WaitOnDrop(Arc::clone(&latch));
    let (first_dst, rest_dst) = dst.split_at_mut(part.min(len));
    let (first_src, rest_src) = src.split_at(part.min(len));
    for (k, (d, s)) in rest_dst.chunks_mut(part).zip(rest_src.chunks(part)).enumerate() {
        {
            let mut left = latch.left.lock().unwrap_or_else(|p| p.into_inner());
            *left += 1;
            latch.pending.store(*left, std::sync::atomic::Ordering::Release);
        }
        let job = Job {
            dst: d.as_mut_ptr() as usize,
            src: s.as_ptr() as usize,
            len: d.len(),
            latch: Arc::clone(&latch),
        };
        if let Err(returned) = pool.queues[k % pool.queues.len()].send(job) {
            // The worker is gone: copy the part here.
            let job = returned.0;
            stream_copy(d, s);
            job.latch.count_down();
        }
    }
    stream_copy(first_dst, first_src);
    drop(guard);
}

/// Copies `src` into `dst` (same length) with non-temporal stores where the
/// processor has them: a staging copy's destination is next read by a DMA
/// engine (or, copied out, not soon by this core), so ordinary stores would
/// only make each cache line be read before it is written.
pub fn stream_copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "stream_copy: lengths differ");
    // SAFETY: two live slices of the same length; a `&mut` and a `&` cannot overlap.
    unsafe { stream_copy_raw(dst.as_mut_ptr(), src.as_ptr(), dst.len()) }
}

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
        // whatever the caller does next (a DMA or a latch count-down).
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

    #[test]
    fn copies_exactly_at_every_size() {
        for len in [0usize, 1, 4095, MIN_PART, 3 * MIN_PART + 17, 9 * MIN_PART + 1] {
            let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 4096) as u8).collect();
            let mut dst = vec![0u8; len];
            copy_parallel(&mut dst, &src);
            assert!(dst == src, "{len} bytes");
        }
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
