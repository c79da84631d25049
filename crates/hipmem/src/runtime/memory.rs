//! Explicit device memory (`hipMalloc`), copies, memsets and what any
//! pointer is (`hipPointerGetAttributes`), with HIP's argument rules.
#![forbid(unsafe_code)]

use super::{Allocation, MemoryKind, Runtime};
use crate::backend::{CopyDirection, DevicePtr, FillValue, HostSpan, MemInfo, RawStream};
use crate::error::{Error, Result};

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
            // AMD's hipMemcpyDeviceToDeviceNoCU: a device-to-device copy
            // (without compute units there; every copy here is one).
            1024 => MemcpyKind::DeviceToDevice,
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

impl Runtime {
    // ---- explicit memory --------------------------------------------------------

    /// `hipMalloc`: size 0 gives the null pointer; an impossible size is OutOfMemory.
    pub fn malloc(&self, device: usize, size: u64) -> Result<DevicePtr> {
        self.check_device(device)?;
        if size == 0 {
            return Ok(DevicePtr::NULL);
        }
        let ptr = self.inner.backend.mem_alloc(device, size).inspect_err(|e| {
            if matches!(e, Error::OutOfMemory(_)) {
                crate::trace::oom(0, 0, device, size);
            }
        })?;
        self.inner.allocations.insert(Allocation { base: ptr, size, kind: MemoryKind::Device, device });
        crate::trace::alloc(0, 0, device, ptr.0, size);
        Ok(ptr)
    }

    /// `hipFree` of memory from [`Runtime::malloc`]: null is fine; anything
    /// but the start of a live `hipMalloc` allocation is InvalidValue.
    /// Synchronizes the device first (HIP's slow path). (`Runtime::free`, in
    /// the API layer, routes pool, managed and imported memory to their
    /// subsystems and the rest here.)
    pub fn free_device_memory(&self, ptr: DevicePtr) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
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
        let (device, size) = (a.device, a.size);
        self.inner.backend.mem_free(a.device, a.base).inspect_err(|_| {
            // The backend refused: the allocation is still live.
            self.inner.allocations.insert(a);
        })?;
        crate::trace::free_requested(0, 0, device, ptr.0, size);
        crate::trace::free_completed(0, 0, device, ptr.0, size);
        Ok(())
    }

    /// Why `ptr` cannot be freed by hipFree.
    pub fn not_freeable(&self, ptr: DevicePtr) -> Error {
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
                    self.mapped_host_device_pointer(ptr).unwrap_or(DevicePtr::NULL)
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
    /// allocation, or (asked of the subsystem that owns it) one block of a
    /// pool, a mapping the device may access.
    pub fn check_device_range(&self, ptr: DevicePtr, len: u64, what: &str) -> Result<Allocation> {
        let a = self.inner.allocations.check_range(ptr, len, what)?;
        if matches!(a.kind, MemoryKind::PoolSegment(_) | MemoryKind::VmmMapping) {
            if let Some(verdict) = self.hooked_range_check(&a, ptr, len, what) {
                return verdict;
            }
            if let MemoryKind::PoolSegment(_) = a.kind {
                return Err(Error::InvalidValue(format!(
                    "{what} {ptr} is pool memory that is not allocated"
                )));
            }
        }
        Ok(a)
    }

    /// The device pointer of mapped page-locked memory at `ptr`, if any.
    pub fn mapped_host_device_pointer(&self, ptr: u64) -> Option<DevicePtr> {
        let a = self.inner.allocations.find(ptr)?;
        if !a.kind.is_mapped_host() {
            return None;
        }
        self.backend().page_locked_memory()?.device_pointer(ptr).ok()
    }
}
