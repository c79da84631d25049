//! Interprocess transport: hand pools, pointers and physical memory to another
//! process over a Unix domain socket, without hand-written descriptor passing.
//!
//! - [`IpcListener::bind`] creates the socket file owner-only (mode 0600,
//!   checked before the socket listens, so no peer can connect before that)
//!   and [`IpcListener::accept`] checks each peer's credentials
//!   (`SO_PEERCRED`): the same user by default, or a [`PeerPolicy`].
//! - [`IpcStream::connect`] connects and checks the listener's credentials
//!   the same way.
//! - An [`IpcStream`] sends and receives messages with file descriptors
//!   (`SCM_RIGHTS`): raw ones ([`IpcStream::send`], [`IpcStream::recv`]) and
//!   typed ones: a pool ([`IpcStream::send_pool`] / [`IpcStream::recv_pool`]),
//!   a pointer's export data ([`IpcStream::send_pointer`] /
//!   [`IpcStream::recv_pointer`]), a physical allocation
//!   ([`IpcStream::send_physical`] / [`IpcStream::recv_physical`]) and small
//!   values for synchronization ([`IpcStream::send_value`] / [`IpcStream::recv_value`]).
//!
//! The sockets are `SOCK_SEQPACKET`: every message arrives whole, with its
//! descriptors. All of it is safe Rust (rustix).
//!
//! The same transport carries hipmem's own pools between processes
//! (`pool_share.rs`: the exporter's serving thread and the importer, which
//! maps the exporter's chunks) and gives the pool API its sharing methods
//! (`mem_pool.rs`). The `ipc` subsystem sits on the pools and virtual
//! memory; neither of them knows it.
#![forbid(unsafe_code)]

mod mem_pool;
pub(crate) mod pool_share;

pub use mem_pool::ImportedBuffer;

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};

use crate::error::{Error, Result};
use crate::pool::{MemPool, PtrExportData, handle_type};
use crate::runtime::Runtime;
use crate::vmm::PhysicalAllocation;

/// Largest message payload.
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Most descriptors in one message.
pub const MAX_FDS: usize = 64;

fn io_err(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Unknown(format!("{what}: {e}"))
}

/// A connected pair of `SOCK_SEQPACKET` sockets.
pub(crate) fn seqpacket_pair() -> Result<(OwnedFd, OwnedFd)> {
    rustix::net::socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
        .map_err(|e| io_err("socketpair", e))
}

/// Sends one message with `fds` attached.
pub(crate) fn send_msg(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    if bytes.is_empty() || bytes.len() > MAX_MESSAGE || fds.len() > MAX_FDS {
        return Err(Error::InvalidValue(format!(
            "an IPC message has 1 to {MAX_MESSAGE} bytes and at most {MAX_FDS} descriptors ({} bytes, {} descriptors)",
            bytes.len(),
            fds.len()
        )));
    }
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(fds.len().max(1)))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(Error::Unknown("the descriptors do not fit the control buffer".into()));
    }
    let sent = rustix::net::sendmsg(sock, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL)
        .map_err(|e| io_err("sending an IPC message", e))?;
    if sent != bytes.len() {
        return Err(Error::Unknown(format!("sent {sent} of {} bytes", bytes.len())));
    }
    Ok(())
}

/// Receives one message and its descriptors; an empty message means the
/// peer closed the connection.
pub(crate) fn recv_msg(sock: BorrowedFd<'_>) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut buf = vec![0u8; MAX_MESSAGE];
    let mut space = vec![MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let got = loop {
        match rustix::net::recvmsg(
            sock,
            &mut [IoSliceMut::new(&mut buf)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Ok(r) => break r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                return Err(Error::NotReady("no IPC message arrived in time".into()));
            }
            Err(e) => return Err(io_err("receiving an IPC message", e)),
        }
    };
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(rights) = msg {
            fds.extend(rights);
        }
    }
    if got.flags.contains(rustix::net::ReturnFlags::TRUNC)
        || got.flags.contains(rustix::net::ReturnFlags::CTRUNC)
    {
        return Err(Error::InvalidValue("an IPC message was truncated".into()));
    }
    buf.truncate(got.bytes);
    Ok((buf, fds))
}

/// Sets how long a receive on `sock` may wait (None: forever).
pub(crate) fn set_recv_timeout(sock: BorrowedFd<'_>, timeout: Option<Duration>) -> Result<()> {
    rustix::net::sockopt::set_socket_timeout(sock, rustix::net::sockopt::Timeout::Recv, timeout)
        .map_err(|e| io_err("setting a receive timeout", e))
}

/// Who is at the other end of a connection (`SO_PEERCRED`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PeerCredentials {
    /// Process id.
    pub pid: i32,
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Which peers a connection accepts: the same user by default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerPolicy {
    uids: Vec<u32>,
}

impl Default for PeerPolicy {
    fn default() -> Self {
        PeerPolicy::same_user()
    }
}

