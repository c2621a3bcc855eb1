//! Clients bound to systemd units and slices (`units`, `slices`): a real gpushared resolves the
//! peer's cgroup from its pid. The peers are `gpushare check` processes that a root helper moves
//! into cgroups made for the test in the cgroup v2 hierarchy, named as systemd names them, before
//! they drop to a test user.

mod common;
use common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The cgroup v2 hierarchy: /sys/fs/cgroup itself, or /sys/fs/cgroup/unified beside the v1
/// controllers of a hybrid system.
fn cgroup2_root() -> PathBuf {
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.join("cgroup.procs").exists() && p.join("cgroup.subtree_control").exists())
        .expect("these tests need the cgroup v2 hierarchy mounted (at /sys/fs/cgroup or /sys/fs/cgroup/unified)")
}

/// Cgroups made for a test, removed (deepest first) when it ends.
struct Cgroups(Vec<PathBuf>);

impl Cgroups {
    /// Makes `relative` (a path of slices and a unit) below the v2 root.
    fn make(&mut self, relative: &str) -> PathBuf {
        let mut dir = cgroup2_root();
        for part in relative.split('/') {
            dir.push(part);
            if !dir.exists() {
                std::fs::create_dir(&dir)
                    .unwrap_or_else(|e| panic!("mkdir {}: {e}", dir.display()));
                self.0.push(dir.clone());
            }
        }
        dir
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Runs `gpushare check [--name NAME]` as `uid`, its process first moved into `cgroup` (None:
/// left where the test runs).
fn check_in(d: &Daemon, cgroup: Option<&Path>, uid: u32, name: Option<&str>) -> Output {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid",
        &uid.to_string(),
        "--regid",
        &uid.to_string(),
        "--clear-groups",
        GPUSHARE,
        "check",
    ]);
    if let Some(name) = name {
        cmd.args(["--name", name]);
    }
    cmd.env("GPUSHARE_BUS", "none")
        .env("GPUSHARE_SOCKET", &d.socket);
    if let Some(cgroup) = cgroup {
        let procs = cgroup.join("cgroup.procs");
        // SAFETY: only a write(2) to a path made before the fork runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || std::fs::write(&procs, b"0"));
        }
    }
    cmd.output().expect("run setpriv gpushare check")
}

#[test]
fn units_and_slices_choose_and_admit_clients_by_the_peers_cgroup() {
    require_root();
    let bob = test_user("gpstest-bob");
    test_user("gpstest-alice");
    let slice = format!("gpstest-{}.slice", std::process::id());
    let d = Daemon::start(
        &format!(
            "[clients.pods]\nmemory = \"1GiB\"\nunits = [\"docker-*.scope\"]\n\
             [clients.lab]\nmemory = \"2GiB\"\nslices = [\"{slice}\"]\n\
             [clients.alice_job]\nusers = [\"gpstest-alice\"]\n"
        ),
        None,
    );
    let mut cgroups = Cgroups(Vec::new());
    let container = cgroups.make(&format!("{slice}/docker-4f1e.scope"));
    let session = cgroups.make(&format!("{slice}/run-7.scope"));

    // in a container's unit: its client, without naming one
    let out = check_in(&d, Some(&container), bob, None);
    assert!(
        stdout(&out).contains("attached as client pods: memory cap 1GiB"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    // a unit match comes before the slice that holds it; the slice's client may be named
    let out = check_in(&d, Some(&container), bob, Some("lab"));
    assert!(
        stdout(&out).contains("attached as client lab"),
        "{}",
        stderr(&out)
    );
    // but not a client bound to another user
    let out = check_in(&d, Some(&container), bob, Some("alice_job"));
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(stderr(&out).contains("may not attach"), "{}", stderr(&out));

    // elsewhere in the slice: the slice's client
    let out = check_in(&d, Some(&session), bob, None);
    assert!(
        stdout(&out).contains("attached as client lab: memory cap 2GiB"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );

    // outside both: the user's own default client, and no way into the bound ones
    let out = check_in(&d, None, bob, None);
    assert!(
        stdout(&out).contains("client user.gpstest-bob"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    for name in ["pods", "lab"] {
        let out = check_in(&d, None, bob, Some(name));
        assert_eq!(out.status.code(), Some(2), "{name}: {}", stdout(&out));
        assert!(stderr(&out).contains("may not attach"), "{}", stderr(&out));
    }
}
