//! Interprocess sharing, across real processes: each test starts child
//! processes by running this test binary again with `HIPMEM_IPC_ROLE` set
//! (the child runs the same test, which sees the role and plays it), and
//! talks to them through hipmem's transport (`hipmem::ipc`). Written against
//! the public API only, so it runs unchanged on every backend.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use hipmem::pool::handle_type;
use hipmem::vmm::HANDLE_TYPE_POSIX_FD;
use hipmem::{
    AccessFlags, AddressReservation, AllocationProp, DeviceSlice, Error, IpcListener, IpcStream, Mapping,
    MemPool, PeerPolicy, PhysicalAllocation, PoolProps, PtrExportData, Runtime,
};

const ROLE: &str = "HIPMEM_IPC_ROLE";
const SOCKET: &str = "HIPMEM_IPC_SOCKET";

fn rt() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::builder()
            .default_host_devices(2)
            .build()
            .unwrap_or_else(|e| panic!("cannot open hipmem: {e}"))
    })
}

fn role() -> Option<String> {
    std::env::var(ROLE).ok()
}

fn socket_path(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("hipmem-ipc-{}-{tag}-{n}.sock", std::process::id()))
}

/// Runs `test` of this binary again as `role`, connected to `socket`.
fn spawn(test: &str, role: &str, socket: &Path) -> Child {
    Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(SOCKET, socket)
        .spawn()
        .expect("start a child process")
}

fn wait_ok(mut child: Child, what: &str) {
    let status = child.wait().expect("wait for the child");
    assert!(status.success(), "the {what} child failed: {status}");
}

fn connect() -> IpcStream {
    let path = std::env::var(SOCKET).expect("socket path");
    let s = IpcStream::connect(&path).unwrap_or_else(|e| panic!("connect to {path}: {e}"));
    s.set_recv_timeout(Some(Duration::from_secs(120))).unwrap();
    s
}

fn accept(l: &IpcListener) -> IpcStream {
    let s = l.accept().expect("accept");
    s.set_recv_timeout(Some(Duration::from_secs(120))).unwrap();
    s
}

fn shareable_pool() -> MemPool {
    MemPool::create(
        rt(),
        PoolProps { device: 0, handle_types: handle_type::POSIX_FILE_DESCRIPTOR, max_size: 0 },
    )
    .expect("a shareable pool")
}

fn assert_invalid<T: std::fmt::Debug>(r: hipmem::Result<T>, what: &str) {
    match r {
        Err(Error::InvalidValue(_)) => {}
        other => panic!("{what}: expected InvalidValue, got {other:?}"),
    }
}

// ---- a pool and pointers, parent and child ------------------------------------------------

