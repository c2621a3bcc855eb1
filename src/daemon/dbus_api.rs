//! `org.gpushare1.Manager` on `/org/gpushare1`: register clients, change shares, read usage.
//! Reads are open to everyone, usage to each user for their own rows (root and `admin_groups` for
//! all); writes need root, a group in `admin_groups`, or the polkit action `org.gpushare1.manage`.

// RegisterClient and ProcessViolation carry many arguments, as D-Bus methods and signals do
// (zbus generates functions from them that an attribute on the method cannot reach).
#![allow(clippy::too_many_arguments)]

use super::accounting::{self, Accounting, QueryError};
use super::identity::Identity;
use super::state::{ClientDeviceReport, ClientReport, Event, State, StateError};
use crate::api;
use crate::config::{Access, ClientSpec, MemoryMode, MpsShare, Share};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, Notify};
use zbus::message::Header;
use zbus::object_server::SignalEmitter;
use zbus::zvariant::Value;

pub const BUS_NAME: &str = "org.gpushare1";
pub const OBJECT_PATH: &str = "/org/gpushare1";
pub const INTERFACE: &str = "org.gpushare1.Manager";
pub const POLKIT_ACTION: &str = "org.gpushare1.manage";

#[derive(Debug, zbus::DBusError)]
#[zbus(prefix = "org.gpushare1.Error")]
pub enum Error {
    #[zbus(error)]
    ZBus(zbus::Error),
    NotAuthorized(String),
    InvalidArgument(String),
    UnknownClient(String),
    Failed(String),
}

impl From<StateError> for Error {
    fn from(e: StateError) -> Self {
        match e {
            StateError::UnknownClient(m) => Error::UnknownClient(m),
            StateError::InvalidArgument(m) => Error::InvalidArgument(m),
            StateError::NotAllowed(m) => Error::NotAuthorized(m),
        }
    }
}

/// What the manager object reads devices from (the GPU side fills this in).
pub type DeviceLister = Arc<dyn Fn() -> Vec<api::Device> + Send + Sync>;

/// What the manager object reads flagged processes from (the GPU side's scan fills this in).
pub type FlaggedLister = Arc<dyn Fn() -> Vec<api::FlaggedProcess> + Send + Sync>;

pub struct Manager {
    pub state: Arc<Mutex<State>>,
    pub wake: Arc<Notify>,
    /// Whether polkit on the system bus may be asked about callers.
    pub use_polkit: bool,
    pub devices: DeviceLister,
    pub flagged: FlaggedLister,
    /// Reloads the config file (the same path SIGHUP takes).
    pub reload: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
    pub accounting: Arc<Accounting>,
}

/// A client as ListClients and GetClient report it. `memory` is the cap on each GPU (0 for
/// none); `memory_used`, `share_used` (1.0: one GPU's time), `holding` and `waiting` are added up
/// over the GPUs, and `devices` has them on each GPU.
pub(crate) fn client_record(r: &ClientReport) -> api::Client {
    api::Client {
        name: r.name.clone(),
        origin: r.origin.into(),
        request: r.request,
        limit: r.limit,
        memory: r.memory.unwrap_or(0),
        memory_used: r.memory_used,
        interactive: r.interactive,
        share_used: r.share_used,
        gpu_time_ns: r.gpu_time_ns,
        charged_ns: r.charged_ns,
        grants: r.grants,
        waited_ns: r.waited_ns,
        holding: r.holding,
        waiting: r.waiting,
        devices: r.devices.iter().map(client_device_record).collect(),
        pids: r.pids.clone(),
        users: r.users.clone(),
        groups: r.groups.clone(),
        mps_thread_percentage: r.mps_thread_percentage.unwrap_or(0),
        mps_pinned_mem_limit: r.mps_pinned_mem_limit.unwrap_or(0),
        mps_priority: r.mps_priority.into(),
        oversubscribe: r.oversubscribe,
        resident: r.resident.unwrap_or(0),
        release_cache: r.release_cache,
        fair_share: r.fair_share,
    }
}

/// A client's figures on one GPU, the GPU by its UUID.
fn client_device_record(r: &ClientDeviceReport) -> api::ClientDevice {
    api::ClientDevice {
        device: r.device.clone(),
        memory_used: r.memory_used,
        share_used: r.share_used,
        holding: r.holding,
        waiting: r.waiting,
        demand: r.demand,
    }
}

fn check_number(what: &str, v: f64) -> Result<(), Error> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!("{what} must be a number")))
    }
}

