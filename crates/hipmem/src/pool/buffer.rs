//! [`PoolBuffer<T>`]: typed memory from a pool, freed in stream order when
//! dropped.
#![forbid(unsafe_code)]

use std::marker::PhantomData;

use bytemuck::Pod;

use super::mem_pool::PoolRef;
use crate::backend::DevicePtr;
use crate::error::Result;
use crate::runtime::{CoreStream, DeviceSlice, Runtime};

/// Memory for `len` elements of `T` from a pool, freed in the order of its
/// stream when dropped. [`PoolBuffer::free_on`] frees it on another stream.
pub struct PoolBuffer<T: Pod> {
    pub(crate) pool: PoolRef,
    pub(crate) ptr: DevicePtr,
    len: usize,
    stream: CoreStream,
    _t: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for PoolBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuffer").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl<T: Pod> PoolBuffer<T> {
    pub(crate) fn new(pool: PoolRef, ptr: DevicePtr, len: usize, stream: CoreStream) -> PoolBuffer<T> {
        PoolBuffer { pool, ptr, len, stream, _t: PhantomData }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> u64 {
        self.len as u64 * std::mem::size_of::<T>() as u64
    }

    /// The device address (null when empty).
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The stream the buffer is freed on.
    pub fn stream(&self) -> &CoreStream {
        &self.stream
    }

    /// Frees the buffer in the order of `stream` instead of its own.
    pub fn free_on(mut self, stream: &CoreStream) -> Result<()> {
        let ptr = std::mem::replace(&mut self.ptr, DevicePtr::NULL);
        self.pool.free(ptr, stream)
    }
}

impl<T: Pod> DeviceSlice<T> for PoolBuffer<T> {
    fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        self.stream.runtime()
    }
}

impl<T: Pod> Drop for PoolBuffer<T> {
    fn drop(&mut self) {
        if let Err(e) = self.pool.free(self.ptr, &self.stream) {
            self.stream.runtime().record_drop_error("hipFreeAsync of a PoolBuffer", e);
        }
    }
}
