//! What clients and processes got and waited for: the figures of reports and accounting.

use super::{ClientId, Nanos, Scheduler, SessionId, USAGE_WINDOW};

/// Per-client figures for reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Fraction of the last `USAGE_WINDOW` (or of the time since the scheduler started, if
    /// shorter) that the client's work took (USED): each lease's busy time as its process
    /// reports it, beside other leases no more than the driver's turns gave it.
    pub share: f64,
    /// Wall time charged to its leases, by which it takes its turns.
    pub charged_total: Nanos,
    /// GPU time its work took, as in `share`, added up.
    pub gpu_total: Nanos,
    pub grants: u64,
    /// Time its processes waited for a grant (from asking to the grant), waits going on
    /// included.
    pub waited_total: Nanos,
    pub waiting: usize,
    pub holding: bool,
    /// Its processes' demand estimates, added up ([`Scheduler::client_demand`]).
    pub demand: f64,
}

/// What one process got and waited for, for accounting: running totals since it attached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionUsage {
    /// GPU time charged to its leases.
    pub charged: Nanos,
    pub grants: u64,
    /// Time it waited for a grant, the wait going on included.
    pub waited: Nanos,
}

/// [`SessionUsage`] and when the current wait began.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct SessionBook {
    usage: SessionUsage,
    waiting_since: Option<Nanos>,
}

impl SessionBook {
    /// A wait for a grant begins at `now`, unless one goes on.
    pub(super) fn start_wait(&mut self, now: Nanos) {
        self.waiting_since.get_or_insert(now);
    }

    /// `ns` of GPU time charged to its leases.
    pub(super) fn charge(&mut self, ns: Nanos) {
        self.usage.charged += ns;
    }

    /// A lease was granted (or extended).
    pub(super) fn granted(&mut self) {
        self.usage.grants += 1;
    }

    /// Ends the current wait at `now`; returns how long it was.
    pub(super) fn end_wait(&mut self, now: Nanos) -> Nanos {
        let waited = self
            .waiting_since
            .take()
            .map_or(0, |since| now.saturating_sub(since));
        self.usage.waited += waited;
        waited
    }

    fn at(&self, now: Nanos) -> SessionUsage {
        let mut u = self.usage;
        u.waited += self
            .waiting_since
            .map_or(0, |since| now.saturating_sub(since));
        u
    }
}

impl Scheduler {
    /// What `session` got and waited so far (zero for one the scheduler has not seen).
    pub fn session_usage(&self, session: SessionId, now: Nanos) -> SessionUsage {
        self.books
            .get(&session)
            .map_or_else(SessionUsage::default, |b| b.at(now))
    }

    /// The final [`SessionUsage`] of a session that is gone, forgotten by the scheduler.
    pub fn take_session_usage(&mut self, session: SessionId, now: Nanos) -> SessionUsage {
        self.books
            .remove(&session)
            .map_or_else(SessionUsage::default, |b| b.at(now))
    }

    pub(super) fn prune_usage(&mut self, now: Nanos) {
        let from = now.saturating_sub(USAGE_WINDOW);
        for c in self.clients.values_mut() {
            while c.recent.front().is_some_and(|(end, _)| *end < from) {
                c.recent.pop_front();
            }
        }
    }

    /// The part of the last [`USAGE_WINDOW`] that client `id`'s work took (its USED), at most
    /// 1; `None` for a client the scheduler does not know.
    pub(super) fn recent_share(&self, id: ClientId, now: Nanos) -> Option<f64> {
        let c = self.clients.get(&id)?;
        let from = now.saturating_sub(USAGE_WINDOW).max(self.started);
        let span = now.saturating_sub(from).max(1) as f64;
        let recent: Nanos = c
            .recent
            .iter()
            .filter(|(end, _)| *end >= from)
            .map(|(_, ns)| ns)
            .sum();
        Some((recent as f64 / span).min(1.0))
    }

    /// A client's figures at `now` (`None` for a client the scheduler does not know).
    pub fn usage(&self, id: ClientId, now: Nanos) -> Option<Usage> {
        let c = self.clients.get(&id)?;
        let waiting_now: Nanos = c
            .waiting
            .iter()
            .filter_map(|s| self.books.get(s)?.waiting_since)
            .map(|since| now.saturating_sub(since))
            .sum();
        Some(Usage {
            share: self.recent_share(id, now)?,
            charged_total: c.charged_total,
            gpu_total: c.gpu_total,
            grants: c.grants,
            waited_total: c.waited_total + waiting_now,
            waiting: c.waiting.len(),
            holding: self.holds(id),
            demand: self.client_demand(id),
        })
    }
}
