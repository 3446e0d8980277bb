//! write and its relatives: reported to the engine, which bounds a streaming writer's dirty
//! and cached pages with windowed writeback. The write itself is never altered.

use crate::engine::{self, WriteTicket};
use libc::{c_int, c_void, iovec, off_t, size_t, ssize_t};

fn finish(fd: c_int, t: WriteTicket, ret: ssize_t) -> ssize_t {
    engine::after_write(fd, t, ret);
    ret
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    let t = engine::before_write(fd, None);
    let ret = call_real!(WRITE(fd, buf, n) or syscall(libc::SYS_write, fd, buf, n));
    finish(fd, t, ret)
}

macro_rules! pwrite_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *const c_void,
            n: size_t,
            off: off_t,
        ) -> ssize_t {
            let t = engine::before_write(fd, u64::try_from(off).ok());
            let ret = call_real!($real(fd, buf, n, off) or enosys);
            finish(fd, t, ret)
        }
    };
}
pwrite_hook!(pwrite, PWRITE);
pwrite_hook!(pwrite64, PWRITE64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    let t = engine::before_write(fd, None);
    let ret = call_real!(WRITEV(fd, iov, cnt) or enosys);
    finish(fd, t, ret)
}

macro_rules! pwritev_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const iovec,
            cnt: c_int,
            off: off_t,
        ) -> ssize_t {
            let t = engine::before_write(fd, u64::try_from(off).ok());
            let ret = call_real!($real(fd, iov, cnt, off) or enosys);
            finish(fd, t, ret)
        }
    };
}
pwritev_hook!(pwritev, PWRITEV);
pwritev_hook!(pwritev64, PWRITEV64);

macro_rules! pwritev2_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const iovec,
            cnt: c_int,
            off: off_t,
            flags: c_int,
        ) -> ssize_t {
            // offset -1: at the file position (RWF_APPEND: at the end; write_position knows).
            let at = if flags & libc::RWF_APPEND != 0 {
                None
            } else {
                u64::try_from(off).ok()
            };
            let t = engine::before_write(fd, at);
            let ret = call_real!($real(fd, iov, cnt, off, flags) or enosys);
            finish(fd, t, ret)
        }
    };
}
pwritev2_hook!(pwritev2, PWRITEV2);
pwritev2_hook!(pwritev64v2, PWRITEV64V2);

macro_rules! ftruncate_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, len: off_t) -> c_int {
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
