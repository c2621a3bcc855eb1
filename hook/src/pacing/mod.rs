//! Pacing of a lease holder's GPU queue: the checks on the launch path and the lease thread's
//! samples. Each lane ([`crate::lanes`]) paces its own GPU's queue. The lease's mode and queue budget are in [`mode`], the markers in flight and the GPU
//! time per launch learnt from them in [`pacer`].
//!
//! Markers (timing-off events) recorded right after launches tell how far the GPU lags behind
//! this process's launches. While the newest marker is done, the queue is empty and a marker is
//! recorded after a launch at most every [`CHECK_EVERY_NS`] and, for launches known to be short,
//! every few launches (cheap for launch-bound loops and those that synchronize often); once
//! a marker is found pending, the process is *backlogged*: every launch counts the launches
//! queued since the newest marker seen done, a launch waits while they would take more than the
//! queue budget to run, estimated from how fast markers complete, and a marker follows every few
//! launches, about eight per budget ([`Pacer::spacing`]). On a lease of its own the budget is
//! what is left of the lease plus daemon.queue_ahead ([`queue_budget`](mode::queue_budget)),
//! once markers taught the time per launch ([`Pacer::room`]): the
//! queue may run ahead of the program early in a lease and shrinks towards its end. So the end
//! of a lease drains in about daemon.queue_ahead (plus one kernel), whatever the kernel sizes and
//! however rarely the program synchronizes, and a launch that neither waits nor is due a marker
//! calls nothing in the driver ([`passes`]).
//!
//! The lease thread samples whether the newest marker is pending; the fraction of samples that
//! found work pending is the lease's *busy* fraction, reported to the daemon as the process's
//! demand on the GPU.

pub mod activity;
pub mod gpu_time;
mod mode;
mod pacer;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

use crate::clock::now_ns;
use crate::cuda::*;
use crate::driver::{helper, relaxed_capture, Helper};
use crate::fork_safe::ForkSafe;
use crate::kernel_timer;
use crate::lanes::{Lane, PerLane, MAX};
use crate::stats;
#[cfg(test)]
pub use mode::shared;
use mode::{check_every, current_budget, lowered_by_timing, CHECK_EVERY_NS, SHARED, TIGHT};
pub use mode::{configure, relaxed, set_extended, set_shared, set_tight, set_under_mps};
use pacer::{lower, query_fn, Pacer};

/// Record a marker after the launch under way (set at a check, taken after the launch).
static MARK_AFTER: PerLane<AtomicBool> = PerLane([const { AtomicBool::new(false) }; MAX]);
/// Launches of this process on nameable streams, counted after each, per lane.
static LAUNCHES: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
/// `LAUNCHES` at the last report to the daemon ([`unreported_launches`]).
static REPORTED: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
/// A `Joined` whose time is later than its arrival or older than this is taken as of its
/// arrival (a daemon in another time namespace, whose `CLOCK_MONOTONIC` is not this one's).
const MAX_JOIN_LAG_NS: u64 = 1_000_000_000;

static PACER: PerLane<ForkSafe<Pacer>> = PerLane([const { ForkSafe::new(Pacer::new()) }; MAX]);

/// The pacer of `lane`, locked.
fn pacer(lane: Lane) -> std::sync::MutexGuard<'static, Pacer> {
    let mut p = PACER[lane].lock();
    p.lane = lane;
    p
}

/// Another lease started beside the current one, granted alone, at `at_ns` (the daemon's
/// `Joined`): the lease is shared from now on, and what markers that completed since then taught
/// is taken back. They also waited for the other's work: a process of short kernels would
/// otherwise take the other's time slices for its own kernels' time. What was learnt before
/// stays: a lease that others join every time still learns in the part it runs alone.
pub fn joined(lane: Lane, at_ns: u64) {
    set_shared(lane, true);
    let now = now_ns();
    let since = if at_ns <= now && now - at_ns <= MAX_JOIN_LAG_NS {
        at_ns
    } else {
        now
    };
    pacer(lane).forget_learnt_since(since);
}

