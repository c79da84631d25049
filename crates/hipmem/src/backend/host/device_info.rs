//! What an emulated device says about itself (`hipDeviceGetAttribute`,
//! `hipGetDeviceProperties`).
//!
//! Three kinds of answer:
//! - what the emulation is: memory size, capabilities (pools, virtual
//!   memory, managed and page-locked memory), integrated with the host,
//!   unified addressing, no stream priorities, no textures or surfaces
//!   (their limits are 0), no PCI location;
//! - what the machine is: the CPU's peak clock and L2 cache size, read from
//!   sysfs (0 where the system does not say);
//! - the kernel model the emulation declares, [`KERNEL_LIMITS`]: it runs
//!   only its built-in kernels, on worker threads, but programs size their
//!   launches from these numbers, so it reports CUDA's limits for current
//!   GPUs (warps of 32, 1024 threads per block, ...).
#![forbid(unsafe_code)]

use super::HostBackend;
use crate::backend::Backend;
use crate::backend::device_info::DeviceAttribute;
use crate::error::Result;

/// The version `hipDriverGetVersion` reports on the emulation: the HIP
/// version hipmem implements, `major * 10_000_000 + minor * 100_000 + patch`
/// (HIP's `HIP_VERSION` encoding; 6.2.0).
pub const EMULATION_DRIVER_VERSION: i32 = 60_200_000;

/// The kernel model the emulation declares (see the module documentation).
pub const KERNEL_LIMITS: &[(DeviceAttribute, i64)] = &[
    (DeviceAttribute::MaxThreadsPerBlock, 1024),
    (DeviceAttribute::MaxBlockDimX, 1024),
    (DeviceAttribute::MaxBlockDimY, 1024),
    (DeviceAttribute::MaxBlockDimZ, 64),
    (DeviceAttribute::MaxGridDimX, 2_147_483_647),
    (DeviceAttribute::MaxGridDimY, 65_535),
    (DeviceAttribute::MaxGridDimZ, 65_535),
    (DeviceAttribute::MaxSharedMemoryPerBlock, 48 << 10),
    (DeviceAttribute::MaxSharedMemoryPerBlockOptin, 48 << 10),
    (DeviceAttribute::ReservedSharedMemoryPerBlock, 0),
    (DeviceAttribute::MaxSharedMemoryPerMultiprocessor, 64 << 10),
    (DeviceAttribute::TotalConstantMemory, 64 << 10),
    (DeviceAttribute::WarpSize, 32),
    (DeviceAttribute::MaxRegistersPerBlock, 65_536),
    (DeviceAttribute::MaxRegistersPerMultiprocessor, 65_536),
    (DeviceAttribute::MaxThreadsPerMultiprocessor, 2048),
    (DeviceAttribute::MaxBlocksPerMultiprocessor, 32),
    (DeviceAttribute::MaxPitch, 2_147_483_647),
    (DeviceAttribute::TextureAlignment, 512),
    (DeviceAttribute::TexturePitchAlignment, 32),
    (DeviceAttribute::SurfaceAlignment, 512),
];

/// Reads a whole number from a sysfs file (`None` if absent or not a number).
fn sysfs_number(path: &str) -> Option<i64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The CPU's peak clock in kHz (`cpuinfo_max_freq` is in kHz), or 0.
fn cpu_clock_khz() -> i64 {
    sysfs_number("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").unwrap_or(0)
}

/// The size of the CPU's L2 cache in bytes, or 0.
fn l2_cache_bytes() -> i64 {
    for index in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{index}");
        if sysfs_number(&format!("{dir}/level")) != Some(2) {
            continue;
        }
        let Ok(size) = std::fs::read_to_string(format!("{dir}/size")) else { continue };
        let size = size.trim();
        let (digits, scale) = match size.chars().last() {
            Some('K') => (&size[..size.len() - 1], 1 << 10),
            Some('M') => (&size[..size.len() - 1], 1 << 20),
            _ => (size, 1),
        };
        if let Ok(n) = digits.parse::<i64>() {
            return n * scale;
        }
    }
    0
}

impl HostBackend {
    /// The answer to one attribute of an emulated device.
    pub(super) fn emulated_attribute(&self, device: usize, attribute: DeviceAttribute) -> Result<i64> {
        use DeviceAttribute as A;
        self.device(device)?;
        if let Some(&(_, v)) = KERNEL_LIMITS.iter().find(|(a, _)| *a == attribute) {
            return Ok(v);
        }
        let caps = self.device_properties(device)?.capabilities;
        let flag = |b: bool| i64::from(b);
        Ok(match attribute {
            A::ClockRate => cpu_clock_khz(),
            A::L2CacheSize => l2_cache_bytes(),
            A::MultiprocessorCount => i64::from(self.device_properties(device)?.multiprocessor_count),
            A::ComputeCapabilityMajor | A::ComputeCapabilityMinor => 0,
            // Copies and fills run on each stream's own worker thread, so
            // transfers in both directions and kernels overlap.
            A::GpuOverlap | A::ConcurrentKernels => 1,
            A::AsyncEngineCount => 2,
            // Device memory is host memory.
            A::Integrated => 1,
            A::CanMapHostMemory => flag(caps.can_map_host_memory),
            A::UnifiedAddressing => flag(caps.unified_addressing),
            A::ManagedMemory => flag(caps.managed_memory),
            A::ConcurrentManagedAccess => flag(caps.concurrent_managed_access),
            A::MemoryPoolsSupported => flag(caps.memory_pools),
            A::VirtualMemoryManagementSupported => flag(caps.virtual_memory),
            // Mapped page-locked memory has its host address on the device.
            A::HostRegisterSupported | A::ReadOnlyHostRegisterSupported => 1,
            A::CanUseHostPointerForRegisteredMem => 1,
            // Pool IPC over POSIX file descriptors.
            A::MemoryPoolSupportedHandleTypes => 1,
            // The device is the CPU: its atomics are the host's; its threads
            // are preemptible; it caches globals and locals.
            A::HostNativeAtomicSupported
            | A::ComputePreemptionSupported
            | A::GlobalL1CacheSupported
            | A::LocalL1CacheSupported => 1,
            // Two double-precision lanes per single-precision pair of SIMD lanes.
            A::SingleToDoublePrecisionPerfRatio => 2,
            // Everything else the emulation does not have: textures and
            // surfaces, ECC, PCI location, priorities, cooperative and
            // cluster launches, access to pageable memory from device work
            // (only memory the emulator owns is device-accessible), RDMA,
            // IPC events, persisting L2, direct host access to managed
            // memory on the device (pages migrate).
            _ => 0,
        })
    }
}
