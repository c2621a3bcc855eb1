//! The GPU time a lease's work took: what the busy time reported to the daemon may not exceed.
//!
//! The lease thread's samples tell how much of a lease this process had work *pending* on the
//! GPU ([`sample`](super::sample)). Pending is not running: a launch is pending from the call
//! until the GPU has run it and its completion is seen, microseconds more than the kernel took.
//! A loop of short kernels keeps some launch pending nearly all the time while its kernels
//! take a fraction of the GPU: on an H200, an MNIST-sized MLP's training loop read as busy all
//! of its leases alone, its launches taking 5 us of GPU time each, and time-slicing ran it at
//! 0.68 of its rate alone beside seven other processes while those kept their GPU time. Taken
//! for a saturating process, such a loop waits for turns it does not need.
//!
//! So some launches are timed on their own by a pair of timing events
//! ([`kernel_timer`](crate::kernel_timer)), drawn by their count: the next one timed is a
//! random number of launches after the last, about one per millisecond of launching on
//! average, and the mean of their times, over the last [`KEPT`], times a lease's launches, is
//! the GPU time its work took. Drawn by count, a launch is timed whatever its size or the host
//! time before it, but not while the pair before is still in flight: that favours launches
//! after the queue ran short, and a loop that keeps a long queue of equal kernels may read low
//! (one of 5 ms kernels reported 63 of its 81 s pending). Beside others, a pair also spans their
//! turns: timings begun on a shared lease are left out (its samples only bound its demand from
//! above, as the daemon knows).
//!
//! GPU time is not all a process needs of the GPU, either. A program that waits for its work
//! (a synchronize after each kernel, a loss read every step) goes on only once the GPU ran it,
//! and beside another process's work the driver's time-slicing makes each such wait last until
//! the other's turn ends: on an H200, a loop of 50 us kernels synchronizing after each ran at
//! 0.01 of its rate alone time-sliced among nine other processes, though its kernels took 0.7
//! of the GPU alone. So each wait that blocked (a synchronize the program called) counts
//! [`WAIT_NS`] more, and the busy time reported is the lesser of the pending time and the
//! launches' GPU time with the waits'. A loop that waits for every short kernel stays as busy
//! as its pending time says, and takes turns; one that keeps work queued (a launch-bound
//! training loop reading its loss every few steps) is known as the light process it is, and
//! runs beside others.
//!
//! For comparisons, and off unless `GPUSHARE_BUSY=gpu` ([`configure`]): the busy time reported
//! is the pending time otherwise, and no launch is timed for it. Known light, a launch-bound
//! loop ran beside the others' leases, and a process that waits for each step (a CUDA graph
//! replayed and its loss read each time) lost to its time-slicing beside it what its lease was
//! due: in a soak on an H200 the lab's throughput went from 0.58 to 1.01 of time-slicing's, and
//! the client of that process got 0.17 of its due 0.26 in the median window (0.25 with the
//! pending time).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};

use crate::clock::now_ns;
use crate::fork_safe::ForkSafe;
use crate::kernel_timer::TIME_EVERY_NS;
use crate::lanes::{Lane, PerLane, MAX};
use crate::stats;

/// Timed launches the mean is taken over (a moving mean once there are this many).
pub const KEPT: u32 = 64;
/// Timed launches before the mean bounds the busy time: until then the pending time stands.
pub const LEAST_TIMED: u32 = 8;
/// Most launches from one timed launch to the next, on average.
const MOST_SPACING: u64 = 1024;
/// What one wait for the GPU counts for in the busy time: about what it lasts beside another
/// process's saturating work (the rest of the other's time slice).
pub const WAIT_NS: u64 = 1_000_000;

/// The count of launches ([`LAUNCHES`](super::LAUNCHES)) from which the next launch is timed
/// (`u64::MAX`: none drawn).
static DRAW_AT: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(u64::MAX) }; MAX]);
/// The next launch is to be timed.
static DRAWN: PerLane<AtomicBool> = PerLane([const { AtomicBool::new(false) }; MAX]);
/// The busy time is the GPU time's bound (`GPUSHARE_BUSY=gpu`).
static ON: AtomicBool = AtomicBool::new(false);

