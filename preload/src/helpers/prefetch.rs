//! Prefetch: one helper thread that issues the readahead the policy asks for, so that a
//! program's read never waits while a prefetch is submitted (submitting blocks once the
//! device's queue is full, which is exactly when prefetching helps).
//!
//! The read path hands requests over through a fixed lock-free queue and wakes the thread
//! only when it sleeps. The thread is started at the first request, blocks every signal,
//! holds no fd of its own, and is simply gone at exit or in a forked child.

use super::Helper;
use crate::policy::Range;
use crate::sys::thread::Woken;
use crate::{stats, sys};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// Readahead of a device sysfs can't tell us about: the usual disk default.
const UNKNOWN_DEVICE_READAHEAD: u64 = 128 * 1024;

#[derive(Clone, Copy, Debug, Default)]
pub struct Request {
    pub fd: i32,
    /// The file the fd held when the request was made: checked again before prefetching.
    pub dev: u64,
    pub ino: u64,
    pub range: Range,
    /// Bytes per WILLNEED call (see `sys::cache::prefetch`).
    pub chunk: u64,
}

// ---------------------------------------------------------------------------------------
// A bounded multi-producer queue (Vyukov's): a full queue drops the request, which only
// means the kernel's own readahead does that part.

const QUEUE: usize = 64;

struct Cell {
    /// Lap counter, relative to the cell's index: `pos - index` when free for the producer
    /// at `pos`, `pos + 1 - index` when holding its request.
    seq: AtomicUsize,
    req: UnsafeCell<Request>,
}

struct Queue {
    cells: [Cell; QUEUE],
    head: AtomicUsize,
    tail: AtomicUsize,
}

// SAFETY: a cell's request is written only by the producer that won its position and read
// only by the consumer after the producer published it through `seq`.
unsafe impl Sync for Queue {}

static QUEUE_: Queue = Queue::new();

impl Queue {
    const fn new() -> Queue {
        Queue {
            cells: [const {
                Cell {
                    seq: AtomicUsize::new(0),
                    req: UnsafeCell::new(Request {
                        fd: -1,
                        dev: 0,
                        ino: 0,
                        range: Range { start: 0, end: 0 },
                        chunk: 0,
                    }),
                }
            }; QUEUE],
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }

    fn push(&self, r: Request) -> bool {
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos % QUEUE];
            let seq = cell.seq.load(Ordering::Acquire).wrapping_add(pos % QUEUE);
            let dif = seq.wrapping_sub(pos) as isize;
            if dif == 0 {
                match self.head.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: this producer owns the cell until it publishes it.
                        unsafe { *cell.req.get() = r };
                        cell.seq.store(
                            pos.wrapping_add(1).wrapping_sub(pos % QUEUE),
                            Ordering::Release,
                        );
                        return true;
                    }
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                return false;
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    fn pop(&self) -> Option<Request> {
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            let cell = &self.cells[pos % QUEUE];
            let seq = cell.seq.load(Ordering::Acquire).wrapping_add(pos % QUEUE);
            let dif = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if dif == 0 {
                match self.tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: published by its producer, and ours since the CAS.
                        let r = unsafe { *cell.req.get() };
                        cell.seq.store(
                            pos.wrapping_add(QUEUE).wrapping_sub(pos % QUEUE),
                            Ordering::Release,
                        );
                        return Some(r);
                    }
                    Err(p) => pos = p,
                }
            } else if dif < 0 {
                return None;
            } else {
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.head.load(Ordering::SeqCst) == self.tail.load(Ordering::SeqCst)
    }

    /// In a forked child only (one thread): back to empty.
    fn reset(&self) {
        for c in &self.cells {
            c.seq.store(0, Ordering::Relaxed);
        }
        self.head.store(0, Ordering::Relaxed);
        self.tail.store(0, Ordering::Relaxed);
    }
}

// ---------------------------------------------------------------------------------------
// The helper thread

static HELPER: Helper = Helper::new("dropbehind-ra", 64 * 1024);
/// Set while the thread is about to sleep: a request then wakes it.
static SLEEPING: AtomicBool = AtomicBool::new(false);
/// An idle thread leaves after this long.
const IDLE_EXIT: libc::timespec = libc::timespec {
    tv_sec: 1,
    tv_nsec: 0,
};

/// Hands a prefetch to the helper thread (started when needed). Never blocks.
pub fn request(r: Request) {
    if r.range.is_empty() || HELPER.stopping() || HELPER.failed() {
        return;
    }
    if !QUEUE_.push(r) {
        stats::PREFETCH_DROPPED.add(1);
        return;
    }
    // Queued first, then the thread made sure of: an idle thread leaving re-checks the
    // queue after saying so (see `run`).
    if !HELPER.start(run) {
        HELPER.wake(SLEEPING.load(Ordering::SeqCst));
    }
}

/// Whether the helper thread exists now.
pub fn running() -> bool {
    HELPER.running()
}

