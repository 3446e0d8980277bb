//! Running a command with the library preloaded: the settings the options make, where the
//! library is, and why the preload might not reach the program.

use crate::args::PreloadOpts;
use crate::out::fail;
use dropbehind_core::config;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub const LIB_NAME: &str = "libdropbehind.so";
/// The engine the front (LIB_NAME) loads on first work, from its own directory.
pub const ENGINE_NAME: &str = "libdropbehind_engine.so";

/// The DROPBEHIND_* variables the options set, in the order of `config::VARIABLES`, after
/// checking the values already in the environment as strictly as the options.
pub fn settings(opts: &PreloadOpts) -> Result<Vec<(&'static str, String)>, String> {
    let (_, bad) = config::from_lookup(|name| std::env::var(name).ok());
    if let Some(b) = bad.first() {
        return Err(b.to_string());
    }
    if let Some(globs) = &opts.exclude {
        let (_, bad) = config::from_lookup(|n| (n == "DROPBEHIND_EXCLUDE").then(|| globs.clone()));
        if let Some(b) = bad.first() {
            return Err(format!("--exclude: {b}"));
        }
    }
    if let Some(s) = &opts.stats
        && s != "stderr"
        && (!s.starts_with('/') || s.ends_with('/'))
    {
        return Err(format!("--stats {s:?}: expected an absolute file path"));
    }
    let stats = opts
        .stats
        .clone()
        .or_else(|| opts.stats_format.map(|_| "stderr".to_string()));
    let log = match opts.verbose {
        0 => None,
        1 => Some("info".to_string()),
        _ => Some("debug".to_string()),
    };
    let mut out = Vec::new();
    for v in config::VARIABLES {
        let value = match v.name {
            "DROPBEHIND_WINDOW" => opts.window.map(|w| w.to_string()),
            "DROPBEHIND_READAHEAD" => opts.readahead.map(|r| r.to_string()),
            "DROPBEHIND_MIN_SIZE" => opts.min_size.map(|m| m.to_string()),
            "DROPBEHIND_BACKEND" => opts.backend.map(|b| b.name().to_string()),
            "DROPBEHIND_EXCLUDE" => opts.exclude.clone(),
            "DROPBEHIND_STATS" => stats.clone(),
            "DROPBEHIND_STATS_FORMAT" => opts.stats_format.map(|f| f.name().to_string()),
            "DROPBEHIND_LOG" => log.clone(),
            _ => None,
        };
        if let Some(value) = value {
            out.push((v.name, value));
        }
    }
    Ok(out)
}

/// What the outside watcher is told of the launcher's options.
pub fn watch_options(opts: &PreloadOpts, watch_all: bool) -> crate::watch::Options {
    crate::watch::Options {
        verbose: opts.verbose > 0,
        stats: opts.stats.clone(),
        watch_all,
        window: opts.window.unwrap_or(crate::watch::MIN_WINDOW),
        min_size: opts.min_size.unwrap_or(config::DEFAULT_MIN_SIZE),
        lib_names: preloaded_names(),
    }
}

pub fn run(cli: &crate::args::Cli) -> ExitCode {
    let (opts, command) = (&cli.preload, &cli.command);
    let Some((program, args)) = command.split_first() else {
        return fail(
            2,
            "no command given; usage: dropbehind [OPTIONS] -- COMMAND [ARGS]...",
        );
    };
    let vars = match settings(opts) {
        Ok(v) => v,
        Err(e) => return fail(2, e),
    };
    let lib = match find_library() {
        Ok(l) => l,
        Err(looked) => return fail(2, not_found(&looked)),
    };
    let Some(path) = resolve_command(program) else {
        return fail(
            127,
            format!("{}: command not found", program.to_string_lossy()),
        );
    };
    if opts.verbose > 0 && !cli.no_watch {
        let kind = crate::watch::binary::kind(&path);
        if !kind.reachable_by_preload() {
            eprintln!(
                "dropbehind: {}: {}: watched from outside",
                path.display(),
                kind.describe()
            );
        }
    }
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
    cmd.envs(vars.iter().cloned());
    if !cli.no_watch {
        // The launcher outlives the program here: reports asked for on stderr are gathered
        // in a file and printed when it ends (see `Reports`).
        let reports = vars
            .iter()
            .any(|(n, v)| *n == "DROPBEHIND_STATS" && v == "stderr")
            .then(crate::reports::Reports::create)
            .flatten();
        if let Some(r) = &reports {
            cmd.env("DROPBEHIND_STATS", &r.file);
        }
        return crate::watch::launch(
            cmd,
            &program.to_string_lossy(),
            &watch_options(opts, cli.watch),
            reports,
        );
    }
    let err = cmd.exec();
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    fail(code, format!("{}: {err}", program.to_string_lossy()))
}

