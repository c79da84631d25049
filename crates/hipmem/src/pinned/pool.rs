//! `PinnedPool`: a caching pool of page-locked blocks.
//!
//! Page-locking is slow (the driver pins every page: about 1.3 ms for 1 MiB
//! and 29 ms for 64 MiB on the H200 machine), so freed blocks are kept and
//! handed out again. Rules:
//! - sizes are rounded to size classes (powers of two up to 2 MiB, then
//!   multiples of 2 MiB) and a request takes the smallest cached block of at
//!   least its class and at most twice it (best fit);
//! - a cached block carries the events of the copies that used it; it is not
//!   handed out again until they have completed (it is skipped, and a new
//!   block is allocated if no other fits);
//! - the pool keeps at most `limit` bytes cached; beyond it, freed blocks are
//!   released (oldest completed first); `trim` releases cached blocks on
//!   demand.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use super::HostMallocFlags;
use super::buffer::PinnedBuffer;
use super::buffer::Use;
use crate::backend::host_memory::PageLockedBlock;
use crate::error::{Error, Result};
use crate::runtime::{Runtime, WeakRuntime};

/// The default cap of cached bytes of the runtime's staging pool.
pub(crate) const DEFAULT_STAGING_LIMIT: u64 = 512 << 20;

/// The default cap of cached bytes of a new pool.
pub const DEFAULT_LIMIT: u64 = 1 << 30;

/// Size classes: powers of two from 4 KiB to 2 MiB, then multiples of 2 MiB.
pub fn size_class(bytes: u64) -> u64 {
    const SMALL: u64 = 2 << 20;
    if bytes <= SMALL { bytes.max(4096).next_power_of_two() } else { bytes.div_ceil(SMALL) * SMALL }
}

/// Statistics of a [`PinnedPool`].
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PinnedPoolStats {
    /// Bytes of blocks cached (free, kept for reuse).
    pub cached_bytes: u64,
    /// Blocks cached.
    pub cached_blocks: u64,
    /// Bytes of blocks handed out and not yet given back.
    pub in_use_bytes: u64,
    /// Requests served from the cache.
    pub hits: u64,
    /// Requests that allocated a new block.
    pub misses: u64,
    /// Cached blocks skipped because a copy still used them.
    pub skipped_in_flight: u64,
    /// Bytes released to the system (limit and trim).
    pub released_bytes: u64,
}

struct Cached {
    block: PageLockedBlock,
    events: Vec<Use>,
}

impl Cached {
    fn is_idle(&self) -> bool {
        self.events.iter().all(Use::is_complete)
    }
}

struct State {
    /// Free blocks by (capacity, age).
    free: BTreeMap<(u64, u64), Cached>,
    next_age: u64,
    limit: u64,
    stats: PinnedPoolStats,
}

impl State {
    /// Takes cached blocks out, oldest first (only completed ones with
    /// `idle_only`), until at most `target` bytes stay cached.
    fn evict_oldest(&mut self, target: u64, idle_only: bool) -> Vec<Cached> {
        let mut keys: Vec<(u64, u64)> =
            self.free.iter().filter(|(_, c)| !idle_only || c.is_idle()).map(|(k, _)| *k).collect();
        keys.sort_by_key(|k| k.1);
        let mut evicted = Vec::new();
        for k in keys {
            if self.stats.cached_bytes <= target {
                break;
            }
            if let Some(c) = self.free.remove(&k) {
                self.stats.cached_bytes -= k.0;
                self.stats.cached_blocks -= 1;
                self.stats.released_bytes += k.0;
                evicted.push(c);
            }
        }
        evicted
    }
}

pub(crate) struct PoolShared {
    rt: WeakRuntime,
    flags: HostMallocFlags,
    state: Mutex<State>,
}

impl PoolShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, block: PageLockedBlock) {
        let result = match self.rt.upgrade() {
            Some(rt) => rt.release_page_locked(block),
            None => block.release(),
        };
        if let Err(e) = result {
            tracing::warn!(target: "hipmem", "releasing a pinned pool block failed: {e}");
        }
    }

    /// A block comes back from a buffer, with the events of its copies.
    pub(crate) fn give_back(&self, block: PageLockedBlock, events: Vec<Use>) {
        let cap = block.len() as u64;
        let mut s = self.lock();
        s.stats.in_use_bytes -= cap;
        let mut released = Vec::new();
        if s.stats.cached_bytes + cap > s.limit {
            // Make room: completed blocks only, oldest first.
            let target = s.limit.saturating_sub(cap);
            released = s.evict_oldest(target, true);
        }
        if s.stats.cached_bytes + cap <= s.limit {
            let age = s.next_age;
            s.next_age += 1;
            s.stats.cached_bytes += cap;
            s.stats.cached_blocks += 1;
            s.free.insert((cap, age), Cached { block, events });
        } else {
            s.stats.released_bytes += cap;
            released.push(Cached { block, events });
        }
        drop(s);
        self.release_all(released);
    }

    /// Releases taken-out blocks, each after the copies that used it;
    /// returns their bytes.
    fn release_all(&self, blocks: Vec<Cached>) -> u64 {
        let mut bytes = 0;
        for c in blocks {
            bytes += c.block.len() as u64;
            // Freeing waits for the devices (the backend drains them first).
            for u in &c.events {
                let _ = u.wait();
            }
            self.release(c.block);
        }
        bytes
    }
}

