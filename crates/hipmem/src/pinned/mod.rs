//! Page-locked (pinned) host memory: `hipHostMalloc`, `hipHostFree`,
//! `hipHostRegister`, `hipHostUnregister`, `hipHostGetDevicePointer`, and
//! what hipmem builds on them:
//!
//! - [`PinnedBuffer<T>`]: page-locked memory with HIP's flags, viewed as
//!   `&[T]` / `&mut [T]` only once the copies that use it have completed
//!   (each copy records an event on the buffer); truly asynchronous copies
//!   ([`CoreStream::copy_to_device_from_pinned`](crate::CoreStream::copy_to_device_from_pinned) and back) return while
//!   queued.
//! - [`HostRegistration<T>`]: existing host memory (a `Vec<T>`), registered
//!   while the guard lives.
//! - [`PinnedPool`]: a caching pool of page-locked blocks; a block a copy
//!   still uses is not handed out again until that copy has completed.
//! - staged pageable copies ([`crate::Runtime::copy_pageable_to_device`] and
//!   back): large copies from ordinary memory pipelined through a ring of
//!   page-locked staging buffers, the host-side memcpy spread over threads.
//!
//! The raw, HIP-shaped functions (for the C ABI) are methods of
//! [`Runtime`]; page-locked allocations and registered ranges are in the
//! runtime's allocation registry (`MemoryKind::PinnedHost`,
//! `MemoryKind::RegisteredHost`), so `hipPointerGetAttributes` reports them
//! as host memory with their device pointer.
#![forbid(unsafe_code)]

mod buffer;
mod pool;
mod staged;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

pub use buffer::{HostRegistration, MappedSlice, PageLockedSlice, PinnedBuffer};
pub use pool::{PinnedPool, PinnedPoolStats};
pub use staged::{
    MEMCPY_MIN_PART, STAGED_MIN_BYTES_FROM_DEVICE, STAGED_MIN_BYTES_TO_DEVICE, STAGING_CHUNK,
    STAGING_FIRST_CHUNK, STAGING_MIN_CHUNK, STAGING_RING, STAGING_THREADS, StagedOptions, StagingConfig,
    copy_parallel,
};

use crate::backend::host_memory::{PageLockedBlock, PageLockedFlags, RegisterFlags, RegisterSpan};
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};
use crate::runtime::{Allocation, ExtensionKey, MemoryKind, Runtime};

/// `hipHostMalloc` flag bits.
pub mod host_malloc_flags {
    /// `hipHostMallocDefault`.
    pub const DEFAULT: u32 = 0;
    /// `hipHostMallocPortable`: usable from every device.
    pub const PORTABLE: u32 = 0x1;
    /// `hipHostMallocMapped`: mapped into the devices' address space.
    pub const MAPPED: u32 = 0x2;
    /// `hipHostMallocWriteCombined`.
    pub const WRITE_COMBINED: u32 = 0x4;
    /// `hipHostMallocNumaUser`: NUMA placement from the user's policy.
    pub const NUMA_USER: u32 = 0x2000_0000;
    /// `hipHostMallocCoherent`.
    pub const COHERENT: u32 = 0x4000_0000;
    /// `hipHostMallocNonCoherent`.
    pub const NON_COHERENT: u32 = 0x8000_0000;
    /// Every known bit.
    pub const ALL: u32 = PORTABLE | MAPPED | WRITE_COMBINED | NUMA_USER | COHERENT | NON_COHERENT;
}

/// `hipHostRegister` flag bits.
pub mod host_register_flags {
    /// `hipHostRegisterDefault`.
    pub const DEFAULT: u32 = 0;
    /// `hipHostRegisterPortable`.
    pub const PORTABLE: u32 = 0x1;
    /// `hipHostRegisterMapped`.
    pub const MAPPED: u32 = 0x2;
    /// `hipHostRegisterIoMemory` (not supported).
    pub const IO_MEMORY: u32 = 0x4;
    /// `hipHostRegisterReadOnly` (accepted; the device only reads).
    pub const READ_ONLY: u32 = 0x8;
}

/// Parsed `hipHostMalloc` flags.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct HostMallocFlags {
    bits: u32,
}

