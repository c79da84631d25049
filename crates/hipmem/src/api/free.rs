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
    #[inline]
    pub fn free_pool_block_async(&self, ptr: DevicePtr, stream: &CoreStream) -> Result<()> {
        self.free_async_of(ptr, stream, Accept::PoolBlocks)
    }

    /// `hipFreeAsync`: frees pool memory in `stream`'s order. A pointer from
    /// `hipMalloc` is accepted and freed at once (synchronously); null, an
    /// unknown pointer or a double free is InvalidValue.
    #[inline]
    pub fn free_async(&self, ptr: DevicePtr, stream: &CoreStream) -> Result<()> {
        self.free_async_of(ptr, stream, Accept::Any)
    }

    /// [`Runtime::free_async`] and [`Runtime::free_pool_block_async`] in
    /// one body, so that the pool's fast free has one call site and is
    /// inlined into it: with a call site in each, the compiler kept it a
    /// function of its own, and a `hipMallocAsync`+`hipFreeAsync` pair on
    /// an H100's host took 52-53 ns where it had taken 43-45 (a standalone
    /// C loop on one pinned core, fastest of six to eight runs).
    fn free_async_of(&self, ptr: DevicePtr, stream: &CoreStream, accept: Accept) -> Result<()> {
        if ptr.is_null() {
            return Err(Error::InvalidValue(match accept {
                Accept::Any => "hipFreeAsync of a null pointer".into(),
                Accept::PoolBlocks => "a pool free of a null pointer".into(),
            }));
        }
        check_own_stream(self, stream)?;
        if let Some(result) = self.free_pool_memory_async(ptr, stream) {
            return result;
        }
        if accept == Accept::PoolBlocks {
            return Err(Error::InvalidValue(format!(
                "{ptr} is not a block of a memory pool (nothing was freed)"
            )));
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

/// What [`Runtime::free_async_of`] frees besides pool blocks.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Accept {
    /// Any live allocation (`hipFreeAsync`).
    Any,
    /// Pool blocks only.
    PoolBlocks,
}
