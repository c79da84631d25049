//! Owned VMM types: each releases what it holds in `Drop`, and a mapping
//! holds what it maps (the physical allocation and the reservation), so the
//! order of drops cannot free memory that is still mapped.
#![forbid(unsafe_code)]

use std::marker::PhantomData;
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use super::{AccessDesc, AccessFlags, AllocationProp, GranularityOption, MemLocation};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::runtime::Device;
use crate::runtime::DeviceSlice;
use crate::runtime::Runtime;

struct PhysicalInner {
    rt: Runtime,
    handle: u64,
    device: usize,
    size: u64,
}

impl Drop for PhysicalInner {
    fn drop(&mut self) {
        if let Err(e) = self.rt.mem_release(self.handle) {
            self.rt.record_drop_error("hipMemRelease of a PhysicalAllocation", e);
        }
    }
}

/// Physical device memory with no address (`hipMemCreate`); released in
/// `Drop`, but only once no [`Mapping`] of it remains.
#[derive(Clone)]
pub struct PhysicalAllocation {
    inner: Arc<PhysicalInner>,
}

impl std::fmt::Debug for PhysicalAllocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhysicalAllocation")
            .field("handle", &format_args!("{:#x}", self.inner.handle))
            .field("device", &self.inner.device)
            .field("size", &self.inner.size)
            .finish()
    }
}

impl PhysicalAllocation {
    /// `size` bytes (a multiple of [`PhysicalAllocation::granularity`]) of
    /// pinned memory on `device`.
    pub fn new(device: &Device, size: u64) -> Result<PhysicalAllocation> {
        PhysicalAllocation::with_prop(device.runtime(), size, &AllocationProp::device(device.ordinal()))
    }

    /// A physical allocation with explicit properties (`hipMemCreate`).
    pub fn with_prop(rt: &Runtime, size: u64, prop: &AllocationProp) -> Result<PhysicalAllocation> {
        let handle = rt.mem_create(size, prop, 0)?;
        let device = prop.location.id as usize;
        Ok(PhysicalAllocation { inner: Arc::new(PhysicalInner { rt: rt.clone(), handle, device, size }) })
    }

    /// The minimum granularity of `device` (`hipMemGetAllocationGranularity`).
    pub fn granularity(device: &Device) -> Result<u64> {
        device
            .runtime()
            .allocation_granularity(&AllocationProp::device(device.ordinal()), GranularityOption::Minimum)
    }

    /// The raw handle (`hipMemGenericAllocationHandle_t`).
    pub fn handle(&self) -> u64 {
        self.inner.handle
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// The device it lives on.
    pub fn device(&self) -> usize {
        self.inner.device
    }

    /// Its properties (`hipMemGetAllocationPropertiesFromHandle`).
    pub fn properties(&self) -> Result<AllocationProp> {
        self.inner.rt.allocation_properties(self.inner.handle)
    }

    /// Imports a physical allocation another process exported
    /// (`hipMemImportFromShareableHandle`; the caller keeps `fd`). Dropping
    /// it releases this process's reference only.
    pub fn import_fd(rt: &Runtime, fd: std::os::fd::BorrowedFd<'_>) -> Result<PhysicalAllocation> {
        let handle = rt.import_shareable_handle(fd, super::HANDLE_TYPE_POSIX_FD)?;
        let props = match rt.allocation_properties(handle) {
            Ok(p) => p,
            Err(e) => {
                let _ = rt.mem_release(handle);
                return Err(e);
            }
        };
        let size = rt
            .backend()
            .virtual_memory()
            .and_then(|vm| vm.allocation_properties(handle).ok())
            .map(|p| p.size)
            .unwrap_or(0);
        let device = props.location.id.max(0) as usize;
        Ok(PhysicalAllocation { inner: Arc::new(PhysicalInner { rt: rt.clone(), handle, device, size }) })
    }

    /// Exports it as a POSIX file descriptor (it must have been created
    /// with that handle type requested).
    pub fn export_fd(&self) -> Result<std::os::fd::OwnedFd> {
        self.inner.rt.export_shareable_handle(self.inner.handle, super::HANDLE_TYPE_POSIX_FD, 0)
    }
}

struct ReservationInner {
    rt: Runtime,
    ptr: DevicePtr,
    size: u64,
}

impl Drop for ReservationInner {
    fn drop(&mut self) {
        if let Err(e) = self.rt.address_free(self.ptr, self.size) {
            self.rt.record_drop_error("hipMemAddressFree of an AddressReservation", e);
        }
    }
}

/// A range of device addresses with nothing behind it
/// (`hipMemAddressReserve`); freed in `Drop`, once no [`Mapping`] in it remains.
#[derive(Clone)]
pub struct AddressReservation {
    inner: Arc<ReservationInner>,
}

impl std::fmt::Debug for AddressReservation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AddressReservation")
            .field("ptr", &self.inner.ptr)
            .field("size", &self.inner.size)
            .finish()
    }
}

impl AddressReservation {
    /// Reserves `size` bytes (a multiple of the granularity) aligned to
    /// `alignment` (0: the granularity; else a power of two), at `hint` if
    /// that range is free: the hint is only a hint, compare
    /// [`AddressReservation::ptr`] with it.
    pub fn new(rt: &Runtime, size: u64, alignment: u64, hint: DevicePtr) -> Result<AddressReservation> {
        let ptr = rt.address_reserve(size, alignment, hint, 0)?;
        Ok(AddressReservation { inner: Arc::new(ReservationInner { rt: rt.clone(), ptr, size }) })
    }

