//! Reads: the ticket a read hook carries across the real call, the hot path, and read
//! events fed to the stream's policy.

use super::files::{
    Scope, claim_tracked, drop_owned, glance, publish, read_params, snapshot, uncached_reads,
    with_file,
};
use super::write::finish_write;
use super::{Engine, contained, engine};
use crate::config::Backend;
use crate::fdtable::{self, FileState, Hot, KernelReadahead, Managed, Slot, Small};
use crate::policy::{Pattern, read_continues, uncached_read_fits};
use crate::{stats, sys};
use std::sync::atomic::{AtomicU8, Ordering};

/// What `before_read` decided; carried by the hook across the real call (plain data).
#[derive(Clone, Copy, Default)]
pub struct ReadTicket {
    pub tracked: bool,
    pub dontcache: bool,
    /// Decided on the hot path: `after_read` tries the hot path too.
    fast: bool,
    /// A small file of a tree (`Small::ColdRead`): only how far it was read counts.
    small: bool,
    off: u64,
}

impl ReadTicket {
    /// The offset read.
    #[inline(always)]
    pub fn off(&self) -> u64 {
        self.off
    }

    /// The ticket `before_read` gives a read `read_path` sent the hot way, from its offset.
    #[inline(always)]
    pub fn fast(off: u64, dontcache: bool) -> ReadTicket {
        ReadTicket {
            tracked: true,
            dontcache,
            fast: true,
            small: false,
            off,
        }
    }
}

/// Which way a read hook goes, decided before the real call.
pub enum ReadPath {
    /// Not a file the shim manages (or beyond the table), or a cached stream's read whose
    /// end is already recorded as the stream's position: the real call is all there is.
    Through,
    /// The hot path with the ticket `before_read` would give, for a read whose size is only
    /// known after the call (an iovec array) or an uncached stream's: the real call
    /// (replaced for an uncached stream), then `after_fast_read`.
    Fast(ReadTicket),
    /// Everything else: `before_read`, the call it asks for, `after_read`.
    Full,
}

/// The read hooks' first question, answered with a few loads and no call, so that the
/// common answers cost a hook no frame: a pass-through is a tail call. The same answer as
/// `before_read` for the same slot state. `asked`: the bytes asked for, where known before
/// the call; a cached stream's read that ends inside the file as the shim knows it
/// (`fast_read_until`) then returns all of them (a regular file reads short only at its
/// end), so its end is recorded before the call, which the hook then tail-calls. Should it
/// come back short all the same (an error, a file truncated meanwhile), the stream's
/// position is ahead by the difference, as after a small forward skip.
#[inline(always)]
pub fn read_path(fd: i32, off: Option<u64>, asked: Option<usize>) -> ReadPath {
    let Some(slot) = fdtable::slot(fd) else {
        return ReadPath::Through;
    };
    match slot.state() {
        Managed::Ignored => ReadPath::Through,
        Managed::Tracked => match fast_read_ticket(slot, off) {
            Some(t)
                if !t.dontcache
                    && let Some(n) = asked =>
            {
                let end = t.off.saturating_add(n as u64);
                if end < slot.fast_read_until.load(Ordering::Relaxed) {
                    slot.fast_read_next.store(end, Ordering::Release);
                    ReadPath::Through
                } else {
                    ReadPath::Full
                }
            }
            // An uncached stream's read that would end inside a folio: the full path
            // judges it (`files::uncached_align`).
            Some(t) if asked.is_some_and(|n| !uncached_fits(slot, n, t.off)) => ReadPath::Full,
            Some(t) => ReadPath::Fast(t),
            None => ReadPath::Full,
        },
        Managed::Unknown if glance_early(fd, asked) => ReadPath::Through,
        _ => ReadPath::Full,
    }
}

/// Whether an uncached stream's read of `n` bytes at `off` keeps to the alignment its
/// publication recorded.
#[inline(always)]
fn uncached_fits(slot: &Slot, n: usize, off: u64) -> bool {
    let shift = slot.fast_read_uncached_shift.load(Ordering::Relaxed);
    uncached_read_fits(n as u64, off, 1 << shift)
}

/// `glance`, on the way in: an fd's first read that the engine would let through
/// unexamined goes through from the hook, as the hot path does. The glance makes no system
/// call and can't panic, and its only locks are the slot's and the tree's claims, given up
/// at once when taken: it needs none of `entry::inside`'s guards, whose cost was most of
/// what a hot small file's open, read and close paid. A read of the shim's own that gets
/// here (inside the shim, where `inside` would pass it through) at worst marks one of the
/// shim's fds glanced, which every later call takes as unknown, and counts one sampled skip.
#[inline(never)]
fn glance_early(fd: i32, asked: Option<usize>) -> bool {
    engine().is_some_and(|eng| glance(eng, fd, asked))
}

