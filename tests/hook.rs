//! The preload hook (`libgpushare.so`) in client processes, against a real `gpushared`
//! (`--bus none`) and a fake `libcuda.so.1` (tests/fakes/fake_cuda.c) built here with gcc.
//!
//! The fake runs "kernels" synchronously (busy-waiting) and logs `pid start end function` for
//! each, so the tests can see who ran when and which real function a launch reached. Its
//! device memory is a 16 GiB counter. The client program (tests/fakes/client.c) is built three
//! ways: resolving the driver with dlsym, through cuGetProcAddress_v2 (as static cudart does),
//! and linked with -lcuda.
//!
//! The hook is built by the test with `cargo build -p gpushare-hook` in its own target dir
//! (`GPUSHARE_HOOK_LIB=path/to/libgpushare.so` uses a prebuilt one instead). The tests run one
//! at a time. Skipped (with a message) only when gcc is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::hook_programs::{fakes, hook, prepare, Via, ALL};
use common::hooked_run::{
    on_shared_gpu, on_shared_gpu_with_stderr, overlapping_daemon, shared_gpu_files, Run,
};
use common::kernel_log::{busy_together, kernels};
use common::{Daemon, DaemonBuilder};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// Like [`overlapping_daemon`], one lease at a time (`concurrent_leases = 1`): these tests
/// follow the token from process to process.
fn one_lease_daemon(clients: &str) -> DaemonBuilder {
    overlapping_daemon(clients).table("daemon", "concurrent_leases = 1")
}

/// Runs a measurement whose result depends on the machine's timing up to five times, until one
/// meets its bounds: a scheduling fault fails every try, a busy CI machine rarely fails five in
/// a row (with a fifth of each core's time taken by a load of higher priority in 5-15 ms bursts,
/// some of these measurements failed two tries in a row). Panics with every try's complaint.
fn measured(what: &str, mut attempt: impl FnMut() -> Result<(), String>) {
    let mut complaints = vec![];
    for _ in 0..5 {
        match attempt() {
            Ok(()) => return,
            Err(e) => {
                eprintln!("{what}: {e}; measuring again");
                complaints.push(e);
            }
        }
    }
    panic!("{what}: {}", complaints.join("; "));
}

/// Pairs of kernels of different processes that ran at the same time.
fn overlaps(k: &[(u32, u64, u64, String)]) -> usize {
    let mut n = 0;
    for (i, a) in k.iter().enumerate() {
        for b in &k[i + 1..] {
            if a.0 != b.0 && a.1 < b.2 && b.1 < a.2 {
                n += 1;
            }
        }
    }
    n
}

/// K of a client's `run K kernels` line.
fn run_count(run_line: &str) -> u64 {
    run_line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no kernel count in {run_line:?}"))
}

/// What a process told a recording daemon of its leases, added up (ns): the time it held them
/// (from each `Acquire` or `Renew` to the `Release` or `Renew` that ended the lease), the busy
/// time it reported at their ends, and the time in GPU phases it reported at their ends and at
/// its `Extend`s (refused there: the lease goes on, and its end reports the rest).
struct LeaseReports {
    held: u64,
    busy: u64,
    active: u64,
}

fn lease_reports(seen: &[(Duration, gpushare::protocol::Request)]) -> LeaseReports {
    use gpushare::protocol::Request;
    let mut sums = LeaseReports {
        held: 0,
        busy: 0,
        active: 0,
    };
    let mut granted = None;
    for (at, r) in seen {
        match r {
            Request::Acquire { .. } => granted = Some(*at),
            Request::Release {
                busy_ns, active_ns, ..
            }
            | Request::Renew {
                busy_ns, active_ns, ..
            } => {
                if let Some(g) = granted.take() {
                    sums.held += (*at - g).as_nanos() as u64;
                    sums.busy += busy_ns;
                    sums.active += active_ns;
                }
                if matches!(r, Request::Renew { .. }) {
                    granted = Some(*at);
                }
            }
            Request::Extend { active_ns, .. } => sums.active += active_ns,
            _ => {}
        }
    }
    sums
}

/// When a `run` began and stopped launching (CLOCK_MONOTONIC ns, the fake GPU's clock).
fn launching(run_line: &str) -> (u64, u64) {
    let field = |name: &str| -> u64 {
        run_line
            .split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {run_line:?}"))
    };
    (field("from="), field("to="))
}

fn line<'s>(stdout: &'s str, prefix: &str) -> &'s str {
    stdout
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in:\n{stdout}"))
}

#[test]
fn without_a_daemon_programs_run_unmanaged_and_say_so_once() {
    let Some(_serial) = prepare() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for via in ALL {
        let log = dir.path().join(format!("{via:?}.log"));
        let out = Run::new(via).log(&log).output(&[
            "launch:3:1000",
            "launch_ptsz:1:0",
            "alloc:1000",
            "info",
            "free:0",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{via:?}: {stdout}{stderr}");
        assert_eq!(line(&stdout, "init"), "init 0");
        assert_eq!(line(&stdout, "alloc"), "alloc 1000 -> 0");
        assert_eq!(
            line(&stdout, "info"),
            format!("info free={} total={} -> 0", 16 * GIB - 1000, 16 * GIB)
        );
        let lines: Vec<&str> = stderr.lines().collect();
        assert_eq!(
            lines.len(),
            1,
            "{via:?}: expected one line on stderr, got {stderr:?}"
        );
        assert!(
            lines[0].starts_with("gpushare: no daemon at ")
                && lines[0].ends_with("running unmanaged")
        );
        let k = kernels(&log);
        let names: Vec<&str> = k.iter().map(|x| x.3.as_str()).collect();
        assert_eq!(
            names,
            ["cuLaunchKernel"; 3]
                .iter()
                .copied()
                .chain(["cuLaunchKernel_ptsz"])
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn refuse_policy_fails_cu_init_without_a_daemon() {
    let Some(_serial) = prepare() else {
        return;
    };
    for via in ALL {
        let out = Run::new(via)
            .env("GPUSHARE_NO_DAEMON", "refuse")
            .output(&["launch:1:0"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        // CUDA_ERROR_NOT_PERMITTED
        assert_eq!(line(&stdout, "init"), "init 800", "{via:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("GPUSHARE_NO_DAEMON=refuse"));
    }
}

/// Runs of consecutive kernels (in start order) of one process.
fn runs(k: &[(u32, u64, u64, String)]) -> Vec<usize> {
    let mut sorted: Vec<_> = k.iter().map(|x| (x.1, x.0)).collect();
    sorted.sort();
    let mut runs = vec![];
    for (i, w) in sorted.iter().enumerate() {
        if i == 0 || sorted[i - 1].1 != w.1 {
            runs.push(0);
        }
        *runs.last_mut().unwrap() += 1;
    }
    runs
}

/// Nanoseconds during which kernels of two processes ran at once.
fn overlap_ns(k: &[(u32, u64, u64, String)]) -> u64 {
    let mut n = 0;
    for (i, a) in k.iter().enumerate() {
        for b in &k[i + 1..] {
            if a.0 != b.0 && a.1 < b.2 && b.1 < a.2 {
                n += a.2.min(b.2) - a.1.max(b.1);
            }
        }
    }
    n
}

/// `clock` picks the hook's launch-path clock (`GPUSHARE_CLOCK`: tsc, monotonic, "" = auto).
/// Two processes, each launching 150 one-millisecond kernels with a 20 ms quantum: under the
/// hook the GPU passes between them in leases (runs of many kernels of one process, not
/// kernel-by-kernel interleaving), and their kernels overlap only where a kernel launched at
/// the end of a lease is still running when the daemon grants the next one (the daemon takes
/// the token back at the lease end, see the scheduler).
fn alternate(via: Via, op: &str, expect_fn: &str, clock: &str) {
    let d = one_lease_daemon("").start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kernels.log");
    let run = Run::new(via)
        .daemon(&d)
        .log(&log)
        .env("GPUSHARE_CLOCK", clock);
    let ops = [op];
    let mut a = run
        .command(&ops)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut b = run
        .command(&ops)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (sa, sb) = (a.wait().unwrap(), b.wait().unwrap());
    assert!(sa.success() && sb.success(), "{via:?}: clients failed");
    let k = kernels(&log);
    assert_eq!(k.len(), 300, "{via:?}: all kernels ran");
    assert!(
        k.iter().all(|x| x.3 == expect_fn),
        "{via:?}: kernels reached {:?}",
        k.first()
    );
    let r = runs(&k);
    assert!(
        r.len() >= 5,
        "{via:?}: the token passed only {} times: {r:?}",
        r.len() - 1
    );
    let mean = 300.0 / r.len() as f64;
    assert!(mean >= 5.0, "{via:?}: kernels interleave, runs {r:?}");
    // At most the kernel in flight at each lease end (1 ms, stretched by a busy test machine).
    let overlap = overlap_ns(&k);
    eprintln!("{via:?} {op}: runs {r:?}, overlap {overlap} ns");
    assert!(
        overlap <= r.len() as u64 * 3_000_000,
        "{via:?}: {overlap} ns of overlap for {} lease changes",
        r.len() - 1
    );
}

#[test]
fn launches_through_dlsym_alternate_by_token() {
    let Some(_serial) = prepare() else {
        return;
    };
    alternate(
        Via::Dlsym,
        "launch:150:1000000",
        "cuLaunchKernel",
        "monotonic",
    );
}

#[test]
fn per_thread_stream_launches_through_cu_get_proc_address_alternate_by_token() {
    let Some(_serial) = prepare() else {
        return;
    };
    alternate(
        Via::ProcAddress,
        "launch_ptsz:150:1000000",
        "cuLaunchKernel_ptsz",
        "tsc",
    );
}

#[test]
fn launch_ex_in_a_linked_program_alternates_by_token() {
    let Some(_serial) = prepare() else {
        return;
    };
    alternate(
        Via::Link,
        "launch_ex:150:1000000",
        "cuLaunchKernelEx",
        "tsc",
    );
}

#[test]
fn graph_and_cooperative_launches_alternate_by_token() {
    let Some(_serial) = prepare() else {
        return;
    };
    alternate(Via::ProcAddress, "graph:150:1000000", "cuGraphLaunch", "");
    alternate(
        Via::Dlsym,
        "coop:150:1000000",
        "cuLaunchCooperativeKernel",
        "",
    );
}

/// The control: the same two processes without a daemon overlap, so the check above can fail.
#[test]
fn unmanaged_processes_overlap() {
    let Some(_serial) = prepare() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kernels.log");
    let run = Run::new(Via::Dlsym).log(&log);
    let ops = ["launch:100:1000000"];
    let mut a = run.command(&ops).stderr(Stdio::null()).spawn().unwrap();
    let mut b = run.command(&ops).stderr(Stdio::null()).spawn().unwrap();
    assert!(a.wait().unwrap().success() && b.wait().unwrap().success());
    let k = kernels(&log);
    assert!(overlaps(&k) > 0);
    let r = runs(&k);
    eprintln!("unmanaged: runs {r:?}, overlap {} ns", overlap_ns(&k));
}

/// A 1 GiB cap: allocations up to the cap succeed, one byte more fails with
/// CUDA_ERROR_OUT_OF_MEMORY, and after a free the same allocation succeeds.
#[test]
fn the_memory_cap_holds_to_the_byte() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.capped]\nmemory = \"1GiB\"\nusers = [\"{uid}\"]\n").start();
    let half = (GIB / 2).to_string();
    for via in ALL {
        let out = Run::new(via).daemon(&d).client("capped").ok(&[
            "info",
            &format!("alloc:{half}"),
            &format!("alloc:{}", GIB / 2 - 1),
            "info",
            "alloc:2",
            "alloc:1",
            "alloc:1",
            "info",
            "free:1",
            &format!("alloc:{half}"),
            &format!("alloc:{}", GIB / 2 - 1),
            "free:0",
            &format!("alloc:{half}"),
            "info1",
            "total",
        ]);
        let l: Vec<&str> = out.lines().collect();
        assert_eq!(
            l,
            [
                "init 0".to_string(),
                format!("info free={GIB} total={GIB} -> 0"),
                format!("alloc {half} -> 0"),
                format!("alloc {} -> 0", GIB / 2 - 1),
                format!("info free=1 total={GIB} -> 0"),
                "alloc 2 -> 2".into(),
                "alloc 1 -> 0".into(),
                "alloc 1 -> 2".into(),
                "info free=0 total=1073741824 -> 0".into(),
                "free 1 -> 0".into(),
                // half + 1 + half is one byte over.
                format!("alloc {half} -> 2"),
                format!("alloc {} -> 0", GIB / 2 - 1),
                "free 0 -> 0".into(),
                format!("alloc {half} -> 0"),
                format!("info1 free=0 total={GIB} -> 0"),
                format!("total {GIB} -> 0"),
            ],
            "{via:?}"
        );
    }
}

/// Pools, virtual memory (PyTorch's expandable segments), managed and pitched memory count too;
/// a pool is trimmed before an allocation from it fails.
#[test]
fn every_allocation_path_counts_against_the_cap() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.small]\nmemory = \"1MiB\"\nusers = [\"{uid}\"]\n").start();
    let mib = MIB.to_string();
    for via in ALL {
        let out = Run::new(via)
            .daemon(&d)
            .client("small")
            .env("FAKE_CUDA_SAY_TRIM", "1")
            .output(&[
                &format!("create:{mib}"),
                "async:1",
                "pool:1",
                "managed:1",
                "pitch:1:1",
                "alloc:1",
                "free:0",
                &format!("async:{}", MIB - 511),
                "pitch:100:1",
                "free:1",
                "pitch:100:1",
                "managed:1",
                "free:2",
                &format!("pool:{mib}"),
            ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{via:?}: {stdout}{stderr}");
        let l: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            l,
            [
                "init 0".to_string(),
                format!("create {mib} -> 0"),
                "async 1 -> 2".into(),
                "pool 1 -> 2".into(),
                "managed 1 -> 2".into(),
                "pitch 1 1 -> 2 pitch=0".into(),
                "alloc 1 -> 2".into(),
                "free 0 -> 0".into(),
                format!("async {} -> 0", MIB - 511),
                // 100 bytes fit, but the driver pads the row to 512: over the cap.
                "pitch 100 1 -> 2 pitch=512".into(),
                "free 1 -> 0".into(),
                "pitch 100 1 -> 0 pitch=512".into(),
                "managed 1 -> 0".into(),
                "free 2 -> 0".into(),
                "pool 1048576 -> 2".into(),
            ],
            "{via:?}: {stderr}"
        );
        // Async and pool allocations that hit the cap trimmed the pool first (3 times above).
        assert_eq!(
            stderr.matches("fake_cuda: pool trimmed").count(),
            3,
            "{via:?}: {stderr}"
        );
    }
}

/// A fork child attaches on its own (a second process of the same client, sharing its cap)
/// instead of talking on the parent's connection.
#[test]
fn a_fork_child_attaches_on_its_own() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.capped]\nmemory = \"1GiB\"\nusers = [\"{uid}\"]\n").start();
    let out = Run::new(Via::Dlsym).daemon(&d).client("capped").ok(&[
        &format!("alloc:{}", 600 * MIB),
        &format!("fork:alloc:{}", 500 * MIB),
        &format!("fork:alloc:{}", 400 * MIB),
        // the daemon notices the child's closed connection on its own time
        "sleep:300",
        &format!("alloc:{}", 400 * MIB),
        "info",
    ]);
    let l: Vec<&str> = out.lines().collect();
    assert_eq!(
        l,
        [
            "init 0".to_string(),
            format!("alloc {} -> 0", 600 * MIB),
            // The child's own cuInit, then its allocation against the shared cap.
            "init 0".into(),
            format!("alloc {} -> 2", 500 * MIB),
            "init 0".into(),
            format!("alloc {} -> 0", 400 * MIB),
            // The child exited: its memory was given back with its connection.
            format!("alloc {} -> 0", 400 * MIB),
            format!("info free={} total={GIB} -> 0", 24 * MIB),
        ]
    );
}

