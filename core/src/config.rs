//! Configuration from the environment: parsing and validation only.
//!
//! Pure code, shared by the preload library (which warns and falls back to the default) and
//! the launcher (which refuses a bad value with exit 2). Every variable is described once, in
//! `VARIABLES`, so the warning, the launcher's error and `--help` say the same thing.

use std::fmt;

pub use crate::units::{GIB, KIB, MIB, format_size, parse_size};

/// Which mechanism drops a read stream's pages behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// fadvise where residency can be proven (cachestat permitted), else RWF_DONTCACHE
    /// where the filesystem supports it and the stream's reads end on a folio's end
    /// (`policy::uncached_read_fits`); other reads are left cached.
    Auto,
    /// RWF_DONTCACHE only, for reads of every size (streams on filesystems without it are
    /// left alone).
    DontCache,
    /// posix_fadvise(DONTNEED) on ranges proven to have been brought in by the stream.
    Fadvise,
    /// Track nothing, change nothing.
    Off,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Auto => "auto",
            Backend::DontCache => "dontcache",
            Backend::Fadvise => "fadvise",
            Backend::Off => "off",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Off = 0,
    Error = 1,
    Warn = 2,
    Info = 3,
    Debug = 4,
}

/// Where the exit report goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatsSink {
    Off,
    Stderr,
    /// Appended to a file the user named.
    File(String),
    /// Appended to the file the launcher gathers `--stats` reports in (`GATHERED_DIR_PREFIX`,
    /// `GATHERED_FILE`): the user asked for stderr, so a process that may not write there
    /// (it changed user since) writes on its own stderr instead.
    Gathered(String),
}

/// The launcher's directory for `--stats` reports (in $TMPDIR) begins with this, and the
/// reports go to `GATHERED_FILE` in it.
pub const GATHERED_DIR_PREFIX: &str = "dropbehind-reports-";
pub const GATHERED_FILE: &str = "report";

/// How the exit report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatsFormat {
    /// Lines for people.
    Text,
    /// One JSON object per process, on one line.
    Json,
}

impl StatsFormat {
    pub fn name(self) -> &'static str {
        match self {
            StatsFormat::Text => "text",
            StatsFormat::Json => "json",
        }
    }
}

/// Directory inode prefetch settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirConfig {
    pub enabled: bool,
    /// Directories with fewer entries than this (estimated from their size) are left alone.
    pub min_entries: u64,
    pub threads: usize,
    /// No DROPBEHIND_DIR_THREADS given: the prefetch may use fewer threads where more were
    /// measured to lose (xfs on a fast device).
    pub threads_auto: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub window: u64,
    pub min_size: u64,
    pub backend: Backend,
    pub log_level: LogLevel,
    pub log_fd: i32,
    pub stats: StatsSink,
    pub stats_format: StatsFormat,
    pub exclude: Vec<String>,
    pub dir: DirConfig,
    /// How far ahead of a sequential stream to prefetch, at most (0: off).
    pub readahead: u64,
    /// Whether file mappings get a policy (sequential scans prefetched and dropped behind,
    /// random ones spared the kernel's fault readahead).
    pub mmap: bool,
    /// Whether small files a process streams whole count as one stream (`policy::tree`).
    pub tree: bool,
}

/// Bounds of the drop-behind window. The upper bound keeps a stream's residency proof (see
/// `policy::Proof`) within its fixed-size ring.
pub const WINDOW_MIN: u64 = 64 * KIB;
pub const WINDOW_MAX: u64 = 64 * MIB;
/// Measured on a 1 GiB `cp` (copy_file_range, ext4, read_ahead_kb 8192): peak memory-cgroup
/// usage 47 MiB at 2M, 51 at 4M, 64 at 8M, 91 at 16M, wall time within noise. Most of it is
/// kernel readahead in flight (`cat` alone: 43, 19 and 8 MiB at read_ahead_kb 8192, 2048
/// and 128), which no window size changes.
pub const DEFAULT_WINDOW: u64 = 2 * MIB;
pub const DEFAULT_MIN_SIZE: u64 = MIB;
/// Directory prefetch: below this many entries a cold `ls -l` is quick anyway.
pub const DEFAULT_DIR_MIN: u64 = 4096;
/// About a disk's queue depth: 4 threads gave 50-70% of the gain, 32-64 nothing more.
pub const DEFAULT_DIR_THREADS: usize = 16;
/// Prefetch reach: the slow-disk fixture (2 ms per request, 16 connections) reads a cold
/// 1 GiB file in 3.8 s with 8 MiB of kernel readahead and 12-13 s with 128 KiB. The upper
/// bound keeps prefetched pages inside a stream's residency proof (window + 32 MiB ahead).
pub const DEFAULT_READAHEAD: u64 = 16 * MIB;
pub const READAHEAD_MIN: u64 = 256 * KIB;
pub const READAHEAD_MAX: u64 = 32 * MIB;

