//! The token scheduler: pure, deterministic logic with the clock passed in.
//!
//! One token per GPU: a [`Scheduler`] schedules one device, and [`Schedulers`] keeps one for
//! each device that processes name ([`devices`]). A grant is a *lease* of one quantum. Among the clients with a waiting
//! process, the one with the smallest weighted virtual time gets the next lease (weights are the
//! clients' requests), so saturating clients converge to shares proportional to their requests,
//! and every client gets at least its request (the requests add up to at most 1). Idle share goes
//! to whoever waits: the scheduler is work-conserving. A *limit* is a token bucket refilled at
//! `limit` nanoseconds per nanosecond: a client out of credit waits even when the GPU is idle.
//!
//! Charges come from the daemon's own clock, never from what a process reports: a lease is
//! charged its wall time from grant to release, at most to its end plus the grace, after which
//! the token is taken back (a process that dies or hangs holds it that long). A process releases
//! only once the work it queued has finished, and it keeps at most a bounded amount queued, so
//! that a lease's wall time is the GPU time it took.
//!
//! *Overlap by demand* (without MPS): each process reports how much of its lease its work kept
//! the GPU busy; the scheduler keeps an estimate of that *demand* per process, from the leases it
//! ran alone ([`demand`]). The driver time-slices the GPU between processes with work queued in
//! equal turns, so the next process gets a lease at once beside the running ones (marked
//! [`Grant::shared`]) while those turns would give each of them what the scheduler would by
//! their demands and weights ([`fairness`]): always when every process weighs the same (its
//! client's request divided among the client's active processes), and for unequal weights while
//! the GPU has room for all of them or the light ones leave the others their due. Launch-bound
//! jobs, data loading and small kernels leave room; saturating processes of unequal weights take
//! exclusive turns. Shared leases are extended only while every process weighs the same, so
//! that demands stay measured where they decide. Leases that run together are each charged
//! their part of the time.
//!
//! *Interactive* clients get a lease as soon as they ask, beside any other; the leases of batch
//! clients running then are *revoked*: they end at their holder's next launch (the daemon tells
//! the process; [`Scheduler::take_revoked`]).
//!
//! With more than one *slot* and overlap not gated by demand (under MPS, where the kernels of
//! several processes run together), up to that many leases run at once; requests then decide who
//! waits when more processes want the GPU than there are slots, and limits hold as before.

use std::collections::{BTreeMap, VecDeque};

pub mod demand;
pub mod devices;
pub mod fair_share;
pub mod fairness;
pub mod lease_log;

use demand::Demands;
pub use devices::Schedulers;
use lease_log::LeaseLog;

/// Monotonic nanoseconds from an arbitrary origin.
pub type Nanos = u64;
pub type ClientId = u64;
pub type SessionId = u64;

/// Weight of a client with no request, so that such clients still share among themselves.
const MIN_WEIGHT: f64 = 0.01;

/// The weight of a request, before any fair-share factor.
pub fn request_weight(request: f64) -> f64 {
    request.max(MIN_WEIGHT)
}
/// How long after an interactive client's last lease batch processes of equal weights still
/// overlap only as far as their demands fit: its next request comes soon.
pub const INTERACTIVE_RECENT: Nanos = 1_000_000_000;
/// How far back `usage` looks.
pub const USAGE_WINDOW: Nanos = 10_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub request: f64,
    pub limit: f64,
    /// Interactive (latency class): a lease at once, others' leases revoked.
    pub interactive: bool,
}

/// A decision to send: `session` holds the token for `lease_ns` from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub session: SessionId,
    pub client: ClientId,
    pub lease_ns: Nanos,
    /// Without MPS, the lease starts beside others (light processes overlapping by demand).
    pub shared: bool,
    /// A batch lease while an interactive client is active or was within [`INTERACTIVE_RECENT`]:
    /// its holder keeps a short queue, so that the interactive client's next request waits
    /// little behind its work.
    pub tight: bool,
}

#[derive(Debug)]
struct Client {
    shares: Shares,
    vtime: f64,
    credit: f64,
    credit_at: Nanos,
    waiting: VecDeque<SessionId>,
    /// (end of charge, charged ns) for the last `USAGE_WINDOW`.
    recent: VecDeque<(Nanos, Nanos)>,
    charged_total: Nanos,
    gpu_total: Nanos,
    grants: u64,
    /// Time its processes waited for a grant, counting the waits that ended.
    waited_total: Nanos,
    /// Its fair-share factor ([`fair_share`]), 1 unless fair share is on.
    fair_factor: f64,
}

impl Client {
    fn weight(&self) -> f64 {
        request_weight(self.shares.request) * self.fair_factor
    }
    fn refill(&mut self, now: Nanos, burst: f64) {
        let dt = now.saturating_sub(self.credit_at) as f64;
        self.credit = (self.credit + dt * self.shares.limit).min(burst);
        self.credit_at = now.max(self.credit_at);
    }
    fn charge(&mut self, ns: Nanos, now: Nanos) {
        self.vtime += ns as f64 / self.weight();
        self.credit -= ns as f64;
        self.charged_total += ns;
        self.recent.push_back((now, ns));
    }
}

#[derive(Debug, Clone, Copy)]
struct Lease {
    session: SessionId,
    client: ClientId,
    start: Nanos,
    end: Nanos,
    /// GPU time owed so far: wall time, divided among the leases that ran at the same moment.
    owed: f64,
    /// Ended early for an interactive client: no extension, the token goes back at the holder's
    /// next launch.
    revoked: bool,
    /// No other lease ran during any of it: its busy time measures its process's demand.
    alone: bool,
    /// A short lease alone, to measure its process's demand ([`demand`]): nothing starts beside it.
    probe: bool,
}

/// Per-client figures for reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Fraction of the last `USAGE_WINDOW` (or of the time since the scheduler started, if
    /// shorter) charged to the client.
    pub share: f64,
    pub charged_total: Nanos,
    /// GPU busy time its processes reported (each lease's report clamped to its wall time).
    pub gpu_total: Nanos,
    pub grants: u64,
    /// Time its processes waited for a grant (from asking to the grant), waits going on
    /// included.
    pub waited_total: Nanos,
    pub waiting: usize,
    pub holding: bool,
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
struct SessionBook {
    usage: SessionUsage,
    waiting_since: Option<Nanos>,
}

