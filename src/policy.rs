//! Policy: pure code that turns a stream of I/O events on one file descriptor into actions.
//!
//! No syscalls here. The engine feeds events (offset, length, result) and performs what comes
//! back: take a residency snapshot, drop a range, start writeback. Everything is unit-tested
//! with synthetic traces below, including the seed workloads.
//!
//! The central rule is that a page is dropped only if a residency snapshot, taken *before*
//! the stream or its readahead could have touched it, showed it uncached: such a page was
//! brought in by this stream. Pages cached before belong to someone's working set and stay.

use crate::config::MIB;

pub const PAGE: u64 = 4096;

/// Residency is proven per block of `PROOF_BLOCK` bytes, at a resolution of 64 chunks.
pub const PROOF_BLOCK: u64 = 4 * MIB;
pub const PROOF_CHUNK: u64 = PROOF_BLOCK / 64;
/// Blocks held at once: covers the largest window twice (consumed, and ahead) plus lag
/// plus `READAHEAD_REACH`.
pub const PROOF_RING: u64 = 48;
/// How far kernel readahead can have fetched beyond a stream's last read: 8 MiB
/// read_ahead_kb doubled by FADV_SEQUENTIAL, plus margin. A stream's snapshot reaches one
/// window (its largest single read, for clamped copies) beyond that; if it fell short, the
/// stream's own readahead would look like someone else's cached pages and be kept (safe,
/// but not dropped: measured as 500 MiB left behind a 1 GiB `cp` with a too-short reach).
pub const READAHEAD_REACH: u64 = 32 * MIB;
/// Consumed pages stay this long behind a reader, for small backward re-reads.
pub const LAG: u64 = 256 * 1024;
/// Drop frontiers are aligned to this: the largest page-cache folio (a PMD, 2 MiB on
/// x86_64). fadvise(DONTNEED) skips a large folio that straddles either end of its range, so
/// a frontier in the middle of one would leave it cached for good (measured: 2 MiB of every
/// 8 MiB window stayed behind `cp` on ext4 before this).
pub const DROP_ALIGN: u64 = 2 * MIB;
/// A read this far past (or before) the expected offset still continues the stream.
pub const GAP_FORWARD: u64 = 128 * 1024;
pub const GAP_BACKWARD: u64 = 64 * 1024;
/// Reads in a row before a run counts as sequential; more after random access, so that
/// random reads landing next to each other by chance don't start a stream.
pub const SEQ_READS: u32 = 2;
pub const SEQ_READS_AFTER_RANDOM: u32 = 4;
/// A stream's first prefetch reaches this far ahead; every batch doubles the reach, up to
/// `Params::prefetch`, so a stream earns its readahead as it goes on.
pub const PREFETCH_START: u64 = MIB;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    pub fn new(start: u64, end: u64) -> Range {
        Range {
            start,
            end: end.max(start),
        }
    }
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

fn align_down(x: u64, a: u64) -> u64 {
    x - x % a
}

/// Which chunks near a stream were uncached before the stream came near them.
#[derive(Clone, Copy, Debug)]
pub struct Proof {
    /// Bit i of `ring[b % RING]` set: chunk i of block b was entirely uncached.
    ring: [u64; PROOF_RING as usize],
    /// Blocks `lo..hi` are proven.
    lo: u64,
    hi: u64,
}

impl Proof {
    pub const fn new() -> Proof {
        Proof {
            ring: [0; PROOF_RING as usize],
            lo: 0,
            hi: 0,
        }
    }

    /// Nothing is proven any more.
    pub fn clear(&mut self) {
        self.lo = 0;
        self.hi = 0;
    }

    /// Forget everything; the next proven block will be the one holding `off`.
    pub fn restart_at(&mut self, off: u64) {
        self.lo = off / PROOF_BLOCK;
        self.hi = self.lo;
    }

    /// The range that must be snapshotted now so that everything up to `pos + lookahead`
    /// is proven, limited by the ring's capacity. Results go to `record` block by block.
    pub fn wanted(&self, pos: u64, p: &Params) -> Option<Range> {
        let want_hi = (pos.saturating_add(p.lookahead())).div_ceil(PROOF_BLOCK);
        let cap_hi = self.lo + PROOF_RING;
        let hi = want_hi.min(cap_hi);
        (hi > self.hi).then(|| Range::new(self.hi * PROOF_BLOCK, hi * PROOF_BLOCK))
    }

    /// Records the snapshot of block `block`: must be the next one expected.
    pub fn record(&mut self, block: u64, uncached_chunks: u64) {
        if block != self.hi || self.hi - self.lo >= PROOF_RING {
            return;
        }
        self.ring[(block % PROOF_RING) as usize] = uncached_chunks;
        self.hi += 1;
    }

    /// Releases blocks wholly below `off` (they have been dropped or passed by).
    pub fn forget_below(&mut self, off: u64) {
        self.lo = (off / PROOF_BLOCK).clamp(self.lo, self.hi);
    }

    /// Byte ranges inside `r` made of chunks proven uncached, merged into maximal runs.
    pub fn owned_runs(&self, r: Range) -> impl Iterator<Item = Range> + '_ {
        let first = r.start / PROOF_CHUNK;
        let last = r.end.div_ceil(PROOF_CHUNK);
        let mut c = first;
        std::iter::from_fn(move || {
            while c < last && !self.chunk_owned(c) {
                c += 1;
            }
            if c >= last {
                return None;
            }
            let s = c;
            while c < last && self.chunk_owned(c) {
                c += 1;
            }
            let run = Range::new((s * PROOF_CHUNK).max(r.start), (c * PROOF_CHUNK).min(r.end));
            Some(run)
        })
    }

    fn chunk_owned(&self, chunk: u64) -> bool {
        let block = chunk / 64;
        block >= self.lo
            && block < self.hi
            && self.ring[(block % PROOF_RING) as usize] & (1 << (chunk % 64)) != 0
    }
}

impl Default for Proof {
    fn default() -> Self {
        Proof::new()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Pattern {
    /// Nothing seen yet (or since a reset).
    #[default]
    Fresh,
    /// One read seen, or a run that has not proven itself.
    Candidate,
    Sequential,
    Random,
}

#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// A multiple of DROP_ALIGN (see `Params::new`).
    pub window: u64,
    /// How far ahead of a sequential stream to prefetch, at most (0: never). Set per file
    /// by the engine: 0 where the kernel's own readahead already reaches that far.
    pub prefetch: u64,
    /// Proof reach beyond `READAHEAD_REACH`: a mapping is sampled every few milliseconds,
    /// and a fast scan with the kernel's fault readahead must not get ahead of its proof.
    pub extra_lookahead: u64,
}

impl Params {
    /// Windows are whole multiples of DROP_ALIGN, so that no window edge splits a folio.
    pub fn new(window: u64) -> Params {
        Params {
            window: window.max(1).next_multiple_of(DROP_ALIGN),
            prefetch: 0,
            extra_lookahead: 0,
        }
    }

