//! Shared pieces of the integration tests: a private dbus-daemon, a real gpushared, users.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use gpushare::protocol::{frame_len, DeviceId, Reply, Request, PROTOCOL_VERSION};

pub const GPUSHARED: &str = env!("CARGO_BIN_EXE_gpushared");
pub const GPUSHARE: &str = env!("CARGO_BIN_EXE_gpushare");

/// The GPUs the tests' requests name (each has a token and memory accounts of its own).
pub const GPU0: DeviceId = DeviceId([0; 16]);
pub const GPU1: DeviceId = DeviceId([1; 16]);

/// A temp dir every user can enter (the tests drop privileges for some commands).
pub fn open_tempdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

pub fn wait_for(what: &str, timeout: Duration, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A private dbus-daemon with a policy that lets every user connect, like the system bus.
pub struct TestBus {
    child: Child,
    pub address: String,
    _dir: tempfile::TempDir,
}

impl TestBus {
    pub fn start() -> TestBus {
        let dir = open_tempdir();
        let socket = dir.path().join("bus");
        let conf = dir.path().join("bus.conf");
        std::fs::write(
            &conf,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let child = Command::new("dbus-daemon")
            .arg(format!("--config-file={}", conf.display()))
            .arg("--nofork")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dbus-daemon must be installed (apt-get install dbus)");
        wait_for("the bus socket", Duration::from_secs(10), || {
            socket.exists()
        });
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o777)).unwrap();
        TestBus {
            child,
            address: format!("unix:path={}", socket.display()),
            _dir: dir,
        }
    }
}

impl Drop for TestBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A real gpushared with its own config file and socket directory.
pub struct Daemon {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub bus: Option<String>,
    log: PathBuf,
}

impl Daemon {
    pub fn start(config: &str, bus: Option<&TestBus>) -> Daemon {
        Self::start_with(config, bus, &[])
    }

    pub fn start_with(config: &str, bus: Option<&TestBus>, env: &[(&str, &str)]) -> Daemon {
        Self::start_full(config, bus, env, None)
    }

    /// A daemon that keeps its usage in `state` (default: a directory of its own).
    pub fn start_with_state(config: &str, bus: Option<&TestBus>, state: &Path) -> Daemon {
        Self::start_full(config, bus, &[], Some(state))
    }

    fn start_full(
        config: &str,
        bus: Option<&TestBus>,
        env: &[(&str, &str)],
        state: Option<&Path>,
    ) -> Daemon {
        let dir = open_tempdir();
        let state = state.map_or_else(|| dir.path().join("state"), Path::to_path_buf);
        let config_path = dir.path().join("gpushare.toml");
        std::fs::write(&config_path, config).unwrap();
        let sockdir = dir.path().join("run");
        let log = dir.path().join("daemon.log");
        let mut cmd = Command::new(GPUSHARED);
        cmd.arg("--config")
            .arg(&config_path)
            .arg("--socket-dir")
            .arg(&sockdir)
            .arg("--state-dir")
            .arg(&state)
            .arg("--bus")
            .arg(bus.map_or("none", |b| b.address.as_str()))
            .arg("--log")
            .arg("debug")
            .env_remove("NOTIFY_SOCKET")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start gpushared");
        let d = Daemon {
            child,
            socket: sockdir.join("gpushare.sock"),
            config: config_path,
            dir,
            bus: bus.map(|b| b.address.clone()),
            log,
        };
        let socket = d.socket.clone();
        wait_for("the daemon's socket", Duration::from_secs(20), || {
            socket.exists()
        });
        if let Some(bus) = &d.bus {
            // over the bus alone: with the socket, `clients` would answer before the name is owned
            wait_for("the daemon's bus name", Duration::from_secs(20), || {
                Command::new(GPUSHARE)
                    .args(["clients", "--socket", "/nonexistent/gpushare.sock"])
                    .env("GPUSHARE_BUS", bus)
                    .output()
                    .is_ok_and(|o| o.status.success())
            });
        }
        d
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
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

    /// Stops the daemon as systemd does (SIGTERM) and waits for it to exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for gpushared") {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "gpushared did not stop within 30 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid() as i32), sig).unwrap();
    }