impl SessionBook {
    /// Ends the current wait at `now`; returns how long it was.
    fn end_wait(&mut self, now: Nanos) -> Nanos {
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

#[derive(Debug)]
pub struct Scheduler {
    quantum: Nanos,
    /// How long past its end a lease stays with its holder, for the work it queued to drain and
    /// its release to arrive, before the token is taken back.
    grace: Nanos,
    clients: BTreeMap<ClientId, Client>,
    /// The leases running now, at most `slots`.
    holders: Vec<Lease>,
    /// When `owed` of the running leases was last brought up to date.
    owed_at: Nanos,
    /// How many leases may run at once.
    slots: usize,
    /// Whether a lease may start beside others only while their demands fit (without MPS).
    demand_gated: bool,
    /// Each attached process's demand estimate: the fraction of its leases its work kept the
    /// GPU busy.
    demand: Demands,
    /// Revoked leases whose holders have not been told yet.
    revoked: Vec<SessionId>,
    /// When each session's last lease ended.
    lease_log: LeaseLog,
    /// What each process got and waited, until [`Scheduler::take_session_usage`].
    books: BTreeMap<SessionId, SessionBook>,
    /// When an interactive client last held or waited for a lease.
    interactive_at: Option<Nanos>,
    /// Virtual clock: never behind the smallest virtual time of an active client.
    vclock: f64,
    started: Nanos,
}

impl Scheduler {
    pub fn new(quantum: Nanos, now: Nanos) -> Self {
        Scheduler {
            quantum: quantum.max(1),
            grace: 0,
            clients: BTreeMap::new(),
            holders: Vec::new(),
            owed_at: now,
            slots: 1,
            demand_gated: false,
            demand: Demands::default(),
            revoked: Vec::new(),
            lease_log: LeaseLog::default(),
            books: BTreeMap::new(),
            interactive_at: None,
            vclock: 0.0,
            started: now,
        }
    }

    pub fn quantum(&self) -> Nanos {
        self.quantum
    }

    pub fn set_quantum(&mut self, quantum: Nanos) {
        self.quantum = quantum.max(1);
    }

    pub fn set_grace(&mut self, grace: Nanos) {
        self.grace = grace;
    }

    /// How many leases may run at once (at least one), and whether a lease starts beside
    /// others only while the driver's turns would be fair to all ([`fairness`]).
    pub fn set_slots(&mut self, slots: usize, demand_gated: bool) {
        self.slots = slots.max(1);
        self.demand_gated = demand_gated;
    }

    /// Brings each running lease's `owed` up to `now`: the time since the last change, divided by
    /// the number of leases that ran in it.
    fn settle(&mut self, now: Nanos) {
        let dt = now.saturating_sub(self.owed_at) as f64;
        let n = self.holders.len().max(1) as f64;
        for h in &mut self.holders {
            h.owed += dt / n;
        }
        self.owed_at = now.max(self.owed_at);
    }

    fn holds(&self, client: ClientId) -> bool {
        self.holders.iter().any(|h| h.client == client)
    }

    fn burst(&self) -> f64 {
        self.quantum as f64
    }

    /// Adds a client or changes its shares.
    pub fn set_client(&mut self, id: ClientId, shares: Shares, now: Nanos) {
        let burst = self.burst();
        match self.clients.get_mut(&id) {
            Some(c) => {
                c.refill(now, burst);
                c.shares = shares;
            }
            None => {
                self.clients.insert(
                    id,
                    Client {
                        shares,
                        vtime: self.vclock,
                        credit: burst,
                        credit_at: now,
                        waiting: VecDeque::new(),
                        recent: VecDeque::new(),
                        charged_total: 0,
                        gpu_total: 0,
                        grants: 0,
                        waited_total: 0,
                        fair_factor: 1.0,
                    },
                );
            }
        }
    }

    /// Sets a client's fair-share factor (clamped to [`fair_share::FLOOR`]..=1); its weight is
    /// its request times it. Unknown clients are ignored.
    pub fn set_fair_factor(&mut self, id: ClientId, factor: f64) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.fair_factor = clamp_factor(factor);
        }
    }

    /// Forgets a client; its waiting sessions are dropped and a lease it holds ends.
    pub fn remove_client(&mut self, id: ClientId, now: Nanos) {
        // the others' shares of the time so far counted this client's leases too
        self.settle(now);
        if let Some(c) = self.clients.remove(&id) {
            for s in c.waiting {
                self.demand.remove(s);
                if let Some(b) = self.books.get_mut(&s) {
                    b.end_wait(now);
                }
            }
        }
        for h in self.holders.iter().filter(|h| h.client == id) {
            self.lease_log.ended(h.session, now);
        }
        self.holders.retain(|h| h.client != id);
    }

    pub fn has_client(&self, id: ClientId) -> bool {
        self.clients.contains_key(&id)
    }

    fn is_active(&self, id: ClientId, c: &Client) -> bool {
        !c.waiting.is_empty() || self.holds(id)
    }

    /// `session` of `client` asks for the token.
    pub fn acquire(&mut self, client: ClientId, session: SessionId, now: Nanos) {
        let was_active = match self.clients.get(&client) {
            Some(c) => self.is_active(client, c),
            None => return,
        };
        let vclock = self.vclock;
        let burst = self.burst();
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        if !was_active {
            // A client coming back from idle does not bank the time it was away.
            c.vtime = c.vtime.max(vclock);
            c.refill(now, burst);
        }
        if !c.waiting.contains(&session) {
            c.waiting.push_back(session);
            let book = self.books.entry(session).or_default();
            book.waiting_since.get_or_insert(now);
        }
        self.demand.add(session);
    }

    /// `session` gives the token back; its work kept the GPU busy for `busy_ns` of the lease (as
    /// its process says: it only feeds the demand estimate, clamped to the lease's wall time).
    /// The lease is charged its wall time. A release after the token was taken back changes
    /// nothing: that lease was charged to its end and grace already.
    pub fn release(&mut self, session: SessionId, busy_ns: Nanos, now: Nanos) {
        let Some(i) = self.holders.iter().position(|h| h.session == session) else {
            return;
        };
        self.settle(now);
        let h = self.holders.swap_remove(i);
        self.end_lease(h, busy_ns, now);
    }

    /// Charges a lease that ended at `now` and updates its process's demand.
    fn end_lease(&mut self, h: Lease, busy_ns: Nanos, now: Nanos) {
        let wall = now.saturating_sub(h.start);
        let busy = busy_ns.min(wall);
        let owed = h.owed.round() as Nanos;
        if let Some(c) = self.clients.get_mut(&h.client) {
            c.gpu_total += busy;
            c.charge(owed, now);
            if c.shares.interactive {
                // "recently" counts from the end of an interactive client's last lease
                self.interactive_at = Some(now);
            }
            self.books.entry(h.session).or_default().usage.charged += owed;
        }
        self.demand.learn(h.session, busy, wall, h.alone, now);
        self.lease_log.ended(h.session, now);
    }

    /// `session`, holding a lease, asks for the next one at once. Granted (the lease restarts now,
    /// what ran so far is charged) when no other session waits, the lease was not revoked and the
    /// client's limit allows it; the new lease (shared when others run beside it), or `None` when
    /// it must give the token back as usual.
    pub fn extend(&mut self, session: SessionId, now: Nanos) -> Option<Grant> {
        let i = self.holders.iter().position(|h| h.session == session)?;
        if self.holders[i].revoked
            || self.clients.values().any(|c| !c.waiting.is_empty())
            || self.overlapping_by_demand(now)
        {
            return None;
        }
        self.settle(now);
        let burst = self.burst();
        let quantum = self.quantum;
        let h = &mut self.holders[i];
        let c = self.clients.get_mut(&h.client)?;
        let owed = h.owed.round() as Nanos;
        c.charge(owed, now);
        let book = self.books.entry(session).or_default();
        book.usage.charged += owed;
        c.refill(now, burst);
        if c.credit <= 0.0 {
            // over its limit: the lease ends as usual and the client waits for credit
            h.owed = 0.0;
            h.end = h.start;
            return None;
        }
        c.grants += 1;
        book.usage.grants += 1;
        let alone = self.holders.len() == 1;
        let h = &mut self.holders[i];
        *h = Lease {
            session,
            client: h.client,
            start: now,
            end: now + quantum,
            owed: 0.0,
            revoked: false,
            alone,
            probe: false,
        };
        let client = h.client;
        Some(Grant {
            session,
            client,
            lease_ns: quantum,
            shared: self.demand_gated && !alone,
            tight: self.tight_for(client, now),
        })
    }

    /// Leases that run together by demand (without MPS) are not extended unless every process
    /// weighs the same: an extension reports no busy time, so their demands would never be
    /// measured again, and processes of unequal weights that grew heavy would go on overlapping
    /// (sharing the GPU as the driver's time-slicing does, not by request). They ask again at
    /// each lease's end instead. Processes of equal weights get what the scheduler would give
    /// them from the driver's turns, whatever their demands.
    fn overlapping_by_demand(&self, now: Nanos) -> bool {
        self.demand_gated
            && self.holders.len() > 1
            && (!self.equal_weights() || self.interactive_recently(now))
    }

    /// Whether an interactive client held or waited for a lease in the last
    /// [`INTERACTIVE_RECENT`].
    fn interactive_recently(&self, now: Nanos) -> bool {
        self.interactive_at
            .is_some_and(|t| now.saturating_sub(t) < INTERACTIVE_RECENT)
    }

