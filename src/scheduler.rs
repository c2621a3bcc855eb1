//! The token scheduler: pure, deterministic logic with the clock passed in.
//!
//! One token per GPU. A grant is a *lease* of one quantum. Among the clients with a waiting
//! process, the one with the smallest weighted virtual time gets the next lease (weights are the
//! clients' requests), so saturating clients converge to shares proportional to their requests,
//! and every client gets at least its request (the requests add up to at most 1). Idle share goes
//! to whoever waits: the scheduler is work-conserving. A *limit* is a token bucket refilled at
//! `limit` nanoseconds per nanosecond: a client out of credit waits even when the GPU is idle.
//!
//! The daemon takes the token back when a lease ends (plus a grace for queued work to drain),
//! released or not, so a process that dies or hangs holds it for at most one quantum. A client is
//! charged the wall time of its lease, or the GPU time its hook reports if that is larger (work
//! queued during a lease may run past its end).
//!
//! With more than one *slot* (under MPS, where the kernels of several processes run together),
//! up to that many leases run at once; leases that run together share the GPU, so each is charged
//! its part of the time. Requests then decide who waits when more processes want the GPU than
//! there are slots, and limits hold as before.

use std::collections::{BTreeMap, VecDeque};

/// Monotonic nanoseconds from an arbitrary origin.
pub type Nanos = u64;
pub type ClientId = u64;
pub type SessionId = u64;

/// Weight of a client with no request, so that such clients still share among themselves.
const MIN_WEIGHT: f64 = 0.01;
/// How far back `usage` looks.
pub const USAGE_WINDOW: Nanos = 10_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub request: f64,
    pub limit: f64,
}

/// A decision to send: `session` holds the token for `lease_ns` from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub session: SessionId,
    pub client: ClientId,
    pub lease_ns: Nanos,
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
}

impl Client {
    fn weight(&self) -> f64 {
        self.shares.request.max(MIN_WEIGHT)
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
}

/// What the scheduler remembers of a lease that ended without a release, to charge its overrun.
#[derive(Debug, Clone, Copy)]
struct Expired {
    client: ClientId,
    /// The lease's wall time, already charged (shared among the leases running with it).
    wall: Nanos,
    /// Leases that ran at once when it ended; work past its end is shared the same way.
    together: u64,
}

/// Per-client figures for reports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    /// Fraction of the last `USAGE_WINDOW` (or of the time since the scheduler started, if
    /// shorter) charged to the client.
    pub share: f64,
    pub charged_total: Nanos,
    pub gpu_total: Nanos,
    pub grants: u64,
    pub waiting: usize,
    pub holding: bool,
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
    /// How many leases may run at once: 1 gives the GPU to one process at a time; more let the
    /// kernels of several processes run together (under MPS).
    slots: usize,
    expired: BTreeMap<SessionId, Expired>,
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
            expired: BTreeMap::new(),
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

