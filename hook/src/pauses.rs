//! How long this process stays away from the GPU once it pauses: whether a lease that others
//! wait for can go back soon into a pause.
//!
//! A batch process that leaves the GPU without work keeps a lease others wait for until it has
//! been idle for a part of the lease (`gate::contended_idle`), so that a loop that synchronizes
//! every step does not lose its turn at each short host gap. A loop that pauses for long after
//! each short step (batch inference every few milliseconds) held every lease idle that long:
//! in a GPU soak, a batch client that ran 0.25 ms of inference every 5 ms held leases for 3.3
//! ms each, was charged 0.26 of the GPU for 0.04 it used, and the others lost that time.
//!
//! So each pause that reaches [`PAUSE_NS`] is remembered as long or short: long when it went on
//! past the point where a contended lease goes back anyway. After [`PAUSES_LEARNT`] long ones in
//! a row, a contended lease goes back once the process has left the GPU for [`PAUSE_NS`]; a
//! pause that ends sooner makes the process hold its leases as before until it has shown long
//! pauses again. Each GPU's lane ([`crate::lanes`]) keeps its own count.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use crate::lanes::{Lane, PerLane, MAX};

/// How long a process that pauses long must have left the GPU before its contended lease goes
/// back, and the shortest pause that counts.
pub const PAUSE_NS: u64 = 500_000;
/// How many long pauses in a row teach that the process stays away.
pub const PAUSES_LEARNT: u32 = 2;

/// Long pauses in a row.
static LONG: PerLane<AtomicU32> = PerLane([const { AtomicU32::new(0) }; MAX]);
/// The longest idle time the lease thread has seen in the pause under way (0: none seen).
static PEAK: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);
/// A pause at least this long is long: the idle time after which the last lease, contended,
/// went back anyway.
static LONG_AFTER: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(u64::MAX) }; MAX]);
/// When the process last got the token after asking for it (`now_ns`).
static GRANTED_AT: PerLane<AtomicU64> = PerLane([const { AtomicU64::new(0) }; MAX]);

/// A lease of `lane` was granted at `now` (after the process asked for it at a launch) whose
/// contended idle limit is `long_after_ns`. The process was launching, not pausing: the time it
/// waited for the token is no pause of its own.
pub fn granted(lane: Lane, long_after_ns: u64, now: u64) {
    LONG_AFTER[lane].store(long_after_ns, Relaxed);
    GRANTED_AT[lane].store(now, Relaxed);
    PEAK[lane].store(0, Relaxed);
}

/// The lease thread's sample at `now` of how long the process has been idle on the GPU of
/// `lane` (`None`: it has work on the GPU): a pause that ends while the lease is held is counted
/// here. Idle time from before the grant is the wait for the token (the process's last work
/// before it is older), not a pause.
pub fn sampled(lane: Lane, idle_ns: Option<u64>, now: u64) {
    let since_grant = now.saturating_sub(GRANTED_AT[lane].load(Relaxed));
    let t = idle_ns.unwrap_or(0).min(since_grant);
    let peak = PEAK[lane].load(Relaxed);
    if peak > 0 && t < peak {
        crate::stats::PAUSES_SEEN_END.add(1);
        ended(lane, 0, now); // it launched since
    }
    if t >= PAUSE_NS {
        PEAK[lane].fetch_max(t, Relaxed);
    }
}

/// The process launches again on the GPU of `lane` at `now` after having been idle there
/// `idle_ns` (at the gate, asking for a lease): the pause under way, if one, ends. As in
/// [`sampled`], none of it began before the last grant.
pub fn ended(lane: Lane, idle_ns: u64, now: u64) {
    let since_grant = now.saturating_sub(GRANTED_AT[lane].load(Relaxed));
    let pause = PEAK[lane].swap(0, Relaxed).max(idle_ns.min(since_grant));
    let long_after = LONG_AFTER[lane].load(Relaxed);
    if let Some(long) = long_pause(pause, long_after) {
        crate::stats::pause(pause, long);
    }
    let count = next_count(LONG[lane].load(Relaxed), pause, long_after);
    if count >= PAUSES_LEARNT && LONG[lane].swap(count, Relaxed) < PAUSES_LEARNT {
        crate::stats::STAYS_AWAY.add(1);
    } else {
        LONG[lane].store(count, Relaxed);
    }
}

/// Whether the process has shown on the GPU of `lane` that it stays away once it pauses.
pub fn stays_away(lane: Lane) -> bool {
    LONG[lane].load(Relaxed) >= PAUSES_LEARNT
}

/// The count of long pauses in a row after one of `pause_ns` ends (pure): pauses shorter than
/// [`PAUSE_NS`] do not count either way.
fn next_count(count: u32, pause_ns: u64, long_after_ns: u64) -> u32 {
    match long_pause(pause_ns, long_after_ns) {
        None => count,
        Some(true) => count.saturating_add(1),
        Some(false) => 0,
    }
}

/// Whether a pause of `pause_ns` counts long (pure); `None` for one shorter than [`PAUSE_NS`],
/// which counts neither way.
fn long_pause(pause_ns: u64, long_after_ns: u64) -> Option<bool> {
    (pause_ns >= PAUSE_NS).then_some(pause_ns >= long_after_ns)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_pauses_count_up_a_short_one_starts_again_and_moments_do_not_count() {
        let long_after = 2_500_000;
        let mut n = 0;
        for pause in [4_000_000, 3_000_000] {
            n = next_count(n, pause, long_after);
        }
        assert_eq!(n, 2);
        assert_eq!(
            next_count(n, 100_000, long_after),
            2,
            "a host gap between kernels"
        );
        assert_eq!(
            next_count(n, 1_000_000, long_after),
            0,
            "back before the limit"
        );
        assert_eq!(next_count(0, 4_000_000, u64::MAX), 0, "no lease yet");
    }

    /// A saturating process that waits for the token after each lease is not taught that it
    /// stays away: its last work before the wait is older than the grant, so the lease thread's
    /// first samples of the new lease found it idle since then (tens of milliseconds beside
    /// another process), and two such waits made every later contended lease go back half a
    /// millisecond into any gap (one kernel per lease on a slow host). A real pause in the lease
    /// still counts.
    #[test]
    fn the_wait_for_the_token_is_no_pause() {
        let lane = Lane::of(MAX as i32 - 1);
        let ms = 1_000_000;
        let mut now = 100 * ms;
        for _ in 0..3 {
            // granted after a 40 ms wait; the first sample sees the work of before the wait
            now += 40 * ms;
            granted(lane, 2_500_000, now);
            sampled(lane, Some(40 * ms), now + ms / 4);
            sampled(lane, None, now + ms / 2);
            ended(lane, 40 * ms, now + ms);
            now += 20 * ms;
        }
        assert!(!stays_away(lane), "waits for the token taught a pause");
        for _ in 0..2 {
            granted(lane, 2_500_000, now);
            // 4 ms of host work after a kernel, in the lease
            sampled(lane, Some(3 * ms), now + 4 * ms);
            sampled(lane, None, now + 5 * ms);
            now += 10 * ms;
        }
        assert!(stays_away(lane), "two long pauses in leases");
    }
}
