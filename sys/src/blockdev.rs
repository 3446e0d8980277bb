//! The block device under a filesystem, for the directory prefetch: which one it is, an fd
//! of ours on it, and where a file's blocks lie on it (FIEMAP).
//!
//! ext4 reads its directories' blocks (and inode tables) as buffers of the device's own page
//! cache, so blocks read ahead through the device are found there by ext4's next read of
//! them: one request for a run of blocks instead of one per block (docs/dir-prefetch.md).

use crate::file::{OwnFd, identify, meta_at, open_own};
use crate::proc::read_small;
use crate::procfd::PathBuf128;
use crate::{Errno, cvt};

/// Opens the block device `dev` (a filesystem's `st_dev`) read-only, as an fd of our own
/// moved high. Its name comes from sysfs (`/sys/dev/block/MAJ:MIN/uevent`, DEVNAME), its node
/// from /dev, and it is checked to be that device: `ENODEV` if it is not.
/// Needs read permission on the node (root, or the `disk` group): `EACCES` otherwise.
pub fn open_device(dev: u64) -> Result<OwnFd, Errno> {
    let uevent = PathBuf128::new(format_args!(
        "/sys/dev/block/{}:{}/uevent",
        libc::major(dev),
        libc::minor(dev)
    ));
    let mut buf = [0u8; 512];
    let text = read_small(uevent.as_cstr(), &mut buf)?;
    let name = text
        .lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .filter(|n| !n.is_empty() && !n.contains(".."))
        .ok_or(Errno(libc::ENODEV))?;
    let node = PathBuf128::new(format_args!("/dev/{name}"));
    // Looked at before it is opened: a FIFO of that name would block the open (in the
    // program's opendir), a tty could become the program's controlling terminal.
    let is_it = |mode: u32, rdev: u64| mode & libc::S_IFMT == libc::S_IFBLK && rdev == dev;
    let meta = meta_at(libc::AT_FDCWD, node.as_cstr(), true)?;
    if !is_it(meta.mode, meta.rdev) {
        return Err(Errno(libc::ENODEV));
    }
    let fd = open_own(
        libc::AT_FDCWD,
        node.as_cstr(),
        libc::O_NONBLOCK | libc::O_NOCTTY,
    )?;
    let st = identify(fd.raw())?;
    if !is_it(st.mode, st.rdev) {
        return Err(Errno(libc::ENODEV));
    }
    Ok(fd)
}

/// A run of a file's blocks on its device: `physical` bytes into the device, `len` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub physical: u64,
    pub len: u64,
}

/// The file's blocks on its device (FS_IOC_FIEMAP, without FIEMAP_FLAG_SYNC: nothing is
/// written first), appended to `out` in file order. Extents whose place is not a plain
/// device offset (delayed allocation, inline data, encoded or unaligned) are left out.
/// ext4 answers for directories too; filesystems without FIEMAP give `EOPNOTSUPP`.
pub fn extents(fd: i32, out: &mut Vec<Extent>) -> Result<(), Errno> {
    /// struct fiemap_extent (linux/fiemap.h).
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct FiemapExtent {
        logical: u64,
        physical: u64,
        length: u64,
        reserved64: [u64; 2],
        flags: u32,
        reserved: [u32; 3],
    }
    /// struct fiemap, with room for `BATCH` extents after it.
    #[repr(C)]
    struct Fiemap {
        start: u64,
        length: u64,
        flags: u32,
        mapped_extents: u32,
        extent_count: u32,
        reserved: u32,
        extents: [FiemapExtent; BATCH],
    }
    const BATCH: usize = 128;
    /// _IOWR('f', 11, struct fiemap): the size is the header's, 32 bytes.
    const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
    const LAST: u32 = 0x1;
    const NOT_A_PLACE: u32 = 0x2 | 0x4 | 0x8 | 0x100 | 0x200; // UNKNOWN DELALLOC ENCODED NOT_ALIGNED DATA_INLINE
    let mut start = 0u64;
    // A bound on the calls, whatever the filesystem answers.
    for _ in 0..4096 {
        let mut map = Fiemap {
            start,
            length: u64::MAX - start,
            flags: 0,
            mapped_extents: 0,
            extent_count: BATCH as u32,
            reserved: 0,
            extents: [FiemapExtent::default(); BATCH],
        };
        // SAFETY: own buffer: `map` is a local with room for the `extent_count` extents the
        // kernel may write after the header.
        cvt(|| unsafe {
            libc::syscall(libc::SYS_ioctl, fd, FS_IOC_FIEMAP, &mut map as *mut Fiemap)
        })?;
        let got = &map.extents[..(map.mapped_extents as usize).min(BATCH)];
        let Some(last) = got.last() else {
            return Ok(());
        };
        out.extend(
            got.iter()
                .filter(|e| e.flags & NOT_A_PLACE == 0 && e.length > 0)
                .map(|e| Extent {
                    physical: e.physical,
                    len: e.length,
                }),
        );
        let next = last.logical.saturating_add(last.length);
        if last.flags & LAST != 0 || next <= start {
            return Ok(());
        }
        start = next;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_has_its_blocks_placed() {
        let path = std::env::temp_dir().join(format!("blockdev-test-{}", std::process::id()));
        std::fs::write(&path, vec![7u8; 64 * 1024]).unwrap();
        // Written back, so that its blocks are allocated (not delayed).
        let f = std::fs::File::open(&path).unwrap();
        f.sync_all().unwrap();
        let mut out = Vec::new();
        use std::os::fd::AsRawFd;
        match extents(f.as_raw_fd(), &mut out) {
            // tmpfs and overlay have no FIEMAP.
            Err(Errno(libc::EOPNOTSUPP)) => {}
            r => {
                r.unwrap();
                assert_eq!(out.iter().map(|e| e.len).sum::<u64>(), 64 * 1024, "{out:?}");
            }
        }
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn the_device_under_a_file_is_the_one_opened() {
        let f = std::fs::File::open("/").unwrap();
        use std::os::fd::AsRawFd;
        let st = identify(f.as_raw_fd()).unwrap();
        // Without permission (not root), or with no node (an anonymous device: overlay,
        // btrfs, tmpfs; a container without /dev entries), none.
        if let Ok(fd) = open_device(st.dev) {
            assert_eq!(identify(fd.raw()).unwrap().rdev, st.dev);
        }
    }

    #[test]
    fn no_device_is_opened_for_a_device_that_is_not_there() {
        assert!(open_device(libc::makedev(4095, 1_000_000)).is_err());
    }
}
