//! The token scheduler: pure, deterministic logic with the clock passed in.
//!
//! One token per GPU: a [`Scheduler`] schedules one device, and [`Schedulers`] keeps one for
//! each device that processes name ([`devices`]). A grant is a *lease* of one quantum. Among the clients with a waiting
//! process, the one with the smallest weighted virtual time gets the next lease (weights are the
//! clients' requests), so saturating clients converge to shares proportional to their requests,
//! and every client gets at least its request (the requests add up to at most 1). Idle share goes
//! to whoever waits: the scheduler is work-conserving. A *limit* is a token bucket refilled at
//! `limit` nanoseconds per nanosecond, holding what the limit earns in [`LIMIT_WINDOW`] (at
//! least a quantum): a client out of credit waits even when the GPU is idle.
//!
//! At its lease's end a holder asks for another at once ([`Scheduler::extend`]), and gets it
//! when it would be granted the next lease anyway: it keeps its queue, which a hand-over drains.
//!
//! A client that waits for the GPU is never far ahead in virtual time of the other running
//! clients: a lead it built running beside their leases is forgiven past a bound ([`lead`]).
//!
//! *Burst credit* ([`guarantee`]): a client that left half a second's worth of its request
//! unused lately is *owed*; it goes ahead of clients that are not, and ends their leases when it
//! cannot start beside them, so that a job computing in bursts below its request gets each burst
//! as if alone.
//!
//! Charges come from the daemon's own clock, never from what a process reports: a lease is
//! charged its wall time from grant to release, at most to its end plus the grace, after which
//! the token is taken back (a process that dies or hangs holds it that long). A process whose
//! work outlasted its grace earns a longer one, as long as its drains take ([`drains`]). A
//! process releases only once the work it queued has finished, and it keeps at most a bounded
//! amount queued, so that a lease's wall time is the GPU time it took.
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
//! their part of the time. Where every process weighs the same (or nearly: equal turns would
//! give saturating ones their due), whether running together pays is measured as well, by the
//! launches the processes report: where exclusive turns let them launch more, one batch lease
//! runs at a time ([`together`]).
//!
//! A process that fits beside the running leases does not wait behind the first in line when that
//! one does not, as long as the first can start beside it later ([`Scheduler::backfill`]). A
//! lease granted alone that another joins is reported ([`Scheduler::take_joined`]).
//!
//! *Interactive* clients get a lease as soon as they ask, beside any other; the leases of batch
//! clients running then are *revoked*: they end at their holder's next launch (the daemon tells
//! the process; [`Scheduler::take_revoked`]). So are they when a process due a probe comes first
//! (when it is first in line, or has been due one for [`demand::PROBE_PATIENCE`]): it waits for
//! their drained queues, then runs alone.
//!
//! With more than one *slot* and overlap not gated by demand (under MPS, where the kernels of
//! several processes run together), up to that many leases run at once; requests then decide who
//! waits when more processes want the GPU than there are slots, and limits hold as before.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod charges;
pub mod demand;
pub mod devices;
pub mod drains;
pub mod fair_share;
pub mod fairness;
pub mod guarantee;
pub mod launch_cost;
pub mod lead;
pub mod lease_log;
mod overlap;
pub mod pace;
mod renewing;
pub mod together;
mod usage;

use demand::Demands;
pub use devices::Schedulers;
use drains::Drains;
use guarantee::Guarantee;
use launch_cost::LaunchCosts;
use lease_log::LeaseLog;
pub use together::Mode;
use together::Trials;
use usage::SessionBook;
pub use usage::{SessionUsage, Usage};

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
/// How soon after its lease ended a process that asks again was never away
/// ([`Scheduler::acquire`]): the hand-over of a revoked lease takes tens of microseconds.
pub const RETURN_GAP: Nanos = 1_000_000;
/// Least share of the recent time holding leases that USED divides a demand by
/// ([`Scheduler::demand_while_holding`]): a process that held none lately needs no more than
/// twenty times its average.
const LEAST_HOLDING_SHARE: f64 = 0.05;
/// How far back `usage` looks.
pub const USAGE_WINDOW: Nanos = 10_000_000_000;
/// A limit's bucket holds what the limit earns in this long ([`Client::depth`]): in any span a
/// client uses at most its limit times the span and this window (and the lease that runs past
/// it). A client kept waiting by others' turns saves its credit for the GPU's idle time after
/// them; a bucket one quantum deep spilled it, and a client limited to 0.61 got 0.51 while the
/// GPU idled 12% of the time (GPU soak seed 13).
pub const LIMIT_WINDOW: Nanos = 250_000_000;
/// The most a client's request is scaled to among the clients present ([`Client::guaranteed`]).
const SCALED_RATE_MAX: f64 = 0.5;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shares {
    pub request: f64,
    pub limit: f64,
    /// Interactive (latency class): a lease at once, others' leases revoked.
    pub interactive: bool,
}

/// How the leases of one GPU run, as [`Scheduler::lease_mode`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseMode {
    /// One lease at a time (one slot).
    OneAtATime,
    /// Up to as many leases as there are slots at once, whatever the processes' demands (under
    /// MPS, or `concurrent_leases` set).
    Concurrent,
    /// Overlap by demand: a lease starts beside the running ones while the GPU has room for
    /// them or the weights allow ([`fairness`]).
    Together,
    /// Overlap by demand, but batch leases take exclusive turns: trials measured more progress
    /// in turns ([`together`]).
    Turns,
}

impl LeaseMode {
    /// The mode of a GPU with `slots` and overlap by demand or not, before any trial.
    fn before_trials(slots: usize, demand_gated: bool) -> LeaseMode {
        if slots <= 1 {
            LeaseMode::OneAtATime
        } else if demand_gated {
            LeaseMode::Together
        } else {
            LeaseMode::Concurrent
        }
    }
}

/// A decision to send: `session` holds the token for `lease_ns` from now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub session: SessionId,
    pub client: ClientId,
    pub lease_ns: Nanos,
    /// Without MPS, the lease starts beside others (light processes overlapping by demand).
    pub shared: bool,
    /// A batch lease while an interactive client is active or was within [`INTERACTIVE_RECENT`],
    /// or while a batch client owed burst credit has a process that holds no lease: its holder
    /// keeps a short queue, so that the interactive or owed client's next request waits little
    /// behind its work ([`Scheduler::tight_for`]).
    pub tight: bool,
    /// Other processes wait for the token: an extension no longer means that nobody does.
    pub contended: bool,
}

