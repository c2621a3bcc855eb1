//! The hook socket of a real gpushared: peer credentials, robustness, tokens and memory.

mod common;
use common::*;
use gpushare::protocol::{ErrorCode, Reply, Request, GRANT_SHARED, GRANT_TIGHT, MAX_FRAME};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
fn peers_attach_only_as_clients_their_uid_allows() {
    require_root();
    let alice = test_user("gpstest-alice");
    let bob = test_user("gpstest-bob");
    let d = Daemon::start(
        "[clients.alice_job]\nrequest = 0.5\nmemory = \"2GiB\"\nusers = [\"gpstest-alice\"]\n",
        None,
    );
    let out = d.cli_as(Some(alice), &["check", "--name", "alice_job"]);
    assert!(out.status.success(), "alice: {}", stderr(&out));
    assert!(
        stdout(&out).contains("attached as client alice_job: memory cap 2GiB"),
        "{}",
        stdout(&out)
    );

    let out = d.cli_as(Some(bob), &["check", "--name", "alice_job"]);
    assert_eq!(out.status.code(), Some(2), "bob must be refused");
    assert!(
        stderr(&out).contains("gpstest-bob") && stderr(&out).contains("may not attach"),
        "{}",
        stderr(&out)
    );

    // without a name, bob gets his own default client and cannot take alice's
    let out = d.cli_as(Some(bob), &["check"]);
    assert!(
        stdout(&out).contains("client user.gpstest-bob"),
        "{}",
        stdout(&out)
    );
    let out = d.cli_as(Some(bob), &["check", "--name", "user.gpstest-alice"]);
    assert!(!out.status.success());
    assert!(d.log().contains("refused attach"), "{}", d.log());
}

#[test]
fn garbage_closes_only_that_connection() {
    let d = Daemon::start("[clients.a]\nmemory = 1000\nusers = [\"*\"]\n", None);
    let mut good = d.connect();
    assert!(matches!(good.hello("a"), Reply::Welcome { .. }));

    let too_long = ((MAX_FRAME + 1) as u32).to_le_bytes().to_vec();
    let hello = Request::Hello {
        version: 1,
        client: "a".into(),
        reserved: vec![],
    }
    .to_frame()
    .unwrap();
    let mut truncated = hello.clone();
    truncated.truncate(hello.len() - 2);
    let unknown_tag = vec![1, 0, 0, 0, 99];
    let wrong_version = Request::Hello {
        version: 999,
        client: "a".into(),
        reserved: vec![],
    }
    .to_frame()
    .unwrap();
    let mut hello_then_junk = hello.clone();
    hello_then_junk.extend_from_slice(&[5, 0, 0, 0, 4, 1, 2, 3, 4]);
    let attempts: Vec<Vec<u8>> = vec![
        b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        too_long,
        truncated,
        unknown_tag,
        wrong_version,
        hello_then_junk,
        vec![0; 4],
        (0..=255u8).cycle().take(10_000).collect(),
    ];
    for bytes in attempts {
        let mut s = UnixStream::connect(&d.socket).unwrap();
        let _ = s.write_all(&bytes);
        drop(s);
        assert_eq!(
            good.reserve(GPU0, 0),
            Some(Reply::Reserved { used: 0 }),
            "the good client is undisturbed"
        );
    }
    let mut versioned = d.connect();
    let r = versioned.hello_version(999);
    assert!(
        matches!(
            r,
            Reply::Error {
                code: ErrorCode::VersionMismatch,
                ..
            }
        ),
        "{r:?}"
    );
    assert!(d.child.id() > 0 && std::path::Path::new(&format!("/proc/{}", d.pid())).exists());
}

trait HelloVersion {
    fn hello_version(&mut self, v: u32) -> Reply;
}

impl HelloVersion for Conn {
    fn hello_version(&mut self, version: u32) -> Reply {
        self.send(&Request::Hello {
            version,
            client: String::new(),
            reserved: vec![],
        });
        self.recv().expect("a reply")
    }
}

