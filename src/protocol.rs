//! The wire protocol between the hook (`libgpushare.so`, inside each CUDA process) and
//! `gpushared`, over the Unix socket `gpushare.sock`.
//!
//! One definition, used by both sides. It depends on `std` alone so that the hook stays small.
//!
//! Every message is a frame: a little-endian `u32` payload length (1..=[`MAX_FRAME`]) and the
//! payload, whose first byte is the message tag. Integers are little-endian; a string is a `u16`
//! byte length and UTF-8 bytes.
//!
//! The client speaks first with [`Request::Hello`] and gets [`Reply::Welcome`] or
//! [`Reply::Error`]. After that every request gets exactly one reply in order, except
//! [`Request::Release`] and [`Request::Unreserve`], which get none. The reply to
//! [`Request::Acquire`] and [`Request::Renew`] ([`Reply::Grant`]) comes when the scheduler gives
//! this process the token, which may be much later; its tag tells it apart from other replies.
//!
//! An attached process may open a second connection whose only request is [`Request::Watch`]:
//! on it the daemon sends [`Reply::Revoke`] when the process must end a lease early,
//! [`Reply::Joined`] when another process's lease started beside one of its own, and
//! [`Reply::Contended`] when another process starts waiting for a token granted while none did.
//! Each names the GPU and the lease it is about by its number: a session's leases on each GPU
//! are numbered by the [`Reply::Grant`]s it got for that GPU, from 1, so that a notice that
//! overtakes its grant, or comes after the lease ended, applies to the lease it was meant for and
//! to no other.
//!
//! A process holds the token of each GPU it uses on its own. Its requests about one GPU's token
//! go on a connection of their own (a *lane*), opened with [`Request::Lane`], so that a thread
//! waiting for one GPU's grant never holds up the requests about another: after it, the lane
//! carries `Acquire`, `Release`, `Renew` and `Extend` for that GPU alone, and their replies. The
//! daemon never trusts what a client says about who it is: identity comes from the socket's peer
//! credentials.
//!
//! Any process may open a connection whose first and only request is [`Request::Status`]: it
//! never attaches; the daemon answers with the status document (what the D-Bus methods
//! ListClients and ListDevices tell everyone, as JSON) in [`Reply::Status`] frames of at most
//! [`MAX_FRAME`] bytes each, every one but the last flagged [`STATUS_MORE`], and closes the
//! connection. [`StatusReader`] puts the document back together.
//!
//! In the same way, any process may ask for the usage kept in the daemon's state directory with
//! [`Request::Usage`] (what the D-Bus method GetUsage answers: every user's rows to root and the
//! members of `daemon.admin_groups`, the peer's own, by its uid, to anyone else): the
//! rows come as a JSON list in [`Reply::Status`] frames, or the daemon answers [`Reply::Error`]
//! with [`ErrorCode::Refused`] and its reason (no accounting, a grouping it does not know).
//! Requests that never attach need no [`PROTOCOL_VERSION`] of their own: a hook never sends
//! them, and a daemon older than one closes the connection at its unknown tag.

use std::fmt;

/// Bumped on any incompatible change of the messages below.
pub const PROTOCOL_VERSION: u32 = 10;
/// Largest payload a frame may carry.
pub const MAX_FRAME: usize = 4096;
/// Longest client name.
pub const MAX_NAME: usize = 128;
/// Default directory of the socket; `GPUSHARE_SOCKET` (a path) overrides it in clients.
pub const DEFAULT_SOCKET_DIR: &str = "/run/gpushare";
/// File name of the socket inside the socket directory.
pub const SOCKET_NAME: &str = "gpushare.sock";
/// `memory_cap` value meaning "no cap".
pub const NO_CAP: u64 = u64::MAX;
/// [`Reply::Welcome`] `memory_flags`: serve device allocations as managed memory.
pub const MEMORY_OVERSUBSCRIBE: u32 = 1;
/// [`Reply::Welcome`] `memory_flags`: release the framework's cached memory while others wait.
pub const MEMORY_RELEASE_CACHE: u32 = 2;
/// [`Reply::Welcome`] `sched_flags`: the client is interactive (its work runs at once, others
/// pause); its process gives a lease back as soon as it goes idle.
pub const SCHED_INTERACTIVE: u32 = 1;
/// [`Reply::Grant`] flag: the lease runs beside others (without MPS, processes light enough to
/// share the GPU); the process does not hold its launches back for its queue, where its work also
/// waits for theirs.
pub const GRANT_SHARED: u32 = 1;
/// [`Reply::Grant`] flag: an interactive client is active or was lately, or a client owed burst
/// credit may come back and end the lease; the batch process keeps a short queue (a quarter of
/// its queue budget, and beside others too), so that that client's next request waits little
/// behind its work.
pub const GRANT_TIGHT: u32 = 2;
/// [`Reply::Grant`] flag: other processes wait for the token. An extension (granted while the
/// process would get the next lease anyway) no longer means that nobody waits.
pub const GRANT_CONTENDED: u32 = 4;
/// How many times shorter the queue of a [`GRANT_TIGHT`] lease is than `daemon.queue_ahead`.
pub const TIGHT_QUEUE_DIVISOR: u64 = 4;

