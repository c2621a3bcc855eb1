//! Who used how much: the daemon's figures sampled from the state, turned into running totals
//! per client and user (what the metrics count) and into increments per hour, user and client
//! (what the accounting store adds up).
//!
//! Pure logic: the caller takes a [`UsageSnapshot`] from the state (holding its lock only for
//! that) and hands it to [`Tally::observe`] with the wall-clock time.

use crate::scheduler::{Nanos, SessionId};
use std::collections::{BTreeMap, HashMap};

/// One attached process's running figures.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionFigures {
    pub session: SessionId,
    pub user: String,
    pub client: String,
    /// GPU time charged to its leases, since it attached.
    pub charged_ns: u64,
    pub grants: u64,
    /// Time it waited for a grant, since it attached.
    pub waited_ns: u64,
    /// Device memory it holds now, on all GPUs together.
    pub reserved: u64,
}

/// A client's shares, for the metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientFigures {
    pub name: String,
    pub request: f64,
    pub limit: f64,
    /// Memory cap in bytes on each GPU, `None` for unlimited.
    pub memory_cap: Option<u64>,
    /// Device memory its processes hold, on all GPUs together.
    pub memory_used: u64,
    /// Its fair-share factor (1 while fair share is off).
    pub fair_share: f64,
}

/// What the state hands out at each sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageSnapshot {
    /// The state's clock (nanoseconds since it started).
    pub now: Nanos,
    /// The processes attached now.
    pub sessions: Vec<SessionFigures>,
    /// Processes gone since the last snapshot: their final figures and when they went.
    pub ended: Vec<(SessionFigures, Nanos)>,
    pub clients: Vec<ClientFigures>,
    /// Config reloads refused since the daemon started.
    pub reload_failures: u64,
    /// The last reload was refused: the daemon runs an older config than the file's.
    pub config_error: bool,
}

/// Usage added up.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    /// GPU time charged.
    pub gpu_ns: u64,
    /// Leases granted.
    pub leases: u64,
    /// Time processes waited for a grant.
    pub wait_ns: u64,
    /// Device memory held over time, in byte-seconds.
    pub memory_byte_seconds: f64,
}

impl Totals {
    pub fn add(&mut self, o: &Totals) {
        self.gpu_ns += o.gpu_ns;
        self.leases += o.leases;
        self.wait_ns += o.wait_ns;
        self.memory_byte_seconds += o.memory_byte_seconds;
    }

    pub fn is_zero(&self) -> bool {
        *self == Totals::default()
    }
}

/// (client, user)
pub type ClientUser = (String, String);

/// (start of the hour in Unix seconds, user, client): the accounting store's key.
pub type HourKey = (i64, String, String);

/// Increments not yet written to the store.
pub type Pending = BTreeMap<HourKey, Totals>;

/// The start of the hour of `unix_secs`.
pub fn hour_of(unix_secs: i64) -> i64 {
    unix_secs.div_euclid(3600) * 3600
}

#[derive(Debug, Default)]
pub struct Tally {
    /// Since the daemon started, per client and user.
    totals: BTreeMap<ClientUser, Totals>,
    /// Not yet written to the store.
    pending: Pending,
    /// Each live process's figures at the last snapshot, and the state's clock then.
    seen: HashMap<SessionId, (SessionFigures, Nanos)>,
    latest: UsageSnapshot,
}

impl Tally {
    /// Adds what happened since the last snapshot; `unix_secs` is the wall-clock time, which
    /// picks the hour the increments go to.
    pub fn observe(&mut self, snap: UsageSnapshot, unix_secs: i64) {
        let hour = hour_of(unix_secs);
        let mut seen = HashMap::with_capacity(snap.sessions.len());
        for s in &snap.sessions {
            let delta = self.delta(s, snap.now);
            self.add(hour, s, &delta);
            seen.insert(s.session, (s.clone(), snap.now));
        }
        for (s, ended_at) in &snap.ended {
            let delta = self.delta(s, (*ended_at).min(snap.now));
            self.add(hour, s, &delta);
        }
        self.seen = seen;
        self.latest = snap;
    }

    /// What `s` added since it was last seen; memory at what it held then, up to `until`.
    fn delta(&self, s: &SessionFigures, until: Nanos) -> Totals {
        let Some((prev, at)) = self.seen.get(&s.session) else {
            return Totals {
                gpu_ns: s.charged_ns,
                leases: s.grants,
                wait_ns: s.waited_ns,
                memory_byte_seconds: 0.0,
            };
        };
        Totals {
            gpu_ns: s.charged_ns.saturating_sub(prev.charged_ns),
            leases: s.grants.saturating_sub(prev.grants),
            wait_ns: s.waited_ns.saturating_sub(prev.waited_ns),
            memory_byte_seconds: prev.reserved as f64 * until.saturating_sub(*at) as f64 / 1e9,
        }
    }

