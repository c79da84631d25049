//! `hipFree` and `hipFreeAsync` of any pointer: the functions that span the
//! subsystems, routing each kind of memory to the layer that owns it.
#![forbid(unsafe_code)]

use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::pool::table::check_own_stream;
use crate::runtime::{CoreStream, MemoryKind, Runtime};

impl Runtime {
    /// `hipFree`: null is fine; anything but the start of a live allocation
    /// (or a block of a pool) is InvalidValue. Synchronizes the device first
    /// (HIP's slow path). Pool memory goes back to its pool, managed memory
    /// to the managed subsystem, an imported pool pointer is unmapped here;
    /// `hipMalloc` memory is freed.
    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        if let Some(a) = self.allocations().find(ptr.0) {
            if let Some(result) = self.free_pool_memory_sync(ptr, &a) {
                return result;
            }
            match a.kind {
                MemoryKind::Managed { .. } if a.base == ptr => return self.free_managed(ptr),
                MemoryKind::VmmMapping => {
                    if let Some(result) = self.free_if_imported(ptr) {
                        return result;
                    }
                }
                _ => {}
            }
        }
        self.free_device_memory(ptr)
    }

    /// Frees a live block of a memory pool (hipmem's or the driver's) in
    /// `stream`'s order, as `hipFreeAsync` does, and nothing else: a pointer
    /// that is not pool memory (from `hipMalloc`, managed, host, never
    /// allocated) is InvalidValue and left as it was, as is a block freed
    /// already.
    pub fn free_pool_block_async(&self, ptr: DevicePtr, stream: &CoreStream) -> Result<()> {
        if ptr.is_null() {
            return Err(Error::InvalidValue("a pool free of a null pointer".into()));
        }
        check_own_stream(self, stream)?;
        self.free_pool_memory_async(ptr, stream).unwrap_or_else(|| {
            Err(Error::InvalidValue(format!("{ptr} is not a block of a memory pool (nothing was freed)")))
        })
    }

    /// `hipFreeAsync`: frees pool memory in `stream`'s order. A pointer from
    /// `hipMalloc` is accepted and freed at once (synchronously); null, an
    /// unknown pointer or a double free is InvalidValue.
    pub fn free_async(&self, ptr: DevicePtr, stream: &CoreStream) -> Result<()> {
        if ptr.is_null() {
            return Err(Error::InvalidValue("hipFreeAsync of a null pointer".into()));
        }
        check_own_stream(self, stream)?;
        if let Some(result) = self.free_pool_memory_async(ptr, stream) {
            return result;
        }
        match self.allocations().find(ptr.0) {
            Some(a) if a.kind == MemoryKind::VmmMapping => {
                stream.synchronize()?;
                match self.free_if_imported(ptr) {
                    Some(r) => r,
                    None => self.free(ptr),
                }
            }
            Some(_) => self.free(ptr),
            None => Err(Error::InvalidValue(format!(
                "{ptr} is not a live hipmem allocation (never allocated, already freed, or host memory)"
            ))),
        }
    }
}
