//! Virtual memory management: physical allocations, address reservations,
//! mappings and per-device access (`hipMemCreate`, `hipMemAddressReserve`,
//! `hipMemMap`, `hipMemSetAccess`, ...), and a buffer that grows without
//! copying.
//!
//! Two layers:
//! - the raw, HIP-shaped methods on [`Runtime`] (`mem_create`,
//!   `address_reserve`, `mem_map`, ...) with HIP's argument rules, for the C
//!   ABI; the runtime keeps a table of live handles, reservations and
//!   mappings, so a double release or a partial unmap is an error before it
//!   reaches the backend, and registers every mapping in the allocation
//!   registry (`MemoryKind::VmmMapping`) so copies, kernels and
//!   `hipPointerGetAttributes` work on mapped memory;
//! - owned types that hold the lifetime rules: a [`Mapping`] keeps its
//!   [`PhysicalAllocation`] and its [`AddressReservation`] alive; dropping
//!   releases, unmaps and frees; a new mapping has no access until
//!   [`Mapping::set_access`]; [`GrowableBuffer`] grows by mapping at its end.
#![forbid(unsafe_code)]

mod growable;
mod safe;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

pub use growable::{DEFAULT_MAX_RESERVATION, GrowableBuffer};
pub use safe::{AddressReservation, MappedView, Mapping, PhysicalAllocation};

use crate::backend::DevicePtr;
use crate::backend::virtual_memory::VirtualMemory;
pub use crate::backend::virtual_memory::{AccessFlags, HANDLE_TYPE_POSIX_FD, PhysicalProperties};
use crate::error::{Error, Result};
use crate::runtime::{Allocation, CoreHooks, ExtensionKey, MemoryKind, Runtime};

/// `hipMemAllocationTypePinned`.
pub const ALLOCATION_TYPE_PINNED: u32 = 1;
/// `hipMemLocationTypeDevice`.
pub const LOCATION_TYPE_DEVICE: u32 = 1;

/// `hipMemLocation`: where memory lives or who accesses it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct MemLocation {
    /// `hipMemLocationType` (1: a device).
    pub location_type: u32,
    /// The device ordinal.
    pub id: i32,
}

impl MemLocation {
    /// Device `ordinal`.
    pub fn device(ordinal: usize) -> MemLocation {
        MemLocation { location_type: LOCATION_TYPE_DEVICE, id: ordinal as i32 }
    }
}

/// `hipMemAllocationProp` (the fields hipmem uses).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct AllocationProp {
    /// `hipMemAllocationType` (1: pinned).
    pub alloc_type: u32,
    /// `hipMemAllocationHandleType` bits the allocation may be exported as.
    pub requested_handle_types: u32,
    /// Where the memory lives.
    pub location: MemLocation,
}

impl AllocationProp {
    /// Pinned memory on device `ordinal`, not exportable.
    pub fn device(ordinal: usize) -> AllocationProp {
        AllocationProp {
            alloc_type: ALLOCATION_TYPE_PINNED,
            requested_handle_types: 0,
            location: MemLocation::device(ordinal),
        }
    }
}

/// `hipMemAccessDesc`: one device's access.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct AccessDesc {
    /// Which device.
    pub location: MemLocation,
    /// `hipMemAccessFlags` (0, 1 or 3).
    pub flags: u32,
}

impl AccessDesc {
    /// `access` for device `ordinal`.
    pub fn device(ordinal: usize, access: AccessFlags) -> AccessDesc {
        AccessDesc { location: MemLocation::device(ordinal), flags: access.raw() }
    }
}

/// `hipMemAllocationGranularity_flags`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum GranularityOption {
    /// `hipMemAllocationGranularityMinimum` (0).
    Minimum,
    /// `hipMemAllocationGranularityRecommended` (1).
    Recommended,
}

impl GranularityOption {
    /// Parses the numeric option; anything else is InvalidValue.
    pub fn from_raw(raw: u32) -> Result<GranularityOption> {
        match raw {
            0 => Ok(GranularityOption::Minimum),
            1 => Ok(GranularityOption::Recommended),
            other => Err(Error::InvalidValue(format!("{other} is not a granularity option (0 or 1)"))),
        }
    }
}

#[derive(Debug)]
struct HandleInfo {
    props: PhysicalProperties,
    refs: u32,
}

