//! Stream-ordered allocation from memory pools (`hipMallocAsync` and friends).
//!
//! - [`MemPool`]: a pool of one device; the device's default pool and its
//!   current pool (`Device::default_mem_pool`, `Device::mem_pool`,
//!   `Device::set_mem_pool`).
//! - [`PoolBuffer<T>`]: memory from a pool, freed in stream order when dropped.
//!
//! Where things are: `placement.rs` (best-fit placement, splitting,
//! coalescing), `stream_cache.rs` (each stream's lock-free-from-others front:
//! its cache of freed blocks and its live blocks), `usage.rs` (used-bytes
//! statistics without a shared counter), `core.rs` (the reuse rules, growth,
//! release threshold, trim, out-of-memory handling). All of it is safe Rust.
#![forbid(unsafe_code)]

pub(crate) mod core;
pub(crate) mod driver_pool;
pub(crate) mod ipc;
pub mod layout;
pub mod placement;
pub mod stream_cache;
pub mod usage;

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytemuck::Pod;

use self::core::PoolCore;
use self::driver_pool::DriverPool;
use self::ipc::ImportedPool;
pub use self::ipc::PtrExportData;
use crate::backend::{DevicePtr, RawPool};
use crate::error::{Error, Result};
use crate::runtime::{Runtime, RuntimeInner};
use crate::stream::Stream;

/// `hipMemPoolAttr`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PoolAttribute {
    /// `hipMemPoolReuseFollowEventDependencies` (1): reuse memory freed on
    /// another stream once this stream waited on an event recorded after the free.
    ReuseFollowEventDependencies,
    /// `hipMemPoolReuseAllowOpportunistic` (2): reuse memory whose free has
    /// completed on the device, without a dependency.
    ReuseAllowOpportunistic,
    /// `hipMemPoolReuseAllowInternalDependencies` (3): make the allocating
    /// stream wait for the freeing stream rather than fail to grow.
    ReuseAllowInternalDependencies,
    /// `hipMemPoolAttrReleaseThreshold` (4): unused bytes kept at synchronization.
    ReleaseThreshold,
    /// `hipMemPoolAttrReservedMemCurrent` (5, read-only).
    ReservedMemCurrent,
    /// `hipMemPoolAttrReservedMemHigh` (6, reset by setting 0).
    ReservedMemHigh,
    /// `hipMemPoolAttrUsedMemCurrent` (7, read-only).
    UsedMemCurrent,
    /// `hipMemPoolAttrUsedMemHigh` (8, reset by setting 0).
    UsedMemHigh,
}

impl PoolAttribute {
    /// Every attribute.
    pub const ALL: [PoolAttribute; 8] = [
        PoolAttribute::ReuseFollowEventDependencies,
        PoolAttribute::ReuseAllowOpportunistic,
        PoolAttribute::ReuseAllowInternalDependencies,
        PoolAttribute::ReleaseThreshold,
        PoolAttribute::ReservedMemCurrent,
        PoolAttribute::ReservedMemHigh,
        PoolAttribute::UsedMemCurrent,
        PoolAttribute::UsedMemHigh,
    ];

    /// Parses the numeric attribute; anything else is InvalidValue.
    pub fn from_raw(raw: i32) -> Result<PoolAttribute> {
        if (1..=8).contains(&raw) {
            Ok(Self::ALL[raw as usize - 1])
        } else {
            Err(Error::InvalidValue(format!("{raw} is not a hipMemPoolAttr (1 to 8)")))
        }
    }

    /// The numeric value.
    pub fn raw(&self) -> i32 {
        Self::ALL.iter().position(|a| a == self).map(|i| i as i32 + 1).unwrap_or(0)
    }

    /// Whether the value is a 32-bit int (the reuse flags) rather than a u64.
    pub fn is_int(&self) -> bool {
        matches!(
            self,
            PoolAttribute::ReuseFollowEventDependencies
                | PoolAttribute::ReuseAllowOpportunistic
                | PoolAttribute::ReuseAllowInternalDependencies
        )
    }
}

/// `hipMemAccessFlags`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum AccessFlags {
    /// `hipMemAccessFlagsProtNone` (0).
    None,
    /// `hipMemAccessFlagsProtRead` (1).
    Read,
    /// `hipMemAccessFlagsProtReadWrite` (3).
    ReadWrite,
}

impl AccessFlags {
    /// Parses the numeric flags; anything else is InvalidValue.
    pub fn from_raw(raw: u32) -> Result<AccessFlags> {
        match raw {
            0 => Ok(AccessFlags::None),
            1 => Ok(AccessFlags::Read),
            3 => Ok(AccessFlags::ReadWrite),
            other => {
                Err(Error::InvalidValue(format!("{other} is not a hipMemAccessFlags value (0, 1 or 3)")))
            }
        }
    }