/// The client RegisterClient and RegisterRuntimeClient add, its numbers checked.
fn registered_spec(
    name: String,
    request: f64,
    limit: f64,
    memory: u64,
    users: Vec<String>,
    groups: Vec<String>,
) -> Result<ClientSpec, Error> {
    check_number("request", request)?;
    check_number("limit", limit)?;
    Ok(ClientSpec {
        name,
        share: Share {
            request,
            limit,
            memory: (memory > 0).then_some(memory),
            interactive: false,
        },
        mps: MpsShare::default(),
        memory_mode: MemoryMode::default(),
        access: Access {
            users,
            groups,
            ..Access::default()
        },
    })
}

impl Manager {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses the call unless its sender may change shares: an administrator
    /// ([`Identity::is_admin`]) or a holder of the polkit action.
    async fn authorize(&self, header: &Header<'_>, conn: &zbus::Connection) -> Result<(), Error> {
        let (sender, uid) = caller(header, conn).await?;
        let admin_groups = self.lock().config.daemon.admin_groups.clone();
        let who = tokio::task::spawn_blocking(move || Identity::lookup(uid, None))
            .await
            .map_err(|e| Error::Failed(e.to_string()))?;
        if who.is_admin(&admin_groups) {
            return Ok(());
        }
        if self.use_polkit && polkit_allows(conn, sender.as_str()).await {
            return Ok(());
        }
        Err(Error::NotAuthorized(format!(
            "uid {uid} may not change gpushare clients: run as root, join one of the groups {:?} in \
             admin_groups, or get the polkit action {POLKIT_ACTION}",
            admin_groups
        )))
    }

    fn changed(&self) {
        self.wake.notify_one();
    }
}

/// The call's sender: its unique bus name and the uid the bus daemon says it runs as
/// (GetConnectionUnixUser).
async fn caller<'h>(
    header: &'h Header<'_>,
    conn: &zbus::Connection,
) -> Result<(&'h zbus::names::UniqueName<'h>, u32), Error> {
    let sender = header
        .sender()
        .ok_or_else(|| Error::NotAuthorized("caller has no bus name".into()))?;
    let dbus = zbus::fdo::DBusProxy::new(conn).await?;
    let uid = dbus
        .get_connection_unix_user(zbus::names::BusName::Unique(sender.to_owned()))
        .await
        .map_err(|e| Error::NotAuthorized(format!("cannot tell who the caller is: {e}")))?;
    Ok((sender, uid))
}

/// Asks polkit whether the bus name `sender` may perform `org.gpushare1.manage`.
async fn polkit_allows(conn: &zbus::Connection, sender: &str) -> bool {
    let subject_details: HashMap<&str, Value<'_>> = HashMap::from([("name", Value::from(sender))]);
    let subject = ("system-bus-name", subject_details);
    let details: HashMap<&str, &str> = HashMap::new();
    let reply = conn
        .call_method(
            Some("org.freedesktop.PolicyKit1"),
            "/org/freedesktop/PolicyKit1/Authority",
            Some("org.freedesktop.PolicyKit1.Authority"),
            "CheckAuthorization",
            &(subject, POLKIT_ACTION, details, 1u32, ""),
        )
        .await;
    match reply {
        Ok(msg) => match msg
            .body()
            .deserialize::<(bool, bool, HashMap<String, String>)>()
        {
            Ok((authorized, _, _)) => authorized,
            Err(e) => {
                tracing::warn!("polkit answered something unexpected: {e}");
                false
            }
        },
        Err(e) => {
            tracing::debug!("polkit check failed: {e}");
            false
        }
    }
}

#[zbus::interface(name = "org.gpushare1.Manager")]
impl Manager {
    /// Adds a client at run time. `memory` is a cap in bytes (0 = unlimited); `users` and `groups`
    /// say who may attach as it ("*" in users: everyone).
    #[allow(clippy::too_many_arguments)]
    async fn register_client(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        name: String,
        request: f64,
        limit: f64,
        memory: u64,
        users: Vec<String>,
        groups: Vec<String>,
    ) -> Result<(), Error> {
        self.authorize(&header, conn).await?;
        let spec = registered_spec(name, request, limit, memory, users, groups)?;
        self.lock().register(spec, false)?;
        self.changed();
        Ok(())
    }

    /// Adds a client as RegisterClient does, kept across restarts of the daemon only until the
    /// host reboots (a batch job's client, which must not outlive it).
    #[allow(clippy::too_many_arguments)]
    async fn register_runtime_client(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        name: String,
        request: f64,
        limit: f64,
        memory: u64,
        users: Vec<String>,
        groups: Vec<String>,
    ) -> Result<(), Error> {
        self.authorize(&header, conn).await?;
        let spec = registered_spec(name, request, limit, memory, users, groups)?;
        self.lock().register(spec, true)?;
        self.changed();
        Ok(())
    }

    /// Removes a client added with RegisterClient.
    async fn unregister_client(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        name: String,
    ) -> Result<(), Error> {
        self.authorize(&header, conn).await?;
        self.lock().unregister(&name)?;
        self.changed();
        Ok(())
    }

