//! The runtime layer: a backend plus hipmem's registries and HIP's checks.
//!
//! [`Runtime`] owns the backend, the device registry (properties read once),
//! the registry of every live allocation and the log of errors raised in
//! `Drop`. Its methods are HIP's functions with HIP's argument rules (size 0,
//! null pointers, ranges past an allocation's end, unknown copy kinds), on
//! typed arguments: device memory as [`DevicePtr`], host memory as slices or
//! [`HostSpan`]s. The safe API and the C ABI are built on it.
#![forbid(unsafe_code)]

pub mod ordering;
pub mod registry;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use crate::backend::host::HostConfig;
use crate::backend::{
    self, Backend, BackendChoice, BackendKind, CopyDirection, DeviceProperties, DevicePtr, EventFlags,
    FillValue, HostSpan, MemInfo, RawEvent, RawStream,
};
use crate::error::{DropErrors, Error, Result};
use crate::pool::PoolTable;
use ordering::StreamClock;
pub use registry::{Allocation, AllocationRegistry, MemoryKind};

/// `hipMemcpyKind`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MemcpyKind {
    /// `hipMemcpyHostToHost` (0).
    HostToHost,
    /// `hipMemcpyHostToDevice` (1).
    HostToDevice,
    /// `hipMemcpyDeviceToHost` (2).
    DeviceToHost,
    /// `hipMemcpyDeviceToDevice` (3).
    DeviceToDevice,
    /// `hipMemcpyDefault` (4): inferred from the pointers.
    Default,
}

impl MemcpyKind {
    /// Parses the numeric kind; anything else is InvalidMemcpyDirection.
    pub fn from_raw(kind: i32) -> Result<MemcpyKind> {
        Ok(match kind {
            0 => MemcpyKind::HostToHost,
            1 => MemcpyKind::HostToDevice,
            2 => MemcpyKind::DeviceToHost,
            3 => MemcpyKind::DeviceToDevice,
            4 => MemcpyKind::Default,
            other => {
                return Err(Error::InvalidMemcpyDirection(format!(
                    "{other} is not a hipMemcpyKind (0 to 4)"
                )));
            }
        })
    }

    /// The numeric value.
    pub fn raw(&self) -> i32 {
        match self {
            MemcpyKind::HostToHost => 0,
            MemcpyKind::HostToDevice => 1,
            MemcpyKind::DeviceToHost => 2,
            MemcpyKind::DeviceToDevice => 3,
            MemcpyKind::Default => 4,
        }
    }
}

/// Where a copy's two sides live, as classified by the registry.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ResolvedCopy {
    /// Zero bytes: nothing to do (checked before anything else).
    Nothing,
    /// Both sides are host memory hipmem does not manage: a plain memcpy.
    HostToHost,
    /// A backend copy in this direction.
    Backend(CopyDirection),
}

/// `hipMemoryType` as `hipPointerGetAttributes` reports it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum MemoryType {
    /// `hipMemoryTypeUnregistered` (0): memory hipmem knows nothing about.
    Unregistered,
    /// `hipMemoryTypeHost` (1): page-locked host memory.
    Host,
    /// `hipMemoryTypeDevice` (2): device memory.
    Device,
    /// `hipMemoryTypeManaged` (3): managed memory.
    Managed,
}

impl MemoryType {
    /// The numeric `hipMemoryType` value.
    pub fn raw(&self) -> i32 {
        match self {
            MemoryType::Unregistered => 0,
            MemoryType::Host => 1,
            MemoryType::Device => 2,
            MemoryType::Managed => 3,
        }
    }
}

