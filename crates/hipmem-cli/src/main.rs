//! The `hipmem` command: device information, the guided tour of HIP's memory
//! model, and benchmarks against the driver's own paths.
//!
//! No `unsafe` code, except in `bench/c_abi.rs`, which calls C functions.
#![deny(unsafe_code)]

mod bench;
mod info;
mod replay;
mod report;
mod tour;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hipmem::{BackendChoice, Runtime};

/// hipmem: HIP's GPU memory-management model, on CUDA, AMD's HIP runtime or a CPU emulation.
#[derive(Parser, Debug)]
#[command(name = "hipmem", version, about)]
struct Cli {
    /// Backend to use: host, cuda, hip or auto (overrides HIPMEM_BACKEND).
    #[arg(long, global = true, value_name = "BACKEND")]
    backend: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Backend, devices, memory, capabilities and VMM granularity.
    Info {
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Benchmarks: hipmem and the driver's own paths, side by side.
    Bench {
        #[command(subcommand)]
        which: BenchCommand,
    },
    /// Walk the seeds' examples end to end on the chosen backend, timing each step.
    Tour {
        /// Elements in the example buffers.
        #[arg(long, default_value_t = 1 << 20)]
        elements: usize,
    },
    /// Replay a recorded allocation sequence (a hipmem trace or a PyTorch memory
    /// snapshot pickle) into hipmem's pools, the driver's pool and hipMalloc, and compare.
    Replay {
        /// The trace: a file written with HIPMEM_TRACE, or a torch.cuda.memory._dump_snapshot pickle (either may be gzip-compressed).
        trace: std::path::PathBuf,
        /// Allocators: vmm, vmm-lowmem (moving memory whenever that keeps the pool smaller), vmm-units (mapping each unit alone, not each growth of 64 MiB or more in one call), vmm-pieces (a run's first steps mapped in pieces of up to 8 MiB, not 2 MiB units; only when named), vmm-mixed (tiny blocks in one heap with the rest, not kept apart with a cache of their own per stream; only when named), segments, driver, malloc (repeat or separate by commas; default: all the backend has but vmm-pieces and vmm-mixed).
        #[arg(long = "pool", value_name = "POOL")]
        pools: Vec<String>,
        /// The device to replay on.
        #[arg(long, default_value_t = 0)]
        device: usize,
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// Draw live and reserved bytes over time and the pool's address map to this SVG file.
        #[arg(long, value_name = "FILE")]
        svg: Option<std::path::PathBuf>,
        /// The same picture in an HTML page with the figures as a table.
        #[arg(long, value_name = "FILE")]
        html: Option<std::path::PathBuf>,
        /// hipmem's pools give back memory idle for two windows of this many milliseconds (a peak left behind: one) of the trace's own time, as hipmem's PyTorch interface does on the wall clock (0: keep everything freed).
        #[arg(long, value_name = "MS", default_value_t = replay::DEFAULT_IDLE_RELEASE_MS)]
        idle_release_ms: u64,
        /// Write this many KiB of other memory between operations, as a framework's own work evicts the allocator's state from the caches between its calls; the times per operation are then the calls' alone (0: back to back, the whole loop timed).
        #[arg(long, value_name = "KIB", default_value_t = 0)]
        evict_kib: usize,
        /// Time each operation of the timed pass and list this many of the slowest, with the backend calls each made (hipmem's pools), and the share of time in operations that called the backend (adds a clock and a counter read per operation).
        #[arg(long, value_name = "N", default_value_t = 0)]
        slowest: usize,
        /// Print hipmem's pools' address maps just before operation OP (0-based), and how much of the free memory lies in wholly free physical pieces or beside live blocks.
        #[arg(long, value_name = "OP")]
        map_at: Option<u64>,
        /// Start the "second half" (its peaks, time per operation and backend calls) at operation OP (0-based) instead of the trace's midpoint: the first operation after a warm-up.
        #[arg(long, value_name = "OP")]
        late_from: Option<u64>,
        /// Replay hipmem's pools once per idle-release window instead (milliseconds, comma-separated; 0: off), and show how much the second half's memory moves with the window: a shorter window on the trace's clock plays a slower run.
        #[arg(long, value_name = "MS,MS,...", value_delimiter = ',', num_args = 1..)]
        idle_sweep: Vec<u64>,
        /// hipmem's pool on virtual memory places blocks by zones (MemPool::set_zone_placement) where idle release is on, as hipmem's PyTorch interface does with HIPMEM_TORCH_ZONE=1.
        #[arg(long)]
        zone: bool,
    },
    /// Memory traces: what a recorded trace says.
    Trace {
        #[command(subcommand)]
        which: TraceCommand,
    },
    /// The importing process of the tour's IPC section (started by the tour itself).
    #[command(hide = true)]
    TourIpcChild {
        /// The tour's socket.
        #[arg(long)]
        socket: String,
    },
}

#[derive(Subcommand, Debug)]
enum TraceCommand {
    /// Sizes that dominate, allocation churn, streams, the peak and what was live then.
    Summary {
        /// The trace (hipmem trace or PyTorch memory snapshot pickle).
        trace: std::path::PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Rows in each table.
        #[arg(long, default_value_t = 10)]
        top: usize,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Stream-ordered allocation: pair latency, the seeds' loop, random_allocations, threads.
    Alloc {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// A short run (smoke test; the numbers mean little).
        #[arg(long)]
        quick: bool,
    },
    /// Host-device copies: driver pageable, hipmem staged, page-locked; pinned allocation, direct and pooled.
    Copy {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// A short run (up to 16 MiB; smoke test).
        #[arg(long)]
        quick: bool,
    },
    /// Managed memory: a kernel on demand, after a prefetch, ReadMostly from two places; prefetch vs page-locked copy.
    Managed {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// A short run (smoke test; the numbers mean little).
        #[arg(long)]
        quick: bool,
    },
    /// Trace recording: the cost of an event site with recording off and on.
    Trace {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// A short run (smoke test; the numbers mean little).
        #[arg(long)]
        quick: bool,
    },
    /// Peer copies between devices 0 and 1, hipmem against cuMemcpyPeer, both directions; hipMalloc with peer access off and on.
    Peer {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// A short run (up to 16 MiB; smoke test).
        #[arg(long)]
        quick: bool,
    },
    /// Virtual memory: growing a buffer in place (GrowableBuffer) against allocate-copy-free.
    Vmm {
        /// Print one JSON object instead of a table.
        #[arg(long)]
        json: bool,
        /// A short run (smoke test; the numbers mean little).
        #[arg(long)]
        quick: bool,
    },
}

fn open_runtime(backend: Option<&str>) -> hipmem::Result<Runtime> {
    let mut builder = Runtime::builder();
    if let Some(name) = backend {
        builder = builder.backend(name.parse::<BackendChoice>()?);
    }
    builder.build()
}

fn main() -> ExitCode {
    let level = std::env::var("HIPMEM_LOG")
        .ok()
        .and_then(|l| l.parse::<tracing::Level>().ok())
        .unwrap_or(tracing::Level::WARN);
    tracing_subscriber::fmt().with_max_level(level).with_writer(std::io::stderr).init();
    let cli = Cli::parse();
    let result = match cli.command {
        // A summary reads a file: no runtime needed.
        Command::Trace { which: TraceCommand::Summary { trace, json, top } } => {
            replay::run_summary(&trace, json, top)
        }
        command => open_runtime(cli.backend.as_deref()).and_then(|rt| run(rt, command)),
    };
    // A trace recorded with HIPMEM_TRACE is complete when the command ends.
    let stopped = hipmem::trace::stop();
    match result.and(stopped) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hipmem: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(rt: Runtime, command: Command) -> hipmem::Result<()> {
    match command {
        Command::Replay {
            trace,
            pools,
            device,
            json,
            svg,
            html,
            idle_release_ms,
            evict_kib,
            slowest,
            map_at,
            late_from,
            idle_sweep,
            zone,
        } => {
            let args = replay::ReplayArgs {
                trace,
                pools,
                device,
                json,
                svg,
                html,
                idle_release_ms,
                evict_kib,
                slowest,
                map_at,
                late_from,
                idle_sweep,
                zone,
            };
            replay::run(&rt, &args)
        }
        Command::Trace { which: TraceCommand::Summary { trace, json, top } } => {
            replay::run_summary(&trace, json, top)
        }
        Command::Bench { which: BenchCommand::Trace { json, quick } } => {
            let scale = if quick { bench::trace::Scale::quick() } else { bench::trace::Scale::full() };
            bench::trace::run(&rt, scale)?.print(json)
        }
        Command::Info { json } => info::run(&rt, json),
        Command::Tour { elements } => tour::run(&rt, elements),
        Command::TourIpcChild { socket } => tour::ipc_child(&rt, &socket),
        Command::Bench { which: BenchCommand::Alloc { json, quick } } => {
            let scale = if quick { bench::alloc::Scale::quick() } else { bench::alloc::Scale::full() };
            bench::alloc::run(&rt, scale)?.print(json)
        }
        Command::Bench { which: BenchCommand::Copy { json, quick } } => {
            let scale = if quick { bench::copy::Scale::quick() } else { bench::copy::Scale::full() };
            bench::copy::run(&rt, scale)?.print(json)
        }
        Command::Bench { which: BenchCommand::Managed { json, quick } } => {
            let scale = if quick { bench::managed::Scale::quick() } else { bench::managed::Scale::full() };
            bench::managed::run(&rt, scale)?.print(json)
        }
        Command::Bench { which: BenchCommand::Peer { json, quick } } => {
            let scale = if quick { bench::peer::Scale::quick() } else { bench::peer::Scale::full() };
            bench::peer::run(&rt, scale)?.print(json)
        }
        Command::Bench { which: BenchCommand::Vmm { json, quick } } => {
            let scale = if quick { bench::vmm::Scale::quick() } else { bench::vmm::Scale::full() };
            bench::vmm::run(&rt, scale)?.print(json)
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    /// `--idle-sweep` takes windows comma-separated or repeated, and one
    /// replay's `--idle-release-ms` stays as it was.
    #[test]
    fn idle_sweep_windows_parse_comma_separated_or_repeated() {
        let sweep = |args: &[&str]| match Cli::try_parse_from(args).map(|c| c.command) {
            Ok(Command::Replay { idle_sweep, idle_release_ms, .. }) => Ok((idle_sweep, idle_release_ms)),
            Ok(other) => panic!("not a replay: {other:?}"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(sweep(&["hipmem", "replay", "t.jsonl"]), Ok((vec![], 100)));
        assert_eq!(
            sweep(&["hipmem", "replay", "t.jsonl", "--idle-sweep", "25,50,0"]),
            Ok((vec![25, 50, 0], 100))
        );
        assert_eq!(
            sweep(&["hipmem", "replay", "t.jsonl", "--idle-sweep", "25", "--idle-sweep", "200"]),
            Ok((vec![25, 200], 100))
        );
        assert!(
            sweep(&["hipmem", "replay", "t.jsonl", "--idle-sweep", "25,fast"]).unwrap_err().contains("fast")
        );
    }
}
