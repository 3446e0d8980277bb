//! One of a watched process's open regular files, followed from outside through an fd of
//! the watcher's own (opened by path through /proc/PID/fd/N: it shares no offset, flags or
//! readahead state with the program's, so nothing the watcher does through it changes
//! what the program sees). Only cachestat, fadvise(DONTNEED) and sync_file_range(WRITE)
//! are ever called on it.
//!
//! A file is followed one way for good: by its position (`Pos`: the program reads or
//! writes with read/write, the position in fdinfo moves), or by the growth of its cached
//! pages (`Growth`: pread, io_uring with offsets, mappings). Both apply the core's proof.

use super::report::Counters;
use dropbehind_core::policy::{
    BlockSample, GROWTH_BLOCK, Growth, Params, Proof, READAHEAD_REACH, Range, ReadStream,
    WriteStream,
};
use dropbehind_sys::cache::{self, CacheStat};
use dropbehind_sys::file::{FileId, OwnFd};
use dropbehind_sys::procfd::FdInfo;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A settle waits at most this long for writeback before dropping what is clean.
const SETTLE_BUDGET: Duration = Duration::from_secs(30);
/// Growth-followed files keep the blocks that grew in this many last rounds (readahead
/// just brought in, and what the program is reading now).
pub const GROWTH_KEEP_ROUNDS: u64 = 2;
/// Drops of growth-followed files come in batches of at least this much.
pub const GROWTH_BATCH: u64 = 8 << 20;
const SUPER: u64 = 16 * GROWTH_BLOCK;
/// Blocks of a file a random reader grows are sampled every this many rounds at first,
/// twice as far apart after each look that finds the reader still random, up to
/// RANDOM_SAMPLE_MAX: a reader that turns sequential is then seen that much later.
const RANDOM_SAMPLE_EVERY: u32 = 10;
const RANDOM_SAMPLE_MAX: u32 = 40;
/// A scratch file (created in the run, deleted while open) is left alone up to this size.
pub const SCRATCH_SLACK: u64 = 32 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Nothing moved yet.
    Unknown,
    Pos,
    Growth,
    /// Growth while the file is open in a process outside the watched tree: not taken.
    Shared,
    /// In a process the preload covers, a file whose position moved: the preload's.
    Preload,
}

/// A range waiting to be clean before its owned runs are dropped.
struct Settle {
    range: Range,
    runs: Vec<Range>,
    since: Instant,
}

pub struct Tracked {
    pub own: Arc<OwnFd>,
    /// Writeback requests of this file still queued (see `writeback`).
    wb_queued: Arc<AtomicUsize>,
    pub id: FileId,
    /// Created during the run (birth time after the process started): all its pages are
    /// the run's.
    pub born: bool,
    pub follow: Follow,
    info: FdInfo,
    last_pos: u64,
    eof_seen: bool,
    read: ReadStream,
    write: WriteStream,
    writing: bool,
    counted_read: bool,
    counted_write: bool,
    growth: Growth,
    /// Each 64 MiB superblock's last sample (`None`: sample it again).
    supers: Vec<Option<CacheStat>>,
    last_whole: CacheStat,
    first_whole: u64,
    /// Pages cached at first sight (cachestat of the whole file): for a file followed by
    /// growth, what is left alone unproven (its position tells nothing of what was read).
    seen_cached: u64,
    pub shared_checked: Option<Instant>,
    settles: Vec<Settle>,
    /// In a process the preload covers: a file whose position moves is the preload's.
    pub growth_only: bool,
    /// Rounds in which the cache grew while the position stood still.
    grew_rounds: u32,
    /// Rounds in a row in which nothing moved: neither its position nor its cache.
    still_rounds: u32,
    looks: u32,
    /// A scratch file (see `scratch`) grown beyond the slack.
    scratch_over: bool,
    /// A scratch file, as of the last look: left alone.
    scratch_now: bool,
    /// Growth rounds skipped while the file's growth is random.
    random_skips: u32,
    /// Rounds between looks while the growth is random (RANDOM_SAMPLE_EVERY and up).
    random_every: u32,
}

