//! Stream-ordered allocation, memory pools, and pool IPC
//! (hipMemPoolExport*/Import*).

use std::ffi::{c_int, c_uint, c_void};

use hipmem_rs::{
    AccessFlags, DevicePtr, Error, MemPool, PoolAttribute, PoolProps, PtrExportData, Result, Runtime,
};

use crate::types::*;
use crate::{call, device_ordinal, handles, non_null, rt};

/// `hipMallocAsync`: from the current pool of the stream's device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocAsync(
    dev_ptr: *mut *mut c_void,
    size: usize,
    stream: hipStream_t,
) -> hipError_t {
    call(|| {
        non_null(dev_ptr, "hipMallocAsync: dev_ptr")?;
        let rt = rt()?;
        let p = match handles::null_stream(rt, stream) {
            Some(s) => rt.malloc_async(size as u64, s)?,
            None => match handles::with_cached_stream(stream, |s| rt.malloc_async(size as u64, s)) {
                Some(p) => p?,
                None => handles::with_stream(rt, stream, |s| rt.malloc_async(size as u64, s))?,
            },
        };
        // SAFETY: non-null; points to a writable `void*` (HIP's contract).
        unsafe { *dev_ptr = p.0 as usize as *mut c_void };
        Ok(())
    })
}

/// `hipFreeAsync`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipFreeAsync(dev_ptr: *mut c_void, stream: hipStream_t) -> hipError_t {
    call(|| {
        non_null(dev_ptr, "hipFreeAsync: dev_ptr")?;
        let rt = rt()?;
        let ptr = DevicePtr(dev_ptr as usize as u64);
        match handles::null_stream(rt, stream) {
            Some(s) => rt.free_async(ptr, s),
            None => match handles::with_cached_stream(stream, |s| rt.free_async(ptr, s)) {
                Some(r) => r,
                None => handles::with_stream(rt, stream, |s| rt.free_async(ptr, s)),
            },
        }
    })
}

/// `hipMemPoolCreate`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolCreate(
    mem_pool: *mut hipMemPool_t,
    pool_props: *const hipMemPoolProps,
) -> hipError_t {
    call(|| {
        non_null(mem_pool, "hipMemPoolCreate: mem_pool")?;
        non_null(pool_props, "hipMemPoolCreate: pool_props")?;
        // SAFETY: non-null; points to a readable hipMemPoolProps (HIP's contract).
        let props = unsafe { pool_props.read() };
        if props.allocType != hipMemAllocationTypePinned {
            return Err(Error::InvalidValue(format!(
                "hipMemPoolCreate: allocType {} is not hipMemAllocationTypePinned",
                props.allocType
            )));
        }
        if props.location.type_ != hipMemLocationTypeDevice {
            return Err(Error::InvalidValue(format!(
                "hipMemPoolCreate: location type {} is not hipMemLocationTypeDevice",
                props.location.type_
            )));
        }
        let rt = rt()?;
        let device =
            device_ordinal(rt, props.location.id).map_err(|e| Error::InvalidValue(e.message().into()))?;
        let pool = MemPool::create(
            rt,
            PoolProps { device, handle_types: props.handleTypes as u32, max_size: props.maxSize as u64 },
        )?;
        let h = handles::add_pool(pool);
        // SAFETY: non-null; points to a writable hipMemPool_t (HIP's contract).
        unsafe { *mem_pool = h };
        Ok(())
    })
}

/// `hipMemPoolDestroy`: null, destroyed or default pools are InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolDestroy(mem_pool: hipMemPool_t) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        pool.destroy()?;
        drop(handles::remove_pool(mem_pool));
        Ok(())
    })
}

/// `hipMallocFromPoolAsync`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMallocFromPoolAsync(
    dev_ptr: *mut *mut c_void,
    size: usize,
    mem_pool: hipMemPool_t,
    stream: hipStream_t,
) -> hipError_t {
    call(|| {
        non_null(dev_ptr, "hipMallocFromPoolAsync: dev_ptr")?;
        let pool = handles::pool(mem_pool)?;
        let p = handles::with_stream(rt()?, stream, |s| pool.alloc_raw(size as u64, s))?;
        // SAFETY: non-null; points to a writable `void*` (HIP's contract).
        unsafe { *dev_ptr = p.0 as usize as *mut c_void };
        Ok(())
    })
}

