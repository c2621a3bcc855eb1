//! The lease: what the gate knows of this process's turn on the GPU, kept here for those that
//! end it or look at it without going through the gate (the watch connection revokes it, the
//! session ungates the process and resets it in a fork child, residency asks how long it has
//! left), and the process's exit flag.
//!
//! The launch fast path reads [`GATE_AT`] only; the gate changes the rest as leases come and go.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};

use crate::clock::now_ns;
use crate::devices::Device;
use crate::fork_safe::ForkSafe;
use crate::{pacing, streams};

/// End of the current lease in [`fast_now`](crate::clock::fast_now) units; 0 = no lease,
/// `u64::MAX` = ungated.
pub static DEADLINE: AtomicU64 = AtomicU64::new(0);
/// When a launch next leaves the fast path: the deadline or the next queue check, whichever
/// comes first ([`fast_now`](crate::clock::fast_now) units, `u64::MAX` = ungated).
pub static GATE_AT: AtomicU64 = AtomicU64::new(0);
/// How long a queue check may wait for the GPU (four leases, at least 100 ms).
pub static WAIT_LIMIT_NS: AtomicU64 = AtomicU64::new(100_000_000);
/// The daemon revoked the current lease (for an interactive client), at this [`now_ns`].
pub static REVOKED_AT: AtomicU64 = AtomicU64::new(0);
/// This process's client is interactive: it gives a lease back as soon as its work is done.
pub static INTERACTIVE: AtomicBool = AtomicBool::new(false);
/// Other processes waited for the token when the current lease was granted or last extended:
/// the lease thread gives it back once this process leaves the GPU for a while (the gate's
/// `contended_idle`).
pub static CONTENDED: AtomicBool = AtomicBool::new(false);
/// The device ordinal of the current lease, for the launch path of a process on several GPUs.
pub static LEASE_ORDINAL: AtomicI32 = AtomicI32::new(-1);
/// End of the current lease in [`now_ns`] units (0: none), for readers off the launch path.
pub static LEASE_END_NS: AtomicU64 = AtomicU64::new(0);
pub static GATE: ForkSafe<Lease> = ForkSafe::new(Lease::NONE);
/// The idle releaser thread runs (see the gate's lease thread).
pub static WATCHER: AtomicBool = AtomicBool::new(false);
/// The idle releaser, woken at each grant.
pub static WATCHER_THREAD: ForkSafe<Option<std::thread::Thread>> = ForkSafe::new(None);
/// Set by an `atexit` handler: from then on the hook neither waits for nor talks to the daemon,
/// and the idle releaser makes no more driver calls.
pub static EXITING: AtomicBool = AtomicBool::new(false);

/// Launches pass through from now on (unmanaged).
pub fn ungate() {
    DEADLINE.store(u64::MAX, Release);
    GATE_AT.store(u64::MAX, Release);
}

/// How the daemon wants this process's leases used (from its Welcome).
pub fn configure(queue_ahead_ns: u64, interactive: bool) {
    pacing::configure(queue_ahead_ns, interactive);
    INTERACTIVE.store(interactive, Release);
}

/// What the watch connection said, by lease number. Leases are numbered by the grants this
/// session got, as the daemon counts them; a notice names the lease it is about, and may come
/// before the grant of that lease was handled here, or after the lease ended. One lock orders
/// the notices with the grants: a notice acts on the lease it names and on no other.
struct Notices {
    /// Grants this session got: the number of the current (or last) lease.
    grants_seen: u64,
    /// The lease the last revocation was for.
    revoke_for: u64,
    /// The lease the last `Joined` was for, and when the other lease was granted.
    joined_for: u64,
    joined_at: u64,
    /// The lease the last `Contended` was for.
    contended_for: u64,
}

static NOTICES: ForkSafe<Notices> = ForkSafe::new(Notices::NONE);

impl Notices {
    const NONE: Notices = Notices {
        grants_seen: 0,
        revoke_for: 0,
        joined_for: 0,
        joined_at: 0,
        contended_for: 0,
    };
}

