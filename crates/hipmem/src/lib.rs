//! hipmem: HIP's GPU memory-management model in Rust.
//!
//! Layers, bottom up (imports only point down):
//! - [`backend`]: one trait of raw operations with no policy, and its
//!   implementations (`host`, a CPU emulation; `cuda`, the CUDA driver).
//!   All `unsafe` code of the library lives here.
//! - [`runtime`]: the core: devices, the registry of every live
//!   allocation, streams' ordering clocks, marker events, HIP's explicit
//!   memory and copies with HIP's argument rules; hooks and per-runtime
//!   state for the subsystems, which it does not know.
//! - the subsystems: [`pool`] (stream-ordered allocation), [`vmm`] (virtual
//!   memory), [`pinned`] (page-locked host memory), [`managed`] (managed
//!   memory), [`ipc`] (interprocess sharing of pools and memory).
//! - [`api`]: the safe API ([`Device`]'s streams and buffers, [`Stream`],
//!   [`Event`], [`DeviceBuffer`]) and the functions that span subsystems
//!   (`hipFree`, `hipFreeAsync` of any pointer).
//!
//! ```no_run
//! # fn main() -> hipmem::Result<()> {
//! let device = hipmem::Device::get(0)?;          // backend from HIPMEM_BACKEND
//! let stream = device.create_stream()?;
//! let buf = device.alloc::<i32>(1 << 20)?;       // hipMalloc
//! stream.iota(&buf, 2)?;                          // data[i] = i * 2
//! stream.synchronize()?;
//! assert_eq!(buf.to_vec()?[21], 42);              // hipMemcpy DeviceToHost
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

pub mod api;
pub mod backend;
pub mod error;
pub mod ipc;
pub mod managed;
pub mod pinned;
pub mod pool;
pub mod runtime;
pub mod trace;
pub mod vmm;

pub use api::{AsyncScope, DeviceBuffer, Event, FillElement, Stream};
pub use backend::device_info::{DeviceAttribute, PriorityRange};
pub use backend::{
    BackendChoice, BackendKind, DeviceCapabilities, DeviceProperties, DevicePtr, EventFlags, FillValue,
    HostSpan, MemInfo, StreamFlags,
};
pub use bytemuck;
pub use error::{Error, Result};
pub use ipc::{ImportedBuffer, IpcListener, IpcStream, PeerCredentials, PeerPolicy};
pub use managed::{Advice, AttachFlags, Location, ManagedBuffer, ManagedStatistics, RangeAttribute};
pub use pinned::{HostRegistration, MappedSlice, PageLockedSlice, PinnedBuffer, PinnedPool, PinnedPoolStats};
pub use pool::{
    AccessFlags, MemPool, MoveBudget, PoolAttribute, PoolBacking, PoolBuffer, PoolProps, PoolStats,
    PtrExportData,
};
pub use runtime::{CoreStream, Device, DeviceSlice, MemcpyKind, MemoryType, PointerAttributes, Runtime};
pub use vmm::{
    AccessDesc, AddressReservation, AllocationProp, GrowableBuffer, MappedView, Mapping, MemLocation,
    PhysicalAllocation,
};
