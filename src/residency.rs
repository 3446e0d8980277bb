//! Page-cache residency queries: cachestat(2) and mincore(2).
//!
//! Raw syscalls only, so that this file serves both the preload library (where libc's
//! wrappers of hooked functions would call back into the shim) and the launcher's `stat`.

use libc::{c_long, c_void};

pub const SYS_CACHESTAT: c_long = 451;

/// Counts from cachestat(2), in pages.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStat {
    pub cache: u64,
    pub dirty: u64,
    pub writeback: u64,
    pub evicted: u64,
    pub recently_evicted: u64,
}

#[repr(C)]
struct CacheStatRange {
    off: u64,
    len: u64,
}

/// cachestat of `len` bytes at `off` (len 0 = to the end of the file). `Err(errno)`:
/// ENOSYS before 6.5, EPERM when the caller may not write the file.
pub fn cachestat(fd: i32, off: u64, len: u64) -> Result<CacheStat, i32> {
    let range = CacheStatRange { off, len };
    let mut cs = CacheStat::default();
    // SAFETY: both pointers are valid for the duration of the call.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const CacheStatRange,
            &mut cs as *mut CacheStat,
            0,
        )
    };
    if r == 0 { Ok(cs) } else { Err(errno()) }
}

/// Resident pages of the first `len` bytes of `fd` by mincore(2) on a private mapping.
/// Reports every page resident for files the caller neither owns nor may write.
pub fn mincore_count(fd: i32, len: u64) -> Result<u64, i32> {
    if len == 0 {
        return Ok(0);
    }
    let page = 4096u64;
    let mut resident = 0u64;
    let mut vec = [0u8; 4096];
    let step = vec.len() as u64 * page;
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(step);
        // SAFETY: a fresh read-only shared mapping, unmapped before returning.
        let addr = unsafe {
            libc::syscall(
                libc::SYS_mmap,
                std::ptr::null_mut::<c_void>(),
                n,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                off,
            )
        };
        if addr < 0 {
            return Err(errno());
        }
        let pages = n.div_ceil(page) as usize;
        // SAFETY: `vec` holds at least `pages` bytes.
        let r = unsafe { libc::syscall(libc::SYS_mincore, addr, n, vec.as_mut_ptr()) };
        let e = errno();
        // SAFETY: unmapping exactly what was mapped above.
        unsafe { libc::syscall(libc::SYS_munmap, addr, n) };
        if r != 0 {
            return Err(e);
        }
        resident += vec[..pages].iter().filter(|&&b| b & 1 != 0).count() as u64;
        off += n;
    }
    Ok(resident)
}

pub fn errno() -> i32 {
    // SAFETY: errno location is always valid for the calling thread.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(e: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}
