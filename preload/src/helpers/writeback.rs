//! Writeback: one helper thread that starts the writeback of a write stream's windows,
//! waits until they are clean and drops them, so that the program's own thread never runs
//! the filesystem's writepages, never polls for clean pages and never drains LRU batches.
//! A bounded copy then reads on one CPU while its writes are pushed out from the other,
//! as a plain copy's are by the kernel's flusher.
//!
//! A write stream's job names its file by the program's own fd: a close of that fd (close,
//! dup2 onto it, close_range) and the stream's end wait for its jobs before the program's
//! call goes on (`release_fds`), so the fd names the file for as long as a job may use it (re-checked by
//! (st_dev, st_ino) before use, against closes the shim never sees), and opening nothing
//! leaves the program's fd numbers alone. Through the program's fd the wait polls
//! cachestat: a `sync_file_range` WAIT flag would mark a writeback error as seen on the
//! program's open file. A tree's written file comes with the shim's own held reopening,
//! which the job then owns and closes; on that one the wait is done in the kernel. At most
//! `JOBS` are handed over at once (own fds fewer under a low RLIMIT_NOFILE), and the
//! program waits, in a write as the synchronous path would, while more than `BOUND` bytes
//! are handed over and not yet dropped; at exit it waits for the rest. Whatever the helper can't take (a full queue,
//! no thread, a sandbox coming) the caller does itself, as before.

use super::Helper;
use super::queue::{Empty, Queue};
use crate::policy::Range;
use crate::sys::cache::Settled;
use crate::sys::thread::{self, Woken};
use crate::{stats, sys};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Proven runs one job may drop; a window with more takes the synchronous path.
pub const RUNS: usize = 8;
/// Jobs handed over at once (each holds one fd).
const JOBS: usize = 8;
/// What the jobs in flight may weigh before the program waits (`Job::weight`): one job
/// (window i started, i-1 settling) while the program writes window i+1, one window more
/// than the synchronous path holds. 16 MiB kept 4-5 windows in flight and raised a 2 GiB
/// cp's cgroup peak from 64 to 73 MiB (bench/results/copies-at-the-floor.md).
pub const BOUND: u64 = 6 * crate::config::MIB;
/// How long a wait may take before its drop is given up (the pages stay cached).
const SETTLE_BUDGET_MS: u64 = 30_000;
/// How long the program waits at most for room, or at exit for the rest.
const WAIT_BUDGET_MS: u64 = 30_000;

/// Whose fd a job uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fd {
    /// The program's: never closed, never waited on with a WAIT flag.
    Program,
    /// The shim's own: closed when the job is done.
    Own,
}

#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub fd: i32,
    pub whose: Fd,
    /// For the program's fd: its entry in `PROGRAM_FD` while the job is in flight.
    slot: usize,
    pub dev: u64,
    pub ino: u64,
    /// Start writeback of this range.
    pub start: Option<Range>,
    /// Then wait until this range is clean and drop `runs` of it (the proven parts).
    pub settle: Option<Range>,
    pub runs: [Range; RUNS],
    pub nruns: usize,
}

const NO_RANGE: Range = Range { start: 0, end: 0 };

impl Empty for Job {
    const EMPTY: Job = Job {
        fd: -1,
        whose: Fd::Program,
        slot: usize::MAX,
        dev: 0,
        ino: 0,
        start: None,
        settle: None,
        runs: [NO_RANGE; RUNS],
        nruns: 0,
    };
}

impl Job {
    /// The job for `start` and `settle` on the program's `fd` (still naming dev, ino),
    /// with the proven runs of `settle`; `None` when it can't be handed over (a full queue,
    /// too many runs): the caller does the work itself.
    pub fn new(
        fd: i32,
        dev: u64,
        ino: u64,
        start: Option<Range>,
        settle: Option<Range>,
        runs: impl Iterator<Item = Range>,
    ) -> Option<Job> {
        if HELPER.stopping() || HELPER.failed() || IN_FLIGHT.load(Ordering::Relaxed) >= JOBS {
            return None;
        }
        let mut job = Job {
            fd,
            dev,
            ino,
            start,
            settle,
            ..Job::EMPTY
        };
        for r in runs {
            if job.nruns == RUNS {
                return None;
            }
            job.runs[job.nruns] = r;
            job.nruns += 1;
        }
        Some(job)
    }

    /// What the job counts against `BOUND`: the bytes it names (a window is named by the
    /// job that starts it and by the one that settles it).
    /// As `new`, on an fd already the shim's own (a tree's held reopening), which the job
    /// then owns. `None` (the fd still the caller's) when the helper can't take more.
    pub fn own(fd: i32, dev: u64, ino: u64, whole: Range) -> Option<Job> {
        if HELPER.stopping()
            || HELPER.failed()
            || IN_FLIGHT.load(Ordering::Relaxed) >= JOBS
            || OWN_IN_FLIGHT.load(Ordering::Relaxed) >= own_limit()
        {
            return None;
        }
        let mut job = Job {
            fd,
            whose: Fd::Own,
            dev,
            ino,
            start: Some(whole),
            settle: Some(whole),
            ..Job::EMPTY
        };
        job.runs[0] = whole;
        job.nruns = 1;
        Some(job)
    }

