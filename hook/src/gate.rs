//! The token gate: a launch proceeds while this process's lease on the launch's GPU runs.
//!
//! A process holds each GPU's lease on its own, in the GPU's lane ([`crate::lanes`]): a process
//! that drives several GPUs (a thread per GPU, or one thread launching on each in turn) runs on
//! all of them at once, and each GPU's scheduler weighs it there as any other process.
//!
//! Fast path (every launch): the launch's lane (the one GPU's, unless the process used several:
//! then the device of the thread's context), one clock read and a compare against the lane's
//! atomic time, the earlier of the lease's end and the next queue check ([`pacing`]). When the
//! lease has run out (or was revoked for an interactive client), one thread (under the lane's
//! gate lock) first asks to extend it, which the daemon grants when this process would get the
//! next lease anyway; otherwise it waits for the work launched during the lease, reports how
//! busy it kept the GPU, and blocks until the next grant. The other threads launching on that
//! GPU wait on the lock, since they share its token; threads on other GPUs go on.
//!
//! Each lane's lease thread samples the GPU queue while a lease runs and gives the lease back
//! when the process stops using it: after its end, at once when it was revoked, and for an
//! interactive client as soon as its work is done.
//!
//! The state of the leases lives in [`crate::lease`], where the watch connection and the session
//! reach it too.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::*};
use std::time::Duration;

use crate::clock::{fast_deadline, fast_now, now_ns};
use crate::cuda::*;
use crate::devices::{self, Device};
use crate::driver::{current_context, helper, relaxed_capture, Helper};
use crate::grant_wait;
use crate::lanes::{Lane, PerLane, MAX};
use crate::lease::{
    self, exiting, lease_left_ns, ungate, wake_watcher, withdraw, Lease, CONTENDED, DEADLINE,
    EXITING, GATE, GATE_AT, INTERACTIVE, LEASE_END_NS, LEASE_ORDINAL, REVOKED_AT, WAIT_LIMIT_NS,
    WATCHER, WATCHER_THREAD,
};
use crate::pacing::{self, wait_until_done};
use crate::pauses;
use crate::residency;
use crate::session::{self, Attach};
use crate::stats;
use crate::streams;

/// The launch's stream, as the gate needs it.
#[derive(Clone, Copy)]
pub enum Stream {
    /// A stream handle as passed to a launch; `per_thread` when the launch function is a
    /// `_ptsz` variant, where the null stream means the thread's per-thread default stream.
    Of { handle: CUstream, per_thread: bool },
    /// Launches that name no single stream (multi-device cooperative launches).
    Unknown,
}

impl Stream {
    /// The handle that names the same stream in plain (non-`_ptsz`) driver calls.
    #[inline(always)]
    fn handle(self) -> Option<CUstream> {
        match self {
            Stream::Of {
                handle,
                per_thread: true,
            } if handle.is_null() => Some(CU_STREAM_PER_THREAD as CUstream),
            Stream::Of { handle, .. } => Some(handle),
            Stream::Unknown => None,
        }
    }
}

/// Waits, if needed, until this process may launch on `stream`; returns the launch's lane, for
/// [`leave`].
#[inline(always)]
pub fn enter(stream: Stream) -> Lane {
    let first = devices::first_lane();
    // Ungated processes (every lane's gate open for good) read no clock and ask the driver
    // nothing (either costs a launch more than the compare).
    let lane = if GATE_AT[first].load(Relaxed) == u64::MAX {
        first
    } else {
        let (lane, ordinal) = devices::launch_lane(first);
        if fast_now() >= GATE_AT[lane].load(Relaxed) {
            stop(lane, stream)
        } else if ordinal.is_some_and(|d| d != LEASE_ORDINAL[lane].load(Relaxed)) {
            // A GPU whose ordinal shares the lane with the lease's: one lease at a time there.
            renew(stream)
        } else {
            lane
        }
    };
    if let Some(handle) = stream.handle() {
        streams::note(lane, handle);
        if pacing::gpu_time::drawn(lane) {
            time_drawn(lane, handle);
        }
    }
    lane
}

/// The launch on `handle` in `lane` is drawn to be timed ([`pacing::gpu_time`]).
#[cold]
#[inline(never)]
fn time_drawn(lane: Lane, handle: CUstream) {
    let timeable = !capturing(handle);
    // Another thread may capture meanwhile (a capture of this thread is on another stream).
    let _relaxed = relaxed_capture();
    pacing::time_drawn_launch(lane, timeable.then_some(handle));
}