/// A check on the launch path (before a launch on `stream`, a nameable stream that is not
/// capturing): waits while too much work is queued, and asks for a marker after the launch.
/// Returns how long until the next check (0: at the next launch). `wait_limit_ns` bounds a wait;
/// `left_ns` is what is left of the lease.
///
/// Beside others ([`lowered_by_timing`]), a process taken for one with long kernels, or one
/// whose own work is still queued, has some of its launches timed ([`kernel_timer`]): the pair
/// starts right before the launch, after any wait here.
///
/// Until the process knows its GPU time per launch, every launch checks, and launches are timed
/// on their own: the first whose launch call was not slow on the host gives the first estimate.
pub fn check(lane: Lane, stream: CUstream, wait_limit_ns: u64, left_ns: u64) -> u64 {
    let (next, per_launch, queued) = check_queue(lane, wait_limit_ns, left_ns);
    if per_launch == 0 || (lowered_by_timing(lane) && (per_launch >= CHECK_EVERY_NS || queued)) {
        kernel_timer::before_launch(lane, stream, queued);
    }
    next
}

/// A launch of `lane` timed on its own: one drawn by count is a sample of the GPU time the
/// lease's work takes ([`gpu_time`]); one the pacer timed, the first estimate of the GPU time
/// per launch, or beside others ([`lowered_by_timing`]) a higher one ([`Pacer::raise_from`],
/// from launches timed behind the process's own queue) or, for kernels taken for long ones, a
/// lower one.
fn learn_timed(p: &mut Pacer, lane: Lane, timed: kernel_timer::Timed) {
    if timed.drawn {
        gpu_time::timed(lane, timed.ns, timed.shared);
        return;
    }
    let (behind, timed) = (timed.behind, timed.ns);
    if p.per_launch_ns == 0 {
        p.set_per_launch(timed.max(1));
    } else if lowered_by_timing(lane) {
        if behind && p.raise_from(timed) {
            stats::RAISED.add(1);
            return;
        }
        let lowered = lower(p.per_launch_ns, timed);
        if p.per_launch_ns >= CHECK_EVERY_NS && lowered < p.per_launch_ns {
            stats::LOWERED.add(1);
            p.set_per_launch(lowered);
        }
    }
}

/// Before the launch on `stream` drawn to be timed ([`gpu_time::drawn`]), a nameable stream
/// that is not capturing: takes the timing before it if it completed, starts this one's, and
/// draws the next (`None`: the stream captures; the next launch is drawn instead).
#[cold]
pub fn time_drawn_launch(lane: Lane, stream: Option<CUstream>) {
    if let Some(stream) = stream {
        if let Some(timed) = kernel_timer::take(lane) {
            learn_timed(&mut pacer(lane), lane, timed);
        }
        kernel_timer::before_drawn_launch(lane, stream, SHARED[lane].load(Relaxed));
    }
    gpu_time::draw_next(lane, LAUNCHES[lane].load(Relaxed));
}

