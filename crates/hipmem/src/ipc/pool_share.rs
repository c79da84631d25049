//! Interprocess sharing of hipmem's own pools.
//!
//! A shareable pool lives in one address reservation with physical chunks
//! (each exportable as a descriptor) mapped in as it grows. Exporting the
//! pool gives one descriptor: an end of a `SOCK_SEQPACKET` socket pair whose
//! other end an exporter-side thread serves. An importer sends that thread a
//! private connection (a descriptor, `SCM_RIGHTS`) and asks over it for the
//! chunks that cover a range of the reservation; it gets their descriptors,
//! offsets and sizes, and maps them at the same offsets of a reservation of
//! its own. A pointer's export data names the pool (a random 128-bit id), the
//! block's offset and size, with a checksum: an imported pointer is the
//! importer's base plus the offset.
//!
//! Lifetimes: the importer holds its own handles (the driver and the memfd
//! objects count references), so the exporter's memory stays valid while it
//! is mapped anywhere; freeing an imported pointer unmaps the chunks no other
//! imported pointer uses, in the importer only. A dying importer closes its
//! connection and its serving thread ends; nothing else changes.
#![forbid(unsafe_code)]

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use super::{recv_msg, send_msg, seqpacket_pair, set_recv_timeout};
use crate::backend::DevicePtr;
use crate::error::{Error, Result};
use crate::pool::core::PoolCore;
use crate::pool::imported::ImportedPool;
use crate::pool::{AccessFlags, PoolProps, PtrExportData, handle_type};
use crate::runtime::Runtime;
use crate::vmm::AccessDesc;

const PTR_MAGIC: [u8; 8] = *b"HIPMEMP\x01";
const PROTO_MAGIC: u32 = 0x4950_4d48; // "HMPI"
const PROTO_VERSION: u32 = 1;
const OP_HELLO: u32 = 1;
const OP_INFO: u32 = 2;
const OP_CHUNKS: u32 = 3;
/// Chunks per reply (the importer asks again for the rest).
const CHUNKS_PER_REPLY: usize = 32;
/// How long an importer waits for the exporter's answer.
const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// A random 128-bit id (the kernel's random source; a hash of time and pid
/// if that fails).
pub(crate) fn random_uid() -> [u8; 16] {
    let mut uid = [0u8; 16];
    if rustix::rand::getrandom(&mut uid, rustix::rand::GetRandomFlags::empty()).is_ok_and(|n| n == 16) {
        return uid;
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos(),
    );
    h.write_u32(std::process::id());
    let a = h.finish();
    h.write_u64(a);
    uid[..8].copy_from_slice(&a.to_le_bytes());
    uid[8..].copy_from_slice(&h.finish().to_le_bytes());
    uid
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// What pointer export data says.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct PtrInfo {
    pub(crate) uid: [u8; 16],
    pub(crate) offset: u64,
    /// Bytes mapped for it (the block).
    pub(crate) size: u64,
    /// Bytes the user asked for (at most `size`).
    pub(crate) len: u64,
}

pub(crate) fn encode_ptr(info: PtrInfo) -> PtrExportData {
    let mut d = [0u8; 64];
    d[0..8].copy_from_slice(&PTR_MAGIC);
    d[8..24].copy_from_slice(&info.uid);
    d[24..32].copy_from_slice(&info.offset.to_le_bytes());
    d[32..40].copy_from_slice(&info.size.to_le_bytes());
    d[40..48].copy_from_slice(&info.len.to_le_bytes());
    let sum = fnv1a(&d[..56]);
    d[56..64].copy_from_slice(&sum.to_le_bytes());
    PtrExportData { reserved: d }
}

/// Whether the data is hipmem's own pointer export data (else: a driver's).
pub(crate) fn is_hipmem_ptr_data(data: &PtrExportData) -> bool {
    data.reserved[0..8] == PTR_MAGIC
}

