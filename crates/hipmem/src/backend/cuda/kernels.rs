//! hipmem's built-in kernels on CUDA: hand-written PTX (`kernels.ptx`),
//! JIT-compiled by the driver into each device's primary context on first
//! use, and launched on a stream.

use std::ffi::{CStr, CString, c_void};
use std::time::Duration;

use super::handles::{Device, Handle, Target, bind_context, lock};
use super::{CudaBackend, driver, result};
use crate::backend::{DevicePtr, FillValue, RawStream};
use crate::error::{Error, Result};
use driver::CUfunction;

/// The PTX text of the built-in kernels (see `kernels.ptx`).
pub const KERNELS_PTX: &str = include_str!("kernels.ptx");

/// Entry names in [`KERNELS_PTX`].
pub const KERNEL_NAMES: [&str; 5] =
    ["hipmem_fill_u8", "hipmem_fill_u16", "hipmem_fill_u32", "hipmem_iota_i32", "hipmem_delay"];

/// Threads per block of the element kernels.
pub(super) const BLOCK: u32 = 256;
/// At most this many blocks per multiprocessor (the kernels loop over the rest).
const BLOCKS_PER_SM: u64 = 32;

/// The functions of `kernels.ptx`, loaded into one device's primary context.
#[derive(Debug)]
pub(super) struct Kernels {
    pub(super) module: Handle<driver::CUmod_st>,
    fill_u8: Handle<driver::CUfunc_st>,
    fill_u16: Handle<driver::CUfunc_st>,
    fill_u32: Handle<driver::CUfunc_st>,
    iota_i32: Handle<driver::CUfunc_st>,
    pub(super) delay: Handle<driver::CUfunc_st>,
}

