//! File mappings: a table of the program's big file mappings, and one watcher thread that
//! samples them every few milliseconds and acts on what it finds (see `policy::MapScan`).
//!
//! The program's faults can't be seen from userspace without cost, so the watcher looks at
//! their traces: which pages of a mapping are mapped (/proc/self/pagemap, read from the
//! scan's frontier on: one small read per tick) and how much of the file is cached
//! (cachestat, only while the process is faulting at all). A sequential scan is prefetched
//! ahead and dropped behind like a read stream; a mapping faulted sparsely while its cache
//! grows (the kernel's fault readahead at work for nothing) gets MADV_RANDOM.
//!
//! Ownership of a slot: the watcher holds it (Owner::Busy) while sampling; munmap, mremap,
//! MAP_FIXED and the program's own madvise hints take it (Owner::Taken) before their real call,
//! waiting out a sample in progress, so no address-based advice of ours ever lands on a
//! range that was unmapped or remapped under us. Every fd here is the shim's own (a
//! reopening of the mapped file, close-on-exec, numbered high).

use super::{Helper, Priority};
use crate::config::MIB;
use crate::policy::{MapClass, MapSample, MapScan, PAGE, Params, Proof, Range};
use crate::sys::cache::cachestat;
use crate::sys::mem::PAGEMAP_PRESENT;
use crate::{proof, stats, sys};
use std::cell::UnsafeCell;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, AtomicUsize};

const MAPS: usize = 64;
/// Sampling period while any mapping is watched, and while one is being scanned fast (a
/// sampler that falls behind a scan lets its fault readahead outrun the proof).
const TICK_NS: i64 = 10_000_000;
const TICK_FAST_NS: i64 = 2_000_000;
/// A frontier that moved this far in one tick means a fast scan.
const FAST_SCAN: u64 = 4 * MIB;
/// Faults in a tick below which nothing can have grown much: cachestat is skipped.
const QUIET_FAULTS: u64 = 8;
/// How far one tick follows a mapped run (pagemap entries are read 2 MiB at a time).
const FOLLOW_MAX: u64 = 256 * MIB;
/// A scan of cached-speed data outruns a 10 ms sampler by tens of MiB (a cold 1 GiB scan
/// on the local disk: 22 MiB per tick, and 8 MiB of fault readahead ahead of it): the
/// proof reaches this much further ahead of a mapping than of a read stream (the proof
/// ring caps it).
const MAP_EXTRA_LOOKAHEAD: u64 = 96 * MIB;
/// The window whose mapped density decides between a scan and scattered faults.
const LOCATE_WINDOW: u64 = MIB;

const RECENT: usize = 8;

atomic_enum! {
    /// Who owns a mapping slot's `data`: nobody (Free, Active, Dead), or whoever moved
    /// `state` to Setup, Busy or Taken.
    enum Owner in AtomicOwner(u8 as AtomicU8) {
        Free = 0,
        /// Being filled in by `track`.
        Setup = 1,
        /// Watched, owned by nobody: the watcher or a hook may take it.
        Active = 2,
        /// Sampled by the watcher.
        Busy = 3,
        /// Taken by a hook (munmap, mremap, MAP_FIXED, the program's own hints).
        Taken = 4,
        /// At exit, or once the shim is disabled: never touched again.
        Dead = 5,
    }
}

struct MapData {
    /// The shim's own fd of the mapped file.
    fd: i32,
    addr: usize,
    len: usize,
    /// File offset of `addr`.
    file_off: u64,
    scan: MapScan,
    params: Params,
    chunk: u64,
    /// Mapped pages may be reclaimed with MADV_PAGEOUT: not for private writable mappings,
    /// whose written pages are the program's anonymous memory.
    pageout: bool,
    released: u64,
    prefetched: u64,
    /// The last runs dropped: dropped again at munmap, because pages turn up there again
    /// (seen here: a few MiB back in the cache behind a scan's end-of-mapping drop,
    /// without having been read again).
    recent: [Range; RECENT],
    /// Nothing of the mapped range was cached at mmap: everything cached later was brought
    /// in by the program (or its readahead), even where a lagging sample proved nothing.
    cold: bool,
}

