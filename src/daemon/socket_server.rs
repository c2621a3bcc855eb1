//! The Unix socket the hook talks to. Peers are identified by SO_PEERCRED; a connection that
//! sends anything malformed, truncated or oversized is closed, and only that one.

use super::identity::Identity;
use super::state::State;
use super::status;
use super::status::Listers;
use crate::cgroup_place::CgroupPlace;
use crate::protocol::{frame_len, DeviceId, ErrorCode, Reply, Request, PROTOCOL_VERSION};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, Notify};

/// How long a reader of the status document may take to read it.
const STATUS_TIMEOUT: Duration = Duration::from_secs(10);

/// Binds the socket (replacing a stale one) and makes it connectable by every user: the daemon
/// decides who may do what from the peer's credentials.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(listener)
}

/// The listening socket systemd passed (socket activation, `gpushare.socket`), if any: it stays
/// open across restarts of the daemon, so that processes connecting meanwhile wait in its
/// backlog instead of failing.
pub fn from_systemd() -> std::io::Result<Option<UnixListener>> {
    use std::os::fd::FromRawFd;
    use std::os::unix::net::UnixListener as StdListener;
    let mut fds = sd_notify::listen_fds()?;
    let Some(fd) = fds.next() else {
        return Ok(None);
    };
    if fds.next().is_some() {
        return Err(std::io::Error::other(
            "systemd passed more than one socket; gpushare.socket listens on one",
        ));
    }
    // SAFETY: systemd hands this fd to this process alone (LISTEN_PID), open and listening.
    let listener = unsafe { StdListener::from_raw_fd(fd) };
    listener.set_nonblocking(true)?;
    listener.local_addr().map_err(|e| {
        std::io::Error::other(format!(
            "the socket systemd passed is not a Unix socket: {e}"
        ))
    })?;
    UnixListener::from_std(listener).map(Some)
}

