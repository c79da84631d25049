//! A pool's statistics, attributes and per-device access.
#![forbid(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};

use super::backing::Backing;
use super::core::{PoolCore, lock};
use super::stream_cache::Slot;
use super::{AccessFlags, PoolAttribute, PoolStats};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};

impl PoolCore {
    // ---- statistics and attributes ---------------------------------------------------------

    pub(super) fn used_current(&self) -> u64 {
        // Slot locks are taken under the slots lock here (a slot lock is
        // held for a few instructions and never while another lock is taken).
        let total: i64 = lock(&self.slots).values().map(|s| s.lock().used).sum();
        total.max(0) as u64
    }

    /// [`PoolCore::used_current`] read by a caller holding `slot` (one of
    /// this pool's): where it is the pool's only slot, its used bytes,
    /// without the map of slots.
    pub(super) fn used_current_seen_by(&self, slot: &Slot) -> u64 {
        if self.slot_count.load(Ordering::Acquire) == 1 {
            return slot.lock().used.max(0) as u64;
        }
        self.used_current()
    }

    /// Takes an exact sample of the used bytes after `slot` went past its
    /// baseline, raises the high watermark, and rebalances the baselines so
    /// that their sum stays at most the high watermark (see `usage.rs`).
    pub(super) fn sample_usage(&self, slot: &Slot) {
        let mut high = lock(&self.used_high);
        let slots = self.all_slots();
        let total: i64 = slots.iter().map(|s| s.lock().used).sum();
        *high = (*high).max(total.max(0) as u64);
        self.live_high.fetch_max(total.max(0) as u64, Ordering::Relaxed);
        let high_now = *high as i64;
        {
            let mut me = slot.lock();
            me.baseline = me.used;
        }
        super::usage::rebalance(&slots, high_now);
    }

    pub(crate) fn stats(&self) -> PoolStats {
        let heap = lock(&self.heap);
        let reserved = heap.reserved();
        drop(heap);
        PoolStats {
            reserved_current: reserved,
            reserved_high: self.reserved_high.load(Ordering::Acquire).max(reserved),
            used_current: self.used_current(),
            used_high: *lock(&self.used_high),
        }
    }

    pub(crate) fn get_attribute(&self, attr: PoolAttribute) -> u64 {
        let flag = |b: &AtomicBool| b.load(Ordering::Relaxed) as u64;
        match attr {
            PoolAttribute::ReuseFollowEventDependencies => flag(&self.policy.follow_event_dependencies),
            PoolAttribute::ReuseAllowOpportunistic => flag(&self.policy.allow_opportunistic),
            PoolAttribute::ReuseAllowInternalDependencies => flag(&self.policy.allow_internal_dependencies),
            PoolAttribute::ReleaseThreshold => self.release_threshold.load(Ordering::Relaxed),
            PoolAttribute::ReservedMemCurrent => self.stats().reserved_current,
            PoolAttribute::ReservedMemHigh => self.stats().reserved_high,
            PoolAttribute::UsedMemCurrent => self.stats().used_current,
            PoolAttribute::UsedMemHigh => self.stats().used_high,
        }
    }

    pub(crate) fn set_attribute(&self, attr: PoolAttribute, value: u64) -> Result<()> {
        let set = |b: &AtomicBool| b.store(value != 0, Ordering::Relaxed);
        match attr {
            PoolAttribute::ReuseFollowEventDependencies => set(&self.policy.follow_event_dependencies),
            PoolAttribute::ReuseAllowOpportunistic => set(&self.policy.allow_opportunistic),
            PoolAttribute::ReuseAllowInternalDependencies => set(&self.policy.allow_internal_dependencies),
            PoolAttribute::ReleaseThreshold => self.release_threshold.store(value, Ordering::Relaxed),
            PoolAttribute::ReservedMemCurrent | PoolAttribute::UsedMemCurrent => {
                return Err(Error::InvalidValue(format!("{attr:?} is read-only")));
            }
            PoolAttribute::ReservedMemHigh | PoolAttribute::UsedMemHigh if value != 0 => {
                return Err(Error::InvalidValue(format!(
                    "{attr:?} can only be reset, by setting 0 (not {value})"
                )));
            }
            PoolAttribute::ReservedMemHigh => {
                let reserved = lock(&self.heap).reserved();
                self.reserved_high.store(reserved, Ordering::Release);
            }
            PoolAttribute::UsedMemHigh => {
                let mut high = lock(&self.used_high);
                let slots = self.all_slots();
                let mut total = 0i64;
                for s in &slots {
                    let mut st = s.lock();
                    st.baseline = st.used;
                    total += st.used;
                }
                *high = total.max(0) as u64;
            }
        }
        Ok(())
    }

    pub(crate) fn set_access(&self, device: usize, flags: AccessFlags) -> Result<()> {
        let old = self.access(device)?;
        if device == self.device && flags != AccessFlags::ReadWrite {
            return Err(Error::InvalidValue(format!(
                "the pool's own device {device} always has read-write access"
            )));
        }
        // Access taken away from a pool on virtual memory changes the
        // mappings at once: `device`'s work still queued may use them (as a
        // peer copy did when peer access went away under it, faulting both
        // devices' contexts), so it runs first.
        if matches!(self.backing, Backing::Virtual(_)) && flags < old {
            self.runtime()?.device_synchronize(device)?;
        }
        let mut access = lock(&self.access);
        let slot = access
            .get_mut(device)
            .ok_or_else(|| Error::InvalidDevice(format!("device {device} does not exist")))?;
        *slot = flags;
        drop(access);
        // A pool on virtual memory maps the access into every chunk it has.
        if let (Backing::Virtual(range), Some(vm)) = (&self.backing, self.backend.virtual_memory()) {
            if let Some(vr) = lock(range).as_ref() {
                for (addr, len) in vr.mappings() {
                    vm.mem_set_access(DevicePtr(addr), len, device, flags.raw())?;
                }
            }
        }
        Ok(())
    }

    pub(crate) fn access(&self, device: usize) -> Result<AccessFlags> {
        lock(&self.access)
            .get(device)
            .copied()
            .ok_or_else(|| Error::InvalidDevice(format!("device {device} does not exist")))
    }

    /// Checks the heap's invariants (for tests).
    pub(crate) fn check_invariants(&self) -> std::result::Result<(), String> {
        lock(&self.heap).check_invariants()?;
        self.check_physical()
    }
}
