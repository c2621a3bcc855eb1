//! One [`Scheduler`] per GPU: each device has a token of its own, so a process waiting for one
//! GPU never waits behind a lease on another.
//!
//! A device's scheduler is made when a request first names the device, with the settings
//! (quantum, grace, slots) and every client's shares as they stand then; later changes of them
//! apply to every device. Each device weighs its clients by their requests and holds them to
//! their limits on its own: a client's request and limit apply on each GPU it uses, and what it
//! is charged on one GPU never moves its turn on another.

use std::collections::BTreeMap;

use super::{ClientId, Grant, LeaseMode, Nanos, Scheduler, SessionId, SessionUsage, Shares, Usage};
use crate::protocol::DeviceId;

#[derive(Debug)]
pub struct Schedulers {
    quantum: Nanos,
    grace: Nanos,
    burst_window: Nanos,
    slots: usize,
    demand_gated: bool,
    /// Every client with its shares, for the devices made later.
    clients: BTreeMap<ClientId, Shares>,
    /// Fair-share factors other than 1, for the devices made later.
    fair_factors: BTreeMap<ClientId, f64>,
    devices: BTreeMap<DeviceId, Scheduler>,
}

impl Schedulers {
    pub fn new(quantum: Nanos) -> Self {
        Schedulers {
            quantum: quantum.max(1),
            grace: 0,
            burst_window: super::guarantee::WINDOW,
            slots: 1,
            demand_gated: false,
            clients: BTreeMap::new(),
            fair_factors: BTreeMap::new(),
            devices: BTreeMap::new(),
        }
    }

    pub fn quantum(&self) -> Nanos {
        self.quantum
    }

    pub fn set_quantum(&mut self, quantum: Nanos) {
        self.quantum = quantum.max(1);
        for s in self.devices.values_mut() {
            s.set_quantum(quantum);
        }
    }

    pub fn set_grace(&mut self, grace: Nanos) {
        self.grace = grace;
        for s in self.devices.values_mut() {
            s.set_grace(grace);
        }
    }

    /// As [`Scheduler::set_burst_window`], on every device.
    pub fn set_burst_window(&mut self, window: Nanos) {
        self.burst_window = window;
        for s in self.devices.values_mut() {
            s.set_burst_window(window);
        }
    }

    /// As [`Scheduler::set_slots`], on every device.
    pub fn set_slots(&mut self, slots: usize, demand_gated: bool) {
        self.slots = slots;
        self.demand_gated = demand_gated;
        for s in self.devices.values_mut() {
            s.set_slots(slots, demand_gated);
        }
    }

    /// Adds a client or changes its shares, on every device.
    pub fn set_client(&mut self, id: ClientId, shares: Shares, now: Nanos) {
        self.clients.insert(id, shares);
        for s in self.devices.values_mut() {
            s.set_client(id, shares, now);
        }
    }

    /// As [`Scheduler::set_fair_factor`], on every device.
    pub fn set_fair_factor(&mut self, id: ClientId, factor: f64) {
        if !self.clients.contains_key(&id) {
            return;
        }
        if factor == 1.0 {
            self.fair_factors.remove(&id);
        } else {
            self.fair_factors.insert(id, factor);
        }
        for s in self.devices.values_mut() {
            s.set_fair_factor(id, factor);
        }
    }

    /// Forgets a client on every device; its waiting sessions are dropped and its leases end.
    pub fn remove_client(&mut self, id: ClientId, now: Nanos) {
        self.clients.remove(&id);
        self.fair_factors.remove(&id);
        for s in self.devices.values_mut() {
            s.remove_client(id, now);
        }
    }

    pub fn has_client(&self, id: ClientId) -> bool {
        self.clients.contains_key(&id)
    }

    /// The scheduler of `device`, made now if no request named it before.
    fn device(&mut self, device: DeviceId, now: Nanos) -> &mut Scheduler {
        let (quantum, grace, window, slots, gated) = (
            self.quantum,
            self.grace,
            self.burst_window,
            self.slots,
            self.demand_gated,
        );
        let (clients, factors) = (&self.clients, &self.fair_factors);
        self.devices.entry(device).or_insert_with(|| {
            let mut s = Scheduler::new(quantum, now);
            s.set_grace(grace);
            s.set_burst_window(window);
            s.set_slots(slots, gated);
            for (&id, &shares) in clients {
                s.set_client(id, shares, now);
            }
            for (&id, &factor) in factors {
                s.set_fair_factor(id, factor);
            }
            s
        })
    }