    pub fn with_prefetch(self, prefetch: u64) -> Params {
        Params { prefetch, ..self }
    }

    pub fn with_extra_lookahead(self, extra_lookahead: u64) -> Params {
        Params {
            extra_lookahead,
            ..self
        }
    }

    /// How far ahead of a stream residency is proven.
    pub fn lookahead(&self) -> u64 {
        self.window + READAHEAD_REACH + self.extra_lookahead
    }
}

/// What to do before the program's read is performed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadPlan {
    /// Take a residency snapshot of this range first.
    pub snapshot: Option<Range>,
    /// Read it uncached (RWF_DONTCACHE), if the filesystem can.
    pub dontcache: bool,
}

/// A read stream on one fd.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReadStream {
    pub pattern: Pattern,
    /// Offset just after the last read.
    pub next: u64,
    run_reads: u32,
    misses: u32,
    /// Consumed pages below this have been dropped (or were never ours).
    pub dropped_to: u64,
    /// The current run began without a snapshot ahead of it (after a jump or seek).
    unproven: bool,
    /// After a jump: the old run's range is handed out for dropping with the old proof;
    /// the new run starts from this frontier once that is done (see `settle`).
    restart_at: Option<u64>,
    pub proof: Proof,
    pub prefetch: Prefetch,
}

/// Whether a read at `off` continues a stream whose last read ended at `next`.
#[inline]
pub fn read_continues(next: u64, off: u64) -> bool {
    off <= next.saturating_add(GAP_FORWARD) && off.saturating_add(GAP_BACKWARD) >= next
}

/// Which reads may bypass the policy until something changes: computed after every event
/// the policy did see, so that the hot path costs a few atomic loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FastRead {
    /// Every read goes through the policy.
    None,
    /// A random stream: reads that do not continue the last one change nothing.
    Random,
    /// A sequential stream: continuing reads that end before `until` change nothing.
    Sequential { until: u64 },
}

/// Drop `range` (restricted to proven chunks), `snapshot` ahead, then `prefetch` (always
/// inside what is proven by then, so prefetched pages count as the stream's own).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadActions {
    pub drop: Option<Range>,
    pub snapshot: Option<Range>,
    pub prefetch: Option<Range>,
}

/// How far ahead of a sequential stream prefetch has been asked for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Prefetch {
    /// Requested up to here.
    pub to: u64,
    /// The current reach ahead of the stream (0: not started).
    reach: u64,
}

impl Prefetch {
    /// The stream position at which the next batch is due: a quarter of the reach consumed.
    fn due_at(&self) -> u64 {
        (self.to + self.reach / 4).saturating_sub(self.reach)
    }
}

impl ReadStream {
    pub const fn new() -> ReadStream {
        ReadStream {
            pattern: Pattern::Fresh,
            next: 0,
            run_reads: 0,
            misses: 0,
            dropped_to: 0,
            unproven: false,
            restart_at: None,
            proof: Proof::new(),
            prefetch: Prefetch { to: 0, reach: 0 },
        }
    }

    fn continues(&self, off: u64) -> bool {
        read_continues(self.next, off)
    }

    /// Completes a pending restart: the old run's proof is released.
    fn settle(&mut self) {
        if let Some(frontier) = self.restart_at.take() {
            self.proof.clear();
            self.dropped_to = frontier;
            self.unproven = true;
        }
    }

    /// Ends the current run at a jump to `pos`: returns what it consumed and not dropped.
    fn jump(&mut self, pos: u64) -> Option<Range> {
        self.settle();
        self.prefetch = Prefetch::default();
        let pending = (self.pattern == Pattern::Sequential && self.next > self.dropped_to)
            .then(|| Range::new(self.dropped_to, self.next.next_multiple_of(DROP_ALIGN)));
        self.restart_at = Some(align_down(pos, DROP_ALIGN));
        if pending.is_none() {
            self.settle();
        }
        pending
    }

    /// Called before a read at `off`.
    pub fn plan(&mut self, off: u64, p: &Params) -> ReadPlan {
        self.settle();
        match self.pattern {
            Pattern::Fresh => {
                // The only snapshot taken before a read: the first read of a stream must not
                // be able to bring in pages before they are known to be uncached.
                self.proof.restart_at(off);
                self.dropped_to = align_down(off, DROP_ALIGN);
                ReadPlan {
                    snapshot: self.proof.wanted(off, p),
                    dontcache: false,
                }
            }
            Pattern::Sequential => ReadPlan {
                snapshot: None,
                dontcache: self.continues(off),
            },
            _ if self.unproven && self.run_reads >= 1 && self.continues(off) => {
                // The second read of a new run (after a jump or seek): prove before it, so
                // only the first read's pages and its small initial readahead go unproven.
                // Random readers rarely get here, so they pay nothing.
                self.unproven = false;
                self.proof.restart_at(off);
                self.dropped_to = align_down(off, DROP_ALIGN);
                ReadPlan {
                    snapshot: self.proof.wanted(off, p),
                    dontcache: false,
                }
            }
            _ => ReadPlan::default(),
        }
    }

    /// Called after a read at `off` that returned `got` of `asked` bytes (0 = end of file).
    pub fn consumed(&mut self, off: u64, got: u64, asked: u64, p: &Params) -> ReadActions {
        self.settle();
        let mut act = ReadActions::default();
        let end = off.saturating_add(got);
        if self.pattern == Pattern::Fresh {
            self.pattern = Pattern::Candidate;
            self.run_reads = 1;
        } else if self.continues(off) {
            self.run_reads = self.run_reads.saturating_add(1);
            self.misses = 0;
            let needed = if self.pattern == Pattern::Random {
                SEQ_READS_AFTER_RANDOM
            } else {
                SEQ_READS
            };
            if self.run_reads >= needed && self.pattern != Pattern::Sequential {
                self.pattern = Pattern::Sequential;
            }
        } else {
            // A jump: the run so far is done with; a new one may start here.
            act.drop = self.jump(off);
            self.misses = self.misses.saturating_add(1);
            self.run_reads = 1;
            if self.misses >= 2 {
                self.pattern = Pattern::Random;
            } else if self.pattern != Pattern::Random {
                self.pattern = Pattern::Candidate;
            }
            self.next = end;
            return act;
        }
        self.next = end;
        if self.pattern != Pattern::Sequential {
            // A run that began with a snapshot keeps its proof ahead of readahead while it
            // proves itself (a random reader has jumped away by now and pays nothing).
            if !self.unproven {
                act.snapshot = self.proof.wanted(self.next, p);
            }
            return act;
        }
        let at_eof = got == 0 && asked > 0;
        let behind = if at_eof {
            // Readahead past the end of what was read is the stream's too.
            self.next.next_multiple_of(DROP_ALIGN)
        } else {
            align_down(self.next.saturating_sub(LAG), DROP_ALIGN)
        };
        if behind > self.dropped_to && (at_eof || behind - self.dropped_to >= p.window) {
            act.drop = Some(Range::new(self.dropped_to, behind));
        }
        act.snapshot = self.proof.wanted(self.next, p);
        let proven_to = act.snapshot.map_or(self.proof.hi * PROOF_BLOCK, |r| r.end);
        act.prefetch = self.prefetch_ahead(p, proven_to);
        act
    }

