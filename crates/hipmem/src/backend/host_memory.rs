//! Page-locked (pinned) host memory: the capability trait and the owned,
//! viewable block built on it.
//!
//! A backend that can page-lock host memory hands out a
//! [`PageLockedMemory`] from [`Backend::page_locked_memory`]. Its operations:
//! allocate and free page-locked memory, register and unregister existing
//! host memory, the device pointer of mapped memory, and asynchronous copies
//! between page-locked memory and device memory. Those copies take host
//! addresses as plain numbers: the backend validates them against its own
//! table of page-locked ranges (memory it allocated or registered), so they
//! are safe to call with any argument.
//!
//! Freeing and registering are where host memory's lifetime is at stake:
//! - [`PageLockedMemory::free`] is `unsafe` (no reference into the block may
//!   outlive it). [`PageLockedBlock`] is the owner that makes it safe: it
//!   frees once, in `Drop`, and lends its bytes as slices borrowed from it.
//! - [`PageLockedMemory::register`] takes a [`RegisterSpan`], whose `unsafe`
//!   constructor carries the promise that the memory stays valid until it is
//!   unregistered.
//!
//! [`Backend::page_locked_memory`]: super::Backend::page_locked_memory

use std::sync::Arc;

use super::{Backend, DevicePtr, RawStream};
use crate::error::{Error, Result};

/// Flags of a page-locked allocation, as the backend sees them (the runtime
/// parses HIP's bits into these).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PageLockedFlags {
    /// Usable from every device's context (`hipHostMallocPortable`).
    pub portable: bool,
    /// Mapped into the devices' address space (`hipHostMallocMapped`).
    pub mapped: bool,
    /// Write-combined (`hipHostMallocWriteCombined`): fast to write from the
    /// host and to read by the device, slow to read from the host.
    pub write_combined: bool,
}

/// What an allocation of page-locked memory produced.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PageLocked {
    /// The host address.
    pub host: u64,
    /// The device address of mapped memory (`None` unless mapped).
    pub device: Option<DevicePtr>,
    /// Whether the pages are really locked (the CPU emulation may not be
    /// allowed to: `RLIMIT_MEMLOCK`).
    pub locked: bool,
}

/// Host memory to be registered: an address and a length.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RegisterSpan {
    addr: u64,
    len: u64,
}

impl RegisterSpan {
    /// Describes `len` bytes at `addr` for [`PageLockedMemory::register`].
    ///
    /// # Safety
    /// The memory must stay valid for reads and writes (by the host and by
    /// device work through its mapped pointer or asynchronous copies) until it
    /// is unregistered and every device operation that used it has completed.
    pub unsafe fn new(addr: *mut u8, len: usize) -> RegisterSpan {
        RegisterSpan { addr: addr as u64, len: len as u64 }
    }

    /// A span over memory owned by a registration guard of the safe layer.
    ///
    /// The caller (`pinned::HostRegistration`) owns `bytes` as a boxed slice
    /// that it never moves, reallocates or frees while registered: it frees it
    /// only after a successful unregister, and leaks it when unregistering
    /// fails; a leaked guard leaks the memory with it. That discharges the
    /// promise of [`RegisterSpan::new`].
    pub(crate) fn of_owned(bytes: &mut [u8]) -> RegisterSpan {
        // SAFETY: see above: the owner keeps the memory alive until unregistered.
        unsafe { RegisterSpan::new(bytes.as_mut_ptr(), bytes.len()) }
    }

    /// The start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the span is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Flags of a registration (`hipHostRegisterPortable` 1, `Mapped` 2).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct RegisterFlags {
    /// Usable from every device's context.
    pub portable: bool,
    /// Mapped into the devices' address space.
    pub mapped: bool,
}

/// What a registration produced.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Registered {
    /// The device address of the start, if mapped.
    pub device: Option<DevicePtr>,
    /// Whether the pages are really locked.
    pub locked: bool,
}

/// Page-locked host memory: the operations of a backend that has it.
pub trait PageLockedMemory: Send + Sync {
    /// Allocates `size` (> 0) bytes of page-locked host memory.
    fn allocate(&self, size: u64, flags: PageLockedFlags) -> Result<PageLocked>;

    /// Frees memory from [`PageLockedMemory::allocate`]; queued device work
    /// that uses it completes first.
    ///
    /// # Safety
    /// `host` must be freed once, and no Rust reference into the memory may
    /// be used after this call.
    unsafe fn free(&self, host: u64) -> Result<()>;

    /// Page-locks existing host memory (and maps it, with `flags.mapped`).
    fn register(&self, span: RegisterSpan, flags: RegisterFlags) -> Result<Registered>;

