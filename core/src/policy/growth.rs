//! Streams a watcher outside the process can't see as file positions (pread, io_uring with
//! explicit offsets, mappings): followed by the growth of the file's cached pages, block by
//! block, between samples of `cachestat`.
//!
//! The proof is the same as for streams: a chunk may be dropped only if it was entirely
//! uncached at first sight (or the file was created during the run). Growth since then was
//! brought in by the program, provided nobody else has the file open (the caller checks).
//! Of the program's own pages, those of blocks that grew in the last `keep_rounds` rounds
//! stay (readahead just brought in, a random reader's latest reads), and so do those of
//! a block read into until the stream has grown beyond it by more than readahead reaches
//! (`READAHEAD_REACH`), or more than that grew elsewhere while its run of grown blocks
//! stayed still: only then has the reader passed it (or left it). A slow reader's
//! blocks stop growing long before it reads them (readahead fetched them whole), and
//! dropping them then made it read them again: 4.5 times the file from disk for an
//! io_uring reader at 50 MB/s. Older ones are dropped once clean, in batches of at least
//! `min_batch` (or when some have waited `RETRY_ROUNDS`), so that DONTNEED is called
//! rarely and over large ranges.

use super::READAHEAD_REACH;
use super::range::{PAGE, PROOF_BLOCK, PROOF_CHUNK, Range, uncached_chunks};

/// A block dropped before is dropped again after this many rounds if pages are still
/// cached there without new growth: pages under readahead I/O when the drop came (DONTNEED
/// skips locked pages) are read later without growing the count.
pub const RETRY_ROUNDS: u64 = 25;

/// A round in which at least this many blocks grew, by less than `RANDOM_PAGES` pages each
/// on average, is a random reader's: as the preload's random reads, nothing it brought in
/// is dropped behind it (only when the file is closed), for `RANDOM_HOLD` rounds.
pub const RANDOM_BLOCKS: u64 = 8;
pub const RANDOM_PAGES: u64 = 64;
pub const RANDOM_HOLD: u64 = 50;

/// Growth is sampled per proof block (4 MiB); residency at first sight per 64 KiB chunk.
pub const GROWTH_BLOCK: u64 = PROOF_BLOCK;

/// A block is passed once its reader's growth came, after its own, to an owned block more
/// than `reach_blocks` beyond it: readahead never runs further ahead of the reader than
/// its reach (`Growth::with_reach`; by default READAHEAD_REACH, which assumes
/// read_ahead_kb up to 8192), and one block more is the margin.
fn reach_blocks(reach: u64) -> usize {
    reach.div_ceil(GROWTH_BLOCK) as usize + 1
}

/// A run of grown blocks whose growth stopped is left behind (its reader jumped elsewhere)
/// once more than the reach grew elsewhere since: a single reader further back in
/// it would have had to read that much in between (another, faster stream in the same file
/// can pass for that: its slow neighbour then reads some readahead again). Or once it has
/// been still this many rounds (rounds in which the file's cache changed), whatever grew,
/// so that the footprint stays bounded.
const IDLE_ROUNDS: u64 = 300;

/// One block's sample, in pages (cachestat's counts).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockSample {
    pub cached: u64,
    pub dirty: u64,
    pub writeback: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Block {
    /// Bit i set: chunk i was entirely uncached at first sight.
    owned: u64,
    now: BlockSample,
    grew_at: u64,
    dropped_at: u64,
    /// Held dirty or writeback pages once: written, not read ahead.
    written: bool,
    /// Dropped since the last sample: the next one re-reads the count, it is not growth.
    resample: bool,
}

/// What to do after a round of samples.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrowthActions {
    /// Start writeback (sync_file_range WRITE, never a WAIT flag).
    pub writeback: Vec<Range>,
    /// Drop these (all inside chunks owned, clean when sampled).
    pub drop: Vec<Range>,
}

