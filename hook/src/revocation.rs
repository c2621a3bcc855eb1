//! The watch connection: a second connection to the daemon, read by a thread of its own, on
//! which the daemon revokes one of this process's leases when an interactive client wants that
//! GPU, and says when another process's lease started beside one of this one's; each notice
//! names its GPU, and goes to that GPU's lane.
//!
//! The thread blocks in a read and does nothing else; when the daemon goes away the read ends,
//! the thread tells the session (which re-attaches) and ends.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::*};

use proto::protocol::{Reply, Request};

use crate::daemon_link::Link;

/// The session whose watch connection is open (0: none).
static WATCHING: AtomicU64 = AtomicU64::new(0);

/// Opens the watch connection of `session` at `socket` and starts its reader (once per
/// session); `closed` runs in the reader when the daemon closes the connection.
pub fn watch(socket: &Path, session: u64, closed: fn()) {
    let before = WATCHING.swap(session, AcqRel);
    if before == session {
        return;
    }
    let Ok(mut link) = Link::connect(socket) else {
        let _ = WATCHING.compare_exchange(session, 0, AcqRel, Acquire);
        return;
    };
    if link.send(&Request::Watch { session }).is_err() || link.wait_forever().is_err() {
        let _ = WATCHING.compare_exchange(session, 0, AcqRel, Acquire);
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("gpushare-watch".into())
        .spawn(move || {
            let _ = std::panic::catch_unwind(move || read(link, session));
            // A reader of an older session (before a re-attach) ends quietly.
            if WATCHING
                .compare_exchange(session, 0, AcqRel, Acquire)
                .is_ok()
            {
                closed();
            }
        });
    if spawned.is_err() {
        let _ = WATCHING.compare_exchange(session, 0, AcqRel, Acquire);
    }
}

fn read(mut link: Link, session: u64) {
    while let Ok(reply) = link.receive() {
        if WATCHING.load(Acquire) != session {
            // a reader of an older session (before a re-attach): its lease numbers are not the
            // new session's
            break;
        }
        match reply {
            Reply::Revoke { lease, device } => {
                if let Some(lane) = crate::devices::lane_of(device) {
                    crate::lease::revoke(lane, lease);
                }
            }
            Reply::Joined {
                lease,
                at_ns,
                device,
            } => {
                if let Some(lane) = crate::devices::lane_of(device) {
                    crate::lease::joined(lane, lease, at_ns);
                }
            }
            Reply::Contended { lease, device } => {
                if let Some(lane) = crate::devices::lane_of(device) {
                    crate::lease::contended(lane, lease);
                }
            }
            _ => {}
        }
    }
}

/// A fork child has no reader thread; it opens its own connection when it attaches.
pub fn after_fork_in_child() {
    WATCHING.store(0, Release);
}
