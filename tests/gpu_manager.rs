//! The GPU side through its module API, against a fake libnvidia-ml.so.1 (tests/fakes/fake_nvml.c,
//! built here with gcc) and a fake nvidia-cuda-mps-control (tests/fakes/fake-mps-control).
#![cfg(feature = "daemon")]

mod common;

use common::FAKE_MPS_CONTROL as FAKE_CONTROL;

use gpushare::config::{GpuConfig, UnattachedPolicy};
use gpushare::gpu::{AttachedProcess, GpuEvent, GpuManager, GpuOptions, MpsTiming};
use std::collections::HashSet;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// One test's world: its own copy of the fake NVML (own globals, own state file next to it),
/// MPS directories, and the events the manager sends.
struct Rig {
    dir: tempfile::TempDir,
    events: mpsc::UnboundedReceiver<GpuEvent>,
    tx: mpsc::UnboundedSender<GpuEvent>,
    attached: Arc<Mutex<HashSet<u32>>>,
}

impl Rig {
    fn new(state: &str) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(common::fake_nvml(), dir.path().join("libnvidia-ml.so.1")).unwrap();
        let rig = {
            let (tx, events) = mpsc::unbounded_channel();
            Rig {
                dir,
                events,
                tx,
                attached: Arc::default(),
            }
        };
        rig.write_state(state);
        rig
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn pipe_dir(&self) -> PathBuf {
        self.path("mps-pipe")
    }

    fn state_file(&self) -> PathBuf {
        self.path("fake_nvml.state")
    }

    /// Replaces the fake NVML state (through a rename, as the fake does).
    fn write_state(&self, text: &str) {
        let tmp = self.path("state.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.state_file()).unwrap();
    }

    fn state(&self) -> String {
        std::fs::read_to_string(self.state_file()).unwrap()
    }

    fn mode(&self, device: u32) -> i32 {
        let prefix = format!("mode {device} ");
        self.state()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|m| m.trim().parse().unwrap()))
            .unwrap_or(0)
    }

    fn config(&self) -> GpuConfig {
        GpuConfig {
            nvml: true,
            nvml_library: Some(self.path("libnvidia-ml.so.1")),
            set_compute_mode: true,
            devices: vec![],
            mps: true,
            mps_control: FAKE_CONTROL.into(),
            mps_pipe_dir: self.pipe_dir(),
            mps_log_dir: self.path("mps-log"),
            unattached: UnattachedPolicy::Allow,
            violations: UnattachedPolicy::Allow,
            context_allowance: Some(1 << 30),
            scan_interval: Duration::from_millis(100),
            managed_memory: None,
        }
    }

    async fn start(&self, cfg: &GpuConfig) -> anyhow::Result<GpuManager> {
        let attached = self.attached.clone();
        let options = GpuOptions {
            mps: MpsTiming {
                backoff_initial: Duration::from_millis(200),
                backoff_max: Duration::from_millis(600),
                max_restarts: 3,
                restart_window: Duration::from_secs(60),
                stable_after: Duration::from_secs(60),
                stop_timeout: Duration::from_secs(5),
            },
            mps_list_every: Some(Duration::ZERO),
        };
        GpuManager::start_with(
            cfg,
            Arc::new(move || {
                let pids = attached.lock().unwrap();
                pids.iter().map(|&pid| AttachedProcess::pid(pid)).collect()
            }),
            self.tx.clone(),
            options,
        )
        .await
    }

    async fn next_event(&mut self, within: Duration) -> GpuEvent {
        tokio::time::timeout(within, self.events.recv())
            .await
            .unwrap_or_else(|_| panic!("no GPU event within {within:?}"))
            .expect("event channel open")
    }

    /// The next event that is not MpsStarted.
    async fn next_non_start_event(&mut self, within: Duration) -> GpuEvent {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_event(left).await {
                GpuEvent::MpsStarted => continue,
                e => return e,
            }
        }
    }

    fn mps_file(&self, name: &str) -> String {
        std::fs::read_to_string(self.pipe_dir().join(name)).unwrap_or_default()
    }

    fn control_pid(&self) -> Option<i32> {
        self.mps_file("fake-control.pid").trim().parse().ok()
    }

    /// Waits until the fake control daemon has written its pid file (it starts asynchronously).
    async fn wait_control_pid(&self) -> i32 {
        wait_for(Duration::from_secs(5), || self.control_pid()).await
    }
}

