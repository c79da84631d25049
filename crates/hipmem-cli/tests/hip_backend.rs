//! `hipmem info --backend hip` where there is no HIP library, and where
//! AMD's library is installed (Debian's `libamdhip64-5`, or ROCm): one
//! clear line and a non-zero exit without an AMD GPU, never a panic; the
//! HIP runtime's version named where there is a GPU. Says it skipped where
//! the library is not installed.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `hipmem` binary: next to this test executable's directory
/// (target/<profile>/), or in `../bin` of the bundle (.gpu/tests → .gpu/bin),
/// or where `HIPMEM_CLI` says.
fn hipmem() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("HIPMEM_CLI") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("hipmem"), dir.parent()?.join("hipmem"), dir.parent()?.join("bin/hipmem")]
        .into_iter()
        .find(|p| p.is_file())
}

fn info_hip(library: Option<&str>) -> Option<Output> {
    let Some(bin) = hipmem() else {
        println!("note: the hipmem binary was not found (set HIPMEM_CLI); skipped");
        return None;
    };
    let mut command = Command::new(bin);
    command.args(["info", "--backend", "hip"]).env_remove("HIPMEM_BACKEND");
    match library {
        Some(path) => command.env("HIPMEM_HIP_LIBRARY", path),
        None => command.env_remove("HIPMEM_HIP_LIBRARY"),
    };
    Some(command.output().expect("run hipmem"))
}

/// The one line a failed `hipmem info` prints.
fn one_error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "expected a failure, got success:\n{stderr}");
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "expected one line:\n{stderr}");
    assert!(lines[0].starts_with("hipmem: hipErrorNotInitialized: "), "{stderr}");
    lines[0].to_string()
}

#[test]
fn without_a_hip_library_it_is_one_clear_line() {
    let missing = "/nonexistent/hipmem-test/libamdhip64.so.6";
    let Some(out) = info_hip(Some(missing)) else { return };
    let line = one_error_line(&out);
    assert!(line.contains("cannot load AMD's HIP runtime") && line.contains(missing), "{line}");
}

#[test]
fn with_amds_library_it_names_the_runtime_or_says_there_is_no_gpu() {
    let Some(out) = info_hip(None) else { return };
    let stdout = String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        // An AMD GPU is present: the report names the HIP runtime's version.
        assert!(stdout.contains("backend: hip: HIP runtime"), "{stdout}");
        return;
    }
    let line = one_error_line(&out);
    if line.contains("cannot load AMD's HIP runtime") {
        println!("note: libamdhip64 is not installed here (apt-get install libamdhip64-5); skipped: {line}");
        return;
    }
    // The library loads (Debian's 5.2.3 here: hipInit gives hipErrorInvalidDevice
    // and hipGetDeviceCount hipErrorNoDevice without a GPU).
    assert!(line.contains("no AMD GPU is present") && line.contains("libamdhip64"), "{line}");
    assert!(line.contains("hipGetDeviceCount"), "{line}");
}