    /// The numeric value.
    pub fn raw(&self) -> u32 {
        match self {
            AccessFlags::None => 0,
            AccessFlags::Read => 1,
            AccessFlags::ReadWrite => 3,
        }
    }
}

/// `hipMemAllocationHandleType` bits a pool can export.
pub mod handle_type {
    /// `hipMemHandleTypeNone`.
    pub const NONE: u32 = 0;
    /// `hipMemHandleTypePosixFileDescriptor`.
    pub const POSIX_FILE_DESCRIPTOR: u32 = 1;
    /// `hipMemHandleTypeWin32`.
    pub const WIN32: u32 = 2;
    /// `hipMemHandleTypeWin32Kmt`.
    pub const WIN32_KMT: u32 = 4;
}

/// What a pool is created with (`hipMemPoolProps`, less the fields every
/// hipmem pool has the same: pinned device memory).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolProps {
    /// Device ordinal the memory lives on.
    pub device: usize,
    /// `hipMemAllocationHandleType` bits the pool can be exported with.
    pub handle_types: u32,
    /// Most bytes the pool may reserve (0: no limit but the device).
    pub max_size: u64,
}

/// How a hipmem pool gets memory from the backend.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum PoolBacking {
    /// Separate device allocations; free space coalesces within each.
    Segments,
    /// One reserved address range with physical chunks mapped in as the pool
    /// grows and unmapped when free: free space coalesces across chunks.
    /// The default where the backend has virtual memory.
    VirtualMemory,
}

/// The four statistics of a pool, in bytes.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PoolStats {
    /// Memory the pool holds from the backend.
    pub reserved_current: u64,
    /// Most reserved since the last reset.
    pub reserved_high: u64,
    /// Memory of live allocations (block sizes, 256-byte granules).
    pub used_current: u64,
    /// Most used since the last reset.
    pub used_high: u64,
}

/// Which kind of pool a handle is.
#[derive(Clone, Debug)]
pub(crate) enum PoolRef {
    /// hipmem's own pool.
    Hipmem(Arc<PoolCore>),
    /// The driver's pool.
    Driver(Arc<DriverPool>),
    /// A hipmem pool imported from another process.
    Imported(Arc<ImportedPool>),
}

impl PoolRef {
    fn id(&self) -> u64 {
        match self {
            PoolRef::Hipmem(c) => c.id,
            PoolRef::Driver(d) => d.id,
            PoolRef::Imported(i) => i.id,
        }
    }

    fn device(&self) -> usize {
        match self {
            PoolRef::Hipmem(c) => c.device,
            PoolRef::Driver(d) => d.raw.device,
            PoolRef::Imported(i) => i.device,
        }
    }

    fn is_destroyed(&self) -> bool {
        match self {
            PoolRef::Hipmem(c) => c.is_destroyed(),
            PoolRef::Driver(d) => d.is_destroyed(),
            PoolRef::Imported(i) => i.is_destroyed(),
        }
    }

