//! What several of this crate's test executables share.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding the libhipmem.so built with this test: next to the
/// test executable or up to two levels above it (target/<profile>/deps or
/// its parent), or the bundle's `.gpu/lib` (next to `.gpu/tests/`).
pub fn libhipmem_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().expect("test executable path");
    let mut dirs: Vec<PathBuf> = exe.ancestors().skip(1).take(3).map(|d| d.to_path_buf()).collect();
    if let Some(bundle) = exe.parent().and_then(|d| d.parent()) {
        dirs.push(bundle.join("lib"));
    }
    dirs.into_iter().find(|d| d.join("libhipmem.so").is_file())
}

/// The repository root: `HIPMEM_REPO_ROOT` if set, else an ancestor of the
/// test executable (or of the working directory, or `git rev-parse
/// --show-toplevel`) that holds the C header and `marker` (a path relative to
/// the root that the calling test needs: its examples or corpus).
// (Each test executable compiles this module; not every one calls it.)
#[allow(dead_code)]
pub fn repo_root(marker: &str) -> PathBuf {
    let holds = |d: &Path| d.join("include/hip/hip_runtime.h").is_file() && d.join(marker).exists();
    if let Ok(dir) = std::env::var("HIPMEM_REPO_ROOT") {
        return PathBuf::from(dir);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let cwd = std::env::current_dir().expect("working directory");
    for start in [exe.as_path(), cwd.as_path()] {
        if let Some(d) = start.ancestors().find(|d| holds(d)) {
            return d.to_path_buf();
        }
    }
    let out = Command::new("git").args(["rev-parse", "--show-toplevel"]).output().expect("git rev-parse");
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(holds(&root), "cannot find the repository root holding {marker} (set HIPMEM_REPO_ROOT)");
    root
}
