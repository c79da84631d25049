//! Staged copies from and to ordinary (pageable) host memory.
//!
//! The driver copies pageable memory through a small internal staging buffer
//! with one thread, several times slower than a DMA from page-locked memory.
//! hipmem splits a large copy into chunks and pipelines them through a ring
//! of page-locked staging buffers (from the runtime's pinned pool): while the
//! device copies chunk `i` by DMA, every host thread of
//! `backend::parallel_memcpy` copies chunk `i + 1` into the next staging
//! buffer (host to device), or out of the previous one (device to host).
//! The chunks start at 1 MiB and double, so the first DMA starts early, and
//! the last chunk is halved down to 1 MiB, so little DMA is left once the
//! host is done. How the host threads store (cached or non-temporal) is
//! chosen per direction and size ([`StagingConfig::stores_for`]). Below
//! [`STAGED_MIN_BYTES_TO_DEVICE`] / [`STAGED_MIN_BYTES_FROM_DEVICE`], and on
//! backends without DMA (the CPU emulation, where staging only adds a copy),
//! the driver's own pageable copy is used, so hipmem is never slower than it.

use super::PinnedBuffer;
use crate::backend::parallel_memcpy::{self, Stores, TeamConfig};
use crate::backend::{BackendKind, DevicePtr, RawEvent};
use crate::error::Result;
use crate::runtime::CoreStream;
use crate::runtime::Runtime;

/// Host-to-device copies of at least this many bytes are staged (on
/// backends with DMA); `HIPMEM_STAGED_MIN` overrides it (both directions).
/// Measured on the H200 machine: at 256 KiB the driver's own pageable copy is
/// faster (17 against 12 GB/s), from 1 MiB the staged one (21 against 15).
pub const STAGED_MIN_BYTES_TO_DEVICE: usize = 1 << 20;
/// Device-to-host copies of at least this many bytes are staged: the
/// driver's pageable path is slower that way from 64 KiB (measured 2.0 to
/// 2.8 GB/s against 3.2 to 3.9 staged; at 256 KiB 2.5 to 5 against 7 to 9);
/// at 4 KiB both take the same time.
pub const STAGED_MIN_BYTES_FROM_DEVICE: usize = 64 << 10;
/// Most bytes per chunk of a staged copy (a copy is cut in at least eight
/// chunks of at least [`STAGING_MIN_CHUNK`] so the pipeline fills);
/// `HIPMEM_STAGING_CHUNK` overrides it. Measured on an H200 host: 16 MiB
/// chunks, a ring of 4 and 16 copy threads did best at 256 MiB and more.
pub const STAGING_CHUNK: usize = 16 << 20;
/// Fewest bytes per chunk (`HIPMEM_STAGING_MIN_CHUNK` overrides it).
pub const STAGING_MIN_CHUNK: usize = 2 << 20;
/// Staging buffers in the ring; `HIPMEM_STAGING_RING` overrides it.
pub const STAGING_RING: usize = 4;
/// The most host threads that copy one chunk (see `backend::parallel_memcpy`);
/// `HIPMEM_STAGING_THREADS` overrides it.
pub const STAGING_THREADS: usize = 16;
/// The first chunk of a staged copy (the pipeline's fill: the first DMA
/// waits for this much host copying); `HIPMEM_STAGING_FIRST` overrides it.
pub const STAGING_FIRST_CHUNK: usize = 1 << 20;
/// The smallest piece of a chunk one copy thread takes
/// (`HIPMEM_MEMCPY_MIN_PART` overrides it): small enough that even the first
/// chunk is copied by every thread.
pub const MEMCPY_MIN_PART: usize = 64 << 10;

