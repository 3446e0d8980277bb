//! The launcher: `dropbehind [OPTIONS] -- COMMAND [ARGS]` runs COMMAND with the preload
//! library; `stat` shows how much of files and trees is in the page cache, `evict` drops it,
//! `env` prints the environment that preloads the library. It links the pure core and the
//! system layer, never the preload library.
#![forbid(unsafe_code)]

mod args;
mod env;
mod evict;
mod launch;
mod man;
mod out;
mod reports;
mod stat;
mod walk;
mod watch;

use args::{Cli, Sub};
use clap::Parser;
use clap::error::ErrorKind;
use std::process::ExitCode;

fn main() -> ExitCode {
    let argv: Vec<_> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == man::GENERATE) {
        let what = argv.get(2).map(|s| s.to_string_lossy().into_owned());
        let mut stdout = std::io::stdout().lock();
        return match man::generate(what.as_deref().unwrap_or(""), &mut stdout) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => out::fail(2, e),
        };
    }
    let cli = match Cli::try_parse_from(&argv) {
        Ok(cli) => cli,
        Err(e) => return usage_error(e),
    };
    match &cli.sub {
        Some(Sub::Stat(a)) => stat::run(a),
        Some(Sub::Evict(a)) => evict::run(a),
        Some(Sub::Env(a)) => env::run(a),
        None if !cli.pid.is_empty() => {
            watch::attach(&cli.pid, &launch::watch_options(&cli.preload, cli.watch))
        }
        None => launch::run(&cli),
    }
}

/// Help and version as clap prints them; any other error as one line, exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => out::fail(2, out::one_line(&e.render().to_string())),
    }
}
