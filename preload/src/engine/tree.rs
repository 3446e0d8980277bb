//! Trees of small files (`policy::tree`): the process's tree stream, the few files it holds
//! by an fd of its own until the process shows bulk I/O, and the written files whose
//! writeback is under way.
//!
//! Held fds are read-only, close-on-exec reopenings of the file (never a duplicate of the
//! program's description: that would keep its locks, make a just-written program fail to
//! exec with ETXTBSY), numbered above the program's, at most `HELD` of them and fewer under
//! a low RLIMIT_NOFILE, checked against (st_dev, st_ino) before every use, and forgotten
//! when the program itself closes their number (close_range, closefrom, a close loop).
//! A written file is written back a close later, unless it was deleted by then, and
//! dropped once clean: waiting happens only in a write or at exit, never at a close.
//!
//! Everything here runs under one claim flag, taken with a compare-exchange: a thread that
//! finds it taken skips its hint (the file stays cached, as without the shim).

use super::Engine;
use crate::fdtable::{FileState, Small};
use crate::policy::{AtClose, Bulk, TreeParams, TreeStream};
use crate::{stats, sys, writeback};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};

/// fds held at most (before the RLIMIT_NOFILE bound, see `held_limit`).
const HELD: usize = 8;
/// Written bytes under writeback before the oldest file must be waited clean.
const WRITEBACK_BYTES: u64 = 2 * crate::config::MIB;
/// How long one wait for a written file may take before its drop is given up.
const SETTLE_BUDGET_MS: u64 = 30_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Empty,
    /// Streamed before the process showed bulk I/O.
    RememberedRead,
    RememberedWrite,
    /// Written, writeback not started yet (a file deleted right after its close gets none).
    Written,
    WritingBack,
}

#[derive(Clone, Copy)]
struct Held {
    stage: Stage,
    fd: i32,
    dev: u64,
    ino: u64,
    bytes: u64,
    /// Order of arrival, to settle the oldest first.
    seq: u64,
}

const EMPTY: Held = Held {
    stage: Stage::Empty,
    fd: -1,
    dev: 0,
    ino: 0,
    bytes: 0,
    seq: 0,
};

struct State {
    stream: TreeStream,
    held: [Held; HELD],
    seq: u64,
}

struct Tree {
    claim: AtomicBool,
    state: UnsafeCell<State>,
}

// SAFETY: `state` is touched only by whoever moved `claim` from false to true (see
// `with_tree`), and by a forked child's only thread (`after_fork_child`).
unsafe impl Sync for Tree {}

static TREE: Tree = Tree {
    claim: AtomicBool::new(false),
    state: UnsafeCell::new(State {
        stream: TreeStream::new(),
        held: [EMPTY; HELD],
        seq: 0,
    }),
};

/// The held fd numbers, readable without the claim: a close of one of them by the program
/// makes the shim forget it.
static HELD_FD: [AtomicI32; HELD] = [const { AtomicI32::new(-1) }; HELD];
static HELD_ANY: AtomicUsize = AtomicUsize::new(0);
/// How many fds may be held (0 until the first use computes it).
static HELD_LIMIT: AtomicUsize = AtomicUsize::new(usize::MAX);

fn with_tree<R>(f: impl FnOnce(&mut State) -> R) -> Option<R> {
    TREE.claim
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .ok()?;
    // SAFETY: this thread moved `claim` to true above; it is released right after.
    let r = f(unsafe { &mut *TREE.state.get() });
    TREE.claim.store(false, Ordering::Release);
    Some(r)
}

const PARAMS: TreeParams = TreeParams::DEFAULT;

// ---------------------------------------------------------------------------------------
// Files already streamed: a fixed, lock-free set of (st_dev, st_ino) hashes

const SEEN: usize = 8192;
const PROBES: usize = 8;
static SEEN_SET: [AtomicU64; SEEN] = [const { AtomicU64::new(0) }; SEEN];

