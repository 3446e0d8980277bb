//! open, close, dup and seek: fd lifetimes, so that a slot never outlives its file.

use crate::engine;
use libc::{c_char, c_int, c_uint, mode_t, off_t};

/// A new fd from dup and its relatives: `old`'s file, flags looked up again.
fn duplicated(old: c_int, fd: c_int) -> c_int {
    if fd >= 0 {
        engine::duplicated(old, fd);
    }
    fd
}

/// A file the program opened with `flags`.
fn opened_with(fd: c_int, flags: c_int) -> c_int {
    if fd >= 0 {
        engine::opened(fd, flags);
    }
    fd
}

/// `opened_with`, for a file opened through the directory fd `dirfd`: one that is not asked
/// to be a directory is an entry the program uses (see `hooks::entries`).
fn opened_through(dirfd: c_int, fd: c_int, flags: c_int) -> c_int {
    if fd >= 0 && flags & libc::O_DIRECTORY == 0 && engine::watching_entries() {
        engine::file_used(dirfd);
    }
    opened_with(fd, flags)
}

macro_rules! open_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
            let fd = call_real!($real(path, flags, mode) or syscall(libc::SYS_openat, libc::AT_FDCWD, path, flags, mode));
            opened_with(fd, flags)
        }
    };
}
open_hook!(open, OPEN);
open_hook!(open64, OPEN64);

macro_rules! openat_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            dirfd: c_int,
            path: *const c_char,
            flags: c_int,
            mode: mode_t,
        ) -> c_int {
            let fd = call_real!($real(dirfd, path, flags, mode) or syscall(libc::SYS_openat, dirfd, path, flags, mode));
            opened_through(dirfd, fd, flags)
        }
    };
}
openat_hook!(openat, OPENAT);
openat_hook!(openat64, OPENAT64);

macro_rules! creat_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(path: *const c_char, mode: mode_t) -> c_int {
            let fd = call_real!($real(path, mode) or syscall(libc::SYS_openat, libc::AT_FDCWD, path, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC, mode));
            opened_with(fd, libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC)
        }
    };
}
creat_hook!(creat, CREAT);
creat_hook!(creat64, CREAT64);

// Fortified opens: the real ones check that O_CREAT/O_TMPFILE came with a mode.
macro_rules! open2_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(path: *const c_char, flags: c_int) -> c_int {
            let fd = call_real!($real(path, flags) or enosys);
            opened_with(fd, flags)
        }
    };
}
open2_hook!(__open_2, OPEN_2);
open2_hook!(__open64_2, OPEN64_2);

macro_rules! openat2_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
            let fd = call_real!($real(dirfd, path, flags) or enosys);
            opened_through(dirfd, fd, flags)
        }
    };
}
openat2_hook!(__openat_2, OPENAT_2);
openat2_hook!(__openat64_2, OPENAT64_2);

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn close(fd: c_int) -> c_int {
    engine::closing(fd);
    call_real!(CLOSE(fd) or syscall(libc::SYS_close, fd))
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 {
        engine::closing_range(first, last);
    }
    call_real!(CLOSE_RANGE(first, last, flags) or syscall(libc::SYS_close_range, first, last, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn closefrom(lowfd: c_int) {
    // glibc treats a negative lowfd as 0.
    engine::closing_range(lowfd.max(0) as u32, u32::MAX);
    call_real!(CLOSEFROM(lowfd) or {
        // SAFETY: closefrom(lowfd) is close_range(lowfd, ~0U, 0), the program's own call.
        unsafe { crate::sys::passthrough(libc::SYS_close_range, &[lowfd.max(0) as usize, u32::MAX as usize]) };
    })
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn dup(old: c_int) -> c_int {
    let fd = call_real!(DUP(old) or syscall(libc::SYS_dup, old));
    duplicated(old, fd)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        // No close happens: the fd keeps its stream.
        return call_real!(DUP2(old, new) or syscall(libc::SYS_dup2, old, new));
    }
    engine::closing(new);
    let fd = call_real!(DUP2(old, new) or syscall(libc::SYS_dup2, old, new));
    duplicated(old, fd)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    if old != new {
        engine::closing(new);
    }
    let fd = call_real!(DUP3(old, new, flags) or syscall(libc::SYS_dup3, old, new, flags));
    duplicated(old, fd)
}

fn fcntl_done(fd: c_int, cmd: c_int, ret: c_int) -> c_int {
    if ret >= 0 {
        match cmd {
            libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => engine::duplicated(fd, ret),
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
        pub unsafe extern "C-unwind" fn $name(fd: c_int, cmd: c_int, arg: usize) -> c_int {
            let ret = call_real!($real(fd, cmd, arg) or syscall(libc::SYS_fcntl, fd, cmd, arg));
            fcntl_done(fd, cmd, ret)
        }
    };
}
fcntl_hook!(fcntl, FCNTL);
fcntl_hook!(fcntl64, FCNTL64);

macro_rules! lseek_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(fd: c_int, off: off_t, whence: c_int) -> off_t {
            let ret = call_real!($real(fd, off, whence) or syscall(libc::SYS_lseek, fd, off, whence));
            if ret >= 0 {
                engine::seeked(fd, ret as u64);
            }
            ret
        }
    };
}
lseek_hook!(lseek, LSEEK);
lseek_hook!(lseek64, LSEEK64);