    pub fn connect(&self) -> Conn {
        Conn(UnixStream::connect(&self.socket).expect("connect to the daemon socket"))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A raw protocol connection, as the hook would make.
pub struct Conn(pub UnixStream);

impl Conn {
    pub fn send(&mut self, r: &Request) {
        self.0.write_all(r.encode().unwrap().as_bytes()).unwrap();
    }

    pub fn recv(&mut self) -> Option<Reply> {
        let mut header = [0u8; 4];
        self.0.read_exact(&mut header).ok()?;
        let mut payload = vec![0u8; frame_len(header).ok()?];
        self.0.read_exact(&mut payload).ok()?;
        Reply::decode(&payload).ok()
    }

    pub fn recv_within(&mut self, t: Duration) -> Option<Reply> {
        self.0.set_read_timeout(Some(t)).unwrap();
        let r = self.recv();
        self.0.set_read_timeout(None).unwrap();
        r
    }

    /// Sends `Reserve{device, bytes}` and reads the answer.
    pub fn reserve(&mut self, device: DeviceId, bytes: u64) -> Option<Reply> {
        self.send(&Request::Reserve { device, bytes });
        self.recv()
    }

    pub fn hello(&mut self, client: &str) -> Reply {
        self.send(&Request::Hello {
            version: PROTOCOL_VERSION,
            client: client.into(),
            reserved: vec![],
        });
        self.recv().expect("a reply to Hello")
    }
}

/// Makes a system user for the tests (idempotent) and returns its uid.
pub fn test_user(name: &str) -> u32 {
    let exists = Command::new("id").arg("-u").arg(name).output().unwrap();
    if !exists.status.success() {
        let st = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--user-group",
                "--shell",
                "/usr/sbin/nologin",
                name,
            ])
            .status()
            .expect("useradd");
        assert!(st.success() || Command::new("id").arg(name).status().unwrap().success());
    }
    let out = Command::new("id").arg("-u").arg(name).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("uid")
}

pub fn require_root() {
    assert!(
        nix::unistd::Uid::effective().is_root(),
        "these tests run as root (they create users and drop privileges)"
    );
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The fake libnvidia-ml.so.1 (tests/fakes/fake_nvml.c), compiled once per test binary.
pub fn fake_nvml() -> &'static Path {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| build_fake_nvml("fake-nvml", &[]))
}

/// The fake NVML of a driver older than per-process utilization and the graphics process list.
pub fn fake_nvml_old_driver() -> &'static Path {
    static LIB: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    LIB.get_or_init(|| build_fake_nvml("fake-nvml-old-driver", &["-DOLD_DRIVER"]))
}

fn build_fake_nvml(dir: &str, defines: &[&str]) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(dir);
    std::fs::create_dir_all(&out).unwrap();
    let lib = out.join("libnvidia-ml.so.1");
    let status = Command::new("gcc")
        .args(["-Wall", "-Wextra", "-Werror", "-shared", "-fPIC"])
        .args(defines)
        .arg("-o")
        .arg(&lib)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fakes/fake_nvml.c"
        ))
        .status()
        .expect("gcc runs");
    assert!(status.success(), "building the fake NVML failed");
    lib
}

/// tests/fakes/relay.c, compiled once per test binary: a process that attaches on a test's
/// behalf (its stdin to the daemon's socket, the socket to its stdout).
pub fn relay() -> &'static Path {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("relay");
        std::fs::create_dir_all(&out).unwrap();
        let bin = out.join("relay");
        let status = Command::new("gcc")
            .args(["-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&bin)
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fakes/relay.c"))
            .status()
            .expect("gcc runs");
        assert!(status.success(), "building the relay failed");
        bin
    })
}

/// A process of user `uid` (python3) that attaches to `socket` as `client` ("" for the user's
/// default client) and holds `leases` leases of `hold` each, one after the other; it prints "ok"
/// and exits when done.
pub fn hold_leases_as(uid: u32, socket: &Path, client: &str, leases: u32, hold: Duration) -> Child {
    use std::os::unix::process::CommandExt;
    let hex = |r: Request| -> String {
        r.to_frame()
            .unwrap()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let script = r#"
import socket, struct, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
hello, acquire, release = (bytes.fromhex(a) for a in sys.argv[2:5])
def reply():
    data = b''
    while len(data) < 4 or len(data) < 4 + struct.unpack('<I', data[:4])[0]:
        chunk = s.recv(65536)
        if not chunk:
            sys.exit('the daemon closed the connection')
        data += chunk
    return data[4]
s.sendall(hello)
assert reply() == 1, 'no welcome'
for _ in range(int(sys.argv[5])):
    s.sendall(acquire)
    assert reply() == 2, 'no grant'
    time.sleep(float(sys.argv[6]))
    s.sendall(release)
print('ok', flush=True)
"#;
    Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(socket)
        .arg(hex(Request::Hello {
            version: PROTOCOL_VERSION,
            client: client.into(),
            reserved: vec![],
        }))
        .arg(hex(Request::Acquire { device: GPU0 }))
        .arg(hex(Request::Release {
            device: GPU0,
            busy_ns: 0,
        }))
        .arg(leases.to_string())
        .arg(hold.as_secs_f64().to_string())
        .uid(uid)
        .gid(uid)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed")
}

/// Waits for a [`hold_leases_as`] process and checks that it held all its leases.
pub fn expect_done(child: Child) {
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && stdout(&out).trim() == "ok",
        "the client process failed: {} {}",
        stdout(&out),
        stderr(&out)
    );
}