#[test]
fn pool_and_pointers_shared_with_a_child() {
    const TEST: &str = "pool_and_pointers_shared_with_a_child";
    const N: usize = 4096;
    const BIG: usize = 3 << 20; // a second pointer that makes the pool grow
    if role().as_deref() == Some("child") {
        let s = connect();
        let pool = s.recv_pool(rt()).expect("import the pool");
        assert!(pool.is_imported());
        let small = pool.import_pointer::<i32>(&s.recv_pointer().unwrap()).expect("import pointer 1");
        let big = pool.import_pointer::<i32>(&s.recv_pointer().unwrap()).expect("import pointer 2");
        assert_eq!((small.len(), big.len()), (N, BIG));
        // What the parent wrote.
        assert!(small.read_to_vec().unwrap().iter().all(|&v| v == 7));
        assert!(big.read_to_vec().unwrap().iter().all(|&v| v == 8));
        // An imported pool cannot allocate.
        let stream = rt().device(0).unwrap().create_stream().unwrap();
        assert_invalid(pool.alloc_raw(256, &stream), "allocating from an imported pool");
        // Write for the parent.
        stream.iota(&small, 3).unwrap();
        stream.fill(&big, -1i32).unwrap();
        stream.synchronize().unwrap();
        drop(big);
        // Freed twice: the second is InvalidValue, the first only unmapped here.
        let p = small.device_ptr();
        drop(small);
        assert_invalid(pool.free_imported(p), "freeing an imported pointer twice");
        s.send_value(1).unwrap();
        return;
    }
    let pool = shareable_pool();
    let stream = rt().device(0).unwrap().create_stream().unwrap();
    let small = pool.alloc::<i32>(N, &stream).unwrap();
    let big = pool.alloc::<i32>(BIG, &stream).unwrap();
    stream.fill(&small, 7i32).unwrap();
    stream.fill(&big, 8i32).unwrap();
    stream.synchronize().unwrap();
    let path = socket_path("pool");
    let listener = IpcListener::bind(&path).unwrap();
    let child = spawn(TEST, "child", &path);
    let s = accept(&listener);
    s.send_pool(&pool).unwrap();
    s.send_pointer(&small.export_pointer().unwrap()).unwrap();
    s.send_pointer(&big.export_pointer().unwrap()).unwrap();
    assert_eq!(s.recv_value().unwrap(), 1);
    wait_ok(child, "importing");
    // The child's writes are here; the child's frees freed nothing of ours.
    let got = small.read_to_vec().unwrap();
    assert!(
        got.iter().enumerate().all(|(i, &v)| v == 3 * i as i32),
        "child's iota not seen: {:?}",
        &got[..8]
    );
    assert!(big.read_to_vec().unwrap().iter().all(|&v| v == -1));
    pool.check_invariants().unwrap();
    drop((small, big));
    stream.synchronize().unwrap();
    pool.check_invariants().unwrap();
}

// ---- the 3-process ring -------------------------------------------------------------------

const RING_N: usize = 1 << 16;

/// Process `rank`'s pool and buffer, filled with -1.
fn ring_buffer(stream: &hipmem::Stream) -> (MemPool, hipmem::PoolBuffer<i32>) {
    let pool = shareable_pool();
    let buf = pool.alloc::<i32>(RING_N, stream).unwrap();
    stream.fill(&buf, -1i32).unwrap();
    stream.synchronize().unwrap();
    (pool, buf)
}

fn ring_check(buf: &impl DeviceSlice<i32>, rank: u64) {
    let writer = (rank + 2) % 3;
    let want = 100 + writer as i32;
    let got = buf.read_to_vec().unwrap();
    assert!(
        got.iter().all(|&v| v == want),
        "rank {rank}: expected {want} from rank {writer}, got {}",
        got[0]
    );
}

