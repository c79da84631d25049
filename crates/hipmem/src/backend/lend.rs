//! Lending host memory to asynchronous device work.
//!
//! An asynchronous copy reads or writes host memory after the call that
//! queued it has returned. [`HostSpan`] is the raw form of such memory; its
//! constructor is `unsafe` because the caller promises that the memory stays
//! valid (and, for a destination, unaliased) until the work completes.
//!
//! [`lend_scope`] turns that promise into a borrow-checked one, the way
//! `std::thread::scope` does for threads: slices lent inside the scope must
//! outlive it, and the scope waits for the device work before it returns (also
//! when the closure panics), so no lent slice can be dropped or reused while
//! a copy still touches it.

use std::marker::PhantomData;

use crate::error::Result;

/// Host memory lent to queued device work: an address and a length.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct HostSpan {
    addr: u64,
    len: u64,
}

impl HostSpan {
    /// Describes `len` bytes of host memory at `addr`.
    ///
    /// # Safety
    /// The memory must be valid for reads (and, if used as a copy destination,
    /// for writes with no other access) from now until every stream operation
    /// that is given this span has completed.
    pub unsafe fn new(addr: *const u8, len: usize) -> HostSpan {
        HostSpan { addr: addr as u64, len: len as u64 }
    }

    /// The start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the span is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The start as a pointer (for the backends).
    pub(crate) fn as_ptr(&self) -> *const u8 {
        self.addr as *const u8
    }

    /// The start as a mutable pointer (for the backends).
    pub(crate) fn as_mut_ptr(&self) -> *mut u8 {
        self.addr as *mut u8
    }
}

/// A scope in which host slices can be lent to asynchronous device work,
/// carrying a context value (the stream the work goes to). Created by
/// [`lend_scope`].
pub struct LendScope<'scope, 'env: 'scope, C> {
    context: C,
    // Invariant in both lifetimes, as std::thread::Scope.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'scope, 'env, C> LendScope<'scope, 'env, C> {
    /// The context value given to [`lend_scope`].
    pub fn context(&self) -> &C {
        &self.context
    }

    /// Lends a slice for reading by work queued inside the scope.
    pub fn lend(&'scope self, slice: &'env [u8]) -> HostSpan {
        // SAFETY: `slice` is borrowed for 'env, which outlives the scope, and
        // `lend_scope` waits for all queued work before the scope ends.
        unsafe { HostSpan::new(slice.as_ptr(), slice.len()) }
    }

    /// Lends a slice for writing by work queued inside the scope. The mutable
    /// borrow keeps the caller from reading it until the scope has ended.
    pub fn lend_mut(&'scope self, slice: &'env mut [u8]) -> HostSpan {
        // SAFETY: as in `lend`; the exclusive borrow lasts for 'env, so nothing
        // else reads or writes the slice before the work is waited for.
        unsafe { HostSpan::new(slice.as_mut_ptr(), slice.len()) }
    }
}

/// Runs `body` with a [`LendScope`] holding `context`, then runs `wait` (which
/// must block until all work that may use the lent spans has completed) before
/// returning, also if `body` panics.
///
/// Returns `body`'s value, or the error of `wait`.
pub fn lend_scope<'env, C, W, F, T>(context: C, wait: W, body: F) -> Result<T>
where
    W: FnMut() -> Result<()>,
    F: for<'scope> FnOnce(&'scope LendScope<'scope, 'env, C>) -> T,
{
    struct WaitOnDrop<W: FnMut() -> Result<()>> {
        wait: W,
        done: bool,
    }
    impl<W: FnMut() -> Result<()>> Drop for WaitOnDrop<W> {
        fn drop(&mut self) {
            if !self.done {
                // Unwinding: we still must not let the borrows end before the
                // device is done with them.
                if let Err(e) = (self.wait)() {
                    tracing::error!(target: "hipmem", "waiting for lent host memory failed while unwinding: {e}");
                }
            }
        }
    }
    let mut guard = WaitOnDrop { wait, done: false };
    let scope = LendScope { context, _scope: PhantomData, _env: PhantomData };
    let value = body(&scope);
    guard.done = true;
    (guard.wait)()?;
    Ok(value)
}
