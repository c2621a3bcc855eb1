//! Usage accounting: GPU time, memory-time, leases and waits per hour, user and client, kept in
//! `usage.db` (SQLite) in the state directory across restarts.
//!
//! The state is sampled every second into a [`Tally`]; its increments are written every
//! [`FLUSH_EVERY`], before a usage query and at stop. Disk I/O runs on blocking threads and never
//! holds the state's lock. A database that cannot be opened leaves the daemon running without
//! accounting; a corrupt one is moved aside and started anew.

use super::identity::Identity;
use super::state::State;
use super::usage::{Pending, Tally, Totals};
use crate::api;
use crate::scheduler::fair_share::decayed;
use rusqlite::{params, Connection, ErrorCode};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The database's file name in the state directory.
pub const DB_NAME: &str = "usage.db";
/// How often the state is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// How often increments are written to disk.
pub const FLUSH_EVERY: Duration = Duration::from_secs(30);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS usage (
    hour INTEGER NOT NULL,
    user TEXT NOT NULL,
    client TEXT NOT NULL,
    gpu_ns INTEGER NOT NULL DEFAULT 0,
    leases INTEGER NOT NULL DEFAULT 0,
    wait_ns INTEGER NOT NULL DEFAULT 0,
    memory_byte_seconds REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (hour, user, client)
) WITHOUT ROWID;
PRAGMA user_version = 1;
";

/// How usage is grouped in a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    User,
    Client,
    /// Calendar days in the server's local time.
    Day,
}

impl By {
    pub fn as_str(self) -> &'static str {
        match self {
            By::User => "user",
            By::Client => "client",
            By::Day => "day",
        }
    }

    fn column(self) -> &'static str {
        match self {
            By::User => "user",
            By::Client => "client",
            By::Day => "date(hour, 'unixepoch', 'localtime')",
        }
    }
}

impl FromStr for By {
    type Err = String;
    fn from_str(s: &str) -> Result<By, String> {
        match s {
            "user" | "" => Ok(By::User),
            "client" => Ok(By::Client),
            "day" => Ok(By::Day),
            other => Err(format!(
                "cannot group usage by {other:?}: use user, client or day"
            )),
        }
    }
}

/// Usage of one user, client or day.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub key: String,
    pub totals: Totals,
    /// Start of the first and of the last hour counted (Unix seconds).
    pub first_hour: i64,
    pub last_hour: i64,
}

/// The SQLite file.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

fn is_corrupt(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
    )
}

