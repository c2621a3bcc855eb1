//! The token gate: a launch proceeds while this process's lease runs.
//!
//! Fast path (every launch): one clock read and a compare against an atomic deadline. When the
//! lease has run out, one thread (under the gate lock) first asks to extend it, which the daemon
//! grants when nobody else waits; otherwise it waits for the work launched during the lease,
//! reports the GPU time to the daemon, and blocks until the next grant. The other launching
//! threads of the process wait on the lock, since they share the token.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::time::Duration;

use crate::clock::{fast_deadline, fast_now, now_ns};
use crate::cuda::*;
use crate::driver::{helper, Helper};
use crate::fork_safe::ForkSafe;
use crate::residency;
use crate::session::{self, Attach};
use crate::streams;

/// End of the current lease in [`fast_now`] units; 0 = no lease, `u64::MAX` = ungated.
static DEADLINE: AtomicU64 = AtomicU64::new(0);
/// End of the current lease in [`now_ns`] units (0: none), for readers off the launch path.
static LEASE_END_NS: AtomicU64 = AtomicU64::new(0);
static GATE: ForkSafe<Lease> = ForkSafe::new(Lease::NONE);
/// The idle releaser thread runs (see [`watch`]).
static WATCHER: AtomicBool = AtomicBool::new(false);
/// The idle releaser, woken at each grant.
static WATCHER_THREAD: ForkSafe<Option<std::thread::Thread>> = ForkSafe::new(None);
/// Set by an `atexit` handler: from then on the hook neither waits for nor talks to the daemon,
/// and the idle releaser makes no more driver calls.
static EXITING: AtomicBool = AtomicBool::new(false);

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

/// Waits, if needed, until this process may launch on `stream`.
#[inline(always)]
pub fn enter(stream: Stream) {
    let deadline = DEADLINE.load(Relaxed);
    // Ungated processes read no clock (it costs a launch more than the compare).
    if deadline != u64::MAX && fast_now() >= deadline {
        renew(stream);
    }
    if let Some(handle) = stream.handle() {
        streams::note(handle);
    }
}

/// Launches pass through from now on (unmanaged).
pub fn ungate() {
    DEADLINE.store(u64::MAX, Release);
}

#[cold]
#[inline(never)]
fn renew(stream: Stream) {
    if exiting() {
        return; // never wait for the daemon at exit
    }
    let mut lease = GATE.lock();
    if fast_now() < DEADLINE.load(Acquire) {
        return; // another thread renewed it while we waited for the lock
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
    if lease.holding {
        // Nobody waits behind this process: carry on without draining its queue, which would
        // leave the GPU idle until the queue fills again.
        if let Some(lease_ns) = session::extend() {
            lease.grant(now_ns(), lease_ns);
            residency::alone();
            publish(&lease, lease_ns);
            wake_watcher();
            return;
        }
    }
    let used = if lease.holding {
        // This thread may name its own per-thread stream, not another thread's.
        let mine = stream.handle() == Some(CU_STREAM_PER_THREAD as CUstream);
        let idle = wait_for_lease_work(lease.wait_limit(), |s| {
            mine || s as usize != CU_STREAM_PER_THREAD
        });
        // Others wait: the memory moves out (charged to this lease, as GPU work of its own).
        residency::hand_over();
        let gpu_ns = lease.end(now_ns(), idle);
        withdraw();
        Some(gpu_ns)
    } else {
        None
    };
    let granted = match used {
        Some(gpu_ns) => session::renew(gpu_ns),
        None => session::acquire(),
    };
    match granted {
        Some(lease_ns) => {
            lease.grant(now_ns(), lease_ns);
            lease.context = current_context();
            publish(&lease, lease_ns);
            residency::regained();
            start_watcher();
            wake_watcher();
        }
        None => ungate(),
    }
}

/// Opens the gate for `lease`, just granted for `lease_ns`.
fn publish(lease: &Lease, lease_ns: u64) {
    LEASE_END_NS.store(lease.deadline, Relaxed);
    DEADLINE.store(fast_deadline(lease_ns), Release);
}

/// Closes the gate: no lease.
fn withdraw() {
    LEASE_END_NS.store(0, Relaxed);
    DEADLINE.store(0, Release);
}

/// The context current in this thread (0: none, or it cannot be read).
pub fn current_context() -> usize {
    type F = unsafe extern "C" fn(*mut *mut c_void) -> CUresult;
    let mut ctx = std::ptr::null_mut();
    // SAFETY: signature of cuCtxGetCurrent; valid out-pointer.
    match unsafe { helper::<F>(Helper::cuCtxGetCurrent) } {
        Some(get) if (unsafe { get(&mut ctx) }) == CUDA_SUCCESS => ctx as usize,
        _ => 0,
    }
}

/// The device of the context current in this thread.
pub fn current_device() -> Option<CUdevice> {
    type F = unsafe extern "C" fn(*mut CUdevice) -> CUresult;
    let mut dev: CUdevice = 0;
    // SAFETY: the signature of cuCtxGetDevice; a valid out-pointer.
    let get = unsafe { helper::<F>(Helper::cuCtxGetDevice) }?;
    (unsafe { get(&mut dev) } == CUDA_SUCCESS).then_some(dev)
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
    }
    if !REGISTERED.swap(true, AcqRel) {
        // SAFETY: registers a plain function.
        unsafe { libc::atexit(mark_exiting) };
    }
}

