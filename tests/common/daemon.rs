//! A real gpushared for a test: [`DaemonBuilder`] says how it is configured and started,
//! [`Daemon`] runs it (killed on drop), restarts and stops it, and talks to it.
//!
//! Each daemon has a directory of its own ([`Daemon::dir`]) with its config (`gpushare.toml`),
//! its socket (`run/gpushare.sock`), its state (`state/`, unless the test gives another or lets
//! the daemon choose), its log (`gpushared.log`: stdout and stderr) and the files of its
//! [`FakeGpu`], if it has one.

use std::fs::OpenOptions;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use super::{open_tempdir, wait_for, Conn, FakeGpu, TestBus, GPUSHARE, GPUSHARED};

/// How long a daemon may take to listen (and to own its bus name) after it starts.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How a test's gpushared is configured and started; [`Daemon::builder`] makes one.
pub struct DaemonBuilder {
    /// TOML tables in the order first named, each with the keys added to it. A table named here
    /// must not be in `text` too.
    tables: Vec<(String, Vec<String>)>,
    /// TOML written after the tables.
    text: String,
    bus: Option<String>,
    env: Vec<(String, String)>,
    env_removed: Vec<String>,
    fake_gpu: Option<FakeGpu>,
    log_level: String,
    state: StateChoice,
    uid: Option<u32>,
    stop_within: Duration,
}

/// Where a test's daemon keeps its state.
#[derive(Clone)]
enum StateChoice {
    /// `state/` in its directory.
    Own,
    /// `--state-dir` this one.
    Dir(PathBuf),
    /// No `--state-dir`: the daemon picks it.
    Daemons,
}

impl DaemonBuilder {
    /// Appends `toml` to the config, after its tables (a whole config file, or tables of its own).
    pub fn config(mut self, toml: &str) -> Self {
        self.text.push_str(toml);
        self
    }

    /// Adds `toml` (keys) to the config's table `name` (`daemon`, `gpu`, `clients.a`...).
    pub fn table(mut self, name: &str, toml: &str) -> Self {
        let lines = match self.tables.iter_mut().find(|(n, _)| n == name) {
            Some((_, lines)) => lines,
            None => {
                self.tables.push((name.into(), vec![]));
                &mut self.tables.last_mut().unwrap().1
            }
        };
        lines.push(toml.into());
        self
    }

    /// Serves the D-Bus API on `bus` (default: no bus, `--bus none`); `start` then waits until
    /// the daemon owns its name there.
    pub fn bus(mut self, bus: &TestBus) -> Self {
        self.bus = Some(bus.address.clone());
        self
    }

    /// Sets an environment variable of the daemon.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Leaves an environment variable of the tests out of the daemon's.
    pub fn env_remove(mut self, key: &str) -> Self {
        self.env_removed.push(key.into());
        self
    }

    /// Runs the daemon as `uid` (and its group), which then owns the daemon's directory.
    pub fn user(mut self, uid: u32) -> Self {
        self.uid = Some(uid);
        self
    }

    /// Manages `gpu`: its keys go first in the `[gpu]` table.
    pub fn fake_gpu(mut self, gpu: FakeGpu) -> Self {
        self.fake_gpu = Some(gpu);
        self.table("gpu", "")
    }

    /// `--log` (default `debug`).
    pub fn log_level(mut self, level: &str) -> Self {
        self.log_level = level.into();
        self
    }

    /// Keeps the usage in `state` (`--state-dir`) instead of a directory of the daemon's own.
    pub fn state_dir(mut self, state: &Path) -> Self {
        self.state = StateChoice::Dir(state.into());
        self
    }

    /// Starts the daemon without `--state-dir`: it keeps its state where it chooses.
    pub fn daemon_chooses_state_dir(mut self) -> Self {
        self.state = StateChoice::Daemons;
        self
    }

    /// How long [`Daemon::stop`] waits for the daemon to exit after SIGTERM (default 30 s).
    pub fn stop_within(mut self, within: Duration) -> Self {
        self.stop_within = within;
        self
    }