/// glibc resolves RTLD_NEXT from the caller's return address: through the hook's dlsym the
/// caller must still be the program (a tail jump), in debug and in release builds.
#[test]
fn rtld_next_still_sees_the_caller_through_the_hook() {
    let Some(_serial) = prepare() else {
        return;
    };
    for profile in ["debug", "release"] {
        let mut run = Run::new(Via::Link);
        run.hook = hook(profile);
        let out = run.ok(&["rtld_next"]);
        // From the program, the next cuInit after it is the hook's (preloaded before libcuda).
        assert!(
            line(&out, "rtld_next").ends_with("libgpushare.so"),
            "{profile}: {out}"
        );
    }
}

/// Launches on a capturing stream are not gated (nothing may block or sync on it), and when a
/// lease ends while a stream of it is capturing, the hook never records its event there (the
/// fake says so on stderr, as the real driver would invalidate the capture). The hook's own
/// queries of its markers, on the launching thread beside a capture in the global mode (the
/// default, and PyTorch's), do not invalidate it either.
#[test]
fn capturing_streams_are_not_gated_nor_touched() {
    let Some(_serial) = prepare() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (socket, server) = recording_daemon(dir.path());
    let out = Run::new(Via::ProcAddress)
        .socket(&socket)
        .output(&["capture:5:0", "capture_mix:40:1000000"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("capture 5 -> 0 end=0") && stdout.contains("capture_mix 40 -> 0 end=0"),
        "{stdout}{stderr}"
    );
    assert!(!stderr.contains("capturing stream"), "{stderr}");
    assert!(!stderr.contains("global capture"), "{stderr}");
    let seen = server.join().unwrap();
    let releases = seen
        .iter()
        .filter(|(_, r)| {
            matches!(
                r,
                gpushare::protocol::Request::Release { .. }
                    | gpushare::protocol::Request::Renew { .. }
            )
        })
        .count();
    // 80 ms of kernels on the null stream in 20 ms leases: leases ended during the capture.
    assert!(releases >= 2, "{seen:?}");
}

/// A CUDA graph captured while the process holds a lease (as PyTorch's `torch.cuda.graph`
/// does, in the global mode, after warm-up launches): the lease thread samples the GPU queue
/// meanwhile with event queries, which the driver counts as unsafe beside a global capture in
/// any thread of the process; they must not invalidate the capture.
#[test]
fn a_capture_beside_a_held_lease_stays_valid() {
    let Some(_serial) = prepare() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (socket, server) = recording_daemon(dir.path());
    let out = Run::new(Via::Link)
        .socket(&socket)
        .env("GPUSHARE_STATS", "1")
        .output(&["capture_held:60:2000000"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    drop(server.join().unwrap());
    assert!(stdout.contains("end=0"), "{stdout}{stderr}");
    assert!(!stderr.contains("global capture"), "{stderr}");
    // The lease thread did sample during the capture.
    let samples = stat(&stderr, "(ring full); ");
    assert!(samples >= 20, "{stderr}");
}

/// Under MPS the kernels of the processes holding leases run together and nobody waits for an
/// extended lease: the lease thread samples the queue rarely then, and records no markers of its
/// own (it sampled every quarter millisecond, with a marker at most samples, as without MPS).
#[test]
fn under_mps_an_extended_lease_is_sampled_rarely() {
    let Some(_serial) = prepare() else {
        return;
    };
    let sampling_markers = |mps: bool| {
        let dir = tempfile::tempdir().unwrap();
        let pipe = if mps {
            dir.path().join("mps").display().to_string()
        } else {
            String::new()
        };
        let (socket, server) = scripted_daemon(
            dir.path(),
            Script {
                mps_pipe_dir: pipe,
                extend: true,
                ..Script::default()
            },
        );
        let out = Run::new(Via::Link)
            .socket(&socket)
            .env("GPUSHARE_STATS", "1")
            .output(&["run:400:50000:1:0"]);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        drop(server.join().unwrap());
        assert!(out.status.success(), "{stderr}");
        stat(&stderr, "samples, ")
    };
    let (plain, mps) = (sampling_markers(false), sampling_markers(true));
    assert!(plain >= 200, "without MPS: {plain} sampling markers");
    assert!(
        mps * 4 <= plain,
        "under MPS: {mps} sampling markers, {plain} without"
    );
}

/// A scripted stand-in for the daemon that records what one hook process says and when
/// (for timing that the real scheduler does not expose).
fn recording_daemon(
    dir: &Path,
) -> (
    PathBuf,
    std::thread::JoinHandle<Vec<(Duration, gpushare::protocol::Request)>>,
) {
    scripted_daemon(dir, Script::default())
}

/// A [`recording_daemon`] that grants every extension, as a daemon does while nobody waits.
fn recording_daemon_extending(
    dir: &Path,
) -> (
    PathBuf,
    std::thread::JoinHandle<Vec<(Duration, gpushare::protocol::Request)>>,
) {
    scripted_daemon(
        dir,
        Script {
            extend: true,
            ..Script::default()
        },
    )
}

/// What a [`recording_daemon`] tells the hook.
struct Script {
    mps_pipe_dir: String,
    mps_thread_percentage: u32,
    mps_pinned_mem_limit: u64,
    /// Grants every extension (else: as if others waited).
    extend: bool,
    lease_ns: u64,
    /// The flags of every grant.
    grant_flags: u32,
}

impl Default for Script {
    fn default() -> Self {
        Script {
            mps_pipe_dir: String::new(),
            mps_thread_percentage: 0,
            mps_pinned_mem_limit: 0,
            extend: false,
            lease_ns: 20_000_000,
            grant_flags: 0,
        }
    }
}

fn scripted_daemon(
    dir: &Path,
    script: Script,
) -> (
    PathBuf,
    std::thread::JoinHandle<Vec<(Duration, gpushare::protocol::Request)>>,
) {
    use gpushare::protocol::{frame_len, Reply, Request, NO_CAP};
    use std::io::{Read, Write};
    let path = dir.join("recording.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let Script {
        mps_pipe_dir,
        mps_thread_percentage,
        mps_pinned_mem_limit,
        extend,
        lease_ns,
        grant_flags,
    } = script;
    let start = Instant::now();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(vec![]));
    // One connection's requests, answered as the script says, until it closes.
    let serve = {
        let seen = seen.clone();
        move |mut s: std::os::unix::net::UnixStream| loop {
            let mut header = [0u8; 4];
            if s.read_exact(&mut header).is_err() {
                return;
            }
            let mut payload = vec![0; frame_len(header).unwrap()];
            s.read_exact(&mut payload).unwrap();
            let req = Request::decode(&payload).unwrap();
            let reply = match &req {
                Request::Hello { .. } => Some(Reply::Welcome {
                    client: "rec".into(),
                    memory_cap: NO_CAP,
                    quantum_ns: 20_000_000,
                    mps_pipe_dir: mps_pipe_dir.clone(),
                    mps_thread_percentage,
                    mps_pinned_mem_limit,
                    mps_client_priority: u32::from(mps_thread_percentage != 0),
                    memory_flags: 0,
                    resident: NO_CAP,
                    session: 1,
                    queue_ahead_ns: 2_000_000,
                    sched_flags: 0,
                }),
                Request::Acquire { .. } | Request::Renew { .. } => Some(Reply::Grant {
                    lease_ns,
                    flags: grant_flags,
                }),
                Request::Reserve { .. } => Some(Reply::Reserved { used: 0 }),
                Request::Extend { .. } if extend => Some(Reply::Grant {
                    lease_ns,
                    flags: grant_flags,
                }),
                // as if others waited: the hook drains and renews
                Request::Extend { .. } => Some(Reply::NotExtended),
                _ => None,
            };
            // the watch connection's and the lanes' opening requests are not recorded
            if !matches!(req, Request::Watch { .. } | Request::Lane { .. }) {
                seen.lock().unwrap().push((start.elapsed(), req));
            }
            if let Some(r) = reply {
                if s.write_all(&r.to_frame().unwrap()).is_err() {
                    return;
                }
            }
        }
    };
    let server = std::thread::spawn(move || {
        // The session's connection first; then the watch connection and the lanes, each served
        // by a thread of its own, until the session closes.
        let (session, _) = listener.accept().unwrap();
        let others = serve.clone();
        std::thread::spawn(move || {
            for s in listener.incoming().flatten() {
                let serve = others.clone();
                std::thread::spawn(move || serve(s));
            }
        });
        serve(session);
        // the lanes close with the process, at the same time
        std::thread::sleep(Duration::from_millis(50));
        let seen = seen.lock().unwrap().clone();
        seen
    });
    (path, server)
}

/// The requests, with their times, that the client running `ops` under the hook sent to a
/// [`recording_daemon`] (one that grants every extension if `extending`).
fn requests_of_run(extending: bool, ops: &[&str]) -> Vec<(Duration, gpushare::protocol::Request)> {
    let dir = tempfile::tempdir().unwrap();
    let (socket, server) = if extending {
        recording_daemon_extending(dir.path())
    } else {
        recording_daemon(dir.path())
    };
    let out = Run::new(Via::ProcAddress).socket(&socket).output(ops);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.join().unwrap()
}

/// The client running `ops` under the hook on the fake GPU that processes share, with `env`
/// added, beside a [`recording_daemon`]: its standard output and error, and the requests, with
/// their times, that it sent. The client must succeed.
fn run_on_shared_gpu(
    env: &[(&str, &str)],
    ops: &[&str],
) -> (String, String, Vec<(Duration, gpushare::protocol::Request)>) {
    let dir = tempfile::tempdir().unwrap();
    let (socket, server) = recording_daemon(dir.path());
    let (_gpu_dir, _log, gpu) = shared_gpu_files();
    let mut run = Run::new(Via::ProcAddress)
        .socket(&socket)
        .env("FAKE_CUDA_GPU", &gpu.display().to_string());
    for (key, value) in env {
        run = run.env(key, value);
    }
    let out = run.output(ops);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let seen = server.join().unwrap();
    assert!(out.status.success(), "{stdout}{stderr}");
    (stdout, stderr, seen)
}

/// A kernel longer than the lease (100 ms, 20 ms leases) fills the queue past the lease's end, so
/// the next launch waits for room; when that wait outlasts the lease, the launch waits for the
/// next lease too (here a renewal per kernel), instead of running its kernel past the lease's end
/// and renewing only at the launch after it (a renewal per two kernels).
#[test]
fn a_launch_whose_wait_for_room_outlasts_the_lease_waits_for_the_next() {
    use gpushare::protocol::Request;
    let Some(_serial) = prepare() else {
        return;
    };
    let (stdout, stderr, seen) = run_on_shared_gpu(&[], &["run:800:100000000:0:0"]);
    let kernels = run_count(line(&stdout, "run "));
    // A new lease is a renewal, or a release and an acquire where the lease ran out first
    // (a host slow to wake the lease thread).
    let leases = seen
        .iter()
        .filter(|(_, r)| matches!(r, Request::Renew { .. } | Request::Acquire { .. }))
        .count() as u64;
    assert!(kernels >= 6, "{stdout}{stderr}");
    assert!(
        leases + 1 >= kernels,
        "{leases} leases, {kernels} kernels: {seen:?}"
    );
}

/// The hook reports each launch once, in the `Release`, `Renew` or `Extend` that follows it:
/// the daemon's measure of a process's progress.
#[test]
fn every_launch_is_reported_once_to_the_daemon() {
    use gpushare::protocol::Request;
    let Some(_serial) = prepare() else {
        return;
    };
    for extending in [false, true] {
        let seen = requests_of_run(
            extending,
            &[
                "launch:5:1000000",
                "sleep:300",
                "launch:30:2000000",
                "sleep:300",
                "launch:7:100000",
                "sleep:300",
            ],
        );
        let reported: u64 = seen
            .iter()
            .map(|(_, r)| match r {
                Request::Release { launches, .. }
                | Request::Renew { launches, .. }
                | Request::Extend { launches, .. } => *launches,
                _ => 0,
            })
            .sum();
        assert_eq!(reported, 42, "extending {extending}: {seen:?}");
    }
}

/// A batch process that runs a 250 us kernel every 5 ms (inference in a batch client) beside a
/// saturating one, one lease at a time: once two of its pauses have gone on past the point
/// where a lease others wait for goes back anyway (an eighth of the lease, 2.5 ms), its leases
/// go back 0.5 ms into each pause (`hook/src/pauses.rs`), and the other process's kernels
/// follow its kernel within about a millisecond, not 2.5 ms or more. A lease granted while the
/// other process had not yet asked again becomes contended when it does (the daemon's
/// `Contended`): without that notice such a lease was held through four pauses to its end.
/// The median gap was 1.0 ms (1.3 ms with both cores of the machine busy), 3.3 ms without the
/// pauses learnt. The GPU idled 0.25-0.50 of the time with neither, 0.14-0.15 with the notice
/// alone, 0.06-0.07 with both (0.12-0.14 on the loaded machine: what is judged is the gap).
#[test]
fn a_process_that_pauses_long_gives_a_lease_others_wait_for_back_soon_into_a_pause() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon(
        "[clients.light]\nrequest = 0.5\nusers = [\"{uid}\"]\n[clients.busy]\nrequest = 0.5\nusers = [\"{uid}\"]\n",
    )
    .start();
    measured("inference every 5 ms beside a saturating process", || {
        let (_dir, log, gpu) = shared_gpu_files();
        let out = on_shared_gpu(
            &d,
            &log,
            &gpu,
            &[
                ("light", "run:1500:250000:1:4750"),
                ("busy", "run:1500:1000000:0:0"),
            ],
        );
        let (light, busy) = (out[0].0, out[1].0);
        let mut k = kernels(&log);
        k.sort_by_key(|x| x.1);
        // from the light one's tenth step on (its pauses learnt), the time from each of its
        // kernels' end to the busy one's next kernel
        let learnt = k.iter().filter(|x| x.0 == light).nth(10).map_or(0, |x| x.1);
        let mut gaps: Vec<u64> = k
            .windows(2)
            .filter(|w| w[0].0 == light && w[1].0 == busy && w[0].1 >= learnt)
            .map(|w| w[1].1.saturating_sub(w[0].2))
            .collect();
        gaps.sort_unstable();
        let Some(&median) = gaps.get(gaps.len() / 2) else {
            return Err("no hand-over from the light process to the busy one".into());
        };
        eprintln!(
            "{} hand-overs, the GPU idle for a median {} us after the light process's kernel",
            gaps.len(),
            median / 1000
        );
        if median > 2_000_000 {
            return Err(format!(
                "the GPU idled a median {} us after the light process's kernel",
                median / 1000
            ));
        }
        Ok(())
    });
}

/// A process that stops launching gives the token back soon after its lease ends (the idle
/// releaser), not only at its next launch.
#[test]
fn an_idle_holder_releases_the_token_after_its_lease() {
    use gpushare::protocol::Request;
    let Some(_serial) = prepare() else {
        return;
    };
    let seen = requests_of_run(
        false,
        &["launch:2:1000000", "sleep:400", "launch:2:1000000"],
    );
    let kinds: Vec<&Request> = seen.iter().map(|(_, r)| r).collect();
    assert!(
        matches!(
            kinds.as_slice(),
            [
                Request::Hello { .. },
                Request::Acquire { .. },
                Request::Release { .. },
                Request::Acquire { .. },
                ..
            ]
        ),
        "{seen:?}"
    );
    let (acquired, released) = (seen[1].0, seen[2].0);
    let held = released - acquired;
    // 20 ms lease + a quarter lease of slack, well before the 400 ms pause ends.
    assert!(
        held >= Duration::from_millis(20) && held < Duration::from_millis(200),
        "{seen:?}"
    );
    if let Request::Release { busy_ns, .. } = seen[2].1 {
        assert!(
            busy_ns <= held.as_nanos() as u64,
            "an idle lease reports at most its length as busy: {busy_ns}"
        );
    }
}

/// With `GPUSHARE_BUSY=gpu`, the busy time a lease reports is the GPU time its work took, not
/// the time some of it was pending, unless the program waits for its work. A loop of 10 us
/// kernels with 40 us of host work after each keeps the GPU busy a tenth of the time, and on a
/// GPU whose completions are seen late (1 ms here, longer than a busy test machine keeps the
/// loop from its next launch; a real GPU's are seen microseconds late) some launch of it is
/// always pending. Never synchronizing, it reports 0.11 of its leases' time as busy (0.97 by
/// the samples of its queue alone, the default, for which the daemon takes it for a saturating
/// process). Synchronizing after each kernel, it needs the GPU at once at every kernel, which
/// beside another process's work it would not get: its leases stay busy (0.98; 0.06 with its
/// waits not counted).
#[test]
fn a_lease_reports_the_gpu_time_of_its_launches_and_waits_not_their_pending_time() {
    let Some(_serial) = prepare() else {
        return;
    };
    // The part of its leases' time a loop reported as busy, and the part of its run's time its
    // kernels took.
    let reported = |sync: u32, busy: &str| {
        let (stdout, _, seen) = run_on_shared_gpu(
            &[
                ("FAKE_CUDA_DONE_LATENCY_US", "1000"),
                ("GPUSHARE_BUSY", busy),
            ],
            &[&format!("run:600:10000:{sync}:40")],
        );
        let (from, to) = launching(line(&stdout, "run "));
        let LeaseReports { held, busy, .. } = lease_reports(&seen);
        let kernels = run_count(line(&stdout, "run "));
        let gpu_part = kernels as f64 * 10_000.0 / (to - from) as f64;
        assert!(
            held > 300_000_000 && gpu_part < 0.25,
            "{kernels} kernels in {} ms, leases held {} ms",
            (to - from) / 1_000_000,
            held / 1_000_000
        );
        (busy as f64 / held as f64, gpu_part)
    };
    let (pending, gpu_part) = reported(0, "");
    assert!(
        pending > 0.8,
        "by default the pending time: busy {pending:.2} of the leases' time, the kernels {gpu_part:.2} of the run's"
    );
    let (queued, gpu_part) = reported(0, "gpu");
    assert!(
        queued < 0.4,
        "never synchronizing: busy {queued:.2} of the leases' time, the kernels {gpu_part:.2} of the run's"
    );
    let (waiting, gpu_part) = reported(1, "gpu");
    assert!(
        waiting > 0.8,
        "synchronizing after each kernel: busy {waiting:.2} of the leases' time, the kernels {gpu_part:.2} of the run's"
    );
}

/// A lease reports the time its process was in its GPU phases (`active_ns`): a loop of tiny
/// kernels, each waited for, is active in most of its leases (0.91 here), though its work is
/// pending in a small part of them (0.02); the same loop pausing 3 ms between its kernels is
/// not (0.001).
#[test]
fn a_lease_reports_its_time_in_gpu_phases() {
    let Some(_serial) = prepare() else {
        return;
    };
    // The parts of its leases' time that a loop reported busy and active.
    let reported = |gap_us: u32| {
        let (_, _, seen) = run_on_shared_gpu(&[], &[&format!("run:600:5000:1:{gap_us}")]);
        let LeaseReports { held, busy, active } = lease_reports(&seen);
        assert!(held > 300_000_000, "leases held {} ms", held / 1_000_000);
        (busy as f64 / held as f64, active as f64 / held as f64)
    };
    let (busy, active) = reported(0);
    assert!(
        active > 0.3 && active > 5.0 * busy,
        "launching: active {active:.2} of the leases' time, busy {busy:.2}"
    );
    let (busy, active) = reported(3000);
    assert!(
        active < 0.3,
        "pausing: active {active:.2} of the leases' time, busy {busy:.2}"
    );
}

/// A lease granted while others wait (the grant's contended flag) goes back once its process
/// has left the GPU for an eighth of it, long before its end; one nobody waited for is kept to
/// its end. Leases of 400 ms, a pause of 1 s after 2 ms of kernels.
#[test]
fn a_holder_that_others_wait_for_gives_the_token_back_once_it_left_the_gpu() {
    use gpushare::protocol::{Request, GRANT_CONTENDED};
    let Some(_serial) = prepare() else {
        return;
    };
    let held = |grant_flags: u32| {
        let dir = tempfile::tempdir().unwrap();
        let (socket, server) = scripted_daemon(
            dir.path(),
            Script {
                lease_ns: 400_000_000,
                grant_flags,
                ..Script::default()
            },
        );
        let out = Run::new(Via::ProcAddress).socket(&socket).output(&[
            "launch:2:1000000",
            "sleep:1000",
            "launch:2:1000000",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let seen = server.join().unwrap();
        let acquired = seen
            .iter()
            .find(|(_, r)| matches!(r, Request::Acquire { .. }))
            .map(|(t, _)| *t);
        let released = seen
            .iter()
            .find(|(_, r)| matches!(r, Request::Release { .. }))
            .map(|(t, _)| *t);
        match (acquired, released) {
            (Some(a), Some(r)) => r - a,
            _ => panic!("no acquire and release: {seen:?}"),
        }
    };
    let contended = held(GRANT_CONTENDED);
    assert!(
        contended < Duration::from_millis(300),
        "held {contended:?} of a 400 ms lease that others waited for"
    );
    let alone = held(0);
    assert!(
        alone >= Duration::from_millis(400),
        "held {alone:?} of a 400 ms lease nobody waited for"
    );
}

/// A process that keeps launching asks to extend its lease before the lease's end (the lease
/// thread, a quarter lease ahead), and keeps it so; once it stops launching it asks no more, and
/// its lease goes back after its end: a process that left the GPU keeps no token by extensions.
#[test]
fn extensions_are_asked_ahead_only_while_the_process_uses_its_lease() {
    use gpushare::protocol::Request;
    let Some(_serial) = prepare() else {
        return;
    };
    let seen = requests_of_run(
        true,
        &["run:100:200000:0:0", "sleep:300", "launch:1:1000000"],
    );
    let at = |i: usize| seen[i].0;
    let acquired = seen
        .iter()
        .position(|(_, r)| matches!(r, Request::Acquire { .. }))
        .unwrap_or_else(|| panic!("no Acquire: {seen:?}"));
    let released = seen
        .iter()
        .position(|(_, r)| matches!(r, Request::Release { .. }))
        .unwrap_or_else(|| panic!("no Release: {seen:?}"));
    let extends: Vec<usize> = (acquired..released)
        .filter(|&i| matches!(seen[i].1, Request::Extend { .. }))
        .collect();
    // 100 ms of launches in 20 ms leases: five or so extensions, each asked before the end of
    // the lease it extends (granted at the Acquire or at the extension before).
    assert!(extends.len() >= 3, "{seen:?}");
    // (On a loaded machine the lease thread may miss the window of one lease.)
    let mut granted = at(acquired);
    let mut late = 0;
    for &i in &extends {
        if at(i) - granted >= Duration::from_millis(20) {
            late += 1;
        }
        granted = at(i);
    }
    assert!(
        late <= 1,
        "{late} extensions asked at their lease's end: {seen:?}"
    );
    // The launches end about 100 ms in, their queue (at most what was left of the lease and
    // 2 ms) drains by about 122 ms: no extension comes after that, during the 300 ms pause, and
    // the lease goes back within its 20 ms, a quarter lease of slack and the sampling.
    let last_extend = at(*extends.last().unwrap()) - at(acquired);
    assert!(
        last_extend < Duration::from_millis(160),
        "extended {last_extend:?} in, after the launches ended: {seen:?}"
    );
    let held = at(released) - at(acquired);
    assert!(
        held < Duration::from_millis(250),
        "held {held:?} for 100 ms of launches: {seen:?}"
    );
}

/// Threads of one process share its token: only one of them talks to the daemon at a time, so
/// the daemon sees a lease asked for (Acquire) only when none is held, and given back (Release,
/// Renew) only when one is.
#[test]
fn threads_share_one_token_and_one_conversation() {
    use gpushare::protocol::Request;
    let Some(_serial) = prepare() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (socket, server) = recording_daemon(dir.path());
    let f = fakes().unwrap();
    let log = dir.path().join("kernels.log");
    let out = Command::new(f.client(Via::Dlsym))
        .args(["threads:4:40"])
        .env("LD_LIBRARY_PATH", &f.dir)
        .env("LD_PRELOAD", hook("debug"))
        .env("GPUSHARE_SOCKET", &socket)
        .env("FAKE_CUDA_LOG", &log)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("threads 4 40 -> 0"),
        "{stdout}"
    );
    assert_eq!(kernels(&log).len(), 160);
    let seen = server.join().unwrap();
    let mut expect_acquire = true;
    let mut acquires = 0;
    for (_, r) in &seen[1..] {
        match r {
            Request::Acquire { .. } => {
                assert!(expect_acquire, "two Acquires in a row: {seen:?}");
                acquires += 1;
                expect_acquire = false;
            }
            Request::Release { .. } => {
                assert!(!expect_acquire, "Release without a lease: {seen:?}");
                expect_acquire = true;
            }
            Request::Renew { .. } => {
                assert!(!expect_acquire, "Renew without a lease: {seen:?}");
                acquires += 1;
            }
            Request::Extend { .. } => assert!(!expect_acquire, "Extend without a lease: {seen:?}"),
            other => panic!("unexpected {other:?}"),
        }
    }
    // 40 ms of kernels in 20 ms leases.
    assert!(acquires >= 2, "{seen:?}");
}

/// CUDA arrays count against the cap; NVML's memory info reports the cap to a process that
/// attached through CUDA (and the device's numbers to one that did not).
#[test]
fn arrays_count_and_nvml_reports_the_cap() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.small]\nmemory = \"1MiB\"\nusers = [\"{uid}\"]\n").start();
    let before = Run::new(Via::Dlsym)
        .daemon(&d)
        .client("small")
        .ok(&["nvml"]);
    assert_eq!(
        line(&before, "nvml "),
        format!(
            "nvml total={} free={} used={} -> 0",
            16 * GIB,
            15 * GIB,
            GIB
        ),
        "NVML alone is not capped"
    );
    for via in ALL {
        let out = Run::new(via).daemon(&d).client("small").ok(&[
            "array:512:512",
            "alloc:1",
            "nvml",
            "free:0",
            "array3d:64:64:64",
            "array:1:1",
        ]);
        let l: Vec<&str> = out.lines().collect();
        assert_eq!(
            l,
            [
                "init 0".to_string(),
                "array 512 512 -> 0".into(),
                "alloc 1 -> 2".into(),
                format!("nvml total={MIB} free=0 used={MIB} -> 0"),
                format!("nvml2 total={MIB} reserved={} free=0 used=0 -> 0", GIB / 4),
                "free 0 -> 0".into(),
                "array3d 64 64 -> 0".into(),
                "array 1 1 -> 2".into(),
            ],
            "{via:?}"
        );
    }
}

