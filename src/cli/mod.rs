//! `gpushare`: the command line client of the org.gpushare1 D-Bus API, and `gpushare run`, which
//! starts a program with the hook preloaded.

mod cdi;
mod check;
mod kernelspec;
mod ld_preload;
mod output;
mod preload;
mod run;
mod slurm;
mod slurm_request;
mod source;
mod top;

use crate::api;
use crate::bus::BusChoice;
use crate::units::parse_bytes;
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

/// Share NVIDIA GPUs fairly between processes and users.
///
/// Shows and changes what gpushared does, and runs programs under it. Reading needs no
/// privileges; changing clients needs root, a group in the daemon's admin_groups, or the polkit
/// action org.gpushare1.manage. Errors from the daemon are printed as its sentence and exit with
/// status 2. status, clients, top and usage read the daemon's D-Bus API and, when no bus serves
/// it, its socket.
#[derive(Debug, Parser)]
#[command(name = "gpushare", version)]
pub struct Cli {
    /// D-Bus bus the daemon serves on: system, session, an address (unix:path=...), or none.
    #[arg(long, global = true, default_value = "system", env = "GPUSHARE_BUS")]
    pub bus: BusChoice,
    /// The daemon's socket: for check, and for status, clients, top and usage when no bus serves
    /// the daemon.
    #[arg(
        long,
        global = true,
        env = "GPUSHARE_SOCKET",
        default_value = "/run/gpushare/gpushare.sock"
    )]
    pub socket: PathBuf,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show the daemon, its devices with how leases run on each, the GPU processes its scan
    /// flagged (not attached, or using the GPU around the hook) and its clients, with their
    /// figures on each GPU (share, memory, demand estimate, state).
    Status,
    /// List clients with their shares and live usage.
    Clients,
    /// Watch devices and clients live, most share first (q or Ctrl-C quits).
    Top,
    /// Change a client's request, limit, memory cap or class.
    Set {
        /// Client name.
        name: String,
        /// Guaranteed minimum share of each GPU's time, 0..1.
        #[arg(long)]
        request: Option<f64>,
        /// Maximum share of each GPU's time, 0..1.
        #[arg(long)]
        limit: Option<f64>,
        /// Device memory cap on each GPU, e.g. 8GiB, or "unlimited".
        #[arg(long)]
        memory: Option<String>,
        /// Interactive (true: its work runs at once while batch clients pause) or batch (false).
        #[arg(long)]
        interactive: Option<bool>,
    },
    /// Add a client at run time.
    Register {
        /// Client name (letters, digits, '_', '-', '.').
        name: String,
        /// Guaranteed minimum share of each GPU's time, 0..1.
        #[arg(long, default_value_t = 0.0)]
        request: f64,
        /// Maximum share of each GPU's time, 0..1.
        #[arg(long, default_value_t = 1.0)]
        limit: f64,
        /// Device memory cap on each GPU, e.g. 8GiB, or "unlimited".
        #[arg(long, default_value = "unlimited")]
        memory: String,
        /// User (name or uid) who may attach as this client; repeatable; "*" for everyone.
        #[arg(long = "user")]
        users: Vec<String>,
        /// Group (name or gid) whose members may attach as this client; repeatable.
        #[arg(long = "group")]
        groups: Vec<String>,
        /// Keep the client only until the host reboots (it still outlives restarts of the
        /// daemon), as a batch job's client must: the Slurm prolog registers jobs so.
        #[arg(long)]
        runtime: bool,
    },
    /// Remove a client added with `register`.
    Unregister {
        /// Client name.
        name: String,
    },
    /// Show the GPU time and memory-time used, as kept by the daemon across restarts: every
    /// user's to root and the daemon's admin_groups, your own to anyone else.
    Usage {
        /// Only the last DURATION, counted by whole hours, e.g. 7d, 12h or 30min (default: all
        /// that is kept).
        #[arg(long, value_name = "DURATION")]
        since: Option<String>,
        /// Group by user, client or day (the server's local calendar days).
        #[arg(long, default_value = "user", value_parser = ["user", "client", "day"])]
        by: String,
    },
    /// Make the daemon read its config file again.
    Reload,
    /// Attach to the daemon's socket as the hook would, and say what this user gets.
    Check {
        /// Attach as this client (default: your user's default client).
        #[arg(long, env = "GPUSHARE_CLIENT", default_value = "")]
        name: String,
    },
    /// Write the Container Device Interface spec that puts containers under gpushare.
    ///
    /// With it, `podman run --device gpushare.io/gpu=all IMAGE` (or docker with CDI enabled)
    /// mounts the daemon's socket directory (--socket's) at /run/gpushare, the hook at
    /// /usr/lib/gpushare/libgpushare.so and the Python start-up code at
    /// /usr/lib/gpushare/python in the container, and sets LD_PRELOAD, GPUSHARE_SOCKET and
    /// PYTHONPATH there (replacing the image's own values). The GPU itself comes from the NVIDIA
    /// Container Toolkit's spec: add `--device nvidia.com/gpu=all`. The daemon sees the
    /// container's processes with the uid the kernel reports for them (for rootful podman or
    /// docker without a user namespace, the uid inside the container) and gives them the
    /// client their user, or a client's units/slices (gpushare.toml(5)), selects. Run it again
    /// after moving the hook or the socket.
    Cdi {
        /// Where to write the spec; "-" for standard output.
        #[arg(long, default_value = cdi::DEFAULT_OUTPUT)]
        output: PathBuf,
        /// The hook library to mount into containers.
        #[arg(long, env = "GPUSHARE_HOOK", default_value = run::DEFAULT_HOOK)]
        hook: PathBuf,
        /// Python start-up code to mount; left out when the directory does not exist.
        #[arg(long, env = "GPUSHARE_PYTHON", default_value = run::DEFAULT_PYTHON)]
        python: PathBuf,
    },
    /// Slurm's node scripts (see gpushare-slurm(7)): a job that asks for GPU shards runs under
    /// a client of its own.
    Slurm {
        #[command(subcommand)]
        script: slurm::SlurmScript,
    },
    /// Run a program under gpushare: with the hook preloaded, attached as a client.
    Run {
        /// Attach as this client (default: your user's default client).
        #[arg(long)]
        name: Option<String>,
        /// The hook library to preload.
        #[arg(long, env = "GPUSHARE_HOOK", default_value = run::DEFAULT_HOOK)]
        hook: PathBuf,
        /// Python start-up code put first on PYTHONPATH (PyTorch's cache release, for clients
        /// with release_cache); skipped when the directory does not exist.
        #[arg(long, env = "GPUSHARE_PYTHON", default_value = run::DEFAULT_PYTHON)]
        python: PathBuf,
        /// The program and its arguments.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
    },
    /// Preload the hook into every program of this server (/etc/ld.so.preload), or stop.
    ///
    /// With the hook in the system-wide preload list, every CUDA process attaches on its first
    /// CUDA call, as its user's default client, without `gpushare run` or the profile.d opt-in;
    /// programs that never use CUDA only load it. enable and disable need root.
    Preload {
        /// The preload list to change.
        #[arg(long, global = true, default_value = preload::DEFAULT_FILE)]
        file: PathBuf,
        #[command(subcommand)]
        action: PreloadAction,
    },
    /// Install or remove a Jupyter kernel whose Python runs under gpushare.
    Kernelspec {
        #[command(subcommand)]
        action: KernelspecAction,
    },
}

