//! Unit tests of the hip backend that need no HIP library: loading errors,
//! the error mapping, version decoding. The backend itself is tested by the
//! conformance suite through libhipmem (the loopback, see `.ci/run`) and by
//! `crates/hipmem-cli/tests/hip_backend.rs` against AMD's library.

use super::*;

#[test]
fn a_missing_library_is_not_initialized_and_names_what_was_looked_for() {
    let err = sys::load(&["libhipmem-no-such-library.so.6"]).expect_err("must fail");
    assert!(matches!(err, Error::NotInitialized(_)), "{err:?}");
    assert!(err.message().contains("libhipmem-no-such-library.so.6"), "{err}");
    assert!(err.message().contains(LIBRARY_VARIABLE), "{err}");
}

#[test]
fn a_library_without_the_core_symbols_is_not_initialized() {
    // libc loads everywhere but has no HIP entry points.
    let err = sys::load(&["libc.so.6"]).expect_err("must fail");
    assert!(matches!(err, Error::NotInitialized(_)), "{err:?}");
    assert!(err.message().contains("has no symbol hip"), "{err}");
}

#[test]
fn hip_errors_map_onto_hipmem_errors_with_the_same_numbers() {
    let cases: [(sys::hipError_t, i32); 21] = [
        (1, 1),
        (2, 2),
        (3, 3),
        (4, 3),
        (12, 12),
        (13, 13),
        (217, 101),
        (500, 500),
        (704, 704),
        (705, 705),
        (17, 17),
        (21, 21),
        (100, 3),
        (101, 101),
        (400, 400),
        (600, 600),
        (709, 709),
        (801, 801),
        (999, 999),
        (201, 999),
        (12345, 999),
    ];
    for (code, hipmem) in cases {
        let e = result::error_from_code(code, "m".into());
        assert_eq!(e.code(), hipmem, "hipError_t {code}");
        assert_eq!(e.message(), "m");
    }
}

#[test]
fn error_messages_name_the_call_and_the_runtime_text() {
    let m = result::error_message(
        "hipMalloc(1 bytes) on device 0",
        2,
        Some("hipErrorOutOfMemory"),
        Some("out of memory"),
    );
    assert_eq!(m, "hipMalloc(1 bytes) on device 0: hipErrorOutOfMemory: out of memory");
    assert_eq!(result::error_message("hipInit(0)", 77, None, None), "hipInit(0): hipError_t 77");
}

#[test]
fn hip_versions_decode() {
    let v = HipVersion::from_raw(60_241_134).unwrap();
    assert_eq!((v.major, v.minor, v.patch), (6, 2, 41134));
    assert_eq!(v.to_string(), "6.2.41134");
    assert!(v.at_least(6, 2) && v.at_least(5, 3) && !v.at_least(6, 3));
    let old = HipVersion::from_raw(50_221_153).unwrap();
    assert_eq!((old.major, old.minor), (5, 2));
    assert!(!old.at_least(5, 3));
    assert_eq!(HipVersion::from_raw(0), None);
    assert_eq!(HipVersion::from_raw(-1), None);
}

#[test]
fn backend_choices_parse_hip_spellings() {
    for s in ["hip", "HIP", " amd ", "rocm"] {
        assert_eq!(s.parse::<crate::backend::BackendChoice>().unwrap(), crate::backend::BackendChoice::Hip);
    }
    assert_eq!(crate::backend::BackendChoice::Hip.to_string(), "hip");
    assert_eq!(BackendKind::Hip.to_string(), "hip");
}

#[test]
fn host_callback_panics_stay_on_the_host_side() {
    use std::sync::atomic::AtomicBool;
    static RAN: AtomicBool = AtomicBool::new(false);
    let ok: HostCallback = Box::new(|| RAN.store(true, Ordering::SeqCst));
    // SAFETY: hands the trampoline a leaked Box<HostCallback>, as the runtime would.
    unsafe { host_func_trampoline(Box::into_raw(Box::new(ok)).cast()) };
    assert!(RAN.load(Ordering::SeqCst));
    let bad: HostCallback = Box::new(|| panic!("boom"));
    // SAFETY: as above; the panic is caught inside.
    unsafe { host_func_trampoline(Box::into_raw(Box::new(bad)).cast()) };
}
