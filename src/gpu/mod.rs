//! The GPU side of the daemon: NVML (inventory, compute mode, process list), the supervised MPS
//! control daemon, and the scan for GPU processes that bypass the hook or do more on the GPU
//! than their hook reports.
//!
//! NVML calls block, so they run on tokio's blocking pool; the `Nvml` handle is shared in an `Arc`.
//! With `gpu.nvml = false` nothing touches NVML: [`GpuManager::devices`] is empty and the scan sees
//! only MPS clients.

mod attached;
mod enforce;
mod flagged;
mod mps;
mod nvml;
mod readings;
mod scan;
mod unattached;
mod verify;

pub use attached::{AttachedProcess, AttachedProcesses};
pub use enforce::action_word;
pub use flagged::FlaggedProcess;
pub use mps::{MpsTiming, CONTROL_LOG};
pub use nvml::compute_mode_name;
pub use verify::Violation;

use crate::config::{GpuConfig, UnattachedPolicy};
use anyhow::Context;
use flagged::FlaggedList;
use mps::{MpsEnv, MpsSupervisor};
use nvml::NvmlDevices;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// One managed GPU, as read from NVML.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DeviceInfo {
    /// NVML index.
    pub index: u32,
    pub name: String,
    pub uuid: String,
    /// As `nvidia-smi` names it: Default, Exclusive_Process, Prohibited, Exclusive_Thread.
    pub compute_mode: String,
    /// The mode the device had when the daemon started; put back at stop.
    pub original_compute_mode: String,
    pub memory_total: u64,
    pub memory_used: u64,
    pub utilization_gpu: Option<u32>,
    /// Processes with a compute context (under MPS: the server and its clients).
    pub processes: Vec<GpuProcess>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct GpuProcess {
    pub pid: u32,
    pub used_memory: Option<u64>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct MpsStatus {
    /// `gpu.mps` is on.
    pub enabled: bool,
    /// The control daemon runs now.
    pub running: bool,
    /// How often it was restarted since the daemon started.
    pub restarts: u32,
    pub pipe_dir: Option<String>,
    pub last_error: Option<String>,
}

/// Things the daemon logs and signals over D-Bus.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuEvent {
    /// The MPS control daemon (re)started.
    MpsStarted,
    /// It died and restarts after `restart_in`.
    MpsDied {
        reason: String,
        restart_in: Duration,
    },
    /// It died too often; MPS stays off (and the compute modes are restored) until the daemon
    /// restarts.
    MpsGaveUp { reason: String },
    /// A process uses the GPU without being attached through the hook. `action` is what was done:
    /// `Warn` (reported only, also when a kill failed) or `Kill` (SIGKILL sent).
    Unattached {
        device: u32,
        pid: u32,
        action: UnattachedPolicy,
    },
    /// An attached process uses the GPU beyond what its hook reported. `action` as for
    /// `Unattached`, by the `violations` policy.
    Violation {
        device: u32,
        pid: u32,
        uid: u32,
        client: String,
        violation: Violation,
        action: UnattachedPolicy,
    },
}

/// Timing knobs that are not in the config file; tests shorten them.
#[derive(Debug, Clone, Default)]
pub struct GpuOptions {
    pub mps: MpsTiming,
    /// How often the scan asks MPS for its clients while NVML lists processes too; `None` = 30 s.
    pub mps_list_every: Option<Duration>,
}

pub struct GpuManager {
    nvml: Option<Arc<NvmlDevices>>,
    mps: Option<MpsSupervisor>,
    mps_pipe_dir: Option<PathBuf>,
    scanner: Option<JoinHandle<()>>,
    /// Where the compute modes to restore are noted, when we change them.
    record: Option<PathBuf>,
    /// Why NVML is not used although `gpu.nvml` asks for it.
    nvml_error: Option<String>,
    /// The processes the scan reported that are still at it.
    flagged: FlaggedList,
}

impl GpuManager {
    /// Opens NVML (`cfg.nvml_library`, else the system library; if it cannot be loaded, logs why
    /// and goes on without it) and records the compute mode of each device in `cfg.devices`
    /// (empty = all; a missing device is an error); with `cfg.set_compute_mode` and `cfg.mps` sets
    /// them to EXCLUSIVE_PROCESS; starts and supervises the MPS control daemon when `cfg.mps`;
    /// scans every `cfg.scan_interval` for unattached GPU processes (unless `cfg.unattached` is
    /// `allow`) and for attached ones that do more than their hook reports (unless
    /// `cfg.violations` is `allow`).
    pub async fn start(
        cfg: &GpuConfig,
        attached: AttachedProcesses,
        events: mpsc::UnboundedSender<GpuEvent>,
    ) -> anyhow::Result<GpuManager> {
        Self::start_with(cfg, attached, events, GpuOptions::default()).await
    }

