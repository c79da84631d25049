//! [`MemPool`]: the handle of a memory pool (`hipMemPool_t`) of any kind:
//! hipmem's own (`core.rs` and its neighbours), the driver's
//! (`driver_pool.rs`), or one imported from another process (made by the
//! `ipc` subsystem, seen here through the [`ImportedPool`] trait).
#![forbid(unsafe_code)]

use std::sync::Arc;

use bytemuck::Pod;

use super::buffer::PoolBuffer;
use super::core::{PoolCore, StreamRef};
use super::driver_pool::DriverPool;
use super::imported::ImportedPool;
use super::table::{check_own_stream, table};
use super::{
    AccessFlags, BackendCalls, MoveBudget, PoolAttribute, PoolBacking, PoolProps, PoolStats, handle_type,
};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::runtime::{CoreStream, Runtime};

/// Which kind of pool a handle is.
#[derive(Clone, Debug)]
pub(crate) enum PoolRef {
    /// hipmem's own pool.
    Hipmem(Arc<PoolCore>),
    /// The driver's pool.
    Driver(Arc<DriverPool>),
    /// A hipmem pool imported from another process.
    Imported(Arc<dyn ImportedPool>),
}

impl PoolRef {
    pub(crate) fn id(&self) -> u64 {
        match self {
            PoolRef::Hipmem(c) => c.id,
            PoolRef::Driver(d) => d.id,
            PoolRef::Imported(i) => i.id(),
        }
    }

    pub(crate) fn device(&self) -> usize {
        match self {
            PoolRef::Hipmem(c) => c.device,
            PoolRef::Driver(d) => d.raw.device,
            PoolRef::Imported(i) => i.device(),
        }
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        match self {
            PoolRef::Hipmem(c) => c.is_destroyed(),
            PoolRef::Driver(d) => d.is_destroyed(),
            PoolRef::Imported(i) => i.is_destroyed(),
        }
    }

