//! `hipDeviceReset`: what a reset releases in hipmem.
#![forbid(unsafe_code)]

use super::{MemoryKind, Runtime};
use crate::error::Result;

impl Runtime {
    /// The runtime's part of `hipDeviceReset` on `device`: waits for the
    /// device, frees every `hipMalloc` / `hipMallocPitch` allocation on it,
    /// gives its default pool's unused memory back, and revokes the peer
    /// access it enabled (a reset device starts without any). Returns how
    /// many allocations it freed. Streams, events and pools that callers
    /// hold stay theirs (the C ABI destroys the handles it handed out).
    pub fn reset_device(&self, device: usize) -> Result<usize> {
        self.device_synchronize(device)?;
        let mut doomed = Vec::new();
        let mut end = u64::MAX;
        while let Some(a) = self.inner.allocations.overlapping(0, end) {
            if a.kind == MemoryKind::Device && a.device == device {
                doomed.push(a.base);
            }
            if a.base.0 == 0 {
                break;
            }
            end = a.base.0;
        }
        for ptr in &doomed {
            self.free(*ptr)?;
        }
        self.default_mem_pool(device)?.trim_to(0)?;
        for peer in 0..self.device_count() {
            if peer != device && self.peer_access_enabled(device, peer)? {
                self.disable_peer_access(device, peer)?;
            }
        }
        Ok(doomed.len())
    }
}