/// When the device itself is full, an async allocation trims its pool and tries once more,
/// and a failed allocation gives its reservation back.
#[test]
fn a_full_device_trims_the_pool_and_failed_allocations_are_unreserved() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.small]\nmemory = 3000\nusers = [\"{uid}\"]\n").start();
    for via in ALL {
        let out = Run::new(via)
            .daemon(&d)
            .client("small")
            .env("FAKE_CUDA_TOTAL_MEM", "2000")
            .env("FAKE_CUDA_SAY_TRIM", "1")
            .output(&["async:2500", "alloc:2500", "info"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let l: Vec<&str> = stdout.lines().collect();
        assert_eq!(
            l,
            [
                "init 0",
                "async 2500 -> 2",
                "alloc 2500 -> 2",
                "info free=2000 total=2000 -> 0"
            ],
            "{via:?}: {stderr}"
        );
        assert_eq!(
            stderr.matches("fake_cuda: pool trimmed").count(),
            1,
            "{via:?}: {stderr}"
        );
    }
}

/// The MPS settings of the Welcome reach the driver's environment before the real cuInit,
/// unless the user set them.
#[test]
fn mps_settings_are_exported_before_cu_init() {
    let Some(_serial) = prepare() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (socket, server) = scripted_daemon(
        dir.path(),
        Script {
            mps_pipe_dir: "/run/gpushare/mps".into(),
            mps_thread_percentage: 30,
            mps_pinned_mem_limit: 4 * GIB,
            ..Script::default()
        },
    );
    let f = fakes().unwrap();
    let out = Command::new(f.client(Via::Dlsym))
        .args([
            "getenv:CUDA_MPS_PIPE_DIRECTORY",
            "getenv:CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "getenv:CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "getenv:CUDA_MPS_CLIENT_PRIORITY",
        ])
        .env("LD_LIBRARY_PATH", &f.dir)
        .env("LD_PRELOAD", hook("debug"))
        .env("GPUSHARE_SOCKET", &socket)
        .env("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "10")
        .env("FAKE_CUDA_SAY_MPS", "1")
        .env_remove("CUDA_MPS_PIPE_DIRECTORY")
        .env_remove("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")
        .env_remove("CUDA_MPS_CLIENT_PRIORITY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let l: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        l,
        [
            "init 0",
            "env CUDA_MPS_PIPE_DIRECTORY=/run/gpushare/mps",
            "env CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=10",
            "env CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M",
            "env CUDA_MPS_CLIENT_PRIORITY=1",
        ]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("fake_cuda: cuInit sees CUDA_MPS_PIPE_DIRECTORY=/run/gpushare/mps"),
        "{stderr}"
    );
    server.join().unwrap();
}

/// cuGetProcAddress asked for itself hands out the hook's wrapper of the form the driver chose
/// for that version (4 arguments before CUDA 12, 5 from 12.0 on).
#[test]
fn cu_get_proc_address_of_itself_is_wrapped_in_the_right_form() {
    let Some(_serial) = prepare() else {
        return;
    };
    let out = Run::new(Via::ProcAddress).ok(&["procself"]);
    let l: Vec<&str> = out.lines().filter(|l| l.starts_with("procself")).collect();
    // dladdr names the exported symbol nearest the address: the hook's wrappers.
    assert_eq!(
        l,
        [
            "procself 11030 cuGetProcAddress libgpushare.so",
            "procself 12000 cuGetProcAddress_v2 libgpushare.so",
            "procself distinct 1"
        ]
    );
    let hooked = Run::new(Via::ProcAddress)
        .command(&["procself"])
        .env_remove("LD_PRELOAD")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&hooked.stdout).contains("procself 12000 cuGetProcAddress_v2"));
}