fn start_watcher() {
    if WATCHER.swap(true, AcqRel) {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("gpushare-lease".into())
        .spawn(|| {
            let _ = std::panic::catch_unwind(watch);
        });
    match spawned {
        Ok(handle) => *WATCHER_THREAD.lock() = Some(handle.thread().clone()),
        Err(_) => WATCHER.store(false, Release),
    }
}

fn wake_watcher() {
    if let Some(t) = WATCHER_THREAD.lock().as_ref() {
        t.unpark();
    }
}

/// How long after its end an unused lease is given back by the idle releaser: long enough
/// that no launch that passed the gate before the deadline can still be on its way.
pub fn idle_slack(lease_ns: u64) -> u64 {
    (lease_ns / 4).max(2_000_000)
}

/// The idle releaser: a process that stops launching gives the token back shortly after its
/// lease ends, instead of at its next launch, so that others do not wait for the daemon to
/// take it back.
fn watch() {
    loop {
        if EXITING.load(Acquire) || DEADLINE.load(Acquire) == u64::MAX {
            WATCHER.store(false, Release);
            return;
        }
        let seen = *GATE.lock();
        let now = now_ns();
        if !seen.holding {
            // Woken by the next grant.
            std::thread::park_timeout(Duration::from_millis(500));
            continue;
        }
        let wake = seen
            .deadline
            .saturating_add(idle_slack(seen.deadline - seen.granted_at));
        if now < wake {
            std::thread::park_timeout(Duration::from_nanos(wake - now));
            continue;
        }
        let mut lease = GATE.lock();
        if *lease != seen || EXITING.load(Acquire) {
            continue; // renewed or released by a launching thread meanwhile
        }
        // Per-thread default streams of launching threads cannot be named from here.
        let idle = lease.context != 0
            && set_context(lease.context)
            && wait_for_lease_work(lease.wait_limit(), |s| s as usize != CU_STREAM_PER_THREAD);
        let gpu_ns = lease.end(now_ns(), idle);
        withdraw();
        session::release(gpu_ns);
    }
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

/// Waits for the work launched during the lease on every stream it went to (those `nameable`
/// from this thread and not capturing): one timing-off event, recorded on each stream in turn
/// and synchronized, in the relaxed capture mode (so that captures in other threads are not
/// disturbed). Returns true if all of them were already idle.
fn wait_for_lease_work(limit_ns: u64, nameable: impl Fn(CUstream) -> bool) -> bool {
    let mut used = [std::ptr::null_mut(); streams::MAX];
    let n = streams::take(&mut used);
    type Exchange = unsafe extern "C" fn(*mut u32) -> CUresult;
    type Create = unsafe extern "C" fn(*mut CUevent, u32) -> CUresult;
    type Record = unsafe extern "C" fn(CUevent, CUstream) -> CUresult;
    type OnEvent = unsafe extern "C" fn(CUevent) -> CUresult;
    // SAFETY: the driver's signatures of these functions.
    let (Some(exchange), Some(create), Some(record), Some(query), Some(destroy)) = (unsafe {
        (
            helper::<Exchange>(Helper::cuThreadExchangeStreamCaptureMode),
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
        let mut mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        let exchanged = exchange(&mut mode) == CUDA_SUCCESS;
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
        if exchanged {
            exchange(&mut mode);
        }
    }
    idle
}

/// `cuEventQuery`'s "not yet".
const CUDA_NOT_READY: CUresult = 600;

/// Polls `done` (an event query) until it says so or `limit_ns` passed. Bounded, unlike
/// `cuEventSynchronize`: work that waits on another process (which waits for the token) must
/// not hold the token forever. Says once per process when it gives up.
fn wait_until_done(done: impl Fn() -> bool, limit_ns: u64) -> bool {
    static SAID: AtomicBool = AtomicBool::new(false);
    let start = now_ns();
    let mut polls = 0u32;
    while !done() {
        if now_ns().saturating_sub(start) > limit_ns {
            if !SAID.swap(true, AcqRel) {
                crate::guard::say(format_args!(
                    "the work of a lease was still running after {} ms; the token is given back anyway",
                    limit_ns / 1_000_000
                ));
            }
            return false;
        }
        polls += 1;
        if polls < 64 {
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    true
}

/// The lease this process holds, as the gate's bookkeeping (pure, unit-tested).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub holding: bool,
    pub granted_at: u64,
    pub deadline: u64,
    /// Context current in the thread that asked for it (0: unknown).
    pub context: usize,
}

impl Lease {
    pub const NONE: Lease = Lease {
        holding: false,
        granted_at: 0,
        deadline: 0,
        context: 0,
    };

    /// A lease from `now` for `lease_ns`, in the context noted before (an extension keeps it).
    pub fn grant(&mut self, now: u64, lease_ns: u64) {
        *self = Lease {
            holding: true,
            granted_at: now,
            deadline: now.saturating_add(lease_ns),
            context: self.context,
        };
    }

    /// How long the end of this lease waits for its work: four leases, at least 100 ms.
    pub fn wait_limit(&self) -> u64 {
        (self.deadline.saturating_sub(self.granted_at))
            .saturating_mul(4)
            .max(100_000_000)
    }

    /// Ends the lease after its work finished at `now`; returns the GPU time to report. When
    /// the stream was already idle the work ended at an unknown time within the lease: charge
    /// at most the lease.
    pub fn end(&mut self, now: u64, idle: bool) -> u64 {
        let busy_until = if idle { now.min(self.deadline) } else { now };
        let gpu_ns = busy_until.saturating_sub(self.granted_at);
        *self = Lease::NONE;
        gpu_ns
    }
}

pub fn after_fork_in_child() {
    withdraw();
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

    #[test]
    fn a_busy_lease_charges_until_the_work_finished() {
        let mut l = Lease::NONE;
        l.grant(1_000, 20_000_000);
        assert!(l.holding);
        assert_eq!(l.deadline, 20_001_000);
        assert_eq!(l.end(25_001_000, false), 25_000_000);
        assert_eq!(l, Lease::NONE);
    }

    #[test]
    fn an_idle_lease_charges_at_most_its_length() {
        let mut l = Lease::NONE;
        l.grant(1_000, 20_000_000);
        assert_eq!(l.end(5_000_000_000, true), 20_000_000);
        l.grant(1_000, 20_000_000);
        assert_eq!(l.end(11_000, true), 10_000);
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
