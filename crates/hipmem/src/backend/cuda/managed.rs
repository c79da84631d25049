//! Managed memory on the CUDA driver: `cuMemAllocManaged`,
//! `cuMemPrefetchAsync_v2` and `cuMemAdvise_v2` (the CUDA 12.2+/13 forms that
//! take a `CUmemLocation`), `cuMemRangeGetAttribute`, `cuStreamAttachMemAsync`,
//! loaded on first use; freed with `cuMemFree_v2`.
//!
//! The driver migrates pages itself; what it moved is not observable through
//! the driver API, so the statistics are unknown (`None`). Host access needs
//! no step of hipmem's: the hardware faults pages back (the safe layer waits
//! for the devices first).

use std::ffi::{c_int, c_uint, c_void};
use std::sync::OnceLock;

use super::CudaBackend;
use super::driver::{self, CUdeviceptr, CUmemLocation, CUresult, CUstream};
use super::handles::OnDevice;
use super::result;
use crate::backend::managed_memory::{
    Advice, AttachFlags, Location, ManagedMemory, ManagedStatistics, RangeAttribute,
};
use crate::backend::{DevicePtr, RawStream};
use crate::error::{Error, Result};

/// `CU_MEM_LOCATION_TYPE_HOST`.
const CU_MEM_LOCATION_TYPE_HOST: c_uint = 2;

type MemAllocManaged =
    unsafe extern "C" fn(dptr: *mut CUdeviceptr, bytesize: usize, flags: c_uint) -> CUresult;
type MemPrefetchAsyncV2 = unsafe extern "C" fn(
    dev_ptr: CUdeviceptr,
    count: usize,
    location: CUmemLocation,
    flags: c_uint,
    stream: CUstream,
) -> CUresult;
type MemAdviseV2 = unsafe extern "C" fn(
    dev_ptr: CUdeviceptr,
    count: usize,
    advice: c_int,
    location: CUmemLocation,
) -> CUresult;
type MemRangeGetAttribute = unsafe extern "C" fn(
    data: *mut c_void,
    data_size: usize,
    attribute: c_int,
    dev_ptr: CUdeviceptr,
    count: usize,
) -> CUresult;
type StreamAttachMemAsync =
    unsafe extern "C" fn(stream: CUstream, dptr: CUdeviceptr, length: usize, flags: c_uint) -> CUresult;

struct Entries {
    alloc: MemAllocManaged,
    prefetch: MemPrefetchAsyncV2,
    advise: MemAdviseV2,
    range_attribute: MemRangeGetAttribute,
    attach: StreamAttachMemAsync,
}

fn entries() -> Result<&'static Entries> {
    static ENTRIES: OnceLock<Result<Entries>> = OnceLock::new();
    let loaded = ENTRIES.get_or_init(|| {
        // SAFETY: each type above is the signature cuda.h (12.2+ / 13) gives
        // for the symbol.
        unsafe {
            Ok(Entries {
                alloc: driver::symbol("cuMemAllocManaged")?,
                prefetch: driver::symbol("cuMemPrefetchAsync_v2")?,
                advise: driver::symbol("cuMemAdvise_v2")?,
                range_attribute: driver::symbol("cuMemRangeGetAttribute")?,
                attach: driver::symbol("cuStreamAttachMemAsync")?,
            })
        }
    });
    loaded.as_ref().map_err(Clone::clone)
}

fn location(l: Location) -> CUmemLocation {
    match l {
        Location::Host => CUmemLocation { type_: CU_MEM_LOCATION_TYPE_HOST, id: 0 },
        Location::Device(d) => CUmemLocation { type_: driver::CU_MEM_LOCATION_TYPE_DEVICE, id: d as c_int },
    }
}

impl CudaBackend {
    /// Some context current for calls on `ptr` (its device's, else device
    /// 0's) until the result drops.
    fn managed_context(&self, ptr: DevicePtr) -> Result<OnDevice<'_>> {
        self.copy_device(ptr)
    }

    fn size(len: u64, what: &str) -> Result<usize> {
        usize::try_from(len).map_err(|_| Error::InvalidValue(format!("{what}: {len} bytes do not fit usize")))
    }
}

