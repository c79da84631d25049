//! Staged copies from and to ordinary (pageable) host memory.
//!
//! The driver copies pageable memory through a small internal staging buffer
//! with one thread, several times slower than a DMA from page-locked memory.
//! hipmem splits a large copy into chunks and pipelines them through a ring
//! of page-locked staging buffers (from the runtime's pinned pool): while the
//! device copies chunk `i` by DMA, several host threads copy chunk `i + 1`
//! into the next staging buffer (host to device), or out of the previous one
//! (device to host). Below [`STAGED_MIN_BYTES`], and on backends without DMA
//! (the CPU emulation, where staging only adds a copy), the driver's own
//! pageable copy is used, so hipmem is never slower than it.

use super::PinnedBuffer;
use crate::backend::parallel_memcpy::copy_parallel;
use crate::backend::{BackendKind, DevicePtr, RawEvent};
use crate::error::Result;
use crate::runtime::Runtime;
use crate::stream::Stream;

/// Copies of at least this many bytes are staged (on backends with DMA);
/// `HIPMEM_STAGED_MIN` overrides it.
pub const STAGED_MIN_BYTES: usize = 16 << 20;
/// Most bytes per chunk of a staged copy (a copy is cut in at least eight
/// chunks of at least [`STAGING_MIN_CHUNK`] so the pipeline fills);
/// `HIPMEM_STAGING_CHUNK` overrides it. Measured on an H200 host: 16 MiB
/// chunks, a ring of 4 and 16 copy threads did best at 256 MiB and more.
pub const STAGING_CHUNK: usize = 16 << 20;
/// Fewest bytes per chunk.
pub const STAGING_MIN_CHUNK: usize = 2 << 20;
/// Staging buffers in the ring; `HIPMEM_STAGING_RING` overrides it.
pub const STAGING_RING: usize = 4;
/// The most host threads that copy one chunk (see `backend::parallel_memcpy`);
/// `HIPMEM_STAGING_THREADS` overrides it.
pub const STAGING_THREADS: usize = 16;

/// The staging parameters in force (the constants, or the environment's
/// `HIPMEM_STAGED_MIN`, `HIPMEM_STAGING_CHUNK`, `HIPMEM_STAGING_RING`,
/// `HIPMEM_STAGING_THREADS`; sizes accept suffixes like `16M`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StagingConfig {
    /// Smallest staged copy.
    pub min_bytes: usize,
    /// Chunk size.
    pub chunk: usize,
    /// Ring depth.
    pub ring: usize,
    /// Host copy threads.
    pub threads: usize,
}

impl StagingConfig {
    /// The chunk size for a copy of `len` bytes: an eighth of it, between
    /// [`STAGING_MIN_CHUNK`] and the configured chunk.
    pub fn chunk_for(&self, len: usize) -> usize {
        (len / 8).next_multiple_of(1 << 20).clamp(STAGING_MIN_CHUNK.min(self.chunk), self.chunk)
    }

    /// Read once per process.
    pub fn get() -> StagingConfig {
        static CONFIG: std::sync::OnceLock<StagingConfig> = std::sync::OnceLock::new();
        *CONFIG.get_or_init(|| {
            let size = |name: &str, default: usize| {
                std::env::var(name)
                    .ok()
                    .and_then(|v| crate::backend::host::config::parse_size(&v).ok())
                    .map(|v| v as usize)
                    .filter(|&v| v > 0)
                    .unwrap_or(default)
            };
            StagingConfig {
                min_bytes: size("HIPMEM_STAGED_MIN", STAGED_MIN_BYTES),
                chunk: size("HIPMEM_STAGING_CHUNK", STAGING_CHUNK),
                ring: size("HIPMEM_STAGING_RING", STAGING_RING).clamp(2, 64),
                threads: size("HIPMEM_STAGING_THREADS", STAGING_THREADS).clamp(1, 256),
            }
        })
    }
}

