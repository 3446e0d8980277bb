//! The watched processes: each held by pidfd (a reused pid is never acted on: every answer
//! read from /proc/PID counts only if the pidfd says the process still lives afterwards),
//! claimed (two watchers never act on one process), and its descendants found by their
//! parent pid in /proc.

use super::YOUNG;
use super::files::{Ctx, Follow, SCRATCH_SLACK, Tracked};
use super::report::Counters;
use dropbehind_sys::Errno;
use dropbehind_sys::file::OwnFd;
use dropbehind_sys::procfd::{self, FdInfo, FdInfoFile, ProcDir};
use dropbehind_sys::{claim, pidfd};
use std::collections::HashMap;
use std::time::Instant;

/// How a process is handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// The watcher follows all its files.
    Watched,
    /// The preload is in it and in charge; the watcher takes only growth-followed files of
    /// a process with an io_uring instance (I/O the preload never sees).
    Preload,
}

enum Entry {
    /// Not for us (not a regular file on a disk filesystem, too small, O_DIRECT...).
    Ignored {
        key: (u32, u64),
        info: FdInfoFile,
        /// Rounds it has been seen the same.
        seen: u32,
    },
    Tracked {
        info: FdInfoFile,
        file: Box<Tracked>,
    },
    /// A scratch file of the run (see `Tracked::scratch`), held through no fd of the
    /// watcher's: the program's close is its last, and frees its pages there as it would
    /// unwatched. Held by the watcher, that truncation fell to the watcher's close: 15% of
    /// its CPU in a restic backup. Looked at again (stat through the link) each round.
    Scratch { ino: u64, info: FdInfoFile },
}

impl Entry {
    fn info(&self) -> &FdInfoFile {
        match self {
            Entry::Ignored { info, .. }
            | Entry::Tracked { info, .. }
            | Entry::Scratch { info, .. } => info,
        }
    }
}

/// An exec that keeps every fd is looked for every this many rounds.
const EXEC_CHECK_EVERY: u32 = 5;
/// An fd ignored for this many rounds (a pipe, a socket, the epoll fd, a small file held
/// open) is looked at only every IGNORED_EVERY rounds: most of a round's fdinfo reads were
/// of those (8 of 11.5 a round for restic). Ignored fds closed soon, whose number is then
/// reused for a file that counts, are still looked at every round. A long-held one closed
/// and its number reused is seen up to that many rounds late.
const IGNORED_SETTLED: u32 = 50;
const IGNORED_EVERY: u32 = 4;
const SCRATCH_STAT_EVERY: u32 = 4;

/// A known fd's fdinfo as read this round.
#[derive(Clone, Copy)]
enum Read {
    /// Not known before.
    New,
    /// Long ignored, not read this round.
    Skipped,
    Got(Result<FdInfo, Errno>),
}

pub struct Proc {
    pub pid: i32,
    pub pidfd: OwnFd,
    _claim: OwnFd,
    /// Wall-clock start time, ns since the epoch (for birth times of its files).
    start_real_ns: u64,
    pub comm: String,
    pub cover: Cover,
    pub how: String,
    exe: Option<(u64, u64)>,
    fd_dir: ProcDir,
    /// /proc/PID, for the looks at its exe and at scratch files.
    dir: OwnFd,
    /// The fds of the last round: an exec shows as a change there (close-on-exec fds go).
    last_fds: Vec<i32>,
    entries: HashMap<i32, Entry>,
    has_ring: bool,
    pub counters: Counters,
    scratch: Vec<i32>,
    infos: Vec<Read>,
    told: bool,
    /// Rounds seen: what runs in the process is looked at again in the first ones (an
    /// exec that has just returned to the launcher may not have set up the new program's
    /// environment and maps yet).
    rounds: u32,
    /// Until when the process is young: found, or exec'd, less than `YOUNG` ago (looked at
    /// every YOUNG_INTERVAL_MS, see the watcher's `round`).
    pub young_until: Instant,
    /// Files the program closed whose settles are still pending: the watcher takes them.
    pub lingering: Vec<Tracked>,
}

