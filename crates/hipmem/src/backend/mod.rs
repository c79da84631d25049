//! The backend layer: one trait of raw operations with no policy.
//!
//! A backend talks to one kind of hardware (or emulates it) and does exactly
//! what it is asked: allocate, copy, enqueue, record. It keeps no pools, caches
//! or registries of hipmem's own; the runtime layer above it does that.
//!
//! The trait is shaped after the CUDA driver API, which HIP mirrors, but uses
//! hipmem's own plain types so that a HIP backend (whose structs differ from
//! CUDA's) implements it without changing it.
//!
//! Safety model: every method is safe to call with any argument. Device
//! addresses are plain numbers that the backend (or the driver) validates;
//! host memory enters only as slices (synchronous copies) or as a
//! [`lend::HostSpan`], whose unsafe constructor carries the promise that the
//! memory outlives the stream work that uses it. `unsafe` code lives only in
//! this module tree (and in the C ABI crate).

pub mod copy2d;
pub mod cuda;
pub mod device_info;
pub mod hip;
pub mod host;
pub mod host_memory;
pub mod lend;
pub mod managed_memory;
mod page_locked_ranges;
pub mod parallel_memcpy;
pub mod peer;
pub mod virtual_memory;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

pub use lend::HostSpan;

/// A device address (`hipDeviceptr_t` / `CUdeviceptr`), or any address that
/// device work may touch. Zero is the null pointer.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null pointer.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// Whether this is the null pointer.
    pub fn is_null(self) -> bool {
        self.0 == 0
    }

    /// This address plus `bytes` (checked).
    pub fn offset(self, bytes: u64) -> Result<DevicePtr> {
        self.0
            .checked_add(bytes)
            .map(DevicePtr)
            .ok_or_else(|| Error::InvalidValue(format!("address {self} + {bytes} overflows")))
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A backend stream: the device it belongs to and the backend's handle.
/// Handle 0 is the device's legacy null stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawStream {
    /// Device ordinal.
    pub device: usize,
    /// Backend handle (`CUstream` value on cuda); 0 is the null stream.
    pub handle: u64,
}

impl RawStream {
    /// The legacy null stream of `device`.
    pub const fn null(device: usize) -> RawStream {
        RawStream { device, handle: 0 }
    }

    /// Whether this is the null stream.
    pub fn is_null(&self) -> bool {
        self.handle == 0
    }
}

/// A backend event: the device it belongs to and the backend's handle.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawEvent {
    /// Device ordinal.
    pub device: usize,
    /// Backend handle (`CUevent` value on cuda).
    pub handle: u64,
}

/// A memory pool managed by the driver (`CUmemoryPool`), for the driver's
/// own pool kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct RawPool {
    /// Device ordinal.
    pub device: usize,
    /// Backend handle.
    pub handle: u64,
}

/// Stream creation flags (`hipStreamDefault` 0, `hipStreamNonBlocking` 1).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct StreamFlags {
    /// The stream does not synchronize with the legacy null stream.
    pub non_blocking: bool,
}

impl StreamFlags {
    /// `hipStreamDefault`.
    pub const DEFAULT: u32 = 0;
    /// `hipStreamNonBlocking`.
    pub const NON_BLOCKING: u32 = 1;

    /// Parses HIP's flag bits; unknown bits are InvalidValue.
    pub fn from_bits(bits: u32) -> Result<StreamFlags> {
        if bits & !Self::NON_BLOCKING != 0 {
            return Err(Error::InvalidValue(format!("unknown stream flag bits {bits:#x}")));
        }
        Ok(StreamFlags { non_blocking: bits & Self::NON_BLOCKING != 0 })
    }

    /// HIP's flag bits.
    pub fn bits(&self) -> u32 {
        if self.non_blocking { Self::NON_BLOCKING } else { Self::DEFAULT }
    }
}

/// Event creation flags (`hipEventDefault` 0, `BlockingSync` 1, `DisableTiming` 2, `Interprocess` 4).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct EventFlags {
    /// Synchronization blocks the thread instead of spinning.
    pub blocking_sync: bool,
    /// The event records no time (cheaper; elapsed time is then an error).
    pub disable_timing: bool,
    /// The event may be shared between processes (needs `disable_timing`).
    pub interprocess: bool,
}

