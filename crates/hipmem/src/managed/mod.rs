//! Managed (unified) memory: `hipMallocManaged`, `hipMemPrefetchAsync`,
//! `hipMemAdvise`, `hipMemRangeGetAttribute(s)`, `hipStreamAttachMemAsync`,
//! and [`ManagedBuffer<T>`], the safe owner.
//!
//! The raw, HIP-shaped functions (for the C ABI) are methods of [`Runtime`]
//! with exactly the argument rules of `hip-memory-api.md`. Managed
//! allocations are in the runtime's allocation registry
//! (`MemoryKind::Managed`), so `hipPointerGetAttributes` reports them as
//! managed, copies and kernels accept them, and `hipFree` frees the raw ones.
//!
//! The backend capability is `backend::managed_memory::ManagedMemory`; on the
//! CPU emulation it is a page-by-page model of residency whose migrations are
//! counted ([`Runtime::managed_statistics`]); on cuda the driver migrates and
//! the statistics are unknown.
#![forbid(unsafe_code)]

mod buffer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub use crate::backend::managed_memory::{
    Advice, AttachFlags, CPU_DEVICE_ID, INVALID_DEVICE_ID, Location, ManagedBlock, ManagedStatistics,
    RangeAttribute,
};
pub use buffer::ManagedBuffer;

use crate::backend::managed_memory::ManagedMemory;
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};
use crate::runtime::{Allocation, ExtensionKey, MemoryKind, Runtime};

/// The runtime's managed state: raw allocations (made through
/// `hipMallocManaged`, owned here until `hipFree`).
#[derive(Default)]
struct ManagedState {
    raw: Mutex<HashMap<u64, ManagedBlock>>,
}

/// The managed-memory subsystem's state in a runtime.
static MANAGED: ExtensionKey<ManagedState> = ExtensionKey::new("managed memory");

fn state(rt: &Runtime) -> &ManagedState {
    rt.extension(&MANAGED, |_| Arc::new(ManagedState::default()))
}

impl Runtime {
    fn managed_backend(&self) -> Result<&dyn ManagedMemory> {
        self.backend().managed_memory().ok_or_else(|| {
            Error::NotSupported(format!("the {} backend has no managed memory", self.backend_kind()))
        })
    }

    /// Allocates a managed block for `device` and records it in the registry.
    pub(crate) fn allocate_managed(
        &self,
        device: usize,
        size: u64,
        attach: AttachFlags,
    ) -> Result<ManagedBlock> {
        self.check_device(device)?;
        let block = ManagedBlock::allocate(self.backend(), device, size, attach)?;
        self.allocations().insert(Allocation {
            base: block.ptr(),
            size,
            kind: MemoryKind::Managed { flags: attach.bits() },
            device,
        });
        Ok(block)
    }

    /// Removes a block from the registry, waits for every device (HIP's
    /// `hipFree` rule) and frees it.
    pub(crate) fn release_managed(&self, block: ManagedBlock) -> Result<()> {
        self.allocations().remove_if(block.ptr(), |a| a.kind.is_managed());
        for d in 0..self.device_count() {
            self.device_synchronize(d)?;
        }
        drop(block);
        Ok(())
    }

    /// `hipMallocManaged`: `size` bytes of managed memory for `device`,
    /// attached with `flags` (`hipMemAttachGlobal` 1 or `hipMemAttachHost`
    /// 2). Size 0 or other flags are InvalidValue; an impossible size is
    /// OutOfMemory. Freed by [`Runtime::free`].
    pub fn malloc_managed(&self, device: usize, size: u64, flags: u32) -> Result<DevicePtr> {
        let attach = match AttachFlags::from_bits(flags) {
            Ok(a @ (AttachFlags::Global | AttachFlags::Host)) => a,
            _ => {
                return Err(Error::InvalidValue(format!(
                    "hipMallocManaged flags {flags:#x} must be hipMemAttachGlobal (1) or hipMemAttachHost (2)"
                )));
            }
        };
        if size == 0 {
            return Err(Error::InvalidValue("hipMallocManaged of 0 bytes".into()));
        }
        let block = self.allocate_managed(device, size, attach)?;
        let ptr = block.ptr();
        state(self).raw.lock().unwrap_or_else(|p| p.into_inner()).insert(ptr.0, block);
        Ok(ptr)
    }

