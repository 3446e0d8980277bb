//! The watcher's counters, per watched process, and its `--stats` report.

use dropbehind_core::config::format_size;

#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub files: u64,
    pub read_streams: u64,
    pub write_streams: u64,
    pub growth_files: u64,
    pub shared_files: u64,
    /// Bytes the program read before the watcher first saw the file: not provable, kept.
    pub read_before_seen: u64,
    /// Of files followed by cache growth (no position to tell what was read), the bytes
    /// cached when the watcher first saw them: cached before the run, or read before it
    /// looked; not provable either way, kept.
    pub cached_at_sight: u64,
    pub read_followed: u64,
    pub written_followed: u64,
    pub writeback_calls: u64,
    pub drop_calls: u64,
    pub pages_released: u64,
    pub snapshots: u64,
}

pub fn report(pid: i32, comm: &str, how: &str, c: &Counters) -> String {
    format!(
        "dropbehind: watcher report for pid {pid} ({comm}, {how})\n\
         \x20 files watched          {}  ({} shared with other processes: growth not taken)\n\
         \x20 streams                {} read, {} write, {} followed by cache growth\n\
         \x20 read, followed         {}\n\
         \x20 read before first seen {}  (not provable: left cached)\n\
         \x20 cached at first sight  {}  (files followed by growth: left cached)\n\
         \x20 written, followed      {}  ({} writeback calls)\n\
         \x20 pages released         {}  ({}, in {} drop calls)\n\
         \x20 residency snapshots    {}\n",
        c.files,
        c.shared_files,
        c.read_streams,
        c.write_streams,
        c.growth_files,
        format_size(c.read_followed),
        format_size(c.read_before_seen),
        format_size(c.cached_at_sight),
        format_size(c.written_followed),
        c.writeback_calls,
        c.pages_released,
        format_size(c.pages_released * 4096),
        c.drop_calls,
        c.snapshots,
    )
}
