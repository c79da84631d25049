//! `hipmem bench alloc`'s C ABI cases: one `hipMallocAsync` + `hipFreeAsync`
//! pair through the exported functions of libhipmem (its rlib, so the calls
//! are the same code a C program reaches), on the null stream, on a stream
//! made by `hipStreamCreate`, and (cuda) on a stream made outside hipmem by
//! the driver (`cuStreamCreate`, as PyTorch's or the CUDA runtime's), and
//! PyTorch's two interfaces on the null stream (`hipmem_torch_malloc` /
//! `hipmem_torch_free`, which PyTorch's pluggable allocator calls, and
//! `hipmem_torch_alloc` / `hipmem_torch_delete`, the direct one's). Next
//! to each, the same pair through the Rust API on the same runtime and the
//! same kind of stream (`Runtime::malloc_async` / `free_async`, what the
//! exports call), so the ratio is the C ABI's own cost.
//!
//! The C ABI uses the process-wide runtime (`HIPMEM_BACKEND`); these cases
//! run only when it has the same backend as the bench's runtime.
//!
//! This module calls C functions (the exports, and the CUDA driver for the
//! foreign stream): it is the bench's FFI module, and every `unsafe` block
//! says why it is sound.
#![allow(unsafe_code)]

use std::collections::HashMap;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::time::Instant;

use hipmem::backend::{BackendKind, RawStream};
use hipmem::{Error, Result, Runtime, Stream};
use hipmem_capi::{
    hipError_t, hipFreeAsync, hipMallocAsync, hipStream_t, hipStreamCreate, hipStreamDestroy,
    hipStreamSynchronize,
};

use super::{Progress, Report, median_p99, ns};

/// Pairs timed together per sample (the clock's own cost stays out).
const BATCH: usize = 32;

/// A stream-ordered allocator path.
enum Path {
    /// `Runtime::malloc_async` / `free_async` on the stream.
    Rust(Stream),
    /// `hipMallocAsync` / `hipFreeAsync` on the handle.
    CAbi(hipStream_t),
    /// PyTorch's interface on the handle: `hipmem_torch_malloc` /
    /// `hipmem_torch_free` (the pluggable allocator's pair), or with
    /// `direct` `hipmem_torch_alloc` / `hipmem_torch_delete` (the direct
    /// interface's, which keeps each block's stream to free by address).
    Torch { stream: hipStream_t, direct: bool },
}

/// One case: its name, its path, and the name of the Rust case on the same
/// kind of stream (for the ratio).
struct Case {
    name: &'static str,
    path: Path,
    rust_twin: Option<&'static str>,
}

fn check(code: hipError_t, what: &str) -> Result<()> {
    if code == hipmem_capi::hipSuccess {
        Ok(())
    } else {
        Err(Error::from_code(code, format!("{what} failed in the C ABI bench")))
    }
}

impl Path {
    /// One allocation + free pair of `size` bytes.
    #[inline]
    fn pair(&self, rt: &Runtime, size: u64) -> Result<()> {
        match self {
            Path::Rust(stream) => {
                let p = rt.malloc_async(size, stream)?;
                rt.free_async(p, stream)
            }
            Path::CAbi(stream) => {
                let mut p: *mut c_void = null_mut();
                // SAFETY: `p` is a valid out-pointer; `stream` is a live handle
                // (0, made by hipStreamCreate, or an adopted driver stream).
                check(unsafe { hipMallocAsync(&mut p, size as usize, *stream) }, "hipMallocAsync")?;
                // SAFETY: `p` came from hipMallocAsync just above and is freed once.
                check(unsafe { hipFreeAsync(p, *stream) }, "hipFreeAsync")
            }
            Path::Torch { stream, direct } => {
                let p = if *direct {
                    hipmem_capi::hipmem_torch_alloc(size as isize, 0, *stream)
                } else {
                    hipmem_capi::hipmem_torch_malloc(size as isize, 0, *stream)
                };
                if p.is_null() {
                    return Err(Error::OutOfMemory(format!(
                        "the PyTorch interface's allocation of {size} bytes failed in the C ABI bench"
                    )));
                }
                if *direct {
                    hipmem_capi::hipmem_torch_delete(p);
                } else {
                    hipmem_capi::hipmem_torch_free(p, size as usize, 0, *stream);
                }
                Ok(())
            }
        }
    }

    fn synchronize(&self) -> Result<()> {
        match self {
            Path::Rust(stream) => stream.synchronize(),
            Path::CAbi(stream) | Path::Torch { stream, .. } => {
                // SAFETY: a live handle (see `pair`).
                check(unsafe { hipStreamSynchronize(*stream) }, "hipStreamSynchronize")
            }
        }
    }
}

/// The median per-pair time of `samples` batches (after a warm-up).
fn pair_median(rt: &Runtime, path: &Path, size: u64, samples: usize) -> Result<f64> {
    for _ in 0..BATCH * 4 {
        path.pair(rt, size)?;
    }
    let mut per_pair = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        for _ in 0..BATCH {
            path.pair(rt, size)?;
        }
        per_pair.push(ns(t.elapsed()) / BATCH as f64);
    }
    path.synchronize()?;
    Ok(median_p99(&mut per_pair).0)
}

