//! Virtual memory management on the HIP runtime: `hipMemCreate`,
//! `hipMemAddressReserve`, `hipMemMap`, `hipMemSetAccess`, ... (the group is
//! off where one of them is missing, or on a runtime older than ROCm 5.3,
//! whose `hipMemAllocationProp` has another layout).
//!
//! # Physical allocations are lists of runtime allocations
//!
//! hipmem allows `hipMemMap` at a nonzero offset into a physical allocation
//! (a multiple of the granularity), but AMD's `hipMemMap` refuses any offset
//! but 0 (ROCm/clr `hipamd/src/hip_vm.cpp`: hipErrorInvalidValue), as
//! `cuMemMap` does. So, as the cuda backend does, a hipmem physical
//! allocation is an ordered list of runtime allocations ("pieces") that tile
//! it, and the handle hipmem hands out is an id of this backend's, not a
//! `hipMemGenericAllocationHandle_t`. A mapping of `[offset, offset + size)`
//! maps each piece in that range with its own `hipMemMap(.., offset 0, ..)`:
//!
//! - up to [`EAGER_PIECES`] granules, not exportable: one piece per granule
//!   from the start, so any mapping works at any time;
//! - larger, exportable, or made by `mem_create_whole` (a pool's groups,
//!   which it maps only whole): one piece. The first mapping that does not map
//!   it whole at offset 0 cuts it into one piece per granule, if nothing can
//!   have seen its memory yet (never mapped, exported or imported): the new
//!   pieces are made before the old one is released. Once "fixed", a mapping
//!   that does not start at a piece boundary is NotSupported (one that ends
//!   inside a piece maps a prefix of it, at offset 0, if the runtime allows);
//! - imported: one piece of a size only the runtime knows; offset 0 only.
//!
//! Exporting needs exactly one piece (NotSupported otherwise). Each piece's
//! runtime handle holds one runtime reference, released when the hipmem
//! allocation has neither a handle reference (create, retain, import) nor a
//! mapping left. Each `hipMemMap` is undone by a `hipMemUnmap` of exactly its
//! range, and access is set on each mapped range separately (AMD's
//! `hipMemSetAccess` works on the allocation mapped at the address it gets).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_ulonglong, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::Mutex;

use super::sys::{self, hipMemGenericAllocationHandle_t};
use super::{HipBackend, lock, to_usize};
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::{HANDLE_TYPE_POSIX_FD, PhysicalProperties, VirtualMemory};
use crate::error::{Error, Result};

/// Allocations of at most this many granules (and not exportable) are cut
/// into one runtime allocation per granule when created.
pub(super) const EAGER_PIECES: u64 = 16;

/// The ids this backend hands out as handles: `ID_BASE + n * ID_STEP`.
const ID_BASE: u64 = 0x7e00_0000_0000;
const ID_STEP: u64 = 0x10;

/// One runtime allocation of a hipmem physical allocation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Piece {
    /// Where it starts in the hipmem allocation.
    offset: u64,
    /// Its size in bytes; 0 when only the runtime knows it (imported).
    len: u64,
    /// The `hipMemGenericAllocationHandle_t` value.
    handle: u64,
}

impl Piece {
    fn end(&self) -> u64 {
        if self.len == 0 { u64::MAX } else { self.offset + self.len }
    }
}

/// A hipmem physical allocation.
#[derive(Debug)]
struct Physical {
    device: usize,
    /// Size in bytes; 0 when imported.
    size: u64,
    handle_types: u32,
    /// Runtime allocations tiling `[0, size)` in order, each holding one
    /// runtime reference of this backend's.
    pieces: Vec<Piece>,
    /// Unreleased hipmem handle references (create, retain, import).
    refs: u32,
    /// Live mappings of it.
    maps: u32,
    /// Mapped, exported or imported once: its pieces can no longer be replaced.
    fixed: bool,
}

