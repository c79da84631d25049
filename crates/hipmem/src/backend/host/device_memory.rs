//! Memory the emulator owns: anonymous mappings handed out as device memory,
//! and the table of every range device work may touch, so that each enqueued
//! operation can be checked against it before it runs.

use std::collections::BTreeMap;
use std::sync::{RwLock, RwLockReadGuard};

use crate::backend::DevicePtr;
use crate::error::{Error, Result};

/// What a registered range is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RegionKind {
    /// Device memory from `mem_alloc`.
    Device,
    /// Mapped page-locked host memory (allocated or registered).
    PageLocked,
    /// A virtual-memory mapping with read-write access; adjacent ones form
    /// one range (device work may span them).
    VirtualMapping,
    /// Managed memory: device work on it migrates its pages first.
    Managed,
}

/// How an operation uses a range (for managed memory's migrations).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// The operation reads the range.
    Read,
    /// The operation writes the range.
    Write,
}

/// One range of emulator-owned memory.
#[derive(Copy, Clone, Debug)]
pub struct Region {
    /// Length in bytes.
    pub len: u64,
    /// Device it belongs to.
    pub device: usize,
    /// What it is.
    pub kind: RegionKind,
}

/// The ranges device work may touch, by start address.
#[derive(Debug, Default)]
pub struct RegionTable {
    regions: RwLock<BTreeMap<u64, Region>>,
}

/// A read lock on the region table, held while an operation is validated and
/// queued so that the memory cannot be freed in between.
pub struct RegionsRead<'a> {
    guard: RwLockReadGuard<'a, BTreeMap<u64, Region>>,
}

impl RegionsRead<'_> {
    /// Checks that `[ptr, ptr + len)` lies inside one registered region.
    pub fn check(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<Region> {
        self.check_at(ptr, len, what).map(|(_, r)| r)
    }

    /// As [`RegionsRead::check`], with the start address of the region.
    pub fn check_at(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<(u64, Region)> {
        if ptr.is_null() {
            return Err(Error::InvalidValue(format!("{what}: null device pointer")));
        }
        let Some((&base, region)) = self.guard.range(..=ptr.0).next_back() else {
            return Err(Error::InvalidValue(format!("{what}: {ptr} is not memory of this emulated device")));
        };
        let mut end = base + region.len;
        if ptr.0 >= end {
            return Err(Error::InvalidValue(format!("{what}: {ptr} is not memory of this emulated device")));
        }
        if region.kind == RegionKind::VirtualMapping {
            // Adjacent mappings are one range of addresses: extend over them.
            let want_end = ptr.0.saturating_add(len);
            while end < want_end {
                match self.guard.get(&end) {
                    Some(next) if next.kind == RegionKind::VirtualMapping => end += next.len,
                    _ => break,
                }
            }
        }
        let want_end = ptr
            .0
            .checked_add(len)
            .ok_or_else(|| Error::InvalidValue(format!("{what}: {ptr} + {len} bytes overflows")))?;
        if want_end > end {
            return Err(Error::InvalidValue(format!(
                "{what}: {len} bytes at {ptr} run {} bytes past the end of the {}-byte allocation at {:#x}",
                want_end - end,
                end - base,
                base
            )));
        }
        Ok((base, *region))
    }
}

impl RegionTable {
    /// Locks the table for validation.
    pub fn read(&self) -> RegionsRead<'_> {
        RegionsRead { guard: self.regions.read().unwrap_or_else(|p| p.into_inner()) }
    }

    /// Adds a region.
    pub fn insert(&self, base: u64, region: Region) {
        self.regions.write().unwrap_or_else(|p| p.into_inner()).insert(base, region);
    }

    /// Removes the region starting exactly at `base` if `matches` accepts it.
    pub fn remove_if(&self, base: u64, matches: impl FnOnce(&Region) -> bool) -> Option<Region> {
        let mut regions = self.regions.write().unwrap_or_else(|p| p.into_inner());
        match regions.get(&base) {
            Some(r) if matches(r) => regions.remove(&base),
            _ => None,
        }
    }
}

/// An anonymous private mapping: the backing of one emulated device allocation.
#[derive(Debug)]
pub struct AnonymousMapping {
    addr: u64,
    len: usize,
}

impl AnonymousMapping {
    /// Maps `len` bytes of zeroed, lazily committed memory.
    pub fn new(len: u64) -> Result<AnonymousMapping> {
        let len_usize = usize::try_from(len)
            .map_err(|_| Error::OutOfMemory(format!("{len} bytes do not fit the address space")))?;
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: an anonymous mapping at an address of the kernel's choosing
        // does not alias any existing Rust object.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len_usize,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }
        .map_err(|e| Error::OutOfMemory(format!("mmap of {len} bytes failed: {e}")))?;
        Ok(AnonymousMapping { addr: ptr as u64, len: len_usize })
    }

    /// The start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
}

impl Drop for AnonymousMapping {
    fn drop(&mut self) {
        // SAFETY: the range was mapped by `new` and nothing else unmaps it; the
        // owner makes sure no queued work still touches it before dropping.
        if let Err(e) = unsafe { rustix::mm::munmap(self.addr as *mut _, self.len) } {
            tracing::error!(target: "hipmem", "munmap of emulated device memory failed: {e}");
        }
    }
}

/// Rounds `n` up to a multiple of the power of two `align`.
pub fn round_up(n: u64, align: u64) -> u64 {
    debug_assert!(align.is_power_of_two());
    n.div_ceil(align) * align
}
