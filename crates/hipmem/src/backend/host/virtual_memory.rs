//! Virtual memory management on the CPU emulation, with real virtual memory:
//!
//! - a reservation is an `mmap(PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS |
//!   MAP_NORESERVE)` range (at the hint address when the kernel grants it);
//! - a physical allocation is a memfd object of the allocation's size,
//!   counted against its device's capacity;
//! - a mapping is an `mmap(MAP_FIXED | MAP_SHARED)` of the memfd at an offset,
//!   over part of a reservation; it starts `PROT_NONE` (no access);
//! - access is `mprotect`; a mapping with read-write access for some device
//!   is registered in the region table, so copies and kernels on it are
//!   validated like any device memory (read-only access makes the range
//!   readable by the host but device work on it is refused: the emulator does
//!   not tell a kernel's reads from its writes);
//! - unmapping (or lowering access) removes the regions first, drains every
//!   device, then maps the range back to `PROT_NONE` anonymous memory, so the
//!   reservation stays and no queued work touches memory that went away (an
//!   unmap drains with the table unlocked, so other threads' calls go on).
//!
//! A physical allocation lives while its handle has references or it is mapped.

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Mutex;

use rustix::mm::{MapFlags, MprotectFlags, ProtFlags};

use super::device_memory::{Region, RegionKind, round_up};
use super::{HostBackend, lock};
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::{HANDLE_TYPE_POSIX_FD, PhysicalProperties, VirtualMemory};
use crate::error::{Error, Result};

/// The emulator's VMM state (one lock: VMM calls are not a fast path).
#[derive(Debug, Default)]
pub(crate) struct HostVmm {
    state: Mutex<VmmState>,
}

#[derive(Debug, Default)]
struct VmmState {
    next_handle: u64,
    physical: HashMap<u64, Physical>,
    /// base → size.
    reservations: BTreeMap<u64, u64>,
    /// base → mapping.
    mappings: BTreeMap<u64, HostMapping>,
}

#[derive(Debug)]
struct Physical {
    fd: OwnedFd,
    device: usize,
    size: u64,
    handle_types: u32,
    /// Unreleased handle references (create, retain, import).
    refs: u32,
    /// Live mappings of it.
    maps: u32,
}

#[derive(Debug)]
struct HostMapping {
    size: u64,
    handle: u64,
    /// Access flags per device (0, 1 or 3).
    access: Vec<u32>,
    /// Whether the range is in the region table (read-write for some device).
    registered: bool,
}

impl HostMapping {
    fn effective(&self) -> u32 {
        self.access.iter().copied().max().unwrap_or(0)
    }
}

fn bad(msg: String) -> Error {
    Error::InvalidValue(msg)
}

fn to_usize(n: u64, what: &str) -> Result<usize> {
    usize::try_from(n)
        .map_err(|_| Error::OutOfMemory(format!("{what} of {n} bytes does not fit the address space")))
}

fn prot(flags: u32) -> MprotectFlags {
    match flags {
        0 => MprotectFlags::empty(),
        1 => MprotectFlags::READ,
        _ => MprotectFlags::READ | MprotectFlags::WRITE,
    }
}

/// Maps fresh `PROT_NONE` anonymous memory over `[addr, addr + len)`, which
/// lies inside a reservation the emulator owns.
fn remap_none(addr: u64, len: u64) -> Result<()> {
    let len = to_usize(len, "unmap")?;
    // SAFETY: the range is inside a reservation this emulator made with mmap;
    // no Rust object lives there, and the caller made sure no queued work
    // still touches it (its regions were removed and the devices drained).
    unsafe {
        rustix::mm::mmap_anonymous(
            addr as *mut _,
            len,
            ProtFlags::empty(),
            MapFlags::PRIVATE | MapFlags::NORESERVE | MapFlags::FIXED,
        )
    }
    .map(|_| ())
    .map_err(|e| Error::Unknown(format!("remapping {len} bytes at {addr:#x} as reserved failed: {e}")))
}

impl HostBackend {
    /// Whether `size` more bytes of addresses fit the emulated address
    /// space ([`HostConfig::address_space`](super::config::HostConfig::address_space))
    /// beside the reservations in `state`; OutOfMemory saying how much is
    /// reserved where not.
    fn check_address_space(&self, state: &VmmState, size: u64) -> Result<()> {
        let held: u64 = state.reservations.values().sum();
        if size > self.config.address_space.saturating_sub(held) {
            return Err(Error::OutOfMemory(format!(
                "reserving {size} bytes of addresses: {held} of the emulated address space's {} bytes are reserved already",
                self.config.address_space
            )));
        }
        Ok(())
    }

