//! Directory inode prefetch: when a program opens a big directory whose inodes are not
//! cached, list it on our own fd, sort the entries by inode number and stat them from a few
//! threads, so that the program's own lstat/statx calls (ls -l, du, find, rsync) find the
//! inodes cached or already on their way.
//!
//! What matters, measured by a prototype on a 2 ms-per-request disk (see
//! docs/ARCHITECTURE.md, "Directory prefetch"): parallel stats (16 threads is about a device's queue
//! depth); on ext4 also listing the directory in parallel, since its readdir reads one block
//! at a time (16 fds seek to evenly spaced htree hash positions); small getdents buffers on
//! xfs; and a cheap probe, so that a warm directory costs nothing.
//!
//! The program's directory stream is never touched: readdir results and their order are
//! what they would be. Threads are created with every signal blocked, hold only fds of our
//! own (close-on-exec, moved above the program's), stop when the program closes the
//! directory, and never delay exit (they are detached).

use crate::policy::{Range, coalesce};
use crate::sys;
use crate::sys::dir::{BTRFS_SUPER_MAGIC, EXT4_SUPER_MAGIC, Entry, XFS_SUPER_MAGIC};
use crate::sys::file::OwnFd;
use std::collections::VecDeque;
use std::ffi::CString;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

pub use crate::config::DirConfig;

pub static DIRS_PREFETCHED: AtomicUsize = AtomicUsize::new(0);
pub static DIRS_WARM: AtomicUsize = AtomicUsize::new(0);
pub static INODES_WARMED: AtomicUsize = AtomicUsize::new(0);

/// In a forked child: it reports its own work only, and no worker thread came along.
pub fn reset_counters() {
    for c in [&DIRS_PREFETCHED, &DIRS_WARM, &INODES_WARMED, &WORKERS] {
        c.store(0, Ordering::Relaxed);
    }
}

/// Worker threads alive now (the map watcher counts them when it checks whether the
/// program still has threads of its own).
pub fn workers() -> usize {
    WORKERS.load(Ordering::Relaxed)
}

/// Worker threads alive in this process, across all directories.
static WORKERS: AtomicUsize = AtomicUsize::new(0);
/// btrfs's tree search was refused once in this process (root in a user namespace: capget
/// reports CAP_SYS_ADMIN, the ioctl checks the initial namespace): later jobs seek.
static BTRFS_SEARCH_REFUSED: AtomicBool = AtomicBool::new(false);
/// Set for good when the program sandboxes itself: every job stops (see `shutdown`).
static STOP: AtomicBool = AtomicBool::new(false);
const MAX_WORKERS: usize = 64;
/// Entries (sorted by inode) a worker takes at a time (but see `INODE_TABLE_RUN`).
const RUN: usize = 64;
/// ext4 on a slow device, once the rest goes in inode order: at most this many entries a
/// worker takes at a time, and at least RUN, so that every worker has a run. ext4 reads an
/// inode table 32 blocks (512 inodes) at a time, from a 32-block boundary; a run starting
/// inside such a region costs a read of its own for the blocks before it, as `du`'s own
/// inode-order stats do once per region at most. The 100k aged
/// directory holds about 87 entries per region: with runs of 64 a cold `du -s` made 2,990
/// requests (plain `du` 2,289), with runs of 512, 1024 and 2048 2,470, 2,378 and 2,332
/// (bench/results/cold-dirs.md, "ext4: runs by inode table").
const INODE_TABLE_RUN: usize = 1024;
/// Entries listed before a sorted batch is handed to the workers (xfs, btrfs): the first
/// batches are small so that stats start early, the later ones up to STREAM_BATCH.
const FIRST_BATCH: usize = 256;
const STREAM_BATCH: usize = 4096;

/// Threads (each with an fd) probing a btrfs directory's index numbers at once. Each probe is
/// a cold b-tree search (several milliseconds on the slow disk), and the listing waits for
/// them: with 4, the 100k aged directory's end took 191-320 ms to find, with 16 85-114 ms
/// (two rounds, one or two probes deep), and cold `du -s` went from 1.30 to 1.24 s, `ls -l` from
/// 1.72 to 1.66 (bench/results/cold-dirs.md, "btrfs: more probers"). They give their fds
/// back before the listers start, so they need no fds of their own.
const PROBERS: usize = 16;

/// ext4: a hole of up to this many bytes between two runs of blocks to read through the
/// device is read with them (see `read_dir_blocks`, `read_inode_tables`). The 100k aged
/// directory's 694 blocks lie in 357 extents over 5.4 MiB: with holes of up to 4 KiB read
/// they take 184 reads, up to 16 KiB 16, up to 32 KiB 6 (of at most 1 MiB each). What a
/// hole holds is read into the device's cache only: ext4 reads its own metadata there, and
/// never a file's data, which has its own cache (new metadata blocks it fills in memory,
/// without a read). ext4's own readdir of an unindexed directory does as much: it reads
/// ahead on the device from each block's place, with the file's readahead window, whatever
/// the blocks after it hold (fs/ext4/dir.c, `page_cache_sync_readahead` on `bd_mapping`).
const READ_HOLE: u64 = 32 * 1024;

/// A probe stat slower than this means the inode came from the device.
const PROBE_COLD_US: u128 = 30;

/// A cold probe stat faster than this: a fast device (local disk: 0.4-0.9 ms for an xfs
/// lookup and inode read; the 2 ms slow-disk fixture: 2.6 ms and more).
const FAST_DEVICE_US: u128 = 1500;

/// xfs on a slow device: lookups of names that are not there, spread evenly over the hash
/// space, one per this many entries (a leaf block holds a few hundred). Names spread over
/// the hash space as unevenly as the names themselves: on the less aged 100k directory
/// here the index's 272 leaves (251-504 entries each) span from 33 thousand to 1.9 billion
/// hash values, and this spread alone reaches 105 of them (see `XFS_LEAF_FINE_QUARTERS`).
const XFS_LEAF_PROBE_EVERY: u64 = 64;

/// xfs on a slow device: where a probe of the even spread read a leaf from the device, the
/// hash values since the last probe hold a leaf boundary, and maybe more leaves: the walk
/// probes them again at a finer step, and so reads every leaf (264-276 of 272, against
/// 105). The step is this many quarters of the hash space over the walk's estimate of the
/// entries (the directory's size over 40): 14,652 hash values for the 100k directory, half
/// its narrowest leaf (33 thousand: its names crowd into narrow bands, as a smaller
/// directory's of the same kind do, more thinly). A leaf narrower than the step is left to
/// the first lookup that needs it, as before. The extra probes of cached leaves cost
/// microseconds each: about 80 for each leaf read.
const XFS_LEAF_FINE_QUARTERS: u64 = 3;

/// A probe that took this long read its leaf from the device (a slow device's reads take
/// over `FAST_DEVICE_US`); one of a cached leaf takes microseconds.
const XFS_LEAF_READ_US: u128 = 1000;

/// xfs: inodes come from the device in clusters of 32 (v5: 8 KiB scaled by the inode size
/// over 256 bytes; 16 on v4 with 512-byte inodes): a group of 16 consecutive inode numbers
/// never spans two.
const XFS_CLUSTER_SHIFT: u32 = 4;

/// xfs on a slow device: the workers first stat one entry per inode cluster, so that a few
/// thousand lookups fill the device's queue with inode reads; the other entries' lookups,
/// which find their inodes' clusters cached, are left to this many of them: from all 16,
/// the lookups' handoffs of the directory's root buffer lock held them to about 35k/s.
/// None once the program has read the whole directory (du, find: see `Job::next_run`).
const XFS_REST_THREADS: usize = 1;

/// Slow devices: how long the program's directory position may stand still, short of the
/// end, before it counts as busy with what it read (see `Job::program_paused`).
const PROGRAM_PAUSE_MS: u64 = 100;

/// xfs on a fast device: its lookups serialize on a directory-buffer lock, and with reads
/// this cheap more threads only queue there (local disk, 100k aged entries, cold `ls -l`:
/// 3.57 s plain, 3.83 s with 16 threads, 3.52 with 4, 2.75 with 2).
const XFS_FAST_DEVICE_THREADS: usize = 2;

/// xfs on a slow device: while the index walk runs, the listing is split into this many
/// ranges and (inode clusters read by number) this many workers read inodes. The walk's
/// leaf reads are a chain, one at a time, and each waits its turn in the device's queue,
/// which serves about nine reads at once at its idle latency and queues the rest: with 16
/// listers and 16 readers beside it the walk took 0.8-1.1 s for 105 leaves; with 2 and 2
/// about 0.5 s, and 1.1-1.2 s for all 272; with 1 and 1 (the program's own readdir
/// readahead making up the rest of the queue) 0.76-0.83 s for all 272, the device still
/// at 4,000 reads a second (bench/results/cold-dirs.md, "every leaf").
const XFS_WALK_READERS: usize = 1;

atomic_enum! {
    /// xfs on a slow device: how the workers read each inode cluster's first entry.
    enum InodeReads in AtomicInodeReads(u8 as AtomicU8) {
        /// By a lookup (statx of its name): each waits for the directory's index buffers,
        /// which the index walk holds locked through each of its reads.
        Lookup = 0,
        /// By its inode number, with xfs's single-inode bulkstat (CAP_SYS_ADMIN): no lookup,
        /// so no directory lock, and the inode reads go on while the index walk waits
        /// (bench/results/cold-dirs.md, "bulkstat"). The program's lookups then find the
        /// clusters cached.
        Bulkstat = 1,
    }
}

/// btrfs on several threads: how the directory's index numbers are found and listed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BtrfsListing {
    /// Probes and listers each seek an fd of their own, then getdents: btrfs's lseek on a
    /// directory takes the directory's lock exclusively, so the seeks wait for every
    /// getdents and lookup in flight, the program's too (see `SeeksFirst`).
    Seeks,
    /// By tree search of the directory's index items (`sys::dir::btrfs_dir_index`,
    /// CAP_SYS_ADMIN): no seek and no directory lock, so the probes, the listers, the
    /// workers' lookups and the program's own readdir all go on at once. The 100k
    /// directory aged less on the slow disk: the end found after 90-120 ms by seeks, most
    /// of it waiting for the lock (bench/results/cold-dirs.md, "btrfs: by tree search").
    TreeSearch,
}

atomic_enum! {
    /// How the program holds a prefetched directory (one per slot of the job table, where a
    /// close, a dup or a stat looks it up by fd).
    enum Held in AtomicHeld(u32 as AtomicU32) {
        /// By its stream: the prefetch runs.
        Stream = 0,
        /// Its stream is closed, a dup of its fd is still open, and no entry but directories
        /// has been used through either yet: only directories are statted, the rest is
        /// held back (`Runs::held_back`). fts closes the stream once it has read it all;
        /// then `du` stats every entry through the dup, `rm -r` removes them, `grep -r`
        /// opens them, and `find -name` only stats and opens each subdirectory as it
        /// descends into it.
        DupOnly = 1,
        /// The program has statted, opened or removed an entry other than a directory
        /// through the stream's fd or its dup (`file_used`): the prefetch runs until it has
        /// closed both.
        FilesUsed = 2,
    }
}