impl Default for Config {
    fn default() -> Self {
        Config {
            window: DEFAULT_WINDOW,
            min_size: DEFAULT_MIN_SIZE,
            backend: Backend::Auto,
            log_level: LogLevel::Off,
            log_fd: 2,
            stats: StatsSink::Off,
            stats_format: StatsFormat::Text,
            exclude: Vec::new(),
            dir: DirConfig {
                enabled: true,
                min_entries: DEFAULT_DIR_MIN,
                threads: DEFAULT_DIR_THREADS,
                threads_auto: true,
            },
            readahead: DEFAULT_READAHEAD,
            mmap: true,
            tree: true,
        }
    }
}

/// One environment variable: its name, what it accepts and its default (for warnings,
/// the launcher's errors and its help), and how a value is applied. The only place a
/// variable is named.
pub struct Variable {
    pub name: &'static str,
    pub accepts: &'static str,
    pub default: &'static str,
    /// Applies a value to the configuration; false when the value is not accepted.
    apply: fn(&mut Config, &str) -> bool,
}

pub static VARIABLES: &[Variable] = &[
    Variable {
        name: "DROPBEHIND_WINDOW",
        accepts: "a size from 64K to 64M, e.g. 2M (rounded up to a multiple of 2M)",
        default: "2M",
        apply: |c, v| set_size(&mut c.window, v, WINDOW_MIN..=WINDOW_MAX),
    },
    Variable {
        name: "DROPBEHIND_MIN_SIZE",
        accepts: "a size (e.g. 0, 512K, 1M); files smaller than this are left alone",
        default: "1M",
        apply: |c, v| set_size(&mut c.min_size, v, 0..=u64::MAX),
    },
    Variable {
        name: "DROPBEHIND_BACKEND",
        accepts: "one of auto, dontcache, fadvise, off",
        default: "auto",
        apply: |c, v| parse_backend(v).map(|b| c.backend = b).is_some(),
    },
    Variable {
        name: "DROPBEHIND_LOG",
        accepts: "one of off, error, warn, info, debug (or 0-4)",
        default: "off",
        apply: |c, v| parse_log_level(v).map(|l| c.log_level = l).is_some(),
    },
    Variable {
        name: "DROPBEHIND_LOG_FD",
        accepts: "a file descriptor number from 0 to 65535",
        default: "2",
        apply: |c, v| set_number(&mut c.log_fd, v, 0..=65535),
    },
    Variable {
        name: "DROPBEHIND_STATS",
        accepts: "0 or 1, stderr, or an absolute file path for the exit report",
        default: "0",
        apply: |c, v| parse_stats(v).map(|s| c.stats = s).is_some(),
    },
    Variable {
        name: "DROPBEHIND_STATS_FORMAT",
        accepts: "text or json (the exit report as one JSON object per process, on one line)",
        default: "text",
        apply: |c, v| parse_stats_format(v).map(|f| c.stats_format = f).is_some(),
    },
    Variable {
        name: "DROPBEHIND_DIR",
        accepts: "on or off (directory inode prefetch)",
        default: "on",
        apply: |c, v| parse_switch(v).map(|on| c.dir.enabled = on).is_some(),
    },
    Variable {
        name: "DROPBEHIND_DIR_MIN",
        accepts: "a number of entries from 0 to 100000000",
        default: "4096",
        apply: |c, v| set_number(&mut c.dir.min_entries, v, 0..=100_000_000),
    },
    Variable {
        name: "DROPBEHIND_DIR_THREADS",
        accepts: "a number of threads from 1 to 64",
        default: "16; 2 for xfs on a fast device",
        apply: |c, v| {
            let ok = set_number(&mut c.dir.threads, v, 1..=64);
            c.dir.threads_auto &= !ok;
            ok
        },
    },
    Variable {
        name: "DROPBEHIND_READAHEAD",
        accepts: "0 or off, or a size from 256K to 32M (prefetch reach ahead of sequential reads)",
        default: "16M",
        apply: |c, v| match v.trim().to_ascii_lowercase().as_str() {
            "off" | "0" => {
                c.readahead = 0;
                true
            }
            _ => set_size(&mut c.readahead, v, READAHEAD_MIN..=READAHEAD_MAX),
        },
    },
    Variable {
        name: "DROPBEHIND_MMAP",
        accepts: "on or off (policy for file mappings)",
        default: "on",
        apply: |c, v| parse_switch(v).map(|on| c.mmap = on).is_some(),
    },
    Variable {
        name: "DROPBEHIND_TREE",
        accepts: "on or off (small files a process streams whole, as one stream)",
        default: "on",
        apply: |c, v| parse_switch(v).map(|on| c.tree = on).is_some(),
    },
    Variable {
        name: "DROPBEHIND_EXCLUDE",
        accepts: "colon-separated absolute path globs, e.g. /var/lib/mysql/*:*.db",
        default: "(empty)",
        apply: |c, v| parse_exclude(v).map(|e| c.exclude = e).is_some(),
    },
];

