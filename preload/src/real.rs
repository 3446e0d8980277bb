//! The real functions behind the hooks, resolved once with dlsym(RTLD_NEXT).
//!
//! Each symbol is resolved on its hook's first call, not in the constructor: a dlsym costs
//! about 880 instructions, and resolving all 76 at start was half of what the library added
//! to every exec (67k instructions; most programs call a handful of the hooks, and `true`
//! none). After that first call a hook pays one load of the resolved address, never a dlsym:
//! a missing symbol is remembered too. While a resolution is under way on this thread
//! (dlsym may allocate, and an allocator may read a file), `get` answers `None` and the hook
//! falls back to the raw syscall (or ENOSYS where no syscall stands in).
//!
//! The first call of a hook may thus come from a signal handler. dlsym there takes the
//! loader's lock, which is recursive (a handler interrupting the loader on the same thread
//! gets it), and allocates or frees only to keep a failure's message (a symbol is missing,
//! or an earlier dl call failed unread): the allocator's lock is not taken when the symbol
//! is found.

use std::cell::Cell;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

const UNRESOLVED: usize = 0;
const MISSING: usize = 1;
/// Room for the longest name and its NUL.
const NAME: usize = 24;

/// A real function's slot. The name is kept inline, not as a pointer: a pointer in each of
/// the slots would be a relocation, and the loader would write (and copy on write) the
/// slots' pages at every start, in processes that call none of the hooks.
pub struct Real<F> {
    addr: AtomicUsize,
    name: [u8; NAME],
    _f: PhantomData<F>,
}