    /// The processes that wait or hold a lease, with their clients, interactive ones left out
    /// (they run at once whatever the others do).
    fn active_batch(&self) -> impl Iterator<Item = (ClientId, SessionId)> + '_ {
        let holding = self.holders.iter().map(|h| (h.client, h.session));
        let waiting = self
            .clients
            .iter()
            .flat_map(|(&id, c)| c.waiting.iter().map(move |&s| (id, s)));
        holding
            .chain(waiting)
            .filter(|(id, _)| self.clients.get(id).is_some_and(|c| !c.shares.interactive))
    }

    /// A process's weight: its client's, divided among the client's processes that wait or
    /// hold a lease (the driver gives each process its own turns).
    fn process_weight(&self, client: ClientId) -> f64 {
        let Some(c) = self.clients.get(&client) else {
            return MIN_WEIGHT;
        };
        let waiting = c.waiting.len();
        let holding = self.holders.iter().filter(|h| h.client == client).count();
        c.weight() / (waiting + holding).max(1) as f64
    }

    /// Whether every batch process that waits or holds a lease weighs the same: then the
    /// driver's equal turns are the scheduler's division, and their leases may all overlap.
    fn equal_weights(&self) -> bool {
        let mut weights = self.active_batch().map(|(c, _)| self.process_weight(c));
        let Some(first) = weights.next() else {
            return true;
        };
        weights.all(|w| (w - first).abs() <= first * 0.01)
    }

    /// Whether `next` of client `id` may start beside the running leases: by the processes'
    /// demands and weights, the driver's turns would give each what the scheduler would
    /// ([`fairness::fair_together`]). While an interactive client is active
    /// ([`INTERACTIVE_RECENT`]), only while all their demands fit.
    fn fair_beside(&self, id: ClientId, next: SessionId, now: Nanos) -> bool {
        if self.interactive_recently(now) {
            // The latency class: while it runs (or ran a moment ago) only processes that fit in
            // the room the GPU has overlap, whatever their weights, so that an interactive
            // client's work waits for one bounded queue at most, not for several.
            let demands: f64 = self
                .holders
                .iter()
                .map(|h| h.session)
                .chain(std::iter::once(next))
                .map(|s| self.demand.get(s).unwrap_or(1.0))
                .sum();
            return demands <= fairness::CAPACITY;
        }
        let procs: Vec<(f64, f64)> = self
            .holders
            .iter()
            .map(|h| (h.session, h.client))
            .chain(std::iter::once((next, id)))
            .map(|(s, c)| (self.demand.get(s).unwrap_or(1.0), self.process_weight(c)))
            .collect();
        fairness::fair_together(&procs)
    }

    /// A session closed: it stops waiting and loses the token if it had it.
    pub fn session_gone(&mut self, session: SessionId, now: Nanos) {
        self.release(session, 0, now);
        self.demand.remove(session);
        self.lease_log.forget(session);
        let book = self.books.get_mut(&session);
        let waited = book.map_or(0, |b| b.end_wait(now));
        for c in self.clients.values_mut() {
            if c.waiting.contains(&session) {
                c.waiting.retain(|s| *s != session);
                c.waited_total += waited;
            }
        }
    }

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

    /// The sessions whose leases were revoked since the last call: tell them.
    pub fn take_revoked(&mut self) -> Vec<SessionId> {
        std::mem::take(&mut self.revoked)
    }

    /// A process's demand estimate (`None` for a session the scheduler has not seen).
    pub fn demand(&self, session: SessionId) -> Option<f64> {
        self.demand.get(session)
    }

    /// Ends the leases that ran out and picks the next holder: an interactive client at once
    /// (revoking the batch leases that run), else, while a slot is free and demand allows, the
    /// waiting client furthest behind. Returns one grant to send, if any; call again until it
    /// returns `None`, then send [`Scheduler::take_revoked`].
    pub fn poll(&mut self, now: Nanos) -> Option<Grant> {
        let grace = self.grace;
        self.settle(now);
        let (over, running): (Vec<Lease>, Vec<Lease>) =
            self.holders.iter().partition(|h| now >= h.end + grace);
        self.holders = running;
        for h in over {
            // Taken back: charged to its end and grace; its process was busy all along.
            self.end_lease(h, Nanos::MAX, now);
        }
        self.prune_usage(now);
        let burst = self.burst();
        let mut best: Option<(f64, ClientId)> = None;
        let mut urgent: Option<(f64, ClientId)> = None;
        // The virtual clock follows the clients that wait or hold a lease: a holder's virtual
        // time counts, or one that renews (released, not yet waiting again) would be moved up
        // to the waiting ones' and lose the lead its request gives it.
        let mut min_active = f64::INFINITY;
        for h in &self.holders {
            if let Some(c) = self.clients.get(&h.client) {
                min_active = min_active.min(c.vtime);
            }
        }
        for (&id, c) in self.clients.iter_mut() {
            if c.waiting.is_empty() {
                continue;
            }
            min_active = min_active.min(c.vtime);
            c.refill(now, burst);
            if c.credit <= 0.0 {
                continue;
            }
            let slot = if c.shares.interactive {
                &mut urgent
            } else {
                &mut best
            };
            if slot.is_none_or(|(v, _)| c.vtime < v) {
                *slot = Some((c.vtime, id));
            }
        }
        if min_active.is_finite() {
            self.vclock = self.vclock.max(min_active);
        }
        let interactive_holds = self.holders.iter().any(|h| {
            self.clients
                .get(&h.client)
                .is_some_and(|c| c.shares.interactive)
        });
        if urgent.is_some() || interactive_holds {
            self.interactive_at = Some(now);
        }
        if let Some((_, id)) = urgent {
            let mut revoked = vec![];
            for h in &mut self.holders {
                if !h.revoked
                    && !self
                        .clients
                        .get(&h.client)
                        .is_some_and(|c| c.shares.interactive)
                {
                    h.revoked = true;
                    h.end = h.end.min(now);
                    revoked.push(h.session);
                }
            }
            self.revoked.extend(revoked);
            return self.grant(id, now, false);
        }
        let (_, id) = best?;
        if self.holders.len() >= self.slots {
            return None;
        }
        let mut probe = false;
        if self.demand_gated {
            let next = *self.clients.get(&id)?.waiting.front()?;
            // Demands decide nothing while every process weighs the same: no probe then, but
            // for a process's first (its hook learns the GPU time of its launches alone, which
            // bounds its queue beside others).
            probe = self.demand.probe_due(next)
                && (self.demand.never_alone(next)
                    || !self.equal_weights()
                    || self.interactive_recently(now));
            if !self.holders.is_empty() {
                if probe || self.holders.iter().any(|h| h.revoked || h.probe) {
                    // a probe waits for the GPU to itself (and nothing starts beside one), as a
                    // hand-over to an interactive client does
                    return None;
                }
                if !self.fair_beside(id, next, now) {
                    return None;
                }
            }
        }
        self.grant(id, now, probe)
    }

    /// A lease for the next waiting session of client `id`; a `probe` lasts a quarter quantum.
    fn grant(&mut self, id: ClientId, now: Nanos, probe: bool) -> Option<Grant> {
        let lease_ns = if probe {
            (self.quantum / 4).max(1)
        } else {
            self.quantum
        };
        let c = self.clients.get_mut(&id)?;
        let session = c.waiting.pop_front()?;
        c.grants += 1;
        let book = self.books.entry(session).or_default();
        book.usage.grants += 1;
        c.waited_total += book.end_wait(now);
        let alone = self.holders.is_empty();
        for h in &mut self.holders {
            h.alone = false;
        }
        let shared = self.demand_gated && !alone;
        let tight = self.tight_for(id, now);
        self.holders.push(Lease {
            session,
            client: id,
            start: now,
            end: now + lease_ns,
            owed: 0.0,
            revoked: false,
            alone,
            probe,
        });
        Some(Grant {
            session,
            client: id,
            lease_ns,
            shared,
            tight,
        })
    }

    /// Whether a lease of `client` now keeps a short queue: a batch client's, while an
    /// interactive client is active or was lately.
    fn tight_for(&self, client: ClientId, now: Nanos) -> bool {
        let interactive =
            |id: &ClientId| self.clients.get(id).is_some_and(|c| c.shares.interactive);
        !interactive(&client)
            && (self.interactive_recently(now)
                || self
                    .clients
                    .iter()
                    .any(|(id, c)| interactive(id) && !c.waiting.is_empty())
                || self.holders.iter().any(|h| interactive(&h.client)))
    }

    /// When `poll` next has something to do, if nothing else happens before (call it after
    /// `poll` returned `None`).
    pub fn next_wakeup(&self, now: Nanos) -> Option<Nanos> {
        let mut earliest: Option<Nanos> = self.holders.iter().map(|h| h.end + self.grace).min();
        for c in self.clients.values().filter(|c| !c.waiting.is_empty()) {
            // a client out of credit can go again once it has some
            let dt = now.saturating_sub(c.credit_at) as f64;
            let credit = (c.credit + dt * c.shares.limit).min(self.burst());
            if credit <= 0.0 {
                let at = now + ((-credit / c.shares.limit).ceil() as Nanos).max(1);
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
        }
        earliest
    }

    fn prune_usage(&mut self, now: Nanos) {
        let from = now.saturating_sub(USAGE_WINDOW);
        for c in self.clients.values_mut() {
            while c.recent.front().is_some_and(|(end, _)| *end < from) {
                c.recent.pop_front();
            }
        }
    }

    /// The last moment `session` held a lease: `now` while it holds one, else when its last lease
    /// ended; `None` if it never had one.
    pub fn last_held(&self, session: SessionId, now: Nanos) -> Option<Nanos> {
        if self.holders.iter().any(|h| h.session == session) {
            return Some(now);
        }
        self.lease_log.last_end(session)
    }

    /// The first running lease (the only one with one slot).
    pub fn holder(&self) -> Option<(ClientId, SessionId)> {
        self.holders.first().map(|h| (h.client, h.session))
    }

    pub fn holder_count(&self) -> usize {
        self.holders.len()
    }

    pub fn usage(&self, id: ClientId, now: Nanos) -> Option<Usage> {
        let c = self.clients.get(&id)?;
        let from = now.saturating_sub(USAGE_WINDOW).max(self.started);
        let span = now.saturating_sub(from).max(1) as f64;
        let recent: Nanos = c
            .recent
            .iter()
            .filter(|(end, _)| *end >= from)
            .map(|(_, ns)| ns)
            .sum();
        let waiting_now: Nanos = c
            .waiting
            .iter()
            .filter_map(|s| self.books.get(s)?.waiting_since)
            .map(|since| now.saturating_sub(since))
            .sum();
        Some(Usage {
            share: (recent as f64 / span).min(1.0),
            charged_total: c.charged_total,
            gpu_total: c.gpu_total,
            grants: c.grants,
            waited_total: c.waited_total + waiting_now,
            waiting: c.waiting.len(),
            holding: self.holds(id),
        })
    }
}

