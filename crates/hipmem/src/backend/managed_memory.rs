//! Managed (unified) memory: the capability trait of a backend that has it
//! (handed out by [`super::Backend::managed_memory`]), HIP's constants as
//! typed values, and [`ManagedBlock`], the owner that frees an allocation
//! once and lends its bytes to the host.
//!
//! A managed allocation has one address, valid on the host and on every
//! device; the backend moves its pages to whoever touches them (on-demand
//! migration, page faults) or ahead of time (prefetch, in stream order), and
//! takes advice about them. The backend does what it is asked and checks
//! what it must to stay memory-safe; HIP's argument rules (null pointers,
//! zero counts, unknown values, device ordinals) are the runtime's.

use std::sync::Arc;

use super::{Backend, DevicePtr, RawStream};
use crate::error::{Error, Result};

/// `hipCpuDeviceId`: the host as a location.
pub const CPU_DEVICE_ID: i32 = -1;
/// `hipInvalidDeviceId`: no location, or no single one.
pub const INVALID_DEVICE_ID: i32 = -2;

/// Where managed pages are, or should go: a device or the host.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// The host (`hipCpuDeviceId`, -1).
    Host,
    /// A device ordinal.
    Device(usize),
}

impl Location {
    /// HIP's device id: the ordinal, or -1 for the host.
    pub fn raw(&self) -> i32 {
        match self {
            Location::Host => CPU_DEVICE_ID,
            Location::Device(d) => *d as i32,
        }
    }

    /// From HIP's device id: -1 is the host, a non-negative id a device
    /// (not checked against the device count), anything else `None`.
    pub fn from_raw(id: i32) -> Option<Location> {
        match id {
            CPU_DEVICE_ID => Some(Location::Host),
            d if d >= 0 => Some(Location::Device(d as usize)),
            _ => None,
        }
    }
}

/// Attach flags (`hipMemAttachGlobal` 1, `hipMemAttachHost` 2, `hipMemAttachSingle` 4).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AttachFlags {
    /// Accessible by any stream on any device.
    Global,
    /// Accessible by the host; device work needs a later attach.
    Host,
    /// Accessible only by the stream it is attached to (stream attachment only).
    Single,
}

impl AttachFlags {
    /// `hipMemAttachGlobal`.
    pub const GLOBAL: u32 = 1;
    /// `hipMemAttachHost`.
    pub const HOST: u32 = 2;
    /// `hipMemAttachSingle`.
    pub const SINGLE: u32 = 4;

    /// Parses one of the three values; anything else is InvalidValue.
    pub fn from_bits(bits: u32) -> Result<AttachFlags> {
        match bits {
            Self::GLOBAL => Ok(AttachFlags::Global),
            Self::HOST => Ok(AttachFlags::Host),
            Self::SINGLE => Ok(AttachFlags::Single),
            other => Err(Error::InvalidValue(format!(
                "attach flags {other:#x} are not one of hipMemAttachGlobal (1), hipMemAttachHost (2), hipMemAttachSingle (4)"
            ))),
        }
    }

    /// HIP's value.
    pub fn bits(&self) -> u32 {
        match self {
            AttachFlags::Global => Self::GLOBAL,
            AttachFlags::Host => Self::HOST,
            AttachFlags::Single => Self::SINGLE,
        }
    }
}

/// `hipMemoryAdvise`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Advice {
    /// `hipMemAdviseSetReadMostly` (1): reads duplicate pages instead of moving them.
    SetReadMostly,
    /// `hipMemAdviseUnsetReadMostly` (2).
    UnsetReadMostly,
    /// `hipMemAdviseSetPreferredLocation` (3).
    SetPreferredLocation,
    /// `hipMemAdviseUnsetPreferredLocation` (4).
    UnsetPreferredLocation,
    /// `hipMemAdviseSetAccessedBy` (5): the location maps the pages instead of faulting.
    SetAccessedBy,
    /// `hipMemAdviseUnsetAccessedBy` (6).
    UnsetAccessedBy,
    /// AMD's `hipMemAdviseSetCoarseGrain` (100).
    SetCoarseGrain,
    /// AMD's `hipMemAdviseUnsetCoarseGrain` (101).
    UnsetCoarseGrain,
}

impl Advice {
    /// Every advice, in HIP's numbering order.
    pub const ALL: [Advice; 8] = [
        Advice::SetReadMostly,
        Advice::UnsetReadMostly,
        Advice::SetPreferredLocation,
        Advice::UnsetPreferredLocation,
        Advice::SetAccessedBy,
        Advice::UnsetAccessedBy,
        Advice::SetCoarseGrain,
        Advice::UnsetCoarseGrain,
    ];

    /// Parses HIP's value; an unknown one is InvalidValue.
    pub fn from_raw(raw: i32) -> Result<Advice> {
        Self::ALL
            .into_iter()
            .find(|a| a.raw() == raw)
            .ok_or_else(|| Error::InvalidValue(format!("{raw} is not a hipMemoryAdvise value")))
    }

