//! In-kernel copies. `cp` asks copy_file_range for the whole file in one call, which would
//! pass through the page cache before the shim saw anything: the length is clamped to one
//! window (a short count is legal; callers loop) so drop-behind runs between calls.

use super::enosys;
use crate::engine;
use crate::real;
use libc::{c_int, c_uint, loff_t, off_t, size_t, ssize_t};

/// The offset an optional pointer designates, or `None` for "the file position".
fn at(p: *const i64) -> Option<u64> {
    // SAFETY: the caller's pointer, which the real call reads as well.
    (!p.is_null())
        .then(|| unsafe { *p })
        .and_then(|o| u64::try_from(o).ok())
}

fn report(
    fd_in: c_int,
    fd_out: c_int,
    rt: engine::ReadTicket,
    wt: engine::WriteTicket,
    asked: usize,
    ret: ssize_t,
) -> ssize_t {
    engine::after_read(fd_in, rt, asked, ret);
    engine::after_write(fd_out, wt, ret);
    ret
}

/// Tickets for the source and destination; the copy itself is never read uncached.
fn tickets(
    fd_in: c_int,
    off_in: Option<u64>,
    fd_out: c_int,
    off_out: Option<u64>,
) -> (engine::ReadTicket, engine::WriteTicket) {
    let mut rt = engine::before_read(fd_in, off_in);
    rt.dontcache = false;
    (rt, engine::before_write(fd_out, off_out))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let len = engine::copy_len(fd_in, fd_out, len);
    let (rt, wt) = tickets(fd_in, at(off_in), fd_out, at(off_out));
    let ret = match real::COPY_FILE_RANGE.get() {
        Some(f) => unsafe { f(fd_in, off_in, fd_out, off_out, len, flags) },
        None => enosys(),
    };
    report(fd_in, fd_out, rt, wt, len, ret)
}

macro_rules! sendfile_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd_out: c_int,
            fd_in: c_int,
            off: *mut off_t,
            count: size_t,
        ) -> ssize_t {
            let count = engine::copy_len(fd_in, fd_out, count);
            let (rt, wt) = tickets(fd_in, at(off), fd_out, None);
            let ret = match real::$real.get() {
                Some(f) => unsafe { f(fd_out, fd_in, off, count) },
                None => enosys(),
            };
            report(fd_in, fd_out, rt, wt, count, ret)
        }
    };
}
sendfile_hook!(sendfile, SENDFILE);
sendfile_hook!(sendfile64, SENDFILE64);

/// splice: one end is a pipe, whose capacity already bounds each call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn splice(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let (rt, wt) = tickets(fd_in, at(off_in), fd_out, at(off_out));
    let ret = match real::SPLICE.get() {
        Some(f) => unsafe { f(fd_in, off_in, fd_out, off_out, len, flags) },
        None => enosys(),
    };
    report(fd_in, fd_out, rt, wt, len, ret)
}