    /// Undoes [`PageLockedMemory::register`] of the range starting at `addr`;
    /// queued device work that uses it completes first.
    fn unregister(&self, addr: u64) -> Result<()>;

    /// The device address of `host`, inside mapped page-locked memory.
    fn device_pointer(&self, host: u64) -> Result<DevicePtr>;

    /// Enqueues a copy of `len` bytes of page-locked memory at `src` to
    /// device memory at `dst` on `stream`. `src..src + len` must lie inside
    /// one range this backend allocated or registered.
    fn copy_to_device_async(&self, dst: DevicePtr, src: u64, len: u64, stream: RawStream) -> Result<()>;

    /// Enqueues a copy of `len` bytes of device memory at `src` into
    /// page-locked memory at `dst` on `stream` (same rule for `dst`).
    fn copy_from_device_async(&self, dst: u64, src: DevicePtr, len: u64, stream: RawStream) -> Result<()>;
}

/// One page-locked allocation, owned: freed once, when dropped, and viewable
/// as bytes through borrows of it.
///
/// The owner (`PinnedBuffer`, the pinned pool, the runtime's table of raw
/// allocations) is responsible for not viewing the bytes while device work
/// writes them (it waits for its copies' events first).
pub struct PageLockedBlock {
    backend: Arc<dyn Backend>,
    memory: PageLocked,
    len: usize,
    flags: PageLockedFlags,
}

impl std::fmt::Debug for PageLockedBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageLockedBlock")
            .field("host", &format_args!("{:#x}", self.memory.host))
            .field("len", &self.len)
            .field("flags", &self.flags)
            .field("locked", &self.memory.locked)
            .finish()
    }
}

impl PageLockedBlock {
    /// Allocates `size` (> 0) bytes of page-locked memory from `backend`.
    pub fn allocate(
        backend: &Arc<dyn Backend>,
        size: u64,
        flags: PageLockedFlags,
    ) -> Result<PageLockedBlock> {
        let pl = backend.page_locked_memory().ok_or_else(|| {
            Error::NotSupported(format!("the {} backend has no page-locked host memory", backend.kind()))
        })?;
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes of page-locked memory".into()));
        }
        let len = usize::try_from(size)
            .map_err(|_| Error::OutOfMemory(format!("{size} bytes do not fit the address space")))?;
        if len > isize::MAX as usize {
            return Err(Error::OutOfMemory(format!("{size} bytes do not fit the address space")));
        }
        let memory = pl.allocate(size, flags)?;
        Ok(PageLockedBlock { backend: Arc::clone(backend), memory, len, flags })
    }

    /// The host address.
    pub fn host(&self) -> u64 {
        self.memory.host
    }

    /// The device address, if mapped.
    pub fn device(&self) -> Option<DevicePtr> {
        self.memory.device
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is empty (never: blocks have at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the pages are really locked.
    pub fn is_locked(&self) -> bool {
        self.memory.locked
    }

    /// The flags it was allocated with.
    pub fn flags(&self) -> PageLockedFlags {
        self.flags
    }

    /// Frees the block now, returning the backend's error (Drop only logs it).
    pub fn release(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        let result = match this.backend.page_locked_memory() {
            // SAFETY: the block owns the allocation and is consumed here, so it
            // is freed once and no view borrowed from it is alive.
            Some(pl) => unsafe { pl.free(this.memory.host) },
            None => Ok(()),
        };
        // SAFETY: `this` is never used again; its backend handle is dropped once.
        drop(unsafe { std::ptr::read(&this.backend) });
        result
    }

    /// The bytes, for reading.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the block owns `len` bytes of mapped, initialized (zeroed by
        // the kernel or written since) memory at `host`, freed only in Drop,
        // which cannot run while this borrow lives. Device writes into it are
        // ordered before this view by the owner (it waits for its copies).
        unsafe { std::slice::from_raw_parts(self.memory.host as *const u8, self.len) }
    }

    /// The bytes, for writing.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; the exclusive borrow of the block makes the
        // view unique on the host side.
        unsafe { std::slice::from_raw_parts_mut(self.memory.host as *mut u8, self.len) }
    }
}

impl Drop for PageLockedBlock {
    fn drop(&mut self) {
        if let Some(pl) = self.backend.page_locked_memory() {
            // SAFETY: the block owns the allocation and frees it once, here; the
            // views borrowed from it have ended.
            if let Err(e) = unsafe { pl.free(self.memory.host) } {
                tracing::warn!(target: "hipmem", "freeing page-locked memory failed in Drop: {e}");
            }
        }
    }
}
