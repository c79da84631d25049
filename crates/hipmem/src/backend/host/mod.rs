//! The `host` backend: a CPU emulation of a GPU, the default wherever no GPU
//! exists.
//!
//! - N emulated devices (`HIPMEM_HOST_DEVICES`), each with an enforced
//!   capacity (`HIPMEM_HOST_MEMORY`).
//! - Device memory is anonymous mappings the emulator owns; every operation is
//!   checked against the table of those ranges before it is queued, so a bad
//!   address is an error value, never a stray write.
//! - Each stream is a queue with its own worker thread; asynchronous calls
//!   return before their work runs. The null stream follows HIP's legacy
//!   semantics: it waits for all blocking streams of its device, and they
//!   wait for it. An event recorded on a stream with nothing left to run is
//!   complete when the record returns (no worker thread in between, so a
//!   query right after it gives the same answer in every run).

pub mod config;
mod device_info;
pub(crate) mod device_memory;
mod managed;
pub(crate) mod page_locked;
mod peer;
pub(crate) mod stream_worker;
mod virtual_memory;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use config::HostConfig;
use device_memory::{Access, AnonymousMapping, Region, RegionKind, RegionTable, round_up};
use stream_worker::{HostEvent, Op, StreamShared};

use super::{
    Backend, BackendKind, DeviceCapabilities, DeviceProperties, DevicePtr, EventFlags, FillValue,
    HostCallback, HostSpan, MemInfo, RawEvent, RawStream, StreamFlags,
};
use crate::error::{Error, Result};

/// Page size used to round emulated allocations.
const PAGE: u64 = 4096;

#[derive(Debug)]
struct HostDevice {
    used: Mutex<u64>,
    null_stream: Arc<StreamShared>,
    /// Every stream created on the device whose worker may still run.
    streams: Mutex<Vec<Arc<StreamShared>>>,
}