/// After the launch on `stream` in `lane`: the marker a queue check asked for.
#[inline(always)]
pub fn leave(lane: Lane, stream: Stream) {
    if let Some(handle) = stream.handle() {
        pacing::after_launch(lane, handle);
    }
}

/// Off the fast path: the lease of `lane` ran out, or a queue check is due. Returns the lane
/// the launch goes to.
#[cold]
#[inline(never)]
fn stop(lane: Lane, stream: Stream) -> Lane {
    let deadline = DEADLINE[lane].load(Acquire);
    if fast_now() >= deadline {
        return renew(stream);
    }
    let Some(handle) = stream.handle() else {
        return lane;
    };
    let left = lease_left_ns(lane);
    if pacing::passes(lane, left) {
        return lane; // the next launch looks again
    }
    if capturing(handle) {
        return lane; // captured work runs when its graph is launched
    }
    // Another thread may capture meanwhile (a capture of this thread is on another stream).
    let _relaxed = relaxed_capture();
    let next = pacing::check(lane, handle, WAIT_LIMIT_NS[lane].load(Relaxed), left);
    if fast_now() >= DEADLINE[lane].load(Acquire) {
        // The wait for room outlasted the lease (a kernel longer than what was left of it still
        // ran): this launch waits for the next lease, instead of running past this one's end.
        return renew(stream);
    }
    let at = if next == u64::MAX {
        u64::MAX
    } else {
        fast_deadline(next)
    };
    let deadline = DEADLINE[lane].load(Acquire);
    if deadline != u64::MAX {
        GATE_AT[lane].store(at.min(deadline), Release);
    }
    lane
}

/// Ends the lease of the launching thread's GPU's lane (when it ran out, was revoked, or is for
/// another GPU of that lane) and waits for the next one, on the launching thread's GPU. Returns
/// that GPU's lane.
#[cold]
#[inline(never)]
fn renew(stream: Stream) -> Lane {
    let start = now_ns();
    let here = devices::current();
    renew_lease(here, stream);
    stats::RENEW_NS.add(now_ns().saturating_sub(start));
    here.lane()
}

fn renew_lease(here: Device, stream: Stream) {
    if exiting() {
        return; // never wait for the daemon at exit
    }
    let lane = here.lane();
    let mut lease = GATE[lane].lock();
    if fast_now() < DEADLINE[lane].load(Acquire) && lease.device.ordinal == here.ordinal {
        // Another thread renewed it while we waited for the lock.
        return;
    }
    if session::attach() != Attach::Managed {
        ungate();
        return;
    }
    if let Some(h) = stream.handle() {
        if capturing(h) {
            // Work captured into a graph runs later, when the graph is launched (gated then).
            return;
        }
    }
    // The queries and synchronizes of the lease's end, beside a capture of another thread.
    let _relaxed = relaxed_capture();
    pauses::ended(lane, pacing::idle_for(lane).unwrap_or(0), now_ns());
    // Another GPU whose ordinal shares the lane: its lease ends first.
    let switching = lease.holding && lease.device.ordinal != here.ordinal;
    if lease.holding && !switching && REVOKED_AT[lane].load(Acquire) == 0 {
        // No other process goes first: carry on without draining the queue, which would leave
        // the GPU idle until the queue fills again.
        if extend(lane, &mut lease) {
            wake_watcher(lane);
            return;
        }
    }
    let used = if lease.holding {
        if switching {
            // The lease's work went to its own context's streams.
            let here_context = current_context();
            if lease.context != 0 && set_context(lease.context) {
                wait_for_lease_work(lane, lease.wait_limit(), |s| {
                    s as usize != CU_STREAM_PER_THREAD
                });
                set_context(here_context);
            }
        } else {
            // This thread may name its own per-thread stream, not another thread's.
            let mine = stream.handle() == Some(CU_STREAM_PER_THREAD as CUstream);
            wait_for_lease_work(lane, lease.wait_limit(), |s| {
                mine || s as usize != CU_STREAM_PER_THREAD
            });
        }
        // Others wait: the memory moves out (charged to this lease, as GPU work of its own).
        residency::hand_over();
        Some((lease.device, end_lease(lane, &mut lease)))
    } else {
        None
    };
    let spin = grant_wait::spin();
    let granted = match used {
        Some((on, busy_ns)) if on.ordinal == here.ordinal => {
            session::renew(lane, here.id, busy_ns, spin)
        }
        Some((on, busy_ns)) => {
            session::release(lane, on.id, busy_ns);
            session::acquire(lane, here.id, spin)
        }
        None => session::acquire(lane, here.id, spin),
    };
    match granted {
        Some(lease_ns) => {
            stats::GRANTS.add(1);
            lease.device = here;
            lease.grant(now_ns(), lease_ns);
            pauses::granted(lane, contended_idle(lease_ns), lease.granted_at);
            lease.context = current_context();
            publish(lane, &lease, lease_ns);
            residency::regained();
            start_watcher(lane);
            wake_watcher(lane);
        }
        None => ungate(),
    }
}

