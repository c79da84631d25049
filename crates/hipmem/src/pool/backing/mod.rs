//! How a pool gets memory from the backend and gives it back: separate
//! segments, or physical granules mapped into one reserved address range
//! (possibly at several addresses each, see `remap.rs`).
#![forbid(unsafe_code)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::AccessFlags;
use super::core::{CallCounts, PoolCore, lock};
use super::placement::{BLOCK_ALIGN, BlockKind, Heap};
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::VirtualMemory;
use crate::error::{Error, Result};
use crate::runtime::Runtime;

mod give_back;
mod grow;
mod range;

pub(in crate::pool) use grow::BeforeGrowth;
pub(crate) use range::VirtualRange;
use range::{ALIASES_HIGH, ALIASES_LOW, Alias, GROUPED_UNIT, Group, Phys, Switch};

/// How a pool gets memory from the backend. (One per pool, held in place
/// for the pool's life: the range's size does not matter, boxing it would
/// add a pointer chase to every growth.)
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backing {
    /// Separate device allocations (segments); blocks coalesce within one.
    Segments,
    /// One reserved address range, one part per size class; physical
    /// granules are mapped into it as the pool grows, switched between
    /// addresses as the layout needs (`remap.rs`), and unmapped and released
    /// when not in use, while live addresses stay put. Taken where the
    /// backend has virtual memory (unless `HIPMEM_POOL_BACKING=segments`).
    Virtual(Mutex<Option<VirtualRange>>),
}

/// Physical allocations unmapped by a release before a growth but not yet
/// given back: (handle, bytes). The growth maps those whose size it needs
/// instead of creating as much (on an H100 giving back costs 0.6-1 µs per
/// MiB, creating 0.06-0.35, mapping with access 0.1-0.6: `hipmem bench vmm`,
/// `chunk_steps`); the rest go back before it creates anything.
pub(super) type Unmapped = Vec<(u64, u64)>;

/// How much driver time a pool on virtual memory may spend moving memory
/// (when a pool grows on virtual memory): a burst it starts with and saves up to,
/// in seconds, and the share of wall-clock time it earns.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct MoveBudget {
    /// Seconds of moving it starts with and may save up.
    pub burst_s: f64,
    /// The share of wall-clock time it earns (0 to 1).
    pub share: f64,
}

impl MoveBudget {
    /// Whether the budget is never out of moving time for long: an endless
    /// burst, or the whole of wall-clock time earned (a move longer than
    /// what is saved up still leaves it short until time catches up).
    /// Only such a pool keeps its size
    /// classes apart: one whose budget runs out keeps one heap, as a pool
    /// that only grows does, since it then grows and gives back as one.
    /// (With classes apart and no time left to move memory between them,
    /// replayed variable-length inference held 1.17 of its peak on average
    /// with 5% of the time to move, against 1.02 with one heap;
    /// docs/pool-measurements.md, stop 77.)
    pub fn never_runs_out(&self) -> bool {
        self.burst_s.is_infinite() || self.share >= 1.0
    }

    /// No moving unless the pool cannot grow: the default (a GPU spends
    /// about 30 µs per MiB moved, so a workload that moves memory every
    /// step runs slower than one whose pool grew once).
    pub const GROW_FIRST: MoveBudget = MoveBudget { burst_s: 0.0, share: 0.0 };
    /// Move whenever that keeps the pool smaller: the least memory, the
    /// most driver time. Only memory whose frees the device has completed
    /// moves, so before moving memory the pool waits for the request
    /// stream's pending frees: where the device runs behind the host (a
    /// PyTorch training loop) this costs step time as well.
    pub const LEAST_MEMORY: MoveBudget = MoveBudget { burst_s: f64::INFINITY, share: 1.0 };

    /// The budget of new pools: `HIPMEM_POOL_MOVE_BURST_MS` (default 0) and
    /// `HIPMEM_POOL_MOVE_SHARE` (percent, default 0).
    pub(crate) fn from_env() -> MoveBudget {
        static ENV: std::sync::OnceLock<MoveBudget> = std::sync::OnceLock::new();
        *ENV.get_or_init(|| {
            let var = |name: &str, max: f64| {
                std::env::var(name)
                    .ok()
                    .and_then(|v| v.parse::<f64>().ok())
                    .filter(|v| (0.0..=max).contains(v))
            };
            MoveBudget {
                burst_s: var("HIPMEM_POOL_MOVE_BURST_MS", 1e9).map_or(0.0, |ms| ms / 1000.0),
                share: var("HIPMEM_POOL_MOVE_SHARE", 100.0).map_or(0.0, |p| p / 100.0),
            }
        })
    }
}

/// Changes a setting of a pool on virtual memory that holds from its first
/// growth on (`set`, under the range's lock, so that no growth starts
/// meanwhile); InvalidValue saying `fixed` once the addresses are reserved.
fn before_first_growth(range: &Mutex<Option<VirtualRange>>, fixed: &str, set: impl FnOnce()) -> Result<()> {
    let guard = lock(range);
    if guard.is_some() {
        return Err(Error::InvalidValue(fixed.into()));
    }
    set();
    Ok(())
}

/// Whether new pools keep their tiny blocks apart
/// ([`crate::pool::MemPool::set_tiny_blocks_apart`]): yes, unless
/// `HIPMEM_POOL_TINY_APART=0`; read once.
pub(crate) fn tiny_apart_from_env() -> bool {
    static ENV: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ENV.get_or_init(|| std::env::var("HIPMEM_POOL_TINY_APART").map_or(true, |v| v != "0"))
}

