//! How the subsystems above the core (pools, virtual memory, page-locked and
//! managed memory, IPC) hear about core events and keep their state in a
//! runtime, without the core knowing them.
//!
//! - [`CoreHooks`]: a subsystem registers an object once (when its state is
//!   created) and the core calls it after a stream or device
//!   synchronization, before an owned stream is destroyed, and when a range
//!   check meets memory of a kind the subsystem owns (a pool's segment is
//!   valid only where a block is allocated; a mapping only where the device
//!   has access), and when it asks what access a device has to such memory
//!   (peer access rules for kernels and `hipPointerGetAttribute`).
//! - [`ExtensionKey`]: each subsystem declares a `static` key for its state
//!   type and gets its per-runtime state with [`Runtime::extension`], made
//!   on first use. The core stores it type-erased.
#![forbid(unsafe_code)]

use std::any::Any;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use super::{Allocation, Runtime};
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::AccessFlags;
use crate::error::Result;

/// What a subsystem wants to hear from the core. Every method has a default
/// that does nothing; a subsystem overrides what it needs. Hooks run on the
/// thread that caused the event, without any core lock held.
pub trait CoreHooks: Send + Sync {
    /// Stream `stream` (a process-unique stream id) of `device` completed
    /// everything before its clock's completed tag (a synchronization, or
    /// an event recorded on it completed).
    fn stream_synchronized(&self, rt: &Runtime, device: usize, stream: u64) {
        let _ = (rt, device, stream);
    }

    /// Every stream of `device` completed all its work.
    fn device_synchronized(&self, rt: &Runtime, device: usize) {
        let _ = (rt, device);
    }

    /// An owned stream is about to be destroyed (work already queued on it
    /// still runs).
    fn stream_retiring(&self, rt: &Runtime, device: usize, stream: u64) {
        let _ = (rt, device, stream);
    }

    /// A range check found `[ptr, ptr + len)` inside `allocation`, memory of
    /// a kind this subsystem may own. Returns None if it is not this
    /// subsystem's, else the verdict: the narrower allocation the range lies
    /// in (a pool's block), or the error.
    fn check_range(
        &self,
        rt: &Runtime,
        allocation: &Allocation,
        ptr: DevicePtr,
        len: u64,
        what: &str,
    ) -> Option<Result<Allocation>> {
        let _ = (rt, allocation, ptr, len, what);
        None
    }

    /// The access `device`'s work has to `ptr`, which lies in `allocation`,
    /// memory of a kind this subsystem may own (another device's pool
    /// memory: what the pool's access list says; a mapping: what
    /// `hipMemSetAccess` gave). Returns None if it is not this subsystem's.
    fn device_access(
        &self,
        rt: &Runtime,
        device: usize,
        allocation: &Allocation,
        ptr: DevicePtr,
    ) -> Option<Result<AccessFlags>> {
        let _ = (rt, device, allocation, ptr);
        None
    }

    /// Whether a kernel on `device` reaches `ptr` in `allocation` (some
    /// access suffices). The default asks [`CoreHooks::device_access`]; a
    /// subsystem that can answer from its own tables (no driver call per
    /// launch) overrides it.
    fn device_reaches(
        &self,
        rt: &Runtime,
        device: usize,
        allocation: &Allocation,
        ptr: DevicePtr,
    ) -> Option<Result<bool>> {
        self.device_access(rt, device, allocation, ptr).map(|r| r.map(|f| f != AccessFlags::None))
    }
}

/// The registered hooks; a snapshot is taken (one reference count) so that
/// hooks run with no lock held.
#[derive(Default)]
pub(crate) struct Hooks {
    list: RwLock<Arc<Vec<Arc<dyn CoreHooks>>>>,
}

impl Hooks {
    pub(crate) fn add(&self, hooks: Arc<dyn CoreHooks>) {
        let mut list = self.list.write().unwrap_or_else(|p| p.into_inner());
        let mut next = Vec::clone(&list);
        next.push(hooks);
        *list = Arc::new(next);
    }