impl PeerPolicy {
    /// Only this process's effective user.
    pub fn same_user() -> PeerPolicy {
        PeerPolicy { uids: vec![rustix::process::geteuid().as_raw()] }
    }

    /// Exactly these users (the process's own user is not implied).
    pub fn allow_uids(uids: impl IntoIterator<Item = u32>) -> PeerPolicy {
        PeerPolicy { uids: uids.into_iter().collect() }
    }

    /// Whether `uid` is allowed.
    pub fn allows(&self, uid: u32) -> bool {
        self.uids.contains(&uid)
    }

    fn check(&self, sock: BorrowedFd<'_>) -> Result<PeerCredentials> {
        let cred = rustix::net::sockopt::socket_peercred(sock).map_err(|e| io_err("SO_PEERCRED", e))?;
        let peer = PeerCredentials {
            pid: cred.pid.as_raw_nonzero().get(),
            uid: cred.uid.as_raw(),
            gid: cred.gid.as_raw(),
        };
        if !self.allows(peer.uid) {
            return Err(Error::InvalidValue(format!(
                "IPC peer (pid {}, uid {}) is not an allowed user (allowed: {:?})",
                peer.pid, peer.uid, self.uids
            )));
        }
        Ok(peer)
    }
}

/// A listening Unix domain socket, owner-only (0600); the socket file is
/// removed when the listener is dropped.
#[derive(Debug)]
pub struct IpcListener {
    fd: OwnedFd,
    path: PathBuf,
    policy: PeerPolicy,
}

impl IpcListener {
    /// Creates the socket at `path` (which must not exist), makes it 0600,
    /// checks its mode and owner, then listens.
    pub fn bind(path: impl AsRef<Path>) -> Result<IpcListener> {
        let path = path.as_ref().to_path_buf();
        let addr = SocketAddrUnix::new(path.as_path()).map_err(|e| {
            Error::InvalidValue(format!("{} is not a usable socket path: {e}", path.display()))
        })?;
        let fd =
            rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
                .map_err(|e| io_err("socket", e))?;
        rustix::net::bind(&fd, &addr).map_err(|e| io_err(&format!("binding {}", path.display()), e))?;
        let listener = IpcListener { fd, path, policy: PeerPolicy::default() };
        // Nobody can connect before `listen`: the mode is right before anyone can.
        rustix::fs::chmod(listener.path.as_path(), rustix::fs::Mode::from_raw_mode(0o600))
            .map_err(|e| io_err("chmod 0600 of the socket", e))?;
        let st = rustix::fs::stat(listener.path.as_path()).map_err(|e| io_err("stat of the socket", e))?;
        if st.st_mode & 0o777 != 0o600 || st.st_uid != rustix::process::geteuid().as_raw() {
            return Err(Error::InvalidValue(format!(
                "the socket {} is not owner-only (mode {:o}, owner {})",
                listener.path.display(),
                st.st_mode & 0o777,
                st.st_uid
            )));
        }
        rustix::net::listen(&listener.fd, 16).map_err(|e| io_err("listen", e))?;
        Ok(listener)
    }

    /// Accepts peers of these users instead (the default: the same user).
    pub fn with_policy(mut self, policy: PeerPolicy) -> IpcListener {
        self.policy = policy;
        self
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for a peer; a peer the policy does not allow is disconnected
    /// and reported as InvalidValue.
    pub fn accept(&self) -> Result<IpcStream> {
        let fd = loop {
            match rustix::net::accept_with(&self.fd, SocketFlags::CLOEXEC) {
                Ok(fd) => break fd,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(io_err("accept", e)),
            }
        };
        let peer = self.policy.check(fd.as_fd())?;
        Ok(IpcStream { fd, peer })
    }
}

impl Drop for IpcListener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// One connection between two processes.
#[derive(Debug)]
pub struct IpcStream {
    fd: OwnedFd,
    peer: PeerCredentials,
}

const TAG_POOL: &[u8; 4] = b"POOL";
const TAG_PTR: &[u8; 4] = b"PTR\0";
const TAG_PHYS: &[u8; 4] = b"PHYS";
const TAG_VALUE: &[u8; 4] = b"VALU";

impl IpcStream {
    /// Connects to the listener at `path`, which must run as the same user.
    pub fn connect(path: impl AsRef<Path>) -> Result<IpcStream> {
        IpcStream::connect_with_policy(path, &PeerPolicy::default())
    }

    /// Connects to the listener at `path`, whose user `policy` must allow.
    pub fn connect_with_policy(path: impl AsRef<Path>, policy: &PeerPolicy) -> Result<IpcStream> {
        let path = path.as_ref();
        let addr = SocketAddrUnix::new(path).map_err(|e| {
            Error::InvalidValue(format!("{} is not a usable socket path: {e}", path.display()))
        })?;
        let fd =
            rustix::net::socket_with(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)
                .map_err(|e| io_err("socket", e))?;
        rustix::net::connect(&fd, &addr)
            .map_err(|e| io_err(&format!("connecting to {}", path.display()), e))?;
        let peer = policy.check(fd.as_fd())?;
        Ok(IpcStream { fd, peer })
    }

