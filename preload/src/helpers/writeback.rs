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
//! leaves the program's fd numbers alone. The wait polls cachestat: a `sync_file_range`
//! WAIT flag would mark a writeback error as seen on the file, so that neither the
//! program's open file nor one opened later would report it to fsync (and it sleeps
//! without a bound on a hung device). A tree's written file comes with the shim's own held
//! reopening, which the job then owns and closes, unless the program closes that number
//! first (a close loop, close_range): then the job lets it go untouched. At most
//! `JOBS` are handed over at once (own fds fewer under a low RLIMIT_NOFILE), and the
//! program waits, in a write as the synchronous path would, while the jobs in flight name
//! more than `BOUND_WINDOWS` windows; at exit it waits for the rest. Whatever the helper
//! can't take (a full queue, no thread, a sandbox coming) the caller does itself, as before.

use super::queue::{Empty, Queue};
use super::{Helper, Priority};
use crate::policy::Range;
use crate::sys::cache::Settled;
use crate::sys::thread::{self, Woken};
use crate::{stats, sys};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Proven runs one job may drop; a window with more takes the synchronous path.
pub const RUNS: usize = 8;
/// Jobs handed over at once.
const JOBS: usize = 8;
/// The naps of `linger`: short enough that a program writing a small file every 25 us
/// does not fill the queue meanwhile.
const LINGER_NAP_US: u64 = 200;
const LINGER_NAPS: u32 = 10;
/// How long `linger` waits in all: 2 ms.
const LINGER_SPAN: Duration = Duration::from_micros(LINGER_NAP_US * LINGER_NAPS as u64);
/// What the jobs in flight may weigh, in windows, before the program waits
/// (`Job::weight`): one job (window i started, i-7 settling) while the program writes
/// window i+1, one window more than the synchronous path holds. 16 MiB (8 windows) kept
/// 4-5 windows in flight and raised a 2 GiB cp's cgroup peak from 64 to 73 MiB
/// (bench/results/copies-at-the-floor.md).
const BOUND_WINDOWS: u64 = 3;
/// How long a wait may take before its drop is given up (the pages stay cached).
const SETTLE_BUDGET: Duration = Duration::from_secs(30);
/// How long the program waits at most for room, for a closing fd's jobs, or at exit.
const WAIT_BUDGET: Duration = Duration::from_secs(30);
/// An own fd entry whose number the program closed (see `release_fds`).
const REVOKED: i32 = -2;
/// The helper's nice value. Where a CPU is free (a copy reading on one, its writeback on
/// the other) it changes nothing; where every CPU is taken, the helper gives way, the
/// program waits for room, and a foreground gets the CPU sooner (s50's worst first touch
/// about halved), at the cost of the writer's speed only while no CPU is free (1.7x
/// beside two CPU hogs; nice 19 cost 10x). Figures: bench/results/vm-memory.md.
const HELPER_NICE: i32 = 10;

/// What a job is about to do with its fd (see `Job::usable`).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Use {
    /// Start writeback, or look at what is dirty.
    Look,
    /// Drop pages.
    Drop,
}

/// Whose fd a job uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fd {
    /// The program's: never closed by the shim.
    Program,
    /// The shim's own: closed when the job is done, unless the program closed it first.
    Own,
}

#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub fd: i32,
    pub whose: Fd,
    /// Its entry in `PROGRAM_FD` or `OWN_FD` while the job is in flight.
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

    /// What the job counts against the bound: the bytes it names (a window is named by
    /// the job that starts it and by the one that settles it).
    fn weight(&self) -> u64 {
        self.start.map_or(0, |r| r.len()) + self.settle.map_or(0, |r| r.len())
    }

    fn table(&self) -> &'static [AtomicI32; JOBS] {
        match self.whose {
            Fd::Program => &PROGRAM_FD,
            Fd::Own => &OWN_FD,
        }
    }

    /// Whether the job's fd may still be used: its entry not revoked by a program's close,
    /// and the fd still naming the job's file (a close the shim did not see). `Use::Look`
    /// (start writeback, look at the cache) on an fd of the shim's own trusts the entry:
    /// the hooks revoke it when the program closes that number, and on another file those
    /// calls would only start a writeback or misread a state; the drop always checks.
    fn usable(&self, how: Use) -> bool {
        self.table()[self.slot].load(Ordering::Acquire) == self.fd
            && (how == Use::Look && self.whose == Fd::Own
                || sys::file::identify(self.fd)
                    .is_ok_and(|id| id.dev == self.dev && id.ino == self.ino))
    }
}

