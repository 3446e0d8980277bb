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

/// btrfs: the entries of directory `dir_ino` (on the subvolume holding `fd`) whose index
/// numbers are in [`from`, `to`), read from its index items by a tree search
/// (`BTRFS_IOC_TREE_SEARCH_V2`), appended to `out` (`next_off`: the entry's index + 1, a
/// position from which a listing goes on after it). Returns the index to ask from next, or
/// None when nothing in the range is left. Unlike getdents after an lseek, which takes the
/// directory's lock exclusively on btrfs, this takes no lock of the directory: only the
/// b-tree's. What it does not see: entries still in btrfs's delayed items (made or removed
/// moments ago, not yet in the tree), which readdir merges in; for a prefetch of a cold
/// directory that is nothing. `buf` is scratch of at least 4 KiB. Needs CAP_SYS_ADMIN in
/// the initial user namespace (`EPERM` without it).
pub fn btrfs_dir_index(
    fd: i32,
    dir_ino: u64,
    from: u64,
    to: u64,
    buf: &mut [u64],
    out: &mut Vec<Entry>,
) -> Result<Option<u64>, Errno> {
    /// struct btrfs_ioctl_search_args_v2 without its results: the search key, then the
    /// size of the results' room, which follows it.
    #[repr(C)]
    struct SearchArgs {
        tree_id: u64,
        min_objectid: u64,
        max_objectid: u64,
        min_offset: u64,
        max_offset: u64,
        min_transid: u64,
        max_transid: u64,
        min_type: u32,
        max_type: u32,
        nr_items: u32,
        unused: [u32; 9],
        buf_size: u64,
    }
    const HEAD: usize = std::mem::size_of::<SearchArgs>() / 8;
    const _: () = assert!(std::mem::size_of::<SearchArgs>() == 112);
    /// _IOWR(0x94, 17, struct btrfs_ioctl_search_args_v2).
    const BTRFS_IOC_TREE_SEARCH_V2: libc::c_ulong =
        (3 << 30) | ((HEAD as libc::c_ulong * 8) << 16) | (0x94 << 8) | 17;
    if from >= to || buf.len() < HEAD + 512 {
        return Ok(None);
    }
    let args = buf.as_mut_ptr().cast::<SearchArgs>();
    // SAFETY: own buffer: `buf` holds more than HEAD u64s, and SearchArgs (plain integers,
    // 8-byte aligned like `buf`) fits in them.
    unsafe {
        args.write(SearchArgs {
            // 0: the subvolume of `fd`.
            tree_id: 0,
            min_objectid: dir_ino,
            max_objectid: dir_ino,
            min_offset: from,
            max_offset: to - 1,
            min_transid: 0,
            max_transid: u64::MAX,
            min_type: BTRFS_DIR_INDEX_KEY,
            max_type: BTRFS_DIR_INDEX_KEY,
            nr_items: u32::MAX,
            unused: [0; 9],
            buf_size: ((buf.len() - HEAD) * 8) as u64,
        })
    };
    // SAFETY: own buffer: the kernel writes at most buf_size bytes of results after the
    // head, which is what `buf` holds past it; own fd.
    cvt(|| unsafe { libc::syscall(libc::SYS_ioctl, fd, BTRFS_IOC_TREE_SEARCH_V2, args) })?;
    // SAFETY: own buffer: the head the kernel just updated (nr_items: the results given).
    let items = unsafe { (*args).nr_items } as usize;
    // SAFETY: own buffer: a byte view of the results' room.
    let bytes = unsafe {
        std::slice::from_raw_parts(buf[HEAD..].as_ptr().cast::<u8>(), (buf.len() - HEAD) * 8)
    };
    Ok(parse_dir_index(bytes, items, out)
        .and_then(|last| last.checked_add(1))
        .filter(|&n| n < to))
}

/// The key type of a directory's index items (ctree.h).
const BTRFS_DIR_INDEX_KEY: u32 = 96;