#[test]
fn three_process_ring() {
    const TEST: &str = "three_process_ring";
    let stream = rt().device(0).unwrap().create_stream().unwrap();
    if let Some(r) = role().and_then(|r| r.strip_prefix("rank").map(str::to_string)) {
        let rank: u64 = r.parse().unwrap();
        let s = connect();
        s.send_value(rank).unwrap();
        let (pool, buf) = ring_buffer(&stream);
        s.send_pool(&pool).unwrap();
        s.send_pointer(&buf.export_pointer().unwrap()).unwrap();
        // The neighbour's buffer.
        let theirs = s.recv_pool(rt()).unwrap();
        let next = theirs.import_pointer::<i32>(&s.recv_pointer().unwrap()).unwrap();
        stream.fill(&next, 100 + rank as i32).unwrap();
        stream.synchronize().unwrap();
        s.send_value(10 + rank).unwrap(); // written
        assert_eq!(s.recv_value().unwrap(), 2); // verify
        ring_check(&buf, rank);
        s.send_value(20 + rank).unwrap(); // verified
        assert_eq!(s.recv_value().unwrap(), 3); // exit
        drop(next);
        return;
    }
    let path = socket_path("ring");
    let listener = IpcListener::bind(&path).unwrap();
    let children = [spawn(TEST, "rank1", &path), spawn(TEST, "rank2", &path)];
    let mut conns: Vec<Option<IpcStream>> = vec![None, None, None];
    for _ in 0..2 {
        let s = accept(&listener);
        let rank = s.recv_value().unwrap() as usize;
        conns[rank] = Some(s);
    }
    let (c1, c2) = (conns[1].take().unwrap(), conns[2].take().unwrap());
    let (pool, buf) = ring_buffer(&stream);
    // Rank 0 writes into rank 1's buffer.
    let pool1 = c1.recv_pool(rt()).unwrap();
    let next = pool1.import_pointer::<i32>(&c1.recv_pointer().unwrap()).unwrap();
    // Rank 1 writes into rank 2's: relay rank 2's messages as they are.
    for _ in 0..2 {
        let (bytes, fds) = c2.recv().unwrap();
        let fds: Vec<_> = fds.iter().map(std::os::fd::AsFd::as_fd).collect();
        c1.send(&bytes, &fds).unwrap();
    }
    // Rank 2 writes into ours.
    c2.send_pool(&pool).unwrap();
    c2.send_pointer(&buf.export_pointer().unwrap()).unwrap();
    stream.fill(&next, 100i32).unwrap();
    stream.synchronize().unwrap();
    assert_eq!(c1.recv_value().unwrap(), 11);
    assert_eq!(c2.recv_value().unwrap(), 12);
    for c in [&c1, &c2] {
        c.send_value(2).unwrap();
    }
    ring_check(&buf, 0);
    assert_eq!(c1.recv_value().unwrap(), 21);
    assert_eq!(c2.recv_value().unwrap(), 22);
    for c in [&c1, &c2] {
        c.send_value(3).unwrap();
    }
    for (i, child) in children.into_iter().enumerate() {
        wait_ok(child, &format!("rank {}", i + 1));
    }
    drop(next);
    ring_check(&buf, 0);
}

// ---- bad inputs ---------------------------------------------------------------------------