/// A daemon that refuses the process (here: an unknown client name) makes cuInit fail with
/// CUDA_ERROR_NOT_PERMITTED and says why.
#[test]
fn a_refused_attach_fails_cu_init() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("").start();
    let out = Run::new(Via::Link)
        .daemon(&d)
        .client("no-such-client")
        .output(&["launch:1:0"]);
    assert_eq!(
        line(&String::from_utf8_lossy(&out.stdout), "init"),
        "init 800"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("gpushare: the daemon refused to attach this process as no-such-client"),
        "{stderr}"
    );
}

/// An old ABI the hook does not wrap on purpose (cuDeviceTotalMem v1) passes silently; a
/// driver answer that is no exported function for a wrapped name passes too, but is reported
/// once, since that entry point then runs unmanaged.
#[test]
fn unwrappable_proc_address_answers_pass_through_and_are_reported_once() {
    let Some(_serial) = prepare() else {
        return;
    };
    let quiet = Run::new(Via::ProcAddress).output(&["procget:1:2000"]);
    assert_eq!(
        line(&String::from_utf8_lossy(&quiet.stdout), "procget"),
        "procget cuDeviceTotalMem 2000 -> 0 libcuda.so.1"
    );
    let stderr = String::from_utf8_lossy(&quiet.stderr);
    assert!(!stderr.contains("does not wrap"), "{stderr}");

    let loud = Run::new(Via::ProcAddress).output(&["procget:0:99000", "procget:0:99000"]);
    let stdout = String::from_utf8_lossy(&loud.stdout);
    assert_eq!(
        stdout
            .matches("procget cuLaunchKernel 99000 -> 0 libcuda.so.1")
            .count(),
        2
    );
    let stderr = String::from_utf8_lossy(&loud.stderr);
    assert_eq!(
        stderr.matches("gpushare: cuGetProcAddress gave a version of cuLaunchKernel that the hook does not wrap").count(),
        1,
        "{stderr}"
    );
}

