//! A lead in virtual time decays, as lag does in EEVDF: a batch client ahead of the active
//! batch clients' weighted mean virtual time by more than [`LEAD_KEPT`]'s worth (the edge)
//! keeps that much and sees the rest shrink exponentially, by e every [`LEAD_DECAY`].
//!
//! A client gets ahead by running beside the others' leases (backfill, overlap by demand),
//! charged a part of each; once it needs the GPU alone it waited in line until the others had
//! caught up all of it: on an H200, a launch-bound training loop known as light ran beside the
//! others at 0.77 of the GPU for 20 s where it was due 0.29, then got nothing for 14 s. The
//! decay bounds that wait to about [`LEAD_KEPT`] and a few time constants, whatever the lead.
//!
//! The edge is the same span of virtual time past the mean for every client (at least two
//! leases' worth at the smallest weight active, so that no client's own leases are forgiven in
//! part). The active clients past it move back together, by the same span: the lead of the
//! nearest of them beyond the edge decays, and the others keep their distances to it. So the
//! decay keeps the clients' order and their differences in virtual time, and clients held ahead
//! of one that stays behind (its limit, or a loop that cannot use its share) still divide what
//! it leaves by their requests. A bound that held each lead at a cap pinned such clients to one
//! virtual time each, and they divided the rest equally; one decayed client by client forgave
//! most the one of the largest steps, a light client. Clients within the edge, as saturating
//! clients sharing by request always are, are not moved at all. A client away decays on its
//! own, for when it comes back.

use std::collections::BTreeSet;

use super::{ClientId, Nanos, Scheduler};

/// How much time of the whole GPU a lead is worth that is kept whole: a client ahead of the
/// active batch clients' mean by this much (in virtual time at their total weight) waits about
/// this long for the others before it is first in line.
pub const LEAD_KEPT: Nanos = 500_000_000;
/// The time constant of the decay of a lead beyond [`LEAD_KEPT`]'s worth.
pub const LEAD_DECAY: Nanos = 500_000_000;

impl Scheduler {
    /// Lets the leads in virtual time of the batch clients decay from the last call to `now`
    /// ([`lead`](self)).
    pub(super) fn decay_leads(&mut self, now: Nanos) {
        let dt = now.saturating_sub(self.leads_at);
        self.leads_at = self.leads_at.max(now);
        if dt == 0 {
            return;
        }
        let renewing: Vec<ClientId> = self.renewing(now).into_iter().map(|r| r.0).collect();
        let active: BTreeSet<ClientId> = self
            .clients
            .iter()
            .filter(|(&id, c)| {
                !c.shares.interactive
                    && (!c.waiting.is_empty() || self.holds(id) || renewing.contains(&id))
            })
            .map(|(&id, _)| id)
            .collect();
        let (sum, weights, least) = active.iter().filter_map(|id| self.clients.get(id)).fold(
            (0.0, 0.0, f64::INFINITY),
            |(s, w, least), c| {
                (
                    s + c.vtime * c.weight(),
                    w + c.weight(),
                    least.min(c.weight()),
                )
            },
        );
        if weights <= 0.0 {
            return;
        }
        let lead = LEAD_KEPT as f64 / weights;
        let edge = sum / weights + lead.max(2.0 * self.quantum as f64 / least);
        let kept = (-(dt as f64) / LEAD_DECAY as f64).exp();
        // the active clients past the edge all move back by the same span: the nearest one's
        // lead beyond the edge decays, and the others keep their distances to it
        let nearest = active
            .iter()
            .filter_map(|id| self.clients.get(id))
            .map(|c| c.vtime)
            .filter(|&v| v > edge)
            .fold(f64::INFINITY, f64::min);
        let shift = if nearest.is_finite() {
            (nearest - edge) * (1.0 - kept)
        } else {
            0.0
        };
        for (id, c) in self.clients.iter_mut() {
            if c.shares.interactive || c.vtime <= edge {
                continue;
            }
            if active.contains(id) {
                c.vtime -= shift;
            } else {
                // away: its own lead decays, for when it comes back
                c.vtime = edge + (c.vtime - edge) * kept;
            }
        }
    }
}
