//! What access another device's work has to pool memory (the pool's side
//! of the peer-access rules of `runtime/peer.rs`, which the core asks
//! through [`CoreHooks::device_access`](crate::runtime::CoreHooks::device_access)).
//!
//! - hipmem's pool: what its access list says (`hipMemPoolSetAccess`); a
//!   pool made of separate device allocations (`PoolBacking::Segments`) is
//!   plain device memory, so the device also needs peer access to the
//!   pool's device (`hipDeviceEnablePeerAccess`);
//! - the driver's pool: what the driver says (`hipMemPoolGetAccess`).
#![forbid(unsafe_code)]

use super::PoolBacking;
use super::table::PoolTable;
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::AccessFlags;
use crate::error::{Error, Result};
use crate::runtime::{Allocation, MemoryKind, Runtime};

/// The access of `device` to `ptr` in `a`, if `a` is pool memory (None
/// otherwise: not the pools' to answer).
pub(crate) fn device_access(
    table: &PoolTable,
    rt: &Runtime,
    device: usize,
    a: &Allocation,
    ptr: DevicePtr,
) -> Option<Result<AccessFlags>> {
    let gone = || Error::InvalidValue(format!("{ptr} belongs to a pool that no longer exists"));
    match a.kind {
        MemoryKind::PoolSegment(pool) => Some((|| {
            let core = table.get(pool).ok_or_else(gone)?;
            let granted = core.access(device)?;
            if device != a.device
                && core.backing() == PoolBacking::Segments
                && rt.peer_flags(device, a.device)? == AccessFlags::None
            {
                return Ok(AccessFlags::None);
            }
            Ok(granted)
        })()),
        MemoryKind::DriverPool(pool) => {
            Some(table.get_driver(pool).ok_or_else(gone).and_then(|driver| driver.access(device)))
        }
        _ => None,
    }
}