    pub(crate) fn same(&self, other: &PoolRef) -> bool {
        match (self, other) {
            (PoolRef::Hipmem(a), PoolRef::Hipmem(b)) => Arc::ptr_eq(a, b),
            (PoolRef::Driver(a), PoolRef::Driver(b)) => Arc::ptr_eq(a, b),
            (PoolRef::Imported(a), PoolRef::Imported(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Allocates in stream order.
    pub(crate) fn alloc(&self, size: u64, stream: &CoreStream) -> Result<DevicePtr> {
        match self {
            PoolRef::Hipmem(c) => c.alloc(size, &StreamRef::of(stream)),
            PoolRef::Driver(d) => d.alloc(size, stream.raw()),
            PoolRef::Imported(_) => Err(imported_cannot_allocate()),
        }
    }

    /// Frees in stream order.
    pub(crate) fn free(&self, ptr: DevicePtr, stream: &CoreStream) -> Result<()> {
        if ptr.is_null() {
            return Ok(());
        }
        match self {
            PoolRef::Hipmem(core) => {
                if core.free(ptr, &StreamRef::of(stream)) {
                    Ok(())
                } else {
                    Err(Error::InvalidValue(format!("{ptr} is not a live allocation of pool {:#x}", core.id)))
                }
            }
            PoolRef::Driver(d) => d.free(ptr, stream.raw()),
            PoolRef::Imported(i) => {
                // Unmapping waits for the work queued before it on the stream.
                stream.synchronize()?;
                i.free_pointer(ptr)
            }
        }
    }
}

fn imported_cannot_allocate() -> Error {
    Error::InvalidValue("an imported memory pool cannot allocate".into())
}

/// Destroys a created pool when its last handle goes.
pub(crate) struct PoolOwner {
    pool: PoolRef,
    rt: Runtime,
}

impl Drop for PoolOwner {
    fn drop(&mut self) {
        table(&self.rt).destroy(&self.pool);
    }
}

/// A memory pool (`hipMemPool_t`). Clones are the same pool. A pool made with
/// [`MemPool::create`] (hipmem's own) or [`MemPool::create_driver`] (the
/// driver's, on cuda) is destroyed when its last handle is dropped or by
/// [`MemPool::destroy`]; allocations still live stay valid and may be freed
/// later. A default pool is never destroyed.
#[derive(Clone)]
pub struct MemPool {
    pub(crate) pool: PoolRef,
    pub(crate) owner: Option<Arc<PoolOwner>>,
    pub(crate) rt: Runtime,
}

impl std::fmt::Debug for MemPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPool")
            .field("id", &self.pool.id())
            .field("device", &self.pool.device())
            .field("driver", &self.is_driver_pool())
            .field("default", &self.is_default())
            .finish()
    }
}

impl PartialEq for MemPool {
    fn eq(&self, other: &Self) -> bool {
        self.pool.same(&other.pool)
    }
}

fn check_props(rt: &Runtime, props: &PoolProps) -> Result<()> {
    rt.check_device(props.device).map_err(|e| Error::InvalidValue(e.message().to_string()))?;
    let known = handle_type::POSIX_FILE_DESCRIPTOR | handle_type::WIN32 | handle_type::WIN32_KMT;
    if props.handle_types & !known != 0 {
        return Err(Error::InvalidValue(format!("unknown handle type bits {:#x}", props.handle_types)));
    }
    if props.handle_types & (handle_type::WIN32 | handle_type::WIN32_KMT) != 0 {
        return Err(Error::NotSupported("Win32 handle types do not exist on Linux".into()));
    }
    Ok(())
}

impl MemPool {
    /// `hipMemPoolCreate`: a new hipmem pool on `props.device`.
    ///
    /// A pool created shareable (`handle_types` with
    /// [`handle_type::POSIX_FILE_DESCRIPTOR`]) is always on virtual memory
    /// (its chunks are exportable physical memory): NotSupported on a
    /// backend without virtual memory.
    pub fn create(rt: &Runtime, props: PoolProps) -> Result<MemPool> {
        check_props(rt, &props)?;
        let backing = shareable(&props).then_some(PoolBacking::VirtualMemory);
        let core = table(rt).create(rt, props, false, backing);
        if backing.is_some() && core.backing() != PoolBacking::VirtualMemory {
            return Err(Error::NotSupported(format!(
                "device {} has no virtual memory management: a shareable pool cannot be created",
                props.device
            )));
        }
        Ok(MemPool::owned(rt, PoolRef::Hipmem(core)))
    }

    /// Like [`MemPool::create`], with the backing chosen (virtual memory falls
    /// back to segments where the backend has none).
    /// A shareable pool needs virtual memory: with segments it is NotSupported.
    pub fn create_with_backing(rt: &Runtime, props: PoolProps, backing: PoolBacking) -> Result<MemPool> {
        check_props(rt, &props)?;
        if shareable(&props) {
            if backing == PoolBacking::Segments {
                return Err(Error::NotSupported(
                    "a shareable pool is backed by virtual memory, not segments".into(),
                ));
            }
            return MemPool::create(rt, props);
        }
        let core = table(rt).create(rt, props, false, Some(backing));
        Ok(MemPool::owned(rt, PoolRef::Hipmem(core)))
    }

    /// How the pool gets memory (driver pools: segments of the driver's own).
    pub fn backing(&self) -> PoolBacking {
        match &self.pool {
            PoolRef::Hipmem(c) => c.backing(),
            PoolRef::Driver(_) => PoolBacking::Segments,
            PoolRef::Imported(_) => PoolBacking::VirtualMemory,
        }
    }

    /// A new pool of the driver's own kind (`cuMemPoolCreate`), behind the same
    /// API; NotSupported on backends without driver pools.
    pub fn create_driver(rt: &Runtime, props: PoolProps) -> Result<MemPool> {
        check_props(rt, &props)?;
        let raw = rt.backend().driver_pool_create(props.device, props.handle_types, props.max_size)?;
        let pool = table(rt).add_driver(rt, raw, props, true);
        Ok(MemPool::owned(rt, PoolRef::Driver(pool)))
    }

    /// The driver's default pool of `device` (`cuDeviceGetDefaultMemPool`),
    /// for code that shares memory with users of the driver's pools.
    pub fn driver_default(rt: &Runtime, device: usize) -> Result<MemPool> {
        rt.check_device(device)?;
        let pool = table(rt).driver_default(rt, device)?;
        Ok(MemPool { pool: PoolRef::Driver(pool), owner: None, rt: rt.clone() })
    }

    pub(crate) fn owned(rt: &Runtime, pool: PoolRef) -> MemPool {
        let owner = Arc::new(PoolOwner { pool: pool.clone(), rt: rt.clone() });
        MemPool { pool, owner: Some(owner), rt: rt.clone() }
    }

    /// `hipMemPoolDestroy`: destroys the pool now. A default pool, or a pool
    /// destroyed already, is InvalidValue. Live allocations stay valid.
    pub fn destroy(self) -> Result<()> {
        if self.is_default() {
            return Err(Error::InvalidValue("a default memory pool cannot be destroyed".into()));
        }
        if self.pool.is_destroyed() {
            return Err(Error::InvalidValue(format!(
                "memory pool {:#x} was already destroyed",
                self.pool.id()
            )));
        }
        table(&self.rt).destroy(&self.pool);
        Ok(())
    }

    /// A process-unique id.
    pub fn id(&self) -> u64 {
        self.pool.id()
    }

    /// The device ordinal.
    pub fn device(&self) -> usize {
        self.pool.device()
    }

    /// The properties it was created with.
    pub fn props(&self) -> PoolProps {
        match &self.pool {
            PoolRef::Hipmem(c) => c.props,
            PoolRef::Driver(d) => d.props,
            PoolRef::Imported(i) => i.props(),
        }
    }

    /// Whether this is a device's default pool.
    pub fn is_default(&self) -> bool {
        match &self.pool {
            PoolRef::Hipmem(c) => c.is_default,
            PoolRef::Driver(d) => !d.owned,
            PoolRef::Imported(_) => false,
        }
    }

    /// Whether this is a pool of the driver's own kind.
    pub fn is_driver_pool(&self) -> bool {
        matches!(self.pool, PoolRef::Driver(_))
    }

    /// Whether the pool was destroyed.
    pub fn is_destroyed(&self) -> bool {
        self.pool.is_destroyed()
    }

    /// `hipMallocFromPoolAsync`: `size` bytes usable by work queued on `stream`
    /// after this call (size 0 gives the null pointer).
    pub fn alloc_raw(&self, size: u64, stream: &CoreStream) -> Result<DevicePtr> {
        if size == 0 {
            return Ok(DevicePtr::NULL);
        }
        self.check_stream(stream)?;
        self.pool.alloc(size, stream)
    }

    /// Typed memory for `len` elements, freed in `stream`'s order when dropped.
    pub fn alloc<T: Pod>(&self, len: usize, stream: &CoreStream) -> Result<PoolBuffer<T>> {
        let bytes = (len as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| Error::OutOfMemory(format!("{len} elements overflow the address space")))?;
        let ptr = self.alloc_raw(bytes, stream)?;
        Ok(PoolBuffer::new(self.pool.clone(), ptr, len, stream.clone()))
    }

    fn check_stream(&self, stream: &CoreStream) -> Result<()> {
        if stream.device() != self.pool.device() {
            return Err(Error::InvalidValue(format!(
                "the pool is on device {}, the stream on device {}",
                self.pool.device(),
                stream.device()
            )));
        }
        check_own_stream(&self.rt, stream)
    }

    /// `hipMemPoolGetAttribute` (a driver pool's error reads as 0).
    pub fn attribute(&self, attr: PoolAttribute) -> u64 {
        self.try_attribute(attr).unwrap_or(0)
    }

    /// `hipMemPoolGetAttribute`, with the driver's error if it fails.
    pub fn try_attribute(&self, attr: PoolAttribute) -> Result<u64> {
        match &self.pool {
            PoolRef::Hipmem(c) => Ok(c.get_attribute(attr)),
            PoolRef::Driver(d) => d.get_attribute(attr),
            PoolRef::Imported(i) => Ok(match attr {
                PoolAttribute::ReservedMemCurrent | PoolAttribute::ReservedMemHigh => i.mapped_bytes(),
                PoolAttribute::UsedMemCurrent | PoolAttribute::UsedMemHigh => i.imported_bytes(),
                _ => 0,
            }),
        }
    }

    /// `hipMemPoolSetAttribute`: read-only statistics, or a High statistic set
    /// to anything but 0, are InvalidValue.
    pub fn set_attribute(&self, attr: PoolAttribute, value: u64) -> Result<()> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.set_attribute(attr, value),
            PoolRef::Driver(d) => d.set_attribute(attr, value),
            PoolRef::Imported(_) => {
                Err(Error::InvalidValue("the attributes of an imported pool belong to its exporter".into()))
            }
        }
    }

