//! Another process's open files and family, from /proc: the fds it holds (/proc/PID/fd),
//! each one's position, flags and inode (/proc/PID/fdinfo/N), what the fd is (stat through
//! the magic link, which opens nothing), and an fd of our own on the same file, opened by
//! path through /proc/PID/fd/N: it shares no offset, flags or readahead state with the
//! target's, and follows the file through renames.
//!
//! A /proc/PID answer is only about the process the caller holds by pidfd if that process
//! is still alive after the answer was read (`pidfd::exited`): the caller checks.

use crate::file::{FileId, OwnFd};
use crate::{Errno, cvt};
use std::ffi::CStr;
use std::io::Write;

/// A NUL-terminated path built into a stack buffer.
pub struct PathBuf128([u8; 128]);

impl PathBuf128 {
    pub fn new(args: std::fmt::Arguments) -> PathBuf128 {
        let mut b = [0u8; 128];
        let mut w = &mut b[..127];
        let _ = w.write_fmt(args);
        PathBuf128(b)
    }
    pub fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.0).unwrap_or(c"")
    }
}

fn open_path(path: &CStr, flags: i32) -> Result<OwnFd, Errno> {
    // SAFETY: own buffer: `path` is NUL-terminated and outlives the call.
    let fd = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags | libc::O_CLOEXEC,
            0,
        )
    })?;
    Ok(OwnFd::from_raw(fd as i32))
}

use crate::file::read_at as pread;

/// A directory of /proc (a process's `fd` directory, or /proc itself), kept open and
/// listed again from the start on every call.
pub struct ProcDir {
    fd: OwnFd,
    buf: Vec<u8>,
}

impl ProcDir {
    pub fn open(path: &CStr) -> Result<ProcDir, Errno> {
        Ok(ProcDir {
            fd: open_path(path, libc::O_RDONLY | libc::O_DIRECTORY)?,
            buf: vec![0u8; 32 * 1024],
        })
    }

    /// The /proc/PID/fd directory of `pid`. EACCES (or EPERM) without ptrace-read
    /// permission on it; ENOENT when there is no such process.
    pub fn fds_of(pid: i32) -> Result<ProcDir, Errno> {
        ProcDir::open(PathBuf128::new(format_args!("/proc/{pid}/fd")).as_cstr())
    }

    /// The numeric entries (fd numbers, or pids for /proc), in `out` (cleared first).
    pub fn numbers(&mut self, out: &mut Vec<i32>) -> Result<(), Errno> {
        out.clear();
        crate::file::seek_own(self.fd.raw(), 0)?;
        loop {
            // SAFETY: own buffer: the kernel writes at most buf.len() bytes; own fd.
            let n = cvt(|| unsafe {
                libc::syscall(
                    libc::SYS_getdents64,
                    self.fd.raw(),
                    self.buf.as_mut_ptr(),
                    self.buf.len(),
                )
            })? as usize;
            if n == 0 {
                return Ok(());
            }
            // procfs lists a directory to its end unless the buffer is full (readdir of
            // /proc and /proc/PID/fd stops only when an entry does not fit): with room left
            // for the longest entry, this was all, and the call that returns 0 is spared.
            let complete = n + MAX_DIRENT <= self.buf.len();
            let mut at = 0usize;
            while at + 19 <= n {
                let reclen = u16::from_ne_bytes([self.buf[at + 16], self.buf[at + 17]]) as usize;
                if reclen == 0 || at + reclen > n {
                    break;
                }
                let name = &self.buf[at + 19..at + reclen];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if !name.is_empty()
                    && name.iter().all(u8::is_ascii_digit)
                    && let Some(v) = std::str::from_utf8(name).ok().and_then(|s| s.parse().ok())
                {
                    out.push(v);
                }
                at += reclen;
            }
            if complete {
                return Ok(());
            }
        }
    }
}

/// The largest linux_dirent64: 19 bytes of header, a 255-byte name and its NUL, aligned to 8.
const MAX_DIRENT: usize = (19 + 256usize).div_ceil(8) * 8;

/// What /proc/PID/fdinfo/N says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FdInfo {
    pub pos: u64,
    /// Open flags (O_ACCMODE, O_APPEND, O_DIRECT...).
    pub flags: u32,
    pub mnt_id: u32,
    pub ino: u64,
}

