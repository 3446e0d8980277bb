//! Directory streams: opendir and fdopendir hand big cold directories to the prefetcher;
//! closedir stops its work. readdir is left to glibc: the program's entries and their order
//! are exactly what they would be.

use crate::{engine, real};
use libc::{DIR, c_char, c_int};

fn opened(dirp: *mut DIR) -> *mut DIR {
    if !dirp.is_null() {
        let e = crate::residency::errno();
        // SAFETY: a stream just returned by the real opendir.
        let fd = unsafe { libc::dirfd(dirp) };
        crate::residency::set_errno(e);
        if fd >= 0 {
            engine::forget(fd);
            engine::directory_opened(fd);
        }
    }
    dirp
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn opendir(name: *const c_char) -> *mut DIR {
    let dirp = match real::OPENDIR.get() {
        Some(f) => unsafe { f(name) },
        None => {
            crate::residency::set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    };
    opened(dirp)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    let dirp = match real::FDOPENDIR.get() {
        Some(f) => unsafe { f(fd) },
        None => {
            crate::residency::set_errno(libc::ENOSYS);
            std::ptr::null_mut()
        }
    };
    opened(dirp)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn closedir(dirp: *mut DIR) -> c_int {
    if !dirp.is_null() {
        let e = crate::residency::errno();
        // SAFETY: the program's stream, about to be closed.
        let fd = unsafe { libc::dirfd(dirp) };
        crate::residency::set_errno(e);
        if fd >= 0 {
            engine::directory_closing(fd);
            engine::forget(fd);
        }
    }
    match real::CLOSEDIR.get() {
        Some(f) => unsafe { f(dirp) },
        None => super::enosys(),
    }
}
