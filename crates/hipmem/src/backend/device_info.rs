//! What a device says about itself beyond [`DeviceProperties`]: the numeric
//! attributes of `hipDeviceGetAttribute` / `hipGetDeviceProperties`, its
//! UUID, the driver version and the range of stream priorities.
//!
//! [`DeviceAttribute`] is hipmem's own list, one variant per scalar the CUDA
//! driver (and HIP's CUDA-compatible attribute set) can report; a
//! multi-dimensional limit (a texture's width and height) is one variant per
//! dimension. Each backend answers what it can through
//! [`super::Backend::device_attribute`]; the
//! default answers the attributes [`DeviceProperties`] already holds and
//! reports every other one as NotSupported.
//!
//! [`DeviceProperties`]: super::DeviceProperties
#![forbid(unsafe_code)]

use super::{Backend, DeviceProperties};
use crate::error::{Error, Result};

macro_rules! attributes {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// A scalar attribute of a device (named as HIP's `hipDeviceAttribute_t`
        /// and CUDA's `CUdevice_attribute` name it).
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum DeviceAttribute {
            $($(#[$doc])* $name,)*
        }

        impl DeviceAttribute {
            /// Every attribute, in declaration order.
            pub const ALL: &'static [DeviceAttribute] = &[$(DeviceAttribute::$name,)*];

            /// The variant's name.
            pub fn name(self) -> &'static str {
                match self {
                    $(DeviceAttribute::$name => stringify!($name),)*
                }
            }
        }
    };
}