    /// The config file: the tables (`fake_gpu_keys` first in `[gpu]`), then the text.
    fn config_text(&self, fake_gpu_keys: &str) -> String {
        let mut text = String::new();
        for (name, lines) in &self.tables {
            text += &format!("[{name}]\n");
            if name == "gpu" {
                text += fake_gpu_keys;
            }
            for line in lines {
                text += line;
                if !line.is_empty() && !line.ends_with('\n') {
                    text.push('\n');
                }
            }
        }
        text + &self.text
    }

    /// Starts the daemon and waits until it listens on its socket (and owns its bus name).
    pub fn start(self) -> Daemon {
        let dir = open_tempdir();
        let fake_gpu_keys = match &self.fake_gpu {
            Some(gpu) => gpu.install(dir.path()),
            None => String::new(),
        };
        let config = dir.path().join("gpushare.toml");
        std::fs::write(&config, self.config_text(&fake_gpu_keys)).unwrap();
        let log = dir.path().join("gpushared.log");
        std::fs::File::create(&log).unwrap();
        if let Some(uid) = self.uid {
            chown_all(dir.path(), uid);
        }
        let launch = Launch {
            sockets: dir.path().join("run"),
            state: match self.state {
                StateChoice::Own => Some(dir.path().join("state")),
                StateChoice::Dir(d) => Some(d),
                StateChoice::Daemons => None,
            },
            config: config.clone(),
            bus: self.bus.clone(),
            env: self.env,
            env_removed: self.env_removed,
            uid: self.uid,
            log_level: self.log_level,
            log,
        };
        let mut d = Daemon {
            child: launch.spawn(),
            socket: launch.sockets.join("gpushare.sock"),
            config,
            bus: self.bus,
            dir,
            launch,
            stop_within: self.stop_within,
        };
        d.wait_ready();
        d
    }
}

/// Gives `path` and everything under it to `uid` (and the group of the same number).
fn chown_all(path: &Path, uid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
    if path.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            chown_all(&entry.unwrap().path(), uid);
        }
    }
}

/// The command line and environment a daemon starts (and restarts) with.
struct Launch {
    config: PathBuf,
    sockets: PathBuf,
    /// `--state-dir`, if given.
    state: Option<PathBuf>,
    bus: Option<String>,
    env: Vec<(String, String)>,
    env_removed: Vec<String>,
    uid: Option<u32>,
    log_level: String,
    log: PathBuf,
}

impl Launch {
    fn spawn(&self) -> Child {
        use std::os::unix::process::CommandExt;
        let log = OpenOptions::new().append(true).open(&self.log).unwrap();
        let mut cmd = Command::new(GPUSHARED);
        cmd.arg("--config")
            .arg(&self.config)
            .arg("--socket-dir")
            .arg(&self.sockets);
        if let Some(state) = &self.state {
            cmd.arg("--state-dir").arg(state);
        }
        cmd.arg("--bus")
            .arg(self.bus.as_deref().unwrap_or("none"))
            .arg("--log")
            .arg(&self.log_level)
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for k in &self.env_removed {
            cmd.env_remove(k);
        }
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        if let Some(uid) = self.uid {
            cmd.uid(uid).gid(uid);
        }
        cmd.spawn().expect("start gpushared")
    }
}

/// A real gpushared with a directory, config file and socket of its own; killed on drop.
pub struct Daemon {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
    /// The address of the bus it serves the D-Bus API on.
    pub bus: Option<String>,
    launch: Launch,
    stop_within: Duration,
}

impl Daemon {
    /// A daemon to configure: no config (all defaults), no bus, `--log debug`.
    pub fn builder() -> DaemonBuilder {
        DaemonBuilder {
            tables: vec![],
            text: String::new(),
            bus: None,
            env: vec![],
            env_removed: vec![],
            fake_gpu: None,
            log_level: "debug".into(),
            state: StateChoice::Own,
            uid: None,
            stop_within: Duration::from_secs(30),
        }
    }

    /// Starts a daemon with the config file `config`, serving the D-Bus API on `bus`.
    pub fn start(config: &str, bus: Option<&TestBus>) -> Daemon {
        Self::with(config, bus).start()
    }

