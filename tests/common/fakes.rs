//! The test doubles of tests/fakes: the fake libnvidia-ml.so.1 and nvidia-cuda-mps-control a
//! daemon can manage as its GPU ([`FakeGpu`]), and the relay process that attaches for a test.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Daemon;

/// A stand-in for nvidia-cuda-mps-control (tests/fakes/fake-mps-control).
pub const FAKE_MPS_CONTROL: &str =
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fakes/fake-mps-control");

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

/// The GPU a daemon manages in a test: its own copy of the fake NVML (own globals, and its
/// state file `fake_nvml.state` next to it in the daemon's directory) and the fake MPS control,
/// working in the daemon's `mps-pipe` and `mps-log` directories.
pub struct FakeGpu {
    nvml_state: String,
    old_driver: bool,
    mps: bool,
}

impl FakeGpu {
    /// The fake NVML starting from `nvml_state` (see tests/fakes/fake_nvml.c), with MPS.
    pub fn new(nvml_state: &str) -> FakeGpu {
        FakeGpu {
            nvml_state: nvml_state.into(),
            old_driver: false,
            mps: true,
        }
    }

    /// The fake NVML of a driver older than per-process utilization (-DOLD_DRIVER).
    pub fn old_driver(mut self) -> FakeGpu {
        self.old_driver = true;
        self
    }

    /// With MPS off (`mps = false`; the scan then checks attached processes' activity too).
    pub fn without_mps(mut self) -> FakeGpu {
        self.mps = false;
        self
    }

    /// Puts the library and its state into `dir`; returns the `[gpu]` keys that use them.
    pub(super) fn install(&self, dir: &Path) -> String {
        let nvml = if self.old_driver {
            fake_nvml_old_driver()
        } else {
            fake_nvml()
        };
        let lib = dir.join("libnvidia-ml.so.1");
        std::fs::copy(nvml, &lib).unwrap();
        std::fs::write(dir.join("fake_nvml.state"), &self.nvml_state).unwrap();
        format!(
            "nvml_library = {lib:?}\nmps = {mps}\nmps_control = {FAKE_MPS_CONTROL:?}\n\
             mps_pipe_dir = {pipe:?}\nmps_log_dir = {log:?}\n",
            mps = self.mps,
            pipe = dir.join("mps-pipe"),
            log = dir.join("mps-log"),
        )
    }
}

/// What a daemon's [`FakeGpu`] shows.
impl Daemon {
    /// The compute mode the daemon set on `device` (0: Default, 3: Exclusive_Process).
    pub fn mode(&self, device: u32) -> i32 {
        let prefix = format!("mode {device} ");
        std::fs::read_to_string(self.path("fake_nvml.state"))
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix(&prefix).map(|m| m.trim().parse().unwrap()))
            .unwrap_or(0)
    }

    /// Replaces the fake NVML's state (through a rename, as the fake does).
    pub fn write_nvml_state(&self, text: &str) {
        let tmp = self.path("state.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(tmp, self.path("fake_nvml.state")).unwrap();
    }

    /// A file the fake MPS control wrote in its pipe directory ("" if none).
    pub fn mps_file(&self, name: &str) -> String {
        std::fs::read_to_string(self.path("mps-pipe").join(name)).unwrap_or_default()
    }

    /// The pid of the fake MPS control daemon, once it runs.
    pub fn control_pid(&self) -> Option<i32> {
        self.mps_file("fake-control.pid").trim().parse().ok()
    }
}