static QUEUE_: Queue<Job, JOBS> = Queue::new();
static HELPER: Helper = Helper::new("dropbehind-wb", 64 * 1024, Priority::Nice(HELPER_NICE));
static SLEEPING: AtomicBool = AtomicBool::new(false);
/// Jobs handed over and not done, and how many of them hold an fd of the shim's own.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
static OWN_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// The fds jobs in flight use (-1: a free entry). A program's close of one of its own
/// waits for those jobs first; a program's close of one of the shim's revokes it.
static PROGRAM_FD: [AtomicI32; JOBS] = [const { AtomicI32::new(-1) }; JOBS];
static OWN_FD: [AtomicI32; JOBS] = [const { AtomicI32::new(-1) }; JOBS];
/// Jobs with an entry in either table (counted before the entry is taken).
static ENTRIES: AtomicUsize = AtomicUsize::new(0);
/// What the jobs in flight weigh (`Job::weight`).
static PENDING: AtomicU64 = AtomicU64::new(0);
/// Bumped after every job: the futex a waiting program thread sleeps on.
static DONE: AtomicU32 = AtomicU32::new(0);
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
    if HELPER.stopping() || HELPER.failed() {
        return false;
    }
    // Counted first: a concurrent `release_fds` that finds no entries counted has none to
    // wait for.
    ENTRIES.fetch_add(1, Ordering::SeqCst);
    let table = job.table();
    let Some(slot) = (0..JOBS).find(|&i| {
        table[i]
            .compare_exchange(-1, job.fd, Ordering::SeqCst, Ordering::Relaxed)
            .is_ok()
    }) else {
        ENTRIES.fetch_sub(1, Ordering::SeqCst);
        return false;
    };
    job.slot = slot;
    IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    if job.whose == Fd::Own {
        OWN_IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    }
    PENDING.fetch_add(job.weight(), Ordering::AcqRel);
    if !QUEUE_.push(job) {
        undo(&job);
        return false;
    }
    if !HELPER.start(run) {
        HELPER.wake(SLEEPING.load(Ordering::SeqCst));
    }
    if HELPER.failed() {
        // No thread: what is queued is given up (its pages stay cached), and the caller
        // does its own job itself.
        give_up_queued();
        return false;
    }
    true
}

/// Takes back every queued job: own fds still ours closed, counters released.
fn give_up_queued() {
    while let Some(j) = QUEUE_.pop() {
        close_if_own(&j);
        done(&j);
    }
}

fn undo(j: &Job) {
    PENDING.fetch_sub(j.weight(), Ordering::AcqRel);
    if j.whose == Fd::Own {
        OWN_IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    }
    let entry = &j.table()[j.slot];
    let _ = entry.compare_exchange(j.fd, -1, Ordering::SeqCst, Ordering::Relaxed);
    let _ = entry.compare_exchange(REVOKED, -1, Ordering::SeqCst, Ordering::Relaxed);
    ENTRIES.fetch_sub(1, Ordering::SeqCst);
    IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
}

/// Before the program closes fds `lo..=hi` (close, dup2 onto one, close_range) or a write
/// stream on one ends: waits for the jobs that use the program's fds among them, which
/// then no longer name a file the program may reopen on that number; and revokes the
/// shim's own among them (the program is closing that number: the job must neither use
/// nor close it any more). Free when no job is in flight.
#[inline]
pub fn release_fds(lo: u32, hi: u32) {
    if ENTRIES.load(Ordering::SeqCst) != 0 {
        crate::entry::even_inside((), || release_held_fds(lo, hi));
    }
}