/// After a cached read `read_path` sent the hot way returned `ret` (`asked`: the bytes
/// asked for, needed only off the hot path): `after_read` with that ticket, without it.
#[inline(always)]
pub fn after_fast_read(fd: i32, off: u64, asked: impl FnOnce() -> usize, ret: isize) {
    if ret < 0 {
        return;
    }
    if ret > 0
        && let Some(slot) = fdtable::slot(fd)
    {
        let end = off + ret as u64;
        if slot.fast_read.load(Ordering::Acquire) != Hot::None
            && end < slot.fast_read_until.load(Ordering::Relaxed)
        {
            slot.fast_read_next.store(end, Ordering::Release);
            return;
        }
    }
    slow_after_read(fd, ReadTicket::fast(off, false), asked(), ret);
}

/// Before a read of `asked` bytes (`None`: not known before the call) at `off` (`None`: at
/// the file position), one `read_path` did not let through: a first read it did not glance
/// past is classified here.
#[inline]
pub fn before_read(fd: i32, off: Option<u64>, asked: Option<usize>) -> ReadTicket {
    let Some(slot) = fdtable::slot(fd) else {
        return ReadTicket::default();
    };
    match slot.state() {
        Managed::Ignored => return ReadTicket::default(),
        Managed::Tracked => {
            if let Some(t) = fast_read_ticket(slot, off)
                && !(t.dontcache && asked.is_some_and(|n| !uncached_fits(slot, n, t.off)))
            {
                return t;
            }
        }
        _ => {}
    }
    slow_before_read(fd, off, asked)
}

/// The hot path: a random stream's jump, or a sequential stream's next read well inside
/// its window, needs nothing but the stream's new position.
#[inline]
pub(super) fn fast_read_ticket(slot: &Slot, off: Option<u64>) -> Option<ReadTicket> {
    let mode = slot.fast_read.load(Ordering::Acquire);
    if mode == Hot::None {
        return None;
    }
    let next = slot.fast_read_next.load(Ordering::Relaxed);
    let off = off.unwrap_or(next);
    let continues = read_continues(next, off);
    let skip = if mode == Hot::Random {
        !continues
    } else {
        continues
    };
    skip.then_some(ReadTicket {
        tracked: true,
        dontcache: mode == Hot::SequentialUncached,
        fast: true,
        small: false,
        off,
    })
}

#[inline(never)]
fn slow_before_read(fd: i32, off: Option<u64>, asked: Option<usize>) -> ReadTicket {
    contained(|eng| {
        let Some(mut c) = claim_tracked(eng, fd) else {
            return ReadTicket::default();
        };
        let f = c.file();
        if f.small == Small::ColdRead {
            let off = off.unwrap_or_else(|| sys::file::position(fd).unwrap_or(u64::MAX));
            return ReadTicket {
                tracked: true,
                small: true,
                off,
                ..ReadTicket::default()
            };
        }
        if !f.readable || f.size_at_open < eng.cfg.min_size.max(1) {
            return ReadTicket::default();
        }
        let off = match off {
            Some(o) => o,
            None if f.read.pattern == Pattern::Fresh => sys::file::position(fd).unwrap_or(0),
            None => f.read.next,
        };
        let plan = f.read.plan(off, &eng.params);
        if let Some(r) = plan.snapshot {
            f.unprovable = !snapshot(fd, &mut f.read.proof, r);
        }
        let asked = asked.map_or(f.read_asked, |n| n as u64);
        let dontcache = plan.dontcache && uncached_reads(eng, fd, f, off, asked);
        publish(eng, fd, &mut c);
        ReadTicket {
            tracked: true,
            dontcache,
            fast: false,
            small: false,
            off,
        }
    })
}

/// After the read described by `t` returned `ret` (bytes, or -1).
#[inline]
pub fn after_read(fd: i32, t: ReadTicket, asked: usize, ret: isize) {
    if !t.tracked || ret < 0 {
        return;
    }
    if t.fast
        && ret > 0
        && let Some(slot) = fdtable::slot(fd)
    {
        let end = t.off + ret as u64;
        if slot.fast_read.load(Ordering::Acquire) != Hot::None
            && end < slot.fast_read_until.load(Ordering::Relaxed)
        {
            slot.fast_read_next.store(end, Ordering::Release);
            return;
        }
    }
    slow_after_read(fd, t, asked, ret);
}