/// How much GPU time (ns) a process may keep queued with `left_ns` of its lease left, `budget`
/// being `daemon.queue_ahead`: on a lease of its own (granted without [`GRANT_SHARED`] or
/// [`GRANT_TIGHT`]) whatever is done by the lease's end plus `budget`, so that early in a lease
/// the queue may hold the rest of it; beside others (`shared`) `budget`; on a tight lease, alone
/// or not, a [`TIGHT_QUEUE_DIVISOR`]th of it (at least 1 ns). The hook holds its launches to it;
/// the simulation's processes keep the same queues.
pub fn queue_budget(budget: u64, tight: bool, shared: bool, left_ns: u64) -> u64 {
    if tight {
        (budget / TIGHT_QUEUE_DIVISOR).max(1)
    } else if shared {
        budget
    } else {
        budget.saturating_add(left_ns)
    }
}

/// [`Reply::Status`] flag: more of the document follows in the next frame.
pub const STATUS_MORE: u32 = 1;
/// Most bytes of the status document one [`Reply::Status`] frame carries.
pub const STATUS_CHUNK: usize = MAX_FRAME - 7;
/// Longest status document a reader accepts (the daemon's document for hundreds of clients is a
/// few hundred KiB).
pub const MAX_STATUS: usize = 16 << 20;

/// Most GPUs a [`Request::Hello`] lists memory for.
pub const MAX_DEVICES: usize = 64;

/// A GPU, named by its 16-byte UUID: what `cuDeviceGetUuid` gives the hook and NVML gives the
/// daemon, the same whatever `CUDA_VISIBLE_DEVICES` makes of the device's ordinal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct DeviceId(pub [u8; 16]);

