//! The CUDA driver calls the suite makes itself, loaded at run time as
//! PyTorch's or the CUDA runtime's would be: streams hipmem did not create
//! (`foreign_streams`) and the context a caller keeps current on its thread
//! (`caller_context`). Used only where the backend is cuda.

use std::ffi::{c_int, c_uint, c_void};

type Ctx = *mut c_void;

/// A `CUcontext` as the tests hold it: a primary context the driver gave, or
/// none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context(Ctx);

impl Context {
    /// No context.
    pub const NONE: Context = Context(std::ptr::null_mut());

    /// Whether this is no context.
    pub fn is_none(self) -> bool {
        self.0.is_null()
    }
}

// SAFETY: a context handle is an opaque token the driver takes from any thread.
unsafe impl Send for Context {}
type CuStream = *mut c_void;

/// The driver entry points the tests call.
pub struct Driver {
    _lib: libloading::Library,
    retain: unsafe extern "C" fn(*mut Ctx, c_int) -> u32,
    get_current: unsafe extern "C" fn(*mut Ctx) -> u32,
    set_current: unsafe extern "C" fn(Ctx) -> u32,
    create: unsafe extern "C" fn(*mut CuStream, c_uint) -> u32,
    destroy: unsafe extern "C" fn(CuStream) -> u32,
}

impl Driver {
    /// libcuda.so.1's entry points.
    pub fn open() -> Driver {
        // SAFETY: loading libcuda runs its initializers, which have no
        // preconditions; the symbols are looked up with the signatures
        // cuda.h declares for them.
        unsafe {
            let lib = libloading::Library::new("libcuda.so.1").expect("libcuda.so.1");
            let retain = *lib.get(b"cuDevicePrimaryCtxRetain\0").expect("cuDevicePrimaryCtxRetain");
            let get_current = *lib.get(b"cuCtxGetCurrent\0").expect("cuCtxGetCurrent");
            let set_current = *lib.get(b"cuCtxSetCurrent\0").expect("cuCtxSetCurrent");
            let create = *lib.get(b"cuStreamCreate\0").expect("cuStreamCreate");
            let destroy = *lib.get(b"cuStreamDestroy_v2\0").expect("cuStreamDestroy_v2");
            Driver { _lib: lib, retain, get_current, set_current, create, destroy }
        }
    }

    /// `device`'s primary context (retained once more; the runtime already
    /// initialized the driver and retains it too).
    pub fn primary_context(&self, device: usize) -> Context {
        let mut ctx: Ctx = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { (self.retain)(&mut ctx, device as c_int) }, 0, "cuDevicePrimaryCtxRetain");
        Context(ctx)
    }

    /// The calling thread's current context (null: none).
    pub fn current(&self) -> Context {
        let mut ctx: Ctx = std::ptr::null_mut();
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { (self.get_current)(&mut ctx) }, 0, "cuCtxGetCurrent");
        Context(ctx)
    }

    /// Makes `ctx` current on the calling thread (none: no context).
    pub fn set_current(&self, ctx: Context) {
        // SAFETY: a `Context` is a retained primary context or null.
        assert_eq!(unsafe { (self.set_current)(ctx.0) }, 0, "cuCtxSetCurrent");
    }

    /// A stream of `device`'s primary context, made by the driver (which
    /// leaves that context current on the calling thread).
    pub fn create_stream(&self, device: usize, flags: u32) -> u64 {
        self.set_current(self.primary_context(device));
        let mut s: CuStream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        assert_eq!(unsafe { (self.create)(&mut s, flags) }, 0, "cuStreamCreate");
        s as u64
    }

    /// Destroys a stream [`Driver::create_stream`] made.
    pub fn destroy_stream(&self, s: u64) {
        // SAFETY: a stream this driver created and nobody destroyed.
        assert_eq!(unsafe { (self.destroy)(s as CuStream) }, 0, "cuStreamDestroy");
    }
}