    /// `hipMallocManaged` with its out-pointer: a null out-pointer is InvalidValue.
    pub fn malloc_managed_into(
        &self,
        out: Option<&mut DevicePtr>,
        device: usize,
        size: u64,
        flags: u32,
    ) -> Result<()> {
        let out = out.ok_or_else(|| Error::InvalidValue("hipMallocManaged: null out-pointer".into()))?;
        *out = self.malloc_managed(device, size, flags)?;
        Ok(())
    }

    /// `hipFree` of managed memory (called by [`Runtime::free`]).
    pub(crate) fn free_managed(&self, ptr: DevicePtr) -> Result<()> {
        let block = state(self).raw.lock().unwrap_or_else(|p| p.into_inner()).remove(&ptr.0);
        match block {
            Some(block) => self.release_managed(block),
            None => Err(Error::InvalidValue(format!(
                "{ptr} is managed memory owned by a ManagedBuffer: drop the buffer instead of calling hipFree"
            ))),
        }
    }

    /// Checks a managed range for HIP's managed functions: null, a count of
    /// 0, an overflow, memory that is not managed or a range past the end of
    /// the allocation are InvalidValue.
    pub fn check_managed_range(&self, ptr: DevicePtr, count: u64, what: &str) -> Result<Allocation> {
        if ptr.is_null() {
            return Err(Error::InvalidValue(format!("{what}: null pointer")));
        }
        if count == 0 {
            return Err(Error::InvalidValue(format!("{what}: count is 0")));
        }
        let end = ptr
            .0
            .checked_add(count)
            .ok_or_else(|| Error::InvalidValue(format!("{what}: {ptr} + {count} bytes overflows")))?;
        let a = self
            .allocations()
            .find(ptr.0)
            .ok_or_else(|| Error::InvalidValue(format!("{what}: {ptr} is not a live hipmem allocation")))?;
        if !a.kind.is_managed() {
            return Err(Error::InvalidValue(format!(
                "{what}: {ptr} is {:?} memory, not managed memory",
                a.kind
            )));
        }
        if end > a.end() {
            return Err(Error::InvalidValue(format!(
                "{what}: {count} bytes at {ptr} run {} bytes past the end of the {}-byte managed allocation at {}",
                end - a.end(),
                a.size,
                a.base
            )));
        }
        Ok(a)
    }

    /// HIP's device id as a location: -1 is the host; an id that is not a
    /// device of this runtime is InvalidDevice.
    pub fn managed_location(&self, device: i32, what: &str) -> Result<Location> {
        match Location::from_raw(device) {
            Some(Location::Device(d)) if d < self.device_count() => Ok(Location::Device(d)),
            Some(Location::Host) => Ok(Location::Host),
            _ => Err(Error::InvalidDevice(format!(
                "{what}: {device} is neither a device (0 to {}) nor hipCpuDeviceId (-1)",
                self.device_count().saturating_sub(1)
            ))),
        }
    }

    /// `hipMemPrefetchAsync`: queues a migration of the pages of
    /// `[ptr, ptr + count)` to `device` (a device ordinal, or
    /// hipCpuDeviceId -1 for the host) on `stream`, ordered like a kernel.
    /// Null, count 0, an overflow or a range outside one managed allocation
    /// are InvalidValue; another device id is InvalidDevice; a destroyed
    /// stream is the backend's handle error.
    pub fn mem_prefetch_async(
        &self,
        ptr: DevicePtr,
        count: u64,
        device: i32,
        stream: RawStream,
    ) -> Result<()> {
        let what = "hipMemPrefetchAsync";
        if ptr.is_null() || count == 0 {
            return Err(Error::InvalidValue(format!("{what}: null pointer or count 0")));
        }
        let location = self.managed_location(device, what)?;
        self.check_managed_range(ptr, count, what)?;
        self.managed_backend()?.prefetch(ptr, count, location, stream)
    }

