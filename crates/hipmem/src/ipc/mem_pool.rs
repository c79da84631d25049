//! Interprocess sharing of memory pools, as methods of the pool API:
//! exporting and importing pools (`hipMemPoolExportToShareableHandle`,
//! `hipMemPoolImportFromShareableHandle`) and pointers
//! (`hipMemPoolExportPointer`, `hipMemPoolImportPointer`), for hipmem's own
//! pools (`pool_share.rs`) and the driver's.
#![forbid(unsafe_code)]

use std::marker::PhantomData;
use std::sync::Arc;

use bytemuck::Pod;

use super::pool_share::{self, PoolImport};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::pool::imported::ImportedPool;
use crate::pool::mem_pool::PoolRef;
use crate::pool::table::{next_pool_id, table};
use crate::pool::{MemPool, PoolBuffer, PoolProps, PtrExportData, handle_type};
use crate::runtime::{DeviceSlice, MemoryKind, Runtime};

impl MemPool {
    /// `hipMemPoolExportToShareableHandle`: a descriptor another process
    /// imports the pool from ([`MemPool::import_shareable_handle`]; send it
    /// with [`crate::ipc::IpcStream::send_pool`]). A handle type the pool was
    /// not created with, None, or flags != 0 are InvalidValue.
    pub fn export_shareable_handle(&self, handle_type: u32, flags: u32) -> Result<std::os::fd::OwnedFd> {
        if flags != 0 {
            return Err(Error::InvalidValue(format!(
                "hipMemPoolExportToShareableHandle: flags must be 0, not {flags:#x}"
            )));
        }
        if handle_type != handle_type::POSIX_FILE_DESCRIPTOR || self.props().handle_types & handle_type == 0 {
            return Err(Error::InvalidValue(format!(
                "hipMemPoolExportToShareableHandle: handle type {handle_type} was not requested when the pool was created (requested {:#x})",
                self.props().handle_types
            )));
        }
        if self.pool.is_destroyed() {
            return Err(Error::InvalidValue("the pool was destroyed".into()));
        }
        match &self.pool {
            PoolRef::Hipmem(core) => pool_share::export_pool(core),
            PoolRef::Driver(d) => self.rt.backend().driver_pool_export_fd(d.raw),
            PoolRef::Imported(_) => {
                Err(Error::InvalidValue("an imported pool cannot be exported again".into()))
            }
        }
    }

    /// `hipMemPoolImportFromShareableHandle`: the pool another process
    /// exported to `fd` (the caller keeps `fd`). Handle type other than
    /// POSIX file descriptor or flags != 0 → InvalidValue; a descriptor that
    /// is not an exported pool → InvalidValue.
    pub fn import_shareable_handle(
        rt: &Runtime,
        fd: std::os::fd::BorrowedFd<'_>,
        handle_type: u32,
        flags: u32,
    ) -> Result<MemPool> {
        if flags != 0 {
            return Err(Error::InvalidValue(format!(
                "hipMemPoolImportFromShareableHandle: flags must be 0, not {flags:#x}"
            )));
        }
        if handle_type != handle_type::POSIX_FILE_DESCRIPTOR {
            return Err(Error::InvalidValue(format!(
                "hipMemPoolImportFromShareableHandle: handle type {handle_type} is not a POSIX file descriptor (1)"
            )));
        }
        let st = rustix::fs::fstat(fd).map_err(|e| {
            Error::InvalidValue(format!("the shareable handle is not an open descriptor: {e}"))
        })?;
        let is_socket = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket;
        let pool = if is_socket {
            let imported: Arc<dyn ImportedPool> = Arc::new(PoolImport::import(rt, next_pool_id(), fd)?);
            table(rt).add_imported(Arc::clone(&imported));
            PoolRef::Imported(imported)
        } else {
            // Not hipmem's: the driver's own pool kind, where the backend has it.
            // The driver answers a descriptor that is no exported pool with
            // whatever code it likes (CUDA_ERROR_UNKNOWN for /dev/null): the
            // contract says InvalidValue.
            let raw = rt.backend().driver_pool_import_fd(fd).map_err(|e| match e {
                Error::OutOfMemory(_) | Error::NotInitialized(_) => e,
                other => Error::InvalidValue(format!(
                    "the descriptor is not an exported memory pool ({})",
                    other.message()
                )),
            })?;
            let props = PoolProps {
                device: raw.device,
                handle_types: handle_type::POSIX_FILE_DESCRIPTOR,
                max_size: 0,
            };
            let pool = table(rt).add_driver(rt, raw, props, true);
            pool.mark_imported();
            PoolRef::Driver(pool)
        };
        Ok(MemPool::owned(rt, pool))
    }

    /// `hipMemPoolImportPointer`: the address in this process of the pointer
    /// that `data` exports; this pool must be the import of the pool it came
    /// from. Garbage, data of another pool, or a pool that was not imported
    /// → InvalidValue. Free it with [`MemPool::free_imported`],
    /// `hipFree`/`hipFreeAsync` ([`Runtime::free`], [`Runtime::free_async`]):
    /// that unmaps it here, never frees the exporter's memory.
    pub fn import_pointer_raw(&self, data: &PtrExportData) -> Result<DevicePtr> {
        Ok(self.import_pointer_sized(data)?.0)
    }

