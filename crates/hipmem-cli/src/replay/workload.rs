//! A trace read into what replay and summary need: the allocation sequence
//! (allocations and frees, each on a stream), the live bytes after every
//! operation, the recording allocator's own reserved bytes, and what was odd.

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

use hipmem::trace::{Event, EventKind, TraceReader};
use serde::Serialize;

use super::pytorch;

/// Where the trace came from.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Source {
    /// A hipmem trace (JSON Lines).
    Hipmem {
        /// Its format version.
        version: u32,
        /// The recording process.
        pid: u32,
        /// Its backend, if the header names one.
        backend: Option<String>,
        /// Its command line.
        argv: Vec<String>,
        /// Whether the trace has its end line (stopped cleanly).
        complete: bool,
        /// Lines of kinds this hipmem does not know (skipped).
        skipped_lines: u64,
    },
    /// A PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot`).
    PytorchSnapshot {
        /// Devices with a trace.
        devices: usize,
        /// Trace entries of actions replay does not use (snapshot, annotate, ...).
        other_entries: u64,
    },
}

/// One step of the allocation sequence.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// Trace time, ns since its first event.
    pub t_ns: u64,
    /// Allocation or free.
    pub kind: OpKind,
    /// The allocation (index into [`Workload::allocs`]).
    pub slot: u32,
    /// The stream it is issued on (index into [`Workload::streams`]).
    pub stream: u32,
}

/// What an [`Op`] does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Allocate the slot's size.
    Alloc,
    /// Free the slot.
    Free,
}

/// One allocation of the trace.
#[derive(Copy, Clone, Debug)]
pub struct Alloc {
    /// Its address in the recording process.
    pub addr: u64,
    /// Bytes requested.
    pub size: u64,
    /// The stream it was allocated on.
    pub stream: u32,
    /// Index of its Alloc op.
    pub alloc_op: u32,
    /// Index of its Free op, if it was freed.
    pub free_op: Option<u32>,
}

/// A stream of the trace.
#[derive(Clone, Debug, Serialize)]
pub struct StreamInfo {
    /// Device ordinal in the recording.
    pub device: u32,
    /// The stream's id in the recording (a hipmem stream id, or a CUDA stream handle).
    pub id: u64,
}

/// What was wrong with the sequence (counted; the replay goes on).
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Anomalies {
    /// Frees of addresses the trace never allocated (skipped).
    pub unknown_frees: u64,
    /// Frees of addresses already freed (skipped).
    pub double_frees: u64,
    /// Allocations at an address still live: the trace missed a free (the old allocation is freed first).
    pub allocs_over_live: u64,
}

impl Anomalies {
    /// Whether anything was wrong.
    pub fn any(&self) -> bool {
        *self != Anomalies::default()
    }
}

/// Events of the recording allocator that replay does not issue.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Counts {
    /// Events read.
    pub events: u64,
    /// free_completed events.
    pub free_completed: u64,
    /// pool_grow (segment_alloc / segment_map) events.
    pub pool_grows: u64,
    /// pool_release (segment_free / segment_unmap) events.
    pub pool_releases: u64,
    /// trim events.
    pub trims: u64,
    /// OutOfMemory events: (time, requested bytes).
    pub ooms: Vec<(u64, u64)>,
}

/// A trace, ready to replay.
#[derive(Clone, Debug)]
pub struct Workload {
    /// The file name.
    pub name: String,
    /// Where it came from.
    pub source: Source,
    /// The allocation sequence.
    pub ops: Vec<Op>,
    /// The allocations.
    pub allocs: Vec<Alloc>,
    /// The streams, in order of first use.
    pub streams: Vec<StreamInfo>,
    /// Live bytes (requested) after each op.
    pub live_after: Vec<u64>,
    /// Most live bytes.
    pub peak_live: u64,
    /// The op at which the peak was first reached.
    pub peak_op: Option<usize>,
    /// Most live bytes counted in 256-byte granules (what a hipmem pool's UsedMemHigh reads).
    pub peak_live_granules: u64,
    /// The recording allocator's reserved bytes over time (time, bytes), where the trace says.
    pub recorded_reserved: Vec<(u64, u64)>,
    /// Whether times are real (false: every event at time 0, so the op index is the clock).
    pub timed: bool,
    /// What was odd.
    pub anomalies: Anomalies,
    /// Other events.
    pub counts: Counts,
}

/// The first bytes of a pickle (protocol 2 and later begin with PROTO).
fn is_pickle(head: &[u8]) -> bool {
    head.first() == Some(&0x80) && head.get(1).is_some_and(|&p| (2..=5).contains(&p))
}

/// The first bytes of a gzip stream.
fn is_gzip(head: &[u8]) -> bool {
    head.starts_with(&[0x1f, 0x8b])
}

