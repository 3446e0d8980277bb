//! File descriptors: what an fd is (fstat, flags, position), the shim's own fds (opened
//! close-on-exec and moved above the program's numbers), and raw writes for reports.

use crate::{Errno, cvt};
use libc::c_int;

/// What `fstat` says of an fd, as far as the shim cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    /// The device a device node stands for (0 for other files).
    pub rdev: u64,
    nlink: u64,
}

impl FileId {
    pub(crate) fn from_stat(st: &libc::stat) -> FileId {
        FileId {
            dev: st.st_dev,
            ino: st.st_ino,
            size: st.st_size as u64,
            mode: st.st_mode,
            rdev: st.st_rdev,
            nlink: st.st_nlink,
        }
    }
    pub fn regular(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }
    pub fn directory(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFDIR
    }
    /// Hard links: 0 once the file was deleted (an open fd keeps its space).
    pub fn nlink(&self) -> u64 {
        self.nlink
    }
}

pub fn identify(fd: i32) -> Result<FileId, Errno> {
    // SAFETY: kernel-checked: `stat` is plain data, all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: `st` is a local that outlives the call.
    cvt(|| unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) })?;
    Ok(FileId::from_stat(&st))
}

/// The fd's status flags (F_GETFL).
pub fn status_flags(fd: i32) -> Result<c_int, Errno> {
    // SAFETY: kernel-checked: integers only.
    cvt(|| unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_GETFL) }).map(|r| r as c_int)
}

/// The kernel file position of `fd`.
pub fn position(fd: i32) -> Result<u64, Errno> {
    // SAFETY: kernel-checked: integers only.
    cvt(|| unsafe { libc::syscall(libc::SYS_lseek, fd, 0i64, libc::SEEK_CUR) }).map(|r| r as u64)
}

/// Moves an own fd's position to `pos` (never a program's fd: the position is shared).
pub fn seek_own(fd: i32, pos: u64) -> Result<u64, Errno> {
    // SAFETY: kernel-checked: integers only; own fd.
    cvt(|| unsafe { libc::syscall(libc::SYS_lseek, fd, pos as i64, libc::SEEK_SET) })
        .map(|r| r as u64)
}

pub fn close_own(fd: i32) {
    // SAFETY: own fd: nobody else uses or closes it.
    let _ = cvt(|| unsafe { libc::syscall(libc::SYS_close, fd) });
}

/// An fd of the shim's own, closed when dropped.
#[derive(Debug)]
pub struct OwnFd(i32);

impl OwnFd {
    /// Takes ownership of an fd the shim opened for itself.
    pub fn from_raw(fd: i32) -> OwnFd {
        OwnFd(fd)
    }
    pub fn raw(&self) -> i32 {
        self.0
    }
    /// Gives up ownership: the caller closes it (with `close_own`).
    pub fn into_raw(self) -> i32 {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
}

impl Drop for OwnFd {
    fn drop(&mut self) {
        close_own(self.0)
    }
}

/// Moves a fd of the shim's own above the numbers the program is likely to use, close-on-
/// exec, so that the program's own next open gets the number it would have got.
pub fn move_high(fd: i32) -> Result<OwnFd, Errno> {
    use std::sync::atomic::{AtomicI64, Ordering::Relaxed};
    // High, but not so high that the kernel grows the fd table (copied at every fork) to
    // a million slots where the soft limit is that big. Computed once (a getrlimit per
    // reopened file was one system call in 25 of a tree copy's), again if the program
    // lowered its limit below it since (EINVAL).
    static FLOOR: AtomicI64 = AtomicI64::new(0);
    let floor_now = || {
        let f = (crate::proc::fd_limit().min(1024) as i64 - 64).max(64);
        FLOOR.store(f, Relaxed);
        f
    };
    let low = OwnFd(fd);
    let dup_above = |floor: i64| {
        // SAFETY: kernel-checked: integers only; `low` is our own fd.
        cvt(|| unsafe { libc::syscall(libc::SYS_fcntl, low.raw(), libc::F_DUPFD_CLOEXEC, floor) })
    };
    let floor = match FLOOR.load(Relaxed) {
        0 => floor_now(),
        f => f,
    };
    let high = match dup_above(floor) {
        Err(e) if e.0 == libc::EINVAL => dup_above(floor_now())?,
        r => r?,
    };
    Ok(OwnFd(high as i32))
}

/// pread of an own fd at `off` into `buf`: the fd's position is left alone.
pub fn read_at(fd: &OwnFd, buf: &mut [u8], off: u64) -> Result<usize, Errno> {
    // SAFETY: own buffer: the kernel writes at most buf.len() bytes into `buf`; own fd.
    let n = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_pread64,
            fd.raw(),
            buf.as_mut_ptr(),
            buf.len(),
            off as i64,
        )
    })?;
    Ok(n as usize)
}

