//! `gpushare slurm prolog|task-prolog|epilog`: Slurm's node scripts (gpushare-slurm(7)). The
//! prolog registers a runtime client for a job that asked for GPU shards, allowed for the job's
//! user alone; the task prolog puts each of the job's tasks under it; the epilog logs its usage
//! and removes it. What they say goes to syslog (the journal), tagged `gpushare-slurm`.

use super::slurm_request::{self as request, LimitRule, MemoryRule};
use super::{source::Source, Failure, ManagerProxy};
use crate::api;
use crate::bus::BusChoice;
use clap::Subcommand;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// How long the epilog waits for the job's processes to detach before it gives up.
const DETACH_WAIT: Duration = Duration::from_secs(20);

#[derive(Debug, Subcommand)]
pub enum SlurmScript {
    /// Slurm's Prolog, run as root on the node before a job's first step: for a job that asked
    /// for GPU shards (--gres=shard:N), registers the runtime client slurm-JOBID, which only the
    /// job's user may attach as, with request = the job's shards / the node's shards.
    Prolog {
        /// The client's limit: a share of each GPU's time (0..1, at least the request), or
        /// "request" to hold the job to its shards.
        #[arg(long, default_value = "1", value_name = "SHARE")]
        limit: LimitRule,
        /// The client's memory cap on each GPU: "share" (the request's part of the smallest
        /// GPU's memory; none when the daemon lists no GPU), a size such as 16GiB, or
        /// "unlimited".
        #[arg(long, default_value = "share", value_name = "SIZE")]
        memory: MemoryRule,
    },
    /// Slurm's TaskProlog, run as the job's user before each task: prints the lines that put the
    /// task under the job's client (LD_PRELOAD with the hook, GPUSHARE_CLIENT, PYTHONPATH with
    /// the Python start-up code); nothing for a job without one.
    TaskProlog {
        /// The hook library to preload.
        #[arg(long, env = "GPUSHARE_HOOK", default_value = super::run::DEFAULT_HOOK)]
        hook: PathBuf,
        /// Python start-up code put first on PYTHONPATH; skipped when the directory does not
        /// exist.
        #[arg(long, env = "GPUSHARE_PYTHON", default_value = super::run::DEFAULT_PYTHON)]
        python: PathBuf,
    },
    /// Slurm's Epilog, run as root on the node when a job ends (also when it is cancelled):
    /// waits for the job's processes to detach, logs the client's GPU time, and removes it.
    Epilog,
}

fn fail(message: String) -> Failure {
    Failure { message, code: 1 }
}

fn env(name: &str) -> Result<String, Failure> {
    std::env::var(name).map_err(|_| {
        fail(format!(
            "{name} is not set; run this as Slurm's prolog or epilog"
        ))
    })
}

fn job_id() -> Result<String, Failure> {
    let id = env("SLURM_JOB_ID")?;
    request::check_job_id(&id).map_err(fail)?;
    Ok(id)
}

/// Writes `message` to syslog, tagged gpushare-slurm, and to stderr.
fn log(message: &str) {
    eprintln!("gpushare-slurm: {message}");
    let _ = Command::new("logger")
        .args(["-t", "gpushare-slurm", "--", message])
        .status();
}