#[test]
fn bad_inputs_are_invalid_value() {
    const TEST: &str = "bad_inputs_are_invalid_value";
    if role().as_deref() == Some("child") {
        let s = connect();
        let pool = s.recv_pool(rt()).unwrap();
        // Garbage, a truncated checksum, another pool's pointer.
        let garbage = s.recv_pointer().unwrap();
        let mut corrupted = s.recv_pointer().unwrap();
        corrupted.reserved[30] ^= 1;
        let other = s.recv_pointer().unwrap();
        assert_invalid(pool.import_pointer_raw(&garbage), "garbage export data");
        assert_invalid(pool.import_pointer_raw(&corrupted), "corrupted export data");
        assert_invalid(pool.import_pointer_raw(&other), "another pool's export data");
        assert_invalid(pool.import_pointer_raw(&PtrExportData { reserved: [0; 64] }), "zeroed export data");
        s.send_value(1).unwrap();
        return;
    }
    let stream = rt().device(0).unwrap().create_stream().unwrap();
    // Export with a handle type the pool was not created for, None, flags != 0.
    let plain = MemPool::create(rt(), PoolProps { device: 0, ..Default::default() }).unwrap();
    assert_invalid(
        plain.export_shareable_handle(handle_type::POSIX_FILE_DESCRIPTOR, 0),
        "export of a plain pool",
    );
    let pool = shareable_pool();
    assert_invalid(pool.export_shareable_handle(handle_type::NONE, 0), "export with handle type None");
    assert_invalid(
        pool.export_shareable_handle(handle_type::POSIX_FILE_DESCRIPTOR, 1),
        "export with flags 1",
    );
    assert!(pool.export_shareable_handle(handle_type::WIN32, 0).is_err(), "export as Win32");
    // Pointers: of a plain pool, interior, null.
    let plain_buf = plain.alloc::<u8>(4096, &stream).unwrap();
    assert_invalid(plain_buf.export_pointer(), "export of a pointer of a plain pool");
    let buf = pool.alloc::<u8>(4096, &stream).unwrap();
    assert_invalid(
        rt().mem_pool_export_pointer(hipmem::DevicePtr(buf.device_ptr().0 + 256)),
        "interior pointer",
    );
    assert_invalid(rt().mem_pool_export_pointer(hipmem::DevicePtr::NULL), "null pointer");
    assert_invalid(plain.export_pointer(buf.device_ptr()), "a pointer of another pool");
    // Import: flags, handle types, a descriptor that is not an exported pool.
    let fd = pool.export_shareable_handle(handle_type::POSIX_FILE_DESCRIPTOR, 0).unwrap();
    use std::os::fd::AsFd;
    assert_invalid(
        MemPool::import_shareable_handle(rt(), fd.as_fd(), handle_type::POSIX_FILE_DESCRIPTOR, 1),
        "flags",
    );
    assert_invalid(MemPool::import_shareable_handle(rt(), fd.as_fd(), handle_type::NONE, 0), "None");
    let not_a_pool = std::fs::File::open("/dev/null").unwrap();
    assert_invalid(
        MemPool::import_shareable_handle(rt(), not_a_pool.as_fd(), handle_type::POSIX_FILE_DESCRIPTOR, 0),
        "/dev/null as a pool",
    );
    // Importing a pointer into a pool that is not an import.
    assert_invalid(pool.import_pointer_raw(&buf.export_pointer().unwrap()), "import into the exporting pool");
    // The child gets garbage and the data of another pool.
    let other_pool = shareable_pool();
    let other_buf = other_pool.alloc::<u8>(4096, &stream).unwrap();
    let mut garbage = PtrExportData { reserved: [0; 64] };
    for (i, b) in garbage.reserved.iter_mut().enumerate() {
        *b = (i * 37 + 11) as u8;
    }
    let path = socket_path("bad");
    let listener = IpcListener::bind(&path).unwrap();
    let child = spawn(TEST, "child", &path);
    let s = accept(&listener);
    s.send_pool(&pool).unwrap();
    s.send_pointer(&garbage).unwrap();
    s.send_pointer(&buf.export_pointer().unwrap()).unwrap();
    s.send_pointer(&other_buf.export_pointer().unwrap()).unwrap();
    assert_eq!(s.recv_value().unwrap(), 1);
    wait_ok(child, "bad-input");
    // A message of another kind where a pool is expected.
    let (a, b) = pair(&socket_path("pair"));
    a.send_value(5).unwrap();
    assert_invalid(b.recv_pool(rt()), "a value where a pool was expected");
    pool.check_invariants().unwrap();
}

/// Two connected ends in this process.
fn pair(path: &Path) -> (IpcStream, IpcStream) {
    let listener = IpcListener::bind(path).unwrap();
    let a = IpcStream::connect(path).unwrap();
    let b = listener.accept().unwrap();
    (a, b)
}

// ---- a killed importer --------------------------------------------------------------------

