//! The launcher: `dropbehind [OPTIONS] -- COMMAND [ARGS]` runs COMMAND with the preload
//! library, and `dropbehind stat FILE...` shows how much of each file is in the page cache.
//! It links the pure core and the system layer, never the preload library.
#![forbid(unsafe_code)]

mod watch;

use dropbehind_core::config;
use dropbehind_sys::cache as residency;

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const LIB_NAME: &str = "libdropbehind.so";

fn variables_help() -> String {
    let mut s = String::from("Environment (the options set these; a bad value is refused):\n");
    for v in config::VARIABLES {
        s += &format!("  {:<22} {} [default: {}]\n", v.name, v.accepts, v.default);
    }
    s += "  DROPBEHIND_LIB         path of libdropbehind.so, if not beside the launcher or in ../lib\n\n";
    s += "Static binaries, Go programs, setuid programs and io_uring bypass the library: the\n";
    s += "launcher stays the parent and watches those from outside (--no-watch: it doesn't).\n";
    s += "Examples:\n  dropbehind -- cp big.iso /backup/\n  dropbehind -- restic -r /backup/repo backup /data\n  dropbehind --pid 4242\n  dropbehind --window 16M --stats -- tar cf /backup/x.tar /data\n  dropbehind stat /backup/x.tar";
    s
}

#[derive(Parser)]
#[command(
    name = "dropbehind",
    version,
    about = "Run a command without letting its streaming I/O flood the page cache",
    override_usage = "dropbehind [OPTIONS] -- COMMAND [ARGS]...\n       dropbehind [OPTIONS] --pid PID...\n       dropbehind stat [--json] FILE...",
    args_conflicts_with_subcommands = true,
    after_help = variables_help()
)]
struct Cli {
    /// Drop-behind window (64K to 64M)
    #[arg(short, long, value_name = "SIZE", value_parser = parse_window)]
    window: Option<u64>,
    /// Prefetch reach ahead of sequential reads and mmap scans (0 or 256K to 32M)
    #[arg(short, long, value_name = "SIZE", value_parser = parse_readahead)]
    readahead: Option<u64>,
    /// Files smaller than this are left alone
    #[arg(long, value_name = "SIZE", value_parser = parse_min_size)]
    min_size: Option<u64>,
    /// auto, dontcache, fadvise or off
    #[arg(short, long, value_name = "B", value_parser = parse_backend)]
    backend: Option<config::Backend>,
    /// Colon-separated absolute path globs to leave alone
    #[arg(long, value_name = "GLOBS")]
    exclude: Option<String>,
    /// Print a report at exit (to stderr, or append it to FILE)
    #[arg(short, long, value_name = "FILE", num_args = 0..=1, default_missing_value = "stderr")]
    stats: Option<String>,
    /// Log what the library does (-v info, -vv debug), and which process got what
    #[arg(short, long, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Attach to running processes (and their children) until they exit; Ctrl-C detaches
    #[arg(long, value_name = "PID", num_args = 1.., conflicts_with = "command")]
    pid: Vec<i32>,
    /// Watch every process from outside, the preload library not used
    #[arg(long, conflicts_with = "no_watch")]
    watch: bool,
    /// The preload library alone: the launcher execs the command, nothing watches it
    #[arg(long)]
    no_watch: bool,
    /// The command to run, after `--`
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<OsString>,
    #[command(subcommand)]
    sub: Option<Sub>,
}