    /// The next prefetch batch of a sequential stream, if one is due: from what was already
    /// asked for up to the current reach ahead, never beyond the proven range.
    fn prefetch_ahead(&mut self, p: &Params, proven_to: u64) -> Option<Range> {
        let pf = &mut self.prefetch;
        if p.prefetch == 0 || self.unproven {
            return None;
        }
        if pf.reach == 0 {
            pf.reach = PREFETCH_START.min(p.prefetch);
        }
        let from = pf.to.max(self.next);
        // Batch ends on MiB boundaries, so that each batch's device-sized calls line up
        // with the last one's (a misaligned call costs a short request).
        let to = align_down(self.next.saturating_add(pf.reach).min(proven_to), MIB);
        if to < from.saturating_add(pf.reach / 4) {
            return None;
        }
        pf.to = to;
        pf.reach = (pf.reach * 2).min(p.prefetch);
        Some(Range::new(from, to))
    }

    /// The engine has dropped (or chosen not to drop) `r`, as handed out.
    pub fn dropped(&mut self, r: Range) {
        if self.restart_at.is_some() {
            return self.settle();
        }
        if r.end > self.dropped_to {
            self.dropped_to = r.end;
        }
        self.proof.forget_below(self.dropped_to);
    }

    /// The file position moved to `pos` by a seek: the next read decides whether a new run
    /// starts. Returns what the old run consumed and did not drop.
    pub fn seeked(&mut self, pos: u64) -> Option<Range> {
        if pos == self.next || self.pattern == Pattern::Fresh {
            return None;
        }
        let pending = self.jump(pos);
        self.pattern = Pattern::Candidate;
        self.run_reads = 0;
        self.next = pos;
        pending
    }

    /// Starts over at `pos` whatever the state, as after a seek; a run from there is proven
    /// before its second read. (For mappings, whose first "read" has already happened
    /// when it is seen.)
    pub fn restart(&mut self, pos: u64) -> Option<Range> {
        if self.pattern == Pattern::Fresh {
            *self = ReadStream::new();
            self.pattern = Pattern::Candidate;
            self.next = pos;
            self.unproven = true;
            self.dropped_to = align_down(pos, DROP_ALIGN);
            return None;
        }
        self.seeked(pos)
    }

    /// What the following reads may skip (see `FastRead`).
    pub fn fast(&self, p: &Params) -> FastRead {
        if self.restart_at.is_some() {
            return FastRead::None;
        }
        match self.pattern {
            Pattern::Random if self.run_reads == 1 => FastRead::Random,
            Pattern::Sequential => {
                let drop_at = self.dropped_to.saturating_add(p.window).saturating_add(LAG);
                let snap_at = if self.proof.hi >= self.proof.lo + PROOF_RING {
                    u64::MAX // the ring is full until a drop releases blocks
                } else {
                    (self.proof.hi * PROOF_BLOCK)
                        .saturating_sub(p.lookahead())
                        .saturating_add(1)
                };
                let prefetch_at = if p.prefetch == 0 || self.unproven {
                    u64::MAX
                } else {
                    self.prefetch.due_at().max(self.next.saturating_add(1))
                };
                FastRead::Sequential {
                    until: drop_at.min(snap_at).min(prefetch_at),
                }
            }
            _ => FastRead::None,
        }
    }

    /// Folds in reads that took the fast path: the last of them ended at `next`. For a
    /// random stream each was a jump, which leaves the state just as one jump does.
    pub fn resume(&mut self, next: u64) {
        if self.pattern == Pattern::Random {
            self.dropped_to = align_down(next, DROP_ALIGN);
        }
        self.next = next;
    }

    /// At close: what the stream consumed and has not dropped yet; the stream is reset.
    /// Prefetched pages not read yet were brought in by the stream too.
    pub fn finish(&mut self) -> Option<Range> {
        self.settle();
        let end = self.next.max(self.prefetch.to);
        let r = (self.pattern == Pattern::Sequential && end > self.dropped_to)
            .then(|| Range::new(self.dropped_to, end.next_multiple_of(DROP_ALIGN)));
        *self = ReadStream::new();
        r
    }
}

/// Windows of a write stream under writeback at once (see `WriteStream::wrote`).
pub const WRITEBACK_WINDOWS: u64 = 2;

/// What to do after a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteActions {
    /// Start writeback of this range (sync_file_range WRITE).
    pub start_writeback: Option<Range>,
    /// Wait until this range is clean, then drop its proven chunks.
    pub settle: Option<Range>,
    pub snapshot: Option<Range>,
}

/// A write stream on one fd: bounded by windowed writeback (start window i, settle i-1).
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteStream {
    pub started: bool,
    pub next: u64,
    run_start: u64,
    /// Writeback has been started below this offset.
    pub written_back_to: u64,
    /// Settled and dropped below this offset.
    pub dropped_to: u64,
    pub proof: Proof,
}

impl WriteStream {
    pub const fn new() -> WriteStream {
        WriteStream {
            started: false,
            next: 0,
            run_start: 0,
            written_back_to: 0,
            dropped_to: 0,
            proof: Proof::new(),
        }
    }

    /// Before a write at `off`: a snapshot is needed for a new stream.
    pub fn plan(&mut self, off: u64, p: &Params) -> Option<Range> {
        if self.started && self.continues(off) {
            return None;
        }
        // A new stream (or a jump, after `finish` handled the old one).
        *self = WriteStream::default();
        self.started = true;
        self.next = off;
        self.run_start = off;
        self.written_back_to = align_down(off, PAGE);
        self.dropped_to = self.written_back_to;
        self.proof.restart_at(off);
        self.proof.wanted(off, p)
    }

    /// Writes may skip holes (sparse copies seek over zeros) but not go backwards.
    pub fn continues(&self, off: u64) -> bool {
        off >= self.next && off - self.next <= 4 * MIB
    }