/// Growth seen in this many rounds, the position standing still, makes a file followed by
/// growth (once is not enough: a read's readahead lands before its position moves).
const GROWTH_ROUNDS: u32 = 2;
/// A file not yet followed that stayed still this many rounds is asked about its cache only
/// every STILL_EVERY rounds (its position is still read every round).
const STILL_ROUNDS: u32 = 50;
const STILL_EVERY: u32 = 4;
const SCRATCH_CHECK_EVERY: u32 = 4;

pub struct Ctx<'a> {
    pub params: &'a Params,
    pub min_size: u64,
    pub c: &'a mut Counters,
    /// A round at the watcher's usual pace: round-counted decisions (a file taken for growth
    /// after GROWTH_ROUNDS, still after STILL_ROUNDS) advance only then, not at a young
    /// process's quick looks.
    pub paced: bool,
}

impl Tracked {
    /// First sight: the residency snapshots are taken now, before the program reads on.
    pub fn new(own: OwnFd, id: FileId, info: FdInfo, born: bool, cx: &mut Ctx) -> Tracked {
        let fd = own.raw();
        let growth = if born {
            Growth::all_owned()
        } else {
            Growth::first_sight(id.size, |o, l| cache::cached_pages(fd, o, l))
        }
        .with_reach(readahead_reach(id.dev));
        let first_whole = cache::cachestat(fd, 0, 0).map_or(0, |c| c.cache);
        let mut t = Tracked {
            own: Arc::new(own),
            wb_queued: Arc::new(AtomicUsize::new(0)),
            id,
            born,
            follow: Follow::Unknown,
            info,
            last_pos: info.pos,
            eof_seen: false,
            read: ReadStream::new(),
            write: WriteStream::new(),
            writing: false,
            counted_read: false,
            counted_write: false,
            growth,
            supers: Vec::new(),
            last_whole: CacheStat::default(),
            first_whole,
            seen_cached: first_whole,
            shared_checked: None,
            settles: Vec::new(),
            grew_rounds: 0,
            still_rounds: 0,
            looks: 0,
            scratch_over: false,
            scratch_now: false,
            random_skips: 0,
            random_every: RANDOM_SAMPLE_EVERY,
            growth_only: false,
        };
        cx.c.files += 1;
        t.scratch_now = born && id.nlink() == 0 && id.size <= SCRATCH_SLACK;
        if info.readable() {
            let plan = t.read.plan(info.pos, cx.params);
            if let Some(r) = plan.snapshot {
                t.snapshot_read(r, cx);
            }
            t.read.consumed(info.pos, 0, 0, cx.params);
            if !born {
                cx.c.read_before_seen += info.pos.min(id.size);
            }
        }
        if info.writable() {
            if let Some(r) = t.write.plan(info.pos, cx.params) {
                t.snapshot_write(r, cx);
            }
            let scratch = id.nlink() == 0 && id.size <= SCRATCH_SLACK;
            if born && info.pos > 0 && !scratch {
                // Written before the watcher saw it: the run's own, settled like a window.
                t.writeback(Range::new(0, info.pos), cx);
                t.queue_settle(Range::new(0, info.pos), vec![Range::new(0, info.pos)]);
            }
        }
        t
    }

    fn fd(&self) -> i32 {
        self.own.raw()
    }

    /// A scratch file left alone with nothing pending: the watcher need not hold it.
    pub fn idle_scratch(&self) -> bool {
        self.scratch_now && self.settles.is_empty() && self.wb_queued.load(Ordering::Acquire) == 0
    }

    fn snapshot_read(&mut self, r: Range, cx: &mut Ctx) {
        cx.c.snapshots += 1;
        let (fd, born) = (self.fd(), self.born);
        self.read
            .proof
            .snapshot(r, |o, l| residency(fd, born, o, l));
    }

