//! Burst credit: what a client's request guarantees it and it has not used lately.
//!
//! A client's request is a rate of GPU time it may claim. A token bucket keeps what it did not
//! claim: it fills at `request` nanoseconds per nanosecond (times its fair-share factor), up to
//! the request times the *window* (`daemon.burst_window`, [`WINDOW`] by default), and every
//! lease the client is charged empties it by that lease (never below zero: time taken beyond
//! the request, from others' idle share, is no debt). A client whose bucket holds at least half
//! of it (and at least one quantum) has been below its request over the last half window or
//! more: it is *owed*, and when it asks, it goes ahead of the clients
//! that are not owed, ending their running leases if it cannot start beside them
//! ([`super::Scheduler::poll`]). So a job that computes in bursts and pauses, on average below
//! its request, gets each burst as if alone (up to the bucket), instead of waiting in line
//! behind saturating clients; and a client whose share others took while it was away gets it
//! back at once, not after a lease of each.
//!
//! Clients at or above their requests never fill half a bucket: saturating clients sharing the
//! GPU by request keep their turns as before. Bounds: an owed client runs ahead of the others
//! until it has used half its bucket beyond its request (a burst of `request * window / 2 / (1 -
//! request)` as if alone); a client kept below its request by one that is owed becomes owed
//! itself within half a window, or once its bucket holds a quantum where half of it holds less
//! (a request under `quantum / window` never is). A window of 0 turns burst credit off.

use super::Nanos;

/// How long a client's unused request is kept by default: its bucket holds `request * WINDOW`
/// at most.
pub const WINDOW: Nanos = 500_000_000;

#[derive(Debug, Clone, Copy, Default)]
pub struct Guarantee {
    /// Unused GPU time (ns) as of `at`.
    credit: f64,
    at: Nanos,
}

impl Guarantee {
    /// An empty bucket at `now`: a new client has no history to be owed for.
    pub fn new(now: Nanos) -> Self {
        Guarantee {
            credit: 0.0,
            at: now,
        }
    }

    /// The bucket's size for a client guaranteed `rate`, kept over `window`.
    pub fn size(rate: f64, window: Nanos) -> f64 {
        rate.max(0.0) * window as f64
    }

    /// The credit at `now` of a client guaranteed `rate`.
    pub fn credit(&self, rate: f64, window: Nanos, now: Nanos) -> f64 {
        let dt = now.saturating_sub(self.at) as f64;
        (self.credit + dt * rate.max(0.0)).min(Self::size(rate, window))
    }

    /// Charges `ns` of GPU time at `now`.
    pub fn charge(&mut self, rate: f64, window: Nanos, ns: Nanos, now: Nanos) {
        self.credit = (self.credit(rate, window, now) - ns as f64).max(0.0);
        self.at = now.max(self.at);
    }

    /// The rate changed at `now` (a new request): what was kept so far stays, within the new
    /// bucket.
    pub fn resize(&mut self, old_rate: f64, new_rate: f64, window: Nanos, now: Nanos) {
        self.credit = self
            .credit(old_rate, window, now)
            .min(Self::size(new_rate, window));
        self.at = now.max(self.at);
    }

    /// The rate or the window changed (a fair-share factor, a reload): what was kept stays,
    /// within the new bucket.
    pub fn fit(&mut self, rate: f64, window: Nanos) {
        self.credit = self.credit.min(Self::size(rate, window));
    }

    /// Whether the client is owed at `now`: half its bucket or more unused, and at least one
    /// `quantum` (a bucket smaller than a lease never is; nor is any with a `window` of 0).
    pub fn owed(&self, rate: f64, window: Nanos, quantum: Nanos, now: Nanos) -> bool {
        let size = Self::size(rate, window);
        let needed = (size / 2.0).max(quantum.max(1) as f64);
        needed <= size && self.credit(rate, window, now) >= needed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const W: Nanos = 1_000 * MS;

    #[test]
    fn fills_at_the_rate_up_to_the_window_and_empties_by_charges() {
        let mut g = Guarantee::new(0);
        assert_eq!(g.credit(0.3, W, 0), 0.0);
        assert!((g.credit(0.3, W, 100 * MS) - 30.0 * MS as f64).abs() < 1.0);
        assert!((g.credit(0.3, W, 10_000 * MS) - 300.0 * MS as f64).abs() < 1.0);
        g.charge(0.3, W, 100 * MS, 10_000 * MS);
        assert!((g.credit(0.3, W, 10_000 * MS) - 200.0 * MS as f64).abs() < 1.0);
        g.charge(0.3, W, 500 * MS, 10_000 * MS);
        assert_eq!(g.credit(0.3, W, 10_000 * MS), 0.0, "no debt below empty");
    }

    #[test]
    fn owed_from_half_a_bucket_and_never_for_a_bucket_below_a_quantum() {
        let g = Guarantee::new(0);
        assert!(!g.owed(0.3, W, 20 * MS, 400 * MS), "120 ms of 300");
        assert!(g.owed(0.3, W, 20 * MS, 500 * MS), "150 ms of 300");
        assert!(!g.owed(0.01, W, 20 * MS, 10_000 * MS), "a bucket of 10 ms");
        assert!(!g.owed(0.0, W, 20 * MS, 10_000 * MS), "no request");
        assert!(g.owed(0.02, W, 20 * MS, W), "a full bucket of one lease");
        assert!(!g.owed(0.5, 0, 20 * MS, 10_000 * MS), "no window");
    }

    #[test]
    fn a_smaller_rate_keeps_what_fits_its_bucket() {
        let mut g = Guarantee::new(0);
        g.resize(0.5, 0.1, W, 2_000 * MS);
        assert!((g.credit(0.1, W, 2_000 * MS) - 100.0 * MS as f64).abs() < 1.0);
        g.fit(0.1, W / 2);
        assert!((g.credit(0.1, W / 2, 2_000 * MS) - 50.0 * MS as f64).abs() < 1.0);
    }
}
