//! What the gate and the pacer did in this process, counted always (relaxed atomic adds, off
//! the fast path) and printed as one stderr line at exit when `GPUSHARE_STATS=1`: for finding
//! out what makes a job slower under gpushare than without it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// One counter of [`Stats`].
pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    #[inline]
    pub fn set(&self, n: u64) {
        self.0.store(n, Relaxed);
    }
    #[inline]
    pub fn set_max(&self, n: u64) {
        self.0.fetch_max(n, Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// Leases granted after a wait for the daemon (the first, or after giving one back).
pub static GRANTS: Counter = Counter::new();
/// Leases extended, nobody waiting behind, and how many of them the lease thread extended ahead
/// of their end.
pub static EXTENSIONS: Counter = Counter::new();
pub static EXTENDED_AHEAD: Counter = Counter::new();
/// Nanoseconds launching threads spent ending a lease and waiting for the next (a lease's work
/// drained, the daemon's answer awaited).
pub static RENEW_NS: Counter = Counter::new();
/// Leases the lease thread gave back (unused past their end, revoked, or an interactive
/// client's done).
pub static GIVEN_BACK: Counter = Counter::new();
/// Queue checks on the launch path, and how many of them waited for the queue to shrink.
pub static CHECKS: Counter = Counter::new();
pub static CHECK_WAITS: Counter = Counter::new();
/// Launches of a backlogged process that went without a check (queue short enough, no marker
/// due).
pub static PASSED: Counter = Counter::new();
/// Nanoseconds launches waited for the queue.
pub static CHECK_WAIT_NS: Counter = Counter::new();
/// Markers not recorded because the ring was full.
pub static RING_FULL: Counter = Counter::new();
/// The lease thread's samples of the queue, and the markers it recorded itself.
pub static SAMPLES: Counter = Counter::new();
pub static SAMPLE_MARKERS: Counter = Counter::new();
/// Launches timed on their own (by a pair of timing events), and how often that lowered or raised
/// the time per launch learnt.
pub static TIMED: Counter = Counter::new();
pub static LOWERED: Counter = Counter::new();
pub static RAISED: Counter = Counter::new();
/// Timed launches left out: the launch call itself was slow (a module loaded).
pub static SLOW_LAUNCHES: Counter = Counter::new();
/// Markers whose completion was seen too late to learn the GPU time per launch from.
pub static UNSURE: Counter = Counter::new();
/// The GPU time per launch learnt last, and the longest (nanoseconds).
pub static PER_LAUNCH_NS: Counter = Counter::new();
pub static PER_LAUNCH_MAX_NS: Counter = Counter::new();

/// The program's waits for the GPU that blocked (its synchronizes).
pub static WAITS: Counter = Counter::new();
/// Launches timed for the GPU time of leases alone (`GPUSHARE_BUSY=gpu`).
pub static GPU_TIMED: Counter = Counter::new();
/// Nanoseconds of the leases that ended, of work pending in them (the samples'), and of busy
/// time reported for them (the pending time, at most the GPU time of their launches).
pub static LEASE_NS: Counter = Counter::new();
pub static PENDING_NS: Counter = Counter::new();
pub static REPORTED_BUSY_NS: Counter = Counter::new();
/// Nanoseconds of time in GPU phases reported (the pacing's activity).
pub static ACTIVE_NS: Counter = Counter::new();
/// How often the process was taught that it stays away once it pauses.
pub static STAYS_AWAY: Counter = Counter::new();
/// Its pauses of `pauses::PAUSE_NS` or more by length: under 1 ms, 1-2 ms, 2-2.5 ms, 2.5-5 ms,
/// 5 ms or more.
pub static PAUSES: [Counter; 5] = [const { Counter::new() }; 5];
/// Of those, how many counted long, and how many the lease thread saw end (within a lease
/// held through them; the others ended at a launch that asked for a lease).
pub static LONG_PAUSES: Counter = Counter::new();
pub static PAUSES_SEEN_END: Counter = Counter::new();

/// Counts a pause of `ns` (of `pauses::PAUSE_NS` or more) that counted `long`.
pub fn pause(ns: u64, long: bool) {
    let ms = 1_000_000;
    let bucket = match ns {
        n if n < ms => 0,
        n if n < 2 * ms => 1,
        n if n < 5 * ms / 2 => 2,
        n if n < 5 * ms => 3,
        _ => 4,
    };
    PAUSES[bucket].add(1);
    if long {
        LONG_PAUSES.add(1);
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Reads `GPUSHARE_STATS` (once, when the process attaches).
pub fn configure() {
    let on = crate::env::var("GPUSHARE_STATS").is_some_and(|v| v == "1");
    ENABLED.store(on, Relaxed);
}

/// The line printed at exit.
pub fn line() -> String {
    let ms = |c: &Counter| c.get() as f64 / 1e6;
    format!(
        "stats: {} grants, {} extensions ({} ahead of the end), {:.1} ms renewing, {} given \
         back by the lease thread; {} queue checks, {} waits ({:.1} ms), {} launches passed \
         unchecked, {} markers dropped (ring full); {} samples, {} sampling markers; {} launches \
         timed ({} slow on the host), \
         {} lowered and {} raised the time per launch learnt, {} seen done too late to learn from, now {} us \
         (at most {} us); {:.1} ms of leases, {:.1} ms pending, {:.1} ms busy reported ({} \
         timings for it, {} waits for the GPU), {:.1} ms active reported; taught {} times to give contended leases back \
         early in pauses; pauses of 0.5 ms or more: {} under 1 ms, {} of 1-2 ms, {} of 2-2.5 ms, {} of 2.5-5 ms, {} \
         longer ({} counted long, {} seen ending in a lease)",
        GRANTS.get(),
        EXTENSIONS.get(),
        EXTENDED_AHEAD.get(),
        ms(&RENEW_NS),
        GIVEN_BACK.get(),
        CHECKS.get(),
        CHECK_WAITS.get(),
        ms(&CHECK_WAIT_NS),
        PASSED.get(),
        RING_FULL.get(),
        SAMPLES.get(),
        SAMPLE_MARKERS.get(),
        TIMED.get(),
        SLOW_LAUNCHES.get(),
        LOWERED.get(),
        RAISED.get(),
        UNSURE.get(),
        PER_LAUNCH_NS.get() / 1000,
        PER_LAUNCH_MAX_NS.get() / 1000,
        ms(&LEASE_NS),
        ms(&PENDING_NS),
        ms(&REPORTED_BUSY_NS),
        GPU_TIMED.get(),
        WAITS.get(),
        ms(&ACTIVE_NS),
        STAYS_AWAY.get(),
        PAUSES[0].get(),
        PAUSES[1].get(),
        PAUSES[2].get(),
        PAUSES[3].get(),
        PAUSES[4].get(),
        LONG_PAUSES.get(),
        PAUSES_SEEN_END.get(),
    )
}

/// Prints [`line`] if `GPUSHARE_STATS=1`.
pub fn report() {
    if ENABLED.load(Relaxed) {
        crate::guard::say(format_args!("{}", line()));
    }
}

/// Taken by unit tests that set the process's global state (these counters, the lease's flags).
#[cfg(test)]
pub static TEST_GLOBALS: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_the_counters() {
        let _counters = TEST_GLOBALS.lock();
        EXTENSIONS.set(3);
        EXTENDED_AHEAD.set(2);
        PER_LAUNCH_MAX_NS.set(0);
        PER_LAUNCH_MAX_NS.set_max(40_000);
        PER_LAUNCH_MAX_NS.set_max(20_000);
        PER_LAUNCH_NS.set(12_000);
        let l = line();
        assert!(l.contains("3 extensions (2 ahead of the end)"), "{l}");
        assert!(l.contains("now 12 us (at most 40 us)"), "{l}");
    }

    #[test]
    fn pauses_are_counted_by_length() {
        let _counters = TEST_GLOBALS.lock();
        for c in PAUSES.iter().chain([&LONG_PAUSES, &PAUSES_SEEN_END]) {
            c.set(0);
        }
        let us = 1_000;
        for (ns, long) in [
            (600 * us, false),
            (2_200 * us, false),
            (2_500 * us, true),
            (4_999 * us, true),
            (20_000 * us, true),
        ] {
            pause(ns, long);
        }
        let l = line();
        assert!(
            l.contains(
                "pauses of 0.5 ms or more: 1 under 1 ms, 0 of 1-2 ms, 1 of 2-2.5 ms, \
                 2 of 2.5-5 ms, 1 longer (3 counted long"
            ),
            "{l}"
        );
    }
}