/// Runs the C ABI cases at each size, `repetitions` times in turn, and adds
/// their rows: the median over the repetitions (each the median of
/// `samples` batches), the fastest and slowest repetition, the ratio to the
/// Rust path on the same kind of stream, and the ratio to the bench's Rust
/// pool pair (`rust_pool_pair`: size → median of `pair_latency`
/// `hipmem-pool`).
pub fn run(
    bench_rt: &Runtime,
    report: &mut Report,
    progress: &mut Progress,
    sizes: &[u64],
    samples: usize,
    repetitions: usize,
    rust_pool_pair: &HashMap<u64, f64>,
) -> Result<()> {
    let rt = Runtime::global()?;
    if rt.backend_kind() != bench_rt.backend_kind() {
        eprintln!(
            "note: c-abi cases skipped: the C ABI's runtime (HIPMEM_BACKEND) is {}, the bench's is {}",
            rt.backend_kind(),
            bench_rt.backend_kind()
        );
        for _ in sizes {
            progress.step("c-abi pair latency (skipped)");
        }
        return Ok(());
    }
    let device = rt.device(0)?;
    // The PyTorch interface's failures as null here (raising would throw a
    // C++ exception into this Rust loop).
    check(hipmem_capi::hipmem_torch_raise_on_failure(0), "hipmem_torch_raise_on_failure")?;
    let mut created: hipStream_t = null_mut();
    // SAFETY: a valid out-pointer.
    check(unsafe { hipStreamCreate(&mut created) }, "hipStreamCreate")?;
    let mut cases = vec![
        Case { name: "rust null stream", path: Path::Rust(device.null_stream()), rust_twin: None },
        Case { name: "rust hipmem stream", path: Path::Rust(device.create_stream()?), rust_twin: None },
        Case { name: "c-abi null stream", path: Path::CAbi(null_mut()), rust_twin: Some("rust null stream") },
        Case {
            name: "c-abi hipmem stream",
            path: Path::CAbi(created),
            rust_twin: Some("rust hipmem stream"),
        },
        Case {
            name: "torch malloc/free",
            path: Path::Torch { stream: null_mut(), direct: false },
            rust_twin: Some("rust null stream"),
        },
        Case {
            name: "torch alloc/delete",
            path: Path::Torch { stream: null_mut(), direct: true },
            rust_twin: Some("rust null stream"),
        },
    ];
    let foreign = match rt.backend_kind() {
        BackendKind::Cuda => Some(foreign::Driver::open()?.create_stream(0)?),
        _ => {
            eprintln!(
                "note: c-abi foreign stream skipped: the {} backend has no streams made outside hipmem",
                rt.backend_kind()
            );
            None
        }
    };
    if let Some(f) = &foreign {
        let raw = RawStream { device: 0, handle: f.handle };
        cases.push(Case {
            name: "rust foreign stream",
            path: Path::Rust(Stream::adopt(&rt, raw)?),
            rust_twin: None,
        });
        cases.push(Case {
            name: "c-abi foreign stream",
            path: Path::CAbi(f.handle as usize as hipStream_t),
            rust_twin: Some("rust foreign stream"),
        });
    }

    let result = (|| -> Result<()> {
        for &size in sizes {
            progress.step(&format!("c-abi pair latency {size} B"));
            let mut runs: Vec<Vec<f64>> = cases.iter().map(|_| Vec::new()).collect();
            // The cases take turns, so drift (clock, caches) spreads evenly.
            for _ in 0..repetitions {
                for (case, runs) in cases.iter().zip(&mut runs) {
                    runs.push(pair_median(&rt, &case.path, size, samples)?);
                }
            }
            let medians: Vec<f64> = runs.iter_mut().map(|r| median_p99(r).0).collect();
            let by_name: HashMap<&str, f64> =
                cases.iter().map(|c| c.name).zip(medians.iter().copied()).collect();
            for ((case, runs), median) in cases.iter().zip(&runs).zip(&medians) {
                let row = |report: &mut Report, metric: &str, value: f64, unit: &str| {
                    report.push("c_abi_pair_latency", case.name, Some(size), metric, value, unit)
                };
                row(report, "median", *median, "ns");
                row(report, "fastest_repetition", runs.iter().copied().fold(f64::INFINITY, f64::min), "ns");
                row(report, "slowest_repetition", runs.iter().copied().fold(0.0, f64::max), "ns");
                if let Some(twin) = case.rust_twin.and_then(|t| by_name.get(t)) {
                    row(report, "median_vs_rust_same_stream", median / twin, "x");
                }
                if let Some(pool_pair) = rust_pool_pair.get(&size) {
                    row(report, "median_vs_rust_pool_pair", median / pool_pair, "x");
                }
            }
        }
        Ok(())
    })();

    // Clean up whatever happened above.
    for case in &cases {
        case.path.synchronize()?;
    }
    drop(cases);
    // SAFETY: `created` came from hipStreamCreate and is destroyed once.
    check(unsafe { hipStreamDestroy(created) }, "hipStreamDestroy")?;
    if let Some(f) = foreign {
        // hipStreamDestroy of an adopted stream: hipmem destroys it in the driver.
        // SAFETY: a live stream hipmem adopted, destroyed once.
        check(unsafe { hipStreamDestroy(f.handle as usize as hipStream_t) }, "hipStreamDestroy (foreign)")?;
    }
    result
}