impl EventFlags {
    /// `hipEventBlockingSync`.
    pub const BLOCKING_SYNC: u32 = 1;
    /// `hipEventDisableTiming`.
    pub const DISABLE_TIMING: u32 = 2;
    /// `hipEventInterprocess`.
    pub const INTERPROCESS: u32 = 4;

    /// Parses HIP's flag bits; unknown bits, or Interprocess without
    /// DisableTiming, are InvalidValue.
    pub fn from_bits(bits: u32) -> Result<EventFlags> {
        let known = Self::BLOCKING_SYNC | Self::DISABLE_TIMING | Self::INTERPROCESS;
        if bits & !known != 0 {
            return Err(Error::InvalidValue(format!("unknown event flag bits {bits:#x}")));
        }
        let flags = EventFlags {
            blocking_sync: bits & Self::BLOCKING_SYNC != 0,
            disable_timing: bits & Self::DISABLE_TIMING != 0,
            interprocess: bits & Self::INTERPROCESS != 0,
        };
        if flags.interprocess && !flags.disable_timing {
            return Err(Error::InvalidValue("hipEventInterprocess requires hipEventDisableTiming".into()));
        }
        Ok(flags)
    }

    /// HIP's flag bits.
    pub fn bits(&self) -> u32 {
        let bit = |on: bool, bit: u32| if on { bit } else { 0 };
        bit(self.blocking_sync, Self::BLOCKING_SYNC)
            | bit(self.disable_timing, Self::DISABLE_TIMING)
            | bit(self.interprocess, Self::INTERPROCESS)
    }
}

/// The element written by a memset or the fill kernel.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum FillValue {
    /// 8-bit elements (`hipMemsetD8`).
    U8(u8),
    /// 16-bit elements (`hipMemsetD16`).
    U16(u16),
    /// 32-bit elements (`hipMemsetD32`).
    U32(u32),
}

impl FillValue {
    /// Size of one element in bytes.
    pub fn element_size(&self) -> u64 {
        match self {
            FillValue::U8(_) => 1,
            FillValue::U16(_) => 2,
            FillValue::U32(_) => 4,
        }
    }
}

/// Which way a copy goes, once the runtime has classified both addresses.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum CopyDirection {
    /// Host memory to device memory.
    HostToDevice,
    /// Device memory to host memory.
    DeviceToHost,
    /// Device memory to device memory (same or different devices).
    DeviceToDevice,
}

/// What a device can do.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct DeviceCapabilities {
    /// Stream-ordered allocation from driver memory pools.
    pub memory_pools: bool,
    /// Virtual memory management (reserve, map, set access).
    pub virtual_memory: bool,
    /// Managed (unified) memory.
    pub managed_memory: bool,
    /// The host and the device may access managed memory at the same time.
    pub concurrent_managed_access: bool,
    /// Host memory can be mapped into the device's address space.
    pub can_map_host_memory: bool,
    /// One address space for host and all devices.
    pub unified_addressing: bool,
    /// Minimum granularity of virtual-memory physical allocations, bytes (0 if no VMM).
    pub vmm_granularity: u64,
    /// Recommended granularity of virtual-memory physical allocations, bytes.
    pub vmm_recommended_granularity: u64,
}

/// Properties of one device.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DeviceProperties {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name.
    pub name: String,
    /// Total device memory in bytes.
    pub total_memory: u64,
    /// Compute capability (major, minor); (0, 0) on the CPU emulation.
    pub compute_capability: (u32, u32),
    /// Number of multiprocessors (worker threads of the emulation).
    pub multiprocessor_count: u32,
    /// Feature flags.
    pub capabilities: DeviceCapabilities,
}

/// Free and total memory of a device, in bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct MemInfo {
    /// Bytes free.
    pub free: u64,
    /// Bytes in all.
    pub total: u64,
}

/// Which backend implementation.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// The CPU emulation.
    Host,
    /// The CUDA driver API.
    Cuda,
    /// AMD's HIP runtime (`libamdhip64`).
    Hip,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Host => "host",
            BackendKind::Cuda => "cuda",
            BackendKind::Hip => "hip",
        })
    }
}

/// A backend choice as the user states it (`HIPMEM_BACKEND=host|cuda|hip|auto`).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum BackendChoice {
    /// cuda when an NVIDIA GPU is there, else hip when an AMD GPU is, else host.
    #[default]
    Auto,
    /// The CPU emulation.
    Host,
    /// The CUDA driver API.
    Cuda,
    /// AMD's HIP runtime (also spelled `amd` or `rocm`).
    Hip,
}