/// Why a process can't be watched, for the message naming it.
pub fn refusal(e: Errno) -> &'static str {
    match e.0 {
        libc::ESRCH | libc::ENOENT => "no such process",
        libc::EACCES | libc::EPERM => {
            "permission denied (its /proc/PID/fd needs ptrace access: the same user, or root)"
        }
        libc::EADDRINUSE => "already watched by another dropbehind",
        _ => "can't be watched",
    }
}

pub struct Settings {
    pub lib_names: Vec<String>,
    pub watch_all: bool,
    pub min_size: u64,
    pub params: dropbehind_core::policy::Params,
}

impl Proc {
    /// Holds and claims `pid`: Err names what is missing.
    pub fn attach(pid: i32, set: &Settings) -> Result<Proc, Errno> {
        let fd = pidfd::open(pid)?;
        let (_, start) = procfd::parent_and_start(pid)?;
        let mut fd_dir = ProcDir::fds_of(pid)?;
        let dir = procfd::open_proc(pid)?;
        // Can we open its files' links? (ptrace-read access is what /proc/PID/fd wants.)
        let mut probe = Vec::new();
        fd_dir_numbers(&mut fd_dir, &mut probe)?;
        let claim = claim::claim(pid, start)?;
        if pidfd::exited(&fd) {
            return Err(Errno(libc::ESRCH));
        }
        let up_ns = procfd::boottime_ns();
        let started_ns_ago = up_ns.saturating_sub(start * (1_000_000_000 / procfd::CLOCK_TICKS));
        let mut p = Proc {
            pid,
            pidfd: fd,
            _claim: claim,
            // A second of slack: start times are in clock ticks.
            start_real_ns: procfd::realtime_ns()
                .saturating_sub(started_ns_ago)
                .saturating_sub(1_000_000_000),
            comm: String::new(),
            cover: Cover::Watched,
            how: String::new(),
            exe: None,
            fd_dir,
            dir,
            last_fds: Vec::new(),
            entries: HashMap::new(),
            has_ring: false,
            counters: Counters::default(),
            scratch: Vec::new(),
            infos: Vec::new(),
            told: false,
            rounds: 0,
            young_until: Instant::now() + YOUNG,
            lingering: Vec::new(),
        };
        p.classify(set);
        Ok(p)
    }

    /// What runs in the process now; again after each exec.
    fn classify(&mut self, set: &Settings) {
        self.comm = std::fs::read_to_string(format!("/proc/{}/comm", self.pid))
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        let exe = std::fs::read_link(format!("/proc/{}/exe", self.pid)).ok();
        let kind = exe
            .as_deref()
            .map_or(super::binary::Kind::Other, super::binary::kind);
        // In its maps, or about to be: a dynamic program just exec'd with the library in
        // LD_PRELOAD (the loader maps it before the program's first instruction).
        let lib = in_maps(self.pid, &set.lib_names)
            || (kind == super::binary::Kind::Dynamic
                && set
                    .lib_names
                    .iter()
                    .any(|name| preload_in_env(self.pid, name)));
        let (cover, how) = if set.watch_all {
            (Cover::Watched, "watched from outside (--watch)".to_string())
        } else if lib && kind.reachable_by_preload() {
            (Cover::Preload, "the preload library".to_string())
        } else if lib {
            (
                Cover::Watched,
                format!(
                    "watched from outside ({}: the preload can't act there)",
                    kind.describe()
                ),
            )
        } else {
            (
                Cover::Watched,
                format!(
                    "watched from outside ({}, no preload library in it)",
                    kind.describe()
                ),
            )
        };
        self.cover = cover;
        self.how = how;
        self.exe = exe_id(&self.dir);
    }

    /// Tells `--verbose` once which process got what.
    pub fn tell(&mut self, verbose: bool) {
        self.tell_now(verbose, self.rounds > 2)
    }

