//! Files: deciding once per fd whether the shim manages it, the residency snapshot and the
//! drops it allows, the hot path's publication, and what happens at close.

use super::{Engine, contained, register_report};
use crate::config::Backend;
use crate::fdtable::{self, Claimed, FileState, Hot, KernelReadahead, Managed, Small, Uncached};
use crate::policy::{FastRead, Params, Proof, READAHEAD_REACH, Range};
use crate::{policy, prefetch, proof, stats, sys};

pub(super) use crate::proof::snapshot;
use std::sync::atomic::Ordering;

/// The claimed, tracked slot of `fd`, adopting an fd never seen before (one fstat).
pub(super) fn claim_tracked(eng: &Engine, fd: i32) -> Option<Claimed> {
    let slot = fdtable::slot(fd)?;
    match slot.state() {
        Managed::Ignored => None,
        Managed::Tracked => {
            let mut c = slot.try_claim()?;
            take_fast(&mut c);
            Some(c)
        }
        _ => {
            let mut c = slot.try_claim()?;
            adopt(eng, fd, &mut c);
            (slot.state() == Managed::Tracked).then_some(c)
        }
    }
}

/// Folds the reads and writes that took the hot path into the streams. Until `publish`, the
/// hot path is closed and every call comes through the policy.
pub(super) fn take_fast(c: &mut Claimed) {
    let slot = c.slot();
    let f = c.file();
    let mode = slot.fast_read.swap(Hot::None, Ordering::AcqRel);
    if mode != Hot::None {
        let next = slot.fast_read_next.load(Ordering::Acquire);
        if mode != Hot::Random && next > f.read.next {
            stats::sequential_read(mode == Hot::SequentialUncached, f.unprovable)
                .add(next - f.read.next);
        }
        f.read.resume(next);
    }
    if slot.fast_write.swap(Hot::None, Ordering::AcqRel) != Hot::None {
        let next = slot.fast_write_next.load(Ordering::Acquire);
        if f.counted_stream && next > f.write.next {
            stats::WRITTEN_MANAGED.add(next - f.write.next);
        }
        f.write.resume(next);
    }
}

/// Opens the hot path for whatever the streams' state lets through.
pub(super) fn publish(eng: &Engine, fd: i32, c: &mut Claimed) {
    let slot = c.slot();
    let f = c.file();
    // Reads that may reach the end of the file (as far as the shim has seen it: its size
    // at open, or how far it was read or written since) take the full path, which sees the
    // end: the hot path counts on a read returning all it asked for.
    let inside = f
        .size_at_open
        .max(f.read.next)
        .max(f.write.next)
        .saturating_add(1);
    match f.read.fast(&read_params(eng, f)) {
        FastRead::None => {}
        FastRead::Random => {
            slot.fast_read_next.store(f.read.next, Ordering::Relaxed);
            slot.fast_read_until.store(inside, Ordering::Relaxed);
            slot.fast_read.store(Hot::Random, Ordering::Release);
        }
        FastRead::Sequential { until } => {
            slot.fast_read_next.store(f.read.next, Ordering::Relaxed);
            slot.fast_read_until
                .store(until.min(inside), Ordering::Relaxed);
            // Judged by the stream's last read through the policy; the hot path judges
            // each read by the alignment (`engine::read::read_path`).
            let align = uncached_align(eng, fd, f)
                .filter(|&a| policy::uncached_read_fits(f.read_asked, f.read.next, a));
            let mode = match align {
                Some(a) => {
                    let shift = a.trailing_zeros() as u8;
                    slot.fast_read_uncached_shift
                        .store(shift, Ordering::Relaxed);
                    Hot::SequentialUncached
                }
                None => Hot::Sequential,
            };
            slot.fast_read.store(mode, Ordering::Release);
        }
    }
    if let Some(until) = f.write.fast(&eng.params, eng.cfg.min_size) {
        slot.fast_write_next.store(f.write.next, Ordering::Relaxed);
        slot.fast_write_until.store(until, Ordering::Relaxed);
        slot.fast_write.store(Hot::Sequential, Ordering::Release);
    }
}

/// The most a first read may ask for and still go through unexamined.
const GLANCE_MAX: usize = 64 * 1024;