impl Store {
    /// Opens (or creates) `usage.db` in `dir`, creating the directory. A corrupt file is renamed
    /// to `usage.db.corrupt-SECONDS` and a new one started.
    pub fn open(dir: &Path) -> Result<Store, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create the state directory {}: {e}", dir.display()))?;
        let path = dir.join(DB_NAME);
        match Self::open_file(&path) {
            Ok(conn) => Ok(Store { conn, path }),
            Err(e) if is_corrupt(&e) => {
                let aside = path.with_extension(format!("db.corrupt-{}", unix_now()));
                std::fs::rename(&path, &aside).map_err(|r| {
                    format!(
                        "{} is damaged ({e}) and cannot be moved aside: {r}",
                        path.display()
                    )
                })?;
                for suffix in ["-journal", "-wal", "-shm"] {
                    let mut side = path.clone().into_os_string();
                    side.push(suffix);
                    let _ = std::fs::remove_file(side);
                }
                tracing::warn!(
                    "{} was damaged ({e}); moved it to {} and started a new one",
                    path.display(),
                    aside.display()
                );
                let conn =
                    Self::open_file(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(Store { conn, path })
            }
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    fn open_file(path: &Path) -> rusqlite::Result<Connection> {
        let conn = Connection::open(path)?;
        conn.busy_timeout(Duration::from_secs(5))?;
        let check: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0))?;
        if check != "ok" {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CORRUPT),
                Some(format!("quick_check: {check}")),
            ));
        }
        conn.execute_batch(SCHEMA)?;
        Ok(conn)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds the increments in one transaction.
    pub fn add(&mut self, pending: &Pending) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut insert = tx.prepare_cached(
                "INSERT INTO usage (hour, user, client, gpu_ns, leases, wait_ns, memory_byte_seconds)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (hour, user, client) DO UPDATE SET
                    gpu_ns = gpu_ns + excluded.gpu_ns,
                    leases = leases + excluded.leases,
                    wait_ns = wait_ns + excluded.wait_ns,
                    memory_byte_seconds = memory_byte_seconds + excluded.memory_byte_seconds",
            )?;
            for ((hour, user, client), t) in pending {
                insert.execute(params![
                    hour,
                    user,
                    client,
                    clamp_i64(t.gpu_ns),
                    clamp_i64(t.leases),
                    clamp_i64(t.wait_ns),
                    t.memory_byte_seconds,
                ])?;
            }
        }
        tx.commit()
    }

    /// Usage since `since` (Unix seconds; the hour it falls in counts whole), grouped `by`: of
    /// every user, or only of the user named `only` (their clients and days, with their own
    /// figures in them).
    pub fn query(
        &self,
        since: Option<i64>,
        by: By,
        only: Option<&str>,
    ) -> rusqlite::Result<Vec<Row>> {
        let sql = format!(
            "SELECT {key}, SUM(gpu_ns), SUM(leases), SUM(wait_ns), SUM(memory_byte_seconds),
                    MIN(hour), MAX(hour)
             FROM usage WHERE hour > ?1 AND (?2 IS NULL OR user = ?2) GROUP BY 1 ORDER BY 1",
            key = by.column()
        );
        let after = since.map_or(i64::MIN, |s| s - 3600);
        let mut stmt = self.conn.prepare(&sql)?;
        let rows = stmt.query_map(params![after, only], |r| {
            Ok(Row {
                key: r.get(0)?,
                totals: Totals {
                    gpu_ns: r.get::<_, i64>(1)?.max(0) as u64,
                    leases: r.get::<_, i64>(2)?.max(0) as u64,
                    wait_ns: r.get::<_, i64>(3)?.max(0) as u64,
                    memory_byte_seconds: r.get(4)?,
                },
                first_hour: r.get(5)?,
                last_hour: r.get(6)?,
            })
        })?;
        rows.collect()
    }

    /// Each client's GPU time in nanoseconds, decayed to `now` (Unix seconds) with usage halving
    /// every `half_life` ([`crate::scheduler::fair_share`]). An hour's GPU time counts at the
    /// middle of the part of it that has passed; hours older than 20 half-lives (a millionth) are
    /// left out.
    pub fn decayed_usage(
        &self,
        now: i64,
        half_life: Duration,
    ) -> rusqlite::Result<BTreeMap<String, f64>> {
        let half_life_s = half_life.as_secs_f64();
        let horizon = (half_life_s * 20.0).min(i64::MAX as f64 / 2.0) as i64;
        let mut stmt = self.conn.prepare_cached(
            "SELECT client, hour, SUM(gpu_ns) FROM usage WHERE hour > ?1 GROUP BY client, hour",
        )?;
        let mut usage = BTreeMap::new();
        let rows = stmt.query_map([now.saturating_sub(horizon) - 3600], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, i64>(2)?,
            ))
        })?;
        for row in rows {
            let (client, hour, gpu_ns) = row?;
            let end = (hour + 3600).min(now).max(hour);
            let age = now as f64 - (hour as f64 + end as f64) / 2.0;
            *usage.entry(client).or_insert(0.0) += decayed(gpu_ns.max(0) as f64, age, half_life_s);
        }
        Ok(usage)
    }
}

