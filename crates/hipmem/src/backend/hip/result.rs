//! The result layer: `hipError_t` to hipmem's [`Error`], with messages that
//! name the call, its arguments, and the runtime's own name and text of the
//! code (`hipGetErrorName` / `hipGetErrorString`).
//!
//! hipmem's error enum has one variant per `hipError_t` code it uses, with
//! HIP's numbers, so the mapping is the identity on those; the few other
//! codes the runtime returns to hipmem's calls are folded into the nearest
//! variant (listed in [`error_from_code`]), everything else is `Unknown`
//! (the message keeps the runtime's name of the code).

#![allow(non_upper_case_globals)]

use std::ffi::{CStr, c_char};

use super::sys::*;
use crate::error::{Error, Result};

/// Maps a `hipError_t` onto hipmem's error enum with `message`.
pub fn error_from_code(code: hipError_t, message: String) -> Error {
    match code {
        // Same number, same meaning.
        hipErrorInvalidValue
        | hipErrorOutOfMemory
        | hipErrorNotInitialized
        | hipErrorInvalidDevicePointer
        | hipErrorInvalidMemcpyDirection
        | hipErrorInvalidDevice
        | hipErrorInvalidHandle
        | hipErrorNotReady
        | hipErrorContextIsDestroyed
        | hipErrorNotSupported
        | hipErrorInvalidPitchValue
        | hipErrorInvalidSymbol
        | hipErrorNotFound
        | hipErrorPeerAccessAlreadyEnabled
        | hipErrorPeerAccessNotEnabled => Error::from_code(code, message),
        // Two devices that cannot reach each other (HIP's
        // hipDeviceEnablePeerAccess rule: not a peer).
        hipErrorPeerAccessUnsupported => Error::InvalidDevice(message),
        // The runtime was shut down, or has no device to initialize.
        hipErrorDeinitialized | hipErrorNoDevice => Error::NotInitialized(message),
        _ => Error::Unknown(message),
    }
}

/// Formats the message of a failed call: `what: NAME: text`.
pub fn error_message(what: &str, code: hipError_t, name: Option<&str>, text: Option<&str>) -> String {
    let name = name.map(str::to_owned).unwrap_or_else(|| format!("hipError_t {code}"));
    match text {
        Some(text) if !text.is_empty() && text != name => format!("{what}: {name}: {text}"),
        _ => format!("{what}: {name}"),
    }
}

fn static_str(f: unsafe extern "C" fn(hipError_t) -> *const c_char, code: hipError_t) -> Option<String> {
    // SAFETY: both functions take any code and return a pointer to a static
    // NUL-terminated string (or null).
    let p = unsafe { f(code) };
    if p.is_null() {
        return None;
    }
    // SAFETY: non-null, static and NUL-terminated (the runtime's contract).
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Ok for `hipSuccess`; otherwise the mapped error, described by `what()`.
pub fn check(api: &Api, code: hipError_t, what: impl FnOnce() -> String) -> Result<()> {
    if code == hipSuccess {
        return Ok(());
    }
    let name = static_str(api.core.hipGetErrorName, code);
    let text = static_str(api.core.hipGetErrorString, code);
    Err(error_from_code(code, error_message(&what(), code, name.as_deref(), text.as_deref())))
}

/// Like [`check`], but `hipErrorNotReady` is `Ok(false)` and success `Ok(true)`.
pub fn check_ready(api: &Api, code: hipError_t, what: impl FnOnce() -> String) -> Result<bool> {
    if code == hipErrorNotReady {
        return Ok(false);
    }
    check(api, code, what).map(|()| true)
}
