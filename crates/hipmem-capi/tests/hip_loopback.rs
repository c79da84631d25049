//! The hip backend over libhipmem (the loopback): hipmem's own hip backend
//! loads `libhipmem.so` (built with this test) as its HIP library and runs
//! on whatever libhipmem uses underneath (the CPU emulation here).
//!
//! Each test runs its body in a child process (this executable again, with
//! the environment the loopback needs), so that no variable leaks into other
//! tests and a hang or crash is caught. The whole conformance suite runs the
//! same way from `.ci/run`.

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use hipmem_rs::{BackendKind, DeviceSlice, Runtime};

/// Set in the child process.
const CHILD: &str = "HIPMEM_LOOPBACK_TEST_CHILD";

/// libhipmem.so built with this test (target/<profile> or its deps/), or
/// the bundle's `.gpu/lib/libhipmem.so` (next to `.gpu/tests/`), or the file
/// `HIPMEM_HIP_LIBRARY` names if it is a libhipmem.
fn libhipmem() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> =
        common::libhipmem_dir().map(|d| d.join("libhipmem.so")).into_iter().collect();
    if let Some(named) = std::env::var_os("HIPMEM_HIP_LIBRARY").map(PathBuf::from) {
        if named.file_name().is_some_and(|n| n.to_string_lossy().starts_with("libhipmem")) {
            candidates.push(named);
        }
    }
    let found = candidates.into_iter().find(|p| p.is_file());
    if found.is_none() {
        println!("note: no libhipmem.so next to this test or in ../lib (the bundle's .gpu/lib); skipped");
    }
    found
}

/// Runs test `name` of this executable in a child with `env`; fails if it
/// fails or runs longer than a minute.
fn in_child(name: &str, env: &[(&str, String)]) {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args([name, "--exact", "--nocapture", "--test-threads=1"]).env(CHILD, "1");
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn the child");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text =
                format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(status.success(), "the child of {name} failed ({status}):\n{text}");
            assert!(text.contains("1 passed"), "the child of {name} ran no test:\n{text}");
            for line in text.lines() {
                if let Some(at) = line.find("note:") {
                    println!("{}", &line[at..]);
                }
            }
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the child of {name} hung (killed after a minute)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn loopback_env(library: PathBuf) -> Vec<(&'static str, String)> {
    vec![
        // What a user sets: hip, with libhipmem as the HIP library. libhipmem
        // itself must not take hip from this.
        ("HIPMEM_BACKEND", "hip".into()),
        ("HIPMEM_HIP_LIBRARY", library.display().to_string()),
        ("HIPMEM_HIP_LOOPBACK_BACKEND", "host".into()),
        ("HIPMEM_HOST_DEVICES", "2".into()),
    ]
}

#[test]
fn the_hip_backend_drives_libhipmem() {
    if std::env::var_os(CHILD).is_none() {
        if let Some(library) = libhipmem() {
            in_child("the_hip_backend_drives_libhipmem", &loopback_env(library));
        }
        return;
    }
    let rt = Runtime::from_env().expect("the hip backend over libhipmem");
    assert_eq!(rt.backend_kind(), BackendKind::Hip);
    let description = rt.backend().description();
    assert!(description.contains("loopback") && description.contains("libhipmem"), "{description}");
    assert_eq!(rt.device_count(), 2, "libhipmem's CPU emulation has HIPMEM_HOST_DEVICES devices");
    let dev = rt.device(1).unwrap();
    let stream = dev.create_stream().unwrap();
    let buf = dev.alloc_zeroed::<i32>(100_000).unwrap();
    let flag = dev.alloc_zeroed::<u32>(1).unwrap();
    // delay (a host function, then a memset), iota (staged copies), fill (a memset), in order.
    let t0 = Instant::now();
    stream.delay(Duration::from_millis(200), &flag, 7).unwrap();
    stream.iota(&buf, 3).unwrap();
    assert!(
        t0.elapsed() > Duration::from_millis(100) || !stream.query().unwrap(),
        "the delay did not hold the stream"
    );
    stream.synchronize().unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(200));
    assert_eq!(flag.to_vec().unwrap(), vec![7]);
    assert_eq!(buf.to_vec().unwrap(), (0..100_000).map(|i| i * 3).collect::<Vec<i32>>());
    stream.fill(&buf, -5).unwrap();
    stream.synchronize().unwrap();
    assert!(buf.to_vec().unwrap().iter().all(|&v| v == -5));
    // The runtime's pools through HIP's pool API.
    let pool = hipmem_rs::MemPool::create_driver(
        &rt,
        hipmem_rs::PoolProps { device: 0, handle_types: 0, max_size: 0 },
    )
    .expect("hipMemPoolCreate through the loopback");
    let s0 = rt.device(0).unwrap().create_stream().unwrap();
    let p = pool.alloc::<u8>(4096, &s0).unwrap();
    s0.fill(&p, 9u8).unwrap();
    s0.synchronize().unwrap();
    assert!(p.read_to_vec().unwrap().iter().all(|&b| b == 9));
}