impl MapData {
    fn addr_of(&self, file_off: u64) -> usize {
        self.addr + (file_off - self.file_off) as usize
    }
}

struct MapSlot {
    state: AtomicOwner,
    /// Readable without owning the slot, for overlap checks.
    addr: AtomicUsize,
    len: AtomicUsize,
    /// Asks the watcher to cut short what it is doing with this slot.
    kill: AtomicBool,
    data: UnsafeCell<MapData>,
}

// SAFETY: `data` is touched only by whoever moved `state` to Setup, Busy or Taken (with a
// compare-exchange from Free or Active), until it stores Active, Free or Dead back; and by a
// forked child's only thread.
unsafe impl Sync for MapSlot {}

static SLOTS: [MapSlot; MAPS] = [const {
    MapSlot {
        state: AtomicOwner::new(Owner::Free),
        addr: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        kill: AtomicBool::new(false),
        // All zero, so that the table is .bss, not 48 KiB of .data: `track` sets every
        // field before the slot leaves Free.
        data: UnsafeCell::new(MapData {
            fd: 0,
            addr: 0,
            len: 0,
            file_off: 0,
            scan: MapScan::new(0, 0, 0),
            params: Params {
                window: 0,
                prefetch: 0,
                extra_lookahead: 0,
                writeback_windows: crate::policy::WRITEBACK_WINDOWS,
            },
            chunk: 0,
            pageout: false,
            released: 0,
            prefetched: 0,
            recent: [Range { start: 0, end: 0 }; RECENT],
            cold: false,
        }),
    }
}; MAPS];

/// What the mmap hook knows about a new mapping.
pub struct NewMapping {
    pub addr: usize,
    pub len: usize,
    pub file_off: u64,
    pub fd: i32,
    pub file_size: u64,
    pub dev: u64,
    pub ino: u64,
    pub writable_private: bool,
}

/// Starts watching a mapping. False when it can't be (table full, file unprovable).
pub fn track(m: NewMapping, params: Params) -> bool {
    if HELPER.stopping() {
        return false;
    }
    let Some(i) = (0..MAPS).find(|&i| {
        SLOTS[i]
            .state
            .compare_exchange(Owner::Free, Owner::Setup, Acquire, Relaxed)
            .is_ok()
    }) else {
        return false;
    };
    let slot = &SLOTS[i];
    let release = |s: &MapSlot| s.state.store(Owner::Free, Release);
    // SAFETY: `data` is ours: this thread moved `state` from Free to Setup above.
    let d = unsafe { &mut *slot.data.get() };
    let Ok(fd) = sys::file::reopen(m.fd) else {
        release(slot);
        return false;
    };
    let fd = fd.into_raw();
    d.fd = fd;
    // The program's fd may have been closed or replaced since it was looked at.
    let same = sys::file::identify(fd).is_ok_and(|id| id.dev == m.dev && id.ino == m.ino);
    if !same {
        sys::file::close_own(fd);
        d.fd = -1;
        release(slot);
        return false;
    }
    let end = (m.file_off + m.len as u64).min(m.file_size.next_multiple_of(PAGE));
    // Residency must be provable, or nothing could ever be dropped.
    let Some(cached) = (end > m.file_off)
        .then(|| cachestat(fd, m.file_off, end - m.file_off).ok())
        .flatten()
    else {
        sys::file::close_own(fd);
        d.fd = -1;
        release(slot);
        return false;
    };
    let (device_ra, chunk) = crate::prefetch::device(m.dev);
    let params = params
        .with_prefetch(crate::prefetch::reach_for(params.prefetch, device_ra))
        .with_extra_lookahead(MAP_EXTRA_LOOKAHEAD);
    *d = MapData {
        fd,
        addr: m.addr,
        len: m.len,
        file_off: m.file_off,
        scan: MapScan::new(m.file_off, end, device_ra),
        params,
        chunk,
        pageout: !m.writable_private,
        released: 0,
        prefetched: 0,
        recent: [Range::default(); RECENT],
        cold: cached.cache == 0,
    };
    // Before the program can touch a page: the first snapshot.
    if let Some(r) = d.scan.begin(&d.params) {
        proof::snapshot(fd, &mut d.scan.read.proof, r);
    }
    slot.kill.store(false, Relaxed);
    slot.addr.store(m.addr, Relaxed);
    slot.len.store(m.len, Relaxed);
    slot.state.store(Owner::Active, Release);
    stats::MAPS_TRACKED.add(1);
    crate::engine::register_at_exit();
    open_pagemap();
    start_watcher();
    true
}