/// [`check`]'s wait. The pacer's lock is not held while waiting: the lease thread samples the
/// queue meanwhile (a launching thread that waited under the lock would starve it of samples,
/// and the lease would be reported idle). Returns how long until the next check, and the GPU
/// time per launch then (read under the lock the check holds, not in a second one) and whether
/// work of this process was still pending at the last look.
fn check_queue(lane: Lane, wait_limit_ns: u64, left_ns: u64) -> (u64, u64, bool) {
    let Some(query) = query_fn() else {
        return (u64::MAX, pacer(lane).per_launch_ns, false);
    };
    let tight = TIGHT[lane].load(Relaxed);
    let budget = current_budget(lane, left_ns);
    let start = now_ns();
    stats::CHECKS.add(1);
    let mut first = true;
    loop {
        let (event, limit) = {
            let mut p = pacer(lane);
            let pending = p.collect(query);
            if first {
                p.backlogged = pending > 0;
                p.checked_launches = LAUNCHES[lane].load(Relaxed);
                if let Some(timed) = kernel_timer::take(lane) {
                    learn_timed(&mut p, lane, timed);
                }
                if pending == 0 {
                    MARK_AFTER[lane].store(true, Relaxed);
                    // Unknown kernels too: a new process of 13 ms kernels that never
                    // synchronizes launched hundreds of them between its first two checks (with
                    // the fake driver, whose launches take a microsecond), and the others waited
                    // seconds behind that queue.
                    let next = if p.checks_each_launch() {
                        0
                    } else {
                        check_every(lane)
                    };
                    return (next, p.per_launch_ns, false);
                }
            }
            let shared = SHARED[lane].load(Relaxed);
            // Beside others this process's markers are pending often, for the others' turns too:
            // a launch-bound process checked at every launch would pay for it at every launch.
            // Its checks stay spaced then (unless its kernels are known to be long).
            let next_check = if shared && !p.checks_each_launch() {
                check_every(lane)
            } else {
                0
            };
            let launches = LAUNCHES[lane].load(Relaxed);
            if first {
                // checks spaced in time mark each time; else every few launches
                if next_check != 0 || p.mark_due(launches, budget) {
                    MARK_AFTER[lane].store(true, Relaxed);
                }
                first = false;
            }
            if p.room(launches, budget) {
                return (next_check, p.per_launch_ns, p.len > 0);
            }
            let limit = p.wait_left(wait_limit_ns, now_ns().saturating_sub(start), shared);
            let short = p.short_beside_others(budget, relaxed(lane));
            let per_launch = p.per_launch_ns;
            match p.front() {
                Some(_) if shared && short && !tight => return (next_check, per_launch, true),
                Some(m) => (m.event, limit),
                None => return (next_check, per_launch, false),
            }
        };
        // SAFETY: an event of ours (markers' events are reused, never destroyed, once recorded).
        let waited_from = now_ns();
        let last_pending = std::cell::Cell::new(waited_from);
        let done = wait_until_done(
            || {
                let pending = unsafe { query(event) } == CUDA_NOT_READY;
                if pending {
                    last_pending.set(now_ns());
                }
                !pending
            },
            limit,
        );
        if done {
            // Watched until it completed: its completion time is known (to a poll), and the
            // time per launch learns from it.
            let mut p = pacer(lane);
            if let Some(m) = p.front().filter(|m| m.event == event) {
                m.seen_pending_at = m.seen_pending_at.max(last_pending.get());
            }
        }
        stats::CHECK_WAITS.add(1);
        stats::CHECK_WAIT_NS.add(now_ns().saturating_sub(waited_from));
        if !done {
            // Held up by something else: short waits until some of this queue completes.
            let mut p = pacer(lane);
            p.stalled = true;
            return (0, p.per_launch_ns, p.len > 0);
        }
    }
}

/// Whether the next launch may go without a check ([`check`]): on a lease of its own (not
/// beside others), with `left_ns` of the lease left: for a backlogged process (markers pending
/// at the last look) whose GPU time per launch is known, with fewer launches queued than the
/// budget allows and the next marker not yet due ([`Pacer::mark_due`]); and for one whose queue
/// was empty at the last look, whose launches are known to be short, until as many launches as
/// a backlogged one's markers are apart ([`Pacer::spacing`]) followed that look. A loop of
/// short kernels that synchronizes after each finds its queue empty at every check, and spaced
/// by time alone ([`CHECK_EVERY_NS`]) its checks came at every other launch or, for kernels of
/// 100 us and more, at every one (a query and a record in the driver each). Reads the pacer's
/// state alone, no driver call.
pub fn passes(lane: Lane, left_ns: u64) -> bool {
    if SHARED[lane].load(Relaxed) || MARK_AFTER[lane].load(Relaxed) {
        return false;
    }
    let budget = current_budget(lane, left_ns);
    let launches = LAUNCHES[lane].load(Relaxed);
    let p = pacer(lane);
    let pass = if p.stalled {
        false
    } else if p.backlogged {
        p.len > 0
            && p.per_launch_ns != 0
            && p.room(launches, budget)
            && !p.mark_due(launches, budget)
    } else {
        !p.checks_each_launch() && p.since_check(launches) + 1 < p.spacing(budget)
    };
    if pass {
        stats::PASSED.add(1);
    }
    pass
}

/// After a launch on `stream`: ends the timing of the launch, if one started before it, and
/// records the marker a check asked for.
#[inline(always)]
pub fn after_launch(lane: Lane, stream: CUstream) {
    let launches = LAUNCHES[lane].fetch_add(1, Relaxed) + 1;
    activity::launched(lane);
    gpu_time::counted(lane, launches);
    kernel_timer::after_launch(lane, stream);
    if MARK_AFTER[lane].load(Relaxed) {
        mark(lane, stream);
    }
}

#[cold]
fn mark(lane: Lane, stream: CUstream) {
    MARK_AFTER[lane].store(false, Relaxed);
    let _relaxed = relaxed_capture();
    record_marker(lane, stream, true);
}

