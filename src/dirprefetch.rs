//! Directory inode prefetch: when a program opens a big directory whose inodes are not
//! cached, list it on our own fd, sort the entries by inode number and stat them from a few
//! threads, so that the program's own lstat/statx calls (ls -l, du, find, rsync) find the
//! inodes cached or already on their way.
//!
//! What matters, measured by a prototype on a 2 ms-per-request disk (see
//! ../shared/notes/dir-prefetch.md): parallel stats (16 threads is about a device's queue
//! depth); on ext4 also listing the directory in parallel, since its readdir reads one block
//! at a time (16 fds seek to evenly spaced htree hash positions); small getdents buffers on
//! xfs; and a cheap probe, so that a warm directory costs nothing.
//!
//! The program's directory stream is never touched: readdir results and their order are
//! what they would be. Threads are created with every signal blocked, hold only fds of our
//! own (close-on-exec, moved above the program's), stop when the program closes the
//! directory, and never delay exit (they are detached).

use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

const EXT4_SUPER_MAGIC: i64 = 0xEF53;
const XFS_SUPER_MAGIC: i64 = 0x5846_5342;

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

/// Worker threads alive in this process, across all directories.
static WORKERS: AtomicUsize = AtomicUsize::new(0);
const MAX_WORKERS: usize = 64;
/// Entries (sorted by inode) a worker takes at a time.
const RUN: usize = 64;

/// A probe stat slower than this means the inode came from the device.
const PROBE_COLD_US: u128 = 30;

struct Job {
    fd: OwnFd,
    cancel: AtomicBool,
    next: AtomicUsize,
    entries: std::sync::OnceLock<Vec<(u64, CString)>>,
    /// When the stat pass began (for the debug log).
    started: std::sync::OnceLock<Instant>,
}

/// An fd of our own, closed when dropped.
struct OwnFd(i32);

impl Drop for OwnFd {
    fn drop(&mut self) {
        // SAFETY: our own fd.
        unsafe { libc::syscall(libc::SYS_close, self.0) };
    }
}

/// Opens `.` of `dirfd` as a new fd of ours, close-on-exec and above the numbers the program
/// is likely to use, so that its own next open gets the number it would have got.
fn own_dir_fd(dirfd: i32) -> Option<OwnFd> {
    // SAFETY: raw openat of "." relative to a directory fd.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            dirfd,
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            0,
        )
    } as i32;
    if fd < 0 {
        return None;
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes `lim`.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let floor = (lim.rlim_cur.min(1 << 20) as i64 - 256).max(64);
    // SAFETY: plain fcntl on our own fd.
    let high = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, floor) } as i32;
    // SAFETY: closing our own low fd.
    unsafe { libc::syscall(libc::SYS_close, fd) };
    (high >= 0).then_some(OwnFd(high))
}

/// One getdents64 batch: (inode, name, d_off) of each entry but "." and "..".
fn getdents(fd: i32, buf: &mut [u8], out: &mut Vec<(u64, CString, i64)>) -> isize {
    // SAFETY: the kernel writes at most buf.len() bytes.
    let n =
        unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) } as isize;
    let mut at = 0usize;
    while n > 0 && at + 19 <= n as usize {
        let ino = u64::from_ne_bytes(buf[at..at + 8].try_into().unwrap());
        let off = i64::from_ne_bytes(buf[at + 8..at + 16].try_into().unwrap());
        let reclen = u16::from_ne_bytes(buf[at + 16..at + 18].try_into().unwrap()) as usize;
        if reclen == 0 {
            break;
        }
        let name = &buf[at + 19..at + reclen];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if name != b"." && name != b".." {
            if let Ok(c) = CString::new(name) {
                out.push((ino, c, off));
            }
        }
        at += reclen;
    }
    n
}

fn fs_type(fd: i32) -> i64 {
    // SAFETY: fstatfs writes `st`.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::syscall(libc::SYS_fstatfs, fd, &mut st as *mut libc::statfs) } != 0 {
        return 0;
    }
    st.f_type as i64
}

fn statx_nofollow(dirfd: i32, name: &CString) -> bool {
    // SAFETY: `stx` is written by the kernel.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe {
        libc::syscall(
            libc::SYS_statx,
            dirfd,
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS,
            &mut stx as *mut libc::statx,
        )
    };
    r == 0
}

