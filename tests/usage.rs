//! Usage accounting of a real gpushared: kept in its state directory across restarts, read with
//! `gpushare usage` through the D-Bus API or the socket, every user's rows by root and the
//! admin groups, each other user's own by that user.

mod common;
use common::*;
use gpushare::protocol::{Reply, Request};
use std::path::Path;
use std::time::Duration;

/// Leases last long enough for the test to end them itself.
const CONFIG: &str =
    "[daemon]\nquantum = \"10s\"\n[clients.train]\nrequest = 0.5\nusers = [\"*\"]\n";

/// CONFIG with the test user gpstest-admin's group among the admin groups.
const ADMIN_CONFIG: &str = "[daemon]\nquantum = \"10s\"\nadmin_groups = [\"gpstest-admin\"]\n\
     [clients.train]\nrequest = 0.5\nusers = [\"*\"]\n";

const MS: u64 = 1_000_000;
const GIB: f64 = (1u64 << 30) as f64;

fn usage(d: &Daemon, args: &[&str]) -> Vec<serde_json::Value> {
    usage_as(d, None, args)
}

/// `gpushare --json usage ARGS` run as `uid` (None: root).
fn usage_as(d: &Daemon, uid: Option<u32>, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = vec!["--json", "usage"];
    all.extend_from_slice(args);
    let out = d.cli_as(uid, &all);
    assert!(out.status.success(), "gpushare {all:?}: {}", stderr(&out));
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .expect("usage --json is JSON")
        .as_array()
        .expect("a list")
        .clone()
}

/// What a user who is not an administrator reads, as `uid`, of the usage `by_user`, `by_client`
/// and `by_day` that root reads: exactly their own row by user and their own default client's
/// row by client (the only client they used), their days adding up to their own total, and a
/// table without any other user's client.
fn sees_only_their_own(
    d: &Daemon,
    uid: u32,
    user: &str,
    by_user: &[serde_json::Value],
    by_client: &[serde_json::Value],
) {
    let own = usage_as(d, Some(uid), &["--by", "user"]);
    assert_eq!(
        own,
        vec![entry(by_user, "user", user).clone()],
        "{by_user:?}"
    );
    let client = format!("user.{user}");
    assert_eq!(
        usage_as(d, Some(uid), &["--by", "client"]),
        vec![entry(by_client, "client", &client).clone()],
        "{by_client:?}"
    );
    let days = usage_as(d, Some(uid), &["--by", "day"]);
    let day_total: u64 = days.iter().map(|r| r["gpu_ns"].as_u64().unwrap()).sum();
    assert_eq!(day_total, gpu_ns(by_user, "user", user), "{days:?}");
    let out = d.cli_as(Some(uid), &["usage", "--by", "client"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.starts_with("CLIENT") && table.contains(&client) && !table.contains("train"),
        "{table}"
    );
}

/// The entry of `name` in a usage list grouped by `key`.
fn entry<'a>(rows: &'a [serde_json::Value], key: &str, name: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r[key] == name)
        .unwrap_or_else(|| panic!("no {key} {name} in {rows:?}"))
}

fn gpu_ns(rows: &[serde_json::Value], key: &str, name: &str) -> u64 {
    entry(rows, key, name)["gpu_ns"].as_u64().unwrap()
}

/// Moves every hour recorded in `state`'s database `days` into the past.
fn age_usage(state: &Path, days: i64) {
    let db = rusqlite::Connection::open(state.join("usage.db")).unwrap();
    db.execute("UPDATE usage SET hour = hour - ?1", [days * 86400])
        .unwrap();
}