impl DeviceId {
    /// Reads NVML's text form, `GPU-` and 32 hex digits in groups of 8-4-4-4-12 (a `MIG-`
    /// prefix, or none, also do).
    pub fn parse(text: &str) -> Option<DeviceId> {
        let hex = text
            .strip_prefix("GPU-")
            .or_else(|| text.strip_prefix("MIG-"))
            .unwrap_or(text);
        let digits: Vec<u8> = hex.bytes().filter(|&b| b != b'-').collect();
        if digits.len() != 32 {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, pair) in digits.chunks(2).enumerate() {
            let pair = std::str::from_utf8(pair).ok()?;
            out[i] = u8::from_str_radix(pair, 16).ok()?;
        }
        Some(DeviceId(out))
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("GPU-")?;
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// What a client process asks of the daemon.
///
/// Leases and memory are per GPU: the requests about them name the `device`, and each GPU has a
/// token and memory accounts of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// First message. `client` names the client entry to attach as; empty means "the default
    /// entry for my user". `reserved` is empty for a process that attaches for the first time;
    /// a process that re-attaches after the daemon restarted sends the device memory its own
    /// record holds on each GPU, which the daemon counts against its client at once, even over
    /// the cap. Only `version` is read from a Hello of another version.
    Hello {
        version: u32,
        client: String,
        reserved: Vec<(DeviceId, u64)>,
    },
    /// Ask for the token of `device`. Answered by [`Reply::Grant`] when it is this process's
    /// turn.
    Acquire { device: DeviceId },
    /// Give the token of `device` back. `busy_ns` is the time the hook saw work of this lease
    /// pending on the GPU; the daemon uses it (clamped to the lease's wall time) to estimate how
    /// much of the GPU the client needs, never to charge it. `launches` is the number of kernels
    /// the process launched since its last `Release`, `Renew` or `Extend`: its progress, by which
    /// the scheduler chooses whether leases run together or take turns. `active_ns` is the time
    /// since that report in which the process was in its GPU phases: work pending, or launching
    /// (gaps of under 200 us between launches); the daemon counts USED by it. No reply.
    Release {
        device: DeviceId,
        busy_ns: u64,
        launches: u64,
        active_ns: u64,
    },
    /// Count `bytes` of memory on `device` against the client's cap there before allocating
    /// them. Answered by [`Reply::Reserved`] or [`Reply::OverCap`].
    Reserve { device: DeviceId, bytes: u64 },
    /// Memory on `device` counted by an earlier `Reserve` was freed (or its allocation failed).
    /// No reply.
    Unreserve { device: DeviceId, bytes: u64 },
    /// Give the token of `device` back (with `busy_ns`, `launches` and `active_ns` as in `Release`) and ask for it again,
    /// in one step, so that the scheduler weighs this process among the waiting ones when it
    /// hands the token on. Answered by [`Reply::Grant`].
    Renew {
        device: DeviceId,
        busy_ns: u64,
        launches: u64,
        active_ns: u64,
    },
    /// At the end of a lease on `device`, keep the token for another lease without first
    /// waiting for the work queued in this one, if the client would get the next lease anyway
    /// (no waiting process goes before it). Answered by [`Reply::Grant`] or
    /// [`Reply::NotExtended`] (then the client drains its work and sends `Renew`). `launches` and
    /// `active_ns` as in `Release`.
    Extend {
        device: DeviceId,
        launches: u64,
        active_ns: u64,
    },
    /// First request on a connection of an attached process for the token of `device`, its
    /// lane: afterwards it carries [`Request::Acquire`], [`Request::Release`],
    /// [`Request::Renew`] and [`Request::Extend`] about `device` alone, and their replies, for as
    /// long as the session lasts. `session` is the id from the Welcome; the peer must be the same
    /// process. No reply. Closing the lane gives the token of `device` back.
    Lane { session: u64, device: DeviceId },
    /// First and only request on a second connection of an attached process: the daemon sends
    /// [`Reply::Revoke`] and [`Reply::Joined`] on it. `session` is the id
    /// from the Welcome; the peer must be the same process.
    Watch { session: u64 },
    /// First and only request on a connection that reads the daemon's status, open to every
    /// user: answered by [`Reply::Status`] frames, after which the daemon closes the connection.
    Status,
    /// First and only request on a connection that reads the usage kept in the state directory,
    /// as GetUsage over D-Bus: over the last `since_seconds` (0: all of it, counted by whole
    /// hours), grouped `by` "user", "client" or "day"; every user's for root and the members of
    /// `daemon.admin_groups`, the peer's own (by its uid) for anyone else. Answered by
    /// [`Reply::Status`] frames
    /// carrying the rows as JSON, or by [`Reply::Error`]; then the daemon closes the connection.
    Usage { since_seconds: u64, by: String },
}

/// What the daemon answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// The process is attached as `client`.
    Welcome {
        client: String,
        /// Device memory cap of the client in bytes, [`NO_CAP`] for none.
        memory_cap: u64,
        /// Length of a full lease; the hook uses it to size its bookkeeping.
        quantum_ns: u64,
        /// `CUDA_MPS_PIPE_DIRECTORY` to use, empty when MPS is not in use.
        mps_pipe_dir: String,
        /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE` for this client, 0 for unset.
        mps_thread_percentage: u32,
        /// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` in bytes for this client, 0 for unset.
        mps_pinned_mem_limit: u64,
        /// `CUDA_MPS_CLIENT_PRIORITY` for this client, 0 for normal (unset).
        mps_client_priority: u32,
        /// [`MEMORY_OVERSUBSCRIBE`] and [`MEMORY_RELEASE_CACHE`].
        memory_flags: u32,
        /// Bytes of managed memory to move onto the GPU at a grant, [`NO_CAP`] for all.
        resident: u64,
        /// This process's session id, for [`Request::Watch`].
        session: u64,
        /// How much work (in GPU nanoseconds) the process may keep queued on the GPU.
        queue_ahead_ns: u64,
        /// [`SCHED_INTERACTIVE`].
        sched_flags: u32,
    },
    /// The token (of the device last asked for) is this process's for `lease_ns` nanoseconds from
    /// now; `flags`: [`GRANT_SHARED`], [`GRANT_TIGHT`], [`GRANT_CONTENDED`]. The session's nth
    /// grant for a device (an extension's too) starts its lease number n there.
    Grant { lease_ns: u64, flags: u32 },
    /// The reservation was counted; `used` is the client's total on the device afterwards.
    Reserved { used: u64 },
    /// The reservation would pass the cap; nothing was counted.
    OverCap { used: u64, cap: u64 },
    /// Another process goes first: the lease was not extended.
    NotExtended,
    /// On the watch connection: end lease number `lease` on `device` at the next launch (an
    /// interactive client wants the GPU, or a process its probe).
    Revoke { lease: u64, device: DeviceId },
    /// On the watch connection: another process's lease started beside lease number `lease` on
    /// `device`
    /// (without MPS): from then on it is shared, as if granted with [`GRANT_SHARED`]. `at_ns`:
    /// when the daemon granted the other lease, in `CLOCK_MONOTONIC` nanoseconds (the host's
    /// clock, which the hook reads too): work of this process that completed before then ran
    /// alone.
    Joined {
        lease: u64,
        at_ns: u64,
        device: DeviceId,
    },
    /// On the watch connection: another process now waits for the token of `device` that lease
    /// number `lease` holds, granted while none did: from then on it is as if granted with
    /// [`GRANT_CONTENDED`] (a process that leaves the GPU idle gives it back soon).
    Contended { lease: u64, device: DeviceId },
    /// The request was refused; the daemon closes the connection after this for codes other than
    /// [`ErrorCode::Refused`].
    Error { code: ErrorCode, message: String },
    /// A piece of the status document, or of the usage rows (UTF-8 JSON, cut anywhere);
    /// `flags`: [`STATUS_MORE`] on every piece but the last.
    Status { flags: u32, data: Vec<u8> },
}

