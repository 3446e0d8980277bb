//! read and its relatives. A sequential stream's reads may become preadv2(RWF_DONTCACHE):
//! same bytes, same file position, same errors.

use crate::engine::{self, ReadPath, ReadTicket};
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
#[inline(always)]
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
#[inline(always)]
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

#[inline(always)]
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

/// One read hook, in parts, so that the common cases cost the least: the exported body only
/// decides, with a few loads and no frame (`engine::read_path`), and tail-calls the real
/// function where the shim has nothing to do (a cached stream's hot path included, where
/// the count is an argument), `fast` for a cached stream's hot path where the count is in
/// an iovec array, `uncached` for an uncached stream's, or `full`, the engine's whole path.
/// - `= REAL or (FALLBACK)`: the real function and `call_real!`'s fallback;
/// - `through if`: calls the engine never sees (besides fds it does not manage);
/// - `at`: the offset read (`None`: the file position); `asked`: the bytes asked for, read
///   after the call; `known`: the same where it needs no memory of the program's (`None`
///   for an iovec array, which only the kernel may read first);
/// - `ticket t => ...`: the read as the ticket `t` says.
macro_rules! hook {
    (
        $name:ident($fd:ident: c_int $(, $a:ident: $t:ty)*) = $real:ident or ($($fb:tt)+);
        through if $through:expr;
        at $at:expr, asked $asked:expr, known $known:expr;
        ticket $tk:ident => $with_ticket:expr;
    ) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name($fd: c_int $(, $a: $t)*) -> ssize_t {
            real_calls!(($fd $(, $a: $t)*) -> ssize_t = $real or ($($fb)+));
            #[inline(always)]
            fn with_ticket($tk: ReadTicket, $fd: c_int $(, $a: $t)*) -> ssize_t {
                $with_ticket
            }
            // These three are, like the hook, `extern "C-unwind"` (see hooks/mod.rs), so that
            // the calls to them are tail calls.
            #[inline(never)]
            extern "C-unwind" fn full($fd: c_int $(, $a: $t)*) -> ssize_t {
                with_ticket(engine::before_read($fd, $at, $known), $fd $(, $a)*)
            }
            /// The hot path of an uncached stream (`off`: the ticket's): its read replaced.
            #[inline(never)]
            extern "C-unwind" fn uncached($fd: c_int $(, $a: $t)*, off: u64) -> ssize_t {
                with_ticket(ReadTicket::fast(off, true), $fd $(, $a)*)
            }
            /// The hot path of a vector read: the real call, then the stream's new position.
            #[inline(never)]
            extern "C-unwind" fn fast($fd: c_int $(, $a: $t)*, off: u64) -> ssize_t {
                let ret = call($fd $(, $a)*);
                engine::after_fast_read($fd, off, || $asked, ret);
                ret
            }
            if $through {
                return call($fd $(, $a)*);
            }
            match engine::read_path($fd, $at, $known) {
                ReadPath::Through => call($fd $(, $a)*),
                ReadPath::Fast(t) if !t.dontcache => fast($fd $(, $a)*, t.off()),
                ReadPath::Fast(t) => uncached($fd $(, $a)*, t.off()),
                ReadPath::Full => full($fd $(, $a)*),
            }
        }
    };
}

hook! {
    read(fd: c_int, buf: *mut c_void, n: size_t) = READ
        or (syscall(libc::SYS_read, fd, buf, n));
    through if false;
    at None, asked n, known Some(n);
    ticket t => read_one(t, fd, buf, n, -1, || call(fd, buf, n));
}

// An overflowing request goes to the real function, which reports it.
hook! {
    __read_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) = READ_CHK or (enosys);
    through if n > buflen;
    at None, asked n, known Some(n);
    ticket t => read_one(t, fd, buf, n, -1, || call(fd, buf, n, buflen));
}

macro_rules! pread_hook {
    ($name:ident, $real:ident) => {
        hook! {
            $name(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) = $real
                or (syscall(libc::SYS_pread64, fd, buf, n, off));
            through if off < 0;
            at Some(off as u64), asked n, known Some(n);
            ticket t => read_one(t, fd, buf, n, off, || call(fd, buf, n, off));
        }
    };
}
pread_hook!(pread, PREAD);
pread_hook!(pread64, PREAD64);

macro_rules! pread_chk_hook {
    ($name:ident, $real:ident) => {
        hook! {
            $name(fd: c_int, buf: *mut c_void, n: size_t, off: off_t, buflen: size_t) = $real
                or (enosys);
            through if off < 0 || n > buflen;
            at Some(off as u64), asked n, known Some(n);
            ticket t => read_one(t, fd, buf, n, off, || call(fd, buf, n, off, buflen));
        }
    };
}
pread_chk_hook!(__pread_chk, PREAD_CHK);
pread_chk_hook!(__pread64_chk, PREAD64_CHK);

hook! {
    readv(fd: c_int, iov: *const iovec, cnt: c_int) = READV
        or (syscall(libc::SYS_readv, fd, iov, cnt));
    through if false;
    at None, asked iov_len(iov, cnt), known None;
    ticket t => read_vec(t, fd, iov, cnt, -1, 0, || call(fd, iov, cnt));
}

macro_rules! preadv_hook {
    ($name:ident, $real:ident) => {
        hook! {
            $name(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) = $real
                or (syscall(libc::SYS_preadv, fd, iov, cnt, off));
            through if off < 0;
            at Some(off as u64), asked iov_len(iov, cnt), known None;
            ticket t => read_vec(t, fd, iov, cnt, off, 0, || call(fd, iov, cnt, off));
        }
    };
}
preadv_hook!(preadv, PREADV);
preadv_hook!(preadv64, PREADV64);

// offset -1: at the file position.
macro_rules! preadv2_hook {
    ($name:ident, $real:ident) => {
        hook! {
            $name(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) = $real
                or (enosys);
            through if off < -1;
            at if off == -1 { None } else { Some(off as u64) }, asked iov_len(iov, cnt), known None;
            ticket t => read_vec(t, fd, iov, cnt, off, flags, || call(fd, iov, cnt, off, flags));
        }
    };
}
preadv2_hook!(preadv2, PREADV2);
preadv2_hook!(preadv64v2, PREADV64V2);

/// posix_fadvise: a program that gives readahead advice of its own keeps it (the shim then
/// doubles no stream's readahead: `engine::read::deepen_readahead`).
macro_rules! fadvise_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int {
            engine::advised(advice);
            // posix_fadvise answers its error rather than setting errno.
            call_real!($real(fd, off, len, advice) or libc::ENOSYS)
        }
    };
}
fadvise_hook!(posix_fadvise, POSIX_FADVISE);
fadvise_hook!(posix_fadvise64, POSIX_FADVISE64);
