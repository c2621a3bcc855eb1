//! The GPU side through the real `gpushared` binary: fake libnvidia-ml.so.1 and fake
//! nvidia-cuda-mps-control as in tests/gpu_manager.rs, hook-less clients speaking the wire
//! protocol (the test itself, or a relay process of tests/fakes/relay.c where the test needs an
//! attached process it can see killed), and the daemon's log on stderr; D-Bus where a test says.
#![cfg(feature = "daemon")]

mod common;

use common::{Daemon, DaemonBuilder, FakeGpu, Relayed, GPU0};
use gpushare::protocol::{Reply, Request};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::pin::Pin;
use std::process::Command;

use std::time::{Duration, Instant};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// How long the violation tests wait for something the daemon does within a few scans (of
/// 200 ms): generous, for a loaded machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// gpushared on `gpu` as these tests run it: scans every 200 ms, one client for everyone
/// (`train`, 30 % of the MPS threads), its log at `info`; it stops within 10 s of SIGTERM.
fn on_fake_gpu(gpu: FakeGpu) -> DaemonBuilder {
    Daemon::builder()
        .table("daemon", "")
        .fake_gpu(gpu)
        .table("gpu", "scan_interval = \"200ms\"")
        .table(
            "clients.train",
            "users = [\"*\"]\nmps_thread_percentage = 30",
        )
        .log_level("info")
        .stop_within(Duration::from_secs(10))
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
        reserved: vec![],
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
    let mut d = on_fake_gpu(FakeGpu::new("count 1\nmode 0 0\n")).start();
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
    let (_stream, welcome) = attach(&d.socket, "train");
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
    let mut d = on_fake_gpu(FakeGpu::new("count 1\n")).start();
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
    let mut d = on_fake_gpu(FakeGpu::new("count 1\n"))
        .table("gpu", "unattached = \"warn\"")
        .start();
    let (_stream, welcome) = attach(&d.socket, "train");
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
    let mut d = on_fake_gpu(FakeGpu::new("count 1\n"))
        .table("gpu", "unattached = \"kill\"")
        .start();
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

/// A process attached to the daemon on the test's behalf (tests/fakes/relay.c): the test speaks
/// the protocol through it, and the daemon sees its pid.
struct Attached(Relayed);

impl Attached {
    fn new(socket: &Path, client: &str) -> Attached {
        let mut a = Attached(Relayed::connect(socket));
        a.send(&Request::Hello {
            version: gpushare::protocol::PROTOCOL_VERSION,
            client: client.into(),
            reserved: vec![],
        });
        let welcome = a.reply();
        assert!(matches!(welcome, Reply::Welcome { .. }), "{welcome:?}");
        a
    }

    fn pid(&self) -> u32 {
        self.0.child.id()
    }

    fn send(&mut self, r: &Request) {
        self.0.send(r);
    }

    fn reply(&self) -> Reply {
        self.0
            .reply_within(PATIENCE)
            .expect("a reply from the daemon")
    }

    fn reserve(&mut self, bytes: u64) {
        self.send(&Request::Reserve {
            device: GPU0,
            bytes,
        });
        let r = self.reply();
        assert!(matches!(r, Reply::Reserved { .. }), "{r:?}");
    }

    /// Asks for a lease and waits for it.
    fn lease(&mut self) {
        self.send(&Request::Acquire { device: GPU0 });
        let r = self.reply();
        assert!(matches!(r, Reply::Grant { .. }), "{r:?}");
    }

    /// Waits for the process to end; its status.
    fn wait(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.0.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "process {} still runs",
                self.pid()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// The start of the log line about a violation by `p`, as `gpu.violations = "warn"` writes it.
fn violation_line(p: &Attached) -> String {
    format!(
        "process {} (uid {}, client train) uses GPU 0 around the hook: ",
        p.pid(),
        uid()
    )
}

#[test]
fn an_attached_process_over_its_reservation_and_allowance_is_reported_once() {
    let mut d = on_fake_gpu(FakeGpu::new("count 1\n"))
        .table("gpu", "violations = \"warn\"")
        .start();
    let mut over = Attached::new(&d.socket, "train");
    let mut within = Attached::new(&d.socket, "train");
    over.reserve(GIB);
    within.reserve(GIB);
    // The default allowance is 1 GiB a context: 2 GiB is within, 2.5 GiB is not.
    d.write_nvml_state(&format!(
        "count 1\nmode 0 3\nproc 0 {} {}\nproc 0 {} {}\n",
        over.pid(),
        2 * GIB + 512 * MIB,
        within.pid(),
        2 * GIB
    ));
    let line = format!(
        "{}NVML counts 2.5GiB of device memory for it, more than the 1GiB it reserved through \
         the hook plus 1GiB allowed for its contexts",
        violation_line(&over)
    );
    d.wait_within(PATIENCE, "the violation in the log", || {
        d.log().contains(&line)
    });
    std::thread::sleep(Duration::from_secs(1));
    let log = d.log();
    assert_eq!(
        log.matches(&violation_line(&over)).count(),
        1,
        "once: {log}"
    );
    assert!(
        !log.contains(&format!("process {} ", within.pid())),
        "within its reservation and allowance, yet reported:\n{log}"
    );
    assert!(alive(over.pid() as i32), "warn does not kill");
    assert!(d.stop().success());
}

#[test]
fn violations_kill_kills_an_attached_process_over_its_reservation() {
    let mut d = on_fake_gpu(FakeGpu::new("count 1\n"))
        .table(
            "gpu",
            "violations = \"kill\"\ncontext_allowance = \"256MiB\"",
        )
        .start();
    let mut victim = Attached::new(&d.socket, "train");
    let mut fine = Attached::new(&d.socket, "train");
    victim.reserve(GIB);
    fine.reserve(GIB);
    d.write_nvml_state(&format!(
        "count 1\nmode 0 3\nproc 0 {} {}\nproc 0 {} {}\n",
        victim.pid(),
        GIB + 257 * MIB,
        fine.pid(),
        GIB + 256 * MIB
    ));
    let status = victim.wait(PATIENCE);
    assert_eq!(status.signal(), Some(9), "{status:?}\n{}", d.log());
    let line = format!(
        "killed process {} (uid {}, client train): it used GPU 0 around the hook: NVML counts \
         1.3GiB of device memory for it, more than the 1GiB it reserved through the hook plus \
         256MiB allowed",
        victim.pid(),
        uid()
    );
    d.wait_within(PATIENCE, "the kill in the log", || d.log().contains(&line));
    std::thread::sleep(Duration::from_millis(600));
    assert!(alive(fine.pid() as i32), "within its limit:\n{}", d.log());
    assert!(d.stop().success());
}

#[test]
fn activity_without_a_lease_is_reported_and_a_lease_holders_is_not() {
    // Without MPS, where activity is checked; leases of a minute, so the holder keeps its lease.
    let mut d = on_fake_gpu(FakeGpu::new("count 1\n").without_mps())
        .table("daemon", "quantum = \"60s\"")
        .start();
    let mut released = Attached::new(&d.socket, "train");
    let mut holder = Attached::new(&d.socket, "train");
    let idle = Attached::new(&d.socket, "train");
    released.lease();
    released.send(&Request::Release {
        device: GPU0,
        busy_ns: 0,
        launches: 0,
        active_ns: 0,
    });
    let released_at = Instant::now();
    holder.lease();
    let mut state = String::from("count 1\n");
    for p in [&released, &holder, &idle] {
        state += &format!("proc 0 {pid} {MIB}\nutil 0 {pid} 90\n", pid = p.pid());
    }
    d.write_nvml_state(&state);

    let line = format!(
        "{}its work kept the GPU's SMs 90% busy while it held no lease (it never had one)",
        violation_line(&idle)
    );
    d.wait_within(PATIENCE, "the idle process's activity in the log", || {
        d.log().contains(&line)
    });
    // A process whose lease ended less than the slack (2 s) before a window is not judged by
    // it; afterwards it is.
    d.wait_within(
        PATIENCE,
        "the released process's activity in the log",
        || d.log().contains(&violation_line(&released)),
    );
    assert!(
        released_at.elapsed() >= Duration::from_secs(2),
        "reported {:?} after its lease ended:\n{}",
        released_at.elapsed(),
        d.log()
    );
    assert!(d
        .log()
        .contains("while it held no lease (its last lease ended"));
    std::thread::sleep(Duration::from_secs(1));
    let log = d.log();
    assert!(
        !log.contains(&format!("process {} ", holder.pid())),
        "the lease holder was reported:\n{log}"
    );
    assert_eq!(log.matches(&violation_line(&idle)).count(), 1, "{log}");
    assert!(d.stop().success());
}

#[test]
fn an_older_driver_leaves_activity_unchecked_and_memory_checked() {
    let mut d = on_fake_gpu(FakeGpu::new("count 1\n").without_mps().old_driver()).start();
    let busy = Attached::new(&d.socket, "train");
    let big = Attached::new(&d.socket, "train");
    d.write_nvml_state(&format!(
        "count 1\nproc 0 {busy} {MIB}\nutil 0 {busy} 90\nproc 0 {big} {}\n",
        3 * GIB,
        busy = busy.pid(),
        big = big.pid(),
    ));
    d.wait_within(PATIENCE, "the memory violation in the log", || {
        d.log().contains(&violation_line(&big))
    });
    std::thread::sleep(Duration::from_secs(1));
    let log = d.log();
    assert!(!log.contains(&violation_line(&busy)), "{log}");
    assert_eq!(
        log.matches("NVML gives no per-process utilization here")
            .count(),
        1,
        "said once: {log}"
    );
    assert_eq!(
        log.matches("NVML gives no list of graphics processes here")
            .count(),
        1,
        "{log}"
    );
    assert!(d.stop().success());
}

/// The arguments of each `signal` of org.gpushare1.Manager on the bus at `address`, from the
/// moment this returns.
fn subscribe(
    address: &str,
    signal: &'static str,
) -> std::sync::mpsc::Receiver<zbus::message::Message> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let address = address.to_string();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let conn = zbus::connection::Builder::address(address.as_str())
                .unwrap()
                .build()
                .await
                .unwrap();
            let proxy = zbus::Proxy::new(
                &conn,
                "org.gpushare1",
                "/org/gpushare1",
                "org.gpushare1.Manager",
            )
            .await
            .unwrap();
            let mut stream = proxy.receive_signal(signal).await.unwrap();
            ready_tx.send(()).unwrap();
            use zbus::export::futures_core::Stream;
            while let Some(msg) =
                std::future::poll_fn(|cx| Pin::new(&mut stream).poll_next(cx)).await
            {
                if tx.send(msg).is_err() {
                    return;
                }
            }
        });
    });
    ready
        .recv_timeout(PATIENCE)
        .expect("subscribed to the signal");
    rx
}

