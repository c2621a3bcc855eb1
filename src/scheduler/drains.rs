//! How long past its lease's end each process keeps the token while the work it queued drains:
//! the configured grace, or longer for a process whose drains have taken longer.
//!
//! A kernel runs to its end once started. A process whose one kernel outlasts the quantum and the
//! grace (a 100 ms batched matmul, beside 20 ms leases and a 50 ms grace) was taken back in the
//! middle of it: the next holder's work then ran time-sliced beside it, and the two processes'
//! shares evened out whatever their requests (0.445 / 0.445 for 0.75 / 0.25 on an H100). So
//! when a process releases a lease that was taken back, its drain (from the lease's end to the
//! release) becomes its grace, with a quarter more, up to [`MAX_GRACE`]; a drain within the
//! grace sets it to that drain and a quarter, but lowers it by at most half each time, never
//! under the configured one.
//!
//! The process pays for the longer hold: a lease is charged its wall time to its release. What
//! it can do with a long grace is keep the others waiting, at most [`MAX_GRACE`] past a lease's
//! end, once it has shown drains that long; interactive clients get their leases beside it
//! anyway.

use std::collections::BTreeMap;

use super::{Nanos, SessionId};

/// The longest grace a process's drains can earn it.
pub const MAX_GRACE: Nanos = 1_000_000_000;

#[derive(Debug, Default)]
pub struct Drains {
    /// The daemon's grace: no process's is shorter.
    configured: Nanos,
    /// The grace each process's drains earned it, where longer than the configured one.
    earned: BTreeMap<SessionId, Nanos>,
    /// The end of the lease each process had taken back, until its release arrives.
    taken_back: BTreeMap<SessionId, Nanos>,
}

impl Drains {
    /// Sets the daemon's grace.
    pub fn configure(&mut self, grace: Nanos) {
        self.configured = grace;
    }

    /// How long past its lease's end `session` keeps the token.
    pub fn grace(&self, session: SessionId) -> Nanos {
        self.earned
            .get(&session)
            .map_or(self.configured, |&g| g.max(self.configured))
    }

    /// The lease of `session` that ended at `end` was taken back (its grace ran out).
    pub fn taken_back(&mut self, session: SessionId, end: Nanos) {
        self.taken_back.insert(session, end);
    }

    /// `session` released at `now`, holding no lease: if its last lease was taken back, its
    /// drain took until now.
    pub fn released_late(&mut self, session: SessionId, now: Nanos) {
        if let Some(end) = self.taken_back.remove(&session) {
            let drain = now.saturating_sub(end);
            let old = self.grace(session);
            self.set(session, earned_by(drain).max(old));
        }
    }

    /// `session` released in time, at `now`, a lease that ended at `end`.
    pub fn released(&mut self, session: SessionId, end: Nanos, now: Nanos) {
        self.taken_back.remove(&session);
        if let Some(&old) = self.earned.get(&session) {
            let drain = now.saturating_sub(end);
            self.set(session, earned_by(drain).max(old / 2));
        }
    }

    pub fn forget(&mut self, session: SessionId) {
        self.earned.remove(&session);
        self.taken_back.remove(&session);
    }

    fn set(&mut self, session: SessionId, grace: Nanos) {
        if grace > self.configured {
            self.earned.insert(session, grace.min(MAX_GRACE));
        } else {
            self.earned.remove(&session);
        }
    }
}

/// The grace a drain of `drain` earns: a quarter more than it took.
fn earned_by(drain: Nanos) -> Nanos {
    drain.saturating_add(drain / 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    /// Drains of a daemon whose grace is 50 ms.
    fn drains() -> Drains {
        let mut d = Drains::default();
        d.configure(50 * MS);
        d
    }

    #[test]
    fn a_drain_past_a_taken_back_lease_earns_a_longer_grace_up_to_the_most() {
        let mut d = drains();
        assert_eq!(d.grace(1), 50 * MS);
        d.taken_back(1, 100 * MS);
        d.released_late(1, 180 * MS);
        assert_eq!(d.grace(1), 100 * MS);
        assert_eq!(d.grace(2), 50 * MS, "one process's drains are its own");
        d.taken_back(1, 0);
        d.released_late(1, 5_000 * MS);
        assert_eq!(d.grace(1), MAX_GRACE);
    }

    #[test]
    fn a_release_without_a_lease_taken_back_earns_nothing() {
        let mut d = drains();
        d.released_late(1, 500 * MS);
        assert_eq!(d.grace(1), 50 * MS);
        d.taken_back(1, 100 * MS);
        d.released(1, 100 * MS, 110 * MS);
        d.released_late(1, 500 * MS);
        assert_eq!(d.grace(1), 50 * MS, "released in time after all");
    }

    #[test]
    fn short_drains_bring_an_earned_grace_down_by_half_at_most_each_time() {
        let mut d = drains();
        d.taken_back(1, 0);
        d.released_late(1, 320 * MS);
        assert_eq!(d.grace(1), 400 * MS);
        d.released(1, 0, 240 * MS);
        assert_eq!(d.grace(1), 300 * MS, "a drain of 240 ms keeps 300");
        d.released(1, 0, MS);
        assert_eq!(d.grace(1), 150 * MS);
        d.released(1, 0, MS);
        assert_eq!(d.grace(1), 75 * MS);
        d.released(1, 0, MS);
        assert_eq!(d.grace(1), 50 * MS, "never under the configured grace");
        d.forget(1);
        d.configure(10 * MS);
        assert_eq!(d.grace(1), 10 * MS);
    }
}