impl Workload {
    /// Reads a hipmem trace or a PyTorch snapshot pickle (told apart by their
    /// first bytes), either of them plain or gzip-compressed.
    pub fn load(path: &Path) -> Result<Workload, String> {
        let name = path.display().to_string();
        let mut head = [0u8; 2];
        let mut file = std::fs::File::open(path).map_err(|e| format!("{name}: cannot open: {e}"))?;
        let n = file.read(&mut head).map_err(|e| format!("{name}: cannot read: {e}"))?;
        if is_pickle(&head[..n]) || is_gzip(&head[..n]) {
            let bytes = std::fs::read(path).map_err(|e| format!("{name}: cannot read: {e}"))?;
            Workload::from_bytes(&bytes, &name)
        } else {
            let reader = TraceReader::open(path).map_err(|e| e.to_string())?;
            Workload::from_trace(reader)
        }
    }

    /// [`Workload::load`] on bytes in memory (`name` names them in messages).
    pub fn from_bytes(bytes: &[u8], name: &str) -> Result<Workload, String> {
        if is_gzip(bytes) {
            let mut plain = Vec::new();
            flate2::read::MultiGzDecoder::new(bytes)
                .read_to_end(&mut plain)
                .map_err(|e| format!("{name}: not a readable gzip stream: {e}"))?;
            if is_gzip(&plain) {
                return Err(format!("{name}: compressed twice"));
            }
            return Workload::from_bytes(&plain, name);
        }
        if is_pickle(bytes) {
            Workload::from_pickle(bytes, name)
        } else {
            let reader = TraceReader::new(std::io::BufReader::new(bytes), name).map_err(|e| e.to_string())?;
            Workload::from_trace(reader)
        }
    }

    /// A hipmem trace.
    pub fn from_trace<R: std::io::BufRead>(mut reader: TraceReader<R>) -> Result<Workload, String> {
        let name = reader.file().to_string();
        let mut builder = Builder::new(name);
        for event in reader.by_ref() {
            builder.event(&event.map_err(|e| e.to_string())?);
        }
        let header = reader.header().clone();
        let source = Source::Hipmem {
            version: header.version,
            pid: header.pid,
            backend: header.backend,
            argv: header.argv,
            complete: reader.end().is_some(),
            skipped_lines: reader.skipped(),
        };
        Ok(builder.finish(source, None))
    }

    /// A PyTorch snapshot pickle.
    pub fn from_pickle(bytes: &[u8], name: &str) -> Result<Workload, String> {
        let snapshot = pytorch::read_snapshot(bytes, name)?;
        let mut builder = Builder::new(name.to_string());
        for event in &snapshot.events {
            builder.event(event);
        }
        let source =
            Source::PytorchSnapshot { devices: snapshot.devices, other_entries: snapshot.other_entries };
        Ok(builder.finish(source, snapshot.final_reserved))
    }

    /// Allocations in the sequence.
    pub fn alloc_count(&self) -> usize {
        self.allocs.len()
    }

    /// Time of op `i` (its index when the trace is untimed).
    pub fn time_of(&self, i: usize) -> u64 {
        if self.timed { self.ops[i].t_ns } else { i as u64 }
    }

    /// The span of the trace on its clock.
    pub fn duration(&self) -> u64 {
        if self.ops.is_empty() { 0 } else { self.time_of(self.ops.len() - 1) }
    }

    /// The slots live just after op `at`.
    pub fn live_at(&self, at: usize) -> Vec<u32> {
        self.allocs
            .iter()
            .enumerate()
            .filter(|(_, a)| a.alloc_op as usize <= at && a.free_op.is_none_or(|f| f as usize > at))
            .map(|(i, _)| i as u32)
            .collect()
    }
}

/// Builds a [`Workload`] from events in order.
struct Builder {
    name: String,
    ops: Vec<Op>,
    allocs: Vec<Alloc>,
    streams: Vec<StreamInfo>,
    stream_index: HashMap<(u32, u64), u32>,
    live: HashMap<u64, u32>,
    ever: std::collections::HashSet<u64>,
    live_bytes: u64,
    live_granules: u64,
    live_after: Vec<u64>,
    peak_live: u64,
    peak_op: Option<usize>,
    peak_live_granules: u64,
    reserved: i128,
    reserved_deltas: Vec<(u64, i128)>,
    any_time: bool,
    anomalies: Anomalies,
    counts: Counts,
}

fn granules(size: u64) -> u64 {
    size.max(1).div_ceil(256) * 256
}

