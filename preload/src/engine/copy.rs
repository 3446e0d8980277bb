//! In-kernel copies: copy_file_range, sendfile and splice into a managed file are clamped
//! to one window, so the copy passes through the cache a window at a time.

use super::contained_or;
use super::files::{claim_tracked, may_manage};
use crate::stats;

/// The length to ask the kernel for: one window when the destination is a managed file (a
/// short count is legal, and a caller asking for more than is left must loop to see the
/// end), else the program's own. Copies into sockets and pipes keep their length.
pub fn copy_len(fd_in: i32, fd_out: i32, len: usize) -> usize {
    if !may_manage(fd_out) || !may_manage(fd_in) {
        return len;
    }
    contained_or(len, |eng| {
        let window = eng.params.window as usize;
        if len <= window {
            return len;
        }
        let min = eng.cfg.min_size;
        let reads_big = claim_tracked(eng, fd_in)
            .is_some_and(|mut c| c.file().readable && c.file().size_at_open >= min);
        let writes = claim_tracked(eng, fd_out).is_some_and(|mut c| c.file().writable);
        if reads_big && writes {
            stats::COPY_CLAMPS.add(1);
            window
        } else {
            len
        }
    })
}
