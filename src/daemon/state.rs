//! The daemon's state: clients, attached sessions, the scheduler and memory accounts.
//!
//! Everything here is synchronous and quick; callers hold the lock only for a call, never across
//! an `.await`. Replies to sessions leave through each session's channel.

use super::identity::Identity;
use super::usage::{ClientFigures, SessionFigures, UsageSnapshot};
use crate::config::{
    check_client_name, check_request_sum, Access, ClientSpec, Config, MemoryMode, MpsShare, Share,
};
use crate::gpu::AttachedProcess;
use crate::protocol::{
    ErrorCode, Reply, GRANT_SHARED, MEMORY_OVERSUBSCRIBE, MEMORY_RELEASE_CACHE, NO_CAP,
    SCHED_INTERACTIVE,
};
use crate::scheduler::{ClientId, Nanos, Scheduler, SessionId, Shares};
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
    memory_used: u64,
    sessions: BTreeSet<SessionId>,
}

#[derive(Debug)]
struct Session {
    pid: u32,
    uid: u32,
    user: String,
    client: String,
    reserved: u64,
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

/// A client as reported over D-Bus and by the CLI.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClientReport {
    pub name: String,
    pub origin: &'static str,
    pub request: f64,
    pub limit: f64,
    /// Memory cap in bytes, `None` for unlimited.
    pub memory: Option<u64>,
    pub memory_used: u64,
    pub interactive: bool,
    /// Fraction of GPU time charged over the last ten seconds.
    pub share_used: f64,
    pub gpu_time_ns: u64,
    pub charged_ns: u64,
    pub grants: u64,
    /// Time its processes waited for a grant.
    pub waited_ns: u64,
    pub holding: bool,
    pub waiting: u32,
    pub pids: Vec<u32>,
    pub users: Vec<String>,
    pub groups: Vec<String>,
    pub mps_thread_percentage: Option<u32>,
    pub mps_pinned_mem_limit: Option<u64>,
    pub mps_priority: &'static str,
    pub oversubscribe: bool,
    /// Resident budget in bytes, `None` for all of the client's managed memory.
    pub resident: Option<u64>,
    pub release_cache: bool,
}

pub struct State {
    pub config: Config,
    pub config_error: Option<String>,
    pub config_path: PathBuf,
    clients: BTreeMap<String, ClientEntry>,
    sessions: BTreeMap<SessionId, Session>,
    sched: Scheduler,
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
}

