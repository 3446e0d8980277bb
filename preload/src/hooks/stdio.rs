//! stdio. glibc's FILE functions read and write through hidden internal symbols that a
//! preload can't see, so the stream's fd is followed here: a snapshot before the first
//! read or write, the kernel position sampled as the program moves data, and the stream
//! finished before the real fclose (after it, the fd is gone).

use crate::engine;
use libc::{FILE, c_char, c_int, c_void, size_t, ssize_t};

/// The fd behind `fp`, or -1 for streams without one (fmemopen). errno untouched.
fn fd_of(fp: *mut FILE) -> c_int {
    if fp.is_null() {
        return -1;
    }
    let e = crate::sys::errno::get();
    // SAFETY: `fp` is not null and is the program's open stream: it is passing it to a stdio
    // function, which requires one.
    let fd = unsafe { libc::fileno(fp) };
    crate::sys::errno::set(e);
    fd
}

fn opened(fp: *mut FILE) -> *mut FILE {
    let fd = fd_of(fp);
    if fd >= 0 {
        engine::opened_unseen(fd);
    }
    fp
}

macro_rules! fopen_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(path: *const c_char, mode: *const c_char) -> *mut FILE {
            let fp = call_real!($real(path, mode) or enosys);
            opened(fp)
        }
    };
}
fopen_hook!(fopen, FOPEN);
fopen_hook!(fopen64, FOPEN64);

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    call_real!(FDOPEN(fd, mode) or enosys)
}

macro_rules! freopen_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            path: *const c_char,
            mode: *const c_char,
            fp: *mut FILE,
        ) -> *mut FILE {
            let old = fd_of(fp);
            if old >= 0 {
                engine::stdio_closing(old);
            }
            let fp = call_real!($real(path, mode, fp) or enosys);
            opened(fp)
        }
    };
}
freopen_hook!(freopen, FREOPEN);
freopen_hook!(freopen64, FREOPEN64);

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn fclose(fp: *mut FILE) -> c_int {
    let fd = fd_of(fp);
    if fd >= 0 {
        engine::stdio_closing(fd);
    }
    call_real!(FCLOSE(fp) or enosys)
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
        pub unsafe extern "C-unwind" fn $name(
            ptr: *mut c_void,
            size: size_t,
            n: size_t,
            fp: *mut FILE,
        ) -> size_t {
            let fd = before_read(fp);
            let got = call_real!($real(ptr, size, n, fp) or 0);
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
        pub unsafe extern "C-unwind" fn $name(
            ptr: *mut c_void,
            buflen: size_t,
            size: size_t,
            n: size_t,
            fp: *mut FILE,
        ) -> size_t {
            let fd = before_read(fp);
            let got = call_real!($real(ptr, buflen, size, n, fp) or 0);
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
        pub unsafe extern "C-unwind" fn $name(s: *mut c_char, n: c_int, fp: *mut FILE) -> *mut c_char {
            let fd = before_read(fp);
            let r = call_real!($real(s, n, fp) or std::ptr::null_mut());
            let bytes = if r.is_null() {
                0
            } else {
                // SAFETY: fgets succeeded, so `r` is the program's NUL-terminated line.
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
pub unsafe extern "C-unwind" fn getdelim(
    line: *mut *mut c_char,
    cap: *mut size_t,
    delim: c_int,
    fp: *mut FILE,
) -> ssize_t {
    let fd = before_read(fp);
    let r = call_real!(GETDELIM(line, cap, delim, fp) or enosys);
    read_done(fd, r.max(0) as usize, r < 0);
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn getline(
    line: *mut *mut c_char,
    cap: *mut size_t,
    fp: *mut FILE,
) -> ssize_t {
    let fd = before_read(fp);
    let r = call_real!(GETLINE(line, cap, fp) or enosys);
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
        pub unsafe extern "C-unwind" fn $name(
            ptr: *const c_void,
            size: size_t,
            n: size_t,
            fp: *mut FILE,
        ) -> size_t {
            let fd = before_write(fp);
            let put = call_real!($real(ptr, size, n, fp) or 0);
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
        pub unsafe extern "C-unwind" fn $name(s: *const c_char, fp: *mut FILE) -> c_int {
            let fd = before_write(fp);
            let r = call_real!($real(s, fp) or libc::EOF);
            let bytes = if r >= 0 {
                // SAFETY: fputs accepted `s`, which it requires to be NUL-terminated.
                unsafe { libc::strlen(s) }
            } else {
                0
            };
            write_done(fd, bytes);
            r
        }
    };
}
fputs_hook!(fputs, FPUTS);
fputs_hook!(fputs_unlocked, FPUTS_UNLOCKED);