/// A new session: leases are numbered from 1 again.
pub fn restart_numbering() {
    *NOTICES.lock() = Notices::NONE;
}

/// A grant came (`shared`: granted beside others; `contended`: others wait for the token): the
/// next lease number. Sets whether the lease is shared and contended, and so it is if a
/// `Joined` or a `Contended` for it came first.
pub fn count_grant(shared: bool, contended: bool) -> u64 {
    let mut n = NOTICES.lock();
    n.grants_seen += 1;
    pacing::set_shared(shared);
    if n.joined_for == n.grants_seen {
        pacing::joined(n.joined_at);
    }
    CONTENDED.store(contended || n.contended_for == n.grants_seen, Relaxed);
    n.grants_seen
}

/// Another process waits for the token that lease number `lease` holds (the daemon's
/// `Contended`).
pub fn contended(lease: u64) {
    let mut n = NOTICES.lock();
    n.contended_for = lease;
    if n.grants_seen == lease {
        CONTENDED.store(true, Relaxed);
    }
}

/// Another lease started beside lease number `lease` at `at_ns` (the daemon's `Joined`).
pub fn joined(lease: u64, at_ns: u64) {
    let mut n = NOTICES.lock();
    n.joined_for = lease;
    n.joined_at = at_ns;
    if n.grants_seen == lease {
        pacing::joined(at_ns);
    }
}

/// The daemon revoked lease number `lease`: it ends at the next launch, or in the lease thread;
/// one whose grant is still on its way ends when it is published ([`published`]).
pub fn revoke(lease: u64) {
    let mut n = NOTICES.lock();
    n.revoke_for = lease;
    if n.grants_seen == lease {
        revoke_now();
    }
}

/// The gate opened for the lease counted last (its deadline stored): a revocation that came
/// before is applied now. Under the lock, so that one applied meanwhile by the watch connection
/// comes after the gate opened, or is applied here.
pub fn published() {
    let n = NOTICES.lock();
    if n.revoke_for == n.grants_seen {
        revoke_now();
    }
}

/// The lease thread gives the lease back before its end (others wait and the process left the
/// GPU): the gate closes now, as for a revocation, and the lease goes back after the
/// revocation's slack.
pub fn give_back_soon() {
    revoke_now();
}

fn revoke_now() {
    if DEADLINE.load(Acquire) == u64::MAX {
        return;
    }
    REVOKED_AT.store(now_ns().max(1), Release);
    DEADLINE.store(0, Release);
    GATE_AT.store(0, Release);
    wake_watcher();
}

/// Closes the gate: no lease.
pub fn withdraw() {
    LEASE_END_NS.store(0, Relaxed);
    DEADLINE.store(0, Release);
    GATE_AT.store(0, Release);
}

pub fn wake_watcher() {
    if let Some(t) = WATCHER_THREAD.lock().as_ref() {
        t.unpark();
    }
}

/// Nanoseconds left of this process's lease (0 without one, `u64::MAX` when ungated).
pub fn lease_left_ns() -> u64 {
    if DEADLINE.load(Acquire) == u64::MAX {
        return u64::MAX;
    }
    LEASE_END_NS.load(Relaxed).saturating_sub(now_ns())
}

/// True once the process has started to exit.
pub fn exiting() -> bool {
    EXITING.load(Acquire)
}

/// From the first attach on: at exit, stop talking to the daemon (the closing connection gives
/// everything back) and never wait for it.
pub fn watch_exit() {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    extern "C" fn mark_exiting() {
        EXITING.store(true, Release);
        crate::stats::report();
    }
    if !REGISTERED.swap(true, AcqRel) {
        // SAFETY: registers a plain function.
        unsafe { libc::atexit(mark_exiting) };
    }
}

/// The lease this process holds, as the gate's bookkeeping (pure, unit-tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub holding: bool,
    pub granted_at: u64,
    pub deadline: u64,
    /// Context current in the thread that asked for it (0: unknown).
    pub context: usize,
    /// The GPU it is for (the device of that context).
    pub device: Device,
}

