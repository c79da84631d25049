//! The `hip` backend: the [`Backend`] trait on AMD's HIP runtime.
//!
//! Layers, in the manner of cudarc (and of the `cuda` backend):
//! - `sys`: HIP's types, constants and ROCm 6 struct layouts (with
//!   compile-time size and offset checks), and a table of entry points
//!   loaded at run time from `libamdhip64.so.6` (or `.5`), or from the file
//!   `HIPMEM_HIP_LIBRARY` names; nothing links ROCm;
//! - `result`: `hipError_t` to hipmem's [`Error`] (the same numbers), with
//!   messages that name the call and the runtime's text;
//! - this module: [`HipBackend`]. HIP is a runtime API with a current
//!   device per thread instead of contexts: every call that depends on the
//!   device makes it current for the call (`hipGetDevice`, and
//!   `hipSetDevice` where it differs) and makes the caller's device current
//!   again when the call returns.
//!
//! Capabilities follow the entry points: the core group (devices, memory,
//! copies, memsets, streams, events, host functions, `hipHostMalloc`) must
//! be there; memory pools, pool IPC, virtual memory, managed memory, host
//! registration and peer access are each turned off, never a panic, when one
//! of their entry points is missing (or, for virtual memory, when the
//! runtime is older than ROCm 5.3, whose `hipMemAllocationProp` has another
//! layout); stream priorities and pitched memory fall back to the trait's
//! portable defaults (`device_info.rs`, `copy2d.rs`, `peer.rs`).
//!
//! The built-in kernels are made of HIP calls the runtime already has (AMD
//! code objects cannot be built here): fill is `hipMemsetD8/D16/D32Async`,
//! iota copies values built in page-locked staging memory in stream order,
//! delay is a host function that sleeps followed by a `hipMemsetD32Async` of
//! the flag (see `kernels.rs`).
//!
//! # Loopback
//!
//! `HIPMEM_HIP_LIBRARY=path/to/libhipmem.so` makes this backend drive
//! hipmem's own C ABI, which exports HIP's functions with HIP's layouts: the
//! whole stack then runs through HIP's ABI on whatever backend libhipmem
//! uses underneath (`HIPMEM_HIP_LOOPBACK_BACKEND`: host, cuda or auto, the
//! default; never hip). libhipmem is recognised by its extra export
//! `hipmemSetInnerBackend`, which this backend calls before `hipInit`; a
//! libhipmem that would load itself (its own hip backend pointed at its own
//! file) refuses, so it never recurses.

mod copy2d;
mod device_info;
mod kernels;
mod managed;
mod page_locked;
mod peer;
mod pools;
mod result;
mod sys;
mod virtual_memory;

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, c_char, c_int, c_void};
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{
    Backend, BackendKind, DeviceCapabilities, DeviceProperties, DevicePtr, EventFlags, FillValue,
    HostCallback, HostSpan, MemInfo, RawEvent, RawPool, RawStream, StreamFlags,
};
use crate::error::{Error, Result};
use sys::{Api, HipVersion, hipEvent_t, hipStream_t};

/// The variable naming another library with HIP's ABI to load instead of
/// `libamdhip64` (for example hipmem's own `libhipmem.so`).
pub const LIBRARY_VARIABLE: &str = sys::LIBRARY_VARIABLE;

/// The variable naming the backend libhipmem uses underneath when it is
/// this backend's HIP library (host, cuda or auto; auto when unset).
pub const LOOPBACK_BACKEND_VARIABLE: &str = "HIPMEM_HIP_LOOPBACK_BACKEND";

/// How many hip backends of this copy of hipmem are being opened right now.
static OPENING: AtomicUsize = AtomicUsize::new(0);

/// Whether a hip backend of this copy of hipmem is being opened at this
/// moment. libhipmem's `hipmemSetInnerBackend` asks it: if its own hip
/// backend is what loaded it, the library is loading itself.
pub fn opening_in_this_copy() -> bool {
    OPENING.load(Ordering::SeqCst) > 0
}

struct Opening;

