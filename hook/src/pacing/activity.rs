//! The time a lease had this process in its GPU phases: launching work or waiting for it, as
//! opposed to host work and pauses. The daemon counts USED by it (the session reports it with
//! each `Release`, `Renew` and `Extend`).
//!
//! The busy time (work pending at the lease thread's samples) misses what a loop bound by its
//! launches spends launching: a 256x256 matmul that takes 3 us of GPU every 27 us reads busy a
//! tenth of the time, where the loop does nothing but drive the GPU. So a sample period counts
//! as active when work was pending at its sample; otherwise for the gaps between consecutive
//! launches of the lane that ended in it and were shorter than [`LAUNCH_GAP_NS`] (a program
//! between two launches of one step), at most the period. Host work and pauses longer than that
//! between launches count as nothing.

use std::sync::atomic::{AtomicU64, Ordering::*};

use crate::clock::{fast_now, fast_ticks, ns_of_ticks};
use crate::lanes::{Lane, PerLane, MAX};

/// Gaps between two launches shorter than this are part of a GPU phase: PyTorch launches a
/// kernel every 10-70 us of host time in a loop bound by its launches.
pub const LAUNCH_GAP_NS: u64 = 200_000;

/// The launch-path clock ([`fast_now`]) at each lane's last launch.
static LAST_LAUNCH: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
/// The gaps shorter than [`LAUNCH_GAP_NS`] between consecutive launches of each lane, added up
/// (launch-path clock ticks).
static LAUNCH_GAPS: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);

/// After each launch of `lane`: adds the gap since the one before, if short.
#[inline(always)]
pub fn launched(lane: Lane) {
    let now = fast_now();
    let before = LAST_LAUNCH[lane].swap(now, Relaxed);
    let gap = now.wrapping_sub(before);
    if before != 0 && now > before && gap < fast_ticks(LAUNCH_GAP_NS) {
        LAUNCH_GAPS[lane].fetch_add(gap, Relaxed);
    }
}

/// The short gaps of `lane` so far, in nanoseconds.
fn launch_gaps_ns(lane: Lane) -> u64 {
    ns_of_ticks(LAUNCH_GAPS[lane].load(Relaxed))
}

/// The lease thread's count of active time, kept in the lane's pacer.
#[derive(Debug, Clone, Copy)]
pub struct Activity {
    /// Active time counted since the last report.
    active_ns: u64,
    /// When the period under way began, and the short gaps ([`launch_gaps_ns`]) by then.
    since: u64,
    gaps_at: u64,
    /// Whether the sample that began the period under way found work pending.
    pending_at_since: bool,
}

impl Activity {
    pub const fn new() -> Activity {
        Activity {
            active_ns: 0,
            since: 0,
            gaps_at: 0,
            pending_at_since: false,
        }
    }

    /// A lease was granted (or extended) at `now`: periods count from here. What was counted
    /// and not reported yet stays.
    pub fn restart(&mut self, lane: Lane, now: u64) {
        self.since = now;
        self.gaps_at = launch_gaps_ns(lane);
        self.pending_at_since = false;
    }

    /// A sample at `now`: the period since the last one ends; `pending`: work was pending.
    pub fn sampled(&mut self, lane: Lane, now: u64, pending: bool) {
        let gaps = launch_gaps_ns(lane);
        self.active_ns += period_active(
            now.saturating_sub(self.since),
            pending,
            gaps.saturating_sub(self.gaps_at),
        );
        self.since = now;
        self.gaps_at = gaps;
        self.pending_at_since = pending;
    }

    /// The active time since the last report, up to `now` (`pending`: work is pending now), and
    /// a new count from here. A period whose first sample found work pending counts as active
    /// if nothing is pending by now: the lease thread samples every quarter millisecond, and
    /// misses a longer stretch only while a launching thread waits for the lease's work (the
    /// drain at its end), which is time in a GPU phase. Counted as idle, a loop of 56 ms
    /// kernels, each outlasting its 20 ms lease, reported 8.75 s in GPU phases over 44.9 s with
    /// work pending (H100, GPU soak seed 44); counted whole, a loop of 20 ms kernels waited for
    /// each went from 1.69 to 7.90 s of 7.9 s, and its client's USED from 0.147 to 0.064 below
    /// what it got (H100, seed 45, side by side).
    pub fn take(&mut self, lane: Lane, now: u64, pending: bool) -> u64 {
        if self.since != 0 {
            let drained = self.pending_at_since;
            self.sampled(lane, now, pending || drained);
            self.pending_at_since = pending;
        }
        std::mem::take(&mut self.active_ns)
    }
}

/// What a sample period of `period_ns` counts as active: all of it if work was pending at its
/// sample, else the short gaps between launches that ended in it, `gaps_ns`, at most the period
/// (pure, unit-tested).
pub fn period_active(period_ns: u64, pending: bool, gaps_ns: u64) -> u64 {
    if pending {
        period_ns
    } else {
        gaps_ns.min(period_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_period_is_active_while_work_is_pending_or_the_program_launches() {
        assert_eq!(period_active(250_000, true, 0), 250_000);
        assert_eq!(period_active(250_000, false, 0), 0, "a pause");
        assert_eq!(
            period_active(250_000, false, 216_000),
            216_000,
            "a launch every 27 us: the gaps between them"
        );
        assert_eq!(period_active(250_000, false, 300_000), 250_000);
        assert_eq!(period_active(4_000_000, true, 10), 4_000_000);
    }

    #[test]
    fn only_short_gaps_between_launches_count() {
        let _globals = crate::stats::TEST_GLOBALS.lock();
        let lane = Lane::of(MAX as i32 - 1);
        let mut a = Activity::new();
        let start = crate::clock::now_ns();
        a.restart(lane, start);
        for _ in 0..20 {
            launched(lane);
            let t = crate::clock::now_ns();
            while crate::clock::now_ns() < t + 20_000 {}
        }
        let busy_launching = a.take(lane, crate::clock::now_ns(), false);
        assert!(busy_launching > 0, "launches 20 us apart count");
        std::thread::sleep(std::time::Duration::from_millis(5));
        launched(lane);
        let paused = a.take(lane, crate::clock::now_ns(), false);
        assert_eq!(
            paused, 0,
            "a pause of 5 ms between two launches is host time"
        );
    }

    #[test]
    fn a_drain_after_a_sample_that_found_work_pending_is_active() {
        let _globals = crate::stats::TEST_GLOBALS.lock();
        let lane = Lane::of(MAX as i32 - 2);
        let ms = 1_000_000;
        let mut a = Activity::new();
        a.restart(lane, 100 * ms);
        a.sampled(lane, 100 * ms + 250_000, true);
        // no sample while a launching thread waited for the lease's work, done by the report
        assert_eq!(a.take(lane, 140 * ms, false), 40 * ms);
        a.restart(lane, 200 * ms);
        a.sampled(lane, 200 * ms + 250_000, false);
        assert_eq!(
            a.take(lane, 240 * ms, false),
            0,
            "nothing pending at the last sample: host time"
        );
        a.restart(lane, 300 * ms);
        a.sampled(lane, 300 * ms + 250_000, true);
        assert_eq!(a.take(lane, 301 * ms, true), ms, "pending at the report");
        assert_eq!(
            a.take(lane, 310 * ms, false),
            9 * ms,
            "the next report's period began with work pending"
        );
    }
}
