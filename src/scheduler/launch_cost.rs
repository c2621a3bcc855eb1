//! What a process's work takes on the GPU per kernel launched: to charge an interactive
//! process's leases by, and to count a batch lease's USED beside others.
//!
//! A process reports how long its work was pending in a lease, not how long it ran: beside a
//! batch holder's kernel its requests wait for the driver's time slices, and that wait counts.
//! An inference client of request 0.05 beside 57 ms kernels reported 1-8 ms for requests that
//! take 0.3 ms alone, was charged several times what it used, ran ahead of the batch clients'
//! virtual times, lost the place its class gives it and waited in line behind whole 57 ms
//! kernels: p99 67 ms where time-slicing gave 5.5 ms (GPU soak seed 16).
//!
//! Waiting only adds to the pending time of a launch's work. So the lowest pending times per
//! launch among a process's recent leases, alone or beside others, tell what its work takes
//! when it waits for nobody; a lease is charged no more than that for each kernel it launched.
//! The mean of the lowest quarter, not the least: the hook samples pending work every quarter
//! millisecond, and a lease of a millisecond reports its busy time in quarters of it. On an
//! H200 the least of the last 32 charged an inference client 0.064 of the GPU where it got
//! 0.094.
//!
//! USED of a batch lease beside other batch leases counts its launches at what they took in the
//! process's last leases that ran by themselves from an empty queue (no other batch lease beside
//! them, interactive ones' work taken off, not extended: work queued before an extension is
//! pending in it without its launches): their
//! time in GPU phases (work pending, or launching) over their launches, added up, not the
//! lowest ratios (a sampler that reads a 100 us kernel as 0 or 250 us is right on the sum, and a
//! lease that read 0 counts too).

use std::collections::{BTreeMap, VecDeque};

use super::{Nanos, SessionId};

/// How many of a process's last leases its cost per launch is taken over: at 200 requests a
/// second, the last sixth of a second.
pub const RECENT_LEASES: usize = 32;

#[derive(Debug, Default)]
pub struct LaunchCosts {
    /// Pending time per launch of each process's last [`RECENT_LEASES`] leases with launches.
    recent: BTreeMap<SessionId, VecDeque<f64>>,
    /// (time in GPU phases, launches) of each process's last [`RECENT_LEASES`] leases alone.
    alone: BTreeMap<SessionId, VecDeque<(Nanos, u64)>>,
}

impl LaunchCosts {
    /// A lease of `session` ended: its work was pending `busy_ns` for `launches` launches.
    pub fn learn(&mut self, session: SessionId, busy_ns: Nanos, launches: u64) {
        if launches == 0 || busy_ns == 0 {
            return;
        }
        keep_recent(
            self.recent.entry(session).or_default(),
            busy_ns as f64 / launches as f64,
        );
    }

    /// The most a lease of `session` that launched `launches` kernels is charged: their cost
    /// when they wait for nobody (the mean of the lowest quarter of its recent leases' pending
    /// times per launch); `None` before any lease of it had work, and for a lease that launched
    /// nothing (its work, copies say, is charged as its process reports it).
    pub fn cap(&self, session: SessionId, launches: u64) -> Option<Nanos> {
        if launches == 0 {
            return None;
        }
        let mut recent: Vec<f64> = self.recent.get(&session)?.iter().copied().collect();
        if recent.is_empty() {
            return None;
        }
        recent.sort_by(f64::total_cmp);
        let lowest = &recent[..recent.len().div_ceil(4)];
        let per_launch = lowest.iter().sum::<f64>() / lowest.len() as f64;
        Some((per_launch * launches as f64).round() as Nanos)
    }

    pub fn forget(&mut self, session: SessionId) {
        self.recent.remove(&session);
        self.alone.remove(&session);
    }

