//! What hipmem's own hip backend needs from libhipmem beyond HIP's API when
//! it loads libhipmem as its HIP library (the loopback:
//! `HIPMEM_BACKEND=hip HIPMEM_HIP_LIBRARY=.../libhipmem.so`).
//!
//! `hipmemSetInnerBackend` is hipmem's own extension (not a HIP function):
//! its presence tells the hip backend that the library is libhipmem, and the
//! backend calls it before `hipInit` so that libhipmem's runtime does not
//! read `HIPMEM_BACKEND` (which says hip in that process) and never loads
//! itself.

use std::ffi::{CStr, c_char};

use hipmem_rs::backend::{self, BackendChoice, BackendKind};
use hipmem_rs::{Error, Result, Runtime};

use crate::types::*;
use crate::{call, non_null};

/// Opens the runtime for `choice`, which is never hip: auto is cuda when the
/// CUDA driver has a device, else the CPU emulation.
fn open_inner(choice: BackendChoice) -> Result<Runtime> {
    match choice {
        BackendChoice::Auto => match backend::cuda::open() {
            Ok(cuda) if cuda.device_count() > 0 => Runtime::with_backend(cuda),
            _ => Runtime::builder().backend(BackendChoice::Host).build(),
        },
        other => Runtime::builder().backend(other).build(),
    }
}

/// `hipmemSetInnerBackend(name)`: chooses the backend of this library's
/// process-wide runtime, before it opens: `"host"`, `"cuda"` or `"auto"`
/// (cuda when it has a device, else host; never hip).
///
/// - null `name` → hipErrorInvalidValue; a name that is not a backend, or
///   `"hip"` → hipErrorInvalidValue;
/// - called while this copy of hipmem is itself opening a hip backend (the
///   library would load itself) → hipErrorNotSupported, and nothing opens;
/// - the runtime is already open on another backend than the one named, or
///   on hip → hipErrorInvalidValue (already open on the one named, or `"auto"`
///   on host or cuda: hipSuccess);
/// - opening the backend fails → that error (e.g. `"cuda"` without a GPU:
///   hipErrorNotInitialized).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipmemSetInnerBackend(name: *const c_char) -> hipError_t {
    call(|| {
        non_null(name, "hipmemSetInnerBackend: name")?;
        // SAFETY: non-null; the caller passes a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned();
        let choice: BackendChoice = text.parse().map_err(|e: Error| e.context("hipmemSetInnerBackend"))?;
        if choice == BackendChoice::Hip {
            return Err(Error::InvalidValue(
                "hipmemSetInnerBackend: libhipmem under a hip backend cannot use hip itself".into(),
            ));
        }
        if backend::hip::opening_in_this_copy() {
            return Err(Error::NotSupported(format!(
                "libhipmem's own hip backend is loading libhipmem ({}); it would load itself: point {} at AMD's \
                 libamdhip64 instead",
                std::env::var(backend::hip::LIBRARY_VARIABLE).unwrap_or_default(),
                backend::hip::LIBRARY_VARIABLE
            )));
        }
        let rt = Runtime::global_or_open_with(|| open_inner(choice))?;
        let kind = rt.backend_kind();
        let wanted = match choice {
            BackendChoice::Host => Some(BackendKind::Host),
            BackendChoice::Cuda => Some(BackendKind::Cuda),
            _ => None,
        };
        if kind == BackendKind::Hip || wanted.is_some_and(|w| w != kind) {
            return Err(Error::InvalidValue(format!(
                "hipmemSetInnerBackend({text:?}): libhipmem's runtime is already open on the {kind} backend"
            )));
        }
        Ok(())
    })
}