    /// Sets a client's guaranteed (request) and maximum (limit) share of GPU time, 0..1.
    /// A negative value leaves that share as it is.
    async fn set_share(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        name: String,
        request: f64,
        limit: f64,
    ) -> Result<(), Error> {
        self.authorize(&header, conn).await?;
        check_number("request", request)?;
        check_number("limit", limit)?;
        let keep = |v: f64| (v >= 0.0).then_some(v);
        self.lock()
            .set_share(&name, keep(request), keep(limit), None)?;
        self.changed();
        Ok(())
    }

    /// Makes a client interactive (its work runs as soon as it has some, while batch clients'
    /// leases end at their next launch) or batch.
    async fn set_interactive(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        name: String,
        interactive: bool,
    ) -> Result<(), Error> {
        self.authorize(&header, conn).await?;
        self.lock().set_interactive(&name, interactive)?;
        self.changed();
        Ok(())
    }

    /// Sets a client's device memory cap in bytes, which applies on each GPU; 0 removes the
    /// cap.
    async fn set_memory_cap(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        name: String,
        bytes: u64,
    ) -> Result<(), Error> {
        self.authorize(&header, conn).await?;
        self.lock()
            .set_share(&name, None, None, Some((bytes > 0).then_some(bytes)))?;
        self.changed();
        Ok(())
    }

    /// How a client's device memory is served: as managed memory moved in and out at token
    /// hand-overs (`oversubscribe`), how much of it moves onto the GPU at a grant (`resident`
    /// bytes, 0 for all), and whether PyTorch processes release their cached memory while
    /// others wait. Processes attached already keep the mode they attached with.
    async fn set_memory_mode(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        name: String,
        oversubscribe: bool,
        resident: u64,
        release_cache: bool,
    ) -> Result<(), Error> {
        self.authorize(&header, conn).await?;
        let mode = MemoryMode {
            oversubscribe,
            resident: (resident > 0).then_some(resident),
            release_cache,
        };
        self.lock().set_memory_mode(&name, mode)?;
        self.changed();
        Ok(())
    }

    /// Every client with its shares and live usage: `memory` (the cap on each GPU, 0 for none),
    /// `memory_used`, `share_used`, `holding` and `waiting` over all GPUs, and `devices`, the
    /// same figures on each GPU it uses or used (`device` is the GPU's UUID), with `demand`, the
    /// demand estimates of its processes that hold or wait for a lease there, added up (0
    /// without overlap by demand).
    async fn list_clients(&self) -> Vec<api::Client> {
        self.lock().reports().iter().map(client_record).collect()
    }

    /// One client with its shares and live usage.
    async fn get_client(&self, name: String) -> Result<api::Client, Error> {
        let report = self.lock().report(&name);
        report
            .map(|r| client_record(&r))
            .ok_or_else(|| Error::UnknownClient(format!("there is no client named {name:?}")))
    }

    /// Usage kept in the state directory over the last `since_seconds` (0: all of it, counted by
    /// whole hours), grouped `by` "user", "client" or "day" (the server's local calendar days).
    /// Each entry has the group's name under that key, `gpu_ns` (GPU time charged),
    /// `memory_byte_seconds` (device memory held over time), `wait_ns` (time processes waited
    /// for a lease), `leases`, and `first_hour` and `last_hour` (Unix seconds). Root and the
    /// members of `admin_groups` get every user's rows; anyone else only their own (their row by
    /// user, and the clients and days they used, with their own figures).
    async fn get_usage(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
        since_seconds: u64,
        by: String,
    ) -> Result<Vec<api::UsageRow>, Error> {
        let (_, uid) = caller(&header, conn).await?;
        accounting::query(self.accounting.clone(), uid, since_seconds, &by)
            .await
            .map_err(|e| match e {
                QueryError::InvalidArgument(m) => Error::InvalidArgument(m),
                QueryError::Failed(m) => Error::Failed(m),
            })
    }

    /// The managed GPUs with live memory and state; `leases`, how leases run on each now: mps,
    /// one-at-a-time, concurrent, together or turns.
    async fn list_devices(&self) -> Vec<api::Device> {
        let devices = self.devices.clone();
        tokio::task::spawn_blocking(move || devices())
            .await
            .unwrap_or_default()
    }

    /// The GPU processes the last scan reported that are still at it: `kind` "unattached" (not
    /// attached through the hook), "memory" (an attached process NVML counts more device memory
    /// for than it reserved plus the context allowance: `measured` and `allowed` bytes) or
    /// "activity" (an attached process busy on the GPU while it held no lease: `measured` SM
    /// percent); with `device`, `pid`, `uid` (4294967295 when it could not be read), `client`
    /// (empty for "unattached"), `details` (the figures in words), `action` ("warned",
    /// "killed") and `since` (seconds since the epoch).
    async fn list_flagged_processes(&self) -> Vec<api::FlaggedProcess> {
        (self.flagged)()
    }