impl HostMallocFlags {
    /// Parses HIP's bits: unknown bits, or Coherent with NonCoherent, are InvalidValue.
    pub fn from_bits(bits: u32) -> Result<HostMallocFlags> {
        use host_malloc_flags::*;
        if bits & !ALL != 0 {
            return Err(Error::InvalidValue(format!("unknown hipHostMalloc flag bits {:#x}", bits & !ALL)));
        }
        if bits & COHERENT != 0 && bits & NON_COHERENT != 0 {
            return Err(Error::InvalidValue(
                "hipHostMallocCoherent and hipHostMallocNonCoherent are mutually exclusive".into(),
            ));
        }
        Ok(HostMallocFlags { bits })
    }

    /// The bits.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// Whether the memory is mapped into the devices' address space.
    pub fn mapped(&self) -> bool {
        self.bits & host_malloc_flags::MAPPED != 0
    }

    /// The backend's view of the flags.
    pub fn to_backend(&self) -> PageLockedFlags {
        use host_malloc_flags::*;
        PageLockedFlags {
            portable: self.bits & PORTABLE != 0,
            mapped: self.bits & MAPPED != 0,
            write_combined: self.bits & WRITE_COMBINED != 0,
        }
    }
}

/// Parses `hipHostRegister` flags.
fn register_flags(bits: u32) -> Result<RegisterFlags> {
    use host_register_flags::*;
    if bits & !(PORTABLE | MAPPED | IO_MEMORY | READ_ONLY) != 0 {
        return Err(Error::InvalidValue(format!("unknown hipHostRegister flag bits {bits:#x}")));
    }
    if bits & IO_MEMORY != 0 {
        return Err(Error::NotSupported("hipHostRegisterIoMemory is not supported".into()));
    }
    Ok(RegisterFlags { portable: bits & PORTABLE != 0, mapped: bits & MAPPED != 0 })
}

/// The runtime's page-locked state: raw allocations (made through
/// `hipHostMalloc`, owned here until `hipHostFree`) and the staging pool.
#[derive(Default)]
struct PinnedState {
    raw: Mutex<HashMap<u64, PageLockedBlock>>,
    staging: OnceLock<PinnedPool>,
}

/// The page-locked subsystem's state in a runtime.
static PINNED: ExtensionKey<PinnedState> = ExtensionKey::new("page-locked memory");

fn state(rt: &Runtime) -> &PinnedState {
    rt.extension(&PINNED, |_| Arc::new(PinnedState::default()))
}

impl Runtime {
    fn page_locked_backend(&self) -> Result<&dyn crate::backend::host_memory::PageLockedMemory> {
        self.backend().page_locked_memory().ok_or_else(|| {
            Error::NotSupported(format!("the {} backend has no page-locked host memory", self.backend_kind()))
        })
    }

    /// Allocates a page-locked block and records it in the registry.
    pub(crate) fn allocate_page_locked(&self, size: u64, flags: HostMallocFlags) -> Result<PageLockedBlock> {
        let block = PageLockedBlock::allocate(self.backend(), size, flags.to_backend())?;
        self.allocations().insert(Allocation {
            base: DevicePtr(block.host()),
            size,
            kind: MemoryKind::PinnedHost { flags: flags.bits() },
            device: 0,
        });
        Ok(block)
    }

    /// Removes a block from the registry and frees it.
    pub(crate) fn release_page_locked(&self, block: PageLockedBlock) -> Result<()> {
        self.allocations().remove_if(DevicePtr(block.host()), |a| a.kind.is_page_locked());
        block.release()
    }

    /// `hipHostMalloc`: `size` bytes of page-locked memory with HIP's `flags`;
    /// size 0 gives 0 (null); bad flags are InvalidValue; an impossible size
    /// is OutOfMemory. The memory is freed by [`Runtime::host_free`].
    pub fn host_malloc(&self, size: u64, flags: u32) -> Result<u64> {
        let flags = HostMallocFlags::from_bits(flags)?;
        if size == 0 {
            return Ok(0);
        }
        let block = self.allocate_page_locked(size, flags)?;
        let host = block.host();
        state(self).raw.lock().unwrap_or_else(|p| p.into_inner()).insert(host, block);
        Ok(host)
    }

    /// `hipHostMalloc` with its out-pointer: a null out-pointer is InvalidValue.
    pub fn host_malloc_into(&self, out: Option<&mut u64>, size: u64, flags: u32) -> Result<()> {
        let out = out.ok_or_else(|| Error::InvalidValue("hipHostMalloc: null out-pointer".into()))?;
        *out = self.host_malloc(size, flags)?;
        Ok(())
    }

