//! Virtual memory management on the HIP runtime: `hipMemCreate`,
//! `hipMemAddressReserve`, `hipMemMap`, `hipMemSetAccess`, ... (the group is
//! off where one of them is missing, or on a runtime older than ROCm 5.3,
//! whose `hipMemAllocationProp` has another layout).
//!
//! A physical allocation's handle is HIP's `hipMemGenericAllocationHandle_t`
//! value. HIP does not report an allocation's size from its handle, so the
//! backend keeps the size and device of each handle it created (0 for an
//! imported one, as on CUDA), with the number of handle references it
//! handed out (create, retain, import), for `allocation_properties`.
//!
//! AMD's `hipMemMap` (ROCm/clr `hipamd/src/hip_vm.cpp`) maps only from
//! offset 0 of a physical allocation and returns hipErrorInvalidValue for
//! any other offset; hipmem's runtime allows a nonzero offset, so on AMD
//! such a mapping fails with that code and a message saying why (libhipmem
//! maps at any offset).

use std::collections::HashMap;
use std::ffi::{c_int, c_ulonglong, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use super::sys::{self, hipMemGenericAllocationHandle_t};
use super::{HipBackend, lock, ptr, to_usize};
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::{HANDLE_TYPE_POSIX_FD, PhysicalProperties, VirtualMemory};
use crate::error::{Error, Result};

/// What the backend knows of one handle.
#[derive(Copy, Clone, Debug)]
struct Known {
    props: PhysicalProperties,
    refs: u32,
}

/// The handles this backend handed out.
#[derive(Debug, Default)]
pub(super) struct HipVmm {
    handles: Mutex<HashMap<u64, Known>>,
}

fn handle(h: u64) -> hipMemGenericAllocationHandle_t {
    h as usize as hipMemGenericAllocationHandle_t
}

impl HipBackend {
    fn vmm(&self) -> Result<&'static sys::Vmm> {
        let v = self.api.vmm.as_ref().map_err(|missing| {
            Error::NotSupported(format!(
                "the HIP library {} has no {missing}: virtual memory management is not available",
                self.api.library
            ))
        })?;
        if !self.allocation_prop_layout_known() {
            return Err(Error::NotSupported(format!(
                "HIP {} predates ROCm 5.3, whose hipMemAllocationProp layout hipmem uses",
                self.runtime_version.map(|v| v.to_string()).unwrap_or_default()
            )));
        }
        Ok(v)
    }

    /// `hipMemGetAllocationGranularity` of a pinned allocation on `device`.
    pub(super) fn vmm_granularity(&self, device: usize, recommended: bool) -> Result<u64> {
        let v = self.vmm()?;
        self.device(device)?;
        let prop = sys::hipMemAllocationProp::pinned_on_device(device as c_int, 0);
        let option = if recommended {
            sys::hipMemAllocationGranularityRecommended
        } else {
            sys::hipMemAllocationGranularityMinimum
        };
        let mut g = 0usize;
        // SAFETY: valid out-pointer and a fully initialized properties struct.
        let r = unsafe { (v.hipMemGetAllocationGranularity)(&mut g, &prop, option) };
        self.check(r, || format!("hipMemGetAllocationGranularity(option {option}) on device {device}"))?;
        Ok(g as u64)
    }

    fn remember(&self, h: u64, props: PhysicalProperties) {
        lock(&self.vmm.handles).entry(h).and_modify(|k| k.refs += 1).or_insert(Known { props, refs: 1 });
    }
}

impl VirtualMemory for HipBackend {
    fn granularity(&self, device: usize, recommended: bool) -> Result<u64> {
        self.vmm_granularity(device, recommended)
    }