    /// After `n` bytes were written at `off`.
    pub fn wrote(&mut self, off: u64, n: u64, p: &Params, min_size: u64) -> WriteActions {
        let mut act = WriteActions::default();
        self.next = off.saturating_add(n).max(self.next);
        act.snapshot = self.proof.wanted(self.next, p);
        if self.next - self.run_start < min_size.max(1) {
            return act;
        }
        let boundary = align_down(self.next, p.window);
        if boundary >= self.written_back_to.saturating_add(p.window) {
            act.start_writeback = Some(Range::new(self.written_back_to, boundary));
            // Keep WRITEBACK_WINDOWS windows under writeback before waiting on the oldest:
            // the disk stays busy while the program writes the next one.
            let settle_to = self
                .written_back_to
                .saturating_sub((WRITEBACK_WINDOWS - 1) * p.window);
            if settle_to > self.dropped_to {
                act.settle = Some(Range::new(self.dropped_to, settle_to));
                self.dropped_to = settle_to;
            }
            self.written_back_to = boundary;
        }
        act
    }

    /// The bound below which the stream's next contiguous writes need no action (the next
    /// window boundary, or where the proof must be extended), once it is managed at all.
    pub fn fast(&self, p: &Params, min_size: u64) -> Option<u64> {
        if !self.started || self.next - self.run_start < min_size.max(1) {
            return None;
        }
        let boundary = self.written_back_to.saturating_add(p.window);
        let snap_at = if self.proof.hi >= self.proof.lo + PROOF_RING {
            u64::MAX
        } else {
            (self.proof.hi * PROOF_BLOCK)
                .saturating_sub(p.lookahead())
                .saturating_add(1)
        };
        Some(boundary.min(snap_at))
    }

    /// Folds in writes that took the fast path: the last of them ended at `next`.
    pub fn resume(&mut self, next: u64) {
        self.next = self.next.max(next);
    }

    pub fn settled(&mut self) {
        self.proof.forget_below(self.dropped_to);
    }

    /// At close, truncate or a jump: write back and settle the rest, if the stream was big
    /// enough to be managed at all.
    pub fn finish(&mut self, min_size: u64) -> WriteActions {
        let mut act = WriteActions::default();
        if self.started
            && self.next - self.run_start >= min_size.max(1)
            && self.next > self.dropped_to
        {
            if self.next > self.written_back_to {
                act.start_writeback = Some(Range::new(self.written_back_to, self.next));
            }
            act.settle = Some(Range::new(self.dropped_to, self.next));
        }
        act
    }

    pub fn reset(&mut self) {
        *self = WriteStream::default();
    }
}

// ---------------------------------------------------------------------------------------
// File mappings

/// Unexplained page-cache growth in a mapping, accumulated until it is worth a look: where
/// did it come from, a scan or scattered faults? (Seed 003: each fault of a stride-100 load
/// reads megabytes ahead; 16 MiB is a few faults' worth.)
pub const MAP_GROWTH_LOOK: u64 = 16 * MIB;
/// A probed window whose cached pages are less than this fraction (in percent) mapped was
/// faulted sparsely: the kernel's fault readahead brought in pages nobody touched.
pub const MAP_SPARSE_PERCENT: u64 = 40;

/// What a sampled file mapping is doing, as far as the watcher can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum MapClass {
    /// No verdict: the frontier is followed, growth elsewhere is accounted.
    #[default]
    Watching,
    /// Scattered faults: MADV_RANDOM given; no prefetch, no drop.
    Random,
}

/// One tick of a mapping's sampling: what the watcher measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct MapSample {
    /// End of the run of mapped pages that starts at the stream's frontier (file offset).
    pub frontier: u64,
    /// Bytes of the mapping's file range in the page cache, when measured this tick.
    pub cached: Option<u64>,
    /// Bytes the shim itself released or prefetched since the last sample (they explain
    /// cache shrinking or growing).
    pub released: u64,
    pub prefetched: u64,
}

/// What the watcher should do after a sample.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapActions {
    pub read: ReadActions,
    /// Growth was not explained by the frontier: find a cached window and report how
    /// densely it is mapped (`MapScan::located`).
    pub locate: bool,
}

/// The sampled access pattern of one file mapping. Positions are file offsets. The mapped
/// run from the frontier stands for "what the program has read": a sequential scan keeps
/// extending it, and it is fed to an ordinary `ReadStream` as if it were reads.
#[derive(Clone, Copy, Debug, Default)]
pub struct MapScan {
    pub read: ReadStream,
    pub class: MapClass,
    /// The mapping's file range.
    pub start: u64,
    pub end: u64,
    /// Kernel readahead of the device: growth it explains near the frontier.
    device_ra: u64,
    last_cached: Option<u64>,
    unexplained: u64,
    /// What an abandoned run consumed, to drop at the next sample.
    pending_drop: Option<Range>,
}

impl MapScan {
    pub const fn new(start: u64, end: u64, device_ra: u64) -> MapScan {
        MapScan {
            start,
            end,
            device_ra,
            read: ReadStream::new(),
            class: MapClass::Watching,
            last_cached: None,
            unexplained: 0,
            pending_drop: None,
        }
    }

    /// At mmap, before the program can touch a page: the first snapshot.
    pub fn begin(&mut self, p: &Params) -> Option<Range> {
        self.read.plan(self.start, p).snapshot
    }

    pub fn frontier(&self) -> u64 {
        self.read.next.max(self.start)
    }

    /// Folds in one sample.
    pub fn sample(&mut self, s: MapSample, p: &Params) -> MapActions {
        let mut act = MapActions::default();
        if let Some(r) = self.pending_drop.take() {
            act.read.drop = Some(r);
            return act;
        }
        let from = self.frontier();
        let advance = s.frontier.saturating_sub(from);
        if advance > 0 && self.class == MapClass::Watching {
            // `begin` planned the first run; a run restarted later is proven before its
            // second sample, as a read stream's is before its second read.
            if self.read.pattern != Pattern::Fresh {
                let plan = self.read.plan(from, p);
                if plan.snapshot.is_some() {
                    act.read.snapshot = plan.snapshot;
                    return act;
                }
            }
            act.read = self.read.consumed(from, advance, advance, p);
            // Nothing past the mapping: it would never be dropped.
            act.read.prefetch = act
                .read
                .prefetch
                .map(|r| Range::new(r.start.min(self.end), r.end.min(self.end)))
                .filter(|r| !r.is_empty());
            if s.frontier >= self.end {
                // The scan reached the end of the mapping: like a read at end of file.
                let eof = self.read.consumed(s.frontier, 0, 1, p);
                act.read.drop = eof.drop.or(act.read.drop);
            }
        }
        let Some(cached) = s.cached else {
            // Growth can only be judged between consecutive measurements.
            self.last_cached = None;
            return act;
        };
        {
            if let Some(last) = self.last_cached {
                // Growth not explained by the scan or our prefetch. A scan's kernel
                // readahead keeps a bounded lead, allowed for in the threshold below.
                let grown = (cached + s.released).saturating_sub(last + s.prefetched);
                self.unexplained = (self.unexplained + grown).saturating_sub(advance);
            }
            self.last_cached = Some(cached);
            act.locate = self.class == MapClass::Watching
                && self.unexplained >= MAP_GROWTH_LOOK + 2 * self.device_ra;
        }
        act
    }