    /// `hipHostFree`: 0 is fine; anything but the start of a live
    /// `hipHostMalloc` allocation (registered memory, an interior pointer,
    /// memory already freed, memory owned by a `PinnedBuffer`) is InvalidValue.
    /// Queued device work that uses the memory completes first.
    pub fn host_free(&self, ptr: u64) -> Result<()> {
        if ptr == 0 {
            return Ok(());
        }
        let block = state(self).raw.lock().unwrap_or_else(|p| p.into_inner()).remove(&ptr);
        match block {
            Some(block) => self.release_page_locked(block),
            None => Err(match self.allocations().find(ptr) {
                Some(a) if a.base.0 != ptr => Error::InvalidValue(format!(
                    "hipHostFree: {ptr:#x} points {} bytes into the allocation at {}, not to its start",
                    ptr - a.base.0,
                    a.base
                )),
                Some(a) if matches!(a.kind, MemoryKind::RegisteredHost { .. }) => {
                    Error::InvalidValue(format!(
                        "hipHostFree: {ptr:#x} is registered host memory (use hipHostUnregister), not allocated"
                    ))
                }
                Some(a) if matches!(a.kind, MemoryKind::PinnedHost { .. }) => Error::InvalidValue(format!(
                    "hipHostFree: {ptr:#x} is owned by a PinnedBuffer or a pinned pool, not freed by hipHostFree"
                )),
                Some(a) => Error::InvalidValue(format!(
                    "hipHostFree: {ptr:#x} is {:?} memory, not page-locked host memory",
                    a.kind
                )),
                None => Error::InvalidValue(format!(
                    "hipHostFree: {ptr:#x} is not live page-locked memory (never allocated or already freed)"
                )),
            }),
        }
    }

    /// `hipHostRegister`: page-locks `span` (and maps it with
    /// `hipHostRegisterMapped`). Null or empty spans, unknown flags, and
    /// memory that is already page-locked are InvalidValue.
    pub fn host_register(&self, span: RegisterSpan, flags: u32) -> Result<()> {
        let parsed = register_flags(flags)?;
        if span.addr() == 0 || span.is_empty() {
            return Err(Error::InvalidValue("hipHostRegister of a null pointer or 0 bytes".into()));
        }
        let end = span
            .addr()
            .checked_add(span.len())
            .ok_or_else(|| Error::InvalidValue("hipHostRegister: the range overflows".into()))?;
        let pl = self.page_locked_backend()?;
        if let Some(a) = self.allocations().overlapping(span.addr(), end) {
            return Err(Error::InvalidValue(format!(
                "hipHostRegister: {} bytes at {:#x} overlap {:?} memory at {} (already registered?)",
                span.len(),
                span.addr(),
                a.kind,
                a.base
            )));
        }
        pl.register(span, parsed)?;
        self.allocations().insert(Allocation {
            base: DevicePtr(span.addr()),
            size: span.len(),
            kind: MemoryKind::RegisteredHost { flags },
            device: 0,
        });
        Ok(())
    }

    /// `hipHostUnregister`: anything but the start of a registered range is
    /// InvalidValue. Queued device work that uses the range completes first.
    pub fn host_unregister(&self, ptr: u64) -> Result<()> {
        if ptr == 0 {
            return Err(Error::InvalidValue("hipHostUnregister of a null pointer".into()));
        }
        let pl = self.page_locked_backend()?;
        let a = self
            .allocations()
            .remove_if(DevicePtr(ptr), |a| matches!(a.kind, MemoryKind::RegisteredHost { .. }))
            .ok_or_else(|| {
                Error::InvalidValue(format!(
                    "hipHostUnregister: {ptr:#x} is not the start of a registered range"
                ))
            })?;
        pl.unregister(ptr).inspect_err(|_| self.allocations().insert(a))
    }