/// Takes every watched mapping overlapping `[addr, addr+len)` away from the watcher,
/// waiting out a sample in progress, or another thread's unmap of it. `mine`: slots this
/// thread already holds (mremap takes two ranges). Returns them as a bit set for `release`.
pub fn take(addr: usize, len: usize, mine: u64) -> u64 {
    let mut taken = 0u64;
    let end = addr.saturating_add(len);
    let overlaps = |s: &MapSlot| {
        let (a, l) = (s.addr.load(Relaxed), s.len.load(Relaxed));
        a < end && a.saturating_add(l) > addr
    };
    for (i, s) in SLOTS.iter().enumerate() {
        if mine & (1 << i) != 0 {
            continue;
        }
        loop {
            match s.state.load(Acquire) {
                Owner::Active if overlaps(s) => {
                    if s.state
                        .compare_exchange(Owner::Active, Owner::Taken, AcqRel, Acquire)
                        .is_err()
                    {
                        continue;
                    }
                    // The slot may have been freed and reused between the check and the CAS.
                    if !overlaps(s) {
                        s.state.store(Owner::Active, Release);
                        break;
                    }
                    taken |= 1 << i;
                    // SAFETY: `data` is ours: this thread moved `state` to Taken (in `take`).
                    catch_up(unsafe { &mut *s.data.get() });
                    break;
                }
                Owner::Busy | Owner::Taken if overlaps(s) => {
                    s.kill.store(true, Relaxed);
                    // A sample, or another thread's munmap, takes microseconds to
                    // milliseconds.
                    sys::thread::yield_now();
                }
                _ => break,
            }
        }
    }
    taken
}

/// While the mapping still is there: how far has a scan got since the last tick? (A scan
/// at cached speed moves tens of MiB between ticks; what it read is dropped with the rest.)
fn catch_up(d: &mut MapData) {
    let pm = PAGEMAP_FD.load(Relaxed);
    if pm < 0 || d.scan.read.pattern != crate::policy::Pattern::Sequential {
        return;
    }
    let frontier = follow(d, pm, d.scan.frontier());
    // Only the position matters now: `release` drops from the last drop to here.
    let _ = d.scan.sample(
        MapSample {
            frontier,
            ..MapSample::default()
        },
        &d.params,
    );
}

/// After the real call that made `take` necessary. `gone`: the mapping no longer is what
/// it was (unmapped, remapped, or the program took over its hints); then what it brought in
/// is dropped and the slot freed. Otherwise (the call failed) watching resumes.
pub fn release(taken: u64, gone: bool, drop_pages: bool) {
    for (i, s) in SLOTS.iter().enumerate() {
        if taken & (1 << i) == 0 {
            continue;
        }
        if !gone {
            s.kill.store(false, Relaxed);
            s.state.store(Owner::Active, Release);
            continue;
        }
        // SAFETY: `data` is ours: this thread moved `state` to Taken (in `take`).
        let d = unsafe { &mut *s.data.get() };
        if let Some(c) = d.scan.finish()
            && drop_pages
        {
            drop_mapped(d, &c.proof, c.range, false);
        }
        if drop_pages {
            for run in d.recent {
                if !run.is_empty() {
                    let _ =
                        sys::cache::fadvise(d.fd, run.start, run.len(), libc::POSIX_FADV_DONTNEED);
                }
            }
        }
        sys::file::close_own(d.fd);
        d.fd = -1;
        s.state.store(Owner::Free, Release);
    }
}

