//! Seed 001's virtual memory management, in Rust: a physical allocation, an
//! address reservation, a mapping with read-write access, a kernel on it; then
//! a buffer that grows in place, without copying, to many times its size.
//!
//! `cargo run -p hipmem --example virtual_memory` (HIPMEM_BACKEND=host|cuda)
use hipmem::{
    AccessFlags, AddressReservation, Device, DevicePtr, DeviceSlice, GrowableBuffer, Mapping,
    PhysicalAllocation, Result,
};

fn main() -> Result<()> {
    let device = Device::get(0)?;
    let rt = device.runtime();
    println!("device 0: {}", device.properties().name);

    // hipMemGetAllocationGranularity, hipMemCreate, hipMemAddressReserve
    let g = PhysicalAllocation::granularity(&device)?;
    let physical = PhysicalAllocation::new(&device, 2 * g)?;
    let reservation = AddressReservation::new(rt, 4 * g, 0, DevicePtr::NULL)?;

    // hipMemMap; a new mapping has no access until hipMemSetAccess.
    let mapping = Mapping::new(&reservation, 0, &physical, 0, 2 * g)?;
    assert_eq!(mapping.access(0)?, AccessFlags::None);
    mapping.set_access(0, AccessFlags::ReadWrite)?;
    // Releasing the handle now is the usual idiom: the mapping keeps the memory.
    drop(physical);

    let stream = device.create_stream()?;
    let view = mapping.view::<i32>();
    stream.iota(&view, 2)?;
    stream.synchronize()?;
    let v = view.read_to_vec()?;
    assert!(v.iter().enumerate().all(|(i, &x)| x == 2 * i as i32));
    println!("mapped {} at {}: view[i] == 2 * i for all {} elements", 2 * g, mapping.ptr(), v.len());
    drop(mapping); // hipMemUnmap (after the device's work), then the reservation goes
    drop(reservation);

    // A buffer that grows by mapping chunks at its end: same address, no copy.
    let mut buf = GrowableBuffer::<i32>::with_reservation(&device, 64 * g)?;
    buf.resize(1000)?;
    stream.iota(&buf, 1)?;
    let base = buf.base();
    for len in [10_000usize, 1 << 20, 5 << 20] {
        buf.resize(len)?;
        assert_eq!(buf.base(), base);
        println!(
            "grown to {len} elements: {} chunk(s), {} bytes mapped, still at {base}",
            buf.chunk_count(),
            buf.mapped_bytes()
        );
    }
    stream.synchronize()?;
    let head = buf.read_to_vec()?;
    assert!(head[..1000].iter().enumerate().all(|(i, &x)| x == i as i32), "data kept while growing");
    buf.resize(1000)?;
    println!("shrunk back: {} bytes mapped", buf.mapped_bytes());
    Ok(())
}