impl FdInfo {
    pub fn parse(text: &str) -> Option<FdInfo> {
        let mut i = FdInfo::default();
        let mut seen = 0;
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k {
                "pos" => i.pos = v.parse().ok()?,
                "flags" => i.flags = u32::from_str_radix(v, 8).ok()?,
                "mnt_id" => i.mnt_id = v.parse().ok()?,
                "ino" => i.ino = v.parse().ok()?,
                _ => continue,
            }
            seen += 1;
        }
        (seen >= 2).then_some(i)
    }
    pub fn writable(&self) -> bool {
        self.flags & libc::O_ACCMODE as u32 != libc::O_RDONLY as u32
    }
    pub fn readable(&self) -> bool {
        self.flags & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32
    }
}

/// /proc/PID/fdinfo/N kept open: each `read` is one pread of fresh values. ENOENT once the
/// target has closed fd N (a reused number reads the new file's values: compare `ino`).
pub struct FdInfoFile(OwnFd);

impl FdInfoFile {
    pub fn open(pid: i32, fd: i32) -> Result<FdInfoFile, Errno> {
        let p = PathBuf128::new(format_args!("/proc/{pid}/fdinfo/{fd}"));
        Ok(FdInfoFile(open_path(p.as_cstr(), libc::O_RDONLY)?))
    }
    /// `open` of this process's own fd N (/proc/self), the fd then moved above the
    /// numbers a program uses (`file::move_high`).
    pub fn open_own(fd: i32) -> Result<FdInfoFile, Errno> {
        let p = PathBuf128::new(format_args!("/proc/self/fdinfo/{fd}"));
        let low = open_path(p.as_cstr(), libc::O_RDONLY)?;
        Ok(FdInfoFile(crate::file::move_high(low.into_raw())?))
    }
    pub fn read(&self) -> Result<FdInfo, Errno> {
        let mut buf = [0u8; 512];
        let n = pread(&self.0, &mut buf, 0)?;
        let text = std::str::from_utf8(&buf[..n]).map_err(|_| Errno(libc::EINVAL))?;
        FdInfo::parse(text).ok_or(Errno(libc::EINVAL))
    }
}

/// stat of what the target's fd N refers to, through the magic link: opens nothing (a FIFO
/// or device is not touched).
pub fn stat_fd(pid: i32, fd: i32) -> Result<FileId, Errno> {
    let p = PathBuf128::new(format_args!("/proc/{pid}/fd/{fd}"));
    // SAFETY: kernel-checked: `stat` is plain data, all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: the path is NUL-terminated and `st` a local, both outlive the call.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            libc::AT_FDCWD,
            p.as_cstr().as_ptr(),
            &mut st as *mut libc::stat,
            0,
        )
    })?;
    Ok(FileId::from_stat(&st))
}

/// /proc/PID kept open (O_PATH): what is looked up under it is about that process only,
/// never one that reuses its pid (the directory fails once the process is gone).
pub fn open_proc(pid: i32) -> Result<OwnFd, Errno> {
    open_path(
        PathBuf128::new(format_args!("/proc/{pid}")).as_cstr(),
        libc::O_PATH | libc::O_DIRECTORY,
    )
}

/// stat of `name` under a directory from `open_proc` ("exe", "fd/3"): a shorter lookup
/// than the whole path's.
pub fn stat_at(dir: &OwnFd, name: &CStr) -> Result<FileId, Errno> {
    // SAFETY: kernel-checked: `stat` is plain data, all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: `name` is NUL-terminated and `st` a local, both outlive the call.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_newfstatat,
            dir.raw(),
            name.as_ptr(),
            &mut st as *mut libc::stat,
            0,
        )
    })?;
    Ok(FileId::from_stat(&st))
}

/// The filesystem type (statfs f_type) of what the target's fd N refers to; opens nothing.
pub fn fs_type_of_fd(pid: i32, fd: i32) -> Result<i64, Errno> {
    let p = PathBuf128::new(format_args!("/proc/{pid}/fd/{fd}"));
    // SAFETY: kernel-checked: `statfs` is plain data, all zeroes is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: the path is NUL-terminated and `st` a local.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_statfs,
            p.as_cstr().as_ptr(),
            &mut st as *mut libc::statfs,
        )
    })?;
    Ok(st.f_type as i64)
}

