//! What a Slurm job asked for, read from `scontrol show job -o -d` and `scontrol show node -o`,
//! and the client gpushare gives it: request = the job's GPU shards on the node / the node's
//! shards, limit and memory cap as the prolog's options say (memory by default the request's
//! part of the smallest GPU's memory).

use crate::units::parse_bytes;

/// The client a job runs under.
pub fn client_name(job_id: &str) -> String {
    format!("slurm-{job_id}")
}

/// A job id as Slurm gives it to a prolog: digits (an array task has an id of its own).
pub fn check_job_id(id: &str) -> Result<(), String> {
    if !id.is_empty() && id.len() <= 20 && id.bytes().all(|b| b.is_ascii_digit()) {
        Ok(())
    } else {
        Err(format!("SLURM_JOB_ID {id:?} is not a Slurm job id"))
    }
}

/// The `KEY=` field of scontrol's one-line (`-o`) output.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// The count of a gres item `shard:N`, `shard:TYPE:N` or `shard:TYPE:N(S:0-1)` (also
/// `gres:shard:N` and `gres/shard:N`, as TresPerNode writes it); None for other gres.
fn shard_count(item: &str) -> Option<u64> {
    let item = item
        .strip_prefix("gres:")
        .or_else(|| item.strip_prefix("gres/"))
        .unwrap_or(item);
    let rest = item.strip_prefix("shard")?;
    if !(rest.starts_with(':') || rest.starts_with('=')) {
        return None;
    }
    // the socket list `(S:0-1)` after the count
    let rest = rest.split('(').next()?;
    rest.rsplit([':', '=']).next()?.parse().ok()
}

/// The shards of `text` (a gres list such as `gpu:1,shard:100`), added up; None without any.
fn shards_in(list: &str) -> Option<u64> {
    let counts: Vec<u64> = list.split(',').filter_map(shard_count).collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// The shards a job asked for on each node (`--gres=shard:N`), from
/// `scontrol show job -o -d JOBID`; None when it asked for none.
pub fn job_shards(scontrol_job: &str) -> Option<u64> {
    ["TresPerNode", "JOB_GRES"]
        .iter()
        .find_map(|key| field(scontrol_job, key).and_then(shards_in))
}

/// The shards a node has, from `scontrol show node -o NODE` (its `Gres=`); None without any.
pub fn node_shards(scontrol_node: &str) -> Option<u64> {
    field(scontrol_node, "Gres").and_then(shards_in)
}

/// How the prolog sets the memory cap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MemoryRule {
    /// The request's part of the smallest GPU's memory (none when the daemon lists no GPU).
    Share,
    /// No cap.
    Unlimited,
    /// This many bytes.
    Bytes(u64),
}

impl std::str::FromStr for MemoryRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "share" => Ok(MemoryRule::Share),
            _ => match parse_bytes(s)? {
                None => Ok(MemoryRule::Unlimited),
                Some(b) => Ok(MemoryRule::Bytes(b)),
            },
        }
    }
}

/// How the prolog sets the limit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LimitRule {
    /// The same as the request: the job never gets more than its shards.
    Request,
    /// This share, at least the request.
    Share(f64),
}

impl std::str::FromStr for LimitRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "request" {
            return Ok(LimitRule::Request);
        }
        match s.parse::<f64>() {
            Ok(v) if (0.0..=1.0).contains(&v) => Ok(LimitRule::Share(v)),
            _ => Err(format!("{s:?} is neither \"request\" nor a share in 0..1")),
        }
    }
}

/// The client a job gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobClient {
    pub request: f64,
    pub limit: f64,
    /// Bytes, 0 for no cap.
    pub memory: u64,
}

/// The client of a job of `shards` on a node of `node_shards`, whose smallest GPU has
/// `gpu_memory` bytes (None when the daemon lists no GPU).
pub fn job_client(
    shards: u64,
    node_shards: u64,
    limit: LimitRule,
    memory: MemoryRule,
    gpu_memory: Option<u64>,
) -> Result<JobClient, String> {
    if node_shards == 0 {
        return Err("the node has no shards (Gres=shard:N in slurm.conf)".into());
    }
    if shards > node_shards {
        return Err(format!(
            "the job has {shards} shards, more than the node's {node_shards}"
        ));
    }
    // Rounded down to a millionth: the requests of the jobs Slurm placed together add up to at
    // most 1, as gpushare requires.
    let request = ((shards as f64 / node_shards as f64) * 1e6).floor() / 1e6;
    let limit = match limit {
        LimitRule::Request => request,
        LimitRule::Share(v) => v.max(request),
    };
    let memory = match memory {
        MemoryRule::Unlimited => 0,
        MemoryRule::Bytes(b) => b,
        MemoryRule::Share => gpu_memory.map_or(0, |total| {
            // at least a byte: 0 would mean no cap
            ((total as u128 * shards as u128 / node_shards as u128) as u64).max(1)
        }),
    };
    Ok(JobClient {
        request,
        limit,
        memory,
    })
}

