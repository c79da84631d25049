//! Virtual memory management (`cuMem*` / `hipMem*` VMM): the raw operations a
//! backend with virtual memory provides, as a capability trait of its own
//! (handed out by [`super::Backend::virtual_memory`]).
//!
//! A physical allocation is an opaque handle (the backend's own id: the cuda
//! backend's stands for a list of `CUmemGenericAllocationHandle`s);
//! a reservation is a range of addresses with nothing behind it; a mapping
//! puts part of a physical allocation behind part of a reservation; access is
//! set per device and per mapping. The backend does what it is asked and
//! checks what it must to stay memory-safe; HIP's argument rules (zero sizes,
//! flags, granularity multiples) are the runtime's.

use super::DevicePtr;
use crate::error::{Error, Result};

/// `hipMemAllocationHandleType` bit: a POSIX file descriptor.
pub const HANDLE_TYPE_POSIX_FD: u32 = 1;

/// `hipMemAccessFlags`, ordered by what they allow (none < read < read-write).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccessFlags {
    /// `hipMemAccessFlagsProtNone` (0).
    None,
    /// `hipMemAccessFlagsProtRead` (1).
    Read,
    /// `hipMemAccessFlagsProtReadWrite` (3).
    ReadWrite,
}

impl AccessFlags {
    /// Parses the numeric flags; anything else is InvalidValue.
    pub fn from_raw(raw: u32) -> Result<AccessFlags> {
        match raw {
            0 => Ok(AccessFlags::None),
            1 => Ok(AccessFlags::Read),
            3 => Ok(AccessFlags::ReadWrite),
            other => {
                Err(Error::InvalidValue(format!("{other} is not a hipMemAccessFlags value (0, 1 or 3)")))
            }
        }
    }

    /// The numeric value.
    pub fn raw(&self) -> u32 {
        match self {
            AccessFlags::None => 0,
            AccessFlags::Read => 1,
            AccessFlags::ReadWrite => 3,
        }
    }
}

/// What a physical allocation is (from its handle).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PhysicalProperties {
    /// Device the memory lives on.
    pub device: usize,
    /// Size in bytes.
    pub size: u64,
    /// `hipMemAllocationHandleType` bits it may be exported as.
    pub handle_types: u32,
}

/// The raw VMM operations.
pub trait VirtualMemory: Send + Sync {
    /// Allocation granularity of `device`: the minimum, or the recommended one.
    fn granularity(&self, device: usize, recommended: bool) -> Result<u64>;

    /// Creates a physical allocation of `size` bytes (a multiple of the
    /// granularity) on `device`, exportable as `handle_types`.
    fn mem_create(&self, device: usize, size: u64, handle_types: u32) -> Result<u64>;

    /// [`VirtualMemory::mem_create`] for an allocation its caller maps only
    /// whole, from offset 0 (a pool's groups and units). Where the backend
    /// cuts a small allocation into one driver allocation per granule so
    /// that a mapping may start at any granule (cuda and hip: their
    /// drivers map only from offset 0), this one is a single driver
    /// allocation: on an H100 creating, mapping and giving access to a
    /// driver allocation cost about 55 µs whatever its size (2 to 128 MiB),
    /// so a 32 MiB allocation cut per granule cost sixteen times that. A
    /// mapping of part of it later cuts it if nothing has seen its memory
    /// yet, and is NotSupported once something has.
    fn mem_create_whole(&self, device: usize, size: u64, handle_types: u32) -> Result<u64> {
        self.mem_create(device, size, handle_types)
    }

    /// Drops one reference to a handle; the memory goes once it is neither
    /// referenced nor mapped.
    fn mem_release(&self, handle: u64) -> Result<()>;

    /// Reserves `size` bytes of addresses aligned to `alignment` (0: the
    /// granularity), at `hint` if that range is free, else anywhere.
    fn address_reserve(&self, size: u64, alignment: u64, hint: DevicePtr) -> Result<DevicePtr>;

    /// Frees a whole reservation (it must hold no mapping).
    fn address_free(&self, ptr: DevicePtr, size: u64) -> Result<()>;

    /// Maps `size` bytes of `handle`, from `offset`, at `ptr` (inside a
    /// reservation, over no other mapping). The mapping starts with no access.
    fn mem_map(&self, ptr: DevicePtr, size: u64, offset: u64, handle: u64) -> Result<()>;

    /// Unmaps `[ptr, ptr + size)`, which must cover whole mappings; the
    /// addresses stay reserved. Work queued on the range completes first.
    fn mem_unmap(&self, ptr: DevicePtr, size: u64) -> Result<()>;

    /// Sets `device`'s access to the mapped range (0 none, 1 read, 3 read-write).
    fn mem_set_access(&self, ptr: DevicePtr, size: u64, device: usize, flags: u32) -> Result<()>;

    /// `device`'s access to the mapping that contains `ptr`.
    fn mem_get_access(&self, ptr: DevicePtr, device: usize) -> Result<u32>;

    /// The handle of the physical allocation mapped at `ptr`, with one more
    /// reference (released with [`VirtualMemory::mem_release`]).
    fn retain_allocation_handle(&self, ptr: DevicePtr) -> Result<u64>;

    /// What a handle is.
    fn allocation_properties(&self, handle: u64) -> Result<PhysicalProperties>;

    /// Exports a handle as a POSIX file descriptor (it must have been created
    /// with [`HANDLE_TYPE_POSIX_FD`]).
    fn export_to_fd(&self, handle: u64) -> Result<std::os::fd::OwnedFd>;

    /// Imports a physical allocation from a file descriptor made by
    /// [`VirtualMemory::export_to_fd`] (a new handle with one reference).
    fn import_from_fd(&self, fd: std::os::fd::BorrowedFd<'_>) -> Result<u64>;
}