/// One directory's prefetch: the listing feeds runs of inode-sorted names to the workers as
/// it goes, so that stats start while the directory is still being read (on xfs and btrfs
/// listing 100k aged entries took 0.8-1 s on the slow disk).
struct Job {
    fd: OwnFd,
    /// Whether helpers lower their priority (see `yield_cpu_to_program`). Decided in the
    /// program's opendir: the seccomp check reads /proc/thread-self/status, and that open,
    /// made from a helper thread, held the lowest free fd number for a moment (t_dir.sh
    /// saw a program's opens get [3, 5, 4] instead of [3, 4, 5]).
    nice: bool,
    /// fds of our own for the listers and probes, opened in the program's opendir: opened
    /// from a helper thread, an fd would hold the lowest free number for a moment, and a
    /// program opening a file just then would get another number than without the shim.
    spare_fds: Mutex<Vec<OwnFd>>,
    /// The filesystem's magic number (statfs f_type).
    kind: i64,
    /// ext4: the block device under the directory, read-only (see `read_dir_blocks`), and
    /// the most one readahead call reads of it (6.18: the device's largest request). Both
    /// found in the program's opendir, as `spare_fds` are opened there: the sysfs files
    /// read for them take the lowest free fd number for a moment.
    device: Option<OwnFd>,
    read_chunk: u64,
    /// Worker threads this job was given.
    threads: usize,
    cancel: AtomicBool,
    queue: Mutex<Runs>,
    ready: Condvar,
    started: Instant,
    logged_end: AtomicBool,
    /// xfs on a slow device: the workers wait until the directory is listed, and a walker
    /// reads the directory's hash index meanwhile (see `xfs_leaf_walk`).
    xfs_walk: bool,
    /// ext4 on a slow device: the workers wait until the directory is listed, unless the
    /// program stops reading first (see `Job::stats_may_start`).
    listing_first: bool,
    /// Runs of stats the workers took so far (the listing's debug line gives how many
    /// went before it ended).
    runs_taken: AtomicUsize,
    /// Workers that took on `Runs::rest`.
    rest_takers: AtomicUsize,
    /// xfs on a slow device: how each cluster's first inode is read. Bulkstat falls back to
    /// lookups for good at its first failure other than a vanished inode.
    inode_reads: AtomicInodeReads,
    /// xfs on a slow device: the index walk is over (or never ran).
    walk_done: AtomicBool,
    /// Workers that started on this job: the first XFS_WALK_READERS read while the walk runs.
    joined: AtomicUsize,
    /// The program's fd on the directory, its /proc fdinfo: the position says whether it
    /// has read the whole directory yet (see `watch_program`).
    program_pos: Option<sys::procfd::FdInfoFile>,
    /// Where the directory's offsets end (0 while unknown): a stream read to its end is at
    /// the last offset or one before it.
    offsets_end: AtomicU64,
    /// The program has read its directory stream to the end.
    program_listed: AtomicBool,
    /// The program's directory position as last read, and when it last moved (ms after
    /// `started`): see `program_paused`.
    program_at: AtomicU64,
    program_moved_ms: AtomicU64,
    /// Where the program's first batch (one getdents of 32 KiB, as glibc's readdir makes)
    /// ends: a program past it has read a second batch (see `Job::listing_done`, ext4
    /// only). The lister that starts at offset 0 reads the same batch first, with a buffer
    /// of the same size, and stores its end; until then u64::MAX (no program is past it).
    first_batch_end: AtomicU64,
    /// btrfs: the index probes are running (see `btrfs_index_end`): the workers wait.
    probing: AtomicBool,
    /// btrfs: how the index is probed and listed.
    btrfs_listing: BtrfsListing,
    /// The program was found paused at least once (see `Job::note_pause`).
    was_paused: AtomicBool,
    /// A worker is looking at the program's position now.
    watching: AtomicBool,
    /// Its slot in the job table (`usize::MAX` until registered, or when the table was full).
    slot: AtomicUsize,
    /// A worker waits for the program's first use of a file (`Job::wait_for_files`); the
    /// others have left, and it starts them again (`respawn`) once that came.
    waiter: AtomicBool,
    respawn: AtomicBool,
}

/// An entry to stat.
struct Listed {
    ino: u64,
    name: CString,
    /// A directory, or of a type the directory does not record (see `Held::DupOnly`).
    dir: bool,
}

impl From<Entry> for Listed {
    fn from(e: Entry) -> Listed {
        Listed {
            ino: e.ino,
            name: e.name,
            dir: e.kind == libc::DT_DIR || e.kind == libc::DT_UNKNOWN,
        }
    }
}

/// Entries to stat, in order.
type Run = Vec<Listed>;

#[derive(Default)]
struct Runs {
    /// Batches by their directory position (where the program's readdir meets them), each
    /// split into runs. Workers serve the lowest position first: the program reads from the
    /// start and stats as it goes, so it can trail right behind the prefetch instead of
    /// waiting for all of it (its own CPU work then overlaps the reads).
    batches: Vec<(u64, VecDeque<Run>)>,
    /// xfs on a slow device: `batches` has one entry per inode cluster, these the others
    /// (see `XFS_REST_THREADS`).
    rest: Vec<(u64, VecDeque<Run>)>,
    listing_done: bool,
    /// What is left is served in inode order (see `watch_program`, `Job::listing_done`).
    by_inode: bool,
    /// Entries other than directories taken off runs of `batches` and of `rest` while the
    /// program held the directory by its dup only (`Held::DupOnly`): queued again where they
    /// came from once it stats one.
    held_back: [VecDeque<Run>; 2],
    /// xfs on a slow device: the inode clusters (numbers shifted by `XFS_CLUSTER_SHIFT`),
    /// sorted, whose first entry was queued in some batch. Most batches hold entries of most
    /// clusters (listing order is not inode order): chosen batch by batch, the firsts were
    /// 33,000 lookups for the 100k directory's 3,130 clusters, and without CAP_SYS_ADMIN
    /// those lookups, queued on the directory's root buffer lock, held the program's own
    /// to 2,000 a second (bench/results/cold-dirs.md, "one first per cluster").
    clusters: Vec<u64>,
}

impl Runs {
    fn pop(&mut self) -> Option<Run> {
        pop_lowest(&mut self.batches)
    }

    /// What of `run` may be statted now: all of it, or with `dirs_only` its directories,
    /// the rest held back (see `Held::DupOnly`); None when nothing. `from_rest`: the run
    /// came from `rest`.
    fn servable(&mut self, run: Run, dirs_only: bool, from_rest: bool) -> Option<Run> {
        if !dirs_only {
            return Some(run);
        }
        let (dirs, others): (Run, Run) = run.into_iter().partition(|e| e.dir);
        if !others.is_empty() {
            self.held_back[usize::from(from_rest)].push_back(others);
        }
        (!dirs.is_empty()).then_some(dirs)
    }

    /// What was held back goes first, where it came from, now that the program uses the
    /// entries.
    fn release_held_back(&mut self) {
        let [batches, rest] = std::mem::take(&mut self.held_back);
        for (to, runs) in [(&mut self.batches, batches), (&mut self.rest, rest)] {
            if !runs.is_empty() {
                // First of the lowest position: `pop_lowest` takes the first it finds.
                to.insert(0, (0, runs));
            }
        }
    }

    /// A sorted batch split into the first entry of each inode cluster not seen in an
    /// earlier batch, and the rest. Read by number (`by_number`), a first is looked up with
    /// the rest too: its lookup makes the dentry the program's stat would otherwise make.
    fn split_firsts(&mut self, batch: Run, by_number: bool) -> (Run, Run) {
        let (mut firsts, mut rest, mut new) = (Vec::new(), Vec::new(), Vec::new());
        let mut known = self.clusters.iter().peekable();
        for e in batch {
            let cluster = e.ino >> XFS_CLUSTER_SHIFT;
            while known.next_if(|&&k| k < cluster).is_some() {}
            if known.peek() == Some(&&cluster) || new.last() == Some(&cluster) {
                rest.push(e);
            } else {
                new.push(cluster);
                if by_number {
                    rest.push(Listed {
                        name: e.name.clone(),
                        ..e
                    });
                }
                firsts.push(e);
            }
        }
        self.clusters = merge_sorted(std::mem::take(&mut self.clusters), new);
        (firsts, rest)
    }

    /// Every batch left as one, in inode order (and so the xfs rest), in runs of `run`
    /// entries, or fewer if that leaves fewer runs than `workers` (never under RUN).
    /// Batches listed after the first call are merged in: each is sorted already, and so is
    /// what the last call left, and a stable sort merges sorted runs in linear time.
    fn sort_by_inode(&mut self, run: usize, workers: usize) {
        for batches in [&mut self.batches, &mut self.rest] {
            if batches.len() > 1 || !self.by_inode {
                let mut all: Run = batches
                    .drain(..)
                    .flat_map(|(_, runs)| runs.into_iter().flatten())
                    .collect();
                all.sort_by_key(|e| e.ino);
                if !all.is_empty() {
                    let run = (all.len() / workers.max(1)).clamp(RUN, run.max(RUN));
                    batches.push((0, runs_of(all, run)));
                }
            }
        }
        self.by_inode = true;
    }
}

/// The first run of the batch with the lowest position.
fn pop_lowest(batches: &mut Vec<(u64, VecDeque<Run>)>) -> Option<Run> {
    let (i, _) = batches
        .iter()
        .enumerate()
        .min_by_key(|(_, (position, _))| *position)?;
    let run = batches[i].1.pop_front();
    if batches[i].1.is_empty() {
        batches.swap_remove(i);
    }
    run
}

/// Two sorted lists as one.
fn merge_sorted(a: Vec<u64>, b: Vec<u64>) -> Vec<u64> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut a, mut b) = (a.into_iter().peekable(), b.into_iter().peekable());
    while let (Some(x), Some(y)) = (a.peek(), b.peek()) {
        out.extend(if x <= y { a.next() } else { b.next() });
    }
    out.extend(a.chain(b));
    out
}

/// Sorted entries in runs of `run`.
fn runs_of(names: Run, run: usize) -> VecDeque<Run> {
    let mut runs = VecDeque::new();
    let mut names = names.into_iter().peekable();
    while names.peek().is_some() {
        runs.push_back(names.by_ref().take(run).collect());
    }
    runs
}

impl Job {
    /// One of the fds opened for this job at opendir; None when they are used up.
    fn spare_fd(&self) -> Option<OwnFd> {
        self.spare_fds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
    }

    /// Back to the spares, for the next user (a probe's fd, for the listers).
    fn give_back(&self, fd: OwnFd) {
        self.spare_fds
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(fd);
    }

    /// Closed by the program, or the shim is shutting down.
    fn stopped(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || STOP.load(Ordering::Relaxed)
    }

    /// How the program holds the directory (`Held::Stream` for a job the table had no room
    /// for: it runs to its end).
    fn held(&self) -> Held {
        match self.slot.load(Ordering::Acquire) {
            i if i < JOBS => JOB_HELD[i].load(Ordering::Acquire),
            _ => Held::Stream,
        }
    }

    /// Sleeps while the program holds the directory by its dup only and has used no file
    /// through it (`Held::DupOnly`), until it does or the job stops. `find -name` reads the
    /// directory, closes the stream and descends into the subdirectories through the dup,
    /// using no file: statting every entry there read inodes nobody asked for, and on a
    /// cold xfs tree (20,000 entries, 40 subdirectories) took 0.67 s against 0.54 without
    /// the shim (bench/results/cold-dirs.md, "What going on after the closedir costs").
    /// One worker waits, the others leave: a program may hold such dups for long (fts keeps
    /// those of every directory above the one it is in), and waiting workers would count
    /// against `MAX_WORKERS`. False for a worker that is to leave now; after a wait that
    /// ended with the program using a file, `respawn` asks for the others again.
    fn wait_for_files(&self) -> bool {
        if self.waiter.swap(true, Ordering::AcqRel) {
            return false;
        }
        let i = self.slot.load(Ordering::Acquire);
        // Rechecks now and then: a stop wakes the word, but the slot may be taken again.
        let patience = libc::timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        while i < JOBS && !self.stopped() && self.held() == Held::DupOnly {
            sys::thread::futex_wait(&JOB_HELD[i].0, Held::DupOnly as u32, Some(&patience));
        }
        if !self.stopped() && self.held() == Held::FilesUsed {
            self.respawn.store(true, Ordering::Release);
        }
        self.waiter.store(false, Ordering::Release);
        true
    }

