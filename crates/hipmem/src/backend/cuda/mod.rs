//! The `cuda` backend: the [`Backend`] trait on the CUDA driver API.
//!
//! Layers, in the manner of cudarc:
//! - [`driver`]: the driver's types and constants and a table of function
//!   pointers loaded from `libcuda.so.1` at run time (nothing links CUDA);
//! - [`result`]: one short function per driver call that turns `CUresult`
//!   into [`Result`], with messages that name the call and its arguments;
//! - this module: [`CudaBackend`], which works in each device's primary
//!   context and runs hipmem's built-in kernels from hand-written PTX
//!   (`kernels.ptx`, JIT-compiled by the driver for the device).
//!
//! Handles: a stream's handle is its `CUstream` value (0 is the device's
//! legacy null stream), an event's its `CUevent` value. The backend keeps the
//! set of streams and events it created, so a stale or foreign handle is an
//! [`Error::InvalidHandle`] value instead of a dangling pointer handed to the
//! driver; device addresses are validated by the driver (the runtime layer
//! above checks them against its own registry first).
//!
//! Contexts: a device's primary context is retained on first use (a process
//! that works on one GPU of several makes no context on the others, as the
//! CUDA runtime does). Every call that needs one asks the driver which
//! context is current on the calling thread (`cuCtxGetCurrent`), makes its
//! own current where it differs, and makes the caller's current again when
//! the call returns (`handles::Bound`). So hipmem sees a context that the
//! CUDA runtime, PyTorch or cuDNN made current on the same thread, and
//! leaves every thread in the context it found: a call for device 1 from a
//! thread working on device 0 does not move that thread's later CUDA runtime
//! calls to device 1. Calls that name no device (reservations, unmaps,
//! page-locked memory, pointer queries) run in the caller's context where it
//! has one, and make no context for a device the process does not use.

mod copy2d;
mod device_info;
pub mod driver;
mod driver_pools;
mod handles;
mod kernels;
mod managed;
mod page_locked;
mod peer;
mod pool_ipc;
pub mod result;
mod virtual_memory;

use std::collections::HashMap;
use std::ffi::c_void;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use driver::Driver;
use handles::{
    Bound, Device, EventEntry, Handle, OnDevice, StreamEntry, Target, bind_any_context, bind_context,
    destroy_entry, lock,
};
pub use kernels::{KERNEL_NAMES, KERNELS_PTX};

use super::{
    Backend, BackendKind, DeviceCapabilities, DeviceProperties, DevicePtr, EventFlags, FillValue,
    HostCallback, HostSpan, MemInfo, RawEvent, RawPool, RawStream, StreamFlags,
};
use crate::error::{Error, Result};

/// Loads libcuda.so.1, initializes the driver and returns the backend.
pub fn open() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(CudaBackend::new()?))
}

/// The CUDA driver backend.
pub struct CudaBackend {
    driver: &'static Driver,
    version: i32,
    devices: Vec<Device>,
    streams: Mutex<HashMap<u64, Arc<StreamEntry>>>,
    /// Streams hipmem destroyed, kept for its next `stream_create` instead of
    /// going back to the driver: the driver would hand the same handle to
    /// the next stream anyone creates, and a stale handle of hipmem's must
    /// stay an error (the driver has no check of its own: a destroyed
    /// stream's handle crashes it). As many as were ever live at once.
    retired: Mutex<Vec<Arc<StreamEntry>>>,
    events: Mutex<HashMap<u64, Arc<EventEntry>>>,
    /// Driver pools handed out (created ones and devices' default pools).
    driver_pools: driver_pools::PoolSet,
    /// hipmem's physical allocations (lists of driver allocations) and mappings.
    vmm: virtual_memory::CudaVmm,
}

