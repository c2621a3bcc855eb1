//! The whole-server mode: `gpushare preload` on a preload list of the test's own (never the
//! machine's /etc/ld.so.preload), and the hook preloaded into programs that never call CUDA,
//! which must only load it: nothing else loaded, nothing connected, nothing said.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use common::{open_tempdir, require_root, test_user, GPUSHARE};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const TMP: &str = env!("CARGO_TARGET_TMPDIR");

/// The hook, built as tests/hook.rs builds it (its own target dir; `GPUSHARE_HOOK_LIB`
/// overrides it).
fn hook() -> PathBuf {
    static HOOK: OnceLock<PathBuf> = OnceLock::new();
    HOOK.get_or_init(|| {
        if let Some(p) = std::env::var_os("GPUSHARE_HOOK_LIB") {
            return PathBuf::from(p);
        }
        let target = Path::new(TMP).join("hook-build");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let st = Command::new(cargo)
            .args(["build", "-p", "gpushare-hook"])
            .current_dir(ROOT)
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .expect("cargo");
        assert!(st.success(), "building the hook failed");
        target.join("debug/libgpushare.so")
    })
    .clone()
}

fn preload(list: &Path, args: &[&str]) -> Output {
    Command::new(GPUSHARE)
        .arg("preload")
        .arg("--file")
        .arg(list)
        .args(args)
        .output()
        .expect("gpushare")
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

/// The hook, copied where every user can read it.
fn readable_hook(dir: &Path) -> PathBuf {
    let lib = dir.join("libgpushare.so");
    std::fs::copy(hook(), &lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o644)).unwrap();
    lib
}

#[test]
fn enable_and_disable_keep_the_admins_lines_and_run_once() {
    require_root();
    let dir = open_tempdir();
    let lib = readable_hook(dir.path());
    let list = dir.path().join("ld.so.preload");
    let before = "# site list\n/opt/site/libaudit.so:/opt/site/libother.so\n";
    std::fs::write(&list, before).unwrap();
    std::fs::set_permissions(&list, std::fs::Permissions::from_mode(0o640)).unwrap();

    let out = preload(&list, &["enable", "--hook", lib.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).starts_with("enabled"),
        "{}",
        text(&out.stdout)
    );
    let enabled = std::fs::read_to_string(&list).unwrap();
    assert_eq!(enabled, format!("{before}{}\n", lib.display()));
    let mode = std::fs::metadata(&list).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640, "the list keeps its mode");

    let again = preload(&list, &["enable", "--hook", lib.to_str().unwrap()]);
    assert!(text(&again.stdout).starts_with("already enabled"));
    assert_eq!(std::fs::read_to_string(&list).unwrap(), enabled);

    let status = preload(&list, &["status"]);
    assert!(
        text(&status.stdout).starts_with("enabled:")
            && text(&status.stdout).contains("libgpushare.so"),
        "{}",
        text(&status.stdout)
    );
    let json = Command::new(GPUSHARE)
        .args(["--json", "preload", "--file"])
        .arg(&list)
        .arg("status")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(v["enabled"], true);
    assert_eq!(v["entries"][0], lib.to_str().unwrap());

    let off = preload(&list, &["disable"]);
    assert!(
        text(&off.stdout).starts_with("disabled"),
        "{}",
        text(&off.stdout)
    );
    assert_eq!(std::fs::read_to_string(&list).unwrap(), before);
    assert!(text(&preload(&list, &["disable"]).stdout).starts_with("already disabled"));
    assert!(text(&preload(&list, &["status"]).stdout).starts_with("disabled"));
}

#[test]
fn a_list_gpushare_made_goes_when_it_is_disabled() {
    require_root();
    let dir = open_tempdir();
    let lib = readable_hook(dir.path());
    let list = dir.path().join("ld.so.preload");
    assert!(preload(&list, &["enable", "--hook", lib.to_str().unwrap()])
        .status
        .success());
    assert_eq!(
        std::fs::read_to_string(&list).unwrap(),
        format!("{}\n", lib.display())
    );
    assert!(preload(&list, &["disable"]).status.success());
    assert!(!list.exists(), "an empty list is removed");
}

