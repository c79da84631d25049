//! The registry of every live allocation made through hipmem.
//!
//! Each entry is a base address, a size, a kind and a device, so that any raw
//! pointer can be classified (`hipPointerGetAttributes`), a copy past the end
//! of an allocation is caught before it reaches the backend, and a double free
//! or a foreign pointer is an error instead of a crash.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::sync::RwLock;

use crate::backend::DevicePtr;
use crate::error::{Error, Result};

/// What kind of memory an allocation is.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryKind {
    /// Device memory from `hipMalloc`.
    Device,
    /// A segment of a memory pool (its id); its blocks are the allocations.
    PoolSegment(u64),
    /// One allocation from a driver memory pool (its id).
    DriverPool(u64),
    /// Page-locked host memory from `hipHostMalloc` (HIP's flag bits).
    PinnedHost {
        /// The `hipHostMalloc` flags.
        flags: u32,
    },
    /// Host memory registered with `hipHostRegister` (HIP's flag bits).
    RegisteredHost {
        /// The `hipHostRegister` flags.
        flags: u32,
    },
    /// One virtual-memory mapping (`hipMemMap`); adjacent mappings form one
    /// range of addresses that device work may span.
    VmmMapping,
    /// Managed memory from `hipMallocManaged` (its attach flags): one
    /// address for the host and every device.
    Managed {
        /// `hipMemAttachGlobal` (1) or `hipMemAttachHost` (2).
        flags: u32,
    },
}

impl MemoryKind {
    /// Whether device work addresses this memory directly.
    pub fn is_device_accessible(&self) -> bool {
        matches!(
            self,
            MemoryKind::Device
                | MemoryKind::PoolSegment(_)
                | MemoryKind::DriverPool(_)
                | MemoryKind::VmmMapping
                | MemoryKind::Managed { .. }
        )
    }

    /// Whether this is managed memory.
    pub fn is_managed(&self) -> bool {
        matches!(self, MemoryKind::Managed { .. })
    }

    /// Whether this is page-locked host memory (allocated or registered).
    pub fn is_page_locked(&self) -> bool {
        matches!(self, MemoryKind::PinnedHost { .. } | MemoryKind::RegisteredHost { .. })
    }

    /// Whether this is page-locked host memory mapped into the devices'
    /// address space (its device pointer equals its host address: unified
    /// addressing).
    pub fn is_mapped_host(&self) -> bool {
        match self {
            MemoryKind::PinnedHost { flags } | MemoryKind::RegisteredHost { flags } => flags & 0x2 != 0,
            _ => false,
        }
    }

    /// Whether device work (kernels, copies by device address) may address it:
    /// device memory, or mapped page-locked host memory.
    pub fn is_device_addressable(&self) -> bool {
        self.is_device_accessible() || self.is_mapped_host()
    }
}

/// One live allocation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    /// First byte.
    pub base: DevicePtr,
    /// Size in bytes as requested.
    pub size: u64,
    /// What it is.
    pub kind: MemoryKind,
    /// Device it lives on.
    pub device: usize,
}

impl Allocation {
    /// One past the last byte.
    pub fn end(&self) -> u64 {
        self.base.0 + self.size
    }

    /// Whether `addr` lies inside.
    pub fn contains(&self, addr: u64) -> bool {
        addr >= self.base.0 && addr < self.end()
    }
}

/// Live allocations by base address.
#[derive(Debug, Default)]
pub struct AllocationRegistry {
    map: RwLock<BTreeMap<u64, Allocation>>,
}

impl AllocationRegistry {
    /// Adds an allocation.
    pub fn insert(&self, allocation: Allocation) {
        self.map.write().unwrap_or_else(|p| p.into_inner()).insert(allocation.base.0, allocation);
    }

    /// Removes the allocation that starts exactly at `base` if `accept` agrees.
    pub fn remove_if(&self, base: DevicePtr, accept: impl FnOnce(&Allocation) -> bool) -> Option<Allocation> {
        let mut map = self.map.write().unwrap_or_else(|p| p.into_inner());
        match map.get(&base.0) {
            Some(a) if accept(a) => map.remove(&base.0),
            _ => None,
        }
    }

    /// The allocation that contains `addr`, if any.
    pub fn find(&self, addr: u64) -> Option<Allocation> {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        map.range(..=addr).next_back().map(|(_, a)| *a).filter(|a| a.contains(addr))
    }