#[test]
fn thousands_of_connections_leave_no_leak() {
    let d = Daemon::start("[clients.a]\nusers = [\"*\"]\n", None);
    // one round first so that lazily opened descriptors (NSS, logs) are counted in the baseline
    let mut warm = d.connect();
    warm.hello("a");
    drop(warm);
    std::thread::sleep(Duration::from_millis(200));
    let before = open_fds(d.pid());
    for i in 0..3000 {
        let mut c = d.connect();
        match i % 3 {
            0 => {
                c.hello("a");
                c.send(&Request::Acquire { device: GPU0 });
                c.send(&Request::Reserve {
                    device: GPU0,
                    bytes: 10,
                });
            }
            1 => {
                let _ = c.0.write_all(&[1, 0]);
            }
            _ => {}
        }
    }
    wait_for(
        "descriptors back to the baseline",
        Duration::from_secs(20),
        || open_fds(d.pid()) <= before,
    );
    // and the daemon still serves, with nothing left reserved or held
    let mut c = d.connect();
    c.hello("a");
    assert_eq!(c.reserve(GPU0, 0), Some(Reply::Reserved { used: 0 }));
    c.acquire_granted(GPU0);
}

/// Clients a and b with half the GPU each, leases of 300 ms, one lease at a time (by default
/// processes of equal weights hold leases together: see
/// `by_default_equal_weights_share_the_gpu_and_unequal_ones_take_turns`).
const TWO_HALVES: &str = "[daemon]\nquantum = \"300ms\"\nconcurrent_leases = 1\n[clients.a]\nrequest = 0.5\nusers = [\"*\"]\n[clients.b]\nrequest = 0.5\nusers = [\"*\"]\n";

/// Without MPS and without `concurrent_leases`, the scheduler lets leases overlap while the
/// driver's equal turns give each process its due: always for processes of equal weights (each
/// lease that starts beside another is marked shared), never for saturating processes of
/// unequal weights whose demand is not known yet.
#[test]
fn by_default_equal_weights_share_the_gpu_and_unequal_ones_take_turns() {
    // clients a and b with these requests; a holds a lease, then b asks for one
    let a_holds = |ra: f64, rb: f64| {
        let d = Daemon::start(
            &format!(
                "[daemon]\nquantum = \"300ms\"\n[clients.a]\nrequest = {ra}\nusers = [\"*\"]\n\
                 [clients.b]\nrequest = {rb}\nusers = [\"*\"]\n"
            ),
            None,
        );
        let (mut a, mut b) = (d.connect(), d.connect());
        a.hello("a");
        b.hello("b");
        a.acquire_granted(GPU0);
        b.send(&Request::Acquire { device: GPU0 });
        (d, a, b)
    };
    let (d, _a, mut b) = a_holds(0.5, 0.5);
    assert_eq!(
        b.recv_within(Duration::from_millis(200)),
        Some(Reply::Grant {
            lease_ns: 300_000_000,
            flags: GRANT_SHARED
        }),
        "equal weights: b's lease starts beside a's"
    );
    drop(d);

    let (_d, mut a, mut b) = a_holds(0.75, 0.25);
    assert_eq!(
        b.recv_within(Duration::from_millis(100)),
        None,
        "unequal weights, a's demand unknown: b waits for its turn"
    );
    a.send(&Request::Release {
        device: GPU0,
        busy_ns: 0,
        launches: 0,
        active_ns: 0,
    });
    assert!(matches!(
        b.recv_within(Duration::from_millis(300)),
        Some(Reply::Grant { .. })
    ));
}

#[test]
fn token_alternates_and_a_crashed_holder_frees_it() {
    let d = Daemon::start(TWO_HALVES, None);
    let mut a = d.connect();
    let mut b = d.connect();
    a.hello("a");
    b.hello("b");
    a.send(&Request::Acquire { device: GPU0 });
    assert_eq!(
        a.recv_within(Duration::from_secs(1)),
        Some(Reply::Grant {
            lease_ns: 300_000_000,
            flags: 0
        })
    );
    let t0 = Instant::now();
    b.send(&Request::Acquire { device: GPU0 });
    assert_eq!(
        b.recv_within(Duration::from_millis(100)),
        None,
        "b waits while a holds the token"
    );
    // a never releases: the lease runs out and b gets the token
    assert!(matches!(
        b.recv_within(Duration::from_secs(2)),
        Some(Reply::Grant { .. })
    ));
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_millis(150),
        "b got the token after {waited:?}"
    );

    // a asks again and waits; b crashes while holding: a gets it long before b's lease would end
    a.send(&Request::Release {
        device: GPU0,
        busy_ns: 0,
        launches: 0,
        active_ns: 0,
    });
    a.send(&Request::Acquire { device: GPU0 });
    assert_eq!(a.recv_within(Duration::from_millis(50)), None);
    let t1 = Instant::now();
    drop(b);
    assert!(matches!(
        a.recv_within(Duration::from_secs(2)),
        Some(Reply::Grant { .. })
    ));
    assert!(
        t1.elapsed() < Duration::from_millis(200),
        "token freed by the crash after {:?}",
        t1.elapsed()
    );
}

