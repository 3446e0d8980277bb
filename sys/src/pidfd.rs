//! Other processes held by pidfd: a pidfd names one process for good (a reused pid is a
//! different process), polls readable when it exits, and its permission checks are the
//! kernel's own. Also poll(2) over several fds, for the watcher's main loop.

use crate::file::OwnFd;
use crate::{Errno, cvt};

/// pidfd_open(2) (5.3): a close-on-exec fd for process `pid`. ESRCH when there is none.
pub fn open(pid: i32) -> Result<OwnFd, Errno> {
    // SAFETY: kernel-checked: integers only.
    let fd = cvt(|| unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    Ok(OwnFd::from_raw(fd as i32))
}

/// pidfd_getfd(2) (5.6): a duplicate of the target's fd `fd`, close-on-exec. It shares the
/// target's open file description (offset, flags, readahead state): the caller must never
/// read, seek, set flags or give sequential/random advice through it. Needs ptrace-attach
/// permission on the target, which makes it the kernel's own answer to "may I watch it".
pub fn getfd(pidfd: &OwnFd, fd: i32) -> Result<OwnFd, Errno> {
    // SAFETY: kernel-checked: integers only; `pidfd` is our own fd.
    let r = cvt(|| unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.raw(), fd, 0) })?;
    Ok(OwnFd::from_raw(r as i32))
}

/// Whether the process behind `pidfd` has exited (its pidfd polls readable).
pub fn exited(pidfd: &OwnFd) -> bool {
    let mut p = [libc::pollfd {
        fd: pidfd.raw(),
        events: libc::POLLIN,
        revents: 0,
    }];
    matches!(poll(&mut p, 0), Ok(n) if n > 0) && p[0].revents != 0
}

/// poll(2) over `fds` for at most `timeout_ms` (-1: forever). Returns how many are ready;
/// an interrupted wait counts as none ready.
pub fn poll(fds: &mut [libc::pollfd], timeout_ms: i32) -> Result<usize, Errno> {
    let ts = libc::timespec {
        tv_sec: (timeout_ms.max(0) / 1000) as i64,
        tv_nsec: ((timeout_ms.max(0) % 1000) as i64) * 1_000_000,
    };
    let tsp = if timeout_ms < 0 {
        std::ptr::null()
    } else {
        &ts as *const libc::timespec
    };
    // SAFETY: own buffer: `fds` is a live slice of pollfd, `ts` a live local; no sigmask.
    match cvt(|| unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            fds.as_mut_ptr(),
            fds.len(),
            tsp,
            std::ptr::null::<libc::sigset_t>(),
            0usize,
        )
    }) {
        Ok(n) => Ok(n as usize),
        Err(Errno(libc::EINTR)) => Ok(0),
        Err(e) => Err(e),
    }
}

/// kcmp(KCMP_FILE): whether fd `fd1` of process `pid1` and fd `fd2` of `pid2` are the same
/// open file description. Needs ptrace-read permission on both.
pub fn same_open_file(pid1: i32, fd1: i32, pid2: i32, fd2: i32) -> Result<bool, Errno> {
    const KCMP_FILE: i32 = 0;
    // SAFETY: kernel-checked: integers only.
    let r = cvt(|| unsafe { libc::syscall(libc::SYS_kcmp, pid1, pid2, KCMP_FILE, fd1, fd2) })?;
    Ok(r == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_pidfd_is_alive_and_a_missing_pid_is_esrch() {
        let me = open(crate::proc::pid()).unwrap();
        assert!(!exited(&me));
        // pid_max is at most 2^22: this pid cannot exist.
        assert_eq!(open(i32::MAX).unwrap_err(), Errno(libc::ESRCH));
    }

    #[test]
    fn getfd_duplicates_and_kcmp_matches() {
        let me = open(crate::proc::pid()).unwrap();
        let dup = getfd(&me, 0).unwrap();
        let pid = crate::proc::pid();
        assert!(same_open_file(pid, 0, pid, dup.raw()).unwrap());
    }
}