/// A stream made by the CUDA driver itself, loaded at run time.
mod foreign {
    use std::ffi::{c_int, c_uint, c_void};

    use hipmem::{Error, Result};

    type Ctx = *mut c_void;
    type CuStream = *mut c_void;

    /// The driver calls a foreign stream needs.
    pub struct Driver {
        _lib: libloading::Library,
        retain: unsafe extern "C" fn(*mut Ctx, c_int) -> u32,
        set_current: unsafe extern "C" fn(Ctx) -> u32,
        create: unsafe extern "C" fn(*mut CuStream, c_uint) -> u32,
    }

    /// A driver stream (destroyed by `hipStreamDestroy` once hipmem adopted it).
    pub struct ForeignStream {
        /// The `CUstream`.
        pub handle: u64,
        _driver: Driver,
    }

    fn loaded(what: &str, e: libloading::Error) -> Error {
        Error::NotSupported(format!("cannot load {what} for the foreign stream: {e}"))
    }

    impl Driver {
        /// Loads libcuda.so.1 and its stream functions.
        pub fn open() -> Result<Driver> {
            // SAFETY: loading libcuda runs its initializers, which have no
            // preconditions (hipmem's cuda backend already loaded it).
            let lib =
                unsafe { libloading::Library::new("libcuda.so.1") }.map_err(|e| loaded("libcuda.so.1", e))?;
            // SAFETY: the symbols are looked up with the signatures cuda.h
            // declares for them.
            unsafe {
                let retain = *lib
                    .get(b"cuDevicePrimaryCtxRetain\0")
                    .map_err(|e| loaded("cuDevicePrimaryCtxRetain", e))?;
                let set_current = *lib.get(b"cuCtxSetCurrent\0").map_err(|e| loaded("cuCtxSetCurrent", e))?;
                let create = *lib.get(b"cuStreamCreate\0").map_err(|e| loaded("cuStreamCreate", e))?;
                Ok(Driver { _lib: lib, retain, set_current, create })
            }
        }

        /// A non-blocking stream of `device`'s primary context.
        pub fn create_stream(self, device: usize) -> Result<ForeignStream> {
            let mut ctx: Ctx = std::ptr::null_mut();
            let mut s: CuStream = std::ptr::null_mut();
            let fail = |what: &str, r: u32| Error::Unknown(format!("{what} failed with CUresult {r}"));
            // SAFETY: valid out-pointers; the runtime already initialized the
            // driver (cuInit) and retains the same primary context.
            unsafe {
                match (self.retain)(&mut ctx, device as c_int) {
                    0 => {}
                    r => return Err(fail("cuDevicePrimaryCtxRetain", r)),
                }
                match (self.set_current)(ctx) {
                    0 => {}
                    r => return Err(fail("cuCtxSetCurrent", r)),
                }
                match (self.create)(&mut s, 1) {
                    0 => {}
                    r => return Err(fail("cuStreamCreate", r)),
                }
            }
            Ok(ForeignStream { handle: s as u64, _driver: self })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_abi_cases_report_next_to_the_rust_pair() {
        let rt = Runtime::global().unwrap();
        let mut report = Report::new("alloc", &rt, 0).unwrap();
        let mut progress = Progress::new(1);
        let reference = HashMap::from([(256u64, 10.0)]);
        run(&rt, &mut report, &mut progress, &[256], 5, 2, &reference).unwrap();
        let value = |allocator: &str, metric: &str| {
            report
                .results
                .iter()
                .find(|r| r.case == "c_abi_pair_latency" && r.allocator == allocator && r.metric == metric)
                .map(|r| r.value)
        };
        for case in ["c-abi null stream", "c-abi hipmem stream"] {
            let median = value(case, "median").unwrap_or_else(|| panic!("{case}: no median"));
            assert!(median > 0.0, "{case}: {median} ns");
            assert!(value(case, "fastest_repetition").unwrap() <= median);
            assert!(value(case, "slowest_repetition").unwrap() >= median);
            assert!(value(case, "median_vs_rust_same_stream").is_some_and(|r| r > 0.0), "{case}");
            assert_eq!(value(case, "median_vs_rust_pool_pair"), Some(median / 10.0), "{case}");
        }
        let foreign = value("c-abi foreign stream", "median");
        assert_eq!(
            foreign.is_some(),
            rt.backend_kind() == BackendKind::Cuda,
            "foreign stream case only on cuda"
        );
    }
}
