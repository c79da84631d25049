//! Seed 000's explicit memory management, in Rust: allocate device memory,
//! copy in, run a kernel, copy back, free — and the same with asynchronous
//! copies whose host slices the borrow checker keeps alive.
//!
//! `cargo run -p hipmem --example explicit_memory` (HIPMEM_BACKEND=host|cuda)
use hipmem::{Device, Result};

fn main() -> Result<()> {
    let device = Device::get(0)?;
    println!("device 0: {}", device.properties().name);
    const N: usize = 1 << 20;

    // hipMalloc + hipMemcpy HostToDevice
    let a: Vec<i32> = vec![0; N];
    let mut d_a = device.alloc::<i32>(N)?;
    d_a.copy_from_host(&a)?;

    // kernel<<<...>>>(d_A): the seeds' kernel, data[i] = i * 2
    let stream = device.null_stream();
    stream.iota(&d_a, 2)?;

    // hipMemcpy DeviceToHost (waits for the kernel: legacy null stream)
    let result = d_a.to_vec()?;
    assert!(result.iter().enumerate().all(|(i, &v)| v == 2 * i as i32));
    println!("explicit: d_A[i] == 2 * i for all {N} elements");

    // Asynchronous copies on a stream: the scope waits for the stream before
    // it returns, so `input` and `output` cannot be dropped or read early.
    let s = device.create_stream()?;
    let input: Vec<i32> = (0..N as i32).collect();
    let mut output = vec![0i32; N];
    s.scope(|scope| {
        scope.copy_to_device(&input, &d_a)?;
        scope.stream().iota(&d_a, 3)?;
        scope.copy_to_host(&d_a, &mut output)
    })??;
    assert!(output.iter().enumerate().all(|(i, &v)| v == 3 * i as i32));
    println!("asynchronous: copy in, kernel, copy out on one stream, verified");

    let info = device.mem_info()?;
    println!("memory: {} MiB free of {} MiB", info.free >> 20, info.total >> 20);
    Ok(()) // d_a is freed here (hipFree), the stream destroyed
}
