//! write and its relatives: reported to the engine, which bounds a streaming writer's dirty
//! and cached pages with windowed writeback. The write itself is never altered.

use crate::engine::{self, WritePath};
use libc::{c_int, c_void, iovec, off_t, size_t, ssize_t};

/// One write hook, in parts as the read hooks are (see hooks/read.rs): the exported body
/// only decides (`engine::write_path`), and tail-calls the real function where the shim has
/// nothing to do, `fast` for a stream's hot path or `full`, the engine's whole path. `at`:
/// where the write lands (`None`: at the file position, or the end).
macro_rules! hook {
    (
        $name:ident($fd:ident: c_int $(, $a:ident: $t:ty)*) = $real:ident or ($($fb:tt)+);
        at $at:expr;
    ) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name($fd: c_int $(, $a: $t)*) -> ssize_t {
            real_calls!(($fd $(, $a: $t)*) -> ssize_t = $real or ($($fb)+));
            // These two are, like the hook, `extern "C-unwind"` (see hooks/mod.rs), so that
            // the calls to them are tail calls.
            #[inline(never)]
            extern "C-unwind" fn full($fd: c_int $(, $a: $t)*) -> ssize_t {
                let t = engine::before_write($fd, $at);
                let ret = call($fd $(, $a)*);
                engine::after_write($fd, t, ret);
                ret
            }
            /// The hot path: the real call, then the stream's new position.
            #[inline(never)]
            extern "C-unwind" fn fast($fd: c_int $(, $a: $t)*, off: u64) -> ssize_t {
                let ret = call($fd $(, $a)*);
                engine::after_fast_write($fd, off, ret);
                ret
            }
            match engine::write_path($fd, $at) {
                WritePath::Through => call($fd $(, $a)*),
                WritePath::Fast(o) => fast($fd $(, $a)*, o),
                WritePath::Full => full($fd $(, $a)*),
            }
        }
    };
}

hook! {
    write(fd: c_int, buf: *const c_void, n: size_t) = WRITE
        or (syscall(libc::SYS_write, fd, buf, n));
    at None;
}

macro_rules! pwrite_hook {
    ($name:ident, $real:ident) => {
        hook! {
            $name(fd: c_int, buf: *const c_void, n: size_t, off: off_t) = $real or (enosys);
            at u64::try_from(off).ok();
        }
    };
}
pwrite_hook!(pwrite, PWRITE);
pwrite_hook!(pwrite64, PWRITE64);

hook! {
    writev(fd: c_int, iov: *const iovec, cnt: c_int) = WRITEV or (enosys);
    at None;
}

macro_rules! pwritev_hook {
    ($name:ident, $real:ident) => {
        hook! {
            $name(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t) = $real or (enosys);
            at u64::try_from(off).ok();
        }
    };
}
pwritev_hook!(pwritev, PWRITEV);
pwritev_hook!(pwritev64, PWRITEV64);

// offset -1: at the file position (RWF_APPEND: at the end; write_position knows).
macro_rules! pwritev2_hook {
    ($name:ident, $real:ident) => {
        hook! {
            $name(fd: c_int, iov: *const iovec, cnt: c_int, off: off_t, flags: c_int) = $real
                or (enosys);
            at if flags & libc::RWF_APPEND != 0 { None } else { u64::try_from(off).ok() };
        }
    };
}
pwritev2_hook!(pwritev2, PWRITEV2);
pwritev2_hook!(pwritev64v2, PWRITEV64V2);

macro_rules! ftruncate_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(fd: c_int, len: off_t) -> c_int {
            let ret = call_real!($real(fd, len) or enosys);
            if ret == 0 {
                engine::truncating(fd);
            }
            ret
        }
    };
}
ftruncate_hook!(ftruncate, FTRUNCATE);
ftruncate_hook!(ftruncate64, FTRUNCATE64);
