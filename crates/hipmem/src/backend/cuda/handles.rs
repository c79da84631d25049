//! The driver objects the backend holds: handles that may cross threads,
//! each device's primary context (made current for a call and the caller's
//! given back after it), and the streams and events the backend created, destroyed once
//! with their last reference.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::driver::{self, CUcontext, CUdevice, CUstream, Driver};
use super::kernels::Kernels;
use super::result;
use crate::error::Result;

/// A driver handle (context, stream, event, module or function) that may be
/// shared between threads.
pub(super) struct Handle<T>(pub(super) *mut T);

// Written out: derives would require `T: Copy` of the opaque driver types.
impl<T> Clone for Handle<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Handle<T> {}

// SAFETY: CUDA driver handles are opaque tokens; the driver API is
// thread-safe and accepts them from any thread.
unsafe impl<T> Send for Handle<T> {}
// SAFETY: as above; a shared `Handle` only hands out the pointer value.
unsafe impl<T> Sync for Handle<T> {}

impl<T> fmt::Debug for Handle<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:p}", self.0)
    }
}

// ---- the current context, per call ---------------------------------------------------

/// A context hipmem made current on the calling thread for one call. When
/// it drops, the context that was current before (or none) is current
/// again: the CUDA runtime, PyTorch and cuDNN keep working in the context
/// they chose, whatever device hipmem's call was for.
#[must_use = "the context stays current only while the guard lives"]
pub(super) struct Bound {
    driver: &'static Driver,
    /// The caller's context, where hipmem replaced it (`None`: it was
    /// already the one wanted, and nothing changes back).
    restore: Option<CUcontext>,
}

impl Drop for Bound {
    fn drop(&mut self) {
        let Some(previous) = self.restore else { return };
        // SAFETY: `previous` was current on this thread when the guard was
        // made (or null), so it is a live context the caller holds.
        if let Err(e) = unsafe { result::ctx_set_current(self.driver, previous) } {
            tracing::warn!(target: "hipmem", "giving the calling thread its context back failed: {e}");
        }
    }
}

/// Makes `ctx` current on the calling thread until the guard drops (one
/// `cuCtxGetCurrent` where it already is; also a set and a set back where
/// the caller had another or none). `ctx` must be live: a primary context a
/// live backend retained, or the context of a stream the caller holds live.
pub(super) fn bind_context(d: &'static Driver, ctx: CUcontext) -> Result<Bound> {
    let current = result::ctx_get_current(d)?;
    if current == ctx {
        return Ok(Bound { driver: d, restore: None });
    }
    // SAFETY: `ctx` is live (this function's rule above).
    unsafe { result::ctx_set_current(d, ctx) }?;
    Ok(Bound { driver: d, restore: Some(current) })
}

/// Some context current for a call that names no device (the caller's own,
/// whatever it is, else `fallback()`'s until the guard drops).
pub(super) fn bind_any_context(
    d: &'static Driver,
    fallback: impl FnOnce() -> Result<CUcontext>,
) -> Result<Bound> {
    if !result::ctx_get_current(d)?.is_null() {
        return Ok(Bound { driver: d, restore: None });
    }
    bind_context(d, fallback()?)
}

// ---- devices, streams, events ---------------------------------------------------------

#[derive(Debug)]
pub(super) struct Device {
    pub(super) ordinal: usize,
    pub(super) cu: CUdevice,
    /// The primary context, retained on first use: a process that works on
    /// one GPU of several makes no context (and spends no memory) on the
    /// others, as the CUDA runtime does.
    ctx: OnceLock<Handle<driver::CUctx_st>>,
    ctx_init: Mutex<()>,
    pub(super) multiprocessors: u32,
    pub(super) kernels: OnceLock<Kernels>,
    pub(super) kernels_init: Mutex<()>,
}

impl Device {
    /// A device whose primary context is not retained yet.
    pub(super) fn new(ordinal: usize, cu: CUdevice, multiprocessors: u32) -> Device {
        Device {
            ordinal,
            cu,
            ctx: OnceLock::new(),
            ctx_init: Mutex::new(()),
            multiprocessors,
            kernels: OnceLock::new(),
            kernels_init: Mutex::new(()),
        }
    }

