//! Renewing clients: a batch client whose lease ended with work left is in line in all but
//! name until it asks again.

use super::{ClientId, Nanos, Scheduler, RETURN_GAP};

impl Scheduler {
    /// Batch client `client`'s lease ended with work left at `now`: it renews
    /// ([`Client::renewing_since`](super::Client)).
    pub(super) fn renewing_from(&mut self, client: ClientId, now: Nanos) {
        if let Some(c) = self.clients.get_mut(&client) {
            if !c.shares.interactive {
                c.renewing_since = Some(now);
            }
        }
    }

    /// The batch clients between a lease that ended with work left and their next ask, within a
    /// quantum of that end, neither waiting nor holding ([`Client::renewing_since`]): `(id,
    /// virtual time, lease end)`. Still in line in all but name: they hold the virtual clock
    /// back, and for [`RETURN_GAP`] no client that is a lease or more ahead of one of them in
    /// virtual time takes the GPU ([`Scheduler::leaves_the_gap`]). GPU soak seed 9: a client
    /// of request 0, far ahead in virtual time, took the gap after a lease of a 0.51 client
    /// (50 us after its end, or after a revoked lease drained), the clock moved to its virtual
    /// time, and every interactive process back from a pause was lifted there, behind the 0.51
    /// client by tens of virtual seconds: the interactive clients got 0.008 of their due 0.149
    /// for 40 s.
    pub(super) fn renewing(&self, now: Nanos) -> Vec<(ClientId, f64, Nanos)> {
        let horizon = self.quantum.max(RETURN_GAP);
        self.clients
            .iter()
            .filter(|(&id, c)| c.waiting.is_empty() && !self.holds(id))
            .filter_map(|(&id, c)| {
                let end = c.renewing_since.filter(|&end| now < end + horizon)?;
                Some((id, c.vtime, end))
            })
            .collect()
    }

    /// Whether client `id`, first in line, leaves the GPU to a renewing client for the rest of
    /// its gap ([`Scheduler::renewing`]): one it is over a lease ahead of (at its own weight)
    /// in virtual time, unless `id` is owed and that one is not. Nearer clients take the gap as
    /// before, and nobody waits for a client that does not ask within [`RETURN_GAP`].
    pub(super) fn leaves_the_gap(
        &self,
        id: ClientId,
        renewing: &[(ClientId, f64, Nanos)],
        now: Nanos,
    ) -> bool {
        let Some(c) = self.clients.get(&id) else {
            return false;
        };
        let ahead = c.vtime - self.quantum as f64 / c.weight();
        let owed = self.owed(id, now);
        renewing.iter().any(|&(other, vtime, end)| {
            now < end + RETURN_GAP && vtime < ahead && (!owed || self.owed(other, now))
        })
    }
}