/// At exit: what the watched mappings brought in goes (they are still mapped, so their
/// pages are reclaimed through the mapping first).
pub fn at_exit() {
    HELPER.request_stop();
    let taken = take(0, usize::MAX, 0);
    for (i, s) in SLOTS.iter().enumerate() {
        if taken & (1 << i) == 0 {
            continue;
        }
        // SAFETY: `data` is ours: this thread moved `state` to Taken (in `take`).
        let d = unsafe { &mut *s.data.get() };
        if let Some(c) = d.scan.finish() {
            drop_mapped(d, &c.proof, c.range, true);
        }
        for run in d.recent {
            if !run.is_empty() {
                let _ = sys::cache::fadvise(d.fd, run.start, run.len(), libc::POSIX_FADV_DONTNEED);
            }
        }
        s.state.store(Owner::Dead, Release);
    }
}

/// Drops the proven chunks of `r`. `mapped`: the pages may still be mapped by the program,
/// which fadvise can't drop, so they are reclaimed through the mapping first (MADV_PAGEOUT
/// skips pages mapped by any other process: someone else's working set).
fn drop_mapped(d: &mut MapData, proof: &Proof, r: Range, mapped: bool) {
    let r = Range::new(r.start.max(d.file_off), r.end.min(d.scan.end));
    let cold = d.cold.then_some(r);
    let proven = (!d.cold).then(|| proof.owned_runs(r)).into_iter().flatten();
    for run in cold.into_iter().chain(proven) {
        stats::DROP_CALLS.add(1);
        let n = sys::cache::drop_range_after(d.fd, run.start, run.len(), || {
            let end = run.end.min(d.file_off + d.len as u64);
            if mapped && d.pageout && end > run.start {
                let len = (end - run.start) as usize;
                let _ = sys::mem::madvise(d.addr_of(run.start), len, libc::MADV_PAGEOUT);
            }
        });
        crate::debug!(
            "mapping {:#x}: drop {}..{} MiB: {n} pages released",
            d.addr,
            run.start >> 20,
            run.end >> 20
        );
        stats::PAGES_RELEASED.add(n);
        d.released += n * PAGE;
        d.recent.rotate_right(1);
        d.recent[0] = run;
    }
}

// ---------------------------------------------------------------------------------------
// The watcher thread

static HELPER: Helper = Helper::new("dropbehind-map", 128 * 1024, Priority::Program);
static PAGEMAP_FD: AtomicI32 = AtomicI32::new(-1);
/// /proc/self/stat, read by the watcher to count the process's threads.
static STAT_FD: AtomicI32 = AtomicI32::new(-1);
static LAST_FAULTS: AtomicU64 = AtomicU64::new(0);
/// Ticks between checks that the program still has a thread of its own.
const ALIVE_CHECK_TICKS: u32 = 100;

/// Opens /proc/self/pagemap and /proc/self/stat once, here on the program's thread: an
/// open takes the lowest free fd number for a moment before it is moved high, and made on
/// the watcher's thread it could hand a program thread opening a file just then another
/// number than a run without the shim would (as 8104288 found for the directory helpers).
fn open_pagemap() {
    hold(&PAGEMAP_FD, sys::proc::open_pagemap);
    hold(&STAT_FD, sys::proc::open_stat);
}

fn hold(slot: &AtomicI32, open: fn() -> Result<sys::file::OwnFd, sys::Errno>) {
    if slot.load(Relaxed) >= 0 {
        return;
    }
    if let Ok(fd) = open() {
        let fd = fd.into_raw();
        if slot.compare_exchange(-1, fd, Relaxed, Relaxed).is_err() {
            sys::file::close_own(fd);
        }
    }
}

fn start_watcher() {
    if !HELPER.start(watch) {
        HELPER.wake(true);
    }
}