/// The staging parameters in force (the constants, or the environment's
/// `HIPMEM_STAGED_MIN` (both directions), `HIPMEM_STAGING_CHUNK`, `HIPMEM_STAGING_MIN_CHUNK`,
/// `HIPMEM_STAGING_FIRST`, `HIPMEM_STAGING_RING`, `HIPMEM_STAGING_THREADS`,
/// `HIPMEM_MEMCPY_MIN_PART`; sizes accept suffixes like `16M`; and
/// `HIPMEM_STAGING_H2D` / `HIPMEM_STAGING_D2H` = `nt` or `cached` to force
/// the host stores of one direction).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StagingConfig {
    /// Smallest staged copy, host to device.
    pub min_bytes_to_device: usize,
    /// Smallest staged copy, device to host.
    pub min_bytes_from_device: usize,
    /// Largest chunk.
    pub chunk: usize,
    /// Smallest chunk.
    pub min_chunk: usize,
    /// Ring depth.
    pub ring: usize,
    /// Host copy threads.
    pub threads: usize,
    /// The first chunk.
    pub first_chunk: usize,
    /// The smallest piece of a chunk one thread copies.
    pub min_part: usize,
    /// The processor's last-level cache (from sysfs; 32 MiB where unknown).
    pub last_level_cache: usize,
    /// Forced host stores, host to device.
    pub h2d_stores: Option<Stores>,
    /// Forced host stores, device to host.
    pub d2h_stores: Option<Stores>,
}

impl StagingConfig {
    /// The chunk size for a copy of `len` bytes: an eighth of it, between
    /// the smallest and the largest chunk.
    pub fn chunk_for(&self, len: usize) -> usize {
        (len / 8).next_multiple_of(64 << 10).clamp(self.min_chunk.min(self.chunk), self.chunk)
    }

    /// How the host threads store in a staged copy of `len` bytes.
    ///
    /// Host to device, the threads write staging buffers that the DMA engine
    /// reads next. Non-temporal stores send them to memory, which the DMA
    /// engine reads at full speed; with ordinary stores it reads lines still
    /// dirty in sixteen cores' caches, measured up to a quarter slower while
    /// the source is in the last-level cache. Once the source is well beyond
    /// that cache, memory bandwidth is the limit instead (reading the source,
    /// writing the staging buffer and the DMA engine reading it again: three
    /// passes), and ordinary stores save the last two.
    ///
    /// Device to host, the threads write the user's memory: ordinary stores
    /// while it fits in a quarter of the last-level cache (the caller reads
    /// it soon), non-temporal ones beyond.
    ///
    /// Measured on the H200 machine (300 MiB last-level cache), 16 MiB to
    /// 1 GiB, both kinds of stores side by side in one run (`hipmem bench
    /// copy` with `HIPMEM_BENCH_COPY_PATHS=staged-nt,staged-cached`), three
    /// runs: host to device non-temporal 43 / 45 / 47 GB/s at 64 MiB / 256 MiB
    /// / 1 GiB against cached 37 / 45 / 53; device to host cached 48 at
    /// 64 MiB against non-temporal 44, equal from 256 MiB.
    pub fn stores_for(&self, len: usize, to_device: bool) -> Stores {
        if to_device {
            self.h2d_stores.unwrap_or(if len > 2 * self.last_level_cache {
                Stores::Cached
            } else {
                Stores::Streaming
            })
        } else {
            self.d2h_stores.unwrap_or(if len <= self.last_level_cache / 4 {
                Stores::Cached
            } else {
                Stores::Streaming
            })
        }
    }

    /// The copy team's share of these settings.
    pub fn team(&self) -> TeamConfig {
        TeamConfig { threads: self.threads, min_part: self.min_part }
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
            let stores = |name: &str| match std::env::var(name).as_deref() {
                Ok("nt") => Some(Stores::Streaming),
                Ok("cached") => Some(Stores::Cached),
                _ => None,
            };
            StagingConfig {
                min_bytes_to_device: size("HIPMEM_STAGED_MIN", STAGED_MIN_BYTES_TO_DEVICE),
                min_bytes_from_device: size("HIPMEM_STAGED_MIN", STAGED_MIN_BYTES_FROM_DEVICE),
                chunk: size("HIPMEM_STAGING_CHUNK", STAGING_CHUNK),
                min_chunk: size("HIPMEM_STAGING_MIN_CHUNK", STAGING_MIN_CHUNK).next_multiple_of(4096),
                ring: size("HIPMEM_STAGING_RING", STAGING_RING).clamp(2, 64),
                threads: size("HIPMEM_STAGING_THREADS", STAGING_THREADS).clamp(1, 256),
                first_chunk: size("HIPMEM_STAGING_FIRST", STAGING_FIRST_CHUNK).next_multiple_of(4096),
                min_part: size("HIPMEM_MEMCPY_MIN_PART", MEMCPY_MIN_PART).next_multiple_of(4096),
                last_level_cache: last_level_cache().unwrap_or(32 << 20),
                h2d_stores: stores("HIPMEM_STAGING_H2D"),
                d2h_stores: stores("HIPMEM_STAGING_D2H"),
            }
        })
    }
}

