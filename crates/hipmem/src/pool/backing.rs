//! How a pool gets memory from the backend and gives it back: separate
//! segments, or physical granules mapped into one reserved address range
//! (possibly at several addresses each, see `remap.rs`).
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::Ordering;

use super::AccessFlags;
use super::core::{CallCounts, MAX_GROWTH_STEP, MIN_SEGMENT, PoolCore, lock};
use super::lend::{self, Loan, Source};
use super::placement::{BLOCK_ALIGN, BlockKind, CLASSES, Heap};
use super::remap::{self, Cover, Donor, Hole};
use crate::backend::DevicePtr;
use crate::backend::virtual_memory::VirtualMemory;
use crate::error::{Error, Result};
use crate::runtime::{Allocation, MemoryKind, Runtime};

/// How a pool gets memory from the backend.
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

/// Most mappings per physical granule before the least recently used
/// shadowed ones are unmapped (the high mark; unmapping goes down to the low).
const ALIASES_HIGH: usize = 4;
const ALIASES_LOW: usize = 3;

/// One mapping of a physical granule.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Alias {
    /// The granule (the backend's handle).
    pub(super) pid: u64,
    /// When it was last made active (the range's clock).
    pub(super) used: u64,
}

/// What a growth asks of [`PoolCore::map_for`].
#[derive(Copy, Clone, Debug)]
struct Ask {
    /// The block's size.
    want: u64,
    /// How much to map (at least `want`; the rest stays free).
    span: u64,
    /// The stream asking: free memory pending on it joins the block.
    stream: u64,
    /// Whether granules not in use elsewhere may be moved under the block.
    use_donors: bool,
}

/// A planned switch: (granule, its active alias, the alias to make active).
type Switch = (u64, u64, u64);

/// Physical allocations unmapped by a release before a growth but not yet
/// given back: (handle, bytes). The growth maps those whose size it needs
/// instead of creating as much (on an H100 giving back costs 0.6-1 µs per
/// MiB, creating 0.06-0.35, mapping with access 0.1-0.6: `hipmem bench vmm`,
/// `chunk_steps`); the rest go back before it creates anything.
pub(super) type Unmapped = Vec<(u64, u64)>;

/// The reservation of a pool on virtual memory and its physical granules.
pub(crate) struct VirtualRange {
    pub(super) base: u64,
    pub(super) size: u64,
    pub(super) granularity: u64,
    /// Every mapping: address of the granule → which physical granule.
    pub(super) aliases: BTreeMap<u64, Alias>,
    /// Physical granules by id: the active alias, every alias.
    pub(super) phys: HashMap<u64, Phys>,
    /// Physical allocations that back several consecutive units mapped in
    /// one call, by first address (see [`PoolCore::set_growth_mapping`]).
    pub(super) groups: BTreeMap<u64, Group>,
    /// Groups' free units mapped elsewhere, by address (`lend.rs`).
    pub(super) loans: BTreeMap<u64, Loan>,
    /// The last id given to a unit of a group.
    next_unit: u64,
    clock: u64,
    /// Seconds of driver time the pool may still spend moving memory (may
    /// go negative: the last move is charged in full).
    pub(super) tokens: f64,
    /// When `tokens` was last refilled.
    refilled: std::time::Instant,
}

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

/// A physical granule.
#[derive(Clone, Debug)]
pub(crate) struct Phys {
    /// Where the heap may use it.
    pub(super) active: u64,
    /// Every address it is mapped at (the active one included).
    pub(super) aliases: Vec<u64>,
    /// The first address of the group mapping it belongs to, if any: such a
    /// unit never moves and goes back to the backend with its whole group.
    pub(super) group: Option<u64>,
}

/// One physical allocation behind several consecutive units, mapped (and
/// given access) in one call each: on a GPU a mapping of 64 MiB or more
/// costs about 1 µs per MiB, one of up to 32 MiB about 25 (`hipmem bench
/// vmm`, `chunk_ops`).
#[derive(Copy, Clone, Debug)]
pub(crate) struct Group {
    /// The backend's handle.
    pub(super) handle: u64,
    /// Its size (a whole number of units).
    pub(super) len: u64,
}

/// The ids of grouped units (a unit alone is known by its backend handle).
const GROUPED_UNIT: u64 = 1 << 63;

impl VirtualRange {
    fn new(base: u64, size: u64, granularity: u64) -> VirtualRange {
        VirtualRange {
            base,
            size,
            granularity,
            aliases: BTreeMap::new(),
            phys: HashMap::new(),
            groups: BTreeMap::new(),
            loans: BTreeMap::new(),
            next_unit: 0,
            clock: 0,
            tokens: 0.0,
            refilled: std::time::Instant::now(),
        }
    }

    /// Adds the moving time earned since the last refill.
    fn refill(&mut self, now: std::time::Instant, budget: MoveBudget) {
        let earned = now.saturating_duration_since(self.refilled).as_secs_f64() * budget.share;
        self.tokens = (self.tokens + earned).min(budget.burst_s);
        self.refilled = now;
    }

    /// Charges the driver time a growth took.
    fn charge(&mut self, spent: std::time::Duration) {
        self.tokens -= spent.as_secs_f64();
    }

    /// Every mapping as it was made: (address, length), each unit alone
    /// (every alias) and each group whole.
    pub(super) fn mappings(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let alone = self
            .aliases
            .iter()
            .filter(|(_, alias)| self.phys.get(&alias.pid).is_none_or(|p| p.group.is_none()))
            .map(|(&addr, _)| (addr, self.granularity));
        alone
            .chain(self.groups.iter().map(|(&base, g)| (base, g.len)))
            .chain(self.loans.iter().map(|(&at, l)| l.alias(at)))
    }

    /// Every mapping of the group at `base` (`len` bytes): its own, then
    /// its loans' aliases, as (the loan's key or None, address, length).
    fn mappings_of(&self, base: u64, len: u64) -> Vec<(Option<u64>, u64, u64)> {
        let loans = self.loans.iter().filter(|(_, l)| l.group == base).map(|(&at, l)| {
            let (alias, whole) = l.alias(at);
            (Some(at), alias, whole)
        });
        std::iter::once((None, base, len)).chain(loans).collect()
    }

    /// Runs of the groups' units that are global free at home (`lend.rs`).
    fn lendable(&self, heap: &Heap) -> Vec<Source> {
        let g = self.granularity;
        let mut runs = Vec::new();
        for (&base, gr) in &self.groups {
            for (addr, len, kind) in heap.blocks_between(base, base + gr.len) {
                if kind != BlockKind::Free {
                    continue;
                }
                if let Some((start, len)) = lend::whole_units(addr, addr + len, base, gr.len, g) {
                    let loan = Loan { group: base, offset: start - base, len, whole: gr.len };
                    runs.push(Source { at: start, loan });
                }
            }
        }
        runs
    }

    /// The loans whose every byte is global free: (address, loan).
    fn free_loans(&self, heap: &Heap) -> Vec<(u64, Loan)> {
        self.loans
            .iter()
            .filter(|(at, l)| heap.is_global_free(**at, l.len))
            .map(|(&at, &l)| (at, l))
            .collect()
    }

    /// Sends every wholly free loan home with no driver call: its units are
    /// used at their addresses in their group again (shadowed there while
    /// lent) and the loan's addresses are shadowed instead (its alias stays
    /// mapped until [`PoolCore::unmap_idle_loans`]).
    fn send_free_loans_home(&self, heap: &mut Heap) {
        for (at, l) in self.free_loans(heap) {
            let home = l.group + l.offset;
            if heap.is_shadowed_part(home, l.len) && heap.shadow(at, l.len) {
                heap.unshadow_part(home, l.len);
                heap.forget_group(at);
            }
        }
    }

    /// Whether every unit of the group at `base` (`len` bytes) is global
    /// free where it is used (each of its mappings holds only global free
    /// and shadowed blocks): when its memory last changed, or None.
    fn group_idle(&self, heap: &Heap, base: u64, len: u64) -> Option<u64> {
        let mut freed = 0;
        for (_, at, len) in self.mappings_of(base, len) {
            for (addr, _, kind) in heap.blocks_between(at, at + len) {
                match kind {
                    BlockKind::Free => freed = freed.max(heap.global_free_run(addr.max(at), 1)?.1),
                    BlockKind::Shadowed => {}
                    BlockKind::Other => return None,
                }
            }
        }
        Some(freed)
    }

