//! The device-code functions of HIP's runtime API: symbols
//! (`hipMemcpyToSymbol` and friends, `hipGetSymbolAddress`,
//! `hipGetSymbolSize`), occupancy and `hipLaunchKernel`.
//!
//! They need the program's device code. Under nvcc the header makes them
//! inline functions over the CUDA runtime that compiled the kernels
//! (`include/hip/hipmem_inline.h`), so a program built with nvcc never calls
//! these. A build without nvcc (g++ on the CPU backend) has no device code:
//! these exports answer hipErrorNotSupported with a message saying so.

use std::ffi::{c_int, c_void};

use hipmem_rs::{Error, Result};

use crate::call;
use crate::types::*;

/// `dim3`, as HIP lays it out (three `uint32_t`).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

const _: () = assert!(std::mem::size_of::<dim3>() == 12);

fn no_device_code(what: &str) -> Result<()> {
    Err(Error::NotSupported(format!(
        "{what} needs the program's device code: libhipmem has none without nvcc (build with nvcc, where \
         hip_runtime.h maps {what} onto the CUDA runtime that compiled the kernels)"
    )))
}

/// `hipGetSymbolAddress` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetSymbolAddress(devPtr: *mut *mut c_void, symbol: *const c_void) -> hipError_t {
    let _ = (devPtr, symbol);
    call(|| no_device_code("hipGetSymbolAddress"))
}

/// `hipGetSymbolSize` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipGetSymbolSize(size: *mut usize, symbol: *const c_void) -> hipError_t {
    let _ = (size, symbol);
    call(|| no_device_code("hipGetSymbolSize"))
}

/// `hipMemcpyToSymbol` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyToSymbol(
    symbol: *const c_void,
    src: *const c_void,
    sizeBytes: usize,
    offset: usize,
    kind: hipMemcpyKind,
) -> hipError_t {
    let _ = (symbol, src, sizeBytes, offset, kind);
    call(|| no_device_code("hipMemcpyToSymbol"))
}

/// `hipMemcpyToSymbolAsync` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyToSymbolAsync(
    symbol: *const c_void,
    src: *const c_void,
    sizeBytes: usize,
    offset: usize,
    kind: hipMemcpyKind,
    stream: hipStream_t,
) -> hipError_t {
    let _ = (symbol, src, sizeBytes, offset, kind, stream);
    call(|| no_device_code("hipMemcpyToSymbolAsync"))
}

/// `hipMemcpyFromSymbol` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyFromSymbol(
    dst: *mut c_void,
    symbol: *const c_void,
    sizeBytes: usize,
    offset: usize,
    kind: hipMemcpyKind,
) -> hipError_t {
    let _ = (dst, symbol, sizeBytes, offset, kind);
    call(|| no_device_code("hipMemcpyFromSymbol"))
}

/// `hipMemcpyFromSymbolAsync` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemcpyFromSymbolAsync(
    dst: *mut c_void,
    symbol: *const c_void,
    sizeBytes: usize,
    offset: usize,
    kind: hipMemcpyKind,
    stream: hipStream_t,
) -> hipError_t {
    let _ = (dst, symbol, sizeBytes, offset, kind, stream);
    call(|| no_device_code("hipMemcpyFromSymbolAsync"))
}

/// `hipOccupancyMaxPotentialBlockSize` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipOccupancyMaxPotentialBlockSize(
    gridSize: *mut c_int,
    blockSize: *mut c_int,
    f: *const c_void,
    dynSharedMemPerBlk: usize,
    blockSizeLimit: c_int,
) -> hipError_t {
    let _ = (gridSize, blockSize, f, dynSharedMemPerBlk, blockSizeLimit);
    call(|| no_device_code("hipOccupancyMaxPotentialBlockSize"))
}

/// `hipOccupancyMaxActiveBlocksPerMultiprocessor` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipOccupancyMaxActiveBlocksPerMultiprocessor(
    numBlocks: *mut c_int,
    f: *const c_void,
    blockSize: c_int,
    dynSharedMemPerBlk: usize,
) -> hipError_t {
    let _ = (numBlocks, f, blockSize, dynSharedMemPerBlk);
    call(|| no_device_code("hipOccupancyMaxActiveBlocksPerMultiprocessor"))
}

/// `hipLaunchKernel` without nvcc: NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipLaunchKernel(
    function_address: *const c_void,
    numBlocks: dim3,
    dimBlocks: dim3,
    args: *mut *mut c_void,
    sharedMemBytes: usize,
    stream: hipStream_t,
) -> hipError_t {
    let _ = (function_address, numBlocks, dimBlocks, args, sharedMemBytes, stream);
    call(|| no_device_code("hipLaunchKernel"))
}
