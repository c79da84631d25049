//! A pool imported from another process, as the pool layer sees it: the
//! `ipc` subsystem builds it (it speaks to the exporting process) and hands
//! it to [`MemPool`](super::MemPool) behind this trait.
#![forbid(unsafe_code)]

use super::{AccessFlags, PoolProps, PtrExportData};
use crate::backend::DevicePtr;
use crate::error::Result;

/// What a [`MemPool`](super::MemPool) needs of an imported pool.
pub(crate) trait ImportedPool: Send + Sync + std::fmt::Debug {
    /// The pool's id in this process.
    fn id(&self) -> u64;
    /// The device its memory lives on.
    fn device(&self) -> usize;
    /// The properties the exporter created it with.
    fn props(&self) -> PoolProps;
    /// Whether `hipMemPoolDestroy` was called on the import.
    fn is_destroyed(&self) -> bool;
    /// `hipMemPoolDestroy` of the import (imported pointers stay valid).
    fn destroy(&self);
    /// Whether `ptr` lies in the import's address range.
    fn contains(&self, ptr: DevicePtr) -> bool;
    /// Maps the pointer `data` exports: its address here and its size.
    fn import_pointer(&self, data: &PtrExportData) -> Result<(DevicePtr, u64)>;
    /// Unmaps an imported pointer (this process only).
    fn free_pointer(&self, ptr: DevicePtr) -> Result<()>;
    /// Bytes mapped here.
    fn mapped_bytes(&self) -> u64;
    /// Bytes of the pointers imported here.
    fn imported_bytes(&self) -> u64;
    /// `hipMemPoolSetAccess` for one device.
    fn set_access(&self, device: usize, flags: AccessFlags) -> Result<()>;
    /// `hipMemPoolGetAccess` for one device.
    fn access(&self, device: usize) -> Result<AccessFlags>;
}
