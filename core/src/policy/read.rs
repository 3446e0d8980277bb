//! Read streams: classification per fd (sequential, tolerating small gaps and re-reads;
//! random; a seek restarts it), when to snapshot, what to drop behind, what to prefetch.

use super::Params;
use super::range::{DROP_ALIGN, PROOF_BLOCK, PROOF_RING, Proof, Range, align_down};
use crate::units::{MIB, PAGE};

/// Consumed pages stay this long behind a reader, for small backward re-reads.
pub const LAG: u64 = 256 * 1024;
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

/// The largest folio the page cache makes (PMD order on x86-64 with 4 KiB pages).
pub const MAX_FOLIO: u64 = 2 * MIB;

/// The largest folio readahead may make on a device: its window (twice `read_ahead_kb`
/// after FADV_SEQUENTIAL, which `cat` and the shim's deepening give), as a power of two,
/// at most `MAX_FOLIO`; `MAX_FOLIO` where the device's readahead is unknown.
pub fn readahead_folio_max(device_readahead: Option<u64>) -> u64 {
    device_readahead.map_or(MAX_FOLIO, |ra| {
        ra.saturating_mul(2)
            .clamp(PAGE, MAX_FOLIO)
            .next_power_of_two()
    })
}

/// Whether a read of `asked` bytes at `off` may go uncached (RWF_DONTCACHE) without
/// reading anything twice, readahead making folios of at most `folio_max`
/// (`readahead_folio_max`). At the end of an uncached read the kernel drops every folio the
/// read touched, whole, though the read may have used only the start of it: a read that
/// ends inside a folio leaves the next one to bring it in again. Folios are aligned to their
/// size, so a read that starts and ends on multiples of the largest ends on a folio's end.
/// Other reads read 2 GiB as up to 3.9 GiB, at up to a seventh of the speed
/// (docs/kernel-facts.md).
/// `folio_max` is a power of two, so this is a mask test, cheap enough for the hot path;
/// 1 stands for every read (the `dontcache` backend), whatever its count.
#[inline]
pub fn uncached_read_fits(asked: u64, off: u64, folio_max: u64) -> bool {
    folio_max == 1
        || (asked > 0 && folio_max.is_power_of_two() && (asked | off) & (folio_max - 1) == 0)
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

/// Whether a read at `off` continues a stream whose last read ended at `next`:
/// `next - GAP_BACKWARD <= off <= next + GAP_FORWARD`, as one comparison (the read hooks'
/// hot path asks it on every call). Exact for offsets below 2^63, which file offsets are.
#[inline]
pub fn read_continues(next: u64, off: u64) -> bool {
    off.wrapping_sub(next).wrapping_add(GAP_BACKWARD) <= GAP_FORWARD + GAP_BACKWARD
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

    /// At close: what the stream consumed and has not dropped yet, with the proof that
    /// says which of it the stream brought in; the stream is reset. Prefetched pages not
    /// read yet were brought in by the stream too. The proof goes with the range because
    /// the reset clears the stream's own: a drop made from it after `finish` would find
    /// nothing owned.
    pub fn finish(&mut self) -> Option<Consumed> {
        self.settle();
        let end = self.next.max(self.prefetch.to);
        let r = (self.pattern == Pattern::Sequential && end > self.dropped_to).then(|| Consumed {
            range: Range::new(self.dropped_to, end.next_multiple_of(DROP_ALIGN)),
            proof: self.proof,
        });
        *self = ReadStream::new();
        r
    }
}

/// What a read stream leaves to drop at its close: `range`, of which `proof` says what the
/// stream itself brought in.
#[derive(Clone, Copy, Debug)]
pub struct Consumed {
    pub range: Range,
    pub proof: Proof,
}

#[cfg(test)]
mod tests {
    #[test]
    fn uncached_reads_end_on_folio_ends() {
        // The fixture's 128 KiB readahead, doubled by FADV_SEQUENTIAL.
        let f = readahead_folio_max(Some(128 * 1024));
        assert_eq!(f, 256 * 1024);
        // This VM's 8 MiB: folios stop at 2 MiB; an unknown device the same.
        assert_eq!(readahead_folio_max(Some(8 * MIB)), MAX_FOLIO);
        assert_eq!(readahead_folio_max(None), MAX_FOLIO);
        // Readahead off: each read makes its own folios, one page at least.
        assert_eq!(readahead_folio_max(Some(0)), PAGE);
        // A window that is not a power of two: the next one up.
        assert_eq!(readahead_folio_max(Some(96 * 1024)), 256 * 1024);
        assert!(uncached_read_fits(MIB, 3 * MIB, f));
        assert!(uncached_read_fits(256 * 1024, 0, f));
        // Larger than the largest folio: aligned to that is enough.
        assert!(uncached_read_fits(4 * MIB, 6 * MIB, MAX_FOLIO));
        // Not a power of two, but a multiple: measured to read the file once.
        assert!(uncached_read_fits(768 * 1024, 0, f));
        // cat's 128 KiB reads, tar's 10 KiB, 3 MiB reads over 2 MiB folios.
        assert!(!uncached_read_fits(128 * 1024, 0, f));
        assert!(!uncached_read_fits(10 * 1024, 0, PAGE));
        assert!(!uncached_read_fits(3 * MIB, 0, MAX_FOLIO));
        // Aligned in size but not in place.
        assert!(!uncached_read_fits(MIB, 4096, f));
        assert!(!uncached_read_fits(0, 0, f));
        // The dontcache backend's alignment: every read, an empty one too.
        assert!(uncached_read_fits(10 * 1024, 4096 + 1, 1));
        assert!(uncached_read_fits(0, 0, 1));
    }

    #[test]
    fn read_continues_is_the_window_around_next() {
        let near = |v: u64| [v, v.wrapping_add(1), v.wrapping_sub(1)];
        let mut points = vec![0, 1, 4096, GAP_BACKWARD, GAP_FORWARD, i64::MAX as u64];
        for v in [
            GAP_BACKWARD,
            GAP_FORWARD,
            1 << 40,
            (i64::MAX as u64) - GAP_FORWARD,
        ] {
            points.extend(near(v));
        }
        for &next in &points {
            for d in [0, 1, GAP_BACKWARD, GAP_FORWARD] {
                for off in near(next.wrapping_add(d))
                    .into_iter()
                    .chain(near(next.wrapping_sub(d)))
                {
                    if off > i64::MAX as u64 || next > i64::MAX as u64 {
                        continue;
                    }
                    let window = off <= next + GAP_FORWARD && off + GAP_BACKWARD >= next;
                    assert_eq!(read_continues(next, off), window, "next {next} off {off}");
                }
            }
        }
    }

    use super::*;
    use crate::policy::sim::*;
    use crate::policy::{PAGE, PROOF_BLOCK, READAHEAD_REACH};

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
            if let Some(r) = r {
                s.proof.snapshot(r, |o, l| cache.cached_pages(o, l));
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
            // The stream earns its readahead: the first batch reaches no further than the
            // start reach, later ones ramp up to the configured 16 MiB.
            assert!(pf[0].end <= PREFETCH_START, "{:?}, chunk {chunk}", pf[0]);
            assert!(pf.iter().any(|r| r.len() > 4 * MIB), "the reach ramps up");
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
            (200 * MIB + 12 * MIB..=200 * MIB + 16 * MIB).contains(&end),
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
    fn random_preads_drop_nothing_and_cost_next_to_no_snapshots() {
        // A database's random 4 KiB preads over a file half of which is cached: whatever the
        // seed, nothing is dropped, nothing read uncached or prefetched, and the residency
        // checks stay far below one per read.
        let size = 1024 * MIB;
        for seed in [1u64, 12345, 987_654_321] {
            let mut cache = Cache::new(size);
            cache.touch(Range::new(0, size / 2));
            let before = cache.count(Range::new(0, size));
            let p = P.with_prefetch(16 * MIB);
            let mut s = ReadStream::default();
            let (mut x, mut snapshots) = (seed, 0);
            let reads = 10_000;
            for _ in 0..reads {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let off = (x >> 20) % (size / PAGE) * PAGE;
                let plan = s.plan(off, &p);
                assert!(!plan.dontcache);
                snapshots += plan.snapshot.is_some() as usize;
                cache.touch(Range::new(off, off + PAGE));
                let act = s.consumed(off, PAGE, PAGE, &p);
                snapshots += act.snapshot.is_some() as usize;
                assert_eq!(act.prefetch, None, "seed {seed}");
                assert_eq!(act.drop, None, "seed {seed}: a random read dropped pages");
                if let Some(d) = act.drop {
                    for run in s.proof.owned_runs(d).collect::<Vec<_>>() {
                        cache.drop(run);
                    }
                }
            }
            if let Some(c) = s.finish() {
                for run in c.proof.owned_runs(c.range).collect::<Vec<_>>() {
                    cache.drop(run);
                }
            }
            assert!(
                cache.count(Range::new(0, size)) >= before,
                "seed {seed}: a page dropped"
            );
            assert!(
                snapshots * 100 <= reads,
                "seed {seed}: {snapshots} snapshots"
            );
        }
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
    fn small_gaps_and_rereads_are_still_dropped_behind() {
        // A reader that skips small holes and re-reads a little now and then (a parser,
        // tar over sparse members) is still one stream: dropped behind, bounded.
        let size = 64 * MIB;
        let mut reads = Vec::new();
        let mut off = 0;
        let mut i = 0u64;
        while off < size {
            reads.push((off, 64 * 1024));
            off += 64 * 1024;
            if i % 10 == 3 {
                off += 32 * 1024; // a small hole
            }
            if i % 10 == 7 {
                off -= 16 * 1024; // a small re-read
            }
            i += 1;
        }
        let mut cache = Cache::new(size);
        let (peak, drops) = run_reads(&mut cache, size, &reads, 512 * 1024);
        assert!(drops > 2, "{drops} drops");
        assert!(
            (peak as u64) * PAGE <= 12 * MIB,
            "peak {} MiB",
            peak as u64 * PAGE / MIB
        );
        assert_eq!(cache.count(Range::new(0, size)), 0);
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
    fn a_new_run_after_a_jump_is_proven_before_its_second_read() {
        // Its first read is indistinguishable from a random one and goes unproven; the
        // policy must ask for the snapshot before the second read, covering that read and
        // what readahead can fetch beyond it, so the rest of the run is dropped behind.
        let mut s = ReadStream::default();
        for (off, len) in sequential(16 * MIB, MIB) {
            cold_read(&mut s, off, len, &P);
        }
        cold_read(&mut s, 64 * MIB, MIB, &P);
        let snap = s
            .plan(65 * MIB, &P)
            .snapshot
            .expect("a snapshot before the second read");
        assert!(snap.start <= 65 * MIB, "{snap:?}");
        assert!(
            snap.end >= 65 * MIB + P.window + READAHEAD_REACH,
            "{snap:?}"
        );

        let size = 128 * MIB;
        let mut cache = Cache::new(size);
        let mut reads = sequential(16 * MIB, MIB);
        reads.extend(
            sequential(32 * MIB, MIB)
                .into_iter()
                .map(|(o, l)| (o + 64 * MIB, l)),
        );
        run_reads(&mut cache, size, &reads, MIB);
        assert_eq!(cache.count(Range::new(0, 16 * MIB)), 0, "the first run");
        assert_eq!(
            cache.count(Range::new(68 * MIB, 96 * MIB)),
            0,
            "the second run"
        );
    }
}