impl fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CudaBackend")
            .field("library", &self.driver.library_name)
            .field("version", &self.version)
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// Loads the driver, initializes it and lists the devices (their primary
    /// contexts are retained on first use).
    pub fn new() -> Result<CudaBackend> {
        let d = Driver::get()?;
        result::init(d).map_err(|e| Error::NotInitialized(e.message().to_owned()))?;
        let version = result::driver_version(d)?;
        let count = result::device_count(d)?;
        let mut backend = CudaBackend {
            driver: d,
            version,
            devices: Vec::with_capacity(count.max(0) as usize),
            streams: Mutex::new(HashMap::new()),
            retired: Mutex::new(Vec::new()),
            events: Mutex::new(HashMap::new()),
            driver_pools: Mutex::new(std::collections::HashSet::new()),
            vmm: virtual_memory::CudaVmm::default(),
        };
        // On an error below, dropping `backend` releases what was retained.
        // Primary contexts are retained on first use (`Device::ctx`).
        for ordinal in 0..count.max(0) {
            let cu = result::device_get(d, ordinal)?;
            let sms = result::device_attribute(d, cu, driver::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?;
            backend.devices.push(Device::new(ordinal as usize, cu, sms.max(1) as u32));
        }
        Ok(backend)
    }

    /// The driver version as `cuDriverGetVersion` reports it (13000 = 13.0).
    pub fn driver_version(&self) -> i32 {
        self.version
    }

    /// The context of a stream made outside hipmem (the caller says it is
    /// live). InvalidHandle where hipmem destroyed it, where no stream can
    /// lie at the address, or where the driver says it is none.
    fn foreign_stream_ctx(&self, handle: u64) -> Result<driver::CUcontext> {
        if lock(&self.retired).iter().any(|e| e.raw.0 as u64 == handle) {
            return Err(Error::InvalidHandle(format!("stream {handle:#x} was destroyed")));
        }
        if handle % 8 != 0 || !readable(handle, 64) {
            return Err(Error::InvalidHandle(format!(
                "stream {handle:#x} is not a stream: no live stream lies at that address"
            )));
        }
        let _any = self.any_bound()?;
        let mut ctx: driver::CUcontext = std::ptr::null_mut();
        // SAFETY: the handle is one the caller says is a live stream, in
        // readable memory (checked above); the driver reads it and writes
        // one context handle to `ctx`, a valid out-pointer.
        let r = unsafe { (self.driver.cuStreamGetCtx)(handle as usize as driver::CUstream, &mut ctx) };
        self.check(r, || format!("cuStreamGetCtx({handle:#x})"))
            .map_err(|e| Error::InvalidHandle(format!("stream {handle:#x} is not a live stream: {e}")))?;
        Ok(ctx)
    }

    /// The device of a live context: a primary context hipmem retained
    /// without a driver call, any other (one the program made, or the
    /// primary context of a device hipmem has not used yet) asked of the
    /// driver with the context current for a moment. None: a device this
    /// backend does not see.
    fn device_of_context(&self, ctx: driver::CUcontext) -> Result<Option<usize>> {
        if let Some(d) = self.devices.iter().find(|d| d.retained_ctx().is_some_and(|c| c.0 == ctx)) {
            return Ok(Some(d.ordinal));
        }
        let cu = {
            let _in = bind_context(self.driver, ctx)?;
            result::ctx_get_device(self.driver)?
        };
        Ok(self.devices.iter().find(|d| d.cu == cu).map(|d| d.ordinal))
    }

    fn device(&self, device: usize) -> Result<&Device> {
        self.devices.get(device).ok_or_else(|| {
            Error::InvalidDevice(format!(
                "device {device} does not exist (the cuda backend has {})",
                self.devices.len()
            ))
        })
    }

    /// The device, with its primary context current on this thread until
    /// the result drops.
    fn bound(&self, device: usize) -> Result<OnDevice<'_>> {
        let dev = self.device(device)?;
        let ctx = bind_context(self.driver, dev.ctx(self.driver)?.0)?;
        Ok(OnDevice { dev, _ctx: ctx })
    }

    /// Some context current for a call that names no device: the caller's
    /// own where it has one, else one hipmem already retained (device 0's
    /// where none is), until the result drops.
    fn any_bound(&self) -> Result<Bound> {
        bind_any_context(self.driver, || match self.devices.iter().find_map(|d| d.retained_ctx()) {
            Some(c) => Ok(c.0),
            None => Ok(self.device(0)?.ctx(self.driver)?.0),
        })
    }

    fn check(&self, code: driver::CUresult, what: impl FnOnce() -> String) -> Result<()> {
        result::check(self.driver, code, what)
    }

    /// A driver pool this backend knows (created or a device's default).
    fn known_pool(&self, pool: RawPool) -> Result<driver::CUmemoryPool> {
        if !lock(&self.driver_pools).contains(&pool.handle) {
            return Err(Error::InvalidValue(format!(
                "driver memory pool {:#x} does not exist or was destroyed",
                pool.handle
            )));
        }
        Ok(pool.handle as driver::CUmemoryPool)
    }

    /// A driver pool this backend knows, with its device's context current
    /// until the guard drops.
    fn driver_pool(&self, pool: RawPool) -> Result<(driver::CUmemoryPool, OnDevice<'_>)> {
        let p = self.known_pool(pool)?;
        Ok((p, self.bound(pool.device)?))
    }

    /// Resolves `stream` and makes its device's context current.
    /// A new stream of `device` for hipmem (entered in the table): one
    /// hipmem destroyed earlier with these flags and priority, taken back
    /// into use (see `retired`), else one `create` makes in the device's
    /// context (current here).
    fn new_stream(
        &self,
        device: usize,
        cu_flags: u32,
        priority: i32,
        create: impl FnOnce() -> Result<driver::CUstream>,
    ) -> Result<RawStream> {
        let dev = self.bound(device)?;
        let recycled = {
            let mut retired = lock(&self.retired);
            let at = retired
                .iter()
                .position(|e| e.device == device && e.cu_flags == cu_flags && e.priority == priority);
            at.map(|i| retired.swap_remove(i))
        };
        let entry = match recycled {
            Some(e) => e,
            None => Arc::new(StreamEntry {
                driver: self.driver,
                device,
                ctx: dev.ctx(self.driver)?,
                raw: Handle(create()?),
                cu_flags,
                priority,
                owned: AtomicBool::new(true),
            }),
        };
        let handle = entry.raw.0 as u64;
        lock(&self.streams).insert(handle, entry);
        Ok(RawStream { device, handle })
    }

    fn target(&self, stream: RawStream) -> Result<Target<'_>> {
        let dev = self.device(stream.device)?;
        let (raw, entry) = if stream.handle == 0 {
            (std::ptr::null_mut(), None)
        } else {
            let entry = lock(&self.streams).get(&stream.handle).cloned();
            match entry {
                Some(e) if e.device == stream.device => (e.raw.0, Some(e)),
                Some(e) => {
                    return Err(Error::InvalidHandle(format!(
                        "stream {:#x} belongs to device {}, not device {}",
                        stream.handle, e.device, stream.device
                    )));
                }
                None => {
                    return Err(Error::InvalidHandle(format!(
                        "stream {:#x} does not exist or was destroyed",
                        stream.handle
                    )));
                }
            }
        };
        let ctx = bind_context(self.driver, dev.ctx(self.driver)?.0)?;
        Ok(Target { dev, raw, _entry: entry, _ctx: ctx })
    }

    fn event(&self, event: RawEvent) -> Result<Arc<EventEntry>> {
        let found = lock(&self.events).get(&event.handle).cloned();
        match found {
            Some(e) if e.device == event.device => Ok(e),
            _ => Err(Error::InvalidHandle(format!(
                "event {:#x} of device {} does not exist or was destroyed",
                event.handle, event.device
            ))),
        }
    }

    /// The device that owns `ptr`, as the driver knows it; `None` where the
    /// driver does not know the address.
    fn device_of(&self, ptr: DevicePtr) -> Option<&Device> {
        // cuPointerGetAttribute wants some context current on the thread: the
        // caller's own, else one already retained (device 0's where none is;
        // none is made for another device just to ask).
        let _ctx = self.any_bound().ok()?;
        let ordinal = result::pointer_device_ordinal(self.driver, ptr.0).ok()?;
        self.devices.iter().find(|d| d.cu == ordinal)
    }

    /// The device whose context a synchronous copy runs in: the owner of the
    /// device-side address, else device 0 (the driver then validates it).
    fn copy_device(&self, ptr: DevicePtr) -> Result<OnDevice<'_>> {
        let dev = match self.device_of(ptr) {
            Some(dev) => dev,
            None => self.device(0)?,
        };
        let ctx = bind_context(self.driver, dev.ctx(self.driver)?.0)?;
        Ok(OnDevice { dev, _ctx: ctx })
    }

    /// Waits until every device has run all the work queued on it.
    pub(crate) fn synchronize_all(&self) -> Result<()> {
        for dev in &self.devices {
            self.synchronize(dev)?;
        }
        Ok(())
    }

    /// Waits for the device's work; a device whose context hipmem never
    /// retained has none of hipmem's (and no context is made for it).
    fn synchronize(&self, dev: &Device) -> Result<()> {
        let Some(ctx) = dev.retained_ctx() else { return Ok(()) };
        let _ctx = bind_context(self.driver, ctx.0)?;
        // SAFETY: the primary context is retained by `self` and current on this thread.
        unsafe {
            result::ctx_synchronize(self.driver, ctx.0, || {
                format!("cuCtxSynchronize on device {}", dev.ordinal)
            })
        }
    }

    fn to_usize(value: u64, what: &str) -> Result<usize> {
        usize::try_from(value).map_err(|_| Error::InvalidValue(format!("{what}: {value} does not fit usize")))
    }
}