/// Called after the program opened a directory stream on `dirfd`. True when the directory
/// was big enough to look at (prefetched, or found warm).
pub fn opened(dirfd: i32, cfg: &DirConfig) -> bool {
    if !cfg.enabled {
        return false;
    }
    // SAFETY: fstat writes `st`.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::syscall(libc::SYS_fstat, dirfd, &mut st as *mut libc::stat) } != 0 {
        return false;
    }
    // Directory sizes run from ~20 (btrfs, tmpfs) to ~40 (ext4, xfs) bytes per entry.
    if (st.st_size as u64) / 20 < cfg.min_entries {
        return false;
    }
    let Some(fd) = own_dir_fd(dirfd) else {
        return false;
    };
    if !probe_is_cold(fd.0) {
        DIRS_WARM.fetch_add(1, Ordering::Relaxed);
        return true;
    }
    let job = Arc::new(Job {
        fd,
        cancel: AtomicBool::new(false),
        next: AtomicUsize::new(0),
        entries: std::sync::OnceLock::new(),
        started: std::sync::OnceLock::new(),
    });
    if spawn(job.clone(), cfg.threads, true) {
        DIRS_PREFETCHED.fetch_add(1, Ordering::Relaxed);
        register(dirfd, job);
    }
    true
}

/// The probe: stat 8 entries spread over the first batch; the directory is cold when the
/// second slowest of them took longer than a cached inode can.
fn probe_is_cold(fd: i32) -> bool {
    let mut buf = vec![0u8; 32 * 1024];
    let mut entries = Vec::new();
    getdents(fd, &mut buf, &mut entries);
    // SAFETY: rewind our own fd for the listing.
    unsafe { libc::syscall(libc::SYS_lseek, fd, 0i64, libc::SEEK_SET) };
    if entries.len() < 8 {
        return false;
    }
    let mut times: Vec<u128> = (0..8)
        .map(|i| {
            let (_, name, _) = &entries[i * entries.len() / 8];
            let t = Instant::now();
            statx_nofollow(fd, name);
            t.elapsed().as_micros()
        })
        .collect();
    times.sort_unstable();
    times[6] >= PROBE_COLD_US
}

