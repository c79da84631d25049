//! The `hipmem` command: device information, the guided tour of HIP's memory
//! model, and benchmarks against the driver's own paths.

mod bench;
mod info;
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
    /// The importing process of the tour's IPC section (started by the tour itself).
    #[command(hide = true)]
    TourIpcChild {
        /// The tour's socket.
        #[arg(long)]
        socket: String,
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
    let result = open_runtime(cli.backend.as_deref()).and_then(|rt| match cli.command {
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
        Command::Bench { which: BenchCommand::Vmm { json, quick } } => {
            let scale = if quick { bench::vmm::Scale::quick() } else { bench::vmm::Scale::full() };
            bench::vmm::run(&rt, scale)?.print(json)
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hipmem: {e}");
            ExitCode::FAILURE
        }
    }
}
