//! Writes: the ticket, the hot path, and windowed writeback (start window i, settle i-7;
//! the wait polls cachestat, never sync_file_range with a WAIT flag).

use super::files::{Scope, claim_tracked, drop_owned, publish, same_file, snapshot, with_file};
use super::{Engine, contained};
use crate::fdtable::{self, FileState, Hot, Managed};
use crate::policy::WriteActions;
use crate::sys::cache::Settled;
use crate::{stats, sys, writeback};
use std::sync::atomic::Ordering;

#[derive(Clone, Copy, Default)]
pub struct WriteTicket {
    pub tracked: bool,
    fast: bool,
    off: u64,
}

/// Which way a write hook goes, decided before the real call (as `ReadPath`).
pub enum WritePath {
    /// Not a file the shim manages (or beyond the table): the real call is all there is.
    Through,
    /// The hot path of a write at this offset: the real call, then `after_fast_write`.
    Fast(u64),
    /// Everything else: `before_write`, the call, `after_write`.
    Full,
}

/// The write hooks' first question, as `read_path`: the same answer as `before_write`.
#[inline(always)]
pub fn write_path(fd: i32, off: Option<u64>) -> WritePath {
    let Some(slot) = fdtable::slot(fd) else {
        return WritePath::Through;
    };
    match slot.state() {
        Managed::Ignored => WritePath::Through,
        Managed::Tracked if slot.fast_write.load(Ordering::Acquire) != Hot::None => {
            let next = slot.fast_write_next.load(Ordering::Relaxed);
            let off = off.unwrap_or(next);
            if off == next {
                WritePath::Fast(off)
            } else {
                WritePath::Full
            }
        }
        _ => WritePath::Full,
    }
}

/// After a write `write_path` sent the hot way returned `ret`: `after_write` with the
/// ticket `before_write` would have given.
#[inline(always)]
pub fn after_fast_write(fd: i32, off: u64, ret: isize) {
    let t = WriteTicket {
        tracked: true,
        fast: true,
        off,
    };
    after_write(fd, t, ret);
}

/// Before a write at `off` (`None`: at the file position, or the end with O_APPEND).
#[inline]
pub fn before_write(fd: i32, off: Option<u64>) -> WriteTicket {
    let Some(slot) = fdtable::slot(fd) else {
        return WriteTicket::default();
    };
    match slot.state() {
        Managed::Ignored => return WriteTicket::default(),
        Managed::Tracked if slot.fast_write.load(Ordering::Acquire) != Hot::None => {
            // The hot path: the stream's next write, well inside its window.
            let next = slot.fast_write_next.load(Ordering::Relaxed);
            let off = off.unwrap_or(next);
            if off == next {
                return WriteTicket {
                    tracked: true,
                    fast: true,
                    off,
                };
            }
        }
        _ => {}
    }
    slow_before_write(fd, off)
}

#[inline(never)]
pub(super) fn slow_before_write(fd: i32, off: Option<u64>) -> WriteTicket {
    contained(|eng| {
        let Some(mut c) = claim_tracked(eng, fd) else {
            return WriteTicket::default();
        };
        let f = c.file();
        if !f.writable {
            return WriteTicket::default();
        }
        let off = match off {
            Some(o) => o,
            None if f.write.started => f.write.next,
            None => write_position(fd, f.append),
        };
        if f.write.started && !f.write.continues(off) {
            finish_write(eng, fd, f);
        }
        if let Some(r) = f.write.plan(off, &eng.params) {
            snapshot(fd, &mut f.write.proof, r);
        }
        publish(eng, fd, &mut c);
        WriteTicket {
            tracked: true,
            fast: false,
            off,
        }
    })
}

/// Where a write at the file position lands: the end of the file under O_APPEND.
pub(super) fn write_position(fd: i32, append: bool) -> u64 {
    if append {
        sys::file::identify(fd).map_or(0, |id| id.size)
    } else {
        sys::file::position(fd).unwrap_or(0)
    }
}