/// Asks the daemon to extend `lease` of `lane`, held; if it does, the lease restarts now and the
/// gate opens for it. Whether it was extended.
fn extend(lane: Lane, lease: &mut Lease) -> bool {
    let Some((lease_ns, contended)) = session::extend(lane, lease.device.id) else {
        return false;
    };
    stats::EXTENSIONS.add(1);
    lease.grant(now_ns(), lease_ns);
    residency::extended(contended);
    publish(lane, lease, lease_ns);
    true
}

/// Opens the gate of `lane` for `lease`, just granted (or extended) for `lease_ns`. The first
/// launch checks the queue.
fn publish(lane: Lane, lease: &Lease, lease_ns: u64) {
    LEASE_END_NS[lane].store(lease.deadline, Relaxed);
    LEASE_ORDINAL[lane].store(lease.device.ordinal, Relaxed);
    WAIT_LIMIT_NS[lane].store(lease.wait_limit(), Relaxed);
    REVOKED_AT[lane].store(0, Release);
    pacing::restart_count(lane);
    DEADLINE[lane].store(fast_deadline(lease_ns), Release);
    GATE_AT[lane].store(0, Release);
    // a revocation of this lease that came before its grant was handled
    crate::lease::published(lane);
}

/// Ends `lease` of `lane`, whose work was waited for; returns the busy time to report.
fn end_lease(lane: Lane, lease: &mut Lease) -> u64 {
    pacing::drained(lane);
    let busy = pacing::take_busy(lane, lease.end(now_ns()));
    withdraw(lane);
    busy
}