    /// The physical bytes the range holds.
    pub(super) fn physical_bytes(&self) -> u64 {
        self.phys.len() as u64 * self.granularity
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// Makes `to` (a shadowed alias of `pid`) the active one: the heap
    /// shadows the old active alias (all free) and hands `to` out instead.
    fn switch(&mut self, heap: &mut Heap, pid: u64, to: u64) -> bool {
        let g = self.granularity;
        let Some(p) = self.phys.get_mut(&pid) else { return false };
        let from = p.active;
        if from == to || !heap.is_shadowed(to, g) || !heap.shadow(from, g) {
            return false;
        }
        if !heap.unshadow(to, g) {
            heap.unshadow(from, g);
            return false;
        }
        p.active = to;
        tracing::trace!(target: "hipmem::pool", "switched granule {pid:#x} from={from:#x} to={to:#x}");
        let now = self.tick();
        if let Some(a) = self.aliases.get_mut(&to) {
            a.used = now;
        }
        true
    }

    /// Granules not in use (their active alias all global free) that may
    /// move (not part of a group).
    fn donors(&self, heap: &Heap) -> Vec<Donor> {
        let g = self.granularity;
        self.phys
            .iter()
            .filter(|(_, p)| p.group.is_none())
            .filter_map(|(&pid, p)| {
                let (_, freed) = heap.global_free_run(p.active, g)?;
                Some(Donor { pid, active: p.active, freed })
            })
            .collect()
    }

    /// The pieces of size class `class` as a switch sees them.
    fn switch_pieces(&self, heap: &Heap, class: usize) -> Vec<(u64, u64, Cover)> {
        let g = self.granularity;
        heap.class_blocks(class)
            .map(|(addr, len, kind)| {
                let cover = match kind {
                    BlockKind::Free => Cover::Free,
                    BlockKind::Shadowed => {
                        match self.aliases.get(&addr).and_then(|a| Some((a.pid, self.phys.get(&a.pid)?))) {
                            // A group's unit lent elsewhere (`lend.rs`): its
                            // home is part of the group's one mapping.
                            Some((_, p)) if p.group.is_some() => Cover::Blocked,
                            Some((pid, p)) if heap.is_global_free(p.active, g) => {
                                Cover::Switchable(pid, p.active)
                            }
                            Some(_) => Cover::Repairable,
                            // An alias of a group not used there (`lend.rs`).
                            None => Cover::Blocked,
                        }
                    }
                    BlockKind::Other => Cover::Blocked,
                };
                (addr, len, cover)
            })
            .collect()
    }

    /// How `[addr, addr + want)` (where a block of this size went before)
    /// can become one free run again: the switches it needs (pid, from, to),
    /// and the shadowed aliases whose granule is in use elsewhere, to be
    /// pointed at other granules (repairs). None if some address there is
    /// live, pending or unbacked.
    fn revisit(&self, heap: &Heap, addr: u64, want: u64) -> Option<(Vec<Switch>, Vec<u64>)> {
        let g = self.granularity;
        let end = addr.checked_add(want)?;
        let mut switches: Vec<Switch> = Vec::new();
        let mut repairs: Vec<u64> = Vec::new();
        let mut at = addr;
        for (block, len, kind) in heap.blocks_between(addr, end) {
            if block > at {
                return None;
            }
            match kind {
                BlockKind::Free => {}
                BlockKind::Shadowed => {
                    let pid = self.aliases.get(&block)?.pid;
                    let p = self.phys.get(&pid)?;
                    if p.group.is_some() {
                        // A lent unit's home (`lend.rs`): not unmapped alone.
                        return None;
                    }
                    let active = p.active;
                    let clash = switches.iter().any(|s| s.0 == pid) || (active + g > addr && active < end);
                    if clash || !heap.is_global_free(active, g) {
                        repairs.push(block);
                    } else {
                        switches.push((pid, active, block));
                    }
                }
                BlockKind::Other => return None,
            }
            at = block + len;
        }
        (at >= end).then_some((switches, repairs))
    }
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

/// The largest group a growth maps (larger growths map several; a
/// remainder under [`least_plain_group`] joins the last): the growth
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

/// The heap's frees that make a run's *first steps*: in them a pool lends
/// nothing (`lend.rs`) and pads no small growth to a whole group. Those
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
const FIRST_STEPS: u64 = 2048;

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
/// each start where the one before ends: one access call covers each (on a
/// GPU setting access costs tens of microseconds a call).
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
                    if let Err(e) = vm.address_free(DevicePtr(vr.base), vr.size) {
                        tracing::debug!(target: "hipmem", "freeing a pool's reservation at teardown: {e}");
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
        let guard = lock(range);
        if guard.is_some() {
            return Err(Error::InvalidValue("the pool has mapped memory already; its unit is fixed".into()));
        }
        self.unit.store(bytes, Ordering::Relaxed);
        Ok(())
    }

    /// The least a pool that only grows maps in one call (0: every unit
    /// alone): set with [`PoolCore::set_growth_mapping`], else
    /// `HIPMEM_POOL_GROUP_MIB`, else [`DEFAULT_GROWTH_MAPPING`].
    pub(crate) fn growth_mapping(&self) -> u64 {
        match self.group.load(Ordering::Relaxed) {
            u64::MAX => {
                static ENV: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
                *ENV.get_or_init(|| {
                    std::env::var("HIPMEM_POOL_GROUP_MIB")
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                        .map_or(DEFAULT_GROWTH_MAPPING, |mib| mib.saturating_mul(1 << 20))
                })
            }
            n => n,
        }
    }

    /// Sets the least a pool on virtual memory that only grows maps in one
    /// call: a growth of at least half of `bytes` in new units is one
    /// physical allocation, mapped and given access once, released whole
    /// (0: every unit alone).
    pub(crate) fn set_growth_mapping(&self, bytes: u64) -> Result<()> {
        if !matches!(self.backing, Backing::Virtual(_)) {
            return Err(Error::InvalidValue("a pool on segments maps nothing".into()));
        }
        if bytes == u64::MAX {
            return Err(Error::InvalidValue(format!("{bytes} bytes is not a mapping size")));
        }
        self.group.store(bytes, Ordering::Relaxed);
        Ok(())
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
            self.zone.set_on(false);
        }
        if let Some(vr) = lock(range).as_mut() {
            vr.tokens = budget.burst_s;
            vr.refilled = std::time::Instant::now();
        }
        Ok(())
    }

    /// Whether the pool gives unused memory back before it grows for a large
    /// request (`release.rs`): one that moves memory moves it under the
    /// request instead.
    pub(super) fn gives_back_before_growing(&self) -> bool {
        match self.backing {
            Backing::Segments => true,
            Backing::Virtual(_) => self.move_budget() == MoveBudget::GROW_FIRST,
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
            // over all its free memory. One that moves memory keeps the
            // sizes apart, so that a size's places repeat.
            Backing::Virtual(_) if self.one_class.load(Ordering::Relaxed) => 0,
            Backing::Virtual(_) => super::placement::size_class(want),
            Backing::Segments => 0,
        }
    }

    /// Gets memory for a block of `want` bytes from the backend and takes
    /// the block (so no other thread can take the new memory first):
    /// returns (address, size). On virtual memory, physical memory of wholly
    /// free chunks is moved under the block first and new memory is created
    /// only for the rest (`remap.rs`); with segments, a new segment.
    pub(crate) fn grow(&self, rt: &Runtime, want: u64, stream: u64) -> Result<(u64, u64)> {
        self.grow_in(rt, want, false, stream)
    }

    /// [`PoolCore::grow`]; `zone`: for a zone block (`zone.rs`), in the
    /// zone's part of the address range.
    pub(crate) fn grow_in(&self, rt: &Runtime, want: u64, zone: bool, stream: u64) -> Result<(u64, u64)> {
        self.grow_reusing(rt, want, zone, stream, Vec::new())
    }