/// Why the daemon refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The peer's uid and groups may not attach as the client it named.
    NotAllowed,
    /// No such client.
    UnknownClient,
    /// The message could not be decoded or came out of order.
    BadMessage,
    /// The client speaks another protocol version.
    VersionMismatch,
    /// A request that was understood but cannot be served now.
    Refused,
    /// A code this build does not know.
    Other(u32),
}

impl ErrorCode {
    pub fn to_u32(self) -> u32 {
        match self {
            ErrorCode::NotAllowed => 1,
            ErrorCode::UnknownClient => 2,
            ErrorCode::BadMessage => 3,
            ErrorCode::VersionMismatch => 4,
            ErrorCode::Refused => 5,
            ErrorCode::Other(n) => n,
        }
    }
    pub fn from_u32(n: u32) -> Self {
        match n {
            1 => ErrorCode::NotAllowed,
            2 => ErrorCode::UnknownClient,
            3 => ErrorCode::BadMessage,
            4 => ErrorCode::VersionMismatch,
            5 => ErrorCode::Refused,
            n => ErrorCode::Other(n),
        }
    }
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    Empty,
    UnknownTag(u8),
    Truncated,
    TrailingBytes,
    BadUtf8,
    TooLong,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Empty => write!(f, "empty message"),
            DecodeError::UnknownTag(t) => write!(f, "unknown message tag {t}"),
            DecodeError::Truncated => write!(f, "message is truncated"),
            DecodeError::TrailingBytes => write!(f, "message has trailing bytes"),
            DecodeError::BadUtf8 => write!(f, "string is not UTF-8"),
            DecodeError::TooLong => write!(f, "message is longer than {MAX_FRAME} bytes"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Checks a frame header and returns the payload length it announces.
pub fn frame_len(header: [u8; 4]) -> Result<usize, DecodeError> {
    let n = u32::from_le_bytes(header) as usize;
    if n == 0 {
        Err(DecodeError::Empty)
    } else if n > MAX_FRAME {
        Err(DecodeError::TooLong)
    } else {
        Ok(n)
    }
}

/// One encoded frame (header and payload) in a fixed buffer, built without touching the heap.
pub struct Frame {
    buf: [u8; MAX_FRAME + 4],
    len: usize,
    overflow: bool,
}

impl Frame {
    fn new(tag: u8) -> Self {
        let mut w = Frame {
            buf: [0; MAX_FRAME + 4],
            len: 4,
            overflow: false,
        };
        w.put(&[tag]);
        w
    }
    fn put(&mut self, bytes: &[u8]) {
        if self.len + bytes.len() > self.buf.len() {
            self.overflow = true;
            return;
        }
        self.buf[self.len..self.len + bytes.len()].copy_from_slice(bytes);
        self.len += bytes.len();
    }
    fn u32(&mut self, v: u32) {
        self.put(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.put(&v.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        let n = b.len().min(u16::MAX as usize);
        self.put(&(n as u16).to_le_bytes());
        self.put(&b[..n]);
    }
    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    fn finish(mut self) -> Result<Frame, DecodeError> {
        if self.overflow {
            return Err(DecodeError::TooLong);
        }
        let payload = (self.len - 4) as u32;
        self.buf[..4].copy_from_slice(&payload.to_le_bytes());
        Ok(self)
    }
    /// The bytes to send: the length header and the payload.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or([0; 4]),
        ))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or([0; 8]),
        ))
    }
    fn device(&mut self) -> Result<DeviceId, DecodeError> {
        Ok(DeviceId(self.take(16)?.try_into().unwrap_or([0; 16])))
    }
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = u16::from_le_bytes(self.take(2)?.try_into().unwrap_or([0; 2])) as usize;
        self.take(n)
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| DecodeError::BadUtf8)
    }
    fn end<T>(self, v: T) -> Result<T, DecodeError> {
        if self.rest.is_empty() {
            Ok(v)
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }
}

fn split_tag(payload: &[u8]) -> Result<(u8, Reader<'_>), DecodeError> {
    match payload.split_first() {
        Some((tag, rest)) => Ok((*tag, Reader { rest })),
        None => Err(DecodeError::Empty),
    }
}