    /// HIP's value.
    pub fn raw(&self) -> i32 {
        match self {
            Advice::SetReadMostly => 1,
            Advice::UnsetReadMostly => 2,
            Advice::SetPreferredLocation => 3,
            Advice::UnsetPreferredLocation => 4,
            Advice::SetAccessedBy => 5,
            Advice::UnsetAccessedBy => 6,
            Advice::SetCoarseGrain => 100,
            Advice::UnsetCoarseGrain => 101,
        }
    }

    /// Whether the device argument is ignored (the read-mostly pair).
    pub fn ignores_device(&self) -> bool {
        matches!(self, Advice::SetReadMostly | Advice::UnsetReadMostly)
    }
}

/// `hipMemRangeAttribute`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RangeAttribute {
    /// `hipMemRangeAttributeReadMostly` (1): 1 if every page is read-mostly.
    ReadMostly,
    /// `hipMemRangeAttributePreferredLocation` (2).
    PreferredLocation,
    /// `hipMemRangeAttributeAccessedBy` (3): a list of device ids.
    AccessedBy,
    /// `hipMemRangeAttributeLastPrefetchLocation` (4).
    LastPrefetchLocation,
}

impl RangeAttribute {
    /// The four attributes.
    pub const ALL: [RangeAttribute; 4] = [
        RangeAttribute::ReadMostly,
        RangeAttribute::PreferredLocation,
        RangeAttribute::AccessedBy,
        RangeAttribute::LastPrefetchLocation,
    ];

    /// Parses HIP's value: AMD's CoherencyMode (100) is NotSupported, anything
    /// else unknown is InvalidValue.
    pub fn from_raw(raw: i32) -> Result<RangeAttribute> {
        if raw == 100 {
            return Err(Error::NotSupported(
                "hipMemRangeAttributeCoherencyMode (100) is AMD-only and not supported by hipmem".into(),
            ));
        }
        Self::ALL
            .into_iter()
            .find(|a| a.raw() == raw)
            .ok_or_else(|| Error::InvalidValue(format!("{raw} is not a hipMemRangeAttribute value")))
    }

    /// HIP's value.
    pub fn raw(&self) -> i32 {
        match self {
            RangeAttribute::ReadMostly => 1,
            RangeAttribute::PreferredLocation => 2,
            RangeAttribute::AccessedBy => 3,
            RangeAttribute::LastPrefetchLocation => 4,
        }
    }
}

/// What a backend can tell about migrations (`None`: not known on this backend).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ManagedStatistics {
    /// Pages moved on demand because device work or the host touched them.
    pub faults: Option<u64>,
    /// Bytes moved on demand (faults).
    pub bytes_migrated_on_demand: Option<u64>,
    /// Bytes moved by prefetches.
    pub bytes_prefetched: Option<u64>,
    /// Page copies made for read-mostly pages instead of moves.
    pub read_duplications: Option<u64>,
}

impl ManagedStatistics {
    /// The change from `earlier` to `self` (fields unknown in either stay unknown).
    pub fn since(&self, earlier: &ManagedStatistics) -> ManagedStatistics {
        let d = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_sub(b?));
        ManagedStatistics {
            faults: d(self.faults, earlier.faults),
            bytes_migrated_on_demand: d(self.bytes_migrated_on_demand, earlier.bytes_migrated_on_demand),
            bytes_prefetched: d(self.bytes_prefetched, earlier.bytes_prefetched),
            read_duplications: d(self.read_duplications, earlier.read_duplications),
        }
    }

    /// All bytes migrated (on demand and prefetched), where known.
    pub fn bytes_migrated(&self) -> Option<u64> {
        Some(self.bytes_migrated_on_demand? + self.bytes_prefetched?)
    }
}

/// The raw managed-memory operations.
///
/// Ranges name bytes of one managed allocation of this backend; they are
/// widened to whole pages where the operation works on pages (advice,
/// prefetch, attributes).
pub trait ManagedMemory: Send + Sync {
    /// Allocates `size` (> 0) bytes of managed memory, associated with
    /// `device`, attached `Global` or `Host`.
    fn allocate(&self, device: usize, size: u64, attach: AttachFlags) -> Result<DevicePtr>;

    /// Frees an allocation from [`ManagedMemory::allocate`]; queued device
    /// work completes first.
    ///
    /// # Safety
    /// `ptr` must be freed once, and no Rust reference into the memory may
    /// be used after this call.
    unsafe fn free(&self, ptr: DevicePtr) -> Result<()>;

    /// Enqueues a prefetch of the pages of `[ptr, ptr + len)` to `location` on `stream`.
    fn prefetch(&self, ptr: DevicePtr, len: u64, location: Location, stream: RawStream) -> Result<()>;