/// Opens a NUL-terminated path (relative to `dirfd`) read-only and close-on-exec, as an fd
/// of the shim's own moved high. `flags` are added (O_DIRECTORY, O_NOATIME).
pub fn open_own(dirfd: i32, path: &std::ffi::CStr, flags: c_int) -> Result<OwnFd, Errno> {
    // SAFETY: own buffer: `path` is NUL-terminated and outlives the call.
    let fd = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_openat,
            dirfd,
            path.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | flags,
            0,
        )
    })?;
    move_high(fd as i32)
}

/// `/proc/self/fd/N`, NUL-terminated, in `buf`: the one place that spells it.
pub fn proc_fd_path(buf: &mut [u8; 32], fd: i32) -> &std::ffi::CStr {
    use std::io::Write;
    let mut w = &mut buf[..];
    let _ = write!(w, "/proc/self/fd/{fd}\0");
    std::ffi::CStr::from_bytes_until_nul(&buf[..]).unwrap_or(c"")
}

/// A new read-only open file of what the program's `fd` refers to, for the shim's own use
/// (the program may close its fd right after mmap). Shares no offset or flags with it.
pub fn reopen(fd: i32) -> Result<OwnFd, Errno> {
    let mut buf = [0u8; 32];
    let path = proc_fd_path(&mut buf, fd);
    // O_NOATIME needs ownership.
    open_own(libc::AT_FDCWD, path, libc::O_NOATIME).or_else(|_| open_own(libc::AT_FDCWD, path, 0))
}

/// The path the program's `fd` names (readlink of /proc/self/fd/N), NUL-terminated in
/// `out`; returns its length.
pub fn fd_path(fd: i32, out: &mut [u8; 4097]) -> Result<usize, Errno> {
    let mut buf = [0u8; 32];
    let link = proc_fd_path(&mut buf, fd);
    // SAFETY: own buffer: `out` has room for PATH_MAX bytes plus the NUL written below.
    let n = cvt(|| unsafe {
        libc::syscall(libc::SYS_readlink, link.as_ptr(), out.as_mut_ptr(), 4096)
    })? as usize;
    out[n] = 0;
    Ok(n)
}

/// Whether the filesystem of `fd` takes RWF_DONTCACHE reads. The flag is checked before
/// anything is read, and a read past the largest file size returns 0 without I/O, so the
/// probe reads nothing and starts no readahead.
pub fn probe_dontcache(fd: i32) -> bool {
    let mut b = [0u8; 1];
    let iov = libc::iovec {
        iov_base: b.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let beyond_any_file = i64::MAX / 2;
    // SAFETY: own buffer: one iovec over a local byte.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_preadv2,
            fd,
            &iov as *const libc::iovec,
            1,
            beyond_any_file,
            0i64,
            libc::RWF_DONTCACHE,
        )
    })
    .is_ok()
}

/// Writes all of `bytes` to `fd` with raw write(2); gives up at the first error.
pub fn write_all(fd: i32, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: own buffer: `bytes` is a live slice.
        match cvt(|| unsafe { libc::syscall(libc::SYS_write, fd, bytes.as_ptr(), bytes.len()) }) {
            Ok(n) if n > 0 => bytes = &bytes[n as usize..],
            _ => return,
        }
    }
}

/// Appends `bytes` to the file at `path`, creating it (mode 0644).
pub fn append_to(path: &std::ffi::CStr, bytes: &[u8]) -> Result<(), Errno> {
    // SAFETY: own buffer: `path` is NUL-terminated and outlives the call.
    let fd = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC,
            0o644,
        )
    })? as i32;
    write_all(fd, bytes);
    close_own(fd);
    Ok(())
}

