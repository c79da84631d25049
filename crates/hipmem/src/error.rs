//! The one error type of hipmem.
//!
//! Every variant corresponds to exactly one `hipError_t` code (the list in
//! `hip-memory-api.md`) and carries a message that says what was wrong, so that
//! the C ABI can return the code and a Rust user can read the reason.
#![forbid(unsafe_code)]

use std::fmt;
use std::sync::Mutex;

/// A `hipError_t` code other than `hipSuccess`, with a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `hipErrorInvalidValue` (1): an argument is out of range or inconsistent.
    #[error("hipErrorInvalidValue: {0}")]
    InvalidValue(String),
    /// `hipErrorOutOfMemory` (2, also `hipErrorMemoryAllocation`): no memory for the request.
    #[error("hipErrorOutOfMemory: {0}")]
    OutOfMemory(String),
    /// `hipErrorNotInitialized` (3): the backend could not be initialized.
    #[error("hipErrorNotInitialized: {0}")]
    NotInitialized(String),
    /// `hipErrorInvalidPitchValue` (12): a pitch smaller than the row it holds.
    #[error("hipErrorInvalidPitchValue: {0}")]
    InvalidPitchValue(String),
    /// `hipErrorInvalidSymbol` (13): not a symbol of the program's device code.
    #[error("hipErrorInvalidSymbol: {0}")]
    InvalidSymbol(String),
    /// `hipErrorInvalidDevicePointer` (17): a pointer is not a device pointer where one is needed.
    #[error("hipErrorInvalidDevicePointer: {0}")]
    InvalidDevicePointer(String),
    /// `hipErrorInvalidMemcpyDirection` (21): an unknown or impossible copy kind.
    #[error("hipErrorInvalidMemcpyDirection: {0}")]
    InvalidMemcpyDirection(String),
    /// `hipErrorInvalidDevice` (101): a device ordinal that does not exist.
    #[error("hipErrorInvalidDevice: {0}")]
    InvalidDevice(String),
    /// `hipErrorInvalidHandle` (400, also `hipErrorInvalidResourceHandle`): a stale or foreign handle.
    #[error("hipErrorInvalidHandle: {0}")]
    InvalidHandle(String),
    /// `hipErrorNotFound` (500): no allocation contains the address.
    #[error("hipErrorNotFound: {0}")]
    NotFound(String),
    /// `hipErrorNotReady` (600): asynchronous work has not completed yet.
    #[error("hipErrorNotReady: {0}")]
    NotReady(String),
    /// `hipErrorPeerAccessAlreadyEnabled` (704): peer access was already enabled.
    #[error("hipErrorPeerAccessAlreadyEnabled: {0}")]
    PeerAccessAlreadyEnabled(String),
    /// `hipErrorPeerAccessNotEnabled` (705): peer access was never enabled.
    #[error("hipErrorPeerAccessNotEnabled: {0}")]
    PeerAccessNotEnabled(String),
    /// `hipErrorContextIsDestroyed` (709): the stream or context was destroyed.
    #[error("hipErrorContextIsDestroyed: {0}")]
    ContextIsDestroyed(String),
    /// `hipErrorNotSupported` (801): the backend or device cannot do this.
    #[error("hipErrorNotSupported: {0}")]
    NotSupported(String),
    /// `hipErrorUnknown` (999): anything else, including a caught panic at the C boundary.
    #[error("hipErrorUnknown: {0}")]
    Unknown(String),
}

