//! The error type: one variant per hipError_t code, names, messages.

use hipmem::error::{code, description_of_code, name_of_code};
use hipmem::{BackendChoice, Error};

fn all_variants() -> Vec<(Error, i32, &'static str)> {
    vec![
        (Error::InvalidValue("v".into()), 1, "hipErrorInvalidValue"),
        (Error::OutOfMemory("v".into()), 2, "hipErrorOutOfMemory"),
        (Error::NotInitialized("v".into()), 3, "hipErrorNotInitialized"),
        (Error::InvalidDevicePointer("v".into()), 17, "hipErrorInvalidDevicePointer"),
        (Error::InvalidMemcpyDirection("v".into()), 21, "hipErrorInvalidMemcpyDirection"),
        (Error::InvalidDevice("v".into()), 101, "hipErrorInvalidDevice"),
        (Error::InvalidHandle("v".into()), 400, "hipErrorInvalidHandle"),
        (Error::NotReady("v".into()), 600, "hipErrorNotReady"),
        (Error::ContextIsDestroyed("v".into()), 709, "hipErrorContextIsDestroyed"),
        (Error::NotSupported("v".into()), 801, "hipErrorNotSupported"),
        (Error::Unknown("v".into()), 999, "hipErrorUnknown"),
    ]
}

#[test]
fn every_variant_has_the_contract_code_and_name() {
    for (err, num, name) in all_variants() {
        assert_eq!(err.code(), num, "{err:?}");
        assert_eq!(err.name(), name);
        assert_eq!(name_of_code(num), name);
        assert_eq!(err.message(), "v");
        assert_eq!(err.to_string(), format!("{name}: v"));
        assert_ne!(description_of_code(num), description_of_code(0), "{name} has no description");
    }
    assert_eq!(name_of_code(0), "hipSuccess");
    assert_eq!(name_of_code(12_345), "hipErrorUnknown");
}

#[test]
fn the_code_constants_are_the_contracts() {
    assert_eq!(code::SUCCESS, 0);
    assert_eq!(code::INVALID_VALUE, 1);
    assert_eq!(code::OUT_OF_MEMORY, 2);
    assert_eq!(code::NOT_INITIALIZED, 3);
    assert_eq!(code::INVALID_DEVICE_POINTER, 17);
    assert_eq!(code::INVALID_MEMCPY_DIRECTION, 21);
    assert_eq!(code::INVALID_DEVICE, 101);
    assert_eq!(code::INVALID_HANDLE, 400);
    assert_eq!(code::NOT_READY, 600);
    assert_eq!(code::CONTEXT_IS_DESTROYED, 709);
    assert_eq!(code::NOT_SUPPORTED, 801);
    assert_eq!(code::UNKNOWN, 999);
}

#[test]
fn from_code_round_trips_and_unknown_codes_become_unknown() {
    for (err, num, _) in all_variants() {
        let back = Error::from_code(num, "again");
        assert_eq!(back.code(), num);
        assert_eq!(back.message(), "again");
        assert_eq!(std::mem::discriminant(&back), std::mem::discriminant(&err));
    }
    for odd in [0, 4, 42, -1, 100_000] {
        assert_eq!(Error::from_code(odd, "x").code(), 999, "code {odd}");
    }
}

#[test]
fn context_keeps_the_code_and_prefixes_the_message() {
    for (err, num, name) in all_variants() {
        let e = err.context("while testing");
        assert_eq!(e.code(), num);
        assert_eq!(e.message(), "while testing: v");
        assert_eq!(e.to_string(), format!("{name}: while testing: v"));
    }
}

#[test]
fn backend_choices_parse() {
    assert_eq!("host".parse::<BackendChoice>().unwrap(), BackendChoice::Host);
    assert_eq!(" CUDA ".parse::<BackendChoice>().unwrap(), BackendChoice::Cuda);
    assert_eq!("".parse::<BackendChoice>().unwrap(), BackendChoice::Auto);
    assert_eq!("auto".parse::<BackendChoice>().unwrap(), BackendChoice::Auto);
    crate::expect_err("rocm-or-so".parse::<BackendChoice>(), 1, &["unknown backend"]);
    for c in [BackendChoice::Auto, BackendChoice::Host, BackendChoice::Cuda] {
        assert_eq!(c.to_string().parse::<BackendChoice>().unwrap(), c);
    }
}

/// Errors from real calls carry a specific message and convert to the
/// hipError_t the C ABI returns.
#[test]
fn errors_from_calls_say_what_was_wrong() {
    let rt = crate::runtime();
    let e = rt.device(rt.device_count() + 3).unwrap_err();
    assert_eq!(e.code(), code::INVALID_DEVICE);
    assert!(e.message().contains(&(rt.device_count() + 3).to_string()), "{e}");
    assert!(e.to_string().starts_with("hipErrorInvalidDevice: "), "{e}");
    let e = hipmem::MemcpyKind::from_raw(7).unwrap_err();
    assert_eq!(e.code(), code::INVALID_MEMCPY_DIRECTION);
    assert!(e.message().contains('7'), "{e}");
    assert_eq!(description_of_code(e.code()), "invalid copy direction for memcpy");
}