impl Opening {
    fn enter() -> Opening {
        OPENING.fetch_add(1, Ordering::SeqCst);
        Opening
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        OPENING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Loads the HIP runtime, initializes it and returns the backend; an error
/// (one line, saying what was looked for or found) where there is no
/// library or no AMD GPU.
pub fn open() -> Result<Arc<dyn Backend>> {
    Ok(Arc::new(HipBackend::new()?))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn to_usize(value: u64, what: &str) -> Result<usize> {
    usize::try_from(value).map_err(|_| Error::InvalidValue(format!("{what}: {value} does not fit usize")))
}

fn ptr(p: DevicePtr) -> *mut c_void {
    p.0 as usize as *mut c_void
}

/// A stream the backend created or adopted. One it created is destroyed
/// when the last reference goes (normally at once in `stream_destroy`;
/// later if another thread is using it at that moment); an adopted one
/// (made by the HIP runtime's user: PyTorch on ROCm, RCCL) only where
/// `stream_destroy` is asked for it.
#[derive(Debug)]
struct StreamEntry {
    api: &'static Api,
    device: usize,
    raw: u64,
    /// Whether the backend destroys the runtime's stream with the entry.
    owned: AtomicBool,
}

impl StreamEntry {
    /// A stream the backend created.
    fn created(api: &'static Api, device: usize, raw: u64) -> StreamEntry {
        StreamEntry { api, device, raw, owned: AtomicBool::new(true) }
    }

    /// A stream the HIP runtime's user made: destroyed only when asked.
    fn adopted(api: &'static Api, device: usize, raw: u64) -> StreamEntry {
        StreamEntry { api, device, raw, owned: AtomicBool::new(false) }
    }

    fn destroy_now(&self) -> Result<()> {
        let _device = set_device(self.api, self.device)?;
        // SAFETY: `raw` came from hipStreamCreateWithFlags and is destroyed
        // only here, once, when the last reference to the entry goes.
        let r = unsafe { (self.api.core.hipStreamDestroy)(self.raw as usize as hipStream_t) };
        result::check(self.api, r, || format!("hipStreamDestroy({:#x})", self.raw))
    }
}

impl Drop for StreamEntry {
    fn drop(&mut self) {
        if !self.owned.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.destroy_now() {
            tracing::warn!(target: "hipmem", "destroying a HIP stream failed in Drop: {e}");
        }
    }
}

/// An event the backend created; destroyed like [`StreamEntry`].
#[derive(Debug)]
struct EventEntry {
    api: &'static Api,
    device: usize,
    raw: u64,
}

impl EventEntry {
    fn handle(&self) -> hipEvent_t {
        self.raw as usize as hipEvent_t
    }

    fn destroy_now(&self) -> Result<()> {
        let _device = set_device(self.api, self.device)?;
        // SAFETY: `raw` came from hipEventCreateWithFlags and is destroyed only here, once.
        let r = unsafe { (self.api.core.hipEventDestroy)(self.handle()) };
        result::check(self.api, r, || format!("hipEventDestroy({:#x})", self.raw))
    }
}

impl Drop for EventEntry {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_now() {
            tracing::warn!(target: "hipmem", "destroying a HIP event failed in Drop: {e}");
        }
    }
}

/// Removes `entry`'s handle and destroys it now if nobody else holds it.
fn destroy_entry<T>(entry: Arc<T>, destroy_now: impl FnOnce(&T) -> Result<()>) -> Result<()> {
    match Arc::try_unwrap(entry) {
        Ok(entry) => {
            let r = destroy_now(&entry);
            // The runtime object is gone (or the error says why not); don't
            // destroy it a second time in Drop.
            std::mem::forget(entry);
            r
        }
        Err(shared) => {
            drop(shared);
            Ok(())
        }
    }
}

/// A device hipmem made current on the calling thread for one call. When it
/// drops, the thread's device before the call is current again, so the
/// caller's own HIP calls keep the device it chose.
#[must_use = "the device stays current only while the guard lives"]
struct OnDevice {
    api: &'static Api,
    /// The caller's device, where hipmem changed it (`None`: it was already
    /// the one wanted).
    restore: Option<c_int>,
}

impl Drop for OnDevice {
    fn drop(&mut self) {
        let Some(previous) = self.restore else { return };
        // SAFETY: plain value, the device that was current before the call.
        let r = unsafe { (self.api.core.hipSetDevice)(previous) };
        if let Err(e) = result::check(self.api, r, || {
            format!("hipSetDevice({previous}) giving the caller its device back")
        }) {
            tracing::warn!(target: "hipmem", "{e}");
        }
    }
}

/// `device` as a HIP device ordinal.
fn ordinal(device: usize) -> Result<c_int> {
    c_int::try_from(device)
        .map_err(|_| Error::InvalidDevice(format!("device {device} is not a HIP device ordinal")))
}

/// The HIP runtime's current device on the calling thread (`hipGetDevice`).
fn current_device(api: &'static Api) -> Result<c_int> {
    let mut current: c_int = -1;
    // SAFETY: `current` is a valid out-pointer.
    let r = unsafe { (api.core.hipGetDevice)(&mut current) };
    result::check(api, r, || "hipGetDevice".into())?;
    Ok(current)
}

/// Makes `device` the calling thread's current device until the guard drops
/// (one `hipGetDevice` where it already is; also a set and a set back where
/// the caller had another).
fn set_device(api: &'static Api, device: usize) -> Result<OnDevice> {
    let ordinal = ordinal(device)?;
    let current = current_device(api)?;
    if current == ordinal {
        return Ok(OnDevice { api, restore: None });
    }
    // SAFETY: plain value; the runtime validates the ordinal.
    let r = unsafe { (api.core.hipSetDevice)(ordinal) };
    result::check(api, r, || format!("hipSetDevice({device})"))?;
    Ok(OnDevice { api, restore: Some(current) })
}

/// A stream resolved for one call: its device and runtime handle, kept
/// alive until the call returns. The device is current on the thread.
struct Target {
    device: usize,
    raw: hipStream_t,
    _entry: Option<Arc<StreamEntry>>,
    _device: OnDevice,
}

/// What is known about one device.
#[derive(Debug)]
struct Device {
    ordinal: usize,
}

/// The HIP runtime backend.
pub struct HipBackend {
    api: &'static Api,
    runtime_version: Option<HipVersion>,
    driver_version: Option<i32>,
    /// The library is hipmem's own libhipmem (the loopback).
    loopback: bool,
    devices: Vec<Device>,
    streams: Mutex<HashMap<u64, Arc<StreamEntry>>>,
    events: Mutex<HashMap<u64, Arc<EventEntry>>>,
    /// Runtime pools handed out (created ones and devices' default pools).
    driver_pools: Mutex<HashSet<u64>>,
    /// Page-locked staging blocks of the iota kernel.
    staging: kernels::Staging,
    /// Physical allocations handed out (size and device, which HIP does not report).
    vmm: virtual_memory::HipVmm,
}

impl fmt::Debug for HipBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HipBackend")
            .field("library", &self.api.library)
            .field("runtime_version", &self.runtime_version)
            .field("loopback", &self.loopback)
            .field("devices", &self.devices.len())
            .finish_non_exhaustive()
    }
}

