//! Attachment to the daemon: one session per process, opened on first CUDA use. Requests about
//! a GPU's token go on the lane's own connection to the session ([`Request::Lane`]), opened on
//! its first request, so that a thread that waits for one GPU's grant holds up no other GPU.
//!
//! The environment is read once here (`GPUSHARE_SOCKET`, `GPUSHARE_CLIENT`,
//! `GPUSHARE_NO_DAEMON`, `GPUSHARE_REATTACH`), never on the hot path, and not at all in a
//! set-user-ID program ([`crate::env`]). Only one thread talks to
//! the daemon at a time (the session lock); replies come in request order.
//!
//! When the daemon goes away (a restart, an upgrade), the process is *away*: its launches pass
//! ungated and its allocations are checked against the cap by its own record alone, while a
//! thread of its own re-attaches to the new daemon in the background (every 250 ms at most,
//! for `GPUSHARE_REATTACH` seconds, 600 by default), sending the memory its record holds, which
//! the new daemon counts again. No launch or allocation ever waits for that.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicU8, Ordering::*};
use std::sync::{MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use proto::protocol::{
    DeviceId, Reply, Request, DEFAULT_SOCKET_DIR, NO_CAP, PROTOCOL_VERSION, SCHED_INTERACTIVE,
    SOCKET_NAME,
};

use crate::cuda::{CUresult, CUDA_ERROR_NOT_PERMITTED};
use crate::daemon_link::Link;
use crate::fork_safe::ForkSafe;
use crate::guard::say;
use crate::lanes::{Lane, PerLane, MAX};
use crate::lease::{self, Lease, GATE};
use crate::ledger::LEDGER;

/// Where this process stands with the daemon.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Attach {
    /// Attached: launches are gated and memory is counted.
    Managed,
    /// No daemon (or it went away for good): everything passes through.
    Unmanaged,
    /// The daemon went away; launches pass through while the process re-attaches.
    Away,
    /// The daemon refused this process, or policy says not to run without one.
    Refused,
}

const NOT_TRIED: u8 = 0;
const MANAGED: u8 = 1;
const UNMANAGED: u8 = 2;
const REFUSED: u8 = 3;
const AWAY: u8 = 4;

static STATE: AtomicU8 = AtomicU8::new(NOT_TRIED);
static CAP: AtomicU64 = AtomicU64::new(NO_CAP);
static LINK_FD: AtomicI32 = AtomicI32::new(-1);
/// This process's session id with the daemon (for its watch connection).
static SESSION_ID: AtomicU64 = AtomicU64::new(0);
/// This process's attachments to a daemon, counted: what its lanes belong to. A daemon that
/// restarted numbers sessions from 1 again, so a session id alone does not tell a lane of the
/// daemon before from one of the new daemon: taken for the new session's, an old lane failed at
/// its next use and lost the new session (a process re-attached three times over two restarts).
static ATTACHMENT: AtomicU64 = AtomicU64::new(0);
static SESSION: ForkSafe<Option<Link>> = ForkSafe::new(None);
/// Each lane's connection: the attachment it belongs to ([`ATTACHMENT`]), the GPU it is for, and
/// the link.
static LANE_LINKS: PerLane<ForkSafe<Option<(u64, DeviceId, Link)>>> =
    PerLane([const { ForkSafe::new(None) }; MAX]);
/// The lanes' connections' descriptors (-1: none), for a fork child to close.
static LANE_FDS: PerLane<AtomicI32> = PerLane([const { AtomicI32::new(-1) }; MAX]);
static ATFORK: AtomicBool = AtomicBool::new(false);
/// Where the daemon is and which client this process attached as (from the first attach).
static TARGET: OnceLock<(PathBuf, String)> = OnceLock::new();
/// How long to keep trying to re-attach after the daemon went away (0: never).
static REATTACH_FOR_S: AtomicU64 = AtomicU64::new(600);
/// The re-attaching thread runs.
static REATTACHING: AtomicBool = AtomicBool::new(false);
/// Held by allocations and frees made while away, and by the re-attach while it hands the
/// record over, so that no allocation falls between the record sent and the state changed.
static AWAY_BOOKS: ForkSafe<()> = ForkSafe::new(());
/// The longest pause between two tries to re-attach.
const REATTACH_PAUSE: Duration = Duration::from_millis(250);

