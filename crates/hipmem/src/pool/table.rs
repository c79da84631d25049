//! The runtime's table of pools (the pool subsystem's state): every pool by
//! id, each device's default and current pool, the imported pools; and the
//! stream-ordered allocation functions that use it (`hipMallocAsync`,
//! `hipDeviceGetDefaultMemPool`, `hipDeviceSetMemPool`, ...).
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use super::core::{PoolCore, StreamRef};
use super::driver_pool::DriverPool;
use super::imported::ImportedPool;
use super::mem_pool::{MemPool, PoolOwner, PoolRef};
use super::{AccessFlags, PoolBacking, PoolProps, stream_cache};
use crate::backend::{DevicePtr, RawPool};
use crate::error::{Error, Result};
use crate::runtime::{Allocation, CoreHooks, CoreStream, Device, ExtensionKey, MemoryKind, Runtime};

/// A device's current pool and the owner that keeps it alive.
type CurrentPool = (PoolRef, Weak<PoolOwner>);

/// The runtime's table of pools: every pool by id, each device's default and
/// current pool.
#[derive(Default)]
pub(crate) struct PoolTable {
    /// What every `hipMallocAsync` reads of each device, a line each.
    devices: Box<[DeviceEntry]>,
    pools: Mutex<HashMap<u64, Arc<PoolCore>>>,
    drivers: Mutex<HashMap<u64, Arc<DriverPool>>>,
    driver_defaults: Mutex<HashMap<usize, Arc<DriverPool>>>,
    imported: Mutex<HashMap<u64, Weak<dyn ImportedPool>>>,
    current: Mutex<HashMap<usize, CurrentPool>>,
}

/// A device's current pool and its default pool, in one cache line (an
/// allocation reads both; as two vectors they were two lines, and in a
/// framework's step both are evicted between calls).
#[repr(align(64))]
struct DeviceEntry {
    /// The id of the pool `hipMallocAsync` uses (0: the default pool).
    current: AtomicU64,
    /// The default pool, made on first use (read without a lock).
    default: OnceLock<Arc<PoolCore>>,
}

/// Ids of pools of both kinds, unique in the process (the thread-local slot
/// tables key on them).
pub(crate) fn next_pool_id() -> u64 {
    static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);
    NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed)
}

/// The pool subsystem's state in a runtime.
static POOLS: ExtensionKey<PoolTable> = ExtensionKey::new("memory pools");

/// The runtime's table of pools, made (and its hooks registered) on first use.
pub(crate) fn table(rt: &Runtime) -> &PoolTable {
    rt.extension(&POOLS, |rt| {
        let table = Arc::new(PoolTable::new(rt.device_count()));
        rt.add_hooks(Arc::clone(&table) as Arc<dyn CoreHooks>);
        table
    })
}

/// The pool table if any pool was ever used (hooks of a runtime without
/// pools have nothing to do).
pub(crate) fn table_if_made(rt: &Runtime) -> Option<&PoolTable> {
    rt.extension_if_made(&POOLS)
}

/// A stream of another runtime is InvalidHandle.
#[inline]
pub(crate) fn check_own_stream(rt: &Runtime, stream: &CoreStream) -> Result<()> {
    if stream.runtime().ptr_eq(rt) {
        Ok(())
    } else {
        Err(Error::InvalidHandle("the stream belongs to another runtime".into()))
    }
}

/// What a synchronization means for the pools: pending frees complete, the
/// release threshold applies; what a retiring stream leaves; where a pool
/// block is, for range checks.
impl CoreHooks for PoolTable {
    fn stream_synchronized(&self, rt: &Runtime, device: usize, stream: u64) {
        for pool in self.hipmem_pools_of(device) {
            pool.on_stream_synchronized(rt, stream);
        }
    }

    fn device_synchronized(&self, rt: &Runtime, device: usize) {
        for pool in self.hipmem_pools_of(device) {
            pool.on_device_synchronized(rt);
        }
    }

    fn stream_retiring(&self, rt: &Runtime, device: usize, stream: u64) {
        for pool in self.hipmem_pools_of(device) {
            pool.retire_stream(rt, stream);
        }
    }

