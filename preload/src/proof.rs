//! The residency proof, performed: the policy (`dropbehind_core::policy::Proof`) decides
//! what to ask and what may be dropped; the answers come from cachestat through `sys`.
//! Shared by the engine's streams and the mapping watcher.

use crate::policy::{Proof, Range};
use crate::{stats, sys};

/// Takes the residency snapshot `r` of `fd` into `proof` (see `Proof::snapshot`). False
/// when residency can't be known (no cachestat, or no write permission): then nothing is
/// proven and nothing will be dropped by fadvise.
pub fn snapshot(fd: i32, proof: &mut Proof, r: Range) -> bool {
    stats::SNAPSHOTS.add(1);
    proof.snapshot(r, |off, len| sys::cache::cached_pages(fd, off, len))
}

/// Drops the runs of `r` that `proof` owns. The caller has checked that `fd` still is the
/// file the proof is about. Returns the pages released.
pub fn drop_proven(fd: i32, proof: &Proof, r: Range) -> u64 {
    let mut released = 0;
    for run in proof.owned_runs(r) {
        released += drop_runs(fd, &[run]);
    }
    released
}

/// Drops `runs`, proven runs of a file taken from its proof earlier (see
/// `writeback::Job`). Returns the pages released.
pub fn drop_runs(fd: i32, runs: &[Range]) -> u64 {
    let mut released = 0;
    for run in runs {
        stats::DROP_CALLS.add(1);
        released += sys::cache::drop_range(fd, run.start, run.len());
    }
    stats::PAGES_RELEASED.add(released);
    released
}
