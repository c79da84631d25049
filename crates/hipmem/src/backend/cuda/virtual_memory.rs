//! Virtual memory management on the CUDA driver: `cuMemCreate`,
//! `cuMemAddressReserve`, `cuMemMap`, `cuMemSetAccess`, ... loaded on first
//! use into a table of their own (a driver without them leaves the rest of
//! the backend working).
//!
//! # Physical allocations are lists of driver allocations
//!
//! hipmem allows `hipMemMap` at a nonzero offset into a physical allocation
//! (a multiple of the granularity), but `cuMemMap` refuses any offset but 0
//! (CUDA_ERROR_NOT_SUPPORTED on CUDA 12 and 13). So a hipmem physical
//! allocation is an ordered list of driver allocations ("pieces") that tile
//! it, and the handle hipmem hands out is an id of this backend's, not a
//! `CUmemGenericAllocationHandle`. A mapping of `[offset, offset + size)` maps
//! each piece in that range with its own `cuMemMap(.., offset 0, ..)`, so a
//! mapping can start only where a piece starts. How an allocation is cut:
//!
//! - up to [`EAGER_PIECES`] granules, not exportable: one piece per granule
//!   from the start, so any mapping works at any time (cost: up to
//!   [`EAGER_PIECES`] `cuMemCreate`s, and one `cuMemMap` / `cuMemUnmap` per
//!   granule mapped);
//! - larger, exportable, or made by `mem_create_whole` (a pool's groups,
//!   which it maps only whole): one piece (a 16 GiB chunk of a GrowableBuffer is
//!   one driver allocation). The first mapping that does not map it whole
//!   at offset 0 cuts it into one piece per granule, if nothing can have
//!   seen its memory yet (never mapped, exported or imported): the new pieces
//!   are created before the old one is released, so this needs the memory
//!   twice for a moment. Once the allocation is "fixed", a mapping that
//!   does not start at a piece boundary is NotSupported (a mapping that ends
//!   inside a piece maps a prefix of it, at offset 0, if the driver allows);
//! - imported: one piece of a size only the driver knows; offset 0 only.
//!
//! Exporting needs exactly one piece (NotSupported otherwise).
//!
//! # Lifetimes
//!
//! Each piece's driver handle holds one driver reference, released when the
//! hipmem allocation has neither a handle reference (create, retain, import)
//! nor a mapping left, which is when CUDA itself frees an allocation; so
//! `hipMemRetainAllocationHandle` of any mapped address gives back the whole
//! allocation, with every piece. Each `cuMemMap` is undone by a `cuMemUnmap`
//! of exactly its range, as the driver requires.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{c_int, c_uint, c_ulonglong, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

use super::driver::{self, CUdeviceptr, CUmemAccessDesc, CUmemAllocationProp, CUmemLocation, CUresult};
use super::{CudaBackend, lock};
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::{HANDLE_TYPE_POSIX_FD, PhysicalProperties, VirtualMemory};
use crate::error::{Error, Result};

/// `CUmemGenericAllocationHandle`.
type Handle = c_ulonglong;

/// Allocations of at most this many granules (and not exportable) are cut
/// into one driver allocation per granule when created.
pub(super) const EAGER_PIECES: u64 = 16;

/// The ids this backend hands out as handles: `ID_BASE + n * ID_STEP`.
const ID_BASE: u64 = 0x7d00_0000_0000;
const ID_STEP: u64 = 0x10;

