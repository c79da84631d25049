//! hipmem: HIP's GPU memory-management model in Rust.
//!
//! Layers, bottom up:
//! - [`backend`]: one trait of raw operations with no policy, and its
//!   implementations (`host`, a CPU emulation; `cuda`, the CUDA driver).
//! - [`runtime`]: registries (devices, every live allocation) and the checks
//!   HIP's API makes, on top of a backend.
//! - the safe API ([`Device`], [`Stream`], [`Event`], [`DeviceBuffer`]) that
//!   Rust users write against.
#![warn(missing_docs)]

pub mod backend;
pub mod error;

pub use error::{Error, Result};