impl Request {
    /// Encodes the request as a whole frame.
    pub fn encode(&self) -> Result<Frame, DecodeError> {
        let mut f = Frame::new(match self {
            Request::Hello { .. } => 1,
            Request::Acquire { .. } => 2,
            Request::Release { .. } => 3,
            Request::Reserve { .. } => 4,
            Request::Unreserve { .. } => 5,
            Request::Renew { .. } => 6,
            Request::Extend { .. } => 7,
            Request::Watch { .. } => 8,
            Request::Status => 9,
            Request::Usage { .. } => 10,
            Request::Lane { .. } => 11,
        });
        match self {
            Request::Hello {
                version,
                client,
                reserved,
            } => {
                f.u32(*version);
                f.str(client);
                if reserved.len() > MAX_DEVICES {
                    return Err(DecodeError::TooLong);
                }
                f.put(&(reserved.len() as u16).to_le_bytes());
                for (device, bytes) in reserved {
                    f.put(&device.0);
                    f.u64(*bytes);
                }
            }
            Request::Status => {}
            Request::Usage { since_seconds, by } => {
                f.u64(*since_seconds);
                f.str(by);
            }
            Request::Acquire { device } => f.put(&device.0),
            Request::Extend {
                device,
                launches,
                active_ns,
            } => {
                f.put(&device.0);
                f.u64(*launches);
                f.u64(*active_ns);
            }
            Request::Release {
                device,
                busy_ns,
                launches,
                active_ns,
            }
            | Request::Renew {
                device,
                busy_ns,
                launches,
                active_ns,
            } => {
                f.put(&device.0);
                f.u64(*busy_ns);
                f.u64(*launches);
                f.u64(*active_ns);
            }
            Request::Reserve { device, bytes } | Request::Unreserve { device, bytes } => {
                f.put(&device.0);
                f.u64(*bytes);
            }
            Request::Watch { session } => f.u64(*session),
            Request::Lane { session, device } => {
                f.u64(*session);
                f.put(&device.0);
            }
        }
        f.finish()
    }

    /// Encodes into a fresh vector (for callers that do not mind allocating).
    pub fn to_frame(&self) -> Result<Vec<u8>, DecodeError> {
        self.encode().map(|f| f.as_bytes().to_vec())
    }

    /// Decodes a payload (the frame without its length header).
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let (tag, mut r) = split_tag(payload)?;
        let v = match tag {
            1 => {
                let version = r.u32()?;
                let client = r.str()?;
                if client.len() > MAX_NAME {
                    return Err(DecodeError::TooLong);
                }
                if version != PROTOCOL_VERSION {
                    // A client of another version: decode what it sent anyway (the rest, in
                    // its version's format, unread), so that it hears that its version does not
                    // match.
                    return Ok(Request::Hello {
                        version,
                        client,
                        reserved: Vec::new(),
                    });
                }
                let n = u16::from_le_bytes(r.take(2)?.try_into().unwrap_or([0; 2])) as usize;
                if n > MAX_DEVICES {
                    return Err(DecodeError::TooLong);
                }
                let mut reserved = Vec::with_capacity(n);
                for _ in 0..n {
                    reserved.push((r.device()?, r.u64()?));
                }
                Request::Hello {
                    version,
                    client,
                    reserved,
                }
            }
            2 => Request::Acquire {
                device: r.device()?,
            },
            3 => Request::Release {
                device: r.device()?,
                busy_ns: r.u64()?,
                launches: r.u64()?,
                active_ns: r.u64()?,
            },
            4 => Request::Reserve {
                device: r.device()?,
                bytes: r.u64()?,
            },
            5 => Request::Unreserve {
                device: r.device()?,
                bytes: r.u64()?,
            },
            6 => Request::Renew {
                device: r.device()?,
                busy_ns: r.u64()?,
                launches: r.u64()?,
                active_ns: r.u64()?,
            },
            7 => Request::Extend {
                device: r.device()?,
                launches: r.u64()?,
                active_ns: r.u64()?,
            },
            8 => Request::Watch { session: r.u64()? },
            9 => Request::Status,
            10 => Request::Usage {
                since_seconds: r.u64()?,
                by: r.str()?,
            },
            11 => Request::Lane {
                session: r.u64()?,
                device: r.device()?,
            },
            t => return Err(DecodeError::UnknownTag(t)),
        };
        r.end(v)
    }
}