/// The VMM entry points (signatures as in cuda.h of CUDA 12 and 13).
#[allow(non_snake_case)]
struct VmmDriver {
    cuMemCreate:
        unsafe extern "C" fn(*mut Handle, usize, *const CUmemAllocationProp, c_ulonglong) -> CUresult,
    cuMemRelease: unsafe extern "C" fn(Handle) -> CUresult,
    cuMemAddressReserve:
        unsafe extern "C" fn(*mut CUdeviceptr, usize, usize, CUdeviceptr, c_ulonglong) -> CUresult,
    cuMemAddressFree: unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult,
    cuMemMap: unsafe extern "C" fn(CUdeviceptr, usize, usize, Handle, c_ulonglong) -> CUresult,
    cuMemUnmap: unsafe extern "C" fn(CUdeviceptr, usize) -> CUresult,
    cuMemSetAccess: unsafe extern "C" fn(CUdeviceptr, usize, *const CUmemAccessDesc, usize) -> CUresult,
    cuMemGetAccess: unsafe extern "C" fn(*mut c_ulonglong, *const CUmemLocation, CUdeviceptr) -> CUresult,
    cuMemGetAllocationPropertiesFromHandle:
        unsafe extern "C" fn(*mut CUmemAllocationProp, Handle) -> CUresult,
    cuMemExportToShareableHandle: unsafe extern "C" fn(*mut c_void, Handle, c_uint, c_ulonglong) -> CUresult,
    cuMemImportFromShareableHandle: unsafe extern "C" fn(*mut Handle, *mut c_void, c_uint) -> CUresult,
}

static VMM: OnceLock<Result<VmmDriver>> = OnceLock::new();

fn load() -> Result<VmmDriver> {
    macro_rules! load {
        ($name:literal) => {
            // SAFETY: the field this initializes is declared with the
            // signature cuda.h gives for this symbol.
            unsafe { driver::symbol($name)? }
        };
    }
    Ok(VmmDriver {
        cuMemCreate: load!("cuMemCreate"),
        cuMemRelease: load!("cuMemRelease"),
        cuMemAddressReserve: load!("cuMemAddressReserve"),
        cuMemAddressFree: load!("cuMemAddressFree"),
        cuMemMap: load!("cuMemMap"),
        cuMemUnmap: load!("cuMemUnmap"),
        cuMemSetAccess: load!("cuMemSetAccess"),
        cuMemGetAccess: load!("cuMemGetAccess"),
        cuMemGetAllocationPropertiesFromHandle: load!("cuMemGetAllocationPropertiesFromHandle"),
        cuMemExportToShareableHandle: load!("cuMemExportToShareableHandle"),
        cuMemImportFromShareableHandle: load!("cuMemImportFromShareableHandle"),
    })
}

/// One driver allocation of a hipmem physical allocation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Piece {
    /// Where it starts in the hipmem allocation.
    offset: u64,
    /// Its size in bytes; 0 when only the driver knows it (imported).
    len: u64,
    handle: Handle,
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
    /// Size in bytes; 0 when imported (the driver knows it, hipmem does not).
    size: u64,
    handle_types: u32,
    /// Driver allocations tiling `[0, size)` in order, each holding one
    /// driver reference of this backend's.
    pieces: Vec<Piece>,
    /// Unreleased hipmem handle references (create, retain, import).
    refs: u32,
    /// Live mappings of it.
    maps: u32,
    /// Mapped, exported or imported once: its memory may hold data someone
    /// saw, so its pieces can no longer be replaced.
    fixed: bool,
}

/// A hipmem mapping: the `cuMemMap`s it is made of.
#[derive(Debug)]
struct CudaMapping {
    id: u64,
    size: u64,
    /// `(address, bytes)` of each `cuMemMap` not yet undone.
    ranges: Vec<(u64, u64)>,
}

#[derive(Debug, Default)]
struct VmmState {
    next_id: u64,
    physical: HashMap<u64, Physical>,
    /// base → mapping.
    mappings: BTreeMap<u64, CudaMapping>,
}

/// The cuda backend's VMM tables (one lock: VMM calls are not a fast path).
#[derive(Debug, Default)]
pub(super) struct CudaVmm {
    state: Mutex<VmmState>,
}

/// The piece sizes an allocation of `size` bytes starts with.
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

/// One `cuMemMap` of a mapping: `len` bytes of piece `piece`, from its start.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Segment {
    piece: usize,
    len: u64,
}

/// The `cuMemMap`s that map `[offset, offset + size)` of an allocation made of
/// `pieces`: `Some((segments, exact))`, `exact` false when the last segment
/// is only a prefix of its piece; None when no piece starts at `offset`.
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