/// A hipmem mapping: the `hipMemMap`s it is made of.
#[derive(Debug)]
struct HipMapping {
    id: u64,
    size: u64,
    /// `(address, bytes)` of each `hipMemMap` not yet undone.
    ranges: Vec<(u64, u64)>,
}

#[derive(Debug, Default)]
struct VmmState {
    next_id: u64,
    physical: HashMap<u64, Physical>,
    /// base → mapping.
    mappings: BTreeMap<u64, HipMapping>,
}

/// The hip backend's VMM tables (one lock: VMM calls are not a fast path).
#[derive(Debug, Default)]
pub(super) struct HipVmm {
    state: Mutex<VmmState>,
}

/// The piece size an allocation of `size` bytes starts with.
/// (`whole`: an allocation its caller maps only whole, from offset 0,
/// [`VirtualMemory::mem_create_whole`]: one piece.)
fn initial_piece_len(size: u64, granularity: u64, handle_types: u32, whole: bool) -> u64 {
    if !whole && handle_types == 0 && size / granularity <= EAGER_PIECES { granularity } else { size }
}

/// `[0, size)` cut into pieces of `piece` bytes (the last may be shorter).
fn tiling(size: u64, piece: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < size {
        let len = piece.min(size - offset);
        out.push((offset, len));
        offset += len;
    }
    out
}

/// One `hipMemMap` of a mapping: `len` bytes of piece `piece`, from its start.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Segment {
    piece: usize,
    len: u64,
}

/// The `hipMemMap`s that map `[offset, offset + size)` of an allocation made
/// of `pieces`: `Some((segments, exact))`, `exact` false when the last
/// segment is only a prefix of its piece; None when no piece starts at `offset`.
fn plan(pieces: &[Piece], offset: u64, size: u64) -> Option<(Vec<Segment>, bool)> {
    let end = offset.checked_add(size)?;
    let mut index = pieces.iter().position(|p| p.offset == offset)?;
    let mut segments = Vec::new();
    let mut at = offset;
    let mut exact = true;
    while at < end {
        let p = pieces.get(index)?;
        if p.offset != at {
            return None;
        }
        let stop = p.end().min(end);
        if stop < p.end() {
            exact = false;
        }
        segments.push(Segment { piece: index, len: stop - at });
        at = stop;
        index += 1;
    }
    Some((segments, exact))
}

fn handle(h: u64) -> hipMemGenericAllocationHandle_t {
    h as usize as hipMemGenericAllocationHandle_t
}