    /// Sorts a batch of listed entries by inode and queues it in runs for the workers.
    /// `position`: the directory offset the batch was listed from.
    fn emit(&self, position: u64, batch: Run) {
        INODES_WARMED.fetch_add(batch.len(), Ordering::Relaxed);
        self.queue(position, batch);
    }

    /// `emit` without counting the entries.
    fn queue(&self, position: u64, mut batch: Run) {
        if batch.is_empty() {
            return;
        }
        batch.sort_unstable_by_key(|e| e.ino);
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let (names, rest) = if self.xfs_walk {
            let by_number = self.inode_reads.load(Ordering::Relaxed) == InodeReads::Bulkstat;
            q.split_firsts(batch, by_number)
        } else {
            (batch, Vec::new())
        };
        q.batches.push((position, runs_of(names, RUN)));
        if !rest.is_empty() {
            q.rest.push((position, runs_of(rest, RUN)));
        }
        drop(q);
        self.ready.notify_all();
    }

    /// The program's position has stood still for `PROGRAM_PAUSE_MS`, short of the
    /// directory's end: it is busy with what it read. On xfs, if that is stats, its lookups
    /// and the rest worker's would take turns on the directory's root buffer lock. fts (du,
    /// find) reads at most 100,000 entries at a time and stats them in inode order before it
    /// reads on: on the 1M-entry xfs directory, cold `du -s` took 26.2-27.9 s with the worker
    /// looking up beside it and 20.2-20.8 s with it waiting (bench/results/cold-dirs.md, "one
    /// first per cluster"). There `ls -l`, with the workers ahead of it, moves on every few
    /// milliseconds.
    fn program_paused(&self) -> bool {
        let now = self.started.elapsed().as_millis() as u64;
        self.program_pos.is_some()
            && now.saturating_sub(self.program_moved_ms.load(Ordering::Relaxed)) > PROGRAM_PAUSE_MS
    }

    /// The program was found paused: logs `what` the first time.
    fn note_pause(&self, what: &str) {
        if !self.was_paused.swap(true, Ordering::Relaxed) {
            crate::debug!(
                "directory prefetch: the program stopped reading after {} ms: {what}",
                self.started.elapsed().as_millis()
            );
        }
    }

    /// Whether the workers may stat yet. xfs on a slow device waits for the listing (see
    /// `xfs_leaf_walk`) but for reads by number (`may_read_now`). ext4 reads a directory one
    /// block at a time, and the listers' block reads and the inode-table reads of the
    /// workers' stats share the device: with both at once, the 100k aged directory on the
    /// slow disk was listed in 0.58-0.61 s, and cold `du -s`, which reads the whole
    /// directory before it stats, then had nearly all the stats' CPU left (1.27 s in all);
    /// listed first, in 0.20 s, that CPU overlaps the inode reads (1.13 s), and `ls -l` was
    /// unchanged (1.65 / 1.63 s; bench/results/cold-dirs.md, "ext4: the listing first").
    /// A program that stops reading short of the end is statting what it read (`ls -l`'s
    /// batches; fts, which reads 100,000 entries at a time): from then on the stats wait no
    /// more, since `ls -l` reads on after each batch and would otherwise start each alone.
    fn stats_may_start(&self, q: &Runs, may_read_now: bool) -> bool {
        if q.listing_done {
            return true;
        }
        if self.xfs_walk {
            return may_read_now;
        }
        // btrfs: their lookups would hold up the probes' seeks (see `SeeksFirst`).
        if self.probing.load(Ordering::Relaxed) {
            return false;
        }
        if !self.listing_first || self.was_paused.load(Ordering::Relaxed) {
            return true;
        }
        watch_program(self);
        let paused = self.program_paused();
        if paused {
            self.note_pause("the stats start before the listing ends");
        }
        paused
    }

    /// The listing is over. On ext4 on a slow device the workers start now, and in the order
    /// the program will ask: one still reading (past its first batch, never paused) reads to
    /// the end before it stats (fts: `du`, `find`), in inode order; one that stats as it
    /// reads (`ls -l`, rsync) is still at its first batch, whose cold stats take milliseconds
    /// each (one read for every inode-table region they touch), or has paused on them, and
    /// the batches go in its reading order. Where a batch's inodes are packed into a few
    /// regions such a program may read on before the listing ends and get inode order:
    /// there the order matters little. Waiting for the program to reach the end instead left
    /// the workers 40-100 ms of batches in reading order, and `du -s` on the 100k aged
    /// directory made 2,990 requests instead of 2,378.
    fn listing_done(&self) {
        watch_program(self);
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        // Under the lock, under which a worker notes a pause and takes its first run.
        let reads_on = self.listing_first
            && !self.was_paused.load(Ordering::Relaxed)
            && !self.program_paused()
            && !self.program_listed.load(Ordering::Relaxed)
            && self.program_at.load(Ordering::Relaxed)
                > self.first_batch_end.load(Ordering::Relaxed);
        if reads_on && !q.listing_done && !q.by_inode {
            crate::debug!(
                "directory prefetch: the program reads on after {} ms: the stats by inode",
                self.started.elapsed().as_millis()
            );
            q.sort_by_inode(INODE_TABLE_RUN, self.threads);
        }
        q.listing_done = true;
        drop(q);
        self.ready.notify_all();
    }

    /// btrfs: the index probes are over, the workers may look up.
    fn probes_done(&self) {
        // Under the queue's lock, under which a worker looks at it before it waits.
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        self.probing.store(false, Ordering::Relaxed);
        drop(q);
        self.ready.notify_all();
    }

    /// Entries a worker takes at a time once they go in inode order.
    fn by_inode_run(&self) -> usize {
        if self.listing_first {
            INODE_TABLE_RUN
        } else {
            RUN
        }
    }