/// A host memcpy shared by the staging copy team
/// (`backend::parallel_memcpy`), sized by the staging settings.
///
/// # Panics
/// If the lengths differ (as `copy_from_slice`).
pub fn copy_parallel(dst: &mut [u8], src: &[u8], stores: Stores) {
    parallel_memcpy::copy_parallel(dst, src, stores, StagingConfig::get().team())
}

/// The size of the largest cache of cpu0 (`/sys/devices/system/cpu/cpu0/cache`).
fn last_level_cache() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|entry| {
        let text = std::fs::read_to_string(entry.ok()?.path().join("size")).ok()?;
        crate::backend::host::config::parse_size(text.trim()).ok()
    })
    .max()
    .map(|bytes| bytes as usize)
}

/// How one staged copy runs.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct StagedOptions {
    /// The largest chunk (and the size of each staging buffer).
    pub chunk: usize,
    /// How the host threads store (into the staging buffers host to device,
    /// into the user's memory device to host).
    pub stores: Stores,
}

impl StagedOptions {
    /// The defaults for a copy of `len` bytes in the given direction.
    pub fn for_len(len: usize, to_device: bool) -> StagedOptions {
        let config = StagingConfig::get();
        StagedOptions { chunk: config.chunk_for(len), stores: config.stores_for(len, to_device) }
    }

    /// The defaults with chunks of `chunk` bytes.
    pub fn with_chunk(chunk: usize, to_device: bool) -> StagedOptions {
        StagedOptions { chunk, ..StagedOptions::for_len(chunk, to_device) }
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
    /// How the host threads store.
    stores: Stores,
}

impl Plan {
    fn new(len: usize, options: &StagedOptions) -> Plan {
        let (chunk, stores) = (options.chunk, options.stores);
        let config = StagingConfig::get();
        let chunk = chunk.min(len).max(1);
        let mut ranges = Vec::new();
        let (mut off, mut next) = (0, chunk.clamp(1, config.first_chunk));
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
        let ring = config.ring.min(chunks).max(1);
        Plan { chunk, chunks, ring, ranges, stores }
    }

    /// Offset and length of chunk `c`.
    fn chunk_range(&self, c: usize) -> (usize, usize) {
        self.ranges[c]
    }
}

impl Runtime {
    fn stages(&self, len: usize, to_device: bool) -> bool {
        let config = StagingConfig::get();
        len >= if to_device { config.min_bytes_to_device } else { config.min_bytes_from_device }
            && self.backend_kind() != BackendKind::Host
            && self.backend().page_locked_memory().is_some()
    }

    /// Copies ordinary host memory to device memory; returns when done. Large
    /// copies are staged through page-locked buffers (see the module docs);
    /// small ones (and every copy on the CPU emulation) take the driver's
    /// pageable path.
    pub fn copy_pageable_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if self.stages(src.len(), true) {
            self.copy_pageable_to_device_staged(dst, src, &StagedOptions::for_len(src.len(), true))
        } else {
            self.copy_host_to_device(dst, src)
        }
    }

    /// Copies device memory to ordinary host memory; returns when done (staged
    /// like [`Runtime::copy_pageable_to_device`]).
    pub fn copy_device_to_pageable(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if self.stages(dst.len(), false) {
            self.copy_device_to_pageable_staged(dst, src, &StagedOptions::for_len(dst.len(), false))
        } else {
            self.copy_device_to_host(dst, src)
        }
    }