/// What `hipPointerGetAttributes` says of a pointer.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PointerAttributes {
    /// Kind of memory.
    pub memory_type: MemoryType,
    /// Device ordinal (-2, `hipInvalidDeviceId`, for unregistered memory).
    pub device: i32,
    /// The device-side address (null for unregistered memory).
    pub device_pointer: DevicePtr,
    /// The host-side address, where the host can address the memory.
    pub host_pointer: Option<u64>,
    /// Whether it is managed memory.
    pub is_managed: bool,
    /// Flags the memory was allocated with.
    pub allocation_flags: u32,
    /// The allocation that contains the pointer, if hipmem made it.
    pub allocation: Option<Allocation>,
}

/// The state shared by every handle of one runtime.
pub(crate) struct RuntimeInner {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) devices: Vec<DeviceProperties>,
    pub(crate) allocations: AllocationRegistry,
    pub(crate) drop_errors: DropErrors,
    pub(crate) streams: Mutex<HashMap<u64, Weak<crate::stream::StreamInner>>>,
    pub(crate) pools: PoolTable,
    /// The clock of each device's legacy null stream.
    pub(crate) null_clocks: Vec<Arc<StreamClock>>,
    /// Events hipmem records for itself (markers), per device, for reuse.
    pub(crate) event_pool: Vec<Mutex<Vec<RawEvent>>>,
    /// Page-locked memory: raw allocations, the staging pool.
    pub(crate) pinned: crate::pinned::PinnedState,
    /// Handles, reservations and mappings of virtual memory management.
    pub(crate) vmm: crate::vmm::VmmTable,
    /// Managed memory: raw allocations (`hipMallocManaged`).
    pub(crate) managed: crate::managed::ManagedState,
}

impl RuntimeInner {
    /// Records a marker event (from the event pool) at the current end of a
    /// stream; returns the point's tag and the event.
    pub(crate) fn record_marker(&self, clock: &Arc<StreamClock>, raw: RawStream) -> Result<(u64, RawEvent)> {
        let event = self.pooled_event(raw.device)?;
        let tag = clock.advance();
        if let Err(e) = self.backend.event_record(event, raw) {
            self.recycle_events(raw.device, vec![event]);
            return Err(e);
        }
        clock.add_marker(tag, event);
        Ok((tag, event))
    }

    /// An event from the event pool (timing disabled), or a new one.
    pub(crate) fn pooled_event(&self, device: usize) -> Result<RawEvent> {
        let pooled =
            self.event_pool.get(device).and_then(|p| p.lock().unwrap_or_else(|e| e.into_inner()).pop());
        match pooled {
            Some(e) => Ok(e),
            None => {
                self.backend.event_create(device, EventFlags { disable_timing: true, ..Default::default() })
            }
        }
    }

    /// Returns marker events to the event pool.
    pub(crate) fn recycle_events(&self, device: usize, events: Vec<RawEvent>) {
        if events.is_empty() {
            return;
        }
        if let Some(pool) = self.event_pool.get(device) {
            pool.lock().unwrap_or_else(|e| e.into_inner()).extend(events);
        }
    }

    /// Every live stream clock of `device`, the null stream's included.
    pub(crate) fn clocks_of(&self, device: usize) -> Vec<(Arc<StreamClock>, RawStream)> {
        let mut clocks = vec![(Arc::clone(&self.null_clocks[device]), RawStream::null(device))];
        // Upgrade under the lock, but let the upgraded handles go only after
        // it is released: dropping the last one destroys the stream, and
        // that takes the same lock.
        let live: Vec<Arc<crate::stream::StreamInner>> = {
            let streams = self.streams.lock().unwrap_or_else(|p| p.into_inner());
            streams.values().filter_map(|w| w.upgrade()).collect()
        };
        for s in &live {
            if s.raw.device == device {
                clocks.push((Arc::clone(&s.clock), s.raw));
            }
        }
        drop(live);
        clocks
    }

    /// After a stream synchronization: its frees are complete.
    pub(crate) fn after_stream_synchronized(&self, device: usize, stream: u64) {
        for pool in self.pools.hipmem_pools_of(device) {
            pool.on_stream_synchronized(self, stream);
        }
    }