#[test]
fn memory_is_counted_per_client_and_freed_when_a_process_dies() {
    let d = Daemon::start("[clients.a]\nmemory = 1000\nusers = [\"*\"]\n", None);
    let mut p1 = d.connect();
    let mut p2 = d.connect();
    p1.hello("a");
    p2.hello("a");
    assert_eq!(p1.reserve(GPU0, 600), Some(Reply::Reserved { used: 600 }));
    assert_eq!(
        p2.reserve(GPU0, 401),
        Some(Reply::OverCap {
            used: 600,
            cap: 1000
        }),
        "the cap is the client's"
    );
    assert_eq!(p2.reserve(GPU0, 400), Some(Reply::Reserved { used: 1000 }));
    // unreserving more than was reserved gives back only what that process had
    p2.send(&Request::Unreserve {
        device: GPU0,
        bytes: 5000,
    });
    assert_eq!(p2.reserve(GPU0, 0), Some(Reply::Reserved { used: 600 }));
    drop(p1); // crash
    wait_for("p1's memory to be freed", Duration::from_secs(5), || {
        p2.reserve(GPU0, 0) == Some(Reply::Reserved { used: 0 })
    });
}

#[test]
fn concurrent_leases_let_that_many_processes_hold_at_once() {
    let d = Daemon::start(
        "[daemon]\nquantum = \"500ms\"\nconcurrent_leases = 2\n[clients.a]\nusers = [\"*\"]\n",
        None,
    );
    let mut conns: Vec<Conn> = (0..3).map(|_| d.connect()).collect();
    for c in &mut conns {
        c.hello("a");
        c.send(&Request::Acquire { device: GPU0 });
    }
    let granted: Vec<bool> = conns
        .iter_mut()
        .map(|c| {
            matches!(
                c.recv_within(Duration::from_millis(200)),
                Some(Reply::Grant { .. })
            )
        })
        .collect();
    assert_eq!(
        granted.iter().filter(|g| **g).count(),
        2,
        "two slots: {granted:?}"
    );
    // the third gets its lease as soon as one holder gives its back
    let waiting = granted.iter().position(|g| !g).unwrap();
    let holder = granted.iter().position(|g| *g).unwrap();
    conns[holder].send(&Request::Release {
        device: GPU0,
        busy_ns: 0,
        launches: 0,
        active_ns: 0,
    });
    assert!(matches!(
        conns[waiting].recv_within(Duration::from_millis(200)),
        Some(Reply::Grant { .. })
    ));
}

#[test]
fn a_lease_is_extended_only_while_nobody_waits() {
    let d = Daemon::start(TWO_HALVES, None);
    let mut a = d.connect();
    let mut b = d.connect();
    a.hello("a");
    b.hello("b");
    b.send(&Request::Extend {
        device: GPU0,
        launches: 0,
        active_ns: 0,
    });
    assert_eq!(
        b.recv(),
        Some(Reply::NotExtended),
        "no lease, nothing to extend"
    );
    a.send(&Request::Acquire { device: GPU0 });
    assert!(matches!(a.recv(), Some(Reply::Grant { .. })));
    a.send(&Request::Extend {
        device: GPU0,
        launches: 0,
        active_ns: 0,
    });
    assert_eq!(
        a.recv(),
        Some(Reply::Grant {
            lease_ns: 300_000_000,
            flags: 0
        }),
        "alone: extended"
    );
    b.send(&Request::Acquire { device: GPU0 });
    assert_eq!(b.recv_within(Duration::from_millis(50)), None);
    a.send(&Request::Extend {
        device: GPU0,
        launches: 0,
        active_ns: 0,
    });
    assert_eq!(a.recv(), Some(Reply::NotExtended), "b waits");
    a.send(&Request::Renew {
        device: GPU0,
        busy_ns: 0,
        launches: 0,
        active_ns: 0,
    });
    assert!(
        matches!(
            b.recv_within(Duration::from_secs(1)),
            Some(Reply::Grant { .. })
        ),
        "the token moves on"
    );
}