fn clamp_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Samples the state, keeps the running totals and writes the increments.
pub struct Accounting {
    state: Arc<Mutex<State>>,
    tally: Mutex<Tally>,
    /// The store, or why there is none.
    store: Result<Mutex<Store>, String>,
    /// The last write error, logged once until a write succeeds again.
    write_error: Mutex<Option<String>>,
    write_failures: AtomicU64,
    /// Whether the log said that fair share cannot run without accounting.
    fair_share_warned: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Accounting {
    /// Accounting into `dir` (an error says why there is none: then only the running totals
    /// are kept, for the metrics). Opens the database on a blocking thread; failing that, logs
    /// why and keeps only the running totals.
    pub async fn start(state: Arc<Mutex<State>>, dir: Result<PathBuf, String>) -> Accounting {
        let store = match dir {
            Err(none) => {
                let why = format!("usage accounting is off: {none}");
                tracing::info!("{why}");
                Err(why)
            }
            Ok(dir) => {
                let opened = tokio::task::spawn_blocking(move || Store::open(&dir))
                    .await
                    .unwrap_or_else(|e| Err(e.to_string()));
                match opened {
                    Ok(s) => {
                        tracing::info!(path = %s.path().display(), "usage accounting on");
                        Ok(Mutex::new(s))
                    }
                    Err(e) => {
                        let why = format!("usage accounting is off: {e}");
                        tracing::error!("{why}");
                        Err(why)
                    }
                }
            }
        };
        Accounting {
            state,
            tally: Mutex::new(Tally::default()),
            store,
            write_error: Mutex::new(None),
            write_failures: AtomicU64::new(0),
            fair_share_warned: AtomicBool::new(false),
        }
    }

    /// Takes the state's figures into the tally. Quick: the state's lock is held only to copy them.
    pub fn sample(&self) {
        let mut tally = lock(&self.tally);
        let snap = lock(&self.state).usage_snapshot();
        tally.observe(snap, unix_now());
    }

    /// Reads the tally (after a fresh sample).
    pub fn read<R>(&self, f: impl FnOnce(&Tally) -> R) -> R {
        self.sample();
        f(&lock(&self.tally))
    }

    /// Writes failed since the daemon started.
    pub fn write_failures(&self) -> u64 {
        self.write_failures.load(Ordering::Relaxed)
    }

    /// Writes the increments (blocking: disk I/O). Increments that could not be written are
    /// kept for the next try.
    pub fn flush(&self) -> Result<(), String> {
        let Ok(store) = &self.store else {
            // nothing keeps them: drop them so they do not pile up
            lock(&self.tally).take_pending();
            return Ok(());
        };
        let pending = lock(&self.tally).take_pending();
        if pending.is_empty() {
            return Ok(());
        }
        let mut store = lock(store);
        match store.add(&pending) {
            Ok(()) => {
                if lock(&self.write_error).take().is_some() {
                    tracing::info!(path = %store.path().display(), "usage is written again");
                }
                Ok(())
            }
            Err(e) => {
                drop(store);
                lock(&self.tally).restore(pending);
                self.write_failures.fetch_add(1, Ordering::Relaxed);
                let message = format!("cannot write usage: {e}");
                let mut last = lock(&self.write_error);
                if last.as_deref() != Some(message.as_str()) {
                    tracing::error!("{message}; keeping it in memory and trying again");
                    *last = Some(message.clone());
                }
                Err(message)
            }
        }
    }

    /// Usage over the last `since` (all of it with `None`), grouped `by`, of every user or only
    /// of the user named `only`, the latest included unless it cannot be written now (blocking).
    pub fn usage(
        &self,
        since: Option<Duration>,
        by: By,
        only: Option<&str>,
    ) -> Result<Vec<Row>, String> {
        let store = self.store.as_ref().map_err(Clone::clone)?;
        self.sample();
        // a failed write is logged and counted; what is on disk is still worth reading
        let _ = self.flush();
        let since =
            since.map(|d| unix_now().saturating_sub(d.as_secs().min(i64::MAX as u64) as i64));
        let store = lock(store);
        store
            .query(since, by, only)
            .map_err(|e| format!("cannot read {}: {e}", store.path().display()))
    }
}

/// Why a usage query got no rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryError {
    /// The query asked for something there is not (a grouping other than user, client or day).
    InvalidArgument(String),
    /// There is no accounting, or the database could not be read.
    Failed(String),
}

/// A row as GetUsage and the socket's usage request report it, the group's name under the key
/// `by` names.
fn usage_record(by: By, r: Row) -> api::UsageRow {
    let mut row = api::UsageRow {
        gpu_ns: r.totals.gpu_ns,
        memory_byte_seconds: r.totals.memory_byte_seconds,
        wait_ns: r.totals.wait_ns,
        leases: r.totals.leases,
        first_hour: r.first_hour,
        last_hour: r.last_hour,
        ..api::UsageRow::default()
    };
    let group = match by {
        By::User => &mut row.user,
        By::Client => &mut row.client,
        By::Day => &mut row.day,
    };
    *group = Some(r.key);
    row
}