/// Whether `exe` is one of NVIDIA's MPS programs (`nvidia-cuda-mps-control`,
/// `nvidia-cuda-mps-server`), which run the work of gated processes and must not wait for a
/// token themselves.
fn mps_service(exe: &std::path::Path) -> bool {
    exe.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("nvidia-cuda-mps-"))
}

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
        AWAY => Attach::Away,
        _ => attach_slow(),
    }
}

fn state_of(s: u8) -> Attach {
    match s {
        MANAGED => Attach::Managed,
        REFUSED => Attach::Refused,
        AWAY => Attach::Away,
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
    if std::fs::read_link("/proc/self/exe").is_ok_and(|exe| mps_service(&exe)) {
        // Preloaded everywhere (/etc/ld.so.preload), the hook is loaded into NVIDIA's MPS
        // control daemon and server too: they serve the clients' work and are never gated.
        return settle(UNMANAGED);
    }
    register_atfork();
    crate::stats::configure();
    crate::pacing::gpu_time::configure();
    crate::lease::watch_exit();
    let socket = crate::env::var_os("GPUSHARE_SOCKET")
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET_DIR).join(SOCKET_NAME));
    let client = crate::env::var("GPUSHARE_CLIENT").unwrap_or_default();
    let policy = crate::env::var("GPUSHARE_NO_DAEMON").unwrap_or_default();
    if let Some(v) = crate::env::var("GPUSHARE_REATTACH") {
        match v.trim().parse::<u64>() {
            Ok(s) => REATTACH_FOR_S.store(s, Relaxed),
            Err(_) => say(format_args!(
                "GPUSHARE_REATTACH={v:?} is not a number of seconds; using {}",
                REATTACH_FOR_S.load(Relaxed)
            )),
        }
    }
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
        reserved: Vec::new(),
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
            crate::pacing::set_under_mps(!mps_pipe_dir.is_empty());
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
            lease::configure(queue_ahead_ns, sched_flags & SCHED_INTERACTIVE != 0);
            crate::clock::choose(&crate::env::var("GPUSHARE_CLOCK").unwrap_or_default());
            CAP.store(memory_cap, Release);
            LINK_FD.store(link.fd(), Release);
            *session = Some(link);
            lease::restart_numbering();
            begin_session(session_id);
            // Before the state says managed: lanes are opened to it.
            let _ = TARGET.set((socket.clone(), client));
            let attached = settle(MANAGED);
            // Once managed, so that a daemon gone already is noticed through it.
            crate::revocation::watch(&socket, session_id, watch_closed);
            attached
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

/// After a lost connection: forget it; launches pass through while a thread re-attaches
/// (or, with re-attaching off or at exit, from now on).
fn lose(session: &mut Option<Link>, e: &dyn std::fmt::Display) {
    let reattach = REATTACH_FOR_S.load(Relaxed) > 0 && !lease::exiting() && TARGET.get().is_some();
    if session.take().is_some() {
        LINK_FD.store(-1, Release);
        if reattach {
            say(format_args!(
                "lost the daemon ({e}); launches run ungated until this process has re-attached"
            ));
        } else {
            say(format_args!(
                "lost the daemon ({e}); running unmanaged from now on"
            ));
        }
    }
    if reattach {
        settle(AWAY);
        start_reattaching();
    } else {
        CAP.store(NO_CAP, Release);
        settle(UNMANAGED);
    }
}

/// The watch connection closed: the daemon may be gone. The re-attaching thread finds out.
fn watch_closed() {
    if STATE.load(Acquire) == MANAGED && !lease::exiting() {
        start_reattaching();
    }
}

/// A session `session_id` begins: lanes opened before are of another attachment.
fn begin_session(session_id: u64) {
    SESSION_ID.store(session_id, Release);
    ATTACHMENT.fetch_add(1, AcqRel);
}