impl Drop for CudaBackend {
    fn drop(&mut self) {
        let d = self.driver;
        for dev in &self.devices {
            if let Err(e) = self.synchronize(dev) {
                tracing::warn!(target: "hipmem", "synchronizing device {} failed in Drop: {e}", dev.ordinal);
            }
        }
        // Streams and events go before their contexts.
        lock(&self.streams).clear();
        lock(&self.retired).clear();
        lock(&self.events).clear();
        for dev in &self.devices {
            let Some(ctx) = dev.retained_ctx() else { continue };
            if let Some(k) = dev.kernels.get() {
                if let Ok(_ctx) = bind_context(d, ctx.0) {
                    // SAFETY: the module was loaded in this context; no launch can
                    // follow, as the backend is being dropped.
                    let r = unsafe { (d.cuModuleUnload)(k.module.0) };
                    if let Err(e) = result::check(d, r, || "cuModuleUnload(kernels.ptx)".into()) {
                        tracing::warn!(target: "hipmem", "{e}");
                    }
                }
            }
            // SAFETY: balances the retain in `new`; nothing uses the context after.
            if let Err(e) = unsafe { result::primary_ctx_release(d, dev.cu) } {
                tracing::warn!(target: "hipmem", "releasing the primary context failed in Drop: {e}");
            }
        }
    }
}

/// Runs a [`HostCallback`] that `launch_host_func` handed to the driver.
unsafe extern "C" fn host_func_trampoline(user_data: *mut c_void) {
    if user_data.is_null() {
        return;
    }
    // SAFETY: `user_data` is the `Box<HostCallback>` leaked by
    // `launch_host_func`; the driver calls this function exactly once with it.
    let callback = unsafe { Box::from_raw(user_data.cast::<HostCallback>()) };
    // A panic must not unwind into the driver.
    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(move || (*callback)())) {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into());
        tracing::error!(target: "hipmem", "a host callback panicked: {message}");
        // Dropping the payload could itself panic.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
}