impl Reply {
    /// Encodes the reply as a whole frame.
    pub fn encode(&self) -> Result<Frame, DecodeError> {
        let mut f = Frame::new(match self {
            Reply::Welcome { .. } => 1,
            Reply::Grant { .. } => 2,
            Reply::Reserved { .. } => 3,
            Reply::OverCap { .. } => 4,
            Reply::Error { .. } => 5,
            Reply::NotExtended => 6,
            Reply::Revoke { .. } => 7,
            Reply::Status { .. } => 8,
            Reply::Joined { .. } => 9,
            Reply::Contended { .. } => 10,
        });
        match self {
            Reply::Welcome {
                client,
                memory_cap,
                quantum_ns,
                mps_pipe_dir,
                mps_thread_percentage,
                mps_pinned_mem_limit,
                mps_client_priority,
                memory_flags,
                resident,
                session,
                queue_ahead_ns,
                sched_flags,
            } => {
                f.str(client);
                f.u64(*memory_cap);
                f.u64(*quantum_ns);
                f.str(mps_pipe_dir);
                f.u32(*mps_thread_percentage);
                f.u64(*mps_pinned_mem_limit);
                f.u32(*mps_client_priority);
                f.u32(*memory_flags);
                f.u64(*resident);
                f.u64(*session);
                f.u64(*queue_ahead_ns);
                f.u32(*sched_flags);
            }
            Reply::Grant { lease_ns, flags } => {
                f.u64(*lease_ns);
                f.u32(*flags);
            }
            Reply::Reserved { used } => f.u64(*used),
            Reply::OverCap { used, cap } => {
                f.u64(*used);
                f.u64(*cap);
            }
            Reply::Error { code, message } => {
                f.u32(code.to_u32());
                f.str(message);
            }
            Reply::Revoke { lease, device } | Reply::Contended { lease, device } => {
                f.u64(*lease);
                f.put(&device.0);
            }
            Reply::Joined {
                lease,
                at_ns,
                device,
            } => {
                f.u64(*lease);
                f.u64(*at_ns);
                f.put(&device.0);
            }
            Reply::NotExtended => {}
            Reply::Status { flags, data } => {
                f.u32(*flags);
                f.bytes(data);
            }
        }
        f.finish()
    }

    /// Encodes into a fresh vector (for callers that do not mind allocating).
    pub fn to_frame(&self) -> Result<Vec<u8>, DecodeError> {
        self.encode().map(|f| f.as_bytes().to_vec())
    }

    /// Decodes a payload (the frame without its length header).
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let (tag, mut r) = split_tag(payload)?;
        let v = match tag {
            1 => Reply::Welcome {
                client: r.str()?,
                memory_cap: r.u64()?,
                quantum_ns: r.u64()?,
                mps_pipe_dir: r.str()?,
                mps_thread_percentage: r.u32()?,
                mps_pinned_mem_limit: r.u64()?,
                mps_client_priority: r.u32()?,
                memory_flags: r.u32()?,
                resident: r.u64()?,
                session: r.u64()?,
                queue_ahead_ns: r.u64()?,
                sched_flags: r.u32()?,
            },
            2 => Reply::Grant {
                lease_ns: r.u64()?,
                flags: r.u32()?,
            },
            3 => Reply::Reserved { used: r.u64()? },
            4 => Reply::OverCap {
                used: r.u64()?,
                cap: r.u64()?,
            },
            5 => Reply::Error {
                code: ErrorCode::from_u32(r.u32()?),
                message: r.str()?,
            },
            6 => Reply::NotExtended,
            7 => Reply::Revoke {
                lease: r.u64()?,
                device: r.device()?,
            },
            8 => Reply::Status {
                flags: r.u32()?,
                data: r.bytes()?.to_vec(),
            },
            9 => Reply::Joined {
                lease: r.u64()?,
                at_ns: r.u64()?,
                device: r.device()?,
            },
            10 => Reply::Contended {
                lease: r.u64()?,
                device: r.device()?,
            },
            t => return Err(DecodeError::UnknownTag(t)),
        };
        r.end(v)
    }
}

/// Cuts a status document into the replies that carry it, each within [`MAX_FRAME`].
pub fn status_replies(doc: &[u8]) -> Vec<Reply> {
    let mut chunks: Vec<&[u8]> = doc.chunks(STATUS_CHUNK).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let last = chunks.len() - 1;
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, data)| Reply::Status {
            flags: if i < last { STATUS_MORE } else { 0 },
            data: data.to_vec(),
        })
        .collect()
}

/// Puts the status document back together from the daemon's [`Reply::Status`] frames.
#[derive(Debug, Default)]
pub struct StatusReader {
    doc: Vec<u8>,
}