fn addr(a: u64) -> *mut c_void {
    a as usize as *mut c_void
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

    /// Creates the runtime allocations tiling `size` bytes on `device` in
    /// pieces of `piece` bytes; on an error releases those already made.
    fn create_pieces(
        &self,
        v: &sys::Vmm,
        device: usize,
        size: u64,
        piece: u64,
        handle_types: u32,
    ) -> Result<Vec<Piece>> {
        let _device = self.bound(device)?;
        let prop = sys::hipMemAllocationProp::pinned_on_device(device as c_int, handle_types as c_int);
        let mut pieces = Vec::new();
        for (offset, len) in tiling(size, piece) {
            let made = to_usize(len, "hipMemCreate size").and_then(|bytes| {
                let mut h: hipMemGenericAllocationHandle_t = std::ptr::null_mut();
                // SAFETY: valid out-pointer and a fully initialized properties struct.
                let r = unsafe { (v.hipMemCreate)(&mut h, bytes, &prop, 0) };
                self.check(r, || {
                    format!(
                        "hipMemCreate({len} bytes on device {device}, handle types {handle_types:#x}) \
                         (piece at {offset} of a {size}-byte physical allocation)"
                    )
                })
                .map(|()| h as u64)
            });
            match made {
                Ok(handle) => pieces.push(Piece { offset, len, handle }),
                Err(e) => {
                    if let Err(e2) = self.release_pieces(v, &pieces) {
                        tracing::warn!(target: "hipmem", "releasing pieces after a failed hipMemCreate: {e2}");
                    }
                    return Err(e);
                }
            }
        }
        Ok(pieces)
    }

    /// Drops this backend's runtime reference of each piece (all are tried);
    /// the first error.
    fn release_pieces(&self, v: &sys::Vmm, pieces: &[Piece]) -> Result<()> {
        let mut first = Ok(());
        for p in pieces {
            // SAFETY: the handle came from hipMemCreate or
            // hipMemImportFromShareableHandle and this backend still holds the
            // reference it releases here (each piece is released once).
            let r = unsafe { (v.hipMemRelease)(handle(p.handle)) };
            let done = self.check(r, || format!("hipMemRelease({:#x})", p.handle));
            if first.is_ok() {
                first = done;
            }
        }
        first
    }

    /// Drops a physical allocation once it has neither references nor mappings.
    fn collect(&self, v: &sys::Vmm, state: &mut VmmState, id: u64) -> Result<()> {
        let dead = state.physical.get(&id).is_some_and(|p| p.refs == 0 && p.maps == 0);
        match dead.then(|| state.physical.remove(&id)).flatten() {
            Some(p) => self.release_pieces(v, &p.pieces),
            None => Ok(()),
        }
    }

    /// Undoes `hipMemMap`s (each exactly as mapped), last first; the ranges
    /// that could not be unmapped stay in `ranges`, the first error is returned.
    fn unmap_ranges(&self, v: &sys::Vmm, ranges: &mut Vec<(u64, u64)>) -> Result<()> {
        let mut first = Ok(());
        let mut left = Vec::new();
        while let Some((at, bytes)) = ranges.pop() {
            let done = to_usize(bytes, "hipMemUnmap size").and_then(|len| {
                // SAFETY: `[at, at + bytes)` is exactly one range this backend
                // mapped and has not unmapped; no Rust object lives there.
                let r = unsafe { (v.hipMemUnmap)(addr(at), len) };
                self.check(r, || format!("hipMemUnmap({at:#x}, {bytes} bytes)"))
            });
            if let Err(e) = done {
                left.push((at, bytes));
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        left.reverse();
        *ranges = left;
        first
    }

    fn new_id(state: &mut VmmState) -> u64 {
        state.next_id += 1;
        ID_BASE + state.next_id * ID_STEP
    }

    /// A physical allocation of `size` bytes, in pieces as
    /// [`initial_piece_len`] cuts them (`whole`:
    /// [`VirtualMemory::mem_create_whole`]).
    fn create_physical(&self, device: usize, size: u64, handle_types: u32, whole: bool) -> Result<u64> {
        let v = self.vmm()?;
        let g = self.vmm_granularity(device, false)?;
        if size == 0 || g == 0 || size % g != 0 {
            return Err(Error::InvalidValue(format!(
                "physical allocation size {size} is not a nonzero multiple of the granularity {g}"
            )));
        }
        let piece = initial_piece_len(size, g, handle_types, whole);
        let pieces = self.create_pieces(v, device, size, piece, handle_types)?;
        let mut state = lock(&self.vmm.state);
        let id = Self::new_id(&mut state);
        state
            .physical
            .insert(id, Physical { device, size, handle_types, pieces, refs: 1, maps: 0, fixed: false });
        Ok(id)
    }
}

impl VirtualMemory for HipBackend {
    fn granularity(&self, device: usize, recommended: bool) -> Result<u64> {
        self.vmm_granularity(device, recommended)
    }

    fn mem_create(&self, device: usize, size: u64, handle_types: u32) -> Result<u64> {
        self.create_physical(device, size, handle_types, false)
    }

    fn mem_create_whole(&self, device: usize, size: u64, handle_types: u32) -> Result<u64> {
        self.create_physical(device, size, handle_types, true)
    }

    fn mem_release(&self, id: u64) -> Result<()> {
        let v = self.vmm()?;
        let mut state = lock(&self.vmm.state);
        match state.physical.get_mut(&id) {
            Some(p) if p.refs > 0 => p.refs -= 1,
            _ => {
                return Err(Error::InvalidValue(format!(
                    "{id:#x} is not a live physical allocation handle (never created, or already released)"
                )));
            }
        }
        self.collect(v, &mut state, id)
    }

    fn address_reserve(&self, size: u64, alignment: u64, hint: DevicePtr) -> Result<DevicePtr> {
        let v = self.vmm()?;
        let _device = self.bound(0)?;
        let mut out: *mut c_void = std::ptr::null_mut();
        let (bytes, align) = (to_usize(size, "reservation size")?, to_usize(alignment, "alignment")?);
        // SAFETY: valid out-pointer; the hint is only a number to the runtime.
        let r = unsafe { (v.hipMemAddressReserve)(&mut out, bytes, align, addr(hint.0), 0) };
        self.check(r, || format!("hipMemAddressReserve({size} bytes, alignment {alignment}, hint {hint})"))?;
        Ok(DevicePtr(out as u64))
    }

    fn address_free(&self, p: DevicePtr, size: u64) -> Result<()> {
        let v = self.vmm()?;
        let _device = self.bound(0)?;
        // SAFETY: plain values; the runtime validates the range, which holds no Rust object.
        let r = unsafe { (v.hipMemAddressFree)(addr(p.0), to_usize(size, "reservation size")?) };
        self.check(r, || format!("hipMemAddressFree({p}, {size} bytes)"))
    }

    fn mem_map(&self, p: DevicePtr, size: u64, offset: u64, id: u64) -> Result<()> {
        let v = self.vmm()?;
        let end = offset
            .checked_add(size)
            .ok_or_else(|| Error::InvalidValue(format!("{size} bytes from offset {offset} overflow")))?;
        p.0.checked_add(size).ok_or_else(|| Error::InvalidValue(format!("{p} + {size} bytes overflows")))?;
        if size == 0 {
            return Err(Error::InvalidValue("a mapping of 0 bytes".into()));
        }
        let mut state = lock(&self.vmm.state);
        if state.mappings.contains_key(&p.0) {
            return Err(Error::InvalidValue(format!("{p} is already mapped")));
        }
        let Some(phys) = state.physical.get_mut(&id).filter(|ph| ph.refs > 0) else {
            return Err(Error::InvalidValue(format!("{id:#x} is not a live physical allocation handle")));
        };
        if phys.size != 0 && end > phys.size {
            return Err(Error::InvalidValue(format!(
                "{size} bytes from offset {offset} run past the end of the {}-byte physical allocation",
                phys.size
            )));
        }
        let mut planned = plan(&phys.pieces, offset, size);
        let fits = matches!(planned, Some((_, true)));
        if !fits && !phys.fixed && phys.size != 0 {
            // Nothing can have seen this memory yet: cut it into granules
            // (new pieces first, so a failure leaves the allocation as it was).
            let g = self.vmm_granularity(phys.device, false)?;
            if g != 0 && phys.size % g == 0 && phys.pieces.iter().any(|pc| pc.len != g) {
                let fresh = self.create_pieces(v, phys.device, phys.size, g, phys.handle_types)?;
                let old = std::mem::replace(&mut phys.pieces, fresh);
                if let Err(e) = self.release_pieces(v, &old) {
                    tracing::warn!(target: "hipmem", "releasing the replaced pieces of {id:#x}: {e}");
                }
                planned = plan(&phys.pieces, offset, size);
            }
        }
        let Some((segments, _)) = planned else {
            return Err(Error::NotSupported(format!(
                "cannot map {size} bytes of physical allocation {id:#x} at offset {offset}: HIP maps only from \
                 the start of a runtime allocation, and this one (made of {} runtime allocation(s)) has none \
                 starting at {offset}; it was mapped, exported or imported before, so it can no longer be cut \
                 (allocations of at most {EAGER_PIECES} granules that are not exportable map at any offset)",
                phys.pieces.len(),
            )));
        };
        let _device = self.bound(phys.device)?;
        let mut ranges: Vec<(u64, u64)> = Vec::with_capacity(segments.len());
        let mut at = p.0;
        for s in segments {
            let piece = phys.pieces[s.piece];
            let mapped = to_usize(s.len, "hipMemMap size").and_then(|len| {
                // SAFETY: plain values and a handle this backend holds a
                // reference to; offset 0 into it, as AMD's runtime requires.
                // The runtime validates that the range is reserved and unmapped.
                let r = unsafe { (v.hipMemMap)(addr(at), len, 0, handle(piece.handle), 0) };
                self.check(r, || {
                    format!(
                        "hipMemMap({at:#x}, {} bytes, offset 0, handle {:#x}) (the piece at byte {} of physical \
                         allocation {id:#x}, mapped at {p})",
                        s.len, piece.handle, piece.offset
                    )
                })
            });
            if let Err(e) = mapped {
                if let Err(e2) = self.unmap_ranges(v, &mut ranges) {
                    tracing::warn!(target: "hipmem", "undoing a partial mapping at {p}: {e2}");
                }
                return Err(e);
            }
            ranges.push((at, s.len));
            at += s.len;
        }
        phys.maps += 1;
        phys.fixed = true;
        state.mappings.insert(p.0, HipMapping { id, size, ranges });
        Ok(())
    }

    fn mem_unmap(&self, p: DevicePtr, size: u64) -> Result<()> {
        let v = self.vmm()?;
        let end =
            p.0.checked_add(size)
                .ok_or_else(|| Error::InvalidValue(format!("{p} + {size} bytes overflows")))?;
        let mut state = lock(&self.vmm.state);
        // The mappings that exactly cover the range.
        let mut bases = Vec::new();
        let mut at = p.0;
        for (&base, m) in state.mappings.range(p.0..end) {
            if base != at {
                break;
            }
            bases.push(base);
            at = base + m.size;
        }
        if bases.is_empty() || at != end {
            return Err(Error::InvalidValue(format!(
                "{size} bytes at {p} are not exactly a run of whole mappings"
            )));
        }
        let _device = self.bound(0)?;
        // Out of the table while the driver unmaps them (the table unlocked:
        // an unmap may wait for the device's queued work, and other threads'
        // calls go on meanwhile); their physical allocations stay counted as
        // mapped until then.
        let mut taken: Vec<(u64, _)> =
            bases.iter().filter_map(|b| Some((*b, state.mappings.remove(b)?))).collect();
        drop(state);
        let mut first = Ok(());
        for (_, m) in &mut taken {
            let done = self.unmap_ranges(v, &mut m.ranges);
            if first.is_ok() {
                first = done;
            }
        }
        let mut state = lock(&self.vmm.state);
        for (base, m) in taken {
            if !m.ranges.is_empty() {
                // On an error the mapping stays listed (with what is left of
                // it), so that unmapping the same range again finishes the job.
                state.mappings.entry(base).or_insert(m);
                continue;
            }
            if let Some(ph) = state.physical.get_mut(&m.id) {
                ph.maps = ph.maps.saturating_sub(1);
            }
            if let Err(e) = self.collect(v, &mut state, m.id) {
                tracing::warn!(target: "hipmem", "releasing physical allocation {:#x} after its last unmap: {e}", m.id);
            }
        }
        first
    }

    fn mem_set_access(&self, p: DevicePtr, size: u64, device: usize, flags: u32) -> Result<()> {
        let v = self.vmm()?;
        let _device = self.bound(device)?;
        let end =
            p.0.checked_add(size)
                .ok_or_else(|| Error::InvalidValue(format!("{p} + {size} bytes overflows")))?;
        let desc = sys::hipMemAccessDesc {
            location: sys::hipMemLocation::device(device as c_int),
            flags: flags as c_int,
        };
        // Each hipMemMap'ed range the request touches, clipped to it; a range
        // this backend did not map goes to the runtime as it is.
        let spans: Vec<(u64, u64)> = {
            let state = lock(&self.vmm.state);
            let mut spans = Vec::new();
            for (_, m) in state.mappings.range(..end) {
                for &(at, bytes) in &m.ranges {
                    let (lo, hi) = (at.max(p.0), (at + bytes).min(end));
                    if lo < hi {
                        spans.push((lo, hi - lo));
                    }
                }
            }
            spans.sort_unstable();
            if spans.is_empty() { vec![(p.0, size)] } else { spans }
        };
        for (at, bytes) in spans {
            // SAFETY: one valid, fully initialized descriptor; plain values.
            let r = unsafe { (v.hipMemSetAccess)(addr(at), to_usize(bytes, "range size")?, &desc, 1) };
            self.check(r, || {
                format!("hipMemSetAccess({at:#x}, {bytes} bytes, device {device}, flags {flags})")
            })?;
        }
        Ok(())
    }

    fn mem_get_access(&self, p: DevicePtr, device: usize) -> Result<u32> {
        let v = self.vmm()?;
        let _device = self.bound(device)?;
        let location = sys::hipMemLocation::device(device as c_int);
        let mut flags: c_ulonglong = 0;
        // SAFETY: valid out-pointer and location.
        let r = unsafe { (v.hipMemGetAccess)(&mut flags, &location, addr(p.0)) };
        self.check(r, || format!("hipMemGetAccess({p}, device {device})"))?;
        Ok(flags as u32)
    }

    fn retain_allocation_handle(&self, p: DevicePtr) -> Result<u64> {
        self.vmm()?;
        let mut state = lock(&self.vmm.state);
        let id = state
            .mappings
            .range(..=p.0)
            .next_back()
            .filter(|(b, m)| p.0 < **b + m.size)
            .map(|(_, m)| m.id)
            .ok_or_else(|| Error::InvalidValue(format!("{p} is not a mapped address")))?;
        let ph = state.physical.get_mut(&id).ok_or_else(|| {
            Error::Unknown(format!("the mapping at {p} names physical allocation {id:#x}, which is gone"))
        })?;
        ph.refs += 1;
        Ok(id)
    }

    fn allocation_properties(&self, id: u64) -> Result<PhysicalProperties> {
        self.vmm()?;
        let state = lock(&self.vmm.state);
        let ph = state.physical.get(&id).filter(|ph| ph.refs > 0).ok_or_else(|| {
            Error::InvalidValue(format!("{id:#x} is not a live physical allocation handle"))
        })?;
        Ok(PhysicalProperties { device: ph.device, size: ph.size, handle_types: ph.handle_types })
    }

    fn export_to_fd(&self, id: u64) -> Result<OwnedFd> {
        let v = self.vmm()?;
        let mut state = lock(&self.vmm.state);
        let ph = state.physical.get_mut(&id).filter(|ph| ph.refs > 0).ok_or_else(|| {
            Error::InvalidValue(format!("{id:#x} is not a live physical allocation handle"))
        })?;
        let runtime_handle = match ph.pieces.as_slice() {
            [one] => one.handle,
            pieces => {
                return Err(Error::NotSupported(format!(
                    "physical allocation {id:#x} is made of {} HIP allocations (it was cut so that it could be \
                     mapped at a nonzero offset, which hipMemMap does not do), and a file descriptor shares only \
                     one; export it before mapping it anywhere but whole at offset 0",
                    pieces.len()
                )));
            }
        };
        let _device = self.bound(ph.device)?;
        let mut fd: c_int = -1;
        // SAFETY: for the POSIX descriptor type the runtime writes an int
        // through the pointer; the handle is one this backend holds a reference to.
        let r = unsafe {
            (v.hipMemExportToShareableHandle)(
                (&mut fd as *mut c_int).cast(),
                handle(runtime_handle),
                HANDLE_TYPE_POSIX_FD as c_int,
                0,
            )
        };
        self.check(r, || {
            format!(
                "hipMemExportToShareableHandle({runtime_handle:#x} of physical allocation {id:#x}, POSIX fd)"
            )
        })?;
        if fd < 0 {
            return Err(Error::Unknown(format!(
                "hipMemExportToShareableHandle({runtime_handle:#x}) gave no descriptor"
            )));
        }
        // Another process may now see this memory: never cut it again.
        ph.fixed = true;
        // SAFETY: the runtime created this descriptor for the caller to own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn import_from_fd(&self, fd: BorrowedFd<'_>) -> Result<u64> {
        let v = self.vmm()?;
        let _device = self.bound(0)?;
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
        let piece = Piece { offset: 0, len: 0, handle: h as u64 };
        let mut prop = sys::hipMemAllocationProp::pinned_on_device(0, 0);
        // SAFETY: valid out-pointer to a struct of the runtime's layout; the
        // handle was just imported.
        let r = unsafe { (v.hipMemGetAllocationPropertiesFromHandle)(&mut prop, h) };
        if let Err(e) = self.check(r, || format!("hipMemGetAllocationPropertiesFromHandle({:#x})", h as u64))
        {
            if let Err(e2) = self.release_pieces(v, &[piece]) {
                tracing::warn!(target: "hipmem", "releasing an imported handle: {e2}");
            }
            return Err(e);
        }
        let device = usize::try_from(prop.location.id).unwrap_or(0).min(self.devices.len().saturating_sub(1));
        let mut state = lock(&self.vmm.state);
        let id = Self::new_id(&mut state);
        state.physical.insert(
            id,
            Physical {
                device,
                size: 0,
                handle_types: prop.requestedHandleType.max(0) as u32,
                pieces: vec![piece],
                refs: 1,
                maps: 0,
                fixed: true,
            },
        );
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: u64 = 2 << 20;

    fn pieces(lens: &[u64]) -> Vec<Piece> {
        let mut offset = 0;
        lens.iter()
            .enumerate()
            .map(|(i, &len)| {
                let p = Piece { offset, len, handle: 100 + i as u64 };
                offset += len;
                p
            })
            .collect()
    }

    #[test]
    fn small_plain_allocations_are_cut_into_granules_others_are_one_piece() {
        assert_eq!(initial_piece_len(G, G, 0, false), G);
        assert_eq!(initial_piece_len(EAGER_PIECES * G, G, 0, false), G);
        assert_eq!(initial_piece_len((EAGER_PIECES + 1) * G, G, 0, false), (EAGER_PIECES + 1) * G);
        assert_eq!(initial_piece_len(2 * G, G, HANDLE_TYPE_POSIX_FD, false), 2 * G, "exportable: one piece");
        assert_eq!(initial_piece_len(2 * G, G, 0, true), 2 * G, "mapped only whole: one piece");
        assert_eq!(initial_piece_len(EAGER_PIECES * G, G, 0, true), EAGER_PIECES * G);
        assert_eq!(tiling(3 * G, G), vec![(0, G), (G, G), (2 * G, G)]);
        assert!(tiling(0, G).is_empty());
    }

    #[test]
    fn plans_map_whole_pieces_from_their_start() {
        let granules = pieces(&[G, G, G]);
        let seg = |piece, len| Segment { piece, len };
        assert_eq!(plan(&granules, 0, 3 * G), Some((vec![seg(0, G), seg(1, G), seg(2, G)], true)));
        assert_eq!(plan(&granules, G, G), Some((vec![seg(1, G)], true)));
        assert_eq!(plan(&granules, 2 * G, 2 * G), None, "past the end");
        assert_eq!(plan(&granules, G / 2, G), None, "not at a piece start");
        let one = pieces(&[4 * G]);
        assert_eq!(plan(&one, 0, G), Some((vec![seg(0, G)], false)), "a prefix");
        assert_eq!(plan(&one, G, G), None);
        let imported = [Piece { offset: 0, len: 0, handle: 7 }];
        assert_eq!(plan(&imported, 0, 5 * G), Some((vec![seg(0, 5 * G)], false)));
        assert_eq!(plan(&imported, G, G), None);
    }
}
