//! Policy: pure code that turns a stream of I/O events on one file descriptor into actions.
//!
//! No syscalls here. The engine feeds events (offset, length, result) and performs what comes
//! back: take a residency snapshot, drop a range, start writeback. Each concern has its own
//! module and tests; `sim` is the page-cache model the tests run their traces against.
//!
//! - `range`: byte ranges and the residency proof (what may ever be dropped);
//! - `read`: read streams (sequential or random, drop-behind, prefetch);
//! - `write`: write streams (windowed writeback);
//! - `map`: sampled file mappings, fed to a read stream;
//! - `tree`: trees of small files, one stream per process;
//! - `growth`: streams seen from outside only as growth of a file's cache (the watcher).

pub mod growth;
pub mod map;
pub mod range;
pub mod read;
#[cfg(test)]
mod sim;
pub mod tree;
pub mod write;

pub use growth::{BlockSample, GROWTH_BLOCK, Growth, GrowthActions};
pub use map::{MAP_GROWTH_LOOK, MAP_SPARSE_PERCENT, MapActions, MapClass, MapSample, MapScan};
pub use range::{DROP_ALIGN, PAGE, PROOF_BLOCK, PROOF_CHUNK, PROOF_RING, Proof, Range, coalesce};
pub use read::{
    Consumed, FastRead, Pattern, Prefetch, ReadActions, ReadPlan, ReadStream, read_continues,
    readahead_folio_max, uncached_read_fits,
};
pub use tree::{AtClose, Bulk, Streamed, TreeParams, TreeStream};
pub use write::{WRITEBACK_WINDOWS, WriteActions, WriteStream};

use crate::units::MIB;

/// How far kernel readahead can have fetched beyond a stream's last read: 8 MiB
/// read_ahead_kb doubled by FADV_SEQUENTIAL, plus margin. A stream's snapshot reaches one
/// window (its largest single read, for clamped copies) beyond that; if it fell short, the
/// stream's own readahead would look like someone else's cached pages and be kept (safe,
/// but not dropped: measured as 500 MiB left behind a 1 GiB `cp` with a too-short reach).
pub const READAHEAD_REACH: u64 = 32 * MIB;

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
    /// Windows of a write stream under writeback before the oldest is settled (see
    /// `WriteStream::wrote`): `WRITEBACK_WINDOWS`, or 1 where a settle is only polled.
    pub writeback_windows: u64,
}

impl Params {
    /// Windows are whole multiples of DROP_ALIGN, so that no window edge splits a folio.
    pub fn new(window: u64) -> Params {
        Params {
            window: window.max(1).next_multiple_of(DROP_ALIGN),
            prefetch: 0,
            extra_lookahead: 0,
            writeback_windows: WRITEBACK_WINDOWS,
        }
    }

    /// At least 1: the window whose writeback was just started is never settled with it.
    pub fn with_writeback_windows(self, windows: u64) -> Params {
        Params {
            writeback_windows: windows.max(1),
            ..self
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