impl ManagedMemory for CudaBackend {
    fn allocate(&self, device: usize, size: u64, attach: AttachFlags) -> Result<DevicePtr> {
        let e = entries()?;
        let _ctx = self.bound(device)?;
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes of managed memory".into()));
        }
        let bytes = Self::size(size, "hipMallocManaged")?;
        let mut p: CUdeviceptr = 0;
        // SAFETY: `p` is a valid out-pointer; the device's context is current.
        let r = unsafe { (e.alloc)(&mut p, bytes, attach.bits()) };
        self.check(r, || {
            format!("cuMemAllocManaged({size} bytes, flags {}) on device {device}", attach.bits())
        })?;
        Ok(DevicePtr(p))
    }

    unsafe fn free(&self, ptr: DevicePtr) -> Result<()> {
        // No queued work of any device may touch the memory once it is freed.
        self.synchronize_all()?;
        let _ctx = self.managed_context(ptr)?;
        // SAFETY: every device has drained; the caller frees `ptr` once and
        // uses no reference into it afterwards.
        unsafe { result::mem_free(self.driver, ptr.0, || format!("cuMemFree_v2({ptr}) of managed memory")) }
    }

    fn prefetch(&self, ptr: DevicePtr, len: u64, to: Location, stream: RawStream) -> Result<()> {
        let e = entries()?;
        if let Location::Device(d) = to {
            self.device(d)?;
        }
        let t = self.target(stream)?;
        let count = Self::size(len, "hipMemPrefetchAsync")?;
        // SAFETY: plain values; the driver validates the range, and the
        // stream is live for the call (held by `t`).
        let r = unsafe { (e.prefetch)(ptr.0, count, location(to), 0, t.raw) };
        self.check(r, || {
            format!("cuMemPrefetchAsync_v2({ptr}, {len} bytes, to {to:?}) on device {}", t.dev.ordinal)
        })
    }

    fn advise(&self, ptr: DevicePtr, len: u64, advice: Advice, to: Location) -> Result<()> {
        let e = entries()?;
        if matches!(advice, Advice::SetCoarseGrain | Advice::UnsetCoarseGrain) {
            return Err(Error::NotSupported(format!(
                "coarse-grain advice ({}) is AMD-only; CUDA has no equivalent",
                advice.raw()
            )));
        }
        // Where the driver ignores the location, give it a valid one.
        let to = if advice.ignores_device() || advice == Advice::UnsetPreferredLocation {
            Location::Device(0)
        } else {
            to
        };
        if let Location::Device(d) = to {
            self.device(d)?;
        }
        let _ctx = self.managed_context(ptr)?;
        let count = Self::size(len, "hipMemAdvise")?;
        // SAFETY: plain values; the driver validates the range.
        let r = unsafe { (e.advise)(ptr.0, count, advice.raw(), location(to)) };
        self.check(r, || format!("cuMemAdvise_v2({ptr}, {len} bytes, advice {}, {to:?})", advice.raw()))
    }

    fn range_attribute(
        &self,
        ptr: DevicePtr,
        len: u64,
        attribute: RangeAttribute,
        out: &mut [i32],
    ) -> Result<()> {
        let e = entries()?;
        if out.is_empty() {
            return Err(Error::InvalidValue("hipMemRangeGetAttribute: no room for the answer".into()));
        }
        let out = match attribute {
            RangeAttribute::AccessedBy => out,
            _ => &mut out[..1],
        };
        let _ctx = self.managed_context(ptr)?;
        let count = Self::size(len, "hipMemRangeGetAttribute")?;
        let bytes = std::mem::size_of_val(out);
        // SAFETY: `out` is a live, exclusively borrowed buffer of `bytes`
        // bytes (4 for the scalar attributes, whose value is an int in CUDA
        // 13); the driver validates the range.
        let r = unsafe { (e.range_attribute)(out.as_mut_ptr().cast(), bytes, attribute.raw(), ptr.0, count) };
        self.check(r, || format!("cuMemRangeGetAttribute({}, {ptr}, {len} bytes)", attribute.raw()))
    }

    fn stream_attach(&self, stream: RawStream, ptr: DevicePtr, len: u64, flags: AttachFlags) -> Result<()> {
        let e = entries()?;
        let t = self.target(stream)?;
        let length = Self::size(len, "hipStreamAttachMemAsync")?;
        // SAFETY: plain values; the driver validates the pointer, and the
        // stream is live for the call (held by `t`).
        let r = unsafe { (e.attach)(t.raw, ptr.0, length, flags.bits()) };
        self.check(r, || {
            format!(
                "cuStreamAttachMemAsync({ptr}, {len} bytes, flags {}) on device {}",
                flags.bits(),
                t.dev.ordinal
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