#[inline(never)]
fn release_held_fds(lo: u32, hi: u32) {
    let within = |fd: i32| fd >= 0 && (lo..=hi).contains(&(fd as u32));
    for e in &OWN_FD {
        let fd = e.load(Ordering::SeqCst);
        if within(fd) {
            let _ = e.compare_exchange(fd, REVOKED, Ordering::SeqCst, Ordering::Relaxed);
        }
    }
    wait_until(|| !PROGRAM_FD.iter().any(|e| within(e.load(Ordering::SeqCst))));
}

/// From a program's write: waits while the jobs in flight weigh more than `BOUND_WINDOWS`
/// windows, so a fast writer stays bounded. Gives up (fail open: the writer goes on) after
/// the budget.
pub fn wait_for_room(window: u64) {
    let bound = BOUND_WINDOWS * window;
    wait_until(|| PENDING.load(Ordering::Acquire) <= bound);
}

/// At exit: waits until every job in flight is done.
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
    // A deadline, not a count of naps: signals end futex waits early.
    let deadline = Instant::now() + WAIT_BUDGET;
    while !done() && Instant::now() < deadline {
        // Read before the condition: a job done in between changes it, and the wait
        // returns at once.
        let seen = DONE.load(Ordering::SeqCst);
        if done() {
            break;
        }
        let _ = thread::futex_wait(&DONE, seen, Some(&NAP));
    }
    WAITERS.fetch_sub(1, Ordering::SeqCst);
}

/// The shim is being disabled (a sandbox is coming): the thread stops making system
/// calls; jobs it did not take are given up (their pages stay cached, as without the
/// shim) and their own fds closed.
pub fn shutdown() {
    HELPER.shutdown();
    give_up_queued();
}

/// Closes a job's own fd unless the program closed that number meanwhile (its entry
/// revoked), in which case the number may be the program's now.
fn close_if_own(j: &Job) {
    // The entry is released by `undo`, after the close: until then no other job can take
    // it, with the same number perhaps.
    if j.whose == Fd::Own && OWN_FD[j.slot].load(Ordering::SeqCst) == j.fd {
        sys::file::close_own(j.fd);
    }
}

fn run() {
    let mut batch = [Job::EMPTY; JOBS];
    let mut idle = Idle::Short;
    while !HELPER.stopping() {
        let n = take(&mut batch);
        if n > 0 {
            perform(&batch[..n]);
            continue;
        }
        let idle_from = Instant::now();
        if idle == Idle::Short && linger() {
            continue;
        }
        SLEEPING.store(true, Ordering::SeqCst);
        let seen = HELPER.seen();
        let n = take(&mut batch);
        if n > 0 {
            SLEEPING.store(false, Ordering::SeqCst);
            idle = Idle::of(idle_from.elapsed());
            perform(&batch[..n]);
            continue;
        }
        let woken = HELPER.sleep(seen, &IDLE_EXIT);
        SLEEPING.store(false, Ordering::SeqCst);
        idle = Idle::of(idle_from.elapsed());
        // A job queued just before the exit saw a running thread and started none.
        if woken == Woken::TimedOut && QUEUE_.is_empty() && !HELPER.idle_exit(|| !QUEUE_.is_empty())
        {
            break;
        }
    }
    // Stopped: whatever is still queued is given up.
    give_up_queued();
}

/// How long the thread's last wait for a job lasted: whether lingering pays.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Idle {
    /// Jobs came within `LINGER_SPAN` (a tree's files): linger before sleeping.
    Short,
    /// The last job came later (a big stream's windows, every few ms): sleep at once.
    /// Lingering's naps there only preempted the program: rsync of a 2 GiB file was
    /// switched out involuntarily 5,351 times with them, 2,225 without
    /// (bench/results/copies-at-the-floor.md; shim-tests/t_copy.sh counts the helper's).
    Long,
}