    pub async fn start_with(
        cfg: &GpuConfig,
        attached: AttachedProcesses,
        events: mpsc::UnboundedSender<GpuEvent>,
        options: GpuOptions,
    ) -> anyhow::Result<GpuManager> {
        let sets_mode = cfg.nvml && cfg.set_compute_mode && cfg.mps;
        // The compute-mode record lives in the pipe directory: gone at reboot, like the modes.
        let record = sets_mode.then(|| cfg.mps_pipe_dir.join(nvml::COMPUTE_MODE_RECORD));
        let mps_env = cfg.mps.then(|| MpsEnv {
            control: cfg.mps_control.clone(),
            pipe_dir: cfg.mps_pipe_dir.clone(),
            log_dir: cfg.mps_log_dir.clone(),
            visible_devices: None,
        });
        if let Some(env) = &mps_env {
            env.prepare_dirs()
                .context("cannot start MPS (gpu.mps = true)")?;
        }

        let mut nvml_error = None;
        let nvml = if cfg.nvml {
            let library = cfg.nvml_library.clone();
            let indices = cfg.devices.clone();
            let adopt = record.clone();
            let opened = tokio::task::spawn_blocking(move || {
                let nvml = match NvmlDevices::load(library.as_deref()) {
                    Ok(nvml) => nvml,
                    Err(e) => return Ok(Err(e)),
                };
                let mut devices = NvmlDevices::open(nvml, &indices)?;
                if let Some(record) = adopt {
                    devices.adopt_record(&record);
                }
                anyhow::Ok(Ok(devices))
            })
            .await
            .context("NVML start-up panicked")??;
            match opened {
                Ok(devices) => Some(Arc::new(devices)),
                // No driver (a machine without GPU, a container): scheduling works without NVML.
                Err(e) => {
                    let e = format!("{e:#}");
                    tracing::error!(
                        "{e}; running without NVML: no device list, compute mode, process scan or \
                         checks of attached processes (set gpu.nvml = false to silence this)"
                    );
                    nvml_error = Some(e);
                    None
                }
            }
        } else {
            None
        };
        let restore = {
            let nvml = nvml.clone();
            let record = record.clone();
            move || {
                if let Some(n) = nvml {
                    n.restore_compute_modes(record.as_deref());
                }
            }
        };

        if sets_mode {
            if let Some(n) = nvml.clone() {
                let record = record.clone();
                tokio::task::spawn_blocking(move || n.set_exclusive_process(record.as_deref()))
                    .await?;
            }
        }

        let mut mps = None;
        if let Some(mut env) = mps_env {
            // By UUID when NVML knows them: CUDA may number devices differently.
            env.visible_devices = match (&nvml, cfg.devices.is_empty()) {
                (_, true) => None,
                (Some(n), false) => Some(n.uuids().join(",")),
                (None, false) => Some(
                    cfg.devices
                        .iter()
                        .map(u32::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                ),
            };
            let on_give_up: Box<dyn FnOnce() + Send> = Box::new(restore.clone());
            match MpsSupervisor::start(env, options.mps.clone(), events.clone(), on_give_up).await {
                Ok(s) => mps = Some(s),
                Err(e) => {
                    let _ = tokio::task::spawn_blocking(restore).await;
                    return Err(e.context("cannot start MPS (gpu.mps = true)"));
                }
            }
        }

        let flagged = FlaggedList::default();
        // Attached processes are checked against NVML's readings only.
        let verifying = cfg.violations != UnattachedPolicy::Allow;
        let scanning = cfg.unattached != UnattachedPolicy::Allow || (verifying && nvml.is_some());
        let scanner = scanning.then(|| {
            let scanner = scan::Scanner {
                nvml: nvml.clone(),
                mps: mps.as_ref().map(MpsSupervisor::handle),
                attached,
                unattached: cfg.unattached,
                violations: cfg.violations,
                context_allowance: cfg.context_allowance,
                check_activity: !cfg.mps,
                interval: cfg.scan_interval,
                mps_device: nvml
                    .as_ref()
                    .and_then(|n| n.indices().first().copied())
                    .or(cfg.devices.first().copied())
                    .unwrap_or(0),
                mps_list_every: options.mps_list_every.unwrap_or(Duration::from_secs(30)),
                events,
                flagged: flagged.clone(),
            };
            tokio::spawn(scanner.run())
        });

        Ok(GpuManager {
            nvml,
            mps_pipe_dir: cfg.mps.then(|| cfg.mps_pipe_dir.clone()),
            mps,
            scanner,
            record,
            nvml_error,
            flagged,
        })
    }

    /// A fresh NVML reading of every managed device; empty without NVML.
    ///
    /// Blocks for the NVML calls (a few milliseconds); on a multi-threaded tokio runtime it tells
    /// tokio so. Async callers may prefer [`devices_async`](Self::devices_async).
    pub fn devices(&self) -> Vec<DeviceInfo> {
        let Some(nvml) = &self.nvml else {
            return Vec::new();
        };
        let multi_thread = tokio::runtime::Handle::try_current()
            .map(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
            .unwrap_or(false);
        if multi_thread {
            tokio::task::block_in_place(|| nvml.snapshot())
        } else {
            nvml.snapshot()
        }
    }

    /// Why NVML could not be loaded although `gpu.nvml = true` (the daemon then runs without it).
    pub fn nvml_error(&self) -> Option<String> {
        self.nvml_error.clone()
    }

    /// A reader of [`devices`](Self::devices) that outlives borrows of the manager, for callers
    /// on a blocking thread (e.g. the D-Bus `ListDevices` through `spawn_blocking`).
    pub fn device_reader(&self) -> Arc<dyn Fn() -> Vec<DeviceInfo> + Send + Sync> {
        let nvml = self.nvml.clone();
        Arc::new(move || nvml.as_ref().map(|n| n.snapshot()).unwrap_or_default())
    }

    /// The processes the last scan reported and that are still at it (unattached, or attached
    /// and using the GPU beyond what their hook reported), as a reader that outlives borrows of
    /// the manager.
    pub fn flagged_reader(&self) -> Arc<dyn Fn() -> Vec<FlaggedProcess> + Send + Sync> {
        let flagged = self.flagged.clone();
        Arc::new(move || flagged.lock().unwrap_or_else(|p| p.into_inner()).clone())
    }

    /// A reader of [`mps_status`](Self::mps_status) that outlives borrows of the manager.
    pub fn mps_status_reader(&self) -> Arc<dyn Fn() -> MpsStatus + Send + Sync> {
        let handle = self.mps.as_ref().map(MpsSupervisor::handle);
        let pipe_dir = self.mps_pipe_dir.clone();
        Arc::new(move || mps_status(handle.as_ref(), pipe_dir.as_deref()))
    }

    pub async fn devices_async(&self) -> Vec<DeviceInfo> {
        match &self.nvml {
            Some(nvml) => {
                let nvml = nvml.clone();
                tokio::task::spawn_blocking(move || nvml.snapshot())
                    .await
                    .unwrap_or_default()
            }
            None => Vec::new(),
        }
    }

    pub fn mps_status(&self) -> MpsStatus {
        let handle = self.mps.as_ref().map(MpsSupervisor::handle);
        mps_status(handle.as_ref(), self.mps_pipe_dir.as_deref())
    }

    /// The pipe directory clients must use (`CUDA_MPS_PIPE_DIRECTORY`), while MPS is enabled and
    /// the supervisor has not given up on it.
    pub fn mps_pipe_dir(&self) -> Option<PathBuf> {
        let mps = self.mps.as_ref()?;
        if mps.handle().state().gave_up {
            return None;
        }
        self.mps_pipe_dir.clone()
    }

    /// Sends one command to the MPS control daemon (as `echo CMD | nvidia-cuda-mps-control`) and
    /// returns its answer, e.g. `set_default_active_thread_percentage 50`.
    pub async fn mps_command(&self, command: &str) -> anyhow::Result<String> {
        let mps = self.mps.as_ref().context("MPS is not enabled (gpu.mps)")?;
        mps.handle()
            .env
            .send(command, Duration::from_secs(10))
            .await
    }

    /// Stops the scan, asks the MPS control daemon to quit and waits for it, then restores the
    /// compute modes and shuts NVML down.
    pub async fn stop(mut self) {
        if let Some(scanner) = self.scanner.take() {
            scanner.abort();
            let _ = scanner.await;
        }
        if let Some(mps) = self.mps.take() {
            mps.stop().await;
        }
        if let Some(nvml) = self.nvml.take() {
            let record = self.record.take();
            let _ = tokio::task::spawn_blocking(move || {
                nvml.restore_compute_modes(record.as_deref());
                drop(nvml);
            })
            .await;
        }
    }
}

fn mps_status(handle: Option<&mps::MpsHandle>, pipe_dir: Option<&std::path::Path>) -> MpsStatus {
    let state = handle.map(|h| h.state()).unwrap_or_default();
    MpsStatus {
        enabled: handle.is_some(),
        running: state.running,
        restarts: state.restarts,
        pipe_dir: pipe_dir.map(|p| p.display().to_string()),
        last_error: state.last_error,
    }
}

/// The attached-process source for a daemon that has none (tests, `gpushared` without clients).
pub fn no_attached_processes() -> AttachedProcesses {
    Arc::new(Vec::new)
}