    /// Like [`Daemon::start`], keeping the usage in `state`.
    pub fn start_with_state(config: &str, bus: Option<&TestBus>, state: &Path) -> Daemon {
        Self::with(config, bus).state_dir(state).start()
    }

    fn with(config: &str, bus: Option<&TestBus>) -> DaemonBuilder {
        let b = Daemon::builder().config(config);
        match bus {
            Some(bus) => b.bus(bus),
            None => b,
        }
    }

    /// Waits until the daemon accepts connections on its socket (a connection it closes at once
    /// is nothing to it), then, with a bus, until it owns its name there.
    fn wait_ready(&mut self) {
        let start = Instant::now();
        while UnixStream::connect(&self.socket).is_err() {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("gpushared exited: {status}; log:\n{}", self.log());
            }
            assert!(
                start.elapsed() < START_TIMEOUT,
                "gpushared did not listen within {START_TIMEOUT:?}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(bus) = &self.bus {
            // over the bus alone: with the socket, `clients` would answer before the name is owned
            wait_for("the daemon's bus name", START_TIMEOUT, || {
                Command::new(GPUSHARE)
                    .args(["clients", "--socket", "/nonexistent/gpushare.sock"])
                    .env("GPUSHARE_BUS", bus)
                    .output()
                    .is_ok_and(|o| o.status.success())
            });
        }
    }

    /// Starts the daemon again with the same config, socket, state and bus, killing it first if
    /// it still runs, and waits until it is ready.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = self.launch.spawn();
        self.wait_ready();
    }

    /// Stops the daemon as systemd does (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for gpushared") {
                return status;
            }
            assert!(
                start.elapsed() < self.stop_within,
                "gpushared did not stop within {:?} of SIGTERM; log:\n{}",
                self.stop_within,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), sig).unwrap();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What the daemon wrote so far (over all its starts).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.launch.log).unwrap_or_default()
    }

    /// A file in the daemon's directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Waits up to 5 s for `f`, failing with the daemon's log.
    pub fn wait_for(&self, what: &str, f: impl FnMut() -> bool) {
        self.wait_within(Duration::from_secs(5), what, f)
    }

    /// Waits up to `within` for `f`, failing with the daemon's log.
    pub fn wait_within(&self, within: Duration, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + within;
        while !f() {
            assert!(
                Instant::now() < deadline,
                "no {what} within {within:?}; daemon log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn connect(&self) -> Conn {
        Conn(UnixStream::connect(&self.socket).expect("connect to the daemon socket"))
    }

    /// Runs the CLI against this daemon as root.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_as(None, args)
    }

    /// Runs the CLI as `uid` (None: as the test, root).
    pub fn cli_as(&self, uid: Option<u32>, args: &[&str]) -> Output {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(GPUSHARE);
        cmd.args(args)
            .env("GPUSHARE_BUS", self.bus.as_deref().unwrap_or("none"))
            .env("GPUSHARE_SOCKET", &self.socket);
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        cmd.output().expect("run gpushare")
    }

    /// Runs the CLI against this daemon's bus, not told of its socket.
    pub fn cli_over_bus(&self, args: &[&str]) -> Output {
        Command::new(GPUSHARE)
            .args(args)
            .env(
                "GPUSHARE_BUS",
                self.bus.as_deref().expect("daemon has no bus"),
            )
            .output()
            .expect("run gpushare")
    }

    pub fn busctl(&self, args: &[&str]) -> Output {
        Command::new("busctl")
            .arg(format!(
                "--address={}",
                self.bus.as_deref().expect("daemon has no bus")
            ))
            .args(args)
            .output()
            .expect("busctl must be installed (systemd)")
    }

    pub fn clients_json(&self) -> serde_json::Value {
        let out = self.cli(&["--json", "clients"]);
        assert!(
            out.status.success(),
            "gpushare clients: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("clients --json is JSON")
    }

    pub fn client(&self, name: &str) -> serde_json::Value {
        self.clients_json()
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no client {name}"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(100)..];
            eprintln!(
                "gpushared's log (its last {} lines):\n{}",
                tail.len(),
                tail.join("\n")
            );
        }
    }
}