    fn same(&self, other: &PoolRef) -> bool {
        match (self, other) {
            (PoolRef::Hipmem(a), PoolRef::Hipmem(b)) => Arc::ptr_eq(a, b),
            (PoolRef::Driver(a), PoolRef::Driver(b)) => Arc::ptr_eq(a, b),
            (PoolRef::Imported(a), PoolRef::Imported(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Allocates in stream order.
    pub(crate) fn alloc(&self, size: u64, stream: &Stream) -> Result<DevicePtr> {
        match self {
            PoolRef::Hipmem(c) => c.alloc(size, &stream.pool_ref()),
            PoolRef::Driver(d) => d.alloc(size, stream.raw()),
            PoolRef::Imported(_) => Err(imported_cannot_allocate()),
        }
    }

    /// Frees in stream order.
    fn free(&self, ptr: DevicePtr, stream: &Stream) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        match self {
            PoolRef::Hipmem(core) => {
                if core.free(ptr, &stream.pool_ref()) {
                    Ok(())
                } else {
                    Err(Error::InvalidValue(format!("{ptr} is not a live allocation of pool {:#x}", core.id)))
                }
            }
            PoolRef::Driver(d) => d.free(ptr, stream.raw()),
            PoolRef::Imported(i) => {
                // Unmapping waits for the work queued before it on the stream.
                stream.synchronize()?;
                i.free_pointer(ptr)
            }
        }
    }
}

fn imported_cannot_allocate() -> Error {
    Error::InvalidValue("an imported memory pool cannot allocate".into())
}

/// Destroys a created pool when its last handle goes.
struct PoolOwner {
    pool: PoolRef,
    rt: Runtime,
}

impl Drop for PoolOwner {
    fn drop(&mut self) {
        self.rt.inner.pools.destroy(&self.pool);
    }
}

/// A memory pool (`hipMemPool_t`). Clones are the same pool. A pool made with
/// [`MemPool::create`] (hipmem's own) or [`MemPool::create_driver`] (the
/// driver's, on cuda) is destroyed when its last handle is dropped or by
/// [`MemPool::destroy`]; allocations still live stay valid and may be freed
/// later. A default pool is never destroyed.
#[derive(Clone)]
pub struct MemPool {
    pool: PoolRef,
    owner: Option<Arc<PoolOwner>>,
    rt: Runtime,
}

impl std::fmt::Debug for MemPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool")
            .field("id", &self.pool.id())
            .field("device", &self.pool.device())
            .field("driver", &self.is_driver_pool())
            .field("default", &self.is_default())
            .finish()
    }
}

impl PartialEq for MemPool {
    fn eq(&self, other: &Self) -> bool {
        self.pool.same(&other.pool)
    }
}

fn check_props(rt: &Runtime, props: &PoolProps) -> Result<()> {
    rt.check_device(props.device).map_err(|e| Error::InvalidValue(e.message().to_string()))?;
    let known = handle_type::POSIX_FILE_DESCRIPTOR | handle_type::WIN32 | handle_type::WIN32_KMT;
    if props.handle_types & !known != 0 {
        return Err(Error::InvalidValue(format!("unknown handle type bits {:#x}", props.handle_types)));
    }
    if props.handle_types & (handle_type::WIN32 | handle_type::WIN32_KMT) != 0 {
        return Err(Error::NotSupported("Win32 handle types do not exist on Linux".into()));
    }
    Ok(())
}

impl MemPool {
    /// `hipMemPoolCreate`: a new hipmem pool on `props.device`.
    ///
    /// A pool created shareable (`handle_types` with
    /// [`handle_type::POSIX_FILE_DESCRIPTOR`]) is always on virtual memory
    /// (its chunks are exportable physical memory): NotSupported on a
    /// backend without virtual memory.
    pub fn create(rt: &Runtime, props: PoolProps) -> Result<MemPool> {
        check_props(rt, &props)?;
        let backing = shareable(&props).then_some(PoolBacking::VirtualMemory);
        let core = rt.inner.pools.create(&rt.inner, props, false, backing);
        if backing.is_some() && core.backing() != PoolBacking::VirtualMemory {
            return Err(Error::NotSupported(format!(
                "device {} has no virtual memory management: a shareable pool cannot be created",
                props.device
            )));
        }
        Ok(MemPool::owned(rt, PoolRef::Hipmem(core)))
    }

    /// Like [`MemPool::create`], with the backing chosen (virtual memory falls
    /// back to segments where the backend has none).
    /// A shareable pool needs virtual memory: with segments it is NotSupported.
    pub fn create_with_backing(rt: &Runtime, props: PoolProps, backing: PoolBacking) -> Result<MemPool> {
        check_props(rt, &props)?;
        if shareable(&props) {
            if backing == PoolBacking::Segments {
                return Err(Error::NotSupported(
                    "a shareable pool is backed by virtual memory, not segments".into(),
                ));
            }
            return MemPool::create(rt, props);
        }
        let core = rt.inner.pools.create(&rt.inner, props, false, Some(backing));
        Ok(MemPool::owned(rt, PoolRef::Hipmem(core)))
    }

    /// How the pool gets memory (driver pools: segments of the driver's own).
    pub fn backing(&self) -> PoolBacking {
        match &self.pool {
            PoolRef::Hipmem(c) => c.backing(),
            PoolRef::Driver(_) => PoolBacking::Segments,
            PoolRef::Imported(_) => PoolBacking::VirtualMemory,
        }
    }

    /// A new pool of the driver's own kind (`cuMemPoolCreate`), behind the same
    /// API; NotSupported on backends without driver pools.
    pub fn create_driver(rt: &Runtime, props: PoolProps) -> Result<MemPool> {
        check_props(rt, &props)?;
        let raw = rt.backend().driver_pool_create(props.device, props.handle_types, props.max_size)?;
        let pool = rt.inner.pools.add_driver(&rt.inner, raw, props, true);
        Ok(MemPool::owned(rt, PoolRef::Driver(pool)))
    }

    /// The driver's default pool of `device` (`cuDeviceGetDefaultMemPool`),
    /// for code that shares memory with users of the driver's pools.
    pub fn driver_default(rt: &Runtime, device: usize) -> Result<MemPool> {
        rt.check_device(device)?;
        let pool = rt.inner.pools.driver_default(&rt.inner, device)?;
        Ok(MemPool { pool: PoolRef::Driver(pool), owner: None, rt: rt.clone() })
    }

    fn owned(rt: &Runtime, pool: PoolRef) -> MemPool {
        let owner = Arc::new(PoolOwner { pool: pool.clone(), rt: rt.clone() });
        MemPool { pool, owner: Some(owner), rt: rt.clone() }
    }