impl Backend for CudaBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn description(&self) -> String {
        format!(
            "cuda: driver {}.{}, {} device(s)",
            self.version / 1000,
            (self.version % 1000) / 10,
            self.devices.len()
        )
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device_properties(&self, device: usize) -> Result<DeviceProperties> {
        let dev = self.device(device)?;
        let d = self.driver;
        let attr = |a| result::device_attribute(d, dev.cu, a);
        let flag = |a| attr(a).map(|v| v != 0);
        let virtual_memory = flag(driver::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)?;
        let (vmm_granularity, vmm_recommended_granularity) = if virtual_memory {
            let prop = driver::CUmemAllocationProp::pinned_on_device(dev.cu);
            let g = |option| result::allocation_granularity(d, &prop, option).unwrap_or(0);
            (g(driver::CU_MEM_ALLOC_GRANULARITY_MINIMUM), g(driver::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        } else {
            (0, 0)
        };
        Ok(DeviceProperties {
            ordinal: device,
            name: result::device_name(d, dev.cu)?,
            total_memory: result::device_total_mem(d, dev.cu)?,
            compute_capability: (
                attr(driver::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?.max(0) as u32,
                attr(driver::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?.max(0) as u32,
            ),
            multiprocessor_count: attr(driver::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(0) as u32,
            capabilities: DeviceCapabilities {
                memory_pools: flag(driver::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED)?,
                virtual_memory,
                managed_memory: flag(driver::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY)?,
                concurrent_managed_access: flag(driver::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)?,
                can_map_host_memory: flag(driver::CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)?,
                unified_addressing: flag(driver::CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING)?,
                vmm_granularity,
                vmm_recommended_granularity,
            },
        })
    }

    fn mem_get_info(&self, device: usize) -> Result<MemInfo> {
        let _ctx = self.bound(device)?;
        let (free, total) =
            result::mem_get_info(self.driver).map_err(|e| e.context(format_args!("device {device}")))?;
        Ok(MemInfo { free, total })
    }

    fn make_current(&self, device: usize) -> Result<()> {
        let dev = self.device(device)?;
        let ctx = dev.ctx(self.driver)?;
        // SAFETY: the device's primary context, retained by this backend
        // (and left current on purpose: this is hipSetDevice).
        unsafe { result::ctx_set_current(self.driver, ctx.0) }
    }

    fn thread_device(&self) -> Option<usize> {
        let ctx = result::ctx_get_current(self.driver).ok()?;
        if ctx.is_null() {
            return None;
        }
        self.device_of_context(ctx).ok().flatten()
    }

    fn device_synchronize(&self, device: usize) -> Result<()> {
        let dev = self.device(device)?;
        self.synchronize(dev)
    }

    fn mem_alloc(&self, device: usize, size: u64) -> Result<DevicePtr> {
        let _ctx = self.bound(device)?;
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes".into()));
        }
        let bytes = Self::to_usize(size, "allocation size")?;
        let p = result::mem_alloc(self.driver, bytes, || {
            format!("cuMemAlloc_v2({size} bytes) on device {device}")
        })?;
        Ok(DevicePtr(p))
    }

    fn mem_free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        let dev = self.bound(device)?;
        match result::pointer_device_ordinal(self.driver, ptr.0) {
            Ok(owner) if owner != dev.cu => {
                return Err(Error::InvalidValue(format!(
                    "{ptr} belongs to device {owner}, not device {device}"
                )));
            }
            Ok(_) => {}
            Err(e) => {
                return Err(Error::InvalidValue(format!(
                    "{ptr} is not a live allocation on device {device}: {}",
                    e.message()
                )));
            }
        }
        // No queued work of the device may touch the memory once it is freed.
        self.synchronize(&dev)?;
        // SAFETY: the device's work has drained (above).
        unsafe { result::mem_free(self.driver, ptr.0, || format!("cuMemFree_v2({ptr}) on device {device}")) }
    }

    fn copy_host_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let dev = self.copy_device(dst)?;
        // SAFETY: `src` is a live slice of `src.len()` readable bytes for the
        // whole (synchronous) call; the driver validates `dst`.
        let r = unsafe { (self.driver.cuMemcpyHtoD_v2)(dst.0, src.as_ptr().cast(), src.len()) };
        self.check(r, || format!("cuMemcpyHtoD_v2({dst}, {} bytes) on device {}", src.len(), dev.ordinal))
    }

    fn copy_device_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let dev = self.copy_device(src)?;
        let len = dst.len();
        // SAFETY: `dst` is a live, exclusively borrowed slice of `len` writable
        // bytes for the whole (synchronous) call; the driver validates `src`.
        let r = unsafe { (self.driver.cuMemcpyDtoH_v2)(dst.as_mut_ptr().cast(), src.0, len) };
        self.check(r, || format!("cuMemcpyDtoH_v2({src}, {len} bytes) on device {}", dev.ordinal))
    }

    fn copy_device_to_device(&self, dst: DevicePtr, src: DevicePtr, size: u64) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let bytes = Self::to_usize(size, "copy size")?;
        let dev = self.copy_device(dst)?;
        // SAFETY: device addresses only; the driver validates them.
        let r = unsafe { (self.driver.cuMemcpyDtoD_v2)(dst.0, src.0, bytes) };
        self.check(r, || format!("cuMemcpyDtoD_v2({dst} <- {src}, {size} bytes) on device {}", dev.ordinal))?;
        // A device-to-device copy is asynchronous to the host: wait for it on
        // the legacy null stream it was queued on.
        // SAFETY: the null stream of the current context.
        let r = unsafe { (self.driver.cuStreamSynchronize)(std::ptr::null_mut()) };
        self.check(r, || format!("cuStreamSynchronize(null stream) on device {}", dev.ordinal))
    }

    fn copy_host_to_device_async(&self, dst: DevicePtr, src: HostSpan, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        if src.is_empty() {
            return Ok(());
        }
        let len = Self::to_usize(src.len(), "copy size")?;
        // SAFETY: `HostSpan`'s contract keeps the host memory readable until the
        // queued copy has completed; the driver validates `dst` and the stream
        // is live for the call (held by `t`).
        let r = unsafe { (self.driver.cuMemcpyHtoDAsync_v2)(dst.0, src.as_ptr().cast(), len, t.raw) };
        self.check(r, || format!("cuMemcpyHtoDAsync_v2({dst}, {len} bytes) on device {}", t.dev.ordinal))
    }

