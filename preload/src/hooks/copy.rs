//! In-kernel copies. `cp` asks copy_file_range for the whole file in one call, which would
//! pass through the page cache before the shim saw anything: when the destination is a
//! managed file the length is clamped to one window (a short count is legal, and callers
//! asking for more than is left must loop to see the end) so drop-behind runs between calls.
//! Copies to sockets and pipes keep their length.

use crate::engine::{self, ReadTicket, WriteTicket};
use crate::sys;
use libc::{c_int, c_uint, loff_t, off_t, size_t, ssize_t};

/// Where a copy reads or writes: the file position, an explicit offset, or unknown (an
/// offset pointer we could not read: the call is then left entirely alone).
#[derive(Clone, Copy)]
enum At {
    Position,
    Offset(u64),
    Unknown,
}

/// Reads an optional offset pointer without trusting it: a bad pointer must give the
/// program its EFAULT from the kernel, not a crash in the shim.
fn at(fd: c_int, p: *const i64) -> At {
    if p.is_null() {
        return At::Position;
    }
    if !engine::may_manage(fd) {
        return At::Unknown;
    }
    match sys::mem::peek_i64(p) {
        Some(o) if o >= 0 => At::Offset(o as u64),
        _ => At::Unknown,
    }
}

/// Tickets for the source and destination; copies are never read uncached.
fn tickets(fd_in: c_int, at_in: At, fd_out: c_int, at_out: At) -> (ReadTicket, WriteTicket) {
    let mut rt = match at_in {
        At::Position => engine::before_read(fd_in, None, None),
        At::Offset(o) => engine::before_read(fd_in, Some(o), None),
        At::Unknown => ReadTicket::default(),
    };
    rt.dontcache = false;
    let wt = match at_out {
        At::Position => engine::before_write(fd_out, None),
        At::Offset(o) => engine::before_write(fd_out, Some(o)),
        At::Unknown => WriteTicket::default(),
    };
    (rt, wt)
}

fn report(
    fd_in: c_int,
    fd_out: c_int,
    rt: ReadTicket,
    wt: WriteTicket,
    asked: usize,
    ret: ssize_t,
) -> ssize_t {
    engine::after_read(fd_in, rt, asked, ret);
    engine::after_write(fd_out, wt, ret);
    ret
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let (a_in, a_out) = (at(fd_in, off_in), at(fd_out, off_out));
    let len = if matches!(a_in, At::Unknown) || matches!(a_out, At::Unknown) {
        len
    } else {
        engine::copy_len(fd_in, fd_out, len)
    };
    let (rt, wt) = tickets(fd_in, a_in, fd_out, a_out);
    let ret = call_real!(COPY_FILE_RANGE(fd_in, off_in, fd_out, off_out, len, flags) or syscall(libc::SYS_copy_file_range, fd_in, off_in, fd_out, off_out, len, flags));
    report(fd_in, fd_out, rt, wt, len, ret)
}

macro_rules! sendfile_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            fd_out: c_int,
            fd_in: c_int,
            off: *mut off_t,
            count: size_t,
        ) -> ssize_t {
            let a_in = at(fd_in, off);
            let count = if matches!(a_in, At::Unknown) {
                count
            } else {
                engine::copy_len(fd_in, fd_out, count)
            };
            let (rt, wt) = tickets(fd_in, a_in, fd_out, At::Position);
            let ret = call_real!($real(fd_out, fd_in, off, count) or syscall(libc::SYS_sendfile, fd_out, fd_in, off, count));
            report(fd_in, fd_out, rt, wt, count, ret)
        }
    };
}
sendfile_hook!(sendfile, SENDFILE);
sendfile_hook!(sendfile64, SENDFILE64);

/// splice: one end is a pipe, whose capacity already bounds each call.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn splice(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let (rt, wt) = tickets(fd_in, at(fd_in, off_in), fd_out, at(fd_out, off_out));
    let ret = call_real!(SPLICE(fd_in, off_in, fd_out, off_out, len, flags) or syscall(libc::SYS_splice, fd_in, off_in, fd_out, off_out, len, flags));
    report(fd_in, fd_out, rt, wt, len, ret)
}
