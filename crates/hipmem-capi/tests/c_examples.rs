//! Builds the seed listings that launch no kernel (examples/c/) with the
//! system C++ compiler against libhipmem and runs them on the CPU backend,
//! checking their output. Skipped, with a note, where g++ is absent.

mod common;

use std::path::PathBuf;
use std::process::Command;

/// The repository root (see `common::repo_root`).
fn repo_root() -> PathBuf {
    common::repo_root("examples/c")
}

/// The directory holding libhipmem.so (see `common::libhipmem_dir`).
fn lib_dir() -> PathBuf {
    common::libhipmem_dir()
        .expect("libhipmem.so next to the test executable or in ../lib (the bundle's .gpu/lib)")
}

fn have_gxx() -> bool {
    Command::new("g++").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Compiles examples/c/<name>.cpp against libhipmem; None without g++.
fn build(name: &str) -> Option<PathBuf> {
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
    Some(exe)
}

/// Compiles examples/c/<name>.cpp and runs it on the host backend; returns stdout.
fn build_and_run(name: &str) -> Option<String> {
    let exe = build(name)?;
    let out = host_command(&exe).output().expect("run the example");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} exited with {}:\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(stdout)
}

/// A command that runs a built listing on the host backend's defaults.
fn host_command(exe: &std::path::Path) -> Command {
    let mut command = Command::new(exe);
    command
        .env("HIPMEM_BACKEND", "host")
        .env_remove("HIPMEM_HOST_VMM_GRANULARITY")
        .env_remove("HIPMEM_HOST_DEVICES");
    command
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

/// PyTorch's allocator entry point in a C++ program, called through a
/// std::function as PyTorch calls it: failures arrive as std::runtime_error
/// naming the HIP error (never a null PyTorch would take for memory), and
/// as null with raising turned off.
#[test]
fn torch_malloc_raises_a_cxx_exception_on_failure() {
    let Some(out) = build_and_run("torch_malloc_raises") else { return };
    assert!(out.ends_with("all checks passed\n"), "{out}");
    assert!(!out.contains("FAILED"), "{out}");
    assert!(out.contains("Device out of memory. Tried to allocate 1152921504606846976 bytes"), "{out}");
}

/// hipmem's own extension hipmemPoolGetBackendCalls from C++, through the
/// header's struct: a new pool has asked nothing of the backend, a 48 MiB
/// allocation creates what the pool then holds (with at least one call),
/// and a free and a trim give all of it back; a null pool is refused.
#[test]
fn pool_backend_calls_counts_growth_and_trim() {
    let Some(out) = build_and_run("pool_backend_calls") else { return };
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(lines[0], "new pool: reserved 0, created 0, released 0, calls 0", "{out}");
    // The numbers after each word of a line.
    let field = |line: &str, name: &str| -> u64 {
        let at = line.find(&format!("{name} ")).unwrap_or_else(|| panic!("{name} in {line}"));
        line[at + name.len() + 1..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    let grown = lines[1];
    assert!(grown.starts_with("after a 48 MiB allocation: "), "{out}");
    let held = field(grown, "reserved");
    assert!(held >= 48 << 20, "{out}");
    assert_eq!(field(grown, "created"), held, "{out}");
    assert_eq!(field(grown, "released"), 0, "{out}");
    assert!(field(grown, "calls") >= 1, "{out}");
    let trimmed = lines[2];
    assert!(trimmed.starts_with("after the free and a trim: reserved 0, "), "{out}");
    assert_eq!(field(trimmed, "created"), held, "{out}");
    assert_eq!(field(trimmed, "released"), held, "{out}");
    assert!(field(trimmed, "calls") > field(grown, "calls"), "{out}");
    assert_eq!(lines[3], "a null pool: hipErrorInvalidValue", "{out}");
}

/// Runs a built listing on the host backend, killing it after 30 s.
fn spawn_listing(exe: &std::path::Path) -> std::process::Child {
    host_command(exe)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the listing")
}

fn finish(child: std::process::Child, name: &str) -> (i32, String) {
    let (tx, rx) = std::sync::mpsc::channel();
    let pid = child.id();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(std::time::Duration::from_secs(30)) {
        Ok(out) => out.expect("wait for the listing"),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{name} did not finish within 30 s");
        }
    };
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// Opens `fifo` for writing once `reader` has opened it for reading: a
/// blocking open would wait forever if the reader exited first (or never got
/// that far), so this polls a non-blocking open, fails with the reader's
/// output if it exits, and gives up after 30 s.
fn open_fifo_for_writing(
    fifo: &std::path::Path,
    reader: &mut std::process::Child,
    name: &str,
) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    // O_NONBLOCK on Linux: the open fails with ENXIO while no reader has it open.
    const O_NONBLOCK: i32 = 0o4000;
    const ENXIO: i32 = 6;
    let start = std::time::Instant::now();
    loop {
        match std::fs::OpenOptions::new().write(true).custom_flags(O_NONBLOCK).open(fifo) {
            Ok(f) => return f,
            Err(e) if e.raw_os_error() == Some(ENXIO) => {}
            Err(e) => panic!("opening {} for writing: {e}", fifo.display()),
        }
        if reader.try_wait().expect("poll the listing").is_some() {
            let out =
                reader.stdout.take().map(std::io::read_to_string).and_then(Result::ok).unwrap_or_default();
            panic!("{name} exited before it opened {} for reading:\n{out}", fifo.display());
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = reader.kill();
            panic!("{name} did not open {} for reading within 30 s", fifo.display());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Seed 004's four IPC listings, as printed. They cannot succeed: the
/// pointer exporter exports a hipMalloc pointer (not pool memory), the
/// importers read what a FIFO carries (a descriptor's number, or export data
/// of nothing) and the handle importer passes `&descriptor` where HIP takes
/// the descriptor. hipmem must report each of these as the listing's own
/// error message with hipErrorInvalidValue's text, exit, and never crash or
/// hang; the handle exporter, whose calls are all valid, must succeed.
/// (hipmem's working export/import sequence is in the tour and in
/// crates/hipmem/examples/ipc_ring.rs.)
#[test]
fn the_seed_ipc_listings_build_and_fail_cleanly_as_printed() {
    let names = ["ipc_export_pointer", "ipc_import_pointer", "ipc_export_handle", "ipc_import_handle"];
    let mut exes = Vec::new();
    for name in names {
        match build(name) {
            Some(exe) => exes.push(exe),
            None => return,
        }
    }
    let fifo = std::path::Path::new("/tmp/myfifo");
    let fresh_fifo = || {
        let _ = std::fs::remove_file(fifo);
        assert!(Command::new("mkfifo").arg("-m").arg("600").arg(fifo).status().is_ok_and(|s| s.success()));
    };

    // 1. The pointer exporter: hipMemPoolExportPointer of hipMalloc memory.
    let (code, text) = finish(spawn_listing(&exes[0]), names[0]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("Error exporting memory pool pointer: invalid argument"), "{text}");

    // 2. The pointer importer, fed 64 bytes of zeros through the FIFO.
    fresh_fifo();
    let mut importer = spawn_listing(&exes[1]);
    {
        use std::io::Write;
        let mut w = open_fifo_for_writing(fifo, &mut importer, names[1]);
        w.write_all(&[0u8; 64]).unwrap();
    }
    let (code, text) = finish(importer, names[1]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("Error imported memory pool pointer: invalid argument"), "{text}");

    // 3. The handle exporter and importer, together, as the seed pairs them.
    fresh_fifo();
    let exporter = spawn_listing(&exes[2]);
    let importer = spawn_listing(&exes[3]);
    let (code, text) = finish(importer, names[3]);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("Error importing memory pool: invalid argument"), "{text}");
    let (code, text) = finish(exporter, names[2]);
    assert_eq!(code, 0, "the handle exporter's calls are all valid:\n{text}");
    let _ = std::fs::remove_file(fifo);
}