async fn wait_for<T>(within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "condition not met within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn alive(pid: i32) -> bool {
    // A zombie still answers kill(0); look at its state instead.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn kill9(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_mode_is_set_at_start_and_restored_at_stop() {
    let mut rig = Rig::new("count 2\nmode 0 0\nmode 1 2\n");
    let gpu = rig.start(&rig.config()).await.unwrap();
    assert_eq!(
        rig.mode(0),
        3,
        "device 0 is Exclusive_Process while running"
    );
    assert_eq!(
        rig.mode(1),
        3,
        "device 1 is Exclusive_Process while running"
    );

    let devices = gpu.devices();
    assert_eq!(devices.len(), 2);
    assert_eq!(devices[0].name, "Fake GPU 0");
    assert_eq!(devices[0].compute_mode, "Exclusive_Process");
    assert_eq!(devices[0].original_compute_mode, "Default");
    assert_eq!(devices[1].original_compute_mode, "Prohibited");
    assert_eq!(devices[0].memory_total, 80 << 30);
    assert!(matches!(
        rig.next_event(Duration::from_secs(5)).await,
        GpuEvent::MpsStarted
    ));

    let record = rig.pipe_dir().join("gpushare-compute-modes");
    let noted = std::fs::read_to_string(&record).unwrap();
    assert!(
        noted.contains("GPU-fa4e0000-0000-0000-0000-000000000001 Prohibited"),
        "{noted}"
    );
    let reader = gpu.device_reader();
    let from_blocking = tokio::task::spawn_blocking(move || reader()).await.unwrap();
    assert_eq!(from_blocking.len(), 2);

    gpu.stop().await;
    assert_eq!(rig.mode(0), 0, "device 0 back to Default");
    assert_eq!(rig.mode(1), 2, "device 1 back to Prohibited");
    assert!(!record.exists(), "nothing left to restore");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mode_left_by_a_crashed_run_is_restored_to_the_recorded_one() {
    let rig = Rig::new("count 2\nmode 0 3\nmode 1 3\n");
    std::fs::create_dir_all(rig.pipe_dir()).unwrap();
    std::fs::write(
        rig.pipe_dir().join("gpushare-compute-modes"),
        "GPU-fa4e0000-0000-0000-0000-000000000000 Default\n",
    )
    .unwrap();
    let gpu = rig.start(&rig.config()).await.unwrap();
    let devices = gpu.devices();
    assert_eq!(devices[0].original_compute_mode, "Default");
    assert_eq!(devices[1].original_compute_mode, "Exclusive_Process");
    gpu.stop().await;
    assert_eq!(rig.mode(0), 0, "the recorded mode");
    assert_eq!(rig.mode(1), 3, "no record: as found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leftover_control_daemon_on_our_pipe_dir_is_asked_to_quit() {
    let mut rig = Rig::new("count 1\n");
    std::fs::create_dir_all(rig.pipe_dir()).unwrap();
    let mut leftover = Command::new(FAKE_CONTROL)
        .arg("-f")
        .env("CUDA_MPS_PIPE_DIRECTORY", rig.pipe_dir())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let old = rig.wait_control_pid().await;
    assert_eq!(old, leftover.id() as i32);

    let gpu = rig.start(&rig.config()).await.unwrap();
    assert!(leftover.wait().unwrap().success(), "the leftover quit");
    assert_eq!(
        rig.next_event(Duration::from_secs(5)).await,
        GpuEvent::MpsStarted
    );
    let ours = wait_for(Duration::from_secs(5), || {
        rig.control_pid().filter(|&p| p != old && alive(p))
    })
    .await;
    assert_eq!(rig.mps_file("fake-control.commands"), "quit\n");
    let status = gpu.mps_status_reader()();
    assert!(status.running && status.restarts == 0, "{status:?}");
    gpu.stop().await;
    assert!(!alive(ours));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_mode_is_left_alone_when_configured_off_or_without_mps() {
    let rig = Rig::new("count 1\nmode 0 0\n");
    let mut cfg = rig.config();
    cfg.set_compute_mode = false;
    let gpu = rig.start(&cfg).await.unwrap();
    assert_eq!(rig.mode(0), 0);
    gpu.stop().await;

    let mut cfg = rig.config();
    cfg.mps = false;
    let gpu = rig.start(&cfg).await.unwrap();
    assert_eq!(
        rig.mode(0),
        0,
        "Exclusive_Process without MPS would serialize all clients"
    );
    assert!(!gpu.mps_status().enabled);
    assert_eq!(gpu.mps_pipe_dir(), None);
    gpu.stop().await;
    let calls = std::fs::read_to_string(rig.path("fake_nvml.state.calls")).unwrap();
    assert!(!calls.contains("set_compute_mode"), "{calls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_refuses_the_mode_is_left_and_not_restored() {
    let rig = Rig::new("count 1\nmode 0 0\ndeny_set 1\n");
    let gpu = rig
        .start(&rig.config())
        .await
        .expect("refusal is not fatal");
    assert_eq!(gpu.devices()[0].compute_mode, "Default");
    gpu.stop().await;
    let calls = std::fs::read_to_string(rig.path("fake_nvml.state.calls")).unwrap();
    assert_eq!(calls.matches("set_compute_mode").count(), 1, "{calls}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mps_runs_with_our_environment_and_quits_at_stop() {
    let rig = Rig::new("count 2\nmode 0 0\nmode 1 0\n");
    let mut cfg = rig.config();
    cfg.devices = vec![1];
    let gpu = rig.start(&cfg).await.unwrap();
    let pid = rig.wait_control_pid().await;
    assert!(alive(pid));

    let env = rig.mps_file("fake-control.env");
    let pipe = rig.pipe_dir();
    assert!(
        env.contains(&format!("CUDA_MPS_PIPE_DIRECTORY={}\n", pipe.display())),
        "{env}"
    );
    let log = rig.path("mps-log");
    assert!(
        env.contains(&format!("CUDA_MPS_LOG_DIRECTORY={}\n", log.display())),
        "{env}"
    );
    assert!(
        env.contains("CUDA_VISIBLE_DEVICES=GPU-fa4e0000-0000-0000-0000-000000000001\n"),
        "only the configured device, by UUID: {env}"
    );
    let fakes = Path::new(FAKE_CONTROL)
        .parent()
        .unwrap()
        .display()
        .to_string();
    assert!(
        env.contains(&format!("PATH={fakes}:")),
        "the MPS server is found beside the control binary: {env}"
    );
    let mode = std::fs::metadata(&pipe).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o755, "clients of all users reach the pipe directory");
    assert!(log.is_dir());
    assert_eq!(
        (rig.mode(0), rig.mode(1)),
        (0, 3),
        "only device 1 is changed"
    );

    let status = gpu.mps_status();
    assert!(status.enabled && status.running, "{status:?}");
    assert_eq!(status.pipe_dir.as_deref(), Some(pipe.to_str().unwrap()));
    assert_eq!(gpu.mps_pipe_dir(), Some(pipe.clone()));
    let answer = gpu
        .mps_command("set_default_active_thread_percentage 50")
        .await
        .unwrap();
    assert_eq!(answer, "");

    gpu.stop().await;
    let commands = rig.mps_file("fake-control.commands");
    assert_eq!(
        commands.lines().collect::<Vec<_>>(),
        ["set_default_active_thread_percentage 50", "quit"]
    );
    assert!(!alive(pid), "the control daemon ended");
    assert_eq!(rig.mode(1), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mps_is_restarted_with_backoff_after_being_killed() {
    let mut rig = Rig::new("count 1\n");
    let gpu = rig.start(&rig.config()).await.unwrap();
    assert_eq!(
        rig.next_event(Duration::from_secs(5)).await,
        GpuEvent::MpsStarted
    );
    let first = rig.wait_control_pid().await;

    kill9(first);
    match rig.next_event(Duration::from_secs(5)).await {
        GpuEvent::MpsDied { reason, restart_in } => {
            assert!(reason.contains("killed by signal 9"), "{reason}");
            assert_eq!(restart_in, Duration::from_millis(200));
        }
        e => panic!("expected MpsDied, got {e:?}"),
    }
    assert!(!gpu.mps_status().running);
    assert_eq!(
        rig.next_event(Duration::from_secs(5)).await,
        GpuEvent::MpsStarted
    );
    let second = wait_for(Duration::from_secs(5), || {
        rig.control_pid().filter(|&p| p != first && alive(p))
    })
    .await;
    let status = gpu.mps_status();
    assert!(status.running && status.restarts == 1, "{status:?}");
    assert!(status.last_error.unwrap().contains("signal 9"));

    kill9(second);
    match rig.next_event(Duration::from_secs(5)).await {
        GpuEvent::MpsDied { restart_in, .. } => {
            assert_eq!(restart_in, Duration::from_millis(400), "the wait doubles")
        }
        e => panic!("expected MpsDied, got {e:?}"),
    }
    assert_eq!(
        rig.next_event(Duration::from_secs(5)).await,
        GpuEvent::MpsStarted
    );
    let third = wait_for(Duration::from_secs(5), || {
        rig.control_pid().filter(|&p| p != second && alive(p))
    })
    .await;
    assert_eq!(rig.mps_file("fake-control.starts").lines().count(), 3);

    gpu.stop().await;
    assert!(!alive(third));
    assert!(rig.mps_file("fake-control.commands").ends_with("quit\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mps_that_keeps_dying_is_given_up_and_the_compute_mode_restored() {
    let mut rig = Rig::new("count 1\nmode 0 0\n");
    let broken = rig.path("broken-mps-control");
    std::fs::write(
        &broken,
        "#!/bin/sh\necho 'cannot open the pipe directory' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cfg = rig.config();
    cfg.mps_control = broken;
    let gpu = rig.start(&cfg).await.unwrap();
    assert_eq!(rig.mode(0), 3);

    let mut waits = Vec::new();
    let reason = loop {
        match rig.next_non_start_event(Duration::from_secs(10)).await {
            GpuEvent::MpsDied { restart_in, .. } => waits.push(restart_in.as_millis()),
            GpuEvent::MpsGaveUp { reason } => break reason,
            e => panic!("unexpected {e:?}"),
        }
    };
    assert_eq!(
        waits,
        [200, 400, 600],
        "doubling up to backoff_max, then giving up after max_restarts restarts"
    );
    assert!(reason.contains("exited with status 1"), "{reason}");
    assert!(
        reason.contains("cannot open the pipe directory"),
        "{reason}"
    );
    let status = gpu.mps_status();
    assert!(!status.running && status.restarts == 3, "{status:?}");
    assert_eq!(
        gpu.mps_pipe_dir(),
        None,
        "clients are not sent to a dead MPS"
    );
    wait_for(Duration::from_secs(2), || (rig.mode(0) == 0).then_some(())).await;
    gpu.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_mps_binary_fails_start_and_leaves_the_compute_mode() {
    let rig = Rig::new("count 1\nmode 0 0\n");
    let mut cfg = rig.config();
    cfg.mps_control = rig.path("no-such-mps-control");
    let err = rig.start(&cfg).await.err().expect("start fails");
    let text = format!("{err:#}");
    assert!(text.contains("no-such-mps-control"), "{text}");
    assert_eq!(rig.mode(0), 0, "restored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_device_index_is_a_clear_error() {
    let rig = Rig::new("count 1\n");
    let mut cfg = rig.config();
    cfg.devices = vec![3];
    let text = format!("{:#}", rig.start(&cfg).await.err().unwrap());
    assert!(
        text.contains("device 3 does not exist; NVML sees 1 device"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_driver_it_runs_without_nvml_and_says_why() {
    for state in ["count 1\n", "count 1\nfail_init 1\n"] {
        let rig = Rig::new(state);
        let mut cfg = rig.config();
        if !state.contains("fail_init") {
            cfg.nvml_library = Some(rig.path("missing/libnvidia-ml.so.1"));
        }
        cfg.unattached = UnattachedPolicy::Kill;
        let gpu = rig.start(&cfg).await.expect("starts without NVML");
        assert!(gpu.devices().is_empty());
        let why = gpu.nvml_error().expect("the reason is kept");
        assert!(why.contains("cannot initialise NVML from"), "{why}");
        rig.wait_control_pid().await;
        assert!(gpu.mps_status().running, "MPS does not need NVML");
        gpu.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_nvml_there_are_no_devices_but_mps_runs() {
    let rig = Rig::new("count 1\nmode 0 0\n");
    let mut cfg = rig.config();
    cfg.nvml = false;
    cfg.nvml_library = Some(rig.path("missing/libnvidia-ml.so.1"));
    let gpu = rig.start(&cfg).await.unwrap();
    assert!(gpu.devices().is_empty());
    assert!(gpu.devices_async().await.is_empty());
    rig.wait_control_pid().await;
    assert!(gpu.mps_status().running);
    gpu.stop().await;
    assert!(
        !rig.path("fake_nvml.state.calls").exists(),
        "NVML never loaded"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unattached_process_is_reported_once() {
    let mut rig = Rig::new("count 2\nproc 1 4242 1048576\nproc 0 5151 1048576\n");
    rig.attached.lock().unwrap().insert(5151);
    let mut cfg = rig.config();
    cfg.mps = false;
    cfg.unattached = UnattachedPolicy::Warn;
    let started = Instant::now();
    let gpu = rig.start(&cfg).await.unwrap();
    let event = rig.next_event(Duration::from_secs(2)).await;
    assert_eq!(
        event,
        GpuEvent::Unattached {
            device: 1,
            pid: 4242,
            action: UnattachedPolicy::Warn
        }
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(gpu.devices()[1].processes[0].pid, 4242);
    // Once per pid: no repeat while it stays.
    assert!(
        tokio::time::timeout(Duration::from_millis(600), rig.events.recv())
            .await
            .is_err(),
        "reported again"
    );
    gpu.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unattached_process_is_killed_but_never_the_mps_daemons() {
    let mut rig = Rig::new("count 1\n");
    let mut victim = Command::new("sleep").arg("60").spawn().unwrap();
    let mut mps_client = Command::new("sleep").arg("60").spawn().unwrap();
    let mut mps_server = Command::new("sleep")
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut cfg = rig.config();
    cfg.unattached = UnattachedPolicy::Kill;
    let gpu = rig.start(&cfg).await.unwrap();
    let control = rig.wait_control_pid().await;
    // NVML sees the control daemon and the victim; MPS reports a server and its client.
    rig.write_state(&format!(
        "count 1\nmode 0 3\nproc 0 {control} 0\nproc 0 {} 4096\nproc 0 0 0\n",
        victim.id()
    ));
    std::fs::write(
        rig.pipe_dir().join("fake-mps-clients"),
        format!("{} {}\n", mps_server.id(), mps_client.id()),
    )
    .unwrap();

    let started = Instant::now();
    let mut killed = HashSet::new();
    while killed.len() < 2 {
        match rig.next_non_start_event(Duration::from_secs(3)).await {
            GpuEvent::Unattached {
                device: 0,
                pid,
                action: UnattachedPolicy::Kill,
            } => {
                killed.insert(pid);
            }
            e => panic!("unexpected {e:?}"),
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(killed, HashSet::from([victim.id(), mps_client.id()]));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(victim.wait().unwrap().signal(), Some(9));
    assert_eq!(mps_client.wait().unwrap().signal(), Some(9));
    assert!(
        alive(mps_server.id() as i32),
        "the MPS server is never killed"
    );
    assert!(alive(control), "the MPS control daemon is never killed");
    assert!(gpu.mps_status().running);
    gpu.stop().await;
    mps_server.kill().unwrap();
    mps_server.wait().unwrap();
}
