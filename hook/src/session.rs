//! Attachment to the daemon: one connection per process, opened on first CUDA use.
//!
//! The environment is read once here (`GPUSHARE_SOCKET`, `GPUSHARE_CLIENT`,
//! `GPUSHARE_NO_DAEMON`), never on the hot path. Only one thread talks to the daemon at a time
//! (the session lock); replies come in request order.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering::*};

use proto::protocol::{
    Reply, Request, DEFAULT_SOCKET_DIR, NO_CAP, PROTOCOL_VERSION, SCHED_INTERACTIVE, SOCKET_NAME,
};

use crate::cuda::{CUresult, CUDA_ERROR_NOT_PERMITTED};
use crate::daemon_link::Link;
use crate::fork_safe::ForkSafe;
use crate::guard::say;

/// Where this process stands with the daemon.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Attach {
    /// Attached: launches are gated and memory is counted.
    Managed,
    /// No daemon (or it went away): everything passes through.
    Unmanaged,
    /// The daemon refused this process, or policy says not to run without one.
    Refused,
}

const NOT_TRIED: u8 = 0;
const MANAGED: u8 = 1;
const UNMANAGED: u8 = 2;
const REFUSED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(NOT_TRIED);
static CAP: AtomicU64 = AtomicU64::new(NO_CAP);
static LINK_FD: AtomicI32 = AtomicI32::new(-1);
static SESSION: ForkSafe<Option<Link>> = ForkSafe::new(None);
static ATFORK: AtomicBool = AtomicBool::new(false);

/// Where this process stands, without attaching; `None` before the first CUDA call.
pub fn state_if_tried() -> Option<Attach> {
    match STATE.load(Acquire) {
        NOT_TRIED => None,
        s => Some(state_of(s)),
    }
}

/// Attaches on first use; afterwards one atomic load.
pub fn attach() -> Attach {
    match STATE.load(Acquire) {
        MANAGED => Attach::Managed,
        UNMANAGED => Attach::Unmanaged,
        REFUSED => Attach::Refused,
        _ => attach_slow(),
    }
}

fn state_of(s: u8) -> Attach {
    match s {
        MANAGED => Attach::Managed,
        REFUSED => Attach::Refused,
        _ => Attach::Unmanaged,
    }
}

#[cold]
fn attach_slow() -> Attach {
    let mut session = SESSION.lock();
    let s = STATE.load(Acquire);
    if s != NOT_TRIED {
        return state_of(s);
    }
    register_atfork();
    crate::lease::watch_exit();
    let socket = std::env::var_os("GPUSHARE_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET_DIR).join(SOCKET_NAME));
    let client = std::env::var("GPUSHARE_CLIENT").unwrap_or_default();
    let policy = std::env::var("GPUSHARE_NO_DAEMON").unwrap_or_default();
    let refuse = policy == "refuse";
    if !matches!(policy.as_str(), "" | "passthrough" | "refuse") {
        say(format_args!(
            "GPUSHARE_NO_DAEMON={policy:?} is neither passthrough nor refuse; using passthrough"
        ));
    }

    let mut link = match Link::connect(&socket) {
        Ok(l) => l,
        Err(e) => {
            return settle(if refuse {
                say(format_args!(
                    "no daemon at {} ({e}); GPUSHARE_NO_DAEMON=refuse, so CUDA is not initialised",
                    socket.display()
                ));
                REFUSED
            } else {
                say(format_args!(
                    "no daemon at {} ({e}); running unmanaged",
                    socket.display()
                ));
                UNMANAGED
            });
        }
    };
    match link.call(&Request::Hello {
        version: PROTOCOL_VERSION,
        client: client.clone(),
    }) {
        Ok(Reply::Welcome {
            memory_cap,
            mps_pipe_dir,
            mps_thread_percentage,
            mps_pinned_mem_limit,
            mps_client_priority,
            memory_flags,
            resident,
            session: session_id,
            queue_ahead_ns,
            sched_flags,
            ..
        }) => {
            set_env_default("CUDA_MPS_PIPE_DIRECTORY", &mps_pipe_dir);
            if mps_thread_percentage != 0 {
                set_env_default(
                    "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                    &mps_thread_percentage.to_string(),
                );
            }
            if mps_pinned_mem_limit != 0 {
                // The driver takes a per-device list; "0=" is device 0 in its enumeration.
                set_env_default(
                    "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
                    &format!("0={}M", mps_pinned_mem_limit.div_ceil(1 << 20)),
                );
            }
            if mps_client_priority != 0 {
                set_env_default("CUDA_MPS_CLIENT_PRIORITY", &mps_client_priority.to_string());
            }
            crate::residency::configure(memory_flags, resident);
            crate::lease::configure(queue_ahead_ns, sched_flags & SCHED_INTERACTIVE != 0);
            crate::revocation::watch(&socket, session_id);
            crate::clock::choose(&std::env::var("GPUSHARE_CLOCK").unwrap_or_default());
            CAP.store(memory_cap, Release);
            LINK_FD.store(link.fd(), Release);
            *session = Some(link);
            settle(MANAGED)
        }
        Ok(Reply::Error { code, message }) => {
            let who = if client.is_empty() {
                "the default client"
            } else {
                client.as_str()
            };
            say(format_args!(
                "the daemon refused to attach this process as {who}: {message} ({code:?})"
            ));
            settle(REFUSED)
        }
        Ok(other) => {
            say(format_args!(
                "unexpected answer from the daemon: {other:?}; running unmanaged"
            ));
            settle(UNMANAGED)
        }
        Err(e) => {
            say(format_args!(
                "lost the daemon at {} ({e}); running unmanaged",
                socket.display()
            ));
            settle(if refuse { REFUSED } else { UNMANAGED })
        }
    }
}

fn settle(state: u8) -> Attach {
    STATE.store(state, Release);
    if state != MANAGED {
        crate::lease::ungate();
    }
    state_of(state)
}

fn set_env_default(key: &str, value: &str) {
    if !value.is_empty() && std::env::var_os(key).is_none() {
        std::env::set_var(key, value);
    }
}

/// After a lost connection: forget it and run unmanaged from now on.
fn lose(session: &mut Option<Link>, e: std::io::Error) {
    if session.take().is_some() {
        LINK_FD.store(-1, Release);
        say(format_args!(
            "lost the daemon ({e}); running unmanaged from now on"
        ));
    }
    CAP.store(NO_CAP, Release);
    settle(UNMANAGED);
}

/// Runs one exchange with the daemon, or returns `None` when unmanaged.
fn with_link<T>(f: impl FnOnce(&mut Link) -> std::io::Result<T>) -> Option<T> {
    if attach() != Attach::Managed || crate::lease::exiting() {
        return None;
    }
    let mut session = SESSION.lock();
    let link = session.as_mut()?;
    match f(link) {
        Ok(v) => Some(v),
        Err(e) => {
            lose(&mut session, e);
            None
        }
    }
}

fn unexpected(r: Reply) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("unexpected reply {r:?}"),
    )
}

