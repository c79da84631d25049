//! The ring of the CUDA samples' streamOrderedAllocationIPC, with hipmem:
//! N processes (default 3), each with a shareable pool and a buffer from it;
//! each imports its neighbour's pool and pointer, writes its rank into the
//! neighbour's buffer, and verifies that its own buffer holds its other
//! neighbour's rank. Process 0 starts the others (this program again, with
//! `--rank`) and relays the exports through hipmem's transport: an owner-only
//! Unix socket whose peers are checked, descriptors passed with SCM_RIGHTS.
//!
//! `cargo run -p hipmem --example ipc_ring -- [N]`

use std::os::fd::AsFd;
use std::process::Command;
use std::time::Instant;

use hipmem::pool::handle_type;
use hipmem::{DeviceSlice, IpcListener, IpcStream, MemPool, PoolProps, Runtime};

const ELEMENTS: usize = 1 << 20;

fn main() -> hipmem::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let rt = Runtime::builder().build()?;
    if args.get(1).map(String::as_str) == Some("--rank") {
        let rank: usize = args[2].parse().expect("rank");
        let n: usize = args[3].parse().expect("process count");
        return child(&rt, rank, n, &args[4]);
    }
    let n: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3).max(2);
    let start = Instant::now();
    let path = std::env::temp_dir().join(format!("hipmem-ipc-ring-{}.sock", std::process::id()));
    let listener = IpcListener::bind(&path)?;
    let exe = std::env::current_exe().expect("this program");
    let mut children = Vec::new();
    for rank in 1..n {
        children.push(
            Command::new(&exe)
                .args(["--rank", &rank.to_string(), &n.to_string(), path.to_str().expect("utf-8 path")])
                .spawn()
                .expect("start a process"),
        );
    }
    let mut conns: Vec<Option<IpcStream>> = (0..n).map(|_| None).collect();
    for _ in 1..n {
        let s = listener.accept()?;
        let rank = s.recv_value()? as usize;
        conns[rank] = Some(s);
    }
    let conns: Vec<IpcStream> = conns.into_iter().skip(1).map(|c| c.expect("every rank connected")).collect();
    let (pool, buf, stream) = own_buffer(&rt)?;
    // Rank 0 imports rank 1's buffer; rank i gets rank i+1's (relayed as
    // they are); the last rank gets ours.
    let theirs = conns[0].recv_pool(&rt)?;
    let next = theirs.import_pointer::<i32>(&conns[0].recv_pointer()?)?;
    for i in 1..conns.len() {
        for _ in 0..2 {
            let (bytes, fds) = conns[i].recv()?;
            let fds: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            conns[i - 1].send(&bytes, &fds)?;
        }
    }
    let last = conns.last().expect("at least one other rank");
    last.send_pool(&pool)?;
    last.send_pointer(&buf.export_pointer()?)?;
    stream.fill(&next, 0i32)?;
    stream.synchronize()?;
    for c in &conns {
        c.recv_value()?; // written
    }
    for c in &conns {
        c.send_value(0)?; // verify
    }
    let mut ok = verify(&buf, 0, n)?;
    for c in &conns {
        ok &= c.recv_value()? == 1;
    }
    for c in &conns {
        c.send_value(0)?; // exit
    }
    for mut child in children {
        ok &= child.wait().map(|s| s.success()).unwrap_or(false);
    }
    println!(
        "ipc ring of {n} processes on {:?}: {} in {:.1} ms",
        rt.backend_kind(),
        if ok { "every process saw its neighbour's data" } else { "FAILED" },
        start.elapsed().as_secs_f64() * 1e3
    );
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}

fn own_buffer(rt: &Runtime) -> hipmem::Result<(MemPool, hipmem::PoolBuffer<i32>, hipmem::Stream)> {
    let props = PoolProps { device: 0, handle_types: handle_type::POSIX_FILE_DESCRIPTOR, max_size: 0 };
    let pool = MemPool::create(rt, props)?;
    let stream = rt.device(0)?.create_stream()?;
    let buf = pool.alloc::<i32>(ELEMENTS, &stream)?;
    stream.fill(&buf, -1i32)?;
    stream.synchronize()?;
    Ok((pool, buf, stream))
}

/// Whether `buf` holds the rank of the process before `rank` in the ring.
fn verify(buf: &impl DeviceSlice<i32>, rank: usize, n: usize) -> hipmem::Result<bool> {
    let want = ((rank + n - 1) % n) as i32;
    let got = buf.read_to_vec()?;
    let ok = got.iter().all(|&v| v == want);
    if !ok {
        eprintln!(
            "rank {rank}: expected {want} everywhere, found {}",
            got.iter().find(|&&v| v != want).unwrap()
        );
    }
    Ok(ok)
}

fn child(rt: &Runtime, rank: usize, n: usize, path: &str) -> hipmem::Result<()> {
    let s = IpcStream::connect(path)?;
    s.send_value(rank as u64)?;
    let (pool, buf, stream) = own_buffer(rt)?;
    s.send_pool(&pool)?;
    s.send_pointer(&buf.export_pointer()?)?;
    let theirs = s.recv_pool(rt)?;
    let next = theirs.import_pointer::<i32>(&s.recv_pointer()?)?;
    stream.fill(&next, rank as i32)?;
    stream.synchronize()?;
    s.send_value(1)?; // written
    s.recv_value()?; // verify
    s.send_value(verify(&buf, rank, n)? as u64)?;
    s.recv_value()?; // exit
    Ok(())
}