/// Sets `*field` to the size `v` when it lies in `range`.
fn set_size(field: &mut u64, v: &str, range: std::ops::RangeInclusive<u64>) -> bool {
    match parse_size(v) {
        Some(n) if range.contains(&n) => {
            *field = n;
            true
        }
        _ => false,
    }
}

/// Sets `*field` to the number `v` when it lies in `range`.
fn set_number<T: std::str::FromStr + PartialOrd>(
    field: &mut T,
    v: &str,
    range: std::ops::RangeInclusive<T>,
) -> bool {
    match v.trim().parse::<T>() {
        Ok(n) if range.contains(&n) => {
            *field = n;
            true
        }
        _ => false,
    }
}

pub fn variable(name: &str) -> &'static Variable {
    VARIABLES
        .iter()
        .find(|v| v.name == name)
        .expect("known variable")
}

/// A value the user gave that we can't use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadValue {
    pub name: &'static str,
    pub value: String,
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = variable(self.name);
        write!(
            f,
            "{}={:?} is not valid: it accepts {}",
            self.name, self.value, v.accepts
        )
    }
}

pub fn parse_backend(s: &str) -> Option<Backend> {
    match s.trim().to_ascii_lowercase().as_str() {
        "auto" => Some(Backend::Auto),
        "dontcache" => Some(Backend::DontCache),
        "fadvise" => Some(Backend::Fadvise),
        "off" => Some(Backend::Off),
        _ => None,
    }
}

pub fn parse_log_level(s: &str) -> Option<LogLevel> {
    match s.trim().to_ascii_lowercase().as_str() {
        "off" | "0" | "" => Some(LogLevel::Off),
        "error" | "1" => Some(LogLevel::Error),
        "warn" | "warning" | "2" => Some(LogLevel::Warn),
        "info" | "3" => Some(LogLevel::Info),
        "debug" | "4" => Some(LogLevel::Debug),
        _ => None,
    }
}

fn parse_stats(s: &str) -> Option<StatsSink> {
    match s.trim() {
        "" | "0" | "off" | "no" => Some(StatsSink::Off),
        "1" | "on" | "yes" | "stderr" => Some(StatsSink::Stderr),
        p if p.starts_with('/') && !p.ends_with('/') => {
            let gathered = p
                .strip_suffix(GATHERED_FILE)
                .and_then(|dir| dir.strip_suffix('/'))
                .and_then(|dir| dir.rsplit('/').next())
                .is_some_and(|name| name.starts_with(GATHERED_DIR_PREFIX));
            Some(if gathered {
                StatsSink::Gathered(p.to_string())
            } else {
                StatsSink::File(p.to_string())
            })
        }
        _ => None,
    }
}

pub fn parse_stats_format(s: &str) -> Option<StatsFormat> {
    match s.trim().to_ascii_lowercase().as_str() {
        "text" => Some(StatsFormat::Text),
        "json" => Some(StatsFormat::Json),
        _ => None,
    }
}

fn parse_switch(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "yes" => Some(true),
        "off" | "0" | "no" => Some(false),
        _ => None,
    }
}

fn parse_exclude(s: &str) -> Option<Vec<String>> {
    let globs: Vec<String> = s
        .split(':')
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect();
    // Patterns are matched against absolute paths; a relative one can never match.
    if globs
        .iter()
        .all(|g| g.starts_with('/') || g.starts_with('*'))
    {
        Some(globs)
    } else {
        None
    }
}