    /// Applies `advice` for `location` to the pages of `[ptr, ptr + len)`.
    /// Coarse-grain advice is NotSupported unless the backend has it.
    fn advise(&self, ptr: DevicePtr, len: u64, advice: Advice, location: Location) -> Result<()>;

    /// Reads `attribute` over the pages of `[ptr, ptr + len)` into `out`
    /// (one value for the scalar attributes; AccessedBy fills device ids and
    /// pads with -2). Non-uniform answers follow HIP's rules.
    fn range_attribute(
        &self,
        ptr: DevicePtr,
        len: u64,
        attribute: RangeAttribute,
        out: &mut [i32],
    ) -> Result<()>;

    /// Enqueues the attachment of the allocation at `ptr` (`len` 0 or its
    /// size) to `stream` with `flags`.
    fn stream_attach(&self, stream: RawStream, ptr: DevicePtr, len: u64, flags: AttachFlags) -> Result<()>;

    /// Makes `[ptr, ptr + len)` resident on the host before the host touches
    /// it (`write`: the host will write it). The caller has already waited
    /// for the device work that used it. A no-op where the hardware faults
    /// pages in by itself.
    fn host_access(&self, ptr: DevicePtr, len: u64, write: bool) -> Result<()>;

    /// Migration statistics since the backend started.
    fn statistics(&self) -> ManagedStatistics;
}

/// One managed allocation, owned: freed once, when dropped, and viewable as
/// bytes by the host through borrows of it.
///
/// The owner (`ManagedBuffer`, the runtime's table of raw allocations) is
/// responsible for not viewing the bytes while device work may touch them:
/// it waits for the devices first and asks only through an exclusive borrow.
pub struct ManagedBlock {
    backend: Arc<dyn Backend>,
    ptr: DevicePtr,
    len: usize,
    device: usize,
    attach: AttachFlags,
}

impl std::fmt::Debug for ManagedBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedBlock")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("device", &self.device)
            .field("attach", &self.attach)
            .finish()
    }
}

impl ManagedBlock {
    /// Allocates `size` (> 0) bytes of managed memory from `backend`.
    pub fn allocate(
        backend: &Arc<dyn Backend>,
        device: usize,
        size: u64,
        attach: AttachFlags,
    ) -> Result<ManagedBlock> {
        let mm = backend.managed_memory().ok_or_else(|| {
            Error::NotSupported(format!("the {} backend has no managed memory", backend.kind()))
        })?;
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes of managed memory".into()));
        }
        if attach == AttachFlags::Single {
            return Err(Error::InvalidValue("managed memory is allocated Global or Host, not Single".into()));
        }
        let len = usize::try_from(size)
            .ok()
            .filter(|&l| l <= isize::MAX as usize)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes do not fit the address space")))?;
        let ptr = mm.allocate(device, size, attach)?;
        Ok(ManagedBlock { backend: Arc::clone(backend), ptr, len, device, attach })
    }

    /// The address (the same on the host and every device).
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is empty (never: blocks have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device it was allocated for.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The attach flags it was allocated with.
    pub fn attach(&self) -> AttachFlags {
        self.attach
    }

    fn mm(&self) -> Result<&dyn ManagedMemory> {
        self.backend.managed_memory().ok_or_else(|| {
            Error::NotSupported(format!("the {} backend has no managed memory", self.backend.kind()))
        })
    }

    /// The bytes, for reading by the host, after the backend has brought
    /// them to the host. The caller has waited for the device work that
    /// used them (see the type's documentation).
    pub fn host_bytes(&mut self) -> Result<&[u8]> {
        self.mm()?.host_access(self.ptr, self.len as u64, false)?;
        // SAFETY: the block owns `len` bytes of managed memory at `ptr`,
        // addressable by the host (unified addressing), zeroed at allocation
        // or written since, freed only in Drop, which cannot run while this
        // borrow lives. The exclusive borrow of the block keeps this crate's
        // safe API from queuing device work on it while the view lives, and
        // the owner waited for the work queued before.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.0 as *const u8, self.len) })
    }

    /// The bytes, for writing by the host (as [`ManagedBlock::host_bytes`]).
    pub fn host_bytes_mut(&mut self) -> Result<&mut [u8]> {
        self.mm()?.host_access(self.ptr, self.len as u64, true)?;
        // SAFETY: as in `host_bytes`; the exclusive borrow makes the view unique.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.ptr.0 as *mut u8, self.len) })
    }
}

impl Drop for ManagedBlock {
    fn drop(&mut self) {
        if let Some(mm) = self.backend.managed_memory() {
            // SAFETY: the block owns the allocation and frees it once, here;
            // the views borrowed from it have ended.
            if let Err(e) = unsafe { mm.free(self.ptr) } {
                tracing::warn!(target: "hipmem", "freeing managed memory failed in Drop: {e}");
            }
        }
    }
}
