//! What several of this crate's test executables share.

use std::path::PathBuf;

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
