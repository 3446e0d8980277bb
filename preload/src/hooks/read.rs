//! read and its relatives. A sequential stream's reads may become preadv2(RWF_DONTCACHE):
//! same bytes, same file position, same errors.

use crate::engine::{self, ReadTicket};
use crate::real;
use crate::sys::errno::{get as errno, set as set_errno};
use libc::{c_int, c_void, iovec, off_t, size_t, ssize_t};

/// read/pread check their count against the buffer before clamping it to MAX_RW_COUNT, and
/// preadv2's iovec import the other way round: only counts up to it behave the same.
const MAX_RW_COUNT: usize = 0x7fff_f000;

/// Bytes asked for by an iovec array (for end-of-file detection only). Only called after
/// the kernel accepted the array, so it is readable.
fn iov_len(iov: *const iovec, cnt: c_int) -> usize {
    if iov.is_null() || cnt <= 0 || cnt > libc::UIO_MAXIOV {
        return 0;
    }
    // SAFETY: the caller's array of `cnt` iovecs, which the kernel just read.
    unsafe { std::slice::from_raw_parts(iov, cnt as usize) }
        .iter()
        .fold(0usize, |a, v| a.saturating_add(v.iov_len))
}

/// The uncached read. If it fails for any reason but an interruption, the read is done the
/// ordinary way and that result (and errno) is what the program sees: the kernel may refuse
/// RWF_DONTCACHE after all (another filesystem behind a bind mount, a seccomp filter).
fn read_uncached(
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
    plain: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let Some(preadv2) = real::PREADV2.get() else {
        return plain();
    };
    let saved = errno();
    // SAFETY: the program's own buffers and arguments, unchanged but for the flag, which
    // changes what stays cached, never the bytes, the position or the errors but its own.
    let r = unsafe { preadv2(fd, iov, cnt, off, flags | libc::RWF_DONTCACHE) };
    if r >= 0 {
        return r;
    }
    let e = errno();
    if e == libc::EINTR || e == libc::EAGAIN {
        return r;
    }
    if flags == 0
        && matches!(
            e,
            libc::EOPNOTSUPP | libc::EPERM | libc::ENOSYS | libc::EACCES
        )
    {
        engine::dontcache_refused(fd);
    }
    set_errno(saved);
    plain()
}

/// The single-buffer reads, uncached when the ticket says so and the count allows.
fn read_one(
    t: ReadTicket,
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    off: off_t,
    plain: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let ret = if t.dontcache && n <= MAX_RW_COUNT {
        let iov = iovec {
            iov_base: buf,
            iov_len: n,
        };
        read_uncached(fd, &iov, 1, off, 0, plain)
    } else {
        plain()
    };
    engine::after_read(fd, t, n, ret);
    ret
}

fn read_vec(
    t: ReadTicket,
    fd: c_int,
    iov: *const iovec,
    cnt: c_int,
    off: off_t,
    flags: c_int,
    plain: impl FnOnce() -> ssize_t,
) -> ssize_t {
    let ret = if t.dontcache {
        read_uncached(fd, iov, cnt, off, flags, plain)
    } else {
        plain()
    };
    if t.tracked && ret >= 0 {
        engine::after_read(fd, t, iov_len(iov, cnt), ret);
    }
    ret
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let t = engine::before_read(fd, None);
    read_one(
        t,
        fd,
        buf,
        n,
        -1,
        || call_real!(READ(fd, buf, n) or syscall(libc::SYS_read, fd, buf, n)),
    )
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    // An overflowing request goes to the real function, which reports it.
    let t = if n <= buflen {
        engine::before_read(fd, None)
    } else {
        ReadTicket::default()
    };
    read_one(
        t,
        fd,
        buf,
        n,
        -1,
        || call_real!(READ_CHK(fd, buf, n, buflen) or enosys),
    )
}

macro_rules! pread_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *mut c_void,
            n: size_t,
            off: off_t,
        ) -> ssize_t {
            let t = if off >= 0 {
                engine::before_read(fd, Some(off as u64))
            } else {
                ReadTicket::default()
            };
            read_one(t, fd, buf, n, off, || call_real!($real(fd, buf, n, off) or syscall(libc::SYS_pread64, fd, buf, n, off)))
        }
    };
}
pread_hook!(pread, PREAD);
pread_hook!(pread64, PREAD64);

macro_rules! pread_chk_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *mut c_void,
            n: size_t,
            off: off_t,
            buflen: size_t,
        ) -> ssize_t {
            let ok = off >= 0 && n <= buflen;
            let t = if ok {
                engine::before_read(fd, Some(off as u64))
            } else {
                ReadTicket::default()
            };
            read_one(t, fd, buf, n, off, || call_real!($real(fd, buf, n, off, buflen) or enosys))
        }
    };
}
pread_chk_hook!(__pread_chk, PREAD_CHK);
pread_chk_hook!(__pread64_chk, PREAD64_CHK);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let t = engine::before_read(fd, None);
    read_vec(
        t,
        fd,
        iov,
        cnt,
        -1,
        0,
        || call_real!(READV(fd, iov, cnt) or syscall(libc::SYS_readv, fd, iov, cnt)),
    )
}

macro_rules! preadv_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const iovec,
            cnt: c_int,
            off: off_t,
        ) -> ssize_t {
            let t = if off >= 0 {
                engine::before_read(fd, Some(off as u64))
            } else {
                ReadTicket::default()
            };
            read_vec(t, fd, iov, cnt, off, 0, || call_real!($real(fd, iov, cnt, off) or syscall(libc::SYS_preadv, fd, iov, cnt, off)))
        }
    };
}
preadv_hook!(preadv, PREADV);
preadv_hook!(preadv64, PREADV64);

macro_rules! preadv2_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const iovec,
            cnt: c_int,
            off: off_t,
            flags: c_int,
        ) -> ssize_t {
            // offset -1: at the file position.
            let at = if off == -1 {
                None
            } else {
                u64::try_from(off).ok()
            };
            let t = if off >= -1 {
                engine::before_read(fd, at)
            } else {
                ReadTicket::default()
            };
            read_vec(t, fd, iov, cnt, off, flags, || call_real!($real(fd, iov, cnt, off, flags) or enosys))
        }
    };
}
preadv2_hook!(preadv2, PREADV2);
preadv2_hook!(preadv64v2, PREADV64V2);