impl std::str::FromStr for BackendChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<BackendChoice> {
        match s.trim().to_ascii_lowercase().as_str() {
            "" | "auto" => Ok(BackendChoice::Auto),
            "host" | "cpu" => Ok(BackendChoice::Host),
            "cuda" | "nvidia" => Ok(BackendChoice::Cuda),
            "hip" | "amd" | "rocm" => Ok(BackendChoice::Hip),
            other => Err(Error::InvalidValue(format!(
                "unknown backend {other:?}: expected host, cuda, hip or auto"
            ))),
        }
    }
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Host => "host",
            BackendChoice::Cuda => "cuda",
            BackendChoice::Hip => "hip",
        })
    }
}

/// Work run on the host in stream order (`hipLaunchHostFunc`).
pub type HostCallback = Box<dyn FnOnce() + Send + 'static>;

/// The raw operations every backend provides.
///
/// No method panics on bad input: the backend checks what it can (device
/// ordinals, handles, device address ranges) and returns the matching
/// [`Error`]. Methods that enqueue work return once the work is queued.
pub trait Backend: Send + Sync + fmt::Debug {
    /// Which implementation this is.
    fn kind(&self) -> BackendKind;

    /// A one-line description (driver version, emulated configuration).
    fn description(&self) -> String;

    /// Number of devices.
    fn device_count(&self) -> usize;

    /// Properties of `device`.
    fn device_properties(&self, device: usize) -> Result<DeviceProperties>;

    /// Free and total memory of `device`.
    fn mem_get_info(&self, device: usize) -> Result<MemInfo>;

    /// Waits until all work on all streams of `device` has completed.
    fn device_synchronize(&self, device: usize) -> Result<()>;

    /// Makes `device` the calling thread's current device for code outside
    /// hipmem (`hipSetDevice`), and leaves it so: on cuda its primary
    /// context stays current, as `cudaSetDevice` leaves it, so the CUDA
    /// runtime's later calls on the thread (kernel launches, cuDNN) go to
    /// that device; on hip the HIP runtime's current device; the CPU
    /// backend has no such state. (Every other call leaves the thread's
    /// context or device as it found it.)
    fn make_current(&self, device: usize) -> Result<()>;

    /// The device the calling thread works on by the platform's own
    /// runtime, where it says: on cuda the device of the thread's current
    /// context (what `cudaSetDevice`, PyTorch's `torch.cuda.set_device` or
    /// [`Backend::make_current`] left there), None where the thread has no
    /// context; on hip the HIP runtime's current device (`hipGetDevice`:
    /// what its `hipSetDevice`, PyTorch's on ROCm or
    /// [`Backend::make_current`] chose, 0 before any). The CPU backend keeps
    /// no such state apart from hipmem's and answers None (the default).
    fn thread_device(&self) -> Option<usize> {
        None
    }

    // ---- explicit device memory -------------------------------------------------

    /// Allocates `size` (> 0) bytes of device memory on `device`.
    fn mem_alloc(&self, device: usize, size: u64) -> Result<DevicePtr>;

    /// Frees memory from [`Backend::mem_alloc`]. The backend makes sure no
    /// queued work still touches it (it waits for the device's work first).
    fn mem_free(&self, device: usize, ptr: DevicePtr) -> Result<()>;

    // ---- copies and memset -------------------------------------------------------

    /// Copies host memory to device memory; returns when the copy is done.
    fn copy_host_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()>;

    /// Copies device memory to host memory; returns when the copy is done.
    fn copy_device_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<()>;

    /// Copies device memory to device memory; returns when the copy is done.
    fn copy_device_to_device(&self, dst: DevicePtr, src: DevicePtr, size: u64) -> Result<()>;

    /// Enqueues a host-to-device copy on `stream`.
    fn copy_host_to_device_async(&self, dst: DevicePtr, src: HostSpan, stream: RawStream) -> Result<()>;

    /// Enqueues a device-to-host copy on `stream`.
    fn copy_device_to_host_async(&self, dst: HostSpan, src: DevicePtr, stream: RawStream) -> Result<()>;