#[derive(Debug)]
struct Client {
    shares: Shares,
    vtime: f64,
    credit: f64,
    credit_at: Nanos,
    waiting: VecDeque<SessionId>,
    /// (end of a lease or of its part before an extension, GPU time its work took) for the
    /// last `USAGE_WINDOW`: what USED reports ([`Lease::used`]).
    recent: VecDeque<(Nanos, Nanos)>,
    charged_total: Nanos,
    /// GPU time its work took ([`Lease::used`]), added up.
    gpu_total: Nanos,
    grants: u64,
    /// Time its processes waited for a grant, counting the waits that ended.
    waited_total: Nanos,
    /// Its fair-share factor ([`fair_share`]), 1 unless fair share is on.
    fair_factor: f64,
    /// What its request guarantees it and it did not use lately ([`guarantee`]).
    guarantee: Guarantee,
    /// How far behind the virtual clock its last charged lease left it (0 when ahead): the
    /// lag it keeps over a pause ([`Scheduler::acquire`]).
    lag_at_rest: f64,
    /// What its request is worth while only some clients have processes: 1 over the requests
    /// of the clients present ([`Scheduler::rescale`]), at least 1.
    scale: f64,
    /// When a batch lease of its ended with work left (at its end, or revoked at its process's
    /// next launch), until it asks again: its process comes back at once
    /// ([`Scheduler::renewing`]).
    renewing_since: Option<Nanos>,
}

impl Client {
    fn weight(&self) -> f64 {
        request_weight(self.shares.request) * self.fair_factor
    }
    /// The rate its burst credit fills at ([`guarantee`]): its request, scaled by its fair-share
    /// factor as its weight is, and by its [`Client::scale`]: the part of the GPU its request
    /// gives it among the clients present, which is what it is due while it has work.
    /// Scaled, it stays at most half the GPU (or its request, if more), where a bucket is
    /// largest ([`guarantee`]): a client whose requests are most of those present (beside an
    /// interactive client of request 0, all of them) would otherwise be guaranteed nearly the
    /// whole GPU, in a bucket of nearly nothing, and never be owed. Nor is it scaled past its
    /// limit: a client held at its limit below that rate would fill its bucket for ever and stay
    /// owed, going ahead of the others whenever it had credit.
    fn guaranteed(&self) -> f64 {
        let rate = self.shares.request * self.fair_factor;
        (rate * self.scale)
            .min(rate.max(SCALED_RATE_MAX))
            .min(rate.max(self.shares.limit))
    }
    /// How much credit its limit's bucket holds beyond what its running leases owe: what the
    /// limit earns over [`LIMIT_WINDOW`], at least a `quantum`.
    fn depth(&self, quantum: f64) -> f64 {
        quantum.max(self.shares.limit * LIMIT_WINDOW as f64)
    }
    /// Its credit at `now`, refilled up to its [`Client::depth`] beyond `pending`, what its
    /// running leases owe and have not been charged yet: a lease is charged at its end, and a
    /// bucket full while it ran would leave the client in debt after it, however far below its
    /// limit it was. A client of limit 1 whose leases ran a few ms past their 20 ms (the last
    /// kernel's drain) was then out of credit at each lease's end, and a client of request 0
    /// took its turns (GPU soak seed 4: 0.27 of the GPU where it was due 0.02, the client of
    /// request 0.55 short by 0.29).
    fn credit_now(&self, now: Nanos, quantum: f64, pending: f64) -> f64 {
        let dt = now.saturating_sub(self.credit_at) as f64;
        (self.credit + dt * self.shares.limit).min(self.depth(quantum) + pending)
    }
    /// What it may still use at `now`: its credit less what its running leases owe.
    fn available(&self, now: Nanos, quantum: f64, pending: f64) -> f64 {
        self.credit_now(now, quantum, pending) - pending
    }
    fn refill(&mut self, now: Nanos, quantum: f64, pending: f64) {
        self.credit = self.credit_now(now, quantum, pending);
        self.credit_at = now.max(self.credit_at);
    }
    /// Charges a lease (or a lease's part) `ns` at `now`, and its limit's credit `limit_ns`
    /// ([`Lease::limit_charge`]).
    fn charge(&mut self, ns: Nanos, limit_ns: Nanos, window: Nanos, now: Nanos) {
        self.guarantee.charge(self.guaranteed(), window, ns, now);
        self.vtime += ns as f64 / self.weight();
        self.credit -= limit_ns as f64;
        self.charged_total += ns;
    }
    /// Its work took `ns` of GPU time in a lease (or a lease's part) that ended at `now`.
    fn used(&mut self, ns: Nanos, now: Nanos) {
        self.gpu_total += ns;
        self.recent.push_back((now, ns));
    }
}

#[derive(Debug, Clone, Copy)]
struct Lease {
    session: SessionId,
    client: ClientId,
    start: Nanos,
    end: Nanos,
    /// Its length as granted (or extended), before a revocation moved `end`: a lease revoked
    /// early measured its process's demand over part of it ([`demand::part`]).
    length: Nanos,
    /// GPU time owed so far: wall time, divided among the leases that ran at the same moment.
    owed: f64,
    /// GPU time its work took so far, as the driver's equal turns divide the GPU among the
    /// leases running at the same moment by their processes' demands (a process that needs
    /// less than its turn leaves the rest to the others). At its end it is capped by the busy
    /// time its process reports, and a lease that ran alone throughout took that busy time.
    /// Beside others, once its process ran a lease by itself, its launches counted at what they
    /// took then ([`launch_cost`]) replace this division: demand estimates of loops that give
    /// their leases back at each pause read them far lighter than they are while they hold one.
    /// This is what USED reports, and without MPS beside other batch leases what the lease is
    /// charged ([`Lease::batch_charge`]); elsewhere the charge is [`Lease::owed`].
    used: f64,
    /// Another lease ran beside it at some moment.
    crowded: bool,
    /// Another batch lease ran beside this batch lease at some moment.
    beside_batch: bool,
    /// The work of the interactive leases that ended beside it, its part of each (what its
    /// charge was lowered by, [`Scheduler::leave_to_batch`]).
    interactive_work: f64,
    /// Ended early, for an interactive client or a probe first in line: no extension, the token
    /// goes back at the holder's next launch.
    revoked: bool,
    /// No other lease ran during any of it: its busy time measures its process's demand.
    alone: bool,
    /// A short lease alone, to measure its process's demand ([`demand`]): nothing starts beside it.
    probe: bool,
    /// Started ahead of the first in line, beside which that one can start
    /// ([`Scheduler::backfill`]).
    backfilled: bool,
    /// Its holder knows that others wait for the token: granted (or extended) so
    /// ([`Grant::contended`]), or told since ([`Scheduler::take_contended`]).
    contended: bool,
    /// Kernels its process reported launching in it ([`Scheduler::launched`]).
    launches: u64,
    /// The time its process reported being in its GPU phases in it ([`Scheduler::was_active`]).
    active: Nanos,
    /// Restarted by an extension: work its process queued before counts in its busy time, not
    /// in its launches. A lease granted otherwise starts with its process's queue empty (the
    /// process drained it before it gave its last lease back).
    extended: bool,
    /// For an extended lease, the leases it continues since its process's last grant: their
    /// time and time in GPU phases, which its demand sample spans too ([`Scheduler::extend`]).
    earlier: Option<Sample>,
}