impl Backing {
    pub(super) fn choose(rt: &Runtime, device: usize, requested: Option<super::PoolBacking>) -> Backing {
        let wanted = match requested {
            Some(b) => b == super::PoolBacking::VirtualMemory,
            None => std::env::var("HIPMEM_POOL_BACKING").map(|v| v != "segments").unwrap_or(true),
        };
        let capable = rt.device_properties(device).ok().is_some_and(|d| d.capabilities.virtual_memory);
        if wanted && capable && rt.backend().virtual_memory().is_some() {
            Backing::Virtual(Mutex::new(None))
        } else {
            Backing::Segments
        }
    }
}

/// The least a pool that only grows maps in one call by default: 128 MiB.
/// On an H100 creating, mapping and giving access to one physical
/// allocation costs about 55 µs whatever its size (`hipmem bench vmm`,
/// `chunk_ops`: 25 µs per MiB at 2 MiB, 6.6 at 8, 1.8 at 32, 0.7 at 128),
/// so a group costs what one unit does, but a group goes back only whole:
/// a long-lived block in it keeps all of it. (These thresholds were chosen
/// when the cuda backend still cut an allocation of up to 32 MiB into one
/// driver allocation per granule, [`VirtualMemory::mem_create_whole`],
/// and mappings under 64 MiB cost twenty times as much per MiB; the memory
/// figures below do not depend on it.) Replayed on an H100,
/// five PyTorch runs' second halves hold 1.005–1.014× their peak with
/// 128 MiB groups of 2 MiB units (1.005–1.023× with growths of 64 MiB
/// grouped too, [`least_plain_group`]), against 1.006–1.059× with 64 MiB
/// groups of 8 MiB units, at 1.2–2.5× the whole trace's time per operation
/// (learning steps included; the second halves map nothing).
pub(crate) const DEFAULT_GROWTH_MAPPING: u64 = 128 << 20;

/// Most address ranges a pool on virtual memory holds after its first
/// (`grow.rs`, [`PoolCore::reserve_more`]): each is made only where no part
/// of the pool's addresses has a hole for a request, room for twice the
/// request where addresses allow; those with nothing mapped go back before
/// another is made, and all when the pool is destroyed.
pub(crate) const MAX_EXTRA_RANGES: usize = 16;

/// The least growth mapped in groups as it is, without padding: half the
/// growth mapping (64 MiB by default).
/// A growth between the two was mapped unit by unit and its units given
/// back one by one when a plan started: on the recorded checkpointed and
/// CNN training runs (replayed on the CPU backend) 930 and 780 driver calls
/// where there had been 1566 and 2124, holding the same memory but for the
/// checkpointed run's second half (1.023 of its peak, from 1.011). A lower
/// threshold groups blocks that sit next to long-lived ones and holds more
/// (1.039 on the side-stream run's second half with 48 MiB, from 1.008).
fn least_plain_group(group_min: u64) -> u64 {
    group_min / 2
}

/// The largest group a growth maps in a run's first steps, and the largest
/// a padded small growth maps (half of it after the first steps:
/// [`max_group`]; larger growths map several; a remainder under
/// [`least_plain_group`] joins the last): the growth
/// mapping's 128 MiB ([`DEFAULT_GROWTH_MAPPING`]), where mapping is already
/// cheap (on an H100 about 1.3 µs per MiB for 64 MiB, 0.6 for 128 and 0.2
/// for 512: `hipmem bench vmm`), so that a long-lived block keeps as little
/// as it can from going back. Replayed, 15 recordings of variable-length
/// inference on other batch shapes (`torch_allocators.py --record
/// --varlen-seed N`) hold 1.022 of their peak live bytes on average over
/// the whole trace with 128 MiB groups and 1.036 with 256 MiB ones (worst
/// 1.071 and 1.073), and 1.016 and 1.031 after the warm-up, for 15% more
/// driver calls; the training runs hold the same.
const MAX_GROUP: u64 = 128 << 20;

/// The largest group a growth maps: [`MAX_GROUP`] (or the growth mapping
/// set, if larger) in a run's first steps ([`FIRST_STEPS`]), half that
/// after them. The first steps' large growths are a training run's weights,
/// optimizer state and first plan's memory, which stay or go back whole,
/// and the short runs' replay time is their mappings. After them the
/// growths are a varying workload's new peaks, whose memory later blocks of
/// other sizes share: a group goes back only whole, so one long-lived block
/// keeps up to a group around it from going back. Replayed
/// (`replay_sweep.py --windows 25,50,100,200`, one pass and two, the
/// committed and the held-out recordings: 196 cases), the default pool
/// (tiny blocks apart) held more than 1.03 of the second half's peak in 15
/// cases with these groups, against 27 with 128 MiB groups and tiny blocks
/// in one heap, for 1.7-2.4 times the second halves' driver calls
/// (docs/pool-measurements.md, "Stop 78"). Zone placement (`zone.rs`)
/// keeps [`MAX_GROUP`]: its parts trade memory by giving groups back whole.
/// A small growth padded to a whole group (`grow.rs`) stays one group.
/// `full`: the growth is in a run's first steps, or the pool places by
/// zones.
pub(super) fn max_group(growth_mapping: u64, full: bool) -> u64 {
    let most = MAX_GROUP.max(growth_mapping);
    if full { most } else { most / 2 }
}

