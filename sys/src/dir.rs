//! Directories, for the inode prefetch: listing with getdents64 on fds of our own, the
//! filesystem's type, and lookups by statx.

use crate::file::{OwnFd, open_own};
use crate::{Errno, cvt};
use std::ffi::{CStr, CString};

pub const EXT4_SUPER_MAGIC: i64 = 0xEF53;
pub const XFS_SUPER_MAGIC: i64 = 0x5846_5342;
pub const BTRFS_SUPER_MAGIC: i64 = 0x9123_683E;

/// Opens `.` of `dirfd` as a new fd of ours, close-on-exec and above the numbers the
/// program is likely to use. It shares no position with the program's directory stream.
pub fn open_self(dirfd: i32) -> Result<OwnFd, Errno> {
    open_own(dirfd, c".", libc::O_DIRECTORY)
}

/// One directory entry as getdents64 gives it.
pub struct Entry {
    pub ino: u64,
    pub name: CString,
    /// The position just after this entry (filesystem-specific cookie).
    pub next_off: i64,
    /// The entry's type as the directory records it (`libc::DT_REG`, `DT_DIR`, ...;
    /// `DT_UNKNOWN` where the filesystem does not say).
    pub kind: u8,
}

/// One getdents64 batch on an own fd into `out`: every entry but "." and "..". Returns the
/// bytes the kernel gave (0 at the end).
pub fn getdents(fd: i32, buf: &mut [u8], out: &mut Vec<Entry>) -> Result<usize, Errno> {
    // SAFETY: own buffer: the kernel writes at most buf.len() bytes into `buf`; own fd.
    let n = cvt(|| unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) })?
        as usize;
    let mut at = 0usize;
    // linux_dirent64: d_ino u64, d_off i64, d_reclen u16, d_type u8, d_name.
    while at + 19 <= n {
        let u64_at = |i: usize| u64::from_ne_bytes(buf[i..i + 8].try_into().unwrap_or([0; 8]));
        let ino = u64_at(at);
        let next_off = u64_at(at + 8) as i64;
        let reclen = u16::from_ne_bytes([buf[at + 16], buf[at + 17]]) as usize;
        if reclen == 0 || at + reclen > n {
            break;
        }
        let kind = buf[at + 18];
        let name = &buf[at + 19..at + reclen];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        if name != b"."
            && name != b".."
            && let Ok(name) = CString::new(name)
        {
            out.push(Entry {
                ino,
                name,
                next_off,
                kind,
            });
        }
        at += reclen;
    }
    Ok(n)
}

/// The filesystem type (statfs f_type) of `fd`.
pub fn fs_type(fd: i32) -> Result<i64, Errno> {
    // SAFETY: kernel-checked: `statfs` is plain data, all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: `st` is a local.
    cvt(|| unsafe { libc::syscall(libc::SYS_fstatfs, fd, &mut st as *mut libc::statfs) })?;
    Ok(st.f_type as i64)
}

/// statx of `name` in `dirfd`, not following a symlink: brings the inode into the cache.
pub fn statx_nofollow(dirfd: i32, name: &CStr) -> Result<(), Errno> {
    // SAFETY: kernel-checked: `statx` is plain data, all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: `name` is NUL-terminated and `stx` a local.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_statx,
            dirfd,
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS,
            &mut stx as *mut libc::statx,
        )
    })?;
    Ok(())
}

/// xfs: reads inode `ino` of the filesystem holding `fd` without a lookup, by the
/// single-inode bulkstat (`XFS_IOC_FSBULKSTAT_SINGLE`), which brings the inode's cluster
/// into xfs's buffer cache and takes no lock of any directory. Needs CAP_SYS_ADMIN
/// (`EPERM` without it); `EINVAL` for a number that is no longer an inode's.
pub fn xfs_read_inode(fd: i32, ino: u64) -> Result<(), Errno> {
    /// struct xfs_fsop_bulkreq (xfs_fs.h).
    #[repr(C)]
    struct BulkReq {
        lastip: *mut u64,
        icount: i32,
        ubuffer: *mut u8,
        ocount: *mut i32,
    }
    /// _IOWR('X', 102, struct xfs_fsop_bulkreq).
    const XFS_IOC_FSBULKSTAT_SINGLE: libc::c_ulong = (3 << 30)
        | ((std::mem::size_of::<BulkReq>() as libc::c_ulong) << 16)
        | ((b'X' as libc::c_ulong) << 8)
        | 102;
    let mut last = ino;
    let mut count = 0i32;
    // One struct xfs_bstat (136 bytes) is written; room for a larger one.
    let mut out = [0u64; 64];
    let mut req = BulkReq {
        lastip: &mut last,
        icount: 1,
        ubuffer: out.as_mut_ptr().cast(),
        ocount: &mut count,
    };
    // SAFETY: own buffers: every pointer in `req` is to a local that outlives the call, and
    // `out` holds more than the one record an icount of 1 asks for.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_ioctl,
            fd,
            XFS_IOC_FSBULKSTAT_SINGLE,
            &mut req as *mut BulkReq,
        )
    })?;
    Ok(())
}