    /// Enqueues a device-to-device copy on `stream`.
    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
        stream: RawStream,
    ) -> Result<()>;

    /// Enqueues a memset of `count` elements of `value` at `dst` on `stream`.
    fn memset_async(&self, dst: DevicePtr, value: FillValue, count: u64, stream: RawStream) -> Result<()>;

    // ---- streams -----------------------------------------------------------------

    /// Creates a stream on `device`.
    fn stream_create(&self, device: usize, flags: StreamFlags) -> Result<RawStream>;

    /// Destroys a stream (one it created or one it adopted); work already
    /// queued still runs to completion.
    fn stream_destroy(&self, stream: RawStream) -> Result<()>;

    /// Adopts a stream of `device` that hipmem did not create (made by the
    /// vendor's runtime, its driver API or a library on top, such as
    /// PyTorch or NCCL): checks that `handle` is a live stream of `device`
    /// and returns its flags. Later calls take `RawStream { device, handle }`
    /// like a stream of the backend's own; the backend never destroys it
    /// unless [`Backend::stream_destroy`] is called on it. A backend whose
    /// streams are all its own (the CPU backend) answers InvalidHandle.
    fn stream_adopt(&self, device: usize, handle: u64) -> Result<StreamFlags> {
        let _ = device;
        Err(Error::InvalidHandle(format!(
            "stream {handle:#x} is not a live stream of hipmem: the {} backend has no streams made outside hipmem",
            self.kind()
        )))
    }

    /// The device a stream made outside hipmem belongs to (on cuda the
    /// device of the stream's context), before it is adopted: what
    /// `cudaMallocAsync` and HIP's stream-ordered calls take the device
    /// from. A stream the backend created or adopted answers its own
    /// device. InvalidHandle where `handle` is no live stream the backend
    /// can see (on hip also where the runtime has no `hipStreamGetDevice`);
    /// the default (the CPU backend) always.
    fn stream_device(&self, handle: u64) -> Result<usize> {
        Err(Error::InvalidHandle(format!(
            "stream {handle:#x}: the {} backend cannot tell the device of a stream made outside hipmem",
            self.kind()
        )))
    }

    /// Waits until all work queued on `stream` has completed.
    fn stream_synchronize(&self, stream: RawStream) -> Result<()>;

    /// Whether all work queued on `stream` has completed.
    fn stream_query(&self, stream: RawStream) -> Result<bool>;

    /// Makes later work on `stream` wait until `event`'s last record completes.
    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()>;

    /// Enqueues `callback` to run on a host thread when `stream` reaches it.
    fn launch_host_func(&self, stream: RawStream, callback: HostCallback) -> Result<()>;

    // ---- events ------------------------------------------------------------------

    /// Creates an event on `device`.
    fn event_create(&self, device: usize, flags: EventFlags) -> Result<RawEvent>;

    /// Destroys an event.
    fn event_destroy(&self, event: RawEvent) -> Result<()>;

    /// Records `event` at the current end of `stream`.
    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()>;

    /// Whether the work captured by the event's last record has completed
    /// (an event never recorded counts as complete).
    fn event_query(&self, event: RawEvent) -> Result<bool>;

    /// Waits for the work captured by the event's last record.
    fn event_synchronize(&self, event: RawEvent) -> Result<()>;

    /// Milliseconds between two completed records.
    fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32>;

    // ---- built-in kernels --------------------------------------------------------

    /// Fill kernel: writes `count` elements of `value` at `dst`.
    fn launch_fill(&self, dst: DevicePtr, value: FillValue, count: u64, stream: RawStream) -> Result<()>;

    /// Iota kernel (the seeds' kernel): `data[i] = i * k` for `count` 32-bit ints.
    fn launch_iota(&self, dst: DevicePtr, count: u64, k: i32, stream: RawStream) -> Result<()>;

    /// Delay kernel: occupies `stream` for `duration`, then writes the 32-bit
    /// value `flag_value` at `flag`.
    fn launch_delay(
        &self,
        duration: Duration,
        flag: DevicePtr,
        flag_value: u32,
        stream: RawStream,
    ) -> Result<()>;

    // ---- capabilities in their own traits (each in its own module) -----------------
    // A feature whose operations only some backends have lives in a trait of
    // its own; the backend hands it out here (None: not supported).
    // capability: virtual memory management (issue 4)
    /// Virtual memory management, where the backend has it.
    fn virtual_memory(&self) -> Option<&dyn virtual_memory::VirtualMemory> {
        None
    }
    // capability: page-locked host memory (issue 5)
    /// Page-locked host memory (`hipHostMalloc`, `hipHostRegister`, ...).
    fn page_locked_memory(&self) -> Option<&dyn host_memory::PageLockedMemory> {
        None
    }
    // capability: managed memory (issue 6)
    /// Managed (unified) memory (`hipMallocManaged`, prefetch, advice, ...).
    fn managed_memory(&self) -> Option<&dyn managed_memory::ManagedMemory> {
        None
    }

    // capability: peer access between devices (issue 15)
    /// Peer access between devices, where the backend has more than one.
    fn peer_access(&self) -> Option<&dyn peer::PeerAccess> {
        None
    }

    // ---- device details, stream priorities, pitched memory (issue 15) ------------
    // Defaults in device_info.rs and copy2d.rs; backends override what they
    // can answer or do natively.

    /// One attribute of `device` (`hipDeviceGetAttribute`). The default
    /// answers what [`DeviceProperties`] holds; others are NotSupported.
    fn device_attribute(&self, device: usize, attribute: device_info::DeviceAttribute) -> Result<i64> {
        device_info::attribute_from_properties(self, device, attribute)
    }

    /// The device's UUID (`hipDeviceProp_t::uuid`).
    fn device_uuid(&self, device: usize) -> Result<[u8; 16]> {
        Err(not_supported(self.kind(), device, "device UUIDs"))
    }

    /// The driver's version (`hipDriverGetVersion`).
    fn driver_version(&self) -> Result<i32> {
        Err(Error::NotSupported(format!("the {} backend reports no driver version", self.kind())))
    }

    /// The stream priorities `device` accepts (`hipDeviceGetStreamPriorityRange`);
    /// the default has none: `(0, 0)`.
    fn stream_priority_range(&self, device: usize) -> Result<device_info::PriorityRange> {
        self.device_properties(device).map(|_| device_info::PriorityRange::NONE)
    }

    /// Creates a stream with a priority already clamped into
    /// [`Backend::stream_priority_range`] (`hipStreamCreateWithPriority`).
    fn stream_create_with_priority(
        &self,
        device: usize,
        flags: StreamFlags,
        priority: i32,
    ) -> Result<RawStream> {
        let _ = priority;
        self.stream_create(device, flags)
    }

    /// A stream's priority (`hipStreamGetPriority`); the default: 0.
    fn stream_priority(&self, stream: RawStream) -> Result<i32> {
        self.device_properties(stream.device).map(|_| 0)
    }

    /// Allocates `height` rows of `width` bytes with padded rows; returns
    /// the memory and the pitch (`hipMallocPitch`). `width`, `height` > 0.
    fn mem_alloc_pitch(&self, device: usize, width: u64, height: u64) -> Result<(DevicePtr, u64)> {
        copy2d::mem_alloc_pitch_padded(self, device, width, height)
    }

    /// Enqueues a 2D copy on `stream` (`hipMemcpy2DAsync`).
    fn copy_2d_async(&self, copy: &copy2d::Copy2D, stream: RawStream) -> Result<()> {
        copy2d::copy_2d_by_rows(self, copy, stream)
    }

    /// Enqueues a 2D memset of bytes on `stream` (`hipMemset2DAsync`).
    fn memset_2d_async(
        &self,
        dst: DevicePtr,
        pitch: u64,
        value: u8,
        width: u64,
        height: u64,
        stream: RawStream,
    ) -> Result<()> {
        copy2d::memset_2d_by_rows(self, dst, pitch, value, width, height, stream)
    }

    // ---- the driver's own memory pools (optional) ---------------------------------
    // A backend without driver pools keeps these defaults (NotSupported);
    // hipmem's own pool works on every backend.

    /// The device's default driver pool (`cuDeviceGetDefaultMemPool`).
    fn driver_pool_default(&self, device: usize) -> Result<RawPool> {
        Err(not_supported(self.kind(), device, "driver memory pools"))
    }

    /// Creates a driver pool (`cuMemPoolCreate`).
    fn driver_pool_create(&self, device: usize, handle_types: u32, max_size: u64) -> Result<RawPool> {
        let _ = (handle_types, max_size);
        Err(not_supported(self.kind(), device, "driver memory pools"))
    }

    /// Destroys a driver pool (`cuMemPoolDestroy`).
    fn driver_pool_destroy(&self, pool: RawPool) -> Result<()> {
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// Allocates from a driver pool in stream order (`cuMemAllocFromPoolAsync`).
    fn driver_pool_alloc_async(&self, pool: RawPool, size: u64, stream: RawStream) -> Result<DevicePtr> {
        let _ = (size, stream);
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// Frees driver-pool memory in stream order (`cuMemFreeAsync`).
    fn driver_free_async(&self, ptr: DevicePtr, stream: RawStream) -> Result<()> {
        let _ = ptr;
        Err(not_supported(self.kind(), stream.device, "driver memory pools"))
    }

    /// Sets a pool attribute (`cuMemPoolSetAttribute`; HIP's numbering, 1 to 8).
    fn driver_pool_set_attribute(&self, pool: RawPool, attr: i32, value: u64) -> Result<()> {
        let _ = (attr, value);
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// Reads a pool attribute (`cuMemPoolGetAttribute`; HIP's numbering).
    fn driver_pool_get_attribute(&self, pool: RawPool, attr: i32) -> Result<u64> {
        let _ = attr;
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// Releases unused memory down to `keep` bytes (`cuMemPoolTrimTo`).
    fn driver_pool_trim_to(&self, pool: RawPool, keep: u64) -> Result<()> {
        let _ = keep;
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// Sets another device's access to a pool (`cuMemPoolSetAccess`; 0, 1 or 3).
    fn driver_pool_set_access(&self, pool: RawPool, device: usize, flags: u32) -> Result<()> {
        let _ = (device, flags);
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// A device's access to a pool (`cuMemPoolGetAccess`).
    fn driver_pool_get_access(&self, pool: RawPool, device: usize) -> Result<u32> {
        let _ = device;
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// Exports a pool created with the POSIX descriptor handle type
    /// (`cuMemPoolExportToShareableHandle`).
    fn driver_pool_export_fd(&self, pool: RawPool) -> Result<std::os::fd::OwnedFd> {
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// Imports a pool another process exported (`cuMemPoolImportFromShareableHandle`).
    fn driver_pool_import_fd(&self, fd: std::os::fd::BorrowedFd<'_>) -> Result<RawPool> {
        let _ = fd;
        Err(not_supported(self.kind(), 0, "driver memory pools"))
    }

    /// The 64 bytes of `cuMemPoolExportPointer`.
    fn driver_pool_export_pointer(&self, ptr: DevicePtr) -> Result<[u8; 64]> {
        let _ = ptr;
        Err(not_supported(self.kind(), 0, "driver memory pools"))
    }

    /// `cuMemPoolImportPointer` into an imported pool.
    fn driver_pool_import_pointer(&self, pool: RawPool, data: &[u8; 64]) -> Result<DevicePtr> {
        let _ = data;
        Err(not_supported(self.kind(), pool.device, "driver memory pools"))
    }

    /// The size of the driver allocation that starts at `ptr` (`cuMemGetAddressRange`).
    fn driver_pointer_range(&self, ptr: DevicePtr) -> Result<u64> {
        let _ = ptr;
        Err(not_supported(self.kind(), 0, "driver memory pools"))
    }
}

fn not_supported(kind: BackendKind, device: usize, what: &str) -> Error {
    Error::NotSupported(format!("the {kind} backend has no {what} (device {device})"))
}

/// Opens the backend named by `choice`.
///
/// `Auto` opens cuda when the driver loads and reports a device, else hip
/// when AMD's runtime loads and reports a device, else host.
pub fn open(choice: BackendChoice, host_config: host::HostConfig) -> Result<Arc<dyn Backend>> {
    match choice {
        BackendChoice::Host => Ok(Arc::new(host::HostBackend::new(host_config)?)),
        BackendChoice::Cuda => cuda::open(),
        BackendChoice::Hip => hip::open(),
        BackendChoice::Auto => {
            match cuda::open() {
                Ok(cuda) if cuda.device_count() > 0 => return Ok(cuda),
                Ok(_) => tracing::debug!(target: "hipmem", "cuda driver has no device"),
                Err(e) => tracing::debug!(target: "hipmem", "cuda unavailable ({e})"),
            }
            match hip::open() {
                Ok(hip) if hip.device_count() > 0 => return Ok(hip),
                Ok(_) => tracing::debug!(target: "hipmem", "HIP runtime has no device"),
                Err(e) => tracing::debug!(target: "hipmem", "hip unavailable ({e})"),
            }
            tracing::debug!(target: "hipmem", "using the host backend");
            Ok(Arc::new(host::HostBackend::new(host_config)?))
        }
    }
}