impl State {
    pub fn new(config: Config, config_path: PathBuf, events: broadcast::Sender<Event>) -> State {
        let origin = Instant::now();
        let mut sched = Scheduler::new(config.daemon.quantum.as_nanos() as Nanos, 0);
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
                memory_used: 0,
                sessions: BTreeSet::new(),
            },
        );
    }

    fn remove_client(&mut self, name: &str) {
        if let Some(c) = self.clients.remove(name) {
            let now = self.now();
            self.sched.remove_client(c.id, now);
        }
    }

    // ---- sessions (the socket side) ----

    /// Attaches a process. `requested` is the client name it asked for ("" = its user's default);
    /// `reserved`, the device memory a process re-attaching after a restart already holds, is
    /// counted at once, even past the client's cap (its next allocations then fail).
    /// Returns the session id and the Welcome to send.
    pub fn attach(
        &mut self,
        who: &Identity,
        pid: u32,
        requested: &str,
        reserved: u64,
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
                reserved: 0,
                managed,
                tx,
                watch: None,
            },
        );
        if reserved > 0 {
            self.adopt(session, reserved);
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

    /// A session's connection closed: free its token and memory.
    pub fn detach(&mut self, session: SessionId) {
        let now = self.now();
        self.sched.session_gone(session, now);
        self.unreserve(session, u64::MAX);
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

    pub fn acquire(&mut self, session: SessionId) {
        if let Some(client) = self.client_of(session) {
            let now = self.now();
            self.sched.acquire(client, session, now);
            self.dispatch();
        }
    }

    /// Another lease at once for a holder nobody waits behind; `NotExtended` otherwise.
    pub fn extend(&mut self, session: SessionId) -> Reply {
        let now = self.now();
        let reply = match self.sched.extend(session, now) {
            Some(lease_ns) => Reply::Grant { lease_ns, flags: 0 },
            None => Reply::NotExtended,
        };
        self.dispatch();
        reply
    }

    /// Release and acquire in one step: the session waits in line before the token moves on.
    pub fn renew(&mut self, session: SessionId, busy_ns: u64) {
        let now = self.now();
        self.sched.release(session, busy_ns, now);
        self.acquire(session);
    }

    pub fn release(&mut self, session: SessionId, busy_ns: u64) {
        let now = self.now();
        self.sched.release(session, busy_ns, now);
        self.dispatch();
    }

    /// Counts `bytes` against the session's client cap. `Reserve{0}` reports the current use.
    pub fn reserve(&mut self, session: SessionId, bytes: u64) -> Reply {
        let Some(s) = self.sessions.get_mut(&session) else {
            return Reply::Error {
                code: ErrorCode::BadMessage,
                message: "not attached".into(),
            };
        };
        let Some(c) = self.clients.get_mut(&s.client) else {
            return Reply::Error {
                code: ErrorCode::UnknownClient,
                message: "client is gone".into(),
            };
        };
        let cap = c.spec.share.memory.unwrap_or(NO_CAP);
        let pool_ok = !s.managed
            || self
                .managed_used
                .checked_add(bytes)
                .is_some_and(|t| t <= self.managed_limit);
        match c.memory_used.checked_add(bytes) {
            Some(total) if total <= cap && pool_ok => {
                c.memory_used = total;
                s.reserved += bytes;
                if s.managed {
                    self.managed_used += bytes;
                }
                Reply::Reserved { used: total }
            }
            _ => Reply::OverCap {
                used: c.memory_used,
                cap,
            },
        }
    }

    /// Counts `bytes` the process of `session` already holds (it re-attached after a restart),
    /// whatever the cap: the memory is allocated, and refusing it would only hide it.
    fn adopt(&mut self, session: SessionId, bytes: u64) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        s.reserved = s.reserved.saturating_add(bytes);
        if s.managed {
            self.managed_used = self.managed_used.saturating_add(bytes);
        }
        let Some(c) = self.clients.get_mut(&s.client) else {
            return;
        };
        c.memory_used = c.memory_used.saturating_add(bytes);
        let cap = c.spec.share.memory.unwrap_or(NO_CAP);
        if c.memory_used > cap {
            tracing::warn!(
                pid = s.pid,
                client = %s.client,
                used = c.memory_used,
                cap,
                "client {} is over its memory cap after process {} re-attached with {bytes} bytes: \
                 its allocations fail until it is back under the cap",
                s.client,
                s.pid
            );
        }
    }

    /// Gives back up to `bytes` of what `session` reserved (all of it with `u64::MAX`).
    pub fn unreserve(&mut self, session: SessionId, bytes: u64) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        let bytes = bytes.min(s.reserved);
        s.reserved -= bytes;
        if s.managed {
            self.managed_used = self.managed_used.saturating_sub(bytes);
        }
        if let Some(c) = self.clients.get_mut(&s.client) {
            c.memory_used = c.memory_used.saturating_sub(bytes);
        }
    }

    /// Ends expired leases and sends the next grant. Returns when it next needs to run.
    pub fn dispatch(&mut self) -> Option<Nanos> {
        let now = self.now();
        while let Some(g) = self.sched.poll(now) {
            tracing::trace!(
                session = g.session,
                lease_ns = g.lease_ns,
                holders = self.sched.holder_count(),
                demand = self.sched.demand(g.session),
                "grant"
            );
            let delivered = self.sessions.get(&g.session).is_some_and(|s| {
                s.tx.send(Reply::Grant {
                    lease_ns: g.lease_ns,
                    flags: if g.shared { GRANT_SHARED } else { 0 },
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
    pub fn attached_processes(&self) -> Vec<AttachedProcess> {
        let now = self.now();
        let mut by_pid: BTreeMap<u32, AttachedProcess> = BTreeMap::new();
        for (&id, s) in &self.sessions {
            let p = by_pid.entry(s.pid).or_insert_with(|| AttachedProcess {
                uid: s.uid,
                client: s.client.clone(),
                ..AttachedProcess::pid(s.pid)
            });
            p.reserved = p.reserved.saturating_add(s.reserved);
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

    // ---- management (the D-Bus side) ----

    fn requests_with(&self, name: &str, request: f64) -> Vec<(String, f64)> {
        let mut all: Vec<(String, f64)> = self
            .clients
            .values()
            .filter(|c| c.spec.name != name && c.origin != Origin::Default)
            .map(|c| (c.spec.name.clone(), c.spec.share.request))
            .collect();
        all.push((name.to_string(), request));
        all
    }

    fn check_sum(&self, name: &str, request: f64) -> Result<(), StateError> {
        let all = self.requests_with(name, request);
        check_request_sum(all.iter().map(|(n, r)| (n.as_str(), *r)))
            .map_err(StateError::InvalidArgument)
    }

    pub fn register(&mut self, spec: ClientSpec) -> Result<(), StateError> {
        check_client_name(&spec.name).map_err(StateError::InvalidArgument)?;
        if spec.name.starts_with("user.") {
            return Err(StateError::InvalidArgument(
                "names starting with \"user.\" are kept for users' default clients".into(),
            ));
        }
        spec.share
            .check(&spec.name)
            .map_err(StateError::InvalidArgument)?;
        if self.clients.contains_key(&spec.name) {
            return Err(StateError::InvalidArgument(format!(
                "client {:?} already exists",
                spec.name
            )));
        }
        self.check_sum(&spec.name, spec.share.request)?;
        let name = spec.name.clone();
        self.insert_client(spec, Origin::Registered);
        self.emit(Event::Changed { client: name });
        Ok(())
    }

    /// The clients registered over D-Bus, as they stand now.
    pub fn registered_specs(&self) -> Vec<ClientSpec> {
        self.clients
            .values()
            .filter(|c| c.origin == Origin::Registered)
            .map(|c| c.spec.clone())
            .collect()
    }

    pub fn unregister(&mut self, name: &str) -> Result<(), StateError> {
        let c = self.clients.get(name).ok_or_else(|| unknown(name))?;
        match c.origin {
            Origin::Registered => {}
            Origin::Config => {
                return Err(StateError::InvalidArgument(format!(
                    "client {name:?} comes from {}; remove it there",
                    self.config_path.display()
                )))
            }
            Origin::Default => {
                return Err(StateError::InvalidArgument(format!(
                    "client {name:?} is a user's default client; it goes when its processes do"
                )))
            }
        }
        if !c.sessions.is_empty() {
            return Err(StateError::InvalidArgument(format!(
                "client {name:?} has {} attached processes; stop them first",
                c.sessions.len()
            )));
        }
        self.remove_client(name);
        self.emit(Event::Changed {
            client: name.to_string(),
        });
        Ok(())
    }

    /// Makes a client interactive (latency class) or batch.
    pub fn set_interactive(&mut self, name: &str, interactive: bool) -> Result<(), StateError> {
        let c = self.clients.get(name).ok_or_else(|| unknown(name))?;
        let share = Share {
            interactive,
            ..c.spec.share
        };
        self.apply_share(name, share)
    }

    /// Changes a client's request, limit and/or memory cap (None leaves a value as it is).
    pub fn set_share(
        &mut self,
        name: &str,
        request: Option<f64>,
        limit: Option<f64>,
        memory: Option<Option<u64>>,
    ) -> Result<(), StateError> {
        let c = self.clients.get(name).ok_or_else(|| unknown(name))?;
        let mut share = c.spec.share;
        share.request = request.unwrap_or(share.request);
        share.limit = limit.unwrap_or(share.limit);
        if let Some(m) = memory {
            share.memory = m;
        }
        self.apply_share(name, share)
    }

    fn apply_share(&mut self, name: &str, share: Share) -> Result<(), StateError> {
        let c = self.clients.get(name).ok_or_else(|| unknown(name))?;
        share.check(name).map_err(StateError::InvalidArgument)?;
        if c.origin != Origin::Default {
            self.check_sum(name, share.request)?;
        }
        let id = c.id;
        let now = self.now();
        self.sched.set_client(id, shares(&share), now);
        if let Some(c) = self.clients.get_mut(name) {
            c.spec.share = share;
        }
        self.emit(Event::Changed {
            client: name.to_string(),
        });
        self.dispatch();
        Ok(())
    }

    /// Changes how a client's memory is served; processes attached already keep the mode they
    /// attached with, new ones get this.
    pub fn set_memory_mode(&mut self, name: &str, mode: MemoryMode) -> Result<(), StateError> {
        let c = self.clients.get_mut(name).ok_or_else(|| unknown(name))?;
        mode.check(name, c.spec.share.memory)
            .map_err(StateError::InvalidArgument)?;
        c.spec.memory_mode = mode;
        self.emit(Event::Changed {
            client: name.to_string(),
        });
        Ok(())
    }

    /// Managed memory held by oversubscribing processes, and the most they may hold.
    pub fn managed_memory(&self) -> (u64, u64) {
        (self.managed_used, self.managed_limit)
    }

    pub fn report(&self, name: &str) -> Option<ClientReport> {
        let c = self.clients.get(name)?;
        let now = self.now();
        let u = self.sched.usage(c.id, now)?;
        Some(ClientReport {
            name: c.spec.name.clone(),
            origin: c.origin.as_str(),
            request: c.spec.share.request,
            limit: c.spec.share.limit,
            memory: c.spec.share.memory,
            memory_used: c.memory_used,
            interactive: c.spec.share.interactive,
            share_used: u.share,
            gpu_time_ns: u.gpu_total,
            charged_ns: u.charged_total,
            grants: u.grants,
            waited_ns: u.waited_total,
            holding: u.holding,
            waiting: u.waiting as u32,
            pids: c
                .sessions
                .iter()
                .filter_map(|s| self.sessions.get(s))
                .map(|s| s.pid)
                .collect(),
            users: c.spec.access.users.clone(),
            groups: c.spec.access.groups.clone(),
            mps_thread_percentage: c.spec.mps.thread_percentage,
            mps_pinned_mem_limit: c.spec.mps.pinned_mem_limit,
            mps_priority: c.spec.mps.priority.as_str(),
            oversubscribe: c.spec.memory_mode.oversubscribe,
            resident: c.spec.memory_mode.resident,
            release_cache: c.spec.memory_mode.release_cache,
        })
    }

    pub fn reports(&self) -> Vec<ClientReport> {
        self.clients.keys().filter_map(|n| self.report(n)).collect()
    }

    /// The figures accounting and metrics count from; hands over the processes gone since the
    /// last call.
    pub fn usage_snapshot(&mut self) -> UsageSnapshot {
        let now = self.now();
        UsageSnapshot {
            now,
            sessions: self
                .sessions
                .iter()
                .map(|(id, s)| figures(*id, s, self.sched.session_usage(*id, now)))
                .collect(),
            ended: std::mem::take(&mut self.ended),
            clients: self
                .clients
                .values()
                .map(|c| ClientFigures {
                    name: c.spec.name.clone(),
                    request: c.spec.share.request,
                    limit: c.spec.share.limit,
                    memory_cap: c.spec.share.memory,
                    memory_used: c.memory_used,
                })
                .collect(),
            reload_failures: self.reload_failures,
            config_error: self.config_error.is_some(),
        }
    }

    /// Applies a newly loaded config, or records why it could not be applied. The old config
    /// keeps running on any error.
    pub fn apply_config(&mut self, loaded: Result<Config, String>) -> Result<(), String> {
        let result = loaded.and_then(|new| {
            // Registered clients stay; together with the new file's clients the requests must fit.
            let registered: Vec<(String, f64)> = self
                .clients
                .values()
                .filter(|c| {
                    c.origin == Origin::Registered && !new.clients.contains_key(&c.spec.name)
                })
                .map(|c| (c.spec.name.clone(), c.spec.share.request))
                .collect();
            let all = new
                .clients
                .values()
                .map(|c| (c.name.clone(), c.share.request))
                .chain(registered)
                .collect::<Vec<_>>();
            check_request_sum(all.iter().map(|(n, r)| (n.as_str(), *r))).map_err(|e| {
                format!(
                    "{}: {e} (counting clients registered over D-Bus)",
                    self.config_path.display()
                )
            })?;
            Ok(new)
        });
        match result {
            Ok(new) => {
                self.swap_config(new);
                self.config_error = None;
                self.emit(Event::ConfigReloaded {
                    ok: true,
                    message: String::new(),
                });
                Ok(())
            }
            Err(message) => {
                self.config_error = Some(message.clone());
                self.reload_failures += 1;
                self.emit(Event::ConfigReloaded {
                    ok: false,
                    message: message.clone(),
                });
                Err(message)
            }
        }
    }

    fn swap_config(&mut self, new: Config) {
        let gone: Vec<String> = self
            .clients
            .values()
            .filter(|c| {
                c.origin == Origin::Config
                    && !new.clients.contains_key(&c.spec.name)
                    && c.sessions.is_empty()
            })
            .map(|c| c.spec.name.clone())
            .collect();
        for name in gone {
            self.remove_client(&name);
            self.emit(Event::Changed { client: name });
        }
        let now = self.now();
        for spec in new.clients.values() {
            match self.clients.get_mut(&spec.name) {
                Some(c) => {
                    if c.spec != *spec || c.origin != Origin::Config {
                        c.spec = spec.clone();
                        c.origin = Origin::Config;
                        self.sched.set_client(c.id, shares(&spec.share), now);
                        let _ = self.events.send(Event::Changed {
                            client: spec.name.clone(),
                        });
                    }
                }
                None => {
                    self.insert_client(spec.clone(), Origin::Config);
                    self.emit(Event::Changed {
                        client: spec.name.clone(),
                    });
                }
            }
        }
        // Users' default clients follow the new defaults.
        let defaults: Vec<(String, Share)> = self
            .clients
            .values()
            .filter(|c| c.origin == Origin::Default)
            .map(|c| {
                let user = c.spec.name.trim_start_matches("user.").to_string();
                (c.spec.name.clone(), new.defaults_for(&user, &[]))
            })
            .collect();
        for (name, share) in defaults {
            if let Some(c) = self.clients.get_mut(&name) {
                if c.spec.share != share {
                    c.spec.share = share;
                    self.sched.set_client(c.id, shares(&share), now);
                }
            }
        }
        self.sched
            .set_quantum(new.daemon.quantum.as_nanos() as Nanos);
        self.sched
            .set_grace(new.daemon.lease_grace.as_nanos() as Nanos);
        self.sched
            .set_slots(new.daemon.concurrent_leases, new.daemon.overlap_by_demand);
        self.config = new;
        self.managed_limit = managed_limit(&self.config);
        self.dispatch();
    }
}

/// The most managed memory oversubscribing clients may hold together: the configured amount,
/// or three quarters of the host memory available now (all of it may have to live there).
fn managed_limit(config: &Config) -> u64 {
    config
        .gpu
        .managed_memory
        .unwrap_or_else(|| host_available_memory().unwrap_or(0) / 4 * 3)
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn host_available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn figures(id: SessionId, s: &Session, u: crate::scheduler::SessionUsage) -> SessionFigures {
    SessionFigures {
        session: id,
        user: s.user.clone(),
        client: s.client.clone(),
        charged_ns: u.charged,
        grants: u.grants,
        waited_ns: u.waited,
        reserved: s.reserved,
    }
}

fn memory_flags(m: &MemoryMode) -> u32 {
    let mut flags = 0;
    if m.oversubscribe {
        flags |= MEMORY_OVERSUBSCRIBE;
    }
    if m.release_cache {
        flags |= MEMORY_RELEASE_CACHE;
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

fn unknown(name: &str) -> StateError {
    StateError::UnknownClient(format!("there is no client named {name:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let err = s.attach(&bob, 7, "train", 0, tx.clone()).unwrap_err();
        assert_eq!(err.0, ErrorCode::NotAllowed);
        assert!(err.1.contains("bob"), "{}", err.1);
        let (sid, welcome) = s.attach(&alice, 8, "train", 0, tx.clone()).unwrap();
        assert!(matches!(
            welcome,
            Reply::Welcome {
                memory_cap: 1000,
                ..
            }
        ));
        assert_eq!(s.reserve(sid, 600), Reply::Reserved { used: 600 });
        assert_eq!(
            s.reserve(sid, 401),
            Reply::OverCap {
                used: 600,
                cap: 1000
            }
        );
        assert_eq!(s.reserve(sid, 400), Reply::Reserved { used: 1000 });
        s.unreserve(sid, 100);
        assert_eq!(s.reserve(sid, 0), Reply::Reserved { used: 900 });
        s.acquire(sid);
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
        let (a, w) = s.attach(&user(1001, "bob"), 9, "", 0, tx.clone()).unwrap();
        assert!(
            matches!(&w, Reply::Welcome { client, memory_cap, .. } if client == "user.bob" && *memory_cap == 1 << 30)
        );
        // another user cannot attach as bob's default client
        assert!(s
            .attach(&user(1002, "carol"), 10, "user.bob", 0, tx.clone())
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
            .attach(&user(1, "u"), 1, "a", 3 << 29, tx.clone())
            .unwrap();
        assert_eq!(s.report("a").unwrap().memory_used, 3 << 29);
        // Over the cap: nothing more fits, and what it frees comes off its count.
        assert!(matches!(s.reserve(a, 1), Reply::OverCap { .. }));
        s.unreserve(a, 1 << 29);
        assert_eq!(s.report("a").unwrap().memory_used, 1 << 30);
        assert!(matches!(s.reserve(a, 1), Reply::OverCap { .. }));
        s.unreserve(a, 1);
        assert!(matches!(s.reserve(a, 1), Reply::Reserved { .. }));
        // Its exit gives all of it back.
        s.detach(a);
        assert_eq!(s.report("a").unwrap().memory_used, 0);
    }

    #[test]
    fn two_sessions_alternate_and_a_dead_holder_passes_the_token() {
        let (mut s, _rx) = state("[clients.a]\nusers=[\"*\"]\n[clients.b]\nusers=[\"*\"]\n");
        let (ta, mut ra) = mpsc::unbounded_channel();
        let (tb, mut rb) = mpsc::unbounded_channel();
        let (a, _) = s.attach(&user(1, "u"), 1, "a", 0, ta).unwrap();
        let (b, _) = s.attach(&user(1, "u"), 2, "b", 0, tb).unwrap();
        s.acquire(a);
        s.acquire(b);
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
        let (a, _) = s.attach(&user(1, "u"), 1, "big", 0, ta).unwrap();
        let (b, _) = s.attach(&user(1, "u"), 2, "small", 0, tb).unwrap();
        s.acquire(a);
        s.acquire(b);
        let mut grants = (0, 0);
        for _ in 0..20 {
            // whoever holds the token renews it at once, as the hook does at a lease's end
            if matches!(ra.try_recv(), Ok(Reply::Grant { .. })) {
                grants.0 += 1;
                s.renew(a, 1);
            } else if matches!(rb.try_recv(), Ok(Reply::Grant { .. })) {
                grants.1 += 1;
                s.renew(b, 1);
            }
        }
        // a release followed by a separate acquire would alternate 10/10
        assert!(grants.0 >= 15, "big got {} of 20 leases", grants.0);
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
        let (sid, _) = s.attach(&user(1000, "alice"), 8, "train", 0, tx).unwrap();
        s.reserve(sid, 300);
        s.acquire(sid);
        let snap = s.usage_snapshot();
        assert_eq!(snap.sessions.len(), 1);
        let live = &snap.sessions[0];
        assert_eq!(
            (live.user.as_str(), live.client.as_str()),
            ("alice", "train")
        );
        assert_eq!((live.grants, live.reserved), (1, 300));
        assert_eq!(snap.clients[0].memory_cap, Some(1000));
        s.release(sid, 0);
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
}