    /// [`PoolCore::grow`], mapping the physical allocations in `unmapped`
    /// where memory of their size is needed; the rest go back before
    /// anything is created.
    pub(super) fn grow_reusing(
        &self,
        rt: &Runtime,
        want: u64,
        zone: bool,
        stream: u64,
        mut unmapped: Unmapped,
    ) -> Result<(u64, u64)> {
        if let Backing::Virtual(range) = &self.backing {
            let grown = self.grow_virtual(rt, range, want, zone, stream, &mut unmapped);
            // What the growth did not map again goes back off this thread.
            self.release_later(unmapped);
            return grown;
        }
        let reserved = lock(&self.heap).reserved();
        let step = (reserved / 32).clamp(MIN_SEGMENT, MAX_GROWTH_STEP);
        let mut size = want
            .max(step)
            .checked_next_multiple_of(MIN_SEGMENT)
            .ok_or_else(|| Error::OutOfMemory(format!("{want} bytes do not fit the address space")))?;
        if let Some(capacity) = self.capacity() {
            let room = capacity.saturating_sub(reserved);
            if want > room {
                return Err(Error::OutOfMemory(self.capacity_reached(reserved)));
            }
            size = size.min(room).max(want);
        }
        let ptr = match rt.backend().mem_alloc(self.device, size) {
            Ok(p) => p,
            Err(_) if size > want => {
                size = want;
                rt.backend().mem_alloc(self.device, size)?
            }
            Err(e) => return Err(e),
        };
        debug_assert!(ptr.0 % BLOCK_ALIGN == 0);
        CallCounts::add(&self.calls.segments_allocated);
        CallCounts::add_bytes(&self.calls.bytes_created, size);
        rt.allocations().insert(Allocation {
            base: ptr,
            size,
            kind: MemoryKind::PoolSegment(self.id),
            device: self.device,
        });
        crate::trace::pool_grow(self.id, self.device, ptr.0, size);
        let mut heap = lock(&self.heap);
        heap.add_segment(ptr.0, size);
        self.reserved_high.fetch_max(heap.reserved(), Ordering::AcqRel);
        heap.take(ptr.0, want);
        Ok((ptr.0, want))
    }

    /// [`PoolCore::grow`] on virtual memory (see `remap.rs`): switch an
    /// existing run, else map granules not in use and new ones.
    pub(super) fn grow_virtual(
        &self,
        rt: &Runtime,
        range: &Mutex<Option<VirtualRange>>,
        want: u64,
        zone: bool,
        stream: u64,
        unmapped: &mut Unmapped,
    ) -> Result<(u64, u64)> {
        let vm = rt
            .backend()
            .virtual_memory()
            .ok_or_else(|| Error::NotSupported("the backend lost its virtual memory".into()))?;
        let mut guard = lock(range);
        self.reserve_virtual(rt, vm, &mut guard)?;
        let vr = guard.as_mut().expect("reserved above");
        // (After the reservation: it chooses whether the classes are kept apart.)
        let class = self.class_for(want, zone);
        // Moving memory costs driver time (on a GPU about 30 µs per MiB:
        // cuMemSetAccess dominates); it is spent only while the pool's
        // budget lasts (a share of wall-clock time). Past it the pool grows
        // as a caching allocator would, and moves memory only when it
        // cannot grow.
        let started = std::time::Instant::now();
        vr.refill(started, self.move_budget());
        if vr.tokens <= 0.0 {
            // Growing is not charged: a caching allocator pays it too. Like
            // one, it grows by more than asked (up to twice the request, at
            // most 1/32 of what the pool holds), so that the requests that
            // follow fit without growing again. Twice, not more: what a
            // growth maps past the peak is held for nothing (replayed
            // PyTorch CNN training: 1.019 of its peak live bytes with eight
            // times, 1.009 with two; the other replays unchanged). Not while
            // a plan runs ([`PoolCore::growth_is_exact`]).
            let span = if self.growth_is_exact() {
                want
            } else {
                (vr.physical_bytes() / 32).min(want.saturating_mul(2)).max(want)
            };
            let ask = Ask { want, span, stream, use_donors: false };
            match self.map_for(vm, vr, class, ask, unmapped) {
                Ok(found) => return Ok(found),
                // Addresses, not memory, may have run out: loans holding
                // no unit in use there give theirs back (`lend.rs`).
                Err(_) if self.unmap_idle_loans(vm, vr) > 0 => {
                    if let Ok(found) = self.map_for(vm, vr, class, ask, unmapped) {
                        return Ok(found);
                    }
                }
                Err(_) => {}
            }
        }
        self.release_later(std::mem::take(unmapped));
        self.wait_for_own_frees(rt, stream);
        let before = self.calls.snapshot();
        let result = self.grow_by_moving(vm, vr, class, want, stream);
        let after = self.calls.snapshot();
        // Charged only if memory moved (an unmap, or a map of a granule that
        // existed): plain growth is what any allocator pays.
        if after.unmaps > before.unmaps
            || after.maps - before.maps > after.granules_created - before.granules_created
        {
            vr.charge(started.elapsed());
        }
        result
    }

    /// Before memory moves: waits for `stream`'s pending frees, so that the
    /// memory they hold may move. Only memory whose frees have completed
    /// moves, and a pool that may move keeps its size classes apart; where
    /// the device runs behind the host (a PyTorch training loop), nothing
    /// would be left to move, and such a pool held more than one that only
    /// grows. Waiting is what moving trades time for.
    pub(super) fn wait_for_own_frees(&self, rt: &Runtime, stream: u64) {
        if stream == super::core::ORPHAN_STREAM || !lock(&self.heap).has_pending(stream) {
            return;
        }
        let Some((clock, raw)) = self.stream_of(stream) else { return };
        let t0 = std::time::Instant::now();
        if self.learn_completed(rt, &clock, raw, true) {
            lock(&self.heap).promote(stream, clock.completed_tag());
        }
        tracing::debug!(target: "hipmem::pool", "pool {:#x}: waited {:?} for stream {stream}'s frees", self.id, t0.elapsed());
    }

    /// [`PoolCore::grow_virtual`] with memory moved where it helps: revisit
    /// a place, the run with the fewest repairs, or a plan of idle and new
    /// granules.
    fn grow_by_moving(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        class: usize,
        want: u64,
        stream: u64,
    ) -> Result<(u64, u64)> {
        // 1. Where a block of this size went last: switch its granules back,
        //    and point the few aliases whose granule is in use elsewhere at
        //    other granules (a layout that repeats converges to no mapping).
        let last = {
            let heap = lock(&self.heap);
            let places = heap.places_of(want);
            places
                .iter()
                .rev()
                .filter_map(|&at| Some((at, vr.revisit(&heap, at, want)?)))
                .min_by_key(|(_, (_, repairs))| repairs.len())
        };
        if let Some((at, (switches, repairs))) = last {
            if repairs.len() as u64 * vr.granularity <= want / 2 + vr.granularity {
                if let Ok(found) = self.revisit_place(vm, vr, at, want, &switches, &repairs) {
                    return Ok(found);
                }
            }
        }
        // 2. The existing run that needs the fewest repairs, if they are few.
        let run = {
            let heap = lock(&self.heap);
            remap::find_run(want, vr.granularity, vr.switch_pieces(&heap, class))
        };
        if let Some(run) = run {
            if run.repairs.len() as u64 * vr.granularity <= want / 2 + vr.granularity {
                if let Ok(found) = self.revisit_place(vm, vr, run.start, want, &run.switches, &run.repairs) {
                    return Ok(found);
                }
            }
        }
        // 3. Map: granules not in use elsewhere, new ones for the rest.
        let mut result =
            self.map_for(vm, vr, class, Ask { want, span: want, stream, use_donors: true }, &mut Vec::new());
        if result.is_err() && self.evict_aliases(vm, vr, Some(class), usize::MAX) > 0 {
            // Addresses ran out in this class: its shadowed aliases went.
            result = self.map_for(
                vm,
                vr,
                class,
                Ask { want, span: want, stream, use_donors: true },
                &mut Vec::new(),
            );
        }
        let mapped = vr.aliases.len();
        if mapped > ALIASES_HIGH * vr.phys.len().max(1) {
            let excess = mapped - ALIASES_LOW * vr.phys.len().max(1);
            self.evict_aliases(vm, vr, None, excess);
        }
        result
    }

