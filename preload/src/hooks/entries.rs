//! fstatat, statx and unlinkat: what a program does with the entries of a big directory it
//! listed, through the directory's fd. With openat (`fd.rs`), they decide whether the
//! prefetch stats every entry once the program has closed the stream and holds only a dup of
//! its fd (fts: `du` stats every entry, `rm -r` removes them, `grep -r` opens them; `find
//! -name` only descends into the subdirectories).

use crate::engine;
use libc::{c_char, c_int};

macro_rules! fstatat_hook {
    ($name:ident, $real:ident, $stat:ty) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            dirfd: c_int,
            path: *const c_char,
            buf: *mut $stat,
            flags: c_int,
        ) -> c_int {
            let r = call_real!($real(dirfd, path, buf, flags) or syscall(libc::SYS_newfstatat, dirfd, path, buf, flags));
            // SAFETY: the call succeeded, so `buf` is the struct the kernel filled.
            if r == 0 && engine::watching_entries() && unsafe { (*buf).st_mode } & libc::S_IFMT != libc::S_IFDIR {
                engine::file_used(dirfd);
            }
            r
        }
    };
}
fstatat_hook!(fstatat, FSTATAT, libc::stat);
fstatat_hook!(fstatat64, FSTATAT64, libc::stat64);

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: libc::c_uint,
    buf: *mut libc::statx,
) -> c_int {
    let r = call_real!(STATX(dirfd, path, flags, mask, buf) or syscall(libc::SYS_statx, dirfd, path, flags, mask, buf));
    if r == 0 && engine::watching_entries() {
        // SAFETY: the call succeeded, so `buf` is the struct the kernel filled.
        let (mask, mode) = unsafe { ((*buf).stx_mask, u32::from((*buf).stx_mode)) };
        if mask & libc::STATX_TYPE != 0 && mode & libc::S_IFMT != libc::S_IFDIR {
            engine::file_used(dirfd);
        }
    }
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    let r =
        call_real!(UNLINKAT(dirfd, path, flags) or syscall(libc::SYS_unlinkat, dirfd, path, flags));
    if r == 0 && flags & libc::AT_REMOVEDIR == 0 && engine::watching_entries() {
        engine::file_used(dirfd);
    }
    r
}