    /// Where a scan's own cached pages can be, unmapped yet: just ahead of the frontier (its
    /// fault readahead and our prefetch). `locate` looks elsewhere.
    pub fn lead(&self, p: &Params) -> Range {
        let f = self.frontier();
        Range::new(f, f + 2 * self.device_ra + p.prefetch + MIB)
    }

    /// The answer to `locate`: a window of `cached` pages of which `mapped` are mapped, and
    /// where the run of mapped pages through it ends (`run_end`, a file offset). Returns
    /// true when the mapping should get MADV_RANDOM.
    pub fn located(&mut self, cached: u64, mapped: u64, run_end: Option<u64>) -> bool {
        self.unexplained = 0;
        if cached == 0 {
            return false;
        }
        if mapped * 100 < cached * MAP_SPARSE_PERCENT {
            self.class = MapClass::Random;
            return true;
        }
        // Densely mapped: a scan somewhere past the frontier. Follow it from there.
        if let Some(end) = run_end.filter(|&e| e > self.frontier()) {
            self.pending_drop = self.read.restart(end).or(self.pending_drop);
        }
        false
    }

    /// Sequential again after being called random (the mapped run from the frontier grew by
    /// 4 MiB since): the caller gives MADV_NORMAL back.
    pub fn unrandom(&mut self, s: &MapSample) -> bool {
        if self.class == MapClass::Random && s.frontier >= self.frontier() + 4 * MIB {
            self.class = MapClass::Watching;
            self.read.restart(s.frontier);
            return true;
        }
        false
    }

    /// At munmap or exit: what the mapping brought in and no longer needs.
    pub fn finish(&mut self) -> Option<Range> {
        if self.class == MapClass::Random {
            return None;
        }
        self.read.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::GIB;

    const P: Params = Params {
        window: 8 * MIB,
        prefetch: 0,
        extra_lookahead: 0,
    };

    /// A model of the page cache for traces: which 4 KiB pages are resident.
    struct Cache {
        resident: Vec<bool>,
    }

    impl Cache {
        fn new(size: u64) -> Cache {
            Cache {
                resident: vec![false; (size / PAGE) as usize],
            }
        }
        fn bits(&self, block: u64) -> u64 {
            let mut bits = 0u64;
            for c in 0..64 {
                let start = block * PROOF_BLOCK + c * PROOF_CHUNK;
                let pages = (start / PAGE)..((start + PROOF_CHUNK) / PAGE);
                if pages
                    .clone()
                    .all(|p| !self.resident.get(p as usize).copied().unwrap_or(false))
                {
                    bits |= 1 << c;
                }
            }
            bits
        }
        fn touch(&mut self, r: Range) {
            for p in r.start / PAGE..r.end.div_ceil(PAGE) {
                if let Some(x) = self.resident.get_mut(p as usize) {
                    *x = true;
                }
            }
        }
        fn drop(&mut self, r: Range) {
            for p in r.start.div_ceil(PAGE)..r.end / PAGE {
                if let Some(x) = self.resident.get_mut(p as usize) {
                    *x = false;
                }
            }
        }
        fn count(&self, r: Range) -> usize {
            (r.start / PAGE..r.end / PAGE)
                .filter(|&p| self.resident[p as usize])
                .count()
        }
    }

    /// Runs a read trace against the model, with kernel readahead of `ra` bytes ahead of each
    /// read. Returns (peak resident pages, drops issued).
    fn run_reads(cache: &mut Cache, size: u64, reads: &[(u64, u64)], ra: u64) -> (usize, usize) {
        let (peak, drops, _) = run_reads_with(cache, size, reads, ra, &P);
        (peak, drops)
    }

    /// `run_reads` with parameters; prefetches touch the cache and must lie inside what was
    /// proven when they were issued. Also returns the prefetched ranges.
    fn run_reads_with(
        cache: &mut Cache,
        size: u64,
        reads: &[(u64, u64)],
        ra: u64,
        p: &Params,
    ) -> (usize, usize, Vec<Range>) {
        let mut prefetched = Vec::new();
        let mut s = ReadStream::default();
        let mut peak = 0;
        let mut drops = 0;
        let snap = |s: &mut ReadStream, cache: &Cache, r: Option<Range>| {
            if let Some(r) = r {
                for b in r.start / PROOF_BLOCK..r.end / PROOF_BLOCK {
                    s.proof.record(b, cache.bits(b));
                }
            }
        };
        let eof = (size, 4096);
        for &(off, len) in reads.iter().chain(std::iter::once(&eof)) {
            let plan = s.plan(off, p);
            snap(&mut s, cache, plan.snapshot);
            let got = len.min(size.saturating_sub(off));
            cache.touch(Range::new(off, (off + got + ra).min(size)));
            let act = s.consumed(off, got, len, p);
            if let Some(d) = act.drop {
                for run in s.proof.owned_runs(d).collect::<Vec<_>>() {
                    cache.drop(run);
                }
                s.dropped(d);
                drops += 1;
            }
            snap(&mut s, cache, act.snapshot);
            if let Some(r) = act.prefetch {
                assert!(
                    r.end <= s.proof.hi * PROOF_BLOCK,
                    "prefetch {r:?} beyond the proof"
                );
                cache.touch(Range::new(r.start, r.end.min(size)));
                prefetched.push(r);
            }
            peak = peak.max(cache.count(Range::new(0, size)));
        }
        if let Some(r) = s.finish() {
            for run in s.proof.owned_runs(r).collect::<Vec<_>>() {
                cache.drop(run);
            }
        }
        (peak, drops, prefetched)
    }

    fn sequential(size: u64, chunk: u64) -> Vec<(u64, u64)> {
        (0..size.div_ceil(chunk))
            .map(|i| (i * chunk, chunk))
            .collect()
    }

    #[test]
    fn cat_cold_file_is_dropped_behind_with_bounded_footprint() {
        let size = 256 * MIB;
        let mut cache = Cache::new(size);
        let (peak, drops) = run_reads(&mut cache, size, &sequential(size, 128 * 1024), 2 * MIB);
        assert!(drops > 20, "{drops}");
        // window + lag + readahead + chunk rounding
        assert!(
            (peak as u64) * PAGE <= 12 * MIB,
            "peak {} MiB",
            peak as u64 * PAGE / MIB
        );
        assert_eq!(cache.count(Range::new(0, size)), 0, "EOF drops the tail");
    }

    #[test]
    fn sha256sum_sized_reads_and_python_megabyte_reads() {
        for chunk in [32 * 1024, MIB, 4096] {
            let size = 64 * MIB;
            let mut cache = Cache::new(size);
            run_reads(&mut cache, size, &sequential(size, chunk), 512 * 1024);
            assert_eq!(cache.count(Range::new(0, size)), 0, "chunk {chunk}");
        }
    }

    #[test]
    fn pages_cached_before_the_stream_survive() {
        let size = 128 * MIB;
        let mut cache = Cache::new(size);
        let warm = Range::new(0, 32 * MIB);
        cache.touch(warm);
        let before = cache.count(warm);
        run_reads(&mut cache, size, &sequential(size, 128 * 1024), 2 * MIB);
        assert_eq!(cache.count(warm), before);
        assert_eq!(cache.count(Range::new(33 * MIB, size)), 0);
    }

    #[test]
    fn scattered_cached_pages_survive_at_chunk_resolution() {
        let size = 64 * MIB;
        let mut cache = Cache::new(size);
        let hot: Vec<Range> = (0..30)
            .map(|i| Range::new(i * 2 * MIB + 4096, i * 2 * MIB + 8192))
            .collect();
        hot.iter().for_each(|&r| cache.touch(r));
        run_reads(&mut cache, size, &sequential(size, 64 * 1024), 256 * 1024);
        for r in hot {
            assert_eq!(cache.count(r), 1, "{r:?}");
        }
    }

    #[test]
    fn readahead_far_ahead_of_the_stream_is_still_ours() {
        // FADV_SEQUENTIAL doubles an 8 MiB readahead: the snapshot must be ahead of that.
        let size = 256 * MIB;
        let mut cache = Cache::new(size);
        run_reads(&mut cache, size, &sequential(size, 128 * 1024), 16 * MIB);
        assert_eq!(cache.count(Range::new(0, size)), 0);
    }

    #[test]
    fn clamped_copies_with_big_windows_stay_ahead_of_readahead() {
        // `cp` under a 16 MiB window: 16 MiB copy_file_range calls, 16 MiB readahead.
        let size = 512 * MIB;
        let mut cache = Cache::new(size);
        let p16 = Params::new(16 * MIB);
        let mut s = ReadStream::default();
        let snap = |s: &mut ReadStream, cache: &Cache, r: Option<Range>| {
            for b in r.map_or(0..0, |r| r.start / PROOF_BLOCK..r.end / PROOF_BLOCK) {
                s.proof.record(b, cache.bits(b));
            }
        };
        for (off, len) in sequential(size, 16 * MIB)
            .into_iter()
            .chain([(size, 16 * MIB)])
        {
            let plan = s.plan(off, &p16);
            snap(&mut s, &cache, plan.snapshot);
            let got = len.min(size - off);
            cache.touch(Range::new(off, (off + got + 16 * MIB).min(size)));
            let act = s.consumed(off, got, len, &p16);
            if let Some(d) = act.drop {
                s.proof
                    .owned_runs(d)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .for_each(|r| cache.drop(r));
                s.dropped(d);
            }
            snap(&mut s, &cache, act.snapshot);
        }
        assert_eq!(cache.count(Range::new(0, size)), 0);
    }

    #[test]
    fn fast_path_decisions_match_the_slow_path() {
        fast_path_matches_slow_path(&P);
        fast_path_matches_slow_path(&P.with_prefetch(16 * MIB));
    }

    fn fast_path_matches_slow_path(p: &Params) {
        // Replaying a trace through `fast` must never skip an event that would have acted.
        let size = 512 * MIB;
        let mut x: u64 = 99;
        let mut trace: Vec<(u64, u64)> = sequential(64 * MIB, 64 * 1024);
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            trace.push(((x >> 24) % (size / PAGE) * PAGE, PAGE));
        }
        trace.extend(
            sequential(64 * MIB, 128 * 1024)
                .into_iter()
                .map(|(o, l)| (o + 256 * MIB, l)),
        );
        let mut slow = ReadStream::default();
        for &(off, len) in &trace {
            let fast = slow.fast(p);
            let mut probe = slow;
            let plan = probe.plan(off, p);
            if let Some(r) = plan.snapshot {
                (r.start / PROOF_BLOCK..r.end / PROOF_BLOCK)
                    .for_each(|b| probe.proof.record(b, !0));
            }
            let act = probe.consumed(off, len, len, p);
            let skippable = match fast {
                FastRead::Random => !read_continues(slow.next, off),
                FastRead::Sequential { until } => {
                    read_continues(slow.next, off) && off + len < until
                }
                FastRead::None => false,
            };
            if skippable {
                assert_eq!(plan.snapshot, None, "{off}");
                assert_eq!(act.drop, None, "{off}");
                assert_eq!(act.snapshot, None, "{off}");
                assert_eq!(act.prefetch, None, "{off}");
                assert_eq!(probe.pattern, slow.pattern, "{off}");
                slow.resume(off + len);
            } else {
                slow = probe;
                if let Some(d) = act.drop {
                    slow.dropped(d);
                }
                if let Some(r) = act.snapshot {
                    (r.start / PROOF_BLOCK..r.end / PROOF_BLOCK)
                        .for_each(|b| slow.proof.record(b, !0));
                }
            }
        }
    }