/// The heap's frees that make a run's *first steps*: in them a pool lends
/// nothing (`lend.rs`), pads no small growth to a whole group, and maps a
/// growth under 64 MiB unit by unit (or, where asked, in pieces of up to
/// [`PoolCore::first_steps_piece`]). Those
/// steps make the run's long-lived state (weights, an optimizer's state,
/// DDP's gradient buckets) while its first activations come and go.
///
/// - Lending then puts that state into loans scattered over the range,
///   their homes shadowed between the blocks still there, and a training
///   run's plan later finds its free runs split: recorded checkpointed
///   training held 1.030-1.039 of its peak at the two shortest of five
///   idle-release windows with lending from the start, 1.017-1.024 (as
///   without lending) from 1000 or 2000 frees on, and variable-length
///   inference the same either way.
/// - A padded group keeps the state next to the activations' free memory,
///   which then goes back only with the state (a group goes back whole,
///   and CUDA and HIP lend none of a group's middle). Mapped unit by unit
///   in those steps, the state holds only its own units. Replayed
///   (`examples/python/replay_sweep.py`), rank 0 of the two-GPU job
///   (`torch_ddp.py`) held 1.006-1.010 of its peak after its training
///   steps with that and 1.055-1.067 padded from the start (live on two
///   H100s: 1.006 and 1.059); variable-length inference 8 of 90 cases
///   above 1.03 against 10, for 42 thousand backend calls against 27
///   (never padding: 5 of 90 and 101 thousand; padding from 8192 frees: 5
///   of 90 and 62 thousand; padding only below the pool's high watermark:
///   12 of 90; exact groups for these growths instead of units: the
///   two-GPU job 1.047-1.071). The price is driver calls in the first
///   steps (GPT-2's whole trace 4612 against 1228; replayed on an H100,
///   5.2 µs per operation against 2.8) and one slower step where the first
///   plan gives those units back one by one (the two-GPU job: 46-52 ms
///   against 30-34).
///
/// `HIPMEM_POOL_FIRST_STEPS` sets another count ([`first_steps`]), so that
/// a change can be judged over several (`replay_sweep.py --first-steps`):
/// moving the bound by a few hundred frees, which changes nothing on
/// purpose, moves how many of the variable-length sweep's 180 cases land
/// above 1.03 from 8 to 16, while their mean moves by 0.0004.
const FIRST_STEPS: u64 = 2048;

/// The frees that make a run's first steps: [`FIRST_STEPS`], or
/// `HIPMEM_POOL_FIRST_STEPS` where it is set to a number (read once).
pub(in crate::pool) fn first_steps() -> u64 {
    static FROM_ENV: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *FROM_ENV.get_or_init(|| first_steps_from(std::env::var("HIPMEM_POOL_FIRST_STEPS").ok().as_deref()))
}

/// The first steps' frees given the setting's text: a count of frees, else
/// (unset, or not a number) [`FIRST_STEPS`].
fn first_steps_from(setting: Option<&str>) -> u64 {
    setting.and_then(|v| v.trim().parse::<u64>().ok()).unwrap_or(FIRST_STEPS)
}

/// The most one physical piece holds where a growth in a run's first steps
/// is cut into pieces ([`PoolCore::first_steps_piece`]): 0, every unit alone.
///
/// On an H100 a physical allocation costs about the same to create, map,
/// give access to, unmap and release whatever its size up to 32 MiB (71 µs
/// for 2 MiB, 74 for 8, 90 for 32: a CUDA probe, `docs/pool-measurements.md`),
/// so a growth of 48 MiB unit by unit costs 24 times what six pieces of 8
/// MiB cost. With 8 MiB pieces, replayed (`hipmem replay TRACE --pool vmm`),
/// the recorded training runs' backend calls fell from 4610 to 1598 (GPT-2),
/// 3650 to 1204 (CNN) and 2540 to 835 (rank 0 of the two-GPU job), and on an
/// H100 their replay time per operation from about twice the driver's
/// pool's to about as much (over three rounds: GPT-2 0.82 of it, the
/// two-GPU job 0.89, the CNN 1.39 with one slow round); their later steps
/// held 1.002, 1.004 and 1.015 of their peaks (1.003, 1.005 and 1.006
/// unit by unit). On an H200, with a plan's start laid out over the
/// pieces for up to 1/128 of its peak more (`planned.rs`), every recorded
/// run replayed faster than under the driver's pool summed over three
/// rounds (the 12- and 23-step ones at 0.67-0.93 of its time in two
/// sessions; single rounds up to 1.31: docs/pool-measurements.md, "Stop 69").
/// Not the default: variable-length inference's warm-up
/// pieces stay under its later batches, and live on an H100 two of three
/// processes held 1.042 and 1.058 of their peak (1.008-1.024 unit by unit),
/// with 24-32 driver calls in each pass's largest batches; replayed at ten
/// idle-release windows over five first-steps bounds (`replay_sweep.py
/// --first-steps 1700,1900,2048,2200,2400`), 20-22 of 180 cases were above
/// 1.03 against 8-16 unit by unit, their mean 1.0185-1.0196 against
/// 1.0157-1.0163: not luck. Larger
/// pieces hold more where long-lived state lands in them: with 16 or 32 MiB
/// the two-GPU job held 1.035 and 1.038.
const FIRST_STEPS_PIECE: u64 = 0;