    fn snapshot_write(&mut self, r: Range, cx: &mut Ctx) {
        cx.c.snapshots += 1;
        let (fd, born) = (self.fd(), self.born);
        self.write
            .proof
            .snapshot(r, |o, l| residency(fd, born, o, l));
    }

    /// The runs of `r` that may be dropped: all of it in a file born in the run.
    fn owned(&self, proof: &Proof, r: Range) -> Vec<Range> {
        if self.born {
            vec![r]
        } else {
            proof.owned_runs(r).collect()
        }
    }

    fn drop_runs(&self, runs: &[Range], cx: &mut Ctx) {
        for r in runs {
            if r.is_empty() {
                continue;
            }
            cx.c.drop_calls += 1;
            let n = cache::drop_range(self.fd(), r.start, r.len());
            cx.c.pages_released += n;
        }
    }

    fn writeback(&self, r: Range, cx: &mut Ctx) {
        cx.c.writeback_calls += 1;
        super::writeback::start(&self.own, r, &self.wb_queued);
    }

    fn queue_settle(&mut self, range: Range, runs: Vec<Range>) {
        self.settles.push(Settle {
            range,
            runs,
            since: Instant::now(),
        });
    }

    /// One look at the program's fd: its fdinfo now.
    pub fn update(&mut self, info: FdInfo, cx: &mut Ctx) {
        self.info = info;
        let pos = info.pos;
        if self.growth_only && pos != self.last_pos {
            // read/write calls: the preload sees those, never both on one stream.
            self.last_pos = pos;
            self.follow = Follow::Preload;
            return;
        }
        // Deleted yet? Asked every SCRATCH_CHECK_EVERY looks (a file deleted while open
        // is followed as before until then).
        self.looks = self.looks.wrapping_add(1);
        if self.born
            && !self.scratch_over
            && (self.scratch_now || self.looks.is_multiple_of(SCRATCH_CHECK_EVERY))
        {
            self.scratch_now = self.scratch();
        }
        if self.scratch_now {
            self.last_pos = pos;
            return;
        }
        match self.follow {
            Follow::Unknown | Follow::Pos | Follow::Growth | Follow::Shared
                if pos != self.last_pos =>
            {
                // A position that moves is followed (a file taken for growth too early,
                // when a read's readahead came before its position moved, included, and
                // one found open elsewhere then: a position is the program's own, and its
                // streams' proof needs no one else to keep away).
                if self.follow == Follow::Growth && self.counted_read {
                    // Counted as a file followed by growth: it is a read stream after all.
                    self.counted_read = false;
                    cx.c.growth_files = cx.c.growth_files.saturating_sub(1);
                    if !self.born {
                        cx.c.cached_at_sight =
                            cx.c.cached_at_sight.saturating_sub(self.seen_cached * 4096);
                    }
                }
                self.follow = Follow::Pos;
                self.moved(pos, cx);
            }
            Follow::Pos => {
                if !self.writing
                    && info.readable()
                    && !self.eof_seen
                    && pos > 0
                    && pos >= self.current_size()
                {
                    self.eof_seen = true;
                    let act = self.read.consumed(pos, 0, 1, cx.params);
                    if let Some(r) = act.drop {
                        let runs = self.owned(&self.read.proof, r);
                        self.drop_runs(&runs, cx);
                        self.read.dropped(r);
                    }
                }
            }
            Follow::Unknown if cx.paced => {
                // No position moved: has the cache grown? A file long still (a log held
                // open, an idle output) is asked every STILL_EVERY rounds: cachestat walks
                // all its cached pages.
                self.still_rounds = self.still_rounds.saturating_add(1);
                let ask = self.still_rounds < STILL_ROUNDS
                    || self.still_rounds.is_multiple_of(STILL_EVERY);
                match ask
                    .then(|| cache::cachestat(self.fd(), 0, 0).ok())
                    .flatten()
                {
                    Some(w) if w.cache > self.first_whole => {
                        self.first_whole = w.cache;
                        self.grew_rounds += 1;
                        self.still_rounds = 0;
                        // A file of the run's own is all its own: taking it for growth a round
                        // early costs nothing (a position that moves later wins).
                        if self.grew_rounds >= GROWTH_ROUNDS || self.born {
                            self.follow = Follow::Growth;
                        }
                    }
                    _ => {}
                }
            }
            Follow::Unknown | Follow::Growth | Follow::Shared | Follow::Preload => {}
        }
        self.poll_settles(cx, false);
    }

