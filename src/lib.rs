//! dropbehind: an LD_PRELOAD library that keeps streaming programs from flooding the page
//! cache.
//!
//! Three layers, each in its own place:
//! - `hooks`: the exported symbols, thin (the only `#[no_mangle]` functions);
//! - `policy`: pure code from I/O events to actions, unit-tested with synthetic traces;
//! - `effects`: the page-cache syscalls (fadvise, preadv2, sync_file_range, cachestat).
//!
//! `engine` joins them; `fdtable` holds per-fd state; `prefetch` issues readahead for read
//! streams from a helper thread; `mapwatch` samples big file mappings and applies the same
//! policy to them; `dirprefetch` warms the inodes of big directories; `helper` starts their
//! threads; `config`, `stats` and `log` are what their names say.

pub mod config;
pub mod dirprefetch;
pub mod effects;
pub mod engine;
pub mod fdtable;
pub mod helper;
pub mod log;
pub mod mapwatch;
pub mod policy;
pub mod prefetch;
pub mod real;
pub mod residency;
pub mod stats;

// Not in the unit-test binary: its exported read/write would replace the test harness's own.
#[cfg(not(test))]
mod hooks;