impl CudaBackend {
    pub(super) fn kernels<'a>(&self, dev: &'a Device) -> Result<&'a Kernels> {
        if let Some(k) = dev.kernels.get() {
            return Ok(k);
        }
        let _guard = lock(&dev.kernels_init);
        if let Some(k) = dev.kernels.get() {
            return Ok(k);
        }
        let d = self.driver;
        let _ctx = bind_context(d, dev.ctx(d)?.0)?;
        let ptx = CString::new(KERNELS_PTX)
            .map_err(|_| Error::Unknown("kernels.ptx contains a NUL byte".into()))?;
        let module = result::module_load_ptx(d, &ptx, || {
            format!("cuModuleLoadData(kernels.ptx) on device {}", dev.ordinal)
        })?;
        let function = |name: &CStr| -> Result<Handle<driver::CUfunc_st>> {
            // SAFETY: `module` was just loaded and is not unloaded while in use.
            unsafe { result::module_get_function(d, module, name) }.map(Handle)
        };
        let loaded = (|| {
            Ok(Kernels {
                module: Handle(module),
                fill_u8: function(c"hipmem_fill_u8")?,
                fill_u16: function(c"hipmem_fill_u16")?,
                fill_u32: function(c"hipmem_fill_u32")?,
                iota_i32: function(c"hipmem_iota_i32")?,
                delay: function(c"hipmem_delay")?,
            })
        })();
        match loaded {
            Ok(k) => Ok(dev.kernels.get_or_init(|| k)),
            Err(e) => {
                // SAFETY: no function of the module was handed out.
                let _ = unsafe { (d.cuModuleUnload)(module) };
                Err(e)
            }
        }
    }

    /// Launches `f` with `grid` blocks of `block` threads on `target`.
    pub(super) fn launch(
        &self,
        target: &Target<'_>,
        f: CUfunction,
        grid: u32,
        block: u32,
        params: &mut [*mut c_void],
        what: impl FnOnce() -> String,
    ) -> Result<()> {
        // SAFETY: `f` is a live function of a module loaded in the target
        // device's context (current on this thread), `target.raw` a live stream
        // of that context (or null), and `params` holds one pointer per kernel
        // parameter, each to a value of the parameter's PTX type; the driver
        // copies the values before returning.
        let r = unsafe {
            (self.driver.cuLaunchKernel)(
                f,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                target.raw,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        self.check(r, what)
    }

    pub(super) fn grid_for(dev: &Device, count: u64) -> u32 {
        let wanted = count.div_ceil(u64::from(BLOCK));
        let cap = BLOCKS_PER_SM * u64::from(dev.multiprocessors.max(1));
        wanted.min(cap).max(1) as u32
    }

    pub(super) fn fill_kernel(
        &self,
        dst: DevicePtr,
        value: FillValue,
        count: u64,
        stream: RawStream,
    ) -> Result<()> {
        let t = self.target(stream)?;
        count
            .checked_mul(value.element_size())
            .ok_or_else(|| Error::InvalidValue(format!("fill kernel: {count} elements overflow")))?;
        if count == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return Err(Error::InvalidValue("fill kernel: null destination".into()));
        }
        let k = self.kernels(t.dev)?;
        let (f, name, mut v) = match value {
            FillValue::U8(v) => (k.fill_u8, "hipmem_fill_u8", u32::from(v)),
            FillValue::U16(v) => (k.fill_u16, "hipmem_fill_u16", u32::from(v)),
            FillValue::U32(v) => (k.fill_u32, "hipmem_fill_u32", v),
        };
        let (mut p, mut n) = (dst.0, count);
        let mut params = [
            (&mut p as *mut u64).cast::<c_void>(),
            (&mut v as *mut u32).cast::<c_void>(),
            (&mut n as *mut u64).cast::<c_void>(),
        ];
        let grid = Self::grid_for(t.dev, count);
        self.launch(&t, f.0, grid, BLOCK, &mut params, || {
            format!("cuLaunchKernel({name}, {dst}, {count} elements) on device {}", t.dev.ordinal)
        })
    }

    pub(super) fn iota_kernel(&self, dst: DevicePtr, count: u64, k: i32, stream: RawStream) -> Result<()> {
        let t = self.target(stream)?;
        count
            .checked_mul(4)
            .ok_or_else(|| Error::InvalidValue(format!("iota kernel: {count} elements overflow")))?;
        if count == 0 {
            return Ok(());
        }
        if dst.is_null() {
            return Err(Error::InvalidValue("iota kernel: null destination".into()));
        }
        let kernels = self.kernels(t.dev)?;
        let (mut p, mut n, mut factor) = (dst.0, count, k);
        let mut params = [
            (&mut p as *mut u64).cast::<c_void>(),
            (&mut n as *mut u64).cast::<c_void>(),
            (&mut factor as *mut i32).cast::<c_void>(),
        ];
        let grid = Self::grid_for(t.dev, count);
        self.launch(&t, kernels.iota_i32.0, grid, BLOCK, &mut params, || {
            format!(
                "cuLaunchKernel(hipmem_iota_i32, {dst}, {count} elements, k {k}) on device {}",
                t.dev.ordinal
            )
        })
    }

    pub(super) fn delay_kernel(
        &self,
        duration: Duration,
        flag: DevicePtr,
        flag_value: u32,
        stream: RawStream,
    ) -> Result<()> {
        let t = self.target(stream)?;
        if flag.is_null() {
            return Err(Error::InvalidValue("delay kernel: null flag address".into()));
        }
        let kernels = self.kernels(t.dev)?;
        let mut ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        let (mut p, mut v) = (flag.0, flag_value);
        let mut params = [
            (&mut ns as *mut u64).cast::<c_void>(),
            (&mut p as *mut u64).cast::<c_void>(),
            (&mut v as *mut u32).cast::<c_void>(),
        ];
        self.launch(&t, kernels.delay.0, 1, 1, &mut params, || {
            format!("cuLaunchKernel(hipmem_delay, {duration:?}, flag {flag}) on device {}", t.dev.ordinal)
        })
    }

    // capability: virtual memory management (issue 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ptx_has_every_kernel() {
        assert!(KERNELS_PTX.contains(".address_size 64"));
        assert!(!KERNELS_PTX.contains('\0'));
        for name in KERNEL_NAMES {
            assert!(KERNELS_PTX.contains(&format!(".visible .entry {name}(")), "{name} missing");
        }
    }

    #[test]
    fn grids_are_bounded_and_never_empty() {
        let dev = Device::new(0, 0, 132);
        assert_eq!(CudaBackend::grid_for(&dev, 0), 1);
        assert_eq!(CudaBackend::grid_for(&dev, 1), 1);
        assert_eq!(CudaBackend::grid_for(&dev, 257), 2);
        assert_eq!(CudaBackend::grid_for(&dev, u64::MAX), 32 * 132);
    }
}
