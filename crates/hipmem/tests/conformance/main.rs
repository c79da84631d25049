//! Conformance suite of hipmem against `hip-memory-api.md`.
//!
//! One test binary (one link) with a module per area. Every test runs
//! unchanged on every backend: the backend comes from `HIPMEM_BACKEND` (auto
//! when unset), and the CPU emulation gets 2 devices unless
//! `HIPMEM_HOST_DEVICES` says otherwise. Tests run in parallel and share one
//! runtime, so allocations stay small, and every claim about asynchrony or
//! ordering is proved with the delay kernel (work that has not happened yet
//! right after it is queued), never with timing alone.

/// Asserts that work queued behind a `DELAY` is still pending — only when the
/// check ran well within the delay. A host stall can outlast the delay (on
/// CUDA, another test's hipFree blocks every thread's driver calls until the
/// device is idle), and then "not finished yet" proves nothing; the ordering
/// checks that follow (flag values) stay strict either way.
macro_rules! assert_pending {
    ($start:expr, $cond:expr, $($msg:tt)+) => {{
        let pending = $cond;
        if $start.elapsed() < $crate::DELAY / 2 {
            assert!(pending, $($msg)+);
        } else if !pending {
            eprintln!("note: the host stalled past the delay; not checking: {}", format!($($msg)+));
        }
    }};
}

mod caller_context;
mod copies;
pub mod cuda;
mod devices;
mod errors;
mod events;
mod explicit_memory;
mod foreign_streams;
mod kernels;
mod managed;
mod memset;
mod peer;
mod pinned;
mod pointer_attributes;
mod pool_plan;
mod pool_remap;
mod pool_reuse;
mod pool_stats;
mod pool_stress;
mod pool_tiny;
mod pools;
mod streams;
mod vmm;

use std::fmt::Debug;
use std::sync::OnceLock;
use std::time::Duration;

use hipmem::{Device, DeviceBuffer, Error, Runtime, StreamFlags};

/// How long the delay kernel keeps a stream busy in ordering tests: long
/// enough that "not yet" checks made right after queuing are safe, short
/// enough to keep the suite fast.
pub const DELAY: Duration = Duration::from_millis(300);

/// The runtime every test shares (as an application would).
pub fn runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::builder()
            .default_host_devices(2)
            .build()
            .unwrap_or_else(|e| panic!("cannot open the hipmem runtime: {e}"))
    })
}

/// A runtime of its own, for tests that use dead pointers or handles (a
/// double free, a dropped stream's handle): in the shared runtime a parallel
/// test could get the same address or handle in between and be hurt.
pub fn private_runtime() -> Runtime {
    Runtime::builder()
        .default_host_devices(2)
        .build()
        .unwrap_or_else(|e| panic!("cannot open a second hipmem runtime: {e}"))
}

/// Device `ordinal` of the shared runtime.
pub fn device(ordinal: usize) -> Device {
    runtime().device(ordinal).unwrap_or_else(|e| panic!("device {ordinal}: {e}"))
}

/// The second device, or `None` (with a note) where there is only one.
pub fn second_device(test: &str) -> Option<Device> {
    if runtime().device_count() < 2 {
        eprintln!("{test}: skipped, needs 2 devices, {} present", runtime().device_count());
        return None;
    }
    Some(device(1))
}

/// A non-blocking stream's flags.
pub fn non_blocking() -> StreamFlags {
    StreamFlags { non_blocking: true }
}

/// A one-element zeroed flag buffer for the delay kernel.
pub fn zeroed_flag(dev: &Device) -> DeviceBuffer<u32> {
    dev.alloc_zeroed::<u32>(1).expect("allocating a flag buffer")
}

/// Reads element 0 of a buffer (synchronous copy).
pub fn read0<T: hipmem::bytemuck::Pod>(buf: &DeviceBuffer<T>) -> T {
    buf.to_vec().expect("reading a buffer back")[0]
}

/// Asserts that `result` failed with `code`, that the message is not empty,
/// and that it mentions every one of `needles` (case-insensitive).
#[track_caller]
pub fn expect_err<T: Debug>(result: hipmem::Result<T>, code: i32, needles: &[&str]) -> Error {
    let err = match result {
        Ok(v) => panic!("expected {} ({code}), got Ok({v:?})", hipmem::error::name_of_code(code)),
        Err(e) => e,
    };
    assert_eq!(err.code(), code, "expected {} ({code}), got {err}", hipmem::error::name_of_code(code));
    let message = err.message();
    assert!(!message.trim().is_empty(), "{} has an empty message", err.name());
    let lower = message.to_lowercase();
    for needle in needles {
        assert!(
            lower.contains(&needle.to_lowercase()),
            "message of {} does not mention {needle:?}: {message:?}",
            err.name()
        );
    }
    assert!(err.to_string().contains(err.name()), "Display lacks the error name: {err}");
    err
}

/// The address of a host object (for passing host memory where device
/// memory is expected).
pub fn host_addr<T>(value: &T) -> u64 {
    value as *const T as u64
}