/// Filesystems whose pages are not a cache of a disk (dropping them loses data or does
/// nothing), or that are not files at all.
pub fn memory_or_pseudo_fs(f_type: i64) -> bool {
    const TMPFS: i64 = 0x0102_1994;
    const RAMFS: i64 = 0x8584_58f6;
    const HUGETLBFS: i64 = 0x9584_58f6;
    const PROC: i64 = 0x9fa0;
    const SYSFS: i64 = 0x6265_6572;
    const CGROUP: i64 = 0x0027_e0eb;
    const CGROUP2: i64 = 0x6367_7270;
    const DEBUGFS: i64 = 0x6462_6720;
    const TRACEFS: i64 = 0x7472_6163;
    const SECURITYFS: i64 = 0x7363_6673;
    const BPF: i64 = 0xcafe_4a11;
    const PIPEFS: i64 = 0x5049_5045;
    const SOCKFS: i64 = 0x534f_434b;
    const ANON_INODE: i64 = 0x0904_1934;
    const DEVPTS: i64 = 0x1cd1;
    const ZONEFS: i64 = 0x5a4f_4653;
    [
        TMPFS, RAMFS, HUGETLBFS, PROC, SYSFS, CGROUP, CGROUP2, DEBUGFS, TRACEFS, SECURITYFS, BPF,
        PIPEFS, SOCKFS, ANON_INODE, DEVPTS, ZONEFS,
    ]
    .contains(&f_type)
}

/// Opens the file behind the target's fd N for ourselves, read-only (O_NOATIME where we
/// may): a new open file description, sharing nothing with the target's. Only for regular
/// files (the caller checked with `stat_fd`): opening a FIFO or device has side effects.
pub fn open_fd(pid: i32, fd: i32) -> Result<OwnFd, Errno> {
    let p = PathBuf128::new(format_args!("/proc/{pid}/fd/{fd}"));
    let flags = libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY;
    open_path(p.as_cstr(), flags | libc::O_NOATIME).or_else(|_| open_path(p.as_cstr(), flags))
}

/// readlink of /proc/PID/fd/N: "pipe:[123]", "anon_inode:[io_uring]", or a path.
pub fn fd_link(pid: i32, fd: i32, out: &mut [u8; 4096]) -> Result<usize, Errno> {
    let p = PathBuf128::new(format_args!("/proc/{pid}/fd/{fd}"));
    // SAFETY: own buffer: `out` holds 4096 bytes, the length passed; the path outlives it.
    let n = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_readlinkat,
            libc::AT_FDCWD,
            p.as_cstr().as_ptr(),
            out.as_mut_ptr(),
            out.len(),
        )
    })?;
    Ok(n as usize)
}

/// Parent pid and start time (clock ticks after boot) from /proc/PID/stat.
pub fn parent_and_start(pid: i32) -> Result<(i32, u64), Errno> {
    let p = PathBuf128::new(format_args!("/proc/{pid}/stat"));
    let mut buf = [0u8; 1024];
    let text = crate::proc::read_small(p.as_cstr(), &mut buf)?;
    let rest = &text[text.rfind(')').ok_or(Errno(libc::EINVAL))? + 1..];
    let mut f = rest.split_whitespace();
    // After the name: state, ppid (field 4), ..., starttime (field 22).
    let ppid = f
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or(Errno(libc::EINVAL))?;
    let start = f
        .nth(17)
        .and_then(|s| s.parse().ok())
        .ok_or(Errno(libc::EINVAL))?;
    Ok((ppid, start))
}

/// Clock ticks per second (for /proc start times): 100 on Linux for all user-visible ABIs.
pub const CLOCK_TICKS: u64 = 100;

