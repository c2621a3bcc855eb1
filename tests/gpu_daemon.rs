//! The GPU side through the real `gpushared` binary (no D-Bus): fake libnvidia-ml.so.1 and fake
//! nvidia-cuda-mps-control as in tests/gpu_manager.rs, a hook-less client speaking the wire
//! protocol, and the daemon's log on stderr.
#![cfg(feature = "daemon")]

mod common;

use gpushare::protocol::{Reply, Request};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

const FAKE_CONTROL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fakes/fake-mps-control");

struct Daemon {
    dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Daemon {
    /// Starts gpushared with the fakes and `extra` appended to the [gpu] table.
    fn start(nvml_state: &str, gpu_extra: &str) -> Daemon {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::copy(common::fake_nvml(), p.join("libnvidia-ml.so.1")).unwrap();
        std::fs::write(p.join("fake_nvml.state"), nvml_state).unwrap();
        let config = format!(
            "[gpu]\nnvml_library = {lib:?}\nmps = true\nmps_control = {FAKE_CONTROL:?}\n\
             mps_pipe_dir = {pipe:?}\nmps_log_dir = {log:?}\nscan_interval = \"200ms\"\n{gpu_extra}\n\
             [clients.train]\nusers = [\"*\"]\nmps_thread_percentage = 30\n",
            lib = p.join("libnvidia-ml.so.1"),
            pipe = p.join("mps-pipe"),
            log = p.join("mps-log"),
        );
        std::fs::write(p.join("gpushare.toml"), config).unwrap();
        let log = std::fs::File::create(p.join("gpushared.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gpushared"))
            .arg("--config")
            .arg(p.join("gpushare.toml"))
            .arg("--socket-dir")
            .arg(p.join("run"))
            .arg("--state-dir")
            .arg(p.join("state"))
            .args(["--bus", "none", "--log", "info"])
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let d = Daemon {
            dir,
            child: Some(child),
        };
        let sock = d.socket();
        d.wait_for("the socket", || sock.exists());
        d
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn socket(&self) -> PathBuf {
        self.path("run/gpushare.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("gpushared.log")).unwrap_or_default()
    }

    fn mps_file(&self, name: &str) -> String {
        std::fs::read_to_string(self.path("mps-pipe").join(name)).unwrap_or_default()
    }

    fn mode(&self, device: u32) -> i32 {
        let prefix = format!("mode {device} ");
        std::fs::read_to_string(self.path("fake_nvml.state"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|m| m.trim().parse().unwrap()))
            .unwrap_or(0)
    }

    fn write_nvml_state(&self, text: &str) {
        let tmp = self.path("state.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.path("fake_nvml.state")).unwrap();
    }

    fn wait_for(&self, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(
                Instant::now() < deadline,
                "no {what} within 5 s; daemon log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn control_pid(&self) -> Option<i32> {
        self.mps_file("fake-control.pid").trim().parse().ok()
    }

    /// SIGTERM, and the exit status.
    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        signal(child.id() as i32, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "gpushared did not stop:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn signal(pid: i32, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), sig).unwrap();
}

fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Says hello as `client` and returns the Welcome; the stream stays attached while kept.
fn attach(socket: &Path, client: &str) -> (UnixStream, Reply) {
    let mut s = UnixStream::connect(socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let hello = Request::Hello {
        version: gpushare::protocol::PROTOCOL_VERSION,
        client: client.into(),
    };
    s.write_all(&hello.to_frame().unwrap()).unwrap();
    let mut header = [0u8; 4];
    s.read_exact(&mut header).unwrap();
    let mut payload = vec![0u8; gpushare::protocol::frame_len(header).unwrap()];
    s.read_exact(&mut payload).unwrap();
    (s, Reply::decode(&payload).unwrap())
}

#[test]
fn gpushared_sets_and_restores_the_compute_mode_and_runs_mps() {
    let mut d = Daemon::start("count 1\nmode 0 0\n", "");
    d.wait_for("MPS control daemon", || d.control_pid().is_some_and(alive));
    let control = d.control_pid().unwrap();
    assert_eq!(d.mode(0), 3, "Exclusive_Process while running");
    let env = d.mps_file("fake-control.env");
    assert!(
        env.contains(&format!(
            "CUDA_MPS_PIPE_DIRECTORY={}\n",
            d.path("mps-pipe").display()
        )),
        "{env}"
    );

    // Clients are told where MPS listens, with their thread percentage.
    let (_stream, welcome) = attach(&d.socket(), "train");
    match welcome {
        Reply::Welcome {
            mps_pipe_dir,
            mps_thread_percentage,
            ..
        } => {
            assert_eq!(mps_pipe_dir, d.path("mps-pipe").display().to_string());
            assert_eq!(mps_thread_percentage, 30);
        }
        other => panic!("expected Welcome, got {other:?}"),
    }

    let status = d.stop();
    assert!(status.success(), "{status:?}\n{}", d.log());
    assert!(d.mps_file("fake-control.commands").ends_with("quit\n"));
    assert!(!alive(control));
    assert_eq!(d.mode(0), 0, "Default again after stop");
}

#[test]
fn gpushared_restarts_a_killed_mps_control_daemon() {
    let mut d = Daemon::start("count 1\n", "");
    d.wait_for("MPS control daemon", || d.control_pid().is_some_and(alive));
    let first = d.control_pid().unwrap();
    signal(first, nix::sys::signal::Signal::SIGKILL);
    d.wait_for("a restarted MPS control daemon", || {
        d.control_pid().is_some_and(|p| p != first && alive(p))
    });
    assert_eq!(d.mps_file("fake-control.starts").lines().count(), 2);
    let log = d.log();
    assert!(log.contains("killed by signal 9"), "{log}");
    assert!(d.stop().success());
}

#[test]
fn gpushared_warns_about_an_unattached_process_but_not_an_attached_one() {
    let mut d = Daemon::start("count 1\n", "unattached = \"warn\"");
    let (_stream, welcome) = attach(&d.socket(), "train");
    assert!(matches!(welcome, Reply::Welcome { .. }), "{welcome:?}");
    let me = std::process::id();
    d.write_nvml_state(&format!(
        "count 1\nmode 0 3\nproc 0 4242 1024\nproc 0 {me} 1024\n"
    ));
    d.wait_for("a warning about pid 4242", || {
        d.log().contains("process 4242 uses GPU 0 without gpushare")
    });
    std::thread::sleep(Duration::from_millis(600));
    let log = d.log();
    assert!(
        !log.contains(&format!("process {me} ")),
        "attached pid flagged:\n{log}"
    );
    assert_eq!(log.matches("process 4242 uses GPU 0").count(), 1, "{log}");
    assert!(d.stop().success());
}

#[test]
fn gpushared_kills_an_unattached_process_but_not_mps() {
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let mut d = Daemon::start("count 1\n", "unattached = \"kill\"");
    d.wait_for("MPS control daemon", || d.control_pid().is_some_and(alive));
    let control = d.control_pid().unwrap();
    d.write_nvml_state(&format!(
        "count 1\nmode 0 3\nproc 0 {control} 0\nproc 0 {} 1024\n",
        victim.id()
    ));
    let started = Instant::now();
    let status = victim.wait().unwrap();
    assert_eq!(status.signal(), Some(9));
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(alive(control), "the MPS control daemon is never killed");
    // The daemon logs right after its kill(2); the victim may be reaped first.
    let line = format!("killed process {}", victim.id());
    d.wait_for("the kill in the log", || d.log().contains(&line));
    assert!(d.stop().success());
}
