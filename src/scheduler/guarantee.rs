//! Burst credit: what a client's request guarantees it and it has not used lately.
//!
//! A client's request is a rate of GPU time it may claim. A token bucket keeps what it did not
//! claim: it fills at `request` nanoseconds per nanosecond (times its fair-share factor, and
//! scaled to its part of the requests of the clients present: the scheduler passes that rate as
//! `rate` here, and "request" below means it), up to
//! the smaller of the request and its complement (`1 - request`) times the *window*
//! (`daemon.burst_window`, [`WINDOW`] by default), and every lease the client is charged
//! empties it by that lease (never below zero: time taken beyond the request, from others'
//! idle share, is no debt). A client whose bucket holds at least half of `request * window`
//! (and at least two quanta) has been below its request over the last half window or more: it
//! is *owed*, and when it asks, it goes ahead of the clients that are not owed, ending their
//! running leases if it cannot start beside them ([`super::Scheduler::poll`]). So a job that
//! computes in bursts and pauses, on average below its request, gets each burst as if alone (up
//! to the bucket), instead of waiting in line behind saturating clients; and a client whose
//! share others took while it was away gets it back at once, not after a lease of each.
//!
//! Clients at or above their requests never fill that half (two quanta: a lease's worth of
//! jitter in when their turns come): saturating clients sharing the GPU by request keep their
//! turns as before. A client of request over 2/3, whose capped bucket never holds half of
//! `request * window`, is never owed: while it runs at its request it fills by its request times
//! the others' leases, and with a capped threshold that jitter alone would make it owed (a
//! client of 0.75 took 0.78 beside one of 0.25). It needs no credit to get its share back: the
//! virtual clock serves it first after a pause. Bounds: an owed client runs ahead of the others
//! until it has used its bucket down to that half, a burst of `(min(request, 1 - request) -
//! request / 2) * window / (1 - request)` as if alone: at most half a window whatever the
//! request (at 0.5), `request * window / 2 / (1 - request)` for requests up to 0.5 (214 ms at
//! 0.3 with the default window) and a quarter window at 0.6. A client kept below its request by
//! one that is owed becomes owed itself within half a window, or once its bucket holds two
//! quanta where half of it holds less (a bucket under two quanta, a request under `2 * quantum
//! / window`, never is). A window of 0 turns burst credit off.

use super::Nanos;

/// How long a client's unused request is kept by default: its bucket holds
/// `min(request, 1 - request) * WINDOW` at most. A second covers, at request 0.3, the soak's
/// bursts of up to 200 ms while they average below it; half a second left bursts over about
/// 100 ms waiting in line.
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

    /// The bucket's size for a client guaranteed `rate`, kept over `window`: `rate * window`,
    /// but no more than `(1 - rate) * window`, which a client running alone at that rate's
    /// expense of the others drains in a window.
    pub fn size(rate: f64, window: Nanos) -> f64 {
        rate.min(1.0 - rate).max(0.0) * window as f64
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

    /// Whether the client is owed at `now`: half of `rate * window` or more unused (half its
    /// bucket up to a request of 0.5; a bucket capped below that, over a request of 2/3, never
    /// is), and at least two `quantum`s (a bucket smaller than two leases never is; nor is any
    /// with a `window` of 0). A client served by its request in turns of one lease fills up to a
    /// lease between its turns, and one more where its turn comes a lease late; one of a large
    /// request fills by more (`rate` times the others' leases), and the uncapped half keeps that
    /// jitter from making it owed.
    pub fn owed(&self, rate: f64, window: Nanos, quantum: Nanos, now: Nanos) -> bool {
        let needed = (rate.max(0.0) * window as f64 / 2.0).max(2.0 * quantum.max(1) as f64);
        needed <= Self::size(rate, window) && self.credit(rate, window, now) >= needed
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
    fn owed_from_half_a_bucket_and_never_for_a_bucket_below_two_quanta() {
        let g = Guarantee::new(0);
        assert!(!g.owed(0.3, W, 20 * MS, 400 * MS), "120 ms of 300");
        assert!(g.owed(0.3, W, 20 * MS, 500 * MS), "150 ms of 300");
        assert!(!g.owed(0.03, W, 20 * MS, 10_000 * MS), "a bucket of 30 ms");
        assert!(!g.owed(0.0, W, 20 * MS, 10_000 * MS), "no request");
        assert!(
            !g.owed(0.04, W, 20 * MS, 900 * MS),
            "36 ms in a bucket of two leases"
        );
        assert!(
            g.owed(0.04, W, 20 * MS, 2 * W),
            "a full bucket of two leases"
        );
        assert!(!g.owed(0.5, 0, 20 * MS, 10_000 * MS), "no window");
    }

    #[test]
    fn owed_from_half_the_uncapped_bucket_so_never_over_two_thirds() {
        let g = Guarantee::new(0);
        assert!(
            !g.owed(0.6, W, 20 * MS, 400 * MS),
            "240 ms of a 400 ms bucket"
        );
        assert!(g.owed(0.6, W, 20 * MS, 500 * MS), "300 ms, half of 600");
        assert!(
            g.owed(0.66, W, 20 * MS, 10_000 * MS),
            "a full 340 ms bucket, half of 660"
        );
        assert!(
            !g.owed(0.75, W, 20 * MS, 10_000 * MS),
            "a full 250 ms bucket of 0.75"
        );
        assert!(
            !g.owed(0.9, W, 20 * MS, 10_000 * MS),
            "a full 100 ms bucket of 0.9"
        );
    }

    #[test]
    fn a_large_request_keeps_no_more_than_its_complement() {
        let g = Guarantee::new(0);
        let size = |rate| Guarantee::size(rate, W) / MS as f64;
        assert!((size(0.3) - 300.0).abs() < 1e-6);
        assert!((size(0.5) - 500.0).abs() < 1e-6);
        assert!((size(0.9) - 100.0).abs() < 1e-6, "{}", size(0.9));
        assert_eq!(size(1.0), 0.0, "a client of the whole GPU is never owed");
        assert!((g.credit(0.9, W, 10_000 * MS) - 100.0 * MS as f64).abs() < 1.0);
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