/// The usage query that D-Bus (GetUsage) and the socket ([`crate::protocol::Request::Usage`])
/// both answer with: the rows over the last `since_seconds` (0: all of it), grouped `by` "user",
/// "client" or "day", as the caller `uid` may see them. The caller is who the bus daemon
/// (GetConnectionUnixUser) or the kernel (SO_PEERCRED) says it is, and its groups are the user
/// database's, on both alike. An administrator ([`Identity::is_admin`]: root or a member of
/// `daemon.admin_groups`, as for changes) gets every user's rows; anyone else only their own:
/// their row by user, the clients and days they used, with their own figures. The user
/// database and the disk are read on a blocking thread.
pub async fn query(
    accounting: Arc<Accounting>,
    uid: u32,
    since_seconds: u64,
    by: &str,
) -> Result<Vec<api::UsageRow>, QueryError> {
    let by: By = by.parse().map_err(QueryError::InvalidArgument)?;
    let since = (since_seconds > 0).then(|| Duration::from_secs(since_seconds));
    let admin_groups = lock(&accounting.state).config.daemon.admin_groups.clone();
    let rows = tokio::task::spawn_blocking(move || {
        let who = Identity::lookup(uid, None);
        let only = (!who.is_admin(&admin_groups)).then_some(who.user);
        accounting.usage(since, by, only.as_deref())
    })
    .await
    .map_err(|e| QueryError::Failed(e.to_string()))?
    .map_err(QueryError::Failed)?;
    Ok(rows.into_iter().map(|r| usage_record(by, r)).collect())
}

impl Accounting {
    /// Weighs the clients by their decayed usage while `daemon.fairshare_half_life` is set
    /// (blocking: disk I/O), as written so far (call it after [`Accounting::flush`]); clears the
    /// weighing otherwise, or when there is no accounting to read it from.
    pub fn update_fair_share(&self) {
        let half_life = lock(&self.state).config.daemon.fairshare_half_life;
        let usage = match (half_life, &self.store) {
            (None, _) => None,
            (Some(_), Err(why)) => {
                if !self.fair_share_warned.swap(true, Ordering::Relaxed) {
                    tracing::warn!("fair share is off: it reads usage accounting, and {why}");
                }
                None
            }
            (Some(half_life), Ok(store)) => {
                let store = lock(store);
                match store.decayed_usage(unix_now(), half_life) {
                    Ok(u) => Some(u),
                    Err(e) => {
                        // keep the last weighing: a failed read says nothing about usage
                        tracing::error!(
                            "cannot read {} for fair share: {e}",
                            store.path().display()
                        );
                        return;
                    }
                }
            }
        };
        lock(&self.state).set_fair_usage(usage);
    }
}

/// Samples every [`SAMPLE_EVERY`] and writes every [`FLUSH_EVERY`], until the daemon stops.
pub async fn run(accounting: Arc<Accounting>) {
    let mut sample = tokio::time::interval(SAMPLE_EVERY);
    sample.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_flush = tokio::time::Instant::now();
    let a = accounting.clone();
    let _ = tokio::task::spawn_blocking(move || a.update_fair_share()).await;
    loop {
        sample.tick().await;
        accounting.sample();
        if last_flush.elapsed() >= FLUSH_EVERY {
            last_flush = tokio::time::Instant::now();
            let a = accounting.clone();
            let _ = tokio::task::spawn_blocking(move || {
                let _ = a.flush();
                a.update_fair_share();
            })
            .await;
        }
    }
}