pub(crate) fn decode_ptr(data: &PtrExportData) -> Result<PtrInfo> {
    let d = &data.reserved;
    let u64_at = |i: usize| u64::from_le_bytes(d[i..i + 8].try_into().expect("8 bytes"));
    if d[0..8] != PTR_MAGIC || u64_at(56) != fnv1a(&d[..56]) {
        return Err(Error::InvalidValue(
            "the pointer export data is not valid (bad magic or checksum)".into(),
        ));
    }
    let info = PtrInfo {
        uid: d[8..24].try_into().expect("16 bytes"),
        offset: u64_at(24),
        size: u64_at(32),
        len: u64_at(40),
    };
    if info.size == 0 || info.len > info.size {
        return Err(Error::InvalidValue("the pointer export data is not valid (sizes)".into()));
    }
    Ok(info)
}

// ---- wire format -------------------------------------------------------------------------

struct Writer(Vec<u8>);

impl Writer {
    fn new(op: u32) -> Writer {
        let mut w = Writer(Vec::with_capacity(64));
        w.u32(PROTO_MAGIC).u32(PROTO_VERSION).u32(op);
        w
    }
    fn u32(&mut self, v: u32) -> &mut Writer {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn u64(&mut self, v: u64) -> &mut Writer {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Writer {
        self.0.extend_from_slice(v);
        self
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Checks the header and returns the op.
    fn new(buf: &'a [u8]) -> Result<(Reader<'a>, u32)> {
        let mut r = Reader { buf, pos: 0 };
        if r.u32()? != PROTO_MAGIC || r.u32()? != PROTO_VERSION {
            return Err(bad_peer("not a hipmem pool message (or another version)"));
        }
        let op = r.u32()?;
        Ok((r, op))
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let s = self.buf.get(self.pos..self.pos + n).ok_or_else(|| bad_peer("a short message"))?;
        self.pos += n;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

fn bad_peer(what: &str) -> Error {
    Error::InvalidValue(format!("the exported pool's descriptor does not speak hipmem's protocol: {what}"))
}

fn error_reply(op: u32, e: &Error) -> Vec<u8> {
    let mut w = Writer::new(op);
    w.u32(1).u32(e.code() as u32).bytes(e.message().as_bytes());
    w.0
}

// ---- the exporter ------------------------------------------------------------------------

/// Exports a hipmem pool: the descriptor an importer connects through.
pub(crate) fn export_pool(core: &Arc<PoolCore>) -> Result<OwnedFd> {
    core.ipc_info(random_uid)?;
    let (ours, theirs) = seqpacket_pair()?;
    let pool = Arc::downgrade(core);
    std::thread::Builder::new()
        .name("hipmem-pool-export".into())
        .spawn(move || serve_exports(ours, pool))
        .map_err(|e| Error::Unknown(format!("cannot start the pool's export thread: {e}")))?;
    Ok(theirs)
}

/// Accepts importers' connections until every holder of the exported
/// descriptor closed it.
fn serve_exports(sock: OwnedFd, pool: Weak<PoolCore>) {
    loop {
        let Ok((bytes, fds)) = recv_msg(sock.as_fd()) else { return };
        if bytes.is_empty() {
            return;
        }
        let hello = Reader::new(&bytes).is_ok_and(|(_, op)| op == OP_HELLO);
        if !hello || fds.len() != 1 {
            continue;
        }
        let conn = fds.into_iter().next().expect("one descriptor");
        let pool = pool.clone();
        let _ = std::thread::Builder::new()
            .name("hipmem-pool-importer".into())
            .spawn(move || serve_importer(conn, pool));
    }
}

/// Answers one importer until it goes away.
fn serve_importer(conn: OwnedFd, pool: Weak<PoolCore>) {
    loop {
        let Ok((bytes, _)) = recv_msg(conn.as_fd()) else { return };
        if bytes.is_empty() {
            return;
        }
        let (reply, fds) = match answer(&bytes, &pool) {
            Ok(r) => r,
            Err((op, e)) => (error_reply(op, &e), Vec::new()),
        };
        let borrowed: Vec<BorrowedFd<'_>> = fds.iter().map(|f| f.as_fd()).collect();
        if send_msg(conn.as_fd(), &reply, &borrowed).is_err() {
            return;
        }
    }
}

type Answer = std::result::Result<(Vec<u8>, Vec<OwnedFd>), (u32, Error)>;

fn answer(bytes: &[u8], pool: &Weak<PoolCore>) -> Answer {
    let (mut r, op) = Reader::new(bytes).map_err(|e| (0, e))?;
    let core = pool
        .upgrade()
        .filter(|c| !c.is_destroyed())
        .ok_or_else(|| (op, Error::InvalidValue("the exported pool was destroyed".into())))?;
    match op {
        OP_INFO => {
            let info = core.ipc_info(random_uid).map_err(|e| (op, e))?;
            let mut w = Writer::new(op);
            w.u32(0).bytes(&info.uid).u64(info.device as u64).u64(info.size).u64(info.granularity);
            Ok((w.0, Vec::new()))
        }
        OP_CHUNKS => {
            let offset = r.u64().map_err(|e| (op, e))?;
            let size = r.u64().map_err(|e| (op, e))?;
            let chunks = core.ipc_chunks(offset, size, CHUNKS_PER_REPLY).map_err(|e| (op, e))?;
            let mut w = Writer::new(op);
            w.u32(0).u32(chunks.len() as u32);
            let mut fds = Vec::with_capacity(chunks.len());
            for (off, size, id, fd) in chunks {
                w.u64(off).u64(size).u64(id);
                fds.push(fd);
            }
            Ok((w.0, fds))
        }
        other => Err((other, Error::InvalidValue(format!("unknown request {other}")))),
    }
}

// ---- the importer ------------------------------------------------------------------------

/// One chunk of the exporter mapped here.
#[derive(Debug)]
struct ImportedChunk {
    size: u64,
    /// The exporter's id of the chunk.
    id: u64,
    /// Live imported pointers that use it.
    refs: u64,
}

#[derive(Debug)]
struct ImportState {
    conn: OwnedFd,
    base: u64,
    size: u64,
    /// Mapped chunks by offset.
    chunks: BTreeMap<u64, ImportedChunk>,
    /// Live imported pointers: offset → mapped size.
    ptrs: HashMap<u64, u64>,
    access: Vec<AccessFlags>,
}

/// A pool imported from another process (or this one): it maps the
/// exporter's memory and cannot allocate.
pub(crate) struct PoolImport {
    pub(crate) id: u64,
    pub(crate) device: usize,
    pub(crate) props: PoolProps,
    uid: [u8; 16],
    rt: Runtime,
    state: Mutex<ImportState>,
    destroyed: AtomicBool,
}

impl std::fmt::Debug for PoolImport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedPool").field("id", &self.id).field("device", &self.device).finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sends a request and waits for its answer (an error answer becomes the error).
fn request(conn: BorrowedFd<'_>, msg: &[u8], op: u32) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    send_msg(conn, msg, &[])
        .map_err(|e| Error::InvalidValue(format!("the exporting process is gone: {}", e.message())))?;
    let (bytes, fds) = recv_msg(conn)?;
    if bytes.is_empty() {
        return Err(Error::InvalidValue("the exporting process closed the connection".into()));
    }
    let (mut r, got) = Reader::new(&bytes)?;
    if got != op {
        return Err(bad_peer("an answer to another request"));
    }
    if r.u32()? != 0 {
        let code = r.u32()? as i32;
        let msg = String::from_utf8_lossy(&bytes[r.pos..]).into_owned();
        return Err(Error::from_code(code, format!("the exporting process: {msg}")));
    }
    let pos = r.pos;
    Ok((bytes[pos..].to_vec(), fds))
}

impl PoolImport {
    /// Connects to the exporter through `fd` and reserves addresses for its pool.
    pub(crate) fn import(rt: &Runtime, id: u64, fd: BorrowedFd<'_>) -> Result<PoolImport> {
        let (mine, theirs) = seqpacket_pair()?;
        let mut hello = Writer::new(OP_HELLO);
        hello.u64(0);
        send_msg(fd, &hello.0, &[theirs.as_fd()]).map_err(|e| {
            Error::InvalidValue(format!(
                "the descriptor is not an exported hipmem pool, or its exporter is gone ({})",
                e.message()
            ))
        })?;
        drop(theirs);
        set_recv_timeout(mine.as_fd(), Some(REPLY_TIMEOUT))?;
        let (bytes, _) = request(mine.as_fd(), &Writer::new(OP_INFO).0, OP_INFO)?;
        let mut r = Reader { buf: &bytes, pos: 0 };
        let uid: [u8; 16] = r.take(16)?.try_into().expect("16 bytes");
        let device = r.u64()? as usize;
        let size = r.u64()?;
        let granularity = r.u64()?;
        rt.check_device(device)
            .map_err(|e| Error::InvalidValue(format!("the exported pool's device: {}", e.message())))?;
        let base = rt.address_reserve(size, granularity, DevicePtr::NULL, 0)?;
        let mut access = vec![AccessFlags::None; rt.device_count()];
        access[device] = AccessFlags::ReadWrite;
        Ok(PoolImport {
            id,
            device,
            props: PoolProps { device, handle_types: handle_type::POSIX_FILE_DESCRIPTOR, max_size: 0 },
            uid,
            rt: rt.clone(),
            state: Mutex::new(ImportState {
                conn: mine,
                base: base.0,
                size,
                chunks: BTreeMap::new(),
                ptrs: HashMap::new(),
                access,
            }),
            destroyed: AtomicBool::new(false),
        })
    }

    pub(crate) fn is_destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    pub(crate) fn destroy(&self) {
        self.destroyed.store(true, Ordering::Release);
    }

    /// `hipMemPoolImportPointer`: maps what the pointer needs and returns it.
    pub(crate) fn import_pointer(&self, data: &PtrExportData) -> Result<(DevicePtr, u64)> {
        if self.is_destroyed() {
            return Err(Error::InvalidValue("the imported pool was destroyed".into()));
        }
        let info = decode_ptr(data)?;
        if info.uid != self.uid {
            return Err(Error::InvalidValue("the pointer export data belongs to another pool".into()));
        }
        let mut st = lock(&self.state);
        if info.offset.checked_add(info.size).is_none_or(|e| e > st.size) {
            return Err(Error::InvalidValue("the pointer export data lies outside the pool".into()));
        }
        if st.ptrs.contains_key(&info.offset) {
            return Err(Error::InvalidValue(format!(
                "the pointer at offset {:#x} of the pool is imported already (free it first)",
                info.offset
            )));
        }
        let (start, end) = (info.offset, info.offset + info.size);
        let mut added: Vec<u64> = Vec::new();
        let result = self.map_range(&mut st, start, end, &mut added);
        if let Err(e) = result {
            for off in added {
                self.unmap_chunk(&mut st, off);
            }
            return Err(e);
        }
        for (_, c) in st.chunks.range_mut(..end).rev().take_while(|(o, c)| **o + c.size > start) {
            c.refs += 1;
        }
        st.ptrs.insert(info.offset, info.size);
        Ok((DevicePtr(st.base + info.offset), info.len))
    }

    /// Asks the exporter for the chunks of `[start, end)`, maps the missing
    /// ones (their offsets go to `added`) and checks the range is covered.
    fn map_range(&self, st: &mut ImportState, start: u64, end: u64, added: &mut Vec<u64>) -> Result<()> {
        let mut at = start;
        while at < end {
            let mut req = Writer::new(OP_CHUNKS);
            req.u64(at).u64(end - at);
            let (bytes, fds) = request(st.conn.as_fd(), &req.0, OP_CHUNKS)?;
            let mut r = Reader { buf: &bytes, pos: 0 };
            let n = r.u32()? as usize;
            if n != fds.len() || n > CHUNKS_PER_REPLY {
                return Err(bad_peer("descriptors and chunks do not match"));
            }
            if n == 0 {
                break;
            }
            let mut last_end = at;
            for fd in fds {
                let (off, size, id) = (r.u64()?, r.u64()?, r.u64()?);
                if size == 0 || off.checked_add(size).is_none_or(|e| e > st.size) {
                    return Err(bad_peer("a chunk outside the reservation"));
                }
                last_end = off + size;
                match st.chunks.range(..off + size).next_back() {
                    Some((&o, c)) if o == off && c.size == size && c.id == id => continue,
                    Some((&o, c)) if o + c.size > off => {
                        return Err(Error::InvalidValue(format!(
                            "the exporter replaced memory at offset {o:#x} that this process still imports"
                        )));
                    }
                    _ => {}
                }
                self.map_chunk(st, off, size, fd.as_fd())?;
                st.chunks.insert(off, ImportedChunk { size, id, refs: 0 });
                added.push(off);
            }
            if last_end <= at {
                break;
            }
            at = last_end;
        }
        // Covered without a gap?
        let mut at = start;
        for (&o, c) in st.chunks.range(..end) {
            if o + c.size <= at {
                continue;
            }
            if o > at {
                break;
            }
            at = o + c.size;
        }
        if at < end {
            return Err(Error::InvalidValue(
                "the pointer export data names memory the exporter does not have (freed?)".into(),
            ));
        }
        Ok(())
    }

    fn map_chunk(&self, st: &ImportState, off: u64, size: u64, fd: BorrowedFd<'_>) -> Result<()> {
        let handle = self.rt.import_shareable_handle(fd, handle_type::POSIX_FILE_DESCRIPTOR)?;
        let at = DevicePtr(st.base + off);
        let mapped = self.rt.mem_map(at, size, 0, handle, 0);
        // The mapping keeps the memory alive; the handle goes at once.
        let _ = self.rt.mem_release(handle);
        mapped?;
        let descs: Vec<AccessDesc> = st
            .access
            .iter()
            .enumerate()
            .filter(|(_, f)| **f != AccessFlags::None)
            .map(|(d, f)| AccessDesc::device(d, *f))
            .collect();
        if let Err(e) = self.rt.mem_set_access(at, size, &descs) {
            let _ = self.rt.mem_unmap(at, size);
            return Err(e);
        }
        Ok(())
    }

    fn unmap_chunk(&self, st: &mut ImportState, off: u64) {
        if let Some(c) = st.chunks.remove(&off) {
            if let Err(e) = self.rt.mem_unmap(DevicePtr(st.base + off), c.size) {
                tracing::warn!(target: "hipmem", "unmapping an imported chunk failed: {e}");
            }
        }
    }

    /// Whether `ptr` lies in this pool's reservation.
    pub(crate) fn contains(&self, ptr: DevicePtr) -> bool {
        let st = lock(&self.state);
        ptr.0 >= st.base && ptr.0 < st.base + st.size
    }

    /// Frees an imported pointer: unmaps here what no other imported pointer
    /// uses (never the exporter's memory). Work queued on the device first completes.
    pub(crate) fn free_pointer(&self, ptr: DevicePtr) -> Result<()> {
        let mut st = lock(&self.state);
        let off = ptr.0.wrapping_sub(st.base);
        let Some(size) = st.ptrs.remove(&off).filter(|_| ptr.0 >= st.base) else {
            return Err(Error::InvalidValue(format!("{ptr} is not a live pointer imported into this pool")));
        };
        let (start, end) = (off, off + size);
        let mut unmap = Vec::new();
        for (&o, c) in st.chunks.range_mut(..end).rev().take_while(|(o, c)| **o + c.size > start) {
            c.refs -= 1;
            if c.refs == 0 {
                unmap.push(o);
            }
        }
        if !unmap.is_empty() {
            self.rt.device_synchronize(self.device)?;
        }
        for o in unmap {
            self.unmap_chunk(&mut st, o);
        }
        Ok(())
    }

    /// `hipMemPoolSetAccess` in the importer: applies to every chunk mapped now and later.
    pub(crate) fn set_access(&self, device: usize, flags: AccessFlags) -> Result<()> {
        if device == self.device && flags != AccessFlags::ReadWrite {
            return Err(Error::InvalidValue(format!(
                "the pool's own device {device} always has read-write access"
            )));
        }
        let mut st = lock(&self.state);
        *st.access
            .get_mut(device)
            .ok_or_else(|| Error::InvalidDevice(format!("device {device} does not exist")))? = flags;
        for (&o, c) in &st.chunks {
            self.rt.mem_set_access(DevicePtr(st.base + o), c.size, &[AccessDesc::device(device, flags)])?;
        }
        Ok(())
    }

    pub(crate) fn access(&self, device: usize) -> Result<AccessFlags> {
        lock(&self.state)
            .access
            .get(device)
            .copied()
            .ok_or_else(|| Error::InvalidDevice(format!("device {device} does not exist")))
    }

    /// Bytes of the exporter's memory mapped here.
    pub(crate) fn mapped_bytes(&self) -> u64 {
        lock(&self.state).chunks.values().map(|c| c.size).sum()
    }

    /// Bytes of live imported pointers.
    pub(crate) fn imported_bytes(&self) -> u64 {
        lock(&self.state).ptrs.values().sum()
    }
}

impl Drop for PoolImport {
    fn drop(&mut self) {
        let st = self.state.get_mut().unwrap_or_else(|p| p.into_inner());
        if !st.chunks.is_empty() {
            let _ = self.rt.device_synchronize(self.device);
        }
        for (&o, c) in &st.chunks {
            if let Err(e) = self.rt.mem_unmap(DevicePtr(st.base + o), c.size) {
                tracing::debug!(target: "hipmem", "unmapping an imported chunk at teardown: {e}");
            }
        }
        st.chunks.clear();
        if let Err(e) = self.rt.address_free(DevicePtr(st.base), st.size) {
            tracing::debug!(target: "hipmem", "freeing an imported pool's reservation: {e}");
        }
    }
}

impl ImportedPool for PoolImport {
    fn id(&self) -> u64 {
        self.id
    }
    fn device(&self) -> usize {
        self.device
    }
    fn props(&self) -> PoolProps {
        self.props
    }
    fn is_destroyed(&self) -> bool {
        PoolImport::is_destroyed(self)
    }
    fn destroy(&self) {
        PoolImport::destroy(self)
    }
    fn contains(&self, ptr: DevicePtr) -> bool {
        PoolImport::contains(self, ptr)
    }
    fn import_pointer(&self, data: &PtrExportData) -> Result<(DevicePtr, u64)> {
        PoolImport::import_pointer(self, data)
    }
    fn free_pointer(&self, ptr: DevicePtr) -> Result<()> {
        PoolImport::free_pointer(self, ptr)
    }
    fn mapped_bytes(&self) -> u64 {
        PoolImport::mapped_bytes(self)
    }
    fn imported_bytes(&self) -> u64 {
        PoolImport::imported_bytes(self)
    }
    fn set_access(&self, device: usize, flags: AccessFlags) -> Result<()> {
        PoolImport::set_access(self, device, flags)
    }
    fn access(&self, device: usize) -> Result<AccessFlags> {
        PoolImport::access(self, device)
    }
}
