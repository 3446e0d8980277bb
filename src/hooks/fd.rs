//! open, close, dup and seek: fd lifetimes, so that a slot never outlives its file.

use super::enosys;
use crate::{engine, real};
use libc::{c_char, c_int, c_uint, mode_t, off_t};

/// Before the constructor resolved anything, or while it resolves: the raw syscall.
fn raw_openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    // SAFETY: arguments passed through unchanged.
    unsafe { libc::syscall(libc::SYS_openat, dirfd, path, flags, mode) as c_int }
}

fn opened(fd: c_int) -> c_int {
    if fd >= 0 {
        engine::forget(fd);
    }
    fd
}

macro_rules! open_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            let fd = match real::$real.get() {
                Some(f) => unsafe { f(path, flags, mode) },
                None => raw_openat(libc::AT_FDCWD, path, flags, mode),
            };
            opened(fd)
        }
    };
}
open_hook!(open, OPEN);
open_hook!(open64, OPEN64);

macro_rules! openat_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            dirfd: c_int,
            path: *const c_char,
            flags: c_int,
            mode: mode_t,
        ) -> c_int {
            let fd = match real::$real.get() {
                Some(f) => unsafe { f(dirfd, path, flags, mode) },
                None => raw_openat(dirfd, path, flags, mode),
            };
            opened(fd)
        }
    };
}
openat_hook!(openat, OPENAT);
openat_hook!(openat64, OPENAT64);

macro_rules! creat_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: mode_t) -> c_int {
            let fd = match real::$real.get() {
                Some(f) => unsafe { f(path, mode) },
                None => raw_openat(
                    libc::AT_FDCWD,
                    path,
                    libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                    mode,
                ),
            };
            opened(fd)
        }
    };
}
creat_hook!(creat, CREAT);
creat_hook!(creat64, CREAT64);

// Fortified opens: the real ones check that O_CREAT/O_TMPFILE came with a mode.
macro_rules! open2_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, flags: c_int) -> c_int {
            let fd = match real::$real.get() {
                Some(f) => unsafe { f(path, flags) },
                None => enosys(),
            };
            opened(fd)
        }
    };
}
open2_hook!(__open_2, OPEN_2);
open2_hook!(__open64_2, OPEN64_2);

macro_rules! openat2_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
            let fd = match real::$real.get() {
                Some(f) => unsafe { f(dirfd, path, flags) },
                None => enosys(),
            };
            opened(fd)
        }
    };
}
openat2_hook!(__openat_2, OPENAT_2);
openat2_hook!(__openat64_2, OPENAT64_2);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    engine::closing(fd);
    match real::CLOSE.get() {
        Some(f) => unsafe { f(fd) },
        // SAFETY: raw close of the caller's fd.
        None => unsafe { libc::syscall(libc::SYS_close, fd) as c_int },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        engine::closing_range(first, last);
    }
    match real::CLOSE_RANGE.get() {
        Some(f) => unsafe { f(first, last, flags) },
        // SAFETY: raw close_range with the caller's arguments.
        None => unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) as c_int },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn closefrom(lowfd: c_int) {
    // glibc treats a negative lowfd as 0.
    engine::closing_range(lowfd.max(0) as u32, u32::MAX);
    match real::CLOSEFROM.get() {
        Some(f) => unsafe { f(lowfd) },
        // SAFETY: raw close_range with the caller's bound.
        None => unsafe {
            libc::syscall(libc::SYS_close_range, lowfd.max(0) as u32, u32::MAX, 0);
        },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(old: c_int) -> c_int {
    let fd = match real::DUP.get() {
        Some(f) => unsafe { f(old) },
        // SAFETY: raw dup of the caller's fd.
        None => unsafe { libc::syscall(libc::SYS_dup, old) as c_int },
    };
    opened(fd)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        // No close happens: the fd keeps its stream.
        return match real::DUP2.get() {
            Some(f) => unsafe { f(old, new) },
            // SAFETY: raw dup2 of the caller's fds.
            None => unsafe { libc::syscall(libc::SYS_dup2, old, new) as c_int },
        };
    }
    engine::closing(new);
    let fd = match real::DUP2.get() {
        Some(f) => unsafe { f(old, new) },
        // SAFETY: as above.
        None => unsafe { libc::syscall(libc::SYS_dup2, old, new) as c_int },
    };
    opened(fd)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        engine::closing(new);
    }
    let fd = match real::DUP3.get() {
        Some(f) => unsafe { f(old, new, flags) },
        // SAFETY: raw dup3 of the caller's fds.
        None => unsafe { libc::syscall(libc::SYS_dup3, old, new, flags) as c_int },
    };
    opened(fd)
}

fn fcntl_done(fd: c_int, cmd: c_int, ret: c_int) -> c_int {
    if ret >= 0 {
        match cmd {
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => engine::forget(ret),
            // O_DIRECT may have changed: look at the fd again.
            libc::F_SETFL => engine::forget(fd),
            _ => {}
        }
    }
    ret
}

macro_rules! fcntl_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, cmd: c_int, arg: usize) -> c_int {
            let ret = match real::$real.get() {
                Some(f) => unsafe { f(fd, cmd, arg) },
                // SAFETY: raw fcntl with the caller's arguments.
                None => unsafe { libc::syscall(libc::SYS_fcntl, fd, cmd, arg) as c_int },
            };
            fcntl_done(fd, cmd, ret)
        }
    };
}
fcntl_hook!(fcntl, FCNTL);
fcntl_hook!(fcntl64, FCNTL64);

macro_rules! lseek_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(fd: c_int, off: off_t, whence: c_int) -> off_t {
            let ret = match real::$real.get() {
                Some(f) => unsafe { f(fd, off, whence) },
                // SAFETY: raw lseek with the caller's arguments.
                None => unsafe { libc::syscall(libc::SYS_lseek, fd, off, whence) as off_t },
            };
            if ret >= 0 {
                engine::seeked(fd, ret as u64);
            }
            ret
        }
    };
}
lseek_hook!(lseek, LSEEK);
lseek_hook!(lseek64, LSEEK64);
