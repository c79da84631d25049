//! Stream-ordered allocation from memory pools (`hipMallocAsync` and friends).
//!
//! - [`MemPool`] (`mem_pool.rs`): a pool of one device, of any kind:
//!   hipmem's own, the driver's (`driver_pool.rs`), or imported from another
//!   process (`imported.rs`, made by the `ipc` subsystem); the device's
//!   default and current pool (`Device::default_mem_pool`,
//!   `Device::mem_pool`, `Device::set_mem_pool`, `table.rs`).
//! - [`PoolBuffer<T>`] (`buffer.rs`): memory from a pool, freed in stream
//!   order when dropped.
//!
//! hipmem's own allocator, file by file:
//! - `core.rs`: the pool's state and the fast paths of allocation and free;
//! - `stream_cache.rs`: each stream's front (its cache of freed blocks, its
//!   live blocks), reached without any shared lock (`addr_hash.rs`: the
//!   hash of its maps and the planner's);
//! - `reuse.rs`: **the reuse rules**, what an allocation that missed its
//!   stream's cache may take, in order;
//! - `placement.rs`: best-fit placement, splitting, coalescing
//!   (`free_index.rs`: the ordered index of free blocks best fit searches);
//! - `plan/` (`learn.rs`: finding a period; `layout.rs`: building and laying
//!   out a plan; `mod.rs`: running it) and `planned.rs` (the pool's side):
//!   learned layouts (a sequence that repeats gets an offline plan: each
//!   block's place decided knowing its lifetime);
//! - `backing/`: getting memory from the backend and giving it back
//!   (segments, or granules mapped into one reserved range, each at one
//!   active address and maybe more shadowed ones): `mod.rs` (the choice,
//!   the growth thresholds, the pool's mapping settings), `range.rs` (the
//!   range's bookkeeping), `grow.rs` (growing), `give_back.rs` (releasing);
//! - `deferred.rs`: physical memory given back on a worker thread (what
//!   idle release and a large growth unmap on the allocation path);
//! - `remap.rs`: where a growing virtual pool maps its granules (the run
//!   with the fewest driver calls, the plan for new mappings);
//! - `release.rs`: synchronization, release threshold, trim, retiring
//!   streams, destroying pools;
//! - `stats.rs`, `usage.rs`: statistics (used bytes without a shared counter)
//!   and attributes;
//! - `sharing.rs`: what interprocess sharing needs to know of a pool;
//! - `peer_access.rs`: what another device's work may do with pool memory.
//!
//! The pool subsystem sits on the runtime core: it keeps its table in the
//! runtime as an extension and hears of synchronizations and retiring
//! streams through the core's hooks. It takes the core's streams
//! ([`CoreStream`](crate::runtime::CoreStream); a `Stream` dereferences to
//! one). All of it is safe Rust.
#![forbid(unsafe_code)]

mod addr_hash;
pub use addr_hash::{AddrHasher, AddrMap};
mod backing;
mod buffer;
pub(crate) mod core;
mod deferred;
pub(crate) mod driver_pool;
mod free;
mod free_index;
pub(crate) mod imported;
pub mod layout;
mod lend;
pub(crate) mod mem_pool;
mod peer_access;
pub mod placement;
pub(crate) mod plan;
mod planned;
mod props;
mod release;
mod remap;
mod reuse;
pub(crate) mod sharing;
mod stats;
pub mod stream_cache;
pub(crate) mod table;
pub mod usage;
pub mod zone;

pub use crate::backend::virtual_memory::AccessFlags;
pub use backing::MoveBudget;
pub use buffer::PoolBuffer;
pub use mem_pool::MemPool;
pub use props::{
    BackendCalls, PlanCounts, PoolAttribute, PoolBacking, PoolProps, PoolStats, PtrExportData, handle_type,
};