impl Drop for PoolShared {
    fn drop(&mut self) {
        let free = std::mem::take(&mut self.lock().free);
        self.release_all(free.into_values().collect());
    }
}

/// A caching pool of page-locked host memory (see the module docs).
/// Clones share the pool; it lives until the last clone and the last buffer
/// from it are gone.
#[derive(Clone)]
pub struct PinnedPool {
    shared: Arc<PoolShared>,
}

impl std::fmt::Debug for PinnedPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedPool").field("flags", &self.shared.flags).field("stats", &self.stats()).finish()
    }
}

impl PinnedPool {
    /// A pool whose blocks are allocated with HIP's `hipHostMalloc` `flags`.
    pub fn new(rt: &Runtime, flags: u32) -> Result<PinnedPool> {
        let flags = HostMallocFlags::from_bits(flags)?;
        Ok(PinnedPool {
            shared: Arc::new(PoolShared {
                rt: rt.downgrade(),
                flags,
                state: Mutex::new(State {
                    free: BTreeMap::new(),
                    next_age: 0,
                    limit: DEFAULT_LIMIT,
                    stats: PinnedPoolStats::default(),
                }),
            }),
        })
    }

    fn runtime(&self) -> Result<Runtime> {
        self.shared.rt.get("the pinned pool")
    }

    /// A buffer of `len` elements: a cached block when one fits and no copy
    /// still uses it, else a new one.
    pub fn alloc<T: Pod>(&self, len: usize) -> Result<PinnedBuffer<T>> {
        let rt = self.runtime()?;
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| Error::OutOfMemory(format!("{len} elements overflow the address space")))?
            as u64;
        if bytes == 0 {
            return Ok(PinnedBuffer::assemble(rt, None, 0, self.shared.flags, None, Vec::new()));
        }
        let class = size_class(bytes);
        let mut s = self.shared.lock();
        let mut found = None;
        let mut skipped = 0;
        for (key, cached) in s.free.range((class, 0)..(class.saturating_mul(2).saturating_add(1), 0)) {
            if cached.is_idle() {
                found = Some(*key);
                break;
            }
            skipped += 1;
        }
        s.stats.skipped_in_flight += skipped;
        if let Some(key) = found {
            let c = s.free.remove(&key).expect("found above");
            s.stats.cached_bytes -= key.0;
            s.stats.cached_blocks -= 1;
            s.stats.in_use_bytes += key.0;
            s.stats.hits += 1;
            drop(s);
            return Ok(PinnedBuffer::assemble(
                rt,
                Some(c.block),
                len,
                self.shared.flags,
                Some(Arc::clone(&self.shared)),
                c.events,
            ));
        }
        s.stats.misses += 1;
        drop(s);
        let block = match rt.allocate_page_locked(class, self.shared.flags) {
            Ok(b) => b,
            Err(e) if e.code() == crate::error::code::OUT_OF_MEMORY => {
                // Give the cache back to the system and try once more.
                self.trim(0);
                rt.allocate_page_locked(class, self.shared.flags)?
            }
            Err(e) => return Err(e),
        };
        self.shared.lock().stats.in_use_bytes += class;
        Ok(PinnedBuffer::assemble(
            rt,
            Some(block),
            len,
            self.shared.flags,
            Some(Arc::clone(&self.shared)),
            Vec::new(),
        ))
    }

    /// The statistics.
    pub fn stats(&self) -> PinnedPoolStats {
        self.shared.lock().stats
    }

    /// The most bytes kept cached.
    pub fn limit(&self) -> u64 {
        self.shared.lock().limit
    }

    /// Sets the most bytes kept cached (blocks beyond it are released as they
    /// come back, or at the next `trim`).
    pub fn set_limit(&self, bytes: u64) {
        self.shared.lock().limit = bytes;
    }

    /// Releases cached blocks until at most `keep` bytes stay cached (waiting
    /// for the copies that still use a released block); returns the bytes released.
    pub fn trim(&self, keep: u64) -> u64 {
        let released = self.shared.lock().evict_oldest(keep, false);
        self.shared.release_all(released)
    }

    /// The `hipHostMalloc` flags of its blocks.
    pub fn flags(&self) -> u32 {
        self.shared.flags.bits()
    }
}
