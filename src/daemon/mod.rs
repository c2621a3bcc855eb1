//! `gpushared`: the daemon. Wires the config, the state, the socket server, the D-Bus API and the
//! GPU side together, and talks to systemd.

pub mod accounting;
pub mod args;
pub mod config_watch;
pub mod dbus_api;
pub mod dbus_objects;
pub mod gpu_events;
pub mod identity;
pub mod metrics;
pub mod registrations;
pub mod service_notify;
pub mod socket_server;
pub mod state;
pub mod state_dir;
pub mod status;
pub mod usage;

use crate::bus::BusChoice;
use crate::config::Config;
use crate::gpu::GpuManager;
use anyhow::Context;
use args::DaemonArgs;
use state::{Event, State};
use std::sync::{Arc, Mutex};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{broadcast, Notify};

/// How long the daemon waits for the bus before giving up at start.
const BUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub async fn run(args: DaemonArgs) -> anyhow::Result<()> {
    // First, before anything else reads the environment: the socket systemd may have passed.
    let activated =
        socket_server::from_systemd().context("cannot take the socket systemd passed")?;
    let mut config = Config::load(&args.config)
        .map_err(anyhow::Error::msg)
        .context("cannot start")?;
    if let Some(dir) = &args.socket_dir {
        config.daemon.socket_dir = dir.clone();
    }
    for note in &config.notes {
        tracing::info!("{note}");
    }
    let chosen = state_dir::choose(
        args.state_dir.as_deref(),
        &config.daemon.state_dir,
        &state_dir::Env::from_process(),
        state_dir::writable,
    );
    match &chosen.dir {
        Some(dir) => tracing::info!(
            "keeping usage and registered clients in {} ({})",
            dir.display(),
            chosen.why
        ),
        None if matches!(config.daemon.state_dir, crate::config::StateDir::Off)
            || args.state_dir.is_some() =>
        {
            tracing::info!("no state directory: {}", chosen.why)
        }
        None => tracing::warn!("no state directory: {}", chosen.why),
    }
    let state_dir = chosen.dir.clone();
    let socket_path = config.socket_path();
    let hello_timeout = config.daemon.client_timeout;
    let (events, _) = broadcast::channel::<Event>(1024);
    let state = Arc::new(Mutex::new(State::new(
        config,
        args.config.clone(),
        events.clone(),
    )));
    let wake = Arc::new(Notify::new());
    // Registered clients: those kept across reboots in the state directory, runtime ones in the
    // socket's directory (emptied at boot).
    let registrations_dirs: Vec<(std::path::PathBuf, registrations::Kept)> = state_dir
        .iter()
        .map(|d| (d.clone(), registrations::Kept::Always))
        .chain(
            socket_path
                .parent()
                .map(|d| (d.to_path_buf(), registrations::Kept::UntilReboot)),
        )
        .collect();
    for (dir, kept) in &registrations_dirs {
        registrations::restore(&state, dir, *kept);
        tokio::spawn(registrations::keep(
            state.clone(),
            dir.clone(),
            *kept,
            events.subscribe(),
        ));
    }
    let accounting =
        Arc::new(accounting::Accounting::start(state.clone(), state_dir.ok_or(chosen.why)).await);

    let owned_socket = activated.is_none();
    let listener = match activated {
        Some(listener) => {
            let path = listener
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                .unwrap_or_default();
            tracing::info!(socket = %path, "listening for CUDA processes on the socket from systemd");
            listener
        }
        None => {
            let listener = socket_server::bind(&socket_path)
                .with_context(|| format!("cannot listen on {}", socket_path.display()))?;
            tracing::info!(socket = %socket_path.display(), "listening for CUDA processes");
            listener
        }
    };

    let reload: Arc<dyn Fn() -> Result<(), String> + Send + Sync> = {
        let state = state.clone();
        let wake = wake.clone();
        Arc::new(move || {
            let r = config_watch::reload_from_disk(&state);
            wake.notify_one();
            r
        })
    };

    let (gpu_tx, gpu_rx) = tokio::sync::mpsc::unbounded_channel();
    let attached: crate::gpu::AttachedProcesses = {
        let state = state.clone();
        Arc::new(move || {
            state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .attached_processes()
        })
    };
    let gpu_config = state
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .config
        .gpu
        .clone();
    let gpu = GpuManager::start(&gpu_config, attached, gpu_tx)
        .await
        .context("cannot take over the GPU")?;
    state.lock().unwrap_or_else(|p| p.into_inner()).mps_pipe_dir = gpu.mps_pipe_dir();
    let (read_devices, read_mps) = (gpu.device_reader(), gpu.mps_status_reader());
    let metrics_events = events.subscribe();
    let devices: dbus_api::DeviceLister = {
        let (read_devices, read_mps) = (read_devices.clone(), read_mps.clone());
        let state = state.clone();
        Arc::new(move || {
            let mps = read_mps();
            let devices = read_devices();
            let state = state.lock().unwrap_or_else(|p| p.into_inner());
            devices
                .iter()
                .map(|d| gpu_events::device_record(d, &mps, state.leases(&d.uuid)))
                .collect()
        })
    };

    let flagged: dbus_api::FlaggedLister = {
        let read = gpu.flagged_reader();
        Arc::new(move || read().iter().map(gpu_events::flagged_record).collect())
    };

    let bus = match &args.bus {
        BusChoice::None => None,
        choice => {
            let manager = dbus_api::Manager {
                state: state.clone(),
                wake: wake.clone(),
                use_polkit: matches!(choice, BusChoice::System),
                devices: devices.clone(),
                flagged: flagged.clone(),
                reload: reload.clone(),
                accounting: accounting.clone(),
            };
            let connect = choice
                .builder()?
                .name(dbus_api::BUS_NAME)?
                .serve_at(dbus_api::OBJECT_PATH, manager)?
                .serve_at(dbus_api::OBJECT_PATH, zbus::fdo::ObjectManager)?
                .build();
            let conn = tokio::time::timeout(BUS_TIMEOUT, connect)
                .await
                .map_err(|_| {
                    anyhow::anyhow!("the {choice} bus did not answer within {BUS_TIMEOUT:?}")
                })
                .and_then(|r| r.map_err(anyhow::Error::from))
                .with_context(|| {
                    format!("cannot own {} on the {choice} bus", dbus_api::BUS_NAME)
                })?;
            tracing::info!(bus = %choice, name = dbus_api::BUS_NAME, "D-Bus API up");
            tokio::spawn(dbus_api::emit_signals(conn.clone(), events.subscribe()));
            tokio::spawn(dbus_objects::run(
                conn.clone(),
                state.clone(),
                read_devices,
                read_mps,
            ));
            Some(conn)
        }
    };

    tokio::spawn(gpu_events::report(gpu_rx, bus.clone(), state.clone()));
    tokio::spawn(socket_server::serve(
        listener,
        state.clone(),
        wake.clone(),
        status::Listers {
            devices,
            flagged,
            accounting: accounting.clone(),
        },
        hello_timeout,
    ));
    tokio::spawn(socket_server::run_scheduler_clock(
        state.clone(),
        wake.clone(),
    ));
    tokio::spawn(config_watch::watch_file(
        args.config.clone(),
        reload.clone(),
    ));
    tokio::spawn(service_notify::report_status(
        state.clone(),
        events.subscribe(),
    ));
    tokio::spawn(accounting::run(accounting.clone()));
    tokio::spawn(metrics::run(
        metrics::Sources {
            state: state.clone(),
            accounting: accounting.clone(),
            mps: gpu.mps_status_reader(),
            devices: gpu.device_reader(),
            flagged: gpu.flagged_reader(),
        },
        metrics_events,
    ));
    service_notify::ready();
    service_notify::spawn_watchdog(state.clone());

    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    loop {
        tokio::select! {
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config");
                let _ = reload();
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    tracing::info!("stopping");
    service_notify::stopping();
    for (dir, kept) in &registrations_dirs {
        registrations::save(&state, dir, *kept);
    }
    accounting::finish(accounting).await;
    gpu.stop().await;
    drop(bus);
    // A socket from systemd stays for the next daemon; processes re-attach to it.
    if owned_socket {
        let _ = std::fs::remove_file(&socket_path);
    }
    Ok(())
}