    /// Step 1 of [`PoolCore::grow_virtual`]: makes `[at, at + want)` free by
    /// `switches` and by pointing the shadowed aliases `repairs` at granules
    /// not in use (or new ones), then takes it.
    fn revisit_place(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        at: u64,
        want: u64,
        switches: &[Switch],
        repairs: &[u64],
    ) -> Result<(u64, u64)> {
        let g = vr.granularity;
        let end = at + want;
        let access = lock(&self.access).clone();
        // The repairs' new granules: not in use, not switched here, not active here.
        let donors: Vec<Donor> = if repairs.is_empty() {
            Vec::new()
        } else {
            let heap = lock(&self.heap);
            let mut d: Vec<Donor> = vr
                .donors(&heap)
                .into_iter()
                .filter(|d| !(switches.iter().any(|s| s.0 == d.pid) || (d.active + g > at && d.active < end)))
                .collect();
            d.sort_by_key(|d| (d.freed, d.active));
            d
        };
        if donors.len() < repairs.len() {
            // Repairs come from granules not in use, never from new ones: a
            // place that needs new memory is no better than growing, and
            // growing makes only what is missing. (Without this rule a pool
            // whose frees lag behind the host, as a GPU's do, revisited
            // places with new granules while its old ones waited: PyTorch
            // GPT training with HIPMEM_POOL_MOVE_BURST_MS held 1.22 of its
            // peak live bytes, against 1.10 without moving.)
            return Err(Error::OutOfMemory(format!(
                "{} granules not in use for {} repairs at {at:#x}",
                donors.len(),
                repairs.len()
            )));
        }
        let mut heap = lock(&self.heap);
        for &(pid, _, to) in switches {
            if !vr.switch(&mut heap, pid, to) {
                return Err(Error::Unknown("a planned switch failed".into()));
            }
        }
        let mut donors = donors.into_iter();
        for &r in repairs {
            // The alias at `r` goes; another granule is mapped there.
            if !heap.is_shadowed(r, g) {
                return Err(Error::Unknown("a planned repair is not shadowed".into()));
            }
            drop(heap);
            tracing::trace!(target: "hipmem::pool", "repaired the alias at {r:#x}");
            vm.mem_unmap(DevicePtr(r), g)?;
            CallCounts::add(&self.calls.unmaps);
            heap = lock(&self.heap);
            heap.unback_shadowed(r, g);
            if let Some(old) = vr.aliases.remove(&r) {
                if let Some(p) = vr.phys.get_mut(&old.pid) {
                    p.aliases.retain(|&a| a != r);
                }
            }
            let now = vr.tick();
            // The donors were listed before the heap lock was dropped: one
            // another thread has taken since is skipped.
            match donors.find(|d| heap.shadow(d.active, g)) {
                Some(d) => {
                    drop(heap);
                    let mapped = map_with_access(&self.calls, vm, &access, r, g, d.pid);
                    heap = lock(&self.heap);
                    if let Err(e) = mapped {
                        let _ = vm.mem_unmap(DevicePtr(r), g);
                        heap.unshadow(d.active, g);
                        return Err(e);
                    }
                    heap.back(r, g);
                    vr.aliases.insert(r, Alias { pid: d.pid, used: now });
                    if let Some(p) = vr.phys.get_mut(&d.pid) {
                        p.active = r;
                        p.aliases.push(r);
                    }
                }
                None => {
                    if self.capacity().is_some_and(|c| vr.physical_bytes() + g > c) {
                        return Err(Error::OutOfMemory(self.capacity_reached(vr.physical_bytes())));
                    }
                    drop(heap);
                    let made = self.map_new_granule(vm, &access, r, g, &mut Vec::new());
                    heap = lock(&self.heap);
                    let pid = made?;
                    crate::trace::pool_grow(self.id, self.device, r, g);
                    heap.back(r, g);
                    vr.aliases.insert(r, Alias { pid, used: now });
                    vr.phys.insert(pid, Phys { active: r, aliases: vec![r], group: None });
                }
            }
        }
        self.reserved_high.fetch_max(heap.reserved(), Ordering::AcqRel);
        tracing::trace!(target: "hipmem::pool", want, switches = switches.len(), repairs = repairs.len(), "revisited a place");
        match heap.take_range(at, want) {
            Some(_) => {
                drop(heap);
                Ok((at, want))
            }
            None => {
                Err(Error::Unknown(format!("pool {:#x}: {at:#x} is not free after revisiting it", self.id)))
            }
        }
    }

