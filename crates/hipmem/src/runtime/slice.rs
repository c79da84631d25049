//! [`DeviceSlice`]: what kernels and copies need to know about typed device
//! memory of any origin (`hipMalloc`, a pool, managed memory, a mapping).
#![forbid(unsafe_code)]

use bytemuck::Pod;

use super::Runtime;
use crate::backend::DevicePtr;
use crate::error::{Error, Result};

/// Typed device memory of any origin (`hipMalloc`, a pool, ...): what kernels
/// and copies need to know about it.
pub trait DeviceSlice<T: Pod> {
    /// The device address of the first element (null when empty).
    fn device_ptr(&self) -> DevicePtr;

    /// Number of elements.
    fn len(&self) -> usize;

    /// The runtime the memory belongs to.
    fn runtime(&self) -> &Runtime;

    /// Whether there is no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Size in bytes.
    fn size_bytes(&self) -> u64 {
        self.len() as u64 * std::mem::size_of::<T>() as u64
    }

    /// Copies the contents into `dst` (same length); returns when done
    /// (ordered after earlier work on the null stream and blocking streams).
    fn read_into(&self, dst: &mut [T]) -> Result<()> {
        if dst.len() != self.len() {
            return Err(Error::InvalidValue(format!(
                "host slice has {} elements, the device memory {}",
                dst.len(),
                self.len()
            )));
        }
        self.runtime().copy_device_to_host(bytemuck::cast_slice_mut(dst), self.device_ptr())
    }

    /// The contents as a vector.
    fn read_to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::zeroed(); self.len()];
        self.read_into(&mut v)?;
        Ok(v)
    }

    /// Copies `src` (same length) in; returns when done.
    fn write_from(&self, src: &[T]) -> Result<()> {
        if src.len() != self.len() {
            return Err(Error::InvalidValue(format!(
                "host slice has {} elements, the device memory {}",
                src.len(),
                self.len()
            )));
        }
        self.runtime().copy_host_to_device(self.device_ptr(), bytemuck::cast_slice(src))
    }
}