#[test]
fn a_violation_is_signalled_on_dbus_and_shown_by_gpushare_status() {
    let bus = common::TestBus::start();
    let mut d = on_fake_gpu(FakeGpu::new("count 1\n")).bus(&bus).start();
    d.wait_within(PATIENCE, "the daemon on the bus", || {
        d.cli_over_bus(&["clients"]).status.success()
    });
    let signals = subscribe(&bus.address, "ProcessViolation");
    let mut p = Attached::new(&d.socket, "train");
    p.reserve(GIB);
    d.write_nvml_state(&format!(
        "count 1\nmode 0 3\nproc 0 {} {}\n",
        p.pid(),
        3 * GIB
    ));

    let msg = signals
        .recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("no ProcessViolation signal; log:\n{}", d.log()));
    let args: (u32, u32, u32, String, String, u64, u64, String) = msg.body().deserialize().unwrap();
    assert_eq!(
        args,
        (
            0,
            p.pid(),
            uid(),
            "train".into(),
            "memory".into(),
            3 * GIB,
            2 * GIB,
            "warned".into()
        )
    );

    let out = d.cli_over_bus(&["status"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&p.pid().to_string()))
        .unwrap_or_else(|| panic!("no row for pid {} in:\n{text}", p.pid()));
    for word in ["train", "memory", "3GiB", "warned"] {
        assert!(row.contains(word), "{word:?} missing from {row:?}");
    }
    let out = d.cli_over_bus(&["--json", "status"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let flagged = v["flagged"].as_array().expect("flagged in status --json");
    assert_eq!(flagged.len(), 1, "{v}");
    assert_eq!(flagged[0]["pid"], p.pid());
    assert_eq!(flagged[0]["kind"], "memory");
    assert_eq!(flagged[0]["measured"], 3 * GIB);
    assert_eq!(flagged[0]["allowed"], 2 * GIB);
    assert_eq!(flagged[0]["action"], "warned");

    // Once the process leaves the GPU, it is no longer listed.
    d.write_nvml_state("count 1\nmode 0 3\n");
    d.wait_within(PATIENCE, "the flagged list to empty", || {
        let out = d.cli_over_bus(&["--json", "status"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        v["flagged"].as_array().is_some_and(|a| a.is_empty())
    });
    assert!(d.stop().success());
}