    /// `hipMemAdvise`: applies `advice` (HIP's value) for `device` to the
    /// whole pages of `[ptr, ptr + count)`. Null, count 0, a range past the
    /// allocation, an unknown advice or memory that is not managed are
    /// InvalidValue; an invalid device is InvalidDevice (the read-mostly
    /// pair ignores the device; hipCpuDeviceId is valid). AMD's coarse-grain
    /// advice (100, 101) is NotSupported. Advice never changes the last
    /// prefetch location.
    pub fn mem_advise(&self, ptr: DevicePtr, count: u64, advice: i32, device: i32) -> Result<()> {
        let what = "hipMemAdvise";
        self.check_managed_range(ptr, count, what)?;
        let advice = Advice::from_raw(advice)?;
        let location = if advice.ignores_device() {
            self.managed_location(device, what).unwrap_or(Location::Host)
        } else {
            self.managed_location(device, what)?
        };
        self.managed_backend()?.advise(ptr, count, advice, location)
    }

    /// Checks one attribute's buffer: scalar attributes need 4 bytes,
    /// AccessedBy a non-zero multiple of 4.
    fn check_attribute_buffer(attribute: i32, size: usize) -> Result<RangeAttribute> {
        let what = "hipMemRangeGetAttribute";
        if size == 0 {
            return Err(Error::InvalidValue(format!("{what}: data_size is 0")));
        }
        let attribute = RangeAttribute::from_raw(attribute)?;
        match attribute {
            RangeAttribute::AccessedBy if size % 4 != 0 => Err(Error::InvalidValue(format!(
                "{what}: AccessedBy needs a data_size that is a multiple of 4, not {size}"
            ))),
            RangeAttribute::AccessedBy => Ok(attribute),
            _ if size != 4 => {
                Err(Error::InvalidValue(format!("{what}: {attribute:?} needs a data_size of 4, not {size}")))
            }
            _ => Ok(attribute),
        }
    }

    /// The values of `attribute` over `[ptr, ptr + count)`: one for the
    /// scalar attributes, `slots` for AccessedBy (device ids, -1 the host,
    /// padded with -2). Not uniform over the range: ReadMostly reads 0,
    /// PreferredLocation and LastPrefetchLocation read -2.
    pub fn managed_range_attribute(
        &self,
        ptr: DevicePtr,
        count: u64,
        attribute: RangeAttribute,
        slots: usize,
    ) -> Result<Vec<i32>> {
        self.check_managed_range(ptr, count, "hipMemRangeGetAttribute")?;
        self.range_attribute_checked(ptr, count, attribute, slots)
    }

    /// [`Runtime::managed_range_attribute`] of a range already checked.
    fn range_attribute_checked(
        &self,
        ptr: DevicePtr,
        count: u64,
        attribute: RangeAttribute,
        slots: usize,
    ) -> Result<Vec<i32>> {
        let n = if attribute == RangeAttribute::AccessedBy { slots } else { 1 };
        if n == 0 {
            return Err(Error::InvalidValue("hipMemRangeGetAttribute: no room for the answer".into()));
        }
        let mut out = vec![INVALID_DEVICE_ID; n];
        self.managed_backend()?.range_attribute(ptr, count, attribute, &mut out)?;
        Ok(out)
    }