/// Records a marker on `stream`; `after_launch`: right after one launch of this thread (else by
/// the lease thread, after whatever was launched since the newest marker).
fn record_marker(lane: Lane, stream: CUstream, after_launch: bool) {
    type Create = unsafe extern "C" fn(*mut CUevent, u32) -> CUresult;
    type Record = unsafe extern "C" fn(CUevent, CUstream) -> CUresult;
    type Destroy = unsafe extern "C" fn(CUevent) -> CUresult;
    // SAFETY: the driver's signatures of these functions.
    let (Some(create), Some(record), Some(destroy)) = (unsafe {
        (
            helper::<Create>(Helper::cuEventCreate),
            helper::<Record>(Helper::cuEventRecord),
            helper::<Destroy>(Helper::cuEventDestroy_v2),
        )
    }) else {
        return;
    };
    let mut p = pacer(lane);
    if p.full() {
        stats::RING_FULL.add(1);
        return;
    }
    let (event, fresh) = match p.spare.pop() {
        Some(e) => (e, false),
        None => {
            let mut e: CUevent = std::ptr::null_mut();
            // SAFETY: a valid out-pointer.
            if unsafe { create(&mut e, CU_EVENT_DISABLE_TIMING) } != CUDA_SUCCESS {
                return;
            }
            (e, true)
        }
    };
    // SAFETY: our event, the caller's stream.
    if unsafe { record(event, stream) } != CUDA_SUCCESS {
        // Another context than the event's. A new event is dropped; a reused one may still be
        // polled by a waiting check, so it goes back to the spares (last in line).
        if fresh {
            // SAFETY: our event, never recorded.
            unsafe { destroy(event) };
        } else {
            p.spare.insert(0, event);
        }
        return;
    }
    let now = now_ns();
    p.push(event, now, LAUNCHES[lane].load(Relaxed));
    if after_launch {
        p.last_mark = now;
    }
}

/// How old the newest marker may be before the lease thread records one of its own.
const RESAMPLE_NS: u64 = 200_000;

/// The lease thread's sample: is this process's newest work still pending on the GPU?
///
/// Launches between two checks on the launch path get no marker, and a program that launches a
/// few long kernels and then waits for them would look idle once the marker after the first one
/// completed. So when the newest marker is done and older than [`RESAMPLE_NS`], or a backlogged
/// process launched since it (its markers follow every few launches), the lease thread records
/// one of its own on the stream `stream` gives (the stream launched on last, nameable from this
/// thread and not capturing, in the lease's context), after whatever was launched since;
/// `stream` is only asked then.
pub fn sample(lane: Lane, stream: impl FnOnce() -> Option<CUstream>) {
    let Some(query) = query_fn() else {
        return;
    };
    let newest_done = {
        let mut p = pacer(lane);
        // Launches of a backlogged process since its newest marker have none of their own
        // (a marker follows every few): once that marker is done, they may still be pending.
        let all_done = p.collect(query) == 0;
        let unmarked = p.backlogged && p.since_newest(LAUNCHES[lane].load(Relaxed)) > 0;
        all_done
            && (unmarked
                || now_ns().saturating_sub(p.newest().map_or(0, |m| m.recorded)) >= RESAMPLE_NS)
    };
    if newest_done && !relaxed(lane) {
        if let Some(stream) = stream() {
            record_marker(lane, stream, false);
            stats::SAMPLE_MARKERS.add(1);
        }
    }
    stats::SAMPLES.add(1);
    let mut p = pacer(lane);
    // SAFETY: a live event of ours.
    let busy = p
        .newest()
        .is_some_and(|m| unsafe { query(m.event) } == CUDA_NOT_READY);
    p.samples += 1;
    p.busy_samples += u32::from(busy);
    let now = now_ns();
    if busy {
        p.last_pending = now;
    }
    p.activity.sampled(lane, now, busy);
}

/// The busy part of a lease of `wall_ns` that ends now, from the samples since it started (with
/// `GPUSHARE_BUSY=gpu`, at most the GPU time of its launches and waits, [`gpu_time`]); starts
/// the count for the next lease.
/// Without samples (a lease shorter than the sampling period), the work was pending for the
/// whole lease if a marker still is.
pub fn take_busy(lane: Lane, wall_ns: u64) -> u64 {
    let pending = pending_now(lane);
    let mut p = pacer(lane);
    let pending = busy_part(wall_ns, p.samples, p.busy_samples, pending);
    p.samples = 0;
    p.busy_samples = 0;
    drop(p);
    stats::LEASE_NS.add(wall_ns);
    gpu_time::busy(lane, pending, LAUNCHES[lane].load(Relaxed))
}