#[test]
fn a_killed_importer_leaves_the_exporter_intact() {
    const TEST: &str = "a_killed_importer_leaves_the_exporter_intact";
    const N: usize = 1 << 16;
    if role().as_deref() == Some("child") {
        let s = connect();
        let pool = s.recv_pool(rt()).unwrap();
        let buf = pool.import_pointer::<i32>(&s.recv_pointer().unwrap()).unwrap();
        let stream = rt().device(0).unwrap().create_stream().unwrap();
        stream.fill(&buf, 9i32).unwrap();
        stream.synchronize().unwrap();
        s.send_value(1).unwrap(); // mapped and written; now wait to be killed
        std::thread::sleep(Duration::from_secs(120));
        panic!("the child was not killed");
    }
    let pool = shareable_pool();
    let stream = rt().device(0).unwrap().create_stream().unwrap();
    let buf = pool.alloc::<i32>(N, &stream).unwrap();
    stream.fill(&buf, 5i32).unwrap();
    stream.synchronize().unwrap();
    let path = socket_path("kill");
    let listener = IpcListener::bind(&path).unwrap();
    let mut child = spawn(TEST, "child", &path);
    let s = accept(&listener);
    s.send_pool(&pool).unwrap();
    s.send_pointer(&buf.export_pointer().unwrap()).unwrap();
    assert_eq!(s.recv_value().unwrap(), 1);
    child.kill().expect("SIGKILL the importer");
    let status = child.wait().unwrap();
    assert!(!status.success());
    // The memory and the pool are intact.
    assert!(buf.read_to_vec().unwrap().iter().all(|&v| v == 9));
    stream.fill(&buf, 6i32).unwrap();
    let more = pool.alloc::<i32>(N, &stream).unwrap();
    stream.iota(&more, 1).unwrap();
    stream.synchronize().unwrap();
    assert!(buf.read_to_vec().unwrap().iter().all(|&v| v == 6));
    assert_eq!(more.read_to_vec().unwrap()[100], 100);
    pool.check_invariants().unwrap();
    // And it still exports: an import in this process sees the same memory.
    use std::os::fd::AsFd;
    let fd = pool.export_shareable_handle(handle_type::POSIX_FILE_DESCRIPTOR, 0).unwrap();
    let again =
        MemPool::import_shareable_handle(rt(), fd.as_fd(), handle_type::POSIX_FILE_DESCRIPTOR, 0).unwrap();
    let view = again.import_pointer::<i32>(&more.export_pointer().unwrap()).unwrap();
    assert_ne!(view.device_ptr(), more.device_ptr());
    assert_eq!(view.read_to_vec().unwrap()[77], 77);
    // hipFree of an imported pointer unmaps it here only.
    let raw = again.import_pointer_raw(&buf.export_pointer().unwrap()).unwrap();
    rt().free(raw).unwrap();
    assert!(buf.read_to_vec().unwrap().iter().all(|&v| v == 6));
}

// ---- the transport's checks ---------------------------------------------------------------

#[test]
fn the_transport_rejects_a_peer_of_another_user() {
    const TEST: &str = "the_transport_rejects_a_peer_of_another_user";
    if role().as_deref() == Some("child") {
        // The connection is made (the listener is ours) but is closed at once.
        let s = connect();
        assert!(s.recv_value().is_err(), "a rejected peer must not receive anything");
        return;
    }
    let path = socket_path("cred");
    let listener = IpcListener::bind(&path).unwrap();
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let me = std::fs::metadata(&path).unwrap().uid();
    let listener = listener.with_policy(PeerPolicy::allow_uids([me.wrapping_add(1)]));
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the socket must be owner-only");
    let child = spawn(TEST, "child", &path);
    assert_invalid(listener.accept(), "a peer of another user");
    wait_ok(child, "rejected");
    // The same user is accepted by default, and sees our credentials.
    let (a, b) = pair(&socket_path("cred-ok"));
    assert_eq!(a.peer().uid, me);
    assert_eq!(b.peer().pid, std::process::id() as i32);
    // A socket path that exists already is refused.
    let taken = socket_path("taken");
    let _l = IpcListener::bind(&taken).unwrap();
    assert!(IpcListener::bind(&taken).is_err());
}

// ---- physical allocations -----------------------------------------------------------------

