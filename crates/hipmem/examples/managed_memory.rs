//! Seed 000's unified memory, in Rust: a managed buffer written by a kernel
//! and read on the host, the same after a prefetch, advice and the range
//! attributes that report it, and the migration statistics where the
//! backend counts them (the CPU emulation's residency model).
//!
//! `cargo run -p hipmem --example managed_memory` (HIPMEM_BACKEND=host|cuda)
use std::time::Instant;

use hipmem::{Advice, Device, Location, Result};

fn main() -> Result<()> {
    let device = Device::get(0)?;
    let rt = device.runtime().clone();
    println!("device 0: {}", device.properties().name);
    const N: usize = 1 << 20;

    // hipMallocManaged; the host writes it first, so its pages are on the host.
    let mut a = device.alloc_managed::<i32>(N)?;
    a.as_mut_slice()?.fill(-1);

    // A kernel over it: the pages migrate on demand.
    let null = device.null_stream();
    let before = rt.managed_statistics()?;
    let t = Instant::now();
    null.iota(&a, 2)?;
    null.synchronize()?; // hipStreamSynchronize(0)
    println!("kernel on demand: {:?}, {:?}", t.elapsed(), rt.managed_statistics()?.since(&before));
    // The result is in A: host access waits for the devices, then migrates back.
    assert_eq!(a.as_slice()?[21], 42);

    // hipMemPrefetchAsync first: the kernel then faults on nothing.
    let stream = device.create_stream()?;
    let before = rt.managed_statistics()?;
    a.prefetch(Location::Device(0), &stream)?;
    let t = Instant::now();
    stream.iota(&a, 3)?;
    stream.synchronize()?;
    println!("after a prefetch: {:?}, {:?}", t.elapsed(), rt.managed_statistics()?.since(&before));
    println!("last prefetch location: {:?}", a.last_prefetch_location()?);

    // Advice, read back through the range attributes.
    a.advise(Advice::SetReadMostly, Location::Device(0))?;
    a.advise(Advice::SetPreferredLocation, Location::Host)?;
    a.advise(Advice::SetAccessedBy, Location::Device(0))?;
    println!(
        "read-mostly {}, preferred {:?}, accessed by {:?}",
        a.is_read_mostly()?,
        a.preferred_location()?,
        a.accessed_by()?
    );
    assert_eq!(a.as_slice()?[7], 21);
    Ok(())
}