/// Issue 15's backend methods over HIP's entry points: device attributes,
/// the driver version, stream priorities, pitched memory (hipMallocPitch,
/// hipMemset2DAsync, hipMemcpy2DAsync) and peer access (hipDeviceCanAccessPeer,
/// enable/disable, hipMemcpyPeerAsync), answered by libhipmem's emulation.
#[test]
fn the_hip_backend_drives_devices_pitched_memory_and_peers() {
    if std::env::var_os(CHILD).is_none() {
        if let Some(library) = libhipmem() {
            in_child("the_hip_backend_drives_devices_pitched_memory_and_peers", &loopback_env(library));
        }
        return;
    }
    use hipmem_rs::backend::copy2d::{Copy2D, Side2D};
    use hipmem_rs::{DeviceAttribute, FillValue, MemcpyKind, StreamFlags};

    let rt = Runtime::from_env().expect("the hip backend over libhipmem");
    assert_eq!(rt.backend_kind(), BackendKind::Hip);
    // Attributes: what the emulation reports, through hipDeviceGetAttribute.
    let sms = rt.device_properties(0).unwrap().multiprocessor_count;
    assert_eq!(rt.device_attribute(0, DeviceAttribute::MultiprocessorCount).unwrap(), i64::from(sms));
    assert_eq!(rt.device_attribute(0, DeviceAttribute::MemoryPoolsSupported).unwrap(), 1);
    let warp = rt.device_attribute(1, DeviceAttribute::WarpSize).unwrap();
    assert!(warp == 32 || warp == 64, "warp size {warp}");
    match rt.device_attribute(0, DeviceAttribute::MaxTexture1DWidth) {
        Ok(v) => assert_eq!(v, 0, "the emulation has no textures"),
        Err(e) => assert_eq!(e.code(), 801, "{e}"),
    }
    assert_eq!(rt.driver_version().unwrap(), 60_200_000, "the emulation's driver version");
    // Priorities: the emulation has none, so every priority is clamped to 0.
    let range = rt.stream_priority_range(0).unwrap();
    assert_eq!((range.least, range.greatest), (0, 0));
    let s0 = rt.device(0).unwrap().create_stream_with_priority(StreamFlags::default(), -3).unwrap();
    assert_eq!(s0.priority().unwrap(), 0);
    // Pitched memory: two allocations of 8 rows of 100 bytes.
    let (a, pitch_a) = rt.malloc_pitch(0, 100, 8).unwrap();
    let (b, pitch_b) = rt.malloc_pitch(0, 100, 8).unwrap();
    assert!(pitch_a >= 100 && pitch_b >= 100, "pitches {pitch_a}, {pitch_b}");
    rt.memset(a, FillValue::U8(0), pitch_a * 8).unwrap();
    rt.memset(b, FillValue::U8(0), pitch_b * 8).unwrap();
    rt.memset_2d_async(a, pitch_a, 7, 100, 8, s0.raw()).unwrap();
    let copy = Copy2D {
        dst: Side2D::Device(b),
        dst_pitch: pitch_b,
        src: Side2D::Device(a),
        src_pitch: pitch_a,
        width: 60,
        height: 8,
    };
    rt.memcpy_2d_async(&copy, s0.raw()).unwrap();
    s0.synchronize().unwrap();
    let mut back = vec![0u8; (pitch_b * 8) as usize];
    rt.copy_device_to_host(&mut back, b).unwrap();
    for (r, row) in back.chunks(pitch_b as usize).enumerate() {
        assert!(row[..60].iter().all(|&v| v == 7), "row {r}: the copied part");
        assert!(row[60..].iter().all(|&v| v == 0), "row {r}: past the copied width");
    }
    assert!(rt.resolve_copy_2d(b.0, pitch_b, a.0, pitch_a, 100, 8, MemcpyKind::DeviceToDevice).is_ok());
    // Peer access between libhipmem's two emulated devices.
    assert!(rt.can_access_peer(1, 0).unwrap());
    // 800 bytes: within both allocations (a holds at least 8 rows of 100).
    let c = rt.malloc(1, 800).unwrap();
    rt.memset(a, FillValue::U8(3), 800).unwrap();
    rt.memcpy_peer(c, 1, a, 0, 800).unwrap();
    let mut peer_back = vec![0u8; 800];
    rt.copy_device_to_host(&mut peer_back, c).unwrap();
    assert!(peer_back.iter().all(|&v| v == 3), "hipMemcpyPeer without peer access");
    assert!(!rt.peer_access_enabled(1, 0).unwrap());
    rt.enable_peer_access(1, 0).unwrap();
    assert!(rt.peer_access_enabled(1, 0).unwrap());
    assert_eq!(rt.enable_peer_access(1, 0).unwrap_err().code(), 704);
    rt.disable_peer_access(1, 0).unwrap();
    assert_eq!(rt.disable_peer_access(1, 0).unwrap_err().code(), 705);
    for p in [a, b, c] {
        rt.free(p).unwrap();
    }
}

