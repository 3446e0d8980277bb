//! stdio. glibc's FILE functions read and write through hidden internal symbols that a
//! preload can't see, so the stream's fd is followed here: a snapshot before the first
//! read or write, the kernel position sampled as the program moves data, and the stream
//! finished before the real fclose (after it, the fd is gone).

use super::enosys;
use crate::engine;
use crate::real;
use libc::{FILE, c_char, c_int, c_void, size_t, ssize_t};

/// The fd behind `fp`, or -1 for streams without one (fmemopen). errno untouched.
fn fd_of(fp: *mut FILE) -> c_int {
    if fp.is_null() {
        return -1;
    }
    let e = crate::residency::errno();
    // SAFETY: a stream the program handed to a stdio function.
    let fd = unsafe { libc::fileno(fp) };
    crate::residency::set_errno(e);
    fd
}

fn opened(fp: *mut FILE) -> *mut FILE {
    let fd = fd_of(fp);
    if fd >= 0 {
        engine::forget(fd);
    }
    fp
}

macro_rules! fopen_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(path: *const c_char, mode: *const c_char) -> *mut FILE {
            let fp = match real::$real.get() {
                Some(f) => unsafe { f(path, mode) },
                None => {
                    enosys::<i8>();
                    std::ptr::null_mut()
                }
            };
            opened(fp)
        }
    };
}
fopen_hook!(fopen, FOPEN);
fopen_hook!(fopen64, FOPEN64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    match real::FDOPEN.get() {
        Some(f) => unsafe { f(fd, mode) },
        None => {
            enosys::<i8>();
            std::ptr::null_mut()
        }
    }
}

macro_rules! freopen_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            path: *const c_char,
            mode: *const c_char,
            fp: *mut FILE,
        ) -> *mut FILE {
            let old = fd_of(fp);
            if old >= 0 {
                engine::stdio_closing(old);
            }
            let fp = match real::$real.get() {
                Some(f) => unsafe { f(path, mode, fp) },
                None => {
                    enosys::<i8>();
                    std::ptr::null_mut()
                }
            };
            opened(fp)
        }
    };
}
freopen_hook!(freopen, FREOPEN);
freopen_hook!(freopen64, FREOPEN64);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fclose(fp: *mut FILE) -> c_int {
    let fd = fd_of(fp);
    if fd >= 0 {
        engine::stdio_closing(fd);
    }
    match real::FCLOSE.get() {
        Some(f) => unsafe { f(fp) },
        None => enosys(),
    }
}

fn read_done(fd: c_int, bytes: usize, eof: bool) {
    if fd >= 0 {
        engine::stdio_after_read(fd, bytes as u64, eof);
    }
}

fn before_read(fp: *mut FILE) -> c_int {
    let fd = fd_of(fp);
    if fd >= 0 {
        engine::stdio_before_read(fd);
    }
    fd
}

macro_rules! fread_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            ptr: *mut c_void,
            size: size_t,
            n: size_t,
            fp: *mut FILE,
        ) -> size_t {
            let fd = before_read(fp);
            let got = match real::$real.get() {
                Some(f) => unsafe { f(ptr, size, n, fp) },
                None => 0,
            };
            read_done(fd, got.saturating_mul(size), got < n);
            got
        }
    };
}
fread_hook!(fread, FREAD);
fread_hook!(fread_unlocked, FREAD_UNLOCKED);

macro_rules! fread_chk_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            ptr: *mut c_void,
            buflen: size_t,
            size: size_t,
            n: size_t,
            fp: *mut FILE,
        ) -> size_t {
            let fd = before_read(fp);
            let got = match real::$real.get() {
                Some(f) => unsafe { f(ptr, buflen, size, n, fp) },
                None => 0,
            };
            read_done(fd, got.saturating_mul(size), got < n);
            got
        }
    };
}
fread_chk_hook!(__fread_chk, FREAD_CHK);
fread_chk_hook!(__fread_unlocked_chk, FREAD_UNLOCKED_CHK);

macro_rules! fgets_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(s: *mut c_char, n: c_int, fp: *mut FILE) -> *mut c_char {
            let fd = before_read(fp);
            let r = match real::$real.get() {
                Some(f) => unsafe { f(s, n, fp) },
                None => std::ptr::null_mut(),
            };
            // SAFETY: on success fgets returns a NUL-terminated string.
            let bytes = if r.is_null() {
                0
            } else {
                unsafe { libc::strlen(r) }
            };
            read_done(fd, bytes, r.is_null());
            r
        }
    };
}
fgets_hook!(fgets, FGETS);
fgets_hook!(fgets_unlocked, FGETS_UNLOCKED);

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getdelim(
    line: *mut *mut c_char,
    cap: *mut size_t,
    delim: c_int,
    fp: *mut FILE,
) -> ssize_t {
    let fd = before_read(fp);
    let r = match real::GETDELIM.get() {
        Some(f) => unsafe { f(line, cap, delim, fp) },
        None => enosys(),
    };
    read_done(fd, r.max(0) as usize, r < 0);
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getline(
    line: *mut *mut c_char,
    cap: *mut size_t,
    fp: *mut FILE,
) -> ssize_t {
    let fd = before_read(fp);
    let r = match real::GETLINE.get() {
        Some(f) => unsafe { f(line, cap, fp) },
        None => enosys(),
    };
    read_done(fd, r.max(0) as usize, r < 0);
    r
}

fn before_write(fp: *mut FILE) -> c_int {
    let fd = fd_of(fp);
    if fd >= 0 {
        engine::stdio_before_write(fd);
    }
    fd
}

fn write_done(fd: c_int, bytes: usize) {
    if fd >= 0 && bytes > 0 {
        engine::stdio_after_write(fd, bytes as u64);
    }
}

macro_rules! fwrite_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(
            ptr: *const c_void,
            size: size_t,
            n: size_t,
            fp: *mut FILE,
        ) -> size_t {
            let fd = before_write(fp);
            let put = match real::$real.get() {
                Some(f) => unsafe { f(ptr, size, n, fp) },
                None => 0,
            };
            write_done(fd, put.saturating_mul(size));
            put
        }
    };
}
fwrite_hook!(fwrite, FWRITE);
fwrite_hook!(fwrite_unlocked, FWRITE_UNLOCKED);

macro_rules! fputs_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(s: *const c_char, fp: *mut FILE) -> c_int {
            let fd = before_write(fp);
            let r = match real::$real.get() {
                Some(f) => unsafe { f(s, fp) },
                None => libc::EOF,
            };
            // SAFETY: fputs takes a NUL-terminated string.
            write_done(
                fd,
                if r >= 0 {
                    unsafe { libc::strlen(s) }
                } else {
                    0
                },
            );
            r
        }
    };
}
fputs_hook!(fputs, FPUTS);
fputs_hook!(fputs_unlocked, FPUTS_UNLOCKED);
