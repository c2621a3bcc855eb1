//! The watch connection: a second connection to the daemon, read by a thread of its own, on
//! which the daemon revokes this process's lease when an interactive client wants the GPU.
//!
//! The thread blocks in a read and does nothing else; when the daemon goes away the read ends
//! and so does the thread.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::*};

use proto::protocol::{Reply, Request};

use crate::daemon_link::Link;

static STARTED: AtomicBool = AtomicBool::new(false);

/// Opens the watch connection of `session` at `socket` and starts its reader (once per process).
pub fn watch(socket: &Path, session: u64) {
    if STARTED.swap(true, AcqRel) {
        return;
    }
    let Ok(mut link) = Link::connect(socket) else {
        STARTED.store(false, Release);
        return;
    };
    if link.send(&Request::Watch { session }).is_err() || link.wait_forever().is_err() {
        STARTED.store(false, Release);
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("gpushare-watch".into())
        .spawn(move || {
            let _ = std::panic::catch_unwind(move || read(link));
        });
    if spawned.is_err() {
        STARTED.store(false, Release);
    }
}

fn read(mut link: Link) {
    while let Ok(reply) = link.receive() {
        if reply == Reply::Revoke {
            crate::lease::revoke();
        }
    }
}

/// A fork child has no reader thread; it opens its own connection when it attaches.
pub fn after_fork_in_child() {
    STARTED.store(false, Release);
}
