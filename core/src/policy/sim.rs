//! The page-cache model the policy's tests run their traces against: which 4 KiB pages of
//! one file are resident, with the kernel's readahead and the policy's drops applied to it.

use super::*;

/// Parameters for the traces: an 8 MiB window, no prefetch.
pub const P: Params = Params {
    window: 8 * MIB,
    prefetch: 0,
    extra_lookahead: 0,
    writeback_windows: WRITEBACK_WINDOWS,
};

/// A model of the page cache for traces: which 4 KiB pages are resident.
pub struct Cache {
    resident: Vec<bool>,
}

impl Cache {
    pub fn new(size: u64) -> Cache {
        Cache {
            resident: vec![false; (size / PAGE) as usize],
        }
    }
    /// The residency question the proof asks (cachestat's answer, in pages).
    pub fn cached_pages(&self, off: u64, len: u64) -> Option<u64> {
        let end = ((off.saturating_add(len)).div_ceil(PAGE) as usize).min(self.resident.len());
        let start = ((off / PAGE) as usize).min(end);
        Some(self.resident[start..end].iter().filter(|&&x| x).count() as u64)
    }
    pub fn touch(&mut self, r: Range) {
        for p in r.start / PAGE..r.end.div_ceil(PAGE) {
            if let Some(x) = self.resident.get_mut(p as usize) {
                *x = true;
            }
        }
    }
    pub fn drop(&mut self, r: Range) {
        for p in r.start.div_ceil(PAGE)..r.end / PAGE {
            if let Some(x) = self.resident.get_mut(p as usize) {
                *x = false;
            }
        }
    }
    pub fn count(&self, r: Range) -> usize {
        (r.start / PAGE..r.end / PAGE)
            .filter(|&p| self.resident[p as usize])
            .count()
    }
}

/// Runs a read trace against the model, with kernel readahead of `ra` bytes ahead of each
/// read. Returns (peak resident pages, drops issued).
pub fn run_reads(cache: &mut Cache, size: u64, reads: &[(u64, u64)], ra: u64) -> (usize, usize) {
    let (peak, drops, _) = run_reads_with(cache, size, reads, ra, &P);
    (peak, drops)
}

/// `run_reads` with parameters; prefetches touch the cache and must lie inside what was
/// proven when they were issued. Also returns the prefetched ranges.
pub fn run_reads_with(
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
            s.proof.snapshot(r, |o, l| cache.cached_pages(o, l));
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
    if let Some(c) = s.finish() {
        for run in c.proof.owned_runs(c.range).collect::<Vec<_>>() {
            cache.drop(run);
        }
    }
    (peak, drops, prefetched)
}

pub fn sequential(size: u64, chunk: u64) -> Vec<(u64, u64)> {
    (0..size.div_ceil(chunk))
        .map(|i| (i * chunk, chunk))
        .collect()
}

/// One read through plan and consumed, every snapshot finding the file cold.
pub fn cold_read(s: &mut ReadStream, off: u64, len: u64, p: &Params) -> ReadActions {
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

/// A page of a written file, as the page cache holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Absent,
    Dirty,
    Writeback,
    Clean,
}

/// The page cache of one file being written: a disk that completes writeback only when
/// someone waits for it (the slowest disk the policy must still be right on).
pub struct WriteCache {
    pages: Vec<Page>,
}

impl WriteCache {
    pub fn new(size: u64) -> WriteCache {
        WriteCache {
            pages: vec![Page::Absent; (size / PAGE) as usize],
        }
    }
    fn span(&mut self, r: Range) -> &mut [Page] {
        let end = (r.end.div_ceil(PAGE) as usize).min(self.pages.len());
        let start = ((r.start / PAGE) as usize).min(end);
        &mut self.pages[start..end]
    }
    /// Someone else read these pages before the stream came near: clean and cached.
    pub fn warm(&mut self, r: Range) {
        self.span(r).iter_mut().for_each(|p| *p = Page::Clean);
    }
    pub fn write(&mut self, r: Range) {
        self.span(r).iter_mut().for_each(|p| *p = Page::Dirty);
    }
    /// sync_file_range(WRITE).
    pub fn start_writeback(&mut self, r: Range) {
        for p in self.span(r) {
            if *p == Page::Dirty {
                *p = Page::Writeback;
            }
        }
    }
    /// Waiting for the range: writeback under way completes; dirty pages stay dirty.
    /// True when the range is clean.
    pub fn wait_clean(&mut self, r: Range) -> bool {
        let mut clean = true;
        for p in self.span(r) {
            match *p {
                Page::Writeback => *p = Page::Clean,
                Page::Dirty => clean = false,
                _ => {}
            }
        }
        clean
    }
    /// fadvise(DONTNEED) of whole pages: only clean ones go. Returns the dirty pages met.
    pub fn dontneed(&mut self, r: Range) -> u64 {
        let inner = Range::new(r.start.div_ceil(PAGE) * PAGE, r.end / PAGE * PAGE);
        let mut dirty = 0;
        for p in self.span(inner) {
            match *p {
                Page::Clean => *p = Page::Absent,
                Page::Dirty | Page::Writeback => dirty += 1,
                Page::Absent => {}
            }
        }
        dirty
    }
    pub fn resident(&self, r: Range) -> u64 {
        let end = ((r.end / PAGE) as usize).min(self.pages.len());
        let start = ((r.start / PAGE) as usize).min(end);
        self.pages[start..end]
            .iter()
            .filter(|&&p| p != Page::Absent)
            .count() as u64
    }
    fn cached_pages(&self, off: u64, len: u64) -> Option<u64> {
        Some(self.resident(Range::new(off, off.saturating_add(len))))
    }
}

/// What a write trace did to the model.
#[derive(Debug, Default)]
pub struct WriteRun {
    pub peak_resident: u64,
    pub settles: usize,
    /// Settled windows that were not clean when waited for.
    pub settled_unclean: usize,
    /// Dirty or under-writeback pages a drop met.
    pub dirty_dropped: u64,
}

/// Runs a write trace through a `WriteStream` as the engine does: the snapshot before the
/// first write, writeback started, settled windows waited clean and their proven chunks
/// dropped, the rest at close.
pub fn run_writes(
    cache: &mut WriteCache,
    writes: &[(u64, u64)],
    p: &Params,
    min_size: u64,
) -> WriteRun {
    let mut w = WriteStream::default();
    let mut run = WriteRun::default();
    let perform =
        |cache: &mut WriteCache, w: &mut WriteStream, act: WriteActions, run: &mut WriteRun| {
            if let Some(r) = act.snapshot {
                w.proof.snapshot(r, |o, l| cache.cached_pages(o, l));
            }
            if let Some(r) = act.start_writeback {
                cache.start_writeback(r);
            }
            if let Some(r) = act.settle {
                run.settles += 1;
                if !cache.wait_clean(r) {
                    run.settled_unclean += 1;
                }
                for owned in w.proof.owned_runs(r).collect::<Vec<_>>() {
                    run.dirty_dropped += cache.dontneed(owned);
                }
                w.settled();
            }
        };
    for &(off, n) in writes {
        if let Some(r) = w.plan(off, p) {
            w.proof.snapshot(r, |o, l| cache.cached_pages(o, l));
        }
        cache.write(Range::new(off, off + n));
        let act = w.wrote(off, n, p, min_size);
        perform(cache, &mut w, act, &mut run);
        run.peak_resident = run
            .peak_resident
            .max(cache.resident(Range::new(0, u64::MAX / 2)));
    }
    let act = w.finish(min_size);
    perform(cache, &mut w, act, &mut run);
    run
}