/// Reads `GPUSHARE_BUSY` (once, when the process attaches).
pub fn configure() {
    ON.store(
        crate::env::var("GPUSHARE_BUSY").is_some_and(|v| v == "gpu"),
        Relaxed,
    );
}

/// The program's waits for the GPU that blocked, per lane (its synchronizes).
static WAITS: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
static TIMES: PerLane<ForkSafe<Times>> = PerLane([const { ForkSafe::new(Times::new()) }; MAX]);

struct Times {
    /// Mean GPU time of the timed launches, over the last [`KEPT`].
    mean_ns: f64,
    timed: u32,
    /// The launches and the waits counted when the lease started.
    lease_from: u64,
    waits_from: u64,
    /// When the last launch was drawn, and the launches counted then.
    drawn_at: (u64, u64),
    rng: u64,
}

impl Times {
    const fn new() -> Times {
        Times {
            mean_ns: 0.0,
            timed: 0,
            lease_from: 0,
            waits_from: 0,
            drawn_at: (0, 0),
            rng: 0,
        }
    }

    /// xorshift64, seeded from the clock and the process on first use.
    fn next_random(&mut self) -> u64 {
        if self.rng == 0 {
            self.rng = (now_ns() ^ (u64::from(std::process::id()) << 32)) | 1;
        }
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }
}

/// Whether the launch about to go in `lane` is one drawn to be timed.
#[inline(always)]
pub fn drawn(lane: Lane) -> bool {
    DRAWN[lane].load(Relaxed)
}

/// After a launch in `lane`, with `launches` counted now: draws the next one to be timed once
/// the count reaches the one drawn.
#[inline(always)]
pub fn counted(lane: Lane, launches: u64) {
    if launches >= DRAW_AT[lane].load(Relaxed) {
        DRAW_AT[lane].store(u64::MAX, Relaxed);
        DRAWN[lane].store(true, Relaxed);
    }
}

/// The drawn launch is being timed (or could not be): draws the one after it, `launches`
/// counted now.
pub fn draw_next(lane: Lane, launches: u64) {
    DRAWN[lane].store(false, Relaxed);
    let mut t = TIMES[lane].lock();
    let now = now_ns();
    let (at, from) = t.drawn_at;
    let spacing = spacing(launches.saturating_sub(from), now.saturating_sub(at));
    t.drawn_at = (now, launches);
    let gap = 1 + t.next_random() % (2 * spacing - 1);
    DRAW_AT[lane].store(launches + gap, Relaxed);
}

/// Mean launches from one timed launch to the next: those of about [`TIME_EVERY_NS`] at the
/// rate of the last `launches` in `ns` (pure).
pub fn spacing(launches: u64, ns: u64) -> u64 {
    if ns == 0 {
        return MOST_SPACING;
    }
    ((launches as u128 * TIME_EVERY_NS as u128 / ns as u128) as u64).clamp(1, MOST_SPACING)
}

/// A lease of `lane` started (or was extended), `launches` counted now: its launches count
/// from here, and a launch is drawn if none is.
pub fn lease_started(lane: Lane, launches: u64) {
    let mut t = TIMES[lane].lock();
    t.lease_from = launches;
    t.waits_from = WAITS[lane].load(Relaxed);
    drop(t);
    if ON.load(Relaxed) && DRAW_AT[lane].load(Relaxed) == u64::MAX && !DRAWN[lane].load(Relaxed) {
        draw_next(lane, launches);
    }
}

/// The program waited for the GPU of `lane`, and the wait blocked.
pub fn waited(lane: Lane) {
    WAITS[lane].fetch_add(1, Relaxed);
    stats::WAITS.add(1);
}

/// A timed launch of `lane` took `ns` on the GPU; `shared`: the lease ran beside others.
pub fn timed(lane: Lane, ns: u64, shared: bool) {
    if shared || !ON.load(Relaxed) {
        return;
    }
    stats::GPU_TIMED.add(1);
    let mut t = TIMES[lane].lock();
    t.timed = t.timed.saturating_add(1);
    let n = f64::from(t.timed.min(KEPT));
    t.mean_ns += (ns as f64 - t.mean_ns) / n;
}

