//! hipmem's built-in kernels on the HIP runtime, made of HIP calls the
//! runtime already has (AMD code objects cannot be built here):
//!
//! - **fill** is `hipMemsetD8Async` / `hipMemsetD16Async` /
//!   `hipMemsetD32Async` of the element: the same bytes, in stream order
//!   (`HipBackend::memset_on`).
//! - **iota** (`data[i] = i * k`, wrapping 32-bit arithmetic) builds the
//!   values on the host in page-locked staging blocks (`hipHostMalloc`) and
//!   queues a `hipMemcpyAsync` of each block on the stream, followed by a
//!   `hipEventRecord` of the block's own event. A block is reused only once
//!   its event has completed (so the copy that reads it is done), and freed
//!   only when the backend is dropped, after every device has drained: the
//!   staging memory grows to the most iota bytes in flight at once, in
//!   blocks of at most [`BLOCK`] bytes.
//! - **delay** is a host function on the stream (`hipLaunchHostFunc`) that
//!   sleeps for the duration, followed by a `hipMemsetD32Async` of the flag:
//!   the stream is busy for the duration, then the flag is written, and
//!   later work on the stream waits for both. A zero duration queues only
//!   the memset. AMD's runtime runs host functions on a runtime thread, so
//!   a long delay also holds back host functions of other streams queued
//!   behind it there (a GPU kernel would not); hipmem uses delays only to
//!   prove ordering.

use std::ffi::{c_uint, c_void};
use std::sync::Mutex;
use std::time::Duration;

use super::sys::{self, hipEvent_t};
use super::{HipBackend, Target, lock, ptr, set_device};
use crate::backend::{DevicePtr, FillValue};
use crate::error::{Error, Result};

/// The largest staging block, in bytes.
pub(super) const BLOCK: usize = 4 << 20;
/// The smallest staging block, in bytes.
const MIN_BLOCK: usize = 64 << 10;

/// One page-locked staging block and the event recorded after its last copy.
#[derive(Debug)]
struct Block {
    device: usize,
    host: u64,
    len: usize,
    event: u64,
    /// Whether the event was recorded (a copy from the block was queued).
    recorded: bool,
}

/// The iota kernel's staging blocks.
#[derive(Debug, Default)]
pub(super) struct Staging {
    blocks: Mutex<Vec<Block>>,
}

impl Staging {
    /// Frees every block (the backend is being dropped and its devices have drained).
    pub(super) fn release_all(&self, backend: &HipBackend) {
        let api = backend.api;
        for b in lock(&self.blocks).drain(..) {
            let _device = match set_device(api, b.device) {
                Ok(on) => on,
                Err(e) => {
                    tracing::warn!(target: "hipmem", "releasing an iota staging block: {e}");
                    continue;
                }
            };
            // SAFETY: the event was created by this backend and is destroyed once, here.
            let r = unsafe { (api.core.hipEventDestroy)(b.event as usize as hipEvent_t) };
            if let Err(e) = backend.check(r, || format!("hipEventDestroy({:#x}) of a staging block", b.event))
            {
                tracing::warn!(target: "hipmem", "{e}");
            }
            // SAFETY: the block came from hipHostMalloc and is freed once,
            // here; every device has drained, so no copy reads it.
            let r = unsafe { (api.core.hipHostFree)(b.host as usize as *mut c_void) };
            if let Err(e) = backend.check(r, || format!("hipHostFree({:#x}) of a staging block", b.host)) {
                tracing::warn!(target: "hipmem", "{e}");
            }
        }
    }
}

/// The size of a new block for `bytes` bytes.
fn block_len(bytes: usize) -> usize {
    bytes.next_power_of_two().clamp(MIN_BLOCK, BLOCK)
}

/// The element values of `data[start..start + n]`: `i * k`, wrapping.
fn iota_values(start: u64, n: usize, k: i32, out: &mut [u8]) {
    for (j, chunk) in out.chunks_exact_mut(4).take(n).enumerate() {
        let i = start.wrapping_add(j as u64) as i32;
        chunk.copy_from_slice(&i.wrapping_mul(k).to_ne_bytes());
    }
}