    /// An allocation that overlaps `[start, end)`, if any.
    pub fn overlapping(&self, start: u64, end: u64) -> Option<Allocation> {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        map.range(..end).next_back().map(|(_, a)| *a).filter(|a| a.end().max(a.base.0 + 1) > start)
    }

    /// The allocation that starts exactly at `base`, if any.
    pub fn get(&self, base: DevicePtr) -> Option<Allocation> {
        self.map.read().unwrap_or_else(|p| p.into_inner()).get(&base.0).copied()
    }

    /// Checks that `[ptr, ptr + len)` lies inside one device-accessible
    /// allocation; `what` names the argument in the error.
    pub fn check_range(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<Allocation> {
        if ptr.is_null() {
            return Err(Error::InvalidValue(format!("{what} is a null pointer")));
        }
        let a = self.find(ptr.0).ok_or_else(|| {
            Error::InvalidValue(format!("{what} {ptr} is not inside any live hipmem allocation"))
        })?;
        if !a.kind.is_device_addressable() {
            return Err(Error::InvalidValue(format!("{what} {ptr} is not device-accessible memory")));
        }
        let end = ptr.0.checked_add(len).ok_or_else(|| {
            Error::InvalidValue(format!("{what}: {ptr} + {len} bytes overflows the address space"))
        })?;
        let mut a = a;
        if a.kind == MemoryKind::VmmMapping && end > a.end() {
            // Adjacent mappings are one range of addresses: extend over them.
            let map = self.map.read().unwrap_or_else(|p| p.into_inner());
            while end > a.end() {
                match map.get(&a.end()) {
                    Some(next) if next.kind == MemoryKind::VmmMapping && next.device == a.device => {
                        a.size += next.size
                    }
                    _ => break,
                }
            }
        }
        if end > a.end() {
            return Err(Error::InvalidValue(format!(
                "{what}: {len} bytes at {ptr} run {} bytes past the end of the {}-byte allocation at {}",
                end - a.end(),
                a.size,
                a.base
            )));
        }
        Ok(a)
    }

    /// Number of live allocations.
    pub fn len(&self) -> usize {
        self.map.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether there is no live allocation.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes of live allocations of `kind` on `device`.
    pub fn bytes(&self, device: usize, kind: MemoryKind) -> u64 {
        let map = self.map.read().unwrap_or_else(|p| p.into_inner());
        map.values().filter(|a| a.device == device && a.kind == kind).map(|a| a.size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alloc(base: u64, size: u64) -> Allocation {
        Allocation { base: DevicePtr(base), size, kind: MemoryKind::Device, device: 0 }
    }

    #[test]
    fn finds_containing_allocation_and_rejects_overruns() {
        let r = AllocationRegistry::default();
        r.insert(alloc(0x1000, 0x100));
        r.insert(alloc(0x2000, 0x10));
        assert_eq!(r.find(0x1000).unwrap().base, DevicePtr(0x1000));
        assert_eq!(r.find(0x10ff).unwrap().base, DevicePtr(0x1000));
        assert!(r.find(0x1100).is_none());
        assert!(r.find(0xfff).is_none());
        assert!(r.check_range(DevicePtr(0x1080), 0x80, "dst").is_ok());
        let e = r.check_range(DevicePtr(0x1080), 0x81, "dst").unwrap_err();
        assert_eq!(e.code(), 1);
        assert!(e.message().contains("1 bytes past the end"), "{e}");
        assert_eq!(r.check_range(DevicePtr(0), 1, "src").unwrap_err().code(), 1);
        assert_eq!(r.check_range(DevicePtr(u64::MAX - 1), 8, "src").unwrap_err().code(), 1);
    }

    #[test]
    fn remove_is_exact_and_once() {
        let r = AllocationRegistry::default();
        r.insert(alloc(0x1000, 0x100));
        assert!(r.remove_if(DevicePtr(0x1010), |_| true).is_none());
        assert!(r.remove_if(DevicePtr(0x1000), |_| true).is_some());
        assert!(r.remove_if(DevicePtr(0x1000), |_| true).is_none());
        assert!(r.is_empty());
    }

    #[test]
    fn overlap_queries_see_every_intersection() {
        let r = AllocationRegistry::default();
        r.insert(alloc(0x2000, 0x100));
        assert!(r.overlapping(0x1000, 0x2000).is_none());
        assert!(r.overlapping(0x1000, 0x2001).is_some());
        assert!(r.overlapping(0x1000, 0x3000).is_some(), "an allocation strictly inside");
        assert!(r.overlapping(0x20ff, 0x3000).is_some());
        assert!(r.overlapping(0x2100, 0x3000).is_none());
    }
}