    fn mem_create(&self, device: usize, size: u64, handle_types: u32) -> Result<u64> {
        let v = self.vmm()?;
        self.bound(device)?;
        let prop = sys::hipMemAllocationProp::pinned_on_device(device as c_int, handle_types as c_int);
        let bytes = to_usize(size, "hipMemCreate size")?;
        let mut h: hipMemGenericAllocationHandle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer and a fully initialized properties struct.
        let r = unsafe { (v.hipMemCreate)(&mut h, bytes, &prop, 0) };
        self.check(r, || {
            format!("hipMemCreate({size} bytes on device {device}, handle types {handle_types:#x})")
        })?;
        self.remember(h as u64, PhysicalProperties { device, size, handle_types });
        Ok(h as u64)
    }

    fn mem_release(&self, h: u64) -> Result<()> {
        let v = self.vmm()?;
        // SAFETY: the runtime validates the handle.
        let r = unsafe { (v.hipMemRelease)(handle(h)) };
        self.check(r, || format!("hipMemRelease({h:#x})"))?;
        let mut handles = lock(&self.vmm.handles);
        if let Some(k) = handles.get_mut(&h) {
            k.refs = k.refs.saturating_sub(1);
            if k.refs == 0 {
                handles.remove(&h);
            }
        }
        Ok(())
    }

    fn address_reserve(&self, size: u64, alignment: u64, hint: DevicePtr) -> Result<DevicePtr> {
        let v = self.vmm()?;
        self.bound(0)?;
        let mut out: *mut c_void = std::ptr::null_mut();
        let (bytes, align) = (to_usize(size, "reservation size")?, to_usize(alignment, "alignment")?);
        // SAFETY: valid out-pointer; plain values otherwise.
        let r = unsafe { (v.hipMemAddressReserve)(&mut out, bytes, align, ptr(hint), 0) };
        self.check(r, || format!("hipMemAddressReserve({size} bytes, alignment {alignment}, hint {hint})"))?;
        Ok(DevicePtr(out as u64))
    }

    fn address_free(&self, p: DevicePtr, size: u64) -> Result<()> {
        let v = self.vmm()?;
        self.bound(0)?;
        // SAFETY: plain values; the runtime validates the range, which holds
        // no Rust object.
        let r = unsafe { (v.hipMemAddressFree)(ptr(p), to_usize(size, "reservation size")?) };
        self.check(r, || format!("hipMemAddressFree({p}, {size} bytes)"))
    }

    fn mem_map(&self, p: DevicePtr, size: u64, offset: u64, h: u64) -> Result<()> {
        let v = self.vmm()?;
        self.bound(0)?;
        let (bytes, off) = (to_usize(size, "mapping size")?, to_usize(offset, "offset")?);
        // SAFETY: plain values and a handle; the runtime validates that the
        // range is reserved and unmapped.
        let r = unsafe { (v.hipMemMap)(ptr(p), bytes, off, handle(h), 0) };
        self.check(r, || {
            let note = if offset != 0 && !self.loopback {
                " (AMD's hipMemMap maps only from offset 0 of a physical allocation)"
            } else {
                ""
            };
            format!("hipMemMap({p}, {size} bytes, offset {offset}, handle {h:#x}){note}")
        })
    }

    fn mem_unmap(&self, p: DevicePtr, size: u64) -> Result<()> {
        let v = self.vmm()?;
        self.bound(0)?;
        // SAFETY: plain values; the runtime validates the range, which holds
        // no Rust object. Device work still using it would fault on the device.
        let r = unsafe { (v.hipMemUnmap)(ptr(p), to_usize(size, "mapping size")?) };
        self.check(r, || format!("hipMemUnmap({p}, {size} bytes)"))
    }

    fn mem_set_access(&self, p: DevicePtr, size: u64, device: usize, flags: u32) -> Result<()> {
        let v = self.vmm()?;
        self.bound(device)?;
        let desc = sys::hipMemAccessDesc {
            location: sys::hipMemLocation::device(device as c_int),
            flags: flags as c_int,
        };
        // SAFETY: one valid, fully initialized descriptor.
        let r = unsafe { (v.hipMemSetAccess)(ptr(p), to_usize(size, "range size")?, &desc, 1) };
        self.check(r, || format!("hipMemSetAccess({p}, {size} bytes, device {device}, flags {flags})"))
    }

