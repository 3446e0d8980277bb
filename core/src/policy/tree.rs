//! Trees of small files as one stream. A backup, a copy or a checksum run walks a directory
//! of many files, most of them below the size that makes a stream of their own; together
//! they are one streaming job. Per process, this decides what happens to a small file the
//! process streamed whole, as it is closed:
//!
//! - read: the file had no page cached when the process first read it (one cachestat of
//!   the whole file proves it) and was read to its end: what is cached of it now, the
//!   process brought in;
//! - written: the file was empty when the process first wrote it (created or truncated),
//!   so every page of it is the process's own.
//!
//! Such files are dropped (read) or written back and dropped once clean (written) only
//! once the process has shown bulk I/O: `bulk_bytes` of such files, or `bulk_files` of
//! them. Until then they are remembered, a bounded number, and handled when it shows. A
//! process that opens again a file it streamed (it reads its input twice) stops for good:
//! what it reads again it wants cached. A process that reads cached files (a build
//! reading headers, an interpreter importing modules) never starts: those are never
//! candidates, and after `quiet_checks` residency checks that found nothing cold, only one
//! file in `sample_every` is checked at all.

/// When a process counts as streaming a tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TreeParams {
    pub bulk_bytes: u64,
    pub bulk_files: u32,
    /// Residency checks that may find nothing cold before checks are sampled.
    pub quiet_checks: u32,
    pub sample_every: u32,
}

impl TreeParams {
    pub const DEFAULT: TreeParams = TreeParams {
        bulk_bytes: 2 * crate::units::MIB,
        bulk_files: 8,
        quiet_checks: 64,
        sample_every: 64,
    };
}

/// Where a process stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Bulk {
    /// Not shown yet: files are remembered.
    #[default]
    Unproven,
    /// Shown: files are handled as they close.
    Streaming,
    /// The process re-opened a file it had streamed: nothing more is dropped.
    Rereading,
}

/// What a small file streamed whole was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Streamed {
    Read,
    Written,
}

/// What to do with a small file the process streamed whole, as it closes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtClose {
    /// Drop (read) or start writeback and drop once clean (written), now.
    Handle,
    /// Keep a handle on it: the process may show bulk I/O later.
    Remember,
    /// Nothing.
    Leave,
}

/// One process's tree stream.
#[derive(Clone, Copy, Debug, Default)]
pub struct TreeStream {
    pub bulk: Bulk,
    bytes: u64,
    files: u32,
    /// Residency checks so far, and whether any found a cold file.
    checks: u32,
    found_cold: bool,
    skipped: u32,
}

impl TreeStream {
    pub const fn new() -> TreeStream {
        TreeStream {
            bulk: Bulk::Unproven,
            bytes: 0,
            files: 0,
            checks: 0,
            found_cold: false,
            skipped: 0,
        }
    }

    /// A small file is read for the first time: whether to ask if it is cached at all.
    pub fn check_residency(&mut self, p: &TreeParams) -> bool {
        if self.bulk == Bulk::Rereading {
            return false;
        }
        if self.found_cold || self.checks < p.quiet_checks {
            self.checks += 1;
            return true;
        }
        self.skipped += 1;
        if self.skipped >= p.sample_every {
            self.skipped = 0;
            self.checks += 1;
            return true;
        }
        false
    }

    /// A file is read for the first time, before anyone knows whether it is small: when
    /// `check_residency` would not check the next small file anyway, that is counted as done
    /// and the answer is yes, so the caller need not even find out the file's size. When it
    /// would check, nothing changes: the caller asks `check_residency` once it knows.
    pub fn skips_next(&mut self, p: &TreeParams) -> bool {
        if self.bulk == Bulk::Rereading {
            return true;
        }
        if self.found_cold || self.checks < p.quiet_checks || self.skipped + 1 >= p.sample_every {
            return false;
        }
        self.skipped += 1;
        true
    }

    /// The residency check found the file entirely uncached.
    pub fn found_cold(&mut self) {
        self.found_cold = true;
    }

    /// Bytes the process brought in or wrote as a stream of its own elsewhere (a big
    /// file's proven drops, say): evidence of bulk I/O too.
    pub fn evidence(&mut self, bytes: u64, p: &TreeParams) -> bool {
        self.count(bytes, 0, p)
    }

    /// A file it streamed was opened again: it stops, for good.
    pub fn reread(&mut self) {
        self.bulk = Bulk::Rereading;
    }