/// Seconds since boot, as CLOCK_BOOTTIME (the clock of /proc start times), with nanoseconds.
pub fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: own buffer: `ts` is a local.
    let _ =
        cvt(|| unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_BOOTTIME, &mut ts) });
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall-clock now, in nanoseconds since the epoch (for statx birth times).
pub fn realtime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: own buffer: `ts` is a local.
    let _ =
        cvt(|| unsafe { libc::syscall(libc::SYS_clock_gettime, libc::CLOCK_REALTIME, &mut ts) });
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Birth time of an own fd's file in nanoseconds since the epoch, where the filesystem
/// records one (ext4, xfs, btrfs); `None` elsewhere.
pub fn birth_ns(fd: &OwnFd) -> Option<u64> {
    // SAFETY: kernel-checked: `statx` is plain data, all zeroes is a valid value.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: the empty path is NUL-terminated and `stx` a local; own fd.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_statx,
            fd.raw(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_BTIME,
            &mut stx as *mut libc::statx,
        )
    })
    .ok()?;
    (stx.stx_mask & libc::STATX_BTIME != 0 && stx.stx_btime.tv_sec >= 0)
        .then(|| stx.stx_btime.tv_sec as u64 * 1_000_000_000 + stx.stx_btime.tv_nsec as u64)
}

/// Whether /proc/PID/maps holds any of `needles` (a library mapped into the process), in
/// one pass over the file.
pub fn maps_contain(pid: i32, needles: &[&[u8]]) -> Result<bool, Errno> {
    if needles.iter().all(|n| n.is_empty()) {
        return Ok(false);
    }
    let p = PathBuf128::new(format_args!("/proc/{pid}/maps"));
    let fd = open_path(p.as_cstr(), libc::O_RDONLY)?;
    let longest = needles.iter().map(|n| n.len()).max().unwrap_or(0);
    let found = |hay: &[u8]| {
        needles
            .iter()
            .any(|n| !n.is_empty() && hay.windows(n.len()).any(|w| w == *n))
    };
    let mut buf = vec![0u8; 64 * 1024];
    let mut carry = Vec::new();
    let mut off = 0u64;
    loop {
        let n = pread(&fd, &mut buf, off)?;
        if n == 0 {
            return Ok(false);
        }
        off += n as u64;
        carry.extend_from_slice(&buf[..n]);
        if found(&carry) {
            return Ok(true);
        }
        // A needle split across two reads is found with the next.
        let keep = carry.len().saturating_sub(longest);
        carry.drain(..keep);
    }
}

/// The link count of an own fd's file: 0 once it is deleted.
pub fn link_count(fd: i32) -> Result<u64, Errno> {
    // SAFETY: kernel-checked: `stat` is plain data, all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: `st` is a local that outlives the call.
    cvt(|| unsafe { libc::syscall(libc::SYS_fstat, fd, &mut st as *mut libc::stat) })?;
    Ok(st.st_nlink)
}

/// /proc/loadavg kept open: its last field is the pid most recently given out in this pid
/// namespace (threads included). While it stands still no process was created anywhere,
/// so the watcher need not list /proc for new children.
pub struct LastPid(OwnFd);

impl LastPid {
    pub fn open() -> Result<LastPid, Errno> {
        Ok(LastPid(open_path(c"/proc/loadavg", libc::O_RDONLY)?))
    }
    pub fn read(&self) -> Option<i32> {
        let mut buf = [0u8; 128];
        let n = pread(&self.0, &mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        text.split_ascii_whitespace().nth(4)?.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_parses() {
        let i = FdInfo::parse("pos:\t123\nflags:\t0100002\nmnt_id:\t24\nino:\t77\n").unwrap();
        assert_eq!((i.pos, i.mnt_id, i.ino), (123, 24, 77));
        assert!(i.writable() && i.readable());
        assert_eq!(FdInfo::parse("nonsense"), None);
    }

    #[test]
    fn own_fds_listed_and_described() {
        let me = crate::proc::pid();
        let mut d = ProcDir::fds_of(me).unwrap();
        let mut v = Vec::new();
        d.numbers(&mut v).unwrap();
        assert!(v.contains(&d.fd.raw()));
        let f = open_path(c"/proc/self/exe", libc::O_RDONLY).unwrap();
        let info = FdInfoFile::open(me, f.raw()).unwrap().read().unwrap();
        assert!(!info.writable());
        assert!(stat_fd(me, f.raw()).unwrap().regular());
        let (ppid, start) = parent_and_start(me).unwrap();
        assert!(ppid > 0 && start > 0);
    }
}
