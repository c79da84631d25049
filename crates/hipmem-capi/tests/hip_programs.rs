//! The corpus of public HIP programs (examples/hip-programs/programs.txt):
//! every kernel-free one is built, unchanged, with the system C++ compiler
//! against libhipmem (`-I include` and the link line, nothing else) and run
//! on the CPU backend with two emulated devices, and its own verdict or
//! expected output is checked. The ones with kernels are built and run by
//! examples/hip-programs/build-nvcc.sh on the GPU machine. Skipped, with a
//! note, where g++ is absent.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The repository root (see `common::repo_root`).
fn repo_root() -> PathBuf {
    common::repo_root("examples/hip-programs/programs.txt")
}

/// The directory holding libhipmem.so (see `common::libhipmem_dir`).
fn lib_dir() -> PathBuf {
    common::libhipmem_dir()
        .expect("libhipmem.so next to the test executable or in ../lib (the bundle's .gpu/lib)")
}

/// One line of programs.txt.
#[derive(Debug)]
struct Program {
    name: String,
    kernel_free: bool,
    gpus: usize,
    sources: Vec<String>,
    checks: Vec<String>,
}

fn manifest(root: &Path) -> Vec<Program> {
    let text =
        std::fs::read_to_string(root.join("examples/hip-programs/programs.txt")).expect("read programs.txt");
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.splitn(5, '|').map(str::trim).collect();
            assert_eq!(f.len(), 5, "programs.txt: five fields per line: {l}");
            Program {
                name: f[0].to_owned(),
                kernel_free: match f[1] {
                    "yes" => true,
                    "no" => false,
                    other => panic!("programs.txt: kernel-free must be yes or no, not {other:?}"),
                },
                gpus: f[2].parse().expect("programs.txt: GPUs is a number"),
                sources: f[3].split_whitespace().map(str::to_owned).collect(),
                checks: f[4].split(" ;; ").map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect(),
            }
        })
        .collect()
}

/// Applies programs.txt's checks to an output; returns what failed.
fn failed_checks(output: &str, checks: &[String]) -> Vec<String> {
    let lines: Vec<&str> = output.lines().collect();
    checks
        .iter()
        .filter(|c| {
            let holds = if let Some(t) = c.strip_prefix("line:") {
                lines.contains(&t)
            } else if let Some(t) = c.strip_prefix("!has:") {
                !lines.iter().any(|l| l.contains(t))
            } else if let Some(t) = c.strip_prefix("has:") {
                lines.iter().any(|l| l.contains(t))
            } else {
                panic!("programs.txt: unknown check {c:?}")
            };
            !holds
        })
        .cloned()
        .collect()
}

#[test]
fn the_corpus_lists_at_least_twenty_programs_with_their_sources_and_licences() {
    let root = repo_root();
    let dir = root.join("examples/hip-programs");
    let programs = manifest(&root);
    assert!(programs.len() >= 20, "only {} programs", programs.len());
    let mut names: Vec<&str> = programs.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), programs.len(), "program names must be unique");
    for p in &programs {
        assert!(!p.checks.is_empty(), "{}: no check of its output", p.name);
        assert!((1..=2).contains(&p.gpus), "{}: needs 1 or 2 GPUs", p.name);
        for s in &p.sources {
            let path = dir.join(s);
            assert!(path.is_file(), "{}: no source {s}", p.name);
            // Every source sits under a folder whose README names where it came from.
            let top = dir.join(s.split('/').next().unwrap());
            let readme =
                std::fs::read_to_string(top.join("README.md")).expect("a README.md per source folder");
            let file = Path::new(s).strip_prefix(top.file_name().unwrap()).unwrap();
            assert!(
                readme.contains(&file.to_string_lossy().to_string()),
                "{}: {}/README.md does not list {}",
                p.name,
                top.display(),
                file.display()
            );
            assert!(
                ["LICENSE", "LICENSE.txt"].iter().any(|l| top.join(l).is_file()),
                "{}: no licence next to {s}",
                p.name
            );
        }
    }
    assert!(programs.iter().filter(|p| p.kernel_free).count() >= 5);
}

#[test]
fn kernel_free_programs_build_unchanged_with_gxx_and_pass_on_the_cpu_backend() {
    if !Command::new("g++").arg("--version").output().is_ok_and(|o| o.status.success()) {
        println!("note: g++ not found; skipping the HIP program corpus");
        return;
    }
    let root = repo_root();
    let dir = root.join("examples/hip-programs");
    let lib = lib_dir();
    let out_dir = std::env::temp_dir().join(format!("hipmem-hip-programs-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut failures = Vec::new();
    let mut ran = 0;
    for p in manifest(&root).into_iter().filter(|p| p.kernel_free) {
        let exe = out_dir.join(&p.name);
        let build = Command::new("g++")
            .arg("-I")
            .arg(root.join("include"))
            .args(p.sources.iter().map(|s| dir.join(s)))
            .arg("-L")
            .arg(&lib)
            .arg("-lhipmem")
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-o")
            .arg(&exe)
            .output()
            .expect("run g++");
        if !build.status.success() {
            failures.push(format!("{}: g++ failed:\n{}", p.name, String::from_utf8_lossy(&build.stderr)));
            continue;
        }
        let src_dir = dir.join(&p.sources[0]).parent().unwrap().to_path_buf();
        let child = Command::new(&exe)
            .current_dir(&src_dir)
            .env("HIPMEM_BACKEND", "host")
            .env("HIPMEM_HOST_DEVICES", "2")
            .env_remove("HIPMEM_HOST_VMM_GRANULARITY")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start the program");
        let pid = child.id();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let output = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(o) => o.expect("wait for the program"),
            Err(_) => {
                let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
                failures.push(format!("{}: did not finish within 120 s", p.name));
                continue;
            }
        };
        ran += 1;
        let text =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let bad = failed_checks(&text, &p.checks);
        if !output.status.success() || !bad.is_empty() {
            let tail: Vec<&str> = text.lines().rev().take(15).collect::<Vec<_>>().into_iter().rev().collect();
            failures.push(format!(
                "{}: exit {:?}, failed checks {bad:?}; output ends:\n{}",
                p.name,
                output.status.code(),
                tail.join("\n")
            ));
        } else {
            println!("PASS  {}", p.name);
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    assert!(
        failures.is_empty(),
        "{} of the kernel-free programs failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
    assert!(ran >= 5, "only {ran} kernel-free programs ran");
}