/// A file followed by the growth of its cached pages. No `Default`: a reach of zero blocks
/// would pass a block before its readahead is read (the constructors set READAHEAD_REACH).
#[derive(Clone, Debug)]
pub struct Growth {
    blocks: Vec<Block>,
    tick: u64,
    /// This round: blocks that grew, and by how many pages in all.
    grown_blocks: u64,
    grown_pages: u64,
    /// Random growth was seen: nothing is dropped before this tick (but at close).
    random_until: u64,
    /// How far readahead can run ahead of the reader, in blocks (see `reach_blocks`).
    reach_blocks: usize,
}

impl Growth {
    /// First sight of a file of `size` bytes: which chunks are uncached, from
    /// `cached(off, len)` (`None`: unknown, so nothing there is owned). Blocks beyond
    /// `size` held no pages: they are owned.
    pub fn first_sight(size: u64, mut cached: impl FnMut(u64, u64) -> Option<u64>) -> Growth {
        let n = size.div_ceil(GROWTH_BLOCK) as usize;
        let whole = cached(0, size.max(1));
        let blocks = (0..n as u64)
            .map(|b| {
                let owned = match whole {
                    Some(0) => !0,
                    Some(_) => uncached_chunks(b, &mut cached),
                    None => 0,
                };
                // A partly owned block starts from what it holds now: those pages are not
                // the program's growth.
                let now = if owned != !0 && owned != 0 {
                    BlockSample {
                        cached: cached(b * GROWTH_BLOCK, GROWTH_BLOCK).unwrap_or(0),
                        ..BlockSample::default()
                    }
                } else {
                    BlockSample::default()
                };
                Block {
                    owned,
                    now,
                    ..Block::default()
                }
            })
            .collect();
        Growth::of(blocks)
    }

    /// A file created during the run: every page in it is the run's.
    pub fn all_owned() -> Growth {
        Growth::of(Vec::new())
    }

    fn of(blocks: Vec<Block>) -> Growth {
        Growth {
            blocks,
            tick: 1,
            grown_blocks: 0,
            grown_pages: 0,
            random_until: 0,
            reach_blocks: reach_blocks(READAHEAD_REACH),
        }
    }

    /// `reach`: how far the kernel's readahead can run ahead of a reader of this file
    /// (the watcher gives four times its device's read_ahead_kb or largest request,
    /// whichever is larger: a window is doubled by FADV_SEQUENTIAL, and the next one is
    /// fetched as the reader enters the last).
    pub fn with_reach(self, reach: u64) -> Growth {
        Growth {
            reach_blocks: reach_blocks(reach),
            ..self
        }
    }

    fn block(&mut self, b: u64) -> &mut Block {
        let b = b as usize;
        if b >= self.blocks.len() {
            self.blocks.resize(
                b + 1,
                Block {
                    owned: !0,
                    ..Block::default()
                },
            );
        }
        &mut self.blocks[b]
    }

    /// Starts a round of samples.
    pub fn begin(&mut self) {
        self.tick += 1;
        self.grown_blocks = 0;
        self.grown_pages = 0;
    }

    /// Whether any chunk of block `b` may ever be dropped (a block beyond the file's size
    /// at first sight held no pages then: it is).
    pub fn owned(&self, b: u64) -> bool {
        self.blocks.get(b as usize).is_none_or(|blk| blk.owned != 0)
    }

    /// Whether random growth holds the drops back now.
    pub fn random(&self) -> bool {
        self.tick < self.random_until
    }

    /// Block `b`'s sample in this round (blocks not sampled keep their last one).
    pub fn observe(&mut self, b: u64, s: BlockSample) {
        let tick = self.tick;
        let blk = self.block(b);
        let grew = s.cached > blk.now.cached && !blk.resample;
        let by = s.cached.saturating_sub(blk.now.cached);
        if grew {
            blk.grew_at = tick;
        }
        blk.resample = false;
        blk.written |= s.dirty > 0 || s.writeback > 0;
        blk.now = s;
        if grew {
            self.grown_blocks += 1;
            self.grown_pages += by;
        }
    }