#[test]
fn libhipmem_never_loads_itself() {
    if std::env::var_os(CHILD).is_none() {
        if let Some(library) = libhipmem() {
            in_child("libhipmem_never_loads_itself", &loopback_env(library));
        }
        return;
    }
    // libhipmem's own runtime, with HIPMEM_BACKEND=hip and HIPMEM_HIP_LIBRARY
    // naming libhipmem: its hip backend would load libhipmem itself.
    let path = std::env::var_os("HIPMEM_HIP_LIBRARY").expect("set by the parent");
    // SAFETY: loading libhipmem runs Rust's (empty) initializers.
    let lib = unsafe { libloading::Library::new(path) }.expect("dlopen libhipmem.so");
    // SAFETY: the signatures hip_runtime_api.h declares.
    let (init, count) = unsafe {
        (
            *lib.get::<unsafe extern "C" fn(u32) -> i32>(b"hipInit").unwrap(),
            *lib.get::<unsafe extern "C" fn(*mut i32) -> i32>(b"hipGetDeviceCount").unwrap(),
        )
    };
    // SAFETY: plain FFI calls with valid arguments.
    assert_eq!(unsafe { init(0) }, 3, "hipInit must fail with hipErrorNotInitialized, not recurse");
    let mut n = -1;
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { count(&mut n) }, 3);
}

/// On hip the calling thread's device is the HIP runtime's: what the
/// runtime's own `hipSetDevice` chose (PyTorch on ROCm calls it) is what
/// `Runtime::thread_device` (the C ABI's current device) says, hipmem's
/// calls on another device leave it there, and `Runtime::make_current`
/// (hipmem's `hipSetDevice`) moves it. Here the HIP runtime is libhipmem.
#[test]
fn the_current_device_follows_the_hip_runtimes_device() {
    if std::env::var_os(CHILD).is_none() {
        if let Some(library) = libhipmem() {
            in_child("the_current_device_follows_the_hip_runtimes_device", &loopback_env(library));
        }
        return;
    }
    let rt = Runtime::from_env().expect("the hip backend over libhipmem");
    assert_eq!(rt.backend_kind(), BackendKind::Hip);
    let path = std::env::var_os("HIPMEM_HIP_LIBRARY").expect("the loopback's library");
    // SAFETY: the library the hip backend already loaded (the same handle);
    // hipSetDevice and hipGetDevice have HIP's signatures.
    let (lib, set, get) = unsafe {
        let lib = libloading::Library::new(path).expect("libhipmem");
        let set: unsafe extern "C" fn(std::ffi::c_int) -> i32 = *lib.get(b"hipSetDevice\0").unwrap();
        let get: unsafe extern "C" fn(*mut std::ffi::c_int) -> i32 = *lib.get(b"hipGetDevice\0").unwrap();
        (lib, set, get)
    };
    let runtime_device = || {
        let mut d: std::ffi::c_int = -1;
        // SAFETY: a valid out-pointer.
        assert_eq!(unsafe { get(&mut d) }, 0);
        d
    };
    assert_eq!(rt.thread_device(), Some(0), "the HIP runtime's device before any hipSetDevice");
    // SAFETY: a device the runtime has.
    assert_eq!(unsafe { set(1) }, 0);
    assert_eq!(rt.thread_device(), Some(1), "after the HIP runtime's own hipSetDevice(1)");
    // hipmem's work on device 0 leaves the runtime on device 1.
    let p = rt.malloc(0, 1 << 20).unwrap();
    rt.free(p).unwrap();
    assert_eq!((rt.thread_device(), runtime_device()), (Some(1), 1));
    rt.make_current(0).unwrap();
    assert_eq!((rt.thread_device(), runtime_device()), (Some(0), 0), "hipmem's hipSetDevice moves it");
    // Another thread has its own device.
    std::thread::spawn(move || assert_eq!(rt.thread_device(), Some(0))).join().unwrap();
    drop(lib);
}