/// What an ended lease tells its process's demand estimate, besides the wall time it is
/// measured over; kept for a lease its holder gave back before its end until the process asks
/// again ([`Scheduler::end_lease`]).
#[derive(Debug, Clone, Copy)]
struct Sample {
    start: Nanos,
    length: Nanos,
    busy: Nanos,
    alone: bool,
    probe: bool,
}

#[derive(Debug)]
pub struct Scheduler {
    quantum: Nanos,
    /// How long past its end a lease stays with its holder, for the work it queued to drain and
    /// its release to arrive, before the token is taken back: the configured grace, longer for a
    /// process whose drains took longer ([`drains`]).
    drains: Drains,
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
    /// The process due a probe for which the running leases were ended: it goes next.
    probe_next: Option<(ClientId, SessionId)>,
    /// Leases granted alone (without MPS) that another started beside, whose holders have not
    /// been told yet.
    joined: Vec<SessionId>,
    /// Leases granted while nobody waited that a process now waits for, whose holders have not
    /// been told yet ([`Scheduler::take_contended`]).
    contended: Vec<SessionId>,
    /// When each session's last lease ended.
    lease_log: LeaseLog,
    /// What interactive processes' launches take when they wait for nobody ([`launch_cost`]).
    launch_costs: LaunchCosts,
    paces: pace::Paces,
    /// Leases given back before their end, by session, until their process asks again.
    early: BTreeMap<SessionId, Sample>,
    /// Sessions waiting since they came back from away ([`Scheduler::preempt_for`]).
    woken: BTreeSet<SessionId>,
    /// What each process got and waited, until [`Scheduler::take_session_usage`].
    books: BTreeMap<SessionId, SessionBook>,
    /// When an interactive client last held or waited for a lease.
    interactive_at: Option<Nanos>,
    /// Whether batch leases run together or take turns (without MPS), by measured progress.
    trials: Trials,
    /// Virtual clock: never behind the smallest virtual time of an active client.
    vclock: f64,
    /// How long a client's unused request is kept as burst credit ([`guarantee`]).
    burst_window: Nanos,
    /// The client of each session that asked for the token and has not gone.
    present: BTreeMap<SessionId, ClientId>,
    started: Nanos,
}

impl Scheduler {
    pub fn new(quantum: Nanos, now: Nanos) -> Self {
        Scheduler {
            quantum: quantum.max(1),
            drains: Drains::default(),
            clients: BTreeMap::new(),
            holders: Vec::new(),
            owed_at: now,
            slots: 1,
            demand_gated: false,
            demand: Demands::default(),
            revoked: Vec::new(),
            joined: Vec::new(),
            contended: Vec::new(),
            probe_next: None,
            lease_log: LeaseLog::default(),
            launch_costs: LaunchCosts::default(),
            paces: pace::Paces::default(),
            early: BTreeMap::new(),
            woken: BTreeSet::new(),
            books: BTreeMap::new(),
            interactive_at: None,
            trials: Trials::default(),
            vclock: 0.0,
            burst_window: guarantee::WINDOW,
            present: BTreeMap::new(),
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
        self.drains.configure(grace);
    }

    /// How long a client's unused request is kept as burst credit (0: no burst credit).
    pub fn set_burst_window(&mut self, window: Nanos) {
        self.burst_window = window;
        for c in self.clients.values_mut() {
            c.guarantee.fit(c.guaranteed(), window);
        }
    }

    /// How many leases may run at once (at least one), and whether a lease starts beside
    /// others only while the driver's turns would be fair to all ([`fairness`]).
    pub fn set_slots(&mut self, slots: usize, demand_gated: bool) {
        self.slots = slots.max(1);
        self.demand_gated = demand_gated;
    }

    /// Whether `client` is of the latency class.
    fn interactive(&self, client: ClientId) -> bool {
        self.clients
            .get(&client)
            .is_some_and(|c| c.shares.interactive)
    }

    /// Whether a batch lease other than `session`'s runs: an interactive client's leases,
    /// short and light, leave a batch lease alone for measuring its process's demand.
    fn other_batch_lease(&self, session: SessionId) -> bool {
        self.holders
            .iter()
            .any(|h| h.session != session && !self.interactive(h.client))
    }

    /// Whether a batch lease runs beside another while its process crawls beside others
    /// ([`pace`]): then none is extended, and they part at their ends.
    fn crawling_beside_others(&self, now: Nanos) -> bool {
        let holding: Vec<(SessionId, ClientId)> =
            self.holders.iter().map(|h| (h.session, h.client)).collect();
        self.one_crawls_among(&holding, now)
    }

    /// Whether any batch lease runs.
    fn batch_lease_runs(&self) -> bool {
        self.holders.iter().any(|h| !self.interactive(h.client))
    }

    /// What `client`'s running leases owe so far (as of the last [`Scheduler::settle`]), not
    /// charged until they end or are extended.
    fn pending(&self, client: ClientId) -> f64 {
        self.holders
            .iter()
            .filter(|h| h.client == client)
            .map(|h| h.owed)
            .sum()
    }

    fn holds(&self, client: ClientId) -> bool {
        self.holders.iter().any(|h| h.client == client)
    }

    /// The mean virtual time of `clients`, weighted by their weights; `None` for none.
    fn mean_vtime<'a>(&self, clients: impl Iterator<Item = &'a ClientId>) -> Option<f64> {
        let (sum, weights) = clients
            .filter_map(|id| self.clients.get(id))
            .fold((0.0, 0.0), |(s, w), c| {
                (s + c.vtime * c.weight(), w + c.weight())
            });
        (weights > 0.0).then(|| sum / weights)
    }

    /// Whether batch client `id` is owed at `now` ([`guarantee`]): it left half its bucket or
    /// more of its request unused lately.
    fn owed(&self, id: ClientId, now: Nanos) -> bool {
        self.clients.get(&id).is_some_and(|c| {
            !c.shares.interactive
                && c.guarantee
                    .owed(c.guaranteed(), self.burst_window, self.quantum, now)
        })
    }