/// `hipMemPoolSetAttribute`: the reuse flags are `int`, the rest `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolSetAttribute(
    mem_pool: hipMemPool_t,
    attr: hipMemPoolAttr,
    value: *mut c_void,
) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        non_null(value, "hipMemPoolSetAttribute: value")?;
        let attr = PoolAttribute::from_raw(attr)?;
        let v = if attr.is_int() {
            // SAFETY: non-null; for this attribute HIP's contract is an `int`.
            (unsafe { (value as *const c_int).read_unaligned() }) as u64
        } else {
            // SAFETY: non-null; for this attribute HIP's contract is a `uint64_t`.
            unsafe { (value as *const u64).read_unaligned() }
        };
        pool.set_attribute(attr, v)
    })
}

/// `hipMemPoolGetAttribute`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolGetAttribute(
    mem_pool: hipMemPool_t,
    attr: hipMemPoolAttr,
    value: *mut c_void,
) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        non_null(value, "hipMemPoolGetAttribute: value")?;
        let attr = PoolAttribute::from_raw(attr)?;
        let v = pool.try_attribute(attr)?;
        if attr.is_int() {
            // SAFETY: non-null; for this attribute HIP's contract is an `int`.
            unsafe { (value as *mut c_int).write_unaligned(v as c_int) };
        } else {
            // SAFETY: non-null; for this attribute HIP's contract is a `uint64_t`.
            unsafe { (value as *mut u64).write_unaligned(v) };
        }
        Ok(())
    })
}

/// `hipMemPoolTrimTo`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolTrimTo(mem_pool: hipMemPool_t, min_bytes_to_hold: usize) -> hipError_t {
    call(|| handles::pool(mem_pool)?.trim_to(min_bytes_to_hold as u64))
}

/// What a pool's learned layouts did (`hipmemPoolGetPlanCounts`, hipmem's
/// own extension): plans made, allocations served from a plan, planned
/// allocations that took the usual path, plans ended by an allocation they
/// did not expect, and candidate periods rejected.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipmemPlanCounts {
    /// Plans made.
    pub plans: u64,
    /// Allocations served from a plan.
    pub served: u64,
    /// Planned allocations that took the usual path.
    pub missed: u64,
    /// Plans ended.
    pub ended: u64,
    /// Candidate periods rejected.
    pub rejected: u64,
}

/// `hipmemPoolGetPlanCounts(pool, &counts)` (hipmem's own extension): what
/// the pool's learned layouts did (zeros for a pool that does not learn).
/// A bad pool or a null `out` is InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipmemPoolGetPlanCounts(
    mem_pool: hipMemPool_t,
    out: *mut hipmemPlanCounts,
) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        non_null(out, "hipmemPoolGetPlanCounts: out")?;
        let c = pool.plan_counts();
        let counts = hipmemPlanCounts {
            plans: c.plans,
            served: c.served,
            missed: c.missed,
            ended: c.ended,
            rejected: c.rejected,
        };
        // SAFETY: non-null; points to a writable hipmemPlanCounts (this function's contract).
        unsafe { out.write_unaligned(counts) };
        Ok(())
    })
}

/// What a hipmem pool has asked of the backend since it was created
/// (`hipmemPoolGetBackendCalls`, hipmem's own extension): on a GPU each of
/// these calls costs microseconds to tens of microseconds, where an
/// allocation served from the pool costs tens of nanoseconds, so they are
/// where a pool's time goes when it grows, moves or gives memory back.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct hipmemBackendCalls {
    /// Device allocations made as segments (a pool without virtual memory).
    pub segments_allocated: u64,
    /// Segments given back.
    pub segments_freed: u64,
    /// Physical allocations created (virtual memory: units and groups).
    pub granules_created: u64,
    /// Physical allocations given back.
    pub granules_released: u64,
    /// Mappings made (a new physical allocation's first included).
    pub maps: u64,
    /// Mappings removed.
    pub unmaps: u64,
    /// Physical bytes created (not a count of calls).
    pub bytes_created: u64,
    /// Physical bytes given back (not a count of calls).
    pub bytes_released: u64,
    /// Bytes of groups' free units mapped under a growth instead of created.
    pub bytes_lent: u64,
    /// Of `granules_released`, those the pool's release worker gave back off
    /// the calling threads.
    pub released_on_worker: u64,
}