/// The last sample and write, at stop.
pub async fn finish(accounting: Arc<Accounting>) {
    accounting.sample();
    let write = tokio::task::spawn_blocking(move || accounting.flush());
    match tokio::time::timeout(Duration::from_secs(10), write).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(_))) => {} // logged
        Ok(Err(e)) => tracing::error!("writing usage at stop failed: {e}"),
        Err(_) => tracing::error!("writing usage at stop took over 10 s; some usage is lost"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(hour: i64, user: &str, client: &str, gpu_s: u64) -> Pending {
        let mut p = Pending::new();
        p.insert(
            (hour, user.into(), client.into()),
            Totals {
                gpu_ns: gpu_s * 1_000_000_000,
                leases: 1,
                wait_ns: 5,
                memory_byte_seconds: 1.5,
            },
        );
        p
    }

    #[test]
    fn increments_add_up_and_group() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("state")).unwrap();
        let now = 1_800_000_000 / 3600 * 3600;
        s.add(&pending(now, "alice", "train", 2)).unwrap();
        s.add(&pending(now, "alice", "train", 3)).unwrap();
        s.add(&pending(now, "bob", "train", 1)).unwrap();
        s.add(&pending(now - 10 * 86400, "alice", "user.alice", 7))
            .unwrap();
        drop(s);
        // reopened: all still there
        let s = Store::open(&dir.path().join("state")).unwrap();
        let users = s.query(None, By::User, None).unwrap();
        assert_eq!(users.len(), 2);
        assert_eq!(users[0].key, "alice");
        assert_eq!(users[0].totals.gpu_ns, 12_000_000_000);
        assert_eq!(users[0].totals.leases, 3);
        assert_eq!(users[0].totals.memory_byte_seconds, 4.5);
        assert_eq!(users[0].first_hour, now - 10 * 86400);
        let recent = s.query(Some(now + 1800), By::Client, None).unwrap();
        assert_eq!(
            recent.len(),
            1,
            "the hour the cutoff falls in counts: {recent:?}"
        );
        assert_eq!(
            (recent[0].key.as_str(), recent[0].totals.gpu_ns),
            ("train", 6_000_000_000)
        );
        let days = s.query(None, By::Day, None).unwrap();
        assert_eq!(days.len(), 2);
        assert!(days.iter().all(|d| d.key.len() == 10), "{days:?}");

        // one user's own rows: their row by user, their clients with their own figures
        let bobs = s.query(None, By::User, Some("bob")).unwrap();
        assert_eq!(bobs.len(), 1);
        assert_eq!(
            (bobs[0].key.as_str(), bobs[0].totals.gpu_ns),
            ("bob", 1_000_000_000)
        );
        let clients = s.query(None, By::Client, Some("bob")).unwrap();
        assert_eq!(clients.len(), 1, "not alice's user.alice: {clients:?}");
        assert_eq!(
            (clients[0].key.as_str(), clients[0].totals.gpu_ns),
            ("train", 1_000_000_000),
            "only bob's part of train"
        );
        assert_eq!(s.query(None, By::Day, Some("bob")).unwrap().len(), 1);
        assert!(s.query(None, By::User, Some("carol")).unwrap().is_empty());
    }

    #[test]
    fn decayed_usage_halves_every_half_life() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        let week = 7 * 86_400;
        let hour = 1_800_000_000 / 3600 * 3600;
        let now = hour + 1800; // half of this hour has passed
        s.add(&pending(hour, "alice", "train", 100)).unwrap();
        s.add(&pending(hour, "bob", "train", 20)).unwrap();
        s.add(&pending(hour - week, "bob", "user.bob", 100))
            .unwrap();
        s.add(&pending(hour - 40 * week, "carol", "old", 100))
            .unwrap();
        let u = s
            .decayed_usage(now, Duration::from_secs(week as u64))
            .unwrap();
        let s_of = |c: &str| u[c] / 1e9;
        // this hour counts at the middle of its past half: 15 minutes ago
        let fresh = 120.0 * (-900.0 / week as f64).exp2();
        assert!((s_of("train") - fresh).abs() < 1e-6, "{u:?}");
        // a whole hour a week before this one counts at its middle, a week ago: half
        assert!((s_of("user.bob") - 50.0).abs() < 1e-6, "{u:?}");
        assert!(!u.contains_key("old"), "beyond 20 half-lives: left out");
    }

    #[test]
    fn a_damaged_file_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(DB_NAME), vec![b'x'; 8192]).unwrap();
        let mut s = Store::open(dir.path()).unwrap();
        s.add(&pending(0, "a", "b", 1)).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().any(|n| n.starts_with("usage.db.corrupt-")),
            "{names:?}"
        );
    }

    #[test]
    fn an_unusable_directory_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = Store::open(&file.join("state")).err().unwrap();
        assert!(e.contains("cannot create the state directory"), "{e}");
        assert!(By::from_str("week")
            .unwrap_err()
            .contains("user, client or day"));
    }
}
