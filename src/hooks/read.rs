//! read and its relatives. A sequential stream's reads become preadv2(RWF_DONTCACHE) where
//! the filesystem supports it: same bytes, same file position, same errors.

use super::enosys;
use crate::engine::{self, ReadTicket};
use crate::{effects, real};
use libc::{c_int, c_void, iovec, off_t, size_t, ssize_t};

/// Bytes asked for by an iovec array (for end-of-file detection only).
fn iov_len(iov: *const iovec, cnt: c_int) -> usize {
    if iov.is_null() || cnt <= 0 || cnt > libc::UIO_MAXIOV {
        return 0;
    }
    // SAFETY: the caller's array of `cnt` iovecs, which the real call reads too.
    unsafe { std::slice::from_raw_parts(iov, cnt as usize) }
        .iter()
        .fold(0usize, |a, v| a.saturating_add(v.iov_len))
}

/// The uncached read. If the kernel refuses RWF_DONTCACHE after all (another filesystem
/// behind a bind mount, say), the read happens the ordinary way.
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
    let r = effects::read_dontcache(preadv2, fd, iov, cnt, off, flags);
    if r < 0 && crate::residency::errno() == libc::EOPNOTSUPP {
        engine::dontcache_refused(fd);
        return plain();
    }
    r
}

fn finish(fd: c_int, t: ReadTicket, asked: usize, ret: ssize_t) -> ssize_t {
    engine::after_read(fd, t, asked, ret);
    ret
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let t = engine::before_read(fd, None);
    let plain = || match real::READ.get() {
        Some(f) => unsafe { f(fd, buf, n) },
        // SAFETY: raw read into the caller's buffer.
        None => unsafe { libc::syscall(libc::SYS_read, fd, buf, n) as ssize_t },
    };
    let ret = if t.dontcache {
        let iov = iovec {
            iov_base: buf,
            iov_len: n,
        };
        read_uncached(fd, &iov, 1, -1, 0, plain)
    } else {
        plain()
    };
    finish(fd, t, n, ret)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    buflen: size_t,
) -> ssize_t {
    let t = engine::before_read(fd, None);
    let plain = || match real::READ_CHK.get() {
        Some(f) => unsafe { f(fd, buf, n, buflen) },
        None => enosys(),
    };
    // An overflowing request goes to the real function, which reports it.
    let ret = if t.dontcache && n <= buflen {
        let iov = iovec {
            iov_base: buf,
            iov_len: n,
        };
        read_uncached(fd, &iov, 1, -1, 0, plain)
    } else {
        plain()
    };
    finish(fd, t, n, ret)
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
            let t = engine::before_read(fd, u64::try_from(off).ok());
            let plain = || match real::$real.get() {
                Some(f) => unsafe { f(fd, buf, n, off) },
                None => enosys(),
            };
            let ret = if t.dontcache && off >= 0 {
                let iov = iovec {
                    iov_base: buf,
                    iov_len: n,
                };
                read_uncached(fd, &iov, 1, off, 0, plain)
            } else {
                plain()
            };
            finish(fd, t, n, ret)
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
            let t = engine::before_read(fd, u64::try_from(off).ok());
            let plain = || match real::$real.get() {
                Some(f) => unsafe { f(fd, buf, n, off, buflen) },
                None => enosys(),
            };
            let ret = if t.dontcache && off >= 0 && n <= buflen {
                let iov = iovec {
                    iov_base: buf,
                    iov_len: n,
                };
                read_uncached(fd, &iov, 1, off, 0, plain)
            } else {
                plain()
            };
            finish(fd, t, n, ret)
        }
    };
}
pread_chk_hook!(__pread_chk, PREAD_CHK);
pread_chk_hook!(__pread64_chk, PREAD64_CHK);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let t = engine::before_read(fd, None);
    let plain = || match real::READV.get() {
        Some(f) => unsafe { f(fd, iov, cnt) },
        None => enosys(),
    };
    let ret = if t.dontcache {
        read_uncached(fd, iov, cnt, -1, 0, plain)
    } else {
        plain()
    };
    finish(fd, t, iov_len(iov, cnt), ret)
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
            let t = engine::before_read(fd, u64::try_from(off).ok());
            let plain = || match real::$real.get() {
                Some(f) => unsafe { f(fd, iov, cnt, off) },
                None => enosys(),
            };
            let ret = if t.dontcache && off >= 0 {
                read_uncached(fd, iov, cnt, off, 0, plain)
            } else {
                plain()
            };
            finish(fd, t, iov_len(iov, cnt), ret)
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
            let t = engine::before_read(fd, u64::try_from(off).ok());
            let plain = || match real::$real.get() {
                Some(f) => unsafe { f(fd, iov, cnt, off, flags) },
                None => enosys(),
            };
            let ret = if t.dontcache {
                read_uncached(fd, iov, cnt, off, flags, plain)
            } else {
                plain()
            };
            finish(fd, t, iov_len(iov, cnt), ret)
        }
    };
}
preadv2_hook!(preadv2, PREADV2);
preadv2_hook!(preadv64v2, PREADV64V2);
