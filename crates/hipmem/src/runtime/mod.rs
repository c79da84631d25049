//! The runtime core: a backend plus what every layer above shares.
//!
//! [`Runtime`] owns the backend, the device registry (properties read
//! once), the registry of every live allocation (`registry.rs`), the
//! streams' ordering clocks (`ordering.rs`) and the table of owned streams
//! (`stream.rs`), the pool of marker events (`events.rs`) and the log of
//! errors raised in `Drop`. Its methods here are HIP's core functions with
//! HIP's argument rules (explicit memory, copies, memsets, synchronization,
//! pointer attributes: `memory.rs`), on typed arguments: device memory as
//! [`DevicePtr`](crate::DevicePtr), host memory as slices or
//! [`HostSpan`](crate::HostSpan)s.
//!
//! The core knows nothing of pools, virtual memory, page-locked or managed
//! memory or IPC. Those subsystems sit above it: each keeps its state in the
//! runtime under an [`ExtensionKey`] of its own and hears of core events
//! (synchronizations, a stream retiring, a range check in memory it owns)
//! through the [`CoreHooks`] it registers (`hooks.rs`). They add their HIP
//! functions to `Runtime` in their own modules, so the one handle carries
//! every function while each lives in its layer.
#![forbid(unsafe_code)]

pub mod clock;
mod copies2d;
mod device;
mod device_info;
mod events;
mod hooks;
mod memory;
mod memory_ext;
pub mod ordering;
mod peer;
pub mod registry;
mod slice;
mod stream;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

pub use copies2d::Resolved2D;
pub use device::Device;
pub use device_info::HIP_RUNTIME_VERSION;
pub use hooks::{CoreHooks, ExtensionKey};
pub use memory::{MemcpyKind, MemoryType, PointerAttributes, ResolvedCopy};
pub use registry::{Allocation, AllocationRegistry, MemoryKind};
pub use slice::DeviceSlice;
pub use stream::{CoreStream, FastSlot, StreamFront};

use crate::backend::host::HostConfig;
use crate::backend::{self, Backend, BackendChoice, BackendKind, DeviceProperties};
use crate::error::{DropErrors, Error, Result};
use events::EventPool;
use hooks::{Extensions, Hooks};
use ordering::StreamClock;
use stream::{AdoptedTable, StreamTable};

/// The state shared by every handle of one runtime.
pub(crate) struct RuntimeInner {
    pub(crate) backend: Arc<dyn Backend>,
    pub(crate) devices: Vec<DeviceProperties>,
    pub(crate) allocations: AllocationRegistry,
    pub(crate) drop_errors: DropErrors,
    /// Owned streams by backend handle.
    pub(crate) streams: StreamTable,
    /// Streams made outside hipmem, adopted by handle.
    pub(crate) adopted: AdoptedTable,
    /// The clock of each device's legacy null stream.
    pub(crate) null_clocks: Vec<Arc<StreamClock>>,
    /// Events hipmem records for itself (markers), per device, for reuse.
    pub(crate) events: EventPool,
    /// What the subsystems asked to hear.
    pub(crate) hooks: Hooks,
    /// The subsystems' states.
    pub(crate) extensions: Extensions,
}

impl Drop for RuntimeInner {
    fn drop(&mut self) {
        let backend = Arc::clone(&self.backend);
        self.events.destroy_all(backend.as_ref());
    }
}

/// A runtime handle that does not keep the runtime alive (for state the
/// runtime itself holds, such as a pool, which would otherwise hold its
/// owner).
#[derive(Clone, Debug, Default)]
pub struct WeakRuntime {
    inner: std::sync::Weak<RuntimeInner>,
}

impl WeakRuntime {
    /// The runtime, if it is still alive.
    pub fn upgrade(&self) -> Option<Runtime> {
        self.inner.upgrade().map(|inner| Runtime { inner })
    }

    /// The runtime, or ContextIsDestroyed naming `what` if it is gone.
    pub fn get(&self, what: &str) -> Result<Runtime> {
        self.upgrade().ok_or_else(|| Error::ContextIsDestroyed(format!("the runtime of {what} is gone")))
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

    /// A handle that does not keep the runtime alive.
    pub fn downgrade(&self) -> WeakRuntime {
        WeakRuntime { inner: Arc::downgrade(&self.inner) }
    }

    /// Whether `self` and `other` are handles of the same runtime.
    #[inline]
    pub fn ptr_eq(&self, other: &Runtime) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Wraps an opened backend.
    pub fn with_backend(backend: Arc<dyn Backend>) -> Result<Runtime> {
        // A trace (HIPMEM_TRACE) names the backend in its header.
        crate::trace::set_backend(&backend.kind().to_string());
        crate::trace::init_from_env();
        let devices =
            (0..backend.device_count()).map(|d| backend.device_properties(d)).collect::<Result<Vec<_>>>()?;
        let null_clocks = (0..devices.len()).map(|_| Arc::new(StreamClock::new(next_process_id()))).collect();
        Ok(Runtime {
            inner: Arc::new(RuntimeInner {
                events: EventPool::new(devices.len()),
                backend,
                devices,
                allocations: AllocationRegistry::default(),
                drop_errors: DropErrors::default(),
                streams: StreamTable::default(),
                adopted: AdoptedTable::default(),
                null_clocks,
                hooks: Hooks::default(),
                extensions: Extensions::default(),
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

    /// Makes `device` the calling thread's current device for code outside
    /// hipmem too (`hipSetDevice`): on cuda its primary context stays
    /// current, as `cudaSetDevice` leaves it, so the CUDA runtime's later
    /// calls on the thread go to that device. hipmem's own calls name their
    /// device and leave the thread's context as they found it.
    pub fn make_current(&self, device: usize) -> Result<()> {
        self.check_device(device)?;
        self.inner.backend.make_current(device)
    }

    /// The device the calling thread works on by the platform's own
    /// runtime, where the backend keeps such state: on cuda the device of
    /// the thread's current context (left there by `cudaSetDevice`,
    /// `torch.cuda.set_device` or [`Runtime::make_current`]), None where the
    /// thread has no context; on hip the HIP runtime's current device; None
    /// on the CPU backend. The C ABI's current device follows it, as HIP on
    /// NVIDIA (a header over the CUDA runtime) shares the CUDA runtime's
    /// device.
    pub fn thread_device(&self) -> Option<usize> {
        self.inner.backend.thread_device()
    }

    /// Checks a device ordinal.
    pub fn check_device(&self, device: usize) -> Result<()> {
        self.device_properties(device).map(|_| ())
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
    pub fn record_drop_error(&self, what: &str, error: Error) {
        self.inner.drop_errors.record(what, error);
    }

    /// A fresh id, unique in the process (never reused, also across runtimes).
    pub fn next_id(&self) -> u64 {
        next_process_id()
    }
}