    pub(crate) fn snapshot(&self) -> Arc<Vec<Arc<dyn CoreHooks>>> {
        Arc::clone(&self.list.read().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Most subsystem states one runtime holds.
const MAX_EXTENSIONS: usize = 16;

/// A subsystem's key to its per-runtime state of type `T`: declare one
/// `static` per state type.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use hipmem::runtime::ExtensionKey;
///
/// struct Counter(AtomicU64);
/// static COUNTER: ExtensionKey<Counter> = ExtensionKey::new("an example counter");
///
/// # fn main() -> hipmem::Result<()> {
/// let rt = hipmem::Runtime::new(hipmem::BackendChoice::Host)?;
/// let counter = rt.extension(&COUNTER, |_| Arc::new(Counter(AtomicU64::new(0))));
/// counter.0.fetch_add(1, Ordering::Relaxed);
/// // The same state on every later call, for this runtime only.
/// assert_eq!(rt.extension(&COUNTER, |_| unreachable!()).0.load(Ordering::Relaxed), 1);
/// # Ok(()) }
/// ```
pub struct ExtensionKey<T> {
    name: &'static str,
    index: OnceLock<usize>,
    _state: PhantomData<fn() -> T>,
}

impl<T> ExtensionKey<T> {
    /// A key; `name` says what the state is (for debugging).
    pub const fn new(name: &'static str) -> ExtensionKey<T> {
        ExtensionKey { name, index: OnceLock::new(), _state: PhantomData }
    }

    /// The key's slot, given out on first use.
    #[inline]
    fn index(&self) -> usize {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        *self.index.get_or_init(|| NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl<T> std::fmt::Debug for ExtensionKey<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtensionKey").field("name", &self.name).field("index", &self.index.get()).finish()
    }
}

/// The subsystems' states of one runtime, by key.
pub(crate) struct Extensions {
    slots: [OnceLock<Arc<dyn Any + Send + Sync>>; MAX_EXTENSIONS],
}

impl Default for Extensions {
    fn default() -> Extensions {
        Extensions { slots: std::array::from_fn(|_| OnceLock::new()) }
    }
}

impl Runtime {
    /// The state of the subsystem that owns `key`, made by `init` on first
    /// use. `init` may register hooks and use other keys, not this one.
    #[inline]
    pub fn extension<T: Send + Sync + 'static>(
        &self,
        key: &'static ExtensionKey<T>,
        init: impl FnOnce(&Runtime) -> Arc<T>,
    ) -> &T {
        match self.extension_if_made(key) {
            Some(state) => state,
            None => self.make_extension(key, init),
        }
    }

    #[cold]
    fn make_extension<T: Send + Sync + 'static>(
        &self,
        key: &'static ExtensionKey<T>,
        init: impl FnOnce(&Runtime) -> Arc<T>,
    ) -> &T {
        let slot = self.inner.extensions.slots.get(key.index()).unwrap_or_else(|| {
            // A fixed number of subsystems declares keys: more is a build bug.
            panic!("more than {MAX_EXTENSIONS} runtime extensions (key {:?})", key.name)
        });
        let state = slot.get_or_init(|| init(self) as Arc<dyn Any + Send + Sync>);
        match state.downcast_ref::<T>() {
            Some(state) => state,
            // One key per state type, its slot only ever holds a `T`.
            None => unreachable!("extension slot of {:?} holds another type", key.name),
        }
    }

    /// The state of `key`'s subsystem if it has been made.
    #[inline]
    pub fn extension_if_made<T: Send + Sync + 'static>(&self, key: &'static ExtensionKey<T>) -> Option<&T> {
        self.inner.extensions.slots.get(key.index())?.get()?.downcast_ref::<T>()
    }

    /// Registers a subsystem's hooks (once, when its state is made).
    pub fn add_hooks(&self, hooks: Arc<dyn CoreHooks>) {
        self.inner.hooks.add(hooks);
    }

    /// Tells the subsystems that stream `stream` of `device` completed up to
    /// its clock's completed tag.
    pub(crate) fn notify_stream_synchronized(&self, device: usize, stream: u64) {
        for h in self.inner.hooks.snapshot().iter() {
            h.stream_synchronized(self, device, stream);
        }
    }

    /// Tells the subsystems that `device` completed all its work.
    pub(crate) fn notify_device_synchronized(&self, device: usize) {
        for h in self.inner.hooks.snapshot().iter() {
            h.device_synchronized(self, device);
        }
    }

    /// Tells the subsystems that an owned stream is going away.
    pub(crate) fn notify_stream_retiring(&self, device: usize, stream: u64) {
        for h in self.inner.hooks.snapshot().iter() {
            h.stream_retiring(self, device, stream);
        }
    }

    /// Asks the subsystems to narrow a range check inside `allocation`.
    pub(crate) fn hooked_range_check(
        &self,
        allocation: &Allocation,
        ptr: DevicePtr,
        len: u64,
        what: &str,
    ) -> Option<Result<Allocation>> {
        self.inner.hooks.snapshot().iter().find_map(|h| h.check_range(self, allocation, ptr, len, what))
    }

    /// Asks the subsystems what access `device` has to `ptr` in `allocation`.
    pub(crate) fn hooked_device_access(
        &self,
        device: usize,
        allocation: &Allocation,
        ptr: DevicePtr,
    ) -> Option<Result<AccessFlags>> {
        self.inner.hooks.snapshot().iter().find_map(|h| h.device_access(self, device, allocation, ptr))
    }

    /// Asks the subsystems whether a kernel on `device` reaches `ptr` in `allocation`.
    pub(crate) fn hooked_device_reaches(
        &self,
        device: usize,
        allocation: &Allocation,
        ptr: DevicePtr,
    ) -> Option<Result<bool>> {
        self.inner.hooks.snapshot().iter().find_map(|h| h.device_reaches(self, device, allocation, ptr))
    }
}