    /// The staged path of [`Runtime::copy_pageable_to_device`], whatever the
    /// size, with the given chunk size and host copy method (for tests and
    /// benchmarks).
    pub fn copy_pageable_to_device_staged(
        &self,
        dst: DevicePtr,
        src: &[u8],
        options: &StagedOptions,
    ) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let a = self.check_device_range(dst, src.len() as u64, "copy destination")?;
        let stream = self.null_stream(a.device)?;
        let plan = Plan::new(src.len(), options);
        let mut ring = self.staging_ring(&plan)?;
        run_pipeline(self, &stream, &plan, &mut ring, dst, HostSide::ToDevice(src))
    }

    /// The staged path of [`Runtime::copy_device_to_pageable`], whatever the
    /// size, with the given chunk size and host copy method.
    pub fn copy_device_to_pageable_staged(
        &self,
        dst: &mut [u8],
        src: DevicePtr,
        options: &StagedOptions,
    ) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let a = self.check_device_range(src, dst.len() as u64, "copy source")?;
        let stream = self.null_stream(a.device)?;
        let plan = Plan::new(dst.len(), options);
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
    stream: &CoreStream,
    plan: &Plan,
    ring: &mut [PinnedBuffer<u8>],
    device: DevicePtr,
    host: HostSide<'_>,
) -> Result<()> {
    // One event per ring slot, from the runtime's pool of events.
    let events: Vec<RawEvent> =
        (0..plan.ring).map(|_| rt.pooled_event(stream.device())).collect::<Result<_>>()?;
    let result = pipeline(rt, stream, plan, ring, device, host, &events);
    // Whatever happened, no DMA may still use a staging buffer when the ring
    // goes back to the pool.
    let mut waited = Ok(());
    for &e in &events {
        if let Err(e) = rt.backend().event_synchronize(e) {
            waited = Err(e);
        }
    }
    rt.recycle_events(stream.device(), events);
    result.and(waited)
}

/// Runs the chunks through the ring. The device range was checked by the
/// caller and the ring is page-locked memory of this runtime, so each chunk
/// takes the typed copies' path (only the backend's own checks).
fn pipeline(
    rt: &Runtime,
    stream: &CoreStream,
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
                copy_parallel(&mut slot.as_mut_slice()?[..len], &src[off..off + len], plan.stores);
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
                copy_parallel(&mut dst[off..off + len], &ring[c % plan.ring].as_slice()?[..len], plan.stores);
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
        let p = Plan::new(100 << 20, &StagedOptions::with_chunk(8 << 20, true));
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
        let small = Plan::new(10, &StagedOptions::with_chunk(8 << 20, true));
        assert_eq!((small.chunk, small.chunks, small.ring), (10, 1, 1));
    }

    #[test]
    fn chunks_and_stores_follow_the_copy_size() {
        let config = StagingConfig {
            min_bytes_to_device: 1 << 20,
            min_bytes_from_device: 64 << 10,
            chunk: 16 << 20,
            min_chunk: 512 << 10,
            ring: 4,
            threads: 16,
            first_chunk: 1 << 20,
            min_part: 64 << 10,
            last_level_cache: 300 << 20,
            h2d_stores: None,
            d2h_stores: None,
        };
        assert_eq!(config.chunk_for(1 << 20), 512 << 10);
        assert_eq!(config.chunk_for((6 << 20) + (64 << 10)), 832 << 10, "an eighth, rounded up to 64 KiB");
        assert_eq!(config.chunk_for(1 << 30), 16 << 20);
        // Host to device: streaming stores unless the source is well beyond the cache.
        assert_eq!(config.stores_for(64 << 20, true), Stores::Streaming);
        assert_eq!(config.stores_for(600 << 20, true), Stores::Streaming);
        assert_eq!(config.stores_for(1 << 30, true), Stores::Cached);
        // Device to host: cached while a quarter of the cache holds it.
        assert_eq!(config.stores_for(64 << 20, false), Stores::Cached);
        assert_eq!(config.stores_for(256 << 20, false), Stores::Streaming);
        let forced =
            StagingConfig { h2d_stores: Some(Stores::Cached), d2h_stores: Some(Stores::Streaming), ..config };
        assert_eq!(forced.stores_for(1 << 20, true), Stores::Cached);
        assert_eq!(forced.stores_for(1 << 20, false), Stores::Streaming);
    }

    #[test]
    fn small_plans_have_one_chunk() {
        let small = Plan::new(10, &StagedOptions::with_chunk(8 << 20, true));
        assert_eq!((small.chunk, small.chunks, small.ring), (10, 1, 1));
    }
}