    fn weight(&self) -> u64 {
        self.start.map_or(0, |r| r.len()) + self.settle.map_or(0, |r| r.len())
    }
}

static QUEUE_: Queue<Job, JOBS> = Queue::new();
static HELPER: Helper = Helper::new("dropbehind-wb", 64 * 1024);
static SLEEPING: AtomicBool = AtomicBool::new(false);
/// Jobs handed over and not done, and how many of them hold an fd of the shim's own.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static OWN_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// The program's fds that jobs in flight use (-1: a free entry): a close of one of them
/// waits for those jobs first.
static PROGRAM_FD: [AtomicI32; JOBS] = [const { AtomicI32::new(-1) }; JOBS];
static PROGRAM_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// What the jobs in flight weigh (`Job::weight`).
static PENDING: AtomicU64 = AtomicU64::new(0);
/// Bumped after every job: the futex a waiting program thread sleeps on.
static DONE: AtomicU32 = AtomicU32::new(0);
/// The fds of the batch the helper took from the queue and has not closed yet (a forked
/// child closes its copies).
static TAKEN: [AtomicI32; JOBS] = [const { AtomicI32::new(-1) }; JOBS];
/// Program threads in `wait_until`: only then does a finished job make a wake-up call.
static WAITERS: AtomicUsize = AtomicUsize::new(0);
static OWN_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

const IDLE_EXIT: libc::timespec = libc::timespec {
    tv_sec: 1,
    tv_nsec: 0,
};

fn own_limit() -> usize {
    super::own_fds_allowed(&OWN_LIMIT, JOBS)
}

