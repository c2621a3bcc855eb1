//! Client programs under the hook against a test's daemon: one process ([`Run`]), or several at
//! once on the fake driver's shared GPU ([`on_shared_gpu`]), and the daemon these tests run
//! ([`overlapping_daemon`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use super::hook_programs::{fakes, hook, Via};
use super::{Daemon, DaemonBuilder};

const TMP: &str = env!("CARGO_TARGET_TMPDIR");

/// gpushared as these tests run it: no NVML, quanta of 20 ms, unlimited memory by default, its
/// log at `warn`. `clients` is TOML appended to the config (use `{uid}` for the current uid).
/// With the scheduler's defaults: leases overlap while the GPU has room.
pub fn overlapping_daemon(clients: &str) -> DaemonBuilder {
    let uid = nix::unistd::getuid().as_raw();
    Daemon::builder()
        .table("daemon", "quantum = \"20ms\"\nclient_timeout = \"2s\"")
        .table("gpu", "nvml = false\nset_compute_mode = false")
        .table("defaults", "memory = \"unlimited\"")
        .config(&clients.replace("{uid}", &uid.to_string()))
        .log_level("warn")
}

/// One client process under the hook.
pub struct Run<'a> {
    via: Via,
    /// The preloaded library (the debug build unless set).
    pub hook: PathBuf,
    socket: Option<&'a Path>,
    client: &'a str,
    env: Vec<(&'a str, String)>,
    log: Option<PathBuf>,
}

impl<'a> Run<'a> {
    pub fn new(via: Via) -> Run<'a> {
        Run {
            via,
            hook: hook("debug"),
            socket: None,
            client: "",
            env: vec![],
            log: None,
        }
    }
    pub fn daemon(mut self, d: &'a Daemon) -> Self {
        self.socket = Some(&d.socket);
        self
    }
    /// The socket of a daemon the test scripts itself.
    pub fn socket(mut self, path: &'a Path) -> Self {
        self.socket = Some(path);
        self
    }
    pub fn client(mut self, name: &'a str) -> Self {
        self.client = name;
        self
    }
    pub fn log(mut self, path: &Path) -> Self {
        self.log = Some(path.to_path_buf());
        self
    }
    pub fn env(mut self, k: &'a str, v: &str) -> Self {
        self.env.push((k, v.to_string()));
        self
    }
    pub fn command(&self, ops: &[&str]) -> Command {
        let f = fakes().expect("fakes");
        let mut cmd = Command::new(f.client(self.via));
        cmd.args(ops)
            .env("LD_LIBRARY_PATH", &f.dir)
            .env("LD_PRELOAD", &self.hook)
            .env("GPUSHARE_CLIENT", self.client)
            .env_remove("GPUSHARE_NO_DAEMON");
        match self.socket {
            Some(s) => cmd.env("GPUSHARE_SOCKET", s),
            None => cmd.env(
                "GPUSHARE_SOCKET",
                Path::new(TMP).join("no-daemon-here.sock"),
            ),
        };
        if let Some(log) = &self.log {
            cmd.env("FAKE_CUDA_LOG", log);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        cmd
    }
    pub fn output(&self, ops: &[&str]) -> Output {
        self.command(ops).output().expect("run client")
    }
    /// Runs and returns stdout, asserting success.
    pub fn ok(&self, ops: &[&str]) -> String {
        let out = self.output(ops);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{:?} {ops:?} failed ({}):\n{stdout}{}",
            self.via,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }
}

/// A scratch directory with the paths [`on_shared_gpu`] takes in it: the fake's kernel log and
/// its shared GPUs' file.
pub fn shared_gpu_files() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let (log, gpu) = (dir.path().join("kernels.log"), dir.path().join("gpu"));
    (dir, log, gpu)
}

/// Processes under the hook on the fake's shared GPUs (`FAKE_CUDA_GPU`): asynchronous kernels
/// that run one after another on each GPU, as without MPS. The machine has two GPUs; a process
/// runs on the first unless its ops name another (`device:1`). Each `(client, ops)` (ops
/// separated by spaces) runs as its own process; returns their pids and stdout.
pub fn on_shared_gpu(
    d: &Daemon,
    log: &Path,
    gpu: &Path,
    runs: &[(&str, &str)],
) -> Vec<(u32, String)> {
    on_shared_gpu_with_stderr(d, log, gpu, runs, &[])
        .into_iter()
        .map(|(pid, out, _)| (pid, out))
        .collect()
}

/// [`on_shared_gpu`] with `env` set for every process; returns each one's stderr too.
pub fn on_shared_gpu_with_stderr(
    d: &Daemon,
    log: &Path,
    gpu: &Path,
    runs: &[(&str, &str)],
    env: &[(&str, &str)],
) -> Vec<(u32, String, String)> {
    spawn_on_shared_gpu(d, log, gpu, runs, env)
        .into_iter()
        .map(finished)
        .collect()
}

/// Starts the processes of [`on_shared_gpu_with_stderr`] and returns them running, their
/// stdout and stderr piped ([`finished`] waits for one).
pub fn spawn_on_shared_gpu(
    d: &Daemon,
    log: &Path,
    gpu: &Path,
    runs: &[(&str, &str)],
    env: &[(&str, &str)],
) -> Vec<Child> {
    runs.iter()
        .map(|(client, ops)| {
            let mut run = Run::new(Via::Dlsym)
                .daemon(d)
                .log(log)
                .client(client)
                .env("FAKE_CUDA_DEVICES", "2")
                .env("FAKE_CUDA_GPU", &gpu.display().to_string());
            for (k, v) in env {
                run = run.env(k, v);
            }
            run.command(&ops.split_whitespace().collect::<Vec<_>>())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect()
}

/// Waits for a process of [`spawn_on_shared_gpu`], asserting it succeeded: its pid, stdout and
/// stderr.
pub fn finished(c: Child) -> (u32, String, String) {
    let pid = c.id();
    let out = c.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}{stderr}");
    (pid, stdout, stderr)
}