/// The result type of every fallible hipmem call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The numeric `hipError_t` codes hipmem uses.
pub mod code {
    /// `hipSuccess`.
    pub const SUCCESS: i32 = 0;
    /// `hipErrorInvalidValue`.
    pub const INVALID_VALUE: i32 = 1;
    /// `hipErrorOutOfMemory` / `hipErrorMemoryAllocation`.
    pub const OUT_OF_MEMORY: i32 = 2;
    /// `hipErrorNotInitialized`.
    pub const NOT_INITIALIZED: i32 = 3;
    /// `hipErrorInvalidPitchValue`.
    pub const INVALID_PITCH_VALUE: i32 = 12;
    /// `hipErrorInvalidSymbol`.
    pub const INVALID_SYMBOL: i32 = 13;
    /// `hipErrorInvalidDevicePointer`.
    pub const INVALID_DEVICE_POINTER: i32 = 17;
    /// `hipErrorInvalidMemcpyDirection`.
    pub const INVALID_MEMCPY_DIRECTION: i32 = 21;
    /// `hipErrorInvalidDevice`.
    pub const INVALID_DEVICE: i32 = 101;
    /// `hipErrorInvalidHandle` / `hipErrorInvalidResourceHandle`.
    pub const INVALID_HANDLE: i32 = 400;
    /// `hipErrorNotFound`.
    pub const NOT_FOUND: i32 = 500;
    /// `hipErrorNotReady`.
    pub const NOT_READY: i32 = 600;
    /// `hipErrorPeerAccessAlreadyEnabled`.
    pub const PEER_ACCESS_ALREADY_ENABLED: i32 = 704;
    /// `hipErrorPeerAccessNotEnabled`.
    pub const PEER_ACCESS_NOT_ENABLED: i32 = 705;
    /// `hipErrorContextIsDestroyed`.
    pub const CONTEXT_IS_DESTROYED: i32 = 709;
    /// `hipErrorNotSupported`.
    pub const NOT_SUPPORTED: i32 = 801;
    /// `hipErrorUnknown`.
    pub const UNKNOWN: i32 = 999;
}

impl Error {
    /// The numeric `hipError_t` value.
    pub fn code(&self) -> i32 {
        match self {
            Error::InvalidValue(_) => code::INVALID_VALUE,
            Error::OutOfMemory(_) => code::OUT_OF_MEMORY,
            Error::NotInitialized(_) => code::NOT_INITIALIZED,
            Error::InvalidPitchValue(_) => code::INVALID_PITCH_VALUE,
            Error::InvalidSymbol(_) => code::INVALID_SYMBOL,
            Error::InvalidDevicePointer(_) => code::INVALID_DEVICE_POINTER,
            Error::InvalidMemcpyDirection(_) => code::INVALID_MEMCPY_DIRECTION,
            Error::InvalidDevice(_) => code::INVALID_DEVICE,
            Error::InvalidHandle(_) => code::INVALID_HANDLE,
            Error::NotFound(_) => code::NOT_FOUND,
            Error::NotReady(_) => code::NOT_READY,
            Error::PeerAccessAlreadyEnabled(_) => code::PEER_ACCESS_ALREADY_ENABLED,
            Error::PeerAccessNotEnabled(_) => code::PEER_ACCESS_NOT_ENABLED,
            Error::ContextIsDestroyed(_) => code::CONTEXT_IS_DESTROYED,
            Error::NotSupported(_) => code::NOT_SUPPORTED,
            Error::Unknown(_) => code::UNKNOWN,
        }
    }

    /// The `hipError_t` enumerator name, as `hipGetErrorName` returns it.
    pub fn name(&self) -> &'static str {
        name_of_code(self.code())
    }

    /// The message that says what was wrong.
    pub fn message(&self) -> &str {
        match self {
            Error::InvalidValue(m)
            | Error::OutOfMemory(m)
            | Error::NotInitialized(m)
            | Error::InvalidPitchValue(m)
            | Error::InvalidSymbol(m)
            | Error::InvalidDevicePointer(m)
            | Error::InvalidMemcpyDirection(m)
            | Error::InvalidDevice(m)
            | Error::InvalidHandle(m)
            | Error::NotFound(m)
            | Error::NotReady(m)
            | Error::PeerAccessAlreadyEnabled(m)
            | Error::PeerAccessNotEnabled(m)
            | Error::ContextIsDestroyed(m)
            | Error::NotSupported(m)
            | Error::Unknown(m) => m,
        }
    }

    /// Builds the variant for a numeric code (unknown codes become [`Error::Unknown`]).
    pub fn from_code(code: i32, message: impl Into<String>) -> Error {
        let m = message.into();
        match code {
            code::INVALID_VALUE => Error::InvalidValue(m),
            code::OUT_OF_MEMORY => Error::OutOfMemory(m),
            code::NOT_INITIALIZED => Error::NotInitialized(m),
            code::INVALID_PITCH_VALUE => Error::InvalidPitchValue(m),
            code::INVALID_SYMBOL => Error::InvalidSymbol(m),
            code::INVALID_DEVICE_POINTER => Error::InvalidDevicePointer(m),
            code::INVALID_MEMCPY_DIRECTION => Error::InvalidMemcpyDirection(m),
            code::INVALID_DEVICE => Error::InvalidDevice(m),
            code::INVALID_HANDLE => Error::InvalidHandle(m),
            code::NOT_FOUND => Error::NotFound(m),
            code::NOT_READY => Error::NotReady(m),
            code::PEER_ACCESS_ALREADY_ENABLED => Error::PeerAccessAlreadyEnabled(m),
            code::PEER_ACCESS_NOT_ENABLED => Error::PeerAccessNotEnabled(m),
            code::CONTEXT_IS_DESTROYED => Error::ContextIsDestroyed(m),
            code::NOT_SUPPORTED => Error::NotSupported(m),
            _ => Error::Unknown(m),
        }
    }

    /// The same error with `context: ` put before its message.
    pub fn context(self, context: impl fmt::Display) -> Error {
        let code = self.code();
        Error::from_code(code, format!("{context}: {}", self.message()))
    }
}

