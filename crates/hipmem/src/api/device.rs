//! What the safe API adds to a [`Device`]: streams, events and typed buffers.
#![forbid(unsafe_code)]

use bytemuck::Pod;

use super::buffer::DeviceBuffer;
use super::event::Event;
use super::stream::Stream;
use crate::backend::{EventFlags, StreamFlags};
use crate::error::Result;
use crate::runtime::Device;

impl Device {
    /// A new blocking stream (`hipStreamCreate`).
    pub fn create_stream(&self) -> Result<Stream> {
        self.create_stream_with_flags(StreamFlags::default())
    }

    /// A new stream with flags (`hipStreamCreateWithFlags`).
    pub fn create_stream_with_flags(&self, flags: StreamFlags) -> Result<Stream> {
        self.rt.create_stream(self.ordinal, flags).map(Stream::from)
    }

    /// A new stream with a priority (`hipStreamCreateWithPriority`); a
    /// priority outside [`Device::stream_priority_range`] is clamped into it.
    pub fn create_stream_with_priority(&self, flags: StreamFlags, priority: i32) -> Result<Stream> {
        self.rt.create_stream_with_priority(self.ordinal, flags, priority).map(Stream::from)
    }

    /// The device's legacy null stream (`0`): work on it waits for all blocking
    /// streams of the device, and they wait for it.
    pub fn null_stream(&self) -> Stream {
        // The ordinal was checked when the device handle was made.
        match self.rt.null_stream(self.ordinal) {
            Ok(s) => Stream::from(s),
            Err(_) => unreachable!("device {} of a runtime is always valid", self.ordinal),
        }
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
}
