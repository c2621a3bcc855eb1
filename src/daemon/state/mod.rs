//! The daemon's state: clients, attached sessions, the schedulers and memory accounts.
//!
//! Everything here is synchronous and quick; callers hold the lock only for a call, never across
//! an `.await`. Replies to sessions leave through each session's channel.
//!
//! Each GPU has its own token and memory accounts: a request, limit and memory cap apply on each
//! GPU the client uses, and a process holds a lease on the GPU it launches on (the requests about
//! leases and memory name the device). The managed memory of oversubscribing clients lives in
//! host memory and is one pool for all GPUs.
//!
//! The attached sessions and the schedulers are here; the clients and the config in
//! [`clients`], the memory accounts in [`memory`], what is reported in [`reports`].

mod clients;
mod fair_share;
mod memory;
mod reports;

use memory::{managed_limit, memory_flags};
use reports::figures;
pub use reports::{ClientDeviceReport, ClientReport};

use super::identity::Identity;
use super::usage::{ClientFigures, SessionFigures, UsageSnapshot};
use crate::config::{
    check_client_name, check_request_sum, Access, ClientSpec, Config, MemoryMode, MpsShare, Share,
};
use crate::gpu::AttachedProcess;
use crate::protocol::{
    DeviceId, ErrorCode, Reply, GRANT_SHARED, GRANT_TIGHT, MAX_DEVICES, MEMORY_OVERSUBSCRIBE,
    MEMORY_RELEASE_CACHE, NO_CAP, SCHED_INTERACTIVE,
};
use crate::scheduler::{ClientId, Grant, Nanos, Schedulers, SessionId, Shares};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Instant;
use tokio::sync::{broadcast, mpsc};

/// Where a client entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// `[clients.NAME]` in the config file.
    Config,
    /// RegisterClient over D-Bus.
    Registered,
    /// Made for a user's processes that attached without a name; gone with its last process.
    Default,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Config => "config",
            Origin::Registered => "registered",
            Origin::Default => "default",
        }
    }
}

#[derive(Debug)]
struct ClientEntry {
    id: ClientId,
    spec: ClientSpec,
    origin: Origin,
    /// Device memory its processes hold, per GPU (no entry: none).
    memory_used: BTreeMap<DeviceId, u64>,
    sessions: BTreeSet<SessionId>,
    /// Its fair-share factor, 1 unless fair share is on ([`State::set_fair_usage`]).
    fair_factor: f64,
}

#[derive(Debug)]
struct Session {
    pid: u32,
    uid: u32,
    user: String,
    client: String,
    /// Device memory it holds, per GPU (no entry: none).
    reserved: BTreeMap<DeviceId, u64>,
    /// The GPUs its requests named, at most [`MAX_DEVICES`].
    devices: BTreeSet<DeviceId>,
    /// The hook serves this session's device allocations as managed memory (fixed at attach).
    managed: bool,
    tx: mpsc::UnboundedSender<Reply>,
    /// The process's watch connection, where revocations go.
    watch: Option<mpsc::UnboundedSender<Reply>>,
}

/// Something other parts (D-Bus signals, logs, sd-notify status) want to hear about.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Attached { client: String, pid: u32, uid: u32 },
    Detached { client: String, pid: u32 },
    Changed { client: String },
    ConfigReloaded { ok: bool, message: String },
}

/// Why a request was refused; each maps to a D-Bus error and a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    UnknownClient(String),
    InvalidArgument(String),
    NotAllowed(String),
}

impl std::fmt::Display for StateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateError::UnknownClient(m)
            | StateError::InvalidArgument(m)
            | StateError::NotAllowed(m) => f.write_str(m),
        }
    }
}

