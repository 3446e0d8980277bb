//! Per-fd state: a fixed table indexed by fd number, lock-free.
//!
//! Each slot has a `state` atomic read on every hook (one load for the common "not ours"
//! answer) and a `claim` flag that a hook takes with one compare-exchange before touching the
//! slot's streams. A hook that finds the slot claimed (another thread, or a signal handler
//! interrupting this one) skips its hint: nobody ever waits, so the table cannot deadlock,
//! and the worst a lost race costs is one hint. The table is zero-initialised (it lives in
//! .bss: untouched slots cost no memory), and the loops over it (fork, close_range,
//! sandboxing) stop at the highest slot ever claimed, so they touch no more of it than the
//! program's own fds did.

use crate::policy::{ReadStream, WriteStream};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, AtomicUsize, Ordering};

/// fds at or above this pass straight through.
pub const MAX_FDS: usize = 4096;

atomic_enum! {
    /// Whether the shim manages an fd.
    pub enum Managed in AtomicManaged(u8 as AtomicU8) {
        /// Not examined yet: looked at on its first read or write.
        Unknown = 0,
        /// Not a file the shim manages (a pipe, a small read-only file, excluded...).
        Ignored = 1,
        /// A regular file whose streams the shim follows.
        Tracked = 2,
        /// Its first read went through unexamined (`engine::files::glance`): looked at on
        /// its next call, where it would have been on its first.
        Glanced = 3,
    }
}

atomic_enum! {
    /// The hot path open for a stream (see `policy::FastRead`): which calls may skip the
    /// policy, needing nothing but the stream's new position.
    pub enum Hot in AtomicHot(u8 as AtomicU8) {
        /// Closed: every call goes through the policy.
        None = 0,
        /// A random stream: reads that don't continue it are free.
        Random = 1,
        /// A sequential stream: its next read (or write) well inside its window is free.
        Sequential = 2,
        /// The same, read with RWF_DONTCACHE.
        SequentialUncached = 3,
    }
}

#[derive(Default)]
pub struct FileState {
    pub dev: u64,
    pub ino: u64,
    pub size_at_open: u64,
    pub readable: bool,
    pub writable: bool,
    /// Opened with O_APPEND (an F_SETFL makes the shim look at the fd again).
    pub append: bool,
    /// cachestat refused this file (no write permission): residency is unknowable.
    pub unprovable: bool,
    /// What the stream's last event through the policy asked for (a read's count; for
    /// stdio and copies, what they moved): whether its hot path opens uncached
    /// (`engine::files::publish`) and a read of a count not known before the call goes uncached
    /// are judged by it.
    pub read_asked: u64,
    /// Under `auto`, whether this stream may still read uncached (`engine::files`).
    pub uncached: Uncached,
    pub read: ReadStream,
    pub write: WriteStream,
    /// Bytes passed through stdio since the kernel position was last sampled.
    pub stdio_pending: u64,
    /// Whether this fd was counted as a stream in the report.
    pub counted_stream: bool,
    /// Prefetch reach for sequential reads on this file (0: none) and bytes per call.
    pub prefetch_reach: u64,
    pub prefetch_chunk: u64,
    /// A small file that may be part of a tree the process streams (see `engine::tree`).
    pub small: Small,
    /// What the shim does about the kernel's readahead for this file (`engine::read`).
    pub kernel_readahead: KernelReadahead,
    /// stdio handed the program the end of the file.
    pub stdio_eof: bool,
    /// A small file: the end of the furthest read (read, pread, copies and sendfile).
    pub small_read_to: u64,
}

/// The kernel's readahead for a file the shim prefetches none for, its device's own
/// `read_ahead_kb` already reaching as far (`prefetch::reach_for`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KernelReadahead {
    /// Left as it is: the shim prefetches, the file is not the program's own to advise, or
    /// it was advised already.
    #[default]
    Leave,
    /// Doubled (FADV_SEQUENTIAL) once its reads turn sequential, unless the program gives
    /// readahead advice of its own.
    Deepen,
}

/// Under `auto`, whether a sequential stream on a file whose residency can't be proven may
/// read uncached (RWF_DONTCACHE).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Uncached {
    /// Each read that ends on readahead's folios' ends (`policy::uncached_read_fits`).
    #[default]
    EachRead,
    /// No more: one of its reads did not fit. Readahead made the folios ahead of an
    /// uncached read dropbehind, and the kernel drops such a folio at the end of any read of
    /// it, so a stream that mixes sizes read them again in part (16 MiB of 2 MiB reads, then
    /// 16 MiB of 4 KiB reads, over and over: 1.29x the file from disk with each small read
    /// cached, 1.06x with this; t_read.sh).
    Never,
}

/// What a small file is to the tree stream (`policy::tree`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Small {
    /// Not a candidate.
    #[default]
    No,
    /// Read-only, with nothing cached at its first read.
    ColdRead,
    /// Empty at its first write (created or truncated).
    NewWrite,
}

