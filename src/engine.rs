//! The engine: takes events from the hooks, runs them through the policy for the fd's slot,
//! and performs the resulting actions through `effects`.
//!
//! Every entry point is fail-open: before the constructor ran, inside the shim's own calls,
//! for fds beyond the table, when a slot is busy, or if policy code panicked, it does nothing
//! and the program's call proceeds untouched. The hooks call the real function themselves,
//! outside anything here, exactly once.

use crate::config::{Backend, Config};
use crate::effects::{self, ErrnoGuard};
use crate::fdtable::{
    self, Claimed, FAST_NONE, FAST_RANDOM, FAST_SEQUENTIAL, FAST_SEQUENTIAL_UNCACHED, FileState,
    IGNORED, Slot, TRACKED,
};
use crate::policy::{FastRead, read_continues};
use crate::policy::{PROOF_BLOCK, Params, Pattern, Proof, Range};
use crate::stats;
use std::cell::Cell;
use std::ffi::CString;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

pub struct Engine {
    pub cfg: Config,
    params: Params,
    exclude: Vec<CString>,
}

static ENGINE: OnceLock<Engine> = OnceLock::new();

/// Installs the configuration (constructor only). Returns false if already installed.
pub fn install(cfg: Config) -> bool {
    let exclude = cfg
        .exclude
        .iter()
        .filter_map(|g| CString::new(g.as_str()).ok())
        .collect();
    let params = Params::new(cfg.window);
    ENGINE
        .set(Engine {
            cfg,
            params,
            exclude,
        })
        .is_ok()
}

/// Set for good when the program sandboxes itself (see hooks/process.rs).
static DISABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn disable() {
    DISABLED.store(true, Ordering::Release);
    for slot in fdtable::all() {
        slot.forget_fast();
    }
    // Helper threads stop before the sandbox could kill the process for their syscalls.
    crate::prefetch::shutdown();
    crate::mapwatch::shutdown();
    crate::dirprefetch::shutdown();
}

#[inline]
fn engine() -> Option<&'static Engine> {
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    ENGINE.get().filter(|e| e.cfg.backend != Backend::Off)
}

pub fn config() -> Option<&'static Config> {
    ENGINE.get().map(|e| &e.cfg)
}