/// The current session's id and attachment, read together.
fn current_session() -> (u64, u64) {
    loop {
        let attachment = ATTACHMENT.load(Acquire);
        let session_id = SESSION_ID.load(Acquire);
        if ATTACHMENT.load(Acquire) == attachment {
            return (session_id, attachment);
        }
    }
}

fn start_reattaching() {
    if REATTACHING.swap(true, AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("gpushare-reattach".into())
        .spawn(|| {
            let _ = std::panic::catch_unwind(reattach);
            REATTACHING.store(false, Release);
            // Lost again between the end of the loop and the flag: go on.
            if STATE.load(Acquire) == AWAY && !lease::exiting() {
                start_reattaching();
            }
        });
    if spawned.is_err() {
        REATTACHING.store(false, Release);
        give_up(&"no thread to re-attach with");
    }
}

/// Why a try to re-attach did not succeed.
enum Retry {
    /// Try again later (no daemon yet).
    Later(std::io::Error),
    /// The daemon refused this process: stop trying.
    Refused(String),
}

/// The re-attaching thread: confirms that the connection is gone, then tries to attach to the
/// daemon again until it succeeds, is refused, or gives up.
fn reattach() {
    {
        let mut session = SESSION.lock();
        if STATE.load(Acquire) == MANAGED {
            // A question the daemon answers at once tells whether it is still there.
            let alive = match session.as_mut() {
                Some(link) => link.call(&Request::Reserve {
                    device: DeviceId::default(),
                    bytes: 0,
                }),
                None => Err(std::io::ErrorKind::NotConnected.into()),
            };
            match alive {
                Ok(_) => {
                    // Only the watch connection closed: open it again.
                    drop(session);
                    if let Some((socket, _)) = TARGET.get() {
                        crate::revocation::watch(socket, SESSION_ID.load(Acquire), watch_closed);
                    }
                    return;
                }
                Err(e) => lose(&mut session, &e),
            }
        }
    }
    let Some((socket, client)) = TARGET.get() else {
        return;
    };
    let since = Instant::now();
    let give_up_after = Duration::from_secs(REATTACH_FOR_S.load(Relaxed));
    let mut pause = Duration::from_millis(10);
    while STATE.load(Acquire) == AWAY && !lease::exiting() {
        match try_reattach(socket, client) {
            Ok(()) => {
                say(format_args!(
                    "re-attached to the daemon after {:.1} s",
                    since.elapsed().as_secs_f64()
                ));
                return;
            }
            Err(Retry::Refused(message)) => {
                give_up(&format_args!(
                    "the daemon refused to re-attach it: {message}"
                ));
                return;
            }
            Err(Retry::Later(e)) if since.elapsed() >= give_up_after => {
                give_up(&format_args!(
                    "no daemon to re-attach to after {} s ({e})",
                    give_up_after.as_secs()
                ));
                return;
            }
            Err(Retry::Later(_)) => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(REATTACH_PAUSE);
            }
        }
    }
}

/// Stops re-attaching: the process runs unmanaged from now on.
fn give_up(why: &dyn std::fmt::Display) {
    let _session = SESSION.lock();
    if STATE.load(Acquire) == AWAY {
        say(format_args!("{why}; running unmanaged from now on"));
        CAP.store(NO_CAP, Release);
        settle(UNMANAGED);
    }
}