    /// The peer's credentials, as checked when the connection was made.
    pub fn peer(&self) -> PeerCredentials {
        self.peer
    }

    /// How long a receive may wait (None: forever); a receive that times out
    /// is NotReady.
    pub fn set_recv_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        set_recv_timeout(self.fd.as_fd(), timeout)
    }

    /// Sends `bytes` (1 to [`MAX_MESSAGE`]) with up to [`MAX_FDS`] descriptors.
    pub fn send(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
        send_msg(self.fd.as_fd(), bytes, fds)
    }

    /// Receives one message and its descriptors; a closed connection is an error.
    pub fn recv(&self) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
        let (bytes, fds) = recv_msg(self.fd.as_fd())?;
        if bytes.is_empty() {
            return Err(Error::Unknown("the IPC peer closed the connection".into()));
        }
        Ok((bytes, fds))
    }

    fn recv_tagged(&self, tag: &[u8; 4], what: &str) -> Result<(Vec<u8>, Vec<OwnedFd>)> {
        let (bytes, fds) = self.recv()?;
        if bytes.len() < 4 || &bytes[..4] != tag {
            return Err(Error::InvalidValue(format!(
                "expected {what}, received another kind of IPC message"
            )));
        }
        Ok((bytes[4..].to_vec(), fds))
    }

    /// Exports `pool` (`hipMemPoolExportToShareableHandle`) and sends its descriptor.
    pub fn send_pool(&self, pool: &MemPool) -> Result<()> {
        let fd = pool.export_shareable_handle(handle_type::POSIX_FILE_DESCRIPTOR, 0)?;
        self.send_pool_handle(fd.as_fd())
    }

    /// Sends a descriptor made by [`MemPool::export_shareable_handle`] (the
    /// caller keeps it); the peer receives it with [`IpcStream::recv_pool`].
    pub fn send_pool_handle(&self, fd: BorrowedFd<'_>) -> Result<()> {
        self.send(TAG_POOL, &[fd])
    }

    /// Receives a pool sent by [`IpcStream::send_pool`] and imports it
    /// (`hipMemPoolImportFromShareableHandle`).
    pub fn recv_pool(&self, rt: &Runtime) -> Result<MemPool> {
        let (_, fds) = self.recv_tagged(TAG_POOL, "a pool")?;
        let fd = fds
            .into_iter()
            .next()
            .ok_or_else(|| Error::InvalidValue("a pool message without a descriptor".into()))?;
        MemPool::import_shareable_handle(rt, fd.as_fd(), handle_type::POSIX_FILE_DESCRIPTOR, 0)
    }

    /// Sends a pointer's export data (`hipMemPoolPtrExportData`).
    pub fn send_pointer(&self, data: &PtrExportData) -> Result<()> {
        let mut msg = TAG_PTR.to_vec();
        msg.extend_from_slice(&data.reserved);
        self.send(&msg, &[])
    }

    /// Receives a pointer's export data.
    pub fn recv_pointer(&self) -> Result<PtrExportData> {
        let (bytes, _) = self.recv_tagged(TAG_PTR, "pointer export data")?;
        let reserved: [u8; 64] = bytes.as_slice().try_into().map_err(|_| {
            Error::InvalidValue(format!("pointer export data has 64 bytes, not {}", bytes.len()))
        })?;
        Ok(PtrExportData { reserved })
    }

    /// Exports a physical allocation (`hipMemExportToShareableHandle`) and sends it.
    pub fn send_physical(&self, alloc: &PhysicalAllocation) -> Result<()> {
        let fd = alloc.export_fd()?;
        self.send(TAG_PHYS, &[fd.as_fd()])
    }

    /// Receives a physical allocation sent by [`IpcStream::send_physical`]
    /// and imports it (`hipMemImportFromShareableHandle`).
    pub fn recv_physical(&self, rt: &Runtime) -> Result<PhysicalAllocation> {
        let (_, fds) = self.recv_tagged(TAG_PHYS, "a physical allocation")?;
        let fd = fds.into_iter().next().ok_or_else(|| {
            Error::InvalidValue("a physical-allocation message without a descriptor".into())
        })?;
        PhysicalAllocation::import_fd(rt, fd.as_fd())
    }

    /// Sends a small value (for synchronization between the processes).
    pub fn send_value(&self, value: u64) -> Result<()> {
        let mut msg = TAG_VALUE.to_vec();
        msg.extend_from_slice(&value.to_le_bytes());
        self.send(&msg, &[])
    }

    /// Receives a value sent by [`IpcStream::send_value`].
    pub fn recv_value(&self) -> Result<u64> {
        let (bytes, _) = self.recv_tagged(TAG_VALUE, "a value")?;
        let b: [u8; 8] =
            bytes.as_slice().try_into().map_err(|_| Error::InvalidValue("a malformed value".into()))?;
        Ok(u64::from_le_bytes(b))
    }
}

impl AsFd for IpcStream {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