    /// Owned pages cached now, as last sampled (an upper bound: a partly owned block
    /// counts whole).
    pub fn owned_cached_pages(&self) -> u64 {
        self.blocks
            .iter()
            .filter(|b| b.owned != 0)
            .map(|b| b.now.cached)
            .sum()
    }

    /// For each block, whether the program is done with it. Written blocks: once clean.
    /// Read blocks, within their run (blocks that grew one after another, or were cached
    /// at first sight, which readahead passes over):
    /// - forward: the owned blocks above it, up to one more than the reach beyond, last
    ///   grew in order, each no earlier than the one below (its own reader's frontier went
    ///   through them; growth older than the block below is another stream's);
    /// - backward: the block below grew more than a round after it, and the one above was
    ///   dropped since it last grew (a reader going down: readahead runs only forwards,
    ///   into what it read; the round of slack covers a sample racing the readahead);
    /// - or its run was left (see IDLE_ROUNDS).
    fn passed(&self, keep_rounds: u64) -> Vec<bool> {
        let n = self.blocks.len();
        let mut passed = vec![false; n];
        // The (reach_blocks + 1)-th latest growth in the file: a run still since before it
        // has seen more than the reach grow elsewhere.
        let mut ticks: Vec<u64> = self
            .blocks
            .iter()
            .map(|b| b.grew_at)
            .filter(|&t| t > 0)
            .collect();
        let reach_ago = if ticks.len() > self.reach_blocks {
            let k = ticks.len() - 1 - self.reach_blocks;
            *ticks.select_nth_unstable(k).1
        } else {
            0
        };
        // The next owned block at or above each index (warm blocks are passed over).
        let mut next_owned = vec![n; n + 1];
        for k in (0..n).rev() {
            next_owned[k] = if self.blocks[k].owned != 0 {
                k
            } else {
                next_owned[k + 1]
            };
        }
        let in_run = |b: &Block| b.grew_at > 0 || b.owned == 0;
        let mut start = 0;
        while start < n {
            if !in_run(&self.blocks[start]) {
                passed[start] = self.blocks[start].written;
                start += 1;
                continue;
            }
            let mut end = start;
            while end + 1 < n && in_run(&self.blocks[end + 1]) {
                end += 1;
            }
            let run = &self.blocks[start..=end];
            let last = run.iter().map(|b| b.grew_at).max().unwrap_or(0);
            let left = self.tick >= last + keep_rounds
                && (reach_ago > last || self.tick >= last + IDLE_ROUNDS);
            for i in start..=end {
                let b = &self.blocks[i];
                let mut forward = false;
                let (mut j, mut prev) = (next_owned[i + 1], b.grew_at);
                while j <= end && self.blocks[j].grew_at >= prev {
                    if j > i + self.reach_blocks {
                        forward = true;
                        break;
                    }
                    prev = self.blocks[j].grew_at;
                    j = next_owned[j + 1];
                }
                let above_dropped = self.blocks.get(i + 1).is_none_or(|up| {
                    up.owned == 0 || (up.grew_at > 0 && up.dropped_at >= up.grew_at)
                });
                let backward =
                    i > start && above_dropped && self.blocks[i - 1].grew_at > b.grew_at + 1;
                passed[i] = b.written || left || forward || backward;
            }
            start = end + 1;
        }
        passed
    }