fn key(dev: u64, ino: u64) -> u64 {
    let h = (dev ^ ino.rotate_left(32)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h | 1
}

/// Whether SEEN_SET holds anything: a forked child inherits it with a fresh stream, and
/// its small files must then be compared with it, never glanced past.
static SEEN_ANY: AtomicBool = AtomicBool::new(false);

/// Remembers that the process streamed this file. A full neighbourhood: forgotten.
fn remember_seen(dev: u64, ino: u64) {
    SEEN_ANY.store(true, Ordering::Relaxed);
    let k = key(dev, ino);
    let start = (k >> 40) as usize % SEEN;
    for i in 0..PROBES {
        let slot = &SEEN_SET[(start + i) % SEEN];
        match slot.compare_exchange(0, k, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(v) if v == k => return,
            Err(_) => {}
        }
    }
}

/// Whether it streamed this file before (a hash collision answers yes: the safe way).
fn seen(dev: u64, ino: u64) -> bool {
    let k = key(dev, ino);
    let start = (k >> 40) as usize % SEEN;
    (0..PROBES).any(|i| SEEN_SET[(start + i) % SEEN].load(Ordering::Acquire) == k)
}

// ---------------------------------------------------------------------------------------
// From the engine

/// A small read-only file is read for the first time: whether it is a candidate (nothing
/// of it cached). A file the process streamed before stops the tree stream.
pub(super) fn adopt_small_read(eng: &Engine, fd: i32, dev: u64, ino: u64, size: u64) -> Small {
    if !eng.cfg.tree || size == 0 {
        return Small::No;
    }
    with_tree(|t| {
        if t.stream.bulk == Bulk::Rereading {
            return Small::No;
        }
        if seen(dev, ino) {
            t.stream.reread();
            crate::debug!("tree: a file streamed before was opened again: no more drops");
            return Small::No;
        }
        if !t.stream.check_residency(&PARAMS) {
            return Small::No;
        }
        match sys::cache::cached_pages(fd, 0, size) {
            Some(0) => {
                t.stream.found_cold();
                Small::ColdRead
            }
            _ => Small::No,
        }
    })
    .unwrap_or(Small::No)
}

/// A read-only file's first read, size unknown: whether a small file would go unchecked
/// now (counted as such), so that its size needs no asking.
pub(super) fn skips_next(eng: &Engine) -> bool {
    if !eng.cfg.tree {
        return true;
    }
    !SEEN_ANY.load(Ordering::Relaxed)
        && with_tree(|t| t.stream.skips_next(&PARAMS)).unwrap_or(false)
}

/// Bytes the process brought in as a stream elsewhere (a big file's drops): bulk evidence.
pub(super) fn evidence(bytes: u64) {
    if bytes == 0 || HELD_LIMIT.load(Ordering::Relaxed) == 0 {
        return;
    }
    let flipped = with_tree(|t| {
        let was = t.stream.bulk;
        t.stream.evidence(bytes, &PARAMS);
        was == Bulk::Unproven && t.stream.bulk == Bulk::Streaming
    });
    if flipped == Some(true) {
        with_tree(flush_remembered);
    }
}

/// Before the program closes `fd`, a small file of the tree (or not: then nothing).
pub(super) fn closing(eng: &Engine, fd: i32, f: &FileState) {
    if !eng.cfg.tree {
        return;
    }
    let streamed = match f.small {
        Small::No => return,
        Small::ColdRead => {
            // Read to its end: by read calls and copies (they report offsets), by stdio
            // (which reads through glibc's own symbols), or as the file position says.
            let whole = f.small_read_to >= f.size_at_open
                || f.stdio_eof
                || sys::file::position(fd).is_ok_and(|pos| pos >= f.size_at_open);
            if !whole {
                return;
            }
            remember_seen(f.dev, f.ino);
            Stage::RememberedRead
        }
        Small::NewWrite => Stage::RememberedWrite,
    };
    let Ok(id) = sys::file::identify(fd) else {
        return;
    };
    if id.dev != f.dev || id.ino != f.ino || id.size == 0 {
        return;
    }
    if id.size >= eng.cfg.min_size.max(1) {
        // A big written file is the write stream's (settled as it closed): evidence only.
        evidence(id.size);
        return;
    }
    let bytes = id.size;
    with_tree(|t| {
        let was = t.stream.bulk;
        let act = t.stream.closed(bytes, &PARAMS);
        match (act, streamed) {
            (AtClose::Handle, Stage::RememberedRead) => drop_read(fd, bytes),
            (AtClose::Handle, _) => hold(t, fd, &id, Stage::Written),
            (AtClose::Remember, s) => hold(t, fd, &id, s),
            (AtClose::Leave, _) => {}
        }
        if was == Bulk::Unproven && t.stream.bulk == Bulk::Streaming {
            flush_remembered(t);
        }
        start_writebacks(t, Some(t.seq));
        // What is clean already goes; waiting is for writes.
        while settle_oldest(t, Wait::No) {}
    });
}

/// A write or copy into a file went through the engine: written files may be waited for
/// here (a write may wait, as the big-file path's does; a close never does), so that the
/// held fds never run out and no more than WRITEBACK_BYTES are under writeback.
pub(super) fn writing(window: u64) {
    writeback::wait_for_room(window);
    if HELD_ANY.load(Ordering::Relaxed) == 0 {
        return;
    }
    with_tree(|t| {
        if !t
            .held
            .iter()
            .any(|h| matches!(h.stage, Stage::Written | Stage::WritingBack))
        {
            return;
        }
        start_writebacks(t, None);
        let room = held_limit().saturating_sub(1);
        while (used(t) >= room || writing_back(t) > WRITEBACK_BYTES) && settle_oldest(t, Wait::Yes)
        {
        }
    });
}

fn used(t: &State) -> usize {
    t.held.iter().filter(|h| h.stage != Stage::Empty).count()
}

fn writing_back(t: &State) -> u64 {
    t.held
        .iter()
        .filter(|h| h.stage == Stage::WritingBack)
        .map(|h| h.bytes)
        .sum()
}

/// The program is closing `lo..=hi` (close, close_range, closefrom, dup2 onto it): a held
/// fd among them is the program's to close now, and forgotten here.
pub fn program_closes(lo: u32, hi: u32) {
    if HELD_ANY.load(Ordering::Relaxed) == 0 {
        return;
    }
    for (i, h) in HELD_FD.iter().enumerate() {
        let fd = h.load(Ordering::Acquire);
        if fd >= 0 && (lo..=hi).contains(&(fd as u32)) {
            // Without the claim the slot can't be cleared; then the claim holder's next
            // (dev, ino) check fails on the reused number and lets it go without a close.
            let _ = with_tree(|t| {
                if t.held[i].fd == fd {
                    t.held[i] = EMPTY;
                    h.store(-1, Ordering::Release);
                    HELD_ANY.fetch_sub(1, Ordering::AcqRel);
                }
            });
        }
    }
}

/// At exit: written files are written back and dropped once clean (waiting is fine here),
/// every held fd closed.
pub(super) fn at_exit() {
    with_tree(|t| {
        start_writebacks(t, None);
        while settle_oldest(t, Wait::Yes) {}
        for i in 0..HELD {
            release(t, i);
        }
    });
}

/// In a forked child: the held fds are the parent's business (closed here; the parent
/// keeps its own), and no claim is held by a thread that exists.
pub(super) fn after_fork_child() {
    TREE.claim.store(false, Ordering::Relaxed);
    let _ = with_tree(|t| {
        for i in 0..HELD {
            release(t, i);
        }
        t.stream = TreeStream::new();
    });
}

// ---------------------------------------------------------------------------------------
// Held files

#[derive(Clone, Copy, PartialEq, Eq)]
enum Wait {
    Yes,
    No,
}

fn drop_read(fd: i32, bytes: u64) {
    if sys::cache::drop_whole(fd).is_ok() {
        stats::TREE_FILES.add(1);
        stats::TREE_BYTES.add(bytes);
        super::register_report();
    }
}

fn held_limit() -> usize {
    crate::helpers::own_fds_allowed(&HELD_LIMIT, HELD)
}

/// Keeps a reopening of the program's `fd` (about to be closed).
fn hold(t: &mut State, fd: i32, id: &sys::file::FileId, stage: Stage) {
    let limit = held_limit();
    if used(t) >= limit {
        // Full: make room by settling the oldest written file without waiting, or
        // forgetting the oldest remembered one (it stays cached, as without the shim).
        if !settle_oldest(t, Wait::No)
            && let Some(i) = oldest(t, |s| s != Stage::Empty)
        {
            release(t, i);
        }
    }
    let Some(i) = t.held.iter().position(|h| h.stage == Stage::Empty) else {
        return;
    };
    let Ok(own) = sys::file::reopen(fd) else {
        return;
    };
    let own = own.into_raw();
    t.seq += 1;
    t.held[i] = Held {
        stage,
        fd: own,
        dev: id.dev,
        ino: id.ino,
        bytes: id.size,
        seq: t.seq,
    };
    HELD_FD[i].store(own, Ordering::Release);
    HELD_ANY.fetch_add(1, Ordering::AcqRel);
    // Written files still held at exit are settled then.
    super::register_at_exit();
}

/// Whether held slot `i` still names its file (the program may have closed the number and
/// opened something else on it).
fn still_ours(h: &Held) -> Option<sys::file::FileId> {
    sys::file::identify(h.fd)
        .ok()
        .filter(|id| id.dev == h.dev && id.ino == h.ino)
}

fn release(t: &mut State, i: usize) {
    let h = t.held[i];
    if h.stage == Stage::Empty {
        return;
    }
    if still_ours(&h).is_some() {
        sys::file::close_own(h.fd);
    }
    t.held[i] = EMPTY;
    HELD_FD[i].store(-1, Ordering::Release);
    HELD_ANY.fetch_sub(1, Ordering::AcqRel);
}

fn oldest(t: &State, want: impl Fn(Stage) -> bool) -> Option<usize> {
    (0..HELD)
        .filter(|&i| want(t.held[i].stage))
        .min_by_key(|&i| t.held[i].seq)
}

/// The process just showed bulk I/O: what it read before goes now, what it wrote is
/// written back.
fn flush_remembered(t: &mut State) {
    for i in 0..HELD {
        match t.held[i].stage {
            Stage::RememberedRead => {
                if still_ours(&t.held[i]).is_some() {
                    drop_read(t.held[i].fd, t.held[i].bytes);
                }
                release(t, i);
            }
            Stage::RememberedWrite => t.held[i].stage = Stage::Written,
            _ => {}
        }
    }
}

/// Starts writeback of written files, but not of the one closed just now (`newest`): a
/// file deleted right after its close (a temporary) gets none.
fn start_writebacks(t: &mut State, newest: Option<u64>) {
    for i in 0..HELD {
        let h = t.held[i];
        if h.stage != Stage::Written || Some(h.seq) == newest {
            continue;
        }
        match still_ours(&h) {
            Some(id) if id.nlink() > 0 => {
                if hand_over(t, i, id.size) {
                    continue;
                }
                let _ = sys::cache::start_writeback(h.fd, 0, id.size);
                t.held[i].bytes = id.size;
                t.held[i].stage = Stage::WritingBack;
            }
            // Deleted (its space comes back once we close), or no longer ours.
            _ => release(t, i),
        }
    }
}

/// Hands written file `i` to the writeback helper, which writes it back, waits for it and
/// drops it (the whole file: it was empty when the process first wrote it), and closes
/// the held fd. False when the helper can't take it: then it is done here.
fn hand_over(t: &mut State, i: usize, size: u64) -> bool {
    let h = t.held[i];
    let whole = crate::policy::Range::new(0, size);
    let Some(job) = writeback::Job::own(h.fd, h.dev, h.ino, whole) else {
        return false;
    };
    if !writeback::hand_over(job) {
        return false;
    }
    stats::TREE_FILES.add(1);
    stats::TREE_WRITTEN.add(1);
    stats::TREE_BYTES.add(size);
    super::register_report();
    // The fd is the job's now.
    t.held[i] = EMPTY;
    HELD_FD[i].store(-1, Ordering::Release);
    HELD_ANY.fetch_sub(1, Ordering::AcqRel);
    true
}

/// Waits (or, with `Wait::No`, only looks) until the oldest file under writeback is clean,
/// then drops it. False when there was none, or it is not clean yet and `Wait::No`.
fn settle_oldest(t: &mut State, wait: Wait) -> bool {
    let Some(i) = oldest(t, |s| s == Stage::WritingBack) else {
        return false;
    };
    let h = t.held[i];
    if still_ours(&h).is_none() {
        release(t, i);
        return true;
    }
    let clean = match wait {
        Wait::Yes => {
            sys::cache::wait_clean(h.fd, 0, h.bytes, SETTLE_BUDGET_MS, || true)
                == sys::cache::Settled::Clean
        }
        Wait::No => sys::cache::cachestat(h.fd, 0, 0).is_ok_and(|c| c.dirty + c.writeback == 0),
    };
    if !clean && wait == Wait::No {
        return false;
    }
    // DONTNEED drops what is clean and leaves the rest.
    if sys::cache::drop_whole(h.fd).is_ok() {
        stats::TREE_FILES.add(1);
        stats::TREE_WRITTEN.add(1);
        stats::TREE_BYTES.add(h.bytes);
        super::register_report();
    }
    release(t, i);
    true
}
