//! Devices: properties, memory information, streams, events and buffers.
#![forbid(unsafe_code)]

use bytemuck::Pod;

use crate::backend::{DeviceProperties, EventFlags, MemInfo, RawStream, StreamFlags};
use crate::buffer::DeviceBuffer;
use crate::error::Result;
use crate::event::Event;
use crate::pool::{MemPool, PoolProps};
use crate::runtime::Runtime;
use crate::stream::Stream;

/// One device of a runtime.
#[derive(Clone, Debug)]
pub struct Device {
    pub(crate) rt: Runtime,
    pub(crate) ordinal: usize,
}

impl Device {
    /// Device `ordinal` of the process-wide runtime (backend from `HIPMEM_BACKEND`).
    pub fn get(ordinal: usize) -> Result<Device> {
        Runtime::global()?.device(ordinal)
    }

    /// The ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The runtime this device belongs to.
    pub fn runtime(&self) -> &Runtime {
        &self.rt
    }

    /// Name, memory size and capabilities.
    pub fn properties(&self) -> &DeviceProperties {
        &self.rt.inner.devices[self.ordinal]
    }

    /// Free and total memory (`hipMemGetInfo`).
    pub fn mem_info(&self) -> Result<MemInfo> {
        self.rt.mem_get_info(self.ordinal)
    }

    /// Waits for all work on all streams of the device (`hipDeviceSynchronize`).
    pub fn synchronize(&self) -> Result<()> {
        self.rt.device_synchronize(self.ordinal)
    }

    /// A new blocking stream (`hipStreamCreate`).
    pub fn create_stream(&self) -> Result<Stream> {
        self.create_stream_with_flags(StreamFlags::default())
    }

    /// A new stream with flags (`hipStreamCreateWithFlags`).
    pub fn create_stream_with_flags(&self, flags: StreamFlags) -> Result<Stream> {
        let raw = self.rt.backend().stream_create(self.ordinal, flags)?;
        Ok(Stream::register(&self.rt, raw, flags, true))
    }

    /// The device's legacy null stream (`0`): work on it waits for all blocking
    /// streams of the device, and they wait for it.
    pub fn null_stream(&self) -> Stream {
        Stream::register(&self.rt, RawStream::null(self.ordinal), StreamFlags::default(), false)
    }

    /// A new event (`hipEventCreate`).
    pub fn create_event(&self) -> Result<Event> {
        self.create_event_with_flags(EventFlags::default())
    }

    /// A new event with flags (`hipEventCreateWithFlags`).
    pub fn create_event_with_flags(&self, flags: EventFlags) -> Result<Event> {
        Event::create(&self.rt, self.ordinal, flags)
    }

    /// Device memory for `len` elements, contents unspecified (`hipMalloc`).
    pub fn alloc<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::uninit(self, len)
    }

    /// Device memory for `len` elements, all bytes zero.
    pub fn alloc_zeroed<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let buf = DeviceBuffer::uninit(self, len)?;
        buf.memset(0)?;
        Ok(buf)
    }

    /// Device memory holding a copy of `data`.
    pub fn alloc_from_slice<T: Pod>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut buf = DeviceBuffer::uninit(self, data.len())?;
        buf.copy_from_host(data)?;
        Ok(buf)
    }

    /// The device's default memory pool (`hipDeviceGetDefaultMemPool`).
    pub fn default_mem_pool(&self) -> Result<MemPool> {
        self.rt.default_mem_pool(self.ordinal)
    }

    /// The pool `hipMallocAsync` uses on this device (`hipDeviceGetMemPool`).
    pub fn mem_pool(&self) -> Result<MemPool> {
        self.rt.mem_pool(self.ordinal)
    }

    /// Makes `pool` the one `hipMallocAsync` uses here (`hipDeviceSetMemPool`).
    pub fn set_mem_pool(&self, pool: &MemPool) -> Result<()> {
        self.rt.set_mem_pool(self.ordinal, pool)
    }

    /// A new hipmem memory pool on this device (`hipMemPoolCreate`).
    pub fn create_mem_pool(&self, handle_types: u32, max_size: u64) -> Result<MemPool> {
        MemPool::create(&self.rt, PoolProps { device: self.ordinal, handle_types, max_size })
    }
}
