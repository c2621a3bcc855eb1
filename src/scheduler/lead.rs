//! A batch client's lead in line is bounded, as lag is in EEVDF: the nearest in virtual time of
//! the clients that wait for the GPU is never further ahead of the clients it serves now (the
//! weighted mean of the batch clients holding or renewing a lease) than [`LEAD_KEPT`] of the
//! whole GPU at the running clients' total weight, or two leases at the smallest weight among
//! them, whichever is more (the edge). The lead beyond is forgiven, and every other client in
//! line moves back with it by the same span.
//!
//! A client gets ahead by running beside the others' leases (backfill, overlap by demand),
//! charged a part of each; once it needed the GPU alone it waited in line until the others had
//! caught up all of it: on an H200, a launch-bound training loop known as light ran beside the
//! others at 0.77 of the GPU for 20 s where it was due 0.29, then got nothing for 14 s. With the
//! bound it waits about [`LEAD_KEPT`] at most, whatever its lead.
//!
//! The clients in line keep their distances to each other: their order and the division of
//! what others leave them by request stand, and one that ran further ahead stays behind the
//! others in line by as much. (A cap of each client's own over the mean pinned clients ahead of
//! one held at its limit to one virtual time, and they divided the rest equally; a common cap
//! made them take turns by client number.) Nothing moves while it holds a lease, so a client that
//! keeps running beside others is charged all of it as before, and saturating clients sharing
//! by request, never a lease apart, are not moved at all. A client waiting without credit (held
//! at its limit) is neither moved nor counted: it would drag the mean down for good. A client
//! back from away is in line like any other.

use super::{ClientId, Nanos, Scheduler};

/// How much time of the whole GPU a lead in line is worth at most: a client ahead of the
/// clients served by this much (in virtual time at the running clients' total weight) waits
/// about this long for them before it is first in line.
pub const LEAD_KEPT: Nanos = 500_000_000;

impl Scheduler {
    /// Forgives the batch clients in line their leads in virtual time past the edge at `now`
    /// ([`lead`](self)).
    pub(super) fn bound_leads(&mut self, now: Nanos) {
        let renewing: Vec<ClientId> = self.renewing(now).into_iter().map(|r| r.0).collect();
        let quantum = self.quantum as f64;
        // the batch clients in the running, and whether each is in line alone: holding or
        // renewing a lease (served), or waiting with credit left (in line; one held at its limit
        // stays behind for good and would drag the mean down)
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
        let in_line: Vec<ClientId> = running.iter().filter(|r| r.1).map(|r| r.0).collect();
        if in_line.is_empty() {
            return;
        }
        // the virtual time of the GPU now: the weighted mean of the batch clients it serves
        let served = running.iter().filter(|r| !r.1).map(|r| &r.0);
        let Some(mean) = self.mean_vtime(served) else {
            return;
        };
        let (all, least) = running
            .iter()
            .filter_map(|(id, _)| self.clients.get(id))
            .fold((0.0, f64::INFINITY), |(w, least), c| {
                (w + c.weight(), least.min(c.weight()))
            });
        let edge = mean + (LEAD_KEPT as f64 / all).max(2.0 * quantum / least);
        // the nearest client in line is brought back to the edge, and every other one in line
        // moves back by the same span, keeping its distance to it
        let nearest = in_line
            .iter()
            .filter_map(|id| self.clients.get(id))
            .map(|c| c.vtime)
            .fold(f64::INFINITY, f64::min);
        if nearest <= edge {
            return;
        }
        for id in in_line {
            if let Some(c) = self.clients.get_mut(&id) {
                c.vtime -= nearest - edge;
            }
        }
    }
}