#[test]
fn requests_sent_together_with_the_hello_are_served() {
    let d = Daemon::start("[clients.a]\nmemory = 1000\nusers = [\"*\"]\n", None);
    let mut c = d.connect();
    let mut bytes = Request::Hello {
        version: gpushare::protocol::PROTOCOL_VERSION,
        client: "a".into(),
        reserved: vec![],
    }
    .to_frame()
    .unwrap();
    bytes.extend(
        Request::Reserve {
            device: GPU0,
            bytes: 10,
        }
        .to_frame()
        .unwrap(),
    );
    c.0.write_all(&bytes).unwrap();
    assert!(matches!(c.recv(), Some(Reply::Welcome { .. })));
    assert_eq!(
        c.recv_within(Duration::from_secs(2)),
        Some(Reply::Reserved { used: 10 })
    );
}

/// A process cannot charge its client more than its lease's wall time: a forged report of GPU
/// time (here u64::MAX, as if its lease had run for centuries) leaves its client's next turn
/// where the lease put it.
#[test]
fn forged_gpu_time_locks_nobody_out() {
    let bus = TestBus::start();
    let d = Daemon::start(
        "[daemon]\nquantum = \"50ms\"\n[clients.a]\nrequest = 0.5\nusers = [\"*\"]\n[clients.b]\nrequest = 0.5\nusers = [\"*\"]\n",
        Some(&bus),
    );
    let mut a = d.connect();
    let mut b = d.connect();
    a.hello("a");
    b.hello("b");
    a.send(&Request::Acquire { device: GPU0 });
    assert!(matches!(a.recv(), Some(Reply::Grant { .. })));
    b.send(&Request::Acquire { device: GPU0 });
    a.send(&Request::Renew {
        device: GPU0,
        busy_ns: u64::MAX,
        launches: 0,
        active_ns: 0,
    });
    assert!(matches!(
        b.recv_within(Duration::from_secs(1)),
        Some(Reply::Grant { .. })
    ));
    // b's lease ends; a, which claimed an endless lease, is next all the same
    b.send(&Request::Renew {
        device: GPU0,
        busy_ns: 0,
        launches: 0,
        active_ns: 0,
    });
    assert!(
        matches!(
            a.recv_within(Duration::from_secs(1)),
            Some(Reply::Grant { .. })
        ),
        "the forged charge locked client a out"
    );
    let charged = d.client("a")["charged_ns"].as_u64().unwrap();
    assert!(
        charged < 1_000_000_000,
        "client a was charged {charged} ns for a lease of a few ms"
    );
}

/// A process's launch counts only choose whether leases run together or take turns: one that
/// reports absurd ones (u64::MAX at every renewal) crashes nothing and locks nobody out, through
/// the trials of the other mode.
#[test]
fn forged_launch_counts_lock_nobody_out() {
    let d = Daemon::start(
        "[daemon]\nquantum = \"20ms\"\n[clients.a]\nrequest = 0.5\nusers = [\"*\"]\n[clients.b]\nrequest = 0.5\nusers = [\"*\"]\n",
        None,
    );
    let (mut a, mut b) = (d.connect(), d.connect());
    a.hello("a");
    b.hello("b");
    a.send(&Request::Acquire { device: GPU0 });
    b.send(&Request::Acquire { device: GPU0 });
    let start = Instant::now();
    let mut grants = [0u32; 2];
    while start.elapsed() < Duration::from_secs(3) {
        for (i, c) in [&mut a, &mut b].into_iter().enumerate() {
            if let Some(Reply::Grant { .. }) = c.recv_within(Duration::from_millis(5)) {
                grants[i] += 1;
                c.send(&Request::Renew {
                    device: GPU0,
                    busy_ns: 20_000_000,
                    launches: if i == 0 { u64::MAX } else { 1000 },
                    active_ns: 0,
                });
            }
        }
    }
    assert!(grants.iter().all(|&g| g >= 20), "grants {grants:?}");
    let mut late = d.connect();
    late.hello("b");
    late.send(&Request::Extend {
        device: GPU0,
        launches: u64::MAX,
        active_ns: 0,
    });
    assert_eq!(
        late.recv(),
        Some(Reply::NotExtended),
        "the daemon still answers"
    );
}