thread_local! {
    static IN_SHIM: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as inside the shim: hooks reached from here pass straight through.
pub struct ShimGuard(());

impl ShimGuard {
    pub fn enter() -> Option<ShimGuard> {
        let was = IN_SHIM.try_with(|f| f.replace(true)).unwrap_or(true);
        (!was).then_some(ShimGuard(()))
    }
}

impl Drop for ShimGuard {
    fn drop(&mut self) {
        let _ = IN_SHIM.try_with(|f| f.set(false));
    }
}

/// Runs `f` inside the shim with errno preserved and panics contained.
fn contained<R: Default>(f: impl FnOnce(&'static Engine) -> R) -> R {
    contained_or(R::default(), f)
}

/// As `contained`, answering `fallback` whenever the shim can't or mustn't act.
fn contained_or<R>(fallback: R, f: impl FnOnce(&'static Engine) -> R) -> R {
    let Some(eng) = engine() else { return fallback };
    let Some(_g) = ShimGuard::enter() else {
        return fallback;
    };
    let _e = ErrnoGuard::new();
    catch_unwind(AssertUnwindSafe(|| f(eng))).unwrap_or(fallback)
}

/// The claimed, tracked slot of `fd`, adopting an fd never seen before (one fstat).
fn claim_tracked(eng: &Engine, fd: i32) -> Option<Claimed> {
    let slot = fdtable::slot(fd)?;
    match slot.state() {
        IGNORED => None,
        TRACKED => {
            let mut c = slot.try_claim()?;
            take_fast(&mut c);
            Some(c)
        }
        _ => {
            let mut c = slot.try_claim()?;
            adopt(eng, fd, &mut c);
            (slot.state() == TRACKED).then_some(c)
        }
    }
}

/// Folds the reads and writes that took the hot path into the streams. Until `publish`, the
/// hot path is closed and every call comes through the policy.
fn take_fast(c: &mut Claimed) {
    let slot = c.slot();
    let f = c.file();
    let mode = slot.fast_read.swap(FAST_NONE, Ordering::AcqRel);
    if mode != FAST_NONE {
        let next = slot.fast_read_next.load(Ordering::Acquire);
        if mode != FAST_RANDOM && next > f.read.next {
            let counter = if mode == FAST_SEQUENTIAL_UNCACHED {
                &stats::READ_DONTCACHE
            } else {
                &stats::READ_FADVISE
            };
            counter.add(next - f.read.next);
        }
        f.read.resume(next);
    }
    if slot.fast_write.swap(FAST_NONE, Ordering::AcqRel) != FAST_NONE {
        let next = slot.fast_write_next.load(Ordering::Acquire);
        if f.counted_stream && next > f.write.next {
            stats::WRITTEN_MANAGED.add(next - f.write.next);
        }
        f.write.resume(next);
    }
}

/// Opens the hot path for whatever the streams' state lets through.
fn publish(eng: &Engine, fd: i32, c: &mut Claimed) {
    let slot = c.slot();
    let f = c.file();
    match f.read.fast(&read_params(eng, f)) {
        FastRead::None => {}
        FastRead::Random => {
            slot.fast_read_next.store(f.read.next, Ordering::Relaxed);
            slot.fast_read.store(FAST_RANDOM, Ordering::Release);
        }
        FastRead::Sequential { until } => {
            slot.fast_read_next.store(f.read.next, Ordering::Relaxed);
            slot.fast_read_until.store(until, Ordering::Relaxed);
            let mode = if uncached_reads(eng, fd, f) {
                FAST_SEQUENTIAL_UNCACHED
            } else {
                FAST_SEQUENTIAL
            };
            slot.fast_read.store(mode, Ordering::Release);
        }
    }
    if let Some(until) = f.write.fast(&eng.params, eng.cfg.min_size) {
        slot.fast_write_next.store(f.write.next, Ordering::Relaxed);
        slot.fast_write_until.store(until, Ordering::Relaxed);
        slot.fast_write.store(FAST_SEQUENTIAL, Ordering::Release);
    }
}

/// Decides once per fd whether it is a file the shim manages.
fn adopt(eng: &Engine, fd: i32, c: &mut Claimed) {
    let ignore = |c: &mut Claimed| c.set_state(IGNORED);
    let Some(id) = effects::identify(fd) else {
        return ignore(c);
    };
    let Some(flags) = effects::status_flags(fd) else {
        return ignore(c);
    };
    let acc = flags & libc::O_ACCMODE;
    let writable = acc == libc::O_WRONLY || acc == libc::O_RDWR;
    // Small files opened read-only never become streams; writable ones may grow into one.
    let small = id.size < eng.cfg.min_size.max(1) && !writable;
    if !id.regular || small || flags & (libc::O_DIRECT | libc::O_PATH) != 0 {
        return ignore(c);
    }
    if excluded(eng, fd) {
        stats::FILES_EXCLUDED.add(1);
        return ignore(c);
    }
    let readable = acc == libc::O_RDONLY || acc == libc::O_RDWR;
    let (prefetch_reach, prefetch_chunk) = if readable && eng.cfg.readahead > 0 {
        let (device_ra, chunk) = crate::prefetch::device(id.dev);
        (
            crate::prefetch::reach_for(eng.cfg.readahead, device_ra),
            chunk,
        )
    } else {
        (0, 0)
    };
    *c.file() = FileState {
        dev: id.dev,
        ino: id.ino,
        size_at_open: id.size,
        readable,
        writable,
        prefetch_reach,
        prefetch_chunk,
        ..FileState::default()
    };
    c.set_state(TRACKED);
    stats::FILES_TRACKED.add(1);
    register_report();
}

/// The exit report is registered with atexit when the first file is tracked, not in the
/// constructor: handlers run in reverse order, and programs like coreutils close stderr in
/// an atexit handler registered at the start of main. Once per process.
fn register_report() {
    static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some(cfg) = config() else { return };
    if cfg.stats != crate::config::StatsSink::Off
        && !REGISTERED.swap(true, std::sync::atomic::Ordering::AcqRel)
    {
        // SAFETY: registering a plain function.
        unsafe { libc::atexit(report_at_exit) };
    }
}

extern "C" fn report_at_exit() {
    at_exit();
}

/// DROPBEHIND_EXCLUDE: globs matched against the fd's absolute path (fnmatch without
/// FNM_PATHNAME, so `*` spans directories), or a directory prefix.
fn excluded(eng: &Engine, fd: i32) -> bool {
    if eng.exclude.is_empty() {
        return false;
    }
    let mut link = [0u8; 64];
    let mut path = [0u8; 4097];
    let name = format_proc_fd(&mut link, fd);
    // SAFETY: NUL-terminated link name; `path` has room for PATH_MAX plus NUL.
    let n = unsafe { libc::syscall(libc::SYS_readlink, name.as_ptr(), path.as_mut_ptr(), 4096) };
    if n <= 0 {
        return false;
    }
    let n = n as usize;
    path[n] = 0;
    eng.exclude.iter().any(|g| {
        let g_bytes = g.as_bytes();
        // SAFETY: both strings are NUL-terminated.
        let glob_hit = unsafe { libc::fnmatch(g.as_ptr(), path.as_ptr().cast(), 0) } == 0;
        let prefix_hit = path[..n].starts_with(g_bytes) && path.get(g_bytes.len()) == Some(&b'/');
        glob_hit || prefix_hit
    })
}

fn format_proc_fd(buf: &mut [u8; 64], fd: i32) -> &[u8] {
    use std::io::Write;
    let mut cur = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(cur, "/proc/self/fd/{fd}\0");
    let n = cur.position() as usize;
    &buf[..n]
}

/// Takes the residency snapshot `r` into `proof`: one cachestat for the common all-cold
/// case, per block otherwise. False when residency can't be known (no cachestat, or no
/// write permission): then nothing is proven and nothing will be dropped by fadvise.
pub(crate) fn snapshot(fd: i32, proof: &mut Proof, r: Range) -> bool {
    stats::SNAPSHOTS.add(1);
    let cold = crate::residency::cachestat(fd, r.start, r.len()).map(|c| c.cache == 0);
    let known = cold.is_ok();
    for block in r.start / PROOF_BLOCK..r.end / PROOF_BLOCK {
        let bits = match cold {
            Ok(true) => !0,
            Ok(false) => effects::uncached_chunks(fd, block).unwrap_or(0),
            Err(_) => 0,
        };
        proof.record(block, bits);
    }
    known
}

/// Drops the proven chunks of `r`, after checking that the fd still is the file it was.
fn drop_owned(fd: i32, f: &FileState, proof: &Proof, r: Range) {
    if r.is_empty() || !same_file(fd, f) {
        return;
    }
    for run in proof.owned_runs(r) {
        stats::DROP_CALLS.add(1);
        stats::PAGES_RELEASED.add(effects::drop_range(fd, run));
    }
}

/// A close the shim missed (raw syscall, another library) can leave a stale slot: checked
/// before any drop, so the worst a stale slot costs is a wasted hint.
fn same_file(fd: i32, f: &FileState) -> bool {
    effects::identify(fd).is_some_and(|id| id.dev == f.dev && id.ino == f.ino)
}

// ---------------------------------------------------------------------------------------
// Open and close

/// A new fd number appeared (open, dup, fcntl dup): whatever the slot held belonged to an
/// earlier file. The new one is examined lazily, on its first read or write, so that opens
/// cost nothing.
pub fn forget(fd: i32) {
    if let Some(slot) = fdtable::slot(fd) {
        slot.forget();
    }
}

/// Before `fd` is closed: drop what its streams consumed, settle what they wrote.
pub fn closing(fd: i32) {
    let Some(slot) = fdtable::slot(fd) else {
        return;
    };
    if slot.state() == TRACKED {
        contained(|eng| {
            if let Some(mut c) = slot.try_claim() {
                finish_streams(eng, fd, c.file());
            }
        });
    }
    slot.forget();
}

/// Before fds `lo..=hi` are closed together.
pub fn closing_range(lo: u32, hi: u32) {
    let top = hi.min(fdtable::MAX_FDS as u32 - 1);
    if lo > top {
        return;
    }
    for fd in lo..=top {
        closing(fd as i32);
    }
}

fn finish_streams(eng: &Engine, fd: i32, f: &mut FileState) {
    crate::info!(
        "fd {fd}: closing; read {:?} up to {} MiB, wrote up to {} MiB",
        f.read.pattern,
        f.read.next >> 20,
        f.write.next >> 20
    );
    let proof = f.read.proof;
    if let Some(r) = f.read.finish() {
        drop_owned(fd, f, &proof, r);
    }
    finish_write(eng, fd, f);
}

fn finish_write(eng: &Engine, fd: i32, f: &mut FileState) {
    let act = f.write.finish(eng.cfg.min_size);
    perform_write_actions(fd, f, act);
    f.write.reset();
}

// ---------------------------------------------------------------------------------------
// Reads

/// What `before_read` decided; carried by the hook across the real call (plain data).
#[derive(Clone, Copy, Default)]
pub struct ReadTicket {
    pub tracked: bool,
    pub dontcache: bool,
    /// Decided on the hot path: `after_read` tries the hot path too.
    fast: bool,
    off: u64,
}

/// Before a read at `off` (`None`: at the file position).
#[inline]
pub fn before_read(fd: i32, off: Option<u64>) -> ReadTicket {
    let Some(slot) = fdtable::slot(fd) else {
        return ReadTicket::default();
    };
    match slot.state() {
        IGNORED => return ReadTicket::default(),
        TRACKED => {
            if let Some(t) = fast_read_ticket(slot, off) {
                return t;
            }
        }
        _ => {}
    }
    slow_before_read(fd, off)
}

/// The hot path: a random stream's jump, or a sequential stream's next read well inside
/// its window, needs nothing but the stream's new position.
#[inline]
fn fast_read_ticket(slot: &Slot, off: Option<u64>) -> Option<ReadTicket> {
    let mode = slot.fast_read.load(Ordering::Acquire);
    if mode == FAST_NONE {
        return None;
    }
    let next = slot.fast_read_next.load(Ordering::Relaxed);
    let off = off.unwrap_or(next);
    let continues = read_continues(next, off);
    let skip = if mode == FAST_RANDOM {
        !continues
    } else {
        continues
    };
    skip.then_some(ReadTicket {
        tracked: true,
        dontcache: mode == FAST_SEQUENTIAL_UNCACHED,
        fast: true,
        off,
    })
}

#[inline(never)]
fn slow_before_read(fd: i32, off: Option<u64>) -> ReadTicket {
    contained(|eng| {
        let Some(mut c) = claim_tracked(eng, fd) else {
            return ReadTicket::default();
        };
        let f = c.file();
        if !f.readable || f.size_at_open < eng.cfg.min_size.max(1) {
            return ReadTicket::default();
        }
        let off = match off {
            Some(o) => o,
            None if f.read.pattern == Pattern::Fresh => effects::position(fd).unwrap_or(0),
            None => f.read.next,
        };
        let plan = f.read.plan(off, &eng.params);
        if let Some(r) = plan.snapshot {
            f.unprovable = !snapshot(fd, &mut f.read.proof, r);
        }
        let dontcache = plan.dontcache && uncached_reads(eng, fd, f);
        publish(eng, fd, &mut c);
        ReadTicket {
            tracked: true,
            dontcache,
            fast: false,
            off,
        }
    })
}

/// Whether a sequential stream on this file reads with RWF_DONTCACHE. Uncached reads
/// measured 1.9-10x slower than fadvise drop-behind for reads of 4 KiB-1 MiB here, so `auto`
/// keeps them for files whose residency can't be proven.
fn uncached_reads(eng: &Engine, fd: i32, f: &FileState) -> bool {
    let wanted = match eng.cfg.backend {
        Backend::DontCache => true,
        Backend::Auto => f.unprovable,
        _ => false,
    };
    wanted && dontcache_ok(fd, f.dev)
}

fn dontcache_ok(fd: i32, dev: u64) -> bool {
    match fdtable::fs_dontcache(dev) {
        fdtable::FS_YES => true,
        fdtable::FS_NO => false,
        _ => {
            let yes = effects::probe_dontcache(fd);
            fdtable::set_fs_dontcache(dev, if yes { fdtable::FS_YES } else { fdtable::FS_NO });
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
        if let Some(id) = effects::identify(fd) {
            fdtable::set_fs_dontcache(id.dev, fdtable::FS_NO);
        }
    })
}

/// After the read described by `t` returned `ret` (bytes, or -1).
#[inline]
pub fn after_read(fd: i32, t: ReadTicket, asked: usize, ret: isize) {
    if !t.tracked || ret < 0 {
        return;
    }
    if t.fast && ret > 0 {
        if let Some(slot) = fdtable::slot(fd) {
            let end = t.off + ret as u64;
            let mode = slot.fast_read.load(Ordering::Acquire);
            if mode == FAST_RANDOM
                || (mode != FAST_NONE && end < slot.fast_read_until.load(Ordering::Relaxed))
            {
                slot.fast_read_next.store(end, Ordering::Release);
                return;
            }
        }
    }
    slow_after_read(fd, t, asked, ret);
}

#[inline(never)]
fn slow_after_read(fd: i32, t: ReadTicket, asked: usize, ret: isize) {
    contained(|eng| {
        let Some(mut c) = claim_tracked(eng, fd) else {
            return;
        };
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

fn read_event(
    eng: &Engine,
    fd: i32,
    f: &mut FileState,
    off: u64,
    got: u64,
    asked: u64,
    dontcache: bool,
) {
    let was_seq = f.read.pattern == Pattern::Sequential;
    let act = f.read.consumed(off, got, asked, &read_params(eng, f));
    if f.read.pattern == Pattern::Sequential {
        if !was_seq && !f.counted_stream {
            f.counted_stream = true;
            stats::READ_STREAMS.add(1);
        }
        if dontcache {
            stats::READ_DONTCACHE.add(got);
        } else {
            stats::READ_FADVISE.add(got);
        }
    }
    if let Some(r) = act.drop {
        if eng.cfg.backend != Backend::DontCache {
            drop_owned(fd, f, &f.read.proof, r);
        }
        f.read.dropped(r);
    }
    if let Some(r) = act.snapshot {
        snapshot(fd, &mut f.read.proof, r);
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

/// The policy's parameters for reads of `f`: prefetch only where the stream's pages can be
/// proven its own (so they are dropped behind once read) and dropped with fadvise.
fn read_params(eng: &Engine, f: &FileState) -> Params {
    let provable = !f.unprovable && eng.cfg.backend != Backend::DontCache;
    eng.params
        .with_prefetch(if provable { f.prefetch_reach } else { 0 })
}

/// Which fds an event concerns: only files already tracked, or also fds not examined yet
/// (examined on the spot).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Scope {
    Tracked,
    Unexamined,
}

/// The common preamble of the events below: when the shim manages `fd`, runs `f` on its
/// claimed state inside the shim (errno kept, panics contained).
fn with_file(fd: i32, scope: Scope, f: impl FnOnce(&'static Engine, &mut Claimed)) {
    let concerned = fdtable::slot(fd).is_some_and(|s| match scope {
        Scope::Tracked => s.state() == TRACKED,
        Scope::Unexamined => s.state() != IGNORED,
    });
    if concerned {
        contained(|eng| {
            if let Some(mut c) = claim_tracked(eng, fd) {
                f(eng, &mut c);
            }
        })
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

// ---------------------------------------------------------------------------------------
// Writes

#[derive(Clone, Copy, Default)]
pub struct WriteTicket {
    pub tracked: bool,
    fast: bool,
    off: u64,
}

/// Before a write at `off` (`None`: at the file position, or the end with O_APPEND).
#[inline]
pub fn before_write(fd: i32, off: Option<u64>) -> WriteTicket {
    let Some(slot) = fdtable::slot(fd) else {
        return WriteTicket::default();
    };
    match slot.state() {
        IGNORED => return WriteTicket::default(),
        TRACKED if slot.fast_write.load(Ordering::Acquire) != FAST_NONE => {
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
fn slow_before_write(fd: i32, off: Option<u64>) -> WriteTicket {
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
            None => write_position(fd),
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
fn write_position(fd: i32) -> u64 {
    let append = effects::status_flags(fd).is_some_and(|fl| fl & libc::O_APPEND != 0);
    if append {
        effects::identify(fd).map_or(0, |id| id.size)
    } else {
        effects::position(fd).unwrap_or(0)
    }
}

#[inline]
pub fn after_write(fd: i32, t: WriteTicket, ret: isize) {
    if !t.tracked || ret <= 0 {
        return;
    }
    if t.fast {
        if let Some(slot) = fdtable::slot(fd) {
            let end = t.off + ret as u64;
            if slot.fast_write.load(Ordering::Acquire) != FAST_NONE
                && end < slot.fast_write_until.load(Ordering::Relaxed)
            {
                slot.fast_write_next.store(end, Ordering::Release);
                return;
            }
        }
    }
    slow_after_write(fd, t, ret);
}

#[inline(never)]
fn slow_after_write(fd: i32, t: WriteTicket, ret: isize) {
    contained(|eng| {
        let Some(mut c) = claim_tracked(eng, fd) else {
            return;
        };
        write_event(eng, fd, c.file(), t.off, ret as u64);
        publish(eng, fd, &mut c);
    })
}

fn write_event(eng: &Engine, fd: i32, f: &mut FileState, off: u64, n: u64) {
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
        fd,
        f,
        crate::policy::WriteActions {
            snapshot: None,
            ..act
        },
    );
}

/// How long one settle may wait for writeback before giving up on that window's drop.
const SETTLE_BUDGET_MS: u64 = 30_000;

fn perform_write_actions(fd: i32, f: &mut FileState, act: crate::policy::WriteActions) {
    // Once per window: never wait on, or hint at, a file the fd no longer names.
    if (act.start_writeback.is_some() || act.settle.is_some()) && !same_file(fd, f) {
        return;
    }
    if let Some(r) = act.start_writeback {
        stats::WRITEBACK_WINDOWS.add(1);
        effects::start_writeback(fd, r);
    }
    if let Some(r) = act.settle {
        if effects::wait_clean(fd, r, SETTLE_BUDGET_MS) {
            drop_owned(fd, f, &f.write.proof, r);
        } else {
            stats::SETTLE_TIMEOUTS.add(1);
            drop_owned(fd, f, &f.write.proof, r); // drops what is clean, skips the rest
        }
        f.write.settled();
    }
}

/// ftruncate: the stream ends here.
pub fn truncating(fd: i32) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        finish_write(eng, fd, f);
        f.read.finish();
    })
}

// ---------------------------------------------------------------------------------------
// In-kernel copies: copy_file_range, sendfile, splice

/// Whether `fd` is, or may turn out to be, a file the shim manages.
pub fn may_manage(fd: i32) -> bool {
    fdtable::slot(fd).is_some_and(|s| s.state() != IGNORED)
}

/// The length to ask the kernel for: one window when the destination is a managed file (a
/// short count is legal, and a caller asking for more than is left must loop to see the
/// end), else the program's own. Copies into sockets and pipes keep their length.
pub fn copy_len(fd_in: i32, fd_out: i32, len: usize) -> usize {
    if !may_manage(fd_out) || !may_manage(fd_in) {
        return len;
    }
    contained_or(len, |eng| {
        let window = eng.params.window as usize;
        if len <= window {
            return len;
        }
        let min = eng.cfg.min_size;
        let reads_big = claim_tracked(eng, fd_in)
            .is_some_and(|mut c| c.file().readable && c.file().size_at_open >= min);
        let writes = claim_tracked(eng, fd_out).is_some_and(|mut c| c.file().writable);
        if reads_big && writes {
            stats::COPY_CLAMPS.add(1);
            window
        } else {
            len
        }
    })
}

// ---------------------------------------------------------------------------------------
// stdio: glibc reads and writes through hidden symbols, so the shim samples the kernel
// file position every STDIO_SAMPLE bytes the program moves, and at EOF and fclose.

const STDIO_SAMPLE: u64 = 256 * 1024;

/// Before a stdio read: a new stream takes its snapshot here, before glibc's first refill.
pub fn stdio_before_read(fd: i32) {
    with_file(fd, Scope::Unexamined, |eng, c| {
        let f = c.file();
        if !f.readable
            || f.size_at_open < eng.cfg.min_size.max(1)
            || f.read.pattern != Pattern::Fresh
        {
            return;
        }
        let off = effects::position(fd).unwrap_or(0);
        if let Some(r) = f.read.plan(off, &eng.params).snapshot {
            snapshot(fd, &mut f.read.proof, r);
        }
        // The stream starts here; samples of the position then extend it.
        f.read.consumed(off, 0, 0, &eng.params);
    })
}

/// After a stdio read call handed `n` bytes to the program (`eof`: it hit end of file).
pub fn stdio_after_read(fd: i32, n: u64, eof: bool) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        if !f.readable || f.size_at_open < eng.cfg.min_size.max(1) {
            return;
        }
        f.stdio_pending += n;
        if f.stdio_pending < STDIO_SAMPLE && !eof {
            return;
        }
        f.stdio_pending = 0;
        stdio_sample_read(eng, fd, f, eof);
    })
}

fn stdio_sample_read(eng: &Engine, fd: i32, f: &mut FileState, eof: bool) {
    let Some(pos) = effects::position(fd) else {
        return;
    };
    let next = f.read.next;
    if pos < next {
        if let Some(r) = f.read.seeked(pos) {
            drop_owned(fd, f, &f.read.proof, r);
            f.read.dropped(r);
        }
        return;
    }
    read_event(eng, fd, f, next, pos - next, pos - next, false);
    if eof {
        read_event(eng, fd, f, pos, 0, 1, false);
    }
}

pub fn stdio_before_write(fd: i32) {
    with_file(fd, Scope::Unexamined, |eng, c| {
        let f = c.file();
        if f.writable && !f.write.started {
            let off = write_position(fd);
            if let Some(r) = f.write.plan(off, &eng.params) {
                snapshot(fd, &mut f.write.proof, r);
            }
        }
    })
}

pub fn stdio_after_write(fd: i32, n: u64) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        if !f.write.started {
            return;
        }
        f.stdio_pending += n;
        if f.stdio_pending < STDIO_SAMPLE {
            return;
        }
        f.stdio_pending = 0;
        stdio_sample_write(eng, fd, f);
    })
}

fn stdio_sample_write(eng: &Engine, fd: i32, f: &mut FileState) {
    let Some(pos) = effects::position(fd) else {
        return;
    };
    let next = f.write.next;
    if pos > next {
        write_event(eng, fd, f, next, pos - next);
    }
}

/// Before fclose: account for what stdio moved since the last sample, then close as usual.
pub fn stdio_closing(fd: i32) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        if f.write.started {
            stdio_sample_write(eng, fd, f);
        } else if f.readable && f.read.pattern != Pattern::Fresh {
            stdio_sample_read(eng, fd, f, false);
        }
    });
    closing(fd);
}

// ---------------------------------------------------------------------------------------
// Directories

/// After the program opened a directory stream on `fd`.
pub fn directory_opened(fd: i32) {
    let Some(cfg) = config() else { return };
    if !cfg.dir.enabled || DISABLED.load(Ordering::Relaxed) {
        return;
    }
    let Some(_g) = ShimGuard::enter() else { return };
    let _e = ErrnoGuard::new();
    let _ = catch_unwind(AssertUnwindSafe(|| {
        if crate::dirprefetch::opened(fd, &cfg.dir) {
            register_report();
        }
    }));
}

/// Before the program closes the directory stream on `fd`.
pub fn directory_closing(fd: i32) {
    let Some(_g) = ShimGuard::enter() else { return };
    let _e = ErrnoGuard::new();
    let _ = catch_unwind(AssertUnwindSafe(|| crate::dirprefetch::closing(fd)));
}

// ---------------------------------------------------------------------------------------
// Process lifecycle

/// In the child after fork: no other thread survived, so no claim is really held.
pub fn after_fork_child() {
    fdtable::release_all_claims();
    crate::dirprefetch::reset_counters();
    crate::prefetch::after_fork_child();
    crate::mapwatch::after_fork_child();
    // The child inherits the parent's atexit registration along with its counters.
    stats::reset_all();
}

/// At exit: the report, if asked for.
pub fn at_exit() {
    let Some(cfg) = config() else { return };
    let Some(_g) = ShimGuard::enter() else { return };
    let _e = ErrnoGuard::new();
    let _ = catch_unwind(AssertUnwindSafe(crate::mapwatch::at_exit));
    let _ = catch_unwind(AssertUnwindSafe(|| stats::emit(&cfg.stats)));
}

// ---------------------------------------------------------------------------------------
// File mappings

/// After a successful mmap: big read-mapped regular files are watched (see `mapwatch`).
pub fn mapped(addr: usize, len: usize, prot: i32, flags: i32, fd: i32, off: i64) {
    // Anonymous memory (allocators map it all the time) is turned away before anything else.
    if fd < 0 || off < 0 || flags & libc::MAP_ANONYMOUS != 0 || prot & libc::PROT_READ == 0 {
        return;
    }
    contained(|eng| {
        if !eng.cfg.mmap || (len as u64) < eng.cfg.min_size.max(1) {
            return;
        }
        let Some(id) = effects::identify(fd) else {
            return;
        };
        if !id.regular || id.size < eng.cfg.min_size.max(1) || id.size <= off as u64 {
            return;
        }
        if excluded(eng, fd) {
            return;
        }
        let m = crate::mapwatch::NewMapping {
            addr,
            len,
            file_off: off as u64,
            fd,
            file_size: id.size,
            dev: id.dev,
            ino: id.ino,
            writable_private: flags & libc::MAP_SHARED == 0 && prot & libc::PROT_WRITE != 0,
        };
        if crate::mapwatch::track(m, eng.params.with_prefetch(eng.cfg.readahead)) {
            register_report();
        }
    })
}

/// Before a call that unmaps or replaces `[addr, addr+len)`, or gives it the program's own
/// readahead hint: the watcher lets go of mappings there. Hand the result to `unmapped`.
/// Works even once the shim is disabled: slots still watched must never be acted on
/// after their range changed.
pub fn unmapping(addr: usize, len: usize, mine: u64) -> u64 {
    if crate::mapwatch::stopped() {
        return 0;
    }
    let Some(_g) = ShimGuard::enter() else {
        return 0;
    };
    let _e = ErrnoGuard::new();
    catch_unwind(AssertUnwindSafe(|| crate::mapwatch::take(addr, len, mine))).unwrap_or(0)
}

/// After that call: `done` says whether it succeeded; `drop_pages`: whether what the
/// mappings brought in should go (not when the program took over with its own hint).
pub fn unmapped(taken: u64, done: bool, drop_pages: bool) {
    if taken == 0 {
        return;
    }
    let Some(_g) = ShimGuard::enter() else {
        return;
    };
    let _e = ErrnoGuard::new();
    let _ = catch_unwind(AssertUnwindSafe(|| {
        crate::mapwatch::release(taken, done, drop_pages && !crate::mapwatch::stopped())
    }));
}