/// The host side of a staged copy, which also says which way it goes.
enum HostSide<'a> {
    /// Host to device: the bytes to send.
    ToDevice(&'a [u8]),
    /// Device to host: where the bytes land.
    FromDevice(&'a mut [u8]),
}

/// The plan of one staged copy: chunks that start small and double up to
/// the chunk size, so the first DMA starts after a short host copy and the
/// pipeline fills quickly.
struct Plan {
    /// The largest chunk (the size of each staging buffer).
    chunk: usize,
    chunks: usize,
    ring: usize,
    /// (offset, length) of every chunk.
    ranges: Vec<(usize, usize)>,
}

impl Plan {
    fn new(len: usize, chunk: usize) -> Plan {
        let chunk = chunk.min(len).max(1);
        let mut ranges = Vec::new();
        let (mut off, mut next) = (0, chunk.clamp(1, 1 << 20));
        while off < len {
            let n = next.min(len - off);
            ranges.push((off, n));
            off += n;
            next = (next * 2).min(chunk);
        }
        // Ramp down too: the last DMA is not overlapped with a host copy, so
        // the last chunk is cut into halves down to 1 MiB.
        if let Some(&(off, n)) = ranges.last() {
            if n >= 2 << 20 && ranges.len() > 1 {
                ranges.pop();
                let (mut at, mut left, mut piece) = (off, n, n / 2);
                while left > 0 {
                    let take = if piece < (1 << 20) { left } else { piece.min(left) };
                    ranges.push((at, take));
                    at += take;
                    left -= take;
                    piece /= 2;
                }
            }
        }
        let chunks = ranges.len();
        let ring = StagingConfig::get().ring.min(chunks).max(1);
        Plan { chunk, chunks, ring, ranges }
    }

    /// Offset and length of chunk `c`.
    fn chunk_range(&self, c: usize) -> (usize, usize) {
        self.ranges[c]
    }
}

impl Runtime {
    fn stages(&self, len: usize) -> bool {
        len >= StagingConfig::get().min_bytes
            && self.backend_kind() != BackendKind::Host
            && self.backend().page_locked_memory().is_some()
    }

    /// Copies ordinary host memory to device memory; returns when done. Large
    /// copies are staged through page-locked buffers (see the module docs);
    /// small ones (and every copy on the CPU emulation) take the driver's
    /// pageable path.
    pub fn copy_pageable_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if self.stages(src.len()) {
            self.copy_pageable_to_device_staged(dst, src, StagingConfig::get().chunk_for(src.len()))
        } else {
            self.copy_host_to_device(dst, src)
        }
    }

    /// Copies device memory to ordinary host memory; returns when done (staged
    /// like [`Runtime::copy_pageable_to_device`]).
    pub fn copy_device_to_pageable(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if self.stages(dst.len()) {
            self.copy_device_to_pageable_staged(dst, src, StagingConfig::get().chunk_for(dst.len()))
        } else {
            self.copy_device_to_host(dst, src)
        }
    }

    /// The staged path of [`Runtime::copy_pageable_to_device`], whatever the
    /// size, with chunks of `chunk` bytes (for tests and benchmarks).
    pub fn copy_pageable_to_device_staged(&self, dst: DevicePtr, src: &[u8], chunk: usize) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let a = self.check_device_range(dst, src.len() as u64, "copy destination")?;
        let stream = self.device(a.device)?.null_stream();
        let plan = Plan::new(src.len(), chunk);
        let mut ring = self.staging_ring(&plan)?;
        run_pipeline(self, &stream, &plan, &mut ring, dst, HostSide::ToDevice(src))
    }

    /// The staged path of [`Runtime::copy_device_to_pageable`], whatever the
    /// size, with chunks of `chunk` bytes.
    pub fn copy_device_to_pageable_staged(&self, dst: &mut [u8], src: DevicePtr, chunk: usize) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let a = self.check_device_range(src, dst.len() as u64, "copy source")?;
        let stream = self.device(a.device)?.null_stream();
        let plan = Plan::new(dst.len(), chunk);
        let mut ring = self.staging_ring(&plan)?;
        run_pipeline(self, &stream, &plan, &mut ring, src, HostSide::FromDevice(dst))
    }

    fn staging_ring(&self, plan: &Plan) -> Result<Vec<PinnedBuffer<u8>>> {
        let pool = self.staging_pool();
        (0..plan.ring).map(|_| pool.alloc::<u8>(plan.chunk)).collect()
    }
}