    /// Drops a physical allocation once it has neither references nor mappings.
    fn collect(&self, state: &mut VmmState, handle: u64) {
        let dead = state.physical.get(&handle).is_some_and(|p| p.refs == 0 && p.maps == 0);
        if dead && let Some(p) = state.physical.remove(&handle) {
            if let Some(d) = self.devices.get(p.device) {
                let mut used = lock(&d.used);
                *used = used.saturating_sub(p.size);
            }
            drop(p.fd);
        }
    }

    /// The bases of the whole mappings that exactly cover `[ptr, ptr + size)`.
    fn covering(state: &VmmState, ptr: DevicePtr, size: u64, what: &str) -> Result<Vec<u64>> {
        let end =
            ptr.0.checked_add(size).ok_or_else(|| bad(format!("{what}: {ptr} + {size} bytes overflows")))?;
        let mut bases = Vec::new();
        let mut at = ptr.0;
        while at < end {
            match state.mappings.get(&at) {
                Some(m) => {
                    bases.push(at);
                    at += m.size;
                }
                None => {
                    let inside = state.mappings.range(..at).next_back().is_some_and(|(b, m)| b + m.size > at);
                    return Err(bad(if inside {
                        format!(
                            "{what}: {:#x} is inside a mapping, not at its start: the range {ptr} + {size} must cover whole mappings",
                            at
                        )
                    } else {
                        format!("{what}: {:#x} is not mapped (the range {ptr} + {size} must be mapped)", at)
                    }));
                }
            }
        }
        if at != end {
            return Err(bad(format!(
                "{what}: the range {ptr} + {size} ends inside a mapping (which ends at {at:#x}); it must cover whole mappings"
            )));
        }
        Ok(bases)
    }

    fn mapping_at(state: &VmmState, ptr: DevicePtr) -> Option<(u64, &HostMapping)> {
        state.mappings.range(..=ptr.0).next_back().filter(|(b, m)| ptr.0 < **b + m.size).map(|(b, m)| (*b, m))
    }
}

impl VirtualMemory for HostBackend {
    fn granularity(&self, device: usize, _recommended: bool) -> Result<u64> {
        self.device(device)?;
        Ok(self.config.vmm_granularity)
    }

    fn mem_create(&self, device: usize, size: u64, handle_types: u32) -> Result<u64> {
        let d = self.device(device)?;
        let g = self.config.vmm_granularity;
        if size == 0 || size % g != 0 {
            return Err(bad(format!(
                "physical allocation size {size} is not a nonzero multiple of the granularity {g}"
            )));
        }
        let capacity = self.config.memory_per_device;
        let mut used = lock(&d.used);
        if size > capacity - *used {
            return Err(Error::OutOfMemory(format!(
                "device {device}: cannot create a {size}-byte physical allocation: {} of {capacity} bytes are in use",
                *used
            )));
        }
        let fd = rustix::fs::memfd_create("hipmem-vmm", rustix::fs::MemfdFlags::CLOEXEC)
            .map_err(|e| Error::OutOfMemory(format!("memfd_create failed: {e}")))?;
        rustix::fs::ftruncate(&fd, size).map_err(|e| {
            Error::OutOfMemory(format!("sizing a {size}-byte physical allocation failed: {e}"))
        })?;
        *used += size;
        drop(used);
        let mut state = lock(&self.vmm.state);
        state.next_handle += 1;
        let handle = 0x7000_0000_0000 + state.next_handle * 0x10;
        state.physical.insert(handle, Physical { fd, device, size, handle_types, refs: 1, maps: 0 });
        Ok(handle)
    }

    fn mem_release(&self, handle: u64) -> Result<()> {
        let mut state = lock(&self.vmm.state);
        match state.physical.get_mut(&handle) {
            Some(p) if p.refs > 0 => p.refs -= 1,
            _ => {
                return Err(bad(format!(
                    "{handle:#x} is not a live physical allocation handle (never created, or already released)"
                )));
            }
        }
        self.collect(&mut state, handle);
        Ok(())
    }