impl Builder {
    fn new(name: String) -> Builder {
        Builder {
            name,
            ops: Vec::new(),
            allocs: Vec::new(),
            streams: Vec::new(),
            stream_index: HashMap::new(),
            live: HashMap::new(),
            ever: Default::default(),
            live_bytes: 0,
            live_granules: 0,
            live_after: Vec::new(),
            peak_live: 0,
            peak_op: None,
            peak_live_granules: 0,
            reserved: 0,
            reserved_deltas: Vec::new(),
            any_time: false,
            anomalies: Anomalies::default(),
            counts: Counts::default(),
        }
    }

    fn stream(&mut self, device: u32, id: u64) -> u32 {
        let next = self.streams.len() as u32;
        *self.stream_index.entry((device, id)).or_insert_with(|| {
            self.streams.push(StreamInfo { device, id });
            next
        })
    }

    fn push(&mut self, t_ns: u64, kind: OpKind, slot: u32, stream: u32) {
        let size = self.allocs[slot as usize].size;
        let index = self.ops.len();
        match kind {
            OpKind::Alloc => {
                self.live_bytes += size;
                self.live_granules += granules(size);
            }
            OpKind::Free => {
                self.live_bytes -= size;
                self.live_granules -= granules(size);
                self.allocs[slot as usize].free_op = Some(index as u32);
            }
        }
        self.ops.push(Op { t_ns, kind, slot, stream });
        self.live_after.push(self.live_bytes);
        if self.live_bytes > self.peak_live || self.peak_op.is_none() {
            self.peak_live = self.live_bytes;
            self.peak_op = Some(index);
        }
        self.peak_live_granules = self.peak_live_granules.max(self.live_granules);
    }

    fn event(&mut self, e: &Event) {
        self.counts.events += 1;
        self.any_time |= e.time_ns != 0;
        match e.kind {
            EventKind::Alloc => {
                let stream = self.stream(e.device, e.stream);
                if let Some(old) = self.live.remove(&e.addr) {
                    self.anomalies.allocs_over_live += 1;
                    self.push(e.time_ns, OpKind::Free, old, stream);
                }
                let slot = self.allocs.len() as u32;
                self.allocs.push(Alloc {
                    addr: e.addr,
                    size: e.size,
                    stream,
                    alloc_op: self.ops.len() as u32,
                    free_op: None,
                });
                self.live.insert(e.addr, slot);
                self.ever.insert(e.addr);
                self.push(e.time_ns, OpKind::Alloc, slot, stream);
            }
            EventKind::FreeRequested => match self.live.remove(&e.addr) {
                Some(slot) => {
                    let stream = self.stream(e.device, e.stream);
                    self.push(e.time_ns, OpKind::Free, slot, stream);
                }
                None if self.ever.contains(&e.addr) => self.anomalies.double_frees += 1,
                None => self.anomalies.unknown_frees += 1,
            },
            EventKind::FreeCompleted => self.counts.free_completed += 1,
            EventKind::PoolGrow => {
                self.counts.pool_grows += 1;
                self.reserved += e.size as i128;
                self.reserved_deltas.push((e.time_ns, e.size as i128));
            }
            EventKind::PoolRelease => {
                self.counts.pool_releases += 1;
                self.reserved -= e.size as i128;
                self.reserved_deltas.push((e.time_ns, -(e.size as i128)));
            }
            EventKind::Trim => self.counts.trims += 1,
            EventKind::Oom => self.counts.ooms.push((e.time_ns, e.size)),
        }
    }

    /// `final_reserved`: the recording allocator's reserved bytes at the end,
    /// where known (a snapshot's segments), so that memory reserved before
    /// the trace began is counted too.
    fn finish(self, source: Source, final_reserved: Option<u64>) -> Workload {
        let offset = match final_reserved {
            Some(total) => total as i128 - self.reserved,
            None => {
                // Without it: whatever makes the lowest point zero (memory
                // released that the trace never saw reserved).
                let mut sum = 0i128;
                let mut low = 0i128;
                for &(_, d) in &self.reserved_deltas {
                    sum += d;
                    low = low.min(sum);
                }
                -low
            }
        }
        .max(0);
        let mut recorded_reserved = Vec::with_capacity(self.reserved_deltas.len() + 1);
        if !self.reserved_deltas.is_empty() {
            let mut sum = offset;
            recorded_reserved.push((0, offset.max(0) as u64));
            for &(t, d) in &self.reserved_deltas {
                sum += d;
                recorded_reserved.push((t, sum.max(0) as u64));
            }
        }
        Workload {
            name: self.name,
            source,
            ops: self.ops,
            allocs: self.allocs,
            streams: self.streams,
            live_after: self.live_after,
            peak_live: self.peak_live,
            peak_op: self.peak_op,
            peak_live_granules: self.peak_live_granules,
            recorded_reserved,
            timed: self.any_time,
            anomalies: self.anomalies,
            counts: self.counts,
        }
    }
}