fn run_pipeline(
    rt: &Runtime,
    stream: &Stream,
    plan: &Plan,
    ring: &mut [PinnedBuffer<u8>],
    device: DevicePtr,
    host: HostSide<'_>,
) -> Result<()> {
    // One event per ring slot, from the runtime's pool of events.
    let events: Vec<RawEvent> =
        (0..plan.ring).map(|_| rt.inner.pooled_event(stream.device())).collect::<Result<_>>()?;
    let result = pipeline(rt, stream, plan, ring, device, host, &events);
    // Whatever happened, no DMA may still use a staging buffer when the ring
    // goes back to the pool.
    let mut waited = Ok(());
    for &e in &events {
        if let Err(e) = rt.backend().event_synchronize(e) {
            waited = Err(e);
        }
    }
    rt.inner.recycle_events(stream.device(), events);
    result.and(waited)
}

/// Runs the chunks through the ring. The device range was checked by the
/// caller and the ring is page-locked memory of this runtime, so each chunk
/// takes the typed copies' path (only the backend's own checks).
fn pipeline(
    rt: &Runtime,
    stream: &Stream,
    plan: &Plan,
    ring: &mut [PinnedBuffer<u8>],
    device: DevicePtr,
    host: HostSide<'_>,
    events: &[RawEvent],
) -> Result<()> {
    let addrs: Vec<u64> = ring.iter().map(|b| b.host_ptr()).collect();
    let raw = stream.raw();
    let to_device = matches!(host, HostSide::ToDevice(_));
    let enqueue = |c: usize| -> Result<()> {
        let s = c % plan.ring;
        let (off, len) = plan.chunk_range(c);
        let at = device.offset(off as u64)?;
        if to_device {
            rt.copy_page_locked_to_device_typed(at, addrs[s], len as u64, raw)?;
        } else {
            rt.copy_device_to_page_locked_typed(addrs[s], at, len as u64, raw)?;
        }
        rt.backend().event_record(events[s], raw)
    };
    match host {
        HostSide::ToDevice(src) => {
            for c in 0..plan.chunks {
                let slot = &mut ring[c % plan.ring];
                if c >= plan.ring {
                    // The DMA that last used this slot must be done.
                    rt.backend().event_synchronize(events[c % plan.ring])?;
                }
                let (off, len) = plan.chunk_range(c);
                copy_parallel(&mut slot.as_mut_slice()?[..len], &src[off..off + len]);
                enqueue(c)?;
            }
        }
        HostSide::FromDevice(dst) => {
            for c in 0..plan.ring {
                enqueue(c)?;
            }
            for c in 0..plan.chunks {
                rt.backend().event_synchronize(events[c % plan.ring])?;
                let (off, len) = plan.chunk_range(c);
                copy_parallel(&mut dst[off..off + len], &ring[c % plan.ring].as_slice()?[..len]);
                if c + plan.ring < plan.chunks {
                    enqueue(c + plan.ring)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_cover_the_copy_in_chunks() {
        // Chunks ramp up 1, 2, 4 MiB, then 8 MiB each, and tile the copy.
        let p = Plan::new(100 << 20, 8 << 20);
        assert_eq!(
            &p.ranges[..4],
            &[(0, 1 << 20), (1 << 20, 2 << 20), (3 << 20, 4 << 20), (7 << 20, 8 << 20)]
        );
        assert!(p.ranges.last().unwrap().1 <= 2 << 20, "the pipeline ramps down at the end");
        assert_eq!(p.ring, STAGING_RING);
        let mut at = 0;
        for c in 0..p.chunks {
            let (off, len) = p.chunk_range(c);
            assert_eq!(off, at);
            assert!(len <= p.chunk && len > 0);
            at += len;
        }
        assert_eq!(at, 100 << 20);
        let small = Plan::new(10, 8 << 20);
        assert_eq!((small.chunk, small.chunks, small.ring), (10, 1, 1));
    }
}