    /// How many leases may run at once (at least one).
    pub fn set_slots(&mut self, slots: usize) {
        self.slots = slots.max(1);
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
                    },
                );
            }
        }
    }

    /// Forgets a client; its waiting sessions are dropped and a lease it holds ends.
    pub fn remove_client(&mut self, id: ClientId, now: Nanos) {
        // the others' shares of the time so far counted this client's leases too
        self.settle(now);
        self.clients.remove(&id);
        self.holders.retain(|h| h.client != id);
        self.expired.retain(|_, e| e.client != id);
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
        }
    }

    /// `session` gives the token back after `gpu_ns` of measured GPU time.
    pub fn release(&mut self, session: SessionId, gpu_ns: Nanos, now: Nanos) {
        if let Some(i) = self.holders.iter().position(|h| h.session == session) {
            self.settle(now);
            let together = self.holders.len() as u64;
            let h = self.holders.swap_remove(i);
            let wall = now.saturating_sub(h.start);
            // work the hook measured beyond the lease's wall time is shared like the rest
            let overrun = gpu_ns.saturating_sub(wall) / together;
            if let Some(c) = self.clients.get_mut(&h.client) {
                c.gpu_total += gpu_ns;
                c.charge(h.owed.round() as Nanos + overrun, now);
            }
        } else if let Some(e) = self.expired.remove(&session) {
            // The lease ended before this release; charge work that ran past its end.
            if let Some(c) = self.clients.get_mut(&e.client) {
                c.gpu_total += gpu_ns;
                c.charge(gpu_ns.saturating_sub(e.wall) / e.together, now);
            }
        }
    }

    /// `session`, holding a lease, asks for the next one at once. Granted (the lease restarts now,
    /// what ran so far is charged) when no other session waits and the client's limit allows it;
    /// the lease length, or `None` when it must give the token back as usual.
    pub fn extend(&mut self, session: SessionId, now: Nanos) -> Option<Nanos> {
        let i = self.holders.iter().position(|h| h.session == session)?;
        if self.clients.values().any(|c| !c.waiting.is_empty()) {
            return None;
        }
        self.settle(now);
        let burst = self.burst();
        let quantum = self.quantum;
        let h = &mut self.holders[i];
        let c = self.clients.get_mut(&h.client)?;
        c.charge(h.owed.round() as Nanos, now);
        c.refill(now, burst);
        if c.credit <= 0.0 {
            // over its limit: the lease ends as usual and the client waits for credit
            h.owed = 0.0;
            h.end = h.start;
            return None;
        }
        c.grants += 1;
        *h = Lease {
            session,
            client: h.client,
            start: now,
            end: now + quantum,
            owed: 0.0,
        };
        Some(quantum)
    }

    /// A session closed: it stops waiting and loses the token if it had it.
    pub fn session_gone(&mut self, session: SessionId, now: Nanos) {
        self.release(session, 0, now);
        self.expired.remove(&session);
        for c in self.clients.values_mut() {
            c.waiting.retain(|s| *s != session);
        }
    }

    /// Ends the leases that ran out and, while a slot is free, picks the next holder. Returns
    /// one grant to send, if any; call again until it returns `None`.
    pub fn poll(&mut self, now: Nanos) -> Option<Grant> {
        let grace = self.grace;
        self.settle(now);
        let together = self.holders.len().max(1) as u64;
        let (over, running): (Vec<Lease>, Vec<Lease>) =
            self.holders.iter().partition(|h| now >= h.end + grace);
        self.holders = running;
        for h in over {
            if let Some(c) = self.clients.get_mut(&h.client) {
                c.charge(h.owed.round() as Nanos, now);
            }
            self.expired.insert(
                h.session,
                Expired {
                    client: h.client,
                    wall: now - h.start,
                    together,
                },
            );
        }
        if self.holders.len() >= self.slots {
            return None;
        }
        self.prune_usage(now);
        let burst = self.burst();
        let mut best: Option<(f64, ClientId)> = None;
        let mut min_active = f64::INFINITY;
        for (&id, c) in self.clients.iter_mut() {
            if c.waiting.is_empty() {
                continue;
            }
            min_active = min_active.min(c.vtime);
            c.refill(now, burst);
            if c.credit <= 0.0 {
                continue;
            }
            if best.is_none_or(|(v, _)| c.vtime < v) {
                best = Some((c.vtime, id));
            }
        }
        if min_active.is_finite() {
            self.vclock = self.vclock.max(min_active);
        }
        let (_, id) = best?;
        let quantum = self.quantum;
        let c = self.clients.get_mut(&id)?;
        let session = c.waiting.pop_front()?;
        c.grants += 1;
        self.expired.remove(&session);
        self.holders.push(Lease {
            session,
            client: id,
            start: now,
            end: now + quantum,
            owed: 0.0,
        });
        Some(Grant {
            session,
            client: id,
            lease_ns: quantum,
        })
    }

    /// When `poll` next has something to do, if nothing else happens before.
    pub fn next_wakeup(&self, now: Nanos) -> Option<Nanos> {
        let mut earliest: Option<Nanos> = self.holders.iter().map(|h| h.end + self.grace).min();
        if self.holders.len() >= self.slots {
            return earliest;
        }
        for c in self.clients.values().filter(|c| !c.waiting.is_empty()) {
            let dt = now.saturating_sub(c.credit_at) as f64;
            let credit = (c.credit + dt * c.shares.limit).min(self.burst());
            let at = if credit > 0.0 {
                now
            } else {
                now + ((-credit / c.shares.limit).ceil() as Nanos).max(1)
            };
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
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
        Some(Usage {
            share: (recent as f64 / span).min(1.0),
            charged_total: c.charged_total,
            gpu_total: c.gpu_total,
            grants: c.grants,
            waiting: c.waiting.len(),
            holding: self.holds(id),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const S: Nanos = 1_000 * MS;

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
        Shares { request, limit }
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
                        self.sched
                            .release(g.session, g.lease_ns + self.gpu_overrun, self.now);
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
    fn late_releases_charge_the_overrun() {
        let mut sim = Sim::new(20 * MS);
        sim.gpu_overrun = 20 * MS; // each lease's work runs twice as long as the lease
        sim.client(1, 0.5, 1.0);
        sim.client(2, 0.5, 1.0);
        sim.saturate(1);
        sim.saturate(2);
        sim.run_for(10 * S);
        let a = sim.sched.usage(1, sim.now).unwrap();
        let b = sim.sched.usage(2, sim.now).unwrap();
        // each charged its reported 40 ms per 20 ms lease
        assert_eq!(a.charged_total, a.grants * 40 * MS);
        assert_eq!(b.charged_total, b.grants * 40 * MS);
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
        // its hook comes back later: the work it queued ran 30 ms, 10 ms past the lease
        s.release(10, 30 * MS, 31 * MS);
        assert_eq!(s.usage(1, 31 * MS).unwrap().charged_total, 30 * MS);
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
        s.set_slots(2);
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
        s.set_slots(4);
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
        assert_eq!(s.extend(10, 20 * MS), Some(20 * MS), "nobody waits");
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
        while s.extend(10, t) == Some(20 * MS) {
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
}