/// The lines a TaskProlog prints to put a task under `client`: Slurm sets each `export NAME=VALUE`
/// in the task's environment. The hook goes first in LD_PRELOAD, the Python start-up code (when
/// `python` is given) first on PYTHONPATH, each there once.
pub fn task_exports(
    client: &str,
    hook: &str,
    python: Option<&str>,
    preload: Option<&str>,
    pythonpath: Option<&str>,
) -> String {
    // `head` first, and not again among the entries already there (a login shell's profile.d
    // may have preloaded the hook already)
    let first = |head: &str, old: Option<&str>| {
        std::iter::once(head)
            .chain(
                old.unwrap_or_default()
                    .split([':', ' '])
                    .filter(|e| !e.is_empty() && *e != head),
            )
            .collect::<Vec<_>>()
            .join(":")
    };
    let mut out = format!(
        "export LD_PRELOAD={}\nexport GPUSHARE_CLIENT={client}\n",
        first(hook, preload)
    );
    if let Some(python) = python {
        out += &format!("export PYTHONPATH={}\n", first(python, pythonpath));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // As Slurm 22.05 prints them (trimmed).
    const JOB: &str = "JobId=12 JobName=train UserId=bob(1001) GroupId=bob(1001) \
        JobState=RUNNING NumNodes=1 NumCPUs=1 TRES=cpu=1,node=1,billing=1 \
        JOB_GRES=shard:25 Nodes=node1 CPU_IDs=0 Mem=0 GRES=shard:25(0) \
        TresPerNode=gres:shard:25 Command=/home/bob/job.sh";
    const NODE: &str = "NodeName=node1 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 \
        Gres=gpu:2,shard:200 GresUsed=gpu:0,shard:0 State=IDLE";

    #[test]
    fn shards_are_read_from_scontrol() {
        assert_eq!(job_shards(JOB), Some(25));
        assert_eq!(node_shards(NODE), Some(200));
        assert_eq!(
            job_shards("JobId=3 TresPerNode=gres/shard:a100:40"),
            Some(40)
        );
        assert_eq!(job_shards("JobId=3 JOB_GRES=gpu:1,shard:10"), Some(10));
        assert_eq!(job_shards("JobId=3 TresPerNode=gres:gpu:1"), None);
        assert_eq!(job_shards("JobId=3 TresPerNode=gres:sharded:1"), None);
        assert_eq!(job_shards("JobId=4 JobName=cpu-only"), None);
        assert_eq!(
            node_shards("NodeName=n Gres=gpu:a100:2(S:0),shard:a100:64(S:0),shard:t4:36"),
            Some(100)
        );
        assert_eq!(node_shards("NodeName=n Gres=gpu:1"), None);
    }

    #[test]
    fn the_request_is_the_jobs_part_of_the_nodes_shards() {
        let c = job_client(
            25,
            100,
            LimitRule::Share(1.0),
            MemoryRule::Share,
            Some(80 << 30),
        )
        .unwrap();
        assert_eq!(c.request, 0.25);
        assert_eq!(c.limit, 1.0);
        assert_eq!(c.memory, 20 << 30);
        // two GPUs, 100 shards each: 50 shards are a quarter of the node
        let c = job_client(50, 200, LimitRule::Request, MemoryRule::Unlimited, None).unwrap();
        assert_eq!((c.request, c.limit, c.memory), (0.25, 0.25, 0));
        // a limit below the request is raised to it
        let c = job_client(
            60,
            100,
            LimitRule::Share(0.5),
            MemoryRule::Bytes(1 << 30),
            None,
        )
        .unwrap();
        assert_eq!((c.request, c.limit, c.memory), (0.6, 0.6, 1 << 30));
        // no GPU listed: no cap from the share
        let c = job_client(10, 100, LimitRule::Share(1.0), MemoryRule::Share, None).unwrap();
        assert_eq!(c.memory, 0);
        // three jobs of a third each fit in 1
        let third = job_client(1, 3, LimitRule::Request, MemoryRule::Unlimited, None).unwrap();
        assert!(third.request * 3.0 <= 1.0);
        assert!(job_client(101, 100, LimitRule::Request, MemoryRule::Share, None).is_err());
        assert!(job_client(1, 0, LimitRule::Request, MemoryRule::Share, None).is_err());
    }

    #[test]
    fn rules_are_parsed() {
        assert_eq!("request".parse(), Ok(LimitRule::Request));
        assert_eq!("0.5".parse(), Ok(LimitRule::Share(0.5)));
        assert!("1.5".parse::<LimitRule>().is_err());
        assert!("lots".parse::<LimitRule>().is_err());
        assert_eq!("share".parse(), Ok(MemoryRule::Share));
        assert_eq!("unlimited".parse(), Ok(MemoryRule::Unlimited));
        assert_eq!("16GiB".parse(), Ok(MemoryRule::Bytes(16 << 30)));
        assert!("16 apples".parse::<MemoryRule>().is_err());
    }

    #[test]
    fn job_ids_are_checked() {
        assert!(check_job_id("12").is_ok());
        assert!(check_job_id("12_3").is_err());
        assert!(check_job_id("").is_err());
        assert!(check_job_id("12; rm -rf /").is_err());
        assert_eq!(client_name("12"), "slurm-12");
    }

    #[test]
    fn task_exports_put_the_hook_first() {
        assert_eq!(
            task_exports("slurm-7", "/hook.so", None, None, None),
            "export LD_PRELOAD=/hook.so\nexport GPUSHARE_CLIENT=slurm-7\n"
        );
        assert_eq!(
            task_exports(
                "slurm-7",
                "/hook.so",
                Some("/py"),
                Some("/other.so"),
                Some("/x")
            ),
            "export LD_PRELOAD=/hook.so:/other.so\nexport GPUSHARE_CLIENT=slurm-7\n\
             export PYTHONPATH=/py:/x\n"
        );
        // already preloaded (a login shell's profile.d): once, first
        assert_eq!(
            task_exports(
                "slurm-7",
                "/hook.so",
                Some("/py"),
                Some("/other.so /hook.so"),
                Some("/py:/x")
            ),
            "export LD_PRELOAD=/hook.so:/other.so\nexport GPUSHARE_CLIENT=slurm-7\n\
             export PYTHONPATH=/py:/x\n"
        );
    }
}
