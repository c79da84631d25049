//! `ManagedBuffer<T>`: managed memory in the safe API.

use std::marker::PhantomData;

use bytemuck::Pod;

use super::{Advice, AttachFlags, INVALID_DEVICE_ID, Location, ManagedBlock, RangeAttribute};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::runtime::CoreStream;
use crate::runtime::DeviceSlice;
use crate::runtime::Runtime;

/// Managed (unified) memory for `len` elements of a plain-data type `T`
/// (`hipMallocManaged`), freed when dropped.
///
/// Device work uses it like any device memory (it implements
/// [`DeviceSlice`]: kernels, copies, memsets take `&buffer`). The host uses
/// it through [`ManagedBuffer::as_slice`] and [`ManagedBuffer::as_mut_slice`],
/// which are race-free:
/// - both need `&mut self`, so while a host view lives no device work can be
///   queued on the buffer through this crate's safe API (which borrows it
///   shared), even for reading: a kernel queued through `&buffer` could
///   write what the host is reading;
/// - before lending the view they wait for every device of the runtime
///   (`hipDeviceSynchronize` on each): managed memory is usable from every
///   device's streams, and the kernels' API does not tell the buffer which
///   streams used it, so waiting for all devices is what covers every use;
/// - then the backend brings the pages to the host (on the CPU emulation,
///   counted as migrations).
///
/// Memory is zeroed at allocation.
pub struct ManagedBuffer<T: Pod> {
    rt: Runtime,
    block: Option<ManagedBlock>,
    len: usize,
    _elements: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for ManagedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedBuffer").field("block", &self.block).field("len", &self.len).finish()
    }
}

impl<T: Pod> ManagedBuffer<T> {
    /// Allocates managed memory for `len` (> 0) elements for `device`,
    /// attached `Global` or `Host` (`Single` is InvalidValue).
    pub fn new(rt: &Runtime, device: usize, len: usize, attach: AttachFlags) -> Result<ManagedBuffer<T>> {
        if len == 0 {
            return Err(Error::InvalidValue("a managed buffer needs at least one element".into()));
        }
        if std::mem::size_of::<T>() == 0 {
            return Err(Error::InvalidValue("a managed buffer of zero-sized elements".into()));
        }
        if std::mem::align_of::<T>() > 4096 {
            return Err(Error::InvalidValue("element alignment above the page size".into()));
        }
        let bytes = (len as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| Error::OutOfMemory(format!("{len} elements overflow the address space")))?;
        if attach == AttachFlags::Single {
            return Err(Error::InvalidValue("managed memory is allocated Global or Host, not Single".into()));
        }
        let block = rt.allocate_managed(device, bytes, attach)?;
        Ok(ManagedBuffer { rt: rt.clone(), block: Some(block), len, _elements: PhantomData })
    }

    /// Allocates managed memory holding a copy of `data`.
    pub fn from_slice(
        rt: &Runtime,
        device: usize,
        data: &[T],
        attach: AttachFlags,
    ) -> Result<ManagedBuffer<T>> {
        let mut buf = ManagedBuffer::new(rt, device, data.len(), attach)?;
        buf.as_mut_slice()?.copy_from_slice(data);
        Ok(buf)
    }

    fn block(&self) -> &ManagedBlock {
        self.block.as_ref().expect("a live ManagedBuffer has its block")
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no element (never: buffers have at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.len as u64 * std::mem::size_of::<T>() as u64
    }

    /// The address (the same for the host and every device).
    pub fn ptr(&self) -> DevicePtr {
        self.block().ptr()
    }

    /// The device it was allocated for.
    pub fn device(&self) -> usize {
        self.block().device()
    }

    /// The attach flags it was allocated with.
    pub fn attach_flags(&self) -> AttachFlags {
        self.block().attach()
    }

    /// The runtime.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Waits for every device's work (see the type's documentation).
    fn wait_for_devices(&self) -> Result<()> {
        for d in 0..self.rt.device_count() {
            self.rt.device_synchronize(d)?;
        }
        Ok(())
    }

    fn block_mut(&mut self) -> &mut ManagedBlock {
        self.block.as_mut().expect("a live ManagedBuffer has its block")
    }

    /// The elements, for reading on the host: waits for every device, then
    /// brings the pages to the host.
    pub fn as_slice(&mut self) -> Result<&[T]> {
        self.wait_for_devices()?;
        let len = self.len;
        let bytes = self.block_mut().host_bytes()?;
        let bytes = &bytes[..len * std::mem::size_of::<T>()];
        bytemuck::try_cast_slice(bytes).map_err(|e| Error::Unknown(format!("managed memory view: {e}")))
    }

    /// The elements, for writing on the host (as [`ManagedBuffer::as_slice`]).
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        self.wait_for_devices()?;
        let len = self.len;
        let bytes = self.block_mut().host_bytes_mut()?;
        let bytes = &mut bytes[..len * std::mem::size_of::<T>()];
        bytemuck::try_cast_slice_mut(bytes).map_err(|e| Error::Unknown(format!("managed memory view: {e}")))
    }

