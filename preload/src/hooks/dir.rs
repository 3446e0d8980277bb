//! Directory streams: opendir and fdopendir hand big cold directories to the prefetcher;
//! closedir stops its work. readdir is left to glibc: the program's entries and their order
//! are exactly what they would be.

use crate::engine;
use libc::{DIR, c_char, c_int};

fn opened(dirp: *mut DIR) -> *mut DIR {
    if !dirp.is_null() {
        let e = crate::sys::errno::get();
        // SAFETY: a stream just returned by the real opendir.
        let fd = unsafe { libc::dirfd(dirp) };
        crate::sys::errno::set(e);
        if fd >= 0 {
            engine::forget(fd);
            engine::directory_opened(fd);
        }
    }
    dirp
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn opendir(name: *const c_char) -> *mut DIR {
    let dirp = call_real!(OPENDIR(name) or enosys);
    opened(dirp)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fdopendir(fd: c_int) -> *mut DIR {
    let dirp = call_real!(FDOPENDIR(fd) or enosys);
    opened(dirp)
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn closedir(dirp: *mut DIR) -> c_int {
    if !dirp.is_null() {
        let e = crate::sys::errno::get();
        // SAFETY: `dirp` is a live stream: the program is passing it to closedir, which
        // requires one.
        let fd = unsafe { libc::dirfd(dirp) };
        crate::sys::errno::set(e);
        if fd >= 0 {
            engine::directory_closing(fd);
            engine::forget(fd);
        }
    }
    call_real!(CLOSEDIR(dirp) or enosys)
}