    /// Step 3 of [`PoolCore::grow_virtual`].
    fn map_for(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        class: usize,
        ask: Ask,
        unmapped: &mut Unmapped,
    ) -> Result<(u64, u64)> {
        let Ask { want, span, stream, use_donors } = ask;
        let g = vr.granularity;
        let span = span.max(want);
        let group_min = self.growth_mapping();
        let least_group = least_plain_group(group_min);
        let (mut plan, owners, lent) = {
            let mut heap = lock(&self.heap);
            let first_steps = heap.frees() < FIRST_STEPS;
            let reserved = vr.physical_bytes();
            let holes: Vec<Hole> = heap
                .unbacked_ranges_of(class)
                .into_iter()
                .map(|(start, size)| Hole {
                    start,
                    size,
                    before: heap.usable_free_ending_at(start, stream),
                    after: heap.usable_free_starting_at(start + size, stream),
                })
                .collect();
            let donors = if use_donors { vr.donors(&heap) } else { Vec::new() };
            let room = self.capacity().map(|c| c.saturating_sub(reserved) / g);
            let plan = (span > want).then(|| remap::plan(span, g, &holes, &donors, room)).flatten();
            let Some(mut plan) = plan.or_else(|| remap::plan(want, g, &holes, &donors, room)) else {
                let largest = holes.iter().map(|h| h.size).max().unwrap_or(0);
                return Err(Error::OutOfMemory(match room {
                    Some(room) if room * g + donors.len() as u64 * g < want => {
                        self.capacity_reached(reserved)
                    }
                    _ => format!(
                        "the pool's {}-byte address reservation has no room for {want} more bytes (largest unbacked range {largest})",
                        vr.size
                    ),
                }));
            };
            // Out of the free space until the block is taken: the runs it
            // joins, and the granules it takes over (their old addresses).
            // (Each keeps its owner: global, or pending on this stream.)
            let mut owners = (
                plan.prefix.and_then(|(addr, len)| heap.take(addr, len)),
                plan.suffix.and_then(|(addr, len)| heap.take(addr, len)),
            );
            for &(pid, _) in &plan.reuse {
                if let Some(p) = vr.phys.get(&pid) {
                    heap.shadow(p.active, g);
                }
            }
            // Before anything is created, where the growth would set a new
            // peak: the groups' free units at the ends of their groups, and
            // wholly free groups (`lend.rs`), in aliases of their groups laid
            // out in a hole of their own. Only if that creates less than the
            // plan above (which may join free memory around its hole). (Not
            // for a plan's new piece, which is one group of its own.)
            let mut lent: Vec<(Source, u64)> = Vec::new();
            let arena =
                self.exact_growth.load(Ordering::Relaxed) || self.arena_growth.load(Ordering::Relaxed);
            if lend::enabled()
                && !self.lending_refused.load(Ordering::Relaxed)
                && !use_donors
                && !arena
                && !first_steps
                && plan.reuse.is_empty()
                && !plan.new_granules.is_empty()
                && !vr.groups.is_empty()
            {
                let end = plan.block + want;
                let planned_new = plan.new_granules.iter().filter(|&&a| a < end).count() as u64 * g;
                let peak = self.reserved_high.load(Ordering::Acquire);
                let start = plan.prefix.map_or(plan.block, |(a, n)| a + n);
                let growth = lend::Growth {
                    start,
                    size: holes.iter().find(|h| h.start == start).map_or(0, |h| h.size),
                    before: plan.prefix.map_or(0, |p| p.1),
                };
                let spaces: Vec<(u64, u64)> = holes.iter().map(|h| (h.start, h.size)).collect();
                let layout = (heap.reserved() + planned_new > peak)
                    .then(|| lend::layout(want, g, &vr.lendable(&heap), growth, &spaces, lend::MOST_SOURCES))
                    .flatten()
                    .filter(|l| (l.new_units.len() as u64) * g < planned_new);
                if let Some(l) = layout {
                    let mut shadowed = Vec::new();
                    for &(s, at) in &l.lent {
                        if !heap.shadow(s.at, s.loan.len) {
                            break;
                        }
                        shadowed.push((s, at));
                    }
                    if shadowed.len() == l.lent.len() {
                        // The runs the plan was to join and the layout does
                        // not stay free.
                        if !l.joins_before {
                            if let (Some((addr, _)), Some(owner)) = (plan.prefix, owners.0.take()) {
                                heap.release_block(addr, owner);
                            }
                        }
                        if let (Some((addr, _)), Some(owner)) = (plan.suffix, owners.1.take()) {
                            heap.release_block(addr, owner);
                        }
                        plan = remap::Plan {
                            block: l.block,
                            prefix: if l.joins_before { plan.prefix } else { None },
                            suffix: None,
                            reuse: Vec::new(),
                            new_granules: l.new_units,
                            room: 0,
                        };
                        lent = shadowed;
                    } else {
                        for (s, _) in shadowed {
                            heap.unshadow(s.at, s.loan.len);
                        }
                    }
                }
            }
            // A growth of fewer new units than one group maps a whole group
            // where the pool is large enough (a group is at most 1/8 of
            // it) and the hole has room: one driver allocation instead of
            // one per unit (about 55 µs each on an H100), and the rest stays free
            // for the requests that follow. (Not in a run's first steps,
            // [`FIRST_STEPS`]; not for a plan's new piece, which is grown
            // exactly; not in a pool with a maxSize; in one with a size
            // limit, only where the whole group fits under it; not where
            // units were lent.)
            let least = group_min / g;
            let n = plan.new_granules.len() as u64;
            if !use_donors
                && !first_steps
                && lent.is_empty()
                && !self.growth_is_exact()
                && group_min > 0
                && self.props.handle_types == 0
                && plan.reuse.is_empty()
                && n > 0
                && n < least
                && reserved / 8 >= group_min
                && self.props.max_size == 0
                && room.is_none_or(|r| r >= least)
                && plan.room >= (least - n) * g
            {
                let last = *plan.new_granules.last().expect("n > 0");
                plan.new_granules.extend((1..=least - n).map(|i| last + i * g));
            }
            (plan, owners, lent)
        };
        tracing::trace!(target: "hipmem::pool", want, moved = plan.reuse.len(), new = plan.new_granules.len(), "remapping");
        // Without the heap's lock: map.
        let access = lock(&self.access).clone();
        let mut mapped: Vec<(u64, u64, bool)> = Vec::new(); // (at, pid, new)
        let mut undo: Vec<u64> = Vec::new(); // old active aliases to give back
        let mut failed: Option<Error> = None;
        // Lent units first: each in an alias of its whole group (the driver
        // maps a physical allocation only whole), access once for aliases
        // that follow each other.
        let mut loans_made: Vec<(Source, u64)> = Vec::new();
        let mut loans_failed: Vec<Source> = Vec::new();
        for &(s, at) in &lent {
            let (alias, whole) = s.loan.alias(at);
            let handle = vr.groups.get(&s.loan.group).map(|gr| gr.handle);
            let mapped = match handle {
                Some(h) => vm.mem_map(DevicePtr(alias), whole, 0, h),
                None => {
                    Err(Error::Unknown(format!("pool {:#x}: lent units of a group that is gone", self.id)))
                }
            };
            match mapped {
                Ok(()) => {
                    CallCounts::add(&self.calls.maps);
                    loans_made.push((s, at));
                }
                Err(e) => {
                    // Made new instead (below), and never asked again.
                    tracing::warn!(target: "hipmem", "pool {:#x}: mapping a second alias of a group failed ({e}); the pool lends no more", self.id);
                    self.lending_refused.store(true, Ordering::Relaxed);
                    loans_failed.push(s);
                    plan.new_granules.extend((at..at + s.loan.len).step_by(g as usize));
                }
            }
        }
        if !loans_failed.is_empty() {
            plan.new_granules.sort_unstable();
        }
        let spans: Vec<(u64, u64)> = loans_made.iter().map(|(s, at)| s.loan.alias(*at)).collect();
        let mut kept = Vec::with_capacity(loans_made.len());
        for run in adjacent_runs(&spans) {
            let start = spans[run.start].0;
            let (last, whole) = spans[run.end - 1];
            match give_access(vm, &access, start, last + whole - start) {
                Ok(()) => {
                    for (s, _) in &loans_made[run.clone()] {
                        CallCounts::add_bytes(&self.calls.bytes_lent, s.loan.len);
                    }
                    kept.extend_from_slice(&loans_made[run]);
                }
                Err(e) => {
                    for (&(alias, whole), &(s, _)) in spans[run.clone()].iter().zip(&loans_made[run]) {
                        let _ = vm.mem_unmap(DevicePtr(alias), whole);
                        loans_failed.push(s);
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        let loans_made = kept;
        if failed.is_some() {
            // Nothing new is made on a failed growth.
            plan.new_granules.clear();
        }
        for &(pid, at) in &plan.reuse {
            match map_with_access(&self.calls, vm, &access, at, g, pid) {
                Ok(()) => mapped.push((at, pid, false)),
                Err(e) => {
                    let _ = vm.mem_unmap(DevicePtr(at), g);
                    if let Some(p) = vr.phys.get(&pid) {
                        undo.push(p.active);
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        // New units in one run, enough of them: one physical allocation and
        // one mapping (a pool that only grows, and is not shared: its units
        // never move, and export hands out one handle per unit).
        let grouped = failed.is_none()
            && !use_donors
            && group_min > 0
            && self.props.handle_types == 0
            && plan.reuse.is_empty()
            && (plan.new_granules.len() as u64 * g >= least_group
                || self.arena_growth.load(Ordering::Relaxed))
            && plan.new_granules.windows(2).all(|w| w[1] == w[0] + g);
        let mut groups: Vec<(u64, Group)> = Vec::new();
        if grouped {
            // Groups of at most MAX_GROUP: memory that a long-lived block
            // keeps from going back is at most one group around it.
            // (A remainder smaller than the least group joins the last.)
            let n = plan.new_granules.len();
            // (A plan's arena piece goes back whole anyway: one group.)
            let per = if self.exact_growth.load(Ordering::Relaxed) {
                n
            } else {
                (MAX_GROUP.max(group_min) / g).max(1) as usize
            };
            let least = (least_group / g).max(1) as usize;
            let mut chunks = Vec::new();
            let mut i = 0;
            while i < n {
                let mut len = per.min(n - i);
                if n - i - len < least {
                    len = n - i;
                }
                chunks.push(&plan.new_granules[i..i + len]);
                i += len;
            }
            let lens: Vec<u64> = chunks.iter().map(|c| c.len() as u64 * g).collect();
            self.release_unmapped_but(unmapped, &lens);
            for chunk in chunks {
                let (first, len) = (chunk[0], chunk.len() as u64 * g);
                match self.create_and_map(vm, first, len, unmapped) {
                    Ok(handle) => groups.push((first, Group { handle, len })),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            // Access in one call for the groups mapped (consecutive, as the
            // units are): on a GPU each call costs tens of microseconds
            // beyond its size's share, and a growth of 2 GiB is 16 groups.
            if let (Some(&(start, _)), Some(&(last, gr))) = (groups.first(), groups.last()) {
                if let Err(e) = give_access(vm, &access, start, last + gr.len - start) {
                    for (at, gr) in groups.drain(..) {
                        unmap_and_release(&self.calls, vm, at, gr.len, gr.handle);
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        if failed.is_none() && !grouped {
            // Each unit its own physical allocation (it goes back alone),
            // access given once per run of consecutive units: on a GPU
            // setting access is most of a small mapping's cost, and one call
            // covers several mappings.
            let mut fresh: Vec<(u64, u64)> = Vec::new(); // (at, pid), no access yet
            self.release_unmapped_but(unmapped, &vec![g; plan.new_granules.len()]);
            for &at in &plan.new_granules {
                match self.create_and_map(vm, at, g, unmapped) {
                    Ok(pid) => fresh.push((at, pid)),
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            let spans: Vec<(u64, u64)> = fresh.iter().map(|&(at, _)| (at, g)).collect();
            for run in adjacent_runs(&spans) {
                let (start, len) = (fresh[run.start].0, run.len() as u64 * g);
                match give_access(vm, &access, start, len) {
                    Ok(()) => mapped.extend(fresh[run].iter().map(|&(at, pid)| (at, pid, true))),
                    Err(e) => {
                        for &(at, pid) in &fresh[run] {
                            unmap_and_release(&self.calls, vm, at, g, pid);
                        }
                        failed.get_or_insert(e);
                    }
                }
            }
        }
        let now = vr.tick();
        let mut heap = lock(&self.heap);
        for &(at, pid, new) in &mapped {
            tracing::trace!(target: "hipmem::pool", "mapped granule {pid:#x} at={at:#x} new={new}");
            heap.back(at, g);
            vr.aliases.insert(at, Alias { pid, used: now });
            if new {
                crate::trace::pool_grow(self.id, self.device, at, g);
                vr.phys.insert(pid, Phys { active: at, aliases: vec![at], group: None });
            } else if let Some(p) = vr.phys.get_mut(&pid) {
                p.active = at;
                p.aliases.push(at);
            }
        }
        for (first, gr) in groups {
            tracing::trace!(target: "hipmem::pool", "mapped a group of {} units at={first:#x}", gr.len / g);
            heap.back(first, gr.len);
            crate::trace::pool_grow(self.id, self.device, first, gr.len);
            for at in (first..first + gr.len).step_by(g as usize) {
                vr.next_unit += 1;
                let id = GROUPED_UNIT | vr.next_unit;
                vr.aliases.insert(at, Alias { pid: id, used: now });
                vr.phys.insert(id, Phys { active: at, aliases: vec![at], group: Some(first) });
            }
            heap.note_group(first, gr.len);
            vr.groups.insert(first, gr);
        }
        for old in undo {
            heap.unshadow(old, g);
        }
        for &(s, at) in &loans_made {
            tracing::trace!(target: "hipmem::pool", "lent {} units of the group at {:#x} at={at:#x}", s.loan.len / g, s.loan.group);
            let (alias, whole) = s.loan.alias(at);
            // The alias is used only where the lent units are: the rest of
            // it is shadowed at once (never free, so no neighbour's free
            // run can take it in).
            if at > alias {
                heap.back_shadowed(alias, at - alias);
            }
            if alias + whole > at + s.loan.len {
                heap.back_shadowed(at + s.loan.len, alias + whole - at - s.loan.len);
            }
            heap.back(at, s.loan.len);
            vr.loans.insert(at, s.loan);
            self.lending.store(true, Ordering::Relaxed);
            // Best fit keeps a wholly free loan whole where it can, as it
            // does a group: it goes home at the next slow allocation.
            heap.note_group(at, s.loan.len);
        }
        for s in loans_failed {
            // The units are used at home again.
            heap.unshadow(s.at, s.loan.len);
        }
        self.reserved_high.fetch_max(heap.reserved(), Ordering::AcqRel);
        // The runs the block was to join go back to the free space (and
        // merge with what was just mapped next to them).
        if let (Some((addr, _)), Some(owner)) = (plan.prefix, owners.0) {
            heap.release_block(addr, owner);
        }
        if let (Some((addr, _)), Some(owner)) = (plan.suffix, owners.1) {
            heap.release_block(addr, owner);
        }
        if let Some(e) = failed {
            return Err(e);
        }
        match heap.take_range(plan.block, want) {
            Some(_) => Ok((plan.block, want)),
            None => Err(Error::Unknown(format!(
                "pool {:#x}: the run planned at {:#x} for {want} bytes is not free after mapping it",
                self.id, plan.block
            ))),
        }
    }

    /// Unmaps up to `count` shadowed aliases (of size class `class`, or any),
    /// least recently used first. Returns how many went.
    fn evict_aliases(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        class: Option<usize>,
        count: usize,
    ) -> usize {
        let g = vr.granularity;
        let part = vr.size / CLASSES as u64;
        let heap = lock(&self.heap);
        let mut victims: Vec<(u64, u64, u64)> = vr
            .aliases
            .iter()
            .filter(|&(&a, al)| {
                class.is_none_or(|c| (a - vr.base) / part == c as u64)
                    && vr.phys.get(&al.pid).is_some_and(|p| p.active != a && p.group.is_none())
                    && heap.is_shadowed(a, g)
            })
            .map(|(&a, al)| (al.used, a, al.pid))
            .collect();
        victims.sort_unstable();
        victims.truncate(count);
        drop(heap);
        let mut gone = 0;
        for &(_, addr, pid) in &victims {
            tracing::trace!(target: "hipmem::pool", "evicted an alias of granule {pid:#x} at={addr:#x}");
            if vm.mem_unmap(DevicePtr(addr), g).is_err() {
                continue;
            }
            CallCounts::add(&self.calls.unmaps);
            lock(&self.heap).unback_shadowed(addr, g);
            vr.aliases.remove(&addr);
            if let Some(p) = vr.phys.get_mut(&pid) {
                p.aliases.retain(|&a| a != addr);
            }
            gone += 1;
        }
        gone
    }

    /// Reserves the pool's address range on first use.
    pub(super) fn reserve_virtual(
        &self,
        rt: &Runtime,
        vm: &dyn crate::backend::virtual_memory::VirtualMemory,
        guard: &mut Option<VirtualRange>,
    ) -> Result<()> {
        if guard.is_some() {
            return Ok(());
        }
        let granularity = self.unit_for(vm)?;
        let total = rt.device_properties(self.device).ok().map(|d| d.total_memory).unwrap_or(1 << 30);
        // One part per size class, each four times the device's memory:
        // addresses are plentiful, physical memory moves between the parts,
        // and lent units (`lend.rs`) leave their homes' addresses taken.
        let part = (total.saturating_mul(4)).clamp(1 << 30, 1 << 42).next_multiple_of(granularity);
        let size = part * CLASSES as u64;
        let base = vm.address_reserve(size, granularity, DevicePtr::NULL)?;
        rt.allocations().insert(Allocation {
            base,
            size,
            kind: MemoryKind::PoolSegment(self.id),
            device: self.device,
        });
        let mut heap = lock(&self.heap);
        heap.keep_places();
        for class in 0..CLASSES {
            heap.add_reservation_for(class, base.0 + class as u64 * part, part);
        }
        // Zone blocks (`zone.rs`) use the largest class's part.
        let zone = super::zone::ZONE_CLASS as u64;
        self.zone.set_range(base.0 + zone * part, base.0 + (zone + 1) * part);
        drop(heap);
        let mut vr = VirtualRange::new(base.0, size, granularity);
        let budget = self.move_budget();
        vr.tokens = budget.burst_s;
        self.one_class.store(budget == MoveBudget::GROW_FIRST, Ordering::Relaxed);
        *guard = Some(vr);
        Ok(())
    }

    /// Releases unused memory: whole free segments (largest first), or
    /// granules not in use (the longest unused first), until `bytes` are
    /// released or none is left, keeping at least `floor` bytes reserved.
    /// Returns the bytes released.
    pub(crate) fn release_unused(&self, rt: &Runtime, bytes: u64, floor: u64) -> u64 {
        self.release_unused_keeping(rt, bytes, floor, None)
    }

    /// [`PoolCore::release_unused`]; with `keep`, the physical allocations
    /// on virtual memory are unmapped but not given back: they are listed
    /// there (counted as released) for the growth that follows
    /// ([`PoolCore::grow_reusing`]).
    pub(super) fn release_unused_keeping(
        &self,
        rt: &Runtime,
        bytes: u64,
        floor: u64,
        mut keep: Option<&mut Unmapped>,
    ) -> u64 {
        match &self.backing {
            Backing::Segments => {
                let mut released = 0;
                while released < bytes {
                    match self.release_segment(rt, floor) {
                        Some(n) => released += n,
                        None => break,
                    }
                }
                released
            }
            Backing::Virtual(range) => {
                let Some(vm) = rt.backend().virtual_memory() else { return 0 };
                let mut guard = lock(range);
                let Some(vr) = guard.as_mut() else { return 0 };
                let g = vr.granularity;
                let mut victims = {
                    let heap = lock(&self.heap);
                    vr.donors(&heap)
                };
                victims.sort_by_key(|d| (d.freed, d.active));
                let mut released = 0;
                for d in victims {
                    if released >= bytes {
                        break;
                    }
                    let mut heap = lock(&self.heap);
                    if heap.reserved().saturating_sub(g) < floor || !heap.unback(d.active, g) {
                        continue;
                    }
                    let Some(p) = vr.phys.remove(&d.pid) else { continue };
                    tracing::trace!(target: "hipmem::pool", "released granule {:#x} aliases={:x?}", d.pid, p.aliases);
                    for &a in &p.aliases {
                        if a != p.active {
                            heap.unback_shadowed(a, g);
                        }
                        vr.aliases.remove(&a);
                    }
                    drop(heap);
                    for &a in &p.aliases {
                        match vm.mem_unmap(DevicePtr(a), g) {
                            Ok(()) => CallCounts::add(&self.calls.unmaps),
                            Err(e) => {
                                tracing::warn!(target: "hipmem", "unmapping a pool granule failed: {e}")
                            }
                        }
                    }
                    crate::trace::pool_release(self.id, self.device, p.active, g);
                    self.release_or_keep(d.pid, g, keep.as_deref_mut());
                    released += g;
                }
                // Loans wholly free go home (`lend.rs`): their addresses
                // come back, and their groups may go back whole.
                self.unmap_idle_loans(vm, vr);
                // Groups whose every unit is free go back whole, the longest
                // unused first.
                let mut idle: Vec<(u64, u64, Group)> = {
                    let heap = lock(&self.heap);
                    vr.groups
                        .iter()
                        .filter_map(|(&base, &gr)| Some((vr.group_idle(&heap, base, gr.len)?, base, gr)))
                        .collect()
                };
                idle.sort_unstable_by_key(|&(freed, base, _)| (freed, base));
                for (_, base, gr) in idle {
                    if released >= bytes {
                        break;
                    }
                    if self.release_group(vm, vr, base, gr, floor, keep.as_deref_mut()) {
                        released += gr.len;
                    }
                }
                // A destroyed pool with nothing mapped gives its addresses back.
                let part = vr.size / CLASSES as u64;
                if self.is_destroyed()
                    && vr.aliases.is_empty()
                    && (0..CLASSES as u64).all(|k| lock(&self.heap).remove_reservation(vr.base + k * part))
                {
                    rt.allocations()
                        .remove_if(DevicePtr(vr.base), |a| a.kind == MemoryKind::PoolSegment(self.id));
                    if let Err(e) = vm.address_free(DevicePtr(vr.base), vr.size) {
                        tracing::warn!(target: "hipmem", "freeing a pool's reservation failed: {e}");
                    }
                    *guard = None;
                }
                released
            }
        }
    }

    /// Maps physical memory of `size` bytes at `at` with the pool's access
    /// ([`PoolCore::create_and_map`], then access); returns its handle.
    fn map_new_granule(
        &self,
        vm: &dyn VirtualMemory,
        access: &[AccessFlags],
        at: u64,
        size: u64,
        unmapped: &mut Unmapped,
    ) -> Result<u64> {
        let handle = self.create_and_map(vm, at, size, unmapped)?;
        if let Err(e) = give_access(vm, access, at, size) {
            unmap_and_release(&self.calls, vm, at, size, handle);
            return Err(e);
        }
        Ok(handle)
    }

    /// Maps physical memory of `size` bytes at `at`, with no access yet
    /// ([`give_access`]): an allocation of that size out of `unmapped` if
    /// there is one, else a new one. Returns its handle.
    fn create_and_map(
        &self,
        vm: &dyn VirtualMemory,
        at: u64,
        size: u64,
        unmapped: &mut Unmapped,
    ) -> Result<u64> {
        let calls = &self.calls;
        let handle = match unmapped.iter().position(|&(_, len)| len == size) {
            Some(i) => unmapped.swap_remove(i).0,
            None => match self.deferred.take(size) {
                // Queued to go back and not gone yet: mapped again instead.
                Some(handle) => handle,
                None => {
                    let created = match vm.mem_create_whole(self.device, size, self.props.handle_types) {
                        // Memory still queued to go back may be what the
                        // device lacks: once it has gone, try again.
                        Err(Error::OutOfMemory(_))
                            if self.deferred.queued_bytes() > 0 || self.deferred.busy() =>
                        {
                            self.deferred.wait_empty();
                            vm.mem_create_whole(self.device, size, self.props.handle_types)
                        }
                        other => other,
                    };
                    let handle = created?;
                    CallCounts::add(&calls.granules_created);
                    CallCounts::add_bytes(&calls.bytes_created, size);
                    handle
                }
            },
        };
        if let Err(e) = vm.mem_map(DevicePtr(at), size, 0, handle) {
            unmap_and_release(calls, vm, at, size, handle);
            return Err(e);
        }
        CallCounts::add(&calls.maps);
        Ok(handle)
    }

    /// Gives back (on the release worker) the physical allocations in
    /// `unmapped` that no size in `needed` (each used once) asks for.
    fn release_unmapped_but(&self, unmapped: &mut Unmapped, needed: &[u64]) {
        let mut needed = needed.to_vec();
        let mut unneeded = Vec::new();
        unmapped.retain(|&(handle, len)| {
            if let Some(i) = needed.iter().position(|&n| n == len) {
                needed.swap_remove(i);
                return true;
            }
            unneeded.push((handle, len));
            false
        });
        self.release_later(unneeded);
    }

    /// Gives back the unmapped physical allocation `handle` of `len` bytes,
    /// or with `keep` lists it there for the growth that follows
    /// ([`PoolCore::grow_reusing`]).
    fn release_or_keep(&self, handle: u64, len: u64, keep: Option<&mut Unmapped>) {
        match keep {
            Some(keep) => keep.push((handle, len)),
            None => {
                if let Some(vm) = self.backend.virtual_memory() {
                    super::deferred::release_now(vm, &self.calls, handle, len);
                }
            }
        }
    }

    /// Gives back the unmapped physical allocations in `unmapped` on the
    /// release worker (`deferred.rs`): what the allocation path gives back.
    pub(super) fn release_later(&self, unmapped: Unmapped) {
        self.deferred.give_back(unmapped);
    }

    /// On virtual memory: each physical unit is used at exactly one
    /// address (the heap's reserved bytes are the units'), and every loan's
    /// group is mapped (for tests, [`PoolCore::check_invariants`]).
    pub(crate) fn check_physical(&self) -> std::result::Result<(), String> {
        let Backing::Virtual(range) = &self.backing else { return Ok(()) };
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return Ok(()) };
        let reserved = lock(&self.heap).reserved();
        if reserved != vr.physical_bytes() {
            return Err(format!("the heap uses {reserved} bytes but {} are mapped", vr.physical_bytes()));
        }
        match vr.loans.iter().find(|(_, l)| !vr.groups.contains_key(&l.group)) {
            Some((at, l)) => Err(format!("the loan at {at:#x} is of a group at {:#x} that is gone", l.group)),
            None => Ok(()),
        }
    }

    /// Sends every wholly free loan home (`lend.rs`), on the slow path
    /// before best fit: no driver call. Skipped while another thread holds
    /// the range (a growth mapping memory): the slow path never waits for
    /// the driver, and the next one sends them.
    pub(super) fn switch_loans_home(&self) {
        if !self.lending.load(Ordering::Relaxed) {
            return;
        }
        let Backing::Virtual(range) = &self.backing else { return };
        let Ok(guard) = range.try_lock() else { return };
        let Some(vr) = guard.as_ref() else { return };
        vr.send_free_loans_home(&mut lock(&self.heap));
    }

    /// Unmaps every loan that holds no unit in use there (`lend.rs`):
    /// wholly free ones go home first. Returns how many went.
    fn unmap_idle_loans(&self, vm: &dyn VirtualMemory, vr: &mut VirtualRange) -> usize {
        let gone: Vec<(u64, Loan)> = {
            let mut heap = lock(&self.heap);
            vr.send_free_loans_home(&mut heap);
            let idle: Vec<(u64, Loan)> = vr
                .loans
                .iter()
                .filter(|(at, l)| {
                    let (alias, whole) = l.alias(**at);
                    heap.blocks_between(alias, alias + whole).all(|b| b.2 == BlockKind::Shadowed)
                })
                .map(|(&at, &l)| (at, l))
                .collect();
            for &(at, l) in &idle {
                let (alias, whole) = l.alias(at);
                unback_mapping(&mut heap, alias, whole);
                heap.forget_group(at);
            }
            idle
        };
        for &(at, l) in &gone {
            vr.loans.remove(&at);
            tracing::trace!(target: "hipmem::pool", "unmapped a loan of {} units at={at:#x}", l.len / vr.granularity);
            let (alias, whole) = l.alias(at);
            match vm.mem_unmap(DevicePtr(alias), whole) {
                Ok(()) => CallCounts::add(&self.calls.unmaps),
                Err(e) => tracing::warn!(target: "hipmem", "unmapping a pool loan failed: {e}"),
            }
        }
        if vr.loans.is_empty() {
            self.lending.store(false, Ordering::Relaxed);
        }
        gone.len()
    }

    /// Unmaps and releases the group at `base` if every unit of it is global
    /// free memory and `floor` bytes stay reserved without it. Returns
    /// whether it went.
    fn release_group(
        &self,
        vm: &dyn VirtualMemory,
        vr: &mut VirtualRange,
        base: u64,
        gr: Group,
        floor: u64,
        keep: Option<&mut Unmapped>,
    ) -> bool {
        let g = vr.granularity;
        let mut heap = lock(&self.heap);
        if heap.reserved().saturating_sub(gr.len) < floor || vr.group_idle(&heap, base, gr.len).is_none() {
            return false;
        }
        // Every unit is free where it is used (checked above): every
        // mapping of the group becomes unbacked, free and shadowed blocks
        // alike.
        let mappings = vr.mappings_of(base, gr.len);
        for &(key, at, m) in &mappings {
            unback_mapping(&mut heap, at, m);
            if let Some(key) = key {
                vr.loans.remove(&key);
                heap.forget_group(key);
            }
        }
        for at in (base..base + gr.len).step_by(g as usize) {
            if let Some(alias) = vr.aliases.remove(&at) {
                vr.phys.remove(&alias.pid);
            }
        }
        vr.groups.remove(&base);
        heap.forget_group(base);
        drop(heap);
        tracing::trace!(target: "hipmem::pool", "released a group of {} units at={base:#x}", gr.len / g);
        for (_, alias, whole) in mappings.into_iter().skip(1) {
            match vm.mem_unmap(DevicePtr(alias), whole) {
                Ok(()) => CallCounts::add(&self.calls.unmaps),
                Err(e) => tracing::warn!(target: "hipmem", "unmapping a loan of a pool group failed: {e}"),
            }
        }
        match vm.mem_unmap(DevicePtr(base), gr.len) {
            Ok(()) => CallCounts::add(&self.calls.unmaps),
            Err(e) => tracing::warn!(target: "hipmem", "unmapping a pool group failed: {e}"),
        }
        crate::trace::pool_release(self.id, self.device, base, gr.len);
        self.release_or_keep(gr.handle, gr.len, keep);
        true
    }

    /// The physical pieces behind the pool's memory, (address, bytes) in
    /// address order: each segment, or on virtual memory each group mapped
    /// in one call and each unit mapped alone, at the address the heap uses
    /// it. A piece goes back to the backend (or moves) only whole.
    pub(super) fn physical_pieces(&self) -> Vec<(u64, u64)> {
        let mut pieces: Vec<(u64, u64)> = match &self.backing {
            Backing::Segments => lock(&self.heap).segments().map(|s| (s.base, s.size)).collect(),
            Backing::Virtual(range) => {
                let guard = lock(range);
                let Some(vr) = guard.as_ref() else { return Vec::new() };
                let g = vr.granularity;
                vr.phys
                    .values()
                    .filter(|p| p.group.is_none())
                    .map(|p| (p.active, g))
                    .chain(vr.groups.iter().map(|(&base, gr)| (base, gr.len)))
                    .chain(vr.loans.iter().map(|(&at, l)| (at, l.len)))
                    .collect()
            }
        };
        pieces.sort_unstable();
        pieces
    }

    /// The longest run of consecutive groups whose every unit is global free
    /// memory: each group's (address, length), in address order (empty if
    /// there is none, or the pool is not on virtual memory). A plan's new
    /// piece goes there (`planned.rs`): the physical memory of the arena
    /// before it, kept mapped where it is rather than given back and
    /// created again.
    pub(super) fn free_group_chain(&self) -> Vec<(u64, u64)> {
        let Backing::Virtual(range) = &self.backing else { return Vec::new() };
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return Vec::new() };
        let heap = lock(&self.heap);
        // The longest run and the current one: (first index, groups, bytes).
        let groups: Vec<(u64, u64)> = vr.groups.iter().map(|(&base, gr)| (base, gr.len)).collect();
        let (mut best, mut run) = ((0, 0, 0u64), (0, 0, 0u64));
        for (i, &(base, len)) in groups.iter().enumerate() {
            let follows = run.1 > 0 && groups[i - 1].0 + groups[i - 1].1 == base;
            if heap.global_free_run(base, len).is_none() {
                run = (i + 1, 0, 0);
                continue;
            }
            run = if follows { (run.0, run.1 + 1, run.2 + len) } else { (i, 1, len) };
            if run.2 > best.2 {
                best = run;
            }
        }
        groups[best.0..best.0 + best.1].to_vec()
    }

    /// Whether memory for `len` bytes (rounded up to whole units) can be
    /// mapped at `at`: its addresses are unbacked.
    pub(super) fn can_map_at(&self, at: u64, len: u64) -> bool {
        let Backing::Virtual(range) = &self.backing else { return false };
        let guard = lock(range);
        let Some(vr) = guard.as_ref() else { return false };
        let Some(len) = len.checked_next_multiple_of(vr.granularity) else { return false };
        lock(&self.heap).is_unbacked(at, len)
    }

    /// Unmaps and releases the groups at `bases` whose every unit is global
    /// free memory. Returns the bytes released.
    pub(super) fn release_groups(&self, rt: &Runtime, bases: &[u64]) -> u64 {
        let Backing::Virtual(range) = &self.backing else { return 0 };
        let Some(vm) = rt.backend().virtual_memory() else { return 0 };
        let mut guard = lock(range);
        let Some(vr) = guard.as_mut() else { return 0 };
        let mut released = 0;
        for &base in bases {
            let Some(&gr) = vr.groups.get(&base) else { continue };
            if self.release_group(vm, vr, base, gr, 0, None) {
                released += gr.len;
            }
        }
        released
    }

    /// Releases the largest whole free segment that keeps `floor` bytes
    /// reserved; its size, or None.
    fn release_segment(&self, rt: &Runtime, floor: u64) -> Option<u64> {
        match &self.backing {
            Backing::Segments => {
                let seg = {
                    let mut heap = lock(&self.heap);
                    let reserved = heap.reserved();
                    let mut candidates: Vec<_> = heap
                        .releasable_segments()
                        .into_iter()
                        .filter(|s| reserved.saturating_sub(s.size) >= floor)
                        .collect();
                    candidates.sort_by_key(|s| std::cmp::Reverse(s.size));
                    let seg = candidates.into_iter().next()?;
                    heap.remove_segment(seg.base);
                    seg
                };
                rt.allocations()
                    .remove_if(DevicePtr(seg.base), |a| a.kind == MemoryKind::PoolSegment(self.id));
                crate::trace::pool_release(self.id, self.device, seg.base, seg.size);
                match rt.backend().mem_free(self.device, DevicePtr(seg.base)) {
                    Ok(()) => {
                        CallCounts::add(&self.calls.segments_freed);
                        CallCounts::add_bytes(&self.calls.bytes_released, seg.size);
                    }
                    Err(e) => tracing::warn!(target: "hipmem", "releasing a pool segment failed: {e}"),
                }
                Some(seg.size)
            }
            Backing::Virtual(_) => None,
        }
    }
}