    /// hipmem's own pool behind this handle; InvalidValue ("only hipmem's
    /// own pools `what`") for the driver's pools and imported ones.
    pub(super) fn own(&self, what: &str) -> Result<&PoolCore> {
        match &self.pool {
            PoolRef::Hipmem(c) => Ok(c),
            PoolRef::Driver(_) | PoolRef::Imported(_) => {
                Err(Error::InvalidValue(format!("only hipmem's own pools {what}")))
            }
        }
    }

    /// The four statistics at once (zeros if a driver pool cannot be read).
    pub fn stats(&self) -> PoolStats {
        match &self.pool {
            PoolRef::Hipmem(c) => c.stats(),
            PoolRef::Driver(d) => d.stats().unwrap_or_default(),
            PoolRef::Imported(i) => PoolStats {
                reserved_current: i.mapped_bytes(),
                reserved_high: i.mapped_bytes(),
                used_current: i.imported_bytes(),
                used_high: i.imported_bytes(),
            },
        }
    }

    /// What a hipmem pool has asked of the backend since it was created
    /// (allocations, granules created and released, maps and unmaps); None
    /// for the driver's pools and imported ones, whose calls are not
    /// hipmem's.
    pub fn backend_calls(&self) -> Option<BackendCalls> {
        match &self.pool {
            PoolRef::Hipmem(c) => Some(c.calls.snapshot()),
            PoolRef::Driver(_) | PoolRef::Imported(_) => None,
        }
    }