    /// A lease of `session` that ran alone ended: its process was in its GPU phases `active_ns`
    /// for `launches`.
    pub fn learn_alone(&mut self, session: SessionId, active_ns: Nanos, launches: u64) {
        if launches == 0 {
            return;
        }
        keep_recent(
            self.alone.entry(session).or_default(),
            (active_ns, launches),
        );
    }

    /// What `launches` of `session` take, by its leases alone: their time in GPU phases
    /// over their launches, added up. `None` before any such lease, and for no launches.
    pub fn alone_take(&self, session: SessionId, launches: u64) -> Option<Nanos> {
        if launches == 0 {
            return None;
        }
        let alone = self.alone.get(&session)?;
        let (busy, count) = alone
            .iter()
            .fold((0u64, 0u64), |(b, n), &(x, k)| (b + x, n + k));
        (count > 0).then(|| (busy as f64 / count as f64 * launches as f64).round() as Nanos)
    }
}

/// Adds `value` to a process's `recent` leases, forgetting the oldest past [`RECENT_LEASES`].
pub(super) fn keep_recent<T>(recent: &mut VecDeque<T>, value: T) {
    if recent.len() == RECENT_LEASES {
        recent.pop_front();
    }
    recent.push_back(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_charged_what_its_launches_take_when_they_wait_for_nobody() {
        let mut costs = LaunchCosts::default();
        assert_eq!(costs.cap(1, 6), None, "nothing learnt yet");
        costs.learn(1, 0, 6);
        costs.learn(1, 600_000, 0);
        assert_eq!(
            costs.cap(1, 6),
            None,
            "a lease without work teaches nothing"
        );
        costs.learn(1, 1_200_000, 6);
        assert_eq!(costs.cap(1, 6), Some(1_200_000));
        costs.learn(1, 600_000, 6);
        costs.learn(1, 3_000_000, 6);
        assert_eq!(
            costs.cap(1, 3),
            Some(300_000),
            "the lowest of three: 100 us"
        );
        assert_eq!(costs.cap(1, 0), None, "no launches: no bound");
        assert_eq!(costs.cap(2, 6), None, "per process");
        costs.learn(1, 1_200_000, 6);
        costs.learn(1, 1_800_000, 6);
        assert_eq!(
            costs.cap(1, 1),
            Some(150_000),
            "the lowest two of five: 100 and 200 us"
        );
        for _ in 0..RECENT_LEASES - 1 {
            costs.learn(1, 1_800_000, 6);
        }
        assert_eq!(
            costs.cap(1, 1),
            Some(300_000),
            "the older ones out of the window"
        );
        costs.forget(1);
        assert_eq!(costs.cap(1, 6), None);
    }

    #[test]
    fn launches_take_what_the_leases_alone_took_per_launch_added_up() {
        let mut costs = LaunchCosts::default();
        assert_eq!(costs.alone_take(1, 4), None, "nothing learnt yet");
        costs.learn_alone(1, 5_000_000, 0);
        assert_eq!(costs.alone_take(1, 4), None, "no launches teach nothing");
        // a quarter-millisecond sampler reads a 100 us kernel as 0 or 250 us: the sums, not
        // the lowest ratios, come out right
        costs.learn_alone(1, 0, 1);
        costs.learn_alone(1, 250_000, 1);
        costs.learn_alone(1, 0, 1);
        costs.learn_alone(1, 150_000, 1);
        assert_eq!(costs.alone_take(1, 10), Some(1_000_000));
        assert_eq!(
            costs.alone_take(1, 0),
            None,
            "no launches: nothing to count"
        );
        assert_eq!(costs.alone_take(2, 10), None, "per process");
        for _ in 0..RECENT_LEASES {
            costs.learn_alone(1, 2_000_000, 1);
        }
        assert_eq!(
            costs.alone_take(1, 3),
            Some(6_000_000),
            "the older ones out of the window"
        );
        costs.forget(1);
        assert_eq!(costs.alone_take(1, 3), None);
    }
}