impl HipBackend {
    /// Loads the runtime, initializes it and counts the devices; an error
    /// where there is no AMD GPU.
    pub fn new() -> Result<HipBackend> {
        let _opening = Opening::enter();
        let api = Api::get()?;
        let loopback = api.info.hipmemSetInnerBackend.is_some();
        if let Some(set_inner) = api.info.hipmemSetInnerBackend {
            choose_inner_backend(api, set_inner)?;
        }
        let runtime_version = version_of(api.info.hipRuntimeGetVersion).and_then(HipVersion::from_raw);
        let driver_version = version_of(api.info.hipDriverGetVersion);
        let runtime = match runtime_version {
            Some(v) => format!("{} (HIP {v})", api.library),
            None => api.library.clone(),
        };
        // SAFETY: hipInit takes a flags value (0) and has no other preconditions.
        let init = unsafe { (api.core.hipInit)(0) };
        let init = result::check(api, init, || "hipInit(0)".into());
        let mut count: c_int = 0;
        // SAFETY: `count` is a valid out-pointer.
        let r = unsafe { (api.core.hipGetDeviceCount)(&mut count) };
        let counted = result::check(api, r, || "hipGetDeviceCount".into());
        match (init, counted) {
            (Ok(()), Ok(())) if count > 0 => {}
            (init, counted) => {
                let mut why = Vec::new();
                if let Err(e) = init {
                    why.push(e.message().to_string());
                }
                match counted {
                    Err(e) => why.push(e.message().to_string()),
                    Ok(()) => why.push(format!("hipGetDeviceCount: {count} devices")),
                }
                return Err(Error::NotInitialized(format!(
                    "no AMD GPU is present: {runtime} loaded, but {}",
                    why.join("; ")
                )));
            }
        }
        let devices = (0..count as usize).map(|ordinal| Device { ordinal }).collect();
        Ok(HipBackend {
            api,
            runtime_version,
            driver_version,
            loopback,
            devices,
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            driver_pools: Mutex::new(HashSet::new()),
            staging: kernels::Staging::default(),
            vmm: virtual_memory::HipVmm::default(),
        })
    }

    /// The runtime's version (`hipRuntimeGetVersion`), where it says.
    pub fn runtime_version(&self) -> Option<HipVersion> {
        self.runtime_version
    }

    /// The library file that was loaded.
    pub fn library(&self) -> &str {
        &self.api.library
    }

    /// Whether the library is hipmem's own libhipmem (the loopback).
    pub fn is_loopback(&self) -> bool {
        self.loopback
    }

    fn check(&self, code: sys::hipError_t, what: impl FnOnce() -> String) -> Result<()> {
        result::check(self.api, code, what)
    }

    fn device(&self, device: usize) -> Result<&Device> {
        self.devices.get(device).ok_or_else(|| {
            Error::InvalidDevice(format!(
                "device {device} does not exist (the hip backend has {})",
                self.devices.len()
            ))
        })
    }

    /// The device, made current on this thread until the result drops.
    fn bound(&self, device: usize) -> Result<OnDevice> {
        self.device(device)?;
        set_device(self.api, device)
    }