    fn check_range(
        &self,
        _rt: &Runtime,
        a: &Allocation,
        ptr: DevicePtr,
        len: u64,
        what: &str,
    ) -> Option<Result<Allocation>> {
        let MemoryKind::PoolSegment(pool) = a.kind else { return None };
        let block = self.get(pool).and_then(|c| c.block_containing(ptr.0));
        let Some((base, size)) = block else {
            return Some(Err(Error::InvalidValue(format!(
                "{what} {ptr} is pool memory that is not allocated"
            ))));
        };
        let end = ptr.0.saturating_add(len);
        if end > base + size {
            return Some(Err(Error::InvalidValue(format!(
                "{what}: {len} bytes at {ptr} run {} bytes past the end of the {size}-byte pool block at {base:#x}",
                end - (base + size),
            ))));
        }
        Some(Ok(Allocation { base: DevicePtr(base), size, kind: a.kind, device: a.device }))
    }

    fn device_access(
        &self,
        rt: &Runtime,
        device: usize,
        a: &Allocation,
        ptr: DevicePtr,
    ) -> Option<Result<AccessFlags>> {
        super::peer_access::device_access(self, rt, device, a, ptr)
    }
}

impl PoolTable {
    fn new(devices: usize) -> PoolTable {
        PoolTable {
            devices: (0..devices)
                .map(|_| DeviceEntry { current: AtomicU64::new(0), default: OnceLock::new() })
                .collect(),
            ..Default::default()
        }
    }

    pub(crate) fn create(
        &self,
        rt: &Runtime,
        props: PoolProps,
        is_default: bool,
        backing: Option<PoolBacking>,
    ) -> Arc<PoolCore> {
        let id = next_pool_id();
        let core = Arc::new(PoolCore::new(rt, id, props.device, props, is_default, backing));
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).insert(id, Arc::clone(&core));
        core
    }

    pub(crate) fn add_driver(
        &self,
        rt: &Runtime,
        raw: RawPool,
        props: PoolProps,
        owned: bool,
    ) -> Arc<DriverPool> {
        let pool = Arc::new(DriverPool::new(rt, next_pool_id(), raw, props, owned));
        self.drivers.lock().unwrap_or_else(|p| p.into_inner()).insert(pool.id, Arc::clone(&pool));
        pool
    }

    pub(crate) fn driver_default(&self, rt: &Runtime, device: usize) -> Result<Arc<DriverPool>> {
        let mut defaults = self.driver_defaults.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = defaults.get(&device) {
            return Ok(Arc::clone(p));
        }
        let raw = rt.backend().driver_pool_default(device)?;
        let pool = self.add_driver(rt, raw, PoolProps { device, handle_types: 0, max_size: 0 }, false);
        defaults.insert(device, Arc::clone(&pool));
        Ok(pool)
    }

    pub(crate) fn add_imported(&self, pool: Arc<dyn ImportedPool>) {
        let mut imported = self.imported.lock().unwrap_or_else(|p| p.into_inner());
        imported.retain(|_, w| w.strong_count() > 0);
        imported.insert(pool.id(), Arc::downgrade(&pool));
    }

    /// The imported pool whose reservation holds `ptr`.
    pub(crate) fn imported_containing(&self, ptr: DevicePtr) -> Option<Arc<dyn ImportedPool>> {
        let imported = self.imported.lock().unwrap_or_else(|p| p.into_inner());
        imported.values().filter_map(Weak::upgrade).find(|p| p.contains(ptr))
    }

    /// A driver pool by id.
    pub(crate) fn get_driver(&self, id: u64) -> Option<Arc<DriverPool>> {
        self.drivers.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// The default pool of `device`, created on first use.
    pub(crate) fn default_pool(&self, rt: &Runtime, device: usize) -> Arc<PoolCore> {
        let make = || self.create(rt, PoolProps { device, handle_types: 0, max_size: 0 }, true, None);
        match self.devices.get(device).map(|d| &d.default) {
            Some(cell) => Arc::clone(cell.get_or_init(make)),
            // Callers check the device first; an unchecked one gets a pool
            // of its own rather than a panic.
            None => make(),
        }
    }

    /// The id of `device`'s current pool (0: the default pool).
    pub(crate) fn current_id(&self, device: usize) -> u64 {
        self.devices.get(device).map(|d| d.current.load(Ordering::Acquire)).unwrap_or(0)
    }

    /// Forgets the hipmem pool `id` (a destroyed pool that holds nothing:
    /// [`PoolCore`]'s `leave_table_if_empty`).
    pub(crate) fn forget(&self, id: u64) {
        self.pools.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    }

    /// A hipmem pool by id. The devices' default pools (what `hipMallocAsync`
    /// uses unless told otherwise) are found without the table's lock.
    pub(crate) fn get(&self, id: u64) -> Option<Arc<PoolCore>> {
        if let Some(p) = self.devices.iter().filter_map(|d| d.default.get()).find(|p| p.id == id) {
            return Some(Arc::clone(p));
        }
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

    pub(crate) fn destroy(&self, pool: &PoolRef) {
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
            self.devices[pool.device()].current.store(0, Ordering::Release);
        }
    }
}