#[derive(Debug, Subcommand)]
pub enum PreloadAction {
    /// Add the hook to the preload list (once; a stale gpushare entry is replaced). Refused
    /// unless the hook is a file everyone can read that a program loads without complaint.
    Enable {
        /// The hook library.
        #[arg(long, env = "GPUSHARE_HOOK", default_value = run::DEFAULT_HOOK)]
        hook: PathBuf,
    },
    /// Take gpushare's entries out of the preload list; the rest of it stays as it was.
    Disable,
    /// Say whether the hook is in the preload list, and whether its file is there.
    Status,
}

/// Where a kernel goes: system-wide by default.
#[derive(Debug, clap::Args)]
#[group(multiple = false)]
pub struct KernelPlace {
    /// The calling user's kernels ($JUPYTER_DATA_DIR, or $XDG_DATA_HOME/jupyter, or
    /// ~/.local/share/jupyter) instead of /usr/local/share/jupyter for everyone.
    #[arg(long)]
    user: bool,
    /// The kernels of the Python environment the kernel runs in (sys.prefix/share/jupyter).
    #[arg(long)]
    sys_prefix: bool,
    /// PREFIX/share/jupyter.
    #[arg(long, value_name = "PREFIX")]
    prefix: Option<PathBuf>,
}

impl KernelPlace {
    fn location(&self) -> kernelspec::Location {
        match (&self.prefix, self.user, self.sys_prefix) {
            (Some(p), _, _) => kernelspec::Location::Prefix(p.clone()),
            (None, true, _) => kernelspec::Location::User,
            (None, false, true) => kernelspec::Location::SysPrefix,
            (None, false, false) => kernelspec::Location::System,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum KernelspecAction {
    /// Write the kernel (kernel.json): `gpushare run [--name CLIENT] -- PYTHON -m
    /// ipykernel_launcher -f {connection_file}`.
    Install {
        #[command(flatten)]
        place: KernelPlace,
        /// The kernel runs attached as this client (default: the user's default client).
        #[arg(long)]
        client: Option<String>,
        /// The kernel's name (default: gpushare, or gpushare-CLIENT).
        #[arg(long)]
        name: Option<String>,
        /// The name notebooks show (default: "Python 3 (gpushare)").
        #[arg(long)]
        display_name: Option<String>,
        /// The Python that runs the kernel; it must have ipykernel.
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// Remove a kernel installed by `gpushare kernelspec install` (never another one).
    Remove {
        #[command(flatten)]
        place: KernelPlace,
        /// The kernel's name (default: gpushare, or gpushare-CLIENT).
        #[arg(long)]
        name: Option<String>,
        /// The client the kernel was installed for, to find its default name.
        #[arg(long)]
        client: Option<String>,
        /// The Python whose environment holds the kernel (for --sys-prefix).
        #[arg(long, default_value = "python3")]
        python: String,
    },
}

#[zbus::proxy(
    interface = "org.gpushare1.Manager",
    default_service = "org.gpushare1",
    default_path = "/org/gpushare1"
)]
pub trait Manager {
    fn register_client(
        &self,
        name: &str,
        request: f64,
        limit: f64,
        memory: u64,
        users: &[String],
        groups: &[String],
    ) -> zbus::Result<()>;
    #[allow(clippy::too_many_arguments)]
    fn register_runtime_client(
        &self,
        name: &str,
        request: f64,
        limit: f64,
        memory: u64,
        users: &[String],
        groups: &[String],
    ) -> zbus::Result<()>;
    fn unregister_client(&self, name: &str) -> zbus::Result<()>;
    fn get_client(&self, name: &str) -> zbus::Result<api::Client>;
    fn set_share(&self, name: &str, request: f64, limit: f64) -> zbus::Result<()>;
    fn set_memory_cap(&self, name: &str, bytes: u64) -> zbus::Result<()>;
    fn set_interactive(&self, name: &str, interactive: bool) -> zbus::Result<()>;
    fn list_clients(&self) -> zbus::Result<Vec<api::Client>>;
    fn list_devices(&self) -> zbus::Result<Vec<api::Device>>;
    fn list_flagged_processes(&self) -> zbus::Result<Vec<api::FlaggedProcess>>;
    fn get_usage(&self, since_seconds: u64, by: &str) -> zbus::Result<Vec<api::UsageRow>>;
    fn reload(&self) -> zbus::Result<()>;
    #[zbus(property)]
    fn version(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn config_path(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn config_error(&self) -> zbus::Result<String>;
    #[zbus(property)]
    fn attached_processes(&self) -> zbus::Result<u32>;
}

/// A failure with the exit status it gets: 2 for errors the daemon reported, 1 for the rest.
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl From<zbus::Error> for Failure {
    fn from(e: zbus::Error) -> Self {
        match e {
            zbus::Error::MethodError(name, Some(msg), _) => Failure {
                message: format!("{msg} ({})", name.as_str()),
                code: 2,
            },
            zbus::Error::MethodError(name, None, _) => Failure {
                message: name.to_string(),
                code: 2,
            },
            other => Failure {
                message: format!(
                    "cannot reach gpushared: {other}; is the gpushare service running?"
                ),
                code: 1,
            },
        }
    }
}

fn usage(message: String) -> Failure {
    Failure { message, code: 2 }
}

fn memory_arg(text: &str) -> Result<u64, Failure> {
    parse_bytes(text)
        .map(|b| b.unwrap_or(0))
        .map_err(|e| usage(format!("--memory: {e}")))
}

fn since_arg(text: &str) -> Result<u64, Failure> {
    match humantime::parse_duration(text) {
        Ok(d) if d.as_secs() > 0 => Ok(d.as_secs()),
        Ok(_) => Err(usage("--since: give at least a second".into())),
        Err(e) => Err(usage(format!(
            "--since {text:?}: {e} (examples: 7d, 12h, 30min)"
        ))),
    }
}

fn fraction_arg(what: &str, v: f64) -> Result<f64, Failure> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(usage(format!("--{what} {v} is outside 0..1")))
    }
}

async fn proxy(bus: &BusChoice) -> Result<ManagerProxy<'static>, Failure> {
    let conn = bus.builder()?.build().await?;
    Ok(ManagerProxy::new(&conn).await?)
}

pub async fn run(cli: Cli) -> Result<(), Failure> {
    if let Command::Run {
        name,
        hook,
        python,
        command,
    } = cli.command
    {
        return run::exec(name.as_deref(), &hook, &python, &command)
            .map_err(|message| Failure { message, code: 1 });
    }
    if let Command::Cdi {
        output,
        hook,
        python,
    } = &cli.command
    {
        cdi::spec(&cdi::Sources {
            socket: cli.socket.clone(),
            hook: hook.clone(),
            python: python.clone(),
        })
        .and_then(|text| cdi::write(output, &text))
        .map_err(|message| Failure { message, code: 1 })?;
        return Ok(());
    }
    if let Command::Slurm { script } = cli.command {
        return slurm::run(script, &cli.bus, &cli.socket).await;
    }
    if let Command::Preload { file, action } = &cli.command {
        return preload_command(cli.json, file, action)
            .map_err(|message| Failure { message, code: 1 });
    }
    if let Command::Kernelspec { action } = &cli.command {
        return kernelspec_command(action).map_err(|message| Failure { message, code: 1 });
    }
    if let Command::Check { name } = &cli.command {
        let reply =
            check::attach(&cli.socket, name).map_err(|message| Failure { message, code: 1 })?;
        let line = check::describe(&reply).map_err(usage)?;
        if cli.json {
            println!(
                "{}",
                serde_json::json!({ "attached": true, "description": line })
            );
        } else {
            println!("{line}");
        }
        return Ok(());
    }
    match cli.command {
        Command::Status => {
            let (_, doc) = source::Source::open(&cli.bus, &cli.socket).await?;
            return output::status(cli.json, &doc);
        }
        Command::Clients => {
            let clients = source::Source::clients(&cli.bus, &cli.socket).await?;
            return output::clients(cli.json, &clients);
        }
        Command::Top => return top::run(&cli.bus, &cli.socket).await,
        Command::Usage { since, by } => {
            let seconds = since.as_deref().map(since_arg).transpose()?.unwrap_or(0);
            let rows = source::Source::usage(&cli.bus, &cli.socket, seconds, &by).await?;
            return output::usage(cli.json, &by, &rows);
        }
        _ => {}
    }
    let m = proxy(&cli.bus).await?;
    match cli.command {
        Command::Set {
            name,
            request,
            limit,
            memory,
            interactive,
        } => {
            if request.is_none() && limit.is_none() && memory.is_none() && interactive.is_none() {
                return Err(usage(
                    "nothing to set: give --request, --limit, --memory or --interactive".into(),
                ));
            }
            if request.is_some() || limit.is_some() {
                let r = request
                    .map(|v| fraction_arg("request", v))
                    .transpose()?
                    .unwrap_or(-1.0);
                let l = limit
                    .map(|v| fraction_arg("limit", v))
                    .transpose()?
                    .unwrap_or(-1.0);
                m.set_share(&name, r, l).await?;
            }
            if let Some(mem) = memory {
                m.set_memory_cap(&name, memory_arg(&mem)?).await?;
            }
            if let Some(i) = interactive {
                m.set_interactive(&name, i).await?;
            }
        }
        Command::Register {
            name,
            request,
            limit,
            memory,
            users,
            groups,
            runtime,
        } => {
            let request = fraction_arg("request", request)?;
            let limit = fraction_arg("limit", limit)?;
            let memory = memory_arg(&memory)?;
            if runtime {
                m.register_runtime_client(&name, request, limit, memory, &users, &groups)
                    .await?;
            } else {
                m.register_client(&name, request, limit, memory, &users, &groups)
                    .await?;
            }
        }
        Command::Unregister { name } => m.unregister_client(&name).await?,
        Command::Reload => m.reload().await?,
        Command::Run { .. }
        | Command::Cdi { .. }
        | Command::Slurm { .. }
        | Command::Check { .. }
        | Command::Preload { .. }
        | Command::Kernelspec { .. }
        | Command::Status
        | Command::Clients
        | Command::Top
        | Command::Usage { .. } => unreachable!("handled above"),
    }
    Ok(())
}

fn preload_command(json: bool, file: &Path, action: &PreloadAction) -> Result<(), String> {
    let changed = match action {
        PreloadAction::Status => {
            let st = preload::status(file)?;
            if json {
                println!("{}", serde_json::to_string(&st).map_err(|e| e.to_string())?);
            } else if st.enabled {
                println!(
                    "enabled: {} preloads {}",
                    file.display(),
                    st.entries.join(" ")
                );
            } else {
                println!("disabled: {} does not preload the hook", file.display());
            }
            for m in &st.missing {
                eprintln!(
                    "gpushare: {m} is in {} but missing: every program prints an error until \
                     it is reinstalled or `gpushare preload disable` runs",
                    file.display()
                );
            }
            return Ok(());
        }
        PreloadAction::Enable { hook } => preload::enable(file, hook)?,
        PreloadAction::Disable => preload::disable(file)?,
    };
    let enabled = matches!(action, PreloadAction::Enable { .. });
    let said = match (enabled, changed) {
        (true, true) => {
            "enabled: every program started from now on loads the hook; CUDA \
                         processes attach on their first CUDA call"
        }
        (true, false) => "already enabled",
        (false, true) => "disabled: programs started from now on do not load the hook",
        (false, false) => "already disabled",
    };
    if json {
        println!(
            "{}",
            serde_json::json!({ "enabled": enabled, "changed": changed, "file": file })
        );
    } else {
        println!("{said} ({})", file.display());
    }
    Ok(())
}

fn kernelspec_command(action: &KernelspecAction) -> Result<(), String> {
    let env = |k: &str| std::env::var(k).ok();
    match action {
        KernelspecAction::Install {
            place,
            client,
            name,
            display_name,
            python,
        } => {
            let client = client.as_deref();
            let name = name
                .clone()
                .unwrap_or_else(|| kernelspec::default_name(client));
            kernelspec::check_name(&name)?;
            let python = kernelspec::resolve_python(python)?;
            let dir = kernelspec::kernels_dir(&place.location(), env, || {
                kernelspec::sys_prefix(&python)
            })?
            .join(&name);
            let gpushare = std::env::current_exe()
                .map_err(|e| format!("cannot tell where gpushare is: {e}"))?;
            let display = display_name
                .clone()
                .unwrap_or_else(|| kernelspec::default_display_name(client));
            let spec = kernelspec::kernel_json(&gpushare, &python, client, &display);
            kernelspec::install(&dir, &spec)?;
            println!("installed kernel {name} in {}", dir.display());
        }
        KernelspecAction::Remove {
            place,
            name,
            client,
            python,
        } => {
            let name = name
                .clone()
                .unwrap_or_else(|| kernelspec::default_name(client.as_deref()));
            kernelspec::check_name(&name)?;
            let dir = kernelspec::kernels_dir(&place.location(), env, || {
                kernelspec::sys_prefix(Path::new(python))
            })?
            .join(&name);
            kernelspec::remove(&dir)?;
            println!("removed kernel {name} from {}", dir.display());
        }
    }
    Ok(())
}