    fn copy_device_to_host_async(&self, dst: HostSpan, src: DevicePtr, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        let len = Self::to_usize(dst.len(), "copy size")?;
        // SAFETY: `HostSpan`'s contract keeps the host memory writable and
        // unaliased until the queued copy has completed; the driver validates
        // `src`.
        let r = unsafe { (self.driver.cuMemcpyDtoHAsync_v2)(dst.as_mut_ptr().cast(), src.0, len, t.raw) };
        self.check(r, || format!("cuMemcpyDtoHAsync_v2({src}, {len} bytes) on device {}", t.dev.ordinal))
    }

    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
        stream: RawStream,
    ) -> Result<()> {
        let t = self.target(stream)?;
        if size == 0 {
            return Ok(());
        }
        let bytes = Self::to_usize(size, "copy size")?;
        // SAFETY: device addresses only (validated by the driver); live stream.
        let r = unsafe { (self.driver.cuMemcpyDtoDAsync_v2)(dst.0, src.0, bytes, t.raw) };
        self.check(r, || {
            format!("cuMemcpyDtoDAsync_v2({dst} <- {src}, {size} bytes) on device {}", t.dev.ordinal)
        })
    }

    fn memset_async(&self, dst: DevicePtr, value: FillValue, count: u64, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        count
            .checked_mul(value.element_size())
            .ok_or_else(|| Error::InvalidValue(format!("memset: {count} elements overflow")))?;
        if count == 0 {
            return Ok(());
        }
        let n = Self::to_usize(count, "memset count")?;
        let d = self.driver;
        // SAFETY: device addresses only (validated by the driver); live stream.
        let (r, name) = unsafe {
            match value {
                FillValue::U8(v) => ((d.cuMemsetD8Async)(dst.0, v, n, t.raw), "cuMemsetD8Async"),
                FillValue::U16(v) => ((d.cuMemsetD16Async)(dst.0, v, n, t.raw), "cuMemsetD16Async"),
                FillValue::U32(v) => ((d.cuMemsetD32Async)(dst.0, v, n, t.raw), "cuMemsetD32Async"),
            }
        };
        self.check(r, || format!("{name}({dst}, {count} elements) on device {}", t.dev.ordinal))
    }

    fn stream_create(&self, device: usize, flags: StreamFlags) -> Result<RawStream> {
        let cu_flags =
            if flags.non_blocking { driver::CU_STREAM_NON_BLOCKING } else { driver::CU_STREAM_DEFAULT };
        self.new_stream(device, cu_flags, 0, || {
            result::stream_create(self.driver, cu_flags, || {
                format!("cuStreamCreate(flags {cu_flags}) on device {device}")
            })
        })
    }

    fn stream_destroy(&self, stream: RawStream) -> Result<()> {
        if stream.handle == 0 {
            return Err(Error::InvalidHandle("the null stream cannot be destroyed".into()));
        }
        self.device(stream.device)?;
        let mut streams = lock(&self.streams);
        let entry = match streams.get(&stream.handle) {
            Some(e) if e.device == stream.device => streams.remove(&stream.handle),
            Some(e) => {
                return Err(Error::InvalidHandle(format!(
                    "stream {:#x} belongs to device {}, not device {}",
                    stream.handle, e.device, stream.device
                )));
            }
            None => None,
        };
        drop(streams);
        let entry = entry.ok_or_else(|| {
            Error::InvalidHandle(format!("stream {:#x} does not exist or was destroyed", stream.handle))
        })?;
        if entry.owned.load(Ordering::Acquire) {
            // Queued work runs on; the stream waits for hipmem's next one.
            lock(&self.retired).push(entry);
            return Ok(());
        }
        // An adopted stream its user asked hipmem to destroy.
        entry.owned.store(true, Ordering::Release);
        destroy_entry(entry, StreamEntry::destroy_now)
    }

    fn stream_device(&self, handle: u64) -> Result<usize> {
        if let Some(e) = lock(&self.streams).get(&handle) {
            return Ok(e.device);
        }
        let ctx = self.foreign_stream_ctx(handle)?;
        self.device_of_context(ctx)?.ok_or_else(|| {
            Error::InvalidHandle(format!(
                "stream {handle:#x} belongs to a device the cuda backend does not see"
            ))
        })
    }

    fn stream_adopt(&self, device: usize, handle: u64) -> Result<StreamFlags> {
        let dev = self.bound(device)?;
        if let Some(e) = lock(&self.streams).get(&handle) {
            if e.device != device {
                return Err(Error::InvalidHandle(format!(
                    "stream {handle:#x} belongs to device {}, not device {device}",
                    e.device
                )));
            }
            return Ok(StreamFlags { non_blocking: e.cu_flags & driver::CU_STREAM_NON_BLOCKING != 0 });
        }
        let ctx = self.foreign_stream_ctx(handle)?;
        let raw = handle as usize as driver::CUstream;
        let own = dev.ctx(self.driver)?;
        if ctx != own.0 {
            return Err(Error::InvalidHandle(
                match self.devices.iter().find(|d| d.retained_ctx().is_some_and(|c| c.0 == ctx)) {
                    Some(other) => {
                        format!("stream {handle:#x} belongs to device {}, not device {device}", other.ordinal)
                    }
                    None => format!(
                        "stream {handle:#x} belongs to a context other than device {device}'s primary context (hipmem works in primary contexts)"
                    ),
                },
            ));
        }
        let mut cu_flags: std::ffi::c_uint = 0;
        // SAFETY: `raw` is a live stream (the driver named its context
        // above); `cu_flags` is a valid out-pointer.
        let r = unsafe { (self.driver.cuStreamGetFlags)(raw, &mut cu_flags) };
        self.check(r, || format!("cuStreamGetFlags({handle:#x})"))?;
        let entry = StreamEntry {
            driver: self.driver,
            device,
            ctx: own,
            raw: Handle(raw),
            cu_flags,
            priority: 0,
            owned: AtomicBool::new(false),
        };
        lock(&self.streams).insert(handle, Arc::new(entry));
        Ok(StreamFlags { non_blocking: cu_flags & driver::CU_STREAM_NON_BLOCKING != 0 })
    }

    fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        // SAFETY: live stream of the current context (or its null stream).
        let r = unsafe { (self.driver.cuStreamSynchronize)(t.raw) };
        self.check(r, || format!("cuStreamSynchronize({:#x}) on device {}", stream.handle, t.dev.ordinal))
    }

    fn stream_query(&self, stream: RawStream) -> Result<bool> {
        let t = self.target(stream)?;
        // SAFETY: live stream of the current context (or its null stream).
        let r = unsafe { (self.driver.cuStreamQuery)(t.raw) };
        result::check_ready(self.driver, r, || {
            format!("cuStreamQuery({:#x}) on device {}", stream.handle, t.dev.ordinal)
        })
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        let e = self.event(event)?;
        let t = self.target(stream)?;
        // SAFETY: live stream and live event (both held for the call).
        let r = unsafe { (self.driver.cuStreamWaitEvent)(t.raw, e.raw.0, driver::CU_EVENT_WAIT_DEFAULT) };
        self.check(r, || {
            format!(
                "cuStreamWaitEvent(stream {:#x}, event {:#x}) on device {}",
                stream.handle, event.handle, t.dev.ordinal
            )
        })
    }

    fn launch_host_func(&self, stream: RawStream, callback: HostCallback) -> Result<()> {
        let t = self.target(stream)?;
        let user_data = Box::into_raw(Box::new(callback)).cast::<c_void>();
        // SAFETY: live stream; the trampoline takes back ownership of
        // `user_data` when the driver runs it, exactly once.
        let r = unsafe { (self.driver.cuLaunchHostFunc)(t.raw, Some(host_func_trampoline), user_data) };
        if r != driver::CUDA_SUCCESS {
            // The driver did not take the callback: free it here.
            // SAFETY: `user_data` came from Box::into_raw above and was not handed over.
            drop(unsafe { Box::from_raw(user_data.cast::<HostCallback>()) });
        }
        self.check(r, || format!("cuLaunchHostFunc({:#x}) on device {}", stream.handle, t.dev.ordinal))
    }

    fn event_create(&self, device: usize, flags: EventFlags) -> Result<RawEvent> {
        let dev = self.bound(device)?;
        let mut cu_flags = driver::CU_EVENT_DEFAULT;
        if flags.blocking_sync {
            cu_flags |= driver::CU_EVENT_BLOCKING_SYNC;
        }
        if flags.disable_timing {
            cu_flags |= driver::CU_EVENT_DISABLE_TIMING;
        }
        if flags.interprocess {
            cu_flags |= driver::CU_EVENT_INTERPROCESS;
        }
        let raw = result::event_create(self.driver, cu_flags, || {
            format!("cuEventCreate(flags {cu_flags}) on device {device}")
        })?;
        let handle = raw as u64;
        let entry = EventEntry { driver: self.driver, device, ctx: dev.ctx(self.driver)?, raw: Handle(raw) };
        lock(&self.events).insert(handle, Arc::new(entry));
        Ok(RawEvent { device, handle })
    }

    fn event_destroy(&self, event: RawEvent) -> Result<()> {
        let mut events = lock(&self.events);
        let entry = match events.get(&event.handle) {
            Some(e) if e.device == event.device => events.remove(&event.handle),
            _ => None,
        };
        drop(events);
        let entry = entry.ok_or_else(|| {
            Error::InvalidHandle(format!(
                "event {:#x} of device {} does not exist or was destroyed",
                event.handle, event.device
            ))
        })?;
        destroy_entry(entry, EventEntry::destroy_now)
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        let e = self.event(event)?;
        let t = self.target(stream)?;
        if e.device != stream.device {
            return Err(Error::InvalidHandle(format!(
                "event of device {} cannot be recorded on a stream of device {}",
                e.device, stream.device
            )));
        }
        // SAFETY: live event and stream of the current context.
        let r = unsafe { (self.driver.cuEventRecord)(e.raw.0, t.raw) };
        self.check(r, || {
            format!(
                "cuEventRecord(event {:#x}, stream {:#x}) on device {}",
                event.handle, stream.handle, t.dev.ordinal
            )
        })
    }

    fn event_query(&self, event: RawEvent) -> Result<bool> {
        let e = self.event(event)?;
        let _ctx = bind_context(self.driver, e.ctx.0)?;
        // SAFETY: live event (held for the call).
        let r = unsafe { (self.driver.cuEventQuery)(e.raw.0) };
        result::check_ready(self.driver, r, || format!("cuEventQuery({:#x})", event.handle))
    }

    fn event_synchronize(&self, event: RawEvent) -> Result<()> {
        let e = self.event(event)?;
        let _ctx = bind_context(self.driver, e.ctx.0)?;
        // SAFETY: live event (held for the call).
        let r = unsafe { (self.driver.cuEventSynchronize)(e.raw.0) };
        self.check(r, || format!("cuEventSynchronize({:#x})", event.handle))
    }

    fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32> {
        let (s, e) = (self.event(start)?, self.event(end)?);
        let _ctx = bind_context(self.driver, s.ctx.0)?;
        let mut ms = 0f32;
        // SAFETY: live events (held for the call); `ms` is a valid out-pointer.
        let r = unsafe { (self.driver.cuEventElapsedTime)(&mut ms, s.raw.0, e.raw.0) };
        self.check(r, || {
            format!("{}({:#x}, {:#x})", self.driver.event_elapsed_time_symbol, start.handle, end.handle)
        })?;
        Ok(ms)
    }

    fn launch_fill(&self, dst: DevicePtr, value: FillValue, count: u64, stream: RawStream) -> Result<()> {
        self.fill_kernel(dst, value, count, stream)
    }

    fn launch_iota(&self, dst: DevicePtr, count: u64, k: i32, stream: RawStream) -> Result<()> {
        self.iota_kernel(dst, count, k, stream)
    }

    fn launch_delay(
        &self,
        duration: Duration,
        flag: DevicePtr,
        flag_value: u32,
        stream: RawStream,
    ) -> Result<()> {
        self.delay_kernel(duration, flag, flag_value, stream)
    }

    fn virtual_memory(&self) -> Option<&dyn super::virtual_memory::VirtualMemory> {
        Some(self)
    }
    // capability: page-locked host memory (issue 5)
    fn page_locked_memory(&self) -> Option<&dyn super::host_memory::PageLockedMemory> {
        Some(self)
    }
    // capability: managed memory (issue 6)
    fn managed_memory(&self) -> Option<&dyn super::managed_memory::ManagedMemory> {
        Some(self)
    }
    // capability: peer access between devices (issue 15): peer.rs
    fn peer_access(&self) -> Option<&dyn super::peer::PeerAccess> {
        Some(self)
    }
    // device details, stream priorities, pitched memory (issue 15):
    // device_info.rs, copy2d.rs
    fn device_attribute(&self, device: usize, attribute: super::device_info::DeviceAttribute) -> Result<i64> {
        self.cuda_device_attribute(device, attribute)
    }
    fn device_uuid(&self, device: usize) -> Result<[u8; 16]> {
        self.cuda_device_uuid(device)
    }
    fn driver_version(&self) -> Result<i32> {
        Ok(self.version)
    }
    fn stream_priority_range(&self, device: usize) -> Result<super::device_info::PriorityRange> {
        self.cuda_priority_range(device)
    }
    fn stream_create_with_priority(
        &self,
        device: usize,
        flags: StreamFlags,
        priority: i32,
    ) -> Result<RawStream> {
        self.cuda_stream_create_with_priority(device, flags, priority)
    }
    fn stream_priority(&self, stream: RawStream) -> Result<i32> {
        self.cuda_stream_priority(stream)
    }
    fn mem_alloc_pitch(&self, device: usize, width: u64, height: u64) -> Result<(DevicePtr, u64)> {
        self.cuda_mem_alloc_pitch(device, width, height)
    }
    fn copy_2d_async(&self, copy: &super::copy2d::Copy2D, stream: RawStream) -> Result<()> {
        self.cuda_copy_2d_async(copy, stream)
    }
    fn memset_2d_async(
        &self,
        dst: DevicePtr,
        pitch: u64,
        value: u8,
        width: u64,
        height: u64,
        stream: RawStream,
    ) -> Result<()> {
        self.cuda_memset_2d_async(dst, pitch, value, width, height, stream)
    }

    // ---- the driver's own pools (driver_pools.rs) ---------------------------------------

    fn driver_pool_default(&self, device: usize) -> Result<RawPool> {
        self.pool_default(device)
    }

    fn driver_pool_create(&self, device: usize, handle_types: u32, max_size: u64) -> Result<RawPool> {
        self.pool_create(device, handle_types, max_size)
    }

    fn driver_pool_destroy(&self, pool: RawPool) -> Result<()> {
        self.pool_destroy(pool)
    }

    fn driver_pool_alloc_async(&self, pool: RawPool, size: u64, stream: RawStream) -> Result<DevicePtr> {
        self.pool_alloc_async(pool, size, stream)
    }

    fn driver_free_async(&self, ptr: DevicePtr, stream: RawStream) -> Result<()> {
        self.pool_free_async(ptr, stream)
    }

    fn driver_pool_set_attribute(&self, pool: RawPool, attr: i32, value: u64) -> Result<()> {
        self.pool_set_attribute(pool, attr, value)
    }

    fn driver_pool_get_attribute(&self, pool: RawPool, attr: i32) -> Result<u64> {
        self.pool_get_attribute(pool, attr)
    }

    fn driver_pool_trim_to(&self, pool: RawPool, keep: u64) -> Result<()> {
        self.pool_trim_to(pool, keep)
    }

    fn driver_pool_set_access(&self, pool: RawPool, device: usize, flags: u32) -> Result<()> {
        self.pool_set_access(pool, device, flags)
    }

    fn driver_pool_get_access(&self, pool: RawPool, device: usize) -> Result<u32> {
        self.pool_get_access(pool, device)
    }

    fn driver_pool_export_fd(&self, pool: RawPool) -> Result<std::os::fd::OwnedFd> {
        self.pool_export_fd(pool)
    }

    fn driver_pool_import_fd(&self, fd: std::os::fd::BorrowedFd<'_>) -> Result<RawPool> {
        self.pool_import_fd(fd)
    }

    fn driver_pool_export_pointer(&self, ptr: DevicePtr) -> Result<[u8; 64]> {
        self.pool_export_pointer(ptr)
    }

    fn driver_pool_import_pointer(&self, pool: RawPool, data: &[u8; 64]) -> Result<DevicePtr> {
        self.pool_import_pointer(pool, data)
    }

    fn driver_pointer_range(&self, ptr: DevicePtr) -> Result<u64> {
        self.pool_pointer_range(ptr)
    }
}

