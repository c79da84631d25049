//! The plain types of the pool API: attributes, properties, backing,
//! statistics and pointer export data.
#![forbid(unsafe_code)]

use crate::error::{Error, Result};

/// `hipMemPoolAttr`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PoolAttribute {
    /// `hipMemPoolReuseFollowEventDependencies` (1): reuse memory freed on
    /// another stream once this stream waited on an event recorded after the free.
    ReuseFollowEventDependencies,
    /// `hipMemPoolReuseAllowOpportunistic` (2): reuse memory whose free has
    /// completed on the device, without a dependency.
    ReuseAllowOpportunistic,
    /// `hipMemPoolReuseAllowInternalDependencies` (3): make the allocating
    /// stream wait for the freeing stream rather than fail to grow.
    ReuseAllowInternalDependencies,
    /// `hipMemPoolAttrReleaseThreshold` (4): unused bytes kept at synchronization.
    ReleaseThreshold,
    /// `hipMemPoolAttrReservedMemCurrent` (5, read-only).
    ReservedMemCurrent,
    /// `hipMemPoolAttrReservedMemHigh` (6, reset by setting 0).
    ReservedMemHigh,
    /// `hipMemPoolAttrUsedMemCurrent` (7, read-only).
    UsedMemCurrent,
    /// `hipMemPoolAttrUsedMemHigh` (8, reset by setting 0).
    UsedMemHigh,
}

impl PoolAttribute {
    /// Every attribute.
    pub const ALL: [PoolAttribute; 8] = [
        PoolAttribute::ReuseFollowEventDependencies,
        PoolAttribute::ReuseAllowOpportunistic,
        PoolAttribute::ReuseAllowInternalDependencies,
        PoolAttribute::ReleaseThreshold,
        PoolAttribute::ReservedMemCurrent,
        PoolAttribute::ReservedMemHigh,
        PoolAttribute::UsedMemCurrent,
        PoolAttribute::UsedMemHigh,
    ];

    /// Parses the numeric attribute; anything else is InvalidValue.
    pub fn from_raw(raw: i32) -> Result<PoolAttribute> {
        if (1..=8).contains(&raw) {
            Ok(Self::ALL[raw as usize - 1])
        } else {
            Err(Error::InvalidValue(format!("{raw} is not a hipMemPoolAttr (1 to 8)")))
        }
    }

    /// The numeric value.
    pub fn raw(&self) -> i32 {
        Self::ALL.iter().position(|a| a == self).map(|i| i as i32 + 1).unwrap_or(0)
    }

    /// Whether the value is a 32-bit int (the reuse flags) rather than a u64.
    pub fn is_int(&self) -> bool {
        matches!(
            self,
            PoolAttribute::ReuseFollowEventDependencies
                | PoolAttribute::ReuseAllowOpportunistic
                | PoolAttribute::ReuseAllowInternalDependencies
        )
    }
}

/// `hipMemAllocationHandleType` bits a pool can export.
pub mod handle_type {
    /// `hipMemHandleTypeNone`.
    pub const NONE: u32 = 0;
    /// `hipMemHandleTypePosixFileDescriptor`.
    pub const POSIX_FILE_DESCRIPTOR: u32 = 1;
    /// `hipMemHandleTypeWin32`.
    pub const WIN32: u32 = 2;
    /// `hipMemHandleTypeWin32Kmt`.
    pub const WIN32_KMT: u32 = 4;
}

/// What a pool is created with (`hipMemPoolProps`, less the fields every
/// hipmem pool has the same: pinned device memory).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolProps {
    /// Device ordinal the memory lives on.
    pub device: usize,
    /// `hipMemAllocationHandleType` bits the pool can be exported with.
    pub handle_types: u32,
    /// Most bytes the pool may reserve (0: no limit but the device).
    pub max_size: u64,
}

/// What a pool's learned layouts did ([`MemPool::plan_counts`](super::MemPool::plan_counts)).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PlanCounts {
    /// Plans made (a repeating sequence found and placed).
    pub plans: u64,
    /// Allocations served from a plan.
    pub served: u64,
    /// Planned allocations that took the usual path (their place was still
    /// in use or not yet safe for their stream).
    pub missed: u64,
    /// Plans ended by an allocation they did not expect.
    pub ended: u64,
    /// Repeating sequences not planned (too small, or never quiet).
    pub rejected: u64,
}

/// How a hipmem pool gets memory from the backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PoolBacking {
    /// Separate device allocations; free space coalesces within each.
    Segments,
    /// One reserved address range with physical chunks mapped in as the pool
    /// grows and unmapped when free: free space coalesces across chunks.
    /// The default where the backend has virtual memory.
    VirtualMemory,
}

/// The four statistics of a pool, in bytes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Memory the pool holds from the backend.
    pub reserved_current: u64,
    /// Most reserved since the last reset.
    pub reserved_high: u64,
    /// Memory of live allocations (block sizes, 256-byte granules).
    pub used_current: u64,
    /// Most used since the last reset.
    pub used_high: u64,
}

/// What a hipmem pool has asked of the backend since it was created: how
/// often allocation left the pool's own memory (each call costs tens of
/// microseconds on a GPU).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BackendCalls {
    /// Device allocations made as segments (segments backing).
    pub segments_allocated: u64,
    /// Segments given back.
    pub segments_freed: u64,
    /// Physical granules created (virtual-memory backing).
    pub granules_created: u64,
    /// Physical granules released.
    pub granules_released: u64,
    /// Granules mapped at an address (a new granule's first mapping included).
    pub maps: u64,
    /// Mappings removed.
    pub unmaps: u64,
    /// Physical bytes created: segments, granules and groups (not a count
    /// of calls: see [`BackendCalls::total`]).
    pub bytes_created: u64,
    /// Physical bytes given back to the backend.
    pub bytes_released: u64,
    /// Bytes of groups' free units mapped under a growth instead of created
    /// (a group goes back only whole; its free units are lent, `lend.rs`).
    pub bytes_lent: u64,
    /// Of the granules released, those the pool's release worker gave back
    /// off the allocating thread (idle release, and what a large growth
    /// unmapped but did not map again, unmap there and queue the physical
    /// memory: `pool/deferred.rs`).
    pub released_on_worker: u64,
}

impl BackendCalls {
    /// All calls together (the byte counts are not calls).
    pub fn total(&self) -> u64 {
        self.segments_allocated
            + self.segments_freed
            + self.granules_created
            + self.granules_released
            + self.maps
            + self.unmaps
    }

    /// The calls made on the threads that allocate, free, synchronize or
    /// trim: [`BackendCalls::total`] but the release worker's.
    pub fn on_callers(&self) -> u64 {
        self.total() - self.released_on_worker
    }
}

/// `hipMemPoolPtrExportData`: 64 opaque bytes that name a pointer of an
/// exported pool.
#[derive(Copy, Clone, PartialEq, Eq)]
#[repr(C)]
pub struct PtrExportData {
    /// The bytes.
    pub reserved: [u8; 64],
}

impl std::fmt::Debug for PtrExportData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PtrExportData(")?;
        for b in &self.reserved[..16] {
            write!(f, "{b:02x}")?;
        }
        write!(f, "..)")
    }
}