fn start_watcher(lane: Lane) {
    if WATCHER[lane].swap(true, AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("gpushare-lease".into())
        .spawn(move || {
            let _ = std::panic::catch_unwind(move || watch(lane));
        });
    match spawned {
        Ok(handle) => *WATCHER_THREAD[lane].lock() = Some(handle.thread().clone()),
        Err(_) => WATCHER[lane].store(false, Release),
    }
}

/// How long after its end an unused lease is given back by the lease thread: long enough
/// that no launch that passed the gate before the deadline can still be on its way.
pub fn idle_slack(lease_ns: u64) -> u64 {
    (lease_ns / 4).max(2_000_000)
}

/// How long a process holding a lease that others waited for may leave the GPU without work
/// before the lease thread gives the lease back (ahead of its end): an eighth of the lease, at
/// least [`QUIET_NS`]. A training loop that waits 20 ms on the host after each step (data
/// loading, a sleep) otherwise held the token through it, the GPU idle while others waited, and
/// was charged those 20 ms as GPU time: it ran so far ahead of its due that it then got nothing
/// for seconds. Host gaps shorter than this keep the lease, so that a job that synchronizes
/// every step does not lose its turn at each.
pub fn contended_idle(lease_ns: u64) -> u64 {
    (lease_ns / 8).max(QUIET_NS)
}

/// How often the lease thread samples the GPU queue while a lease runs.
const SAMPLE_NS: u64 = 250_000;
/// The same on a relaxed lease ([`pacing::relaxed`]): its samples only lower the process's demand
/// estimate (leases alone measure it), and most such leases end in an extension, which reports
/// none.
const RELAXED_SAMPLE_NS: u64 = 4_000_000;
/// How long after a revocation the lease thread gives the lease back itself (if no launch did):
/// time for a launch that passed the gate just before to reach the driver.
const REVOKE_SLACK_NS: u64 = 200_000;
/// An interactive process with nothing pending and no launch for this long gives its lease back.
/// The batch leases it revoked wait for that to launch again: held until 0.5 ms idle (sampled
/// every quarter millisecond), an inference client's 1.37 ms leases, 96 a second, cost a
/// client of 5 ms kernels beside it 0.46 ms each on an H100, 4.4 points of the GPU against
/// the same inference in a batch client.
pub const INTERACTIVE_IDLE_NS: u64 = 200_000;
/// How often the lease thread samples an interactive process's lease: its end waits for the
/// first sample after [`INTERACTIVE_IDLE_NS`] idle.
const INTERACTIVE_SAMPLE_NS: u64 = 100_000;
/// A lease past its end (and [`idle_slack`]) is given back once its process has left the GPU
/// without work for this long ([`pacing::idle_for`]). A process that waits in a synchronize for
/// its own queued work launches again as soon as that work is done: giving the lease back while
/// the work still runs would hand the token over just before the process asks again, and a job
/// that synchronizes every few kernels would then lose its turn at every lease end.
pub const QUIET_NS: u64 = 1_000_000;

/// The lease thread: samples how busy the lease keeps the GPU, asks ahead of its end to extend
/// a lease the process is using ([`extend_ahead`]), and gives the token back when the process
/// stops using it (after the lease's end, at once when revoked, and for an interactive client
/// as soon as it is idle), instead of at its next launch, so that others do not wait for the
/// daemon to take it back.
fn watch(lane: Lane) {
    // This thread's queries of the GPU queue must not invalidate a capture of the program's.
    let _relaxed = relaxed_capture();
    loop {
        if EXITING.load(Acquire) || DEADLINE[lane].load(Acquire) == u64::MAX {
            WATCHER[lane].store(false, Release);
            return;
        }
        let seen = *GATE[lane].lock();
        if !seen.holding {
            // Woken by the next grant.
            std::thread::park_timeout(Duration::from_millis(500));
            continue;
        }
        pacing::sample(lane, || sample_stream(lane, &seen));
        // one look at the queue for every decision below
        let idle = pacing::idle_for(lane);
        pauses::sampled(lane, idle, now_ns());
        if extension_due(lane, &seen, idle) {
            extend_early(lane, &seen);
            continue;
        }
        if give_back_due(lane, &seen, idle) {
            // Closes the gate first, as a revocation does: a launch that passed it just before
            // reaches the driver within the revocation's slack, and the lease goes back then.
            lease::give_back_soon(lane);
            continue;
        }
        if !release_due(lane, &seen, idle) {
            let period = if INTERACTIVE.load(Relaxed) {
                INTERACTIVE_SAMPLE_NS
            } else if pacing::relaxed(lane) {
                RELAXED_SAMPLE_NS
            } else {
                SAMPLE_NS
            };
            std::thread::park_timeout(Duration::from_nanos(period));
            continue;
        }
        let mut lease = GATE[lane].lock();
        if *lease != seen || EXITING.load(Acquire) {
            continue; // renewed or released by a launching thread meanwhile
        }
        // Per-thread default streams of launching threads cannot be named from here.
        if lease.context != 0 && set_context(lease.context) {
            wait_for_lease_work(lane, lease.wait_limit(), |s| {
                s as usize != CU_STREAM_PER_THREAD
            });
        }
        if CONTENDED[lane].load(Relaxed) {
            // Others wait: the memory moves out, as at a hand-over in a launching thread.
            residency::hand_over();
        }
        let device: Device = lease.device;
        let busy = end_lease(lane, &mut lease);
        session::release(lane, device.id, busy);
        stats::GIVEN_BACK.add(1);
    }
}

/// How long before its end the lease thread asks to extend a lease of `lease_ns` that its
/// process is using: a quarter of it. Asked at the end by the launching thread, as before, an
/// extension cost that thread a round trip to the daemon at every lease's end, and the queue of
/// a process alone shrank to daemon.queue_ahead by then each time; so the GPU idled a little at
/// each lease's end while nothing else waited. The daemon grants it as it would at the end (no
/// waiting process goes first, not a probe, the limit allows it), charging what ran so far; a
/// process that arrives meanwhile waits at most this much longer, once.
fn extend_ahead(lease_ns: u64) -> u64 {
    lease_ns / 4
}

/// The lease each lane's lease thread last asked to extend ahead of its end (its grant time):
/// asked once per lease, however the daemon answers.
static ASKED_AHEAD: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);