/// The CPU emulation backend.
#[derive(Debug)]
pub struct HostBackend {
    config: HostConfig,
    devices: Vec<HostDevice>,
    regions: RegionTable,
    mappings: Mutex<HashMap<u64, AnonymousMapping>>,
    streams: Mutex<HashMap<u64, Arc<StreamShared>>>,
    events: Mutex<HashMap<u64, Arc<HostEvent>>>,
    next_handle: AtomicU64,
    vmm: virtual_memory::HostVmm,
    managed: managed::HostManaged,
    peers: peer::HostPeers,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl HostBackend {
    /// Starts the emulation with `config`.
    pub fn new(config: HostConfig) -> Result<HostBackend> {
        config.validate()?;
        let mut devices = Vec::with_capacity(config.devices);
        for ordinal in 0..config.devices {
            let null_stream = StreamShared::spawn(0, ordinal, false)
                .map_err(|e| Error::NotInitialized(format!("cannot start a stream worker: {e}")))?;
            devices.push(HostDevice { used: Mutex::new(0), null_stream, streams: Mutex::new(Vec::new()) });
        }
        let managed = managed::HostManaged::new(&config);
        Ok(HostBackend {
            managed,
            config,
            devices,
            regions: RegionTable::default(),
            mappings: Mutex::new(HashMap::new()),
            streams: Mutex::new(HashMap::new()),
            events: Mutex::new(HashMap::new()),
            next_handle: AtomicU64::new(0x1000),
            vmm: virtual_memory::HostVmm::default(),
            peers: peer::HostPeers::default(),
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    fn device(&self, device: usize) -> Result<&HostDevice> {
        self.devices.get(device).ok_or_else(|| {
            Error::InvalidDevice(format!(
                "device {device} does not exist (the host backend has {})",
                self.devices.len()
            ))
        })
    }

    fn new_handle(&self) -> u64 {
        self.next_handle.fetch_add(0x10, Ordering::Relaxed)
    }

    fn stream(&self, stream: RawStream) -> Result<Arc<StreamShared>> {
        let device = self.device(stream.device)?;
        if stream.handle == 0 {
            return Ok(Arc::clone(&device.null_stream));
        }
        let found = lock(&self.streams).get(&stream.handle).cloned();
        match found {
            Some(s) if s.device == stream.device => Ok(s),
            Some(s) => Err(Error::InvalidHandle(format!(
                "stream {:#x} belongs to device {}, not device {}",
                stream.handle, s.device, stream.device
            ))),
            None => Err(Error::InvalidHandle(format!(
                "stream {:#x} does not exist or was destroyed",
                stream.handle
            ))),
        }
    }

    fn event(&self, event: RawEvent) -> Result<Arc<HostEvent>> {
        let found = lock(&self.events).get(&event.handle).cloned();
        match found {
            Some(e) if e.device == event.device => Ok(e),
            _ => Err(Error::InvalidHandle(format!(
                "event {:#x} does not exist or was destroyed",
                event.handle
            ))),
        }
    }

    /// Queues `op` on `stream` behind the waits HIP's legacy null stream needs.
    fn enqueue(&self, stream: RawStream, op: Op) -> Result<(Arc<StreamShared>, u64)> {
        self.enqueue_ops(stream, vec![op])
    }

    /// Queues `ops` (in order, back to back) on `stream` behind the waits
    /// HIP's legacy null stream needs.
    fn enqueue_ops(&self, stream: RawStream, work: Vec<Op>) -> Result<(Arc<StreamShared>, u64)> {
        let target = self.stream(stream)?;
        let device = self.device(stream.device)?;
        let mut ops = Vec::with_capacity(2);
        if target.handle == 0 {
            for other in lock(&device.streams).iter() {
                if !other.non_blocking && !other.is_idle() {
                    ops.push(Op::WaitStream(Arc::clone(other), other.submitted()));
                }
            }
        } else if !target.non_blocking && !device.null_stream.is_idle() {
            let null = &device.null_stream;
            ops.push(Op::WaitStream(Arc::clone(null), null.submitted()));
        }
        ops.extend(work);
        let seq = target.push_all(ops);
        Ok((target, seq))
    }

    fn enqueue_checked(
        &self,
        stream: RawStream,
        ranges: &[(DevicePtr, u64, &str, Access)],
        op: Op,
    ) -> Result<(Arc<StreamShared>, u64)> {
        // Hold the read lock until the op is queued, so a concurrent free
        // (which removes the region first, then drains the devices) sees it.
        let regions = self.regions.read();
        let mut ops = Vec::with_capacity(1);
        for &(ptr, len, what, access) in ranges {
            let (base, region) = regions.check_at(ptr, len, what)?;
            if region.kind == RegionKind::Managed {
                // Device work on managed pages: migrate them first, in stream order.
                ops.push(self.managed.device_access_op(base, ptr.0, len, stream.device, access)?);
            }
        }
        ops.push(op);
        self.enqueue_ops(stream, ops)
    }

    /// Waits until every device has run all the work queued on it.
    pub(crate) fn drain_all_devices(&self) {
        for device in &self.devices {
            self.sync_device(device);
        }
    }

    fn sync_device(&self, device: &HostDevice) {
        let marker = device.null_stream.push_all([Op::HostFunc(Box::new(|| {}))]);
        device.null_stream.wait_for(marker);
        let streams: Vec<_> = lock(&device.streams).clone();
        for s in &streams {
            s.synchronize();
        }
        lock(&device.streams).retain(|s| !s.has_exited());
    }

    fn checked_len(count: u64, element: u64, what: &str) -> Result<u64> {
        count
            .checked_mul(element)
            .ok_or_else(|| Error::InvalidValue(format!("{what}: {count} elements overflow")))
    }
}

impl Drop for HostBackend {
    fn drop(&mut self) {
        for device in &self.devices {
            self.sync_device(device);
            device.null_stream.shut_down();
            for s in lock(&device.streams).iter() {
                s.shut_down();
            }
        }
    }
}

impl Backend for HostBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Host
    }

    fn description(&self) -> String {
        format!(
            "host: CPU emulation, {} device(s) of {} MiB, VMM granularity {} KiB",
            self.config.devices,
            self.config.memory_per_device >> 20,
            self.config.vmm_granularity >> 10
        )
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn device_properties(&self, device: usize) -> Result<DeviceProperties> {
        self.device(device)?;
        let threads = std::thread::available_parallelism().map(|n| n.get() as u32).unwrap_or(1);
        Ok(DeviceProperties {
            ordinal: device,
            name: format!("hipmem CPU emulation device {device}"),
            total_memory: self.config.memory_per_device,
            compute_capability: (0, 0),
            multiprocessor_count: threads,
            capabilities: DeviceCapabilities {
                memory_pools: true,
                virtual_memory: true,
                managed_memory: true,
                concurrent_managed_access: true,
                can_map_host_memory: true,
                unified_addressing: true,
                vmm_granularity: self.config.vmm_granularity,
                vmm_recommended_granularity: self.config.vmm_granularity,
            },
        })
    }

    fn mem_get_info(&self, device: usize) -> Result<MemInfo> {
        let d = self.device(device)?;
        let used = *lock(&d.used);
        Ok(MemInfo {
            free: self.config.memory_per_device.saturating_sub(used),
            total: self.config.memory_per_device,
        })
    }

    fn make_current(&self, device: usize) -> Result<()> {
        // No per-thread state outside hipmem to set; the ordinal is checked.
        self.device_properties(device).map(|_| ())
    }

    fn device_synchronize(&self, device: usize) -> Result<()> {
        let d = self.device(device)?;
        self.sync_device(d);
        Ok(())
    }

    fn mem_alloc(&self, device: usize, size: u64) -> Result<DevicePtr> {
        let d = self.device(device)?;
        if size == 0 {
            return Err(Error::InvalidValue("cannot allocate 0 bytes".into()));
        }
        let capacity = self.config.memory_per_device;
        let rounded = size
            .checked_next_multiple_of(PAGE)
            .ok_or_else(|| Error::OutOfMemory(format!("{size} bytes can never fit device {device}")))?;
        let mut used = lock(&d.used);
        if rounded > capacity - *used {
            return Err(Error::OutOfMemory(format!(
                "device {device}: cannot allocate {size} bytes: {} of {capacity} bytes are in use",
                *used
            )));
        }
        let mapping = AnonymousMapping::new(rounded)?;
        let base = mapping.addr();
        *used += rounded;
        drop(used);
        lock(&self.mappings).insert(base, mapping);
        self.regions.insert(base, Region { len: size, device, kind: RegionKind::Device });
        Ok(DevicePtr(base))
    }

    fn mem_free(&self, device: usize, ptr: DevicePtr) -> Result<()> {
        let d = self.device(device)?;
        let region = self
            .regions
            .remove_if(ptr.0, |r| r.device == device && r.kind == RegionKind::Device)
            .ok_or_else(|| {
                Error::InvalidValue(format!("{ptr} is not the start of a live allocation on device {device}"))
            })?;
        // No new work can name the range now; drain what was queued before.
        self.drain_all_devices();
        drop(lock(&self.mappings).remove(&ptr.0));
        *lock(&d.used) -= round_up(region.len, PAGE);
        Ok(())
    }

    fn copy_host_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<()> {
        let len = src.len() as u64;
        let device = self.regions.read().check(dst, len, "copy to device")?.device;
        let op = Op::Copy { dst: dst.0, src: src.as_ptr() as u64, len };
        let (stream, seq) = self.enqueue_checked(
            RawStream::null(device),
            &[(dst, len, "copy to device", Access::Write)],
            op,
        )?;
        // `src` stays borrowed until the copy has run.
        stream.wait_for(seq);
        Ok(())
    }

    fn copy_device_to_host(&self, dst: &mut [u8], src: DevicePtr) -> Result<()> {
        let len = dst.len() as u64;
        let device = self.regions.read().check(src, len, "copy from device")?.device;
        let op = Op::Copy { dst: dst.as_mut_ptr() as u64, src: src.0, len };
        let (stream, seq) = self.enqueue_checked(
            RawStream::null(device),
            &[(src, len, "copy from device", Access::Read)],
            op,
        )?;
        // `dst` stays mutably borrowed until the copy has run.
        stream.wait_for(seq);
        Ok(())
    }

    fn copy_device_to_device(&self, dst: DevicePtr, src: DevicePtr, size: u64) -> Result<()> {
        let device = self.regions.read().check(dst, size, "copy destination")?.device;
        let op = Op::Copy { dst: dst.0, src: src.0, len: size };
        let (stream, seq) = self.enqueue_checked(
            RawStream::null(device),
            &[(dst, size, "copy destination", Access::Write), (src, size, "copy source", Access::Read)],
            op,
        )?;
        stream.wait_for(seq);
        Ok(())
    }

    fn copy_host_to_device_async(&self, dst: DevicePtr, src: HostSpan, stream: RawStream) -> Result<()> {
        let op = Op::Copy { dst: dst.0, src: src.addr(), len: src.len() };
        self.enqueue_checked(stream, &[(dst, src.len(), "asynchronous copy to device", Access::Write)], op)?;
        Ok(())
    }

    fn copy_device_to_host_async(&self, dst: HostSpan, src: DevicePtr, stream: RawStream) -> Result<()> {
        let op = Op::Copy { dst: dst.addr(), src: src.0, len: dst.len() };
        self.enqueue_checked(stream, &[(src, dst.len(), "asynchronous copy from device", Access::Read)], op)?;
        Ok(())
    }

    fn copy_device_to_device_async(
        &self,
        dst: DevicePtr,
        src: DevicePtr,
        size: u64,
        stream: RawStream,
    ) -> Result<()> {
        let op = Op::Copy { dst: dst.0, src: src.0, len: size };
        self.enqueue_checked(
            stream,
            &[
                (dst, size, "asynchronous copy destination", Access::Write),
                (src, size, "asynchronous copy source", Access::Read),
            ],
            op,
        )?;
        Ok(())
    }

    fn memset_async(&self, dst: DevicePtr, value: FillValue, count: u64, stream: RawStream) -> Result<()> {
        let len = Self::checked_len(count, value.element_size(), "memset")?;
        self.enqueue_checked(
            stream,
            &[(dst, len, "memset", Access::Write)],
            Op::Fill { dst: dst.0, value, count },
        )?;
        Ok(())
    }

    fn stream_create(&self, device: usize, flags: StreamFlags) -> Result<RawStream> {
        let d = self.device(device)?;
        let handle = self.new_handle();
        let shared = StreamShared::spawn(handle, device, flags.non_blocking)
            .map_err(|e| Error::OutOfMemory(format!("cannot start a stream worker thread: {e}")))?;
        lock(&d.streams).retain(|s| !s.has_exited());
        lock(&d.streams).push(Arc::clone(&shared));
        lock(&self.streams).insert(handle, shared);
        Ok(RawStream { device, handle })
    }

    fn stream_destroy(&self, stream: RawStream) -> Result<()> {
        if stream.handle == 0 {
            return Err(Error::InvalidHandle("the null stream cannot be destroyed".into()));
        }
        let s = self.stream(stream)?;
        lock(&self.streams).remove(&stream.handle);
        s.shut_down();
        Ok(())
    }

    fn stream_synchronize(&self, stream: RawStream) -> Result<()> {
        let s = self.stream(stream)?;
        if s.handle == 0 {
            // Legacy semantics: the null stream's marker waits for every
            // blocking stream's earlier work.
            let (null, seq) = self.enqueue(stream, Op::HostFunc(Box::new(|| {})))?;
            null.wait_for(seq);
        } else {
            s.synchronize();
        }
        Ok(())
    }

    fn stream_query(&self, stream: RawStream) -> Result<bool> {
        let s = self.stream(stream)?;
        if s.handle == 0 {
            let d = self.device(stream.device)?;
            let blocking_idle = lock(&d.streams).iter().all(|o| o.non_blocking || o.is_idle());
            return Ok(s.is_idle() && blocking_idle);
        }
        Ok(s.is_idle())
    }

    fn stream_wait_event(&self, stream: RawStream, event: RawEvent) -> Result<()> {
        let e = self.event(event)?;
        let generation = e.latest();
        self.stream(stream)?;
        if generation == 0 {
            return Ok(());
        }
        self.enqueue(stream, Op::WaitEvent(e, generation))?;
        Ok(())
    }

    fn launch_host_func(&self, stream: RawStream, callback: HostCallback) -> Result<()> {
        self.enqueue(stream, Op::HostFunc(callback))?;
        Ok(())
    }

    fn event_create(&self, device: usize, flags: EventFlags) -> Result<RawEvent> {
        self.device(device)?;
        let handle = self.new_handle();
        lock(&self.events).insert(handle, Arc::new(HostEvent::new(handle, device, flags.disable_timing)));
        Ok(RawEvent { device, handle })
    }

    fn event_destroy(&self, event: RawEvent) -> Result<()> {
        self.event(event)?;
        lock(&self.events).remove(&event.handle);
        Ok(())
    }

    fn event_record(&self, event: RawEvent, stream: RawStream) -> Result<()> {
        let e = self.event(event)?;
        self.stream(stream)?;
        if e.device != stream.device {
            return Err(Error::InvalidHandle(format!(
                "event of device {} cannot be recorded on a stream of device {}",
                e.device, stream.device
            )));
        }
        let generation = e.begin_record();
        // On a stream with nothing left to run (and, on the legacy null
        // stream, no blocking stream either) the record completes here, as a
        // device's would at once: otherwise whether a query right after it
        // sees it complete depends on when the stream's worker thread runs,
        // and a replay into a pool (which asks its streams' markers before
        // it grows) would differ from run to run.
        if self.stream_query(stream)? {
            e.complete(generation);
            return Ok(());
        }
        self.enqueue(stream, Op::RecordEvent(e, generation))?;
        Ok(())
    }

    fn event_query(&self, event: RawEvent) -> Result<bool> {
        Ok(self.event(event)?.is_complete())
    }

    fn event_synchronize(&self, event: RawEvent) -> Result<()> {
        let e = self.event(event)?;
        e.wait_for(e.latest());
        Ok(())
    }

    fn event_elapsed_ms(&self, start: RawEvent, end: RawEvent) -> Result<f32> {
        let (s, e) = (self.event(start)?, self.event(end)?);
        if s.disable_timing || e.disable_timing {
            return Err(Error::InvalidHandle("an event created with DisableTiming has no time".into()));
        }
        let time = |ev: &HostEvent| match ev.completion_time() {
            Err(()) => Err(Error::InvalidHandle(format!("event {:#x} was never recorded", ev.handle))),
            Ok(None) => Err(Error::NotReady(format!("event {:#x} has not completed", ev.handle))),
            Ok(Some(t)) => Ok(t),
        };
        let (t0, t1) = (time(&s)?, time(&e)?);
        let ms = if t1 >= t0 { (t1 - t0).as_secs_f64() * 1e3 } else { -((t0 - t1).as_secs_f64() * 1e3) };
        Ok(ms as f32)
    }

    fn launch_fill(&self, dst: DevicePtr, value: FillValue, count: u64, stream: RawStream) -> Result<()> {
        let len = Self::checked_len(count, value.element_size(), "fill kernel")?;
        self.enqueue_checked(
            stream,
            &[(dst, len, "fill kernel", Access::Write)],
            Op::Fill { dst: dst.0, value, count },
        )?;
        Ok(())
    }

    fn launch_iota(&self, dst: DevicePtr, count: u64, k: i32, stream: RawStream) -> Result<()> {
        let len = Self::checked_len(count, 4, "iota kernel")?;
        self.enqueue_checked(
            stream,
            &[(dst, len, "iota kernel", Access::Write)],
            Op::Iota { dst: dst.0, count, k },
        )?;
        Ok(())
    }

    // capability: virtual memory management (issue 4)
    fn virtual_memory(&self) -> Option<&dyn super::virtual_memory::VirtualMemory> {
        Some(self)
    }
    // capability: page-locked host memory (issue 5)
    fn page_locked_memory(&self) -> Option<&dyn super::host_memory::PageLockedMemory> {
        Some(self)
    }
    // capability: managed memory (issue 6)
    fn managed_memory(&self) -> Option<&dyn super::managed_memory::ManagedMemory> {
        Some(self)
    }
    // capability: peer access between devices (issue 15)
    fn peer_access(&self) -> Option<&dyn super::peer::PeerAccess> {
        Some(self)
    }
    // device details (issue 15): host/device_info.rs
    fn device_attribute(&self, device: usize, attribute: super::device_info::DeviceAttribute) -> Result<i64> {
        self.emulated_attribute(device, attribute)
    }
    fn driver_version(&self) -> Result<i32> {
        Ok(device_info::EMULATION_DRIVER_VERSION)
    }

    fn launch_delay(
        &self,
        duration: Duration,
        flag: DevicePtr,
        flag_value: u32,
        stream: RawStream,
    ) -> Result<()> {
        self.enqueue_checked(
            stream,
            &[(flag, 4, "delay kernel flag", Access::Write)],
            Op::Delay { duration, flag: flag.0, value: flag_value },
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_on_an_idle_stream_is_complete_at_once_and_one_after_work_is_not() {
        let b = HostBackend::new(HostConfig { devices: 1, ..HostConfig::default() }).unwrap();
        let stream = b.stream_create(0, StreamFlags { non_blocking: true }).unwrap();
        let event = b.event_create(0, EventFlags { disable_timing: true, ..Default::default() }).unwrap();
        for _ in 0..100 {
            b.event_record(event, stream).unwrap();
            assert!(b.event_query(event).unwrap(), "a record on an idle stream was not complete at once");
        }
        // Behind queued work the record waits for it. (Checked only where
        // the query came well within the delay: a stalled test machine
        // proves nothing either way.)
        let flag = b.mem_alloc(0, 4).unwrap();
        let t0 = std::time::Instant::now();
        b.launch_delay(Duration::from_millis(500), flag, 1, stream).unwrap();
        b.event_record(event, stream).unwrap();
        let done = b.event_query(event).unwrap();
        if t0.elapsed() < Duration::from_millis(400) {
            assert!(!done, "a record behind 500 ms of work completed at once");
        }
        b.event_synchronize(event).unwrap();
        assert!(b.event_query(event).unwrap());
        // The legacy null stream's record also waits for a busy blocking stream.
        let blocking = b.stream_create(0, StreamFlags { non_blocking: false }).unwrap();
        let t0 = std::time::Instant::now();
        b.launch_delay(Duration::from_millis(500), flag, 2, blocking).unwrap();
        b.event_record(event, RawStream::null(0)).unwrap();
        let done = b.event_query(event).unwrap();
        if t0.elapsed() < Duration::from_millis(400) {
            assert!(!done, "the null stream's record did not wait for a blocking stream");
        }
        b.device_synchronize(0).unwrap();
        assert!(b.event_query(event).unwrap());
        b.mem_free(0, flag).unwrap();
    }
}