    #[test]
    fn sequential_streams_prefetch_ahead_with_a_ramp_and_drop_it_behind() {
        let size = 256 * MIB;
        let p = P.with_prefetch(16 * MIB);
        for chunk in [4096, 128 * 1024] {
            let mut cache = Cache::new(size);
            let (peak, _, pf) =
                run_reads_with(&mut cache, size, &sequential(size, chunk), 128 * 1024, &p);
            assert!(!pf.is_empty());
            // Batches follow each other without gaps or overlaps, and the reach ramps up.
            for w in pf.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            // From the read that proved the stream to the first MiB boundary past the start
            // reach.
            assert_eq!(
                pf[0],
                Range::new(2 * chunk, PREFETCH_START),
                "chunk {chunk}"
            );
            assert!(pf.iter().skip(1).all(|r| r.end % MIB == 0));
            assert!(pf.iter().all(|r| r.len() <= 16 * MIB));
            assert!(pf.last().unwrap().end >= size, "prefetch reached the end");
            // Batches, not a call per read.
            assert!(
                pf.len() < (size / (4 * MIB)) as usize + 10,
                "{} batches",
                pf.len()
            );
            // window + lag + prefetch reach + chunk rounding, and nothing left after EOF.
            assert!(
                (peak as u64) * PAGE <= 8 * MIB + 16 * MIB + 4 * MIB,
                "peak {} MiB",
                peak as u64 * PAGE / MIB
            );
            assert_eq!(cache.count(Range::new(0, size)), 0, "chunk {chunk}");
        }
    }

