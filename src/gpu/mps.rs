//! The MPS control daemon: started in the foreground (`nvidia-cuda-mps-control -f`) as our child,
//! restarted with exponential backoff when it dies, and asked to `quit` at stop.

use super::GpuEvent;
use anyhow::{bail, Context};
use std::collections::VecDeque;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

/// The file in the log directory that receives the control daemon's own output.
pub const CONTROL_LOG: &str = "control.log";

/// Restart and stop timing of the MPS supervisor.
#[derive(Debug, Clone)]
pub struct MpsTiming {
    /// Wait before the first restart; doubles with every further one.
    pub backoff_initial: Duration,
    /// Longest wait between restarts.
    pub backoff_max: Duration,
    /// Give up after this many restarts within `restart_window`.
    pub max_restarts: u32,
    pub restart_window: Duration,
    /// A daemon that ran this long before dying restarts after `backoff_initial` again.
    pub stable_after: Duration,
    /// How long `quit` and the daemon's exit may take at stop before it is killed.
    pub stop_timeout: Duration,
}

impl Default for MpsTiming {
    fn default() -> Self {
        MpsTiming {
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            max_restarts: 6,
            restart_window: Duration::from_secs(600),
            stable_after: Duration::from_secs(60),
            stop_timeout: Duration::from_secs(15),
        }
    }
}

/// How to run `nvidia-cuda-mps-control`: the binary and the environment it shares with clients.
#[derive(Debug, Clone)]
pub(crate) struct MpsEnv {
    pub control: PathBuf,
    pub pipe_dir: PathBuf,
    pub log_dir: PathBuf,
    /// `CUDA_VISIBLE_DEVICES` for the daemon; `None` = all devices.
    pub visible_devices: Option<String>,
}

