//! Builds the seed listings that launch no kernel (examples/c/) with the
//! system C++ compiler against libhipmem and runs them on the CPU backend,
//! checking their output. Skipped, with a note, where g++ is absent.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root: an ancestor of the test executable (or of the working
/// directory, or `git rev-parse --show-toplevel`) that holds the header.
fn repo_root() -> PathBuf {
    let has_header =
        |d: &Path| d.join("include/hip/hip_runtime.h").is_file() && d.join("examples/c").is_dir();
    if let Ok(dir) = std::env::var("HIPMEM_REPO_ROOT") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let cwd = std::env::current_dir().expect("working directory");
    for start in [exe.as_path(), cwd.as_path()] {
        if let Some(d) = start.ancestors().find(|d| has_header(d)) {
            return d.to_path_buf();
        }
    }
    let out = Command::new("git").args(["rev-parse", "--show-toplevel"]).output().expect("git rev-parse");
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(has_header(&root), "cannot find the repository root (set HIPMEM_REPO_ROOT)");
    root
}

/// The directory holding libhipmem.so built with this test (target/<profile>/deps or its parent).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .skip(1)
        .take(3)
        .find(|d| d.join("libhipmem.so").is_file())
        .expect("libhipmem.so next to the test executable")
        .to_path_buf()
}

fn have_gxx() -> bool {
    Command::new("g++").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Compiles examples/c/<name>.cpp and runs it on the host backend; returns stdout.
fn build_and_run(name: &str) -> Option<String> {
    if !have_gxx() {
        println!("note: g++ not found; skipping the C++ example {name}");
        return None;
    }
    let root = repo_root();
    let lib = lib_dir();
    let out_dir = std::env::temp_dir().join(format!("hipmem-c-examples-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let exe = out_dir.join(name);
    let status = Command::new("g++")
        .arg("-Wno-pointer-arith")
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("examples/c").join(format!("{name}.cpp")))
        .arg("-L")
        .arg(&lib)
        .arg("-lhipmem")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .status()
        .expect("run g++");
    assert!(status.success(), "g++ failed on examples/c/{name}.cpp");
    let out = Command::new(&exe)
        .env("HIPMEM_BACKEND", "host")
        .env_remove("HIPMEM_HOST_VMM_GRANULARITY")
        .env_remove("HIPMEM_HOST_DEVICES")
        .output()
        .expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} exited with {}:\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

#[test]
fn pool_trim_prints_the_trimmed_size() {
    if let Some(out) = build_and_run("pool_trim") {
        assert_eq!(out, "Memory pool trimmed to 524288 bytes.\n");
    }
}

#[test]
fn pool_statistics_prints_the_four_statistics_before_and_after_the_reset() {
    // hipMalloc does not allocate from the default pool, so the pool holds nothing.
    let Some(out) = build_and_run("pool_statistics") else { return };
    let block = |title: &str| {
        format!(
            "{title}\nReserved Memory Current: 0 bytes\nReserved Memory High: 0 bytes\n\
             Used Memory Current: 0 bytes\nUsed Memory High: 0 bytes\n"
        )
    };
    assert_eq!(out, block("Before resetting statistics:") + &block("After resetting statistics:"));
}

#[test]
fn pool_threshold_keeps_everything() {
    if let Some(out) = build_and_run("pool_threshold") {
        assert_eq!(out, "Release threshold: 18446744073709551615 bytes\n");
    }
}

#[test]
fn vmm_sequence_maps_grows_and_frees() {
    let Some(out) = build_and_run("vmm") else { return };
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.first(), Some(&"VMM: mapped 4194304 bytes, read back ok"), "{out}");
    assert!(
        lines[1].starts_with("VMM: grew to 8388608 bytes (") && lines[1].ends_with("read back ok"),
        "{out}"
    );
    if lines[1].contains("(contiguous)") {
        assert_eq!(lines[2], "VMM: whole range read back ok", "{out}");
    }
    assert_eq!(lines.last(), Some(&"VMM: freed, last error hipSuccess"), "{out}");
}