/// How many of the driver's granules make one of the pool's physical units
/// (`HIPMEM_POOL_UNIT_GRANULES`, default 1: 2 MiB where the driver maps
/// 2 MiB). Larger units mean fewer driver calls when memory moves (each
/// map or unmap costs tens of microseconds on a GPU) at the price of
/// coarser release: free memory next to a long-lived block goes back only
/// by whole units. Replayed, a PyTorch run with a side stream holds 1.059×
/// its peak with 8 MiB units and 1.008× with 2 MiB ones (growths of 128 MiB
/// or more are mapped in groups all the same, see [`DEFAULT_GROWTH_MAPPING`]).
fn unit_granules() -> u64 {
    static UNIT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *UNIT.get_or_init(|| {
        std::env::var("HIPMEM_POOL_UNIT_GRANULES")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .filter(|&n| (1..=64).contains(&n))
            .unwrap_or(1)
    })
}

/// A size in bytes from environment variable `var`, given in MiB; None
/// where it is not set or not a number.
fn env_mib(var: &str) -> Option<u64> {
    std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()).map(|mib| mib.saturating_mul(1 << 20))
}

/// Turns the mapping `[at, at + len)`, which holds only global free and
/// shadowed blocks, back into unbacked addresses (it is about to be
/// unmapped).
fn unback_mapping(heap: &mut Heap, at: u64, len: u64) {
    let blocks: Vec<(u64, u64, BlockKind)> = heap.blocks_between(at, at + len).collect();
    for (addr, n, kind) in blocks {
        let (s, e) = (addr.max(at), (addr + n).min(at + len));
        match kind {
            BlockKind::Free => heap.unback(s, e - s),
            _ => heap.unback_shadowed(addr, n),
        };
    }
}

/// Undoes [`PoolCore::create_and_map`].
fn unmap_and_release(calls: &CallCounts, vm: &dyn VirtualMemory, at: u64, size: u64, handle: u64) {
    let _ = vm.mem_unmap(DevicePtr(at), size);
    super::deferred::release_now(vm, calls, handle, size);
}

/// The index ranges of `spans` (address, length), in order, whose spans
/// each start where the one before ends: one access call covers each (fewer
/// driver calls; the time is per physical allocation covered, 34-42 µs each
/// on an H200, see `grow.rs`).
fn adjacent_runs(spans: &[(u64, u64)]) -> Vec<std::ops::Range<usize>> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < spans.len() {
        let mut j = i + 1;
        while j < spans.len() && spans[j].0 == spans[j - 1].0 + spans[j - 1].1 {
            j += 1;
        }
        runs.push(i..j);
        i = j;
    }
    runs
}

/// Gives every device the pool's access to `size` mapped bytes at `at`
/// (one call per device, whatever the number of mappings in the range).
fn give_access(vm: &dyn VirtualMemory, access: &[AccessFlags], at: u64, size: u64) -> Result<()> {
    for (device, flags) in access.iter().enumerate() {
        if *flags != AccessFlags::None {
            vm.mem_set_access(DevicePtr(at), size, device, flags.raw())?;
        }
    }
    Ok(())
}

/// Maps `size` bytes of `handle` at `at` and gives every device the pool's access.
fn map_with_access(
    calls: &CallCounts,
    vm: &dyn VirtualMemory,
    access: &[AccessFlags],
    at: u64,
    size: u64,
    handle: u64,
) -> Result<()> {
    vm.mem_map(DevicePtr(at), size, 0, handle)?;
    CallCounts::add(&calls.maps);
    give_access(vm, access, at, size)
}

impl Drop for PoolCore {
    /// The runtime is going away with this pool: every segment, mapping,
    /// granule and reservation goes back to the backend (work still queued is
    /// waited for by the backend's own free).
    fn drop(&mut self) {
        self.deferred.wait_empty();
        let heap = self.heap.get_mut().unwrap_or_else(|p| p.into_inner());
        match &self.backing {
            Backing::Segments => {
                for seg in heap.segments().copied().collect::<Vec<_>>() {
                    if let Err(e) = self.backend.mem_free(self.device, DevicePtr(seg.base)) {
                        tracing::debug!(target: "hipmem", "releasing a pool segment at teardown: {e}");
                    }
                }
            }
            Backing::Virtual(range) => {
                let Some(vm) = self.backend.virtual_memory() else { return };
                if let Some(vr) = range.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = self.backend.device_synchronize(self.device);
                    for (addr, len) in vr.mappings() {
                        let _ = vm.mem_unmap(DevicePtr(addr), len);
                    }
                    let handles = vr.phys.iter().filter(|(_, p)| p.group.is_none()).map(|(&pid, _)| pid);
                    for handle in handles.chain(vr.groups.values().map(|g| g.handle)) {
                        let _ = vm.mem_release(handle);
                    }
                    for (base, size) in vr.ranges() {
                        if let Err(e) = vm.address_free(DevicePtr(base), size) {
                            tracing::debug!(target: "hipmem", "freeing a pool's reservation at teardown: {e}");
                        }
                    }
                }
            }
        }
    }
}

impl PoolCore {
    /// The size of the pool's physical units on virtual memory (None with
    /// segments).
    pub(crate) fn mapping_unit(&self) -> Option<u64> {
        match &self.backing {
            Backing::Virtual(range) => match lock(range).as_ref() {
                Some(vr) => Some(vr.granularity),
                None => self.unit_for(self.backend.virtual_memory()?).ok(),
            },
            Backing::Segments => None,
        }
    }