/// A process granted the GPU alone is told on its watch connection when another process's
/// lease starts beside its own (without MPS): from then on its markers also wait for the other's
/// turns, and it must not take their times for its own kernels'.
#[test]
fn a_lease_granted_alone_is_told_when_another_starts_beside_it() {
    let d = Daemon::start(
        "[daemon]\nquantum = \"5s\"\n[clients.a]\nusers = [\"*\"]\n[clients.b]\nusers = [\"*\"]\n",
        None,
    );
    let (mut a, mut watch, _) = attach_watched(&d, "a");
    a.send(&Request::Acquire { device: GPU0 });
    assert!(
        matches!(a.recv(), Some(Reply::Grant { flags, .. }) if flags & GRANT_SHARED == 0),
        "alone: not shared"
    );
    assert_eq!(watch.recv_within(Duration::from_millis(200)), None);
    let mut b = d.connect();
    b.hello("b");
    let asked = monotonic_ns();
    b.send(&Request::Acquire { device: GPU0 });
    assert!(
        matches!(
            b.recv_within(Duration::from_secs(1)),
            Some(Reply::Grant { flags, .. }) if flags & GRANT_SHARED != 0
        ),
        "the same weight: beside the first, shared"
    );
    let told = watch.recv_within(Duration::from_secs(1));
    let got = monotonic_ns();
    assert!(
        matches!(
            told,
            Some(Reply::Joined { lease: 1, at_ns, device: GPU0 }) if (asked..=got).contains(&at_ns)
        ),
        "the first holder is told, about its first lease, when the other lease was granted \
         ({asked}..={got} ns): {told:?}"
    );
}

/// An interactive client's process gets a lease at once while a batch process holds one; the
/// batch process is told on its watch connection, and waits for the next lease after its
/// release. Only the process that owns a session may watch it.
#[test]
fn an_interactive_client_revokes_the_batch_lease() {
    let d = Daemon::start(
        "[daemon]\nquantum = \"5s\"\n[clients.batch]\nrequest = 0.5\nusers = [\"*\"]\n[clients.live]\ninteractive = true\nusers = [\"*\"]\n",
        None,
    );
    let (mut batch, mut watch, session) = attach_watched(&d, "batch");
    batch.send(&Request::Acquire { device: GPU0 });
    assert!(
        matches!(batch.recv(), Some(Reply::Grant { flags, .. }) if flags & GRANT_TIGHT == 0),
        "no interactive client yet: a queue as usual"
    );

    // another process (this test's child) may not watch the batch session
    let child = std::process::Command::new("python3")
        .args([
            "-c",
            "import socket,struct,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); \
             s.sendall(struct.pack('<IBQ', 9, 8, int(sys.argv[2]))); h=s.recv(4); \
             print(s.recv(struct.unpack('<I', h)[0])[0] if len(h)==4 else 'closed')",
            path_str(&d.socket),
            &session.to_string(),
        ])
        .output()
        .unwrap();
    assert_eq!(
        stdout(&child).trim(),
        "5",
        "an Error reply: {}",
        stderr(&child)
    );

    let mut live = d.connect();
    let Reply::Welcome { sched_flags, .. } = live.hello("live") else {
        panic!("no welcome")
    };
    assert_eq!(sched_flags, gpushare::protocol::SCHED_INTERACTIVE);
    let t0 = Instant::now();
    live.send(&Request::Acquire { device: GPU0 });
    assert!(
        matches!(
            live.recv_within(Duration::from_secs(1)),
            Some(Reply::Grant { .. })
        ),
        "the interactive process runs at once, beside the batch lease"
    );
    assert!(t0.elapsed() < Duration::from_millis(500));
    assert_eq!(
        watch.recv_within(Duration::from_secs(1)),
        Some(Reply::Revoke {
            lease: 1,
            device: GPU0
        }),
        "the batch process is told, about its first lease"
    );
    assert!(
        matches!(
            watch.recv_within(Duration::from_secs(1)),
            Some(Reply::Joined {
                lease: 1,
                device: GPU0,
                ..
            })
        ),
        "and that the interactive lease started beside it"
    );
    batch.send(&Request::Extend {
        device: GPU0,
        launches: 0,
        active_ns: 0,
    });
    assert_eq!(
        batch.recv(),
        Some(Reply::NotExtended),
        "a revoked lease ends"
    );
    // busy all along: it does not fit beside the interactive lease
    batch.send(&Request::Renew {
        device: GPU0,
        busy_ns: u64::MAX,
        launches: 0,
        active_ns: 0,
    });
    assert_eq!(batch.recv_within(Duration::from_millis(100)), None);
    live.send(&Request::Release {
        device: GPU0,
        busy_ns: 1000,
        launches: 0,
        active_ns: 0,
    });
    assert!(
        matches!(
            batch.recv_within(Duration::from_secs(1)),
            Some(Reply::Grant { flags, .. }) if flags & GRANT_TIGHT != 0
        ),
        "batch resumes once the interactive lease ends, with a short queue while the \
         interactive client was active lately"
    );
    live.send(&Request::Acquire { device: GPU0 });
    assert!(matches!(
        live.recv_within(Duration::from_secs(1)),
        Some(Reply::Grant { .. })
    ));
    assert_eq!(
        watch.recv_within(Duration::from_secs(1)),
        Some(Reply::Revoke {
            lease: 2,
            device: GPU0
        }),
        "the revocation names the batch process's second lease"
    );
}