    /// Decides after a round: writeback for dirty blocks that did not grow in it, and drops
    /// of owned clean blocks the program is done with (`passed`) that did not grow in the
    /// last `keep_rounds` rounds (all of them when `finish`: the file was closed).
    pub fn plan(&mut self, keep_rounds: u64, min_batch: u64, finish: bool) -> GrowthActions {
        let tick = self.tick;
        let mut act = GrowthActions::default();
        for (i, b) in self.blocks.iter().enumerate() {
            if b.now.dirty > 0 && (finish || b.grew_at < tick) {
                push_merged(&mut act.writeback, block_range(i as u64));
            }
        }
        if self.grown_blocks >= RANDOM_BLOCKS && self.grown_pages < RANDOM_PAGES * self.grown_blocks
        {
            self.random_until = tick + RANDOM_HOLD;
        }
        if !finish && self.random() {
            return act;
        }
        let passed = self.passed(keep_rounds);
        let cands: Vec<usize> = (0..self.blocks.len())
            .filter(|&i| {
                let b = &self.blocks[i];
                b.owned != 0
                    && b.now.cached > 0
                    && b.now.dirty == 0
                    && b.now.writeback == 0
                    && (finish || b.grew_at > b.dropped_at || tick >= b.dropped_at + RETRY_ROUNDS)
                    && (finish || passed[i])
            })
            .collect();
        let out: Vec<usize> = cands
            .into_iter()
            .filter(|&i| finish || self.blocks[i].grew_at + keep_rounds <= tick)
            .collect();
        let batch: u64 = out.iter().map(|&i| self.blocks[i].now.cached * PAGE).sum();
        let overdue = out
            .iter()
            .any(|&i| self.blocks[i].grew_at + RETRY_ROUNDS <= tick);
        if out.is_empty() || (!finish && batch < min_batch && !overdue) {
            return act;
        }
        for i in out {
            let b = &mut self.blocks[i];
            b.dropped_at = tick;
            b.resample = true;
            // Whatever grows here later is read in: the written state was for these pages.
            b.written = false;
            let owned = b.owned;
            let base = i as u64 * GROWTH_BLOCK;
            let mut c = 0u64;
            while c < 64 {
                if owned & (1 << c) == 0 {
                    c += 1;
                    continue;
                }
                let s = c;
                while c < 64 && owned & (1 << c) != 0 {
                    c += 1;
                }
                push_merged(
                    &mut act.drop,
                    Range::new(base + s * PROOF_CHUNK, base + c * PROOF_CHUNK),
                );
            }
        }
        act
    }
}

fn block_range(b: u64) -> Range {
    Range::new(b * GROWTH_BLOCK, (b + 1) * GROWTH_BLOCK)
}