    /// After a device synchronization: every free on the device is complete.
    pub(crate) fn after_device_synchronized(&self, device: usize) {
        for pool in self.pools.hipmem_pools_of(device) {
            pool.on_device_synchronized(self);
        }
    }
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        for (device, pool) in self.event_pool.iter().enumerate() {
            for event in pool.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                if let Err(e) = self.backend.event_destroy(event) {
                    tracing::debug!(target: "hipmem", "destroying a pooled event of device {device}: {e}");
                }
            }
        }
    }
}

impl std::fmt::Debug for RuntimeInner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("backend", &self.backend.kind())
            .field("devices", &self.devices.len())
            .field("live_allocations", &self.allocations.len())
            .finish()
    }
}

/// A backend with hipmem's registries around it. Cheap to clone; every clone
/// is the same runtime.
#[derive(Clone, Debug)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

/// Builds a [`Runtime`] with a chosen backend and emulation settings.
#[derive(Clone, Debug, Default)]
pub struct RuntimeBuilder {
    choice: Option<BackendChoice>,
    host: Option<HostConfig>,
    host_devices: Option<usize>,
}

impl RuntimeBuilder {
    /// Uses this backend instead of `HIPMEM_BACKEND`.
    pub fn backend(mut self, choice: BackendChoice) -> Self {
        self.choice = Some(choice);
        self
    }

    /// Uses this emulation configuration instead of the `HIPMEM_HOST_*` variables.
    pub fn host_config(mut self, config: HostConfig) -> Self {
        self.host = Some(config);
        self
    }

    /// Emulates this many devices unless `HIPMEM_HOST_DEVICES` says otherwise.
    pub fn default_host_devices(mut self, devices: usize) -> Self {
        self.host_devices = Some(devices);
        self
    }

    /// Opens the backend and reads the devices.
    pub fn build(self) -> Result<Runtime> {
        let choice = match self.choice {
            Some(c) => c,
            None => backend_choice_from_env()?,
        };
        let host = match self.host {
            Some(h) => h,
            None => {
                let mut h = HostConfig::from_env()?;
                if let (Some(n), Err(_)) = (self.host_devices, std::env::var("HIPMEM_HOST_DEVICES")) {
                    h.devices = n;
                }
                h
            }
        };
        Runtime::with_backend(backend::open(choice, host)?)
    }
}

/// Reads `HIPMEM_BACKEND` (unset means auto).
pub fn backend_choice_from_env() -> Result<BackendChoice> {
    match std::env::var("HIPMEM_BACKEND") {
        Ok(v) => v.parse().map_err(|e: Error| e.context("HIPMEM_BACKEND")),
        Err(_) => Ok(BackendChoice::Auto),
    }
}

static GLOBAL: OnceLock<Result<Runtime>> = OnceLock::new();