/// Work that never finishes (say, a kernel waiting on another process that waits for the
/// token) does not hold the token forever: the end of a lease waits a bounded time (four
/// leases, at least 100 ms), says so once, and gives the token back.
#[test]
fn the_end_of_a_lease_waits_a_bounded_time() {
    let Some(_serial) = prepare() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (socket, server) = recording_daemon(dir.path());
    let f = fakes().unwrap();
    let start = Instant::now();
    let out = Command::new(f.client(Via::Dlsym))
        .args(["launch:60:1000000"])
        .env("LD_LIBRARY_PATH", &f.dir)
        .env("LD_PRELOAD", hook("debug"))
        .env("GPUSHARE_SOCKET", &socket)
        .env("FAKE_CUDA_NEVER_DONE", "1")
        .output()
        .unwrap();
    let elapsed = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // Said once, after the bound (100 ms, or a little more where the host was slow to wake).
    let said: Vec<u64> = stderr
        .split("gpushare: the work of a lease was still running after ")
        .skip(1)
        .map(|rest| rest.split(" ms").next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(said.len(), 1, "{stderr}");
    assert!((100..1000).contains(&said[0]), "{stderr}");
    let seen = server.join().unwrap();
    let releases = seen
        .iter()
        .filter(|(_, r)| {
            matches!(
                r,
                gpushare::protocol::Request::Release { .. }
                    | gpushare::protocol::Request::Renew { .. }
            )
        })
        .count();
    assert!(releases >= 2, "{seen:?}");
    // 60 ms of kernels, then at most 100 ms per lease end.
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
}

/// When the daemon goes away, processes carry on and say so once: their launches pass ungated,
/// and while they wait to re-attach their own record keeps them under the cap they had; with
/// re-attaching off (`GPUSHARE_REATTACH=0`) they run unmanaged, the cap no longer applied.
#[test]
fn a_lost_daemon_leaves_processes_running() {
    let Some(_serial) = prepare() else {
        return;
    };
    for reattach in ["600", "0"] {
        let mut d =
            one_lease_daemon("[clients.capped]\nmemory = \"1MiB\"\nusers = [\"{uid}\"]\n").start();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kernels.log");
        let child = Run::new(Via::ProcAddress)
            .daemon(&d)
            .client("capped")
            .log(&log)
            .env("GPUSHARE_REATTACH", reattach)
            .command(&[
                "launch:30:1000000",
                "alloc:1048576",
                "sleep:700",
                "launch:30:1000000",
                "alloc:1048576",
                "info",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let _ = d.child.kill();
        let _ = d.child.wait();
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stdout}{stderr}");
        let l: Vec<&str> = stdout.lines().collect();
        let after = if reattach == "0" {
            // Unmanaged now: the cap no longer applies.
            [
                "alloc 1048576 -> 0".to_string(),
                format!("info free={} total={} -> 0", 16 * GIB - 2 * MIB, 16 * GIB),
            ]
        } else {
            // Away: the 1 MiB it holds fills its 1 MiB cap.
            [
                "alloc 1048576 -> 2".to_string(),
                format!("info free=0 total={MIB} -> 0"),
            ]
        };
        assert_eq!(
            l,
            [
                "init 0",
                "launch 30 -> 0",
                "alloc 1048576 -> 0",
                "launch 30 -> 0",
                &after[0],
                &after[1],
            ],
            "GPUSHARE_REATTACH={reattach}: {stderr}"
        );
        assert_eq!(
            stderr.matches("gpushare: lost the daemon").count(),
            1,
            "{stderr}"
        );
        assert_eq!(kernels(&log).len(), 60);
    }
}

/// A restarted daemon gets its running processes back: they re-attach on their own, the new
/// daemon counts the memory they hold (also what they allocated while it was away) against
/// their client's cap, and their launches wait for its tokens again.
#[test]
fn processes_re_attach_to_a_restarted_daemon_with_their_memory() {
    let Some(_serial) = prepare() else {
        return;
    };
    let mut d = one_lease_daemon(
        "[clients.a]\nmemory = \"1GiB\"\nusers = [\"{uid}\"]\n[clients.b]\nusers = [\"{uid}\"]\n",
    )
    .start();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("kernels.log");
    let quarter = (256 * MIB).to_string();
    let alloc = format!("alloc:{quarter}");
    let mut p = Run::new(Via::Dlsym)
        .daemon(&d)
        .client("a")
        .log(&log)
        .command(&[
            &alloc,
            "sleep:1500",
            &alloc,
            "sleep:4000",
            "launch:20:1000000",
            "info",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first allocation is counted by the first daemon.
    let mut out = std::io::BufReader::new(p.stdout.take().unwrap());
    let mut lines = vec![];
    for _ in 0..2 {
        let mut l = String::new();
        std::io::BufRead::read_line(&mut out, &mut l).unwrap();
        lines.push(l.trim().to_string());
    }
    assert_eq!(lines, ["init 0", format!("alloc {quarter} -> 0").as_str()]);
    // The daemon goes away; the second allocation falls in the gap; then a new daemon starts.
    let _ = d.child.kill();
    let _ = d.child.wait();
    std::thread::sleep(Duration::from_millis(2000));
    d.restart();
    // Another process of the same client sees the first one's 512 MiB counted once it is back.
    let probe = Run::new(Via::Dlsym).daemon(&d).client("a");
    let big = format!("alloc:{}", 600 * MIB);
    let start = Instant::now();
    loop {
        let got = probe.ok(&[&big]);
        if got.contains(&format!("alloc {} -> 2", 600 * MIB)) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the running process did not re-attach with its memory: {got}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let small = format!("alloc:{}", 400 * MIB);
    assert!(
        probe
            .ok(&[&small])
            .contains(&format!("alloc {} -> 0", 400 * MIB)),
        "512 MiB of 1 GiB are counted, 400 MiB more fit"
    );
    // A neighbour launches while the re-attached process does: they take turns by token.
    let neighbour = Run::new(Via::Dlsym)
        .daemon(&d)
        .client("b")
        .log(&log)
        .command(&["launch:4000:1000000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let status = p.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let mut stderr = String::new();
    std::io::Read::read_to_string(p.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{rest}{stderr}");
    assert_eq!(
        rest.lines().collect::<Vec<_>>(),
        [
            format!("alloc {quarter} -> 0"),
            "launch 20 -> 0".into(),
            // The daemon's count of the client: its 512 MiB of the 1 GiB cap.
            format!("info free={} total={GIB} -> 0", 512 * MIB),
        ],
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("gpushare: lost the daemon").count(),
        1,
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("gpushare: re-attached").count(),
        1,
        "{stderr}"
    );
    let n = neighbour.wait_with_output().unwrap();
    assert!(String::from_utf8_lossy(&n.stdout).contains("launch 4000 -> 0"));
    // Its launches waited for the new daemon's token: they ran beside the neighbour's (one
    // lease at a time) only where a kernel launched at a lease's end still ran when the daemon
    // took the token back (one such, its host thread held up by a busy machine); ungated, most
    // of its 20 would have.
    let k = kernels(&log);
    assert_eq!(k.len(), 4020);
    let pid = p.id();
    let beside = k
        .iter()
        .filter(|a| a.0 == pid)
        .filter(|a| k.iter().any(|b| b.0 != pid && a.1 < b.2 && b.1 < a.2))
        .count();
    assert!(
        beside <= 2,
        "{beside} of its 20 kernels ran beside the neighbour's: the re-attached process ran ungated"
    );
    // Its exit gives the memory back.
    assert!(probe
        .ok(&[&big])
        .contains(&format!("alloc {} -> 0", 600 * MIB)));
}

/// Two saturating processes attached as clients with requests 0.8 and 0.2 get GPU time in that
/// proportion while both run (kernel time from the fake driver's log).
#[test]
fn requests_set_the_share_of_gpu_time() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.big]\nrequest = 0.8\nusers = [\"{uid}\"]\n[clients.small]\nrequest = 0.2\nusers = [\"{uid}\"]\n").start();
    measured("requests of 0.8 and 0.2", || {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("kernels.log");
        let spawn = |client: &str| {
            Run::new(Via::Dlsym)
                .daemon(&d)
                .log(&log)
                .client(client)
                .command(&["launch:1500:1000000"])
                .stdout(Stdio::null())
                .spawn()
                .unwrap()
        };
        let mut big = spawn("big");
        let mut small = spawn("small");
        let (pb, ps) = (big.id(), small.id());
        assert!(big.wait().unwrap().success() && small.wait().unwrap().success());
        let k = kernels(&log);
        let (busy, from, to) = busy_together(&k, &[pb, ps]);
        let (b, s) = (busy[0] as f64, busy[1] as f64);
        let share = b / (b + s);
        eprintln!(
            "big {b} ns, small {s} ns over {} ms: big's share {share:.3}",
            (to - from) / 1_000_000
        );
        if to - from <= 500_000_000 {
            return Err(format!(
                "both ran together only {} ms",
                (to - from) / 1_000_000
            ));
        }
        if (share - 0.8).abs() > 0.08 {
            return Err(format!("big's share of GPU time is {share:.3}, want 0.8"));
        }
        Ok(())
    });
}

/// An oversubscribing client gets managed memory for cuMemAlloc (more than the device holds),
/// moves it to the host when its lease ends with another client waiting, and moves back its
/// oldest allocations up to its resident budget when the token returns. All oversubscribing
/// clients together stay within gpu.managed_memory. Each process has six leases of work, so that
/// their work overlaps for several hand-overs however their starts fall (with three each, one
/// run of the whole suite saw a single hand-over).
#[test]
fn oversubscribed_memory_moves_out_and_back_at_hand_overs() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon(
        r#"[clients.big]
memory = "3GiB"
oversubscribe = true
resident = "1GiB"
users = ["{uid}"]
[clients.other]
users = ["{uid}"]
"#,
    )
    .table("gpu", r#"managed_memory = "2GiB""#)
    .start();
    let gib = (1u64 << 30).to_string();
    let run = |client: &'static str| {
        Run::new(Via::ProcAddress)
            .daemon(&d)
            .client(client)
            .env("FAKE_CUDA_TOTAL_MEM", &gib)
            .env("FAKE_CUDA_SAY_MANAGED", "1")
            .env("GPUSHARE_CLOCK", "monotonic")
    };
    let (big, other) = (run("big"), run("other"));
    let big_ops = [
        format!("alloc:{gib}"),
        format!("alloc:{gib}"),
        "alloc:1048576".to_string(),
        "launch:120:1000000".to_string(),
    ];
    let big_ops: Vec<&str> = big_ops.iter().map(String::as_str).collect();
    let a = big
        .command(&big_ops)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let b = other
        .command(&["launch:120:1000000", "alloc:2147483648"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (out_a, err_a) = (
        String::from_utf8_lossy(&a.stdout),
        String::from_utf8_lossy(&a.stderr),
    );
    let out_b = String::from_utf8_lossy(&b.stdout);
    assert!(
        a.status.success() && b.status.success(),
        "{out_a}{err_a}{out_b}"
    );
    // Two GiB of managed memory on a 1 GiB device; the pool of 2 GiB is then full.
    assert_eq!(
        line(&out_a, &format!("alloc {gib}")),
        format!("alloc {gib} -> 0")
    );
    assert_eq!(err_a.matches("fake_cuda: managed").count(), 2, "{err_a}");
    assert!(err_a.contains("flags 1"), "attached globally: {err_a}");
    assert_eq!(
        line(&out_a, "alloc 1048576"),
        "alloc 1048576 -> 2",
        "{out_a}"
    );
    // The other client's allocations stay device memory (2 GiB do not fit in 1 GiB).
    assert_eq!(
        line(&out_b, "alloc 2147483648"),
        "alloc 2147483648 -> 2",
        "{out_b}"
    );
    // Out in bulk at each hand-over, both allocations; back only the first (1 GiB budget).
    let moves: Vec<&str> = err_a
        .lines()
        .filter(|l| l.contains("cuMemPrefetchAsync_v2"))
        .collect();
    // A hand-over is a run of moves to the host; the last one may be cut short by the
    // process's exit (the lease thread gives the last lease back while the program ends).
    let mut hand_overs: Vec<usize> = vec![];
    for (i, l) in moves.iter().enumerate() {
        if l.ends_with("to host") {
            if i > 0 && moves[i - 1].ends_with("to host") {
                *hand_overs.last_mut().unwrap() += 1;
            } else {
                hand_overs.push(1);
            }
        }
    }
    let (last, whole) = hand_overs.split_last().expect("no hand-over");
    assert!(
        !whole.is_empty() && whole.iter().all(|&n| n == 2) && (1..=2).contains(last),
        "both allocations out at each hand-over: {moves:#?}"
    );
    let back: Vec<&&str> = moves.iter().filter(|l| l.ends_with("to device")).collect();
    assert!(back.len() >= whole.len(), "{moves:#?}");
    assert!(
        back.iter()
            .all(|l| l.contains(&format!(" {gib} to device"))),
        "{moves:#?}"
    );
    let first = moves[0].split_whitespace().nth(2).unwrap();
    assert!(
        back.iter()
            .all(|l| l.split_whitespace().nth(2) == Some(first)),
        "oldest first: {moves:#?}"
    );
}

/// Python start-up code (`gpushare run` puts dist/python first on PYTHONPATH): the program's own
/// sitecustomize still runs, and the hook tells PyTorch's cache release when to act: only for a
/// client with release_cache, only once others wait for the token, and only when the lease ends
/// before the next iteration would.
#[test]
fn python_start_up_chains_and_cache_release_follows_the_token() {
    let Some(_serial) = prepare() else {
        return;
    };
    if Command::new("python3").arg("-V").output().is_err() {
        eprintln!("SKIPPED: python3 is not installed");
        return;
    }
    let theirs = tempfile::tempdir().unwrap();
    std::fs::write(theirs.path().join("sitecustomize.py"), "print('theirs')\n").unwrap();
    let python_dir = Path::new(ROOT).join("dist/python");
    let out = Command::new("python3")
        .args(["-c", "import sys; print('main', 'torch' in sys.modules)"])
        .env(
            "PYTHONPATH",
            format!("{}:{}", python_dir.display(), theirs.path().display()),
        )
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "theirs\nmain False\n");

    let d = one_lease_daemon(
        r#"[clients.rel]
release_cache = true
users = ["{uid}"]
[clients.keep]
users = ["{uid}"]
"#,
    )
    .start();
    // Drives the fake driver through ctypes (dlsym, as the hook sees it) and asks the hook.
    let script = r#"
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
me = ctypes.CDLL(None)
due, wanted = me.gpushare_release_due, me.gpushare_release_wanted
due.argtypes = [ctypes.c_uint64]
print("before", wanted())
assert cuda.cuInit(0) == 0
ns = ctypes.c_uint64(1_000_000)
params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(ns), ctypes.c_void_p))
def launch(n):
    for _ in range(n):
        assert cuda.cuLaunchKernel(None, 1, 1, 1, 1, 1, 1, 0, None, params, None) == 0
launch(1)
print("attached", wanted(), "alone", due(10**12))
time.sleep(float(sys.argv[1]))
launch(int(sys.argv[2]))
print("contended", due(10**12))
"#;
    let f = fakes().unwrap();
    let py = |client: &str, wait: &str, n: &str| {
        Command::new("python3")
            .args(["-c", script, wait, n])
            .env("LD_LIBRARY_PATH", &f.dir)
            .env("LD_PRELOAD", hook("debug"))
            .env("GPUSHARE_SOCKET", &d.socket)
            .env("GPUSHARE_CLIENT", client)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Both launch kernels of 1 ms at the same time, so that leases end with the other one
    // waiting; "keep" launches more, so it still waits when "rel" asks.
    let (a, b) = (py("rel", "0.5", "80"), py("keep", "0.5", "250"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let (out_a, out_b) = (
        String::from_utf8_lossy(&a.stdout),
        String::from_utf8_lossy(&b.stdout),
    );
    assert!(
        a.status.success() && b.status.success(),
        "{out_a}{}{out_b}{}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    assert_eq!(out_a, "before -1\nattached 1 alone 0\ncontended 1\n");
    assert_eq!(out_b, "before -1\nattached 0 alone 0\ncontended 0\n");
}

/// Requests 0.75/0.25 hold for long kernels (1.6 ms), whether the programs synchronize after
/// every few kernels or never (then without pacing each would queue seconds of work, and whoever
/// held the token last would run on long after its lease). The hook keeps a bounded queue and
/// drains it before a hand-over, and the daemon charges the leases' wall time. A share is the
/// GPU time a program got beside the other over what the same program gets alone (solo, the
/// GPU is idle while it synchronizes too).
///
/// Synchronizing every 4 kernels, the programs used to wait in the synchronize at their lease's
/// end; the lease thread gave the lease back (Release) as the queue ran out, a moment before the
/// program asked again (Acquire), so the other client got the next lease at every such end and
/// the leases went nearly 1:1 (0.66/0.31). Now the lease thread waits until the process has
/// left the GPU without work for a while, and samples the queue with markers of its own.
#[test]
fn long_kernels_keep_their_shares_with_and_without_synchronization() {
    let Some(_serial) = prepare() else {
        return;
    };
    // Without burst credit: the small client, idle while the big one ran alone, is owed its
    // unused request at its start and would run ahead for it (up to 167 ms); measured here is
    // the division from the start.
    let d = overlapping_daemon("[clients.big]\nrequest = 0.75\nusers = [\"{uid}\"]\n[clients.small]\nrequest = 0.25\nusers = [\"{uid}\"]\n")
        .table("daemon", "burst_window = \"0s\"")
        .start();
    for sync in [4, 0] {
        measured(&format!("sync every {sync}"), || {
            let (dir, log, gpu) = shared_gpu_files();
            let solo_log = dir.path().join("solo.log");
            let op = format!("run:2500:1600000:{sync}:0");
            let alone = on_shared_gpu(&d, &solo_log, &dir.path().join("solo-gpu"), &[("big", &op)]);
            let k = kernels(&solo_log);
            let (busy, from, to) = busy_together(&k, &[alone[0].0]);
            let solo = busy[0] as f64 / (to - from) as f64;
            let ran = on_shared_gpu(&d, &log, &gpu, &[("big", &op), ("small", &op)]);
            let k = kernels(&log);
            let (busy, from, to) = busy_together(&k, &[ran[0].0, ran[1].0]);
            let span = (to - from) as f64;
            let (big, small) = (busy[0] as f64 / span / solo, busy[1] as f64 / span / solo);
            eprintln!(
                "sync every {sync}: alone busy {solo:.3}; big {big:.3}, small {small:.3} of solo, {} ms together",
                (to - from) / 1_000_000
            );
            if to - from <= 1_500_000_000 {
                return Err(format!("ran together {} ms", (to - from) / 1_000_000));
            }
            // The division is the scheduler's; what both lose at hand-overs (their queues
            // drained, the next one's first launch) is the host's speed.
            let division = big / (big + small);
            if (division - 0.75).abs() > 0.03 || big + small < 0.9 {
                return Err(format!(
                    "big got {big:.3}, small {small:.3} ({division:.3} of it to big), want 0.75 / 0.25"
                ));
            }
            // all work ran by the end of the program's own time, not seconds later
            let last = k.iter().map(|x| x.2).max().unwrap();
            let first = k.iter().map(|x| x.1).min().unwrap();
            if last - first >= 3_200_000_000 {
                return Err(format!("the queue ran {} ms", (last - first) / 1_000_000));
            }
            Ok(())
        });
    }
}

/// Processes that leave the GPU idle most of the time (a 50 us kernel, then 2 ms of host work)
/// hold leases together instead of taking turns: each runs nearly as fast as alone.
#[test]
fn launch_bound_processes_hold_leases_together() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = overlapping_daemon("").start();
    let (_dir, log, gpu) = shared_gpu_files();
    let op = "run:1500:50000:1:2000";
    let count = |out: &str| run_count(line(out, "run "));
    measured("four launch-bound processes", || {
        let solo = count(&on_shared_gpu(&d, &log, &gpu, &[("", op)])[0].1);
        let four = on_shared_gpu(&d, &log, &gpu, &[("", op), ("", op), ("", op), ("", op)]);
        for (_, out) in &four {
            let n = count(out);
            eprintln!("alone {solo} kernels, beside three others {n}");
            if (n as f64) < 0.7 * solo as f64 {
                return Err(format!(
                    "{n} kernels beside three others, {solo} alone: the leases did not overlap"
                ));
            }
        }
        Ok(())
    });
}

/// A process that learnt a long time per launch (its first kernels took 5 ms each) and then
/// launches short kernels (50 us, no synchronize) beside a saturating process is not held back:
/// launches timed on their own, by a pair of timing events, show the time learnt to be too long
/// and lower it. Markers cannot: beside the other process they wait for its queued work too.
/// Taken for a process with long kernels, it was held at two launches queued behind the other's
/// work and made a small fraction of the launches it makes alone (the straggler among eight
/// launch-bound PyTorch jobs on the GPU had learnt 3.4 ms). With `clients`, `(client of the
/// short kernels, client of the saturating process)` and their config; beside it the short
/// kernels must make at least `least` of what they make alone, and the time per launch the
/// process learnt last (its stats line) must be within 1.3 ms, not the 5 ms of its first kernels
/// nor the 1.6-1.8 ms that markers alone taught it beside a client of three times its weight
/// (with the lowering 80-360 us, once 1.0 ms on a loaded machine).
fn short_kernels_after_long_ones_beside_a_saturating_process(
    clients: (&str, &str),
    config: &str,
    least: f64,
) {
    // Without burst credit: the saturating client, idle until it starts, is owed its unused
    // request and would run ahead of the other for it; measured here is the hook's time per
    // launch beside it.
    let d = overlapping_daemon(config)
        .table("daemon", "burst_window = \"0s\"")
        .start();
    let a = "run:50:5000000:1:0 sleep:150 run:1500:50000:0:200";
    let short_kernels = |out: &str| -> u64 {
        let runs: Vec<&str> = out.lines().filter(|l| l.starts_with("run ")).collect();
        run_count(runs[1])
    };
    measured(
        "short kernels after long ones, beside a saturating process",
        || {
            let (_dir, log, gpu) = shared_gpu_files();
            let solo = short_kernels(&on_shared_gpu(&d, &log, &gpu, &[(clients.0, a)])[0].1);
            let both = on_shared_gpu_with_stderr(
                &d,
                &log,
                &gpu,
                &[(clients.0, a), (clients.1, "sleep:60 run:1800:2000000:1:0")],
                &[("GPUSHARE_STATS", "1")],
            );
            let beside = short_kernels(&both[0].1);
            let err = &both[0].2;
            let (lowered, raised, now, most) = (
                stat(err, "on the host), "),
                stat(err, " lowered and "),
                stat(err, ", now "),
                stat(err, "(at most "),
            );
            eprintln!(
                "short kernels alone {solo}, beside the saturating process {beside}; time per \
                 launch learnt {now} us (at most {most} us), lowered by timed launches {lowered} \
                 times, raised {raised} times"
            );
            assert!(most >= 2_000, "5 ms kernels learnt as {most} us");
            if now > 1300 {
                return Err(format!(
                    "learnt {now} us per 50 us kernel beside the saturating process after 5 ms \
                     ones ({lowered} timed launches lowered it)"
                ));
            }
            if (beside as f64) < least * solo as f64 {
                return Err(format!(
                    "{beside} short kernels beside the saturating process, {solo} alone: held back"
                ));
            }
            Ok(())
        },
    );
}

/// [`short_kernels_after_long_ones_beside_a_saturating_process`], processes of one client:
/// their leases run together and are extended.
#[test]
fn a_time_per_launch_learnt_too_long_is_lowered_beside_others() {
    let Some(_serial) = prepare() else {
        return;
    };
    short_kernels_after_long_ones_beside_a_saturating_process(("", ""), "", 0.6);
}

/// The same, the short kernels of a light client (request 0.25) beside a saturating one of
/// request 0.75: its leases run beside the other's without being extended. Processes of unequal
/// weights overlap only while their demands fit, so the light one also takes turns with the
/// other part of the time, where markers teach its time per launch too: how many launches it
/// makes beside the other varies from 0.24 to 0.98 of what it makes alone, and overlaps what it
/// made without the lowering (0.47-0.55, learnt 1.6-1.8 ms per launch), so the learnt time per
/// launch tells them apart (with the lowering 80-360 us) and the count only bounds a fault.
#[test]
fn a_time_per_launch_learnt_too_long_is_lowered_beside_a_heavier_client() {
    let Some(_serial) = prepare() else {
        return;
    };
    short_kernels_after_long_ones_beside_a_saturating_process(
        ("small", "big"),
        "[clients.big]\nrequest = 0.75\nusers = [\"{uid}\"]\n[clients.small]\nrequest = 0.25\nusers = [\"{uid}\"]\n",
        0.2,
    );
}

/// A process that launches a short kernel, synchronizes and then works on the host for
/// milliseconds (an inference loop, a training loop reading its loss) sees its markers done
/// only at its next launch, long after the GPU finished them: the hook does not take its
/// kernels for ones as long as its pauses (it would then hold each launch back for the one
/// before it to finish, and beside others for their turns too).
#[test]
fn kernels_seen_done_after_a_pause_do_not_teach_a_long_time_per_launch() {
    let Some(_serial) = prepare() else {
        return;
    };
    measured("50 us kernels, each followed by 3 ms on the host", || {
        let (_, most, _) = time_per_launch_learnt(&["run:400:50000:1:3000"], &[]);
        // learnt only from completions seen within half the time they took: at most twice 50 us
        if most > 200 {
            return Err(format!("learnt up to {most} us per 50 us kernel"));
        }
        Ok(())
    });
}

/// The output and the stats line (`GPUSHARE_STATS=1`) of a process run alone under the hook
/// on the fake's shared GPU with `env`.
fn alone_with_stats(ops: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let d = overlapping_daemon("").start();
    let (_dir, log, gpu) = shared_gpu_files();
    let mut run = Run::new(Via::Dlsym)
        .daemon(&d)
        .log(&log)
        .env("FAKE_CUDA_GPU", &gpu.display().to_string())
        .env("GPUSHARE_STATS", "1");
    for (k, v) in env {
        run = run.env(k, v);
    }
    let out = run.output(ops);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), err)
}

/// The number that follows `after` in the stats line of `stderr`.
fn stat(stderr: &str, after: &str) -> u64 {
    stderr
        .rsplit(after)
        .next()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.trim_start_matches('(').parse().ok())
        .unwrap_or_else(|| panic!("no stats line: {stderr}"))
}

/// A loop whose host falls behind the GPU in part of each step (20 kernels of 200 us launched
/// back to back, then 3 ms of host work, never synchronizing) keeps the GPU busy on a lease of
/// its own, as without gpushare: early in a lease the queue may hold the rest of the lease too.
/// Held to `queue_ahead` (2 ms) all along, the host waited for room during each burst, the
/// queue ran dry in the host work, and the GPU idled a quarter of the time (0.75 busy).
///
/// Two such loops of clients 0.75 / 0.25 keep the GPU busy, the queue shrinking to
/// `queue_ahead` by each lease's end, and what they get is divided 0.75 / 0.25 within 3 points. Each hand-over leaves the GPU idle for about one host step (a process that
/// gets the token mid-burst launches the rest of the burst, then works on the host with an empty
/// queue): the 0.25 one pays it once per lease, the 0.75 one once per three leases, so the
/// 0.25 one runs at about 0.22-0.23 of its rate alone. While leases were extended at their
/// end, the 0.75 one paid at each extension too (its queue drained to `queue_ahead` first):
/// 0.71 / 0.24 with the fake then, 0.73-0.74 / 0.22-0.23 with extensions asked ahead.
#[test]
fn a_loop_whose_host_falls_behind_keeps_the_gpu_busy_on_its_lease() {
    let Some(_serial) = prepare() else {
        return;
    };
    // Without burst credit: the client idle while the other ran alone is owed at its start
    // and runs ahead for it; measured here is the division from the start.
    let d = overlapping_daemon("[clients.big]\nrequest = 0.75\nusers = [\"{uid}\"]\n[clients.small]\nrequest = 0.25\nusers = [\"{uid}\"]\n")
        .table("daemon", "burst_window = \"0s\"")
        .start();
    let op = "burst:1500:200000:20:3000";
    measured("bursts of launches, then host work", || {
        let (dir, log, gpu) = shared_gpu_files();
        let solo_log = dir.path().join("solo.log");
        let alone = on_shared_gpu(&d, &solo_log, &dir.path().join("solo-gpu"), &[("big", op)]);
        let k = kernels(&solo_log);
        let (busy, from, to) = busy_together(&k, &[alone[0].0]);
        let solo = busy[0] as f64 / (to - from) as f64;
        let ran = on_shared_gpu(&d, &log, &gpu, &[("big", op), ("small", op)]);
        let k = kernels(&log);
        let (busy, from, to) = busy_together(&k, &[ran[0].0, ran[1].0]);
        let together = (busy[0] + busy[1]) as f64 / (to - from) as f64;
        let share = |i: usize| busy[i] as f64 / (to - from) as f64 / solo;
        let (big, small) = (share(0), share(1));
        eprintln!(
            "alone the GPU was busy {solo:.3} of the time, the pair {together:.3}; big ran at {big:.3} of its rate alone, small at {small:.3}"
        );
        if solo < 0.93 {
            return Err(format!("alone the GPU was busy {solo:.3} of the time"));
        }
        // Against the same loop alone on this machine: its host's speed sets both (0.99-1.0
        // alone and 0.92-0.94 for the pair on an idle test machine; 0.94-0.97 and 0.86-0.90
        // with a fifth of its CPU time taken by a load of higher priority).
        if together < 0.9 * solo {
            return Err(format!(
                "the pair kept the GPU busy {together:.3} of the time, the loop alone {solo:.3}"
            ));
        }
        // The division is the scheduler's; the hand-overs' idle gaps (what both lose beside
        // their rates alone) are the host's speed.
        let division = big / (big + small);
        if (division - 0.75).abs() > 0.03 {
            return Err(format!(
                "big ran at {big:.3} of its rate alone, small at {small:.3}: {division:.3} of what they got to big, want 0.75"
            ));
        }
        Ok(())
    });
}

/// The queue checks and the launches of a process that runs the `run:` op `op` alone under the
/// hook ([`alone_with_stats`]).
fn queue_checks_alone(op: &str) -> (u64, u64) {
    let (out, err) = alone_with_stats(&[op], &[]);
    let launched = run_count(line(&out, "run "));
    let checks = stat(&err, "lease thread; ");
    eprintln!("{checks} queue checks for {launched} launches");
    (checks, launched)
}

/// Runs the `run:` op `op` alone under the hook ([`queue_checks_alone`]) and asserts that it
/// launched at least `least` kernels and checked its queue less than once per `per` launches.
fn checks_alone_at_most(op: &str, least: u64, per: u64) {
    let Some(_serial) = prepare() else {
        return;
    };
    let (checks, launched) = queue_checks_alone(op);
    assert!(launched >= least, "{launched} kernels ({op})");
    assert!(
        checks * per < launched,
        "{checks} queue checks for {launched} launches"
    );
}

/// A process alone that keeps its queue full (short kernels, never synchronizing) checks its
/// queue and records a marker every few launches, not at every one: a training loop whose host
/// is its bottleneck pays for each driver call on its launch path.
#[test]
fn a_backlogged_process_alone_checks_its_queue_every_few_launches() {
    checks_alone_at_most("run:400:50000:0:0", 2000, 2);
}

/// A process alone whose queue is empty at each launch (50 us kernels, a synchronize after
/// each) checks its queue and records a marker every few launches, not at every other one: each
/// check is a query and a record in the driver, which a loop of short kernels that synchronizes
/// often pays on its launch path (on an H100, a loop of 50 us kernels synchronizing after each
/// ran at 0.96 of its rate alone under gpushared).
#[test]
fn a_process_with_an_empty_queue_checks_it_every_few_launches() {
    checks_alone_at_most("run:400:50000:1:0", 1000, 4);
}

/// A process alone that synchronizes every 16 short kernels (20 us, about a CuPy loop of
/// matmuls and element-wise kernels) finds its queue empty or short at most checks: it checks
/// it once per many launches. Each check is a query, a record and a capture-state read in the
/// driver on the launch path: every eight launches, a CuPy loop alone under gpushared on an H100
/// kept 0.957 and 0.977 of its rate, with checks up to 32 launches apart 1.003 and 0.976.
#[test]
fn a_process_that_synchronizes_every_few_short_kernels_checks_its_queue_rarely() {
    checks_alone_at_most("run:400:20000:16:0", 4000, 16);
}

/// A process alone that keeps launching has its leases extended by its lease thread a quarter
/// lease ahead of their ends: its launching thread does not stop at a lease's end for a round
/// trip to the daemon (20 ms leases: 5 ms of such stops a second before, 0.2 ms now), and its
/// queue does not shrink to `queue_ahead` there.
#[test]
fn a_busy_process_alone_is_extended_ahead_of_its_leases_ends() {
    let Some(_serial) = prepare() else {
        return;
    };
    let (out, err) = alone_with_stats(&["run:1000:20000:16:0"], &[]);
    let launched = run_count(line(&out, "run "));
    let extensions = stat(&err, "grants, ");
    let ahead = stat(&err, "extensions (");
    let renewing_ms: f64 = err
        .rsplit("ahead of the end), ")
        .next()
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no stats line: {err}"));
    eprintln!(
        "{launched} launches, {extensions} extensions ({ahead} ahead), {renewing_ms} ms renewing"
    );
    assert!(
        extensions >= 30,
        "{extensions} extensions in 1 s of 20 ms leases"
    );
    // On a loaded machine the lease thread may miss the window of a lease or two.
    assert!(
        ahead * 4 >= extensions * 3,
        "{ahead} of {extensions} extensions ahead of the lease's end"
    );
}

/// The stats line's time per launch learnt last and the longest one, in microseconds, and the
/// timed launches left out as slow on the host, of a process run alone under the hook on the
/// fake's shared GPU with `env`.
fn time_per_launch_learnt(ops: &[&str], env: &[(&str, &str)]) -> (u64, u64, u64) {
    let (_, err) = alone_with_stats(ops, env);
    let learnt = (
        stat(&err, ", now "),
        stat(&err, "(at most "),
        stat(&err, "launches timed "),
    );
    eprintln!(
        "time per launch learnt: {} us, at most {} us; {} timed launches slow on the host",
        learnt.0, learnt.1, learnt.2
    );
    learnt
}

/// A process's first launches are slow on the host (the driver loads the kernels' modules): a
/// pair of timing events around such a launch also measures the loading, 3 ms for a 60 us
/// kernel. Taken for its first estimate of the GPU time per launch, it held the process to one
/// launch at a time alone, and beside others made it wait at every launch for their turns.
#[test]
fn a_launch_slow_on_the_host_does_not_set_the_time_per_launch() {
    let Some(_serial) = prepare() else {
        return;
    };
    let (now, most, slow) = time_per_launch_learnt(
        &["run:400:60000:0:0"],
        &[("FAKE_CUDA_SLOW_LAUNCHES", "20:3000")],
    );
    assert!(slow >= 1, "no timed launch was slow on the host");
    assert!(most <= 200, "learnt up to {most} us per 60 us kernel");
    assert!(now <= 200, "learnt {now} us per 60 us kernel");
}

/// A process taken for one of kernels longer than the queue budget is held to one launch at a
/// time, where no stretch of unbroken work teaches it better: it learns from each launch's own
/// time then, and shorter kernels are known as such.
#[test]
fn a_process_held_to_one_launch_at_a_time_learns_shorter_kernels() {
    let Some(_serial) = prepare() else {
        return;
    };
    let (now, most, _) = time_per_launch_learnt(&["run:200:3000000:0:0", "run:400:60000:0:0"], &[]);
    assert!(most >= 2_000, "3 ms kernels learnt as {most} us");
    assert!(
        now <= 200,
        "learnt {now} us per 60 us kernel after 3 ms ones"
    );
}

/// A batch client (request 0.5) and an interactive one within its request (0.1; its work keeps
/// the GPU busy about 0.02 of the time), both of this test's user. An interactive client goes at
/// once only while it is not ahead of its due share (`gpushare-scheduler(7)`): one of request 0,
/// due about 0.02 beside this batch client, would run just past it and wait in line.
const BATCH_AND_LIVE: &str = "[clients.batch]\nrequest = 0.5\nusers = [\"{uid}\"]\n[clients.live]\nrequest = 0.1\ninteractive = true\nusers = [\"{uid}\"]\n";

/// On the fake's shared GPU, a saturating batch process (1 ms kernels for 2.5 s, never
/// synchronizing) and an interactive one (100 us kernels for 2 s, each synchronized, 5 ms apart).
fn live_beside_batch(d: &Daemon, log: &Path, gpu: &Path) -> Vec<(u32, String)> {
    on_shared_gpu(
        d,
        log,
        gpu,
        &[
            ("batch", "run:2500:1000000:0:0"),
            ("live", "run:2000:100000:1:5000"),
        ],
    )
}

/// An interactive client's kernels run at once beside a saturating batch client (whose lease
/// is revoked and whose queue is bounded): never waiting for the batch client's 20 ms lease to
/// end, while the batch client gets the GPU back as soon as the interactive client is idle.
#[test]
fn an_interactive_client_runs_at_once_beside_a_saturating_one() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = overlapping_daemon(BATCH_AND_LIVE).start();
    measured("interactive beside batch", || {
        let (_dir, log, gpu) = shared_gpu_files();
        let ran = live_beside_batch(&d, &log, &gpu);
        let latency = |p: &str| -> u64 {
            line(&ran[1].1, "run ")
                .split_whitespace()
                .find_map(|f| f.strip_prefix(p))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {p} in {}", ran[1].1))
        };
        let (p50, p99) = (latency("p50="), latency("p99="));
        let k = kernels(&log);
        let (busy, from, to) = busy_together(&k, &[ran[0].0, ran[1].0]);
        let batch = busy[0] as f64 / (to - from) as f64;
        let gap = median_gap_after(&k, ran[1].0, ran[0].0);
        eprintln!(
            "interactive p50 {p50} us, p99 {p99} us, batch kept {batch:.3} of the GPU, back {} us after an interactive kernel (median)",
            gap / 1000
        );
        // Behaviour, not speed: an interactive kernel waits for the running batch kernel and
        // the bounded queue (1-2 ms), never for the batch client's 20 ms lease to end, which
        // would put the median near 10 ms and the p99 near 20 ms. The fake GPU's kernels run on
        // the host: where others take the host's CPU in bursts (a busy CI machine), the tail
        // holds those bursts too (p99 7.5 ms seen on a busy machine; 11-14 ms with a fifth of
        // each CPU taken in 5-15 ms bursts).
        if p50 >= 5_000 || p99 >= 18_000 {
            return Err(format!(
                "interactive p50 {p50} us, p99 {p99} us: it waited for the batch lease to end"
            ));
        }
        // The batch client has the token back as soon as the interactive client's work is
        // done (a round trip to the daemon), not at the end of a lease (20 ms) nor at the
        // next interactive request (5 ms): seen 0.2 ms; what share of the GPU that
        // leaves it depends on how fast the host turns the lease round (0.6-0.8 here, 0.3 on a
        // loaded host).
        if gap > 2_500_000 {
            return Err(format!(
                "the batch client ran again {} us after an interactive kernel (median)",
                gap / 1000
            ));
        }
        Ok(())
    });
}

/// The median time from the end of each kernel of `after` to the start of the next kernel of
/// `next` (nanoseconds).
fn median_gap_after(k: &[(u32, u64, u64, String)], after: u32, next: u32) -> u64 {
    let starts: Vec<u64> = {
        let mut v: Vec<u64> = k.iter().filter(|x| x.0 == next).map(|x| x.1).collect();
        v.sort_unstable();
        v
    };
    let mut gaps: Vec<u64> = k
        .iter()
        .filter(|x| x.0 == after)
        .filter_map(|x| {
            let i = starts.partition_point(|&s| s < x.2);
            starts.get(i).map(|&s| s - x.2)
        })
        .collect();
    gaps.sort_unstable();
    gaps.get(gaps.len() / 2).copied().unwrap_or(u64::MAX)
}

/// When each kernel of `pid` was launched (queued) on the fake's shared GPU and when it started,
/// in CLOCK_MONOTONIC nanoseconds, in the log's order.
fn queued_and_started(log: &Path, pid: u32) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.split_whitespace().next() == Some(pid.to_string().as_str()))
        .filter_map(|l| {
            let start: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
            let queued: u64 = l
                .split_whitespace()
                .find_map(|f| f.strip_prefix("queued="))?
                .parse()
                .ok()?;
            Some((queued, start))
        })
        .collect()
}

/// How long each kernel of `pid` waited on the fake's shared GPU behind the work queued before
/// it (from its launch to its start), in nanoseconds, sorted.
fn queue_waits(log: &Path, pid: u32) -> Vec<u64> {
    let mut waits: Vec<u64> = queued_and_started(log, pid)
        .into_iter()
        .map(|(queued, start)| start.saturating_sub(queued))
        .collect();
    waits.sort_unstable();
    waits
}

/// While an interactive client is active, a saturating batch process keeps a tight queue (a
/// quarter of `queue_ahead`, 0.5 ms): of its 1 ms kernels, one at a time. So an interactive
/// kernel waits at most for the batch kernel running when it is launched, not for a queue of
/// them (with the usual 2 ms budget, two).
#[test]
fn beside_an_interactive_client_a_batch_holder_keeps_a_tight_queue() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = overlapping_daemon(BATCH_AND_LIVE).start();
    measured("a tight batch queue", || {
        let (_dir, log, gpu) = shared_gpu_files();
        let ran = live_beside_batch(&d, &log, &gpu);
        let waits = queue_waits(&log, ran[1].0);
        if waits.len() < 150 {
            return Err(format!("{} interactive kernels logged", waits.len()));
        }
        let p95 = waits[waits.len() * 95 / 100];
        eprintln!(
            "interactive kernels waited p50 {} us, p95 {} us, max {} us",
            waits[waits.len() / 2] / 1000,
            p95 / 1000,
            waits[waits.len() - 1] / 1000
        );
        // seen at p95: 0.9-1.7 ms with tight leases, 1.9-3.6 ms without (two kernels queued)
        if p95 > 1_800_000 {
            return Err(format!(
                "interactive kernels waited {} us (p95) behind the batch queue",
                p95 / 1000
            ));
        }
        Ok(())
    });
}