fn watch() {
    let pm = PAGEMAP_FD.load(Relaxed);
    if pm < 0 {
        // `track` could not open it.
        return HELPER.fail();
    }
    let mut fast = false;
    let mut ticks = 0u32;
    loop {
        ticks = ticks.wrapping_add(1);
        if HELPER.stopping()
            || (ticks.is_multiple_of(ALIVE_CHECK_TICKS) && only_shim_threads_left())
        {
            break;
        }
        let seen = HELPER.seen();
        let faults = sys::mem::page_faults();
        let faulting = faults.saturating_sub(LAST_FAULTS.swap(faults, Relaxed)) >= QUIET_FAULTS;
        let mut watched = 0;
        let mut moved = 0;
        for s in &SLOTS {
            if s.state
                .compare_exchange(Owner::Active, Owner::Busy, AcqRel, Relaxed)
                .is_err()
            {
                continue;
            }
            watched += 1;
            // SAFETY: `data` is touched only by whoever moved `state` to Busy: this thread,
            // until it stores Active back below.
            let d = unsafe { &mut *s.data.get() };
            let before = d.scan.frontier();
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                sample(d, pm, faulting, &s.kill)
            }));
            moved = moved.max(d.scan.frontier().saturating_sub(before));
            s.state.store(Owner::Active, Release);
        }
        if watched == 0 {
            // Idle: the thread goes; `track` starts another when needed.
            let more = || SLOTS.iter().any(|s| s.state.load(SeqCst) == Owner::Active);
            if !HELPER.idle_exit(more) {
                break;
            }
            continue;
        }
        fast = moved >= FAST_SCAN || (fast && moved > 0);
        let tick = libc::timespec {
            tv_sec: 0,
            tv_nsec: if fast { TICK_FAST_NS } else { TICK_NS },
        };
        HELPER.sleep(seen, &tick);
    }
}

/// Whether every thread left in the process is one of the shim's (the program's main
/// thread called pthread_exit and its other threads are gone): then the watcher goes too.
fn only_shim_threads_left() -> bool {
    let ours = 1 + crate::prefetch::running() as usize + crate::dirprefetch::workers();
    let stat = STAT_FD.load(Relaxed);
    stat >= 0 && sys::proc::thread_count(stat).is_some_and(|n| n <= ours as u64)
}

/// The shim is being disabled (the program is about to sandbox itself): the watcher stops
/// making system calls. Waits for it briefly.
pub fn shutdown() {
    HELPER.shutdown();
}

/// The watcher was stopped (disabled, or the process is exiting): nothing new is watched.
pub fn stopped() -> bool {
    HELPER.stopping()
}

/// One tick for one mapping.
fn sample(d: &mut MapData, pm: i32, faulting: bool, kill: &AtomicBool) {
    let frontier = follow(d, pm, d.scan.frontier());
    let keep_going = || !kill.load(Relaxed);
    if d.scan.class == MapClass::Random {
        if d.scan.unrandom(&MapSample {
            frontier,
            ..MapSample::default()
        }) {
            let _ = sys::mem::madvise(d.addr, d.len, libc::MADV_NORMAL);
        }
        return;
    }
    let cached = faulting
        .then(|| cachestat(d.fd, d.scan.start, d.scan.end - d.scan.start).ok())
        .flatten()
        .map(|c| c.cache * PAGE);
    let s = MapSample {
        frontier,
        cached,
        released: d.released,
        prefetched: d.prefetched,
    };
    d.released = 0;
    d.prefetched = 0;
    let was_seq = d.scan.read.pattern == crate::policy::Pattern::Sequential;
    let act = d.scan.sample(s, &d.params);
    crate::debug!(
        "sample frontier {} MiB cached {:?} MiB released {} prefetched {} -> {:?}",
        frontier >> 20,
        cached.map(|c| c >> 20),
        s.released >> 20,
        s.prefetched >> 20,
        act
    );
    if !was_seq && d.scan.read.pattern == crate::policy::Pattern::Sequential {
        stats::MAPS_SEQUENTIAL.add(1);
    }
    if let Some(r) = act.read.drop {
        let proof = d.scan.read.proof;
        drop_mapped(d, &proof, r, true);
        d.scan.read.dropped(r);
    }
    if let Some(r) = act.read.snapshot {
        proof::snapshot(d.fd, &mut d.scan.read.proof, r);
    }
    if let Some(r) = act.read.prefetch {
        let n = sys::cache::prefetch(d.fd, r.start, r.end, d.chunk, keep_going);
        stats::PREFETCH_BATCHES.add(1);
        stats::PREFETCHED.add(n);
        d.prefetched += n;
    }
    if act.locate && keep_going() {
        locate(d, pm);
    }
}