pub struct State {
    pub config: Config,
    pub config_error: Option<String>,
    pub config_path: PathBuf,
    clients: BTreeMap<String, ClientEntry>,
    sessions: BTreeMap<SessionId, Session>,
    sched: Schedulers,
    next_id: u64,
    origin: Instant,
    events: broadcast::Sender<Event>,
    /// `CUDA_MPS_PIPE_DIRECTORY` handed to clients while MPS runs.
    pub mps_pipe_dir: Option<PathBuf>,
    /// Managed memory held by all oversubscribing sessions, and the most they may hold.
    managed_used: u64,
    managed_limit: u64,
    /// Processes gone since the last [`State::usage_snapshot`], with when they went.
    ended: Vec<(SessionFigures, Nanos)>,
    /// Config reloads refused since the daemon started.
    reload_failures: u64,
    /// The clients' decayed GPU time while fair share is on.
    fair_usage: Option<BTreeMap<String, f64>>,
}
impl State {
    pub fn new(config: Config, config_path: PathBuf, events: broadcast::Sender<Event>) -> State {
        let origin = Instant::now();
        let mut sched = Schedulers::new(config.daemon.quantum.as_nanos() as Nanos);
        sched.set_grace(config.daemon.lease_grace.as_nanos() as Nanos);
        sched.set_slots(
            config.daemon.concurrent_leases,
            config.daemon.overlap_by_demand,
        );
        let mut s = State {
            config,
            config_error: None,
            config_path,
            clients: BTreeMap::new(),
            sessions: BTreeMap::new(),
            sched,
            next_id: 1,
            origin,
            events,
            mps_pipe_dir: None,
            managed_used: 0,
            managed_limit: 0,
            ended: Vec::new(),
            reload_failures: 0,
            fair_usage: None,
        };
        s.managed_limit = managed_limit(&s.config);
        let specs: Vec<ClientSpec> = s.config.clients.values().cloned().collect();
        for spec in specs {
            s.insert_client(spec, Origin::Config);
        }
        s
    }

    pub fn now(&self) -> Nanos {
        self.origin.elapsed().as_nanos() as Nanos
    }

    /// The instant a scheduler time stands for.
    pub fn instant_at(&self, t: Nanos) -> Instant {
        self.origin + std::time::Duration::from_nanos(t)
    }

    fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn emit(&self, e: Event) {
        let _ = self.events.send(e);
    }

    fn insert_client(&mut self, spec: ClientSpec, origin: Origin) {
        let id = self.fresh_id();
        let now = self.now();
        self.sched.set_client(id, shares(&spec.share), now);
        self.clients.insert(
            spec.name.clone(),
            ClientEntry {
                id,
                spec,
                origin,
                memory_used: BTreeMap::new(),
                sessions: BTreeSet::new(),
                fair_factor: 1.0,
            },
        );
        self.refresh_fair_factors();
    }

    fn remove_client(&mut self, name: &str) {
        if let Some(c) = self.clients.remove(name) {
            let now = self.now();
            self.sched.remove_client(c.id, now);
            self.refresh_fair_factors();
        }
    }

    // ---- sessions (the socket side) ----

    /// Attaches a process. `requested` is the client name it asked for ("" = its user's default);
    /// `reserved`, the device memory a process re-attaching after a restart already holds on
    /// each GPU, is counted at once on that GPU, even past the client's cap (its next
    /// allocations there then fail). Returns the session id and the Welcome to send.
    pub fn attach(
        &mut self,
        who: &Identity,
        pid: u32,
        requested: &str,
        reserved: &[(DeviceId, u64)],
        tx: mpsc::UnboundedSender<Reply>,
    ) -> Result<(SessionId, Reply), (ErrorCode, String)> {
        let name = if requested.is_empty() {
            let name = format!("user.{}", who.user);
            if !self.clients.contains_key(&name) {
                let share = self.config.defaults_for(&who.user, &who.groups);
                let spec = ClientSpec {
                    name: name.clone(),
                    share,
                    mps: MpsShare::default(),
                    memory_mode: MemoryMode::default(),
                    access: Access {
                        users: vec![who.uid.to_string()],
                        groups: vec![],
                    },
                };
                self.insert_client(spec, Origin::Default);
            }
            name
        } else {
            requested.to_string()
        };
        let Some(entry) = self.clients.get(&name) else {
            return Err((
                ErrorCode::UnknownClient,
                format!("there is no client named {name:?}"),
            ));
        };
        if !who.may_attach(&entry.spec.access) {
            return Err((
                ErrorCode::NotAllowed,
                format!(
                    "user {} (uid {}) may not attach as client {name:?}",
                    who.user, who.uid
                ),
            ));
        }
        let managed = entry.spec.memory_mode.oversubscribe;
        let session = self.fresh_id();
        let welcome = self.welcome(&self.clients[&name].spec, session);
        self.clients
            .get_mut(&name)
            .map(|c| c.sessions.insert(session));
        self.sessions.insert(
            session,
            Session {
                pid,
                uid: who.uid,
                user: who.user.clone(),
                client: name.clone(),
                reserved: BTreeMap::new(),
                devices: BTreeSet::new(),
                managed,
                tx,
                watch: None,
            },
        );
        for &(device, bytes) in reserved {
            // a Hello lists at most MAX_DEVICES GPUs
            if let Some(s) = self.sessions.get_mut(&session) {
                s.devices.insert(device);
            }
            if bytes > 0 {
                self.adopt(session, device, bytes);
            }
        }
        self.emit(Event::Attached {
            client: name,
            pid,
            uid: who.uid,
        });
        Ok((session, welcome))
    }