    /// A scratch file: created in the run and deleted while open (restic's temporary packs,
    /// written, read back and closed). Its pages go when the program closes it, unwritten:
    /// writing it back to drop it would cost a write and a read of it from the disk. Left
    /// alone up to `SCRATCH_SLACK` bytes; beyond, followed like any other file.
    fn scratch(&mut self) -> bool {
        match dropbehind_sys::file::identify(self.fd()) {
            Ok(i) if i.nlink() == 0 && i.size <= SCRATCH_SLACK => true,
            Ok(i) if i.nlink() == 0 => {
                self.scratch_over = true;
                false
            }
            _ => false,
        }
    }

    fn current_size(&self) -> u64 {
        dropbehind_sys::file::identify(self.fd()).map_or(self.id.size, |i| i.size)
    }

    /// The position moved from `last_pos` to `pos`: a read or a write, or a seek.
    fn moved(&mut self, pos: u64, cx: &mut Ctx) {
        let from = self.last_pos;
        self.last_pos = pos;
        self.eof_seen = false;
        let writing = if !self.info.writable() {
            false
        } else if !self.info.readable() {
            true
        } else {
            // Opened for both: a write leaves dirty pages behind it.
            pos > from
                && cache::cachestat(self.fd(), from, pos - from)
                    .is_ok_and(|c| c.dirty + c.writeback > 0)
        };
        if pos < from || pos > from.saturating_add(64 << 20) && !writing {
            // A seek: the runs so far are done with.
            if let Some(r) = self.read.seeked(pos) {
                let runs = self.owned(&self.read.proof, r);
                self.drop_runs(&runs, cx);
                self.read.dropped(r);
            }
            if self.write.started {
                self.finish_write(cx);
            }
            return;
        }
        if writing != self.writing {
            if self.writing {
                self.finish_write(cx);
            } else if let Some(c) = self.read.finish() {
                let runs = self.owned(&c.proof, c.range);
                self.drop_runs(&runs, cx);
            }
            self.writing = writing;
        }
        let n = pos - from;
        if writing {
            if !self.counted_write {
                self.counted_write = true;
                cx.c.write_streams += 1;
            }
            cx.c.written_followed += n;
            if !self.write.started || !self.write.continues(from) {
                self.finish_write(cx);
                if let Some(r) = self.write.plan(from, cx.params) {
                    self.snapshot_write(r, cx);
                }
            }
            let act = self.write.wrote(from, n, cx.params, cx.min_size);
            if let Some(r) = act.snapshot {
                self.snapshot_write(r, cx);
            }
            if let Some(r) = act.start_writeback {
                self.writeback(r, cx);
            }
            if let Some(r) = act.settle {
                let runs = self.owned(&self.write.proof, r);
                self.queue_settle(r, runs);
                self.write.settled();
            }
        } else {
            if !self.counted_read {
                self.counted_read = true;
                cx.c.read_streams += 1;
            }
            cx.c.read_followed += n;
            let plan = self.read.plan(from, cx.params);
            if let Some(r) = plan.snapshot {
                self.snapshot_read(r, cx);
            }
            let act = self.read.consumed(from, n, n, cx.params);
            if let Some(r) = act.drop {
                let runs = self.owned(&self.read.proof, r);
                self.drop_runs(&runs, cx);
                self.read.dropped(r);
            }
            if let Some(r) = act.snapshot {
                self.snapshot_read(r, cx);
            }
        }
    }

