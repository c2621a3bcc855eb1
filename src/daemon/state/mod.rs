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
pub use reports::{ClientDeviceReport, ClientReport, GpuLeases};

use super::identity::Identity;
use super::usage::{ClientFigures, SessionFigures, UsageSnapshot};
use crate::config::{
    check_client_name, check_request_sum, Access, ClientSpec, Config, MemoryMode, MpsShare, Share,
};
use crate::gpu::AttachedProcess;
use crate::protocol::{
    DeviceId, ErrorCode, Reply, GRANT_CONTENDED, GRANT_SHARED, GRANT_TIGHT, MAX_DEVICES,
    MEMORY_OVERSUBSCRIBE, MEMORY_RELEASE_CACHE, NO_CAP, SCHED_INTERACTIVE,
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
    /// Registered to be kept only until the host reboots (RegisterRuntimeClient).
    runtime: bool,
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
    /// Its lanes: per GPU, the connection its requests about that GPU's token come on and its
    /// grants go to (without one, they go to `tx`).
    lanes: BTreeMap<DeviceId, mpsc::UnboundedSender<Reply>>,
    /// Grants sent to it per GPU: the number of its current (or last) lease there.
    leases: BTreeMap<DeviceId, u64>,
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
    /// A scheduler time that stands still until moved ([`State::hold_clock`]): tests that
    /// weigh leases by their length give each the length they say, whatever the machine's load.
    #[cfg(test)]
    held_clock: Option<Nanos>,
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
/// `CLOCK_MONOTONIC` in nanoseconds: the clock of the times the hooks are told.
fn monotonic_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

impl State {
    pub fn new(config: Config, config_path: PathBuf, events: broadcast::Sender<Event>) -> State {
        let origin = Instant::now();
        let mut sched = Schedulers::new(config.daemon.quantum.as_nanos() as Nanos);
        sched.set_grace(config.daemon.lease_grace.as_nanos() as Nanos);
        sched.set_burst_window(config.daemon.burst_window.as_nanos() as Nanos);
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
            #[cfg(test)]
            held_clock: None,
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
        #[cfg(test)]
        if let Some(t) = self.held_clock {
            return t;
        }
        self.origin.elapsed().as_nanos() as Nanos
    }

    /// Stops the scheduler's clock where it is; it moves only by [`State::advance_clock`].
    #[cfg(test)]
    pub fn hold_clock(&mut self) {
        self.held_clock = Some(self.now());
    }

    /// Moves the held clock ([`State::hold_clock`]) on by `ns`.
    #[cfg(test)]
    pub fn advance_clock(&mut self, ns: Nanos) {
        let t = self.now() + ns;
        self.held_clock = Some(t);
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
                runtime: false,
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
        let bound = if requested.is_empty() {
            self.bound_client(who)
        } else {
            None
        };
        let name = if let Some(name) = bound {
            name
        } else if requested.is_empty() {
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
                        ..Access::default()
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
                lanes: BTreeMap::new(),
                leases: BTreeMap::new(),
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

    /// Opens the lane of `session` for `device` ([`Request::Lane`](crate::protocol::Request)):
    /// only the process that owns the session may, once per GPU; the GPU counts towards the
    /// session's [`MAX_DEVICES`].
    pub fn open_lane(
        &mut self,
        session: SessionId,
        pid: u32,
        device: DeviceId,
        tx: mpsc::UnboundedSender<Reply>,
    ) -> Result<(), String> {
        match self.sessions.get(&session) {
            Some(s) if s.pid == pid => {
                if s.lanes.contains_key(&device) {
                    return Err(format!(
                        "process {pid} has a lane for {device} in session {session} already"
                    ));
                }
            }
            _ => return Err(format!("process {pid} has no session {session}")),
        }
        self.use_device(session, device)?;
        if let Some(s) = self.sessions.get_mut(&session) {
            s.lanes.insert(device, tx);
        }
        Ok(())
    }

    /// The lane of `session` for `device` closed: the session stops waiting for that GPU's
    /// token and gives back its lease there.
    pub fn close_lane(&mut self, session: SessionId, device: DeviceId) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        if s.lanes.remove(&device).is_none() {
            return;
        }
        let now = self.now();
        self.sched.session_gone_on(device, session, now);
        self.dispatch();
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

    /// `session` reports the kernels it launched since its last report, for the scheduler's
    /// choice between leases together and turns on `device`, and the time it spent in its GPU
    /// phases meanwhile, for USED.
    pub fn launched(
        &mut self,
        session: SessionId,
        device: DeviceId,
        launches: u64,
        active_ns: u64,
    ) {
        let now = self.now();
        self.sched.launched(device, session, launches, now);
        self.sched.was_active(device, session, active_ns);
    }

    /// Another lease on `device` at once for a holder that no waiting process goes before there
    /// (with the tracing a grant has); `NotExtended` otherwise.
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
                if let Some(s) = self.sessions.get_mut(&session) {
                    *s.leases.entry(device).or_default() += 1;
                }
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
        // when the grants below start (a holder told `Joined` learns from work done before then)
        let granted_at = monotonic_ns();
        while let Some((device, g)) = self.sched.poll(now) {
            tracing::trace!(
                %device,
                session = g.session,
                lease_ns = g.lease_ns,
                holders = self.sched.holder_count(device),
                demand = self.sched.demand(device, g.session),
                mode = ?self.sched.mode(device),
                "grant"
            );
            let mut on_lane = false;
            let delivered = self.sessions.get_mut(&g.session).is_some_and(|s| {
                *s.leases.entry(device).or_default() += 1;
                on_lane = s.lanes.contains_key(&device);
                s.lanes
                    .get(&device)
                    .unwrap_or(&s.tx)
                    .send(Reply::Grant {
                        lease_ns: g.lease_ns,
                        flags: grant_flags(&g),
                    })
                    .is_ok()
            });
            if !delivered {
                // The session (or its lane for this GPU) is closing: take the token back at once
                // and pick again.
                if on_lane {
                    self.sched.session_gone_on(device, g.session, now);
                } else {
                    self.sched.session_gone(g.session, now);
                }
            }
        }
        for (device, session) in self.sched.take_revoked() {
            self.tell_watch(session, device, |lease| Reply::Revoke { lease, device });
        }
        for (device, session) in self.sched.take_joined() {
            self.tell_watch(session, device, |lease| Reply::Joined {
                lease,
                at_ns: granted_at,
                device,
            });
        }
        for (device, session) in self.sched.take_contended() {
            self.tell_watch(session, device, |lease| Reply::Contended { lease, device });
        }
        self.sched.next_wakeup(now)
    }

    /// Sends `reply`, about the session's current lease on `device` (the last one granted
    /// there), on its watch connection.
    fn tell_watch(&self, session: SessionId, device: DeviceId, reply: impl FnOnce(u64) -> Reply) {
        if let Some(s) = self.sessions.get(&session) {
            if let Some(tx) = &s.watch {
                let lease = s.leases.get(&device).copied().unwrap_or(0);
                let _ = tx.send(reply(lease));
            }
        }
    }

    /// Each attached process with what its sessions reserved and when one last held a lease.
    ///
    /// `reserved` is what the process holds on all GPUs together, and `last_held` its latest
    /// lease on any of them: the GPU side adds up what NVML counts for the process over the
    /// managed devices and compares the sum with it, so memory on one GPU is never taken for
    /// memory missing on another (the check may miss memory a process holds on one GPU beyond
    /// what it reserved there while it holds less elsewhere; it never reports one that did not).
    /// The client whose `units`/`slices` bind the process of `who` most closely (a unit before
    /// any slice, a deeper slice before the slices above it, then the first name): its default
    /// client.
    fn bound_client(&self, who: &Identity) -> Option<String> {
        let mut best: Option<(crate::cgroup_place::Binding, &str)> = None;
        for (name, c) in &self.clients {
            if let Some(b) = who.binding(&c.spec.access) {
                if best.is_none_or(|(top, _)| b > top) {
                    best = Some((b, name));
                }
            }
        }
        best.map(|(_, name)| name.to_string())
    }

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
    if g.contended {
        flags |= GRANT_CONTENDED;
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
mod tests;
