//! A batch client's lead in line is bounded, as lag is in EEVDF: a client waiting for the GPU
//! is never further ahead in virtual time of the other running batch clients (their weighted
//! mean) than [`LEAD_KEPT`] of the whole GPU at the running clients' total weight, or two
//! leases at its own weight, whichever is more (its edge). The lead beyond is forgiven.
//! Running are the batch clients holding or renewing a lease and those waiting with credit.
//!
//! A client gets ahead by running beside the others' leases (backfill, overlap by demand),
//! charged a part of each; once it needed the GPU alone it waited in line until the others had
//! caught up all of it: on an H200, a launch-bound training loop known as light ran beside the
//! others at 0.77 of the GPU for 20 s where it was due 0.29, then got nothing for 14 s. With the
//! bound it waits about [`LEAD_KEPT`] at most, whatever its lead and whoever else waits.
//!
//! Two leases at its own weight: a saturating client's virtual time moves a lease at its
//! weight at a time, so clients sharing by request, never that far apart, are not moved, and
//! the division by request stands. (Two leases at the smallest weight among them widened the
//! edge for all: beside a client of request 0 it was 4 virtual seconds.) Nothing moves while it
//! holds a lease, so a client that keeps running beside others is charged all of it as before.
//!
//! A client whose limit is below its part of the running clients' weight is held by its limit,
//! not by the line: its virtual time stays behind for good, so its lead is not bounded and it is
//! not counted in the others' mean (counted, it dragged their edges down until the clients ahead
//! of it were held at one, and they divided what it left equally, not by request; nor in the
//! mean an interactive client is held to). It is lifted to no
//! further behind their mean than its edge among them all the same, which leaves it first in line
//! whenever it has credit: behind by more, it banked a lag, and once its limit no longer held it
//! an interactive client beside it waited in line until it had caught up (nothing for ten
//! seconds, in a scheduler test). A client back from away is in line like any other.

use std::collections::BTreeSet;

use super::{ClientId, Nanos, Scheduler};

/// How much time of the whole GPU a lead in line is worth at most: a client ahead of the other
/// running clients by this much (in virtual time at the running clients' total weight) waits
/// about this long for them before it is first in line.
pub const LEAD_KEPT: Nanos = 500_000_000;

impl Scheduler {
    /// Those of these batch clients whose limit is below their part of the clients' weight:
    /// held by their limits, not by the line, their virtual times fall behind for good.
    pub(super) fn held_by_limits(
        &self,
        clients: impl Iterator<Item = ClientId> + Clone,
    ) -> BTreeSet<ClientId> {
        let weights: f64 = clients
            .clone()
            .filter_map(|id| self.clients.get(&id))
            .map(|c| c.weight())
            .sum();
        clients
            .filter(|id| {
                self.clients
                    .get(id)
                    .is_some_and(|c| c.shares.limit < c.weight() / weights)
            })
            .collect()
    }

    /// Lifts the clients `held` by their limits to no further behind the running others' mean
    /// (`sum` of their virtual times by weight, over their weight `all`) than an edge: while
    /// held, they are first in line whenever they have credit all the same; once their limits no
    /// longer hold them, they do not run alone until the others caught up with a lag they
    /// banked while held.
    fn bound_lags(&mut self, held: &BTreeSet<ClientId>, sum: f64, all: f64) {
        if all <= 0.0 {
            return;
        }
        let mean = sum / all;
        let quantum = self.quantum as f64;
        for id in held {
            if let Some(c) = self.clients.get_mut(id) {
                let span = (LEAD_KEPT as f64 / (all + c.weight())).max(2.0 * quantum / c.weight());
                c.vtime = c.vtime.max(mean - span);
            }
        }
    }

    /// Forgives the batch clients in line their leads in virtual time past their edges at
    /// `now` ([`lead`](self)).
    pub(super) fn bound_leads(&mut self, now: Nanos) {
        let renewing: Vec<ClientId> = self.renewing(now).into_iter().map(|r| r.0).collect();
        let quantum = self.quantum as f64;
        // the batch clients in the running, and whether each is in line: holding or renewing a
        // lease, or waiting with credit left (one without waits for its limit, not its turn)
        let running: Vec<(ClientId, bool)> = self
            .clients
            .iter()
            .filter(|(_, c)| !c.shares.interactive)
            .filter_map(|(&id, c)| {
                let holds = self.holds(id) || renewing.contains(&id);
                let waits =
                    !c.waiting.is_empty() && c.available(now, quantum, self.pending(id)) > 0.0;
                (holds || waits).then_some((id, !holds))
            })
            .collect();
        let held = self.held_by_limits(running.iter().map(|r| r.0));
        let running: Vec<(ClientId, bool)> = running
            .into_iter()
            .filter(|(id, _)| !held.contains(id))
            .collect();
        let (sum, all) = running
            .iter()
            .filter_map(|(id, _)| self.clients.get(id))
            .fold((0.0, 0.0), |(s, w), c| {
                (s + c.vtime * c.weight(), w + c.weight())
            });
        self.bound_lags(&held, sum, all);
        // each client in line against the others' mean, all as they were at this poll
        let moved: Vec<(ClientId, f64)> = running
            .iter()
            .filter(|r| r.1)
            .filter_map(|&(id, _)| {
                let c = self.clients.get(&id)?;
                let others = all - c.weight();
                (others > 0.0).then(|| {
                    let mean = (sum - c.vtime * c.weight()) / others;
                    let span = (LEAD_KEPT as f64 / all).max(2.0 * quantum / c.weight());
                    (id, c.vtime.min(mean + span))
                })
            })
            .collect();
        for (id, vtime) in moved {
            if let Some(c) = self.clients.get_mut(&id) {
                c.vtime = vtime;
            }
        }
    }
}