/// The shim is being disabled (a sandbox is coming): the thread stops making system
/// calls. Waits for it briefly.
pub fn shutdown() {
    HELPER.shutdown();
}

fn run() {
    while !HELPER.stopping() {
        while let Some(r) = QUEUE_.pop() {
            if HELPER.stopping() {
                break;
            }
            let _ = std::panic::catch_unwind(|| perform(&r));
        }
        SLEEPING.store(true, Ordering::SeqCst);
        let seen = HELPER.seen();
        if let Some(r) = QUEUE_.pop() {
            SLEEPING.store(false, Ordering::SeqCst);
            let _ = std::panic::catch_unwind(|| perform(&r));
            continue;
        }
        let woken = HELPER.sleep(seen, &IDLE_EXIT);
        SLEEPING.store(false, Ordering::SeqCst);
        // A request queued just before the exit saw a running thread and started none.
        if woken == Woken::TimedOut && QUEUE_.is_empty() && !HELPER.idle_exit(|| !QUEUE_.is_empty())
        {
            break;
        }
    }
}

fn perform(r: &Request) {
    // The fd may have been closed, or reused for another file, since: then nothing.
    let same = sys::file::identify(r.fd).is_ok_and(|id| id.dev == r.dev && id.ino == r.ino);
    if !same {
        return;
    }
    stats::PREFETCH_BATCHES.add(1);
    let done = sys::cache::prefetch(r.fd, r.range.start, r.range.end, r.chunk, || true);
    stats::PREFETCHED.add(done);
}

/// In a forked child: no helper thread exists there.
pub fn after_fork_child() {
    QUEUE_.reset();
    SLEEPING.store(false, Ordering::Relaxed);
    HELPER.after_fork_child();
}

// ---------------------------------------------------------------------------------------
// Per-device decisions, cached (sysfs is read once per device per process)

const DEVICES: usize = 16;
static DEV: [AtomicU64; DEVICES] = [const { AtomicU64::new(0) }; DEVICES];
/// Readahead and chunk in KiB, packed (readahead << 32 | chunk).
static LIMITS: [AtomicU64; DEVICES] = [const { AtomicU64::new(0) }; DEVICES];

/// The device's readahead and the size of one WILLNEED call, in bytes.
pub fn device(dev: u64) -> (u64, u64) {
    let key = dev.wrapping_add(1);
    let i = (dev as usize ^ (dev >> 20) as usize) % DEVICES;
    if DEV[i].load(Ordering::Acquire) == key {
        let v = LIMITS[i].load(Ordering::Acquire);
        // Another device hashing here may have been stored in between: check again.
        if DEV[i].load(Ordering::Acquire) == key {
            return ((v >> 32) * 1024, (v & 0xffff_ffff) * 1024);
        }
    }
    let (ra, io) = sys::proc::device_limits(dev).unwrap_or((UNKNOWN_DEVICE_READAHEAD, 0));
    // A power of two: the largest request is often smaller than max_sectors_kb (128 page
    // segments = 512 KiB on the loop device), and 1280 KiB calls left a 256 KiB remainder
    // request every time (average read 409 KiB instead of 512).
    let chunk = prev_power_of_two(ra.max(io).max(UNKNOWN_DEVICE_READAHEAD));
    DEV[i].store(0, Ordering::Release);
    LIMITS[i].store(((ra / 1024) << 32) | (chunk / 1024), Ordering::Release);
    DEV[i].store(key, Ordering::Release);
    (ra, chunk)
}

fn prev_power_of_two(x: u64) -> u64 {
    if x == 0 {
        0
    } else {
        1 << (63 - x.leading_zeros())
    }
}

/// How far ahead to prefetch on a device, given the configured reach: nothing where the
/// kernel's own readahead (doubled by FADV_SEQUENTIAL, as `cp` asks) already reaches as far.
pub fn reach_for(readahead: u64, device_readahead: u64) -> u64 {
    if device_readahead.saturating_mul(2) >= readahead {
        0
    } else {
        readahead
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_is_fifo_bounded_and_reusable() {
        let q = Queue::new();
        for lap in 0..3 {
            for i in 0..QUEUE {
                let r = Request {
                    fd: i as i32,
                    ..Request::default()
                };
                assert!(q.push(r), "lap {lap} push {i}");
            }
            assert!(!q.push(Request::default()), "full");
            for i in 0..QUEUE {
                assert_eq!(q.pop().unwrap().fd, i as i32);
            }
            assert!(q.pop().is_none());
        }
    }

    #[test]
    fn no_prefetch_where_kernel_readahead_already_reaches() {
        // vda here: 8 MiB readahead; the slow-disk fixture: 128 KiB.
        assert_eq!(reach_for(16 << 20, 8 << 20), 0);
        assert_eq!(reach_for(16 << 20, 128 << 10), 16 << 20);
        assert_eq!(reach_for(32 << 20, 8 << 20), 32 << 20);
    }
}
