use clap::Parser;
use gpushare::cli::{self, Cli};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("gpushare: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(cli::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            eprintln!("gpushare: {}", f.message);
            ExitCode::from(f.code)
        }
    }
}
