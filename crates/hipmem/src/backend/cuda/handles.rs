//! The driver objects the backend holds: handles that may cross threads,
//! each device's primary context (made current per thread only when it
//! changes), and the streams and events the backend created, destroyed once
//! with their last reference.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

// ---- the current context, per thread --------------------------------------------------

/// Bumped whenever a backend releases its contexts, which invalidates every
/// thread's cache (a new backend may get the same context pointers back).
pub(super) static CONTEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// (context pointer, generation) last made current on this thread by hipmem.
    static CURRENT_CONTEXT: Cell<(usize, u64)> = const { Cell::new((0, 0)) };
}

/// The (context pointer, generation) hipmem last made current on this thread.
pub(super) fn current_context() -> (usize, u64) {
    CURRENT_CONTEXT.try_with(|c| c.get()).unwrap_or((0, 0))
}

/// Makes `ctx` current on the calling thread unless the cache says it is.
pub(super) fn bind_context(d: &Driver, ctx: CUcontext) -> Result<()> {
    let key = (ctx as usize, CONTEXT_GENERATION.load(Ordering::Acquire));
    if CURRENT_CONTEXT.try_with(|c| c.get() == key).unwrap_or(false) {
        return Ok(());
    }
    // SAFETY: `ctx` is a primary context retained by a live backend.
    unsafe { result::ctx_set_current(d, ctx) }?;
    let _ = CURRENT_CONTEXT.try_with(|c| c.set(key));
    Ok(())
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
        bind_context(self.driver, self.ctx.0)?;
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
        bind_context(self.driver, self.ctx.0)?;
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
/// until the call returns.
pub(super) struct Target<'a> {
    pub(super) dev: &'a Device,
    pub(super) raw: CUstream,
    pub(super) _entry: Option<Arc<StreamEntry>>,
}