    /// The next run to stat, and how; None when all is done or the job was cancelled.
    /// `rest`: this worker took on the entries after each inode cluster's first (xfs, slow
    /// device). `index`: the worker's place among those that joined the job.
    fn next_run(&self, rest: &mut bool, index: usize) -> Option<(Run, InodeReads)> {
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if self.stopped() {
                return None;
            }
            // Until the program uses a file through its dup, only directories: fts stats
            // each subdirectory before it descends into it (see `Held::DupOnly`).
            let dirs_only = self.held() == Held::DupOnly;
            if !dirs_only {
                q.release_held_back();
            }
            if self.program_listed.load(Ordering::Relaxed)
                && (!q.by_inode || q.batches.len() > 1 || q.rest.len() > 1)
            {
                q.sort_by_inode(self.by_inode_run(), self.threads);
            }
            // Lookups wait for the listing on xfs (see `xfs_leaf_walk`); reads by number
            // take no directory lock and start at once, a few while the walk runs.
            let how = self.inode_reads.load(Ordering::Relaxed);
            let may_read_now = how == InodeReads::Bulkstat
                && (index < XFS_WALK_READERS || self.walk_done.load(Ordering::Relaxed));
            if self.stats_may_start(&q, may_read_now)
                && let Some(r) = q.pop()
            {
                match q.servable(r, dirs_only, false) {
                    Some(r) => return Some((r, how)),
                    None => continue,
                }
            }
            // Nothing left but what waits for the program's first use of a file: wait for
            // it here rather than leave xfs's rest to one worker (below) and go.
            if q.listing_done && dirs_only && !*rest && !q.held_back[0].is_empty() {
                drop(q);
                if !self.wait_for_files() {
                    return None;
                }
                q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // A program that stats as it reads (ls -l) does more per entry than the lookup,
            // and a worker runs ahead of it on what is left. One that read the directory
            // first (du, find) stats in inode order, and a worker beside it, from either
            // end, only hands it the directory's root buffer lock at every lookup: once
            // the index is all read, cold `du -s` took 1.82-1.98 s without one against
            // 2.12-2.33 s with one from the other end (xfs, 100k aged entries on the slow
            // disk, bench/results/cold-dirs.md, "every leaf").
            if self.xfs_walk && q.listing_done {
                // The program may have read to the end since this worker last looked.
                watch_program(self);
                if !self.program_listed.load(Ordering::Relaxed) {
                    if !*rest {
                        if self.rest_takers.fetch_add(1, Ordering::Relaxed) >= XFS_REST_THREADS {
                            return None;
                        }
                        *rest = true;
                    }
                    if self.program_paused() {
                        self.note_pause("the rest waits");
                        q = self
                            .ready
                            .wait_timeout(q, std::time::Duration::from_millis(20))
                            .map(|(q, _)| q)
                            .unwrap_or_else(|e| e.into_inner().0);
                        continue;
                    }
                    if let Some(r) = pop_lowest(&mut q.rest) {
                        match q.servable(r, dirs_only, true) {
                            Some(r) => return Some((r, InodeReads::Lookup)),
                            None => continue,
                        }
                    }
                }
            }
            // The rest is served only while the program has not listed it all.
            let rest_held =
                !q.held_back[1].is_empty() && !self.program_listed.load(Ordering::Relaxed);
            if q.listing_done && dirs_only && (!q.held_back[0].is_empty() || rest_held) {
                drop(q);
                if !self.wait_for_files() {
                    if *rest {
                        // Another takes the rest once the waiter starts the workers again.
                        self.rest_takers.fetch_sub(1, Ordering::Relaxed);
                    }
                    return None;
                }
                q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            if q.listing_done {
                if !self.logged_end.swap(true, Ordering::Relaxed) {
                    let left = self.xfs_walk && self.program_listed.load(Ordering::Relaxed);
                    crate::debug!(
                        "directory prefetch: last run of stats taken after {} ms{}",
                        self.started.elapsed().as_millis(),
                        if left {
                            ", the rest left to the program"
                        } else {
                            ""
                        }
                    );
                }
                return None;
            }
            // The program's first use of a file wakes no condvar (see `file_used`).
            let patience = if dirs_only { 10 } else { 50 };
            q = self
                .ready
                .wait_timeout(q, std::time::Duration::from_millis(patience))
                .map(|(q, _)| q)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

/// One getdents64 batch on an own fd; 0 at the end or on an error.
fn getdents(fd: i32, buf: &mut [u8], out: &mut Vec<Entry>) -> usize {
    sys::dir::getdents(fd, buf, out).unwrap_or(0)
}

fn statx_nofollow(dirfd: i32, name: &CString) {
    let _ = sys::dir::statx_nofollow(dirfd, name);
}

fn own_dir_fd(dirfd: i32) -> Option<OwnFd> {
    sys::dir::open_self(dirfd).ok()
}

/// Called after the program opened a directory stream on `dirfd`. True when the directory
/// was big enough to look at (prefetched, or found warm).
pub fn opened(dirfd: i32, cfg: &DirConfig) -> bool {
    if !cfg.enabled {
        return false;
    }
    let Ok(st) = sys::file::identify(dirfd) else {
        return false;
    };
    // Directory sizes run from ~20 (btrfs, tmpfs) to ~40 (ext4, xfs) bytes per entry.
    if st.size / 20 < cfg.min_entries {
        return false;
    }
    let Some(fd) = own_dir_fd(dirfd) else {
        return false;
    };
    let probe_started = Instant::now();
    let kind = sys::dir::fs_type(fd.raw()).unwrap_or(0);
    let first = cold_first_batch(fd.raw(), probe_buffer(kind));
    crate::debug!(
        "directory prefetch: probe found the directory {} in {} us (slow stat {} us)",
        if first.is_some() { "cold" } else { "warm" },
        probe_started.elapsed().as_micros(),
        first.as_ref().map_or(0, |f| f.latency_us)
    );
    let Some(ColdProbe {
        batch: first,
        latency_us,
    }) = first
    else {
        DIRS_WARM.fetch_add(1, Ordering::Relaxed);
        return true;
    };
    let threads = if cfg.threads_auto && kind == XFS_SUPER_MAGIC && latency_us < FAST_DEVICE_US {
        XFS_FAST_DEVICE_THREADS.min(cfg.threads)
    } else {
        cfg.threads
    };
    let xfs_walk = kind == XFS_SUPER_MAGIC && threads > 1 && latency_us >= FAST_DEVICE_US;
    let filtered = sys::proc::seccomp_filtered();
    // Not under a seccomp filter: a service allowed a list of ioctls could be killed for it.
    let inode_reads =
        if xfs_walk && sys::proc::has_effective_cap(sys::proc::CAP_SYS_ADMIN) && !filtered {
            InodeReads::Bulkstat
        } else {
            InodeReads::Lookup
        };
    if xfs_walk {
        crate::debug!(
            "directory prefetch: xfs on a slow device: inode clusters read by {inode_reads:?}"
        );
    }
    // The same rule as bulkstat's: an ioctl, and CAP_SYS_ADMIN.
    let btrfs_listing = if kind == BTRFS_SUPER_MAGIC
        && threads > 1
        && !BTRFS_SEARCH_REFUSED.load(Ordering::Relaxed)
        && sys::proc::has_effective_cap(sys::proc::CAP_SYS_ADMIN)
        && !filtered
    {
        BtrfsListing::TreeSearch
    } else {
        BtrfsListing::Seeks
    };
    // One per lister (one per thread); btrfs's probers use them before the listers do (and
    // have more where they outnumber the threads), xfs's walker has one of its own.
    let spares = if threads > 1 {
        threads
            + if kind == BTRFS_SUPER_MAGIC {
                PROBERS.saturating_sub(threads)
            } else {
                usize::from(xfs_walk)
            }
    } else {
        0
    };
    let spare_fds = (0..spares).map_while(|_| own_dir_fd(fd.raw())).collect();
    // Read only where the listing is split, which finds where the offsets end.
    let splits =
        threads > 1 && [EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, BTRFS_SUPER_MAGIC].contains(&kind);
    let program_pos = splits
        .then(|| sys::procfd::FdInfoFile::open_own(dirfd).ok())
        .flatten();
    // Without permission to read the device (not root, nor in its group) or with no node
    // for it, the listers read the blocks as before. Not under a seccomp filter: FIEMAP is
    // an ioctl (see `inode_reads`).
    let device = (kind == EXT4_SUPER_MAGIC && threads > 1 && !filtered)
        .then(|| sys::blockdev::open_device(st.dev).ok())
        .flatten();
    let read_chunk = device
        .as_ref()
        .and_then(|_| sys::proc::device_limits(st.dev))
        .map_or(0, |(_, largest)| largest)
        .max(128 * 1024);
    let job = Arc::new(Job {
        nice: kind != XFS_SUPER_MAGIC && !filtered,
        kind,
        device,
        read_chunk,
        threads,
        spare_fds: Mutex::new(spare_fds),
        fd,
        cancel: AtomicBool::new(false),
        queue: Mutex::new(Runs::default()),
        ready: Condvar::new(),
        started: Instant::now(),
        logged_end: AtomicBool::new(false),
        xfs_walk,
        listing_first: kind == EXT4_SUPER_MAGIC && threads > 1 && latency_us >= FAST_DEVICE_US,
        runs_taken: AtomicUsize::new(0),
        rest_takers: AtomicUsize::new(0),
        inode_reads: AtomicInodeReads::new(inode_reads),
        walk_done: AtomicBool::new(!xfs_walk),
        joined: AtomicUsize::new(0),
        program_pos,
        offsets_end: AtomicU64::new(0),
        program_listed: AtomicBool::new(false),
        program_at: AtomicU64::new(0),
        program_moved_ms: AtomicU64::new(0),
        first_batch_end: AtomicU64::new(u64::MAX),
        // Tree search too, until its probes have answered: if it is refused, the seeks come.
        probing: AtomicBool::new(kind == BTRFS_SUPER_MAGIC && threads > 1),
        btrfs_listing,
        was_paused: AtomicBool::new(false),
        watching: AtomicBool::new(false),
        slot: AtomicUsize::new(usize::MAX),
        waiter: AtomicBool::new(false),
        respawn: AtomicBool::new(false),
    });
    // The probe's batch is where the program starts reading: the workers take it first,
    // while the leader finds out how to split the listing (it lists these again: a second
    // stat of a cached inode is cheap, and it is not counted twice).
    job.queue(0, first);
    if spawn(job.clone(), threads, true) {
        DIRS_PREFETCHED.fetch_add(1, Ordering::Relaxed);
        register(dirfd, &job);
    }
    true
}

/// What the probe found in a cold directory.
struct ColdProbe {
    /// The batch's entries (inode, name).
    batch: Run,
    /// How long the slower of the two slow stats took: about the device's read latency.
    latency_us: u128,
}

/// The probe's one getdents. ext4 reads a cold htree directory one leaf block at a time, so
/// the probe of the 100k aged directory on the slow disk, a batch of 32 KiB (as glibc's
/// readdir reads) and two cold stats, held the program's opendir 40-45 ms, and with 4 KiB
/// 18-19 ms (bench/results/cold-dirs.md, "ext4: a smaller probe"). 4 KiB holds enough
/// entries to probe: 12 or more besides "." and "..", however long the names.
fn probe_buffer(kind: i64) -> usize {
    if kind == EXT4_SUPER_MAGIC {
        4096
    } else {
        32 * 1024
    }
}

/// The probe: stat 8 entries spread over the first batch; the directory is cold when at
/// least two of them took longer than a cached inode can (one slow stat may be noise). It
/// runs in the program's opendir, so it stops at the second slow stat: on a cold directory
/// each costs a device read. Some when cold.
fn cold_first_batch(fd: i32, buffer: usize) -> Option<ColdProbe> {
    let mut buf = vec![0u8; buffer];
    let mut entries = Vec::new();
    getdents(fd, &mut buf, &mut entries);
    let _ = sys::file::seek_own(fd, 0);
    if entries.len() < 8 {
        return None;
    }
    let mut slow = Vec::new();
    for i in 0..8 {
        let name = &entries[i * entries.len() / 8].name;
        let t = Instant::now();
        statx_nofollow(fd, name);
        let took = t.elapsed().as_micros();
        if took >= PROBE_COLD_US {
            slow.push(took);
            if slow.len() == 2 {
                return Some(ColdProbe {
                    batch: entries.into_iter().map(Listed::from).collect(),
                    latency_us: slow[0].max(slow[1]),
                });
            }
        }
    }
    None
}

/// Starts a detached thread with every signal blocked. `leader`: it lists the directory,
/// then starts the other workers.
fn spawn(job: Arc<Job>, threads: usize, leader: bool) -> bool {
    if WORKERS.fetch_add(1, Ordering::AcqRel) >= MAX_WORKERS {
        WORKERS.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    let spawned = sys::thread::spawn_detached("dropbehind-dir", 256 * 1024, move || {
        // Whatever goes wrong in here, the listing is declared done (the other workers
        // would wait for it) and the thread is counted out.
        let _ = catch_unwind(AssertUnwindSafe(|| {
            yield_cpu_to_program(job.nice);
            if leader {
                for _ in 1..threads {
                    if job.stopped() || !spawn(job.clone(), threads, false) {
                        break;
                    }
                }
                let _ = catch_unwind(AssertUnwindSafe(|| {
                    list(&job, threads);
                    read_inode_tables(&job);
                }));
                let (listed, ms) = (
                    INODES_WARMED.load(Ordering::Relaxed),
                    job.started.elapsed().as_millis(),
                );
                if job.xfs_walk {
                    // One first per cluster in `clusters`.
                    let firsts = job.queue.lock().map_or(0, |q| q.clusters.len());
                    crate::debug!(
                        "directory prefetch: {listed} entries listed in {ms} ms \
                         ({firsts} read first, one per inode cluster)"
                    );
                } else {
                    let taken = job.runs_taken.load(Ordering::Relaxed);
                    crate::debug!(
                        "directory prefetch: {listed} entries listed in {ms} ms \
                         ({taken} runs of stats taken meanwhile)"
                    );
                }
                job.listing_done();
            }
            work(&job);
        }));
        if leader {
            job.listing_done();
        }
        WORKERS.fetch_sub(1, Ordering::AcqRel);
    });
    if !spawned {
        WORKERS.fetch_sub(1, Ordering::AcqRel);
    }
    spawned
}

/// Lowers the calling helper thread to nice 19, so that the prefetch only takes CPU the
/// program leaves: with 2 CPUs, helpers at the program's priority held `ls -l` back while
/// it could already stat the entries warmed so far (ext4 2.16 -> 1.98 s, btrfs 2.47 ->
/// 2.14 s cold, 100k aged). Not on xfs: its lookups hand a sleeping directory-buffer lock
/// from one waiter to the next, and a low-priority helper woken to take it holds up every
/// lookup behind it, the program's too (5.5 -> 6.4 s). Not under a seccomp filter either: a
/// service hardened against `setpriority` (systemd's `~@resources`) would be killed for it.
/// `nice`: neither (`Job::nice`, decided on the program's thread).
fn yield_cpu_to_program(nice: bool) {
    if nice {
        let _ = sys::thread::lower_own_nice(19);
    }
}

fn work(job: &Arc<Job>) {
    // Runs of neighbouring inodes per thread: threads taking one entry at a time all wait
    // on the same inode block, which keeps one read in flight instead of one per thread.
    let mut rest = false;
    let index = job.joined.fetch_add(1, Ordering::Relaxed);
    loop {
        watch_program(job);
        let Some((run, how)) = job.next_run(&mut rest, index) else {
            return;
        };
        job.runs_taken.fetch_add(1, Ordering::Relaxed);
        if job.respawn.swap(false, Ordering::AcqRel) {
            for _ in 1..job.threads {
                if job.stopped() || !spawn(job.clone(), job.threads, false) {
                    break;
                }
            }
        }
        for e in &run {
            if job.stopped() {
                return;
            }
            if how == InodeReads::Bulkstat && job.inode_reads.load(Ordering::Relaxed) == how {
                match sys::dir::xfs_read_inode(job.fd.raw(), e.ino) {
                    // EINVAL: the file was removed since it was listed.
                    Ok(()) | Err(sys::Errno(libc::EINVAL)) => continue,
                    Err(e) => {
                        crate::debug!("directory prefetch: bulkstat failed ({e:?}): lookups");
                        job.inode_reads.store(InodeReads::Lookup, Ordering::Relaxed);
                    }
                }
            }
            statx_nofollow(job.fd.raw(), &e.name);
        }
    }
}

/// Whether the program stats as it reads its directory, or only once it has read all of
/// it, shows in its directory position. `ls -l` stats each batch of entries as it reads
/// them, and the workers serve the batches in the order it reads; `du` and `find` (fts)
/// read the whole directory first, then stat in inode order, and batches served in reading
/// order keep them waiting for the inodes they ask for first (xfs, 100k aged entries on
/// the slow disk: `du -s` 2.75 s against `ls -l`'s 2.30). So once the program's position
/// is at the end of the directory with stats still queued, what is left is served in inode
/// order (ext4 on a slow device decides at the listing's end: `Job::listing_done`). The
/// position is read from /proc's fdinfo, which takes no lock the program's readdir holds
/// (an lseek of its fd waits on the stream's position lock: btrfs `ls -l` 1.17 -> 2.19 s
/// with one before each run); one worker at a time looks, before each run.
fn watch_program(job: &Job) {
    let end = job.offsets_end.load(Ordering::Relaxed);
    let Some(info) = &job.program_pos else {
        return;
    };
    if end == 0
        || job.stopped()
        || job.program_listed.load(Ordering::Relaxed)
        || job.watching.swap(true, Ordering::Acquire)
    {
        return;
    }
    if let Ok(pos) = info.read().map(|i| i.pos) {
        if job.program_at.swap(pos, Ordering::Relaxed) != pos {
            let now = job.started.elapsed().as_millis() as u64;
            job.program_moved_ms.store(now, Ordering::Relaxed);
        }
        if pos.saturating_add(1) >= end {
            crate::debug!(
                "directory prefetch: the program read the directory to its end after {} ms: \
                 the rest by inode",
                job.started.elapsed().as_millis()
            );
            job.program_listed.store(true, Ordering::Relaxed);
        }
    }
    job.watching.store(false, Ordering::Release);
}

/// Lists the directory into the job's queue, in parallel where the filesystem's directory
/// offsets can be split into ranges (ext4 htree hashes, xfs data-space offsets, btrfs index
/// numbers). Each lister sorts and queues batches by inode as it goes; the workers serve
/// the batches nearest the start first, the order the program reads in. On ext4 that order
/// is random against inode order: sorting all 100k entries together saved some reads, but
/// the program then waited for nearly all of the prefetch (2.16 s cold, against 1.98 s).
fn list(job: &Job, threads: usize) {
    let fd = job.fd.raw();
    let kind = job.kind;
    if threads > 1 {
        // The directory's objectid, which the tree search asks by.
        let ino = (job.btrfs_listing == BtrfsListing::TreeSearch)
            .then(|| sys::file::identify(fd).ok().map(|st| st.ino))
            .flatten();
        let searched = ino.and_then(|ino| btrfs_search_end(job, ino));
        if searched.is_some() {
            // No seek will come: the workers' lookups hold nothing up.
            job.probes_done();
        }
        let end = if kind == EXT4_SUPER_MAGIC {
            read_dir_blocks(job);
            // htree hash positions, in [0, 2^63).
            Some(1 << 63)
        } else if searched.is_some() {
            searched
        } else {
            if job.btrfs_listing == BtrfsListing::TreeSearch && !job.stopped() {
                crate::debug!("directory prefetch: btrfs tree search refused: probes by seeks");
                BTRFS_SEARCH_REFUSED.store(true, Ordering::Relaxed);
            }
            offsets_end(fd, kind, job)
        };
        if let Some(end) = end {
            crate::debug!(
                "directory prefetch: offsets end at {end}, found after {} ms",
                job.started.elapsed().as_millis()
            );
            job.offsets_end.store(end, Ordering::Relaxed);
            let emit = |position, b| job.emit(position, b);
            if job.xfs_walk {
                return std::thread::scope(|s| {
                    let _ = std::thread::Builder::new()
                        .stack_size(64 * 1024)
                        .spawn_scoped(s, || {
                            xfs_leaf_walk(job);
                            job.walk_done.store(true, Ordering::Relaxed);
                            job.ready.notify_all();
                        });
                    list_ranges(job, split(0, end, XFS_WALK_READERS), &emit);
                    // The workers start on the inodes now, not when the walk is done: a
                    // lookup whose leaf is cached gets in between two of the walk's reads.
                    job.listing_done();
                });
            }
            if let (Some(ino), Some(_)) = (ino, searched) {
                crate::debug!("directory prefetch: btrfs index read by tree search");
                return list_btrfs_index(job, ino, end, threads, &emit);
            }
            return list_ranges(job, split(0, end, threads), &emit);
        }
    }
    let _ = sys::file::seek_own(fd, 0);
    let mut buf = vec![0u8; getdents_buffer(kind)];
    let mut batch = Vec::new();
    let mut listed = 0;
    let mut batch_size = FIRST_BATCH;
    while !job.stopped() && getdents(fd, &mut buf, &mut batch) > 0 {
        if batch.len() >= batch_size {
            let n = batch.len() as u64;
            job.emit(listed, batch.drain(..).map(Listed::from).collect());
            listed += n;
            batch_size = (batch_size * 2).min(STREAM_BATCH);
        }
    }
    job.emit(listed, batch.into_iter().map(Listed::from).collect());
}

/// ext4: asks the device for the directory's blocks before the listers start, in a few
/// large reads. ext4 reads a directory one 4 KiB block at a time as getdents needs it (the
/// 100k aged directory's listing made 600-880 requests from 16 listers); it reads them as
/// buffers of the device's own cache, so blocks read ahead through the device are found
/// there, and a lister's getdents waits for the read in flight instead of making its own.
/// The reads are asynchronous (readahead): this takes the time to ask, not to read.
fn read_dir_blocks(job: &Job) {
    let Some(device) = &job.device else {
        return;
    };
    let mut extents = Vec::new();
    if let Err(e) = sys::blockdev::extents(job.fd.raw(), &mut extents) {
        crate::debug!("directory prefetch: no map of the directory's blocks ({e:?})");
        return;
    }
    let pieces = extents
        .iter()
        .map(|e| Range::new(e.physical, e.physical.saturating_add(e.len)))
        .collect();
    let (asked, reads) = read_through_device(job, device, pieces);
    crate::debug!(
        "directory prefetch: {} KiB of the directory's blocks ({} extents) asked of the \
         device in {reads} reads, after {} ms",
        asked / 1024,
        extents.len(),
        job.started.elapsed().as_millis()
    );
}

/// ext4, once the directory is listed: asks the device for the inode table blocks that hold
/// the listed entries' inodes, in a few large reads, as `read_dir_blocks` does for the
/// directory. On a slow device the workers wait for the listing (`listing_first`), so the
/// reads are asked for before their lookups; on a fast one they are already at work, and
/// the entries they took are left out. ext4 reads an inode table 32 blocks at a time
/// from the lookup that needs one (`inode_readahead_blks`): 1,500-1,600 requests for the
/// 100k aged directory's 12,425 blocks. Where they lie comes from the superblock and the
/// group descriptors, read through the device (cached: ext4 keeps them in memory); an
/// answer that does not parse leaves the reads to ext4, as before.
fn read_inode_tables(job: &Job) {
    use dropbehind_core::ext4::{Layout, SUPERBLOCK_AT, SUPERBLOCK_LEN};
    let Some(device) = &job.device else {
        return;
    };
    let mut sb = [0u8; SUPERBLOCK_LEN];
    let layout = sys::file::read_at(device, &mut sb, SUPERBLOCK_AT)
        .ok()
        .filter(|&n| n == SUPERBLOCK_LEN)
        .and_then(|_| Layout::parse(&sb));
    let Some(layout) = layout else {
        crate::debug!("directory prefetch: no ext4 superblock read from the device");
        return;
    };
    let mut inos: Vec<u64> = {
        let q = job.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.batches
            .iter()
            .chain(&q.rest)
            .flat_map(|(_, runs)| runs.iter().flatten().map(|e| e.ino))
            .collect()
    };
    inos.sort_unstable();
    inos.dedup();
    let (mut group, mut table) = (None, 0);
    let mut pieces: Vec<Range> = Vec::new();
    for ino in inos {
        let g = layout.group_of(ino);
        if group != Some(g) {
            let (at, len) = layout.descriptor(g);
            let mut desc = [0u8; 64];
            let desc = &mut desc[..len];
            match sys::file::read_at(device, desc, at) {
                Ok(n) if n == len => {}
                _ => return,
            }
            let Some(t) = layout.inode_table(desc) else {
                return;
            };
            (group, table) = (Some(g), t);
        }
        let at = layout.inode_block_at(ino, table);
        if pieces.last().is_none_or(|r| r.start != at) {
            pieces.push(Range::new(at, at.saturating_add(layout.block_size)));
        }
    }
    let blocks = pieces.len();
    let (asked, reads) = read_through_device(job, device, pieces);
    crate::debug!(
        "directory prefetch: {} KiB of inode tables ({blocks} blocks) asked of the device \
         in {reads} reads, after {} ms",
        asked / 1024,
        job.started.elapsed().as_millis()
    );
}

/// Reads `pieces` of the device ahead (asynchronously), joined into as few reads as
/// `READ_HOLE` and the device's largest request allow. The bytes asked for, and the reads.
fn read_through_device(job: &Job, device: &OwnFd, pieces: Vec<Range>) -> (u64, usize) {
    let chunk = job.read_chunk;
    let reads = coalesce(pieces, READ_HOLE, chunk);
    let asked = reads
        .iter()
        .map(|r| sys::cache::prefetch(device.raw(), r.start, r.end, chunk, || !job.stopped()))
        .sum();
    (asked, reads.len())
}

/// xfs on a slow device, while the directory is listed: reads the directory's hash index
/// (its leaf blocks) by looking up names that are not there, spread evenly over the name
/// hash space and taken in hash order, from one thread.
///
/// Measured on the 2 ms slow disk (bench/results/cold-dirs.md): an xfs lookup holds the
/// directory's index buffers locked from the root down while it reads a missing leaf or
/// data block, so every other lookup, the program's too, waits for that read; the helpers
/// spent most of their time in `xfs_buf_lock`. A name that is not there needs only the root
/// and one leaf (no data block), and the workers wait until the listing has read the data
/// blocks, so that their lookups find the whole directory cached and only the inode reads,
/// which hold no directory lock, are left to go in parallel.
fn xfs_leaf_walk(job: &Job) {
    let Some(own) = job.spare_fd() else {
        return;
    };
    let entries = sys::file::identify(own.raw()).map_or(0, |st| st.size / 40);
    let probes = (entries / XFS_LEAF_PROBE_EVERY).clamp(64, 1 << 16);
    let (mut read, mut cached) = (0u64, 0u64);
    let mut probe = |target: u64| {
        let t = Instant::now();
        if let Ok(name) = CString::new(xfs_name_for(target as u32)) {
            statx_nofollow(own.raw(), &name);
        }
        let leaf_read = t.elapsed().as_micros() >= XFS_LEAF_READ_US;
        *if leaf_read { &mut read } else { &mut cached } += 1;
        leaf_read
    };
    let fine_step = ((1u64 << 32) / entries.max(1) * XFS_LEAF_FINE_QUARTERS / 4).max(1);
    let mut last = 0;
    for i in 0..probes {
        if job.stopped() {
            break;
        }
        let target = (i << 32) / probes;
        if probe(target) && i > 0 {
            // A new leaf at `target`: those between it and the last probe's come next.
            let mut h = last + fine_step;
            while h < target && !job.stopped() {
                probe(h);
                h += fine_step;
            }
        }
        last = target;
    }
    crate::debug!(
        "directory prefetch: index walked after {} ms ({read} leaves read, {cached} probes cached)",
        job.started.elapsed().as_millis()
    );
    job.give_back(own);
}

/// xfs's directory name hash (xfs_da_hashname; not the ascii-ci variant).
fn xfs_hash(name: &[u8]) -> u32 {
    let mut hash: u32 = 0;
    let mut chunks = name.chunks_exact(4);
    for c in chunks.by_ref() {
        hash = (u32::from(c[0]) << 21)
            ^ (u32::from(c[1]) << 14)
            ^ (u32::from(c[2]) << 7)
            ^ u32::from(c[3])
            ^ hash.rotate_left(28);
    }
    match *chunks.remainder() {
        [a, b, c] => {
            (u32::from(a) << 14) ^ (u32::from(b) << 7) ^ u32::from(c) ^ hash.rotate_left(21)
        }
        [a, b] => (u32::from(a) << 7) ^ u32::from(b) ^ hash.rotate_left(14),
        [a] => u32::from(a) ^ hash.rotate_left(7),
        _ => hash,
    }
}

/// An 8-byte name (no NUL, no '/') whose xfs hash is `target`: the fourth byte sets the
/// hash's top three bits, the last four the other 29, seven bits each from the lowest up
/// (where a field would be NUL or '/', its byte's eighth bit is set too and the next field
/// takes it back); the first byte, whose bits 4-7 land on that field's, is changed until the
/// last field is neither.
fn xfs_name_for(target: u32) -> [u8; 8] {
    let top = 0x60 | (((target >> 29) & 7) as u8) << 1;
    let mut name = [b'.', b'd', b'b', top, 0, 0, 0, 0];
    for first in [b'.', b'=', b'_', b'~'] {
        name[0] = first;
        let mut x = target ^ xfs_hash(&name[..4]).rotate_left(28);
        for i in [7, 6, 5] {
            let mut c = (x & 0x7f) as u8;
            if c == 0 || c == b'/' {
                c |= 0x80;
            }
            x = (x ^ u32::from(c)) >> 7;
            name[i] = c;
        }
        // The top three bits are the fourth byte's, so eight are left.
        let last = x as u8;
        name[4] = last ^ 1; // near, should no first byte do
        if last != 0 && last != b'/' {
            name[4] = last;
            break;
        }
    }
    name
}

/// xfs: readdir readahead is defeated by big getdents buffers (4 KiB: 0.44 s for 100k
/// entries; 64 KiB: 1.7 s).
fn getdents_buffer(kind: i64) -> usize {
    if kind == XFS_SUPER_MAGIC {
        4096
    } else {
        32 * 1024
    }
}

/// `n` ranges splitting [start, end).
fn split(start: u64, end: u64, n: usize) -> Vec<(u64, u64)> {
    let span = (end - start).div_ceil(n as u64).max(1);
    (0..n as u64)
        .map(|i| {
            (
                start + i * span,
                if i + 1 == n as u64 {
                    u64::MAX
                } else {
                    start + (i + 1) * span
                },
            )
        })
        .take_while(|r| r.0 < end)
        .collect()
}

/// Where a directory's offsets end, for filesystems whose offsets can be split: xfs (a
/// byte offset in the directory's data space, divided by 8: the data space is st_size
/// long) and btrfs (per-directory index numbers, found by probing).
fn offsets_end(fd: i32, kind: i64, job: &Job) -> Option<u64> {
    match kind {
        XFS_SUPER_MAGIC => sys::file::identify(fd)
            .ok()
            .map(|st| st.size.div_ceil(8) + 1),
        BTRFS_SUPER_MAGIC => {
            let end = btrfs_index_end(job);
            job.probes_done();
            end
        }
        _ => None,
    }
}

/// A bound on a btrfs directory's index numbers. A probe seeks to an index and asks for one
/// entry: one b-tree search, a device read or two when cold, so the probes run in parallel:
/// first at powers of two, then at 15 points between the last power that found entries and
/// the first that did not (the bound is then within 1/16 of it).
fn btrfs_index_end(job: &Job) -> Option<u64> {
    let powers: Vec<u64> = (12..=30).map(|k| 1u64 << k).collect();
    let found = entries_at(job, &powers)?;
    let first_miss = found.iter().position(|f| !f)?;
    if first_miss == 0 {
        return Some(powers[0]);
    }
    if job.stopped() {
        return None;
    }
    let (lo, hi) = (powers[first_miss - 1], powers[first_miss]);
    let step = (hi - lo) / 16;
    let points: Vec<u64> = (1..16).map(|i| lo + i * step).collect();
    let found = entries_at(job, &points)?;
    Some(found.iter().position(|f| !f).map_or(hi, |i| points[i]))
}

/// btrfs by tree search: a bound on the directory's index numbers, probed at powers of
/// two as `btrfs_index_end` does, PROBERS at once, with no seek. None when the search is
/// refused (the caller probes by seeks) or the job stopped. `ino`: the directory's.
fn btrfs_search_end(job: &Job, ino: u64) -> Option<u64> {
    let powers: Vec<u64> = (12..=44).map(|k| 1u64 << k).collect();
    for wave in powers.chunks(PROBERS) {
        if job.stopped() {
            return None;
        }
        let found = per_position(
            wave,
            |pos| {
                let (mut buf, mut out) = ([0u64; 1024], Vec::new());
                sys::dir::btrfs_dir_index(job.fd.raw(), ino, pos, u64::MAX, &mut buf, &mut out)
                    .ok()
                    .map(|_| !out.is_empty())
            },
            |_| {},
        );
        // Any probe refused or not run: no bound to trust.
        let found: Option<Vec<bool>> = found.into_iter().collect();
        if let Some(miss) = found?.iter().position(|f| !f) {
            return Some(wave[miss]);
        }
    }
    None
}

/// btrfs by tree search: lists index numbers [0, `end`) on `threads` threads, which take
/// slices of it in order as they finish the last (past the end of a directory aged as
/// most are, a slice costs one search of a cached leaf); `out` gets batches as they come,
/// growing as `list_ranges`' do. A search refused midway stops them all: the program looks
/// up what was not listed itself.
fn list_btrfs_index(
    job: &Job,
    ino: u64,
    end: u64,
    threads: usize,
    out: &(dyn Fn(u64, Run) + Sync),
) {
    let slice = (end / (4 * threads as u64)).max(256);
    let next = AtomicU64::new(0);
    let refused = AtomicBool::new(false);
    let going = || !job.stopped() && !refused.load(Ordering::Relaxed);
    let nice = job.nice;
    std::thread::scope(|s| {
        for _ in 0..threads {
            // A lister that cannot start leaves its slices to the others.
            let _ = std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn_scoped(s, || {
                    yield_cpu_to_program(nice);
                    let mut buf = vec![0u64; 8192];
                    let (mut entries, mut batch_size) = (Vec::new(), FIRST_BATCH);
                    while going() {
                        let start = next.fetch_add(1, Ordering::Relaxed).saturating_mul(slice);
                        if start >= end {
                            break;
                        }
                        let stop = if end - start <= slice {
                            u64::MAX
                        } else {
                            start + slice
                        };
                        let (mut from, mut part_start, mut part) = (start, start, Vec::new());
                        while going() {
                            match sys::dir::btrfs_dir_index(
                                job.fd.raw(),
                                ino,
                                from,
                                stop,
                                &mut buf,
                                &mut entries,
                            ) {
                                Ok(more) => {
                                    part.extend(entries.drain(..).map(Listed::from));
                                    match more {
                                        Some(n) => from = n,
                                        None => break,
                                    }
                                }
                                Err(_) => refused.store(true, Ordering::Relaxed),
                            }
                            if part.len() >= batch_size {
                                out(part_start, std::mem::take(&mut part));
                                part_start = from;
                                batch_size = (batch_size * 2).min(STREAM_BATCH);
                            }
                        }
                        out(part_start, part);
                    }
                });
        }
    });
}

/// For each position: does the directory list anything from there? Positions rise, and
/// past the first that lists nothing the answers are false unasked. Probed in waves of
/// PROBERS threads at once, each with one of the job's spare fds, given back for the
/// listers.
fn entries_at(job: &Job, positions: &[u64]) -> Option<Vec<bool>> {
    let mut found = Vec::with_capacity(positions.len());
    for wave in positions.chunks(PROBERS) {
        if job.stopped() {
            return None;
        }
        found.extend(probe_wave(job, wave)?);
        if found.contains(&false) {
            break;
        }
    }
    found.resize(positions.len(), false);
    Some(found)
}

/// One thread per position: seek, then (once every thread has sought: see `SeeksFirst`)
/// one small getdents.
fn probe_wave(job: &Job, wave: &[u64]) -> Option<Vec<bool>> {
    let meet = SeeksFirst::new(SEEKS_WAIT);
    let meet = &meet;
    let answers = per_position(
        wave,
        |pos| {
            let own = job.spare_fd();
            if let Some(own) = &own {
                let _ = sys::file::seek_own(own.raw(), pos);
            }
            meet.sought();
            let own = own?;
            let mut buf = [0u8; 1024];
            let found = getdents(own.raw(), &mut buf, &mut Vec::new()) > 0;
            job.give_back(own);
            Some(found)
        },
        |started| meet.start(started),
    );
    answers.into_iter().collect()
}

/// `probe(pos)` for each position, on a thread of its own (64 KiB of stack); `started` is
/// told how many threads started, then every one is joined (so that none is left for the
/// scope to re-raise). None for a position whose thread did not start or panicked.
fn per_position<T: Send>(
    positions: &[u64],
    probe: impl Fn(u64) -> Option<T> + Sync,
    started: impl FnOnce(usize),
) -> Vec<Option<T>> {
    let probe = &probe;
    std::thread::scope(|s| {
        let threads: Vec<_> = positions
            .iter()
            .map(|&pos| {
                std::thread::Builder::new()
                    .stack_size(64 * 1024)
                    .spawn_scoped(s, move || probe(pos))
                    .ok()
            })
            .collect();
        started(threads.iter().flatten().count());
        threads
            .into_iter()
            .map(|t| t.and_then(|h| h.join().ok().flatten()))
            .collect()
    })
}

/// Threads that each seek their own fd on one directory, then read from it, meet here so
/// that every seek is made before any read starts. btrfs's lseek on a directory waits for
/// the getdents and lookups in flight (each holds the directory's lock through its reads)
/// and holds off those that come after: a seek made while the others read made them take
/// turns. On the 100k directory aged less, the two rounds of probes took 147-180 ms and the
/// listing ended at 507-518 ms; with the seeks first (and the workers' lookups held back
/// while the probes run) 50-94 and 331-365 ms (bench/results/cold-dirs.md, "btrfs: seeks
/// first").
struct SeeksFirst {
    /// Threads that have sought, and whether they may read.
    state: Mutex<(usize, bool)>,
    go: Condvar,
    /// Longest a thread waits for the others (SEEKS_WAIT).
    patience: std::time::Duration,
}

/// Longest a thread of `SeeksFirst` waits for the others (one that failed to start, or
/// whose seek waits behind a slow read, holds up none of them for longer).
const SEEKS_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

impl SeeksFirst {
    fn new(patience: std::time::Duration) -> SeeksFirst {
        SeeksFirst {
            state: Mutex::new((0, false)),
            go: Condvar::new(),
            patience,
        }
    }

    /// A thread has sought: waits until the others have too (see `start`).
    fn sought(&self) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.0 += 1;
        self.go.notify_all();
        drop(self.wait(st, |&(_, go)| go));
    }

    /// The starting thread, once `threads` were spawned: lets them read when every one has
    /// sought.
    fn start(&self, threads: usize) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.wait(st, |&(sought, _)| sought >= threads);
        st.1 = true;
        self.go.notify_all();
    }

    /// Waits on `go` until `done`, at most `patience`.
    fn wait<'a>(
        &self,
        mut st: std::sync::MutexGuard<'a, (usize, bool)>,
        done: impl Fn(&(usize, bool)) -> bool,
    ) -> std::sync::MutexGuard<'a, (usize, bool)> {
        let deadline = Instant::now() + self.patience;
        while !done(&st) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .go
                .wait_timeout(st, left)
                .map(|(st, _)| st)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        st
    }
}

/// Lists each range of directory offsets on its own fd, in parallel; `out` gets batches as
/// they come (an entry at a range's end may be listed twice: harmless).
fn list_ranges(job: &Job, ranges: Vec<(u64, u64)>, out: &(dyn Fn(u64, Run) + Sync)) {
    let (kind, nice) = (job.kind, job.nice);
    // Only btrfs's lseek waits for the directory's readers.
    let meet = (kind == BTRFS_SUPER_MAGIC).then(|| SeeksFirst::new(SEEKS_WAIT));
    let meet = meet.as_ref();
    std::thread::scope(|s| {
        let mut listers = 0;
        for (start, end) in ranges {
            // A range that cannot get a thread is left out: the prefetch is best effort.
            let spawned = std::thread::Builder::new()
                .stack_size(256 * 1024)
                .spawn_scoped(s, move || {
                    yield_cpu_to_program(nice);
                    let own = job.spare_fd();
                    if let Some(own) = &own {
                        let _ = sys::file::seek_own(own.raw(), start);
                    }
                    if let Some(meet) = meet {
                        meet.sought();
                    }
                    let Some(own) = own else {
                        return;
                    };
                    let mut buf = vec![0u8; getdents_buffer(kind)];
                    let mut part = Vec::new();
                    let mut pos = start;
                    let mut part_start = start;
                    let mut batch_size = FIRST_BATCH;
                    'outer: while !job.stopped() {
                        let mut batch = Vec::new();
                        if getdents(own.raw(), &mut buf, &mut batch) == 0 {
                            break;
                        }
                        if pos == 0
                            && let Some(last) = batch.last()
                        {
                            job.first_batch_end
                                .store(last.next_off as u64, Ordering::Relaxed);
                        }
                        for e in batch {
                            if pos >= end {
                                break 'outer;
                            }
                            pos = e.next_off as u64;
                            part.push(Listed::from(e));
                        }
                        if part.len() >= batch_size {
                            out(part_start, std::mem::take(&mut part));
                            part_start = pos;
                            batch_size = (batch_size * 2).min(STREAM_BATCH);
                        }
                    }
                    out(part_start, part);
                });
            listers += usize::from(spawned.is_ok());
        }
        if let Some(meet) = meet {
            meet.start(listers);
        }
    });
}

