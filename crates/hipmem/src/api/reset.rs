//! `hipDeviceReset`: what a reset releases in hipmem. It spans the core
//! (plain device memory, peer access) and the pools (the default pool's
//! unused memory), so it lives in the API layer.
#![forbid(unsafe_code)]

use crate::error::Result;
use crate::runtime::{MemoryKind, Runtime};

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
        while let Some(a) = self.allocations().overlapping(0, end) {
            if a.kind == MemoryKind::Device && a.device == device {
                doomed.push(a.base);
            }
            if a.base.0 == 0 {
                break;
            }
            end = a.base.0;
        }
        for ptr in &doomed {
            self.free_device_memory(*ptr)?;
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
