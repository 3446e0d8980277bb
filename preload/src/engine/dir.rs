//! Directories: a big cold directory's inodes are prefetched (see `dirprefetch`).

use super::{DISABLED, config, register_report};
use crate::entry;
use std::sync::atomic::Ordering;

/// After the program opened a directory stream on `fd`.
pub fn directory_opened(fd: i32) {
    let Some(cfg) = config() else { return };
    if !cfg.dir.enabled || DISABLED.load(Ordering::Relaxed) {
        return;
    }
    entry::inside((), || {
        if crate::dirprefetch::opened(fd, &cfg.dir) {
            register_report();
        }
    })
}

/// Before the program closes the directory stream on `fd`.
pub fn directory_closing(fd: i32) {
    entry::inside((), || crate::dirprefetch::closing(fd))
}

/// Whether what the program does with a directory's entries through its fd may matter to a
/// prefetch (one atomic load: one waits for the program's first use of a file).
#[inline]
pub fn watching_entries() -> bool {
    crate::dirprefetch::watching_entries()
}

/// After the program statted, opened or removed an entry other than a directory through the
/// directory fd `dirfd` (fstatat, statx, openat, unlinkat).
pub fn file_used(dirfd: i32) {
    entry::inside((), || crate::dirprefetch::file_used(dirfd))
}