/// Every GPU has its own token: two saturating processes of two clients (requests 0.75 and
/// 0.25) on two GPUs of one machine both run as fast as alone, where one token for the machine
/// would give them 0.75 and 0.25 of it.
#[test]
fn processes_on_different_gpus_do_not_wait_for_each_other() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = overlapping_daemon("[clients.big]\nrequest = 0.75\nusers = [\"{uid}\"]\n[clients.small]\nrequest = 0.25\nusers = [\"{uid}\"]\n").start();
    measured("two GPUs", || {
        let (_dir, log, gpu) = shared_gpu_files();
        let op = "run:2000:1600000:4:0";
        let ran = on_shared_gpu(
            &d,
            &log,
            &gpu,
            &[("big", op), ("small", &format!("device:1 {op}"))],
        );
        let pids = [ran[0].0, ran[1].0];
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let on_gpu1 = text.lines().filter(|l| l.ends_with(" dev=1")).count();
        if on_gpu1 == 0 {
            return Err("no kernel ran on GPU 1".into());
        }
        let k = kernels(&log);
        let (busy, from, to) = busy_together(&k, &pids);
        let span = (to - from) as f64;
        let (big, small) = (busy[0] as f64 / span, busy[1] as f64 / span);
        let both = overlap_ns(&k) as f64 / span;
        eprintln!(
            "two GPUs: big {big:.3}, small {small:.3} busy, both at once {both:.3} of {} ms",
            (to - from) / 1_000_000
        );
        if to - from <= 1_200_000_000 {
            return Err(format!("ran together {} ms", (to - from) / 1_000_000));
        }
        // Alone, such a job keeps its GPU about 0.97 busy (it synchronizes every 4 kernels),
        // and the two ran at once most of the time; one token for both GPUs would give them
        // about 0.75 and 0.25, one after the other. The fake's kernels run on the host: with a
        // fifth of each CPU taken by others, each kept its GPU 0.83-0.92 busy.
        if both < 0.6 {
            return Err(format!(
                "big kept its GPU {big:.3} busy, small {small:.3}, both at once {both:.3} of the time: they waited for each other"
            ));
        }
        Ok(())
    });
}

