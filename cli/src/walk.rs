//! Walking the paths that `stat` and `evict` are given: regular files are opened (read-only,
//! O_NONBLOCK and O_NOFOLLOW, so that a FIFO swapped in under us can't hang the walk) and
//! handed to the visitor; everything else is reported as skipped and never opened.
//!
//! Directories are opened relative to their parent's fd (never re-resolved from the top) with
//! O_NOATIME where permitted, so walking a tree changes nothing on disk, not even a
//! directory's access time. Entries are visited in byte order of their names. A file with
//! several hard links (any file, with -L) is visited once; `-x` keeps to the filesystem of
//! each path; an entry that can't be read is reported and the walk goes on.

use crate::args::WalkOpts;
use dropbehind_sys::Errno;
use dropbehind_sys::dir::{self, Entry};
use dropbehind_sys::file::{self, Meta, OwnFd};
use std::collections::HashMap;
use std::ffi::{CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What the walk found at a path.
pub enum Item<'a> {
    /// A regular file, open read-only.
    File { fd: &'a OwnFd, meta: &'a Meta },
    /// Not a regular file, or not to be followed: listed, never opened.
    Skipped(String),
    /// A further hard link (or, with -L, path) to a file visited before, at `first`.
    Again { first: &'a Path },
    /// Could not be looked at.
    Error(String),
}

pub struct Walker<'v> {
    opts: WalkOpts,
    /// (dev, ino) of files that may be reached again, and where they were first seen.
    seen: HashMap<(u64, u64), PathBuf>,
    /// (dev, ino) of the directories from the walk's root down to the current one.
    ancestors: Vec<(u64, u64)>,
    visit: &'v mut dyn FnMut(&Path, Item) -> bool,
    /// The visitor asked to stop (its output went away).
    stopped: bool,
    buf: Vec<u8>,
}

fn kind_name(file_type: u32) -> &'static str {
    match file_type {
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFLNK => "symlink, not followed without -L",
        libc::S_IFDIR => "directory",
        _ => "not a regular file",
    }
}

fn dt_to_mode(dt: u8) -> Option<u32> {
    Some(match dt {
        libc::DT_REG => libc::S_IFREG,
        libc::DT_DIR => libc::S_IFDIR,
        libc::DT_LNK => libc::S_IFLNK,
        libc::DT_FIFO => libc::S_IFIFO,
        libc::DT_SOCK => libc::S_IFSOCK,
        libc::DT_CHR => libc::S_IFCHR,
        libc::DT_BLK => libc::S_IFBLK,
        _ => return None,
    })
}