/// `daemon.max_processes_per_user` bounds one user's attached processes: the next is refused,
/// with the reason in its error and in the log, while other users still attach.
#[test]
fn a_users_processes_beyond_the_limit_are_refused() {
    require_root();
    let dora = test_user("gpstest-dora");
    let d = Daemon::start("[daemon]\nmax_processes_per_user = 2\n", None);
    let mut first = d.connect();
    let mut second = d.connect();
    assert!(matches!(first.hello(""), Reply::Welcome { .. }));
    assert!(matches!(second.hello(""), Reply::Welcome { .. }));
    let mut third = d.connect();
    match third.hello("") {
        Reply::Error { code, message } => {
            assert_eq!(code, ErrorCode::Refused);
            assert!(
                message.contains("2 processes attached")
                    && message.contains("max_processes_per_user"),
                "{message}"
            );
        }
        r => panic!("the third process attached: {r:?}"),
    }
    let out = d.cli_as(Some(dora), &["check"]);
    assert!(out.status.success(), "another user: {}", stderr(&out));
    assert!(
        d.log().contains("refused attach") && d.log().contains("max_processes_per_user"),
        "{}",
        d.log()
    );
    // a process that goes makes room
    drop(first);
    wait_for("a freed place", Duration::from_secs(5), || {
        matches!(d.connect().hello(""), Reply::Welcome { .. })
    });
}

/// Each GPU has a token of its own: processes on two GPUs hold leases at once, while two on one
/// GPU still take turns; a release names its GPU and frees only that one.
#[test]
fn leases_on_two_gpus_run_at_once_and_on_one_gpu_alternate() {
    let d = Daemon::start(TWO_HALVES, None);
    let mut a = d.connect();
    let mut b = d.connect();
    a.hello("a");
    b.hello("b");
    a.acquire_granted(GPU0);
    b.send(&Request::Acquire { device: GPU1 });
    assert!(
        matches!(
            b.recv_within(Duration::from_millis(150)),
            Some(Reply::Grant { .. })
        ),
        "b gets GPU 1 while a holds GPU 0"
    );
    // a second process of b on GPU 0 waits for a's lease there
    let mut b2 = d.connect();
    b2.hello("b");
    b2.send(&Request::Acquire { device: GPU0 });
    assert_eq!(
        b2.recv_within(Duration::from_millis(100)),
        None,
        "one token per GPU: b2 waits while a holds GPU 0"
    );
    // giving back a lease on GPU 1 (a holds none there) leaves GPU 0 held
    a.send(&Request::Release {
        device: GPU1,
        busy_ns: 0,
        launches: 0,
        active_ns: 0,
    });
    assert_eq!(b2.recv_within(Duration::from_millis(100)), None);
    a.send(&Request::Release {
        device: GPU0,
        busy_ns: 0,
        launches: 0,
        active_ns: 0,
    });
    assert!(
        matches!(
            b2.recv_within(Duration::from_millis(200)),
            Some(Reply::Grant { .. })
        ),
        "GPU 0 passes to b2 at a's release"
    );
    // an Extend names its GPU too: b, alone on GPU 1, keeps it; a has nothing to extend there
    b.send(&Request::Extend {
        device: GPU1,
        launches: 0,
        active_ns: 0,
    });
    assert!(matches!(b.recv(), Some(Reply::Grant { .. })));
    a.send(&Request::Extend {
        device: GPU1,
        launches: 0,
        active_ns: 0,
    });
    assert_eq!(a.recv(), Some(Reply::NotExtended));
}