/// A client's memory cap holds on each GPU: a process of a client capped at 1 GiB allocates
/// its cap on GPU 0 and again on GPU 1, and not a byte more on either; each GPU's memory query
/// shows the cap and what is left of it there.
#[test]
fn the_memory_cap_holds_on_each_gpu() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.capped]\nmemory = \"1GiB\"\nusers = [\"{uid}\"]\n").start();
    let half = (GIB / 2).to_string();
    let out = Run::new(Via::Link)
        .daemon(&d)
        .client("capped")
        .env("FAKE_CUDA_DEVICES", "2")
        .ok(&[
            &format!("alloc:{half}"),
            &format!("alloc:{half}"),
            "alloc:1",
            "info",
            "device:1",
            "info",
            &format!("alloc:{half}"),
            "info",
            &format!("alloc:{half}"),
            "alloc:1",
            "device:0",
            "free:0",
            "alloc:1",
            "device:1",
            "alloc:1",
        ]);
    let l: Vec<&str> = out.lines().collect();
    assert_eq!(
        l,
        [
            "init 0".to_string(),
            format!("alloc {half} -> 0"),
            format!("alloc {half} -> 0"),
            "alloc 1 -> 2".into(),
            format!("info free=0 total={GIB} -> 0"),
            "device 1 -> 0".into(),
            format!("info free={GIB} total={GIB} -> 0"),
            format!("alloc {half} -> 0"),
            format!("info free={half} total={GIB} -> 0"),
            format!("alloc {half} -> 0"),
            "alloc 1 -> 2".into(),
            "device 0 -> 0".into(),
            "free 0 -> 0".into(),
            // Freed on GPU 0: room there, none on GPU 1.
            "alloc 1 -> 0".into(),
            "device 1 -> 0".into(),
            "alloc 1 -> 2".into(),
        ],
    );
}

/// The kernels of the fake's log on GPU 0 and on GPU 1, as (pid, start, end) each.
fn kernels_by_gpu(log: &Path) -> [Vec<(u32, u64, u64)>; 2] {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut by_gpu = [vec![], vec![]];
    for l in text.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        let k = (
            f[0].parse().unwrap(),
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
        );
        by_gpu[usize::from(l.ends_with(" dev=1"))].push(k);
    }
    by_gpu
}

/// How long kernels of `a` and of `b` ran at the same time, and the span from the first start
/// to the last end of them all (ns).
fn overlap_and_span(a: &[(u32, u64, u64)], b: &[(u32, u64, u64)]) -> (u64, u64) {
    let together = a
        .iter()
        .flat_map(|x| {
            b.iter()
                .map(move |y| x.2.min(y.2).saturating_sub(x.1.max(y.1)))
        })
        .sum();
    let from = a.iter().chain(b).map(|k| k.1).min().unwrap_or(0);
    let to = a.iter().chain(b).map(|k| k.2).max().unwrap_or(0);
    (together, to - from)
}