    /// Whether client `id` has used what its request guarantees it over the burst window
    /// ([`guarantee`]): its bucket holds less than a lease (or half of it, where that is less).
    /// Never with burst credit off.
    fn spent_its_request(&self, id: ClientId, now: Nanos) -> bool {
        self.clients.get(&id).is_some_and(|c| {
            let rate = c.guaranteed();
            let size = Guarantee::size(rate, self.burst_window);
            c.guarantee.credit(rate, self.burst_window, now) < (self.quantum as f64).min(size / 2.0)
        })
    }

    /// A client's virtual deadline for a lease of `length` starting now: its virtual time plus
    /// the lease at its weight (a holder's virtual time is the one it was granted at, as its
    /// lease is charged at its end).
    fn deadline(&self, id: ClientId, length: Nanos) -> f64 {
        self.clients
            .get(&id)
            .map_or(f64::INFINITY, |c| c.vtime + length as f64 / c.weight())
    }

    /// Client `id`, first in line, cannot start beside the running leases. Batch leases end at
    /// their holders' next launch, as for an interactive client, when `id` is owed
    /// ([`guarantee`]; the leases of clients that are not owed), or when its next process comes
    /// back from away (a loop that left the GPU for its host work), a lease at its weight would
    /// end before theirs in virtual time, and their holders, charged what ran so far, would wait
    /// behind it in line (EEVDF's wake-up preemption): without it, a loop that gives its lease
    /// back at each host pause waited for a whole lease of any client, however light, that took
    /// the token meanwhile.
    /// Probes, interactive leases and leases started ahead of `id` that it can start beside
    /// ([`Scheduler::backfill`]) run on. Whether any lease was ended.
    fn preempt_for(&mut self, id: ClientId, now: Nanos) -> bool {
        let owed = self.owed(id, now);
        let woken = self
            .clients
            .get(&id)
            .and_then(|c| c.waiting.front())
            .is_some_and(|s| self.woken.contains(s));
        if !owed && !woken {
            return false;
        }
        let deadline = self.deadline(id, self.quantum);
        let vtime = self.clients.get(&id).map_or(f64::INFINITY, |c| c.vtime);
        // a holder charged what its lease ran so far would wait behind `id` in line
        let behind = |h: &Lease| {
            self.clients
                .get(&h.client)
                .is_some_and(|c| vtime < c.vtime + h.owed / c.weight())
        };
        let ends: Vec<usize> = (0..self.holders.len())
            .filter(|&i| {
                let h = &self.holders[i];
                !h.revoked
                    && !h.probe
                    && !h.backfilled
                    && h.client != id
                    && !self.interactive(h.client)
                    && {
                        let earlier =
                            woken && deadline < self.deadline(h.client, h.length) && behind(h);
                        if self.owed(h.client, now) {
                            // an owed holder goes before any client that is not owed
                            owed && earlier
                        } else {
                            owed || earlier
                        }
                    }
            })
            .collect();
        for &i in &ends {
            let h = &mut self.holders[i];
            tracing::debug!(
                client = h.client,
                session = h.session,
                for_client = id,
                owed,
                woken,
                "revoke"
            );
            h.revoked = true;
            h.end = h.end.min(now);
            self.revoked.push(h.session);
        }
        !ends.is_empty()
    }

    /// The quantum, as credit of a limit's bucket ([`Client::depth`]).
    fn quantum_credit(&self) -> f64 {
        self.quantum as f64
    }

    /// Adds a client or changes its shares.
    pub fn set_client(&mut self, id: ClientId, shares: Shares, now: Nanos) {
        let quantum_credit = self.quantum_credit();
        let pending = self.pending(id);
        match self.clients.get_mut(&id) {
            Some(c) => {
                c.refill(now, quantum_credit, pending);
                let old = c.guaranteed();
                c.shares = shares;
                c.guarantee
                    .resize(old, c.guaranteed(), self.burst_window, now);
            }
            None => {
                self.clients.insert(
                    id,
                    Client {
                        shares,
                        vtime: self.vclock,
                        credit: quantum_credit,
                        credit_at: now,
                        waiting: VecDeque::new(),
                        recent: VecDeque::new(),
                        charged_total: 0,
                        gpu_total: 0,
                        grants: 0,
                        waited_total: 0,
                        fair_factor: 1.0,
                        guarantee: Guarantee::new(now),
                        lag_at_rest: 0.0,
                        scale: 1.0,
                        renewing_since: None,
                    },
                );
            }
        }
        self.rescale(now);
    }

    /// Sets each client's [`Client::scale`] from the clients present now (a process of theirs
    /// asked for the token and has not gone), keeping what its burst credit held as of `now`.
    /// The requests present are counted as the turns weigh them (a request of 0 as
    /// [`MIN_WEIGHT`]), without fair-share factors: a factor below 1 lowers its own client's
    /// rate only, and the others' scales stay as they were (conservative: never above what the
    /// weights give them).
    /// Requests add up to at most 1; while some clients have no process, those present are
    /// due the GPU in proportion to their requests, and a client whose bursts pause between
    /// them is due that part of it as the others are. Filled at its request alone, a client of
    /// request 0.10 among clients present whose requests added up to 0.5 got 0.10 where it was
    /// due 0.20, its bursts 5.9 times their time alone (GPU soak seed 17).
    fn rescale(&mut self, now: Nanos) {
        let present: BTreeSet<ClientId> = self.present.values().copied().collect();
        let total: f64 = present
            .iter()
            .filter_map(|id| self.clients.get(id))
            .map(|c| request_weight(c.shares.request))
            .sum();
        let scale = if total > 0.0 {
            (1.0 / total).max(1.0)
        } else {
            1.0
        };
        let window = self.burst_window;
        for c in self.clients.values_mut() {
            if c.scale != scale {
                let old = c.guaranteed();
                c.scale = scale;
                c.guarantee.resize(old, c.guaranteed(), window, now);
            }
        }
    }