#[derive(Copy, Clone, Debug)]
struct MapInfo {
    size: u64,
    handle: u64,
    props: PhysicalProperties,
    /// Bit d: device d has some access (read or read-write).
    accessible: u64,
}

impl MapInfo {
    /// Whether `device` has some access to the mapping.
    fn accessible_to(&self, device: usize) -> bool {
        self.accessible & (1u64 << (device % 64)) != 0
    }
}

#[derive(Debug, Default)]
struct State {
    handles: HashMap<u64, HandleInfo>,
    /// base → size.
    reservations: BTreeMap<u64, u64>,
    /// base → mapping.
    mappings: BTreeMap<u64, MapInfo>,
}

/// The runtime's table of VMM handles, reservations and mappings.
#[derive(Debug, Default)]
pub(crate) struct VmmTable {
    state: Mutex<State>,
}

impl VmmTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `device` has some access (read or read-write) to the mapping
    /// at `ptr` (false where nothing is mapped).
    fn accessible_by(&self, ptr: DevicePtr, device: usize) -> bool {
        self.lock().mapping_at(ptr).is_some_and(|(_, m)| m.accessible_to(device))
    }

    /// Device work on mapped memory needs access set first: every mapping
    /// in `[ptr, ptr + len)` must be accessible to some device (else the
    /// work would fault on the device instead of failing here).
    fn check_access(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<()> {
        let state = self.lock();
        let end = ptr.0.saturating_add(len);
        let mut at = ptr.0;
        while at < end {
            let Some((base, m)) = state.mapping_at(DevicePtr(at)) else {
                return Err(invalid(format!("{what}: {at:#x} is not mapped")));
            };
            if m.accessible == 0 {
                return Err(invalid(format!(
                    "{what}: the mapping at {base:#x} has no access for any device (hipMemSetAccess first)"
                )));
            }
            at = base + m.size;
        }
        Ok(())
    }
}

/// The virtual-memory subsystem's state in a runtime.
static VMM: ExtensionKey<VmmTable> = ExtensionKey::new("virtual memory");

/// The runtime's VMM table, made (and its range check registered) on first use.
fn table(rt: &Runtime) -> &VmmTable {
    rt.extension(&VMM, |rt| {
        let table = Arc::new(VmmTable::default());
        rt.add_hooks(Arc::clone(&table) as Arc<dyn CoreHooks>);
        table
    })
}

/// Copies and kernels on mapped memory: the mapping must give some device
/// access; a kernel reaches a mapping only where `hipMemSetAccess` gave its
/// device access.
impl CoreHooks for VmmTable {
    fn check_range(
        &self,
        _rt: &Runtime,
        a: &Allocation,
        ptr: DevicePtr,
        len: u64,
        what: &str,
    ) -> Option<Result<Allocation>> {
        (a.kind == MemoryKind::VmmMapping).then(|| self.check_access(ptr, len, what).map(|()| *a))
    }

    fn device_access(
        &self,
        rt: &Runtime,
        device: usize,
        a: &Allocation,
        ptr: DevicePtr,
    ) -> Option<Result<AccessFlags>> {
        (a.kind == MemoryKind::VmmMapping).then(|| rt.mem_get_access(&MemLocation::device(device), ptr))
    }

    fn device_reaches(
        &self,
        _rt: &Runtime,
        device: usize,
        a: &Allocation,
        ptr: DevicePtr,
    ) -> Option<Result<bool>> {
        // The runtime's own table: no driver call per kernel launch.
        (a.kind == MemoryKind::VmmMapping).then(|| Ok(self.accessible_by(ptr, device)))
    }
}

impl State {
    /// Bases of the whole mappings that exactly cover `[ptr, ptr + size)`.
    fn covering(&self, ptr: DevicePtr, size: u64, what: &str) -> Result<Vec<(u64, MapInfo)>> {
        let end = ptr
            .0
            .checked_add(size)
            .ok_or_else(|| Error::InvalidValue(format!("{what}: {ptr} + {size} bytes overflows")))?;
        let mut out = Vec::new();
        let mut at = ptr.0;
        while at < end {
            match self.mappings.get(&at) {
                Some(m) => {
                    out.push((at, *m));
                    at += m.size;
                }
                None => {
                    let inside = self.mappings.range(..at).next_back().is_some_and(|(b, m)| b + m.size > at);
                    return Err(Error::InvalidValue(if inside {
                        format!(
                            "{what}: {at:#x} is inside a mapping, not at its start: the range {ptr} + {size} must cover whole mappings"
                        )
                    } else {
                        format!("{what}: {at:#x} is not mapped (the range {ptr} + {size} must be mapped)")
                    }));
                }
            }
        }
        if at != end {
            return Err(Error::InvalidValue(format!(
                "{what}: the range {ptr} + {size} ends inside a mapping (which ends at {at:#x}); it must cover whole mappings"
            )));
        }
        Ok(out)
    }