    /// `hipMemRangeGetAttribute`: `data` is the caller's buffer
    /// (`data_size` = its length; `None` is a null pointer), filled with
    /// native-endian 32-bit ints. Null or empty buffers, a wrong size for
    /// the attribute, an unknown attribute or memory that is not managed are
    /// InvalidValue.
    pub fn mem_range_get_attribute(
        &self,
        data: Option<&mut [u8]>,
        attribute: i32,
        ptr: DevicePtr,
        count: u64,
    ) -> Result<()> {
        let data = data.ok_or_else(|| Error::InvalidValue("hipMemRangeGetAttribute: null data".into()))?;
        let attribute = Self::check_attribute_buffer(attribute, data.len())?;
        let values = self.managed_range_attribute(ptr, count, attribute, data.len() / 4)?;
        for (chunk, v) in data.chunks_exact_mut(4).zip(values) {
            chunk.copy_from_slice(&v.to_ne_bytes());
        }
        Ok(())
    }

    /// `hipMemRangeGetAttributes`: one buffer per attribute, as in
    /// [`Runtime::mem_range_get_attribute`]; no attribute, or a different
    /// number of buffers and attributes, is InvalidValue. Every argument is
    /// checked before anything is written.
    pub fn mem_range_get_attributes(
        &self,
        data: &mut [Option<&mut [u8]>],
        attributes: &[i32],
        ptr: DevicePtr,
        count: u64,
    ) -> Result<()> {
        let what = "hipMemRangeGetAttributes";
        if attributes.is_empty() {
            return Err(Error::InvalidValue(format!("{what}: num_attributes is 0")));
        }
        if data.len() != attributes.len() {
            return Err(Error::InvalidValue(format!(
                "{what}: {} data buffers for {} attributes",
                data.len(),
                attributes.len()
            )));
        }
        let mut parsed = Vec::with_capacity(attributes.len());
        for (buf, &attr) in data.iter().zip(attributes) {
            let buf = buf.as_ref().ok_or_else(|| Error::InvalidValue(format!("{what}: null data")))?;
            parsed.push(Self::check_attribute_buffer(attr, buf.len())?);
        }
        self.check_managed_range(ptr, count, what)?;
        for (buf, attr) in data.iter_mut().zip(parsed) {
            let buf = buf.as_deref_mut().expect("checked above");
            let values = self.range_attribute_checked(ptr, count, attr, buf.len() / 4)?;
            for (chunk, v) in buf.chunks_exact_mut(4).zip(values) {
                chunk.copy_from_slice(&v.to_ne_bytes());
            }
        }
        Ok(())
    }

    /// `hipStreamAttachMemAsync`: attaches the managed allocation at `ptr`
    /// to `stream` with `flags` (Global 1, Host 2, Single 4), in stream
    /// order. A null pointer, other flags, Single with the null stream,
    /// memory that is not managed, or a length other than 0 or the whole
    /// allocation are InvalidValue.
    pub fn stream_attach_mem_async(
        &self,
        stream: RawStream,
        ptr: DevicePtr,
        length: u64,
        flags: u32,
    ) -> Result<()> {
        let what = "hipStreamAttachMemAsync";
        if ptr.is_null() {
            return Err(Error::InvalidValue(format!("{what}: null pointer")));
        }
        let attach = AttachFlags::from_bits(flags)?;
        if attach == AttachFlags::Single && stream.is_null() {
            return Err(Error::InvalidValue(format!(
                "{what}: hipMemAttachSingle needs a stream, not the null stream"
            )));
        }
        let a = self
            .allocations()
            .find(ptr.0)
            .filter(|a| a.kind.is_managed())
            .ok_or_else(|| Error::InvalidValue(format!("{what}: {ptr} is not managed memory")))?;
        if length != 0 && (length != a.size || ptr != a.base) {
            return Err(Error::InvalidValue(format!(
                "{what}: the length must be 0 or the whole {}-byte allocation at {}, not {length} bytes at {ptr}",
                a.size, a.base
            )));
        }
        self.managed_backend()?.stream_attach(stream, a.base, length, attach)
    }

    /// What the backend counted of managed-memory migrations since it
    /// started (fields the backend cannot observe are `None`: all of them
    /// on cuda). NotSupported without managed memory.
    pub fn managed_statistics(&self) -> Result<ManagedStatistics> {
        Ok(self.managed_backend()?.statistics())
    }
}