#[test]
fn usage_is_kept_across_restarts_by_user_and_client() {
    require_root();
    let carol = test_user("gpstest-carol");
    let admin = test_user("gpstest-admin");
    let bus = TestBus::start();
    let state = open_tempdir();
    let mut d = Daemon::start_with_state(ADMIN_CONFIG, Some(&bus), state.path());

    // root's process as client train: a lease of at least 400 ms, and 1 GiB held
    let mut p = d.connect();
    assert!(matches!(p.hello("train"), Reply::Welcome { .. }));
    assert_eq!(
        p.reserve(GPU0, 1 << 30),
        Some(Reply::Reserved { used: 1 << 30 })
    );
    p.send(&Request::Acquire { device: GPU0 });
    assert!(matches!(p.recv(), Some(Reply::Grant { .. })));
    std::thread::sleep(Duration::from_millis(400));
    p.send(&Request::Release {
        device: GPU0,
        busy_ns: u64::MAX,
        launches: 0,
        active_ns: 0,
    });
    // a usage query samples the daemon: from here on the memory held counts
    usage(&d, &[]);
    std::thread::sleep(Duration::from_millis(1500));
    drop(p);

    // carol's process, as her default client (which goes with it): two leases of 150 ms
    expect_done(hold_leases_as(
        carol,
        &d.socket,
        "",
        2,
        Duration::from_millis(150),
    ));
    wait_for(
        "carol's default client to go",
        Duration::from_secs(10),
        || {
            !d.clients_json()
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == "user.gpstest-carol")
        },
    );

    let users = usage(&d, &["--by", "user"]);
    let clients = usage(&d, &["--by", "client"]);
    assert!(gpu_ns(&users, "user", "root") >= 400 * MS, "{users:?}");
    assert!(
        gpu_ns(&users, "user", "gpstest-carol") >= 300 * MS,
        "{users:?}"
    );
    assert!(
        gpu_ns(&clients, "client", "train") >= 400 * MS,
        "{clients:?}"
    );
    assert!(
        gpu_ns(&clients, "client", "user.gpstest-carol") >= 300 * MS,
        "{clients:?}"
    );
    let train = entry(&clients, "client", "train");
    assert_eq!(train["leases"], 1);
    let memory = train["memory_byte_seconds"].as_f64().unwrap();
    assert!(
        memory >= 1.5 * GIB,
        "1 GiB held for 1.5 s or more: {memory}"
    );
    assert_eq!(entry(&clients, "client", "user.gpstest-carol")["leases"], 2);

    // carol reads her own rows only; a member of an admin group reads every user's, as root
    sees_only_their_own(&d, carol, "gpstest-carol", &users, &clients);
    assert_eq!(usage_as(&d, Some(admin), &["--by", "user"]), users);
    assert_eq!(usage_as(&d, Some(admin), &["--by", "client"]), clients);
    let out = d.cli_as(Some(admin), &["usage", "--by", "client"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    assert!(
        table.starts_with("CLIENT") && table.contains("train") && table.contains("GPU TIME"),
        "{table}"
    );

    // stopped as systemd stops it, and started again on the same directory
    assert!(d.stop().success(), "{}", d.log());
    drop(d);
    let mut d = Daemon::start_with_state(ADMIN_CONFIG, Some(&bus), state.path());
    assert_eq!(
        usage(&d, &["--by", "user"]),
        users,
        "the same usage after a restart"
    );
    assert_eq!(usage(&d, &["--by", "client"]), clients);

    // three days later, as far as the database knows
    assert!(d.stop().success());
    drop(d);
    age_usage(state.path(), 3);
    let d = Daemon::start_with_state(CONFIG, Some(&bus), state.path());
    assert!(
        usage(&d, &["--since", "1d"]).is_empty(),
        "nothing in the last day"
    );
    assert!(usage(&d, &["--since", "2days"]).is_empty());
    let week = usage(&d, &["--since", "7d"]);
    assert_eq!(
        gpu_ns(&week, "user", "root"),
        gpu_ns(&users, "user", "root")
    );
    assert_eq!(week.len(), 2, "{week:?}");
    assert_eq!(usage(&d, &[]).len(), 2, "no --since: everything");
    let days = usage(&d, &["--by", "day"]);
    assert!(
        !days.is_empty() && days.len() <= 2,
        "the hours recorded fall in one or two days: {days:?}"
    );
    let day = days[0]["day"].as_str().unwrap();
    assert!(day.len() == 10 && day.as_bytes()[4] == b'-', "{day}");

    // a bad --since is refused with its reason
    let out = d.cli(&["usage", "--since", "soon"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--since"), "{}", stderr(&out));
    let out = d.cli(&["usage", "--by", "week"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_state_directory_that_cannot_be_used_leaves_the_daemon_running() {
    require_root();
    let bus = TestBus::start();
    let dir = open_tempdir();
    let file = dir.path().join("not-a-directory");
    std::fs::write(&file, "").unwrap();
    let d = Daemon::start_with_state(CONFIG, Some(&bus), &file);
    assert!(d.log().contains("usage accounting is off"), "{}", d.log());
    // it schedules as before; usage says why there is none
    let mut p = d.connect();
    p.hello("train");
    p.send(&Request::Acquire { device: GPU0 });
    assert!(matches!(
        p.recv_within(Duration::from_secs(5)),
        Some(Reply::Grant { .. })
    ));
    let out = d.cli(&["usage"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("usage accounting is off"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_damaged_database_is_moved_aside_and_a_new_one_started() {
    require_root();
    let bus = TestBus::start();
    let state = open_tempdir();
    std::fs::write(state.path().join("usage.db"), vec![0x5a; 16384]).unwrap();
    let d = Daemon::start_with_state(CONFIG, Some(&bus), state.path());
    assert!(usage(&d, &[]).is_empty());
    let moved = std::fs::read_dir(state.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("usage.db.corrupt-")
        });
    assert!(moved, "{}", d.log());
    assert!(d.log().contains("damaged"), "{}", d.log());
}

/// With `fairshare_half_life`, the usage kept in the state directory weighs the clients: a client
/// whose GPU time is in the database gets the factor the formula gives it, one without keeps 1,
/// and a reload that turns fair share off gives every client 1 again.
#[test]
fn decayed_usage_weighs_clients_while_fair_share_is_on() {
    require_root();
    let state = open_tempdir();
    let config = |fair: &str| {
        format!(
            "[daemon]\n{fair}\n[clients.a]\nrequest = 0.5\nusers = [\"*\"]\n\
             [clients.b]\nrequest = 0.5\nusers = [\"*\"]\n"
        )
    };
    // a first start makes the database; then a's hour of GPU time of an hour ago goes in
    let mut d = Daemon::start_with_state(&config(""), None, state.path());
    assert_eq!(d.client("a")["fair_share"], 1.0, "off: every factor is 1");
    d.stop();
    let hour = gpushare::daemon::accounting::unix_now() / 3600 * 3600 - 3600;
    let db = rusqlite::Connection::open(state.path().join("usage.db")).unwrap();
    db.execute(
        "INSERT INTO usage (hour, user, client, gpu_ns, leases) VALUES (?1, 'root', 'a', ?2, 1)",
        rusqlite::params![hour, 3600i64 * 1_000_000_000],
    )
    .unwrap();
    drop(db);

    let d = Daemon::start_with_state(&config("fairshare_half_life = \"7d\""), None, state.path());
    // all the usage for half of the weights: 2^(-1/0.5), read at start
    wait_for("a's factor", Duration::from_secs(10), || {
        d.client("a")["fair_share"] == 0.25
    });
    assert_eq!(d.client("b")["fair_share"], 1.0);

    std::fs::write(&d.config, config("")).unwrap();
    d.signal(nix::sys::signal::Signal::SIGHUP);
    wait_for(
        "fair share off after the reload",
        Duration::from_secs(10),
        || d.client("a")["fair_share"] == 1.0,
    );
}

/// The README's first command, as a user who may not write /var/lib/gpushare: with the shipped
/// config and no `--state-dir`, the daemon logs no error or warning and no setting that does not
/// apply, and keeps usage in the user's ~/.local/state/gpushare.
#[test]
fn a_user_runs_the_daemon_with_the_shipped_config_and_usage_is_kept_in_their_home() {
    require_root();
    let erin = test_user("gpstest-erin");
    let give = |p: &Path| std::os::unix::fs::chown(p, Some(erin), Some(erin)).unwrap();
    let home = open_tempdir();
    give(home.path());
    // the fake NVML where the driver's library is looked for: nvml_library = "" in the file
    let driver = open_tempdir();
    let lib = driver.path().join("libnvidia-ml.so.1");
    std::fs::copy(fake_nvml(), &lib).unwrap();
    let nvml_state = driver.path().join("fake_nvml.state");
    std::fs::write(&nvml_state, "count 1\nmode 0 0\n").unwrap();
    for p in [driver.path(), &lib, &nvml_state] {
        give(p);
    }
    let mut d = Daemon::builder()
        .config(include_str!("../dist/gpushare.toml"))
        .user(erin)
        .daemon_chooses_state_dir()
        .env("HOME", home.path().to_str().unwrap())
        .env_remove("XDG_STATE_HOME")
        .env_remove("STATE_DIRECTORY")
        .env("LD_LIBRARY_PATH", driver.path().to_str().unwrap())
        .log_level("info")
        .start();
    let state = home.path().join(".local/state/gpushare");

    expect_done(hold_leases_as(
        erin,
        &d.socket,
        "",
        2,
        Duration::from_millis(150),
    ));
    assert!(d.stop().success(), "{}", d.log());
    let log = d.log();
    let complaints: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" ERROR ") || l.contains(" WARN "))
        .collect();
    assert!(complaints.is_empty(), "{log}");
    assert!(!log.contains("set_compute_mode"), "{log}");
    assert!(
        log.contains(&format!(
            "keeping usage and registered clients in {}",
            state.display()
        )),
        "{log}"
    );
    let calls = std::fs::read_to_string(driver.path().join("fake_nvml.state.calls")).unwrap();
    assert!(calls.contains("init"), "the fake NVML was loaded: {calls}");
    let db = rusqlite::Connection::open(state.join("usage.db")).unwrap();
    let (gpu_ns, leases): (i64, i64) = db
        .query_row(
            "SELECT SUM(gpu_ns), SUM(leases) FROM usage WHERE user = 'gpstest-erin'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(gpu_ns > 0, "{gpu_ns}");
    assert_eq!(leases, 2);
    let owner = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&state).unwrap());
    assert_eq!(owner, erin, "the user's own directory");
}

/// Without a bus, `gpushare usage` reads the daemon's socket, as `status` does, and gets what
/// GetUsage gives: the rows of every user to root and the admin groups, and to any other user
/// their own (by the peer's uid). A refusal is the daemon's answer (exit status 2), a bus where
/// no daemon is falls back to the socket, and a connection that asks for usage never attaches.
#[test]
fn usage_is_read_over_the_socket_by_each_user_for_their_own_rows() {
    require_root();
    let frank = test_user("gpstest-frank");
    let admin = test_user("gpstest-admin");
    let state = open_tempdir();
    let d = Daemon::start_with_state(ADMIN_CONFIG, None, state.path());

    // root's process as client train: a lease of at least 300 ms
    let mut p = d.connect();
    assert!(matches!(p.hello("train"), Reply::Welcome { .. }));
    p.send(&Request::Acquire { device: GPU0 });
    assert!(matches!(p.recv(), Some(Reply::Grant { .. })));
    std::thread::sleep(Duration::from_millis(300));
    drop(p);
    // frank's process as his default client: two leases of 150 ms
    expect_done(hold_leases_as(
        frank,
        &d.socket,
        "",
        2,
        Duration::from_millis(150),
    ));
    wait_for("root's process to go", Duration::from_secs(10), || {
        d.client("train")["pids"].as_array().unwrap().is_empty()
    });

    let by_user = usage(&d, &["--by", "user"]);
    assert!(gpu_ns(&by_user, "user", "root") >= 300 * MS, "{by_user:?}");
    assert!(gpu_ns(&by_user, "user", "gpstest-frank") > 0, "{by_user:?}");
    assert_eq!(entry(&by_user, "user", "gpstest-frank")["leases"], 2);
    let by_client = usage(&d, &["--by", "client", "--since", "1d"]);
    assert!(gpu_ns(&by_client, "client", "train") >= 300 * MS);
    assert!(gpu_ns(&by_client, "client", "user.gpstest-frank") > 0);
    // frank reads his own rows only, as over D-Bus; the admin group every user's, as root
    sees_only_their_own(&d, frank, "gpstest-frank", &by_user, &by_client);
    assert_eq!(usage_as(&d, Some(admin), &["--by", "user"]), by_user);
    assert_eq!(
        usage_as(&d, Some(admin), &["--by", "client", "--since", "1d"]),
        by_client
    );

    // a bus on which no daemon serves: the socket answers
    let bus = TestBus::start();
    let out = std::process::Command::new(GPUSHARE)
        .args(["--json", "usage"])
        .env("GPUSHARE_BUS", &bus.address)
        .env("GPUSHARE_SOCKET", &d.socket)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));

    // the request itself: rows as JSON in status frames, a grouping it does not know refused
    let mut c = d.connect();
    c.send(&Request::Usage {
        since_seconds: 0,
        by: "client".into(),
    });
    let mut reader = gpushare::protocol::StatusReader::default();
    let doc = loop {
        if let Some(doc) = reader.push(c.recv().expect("a reply")).unwrap() {
            break doc;
        }
    };
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&doc).unwrap();
    assert_eq!(rows, usage(&d, &["--by", "client"]));
    assert!(c.recv().is_none(), "the daemon closes the connection");
    let mut c = d.connect();
    c.send(&Request::Usage {
        since_seconds: 0,
        by: "week".into(),
    });
    match c.recv() {
        Some(Reply::Error { code, message }) => {
            assert_eq!(code, gpushare::protocol::ErrorCode::Refused);
            assert!(message.contains("user, client or day"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        d.clients_json().as_array().unwrap().len(),
        1,
        "only train: no usage reader attached"
    );

    // a daemon without accounting says why, over the socket too
    let off = Daemon::start_with_state(CONFIG, None, Path::new(""));
    let out = off.cli_as(Some(frank), &["usage"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("usage accounting is off"),
        "{}",
        stderr(&out)
    );
}