#[inline]
pub fn after_write(fd: i32, t: WriteTicket, ret: isize) {
    if !t.tracked || ret <= 0 {
        return;
    }
    if t.fast
        && let Some(slot) = fdtable::slot(fd)
    {
        let end = t.off + ret as u64;
        if slot.fast_write.load(Ordering::Acquire) != Hot::None
            && end < slot.fast_write_until.load(Ordering::Relaxed)
        {
            slot.fast_write_next.store(end, Ordering::Release);
            return;
        }
    }
    slow_after_write(fd, t, ret);
}

#[inline(never)]
pub(super) fn slow_after_write(fd: i32, t: WriteTicket, ret: isize) {
    contained(|eng| {
        let Some(mut c) = claim_tracked(eng, fd) else {
            return;
        };
        write_event(eng, fd, c.file(), t.off, ret as u64);
        publish(eng, fd, &mut c);
        super::tree::writing(eng.params.window);
    })
}

pub(super) fn write_event(eng: &Engine, fd: i32, f: &mut FileState, off: u64, n: u64) {
    let act = f.write.wrote(off, n, &eng.params, eng.cfg.min_size);
    if f.write.next - off >= n && f.write.written_back_to > 0 && !f.counted_stream {
        f.counted_stream = true;
        stats::WRITE_STREAMS.add(1);
    }
    if f.counted_stream {
        stats::WRITTEN_MANAGED.add(n);
    }
    if let Some(r) = act.snapshot {
        snapshot(fd, &mut f.write.proof, r);
    }
    perform_write_actions(
        eng,
        fd,
        f,
        WriteActions {
            snapshot: None,
            ..act
        },
    );
}

/// How long one settle may wait for writeback before giving up on that window's drop.
const SETTLE_BUDGET_MS: u64 = 30_000;

pub(super) fn perform_write_actions(eng: &Engine, fd: i32, f: &mut FileState, act: WriteActions) {
    // Once per window: never wait on, or hint at, a file the fd no longer names.
    if (act.start_writeback.is_some() || act.settle.is_some()) && !same_file(fd, f) {
        return;
    }
    if act.start_writeback.is_some() {
        stats::WRITEBACK_WINDOWS.add(1);
    }
    if hand_over(fd, f, &act) {
        if let Some(r) = act.settle {
            f.write.settled();
            // What the stream brought in, for the tree's bulk evidence.
            super::tree::evidence(r.len());
        }
        writeback::wait_for_room(eng.params.window);
        return;
    }
    if let Some(r) = act.start_writeback {
        let _ = sys::cache::start_writeback(fd, r.start, r.len());
    }
    if let Some(r) = act.settle {
        let settled = sys::cache::wait_clean(fd, r.start, r.len(), SETTLE_BUDGET_MS, || true);
        if settled != Settled::Clean {
            stats::SETTLE_TIMEOUTS.add(1);
        }
        // Drops what is clean; DONTNEED skips dirty and under-writeback pages.
        drop_owned(fd, f, &f.write.proof, r);
        f.write.settled();
    }
}

/// Hands the window's writeback, wait and drop to the writeback helper: the program's
/// thread goes on writing. False when the helper can't take it (then it is done here).
fn hand_over(fd: i32, f: &FileState, act: &WriteActions) -> bool {
    if act.start_writeback.is_none() && act.settle.is_none() {
        return false;
    }
    let runs = act
        .settle
        .into_iter()
        .flat_map(|r| f.write.proof.owned_runs(r));
    let Some(job) = writeback::Job::new(fd, f.dev, f.ino, act.start_writeback, act.settle, runs)
    else {
        return false;
    };
    let handed = writeback::hand_over(job);
    if handed {
        // Windows still in flight are waited for at exit.
        super::register_at_exit();
    }
    handed
}

/// ftruncate: the stream ends here.
pub fn truncating(fd: i32) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        finish_write(eng, fd, f);
        f.read.finish();
    })
}

pub(super) fn finish_write(eng: &Engine, fd: i32, f: &mut FileState) {
    let act = f.write.finish(eng.cfg.min_size);
    perform_write_actions(eng, fd, f, act);
    // The stream's end waits for its windows, as the synchronous path does (a close in an
    // atexit handler that runs after the shim's, as coreutils closes stdout, would leave
    // them cached).
    writeback::release_fds(fd as u32, fd as u32);
    f.write.reset();
}