    /// `hipMemPoolDestroy`: destroys the pool now. A default pool, or a pool
    /// destroyed already, is InvalidValue. Live allocations stay valid.
    pub fn destroy(self) -> Result<()> {
        if self.is_default() {
            return Err(Error::InvalidValue("a default memory pool cannot be destroyed".into()));
        }
        if self.pool.is_destroyed() {
            return Err(Error::InvalidValue(format!(
                "memory pool {:#x} was already destroyed",
                self.pool.id()
            )));
        }
        self.rt.inner.pools.destroy(&self.pool);
        Ok(())
    }

    /// A process-unique id.
    pub fn id(&self) -> u64 {
        self.pool.id()
    }

    /// The device ordinal.
    pub fn device(&self) -> usize {
        self.pool.device()
    }

    /// The properties it was created with.
    pub fn props(&self) -> PoolProps {
        match &self.pool {
            PoolRef::Hipmem(c) => c.props,
            PoolRef::Driver(d) => d.props,
            PoolRef::Imported(i) => i.props,
        }
    }

    /// Whether this is a device's default pool.
    pub fn is_default(&self) -> bool {
        match &self.pool {
            PoolRef::Hipmem(c) => c.is_default,
            PoolRef::Driver(d) => !d.owned,
            PoolRef::Imported(_) => false,
        }
    }

    /// Whether this is a pool of the driver's own kind.
    pub fn is_driver_pool(&self) -> bool {
        matches!(self.pool, PoolRef::Driver(_))
    }

    /// Whether the pool was destroyed.
    pub fn is_destroyed(&self) -> bool {
        self.pool.is_destroyed()
    }

    /// `hipMallocFromPoolAsync`: `size` bytes usable by work queued on `stream`
    /// after this call (size 0 gives the null pointer).
    pub fn alloc_raw(&self, size: u64, stream: &Stream) -> Result<DevicePtr> {
        if size == 0 {
            return Ok(DevicePtr::NULL);
        }
        self.check_stream(stream)?;
        self.pool.alloc(size, stream)
    }

    /// Typed memory for `len` elements, freed in `stream`'s order when dropped.
    pub fn alloc<T: Pod>(&self, len: usize, stream: &Stream) -> Result<PoolBuffer<T>> {
        let bytes = (len as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| Error::OutOfMemory(format!("{len} elements overflow the address space")))?;
        let ptr = self.alloc_raw(bytes, stream)?;
        Ok(PoolBuffer { pool: self.pool.clone(), ptr, len, stream: stream.clone(), _t: PhantomData })
    }

    fn check_stream(&self, stream: &Stream) -> Result<()> {
        if stream.device() != self.pool.device() {
            return Err(Error::InvalidValue(format!(
                "the pool is on device {}, the stream on device {}",
                self.pool.device(),
                stream.device()
            )));
        }
        self.rt.check_own_stream(stream)
    }

    /// `hipMemPoolGetAttribute` (a driver pool's error reads as 0).
    pub fn attribute(&self, attr: PoolAttribute) -> u64 {
        self.try_attribute(attr).unwrap_or(0)
    }

    /// `hipMemPoolGetAttribute`, with the driver's error if it fails.
    pub fn try_attribute(&self, attr: PoolAttribute) -> Result<u64> {
        match &self.pool {
            PoolRef::Hipmem(c) => Ok(c.get_attribute(attr)),
            PoolRef::Driver(d) => d.get_attribute(attr),
            PoolRef::Imported(i) => Ok(match attr {
                PoolAttribute::ReservedMemCurrent | PoolAttribute::ReservedMemHigh => i.mapped_bytes(),
                PoolAttribute::UsedMemCurrent | PoolAttribute::UsedMemHigh => i.imported_bytes(),
                _ => 0,
            }),
        }
    }