/// Ids of streams (and their clocks), unique in the process.
fn next_process_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Runtime {
    /// A builder.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// Opens the backend `choice` (emulation settings from the environment).
    pub fn new(choice: BackendChoice) -> Result<Runtime> {
        Runtime::builder().backend(choice).build()
    }

    /// Opens the backend named by `HIPMEM_BACKEND` (auto when unset).
    pub fn from_env() -> Result<Runtime> {
        Runtime::builder().build()
    }

    /// The process-wide runtime, opened from the environment on first use
    /// (what the C ABI and the free functions use).
    pub fn global() -> Result<Runtime> {
        GLOBAL.get_or_init(Runtime::from_env).clone()
    }

    /// The process-wide runtime: the one already open, or the one `open`
    /// makes now (instead of reading the environment) if none is. What
    /// libhipmem's `hipmemSetInnerBackend` uses to pick its backend before
    /// first use.
    pub fn global_or_open_with(open: impl FnOnce() -> Result<Runtime>) -> Result<Runtime> {
        GLOBAL.get_or_init(open).clone()
    }

    /// Whether `self` and `other` are handles of the same runtime.
    pub fn ptr_eq(&self, other: &Runtime) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Wraps an opened backend.
    pub fn with_backend(backend: Arc<dyn Backend>) -> Result<Runtime> {
        let devices =
            (0..backend.device_count()).map(|d| backend.device_properties(d)).collect::<Result<Vec<_>>>()?;
        let null_clocks = (0..devices.len()).map(|_| Arc::new(StreamClock::new(next_process_id()))).collect();
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                pools: PoolTable::new(devices.len()),
                event_pool: (0..devices.len()).map(|_| Mutex::new(Vec::new())).collect(),
                backend,
                devices,
                allocations: AllocationRegistry::default(),
                drop_errors: DropErrors::default(),
                streams: Mutex::new(HashMap::new()),
                null_clocks,
                pinned: Default::default(),
                vmm: crate::vmm::VmmTable::default(),
                managed: Default::default(),
            }),
        })
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Which backend this is.
    pub fn backend_kind(&self) -> BackendKind {
        self.inner.backend.kind()
    }

    /// Number of devices (`hipGetDeviceCount`).
    pub fn device_count(&self) -> usize {
        self.inner.devices.len()
    }

    /// Properties of `device` as read when the runtime opened.
    pub fn device_properties(&self, device: usize) -> Result<&DeviceProperties> {
        self.inner.devices.get(device).ok_or_else(|| {
            Error::InvalidDevice(format!(
                "device {device} does not exist ({} device(s) on the {} backend)",
                self.inner.devices.len(),
                self.inner.backend.kind()
            ))
        })
    }

    /// Checks a device ordinal.
    pub fn check_device(&self, device: usize) -> Result<()> {
        self.device_properties(device).map(|_| ())
    }

    /// The device handle for `ordinal`.
    pub fn device(&self, ordinal: usize) -> Result<crate::Device> {
        self.check_device(ordinal)?;
        Ok(crate::Device { rt: self.clone(), ordinal })
    }

    /// The allocation registry.
    pub fn allocations(&self) -> &AllocationRegistry {
        &self.inner.allocations
    }

    /// Errors recorded in destructors (read and cleared).
    pub fn take_drop_errors(&self) -> Vec<Error> {
        self.inner.drop_errors.take()
    }

    /// Records an error from a destructor (logged, never panicked).
    pub(crate) fn record_drop_error(&self, what: &str, error: Error) {
        self.inner.drop_errors.record(what, error);
    }

    /// A fresh id, unique in the process (never reused, also across runtimes).
    pub(crate) fn next_id(&self) -> u64 {
        next_process_id()
    }

    // ---- explicit memory --------------------------------------------------------

    /// `hipMalloc`: size 0 gives the null pointer; an impossible size is OutOfMemory.
    pub fn malloc(&self, device: usize, size: u64) -> Result<DevicePtr> {
        self.check_device(device)?;
        if size == 0 {
            return Ok(DevicePtr::NULL);
        }
        let ptr = self.inner.backend.mem_alloc(device, size)?;
        self.inner.allocations.insert(Allocation { base: ptr, size, kind: MemoryKind::Device, device });
        Ok(ptr)
    }

    /// `hipFree`: null is fine; anything but the start of a live allocation is
    /// InvalidValue. Synchronizes the device first (HIP's slow path).
    pub fn free(&self, ptr: DevicePtr) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        if let Some(a) = self.inner.allocations.find(ptr.0) {
            match a.kind {
                MemoryKind::PoolSegment(pool) => {
                    return self.free_pool_pointer_synchronously(ptr, pool, a.device);
                }
                MemoryKind::DriverPool(pool) if a.base == ptr => {
                    let driver = self.inner.pools.get_driver(pool).ok_or_else(|| {
                        Error::InvalidValue(format!("{ptr} belongs to a pool that no longer exists"))
                    })?;
                    self.device_synchronize(a.device)?;
                    driver.free(ptr, RawStream::null(a.device))?;
                    return self.device_synchronize(a.device);
                }
                MemoryKind::Managed { .. } if a.base == ptr => return self.free_managed(ptr),
                MemoryKind::VmmMapping => {
                    if let Some(r) = self.free_if_imported(ptr) {
                        return r;
                    }
                }
                _ => {}
            }
        }
        let a = self
            .inner
            .allocations
            .remove_if(ptr, |a| a.kind == MemoryKind::Device)
            .ok_or_else(|| self.not_freeable(ptr))?;
        // HIP's rule: hipFree waits for the device first.
        if let Err(e) = self.device_synchronize(a.device) {
            self.inner.allocations.insert(a);
            return Err(e);
        }
        self.inner.backend.mem_free(a.device, a.base).inspect_err(|_| {
            // The backend refused: the allocation is still live.
            self.inner.allocations.insert(a);
        })
    }

    /// `hipFree` of a pool pointer: waits for the device, then returns the
    /// block to its pool as a completed free.
    fn free_pool_pointer_synchronously(&self, ptr: DevicePtr, pool: u64, device: usize) -> Result<()> {
        let core =
            self.inner.pools.get(pool).ok_or_else(|| {
                Error::InvalidValue(format!("{ptr} belongs to a pool that no longer exists"))
            })?;
        self.device_synchronize(device)?;
        let null = crate::pool::core::StreamRef {
            clock: &self.inner.null_clocks[device],
            raw: RawStream::null(device),
            primary: None,
        };
        if !core.free(ptr, &null) {
            return Err(Error::InvalidValue(format!(
                "{ptr} is not a live allocation of its pool (double free, or an interior pointer)"
            )));
        }
        self.device_synchronize(device)
    }

    fn not_freeable(&self, ptr: DevicePtr) -> Error {
        match self.inner.allocations.find(ptr.0) {
            Some(a) if a.base != ptr => Error::InvalidValue(format!(
                "{ptr} points {} bytes into the allocation at {}, not to its start",
                ptr.0 - a.base.0,
                a.base
            )),
            Some(a) => Error::InvalidValue(format!("{ptr} is {:?} memory, not freed by hipFree", a.kind)),
            None => Error::InvalidValue(format!(
                "{ptr} is not a live hipmem allocation (never allocated, already freed, or host memory)"
            )),
        }
    }

    /// `hipMemGetInfo`.
    pub fn mem_get_info(&self, device: usize) -> Result<MemInfo> {
        self.check_device(device)?;
        self.inner.backend.mem_get_info(device)
    }

    /// `hipDeviceSynchronize`: waits for every stream of the device; every
    /// free made before it is then complete, and the pools apply their
    /// release thresholds.
    pub fn device_synchronize(&self, device: usize) -> Result<()> {
        self.check_device(device)?;
        let points: Vec<_> =
            self.inner.clocks_of(device).into_iter().map(|(c, _)| (c.advance(), c)).collect();
        self.inner.backend.device_synchronize(device)?;
        for (tag, clock) in points {
            clock.mark_completed(tag);
            self.inner.recycle_events(device, clock.retire_completed_markers());
        }
        self.inner.after_device_synchronized(device);
        Ok(())
    }

    /// `hipPointerGetAttributes`: memory hipmem does not know reads as
    /// `Unregistered` (CUDA 11's rule), not as an error; null is InvalidValue.
    pub fn pointer_attributes(&self, ptr: u64) -> Result<PointerAttributes> {
        if ptr == 0 {
            return Err(Error::InvalidValue("hipPointerGetAttributes of a null pointer".into()));
        }
        Ok(match self.inner.allocations.find(ptr) {
            Some(a) => PointerAttributes {
                memory_type: match a.kind {
                    MemoryKind::Device
                    | MemoryKind::PoolSegment(_)
                    | MemoryKind::DriverPool(_)
                    | MemoryKind::VmmMapping => MemoryType::Device,
                    MemoryKind::PinnedHost { .. } | MemoryKind::RegisteredHost { .. } => MemoryType::Host,
                    MemoryKind::Managed { .. } => MemoryType::Managed,
                },
                device: a.device as i32,
                device_pointer: if a.kind.is_page_locked() {
                    self.page_locked_device_pointer(ptr).unwrap_or(DevicePtr::NULL)
                } else {
                    DevicePtr(ptr)
                },
                host_pointer: (a.kind.is_page_locked() || a.kind.is_managed()).then_some(ptr),
                is_managed: a.kind.is_managed(),
                allocation_flags: match a.kind {
                    MemoryKind::PinnedHost { flags }
                    | MemoryKind::RegisteredHost { flags }
                    | MemoryKind::Managed { flags } => flags,
                    _ => 0,
                },
                allocation: Some(a),
            },
            None => PointerAttributes {
                memory_type: MemoryType::Unregistered,
                device: -2,
                device_pointer: DevicePtr::NULL,
                host_pointer: Some(ptr),
                is_managed: false,
                allocation_flags: 0,
                allocation: None,
            },
        })
    }

    /// Decides how to carry out a `hipMemcpy` of `size` bytes from `src` to
    /// `dst` with `kind`, checking both ranges: a device side must lie inside
    /// one live allocation, and an explicit kind must match the pointers.
    pub fn resolve_copy(&self, dst: u64, src: u64, size: u64, kind: MemcpyKind) -> Result<ResolvedCopy> {
        if size == 0 {
            return Ok(ResolvedCopy::Nothing);
        }
        if dst == 0 || src == 0 {
            return Err(Error::InvalidValue(format!(
                "hipMemcpy: null {} pointer",
                if dst == 0 { "destination" } else { "source" }
            )));
        }
        let dst_dev = self.inner.allocations.find(dst).filter(|a| a.kind.is_device_accessible());
        let src_dev = self.inner.allocations.find(src).filter(|a| a.kind.is_device_accessible());
        let direction = match (kind, dst_dev.is_some(), src_dev.is_some()) {
            (MemcpyKind::Default, false, false) | (MemcpyKind::HostToHost, false, false) => {
                return Ok(ResolvedCopy::HostToHost);
            }
            (MemcpyKind::Default | MemcpyKind::HostToDevice, true, false) => CopyDirection::HostToDevice,
            (MemcpyKind::Default | MemcpyKind::DeviceToHost, false, true) => CopyDirection::DeviceToHost,
            (MemcpyKind::Default | MemcpyKind::DeviceToDevice, true, true) => CopyDirection::DeviceToDevice,
            (kind, d, s) => {
                let side = |dev: bool| if dev { "device" } else { "host" };
                return Err(Error::InvalidValue(format!(
                    "hipMemcpy kind {kind:?} does not match the pointers: destination is {} memory, source is {} memory",
                    side(d),
                    side(s)
                )));
            }
        };
        if dst_dev.is_some() {
            self.check_device_range(DevicePtr(dst), size, "hipMemcpy destination")?;
        }
        if src_dev.is_some() {
            self.check_device_range(DevicePtr(src), size, "hipMemcpy source")?;
        }
        Ok(ResolvedCopy::Backend(direction))
    }

    /// Synchronous copy from a host slice to device memory.
    pub fn copy_host_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.check_device_range(dst, src.len() as u64, "copy destination")?;
        self.inner.backend.copy_host_to_device(dst, src)
    }

    /// Synchronous copy from device memory to a host slice.
    pub fn copy_device_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.check_device_range(src, dst.len() as u64, "copy source")?;
        self.inner.backend.copy_device_to_host(dst, src)
    }

    /// Synchronous copy between device allocations.
    pub fn copy_device_to_device(&self, dst: DevicePtr, src: DevicePtr, size: u64) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        self.check_device_range(dst, size, "copy destination")?;
        self.check_device_range(src, size, "copy source")?;
        self.inner.backend.copy_device_to_device(dst, src, size)
    }

    /// Asynchronous copy from lent host memory to device memory on `stream`.
    pub fn copy_host_to_device_async(&self, dst: DevicePtr, src: HostSpan, stream: RawStream) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        self.check_device_range(dst, src.len(), "copy destination")?;
        self.inner.backend.copy_host_to_device_async(dst, src, stream)
    }

    /// Asynchronous copy from device memory to lent host memory on `stream`.
    pub fn copy_device_to_host_async(&self, dst: HostSpan, src: DevicePtr, stream: RawStream) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        self.check_device_range(src, dst.len(), "copy source")?;
        self.inner.backend.copy_device_to_host_async(dst, src, stream)
    }

    /// Asynchronous copy between device allocations on `stream`.
    pub fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
        stream: RawStream,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        self.check_device_range(dst, size, "copy destination")?;
        self.check_device_range(src, size, "copy source")?;
        self.inner.backend.copy_device_to_device_async(dst, src, size, stream)
    }

    /// `hipMemsetAsync` generalized to 8-, 16- and 32-bit elements: `count`
    /// elements of `value` at `dst`. Size 0 succeeds; null, host memory or a
    /// range past the end is InvalidValue.
    pub fn memset_async(
        &self,
        dst: DevicePtr,
        value: FillValue,
        count: u64,
        stream: RawStream,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let bytes = count
            .checked_mul(value.element_size())
            .ok_or_else(|| Error::InvalidValue(format!("hipMemset: {count} elements overflow")))?;
        self.check_device_range(dst, bytes, "hipMemset destination")?;
        self.inner.backend.memset_async(dst, value, count, stream)
    }

    /// `hipMemset`: `memset_async` on the null stream, then waits for it.
    pub fn memset(&self, dst: DevicePtr, value: FillValue, count: u64) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let device = self
            .inner
            .allocations
            .find(dst.0)
            .map(|a| a.device)
            .ok_or_else(|| Error::InvalidValue(format!("hipMemset: {dst} is not device memory")))?;
        let null = RawStream::null(device);
        self.memset_async(dst, value, count, null)?;
        self.inner.backend.stream_synchronize(null)
    }

    /// Checks that `[ptr, ptr + len)` lies in one live allocation: a plain
    /// allocation, or one block of a pool.
    pub fn check_device_range(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<Allocation> {
        let a = self.inner.allocations.check_range(ptr, len, what)?;
        if a.kind == MemoryKind::VmmMapping {
            self.check_vmm_access(ptr, len, what)?;
        }
        if let MemoryKind::PoolSegment(pool) = a.kind {
            let core = self.inner.pools.get(pool);
            let block = core.and_then(|c| c.block_containing(ptr.0)).ok_or_else(|| {
                Error::InvalidValue(format!("{what} {ptr} is pool memory that is not allocated"))
            })?;
            let end = ptr.0.saturating_add(len);
            if end > block.0 + block.1 {
                return Err(Error::InvalidValue(format!(
                    "{what}: {len} bytes at {ptr} run {} bytes past the end of the {}-byte pool block at {:#x}",
                    end - (block.0 + block.1),
                    block.1,
                    block.0
                )));
            }
            return Ok(Allocation {
                base: DevicePtr(block.0),
                size: block.1,
                kind: a.kind,
                device: a.device,
            });
        }
        Ok(a)
    }

    /// Checks a kernel's output range (for the built-in kernels).
    pub(crate) fn check_kernel_range(&self, ptr: DevicePtr, bytes: u64, kernel: &str) -> Result<()> {
        self.check_device_range(ptr, bytes, kernel).map(|_| ())
    }
}