    /// `hipHostGetDevicePointer`: the device address of mapped page-locked
    /// memory. Null, flags other than 0, unknown or unmapped memory are InvalidValue.
    pub fn host_get_device_pointer(&self, host: u64, flags: u32) -> Result<DevicePtr> {
        if flags != 0 {
            return Err(Error::InvalidValue(format!(
                "hipHostGetDevicePointer: flags must be 0, not {flags}"
            )));
        }
        if host == 0 {
            return Err(Error::InvalidValue("hipHostGetDevicePointer of a null pointer".into()));
        }
        let a = self.allocations().find(host).filter(|a| a.kind.is_page_locked()).ok_or_else(|| {
            Error::InvalidValue(format!("hipHostGetDevicePointer: {host:#x} is not page-locked memory"))
        })?;
        if !a.kind.is_mapped_host() {
            return Err(Error::InvalidValue(format!(
                "hipHostGetDevicePointer: {host:#x} is page-locked memory that is not mapped (hipHostMallocMapped)"
            )));
        }
        self.page_locked_backend()?.device_pointer(host)
    }

    /// `hipHostGetDevicePointer` with its out-pointer: null is InvalidValue.
    pub fn host_get_device_pointer_into(
        &self,
        out: Option<&mut DevicePtr>,
        host: u64,
        flags: u32,
    ) -> Result<()> {
        let out =
            out.ok_or_else(|| Error::InvalidValue("hipHostGetDevicePointer: null out-pointer".into()))?;
        *out = self.host_get_device_pointer(host, flags)?;
        Ok(())
    }

    /// The registry entry of page-locked memory that holds `[ptr, ptr + len)`,
    /// if it is page-locked (allocated or registered); copies from and to it
    /// can go straight to the device (no staging).
    pub fn page_locked_range(&self, ptr: u64, len: u64) -> Option<Allocation> {
        let a = self.allocations().find(ptr)?;
        (a.kind.is_page_locked() && ptr.checked_add(len).is_some_and(|end| end <= a.end())).then_some(a)
    }

    fn check_page_locked(&self, ptr: u64, len: u64, what: &str) -> Result<()> {
        self.page_locked_range(ptr, len).map(|_| ()).ok_or_else(|| {
            Error::InvalidValue(format!("{what}: {len} bytes at {ptr:#x} are not inside page-locked memory"))
        })
    }

    /// Asynchronous copy from page-locked memory at `src` to device memory on
    /// `stream`: returns once queued (a DMA on cuda).
    pub fn copy_page_locked_to_device_async(
        &self,
        dst: DevicePtr,
        src: u64,
        len: u64,
        stream: RawStream,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check_device_range(dst, len, "copy destination")?;
        self.check_page_locked(src, len, "copy source")?;
        self.page_locked_backend()?.copy_to_device_async(dst, src, len, stream)
    }

    /// The typed copies' path: `PinnedBuffer`s are live page-locked memory of
    /// this runtime by construction and device buffers are borrowed, so only
    /// the backend's own check of its tables runs.
    pub(crate) fn copy_page_locked_to_device_typed(
        &self,
        dst: DevicePtr,
        src: u64,
        len: u64,
        stream: RawStream,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.page_locked_backend()?.copy_to_device_async(dst, src, len, stream)
    }

    /// The typed copies' path from device memory (see
    /// [`Runtime::copy_page_locked_to_device_typed`]).
    pub(crate) fn copy_device_to_page_locked_typed(
        &self,
        dst: u64,
        src: DevicePtr,
        len: u64,
        stream: RawStream,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.page_locked_backend()?.copy_from_device_async(dst, src, len, stream)
    }

    /// Asynchronous copy from device memory into page-locked memory at `dst`
    /// on `stream`: returns once queued.
    pub fn copy_device_to_page_locked_async(
        &self,
        dst: u64,
        src: DevicePtr,
        len: u64,
        stream: RawStream,
    ) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check_device_range(src, len, "copy source")?;
        self.check_page_locked(dst, len, "copy destination")?;
        self.page_locked_backend()?.copy_from_device_async(dst, src, len, stream)
    }

    /// The runtime's pool of staging buffers (created on first use).
    pub fn staging_pool(&self) -> &PinnedPool {
        state(self).staging.get_or_init(|| {
            let pool = PinnedPool::new(self, host_malloc_flags::DEFAULT).expect("default flags are valid");
            pool.set_limit(pool::DEFAULT_STAGING_LIMIT);
            pool
        })
    }

    /// A page-locked buffer of `len` elements with HIP's `flags`.
    pub fn alloc_pinned<T: bytemuck::Pod>(&self, len: usize, flags: u32) -> Result<PinnedBuffer<T>> {
        PinnedBuffer::new(self, len, flags)
    }
}