/// `hipmemPoolGetBackendCalls(pool, &calls)` (hipmem's own extension): what
/// the pool has asked of the backend since it was created. A bad pool or a
/// null `out` is InvalidValue; the driver's pools and pools imported from
/// another process are NotSupported (their calls are not hipmem's).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipmemPoolGetBackendCalls(
    mem_pool: hipMemPool_t,
    out: *mut hipmemBackendCalls,
) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        non_null(out, "hipmemPoolGetBackendCalls: out")?;
        let c = pool.backend_calls().ok_or_else(|| {
            Error::NotSupported(
                "hipmemPoolGetBackendCalls: the pool is the driver's or another process's; only hipmem's own pools count their backend calls".into(),
            )
        })?;
        let calls = hipmemBackendCalls {
            segments_allocated: c.segments_allocated,
            segments_freed: c.segments_freed,
            granules_created: c.granules_created,
            granules_released: c.granules_released,
            maps: c.maps,
            unmaps: c.unmaps,
            bytes_created: c.bytes_created,
            bytes_released: c.bytes_released,
            bytes_lent: c.bytes_lent,
            released_on_worker: c.released_on_worker,
        };
        // SAFETY: non-null; points to a writable hipmemBackendCalls (this function's contract).
        unsafe { out.write_unaligned(calls) };
        Ok(())
    })
}

/// `hipmemPoolGetHostWaits(pool, &count)` (hipmem's own extension): how
/// many times the pool has blocked the calling thread until a stream's
/// queued work was done, on its own initiative (a growth that could take
/// the pool past its high watermark, or a plan's start, waiting for a
/// stream's pending frees so that their memory goes back first); the
/// synchronizations the caller asks for are not counted. A bad pool or a
/// null `count` is InvalidValue; the driver's pools and pools imported
/// from another process are NotSupported.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipmemPoolGetHostWaits(mem_pool: hipMemPool_t, count: *mut u64) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        non_null(count, "hipmemPoolGetHostWaits: count")?;
        let n = pool.host_waits().ok_or_else(|| {
            Error::NotSupported(
                "hipmemPoolGetHostWaits: the pool is the driver's or another process's; only hipmem's own pools count their waits".into(),
            )
        })?;
        // SAFETY: non-null; points to a writable uint64_t (this function's contract).
        unsafe { count.write_unaligned(n) };
        Ok(())
    })
}

/// `hipmemPoolSetPlanning(pool, on)` (hipmem's own extension): turns the
/// pool's learned layouts on (1) or off (0; a running plan ends). `on`
/// other than 0 or 1, a bad pool, a pool the driver or another process
/// made, or turning it on for a pool without virtual memory is
/// InvalidValue.
#[unsafe(no_mangle)]
pub extern "C" fn hipmemPoolSetPlanning(mem_pool: hipMemPool_t, on: c_int) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        pool.set_planning(crate::switch(on, "hipmemPoolSetPlanning")?)
    })
}

fn write_pool(out: *mut hipMemPool_t, pool: MemPool) {
    let h = handles::add_pool(pool);
    // SAFETY: the callers checked `out` for null; it points to a writable
    // hipMemPool_t (HIP's contract).
    unsafe { *out = h };
}

/// `hipDeviceGetDefaultMemPool`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetDefaultMemPool(
    mem_pool: *mut hipMemPool_t,
    device: c_int,
) -> hipError_t {
    call(|| {
        non_null(mem_pool, "hipDeviceGetDefaultMemPool: mem_pool")?;
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        write_pool(mem_pool, rt.default_mem_pool(device)?);
        Ok(())
    })
}

