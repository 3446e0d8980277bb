//! The process's own memory: advice on mapped ranges, safe peeks, fault counts.

use crate::{Errno, cvt};
use libc::c_int;

/// madvise on an address range of the program's. The caller guarantees the range is still
/// the mapping it means (the preload's mapping watcher takes a mapping before the program
/// may change it).
pub fn madvise(addr: usize, len: usize, advice: c_int) -> Result<(), Errno> {
    // SAFETY: kernel-checked: the kernel validates the range; the advice values used
    // (WILLNEED, COLD, PAGEOUT, RANDOM, NORMAL) never discard data.
    cvt(|| unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice) })?;
    Ok(())
}

/// Reads an i64 at `p` in our own memory, or `None` where that would fault: the kernel
/// copies it (process_vm_readv on ourselves) and reports EFAULT instead of a signal.
pub fn peek_i64(p: *const i64) -> Option<i64> {
    let mut v: i64 = 0;
    let local = libc::iovec {
        iov_base: (&mut v as *mut i64).cast(),
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: p as *mut libc::c_void,
        iov_len: 8,
    };
    // SAFETY: kernel-checked: the kernel validates `remote`; own buffer: `local` is a
    // local variable.
    let n = cvt(|| unsafe {
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
    });
    (n == Ok(8)).then_some(v)
}

/// Page faults of the whole process so far (all threads).
pub fn page_faults() -> u64 {
    // SAFETY: kernel-checked: `rusage` is plain data, all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: `ru` is a local.
    let _ = cvt(|| unsafe { libc::syscall(libc::SYS_getrusage, libc::RUSAGE_SELF, &mut ru) });
    (ru.ru_minflt + ru.ru_majflt) as u64
}

/// Bit 63 of a /proc/self/pagemap entry: the page is mapped in this process.
pub const PAGEMAP_PRESENT: u64 = 1 << 63;

/// Reads the /proc/self/pagemap entries of the pages from `addr` into `out`. Returns how
/// many were read.
pub fn pagemap(pagemap_fd: i32, addr: usize, out: &mut [u64]) -> usize {
    let off = (addr / 4096 * 8) as i64;
    // SAFETY: own buffer: the kernel writes at most out.len() * 8 bytes into `out`.
    let n = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_pread64,
            pagemap_fd,
            out.as_mut_ptr(),
            out.len() * 8,
            off,
        )
    });
    n.map_or(0, |n| n as usize / 8)
}