    /// Resolves `stream` and makes its device current.
    fn target(&self, stream: RawStream) -> Result<Target> {
        self.device(stream.device)?;
        let (raw, entry) = if stream.handle == 0 {
            (std::ptr::null_mut(), None)
        } else {
            let entry = lock(&self.streams).get(&stream.handle).cloned();
            match entry {
                Some(e) if e.device == stream.device => (e.raw as usize as hipStream_t, Some(e)),
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
        let on = set_device(self.api, stream.device)?;
        Ok(Target { device: stream.device, raw, _entry: entry, _device: on })
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

    /// `hipPointerGetAttributes(ptr).device`, where the runtime knows `ptr`.
    fn owner_of(&self, p: DevicePtr) -> Option<usize> {
        if p.is_null() {
            return None;
        }
        let mut attributes = sys::hipPointerAttribute_t {
            type_: 0,
            device: -1,
            devicePointer: std::ptr::null_mut(),
            hostPointer: std::ptr::null_mut(),
            isManaged: 0,
            allocationFlags: 0,
        };
        // SAFETY: `attributes` is a valid, writable hipPointerAttribute_t
        // (the same 32 bytes in every ROCm version); the runtime validates `p`.
        let r = unsafe { (self.api.core.hipPointerGetAttributes)(&mut attributes, ptr(p)) };
        if r != sys::hipSuccess {
            return None;
        }
        usize::try_from(attributes.device).ok().filter(|&d| d < self.devices.len())
    }

    /// The device a synchronous copy runs on (the owner of its device-side
    /// address, else device 0, where the runtime then validates it), made current.
    fn copy_device(&self, p: DevicePtr) -> Result<usize> {
        let device = self.owner_of(p).unwrap_or(0);
        let _device = self.bound(device)?;
        Ok(device)
    }

    /// Waits until device `device` has run all the work queued on it.
    fn synchronize(&self, device: usize) -> Result<()> {
        let _device = self.bound(device)?;
        // SAFETY: no arguments; the device is current on this thread.
        let r = unsafe { (self.api.core.hipDeviceSynchronize)() };
        self.check(r, || format!("hipDeviceSynchronize on device {device}"))
    }

    /// Waits until every device has run all the work queued on it.
    pub(crate) fn synchronize_all(&self) -> Result<()> {
        for dev in &self.devices {
            self.synchronize(dev.ordinal)?;
        }
        Ok(())
    }

    /// `hipDeviceGetAttribute(attr, device)`.
    fn attribute(&self, device: usize, attr: sys::hipDeviceAttribute_t) -> Result<i32> {
        let mut v: c_int = 0;
        // SAFETY: valid out-pointer; the runtime validates the attribute and device.
        let r = unsafe { (self.api.core.hipDeviceGetAttribute)(&mut v, attr, device as c_int) };
        self.check(r, || format!("hipDeviceGetAttribute({attr}) on device {device}"))?;
        Ok(v)
    }

    /// The runtime's properties struct, where it has `hipGetDevicePropertiesR0600`.
    fn properties_r0600(&self, device: usize) -> Option<Result<sys::hipDeviceProp_tR0600>> {
        let f = self.api.info.hipGetDevicePropertiesR0600?;
        let mut p = sys::hipDeviceProp_tR0600::zeroed();
        // SAFETY: `p` is a writable struct of the layout the symbol fills (checked above).
        let r = unsafe { f(&mut p, device as c_int) };
        Some(self.check(r, || format!("hipGetDevicePropertiesR0600(device {device})")).map(|()| p))
    }

    fn device_name(&self, device: usize) -> Result<String> {
        let Some(f) = self.api.info.hipDeviceGetName else {
            return Ok(format!("AMD GPU {device}"));
        };
        let mut buf = [0 as c_char; 256];
        // SAFETY: `buf` is writable for the length passed.
        let r = unsafe { f(buf.as_mut_ptr(), buf.len() as c_int, device as c_int) };
        self.check(r, || format!("hipDeviceGetName(device {device})"))?;
        Ok(c_string(&buf))
    }

    fn total_memory(&self, device: usize) -> Result<u64> {
        if let Some(f) = self.api.info.hipDeviceTotalMem {
            let mut bytes = 0usize;
            // SAFETY: valid out-pointer.
            let r = unsafe { f(&mut bytes, device as c_int) };
            self.check(r, || format!("hipDeviceTotalMem(device {device})"))?;
            return Ok(bytes as u64);
        }
        self.mem_get_info(device).map(|m| m.total)
    }

    /// Whether `hipMemAllocationProp` has the layout hipmem declares (ROCm
    /// 5.3+; libhipmem has it).
    fn allocation_prop_layout_known(&self) -> bool {
        self.loopback || self.runtime_version.is_none_or(|v| v.at_least(5, 3))
    }

    /// Whether `hipMemPoolProps::maxSize` exists (ROCm 6.2+; libhipmem has it).
    fn pool_max_size_known(&self) -> bool {
        self.loopback || self.runtime_version.is_none_or(|v| v.at_least(6, 2))
    }

    fn kind_of_library(&self) -> &'static str {
        if self.loopback { "hipmem's libhipmem (loopback)" } else { "AMD's HIP runtime" }
    }
}

/// Reads a version through an optional `int*` entry point.
fn version_of(f: Option<unsafe extern "C" fn(*mut c_int) -> sys::hipError_t>) -> Option<i32> {
    let f = f?;
    let mut v: c_int = 0;
    // SAFETY: valid out-pointer.
    let r = unsafe { f(&mut v) };
    (r == sys::hipSuccess).then_some(v)
}

/// Tells libhipmem (the loopback library) which backend to use underneath.
fn choose_inner_backend(
    api: &Api,
    set_inner: unsafe extern "C" fn(*const c_char) -> sys::hipError_t,
) -> Result<()> {
    let inner = std::env::var(LOOPBACK_BACKEND_VARIABLE).unwrap_or_else(|_| "auto".into());
    let name = CString::new(inner.trim()).map_err(|_| {
        Error::InvalidValue(format!("{LOOPBACK_BACKEND_VARIABLE}={inner:?} contains a NUL byte"))
    })?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let r = unsafe { set_inner(name.as_ptr()) };
    result::check(api, r, || {
        format!(
            "{} is hipmem's own libhipmem, and it could not run on the backend {LOOPBACK_BACKEND_VARIABLE} names \
             ({inner:?}) underneath: that backend does not open here, or libhipmem is loading itself (its own hip \
             backend points at it), or its runtime is already open on another backend; hipmemSetInnerBackend",
            api.library
        )
    })
    .map_err(|e| Error::NotInitialized(e.message().to_string()))
}

/// The text of a NUL-terminated (or full) `char` buffer.
fn c_string(buf: &[c_char]) -> String {
    let bytes: Vec<u8> = buf.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Drop for HipBackend {
    fn drop(&mut self) {
        if let Err(e) = self.synchronize_all() {
            tracing::warn!(target: "hipmem", "synchronizing the HIP devices failed in Drop: {e}");
        }
        lock(&self.streams).clear();
        lock(&self.events).clear();
        self.staging.release_all(self);
    }
}

/// Runs a [`HostCallback`] that `launch_host_func` handed to the runtime.
unsafe extern "C" fn host_func_trampoline(user_data: *mut c_void) {
    if user_data.is_null() {
        return;
    }
    // SAFETY: `user_data` is the `Box<HostCallback>` leaked by
    // `launch_host_func`; the runtime calls this function exactly once with it.
    let callback = unsafe { Box::from_raw(user_data.cast::<HostCallback>()) };
    // A panic must not unwind into the runtime.
    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(move || (*callback)())) {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "non-string panic payload".into());
        tracing::error!(target: "hipmem", "a host callback panicked: {message}");
        let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(payload)));
    }
}

/// `hipStreamAddCallback`'s form of [`host_func_trampoline`].
unsafe extern "C" fn stream_callback_trampoline(
    _stream: hipStream_t,
    _status: sys::hipError_t,
    user_data: *mut c_void,
) {
    // SAFETY: the same contract as `host_func_trampoline`.
    unsafe { host_func_trampoline(user_data) }
}