/// `hipDeviceSetMemPool`: the pool hipMallocAsync uses on `device`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceSetMemPool(device: c_int, mem_pool: hipMemPool_t) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        rt.set_mem_pool(device, &pool)
    })
}

/// `hipDeviceGetMemPool`: the current pool of `device`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipDeviceGetMemPool(mem_pool: *mut hipMemPool_t, device: c_int) -> hipError_t {
    call(|| {
        non_null(mem_pool, "hipDeviceGetMemPool: mem_pool")?;
        let rt = rt()?;
        let device = device_ordinal(rt, device)?;
        write_pool(mem_pool, rt.mem_pool(device)?);
        Ok(())
    })
}

/// Checks a `hipMemLocation` naming a device: a bad type is InvalidValue, a
/// bad id InvalidDevice.
fn location_device(rt: &Runtime, loc: &hipMemLocation) -> Result<usize> {
    if loc.type_ != hipMemLocationTypeDevice {
        return Err(Error::InvalidValue(format!(
            "location type {} is not hipMemLocationTypeDevice",
            loc.type_
        )));
    }
    device_ordinal(rt, loc.id)
}

/// `hipMemPoolSetAccess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolSetAccess(
    mem_pool: hipMemPool_t,
    desc_list: *const hipMemAccessDesc,
    count: usize,
) -> hipError_t {
    call(|| {
        let pool = handles::pool(mem_pool)?;
        non_null(desc_list, "hipMemPoolSetAccess: desc_list")?;
        let rt = rt()?;
        if count > rt.device_count() {
            return Err(Error::InvalidDevice(format!(
                "hipMemPoolSetAccess: {count} descriptors for {} device(s)",
                rt.device_count()
            )));
        }
        // SAFETY: non-null; HIP's contract: `count` readable descriptors.
        let descs = unsafe { std::slice::from_raw_parts(desc_list, count) };
        let mut parsed = Vec::with_capacity(count);
        for d in descs {
            let device = location_device(rt, &d.location)?;
            let flags = u32::try_from(d.flags)
                .map_err(|_| Error::InvalidValue(format!("{} is not a hipMemAccessFlags value", d.flags)))
                .and_then(AccessFlags::from_raw)?;
            parsed.push((device, flags));
        }
        for (device, flags) in parsed {
            pool.set_access(device, flags)?;
        }
        Ok(())
    })
}

/// `hipMemPoolGetAccess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolGetAccess(
    flags: *mut hipMemAccessFlags,
    mem_pool: hipMemPool_t,
    location: *mut hipMemLocation,
) -> hipError_t {
    call(|| {
        non_null(flags, "hipMemPoolGetAccess: flags")?;
        let pool = handles::pool(mem_pool)?;
        non_null(location, "hipMemPoolGetAccess: location")?;
        // SAFETY: non-null; points to a readable hipMemLocation (HIP's contract).
        let loc = unsafe { location.read() };
        let rt = rt()?;
        let device = location_device(rt, &loc)?;
        let access = pool.access(device)?;
        // SAFETY: non-null; points to a writable hipMemAccessFlags (HIP's contract).
        unsafe { *flags = access.raw() as hipMemAccessFlags };
        Ok(())
    })
}

// ---- interprocess sharing ---------------------------------------------------------------

/// `hipMemPoolExportToShareableHandle`: for `hipMemHandleTypePosixFileDescriptor`,
/// writes a new file descriptor (an `int`) to `*shared_handle`; the caller
/// owns and closes it (or sends it to another process). A handle type the
/// pool was not created with, None, or flags != 0 → InvalidValue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolExportToShareableHandle(
    shared_handle: *mut c_void,
    mem_pool: hipMemPool_t,
    handle_type: hipMemAllocationHandleType,
    flags: c_uint,
) -> hipError_t {
    call(|| {
        use std::os::fd::IntoRawFd;
        non_null(shared_handle, "hipMemPoolExportToShareableHandle: shared_handle")?;
        let pool = handles::pool(mem_pool)?;
        let handle_type = u32::try_from(handle_type).map_err(|_| {
            Error::InvalidValue(format!("{handle_type} is not a hipMemAllocationHandleType value"))
        })?;
        let fd = pool.export_shareable_handle(handle_type, flags)?;
        // SAFETY: non-null; for POSIX descriptors HIP's contract is a writable `int`.
        unsafe { (shared_handle as *mut c_int).write_unaligned(fd.into_raw_fd()) };
        Ok(())
    })
}