// Directory streams with a job, by the program's directory fd, so that closedir can stop
// it. A fixed table of atomics: no lock, nothing that a fork could leave held. Keys are fd
// numbers + 1 (0: free). Each job has the stream's fd and at most one more: a duplicate
// the program made of it, through which it still holds the directory open after the
// stream is closed. fts (`du`, `find`) does just that: it dups the stream's fd, reads the
// directory to its end, closes the stream, then stats every entry through the dup; a job
// stopped at that closedir left `du -s` of a cold 5,000-entry directory on the slow disk
// with nothing prefetched (330 requests, as without the shim). The job stops when the
// program has closed both. Keys are only ever swapped, never a job's pointer read, so a
// close racing a dup of the same fd in another thread at worst stops a job early or lets
// it run to its end (as a job that found the table full does).
const JOBS: usize = 64;
static JOB_FD: [AtomicUsize; JOBS] = [const { AtomicUsize::new(0) }; JOBS];
static JOB_DUP: [AtomicUsize; JOBS] = [const { AtomicUsize::new(0) }; JOBS];
static JOB_PTR: [std::sync::atomic::AtomicPtr<Job>; JOBS] =
    [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; JOBS];
/// The process that registered each slot: a vfork child shares this table with its parent,
/// and its closes (CPython's subprocess closes every fd above 2 with close_range before it
/// execs) are not the parent's.
static JOB_PID: [std::sync::atomic::AtomicI32; JOBS] =
    [const { std::sync::atomic::AtomicI32::new(0) }; JOBS];