impl Backend for HipBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Hip
    }

    fn description(&self) -> String {
        let version = match self.runtime_version {
            Some(v) => format!("HIP runtime {v}"),
            None => "HIP runtime of unknown version".to_string(),
        };
        let driver = match self.driver_version {
            Some(d) => format!(", driver version {d}"),
            None => String::new(),
        };
        format!(
            "hip: {version}{driver}, {} from {}, {} device(s)",
            self.kind_of_library(),
            self.api.library,
            self.devices.len()
        )
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device_properties(&self, device: usize) -> Result<DeviceProperties> {
        self.device(device)?;
        let attr = |a| self.attribute(device, a);
        let props = self.properties_r0600(device).transpose()?;
        // From the properties struct where there is one, else from attributes.
        let flag = |from_props: Option<c_int>, a| match from_props {
            Some(v) => Ok(v != 0),
            None => attr(a).map(|v| v != 0),
        };
        let p = props.as_ref();
        let name = match p {
            Some(p) => c_string(&p.name),
            None => self.device_name(device)?,
        };
        let total_memory = match p {
            Some(p) => p.totalGlobalMem as u64,
            None => self.total_memory(device)?,
        };
        let major =
            p.map(|p| p.major).map_or_else(|| attr(sys::hipDeviceAttributeComputeCapabilityMajor), Ok)?;
        let minor =
            p.map(|p| p.minor).map_or_else(|| attr(sys::hipDeviceAttributeComputeCapabilityMinor), Ok)?;
        let sms = p
            .map(|p| p.multiProcessorCount)
            .map_or_else(|| attr(sys::hipDeviceAttributeMultiprocessorCount), Ok)?;
        // Capabilities: the entry points must be there, and the device must
        // say yes. An attribute the runtime does not know reads as "no".
        let memory_pools = self.api.pools.is_ok()
            && flag(p.map(|p| p.memoryPoolsSupported), sys::hipDeviceAttributeMemoryPoolsSupported)
                .unwrap_or(false);
        let managed_memory = self.api.managed.is_ok()
            && flag(p.map(|p| p.managedMemory), sys::hipDeviceAttributeManagedMemory).unwrap_or(false);
        let concurrent_managed_access = managed_memory
            && flag(p.map(|p| p.concurrentManagedAccess), sys::hipDeviceAttributeConcurrentManagedAccess)
                .unwrap_or(false);
        let virtual_memory = self.api.vmm.is_ok()
            && self.allocation_prop_layout_known()
            && attr(sys::hipDeviceAttributeVirtualMemoryManagementSupported).is_ok_and(|v| v != 0);
        let (vmm_granularity, vmm_recommended_granularity) = if virtual_memory {
            let g = |recommended| self.vmm_granularity(device, recommended).unwrap_or(0);
            (g(false), g(true))
        } else {
            (0, 0)
        };
        Ok(DeviceProperties {
            ordinal: device,
            name,
            total_memory,
            compute_capability: (major.max(0) as u32, minor.max(0) as u32),
            multiprocessor_count: sms.max(0) as u32,
            capabilities: DeviceCapabilities {
                memory_pools,
                virtual_memory,
                managed_memory,
                concurrent_managed_access,
                can_map_host_memory: flag(
                    p.map(|p| p.canMapHostMemory),
                    sys::hipDeviceAttributeCanMapHostMemory,
                )?,
                unified_addressing: flag(
                    p.map(|p| p.unifiedAddressing),
                    sys::hipDeviceAttributeUnifiedAddressing,
                )?,
                vmm_granularity,
                vmm_recommended_granularity,
            },
        })
    }

    fn mem_get_info(&self, device: usize) -> Result<MemInfo> {
        let _device = self.bound(device)?;
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: both are valid out-pointers; the device is current.
        let r = unsafe { (self.api.core.hipMemGetInfo)(&mut free, &mut total) };
        self.check(r, || format!("hipMemGetInfo on device {device}"))?;
        Ok(MemInfo { free: free as u64, total: total as u64 })
    }

    fn thread_device(&self) -> Option<usize> {
        let current = current_device(self.api).ok()?;
        usize::try_from(current).ok().filter(|&d| d < self.devices.len())
    }

    fn make_current(&self, device: usize) -> Result<()> {
        self.device(device)?;
        let ordinal = ordinal(device)?;
        // SAFETY: plain value; the runtime validates the ordinal (and it stays
        // current on purpose: this is hipSetDevice).
        let r = unsafe { (self.api.core.hipSetDevice)(ordinal) };
        self.check(r, || format!("hipSetDevice({device})"))
    }

    fn device_synchronize(&self, device: usize) -> Result<()> {
        self.device(device)?;
        self.synchronize(device)
    }

    fn mem_alloc(&self, device: usize, size: u64) -> Result<DevicePtr> {
        let _device = self.bound(device)?;
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes".into()));
        }
        let bytes = to_usize(size, "allocation size")?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; the device is current.
        let r = unsafe { (self.api.core.hipMalloc)(&mut p, bytes) };
        self.check(r, || format!("hipMalloc({size} bytes) on device {device}"))?;
        Ok(DevicePtr(p as u64))
    }

    fn mem_free(&self, device: usize, p: DevicePtr) -> Result<()> {
        self.device(device)?;
        match self.owner_of(p) {
            Some(owner) if owner != device => {
                return Err(Error::InvalidValue(format!(
                    "{p} belongs to device {owner}, not device {device}"
                )));
            }
            Some(_) => {}
            None => {
                return Err(Error::InvalidValue(format!(
                    "{p} is not a live allocation on device {device} (hipPointerGetAttributes does not know it)"
                )));
            }
        }
        // No queued work of the device may touch the memory once it is freed.
        self.synchronize(device)?;
        // SAFETY: a live allocation of the device (checked above), whose work has drained.
        let r = unsafe { (self.api.core.hipFree)(ptr(p)) };
        self.check(r, || format!("hipFree({p}) on device {device}"))
    }

    fn copy_host_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        if src.is_empty() {
            return Ok(());
        }
        let device = self.copy_device(dst)?;
        // SAFETY: `src` is a live slice of `src.len()` readable bytes for the
        // whole (synchronous) call; the runtime validates `dst`.
        let r = unsafe {
            (self.api.core.hipMemcpy)(ptr(dst), src.as_ptr().cast(), src.len(), sys::hipMemcpyHostToDevice)
        };
        self.check(r, || format!("hipMemcpy(HostToDevice, {dst}, {} bytes) on device {device}", src.len()))
    }

    fn copy_device_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        if dst.is_empty() {
            return Ok(());
        }
        let device = self.copy_device(src)?;
        let len = dst.len();
        // SAFETY: `dst` is a live, exclusively borrowed slice of `len`
        // writable bytes for the whole (synchronous) call; the runtime validates `src`.
        let r = unsafe {
            (self.api.core.hipMemcpy)(dst.as_mut_ptr().cast(), ptr(src), len, sys::hipMemcpyDeviceToHost)
        };
        self.check(r, || format!("hipMemcpy(DeviceToHost, {src}, {len} bytes) on device {device}"))
    }

    fn copy_device_to_device(&self, dst: DevicePtr, src: DevicePtr, size: u64) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let bytes = to_usize(size, "copy size")?;
        let device = self.copy_device(dst)?;
        // SAFETY: device addresses only; the runtime validates them.
        let r = unsafe { (self.api.core.hipMemcpy)(ptr(dst), ptr(src), bytes, sys::hipMemcpyDeviceToDevice) };
        self.check(r, || {
            format!("hipMemcpy(DeviceToDevice, {dst} <- {src}, {size} bytes) on device {device}")
        })?;
        // A device-to-device copy may run asynchronously to the host (CUDA's
        // rule; AMD's runtime waits): wait for the null stream it went to.
        // SAFETY: the null stream of the current device.
        let r = unsafe { (self.api.core.hipStreamSynchronize)(std::ptr::null_mut()) };
        self.check(r, || format!("hipStreamSynchronize(null stream) on device {device}"))
    }

    fn copy_host_to_device_async(&self, dst: DevicePtr, src: HostSpan, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        if src.is_empty() {
            return Ok(());
        }
        let len = to_usize(src.len(), "copy size")?;
        // SAFETY: `HostSpan`'s contract keeps the host memory readable until
        // the queued copy has completed; the runtime validates `dst`, and the
        // stream is live for the call (held by `t`).
        let r = unsafe {
            (self.api.core.hipMemcpyAsync)(
                ptr(dst),
                src.as_ptr().cast(),
                len,
                sys::hipMemcpyHostToDevice,
                t.raw,
            )
        };
        self.check(r, || format!("hipMemcpyAsync(HostToDevice, {dst}, {len} bytes) on device {}", t.device))
    }

    fn copy_device_to_host_async(&self, dst: HostSpan, src: DevicePtr, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        if dst.is_empty() {
            return Ok(());
        }
        let len = to_usize(dst.len(), "copy size")?;
        // SAFETY: `HostSpan`'s contract keeps the host memory writable and
        // unaliased until the queued copy has completed; the runtime validates `src`.
        let r = unsafe {
            (self.api.core.hipMemcpyAsync)(
                dst.as_mut_ptr().cast(),
                ptr(src),
                len,
                sys::hipMemcpyDeviceToHost,
                t.raw,
            )
        };
        self.check(r, || format!("hipMemcpyAsync(DeviceToHost, {src}, {len} bytes) on device {}", t.device))
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
        let bytes = to_usize(size, "copy size")?;
        // SAFETY: device addresses only (validated by the runtime); live stream.
        let r = unsafe {
            (self.api.core.hipMemcpyAsync)(ptr(dst), ptr(src), bytes, sys::hipMemcpyDeviceToDevice, t.raw)
        };
        self.check(r, || {
            format!("hipMemcpyAsync(DeviceToDevice, {dst} <- {src}, {size} bytes) on device {}", t.device)
        })
    }

    fn memset_async(&self, dst: DevicePtr, value: FillValue, count: u64, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        self.memset_on(&t, dst, value, count, "memset")
    }

    fn stream_create(&self, device: usize, flags: StreamFlags) -> Result<RawStream> {
        let _device = self.bound(device)?;
        let bits = if flags.non_blocking { sys::hipStreamNonBlocking } else { sys::hipStreamDefault };
        let mut s: hipStream_t = std::ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer; the device is current.
        let r = unsafe { (self.api.core.hipStreamCreateWithFlags)(&mut s, bits) };
        self.check(r, || format!("hipStreamCreateWithFlags(flags {bits}) on device {device}"))?;
        let handle = s as usize as u64;
        lock(&self.streams).insert(handle, Arc::new(StreamEntry::created(self.api, device, handle)));
        Ok(RawStream { device, handle })
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
        // (An adopted stream its user asked hipmem to destroy goes too.)
        entry.owned.store(true, Ordering::Release);
        destroy_entry(entry, StreamEntry::destroy_now)
    }

    fn stream_device(&self, handle: u64) -> Result<usize> {
        if let Some(e) = lock(&self.streams).get(&handle) {
            return Ok(e.device);
        }
        let Some(get_device) = self.api.info.hipStreamGetDevice else {
            return Err(Error::InvalidHandle(format!(
                "stream {handle:#x}: {} has no hipStreamGetDevice (HIP 6), so a stream made outside hipmem cannot be taken",
                self.api.library
            )));
        };
        let mut device: c_int = -1;
        // SAFETY: the runtime checks that the handle is a live stream before
        // it reads it (AMD's `hip::isValid`, libhipmem's handle tables);
        // `device` is a valid out-pointer.
        let r = unsafe { get_device(handle as usize as hipStream_t, &mut device) };
        self.check(r, || format!("hipStreamGetDevice({handle:#x})"))
            .map_err(|e| Error::InvalidHandle(format!("stream {handle:#x} is not a live stream: {e}")))?;
        usize::try_from(device).ok().filter(|&d| d < self.devices.len()).ok_or_else(|| {
            Error::InvalidHandle(format!(
                "stream {handle:#x} belongs to device {device}, which hipmem does not see"
            ))
        })
    }

    fn stream_adopt(&self, device: usize, handle: u64) -> Result<StreamFlags> {
        self.device(device)?;
        if handle == 0 {
            return Ok(StreamFlags::default());
        }
        let own = self.stream_device(handle)?;
        if own != device {
            return Err(Error::InvalidHandle(format!(
                "stream {handle:#x} belongs to device {own}, not device {device}"
            )));
        }
        let mut bits: std::ffi::c_uint = 0;
        if let Some(get_flags) = self.api.info.hipStreamGetFlags {
            // SAFETY: a live stream (checked above); a valid out-pointer.
            let r = unsafe { get_flags(handle as usize as hipStream_t, &mut bits) };
            self.check(r, || format!("hipStreamGetFlags({handle:#x})"))?;
        }
        // (Created or adopted before: the entry it has stays.)
        lock(&self.streams)
            .entry(handle)
            .or_insert_with(|| Arc::new(StreamEntry::adopted(self.api, device, handle)));
        Ok(StreamFlags { non_blocking: bits & sys::hipStreamNonBlocking != 0 })
    }

    fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        // SAFETY: a live stream of the current device (or its null stream).
        let r = unsafe { (self.api.core.hipStreamSynchronize)(t.raw) };
        self.check(r, || format!("hipStreamSynchronize({:#x}) on device {}", stream.handle, t.device))
    }

    fn stream_query(&self, stream: RawStream) -> Result<bool> {
        let t = self.target(stream)?;
        // SAFETY: a live stream of the current device (or its null stream).
        let r = unsafe { (self.api.core.hipStreamQuery)(t.raw) };
        result::check_ready(self.api, r, || {
            format!("hipStreamQuery({:#x}) on device {}", stream.handle, t.device)
        })
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        let e = self.event(event)?;
        let t = self.target(stream)?;
        // SAFETY: a live stream and a live event (both held for the call).
        let r = unsafe { (self.api.core.hipStreamWaitEvent)(t.raw, e.handle(), 0) };
        self.check(r, || {
            format!(
                "hipStreamWaitEvent(stream {:#x}, event {:#x}) on device {}",
                stream.handle, event.handle, t.device
            )
        })
    }

    fn launch_host_func(&self, stream: RawStream, callback: HostCallback) -> Result<()> {
        let t = self.target(stream)?;
        self.host_func_on(&t, callback)
    }

    fn event_create(&self, device: usize, flags: EventFlags) -> Result<RawEvent> {
        let _device = self.bound(device)?;
        let mut bits = sys::hipEventDefault;
        if flags.blocking_sync {
            bits |= sys::hipEventBlockingSync;
        }
        if flags.disable_timing {
            bits |= sys::hipEventDisableTiming;
        }
        if flags.interprocess {
            bits |= sys::hipEventInterprocess;
        }
        let mut e: hipEvent_t = std::ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer; the device is current.
        let r = unsafe { (self.api.core.hipEventCreateWithFlags)(&mut e, bits) };
        self.check(r, || format!("hipEventCreateWithFlags(flags {bits}) on device {device}"))?;
        let handle = e as usize as u64;
        lock(&self.events).insert(handle, Arc::new(EventEntry { api: self.api, device, raw: handle }));
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
        // SAFETY: a live event and stream of the current device.
        let r = unsafe { (self.api.core.hipEventRecord)(e.handle(), t.raw) };
        self.check(r, || {
            format!(
                "hipEventRecord(event {:#x}, stream {:#x}) on device {}",
                event.handle, stream.handle, t.device
            )
        })
    }

    fn event_query(&self, event: RawEvent) -> Result<bool> {
        let e = self.event(event)?;
        let _device = set_device(self.api, e.device)?;
        // SAFETY: a live event (held for the call).
        let r = unsafe { (self.api.core.hipEventQuery)(e.handle()) };
        result::check_ready(self.api, r, || format!("hipEventQuery({:#x})", event.handle))
    }

    fn event_synchronize(&self, event: RawEvent) -> Result<()> {
        let e = self.event(event)?;
        let _device = set_device(self.api, e.device)?;
        // SAFETY: a live event (held for the call).
        let r = unsafe { (self.api.core.hipEventSynchronize)(e.handle()) };
        self.check(r, || format!("hipEventSynchronize({:#x})", event.handle))
    }

    fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32> {
        let (s, e) = (self.event(start)?, self.event(end)?);
        let _device = set_device(self.api, s.device)?;
        let mut ms = 0f32;
        // SAFETY: live events (held for the call); `ms` is a valid out-pointer.
        let r = unsafe { (self.api.core.hipEventElapsedTime)(&mut ms, s.handle(), e.handle()) };
        self.check(r, || format!("hipEventElapsedTime({:#x}, {:#x})", start.handle, end.handle))?;
        Ok(ms)
    }

    fn launch_fill(&self, dst: DevicePtr, value: FillValue, count: u64, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        if count != 0 && dst.is_null() {
            return Err(Error::InvalidValue("fill kernel: null destination".into()));
        }
        self.memset_on(&t, dst, value, count, "fill kernel")
    }

    fn launch_iota(&self, dst: DevicePtr, count: u64, k: i32, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        self.iota_on(&t, dst, count, k)
    }

    fn launch_delay(
        &self,
        duration: Duration,
        flag: DevicePtr,
        flag_value: u32,
        stream: RawStream,
    ) -> Result<()> {
        let t = self.target(stream)?;
        self.delay_on(&t, duration, flag, flag_value)
    }

    fn virtual_memory(&self) -> Option<&dyn super::virtual_memory::VirtualMemory> {
        (self.api.vmm.is_ok() && self.allocation_prop_layout_known()).then_some(self as _)
    }

    fn page_locked_memory(&self) -> Option<&dyn super::host_memory::PageLockedMemory> {
        Some(self)
    }

    fn managed_memory(&self) -> Option<&dyn super::managed_memory::ManagedMemory> {
        self.api.managed.is_ok().then_some(self as _)
    }

    // Peer access, device details, stream priorities and pitched memory
    // (issue 15): peer.rs, device_info.rs, copy2d.rs.
    fn peer_access(&self) -> Option<&dyn super::peer::PeerAccess> {
        self.api.peer.is_ok().then_some(self as _)
    }

    fn device_attribute(&self, device: usize, attribute: super::device_info::DeviceAttribute) -> Result<i64> {
        self.hip_device_attribute(device, attribute)
    }

    fn device_uuid(&self, device: usize) -> Result<[u8; 16]> {
        self.hip_device_uuid(device)
    }

    fn driver_version(&self) -> Result<i32> {
        self.hip_driver_version()
    }

    fn stream_priority_range(&self, device: usize) -> Result<super::device_info::PriorityRange> {
        self.hip_priority_range(device)
    }

    fn stream_create_with_priority(
        &self,
        device: usize,
        flags: StreamFlags,
        priority: i32,
    ) -> Result<RawStream> {
        self.hip_stream_create_with_priority(device, flags, priority)
    }

    fn stream_priority(&self, stream: RawStream) -> Result<i32> {
        self.hip_stream_priority(stream)
    }

    fn mem_alloc_pitch(&self, device: usize, width: u64, height: u64) -> Result<(DevicePtr, u64)> {
        self.hip_mem_alloc_pitch(device, width, height)
    }

    fn copy_2d_async(&self, copy: &super::copy2d::Copy2D, stream: RawStream) -> Result<()> {
        self.hip_copy_2d_async(copy, stream)
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
        self.hip_memset_2d_async(dst, pitch, value, width, height, stream)
    }

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

    fn driver_free_async(&self, p: DevicePtr, stream: RawStream) -> Result<()> {
        self.pool_free_async(p, stream)
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

    fn driver_pool_export_pointer(&self, p: DevicePtr) -> Result<[u8; 64]> {
        self.pool_export_pointer(p)
    }

    fn driver_pool_import_pointer(&self, pool: RawPool, data: &[u8; 64]) -> Result<DevicePtr> {
        self.pool_import_pointer(pool, data)
    }

    fn driver_pointer_range(&self, p: DevicePtr) -> Result<u64> {
        self.pointer_range(p)
    }
}