    fn welcome(&self, spec: &ClientSpec, session: SessionId) -> Reply {
        Reply::Welcome {
            client: spec.name.clone(),
            memory_cap: spec.share.memory.unwrap_or(NO_CAP),
            quantum_ns: self.sched.quantum(),
            mps_pipe_dir: self
                .mps_pipe_dir
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            mps_thread_percentage: spec.mps.thread_percentage.unwrap_or(0),
            mps_pinned_mem_limit: spec.mps.pinned_mem_limit.unwrap_or(0),
            mps_client_priority: spec.mps.priority.level(),
            memory_flags: memory_flags(&spec.memory_mode),
            resident: spec.memory_mode.resident.unwrap_or(NO_CAP),
            session,
            queue_ahead_ns: self.config.daemon.queue_ahead.as_nanos() as u64,
            sched_flags: if spec.share.interactive {
                SCHED_INTERACTIVE
            } else {
                0
            },
        }
    }

    /// Opens the watch connection of `session` for process `pid`: revocations go to `tx`.
    pub fn watch(
        &mut self,
        session: SessionId,
        pid: u32,
        tx: mpsc::UnboundedSender<Reply>,
    ) -> Result<(), String> {
        match self.sessions.get_mut(&session) {
            Some(s) if s.pid == pid => {
                s.watch = Some(tx);
                Ok(())
            }
            _ => Err(format!("process {pid} has no session {session}")),
        }
    }

    /// A session's connection closed: free its leases and memory on every GPU.
    pub fn detach(&mut self, session: SessionId) {
        let now = self.now();
        self.sched.session_gone(session, now);
        self.unreserve_all(session);
        let Some(s) = self.sessions.remove(&session) else {
            return;
        };
        let usage = self.sched.take_session_usage(session, now);
        self.ended.push((figures(session, &s, usage), now));
        let mut remove = false;
        if let Some(c) = self.clients.get_mut(&s.client) {
            c.sessions.remove(&session);
            remove = c.origin == Origin::Default && c.sessions.is_empty();
        }
        if remove {
            self.remove_client(&s.client);
        }
        self.emit(Event::Detached {
            client: s.client,
            pid: s.pid,
        });
        self.dispatch();
    }

    fn client_of(&self, session: SessionId) -> Option<ClientId> {
        let s = self.sessions.get(&session)?;
        self.clients.get(&s.client).map(|c| c.id)
    }

    /// Notes that a request of `session` named `device`. A process may name at most
    /// [`MAX_DEVICES`] GPUs, so that what one process makes the daemon keep stays bounded; the
    /// error says why its connection is closed.
    pub fn use_device(&mut self, session: SessionId, device: DeviceId) -> Result<(), String> {
        let Some(s) = self.sessions.get_mut(&session) else {
            return Ok(());
        };
        if s.devices.contains(&device) {
            return Ok(());
        }
        if s.devices.len() >= MAX_DEVICES {
            return Err(format!(
                "process {} named more than {MAX_DEVICES} GPUs (the last {device})",
                s.pid
            ));
        }
        s.devices.insert(device);
        Ok(())
    }

    /// `session` asks for the token of `device`.
    pub fn acquire(&mut self, session: SessionId, device: DeviceId) {
        if let Some(client) = self.client_of(session) {
            let now = self.now();
            self.sched.acquire(device, client, session, now);
            self.dispatch();
        }
    }

    /// Another lease on `device` at once for a holder nobody waits behind there (with the tracing
    /// a grant has); `NotExtended` otherwise.
    pub fn extend(&mut self, session: SessionId, device: DeviceId) -> Reply {
        let now = self.now();
        let reply = match self.sched.extend(device, session, now) {
            Some(g) => {
                tracing::trace!(
                    %device,
                    session,
                    holders = self.sched.holder_count(device),
                    shared = g.shared,
                    "extended"
                );
                Reply::Grant {
                    lease_ns: g.lease_ns,
                    flags: grant_flags(&g),
                }
            }
            None => Reply::NotExtended,
        };
        self.dispatch();
        reply
    }

    /// Release and acquire in one step: the session waits in line for `device` before its token
    /// moves on.
    pub fn renew(&mut self, session: SessionId, device: DeviceId, busy_ns: u64) {
        let now = self.now();
        self.sched.release(device, session, busy_ns, now);
        self.acquire(session, device);
    }

