//! A claim on a process, so that two watchers never act on one: an abstract unix socket
//! named after the process (pid and start time). The kernel releases it when its fd is
//! closed, so a watcher killed with SIGKILL leaves no stale claim behind.

use crate::file::OwnFd;
use crate::{Errno, cvt};

/// Claims process `pid` (started at `start`): EADDRINUSE when another watcher holds it.
pub fn claim(pid: i32, start: u64) -> Result<OwnFd, Errno> {
    // SAFETY: kernel-checked: integers only.
    let fd = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_socket,
            libc::AF_UNIX,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    let fd = OwnFd::from_raw(fd as i32);
    // SAFETY: kernel-checked: sockaddr_un is plain data, all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let name = format!("dropbehind-watch:{pid}:{start}");
    // sun_path[0] stays 0: the abstract namespace.
    for (d, s) in addr.sun_path[1..].iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
    // SAFETY: own buffer: `addr` is a live local of at least `len` bytes; own fd.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_bind,
            fd.raw(),
            &addr as *const libc::sockaddr_un,
            len,
        )
    })?;
    Ok(fd)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_claim_is_refused_and_freed_on_close() {
        let a = super::claim(1, 12345).unwrap();
        assert_eq!(super::claim(1, 12345).unwrap_err().0, libc::EADDRINUSE);
        drop(a);
        assert!(super::claim(1, 12345).is_ok());
    }
}