/// The memory cap applies on each GPU: a client capped at N holds N on each, and one byte more
/// on either is over the cap.
#[test]
fn the_memory_cap_applies_on_each_gpu() {
    let d = Daemon::start("[clients.a]\nmemory = 1000\nusers = [\"*\"]\n", None);
    let mut p = d.connect();
    let mut q = d.connect();
    p.hello("a");
    q.hello("a");
    assert_eq!(p.reserve(GPU0, 1000), Some(Reply::Reserved { used: 1000 }));
    assert_eq!(
        p.reserve(GPU1, 1000),
        Some(Reply::Reserved { used: 1000 }),
        "GPU 1 has its own account"
    );
    assert_eq!(
        p.reserve(GPU1, 1),
        Some(Reply::OverCap {
            used: 1000,
            cap: 1000
        })
    );
    // the client's account on a GPU is shared by its processes
    assert_eq!(
        q.reserve(GPU1, 1),
        Some(Reply::OverCap {
            used: 1000,
            cap: 1000
        })
    );
    p.send(&Request::Unreserve {
        device: GPU1,
        bytes: 300,
    });
    // an Unreserve has no reply: p's next request is answered after it is done
    assert_eq!(p.reserve(GPU1, 0), Some(Reply::Reserved { used: 700 }));
    assert_eq!(q.reserve(GPU1, 300), Some(Reply::Reserved { used: 1000 }));
    // reports: the total over the GPUs, and each GPU's figure
    let a = d.client("a");
    assert_eq!(a["memory_used"], 2000, "{a}");
    let devices = a["devices"].as_array().expect("a list of GPUs");
    let used: Vec<(String, u64)> = devices
        .iter()
        .map(|g| {
            (
                g["device"].as_str().unwrap().to_string(),
                g["memory_used"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        used,
        vec![(GPU0.to_string(), 1000), (GPU1.to_string(), 1000)],
        "{a}"
    );
    // a process that goes gives back what it held on each GPU
    drop(p);
    wait_for("p's memory to be freed", Duration::from_secs(5), || {
        q.reserve(GPU0, 0) == Some(Reply::Reserved { used: 0 })
    });
    assert_eq!(q.reserve(GPU1, 0), Some(Reply::Reserved { used: 300 }));
}

/// A process re-attaching after a restart lists what it holds on each GPU; each figure is
/// counted on its GPU, even over the cap there.
#[test]
fn a_re_attaching_process_is_counted_on_each_gpu() {
    let d = Daemon::start("[clients.a]\nmemory = 1000\nusers = [\"*\"]\n", None);
    let mut p = d.connect();
    p.send(&Request::Hello {
        version: gpushare::protocol::PROTOCOL_VERSION,
        client: "a".into(),
        reserved: vec![(GPU0, 600), (GPU1, 1500)],
    });
    assert!(matches!(p.recv(), Some(Reply::Welcome { .. })));
    assert_eq!(p.reserve(GPU0, 0), Some(Reply::Reserved { used: 600 }));
    // over the cap on GPU 1 only: even nothing more fits there
    assert_eq!(
        p.reserve(GPU1, 0),
        Some(Reply::OverCap {
            used: 1500,
            cap: 1000
        })
    );
    assert_eq!(p.reserve(GPU0, 400), Some(Reply::Reserved { used: 1000 }));
    assert_eq!(d.client("a")["memory_used"], 2500);
    let log = d.log();
    assert!(
        log.contains(&format!("over its memory cap on {GPU1}")),
        "the log names the GPU: {log}"
    );
    assert!(
        !log.contains(&format!("over its memory cap on {GPU0}")),
        "{log}"
    );
}

/// A process may name a bounded number of GPUs; past it its connection is closed and what it
/// held is freed.
#[test]
fn a_process_naming_too_many_gpus_is_closed() {
    let d = Daemon::start("[clients.a]\nusers = [\"*\"]\n", None);
    let mut p = d.connect();
    p.hello("a");
    for i in 0..gpushare::protocol::MAX_DEVICES {
        assert_eq!(
            p.reserve(gpushare::protocol::DeviceId([i as u8 + 10; 16]), 1),
            Some(Reply::Reserved { used: 1 })
        );
    }
    p.send(&Request::Acquire { device: GPU0 });
    assert_eq!(p.recv_within(Duration::from_secs(2)), None, "closed");
    let mut q = d.connect();
    q.hello("a");
    wait_for("the memory to be freed", Duration::from_secs(5), || {
        q.reserve(gpushare::protocol::DeviceId([10; 16]), 0) == Some(Reply::Reserved { used: 0 })
    });
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock of the times the daemon tells hooks.
fn monotonic_ns() -> u64 {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// A process attached as `client` and its watch connection, with its session.
fn attach_watched(d: &Daemon, client: &str) -> (Conn, Conn, u64) {
    let mut c = d.connect();
    let Reply::Welcome { session, .. } = c.hello(client) else {
        panic!("no welcome")
    };
    let mut watch = d.connect();
    watch.send(&Request::Watch { session });
    (c, watch, session)
}

/// What the daemon answers `request`, sent as the first request of a connection of another
/// process, within a second.
fn first_reply_to_another_process(d: &Daemon, request: &Request) -> Option<Reply> {
    let mut other = Relayed::connect(&d.socket);
    other.send(request);
    other.reply_within(Duration::from_secs(1))
}

/// A process's lanes are its own: another process cannot open one for its session, nor can it
/// open a second for the same GPU; each lane serves its GPU's token alone, and closing one
/// gives back that GPU's token and no other.
#[test]
fn lanes_belong_to_their_process_and_closing_one_frees_only_its_gpu() {
    let d = Daemon::start(TWO_HALVES, None);
    let mut a = d.connect();
    let Reply::Welcome { session, .. } = a.hello("a") else {
        panic!("no welcome")
    };
    let lane = |device| {
        let mut c = d.connect();
        c.send(&Request::Lane { session, device });
        c
    };
    assert!(
        matches!(
            first_reply_to_another_process(
                &d,
                &Request::Lane {
                    session,
                    device: GPU0
                }
            ),
            Some(Reply::Error {
                code: ErrorCode::NotAllowed,
                ..
            })
        ),
        "another process's lane for this session"
    );
    let (mut lane0, mut lane1) = (lane(GPU0), lane(GPU1));
    lane0.send(&Request::Acquire { device: GPU0 });
    lane1.send(&Request::Acquire { device: GPU1 });
    for (l, gpu) in [(&mut lane0, 0), (&mut lane1, 1)] {
        assert!(
            matches!(
                l.recv_within(Duration::from_secs(1)),
                Some(Reply::Grant { .. })
            ),
            "GPU {gpu} granted on its lane"
        );
    }
    assert!(
        matches!(
            lane(GPU0).recv_within(Duration::from_secs(1)),
            Some(Reply::Error {
                code: ErrorCode::NotAllowed,
                ..
            })
        ),
        "a second lane for GPU 0"
    );
    lane1.send(&Request::Acquire { device: GPU0 });
    assert_eq!(
        lane1.recv_within(Duration::from_secs(1)),
        None,
        "a request about another GPU closes the lane"
    );
    // a waits on both GPUs; closing lane 1 (above) gave GPU 1 back, lane 0 still holds GPU 0
    let mut b = d.connect();
    b.hello("b");
    b.send(&Request::Acquire { device: GPU1 });
    assert!(
        matches!(
            b.recv_within(Duration::from_secs(1)),
            Some(Reply::Grant { .. })
        ),
        "GPU 1 is free once its lane closed"
    );
    b.send(&Request::Acquire { device: GPU0 });
    assert_eq!(
        b.recv_within(Duration::from_millis(150)),
        None,
        "GPU 0 is still held on its lane"
    );
    drop(lane0);
    assert!(
        matches!(
            b.recv_within(Duration::from_secs(1)),
            Some(Reply::Grant { .. })
        ),
        "GPU 0 is free once its lane closed"
    );
    drop(a);
}