#[test]
fn physical_allocation_shared_with_a_child() {
    const TEST: &str = "physical_allocation_shared_with_a_child";
    let device = rt().device(0).unwrap();
    let g = PhysicalAllocation::granularity(&device).unwrap();
    let map = |phys: &PhysicalAllocation| {
        let reservation = AddressReservation::new(rt(), g, 0, hipmem::DevicePtr::NULL).unwrap();
        let m = Mapping::new(&reservation, 0, phys, 0, g).unwrap();
        m.set_access(0, AccessFlags::ReadWrite).unwrap();
        m
    };
    let n = (g / 4) as usize;
    if role().as_deref() == Some("child") {
        let s = connect();
        let phys = s.recv_physical(rt()).unwrap();
        let m = map(&phys);
        let view = m.view::<i32>();
        assert_eq!(view.len(), n);
        assert!(view.read_to_vec().unwrap().iter().all(|&v| v == 41));
        let stream = device.create_stream().unwrap();
        stream.fill(&view, 42i32).unwrap();
        stream.synchronize().unwrap();
        drop(m);
        drop(phys); // releases this process's reference only
        s.send_value(1).unwrap();
        return;
    }
    // Exporting without the handle type requested is InvalidValue.
    let plain = PhysicalAllocation::new(&device, g).unwrap();
    assert_invalid(plain.export_fd(), "export of a physical allocation created without a handle type");
    let mut prop = AllocationProp::device(0);
    prop.requested_handle_types = HANDLE_TYPE_POSIX_FD;
    let phys = PhysicalAllocation::with_prop(rt(), g, &prop).unwrap();
    let m = map(&phys);
    let stream = device.create_stream().unwrap();
    stream.fill(&m.view::<i32>(), 41i32).unwrap();
    stream.synchronize().unwrap();
    let path = socket_path("phys");
    let listener = IpcListener::bind(&path).unwrap();
    let child = spawn(TEST, "child", &path);
    let s = accept(&listener);
    s.send_physical(&phys).unwrap();
    assert_eq!(s.recv_value().unwrap(), 1);
    wait_ok(child, "physical");
    assert!(m.view::<i32>().read_to_vec().unwrap().iter().all(|&v| v == 42));
}

// ---- the driver's pool kind ---------------------------------------------------------------

#[test]
fn driver_pool_shared_with_a_child() {
    const TEST: &str = "driver_pool_shared_with_a_child";
    const N: usize = 1 << 14;
    if role().as_deref() == Some("child") {
        let s = connect();
        let pool = s.recv_pool(rt()).unwrap();
        assert!(pool.is_imported());
        let buf = pool.import_pointer::<i32>(&s.recv_pointer().unwrap()).unwrap();
        assert!(buf.len() >= N);
        let stream = rt().device(0).unwrap().create_stream().unwrap();
        assert_invalid(pool.alloc_raw(256, &stream), "allocating from an imported driver pool");
        assert!(buf.read_to_vec().unwrap()[..N].iter().all(|&v| v == 4));
        stream.iota(&buf, 2).unwrap();
        stream.synchronize().unwrap();
        drop(buf);
        s.send_value(1).unwrap();
        return;
    }
    let props = PoolProps { device: 0, handle_types: handle_type::POSIX_FILE_DESCRIPTOR, max_size: 0 };
    let pool = match MemPool::create_driver(rt(), props) {
        Ok(p) => p,
        Err(Error::NotSupported(m)) => {
            eprintln!("note: no driver pools on this backend ({m}); nothing to share");
            return;
        }
        Err(e) => panic!("create_driver: {e}"),
    };
    let stream = rt().device(0).unwrap().create_stream().unwrap();
    let buf = pool.alloc::<i32>(N, &stream).unwrap();
    stream.fill(&buf, 4i32).unwrap();
    stream.synchronize().unwrap();
    let path = socket_path("driver");
    let listener = IpcListener::bind(&path).unwrap();
    let child = spawn(TEST, "child", &path);
    let s = accept(&listener);
    s.send_pool(&pool).unwrap();
    s.send_pointer(&buf.export_pointer().unwrap()).unwrap();
    assert_eq!(s.recv_value().unwrap(), 1);
    wait_ok(child, "driver-pool");
    let got = buf.read_to_vec().unwrap();
    assert!(got.iter().enumerate().all(|(i, &v)| v == 2 * i as i32));
}