/// Blocks until the daemon grants the token; the lease length, or `None` when unmanaged.
pub fn acquire() -> Option<u64> {
    with_link(|l| match l.call_untimed(&Request::Acquire)? {
        Reply::Grant { lease_ns, flags } => Ok(granted(lease_ns, flags)),
        r => Err(unexpected(r)),
    })
}

/// A grant of `lease_ns` with `flags` arrived: tells the pacer whether the lease is shared.
fn granted(lease_ns: u64, flags: u32) -> u64 {
    crate::pacing::set_shared(flags & proto::protocol::GRANT_SHARED != 0);
    lease_ns
}

/// Gives the token back with the time its work kept the GPU busy and waits in line for the next
/// lease, in one request, so the daemon weighs this process among the waiting ones; the lease
/// length, or `None` when unmanaged.
pub fn renew(busy_ns: u64) -> Option<u64> {
    with_link(|l| match l.call_untimed(&Request::Renew { busy_ns })? {
        Reply::Grant { lease_ns, flags } => Ok(granted(lease_ns, flags)),
        r => Err(unexpected(r)),
    })
}

/// Asks to keep the token for another lease without draining first; the lease length when
/// nobody else waits, `None` otherwise (or when unmanaged).
pub fn extend() -> Option<u64> {
    with_link(|l| match l.call(&Request::Extend)? {
        Reply::Grant { lease_ns, flags } => Ok(Some(granted(lease_ns, flags))),
        Reply::NotExtended => Ok(None),
        r => Err(unexpected(r)),
    })
    .flatten()
}

/// Gives the token back with the time its work kept the GPU busy.
pub fn release(busy_ns: u64) {
    with_link(|l| l.send(&Request::Release { busy_ns }));
}

/// The answer to a reservation.
#[derive(Debug, PartialEq, Eq)]
pub enum Reservation {
    Counted,
    OverCap,
    Unmanaged,
}

/// Counts `bytes` (> 0) against the cap before allocating them.
pub fn reserve(bytes: u64) -> Reservation {
    debug_assert!(bytes > 0, "Reserve{{0}} is a query");
    with_link(|l| match l.call(&Request::Reserve { bytes })? {
        Reply::Reserved { .. } => Ok(Reservation::Counted),
        Reply::OverCap { cap, .. } => {
            // The cap may have been changed (over D-Bus) since the Welcome.
            CAP.store(cap, Release);
            Ok(Reservation::OverCap)
        }
        r => Err(unexpected(r)),
    })
    .unwrap_or(Reservation::Unmanaged)
}

pub fn unreserve(bytes: u64) {
    if bytes > 0 {
        with_link(|l| l.send(&Request::Unreserve { bytes }));
    }
}

/// The client's memory cap, [`NO_CAP`] when unmanaged or uncapped.
pub fn cap() -> u64 {
    if attach() == Attach::Managed {
        CAP.load(Acquire)
    } else {
        NO_CAP
    }
}

/// The client's memory in use (all its processes), as the daemon counts it.
pub fn used() -> Option<u64> {
    with_link(|l| match l.call(&Request::Reserve { bytes: 0 })? {
        Reply::Reserved { used } => Ok(used),
        Reply::OverCap { used, cap } => {
            CAP.store(cap, Release);
            Ok(used)
        }
        r => Err(unexpected(r)),
    })
}

/// `cuInit`: attach first (the MPS variables must be set before the driver starts).
pub unsafe fn cu_init(real: unsafe extern "C" fn(u32) -> CUresult, flags: u32) -> CUresult {
    if attach() == Attach::Refused {
        return CUDA_ERROR_NOT_PERMITTED;
    }
    real(flags)
}

fn register_atfork() {
    if !ATFORK.swap(true, AcqRel) {
        // SAFETY: registers a plain function.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_in_child)) };
    }
}

/// A fork child starts unattached and attaches on its own first CUDA call; the parent's
/// connection is closed in it so that the daemon never sees the parent's identity twice.
unsafe extern "C" fn after_fork_in_child() {
    let fd = LINK_FD.swap(-1, AcqRel);
    if fd >= 0 {
        libc::close(fd);
    }
    // The old link (holding the closed fd) is leaked, never dropped.
    SESSION.reset(None);
    CAP.store(NO_CAP, Release);
    STATE.store(NOT_TRIED, Release);
    crate::lease::after_fork_in_child();
    crate::revocation::after_fork_in_child();
    crate::ledger::after_fork_in_child();
    crate::residency::after_fork_in_child();
}
