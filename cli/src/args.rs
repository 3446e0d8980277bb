//! The launcher's arguments: the one definition that parsing, `--help`, the man page and the
//! shell completions are all made from (`man.rs`), so none of them can drift from another.

use clap::{Args, Parser, Subcommand, ValueEnum};
use dropbehind_core::config;
use std::ffi::OsString;
use std::path::PathBuf;

fn variables_help() -> String {
    let mut s = String::from("Environment (the options set these; a bad value is refused):\n");
    for v in config::VARIABLES {
        s += &format!("  {:<24} {} [default: {}]\n", v.name, v.accepts, v.default);
    }
    s += &format!("  {:<24} {}\n\n", "DROPBEHIND_LIB", LIB_HELP);
    s += "Static binaries, Go programs, setuid programs and io_uring bypass the library: the\n";
    s += "launcher stays the parent and watches those from outside (--no-watch: it doesn't).\n";
    s += "Examples:\n  dropbehind -- cp big.iso /backup/\n  dropbehind -- restic -r /backup/repo backup /data\n  dropbehind --pid 4242\n  dropbehind --window 16M --stats -- tar cf /backup/x.tar /data\n  dropbehind stat -r --top 10 /var/lib\n  dropbehind evict -r /backup\n  dropbehind env --stats >/etc/dropbehind.env";
    s
}

/// Where the launcher looks for the library, for help and errors.
pub const LIB_HELP: &str = "path of libdropbehind.so, if not beside the launcher, in ../lib or in ../lib/<multiarch> (as the Debian package installs it)";

pub const ABOUT: &str = "Run a command without letting its streaming I/O flood the page cache";

const LONG_ABOUT: &str = "Run a command without letting its streaming I/O flood the page cache.

dropbehind runs COMMAND with libdropbehind.so preloaded: pages that the command's sequential reads and writes bring into the page cache are dropped once it is done with them, while pages that were cached before (someone's working set) stay. Sequential readers and mmap scans are read ahead, and the inodes of big cold directories are prefetched.

The subcommands look at and act on the page cache directly: stat shows how much of files and trees is cached, evict drops what is cached of them, env prints the environment that preloads the library, for services, cron jobs and containers.";

#[derive(Parser)]
#[command(
    name = "dropbehind",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    override_usage = "dropbehind [OPTIONS] -- COMMAND [ARGS]...\n       dropbehind [OPTIONS] --pid PID...\n       dropbehind stat [-r] [--json] [--map] PATH...\n       dropbehind evict [-r] PATH...\n       dropbehind env [OPTIONS]",
    args_conflicts_with_subcommands = true,
    after_help = variables_help()
)]
pub struct Cli {
    #[command(flatten)]
    pub preload: PreloadOpts,
    /// Attach to running processes (and their children) until they exit; Ctrl-C detaches
    #[arg(long, value_name = "PID", num_args = 1.., conflicts_with = "command")]
    pub pid: Vec<i32>,
    /// Watch every process from outside, the preload library not used
    #[arg(long, conflicts_with = "no_watch")]
    pub watch: bool,
    /// The preload library alone: the launcher execs the command, nothing watches it
    #[arg(long)]
    pub no_watch: bool,
    /// The command to run, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
    #[command(subcommand)]
    pub sub: Option<Sub>,
}

/// The library's settings, as the launcher and `env` take them.
#[derive(Args, Clone, Debug, Default)]
pub struct PreloadOpts {
    /// Drop-behind window (64K to 64M)
    #[arg(short, long, value_name = "SIZE", value_parser = parse_window)]
    pub window: Option<u64>,
    /// Prefetch reach ahead of sequential reads and mmap scans (0 or 256K to 32M)
    #[arg(short, long, value_name = "SIZE", value_parser = parse_readahead)]
    pub readahead: Option<u64>,
    /// Files smaller than this are left alone
    #[arg(long, value_name = "SIZE", value_parser = parse_min_size)]
    pub min_size: Option<u64>,
    /// How pages are dropped (auto: fadvise where residency can be proven, else RWF_DONTCACHE for reads aligned to readahead's folios)
    #[arg(short, long, value_name = "B", ignore_case = true, value_parser = backend_parser())]
    pub backend: Option<config::Backend>,
    /// Colon-separated absolute path globs to leave alone
    #[arg(long, value_name = "GLOBS", value_hint = clap::ValueHint::Other)]
    pub exclude: Option<String>,
    /// Print a report at exit (to stderr, or append it to FILE, an absolute path); on
    /// stderr, the launcher prints its processes' reports when the program ends
    #[arg(short, long, value_name = "FILE", num_args = 0..=1, default_missing_value = "stderr", value_hint = clap::ValueHint::FilePath)]
    pub stats: Option<String>,
    /// The report's format (json: one object per process, on one line); implies --stats
    #[arg(long, value_name = "FORMAT", ignore_case = true, value_parser = stats_format_parser())]
    pub stats_format: Option<config::StatsFormat>,
    /// Log what the library does (-v info, -vv debug), and which process got what
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

#[derive(Subcommand)]
pub enum Sub {
    /// Show how much of files (and, with -r, of trees) is in the page cache
    #[command(
        long_about = "Show how much of files (and, with -r, of trees) is in the page cache: a row per regular file and a total.\n\nResidency comes from cachestat(2). Where the kernel won't tell (files you may not write: cachestat says EPERM) the row says \"unknown\" and the total leaves the file out, never a wrong number. FIFOs, sockets and devices are listed as skipped and never opened; symlinks are not followed unless -L is given; a file with several hard links is counted once. Nothing is read, written or changed: not even access times.\n\nExit status: 0, or 1 when a path was missing or unreadable (the rest is still shown), or 2 for a bad option."
    )]
    Stat(StatArgs),
    /// Drop what is cached of files (and, with -r, of trees), leaving dirty pages alone
    #[command(
        long_about = "Drop what is cached of files (and, with -r, of trees): posix_fadvise(DONTNEED) on the clean ranges only.\n\nDirty pages and pages under writeback are found with cachestat(2) first and left alone (DONTNEED would start their writeback): evict never writes or syncs anything. Pages that stay cached anyway (mapped by a process, or in use) are reported. Files whose residency the kernel won't tell (cachestat not permitted: files you may not write) are left alone, since their dirty pages can't be found.\n\nExit status: 0, or 1 when a path was missing or unreadable (the rest is still done), or 2 for a bad option."
    )]
    Evict(EvictArgs),
    /// Print the environment that preloads the library (for EnvironmentFile=, cron, containers)
    #[command(
        long_about = "Print the environment that preloads the library: LD_PRELOAD with the installed library's path, and the DROPBEHIND_* settings from the options (the launcher's own) and from DROPBEHIND_* variables already set, all validated. One NAME=value line each, as systemd's EnvironmentFile=, a crontab and docker's --env-file read them.\n\nAn environment alone can't reach statically linked programs (most Go binaries) and nothing tells you so: start those with the launcher (ExecStart=dropbehind -- PROGRAM), which warns when the library can't act.\n\nExit status: 0, or 2 for a bad option or value (named in the message)."
    )]
    Env(EnvArgs),
}

