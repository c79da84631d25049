//! Streams, events, devices and errors: what the memory functions need
//! around them.

use std::ffi::{CStr, c_char, c_float, c_int, c_uint, c_void};

use hipmem_rs::{Error, EventFlags, StreamFlags};

use crate::types::*;
use crate::{call, current_device, device_ordinal, handles, non_null, rt, set_current_device};

// ---- devices ---------------------------------------------------------------------

/// `hipInit`: flags must be 0; opens the runtime.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipInit(flags: c_uint) -> hipError_t {
    call(|| {
        if flags != 0 {
            return Err(Error::InvalidValue(format!("hipInit: flags must be 0, not {flags}")));
        }
        rt().map(|_| ())
    })
}

/// `hipGetDeviceCount`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDeviceCount(count: *mut c_int) -> hipError_t {
    call(|| {
        non_null(count, "hipGetDeviceCount: count")?;
        let n = rt()?.device_count();
        // SAFETY: non-null; points to a writable int (HIP's contract).
        unsafe { *count = n as c_int };
        Ok(())
    })
}

/// `hipSetDevice`: the calling thread's current device, for hipmem and, on
/// cuda, for the CUDA runtime too (the device's primary context is left
/// current, as `cudaSetDevice` leaves it).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipSetDevice(deviceId: c_int) -> hipError_t {
    call(|| {
        let rt = rt()?;
        let device = device_ordinal(rt, deviceId)?;
        rt.make_current(device)?;
        set_current_device(device);
        Ok(())
    })
}

/// `hipGetDevice`: the calling thread's current device. On cuda that is
/// the device of the thread's current context where it has one (what
/// `cudaSetDevice` or `torch.cuda.set_device` chose: HIP on NVIDIA shares
/// the CUDA runtime's device), else the last `hipSetDevice`'s (0 before any).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetDevice(deviceId: *mut c_int) -> hipError_t {
    call(|| {
        non_null(deviceId, "hipGetDevice: deviceId")?;
        // SAFETY: non-null; points to a writable int (HIP's contract).
        unsafe { *deviceId = current_device() as c_int };
        Ok(())
    })
}

/// `hipDeviceSynchronize` of the current device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceSynchronize() -> hipError_t {
    call(|| rt()?.device_synchronize(current_device()))
}

// ---- streams ---------------------------------------------------------------------

/// `hipStreamCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreate(stream: *mut hipStream_t) -> hipError_t {
    // SAFETY: forwards the caller's pointer under the same contract.
    unsafe { hipStreamCreateWithFlags(stream, 0) }
}

/// `hipStreamCreateWithFlags` (`hipStreamDefault` 0, `hipStreamNonBlocking` 1),
/// on the current device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithFlags(stream: *mut hipStream_t, flags: c_uint) -> hipError_t {
    call(|| {
        non_null(stream, "hipStreamCreate: stream")?;
        let flags = StreamFlags::from_bits(flags)?;
        let s = rt()?.device(current_device())?.create_stream_with_flags(flags)?;
        let h = handles::add_stream(s);
        // SAFETY: non-null; points to a writable hipStream_t (HIP's contract).
        unsafe { *stream = h };
        Ok(())
    })
}

/// `hipStreamDestroy`: work already queued still runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamDestroy(stream: hipStream_t) -> hipError_t {
    call(|| handles::destroy_stream(stream))
}

/// `hipStreamSynchronize`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamSynchronize(stream: hipStream_t) -> hipError_t {
    call(|| handles::with_stream(rt()?, stream, |s| s.synchronize()))
}

/// `hipStreamQuery`: hipSuccess when idle, hipErrorNotReady otherwise.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamQuery(stream: hipStream_t) -> hipError_t {
    call(|| {
        if handles::with_stream(rt()?, stream, |s| s.query())? {
            Ok(())
        } else {
            Err(Error::NotReady("the stream has work pending".into()))
        }
    })
}

/// `hipStreamWaitEvent`: flags must be 0.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamWaitEvent(
    stream: hipStream_t,
    event: hipEvent_t,
    flags: c_uint,
) -> hipError_t {
    call(|| {
        if flags != 0 {
            return Err(Error::InvalidValue(format!("hipStreamWaitEvent: flags must be 0, not {flags}")));
        }
        let event = handles::event(event)?;
        handles::with_stream(rt()?, stream, |s| s.wait_event(&event))
    })
}

/// A host function and its argument, sent to the thread that runs it.
struct HostFn {
    f: unsafe extern "C" fn(*mut c_void),
    user_data: usize,
}

/// `hipLaunchHostFunc`: `fn(userData)` runs on a host thread when the stream
/// gets there. It must not call back into functions that wait for the stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipLaunchHostFunc(
    stream: hipStream_t,
    fn_: hipHostFn_t,
    userData: *mut c_void,
) -> hipError_t {
    call(|| {
        let f = fn_.ok_or_else(|| Error::InvalidValue("hipLaunchHostFunc: null function".into()))?;
        let job = HostFn { f, user_data: userData as usize };
        handles::with_stream(rt()?, stream, move |s| {
            s.launch_host_func(move || {
                let job = job;
                // SAFETY: HIP's contract: `fn` may be called with `userData` from
                // another thread once the stream reaches this point.
                unsafe { (job.f)(job.user_data as *mut c_void) }
            })
        })
    })
}

// ---- events ----------------------------------------------------------------------