    /// The devices named so far.
    pub fn devices(&self) -> impl Iterator<Item = DeviceId> + '_ {
        self.devices.keys().copied()
    }

    /// `session` of `client` asks for the token of `device`.
    pub fn acquire(&mut self, device: DeviceId, client: ClientId, session: SessionId, now: Nanos) {
        self.device(device, now).acquire(client, session, now);
    }

    /// `session` gives the token of `device` back (see [`Scheduler::release`]).
    pub fn release(&mut self, device: DeviceId, session: SessionId, busy_ns: Nanos, now: Nanos) {
        if let Some(s) = self.devices.get_mut(&device) {
            s.release(session, busy_ns, now);
        }
    }

    /// `session` launched `launches` kernels on `device` since its last report
    /// ([`Scheduler::launched`]).
    pub fn launched(&mut self, device: DeviceId, session: SessionId, launches: u64, now: Nanos) {
        if let Some(s) = self.devices.get_mut(&device) {
            s.launched(session, launches, now);
        }
    }

    /// `session` spent `active_ns` in its GPU phases on `device` since its last report
    /// ([`Scheduler::was_active`]).
    pub fn was_active(&mut self, device: DeviceId, session: SessionId, active_ns: Nanos) {
        if let Some(s) = self.devices.get_mut(&device) {
            s.was_active(session, active_ns);
        }
    }

    /// How the batch leases of `device` run now ([`Scheduler::mode`]).
    pub fn mode(&self, device: DeviceId) -> Option<super::Mode> {
        self.devices.get(&device).map(Scheduler::mode)
    }

    /// How leases run on `device` at `now` ([`Scheduler::lease_mode`]); on a device no request
    /// named yet, as they would start there.
    pub fn lease_mode(&self, device: DeviceId, now: Nanos) -> LeaseMode {
        match self.devices.get(&device) {
            Some(s) => s.lease_mode(now),
            None => self.starting_lease_mode(),
        }
    }

    /// How leases start on a device: with the slots and overlap set, before any trial.
    pub fn starting_lease_mode(&self) -> LeaseMode {
        LeaseMode::before_trials(self.slots, self.demand_gated)
    }

    /// Another lease on `device` at once, as [`Scheduler::extend`].
    pub fn extend(&mut self, device: DeviceId, session: SessionId, now: Nanos) -> Option<Grant> {
        self.devices.get_mut(&device)?.extend(session, now)
    }

    /// A session closed: it stops waiting and loses its leases, on every device.
    pub fn session_gone(&mut self, session: SessionId, now: Nanos) {
        for s in self.devices.values_mut() {
            s.session_gone(session, now);
        }
    }

    /// What `session` got and waited so far, over all devices.
    pub fn session_usage(&self, session: SessionId, now: Nanos) -> SessionUsage {
        self.devices
            .values()
            .map(|s| s.session_usage(session, now))
            .fold(SessionUsage::default(), add_session_usage)
    }

    /// The final [`SessionUsage`] of a session that is gone, over all devices, forgotten by them.
    pub fn take_session_usage(&mut self, session: SessionId, now: Nanos) -> SessionUsage {
        self.devices
            .values_mut()
            .map(|s| s.take_session_usage(session, now))
            .fold(SessionUsage::default(), add_session_usage)
    }

    /// The sessions whose leases were revoked since the last call, with the device of each
    /// lease, each pair once.
    pub fn take_revoked(&mut self) -> Vec<(DeviceId, SessionId)> {
        self.take_from_all(Scheduler::take_revoked)
    }

    /// The sessions whose leases alone others joined since the last call, with the device of
    /// each lease ([`Scheduler::take_joined`]), each pair once.
    pub fn take_joined(&mut self) -> Vec<(DeviceId, SessionId)> {
        self.take_from_all(Scheduler::take_joined)
    }

    /// The sessions whose leases, granted while nobody waited, another process started waiting
    /// for since the last call, with the device of each lease ([`Scheduler::take_contended`]),
    /// each pair once.
    pub fn take_contended(&mut self) -> Vec<(DeviceId, SessionId)> {
        self.take_from_all(Scheduler::take_contended)
    }

    /// What `take` takes from every device's scheduler, each (device, session) once.
    fn take_from_all(
        &mut self,
        take: fn(&mut Scheduler) -> Vec<SessionId>,
    ) -> Vec<(DeviceId, SessionId)> {
        let mut all: Vec<(DeviceId, SessionId)> = self
            .devices
            .iter_mut()
            .flat_map(|(&d, s)| take(s).into_iter().map(move |session| (d, session)))
            .collect();
        all.sort_unstable();
        all.dedup();
        all
    }

    /// `session` stops waiting for the token of `device` and loses its lease there (its lane
    /// closed); its other devices are left as they are.
    pub fn session_gone_on(&mut self, device: DeviceId, session: SessionId, now: Nanos) {
        if let Some(s) = self.devices.get_mut(&device) {
            s.session_gone(session, now);
        }
    }

    /// A process's demand estimate on `device`.
    pub fn demand(&self, device: DeviceId, session: SessionId) -> Option<f64> {
        self.devices.get(&device)?.demand(session)
    }

    /// Ends the leases that ran out and picks the next holders, device by device: one grant to
    /// send with its device, if any; call again until it returns `None`, then send
    /// [`Schedulers::take_revoked`] and [`Schedulers::take_joined`].
    pub fn poll(&mut self, now: Nanos) -> Option<(DeviceId, Grant)> {
        self.devices
            .iter_mut()
            .find_map(|(&d, s)| s.poll(now).map(|g| (d, g)))
    }

    /// When `poll` next has something to do on any device, if nothing else happens before.
    pub fn next_wakeup(&self, now: Nanos) -> Option<Nanos> {
        self.devices
            .values()
            .filter_map(|s| s.next_wakeup(now))
            .min()
    }

    /// The last moment `session` held a lease on any device (see [`Scheduler::last_held`]).
    pub fn last_held(&self, session: SessionId, now: Nanos) -> Option<Nanos> {
        self.devices
            .values()
            .filter_map(|s| s.last_held(session, now))
            .max()
    }

    /// The first running lease on `device`.
    pub fn holder(&self, device: DeviceId) -> Option<(ClientId, SessionId)> {
        self.devices.get(&device)?.holder()
    }

    /// How many leases run on `device`.
    pub fn holder_count(&self, device: DeviceId) -> usize {
        self.devices.get(&device).map_or(0, Scheduler::holder_count)
    }

    /// A client's figures added up over the devices: shares of each GPU's time summed (1.0 is
    /// one GPU's worth), totals added, holding on any. `None` for an unknown client.
    pub fn usage(&self, id: ClientId, now: Nanos) -> Option<Usage> {
        if !self.clients.contains_key(&id) {
            return None;
        }
        let zero = Usage {
            share: 0.0,
            charged_total: 0,
            gpu_total: 0,
            grants: 0,
            waited_total: 0,
            waiting: 0,
            holding: false,
            demand: 0.0,
        };
        Some(
            self.devices
                .values()
                .filter_map(|s| s.usage(id, now))
                .fold(zero, |a, u| Usage {
                    share: a.share + u.share,
                    charged_total: a.charged_total + u.charged_total,
                    gpu_total: a.gpu_total + u.gpu_total,
                    grants: a.grants + u.grants,
                    waited_total: a.waited_total + u.waited_total,
                    waiting: a.waiting + u.waiting,
                    holding: a.holding || u.holding,
                    demand: a.demand + u.demand,
                }),
        )
    }

    /// A client's figures on each device named so far.
    pub fn device_usage(&self, id: ClientId, now: Nanos) -> Vec<(DeviceId, Usage)> {
        self.devices
            .iter()
            .filter_map(|(&d, s)| Some((d, s.usage(id, now)?)))
            .collect()
    }
}