/// Of a process on two GPUs alone, 300 ms of kernels on each: whether it ran on both at once,
/// in about the time of one GPU's work (the two GPUs' kernels overlapping for most of it).
fn ran_on_both_gpus_at_once(log: &Path) -> Result<(), String> {
    let [gpu0, gpu1] = kernels_by_gpu(log);
    if (gpu0.len(), gpu1.len()) != (300, 300) {
        return Err(format!("{} and {} kernels logged", gpu0.len(), gpu1.len()));
    }
    let (together, span) = overlap_and_span(&gpu0, &gpu1);
    eprintln!(
        "two GPUs: {} ms of work on both at once, {} ms in all",
        together / 1_000_000,
        span / 1_000_000
    );
    // One lease at a time (the GPUs in turn) took 600 ms and more, with under 100 ms together.
    if together < 200_000_000 || span > 450_000_000 {
        return Err(format!(
            "{} ms of work on both GPUs at once, {} ms in all: the GPUs took turns",
            together / 1_000_000,
            span / 1_000_000
        ));
    }
    Ok(())
}

/// A process that launches on two GPUs from two threads (one per GPU, as PyTorch's DataParallel
/// does) holds each GPU's lease on its own: alone, it runs on both GPUs at once, and its 300 ms
/// of kernels on each take about 300 ms, not the 600 ms of taking the GPUs in turn.
#[test]
fn a_process_on_two_gpus_runs_on_both_at_once() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.both]\nusers = [\"{uid}\"]\n").start();
    measured("two GPUs from two threads", || {
        let (_dir, log, gpu) = shared_gpu_files();
        let ran = on_shared_gpu(&d, &log, &gpu, &[("both", "gpu_threads:2:300")]);
        assert!(ran[0].1.contains("gpu_threads 2 300 -> 0"), "{}", ran[0].1);
        ran_on_both_gpus_at_once(&log)
    });
}

/// One thread that launches on two GPUs in turn, asynchronously (JAX's way on several devices:
/// each launch on another GPU than the one before), runs on both at once too: each launch goes
/// through the lease of its own GPU, and neither lease ends for a launch on the other GPU.
#[test]
fn one_thread_launching_on_two_gpus_in_turn_runs_on_both_at_once() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon("[clients.both]\nusers = [\"{uid}\"]\n").start();
    measured("one thread on two GPUs", || {
        let (_dir, log, gpu) = shared_gpu_files();
        let ran = on_shared_gpu(&d, &log, &gpu, &[("both", "alternate:2:300:1000000")]);
        assert!(ran[0].1.contains("alternate 2 300 -> 0"), "{}", ran[0].1);
        ran_on_both_gpus_at_once(&log)
    });
}

/// Each GPU's scheduler weighs a process on two GPUs as a client there: beside a process of
/// another client on GPU 1 only (requests 0.75 for the two-GPU process's client, 0.25 for the
/// other), the two-GPU process gets its share of GPU 1 and the other process its own, while
/// GPU 0, where nobody else runs, is as busy with the two-GPU process's work as it would be
/// alone.
#[test]
fn a_process_on_two_gpus_keeps_its_share_of_each() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = one_lease_daemon(
        "[clients.both]\nrequest = 0.75\nusers = [\"{uid}\"]\n\
         [clients.one]\nrequest = 0.25\nusers = [\"{uid}\"]\n",
    )
    .start();
    measured("two GPUs beside another client on one", || {
        let (_dir, log, gpu) = shared_gpu_files();
        let ran = on_shared_gpu(
            &d,
            &log,
            &gpu,
            &[
                ("both", "gpu_threads:2:1200"),
                ("one", "device:1 run:2500:1000000:4:0"),
            ],
        );
        let (both, one) = (ran[0].0, ran[1].0);
        let [gpu0, gpu1] = kernels_by_gpu(&log);
        // GPU 0: the two-GPU process's alone; busy from its first kernel to its last.
        let on0: Vec<_> = gpu0.iter().filter(|k| k.0 == both).collect();
        let from = on0.iter().map(|k| k.1).min().unwrap_or(0);
        let to = on0.iter().map(|k| k.2).max().unwrap_or(0);
        let busy0 = on0.iter().map(|k| k.2 - k.1).sum::<u64>() as f64 / (to - from).max(1) as f64;
        // GPU 1: each process's part of the time both ran there.
        let k1: Vec<(u32, u64, u64, String)> = gpu1
            .iter()
            .map(|&(pid, s, e)| (pid, s, e, String::new()))
            .collect();
        let (busy, from1, to1) = busy_together(&k1, &[both, one]);
        let span1 = (to1 - from1) as f64;
        let (mine, theirs) = (busy[0] as f64 / span1, busy[1] as f64 / span1);
        eprintln!(
            "two GPUs beside another client: GPU 0 {busy0:.3} busy; GPU 1 {mine:.3} / {theirs:.3} \
             over {} ms together",
            (to1 - from1) / 1_000_000
        );
        if to1 - from1 < 800_000_000 {
            return Err(format!(
                "together on GPU 1 for {} ms",
                (to1 - from1) / 1_000_000
            ));
        }
        // Taking the GPUs in turn, GPU 0 idled while the process held GPU 1's lease.
        if busy0 < 0.9 {
            return Err(format!("GPU 0 {busy0:.3} busy: it waited for GPU 1"));
        }
        if !(0.6..=0.9).contains(&mine) || theirs < 0.12 {
            return Err(format!(
                "GPU 1 shared {mine:.3} / {theirs:.3} for requests 0.75 / 0.25"
            ));
        }
        Ok(())
    });
}

/// A queue stalled behind work that is not the process's own (here an unmanaged process's 1.5 s
/// kernel) still bounds the launches: a wait that ran into its limit used to let the process
/// launch freely until one of its markers completed, queueing as many kernels as it could launch
/// meanwhile. Now each launch over the allowance still waits, up to 1 ms.
#[test]
fn a_stalled_queue_still_bounds_the_launches() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = overlapping_daemon("[clients.a]\nusers = [\"{uid}\"]\n").start();
    let (_dir, log, gpu) = shared_gpu_files();
    let gpu = gpu.display().to_string();
    let mut unmanaged = Run::new(Via::Dlsym)
        .log(&log)
        .env("FAKE_CUDA_GPU", &gpu)
        .command(&["launch:1:1500000000"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let out = Run::new(Via::Dlsym)
        .daemon(&d)
        .client("a")
        .log(&log)
        .env("FAKE_CUDA_GPU", &gpu)
        .ok(&["run:600:1000000:0:0"]);
    assert!(unmanaged.wait().unwrap().success());
    let launched = run_count(line(&out, "run "));
    eprintln!("600 ms of launching behind a 1.5 s kernel: {launched} kernels of 1 ms");
    assert!(
        launched <= 1_000,
        "{launched} kernels of 1 ms queued in 600 ms"
    );
}

/// A process of long kernels that never synchronizes, beside processes of other clients and
/// weights, keeps a bounded queue from its first launch on. Two faults let it queue seconds of
/// 13 ms kernels: checked every 0.1 ms before it knew the length of its kernels, it launched
/// hundreds of them between its first two checks (the fake's launches take a microsecond; a
/// PyTorch launch on an H100 takes several), and a wait for its queue that ran into its limit
/// let it launch freely until one of its markers completed (the ring of markers full, more than
/// a thousand dropped). The others' markers then waited behind that queue, and stalled too: in
/// 2 s of launching, some processes got their first kernel after 2.8-3.5 s, and the GPU ran on
/// for 3-257 s. Now every launch checks until one launch, timed on its own, tells the length
/// (this test fails without it), and a stalled launch over its allowance still waits a short
/// while ([`a_stalled_queue_still_bounds_the_launches`]).
#[test]
fn a_long_kernel_queue_stays_bounded_from_the_first_launch() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = overlapping_daemon("[clients.u1]\nusers = [\"{uid}\"]\n[clients.big]\nusers = [\"{uid}\"]\n[clients.inf]\nusers = [\"{uid}\"]\n[clients.rl]\nusers = [\"{uid}\"]\n").start();
    // two rounds, each checked once: the faults showed in three runs of five
    for round in 1..=2 {
        let (_dir, log, gpu) = shared_gpu_files();
        let ran = on_shared_gpu(
            &d,
            &log,
            &gpu,
            &[
                ("u1", "run:2000:1000000:4:0"),
                ("u1", "run:2000:300000:8:0"),
                ("big", "run:2000:13000000:0:0"),
                ("inf", "run:2000:100000:1:3000"),
                ("rl", "run:2000:20000:1:500"),
            ],
        );
        let k = kernels(&log);
        // Each process against its own launching (its "from" and "to"), as the fake GPU ran
        // its kernels: a loaded host starts the processes at different moments, which
        // neither stretches a queue nor delays a lease.
        let mut after_ms = vec![];
        let mut firsts = vec![];
        for (pid, out) in &ran {
            let (from, to) = launching(line(out, "run "));
            let mine: Vec<_> = k.iter().filter(|x| x.0 == *pid).collect();
            let first = mine.iter().map(|x| x.1).min().unwrap_or(u64::MAX);
            let last = mine.iter().map(|x| x.2).max().unwrap_or(0);
            after_ms.push(last.saturating_sub(to) / 1_000_000);
            firsts.push(first.saturating_sub(from) / 1_000_000);
        }
        eprintln!(
            "2 s of launching: the GPU ran on for {after_ms:?} ms after each stopped launching; \
             first kernels {firsts:?} ms after each began"
        );
        assert!(
            after_ms.iter().all(|&t| t <= 800),
            "round {round}: the GPU ran on for {after_ms:?} ms after the processes stopped launching"
        );
        // the fault: 2.8-3.5 s; on a loaded machine of two CPUs, under the whole suite, a
        // process's first kernel came 602 ms after it began launching
        assert!(
            firsts.iter().all(|&t| t <= 1500),
            "round {round}: a process's first kernel came late: {firsts:?} ms"
        );
    }
}

/// Most kernels of `pid` queued on the fake's shared GPU and not yet started at any of its
/// launches from `from` on (CLOCK_MONOTONIC ns).
fn most_queued_from(log: &Path, pid: u32, from: u64) -> usize {
    let mine = queued_and_started(log, pid);
    mine.iter()
        .filter(|(q, _)| *q >= from)
        .map(|&(at, _)| mine.iter().filter(|&&(q, s)| q <= at && s > at).count())
        .max()
        .unwrap_or(0)
}

/// A process whose first launches are short and whose later kernels are long (a job that draws
/// its operands with a few short kernels, then runs long matmuls and never synchronizes), alone
/// at first and then beside processes of other clients, keeps a short queue of its long
/// kernels. Taken for one of 0.3 ms kernels, it queued the rest of its lease by that time, 69-230
/// kernels of 13 ms (one to three seconds of work), and in most runs 29-207 were still queued a
/// second into its run beside the others (on an H100 such a job, beside five other clients, got 0.47-0.56
/// of the GPU where its client was charged 0.23-0.30). Now a lease of its own queues its rest
/// only once markers taught the time per launch a few times, launches timed behind its own
/// queue beside others raise a time per launch far too short, and a wait for the queue beside
/// others lasts its whole limit.
#[test]
fn long_kernels_after_short_first_launches_keep_a_short_queue() {
    let Some(_serial) = prepare() else {
        return;
    };
    let d = overlapping_daemon("[clients.u1]\nusers = [\"{uid}\"]\n[clients.u2]\nusers = [\"{uid}\"]\n[clients.big]\nusers = [\"{uid}\"]\n").start();
    measured("long kernels after a short first launch", || {
        let (_dir, log, gpu) = shared_gpu_files();
        let ran = on_shared_gpu_with_stderr(
            &d,
            &log,
            &gpu,
            &[
                ("big", "launch:4:300000 run:2000:13000000:0:0"),
                ("u1", "sleep:300 run:2000:100000:1:0"),
                ("u1", "sleep:300 run:2000:100000:1:0"),
                ("u2", "sleep:300 run:2000:100000:1:0"),
                ("u2", "sleep:300 run:2000:100000:1:0"),
            ],
            &[("GPUSHARE_STATS", "1")],
        );
        let big = &ran[0];
        let (from, _) = launching(line(&big.1, "run "));
        let early = most_queued_from(&log, big.0, from);
        let late = most_queued_from(&log, big.0, from + 1_000_000_000);
        eprintln!(
            "13 ms kernels queued at most: {early} from the first, {late} after 1 s; the time per \
             launch learnt: {} us",
            stat(&big.2, ", now ")
        );
        if early > 24 || late > 4 {
            return Err(format!(
                "{early} kernels of 13 ms queued at most, {late} after 1 s"
            ));
        }
        Ok(())
    });
}

/// A process that launches all along re-attaches once per restart of the daemon. A restarted
/// daemon numbers sessions from 1 again: a lane connection of the daemon before, taken for the
/// new session's because the ids matched, failed at its next use and lost the new session, and
/// the process re-attached three times over two restarts.
#[test]
fn a_process_re_attaches_once_per_restart_of_the_daemon() {
    let Some(_serial) = prepare() else {
        return;
    };
    let mut d = one_lease_daemon("[clients.a]\nusers = [\"{uid}\"]\n").start();
    let dir = tempfile::tempdir().unwrap();
    let p = Run::new(Via::Dlsym)
        .daemon(&d)
        .client("a")
        .log(&dir.path().join("kernels.log"))
        .env(
            "FAKE_CUDA_GPU",
            &dir.path().join("gpu").display().to_string(),
        )
        .command(&["run:4000:1000000:0:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(1000));
        d.stop();
        d.restart();
    }
    let out = p.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains("-> 0"),
        "{stdout}{stderr}"
    );
    assert_eq!(
        stderr.matches("gpushare: re-attached").count(),
        2,
        "two restarts: {stderr}"
    );
}
