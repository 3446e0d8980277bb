//! Effects: the one place that performs page-cache syscalls on the program's files.
//!
//! Raw syscalls throughout: libc's wrappers of functions the shim also exports would route
//! back into the shim. Every function here leaves errno as it found it.

use crate::policy::{PROOF_BLOCK, PROOF_CHUNK, Range};
use crate::residency::{cachestat, errno, set_errno};
use libc::{c_int, c_long};

/// Saves errno on creation and puts it back when dropped.
pub struct ErrnoGuard(i32);

impl ErrnoGuard {
    pub fn new() -> ErrnoGuard {
        ErrnoGuard(errno())
    }
}

impl Drop for ErrnoGuard {
    fn drop(&mut self) {
        set_errno(self.0)
    }
}

fn syscall_ok(r: c_long) -> bool {
    r >= 0
}

pub fn fadvise(fd: i32, r: Range, advice: c_int) -> bool {
    let _e = ErrnoGuard::new();
    if r.is_empty() {
        return true;
    }
    // SAFETY: plain syscall on integers.
    syscall_ok(unsafe {
        libc::syscall(
            libc::SYS_fadvise64,
            fd,
            r.start as i64,
            r.len() as i64,
            advice,
        )
    })
}

/// Drops the clean pages of `r`. Returns the pages it released, where cachestat can tell.
pub fn drop_range(fd: i32, r: Range) -> u64 {
    let before = cachestat(fd, r.start, r.len())
        .map(|c| c.cache)
        .unwrap_or(0);
    fadvise(fd, r, libc::POSIX_FADV_DONTNEED);
    let after = cachestat(fd, r.start, r.len())
        .map(|c| c.cache)
        .unwrap_or(before);
    before.saturating_sub(after)
}

/// Snapshot of one proof block: bit i set when chunk i had no cached page. `None` when
/// residency can't be known (no cachestat, or no write permission): then nothing is owned.
pub fn uncached_chunks(fd: i32, block: u64) -> Option<u64> {
    let _e = ErrnoGuard::new();
    let off = block * PROOF_BLOCK;
    let whole = cachestat(fd, off, PROOF_BLOCK).ok()?;
    if whole.cache == 0 {
        return Some(!0);
    }
    if whole.cache >= PROOF_BLOCK / 4096 {
        return Some(0);
    }
    let mut bits = 0u64;
    for c in 0..64 {
        let cs = cachestat(fd, off + c * PROOF_CHUNK, PROOF_CHUNK).ok()?;
        if cs.cache == 0 {
            bits |= 1 << c;
        }
    }
    Some(bits)
}

/// sync_file_range(WRITE): starts writeback without waiting and without touching the
/// file's error state (only the WAIT flags consume writeback errors).
pub fn start_writeback(fd: i32, r: Range) {
    let _e = ErrnoGuard::new();
    if r.is_empty() {
        return;
    }
    // SAFETY: plain syscall on integers.
    unsafe {
        libc::syscall(
            libc::SYS_sync_file_range,
            fd,
            r.start as i64,
            r.len() as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
}

/// Waits until `r` has no dirty or writeback pages, polling cachestat with a growing sleep,
/// for at most `budget_ms`. Deliberately not sync_file_range(WAIT_*): that marks a writeback
/// error as seen on the program's open file, and its own fsync would then miss it.
pub fn wait_clean(fd: i32, r: Range, budget_ms: u64) -> bool {
    let _e = ErrnoGuard::new();
    let mut slept_us = 0u64;
    let mut nap_us = 50u64;
    loop {
        match cachestat(fd, r.start, r.len()) {
            Ok(cs) if cs.dirty == 0 && cs.writeback == 0 => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
        if slept_us >= budget_ms * 1000 {
            return false;
        }
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: (nap_us * 1000) as i64,
        };
        // SAFETY: valid timespec; an interrupted sleep just polls again.
        unsafe {
            libc::syscall(
                libc::SYS_nanosleep,
                &ts as *const libc::timespec,
                std::ptr::null_mut::<libc::timespec>(),
            )
        };
        slept_us += nap_us;
        nap_us = (nap_us * 2).min(2000);
    }
}

/// The kernel file position of `fd`.
pub fn position(fd: i32) -> Option<u64> {
    let _e = ErrnoGuard::new();
    // SAFETY: plain syscall on integers.
    let r = unsafe { libc::syscall(libc::SYS_lseek, fd, 0i64, libc::SEEK_CUR) };
    (r >= 0).then_some(r as u64)
}

pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub regular: bool,
}

pub fn identify(fd: i32) -> Option<FileId> {
    let _e = ErrnoGuard::new();
    // SAFETY: `st` is written by the kernel.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) };
    if r != 0 {
        return None;
    }
    Some(FileId {
        dev: st.st_dev,
        ino: st.st_ino,
        size: st.st_size as u64,
        regular: st.st_mode & libc::S_IFMT == libc::S_IFREG,
    })
}

pub fn status_flags(fd: i32) -> Option<c_int> {
    let _e = ErrnoGuard::new();
    // SAFETY: plain syscall on integers.
    let r = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) };
    (r >= 0).then_some(r as c_int)
}