    /// The unit a pool that has not mapped anything yet will use: the one
    /// set with [`PoolCore::set_mapping_unit`], else the default number of
    /// the driver's granules.
    fn unit_for(&self, vm: &dyn VirtualMemory) -> Result<u64> {
        let g = vm.granularity(self.device, false)?.max(BLOCK_ALIGN);
        Ok(match self.unit.load(Ordering::Relaxed) {
            // A pool with a maxSize keeps units of at most a quarter of it.
            0 if self.props.max_size > 0 => g * unit_granules().min((self.props.max_size / 4 / g).max(1)),
            0 => g * unit_granules(),
            n => n,
        })
    }

    /// Whether a growth maps only what the request needs (in whole units):
    /// while a plan's new piece is made, and while a plan runs (it serves
    /// the steps; what takes the usual path then is a one-off, a place
    /// still in use, and more would be held for nothing).
    fn growth_is_exact(&self) -> bool {
        self.exact_growth.load(Ordering::Relaxed) || self.plan.running.load(Ordering::Acquire)
    }

    /// Sets the physical unit of a pool on virtual memory before it maps
    /// anything: a multiple of the driver's granularity, at most 64 of them.
    pub(crate) fn set_mapping_unit(&self, bytes: u64) -> Result<()> {
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::InvalidValue("a pool on segments has no mapping unit".into()));
        };
        let vm = self
            .backend
            .virtual_memory()
            .ok_or_else(|| Error::NotSupported("the backend has no virtual memory".into()))?;
        let g = vm.granularity(self.device, false)?.max(BLOCK_ALIGN);
        if bytes == 0 || bytes % g != 0 || bytes / g > 64 {
            return Err(Error::InvalidValue(format!(
                "a mapping unit of {bytes} bytes is not 1 to 64 times the granularity of {g} bytes"
            )));
        }
        before_first_growth(range, "the pool has mapped memory already; its unit is fixed", || {
            self.unit.store(bytes, Ordering::Relaxed)
        })
    }

    /// Sets each size class's part of a pool's addresses on virtual memory
    /// before it maps anything: a multiple of its physical unit.
    pub(crate) fn set_address_part(&self, bytes: u64) -> Result<()> {
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::InvalidValue("a pool on segments reserves no addresses".into()));
        };
        let vm = self
            .backend
            .virtual_memory()
            .ok_or_else(|| Error::NotSupported("the backend has no virtual memory".into()))?;
        let unit = self.unit_for(vm)?;
        if bytes == 0
            || bytes % unit != 0
            || bytes.checked_mul(crate::pool::placement::CLASSES as u64).is_none()
        {
            return Err(Error::InvalidValue(format!(
                "an address part of {bytes} bytes is not a nonzero multiple of the pool's {unit}-byte unit"
            )));
        }
        before_first_growth(range, "the pool has reserved its addresses already", || {
            self.address_part.store(bytes, Ordering::Relaxed)
        })
    }

    /// Sets whether a pool on virtual memory that keeps one heap keeps its
    /// tiny blocks apart (`placement::TINY_CLASS`), before it maps anything.
    pub(crate) fn set_tiny_apart(&self, on: bool) -> Result<()> {
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::InvalidValue("a pool on segments keeps no blocks apart".into()));
        };
        before_first_growth(
            range,
            "the pool has mapped memory already: tiny blocks are kept apart, or not, from its first growth",
            || self.tiny_apart.store(on, Ordering::Relaxed),
        )
    }

    /// Whether tiny blocks are (to be) kept apart: None on segments.
    pub(crate) fn tiny_apart(&self) -> Option<bool> {
        matches!(self.backing, Backing::Virtual(_)).then(|| self.tiny_apart.load(Ordering::Relaxed))
    }

    /// Whether the pool keeps tiny blocks apart now: set, on virtual memory,
    /// and keeping one heap (known from its first growth on).
    pub(crate) fn keeps_tiny_apart(&self) -> bool {
        self.one_class.load(Ordering::Relaxed) && self.tiny_apart.load(Ordering::Relaxed)
    }

    /// Each size class's part of the pool's addresses: as set, or as
    /// reserved (None on segments, or before the first growth without a
    /// setting).
    pub(crate) fn address_part(&self) -> Option<u64> {
        let Backing::Virtual(range) = &self.backing else { return None };
        if let Some(vr) = lock(range).as_ref() {
            return Some(vr.part());
        }
        Some(self.address_part.load(Ordering::Relaxed)).filter(|&p| p > 0)
    }

    /// The most a physical piece of a growth in a run's first steps
    /// ([`FIRST_STEPS`]) holds: such a growth of two units or more is cut
    /// into pieces of powers of two units, up to this; a piece is one
    /// physical allocation, goes back whole and is lent as a group is. One
    /// unit or less (the default, [`FIRST_STEPS_PIECE`]): every unit alone.
    /// Set with [`PoolCore::set_first_steps_piece`], else
    /// `HIPMEM_POOL_FIRST_PIECE_MIB`. A pool that maps units alone
    /// ([`PoolCore::growth_mapping`] 0) cuts no pieces.
    pub(crate) fn first_steps_piece(&self) -> u64 {
        match self.first_piece.load(Ordering::Relaxed) {
            u64::MAX => {
                static ENV: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
                *ENV.get_or_init(|| env_mib("HIPMEM_POOL_FIRST_PIECE_MIB").unwrap_or(FIRST_STEPS_PIECE))
            }
            n => n,
        }
    }

    pub(crate) fn set_first_steps_piece(&self, bytes: u64) -> Result<()> {
        self.set_size(&self.first_piece, bytes, "piece size")
    }

    /// Stores a size setting of a pool on virtual memory (`u64::MAX` is
    /// taken: it reads "not set"); `what` names the size in the error.
    fn set_size(&self, setting: &AtomicU64, bytes: u64, what: &str) -> Result<()> {
        if !matches!(self.backing, Backing::Virtual(_)) {
            return Err(Error::InvalidValue("a pool on segments maps nothing".into()));
        }
        if bytes == u64::MAX {
            return Err(Error::InvalidValue(format!("{bytes} bytes is not a {what}")));
        }
        setting.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// The least a pool that only grows maps in one call (0: every unit
    /// alone): set with [`PoolCore::set_growth_mapping`], else
    /// `HIPMEM_POOL_GROUP_MIB`, else [`DEFAULT_GROWTH_MAPPING`].
    pub(crate) fn growth_mapping(&self) -> u64 {
        match self.group.load(Ordering::Relaxed) {
            u64::MAX => {
                static ENV: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
                *ENV.get_or_init(|| env_mib("HIPMEM_POOL_GROUP_MIB").unwrap_or(DEFAULT_GROWTH_MAPPING))
            }
            n => n,
        }
    }

    /// [`super::MemPool::set_pending_lending`].
    pub(crate) fn set_pending_lending(&self, on: bool) -> Result<()> {
        if !matches!(self.backing, Backing::Virtual(_)) {
            return Err(Error::InvalidValue("a pool on segments lends nothing".into()));
        }
        self.lend_pending.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Sets the least a pool on virtual memory that only grows maps in one
    /// call: a growth of at least half of `bytes` in new units is one
    /// physical allocation, mapped and given access once, released whole
    /// (0: every unit alone).
    pub(crate) fn set_growth_mapping(&self, bytes: u64) -> Result<()> {
        self.set_size(&self.group, bytes, "mapping size")
    }

    /// The pool's budget for moving memory.
    pub(crate) fn move_budget(&self) -> MoveBudget {
        lock(&self.move_budget).unwrap_or_else(MoveBudget::from_env)
    }

    /// Sets the pool's budget for moving memory (its saved-up time starts
    /// at the new burst).
    pub(crate) fn set_move_budget(&self, budget: MoveBudget) -> Result<()> {
        if budget.burst_s.is_nan() || budget.burst_s < 0.0 || !(0.0..=1.0).contains(&budget.share) {
            return Err(Error::InvalidValue(format!(
                "a moving budget needs a burst of 0 or more seconds and a share from 0 to 1, not {budget:?}"
            )));
        }
        let Backing::Virtual(range) = &self.backing else {
            return Err(Error::InvalidValue("a pool on segments never moves memory".into()));
        };
        *lock(&self.move_budget) = Some(budget);
        // A pool that moves memory keeps its size classes apart: no zone.
        if budget != MoveBudget::GROW_FIRST {
            self.set_zone_on(false);
        }
        if let Some(vr) = lock(range).as_mut() {
            vr.tokens = budget.burst_s;
            vr.refilled = std::time::Instant::now();
        }
        Ok(())
    }

    /// Whether a growth may lend units whose frees are still pending on its
    /// stream (`lend.rs`): on virtual memory, past the first steps, with
    /// lending on and never refused by the backend. Such a pool does not
    /// wait for the stream's frees before a large growth (`release.rs`).
    pub(in crate::pool) fn lends_pending_frees(&self) -> bool {
        matches!(self.backing, Backing::Virtual(_))
            && crate::pool::lend::enabled()
            && self.lend_pending.load(Ordering::Relaxed)
            && !self.lending_refused.load(Ordering::Relaxed)
            && lock(&self.heap).frees() >= first_steps()
    }

    /// Whether the pool gives unused memory back before it grows for a large
    /// request (`release.rs`): one that moves memory moves it under the
    /// request instead.
    pub(super) fn gives_back_before_growing(&self) -> bool {
        match &self.backing {
            Backing::Segments => true,
            Backing::Virtual(range) => {
                let budget = self.move_budget();
                if budget == MoveBudget::GROW_FIRST {
                    return true;
                }
                // A budget spent: the growth will not move memory, so it
                // gives back first as a pool that only grows does. (One
                // that neither moved nor gave back held 1.77 of its peak
                // after a warm-up, replayed on an H200 with 5% of the time
                // to move.)
                lock(range).as_mut().is_some_and(|vr| vr.budget_spent(std::time::Instant::now(), budget))
            }
        }
    }

    /// The size class a request of `want` bytes is placed in
    /// ([`PoolCore::class_of`]), or the zone's (`zone.rs`) for a zone block
    /// on virtual memory.
    pub(super) fn class_for(&self, want: u64, zone: bool) -> usize {
        match self.backing {
            Backing::Virtual(_) if zone => super::zone::ZONE_CLASS,
            _ => self.class_of(want),
        }
    }

    /// The size class a request of `want` bytes is placed in: by size on
    /// virtual memory (each class has its own part of the reservation),
    /// one class with segments.
    pub(super) fn class_of(&self, want: u64) -> usize {
        match self.backing {
            // A pool that only grows keeps one heap for every size: best fit
            // over all its free memory (tiny blocks apart if set,
            // `TINY_CLASS`). One that moves memory keeps the sizes apart, so
            // that a size's places repeat.
            Backing::Virtual(_) if self.one_class.load(Ordering::Relaxed) => {
                if want <= super::placement::TINY_BLOCK_MAX && self.tiny_apart.load(Ordering::Relaxed) {
                    super::placement::TINY_CLASS
                } else {
                    0
                }
            }
            Backing::Virtual(_) => super::placement::size_class(want),
            Backing::Segments => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool whose addresses the device's address space cannot hold at
    /// their usual size (twelve times the device's memory) reserves smaller
    /// parts, down to a quarter of the device's memory each, and works; with
    /// not even that left, a request is OutOfMemory saying so, and it is
    /// served once addresses are free again (on an emulated device of 1 GiB
    /// in an address space of 8 GiB).
    #[test]
    fn a_pool_reserves_fewer_addresses_where_the_address_space_is_short() {
        use crate::backend::BackendChoice;
        use crate::backend::host::HostConfig;
        use crate::runtime::Runtime;
        const GIB: u64 = 1 << 30;
        const MIB: u64 = 1 << 20;
        let config = HostConfig {
            devices: 1,
            memory_per_device: GIB,
            address_space: 8 * GIB,
            ..HostConfig::default()
        };
        let rt = Runtime::builder().backend(BackendChoice::Host).host_config(config).build().unwrap();
        let dev = rt.device(0).unwrap();
        let s = dev.create_stream().unwrap();
        let pool = dev.create_mem_pool(0, 0).unwrap();
        assert!(pool.mapping_unit().is_some(), "the host backend has virtual memory");
        // 12 GiB does not fit, 6 GiB (parts of 2 GiB) does.
        let p = pool.alloc_raw(600 << 20, &s).expect("served from a smaller reservation");
        rt.memset(p, crate::backend::FillValue::U8(0x5a), 600 << 20).unwrap();
        let taken = rt.address_reserve(2 * GIB, 0, crate::backend::DevicePtr::NULL, 0).unwrap();
        let err = rt.address_reserve(GIB, 0, crate::backend::DevicePtr::NULL, 0).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory(_)), "{err}");
        // A second pool finds 0 bytes of addresses left (6 + 2 of 8 GiB).
        let second = dev.create_mem_pool(0, 0).unwrap();
        let err = second.alloc_raw(MIB, &s).unwrap_err();
        assert!(matches!(&err, Error::OutOfMemory(m) if m.contains("addresses")), "{err}");
        rt.address_free(taken, 2 * GIB).unwrap();
        // 2 GiB free: still under three parts of 1 GiB.
        assert!(second.alloc_raw(MIB, &s).is_err());
        rt.free_async(p, &s).unwrap();
        s.synchronize().unwrap();
        // (Its memory went back at the synchronization: it holds none.)
        assert_eq!(pool.stats().reserved_current, 0);
        pool.destroy().unwrap();
        // The first pool's 6 GiB are back: the second reserves 3 parts of
        // 2 GiB and is served.
        let q = second.alloc_raw(MIB, &s).expect("served once addresses are free");
        rt.free_async(q, &s).unwrap();
        s.synchronize().unwrap();
        second.check_invariants().unwrap();
    }

    /// Live blocks spread over a size class's part of the reservation can
    /// leave no hole there for a request the device has memory for: the
    /// block then goes to another class's part, as blocks do where the pool
    /// cannot grow (an emulated device of 1 GiB whose address space holds
    /// parts of 1 GiB; the recorded variable-length inference and training
    /// runs failed so with parts of the device's size).
    #[test]
    fn a_request_with_no_hole_in_its_class_is_served_in_another_part() {
        use crate::backend::BackendChoice;
        use crate::backend::host::HostConfig;
        use crate::runtime::Runtime;
        const GIB: u64 = 1 << 30;
        const MIB: u64 = 1 << 20;
        let config = HostConfig {
            devices: 1,
            memory_per_device: GIB,
            address_space: 3 * GIB + 512 * MIB,
            ..HostConfig::default()
        };
        let rt = Runtime::builder().backend(BackendChoice::Host).host_config(config).build().unwrap();
        let dev = rt.device(0).unwrap();
        let s = dev.create_stream().unwrap();
        let pool = dev.create_mem_pool(0, 0).unwrap();
        // Three blocks of 300 MiB side by side in the large blocks' part
        // (1 GiB); the middle one stays live, with a pattern in it.
        let a = pool.alloc_raw(300 * MIB, &s).unwrap();
        let b = pool.alloc_raw(300 * MIB, &s).unwrap();
        let c = pool.alloc_raw(300 * MIB, &s).unwrap();
        rt.memset(b, crate::backend::FillValue::U8(0xb7), 300 * MIB).unwrap();
        rt.free_async(a, &s).unwrap();
        rt.free_async(c, &s).unwrap();
        s.synchronize().unwrap();
        pool.trim_to(0).unwrap();
        let (lo, hi) = (a.0.min(b.0).min(c.0), a.0.max(b.0).max(c.0) + 300 * MIB);
        assert!(hi - lo < GIB && b.0 > lo && b.0 + 300 * MIB < hi, "b lies between a and c");
        // 500 MiB: the device has 724 MiB free, the part no hole of 500.
        let d = pool.alloc_raw(500 * MIB, &s).expect("served in another part");
        assert!(d.0 + 500 * MIB <= b.0 || d.0 >= b.0 + 300 * MIB, "no overlap with the live block");
        rt.memset(d, crate::backend::FillValue::U8(0x3c), 500 * MIB).unwrap();
        let mut back = vec![0u8; (300 * MIB) as usize];
        rt.copy_device_to_host(&mut back, b).unwrap();
        assert!(back.iter().all(|&x| x == 0xb7), "the live block kept its data");
        let mut back = vec![0u8; (500 * MIB) as usize];
        rt.copy_device_to_host(&mut back, d).unwrap();
        assert!(back.iter().all(|&x| x == 0x3c));
        assert_eq!(pool.stats().used_current, 800 * MIB);
        pool.check_invariants().unwrap();
        rt.free_async(b, &s).unwrap();
        rt.free_async(d, &s).unwrap();
        s.synchronize().unwrap();
        pool.trim_to(0).unwrap();
        assert_eq!(pool.stats().reserved_current, 0, "everything went back");
        pool.check_invariants().unwrap();
    }

    /// Where the device's addresses ran short and the parts are the least
    /// (a quarter of the device, at least 1 GiB), a block larger than a part
    /// gets an address range of its own; a range with nothing mapped goes
    /// back before another is reserved, and every range when the pool is
    /// destroyed (an emulated device of 4 GiB in an address space of 5 GiB:
    /// parts of 1 GiB).
    #[test]
    fn a_block_larger_than_a_part_gets_a_range_of_its_own() {
        use crate::backend::host::HostConfig;
        use crate::backend::{BackendChoice, DevicePtr, FillValue};
        use crate::runtime::Runtime;
        const GIB: u64 = 1 << 30;
        const MIB: u64 = 1 << 20;
        const BIG: u64 = 1280 * MIB;
        let config = HostConfig {
            devices: 1,
            memory_per_device: 4 * GIB,
            address_space: 5 * GIB,
            ..HostConfig::default()
        };
        let rt = Runtime::builder().backend(BackendChoice::Host).host_config(config).build().unwrap();
        let dev = rt.device(0).unwrap();
        let s = dev.create_stream().unwrap();
        let pool = dev.create_mem_pool(0, 0).unwrap();
        let small = pool.alloc_raw(MIB, &s).unwrap();
        // The pool reserved 3 parts of 1 GiB (the least): 2 GiB of
        // addresses are left.
        let err = rt.address_reserve(3 * GIB, 0, DevicePtr::NULL, 0).unwrap_err();
        assert!(matches!(err, Error::OutOfMemory(_)), "{err}");
        // 1.25 GiB: more than a part, less than the device's free memory.
        let big = pool.alloc_raw(BIG, &s).expect("served from a range of its own");
        rt.memset(big, FillValue::U8(0x6e), BIG).unwrap();
        rt.memset(small, FillValue::U8(0x11), MIB).unwrap();
        // Its first and last MiB read back (the range is mapped end to end).
        let mut back = vec![0u8; MIB as usize];
        for at in [big, DevicePtr(big.0 + BIG - MIB)] {
            rt.copy_device_to_host(&mut back, at).unwrap();
            assert!(back.iter().all(|&x| x == 0x6e));
        }
        let mut back = vec![0u8; MIB as usize];
        rt.copy_device_to_host(&mut back, small).unwrap();
        assert!(back.iter().all(|&x| x == 0x11));
        assert_eq!(pool.stats().used_current, BIG + MIB);
        pool.check_invariants().unwrap();
        // A second one fits nowhere: out of memory, naming the request.
        let err = pool.alloc_raw(BIG, &s).unwrap_err();
        assert!(matches!(&err, Error::OutOfMemory(m) if m.contains("1342177280")), "{err}");
        // Once its block went back, the extra range holds nothing: a larger
        // block that needs addresses of its own gets them in its place.
        rt.free_async(big, &s).unwrap();
        s.synchronize().unwrap();
        pool.trim_to(0).unwrap();
        let bigger = pool.alloc_raw(BIG + 512 * MIB, &s).expect("the empty range went back first");
        rt.memset(bigger, FillValue::U8(0x2f), BIG + 512 * MIB).unwrap();
        rt.copy_device_to_host(&mut back, DevicePtr(bigger.0 + BIG + 511 * MIB)).unwrap();
        assert!(back.iter().all(|&x| x == 0x2f));
        // Freed through the pool's addresses, the extra range's included.
        rt.free_async(bigger, &s).unwrap();
        rt.free_async(small, &s).unwrap();
        s.synchronize().unwrap();
        pool.trim_to(0).unwrap();
        assert_eq!(pool.stats().reserved_current, 0);
        pool.check_invariants().unwrap();
        pool.destroy().unwrap();
        // Every range went back: the whole address space can be reserved.
        let all = rt.address_reserve(5 * GIB, 0, DevicePtr::NULL, 0).expect("every range went back");
        rt.address_free(all, 5 * GIB).unwrap();
    }

    #[test]
    fn the_first_steps_setting_is_a_count_of_frees_or_the_default() {
        assert_eq!(first_steps_from(None), FIRST_STEPS);
        assert_eq!(first_steps_from(Some("1700")), 1700);
        assert_eq!(first_steps_from(Some(" 0 ")), 0);
        assert_eq!(first_steps_from(Some("many")), FIRST_STEPS);
        assert_eq!(first_steps_from(Some("-5")), FIRST_STEPS);
    }
}