/// The end of the run of mapped pages from `from` (a file offset), read from pagemap.
fn follow(d: &MapData, pm: i32, from: u64) -> u64 {
    let mut entries = [0u64; 512];
    let mut off = from;
    let limit = d.scan.end.min(from.saturating_add(FOLLOW_MAX));
    while off < limit {
        let want = (((limit - off) / PAGE) as usize).clamp(1, entries.len());
        let n = sys::mem::pagemap(pm, d.addr_of(off), &mut entries[..want]);
        let present = entries[..n]
            .iter()
            .take_while(|e| *e & PAGEMAP_PRESENT != 0)
            .count();
        off += present as u64 * PAGE;
        if present < n || n == 0 {
            break;
        }
    }
    off.min(d.scan.end)
}

/// Unexplained growth: finds the most cached window of the mapping (cachestat, 16 parts
/// at a time) and measures how densely the program has mapped it.
fn locate(d: &mut MapData, pm: i32) {
    let lead = d.scan.lead(&d.params);
    let mut r = Range::new(d.scan.start, d.scan.end);
    while r.len() > LOCATE_WINDOW {
        let part = r.len().div_ceil(16).next_multiple_of(PAGE);
        let mut best = (0, Range::new(r.start, (r.start + part).min(r.end)));
        let mut s = r.start;
        while s < r.end {
            let p = Range::new(s, (s + part).min(r.end));
            let c = cached_outside(d.fd, p, lead);
            if c > best.0 {
                best = (c, p);
            }
            s += part;
        }
        if best.0 == 0 {
            return;
        }
        r = best.1;
    }
    let cached = cachestat(d.fd, r.start, r.len()).map_or(0, |c| c.cache);
    let mut entries = [0u64; (LOCATE_WINDOW / PAGE) as usize];
    let n = ((r.len() / PAGE) as usize).min(entries.len());
    let got = sys::mem::pagemap(pm, d.addr_of(r.start), &mut entries[..n]);
    let mapped = entries[..got]
        .iter()
        .filter(|e| *e & PAGEMAP_PRESENT != 0)
        .count() as u64;
    let run_end = (got > 0 && entries[got - 1] & PAGEMAP_PRESENT != 0)
        .then(|| follow(d, pm, r.start + got as u64 * PAGE));
    if d.scan.located(cached, mapped, run_end) {
        let _ = sys::mem::madvise(d.addr, d.len, libc::MADV_RANDOM);
        stats::MAPS_RANDOM.add(1);
        crate::debug!(
            "mapping {:#x}+{}: {mapped} of {cached} cached pages mapped: MADV_RANDOM",
            d.addr,
            d.len
        );
    }
}

/// Pages of `p` in the cache, not counting those in `skip`.
fn cached_outside(fd: i32, p: Range, skip: Range) -> u64 {
    let count = |r: Range| {
        if r.is_empty() {
            0
        } else {
            cachestat(fd, r.start, r.len()).map_or(0, |c| c.cache)
        }
    };
    let overlap = Range::new(p.start.max(skip.start), p.end.min(skip.end));
    count(p).saturating_sub(count(overlap))
}

/// In a forked child: the watcher does not exist there, and the shim's fds are the
/// parent's business (closed here, the child keeps the mappings untouched).
pub fn after_fork_child() {
    for s in &SLOTS {
        let st = s.state.load(Relaxed);
        if st != Owner::Free {
            // SAFETY: only this thread exists in the child.
            let d = unsafe { &mut *s.data.get() };
            if d.fd >= 0 {
                sys::file::close_own(d.fd);
            }
            d.fd = -1;
            s.state.store(Owner::Free, Relaxed);
        }
    }
    for held in [&PAGEMAP_FD, &STAT_FD] {
        let fd = held.swap(-1, Relaxed);
        if fd >= 0 {
            sys::file::close_own(fd);
        }
    }
    HELPER.after_fork_child();
}