/// How a tree is walked (stat and evict).
#[derive(Args, Clone, Copy, Debug, Default)]
pub struct WalkOpts {
    /// Walk directories recursively
    #[arg(short, long)]
    pub recursive: bool,
    /// Follow symlinks (on the command line and in trees)
    #[arg(short = 'L', long)]
    pub dereference: bool,
    /// Stay on the filesystem of each PATH
    #[arg(short = 'x', long)]
    pub one_file_system: bool,
}

#[derive(Args)]
pub struct StatArgs {
    #[command(flatten)]
    pub walk: WalkOpts,
    /// Print JSON: an array of records (files, skipped entries, errors, then the total)
    #[arg(long)]
    pub json: bool,
    /// Draw each file's residency as a bar: O cached, o partly, blank not cached
    #[arg(short, long)]
    pub map: bool,
    /// Order the rows (cached, percent and size: largest first)
    #[arg(long, value_name = "KEY", value_enum)]
    pub sort: Option<SortKey>,
    /// Show only the first N rows (by --sort, cached by default); the total counts all
    #[arg(long, value_name = "N", value_parser = parse_top)]
    pub top: Option<u64>,
    /// Print only the total
    #[arg(short, long, conflicts_with_all = ["map", "top", "sort"])]
    pub summary: bool,
    /// Files, or with -r directories
    #[arg(required = true, value_name = "PATH", value_hint = clap::ValueHint::AnyPath)]
    pub paths: Vec<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Cached bytes, largest first
    Cached,
    /// Cached share of the file, largest first
    Percent,
    /// File size, largest first
    Size,
    /// Path, in byte order
    Name,
}

#[derive(Args)]
pub struct EvictArgs {
    #[command(flatten)]
    pub walk: WalkOpts,
    /// Print JSON: an array of records (files, skipped entries, errors, then the total)
    #[arg(long)]
    pub json: bool,
    /// Print only the total (and what could not be dropped)
    #[arg(short, long)]
    pub summary: bool,
    /// Files, or with -r directories
    #[arg(required = true, value_name = "PATH", value_hint = clap::ValueHint::AnyPath)]
    pub paths: Vec<PathBuf>,
}

#[derive(Args)]
pub struct EnvArgs {
    #[command(flatten)]
    pub preload: PreloadOpts,
}

fn parse_top(s: &str) -> Result<u64, String> {
    s.parse::<u64>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| "expected a number of rows, 1 or more".to_string())
}

fn parse_window(s: &str) -> Result<u64, String> {
    config::parse_size(s)
        .filter(|n| (config::WINDOW_MIN..=config::WINDOW_MAX).contains(n))
        .ok_or_else(|| "expected a size from 64K to 64M, e.g. 8M".to_string())
}

fn parse_readahead(s: &str) -> Result<u64, String> {
    let (c, bad) = config::from_lookup(|n| (n == "DROPBEHIND_READAHEAD").then(|| s.to_string()));
    if bad.is_empty() {
        Ok(c.readahead)
    } else {
        Err("expected 0 (off) or a size from 256K to 32M, e.g. 16M".to_string())
    }
}

fn parse_min_size(s: &str) -> Result<u64, String> {
    config::parse_size(s).ok_or_else(|| "expected a size such as 0, 512K or 1M".to_string())
}

/// The backends by name, so that help and completions list them.
fn backend_parser() -> impl clap::builder::TypedValueParser<Value = config::Backend> {
    use clap::builder::TypedValueParser;
    use config::Backend::*;
    let all = [Auto, DontCache, Fadvise, Off];
    clap::builder::PossibleValuesParser::new(all.map(|b| b.name()))
        .map(|s: String| config::parse_backend(&s).unwrap_or(config::Backend::Auto))
}

fn stats_format_parser() -> impl clap::builder::TypedValueParser<Value = config::StatsFormat> {
    use clap::builder::TypedValueParser;
    use config::StatsFormat::*;
    clap::builder::PossibleValuesParser::new([Text, Json].map(|f| f.name()))
        .map(|s: String| config::parse_stats_format(&s).unwrap_or(config::StatsFormat::Text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn definitions_are_consistent() {
        Cli::command().debug_assert();
    }
}
