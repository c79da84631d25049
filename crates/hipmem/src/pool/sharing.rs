//! What interprocess sharing (the `ipc` subsystem) needs to know of a pool
//! on virtual memory: its reservation, its mapped chunks, where a block is.
#![forbid(unsafe_code)]

use super::backing::Backing;
use super::core::{PoolCore, lock};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};

/// Where a shareable pool's memory is, for an importer: the size and
/// alignment of its reservation.
#[derive(Copy, Clone, Debug)]
pub(crate) struct IpcInfo {
    pub(crate) uid: [u8; 16],
    pub(crate) device: usize,
    pub(crate) size: u64,
    pub(crate) granularity: u64,
}

/// One mapped chunk, exported: its offset in the reservation, size, id
/// (the physical handle, never reused) and descriptor.
pub(crate) type IpcChunk = (u64, u64, u64, std::os::fd::OwnedFd);

impl PoolCore {
    // ---- interprocess sharing ---------------------------------------------------------

    /// The pool's random identity (pointer export data names it).
    /// (`make` draws it the first time: the sharing layer's random source.)
    pub(crate) fn ipc_uid(&self, make: fn() -> [u8; 16]) -> [u8; 16] {
        *self.ipc_uid.get_or_init(make)
    }

    /// What an importer needs to know; reserves the range if the pool has
    /// none yet. NotSupported unless the pool is on virtual memory and was
    /// created with the POSIX file descriptor handle type.
    pub(crate) fn ipc_info(&self, make_uid: fn() -> [u8; 16]) -> Result<IpcInfo> {
        let rt = self.runtime()?;
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::NotSupported(format!(
                "pool {:#x} is backed by segments; only pools on virtual memory can be shared",
                self.id
            )));
        };
        if self.props.handle_types & super::handle_type::POSIX_FILE_DESCRIPTOR == 0 {
            return Err(Error::InvalidValue(format!(
                "pool {:#x} was not created with the POSIX file descriptor handle type",
                self.id
            )));
        }
        let vm =
            rt.backend().virtual_memory().ok_or_else(|| Error::NotSupported("no virtual memory".into()))?;
        let mut guard = lock(range);
        self.reserve_virtual(&rt, vm, &mut guard)?;
        let vr = guard.as_ref().expect("reserved above");
        Ok(IpcInfo {
            uid: self.ipc_uid(make_uid),
            device: self.device,
            size: vr.size,
            granularity: vr.granularity,
        })
    }

    /// The mapped chunks that overlap `[offset, offset + size)` of the
    /// reservation (at most `max`, in address order), each exported as a
    /// descriptor.
    pub(crate) fn ipc_chunks(&self, offset: u64, size: u64, max: usize) -> Result<Vec<IpcChunk>> {
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::NotSupported("the pool is not on virtual memory".into()));
        };
        let vm =
            self.backend.virtual_memory().ok_or_else(|| Error::NotSupported("no virtual memory".into()))?;
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return Ok(Vec::new()) };
        if offset.checked_add(size).is_none_or(|e| e > vr.size) {
            return Err(Error::InvalidValue(format!(
                "{size} bytes at offset {offset} are outside the pool's {}-byte reservation",
                vr.size
            )));
        }
        let (start, end) = (vr.base + offset, vr.base + offset + size);
        let first =
            vr.chunks.range(..=start).next_back().filter(|(a, (s, _))| *a + s > start).map(|(a, _)| *a);
        let from = first.unwrap_or(start);
        let mut out = Vec::new();
        for (&addr, &(csize, handle)) in vr.chunks.range(from..end) {
            if out.len() == max {
                break;
            }
            out.push((addr - vr.base, csize, handle, vm.export_to_fd(handle)?));
        }
        Ok(out)
    }

    /// The live block that starts at `ptr`: (offset in the reservation, size).
    pub(crate) fn ipc_block(&self, ptr: DevicePtr) -> Result<(u64, u64)> {
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::NotSupported("the pool is not on virtual memory".into()));
        };
        if self.props.handle_types & super::handle_type::POSIX_FILE_DESCRIPTOR == 0 {
            return Err(Error::InvalidValue(format!(
                "{ptr} is from pool {:#x}, which was not created shareable (POSIX file descriptor)",
                self.id
            )));
        }
        let base = lock(range).as_ref().map(|vr| vr.base).unwrap_or(0);
        match lock(&self.heap).allocated_block_containing(ptr.0) {
            Some((b, size)) if b == ptr.0 && base != 0 => Ok((b - base, size)),
            _ => Err(Error::InvalidValue(format!(
                "{ptr} is not the start of a live allocation of pool {:#x}",
                self.id
            ))),
        }
    }
}