#[derive(Subcommand)]
enum Sub {
    /// Show how much of each file is in the page cache
    Stat {
        /// Print JSON instead of a table
        #[arg(long)]
        json: bool,
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
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

fn parse_backend(s: &str) -> Result<config::Backend, String> {
    config::parse_backend(s)
        .ok_or_else(|| "expected one of auto, dontcache, fadvise, off".to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.sub {
        Some(Sub::Stat { json, ref files }) => stat(files, json),
        None if !cli.pid.is_empty() => watch::attach(&cli.pid, &watch_options(&cli)),
        None => run(cli),
    }
}

fn watch_options(cli: &Cli) -> watch::Options {
    watch::Options {
        verbose: cli.verbose > 0,
        stats: cli.stats.clone(),
        watch_all: cli.watch,
        window: cli.window.unwrap_or(watch::MIN_WINDOW),
        min_size: cli.min_size.unwrap_or(config::DEFAULT_MIN_SIZE),
        lib_name: LIB_NAME,
    }
}

fn fail(code: u8, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("dropbehind: {msg}");
    ExitCode::from(code)
}

fn run(cli: Cli) -> ExitCode {
    let Some((program, args)) = cli.command.split_first() else {
        return fail(
            2,
            "no command given; usage: dropbehind [OPTIONS] -- COMMAND [ARGS]...",
        );
    };
    // Values already in the environment get the same scrutiny as options.
    let (_, bad) = config::from_lookup(|name| std::env::var(name).ok());
    if let Some(b) = bad.first() {
        return fail(2, b);
    }
    if let Some(globs) = &cli.exclude {
        let (_, bad) = config::from_lookup(|n| (n == "DROPBEHIND_EXCLUDE").then(|| globs.clone()));
        if let Some(b) = bad.first() {
            return fail(2, format!("--exclude: {b}"));
        }
    }
    if let Some(s) = &cli.stats
        && s != "stderr"
        && !s.starts_with('/')
    {
        return fail(2, format!("--stats {s:?}: expected an absolute file path"));
    }
    let lib = match find_library() {
        Ok(l) => l,
        Err(looked) => {
            return fail(
                2,
                format!("{LIB_NAME} not found (looked in {looked}); set DROPBEHIND_LIB"),
            );
        }
    };
    let Some(path) = resolve_command(program) else {
        return fail(
            127,
            format!("{}: command not found", program.to_string_lossy()),
        );
    };
    if let Some(why) = unreachable_reason(&path).filter(|_| cli.no_watch) {
        eprintln!(
            "dropbehind: warning: {}: {why}; the library can't act there",
            path.display()
        );
    }

    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    let preload = match std::env::var_os("LD_PRELOAD") {
        Some(old) if !old.is_empty() => {
            let mut v = lib.clone().into_os_string();
            v.push(":");
            v.push(old);
            v
        }
        _ => lib.clone().into_os_string(),
    };
    if !cli.watch {
        cmd.env("LD_PRELOAD", preload);
    }
    if let Some(w) = cli.window {
        cmd.env("DROPBEHIND_WINDOW", w.to_string());
    }
    if let Some(r) = cli.readahead {
        cmd.env("DROPBEHIND_READAHEAD", r.to_string());
    }
    if let Some(m) = cli.min_size {
        cmd.env("DROPBEHIND_MIN_SIZE", m.to_string());
    }
    if let Some(b) = cli.backend {
        cmd.env("DROPBEHIND_BACKEND", b.name());
    }
    if let Some(e) = &cli.exclude {
        cmd.env("DROPBEHIND_EXCLUDE", e);
    }
    if let Some(s) = &cli.stats {
        cmd.env("DROPBEHIND_STATS", s);
    }
    match cli.verbose {
        0 => {}
        1 => {
            cmd.env("DROPBEHIND_LOG", "info");
        }
        _ => {
            cmd.env("DROPBEHIND_LOG", "debug");
        }
    }
    if !cli.no_watch {
        return watch::launch(cmd, &program.to_string_lossy(), &watch_options(&cli));
    }
    let err = cmd.exec();
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    fail(code, format!("{}: {err}", program.to_string_lossy()))
}

/// DROPBEHIND_LIB, else beside the launcher, else ../lib of the launcher's own path.
fn find_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("DROPBEHIND_LIB") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(absolute(&p))
        } else {
            Err(format!("DROPBEHIND_LIB={}", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [dir.join(LIB_NAME), dir.join("../lib").join(LIB_NAME)];
    candidates
        .iter()
        .find(|p| p.is_file())
        .map(|p| absolute(p))
        .ok_or_else(|| {
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
}

fn absolute(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The file `exec` would run: a path as given, else the first match in PATH.
fn resolve_command(program: &OsString) -> Option<PathBuf> {
    let p = Path::new(program);
    if p.components().count() > 1 || program.to_string_lossy().contains('/') {
        return p.exists().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
}

/// Why LD_PRELOAD won't reach the program, if it can tell: setuid/setgid, or a static ELF.
fn unreachable_reason(path: &Path) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.permissions().mode();
    let (euid, egid) = dropbehind_sys::proc::effective_ids();
    if mode & 0o4000 != 0 && meta.uid() != euid {
        return Some("it is setuid, and the loader ignores LD_PRELOAD for it".into());
    }
    if mode & 0o2000 != 0 && meta.gid() != egid {
        return Some("it is setgid, and the loader ignores LD_PRELOAD for it".into());
    }
    let mut head = Vec::new();
    std::fs::File::open(path)
        .ok()?
        .take(64 * 1024)
        .read_to_end(&mut head)
        .ok()?;
    elf_is_static(&head)
        .filter(|&s| s)
        .map(|_| "it is statically linked".into())
}

/// For a 64-bit little-endian ELF executable: true when it has no PT_INTERP (static).
/// None when the file is not such an ELF (a script, say) or its headers are out of reach.
fn elf_is_static(b: &[u8]) -> Option<bool> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" || b[4] != 2 || b[5] != 1 {
        return None;
    }
    let u16_at = |o: usize| Some(u16::from_le_bytes(b.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(b.get(o..o + 8)?.try_into().ok()?));
    let phoff = u64_at(0x20)? as usize;
    let phentsize = u16_at(0x36)? as usize;
    let phnum = u16_at(0x38)? as usize;
    const PT_INTERP: u32 = 3;
    let mut any = false;
    for i in 0..phnum {
        let t = u32_at(phoff + i * phentsize)?;
        any = true;
        if t == PT_INTERP {
            return Some(false);
        }
    }
    any.then_some(true)
}

struct Residency {
    size: u64,
    cached: u64,
    dirty: Option<u64>,
    method: &'static str,
}

fn residency(path: &Path) -> Result<Residency, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if meta.is_dir() {
        return Err("is a directory".into());
    }
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    let f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    match residency::cachestat(fd, 0, 0) {
        Ok(cs) => Ok(Residency {
            size: meta.len(),
            cached: cs.cache,
            dirty: Some(cs.dirty),
            method: "cachestat",
        }),
        Err(_) => {
            let cached =
                residency::mincore_count(fd, meta.len()).map_err(|e| format!("mincore: {e}"))?;
            Ok(Residency {
                size: meta.len(),
                cached,
                dirty: None,
                method: "mincore",
            })
        }
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out += "\\\"",
            '\\' => out += "\\\\",
            c if (c as u32) < 0x20 => out += &format!("\\u{:04x}", c as u32),
            c => out.push(c),
        }
    }
    out + "\""
}

fn stat(files: &[PathBuf], json: bool) -> ExitCode {
    let mut failed = false;
    let mut rows = Vec::new();
    if !json {
        println!(
            "{:>9} {:>6} {:>10} {:>9} {:>7}  FILE",
            "CACHED", "%", "PAGES", "SIZE", "DIRTY"
        );
    }
    for path in files {
        match residency(path) {
            Ok(r) => {
                let pct = if r.size == 0 {
                    0.0
                } else {
                    100.0 * (r.cached * 4096) as f64 / r.size as f64
                };
                if json {
                    rows.push(format!(
                        "{{\"file\":{},\"size\":{},\"cached_pages\":{},\"cached_bytes\":{},\"dirty_pages\":{},\"method\":\"{}\"}}",
                        json_string(&path.to_string_lossy()),
                        r.size,
                        r.cached,
                        r.cached * 4096,
                        r.dirty.map_or("null".into(), |d| d.to_string()),
                        r.method
                    ));
                } else {
                    println!(
                        "{:>9} {:>5.1}% {:>10} {:>9} {:>7}  {}{}",
                        config::format_size(r.cached * 4096),
                        pct.min(100.0),
                        r.cached,
                        config::format_size(r.size),
                        r.dirty.map_or("-".into(), |d| d.to_string()),
                        path.display(),
                        if r.method == "mincore" {
                            "  (mincore: may over-report files you can't write)"
                        } else {
                            ""
                        }
                    );
                }
            }
            Err(e) => {
                failed = true;
                eprintln!("dropbehind: stat: {}: {e}", path.display());
            }
        }
    }
    if json {
        println!("[{}]", rows.join(","));
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elf_detection() {
        let ls = std::fs::read("/bin/ls").unwrap();
        assert_eq!(elf_is_static(&ls), Some(false));
        assert_eq!(elf_is_static(b"#!/bin/sh\necho hi\n"), None);
    }

    #[test]
    fn json_escaping() {
        assert_eq!(json_string("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