    /// A small file of `bytes` streamed whole is closing. `Remember` asks the caller to keep
    /// it until `showed_bulk` says the process streams; if the caller can't (no room), the
    /// file is simply left.
    pub fn closed(&mut self, bytes: u64, p: &TreeParams) -> AtClose {
        match self.bulk {
            Bulk::Streaming => AtClose::Handle,
            Bulk::Rereading => AtClose::Leave,
            Bulk::Unproven => {
                if self.count(bytes, 1, p) {
                    AtClose::Handle
                } else {
                    AtClose::Remember
                }
            }
        }
    }

    /// Counts toward bulk. True when the process streams now: whatever was remembered is
    /// handled too (the caller asks `bulk` to see whether it just changed).
    fn count(&mut self, bytes: u64, files: u32, p: &TreeParams) -> bool {
        if self.bulk != Bulk::Unproven {
            return self.bulk == Bulk::Streaming;
        }
        self.bytes = self.bytes.saturating_add(bytes);
        self.files = self.files.saturating_add(files);
        if self.bytes >= p.bulk_bytes || self.files >= p.bulk_files {
            self.bulk = Bulk::Streaming;
        }
        self.bulk == Bulk::Streaming
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{KIB, MIB};

    const P: TreeParams = TreeParams::DEFAULT;

    #[test]
    fn a_tree_of_small_files_becomes_a_stream() {
        let mut t = TreeStream::new();
        let mut remembered = 0;
        let mut handled = 0;
        for _ in 0..1000 {
            assert!(t.check_residency(&P));
            t.found_cold();
            match t.closed(8 * KIB, &P) {
                AtClose::Remember => remembered += 1,
                AtClose::Handle => handled += 1,
                AtClose::Leave => panic!("a streamed file left"),
            }
        }
        // The files before the process showed bulk I/O are few enough to remember.
        assert!(remembered < P.bulk_files as usize, "{remembered}");
        assert_eq!(remembered + handled, 1000);
        assert_eq!(t.bulk, Bulk::Streaming);
    }

    #[test]
    fn big_small_files_show_bulk_by_bytes() {
        let mut t = TreeStream::new();
        let n = (0..)
            .take_while(|_| t.closed(MIB - 1, &P) == AtClose::Remember)
            .count();
        assert!(n <= 4, "{n} files of 1 MiB remembered");
    }

    #[test]
    fn one_small_file_is_left_alone() {
        let mut t = TreeStream::new();
        assert_eq!(t.closed(64 * KIB, &P), AtClose::Remember);
        assert_eq!(t.bulk, Bulk::Unproven, "one file is no tree");
    }

    #[test]
    fn a_process_reading_its_input_twice_stops() {
        let mut t = TreeStream::new();
        for _ in 0..100 {
            t.closed(8 * KIB, &P);
        }
        t.reread();
        assert_eq!(t.closed(8 * KIB, &P), AtClose::Leave);
        assert!(!t.check_residency(&P), "not even checked any more");
    }

    #[test]
    fn a_build_reading_cached_files_is_checked_only_now_and_then() {
        let mut t = TreeStream::new();
        let checks = (0..20_000).filter(|_| t.check_residency(&P)).count();
        // The first files, then one in `sample_every`.
        assert!(checks <= P.quiet_checks as usize + 20_000 / P.sample_every as usize + 1);
        assert_eq!(t.bulk, Bulk::Unproven);
    }

    #[test]
    fn skipping_ahead_of_the_size_samples_as_checking_does() {
        // Files whose size is asked only where `skips_next` says no: the same files are
        // checked as when every one asks `check_residency`.
        let (mut a, mut b) = (TreeStream::new(), TreeStream::new());
        for i in 0..5000 {
            let checked_a = a.check_residency(&P);
            let checked_b = !b.skips_next(&P) && b.check_residency(&P);
            assert_eq!(checked_a, checked_b, "file {i}");
        }
        // And once a cold file was found, nothing is skipped.
        b.found_cold();
        assert!(!b.skips_next(&P));
        let mut r = TreeStream::new();
        r.reread();
        assert!(r.skips_next(&P), "a rereading process checks nothing");
    }

    #[test]
    fn a_big_stream_elsewhere_is_evidence() {
        let mut t = TreeStream::new();
        assert!(t.evidence(64 * MIB, &P));
        assert_eq!(t.closed(8 * KIB, &P), AtClose::Handle);
    }
}