    /// As `tell`; `settled`: what runs in it is known for sure (or it has exited).
    pub fn tell_now(&mut self, verbose: bool, settled: bool) {
        if verbose && !self.told && settled && !self.comm.is_empty() {
            self.told = true;
            eprintln!("dropbehind: pid {} ({}): {}", self.pid, self.comm, self.how);
        }
    }

    fn with_cx<R>(&mut self, set: &Settings, f: impl FnOnce(&mut Self, &mut Ctx) -> R) -> R {
        let mut c = std::mem::take(&mut self.counters);
        let r = {
            let mut cx = Ctx {
                params: &set.params,
                min_size: set.min_size,
                c: &mut c,
                paced: true,
            };
            f(self, &mut cx)
        };
        self.counters = c;
        r
    }

    /// One round: the process's fds now. False once the process is gone.
    /// `paced`: a round at the INTERVAL_MS pace (not one of a young process's quick looks
    /// in between), in which round-counted decisions may advance.
    pub fn round(&mut self, set: &Settings, paced: bool) -> bool {
        self.with_cx(set, |p, cx| {
            cx.paced = paced;
            p.round_in(set, cx)
        })
    }

    pub fn young(&self, now: Instant) -> bool {
        now < self.young_until
    }

    fn round_in(&mut self, set: &Settings, cx: &mut Ctx) -> bool {
        let mut fds = std::mem::take(&mut self.scratch);
        if fd_dir_numbers(&mut self.fd_dir, &mut fds).is_err() {
            self.scratch = fds;
            return false;
        }
        // Counted at the usual pace only: the first rounds' second looks wait for an exec
        // to set up its maps, which a young process's quick looks would not.
        if cx.paced {
            self.rounds = self.rounds.saturating_add(1);
        }
        // An exec since the last round: another program, with new rules. It closes the
        // close-on-exec fds, so it is looked for when the fds changed, and every
        // EXEC_CHECK_EVERY rounds for an exec that kept them all.
        let first = cx.paced && self.rounds <= 2;
        if fds != self.last_fds || first || cx.paced && self.rounds.is_multiple_of(EXEC_CHECK_EVERY)
        {
            let exe = exe_id(&self.dir);
            if exe.is_some() && exe != self.exe {
                self.close_all_in(cx);
                self.classify(set);
                self.told = false;
                self.rounds = 1;
                self.young_until = Instant::now() + YOUNG;
            } else if first {
                let was = self.cover;
                self.classify(set);
                if self.cover != was {
                    self.close_all_in(cx);
                    self.entries.clear();
                }
            }
        }
        // Every known fd's fdinfo first, then one look at the pidfd for all of them: each
        // answer counts only if the process still lives after it was read.
        let mut infos = std::mem::take(&mut self.infos);
        infos.clear();
        let skip_settled = !self.rounds.is_multiple_of(IGNORED_EVERY);
        infos.extend(fds.iter().map(|fd| match self.entries.get(fd) {
            None => Read::New,
            Some(Entry::Ignored { seen, .. }) if *seen >= IGNORED_SETTLED && skip_settled => {
                Read::Skipped
            }
            Some(e) => Read::Got(e.info().read()),
        }));
        if pidfd::exited(&self.pidfd) {
            self.scratch = fds;
            self.infos = infos;
            return false;
        }
        // Closed since the last round.
        let gone: Vec<i32> = self
            .entries
            .keys()
            .copied()
            .filter(|k| fds.binary_search(k).is_err())
            .collect();
        for fd in gone {
            self.forget(fd, cx);
        }
        for (&fd, info) in fds.iter().zip(infos.iter()) {
            self.look(fd, *info, set, cx);
        }
        self.infos = infos;
        std::mem::swap(&mut self.last_fds, &mut fds);
        self.scratch = fds;
        true
    }

