//! dropbehind's pure core: configuration and policy, shared by the preload library, the
//! launcher and the outside watcher. No syscalls and no unsafe code: everything here is
//! decided from events and answers that the caller measured (see `docs/ARCHITECTURE.md`).
#![forbid(unsafe_code)]

pub mod config;
pub mod ext4;
pub mod policy;
pub mod units;