    #[test]
    fn prefetch_spares_pages_cached_before() {
        let size = 128 * MIB;
        let mut cache = Cache::new(size);
        let warm = Range::new(40 * MIB, 60 * MIB);
        cache.touch(warm);
        let p = P.with_prefetch(16 * MIB);
        run_reads_with(&mut cache, size, &sequential(size, 64 * 1024), 0, &p);
        assert_eq!(cache.count(warm), (warm.len() / PAGE) as usize);
        assert_eq!(cache.count(Range::new(0, 40 * MIB)), 0);
        assert_eq!(cache.count(Range::new(61 * MIB, size)), 0);
    }

    #[test]
    fn random_and_strided_reads_are_never_prefetched() {
        let p = P.with_prefetch(16 * MIB);
        let mut s = ReadStream::default();
        let mut x: u64 = 7;
        for i in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            // Seed 003 by pread (every 100th page), then random 4 KiB preads.
            let off = if i < 10_000 {
                i * 100 * PAGE
            } else {
                (x >> 20) % (1 << 20) * PAGE
            };
            s.plan(off, &p);
            let act = s.consumed(off, PAGE, PAGE, &p);
            assert_eq!(act.prefetch, None, "read {i}");
            assert_eq!(act.drop, None, "read {i}");
        }
    }

    /// One read through plan and consumed, every snapshot finding the file cold.
    fn cold_read(s: &mut ReadStream, off: u64, len: u64, p: &Params) -> ReadActions {
        let record = |s: &mut ReadStream, r: Option<Range>| {
            if let Some(r) = r {
                (r.start / PROOF_BLOCK..r.end / PROOF_BLOCK).for_each(|b| s.proof.record(b, !0));
            }
        };
        let plan = s.plan(off, p);
        record(s, plan.snapshot);
        let act = s.consumed(off, len, len, p);
        if let Some(d) = act.drop {
            s.dropped(d);
        }
        record(s, act.snapshot);
        act
    }

    #[test]
    fn a_seek_restarts_the_prefetch_ramp() {
        let p = P.with_prefetch(16 * MIB);
        let mut s = ReadStream::default();
        let mut last = None;
        for i in 0..200u64 {
            last = cold_read(&mut s, i * MIB, MIB, &p).prefetch.or(last);
        }
        // The reach is kept between three quarters of the maximum and the maximum.
        let end = last.unwrap().end;
        assert!(
            end >= 200 * MIB + 12 * MIB && end <= 200 * MIB + 16 * MIB,
            "{end}"
        );
        s.seeked(1024 * MIB);
        let mut first = None;
        for i in 0..8u64 {
            first = first.or(cold_read(&mut s, 1024 * MIB + i * MIB, MIB, &p).prefetch);
        }
        let r = first.expect("prefetch after the seek");
        assert!(r.start >= 1024 * MIB && r.len() <= 2 * MIB, "{r:?}");
    }

    #[test]
    fn random_preads_get_no_drops_and_no_snapshots_after_the_first() {
        let size = 4 * 1024 * MIB;
        let mut s = ReadStream::default();
        let mut x: u64 = 12345;
        let mut snapshots = 0;
        let mut drops = 0;
        for i in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (x >> 20) % (size / 4096) * 4096;
            let plan = s.plan(off, &P);
            snapshots += plan.snapshot.is_some() as usize;
            assert!(!plan.dontcache);
            let act = s.consumed(off, 4096, 4096, &P);
            drops += act.drop.is_some() as usize;
            snapshots += act.snapshot.is_some() as usize;
            if i > 3 {
                assert_eq!(s.pattern, Pattern::Random);
            }
        }
        // One at the start; then a couple for each chance landing of a random read right
        // after the previous one (a few in 10,000 here), never one per read.
        assert!(snapshots <= 10, "{snapshots}");
        assert_eq!(drops, 0);
        assert_eq!(s.finish(), None);
    }

    #[test]
    fn stride_100_is_random() {
        // Seed 003: every 100th page.
        let mut s = ReadStream::default();
        for i in 0..1000u64 {
            let off = i * 100 * PAGE;
            s.plan(off, &P);
            let act = s.consumed(off, PAGE, PAGE, &P);
            assert_eq!(act.drop, None);
        }
        assert_eq!(s.pattern, Pattern::Random);
    }

    #[test]
    fn small_gaps_and_rereads_keep_the_stream() {
        let mut s = ReadStream::default();
        let mut off = 0;
        for i in 0..100u64 {
            s.plan(off, &P);
            s.consumed(off, 64 * 1024, 64 * 1024, &P);
            off += 64 * 1024;
            if i % 10 == 3 {
                off += 32 * 1024; // a small hole
            }
            if i % 10 == 7 {
                off -= 16 * 1024; // a small re-read
            }
        }
        assert_eq!(s.pattern, Pattern::Sequential);
    }

    #[test]
    fn dontcache_only_once_sequential() {
        let mut s = ReadStream::default();
        assert!(!s.plan(0, &P).dontcache);
        s.consumed(0, 65536, 65536, &P);
        assert!(!s.plan(65536, &P).dontcache);
        s.consumed(65536, 65536, 65536, &P);
        assert!(s.plan(131072, &P).dontcache);
        assert!(
            !s.plan(900 * MIB, &P).dontcache,
            "a jump is not read uncached"
        );
    }

    #[test]
    fn seek_restarts_detection_and_hands_back_the_consumed_range() {
        let mut s = ReadStream::default();
        for i in 0..4 {
            if let Some(r) = s.plan(i * MIB, &P).snapshot {
                (r.start / PROOF_BLOCK..r.end / PROOF_BLOCK).for_each(|b| s.proof.record(b, !0));
            }
            s.consumed(i * MIB, MIB, MIB, &P);
        }
        assert_eq!(s.seeked(4 * MIB), None, "a seek to where we are is no seek");
        assert_eq!(s.seeked(100 * MIB), Some(Range::new(0, 4 * MIB)));
        assert_eq!(s.pattern, Pattern::Candidate);
        assert!(!s.plan(100 * MIB, &P).dontcache);
    }

    #[test]
    fn second_sequential_run_after_jump_is_only_dropped_where_proven() {
        let size = 128 * MIB;
        let mut cache = Cache::new(size);
        let mut reads = sequential(16 * MIB, MIB);
        reads.extend(
            sequential(32 * MIB, MIB)
                .into_iter()
                .map(|(o, l)| (o + 64 * MIB, l)),
        );
        run_reads(&mut cache, size, &reads, MIB);
        // The second run's first block is unproven (it was touched before any snapshot).
        assert!(cache.count(Range::new(64 * MIB, 68 * MIB)) > 0);
        assert_eq!(cache.count(Range::new(72 * MIB, 96 * MIB)), 0);
    }

    #[test]
    fn writes_are_windowed() {
        let mut w = WriteStream::default();
        let mut started = vec![];
        let mut settled = vec![];
        for i in 0..(64 * MIB / MIB) {
            let off = i * MIB;
            w.plan(off, &P);
            let a = w.wrote(off, MIB, &P, MIB);
            started.extend(a.start_writeback);
            settled.extend(a.settle);
            w.settled();
        }
        let fin = w.finish(MIB);
        assert_eq!(started[0], Range::new(0, 8 * MIB));
        assert_eq!(settled[0], Range::new(0, 8 * MIB));
        assert_eq!(started.len(), 8);
        // Never more than two windows outstanding between settles.
        for (s, d) in started.iter().skip(1).zip(settled.iter()) {
            assert!(s.end - d.start <= 2 * P.window);
        }
        assert_eq!(fin.settle.unwrap().end, 64 * MIB);
    }

    #[test]
    fn small_writes_below_min_size_are_left_alone() {
        let mut w = WriteStream::default();
        w.plan(0, &P);
        let a = w.wrote(0, 512 * 1024, &P, MIB);
        assert_eq!(a.start_writeback, None);
        assert_eq!(w.finish(MIB), WriteActions::default());
    }

    #[test]
    fn sparse_writes_continue_and_backward_writes_restart() {
        let mut w = WriteStream::default();
        w.plan(0, &P);
        w.wrote(0, MIB, &P, MIB);
        assert!(w.continues(3 * MIB));
        assert!(!w.continues(0));
    }

    #[test]
    fn proof_ring_is_bounded() {
        let mut p = Proof::new();
        p.restart_at(0);
        let r = p.wanted(10 * 1024 * MIB, &P).unwrap();
        assert_eq!(r.len(), PROOF_RING * PROOF_BLOCK);
        for b in 0..100 {
            p.record(b, !0);
        }
        assert_eq!(p.hi, PROOF_RING);
        assert_eq!(
            p.owned_runs(Range::new(0, 200 * MIB))
                .map(|r| r.len())
                .sum::<u64>(),
            PROOF_RING * PROOF_BLOCK
        );
    }

    /// A mapping sampled every tick from its mmap: `frontier` and `cached` per tick,
    /// proofs all cold.
    fn map_run(scan: &mut MapScan, p: &Params, ticks: &[(u64, Option<u64>)]) -> Vec<MapActions> {
        if let Some(r) = scan.begin(p) {
            (r.start / PROOF_BLOCK..r.end / PROOF_BLOCK)
                .for_each(|b| scan.read.proof.record(b, !0));
        }
        map_run_more(scan, p, ticks)
    }

    #[test]
    fn seed_001_sequential_mmap_scan_is_prefetched_and_dropped_behind() {
        let p = P.with_prefetch(16 * MIB);
        let mut scan = MapScan::new(0, GIB, 128 * 1024);
        // 2 MiB per tick, cache growing with the scan and a readahead lead.
        let ticks: Vec<_> = (1..=512u64)
            .map(|t| (t * 2 * MIB, Some(t * 2 * MIB + 128 * 1024)))
            .collect();
        let acts = map_run(&mut scan, &p, &ticks);
        assert!(acts.iter().all(|a| !a.locate), "a scan is never located");
        let prefetched: u64 = acts
            .iter()
            .filter_map(|a| a.read.prefetch)
            .map(|r| r.len())
            .sum();
        // Everything from where the scan proved sequential (its second sample) to the end
        // of the mapping, and nothing past it.
        assert!(prefetched >= GIB - 6 * MIB, "{prefetched}");
        assert!(
            acts.iter()
                .filter_map(|a| a.read.prefetch)
                .all(|r| r.end <= GIB)
        );
        let dropped: u64 = acts
            .iter()
            .filter_map(|a| a.read.drop)
            .map(|r| r.len())
            .sum();
        assert!(dropped >= GIB - 4 * MIB, "{dropped}");
        assert_eq!(scan.read.pattern, Pattern::Sequential);
        assert_eq!(scan.class, MapClass::Watching);
    }

    #[test]
    fn seed_003_sparse_faults_are_located_and_made_random() {
        let mut scan = MapScan::new(0, 1 << 40, 8 * MIB);
        // The frontier stays at the first fault's 64 KiB while the cache grows by the
        // kernel's 8 MiB read-around, fault after fault.
        let ticks: Vec<_> = (1..=5u64)
            .map(|t| (64 * 1024, Some(t * 35 * MIB)))
            .collect();
        let acts = map_run(&mut scan, &P, &ticks);
        let at = acts.iter().position(|a| a.locate).expect("located");
        assert!(at <= 2, "located at tick {at}");
        assert!(
            acts.iter()
                .all(|a| a.read.prefetch.is_none() && a.read.drop.is_none())
        );
        // 16 of every 100 pages mapped (fault-around) in the window found.
        assert!(scan.located(256, 41, None));
        assert_eq!(scan.class, MapClass::Random);
        assert_eq!(scan.finish(), None, "random mappings are not dropped");
        // A later scan from the frontier gives the readahead back.
        assert!(!scan.unrandom(&MapSample {
            frontier: MIB,
            ..MapSample::default()
        }));
        assert!(scan.unrandom(&MapSample {
            frontier: 8 * MIB,
            ..MapSample::default()
        }));
    }

    #[test]
    fn a_scan_starting_mid_mapping_is_followed_not_made_random() {
        let p = P.with_prefetch(16 * MIB);
        let mut scan = MapScan::new(0, GIB, 128 * 1024);
        let ticks: Vec<_> = (1..=3u64).map(|t| (0, Some(t * 12 * MIB))).collect();
        let acts = map_run(&mut scan, &p, &ticks);
        assert!(acts.iter().any(|a| a.locate));
        // The window found is densely mapped: follow the run from where it ends.
        assert!(!scan.located(256, 250, Some(512 * MIB + 36 * MIB)));
        assert_eq!(scan.class, MapClass::Watching);
        assert_eq!(scan.frontier(), 512 * MIB + 36 * MIB);
        let ticks: Vec<_> = (1..=20u64)
            .map(|t| (548 * MIB + t * 2 * MIB, None))
            .collect();
        let acts = map_run_more(&mut scan, &p, &ticks);
        assert_eq!(scan.read.pattern, Pattern::Sequential);
        assert!(acts.iter().any(|a| a.read.prefetch.is_some()));
    }

    /// `map_run` without `begin` (the mapping is already under way).
    fn map_run_more(
        scan: &mut MapScan,
        p: &Params,
        ticks: &[(u64, Option<u64>)],
    ) -> Vec<MapActions> {
        let mut out = Vec::new();
        for &(frontier, cached) in ticks {
            let act = scan.sample(
                MapSample {
                    frontier,
                    cached,
                    ..MapSample::default()
                },
                p,
            );
            if let Some(d) = act.read.drop {
                scan.read.dropped(d);
            }
            if let Some(r) = act.read.snapshot {
                (r.start / PROOF_BLOCK..r.end / PROOF_BLOCK)
                    .for_each(|b| scan.read.proof.record(b, !0));
            }
            out.push(act);
        }
        out
    }
}