/// `hipMemPoolImportFromShareableHandle`: for
/// `hipMemHandleTypePosixFileDescriptor`, `shared_handle` is the descriptor
/// itself cast to a pointer (`(void*)(uintptr_t)fd`, CUDA's convention, as
/// `hipMemImportFromShareableHandle` takes it); it stays the caller's. The
/// imported pool cannot allocate; destroy it with `hipMemPoolDestroy`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolImportFromShareableHandle(
    mem_pool: *mut hipMemPool_t,
    shared_handle: *mut c_void,
    handle_type: hipMemAllocationHandleType,
    flags: c_uint,
) -> hipError_t {
    call(|| {
        use std::os::fd::BorrowedFd;
        non_null(mem_pool, "hipMemPoolImportFromShareableHandle: mem_pool")?;
        let handle_type = u32::try_from(handle_type).map_err(|_| {
            Error::InvalidValue(format!("{handle_type} is not a hipMemAllocationHandleType value"))
        })?;
        let fd = c_int::try_from(shared_handle as usize)
            .ok()
            .filter(|fd| *fd >= 0)
            .ok_or_else(|| Error::InvalidValue(format!("{shared_handle:p} is not a file descriptor")))?;
        // SAFETY: HIP's contract: `shared_handle` is an open descriptor of the
        // caller's that stays open for the duration of this call.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let rt = rt()?;
        let pool = MemPool::import_shareable_handle(rt, fd, handle_type, flags)?;
        write_pool(mem_pool, pool);
        Ok(())
    })
}

/// `hipMemPoolExportPointer`: the 64 bytes another process passes to
/// `hipMemPoolImportPointer`. `dev_ptr` must be the start of a live
/// allocation of a shareable pool (else InvalidValue).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolExportPointer(
    export_data: *mut hipMemPoolPtrExportData,
    dev_ptr: *mut c_void,
) -> hipError_t {
    call(|| {
        non_null(export_data, "hipMemPoolExportPointer: export_data")?;
        non_null(dev_ptr, "hipMemPoolExportPointer: dev_ptr")?;
        let data = rt()?.mem_pool_export_pointer(DevicePtr(dev_ptr as usize as u64))?;
        // SAFETY: non-null; points to a writable hipMemPoolPtrExportData (HIP's contract).
        unsafe { export_data.write(hipMemPoolPtrExportData { reserved: data.reserved }) };
        Ok(())
    })
}

/// `hipMemPoolImportPointer`: the address in this process of the pointer
/// `export_data` names; `mem_pool` must be the import of the pool it came
/// from. Garbage data, another pool's data or a pool that was not imported
/// → InvalidValue. `hipFree`/`hipFreeAsync` of the result unmaps it here
/// only; the exporter's memory is untouched.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn hipMemPoolImportPointer(
    dev_ptr: *mut *mut c_void,
    mem_pool: hipMemPool_t,
    export_data: *mut hipMemPoolPtrExportData,
) -> hipError_t {
    call(|| {
        non_null(dev_ptr, "hipMemPoolImportPointer: dev_ptr")?;
        let pool = handles::pool(mem_pool)?;
        non_null(export_data, "hipMemPoolImportPointer: export_data")?;
        // SAFETY: non-null; points to a readable hipMemPoolPtrExportData (HIP's contract).
        let data = PtrExportData { reserved: unsafe { export_data.read() }.reserved };
        let p = pool.import_pointer_raw(&data)?;
        // SAFETY: non-null; points to a writable `void*` (HIP's contract).
        unsafe { *dev_ptr = p.0 as usize as *mut c_void };
        Ok(())
    })
}