    /// Reads the config file again; a broken file is reported and the running config kept.
    async fn reload(
        &self,
        #[zbus(header)] header: Header<'_>,
        #[zbus(connection)] conn: &zbus::Connection,
    ) -> Result<(), Error> {
        self.authorize(&header, conn).await?;
        (self.reload)().map_err(Error::InvalidArgument)?;
        self.changed();
        Ok(())
    }

    #[zbus(property(emits_changed_signal = "const"))]
    async fn version(&self) -> String {
        env!("CARGO_PKG_VERSION").to_string()
    }

    #[zbus(property(emits_changed_signal = "const"))]
    async fn config_path(&self) -> String {
        self.lock().config_path.display().to_string()
    }

    /// Why the last reload failed; empty when the file on disk is the running config. Watch
    /// ConfigReloaded for changes.
    #[zbus(property(emits_changed_signal = "false"))]
    async fn config_error(&self) -> String {
        self.lock().config_error.clone().unwrap_or_default()
    }

    /// Managed memory held by oversubscribing processes, and the most they may hold (bytes).
    #[zbus(property(emits_changed_signal = "false"))]
    async fn managed_memory(&self) -> (u64, u64) {
        self.lock().managed_memory()
    }

    /// Processes attached through the hook. Watch ClientAttached/ClientDetached for changes.
    #[zbus(property(emits_changed_signal = "false"))]
    async fn attached_processes(&self) -> u32 {
        self.lock().session_count() as u32
    }

    #[zbus(signal)]
    async fn client_attached(
        emitter: &SignalEmitter<'_>,
        name: &str,
        pid: u32,
        uid: u32,
    ) -> zbus::Result<()>;

    #[zbus(signal)]
    async fn client_detached(emitter: &SignalEmitter<'_>, name: &str, pid: u32)
        -> zbus::Result<()>;

    #[zbus(signal)]
    async fn client_changed(emitter: &SignalEmitter<'_>, name: &str) -> zbus::Result<()>;

    #[zbus(signal)]
    async fn config_reloaded(
        emitter: &SignalEmitter<'_>,
        ok: bool,
        message: &str,
    ) -> zbus::Result<()>;

    /// A GPU process that did not attach through the hook; `action` is what was done about it.
    #[zbus(signal)]
    pub async fn unattached_process(
        emitter: &SignalEmitter<'_>,
        device: u32,
        pid: u32,
        action: &str,
    ) -> zbus::Result<()>;

    /// An attached process uses the GPU beyond what its hook reported: `kind` "memory" (NVML
    /// counts `measured` bytes of device memory for it, more than `allowed`: what it reserved
    /// plus the context allowance) or "activity" (its work kept the SMs `measured` percent busy
    /// while it held no lease; `allowed` 0); `action` is what was done about it: "warned" or
    /// "killed". Reported once per episode; ListFlaggedProcesses lists those still at it.
    #[zbus(signal)]
    pub async fn process_violation(
        emitter: &SignalEmitter<'_>,
        device: u32,
        pid: u32,
        uid: u32,
        client: &str,
        kind: &str,
        measured: u64,
        allowed: u64,
        action: &str,
    ) -> zbus::Result<()>;

    /// The MPS control daemon changed state: "started", "died", "gave-up".
    #[zbus(signal)]
    pub async fn mps_state_changed(
        emitter: &SignalEmitter<'_>,
        state: &str,
        message: &str,
    ) -> zbus::Result<()>;
}

/// Turns state events into D-Bus signals until the event channel closes.
pub async fn emit_signals(conn: zbus::Connection, mut events: broadcast::Receiver<Event>) {
    let Ok(emitter) = SignalEmitter::new(&conn, OBJECT_PATH) else {
        return;
    };
    loop {
        let event = match events.recv().await {
            Ok(e) => e,
            Err(broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!("dropped {n} D-Bus signals: too many events at once");
                continue;
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let sent = match &event {
            Event::Attached { client, pid, uid } => {
                Manager::client_attached(&emitter, client, *pid, *uid).await
            }
            Event::Detached { client, pid } => {
                Manager::client_detached(&emitter, client, *pid).await
            }
            Event::Changed { client } => Manager::client_changed(&emitter, client).await,
            Event::ConfigReloaded { ok, message } => {
                Manager::config_reloaded(&emitter, *ok, message).await
            }
        };
        if let Err(e) = sent {
            tracing::debug!("could not emit {event:?}: {e}");
        }
    }
}