/// Whether `len` bytes at `addr` (at most 64, clipped to its page) are
/// readable memory of this process. The kernel reads them into a pipe and
/// says EFAULT where they are not, so nothing here faults.
fn readable(addr: u64, len: u64) -> bool {
    const PAGE: u64 = 4096;
    if addr < PAGE {
        return false;
    }
    let len = len.min(64).min(PAGE - addr % PAGE) as usize;
    let mut fds = [0 as std::ffi::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return false;
    }
    // SAFETY: write() only reads `len` bytes at `addr` in the kernel, which
    // reports EFAULT for memory that is not readable; the pipe is empty and
    // holds far more than 64 bytes, so it does not block.
    let n = unsafe { libc::write(fds[1], addr as usize as *const std::ffi::c_void, len) };
    // SAFETY: both descriptors were opened above and are closed once.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    n == len as isize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_without_a_driver_is_an_error_value() {
        // On a machine without libcuda this must be NotInitialized, never a
        // panic; on a GPU machine it opens.
        match open() {
            Ok(backend) => assert_eq!(backend.kind(), BackendKind::Cuda),
            Err(e) => assert!(matches!(e, Error::NotInitialized(_)), "unexpected error {e:?}"),
        }
    }

    #[test]
    fn a_primary_context_is_retained_on_first_use_only() {
        // Without a driver there is nothing to retain.
        let Ok(backend) = CudaBackend::new() else { return };
        assert!(backend.devices.iter().all(|d| d.retained_ctx().is_none()), "retained at startup");
        let Some(last) = backend.devices.len().checked_sub(1) else { return };
        backend.mem_get_info(last).unwrap();
        for d in &backend.devices {
            assert_eq!(d.retained_ctx().is_some(), d.ordinal == last, "device {} of {}", d.ordinal, last + 1);
        }
    }

    #[test]
    fn a_missing_library_is_not_initialized() {
        let err = driver::load(&["libhipmem-no-such-library.so.1"]).expect_err("must fail");
        assert!(matches!(err, Error::NotInitialized(_)), "{err:?}");
        assert!(err.message().contains("libhipmem-no-such-library.so.1"), "{err}");
    }

    #[test]
    fn a_library_without_the_symbols_is_not_initialized() {
        // libc loads everywhere but has no CUDA entry points.
        let err = driver::load(&["libc.so.6"]).expect_err("must fail");
        assert!(matches!(err, Error::NotInitialized(_)), "{err:?}");
        assert!(err.message().contains("has no symbol cu"), "{err}");
    }

    #[test]
    fn cuda_results_map_onto_hip_errors() {
        use driver::*;
        let cases: [(CUresult, i32); 12] = [
            (CUDA_ERROR_INVALID_VALUE, 1),
            (CUDA_ERROR_OUT_OF_MEMORY, 2),
            (CUDA_ERROR_NOT_INITIALIZED, 3),
            (CUDA_ERROR_DEINITIALIZED, 3),
            (CUDA_ERROR_INVALID_DEVICE, 101),
            (CUDA_ERROR_INVALID_HANDLE, 400),
            (CUDA_ERROR_NOT_READY, 600),
            (CUDA_ERROR_CONTEXT_IS_DESTROYED, 709),
            (CUDA_ERROR_NOT_SUPPORTED, 801),
            (CUDA_ERROR_NO_DEVICE, 999),
            (700, 999),
            (12345, 999),
        ];
        for (code, hip) in cases {
            let e = result::error_from_code(code, "m".into());
            assert_eq!(e.code(), hip, "CUresult {code}");
            assert_eq!(e.message(), "m");
        }
    }

    #[test]
    fn error_messages_name_the_call_and_the_driver_text() {
        let m = result::error_message(
            "cuMemAlloc_v2(1099511627776 bytes) on device 0",
            2,
            Some("CUDA_ERROR_OUT_OF_MEMORY"),
            Some("out of memory"),
        );
        assert_eq!(
            m,
            "cuMemAlloc_v2(1099511627776 bytes) on device 0: CUDA_ERROR_OUT_OF_MEMORY: out of memory"
        );
        assert_eq!(result::error_message("cuInit(0)", 77, None, None), "cuInit(0): CUresult 77");
    }

    #[test]
    fn host_callback_panics_stay_on_the_host_side() {
        use std::sync::atomic::AtomicBool;
        static RAN: AtomicBool = AtomicBool::new(false);
        let ok: HostCallback = Box::new(|| RAN.store(true, Ordering::SeqCst));
        // SAFETY: hands the trampoline a leaked Box<HostCallback>, as the driver would.
        unsafe { host_func_trampoline(Box::into_raw(Box::new(ok)).cast()) };
        assert!(RAN.load(Ordering::SeqCst));
        let bad: HostCallback = Box::new(|| panic!("boom"));
        // SAFETY: as above; the panic is caught inside.
        unsafe { host_func_trampoline(Box::into_raw(Box::new(bad)).cast()) };
    }
}