    pub fn release(&mut self, session: SessionId, device: DeviceId, busy_ns: u64) {
        let now = self.now();
        self.sched.release(device, session, busy_ns, now);
        self.dispatch();
    }

    /// Ends expired leases and sends the next grants, on every GPU. Returns when it next needs
    /// to run.
    pub fn dispatch(&mut self) -> Option<Nanos> {
        let now = self.now();
        while let Some((device, g)) = self.sched.poll(now) {
            tracing::trace!(
                %device,
                session = g.session,
                lease_ns = g.lease_ns,
                holders = self.sched.holder_count(device),
                demand = self.sched.demand(device, g.session),
                "grant"
            );
            let delivered = self.sessions.get(&g.session).is_some_and(|s| {
                s.tx.send(Reply::Grant {
                    lease_ns: g.lease_ns,
                    flags: grant_flags(&g),
                })
                .is_ok()
            });
            if !delivered {
                // The session is closing: take the token back at once and pick again.
                self.sched.session_gone(g.session, now);
            }
        }
        for session in self.sched.take_revoked() {
            if let Some(tx) = self.sessions.get(&session).and_then(|s| s.watch.as_ref()) {
                let _ = tx.send(Reply::Revoke);
            }
        }
        self.sched.next_wakeup(now)
    }

    /// Each attached process with what its sessions reserved and when one last held a lease.
    ///
    /// `reserved` is what the process holds on all GPUs together, and `last_held` its latest
    /// lease on any of them: the GPU side adds up what NVML counts for the process over the
    /// managed devices and compares the sum with it, so memory on one GPU is never taken for
    /// memory missing on another (the check may miss memory a process holds on one GPU beyond
    /// what it reserved there while it holds less elsewhere; it never reports one that did not).
    pub fn attached_processes(&self) -> Vec<AttachedProcess> {
        let now = self.now();
        let mut by_pid: BTreeMap<u32, AttachedProcess> = BTreeMap::new();
        for (&id, s) in &self.sessions {
            let p = by_pid.entry(s.pid).or_insert_with(|| AttachedProcess {
                uid: s.uid,
                client: s.client.clone(),
                ..AttachedProcess::pid(s.pid)
            });
            p.reserved = p.reserved.saturating_add(s.reserved_total());
            let held = self.sched.last_held(id, now).map(|t| self.instant_at(t));
            p.last_held = p.last_held.max(held);
        }
        by_pid.into_values().collect()
    }

    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    pub fn sessions_of_uid(&self, uid: u32) -> usize {
        self.sessions.values().filter(|s| s.uid == uid).count()
    }
}

impl Session {
    /// Device memory it holds on all GPUs together.
    fn reserved_total(&self) -> u64 {
        self.reserved
            .values()
            .fold(0u64, |sum, b| sum.saturating_add(*b))
    }
}

/// The flags a grant's reply carries.
fn grant_flags(g: &Grant) -> u32 {
    let mut flags = 0;
    if g.shared {
        flags |= GRANT_SHARED;
    }
    if g.tight {
        flags |= GRANT_TIGHT;
    }
    flags
}

