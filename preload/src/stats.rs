//! Counters for the opt-in exit report (DROPBEHIND_STATS). Relaxed atomics: a counter bump
//! is the only cost on the hot path.

use crate::config::{Config, StatsFormat, StatsSink, format_size};
use crate::sys;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub struct Counter(AtomicU64);

impl Counter {
    const fn new() -> Counter {
        Counter(AtomicU64::new(0))
    }
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.fetch_add(n, Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
    fn reset(&self) {
        self.0.store(0, Relaxed)
    }
}

pub static FILES_TRACKED: Counter = Counter::new();
pub static FILES_EXCLUDED: Counter = Counter::new();
pub static READ_STREAMS: Counter = Counter::new();
pub static WRITE_STREAMS: Counter = Counter::new();
pub static READ_DONTCACHE: Counter = Counter::new();
pub static READ_FADVISE: Counter = Counter::new();
/// Read the ordinary way by sequential streams on files whose residency is unknowable:
/// left cached. Reads that would not end on a folio's end uncached
/// (`policy::uncached_read_fits`), the fadvise backend, a filesystem without
/// RWF_DONTCACHE, stdio.
pub static READ_LEFT_CACHED: Counter = Counter::new();
pub static WRITTEN_MANAGED: Counter = Counter::new();
pub static DROP_CALLS: Counter = Counter::new();
pub static PAGES_RELEASED: Counter = Counter::new();
pub static WRITEBACK_WINDOWS: Counter = Counter::new();
pub static SETTLE_TIMEOUTS: Counter = Counter::new();
pub static SNAPSHOTS: Counter = Counter::new();
pub static COPY_CLAMPS: Counter = Counter::new();
pub static PREFETCHED: Counter = Counter::new();
pub static PREFETCH_BATCHES: Counter = Counter::new();
pub static PREFETCH_DROPPED: Counter = Counter::new();
/// Sequential streams given the kernel's doubled readahead (`engine::read`).
pub static READAHEAD_DEEPENED: Counter = Counter::new();
pub static MAPS_TRACKED: Counter = Counter::new();
pub static MAPS_SEQUENTIAL: Counter = Counter::new();
pub static MAPS_RANDOM: Counter = Counter::new();
/// Small files of a tree the process streamed, dropped at close (or after it showed bulk
/// I/O); the bytes; how many of them were written first (written back, then dropped).
pub static TREE_FILES: Counter = Counter::new();
pub static TREE_BYTES: Counter = Counter::new();
pub static TREE_WRITTEN: Counter = Counter::new();

const ALL: &[&Counter] = &[
    &FILES_TRACKED,
    &FILES_EXCLUDED,
    &READ_STREAMS,
    &WRITE_STREAMS,
    &READ_DONTCACHE,
    &READ_FADVISE,
    &READ_LEFT_CACHED,
    &WRITTEN_MANAGED,
    &DROP_CALLS,
    &PAGES_RELEASED,
    &WRITEBACK_WINDOWS,
    &SETTLE_TIMEOUTS,
    &SNAPSHOTS,
    &COPY_CLAMPS,
    &PREFETCHED,
    &PREFETCH_BATCHES,
    &PREFETCH_DROPPED,
    &READAHEAD_DEEPENED,
    &MAPS_TRACKED,
    &MAPS_SEQUENTIAL,
    &MAPS_RANDOM,
    &TREE_FILES,
    &TREE_BYTES,
    &TREE_WRITTEN,
];

/// Where a sequential stream's bytes are counted: read uncached, dropped behind, or, on a
/// file whose residency is unknowable read the ordinary way, left cached.
pub fn sequential_read(uncached: bool, unprovable: bool) -> &'static Counter {
    match (uncached, unprovable) {
        (true, _) => &READ_DONTCACHE,
        (false, true) => &READ_LEFT_CACHED,
        (false, false) => &READ_FADVISE,
    }
}

/// A forked child reports its own work only.
pub fn reset_all() {
    ALL.iter().for_each(|c| c.reset());
}