fn push_merged(v: &mut Vec<Range>, r: Range) {
    match v.last_mut() {
        Some(last) if last.end == r.start => last.end = r.end,
        _ => v.push(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::sim::Cache;
    use crate::units::MIB;

    /// One round of the watcher against the model: sample every block, plan, drop.
    fn round(g: &mut Growth, cache: &mut Cache, size: u64, keep_rounds: u64, finish: bool) {
        g.begin();
        for b in 0..size.div_ceil(GROWTH_BLOCK) {
            let cached = cache
                .cached_pages(b * GROWTH_BLOCK, GROWTH_BLOCK)
                .unwrap_or(0);
            g.observe(
                b,
                BlockSample {
                    cached,
                    ..Default::default()
                },
            );
        }
        for r in g.plan(keep_rounds, 8 * MIB, finish).drop {
            cache.drop(r);
        }
    }

    #[test]
    fn a_pread_reader_is_dropped_behind_and_warm_pages_survive() {
        let size = 512 * MIB;
        let mut cache = Cache::new(size);
        let warm = Range::new(100 * MIB, 132 * MIB);
        cache.touch(warm);
        let mut g = Growth::first_sight(size, |o, l| cache.cached_pages(o, l));
        let mut peak = 0;
        // 10 MiB per round, 8 MiB of readahead beyond.
        let mut pos = 0;
        while pos < size {
            let end = (pos + 10 * MIB).min(size);
            cache.touch(Range::new(pos, (end + 8 * MIB).min(size)));
            pos = end;
            round(&mut g, &mut cache, size, 2, false);
            let own = cache.count(Range::new(0, size)) - cache.count(warm);
            peak = peak.max(own as u64 * PAGE);
        }
        round(&mut g, &mut cache, size, 2, true);
        // What stays: READAHEAD_REACH behind the frontier (the reader may be that far back),
        // the block it is in, a round's growth and a batch not yet dropped.
        assert!(peak <= 64 * MIB, "peak {} MiB", peak / MIB);
        assert_eq!(
            cache.count(warm) as u64,
            warm.len() / PAGE,
            "warm pages stay"
        );
        assert_eq!(cache.count(Range::new(0, size)), cache.count(warm));
    }

    #[test]
    fn a_slow_reader_keeps_what_readahead_fetched_for_it() {
        // 1 MiB a round with 24 MiB of readahead beyond (read_ahead_kb 8192, FADV_SEQUENTIAL
        // and async readahead reach further): every block is cached whole long before the
        // reader gets there, and stops growing then.
        let size = 256 * MIB;
        let ra = 24 * MIB;
        let mut cache = Cache::new(size);
        let mut g = Growth::first_sight(size, |o, l| cache.cached_pages(o, l));
        let mut peak = 0;
        let mut pos = 0;
        while pos < size {
            let end = (pos + MIB).min(size);
            cache.touch(Range::new(pos, (end + ra).min(size)));
            pos = end;
            round(&mut g, &mut cache, size, 2, false);
            let ahead = Range::new(pos, (pos + ra).min(size));
            assert_eq!(
                cache.count(ahead) as u64,
                ahead.len() / PAGE,
                "pages ahead of the reader at {} MiB dropped",
                pos / MIB
            );
            peak = peak.max(cache.count(Range::new(0, size)) as u64 * PAGE);
        }
        assert!(peak <= 64 * MIB, "peak {} MiB", peak / MIB);
        round(&mut g, &mut cache, size, 2, true);
        assert_eq!(cache.count(Range::new(0, size)), 0);
    }

    /// A sequential reader as the kernel's readahead serves it: windows of `window` fetched
    /// whole, the next one as soon as the reader enters the last (at most two windows
    /// ahead: READAHEAD_REACH with read_ahead_kb 8192 and FADV_SEQUENTIAL).
    struct Reader {
        pos: u64,
        fetched: u64,
        end: u64,
        window: u64,
    }

    impl Reader {
        fn new(start: u64, end: u64) -> Reader {
            Reader {
                pos: start,
                fetched: start,
                end,
                window: 16 * MIB,
            }
        }

        /// Reads `step` more; true while there is more to read.
        fn read(&mut self, cache: &mut Cache, step: u64) -> bool {
            let to = (self.pos + step).min(self.end);
            while self.fetched < self.end && self.fetched < to + self.window {
                let next = (self.fetched + self.window).min(self.end);
                cache.touch(Range::new(self.fetched, next));
                self.fetched = next;
            }
            // What it reads now is cached, whatever happened to it.
            cache.touch(Range::new(self.pos, to));
            self.pos = to;
            self.pos < self.end
        }

        fn ahead_kept(&self, cache: &Cache) -> bool {
            let ahead = Range::new(self.pos, self.fetched);
            cache.count(ahead) as u64 == ahead.len() / PAGE
        }
    }

    /// A cache over `size` bytes with `warm` cached, and the watcher's first sight of it.
    fn fresh(size: u64, warm: Range) -> (Cache, Growth) {
        let mut cache = Cache::new(size);
        cache.touch(warm);
        let g = Growth::first_sight(size, |o, l| cache.cached_pages(o, l));
        (cache, g)
    }

    /// Two readers of one file, 1 MiB a round each, the second from `second` on: asserts
    /// that neither loses readahead it has not read; returns the peak footprint.
    fn two_slow_streams(size: u64, second: u64) -> u64 {
        let (mut cache, mut g) = fresh(size, Range::new(0, 0));
        let mut a = Reader::new(0, second);
        let mut b = Reader::new(second, size);
        let mut peak = 0;
        // `|`, not `||`: both read every round.
        while a.read(&mut cache, MIB) | b.read(&mut cache, MIB) {
            round(&mut g, &mut cache, size, 2, false);
            for (r, which) in [(&a, "first"), (&b, "second")] {
                assert!(
                    r.ahead_kept(&cache),
                    "readahead of the {which} lost at {} MiB",
                    r.pos / MIB
                );
            }
            peak = peak.max(cache.count(Range::new(0, size)) as u64 * PAGE);
        }
        peak
    }

    #[test]
    fn slow_readers_lose_no_readahead_and_stay_bounded() {
        let peak = two_slow_streams(512 * MIB, 256 * MIB);
        assert!(peak <= 2 * 64 * MIB, "peak {} MiB", peak / MIB);
    }

    #[test]
    fn streams_whose_blocks_meet_keep_each_others_readahead() {
        // 48 MiB apart: from the first windows on, their blocks form one run.
        two_slow_streams(256 * MIB, 48 * MIB);
    }

    #[test]
    fn a_reader_going_backwards_passes_a_partly_warm_block() {
        let peak = read_backwards(256 * MIB, Range::new(200 * MIB, 202 * MIB));
        assert!(peak <= 32 * MIB, "peak {} MiB", peak / MIB);
    }

    #[test]
    fn a_device_with_little_readahead_keeps_less() {
        // read_ahead_kb 512 (2 MiB windows with FADV_SEQUENTIAL): a reach of 8 MiB.
        let size = 256 * MIB;
        let (mut cache, g) = fresh(size, Range::new(0, 0));
        let mut g = g.with_reach(8 * MIB);
        let mut r = Reader::new(0, size);
        r.window = 2 * MIB;
        let mut peak = 0;
        while r.read(&mut cache, MIB) {
            round(&mut g, &mut cache, size, 2, false);
            assert!(
                r.ahead_kept(&cache),
                "readahead lost at {} MiB",
                r.pos / MIB
            );
            peak = peak.max(cache.count(Range::new(0, size)) as u64 * PAGE);
        }
        assert!(peak <= 28 * MIB, "peak {} MiB", peak / MIB);
    }

    #[test]
    fn a_reader_that_jumps_leaves_nothing_behind_it() {
        // 40 MiB here, then on from 128 MiB, 16 MiB a round.
        let size = 512 * MIB;
        let (mut cache, mut g) = fresh(size, Range::new(0, 0));
        let mut r = Reader::new(0, 40 * MIB);
        while r.read(&mut cache, 16 * MIB) {
            round(&mut g, &mut cache, size, 2, false);
        }
        let first = Range::new(0, 64 * MIB);
        let mut r = Reader::new(128 * MIB, 384 * MIB);
        while r.read(&mut cache, 16 * MIB) {
            round(&mut g, &mut cache, size, 2, false);
            assert!(r.ahead_kept(&cache));
        }
        assert_eq!(cache.count(first), 0, "the first run is left behind");
    }

    /// 1 MiB preads from the end down (readahead only runs forwards, into what was read):
    /// the peak of what is cached outside `warm`, which must stay whole.
    fn read_backwards(size: u64, warm: Range) -> u64 {
        let (mut cache, mut g) = fresh(size, warm);
        let mut peak = 0;
        let mut pos = size;
        while pos > 0 {
            pos -= MIB;
            cache.touch(Range::new(pos, pos + MIB));
            round(&mut g, &mut cache, size, 2, false);
            let own = cache.count(Range::new(0, size)) - cache.count(warm);
            peak = peak.max(own as u64 * PAGE);
        }
        assert_eq!(
            cache.count(warm) as u64,
            warm.len() / PAGE,
            "warm pages stay"
        );
        peak
    }

    #[test]
    fn a_reader_going_backwards_is_dropped_behind() {
        let peak = read_backwards(256 * MIB, Range::new(0, 0));
        // The block it reads, the one above until the drop, a batch: a few blocks, not the file.
        assert!(peak <= 32 * MIB, "peak {} MiB", peak / MIB);
    }

    #[test]
    fn a_second_pass_loses_no_readahead() {
        let size = 128 * MIB;
        let (mut cache, mut g) = fresh(size, Range::new(0, 0));
        let mut r = Reader::new(0, size);
        while r.read(&mut cache, 4 * MIB) {
            round(&mut g, &mut cache, size, 2, false);
        }
        let tail = cache.count(Range::new(0, size));
        assert!(tail > 0, "the last blocks stay while the file is open");
        let mut r = Reader::new(0, size);
        while r.read(&mut cache, 4 * MIB) {
            round(&mut g, &mut cache, size, 2, false);
            assert!(r.ahead_kept(&cache), "second pass at {} MiB", r.pos / MIB);
        }
    }

    /// `n` pages read at random (a linear congruential sequence from `x`) by the program.
    fn touch_random(cache: &mut Cache, x: &mut u64, size: u64, n: usize) {
        for _ in 0..n {
            *x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let off = (*x >> 20) % (size / PAGE) * PAGE;
            cache.touch(Range::new(off, off + PAGE));
        }
    }

    #[test]
    fn random_reads_over_a_half_cached_file_never_drop_what_was_cached() {
        let size = 256 * MIB;
        let mut cache = Cache::new(size);
        let warm = Range::new(0, size / 2);
        cache.touch(warm);
        let mut g = Growth::first_sight(size, |o, l| cache.cached_pages(o, l));
        let mut x = 12345u64;
        for _ in 0..50 {
            touch_random(&mut cache, &mut x, size, 500);
            round(&mut g, &mut cache, size, 2, false);
        }
        assert_eq!(cache.count(warm) as u64, warm.len() / PAGE);
        round(&mut g, &mut cache, size, 0, true);
        assert_eq!(cache.count(Range::new(size / 2, size)), 0);
    }

    #[test]
    fn random_reads_over_owned_blocks_are_not_dropped_until_close() {
        let size = 256 * MIB;
        let (mut cache, mut g) = fresh(size, Range::new(0, 0));
        let mut x = 777u64;
        for _ in 0..40 {
            touch_random(&mut cache, &mut x, size, 200);
            let before = cache.count(Range::new(0, size));
            round(&mut g, &mut cache, size, 2, false);
            assert_eq!(
                cache.count(Range::new(0, size)),
                before,
                "a random reader's pages stay"
            );
        }
        assert!(g.random());
        round(&mut g, &mut cache, size, 0, true);
        assert_eq!(cache.count(Range::new(0, size)), 0, "all dropped at close");
    }

    #[test]
    fn dirty_blocks_get_writeback_and_are_not_dropped_until_clean() {
        let mut g = Growth::all_owned();
        g.begin();
        let dirty = BlockSample {
            cached: 1024,
            dirty: 1024,
            writeback: 0,
        };
        g.observe(0, dirty);
        g.observe(1, dirty);
        let a = g.plan(0, 0, false);
        assert!(a.writeback.is_empty(), "still growing this round");
        assert!(a.drop.is_empty());
        g.begin();
        g.observe(0, dirty);
        let a = g.plan(0, 0, false);
        assert_eq!(a.writeback, vec![Range::new(0, 2 * GROWTH_BLOCK)]);
        assert!(a.drop.is_empty(), "dirty pages are never dropped");
        g.begin();
        g.observe(
            0,
            BlockSample {
                cached: 1024,
                dirty: 0,
                writeback: 0,
            },
        );
        g.observe(
            1,
            BlockSample {
                cached: 1024,
                dirty: 0,
                writeback: 0,
            },
        );
        let a = g.plan(0, 0, false);
        assert_eq!(a.drop, vec![Range::new(0, 2 * GROWTH_BLOCK)]);
    }
}