impl CudaBackend {
    fn vmm(&self) -> Result<&'static VmmDriver> {
        VMM.get_or_init(load).as_ref().map_err(|e| e.clone())
    }

    fn ordinal_of(&self, cu: c_int) -> usize {
        self.devices.iter().position(|d| d.cu == cu).unwrap_or(cu.max(0) as usize)
    }

    fn usize_of(value: u64, what: &str) -> Result<usize> {
        usize::try_from(value).map_err(|_| Error::InvalidValue(format!("{what}: {value} does not fit usize")))
    }

    /// Creates the driver allocations tiling `size` bytes on `device` in
    /// pieces of `piece` bytes; on an error releases those already made.
    fn create_pieces(
        &self,
        v: &VmmDriver,
        device: usize,
        size: u64,
        piece: u64,
        handle_types: u32,
    ) -> Result<Vec<Piece>> {
        let dev = self.bound(device)?;
        let mut prop = CUmemAllocationProp::pinned_on_device(dev.cu);
        prop.requestedHandleTypes = handle_types;
        let mut pieces = Vec::new();
        for (offset, len) in tiling(size, piece) {
            let made = Self::usize_of(len, "cuMemCreate size").and_then(|bytes| {
                let mut handle: Handle = 0;
                // SAFETY: valid out-pointer and a fully initialized properties struct.
                let r = unsafe { (v.cuMemCreate)(&mut handle, bytes, &prop, 0) };
                self.check(r, || {
                    format!(
                        "cuMemCreate({len} bytes on device {device}, handle types {handle_types:#x}) \
                         (piece at {offset} of a {size}-byte physical allocation)"
                    )
                })
                .map(|()| handle)
            });
            match made {
                Ok(handle) => pieces.push(Piece { offset, len, handle }),
                Err(e) => {
                    if let Err(e2) = self.release_pieces(v, &pieces) {
                        tracing::warn!(target: "hipmem", "releasing pieces after a failed cuMemCreate: {e2}");
                    }
                    return Err(e);
                }
            }
        }
        Ok(pieces)
    }

    /// Drops this backend's driver reference of each piece (all of them are
    /// tried); the first error.
    fn release_pieces(&self, v: &VmmDriver, pieces: &[Piece]) -> Result<()> {
        if pieces.is_empty() {
            return Ok(());
        }
        let _ctx = self.any_bound()?;
        let mut first = Ok(());
        for p in pieces {
            let handle = p.handle;
            // SAFETY: the handle came from cuMemCreate or cuMemImportFromShareableHandle
            // and this backend still holds the reference it releases here (each
            // piece is released once: its Physical is dropped or its list replaced).
            let r = unsafe { (v.cuMemRelease)(handle) };
            let done = self.check(r, || format!("cuMemRelease({handle:#x})"));
            if first.is_ok() {
                first = done;
            }
        }
        first
    }

    /// Drops a physical allocation once it has neither references nor mappings.
    fn collect(&self, v: &VmmDriver, state: &mut VmmState, id: u64) -> Result<()> {
        let dead = state.physical.get(&id).is_some_and(|p| p.refs == 0 && p.maps == 0);
        match dead.then(|| state.physical.remove(&id)).flatten() {
            Some(p) => self.release_pieces(v, &p.pieces),
            None => Ok(()),
        }
    }

    /// Undoes `cuMemMap`s (each exactly as mapped), last first; the ranges
    /// that could not be unmapped stay in `ranges`, the first error is returned.
    fn unmap_ranges(&self, v: &VmmDriver, ranges: &mut Vec<(u64, u64)>) -> Result<()> {
        let mut first = Ok(());
        let mut left = Vec::new();
        while let Some((at, bytes)) = ranges.pop() {
            let done = Self::usize_of(bytes, "cuMemUnmap size").and_then(|len| {
                // SAFETY: `[at, at + bytes)` is exactly one range this backend
                // mapped with cuMemMap and has not unmapped; no Rust object
                // lives there. Device work still using it would fault on the
                // device, not in this process.
                let r = unsafe { (v.cuMemUnmap)(at, len) };
                self.check(r, || format!("cuMemUnmap({at:#x}, {bytes} bytes)"))
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

    /// A physical allocation of `size` bytes, in pieces as
    /// [`initial_piece_len`] cuts them (`whole`:
    /// [`VirtualMemory::mem_create_whole`]).
    fn create_physical(&self, device: usize, size: u64, handle_types: u32, whole: bool) -> Result<u64> {
        let v = self.vmm()?;
        let g = self.granularity(device, false)?;
        if size == 0 || g == 0 || size % g != 0 {
            return Err(Error::InvalidValue(format!(
                "physical allocation size {size} is not a nonzero multiple of the granularity {g}"
            )));
        }
        let piece = initial_piece_len(size, g, handle_types, whole);
        let pieces = self.create_pieces(v, device, size, piece, handle_types)?;
        let mut state = lock(&self.vmm.state);
        state.next_id += 1;
        let id = ID_BASE + state.next_id * ID_STEP;
        state
            .physical
            .insert(id, Physical { device, size, handle_types, pieces, refs: 1, maps: 0, fixed: false });
        Ok(id)
    }
}

impl VirtualMemory for CudaBackend {
    fn granularity(&self, device: usize, recommended: bool) -> Result<u64> {
        let dev = self.device(device)?;
        let prop = CUmemAllocationProp::pinned_on_device(dev.cu);
        let option = if recommended {
            driver::CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
        } else {
            driver::CU_MEM_ALLOC_GRANULARITY_MINIMUM
        };
        super::result::allocation_granularity(self.driver, &prop, option)
    }

    fn mem_create(&self, device: usize, size: u64, handle_types: u32) -> Result<u64> {
        self.create_physical(device, size, handle_types, false)
    }

    fn mem_create_whole(&self, device: usize, size: u64, handle_types: u32) -> Result<u64> {
        self.create_physical(device, size, handle_types, true)
    }

    fn mem_release(&self, handle: u64) -> Result<()> {
        let v = self.vmm()?;
        let mut state = lock(&self.vmm.state);
        match state.physical.get_mut(&handle) {
            Some(p) if p.refs > 0 => p.refs -= 1,
            _ => {
                return Err(Error::InvalidValue(format!(
                    "{handle:#x} is not a live physical allocation handle (never created, or already released)"
                )));
            }
        }
        self.collect(v, &mut state, handle)
    }

    fn address_reserve(&self, size: u64, alignment: u64, hint: DevicePtr) -> Result<DevicePtr> {
        let v = self.vmm()?;
        let _ctx = self.any_bound()?;
        let mut ptr: CUdeviceptr = 0;
        let len = Self::usize_of(size, "cuMemAddressReserve size")?;
        let align = Self::usize_of(alignment, "cuMemAddressReserve alignment")?;
        // SAFETY: valid out-pointer; the hint is only a number to the driver.
        let r = unsafe { (v.cuMemAddressReserve)(&mut ptr, len, align, hint.0, 0) };
        self.check(r, || format!("cuMemAddressReserve({size} bytes, alignment {alignment}, hint {hint})"))?;
        Ok(DevicePtr(ptr))
    }

    fn address_free(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let v = self.vmm()?;
        let _ctx = self.any_bound()?;
        let len = Self::usize_of(size, "cuMemAddressFree size")?;
        // SAFETY: plain numbers; the driver validates the range.
        let r = unsafe { (v.cuMemAddressFree)(ptr.0, len) };
        self.check(r, || format!("cuMemAddressFree({ptr}, {size} bytes)"))
    }

    fn mem_map(&self, ptr: DevicePtr, size: u64, offset: u64, handle: u64) -> Result<()> {
        let v = self.vmm()?;
        let end = offset
            .checked_add(size)
            .ok_or_else(|| Error::InvalidValue(format!("{size} bytes from offset {offset} overflow")))?;
        ptr.0
            .checked_add(size)
            .ok_or_else(|| Error::InvalidValue(format!("{ptr} + {size} bytes overflows")))?;
        if size == 0 {
            return Err(Error::InvalidValue("a mapping of 0 bytes".into()));
        }
        let mut state = lock(&self.vmm.state);
        if state.mappings.contains_key(&ptr.0) {
            return Err(Error::InvalidValue(format!("{ptr} is already mapped")));
        }
        let Some(phys) = state.physical.get_mut(&handle).filter(|p| p.refs > 0) else {
            return Err(Error::InvalidValue(format!("{handle:#x} is not a live physical allocation handle")));
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
            let g = self.granularity(phys.device, false)?;
            if g != 0 && phys.size % g == 0 && phys.pieces.iter().any(|p| p.len != g) {
                let fresh = self.create_pieces(v, phys.device, phys.size, g, phys.handle_types)?;
                let old = std::mem::replace(&mut phys.pieces, fresh);
                tracing::debug!(
                    target: "hipmem",
                    "physical allocation {handle:#x}: {} driver allocation(s) replaced by {} of one granule each, to map {size} bytes at offset {offset}",
                    old.len(),
                    phys.pieces.len()
                );
                if let Err(e) = self.release_pieces(v, &old) {
                    tracing::warn!(target: "hipmem", "releasing the replaced pieces of {handle:#x}: {e}");
                }
                planned = plan(&phys.pieces, offset, size);
            }
        }
        let Some((segments, _)) = planned else {
            return Err(Error::NotSupported(format!(
                "cannot map {size} bytes of physical allocation {handle:#x} at offset {offset}: the CUDA driver maps \
                 only from the start of a driver allocation, and this one (made of {} driver allocation(s), {}) \
                 has none starting at {offset}; it was mapped, exported or imported before, so it can no longer be \
                 cut (allocations of at most {EAGER_PIECES} granules that are not exportable map at any offset)",
                phys.pieces.len(),
                if phys.size == 0 { "imported".to_string() } else { format!("{} bytes", phys.size) },
            )));
        };
        let _ctx = self.bound(phys.device)?;
        let mut ranges: Vec<(u64, u64)> = Vec::with_capacity(segments.len());
        let mut at = ptr.0;
        for s in segments {
            let piece = phys.pieces[s.piece];
            let mapped = Self::usize_of(s.len, "cuMemMap size").and_then(|len| {
                // SAFETY: plain numbers and a handle this backend holds a
                // reference to; offset 0 into it, as the driver requires. The
                // driver validates that the range is reserved and unmapped.
                let r = unsafe { (v.cuMemMap)(at, len, 0, piece.handle, 0) };
                self.check(r, || {
                    format!(
                        "cuMemMap({at:#x}, {} bytes, offset 0, handle {:#x}) (the piece at byte {} of physical allocation {handle:#x}, mapped at {ptr})",
                        s.len, piece.handle, piece.offset
                    )
                })
            });
            if let Err(e) = mapped {
                if let Err(e2) = self.unmap_ranges(v, &mut ranges) {
                    tracing::warn!(target: "hipmem", "undoing a partial mapping at {ptr}: {e2}");
                }
                return Err(e);
            }
            ranges.push((at, s.len));
            at += s.len;
        }
        phys.maps += 1;
        phys.fixed = true;
        state.mappings.insert(ptr.0, CudaMapping { id: handle, size, ranges });
        Ok(())
    }

    fn mem_unmap(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let v = self.vmm()?;
        let end = ptr
            .0
            .checked_add(size)
            .ok_or_else(|| Error::InvalidValue(format!("{ptr} + {size} bytes overflows")))?;
        let mut state = lock(&self.vmm.state);
        // The mappings that exactly cover the range.
        let mut bases = Vec::new();
        let mut at = ptr.0;
        for (&base, m) in state.mappings.range(ptr.0..end) {
            if base != at {
                break;
            }
            bases.push(base);
            at = base + m.size;
        }
        if bases.is_empty() || at != end {
            return Err(Error::InvalidValue(format!(
                "{size} bytes at {ptr} are not exactly a run of whole mappings"
            )));
        }
        let _ctx = self.any_bound()?;
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

    fn mem_set_access(&self, ptr: DevicePtr, size: u64, device: usize, flags: u32) -> Result<()> {
        let v = self.vmm()?;
        let dev = self.bound(device)?;
        let desc = CUmemAccessDesc {
            location: CUmemLocation { type_: driver::CU_MEM_LOCATION_TYPE_DEVICE, id: dev.cu },
            flags,
        };
        let len = Self::usize_of(size, "cuMemSetAccess size")?;
        // One call for the whole range, however many driver allocations are
        // mapped in it ("a fully mapped address range containing all
        // allocations created by cuMemMap / cuMemCreate", says cuda.h).
        // SAFETY: one valid, fully initialized descriptor.
        let r = unsafe { (v.cuMemSetAccess)(ptr.0, len, &desc, 1) };
        self.check(r, || format!("cuMemSetAccess({ptr}, {size} bytes, device {device}, flags {flags})"))
    }

    fn mem_get_access(&self, ptr: DevicePtr, device: usize) -> Result<u32> {
        let v = self.vmm()?;
        let dev = self.bound(device)?;
        let location = CUmemLocation { type_: driver::CU_MEM_LOCATION_TYPE_DEVICE, id: dev.cu };
        let mut flags: c_ulonglong = 0;
        // SAFETY: valid out-pointer and location.
        let r = unsafe { (v.cuMemGetAccess)(&mut flags, &location, ptr.0) };
        self.check(r, || format!("cuMemGetAccess({ptr}, device {device})"))?;
        Ok(flags as u32)
    }

    fn retain_allocation_handle(&self, ptr: DevicePtr) -> Result<u64> {
        self.vmm()?;
        let mut state = lock(&self.vmm.state);
        let id = state
            .mappings
            .range(..=ptr.0)
            .next_back()
            .filter(|(b, m)| ptr.0 < **b + m.size)
            .map(|(_, m)| m.id)
            .ok_or_else(|| Error::InvalidValue(format!("{ptr} is not a mapped address")))?;
        let p = state.physical.get_mut(&id).ok_or_else(|| {
            Error::Unknown(format!("the mapping at {ptr} names physical allocation {id:#x}, which is gone"))
        })?;
        p.refs += 1;
        Ok(id)
    }

    fn allocation_properties(&self, handle: u64) -> Result<PhysicalProperties> {
        self.vmm()?;
        let state = lock(&self.vmm.state);
        let p = state.physical.get(&handle).filter(|p| p.refs > 0).ok_or_else(|| {
            Error::InvalidValue(format!("{handle:#x} is not a live physical allocation handle"))
        })?;
        Ok(PhysicalProperties { device: p.device, size: p.size, handle_types: p.handle_types })
    }

    fn export_to_fd(&self, handle: u64) -> Result<OwnedFd> {
        let v = self.vmm()?;
        let mut state = lock(&self.vmm.state);
        let p = state.physical.get_mut(&handle).filter(|p| p.refs > 0).ok_or_else(|| {
            Error::InvalidValue(format!("{handle:#x} is not a live physical allocation handle"))
        })?;
        let driver_handle = match p.pieces.as_slice() {
            [one] => one.handle,
            pieces => {
                return Err(Error::NotSupported(format!(
                    "physical allocation {handle:#x} is made of {} CUDA driver allocations (it was cut so that it \
                     could be mapped at a nonzero offset, which cuMemMap does not do), and a file descriptor \
                     shares only one; export it before mapping it anywhere but whole at offset 0",
                    pieces.len()
                )));
            }
        };
        let _ctx = self.bound(p.device)?;
        let mut fd: c_int = -1;
        // SAFETY: for CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR the driver
        // writes an int through the pointer; the handle is one this backend
        // holds a reference to.
        let r = unsafe {
            (v.cuMemExportToShareableHandle)(
                (&mut fd as *mut c_int).cast(),
                driver_handle,
                HANDLE_TYPE_POSIX_FD,
                0,
            )
        };
        self.check(r, || {
            format!("cuMemExportToShareableHandle({driver_handle:#x} of physical allocation {handle:#x}, POSIX fd)")
        })?;
        if fd < 0 {
            return Err(Error::Unknown(format!(
                "cuMemExportToShareableHandle({driver_handle:#x}) gave no descriptor"
            )));
        }
        // Another process may now see this memory: never cut it again.
        p.fixed = true;
        // SAFETY: the driver created this descriptor for the caller to own.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    fn import_from_fd(&self, fd: BorrowedFd<'_>) -> Result<u64> {
        let v = self.vmm()?;
        let _ctx = self.any_bound()?;
        let mut handle: Handle = 0;
        // SAFETY: for POSIX descriptors the driver takes the descriptor's
        // value cast to a pointer, and does not take ownership of it.
        let r = unsafe {
            (v.cuMemImportFromShareableHandle)(
                &mut handle,
                fd.as_raw_fd() as isize as *mut c_void,
                HANDLE_TYPE_POSIX_FD,
            )
        };
        self.check(r, || "cuMemImportFromShareableHandle(POSIX fd)".to_string())?;
        let piece = Piece { offset: 0, len: 0, handle };
        let mut prop = CUmemAllocationProp::pinned_on_device(0);
        // SAFETY: valid out-pointer to a properties struct of cuda.h's layout;
        // the handle was just imported.
        let r = unsafe { (v.cuMemGetAllocationPropertiesFromHandle)(&mut prop, handle) };
        if let Err(e) = self.check(r, || format!("cuMemGetAllocationPropertiesFromHandle({handle:#x})")) {
            if let Err(e2) = self.release_pieces(v, &[piece]) {
                tracing::warn!(target: "hipmem", "releasing an imported handle: {e2}");
            }
            return Err(e);
        }
        let device = self.ordinal_of(prop.location.id);
        let mut state = lock(&self.vmm.state);
        state.next_id += 1;
        let id = ID_BASE + state.next_id * ID_STEP;
        state.physical.insert(
            id,
            Physical {
                device,
                size: 0,
                handle_types: prop.requestedHandleTypes,
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
        assert_eq!(initial_piece_len(2 * G, G, 0, false), G);
        assert_eq!(initial_piece_len(EAGER_PIECES * G, G, 0, false), G);
        assert_eq!(initial_piece_len((EAGER_PIECES + 1) * G, G, 0, false), (EAGER_PIECES + 1) * G);
        assert_eq!(
            initial_piece_len(8 << 30, G, 0, false),
            8 << 30,
            "a 8 GiB chunk is one driver allocation"
        );
        assert_eq!(initial_piece_len(2 * G, G, HANDLE_TYPE_POSIX_FD, false), 2 * G, "exportable: one piece");
        assert_eq!(initial_piece_len(2 * G, G, 0, true), 2 * G, "mapped only whole: one piece");
        assert_eq!(initial_piece_len(EAGER_PIECES * G, G, 0, true), EAGER_PIECES * G);
        assert_eq!(tiling(3 * G, G), vec![(0, G), (G, G), (2 * G, G)]);
        assert_eq!(tiling(3 * G, 3 * G), vec![(0, 3 * G)]);
        assert!(tiling(0, G).is_empty());
    }

    #[test]
    fn plans_map_whole_pieces_from_their_start() {
        let granules = pieces(&[G, G, G]);
        let seg = |piece, len| Segment { piece, len };
        assert_eq!(plan(&granules, 0, 3 * G), Some((vec![seg(0, G), seg(1, G), seg(2, G)], true)));
        assert_eq!(plan(&granules, G, G), Some((vec![seg(1, G)], true)));
        assert_eq!(plan(&granules, G, 2 * G), Some((vec![seg(1, G), seg(2, G)], true)));
        assert_eq!(plan(&granules, 2 * G, 2 * G), None, "past the end");
        assert_eq!(plan(&granules, G / 2, G), None, "not at a piece start");
        let one = pieces(&[4 * G]);
        assert_eq!(plan(&one, 0, 4 * G), Some((vec![seg(0, 4 * G)], true)));
        assert_eq!(plan(&one, 0, G), Some((vec![seg(0, G)], false)), "a prefix");
        assert_eq!(plan(&one, G, G), None);
        let mixed = pieces(&[G, 2 * G]);
        assert_eq!(plan(&mixed, 0, 2 * G), Some((vec![seg(0, G), seg(1, G)], false)));
        assert_eq!(plan(&mixed, 2 * G, G), None);
        assert_eq!(plan(&granules, u64::MAX - G, 2 * G), None, "overflow");
        // Imported: one piece of unknown size, from offset 0 only.
        let imported = [Piece { offset: 0, len: 0, handle: 7 }];
        assert_eq!(plan(&imported, 0, 5 * G), Some((vec![seg(0, 5 * G)], false)));
        assert_eq!(plan(&imported, G, G), None);
    }
}
