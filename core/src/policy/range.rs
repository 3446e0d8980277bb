//! Ranges and the residency proof: which chunks near a stream were uncached before the
//! stream came near them.
//!
//! The central rule is that a page is dropped only if a residency snapshot, taken *before*
//! the stream or its readahead could have touched it, showed it uncached: such a page was
//! brought in by this stream. Pages cached before belong to someone's working set and stay.

use super::Params;
use crate::units::MIB;

pub use crate::units::PAGE;

/// Residency is proven per block of `PROOF_BLOCK` bytes, at a resolution of 64 chunks.
pub const PROOF_BLOCK: u64 = 4 * MIB;
pub const PROOF_CHUNK: u64 = PROOF_BLOCK / 64;
/// Blocks held at once: covers the largest window twice (consumed, and ahead) plus lag
/// plus `READAHEAD_REACH`.
pub const PROOF_RING: u64 = 48;
/// Drop frontiers are aligned to this: the largest page-cache folio (a PMD, 2 MiB on
/// x86_64). fadvise(DONTNEED) skips a large folio that straddles either end of its range, so
/// a frontier in the middle of one would leave it cached for good (measured: 2 MiB of every
/// 8 MiB window stayed behind `cp` on ext4 before this).
pub const DROP_ALIGN: u64 = 2 * MIB;

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

/// Reads that cover `pieces` (device ranges, in any order): sorted, overlaps always joined
/// (no byte is asked for twice), and two pieces read as one where the hole between them is
/// at most `max_gap` bytes and the read stays within `max_len` (at least the piece itself).
/// Fewer, larger requests for a directory's scattered blocks: on a disk that charges each
/// request, as a spinning one does and the slow-disk fixture does, they cost one request
/// each, not one per piece.
pub fn coalesce(mut pieces: Vec<Range>, max_gap: u64, max_len: u64) -> Vec<Range> {
    pieces.retain(|r| !r.is_empty());
    pieces.sort_by_key(|r| r.start);
    let mut out: Vec<Range> = Vec::with_capacity(pieces.len());
    for r in pieces {
        match out.last_mut() {
            Some(last)
                if r.start < last.end
                    || (r.start <= last.end.saturating_add(max_gap)
                        && r.end.max(last.end) - last.start <= max_len.max(last.len())) =>
            {
                last.end = last.end.max(r.end);
            }
            _ => out.push(r),
        }
    }
    out
}

pub(crate) fn align_down(x: u64, a: u64) -> u64 {
    x - x % a
}

/// Which chunks near a stream were uncached before the stream came near them.
#[derive(Clone, Copy, Debug)]
pub struct Proof {
    /// Bit i of `ring[b % RING]` set: chunk i of block b was entirely uncached.
    ring: [u64; PROOF_RING as usize],
    /// Blocks `lo..hi` are proven.
    pub(crate) lo: u64,
    pub(crate) hi: u64,
}

impl Proof {
    /// Where the proven blocks end (bytes): nothing at or beyond is owned.
    pub fn proven_to(&self) -> u64 {
        self.hi * PROOF_BLOCK
    }

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

/// The residency of one proof block, from `cached(off, len)`: the cached pages of a byte
/// range, or `None` where residency can't be known. Bit i set when chunk i had no cached
/// page. One question for the common all-cold or all-cached block, per chunk otherwise.
pub fn uncached_chunks(block: u64, mut cached: impl FnMut(u64, u64) -> Option<u64>) -> u64 {
    let off = block * PROOF_BLOCK;
    match cached(off, PROOF_BLOCK) {
        Some(0) => return !0,
        Some(n) if n < PROOF_BLOCK / PAGE => {}
        _ => return 0,
    }
    let mut bits = 0u64;
    for c in 0..64 {
        match cached(off + c * PROOF_CHUNK, PROOF_CHUNK) {
            Some(0) => bits |= 1 << c,
            Some(_) => {}
            None => return 0,
        }
    }
    bits
}

impl Proof {
    /// Takes the residency snapshot of `r` (whole blocks) into the proof, asking
    /// `cached(off, len)` as `uncached_chunks` does: once for the whole range in the common
    /// all-cold case, per block otherwise. False when residency can't be known: then
    /// nothing in `r` is proven, and nothing there will ever be dropped.
    pub fn snapshot(&mut self, r: Range, mut cached: impl FnMut(u64, u64) -> Option<u64>) -> bool {
        let whole = cached(r.start, r.len());
        for block in r.start / PROOF_BLOCK..r.end / PROOF_BLOCK {
            let bits = match whole {
                Some(0) => !0,
                Some(_) => uncached_chunks(block, &mut cached),
                None => 0,
            };
            self.record(block, bits);
        }
        whole.is_some()
    }
}

impl Default for Proof {
    fn default() -> Self {
        Proof::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::sim::*;

    #[test]
    fn coalesce_joins_near_pieces_up_to_a_length() {
        let r = |s, e| Range::new(s, e);
        // Out of order, one overlap, a hole of 8 (joined), one of 9 (not).
        let got = coalesce(
            vec![r(30, 40), r(0, 10), r(5, 12), r(20, 30), r(49, 50)],
            8,
            100,
        );
        assert_eq!(got, vec![r(0, 40), r(49, 50)]);
        // The same with a hole allowed of 9: one read, unless that makes it too long.
        assert_eq!(coalesce(vec![r(0, 10), r(19, 30)], 9, 100), vec![r(0, 30)]);
        assert_eq!(
            coalesce(vec![r(0, 10), r(19, 30)], 9, 29),
            vec![r(0, 10), r(19, 30)]
        );
        // Overlapping pieces are joined even past the limit.
        assert_eq!(
            coalesce(vec![r(0, 80), r(60, 150)], 0, 100),
            vec![r(0, 150)]
        );
        // A piece longer than the limit stays whole; empty pieces go.
        assert_eq!(
            coalesce(vec![r(0, 500), r(500, 501), r(7, 7)], 0, 100),
            vec![r(0, 500), r(500, 501)]
        );
        assert!(coalesce(Vec::new(), 8, 100).is_empty());
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
}
