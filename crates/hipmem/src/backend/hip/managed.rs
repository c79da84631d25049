//! Managed memory on the HIP runtime: `hipMallocManaged`,
//! `hipMemPrefetchAsync`, `hipMemAdvise`, `hipMemRangeGetAttribute`,
//! `hipStreamAttachMemAsync`; freed with `hipFree`. HIP takes locations as a
//! device ordinal, `hipCpuDeviceId` (-1) for the host.
//!
//! The runtime migrates pages itself (or, on AMD GPUs without XNACK, keeps
//! managed memory where both sides reach it); what it moved is not
//! observable through HIP's API, so the statistics are unknown (`None`).
//! Host access needs no step of hipmem's. AMD's coarse-grain advice (100,
//! 101) is passed to the runtime, which knows it.

use std::ffi::c_int;

use super::{HipBackend, ptr, to_usize};
use crate::backend::managed_memory::{
    Advice, AttachFlags, Location, ManagedMemory, ManagedStatistics, RangeAttribute,
};
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};

fn device_id(l: Location) -> c_int {
    l.raw()
}

impl HipBackend {
    fn managed(&self) -> Result<&'static super::sys::Managed> {
        self.api.managed.as_ref().map_err(|missing| {
            Error::NotSupported(format!(
                "the HIP library {} has no {missing}: managed memory is not available",
                self.api.library
            ))
        })
    }

    /// The owner of `p` made current (device 0 if the runtime does not say).
    fn managed_device(&self, p: DevicePtr) -> Result<()> {
        self.copy_device(p).map(|_| ())
    }
}

impl ManagedMemory for HipBackend {
    fn allocate(&self, device: usize, size: u64, attach: AttachFlags) -> Result<DevicePtr> {
        let m = self.managed()?;
        let _device = self.bound(device)?;
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes of managed memory".into()));
        }
        let bytes = to_usize(size, "hipMallocManaged size")?;
        let mut p: *mut std::ffi::c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer; the device is current.
        let r = unsafe { (m.hipMallocManaged)(&mut p, bytes, attach.bits()) };
        self.check(r, || {
            format!("hipMallocManaged({size} bytes, flags {}) on device {device}", attach.bits())
        })?;
        Ok(DevicePtr(p as u64))
    }

    unsafe fn free(&self, p: DevicePtr) -> Result<()> {
        // No queued work of any device may touch the memory once it is freed.
        self.synchronize_all()?;
        self.managed_device(p)?;
        // SAFETY: every device has drained; the caller frees `p` once and
        // uses no reference into it afterwards.
        let r = unsafe { (self.api.core.hipFree)(ptr(p)) };
        self.check(r, || format!("hipFree({p}) of managed memory"))
    }

    fn prefetch(&self, p: DevicePtr, len: u64, to: Location, stream: RawStream) -> Result<()> {
        let m = self.managed()?;
        if let Location::Device(d) = to {
            self.device(d)?;
        }
        let t = self.target(stream)?;
        let count = to_usize(len, "hipMemPrefetchAsync size")?;
        // SAFETY: plain values; the runtime validates the range, and the
        // stream is live for the call (held by `t`).
        let r = unsafe { (m.hipMemPrefetchAsync)(ptr(p), count, device_id(to), t.raw) };
        self.check(r, || format!("hipMemPrefetchAsync({p}, {len} bytes, to {to:?}) on device {}", t.device))
    }

    fn advise(&self, p: DevicePtr, len: u64, advice: Advice, to: Location) -> Result<()> {
        let m = self.managed()?;
        // Where the runtime ignores the location, give it a valid one.
        let to = if advice.ignores_device() || advice == Advice::UnsetPreferredLocation {
            Location::Device(0)
        } else {
            to
        };
        if let Location::Device(d) = to {
            self.device(d)?;
        }
        self.managed_device(p)?;
        let count = to_usize(len, "hipMemAdvise size")?;
        // SAFETY: plain values; the runtime validates the range.
        let r = unsafe { (m.hipMemAdvise)(ptr(p), count, advice.raw(), device_id(to)) };
        self.check(r, || {
            format!("hipMemAdvise({p}, {len} bytes, advice {} ({advice:?}), {to:?})", advice.raw())
        })
    }

    fn range_attribute(
        &self,
        p: DevicePtr,
        len: u64,
        attribute: RangeAttribute,
        out: &mut [i32],
    ) -> Result<()> {
        let m = self.managed()?;
        if out.is_empty() {
            return Err(Error::InvalidValue("hipMemRangeGetAttribute: no room for the answer".into()));
        }
        let out = match attribute {
            RangeAttribute::AccessedBy => out,
            _ => &mut out[..1],
        };
        self.managed_device(p)?;
        let count = to_usize(len, "hipMemRangeGetAttribute size")?;
        let bytes = std::mem::size_of_val(out);
        // SAFETY: `out` is a live, exclusively borrowed buffer of `bytes`
        // bytes (4 for the scalar attributes, whose value is an int); the
        // runtime validates the range.
        let r = unsafe {
            (m.hipMemRangeGetAttribute)(out.as_mut_ptr().cast(), bytes, attribute.raw(), ptr(p), count)
        };
        self.check(r, || format!("hipMemRangeGetAttribute({}, {p}, {len} bytes)", attribute.raw()))
    }

    fn stream_attach(&self, stream: RawStream, p: DevicePtr, len: u64, flags: AttachFlags) -> Result<()> {
        let m = self.managed()?;
        let t = self.target(stream)?;
        let length = to_usize(len, "hipStreamAttachMemAsync length")?;
        // SAFETY: plain values; the runtime validates the pointer, and the
        // stream is live for the call (held by `t`).
        let r = unsafe { (m.hipStreamAttachMemAsync)(t.raw, ptr(p), length, flags.bits()) };
        self.check(r, || {
            format!(
                "hipStreamAttachMemAsync({p}, {len} bytes, flags {}) on device {}",
                flags.bits(),
                t.device
            )
        })
    }

    fn host_access(&self, _ptr: DevicePtr, _len: u64, _write: bool) -> Result<()> {
        Ok(())
    }

    fn statistics(&self) -> ManagedStatistics {
        ManagedStatistics::default()
    }
}
