//! The driver's own memory pool (`cuMemPoolCreate`, `cuMemAllocFromPoolAsync`,
//! ...) behind hipmem's pool API: for comparison with hipmem's pool, and to
//! interoperate with code that uses the driver's pools.
//!
//! Allocations are recorded in the runtime's registry (kind
//! [`MemoryKind::DriverPool`]) so that `hipFree`, `hipFreeAsync`, pointer
//! attributes and copy bounds work on them as on any other memory.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use super::{AccessFlags, PoolAttribute, PoolProps, PoolStats};
use crate::backend::{DevicePtr, RawPool, RawStream};
use crate::error::{Error, Result};
use crate::runtime::{Allocation, MemoryKind, Runtime, WeakRuntime};

/// A driver pool.
pub(crate) struct DriverPool {
    pub(crate) id: u64,
    pub(crate) raw: RawPool,
    pub(crate) props: PoolProps,
    /// Whether hipmem created it (and may destroy it).
    pub(crate) owned: bool,
    rt: WeakRuntime,
    destroyed: AtomicBool,
    /// Imported from another process (`cuMemPoolImportFromShareableHandle`): cannot allocate.
    imported: AtomicBool,
}

impl std::fmt::Debug for DriverPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverPool").field("id", &self.id).field("raw", &self.raw).finish()
    }
}

impl DriverPool {
    pub(crate) fn new(rt: &Runtime, id: u64, raw: RawPool, props: PoolProps, owned: bool) -> DriverPool {
        DriverPool {
            id,
            raw,
            props,
            owned,
            rt: rt.downgrade(),
            destroyed: AtomicBool::new(false),
            imported: AtomicBool::new(false),
        }
    }

    pub(crate) fn mark_imported(&self) {
        self.imported.store(true, Ordering::Release);
    }

    pub(crate) fn is_imported(&self) -> bool {
        self.imported.load(Ordering::Acquire)
    }

    /// Records a pointer imported into this pool (`cuMemPoolImportPointer`),
    /// so that frees and copies know it.
    pub(crate) fn register_import(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let rt = self.runtime()?;
        rt.allocations().insert(Allocation {
            base: ptr,
            size,
            kind: MemoryKind::DriverPool(self.id),
            device: self.raw.device,
        });
        Ok(())
    }

    pub(crate) fn runtime(&self) -> Result<Runtime> {
        self.rt.get("this pool")
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// `cuMemAllocFromPoolAsync`.
    pub(crate) fn alloc(&self, size: u64, stream: RawStream) -> Result<DevicePtr> {
        if self.is_destroyed() {
            return Err(Error::InvalidValue(format!("memory pool {:#x} was destroyed", self.id)));
        }
        if self.is_imported() {
            return Err(Error::InvalidValue("an imported memory pool cannot allocate".into()));
        }
        let rt = self.runtime()?;
        let ptr = rt.backend().driver_pool_alloc_async(self.raw, size, stream)?;
        rt.allocations().insert(Allocation {
            base: ptr,
            size,
            kind: MemoryKind::DriverPool(self.id),
            device: self.raw.device,
        });
        crate::trace::alloc(self.id, stream.handle, self.raw.device, ptr.0, size);
        Ok(ptr)
    }

    /// `cuMemFreeAsync` of a live allocation of this pool.
    pub(crate) fn free(&self, ptr: DevicePtr, stream: RawStream) -> Result<()> {
        let rt = self.runtime()?;
        let a = rt.allocations().remove_if(ptr, |a| a.kind == MemoryKind::DriverPool(self.id)).ok_or_else(
            || Error::InvalidValue(format!("{ptr} is not a live allocation of driver pool {:#x}", self.id)),
        )?;
        let (device, size) = (a.device, a.size);
        rt.backend().driver_free_async(ptr, stream).inspect_err(|_| rt.allocations().insert(a))?;
        crate::trace::free_requested(self.id, stream.handle, device, ptr.0, size);
        Ok(())
    }

    pub(crate) fn get_attribute(&self, attr: PoolAttribute) -> Result<u64> {
        self.runtime()?.backend().driver_pool_get_attribute(self.raw, attr.raw())
    }

    pub(crate) fn set_attribute(&self, attr: PoolAttribute, value: u64) -> Result<()> {
        match attr {
            PoolAttribute::ReservedMemCurrent | PoolAttribute::UsedMemCurrent => {
                return Err(Error::InvalidValue(format!("{attr:?} is read-only")));
            }
            PoolAttribute::ReservedMemHigh | PoolAttribute::UsedMemHigh if value != 0 => {
                return Err(Error::InvalidValue(format!(
                    "{attr:?} can only be reset, by setting 0 (not {value})"
                )));
            }
            _ => {}
        }
        self.runtime()?.backend().driver_pool_set_attribute(self.raw, attr.raw(), value)
    }

    pub(crate) fn stats(&self) -> Result<PoolStats> {
        Ok(PoolStats {
            reserved_current: self.get_attribute(PoolAttribute::ReservedMemCurrent)?,
            reserved_high: self.get_attribute(PoolAttribute::ReservedMemHigh)?,
            used_current: self.get_attribute(PoolAttribute::UsedMemCurrent)?,
            used_high: self.get_attribute(PoolAttribute::UsedMemHigh)?,
        })
    }

    pub(crate) fn trim_to(&self, keep: u64) -> Result<()> {
        self.runtime()?.backend().driver_pool_trim_to(self.raw, keep)
    }

    pub(crate) fn set_access(&self, device: usize, flags: AccessFlags) -> Result<()> {
        self.runtime()?.backend().driver_pool_set_access(self.raw, device, flags.raw())
    }

    pub(crate) fn access(&self, device: usize) -> Result<AccessFlags> {
        AccessFlags::from_raw(self.runtime()?.backend().driver_pool_get_access(self.raw, device)?)
    }

    /// `cuMemPoolDestroy`: the driver releases the memory once the live
    /// allocations are freed; they stay valid until then.
    pub(crate) fn destroy(&self) -> Result<()> {
        if self.destroyed.swap(true, Ordering::AcqRel) {
            return Err(Error::InvalidValue(format!("memory pool {:#x} was already destroyed", self.id)));
        }
        if self.owned {
            self.runtime()?.backend().driver_pool_destroy(self.raw)?;
        }
        Ok(())
    }
}