    fn mapping_at(&self, ptr: DevicePtr) -> Option<(u64, MapInfo)> {
        self.mappings.range(..=ptr.0).next_back().filter(|(b, m)| ptr.0 < **b + m.size).map(|(b, m)| (*b, *m))
    }
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::InvalidValue(msg.into())
}

impl Runtime {
    fn vm(&self) -> Result<&dyn VirtualMemory> {
        self.backend().virtual_memory().ok_or_else(|| {
            Error::NotSupported(format!(
                "the {} backend has no virtual memory management",
                self.backend_kind()
            ))
        })
    }

    fn location_device(&self, location: &MemLocation, what: &str) -> Result<usize> {
        if location.location_type != LOCATION_TYPE_DEVICE {
            return Err(invalid(format!(
                "{what}: location type {} is not hipMemLocationTypeDevice (1)",
                location.location_type
            )));
        }
        let ok = location.id >= 0 && (location.id as usize) < self.device_count();
        if !ok {
            return Err(invalid(format!(
                "{what}: device {} does not exist ({} device(s))",
                location.id,
                self.device_count()
            )));
        }
        Ok(location.id as usize)
    }

    /// The granularity sizes of reservations must be multiples of (the
    /// largest minimum granularity among the devices).
    pub fn reservation_granularity(&self) -> Result<u64> {
        let vm = self.vm()?;
        let mut g = 0;
        for d in 0..self.device_count() {
            g = g.max(vm.granularity(d, false)?);
        }
        Ok(g.max(1))
    }

    /// `hipMemGetAllocationGranularity`.
    pub fn allocation_granularity(&self, prop: &AllocationProp, option: GranularityOption) -> Result<u64> {
        let vm = self.vm()?;
        if prop.alloc_type != ALLOCATION_TYPE_PINNED {
            return Err(invalid(format!(
                "hipMemGetAllocationGranularity: allocation type {} is not hipMemAllocationTypePinned (1)",
                prop.alloc_type
            )));
        }
        let device = self.location_device(&prop.location, "hipMemGetAllocationGranularity")?;
        vm.granularity(device, option == GranularityOption::Recommended)
    }

    /// `hipMemCreate`: a physical allocation; returns its handle.
    pub fn mem_create(&self, size: u64, prop: &AllocationProp, flags: u64) -> Result<u64> {
        let vm = self.vm()?;
        if flags != 0 {
            return Err(invalid(format!("hipMemCreate: flags must be 0, not {flags:#x}")));
        }
        if size == 0 {
            return Err(invalid("hipMemCreate: size 0"));
        }
        if prop.alloc_type != ALLOCATION_TYPE_PINNED {
            return Err(invalid(format!(
                "hipMemCreate: allocation type {} is not hipMemAllocationTypePinned (1)",
                prop.alloc_type
            )));
        }
        let device = self.location_device(&prop.location, "hipMemCreate")?;
        if prop.requested_handle_types & !HANDLE_TYPE_POSIX_FD != 0 {
            return Err(Error::NotSupported(format!(
                "hipMemCreate: handle type bits {:#x} are not supported (only POSIX file descriptors, 1)",
                prop.requested_handle_types
            )));
        }
        let g = vm.granularity(device, false)?;
        if size % g != 0 {
            return Err(invalid(format!(
                "hipMemCreate: size {size} is not a multiple of the allocation granularity {g}"
            )));
        }
        let handle = vm.mem_create(device, size, prop.requested_handle_types)?;
        let props = PhysicalProperties { device, size, handle_types: prop.requested_handle_types };
        table(self).lock().handles.insert(handle, HandleInfo { props, refs: 1 });
        Ok(handle)
    }