impl MpsEnv {
    fn command(&self) -> Command {
        let mut c = Command::new(&self.control);
        c.env("CUDA_MPS_PIPE_DIRECTORY", &self.pipe_dir)
            .env("CUDA_MPS_LOG_DIRECTORY", &self.log_dir);
        // The control daemon starts nvidia-cuda-mps-server from PATH; it lies beside the control
        // binary, which may be outside the service's PATH (e.g. /usr/local/nvidia/bin).
        if let Some(dir) = self.control.parent().filter(|d| d.is_absolute()) {
            let mut path = std::ffi::OsString::from(dir);
            if let Some(old) = std::env::var_os("PATH").filter(|p| !p.is_empty()) {
                path.push(":");
                path.push(old);
            }
            c.env("PATH", path);
        }
        match &self.visible_devices {
            Some(v) => {
                // NVML numbers devices in PCI bus order; make CUDA do the same.
                c.env("CUDA_VISIBLE_DEVICES", v)
                    .env("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
            }
            None => {
                c.env_remove("CUDA_VISIBLE_DEVICES");
            }
        }
        c
    }

    /// Creates the pipe directory (mode 0755, so clients of every user reach the daemon) and the
    /// log directory.
    pub fn prepare_dirs(&self) -> anyhow::Result<()> {
        fs::create_dir_all(&self.pipe_dir).with_context(|| {
            format!(
                "cannot create the MPS pipe directory {}",
                self.pipe_dir.display()
            )
        })?;
        fs::set_permissions(&self.pipe_dir, fs::Permissions::from_mode(0o755)).with_context(
            || {
                format!(
                    "cannot make {} readable for all users",
                    self.pipe_dir.display()
                )
            },
        )?;
        fs::create_dir_all(&self.log_dir).with_context(|| {
            format!(
                "cannot create the MPS log directory {}",
                self.log_dir.display()
            )
        })?;
        Ok(())
    }

    /// Starts the control daemon in the foreground; its output goes to `log_dir/control.log`.
    fn spawn_daemon(&self) -> anyhow::Result<Child> {
        let log_path = self.log_dir.join(CONTROL_LOG);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .with_context(|| format!("cannot open {}", log_path.display()))?;
        let err = log.try_clone()?;
        self.command()
            .arg("-f")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot start {} -f", self.control.display()))
    }

    /// Sends `commands` (one a line) to the running control daemon, the way
    /// `echo CMD | nvidia-cuda-mps-control` does, and returns what it printed.
    pub async fn send(&self, commands: &str, timeout: Duration) -> anyhow::Result<String> {
        let mut child = self
            .command()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("cannot run {}", self.control.display()))?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let input = if commands.ends_with('\n') {
            commands.to_string()
        } else {
            format!("{commands}\n")
        };
        let out = tokio::time::timeout(timeout, async move {
            stdin.write_all(input.as_bytes()).await?;
            drop(stdin);
            child.wait_with_output().await
        })
        .await
        .with_context(|| {
            format!(
                "{} did not answer {:?} within {timeout:?}",
                self.control.display(),
                commands.trim()
            )
        })??;
        if !out.status.success() {
            bail!(
                "{} {:?} failed ({}): {}",
                self.control.display(),
                commands.trim(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The pids of the MPS servers and of their clients.
    pub async fn servers_and_clients(&self) -> anyhow::Result<(Vec<u32>, Vec<u32>)> {
        let timeout = Duration::from_secs(5);
        let servers = parse_pids(&self.send("get_server_list", timeout).await?);
        let mut clients = Vec::new();
        for s in &servers {
            let out = self.send(&format!("get_client_list {s}"), timeout).await?;
            clients.extend(parse_pids(&out));
        }
        Ok((servers, clients))
    }
}

/// The numbers on the lines of a control daemon answer; other lines are ignored.
pub(crate) fn parse_pids(text: &str) -> Vec<u32> {
    text.lines()
        .filter_map(|l| l.trim().parse::<u32>().ok())
        .filter(|&p| p != 0)
        .collect()
}

/// What the supervisor knows about the control daemon.
#[derive(Debug, Default, Clone)]
pub(crate) struct MpsState {
    pub running: bool,
    pub pid: Option<u32>,
    pub restarts: u32,
    pub last_error: Option<String>,
    pub gave_up: bool,
}

/// A cheap handle for asking the supervised daemon questions.
#[derive(Clone)]
pub(crate) struct MpsHandle {
    pub env: Arc<MpsEnv>,
    pub state: Arc<Mutex<MpsState>>,
}

impl MpsHandle {
    pub fn state(&self) -> MpsState {
        self.state.lock().unwrap().clone()
    }
}

pub(crate) struct MpsSupervisor {
    handle: MpsHandle,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl MpsSupervisor {
    /// Starts the control daemon and its supervision. Fails only when the first start fails (e.g.
    /// the binary is missing); later deaths are restarted, and reported through `events`.
    /// `on_give_up` runs (blocking) when the supervisor stops restarting.
    pub async fn start(
        env: MpsEnv,
        timing: MpsTiming,
        events: mpsc::UnboundedSender<GpuEvent>,
        on_give_up: Box<dyn FnOnce() + Send>,
    ) -> anyhow::Result<MpsSupervisor> {
        env.prepare_dirs()?;
        quit_leftover(&env, timing.stop_timeout).await;
        let child = env.spawn_daemon()?;
        let handle = MpsHandle {
            env: Arc::new(env),
            state: Arc::default(),
        };
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(supervise(
            child,
            handle.clone(),
            timing,
            events,
            stop_rx,
            on_give_up,
        ));
        Ok(MpsSupervisor { handle, stop, task })
    }

    pub fn handle(&self) -> MpsHandle {
        self.handle.clone()
    }

    /// Asks the daemon to quit, waits for it, and ends the supervision.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        if let Err(e) = self.task.await {
            tracing::error!("the MPS supervisor failed: {e}");
        }
    }
}

async fn supervise(
    first: Child,
    handle: MpsHandle,
    timing: MpsTiming,
    events: mpsc::UnboundedSender<GpuEvent>,
    mut stop: watch::Receiver<bool>,
    on_give_up: Box<dyn FnOnce() + Send>,
) {
    let env = handle.env.clone();
    let set = |f: &dyn Fn(&mut MpsState)| f(&mut handle.state.lock().unwrap());
    let mut next: anyhow::Result<Child> = Ok(first);
    let mut delay = timing.backoff_initial;
    let mut recent: VecDeque<Instant> = VecDeque::new();
    loop {
        let started = Instant::now();
        let reason = match next {
            Ok(mut child) => {
                let pid = child.id();
                set(&|s| {
                    s.running = true;
                    s.pid = pid;
                });
                tracing::info!(
                    pid,
                    "MPS control daemon started (pipe directory {})",
                    env.pipe_dir.display()
                );
                let _ = events.send(GpuEvent::MpsStarted);
                let status = tokio::select! {
                    status = child.wait() => status,
                    _ = stop.changed() => {
                        quit(&mut child, &env, timing.stop_timeout).await;
                        set(&|s| { s.running = false; s.pid = None; });
                        return;
                    }
                };
                set(&|s| {
                    s.running = false;
                    s.pid = None;
                });
                describe_exit(&env, status)
            }
            Err(e) => format!("{e:#}"),
        };
        if started.elapsed() >= timing.stable_after {
            delay = timing.backoff_initial;
        }
        let now = Instant::now();
        while recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > timing.restart_window)
        {
            recent.pop_front();
        }
        if recent.len() >= timing.max_restarts as usize {
            tracing::error!(
                "MPS control daemon died: {reason}; giving up after {} restarts within {:?}",
                recent.len(),
                timing.restart_window
            );
            set(&|s| {
                s.last_error = Some(reason.clone());
                s.gave_up = true;
            });
            let _ = events.send(GpuEvent::MpsGaveUp { reason });
            let _ = tokio::task::spawn_blocking(on_give_up).await;
            let _ = stop.changed().await;
            return;
        }
        tracing::warn!("MPS control daemon died: {reason}; restarting in {delay:?}");
        set(&|s| s.last_error = Some(reason.clone()));
        let _ = events.send(GpuEvent::MpsDied {
            reason,
            restart_in: delay,
        });
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return,
        }
        delay = (delay * 2).min(timing.backoff_max);
        recent.push_back(Instant::now());
        set(&|s| s.restarts += 1);
        next = env.spawn_daemon();
    }
}

/// A control daemon that still serves our pipe directory (left by a gpushared that could not
/// stop) would make ours fail; ask it to quit, and end it if it does not.
async fn quit_leftover(env: &MpsEnv, timeout: Duration) {
    let leftovers = control_daemons_using(&env.pipe_dir);
    if leftovers.is_empty() {
        return;
    }
    tracing::warn!(
        "an MPS control daemon (pid {leftovers:?}) from an earlier run still serves {}; asking it to quit",
        env.pipe_dir.display()
    );
    if let Err(e) = env.send("quit", timeout).await {
        tracing::warn!("{e:#}");
    }
    let deadline = Instant::now() + timeout;
    while !control_daemons_using(&env.pipe_dir).is_empty() {
        if Instant::now() >= deadline {
            for pid in control_daemons_using(&env.pipe_dir) {
                tracing::warn!("MPS control daemon {pid} did not quit; killing it");
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Running `*mps-control -d|-f` processes whose CUDA_MPS_PIPE_DIRECTORY is `pipe_dir`.
fn control_daemons_using(pipe_dir: &Path) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let want = format!("CUDA_MPS_PIPE_DIRECTORY={}", pipe_dir.display());
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
                return false;
            };
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            let is_daemon = args.iter().any(|a| a.ends_with(b"mps-control"))
                && args.iter().any(|a| *a == b"-d" || *a == b"-f");
            is_daemon
                && fs::read(format!("/proc/{pid}/environ"))
                    .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == want.as_bytes()))
                && !is_zombie(*pid)
        })
        .collect()
}