impl HipBackend {
    /// `hipMemsetD8/D16/D32Async` of `count` elements on a resolved stream.
    fn memset_on(&self, t: &Target, dst: DevicePtr, value: FillValue, count: u64, what: &str) -> Result<()> {
        count
            .checked_mul(value.element_size())
            .ok_or_else(|| Error::InvalidValue(format!("{what}: {count} elements overflow")))?;
        if count == 0 {
            return Ok(());
        }
        let n = to_usize(count, "memset count")?;
        let c = &self.api.core;
        // SAFETY: device addresses only (validated by the runtime); a live stream.
        let (r, name) = unsafe {
            match value {
                FillValue::U8(v) => ((c.hipMemsetD8Async)(ptr(dst), v, n, t.raw), "hipMemsetD8Async"),
                FillValue::U16(v) => ((c.hipMemsetD16Async)(ptr(dst), v, n, t.raw), "hipMemsetD16Async"),
                FillValue::U32(v) => {
                    ((c.hipMemsetD32Async)(ptr(dst), v as c_int, n, t.raw), "hipMemsetD32Async")
                }
            }
        };
        self.check(r, || format!("{what}: {name}({dst}, {count} elements) on device {}", t.device))
    }

    /// `hipLaunchHostFunc` of `callback` on a resolved stream.
    fn host_func_on(&self, t: &Target, callback: HostCallback) -> Result<()> {
        let user_data = Box::into_raw(Box::new(callback)).cast::<c_void>();
        // SAFETY: a live stream; the trampoline takes back ownership of
        // `user_data` when the runtime runs it, exactly once.
        let r = unsafe {
            match self.api.core.host_func {
                sys::HostFunc::Launch(f) => f(t.raw, Some(host_func_trampoline), user_data),
                sys::HostFunc::AddCallback(f) => f(t.raw, Some(stream_callback_trampoline), user_data, 0),
            }
        };
        if r != sys::hipSuccess {
            // The runtime did not take the callback: free it here.
            // SAFETY: `user_data` came from Box::into_raw above and was not handed over.
            drop(unsafe { Box::from_raw(user_data.cast::<HostCallback>()) });
        }
        self.check(r, || format!("hipLaunchHostFunc on device {}", t.device))
    }
}

#[cfg(test)]
mod tests;