/// Whether the newest marker of `lane` is pending.
fn pending_now(lane: Lane) -> bool {
    query_fn().is_some_and(|query| {
        let p = pacer(lane);
        // SAFETY: a live event of ours.
        p.newest()
            .is_some_and(|m| unsafe { query(m.event) } == CUDA_NOT_READY)
    })
}

/// The time in GPU phases since the last call ([`activity`]): what the next `Release`, `Renew`
/// or `Extend` reports with its launches.
pub fn unreported_active(lane: Lane) -> u64 {
    let pending = pending_now(lane);
    let active = pacer(lane).activity.take(lane, now_ns(), pending);
    stats::ACTIVE_NS.add(active);
    active
}

/// `wall_ns` times the fraction of busy samples (pure, unit-tested).
pub fn busy_part(wall_ns: u64, samples: u32, busy: u32, pending_now: bool) -> u64 {
    if samples == 0 {
        return if pending_now { wall_ns } else { 0 };
    }
    ((wall_ns as u128 * busy.min(samples) as u128) / samples as u128) as u64
}

/// The launches since the last call: what the next `Release`, `Renew` or `Extend` reports, the
/// daemon's measure of this process's progress.
pub fn unreported_launches(lane: Lane) -> u64 {
    let now = LAUNCHES[lane].load(Relaxed);
    now.saturating_sub(REPORTED[lane].swap(now, Relaxed))
}

/// Starts a new busy count (a lease was granted or extended).
pub fn restart_count(lane: Lane) {
    let mut p = pacer(lane);
    p.samples = 0;
    p.busy_samples = 0;
    p.activity.restart(lane, now_ns());
    drop(p);
    gpu_time::lease_started(lane, LAUNCHES[lane].load(Relaxed));
}

/// How long this process has left the GPU without work of its own: `None` while work it marked
/// is pending, else the time since it last launched or last had work pending (as seen by the
/// checks and samples, every quarter millisecond while a lease runs), whichever is later. A
/// process blocked in a synchronize on its own queue is not idle until that queue ran out.
pub fn idle_for(lane: Lane) -> Option<u64> {
    let query = query_fn()?;
    let mut p = pacer(lane);
    if p.collect(query) > 0 {
        return None;
    }
    Some(now_ns().saturating_sub(p.last_mark.max(p.last_pending)))
}

/// Forgets the markers once the lease's work was waited for (all of them are done).
pub fn drained(lane: Lane) {
    let Some(query) = query_fn() else {
        return;
    };
    pacer(lane).collect(query);
}

/// Polls `done` (an event query) until it says so or `limit_ns` passed. Bounded, unlike
/// `cuEventSynchronize`: work that waits on another process (which waits for the token) must
/// not hold the token forever. Says once per process when it gives up.
pub fn wait_until_done(done: impl Fn() -> bool, limit_ns: u64) -> bool {
    static SAID: AtomicBool = AtomicBool::new(false);
    let start = now_ns();
    let mut polls = 0u32;
    while !done() {
        let waited = now_ns().saturating_sub(start);
        if waited > limit_ns {
            if !SAID.swap(true, AcqRel) {
                crate::guard::say(format_args!(
                    "the work of a lease was still running after {} ms; the token is given back anyway",
                    (waited + 500_000) / 1_000_000
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

pub fn after_fork_in_child() {
    for lane in Lane::all() {
        MARK_AFTER[lane].store(false, Relaxed);
        REPORTED[lane].store(LAUNCHES[lane].load(Relaxed), Relaxed);
        // SAFETY: called from the fork child handler; the parent's events are not the child's.
        unsafe { PACER[lane].reset(Pacer::new()) };
    }
    kernel_timer::after_fork_in_child();
    gpu_time::after_fork_in_child();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_part_scales_the_wall_time_by_the_samples() {
        assert_eq!(busy_part(20_000_000, 80, 20, false), 5_000_000);
        assert_eq!(busy_part(20_000_000, 80, 80, false), 20_000_000);
        assert_eq!(busy_part(20_000_000, 0, 0, true), 20_000_000);
        assert_eq!(busy_part(20_000_000, 0, 0, false), 0);
        assert_eq!(busy_part(u64::MAX, 3, 9, false), u64::MAX);
    }
}