fn is_zombie(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z'))
    })
}

/// `echo quit | nvidia-cuda-mps-control`, then wait for our child; kill it if it hangs.
async fn quit(child: &mut Child, env: &MpsEnv, timeout: Duration) {
    if let Err(e) = env.send("quit", timeout).await {
        tracing::warn!("cannot ask the MPS control daemon to quit: {e:#}");
    }
    match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => tracing::info!("MPS control daemon stopped ({status})"),
        Ok(Err(e)) => tracing::warn!("cannot wait for the MPS control daemon: {e}"),
        Err(_) => {
            tracing::warn!("MPS control daemon did not quit within {timeout:?}; killing it");
            if let Some(pid) = child.id() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
                if tokio::time::timeout(Duration::from_secs(2), child.wait())
                    .await
                    .is_ok()
                {
                    return;
                }
            }
            let _ = child.kill().await;
        }
    }
}

fn describe_exit(env: &MpsEnv, status: std::io::Result<ExitStatus>) -> String {
    let what = match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            _ => format!("ended ({s})"),
        },
        Err(e) => format!("cannot be waited for: {e}"),
    };
    match last_log_line(&env.log_dir.join(CONTROL_LOG)) {
        Some(line) => format!("{} {what}; its last words: {line}", env.control.display()),
        None => format!("{} {what}", env.control.display()),
    }
}

fn last_log_line(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    file.seek(SeekFrom::Start(len.saturating_sub(4096))).ok()?;
    let mut tail = Vec::new();
    file.read_to_end(&mut tail).ok()?;
    let text = String::from_utf8_lossy(&tail);
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(line.trim().chars().take(300).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_are_the_numeric_lines() {
        assert_eq!(parse_pids("12\n 34 \nno\n0\n\n56"), vec![12, 34, 56]);
        assert!(parse_pids("").is_empty());
    }
}