#[test]
fn hooks_that_would_break_every_program_are_refused() {
    require_root();
    let dir = open_tempdir();
    let list = dir.path().join("ld.so.preload");
    std::fs::write(&list, "/opt/site/libaudit.so\n").unwrap();
    let refused = |hook: &Path, why: &str| {
        let out = preload(&list, &["enable", "--hook", hook.to_str().unwrap()]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{}: {err}", hook.display());
        assert!(err.contains(why), "{}: {err}", hook.display());
        assert_eq!(
            std::fs::read_to_string(&list).unwrap(),
            "/opt/site/libaudit.so\n",
            "a refusal leaves the list alone"
        );
    };
    refused(&dir.path().join("missing/libgpushare.so"), "is not there");

    let broken = dir.path().join("broken");
    std::fs::create_dir(&broken).unwrap();
    let not_elf = broken.join("libgpushare.so");
    std::fs::write(&not_elf, "not a library\n").unwrap();
    std::fs::set_permissions(&not_elf, std::fs::Permissions::from_mode(0o644)).unwrap();
    refused(&not_elf, "does not start cleanly");

    let private = dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    let lib = private.join("libgpushare.so");
    std::fs::copy(hook(), &lib).unwrap();
    std::fs::set_permissions(&lib, std::fs::Permissions::from_mode(0o600)).unwrap();
    refused(&lib, "not readable by everyone");

    let other = dir.path().join("libsomething.so");
    std::fs::copy(hook(), &other).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644)).unwrap();
    refused(&other, "must be named libgpushare.so");
}

#[test]
fn users_may_look_but_not_change_the_list() {
    require_root();
    let uid = test_user("gpstest-preload");
    let dir = open_tempdir();
    let lib = readable_hook(dir.path());
    let list = dir.path().join("ld.so.preload");
    std::fs::write(&list, format!("{}\n", lib.display())).unwrap();
    std::fs::set_permissions(&list, std::fs::Permissions::from_mode(0o644)).unwrap();
    let as_user = |args: &[&str]| {
        Command::new(GPUSHARE)
            .arg("preload")
            .arg("--file")
            .arg(&list)
            .args(args)
            .uid(uid)
            .gid(uid)
            .output()
            .unwrap()
    };
    for action in ["enable", "disable"] {
        let out = as_user(&[action]);
        assert_eq!(out.status.code(), Some(1));
        assert!(
            text(&out.stderr).contains("run it as root"),
            "{}",
            text(&out.stderr)
        );
    }
    assert_eq!(
        std::fs::read_to_string(&list).unwrap(),
        format!("{}\n", lib.display())
    );
    let status = as_user(&["status"]);
    assert!(status.status.success());
    assert!(text(&status.stdout).starts_with("enabled:"));
}

#[test]
fn status_warns_of_an_entry_whose_file_is_gone() {
    let dir = open_tempdir();
    let list = dir.path().join("ld.so.preload");
    std::fs::write(&list, "/nowhere/libgpushare.so\n").unwrap();
    let out = preload(&list, &["status"]);
    assert!(out.status.success());
    assert!(
        text(&out.stderr).contains("/nowhere/libgpushare.so is in")
            && text(&out.stderr).contains("missing"),
        "{}",
        text(&out.stderr)
    );
}

/// A program that never calls CUDA, with the hook preloaded and its variables pointing at a
/// socket of the test's: it maps the hook and nothing else of ours (no unwinder library, no
/// driver), never connects, prints nothing, even with statistics asked for.
#[test]
fn a_program_that_never_calls_cuda_only_loads_the_hook() {
    let dir = open_tempdir();
    let socket = dir.path().join("gpushare.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    listener.set_nonblocking(true).unwrap();
    let hook = hook();
    let plain = Command::new("cat").arg("/proc/self/maps").output().unwrap();
    let out = Command::new("cat")
        .arg("/proc/self/maps")
        .env("LD_PRELOAD", &hook)
        .env("GPUSHARE_SOCKET", &socket)
        .env("GPUSHARE_STATS", "1")
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(text(&out.stderr), "", "the hook said something");
    let files = |o: &Output| -> std::collections::BTreeSet<String> {
        text(&o.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .filter(|f| f.starts_with('/'))
            .map(str::to_owned)
            .collect()
    };
    let added: Vec<String> = files(&out).difference(&files(&plain)).cloned().collect();
    assert_eq!(
        added,
        vec![hook.canonicalize().unwrap().display().to_string()],
        "files mapped because of the hook"
    );
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("the hook connected to the daemon's socket: {other:?}"),
    }
}