/// One try: a new connection and a Hello with the memory this process holds; on a Welcome the
/// connection becomes the session and the gate closes, so that the next launch asks the new
/// daemon for a lease.
fn try_reattach(socket: &std::path::Path, client: &str) -> Result<(), Retry> {
    let mut link = Link::connect(socket).map_err(Retry::Later)?;
    let sent = LEDGER.lock().totals();
    let reply = link
        .call(&Request::Hello {
            version: PROTOCOL_VERSION,
            client: client.to_string(),
            reserved: sent.clone(),
        })
        .map_err(Retry::Later)?;
    let (queue_ahead_ns, sched_flags, memory_cap, session_id) = match reply {
        Reply::Welcome {
            queue_ahead_ns,
            sched_flags,
            memory_cap,
            session,
            ..
        } => (queue_ahead_ns, sched_flags, memory_cap, session),
        Reply::Error { code, message } => {
            return Err(Retry::Refused(format!("{message} ({code:?})")))
        }
        other => return Err(Retry::Refused(format!("unexpected answer {other:?}"))),
    };
    // Lock order: the gates (lane by lane), the session, the books of the away time, the record.
    let mut gates: Vec<_> = GATE.iter().map(|g| g.lock()).collect();
    let mut session = SESSION.lock();
    if STATE.load(Acquire) != AWAY {
        return Ok(()); // gave up meanwhile, or the process exits: the connection just closes
    }
    let books = AWAY_BOOKS.lock();
    let now_held = LEDGER.lock().totals();
    lease::configure(queue_ahead_ns, sched_flags & SCHED_INTERACTIVE != 0);
    CAP.store(memory_cap, Release);
    LINK_FD.store(link.fd(), Release);
    lease::restart_numbering();
    begin_session(session_id);
    for (gate, lane) in gates.iter_mut().zip(Lane::all()) {
        **gate = Lease::NONE;
        lease::withdraw(lane);
    }
    STATE.store(MANAGED, Release);
    drop(books);
    // What was allocated or freed while the Hello was on its way.
    let settled = settle_books(&mut link, &sent, &now_held);
    *session = Some(link);
    if let Err(e) = settled {
        lose(&mut session, &e);
        return Err(Retry::Later(e));
    }
    drop(session);
    drop(gates);
    crate::revocation::watch(socket, session_id, watch_closed);
    Ok(())
}

/// Tells the daemon the difference between the memory a Hello sent (`sent`) and what this
/// process holds now (`now`), GPU by GPU.
fn settle_books(
    link: &mut Link,
    sent: &[(DeviceId, u64)],
    now: &[(DeviceId, u64)],
) -> std::io::Result<()> {
    let on =
        |list: &[(DeviceId, u64)], d: DeviceId| list.iter().find(|e| e.0 == d).map_or(0, |e| e.1);
    let mut devices: Vec<DeviceId> = sent.iter().chain(now).map(|e| e.0).collect();
    devices.sort();
    devices.dedup();
    for device in devices {
        let (before, after) = (on(sent, device), on(now, device));
        if after > before {
            link.call(&Request::Reserve {
                device,
                bytes: after - before,
            })?;
        } else if before > after {
            link.send(&Request::Unreserve {
                device,
                bytes: before - after,
            })?;
        }
    }
    Ok(())
}

/// For allocations and frees while the daemon is away: holds off a re-attach until the record
/// is up to date. `None` when the process is not away (any more).
pub fn away_books() -> Option<MutexGuard<'static, ()>> {
    if STATE.load(Acquire) != AWAY {
        return None;
    }
    let books = AWAY_BOOKS.lock();
    (STATE.load(Acquire) == AWAY).then_some(books)
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
            lose(&mut session, &e);
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

/// Runs one exchange about the token of `device` on the connection of `lane`, opened now if it
/// is not open for this session and `device` (a lane's other GPU's connection closes, which
/// gives that token back); `None` when unmanaged. A connection that fails is the daemon gone,
/// as on the session's, unless the process re-attached meanwhile (the watch connection saw the
/// daemon go first): then the exchange runs again on the new session's lane. Losing the new
/// session for the old lane's failure made a process re-attach once more than the daemon
/// restarted.
fn with_lane<T>(
    lane: Lane,
    device: DeviceId,
    mut f: impl FnMut(&mut Link) -> std::io::Result<T>,
) -> Option<T> {
    for first in [true, false] {
        if attach() != Attach::Managed || crate::lease::exiting() {
            return None;
        }
        let (session_id, attachment) = current_session();
        let mut slot = LANE_LINKS[lane].lock();
        let open = matches!(&*slot, Some((a, d, _)) if *a == attachment && *d == device);
        let result = if open {
            Ok(())
        } else {
            LANE_FDS[lane].store(-1, Release);
            *slot = None;
            open_lane(session_id, device).map(|link| {
                LANE_FDS[lane].store(link.fd(), Release);
                *slot = Some((attachment, device, link));
            })
        };
        let result = result.and_then(|()| match slot.as_mut() {
            Some((_, _, link)) => f(link),
            None => Err(std::io::ErrorKind::NotConnected.into()),
        });
        let e = match result {
            Ok(v) => return Some(v),
            Err(e) => e,
        };
        LANE_FDS[lane].store(-1, Release);
        *slot = None;
        drop(slot);
        let mut session = SESSION.lock();
        if first && session.is_some() && ATTACHMENT.load(Acquire) != attachment {
            continue; // a lane of the session before a re-attach
        }
        lose(&mut session, &e);
        return None;
    }
    None
}

