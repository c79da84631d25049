//! HIP's C ABI on top of hipmem: `libhipmem.so` / `libhipmem.a`, declared by
//! `include/hip/hip_runtime.h` at the repository root.
//!
//! Every exported function has HIP's exact name and signature and is built on
//! [`hipmem_rs::Runtime::global`]. The rules every export follows:
//!
//! - the body runs inside `call`: a caught panic becomes `hipErrorUnknown`,
//!   and a failing call records its code for `hipGetLastError` /
//!   `hipPeekAtLastError` (per thread);
//! - every pointer argument is checked for null where HIP's contract says so;
//! - every handle is looked up on every call in a table kept here (streams,
//!   events, pools) or in the runtime (virtual-memory handles): a stale,
//!   destroyed or made-up handle is an error code, never undefined behaviour;
//! - a `hipStream_t` may also be a stream made outside hipmem (by the CUDA
//!   runtime, PyTorch, CuPy, NCCL): the first call that names one adopts it
//!   through the runtime (on CUDA the driver checks that it is a live stream
//!   of the device's primary context; the CPU backend has none and refuses
//!   it with `hipErrorInvalidHandle`), and it is kept from then on;
//!   `hipStreamDestroy` destroys it. A handle hipmem never saw, or a foreign
//!   stream destroyed through `hipStreamDestroy`, never reaches the driver
//!   again. One case stays undefined, as in CUDA itself: a handle in readable
//!   memory that is no live stream (freed by its owner), named for the first
//!   time, since the driver has no check for it. See [`handles`] and
//!   `docs/c-abi.md`;
//! - the stream lookup is lock-free on the hot path (null streams made once,
//!   a per-thread cache of the others invalidated by every
//!   `hipStreamDestroy`), and the runtime is borrowed, not cloned, per call.
//!
//! The exports are grouped as `hip-memory-api.md` groups them:
//! [`explicit`], [`pinned`], [`managed`], [`pools`], [`vmm`] and
//! [`runtime_api`] (devices, streams, events, errors); pool IPC is in
//! [`pools`], with hipmem's own extensions for learned layouts
//! (`hipmemPoolSetPlanning`, `hipmemPoolGetPlanCounts`), a pool's backend
//! calls (`hipmemPoolGetBackendCalls`) and the times it blocked the caller on
//! a stream (`hipmemPoolGetHostWaits`).
//! [`hip_backend_exports`] holds hipmem's own extension for the hip
//! backend's loopback (`hipmemSetInnerBackend`).
#![allow(non_snake_case, non_camel_case_types, non_upper_case_globals, clippy::missing_safety_doc)]

pub mod compat;
mod cxx_exception;
pub mod device_code;
pub mod devices;
pub mod explicit;
pub mod handles;
pub mod hip_backend_exports;
pub mod managed;
pub mod peer;
pub mod pinned;
pub mod pitched;
pub mod pools;
pub mod runtime_api;
pub mod streams;
pub mod torch;
pub mod typed;
pub mod types;
pub mod vmm;

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;

use hipmem_rs::{Error, Result, Runtime};

pub use compat::*;
pub use device_code::*;
pub use devices::*;
pub use explicit::*;
pub use hip_backend_exports::*;
pub use managed::*;
pub use peer::*;
pub use pinned::*;
pub use pitched::*;
pub use pools::*;
pub use runtime_api::*;
pub use streams::*;
pub use torch::*;
pub use typed::*;
pub use types::*;
pub use vmm::*;

thread_local! {
    /// The last error of this thread (`hipGetLastError` / `hipPeekAtLastError`).
    static LAST_ERROR: Cell<hipError_t> = const { Cell::new(hipSuccess) };
    /// The current device of this thread (`hipSetDevice` / `hipGetDevice`).
    static CURRENT_DEVICE: Cell<usize> = const { Cell::new(0) };
}

/// Runs the body of an export: catches panics (→ `hipErrorUnknown`), turns
/// the result into a `hipError_t` and records failures for `hipGetLastError`.
pub(crate) fn call(body: impl FnOnce() -> Result<()>) -> hipError_t {
    let code = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => hipSuccess,
        Ok(Err(e)) => e.code(),
        Err(_) => hipErrorUnknown,
    };
    record(code);
    code
}

/// Records a failing code as the thread's last error. `hipErrorNotReady` is
/// a status (CUDA's rule), not an error, and is not recorded.
pub(crate) fn record(code: hipError_t) {
    if code != hipSuccess && code != hipErrorNotReady {
        LAST_ERROR.with(|c| c.set(code));
    }
}

pub(crate) fn take_last_error() -> hipError_t {
    LAST_ERROR.with(|c| c.replace(hipSuccess))
}

pub(crate) fn peek_last_error() -> hipError_t {
    LAST_ERROR.with(|c| c.get())
}

/// The process-wide runtime (backend from `HIPMEM_BACKEND`), opened on
/// first use. It lives as long as the process, so every call borrows it
/// (no reference count is touched).
pub(crate) fn rt() -> Result<&'static Runtime> {
    static GLOBAL: OnceLock<Result<Runtime>> = OnceLock::new();
    match GLOBAL.get_or_init(|| {
        log_from_env();
        Runtime::global()
    }) {
        Ok(rt) => Ok(rt),
        Err(e) => Err(e.clone()),
    }
}

/// `HIPMEM_LOG=error|warn|info|debug|trace`: hipmem's log on standard
/// error, from the library's first call (unless the program has installed
/// a `tracing` subscriber of its own). Unset or `off`: nothing.
fn log_from_env() {
    let Some(level) = std::env::var("HIPMEM_LOG").ok().and_then(|l| l.parse::<tracing::Level>().ok()) else {
        return;
    };
    let _ = tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).try_init();
}

/// The calling thread's current device: on cuda the device of the
/// thread's current context where it has one (what `cudaSetDevice` or
/// `torch.cuda.set_device` chose, as HIP on NVIDIA shares the CUDA
/// runtime's device); on hip the HIP runtime's (which `hipSetDevice` sets
/// too); else the last `hipSetDevice` on the thread (0 before any).
pub(crate) fn current_device() -> usize {
    if let Ok(rt) = rt() {
        // One device: it is the current one whatever the thread's context
        // (no driver call on the null stream's hot path).
        if rt.device_count() == 1 {
            return 0;
        }
        if let Some(d) = rt.thread_device() {
            return d;
        }
    }
    CURRENT_DEVICE.with(|c| c.get())
}

pub(crate) fn set_current_device(device: usize) {
    CURRENT_DEVICE.with(|c| c.set(device));
}

/// InvalidValue for a null pointer argument.
pub(crate) fn non_null<T>(ptr: *const T, what: &str) -> Result<()> {
    if ptr.is_null() { Err(Error::InvalidValue(format!("{what} is a null pointer"))) } else { Ok(()) }
}

/// A C `int` switch: 0 off, 1 on, anything else InvalidValue naming `what`.
pub(crate) fn switch(on: i32, what: &str) -> Result<bool> {
    match on {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(Error::InvalidValue(format!("{what}: on must be 0 or 1, not {other}"))),
    }
}

/// A device ordinal from a C `int` (negative or too large: InvalidDevice).
pub(crate) fn device_ordinal(rt: &Runtime, device: i32) -> Result<usize> {
    if device < 0 {
        return Err(Error::InvalidDevice(format!("device {device} does not exist")));
    }
    rt.check_device(device as usize)?;
    Ok(device as usize)
}