/// The `hipError_t` enumerator name of a numeric code.
pub fn name_of_code(code: i32) -> &'static str {
    match code {
        code::SUCCESS => "hipSuccess",
        code::INVALID_VALUE => "hipErrorInvalidValue",
        code::OUT_OF_MEMORY => "hipErrorOutOfMemory",
        code::NOT_INITIALIZED => "hipErrorNotInitialized",
        code::INVALID_PITCH_VALUE => "hipErrorInvalidPitchValue",
        code::INVALID_SYMBOL => "hipErrorInvalidSymbol",
        code::INVALID_DEVICE_POINTER => "hipErrorInvalidDevicePointer",
        code::INVALID_MEMCPY_DIRECTION => "hipErrorInvalidMemcpyDirection",
        code::INVALID_DEVICE => "hipErrorInvalidDevice",
        code::INVALID_HANDLE => "hipErrorInvalidHandle",
        code::NOT_FOUND => "hipErrorNotFound",
        code::NOT_READY => "hipErrorNotReady",
        code::PEER_ACCESS_ALREADY_ENABLED => "hipErrorPeerAccessAlreadyEnabled",
        code::PEER_ACCESS_NOT_ENABLED => "hipErrorPeerAccessNotEnabled",
        code::CONTEXT_IS_DESTROYED => "hipErrorContextIsDestroyed",
        code::NOT_SUPPORTED => "hipErrorNotSupported",
        code::UNKNOWN => "hipErrorUnknown",
        _ => "hipErrorUnknown",
    }
}

/// The `hipGetErrorString` text of a numeric code.
pub fn description_of_code(code: i32) -> &'static str {
    match code {
        code::SUCCESS => "no error",
        code::INVALID_VALUE => "invalid argument",
        code::OUT_OF_MEMORY => "out of memory",
        code::NOT_INITIALIZED => "initialization error",
        code::INVALID_PITCH_VALUE => "invalid pitch argument",
        code::INVALID_SYMBOL => "invalid device symbol",
        code::INVALID_DEVICE_POINTER => "invalid device pointer",
        code::INVALID_MEMCPY_DIRECTION => "invalid copy direction for memcpy",
        code::INVALID_DEVICE => "invalid device ordinal",
        code::INVALID_HANDLE => "invalid resource handle",
        code::NOT_FOUND => "named symbol not found",
        code::NOT_READY => "device not ready",
        code::PEER_ACCESS_ALREADY_ENABLED => "peer access is already enabled",
        code::PEER_ACCESS_NOT_ENABLED => "peer access has not been enabled",
        code::CONTEXT_IS_DESTROYED => "context is destroyed",
        code::NOT_SUPPORTED => "operation not supported",
        _ => "unknown error",
    }
}

/// Errors raised where no caller can receive them (in `Drop`): recorded here and
/// logged, never panicked. Read them with [`DropErrors::take`].
#[derive(Debug, Default)]
pub struct DropErrors {
    errors: Mutex<Vec<Error>>,
}

impl DropErrors {
    /// Keep at most this many recorded errors (the oldest are dropped first).
    pub const CAPACITY: usize = 1024;

    /// Records an error from a destructor and logs it at warn level.
    pub fn record(&self, what: &str, error: Error) {
        tracing::warn!(target: "hipmem", "{what} failed in Drop: {error}");
        let mut errors = self.errors.lock().unwrap_or_else(|p| p.into_inner());
        if errors.len() >= Self::CAPACITY {
            errors.remove(0);
        }
        errors.push(error.context(what));
    }

    /// Returns and clears the recorded errors.
    pub fn take(&self) -> Vec<Error> {
        std::mem::take(&mut *self.errors.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// How many errors are recorded now.
    pub fn len(&self) -> usize {
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether no error is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
