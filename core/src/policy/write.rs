//! Write streams, bounded by windowed writeback: after window i is written its writeback
//! is started; window i-(WRITEBACK_WINDOWS-1) is waited for until clean, then dropped.

use super::Params;
use super::range::{PAGE, PROOF_BLOCK, PROOF_RING, Proof, Range, align_down};
use crate::units::MIB;

/// Windows of a write stream under writeback at once (see `WriteStream::wrote`), where a
/// settle may make the writer wait (the preload's default, `Params::writeback_windows`).
/// A window must be clean by the time the writer is this many windows on: a copier fills
/// a 2 MiB window in about 2 ms, and this VM's disk, reading for the copy at the same
/// time, took 6-15 ms to write one back, so with four the writeback helper spent most of a
/// copy polling and the writer waited for it half of the time. Eight: in s20, 2 GiB
/// copies until on disk against four windows in the same rounds (medians of 3), cp 3.64
/// -> 3.58 s, dd 3.93 -> 3.41, `cat >` 4.45 -> 3.24, tar 3.72 -> 3.60, rsync 8.28 -> 5.18,
/// copyfile 3.39 -> 3.66 (its runs 2.72-3.82); cgroup peaks +8 MiB (cp 54 -> 62 of the 64
/// allowed; bench/results/copies-at-the-floor.md).
pub const WRITEBACK_WINDOWS: u64 = 8;

/// What to do after a write.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteActions {
    /// Start writeback of this range (sync_file_range WRITE).
    pub start_writeback: Option<Range>,
    /// Wait until this range is clean, then drop its proven chunks.
    pub settle: Option<Range>,
    pub snapshot: Option<Range>,
}

/// A write stream on one fd: bounded by windowed writeback (start window i, settle the
/// window `WRITEBACK_WINDOWS` - 1 before it).
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
            // Keep `writeback_windows` windows under writeback before waiting on the oldest:
            // the disk stays busy while the program writes the next one.
            let settle_to = self
                .written_back_to
                .saturating_sub((p.writeback_windows.max(1) - 1) * p.window);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::sim::*;
    use crate::units::MIB;

    #[test]
    fn writes_are_windowed() {
        let mut w = WriteStream::default();
        let mut started = vec![];
        let mut settled = vec![];
        // Long enough for settles to begin: they trail the writer by the windows under
        // writeback.
        let windows = WRITEBACK_WINDOWS + 4;
        let len = windows * P.window;
        for i in 0..(len / MIB) {
            let off = i * MIB;
            w.plan(off, &P);
            let a = w.wrote(off, MIB, &P, MIB);
            started.extend(a.start_writeback);
            settled.extend(a.settle);
            w.settled();
        }
        let fin = w.finish(MIB);
        assert_eq!(started[0], Range::new(0, P.window));
        assert_eq!(settled[0], Range::new(0, P.window));
        assert_eq!(started.len() as u64, windows);
        // Never more than `WRITEBACK_WINDOWS` windows outstanding between settles.
        for (s, d) in started.iter().skip(1).zip(settled.iter()) {
            assert!(s.end - d.start <= WRITEBACK_WINDOWS * P.window);
        }
        assert_eq!(fin.settle.unwrap().end, len);
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

    /// 63 MiB written 1.5 MiB at a time into a new file (dd bs=1536K): writes end off the
    /// window boundaries, so a window is partly written when the next one starts.
    fn copy_trace() -> Vec<(u64, u64)> {
        copy_trace_of(42)
    }

    /// `writes` writes of 1.5 MiB, as `copy_trace`.
    fn copy_trace_of(writes: u64) -> Vec<(u64, u64)> {
        (0..writes)
            .map(|i| (i * 3 * MIB / 2, 3 * MIB / 2))
            .collect()
    }

    #[test]
    fn a_windowed_writer_stays_bounded_and_leaves_nothing_cached() {
        let mut cache = WriteCache::new(64 * MIB);
        let run = run_writes(&mut cache, &copy_trace(), &P, MIB);
        // The windows under writeback, the one being written, and the write in flight.
        let bound = (WRITEBACK_WINDOWS + 1) * P.window + 2 * MIB;
        assert!(
            run.peak_resident * PAGE <= bound,
            "peak {} MiB",
            run.peak_resident * PAGE / MIB
        );
        assert_eq!(cache.resident(Range::new(0, 64 * MIB)), 0);
    }

    /// The watcher only polls its settles (nothing waits on them), so a second window under
    /// writeback buys the disk nothing there: with one, a window less stays cached.
    #[test]
    fn with_one_window_under_writeback_one_window_less_stays() {
        let p = P.with_writeback_windows(1);
        let mut cache = WriteCache::new(64 * MIB);
        let run = run_writes(&mut cache, &copy_trace(), &p, MIB);
        let bound = 2 * p.window + 2 * MIB;
        assert!(
            run.peak_resident * PAGE <= bound,
            "peak {} MiB",
            run.peak_resident * PAGE / MIB
        );
        assert_eq!(run.settled_unclean, 0);
        assert_eq!(run.dirty_dropped, 0);
        assert_eq!(cache.resident(Range::new(0, 64 * MIB)), 0);
    }

    #[test]
    fn a_window_is_dropped_only_once_clean() {
        // A disk that completes writeback only when waited on: every settled window must
        // have had its writeback started, so that waiting finds it clean, and no drop ever
        // meets a dirty page (DONTNEED would start writeback on it in the caller's thread).
        // 126 MiB: enough windows that several settle while the copy runs, not only at its end.
        let mut cache = WriteCache::new(128 * MIB);
        let run = run_writes(&mut cache, &copy_trace_of(84), &P, MIB);
        assert!(run.settles > 4, "{} settles", run.settles);
        assert_eq!(run.settled_unclean, 0);
        assert_eq!(run.dirty_dropped, 0);
    }

    #[test]
    fn pages_cached_before_a_rewrite_survive_it() {
        let mut cache = WriteCache::new(64 * MIB);
        let warm = Range::new(20 * MIB, 28 * MIB);
        cache.warm(warm);
        run_writes(&mut cache, &copy_trace(), &P, MIB);
        assert_eq!(
            cache.resident(warm),
            warm.len() / PAGE,
            "the warm range stays"
        );
        assert_eq!(cache.resident(Range::new(0, 20 * MIB)), 0);
        assert_eq!(cache.resident(Range::new(32 * MIB, 64 * MIB)), 0);
    }

    #[test]
    fn a_short_write_stream_is_left_to_the_kernel() {
        let mut cache = WriteCache::new(MIB);
        let run = run_writes(
            &mut cache,
            &[(0, 256 * 1024), (256 * 1024, 256 * 1024)],
            &P,
            MIB,
        );
        assert_eq!(run.settles, 0);
        assert_eq!(
            cache.resident(Range::new(0, 512 * 1024)),
            128,
            "left dirty, as without us"
        );
    }
}
