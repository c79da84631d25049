//! `hipMemGetAddressRange` and the typed memsets (`hipMemsetD8/D16/D32`).
#![forbid(unsafe_code)]

use super::{MemoryKind, Runtime};
use crate::backend::{DevicePtr, FillValue, RawStream};
use crate::error::{Error, Result};

impl Runtime {
    /// `hipMemGetAddressRange`: the start and size of the allocation that
    /// contains `ptr` (for pool memory: its block). An address in no
    /// allocation hipmem made (null included) is NotFound.
    pub fn address_range(&self, ptr: u64) -> Result<(DevicePtr, u64)> {
        let not_found = || {
            Error::NotFound(format!(
                "hipMemGetAddressRange: {ptr:#x} is not inside any live hipmem allocation"
            ))
        };
        if ptr == 0 {
            return Err(not_found());
        }
        let a = self.inner.allocations.find(ptr).ok_or_else(not_found)?;
        if let MemoryKind::PoolSegment(_) = a.kind {
            // The pool that owns the segment knows its blocks (a range check
            // of one byte narrows the segment to the block).
            let block = match self.hooked_range_check(&a, DevicePtr(ptr), 1, "hipMemGetAddressRange") {
                Some(Ok(block)) => block,
                _ => {
                    return Err(Error::NotFound(format!(
                        "hipMemGetAddressRange: {ptr:#x} is pool memory that is not allocated"
                    )));
                }
            };
            return Ok((block.base, block.size));
        }
        Ok((a.base, a.size))
    }

    /// `hipMemsetD8/D16/D32Async`: `count` elements of `value` at `dst` on
    /// `stream`. Count 0 succeeds before any check; a destination not
    /// aligned to the element size is InvalidValue (CUDA's rule, kept on
    /// every backend); null, host memory or a range past the allocation is
    /// InvalidValue.
    pub fn memset_elements_async(
        &self,
        dst: DevicePtr,
        value: FillValue,
        count: u64,
        stream: RawStream,
    ) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        self.check_element_alignment(dst, value)?;
        self.memset_async(dst, value, count, stream)
    }

    /// `hipMemsetD8/D16/D32`: as [`Runtime::memset_elements_async`] on the
    /// null stream of the memory's device, then waits for it.
    pub fn memset_elements(&self, dst: DevicePtr, value: FillValue, count: u64) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        self.check_element_alignment(dst, value)?;
        self.memset(dst, value, count)
    }

    fn check_element_alignment(&self, dst: DevicePtr, value: FillValue) -> Result<()> {
        let size = value.element_size();
        if dst.0 % size != 0 {
            return Err(Error::InvalidValue(format!(
                "hipMemsetD{}: {dst} is not aligned to {size} bytes",
                size * 8
            )));
        }
        Ok(())
    }
}