/// The busy time to report for the lease of `lane` ending now: `pending_ns`, at most the GPU
/// time of its launches and waits ([`bound`]) where that is on ([`configure`]).
pub fn busy(lane: Lane, pending_ns: u64, launches_now: u64) -> u64 {
    let t = TIMES[lane].lock();
    let launches = launches_now.saturating_sub(t.lease_from);
    let waits = WAITS[lane].load(Relaxed).saturating_sub(t.waits_from);
    let mean = (ON.load(Relaxed) && t.timed >= LEAST_TIMED).then_some(t.mean_ns);
    drop(t);
    let busy = bound(pending_ns, launches, mean, waits);
    stats::PENDING_NS.add(pending_ns);
    stats::REPORTED_BUSY_NS.add(busy);
    busy
}

/// `pending_ns`, at most `launches` times `mean_ns` and [`WAIT_NS`] per wait (the pending time
/// alone while the mean is not known) (pure).
pub fn bound(pending_ns: u64, launches: u64, mean_ns: Option<f64>, waits: u64) -> u64 {
    match mean_ns {
        Some(mean) => pending_ns.min(
            ((launches as f64 * mean.max(0.0)) as u64)
                .saturating_add(waits.saturating_mul(WAIT_NS)),
        ),
        None => pending_ns,
    }
}

pub fn after_fork_in_child() {
    for lane in Lane::all() {
        DRAW_AT[lane].store(u64::MAX, Relaxed);
        DRAWN[lane].store(false, Relaxed);
        WAITS[lane].store(0, Relaxed);
        // SAFETY: called from the fork child handler.
        unsafe { TIMES[lane].reset(Times::new()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_busy_time_is_the_pending_time_at_most_the_launches_gpu_time_and_the_waits() {
        assert_eq!(
            bound(20_000_000, 4000, Some(1000.0), 0),
            4_000_000,
            "short kernels"
        );
        assert_eq!(
            bound(20_000_000, 4000, Some(1000.0), 2),
            6_000_000,
            "two waits"
        );
        assert_eq!(
            bound(20_000_000, 400, Some(50_000.0), 400),
            20_000_000,
            "a wait after each kernel"
        );
        assert_eq!(
            bound(3_000_000, 4000, Some(1000.0), 0),
            3_000_000,
            "pending less"
        );
        assert_eq!(
            bound(20_000_000, 4000, None, 0),
            20_000_000,
            "not timed enough"
        );
        assert_eq!(bound(20_000_000, 0, Some(1000.0), 0), 0, "no launch");
    }

    #[test]
    fn about_one_launch_a_millisecond_is_timed() {
        assert_eq!(
            spacing(30_000, 1_000_000_000),
            30,
            "30 launches a millisecond"
        );
        assert_eq!(
            spacing(10, 1_000_000_000),
            1,
            "a launch every 100 ms: each one"
        );
        assert_eq!(spacing(u64::MAX / 2, 1), MOST_SPACING);
        assert_eq!(spacing(5, 0), MOST_SPACING);
    }

    #[test]
    fn drawn_launches_are_spaced_at_random_about_the_mean() {
        let lane = Lane::of(9);
        let mut gaps = Vec::new();
        let mut launches = 1_000u64;
        for _ in 0..2000 {
            // as if 20 launches a millisecond: spacing 20 (19 for a few nanoseconds more)
            TIMES[lane].lock().drawn_at = (now_ns().saturating_sub(1_000_000), launches - 20);
            draw_next(lane, launches);
            let at = DRAW_AT[lane].load(Relaxed);
            gaps.push(at - launches);
            launches = at;
        }
        let mean = gaps.iter().sum::<u64>() as f64 / gaps.len() as f64;
        assert!(gaps.iter().all(|&g| (1..40).contains(&g)), "{gaps:?}");
        assert!((17.0..23.0).contains(&mean), "mean gap {mean}");
        let distinct: std::collections::BTreeSet<u64> = gaps.iter().copied().collect();
        assert!(distinct.len() > 30, "gaps vary: {distinct:?}");
    }
}
