//! stdio: glibc reads and writes through hidden symbols, so the shim samples the kernel
//! file position every STDIO_SAMPLE bytes the program moves, and at EOF and fclose.

use super::Engine;
use super::close::closing;
use super::files::{Scope, drop_owned, snapshot, with_file};
use super::read::read_event;
use super::write::write_event;
use super::write::write_position;
use crate::fdtable::FileState;
use crate::policy::Pattern;
use crate::sys;

const STDIO_SAMPLE: u64 = 256 * 1024;

/// Before a stdio read: a new stream takes its snapshot here, before glibc's first refill.
pub fn stdio_before_read(fd: i32) {
    with_file(fd, Scope::Unexamined, |eng, c| {
        let f = c.file();
        if !f.readable
            || f.size_at_open < eng.cfg.min_size.max(1)
            || f.read.pattern != Pattern::Fresh
        {
            return;
        }
        let off = sys::file::position(fd).unwrap_or(0);
        if let Some(r) = f.read.plan(off, &eng.params).snapshot {
            f.unprovable = !snapshot(fd, &mut f.read.proof, r);
        }
        // The stream starts here; samples of the position then extend it.
        f.read.consumed(off, 0, 0, &eng.params);
    })
}

/// After a stdio read call handed `n` bytes to the program (`eof`: it hit end of file).
pub fn stdio_after_read(fd: i32, n: u64, eof: bool) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        f.stdio_eof |= eof;
        if !f.readable || f.size_at_open < eng.cfg.min_size.max(1) {
            return;
        }
        f.stdio_pending += n;
        if f.stdio_pending < STDIO_SAMPLE && !eof {
            return;
        }
        f.stdio_pending = 0;
        stdio_sample_read(eng, fd, f, eof);
    })
}

pub(super) fn stdio_sample_read(eng: &Engine, fd: i32, f: &mut FileState, eof: bool) {
    let Ok(pos) = sys::file::position(fd) else {
        return;
    };
    let next = f.read.next;
    if pos < next {
        if let Some(r) = f.read.seeked(pos) {
            drop_owned(fd, f, &f.read.proof, r);
            f.read.dropped(r);
        }
        return;
    }
    read_event(eng, fd, f, next, pos - next, pos - next, false);
    if eof {
        read_event(eng, fd, f, pos, 0, 1, false);
    }
}

pub fn stdio_before_write(fd: i32) {
    with_file(fd, Scope::Unexamined, |eng, c| {
        let f = c.file();
        if f.writable && !f.write.started {
            let off = write_position(fd, f.append);
            if let Some(r) = f.write.plan(off, &eng.params) {
                snapshot(fd, &mut f.write.proof, r);
            }
        }
    })
}

pub fn stdio_after_write(fd: i32, n: u64) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        if !f.write.started {
            return;
        }
        f.stdio_pending += n;
        if f.stdio_pending < STDIO_SAMPLE {
            return;
        }
        f.stdio_pending = 0;
        stdio_sample_write(eng, fd, f);
    })
}

pub(super) fn stdio_sample_write(eng: &Engine, fd: i32, f: &mut FileState) {
    let Ok(pos) = sys::file::position(fd) else {
        return;
    };
    let next = f.write.next;
    if pos > next {
        write_event(eng, fd, f, next, pos - next);
    }
}

/// Before fclose: account for what stdio moved since the last sample, then close as usual.
pub fn stdio_closing(fd: i32) {
    with_file(fd, Scope::Tracked, |eng, c| {
        let f = c.file();
        if f.write.started {
            stdio_sample_write(eng, fd, f);
        } else if f.readable && f.read.pattern != Pattern::Fresh {
            stdio_sample_read(eng, fd, f, false);
        }
    });
    closing(fd);
}