    /// A copy of the elements, read on the host.
    pub fn to_vec(&mut self) -> Result<Vec<T>> {
        Ok(self.as_slice()?.to_vec())
    }

    /// Queues a prefetch of the whole buffer to `location` on `stream`
    /// (`hipMemPrefetchAsync`).
    pub fn prefetch(&self, location: Location, stream: &CoreStream) -> Result<()> {
        self.rt.mem_prefetch_async(self.ptr(), self.size_bytes(), location.raw(), stream.raw())
    }

    /// Applies `advice` for `location` to the whole buffer (`hipMemAdvise`).
    pub fn advise(&self, advice: Advice, location: Location) -> Result<()> {
        self.rt.mem_advise(self.ptr(), self.size_bytes(), advice.raw(), location.raw())
    }

    fn scalar(&self, attribute: RangeAttribute) -> Result<i32> {
        Ok(self.rt.managed_range_attribute(self.ptr(), self.size_bytes(), attribute, 1)?[0])
    }

    /// Whether the whole buffer is read-mostly.
    pub fn is_read_mostly(&self) -> Result<bool> {
        Ok(self.scalar(RangeAttribute::ReadMostly)? != 0)
    }

    /// The preferred location of the whole buffer (`None`: none, or not the
    /// same for every page).
    pub fn preferred_location(&self) -> Result<Option<Location>> {
        Ok(Location::from_raw(self.scalar(RangeAttribute::PreferredLocation)?))
    }

    /// Where the whole buffer was last prefetched (`None`: never, or not the
    /// same for every page).
    pub fn last_prefetch_location(&self) -> Result<Option<Location>> {
        Ok(Location::from_raw(self.scalar(RangeAttribute::LastPrefetchLocation)?))
    }

    /// The locations that have AccessedBy advice for the whole buffer.
    pub fn accessed_by(&self) -> Result<Vec<Location>> {
        let slots = self.rt.device_count() + 1;
        let ids = self.rt.managed_range_attribute(
            self.ptr(),
            self.size_bytes(),
            RangeAttribute::AccessedBy,
            slots,
        )?;
        Ok(ids.into_iter().filter(|&id| id != INVALID_DEVICE_ID).filter_map(Location::from_raw).collect())
    }

    /// Attaches the buffer to `stream` with `flags`, in stream order
    /// (`hipStreamAttachMemAsync` over the whole allocation).
    pub fn attach(&self, stream: &CoreStream, flags: AttachFlags) -> Result<()> {
        self.rt.stream_attach_mem_async(stream.raw(), self.ptr(), 0, flags.bits())
    }
}

impl<T: Pod> DeviceSlice<T> for ManagedBuffer<T> {
    fn device_ptr(&self) -> DevicePtr {
        self.ptr()
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

impl<T: Pod> Drop for ManagedBuffer<T> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            if let Err(e) = self.rt.release_managed(block) {
                self.rt.record_drop_error("hipFree (managed)", e);
            }
        }
    }
}

impl crate::runtime::Device {
    /// Managed memory for `len` elements for this device, attached Global
    /// (`hipMallocManaged`), zeroed.
    pub fn alloc_managed<T: Pod>(&self, len: usize) -> Result<ManagedBuffer<T>> {
        ManagedBuffer::new(&self.rt, self.ordinal, len, AttachFlags::Global)
    }
}
