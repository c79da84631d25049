//! hipmem: HIP's GPU memory-management model in Rust.
//!
//! Layers, bottom up:
//! - [`backend`]: one trait of raw operations with no policy, and its
//!   implementations (`host`, a CPU emulation; `cuda`, the CUDA driver).
//! - [`runtime`]: registries (devices, every live allocation) and the checks
//!   HIP's API makes, on top of a backend.
//! - the safe API ([`Device`], [`Stream`], [`Event`], [`DeviceBuffer`]) that
//!   Rust users write against.
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

pub mod backend;
pub mod buffer;
pub mod device;
mod device_ext;
pub mod error;
pub mod event;
pub mod ipc;
pub mod managed;
pub mod pinned;
pub mod pool;
pub mod runtime;
pub mod stream;
pub mod vmm;

pub use backend::device_info::{DeviceAttribute, PriorityRange};
pub use backend::{
    BackendChoice, BackendKind, DeviceCapabilities, DeviceProperties, DevicePtr, EventFlags, FillValue,
    HostSpan, MemInfo, StreamFlags,
};
pub use buffer::{DeviceBuffer, DeviceSlice};
pub use bytemuck;
pub use device::Device;
pub use error::{Error, Result};
pub use event::Event;
pub use ipc::{IpcListener, IpcStream, PeerCredentials, PeerPolicy};
pub use managed::{Advice, AttachFlags, Location, ManagedBuffer, ManagedStatistics, RangeAttribute};
pub use pinned::{HostRegistration, MappedSlice, PageLockedSlice, PinnedBuffer, PinnedPool, PinnedPoolStats};
pub use pool::{
    AccessFlags, ImportedBuffer, MemPool, PoolAttribute, PoolBacking, PoolBuffer, PoolProps, PoolStats,
    PtrExportData,
};
pub use runtime::{MemcpyKind, MemoryType, PointerAttributes, Runtime};
pub use stream::{AsyncScope, FillElement, Stream};
pub use vmm::{
    AccessDesc, AddressReservation, AllocationProp, GrowableBuffer, MappedView, Mapping, MemLocation,
    PhysicalAllocation,
};