pub struct Slot {
    state: AtomicManaged,
    claim: AtomicBool,
    file: UnsafeCell<FileState>,
    /// The read hot path, published by whoever holds the claim: its mode, the offset after
    /// the last read, and the bound its reads end before (the stream's next event, the end
    /// of the file as far as the shim has seen it).
    pub fast_read: AtomicHot,
    pub fast_read_next: AtomicU64,
    pub fast_read_until: AtomicU64,
    /// For `Hot::SequentialUncached`: the log2 of the alignment a read's count and offset
    /// keep to go uncached on the hot path (`policy::uncached_read_fits`); others take the
    /// full path, which judges them.
    pub fast_read_uncached_shift: AtomicU8,
    /// The same for writes: continuing writes ending before `fast_write_until` are free.
    pub fast_write: AtomicHot,
    pub fast_write_next: AtomicU64,
    pub fast_write_until: AtomicU64,
    /// The flags the program opened the fd with and `KNOWN`, where its open went through
    /// a hook (0 otherwise): adopting the fd then needs no fcntl(F_GETFL).
    open_flags: AtomicI32,
}

/// Marks `open_flags` as known (no open flag uses the sign bit). 0, not known, keeps the
/// table all zero, in .bss.
const KNOWN: i32 = i32::MIN;
/// In `open_flags`: the fd's open file description is one this process opened through a
/// hook, or a duplicate of such an fd (no open flag uses bit 30 either). Advice given on
/// it (`engine::read::deepen_readahead`) reaches no other process's reads.
const OWN: i32 = 1 << 30;

// SAFETY: `file` is touched only through a `Claimed`, which exists only for whoever moved
// `claim` from false to true (and a forked child's sole thread, see `release_all_claims`).
unsafe impl Sync for Slot {}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicManaged::new(Managed::Unknown),
            claim: AtomicBool::new(false),
            file: UnsafeCell::new(FileState {
                dev: 0,
                ino: 0,
                size_at_open: 0,
                readable: false,
                writable: false,
                append: false,
                unprovable: false,
                read_asked: 0,
                uncached: Uncached::EachRead,
                read: ReadStream::new(),
                write: WriteStream::new(),
                stdio_pending: 0,
                counted_stream: false,
                prefetch_reach: 0,
                prefetch_chunk: 0,
                small: Small::No,
                kernel_readahead: KernelReadahead::Leave,
                stdio_eof: false,
                small_read_to: 0,
            }),
            fast_read: AtomicHot::new(Hot::None),
            fast_read_next: AtomicU64::new(0),
            fast_read_until: AtomicU64::new(0),
            fast_read_uncached_shift: AtomicU8::new(0),
            fast_write: AtomicHot::new(Hot::None),
            fast_write_next: AtomicU64::new(0),
            fast_write_until: AtomicU64::new(0),
            open_flags: AtomicI32::new(0),
        }
    }
}

static SLOTS: [Slot; MAX_FDS] = [const { Slot::new() }; MAX_FDS];

/// One past the highest slot ever claimed or given open flags. Only a claim holder, or an
/// open or dup recording flags, moves a slot away from its initial state (UNKNOWN, no hot
/// path, unclaimed, no flags), so every slot from here on is still in it, untouched: a loop
/// over the whole table (4 MiB) would fault every page in.
static USED: AtomicUsize = AtomicUsize::new(0);

pub fn slot(fd: i32) -> Option<&'static Slot> {
    SLOTS.get(usize::try_from(fd).ok()?)
}

/// Exclusive access to one slot's file state for the life of the guard.
pub struct Claimed {
    slot: &'static Slot,
}

impl Claimed {
    pub fn slot(&self) -> &'static Slot {
        self.slot
    }

    pub fn file(&mut self) -> &mut FileState {
        // SAFETY: `self` exists only while this thread holds the slot's claim (taken in
        // `try_claim`, released in `drop`), and `&mut self` makes the borrow exclusive.
        unsafe { &mut *self.slot.file.get() }
    }
    pub fn set_state(&self, s: Managed) {
        self.slot.fast_read.store(Hot::None, Ordering::Release);
        self.slot.fast_write.store(Hot::None, Ordering::Release);
        self.slot.state.store(s, Ordering::Release);
    }
}

impl Drop for Claimed {
    fn drop(&mut self) {
        self.slot.claim.store(false, Ordering::Release);
    }
}

impl Slot {
    #[inline]
    pub fn state(&self) -> Managed {
        self.state.load(Ordering::Acquire)
    }

    /// Closes the hot path: every call goes through the engine (which may pass it through).
    pub fn forget_fast(&self) {
        self.fast_read.store(Hot::None, Ordering::Release);
        self.fast_write.store(Hot::None, Ordering::Release);
    }