    fn finish_write(&mut self, cx: &mut Ctx) {
        let act = self.write.finish(cx.min_size);
        if let Some(r) = act.start_writeback {
            self.writeback(r, cx);
        }
        if let Some(r) = act.settle {
            let runs = self.owned(&self.write.proof, r);
            self.queue_settle(r, runs);
        }
        self.write.reset();
    }

    /// Settles whose range is clean (or out of time) are dropped.
    fn poll_settles(&mut self, cx: &mut Ctx, _closing: bool) {
        if self.settles.is_empty() {
            return;
        }
        let mut s = std::mem::take(&mut self.settles);
        s.retain(|st| {
            let clean = cache::cachestat(self.fd(), st.range.start, st.range.len())
                .map_or(true, |c| c.dirty == 0 && c.writeback == 0);
            if clean || st.since.elapsed() > SETTLE_BUDGET {
                self.drop_runs(&st.runs, cx);
                false
            } else {
                true
            }
        });
        self.settles = s;
    }

    /// One round of growth sampling (only for files followed by growth).
    pub fn sample_growth(&mut self, cx: &mut Ctx, finish: bool) {
        if self.follow != Follow::Growth || self.scratch_now {
            return;
        }
        // A random reader's growth holds the drops back: the file is looked at only every
        // `random_every` rounds, enough to tell it is still random (cachestat walks every
        // cached page of the range: over a file with 1 GiB cached, each round's look took a
        // fifth of a CPU from fio's random reads, and every tenth round's still a tenth).
        if !finish && self.growth.random() {
            self.random_skips += 1;
            if self.random_skips < self.random_every {
                return;
            }
            self.random_every = (self.random_every * 2).min(RANDOM_SAMPLE_MAX);
        } else {
            self.random_every = RANDOM_SAMPLE_EVERY;
        }
        self.random_skips = 0;
        let fd = self.fd();
        let Ok(whole) = cache::cachestat(fd, 0, 0) else {
            return;
        };
        if !finish && whole == self.last_whole && whole.dirty == 0 && whole.writeback == 0 {
            return;
        }

        if !self.counted_read {
            self.counted_read = true;
            cx.c.growth_files += 1;
            if !self.born {
                cx.c.cached_at_sight += self.seen_cached * 4096;
            }
        }
        self.last_whole = whole;
        let size = self.current_size();
        let nsuper = size.div_ceil(SUPER) as usize;
        self.supers.resize(nsuper, None);
        self.growth.begin();
        let nblocks = size.div_ceil(GROWTH_BLOCK);
        let file_clean = whole.dirty == 0 && whole.writeback == 0;
        for s in 0..nsuper {
            let first = s as u64 * 16;
            let blocks = first..(first + 16).min(nblocks);
            // Blocks cached before the watcher saw them are never dropped, and in a clean
            // file there is nothing in them to write back: a stretch of only those is not
            // looked at (cachestat walks every cached page of its range, and a random
            // reader's file warm in half cost the watcher a tenth of a CPU).
            if file_clean && !blocks.clone().any(|b| self.growth.owned(b)) {
                continue;
            }
            let Ok(cs) = cache::cachestat(fd, s as u64 * SUPER, SUPER) else {
                continue;
            };
            if !finish && Some(cs) == self.supers[s] && cs.dirty == 0 && cs.writeback == 0 {
                continue;
            }
            self.supers[s] = Some(cs);
            let clean = cs.dirty == 0 && cs.writeback == 0;
            for b in blocks {
                if clean && !self.growth.owned(b) {
                    // Cached before the watcher saw it: never dropped, nothing to write.
                    continue;
                }
                if let Ok(c) = cache::cachestat(fd, b * GROWTH_BLOCK, GROWTH_BLOCK) {
                    self.growth.observe(
                        b,
                        BlockSample {
                            cached: c.cache,
                            dirty: c.dirty,
                            writeback: c.writeback,
                        },
                    );
                }
            }
        }
        let act = self.growth.plan(GROWTH_KEEP_ROUNDS, GROWTH_BATCH, finish);
        // Asked again every round while dirty: once the previous requests went out.
        if finish || self.wb_queued.load(Ordering::Acquire) == 0 {
            for r in &act.writeback {
                self.writeback(*r, cx);
            }
        }
        if !act.drop.is_empty() {
            self.drop_runs(&act.drop, cx);
            // The next round samples everything again.
            self.last_whole = CacheStat::default();
            self.supers.iter_mut().for_each(|s| *s = None);
        }
    }