/// Builds a configuration from `lookup(name)`. Every bad value is reported in the returned
/// list and replaced by its default; parsing itself never fails.
pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> (Config, Vec<BadValue>) {
    let mut cfg = Config::default();
    let mut bad = Vec::new();
    for v in VARIABLES {
        if let Some(value) = lookup(v.name)
            && !(v.apply)(&mut cfg, &value)
        {
            bad.push(BadValue {
                name: v.name,
                value,
            });
        }
    }
    (cfg, bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> (Config, Vec<BadValue>) {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_lookup(|name| {
            owned
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("8m"), Some(8 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("16MiB"), Some(16 << 20));
        for bad in [
            "",
            "K",
            "-1",
            "1.5M",
            "8X",
            "99999999999999999999",
            "18014398509481984K",
        ] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn defaults_without_environment() {
        let (c, bad) = cfg(&[]);
        assert_eq!(c, Config::default());
        assert!(bad.is_empty());
    }

    #[test]
    fn good_values_are_taken() {
        let (c, bad) = cfg(&[
            ("DROPBEHIND_WINDOW", "16M"),
            ("DROPBEHIND_BACKEND", "fadvise"),
            ("DROPBEHIND_STATS", "/tmp/s.txt"),
            ("DROPBEHIND_EXCLUDE", "/var/lib/mysql/*::*.db"),
            ("DROPBEHIND_LOG", "debug"),
            ("DROPBEHIND_READAHEAD", "4M"),
            ("DROPBEHIND_MMAP", "off"),
            ("DROPBEHIND_STATS_FORMAT", "json"),
        ]);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(c.stats_format, StatsFormat::Json);
        assert_eq!(c.readahead, 4 << 20);
        assert!(!c.mmap);
        assert_eq!(cfg(&[("DROPBEHIND_READAHEAD", "off")]).0.readahead, 0);
        assert_eq!(cfg(&[("DROPBEHIND_READAHEAD", "0")]).0.readahead, 0);
        assert_eq!(c.window, 16 << 20);
        assert_eq!(c.backend, Backend::Fadvise);
        assert_eq!(c.stats, StatsSink::File("/tmp/s.txt".into()));
        let gathered = "/tmp/dropbehind-reports-7-0000002a/report";
        assert_eq!(
            cfg(&[("DROPBEHIND_STATS", gathered)]).0.stats,
            StatsSink::Gathered(gathered.into())
        );
        assert_eq!(
            cfg(&[("DROPBEHIND_STATS", "/tmp/report")]).0.stats,
            StatsSink::File("/tmp/report".into())
        );
        assert_eq!(
            c.exclude,
            vec!["/var/lib/mysql/*".to_string(), "*.db".to_string()]
        );
        assert_eq!(c.log_level, LogLevel::Debug);
    }

    #[test]
    fn bad_values_fall_back_and_are_named() {
        let garbage = [
            "",
            "garbage",
            "-5",
            "1e9",
            "99999999999999999999999",
            "1K",
            "1T",
        ];
        for g in garbage {
            let (c, bad) = cfg(&[("DROPBEHIND_WINDOW", g)]);
            assert_eq!(c.window, DEFAULT_WINDOW, "{g}");
            assert_eq!(bad.len(), 1, "{g}");
            assert!(bad[0].to_string().contains("DROPBEHIND_WINDOW"));
            assert!(bad[0].to_string().contains("64K to 64M"));
        }
        let (c, bad) = cfg(&[
            ("DROPBEHIND_BACKEND", "fast"),
            ("DROPBEHIND_LOG_FD", "-1"),
            ("DROPBEHIND_STATS", "relative/path"),
            ("DROPBEHIND_EXCLUDE", "relative/*"),
            ("DROPBEHIND_MIN_SIZE", "lots"),
            ("DROPBEHIND_READAHEAD", "64M"),
            ("DROPBEHIND_MMAP", "sometimes"),
            ("DROPBEHIND_STATS_FORMAT", "xml"),
        ]);
        assert_eq!(bad.len(), 8);
        assert_eq!(c, Config::default());
    }

    #[test]
    fn format_sizes() {
        assert_eq!(format_size(8 << 20), "8M");
        assert_eq!(format_size(1536 << 20), "1.5G");
        assert_eq!(format_size(100), "100");
    }
}
