//! fstatat: whether a program that listed a big directory stats its entries through the
//! directory's fd, which decides whether the prefetch goes on once the program has closed the
//! stream and holds only a dup of its fd (fts: `du` stats every entry, `find -name` none).

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
            if r == 0 && engine::watching_stats() && unsafe { (*buf).st_mode } & libc::S_IFMT != libc::S_IFDIR {
                engine::file_statted(dirfd);
            }
            r
        }
    };
}
fstatat_hook!(fstatat, FSTATAT, libc::stat);
fstatat_hook!(fstatat64, FSTATAT64, libc::stat64);