/// What `scontrol ARGS` prints.
fn scontrol(args: &[&str]) -> Result<String, Failure> {
    let out = Command::new("scontrol")
        .args(args)
        .output()
        .map_err(|e| fail(format!("cannot run scontrol: {e}")))?;
    if !out.status.success() {
        return Err(fail(format!(
            "scontrol {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

async fn manager(bus: &BusChoice) -> Result<ManagerProxy<'static>, Failure> {
    super::proxy(bus).await
}

async fn existing(m: &ManagerProxy<'static>, name: &str) -> Result<Option<api::Client>, Failure> {
    match m.get_client(name).await {
        Ok(c) => Ok(Some(c)),
        Err(zbus::Error::MethodError(e, _, _)) if e.as_str().ends_with(".UnknownClient") => {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn run(script: SlurmScript, bus: &BusChoice, socket: &Path) -> Result<(), Failure> {
    let (what, result) = match script {
        SlurmScript::Prolog { limit, memory } => ("prolog", prolog(bus, limit, memory).await),
        SlurmScript::TaskProlog { hook, python } => {
            return task_prolog(bus, socket, &hook, &python).await
        }
        SlurmScript::Epilog => ("epilog", epilog(bus).await),
    };
    // slurmd keeps no output of a prolog or epilog: why one failed goes to the journal
    if let Err(e) = &result {
        log(&format!(
            "{what} of job {} failed: {}",
            std::env::var("SLURM_JOB_ID").unwrap_or_default(),
            e.message
        ));
    }
    result
}

async fn prolog(bus: &BusChoice, limit: LimitRule, memory: MemoryRule) -> Result<(), Failure> {
    let id = job_id()?;
    let user = env("SLURM_JOB_USER").or_else(|_| env("SLURM_JOB_UID"))?;
    let Some(shards) = request::job_shards(&scontrol(&["show", "job", "-o", "-d", &id])?) else {
        return Ok(()); // no shards asked for: not gpushare's job
    };
    let node = match env("SLURMD_NODENAME") {
        Ok(n) => n,
        Err(_) => nix::unistd::gethostname()
            .map_err(|e| fail(format!("cannot read the host name: {e}")))?
            .to_string_lossy()
            .into_owned(),
    };
    let node_shards =
        request::node_shards(&scontrol(&["show", "node", "-o", &node])?).ok_or_else(|| {
            fail(format!(
                "node {node} has no shards (Gres=shard:N in slurm.conf)"
            ))
        })?;
    let m = manager(bus).await?;
    let gpu_memory = m
        .list_devices()
        .await?
        .iter()
        .map(|d| d.memory_total)
        .filter(|&t| t > 0)
        .min();
    let client = request::job_client(shards, node_shards, limit, memory, gpu_memory)
        .map_err(|e| fail(format!("job {id}: {e}")))?;
    let name = request::client_name(&id);
    if let Some(c) = existing(&m, &name).await? {
        // the prolog of a requeued job, or run twice: the client is the job's already
        if c.users == [user.clone()] {
            return Ok(());
        }
        return Err(fail(format!(
            "client {name} exists already, for {:?}; remove it (gpushare unregister {name})",
            c.users
        )));
    }
    m.register_runtime_client(
        &name,
        client.request,
        client.limit,
        client.memory,
        std::slice::from_ref(&user),
        &[],
    )
    .await?;
    log(&format!(
        "job {id} of {user}: client {name} registered with request {} ({shards} of {node_shards} \
         shards), limit {}, memory {}",
        client.request,
        client.limit,
        match client.memory {
            0 => "unlimited".to_string(),
            b => format!("{b} bytes"),
        }
    ));
    Ok(())
}

async fn task_prolog(
    bus: &BusChoice,
    socket: &Path,
    hook: &Path,
    python: &Path,
) -> Result<(), Failure> {
    let name = request::client_name(&job_id()?);
    let clients = match Source::clients(bus, socket).await {
        Ok(c) => c,
        Err(e) => {
            // "print" lines go to the task's output
            println!("print gpushare: {}", e.message);
            return Ok(());
        }
    };
    if !clients.iter().any(|c| c.name == name) {
        return Ok(());
    }
    let python = python.is_dir().then(|| python.display().to_string());
    print!(
        "{}",
        request::task_exports(
            &name,
            &hook.display().to_string(),
            python.as_deref(),
            std::env::var("LD_PRELOAD").ok().as_deref(),
            std::env::var("PYTHONPATH").ok().as_deref(),
        )
    );
    Ok(())
}

async fn epilog(bus: &BusChoice) -> Result<(), Failure> {
    let id = job_id()?;
    let name = request::client_name(&id);
    let m = manager(bus).await?;
    let start = Instant::now();
    let client = loop {
        let Some(c) = existing(&m, &name).await? else {
            return Ok(()); // the job had no client
        };
        if c.pids.is_empty() || start.elapsed() > DETACH_WAIT {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // the daemon samples its usage accounting every second: the last of it, then the job's
    // whole usage as kept across restarts of the daemon
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let secs = |ns: u64| ns as f64 / 1e9;
    let user = env("SLURM_JOB_USER").unwrap_or_else(|_| client.users.join(","));
    let kept = m.get_usage(0, "client").await.ok().and_then(|rows| {
        rows.into_iter()
            .find(|r| r.client.as_deref() == Some(name.as_str()))
    });
    let usage = match kept {
        Some(row) => format!(
            "job {id} of {user}: client {name} used GPU time {:.3} s in {} leases, waited {:.3} s, \
             memory {:.3} GiB-s",
            secs(row.gpu_ns),
            row.leases,
            secs(row.wait_ns),
            row.memory_byte_seconds / (1u64 << 30) as f64
        ),
        // no usage accounting: what the daemon counted since it started
        None => format!(
            "job {id} of {user}: client {name} used GPU time {:.3} s in {} leases, waited {:.3} s \
             (since gpushared started)",
            secs(client.charged_ns),
            client.grants,
            secs(client.waited_ns)
        ),
    };
    if let Err(e) = m.unregister_client(&name).await {
        let e: Failure = e.into();
        log(&format!("{usage}; not removed"));
        return Err(e);
    }
    log(&format!("{usage}; removed"));
    Ok(())
}