/// On hip a stream made outside hipmem (by the HIP runtime's user, as
/// PyTorch on ROCm and RCCL make theirs) is taken: its device is the
/// runtime's answer (`hipStreamGetDevice`), it is refused as another
/// device's, a pool allocates and the built-in kernels run on it, hipmem
/// never destroys it unless asked to, and a handle that is no stream is
/// InvalidHandle. Here the HIP runtime is libhipmem.
#[test]
fn the_hip_backend_takes_streams_made_outside_hipmem() {
    if std::env::var_os(CHILD).is_none() {
        if let Some(library) = libhipmem() {
            in_child("the_hip_backend_takes_streams_made_outside_hipmem", &loopback_env(library));
        }
        return;
    }
    use hipmem_rs::backend::RawStream;
    use hipmem_rs::{MemPool, PoolProps, Stream};
    type Handle = *mut std::ffi::c_void;
    let rt = Runtime::from_env().expect("the hip backend over libhipmem");
    assert_eq!(rt.backend_kind(), BackendKind::Hip);
    let path = std::env::var_os("HIPMEM_HIP_LIBRARY").expect("the loopback's library");
    // SAFETY: the library the hip backend already loaded (the same handle);
    // the symbols have HIP's signatures.
    let (lib, set, create, query, destroy) = unsafe {
        let lib = libloading::Library::new(path).expect("libhipmem");
        let set: unsafe extern "C" fn(std::ffi::c_int) -> i32 = *lib.get(b"hipSetDevice\0").unwrap();
        let create: unsafe extern "C" fn(*mut Handle) -> i32 = *lib.get(b"hipStreamCreate\0").unwrap();
        let query: unsafe extern "C" fn(Handle) -> i32 = *lib.get(b"hipStreamQuery\0").unwrap();
        let destroy: unsafe extern "C" fn(Handle) -> i32 = *lib.get(b"hipStreamDestroy\0").unwrap();
        (lib, set, create, query, destroy)
    };
    // SAFETY (the FFI calls below): valid out-pointers, live handles.
    let made = |device: i32| unsafe {
        let mut h: Handle = std::ptr::null_mut();
        assert_eq!(set(device), 0);
        assert_eq!(create(&mut h), 0);
        assert_eq!(set(0), 0);
        h as u64
    };
    let h = made(1);
    assert_eq!(rt.stream_device(h).unwrap(), 1, "the runtime names its device");
    let e = Stream::adopt(&rt, RawStream { device: 0, handle: h }).unwrap_err();
    assert!(e.code() == 400 && e.to_string().contains("device 1"), "{e}");
    let s = Stream::adopt(&rt, RawStream { device: 1, handle: h }).unwrap();
    assert!(!s.is_owned());
    let pool = MemPool::create(&rt, PoolProps { device: 1, handle_types: 0, max_size: 0 }).unwrap();
    let b = pool.alloc::<u8>(1 << 16, &s).unwrap();
    s.fill(&b, 0x3c).unwrap();
    s.synchronize().unwrap();
    assert!(b.read_to_vec().unwrap().iter().all(|&v| v == 0x3c));
    drop(b);
    s.synchronize().unwrap();
    // hipmem's handles gone, the stream is still the user's.
    drop(s);
    // SAFETY: a live stream.
    assert_eq!(unsafe { query(h as Handle) }, 0);
    // A handle that is no stream.
    for bad in [0xdead0u64, 0x7f00_0000_0008] {
        assert_eq!(rt.stream_device(bad).unwrap_err().code(), 400);
        assert_eq!(Stream::adopt(&rt, RawStream { device: 0, handle: bad }).unwrap_err().code(), 400);
    }
    // Destroyed through hipmem when asked: the runtime's handle is dead then.
    rt.destroy_adopted_stream(RawStream { device: 1, handle: h }).unwrap();
    // SAFETY: libhipmem checks the handle (a destroyed one is an error code).
    assert_ne!(unsafe { query(h as Handle) }, 0, "hipmem destroyed it");
    // One its user destroys itself after hipmem adopted it stays unused.
    let h2 = made(0);
    drop(Stream::adopt(&rt, RawStream { device: 0, handle: h2 }).unwrap());
    // SAFETY: a live stream, destroyed once.
    assert_eq!(unsafe { destroy(h2 as Handle) }, 0);
    drop(lib);
}