/// A new connection to the daemon for the token of `device` in session `session_id`.
fn open_lane(session_id: u64, device: DeviceId) -> std::io::Result<Link> {
    let Some((socket, _)) = TARGET.get() else {
        return Err(std::io::ErrorKind::NotConnected.into());
    };
    let mut link = Link::connect(socket)?;
    link.send(&Request::Lane {
        session: session_id,
        device,
    })?;
    Ok(link)
}

/// Blocks until the daemon grants the token of `device`, the GPU of `lane` (spinning first for
/// at most `spin`); the lease length, or `None` when unmanaged.
pub fn acquire(lane: Lane, device: DeviceId, spin: Duration) -> Option<u64> {
    with_lane(lane, device, |l| {
        match l.call_untimed(&Request::Acquire { device }, spin)? {
            Reply::Grant { lease_ns, flags } => Ok(granted(lane, lease_ns, flags, false)),
            r => Err(unexpected(r)),
        }
    })
}

/// A grant of `lease_ns` with `flags` arrived for `lane` (`extended`: in answer to an
/// extension): counts the lease and tells the pacer whether it is shared, whether its queue must
/// stay short for an interactive client, and whether it was extended.
fn granted(lane: Lane, lease_ns: u64, flags: u32, extended: bool) -> u64 {
    crate::lease::count_grant(
        lane,
        flags & proto::protocol::GRANT_SHARED != 0,
        flags & proto::protocol::GRANT_CONTENDED != 0,
    );
    crate::pacing::set_tight(lane, flags & proto::protocol::GRANT_TIGHT != 0);
    crate::pacing::set_extended(lane, extended);
    lease_ns
}

/// Gives the token of `device` (the GPU of `lane`) back with the time its work kept the GPU
/// busy and waits in line for the next lease, in one request, so the daemon weighs this process
/// among the waiting ones (spinning first for at most `spin`); the lease length, or `None` when
/// unmanaged.
pub fn renew(lane: Lane, device: DeviceId, busy_ns: u64, spin: Duration) -> Option<u64> {
    with_lane(lane, device, |l| {
        let request = Request::Renew {
            device,
            busy_ns,
            launches: crate::pacing::unreported_launches(lane),
            active_ns: crate::pacing::unreported_active(lane),
        };
        match l.call_untimed(&request, spin)? {
            Reply::Grant { lease_ns, flags } => Ok(granted(lane, lease_ns, flags, false)),
            r => Err(unexpected(r)),
        }
    })
}

/// Asks to keep the token of `device` (the GPU of `lane`) for another lease without draining
/// first; when no waiting process goes before this one, the lease length and whether others
/// wait; `None` otherwise (or when unmanaged).
pub fn extend(lane: Lane, device: DeviceId) -> Option<(u64, bool)> {
    with_lane(lane, device, |l| {
        let request = Request::Extend {
            device,
            launches: crate::pacing::unreported_launches(lane),
            active_ns: crate::pacing::unreported_active(lane),
        };
        match l.call(&request)? {
            Reply::Grant { lease_ns, flags } => Ok(Some((
                granted(lane, lease_ns, flags, true),
                flags & proto::protocol::GRANT_CONTENDED != 0,
            ))),
            Reply::NotExtended => Ok(None),
            r => Err(unexpected(r)),
        }
    })
    .flatten()
}