    /// `hipMemRelease`: drops one reference; the memory stays while mapped.
    pub fn mem_release(&self, handle: u64) -> Result<()> {
        let vm = self.vm()?;
        if handle == 0 {
            return Err(invalid("hipMemRelease of a null handle"));
        }
        let mut state = table(self).lock();
        let live = state.handles.get(&handle).is_some_and(|h| h.refs > 0);
        if !live {
            return Err(invalid(format!(
                "hipMemRelease: {handle:#x} is not a live allocation handle (never created, or already released)"
            )));
        }
        vm.mem_release(handle)?;
        if let Some(h) = state.handles.get_mut(&handle) {
            h.refs -= 1;
            if h.refs == 0 {
                state.handles.remove(&handle);
            }
        }
        Ok(())
    }

    /// `hipMemAddressReserve`: `size` bytes of addresses, aligned to
    /// `alignment` (0: the granularity), at `hint` if free (check the result).
    pub fn address_reserve(
        &self,
        size: u64,
        alignment: u64,
        hint: DevicePtr,
        flags: u64,
    ) -> Result<DevicePtr> {
        let g = self.reservation_granularity()?;
        if flags != 0 {
            return Err(invalid(format!("hipMemAddressReserve: flags must be 0, not {flags:#x}")));
        }
        if size == 0 || size % g != 0 {
            return Err(Error::OutOfMemory(format!(
                "hipMemAddressReserve: size {size} is not a nonzero multiple of the granularity {g}"
            )));
        }
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(Error::OutOfMemory(format!(
                "hipMemAddressReserve: alignment {alignment} is not a power of two"
            )));
        }
        let ptr = self.vm()?.address_reserve(size, alignment, hint)?;
        table(self).lock().reservations.insert(ptr.0, size);
        Ok(ptr)
    }

    /// `hipMemAddressFree`: frees a whole reservation with no mapping left.
    pub fn address_free(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let vm = self.vm()?;
        if ptr.is_null() {
            return Err(invalid("hipMemAddressFree of a null pointer"));
        }
        let mut state = table(self).lock();
        match state.reservations.get(&ptr.0) {
            Some(&s) if s == size => {}
            Some(&s) => {
                return Err(invalid(format!(
                    "hipMemAddressFree: the reservation at {ptr} has {s} bytes, not {size}"
                )));
            }
            None => {
                return Err(invalid(format!(
                    "hipMemAddressFree: {ptr} is not the start of a live reservation (never reserved, or already freed)"
                )));
            }
        }
        if state.mappings.range(ptr.0..ptr.0 + size).next().is_some() {
            return Err(invalid(format!(
                "hipMemAddressFree: the reservation at {ptr} still has mappings; unmap them first"
            )));
        }
        vm.address_free(ptr, size)?;
        state.reservations.remove(&ptr.0);
        Ok(())
    }

    /// `hipMemMap`: maps `size` bytes of `handle`, from `offset`, at `ptr`
    /// inside a reservation. The mapping starts with no access.
    pub fn mem_map(&self, ptr: DevicePtr, size: u64, offset: u64, handle: u64, flags: u64) -> Result<()> {
        let vm = self.vm()?;
        if ptr.is_null() || handle == 0 {
            return Err(invalid(format!(
                "hipMemMap: null {}",
                if ptr.is_null() { "address" } else { "handle" }
            )));
        }
        if size == 0 {
            return Err(invalid("hipMemMap: size 0"));
        }
        if flags != 0 {
            return Err(invalid(format!("hipMemMap: flags must be 0, not {flags:#x}")));
        }
        let mut state = table(self).lock();
        let props = state
            .handles
            .get(&handle)
            .filter(|h| h.refs > 0)
            .map(|h| h.props)
            .ok_or_else(|| invalid(format!("hipMemMap: {handle:#x} is not a live allocation handle")))?;
        let g = vm.granularity(props.device, false)?;
        if ptr.0 % g != 0 || size % g != 0 || offset % g != 0 {
            return Err(invalid(format!(
                "hipMemMap: address {ptr}, size {size} and offset {offset} must be multiples of the granularity {g}"
            )));
        }
        // (Size 0: imported from another process, where the driver knows it.)
        if props.size != 0 && offset.checked_add(size).is_none_or(|e| e > props.size) {
            return Err(invalid(format!(
                "hipMemMap: {size} bytes from offset {offset} run past the end of the {}-byte physical allocation",
                props.size
            )));
        }
        let end =
            ptr.0.checked_add(size).ok_or_else(|| invalid(format!("hipMemMap: {ptr} + {size} overflows")))?;
        let inside = state.reservations.range(..=ptr.0).next_back().is_some_and(|(b, s)| end <= b + s);
        if !inside {
            return Err(invalid(format!(
                "hipMemMap: {size} bytes at {ptr} are not inside one address reservation"
            )));
        }
        if state.mappings.range(..end).next_back().is_some_and(|(b, m)| b + m.size > ptr.0) {
            return Err(invalid(format!("hipMemMap: {size} bytes at {ptr} overlap an existing mapping")));
        }
        vm.mem_map(ptr, size, offset, handle)?;
        state.mappings.insert(ptr.0, MapInfo { size, handle, props, accessible: 0 });
        self.allocations().insert(Allocation {
            base: ptr,
            size,
            kind: MemoryKind::VmmMapping,
            device: props.device,
        });
        Ok(())
    }

    /// `hipMemUnmap`: the range must cover whole mappings (several adjacent
    /// ones allowed); the addresses stay reserved.
    pub fn mem_unmap(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let vm = self.vm()?;
        if ptr.is_null() {
            return Err(invalid("hipMemUnmap of a null pointer"));
        }
        if size == 0 {
            return Err(invalid("hipMemUnmap: size 0"));
        }
        // Out of the table and the registry first (no new work and no other
        // call can name the range), then the backend's unmap with the table
        // unlocked: it may wait for the work queued on the devices (the CPU
        // backend does), and other threads' calls go on meanwhile.
        let (covered, removed) = {
            let mut state = table(self).lock();
            let covered = state.covering(ptr, size, "hipMemUnmap")?;
            let mut removed = Vec::new();
            for (base, _) in &covered {
                state.mappings.remove(base);
                if let Some(a) =
                    self.allocations().remove_if(DevicePtr(*base), |a| a.kind == MemoryKind::VmmMapping)
                {
                    removed.push(a);
                }
            }
            (covered, removed)
        };
        if let Err(e) = vm.mem_unmap(ptr, size) {
            // Still mapped (the backend refused): back in, as they were.
            let mut state = table(self).lock();
            for (base, m) in covered {
                state.mappings.insert(base, m);
            }
            for a in removed {
                self.allocations().insert(a);
            }
            return Err(e);
        }
        Ok(())
    }

    /// `hipMemSetAccess`: sets each described device's access to the mapped
    /// range (which must cover whole mappings).
    pub fn mem_set_access(&self, ptr: DevicePtr, size: u64, descs: &[AccessDesc]) -> Result<()> {
        let vm = self.vm()?;
        if ptr.is_null() {
            return Err(invalid("hipMemSetAccess of a null pointer"));
        }
        if size == 0 {
            return Err(invalid("hipMemSetAccess: size 0"));
        }
        if descs.is_empty() {
            return Err(invalid("hipMemSetAccess: no access descriptor (count 0)"));
        }
        let mut parsed = Vec::with_capacity(descs.len());
        for d in descs {
            let device = self.location_device(&d.location, "hipMemSetAccess")?;
            let flags = AccessFlags::from_raw(d.flags)?;
            parsed.push((device, flags));
        }
        // Access taken away (to read-only or none) from a device that has
        // some changes the mappings at once: that device's queued work may
        // still use them (as a peer copy did when peer access went away
        // under it, faulting both devices' contexts), so it runs first,
        // without the table held.
        // (The mappings are looked at twice only where some access is lowered.)
        let revoked: Vec<usize> = if parsed.iter().any(|(_, flags)| *flags < AccessFlags::ReadWrite) {
            let state = table(self).lock();
            let covered = state.covering(ptr, size, "hipMemSetAccess")?;
            parsed
                .iter()
                .filter(|(device, flags)| {
                    *flags < AccessFlags::ReadWrite && covered.iter().any(|(_, m)| m.accessible_to(*device))
                })
                .map(|&(device, _)| device)
                .collect()
        } else {
            Vec::new()
        };
        for device in revoked {
            self.device_synchronize(device)?;
        }
        let mut state = table(self).lock();
        let covered = state.covering(ptr, size, "hipMemSetAccess")?;
        for (device, flags) in parsed {
            vm.mem_set_access(ptr, size, device, flags.raw())?;
            let bit = 1u64 << (device % 64);
            for (base, _) in &covered {
                if let Some(m) = state.mappings.get_mut(base) {
                    if flags == AccessFlags::None { m.accessible &= !bit } else { m.accessible |= bit }
                }
            }
        }
        Ok(())
    }

    /// `hipMemGetAccess`: the access of `location` to the mapping at `ptr`.
    pub fn mem_get_access(&self, location: &MemLocation, ptr: DevicePtr) -> Result<AccessFlags> {
        let vm = self.vm()?;
        if ptr.is_null() {
            return Err(invalid("hipMemGetAccess of a null pointer"));
        }
        let device = self.location_device(location, "hipMemGetAccess")?;
        if table(self).lock().mapping_at(ptr).is_none() {
            return Err(invalid(format!("hipMemGetAccess: {ptr} is not a mapped address")));
        }
        AccessFlags::from_raw(vm.mem_get_access(ptr, device)?)
    }

    /// `hipMemRetainAllocationHandle`: the handle mapped at `ptr`, with one
    /// more reference (release it with [`Runtime::mem_release`]).
    pub fn retain_allocation_handle(&self, ptr: DevicePtr) -> Result<u64> {
        let vm = self.vm()?;
        if ptr.is_null() {
            return Err(invalid("hipMemRetainAllocationHandle of a null pointer"));
        }
        let mut state = table(self).lock();
        let Some((_, mapping)) = state.mapping_at(ptr) else {
            return Err(invalid(format!(
                "hipMemRetainAllocationHandle: {ptr} is not a mapped address (reserved but unmapped, or unknown)"
            )));
        };
        let handle = vm.retain_allocation_handle(ptr)?;
        if handle != mapping.handle {
            tracing::debug!(target: "hipmem", "retained handle {handle:#x} differs from the mapped {:#x}", mapping.handle);
        }
        match state.handles.get_mut(&handle) {
            Some(h) => h.refs += 1,
            None => {
                state.handles.insert(handle, HandleInfo { props: mapping.props, refs: 1 });
            }
        }
        Ok(handle)
    }

    /// `hipMemGetAllocationPropertiesFromHandle`.
    pub fn allocation_properties(&self, handle: u64) -> Result<AllocationProp> {
        self.vm()?;
        let state = table(self).lock();
        let h = state.handles.get(&handle).filter(|h| h.refs > 0).ok_or_else(|| {
            invalid(format!(
                "hipMemGetAllocationPropertiesFromHandle: {handle:#x} is not a live allocation handle"
            ))
        })?;
        Ok(AllocationProp {
            alloc_type: ALLOCATION_TYPE_PINNED,
            requested_handle_types: h.props.handle_types,
            location: MemLocation::device(h.props.device),
        })
    }

    /// `hipMemExportToShareableHandle` with a POSIX file descriptor.
    pub fn export_shareable_handle(
        &self,
        handle: u64,
        handle_type: u32,
        flags: u64,
    ) -> Result<std::os::fd::OwnedFd> {
        let vm = self.vm()?;
        if flags != 0 {
            return Err(invalid(format!("hipMemExportToShareableHandle: flags must be 0, not {flags:#x}")));
        }
        let state = table(self).lock();
        let h = state.handles.get(&handle).filter(|h| h.refs > 0).ok_or_else(|| {
            invalid(format!("hipMemExportToShareableHandle: {handle:#x} is not a live allocation handle"))
        })?;
        if handle_type != HANDLE_TYPE_POSIX_FD || h.props.handle_types & handle_type == 0 {
            return Err(invalid(format!(
                "hipMemExportToShareableHandle: handle type {handle_type} was not requested when the allocation was created (requested {:#x})",
                h.props.handle_types
            )));
        }
        vm.export_to_fd(handle)
    }

    /// `hipMemImportFromShareableHandle` from a POSIX file descriptor.
    pub fn import_shareable_handle(&self, fd: std::os::fd::BorrowedFd<'_>, handle_type: u32) -> Result<u64> {
        let vm = self.vm()?;
        if handle_type != HANDLE_TYPE_POSIX_FD {
            return Err(invalid(format!(
                "hipMemImportFromShareableHandle: handle type {handle_type} is not a POSIX file descriptor (1)"
            )));
        }
        let handle = vm.import_from_fd(fd)?;
        let props = vm.allocation_properties(handle)?;
        let mut state = table(self).lock();
        match state.handles.get_mut(&handle) {
            Some(h) => h.refs += 1,
            None => {
                state.handles.insert(handle, HandleInfo { props, refs: 1 });
            }
        }
        Ok(handle)
    }
}