/// Slots in use: a close or dup looks at the table only while some job is registered.
static JOBS_LIVE: AtomicUsize = AtomicUsize::new(0);
/// How the program holds each slot's directory; the workers of a job sleep on it (a futex
/// word) while it reads `Held::DupOnly`.
static JOB_HELD: [AtomicHeld; JOBS] = [const { AtomicHeld::new(Held::Stream) }; JOBS];
/// The slots whose `JOB_HELD` reads `Held::DupOnly`, one bit each: a stat, open or unlink
/// looks at the table only while one is set, and then only at those.
static DUP_ONLY: AtomicU64 = AtomicU64::new(0);
const _: () = assert!(JOBS <= 64, "DUP_ONLY has a bit per slot");

/// Slot `i` has left `Held::DupOnly` (the caller set its new state): its bit goes, and its
/// waiting worker wakes.
fn left_dup_only(i: usize) {
    DUP_ONLY.fetch_and(!(1 << i), Ordering::AcqRel);
    sys::thread::futex_wake_all(&JOB_HELD[i].0);
}

fn register(dirfd: i32, job: &Arc<Job>) {
    let raw = Arc::into_raw(job.clone()) as *mut Job;
    for i in 0..JOBS {
        // The slot is taken by its pointer and published by its key last: a close can only
        // find a slot whose pointer is there to take.
        if JOB_PTR[i]
            .compare_exchange(
                std::ptr::null_mut(),
                raw,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            // Before the job learns its slot, so that its workers never read a state the
            // slot's last job left.
            JOB_HELD[i].store(Held::Stream, Ordering::Release);
            DUP_ONLY.fetch_and(!(1 << i), Ordering::AcqRel);
            job.slot.store(i, Ordering::Release);
            JOB_DUP[i].store(0, Ordering::Release);
            JOB_PID[i].store(sys::proc::pid(), Ordering::Release);
            JOBS_LIVE.fetch_add(1, Ordering::AcqRel);
            JOB_FD[i].store(dirfd as usize + 1, Ordering::Release);
            return;
        }
    }
    // Table full: the job runs to its end on its own.
    // SAFETY: `raw` came from Arc::into_raw above and was stored nowhere.
    drop(unsafe { Arc::from_raw(raw) });
}