/// Whether the lease thread should ask now to extend `lease` of `lane` ahead of its end: a
/// batch client's lease, not revoked, in the last [`extend_ahead`] of it, not asked for yet,
/// while the process has work on the GPU or launched within [`QUIET_NS`] (a process that left
/// the GPU keeps no token by asking ahead).
fn extension_due(lane: Lane, lease: &Lease, idle: Option<u64>) -> bool {
    let now = now_ns();
    let left = lease.deadline.saturating_sub(now);
    left > 0
        && left <= extend_ahead(lease.deadline - lease.granted_at)
        && ASKED_AHEAD[lane].load(Relaxed) != lease.granted_at
        && REVOKED_AT[lane].load(Acquire) == 0
        && !INTERACTIVE.load(Relaxed)
        && idle.is_none_or(|t| t < QUIET_NS)
}

/// Asks the daemon to extend `seen`, the lease of `lane` still held, ahead of its end.
fn extend_early(lane: Lane, seen: &Lease) {
    ASKED_AHEAD[lane].store(seen.granted_at, Relaxed);
    let mut lease = GATE[lane].lock();
    if *lease != *seen || EXITING.load(Acquire) || REVOKED_AT[lane].load(Acquire) != 0 {
        return; // renewed or released by a launching thread meanwhile
    }
    if extend(lane, &mut lease) {
        stats::EXTENDED_AHEAD.add(1);
    }
}

/// The stream the lease thread of `lane` may record a sampling marker on: the one launched on
/// last, if this thread can name it (not a per-thread default stream) and it is not capturing,
/// with the lease's context made current here.
fn sample_stream(lane: Lane, lease: &Lease) -> Option<CUstream> {
    let stream = streams::last(lane)?;
    if stream as usize == CU_STREAM_PER_THREAD || lease.context == 0 {
        return None;
    }
    (set_context(lease.context) && !capturing(stream)).then_some(stream)
}

/// Whether the lease thread should give back `lease`, which others waited for when it was
/// granted or extended, before its end: a batch lease, not revoked, whose process has left the
/// GPU (nothing queued, nothing launched, `idle`) since the lease began for [`contended_idle`],
/// or for [`pauses::PAUSE_NS`] if its pauses have lately gone on past that
/// ([`pauses::stays_away`]).
fn give_back_due(lane: Lane, lease: &Lease, idle: Option<u64>) -> bool {
    let since_grant = now_ns().saturating_sub(lease.granted_at);
    let limit = if pauses::stays_away(lane) {
        pauses::PAUSE_NS
    } else {
        contended_idle(lease.deadline - lease.granted_at)
    };
    CONTENDED[lane].load(Relaxed)
        && !INTERACTIVE.load(Relaxed)
        && REVOKED_AT[lane].load(Acquire) == 0
        && idle.is_some_and(|t| t.min(since_grant) >= limit)
}

/// Whether the lease thread should give `lease` of `lane` back now (its process `idle`, as
/// [`pacing::idle_for`] says).
fn release_due(lane: Lane, lease: &Lease, idle: Option<u64>) -> bool {
    let now = now_ns();
    let revoked = REVOKED_AT[lane].load(Acquire);
    if revoked != 0 {
        return now >= revoked + REVOKE_SLACK_NS;
    }
    if INTERACTIVE.load(Relaxed) && idle.is_some_and(|t| t >= INTERACTIVE_IDLE_NS) {
        return true;
    }
    now >= lease
        .deadline
        .saturating_add(idle_slack(lease.deadline - lease.granted_at))
        && idle.is_some_and(|t| t >= QUIET_NS)
}

fn set_context(ctx: usize) -> bool {
    type F = unsafe extern "C" fn(*mut c_void) -> CUresult;
    // SAFETY: signature of cuCtxSetCurrent; the context was current in a launching thread.
    match unsafe { helper::<F>(Helper::cuCtxSetCurrent) } {
        Some(set) => (unsafe { set(ctx as *mut c_void) }) == CUDA_SUCCESS,
        None => false,
    }
}