/// `hipEventCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventCreate(event: *mut hipEvent_t) -> hipError_t {
    // SAFETY: forwards the caller's pointer under the same contract.
    unsafe { hipEventCreateWithFlags(event, 0) }
}

/// `hipEventCreateWithFlags` (Default 0, BlockingSync 1, DisableTiming 2,
/// Interprocess 4 with DisableTiming), on the current device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventCreateWithFlags(event: *mut hipEvent_t, flags: c_uint) -> hipError_t {
    call(|| {
        non_null(event, "hipEventCreate: event")?;
        let flags = EventFlags::from_bits(flags)?;
        let e = rt()?.device(current_device())?.create_event_with_flags(flags)?;
        let h = handles::add_event(e);
        // SAFETY: non-null; points to a writable hipEvent_t (HIP's contract).
        unsafe { *event = h };
        Ok(())
    })
}

/// `hipEventRecord`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventRecord(event: hipEvent_t, stream: hipStream_t) -> hipError_t {
    call(|| {
        let event = handles::event(event)?;
        handles::with_stream(rt()?, stream, |s| event.record(s))
    })
}

/// `hipEventQuery`: hipSuccess when complete, hipErrorNotReady otherwise.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventQuery(event: hipEvent_t) -> hipError_t {
    call(|| {
        if handles::event(event)?.query()? {
            Ok(())
        } else {
            Err(Error::NotReady("the event has not completed".into()))
        }
    })
}

/// `hipEventSynchronize`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventSynchronize(event: hipEvent_t) -> hipError_t {
    call(|| handles::event(event)?.synchronize())
}

/// `hipEventElapsedTime`: milliseconds from `start` to `stop`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventElapsedTime(
    ms: *mut c_float,
    start: hipEvent_t,
    stop: hipEvent_t,
) -> hipError_t {
    call(|| {
        non_null(ms, "hipEventElapsedTime: ms")?;
        let (start, stop) = (handles::event(start)?, handles::event(stop)?);
        let t = start.elapsed_ms(&stop)?;
        // SAFETY: non-null; points to a writable float (HIP's contract).
        unsafe { *ms = t };
        Ok(())
    })
}

/// `hipEventDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipEventDestroy(event: hipEvent_t) -> hipError_t {
    call(|| {
        drop(handles::remove_event(event)?);
        Ok(())
    })
}

// ---- errors ----------------------------------------------------------------------

/// `hipGetLastError`: the calling thread's last error, reset to hipSuccess.
#[unsafe(no_mangle)]
pub extern "C" fn hipGetLastError() -> hipError_t {
    crate::take_last_error()
}

/// `hipPeekAtLastError`: the calling thread's last error, not reset.
#[unsafe(no_mangle)]
pub extern "C" fn hipPeekAtLastError() -> hipError_t {
    crate::peek_last_error()
}

/// Every code with its `hipGetErrorName` and `hipGetErrorString` texts.
pub const ERROR_TEXTS: [(hipError_t, &CStr, &CStr); 17] = [
    (hipSuccess, c"hipSuccess", c"no error"),
    (hipErrorInvalidValue, c"hipErrorInvalidValue", c"invalid argument"),
    (hipErrorOutOfMemory, c"hipErrorOutOfMemory", c"out of memory"),
    (hipErrorNotInitialized, c"hipErrorNotInitialized", c"initialization error"),
    (hipErrorInvalidPitchValue, c"hipErrorInvalidPitchValue", c"invalid pitch argument"),
    (hipErrorInvalidSymbol, c"hipErrorInvalidSymbol", c"invalid device symbol"),
    (hipErrorInvalidDevicePointer, c"hipErrorInvalidDevicePointer", c"invalid device pointer"),
    (hipErrorInvalidMemcpyDirection, c"hipErrorInvalidMemcpyDirection", c"invalid copy direction for memcpy"),
    (hipErrorInvalidDevice, c"hipErrorInvalidDevice", c"invalid device ordinal"),
    (hipErrorInvalidHandle, c"hipErrorInvalidHandle", c"invalid resource handle"),
    (hipErrorNotFound, c"hipErrorNotFound", c"named symbol not found"),
    (hipErrorNotReady, c"hipErrorNotReady", c"device not ready"),
    (
        hipErrorPeerAccessAlreadyEnabled,
        c"hipErrorPeerAccessAlreadyEnabled",
        c"peer access is already enabled",
    ),
    (hipErrorPeerAccessNotEnabled, c"hipErrorPeerAccessNotEnabled", c"peer access has not been enabled"),
    (hipErrorContextIsDestroyed, c"hipErrorContextIsDestroyed", c"context is destroyed"),
    (hipErrorNotSupported, c"hipErrorNotSupported", c"operation not supported"),
    (hipErrorUnknown, c"hipErrorUnknown", c"unknown error"),
];

fn texts(code: hipError_t) -> (&'static CStr, &'static CStr) {
    let unknown = &ERROR_TEXTS[ERROR_TEXTS.len() - 1];
    let (_, name, text) = ERROR_TEXTS.iter().find(|(c, _, _)| *c == code).unwrap_or(unknown);
    (name, text)
}

/// `hipGetErrorName`: the enumerator's name (unknown codes: "hipErrorUnknown").
#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorName(hip_error: hipError_t) -> *const c_char {
    texts(hip_error).0.as_ptr()
}

/// `hipGetErrorString`: a description (unknown codes: "unknown error").
#[unsafe(no_mangle)]
pub extern "C" fn hipGetErrorString(hipError: hipError_t) -> *const c_char {
    texts(hipError).1.as_ptr()
}