attributes! {
    /// Maximum threads per block.
    MaxThreadsPerBlock,
    /// Maximum block size, x.
    MaxBlockDimX,
    /// Maximum block size, y.
    MaxBlockDimY,
    /// Maximum block size, z.
    MaxBlockDimZ,
    /// Maximum grid size, x.
    MaxGridDimX,
    /// Maximum grid size, y.
    MaxGridDimY,
    /// Maximum grid size, z.
    MaxGridDimZ,
    /// Shared memory available to one block, bytes.
    MaxSharedMemoryPerBlock,
    /// Constant memory, bytes.
    TotalConstantMemory,
    /// Threads per warp (wavefront).
    WarpSize,
    /// Largest pitch of pitched copies, bytes.
    MaxPitch,
    /// 32-bit registers available to one block.
    MaxRegistersPerBlock,
    /// Peak clock frequency, kHz.
    ClockRate,
    /// Alignment of textures, bytes.
    TextureAlignment,
    /// Copies and kernels may overlap (deprecated: AsyncEngineCount).
    GpuOverlap,
    /// Number of multiprocessors.
    MultiprocessorCount,
    /// Kernels have a run-time limit.
    KernelExecTimeout,
    /// Integrated with the host (shares its memory).
    Integrated,
    /// Host memory can be mapped into the device's address space.
    CanMapHostMemory,
    /// Compute mode (0 default).
    ComputeMode,
    /// Largest 1D texture, elements.
    MaxTexture1DWidth,
    /// Largest 2D texture, width.
    MaxTexture2DWidth,
    /// Largest 2D texture, height.
    MaxTexture2DHeight,
    /// Largest 3D texture, width.
    MaxTexture3DWidth,
    /// Largest 3D texture, height.
    MaxTexture3DHeight,
    /// Largest 3D texture, depth.
    MaxTexture3DDepth,
    /// Largest 2D layered texture, width.
    MaxTexture2DLayeredWidth,
    /// Largest 2D layered texture, height.
    MaxTexture2DLayeredHeight,
    /// Largest 2D layered texture, layers.
    MaxTexture2DLayeredLayers,
    /// Alignment of surfaces, bytes.
    SurfaceAlignment,
    /// Kernels may run concurrently.
    ConcurrentKernels,
    /// ECC is enabled.
    EccEnabled,
    /// PCI bus id.
    PciBusId,
    /// PCI device id.
    PciDeviceId,
    /// Tesla Compute Cluster driver (Windows).
    TccDriver,
    /// Peak memory clock frequency, kHz.
    MemoryClockRate,
    /// Memory bus width, bits.
    GlobalMemoryBusWidth,
    /// L2 cache, bytes.
    L2CacheSize,
    /// Resident threads per multiprocessor.
    MaxThreadsPerMultiprocessor,
    /// Copy engines.
    AsyncEngineCount,
    /// One address space for host and devices.
    UnifiedAddressing,
    /// Largest 1D layered texture, width.
    MaxTexture1DLayeredWidth,
    /// Largest 1D layered texture, layers.
    MaxTexture1DLayeredLayers,
    /// Largest 2D gather texture, width.
    MaxTexture2DGatherWidth,
    /// Largest 2D gather texture, height.
    MaxTexture2DGatherHeight,
    /// Alternate largest 3D texture, width.
    MaxTexture3DWidthAlternate,
    /// Alternate largest 3D texture, height.
    MaxTexture3DHeightAlternate,
    /// Alternate largest 3D texture, depth.
    MaxTexture3DDepthAlternate,
    /// PCI domain id.
    PciDomainId,
    /// Pitch alignment of 2D textures, bytes.
    TexturePitchAlignment,
    /// Largest cubemap texture, width.
    MaxTextureCubemapWidth,
    /// Largest layered cubemap texture, width.
    MaxTextureCubemapLayeredWidth,
    /// Largest layered cubemap texture, layers.
    MaxTextureCubemapLayeredLayers,
    /// Largest 1D surface, width.
    MaxSurface1DWidth,
    /// Largest 2D surface, width.
    MaxSurface2DWidth,
    /// Largest 2D surface, height.
    MaxSurface2DHeight,
    /// Largest 3D surface, width.
    MaxSurface3DWidth,
    /// Largest 3D surface, height.
    MaxSurface3DHeight,
    /// Largest 3D surface, depth.
    MaxSurface3DDepth,
    /// Largest 1D layered surface, width.
    MaxSurface1DLayeredWidth,
    /// Largest 1D layered surface, layers.
    MaxSurface1DLayeredLayers,
    /// Largest 2D layered surface, width.
    MaxSurface2DLayeredWidth,
    /// Largest 2D layered surface, height.
    MaxSurface2DLayeredHeight,
    /// Largest 2D layered surface, layers.
    MaxSurface2DLayeredLayers,
    /// Largest cubemap surface, width.
    MaxSurfaceCubemapWidth,
    /// Largest layered cubemap surface, width.
    MaxSurfaceCubemapLayeredWidth,
    /// Largest layered cubemap surface, layers.
    MaxSurfaceCubemapLayeredLayers,
    /// Largest 1D texture on linear memory, width.
    MaxTexture1DLinearWidth,
    /// Largest 2D texture on pitched memory, width.
    MaxTexture2DLinearWidth,
    /// Largest 2D texture on pitched memory, height.
    MaxTexture2DLinearHeight,
    /// Largest 2D texture on pitched memory, pitch.
    MaxTexture2DLinearPitch,
    /// Largest mipmapped 2D texture, width.
    MaxTexture2DMipmappedWidth,
    /// Largest mipmapped 2D texture, height.
    MaxTexture2DMipmappedHeight,
    /// Compute capability, major.
    ComputeCapabilityMajor,
    /// Compute capability, minor.
    ComputeCapabilityMinor,
    /// Largest mipmapped 1D texture, width.
    MaxTexture1DMipmappedWidth,
    /// Stream priorities are supported.
    StreamPrioritiesSupported,
    /// Globals are cached in L1.
    GlobalL1CacheSupported,
    /// Locals are cached in L1.
    LocalL1CacheSupported,
    /// Shared memory per multiprocessor, bytes.
    MaxSharedMemoryPerMultiprocessor,
    /// 32-bit registers per multiprocessor.
    MaxRegistersPerMultiprocessor,
    /// Managed memory can be allocated.
    ManagedMemory,
    /// On a multi-GPU board.
    MultiGpuBoard,
    /// Group id of the multi-GPU board.
    MultiGpuBoardGroupId,
    /// The host link supports native atomics.
    HostNativeAtomicSupported,
    /// Single- to double-precision performance ratio.
    SingleToDoublePrecisionPerfRatio,
    /// The device can access pageable host memory coherently.
    PageableMemoryAccess,
    /// The device and the host may access managed memory at the same time.
    ConcurrentManagedAccess,
    /// Compute preemption is supported.
    ComputePreemptionSupported,
    /// Registered host memory has the same address on the device.
    CanUseHostPointerForRegisteredMem,
    /// Cooperative launches are supported.
    CooperativeLaunch,
    /// Cooperative launches across devices are supported.
    CooperativeMultiDeviceLaunch,
    /// Shared memory per block with opt-in, bytes.
    MaxSharedMemoryPerBlockOptin,
    /// `hipHostRegister` is supported.
    HostRegisterSupported,
    /// Pageable memory is accessed through the host's page tables.
    PageableMemoryAccessUsesHostPageTables,
    /// The host can access managed memory on the device without migration.
    DirectManagedMemAccessFromHost,
    /// Virtual memory management is supported.
    VirtualMemoryManagementSupported,
    /// Resident blocks per multiprocessor.
    MaxBlocksPerMultiprocessor,
    /// Largest persisting L2 cache, bytes.
    MaxPersistingL2CacheSize,
    /// Largest access-policy window, bytes.
    MaxAccessPolicyWindowSize,
    /// Shared memory the driver reserves per block, bytes.
    ReservedSharedMemoryPerBlock,
    /// Sparse arrays are supported.
    SparseArraySupported,
    /// `hipHostRegisterReadOnly` is supported.
    ReadOnlyHostRegisterSupported,
    /// Timeline semaphore interop is supported.
    TimelineSemaphoreInteropSupported,
    /// Stream-ordered allocation from memory pools is supported.
    MemoryPoolsSupported,
    /// GPUDirect RDMA is supported.
    GpuDirectRdmaSupported,
    /// GPUDirect RDMA flush options (bitmask).
    GpuDirectRdmaFlushWritesOptions,
    /// GPUDirect RDMA write ordering.
    GpuDirectRdmaWritesOrdering,
    /// Handle types of pool IPC (bitmask of `hipMemAllocationHandleType`).
    MemoryPoolSupportedHandleTypes,
    /// Cluster launches are supported.
    ClusterLaunch,
    /// Deferred mapping of arrays is supported.
    DeferredMappingArraySupported,
    /// IPC events are supported.
    IpcEventSupported,
    /// Unified function pointers are supported.
    UnifiedFunctionPointers,
}

