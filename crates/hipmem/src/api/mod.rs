//! The safe API: what Rust users write against, on top of the runtime core
//! and every subsystem.
//!
//! - [`Stream`] (`stream.rs`): the core's stream with the typed operations
//!   (built-in kernels on buffers, memsets and copies between buffers,
//!   borrow-checked asynchronous host copies in [`Stream::scope`]);
//! - [`Event`] (`event.rs`): markers recorded in streams, for waiting,
//!   querying and timing;
//! - [`DeviceBuffer<T>`] (`buffer.rs`): typed `hipMalloc` memory, freed in `Drop`;
//! - what it adds to [`Device`](crate::Device) (`device.rs`): streams,
//!   events and buffers;
//! - the functions that span subsystems: `hipFree` and `hipFreeAsync` of
//!   any pointer (`free.rs`), `hipDeviceReset` (`reset.rs`).
//!
//! Everything owned frees itself in `Drop`; errors there are recorded in the
//! runtime ([`crate::Runtime::take_drop_errors`]) and logged, never panicked.
#![forbid(unsafe_code)]

mod buffer;
mod device;
mod event;
mod free;
mod reset;
mod stream;

pub use buffer::DeviceBuffer;
pub use event::Event;
pub use stream::{AsyncScope, FillElement, Stream};