/// The error's text without std's " (os error N)".
fn describe(e: Errno) -> String {
    let s = std::io::Error::from_raw_os_error(e.0).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

impl<'v> Walker<'v> {
    pub fn new(opts: WalkOpts, visit: &'v mut dyn FnMut(&Path, Item) -> bool) -> Walker<'v> {
        Walker {
            opts,
            seen: HashMap::new(),
            ancestors: Vec::new(),
            visit,
            stopped: false,
            buf: vec![0u8; 64 * 1024],
        }
    }

    fn emit(&mut self, path: &Path, item: Item) {
        if !self.stopped && !(self.visit)(path, item) {
            self.stopped = true;
        }
    }

    /// Walks each path given on the command line, in order.
    pub fn walk(&mut self, paths: &[PathBuf]) {
        for p in paths {
            if self.stopped {
                return;
            }
            let Ok(name) = CString::new(p.as_os_str().as_bytes()) else {
                self.emit(p, Item::Error("the path holds a NUL byte".into()));
                continue;
            };
            let meta = match file::meta_at(libc::AT_FDCWD, &name, self.opts.dereference) {
                Ok(m) => m,
                Err(e) => {
                    self.emit(p, Item::Error(describe(e)));
                    continue;
                }
            };
            match meta.file_type() {
                libc::S_IFREG => self.file(libc::AT_FDCWD, &name, p),
                libc::S_IFDIR if self.opts.recursive => {
                    self.ancestors.clear();
                    self.directory(libc::AT_FDCWD, &name, p, meta.dev);
                }
                libc::S_IFDIR => self.emit(p, Item::Error("is a directory (-r walks it)".into())),
                t => self.emit(p, Item::Skipped(kind_name(t).into())),
            }
        }
    }

    fn file(&mut self, dirfd: i32, name: &CStr, path: &Path) {
        let nofollow = if self.opts.dereference {
            0
        } else {
            libc::O_NOFOLLOW
        };
        let fd = match file::open_at(dirfd, name, libc::O_NONBLOCK | libc::O_NOCTTY | nofollow) {
            Ok(fd) => fd,
            Err(Errno(libc::ELOOP)) if nofollow != 0 => {
                return self.emit(path, Item::Skipped(kind_name(libc::S_IFLNK).into()));
            }
            Err(e) => return self.emit(path, Item::Error(describe(e))),
        };
        let meta = match file::meta(fd.raw()) {
            Ok(m) => m,
            Err(e) => return self.emit(path, Item::Error(describe(e))),
        };
        if !meta.regular() {
            let why = format!("{} (changed during the walk)", kind_name(meta.file_type()));
            return self.emit(path, Item::Skipped(why));
        }
        if meta.nlink > 1 || self.opts.dereference {
            if let Some(first) = self.seen.get(&(meta.dev, meta.ino)) {
                let first = first.clone();
                return self.emit(path, Item::Again { first: &first });
            }
            self.seen.insert((meta.dev, meta.ino), path.to_path_buf());
        }
        self.emit(
            path,
            Item::File {
                fd: &fd,
                meta: &meta,
            },
        );
    }

    fn open_directory(&self, dirfd: i32, name: &CStr) -> Result<OwnFd, Errno> {
        let nofollow = if self.opts.dereference {
            0
        } else {
            libc::O_NOFOLLOW
        };
        let flags = libc::O_DIRECTORY | libc::O_NONBLOCK | nofollow;
        // O_NOATIME needs ownership (or CAP_FOWNER): elsewhere the directory's atime may
        // move when it is read, as with ls.
        match file::open_at(dirfd, name, flags | libc::O_NOATIME) {
            Err(Errno(libc::EPERM)) => file::open_at(dirfd, name, flags),
            r => r,
        }
    }

    fn directory(&mut self, dirfd: i32, name: &CStr, path: &Path, root_dev: u64) {
        let fd = match self.open_directory(dirfd, name) {
            Ok(fd) => fd,
            Err(e) => return self.emit(path, Item::Error(describe(e))),
        };
        let meta = match file::meta(fd.raw()) {
            Ok(m) => m,
            Err(e) => return self.emit(path, Item::Error(describe(e))),
        };
        if !meta.directory() {
            let why = format!("{} (changed during the walk)", kind_name(meta.file_type()));
            return self.emit(path, Item::Skipped(why));
        }
        if self.opts.one_file_system && meta.dev != root_dev {
            return self.emit(path, Item::Skipped("on another filesystem (-x)".into()));
        }
        if self.ancestors.contains(&(meta.dev, meta.ino)) {
            return self.emit(
                path,
                Item::Skipped("directory loop, not entered again".into()),
            );
        }
        let mut entries: Vec<Entry> = Vec::new();
        loop {
            match dir::getdents(fd.raw(), &mut self.buf, &mut entries) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => {
                    self.emit(path, Item::Error(describe(e)));
                    break;
                }
            }
        }
        entries.sort_unstable_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
        self.ancestors.push((meta.dev, meta.ino));
        for e in &entries {
            if self.stopped {
                break;
            }
            let child = path.join(OsStr::from_bytes(e.name.as_bytes()));
            let mut kind = dt_to_mode(e.kind);
            if kind.is_none() || (kind == Some(libc::S_IFLNK) && self.opts.dereference) {
                match file::meta_at(fd.raw(), &e.name, self.opts.dereference) {
                    Ok(m) => kind = Some(m.file_type()),
                    Err(err) => {
                        self.emit(&child, Item::Error(describe(err)));
                        continue;
                    }
                }
            }
            match kind {
                Some(libc::S_IFREG) => self.file(fd.raw(), &e.name, &child),
                Some(libc::S_IFDIR) => self.directory(fd.raw(), &e.name, &child, root_dev),
                Some(t) => self.emit(&child, Item::Skipped(kind_name(t).into())),
                None => self.emit(&child, Item::Skipped(kind_name(0).into())),
            }
        }
        self.ancestors.pop();
    }
}
