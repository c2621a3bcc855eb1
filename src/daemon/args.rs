//! Command line of `gpushared`.

use crate::bus::BusChoice;
use crate::config::DEFAULT_CONFIG_PATH;
use clap::builder::TypedValueParser;
use clap::Parser;
use std::path::PathBuf;

/// Share NVIDIA GPUs fairly between processes and users.
///
/// The daemon schedules GPU time between CUDA processes that run with the libgpushare hook, each
/// GPU with a token of its own, caps their device memory on each GPU, serves the org.gpushare1
/// D-Bus API, and, when configured, sets the GPUs' compute mode and runs NVIDIA's MPS control
/// daemon. It reloads its config on SIGHUP and
/// when the file changes; a broken file is reported and the running config kept.
#[derive(Debug, Parser)]
#[command(name = "gpushared", version)]
pub struct DaemonArgs {
    /// Config file (TOML, see gpushare.toml(5)).
    #[arg(long, short, default_value = DEFAULT_CONFIG_PATH, env = "GPUSHARE_CONFIG")]
    pub config: PathBuf,
    /// Directory of the hook socket, overriding daemon.socket_dir.
    #[arg(long)]
    pub socket_dir: Option<PathBuf>,
    /// Directory of what is kept across restarts (usage accounting, registered clients),
    /// overriding daemon.state_dir; "" keeps nothing. Without either: $STATE_DIRECTORY (set by
    /// systemd), else /var/lib/gpushare where the daemon may write it, else
    /// $XDG_STATE_HOME/gpushare or ~/.local/state/gpushare.
    #[arg(long, value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from))]
    pub state_dir: Option<PathBuf>,
    /// D-Bus bus to serve on: system, session, none, or an address (unix:path=...).
    #[arg(long, default_value = "system", env = "GPUSHARE_BUS")]
    pub bus: BusChoice,
    /// Log filter (tracing syntax), e.g. info or gpushare=debug.
    #[arg(long, default_value = "info", env = "GPUSHARE_LOG")]
    pub log: String,
}