    fn add(&mut self, hour: i64, s: &SessionFigures, delta: &Totals) {
        // every process's client and user show in the totals from the moment it attaches
        self.totals
            .entry((s.client.clone(), s.user.clone()))
            .or_default()
            .add(delta);
        if !delta.is_zero() {
            self.pending
                .entry((hour, s.user.clone(), s.client.clone()))
                .or_default()
                .add(delta);
        }
    }

    /// Running totals per client and user since the daemon started.
    pub fn totals(&self) -> &BTreeMap<ClientUser, Totals> {
        &self.totals
    }

    /// The last snapshot observed.
    pub fn latest(&self) -> &UsageSnapshot {
        &self.latest
    }

    /// The increments to write; they are gone from here until [`Tally::restore`].
    pub fn take_pending(&mut self) -> Pending {
        std::mem::take(&mut self.pending)
    }

    /// Puts back increments that could not be written, to try again later.
    pub fn restore(&mut self, pending: Pending) {
        for (k, v) in pending {
            self.pending.entry(k).or_default().add(&v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Nanos = 1_000_000_000;

    fn fig(
        session: SessionId,
        user: &str,
        client: &str,
        charged_s: u64,
        reserved: u64,
    ) -> SessionFigures {
        SessionFigures {
            session,
            user: user.into(),
            client: client.into(),
            charged_ns: charged_s * S,
            grants: charged_s,
            waited_ns: 2 * charged_s * S,
            reserved,
        }
    }

    fn snap(
        now: Nanos,
        sessions: Vec<SessionFigures>,
        ended: Vec<(SessionFigures, Nanos)>,
    ) -> UsageSnapshot {
        UsageSnapshot {
            now,
            sessions,
            ended,
            ..Default::default()
        }
    }

    #[test]
    fn increments_add_up_per_client_user_and_hour() {
        let mut t = Tally::default();
        let h0 = 7200;
        t.observe(
            snap(0, vec![fig(1, "alice", "train", 0, 1000)], vec![]),
            h0 + 10,
        );
        t.observe(
            snap(
                10 * S,
                vec![
                    fig(1, "alice", "train", 4, 1000),
                    fig(2, "bob", "train", 1, 0),
                ],
                vec![],
            ),
            h0 + 20,
        );
        let alice = t.totals()[&("train".into(), "alice".into())];
        assert_eq!(alice.gpu_ns, 4 * S);
        assert_eq!(alice.leases, 4);
        assert_eq!(alice.wait_ns, 8 * S);
        assert_eq!(alice.memory_byte_seconds, 10_000.0, "1000 bytes for 10 s");
        // the next sample falls in the next hour; alice's process goes halfway through it
        t.observe(
            snap(
                20 * S,
                vec![fig(2, "bob", "train", 3, 0)],
                vec![(fig(1, "alice", "train", 5, 0), 15 * S)],
            ),
            h0 + 3600,
        );
        let alice = t.totals()[&("train".into(), "alice".into())];
        assert_eq!(alice.gpu_ns, 5 * S);
        assert_eq!(alice.memory_byte_seconds, 15_000.0, "up to when it went");
        let pending = t.take_pending();
        let at = |h: i64, u: &str| pending[&(h, u.to_string(), "train".to_string())];
        assert_eq!(at(h0, "alice").gpu_ns, 4 * S);
        assert_eq!(at(h0 + 3600, "alice").gpu_ns, S);
        assert_eq!(at(h0 + 3600, "alice").memory_byte_seconds, 5_000.0);
        assert_eq!(at(h0, "bob").gpu_ns + at(h0 + 3600, "bob").gpu_ns, 3 * S);
        assert!(t.take_pending().is_empty(), "taken");
        t.restore(pending.clone());
        t.restore(pending);
        assert_eq!(
            t.take_pending()[&(h0, "alice".into(), "train".into())].gpu_ns,
            8 * S
        );
    }

    #[test]
    fn a_process_gone_before_it_was_seen_counts_whole() {
        let mut t = Tally::default();
        t.observe(
            snap(S, vec![], vec![(fig(9, "carol", "user.carol", 2, 0), S)]),
            100,
        );
        assert_eq!(
            t.totals()[&("user.carol".into(), "carol".into())].gpu_ns,
            2 * S
        );
        // seen once more nowhere: nothing more is counted
        t.observe(snap(2 * S, vec![], vec![]), 101);
        assert_eq!(
            t.totals()[&("user.carol".into(), "carol".into())].gpu_ns,
            2 * S
        );
        assert_eq!(t.take_pending().len(), 1);
    }

    #[test]
    fn hours_start_on_the_hour() {
        assert_eq!(hour_of(0), 0);
        assert_eq!(hour_of(3599), 0);
        assert_eq!(hour_of(3600), 3600);
        assert_eq!(hour_of(-1), -3600);
    }
}