impl Idle {
    fn of(waited: Duration) -> Idle {
        if waited <= LINGER_SPAN {
            Idle::Short
        } else {
            Idle::Long
        }
    }
}

/// Before the thread sleeps, where only a futex wake from the program brings it back, while
/// `Idle::Short`: a few short naps in which a job may come. A tree's files come one by one,
/// often every 50-200 us, and each wake cost the program's thread about 15 us (an IPI from a guest):
/// `shutil.copytree` of 50,000 files of 8 KiB spent 0.8 s of its 10 s in `futex_wake`.
/// True when a job came.
fn linger() -> bool {
    for _ in 0..LINGER_NAPS {
        if HELPER.stopping() {
            return false;
        }
        thread::sleep_us(LINGER_NAP_US);
        if !QUEUE_.is_empty() {
            return true;
        }
    }
    false
}

/// Everything queued, up to a batch.
fn take(batch: &mut [Job; JOBS]) -> usize {
    let mut n = 0;
    while n < JOBS
        && let Some(j) = QUEUE_.pop()
    {
        batch[n] = j;
        n += 1;
    }
    n
}

/// Starts the writeback of every job first, so the device has all of it queued, then
/// settles them in order. Every job is done (its own fd closed, its bytes released)
/// whatever happens, so a waiting program never waits for one that failed.
fn perform(jobs: &[Job]) {
    for j in jobs {
        let _ = std::panic::catch_unwind(|| {
            if !HELPER.stopping()
                && j.usable(Use::Look)
                && let Some(r) = j.start
            {
                let _ = sys::cache::start_writeback(j.fd, r.start, r.len());
            }
        });
    }
    for j in jobs {
        if let Some(r) = j.settle {
            let _ = std::panic::catch_unwind(|| settle(j, r));
        }
        close_if_own(j);
        done(j);
    }
}

fn settle(j: &Job, r: Range) {
    // Polled, never a WAIT flag (see the top of this file); a program's fd re-checked at
    // every look, since the program's close waits for this job only so long.
    let keep_going = |how| !HELPER.stopping() && j.usable(how);
    let budget = SETTLE_BUDGET.as_millis() as u64;
    if !keep_going(Use::Look) {
        return;
    }
    if sys::cache::wait_clean(j.fd, r.start, r.len(), budget, || keep_going(Use::Look))
        != Settled::Clean
    {
        stats::SETTLE_TIMEOUTS.add(1);
    }
    // A sandbox may have come, or the fd gone, while we waited.
    if !keep_going(Use::Drop) {
        return;
    }
    // DONTNEED drops what is clean and leaves the rest.
    crate::proof::drop_runs(j.fd, &j.runs[..j.nruns]);
}

fn done(j: &Job) {
    undo(j);
    DONE.fetch_add(1, Ordering::SeqCst);
    if WAITERS.load(Ordering::SeqCst) > 0 {
        thread::futex_wake_all(&DONE);
    }
}

/// In a forked child: no helper thread exists there. The jobs' own fds are the child's
/// copies, closed where the entry still says they are ours (the program's stay the
/// program's); the batch the helper had taken is found through the same entries.
pub fn after_fork_child() {
    QUEUE_.reset();
    for e in &OWN_FD {
        let fd = e.swap(-1, Ordering::Relaxed);
        if fd >= 0 {
            sys::file::close_own(fd);
        }
    }
    for e in &PROGRAM_FD {
        e.store(-1, Ordering::Relaxed);
    }
    ENTRIES.store(0, Ordering::Relaxed);
    WAITERS.store(0, Ordering::Relaxed);
    IN_FLIGHT.store(0, Ordering::Relaxed);
    OWN_IN_FLIGHT.store(0, Ordering::Relaxed);
    PENDING.store(0, Ordering::Relaxed);
    SLEEPING.store(false, Ordering::Relaxed);
    HELPER.after_fork_child();
}