    fn forget(&mut self, fd: i32, cx: &mut Ctx) {
        if let Some(Entry::Tracked { mut file, .. }) = self.entries.remove(&fd)
            && !file.close(cx)
        {
            self.lingering.push(*file);
        }
    }

    /// fd `fd` now; `read`: its fdinfo as just read, for a known fd.
    fn look(&mut self, fd: i32, read: Read, set: &Settings, cx: &mut Ctx) {
        match (self.entries.get_mut(&fd), read) {
            (Some(Entry::Ignored { .. }), Read::Skipped) => return,
            (Some(Entry::Ignored { key, seen, .. }), Read::Got(Ok(i)))
                if (i.mnt_id, i.ino) == *key =>
            {
                *seen = seen.saturating_add(1);
                return;
            }
            (Some(Entry::Tracked { file, .. }), Read::Got(Ok(i))) if i.ino == file.id.ino => {
                file.update(i, cx);
                self.let_go_if_scratch(fd);
                return;
            }
            (Some(Entry::Scratch { ino, .. }), Read::Got(Ok(i))) if i.ino == *ino => {
                // Still deleted and small: left alone. Else seen anew. Its size is looked
                // at every SCRATCH_STAT_EVERY rounds while its position is within the
                // slack (a writer's position is its size; one writing elsewhere is seen
                // that much later).
                if i.pos <= SCRATCH_SLACK && !self.rounds.is_multiple_of(SCRATCH_STAT_EVERY) {
                    return;
                }
                let ino = *ino;
                let name = procfd::PathBuf128::new(format_args!("fd/{fd}"));
                if procfd::stat_at(&self.dir, name.as_cstr())
                    .is_ok_and(|id| id.ino == ino && id.nlink() == 0 && id.size <= SCRATCH_SLACK)
                {
                    return;
                }
            }
            _ => {}
        }
        // New, or the number now names another file.
        self.forget(fd, cx);
        let Ok(info_file) = FdInfoFile::open(self.pid, fd) else {
            return;
        };
        let Ok(info) = info_file.read() else {
            return;
        };
        let ignored = |info_file| Entry::Ignored {
            key: (info.mnt_id, info.ino),
            info: info_file,
            seen: 0,
        };
        let Some(file) = self.first_sight(fd, info, set, cx) else {
            self.entries.insert(fd, ignored(info_file));
            return;
        };
        self.entries.insert(
            fd,
            Entry::Tracked {
                info: info_file,
                file: Box::new(file),
            },
        );
        self.let_go_if_scratch(fd);
    }

    /// A tracked scratch file with nothing pending becomes a `Scratch` entry: the
    /// watcher's own fd of it is closed while the program still holds the file.
    fn let_go_if_scratch(&mut self, fd: i32) {
        let Some(Entry::Tracked { file, .. }) = self.entries.get(&fd) else {
            return;
        };
        if !file.idle_scratch() {
            return;
        }
        let ino = file.id.ino;
        if let Some(Entry::Tracked { info, .. }) = self.entries.remove(&fd) {
            self.entries.insert(fd, Entry::Scratch { ino, info });
        }
    }

