//! The leases: what the gate knows of this process's turns on its GPUs, one lease per lane
//! ([`crate::lanes`]), kept here for those that end one or look at it without going through the
//! gate (the watch connection revokes it, the session ungates the process and resets it in a
//! fork child, residency asks how long it has left), and the process's exit flag.
//!
//! The launch fast path reads its lane's [`GATE_AT`] only; the gate changes the rest as leases
//! come and go.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering::*};

use crate::clock::now_ns;
use crate::devices::Device;
use crate::fork_safe::ForkSafe;
use crate::lanes::{Lane, PerLane, MAX};
use crate::{pacing, streams};

/// End of the lane's current lease in [`fast_now`](crate::clock::fast_now) units; 0 = no lease,
/// `u64::MAX` = ungated.
pub static DEADLINE: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
/// When a launch in the lane next leaves the fast path: the deadline or the next queue check,
/// whichever comes first ([`fast_now`](crate::clock::fast_now) units, `u64::MAX` = ungated, in
/// every lane at once).
pub static GATE_AT: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
/// How long a queue check may wait for the GPU (four leases, at least 100 ms).
pub static WAIT_LIMIT_NS: PerLane<AtomicU64> =
    PerLane([const { AtomicU64::new(100_000_000) }; MAX]);
/// The daemon revoked the lane's current lease (for an interactive client), at this [`now_ns`].
pub static REVOKED_AT: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
/// This process's client is interactive: it gives a lease back as soon as its work is done.
pub static INTERACTIVE: AtomicBool = AtomicBool::new(false);
/// Other processes waited for the token when the lane's current lease was granted or last
/// extended: the lease thread gives it back once this process leaves the GPU for a while (the
/// gate's `contended_idle`).
pub static CONTENDED: PerLane<AtomicBool> = PerLane([const { AtomicBool::new(false) }; MAX]);
/// The device ordinal of the lane's current lease, for the launch path of a process on GPUs
/// whose ordinals share a lane.
pub static LEASE_ORDINAL: PerLane<AtomicI32> = PerLane([const { AtomicI32::new(-1) }; MAX]);
/// End of the lane's current lease in [`now_ns`] units (0: none), for readers off the launch
/// path.
pub static LEASE_END_NS: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
pub static GATE: PerLane<ForkSafe<Lease>> = PerLane([const { ForkSafe::new(Lease::NONE) }; MAX]);
/// The lane's lease thread runs (see the gate's lease thread).
pub static WATCHER: PerLane<AtomicBool> = PerLane([const { AtomicBool::new(false) }; MAX]);
/// The lane's lease thread, woken at each grant.
pub static WATCHER_THREAD: PerLane<ForkSafe<Option<std::thread::Thread>>> =
    PerLane([const { ForkSafe::new(None) }; MAX]);
/// Set by an `atexit` handler: from then on the hook neither waits for nor talks to the daemon,
/// and the idle releaser makes no more driver calls.
pub static EXITING: AtomicBool = AtomicBool::new(false);

/// Launches pass through from now on (unmanaged), on every GPU.
pub fn ungate() {
    for lane in Lane::all() {
        DEADLINE[lane].store(u64::MAX, Release);
        GATE_AT[lane].store(u64::MAX, Release);
    }
}

/// How the daemon wants this process's leases used (from its Welcome).
pub fn configure(queue_ahead_ns: u64, interactive: bool) {
    pacing::configure(queue_ahead_ns, interactive);
    INTERACTIVE.store(interactive, Release);
}

/// What the watch connection said about a lane's leases, by lease number. Leases are numbered
/// by the grants this session got for the lane's GPU, as the daemon counts them; a notice names the lease it is about, and may come
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

static NOTICES: PerLane<ForkSafe<Notices>> = PerLane([const { ForkSafe::new(Notices::NONE) }; MAX]);

impl Notices {
    const NONE: Notices = Notices {
        grants_seen: 0,
        revoke_for: 0,
        joined_for: 0,
        joined_at: 0,
        contended_for: 0,
    };
}

/// A new session: leases are numbered from 1 again, in every lane.
pub fn restart_numbering() {
    for n in NOTICES.iter() {
        *n.lock() = Notices::NONE;
    }
}

/// A grant for `lane` came (`shared`: granted beside others; `contended`: others wait for the
/// token): the lane's next lease number. Sets whether the lease is shared and contended, and so
/// it is if a `Joined` or a `Contended` for it came first.
pub fn count_grant(lane: Lane, shared: bool, contended: bool) -> u64 {
    let mut n = NOTICES[lane].lock();
    n.grants_seen += 1;
    pacing::set_shared(lane, shared);
    if n.joined_for == n.grants_seen {
        pacing::joined(lane, n.joined_at);
    }
    CONTENDED[lane].store(contended || n.contended_for == n.grants_seen, Relaxed);
    n.grants_seen
}

/// Another process waits for the token that lease number `lease` of `lane` holds (the
/// daemon's `Contended`).
pub fn contended(lane: Lane, lease: u64) {
    let mut n = NOTICES[lane].lock();
    n.contended_for = lease;
    if n.grants_seen == lease {
        CONTENDED[lane].store(true, Relaxed);
    }
}

/// Another lease started beside lease number `lease` of `lane` at `at_ns` (the daemon's
/// `Joined`).
pub fn joined(lane: Lane, lease: u64, at_ns: u64) {
    let mut n = NOTICES[lane].lock();
    n.joined_for = lease;
    n.joined_at = at_ns;
    if n.grants_seen == lease {
        pacing::joined(lane, at_ns);
    }
}