/// Whether the filesystem of `fd` takes RWF_DONTCACHE reads. The flag is checked before
/// anything is read, and a read past the largest file size returns 0 without I/O, so the
/// probe reads nothing and starts no readahead.
pub fn probe_dontcache(fd: i32) -> bool {
    let _e = ErrnoGuard::new();
    let mut b = [0u8; 1];
    let iov = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let beyond_any_file = i64::MAX / 2;
    // SAFETY: one valid iovec.
    let r = unsafe {
        libc::syscall(
            libc::SYS_preadv2,
            fd,
            &iov as *const libc::iovec,
            1,
            beyond_any_file,
            0i64,
            libc::RWF_DONTCACHE,
        )
    };
    r >= 0
}

/// `read` as `preadv2(fd, iov, 1, -1, RWF_DONTCACHE)`: same bytes, same file position.
/// Calls the real preadv2 so that thread cancellation behaves as for read.
pub fn read_dontcache(
    preadv2: unsafe extern "C" fn(c_int, *const libc::iovec, c_int, libc::off_t, c_int) -> isize,
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: libc::off_t,
    flags: c_int,
) -> isize {
    // SAFETY: the caller's own buffers, passed through unchanged.
    unsafe { preadv2(fd, iov, iovcnt, off, flags | libc::RWF_DONTCACHE) }
}

/// Reads an i64 at `p` in our own memory, or `None` where that would fault: the kernel
/// copies it (process_vm_readv on ourselves) and reports EFAULT instead of a signal.
pub fn peek_i64(p: *const i64) -> Option<i64> {
    let _e = ErrnoGuard::new();
    let mut v: i64 = 0;
    let local = libc::iovec {
        iov_base: (&mut v as *mut i64).cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: p as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: the kernel validates `remote`; `local` is our own stack variable.
    let n = unsafe {
        libc::syscall(
            libc::SYS_process_vm_readv,
            libc::getpid(),
            &local as *const libc::iovec,
            1usize,
            &remote as *const libc::iovec,
            1usize,
            // variadic: a full-width zero, or the upper half of `flags` is garbage (EINVAL)
            0usize,
        )
    };
    (n == 8).then_some(v)
}

/// Asks the kernel to read `r` ahead, in calls of at most `chunk` bytes: on 6.18 one
/// WILLNEED call reads only max(io_pages, ra_pages) of the device from its offset.
/// `keep_going` is asked between calls, so a long prefetch can be abandoned.
pub fn prefetch(fd: i32, r: Range, chunk: u64, keep_going: impl Fn() -> bool) -> u64 {
    let mut off = r.start;
    let mut done = 0;
    let chunk = chunk.max(crate::policy::PAGE);
    while off < r.end && keep_going() {
        // Calls end on multiples of `chunk`: whole device-sized requests.
        let end = (off / chunk + 1).saturating_mul(chunk).min(r.end);
        if !fadvise(fd, Range::new(off, end), libc::POSIX_FADV_WILLNEED) {
            break;
        }
        done += end - off;
        off = end;
    }
    done
}

/// The block device behind `dev`: its readahead and its largest request, in bytes (from
/// sysfs; a partition's queue is its disk's). `None` for devices without a queue (btrfs's
/// anonymous devices, network and FUSE filesystems).
pub fn device_limits(dev: u64) -> Option<(u64, u64)> {
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    let read = |name: &str| {
        for parent in ["", "../"] {
            let mut path = [0u8; 96];
            let mut w = &mut path[..];
            use std::io::Write;
            if write!(w, "/sys/dev/block/{maj}:{min}/{parent}queue/{name}\0").is_err() {
                return None;
            }
            if let Some(kb) = read_small_number(&path) {
                return Some(kb * 1024);
            }
        }
        None
    };
    Some((read("read_ahead_kb")?, read("max_sectors_kb").unwrap_or(0)))
}

/// Reads a decimal number from a small file named by the NUL-terminated `path`, without
/// allocating.
fn read_small_number(path: &[u8]) -> Option<u64> {
    let _e = ErrnoGuard::new();
    let path = std::ffi::CStr::from_bytes_until_nul(path).ok()?;
    read_proc(path, &mut [0u8; 32])?.trim().parse().ok()
}

/// madvise on an address range of the program's. The caller guarantees the range is still
/// the mapping it means (see `mapwatch`).
pub fn madvise(addr: usize, len: usize, advice: c_int) -> bool {
    let _e = ErrnoGuard::new();
    // SAFETY: advice only; the range is checked by the caller.
    syscall_ok(unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) })
}