thread_local! {
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

impl<F: Copy> Real<F> {
    pub const fn new(name: &'static CStr) -> Real<F> {
        Real {
            addr: AtomicUsize::new(UNRESOLVED),
            name: crate::inline_name(name.to_bytes_with_nul()),
            _f: PhantomData,
        }
    }

    #[inline(always)]
    pub fn get(&self) -> Option<F> {
        let mut a = self.addr.load(Ordering::Acquire);
        if a == UNRESOLVED {
            a = self.resolve();
        }
        if a <= MISSING {
            return None;
        }
        debug_assert_eq!(size_of::<F>(), size_of::<usize>());
        // SAFETY: `a` is neither UNRESOLVED nor MISSING, so it is the address dlsym gave for
        // `name`, and the `reals!` table gives `F` as that glibc function's type.
        Some(unsafe { std::mem::transmute_copy::<usize, F>(&a) })
    }

    /// The real function if it is resolved already: no call, so that a hook's fast path can
    /// tail-call it.
    #[inline(always)]
    pub fn ready(&self) -> Option<F> {
        let a = self.addr.load(Ordering::Acquire);
        // SAFETY: as in `get`.
        (a > MISSING).then(|| unsafe { std::mem::transmute_copy::<usize, F>(&a) })
    }

    #[cold]
    #[inline(never)]
    pub fn resolve(&self) -> usize {
        let busy = RESOLVING.try_with(|r| r.replace(true)).unwrap_or(true);
        if busy {
            return UNRESOLVED;
        }
        let p = next(self.name.as_ptr().cast()) as usize;
        let a = if p == 0 { MISSING } else { p };
        self.addr.store(a, Ordering::Release);
        let _ = RESOLVING.try_with(|r| r.set(false));
        a
    }
}

const UNKNOWN: usize = 0;
const NO_FRONT: usize = 1;
static FRONT: AtomicUsize = AtomicUsize::new(UNKNOWN);

/// The front's `dropbehind_front_next`, or NO_FRONT. Asked by the constructor: where the
/// engine is preloaded alone, the failed lookup allocates its message (dlerror frees it),
/// which a hook's first call, perhaps in a signal handler, must not do.
pub fn find_front() -> usize {
    let mut f = FRONT.load(Ordering::Acquire);
    if f == UNKNOWN {
        // SAFETY: a NUL-terminated name; dlsym only reads it.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"dropbehind_front_next".as_ptr()) };
        if p.is_null() {
            // SAFETY: takes the failure's message, which is freed by the next dl call.
            unsafe { libc::dlerror() };
        }
        f = if p.is_null() { NO_FRONT } else { p as usize };
        FRONT.store(f, Ordering::Release);
    }
    f
}

/// What `name` is after the preloaded libraries, as the front sees it
/// (`dropbehind_front_next`): the engine is loaded by dlopen after them all, and its own
/// RTLD_NEXT would skip every one of them, finding libc's. Preloaded itself (no front), the
/// engine's RTLD_NEXT.
fn next(name: *const libc::c_char) -> *mut libc::c_void {
    type Next = unsafe extern "C" fn(*const libc::c_char) -> *mut libc::c_void;
    let f = find_front();
    if f == NO_FRONT {
        // SAFETY: `name` is NUL-terminated (`Real::new`); dlsym only reads it.
        return unsafe { libc::dlsym(libc::RTLD_NEXT, name) };
    }
    // SAFETY: the front's `dropbehind_front_next`, of this signature, given a NUL-terminated
    // name.
    unsafe { std::mem::transmute::<usize, Next>(f)(name) }
}

/// The one way a hook calls the function it stands in for:
///
/// - `call_real!(READ(fd, buf, n) or syscall(libc::SYS_read, fd, buf, n))`: the real
///   function, or while it is not resolved (a hook run from another library's constructor
///   before ours, or while dlsym is under way on this thread) the raw syscall;
/// - `call_real!(FREAD(ptr, size, n, fp) or enosys)`: the real function, or ENOSYS and the
///   function's failure value (-1, or a null pointer);
/// - `call_real!(FREAD(ptr, size, n, fp) or 0)`: the real function, or that value.
macro_rules! call_real {
    ($real:ident($($a:expr),* $(,)?) or syscall($nr:expr $(, $s:expr)* $(,)?)) => {
        match $crate::real::$real.get() {
            // SAFETY: the address dlsym gave for this name is glibc's function of this
            // signature (the `reals!` table); the arguments are the program's own, unchanged.
            Some(f) => unsafe { f($($a),*) },
            // SAFETY: the same call as the raw syscall, with the program's own arguments.
            None => (unsafe { $crate::sys::passthrough($nr, &[$($s as usize),*]) }) as _,
        }
    };
    ($real:ident($($a:expr),* $(,)?) or enosys) => {
        match $crate::real::$real.get() {
            // SAFETY: as above.
            Some(f) => unsafe { f($($a),*) },
            None => $crate::real::enosys(),
        }
    };
    ($real:ident($($a:expr),* $(,)?) or $fallback:expr) => {
        match $crate::real::$real.get() {
            // SAFETY: as above.
            Some(f) => unsafe { f($($a),*) },
            None => $fallback,
        }
    };
}

/// What a function answers when it fails: -1 for numbers, a null pointer for pointers.
pub trait Failure {
    fn failure() -> Self;
}

macro_rules! failure_minus_one {
    ($($t:ty),*) => { $(impl Failure for $t { fn failure() -> Self { -1 } })* };
}
failure_minus_one!(i32, i64, isize);

impl<T> Failure for *mut T {
    fn failure() -> Self {
        std::ptr::null_mut()
    }
}

/// Sets errno to ENOSYS and answers failure: for a real symbol that does not exist (or is
/// not resolved yet, where no raw syscall can stand in for it).
pub fn enosys<T: Failure>() -> T {
    crate::sys::errno::set(libc::ENOSYS);
    T::failure()
}

macro_rules! reals {
    ($($id:ident = $name:literal : fn($($a:ty),*) -> $r:ty;)*) => {
        $(
            pub static $id: Real<unsafe extern "C-unwind" fn($($a),*) -> $r> = Real::new($name);
        )*
    };
}

use libc::{FILE, c_char, c_int, c_uint, c_void, iovec, loff_t, mode_t, off_t, size_t, ssize_t};

reals! {
    OPEN = c"open": fn(*const c_char, c_int, mode_t) -> c_int;
    OPEN64 = c"open64": fn(*const c_char, c_int, mode_t) -> c_int;
    OPENAT = c"openat": fn(c_int, *const c_char, c_int, mode_t) -> c_int;
    OPENAT64 = c"openat64": fn(c_int, *const c_char, c_int, mode_t) -> c_int;
    CREAT = c"creat": fn(*const c_char, mode_t) -> c_int;
    CREAT64 = c"creat64": fn(*const c_char, mode_t) -> c_int;
    OPEN_2 = c"__open_2": fn(*const c_char, c_int) -> c_int;
    OPEN64_2 = c"__open64_2": fn(*const c_char, c_int) -> c_int;
    OPENAT_2 = c"__openat_2": fn(c_int, *const c_char, c_int) -> c_int;
    OPENAT64_2 = c"__openat64_2": fn(c_int, *const c_char, c_int) -> c_int;
    CLOSE = c"close": fn(c_int) -> c_int;
    CLOSE_RANGE = c"close_range": fn(c_uint, c_uint, c_int) -> c_int;
    CLOSEFROM = c"closefrom": fn(c_int) -> ();
    DUP = c"dup": fn(c_int) -> c_int;
    DUP2 = c"dup2": fn(c_int, c_int) -> c_int;
    DUP3 = c"dup3": fn(c_int, c_int, c_int) -> c_int;
    FCNTL = c"fcntl": fn(c_int, c_int, usize) -> c_int;
    FCNTL64 = c"fcntl64": fn(c_int, c_int, usize) -> c_int;
    READ = c"read": fn(c_int, *mut c_void, size_t) -> ssize_t;
    READ_CHK = c"__read_chk": fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;
    PREAD = c"pread": fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    PREAD64 = c"pread64": fn(c_int, *mut c_void, size_t, off_t) -> ssize_t;
    PREAD_CHK = c"__pread_chk": fn(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t;
    PREAD64_CHK = c"__pread64_chk": fn(c_int, *mut c_void, size_t, off_t, size_t) -> ssize_t;
    READV = c"readv": fn(c_int, *const iovec, c_int) -> ssize_t;
    PREADV = c"preadv": fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
    PREADV64 = c"preadv64": fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
    PREADV2 = c"preadv2": fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
    PREADV64V2 = c"preadv64v2": fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
    WRITE = c"write": fn(c_int, *const c_void, size_t) -> ssize_t;
    PWRITE = c"pwrite": fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    PWRITE64 = c"pwrite64": fn(c_int, *const c_void, size_t, off_t) -> ssize_t;
    WRITEV = c"writev": fn(c_int, *const iovec, c_int) -> ssize_t;
    PWRITEV = c"pwritev": fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
    PWRITEV64 = c"pwritev64": fn(c_int, *const iovec, c_int, off_t) -> ssize_t;
    PWRITEV2 = c"pwritev2": fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
    PWRITEV64V2 = c"pwritev64v2": fn(c_int, *const iovec, c_int, off_t, c_int) -> ssize_t;
    LSEEK = c"lseek": fn(c_int, off_t, c_int) -> off_t;
    LSEEK64 = c"lseek64": fn(c_int, off_t, c_int) -> off_t;
    FTRUNCATE = c"ftruncate": fn(c_int, off_t) -> c_int;
    FTRUNCATE64 = c"ftruncate64": fn(c_int, off_t) -> c_int;
    COPY_FILE_RANGE = c"copy_file_range": fn(c_int, *mut loff_t, c_int, *mut loff_t, size_t, c_uint) -> ssize_t;
    SENDFILE = c"sendfile": fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    SENDFILE64 = c"sendfile64": fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    POSIX_FADVISE = c"posix_fadvise": fn(c_int, off_t, off_t, c_int) -> c_int;
    POSIX_FADVISE64 = c"posix_fadvise64": fn(c_int, off_t, off_t, c_int) -> c_int;
    SPLICE = c"splice": fn(c_int, *mut loff_t, c_int, *mut loff_t, size_t, c_uint) -> ssize_t;
    FOPEN = c"fopen": fn(*const c_char, *const c_char) -> *mut FILE;
    FOPEN64 = c"fopen64": fn(*const c_char, *const c_char) -> *mut FILE;
    FDOPEN = c"fdopen": fn(c_int, *const c_char) -> *mut FILE;
    FREOPEN = c"freopen": fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    FREOPEN64 = c"freopen64": fn(*const c_char, *const c_char, *mut FILE) -> *mut FILE;
    FCLOSE = c"fclose": fn(*mut FILE) -> c_int;
    FREAD = c"fread": fn(*mut c_void, size_t, size_t, *mut FILE) -> size_t;
    FREAD_UNLOCKED = c"fread_unlocked": fn(*mut c_void, size_t, size_t, *mut FILE) -> size_t;
    FREAD_CHK = c"__fread_chk": fn(*mut c_void, size_t, size_t, size_t, *mut FILE) -> size_t;
    FREAD_UNLOCKED_CHK = c"__fread_unlocked_chk": fn(*mut c_void, size_t, size_t, size_t, *mut FILE) -> size_t;
    FGETS = c"fgets": fn(*mut c_char, c_int, *mut FILE) -> *mut c_char;
    FGETS_UNLOCKED = c"fgets_unlocked": fn(*mut c_char, c_int, *mut FILE) -> *mut c_char;
    GETDELIM = c"getdelim": fn(*mut *mut c_char, *mut size_t, c_int, *mut FILE) -> ssize_t;
    GETLINE = c"getline": fn(*mut *mut c_char, *mut size_t, *mut FILE) -> ssize_t;
    FWRITE = c"fwrite": fn(*const c_void, size_t, size_t, *mut FILE) -> size_t;
    FWRITE_UNLOCKED = c"fwrite_unlocked": fn(*const c_void, size_t, size_t, *mut FILE) -> size_t;
    FPUTS = c"fputs": fn(*const c_char, *mut FILE) -> c_int;
    FPUTS_UNLOCKED = c"fputs_unlocked": fn(*const c_char, *mut FILE) -> c_int;
    OPENDIR = c"opendir": fn(*const c_char) -> *mut libc::DIR;
    FDOPENDIR = c"fdopendir": fn(c_int) -> *mut libc::DIR;
    CLOSEDIR = c"closedir": fn(*mut libc::DIR) -> c_int;
    FSTATAT = c"fstatat": fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
    FSTATAT64 = c"fstatat64": fn(c_int, *const c_char, *mut libc::stat64, c_int) -> c_int;
    UNLINKAT = c"unlinkat": fn(c_int, *const c_char, c_int) -> c_int;
    STATX = c"statx": fn(c_int, *const c_char, c_int, c_uint, *mut libc::statx) -> c_int;
    MMAP = c"mmap": fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
    MMAP64 = c"mmap64": fn(*mut c_void, size_t, c_int, c_int, c_int, off_t) -> *mut c_void;
    MUNMAP = c"munmap": fn(*mut c_void, size_t) -> c_int;
    MREMAP = c"mremap": fn(*mut c_void, size_t, size_t, c_int, *mut c_void) -> *mut c_void;
    MADVISE = c"madvise": fn(*mut c_void, size_t, c_int) -> c_int;
    POSIX_MADVISE = c"posix_madvise": fn(*mut c_void, size_t, c_int) -> c_int;
    PRCTL = c"prctl": fn(c_int, libc::c_ulong, libc::c_ulong, libc::c_ulong, libc::c_ulong) -> c_int;
}