/// A first read of a file the program opened read-only, in a process whose small files are
/// no longer all checked (it reads cached ones: a build, an interpreter; or the tree is
/// off), goes through
/// without the fstat that classifies it: a hot small file, read at once and closed, costs
/// no system call of the shim's. Any later call on the fd classifies it as a first one
/// would, a big file's stream starting there: what this read brought in (readahead's first
/// window, at most four times `GLANCE_MAX`) stays cached, as pages not proven its own do.
pub(super) fn glance(eng: &Engine, fd: i32, asked: Option<usize>) -> bool {
    let Some(slot) = fdtable::slot(fd) else {
        return false;
    };
    let read_only = slot
        .open_flags()
        .is_some_and(|f| f & libc::O_ACCMODE == libc::O_RDONLY && f & libc::O_DIRECT == 0);
    if slot.state() != Managed::Unknown || !read_only || asked.is_none_or(|n| n > GLANCE_MAX) {
        return false;
    }
    let Some(c) = slot.try_claim() else {
        return false;
    };
    if slot.state() != Managed::Unknown || !super::tree::skips_next(eng) {
        return false;
    }
    c.set_state(Managed::Glanced);
    true
}

/// Decides once per fd whether it is a file the shim manages.
pub(super) fn adopt(eng: &Engine, fd: i32, c: &mut Claimed) {
    let ignore = |c: &mut Claimed| c.set_state(Managed::Ignored);
    // Its sample of the tree's residency checks was taken: a skip.
    let glanced = c.slot().state() == Managed::Glanced;
    let Ok(id) = sys::file::identify(fd) else {
        return ignore(c);
    };
    // The open's own flags where the shim saw it (access mode, O_DIRECT and O_PATH are
    // all that is asked, and F_SETFL forgets them): one system call fewer per file.
    let Some(flags) = c
        .slot()
        .open_flags()
        .or_else(|| sys::file::status_flags(fd).ok())
    else {
        return ignore(c);
    };
    let acc = flags & libc::O_ACCMODE;
    let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
    if !id.regular() || flags & (libc::O_DIRECT | libc::O_PATH) != 0 {
        return ignore(c);
    }
    if excluded(eng, fd) {
        stats::FILES_EXCLUDED.add(1);
        return ignore(c);
    }
    // Small files opened read-only never become streams of their own, but may be part of
    // a tree the process streams; writable ones may grow into a stream.
    let small = if writable {
        if id.size == 0 {
            Small::NewWrite
        } else {
            Small::No
        }
    } else if id.size < eng.cfg.min_size.max(1) {
        if glanced {
            return ignore(c);
        }
        match super::tree::adopt_small_read(eng, fd, id.dev, id.ino, id.size) {
            Small::No => return ignore(c),
            cold => cold,
        }
    } else {
        Small::No
    };
    let readable = acc == libc::O_RDONLY || acc == libc::O_RDWR;
    let (mut prefetch_reach, mut prefetch_chunk) = (0, 0);
    let mut kernel_readahead = KernelReadahead::Leave;
    if readable && eng.cfg.readahead > 0 {
        let (device_ra, chunk) = crate::prefetch::device(id.dev);
        prefetch_reach = crate::prefetch::reach_for(eng.cfg.readahead, device_ra);
        prefetch_chunk = chunk;
        // Doubled only on a file description this process opened (advice holds for every
        // process sharing one), and only where the proof's reach covers twice the
        // device's readahead.
        if prefetch_reach == 0
            && c.slot().own_description()
            && device_ra.saturating_mul(2) <= READAHEAD_REACH / 2
        {
            kernel_readahead = KernelReadahead::Deepen;
        }
    }
    *c.file() = FileState {
        dev: id.dev,
        ino: id.ino,
        size_at_open: id.size,
        readable,
        writable,
        append: flags & libc::O_APPEND != 0,
        prefetch_reach,
        prefetch_chunk,
        kernel_readahead,
        small,
        ..FileState::default()
    };
    c.set_state(Managed::Tracked);
    // A small file of a tree is counted, and the report registered, when it is dropped.
    if small != Small::ColdRead {
        stats::FILES_TRACKED.add(1);
        register_report();
    }
}

/// DROPBEHIND_EXCLUDE: globs matched against the fd's absolute path (fnmatch without
/// FNM_PATHNAME, so `*` spans directories), or a directory prefix.
pub(super) fn excluded(eng: &Engine, fd: i32) -> bool {
    if eng.exclude.is_empty() {
        return false;
    }
    let mut path = [0u8; 4097];
    let Ok(n) = sys::file::fd_path(fd, &mut path) else {
        return false;
    };
    eng.exclude.iter().any(|g| {
        let g_bytes = g.as_bytes();
        let prefix_hit = path[..n].starts_with(g_bytes) && path.get(g_bytes.len()) == Some(&b'/');
        prefix_hit || sys::file::glob_matches(g, &path[..=n])
    })
}