/// True if `stream` is capturing (or its state cannot be read: then do not touch it either).
fn capturing(stream: CUstream) -> bool {
    type F = unsafe extern "C" fn(CUstream, *mut u32) -> CUresult;
    // SAFETY: signature of cuStreamIsCapturing.
    let Some(is_capturing) = (unsafe { helper::<F>(Helper::cuStreamIsCapturing) }) else {
        return false;
    };
    let mut status = CU_STREAM_CAPTURE_STATUS_NONE;
    // SAFETY: valid out-pointer.
    let r = unsafe { is_capturing(stream, &mut status) };
    r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE
}

/// Waits for the work launched during the lease of `lane` on every stream it went to (those `nameable`
/// from this thread and not capturing): one timing-off event, recorded on each stream in turn
/// and synchronized (its callers are in the relaxed capture mode, [`relaxed_capture`]). Returns
/// true if all of them were already idle.
fn wait_for_lease_work(lane: Lane, limit_ns: u64, nameable: impl Fn(CUstream) -> bool) -> bool {
    let mut used = [std::ptr::null_mut(); streams::MAX];
    let n = streams::take(lane, &mut used);
    type Create = unsafe extern "C" fn(*mut CUevent, u32) -> CUresult;
    type Record = unsafe extern "C" fn(CUevent, CUstream) -> CUresult;
    type OnEvent = unsafe extern "C" fn(CUevent) -> CUresult;
    // SAFETY: the driver's signatures of these functions.
    let (Some(create), Some(record), Some(query), Some(destroy)) = (unsafe {
        (
            helper::<Create>(Helper::cuEventCreate),
            helper::<Record>(Helper::cuEventRecord),
            helper::<OnEvent>(Helper::cuEventQuery),
            helper::<OnEvent>(Helper::cuEventDestroy_v2),
        )
    }) else {
        return false;
    };
    let mut idle = true;
    // SAFETY: valid out-pointers; the event is created and destroyed here.
    unsafe {
        let mut event: CUevent = std::ptr::null_mut::<c_void>();
        if create(&mut event, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS {
            for &stream in &used[..n] {
                if !nameable(stream) || capturing(stream) {
                    continue;
                }
                if record(event, stream) == CUDA_SUCCESS && query(event) != CUDA_SUCCESS {
                    idle = false;
                    wait_until_done(|| query(event) != CUDA_NOT_READY, limit_ns);
                }
            }
            destroy(event);
        } else {
            idle = false;
        }
    }
    idle
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_ends_with_its_wall_time() {
        let mut l = Lease::NONE;
        l.grant(1_000, 20_000_000);
        assert!(l.holding);
        assert_eq!(l.deadline, 20_001_000);
        assert_eq!(l.end(25_001_000), 25_000_000);
        assert_eq!(l, Lease::NONE);
    }

    #[test]
    fn unused_leases_are_given_back_a_quarter_lease_late() {
        assert_eq!(idle_slack(20_000_000), 5_000_000);
        assert_eq!(idle_slack(1_000_000), 2_000_000);
    }

    #[test]
    fn bounded_waits() {
        let mut l = Lease::NONE;
        l.grant(0, 20_000_000);
        assert_eq!(l.wait_limit(), 100_000_000);
        l.grant(0, 50_000_000);
        assert_eq!(l.wait_limit(), 200_000_000);
        let start = now_ns();
        assert!(!wait_until_done(|| false, 2_000_000));
        assert!(now_ns() - start >= 2_000_000);
        assert!(wait_until_done(|| true, 0));
    }

    #[test]
    fn huge_leases_do_not_overflow() {
        let mut l = Lease::NONE;
        l.grant(5, u64::MAX);
        assert_eq!(l.deadline, u64::MAX);
    }

    #[test]
    fn per_thread_null_stream_is_named_explicitly() {
        let s = Stream::Of {
            handle: std::ptr::null_mut(),
            per_thread: true,
        };
        assert_eq!(s.handle(), Some(CU_STREAM_PER_THREAD as CUstream));
        let s = Stream::Of {
            handle: std::ptr::null_mut(),
            per_thread: false,
        };
        assert_eq!(s.handle(), Some(std::ptr::null_mut()));
        assert_eq!(Stream::Unknown.handle(), None);
    }
}