pub async fn serve(
    listener: UnixListener,
    state: Arc<Mutex<State>>,
    wake: Arc<Notify>,
    listers: Listers,
    hello_timeout: Duration,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let state = state.clone();
                let wake = wake.clone();
                let listers = listers.clone();
                tokio::spawn(async move {
                    if let Err(e) = handle(stream, state, wake, listers, hello_timeout).await {
                        tracing::debug!("connection closed: {e}");
                    }
                });
            }
            Err(e) => {
                // EMFILE and the like: back off instead of spinning.
                tracing::warn!("accept on the socket failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads until one whole request is in `pending` and takes it; `None` at the end of the stream.
async fn read_request(
    stream: &mut UnixStream,
    pending: &mut Vec<u8>,
) -> Result<Option<Request>, String> {
    loop {
        if let Some(request) = take_request(pending)? {
            return Ok(Some(request));
        }
        match stream.read_buf(pending).await {
            Ok(0) if pending.is_empty() => return Ok(None),
            Ok(0) => return Err("truncated message".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

async fn write_reply(stream: &mut UnixStream, reply: &Reply) -> Result<(), String> {
    let frame = reply.encode().map_err(|e| e.to_string())?;
    stream
        .write_all(frame.as_bytes())
        .await
        .map_err(|e| e.to_string())
}

async fn refuse(stream: &mut UnixStream, code: ErrorCode, message: String) -> Result<(), String> {
    let _ = write_reply(
        stream,
        &Reply::Error {
            code,
            message: message.clone(),
        },
    )
    .await;
    Err(message)
}

async fn handle(
    mut stream: UnixStream,
    state: Arc<Mutex<State>>,
    wake: Arc<Notify>,
    listers: Listers,
    hello_timeout: Duration,
) -> Result<(), String> {
    let cred = getsockopt(&stream, PeerCredentials).map_err(|e| format!("SO_PEERCRED: {e}"))?;
    let (pid, uid, gid) = (cred.pid() as u32, cred.uid(), cred.gid());
    // Read at once, while the pid is surely the peer's (a small file of procfs).
    let place = CgroupPlace::of_pid(pid);
    let mut pending: Vec<u8> = Vec::with_capacity(64);
    let hello =
        match tokio::time::timeout(hello_timeout, read_request(&mut stream, &mut pending)).await {
            Err(_) => return Err(format!("pid {pid} sent no hello in time")),
            Ok(r) => r?,
        };
    let (client, reserved) = match hello {
        None => return Ok(()),
        Some(Request::Watch { session }) => {
            return watch_loop(&mut stream, &state, session, pid, &mut pending).await;
        }
        Some(Request::Lane { session, device }) => {
            let lane = Lane {
                session,
                device,
                pid,
            };
            return lane_loop(&mut stream, &state, &wake, lane, &mut pending).await;
        }
        Some(Request::Status) => {
            // Read-only and open to all: the same as ListClients and ListDevices over D-Bus.
            let send = async {
                for reply in status::replies(&state, &listers).await? {
                    write_reply(&mut stream, &reply).await?;
                }
                Ok(())
            };
            return tokio::time::timeout(STATUS_TIMEOUT, send)
                .await
                .unwrap_or_else(|_| Err(format!("pid {pid} did not read its status in time")));
        }
        Some(Request::Usage { since_seconds, by }) => {
            // The same query as GetUsage over D-Bus: everyone's rows for root and the
            // admin_groups, the peer's own for anyone else.
            let send = async {
                for reply in status::usage_replies(&listers, uid, since_seconds, &by).await {
                    write_reply(&mut stream, &reply).await?;
                }
                Ok(())
            };
            return tokio::time::timeout(STATUS_TIMEOUT, send)
                .await
                .unwrap_or_else(|_| Err(format!("pid {pid} did not read its usage in time")));
        }
        Some(Request::Hello { version, .. }) if version != PROTOCOL_VERSION => {
            let msg = format!("protocol version {version} is not {PROTOCOL_VERSION}; update libgpushare or gpushared");
            return refuse(&mut stream, ErrorCode::VersionMismatch, msg).await;
        }
        Some(Request::Hello {
            client, reserved, ..
        }) => (client, reserved),
        Some(other) => {
            return refuse(
                &mut stream,
                ErrorCode::BadMessage,
                format!("expected Hello, got {other:?}"),
            )
            .await;
        }
    };
    let who =
        tokio::task::spawn_blocking(move || Identity::lookup(uid, Some(gid)).with_place(place))
            .await
            .map_err(|e| e.to_string())?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let attached = {
        let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
        let most = st.config.daemon.max_processes_per_user;
        if st.sessions_of_uid(uid) >= most {
            Err((
                ErrorCode::Refused,
                format!(
                    "uid {uid} already has {most} processes attached (daemon.max_processes_per_user)"
                ),
            ))
        } else {
            st.attach(&who, pid, &client, &reserved, tx)
        }
    };
    let (session, welcome) = match attached {
        Ok(ok) => ok,
        Err((code, message)) => {
            tracing::warn!(pid, uid, client = %client, "refused attach: {message}");
            return refuse(&mut stream, code, message).await;
        }
    };
    if !reserved.is_empty() {
        let devices: Vec<String> = reserved
            .iter()
            .map(|(device, bytes)| format!("{device}={bytes}"))
            .collect();
        let reserved = reserved.iter().fold(0u64, |sum, r| sum.saturating_add(r.1));
        tracing::info!(pid, uid, user = %who.user, client = %client, session, reserved, devices = devices.join(","), "process re-attached");
    } else {
        tracing::info!(pid, uid, user = %who.user, client = %client, session, "process attached");
    }
    let result = session_loop(
        &mut stream,
        &state,
        &wake,
        session,
        welcome,
        &mut rx,
        &mut pending,
    )
    .await;
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .detach(session);
    wake.notify_one();
    tracing::info!(pid, session, "process detached");
    result
}

/// Serves the watch connection of `session`: revocations go out on it until either side closes.
/// Only the process that owns the session may watch it; it sends nothing more.
async fn watch_loop(
    stream: &mut UnixStream,
    state: &Arc<Mutex<State>>,
    session: u64,
    pid: u32,
    pending: &mut Vec<u8>,
) -> Result<(), String> {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let watched = state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .watch(session, pid, tx);
    if let Err(message) = watched {
        return refuse(stream, ErrorCode::NotAllowed, message).await;
    }
    loop {
        match next_io(stream, &mut rx, pending).await? {
            // the session closed (its sender went with it), or the process did
            Io::Closed => return Ok(()),
            Io::Read => return Err("a watch connection sent a request".into()),
            Io::Sent => {}
        }
    }
}

/// Serves an attached session. `pending` holds bytes already read past the Hello.
async fn session_loop(
    stream: &mut UnixStream,
    state: &Arc<Mutex<State>>,
    wake: &Arc<Notify>,
    session: u64,
    welcome: Reply,
    rx: &mut mpsc::UnboundedReceiver<Reply>,
    pending: &mut Vec<u8>,
) -> Result<(), String> {
    write_reply(stream, &welcome).await?;
    loop {
        while let Some(request) = take_request(pending)? {
            tracing::trace!(session, ?request, "request");
            let reply = {
                let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(device) = device_of(&request) {
                    if let Err(e) = st.use_device(session, device) {
                        tracing::warn!(session, "closing the connection: {e}");
                        return Err(e);
                    }
                }
                match request {
                    Request::Hello { .. } => return Err("second Hello".into()),
                    Request::Acquire { .. }
                    | Request::Release { .. }
                    | Request::Renew { .. }
                    | Request::Extend { .. } => lease_request(&mut st, session, request),
                    Request::Watch { .. } => return Err("Watch on a session connection".into()),
                    Request::Lane { .. } => return Err("Lane on a session connection".into()),
                    Request::Status => return Err("Status on a session connection".into()),
                    Request::Usage { .. } => return Err("Usage on a session connection".into()),
                    Request::Reserve { device, bytes } => Some(st.reserve(session, device, bytes)),
                    Request::Unreserve { device, bytes } => {
                        st.unreserve(session, device, bytes);
                        None
                    }
                }
            };
            wake.notify_one();
            if let Some(reply) = reply {
                write_reply(stream, &reply).await?;
            }
        }
        if let Io::Closed = next_io(stream, rx, pending).await? {
            return Ok(());
        }
    }
}

/// Handles a request about a GPU's token (`Acquire`, `Release`, `Renew`, `Extend`) of
/// `session`; the reply to send at once, if any (a grant goes out when the scheduler decides).
fn lease_request(st: &mut State, session: u64, request: Request) -> Option<Reply> {
    match request {
        Request::Acquire { device } => {
            st.acquire(session, device);
            None
        }
        Request::Release {
            device,
            busy_ns,
            launches,
            active_ns,
        } => {
            st.launched(session, device, launches, active_ns);
            st.release(session, device, busy_ns);
            None
        }
        Request::Renew {
            device,
            busy_ns,
            launches,
            active_ns,
        } => {
            st.launched(session, device, launches, active_ns);
            st.renew(session, device, busy_ns);
            None
        }
        Request::Extend {
            device,
            launches,
            active_ns,
        } => {
            st.launched(session, device, launches, active_ns);
            Some(st.extend(session, device))
        }
        _ => None,
    }
}

/// A lane: the connection of `session`'s process (`pid`, from the peer credentials) for the
/// token of `device`.
struct Lane {
    session: u64,
    device: DeviceId,
    pid: u32,
}

/// Serves a lane ([`Request::Lane`]): the requests about the token of its GPU, and the grants
/// of that GPU's token, until either side closes; then the session gives that token back.
/// Only the process that owns the session may open one; a request about another GPU, or not
/// about a token, closes it.
async fn lane_loop(
    stream: &mut UnixStream,
    state: &Arc<Mutex<State>>,
    wake: &Arc<Notify>,
    lane: Lane,
    pending: &mut Vec<u8>,
) -> Result<(), String> {
    let Lane {
        session,
        device,
        pid,
    } = lane;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let opened = state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .open_lane(session, pid, device, tx);
    if let Err(message) = opened {
        return refuse(stream, ErrorCode::NotAllowed, message).await;
    }
    let served = async {
        loop {
            while let Some(request) = take_request(pending)? {
                tracing::trace!(session, %device, ?request, "lane request");
                if device_of(&request) != Some(device)
                    || matches!(request, Request::Reserve { .. } | Request::Unreserve { .. })
                {
                    return Err(format!("{request:?} on the lane of {device}"));
                }
                let reply = {
                    let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
                    lease_request(&mut st, session, request)
                };
                wake.notify_one();
                if let Some(reply) = reply {
                    write_reply(stream, &reply).await?;
                }
            }
            if let Io::Closed = next_io(stream, &mut rx, pending).await? {
                return Ok(());
            }
        }
    };
    let result = served.await;
    state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .close_lane(session, device);
    wake.notify_one();
    result
}

/// The GPU a request is about, for those about leases and memory.
fn device_of(request: &Request) -> Option<DeviceId> {
    match *request {
        Request::Acquire { device }
        | Request::Release { device, .. }
        | Request::Renew { device, .. }
        | Request::Extend { device, .. }
        | Request::Reserve { device, .. }
        | Request::Unreserve { device, .. } => Some(device),
        Request::Hello { .. }
        | Request::Watch { .. }
        | Request::Lane { .. }
        | Request::Status
        | Request::Usage { .. } => None,
    }
}

/// What a connection's next event was.
enum Io {
    /// A reply from the daemon's side went out.
    Sent,
    /// Bytes from the peer were added to `pending`.
    Read,
    /// The peer closed the connection, or the daemon's side dropped the sender.
    Closed,
}

/// Sends the next reply from `rx` or reads what the peer sent, whichever comes first.
/// `read_buf` is cancel-safe: a reply leaving in the other branch never loses part of a request.
async fn next_io(
    stream: &mut UnixStream,
    rx: &mut mpsc::UnboundedReceiver<Reply>,
    pending: &mut Vec<u8>,
) -> Result<Io, String> {
    tokio::select! {
        reply = rx.recv() => {
            let Some(reply) = reply else { return Ok(Io::Closed) };
            write_reply(stream, &reply).await?;
            Ok(Io::Sent)
        }
        read = stream.read_buf(pending) => match read {
            Ok(0) => Ok(Io::Closed),
            Ok(_) => Ok(Io::Read),
            Err(e) => Err(e.to_string()),
        },
    }
}

/// Takes one complete request off the front of `pending`, if there is one.
fn take_request(pending: &mut Vec<u8>) -> Result<Option<Request>, String> {
    let Some(header) = pending.get(..4) else {
        return Ok(None);
    };
    let n = frame_len(header.try_into().unwrap_or_default()).map_err(|e| e.to_string())?;
    if pending.len() < 4 + n {
        return Ok(None);
    }
    let request = Request::decode(&pending[4..4 + n]).map_err(|e| e.to_string())?;
    pending.drain(..4 + n);
    Ok(Some(request))
}

/// Ends leases on time: sleeps until the scheduler's next wake-up or until poked.
pub async fn run_scheduler_clock(state: Arc<Mutex<State>>, wake: Arc<Notify>) {
    loop {
        let next = {
            let mut st = state.lock().unwrap_or_else(|p| p.into_inner());
            st.dispatch().map(|t| st.instant_at(t))
        };
        match next {
            Some(at) => {
                tokio::select! {
                    _ = tokio::time::sleep_until(at.into()) => {}
                    _ = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}