impl StatusReader {
    /// Takes the next reply. Returns the whole document after its last piece, `None` while more
    /// is to come, and an error for a refusal, an unexpected reply or a document longer than
    /// [`MAX_STATUS`].
    pub fn push(&mut self, reply: Reply) -> Result<Option<Vec<u8>>, String> {
        match reply {
            Reply::Status { flags, data } => {
                if self.doc.len() + data.len() > MAX_STATUS {
                    return Err(format!(
                        "the status document is longer than {MAX_STATUS} bytes"
                    ));
                }
                self.doc.extend_from_slice(&data);
                if flags & STATUS_MORE != 0 {
                    Ok(None)
                } else {
                    Ok(Some(std::mem::take(&mut self.doc)))
                }
            }
            Reply::Error { message, .. } => Err(message),
            other => Err(format!("unexpected answer to a status request: {other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(frame: &[u8]) -> &[u8] {
        let n = frame_len(frame[..4].try_into().unwrap()).unwrap();
        assert_eq!(n, frame.len() - 4);
        &frame[4..]
    }

    const GPU0: DeviceId = DeviceId([7; 16]);
    const GPU1: DeviceId = DeviceId([0xaa, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);

    #[test]
    fn requests_round_trip() {
        for r in [
            Request::Hello {
                version: PROTOCOL_VERSION,
                client: "train".into(),
                reserved: vec![],
            },
            Request::Hello {
                version: 7,
                client: String::new(),
                reserved: vec![],
            },
            Request::Acquire { device: GPU0 },
            Request::Release {
                device: GPU1,
                busy_ns: 123_456_789,
                launches: 4_321,
                active_ns: 0,
            },
            Request::Reserve {
                device: GPU0,
                bytes: 8 << 30,
            },
            Request::Unreserve {
                device: GPU1,
                bytes: u64::MAX,
            },
            Request::Renew {
                device: GPU0,
                busy_ns: 20_000_000,
                launches: 0,
                active_ns: 0,
            },
            Request::Extend {
                device: GPU1,
                launches: u64::MAX,
                active_ns: 0,
            },
            Request::Watch { session: 77 },
            Request::Lane {
                session: 78,
                device: GPU1,
            },
            Request::Status,
            Request::Usage {
                since_seconds: 7 * 86400,
                by: "client".into(),
            },
            Request::Usage {
                since_seconds: 0,
                by: String::new(),
            },
        ] {
            let f = r.to_frame().unwrap();
            assert_eq!(Request::decode(payload(&f)).unwrap(), r);
        }
    }

    #[test]
    fn devices_read_and_write_nvml_uuids() {
        let text = "GPU-aa000000-0000-0000-0000-000000000001";
        assert_eq!(GPU1.to_string(), text);
        assert_eq!(DeviceId::parse(text), Some(GPU1));
        assert_eq!(
            DeviceId::parse("aa000000000000000000000000000001"),
            Some(GPU1)
        );
        assert_eq!(DeviceId::parse("GPU-aa00"), None);
        assert_eq!(
            DeviceId::parse("GPU-zz000000-0000-0000-0000-000000000001"),
            None
        );
    }

    #[test]
    fn replies_round_trip() {
        for r in [
            Reply::Welcome {
                client: "alice".into(),
                memory_cap: NO_CAP,
                quantum_ns: 20_000_000,
                mps_pipe_dir: "/run/gpushare/mps".into(),
                mps_thread_percentage: 30,
                mps_pinned_mem_limit: 4 << 30,
                mps_client_priority: 1,
                memory_flags: MEMORY_OVERSUBSCRIBE | MEMORY_RELEASE_CACHE,
                resident: 2 << 30,
                session: 9,
                queue_ahead_ns: 2_000_000,
                sched_flags: SCHED_INTERACTIVE,
            },
            Reply::Grant {
                lease_ns: 5,
                flags: GRANT_SHARED,
            },
            Reply::NotExtended,
            Reply::Revoke {
                lease: 7,
                device: GPU1,
            },
            Reply::Contended {
                lease: 9,
                device: GPU0,
            },
            Reply::Joined {
                lease: 8,
                at_ns: 123_456_789,
                device: GPU0,
            },
            Reply::Reserved { used: 1 },
            Reply::OverCap { used: 2, cap: 3 },
            Reply::Error {
                code: ErrorCode::NotAllowed,
                message: "no".into(),
            },
            Reply::Error {
                code: ErrorCode::Other(99),
                message: String::new(),
            },
            Reply::Status {
                flags: STATUS_MORE,
                data: b"{\"clients\": [".to_vec(),
            },
            Reply::Status {
                flags: 0,
                data: vec![],
            },
        ] {
            let f = r.to_frame().unwrap();
            assert_eq!(Reply::decode(payload(&f)).unwrap(), r);
        }
    }

    #[test]
    fn malformed_payloads_are_rejected() {
        assert_eq!(Request::decode(&[]), Err(DecodeError::Empty));
        assert_eq!(Request::decode(&[0]), Err(DecodeError::UnknownTag(0)));
        assert_eq!(Request::decode(&[3, 1, 2]), Err(DecodeError::Truncated));
        assert_eq!(Request::decode(&[2, 0]), Err(DecodeError::Truncated));
        assert_eq!(Request::decode(&[2; 18]), Err(DecodeError::TrailingBytes));
        assert_eq!(
            Request::decode(&[1, 1, 0, 0, 0, 2, 0, 0xff, 0xfe]),
            Err(DecodeError::BadUtf8)
        );
        let long = "x".repeat(MAX_NAME + 1);
        let f = Request::Hello {
            version: 1,
            client: long,
            reserved: vec![],
        }
        .to_frame()
        .unwrap();
        assert_eq!(Request::decode(&f[4..]), Err(DecodeError::TooLong));
        assert_eq!(frame_len(0u32.to_le_bytes()), Err(DecodeError::Empty));
        assert_eq!(
            frame_len(((MAX_FRAME + 1) as u32).to_le_bytes()),
            Err(DecodeError::TooLong)
        );
    }

    #[test]
    fn a_hello_carries_the_memory_of_a_re_attaching_process() {
        let r = Request::Hello {
            version: PROTOCOL_VERSION,
            client: "train".into(),
            reserved: vec![(GPU0, 3 << 30), (GPU1, 1)],
        };
        let f = r.to_frame().unwrap();
        assert_eq!(Request::decode(payload(&f)).unwrap(), r);
        // An older client's Hello (its memory one number) decodes, so that the daemon can tell
        // it that its version does not match.
        let mut old = vec![1];
        old.extend_from_slice(&4u32.to_le_bytes());
        old.extend_from_slice(&[5, 0]);
        old.extend_from_slice(b"train");
        old.extend_from_slice(&(3u64 << 30).to_le_bytes());
        assert_eq!(
            Request::decode(&old).unwrap(),
            Request::Hello {
                version: 4,
                client: "train".into(),
                reserved: vec![],
            }
        );
        let too_many = Request::Hello {
            version: PROTOCOL_VERSION,
            client: String::new(),
            reserved: vec![(GPU0, 1); MAX_DEVICES + 1],
        };
        assert_eq!(too_many.to_frame(), Err(DecodeError::TooLong));
    }

    #[test]
    fn oversized_messages_do_not_encode() {
        let big = "x".repeat(MAX_FRAME);
        let r = Reply::Error {
            code: ErrorCode::Refused,
            message: big,
        };
        assert_eq!(r.to_frame(), Err(DecodeError::TooLong));
    }

    #[test]
    fn every_prefix_of_a_frame_fails_cleanly() {
        let f = Reply::Welcome {
            client: "c".into(),
            memory_cap: 1,
            quantum_ns: 2,
            mps_pipe_dir: "/p".into(),
            mps_thread_percentage: 3,
            mps_pinned_mem_limit: 4,
            mps_client_priority: 1,
            memory_flags: 2,
            resident: 5,
            session: 6,
            queue_ahead_ns: 7,
            sched_flags: 1,
        }
        .to_frame()
        .unwrap();
        for cut in 0..f.len() - 4 {
            assert!(
                Reply::decode(&f[4..4 + cut]).is_err(),
                "prefix {cut} decoded"
            );
        }
    }

    #[test]
    fn a_long_status_document_travels_in_frames_within_the_limit() {
        // multi-byte characters cut at frame borders come back whole
        let doc = "{\"clients\": [\"é€😀\"]}".repeat(1000);
        let replies = status_replies(doc.as_bytes());
        assert!(replies.len() > 1);
        let mut reader = StatusReader::default();
        let mut out = None;
        for (i, r) in replies.into_iter().enumerate() {
            let f = r.to_frame().unwrap();
            assert!(f.len() - 4 <= MAX_FRAME);
            let back = Reply::decode(payload(&f)).unwrap();
            assert!(out.is_none(), "a piece after the last one");
            out = reader.push(back).unwrap();
            assert!(i < 1000);
        }
        assert_eq!(out.unwrap(), doc.as_bytes());
        let empty = status_replies(b"");
        assert_eq!(empty.len(), 1);
        assert_eq!(
            StatusReader::default().push(empty[0].clone()).unwrap(),
            Some(vec![])
        );
    }

    #[test]
    fn a_status_reader_refuses_errors_other_replies_and_endless_documents() {
        let mut r = StatusReader::default();
        let e = r
            .push(Reply::Error {
                code: ErrorCode::Refused,
                message: "busy".into(),
            })
            .unwrap_err();
        assert_eq!(e, "busy");
        assert!(StatusReader::default()
            .push(Reply::Revoke {
                lease: 1,
                device: DeviceId::default(),
            })
            .is_err());
        let mut r = StatusReader::default();
        let piece = Reply::Status {
            flags: STATUS_MORE,
            data: vec![b' '; STATUS_CHUNK],
        };
        let mut refused = false;
        for _ in 0..MAX_STATUS / STATUS_CHUNK + 2 {
            if r.push(piece.clone()).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused, "a document without end is refused");
    }
}