/// Drops the proven chunks of `r`, after checking that the fd still is the file it was.
pub(super) fn drop_owned(fd: i32, f: &FileState, proof: &Proof, r: Range) {
    // Nothing proven here (a file whose residency is unknowable): no fstat for nothing.
    if r.is_empty() || proof.owned_runs(r).next().is_none() || !same_file(fd, f) {
        return;
    }
    let released = proof::drop_proven(fd, proof, r);
    super::tree::evidence(released * crate::policy::PAGE);
}

/// A close the shim missed (raw syscall, another library) can leave a stale slot: checked
/// before any drop, so the worst a stale slot costs is a wasted hint.
pub(super) fn same_file(fd: i32, f: &FileState) -> bool {
    sys::file::identify(fd).is_ok_and(|id| id.dev == f.dev && id.ino == f.ino)
}

/// Which fds an event concerns: only files already tracked, or also fds not examined yet
/// (examined on the spot).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    Tracked,
    Unexamined,
}

/// The common preamble of the events below: when the shim manages `fd`, runs `f` on its
/// claimed state inside the shim (errno kept, panics contained).
pub(super) fn with_file(fd: i32, scope: Scope, f: impl FnOnce(&'static Engine, &mut Claimed)) {
    let concerned = fdtable::slot(fd).is_some_and(|s| match scope {
        Scope::Tracked => s.state() == Managed::Tracked,
        Scope::Unexamined => s.state() != Managed::Ignored,
    });
    if concerned {
        contained(|eng| {
            if let Some(mut c) = claim_tracked(eng, fd) {
                f(eng, &mut c);
            }
        })
    }
}

/// Whether a sequential stream's read of `asked` bytes at `off` goes uncached
/// (RWF_DONTCACHE), by `uncached_align`; one that does not fit ends the stream's uncached
/// reads (`Uncached::Never`).
pub(super) fn uncached_reads(
    eng: &Engine,
    fd: i32,
    f: &mut FileState,
    off: u64,
    asked: u64,
) -> bool {
    let Some(a) = uncached_align(eng, fd, f) else {
        return false;
    };
    let fits = policy::uncached_read_fits(asked, off, a);
    if !fits {
        f.uncached = Uncached::Never;
    }
    fits
}

/// Which of a sequential stream's reads go uncached (RWF_DONTCACHE): none (`None`), or
/// those whose count and offset are multiples of the alignment given
/// (`policy::uncached_read_fits`). Uncached reads measured 1.9-10x slower than fadvise
/// drop-behind for reads of 4 KiB-1 MiB here, so `auto` keeps them for files whose
/// residency can't be proven, and there for reads that end on readahead's folios' ends:
/// others would read the file again in part, slower than leaving it cached.
pub(super) fn uncached_align(eng: &Engine, fd: i32, f: &FileState) -> Option<u64> {
    let align = match eng.cfg.backend {
        Backend::DontCache => 1,
        Backend::Auto if f.unprovable && f.uncached == Uncached::EachRead => {
            policy::readahead_folio_max(prefetch::device_readahead(f.dev))
        }
        _ => return None,
    };
    dontcache_ok(fd, f.dev).then_some(align)
}

pub(super) fn dontcache_ok(fd: i32, dev: u64) -> bool {
    match fdtable::fs_dontcache(dev) {
        fdtable::Dontcache::Supported => true,
        fdtable::Dontcache::Refused => false,
        _ => {
            let yes = sys::file::probe_dontcache(fd);
            fdtable::set_fs_dontcache(
                dev,
                if yes {
                    fdtable::Dontcache::Supported
                } else {
                    fdtable::Dontcache::Refused
                },
            );
            crate::debug!(
                "fd {fd}: filesystem {dev:#x} RWF_DONTCACHE {}",
                if yes { "yes" } else { "no" }
            );
            yes
        }
    }
}

/// A dontcache read failed with EOPNOTSUPP: remember that for the filesystem.
pub fn dontcache_refused(fd: i32) {
    contained(|_| {
        if let Ok(id) = sys::file::identify(fd) {
            fdtable::set_fs_dontcache(id.dev, fdtable::Dontcache::Refused);
        }
    })
}

/// Whether `fd` is, or may turn out to be, a file the shim manages.
pub fn may_manage(fd: i32) -> bool {
    fdtable::slot(fd).is_some_and(|s| s.state() != Managed::Ignored)
}

/// The policy's parameters for reads of `f`: prefetch only where the stream's pages can be
/// proven its own (so they are dropped behind once read) and dropped with fadvise.
pub(super) fn read_params(eng: &Engine, f: &FileState) -> Params {
    let provable = !f.unprovable && eng.cfg.backend != Backend::DontCache;
    eng.params
        .with_prefetch(if provable { f.prefetch_reach } else { 0 })
}
