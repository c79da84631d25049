//! The table of page-locked host ranges a backend allocated or registered,
//! shared by every backend that implements
//! [`PageLockedMemory`](super::host_memory::PageLockedMemory).
//!
//! Host addresses are unique in the process, so each backend keeps one
//! process-wide table whose entries name the backend instance that owns them.
//! The table is what makes the capability's copies safe to call with any
//! address: [`PageLockedRanges::lend`] validates the range and keeps the
//! table locked until the caller has queued its copy, and a free or
//! unregister first takes the entry out ([`PageLockedRanges::take`]) and then
//! drains the devices, so no queued copy outlives the memory.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::{Mutex, MutexGuard};

use super::HostSpan;
use crate::error::{Error, Result};

/// One page-locked range: what every backend records, plus its own `extra`.
pub(crate) struct RangeEntry<E> {
    /// Length in bytes (as requested, not rounded).
    pub len: u64,
    /// The owning backend instance (its address).
    pub owner: usize,
    /// Mapped into the devices' address space.
    pub mapped: bool,
    /// Registered user memory (else memory the backend allocated).
    pub registered: bool,
    /// Backend-specific state.
    pub extra: E,
}

/// A process-wide table of page-locked ranges, keyed by start address.
pub(crate) struct PageLockedRanges<E> {
    map: Mutex<BTreeMap<u64, RangeEntry<E>>>,
}

/// The locked table; holding it keeps every range in it alive.
pub(crate) type RangesGuard<'a, E> = MutexGuard<'a, BTreeMap<u64, RangeEntry<E>>>;

impl<E> PageLockedRanges<E> {
    /// An empty table (for a `static`).
    pub const fn new() -> Self {
        PageLockedRanges { map: Mutex::new(BTreeMap::new()) }
    }

    /// Locks the table.
    pub fn lock(&self) -> RangesGuard<'_, E> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The entry of `owner` that contains `[addr, addr + len)`, or a message
    /// saying why there is none.
    fn containing(
        table: &BTreeMap<u64, RangeEntry<E>>,
        owner: usize,
        addr: u64,
        len: u64,
    ) -> std::result::Result<&RangeEntry<E>, String> {
        let end = addr.checked_add(len).ok_or_else(|| format!("{addr:#x} + {len} bytes overflows"))?;
        match table.range(..=addr).next_back() {
            Some((&base, e)) if e.owner == owner && addr < base + e.len.max(1) => {
                if end > base + e.len {
                    Err(format!(
                        "{len} bytes at {addr:#x} run {} bytes past the end of the {}-byte page-locked range at {base:#x}",
                        end - (base + e.len),
                        e.len
                    ))
                } else {
                    Ok(e)
                }
            }
            _ => Err(format!("{addr:#x} is not page-locked memory of this backend")),
        }
    }

    /// Checks that `host` lies in mapped page-locked memory of `owner`.
    pub fn check_mapped(&self, owner: usize, host: u64) -> Result<()> {
        let table = self.lock();
        let entry = Self::containing(&table, owner, host, 1).map_err(Error::InvalidValue)?;
        if !entry.mapped {
            return Err(Error::InvalidValue(format!("{host:#x} is page-locked memory that is not mapped")));
        }
        Ok(())
    }

    /// Validates `[addr, addr + len)` as the host side (`role`: "source" or
    /// "destination") of an asynchronous copy and lends it: the returned
    /// guard keeps the table locked, so the range cannot be freed or
    /// unregistered until the caller has queued its copy and dropped it.
    pub fn lend(
        &self,
        owner: usize,
        addr: u64,
        len: u64,
        role: &str,
    ) -> Result<(RangesGuard<'_, E>, HostSpan)> {
        let table = self.lock();
        Self::containing(&table, owner, addr, len)
            .map_err(|m| Error::InvalidValue(format!("asynchronous copy {role}: {m}")))?;
        // SAFETY: the range lies in page-locked memory that `owner` allocated
        // or registered. It stays valid until freed or unregistered, and both
        // take the entry out under this lock and then drain every device, so
        // the copy queued while the guard is held completes first.
        let span = unsafe { HostSpan::new(addr as *const u8, len as usize) };
        Ok((table, span))
    }

    /// Checks a registration request against the locked `table`: a non-null,
    /// non-empty range that does not overlap any page-locked range.
    pub fn check_registrable(table: &BTreeMap<u64, RangeEntry<E>>, addr: u64, len: u64) -> Result<()> {
        if addr == 0 || len == 0 {
            return Err(Error::InvalidValue("hipHostRegister of a null pointer or 0 bytes".into()));
        }
        let end = addr
            .checked_add(len)
            .ok_or_else(|| Error::InvalidValue(format!("{addr:#x} + {len} bytes overflows")))?;
        if table.range(..end).next_back().is_some_and(|(&base, e)| base + e.len.max(1) > addr) {
            return Err(Error::InvalidValue(format!(
                "{len} bytes at {addr:#x} overlap memory that is already page-locked"
            )));
        }
        Ok(())
    }

    /// Takes out the entry of `owner` that starts at `addr` and is
    /// (`registered`) or is not a registration; `what` names it in the error.
    pub fn take(&self, owner: usize, addr: u64, registered: bool, what: &str) -> Result<RangeEntry<E>> {
        match self.lock().entry(addr) {
            Entry::Occupied(e) if e.get().owner == owner && e.get().registered == registered => {
                Ok(e.remove())
            }
            _ => Err(Error::InvalidValue(format!("{addr:#x} is not the start of {what} of this backend"))),
        }
    }

    /// Puts back an entry that [`PageLockedRanges::take`] took out (when the
    /// free or unregister that took it failed).
    pub fn restore(&self, addr: u64, entry: RangeEntry<E>) {
        self.lock().insert(addr, entry);
    }
}
