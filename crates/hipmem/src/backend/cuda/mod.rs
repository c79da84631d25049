//! The `cuda` backend (being written).
use std::sync::Arc;

use super::Backend;
use crate::error::{Error, Result};

/// Loads libcuda.so.1, initializes the driver and returns the backend.
pub fn open() -> Result<Arc<dyn Backend>> {
    Err(Error::NotInitialized(
        "the cuda backend is not built yet".into(),
    ))
}