/// A fair-share factor within [`fair_share::FLOOR`]..=1 (1 for nonsense).
fn clamp_factor(factor: f64) -> f64 {
    if factor.is_finite() {
        factor.clamp(fair_share::FLOOR, 1.0)
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const S: Nanos = 1_000 * MS;

    #[test]
    fn last_held_is_now_while_holding_then_the_end_of_the_lease() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_grace(10 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        assert_eq!(s.last_held(7, 0), None, "never asked");
        s.acquire(1, 7, 0);
        assert_eq!(s.last_held(7, MS), None, "waiting is not holding");
        let g = s.poll(MS).unwrap();
        assert_eq!(g.session, 7);
        assert_eq!(s.last_held(7, 5 * MS), Some(5 * MS));
        s.release(7, 4 * MS, 6 * MS);
        assert_eq!(s.last_held(7, 50 * MS), Some(6 * MS));
        // a lease taken back after its end and grace ended then
        s.acquire(1, 7, 60 * MS);
        s.poll(60 * MS).unwrap();
        assert!(s.poll(95 * MS).is_none());
        assert_eq!(s.last_held(7, 99 * MS), Some(95 * MS));
        s.session_gone(7, 100 * MS);
        assert_eq!(s.last_held(7, 100 * MS), None, "forgotten with its session");
    }

    /// A simulated process: saturating (asks again right after each lease) or idle.
    struct Sim {
        sched: Scheduler,
        now: Nanos,
        /// Per client: charged time measured by the simulation itself (lease wall time).
        got: BTreeMap<ClientId, Nanos>,
        saturating: Vec<(ClientId, SessionId)>,
        /// GPU time each lease's work runs past the lease end.
        gpu_overrun: Nanos,
    }

    fn shares(request: f64, limit: f64) -> Shares {
        Shares {
            request,
            limit,
            interactive: false,
        }
    }

    impl Sim {
        fn new(quantum: Nanos) -> Self {
            Sim {
                sched: Scheduler::new(quantum, 0),
                now: 0,
                got: BTreeMap::new(),
                saturating: vec![],
                gpu_overrun: 0,
            }
        }
        fn client(&mut self, id: ClientId, request: f64, limit: f64) {
            self.sched.set_client(id, shares(request, limit), self.now);
        }
        fn saturate(&mut self, id: ClientId) {
            let session = id * 100;
            self.saturating.push((id, session));
            self.sched.acquire(id, session, self.now);
        }
        /// Runs until `until`; returns the fraction of that period each client held the token.
        fn run_for(&mut self, span: Nanos) -> BTreeMap<ClientId, f64> {
            let start = self.now;
            let end = self.now + span;
            self.got.clear();
            while self.now < end {
                match self.sched.poll(self.now) {
                    Some(g) => {
                        let lease_end = self.now + g.lease_ns;
                        *self.got.entry(g.client).or_default() += g.lease_ns.min(end - self.now);
                        self.now = lease_end;
                        // The hook reports the GPU time its work took, which can outlast the lease.
                        self.sched.release(
                            g.session,
                            g.lease_ns.saturating_add(self.gpu_overrun),
                            self.now,
                        );
                        self.sched.acquire(g.client, g.session, self.now);
                    }
                    None => match self.sched.next_wakeup(self.now) {
                        Some(t) if t > self.now => self.now = t.min(end),
                        Some(_) => unreachable!("poll returned nothing with work due now"),
                        None => self.now = end,
                    },
                }
            }
            let total = (self.now - start) as f64;
            self.got
                .iter()
                .map(|(c, ns)| (*c, *ns as f64 / total))
                .collect()
        }
    }

    fn assert_near(got: f64, want: f64, tol: f64, what: &str) {
        assert!(
            (got - want).abs() <= tol,
            "{what}: got {got:.4}, want {want:.4} ± {tol}"
        );
    }

    #[test]
    fn saturating_clients_get_their_requests() {
        let mut sim = Sim::new(20 * MS);
        for (id, r) in [(1, 0.5), (2, 0.3), (3, 0.2)] {
            sim.client(id, r, 1.0);
            sim.saturate(id);
        }
        let shares = sim.run_for(60 * S);
        assert_near(shares[&1], 0.5, 0.01, "client 1");
        assert_near(shares[&2], 0.3, 0.01, "client 2");
        assert_near(shares[&3], 0.2, 0.01, "client 3");
        let u = sim.sched.usage(1, sim.now).unwrap();
        assert_near(u.share, 0.5, 0.02, "reported usage of client 1");
    }

    #[test]
    fn a_fair_share_factor_scales_the_weight_of_a_request() {
        let mut sim = Sim::new(20 * MS);
        sim.client(1, 0.5, 1.0);
        sim.client(2, 0.5, 1.0);
        sim.sched.set_fair_factor(1, 0.25);
        sim.saturate(1);
        sim.saturate(2);
        let shares = sim.run_for(30 * S);
        // weights 0.125 and 0.5
        assert_near(shares[&1], 0.2, 0.01, "client with past usage");
        assert_near(shares[&2], 0.8, 0.01, "fresh client");
        // alone it still gets the whole GPU: the factor only weighs clients against each other
        sim.saturating.retain(|&(c, _)| c == 1);
        sim.sched.session_gone(200, sim.now);
        let shares = sim.run_for(10 * S);
        assert!(shares[&1] >= 0.99, "alone it got {}", shares[&1]);
        // factors stay within the floor and 1
        sim.sched.set_fair_factor(2, 0.0);
        sim.sched.set_fair_factor(1, 7.0);
        assert_eq!(sim.sched.clients[&2].fair_factor, fair_share::FLOOR);
        assert_eq!(sim.sched.clients[&1].fair_factor, 1.0);
        sim.sched.set_fair_factor(1, f64::NAN);
        assert_eq!(sim.sched.clients[&1].fair_factor, 1.0);
    }

    #[test]
    fn lone_client_gets_the_whole_gpu() {
        let mut sim = Sim::new(20 * MS);
        sim.client(1, 0.2, 1.0);
        sim.client(2, 0.8, 1.0); // registered but idle
        sim.saturate(1);
        let shares = sim.run_for(30 * S);
        assert!(shares[&1] >= 0.99, "lone client got {}", shares[&1]);
        assert!(!shares.contains_key(&2));
    }

    #[test]
    fn idle_share_is_split_by_request() {
        let mut sim = Sim::new(10 * MS);
        sim.client(1, 0.4, 1.0);
        sim.client(2, 0.2, 1.0);
        sim.client(3, 0.4, 1.0); // idle
        sim.saturate(1);
        sim.saturate(2);
        let shares = sim.run_for(30 * S);
        assert_near(shares[&1], 2.0 / 3.0, 0.01, "client 1");
        assert_near(shares[&2], 1.0 / 3.0, 0.01, "client 2");
    }

    #[test]
    fn limit_holds_when_alone() {
        let mut sim = Sim::new(20 * MS);
        sim.client(1, 0.1, 0.3);
        sim.saturate(1);
        let shares = sim.run_for(60 * S);
        assert_near(shares[&1], 0.3, 0.01, "limited client alone");
    }

    #[test]
    fn limit_holds_under_contention_and_the_rest_goes_to_others() {
        let mut sim = Sim::new(20 * MS);
        sim.client(1, 0.5, 0.2);
        // request above limit is refused by config checks; here the scheduler still caps at limit
        sim.client(2, 0.1, 1.0);
        sim.saturate(1);
        sim.saturate(2);
        let shares = sim.run_for(60 * S);
        assert_near(shares[&1], 0.2, 0.01, "limited client");
        assert_near(shares[&2], 0.8, 0.01, "other client");
    }

    #[test]
    fn reported_gpu_time_never_sets_the_charge() {
        let mut sim = Sim::new(20 * MS);
        // each process claims far more GPU time than its lease had
        sim.gpu_overrun = u64::MAX / 2;
        sim.client(1, 0.5, 1.0);
        sim.client(2, 0.5, 1.0);
        sim.saturate(1);
        sim.saturate(2);
        let shares = sim.run_for(10 * S);
        assert_near(shares[&1], 0.5, 0.01, "client 1");
        let a = sim.sched.usage(1, sim.now).unwrap();
        assert_eq!(
            a.charged_total,
            a.grants * 20 * MS,
            "charged the leases' wall time"
        );
        assert_eq!(
            a.gpu_total,
            a.grants * 20 * MS,
            "reports clamped to the wall time"
        );
    }

    #[test]
    fn returning_client_does_not_bank_idle_time() {
        let mut sim = Sim::new(20 * MS);
        sim.client(1, 0.5, 1.0);
        sim.client(2, 0.5, 1.0);
        sim.saturate(1);
        sim.run_for(30 * S); // client 1 alone for 30 s
        sim.saturate(2);
        let shares = sim.run_for(2 * S);
        // without the virtual clock, client 2 would hold the GPU for the whole window
        assert_near(shares[&2], 0.5, 0.02, "returning client");
    }

    #[test]
    fn expired_lease_passes_the_token_on() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(2, shares(0.5, 1.0), 0);
        s.acquire(1, 10, 0);
        s.acquire(2, 20, 0);
        let g = s.poll(0).unwrap();
        assert_eq!(g.session, 10);
        assert_eq!(s.poll(19 * MS), None, "token is held until the lease ends");
        assert_eq!(s.next_wakeup(19 * MS), Some(20 * MS));
        // session 10 hangs and never releases: at the lease end the token moves on
        let g2 = s.poll(20 * MS).unwrap();
        assert_eq!(g2.session, 20);
        assert_eq!(s.usage(1, 20 * MS).unwrap().charged_total, 20 * MS);
        // its hook comes back later and claims the lease's work ran for an hour: nothing changes
        s.release(10, 3_600 * S, 31 * MS);
        assert_eq!(s.usage(1, 31 * MS).unwrap().charged_total, 20 * MS);
        assert_eq!(
            s.holder(),
            Some((2, 20)),
            "a late release does not touch the new holder"
        );
    }

    #[test]
    fn a_lease_is_kept_through_its_grace_and_released_inside_it() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_grace(5 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(2, shares(0.5, 1.0), 0);
        s.acquire(1, 10, 0);
        s.acquire(2, 20, 0);
        assert_eq!(s.poll(0).unwrap().session, 10);
        assert_eq!(
            s.poll(22 * MS),
            None,
            "inside the grace the holder keeps the token"
        );
        assert_eq!(s.next_wakeup(22 * MS), Some(25 * MS));
        s.release(10, 21 * MS, 23 * MS);
        assert_eq!(
            s.poll(23 * MS).unwrap().session,
            20,
            "the release hands it on at once"
        );
        s.acquire(1, 10, 23 * MS);
        assert_eq!(s.usage(1, 23 * MS).unwrap().charged_total, 23 * MS);
        // a holder that never releases is charged its lease and the grace
        assert_eq!(s.poll(48 * MS).unwrap().session, 10);
        s.acquire(2, 20, 48 * MS);
        assert_eq!(s.usage(2, 48 * MS).unwrap().charged_total, 25 * MS);
    }

    /// Several slots, stepped in 1 ms: each session renews at the end of its lease. Returns each
    /// client's held time as a fraction of `span`, and the most leases seen at once.
    fn run_slots(
        s: &mut Scheduler,
        sessions: &[(ClientId, SessionId)],
        span: Nanos,
    ) -> (BTreeMap<ClientId, f64>, usize) {
        let mut leases: Vec<(ClientId, SessionId, Nanos)> = vec![];
        let mut held: BTreeMap<ClientId, Nanos> = BTreeMap::new();
        let mut most = 0;
        for &(c, sid) in sessions {
            s.acquire(c, sid, 0);
        }
        let mut t = 0;
        while t < span {
            leases.retain(|&(c, sid, end)| {
                if end <= t {
                    s.release(sid, 0, t);
                    s.acquire(c, sid, t);
                    false
                } else {
                    true
                }
            });
            while let Some(g) = s.poll(t) {
                leases.push((g.client, g.session, t + g.lease_ns));
                *held.entry(g.client).or_default() += g.lease_ns;
            }
            most = most.max(leases.len());
            t += MS;
        }
        (
            held.into_iter()
                .map(|(c, ns)| (c, ns as f64 / span as f64))
                .collect(),
            most,
        )
    }

    #[test]
    fn slots_bound_how_many_hold_at_once_and_share_fairly() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_slots(2, false);
        for c in 1..=3 {
            s.set_client(c, shares(1.0 / 3.0, 1.0), 0);
        }
        let (shares, most) = run_slots(&mut s, &[(1, 10), (2, 20), (3, 30)], 30 * S);
        assert_eq!(most, 2, "never more leases than slots");
        for c in 1..=3 {
            assert_near(
                shares[&c],
                2.0 / 3.0,
                0.02,
                "each of three clients in two slots",
            );
        }
    }

    #[test]
    fn enough_slots_let_everyone_run_at_once_within_their_limits() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_slots(4, false);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(2, shares(0.2, 0.3), 0);
        // two processes of one client hold a lease each
        let (shares, most) = run_slots(&mut s, &[(1, 10), (1, 11), (2, 20)], 30 * S);
        assert_eq!(most, 3);
        assert_near(shares[&1], 2.0, 0.02, "two sessions, each always holding");
        // leases that run together share the GPU: each is charged its part of the time
        let used = s.usage(2, 30 * S).unwrap().share;
        assert_near(used, 0.3, 0.02, "the limit holds with free slots");
        assert!(
            shares[&2] > 0.5,
            "client 2 held {} of the time, running beside the others",
            shares[&2]
        );
    }

    #[test]
    fn an_uncontended_holder_extends_its_lease_and_a_contended_one_does_not() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(2, shares(0.5, 1.0), 0);
        s.acquire(1, 10, 0);
        assert_eq!(s.poll(0).unwrap().session, 10);
        assert_eq!(
            s.extend(10, 20 * MS).map(|g| g.lease_ns),
            Some(20 * MS),
            "nobody waits"
        );
        assert_eq!(s.usage(1, 20 * MS).unwrap().charged_total, 20 * MS);
        assert_eq!(s.poll(30 * MS), None, "the extended lease runs to 40 ms");
        assert_eq!(s.extend(20, 30 * MS), None, "only a holder extends");
        s.acquire(2, 20, 35 * MS);
        assert_eq!(s.extend(10, 40 * MS), None, "someone waits");
    }

    #[test]
    fn extending_does_not_pass_a_limit() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_client(1, shares(0.1, 0.5), 0);
        s.acquire(1, 10, 0);
        assert!(s.poll(0).is_some());
        let mut t = 20 * MS;
        let mut extended = 0;
        while s.extend(10, t).map(|g| g.lease_ns) == Some(20 * MS) {
            extended += 1;
            t += 20 * MS;
        }
        assert!(
            extended <= 1,
            "a client limited to half the GPU extended {extended} times in a row"
        );
    }

    #[test]
    fn gone_session_frees_the_token_and_its_place_in_line() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_client(1, shares(0.0, 1.0), 0);
        s.acquire(1, 10, 0);
        s.acquire(1, 11, 0);
        assert_eq!(s.poll(0).unwrap().session, 10);
        s.session_gone(10, 5 * MS);
        assert_eq!(s.holder(), None);
        s.session_gone(11, 5 * MS);
        assert_eq!(s.poll(5 * MS), None);
        assert_eq!(s.next_wakeup(5 * MS), None);
        assert_eq!(s.usage(1, 5 * MS).unwrap().charged_total, 5 * MS);
    }

    #[test]
    fn waiting_for_a_grant_is_measured_per_process_and_client() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(2, shares(0.5, 1.0), 0);
        s.acquire(1, 10, 0);
        assert_eq!(s.poll(0).unwrap().session, 10, "granted at once");
        s.acquire(2, 20, 5 * MS);
        s.acquire(2, 21, 8 * MS);
        assert_eq!(s.poll(5 * MS), None);
        // waits going on count up to now
        assert_eq!(s.session_usage(20, 15 * MS).waited, 10 * MS);
        assert_eq!(s.usage(2, 15 * MS).unwrap().waited_total, 10 * MS + 7 * MS);
        // asking again while in line changes nothing
        s.acquire(2, 20, 16 * MS);
        s.release(10, 0, 20 * MS);
        assert_eq!(s.poll(20 * MS).unwrap().session, 20);
        let u = s.session_usage(20, 30 * MS);
        assert_eq!((u.waited, u.grants, u.charged), (15 * MS, 1, 0));
        let a = s.session_usage(10, 30 * MS);
        assert_eq!((a.waited, a.grants, a.charged), (0, 1, 20 * MS));
        // a process that goes while in line: its wait ends there
        s.session_gone(21, 25 * MS);
        assert_eq!(s.take_session_usage(21, 40 * MS).waited, 17 * MS);
        assert_eq!(s.take_session_usage(21, 40 * MS), SessionUsage::default());
        assert_eq!(s.usage(2, 40 * MS).unwrap().waited_total, 15 * MS + 17 * MS);
        // a charge reaches the holder's books at release
        s.release(20, 0, 32 * MS);
        assert_eq!(s.session_usage(20, 40 * MS).charged, 12 * MS);
        assert_eq!(s.usage(1, 40 * MS).unwrap().waited_total, 0);
    }

    #[test]
    fn sessions_of_one_client_take_turns() {
        let mut s = Scheduler::new(MS, 0);
        s.set_client(1, shares(0.0, 1.0), 0);
        s.acquire(1, 10, 0);
        s.acquire(1, 11, 0);
        let mut order = vec![];
        let mut now = 0;
        for _ in 0..4 {
            let g = s.poll(now).unwrap();
            order.push(g.session);
            now += MS;
            s.release(g.session, 0, now);
            s.acquire(1, g.session, now);
        }
        assert_eq!(order, vec![10, 11, 10, 11]);
    }

    #[test]
    fn removed_client_loses_the_token() {
        let mut s = Scheduler::new(MS, 0);
        s.set_client(1, shares(0.0, 1.0), 0);
        s.acquire(1, 10, 0);
        assert!(s.poll(0).is_some());
        s.remove_client(1, 0);
        assert_eq!(s.holder(), None);
        s.acquire(1, 10, 0); // unknown client: ignored
        assert_eq!(s.poll(0), None);
    }

    /// Without MPS: grants `sessions` (one per client) in turn, each process keeping the GPU busy
    /// for `busy` of its leases; returns the most leases seen at once after the demand estimates
    /// settled, and each client's held time as a fraction of the last `span`.
    fn run_gated(
        s: &mut Scheduler,
        sessions: &[(ClientId, SessionId, f64)],
        span: Nanos,
    ) -> (usize, BTreeMap<ClientId, f64>) {
        let mut leases: Vec<(ClientId, SessionId, Nanos, Nanos)> = vec![];
        let mut held: BTreeMap<ClientId, Nanos> = BTreeMap::new();
        let mut most = 0;
        let busy = |sid: SessionId| sessions.iter().find(|x| x.1 == sid).unwrap().2;
        for &(c, sid, _) in sessions {
            s.acquire(c, sid, 0);
        }
        let mut t = 0;
        while t < 2 * span {
            leases.retain(|&(c, sid, start, end)| {
                if end <= t {
                    let wall = t - start;
                    s.release(sid, (wall as f64 * busy(sid)) as Nanos, t);
                    s.acquire(c, sid, t);
                    false
                } else {
                    true
                }
            });
            while let Some(g) = s.poll(t) {
                leases.push((g.client, g.session, t, t + g.lease_ns));
                if t >= span {
                    *held.entry(g.client).or_default() += g.lease_ns;
                }
            }
            if t >= span {
                most = most.max(leases.len());
            }
            t += MS;
        }
        let fractions = held
            .into_iter()
            .map(|(c, ns)| (c, ns as f64 / span as f64))
            .collect();
        (most, fractions)
    }

    fn gated(quantum: Nanos) -> Scheduler {
        let mut s = Scheduler::new(quantum, 0);
        s.set_slots(usize::MAX, true);
        s
    }

    #[test]
    fn processes_that_leave_the_gpu_idle_hold_leases_together() {
        let mut s = gated(20 * MS);
        let sessions: Vec<_> = (1..=8).map(|c| (c, c * 10, 0.1)).collect();
        for c in 1..=8 {
            s.set_client(c, shares(0.125, 1.0), 0);
        }
        let (most, held) = run_gated(&mut s, &sessions, 10 * S);
        assert!(
            most >= 8,
            "8 processes busy 10% each: {most} leases at once"
        );
        for c in 1..=8 {
            assert!(held[&c] > 0.95, "client {c} held {}", held[&c]);
        }
        assert!(s.demand(10).unwrap() < 0.15, "{:?}", s.demand(10));
    }

    #[test]
    fn saturating_processes_hold_leases_alone_and_keep_their_shares() {
        let mut s = gated(20 * MS);
        s.set_client(1, shares(0.75, 1.0), 0);
        s.set_client(2, shares(0.25, 1.0), 0);
        let (most, held) = run_gated(&mut s, &[(1, 10, 1.0), (2, 20, 1.0)], 20 * S);
        assert_eq!(most, 1, "saturating processes never overlap");
        assert_near(held[&1], 0.75, 0.01, "client 1");
        assert_near(held[&2], 0.25, 0.01, "client 2");
    }

    #[test]
    fn a_saturating_process_runs_beside_light_ones_that_leave_it_its_share() {
        let mut s = gated(20 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        for c in 2..=5 {
            s.set_client(c, shares(0.125, 1.0), 0);
        }
        let mut sessions = vec![(1, 10, 1.0)];
        sessions.extend((2..=5).map(|c| (c, c * 10, 0.1)));
        let (most, held) = run_gated(&mut s, &sessions, 20 * S);
        // the light ones take 0.4 in the driver's turns, less than their due: the heavy one
        // gets the rest, more than its request
        assert_eq!(most, 5);
        for c in 1..=5 {
            assert!(held[&c] > 0.95, "client {c} held {}", held[&c]);
        }
    }

    #[test]
    fn a_process_that_would_take_more_than_its_due_in_equal_turns_does_not_overlap() {
        let mut s = gated(20 * MS);
        s.set_client(1, shares(0.75, 1.0), 0);
        s.set_client(2, shares(0.25, 1.0), 0);
        // client 2 is half busy: in equal turns it would take 0.45 of the GPU, due 0.25
        let (most, held) = run_gated(&mut s, &[(1, 10, 1.0), (2, 20, 0.5)], 20 * S);
        assert_eq!(most, 1);
        assert_near(held[&1], 0.75, 0.01, "client 1");
        assert_near(held[&2], 0.25, 0.01, "client 2");
    }

    /// Three processes of a client with request 0.75 and one of a client with 0.25 weigh the
    /// same each: the driver's equal turns give the clients 0.75 / 0.25, so all four overlap,
    /// extend their leases while nobody waits, and are never probed.
    #[test]
    fn processes_of_equal_weight_overlap_whatever_their_demands() {
        let mut s = gated(20 * MS);
        s.set_client(1, shares(0.75, 1.0), 0);
        s.set_client(2, shares(0.25, 1.0), 0);
        let procs = [(1, 10), (1, 11), (1, 12), (2, 20)];
        for (c, sid) in procs {
            s.acquire(c, sid, 0);
        }
        let mut t = 0;
        let mut granted = vec![];
        while let Some(g) = s.poll(t) {
            granted.push(g);
        }
        assert_eq!(granted.len(), 4, "{granted:?}");
        assert!(granted[1..].iter().all(|g| g.shared));
        for _ in 0..(3 * demand::PROBE_EVERY / (20 * MS)) {
            t += 20 * MS;
            for g in &granted {
                let e = s.extend(g.session, t).expect("nobody waits: extended");
                assert!(e.shared && e.lease_ns == 20 * MS, "{e:?}");
            }
        }
        // one of them renews, busy all along beside the others: still no probe, all four again
        s.release(10, 20 * MS, t);
        s.acquire(1, 10, t);
        let g = s.poll(t).unwrap();
        assert_eq!((g.session, g.lease_ns, g.shared), (10, 20 * MS, true));
        assert_eq!(s.holder_count(), 4);
        // a client of another weight waiting stops the extensions
        s.set_client(3, shares(0.5, 1.0), t);
        s.acquire(3, 30, t);
        assert_eq!(
            s.poll(t),
            None,
            "heavy processes of other weights: it waits"
        );
        assert_eq!(s.extend(11, t + MS), None);
    }

    /// Beside an active interactive client, batch processes of equal weights overlap only as
    /// far as their demands fit: its next request then waits for one bounded queue, not several.
    #[test]
    fn equal_weights_overlap_only_by_demand_while_an_interactive_client_is_active() {
        let mut s = gated(20 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        let live = Shares {
            request: 0.0,
            limit: 1.0,
            interactive: true,
        };
        s.set_client(2, live, 0);
        s.acquire(2, 20, 0);
        assert_eq!(s.poll(0).unwrap().session, 20);
        s.release(20, MS, MS);
        s.acquire(1, 10, MS);
        s.acquire(1, 11, MS);
        assert_eq!(s.poll(MS).unwrap().session, 10);
        assert_eq!(s.poll(MS), None, "two at demand 0.5 do not fit");
        s.release(10, 20 * MS, 21 * MS);
        s.acquire(1, 10, 21 * MS);
        assert_eq!(s.poll(21 * MS).unwrap().session, 11);
        assert_eq!(s.poll(21 * MS), None);
        // a second after the interactive client's last lease, they run together
        let t = MS + INTERACTIVE_RECENT;
        s.release(11, 20 * MS, t);
        s.acquire(1, 11, t);
        assert!(s.poll(t).is_some());
        assert!(s.poll(t).is_some(), "equal weights overlap again");
    }

    #[test]
    fn an_interactive_client_runs_at_once_and_batch_leases_are_revoked() {
        let mut s = gated(20 * MS);
        s.set_grace(5 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(
            2,
            Shares {
                request: 0.0,
                limit: 1.0,
                interactive: true,
            },
            0,
        );
        s.acquire(1, 10, 0);
        let g = s.poll(0).unwrap();
        assert_eq!(g.session, 10);
        assert!(!g.tight, "no interactive client yet: a queue as usual");
        assert!(s.take_revoked().is_empty());
        s.acquire(2, 20, 3 * MS);
        let g = s.poll(3 * MS).expect("interactive client granted at once");
        assert_eq!(g.session, 20);
        assert!(!g.tight, "the interactive lease itself is not held back");
        assert_eq!(
            s.take_revoked(),
            vec![10],
            "the batch holder is told to stop"
        );
        assert_eq!(s.holder_count(), 2, "the batch holder drains beside it");
        assert_eq!(
            s.extend(10, 4 * MS),
            None,
            "a revoked lease is not extended"
        );
        // the batch process (busy all along) releases after its queue drained, then waits again
        s.release(10, 4 * MS, 4 * MS);
        s.acquire(1, 10, 4 * MS);
        assert_eq!(
            s.poll(4 * MS),
            None,
            "batch waits while the interactive lease runs"
        );
        // the interactive process goes idle and gives the lease back: batch resumes, with a
        // short queue while the interactive client was active lately
        s.release(20, MS, 6 * MS);
        let g = s.poll(6 * MS).unwrap();
        assert_eq!(g.session, 10);
        assert!(g.tight);
        // a revoked holder that does not release loses the token after the grace
        s.acquire(2, 20, 7 * MS);
        assert_eq!(s.poll(7 * MS).unwrap().session, 20);
        assert_eq!(s.take_revoked(), vec![10]);
        s.release(20, MS, 8 * MS);
        assert_eq!(s.poll(8 * MS), None);
        assert_eq!(
            s.next_wakeup(8 * MS),
            Some(12 * MS),
            "revoked at 7 ms, grace 5 ms"
        );
        assert_eq!(s.poll(12 * MS), None);
        assert_eq!(s.holder_count(), 0);
        // lately active: batch leases and their extensions keep short queues; long after the
        // interactive client's last lease, queues as usual
        s.acquire(1, 10, 13 * MS);
        assert!(s.poll(13 * MS).unwrap().tight);
        assert!(s.extend(10, 14 * MS).unwrap().tight);
        let later = 8 * MS + INTERACTIVE_RECENT;
        assert!(!s.extend(10, later).unwrap().tight);
    }

    #[test]
    fn an_interactive_client_keeps_to_its_limit() {
        let mut s = gated(20 * MS);
        s.set_client(
            1,
            Shares {
                request: 0.0,
                limit: 0.1,
                interactive: true,
            },
            0,
        );
        s.acquire(1, 10, 0);
        assert!(s.poll(0).is_some());
        s.release(10, 40 * MS, 40 * MS);
        s.acquire(1, 10, 40 * MS);
        assert_eq!(s.poll(40 * MS), None, "out of credit");
        assert!(s.next_wakeup(40 * MS).unwrap() > 40 * MS);
    }

    #[test]
    fn demand_follows_what_processes_report_within_their_wall_time() {
        let mut s = gated(20 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.acquire(1, 10, 0);
        assert_eq!(s.demand(10), Some(demand::INITIAL_DEMAND));
        let mut t = 0;
        for _ in 0..20 {
            assert!(s.poll(t).is_some());
            t += 20 * MS;
            s.release(10, u64::MAX, t);
            s.acquire(1, 10, t);
        }
        assert!(s.demand(10).unwrap() > 0.99, "clamped claims count as busy");
        for _ in 0..20 {
            assert!(s.poll(t).is_some());
            t += 20 * MS;
            s.release(10, 0, t);
            s.acquire(1, 10, t);
        }
        assert!(s.demand(10).unwrap() < 0.01);
        s.session_gone(10, t);
        assert_eq!(s.demand(10), None);
    }

    /// Eight light processes (12% busy alone) that look busy beside each other, as their work
    /// waits for the others' time slices (measured on an H100: 95% busy four at a time): the
    /// inflated samples do not raise their estimates, so they keep running together, and the
    /// probes that check them alone take a small part of the time.
    #[test]
    fn light_processes_keep_overlapping_though_they_look_busy_together() {
        let mut s = gated(20 * MS);
        for c in 1..=8 {
            s.set_client(c, shares(0.1, 1.0), 0);
            s.acquire(c, c * 10, 0);
        }
        let mut leases: Vec<(ClientId, SessionId, Nanos, Nanos)> = vec![];
        let (mut t, mut held, mut probe_time) = (0, 0u64, 0u64);
        let span = 10 * S;
        while t < span {
            let together = leases.len();
            leases.retain(|&(c, sid, start, end)| {
                if end > t {
                    return true;
                }
                let wall = t - start;
                let busy = if together > 1 { 0.95 } else { 0.12 };
                s.release(sid, (wall as f64 * busy) as Nanos, t);
                s.acquire(c, sid, t);
                false
            });
            while let Some(g) = s.poll(t) {
                if t >= span / 2 && g.lease_ns < 20 * MS {
                    probe_time += g.lease_ns;
                }
                leases.push((g.client, g.session, t, t + g.lease_ns));
            }
            if t >= span / 2 {
                held += leases.len() as u64;
            }
            t += MS;
        }
        let mean = held as f64 / (span / 2 / MS) as f64;
        assert!(mean >= 6.0, "{mean:.2} leases at once on average");
        assert!(
            probe_time < span / 2 / 10,
            "probes took {} ms of {} ms",
            probe_time / MS,
            span / 2 / MS
        );
    }

    /// A lease that starts beside others (by demand) says so, so that its process does not hold
    /// its launches back for a queue that is long only because of the others' work.
    #[test]
    fn leases_beside_others_are_marked_shared() {
        let mut s = gated(20 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(2, shares(0.5, 1.0), 0);
        for (c, sid) in [(1, 10), (2, 20)] {
            s.acquire(c, sid, 0);
            let g = s.poll(0).unwrap();
            assert!(!g.shared, "alone");
            s.release(g.session, MS, 20 * MS);
            s.acquire(c, sid, 20 * MS);
        }
        let a = s.poll(20 * MS).unwrap();
        let b = s.poll(20 * MS).unwrap();
        assert!(!a.shared && b.shared, "{a:?} {b:?}");
        // under MPS (not gated by demand) leases run together without the flag
        let mut m = Scheduler::new(20 * MS, 0);
        m.set_slots(usize::MAX, false);
        m.set_client(1, shares(0.5, 1.0), 0);
        m.acquire(1, 10, 0);
        m.acquire(1, 11, 0);
        assert!(!m.poll(0).unwrap().shared);
        assert!(!m.poll(0).unwrap().shared);
    }

    /// Two processes that overlap while they are light ask again at every lease's end, so that
    /// their demands stay measured: once they keep the GPU busy, they take turns by request.
    #[test]
    fn overlapping_leases_are_not_extended_and_grown_demands_take_turns() {
        let mut s = gated(20 * MS);
        s.set_client(1, shares(0.75, 1.0), 0);
        s.set_client(2, shares(0.25, 1.0), 0);
        for (c, sid) in [(1, 10), (2, 20)] {
            s.acquire(c, sid, 0);
            // light at first: a lease that kept the GPU idle
            let g = s.poll(0).unwrap();
            s.release(g.session, 0, 20 * MS);
            s.acquire(c, sid, 20 * MS);
        }
        let mut t = 20 * MS;
        let a = s.poll(t).unwrap();
        let b = s.poll(t).unwrap();
        assert_eq!(s.holder_count(), 2, "light processes run together");
        assert_eq!(s.extend(a.session, t + 20 * MS), None);
        assert_eq!(s.extend(b.session, t + 20 * MS), None);
        // from now on both keep the GPU busy for whole leases: beside each other that is
        // ambiguous (they may only wait for each other), so each is probed alone, then they
        // take turns
        let mut most = 0;
        for _ in 0..(2 * demand::PROBE_EVERY / (20 * MS)) {
            t += 20 * MS;
            for h in [a, b] {
                s.release(h.session, 20 * MS, t);
                s.acquire(h.client, h.session, t);
            }
            while s.poll(t).is_some() {}
            most = s.holder_count();
        }
        assert_eq!(most, 1, "heavy processes hold leases one at a time");
        let alone = s.holder().unwrap().1;
        assert!(s.extend(alone, t + 20 * MS).is_none(), "the other waits");
    }

    /// The drift of large-kernel jobs (0.75/0.25 measured as 0.6/0.39): the daemon polls the
    /// scheduler on every event, also during a lease, and the virtual clock used to follow only
    /// the waiting clients. A holder that renewed (released, then waiting again) was moved up to
    /// the waiting one's virtual time and lost its lead, so leases went closer to 1:1.
    #[test]
    fn polls_during_a_lease_do_not_cost_the_holder_its_lead() {
        let mut s = Scheduler::new(20 * MS, 0);
        s.set_client(1, shares(0.75, 1.0), 0);
        s.set_client(2, shares(0.25, 1.0), 0);
        s.acquire(1, 10, 0);
        s.acquire(2, 20, 0);
        let mut t = 0;
        let mut order = vec![];
        for _ in 0..16 {
            let g = s.poll(t).unwrap();
            order.push(g.client);
            for step in 1..20 {
                assert_eq!(s.poll(t + step * MS), None);
            }
            t += 20 * MS;
            s.release(g.session, 20 * MS, t);
            s.acquire(g.client, g.session, t);
        }
        let ones = order.iter().filter(|c| **c == 1).count();
        assert_eq!(ones, 12, "leases {order:?}");
    }
}