    fn address_reserve(&self, size: u64, alignment: u64, hint: DevicePtr) -> Result<DevicePtr> {
        let g = self.config.vmm_granularity;
        if size == 0 || size % g != 0 {
            return Err(Error::OutOfMemory(format!(
                "reservation size {size} is not a nonzero multiple of the granularity {g}"
            )));
        }
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(Error::OutOfMemory(format!(
                "reservation alignment {alignment} is not a power of two"
            )));
        }
        let align = alignment.max(g);
        let len = to_usize(size, "reservation")?;
        self.check_address_space(&lock(&self.vmm.state), size)?;
        let flags = MapFlags::PRIVATE | MapFlags::NORESERVE;
        let map = |at: u64, len: usize| {
            // SAFETY: without MAP_FIXED the address is only a hint: the kernel
            // never replaces an existing mapping, so no Rust object is aliased.
            unsafe { rustix::mm::mmap_anonymous(at as *mut _, len, ProtFlags::empty(), flags) }
                .map(|p| p as u64)
                .map_err(|e| Error::OutOfMemory(format!("reserving {len} bytes of addresses failed: {e}")))
        };
        let unmap = |at: u64, len: usize| {
            if len > 0 {
                // SAFETY: `[at, at + len)` was just reserved here and nothing uses it.
                let _ = unsafe { rustix::mm::munmap(at as *mut _, len) };
            }
        };
        let mut base = None;
        for at in [hint.0, 0] {
            if at % align != 0 {
                continue;
            }
            let p = map(at, len)?;
            if p % align == 0 {
                base = Some(p);
                break;
            }
            unmap(p, len);
            if at == 0 {
                break;
            }
        }
        let base = match base {
            Some(b) => b,
            None => {
                // Over-reserve and trim to the alignment.
                let extra = to_usize(align, "alignment")?;
                let total = len.checked_add(extra).ok_or_else(|| {
                    Error::OutOfMemory(format!("reservation of {size} bytes aligned to {align} overflows"))
                })?;
                let p = map(0, total)?;
                let aligned = round_up(p, align);
                unmap(p, (aligned - p) as usize);
                unmap(aligned + size, (p + total as u64 - aligned - size) as usize);
                aligned
            }
        };
        // (Checked again with the reservation made: another thread may have
        // reserved meanwhile.)
        let mut state = lock(&self.vmm.state);
        if let Err(e) = self.check_address_space(&state, size) {
            drop(state);
            unmap(base, len);
            return Err(e);
        }
        state.reservations.insert(base, size);
        Ok(DevicePtr(base))
    }

    fn address_free(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let mut state = lock(&self.vmm.state);
        match state.reservations.get(&ptr.0) {
            Some(&s) if s == size => {}
            Some(&s) => {
                return Err(bad(format!(
                    "the reservation at {ptr} has {s} bytes, not {size}: free it whole"
                )));
            }
            None => return Err(bad(format!("{ptr} is not the start of a live address reservation"))),
        }
        if state.mappings.range(ptr.0..ptr.0 + size).next().is_some() {
            return Err(bad(format!("the reservation at {ptr} still has mappings: unmap them first")));
        }
        state.reservations.remove(&ptr.0);
        let len = to_usize(size, "reservation")?;
        // SAFETY: the range is a whole reservation this emulator made, with no
        // mapping left in it (so no registered region and no queued work).
        unsafe { rustix::mm::munmap(ptr.0 as *mut _, len) }
            .map_err(|e| Error::Unknown(format!("munmap of the reservation at {ptr} failed: {e}")))
    }

    fn mem_map(&self, ptr: DevicePtr, size: u64, offset: u64, handle: u64) -> Result<()> {
        let g = self.config.vmm_granularity;
        let mut state = lock(&self.vmm.state);
        let p = state
            .physical
            .get(&handle)
            .filter(|p| p.refs > 0)
            .ok_or_else(|| bad(format!("{handle:#x} is not a live physical allocation handle")))?;
        if size == 0 || size % g != 0 || offset % g != 0 || ptr.0 % g != 0 {
            return Err(bad(format!(
                "map of {size} bytes at {ptr}, offset {offset}: address, size and offset must be multiples of the granularity {g} (size nonzero)"
            )));
        }
        if offset.checked_add(size).is_none_or(|e| e > p.size) {
            return Err(bad(format!(
                "map of {size} bytes from offset {offset} runs past the end of the {}-byte physical allocation",
                p.size
            )));
        }
        let end = ptr.0.checked_add(size).ok_or_else(|| bad(format!("{ptr} + {size} overflows")))?;
        let inside = state.reservations.range(..=ptr.0).next_back().is_some_and(|(b, s)| end <= b + s);
        if !inside {
            return Err(bad(format!("{size} bytes at {ptr} are not inside one address reservation")));
        }
        let overlaps = state.mappings.range(..end).next_back().is_some_and(|(b, m)| b + m.size > ptr.0);
        if overlaps {
            return Err(bad(format!("{size} bytes at {ptr} overlap an existing mapping")));
        }
        let len = to_usize(size, "mapping")?;
        // SAFETY: the range lies inside a reservation this emulator owns and
        // holds no mapping (checked above), so replacing its PROT_NONE pages
        // aliases no Rust object; the memfd is at least `offset + size` long.
        unsafe {
            rustix::mm::mmap(
                ptr.0 as *mut _,
                len,
                ProtFlags::empty(),
                MapFlags::SHARED | MapFlags::FIXED,
                p.fd.as_fd(),
                offset,
            )
        }
        .map_err(|e| Error::OutOfMemory(format!("mapping {size} bytes at {ptr} failed: {e}")))?;
        let devices = self.devices.len();
        if let Some(p) = state.physical.get_mut(&handle) {
            p.maps += 1;
        }
        state
            .mappings
            .insert(ptr.0, HostMapping { size, handle, access: vec![0; devices], registered: false });
        Ok(())
    }

    fn mem_unmap(&self, ptr: DevicePtr, size: u64) -> Result<()> {
        let mut state = lock(&self.vmm.state);
        let bases = loop {
            let bases = Self::covering(&state, ptr, size, "hipMemUnmap")?;
            let mut registered = false;
            for &b in &bases {
                if let Some(m) = state.mappings.get_mut(&b).filter(|m| m.registered) {
                    self.regions.remove_if(b, |r| r.kind == RegionKind::VirtualMapping);
                    m.registered = false;
                    registered = true;
                }
            }
            if !registered {
                break bases;
            }
            // No new work can name the ranges now; wait for what was queued,
            // with the table unlocked (other threads' calls go on), then look
            // again: another thread may have unmapped them, or given access
            // again (then their regions go and the devices drain once more).
            drop(state);
            self.drain_all_devices();
            state = lock(&self.vmm.state);
        };
        remap_none(ptr.0, size)?;
        for b in bases {
            if let Some(m) = state.mappings.remove(&b) {
                if let Some(p) = state.physical.get_mut(&m.handle) {
                    p.maps -= 1;
                }
                self.collect(&mut state, m.handle);
            }
        }
        Ok(())
    }

    fn mem_set_access(&self, ptr: DevicePtr, size: u64, device: usize, flags: u32) -> Result<()> {
        if device >= self.devices.len() {
            return Err(bad(format!(
                "device {device} does not exist (the host backend has {})",
                self.devices.len()
            )));
        }
        if !matches!(flags, 0 | 1 | 3) {
            return Err(bad(format!("{flags} is not a hipMemAccessFlags value (0, 1 or 3)")));
        }
        let mut state = lock(&self.vmm.state);
        let bases = Self::covering(&state, ptr, size, "hipMemSetAccess")?;
        // Lowering access: take the ranges out of the table and drain first.
        let mut lowered = false;
        for &b in &bases {
            let m = &state.mappings[&b];
            let mut access = m.access.clone();
            access[device] = flags;
            let new = access.iter().copied().max().unwrap_or(0);
            if new < m.effective() {
                if m.registered {
                    self.regions.remove_if(b, |r| r.kind == RegionKind::VirtualMapping);
                }
                lowered = true;
            }
        }
        if lowered {
            self.drain_all_devices();
        }
        for b in bases {
            let phys_device = {
                let m = &state.mappings[&b];
                state.physical.get(&m.handle).map(|p| p.device).unwrap_or(0)
            };
            let Some(m) = state.mappings.get_mut(&b) else { continue };
            m.access[device] = flags;
            let effective = m.effective();
            let len = to_usize(m.size, "mapping")?;
            // SAFETY: the range is a whole mapping of a memfd this emulator
            // made; work that could touch it under the old protection was
            // drained above when the protection is lowered.
            unsafe { rustix::mm::mprotect(b as *mut _, len, prot(effective)) }
                .map_err(|e| Error::Unknown(format!("mprotect of the mapping at {b:#x} failed: {e}")))?;
            let want = effective == 3;
            if want && !m.registered {
                self.regions
                    .insert(b, Region { len: m.size, device: phys_device, kind: RegionKind::VirtualMapping });
            } else if !want && m.registered {
                self.regions.remove_if(b, |r| r.kind == RegionKind::VirtualMapping);
            }
            m.registered = want;
        }
        Ok(())
    }

    fn mem_get_access(&self, ptr: DevicePtr, device: usize) -> Result<u32> {
        if device >= self.devices.len() {
            return Err(bad(format!(
                "device {device} does not exist (the host backend has {})",
                self.devices.len()
            )));
        }
        let state = lock(&self.vmm.state);
        let (_, m) = Self::mapping_at(&state, ptr).ok_or_else(|| bad(format!("{ptr} is not mapped")))?;
        Ok(m.access[device])
    }

    fn retain_allocation_handle(&self, ptr: DevicePtr) -> Result<u64> {
        let mut state = lock(&self.vmm.state);
        let handle = Self::mapping_at(&state, ptr).map(|(_, m)| m.handle).ok_or_else(|| {
            bad(format!("{ptr} is not a mapped address (reserved but unmapped, or unknown)"))
        })?;
        if let Some(p) = state.physical.get_mut(&handle) {
            p.refs += 1;
        }
        Ok(handle)
    }

    fn allocation_properties(&self, handle: u64) -> Result<PhysicalProperties> {
        let state = lock(&self.vmm.state);
        let p = state
            .physical
            .get(&handle)
            .filter(|p| p.refs > 0)
            .ok_or_else(|| bad(format!("{handle:#x} is not a live physical allocation handle")))?;
        Ok(PhysicalProperties { device: p.device, size: p.size, handle_types: p.handle_types })
    }

    fn export_to_fd(&self, handle: u64) -> Result<OwnedFd> {
        let state = lock(&self.vmm.state);
        let p = state
            .physical
            .get(&handle)
            .filter(|p| p.refs > 0)
            .ok_or_else(|| bad(format!("{handle:#x} is not a live physical allocation handle")))?;
        if p.handle_types & HANDLE_TYPE_POSIX_FD == 0 {
            return Err(bad(format!(
                "{handle:#x} was not created with the POSIX file descriptor handle type, so it cannot be exported as one"
            )));
        }
        p.fd.try_clone()
            .map_err(|e| Error::Unknown(format!("dup of the allocation's file descriptor failed: {e}")))
    }

    fn import_from_fd(&self, fd: BorrowedFd<'_>) -> Result<u64> {
        let stat =
            rustix::fs::fstat(fd).map_err(|e| bad(format!("fstat of the shared handle failed: {e}")))?;
        let size = stat.st_size as u64;
        let g = self.config.vmm_granularity;
        if size == 0 || size % g != 0 {
            return Err(bad(format!("the shared handle is not a physical allocation ({size} bytes)")));
        }
        let fd = fd
            .try_clone_to_owned()
            .map_err(|e| Error::Unknown(format!("dup of the shared handle failed: {e}")))?;
        // Imported memory is counted against device 0 (a memfd says no device).
        *lock(&self.devices[0].used) += size;
        let mut state = lock(&self.vmm.state);
        state.next_handle += 1;
        let handle = 0x7000_0000_0000 + state.next_handle * 0x10;
        state.physical.insert(
            handle,
            Physical { fd, device: 0, size, handle_types: HANDLE_TYPE_POSIX_FD, refs: 1, maps: 0 },
        );
        Ok(handle)
    }
}

impl Drop for HostVmm {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        for (&base, &size) in &state.reservations {
            // SAFETY: the backend is going away (its devices were drained in
            // its own Drop); these reservations were made here and nothing
            // else refers to them any more.
            if let Err(e) = unsafe { rustix::mm::munmap(base as *mut _, size as usize) } {
                tracing::error!(target: "hipmem", "munmap of a VMM reservation failed: {e}");
            }
        }
    }
}