fn shares(s: &Share) -> Shares {
    Shares {
        request: s.request,
        limit: s.limit,
        interactive: s.interactive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU0: DeviceId = DeviceId([0; 16]);
    const GPU1: DeviceId = DeviceId([1; 16]);

    fn state(text: &str) -> (State, broadcast::Receiver<Event>) {
        let (tx, rx) = broadcast::channel(64);
        (
            State::new(
                Config::parse(text).unwrap(),
                "/etc/gpushare/gpushare.toml".into(),
                tx,
            ),
            rx,
        )
    }

    fn user(uid: u32, name: &str) -> Identity {
        Identity {
            uid,
            user: name.into(),
            groups: vec![name.into()],
            gids: vec![uid],
        }
    }

    const CFG: &str = "[defaults]\nmemory = \"1GiB\"\n[clients.train]\nrequest = 0.5\nmemory = 1000\nusers = [\"alice\"]\n";

    #[test]
    fn attach_checks_access_and_memory_is_freed_on_detach() {
        let (mut s, _rx) = state(CFG);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let alice = user(1000, "alice");
        let bob = user(1001, "bob");
        let err = s.attach(&bob, 7, "train", &[], tx.clone()).unwrap_err();
        assert_eq!(err.0, ErrorCode::NotAllowed);
        assert!(err.1.contains("bob"), "{}", err.1);
        let (sid, welcome) = s.attach(&alice, 8, "train", &[], tx.clone()).unwrap();
        assert!(matches!(
            welcome,
            Reply::Welcome {
                memory_cap: 1000,
                ..
            }
        ));
        assert_eq!(s.reserve(sid, GPU0, 600), Reply::Reserved { used: 600 });
        assert_eq!(
            s.reserve(sid, GPU0, 401),
            Reply::OverCap {
                used: 600,
                cap: 1000
            }
        );
        assert_eq!(s.reserve(sid, GPU0, 400), Reply::Reserved { used: 1000 });
        s.unreserve(sid, GPU0, 100);
        assert_eq!(s.reserve(sid, GPU0, 0), Reply::Reserved { used: 900 });
        s.acquire(sid, GPU0);
        assert_eq!(
            rx.try_recv().unwrap(),
            Reply::Grant {
                lease_ns: 20_000_000,
                flags: 0
            }
        );
        s.detach(sid);
        let r = s.report("train").unwrap();
        assert_eq!(r.memory_used, 0);
        assert!(!r.holding);
        assert!(r.pids.is_empty());
    }

    #[test]
    fn unnamed_processes_get_their_users_default_client() {
        let (mut s, _rx) = state(CFG);
        let (tx, _r) = mpsc::unbounded_channel();
        let (a, w) = s
            .attach(&user(1001, "bob"), 9, "", &[], tx.clone())
            .unwrap();
        assert!(
            matches!(&w, Reply::Welcome { client, memory_cap, .. } if client == "user.bob" && *memory_cap == 1 << 30)
        );
        // another user cannot attach as bob's default client
        assert!(s
            .attach(&user(1002, "carol"), 10, "user.bob", &[], tx.clone())
            .is_err());
        s.detach(a);
        assert!(
            s.report("user.bob").is_none(),
            "default client goes with its last process"
        );
    }

    #[test]
    fn a_re_attaching_process_keeps_its_memory_even_over_the_cap() {
        let (mut s, _rx) = state("[clients.a]\nusers=[\"*\"]\nmemory = \"1GiB\"\n");
        let (tx, _r) = mpsc::unbounded_channel();
        let (a, _) = s
            .attach(&user(1, "u"), 1, "a", &[(GPU0, 3 << 29)], tx.clone())
            .unwrap();
        assert_eq!(s.report("a").unwrap().memory_used, 3 << 29);
        // Over the cap: nothing more fits, and what it frees comes off its count.
        assert!(matches!(s.reserve(a, GPU0, 1), Reply::OverCap { .. }));
        s.unreserve(a, GPU0, 1 << 29);
        assert_eq!(s.report("a").unwrap().memory_used, 1 << 30);
        assert!(matches!(s.reserve(a, GPU0, 1), Reply::OverCap { .. }));
        s.unreserve(a, GPU0, 1);
        assert!(matches!(s.reserve(a, GPU0, 1), Reply::Reserved { .. }));
        // Its exit gives all of it back.
        s.detach(a);
        assert_eq!(s.report("a").unwrap().memory_used, 0);
    }

    #[test]
    fn each_gpu_has_its_own_token_and_memory_cap() {
        let (mut s, _rx) =
            state("[clients.a]\nusers=[\"*\"]\nmemory = 1000\n[clients.b]\nusers=[\"*\"]\n");
        let (ta, mut ra) = mpsc::unbounded_channel();
        let (tb, mut rb) = mpsc::unbounded_channel();
        let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], ta).unwrap();
        let (b, _) = s.attach(&user(1, "u"), 2, "b", &[], tb).unwrap();
        s.acquire(a, GPU0);
        s.acquire(b, GPU1);
        assert!(matches!(ra.try_recv(), Ok(Reply::Grant { .. })));
        assert!(
            matches!(rb.try_recv(), Ok(Reply::Grant { .. })),
            "b holds GPU 1 while a holds GPU 0"
        );
        // the cap applies on each GPU
        assert_eq!(s.reserve(a, GPU0, 1000), Reply::Reserved { used: 1000 });
        assert_eq!(s.reserve(a, GPU1, 1000), Reply::Reserved { used: 1000 });
        assert_eq!(
            s.reserve(a, GPU1, 1),
            Reply::OverCap {
                used: 1000,
                cap: 1000
            }
        );
        s.unreserve(a, GPU1, 400);
        assert_eq!(s.reserve(a, GPU1, 0), Reply::Reserved { used: 600 });
        assert_eq!(s.reserve(a, GPU0, 0), Reply::Reserved { used: 1000 });
        let r = s.report("a").unwrap();
        assert_eq!(r.memory_used, 1600, "the total over the GPUs");
        let devices: Vec<(String, u64, bool)> = r
            .devices
            .iter()
            .map(|d| (d.device.clone(), d.memory_used, d.holding))
            .collect();
        assert_eq!(
            devices,
            vec![
                (GPU0.to_string(), 1000, true),
                (GPU1.to_string(), 600, false)
            ]
        );
        let p = s.attached_processes();
        assert_eq!(p.iter().find(|p| p.pid == 1).unwrap().reserved, 1600);
        assert_eq!(s.usage_snapshot().clients[0].memory_used, 1600);
        // its exit frees its memory and its lease on every GPU
        s.detach(a);
        let r = s.report("a").unwrap();
        assert_eq!((r.memory_used, r.holding), (0, false));
        assert_eq!(r.devices.len(), 1, "GPU 0, where it held a lease");
    }

    #[test]
    fn a_re_attaching_process_keeps_its_memory_on_each_gpu() {
        let (mut s, _rx) = state("[clients.a]\nusers=[\"*\"]\nmemory = 1000\n");
        let (tx, _r) = mpsc::unbounded_channel();
        let held = [(GPU0, 600), (GPU1, 1200)];
        let (a, _) = s.attach(&user(1, "u"), 1, "a", &held, tx).unwrap();
        assert_eq!(s.report("a").unwrap().memory_used, 1800);
        // over the cap on GPU 1 only
        assert!(matches!(
            s.reserve(a, GPU1, 1),
            Reply::OverCap { used: 1200, .. }
        ));
        assert_eq!(s.reserve(a, GPU0, 400), Reply::Reserved { used: 1000 });
        s.detach(a);
        assert_eq!(s.report("a").unwrap().memory_used, 0);
    }

    #[test]
    fn a_process_names_a_bounded_number_of_gpus() {
        let (mut s, _rx) = state("[clients.a]\nusers=[\"*\"]\n");
        let (tx, _r) = mpsc::unbounded_channel();
        let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], tx).unwrap();
        let gpu = |i: usize| DeviceId([i as u8; 16]);
        for i in 0..MAX_DEVICES {
            s.use_device(a, gpu(i)).unwrap();
        }
        s.use_device(a, gpu(0)).unwrap();
        let e = s.use_device(a, gpu(MAX_DEVICES)).unwrap_err();
        assert!(e.contains("more than 64 GPUs"), "{e}");
    }

    #[test]
    fn two_sessions_alternate_and_a_dead_holder_passes_the_token() {
        // one lease at a time (by default, processes of equal weights overlap)
        let (mut s, _rx) = state(
            "[daemon]\nconcurrent_leases = 1\n[clients.a]\nusers=[\"*\"]\n[clients.b]\nusers=[\"*\"]\n",
        );
        let (ta, mut ra) = mpsc::unbounded_channel();
        let (tb, mut rb) = mpsc::unbounded_channel();
        let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], ta).unwrap();
        let (b, _) = s.attach(&user(1, "u"), 2, "b", &[], tb).unwrap();
        s.acquire(a, GPU0);
        s.acquire(b, GPU0);
        assert!(matches!(ra.try_recv(), Ok(Reply::Grant { .. })));
        assert!(rb.try_recv().is_err(), "b waits while a holds the token");
        s.detach(a); // a crashed
        assert!(matches!(rb.try_recv(), Ok(Reply::Grant { .. })));
    }

    #[test]
    fn renewing_holder_is_weighed_against_the_waiting_ones() {
        let (mut s, _rx) = state("[clients.big]\nrequest = 0.9\nusers=[\"*\"]\n[clients.small]\nrequest = 0.1\nusers=[\"*\"]\n");
        let (ta, mut ra) = mpsc::unbounded_channel();
        let (tb, mut rb) = mpsc::unbounded_channel();
        let (a, _) = s.attach(&user(1, "u"), 1, "big", &[], ta).unwrap();
        let (b, _) = s.attach(&user(1, "u"), 2, "small", &[], tb).unwrap();
        s.acquire(a, GPU0);
        s.acquire(b, GPU0);
        let mut grants = (0, 0);
        for _ in 0..20 {
            // whoever holds the token renews it at once, as the hook does at a lease's end
            if matches!(ra.try_recv(), Ok(Reply::Grant { .. })) {
                grants.0 += 1;
                s.renew(a, GPU0, 1);
            } else if matches!(rb.try_recv(), Ok(Reply::Grant { .. })) {
                grants.1 += 1;
                s.renew(b, GPU0, 1);
            }
        }
        // a release followed by a separate acquire would alternate 10/10
        assert!(grants.0 >= 15, "big got {} of 20 leases", grants.0);
    }

    #[test]
    fn fair_share_weighs_clients_by_their_decayed_usage() {
        let (mut s, _rx) = state(
            "[daemon]\nconcurrent_leases = 1\nfairshare_half_life = \"7d\"\n\
             [clients.a]\nrequest = 0.5\nusers=[\"*\"]\n[clients.b]\nrequest = 0.5\nusers=[\"*\"]\n",
        );
        s.set_fair_usage(Some([("a".to_string(), 300e9)].into_iter().collect()));
        assert_eq!(
            s.fair_factor("a"),
            0.25,
            "all the usage for half the weight"
        );
        assert_eq!(s.fair_factor("b"), 1.0);
        let (ta, mut ra) = mpsc::unbounded_channel();
        let (tb, mut rb) = mpsc::unbounded_channel();
        let (a, _) = s.attach(&user(1, "u"), 1, "a", &[], ta).unwrap();
        let (b, _) = s.attach(&user(1, "u"), 2, "b", &[], tb).unwrap();
        // a user's default client joins the weighing when it appears
        let (tc, _rc) = mpsc::unbounded_channel();
        let (c, _) = s.attach(&user(2, "carol"), 3, "", &[], tc).unwrap();
        assert_eq!(s.fair_factor("user.carol"), 1.0);
        assert!(s.fair_factor("a") < 0.25, "a's part of the weights shrank");
        s.detach(c);
        assert_eq!(s.fair_factor("a"), 0.25);
        s.acquire(a, GPU0);
        s.acquire(b, GPU0);
        let mut grants = (0, 0);
        for _ in 0..50 {
            if matches!(ra.try_recv(), Ok(Reply::Grant { .. })) {
                grants.0 += 1;
                s.renew(a, GPU0, 1);
            } else if matches!(rb.try_recv(), Ok(Reply::Grant { .. })) {
                grants.1 += 1;
                s.renew(b, GPU0, 1);
            } else {
                panic!("nobody holds the token");
            }
        }
        // weights 0.125 and 0.5: b gets about four leases for each of a's
        assert!(grants.1 >= 3 * grants.0, "a {} b {}", grants.0, grants.1);
        // off again: equal requests weigh the same
        s.set_fair_usage(None);
        assert_eq!(s.fair_factor("a"), 1.0);
    }

    #[test]
    fn management_rules() {
        let (mut s, mut rx) = state(CFG);
        let spec = |name: &str, request: f64| ClientSpec {
            name: name.into(),
            share: Share {
                request,
                limit: 1.0,
                memory: None,
                interactive: false,
            },
            mps: MpsShare::default(),
            memory_mode: MemoryMode::default(),
            access: Access::default(),
        };
        let e = s.register(spec("big", 0.6)).unwrap_err();
        assert!(
            matches!(&e, StateError::InvalidArgument(m) if m.contains("add up to 1.100")),
            "{e:?}"
        );
        s.register(spec("small", 0.2)).unwrap();
        assert!(matches!(rx.try_recv(), Ok(Event::Changed { .. })));
        assert!(s.register(spec("small", 0.1)).is_err(), "duplicate");
        assert!(s.register(spec("user.x", 0.1)).is_err(), "reserved prefix");
        s.set_share("small", Some(0.3), Some(0.9), Some(Some(5 << 30)))
            .unwrap();
        let r = s.report("small").unwrap();
        assert_eq!((r.request, r.limit, r.memory), (0.3, 0.9, Some(5 << 30)));
        assert!(
            s.set_share("small", Some(0.6), None, None).is_err(),
            "sum over 1"
        );
        assert!(
            s.set_share("small", None, Some(0.1), None).is_err(),
            "limit under request"
        );
        assert!(matches!(
            s.set_share("nope", Some(0.1), None, None),
            Err(StateError::UnknownClient(_))
        ));
        assert!(s.unregister("train").is_err(), "config clients stay");
        s.unregister("small").unwrap();
        assert!(s.report("small").is_none());
    }

    #[test]
    fn usage_snapshots_hand_over_each_process_once_it_is_gone() {
        let (mut s, _rx) = state(CFG);
        let (tx, _r) = mpsc::unbounded_channel();
        let (sid, _) = s.attach(&user(1000, "alice"), 8, "train", &[], tx).unwrap();
        s.reserve(sid, GPU0, 300);
        s.acquire(sid, GPU0);
        let snap = s.usage_snapshot();
        assert_eq!(snap.sessions.len(), 1);
        let live = &snap.sessions[0];
        assert_eq!(
            (live.user.as_str(), live.client.as_str()),
            ("alice", "train")
        );
        assert_eq!((live.grants, live.reserved), (1, 300));
        assert_eq!(snap.clients[0].memory_cap, Some(1000));
        s.release(sid, GPU0, 0);
        s.detach(sid);
        let snap = s.usage_snapshot();
        assert!(snap.sessions.is_empty());
        assert_eq!(snap.ended.len(), 1);
        assert_eq!(snap.ended[0].0.grants, 1);
        assert!(s.usage_snapshot().ended.is_empty(), "handed over once");
        assert!(s
            .apply_config(Config::parse("[clients.x]\nrequest = 3\n"))
            .is_err());
        let snap = s.usage_snapshot();
        assert_eq!((snap.reload_failures, snap.config_error), (1, true));
    }

    #[test]
    fn broken_reload_keeps_the_running_config() {
        let (mut s, mut rx) = state(CFG);
        let e = s
            .apply_config(Config::parse("[clients.train]\nrequest = 2\n"))
            .unwrap_err();
        assert!(e.contains("request 2"), "{e}");
        assert_eq!(s.config_error.as_deref(), Some(e.as_str()));
        assert_eq!(s.report("train").unwrap().request, 0.5);
        assert!(matches!(
            rx.try_recv(),
            Ok(Event::ConfigReloaded { ok: false, .. })
        ));
        s.apply_config(Config::parse(
            "[clients.train]\nrequest = 0.25\n[clients.new]\n",
        ))
        .unwrap();
        assert_eq!(s.report("train").unwrap().request, 0.25);
        assert!(s.report("new").is_some());
        assert!(s.config_error.is_none());
    }

    #[test]
    fn a_reload_keeps_run_time_changes_of_entries_the_file_did_not_change() {
        let text = "[clients.train]\nrequest = 0.25\n[clients.other]\nrequest = 0.1\n";
        let (mut s, _rx) = state(text);
        s.set_share("train", Some(0.5), None, None).unwrap();
        // the same file again (a reload, or the watcher after an edit elsewhere)
        s.apply_config(Config::parse(text)).unwrap();
        assert_eq!(s.report("train").unwrap().request, 0.5, "kept");
        // another entry changed: this one is kept, that one applied
        let text = "[clients.train]\nrequest = 0.25\n[clients.other]\nrequest = 0.2\n";
        s.apply_config(Config::parse(text)).unwrap();
        assert_eq!(s.report("train").unwrap().request, 0.5);
        assert_eq!(s.report("other").unwrap().request, 0.2);
        // its own entry changed in the file: the file wins
        let text = "[clients.train]\nrequest = 0.3\n[clients.other]\nrequest = 0.2\n";
        s.apply_config(Config::parse(text)).unwrap();
        assert_eq!(s.report("train").unwrap().request, 0.3);

        // the requests that would run must fit, those kept from run time included
        s.set_share("train", Some(0.6), None, None).unwrap();
        let text = "[clients.train]\nrequest = 0.3\n[clients.other]\nrequest = 0.5\n";
        let e = s.apply_config(Config::parse(text)).unwrap_err();
        assert!(e.contains("train=0.6") && e.contains("run time"), "{e}");
        assert_eq!(
            s.report("other").unwrap().request,
            0.2,
            "the old config stays"
        );
    }

    #[test]
    fn a_reload_keeps_a_users_run_time_share_unless_the_defaults_changed() {
        let (mut s, _rx) = state("[defaults]\nrequest = 0.1\n");
        let (tx, _r) = mpsc::unbounded_channel();
        let (_a, _) = s.attach(&user(7, "bob"), 1, "", &[], tx).unwrap();
        s.set_share("user.bob", Some(0.3), None, None).unwrap();
        s.apply_config(Config::parse("[defaults]\nrequest = 0.1\n[clients.x]\n"))
            .unwrap();
        assert_eq!(s.report("user.bob").unwrap().request, 0.3, "kept");
        s.apply_config(Config::parse("[defaults]\nrequest = 0.2\n"))
            .unwrap();
        assert_eq!(s.report("user.bob").unwrap().request, 0.2, "new defaults");
    }

    #[test]
    fn usage_read_while_fair_share_is_off_weighs_nothing() {
        let (mut s, _rx) = state("[clients.a]\nrequest = 0.5\n[clients.b]\nrequest = 0.5\n");
        s.set_fair_usage(Some([("a".to_string(), 300e9)].into_iter().collect()));
        assert_eq!(s.fair_factor("a"), 1.0);
    }
}