    /// Sets a client's fair-share factor (clamped to [`fair_share::FLOOR`]..=1); its weight is
    /// its request times it. Unknown clients are ignored.
    pub fn set_fair_factor(&mut self, id: ClientId, factor: f64) {
        if let Some(c) = self.clients.get_mut(&id) {
            c.fair_factor = clamp_factor(factor);
            c.guarantee.fit(c.guaranteed(), self.burst_window);
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
        self.present.retain(|_, c| *c != id);
        self.rescale(now);
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
        // A process that asks again right after its lease ended (revoked, it gave the token
        // back at its next launch) was never away: lifted to the virtual clock then (set by the
        // interactive lease that ran meanwhile), a batch client stayed level with an
        // interactive one, which went first at every request and took its whole demand.
        let back_at_once = self
            .lease_log
            .last_end(session)
            .is_some_and(|end| now.saturating_sub(end) <= RETURN_GAP);
        let vclock = self.vclock;
        let quantum_credit = self.quantum_credit();
        let pending = self.pending(client);
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        c.renewing_since = None;
        if !was_active && !back_at_once {
            // A client coming back from idle does not bank the time it was away, but keeps the
            // lag it had when its last lease ended, up to a lease at its weight (EEVDF's lag
            // over a sleep): lifted level with the virtual clock, a client left behind by its
            // last turn lost its place to those that ran while it paused, and a clock that a
            // client of request 0 had raised alone in line lifted every returning client to it.
            let kept = c.lag_at_rest.min(quantum_credit / c.weight());
            if kept > 0.0 && c.vtime < vclock {
                tracing::debug!(
                    client,
                    lag_ms = kept * c.weight() / 1e6,
                    "back with its lag"
                );
            }
            c.vtime = c.vtime.max(vclock - kept);
            c.refill(now, quantum_credit, pending);
        }
        if back_at_once {
            self.woken.remove(&session);
        } else {
            self.woken.insert(session);
        }
        if !c.waiting.contains(&session) {
            c.waiting.push_back(session);
            self.books.entry(session).or_default().start_wait(now);
        }
        for h in &mut self.holders {
            if !h.contended && h.session != session {
                h.contended = true;
                self.contended.push(h.session);
            }
        }
        self.demand.add(session);
        self.learn_early_end(session, now);
        if self.present.insert(session, client) != Some(client) {
            self.rescale(now);
        }
    }

    /// `session` gives the token back; its work kept the GPU busy for `busy_ns` of the lease (as
    /// its process says: it only feeds the demand estimate, clamped to the lease's wall time).
    /// The lease is charged its wall time (beside other leases, [`Lease::batch_charge`] or the
    /// interactive charge, [`charges`]). A release after the token was taken back charges
    /// nothing (that lease was charged to its end and grace already); its process's drain took
    /// that long ([`drains`]).
    pub fn release(&mut self, session: SessionId, busy_ns: Nanos, now: Nanos) {
        if let Some(h) = self.take_lease(session, now) {
            // ended with work left: at its end, or revoked at its next launch
            if h.revoked || now >= h.end {
                self.renewing_from(h.client, now);
            }
            self.end_lease(h, busy_ns, now);
        }
    }

    /// `session`, holding a lease, asks for the next one at once. Granted (the lease restarts now,
    /// what ran so far is charged) when it would get the next lease anyway: no waiting process
    /// goes before it ([`Scheduler::waits_ahead`]), the lease was not revoked and the client's
    /// limit allows it; the new lease (shared when others run beside it), or `None` when it must
    /// give the token back as usual. A process of a large request thus holds its turns by
    /// request in one stretch, its queue never drained between them. A probe is never extended,
    /// nor is the lease of a process whose probe would come now ([`Scheduler::probe_now`]): its
    /// busy time at the end measures its demand. One due a probe that does not come (every
    /// process weighs the same: demands decide nothing) is extended as any other.
    pub fn extend(&mut self, session: SessionId, now: Nanos) -> Option<Grant> {
        let i = self.holders.iter().position(|h| h.session == session)?;
        let h = &self.holders[i];
        if h.revoked
            || h.probe
            || self.probe_now(session)
            || self.overlapping_by_demand(now)
            || (self.taking_turns(now) && self.holders.len() > 1)
            || self.crawling_beside_others(now)
        {
            return None;
        }
        self.settle(now);
        if self.waits_ahead(i, now) {
            return None;
        }
        let quantum_credit = self.quantum_credit();
        let quantum = self.quantum;
        let window = self.burst_window;
        // what the client's other running leases owe (this one's is charged now)
        let others = self.pending(self.holders[i].client) - self.holders[i].owed;
        let h = &mut self.holders[i];
        let c = self.clients.get_mut(&h.client)?;
        let owed = h.owed.round() as Nanos;
        // its process reports no busy time at an extension, only its time in GPU phases
        let used = h.used_so_far(now, &self.launch_costs);
        let (charge, limit_charge) = if c.shares.interactive || !self.demand_gated {
            (owed, owed)
        } else {
            let wall = now.saturating_sub(h.start);
            h.batch_charges(owed, used, h.active.min(wall), wall)
        };
        c.refill(now, quantum_credit, others + h.owed);
        if c.credit - others - limit_charge as f64 <= 0.0 {
            // over its limit: the lease ends as usual and the client waits for credit. Its end
            // charges it and counts it to USED, from its start: counted here too, its GPU time
            // was counted twice; charged here too, a lease beside others was charged that part
            // twice, as its GPU time from its start.
            h.end = h.start;
            return None;
        }
        c.charge(charge, limit_charge, window, now);
        let book = self.books.entry(session).or_default();
        book.charge(charge);
        c.used(used, now);
        c.grants += 1;
        book.granted();
        if !c.shares.interactive {
            self.paces.learn(
                session,
                now,
                owed,
                (now.saturating_sub(h.start), h.active, h.length),
                h.launches,
                h.company(),
            );
        }
        tracing::debug!(
            client = h.client,
            session,
            owed_ms = charge as f64 / 1e6,
            vtime = c.vtime,
            "extend"
        );
        let earlier = self.holders[i].sample_through(now);
        let alone = !self.other_batch_lease(session);
        let contended = self.others_wait(session);
        let h = &mut self.holders[i];
        *h = Lease {
            session,
            client: h.client,
            start: now,
            end: now + quantum,
            length: quantum,
            owed: 0.0,
            used: 0.0,
            crowded: false,
            beside_batch: false,
            interactive_work: 0.0,
            revoked: false,
            alone,
            probe: false,
            backfilled: false,
            contended,
            launches: 0,
            active: 0,
            extended: true,
            earlier: Some(earlier),
        };
        let client = h.client;
        Some(Grant {
            session,
            client,
            lease_ns: quantum,
            shared: self.demand_gated && !alone,
            tight: self.tight_for(client, now),
            contended,
        })
    }

    /// Whether a process other than `session` waits for the token.
    fn others_wait(&self, session: SessionId) -> bool {
        self.clients
            .values()
            .any(|c| c.waiting.iter().any(|&s| s != session))
    }

    /// Whether a waiting process would get the next lease before the holder of `holders[i]`
    /// were it to ask again now, its lease charged: an interactive client's, the one whose probe
    /// the running leases were ended for, another process of its own client (they take turns),
    /// or one of a client with
    /// credit whose virtual time is below the holder's after the charge (on a tie, the client
    /// first in [`Scheduler::poll`]'s line). Call after [`Scheduler::settle`].
    fn waits_ahead(&self, i: usize, now: Nanos) -> bool {
        let h = &self.holders[i];
        let Some(holder) = self.clients.get(&h.client) else {
            return true;
        };
        if self.probe_next.is_some() {
            return true;
        }
        let vtime_after = holder.vtime + h.owed.round() / holder.weight();
        let quantum_credit = self.quantum_credit();
        let holder_owed = self.owed(h.client, now);
        self.clients.iter().any(|(&id, c)| {
            if c.waiting.is_empty() {
                return false;
            }
            let before = c.vtime < vtime_after || (c.vtime == vtime_after && id < h.client);
            let owed_first = !holder_owed && self.owed(id, now);
            id == h.client
                || c.shares.interactive
                || (c.available(now, quantum_credit, self.pending(id)) > 0.0
                    && (before || owed_first))
        })
    }

    /// A session closed: it stops waiting and loses the token if it had it.
    pub fn session_gone(&mut self, session: SessionId, now: Nanos) {
        // a process gone does not come back to renew its lease
        if let Some(h) = self.take_lease(session, now) {
            self.end_lease(h, 0, now);
        }
        self.demand.remove(session);
        self.early.remove(&session);
        self.woken.remove(&session);
        self.lease_log.forget(session);
        self.launch_costs.forget(session);
        self.paces.forget(session);
        self.drains.forget(session);
        self.trials.forget(session);
        if self.present.remove(&session).is_some() {
            self.rescale(now);
        }
        let book = self.books.get_mut(&session);
        let waited = book.map_or(0, |b| b.end_wait(now));
        for c in self.clients.values_mut() {
            if c.waiting.contains(&session) {
                c.waiting.retain(|s| *s != session);
                c.waited_total += waited;
            }
        }
    }

    /// The sessions whose leases were revoked since the last call: tell them.
    pub fn take_revoked(&mut self) -> Vec<SessionId> {
        std::mem::take(&mut self.revoked)
    }

    /// The sessions whose leases, granted alone, another lease started beside since the last
    /// call (without MPS): tell them, so that they stop taking their markers' times, which now
    /// include the others' turns, for their own ([`Grant::shared`]).
    pub fn take_joined(&mut self) -> Vec<SessionId> {
        std::mem::take(&mut self.joined)
    }

    /// The sessions whose leases, granted while no other process waited, another process has
    /// started waiting for since the last call: tell them, so that a holder that leaves the GPU
    /// idle gives the token back soon ([`Grant::contended`]). A light process whose lease was
    /// granted just before the others asked again held it through every pause to its end: a
    /// loop running a 250 us kernel every 5 ms kept a 20 ms lease for four steps, the GPU idle
    /// nearly all of it.
    /// A lease revoked meanwhile is not reported: its holder gives it back at its next launch
    /// anyway, and is told so.
    pub fn take_contended(&mut self) -> Vec<SessionId> {
        let mut told = std::mem::take(&mut self.contended);
        told.retain(|&s| self.holders.iter().any(|h| h.session == s && !h.revoked));
        told
    }

    /// `session` reports the time it spent in its GPU phases since its last report: work pending
    /// or launching (the hook's measure, [`Lease::active`]), by which USED counts its lease.
    pub fn was_active(&mut self, session: SessionId, active_ns: Nanos) {
        if let Some(h) = self.holders.iter_mut().find(|h| h.session == session) {
            h.active = h.active.saturating_add(active_ns);
        }
    }

    /// `session` reports the kernels it launched since its last report ([`together`]): a batch
    /// process's count measures its progress, without MPS; the count of an interactive lease
    /// bounds its charge ([`launch_cost`]).
    pub fn launched(&mut self, session: SessionId, launches: u64, now: Nanos) {
        if let Some(h) = self.holders.iter_mut().find(|h| h.session == session) {
            h.launches += launches;
        }
        if !self.demand_gated {
            return;
        }
        let client = self
            .holders
            .iter()
            .find(|h| h.session == session)
            .map(|h| h.client)
            .or_else(|| {
                self.clients
                    .iter()
                    .find(|(_, c)| c.waiting.contains(&session))
                    .map(|(&id, _)| id)
            });
        let interactive = client
            .and_then(|id| self.clients.get(&id))
            .is_some_and(|c| c.shares.interactive);
        if !interactive {
            self.trials.launched(session, launches, now);
        }
    }

    /// How batch leases run now: together, or in turns ([`together`]).
    pub fn mode(&self) -> Mode {
        self.trials.mode()
    }

    /// Whether batch leases take turns now: every process weighs the same or nearly
    /// ([`Scheduler::weights_leave_turns_open`]), the trials chose (or try) turns, and no
    /// interactive client is active (its own rules decide then).
    fn taking_turns(&self, now: Nanos) -> bool {
        self.demand_gated
            && self.trials.mode() == Mode::Turns
            && !self.interactive_recently(now)
            && self.weights_leave_turns_open()
    }

    /// How leases run at `now`: one at a time, concurrently, or, with overlap by demand,
    /// together or in turns. Turns while they are in force: the trials chose them, every process
    /// weighs the same or nearly and no interactive client is active; not once the processes
    /// stopped contending long enough for the decision to be forgotten
    /// ([`together::FORGET_AFTER`]), whether a poll came since or not.
    pub fn lease_mode(&self, now: Nanos) -> LeaseMode {
        match LeaseMode::before_trials(self.slots, self.demand_gated) {
            LeaseMode::Together if self.taking_turns(now) && !self.trials.lapsed(now) => {
                LeaseMode::Turns
            }
            mode => mode,
        }
    }

    /// A process's demand estimate (`None` for a session the scheduler has not seen).
    pub fn demand(&self, session: SessionId) -> Option<f64> {
        self.demand.get(session)
    }

    /// The demand estimates of `client`'s processes that hold or wait for a lease, added up
    /// (1.0: work that keeps the whole GPU busy); 0 where leases do not overlap by demand, as
    /// the estimates decide nothing there.
    pub fn client_demand(&self, client: ClientId) -> f64 {
        if !self.demand_gated {
            return 0.0;
        }
        let holding = self
            .holders
            .iter()
            .filter(|h| h.client == client)
            .map(|h| h.session);
        let waiting = self
            .clients
            .get(&client)
            .into_iter()
            .flat_map(|c| c.waiting.iter().copied());
        let sessions: BTreeSet<SessionId> = holding.chain(waiting).collect();
        // from 0.0: an empty `sum` of floats is -0.0
        sessions
            .into_iter()
            .filter_map(|s| self.demand.get(s))
            .fold(0.0, |sum, d| sum + d)
    }

    /// Ends the leases that ran out and picks the next holder: an interactive client at once
    /// (revoking the batch leases that run), else, while a slot is free and demand allows, the
    /// waiting client furthest behind. Returns one grant to send, if any; call again until it
    /// returns `None`, then send [`Scheduler::take_revoked`] and [`Scheduler::take_joined`].
    pub fn poll(&mut self, now: Nanos) -> Option<Grant> {
        self.settle(now);
        self.bound_leads(now);
        if self.demand_gated {
            // Trials run where heavy processes may overlap whatever their demands: every
            // process weighs the same, or nearly. Where weights differ more, heavy processes
            // take turns by demand already, and a trial of turns would only keep the light ones
            // (an inference client) waiting.
            let active = self.active_batch().count();
            let contending = if active >= 2 && self.weights_leave_turns_open() {
                active
            } else {
                0
            };
            self.trials.tick(now, contending, self.quantum);
        }
        let (over, running): (Vec<Lease>, Vec<Lease>) = self
            .holders
            .iter()
            .partition(|h| now >= self.taken_back_at(h));
        self.holders = running;
        for h in over {
            // Taken back: charged to its end and grace; its process was busy all along.
            self.drains.taken_back(h.session, h.end);
            self.end_lease(h, Nanos::MAX, now);
        }
        self.prune_usage(now);
        let quantum_credit = self.quantum_credit();
        // batch clients that wait, in line: furthest behind (smallest virtual time) first
        let mut line: Vec<(f64, ClientId)> = Vec::new();
        let mut urgent: Option<(f64, ClientId)> = None;
        let mut interactive: Vec<(f64, ClientId)> = Vec::new();
        // The virtual clock follows the clients that wait or hold a lease: a holder's virtual
        // time counts, or one that renews (released, not yet waiting again) would be moved up
        // to the waiting ones' and lose the lead its request gives it.
        let mut min_active = f64::INFINITY;
        for h in &self.holders {
            if let Some(c) = self.clients.get(&h.client) {
                min_active = min_active.min(c.vtime);
            }
        }
        let renewing = self.renewing(now);
        for &(_, vtime, _) in &renewing {
            min_active = min_active.min(vtime);
        }
        let pending: BTreeMap<ClientId, f64> = self
            .clients
            .keys()
            .map(|&id| (id, self.pending(id)))
            .collect();
        for (&id, c) in self.clients.iter_mut() {
            if c.waiting.is_empty() {
                continue;
            }
            min_active = min_active.min(c.vtime);
            let pending = pending.get(&id).copied().unwrap_or(0.0);
            c.refill(now, quantum_credit, pending);
            if c.credit - pending <= 0.0 {
                continue;
            }
            if !c.shares.interactive {
                line.push((c.vtime, id));
            } else {
                interactive.push((c.vtime, id));
            }
        }
        // An interactive client goes at once while it is not ahead of its due share by more
        // than a lease: its virtual time within one quantum (at its weight) of the batch
        // clients' mean (weighted as they are; EEVDF's eligibility). One that takes more than
        // its share waits in line as any other, so that no latency class can starve the batch
        // clients. Against the batch client furthest behind, one that could not use its share
        // (50 us kernels synchronizing after each, beside 57 ms ones) kept an inference client
        // using less than its due share at the edge: it waited in line behind whole 57 ms
        // kernels every 130 ms.
        // Against batch clients that are all held by their limits, whose virtual times fall
        // behind for good ([`lead`]), an interactive client goes at once while its USED is
        // below its weight's part (among the interactive clients) of what their limits leave.
        // Against their virtual times, an inference client of request 0.02 using 0.07 beside
        // a client held at 0.73 ran ahead of it, and its requests waited in line behind 56 ms
        // kernels (GPU soak seed 44: p99 63-68 ms, time-sliced 4-8).
        // what their limits leave, per unit of the interactive clients' weight
        let mut limits_leave: Option<f64> = None;
        let batch_mean = if interactive.is_empty() {
            f64::INFINITY
        } else {
            let batch: BTreeSet<ClientId> = self
                .holders
                .iter()
                .map(|h| h.client)
                .chain(line.iter().map(|&(_, id)| id))
                .filter(|id| self.clients.get(id).is_some_and(|c| !c.shares.interactive))
                .collect();
            // not those held by their limits, whose virtual times fall behind for good ([`lead`])
            let held = self.held_by_limits(batch.iter().copied());
            if !batch.is_empty() && held.len() == batch.len() {
                let limits: f64 = held
                    .iter()
                    .filter_map(|id| self.clients.get(id))
                    .map(|c| c.shares.limit)
                    .sum();
                let weights: f64 = interactive
                    .iter()
                    .filter_map(|(_, id)| self.clients.get(id))
                    .map(|c| c.weight())
                    .sum();
                limits_leave = Some((1.0 - limits).max(0.0) / weights.max(MIN_WEIGHT));
                f64::INFINITY
            } else {
                self.mean_vtime((&batch - &held).iter())
                    .unwrap_or(f64::INFINITY)
            }
        };
        // Nor while a batch client running or in line is owed ([`guarantee`]) and the
        // interactive client has spent what its request gave it over the burst window: batch
        // loops that leave the GPU for their host after every step are lifted to the virtual
        // clock at each return, and the clock followed the interactive client's time while it
        // alone was active, so that it was never ahead of them. Two inference loops of a
        // client of request 0.1 then took 0.29 of the GPU beside two such loops of requests
        // 0.36 and 0.4, which got 0.26 and 0.36 of a due 0.42 and 0.47 (the simulation's
        // host-bound mix 19), as under time-slicing.
        let batch_owed = !interactive.is_empty()
            && self
                .holders
                .iter()
                .map(|h| h.client)
                .chain(line.iter().map(|&(_, id)| id))
                .any(|id| self.owed(id, now));
        for (vtime, id) in interactive {
            let weight = self.clients.get(&id).map_or(MIN_WEIGHT, |c| c.weight());
            let eligible = match limits_leave {
                Some(per_weight) => self.recent_share(id, now).unwrap_or(0.0) < per_weight * weight,
                None => vtime <= batch_mean + self.quantum as f64 / weight,
            } && !(batch_owed && self.spent_its_request(id, now));
            if eligible {
                if urgent.is_none_or(|(v, _)| vtime < v) {
                    urgent = Some((vtime, id));
                }
            } else {
                line.push((vtime, id));
            }
        }
        // owed clients first ([`guarantee`]), then furthest behind; stable: equal virtual
        // times keep the clients' order
        let owed: BTreeSet<ClientId> = line
            .iter()
            .map(|&(_, id)| id)
            .filter(|&id| self.owed(id, now))
            .collect();
        line.sort_by(|a, b| {
            owed.contains(&b.1)
                .cmp(&owed.contains(&a.1))
                .then(a.0.total_cmp(&b.0))
        });
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
            self.revoke_batch(now);
            return self.grant(id, now, false, "interactive");
        }
        let &(_, mut id) = line.first()?;
        if self.holders.len() >= self.slots {
            self.preempt_for(id, now);
            return None;
        }
        let mut why = if owed.contains(&id) {
            "owed"
        } else {
            "first in line"
        };
        // The leases were ended for a probe: it goes next, ahead of those who were behind it
        // when it came first and whose leases ended for it, while it is still due one.
        if let Some((client, session)) = self.probe_next {
            let still = self
                .clients
                .get(&client)
                .is_some_and(|c| c.waiting.front() == Some(&session) && c.credit > 0.0)
                && self.probe_now(session);
            if still {
                id = client;
                why = "probe after drain";
            } else {
                self.probe_next = None;
            }
        } else if let Some(overdue) = self.overdue_probe(&line, now) {
            id = overdue;
            why = "overdue probe";
        } else if self.leaves_the_gap(id, &renewing, now) {
            return None;
        }
        let mut probe = false;
        if self.demand_gated {
            let next = *self.clients.get(&id)?.waiting.front()?;
            probe = self.probe_now(next);
            if !self.holders.is_empty() {
                if self.holders.iter().any(|h| h.probe) {
                    // nothing starts beside a probe (nor does another probe cut it short)
                    return None;
                }
                if probe && self.other_batch_lease(next) {
                    // A probe waits for the GPU to itself (an interactive client's leases
                    // aside), and nothing starts meanwhile: the batch leases running end at
                    // their holders' next launch, so that everyone waits for their drained
                    // queues, not for the rest of their leases.
                    self.revoke_batch(now);
                    self.probe_next = Some((id, next));
                    return None;
                }
                if !probe {
                    if self.holders.iter().any(|h| h.revoked) {
                        // nothing starts while leases drain for a probe or an interactive client
                        return None;
                    }
                    if !self.fair_beside(id, next, now) {
                        if self.preempt_for(id, now) {
                            return None;
                        }
                        return self.backfill(&line, id, next, now);
                    }
                }
            }
        }
        if probe {
            self.probe_next = None;
        }
        // the first in line starts: what started ahead of it need leave no more room
        for h in &mut self.holders {
            h.backfilled = false;
        }
        self.grant(id, now, probe, why)
    }