    pub(crate) fn import_pointer_sized(&self, data: &PtrExportData) -> Result<(DevicePtr, u64)> {
        match &self.pool {
            PoolRef::Imported(i) => i.import_pointer(data),
            PoolRef::Driver(d) if d.is_imported() => {
                if pool_share::is_hipmem_ptr_data(data) {
                    return Err(Error::InvalidValue(
                        "the data exports a pointer of a hipmem pool, not of a driver pool".into(),
                    ));
                }
                let ptr = self.rt.backend().driver_pool_import_pointer(d.raw, &data.reserved).map_err(
                    |e| match e {
                        Error::OutOfMemory(_) | Error::NotInitialized(_) => e,
                        other => Error::InvalidValue(format!(
                            "the data is not a pointer exported from this pool ({})",
                            other.message()
                        )),
                    },
                )?;
                let size = self.rt.backend().driver_pointer_range(ptr).unwrap_or(0);
                d.register_import(ptr, size)?;
                Ok((ptr, size))
            }
            _ => Err(Error::InvalidValue(
                "hipMemPoolImportPointer needs a pool imported with hipMemPoolImportFromShareableHandle"
                    .into(),
            )),
        }
    }

    /// Imports a pointer as a typed buffer of `len` elements at most (the
    /// length the exporter gave, when it exported a [`PoolBuffer`]); dropping
    /// it frees the import (unmaps it here).
    pub fn import_pointer<T: Pod>(&self, data: &PtrExportData) -> Result<ImportedBuffer<T>> {
        let (ptr, bytes) = self.import_pointer_sized(data)?;
        let len = (bytes / std::mem::size_of::<T>().max(1) as u64) as usize;
        Ok(ImportedBuffer { pool: self.clone(), ptr, len, _t: PhantomData })
    }

    /// `hipMemPoolExportPointer` of a pointer of this pool.
    pub fn export_pointer(&self, ptr: DevicePtr) -> Result<PtrExportData> {
        let data = self.rt.mem_pool_export_pointer(ptr)?;
        let ours = match (&self.pool, self.rt.allocations().find(ptr.0).map(|a| a.kind)) {
            (PoolRef::Hipmem(c), Some(MemoryKind::PoolSegment(id))) => c.id == id,
            (PoolRef::Driver(d), Some(MemoryKind::DriverPool(id))) => d.id == id,
            _ => false,
        };
        if !ours {
            return Err(Error::InvalidValue(format!("{ptr} is not an allocation of this pool")));
        }
        Ok(data)
    }
}

impl<T: Pod> PoolBuffer<T> {
    /// `hipMemPoolExportPointer`: 64 bytes another process imports into its
    /// import of this buffer's pool ([`MemPool::import_pointer`]); the pool
    /// must have been created shareable. The data carries the buffer's length.
    pub fn export_pointer(&self) -> Result<PtrExportData> {
        match &self.pool {
            PoolRef::Hipmem(core) => {
                let (offset, size) = core.ipc_block(self.ptr)?;
                Ok(pool_share::encode_ptr(pool_share::PtrInfo {
                    uid: core.ipc_uid(pool_share::random_uid),
                    offset,
                    size,
                    len: self.size_bytes(),
                }))
            }
            _ => self.stream().runtime().mem_pool_export_pointer(self.ptr),
        }
    }
}

/// A pointer imported from another process's pool, typed: `len` elements of
/// `T`. Dropping it unmaps it in this process (the exporter's memory is
/// untouched); the imported pool stays alive while it exists.
pub struct ImportedBuffer<T: Pod> {
    pool: MemPool,
    ptr: DevicePtr,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for ImportedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedBuffer").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl<T: Pod> ImportedBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The device address in this process.
    pub fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// The imported pool it belongs to.
    pub fn pool(&self) -> &MemPool {
        &self.pool
    }
}

impl<T: Pod> DeviceSlice<T> for ImportedBuffer<T> {
    fn device_ptr(&self) -> DevicePtr {
        self.ptr
    }
    fn len(&self) -> usize {
        self.len
    }
    fn runtime(&self) -> &Runtime {
        &self.pool.rt
    }
}

impl<T: Pod> Drop for ImportedBuffer<T> {
    fn drop(&mut self) {
        if let Err(e) = self.pool.free_imported(self.ptr) {
            self.pool.rt.record_drop_error("freeing an ImportedBuffer", e);
        }
    }
}

impl Runtime {
    /// `hipMemPoolExportPointer`: the export data of a pointer of a shareable
    /// pool (the start of a live allocation). Anything else is InvalidValue.
    pub fn mem_pool_export_pointer(&self, ptr: DevicePtr) -> Result<PtrExportData> {
        if ptr.is_null() {
            return Err(Error::InvalidValue("hipMemPoolExportPointer of a null pointer".into()));
        }
        match self.allocations().find(ptr.0).map(|a| a.kind) {
            Some(MemoryKind::PoolSegment(id)) => {
                let core = table(self).get(id).ok_or_else(|| {
                    Error::InvalidValue(format!("{ptr} belongs to a pool that no longer exists"))
                })?;
                let (offset, size) = core.ipc_block(ptr)?;
                Ok(pool_share::encode_ptr(pool_share::PtrInfo {
                    uid: core.ipc_uid(pool_share::random_uid),
                    offset,
                    size,
                    len: size,
                }))
            }
            Some(MemoryKind::DriverPool(_)) => {
                Ok(PtrExportData { reserved: self.backend().driver_pool_export_pointer(ptr)? })
            }
            _ => Err(Error::InvalidValue(format!("{ptr} is not an allocation of a memory pool"))),
        }
    }
}
