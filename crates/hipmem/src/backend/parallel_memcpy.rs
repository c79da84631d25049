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

fn workers(threads: usize) -> &'static Workers {
    static WORKERS: OnceLock<Workers> = OnceLock::new();
    WORKERS.get_or_init(|| {
        let mut queues = Vec::new();
        for k in 0..threads.saturating_sub(1) {
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
                    unsafe {
                        std::ptr::copy_nonoverlapping(job.src as *const u8, job.dst as *mut u8, job.len)
                    };
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
    let pool = workers(threads());
    let len = dst.len();
    let parts = (pool.queues.len() + 1).min(len / MIN_PART).max(1);
    if parts == 1 {
        dst.copy_from_slice(src);
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
            d.copy_from_slice(s);
            job.latch.count_down();
        }
    }
    first_dst.copy_from_slice(first_src);
    drop(guard);
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
}
