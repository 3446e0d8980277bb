//! File mappings: a sampled mapping's mapped run from the frontier is fed to a read stream
//! as if it were reads; growth the frontier does not explain is located and classified.

use super::Params;
use super::range::Range;
use super::read::{Consumed, Pattern, ReadActions, ReadStream};
use crate::units::MIB;

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

    /// At munmap or exit: what the mapping brought in and no longer needs, with its proof.
    pub fn finish(&mut self) -> Option<Consumed> {
        if self.class == MapClass::Random {
            return None;
        }
        self.read.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::PROOF_BLOCK;
    use crate::policy::sim::*;
    use crate::units::GIB;

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
        assert!(scan.finish().is_none(), "random mappings are not dropped");
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
