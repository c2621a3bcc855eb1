//! The integration tests' harness: a real gpushared ([`daemon`]), a private dbus-daemon
//! ([`bus`]), test users ([`users`]), clients speaking the wire protocol ([`clients`]), the
//! test doubles of tests/fakes ([`fakes`]), and client programs under the hook on the fake
//! driver ([`hook_programs`], [`hooked_run`], [`kernel_log`]).
#![allow(dead_code, unused_imports)]

pub mod bus;
pub mod clients;
pub mod daemon;
pub mod fakes;
pub mod hook_programs;
pub mod hooked_run;
pub mod kernel_log;
pub mod users;

pub use bus::TestBus;
pub use clients::{expect_done, hold_leases_as, Conn, Relayed};
pub use daemon::{Daemon, DaemonBuilder};
pub use fakes::{fake_nvml, fake_nvml_old_driver, relay, FakeGpu, FAKE_MPS_CONTROL};
pub use users::{require_root, test_user};

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use gpushare::protocol::DeviceId;

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

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}
