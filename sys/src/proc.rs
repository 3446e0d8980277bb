//! Small files of /proc and /sys, read with raw calls into stack buffers (no allocation).

use crate::file::{OwnFd, open_own};
use crate::{Errno, cvt};
use std::ffi::CStr;

/// Reads a small file into `buf` (one read: what fits), as text.
pub fn read_small<'a>(path: &CStr, buf: &'a mut [u8]) -> Result<&'a str, Errno> {
    // SAFETY: own buffer: `path` is NUL-terminated and outlives the call.
    let fd = OwnFd::from_raw(cvt(|| unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    })? as i32);
    // SAFETY: own buffer: the kernel writes at most buf.len() bytes into `buf`; own fd.
    let n =
        cvt(|| unsafe { libc::syscall(libc::SYS_read, fd.raw(), buf.as_mut_ptr(), buf.len()) })?;
    std::str::from_utf8(&buf[..n as usize]).map_err(|_| Errno(libc::EINVAL))
}

/// A decimal number from a small file named by the NUL-terminated bytes `path`.
pub fn read_small_number(path: &[u8]) -> Option<u64> {
    let path = CStr::from_bytes_until_nul(path).ok()?;
    read_small(path, &mut [0u8; 32]).ok()?.trim().parse().ok()
}

/// Opens /proc/self/stat for the shim's own use, for `thread_count`.
pub fn open_stat() -> Result<OwnFd, Errno> {
    open_own(libc::AT_FDCWD, c"/proc/self/stat", 0)
}

/// Threads in this process (field 20 of /proc/self/stat), read again through `stat_fd`
/// (from `open_stat`) at offset 0: no fd is made, so a helper thread may ask.
pub fn thread_count(stat_fd: i32) -> Option<u64> {
    let mut buf = [0u8; 1024];
    // SAFETY: own buffer: the kernel writes at most buf.len() bytes into `buf`; pread leaves
    // the fd's offset alone, and refuses (ESPIPE) an fd that is not a seekable file.
    let n = cvt(|| unsafe {
        libc::syscall(libc::SYS_pread64, stat_fd, buf.as_mut_ptr(), buf.len(), 0)
    })
    .ok()?;
    let text = std::str::from_utf8(&buf[..n as usize]).ok()?;
    // Fields after the command name, which may hold spaces and parentheses.
    let rest = &text[text.rfind(')')? + 1..];
    rest.split_whitespace().nth(17)?.parse().ok()
}

/// Whether a seccomp filter (or strict mode) is on for the calling thread
/// (/proc/thread-self/status, `Seccomp:`). Unknown counts as filtered.
pub fn seccomp_filtered() -> bool {
    let mut buf = [0u8; 4096];
    read_small(c"/proc/thread-self/status", &mut buf).map_or(true, |text| {
        text.lines()
            .find_map(|l| l.strip_prefix("Seccomp:"))
            .is_none_or(|mode| mode.trim() != "0")
    })
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

/// Opens /proc/self/pagemap for the shim's own use.
pub fn open_pagemap() -> Result<OwnFd, Errno> {
    open_own(libc::AT_FDCWD, c"/proc/self/pagemap", 0)
}

/// This process's command name (/proc/self/comm), for reports.
pub fn comm(buf: &mut [u8; 32]) -> &str {
    read_small(c"/proc/self/comm", buf).map_or("", str::trim)
}

/// The soft limit on open fds (RLIMIT_NOFILE); 0 when it can't be read.
pub fn fd_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: own buffer: `lim` is a local.
    let _ = cvt(|| unsafe { libc::syscall(libc::SYS_getrlimit, libc::RLIMIT_NOFILE, &mut lim) });
    lim.rlim_cur
}

/// This process's id.
pub fn pid() -> i32 {
    // SAFETY: kernel-checked: getpid takes nothing and cannot fail.
    unsafe { libc::getpid() }
}

/// This process's effective user and group ids.
pub fn effective_ids() -> (u32, u32) {
    // SAFETY: kernel-checked: geteuid and getegid take nothing and cannot fail.
    unsafe { (libc::geteuid(), libc::getegid()) }
}

/// linux/capability.h: bulkstat and other filesystem administration.
pub const CAP_SYS_ADMIN: u32 = 21;

/// Whether the calling thread holds capability `cap` (`CAP_*` above) in its effective set,
/// by `capget`, which checks nothing and so leaves no audit record where an LSM would log a
/// denied use. Unknown counts as not held.
pub fn has_effective_cap(cap: u32) -> bool {
    /// struct __user_cap_header_struct and struct __user_cap_data_struct
    /// (linux/capability.h), which the libc crate does not declare.
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: own buffers: version 3 takes a header and two data words, both locals.
    let ok = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    })
    .is_ok();
    ok && cap < 64 && data[(cap / 32) as usize].effective & (1 << (cap % 32)) != 0
}

/// CPU time this process has used itself (not its children): (user, system) in µs.
pub fn own_cpu_us() -> (u64, u64) {
    // SAFETY: kernel-checked: `rusage` is plain data, all zeroes is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: `ru` is a local that outlives the call.
    let _ = crate::cvt(|| unsafe {
        libc::syscall(
            libc::SYS_getrusage,
            libc::RUSAGE_SELF,
            &mut ru as *mut libc::rusage,
        )
    });
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime), us(ru.ru_stime))
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

    #[test]
    fn threads_and_seccomp_of_the_test_process() {
        let stat = open_stat().unwrap();
        assert!(thread_count(stat.raw()).is_some_and(|n| n >= 1));
        assert!(!seccomp_filtered());
    }

    #[test]
    fn effective_caps_agree_with_proc_status() {
        let mut buf = [0u8; 4096];
        let text = read_small(c"/proc/thread-self/status", &mut buf).unwrap();
        let eff = text
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| u64::from_str_radix(v.trim(), 16).unwrap())
            .unwrap();
        for cap in [0, CAP_SYS_ADMIN, 40] {
            assert_eq!(has_effective_cap(cap), eff & (1 << cap) != 0, "cap {cap}");
        }
        assert!(!has_effective_cap(64));
    }
}