/// The report, or `None` when this process did nothing worth reporting.
pub fn report(pid: i32, comm: &str, format: StatsFormat) -> Option<String> {
    use std::sync::atomic::Ordering::Relaxed as R;
    let (dirs, warm, inodes) = (
        crate::dirprefetch::DIRS_PREFETCHED.load(R),
        crate::dirprefetch::DIRS_WARM.load(R),
        crate::dirprefetch::INODES_WARMED.load(R),
    );
    if FILES_TRACKED.get() + MAPS_TRACKED.get() + TREE_FILES.get() == 0 && dirs + warm == 0 {
        return None;
    }
    let sz = |c: &Counter| format_size(c.get());
    let released = PAGES_RELEASED.get();
    if format == StatsFormat::Json {
        return Some(json_report(
            pid,
            comm,
            [dirs as u64, inodes as u64, warm as u64],
        ));
    }
    Some(format!(
        "dropbehind: report for pid {pid} ({comm})\n\
         \x20 files tracked          {}  (excluded by DROPBEHIND_EXCLUDE: {})\n\
         \x20 streams                {} read, {} write\n\
         \x20 read uncached          {}  (RWF_DONTCACHE)\n\
         \x20 read, dropped behind   {}  (fadvise)\n\
         \x20 read, left cached      {}  (residency unknown: a file you may not write, read the ordinary way)\n\
         \x20 written, windowed      {}  ({} writeback windows, {} settle timeouts)\n\
         \x20 pages released         {}  ({}, in {} drop calls)\n\
         \x20 residency snapshots    {}\n\
         \x20 copy calls clamped     {}\n\
         \x20 prefetched             {}  ({} batches; {} skipped, queue full; {} streams given FADV_SEQUENTIAL)\n\
         \x20 file mappings          {}  ({} sequential, {} given MADV_RANDOM)\n\
         \x20 directories prefetched {}  ({} inodes; {} big directories found warm)\n\
         \x20 small files dropped    {}  ({}; {} of them written back first)\n",
        FILES_TRACKED.get(),
        FILES_EXCLUDED.get(),
        READ_STREAMS.get(),
        WRITE_STREAMS.get(),
        sz(&READ_DONTCACHE),
        sz(&READ_FADVISE),
        sz(&READ_LEFT_CACHED),
        sz(&WRITTEN_MANAGED),
        WRITEBACK_WINDOWS.get(),
        SETTLE_TIMEOUTS.get(),
        released,
        format_size(released * 4096),
        DROP_CALLS.get(),
        SNAPSHOTS.get(),
        COPY_CLAMPS.get(),
        sz(&PREFETCHED),
        PREFETCH_BATCHES.get(),
        PREFETCH_DROPPED.get(),
        READAHEAD_DEEPENED.get(),
        MAPS_TRACKED.get(),
        MAPS_SEQUENTIAL.get(),
        MAPS_RANDOM.get(),
        dirs,
        inodes,
        warm,
        TREE_FILES.get(),
        sz(&TREE_BYTES),
        TREE_WRITTEN.get(),
    ))
}

/// The report as one JSON object on one line: counts as numbers, sizes in bytes.
fn json_report(pid: i32, comm: &str, [dirs, inodes, warm]: [u64; 3]) -> String {
    let mut name = String::new();
    for c in comm.chars() {
        match c {
            '"' | '\\' => {
                name.push('\\');
                name.push(c);
            }
            c if (c as u32) < 0x20 => name += &format!("\\u{:04x}", c as u32),
            c => name.push(c),
        }
    }
    let fields: [(&str, u64); 25] = [
        ("files_tracked", FILES_TRACKED.get()),
        ("files_excluded", FILES_EXCLUDED.get()),
        ("read_streams", READ_STREAMS.get()),
        ("write_streams", WRITE_STREAMS.get()),
        ("read_uncached_bytes", READ_DONTCACHE.get()),
        ("read_dropped_behind_bytes", READ_FADVISE.get()),
        ("read_left_cached_bytes", READ_LEFT_CACHED.get()),
        ("written_windowed_bytes", WRITTEN_MANAGED.get()),
        ("writeback_windows", WRITEBACK_WINDOWS.get()),
        ("settle_timeouts", SETTLE_TIMEOUTS.get()),
        ("pages_released", PAGES_RELEASED.get()),
        ("bytes_released", PAGES_RELEASED.get() * 4096),
        ("drop_calls", DROP_CALLS.get()),
        ("residency_snapshots", SNAPSHOTS.get()),
        ("copy_calls_clamped", COPY_CLAMPS.get()),
        ("prefetched_bytes", PREFETCHED.get()),
        ("prefetch_batches", PREFETCH_BATCHES.get()),
        ("prefetch_skipped", PREFETCH_DROPPED.get()),
        ("readahead_deepened", READAHEAD_DEEPENED.get()),
        ("file_mappings", MAPS_TRACKED.get()),
        ("mappings_sequential", MAPS_SEQUENTIAL.get()),
        ("mappings_random", MAPS_RANDOM.get()),
        ("directories_prefetched", dirs),
        ("inodes_prefetched", inodes),
        ("directories_warm", warm),
    ];
    let mut out = format!("{{\"dropbehind\":\"report\",\"pid\":{pid},\"comm\":\"{name}\"");
    for (key, value) in fields {
        out += &format!(",\"{key}\":{value}");
    }
    out + "}\n"
}

/// Writes the report where the user asked: stderr, or appended to a file.
pub fn emit(cfg: &Config) {
    let mut comm = [0u8; 32];
    let Some(text) = report(
        sys::proc::pid(),
        sys::proc::comm(&mut comm),
        cfg.stats_format,
    ) else {
        return;
    };
    match &cfg.stats {
        StatsSink::Off => {}
        StatsSink::Stderr => sys::file::write_all(2, text.as_bytes()),
        StatsSink::File(path) => {
            if let Ok(path) = std::ffi::CString::new(path.as_str()) {
                let _ = sys::file::append_to(&path, text.as_bytes());
            }
        }
        StatsSink::Gathered(path) => {
            let Ok(path) = std::ffi::CString::new(path.as_str()) else {
                return;
            };
            // The launcher's directory is 0700: a process that changed user since may not
            // write there, and writes where `--stats` without the launcher's file would
            // (`--no-watch`). A missing directory (the launcher is gone) writes nothing.
            if let Err(sys::Errno(libc::EACCES | libc::EPERM)) =
                sys::file::append_to(&path, text.as_bytes())
            {
                sys::file::write_all(2, text.as_bytes());
            }
        }
    }
}
