//! The programs of the hook's tests, built once per test binary: the fake `libcuda.so.1`
//! (tests/fakes/fake_cuda.c) and its NVML, the client program (tests/fakes/client.c) in its three
//! builds ([`Via`]), and the hook itself ([`hook`]); [`prepare`] builds them and runs a binary's
//! timing tests one at a time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const TMP: &str = env!("CARGO_TARGET_TMPDIR");

/// How a client program reaches the driver (tests/fakes/client.c's three builds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    Dlsym,
    ProcAddress,
    Link,
}

pub const ALL: [Via; 3] = [Via::Dlsym, Via::ProcAddress, Via::Link];

/// Where the fake driver and the client programs were built.
pub struct Fakes {
    pub dir: PathBuf,
}

impl Fakes {
    pub fn client(&self, via: Via) -> PathBuf {
        self.dir.join(match via {
            Via::Dlsym => "client_dlsym",
            Via::ProcAddress => "client_proc",
            Via::Link => "client_link",
        })
    }
}

/// Runs `cmd`, failing with its output unless it succeeds.
pub fn run_ok(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether gcc can be run (the fakes are C).
pub fn have_gcc() -> bool {
    Command::new("gcc")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Builds the fake driver and the clients once per test run; `None` (skip) without gcc.
pub fn fakes() -> Option<&'static Fakes> {
    static FAKES: OnceLock<Option<Fakes>> = OnceLock::new();
    FAKES
        .get_or_init(|| {
            if !have_gcc() {
                eprintln!("SKIPPED: gcc is not installed; the hook tests need it to build the fake libcuda");
                return None;
            }
            let src = Path::new(ROOT).join("tests/fakes");
            let dir = Path::new(TMP).join(format!("hook-fakes-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            run_ok(Command::new("gcc").args(["-O1", "-Wall", "-shared", "-fPIC"]).args([
                "-Wl,-soname,libcuda.so.1",
                "-Wl,-Bsymbolic",
                "-o",
            ]).arg(dir.join("libcuda.so.1")).arg(src.join("fake_cuda.c")).arg("-lpthread"));
            run_ok(
                Command::new("gcc")
                    .args(["-O1", "-Wall", "-shared", "-fPIC"])
                    .args(["-Wl,-soname,libnvidia-ml.so.1", "-Wl,-Bsymbolic", "-o"])
                    .arg(dir.join("libnvidia-ml.so.1"))
                    .arg(src.join("fake_nvml_memory.c")),
            );
            let _ = std::fs::remove_file(dir.join("libcuda.so"));
            std::os::unix::fs::symlink("libcuda.so.1", dir.join("libcuda.so")).unwrap();
            let client = src.join("client.c");
            for (def, name) in [("-DVIA_DLSYM", "client_dlsym"), ("-DVIA_PROC", "client_proc")] {
                run_ok(Command::new("gcc").args(["-O1", "-Wall", def, "-o"]).arg(dir.join(name)).arg(&client).args(["-ldl", "-lpthread"]));
            }
            run_ok(
                Command::new("gcc")
                    .args(["-O1", "-Wall", "-DVIA_LINK", "-o"])
                    .arg(dir.join("client_link"))
                    .arg(&client)
                    .arg(format!("-L{}", dir.display()))
                    .args(["-lcuda", "-ldl", "-lpthread"]),
            );
            Some(Fakes { dir })
        })
        .as_ref()
}

/// Builds what the tests need, or `None` to skip; the guard runs the tests one at a time (the
/// timing tests busy-wait in two processes each and must not steal each other's CPUs).
///
/// The test's thread, and so the daemon and the programs it starts, also runs ahead of the
/// rest of the host (a build, another test binary) where it may (as root): the fake GPU keeps
/// wall-clock time, so a program that the host's other work keeps off the CPU leaves it idle,
/// and a share measured on it would say how loaded the host was, not what the scheduler did.
pub fn prepare() -> Option<std::sync::MutexGuard<'static, ()>> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    fakes()?;
    // On Linux a nice value is the calling thread's; children inherit it. Refused without
    // CAP_SYS_NICE, which leaves the tests as they were.
    // SAFETY: setpriority reads no memory of ours.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, -10) };
    Some(guard)
}

/// Builds the hook with cargo (in its own target dir, so as not to wait on the lock of the
/// build that runs these tests) and returns the library. `GPUSHARE_HOOK_LIB` overrides it.
pub fn hook(profile: &str) -> PathBuf {
    static DEBUG: OnceLock<PathBuf> = OnceLock::new();
    static RELEASE: OnceLock<PathBuf> = OnceLock::new();
    let cell = if profile == "release" {
        &RELEASE
    } else {
        &DEBUG
    };
    cell.get_or_init(|| {
        if profile != "release" {
            if let Some(p) = std::env::var_os("GPUSHARE_HOOK_LIB") {
                return PathBuf::from(p);
            }
        }
        let target = Path::new(TMP).join("hook-build");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "gpushare-hook"])
            .current_dir(ROOT)
            .env("CARGO_TARGET_DIR", &target);
        if profile == "release" {
            cmd.arg("--release");
        }
        run_ok(&mut cmd);
        let lib = target
            .join(if profile == "release" {
                "release"
            } else {
                "debug"
            })
            .join("libgpushare.so");
        assert!(lib.exists(), "{} was not built", lib.display());
        lib
    })
    .clone()
}
