//! mmap and its relatives: big file mappings are handed to the watcher (`mapwatch`); any
//! call that unmaps, moves or re-hints a watched range first takes it back from the watcher.

use crate::engine::{self, Mapping, Pages};
use libc::{c_int, c_void, off_t, size_t};

fn failed(p: *mut c_void) -> bool {
    p == libc::MAP_FAILED
}

macro_rules! mmap_hook {
    ($name:ident, $real:ident) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C-unwind" fn $name(
            addr: *mut c_void,
            len: size_t,
            prot: c_int,
            flags: c_int,
            fd: c_int,
            off: off_t,
        ) -> *mut c_void {
            // MAP_FIXED replaces whatever was mapped there.
            let taken = if flags & libc::MAP_FIXED != 0 {
                engine::unmapping(addr as usize, len, 0)
            } else {
                0
            };
            let p = call_real!($real(addr, len, prot, flags, fd, off) or syscall(libc::SYS_mmap, addr, len, prot, flags, fd, off));
            // A failed MAP_FIXED may already have unmapped the old range.
            engine::unmapped(taken, Mapping::Gone, Pages::Drop);
            if !failed(p) {
                engine::mapped(p as usize, len, prot, flags, fd, off);
            }
            p
        }
    };
}
mmap_hook!(mmap, MMAP);
mmap_hook!(mmap64, MMAP64);

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    let taken = engine::unmapping(addr as usize, len, 0);
    let r = call_real!(MUNMAP(addr, len) or syscall(libc::SYS_munmap, addr, len));
    engine::unmapped(taken, Mapping::gone_if(r == 0), Pages::Drop);
    r
}

/// mremap is variadic: the new address is passed (and read) only with MREMAP_FIXED. On
/// x86_64 a variadic pointer argument travels like a fixed one.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    let mut taken = engine::unmapping(old as usize, old_len, 0);
    if flags & libc::MREMAP_FIXED != 0 {
        taken |= engine::unmapping(new_addr as usize, new_len, taken);
    }
    let p = call_real!(MREMAP(old, old_len, new_len, flags, new_addr) or syscall(libc::SYS_mremap, old, old_len, new_len, flags, new_addr));
    engine::unmapped(taken, Mapping::gone_if(!failed(p)), Pages::Drop);
    p
}

/// The readahead hints of the program's own: the watcher hands such a mapping over for
/// good (its hint is never overridden).
fn is_pattern_hint(advice: c_int) -> bool {
    matches!(
        advice,
        libc::MADV_NORMAL | libc::MADV_RANDOM | libc::MADV_SEQUENTIAL
    )
}

/// Runs the program's advice `call`; a pattern hint first takes the range from the watcher,
/// for good: even a failed hint (ENOMEM: part of the range unmapped) applies to what is
/// mapped.
fn advising(addr: *mut c_void, len: size_t, advice: c_int, call: impl FnOnce() -> c_int) -> c_int {
    let taken = if is_pattern_hint(advice) {
        engine::unmapping(addr as usize, len, 0)
    } else {
        0
    };
    let r = call();
    engine::unmapped(taken, Mapping::Gone, Pages::Keep);
    r
}

#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    advising(
        addr,
        len,
        advice,
        || call_real!(MADVISE(addr, len, advice) or syscall(libc::SYS_madvise, addr, len, advice)),
    )
}

/// Returns an error number rather than setting errno. POSIX_MADV_* equal MADV_* for the
/// three pattern hints.
#[unsafe(no_mangle)]
pub unsafe extern "C-unwind" fn posix_madvise(
    addr: *mut c_void,
    len: size_t,
    advice: c_int,
) -> c_int {
    advising(
        addr,
        len,
        advice,
        || call_real!(POSIX_MADVISE(addr, len, advice) or libc::ENOSYS),
    )
}