#[inline(never)]
pub(super) fn slow_after_read(fd: i32, t: ReadTicket, asked: usize, ret: isize) {
    contained(|eng| {
        let Some(mut c) = claim_tracked(eng, fd) else {
            return;
        };
        if t.small {
            let f = c.file();
            f.small_read_to = f.small_read_to.max(t.off.saturating_add(ret as u64));
            return;
        }
        read_event(
            eng,
            fd,
            c.file(),
            t.off,
            ret as u64,
            asked as u64,
            t.dontcache,
        );
        publish(eng, fd, &mut c);
    })
}

pub(super) fn read_event(
    eng: &Engine,
    fd: i32,
    f: &mut FileState,
    off: u64,
    got: u64,
    asked: u64,
    dontcache: bool,
) {
    let was_seq = f.read.pattern == Pattern::Sequential;
    f.read_asked = asked;
    let act = f.read.consumed(off, got, asked, &read_params(eng, f));
    if f.read.pattern == Pattern::Sequential {
        if !was_seq && !f.counted_stream {
            f.counted_stream = true;
            stats::READ_STREAMS.add(1);
        }
        if !was_seq {
            deepen_readahead(fd, f);
        }
        stats::sequential_read(dontcache, f.unprovable).add(got);
    }
    if let Some(r) = act.drop {
        if eng.cfg.backend != Backend::DontCache {
            drop_owned(fd, f, &f.read.proof, r);
        }
        f.read.dropped(r);
    }
    if let Some(r) = act.snapshot {
        if f.unprovable {
            // cachestat refused this file: record the range unproven without asking again.
            f.read.proof.snapshot(r, |_, _| None);
        } else {
            snapshot(fd, &mut f.read.proof, r);
        }
    }
    if let Some(range) = act.prefetch {
        crate::prefetch::request(crate::prefetch::Request {
            fd,
            dev: f.dev,
            ino: f.ino,
            range,
            chunk: f.prefetch_chunk,
        });
    }
}

atomic_enum! {
    /// Whether the program gives readahead advice of its own (posix_fadvise NORMAL,
    /// SEQUENTIAL or RANDOM), on any fd: advice holds for an open file description, which
    /// dup, fork and F_SETFL keep under other fd numbers, so it is followed per process.
    pub enum ProgramAdvice in AtomicProgramAdvice(u8 as AtomicU8) {
        None = 0,
        Given = 1,
    }
}

static PROGRAM_ADVICE: AtomicProgramAdvice = AtomicProgramAdvice::new(ProgramAdvice::None);

/// The program advised the kernel about some file's readahead (`posix_fadvise`).
pub fn advised(advice: i32) {
    if matches!(
        advice,
        libc::POSIX_FADV_NORMAL | libc::POSIX_FADV_SEQUENTIAL | libc::POSIX_FADV_RANDOM
    ) {
        PROGRAM_ADVICE.store(ProgramAdvice::Given, Ordering::Relaxed);
    }
}

/// A stream just found sequential on a file whose reach the shim leaves to the kernel
/// (`KernelReadahead::Deepen`) gets the depth `cp` and `cat` ask for with FADV_SEQUENTIAL,
/// twice the device's `read_ahead_kb`. Without it a copier that gives no advice (dd, tar,
/// rsync, Python) reads half as deep, and no read is in flight while it waits on its
/// writes (bench/results/copies-at-the-floor.md). A program that advises chose its own
/// depth and keeps it. (An advice it gives between this check and the call below, on
/// another thread, is overridden once: the window is one system call wide.)
fn deepen_readahead(fd: i32, f: &mut FileState) {
    if f.kernel_readahead != KernelReadahead::Deepen
        || PROGRAM_ADVICE.load(Ordering::Relaxed) == ProgramAdvice::Given
    {
        return;
    }
    // Tried once: a refusal leaves the default depth. The kernel ignores the range of this
    // advice; a length of 1 only gets past the wrapper's "empty range asks nothing".
    f.kernel_readahead = KernelReadahead::Leave;
    if sys::cache::fadvise(fd, 0, 1, libc::POSIX_FADV_SEQUENTIAL).is_ok() {
        stats::READAHEAD_DEEPENED.add(1);
    }
}

/// After a seek on `fd` left the position at `pos`.
pub fn seeked(fd: i32, pos: u64) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        if let Some(r) = f.read.seeked(pos) {
            drop_owned(fd, f, &f.read.proof, r);
            f.read.dropped(r);
        }
        if f.write.started && pos != f.write.next {
            finish_write(eng, fd, f);
        }
        publish(eng, fd, c);
    })
}
