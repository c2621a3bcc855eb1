//! Burst credit: what a client's request guarantees it and it has not used lately.
//!
//! A client's request is a rate of GPU time it may claim. A token bucket keeps what it did not
//! claim: it fills at `request` nanoseconds per nanosecond, up to the request times
//! [`WINDOW`], and every lease the client is charged empties it by that lease (never below
//! zero: time taken beyond the request, from others' idle share, is no debt). A client whose
//! bucket holds at least half of it (and at least one quantum) has been below its request over
//! the last half window or more: it is *owed*, and when it asks, it goes ahead of the clients
//! that are not owed, ending their running leases if it cannot start beside them
//! ([`super::Scheduler::poll`]). So a job that computes in bursts and pauses, on average below
//! its request, gets each burst as if alone (up to the bucket), instead of waiting in line
//! behind saturating clients; and a client whose share others took while it was away gets it
//! back at once, not after a lease of each.
//!
//! Clients at or above their requests never fill half a bucket: saturating clients sharing the
//! GPU by request keep their turns as before.

use super::Nanos;

/// How long a client's unused request is kept: its bucket holds `request * WINDOW` at most.
pub const WINDOW: Nanos = 1_000_000_000;

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

    /// The bucket's size for `request`.
    pub fn size(request: f64) -> f64 {
        request.max(0.0) * WINDOW as f64
    }

    /// The credit at `now` of a client of `request`.
    pub fn credit(&self, request: f64, now: Nanos) -> f64 {
        let dt = now.saturating_sub(self.at) as f64;
        (self.credit + dt * request.max(0.0)).min(Self::size(request))
    }

    /// Charges `ns` of GPU time at `now`.
    pub fn charge(&mut self, request: f64, ns: Nanos, now: Nanos) {
        self.credit = (self.credit(request, now) - ns as f64).max(0.0);
        self.at = now.max(self.at);
    }

    /// The request changed at `now`: what was kept so far stays, within the new bucket.
    pub fn resize(&mut self, old_request: f64, new_request: f64, now: Nanos) {
        self.credit = self.credit(old_request, now).min(Self::size(new_request));
        self.at = now.max(self.at);
    }

    /// The rate changed (a fair-share factor): what was kept stays, within the new bucket.
    pub fn fit(&mut self, rate: f64) {
        self.credit = self.credit.min(Self::size(rate));
    }

    /// Whether the client is owed at `now`: half its bucket or more unused, and at least one
    /// `quantum` (a bucket smaller than a lease never is).
    pub fn owed(&self, request: f64, quantum: Nanos, now: Nanos) -> bool {
        let size = Self::size(request);
        let needed = (size / 2.0).max(quantum as f64);
        needed <= size && self.credit(request, now) >= needed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn fills_at_the_request_up_to_the_window_and_empties_by_charges() {
        let mut g = Guarantee::new(0);
        assert_eq!(g.credit(0.3, 0), 0.0);
        assert!((g.credit(0.3, 100 * MS) - 30.0 * MS as f64).abs() < 1.0);
        assert!((g.credit(0.3, 10_000 * MS) - 300.0 * MS as f64).abs() < 1.0);
        g.charge(0.3, 100 * MS, 10_000 * MS);
        assert!((g.credit(0.3, 10_000 * MS) - 200.0 * MS as f64).abs() < 1.0);
        g.charge(0.3, 500 * MS, 10_000 * MS);
        assert_eq!(g.credit(0.3, 10_000 * MS), 0.0, "no debt below empty");
    }

    #[test]
    fn owed_from_half_a_bucket_and_never_for_a_bucket_below_a_quantum() {
        let g = Guarantee::new(0);
        assert!(!g.owed(0.3, 20 * MS, 400 * MS), "120 ms of 300");
        assert!(g.owed(0.3, 20 * MS, 500 * MS), "150 ms of 300");
        assert!(!g.owed(0.01, 20 * MS, 10_000 * MS), "a bucket of 10 ms");
        assert!(!g.owed(0.0, 20 * MS, 10_000 * MS), "no request");
        assert!(
            g.owed(0.02, 20 * MS, 1_000 * MS),
            "a full bucket of one lease"
        );
    }

    #[test]
    fn a_smaller_request_keeps_what_fits_its_bucket() {
        let mut g = Guarantee::new(0);
        g.resize(0.5, 0.1, 2_000 * MS);
        assert!((g.credit(0.1, 2_000 * MS) - 100.0 * MS as f64).abs() < 1.0);
    }
}