    /// `hipMemPoolSetAttribute`: read-only statistics, or a High statistic set
    /// to anything but 0, are InvalidValue.
    pub fn set_attribute(&self, attr: PoolAttribute, value: u64) -> Result<()> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.set_attribute(attr, value),
            PoolRef::Driver(d) => d.set_attribute(attr, value),
            PoolRef::Imported(_) => {
                Err(Error::InvalidValue("the attributes of an imported pool belong to its exporter".into()))
            }
        }
    }

    /// The four statistics at once (zeros if a driver pool cannot be read).
    pub fn stats(&self) -> PoolStats {
        match &self.pool {
            PoolRef::Hipmem(c) => c.stats(),
            PoolRef::Driver(d) => d.stats().unwrap_or_default(),
            PoolRef::Imported(i) => PoolStats {
                reserved_current: i.mapped_bytes(),
                reserved_high: i.mapped_bytes(),
                used_current: i.imported_bytes(),
                used_high: i.imported_bytes(),
            },
        }
    }

    /// Sets the release threshold (`u64::MAX` keeps everything).
    pub fn set_release_threshold(&self, bytes: u64) {
        let _ = self.set_attribute(PoolAttribute::ReleaseThreshold, bytes);
    }

    /// `hipMemPoolTrimTo`: releases unused memory down to `keep` reserved bytes,
    /// never memory of live allocations or of frees the device has not completed.
    pub fn trim_to(&self, keep: u64) -> Result<()> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.trim_to(keep),
            PoolRef::Driver(d) => d.trim_to(keep),
            PoolRef::Imported(_) => Ok(()),
        }
    }

    /// `hipMemPoolSetAccess` for one device.
    pub fn set_access(&self, device: usize, flags: AccessFlags) -> Result<()> {
        self.rt.check_device(device)?;
        match &self.pool {
            PoolRef::Hipmem(c) => c.set_access(device, flags),
            PoolRef::Driver(d) => d.set_access(device, flags),
            PoolRef::Imported(i) => i.set_access(device, flags),
        }
    }

    /// `hipMemPoolGetAccess`: the pool's device reads ReadWrite, others None until set.
    pub fn access(&self, device: usize) -> Result<AccessFlags> {
        self.rt.check_device(device)?;
        match &self.pool {
            PoolRef::Hipmem(c) => c.access(device),
            PoolRef::Driver(d) => d.access(device),
            PoolRef::Imported(i) => i.access(device),
        }
    }

    /// Checks the placement invariants of a hipmem pool (for tests and debugging).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.check_invariants(),
            PoolRef::Driver(_) | PoolRef::Imported(_) => Ok(()),
        }
    }

    // ---- interprocess sharing ---------------------------------------------------------

    /// Whether this pool was imported from another process (it cannot allocate).
    pub fn is_imported(&self) -> bool {
        match &self.pool {
            PoolRef::Imported(_) => true,
            PoolRef::Driver(d) => d.is_imported(),
            PoolRef::Hipmem(_) => false,
        }
    }

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
            PoolRef::Hipmem(core) => ipc::export_pool(core),
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
            let imported = Arc::new(ImportedPool::import(rt, next_pool_id(), fd)?);
            rt.inner.pools.add_imported(&imported);
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
            let pool = rt.inner.pools.add_driver(&rt.inner, raw, props, true);
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

    fn import_pointer_sized(&self, data: &PtrExportData) -> Result<(DevicePtr, u64)> {
        match &self.pool {
            PoolRef::Imported(i) => i.import_pointer(data),
            PoolRef::Driver(d) if d.is_imported() => {
                if ipc::is_hipmem_ptr_data(data) {
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

    /// Frees a pointer imported into this pool (this process's mapping only).
    pub fn free_imported(&self, ptr: DevicePtr) -> Result<()> {
        match &self.pool {
            PoolRef::Imported(i) => i.free_pointer(ptr),
            PoolRef::Driver(d) if d.is_imported() => {
                self.rt.device_synchronize(d.raw.device)?;
                d.free(ptr, crate::backend::RawStream::null(d.raw.device))?;
                self.rt.device_synchronize(d.raw.device)
            }
            _ => Err(Error::InvalidValue("the pool is not an imported pool".into())),
        }
    }

    /// `hipMemPoolExportPointer` of a pointer of this pool.
    pub fn export_pointer(&self, ptr: DevicePtr) -> Result<PtrExportData> {
        let data = self.rt.mem_pool_export_pointer(ptr)?;
        let ours = match (&self.pool, self.rt.inner.allocations.find(ptr.0).map(|a| a.kind)) {
            (PoolRef::Hipmem(c), Some(crate::runtime::MemoryKind::PoolSegment(id))) => c.id == id,
            (PoolRef::Driver(d), Some(crate::runtime::MemoryKind::DriverPool(id))) => d.id == id,
            _ => false,
        };
        if !ours {
            return Err(Error::InvalidValue(format!("{ptr} is not an allocation of this pool")));
        }
        Ok(data)
    }
}

fn shareable(props: &PoolProps) -> bool {
    props.handle_types & handle_type::POSIX_FILE_DESCRIPTOR != 0
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

impl<T: Pod> crate::buffer::DeviceSlice<T> for ImportedBuffer<T> {
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

/// Memory for `len` elements of `T` from a pool, freed in the order of its
/// stream when dropped. [`PoolBuffer::free_on`] frees it on another stream.
pub struct PoolBuffer<T: Pod> {
    pool: PoolRef,
    ptr: DevicePtr,
    len: usize,
    stream: Stream,
    _t: PhantomData<T>,
}

impl<T: Pod> std::fmt::Debug for PoolBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PoolBuffer").field("ptr", &self.ptr).field("len", &self.len).finish()
    }
}

impl<T: Pod> PoolBuffer<T> {
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
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// `hipMemPoolExportPointer`: 64 bytes another process imports into its
    /// import of this buffer's pool ([`MemPool::import_pointer`]); the pool
    /// must have been created shareable. The data carries the buffer's length.
    pub fn export_pointer(&self) -> Result<PtrExportData> {
        match &self.pool {
            PoolRef::Hipmem(core) => {
                let (offset, size) = core.ipc_block(self.ptr)?;
                Ok(ipc::encode_ptr(ipc::PtrInfo {
                    uid: core.ipc_uid(),
                    offset,
                    size,
                    len: self.size_bytes(),
                }))
            }
            _ => self.stream.runtime().mem_pool_export_pointer(self.ptr),
        }
    }

    /// Frees the buffer in the order of `stream` instead of its own.
    pub fn free_on(mut self, stream: &Stream) -> Result<()> {
        let ptr = std::mem::replace(&mut self.ptr, DevicePtr::NULL);
        self.pool.free(ptr, stream)
    }
}

impl Stream {
    /// What the pool needs of this stream.
    pub(crate) fn pool_ref(&self) -> self::core::StreamRef<'_> {
        self::core::StreamRef {
            clock: &self.inner.clock,
            raw: self.inner.raw,
            primary: Some(&self.inner.primary_slot),
        }
    }
}

impl<T: Pod> crate::buffer::DeviceSlice<T> for PoolBuffer<T> {
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

/// A device's current pool and the owner that keeps it alive.
type CurrentPool = (PoolRef, Weak<PoolOwner>);

/// The runtime's table of pools: every pool by id, each device's default and
/// current pool.
#[derive(Default)]
pub(crate) struct PoolTable {
    pools: Mutex<HashMap<u64, Arc<PoolCore>>>,
    drivers: Mutex<HashMap<u64, Arc<DriverPool>>>,
    /// The default pool of each device, made on first use (read without a
    /// lock by every `hipMallocAsync` that uses it).
    defaults: Vec<OnceLock<Arc<PoolCore>>>,
    driver_defaults: Mutex<HashMap<usize, Arc<DriverPool>>>,
    imported: Mutex<HashMap<u64, Weak<ImportedPool>>>,
    current: Mutex<HashMap<usize, CurrentPool>>,
    current_ids: Vec<AtomicU64>,
}

/// Ids of pools of both kinds, unique in the process (the thread-local slot
/// tables key on them).
fn next_pool_id() -> u64 {
    static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);
    NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed)
}

impl PoolTable {
    pub(crate) fn new(devices: usize) -> PoolTable {
        PoolTable {
            defaults: (0..devices).map(|_| OnceLock::new()).collect(),
            current_ids: (0..devices).map(|_| AtomicU64::new(0)).collect(),
            ..Default::default()
        }
    }

    fn create(
        &self,
        rt: &Arc<RuntimeInner>,
        props: PoolProps,
        is_default: bool,
        backing: Option<PoolBacking>,
    ) -> Arc<PoolCore> {
        let id = next_pool_id();
        let core = Arc::new(PoolCore::new(rt, id, props.device, props, is_default, backing));
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Arc::clone(&core));
        core
    }

    fn add_driver(
        &self,
        rt: &Arc<RuntimeInner>,
        raw: RawPool,
        props: PoolProps,
        owned: bool,
    ) -> Arc<DriverPool> {
        let pool = Arc::new(DriverPool::new(rt, next_pool_id(), raw, props, owned));
        self.drivers.lock().unwrap_or_else(|p| p.into_inner()).insert(pool.id, Arc::clone(&pool));
        pool
    }

    fn driver_default(&self, rt: &Arc<RuntimeInner>, device: usize) -> Result<Arc<DriverPool>> {
        let mut defaults = self.driver_defaults.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = defaults.get(&device) {
            return Ok(Arc::clone(p));
        }
        let raw = rt.backend.driver_pool_default(device)?;
        let pool = self.add_driver(rt, raw, PoolProps { device, handle_types: 0, max_size: 0 }, false);
        defaults.insert(device, Arc::clone(&pool));
        Ok(pool)
    }

    fn add_imported(&self, pool: &Arc<ImportedPool>) {
        let mut imported = self.imported.lock().unwrap_or_else(|p| p.into_inner());
        imported.retain(|_, w| w.strong_count() > 0);
        imported.insert(pool.id, Arc::downgrade(pool));
    }

    /// The imported pool whose reservation holds `ptr`.
    pub(crate) fn imported_containing(&self, ptr: DevicePtr) -> Option<Arc<ImportedPool>> {
        let imported = self.imported.lock().unwrap_or_else(|p| p.into_inner());
        imported.values().filter_map(Weak::upgrade).find(|p| p.contains(ptr))
    }

    /// A driver pool by id.
    pub(crate) fn get_driver(&self, id: u64) -> Option<Arc<DriverPool>> {
        self.drivers.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// The default pool of `device`, created on first use.
    pub(crate) fn default_pool(&self, rt: &Arc<RuntimeInner>, device: usize) -> Arc<PoolCore> {
        let make = || self.create(rt, PoolProps { device, handle_types: 0, max_size: 0 }, true, None);
        match self.defaults.get(device) {
            Some(cell) => Arc::clone(cell.get_or_init(make)),
            // Callers check the device first; an unchecked one gets a pool
            // of its own rather than a panic.
            None => make(),
        }
    }

    /// The id of `device`'s current pool (0: the default pool).
    pub(crate) fn current_id(&self, device: usize) -> u64 {
        self.current_ids.get(device).map(|c| c.load(Ordering::Acquire)).unwrap_or(0)
    }

    pub(crate) fn get(&self, id: u64) -> Option<Arc<PoolCore>> {
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// Every pool of `device` that is not destroyed.
    pub(crate) fn hipmem_pools_of(&self, device: usize) -> Vec<Arc<PoolCore>> {
        self.pools
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|p| p.device == device)
            .cloned()
            .collect()
    }

    fn destroy(&self, pool: &PoolRef) {
        if pool.is_destroyed() {
            return;
        }
        match pool {
            PoolRef::Hipmem(core) => {
                if core.is_default {
                    return;
                }
                core.destroy();
                stream_cache::forget_pool(core.id);
            }
            PoolRef::Imported(i) => i.destroy(),
            PoolRef::Driver(d) => {
                if !d.owned {
                    return;
                }
                if let Err(e) = d.destroy() {
                    tracing::warn!(target: "hipmem", "destroying a driver memory pool failed: {e}");
                }
            }
        }
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if current.get(&pool.device()).is_some_and(|(c, _)| c.same(pool)) {
            current.remove(&pool.device());
            self.current_ids[pool.device()].store(0, Ordering::Release);
        }
    }
}

impl Runtime {
    /// `hipDeviceGetDefaultMemPool`.
    pub fn default_mem_pool(&self, device: usize) -> Result<MemPool> {
        self.check_device(device)?;
        let core = self.inner.pools.default_pool(&self.inner, device);
        Ok(MemPool { pool: PoolRef::Hipmem(core), owner: None, rt: self.clone() })
    }

    /// `hipDeviceGetMemPool`: the pool `hipMallocAsync` uses on `device`.
    pub fn mem_pool(&self, device: usize) -> Result<MemPool> {
        self.check_device(device)?;
        let current =
            self.inner.pools.current.lock().unwrap_or_else(|p| p.into_inner()).get(&device).cloned();
        if let Some((pool, owner)) = current {
            if let Some(owner) = owner.upgrade() {
                return Ok(MemPool { pool, owner: Some(owner), rt: self.clone() });
            }
            if let PoolRef::Driver(d) = &pool {
                if !d.owned {
                    return Ok(MemPool { pool, owner: None, rt: self.clone() });
                }
            }
        }
        self.default_mem_pool(device)
    }

    /// `hipDeviceSetMemPool`: makes `pool` the one `hipMallocAsync` uses on
    /// `device` (which must be the pool's device).
    pub fn set_mem_pool(&self, device: usize, pool: &MemPool) -> Result<()> {
        self.check_device(device)?;
        if pool.device() != device {
            return Err(Error::InvalidDevice(format!(
                "the pool belongs to device {}, not device {device}",
                pool.device()
            )));
        }
        if pool.is_destroyed() {
            return Err(Error::InvalidValue("the pool was destroyed".into()));
        }
        let mut current = self.inner.pools.current.lock().unwrap_or_else(|p| p.into_inner());
        if pool.is_default() && !pool.is_driver_pool() {
            current.remove(&device);
            self.inner.pools.current_ids[device].store(0, Ordering::Release);
        } else {
            let owner = pool.owner.as_ref().map(Arc::downgrade).unwrap_or_default();
            current.insert(device, (pool.pool.clone(), owner));
            self.inner.pools.current_ids[device].store(pool.pool.id(), Ordering::Release);
        }
        Ok(())
    }

    fn check_own_stream(&self, stream: &Stream) -> Result<()> {
        if stream.runtime().ptr_eq(self) {
            Ok(())
        } else {
            Err(Error::InvalidHandle("the stream belongs to another runtime".into()))
        }
    }

    /// `hipMallocAsync`: `size` bytes from the current pool of the stream's
    /// device, usable by work queued on `stream` after this call.
    pub fn malloc_async(&self, size: u64, stream: &Stream) -> Result<DevicePtr> {
        if size == 0 {
            return Ok(DevicePtr::NULL);
        }
        self.check_own_stream(stream)?;
        let device = stream.device();
        let id = self.inner.pools.current_id(device);
        if id != 0 {
            if let Some(c) = self.inner.pools.get(id).filter(|c| !c.is_destroyed()) {
                return c.alloc(size, &stream.pool_ref());
            }
            if let Some(d) = self.inner.pools.get_driver(id).filter(|d| !d.is_destroyed()) {
                return d.alloc(size, stream.raw());
            }
        }
        self.inner.pools.default_pool(&self.inner, device).alloc(size, &stream.pool_ref())
    }

    /// `hipMemPoolExportPointer`: the export data of a pointer of a shareable
    /// pool (the start of a live allocation). Anything else is InvalidValue.
    pub fn mem_pool_export_pointer(&self, ptr: DevicePtr) -> Result<PtrExportData> {
        if ptr.is_null() {
            return Err(Error::InvalidValue("hipMemPoolExportPointer of a null pointer".into()));
        }
        match self.allocations().find(ptr.0).map(|a| a.kind) {
            Some(crate::runtime::MemoryKind::PoolSegment(id)) => {
                let core = self.inner.pools.get(id).ok_or_else(|| {
                    Error::InvalidValue(format!("{ptr} belongs to a pool that no longer exists"))
                })?;
                let (offset, size) = core.ipc_block(ptr)?;
                Ok(ipc::encode_ptr(ipc::PtrInfo { uid: core.ipc_uid(), offset, size, len: size }))
            }
            Some(crate::runtime::MemoryKind::DriverPool(_)) => {
                Ok(PtrExportData { reserved: self.backend().driver_pool_export_pointer(ptr)? })
            }
            _ => Err(Error::InvalidValue(format!("{ptr} is not an allocation of a memory pool"))),
        }
    }

    /// Frees `ptr` if it was imported into an imported pool (Some), else None.
    pub(crate) fn free_if_imported(&self, ptr: DevicePtr) -> Option<Result<()>> {
        let pool = self.inner.pools.imported_containing(ptr)?;
        Some(pool.free_pointer(ptr))
    }

    /// `hipFreeAsync`: frees pool memory in `stream`'s order. A pointer from
    /// `hipMalloc` is accepted and freed at once (synchronously); null, an
    /// unknown pointer or a double free is InvalidValue.
    pub fn free_async(&self, ptr: DevicePtr, stream: &Stream) -> Result<()> {
        if ptr.is_null() {
            return Err(Error::InvalidValue("hipFreeAsync of a null pointer".into()));
        }
        self.check_own_stream(stream)?;
        // Fast path: the slot this thread used last on this stream; only
        // that stream's own lock is taken. (Memory that is not a pool block,
        // such as a mapping of an imported pool, is never in a slot.)
        let fast = stream_cache::with_recent_slot_of_stream(stream.id(), |slot| {
            (slot.pool_id, slot.free_fast(ptr.0), slot.pool_alive())
        });
        match fast {
            Some((_, stream_cache::FastFree::Done, true)) => return Ok(()),
            None | Some((_, stream_cache::FastFree::NotHere, _)) => {}
            Some((pool, done, _)) => {
                let evicted = match done {
                    stream_cache::FastFree::Evicted(b) => Some(b),
                    _ => None,
                };
                if let Some(core) = self.inner.pools.get(pool) {
                    core.after_free(&core.slot_for(&stream.pool_ref()), evicted);
                }
                return Ok(());
            }
        }
        match self.allocations().find(ptr.0) {
            Some(a) => match a.kind {
                crate::runtime::MemoryKind::PoolSegment(id) => {
                    let core = self.inner.pools.get(id).ok_or_else(|| {
                        Error::InvalidValue(format!("{ptr} belongs to a pool that no longer exists"))
                    })?;
                    if core.free(ptr, &stream.pool_ref()) {
                        Ok(())
                    } else {
                        Err(Error::InvalidValue(format!(
                            "{ptr} is not a live pool allocation (double free?)"
                        )))
                    }
                }
                crate::runtime::MemoryKind::DriverPool(id) => {
                    let pool = self.inner.pools.get_driver(id).ok_or_else(|| {
                        Error::InvalidValue(format!("{ptr} belongs to a pool that no longer exists"))
                    })?;
                    pool.free(ptr, stream.raw())
                }
                crate::runtime::MemoryKind::VmmMapping => {
                    stream.synchronize()?;
                    match self.free_if_imported(ptr) {
                        Some(r) => r,
                        None => self.free(ptr),
                    }
                }
                _ => self.free(ptr),
            },
            None => Err(Error::InvalidValue(format!(
                "{ptr} is not a live hipmem allocation (never allocated, already freed, or host memory)"
            ))),
        }
    }
}
