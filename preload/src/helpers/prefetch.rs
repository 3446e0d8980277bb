//! Prefetch: one helper thread that issues the readahead the policy asks for, so that a
//! program's read never waits while a prefetch is submitted (submitting blocks once the
//! device's queue is full, which is exactly when prefetching helps).
//!
//! The read path hands requests over through a fixed lock-free queue and wakes the thread
//! only when it sleeps. The thread is started at the first request, blocks every signal,
//! holds no fd of its own, and is simply gone at exit or in a forked child.

use super::queue::{Empty, Queue};
use super::{Helper, Priority};
use crate::policy::Range;
use crate::sys::thread::Woken;
use crate::{stats, sys};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// A full queue drops the request, which only means the kernel's own readahead does that
/// part.
const QUEUE: usize = 64;

impl Empty for Request {
    const EMPTY: Request = Request {
        fd: -1,
        dev: 0,
        ino: 0,
        range: Range { start: 0, end: 0 },
        chunk: 0,
    };
}

static QUEUE_: Queue<Request, QUEUE> = Queue::new();

// ---------------------------------------------------------------------------------------
// The helper thread

static HELPER: Helper = Helper::new("dropbehind-ra", 64 * 1024, Priority::Program);
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
/// Readahead and chunk in KiB, packed (readahead << 32 | chunk); a readahead of
/// `UNKNOWN_KIB` where sysfs did not say.
static LIMITS: [AtomicU64; DEVICES] = [const { AtomicU64::new(0) }; DEVICES];
const UNKNOWN_KIB: u64 = u32::MAX as u64;
/// `DEV` while a slot is being written (no device's key: keys are dev + 1).
const SLOT_BUSY: u64 = u64::MAX;

/// The device's readahead and the size of one WILLNEED call, in bytes.
pub fn device(dev: u64) -> (u64, u64) {
    let (ra, chunk) = limits(dev);
    (ra.unwrap_or(UNKNOWN_DEVICE_READAHEAD), chunk)
}

/// The device's `read_ahead_kb` in bytes; `None` where sysfs doesn't say (not a block
/// device's filesystem: btrfs, a network or FUSE filesystem).
pub fn device_readahead(dev: u64) -> Option<u64> {
    limits(dev).0
}

fn limits(dev: u64) -> (Option<u64>, u64) {
    let key = dev.wrapping_add(1);
    let i = (dev as usize ^ (dev >> 20) as usize) % DEVICES;
    let unpack = |v: u64| {
        let ra = v >> 32;
        (
            (ra != UNKNOWN_KIB).then_some(ra * 1024),
            (v & 0xffff_ffff) * 1024,
        )
    };
    if DEV[i].load(Ordering::Acquire) == key {
        let v = LIMITS[i].load(Ordering::Acquire);
        // Another device hashing here may have been stored in between: check again.
        if DEV[i].load(Ordering::Acquire) == key {
            return unpack(v);
        }
    }
    let known = sys::proc::device_limits(dev);
    let (ra, io) = known.unwrap_or((UNKNOWN_DEVICE_READAHEAD, 0));
    // A power of two: the largest request is often smaller than max_sectors_kb (128 page
    // segments = 512 KiB on the loop device), and 1280 KiB calls left a 256 KiB remainder
    // request every time (average read 409 KiB instead of 512).
    let chunk = prev_power_of_two(ra.max(io).max(UNKNOWN_DEVICE_READAHEAD));
    let ra_kib = if known.is_some() {
        (ra / 1024).min(UNKNOWN_KIB - 1)
    } else {
        UNKNOWN_KIB
    };
    let v = (ra_kib << 32) | (chunk / 1024);
    // One writer at a time: two threads storing different devices here at once could
    // leave one's key over the other's limits. The loser just doesn't cache.
    let held = DEV[i].load(Ordering::Acquire);
    if held != SLOT_BUSY
        && DEV[i]
            .compare_exchange(held, SLOT_BUSY, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    {
        LIMITS[i].store(v, Ordering::Release);
        DEV[i].store(key, Ordering::Release);
    }
    unpack(v)
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
    fn no_prefetch_where_kernel_readahead_already_reaches() {
        // vda here: 8 MiB readahead; the slow-disk fixture: 128 KiB.
        assert_eq!(reach_for(16 << 20, 8 << 20), 0);
        assert_eq!(reach_for(16 << 20, 128 << 10), 16 << 20);
        assert_eq!(reach_for(32 << 20, 8 << 20), 32 << 20);
    }
}
