//! File mappings: big read mappings of regular files are handed to the mapping watcher
//! (`mapwatch`), and taken back from it before the program changes them.

use super::files::excluded;
use super::{contained, register_report};
use crate::{entry, sys};

/// After a successful mmap: big read-mapped regular files are watched (see `mapwatch`).
pub fn mapped(addr: usize, len: usize, prot: i32, flags: i32, fd: i32, off: i64) {
    // Anonymous memory (allocators map it all the time) is turned away before anything else.
    if fd < 0 || off < 0 || flags & libc::MAP_ANONYMOUS != 0 || prot & libc::PROT_READ == 0 {
        return;
    }
    contained(|eng| {
        if !eng.cfg.mmap || (len as u64) < eng.cfg.min_size.max(1) {
            return;
        }
        let Ok(id) = sys::file::identify(fd) else {
            return;
        };
        if !id.regular() || id.size < eng.cfg.min_size.max(1) || id.size <= off as u64 {
            return;
        }
        if excluded(eng, fd) {
            return;
        }
        let m = crate::mapwatch::NewMapping {
            addr,
            len,
            file_off: off as u64,
            fd,
            file_size: id.size,
            dev: id.dev,
            ino: id.ino,
            writable_private: flags & libc::MAP_SHARED == 0 && prot & libc::PROT_WRITE != 0,
        };
        if crate::mapwatch::track(m, eng.params.with_prefetch(eng.cfg.readahead)) {
            register_report();
        }
    })
}

/// Before a call that unmaps or replaces `[addr, addr+len)`, or gives it the program's own
/// readahead hint: the watcher lets go of mappings there. Hand the result to `unmapped`.
/// Works even once the shim is disabled: slots still watched must never be acted on
/// after their range changed.
pub fn unmapping(addr: usize, len: usize, mine: u64) -> u64 {
    if crate::mapwatch::stopped() {
        return 0;
    }
    entry::inside(0, || crate::mapwatch::take(addr, len, mine))
}

/// What the mappings taken by `unmapping` brought in, once the program's call is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pages {
    /// Dropped: the mapping is gone (munmap, mremap, MAP_FIXED over it).
    Drop,
    /// Left as they are: the program took over with its own readahead hint.
    Keep,
}

/// What the program's call did to the mappings `unmapping` took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// Unmapped, remapped, or handed to the program's own hints: the watcher lets go.
    Gone,
    /// The call failed and left them as they were: watched again.
    Unchanged,
}

impl Mapping {
    pub fn gone_if(succeeded: bool) -> Mapping {
        if succeeded {
            Mapping::Gone
        } else {
            Mapping::Unchanged
        }
    }
}

/// After that call.
pub fn unmapped(taken: u64, mapping: Mapping, pages: Pages) {
    if taken == 0 {
        return;
    }
    entry::inside((), || {
        let drop_pages = pages == Pages::Drop && !crate::mapwatch::stopped();
        crate::mapwatch::release(taken, mapping == Mapping::Gone, drop_pages)
    })
}