/// Gives the token of `device` (the GPU of `lane`) back with the time its work kept the GPU
/// busy (and the launches and the time in GPU phases since the last report, as `renew` and
/// `extend` do).
pub fn release(lane: Lane, device: DeviceId, busy_ns: u64) {
    with_lane(lane, device, |l| {
        l.send(&Request::Release {
            device,
            busy_ns,
            launches: crate::pacing::unreported_launches(lane),
            active_ns: crate::pacing::unreported_active(lane),
        })
    });
}

/// The answer to a reservation.
#[derive(Debug, PartialEq, Eq)]
pub enum Reservation {
    Counted,
    OverCap,
    Unmanaged,
    /// The daemon is away: the allocation is checked against the cap by this process's record
    /// and recorded, under [`away_books`].
    Away,
}

/// Counts `bytes` (> 0) on `device` against the cap before allocating them.
pub fn reserve(device: DeviceId, bytes: u64) -> Reservation {
    debug_assert!(bytes > 0, "Reserve{{0}} is a query");
    if STATE.load(Acquire) == AWAY {
        return Reservation::Away;
    }
    with_link(|l| match l.call(&Request::Reserve { device, bytes })? {
        Reply::Reserved { .. } => Ok(Reservation::Counted),
        Reply::OverCap { cap, .. } => {
            // The cap may have been changed (over D-Bus) since the Welcome.
            CAP.store(cap, Release);
            Ok(Reservation::OverCap)
        }
        r => Err(unexpected(r)),
    })
    .unwrap_or_else(|| {
        // The daemon may have gone just now: then the allocation is recorded for the next one.
        if STATE.load(Acquire) == AWAY {
            Reservation::Away
        } else {
            Reservation::Unmanaged
        }
    })
}

pub fn unreserve(device: DeviceId, bytes: u64) {
    if bytes > 0 {
        with_link(|l| l.send(&Request::Unreserve { device, bytes }));
    }
}

/// The client's memory cap, [`NO_CAP`] when unmanaged or uncapped.
pub fn cap() -> u64 {
    if matches!(attach(), Attach::Managed | Attach::Away) {
        CAP.load(Acquire)
    } else {
        NO_CAP
    }
}

/// The client's memory in use on `device` (all its processes), as the daemon counts it; while
/// the daemon is away, this process's own.
pub fn used(device: DeviceId) -> Option<u64> {
    if STATE.load(Acquire) == AWAY {
        return Some(LEDGER.lock().total_on(device));
    }
    with_link(|l| match l.call(&Request::Reserve { device, bytes: 0 })? {
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
    for lane in Lane::all() {
        let fd = LANE_FDS[lane].swap(-1, AcqRel);
        if fd >= 0 {
            libc::close(fd);
        }
        // leaked as well
        LANE_LINKS[lane].reset(None);
    }
    AWAY_BOOKS.reset(());
    REATTACHING.store(false, Release);
    CAP.store(NO_CAP, Release);
    STATE.store(NOT_TRIED, Release);
    crate::lease::after_fork_in_child();
    crate::revocation::after_fork_in_child();
    crate::ledger::after_fork_in_child();
    crate::devices::after_fork_in_child();
    crate::residency::after_fork_in_child();
}

#[cfg(test)]
mod tests {
    use super::mps_service;
    use std::path::Path;

    #[test]
    fn nvidia_mps_programs_are_left_unmanaged_and_nothing_else() {
        assert!(mps_service(Path::new("/usr/bin/nvidia-cuda-mps-server")));
        assert!(mps_service(Path::new(
            "/usr/local/nvidia/bin/nvidia-cuda-mps-control"
        )));
        assert!(!mps_service(Path::new("/usr/bin/python3")));
        assert!(!mps_service(Path::new(
            "/opt/nvidia-cuda-mps-tools/bin/train"
        )));
        assert!(!mps_service(Path::new("/usr/bin/nvidia-smi")));
    }
}