/// Whether the NUL-terminated `path` matches the glob `pattern` (fnmatch without
/// FNM_PATHNAME, so `*` spans directories). A `path` without a NUL matches nothing.
pub fn glob_matches(pattern: &std::ffi::CStr, path: &[u8]) -> bool {
    let Ok(path) = std::ffi::CStr::from_bytes_until_nul(path) else {
        return false;
    };
    // SAFETY: own buffer: both strings are NUL-terminated and outlive the call; fnmatch
    // only reads them.
    unsafe { libc::fnmatch(pattern.as_ptr(), path.as_ptr(), 0) == 0 }
}

/// What statx says of a file, for the launcher's tools (walking trees, counting hard links
/// once, staying on one filesystem).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mode: u32,
    pub nlink: u64,
    pub uid: u32,
    /// The device a device node stands for (0 for other files).
    pub rdev: u64,
}

impl Meta {
    pub fn file_type(&self) -> u32 {
        self.mode & libc::S_IFMT
    }
    pub fn regular(&self) -> bool {
        self.file_type() == libc::S_IFREG
    }
    pub fn directory(&self) -> bool {
        self.file_type() == libc::S_IFDIR
    }
}

fn statx(dirfd: i32, name: &std::ffi::CStr, flags: c_int) -> Result<Meta, Errno> {
    // SAFETY: kernel-checked: `statx` is plain data, all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    let mask = libc::STATX_TYPE
        | libc::STATX_MODE
        | libc::STATX_NLINK
        | libc::STATX_UID
        | libc::STATX_INO
        | libc::STATX_SIZE;
    // SAFETY: own buffer: `name` is NUL-terminated and `stx` a local, both outliving the call.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_statx,
            dirfd,
            name.as_ptr(),
            flags,
            mask,
            &mut stx as *mut libc::statx,
        )
    })?;
    Ok(Meta {
        dev: libc::makedev(stx.stx_dev_major, stx.stx_dev_minor),
        ino: stx.stx_ino,
        size: stx.stx_size,
        mode: u32::from(stx.stx_mode),
        nlink: u64::from(stx.stx_nlink),
        uid: stx.stx_uid,
        rdev: libc::makedev(stx.stx_rdev_major, stx.stx_rdev_minor),
    })
}

/// statx of `name` relative to `dirfd` (`libc::AT_FDCWD` for the working directory);
/// a symlink itself unless `follow`.
pub fn meta_at(dirfd: i32, name: &std::ffi::CStr, follow: bool) -> Result<Meta, Errno> {
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    statx(dirfd, name, flags)
}

/// statx of an open fd.
pub fn meta(fd: i32) -> Result<Meta, Errno> {
    statx(fd, c"", libc::AT_EMPTY_PATH)
}

/// Opens `name` relative to `dirfd` read-only and close-on-exec with `flags` added
/// (O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK...), as an fd closed when dropped. For the
/// launcher's tools, which own their fd table: the number is not moved high.
pub fn open_at(dirfd: i32, name: &std::ffi::CStr, flags: c_int) -> Result<OwnFd, Errno> {
    // SAFETY: own buffer: `name` is NUL-terminated and outlives the call.
    let fd = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_openat,
            dirfd,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC | flags,
            0,
        )
    })?;
    Ok(OwnFd::from_raw(fd as i32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_of_paths_and_fds_agree() {
        let by_path = meta_at(libc::AT_FDCWD, c"/proc/self/exe", true).unwrap();
        let link = meta_at(libc::AT_FDCWD, c"/proc/self/exe", false).unwrap();
        assert!(by_path.regular());
        assert_eq!(link.file_type(), libc::S_IFLNK);
        let fd = open_at(libc::AT_FDCWD, c"/proc/self/exe", libc::O_NONBLOCK).unwrap();
        assert_eq!(meta(fd.raw()).unwrap(), by_path);
        let dir = open_at(libc::AT_FDCWD, c"/", libc::O_DIRECTORY).unwrap();
        assert!(meta(dir.raw()).unwrap().directory());
        assert_eq!(
            open_at(libc::AT_FDCWD, c"/proc/self/exe", libc::O_NOFOLLOW).unwrap_err(),
            Errno(libc::ELOOP)
        );
    }
}
