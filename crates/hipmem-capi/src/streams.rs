//! Stream extras real programs use: `hipStreamCreateWithPriority`,
//! `hipStreamGetPriority`, `hipStreamGetFlags` and `hipStreamAddCallback`.

use std::ffi::{c_int, c_uint, c_void};

use hipmem_rs::{Error, StreamFlags};

use crate::handles::{STREAM_LEGACY, STREAM_PER_THREAD};
use crate::types::*;
use crate::{call, current_device, handles, non_null, rt};

/// `hipStreamCreateWithPriority` on the current device: null `stream` or
/// unknown flag bits → InvalidValue; a priority outside
/// `hipDeviceGetStreamPriorityRange` is clamped into it (HIP's and CUDA's
/// rule).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamCreateWithPriority(
    stream: *mut hipStream_t,
    flags: c_uint,
    priority: c_int,
) -> hipError_t {
    call(|| {
        non_null(stream, "hipStreamCreateWithPriority: stream")?;
        let flags = StreamFlags::from_bits(flags)?;
        let s = rt()?.device(current_device())?.create_stream_with_priority(flags, priority)?;
        let h = handles::add_stream(s);
        // SAFETY: non-null; points to a writable hipStream_t (HIP's contract).
        unsafe { *stream = h };
        Ok(())
    })
}

/// `hipStreamGetPriority`: null `priority` → InvalidValue; the null stream
/// → 0; a destroyed stream → InvalidHandle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamGetPriority(stream: hipStream_t, priority: *mut c_int) -> hipError_t {
    call(|| {
        non_null(priority, "hipStreamGetPriority: priority")?;
        let p = if stream.is_null() { 0 } else { handles::stream(rt()?, stream)?.priority()? };
        // SAFETY: non-null; a writable int (HIP's contract).
        unsafe { *priority = p };
        Ok(())
    })
}

/// `hipStreamGetDevice`: the device a stream belongs to. Null output →
/// InvalidValue; the null stream (0, `hipStreamLegacy`,
/// `hipStreamPerThread`) → the current device; a stream made outside hipmem
/// → its own device (on cuda its context's; it is adopted); a destroyed or
/// made-up handle → InvalidHandle (AMD's runtime says ContextIsDestroyed).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamGetDevice(stream: hipStream_t, device: *mut hipDevice_t) -> hipError_t {
    call(|| {
        non_null(device, "hipStreamGetDevice: device")?;
        let rt = rt()?;
        let d = match handles::null_stream(rt, stream) {
            Some(s) => s.device(),
            None => handles::with_stream(rt, stream, |s| Ok(s.device()))?,
        };
        // SAFETY: non-null; a writable hipDevice_t (HIP's contract).
        unsafe { *device = d as hipDevice_t };
        Ok(())
    })
}

/// `hipStreamGetFlags`: null `flags` → InvalidValue; the null stream
/// (0) → InvalidValue (HIP's rule); `hipStreamLegacy` and
/// `hipStreamPerThread` → 0; a destroyed stream → InvalidHandle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamGetFlags(stream: hipStream_t, flags: *mut c_uint) -> hipError_t {
    call(|| {
        non_null(flags, "hipStreamGetFlags: flags")?;
        if stream.is_null() {
            return Err(Error::InvalidValue("hipStreamGetFlags of the null stream".into()));
        }
        let h = stream as usize as u64;
        let bits = if h == STREAM_LEGACY || h == STREAM_PER_THREAD {
            0
        } else {
            handles::stream(rt()?, stream)?.flags().bits()
        };
        // SAFETY: non-null; a writable unsigned (HIP's contract).
        unsafe { *flags = bits };
        Ok(())
    })
}

/// A stream callback and its arguments, sent to the thread that runs it.
struct Callback {
    f: unsafe extern "C" fn(hipStream_t, hipError_t, *mut c_void),
    stream: usize,
    user_data: usize,
}

/// `hipStreamAddCallback`: `callback(stream, hipSuccess, userData)` runs on
/// a host thread once the stream's earlier work is done. Null `callback`
/// or `flags != 0` → InvalidValue; a destroyed stream → InvalidHandle. The
/// callback must not call functions that wait for the stream.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipStreamAddCallback(
    stream: hipStream_t,
    callback: hipStreamCallback_t,
    userData: *mut c_void,
    flags: c_uint,
) -> hipError_t {
    call(|| {
        let f = callback.ok_or_else(|| Error::InvalidValue("hipStreamAddCallback: null callback".into()))?;
        if flags != 0 {
            return Err(Error::InvalidValue(format!("hipStreamAddCallback: flags must be 0, not {flags}")));
        }
        let s = handles::stream(rt()?, stream)?;
        let job = Callback { f, stream: stream as usize, user_data: userData as usize };
        s.launch_host_func(move || {
            let job = job;
            // SAFETY: HIP's contract: the callback may be called with these
            // arguments from another thread once the stream gets here.
            unsafe { (job.f)(job.stream as hipStream_t, hipSuccess, job.user_data as *mut c_void) }
        })
    })
}