pub fn not_found(looked: &str) -> String {
    format!(
        "{LIB_NAME} (with {ENGINE_NAME} beside it) not found (looked in {looked}); set DROPBEHIND_LIB"
    )
}

/// The Debian multiarch triplet of this build (the directory under /usr/lib the package
/// installs the library in).
pub fn multiarch() -> &'static str {
    if cfg!(target_arch = "x86_64") {
        "x86_64-linux-gnu"
    } else if cfg!(target_arch = "aarch64") {
        "aarch64-linux-gnu"
    } else if cfg!(target_arch = "x86") {
        "i386-linux-gnu"
    } else if cfg!(all(target_arch = "powerpc64", target_endian = "little")) {
        "powerpc64le-linux-gnu"
    } else if cfg!(target_arch = "riscv64") {
        "riscv64-linux-gnu"
    } else if cfg!(target_arch = "s390x") {
        "s390x-linux-gnu"
    } else if cfg!(target_arch = "arm") {
        "arm-linux-gnueabihf"
    } else {
        std::env::consts::ARCH
    }
}

/// The file names the watcher tells the preload library by in a process's maps and
/// LD_PRELOAD: the installed name and the one the launcher preloads (DROPBEHIND_LIB may
/// name another file; taken only for `libdropbehind.so`, such processes were watched from
/// outside too).
fn preloaded_names() -> Vec<String> {
    let mut names = vec![LIB_NAME.to_string()];
    if let Some(name) = find_library()
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        && name != LIB_NAME
    {
        names.push(name);
    }
    names
}

/// DROPBEHIND_LIB, else beside the launcher, else ../lib or ../lib/<multiarch> of the
/// launcher's own path. The error lists where it looked.
pub fn find_library() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("DROPBEHIND_LIB") {
        let p = PathBuf::from(p);
        return if usable(&p) {
            Ok(absolute(&p))
        } else {
            Err(format!("DROPBEHIND_LIB={}", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        dir.join(LIB_NAME),
        dir.join("../lib").join(LIB_NAME),
        dir.join("../lib").join(multiarch()).join(LIB_NAME),
    ];
    candidates
        .iter()
        .find(|p| usable(p))
        .map(|p| absolute(p))
        .ok_or_else(|| {
            candidates
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
}

/// A library file, and if it is the front, its engine beside it: without the engine the
/// front would run every program untouched, saying nothing.
fn usable(p: &Path) -> bool {
    p.is_file()
        && (p.file_name().is_none_or(|n| n != LIB_NAME) || p.with_file_name(ENGINE_NAME).is_file())
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
    crate::watch::binary::elf_is_static(&head)
        .filter(|&s| s)
        .map(|_| "it is statically linked".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_become_variables_in_table_order() {
        let opts = PreloadOpts {
            window: Some(16 << 20),
            stats_format: Some(config::StatsFormat::Json),
            verbose: 2,
            ..Default::default()
        };
        let vars = settings(&opts).unwrap();
        assert_eq!(
            vars,
            vec![
                ("DROPBEHIND_WINDOW", "16777216".to_string()),
                ("DROPBEHIND_LOG", "debug".to_string()),
                ("DROPBEHIND_STATS", "stderr".to_string()),
                ("DROPBEHIND_STATS_FORMAT", "json".to_string()),
            ]
        );
        let bad = PreloadOpts {
            stats: Some("report.txt".into()),
            ..Default::default()
        };
        assert!(settings(&bad).unwrap_err().contains("--stats"));
    }
}