/// `items` search results (struct btrfs_ioctl_search_header, then the item) holding
/// struct btrfs_dir_item records, into `out`. Returns the last index read.
fn parse_dir_index(bytes: &[u8], items: usize, out: &mut Vec<Entry>) -> Option<u64> {
    // The header is in the CPU's byte order, the item as on disk (little-endian).
    let word8 = |i| word::<8>(bytes, i);
    let (mut at, mut last) = (0usize, None);
    for _ in 0..items {
        // Header: transid, objectid, offset (the index number), type, len.
        let (Some(index), Some(kind), Some(len)) = (
            word8(at + 16).map(u64::from_ne_bytes),
            word::<4>(bytes, at + 24).map(u32::from_ne_bytes),
            word::<4>(bytes, at + 28).map(u32::from_ne_bytes),
        ) else {
            break;
        };
        let item = at + 32;
        at = item + len as usize;
        if at > bytes.len() {
            break;
        }
        last = Some(index);
        // struct btrfs_dir_item: location (objectid u64, type u8, offset u64), transid u64,
        // data_len u16, name_len u16, type u8, then the name.
        let (Some(ino), Some(name_len), Some(&ft)) = (
            word8(item).map(u64::from_le_bytes),
            word::<2>(bytes, item + 27).map(u16::from_le_bytes),
            bytes.get(item + 29),
        ) else {
            continue;
        };
        let name = bytes.get(item + 30..item + 30 + name_len as usize);
        if kind != BTRFS_DIR_INDEX_KEY || 30 + name_len as usize > len as usize {
            continue;
        }
        if let Some(Ok(name)) = name.map(CString::new) {
            out.push(Entry {
                ino,
                name,
                next_off: index.saturating_add(1) as i64,
                kind: btrfs_dtype(ft),
            });
        }
    }
    last
}

/// The `N` bytes at `i`, if there are that many.
fn word<const N: usize>(bytes: &[u8], i: usize) -> Option<[u8; N]> {
    bytes.get(i..i.checked_add(N)?)?.try_into().ok()
}

/// A btrfs directory item's file type (BTRFS_FT_*, high bits flags) as a `DT_*` value.
fn btrfs_dtype(ft: u8) -> u8 {
    match ft & 0x7f {
        1 => libc::DT_REG,
        2 => libc::DT_DIR,
        3 => libc::DT_CHR,
        4 => libc::DT_BLK,
        5 => libc::DT_FIFO,
        6 => libc::DT_SOCK,
        7 => libc::DT_LNK,
        _ => libc::DT_UNKNOWN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One search result as the kernel lays it out: header, then the dir item and name.
    fn result(index: u64, ino: u64, ft: u8, name: &[u8]) -> Vec<u8> {
        let mut item = Vec::new();
        item.extend(ino.to_le_bytes());
        item.push(1); // location type: INODE_ITEM
        item.extend(0u64.to_le_bytes());
        item.extend(7u64.to_le_bytes()); // transid
        item.extend(0u16.to_le_bytes()); // data_len
        item.extend((name.len() as u16).to_le_bytes());
        item.push(ft);
        item.extend(name);
        let mut r = Vec::new();
        r.extend(7u64.to_ne_bytes());
        r.extend(256u64.to_ne_bytes());
        r.extend(index.to_ne_bytes());
        r.extend(BTRFS_DIR_INDEX_KEY.to_ne_bytes());
        r.extend((item.len() as u32).to_ne_bytes());
        r.extend(item);
        r
    }

    #[test]
    fn btrfs_index_items_parse_into_entries() {
        let mut bytes = result(2, 257, 1, b"alpha");
        bytes.extend(result(5, 300, 2, b"sub"));
        bytes.extend(result(9, 301, 0x87, b"link"));
        bytes.extend([0u8; 64]);
        let mut out = Vec::new();
        assert_eq!(parse_dir_index(&bytes, 3, &mut out), Some(9));
        let got: Vec<_> = out
            .iter()
            .map(|e| (e.ino, e.name.to_bytes(), e.next_off, e.kind))
            .collect();
        assert_eq!(
            got,
            [
                (257, &b"alpha"[..], 3, libc::DT_REG),
                (300, &b"sub"[..], 6, libc::DT_DIR),
                (301, &b"link"[..], 10, libc::DT_LNK)
            ]
        );
        // A result cut short by the buffer's end is not read past it.
        let mut out = Vec::new();
        assert_eq!(
            parse_dir_index(&bytes[..bytes.len() - 64 - 3], 3, &mut out),
            Some(5)
        );
        assert_eq!(out.len(), 2);
        assert_eq!(parse_dir_index(&bytes, 0, &mut out), None);
    }
}