/// Answers what [`DeviceProperties`] holds (what every backend reports);
/// every other attribute is NotSupported. The default of
/// [`super::Backend::device_attribute`].
pub fn attribute_from_properties(
    backend: &(impl Backend + ?Sized),
    device: usize,
    attribute: DeviceAttribute,
) -> Result<i64> {
    let p: DeviceProperties = backend.device_properties(device)?;
    let caps = &p.capabilities;
    let flag = |b: bool| i64::from(b);
    Ok(match attribute {
        DeviceAttribute::MultiprocessorCount => i64::from(p.multiprocessor_count),
        DeviceAttribute::ComputeCapabilityMajor => i64::from(p.compute_capability.0),
        DeviceAttribute::ComputeCapabilityMinor => i64::from(p.compute_capability.1),
        DeviceAttribute::CanMapHostMemory => flag(caps.can_map_host_memory),
        DeviceAttribute::UnifiedAddressing => flag(caps.unified_addressing),
        DeviceAttribute::ManagedMemory => flag(caps.managed_memory),
        DeviceAttribute::ConcurrentManagedAccess => flag(caps.concurrent_managed_access),
        DeviceAttribute::MemoryPoolsSupported => flag(caps.memory_pools),
        DeviceAttribute::VirtualMemoryManagementSupported => flag(caps.virtual_memory),
        DeviceAttribute::HostRegisterSupported => flag(backend.page_locked_memory().is_some()),
        other => {
            return Err(Error::NotSupported(format!(
                "the {} backend does not report the device attribute {}",
                backend.kind(),
                other.name()
            )));
        }
    })
}

/// The range of stream priorities a device accepts: `least` is the lowest
/// priority (the default, 0 on CUDA and HIP), `greatest` the highest (a
/// smaller number). A device without priorities reports `(0, 0)`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PriorityRange {
    /// The lowest priority (numerically largest).
    pub least: i32,
    /// The highest priority (numerically smallest).
    pub greatest: i32,
}

impl PriorityRange {
    /// No priorities: every stream has priority 0.
    pub const NONE: PriorityRange = PriorityRange { least: 0, greatest: 0 };

    /// `priority` clamped into the range (CUDA's and HIP's rule for a
    /// priority outside it).
    pub fn clamp(&self, priority: i32) -> i32 {
        priority.clamp(self.greatest, self.least)
    }
}