    /// Whether fd `fd` is a file for us, and if so its first sight.
    fn first_sight(
        &mut self,
        fd: i32,
        info: procfd::FdInfo,
        set: &Settings,
        cx: &mut Ctx,
    ) -> Option<Tracked> {
        let id = procfd::stat_fd(self.pid, fd).ok()?;
        if !id.regular() {
            let mut link = [0u8; 4096];
            if let Ok(n) = procfd::fd_link(self.pid, fd, &mut link)
                && &link[..n] == b"anon_inode:[io_uring]"
                && !self.has_ring
            {
                // Files passed over before the ring was seen are looked at again.
                self.has_ring = true;
                self.entries
                    .retain(|_, e| matches!(e, Entry::Tracked { .. }));
            }
            return None;
        }
        if self.cover == Cover::Preload && !self.has_ring {
            return None;
        }
        if info.flags & libc::O_DIRECT as u32 != 0 {
            return None;
        }
        if !info.writable() && id.size < set.min_size.max(1) {
            return None;
        }
        if procfd::fs_type_of_fd(self.pid, fd).map_or(true, procfd::memory_or_pseudo_fs) {
            return None;
        }
        let own = procfd::open_fd(self.pid, fd).ok()?;
        // Still the same file, and the same process?
        let mine = dropbehind_sys::file::identify(own.raw()).ok()?;
        if (mine.dev, mine.ino) != (id.dev, id.ino) || pidfd::exited(&self.pidfd) {
            return None;
        }
        let born = procfd::birth_ns(&own).is_some_and(|b| b >= self.start_real_ns);
        let mut t = Tracked::new(own, mine, info, born, cx);
        // Only what the preload can't see: growth without a moving position.
        t.growth_only = self.cover == Cover::Preload;
        Some(t)
    }

    /// Growth-followed files: a round of samples; shared ones checked now and then.
    pub fn growth_round(&mut self, set: &Settings, others: &mut dyn FnMut(u64, u64) -> bool) {
        self.with_cx(set, |p, cx| p.growth_in(others, cx))
    }

    fn growth_in(&mut self, others: &mut dyn FnMut(u64, u64) -> bool, cx: &mut Ctx) {
        for e in self.entries.values_mut() {
            let Entry::Tracked { file, .. } = e else {
                continue;
            };
            if matches!(file.follow, Follow::Growth | Follow::Shared) && !file.born {
                let due = file
                    .shared_checked
                    .is_none_or(|t| t.elapsed() > std::time::Duration::from_secs(2));
                if due {
                    file.shared_checked = Some(Instant::now());
                    let shared = others(file.id.dev, file.id.ino);
                    if shared && file.follow == Follow::Growth {
                        cx.c.shared_files += 1;
                    }
                    file.follow = if shared {
                        Follow::Shared
                    } else {
                        Follow::Growth
                    };
                }
            }
            file.sample_growth(cx, false);
        }
    }

    /// The process exited or was let go: every file finished.
    pub fn close_all(&mut self, set: &Settings) {
        self.with_cx(set, |p, cx| p.close_all_in(cx))
    }

    fn close_all_in(&mut self, cx: &mut Ctx) {
        let fds: Vec<i32> = self.entries.keys().copied().collect();
        for fd in fds {
            self.forget(fd, cx);
        }
    }
}

fn fd_dir_numbers(d: &mut ProcDir, out: &mut Vec<i32>) -> Result<(), Errno> {
    d.numbers(out)?;
    out.sort_unstable();
    Ok(())
}

/// Whether the process maps a file named one of `libs` (the whole file name: `c.so` is not
/// `libc.so.6`; a library replaced on disk since shows as "(deleted)"), in one read of its
/// maps.
fn in_maps(pid: i32, libs: &[String]) -> bool {
    let needles: Vec<String> = libs
        .iter()
        .flat_map(|lib| [format!("/{lib}\n"), format!("/{lib} (deleted)")])
        .collect();
    let needles: Vec<&[u8]> = needles.iter().map(|n| n.as_bytes()).collect();
    procfd::maps_contain(pid, &needles).unwrap_or(false)
}

/// Whether the process's initial environment's LD_PRELOAD names a file called `lib` (entries are separated by
/// colons or spaces).
fn preload_in_env(pid: i32, lib: &str) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    env.split(|&b| b == 0).any(|v| {
        v.strip_prefix(b"LD_PRELOAD=").is_some_and(|l| {
            l.split(|&b| b == b':' || b == b' ')
                .any(|entry| entry.rsplit(|&b| b == b'/').next() == Some(lib.as_bytes()))
        })
    })
}

fn exe_id(dir: &OwnFd) -> Option<(u64, u64)> {
    let id = procfd::stat_at(dir, c"exe").ok()?;
    Some((id.dev, id.ino))
}