    /// Ends the running batch leases at their holders' next launch (they are told through
    /// [`Scheduler::take_revoked`]); an interactive client's lease runs on, and so does a probe
    /// (a quarter quantum with a short queue): cut short, it measured nothing and stayed due.
    fn revoke_batch(&mut self, now: Nanos) {
        for h in &mut self.holders {
            let interactive = self
                .clients
                .get(&h.client)
                .is_some_and(|c| c.shares.interactive);
            if !h.revoked && !interactive && !h.probe {
                tracing::debug!(client = h.client, session = h.session, "revoke");
                h.revoked = true;
                h.end = h.end.min(now);
                self.revoked.push(h.session);
            }
        }
    }

    /// A lease for the next waiting session of client `id`; a `probe` lasts a quarter quantum.
    fn grant(&mut self, id: ClientId, now: Nanos, probe: bool, why: &str) -> Option<Grant> {
        let lease_ns = if probe {
            (self.quantum / 4).max(1)
        } else {
            self.quantum
        };
        let c = self.clients.get_mut(&id)?;
        let session = c.waiting.pop_front()?;
        self.woken.remove(&session);
        c.grants += 1;
        let book = self.books.entry(session).or_default();
        book.granted();
        c.waited_total += book.end_wait(now);
        let shared = self.demand_gated && !self.holders.is_empty();
        // An interactive lease, short and light, leaves the batch leases it joins alone for
        // measuring demands (their hooks are told it joined all the same: their queues wait
        // for its work); a batch lease is alone beside interactive ones.
        let joiner_interactive = self.interactive(id);
        let alone = if joiner_interactive {
            self.holders.is_empty()
        } else {
            !self.batch_lease_runs()
        };
        for h in &mut self.holders {
            if h.alone && self.demand_gated {
                self.joined.push(h.session);
            }
            if !joiner_interactive {
                h.alone = false;
            }
        }
        let tight = self.tight_for(id, now);
        tracing::debug!(
            client = id,
            session,
            why,
            probe,
            alone,
            beside = self.holders.len(),
            demand = self.demand.get(session),
            lease_ms = lease_ns as f64 / 1e6,
            vtime = self.clients.get(&id).map_or(0.0, |c| c.vtime),
            "grant"
        );
        let contended = self.others_wait(session);
        self.lease_log.started(session, now);
        self.holders.push(Lease {
            session,
            client: id,
            start: now,
            end: now + lease_ns,
            length: lease_ns,
            owed: 0.0,
            used: 0.0,
            crowded: false,
            beside_batch: false,
            interactive_work: 0.0,
            revoked: false,
            alone,
            probe,
            backfilled: false,
            contended,
            launches: 0,
            active: 0,
            extended: false,
            earlier: None,
        });
        Some(Grant {
            session,
            client: id,
            lease_ns,
            shared,
            tight,
            contended,
        })
    }

