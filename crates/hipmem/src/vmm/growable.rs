//! `GrowableBuffer<T>`: device memory that grows and shrinks in place.
//!
//! It reserves a large range of addresses once and maps physical chunks at
//! the end of what is mapped as it grows; it shrinks by unmapping chunks from
//! its tail. Its address never changes and it never copies. Chunk sizes grow
//! geometrically (the granularity × 2^k, k the number of chunks) so that many
//! small grows cost few map calls, but a chunk is never larger than
//! `max_overshoot` × the bytes mapped so far (default 1/8), unless the
//! request itself needs more: the memory held stays close to the size asked.
#![forbid(unsafe_code)]

use std::marker::PhantomData;

use bytemuck::Pod;

use super::{AccessFlags, AddressReservation, Mapping, PhysicalAllocation};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::runtime::Device;
use crate::runtime::DeviceSlice;
use crate::runtime::Runtime;

/// The largest default reservation (a quarter of device memory, at most this).
pub const DEFAULT_MAX_RESERVATION: u64 = 64 << 30;

/// A buffer of `T` that grows without moving or copying.
pub struct GrowableBuffer<T: Pod> {
    rt: Runtime,
    device: usize,
    granularity: u64,
    chunks: Vec<Mapping>,
    mapped: u64,
    len: usize,
    max_overshoot: f64,
    // Dropped after the chunks (fields drop in order).
    reservation: AddressReservation,
    _t: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for GrowableBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrowableBuffer")
            .field("ptr", &self.reservation.ptr())
            .field("len", &self.len)
            .field("mapped", &self.mapped)
            .field("reserved", &self.reservation.size())
            .field("chunks", &self.chunks.len())
            .finish()
    }
}

fn round_up(n: u64, g: u64) -> Option<u64> {
    n.checked_next_multiple_of(g)
}

impl<T: Pod> GrowableBuffer<T> {
    /// An empty buffer on `device` reserving a quarter of the device's
    /// memory (at most [`DEFAULT_MAX_RESERVATION`]).
    pub fn new(device: &Device) -> Result<GrowableBuffer<T>> {
        let total = device.properties().total_memory;
        GrowableBuffer::with_reservation(device, (total / 4).min(DEFAULT_MAX_RESERVATION))
    }

    /// An empty buffer on `device` that can grow to `reserve_bytes` (rounded
    /// up to the granularity).
    pub fn with_reservation(device: &Device, reserve_bytes: u64) -> Result<GrowableBuffer<T>> {
        let rt = device.runtime();
        let g = rt.reservation_granularity()?.max(PhysicalAllocation::granularity(device)?);
        let size = round_up(reserve_bytes.max(1), g)
            .ok_or_else(|| Error::OutOfMemory(format!("a reservation of {reserve_bytes} bytes overflows")))?;
        let reservation = AddressReservation::new(rt, size, 0, DevicePtr::NULL)?;
        Ok(GrowableBuffer {
            rt: rt.clone(),
            device: device.ordinal(),
            granularity: g,
            chunks: Vec::new(),
            mapped: 0,
            len: 0,
            max_overshoot: 0.125,
            reservation,
            _t: PhantomData,
        })
    }

    /// Caps each geometric chunk at `fraction` × the bytes already mapped
    /// (0: map exactly what each grow needs, rounded to the granularity).
    pub fn set_max_overshoot(&mut self, fraction: f64) {
        self.max_overshoot = fraction.max(0.0);
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Elements that fit in what is mapped now.
    pub fn capacity(&self) -> usize {
        (self.mapped / std::mem::size_of::<T>().max(1) as u64) as usize
    }

    /// Bytes mapped (physical memory held).
    pub fn mapped_bytes(&self) -> u64 {
        self.mapped
    }

    /// Bytes of addresses reserved (the most it can grow to).
    pub fn reserved_bytes(&self) -> u64 {
        self.reservation.size()
    }

    /// Number of mapped chunks.
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// The device ordinal.
    pub fn device(&self) -> usize {
        self.device
    }

    fn bytes_for(len: usize) -> Result<u64> {
        (len as u64).checked_mul(std::mem::size_of::<T>() as u64).ok_or_else(|| {
            Error::OutOfMemory(format!("{len} elements of {} bytes overflow", std::mem::size_of::<T>()))
        })
    }

    /// Grows or shrinks to `len` elements. Growing maps new chunks at the
    /// end (existing contents stay; new elements are unspecified); shrinking
    /// unmaps the chunks past the new end. The address never changes.
    pub fn resize(&mut self, len: usize) -> Result<()> {
        if len >= self.len { self.grow_to(len) } else { self.shrink_to(len) }
    }

    /// Makes room for `len` elements (no-op when there is room) and sets the
    /// length to at least `len`.
    pub fn grow_to(&mut self, len: usize) -> Result<()> {
        let need = Self::bytes_for(len)?;
        let reserved = self.reservation.size();
        if need > reserved {
            return Err(Error::OutOfMemory(format!(
                "GrowableBuffer: {need} bytes do not fit its reservation of {reserved} bytes (the reservation is exhausted; create the buffer with a larger one)"
            )));
        }
        while self.mapped < need {
            let g = self.granularity;
            let missing = round_up(need - self.mapped, g).unwrap_or(reserved);
            let k = self.chunks.len().min(40) as u32;
            let geometric = g.saturating_mul(1u64 << k);
            let cap = ((self.mapped as f64 * self.max_overshoot) as u64 / g * g).max(g);
            let chunk = missing.max(geometric.min(cap)).min(reserved - self.mapped);
            self.map_chunk(chunk)?;
        }
        self.len = self.len.max(len);
        Ok(())
    }

    fn map_chunk(&mut self, size: u64) -> Result<()> {
        let device = self.rt.device(self.device)?;
        let physical = PhysicalAllocation::new(&device, size)?;
        let mapping = Mapping::new(&self.reservation, self.mapped, &physical, 0, size)?;
        // The handle is released when `physical` drops here; the mapping
        // keeps the memory (the usual idiom).
        mapping.set_access(self.device, AccessFlags::ReadWrite)?;
        self.mapped += size;
        self.chunks.push(mapping);
        Ok(())
    }

    /// Shrinks to `len` elements (no-op when not smaller), unmapping every
    /// chunk that lies wholly past the new end.
    pub fn shrink_to(&mut self, len: usize) -> Result<()> {
        if len >= self.len {
            return Ok(());
        }
        let need = Self::bytes_for(len)?;
        self.len = len;
        while let Some(last) = self.chunks.last() {
            let start = self.mapped - last.size();
            if start < need {
                break;
            }
            self.mapped = start;
            self.chunks.pop();
        }
        Ok(())
    }
}

impl<T: Pod> DeviceSlice<T> for GrowableBuffer<T> {
    fn device_ptr(&self) -> DevicePtr {
        if self.len == 0 { DevicePtr::NULL } else { self.reservation.ptr() }
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

impl<T: Pod> GrowableBuffer<T> {
    /// The first address (the same for the buffer's whole life).
    pub fn base(&self) -> DevicePtr {
        self.reservation.ptr()
    }
}