impl Runtime {
    /// `hipDeviceGetDefaultMemPool`.
    pub fn default_mem_pool(&self, device: usize) -> Result<MemPool> {
        self.check_device(device)?;
        let core = table(self).default_pool(self, device);
        Ok(MemPool { pool: PoolRef::Hipmem(core), owner: None, rt: self.clone() })
    }

    /// `hipDeviceGetMemPool`: the pool `hipMallocAsync` uses on `device`.
    pub fn mem_pool(&self, device: usize) -> Result<MemPool> {
        self.check_device(device)?;
        let current = table(self).current.lock().unwrap_or_else(|p| p.into_inner()).get(&device).cloned();
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
        let mut current = table(self).current.lock().unwrap_or_else(|p| p.into_inner());
        if pool.is_default() && !pool.is_driver_pool() {
            current.remove(&device);
            table(self).devices[device].current.store(0, Ordering::Release);
        } else {
            let owner = pool.owner.as_ref().map(Arc::downgrade).unwrap_or_default();
            current.insert(device, (pool.pool.clone(), owner));
            table(self).devices[device].current.store(pool.pool.id(), Ordering::Release);
        }
        Ok(())
    }

    /// `hipMallocAsync`: `size` bytes from the current pool of the stream's
    /// device, usable by work queued on `stream` after this call.
    pub fn malloc_async(&self, size: u64, stream: &CoreStream) -> Result<DevicePtr> {
        if size == 0 {
            return Ok(DevicePtr::NULL);
        }
        check_own_stream(self, stream)?;
        let device = stream.device();
        let pools = table(self);
        let id = pools.current_id(device);
        let default = pools.devices.get(device).and_then(|d| d.default.get());
        if let Some(pool) = default.filter(|p| id == 0 || p.id == id) {
            // The common case: the device's default pool, no reference count
            // touched.
            return pool.alloc(size, &StreamRef::of(stream));
        }
        if id != 0 {
            if let Some(c) = pools.get(id).filter(|c| !c.is_destroyed()) {
                return c.alloc(size, &StreamRef::of(stream));
            }
            if let Some(d) = pools.get_driver(id).filter(|d| !d.is_destroyed()) {
                return d.alloc(size, stream.raw());
            }
        }
        match default {
            Some(pool) => pool.alloc(size, &StreamRef::of(stream)),
            None => pools.default_pool(self, device).alloc(size, &StreamRef::of(stream)),
        }
    }
}

impl Device {
    /// The device's default memory pool (`hipDeviceGetDefaultMemPool`).
    pub fn default_mem_pool(&self) -> Result<MemPool> {
        self.runtime().default_mem_pool(self.ordinal())
    }

    /// The pool `hipMallocAsync` uses on this device (`hipDeviceGetMemPool`).
    pub fn mem_pool(&self) -> Result<MemPool> {
        self.runtime().mem_pool(self.ordinal())
    }

    /// Makes `pool` the one `hipMallocAsync` uses here (`hipDeviceSetMemPool`).
    pub fn set_mem_pool(&self, pool: &MemPool) -> Result<()> {
        self.runtime().set_mem_pool(self.ordinal(), pool)
    }

    /// A new hipmem memory pool on this device (`hipMemPoolCreate`).
    pub fn create_mem_pool(&self, handle_types: u32, max_size: u64) -> Result<MemPool> {
        MemPool::create(self.runtime(), PoolProps { device: self.ordinal(), handle_types, max_size })
    }
}