    /// How many times a hipmem pool has blocked the calling thread until a
    /// stream's queued work was done, on its own initiative, so that the
    /// memory of that stream's pending frees could go back first: a large
    /// growth that could take the pool past its high watermark
    /// (`pool/release.rs`; with zone placement any such growth), and a
    /// plan's start, for every stream (`pool/planned.rs`). The host waits
    /// there, and the device idles until work is queued again. Stream and
    /// device synchronizations the caller asks for are not counted. None
    /// for the driver's pools and imported ones.
    pub fn host_waits(&self) -> Option<u64> {
        match &self.pool {
            PoolRef::Hipmem(c) => Some(c.calls.host_waits()),
            PoolRef::Driver(_) | PoolRef::Imported(_) => None,
        }
    }

    /// A hipmem pool on virtual memory: the size of its physical units (a
    /// multiple of the driver's mapping granularity), the step in which it
    /// maps, moves and releases memory. None for other pools.
    pub fn mapping_unit(&self) -> Option<u64> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.mapping_unit(),
            PoolRef::Driver(_) | PoolRef::Imported(_) => None,
        }
    }

    /// Sets the physical unit of a hipmem pool on virtual memory (see
    /// [`MemPool::mapping_unit`]) before it maps any memory: 1 to 64 times
    /// the driver's granularity. Smaller units follow live memory more
    /// closely and release more exactly; larger ones make fewer driver calls
    /// when memory moves. InvalidValue for another size, another kind of
    /// pool, or a pool that has mapped memory.
    pub fn set_mapping_unit(&self, bytes: u64) -> Result<()> {
        self.own("have a mapping unit")?.set_mapping_unit(bytes)
    }

    /// A hipmem pool on virtual memory: the size of each size class's part
    /// of its addresses (blocks under 1 MiB, under 64 MiB and larger each
    /// have one), as set or as reserved at its first growth. None for other
    /// pools, and before the first growth where nothing was set.
    pub fn address_part(&self) -> Option<u64> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.address_part(),
            PoolRef::Driver(_) | PoolRef::Imported(_) => None,
        }
    }

    /// Sets each size class's part of a hipmem pool's addresses on virtual
    /// memory before it maps any memory: a nonzero multiple of its mapping
    /// unit. By default a part is four times the device's memory, halved
    /// where the device's addresses run short (down to a quarter of the
    /// device, at least 1 GiB). Smaller parts leave addresses to the rest of
    /// the process. A request with no hole for it in its part goes to
    /// another part, and where no part has room, to an address range of its
    /// own (at most 16 more ranges; none for a pool shared between
    /// processes). InvalidValue for another size, another kind of pool, or a
    /// pool that has reserved its addresses.
    pub fn set_address_part(&self, bytes: u64) -> Result<()> {
        self.own("reserve addresses")?.set_address_part(bytes)
    }

    /// Sets whether a hipmem pool on virtual memory keeps its tiny blocks
    /// (16 KiB or less) apart, before it maps any memory. On by default
    /// since stop 78 (`HIPMEM_POOL_TINY_APART=0` turns it off for new
    /// pools). Where the pool keeps one heap for every size (its default
    /// move budget, [`MoveBudget::GROW_FIRST`]), tiny blocks then take a
    /// part of the pool's addresses of their own, and each stream's freed
    /// tiny blocks a cache of their own (up to 256), which a request of
    /// another size does not send back to the heap: the stream's next
    /// request of a cached size takes it with no search. A tiny block taken
    /// from that cache sends the stream's larger cached blocks back to the
    /// heap, as the request would have as a miss without it, so that the
    /// larger blocks land where they would without the cache. The other
    /// reuse rules stay: a cached block serves its own stream only; a trim,
    /// the release threshold, idle release and a retiring stream send the
    /// cache back first.
    ///
    /// It makes PyTorch's allocations cheaper where many are tiny: on
    /// variable-length inference about 30% of them are, and an allocation
    /// and its free took 23% fewer instructions (3 646 against 4 746). On
    /// an H200, in one process taking turns with PyTorch's allocator, its
    /// step time was 1.005x PyTorch's (median of seven rounds) against 1.021x
    /// with tiny blocks in one heap (twelve rounds). What the pool holds
    /// moves, up or down, by where large blocks land without tiny ones
    /// between them; over the 27 variable-length recordings replayed with
    /// idle release the mean peak ratio fell (docs/pool-measurements.md,
    /// "Stop 74" and "Stop 78"). InvalidValue on other pools, or once the
    /// pool has mapped memory.
    pub fn set_tiny_blocks_apart(&self, on: bool) -> Result<()> {
        self.own("keep blocks apart")?.set_tiny_apart(on)
    }

    /// A hipmem pool on virtual memory: whether it keeps (or will keep) its
    /// tiny blocks apart ([`MemPool::set_tiny_blocks_apart`]). None for
    /// other pools.
    pub fn tiny_blocks_apart(&self) -> Option<bool> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.tiny_apart(),
            PoolRef::Driver(_) | PoolRef::Imported(_) => None,
        }
    }

    /// A hipmem pool on virtual memory that only grows: the least it maps
    /// in one call (0: each unit alone). None for other pools.
    pub fn growth_mapping(&self) -> Option<u64> {
        match &self.pool {
            PoolRef::Hipmem(c) if c.mapping_unit().is_some() => Some(c.growth_mapping()),
            _ => None,
        }
    }

    /// Sets the least a hipmem pool on virtual memory maps in one call when
    /// it grows without moving memory (see [`MoveBudget::GROW_FIRST`]): new
    /// units of one growth that add up to half of `bytes` or more are one
    /// physical allocation (up to 128 MiB each), mapped and given access in
    /// one call each, and released only whole (when all of them are free);
    /// a pool of eight times `bytes` or more grows by at least `bytes`. On
    /// a GPU a physical allocation costs about as much to create, map and
    /// give access to whatever its size up to 32 MiB (about 40 µs on an
    /// H100, so about 20 µs per MiB for one of 2 MiB, 1.3 for 32), and one of
    /// 128 MiB about 0.5 µs per MiB (docs/pool-measurements.md). The
    /// default is 128 MiB (`HIPMEM_POOL_GROUP_MIB` sets another for new
    /// pools); 0 maps each unit alone, so that trim and the release
    /// threshold can give back any free unit. Pools made for sharing (a
    /// handle type) always map units alone. InvalidValue for other pools.
    pub fn set_growth_mapping(&self, bytes: u64) -> Result<()> {
        self.own("map memory in units")?.set_growth_mapping(bytes)
    }

    /// Sets the most one physical allocation of a hipmem pool on virtual
    /// memory holds where a growth in its first steps (its first 2048
    /// frees, where a training run makes its long-lived state) needs two
    /// units or more: the growth is cut into pieces of powers of two units
    /// up to `bytes`, each created, mapped and given access in one call and
    /// released whole, instead of one physical allocation per unit. On an
    /// H100 an allocation of up to 32 MiB costs about as much as one of 2
    /// MiB, so 8 MiB pieces took replayed PyTorch training runs' first
    /// steps from about twice the driver's pool's time to less (on an H200,
    /// summed over three rounds, 0.67-0.93× on the 12- and 23-step
    /// recordings). Such a pool's plans
    /// also lay themselves out over the pieces where that holds at most
    /// 1/128 of the plan's peak more (as unit by unit), rather than give
    /// them back and map their arenas anew.
    /// Off by default (`0`, or `HIPMEM_POOL_FIRST_PIECE_MIB` for new pools):
    /// a workload without a repeating step, such as variable-length
    /// inference, keeps its warm-up's pieces under its later batches, and
    /// held up to 1.058 of its peak with 8 MiB pieces against 1.024 without
    /// (docs/pool-measurements.md). InvalidValue for a pool on segments or
    /// another process's pool.
    pub fn set_first_steps_piece(&self, bytes: u64) -> Result<()> {
        self.own("map pieces")?.set_first_steps_piece(bytes)
    }

    /// Lets a hipmem pool on virtual memory lend to a growth the units of
    /// its groups whose frees are still pending on the growth's own stream
    /// (free runs at a group's ends and wholly free groups, mapped under
    /// the new block in an alias: that stream's work before the frees runs
    /// before the block's), so that a request of 256 MiB or more under
    /// [`MoveBudget::GROW_FIRST`] need not wait for the stream's frees
    /// before it gives memory back, where lending covers nearly as much as
    /// the wait would give back. The lent memory serves no other stream and
    /// does not go back while those frees are pending. Off by default
    /// (`HIPMEM_POOL_LEND_PENDING=1` turns it on for new pools): live
    /// variable-length inference on an H100 ran its largest batches as fast
    /// as PyTorch's allocator with it, 2 ms slower without, but held up to
    /// 1.049 of its peak against 1.008-1.025 (docs/pool-measurements.md).
    /// InvalidValue for a pool on segments or another process's pool.
    pub fn set_pending_lending(&self, on: bool) -> Result<()> {
        self.own("lend pending frees")?.set_pending_lending(on)
    }

    /// Sets how much driver time a hipmem pool on virtual memory may spend
    /// moving memory between addresses to stay small
    /// ([`MoveBudget::GROW_FIRST`] by default: only when it cannot grow;
    /// [`MoveBudget::LEAST_MEMORY`]: whenever that keeps it smaller).
    /// Set it before the pool's first allocation: a pool that first maps
    /// memory under a budget that can run out ([`MoveBudget::never_runs_out`]
    /// false, [`MoveBudget::GROW_FIRST`] among them) keeps one heap for
    /// every size (best fit over all its free memory), one whose budget
    /// never runs out keeps three size classes apart, and that choice stays.
    /// Under [`MoveBudget::GROW_FIRST`], or once a budget is spent, a
    /// request of 256 MiB or more (and at least 1/8 of what the pool holds)
    /// that fits no free run first gives back the memory no block uses, up
    /// to its size and never below the release threshold, then grows; a
    /// pool with time left to move memory moves it under the request
    /// instead, and so does one whose release threshold
    /// keeps what it holds where the request would set a new peak
    /// ([`MemPool::set_release_threshold`]). InvalidValue for other pools or a budget
    /// out of range.
    pub fn set_move_budget(&self, budget: MoveBudget) -> Result<()> {
        self.own("move memory")?.set_move_budget(budget)
    }

    /// Turns idle release on (`Some(window)`) or off (`None`, the default).
    /// HIP releases a pool's memory above its release threshold when a
    /// stream or the device is synchronized; a program that synchronizes
    /// through another runtime (PyTorch) never lets the pool see that. With
    /// idle release the pool applies the threshold on its own clock: at the
    /// first request after each quarter window ends (also one the stream's
    /// cache serves), it gives back memory
    /// beyond the most it needed in the last two windows (and beyond the
    /// threshold), when that is more than 1/16 of it and the pool has not
    /// grown for two windows (a pool that grows again right after a release
    /// waits longer next time); where it holds more than twice what the last
    /// window needed (a peak left behind), memory beyond the larger of that
    /// and half of the two windows' need goes after one window; a peak that
    /// the pool gave back and grew for again (to 7/8 of its need) within 16
    /// windows makes the next one wait twice as long, up to 64 windows (a
    /// loop's largest batch, which comes back every pass, then keeps its
    /// memory). Memory a block uses, or whose free has not completed, never
    /// goes, nor does a running plan's arena; on virtual memory nothing goes
    /// where all that could go is under 1/64 of what the pool holds (a loop
    /// needing it again would pay a driver call per unit to map it back).
    /// hipmem's PyTorch interface
    /// turns it on for the pools it allocates from
    /// (`HIPMEM_TORCH_IDLE_RELEASE_MS`, default 100; 0: off). InvalidValue
    /// for a pool that is not hipmem's own, or a window of zero.
    pub fn set_idle_release(&self, window: Option<std::time::Duration>) -> Result<()> {
        if window.is_some_and(|w| w.is_zero()) {
            return Err(Error::InvalidValue("an idle-release window must be longer than zero".into()));
        }
        self.own("release idle memory on a clock")?.set_idle_release(window);
        Ok(())
    }

    /// Turns zone placement on or off (off by default; hipmem's PyTorch
    /// interface turns it on with `HIPMEM_TORCH_ZONE=1`). The pool learns, by
    /// counting allocations from each step's largest block, which blocks will
    /// be live when the next step's largest block comes, packs those together
    /// in their own part of its address range (lowest address first) with the
    /// largest block right after them, and gives wholly free memory back before
    /// it grows. Until the step length repeats, blocks allocated in a run (no
    /// free between them: weights, an optimizer's state) are packed there too.
    /// A workload whose steps have the same allocations in the same order but
    /// different sizes (variable-length inference) then holds its peak with
    /// nothing free beside the blocks live at it, and a training run's plan is
    /// laid out with no long-lived block pinning memory beside it: replayed
    /// over the 22 committed recordings at five idle-release windows, at most
    /// 1.024 of the peak live bytes after the warm-up, against 1.063 with it
    /// off (`examples/python/replay_sweep.py --zone`, and without). It costs a
    /// lock per allocation and free, the slow path for the blocks it packs,
    /// about 40% more driver calls, and where the peak moves between steps,
    /// memory unmapped and mapped again before growths (variable-length
    /// inference's steps on an H100: 1.16-1.32× native's, 0.92-0.94× without
    /// it); and a run whose first steps or later phases allocate differently
    /// may hold more at its peak (a two-GPU data-parallel job: 1.18-1.27 of its
    /// peak used bytes with it, 1.107 without), so it is off by default.
    /// Turning it off forgets what was learned; a move budget set later turns
    /// it off. InvalidValue for a pool that is not hipmem's own (the driver's,
    /// an imported one); NotSupported for one that is not on virtual memory,
    /// may move memory (a move budget) or is made for sharing.
    pub fn set_zone_placement(&self, on: bool) -> Result<()> {
        let core = self.own("place blocks by zones")?;
        if on {
            if core.backing() != PoolBacking::VirtualMemory {
                return Err(Error::NotSupported("zone placement needs a pool on virtual memory".into()));
            }
            if core.move_budget() != super::MoveBudget::GROW_FIRST {
                return Err(Error::NotSupported(
                    "zone placement needs a pool that only grows (no move budget)".into(),
                ));
            }
            if core.props.handle_types != 0 {
                return Err(Error::NotSupported("zone placement is not for a pool made for sharing".into()));
            }
        }
        core.set_zone_on(on);
        Ok(())
    }

    /// Whether zone placement is on (see [`MemPool::set_zone_placement`]).
    pub fn zone_placement(&self) -> bool {
        match &self.pool {
            PoolRef::Hipmem(c) => c.zone.is_on(),
            _ => false,
        }
    }

    /// Drives idle release (see [`MemPool::set_idle_release`]) by a clock of
    /// the caller's: `Some(now)`, the time since an origin the caller keeps
    /// (a time earlier than the last one given counts as the last), instead
    /// of the wall clock (`None`, the default). `hipmem replay` gives the
    /// recorded trace's own time before each operation, so the idle periods
    /// of a recorded run count as they did when it ran. Switching clocks
    /// starts a new window. InvalidValue for a pool that is not hipmem's own.
    pub fn set_idle_clock(&self, now: Option<std::time::Duration>) -> Result<()> {
        self.own("release idle memory on a clock")?.set_idle_clock(now);
        Ok(())
    }

    /// The idle-release window, if on (see [`MemPool::set_idle_release`]).
    pub fn idle_release(&self) -> Option<std::time::Duration> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.idle_release(),
            _ => None,
        }
    }

    /// Limits the physical memory a hipmem pool holds, from now on
    /// (`Some(bytes)`), or lifts the limit (`None`, the default): a maxSize
    /// that can change while the pool is in use (PyTorch's
    /// `torch.cuda.set_per_process_memory_fraction` reaches hipmem's PyTorch
    /// interface as one). With a maxSize from creation too, the lower one
    /// binds. An allocation that would take the pool's reserved memory past
    /// the limit first gets the memory the pool (and the device's other
    /// hipmem pools) can give back, then fails with OutOfMemory naming the
    /// limit; allocations served from memory the pool already holds are
    /// unaffected. Lowering the limit below what the pool holds gives back
    /// now what no block uses (as [`MemPool::trim_to`] the limit); live
    /// blocks stay valid and the pool holds them past the limit until they
    /// are freed. InvalidValue for a pool that is not hipmem's own.
    pub fn set_size_limit(&self, limit: Option<u64>) -> Result<()> {
        self.own("take a size limit after creation")?.set_size_limit(limit)
    }

    /// The limit set with [`MemPool::set_size_limit`], if any (a maxSize
    /// from creation is not one).
    pub fn size_limit(&self) -> Option<u64> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.size_limit(),
            _ => None,
        }
    }

    /// Turns learned layouts on or off (on by default for hipmem's pools on
    /// virtual memory that are not shareable; `HIPMEM_POOL_PLAN=0` turns the
    /// default off). A pool that learns watches the sequence of its
    /// allocations; when a sequence of at least 16 allocations and 64 MiB
    /// repeats (a training step), each of its blocks gets the place an
    /// offline plan gives it, knowing when it will be freed, inside one block
    /// of the pool (the arena): the pool then holds about the peak of what
    /// the sequence has live at once, with no search and no driver call per
    /// allocation. Off ends a running plan. InvalidValue for other pools,
    /// or for turning it on in a pool without virtual memory.
    pub fn set_planning(&self, on: bool) -> Result<()> {
        let c = self.own("learn layouts")?;
        if on && c.backing() != PoolBacking::VirtualMemory {
            return Err(Error::InvalidValue("learned layouts need a pool on virtual memory".into()));
        }
        c.set_planning(on);
        Ok(())
    }

    /// What the pool's learned layouts did: plans made, allocations served
    /// from a plan, planned allocations that took the usual path, plans
    /// ended, periods rejected (zeros for other pools).
    pub fn plan_counts(&self) -> super::PlanCounts {
        match &self.pool {
            PoolRef::Hipmem(c) => c.plan_counts(),
            _ => super::PlanCounts::default(),
        }
    }

    /// Whether the pool learns layouts now (false while learning pauses
    /// after finding no repeating sequence).
    pub fn planning(&self) -> bool {
        matches!(&self.pool, PoolRef::Hipmem(c) if c.planning())
    }

    /// Sets the release threshold (`u64::MAX` keeps everything).
    ///
    /// A pool on virtual memory holding no more than its threshold gives
    /// nothing back before it grows. Past a run's first steps (2048 frees),
    /// a growth of 256 MiB or more that would take it past its high
    /// watermark moves the physical memory of wholly free units and groups
    /// under the new block (unmapped there, mapped here; what the block
    /// does not cover stays free elsewhere) and creates only the rest: the
    /// pool keeps every byte, at other addresses. Live blocks never move.
    pub fn set_release_threshold(&self, bytes: u64) {
        let _ = self.set_attribute(PoolAttribute::ReleaseThreshold, bytes);
    }

    /// `hipMemPoolTrimTo`: releases unused memory down to `keep` reserved bytes,
    /// never memory of live allocations or of frees the device has not completed.
    pub fn trim_to(&self, keep: u64) -> Result<()> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.trim_to(keep),
            PoolRef::Driver(d) => d.trim_to(keep),
            PoolRef::Imported(_) => Ok(()),
        }
    }

    /// `hipMemPoolSetAccess` for one device.
    pub fn set_access(&self, device: usize, flags: AccessFlags) -> Result<()> {
        self.rt.check_device(device)?;
        match &self.pool {
            PoolRef::Hipmem(c) => c.set_access(device, flags),
            PoolRef::Driver(d) => d.set_access(device, flags),
            PoolRef::Imported(i) => i.set_access(device, flags),
        }
    }

    /// `hipMemPoolGetAccess`: the pool's device reads ReadWrite, others None until set.
    pub fn access(&self, device: usize) -> Result<AccessFlags> {
        self.rt.check_device(device)?;
        match &self.pool {
            PoolRef::Hipmem(c) => c.access(device),
            PoolRef::Driver(d) => d.access(device),
            PoolRef::Imported(i) => i.access(device),
        }
    }

    /// Checks the placement invariants of a hipmem pool (for tests and debugging).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        match &self.pool {
            PoolRef::Hipmem(c) => c.check_invariants(),
            PoolRef::Driver(_) | PoolRef::Imported(_) => Ok(()),
        }
    }

    // ---- interprocess sharing ---------------------------------------------------------

    /// Whether this pool was imported from another process (it cannot allocate).
    pub fn is_imported(&self) -> bool {
        match &self.pool {
            PoolRef::Imported(_) => true,
            PoolRef::Driver(d) => d.is_imported(),
            PoolRef::Hipmem(_) => false,
        }
    }

    /// Frees a pointer imported into this pool (this process's mapping only).
    pub fn free_imported(&self, ptr: DevicePtr) -> Result<()> {
        match &self.pool {
            PoolRef::Imported(i) => i.free_pointer(ptr),
            PoolRef::Driver(d) if d.is_imported() => {
                self.rt.device_synchronize(d.raw.device)?;
                d.free(ptr, crate::backend::RawStream::null(d.raw.device))?;
                self.rt.device_synchronize(d.raw.device)
            }
            _ => Err(Error::InvalidValue("the pool is not an imported pool".into())),
        }
    }
}

fn shareable(props: &PoolProps) -> bool {
    props.handle_types & handle_type::POSIX_FILE_DESCRIPTOR != 0
}