    /// The program closed the fd (or exited): finish the streams. True when the watcher's
    /// own fd can be closed now; false while settles are pending (then `linger` is asked
    /// again every round).
    pub fn close(&mut self, cx: &mut Ctx) -> bool {
        if self.born && deleted(self.fd()) {
            // Its pages go with it: neither written back nor dropped.
            return true;
        }
        match self.follow {
            Follow::Pos => {
                if let Some(c) = self.read.finish() {
                    // The program is done with the file: what it read since the last look,
                    // and the readahead past it, were its stream's too, as far as the proof
                    // reaches.
                    let r = Range::new(c.range.start, c.range.end.max(c.proof.proven_to()));
                    let runs = self.owned(&c.proof, r);
                    self.drop_runs(&runs, cx);
                }
                self.finish_write(cx);
            }
            Follow::Growth => self.sample_growth(cx, true),
            _ => {}
        }
        if self.born && (!self.growth_only || self.follow == Follow::Growth) {
            // Everything in a file of the run's is the run's: write it back, drop it.
            let size = self.current_size();
            if size > 0 {
                if cache::cachestat(self.fd(), 0, 0).is_ok_and(|c| c.dirty > 0) {
                    self.writeback(Range::new(0, size), cx);
                }
                self.queue_settle(Range::new(0, size), vec![Range::new(0, size)]);
            }
        }
        self.linger(cx)
    }

    /// After close: true once nothing is pending. A deleted file is let go at once (its
    /// pages go with it, and holding it would keep its space).
    pub fn linger(&mut self, cx: &mut Ctx) -> bool {
        if deleted(self.fd()) {
            return true;
        }
        self.poll_settles(cx, true);
        self.settles.is_empty()
    }
}

/// How far readahead can run ahead of a reader on device `dev`: four times the larger of
/// its read_ahead_kb and its largest request (a window doubled by FADV_SEQUENTIAL, the next
/// one fetched as the reader enters the last); READAHEAD_REACH where sysfs can't tell
/// (btrfs, network filesystems). Asked once per device.
fn readahead_reach(dev: u64) -> u64 {
    static REACH: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());
    let Ok(mut known) = REACH.lock() else {
        return READAHEAD_REACH;
    };
    if let Some(&(_, r)) = known.iter().find(|(d, _)| *d == dev) {
        return r;
    }
    let r =
        dropbehind_sys::proc::device_limits(dev).map_or(READAHEAD_REACH, |(ra, io)| 4 * ra.max(io));
    known.push((dev, r));
    r
}

/// Cached pages of a range, for a proof snapshot. A file born in the run is all the run's
/// (`owned` never asks its proof): nothing to ask. Its write frontier is partly cached, and
/// there a snapshot asks per 64 KiB chunk: 167 cachestat calls at the first sight of one of
/// restic's packs.
fn residency(fd: i32, born: bool, off: u64, len: u64) -> Option<u64> {
    if born {
        Some(0)
    } else {
        cache::cached_pages(fd, off, len)
    }
}

fn deleted(fd: i32) -> bool {
    dropbehind_sys::procfd::link_count(fd).is_ok_and(|n| n == 0)
}