    /// When `poll` next has something to do, if nothing else happens before (call it after
    /// `poll` returned `None`).
    pub fn next_wakeup(&self, now: Nanos) -> Option<Nanos> {
        let mut earliest: Option<Nanos> = self.holders.iter().map(|h| self.taken_back_at(h)).min();
        if self.clients.values().any(|c| !c.waiting.is_empty()) {
            // a gap left to a renewing client ends ([`Scheduler::leaves_the_gap`])
            for (_, _, end) in self.renewing(now) {
                let at = end + RETURN_GAP;
                if at > now {
                    earliest = Some(earliest.map_or(at, |e| e.min(at)));
                }
            }
        }
        for (&id, c) in self.clients.iter().filter(|(_, c)| !c.waiting.is_empty()) {
            // a client out of credit can go again once it has some
            let credit = c.available(now, self.quantum_credit(), self.pending(id));
            if credit <= 0.0 {
                let at = now + ((-credit / c.shares.limit).ceil() as Nanos).max(1);
                earliest = Some(earliest.map_or(at, |e| e.min(at)));
            }
        }
        earliest
    }

    /// When lease `h` is taken back unless released: its end and its process's grace.
    fn taken_back_at(&self, h: &Lease) -> Nanos {
        h.end + self.drains.grace(h.session)
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
mod tests;