/// Hands `job` to the helper thread (started when needed). False when it can't be taken:
/// the caller does the work itself (and keeps its fd).
pub fn hand_over(mut job: Job) -> bool {
    if job.whose == Fd::Program {
        let Some(slot) = (0..JOBS).find(|&i| {
            PROGRAM_FD[i]
                .compare_exchange(-1, job.fd, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            return false;
        };
        job.slot = slot;
        PROGRAM_IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    }
    IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    if job.whose == Fd::Own {
        OWN_IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    }
    PENDING.fetch_add(job.weight(), Ordering::AcqRel);
    if HELPER.stopping() || HELPER.failed() || !QUEUE_.push(job) {
        undo(&job);
        return false;
    }
    if !HELPER.start(run) {
        HELPER.wake(SLEEPING.load(Ordering::SeqCst));
    }
    if HELPER.failed() {
        // The thread could not be started; whatever it did not take is done here.
        while let Some(j) = QUEUE_.pop() {
            perform(&[j]);
        }
    }
    true
}

fn undo(j: &Job) {
    PENDING.fetch_sub(j.weight(), Ordering::AcqRel);
    match j.whose {
        Fd::Own => {
            OWN_IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
        }
        Fd::Program => {
            PROGRAM_FD[j.slot].store(-1, Ordering::Release);
            PROGRAM_IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
        }
    }
    IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
}

/// Before the program closes fds `lo..=hi` (close, dup2 onto one, close_range) or a write
/// stream on one ends: waits for the jobs that use them, which then no longer name a file
/// the program may reopen on that number. Free when no job uses a program's fd.
pub fn release_fds(lo: u32, hi: u32) {
    if PROGRAM_IN_FLIGHT.load(Ordering::Acquire) == 0 {
        return;
    }
    let uses = || {
        PROGRAM_FD.iter().any(|s| {
            let fd = s.load(Ordering::Acquire);
            fd >= 0 && (lo..=hi).contains(&(fd as u32))
        })
    };
    wait_until(|| !uses());
}

/// From a program's write: waits while more than `BOUND` bytes are under way, so a fast
/// writer stays bounded. Gives up (fail open: the writer goes on) after the budget.
pub fn wait_for_room() {
    wait_until(|| PENDING.load(Ordering::Acquire) <= BOUND);
}

/// At a stream's end (before the program's close goes on: its jobs use the program's fd)
/// and at exit: waits until every job in flight is done.
pub fn drain() {
    wait_until(|| IN_FLIGHT.load(Ordering::Acquire) == 0);
}

fn wait_until(done: impl Fn() -> bool) {
    const NAP: libc::timespec = libc::timespec {
        tv_sec: 0,
        tv_nsec: 20_000_000,
    };
    if done() {
        return;
    }
    WAITERS.fetch_add(1, Ordering::SeqCst);
    let mut waited_ms = 0;
    while !done() && HELPER.running() && waited_ms < WAIT_BUDGET_MS {
        // Read before the condition: a job done in between changes it, and the wait
        // returns at once.
        let seen = DONE.load(Ordering::SeqCst);
        if done() {
            break;
        }
        if thread::futex_wait(&DONE, seen, Some(&NAP)) == Woken::TimedOut {
            waited_ms += 20;
        }
    }
    WAITERS.fetch_sub(1, Ordering::SeqCst);
}

/// The shim is being disabled (a sandbox is coming): the thread stops making system
/// calls; jobs it did not take are given up (their pages stay cached, as without the
/// shim) and their own fds closed.
pub fn shutdown() {
    HELPER.shutdown();
    while let Some(j) = QUEUE_.pop() {
        close_if_own(&j);
        done(&j);
    }
}

fn close_if_own(j: &Job) {
    if j.whose == Fd::Own {
        sys::file::close_own(j.fd);
    }
}

fn run() {
    let mut batch = [Job::EMPTY; JOBS];
    while !HELPER.stopping() {
        let n = take(&mut batch);
        if n > 0 {
            perform(&batch[..n]);
            continue;
        }
        SLEEPING.store(true, Ordering::SeqCst);
        let seen = HELPER.seen();
        let n = take(&mut batch);
        if n > 0 {
            SLEEPING.store(false, Ordering::SeqCst);
            perform(&batch[..n]);
            continue;
        }
        let woken = HELPER.sleep(seen, &IDLE_EXIT);
        SLEEPING.store(false, Ordering::SeqCst);
        // A job queued just before the exit saw a running thread and started none.
        if woken == Woken::TimedOut && QUEUE_.is_empty() && !HELPER.idle_exit(|| !QUEUE_.is_empty())
        {
            break;
        }
    }
}

/// Everything queued, up to a batch.
fn take(batch: &mut [Job; JOBS]) -> usize {
    let mut n = 0;
    while n < JOBS
        && let Some(j) = QUEUE_.pop()
    {
        if j.whose == Fd::Own {
            TAKEN[n].store(j.fd, Ordering::SeqCst);
        }
        batch[n] = j;
        n += 1;
    }
    n
}

/// Starts the writeback of every job first, so the device has all of it queued, then
/// settles them in order. Every job is done (its own fd closed, its bytes released)
/// whatever happens, so a waiting program never waits for one that failed.
fn perform(jobs: &[Job]) {
    let mut ours = [false; JOBS];
    for (j, ours) in jobs.iter().zip(ours.iter_mut()) {
        // The program's fd after a close the shim did not see, or our own after a program
        // closed numbers it never opened (close_range, a close loop): it may name anything.
        *ours = sys::file::identify(j.fd).is_ok_and(|id| id.dev == j.dev && id.ino == j.ino);
        if *ours
            && !HELPER.stopping()
            && let Some(r) = j.start
        {
            let _ = sys::cache::start_writeback(j.fd, r.start, r.len());
        }
    }
    for (i, (j, &ours)) in jobs.iter().zip(ours.iter()).enumerate() {
        if ours
            && !HELPER.stopping()
            && let Some(r) = j.settle
        {
            let _ = std::panic::catch_unwind(|| settle(j, r));
        }
        TAKEN[i].store(-1, Ordering::SeqCst);
        if ours {
            close_if_own(j);
        }
        done(j);
    }
}

fn settle(j: &Job, r: Range) {
    // On our own fd the wait is done in the kernel (no polling); a writeback error it meets
    // is marked seen on our open file only. On the program's, and where that fails,
    // cachestat tells.
    if j.whose != Fd::Own || sys::cache::write_and_wait_own(j.fd, r.start, r.len()).is_err() {
        let settled = sys::cache::wait_clean(j.fd, r.start, r.len(), SETTLE_BUDGET_MS, || {
            !HELPER.stopping()
        });
        if settled != Settled::Clean {
            stats::SETTLE_TIMEOUTS.add(1);
        }
    }
    // A sandbox may have come while we waited: no more system calls but the close.
    if HELPER.stopping() {
        return;
    }
    // DONTNEED drops what is clean and leaves the rest.
    crate::proof::drop_runs(j.fd, &j.runs[..j.nruns]);
}

fn done(j: &Job) {
    undo(j);
    DONE.fetch_add(1, Ordering::SeqCst);
    if WAITERS.load(Ordering::SeqCst) > 0 {
        thread::futex_wake(&DONE);
    }
}

/// In a forked child: no helper thread exists there; the jobs' own fds are the child's
/// copies, closed (the program's stay the program's).
pub fn after_fork_child() {
    while let Some(j) = QUEUE_.pop() {
        close_if_own(&j);
    }
    // The batch the helper had taken: the child's copies of its fds.
    for fd in &TAKEN {
        let fd = fd.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            sys::file::close_own(fd);
        }
    }
    QUEUE_.reset();
    WAITERS.store(0, Ordering::Relaxed);
    IN_FLIGHT.store(0, Ordering::Relaxed);
    OWN_IN_FLIGHT.store(0, Ordering::Relaxed);
    PROGRAM_IN_FLIGHT.store(0, Ordering::Relaxed);
    for s in &PROGRAM_FD {
        s.store(-1, Ordering::Relaxed);
    }
    PENDING.store(0, Ordering::Relaxed);
    SLEEPING.store(false, Ordering::Relaxed);
    HELPER.after_fork_child();
}
