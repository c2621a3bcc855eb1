//! Logs go to the journal (structured fields) when the process runs under systemd with its output
//! connected to the journal, and to stderr otherwise.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|e| {
        eprintln!("gpushared: bad log filter {filter:?} ({e}); using info");
        EnvFilter::new("info")
    });
    let registry = tracing_subscriber::registry().with(filter);
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(journald) = tracing_journald::layer() {
            registry
                .with(journald.with_syslog_identifier("gpushared".into()))
                .init();
            return;
        }
    }
    use std::io::IsTerminal;
    let ansi = std::io::stderr().is_terminal();
    registry
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(false)
                .with_ansi(ansi),
        )
        .init();
}