/// The daemon revoked lease number `lease` of `lane`: it ends at the next launch, or in the
/// lease thread; one whose grant is still on its way ends when it is published ([`published`]).
pub fn revoke(lane: Lane, lease: u64) {
    let mut n = NOTICES[lane].lock();
    n.revoke_for = lease;
    if n.grants_seen == lease {
        revoke_now(lane);
    }
}

/// The gate of `lane` opened for the lease counted last (its deadline stored): a revocation
/// that came before is applied now. Under the lock, so that one applied meanwhile by the watch
/// connection comes after the gate opened, or is applied here.
pub fn published(lane: Lane) {
    let n = NOTICES[lane].lock();
    if n.revoke_for == n.grants_seen {
        revoke_now(lane);
    }
}

/// The lease thread gives the lease of `lane` back before its end (others wait and the process
/// left the GPU): the gate closes now, as for a revocation, and the lease goes back after the
/// revocation's slack.
pub fn give_back_soon(lane: Lane) {
    revoke_now(lane);
}

fn revoke_now(lane: Lane) {
    if DEADLINE[lane].load(Acquire) == u64::MAX {
        return;
    }
    REVOKED_AT[lane].store(now_ns().max(1), Release);
    DEADLINE[lane].store(0, Release);
    GATE_AT[lane].store(0, Release);
    wake_watcher(lane);
}

/// Closes the gate of `lane`: no lease.
pub fn withdraw(lane: Lane) {
    LEASE_END_NS[lane].store(0, Relaxed);
    DEADLINE[lane].store(0, Release);
    GATE_AT[lane].store(0, Release);
}

pub fn wake_watcher(lane: Lane) {
    if let Some(t) = WATCHER_THREAD[lane].lock().as_ref() {
        t.unpark();
    }
}

/// Nanoseconds left of this process's lease in `lane` (0 without one, `u64::MAX` when
/// ungated).
pub fn lease_left_ns(lane: Lane) -> u64 {
    if DEADLINE[lane].load(Acquire) == u64::MAX {
        return u64::MAX;
    }
    LEASE_END_NS[lane].load(Relaxed).saturating_sub(now_ns())
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
    for lane in Lane::all() {
        withdraw(lane);
        REVOKED_AT[lane].store(0, Release);
        CONTENDED[lane].store(false, Relaxed);
        // SAFETY: called from the fork child handler.
        unsafe { NOTICES[lane].reset(Notices::NONE) };
        // The lease threads do not exist in the child.
        WATCHER[lane].store(false, Release);
        // SAFETY: called from the fork child handler.
        unsafe { WATCHER_THREAD[lane].reset(None) };
        streams::take(lane, &mut [std::ptr::null_mut(); streams::MAX]);
        // SAFETY: called from the fork child handler.
        unsafe { GATE[lane].reset(Lease::NONE) };
    }
    pacing::after_fork_in_child();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Notices on the watch connection apply to the lease they name: before its grant was
    /// handled here, they wait for it; about an earlier lease, they change nothing.
    #[test]
    fn notices_apply_to_the_lease_they_name() {
        let _globals = crate::stats::TEST_GLOBALS.lock();
        let (l, other) = (Lane::of(2), Lane::of(7));
        let open = |lane: Lane, lease: u64| {
            assert_eq!(count_grant(lane, false, false), lease);
            REVOKED_AT[lane].store(0, SeqCst);
            DEADLINE[lane].store(1 << 40, SeqCst);
            published(lane);
        };
        restart_numbering();
        revoke(l, 1);
        assert_eq!(REVOKED_AT[l].load(SeqCst), 0, "lease 1 not granted yet");
        open(other, 1);
        assert_eq!(
            REVOKED_AT[other].load(SeqCst),
            0,
            "another GPU's lease 1: nothing"
        );
        open(l, 1);
        assert_ne!(REVOKED_AT[l].load(SeqCst), 0, "revoked once granted");
        assert_eq!(DEADLINE[l].load(SeqCst), 0);
        assert_ne!(
            DEADLINE[other].load(SeqCst),
            0,
            "the other GPU's lease runs on"
        );
        open(l, 2);
        revoke(l, 1);
        assert_eq!(
            REVOKED_AT[l].load(SeqCst),
            0,
            "about the lease before: nothing"
        );
        assert_ne!(DEADLINE[l].load(SeqCst), 0);
        revoke(l, 2);
        assert_ne!(REVOKED_AT[l].load(SeqCst), 0, "about this one: at once");
        assert_eq!(DEADLINE[l].load(SeqCst), 0);

        joined(l, 4, 0);
        open(l, 3);
        assert!(!pacing::shared(l), "a Joined for the next lease");
        assert_eq!(count_grant(l, false, false), 4);
        assert!(pacing::shared(l), "shared once lease 4 is granted");
        assert!(!pacing::shared(other));
        joined(l, 3, 0);
        assert_eq!(count_grant(l, false, false), 5);
        assert!(!pacing::shared(l), "a late Joined for an earlier lease");

        contended(l, 6);
        assert!(!CONTENDED[l].load(SeqCst), "a Contended for the next lease");
        assert_eq!(count_grant(l, false, false), 6);
        assert!(
            CONTENDED[l].load(SeqCst),
            "contended once lease 6 is granted"
        );
        assert!(!CONTENDED[other].load(SeqCst));
        assert_eq!(count_grant(l, false, false), 7);
        assert!(!CONTENDED[l].load(SeqCst), "granted uncontended");
        contended(l, 6);
        assert!(
            !CONTENDED[l].load(SeqCst),
            "a late Contended for an earlier lease"
        );
        contended(l, 7);
        assert!(CONTENDED[l].load(SeqCst), "about this one: at once");
        withdraw(l);
        withdraw(other);
        restart_numbering();
    }
}