    /// The primary context, retained (once) on first use.
    pub(super) fn ctx(&self, d: &Driver) -> Result<Handle<driver::CUctx_st>> {
        if let Some(c) = self.ctx.get() {
            return Ok(*c);
        }
        let _one = self.ctx_init.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = self.ctx.get() {
            return Ok(*c);
        }
        let c = Handle(result::primary_ctx_retain(d, self.cu)?);
        let _ = self.ctx.set(c);
        Ok(c)
    }

    /// The primary context if it was retained.
    pub(super) fn retained_ctx(&self) -> Option<Handle<driver::CUctx_st>> {
        self.ctx.get().copied()
    }
}

/// A stream the backend created or adopted. One it created is destroyed
/// with the driver when the last reference goes (normally at once in
/// `stream_destroy`; later if another thread is using it at that moment).
#[derive(Debug)]
pub(super) struct StreamEntry {
    pub(super) driver: &'static Driver,
    pub(super) device: usize,
    pub(super) ctx: Handle<driver::CUctx_st>,
    pub(super) raw: Handle<driver::CUstream_st>,
    /// The `cuStreamCreate` flags.
    pub(super) cu_flags: u32,
    /// The priority it was created with (0: the default).
    pub(super) priority: i32,
    /// Created here (destroyed with the entry), or adopted (made by someone
    /// else: destroyed only once `stream_destroy` asks, which sets this).
    pub(super) owned: AtomicBool,
}

impl StreamEntry {
    pub(super) fn destroy_now(&self) -> Result<()> {
        let _ctx = bind_context(self.driver, self.ctx.0)?;
        // SAFETY: `raw` was created by cuStreamCreate and is destroyed only here,
        // once, when the last reference to the entry goes.
        let r = unsafe { (self.driver.cuStreamDestroy_v2)(self.raw.0) };
        result::check(self.driver, r, || format!("cuStreamDestroy_v2({:p})", self.raw.0))
    }
}

impl Drop for StreamEntry {
    fn drop(&mut self) {
        if !self.owned.load(Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.destroy_now() {
            tracing::warn!(target: "hipmem", "destroying a CUDA stream failed in Drop: {e}");
        }
    }
}

/// An event the backend created; destroyed like [`StreamEntry`].
#[derive(Debug)]
pub(super) struct EventEntry {
    pub(super) driver: &'static Driver,
    pub(super) device: usize,
    pub(super) ctx: Handle<driver::CUctx_st>,
    pub(super) raw: Handle<driver::CUevent_st>,
}

impl EventEntry {
    pub(super) fn destroy_now(&self) -> Result<()> {
        let _ctx = bind_context(self.driver, self.ctx.0)?;
        // SAFETY: `raw` was created by cuEventCreate and is destroyed only here, once.
        let r = unsafe { (self.driver.cuEventDestroy_v2)(self.raw.0) };
        result::check(self.driver, r, || format!("cuEventDestroy_v2({:p})", self.raw.0))
    }
}

impl Drop for EventEntry {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_now() {
            tracing::warn!(target: "hipmem", "destroying a CUDA event failed in Drop: {e}");
        }
    }
}

/// Removes `entry`'s handle and destroys it now if nobody else holds it.
pub(super) fn destroy_entry<T>(entry: Arc<T>, destroy_now: impl FnOnce(&T) -> Result<()>) -> Result<()> {
    match Arc::try_unwrap(entry) {
        Ok(entry) => {
            let r = destroy_now(&entry);
            // The driver object is gone (or the error says why not); don't
            // destroy it a second time in Drop.
            std::mem::forget(entry);
            r
        }
        // Another thread is in a call with it: its Drop destroys it after.
        Err(shared) => {
            drop(shared);
            Ok(())
        }
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A stream resolved for one call: its device and driver handle, kept alive
/// until the call returns, with its device's context current until then.
pub(super) struct Target<'a> {
    pub(super) dev: &'a Device,
    pub(super) raw: CUstream,
    pub(super) _entry: Option<Arc<StreamEntry>>,
    pub(super) _ctx: Bound,
}

/// A device with its primary context current on the calling thread until
/// this drops.
#[must_use = "the device's context stays current only while this lives"]
pub(super) struct OnDevice<'a> {
    pub(super) dev: &'a Device,
    pub(super) _ctx: Bound,
}

impl std::ops::Deref for OnDevice<'_> {
    type Target = Device;
    fn deref(&self) -> &Device {
        self.dev
    }
}
