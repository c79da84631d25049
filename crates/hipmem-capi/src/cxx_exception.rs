//! Raising a C++ exception from a C entry point, for a caller that learns of
//! failures only by exceptions: PyTorch's pluggable allocator takes whatever
//! its `malloc` function returns, and a null becomes a tensor without memory
//! (a kernel that writes it faults, and the CUDA context is lost). An
//! exception thrown there becomes a Python exception instead.
//!
//! The C++ runtime is the one already loaded in the process (libstdc++:
//! PyTorch links it), found at run time, so building hipmem needs no C++
//! compiler; in a process without it nothing is thrown. The exception is a
//! `std::runtime_error` with hipmem's message: thrown by `__cxa_throw` on
//! an object made by `__cxa_allocate_exception` and the class's own
//! constructor, as a C++ `throw std::runtime_error(message)` does.

use std::ffi::{CStr, CString, c_char, c_void};
use std::sync::OnceLock;

/// The C++ runtime's functions and the class data a throw needs.
struct Runtime {
    allocate_exception: unsafe extern "C" fn(usize) -> *mut c_void,
    /// `std::runtime_error::runtime_error(const char*)` (it may throw
    /// `std::bad_alloc`, which then propagates instead).
    construct: unsafe extern "C-unwind" fn(*mut c_void, *const c_char),
    /// `std::runtime_error::~runtime_error()`, which the runtime calls when
    /// the exception is done with.
    destroy: unsafe extern "C" fn(*mut c_void),
    throw: unsafe extern "C-unwind" fn(*mut c_void, *const c_void, unsafe extern "C" fn(*mut c_void)) -> !,
    /// `typeid(std::runtime_error)`.
    type_info: *const c_void,
}

// SAFETY: the fields are addresses of functions and data of a shared library
// that stays loaded for the process's life (it was loaded before hipmem
// found it, and the handle is never closed); any thread may use them.
unsafe impl Send for Runtime {}
// SAFETY: as above; nothing is written through them here.
unsafe impl Sync for Runtime {}

/// `sizeof(std::runtime_error)` in libstdc++ is 16 bytes on 64-bit targets
/// (a vtable pointer and the message's pointer); the exception object gets
/// room for more, which costs nothing.
const OBJECT_BYTES: usize = 64;

/// The C++ runtime loaded in this process, if any (looked up once).
fn runtime() -> Option<&'static Runtime> {
    static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();
    RUNTIME.get_or_init(find).as_ref()
}

/// Whether a C++ exception can be thrown in this process.
pub(crate) fn available() -> bool {
    runtime().is_some()
}

fn find() -> Option<Runtime> {
    // SAFETY: dlopen with RTLD_NOLOAD only returns a handle to a library
    // already loaded (none is loaded or initialized here); the name is a
    // NUL-terminated string.
    let handle = unsafe { libc::dlopen(c"libstdc++.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
    if handle.is_null() {
        return None;
    }
    let symbol = |name: &CStr| {
        // SAFETY: a valid handle and a NUL-terminated name; the address is
        // only used as the item the name denotes (Itanium C++ ABI names).
        let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    let allocate_exception = symbol(c"__cxa_allocate_exception")?;
    let throw = symbol(c"__cxa_throw")?;
    let construct = symbol(c"_ZNSt13runtime_errorC1EPKc")?;
    let destroy = symbol(c"_ZNSt13runtime_errorD1Ev")?;
    let type_info = symbol(c"_ZTISt13runtime_error")?;
    // SAFETY: each address is the function the Itanium C++ ABI name denotes,
    // with the signature written in `Runtime` (the ABI's `__cxa_*`
    // functions, and the constructor and destructor of std::runtime_error,
    // which take `this` first).
    unsafe {
        Some(Runtime {
            allocate_exception: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(usize) -> *mut c_void>(
                allocate_exception,
            ),
            construct: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C-unwind" fn(*mut c_void, *const c_char),
            >(construct),
            destroy: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut c_void)>(destroy),
            throw: std::mem::transmute::<
                *mut c_void,
                unsafe extern "C-unwind" fn(
                    *mut c_void,
                    *const c_void,
                    unsafe extern "C" fn(*mut c_void),
                ) -> !,
            >(throw),
            type_info: type_info.cast_const(),
        })
    }
}

/// Throws `std::runtime_error(message)` into the C++ code that called the
/// current entry point; returns only if this process has no C++ runtime.
///
/// # Safety
/// Every frame between here and the C++ code that catches the exception
/// must allow unwinding: the calling entry point is `extern "C-unwind"` and
/// calls this outside `catch_unwind`, and its caller is C++ that expects
/// exceptions (PyTorch). Locals of the entry point are dropped as the
/// exception passes.
pub(crate) unsafe fn throw_runtime_error(message: &str) {
    let Some(rt) = runtime() else { return };
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    // SAFETY: the C++ runtime's own allocation for an exception object of
    // OBJECT_BYTES (at least the class's size); it aborts rather than
    // return null.
    let object = unsafe { (rt.allocate_exception)(OBJECT_BYTES) };
    // SAFETY: `object` is uninitialized storage of sufficient size and
    // alignment for the class (the runtime aligns exception objects for any
    // type); the constructor copies the NUL-terminated text.
    unsafe { (rt.construct)(object, text.as_ptr()) };
    drop(text);
    // SAFETY: a constructed std::runtime_error with its type_info and
    // destructor, thrown as `throw std::runtime_error(...)` would (see the
    // function's contract for the frames it unwinds).
    unsafe { (rt.throw)(object, rt.type_info, rt.destroy) }
}