/// Starts a detached thread with every signal blocked. `leader`: it lists the directory,
/// then starts the other workers.
fn spawn(job: Arc<Job>, threads: usize, leader: bool) -> bool {
    if WORKERS.fetch_add(1, Ordering::AcqRel) >= MAX_WORKERS {
        WORKERS.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    // SAFETY: signal masks of this thread, restored right after the spawn.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let spawned = std::thread::Builder::new()
        .name("dropbehind-dir".into())
        .stack_size(256 * 1024)
        .spawn(move || {
            if leader {
                let t0 = Instant::now();
                let entries = list(job.fd.0, threads);
                crate::debug!(
                    "directory prefetch: {} entries listed in {} ms",
                    entries.len(),
                    t0.elapsed().as_millis()
                );
                let _ = job.started.set(Instant::now());
                INODES_WARMED.fetch_add(entries.len(), Ordering::Relaxed);
                let _ = job.entries.set(entries);
                for _ in 1..threads {
                    if job.cancel.load(Ordering::Relaxed) || !spawn(job.clone(), threads, false) {
                        break;
                    }
                }
            }
            work(&job);
            WORKERS.fetch_sub(1, Ordering::AcqRel);
        })
        .is_ok();
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if !spawned {
        WORKERS.fetch_sub(1, Ordering::AcqRel);
    }
    spawned
}

fn work(job: &Job) {
    let Some(entries) = job.entries.get() else {
        return;
    };
    // Runs of neighbouring inodes per thread: threads taking one entry at a time all wait
    // on the same inode block, which keeps one read in flight instead of one per thread.
    while !job.cancel.load(Ordering::Relaxed) {
        let first = job.next.fetch_add(RUN, Ordering::Relaxed);
        if first >= entries.len() {
            break;
        }
        if first + RUN >= entries.len() {
            if let Some(t) = job.started.get() {
                crate::debug!(
                    "directory prefetch: last run of stats taken after {} ms",
                    t.elapsed().as_millis()
                );
            }
        }
        for (_, name) in &entries[first..(first + RUN).min(entries.len())] {
            if job.cancel.load(Ordering::Relaxed) {
                return;
            }
            statx_nofollow(job.fd.0, name);
        }
    }
}

/// Every entry of the directory, sorted by inode number (the order of inode tables on disk).
fn list(fd: i32, threads: usize) -> Vec<(u64, CString)> {
    let kind = fs_type(fd);
    let mut all = if kind == EXT4_SUPER_MAGIC && threads > 1 {
        list_ext4_parallel(fd, threads)
    } else {
        Vec::new()
    };
    if all.is_empty() {
        // xfs: readdir readahead is defeated by big getdents buffers (4 KiB: 0.44 s for
        // 100k entries; 64 KiB: 1.7 s).
        let size = if kind == XFS_SUPER_MAGIC {
            4096
        } else {
            32 * 1024
        };
        let mut buf = vec![0u8; size];
        let mut batch = Vec::new();
        while getdents(fd, &mut buf, &mut batch) > 0 {}
        all = batch.into_iter().map(|(i, n, _)| (i, n)).collect();
    }
    all.sort_unstable_by_key(|e| e.0);
    all.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    all
}

/// ext4 reads a directory one block at a time, without readahead. On htree directories the
/// getdents offsets are hash positions in [0, 2^63): each thread seeks its own fd to an
/// evenly spaced position and lists up to the next one.
fn list_ext4_parallel(fd: i32, threads: usize) -> Vec<(u64, CString)> {
    let span = (1u64 << 63) / threads as u64;
    let parts: Vec<Vec<(u64, CString)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads as u64)
            .map(|i| {
                s.spawn(move || {
                    let Some(own) = own_dir_fd(fd) else {
                        return Vec::new();
                    };
                    let (start, end) = (
                        i * span,
                        if i + 1 == threads as u64 {
                            u64::MAX
                        } else {
                            (i + 1) * span
                        },
                    );
                    // SAFETY: seeking our own fd.
                    unsafe { libc::syscall(libc::SYS_lseek, own.0, start as i64, libc::SEEK_SET) };
                    let mut buf = vec![0u8; 32 * 1024];
                    let mut out = Vec::new();
                    let mut pos = start;
                    'outer: loop {
                        let mut batch = Vec::new();
                        if getdents(own.0, &mut buf, &mut batch) <= 0 {
                            break;
                        }
                        for (ino, name, off) in batch {
                            if pos >= end {
                                break 'outer;
                            }
                            out.push((ino, name));
                            pos = off as u64;
                        }
                    }
                    out
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    parts.into_iter().flatten().collect()
}

// Directory streams with a job, by the program's directory fd, so that closedir can stop
// it. A fixed table of atomics: no lock, nothing that a fork could leave held.
const JOBS: usize = 64;
static JOB_FD: [AtomicUsize; JOBS] = [const { AtomicUsize::new(0) }; JOBS];
static JOB_PTR: [std::sync::atomic::AtomicPtr<Job>; JOBS] =
    [const { std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()) }; JOBS];

fn register(dirfd: i32, job: Arc<Job>) {
    let key = dirfd as usize + 1;
    for i in 0..JOBS {
        if JOB_FD[i]
            .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            JOB_PTR[i].store(Arc::into_raw(job) as *mut Job, Ordering::Release);
            return;
        }
    }
    // Table full: the job runs to its end on its own.
}

/// Called before the program closes the directory stream on `dirfd`: its job stops.
pub fn closing(dirfd: i32) {
    let key = dirfd as usize + 1;
    for i in 0..JOBS {
        if JOB_FD[i].load(Ordering::Acquire) == key {
            let p = JOB_PTR[i].swap(std::ptr::null_mut(), Ordering::AcqRel);
            JOB_FD[i].store(0, Ordering::Release);
            if !p.is_null() {
                // SAFETY: the pointer came from Arc::into_raw in `register`, taken once.
                let job = unsafe { Arc::from_raw(p) };
                job.cancel.store(true, Ordering::Relaxed);
            }
        }
    }
}
