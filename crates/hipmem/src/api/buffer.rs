//! `DeviceBuffer<T>`: typed device memory from `hipMalloc`, freed in `Drop`
//! (the device's work is waited for first, as `hipFree` does).
#![forbid(unsafe_code)]

use std::marker::PhantomData;

use bytemuck::Pod;

use crate::backend::{DevicePtr, FillValue};
use crate::error::{Error, Result};
use crate::runtime::{Device, DeviceSlice, Runtime};

impl<T: Pod> DeviceSlice<T> for DeviceBuffer<T> {
    fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        &self.rt
    }
}

/// Device memory for `len` elements of a plain-data type `T`.
///
/// Dropping it frees the memory with `hipFree` semantics (the device's work is
/// waited for first); an error there is recorded in the runtime
/// ([`Runtime::take_drop_errors`]) and logged, never panicked.
pub struct DeviceBuffer<T: Pod> {
    rt: Runtime,
    ptr: DevicePtr,
    len: usize,
    device: usize,
    _elements: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("device", &self.device)
            .field("element", &std::any::type_name::<T>())
            .finish()
    }
}

impl<T: Pod> DeviceBuffer<T> {
    pub(crate) fn uninit(device: &Device, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = (len as u64).checked_mul(std::mem::size_of::<T>() as u64).ok_or_else(|| {
            Error::OutOfMemory(format!(
                "{len} elements of {} bytes overflow the address space",
                std::mem::size_of::<T>()
            ))
        })?;
        let ptr = device.rt.malloc(device.ordinal, bytes)?;
        Ok(DeviceBuffer { rt: device.rt.clone(), ptr, len, device: device.ordinal, _elements: PhantomData })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.len as u64 * std::mem::size_of::<T>() as u64
    }

    /// The device address of the first element (null when empty).
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The device ordinal.
    pub fn device(&self) -> usize {
        self.device
    }

    /// The runtime the buffer belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Copies `src` (same length) into the buffer; returns when done.
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.check_len(src.len())?;
        self.rt.copy_host_to_device(self.ptr, bytemuck::cast_slice(src))
    }

    /// Copies the buffer into `dst` (same length); returns when done.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.check_len(dst.len())?;
        self.rt.copy_device_to_host(bytemuck::cast_slice_mut(dst), self.ptr)
    }

    /// The contents as a vector.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut v)?;
        Ok(v)
    }

    /// Copies another buffer (same length) into this one; returns when done.
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        self.check_len(src.len)?;
        self.rt.copy_device_to_device(self.ptr, src.ptr, self.size_bytes())
    }

    /// Sets every byte to `byte` (`hipMemset`); returns when done.
    pub fn memset(&self, byte: u8) -> Result<()> {
        self.rt.memset(self.ptr, FillValue::U8(byte), self.size_bytes())
    }

    fn check_len(&self, other: usize) -> Result<()> {
        if other != self.len {
            return Err(Error::InvalidValue(format!(
                "host slice has {other} elements, the device buffer {}",
                self.len
            )));
        }
        Ok(())
    }
}

impl<T: Pod> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        if let Err(e) = self.rt.free_device_memory(self.ptr) {
            self.rt.record_drop_error("hipFree of a DeviceBuffer", e);
        }
    }
}