    /// The first address.
    pub fn ptr(&self) -> DevicePtr {
        self.inner.ptr
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.inner.size
    }

    /// One past the last address.
    pub fn end(&self) -> DevicePtr {
        DevicePtr(self.inner.ptr.0 + self.inner.size)
    }

    /// A typed view of `len` elements at byte `offset` (which may span
    /// several adjacent mappings; device work on it is checked against what
    /// is mapped and accessible when it is queued).
    pub fn view<T: Pod>(&self, offset: u64, len: usize) -> Result<MappedView<'_, T>> {
        let bytes = (len as u64).checked_mul(std::mem::size_of::<T>() as u64);
        match bytes.and_then(|b| offset.checked_add(b)) {
            Some(end) if end <= self.inner.size => {}
            _ => {
                return Err(Error::InvalidValue(format!(
                    "a view of {len} elements at offset {offset} runs past the {}-byte reservation",
                    self.inner.size
                )));
            }
        }
        Ok(MappedView { rt: &self.inner.rt, ptr: DevicePtr(self.inner.ptr.0 + offset), len, _t: PhantomData })
    }
}

/// Part of a reservation backed by part of a physical allocation
/// (`hipMemMap`). It starts with no access for any device
/// ([`Mapping::set_access`]); it keeps the physical memory and the
/// reservation alive, and unmaps in `Drop` (after waiting for the devices it
/// gave access to).
pub struct Mapping {
    rt: Runtime,
    ptr: DevicePtr,
    size: u64,
    physical: PhysicalAllocation,
    _reservation: AddressReservation,
    /// Devices given access (waited for before unmapping).
    accessed: Mutex<Vec<usize>>,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mapping")
            .field("ptr", &self.ptr)
            .field("size", &self.size)
            .field("physical", &self.physical)
            .finish()
    }
}

impl Mapping {
    /// Maps `size` bytes of `physical`, from `physical_offset`, at byte
    /// `offset` of `reservation` (all multiples of the granularity).
    pub fn new(
        reservation: &AddressReservation,
        offset: u64,
        physical: &PhysicalAllocation,
        physical_offset: u64,
        size: u64,
    ) -> Result<Mapping> {
        let rt = &reservation.inner.rt;
        let end = offset.checked_add(size);
        if end.is_none_or(|e| e > reservation.size()) {
            return Err(Error::InvalidValue(format!(
                "a mapping of {size} bytes at offset {offset} runs past the {}-byte reservation",
                reservation.size()
            )));
        }
        let ptr = DevicePtr(reservation.ptr().0 + offset);
        rt.mem_map(ptr, size, physical_offset, physical.handle(), 0)?;
        Ok(Mapping {
            rt: rt.clone(),
            ptr,
            size,
            physical: physical.clone(),
            _reservation: reservation.clone(),
            accessed: Mutex::new(Vec::new()),
        })
    }

    /// Sets `device`'s access (`hipMemSetAccess`).
    pub fn set_access(&self, device: usize, access: AccessFlags) -> Result<()> {
        self.rt.mem_set_access(self.ptr, self.size, &[AccessDesc::device(device, access)])?;
        let mut accessed = self.accessed.lock().unwrap_or_else(|p| p.into_inner());
        if !accessed.contains(&device) {
            accessed.push(device);
        }
        Ok(())
    }

    /// `device`'s access (`hipMemGetAccess`).
    pub fn access(&self, device: usize) -> Result<AccessFlags> {
        self.rt.mem_get_access(&MemLocation::device(device), self.ptr)
    }

    /// The first address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The physical allocation behind it.
    pub fn physical(&self) -> &PhysicalAllocation {
        &self.physical
    }

    /// The whole mapping as `size / size_of::<T>()` elements.
    pub fn view<T: Pod>(&self) -> MappedView<'_, T> {
        let len = (self.size / std::mem::size_of::<T>().max(1) as u64) as usize;
        MappedView { rt: &self.rt, ptr: self.ptr, len, _t: PhantomData }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // hipMemUnmap does not wait for the device: wait for the devices that
        // could touch the range, so no kernel faults on it.
        let accessed = std::mem::take(&mut *self.accessed.lock().unwrap_or_else(|p| p.into_inner()));
        for device in accessed {
            if let Err(e) = self.rt.device_synchronize(device) {
                self.rt.record_drop_error("synchronizing before hipMemUnmap of a Mapping", e);
            }
        }
        if let Err(e) = self.rt.mem_unmap(self.ptr, self.size) {
            self.rt.record_drop_error("hipMemUnmap of a Mapping", e);
        }
    }
}

/// Typed elements at mapped addresses: what copies and kernels take
/// ([`DeviceSlice`]).
#[derive(Clone, Copy)]
pub struct MappedView<'a, T: Pod> {
    rt: &'a Runtime,
    ptr: DevicePtr,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for MappedView<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedView").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl<T: Pod> DeviceSlice<T> for MappedView<'_, T> {
    fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        self.rt
    }
}