/// The program is about to sandbox itself: every prefetch stops, and this waits (up to
/// 200 ms) until no worker is left to make a syscall the sandbox might punish.
pub fn shutdown() {
    STOP.store(true, Ordering::SeqCst);
    for held in &JOB_HELD {
        sys::thread::futex_wake_all(&held.0);
    }
    super::wait_until_stopped(200, || WORKERS.load(Ordering::SeqCst) == 0);
}

/// In a forked child: the table is the parent's (its jobs' threads are not here), and a
/// close, dup, stat or open would otherwise look through it for good.
pub fn after_fork_child() {
    reset_counters();
    for i in 0..JOBS {
        JOB_FD[i].store(0, Ordering::Relaxed);
        JOB_DUP[i].store(0, Ordering::Relaxed);
        JOB_PID[i].store(0, Ordering::Relaxed);
        JOB_HELD[i].store(Held::Stream, Ordering::Relaxed);
        // The parent's jobs are left to leak: their memory is only a copy here.
        JOB_PTR[i].store(std::ptr::null_mut(), Ordering::Relaxed);
    }
    DUP_ONLY.store(0, Ordering::Relaxed);
    JOBS_LIVE.store(0, Ordering::Release);
}

/// The program duplicated `old` as `new` (dup, dup2, dup3, F_DUPFD): where `old` is a
/// directory stream's fd with a job, `new` keeps the job going after the stream is closed.
pub fn duplicated(old: i32, new: i32) {
    if JOBS_LIVE.load(Ordering::Acquire) == 0 || old < 0 || new < 0 {
        return;
    }
    let (old, new) = (old as usize + 1, new as usize + 1);
    let mut pid = None;
    for i in 0..JOBS {
        if (JOB_FD[i].load(Ordering::Acquire) == old || JOB_DUP[i].load(Ordering::Acquire) == old)
            && ours(i, &mut pid)
        {
            let _ = JOB_DUP[i].compare_exchange(0, new, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// Called before the program closes `fd` (closedir, close, dup2 onto it, close_range): a
/// job whose directory the program no longer holds open through any fd stops.
pub fn closing(fd: i32) {
    if fd >= 0 {
        closing_range(fd as u32, fd as u32);
    }
}

/// `closing` for every fd in `lo..=hi`.
pub fn closing_range(lo: u32, hi: u32) {
    if JOBS_LIVE.load(Ordering::Acquire) == 0 {
        return;
    }
    let within = |key: usize| key != 0 && (lo as usize + 1..=hi as usize + 1).contains(&key);
    let mut pid = None;
    for i in 0..JOBS {
        let (key, dup) = (
            JOB_FD[i].load(Ordering::Acquire),
            JOB_DUP[i].load(Ordering::Acquire),
        );
        if !(within(key) || within(dup)) || !ours(i, &mut pid) {
            continue;
        }
        if !within(key) {
            // Only the dup goes.
            JOB_DUP[i].store(0, Ordering::Release);
            continue;
        }
        // The stream goes; a duplicate still open takes its place as the job's key.
        let dup = JOB_DUP[i].swap(0, Ordering::AcqRel);
        if dup != 0 && !within(dup) {
            JOB_FD[i].store(dup, Ordering::Release);
            let held = match JOB_HELD[i].compare_exchange(
                Held::Stream,
                Held::DupOnly,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    DUP_ONLY.fetch_or(1 << i, Ordering::AcqRel);
                    Held::DupOnly
                }
                Err(held) => held,
            };
            crate::debug!(
                "directory prefetch: the stream is closed, fd {} still holds the directory: {}",
                dup - 1,
                if held == Held::FilesUsed {
                    "the prefetch goes on"
                } else {
                    "only directories until the program uses a file through it"
                }
            );
            continue;
        }
        JOB_FD[i].store(0, Ordering::Release);
        let p = JOB_PTR[i].swap(std::ptr::null_mut(), Ordering::AcqRel);
        if !p.is_null() {
            JOBS_LIVE.fetch_sub(1, Ordering::AcqRel);
            // SAFETY: the pointer came from Arc::into_raw in `register`; whoever swaps it
            // out of its slot owns it, and the swap above took it.
            let job = unsafe { Arc::from_raw(p) };
            job.cancel.store(true, Ordering::Relaxed);
            job.ready.notify_all();
            // Unless another job took the slot meanwhile (`register` sets its state first).
            if JOB_PTR[i].load(Ordering::Acquire).is_null() {
                JOB_HELD[i].store(Held::Stream, Ordering::Release);
                left_dup_only(i);
            } else {
                sys::thread::futex_wake_all(&JOB_HELD[i].0);
            }
        }
    }
}

/// Whether some job waits for the program to use a file through its dup (`Held::DupOnly`):
/// only then may a stat, an open or an unlink matter here.
#[inline]
pub fn watching_entries() -> bool {
    DUP_ONLY.load(Ordering::Acquire) != 0
}

/// The program statted, opened or removed an entry other than a directory through `dirfd`
/// (fstatat, statx, openat, unlinkat): where that is a job's stream or its dup, the program is
/// using what it listed, and the entries held back since the stream was closed are statted
/// too (see `Held::DupOnly`).
pub fn file_used(dirfd: i32) {
    if dirfd < 0 {
        return;
    }
    let key = dirfd as usize + 1;
    let mut pid = None;
    let mut waiting = DUP_ONLY.load(Ordering::Acquire);
    while waiting != 0 {
        let i = waiting.trailing_zeros() as usize;
        waiting &= waiting - 1;
        if (JOB_FD[i].load(Ordering::Acquire) != key && JOB_DUP[i].load(Ordering::Acquire) != key)
            || !ours(i, &mut pid)
        {
            continue;
        }
        if JOB_HELD[i]
            .compare_exchange(
                Held::DupOnly,
                Held::FilesUsed,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
        {
            crate::debug!(
                "directory prefetch: the program uses the entries through fd {dirfd}: the \
                 stats go on"
            );
            left_dup_only(i);
        }
    }
}

/// Whether slot `i` was registered by this process (see `JOB_PID`); `pid` caches getpid
/// over one call.
fn ours(i: usize, pid: &mut Option<i32>) -> bool {
    JOB_PID[i].load(Ordering::Acquire) == *pid.get_or_insert_with(sys::proc::pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry named after its inode number; `dir` for a directory.
    fn listed(ino: u64, dir: bool) -> Listed {
        Listed {
            ino,
            name: CString::new(format!("f{ino}")).unwrap(),
            dir,
        }
    }

    fn batch(inos: &[u64]) -> VecDeque<Run> {
        runs_of(inos.iter().map(|&i| listed(i, false)).collect(), RUN)
    }

    fn drain(q: &mut Runs) -> Vec<u64> {
        std::iter::from_fn(|| q.pop())
            .flatten()
            .map(|e| e.ino)
            .collect()
    }

    #[test]
    fn only_directories_until_the_program_uses_a_file_then_the_rest_first() {
        let mut q = Runs::default();
        let run =
            |inos: &[(u64, bool)]| -> Run { inos.iter().map(|&(i, d)| listed(i, d)).collect() };
        let inos = |run: Option<Run>| run.map(|r| r.iter().map(|e| e.ino).collect::<Vec<u64>>());
        let dirs = q.servable(run(&[(3, false), (4, true), (5, false)]), true, false);
        assert_eq!(inos(dirs), Some(vec![4]));
        assert_eq!(
            inos(q.servable(run(&[(6, false), (7, false)]), true, false)),
            None
        );
        assert_eq!(inos(q.servable(run(&[(8, false)]), true, true)), None);
        // Not dirs only: the run whole, nothing held back.
        let all = q.servable(run(&[(9, false), (10, true)]), false, false);
        assert_eq!(inos(all), Some(vec![9, 10]));
        q.batches.push((0, batch(&[100, 101])));
        q.release_held_back();
        q.sort_by_inode(RUN, 1);
        assert_eq!(drain(&mut q), [3, 5, 6, 7, 100, 101]);
        // Back where they came from: xfs's `rest` is served apart (see `XFS_REST_THREADS`).
        let rest: Vec<u64> = std::iter::from_fn(|| pop_lowest(&mut q.rest))
            .flatten()
            .map(|e| e.ino)
            .collect();
        assert_eq!(rest, [8]);
        // Nothing held back: nothing queued.
        q.release_held_back();
        assert!(q.batches.is_empty() && q.rest.is_empty());
    }

    /// A job on `dir` with `entries` listed, as `opened` would make it for one thread.
    fn test_job(dir: &std::fs::File, entries: Run) -> Arc<Job> {
        use std::os::fd::AsRawFd;
        let job = Arc::new(Job {
            fd: own_dir_fd(dir.as_raw_fd()).unwrap(),
            nice: false,
            spare_fds: Mutex::new(Vec::new()),
            kind: 0,
            device: None,
            read_chunk: 0,
            threads: 1,
            cancel: AtomicBool::new(false),
            queue: Mutex::new(Runs::default()),
            ready: Condvar::new(),
            started: Instant::now(),
            logged_end: AtomicBool::new(false),
            xfs_walk: false,
            listing_first: false,
            runs_taken: AtomicUsize::new(0),
            rest_takers: AtomicUsize::new(0),
            inode_reads: AtomicInodeReads::new(InodeReads::Lookup),
            walk_done: AtomicBool::new(true),
            joined: AtomicUsize::new(0),
            program_pos: None,
            offsets_end: AtomicU64::new(0),
            program_listed: AtomicBool::new(false),
            program_at: AtomicU64::new(0),
            program_moved_ms: AtomicU64::new(0),
            first_batch_end: AtomicU64::new(u64::MAX),
            probing: AtomicBool::new(false),
            btrfs_listing: BtrfsListing::Seeks,
            was_paused: AtomicBool::new(false),
            watching: AtomicBool::new(false),
            slot: AtomicUsize::new(usize::MAX),
            waiter: AtomicBool::new(false),
            respawn: AtomicBool::new(false),
        });
        job.queue(0, entries);
        job.queue.lock().unwrap().listing_done = true;
        job
    }

    /// fts's way: the stream's fd is dup'ed, the stream closed, the entries used through
    /// the dup. (The table is global: this is its only test.)
    #[test]
    fn after_the_closedir_directories_until_a_file_is_used_through_the_dup() {
        use std::os::fd::AsRawFd;
        let inos = |r: Option<(Run, InodeReads)>| {
            r.map(|(r, _)| r.iter().map(|e| e.ino).collect::<Vec<u64>>())
        };
        let dir = std::fs::File::open(std::env::temp_dir()).unwrap();
        let dup = dir.try_clone().unwrap();
        let (stream, dup) = (dir.as_raw_fd(), dup.as_raw_fd());
        let job = test_job(
            &dir,
            vec![listed(1, false), listed(2, true), listed(3, false)],
        );
        register(stream, &job);
        duplicated(stream, dup);
        assert!(!watching_entries(), "the stream still holds it");
        closing(stream);
        assert!(watching_entries());
        assert_eq!(job.held(), Held::DupOnly);
        // Used through some other fd: nothing changes.
        file_used(dup + 100);
        assert_eq!(job.held(), Held::DupOnly);
        let mut rest = false;
        assert_eq!(inos(job.next_run(&mut rest, 0)), Some(vec![2]));
        // Nothing left but what is held back: this worker waits for the program's first
        // use of a file, another one asked meanwhile leaves.
        std::thread::scope(|s| {
            let waiter = s.spawn(|| inos(job.next_run(&mut false, 1)));
            while !job.waiter.load(Ordering::Acquire) {
                std::thread::yield_now();
            }
            assert_eq!(inos(job.next_run(&mut false, 2)), None);
            file_used(dup);
            let deadline = Instant::now() + std::time::Duration::from_secs(5);
            while !waiter.is_finished() && Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let woke = waiter.is_finished();
            if !woke {
                closing(dup); // lets it go, to fail rather than hang
            }
            assert!(
                woke,
                "the program's first use of a file wakes the waiting worker"
            );
            assert_eq!(waiter.join().unwrap(), Some(vec![1, 3]));
        });
        assert_eq!(job.held(), Held::FilesUsed);
        assert!(
            job.respawn.load(Ordering::Acquire),
            "the workers that left are asked for again"
        );
        assert!(!watching_entries());
        // The dup closed: the job stops.
        closing(dup);
        assert!(job.stopped());
        assert_eq!(inos(job.next_run(&mut rest, 0)), None);
        assert!(!registered_job(&job));
    }

    fn registered_job(job: &Arc<Job>) -> bool {
        JOB_PTR
            .iter()
            .any(|p| std::ptr::eq(p.load(Ordering::Acquire), Arc::as_ptr(job)))
    }

    #[test]
    fn batches_go_in_reading_order_until_sorted_by_inode() {
        let mut q = Runs::default();
        q.batches.push((4096, batch(&[5, 9])));
        q.batches.push((0, batch(&[7, 300])));
        assert_eq!(drain(&mut q), [7, 300, 5, 9]);

        q.batches.push((4096, batch(&[5, 9])));
        q.batches.push((0, batch(&[7, 300])));
        q.rest.push((0, batch(&[8, 301])));
        q.rest.push((4096, batch(&[6])));
        q.sort_by_inode(RUN, 1);
        assert_eq!(drain(&mut q), [5, 7, 9, 300]);
        let rest: Vec<u64> = std::iter::from_fn(|| pop_lowest(&mut q.rest))
            .flatten()
            .map(|e| e.ino)
            .collect();
        assert_eq!(rest, [6, 8, 301]);
    }

    #[test]
    fn one_first_per_inode_cluster_across_batches() {
        let mut q = Runs::default();
        let names = |inos: &[u64]| -> Run { inos.iter().map(|&i| listed(i, false)).collect() };
        let inos = |run: &Run| run.iter().map(|e| e.ino).collect::<Vec<u64>>();
        let (firsts, rest) = q.split_firsts(names(&[16, 17, 40, 64]), false);
        assert_eq!((inos(&firsts), inos(&rest)), (vec![16, 40, 64], vec![17]));
        // A later batch with entries of the same clusters: only the new cluster's first.
        let (firsts, rest) = q.split_firsts(names(&[18, 41, 100]), false);
        assert_eq!((inos(&firsts), inos(&rest)), (vec![100], vec![18, 41]));
        let (firsts, rest) = q.split_firsts(names(&[19, 128]), true);
        assert_eq!((inos(&firsts), inos(&rest)), (vec![128], vec![19, 128]));
        // Clusters below and between those seen, then all of them seen.
        let (firsts, _) = q.split_firsts(names(&[5, 18, 50, 90]), false);
        assert_eq!(inos(&firsts), [5, 50, 90]);
        let (firsts, rest) = q.split_firsts(names(&[0, 31, 32, 63, 80, 111, 143]), false);
        assert!(firsts.is_empty(), "{:?}", inos(&firsts));
        assert_eq!(rest.len(), 7);
    }

    #[test]
    fn sorting_by_inode_keeps_every_entry_across_runs() {
        let mut q = Runs::default();
        let many: Vec<u64> = (0..1000).rev().collect();
        q.batches.push((0, batch(&many[..500])));
        q.batches.push((1, batch(&many[500..])));
        q.sort_by_inode(RUN, 1);
        assert_eq!(q.batches[0].1.front().map(Vec::len), Some(RUN));
        assert_eq!(drain(&mut q), (0..1000).collect::<Vec<u64>>());
    }

    #[test]
    fn ext4_runs_by_inode_span_inode_table_reads() {
        let mut q = Runs::default();
        let many: Vec<u64> = (0..3000).rev().collect();
        q.batches.push((0, batch(&many)));
        q.sort_by_inode(INODE_TABLE_RUN, 2);
        let lens: Vec<usize> = q.batches[0].1.iter().map(Vec::len).collect();
        assert_eq!(
            lens,
            [INODE_TABLE_RUN, INODE_TABLE_RUN, 3000 - 2 * INODE_TABLE_RUN]
        );
        assert_eq!(drain(&mut q), (0..3000).collect::<Vec<u64>>());
        // Fewer entries than the workers' runs of INODE_TABLE_RUN would take: shorter runs,
        // one for every worker, but never under RUN.
        let mut q = Runs::default();
        q.batches.push((0, batch(&many)));
        q.sort_by_inode(INODE_TABLE_RUN, 16);
        assert_eq!(q.batches[0].1.front().map(Vec::len), Some(3000 / 16));
        let mut q = Runs::default();
        q.batches.push((0, batch(&many[..100])));
        q.sort_by_inode(INODE_TABLE_RUN, 16);
        assert_eq!(q.batches[0].1.front().map(Vec::len), Some(RUN));
    }

    #[test]
    fn xfs_hash_matches_xfs_db() {
        // Values printed by `xfs_db -c "hash NAME"`.
        for (name, hash) in [
            ("a", 0x61),
            ("ab", 0x30e2),
            ("abc", 0x18_7163),
            ("abcd", 0xc38_b1e4),
            ("f00012345", 0x702c_1bb6),
            ("lost+found", 0x21a_a60c),
            (".dbbaaaa", 0x2c65_e3f7),
        ] {
            assert_eq!(xfs_hash(name.as_bytes()), hash, "{name}");
        }
    }

    #[test]
    fn xfs_probe_names_hash_to_their_targets() {
        let targets = (0..100_000u32).map(|i| i.wrapping_mul(0x9e37_79b9)).chain([
            0,
            1,
            u32::MAX,
            b'/'.into(),
            0x2f2f_2f2f,
        ]);
        for target in targets {
            let name = xfs_name_for(target);
            assert!(!name.contains(&0) && !name.contains(&b'/'), "{name:?}");
            assert_eq!(xfs_hash(&name), target, "{name:?}");
        }
    }

    #[test]
    fn seeks_first_holds_every_read_until_every_seek() {
        // Patience no loaded machine runs out of: what is tested is the meeting.
        let meet = SeeksFirst::new(std::time::Duration::from_secs(60));
        let sought = AtomicUsize::new(0);
        let early = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for k in 0..8u64 {
                let (meet, sought, early) = (&meet, &sought, &early);
                s.spawn(move || {
                    // Staggered, as threads start: the last seeks 14 ms after the first.
                    std::thread::sleep(std::time::Duration::from_millis(2 * k));
                    sought.fetch_add(1, Ordering::SeqCst);
                    meet.sought();
                    if sought.load(Ordering::SeqCst) < 8 {
                        early.fetch_add(1, Ordering::SeqCst);
                    }
                });
            }
            meet.start(8);
        });
        assert_eq!(
            early.load(Ordering::SeqCst),
            0,
            "a read started before every seek"
        );
    }

    #[test]
    fn seeks_first_lets_the_reads_go_without_a_thread_that_never_came() {
        // Two spawned, one lost: neither the starter nor the other thread hangs.
        let meet = SeeksFirst::new(std::time::Duration::from_millis(10));
        std::thread::scope(|s| {
            s.spawn(|| meet.sought());
            meet.start(2);
        });
        assert_eq!(*meet.state.lock().unwrap(), (1, true));
    }
}