    /// Another file on this fd, or the same one with other flags (a dup, F_SETFL): looked
    /// at again on its next read or write.
    pub fn forget(&'static self) {
        self.renew(0);
    }

    /// A file the program just opened on this fd with `flags`.
    pub fn opened(&'static self, flags: i32) {
        self.renew(flags | KNOWN | OWN);
    }

    /// A file the program just opened on this fd through stdio (fopen, freopen), whose
    /// flags the shim did not see.
    pub fn opened_unseen(&'static self) {
        self.renew(OWN);
    }

    /// A duplicate of `of` (dup, dup2, dup3, F_DUPFD): the same open file description.
    /// Its flags are looked up again (an F_SETFL on `of` would not reach this slot).
    pub fn duplicated(&'static self, of: Option<&Slot>) {
        self.renew(if of.is_some_and(Slot::own_description) {
            OWN
        } else {
            0
        });
    }

    fn renew(&'static self, open_flags: i32) {
        if open_flags != 0 {
            // Flags kept for a file that is closed by a close_range before its first read
            // must be forgotten there too.
            self.note_used();
        }
        self.fast_read.store(Hot::None, Ordering::Release);
        self.fast_write.store(Hot::None, Ordering::Release);
        self.open_flags.store(open_flags, Ordering::Relaxed);
        self.state.store(Managed::Unknown, Ordering::Release);
    }

    /// The flags the fd was opened with, if its open went through a hook.
    pub fn open_flags(&self) -> Option<i32> {
        let f = self.open_flags.load(Ordering::Relaxed);
        (f & KNOWN != 0).then_some(f & !(KNOWN | OWN))
    }

    /// Whether the fd's open file description is this process's own (see `OWN`).
    pub fn own_description(&self) -> bool {
        self.open_flags.load(Ordering::Relaxed) & OWN != 0
    }

    /// Makes `USED` cover this slot, about to leave its initial state.
    fn note_used(&'static self) {
        // SAFETY: every `Slot` is an element of SLOTS (`new` is private and the only
        // `&'static Slot`s are handed out by `slot` and `used`), so both pointers are into
        // the same array and the distance is a whole number of elements.
        let i = unsafe { (self as *const Slot).offset_from(SLOTS.as_ptr()) } as usize;
        if USED.load(Ordering::Relaxed) <= i {
            USED.fetch_max(i + 1, Ordering::Relaxed);
        }
    }

    pub fn try_claim(&'static self) -> Option<Claimed> {
        self.note_used();
        // Release: a child forked after this claim sees USED cover it.
        self.claim
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
            .ok()
            .map(|_| Claimed { slot: self })
    }
}

/// Every slot that may not be in its initial state, for close_range and sandboxing.
pub fn used() -> &'static [Slot] {
    &SLOTS[..USED.load(Ordering::Acquire).min(MAX_FDS)]
}

/// In a child after fork, only the forking thread exists: claims held by others are void.
/// Only claimed slots are written: the child's copy of the others stays shared.
pub fn release_all_claims() {
    for s in used() {
        if s.claim.load(Ordering::Relaxed) {
            s.claim.store(false, Ordering::Relaxed);
        }
    }
}

/// Per-filesystem answer to "does it take RWF_DONTCACHE?", probed once per st_dev.
const FS_SLOTS: usize = 32;
static FS_DEV: [AtomicU64; FS_SLOTS] = [const { AtomicU64::new(0) }; FS_SLOTS];
static FS_DONTCACHE: [AtomicDontcache; FS_SLOTS] =
    [const { AtomicDontcache::new(Dontcache::Unknown) }; FS_SLOTS];

atomic_enum! {
    /// A filesystem's answer to RWF_DONTCACHE reads.
    pub enum Dontcache in AtomicDontcache(u8 as AtomicU8) {
        Unknown = 0,
        Supported = 1,
        Refused = 2,
    }
}

/// Device numbers are stored plus one so that 0 means "free slot".
pub fn fs_dontcache(dev: u64) -> Dontcache {
    let key = dev.wrapping_add(1);
    for i in 0..FS_SLOTS {
        if FS_DEV[i].load(Ordering::Acquire) == key {
            return FS_DONTCACHE[i].load(Ordering::Acquire);
        }
    }
    Dontcache::Unknown
}

pub fn set_fs_dontcache(dev: u64, answer: Dontcache) {
    let key = dev.wrapping_add(1);
    for i in 0..FS_SLOTS {
        let cur = FS_DEV[i].load(Ordering::Acquire);
        if cur == key
            || (cur == 0
                && FS_DEV[i]
                    .compare_exchange(0, key, Ordering::AcqRel, Ordering::Acquire)
                    .map_or_else(|v| v == key, |_| true))
        {
            FS_DONTCACHE[i].store(answer, Ordering::Release);
            return;
        }
    }
    // Table full: the filesystem is simply probed again next time.
}