impl Lease {
    pub const NONE: Lease = Lease {
        holding: false,
        granted_at: 0,
        deadline: 0,
        context: 0,
        device: Device::NONE,
    };

    /// A lease from `now` for `lease_ns`, in the context and on the device noted before (an
    /// extension keeps them).
    pub fn grant(&mut self, now: u64, lease_ns: u64) {
        *self = Lease {
            holding: true,
            granted_at: now,
            deadline: now.saturating_add(lease_ns),
            context: self.context,
            device: self.device,
        };
    }

    /// How long the end of this lease waits for its work: four leases, at least 100 ms.
    pub fn wait_limit(&self) -> u64 {
        (self.deadline.saturating_sub(self.granted_at))
            .saturating_mul(4)
            .max(100_000_000)
    }

    /// Ends the lease at `now`; returns its wall time. The device stays noted for the next one.
    pub fn end(&mut self, now: u64) -> u64 {
        let wall = now.saturating_sub(self.granted_at);
        *self = Lease {
            device: self.device,
            ..Lease::NONE
        };
        wall
    }
}

pub fn after_fork_in_child() {
    withdraw();
    REVOKED_AT.store(0, Release);
    CONTENDED.store(false, Relaxed);
    // SAFETY: called from the fork child handler.
    unsafe { NOTICES.reset(Notices::NONE) };
    pacing::after_fork_in_child();
    // The idle releaser thread does not exist in the child.
    WATCHER.store(false, Release);
    // SAFETY: called from the fork child handler.
    unsafe { WATCHER_THREAD.reset(None) };
    streams::take(&mut [std::ptr::null_mut(); streams::MAX]);
    // SAFETY: called from the fork child handler.
    unsafe { GATE.reset(Lease::NONE) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notices on the watch connection apply to the lease they name: before its grant was
    /// handled here, they wait for it; about an earlier lease, they change nothing.
    #[test]
    fn notices_apply_to_the_lease_they_name() {
        let _globals = crate::stats::TEST_GLOBALS.lock();
        let open = |lease: u64| {
            assert_eq!(count_grant(false, false), lease);
            REVOKED_AT.store(0, SeqCst);
            DEADLINE.store(1 << 40, SeqCst);
            published();
        };
        restart_numbering();
        revoke(1);
        assert_eq!(REVOKED_AT.load(SeqCst), 0, "lease 1 not granted yet");
        open(1);
        assert_ne!(REVOKED_AT.load(SeqCst), 0, "revoked once granted");
        assert_eq!(DEADLINE.load(SeqCst), 0);
        open(2);
        revoke(1);
        assert_eq!(
            REVOKED_AT.load(SeqCst),
            0,
            "about the lease before: nothing"
        );
        assert_ne!(DEADLINE.load(SeqCst), 0);
        revoke(2);
        assert_ne!(REVOKED_AT.load(SeqCst), 0, "about this one: at once");
        assert_eq!(DEADLINE.load(SeqCst), 0);

        joined(4, 0);
        open(3);
        assert!(!pacing::shared(), "a Joined for the next lease");
        assert_eq!(count_grant(false, false), 4);
        assert!(pacing::shared(), "shared once lease 4 is granted");
        joined(3, 0);
        assert_eq!(count_grant(false, false), 5);
        assert!(!pacing::shared(), "a late Joined for an earlier lease");

        contended(6);
        assert!(!CONTENDED.load(SeqCst), "a Contended for the next lease");
        assert_eq!(count_grant(false, false), 6);
        assert!(CONTENDED.load(SeqCst), "contended once lease 6 is granted");
        assert_eq!(count_grant(false, false), 7);
        assert!(!CONTENDED.load(SeqCst), "granted uncontended");
        contended(6);
        assert!(
            !CONTENDED.load(SeqCst),
            "a late Contended for an earlier lease"
        );
        contended(7);
        assert!(CONTENDED.load(SeqCst), "about this one: at once");
        withdraw();
        restart_numbering();
    }
}
