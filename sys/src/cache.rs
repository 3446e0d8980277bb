//! Page-cache calls: residency (cachestat, mincore), advice (fadvise), writeback
//! (sync_file_range without WAIT flags) and waiting for a range to be clean.

use crate::{Errno, cvt};
use libc::{c_int, c_long, c_void};

const SYS_CACHESTAT: c_long = 451;
const PAGE: u64 = 4096;

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

/// cachestat of `len` bytes at `off` (len 0 = to the end of the file). ENOSYS before 6.5,
/// EPERM when the caller may not write the file (since the CVE-2025-21691 fix).
pub fn cachestat(fd: i32, off: u64, len: u64) -> Result<CacheStat, Errno> {
    let range = CacheStatRange { off, len };
    let mut cs = CacheStat::default();
    // SAFETY: own buffer: `range` and `cs` are locals that outlive the call.
    cvt(|| unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd,
            &range as *const CacheStatRange,
            &mut cs as *mut CacheStat,
            0,
        )
    })?;
    Ok(cs)
}

/// Resident pages of the first `len` bytes of `fd` by mincore(2) on a shared read-only
/// mapping. Reports every page resident for files the caller neither owns nor may write.
pub fn mincore_count(fd: i32, len: u64) -> Result<u64, Errno> {
    let mut resident = 0u64;
    let mut vec = [0u8; 4096];
    let step = vec.len() as u64 * PAGE;
    let mut off = 0u64;
    while off < len {
        let n = (len - off).min(step);
        // SAFETY: kernel-checked: a fresh mapping chosen by the kernel, unmapped below.
        let addr = cvt(|| unsafe {
            libc::syscall(
                libc::SYS_mmap,
                std::ptr::null_mut::<c_void>(),
                n,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                off,
            )
        })?;
        let pages = n.div_ceil(PAGE) as usize;
        // SAFETY: own buffer: `vec` holds at least `pages` bytes.
        let r = cvt(|| unsafe { libc::syscall(libc::SYS_mincore, addr, n, vec.as_mut_ptr()) });
        // SAFETY: unmapping exactly the mapping made above, which nothing else refers to.
        let _ = cvt(|| unsafe { libc::syscall(libc::SYS_munmap, addr, n) });
        r?;
        resident += vec[..pages].iter().filter(|&&b| b & 1 != 0).count() as u64;
        off += n;
    }
    Ok(resident)
}

/// posix_fadvise of `len` bytes at `off`. An empty range asks nothing.
pub fn fadvise(fd: i32, off: u64, len: u64, advice: c_int) -> Result<(), Errno> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: kernel-checked: integers only.
    cvt(|| unsafe { libc::syscall(libc::SYS_fadvise64, fd, off as i64, len as i64, advice) })?;
    Ok(())
}

/// Drops the clean pages of the whole file (DONTNEED with length 0: to its end).
pub fn drop_whole(fd: i32) -> Result<(), Errno> {
    // SAFETY: kernel-checked: integers only.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_fadvise64,
            fd,
            0i64,
            0i64,
            libc::POSIX_FADV_DONTNEED,
        )
    })?;
    Ok(())
}

/// Drops the clean pages of `len` bytes at `off`. Returns the pages it released, where
/// cachestat can tell (0 where it can't).
pub fn drop_range(fd: i32, off: u64, len: u64) -> u64 {
    drop_range_after(fd, off, len, || {})
}

/// As `drop_range`, running `first` before the drop (reclaiming the pages through a
/// mapping first: DONTNEED skips mapped pages), counting what both released.
pub fn drop_range_after(fd: i32, off: u64, len: u64, first: impl FnOnce()) -> u64 {
    let before = cachestat(fd, off, len).map_or(0, |c| c.cache);
    first();
    let _ = fadvise(fd, off, len, libc::POSIX_FADV_DONTNEED);
    let after = cachestat(fd, off, len).map_or(before, |c| c.cache);
    before.saturating_sub(after)
}

/// sync_file_range(WRITE): starts writeback without waiting and without touching the
/// file's error state (only the WAIT flags consume writeback errors).
pub fn start_writeback(fd: i32, off: u64, len: u64) -> Result<(), Errno> {
    if len == 0 {
        return Ok(());
    }
    // SAFETY: kernel-checked: integers only.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_sync_file_range,
            fd,
            off as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    })?;
    Ok(())
}

/// Whether the range is clean yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    Clean,
    /// Still dirty or under writeback when the budget ran out.
    TimedOut,
    /// cachestat could not tell.
    Unknown,
}

/// Waits until `len` bytes at `off` have no dirty or writeback pages, polling cachestat
/// with a growing sleep, for at most `budget_ms` and while `keep_going` says so. Deliberately not sync_file_range(WAIT_*):
/// that marks a writeback error as seen on the program's open file, and its own fsync
/// would then miss it.
pub fn wait_clean(
    fd: i32,
    off: u64,
    len: u64,
    budget_ms: u64,
    keep_going: impl Fn() -> bool,
) -> Settled {
    let mut slept_us = 0u64;
    let mut nap_us = 50u64;
    loop {
        match cachestat(fd, off, len) {
            Ok(cs) if cs.dirty == 0 && cs.writeback == 0 => return Settled::Clean,
            Ok(_) => {}
            Err(_) => return Settled::Unknown,
        }
        if slept_us >= budget_ms * 1000 || !keep_going() {
            return Settled::TimedOut;
        }
        crate::thread::sleep_us(nap_us);
        slept_us += nap_us;
        nap_us = (nap_us * 2).min(2000);
    }
}

/// Asks the kernel to read `start..end` ahead, in calls of at most `chunk` bytes ending on
/// multiples of it: on 6.18 one WILLNEED call reads only max(io_pages, ra_pages) of the
/// device from its offset. `keep_going` is asked between calls, so a long prefetch can be
/// abandoned. Returns the bytes asked for.
pub fn prefetch(fd: i32, start: u64, end: u64, chunk: u64, keep_going: impl Fn() -> bool) -> u64 {
    let chunk = chunk.max(PAGE);
    let mut off = start;
    while off < end && keep_going() {
        let to = (off / chunk + 1).saturating_mul(chunk).min(end);
        if fadvise(fd, off, to - off, libc::POSIX_FADV_WILLNEED).is_err() {
            break;
        }
        off = to;
    }
    off.saturating_sub(start)
}

/// Cached pages of `len` bytes at `off`, or `None` where cachestat can't tell (before 6.5;
/// files the caller may not write): the residency question the policy's proof asks.
pub fn cached_pages(fd: i32, off: u64, len: u64) -> Option<u64> {
    cachestat(fd, off, len).ok().map(|c| c.cache)
}