fn add_session_usage(a: SessionUsage, b: SessionUsage) -> SessionUsage {
    SessionUsage {
        charged: a.charged + b.charged,
        grants: a.grants + b.grants,
        waited: a.waited + b.waited,
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{shares, LIVE, MS};
    use super::*;

    const GPU0: DeviceId = DeviceId([0; 16]);
    const GPU1: DeviceId = DeviceId([1; 16]);

    fn two_clients() -> Schedulers {
        let mut s = Schedulers::new(20 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(2, shares(0.5, 1.0), 0);
        s
    }

    /// Every grant `poll` has to give at `now`.
    fn grants(s: &mut Schedulers, now: Nanos) -> Vec<(DeviceId, SessionId)> {
        std::iter::from_fn(|| s.poll(now))
            .map(|(d, g)| (d, g.session))
            .collect()
    }

    #[test]
    fn sessions_on_two_devices_hold_leases_at_once() {
        let mut s = two_clients();
        s.acquire(GPU0, 1, 10, 0);
        s.acquire(GPU1, 2, 20, 0);
        assert_eq!(grants(&mut s, 0), vec![(GPU0, 10), (GPU1, 20)]);
        assert_eq!(s.holder(GPU0), Some((1, 10)));
        assert_eq!(s.holder(GPU1), Some((2, 20)));
        // on one device the same two take turns
        let mut one = two_clients();
        one.acquire(GPU0, 1, 10, 0);
        one.acquire(GPU0, 2, 20, 0);
        assert_eq!(grants(&mut one, 0), vec![(GPU0, 10)]);
        one.release(GPU0, 10, 0, 5 * MS);
        assert_eq!(grants(&mut one, 5 * MS), vec![(GPU0, 20)]);
    }

    #[test]
    fn a_device_named_later_knows_every_client_and_setting() {
        let mut s = Schedulers::new(20 * MS);
        s.set_client(1, shares(0.05, 0.05), 0);
        s.set_quantum(10 * MS);
        s.set_grace(2 * MS);
        // the device is made at 50 ms, with client 1's shares as they are then
        s.acquire(GPU1, 1, 10, 50 * MS);
        let (d, g) = s.poll(50 * MS).unwrap();
        assert_eq!((d, g.session, g.lease_ns), (GPU1, 10, 10 * MS));
        assert!(s.usage(1, 50 * MS).unwrap().holding);
        // its lease is taken back after the quantum and the grace, charged 12 ms; its limit
        // then keeps it waiting while the GPU is idle
        s.acquire(GPU1, 1, 10, 55 * MS);
        assert_eq!(s.poll(62 * MS), None);
        assert_eq!(s.holder_count(GPU1), 0);
        let again = s.next_wakeup(62 * MS).unwrap();
        assert!(again > 62 * MS + 20 * MS, "limited client back at {again}");
        // changed shares reach the device too: without a limit it goes again much sooner
        s.set_client(1, shares(0.2, 1.0), 63 * MS);
        assert!(s.poll(65 * MS).is_some());
        // an unknown client is ignored on a new device as on the others
        s.acquire(GPU0, 9, 90, 66 * MS);
        assert_eq!(s.poll(66 * MS), None);
        assert!(s.usage(9, 66 * MS).is_none());
    }

    #[test]
    fn fair_share_factors_reach_every_device_made_before_or_after() {
        let mut s = two_clients();
        s.acquire(GPU0, 1, 10, 0);
        s.set_fair_factor(2, 0.25);
        s.set_fair_factor(9, 0.5); // unknown: ignored
        assert!(!s.fair_factors.contains_key(&9));
        s.acquire(GPU1, 1, 11, 0);
        for d in [GPU0, GPU1] {
            let sched = &s.devices[&d];
            assert_eq!(sched.clients[&2].fair_factor, 0.25, "{d:?}");
            assert_eq!(sched.clients[&1].fair_factor, 1.0, "{d:?}");
        }
        s.set_fair_factor(2, 1.0);
        assert!(s.fair_factors.is_empty());
        assert_eq!(s.devices[&GPU1].clients[&2].fair_factor, 1.0);
    }

    #[test]
    fn a_session_gone_frees_its_leases_on_every_device() {
        let mut s = two_clients();
        s.acquire(GPU0, 1, 10, 0);
        s.acquire(GPU1, 1, 10, 0);
        assert_eq!(grants(&mut s, 0).len(), 2);
        s.acquire(GPU0, 2, 20, MS);
        s.acquire(GPU1, 2, 21, MS);
        assert!(grants(&mut s, MS).is_empty());
        assert_eq!(s.last_held(10, 3 * MS), Some(3 * MS));
        s.session_gone(10, 4 * MS);
        assert_eq!(grants(&mut s, 4 * MS), vec![(GPU0, 20), (GPU1, 21)]);
        assert_eq!(s.last_held(10, 10 * MS), None, "forgotten with its session");
        let gone = s.take_session_usage(10, 10 * MS);
        assert_eq!((gone.grants, gone.charged), (2, 8 * MS));
        assert_eq!(s.take_session_usage(10, 10 * MS), SessionUsage::default());
    }

    #[test]
    fn charges_on_one_device_leave_the_turns_on_another_alone() {
        let mut s = two_clients();
        // client 1 runs long leases on GPU 1 alone
        let mut t = 0;
        for _ in 0..10 {
            s.acquire(GPU1, 1, 11, t);
            assert_eq!(grants(&mut s, t), vec![(GPU1, 11)]);
            t += 20 * MS;
            s.release(GPU1, 11, 20 * MS, t);
        }
        // on GPU 0 it still gets its half: it is not behind client 2 there
        s.acquire(GPU0, 1, 10, t);
        s.acquire(GPU0, 2, 20, t);
        let mut order = vec![];
        for _ in 0..8 {
            let (d, g) = s.poll(t).unwrap();
            assert_eq!(d, GPU0);
            order.push(g.client);
            t += 20 * MS;
            s.release(GPU0, g.session, 20 * MS, t);
            s.acquire(GPU0, g.client, g.session, t);
        }
        let ones = order.iter().filter(|&&c| c == 1).count();
        assert_eq!(ones, 4, "leases on GPU 0: {order:?}");
        // its usage adds up over the devices, and is kept per device
        let total = s.usage(1, t).unwrap();
        assert_eq!(total.grants, 14);
        assert_eq!(total.charged_total, 14 * 20 * MS);
        let per: BTreeMap<DeviceId, u64> = s
            .device_usage(1, t)
            .into_iter()
            .map(|(d, u)| (d, u.grants))
            .collect();
        assert_eq!(per, BTreeMap::from([(GPU0, 4), (GPU1, 10)]));
    }

    #[test]
    fn revocations_are_told_once_and_wakeups_are_the_earliest() {
        let mut s = Schedulers::new(20 * MS);
        s.set_client(1, shares(0.5, 1.0), 0);
        s.set_client(2, LIVE, 0);
        // session 10 holds a lease on both devices; an interactive client takes both
        s.acquire(GPU0, 1, 10, 0);
        assert_eq!(grants(&mut s, 0), vec![(GPU0, 10)]);
        s.acquire(GPU1, 1, 10, 5 * MS);
        assert_eq!(grants(&mut s, 5 * MS), vec![(GPU1, 10)]);
        assert_eq!(
            s.next_wakeup(5 * MS),
            Some(20 * MS),
            "GPU 0's lease ends first"
        );
        s.acquire(GPU0, 2, 20, 6 * MS);
        s.acquire(GPU1, 2, 21, 6 * MS);
        assert_eq!(grants(&mut s, 6 * MS).len(), 2);
        // each lease is told of on its own: the process holds each GPU's lease on its own
        assert_eq!(s.take_revoked(), vec![(GPU0, 10), (GPU1, 10)]);
        assert!(s.take_revoked().is_empty());
    }

    /// A device no request named yet reports the mode leases would start in there, and follows
    /// later changes of the slots as the devices made do.
    #[test]
    fn the_lease_mode_of_a_device_comes_from_the_slots_until_trials_run_there() {
        let mut s = two_clients();
        assert_eq!(s.lease_mode(GPU1, 0), LeaseMode::OneAtATime);
        s.set_slots(usize::MAX, true);
        s.acquire(GPU0, 1, 10, 0);
        assert_eq!(s.lease_mode(GPU0, 0), LeaseMode::Together);
        assert_eq!(s.lease_mode(GPU1, 0), LeaseMode::Together);
        s.set_slots(usize::MAX, false);
        assert_eq!(s.lease_mode(GPU0, 0), LeaseMode::Concurrent);
        assert_eq!(s.lease_mode(GPU1, 0), LeaseMode::Concurrent);
        assert_eq!(s.starting_lease_mode(), LeaseMode::Concurrent);
    }
}