/// Reads the /proc/self/pagemap entries of the pages from `addr` into `out`. Returns how
/// many were read. Bit 63 of an entry: the page is mapped in this process.
pub fn pagemap(pagemap_fd: i32, addr: usize, out: &mut [u64]) -> usize {
    let _e = ErrnoGuard::new();
    let off = (addr / crate::policy::PAGE as usize * 8) as i64;
    // SAFETY: the kernel writes at most out.len() * 8 bytes.
    let n = unsafe {
        libc::syscall(
            libc::SYS_pread64,
            pagemap_fd,
            out.as_mut_ptr(),
            out.len() * 8,
            off,
        )
    };
    if n <= 0 { 0 } else { n as usize / 8 }
}

pub const PAGEMAP_PRESENT: u64 = 1 << 63;

/// Page faults of the whole process so far (all threads).
pub fn page_faults() -> u64 {
    let _e = ErrnoGuard::new();
    // SAFETY: getrusage writes `ru`.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::syscall(libc::SYS_getrusage, libc::RUSAGE_SELF, &mut ru) };
    (ru.ru_minflt + ru.ru_majflt) as u64
}

/// Moves a fd of the shim's own above the numbers the program is likely to use, close-on-
/// exec, so that the program's own next open gets the number it would have got.
pub fn move_high(fd: i32) -> Option<i32> {
    let _e = ErrnoGuard::new();
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes `lim`; fcntl and close on our own fd.
    unsafe { libc::syscall(libc::SYS_getrlimit, libc::RLIMIT_NOFILE, &mut lim) };
    // High, but not so high that the kernel grows the fd table (copied at every fork) to
    // a million slots where the soft limit is that big.
    let floor = (lim.rlim_cur.min(1024) as i64 - 64).max(64);
    let high = unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, floor) } as i32;
    unsafe { libc::syscall(libc::SYS_close, fd) };
    (high >= 0).then_some(high)
}

/// A new read-only open file of what the program's `fd` refers to, for the shim's own use
/// (the program may close its fd right after mmap).
pub fn reopen(fd: i32) -> Option<i32> {
    let _e = ErrnoGuard::new();
    let mut path = [0u8; 32];
    {
        use std::io::Write;
        let mut w = &mut path[..];
        write!(w, "/proc/self/fd/{fd}\0").ok()?;
    }
    // SAFETY: NUL-terminated path.
    let own = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOATIME,
        )
    } as i32;
    let own = if own < 0 {
        // O_NOATIME needs ownership.
        (unsafe {
            libc::syscall(
                libc::SYS_openat,
                libc::AT_FDCWD,
                path.as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            )
        }) as i32
    } else {
        own
    };
    if own < 0 {
        return None;
    }
    move_high(own)
}

pub fn close_own(fd: i32) {
    let _e = ErrnoGuard::new();
    // SAFETY: our own fd.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// Opens /proc/self/pagemap for the shim's own use.
pub fn open_pagemap() -> Option<i32> {
    let _e = ErrnoGuard::new();
    // SAFETY: NUL-terminated path.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            c"/proc/self/pagemap".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    } as i32;
    if fd < 0 { None } else { move_high(fd) }
}

/// Reads a small file (/proc, /sys) into `buf` with raw calls (one read: what fits), as text.
fn read_proc<'a>(path: &std::ffi::CStr, buf: &'a mut [u8]) -> Option<&'a str> {
    // SAFETY: NUL-terminated path; `buf` outlives the read.
    let n = unsafe {
        let fd = libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return None;
        }
        let n = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
        libc::syscall(libc::SYS_close, fd);
        n
    };
    std::str::from_utf8(&buf[..n.max(0) as usize]).ok()
}

/// Threads in this process (/proc/self/stat, field 20).
pub fn thread_count() -> Option<u64> {
    let _e = ErrnoGuard::new();
    let mut buf = [0u8; 1024];
    let text = read_proc(c"/proc/self/stat", &mut buf)?;
    // Fields after the command name, which may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(17)?.parse().ok()
}

/// Whether a seccomp filter (or strict mode) is on for the calling thread
/// (/proc/thread-self/status, `Seccomp:`). Unknown counts as filtered.
pub fn seccomp_filtered() -> bool {
    let _e = ErrnoGuard::new();
    let mut buf = [0u8; 4096];
    read_proc(c"/proc/thread-self/status", &mut buf).is_none_or(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("Seccomp:"))
            .is_none_or(|mode| mode.trim() != "0")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_numbers_read_from_proc_and_sys() {
        assert!(read_small_number(b"/proc/sys/kernel/pid_max\0").is_some_and(|n| n > 0));
        // As device_limits builds paths: a NUL, then the rest of the buffer.
        let mut path = [0u8; 64];
        path[..24].copy_from_slice(b"/proc/sys/kernel/pid_max");
        assert!(read_small_number(&path).is_some_and(|n| n > 0));
        assert_eq!(read_small_number(b"/nonexistent\0"), None);
    }
}
