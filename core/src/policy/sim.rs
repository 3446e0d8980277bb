//! The page-cache model the policy's tests run their traces against: which 4 KiB pages of
//! one file are resident, with the kernel's readahead and the policy's drops applied to it.

use super::*;

/// Parameters for the traces: an 8 MiB window, no prefetch.
pub const P: Params = Params {
    window: 8 * MIB,
    prefetch: 0,
    extra_lookahead: 0,
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
    pub fn bits(&self, block: u64) -> u64 {
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
