//! Interprocess sharing of the driver's pools: `cuMemPoolExportToShareableHandle`,
//! `cuMemPoolImportFromShareableHandle`, `cuMemPoolExportPointer`,
//! `cuMemPoolImportPointer` and `cuMemGetAddressRange_v2`, loaded on first use.

use std::ffi::{c_int, c_ulonglong, c_void};
use std::sync::OnceLock;

use super::driver::{self, CUdeviceptr, CUmemoryPool, CUresult};
use crate::error::Result;

/// `CUmemPoolPtrExportData`: 64 opaque bytes.
#[repr(C)]
#[derive(Copy, Clone)]
pub(super) struct CUmemPoolPtrExportData {
    pub(super) reserved: [u8; 64],
}

type ExportToShareableHandle = unsafe extern "C" fn(
    handle_out: *mut c_void,
    pool: CUmemoryPool,
    handle_type: c_int,
    flags: c_ulonglong,
) -> CUresult;
type ImportFromShareableHandle = unsafe extern "C" fn(
    pool_out: *mut CUmemoryPool,
    handle: *mut c_void,
    handle_type: c_int,
    flags: c_ulonglong,
) -> CUresult;
type ExportPointer =
    unsafe extern "C" fn(data_out: *mut CUmemPoolPtrExportData, ptr: CUdeviceptr) -> CUresult;
type ImportPointer = unsafe extern "C" fn(
    ptr_out: *mut CUdeviceptr,
    pool: CUmemoryPool,
    data: *mut CUmemPoolPtrExportData,
) -> CUresult;
type GetAddressRange =
    unsafe extern "C" fn(base: *mut CUdeviceptr, size: *mut usize, ptr: CUdeviceptr) -> CUresult;

pub(super) struct Entries {
    pub(super) export_pool: ExportToShareableHandle,
    pub(super) import_pool: ImportFromShareableHandle,
    pub(super) export_pointer: ExportPointer,
    pub(super) import_pointer: ImportPointer,
    pub(super) address_range: GetAddressRange,
}

pub(super) fn entries() -> Result<&'static Entries> {
    static ENTRIES: OnceLock<Result<Entries>> = OnceLock::new();
    let loaded = ENTRIES.get_or_init(|| {
        // SAFETY: each type above is the signature cuda.h (11.2+) gives for the symbol.
        unsafe {
            Ok(Entries {
                export_pool: driver::symbol("cuMemPoolExportToShareableHandle")?,
                import_pool: driver::symbol("cuMemPoolImportFromShareableHandle")?,
                export_pointer: driver::symbol("cuMemPoolExportPointer")?,
                import_pointer: driver::symbol("cuMemPoolImportPointer")?,
                address_range: driver::symbol("cuMemGetAddressRange_v2")?,
            })
        }
    });
    loaded.as_ref().map_err(Clone::clone)
}

/// `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR`.
pub(super) const HANDLE_TYPE_POSIX_FD: c_int = 1;
