//! When each session last held a lease: the GPU side checks activity that NVML sees against it
//! (a process that held no lease in a while has no business running work on the GPU); and how
//! much of the recent time it held one, by which USED tells what a process needs while it holds
//! a lease from what it needs on average.

use std::collections::BTreeMap;

use super::{Nanos, SessionId};

/// Time constant of [`LeaseLog::holding_share`]'s moving average.
pub const HOLDING_TAU: Nanos = 1_000_000_000;

/// A session's share of recent time holding a lease, as of `at`.
#[derive(Debug, Clone, Copy, Default)]
struct Holding {
    share: f64,
    at: Nanos,
    holding: bool,
}

impl Holding {
    fn share_at(&self, now: Nanos) -> f64 {
        let decay = (-(now.saturating_sub(self.at) as f64) / HOLDING_TAU as f64).exp();
        if self.holding {
            1.0 - (1.0 - self.share) * decay
        } else {
            self.share * decay
        }
    }

    fn set(&mut self, holding: bool, now: Nanos) {
        if now >= self.at {
            self.share = self.share_at(now);
            self.at = now;
        }
        self.holding = holding;
    }
}

#[derive(Debug, Default)]
pub struct LeaseLog {
    /// When each session's last lease ended.
    ended: BTreeMap<SessionId, Nanos>,
    holding: BTreeMap<SessionId, Holding>,
}

impl LeaseLog {
    /// A lease of `session` started at `now`.
    pub fn started(&mut self, session: SessionId, now: Nanos) {
        self.holding.entry(session).or_default().set(true, now);
    }

    /// A lease of `session` ended at `now`.
    pub fn ended(&mut self, session: SessionId, now: Nanos) {
        let at = self.ended.entry(session).or_insert(now);
        *at = (*at).max(now);
        self.holding.entry(session).or_default().set(false, now);
    }

    /// The share of the time before `now` that `session` held a lease, a moving average over
    /// about [`HOLDING_TAU`] (0 for a session that never held one).
    pub fn holding_share(&self, session: SessionId, now: Nanos) -> f64 {
        self.holding.get(&session).map_or(0.0, |h| h.share_at(now))
    }

    /// When the last lease of `session` ended; `None` if it never had one.
    pub fn last_end(&self, session: SessionId) -> Option<Nanos> {
        self.ended.get(&session).copied()
    }

    pub fn forget(&mut self, session: SessionId) {
        self.ended.remove(&session);
        self.holding.remove(&session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_end_until_forgotten() {
        let mut log = LeaseLog::default();
        assert_eq!(log.last_end(1), None);
        log.ended(1, 50);
        log.ended(1, 40);
        assert_eq!(log.last_end(1), Some(50));
        log.ended(1, 70);
        assert_eq!(log.last_end(1), Some(70));
        log.forget(1);
        assert_eq!(log.last_end(1), None);
    }

    #[test]
    fn the_holding_share_follows_the_leases() {
        const MS: Nanos = 1_000_000;
        let mut log = LeaseLog::default();
        assert_eq!(log.holding_share(1, 0), 0.0);
        // leases of 2 ms every 10 ms for 5 s: held a fifth of the time
        for k in 0..500 {
            log.started(1, k * 10 * MS);
            log.ended(1, k * 10 * MS + 2 * MS);
        }
        let share = log.holding_share(1, 5000 * MS);
        assert!((share - 0.2).abs() < 0.02, "{share}");
        // then held all along for 5 s
        log.started(1, 5000 * MS);
        assert!(log.holding_share(1, 10_000 * MS) > 0.99);
        log.ended(1, 10_000 * MS);
        assert!(log.holding_share(1, 15_000 * MS) < 0.01);
        log.forget(1);
        assert_eq!(log.holding_share(1, 15_000 * MS), 0.0);
    }
}