impl HipBackend {
    /// A staging block of at least `bytes` bytes on `t`'s device whose last
    /// copy has completed, or a new one.
    fn staging_block(&self, t: &Target, bytes: usize) -> Result<Block> {
        {
            let mut blocks = lock(&self.staging.blocks);
            let mut found = None;
            for (i, b) in blocks.iter().enumerate() {
                if b.device != t.device || b.len < bytes {
                    continue;
                }
                let idle = !b.recorded || {
                    // SAFETY: a live event of this backend's.
                    let r = unsafe { (self.api.core.hipEventQuery)(b.event as usize as hipEvent_t) };
                    r == sys::hipSuccess
                };
                if idle {
                    found = Some(i);
                    break;
                }
            }
            if let Some(i) = found {
                return Ok(blocks.swap_remove(i));
            }
        }
        let len = block_len(bytes);
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device is current (`t`).
        let r =
            unsafe { (self.api.core.hipHostMalloc)(&mut host, len, sys::hipHostMallocPortable as c_uint) };
        self.check(r, || format!("iota kernel: hipHostMalloc({len} bytes) for staging"))?;
        let mut event: hipEvent_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the device is current.
        let r = unsafe { (self.api.core.hipEventCreateWithFlags)(&mut event, sys::hipEventDisableTiming) };
        if let Err(e) = self.check(r, || "iota kernel: hipEventCreateWithFlags(DisableTiming)".into()) {
            // SAFETY: allocated just above; nothing uses it.
            let _ = unsafe { (self.api.core.hipHostFree)(host) };
            return Err(e);
        }
        Ok(Block { device: t.device, host: host as u64, len, event: event as u64, recorded: false })
    }

    /// The iota kernel on a resolved stream (see the module documentation).
    pub(super) fn iota_on(&self, t: &Target, dst: DevicePtr, count: u64, k: i32) -> Result<()> {
        let total = count
            .checked_mul(4)
            .ok_or_else(|| Error::InvalidValue(format!("iota kernel: {count} elements overflow")))?;
        if count == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return Err(Error::InvalidValue("iota kernel: null destination".into()));
        }
        dst.offset(total)?;
        let per_block = (BLOCK / 4) as u64;
        let mut start = 0u64;
        while start < count {
            let n = (count - start).min(per_block) as usize;
            let bytes = n * 4;
            let mut block = self.staging_block(t, bytes)?;
            // SAFETY: the block is `block.len >= bytes` bytes of page-locked
            // host memory owned by this backend, and idle: no queued copy
            // reads it (its event completed, or it never had a copy).
            let host = unsafe { std::slice::from_raw_parts_mut(block.host as usize as *mut u8, bytes) };
            iota_values(start, n, k, host);
            let to = DevicePtr(dst.0 + start * 4);
            // SAFETY: the source is the staging block, which stays allocated
            // and unwritten until the event recorded below has completed; the
            // runtime validates the destination; a live stream.
            let r = unsafe {
                (self.api.core.hipMemcpyAsync)(
                    ptr(to),
                    block.host as usize as *const c_void,
                    bytes,
                    sys::hipMemcpyHostToDevice,
                    t.raw,
                )
            };
            if let Err(e) = self.check(r, || {
                format!(
                    "iota kernel: hipMemcpyAsync(HostToDevice, {to}, {bytes} bytes) on device {}",
                    t.device
                )
            }) {
                lock(&self.staging.blocks).push(block);
                return Err(e);
            }
            // SAFETY: a live event and stream of the current device.
            let r = unsafe { (self.api.core.hipEventRecord)(block.event as usize as hipEvent_t, t.raw) };
            let recorded = self.check(r, || format!("iota kernel: hipEventRecord on device {}", t.device));
            if let Err(e) = recorded {
                // Without the event nothing says when the copy is done: wait for it.
                // SAFETY: a live stream of the current device.
                let _ = unsafe { (self.api.core.hipStreamSynchronize)(t.raw) };
                block.recorded = false;
                lock(&self.staging.blocks).push(block);
                return Err(e);
            }
            block.recorded = true;
            lock(&self.staging.blocks).push(block);
            start += n as u64;
        }
        Ok(())
    }

    /// The delay kernel on a resolved stream (see the module documentation).
    pub(super) fn delay_on(&self, t: &Target, duration: Duration, flag: DevicePtr, value: u32) -> Result<()> {
        if flag.is_null() {
            return Err(Error::InvalidValue("delay kernel: null flag address".into()));
        }
        if !duration.is_zero() {
            self.host_func_on(t, Box::new(move || std::thread::sleep(duration)))?;
        }
        self.memset_on(t, flag, FillValue::U32(value), 1, "delay kernel")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iota_values_wrap_like_the_gpu_kernel() {
        let mut out = vec![0u8; 16];
        iota_values(0, 4, 3, &mut out);
        let got: Vec<i32> = out.chunks(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![0, 3, 6, 9]);
        iota_values(1 << 31, 2, 2, &mut out[..8]);
        let got: Vec<i32> = out[..8].chunks(4).map(|c| i32::from_ne_bytes(c.try_into().unwrap())).collect();
        assert_eq!(got, vec![(i32::MIN).wrapping_mul(2), (i32::MIN + 1).wrapping_mul(2)]);
    }

    #[test]
    fn staging_blocks_are_bounded() {
        assert_eq!(block_len(4), MIN_BLOCK);
        assert_eq!(block_len(MIN_BLOCK + 1), 2 * MIN_BLOCK);
        assert_eq!(block_len(BLOCK), BLOCK);
        assert_eq!(block_len(BLOCK + 1), BLOCK);
    }
}