    fn mem_get_access(&self, p: DevicePtr, device: usize) -> Result<u32> {
        let v = self.vmm()?;
        self.bound(device)?;
        let location = sys::hipMemLocation::device(device as c_int);
        let mut flags: c_ulonglong = 0;
        // SAFETY: valid out-pointer and location.
        let r = unsafe { (v.hipMemGetAccess)(&mut flags, &location, ptr(p)) };
        self.check(r, || format!("hipMemGetAccess({p}, device {device})"))?;
        Ok(flags as u32)
    }

    fn retain_allocation_handle(&self, p: DevicePtr) -> Result<u64> {
        let v = self.vmm()?;
        self.bound(0)?;
        let mut h: hipMemGenericAllocationHandle_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; the runtime validates the address.
        let r = unsafe { (v.hipMemRetainAllocationHandle)(&mut h, ptr(p)) };
        self.check(r, || format!("hipMemRetainAllocationHandle({p})"))?;
        let h = h as u64;
        let props = match lock(&self.vmm.handles).get(&h) {
            Some(k) => k.props,
            None => self.runtime_properties(v, h, 0)?,
        };
        self.remember(h, props);
        Ok(h)
    }

    fn allocation_properties(&self, h: u64) -> Result<PhysicalProperties> {
        let v = self.vmm()?;
        if let Some(k) = lock(&self.vmm.handles).get(&h) {
            return Ok(k.props);
        }
        self.runtime_properties(v, h, 0)
    }

    fn export_to_fd(&self, h: u64) -> Result<OwnedFd> {
        let v = self.vmm()?;
        self.bound(0)?;
        let mut fd: c_int = -1;
        // SAFETY: for the POSIX descriptor type the runtime writes an int
        // through the pointer; it validates the handle.
        let r = unsafe {
            (v.hipMemExportToShareableHandle)(
                (&mut fd as *mut c_int).cast(),
                handle(h),
                HANDLE_TYPE_POSIX_FD as c_int,
                0,
            )
        };
        self.check(r, || format!("hipMemExportToShareableHandle({h:#x}, POSIX fd)"))?;
        if fd < 0 {
            return Err(Error::Unknown(format!("hipMemExportToShareableHandle({h:#x}) gave no descriptor")));
        }
        // SAFETY: the runtime created this descriptor for the caller to own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn import_from_fd(&self, fd: BorrowedFd<'_>) -> Result<u64> {
        let v = self.vmm()?;
        self.bound(0)?;
        let mut h: hipMemGenericAllocationHandle_t = std::ptr::null_mut();
        // SAFETY: for POSIX descriptors the runtime takes the descriptor's
        // value cast to a pointer and does not take ownership of it.
        let r = unsafe {
            (v.hipMemImportFromShareableHandle)(
                &mut h,
                fd.as_raw_fd() as isize as *mut c_void,
                sys::hipMemHandleTypePosixFileDescriptor,
            )
        };
        self.check(r, || "hipMemImportFromShareableHandle(POSIX fd)".to_string())?;
        let h = h as u64;
        let props = self.runtime_properties(v, h, 0)?;
        self.remember(h, props);
        Ok(h)
    }
}

impl HipBackend {
    /// `hipMemGetAllocationPropertiesFromHandle`, with `size` (HIP does not report it).
    fn runtime_properties(&self, v: &sys::Vmm, h: u64, size: u64) -> Result<PhysicalProperties> {
        let mut prop = sys::hipMemAllocationProp::pinned_on_device(0, 0);
        // SAFETY: valid out-pointer to a struct of the runtime's layout; the
        // runtime validates the handle.
        let r = unsafe { (v.hipMemGetAllocationPropertiesFromHandle)(&mut prop, handle(h)) };
        self.check(r, || format!("hipMemGetAllocationPropertiesFromHandle({h:#x})"))?;
        Ok(PhysicalProperties {
            device: prop.location.id.max(0) as usize,
            size,
            handle_types: prop.requestedHandleType.max(0) as u32,
        })
    }
}
