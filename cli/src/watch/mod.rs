//! The outside watcher: for processes the preload can't reach (Go programs, static
//! binaries, io_uring I/O), the launcher stays the parent and follows the process tree
//! from outside (`dropbehind -- CMD`), or attaches to running processes (`--pid`).
//!
//! It applies the core's policy and proof to each watched process's open regular files
//! (`files`), through fds of its own; it never signals, stops or traces the program, and
//! never reads, seeks or sets flags through anything the program shares.

pub mod binary;
mod files;
mod procs;
mod report;
mod writeback;

use dropbehind_core::policy::Params;
use dropbehind_sys::Errno;
use dropbehind_sys::file::OwnFd;
use dropbehind_sys::procfd::{self, ProcDir};
use dropbehind_sys::{pidfd, signal};
use files::{Ctx, Tracked};
use procs::{Proc, Settings};
use report::Counters;
use std::collections::HashSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// How often the watched processes' fds are looked at.
const INTERVAL_MS: i32 = 10;
/// While a process is young (found or exec'd less than `YOUNG` ago), its fds are looked at
/// every YOUNG_INTERVAL_MS: a program opens its files and reads them at once, and what it
/// reads before the first look can't be proven (fio at full speed: 2-30 MiB of a file at
/// 10 ms). Only young processes get the quick looks; every other part of a round (the
/// others' looks, growth sampling, lingering files, round-counted decisions) keeps the
/// INTERVAL_MS pace.
const YOUNG_INTERVAL_MS: i32 = 2;
/// A process is young this long after the watcher found it or saw it exec.
pub const YOUNG: Duration = Duration::from_millis(150);
/// New children of watched processes are looked for every round in which a process was
/// created somewhere (the last pid given out moved), and at least every this many rounds.
const DISCOVER_EVERY: u64 = 50;
/// How long the watcher waits, after the last program exits, for the writeback of what
/// it wrote to finish so that it can be dropped.
const FINISH_BUDGET: Duration = Duration::from_secs(10);
/// The drop-behind window from outside: drops in large ranges, rarely (each DONTNEED may
/// call lru_add_drain_all, which waits for every CPU).
pub const MIN_WINDOW: u64 = 4 << 20;
/// Extra proof reach: the program moves on between two looks.
const EXTRA_LOOKAHEAD: u64 = 32 << 20;

pub struct Options {
    pub verbose: bool,
    pub stats: Option<String>,
    pub watch_all: bool,
    pub window: u64,
    pub min_size: u64,
    /// The preload library's file names: the one the launcher preloads, and the installed
    /// one (a process under `--pid` may carry either).
    pub lib_names: Vec<String>,
}

struct Done {
    pid: i32,
    comm: String,
    how: String,
    counters: Counters,
}

struct Watcher {
    set: Settings,
    verbose: bool,
    procs: Vec<Proc>,
    done: Vec<Done>,
    lingering: Vec<Tracked>,
    late: Counters,
    proc_dir: Option<ProcDir>,
    last_pid: Option<procfd::LastPid>,
    last_pid_seen: Option<i32>,
    /// Pids seen that are not in the tree, and when that list was last renewed.
    outside: HashSet<i32>,
    outside_at: Instant,
    /// The last pid given out as of the last listing of /proc.
    listed_up_to: Option<i32>,
    /// Children that could not be watched when found: asked again every second.
    refused: Vec<i32>,
    renewals: u64,
    scratch: Vec<i32>,
    me: i32,
    started: Instant,
    rounds: u64,
    /// The last round at the INTERVAL_MS pace (see YOUNG_INTERVAL_MS).
    paced_at: Instant,
}

impl Watcher {
    fn new(o: &Options) -> Watcher {
        Watcher {
            set: Settings {
                lib_names: o.lib_names.clone(),
                watch_all: o.watch_all,
                min_size: o.min_size,
                // One window under writeback: the watcher's settles are polled, never
                // waited on (the writer can't be made to wait from outside), so a second
                // one only kept a window more cached.
                params: Params::new(o.window.max(MIN_WINDOW))
                    .with_extra_lookahead(EXTRA_LOOKAHEAD)
                    .with_writeback_windows(1),
            },
            verbose: o.verbose,
            procs: Vec::new(),
            done: Vec::new(),
            lingering: Vec::new(),
            late: Counters::default(),
            proc_dir: ProcDir::open(c"/proc").ok(),
            last_pid: procfd::LastPid::open().ok(),
            last_pid_seen: None,
            outside: HashSet::new(),
            outside_at: Instant::now(),
            listed_up_to: None,
            refused: Vec::new(),
            renewals: 0,
            scratch: Vec::new(),
            me: dropbehind_sys::proc::pid(),
            started: Instant::now(),
            rounds: 0,
            paced_at: Instant::now(),
        }
    }

    /// The wait before the next round: short while a process is young.
    fn interval_ms(&self) -> i32 {
        let now = Instant::now();
        if self.procs.iter().any(|p| p.young(now)) {
            YOUNG_INTERVAL_MS
        } else {
            INTERVAL_MS
        }
    }

    fn add(&mut self, pid: i32) -> Result<(), Errno> {
        if pid == self.me {
            return Err(Errno(libc::EINVAL));
        }
        if self.procs.iter().any(|p| p.pid == pid) {
            return Err(Errno(libc::EADDRINUSE));
        }
        let mut p = Proc::attach(pid, &self.set)?;
        p.tell(self.verbose);
        self.procs.push(p);
        Ok(())
    }

    /// New descendants of watched processes. `last`: the last pid given out, read before
    /// the listing.
    fn discover(&mut self, last: Option<i32>) {
        let Some(dir) = self.proc_dir.as_mut() else {
            return;
        };
        let mut pids = std::mem::take(&mut self.scratch);
        if dir.numbers(&mut pids).is_err() {
            self.scratch = pids;
            return;
        }
        let renew = self.outside_at.elapsed() > Duration::from_secs(1);
        if renew {
            self.outside_at = Instant::now();
            for p in self.refused.drain(..) {
                self.outside.remove(&p);
            }
            // Now and then all of them (a process reparented into the tree, as an
            // orphan to a subreaper there).
            self.renewals += 1;
            if self.renewals.is_multiple_of(10) {
                self.outside.clear();
            }
        }
        match (self.listed_up_to, last) {
            (Some(from), Some(to)) => {
                // Pids go out in turn, so only those given out since the last listing
                // (from, to] can be new processes; a pid met before keeps its answer while
                // it stays listed (reading every pid's stat was most of a listing's cost).
                // One given out after `to` is read as unknown, and again next time.
                let listed: HashSet<i32> = pids.iter().copied().collect();
                self.outside
                    .retain(|p| listed.contains(p) && !given_out_between(*p, from, to));
            }
            _ if renew => self.outside.clear(),
            _ => {}
        }
        self.listed_up_to = last;
        // The pids not yet known, with their parents.
        let mut unknown: Vec<(i32, i32)> = Vec::new();
        for &pid in &pids {
            if pid == self.me
                || self.outside.contains(&pid)
                || self.procs.iter().any(|p| p.pid == pid)
            {
                continue;
            }
            if let Ok((ppid, _)) = procfd::parent_and_start(pid) {
                unknown.push((pid, ppid));
            }
        }
        // Until none is added: a grandchild listed before its parent is found on the next
        // pass.
        loop {
            let mut added = false;
            unknown.retain(|&(pid, ppid)| {
                if !self.procs.iter().any(|p| p.pid == ppid) {
                    return true;
                }
                if self.add(pid).is_ok() {
                    added = true;
                } else {
                    self.outside.insert(pid);
                    self.refused.push(pid);
                }
                false
            });
            if !added {
                break;
            }
        }
        self.outside.extend(unknown.iter().map(|&(pid, _)| pid));
        self.scratch = pids;
    }

    /// One round over every watched process.
    fn round(&mut self) {
        // A round at the INTERVAL_MS pace, or, in between, quick looks at young processes.
        let now = Instant::now();
        let paced =
            now.duration_since(self.paced_at) >= Duration::from_millis(INTERVAL_MS as u64 - 1);
        if paced {
            self.paced_at = now;
            self.rounds += 1;
        }
        // Listing /proc is most of a round's cost: new children are looked for when a pid
        // was given out since (a young process's first child too), and every
        // DISCOVER_EVERY rounds.
        let last = self.last_pid.as_ref().and_then(|l| l.read());
        if last.is_none()
            || last != self.last_pid_seen
            || paced && self.rounds % DISCOVER_EVERY == 1
        {
            self.last_pid_seen = last;
            self.discover(last);
        }
        let mut i = 0;
        while i < self.procs.len() {
            if !paced && !self.procs[i].young(now) {
                i += 1;
                continue;
            }
            let alive = self.procs[i].round(&self.set, paced);
            self.lingering.append(&mut self.procs[i].lingering);
            if alive {
                self.procs[i].tell(self.verbose);
                i += 1;
            } else {
                let mut p = self.procs.swap_remove(i);
                p.tell_now(self.verbose, true);
                self.retire(p);
            }
        }
        if !paced {
            return;
        }
        let tree: HashSet<i32> = self.procs.iter().map(|p| p.pid).collect();
        let me = self.me;
        let mut others = |dev: u64, ino: u64| open_elsewhere(dev, ino, &tree, me);
        for p in &mut self.procs {
            p.growth_round(&self.set, &mut others);
        }
        self.linger_round();
    }

    /// A process leaves the watch: its files finished (what is still being written back
    /// lingers), its figures kept for the report.
    fn retire(&mut self, mut p: Proc) {
        p.close_all(&self.set);
        self.lingering.append(&mut p.lingering);
        self.done.push(Done {
            pid: p.pid,
            comm: p.comm,
            how: p.how,
            counters: p.counters,
        });
    }

    fn linger_round(&mut self) {
        if self.lingering.is_empty() {
            return;
        }
        let mut late = std::mem::take(&mut self.late);
        let mut cx = Ctx {
            params: &self.set.params,
            min_size: self.set.min_size,
            c: &mut late,
            paced: true,
        };
        self.lingering.retain_mut(|f| !f.linger(&mut cx));
        self.late = late;
    }

    /// Lets every process go (its files finished), then waits a bounded time for what is
    /// still being written back.
    fn finish(&mut self) {
        for p in std::mem::take(&mut self.procs) {
            self.retire(p);
        }
        let t0 = Instant::now();
        while !self.lingering.is_empty() && t0.elapsed() < FINISH_BUDGET {
            self.linger_round();
            if !self.lingering.is_empty() {
                dropbehind_sys::thread::sleep_us(5_000);
            }
        }
        self.lingering.clear();
    }

    fn report(&self, sink: &Option<String>) {
        let Some(sink) = sink else {
            return;
        };
        let mut text = String::new();
        for d in &self.done {
            if d.counters.files > 0 {
                text += &report::report(d.pid, &d.comm, &d.how, &d.counters);
            }
        }
        if self.late.pages_released > 0 {
            text += &format!(
                "dropbehind: watcher, after the programs closed their files: {} pages released\n",
                self.late.pages_released
            );
        }
        if text.is_empty() {
            return;
        }
        let (user, sys) = dropbehind_sys::proc::own_cpu_us();
        let wall = self.started.elapsed().as_secs_f64();
        text += &format!(
            "dropbehind: watcher CPU time {:.2} s ({:.2} user, {:.2} system) in {:.1} s: {:.2}%\n",
            (user + sys) as f64 / 1e6,
            user as f64 / 1e6,
            sys as f64 / 1e6,
            wall,
            100.0 * (user + sys) as f64 / 1e6 / wall.max(1e-3)
        );
        if sink == "stderr" {
            eprint!("{text}");
        } else {
            use std::io::Write;
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(sink)
                .and_then(|mut f| f.write_all(text.as_bytes()));
        }
    }
}

/// Whether `pid` was given out after `from` up to `to`, pids wrapping at pid_max.
fn given_out_between(pid: i32, from: i32, to: i32) -> bool {
    if from <= to {
        pid > from && pid <= to
    } else {
        pid > from || pid <= to
    }
}

/// Whether a process outside `tree` (and other than the watcher) has the file open: then
/// growth of its cache may be theirs. Looks at every process's fds: called rarely.
fn open_elsewhere(dev: u64, ino: u64, tree: &HashSet<i32>, me: i32) -> bool {
    let Ok(mut procs) = ProcDir::open(c"/proc") else {
        return true;
    };
    let mut pids = Vec::new();
    if procs.numbers(&mut pids).is_err() {
        return true;
    }
    let mut fds = Vec::new();
    for pid in pids {
        if pid == me || tree.contains(&pid) {
            continue;
        }
        let Ok(mut d) = ProcDir::fds_of(pid) else {
            continue;
        };
        if d.numbers(&mut fds).is_err() {
            continue;
        }
        for &fd in &fds {
            if procfd::stat_fd(pid, fd).is_ok_and(|id| id.dev == dev && id.ino == ino) {
                return true;
            }
        }
    }
    false
}

fn signal_fd() -> Option<OwnFd> {
    signal::block_and_open(&signal::FORWARDED).ok()
}

/// Waits a round's interval, or less when a signal comes or `extra` (the child's pidfd)
/// polls readable. Returns which of the two are readable: asking them again would cost a
/// syscall each round.
fn wait_round(sfd: &Option<OwnFd>, extra: Option<&OwnFd>, ms: i32) -> (bool, bool) {
    let mut fds = [None, None];
    let mut polled = Vec::with_capacity(2);
    for (i, f) in [sfd.as_ref(), extra].into_iter().enumerate() {
        if let Some(f) = f {
            fds[i] = Some(polled.len());
            polled.push(libc::pollfd {
                fd: f.raw(),
                events: libc::POLLIN,
                revents: 0,
            });
        }
    }
    if pidfd::poll(&mut polled, ms).is_err() {
        // Can't tell: both asked directly.
        return (true, true);
    }
    let ready = |i: Option<usize>| i.is_some_and(|i| polled[i].revents != 0);
    (ready(fds[0]), ready(fds[1]))
}

/// `dropbehind -- CMD` with the watcher: the launcher stays the parent, passes on the
/// signals it is sent, and exits as the command did.
pub fn launch(
    mut cmd: std::process::Command,
    program: &str,
    o: &Options,
    reports: Option<crate::reports::Reports>,
) -> ExitCode {
    let sfd = signal_fd();
    signal::unblock_in_child(&mut cmd, &signal::FORWARDED);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                127
            } else {
                126
            };
            eprintln!("dropbehind: {program}: {e}");
            return ExitCode::from(code);
        }
    };
    let pid = child.id() as i32;
    let child_fd = pidfd::open(pid).ok();
    let mut w = Watcher::new(o);
    if let Err(e) = w.add(pid)
        && o.verbose
    {
        eprintln!("dropbehind: pid {pid}: not watched: {}", procs::refusal(e));
    }
    loop {
        let (signalled, child_ready) = wait_round(&sfd, child_fd.as_ref(), w.interval_ms());
        if let Some(s) = &sfd
            && signalled
        {
            while let Some(sig) = signal::read(s) {
                // A terminal's signal reached the child already (same process group).
                if sig.from_process {
                    let _ = signal::kill(pid, sig.signo);
                }
            }
        }
        if child_fd
            .as_ref()
            .is_none_or(|f| child_ready && pidfd::exited(f))
        {
            break;
        }
        w.round();
    }
    let status = child.wait();
    w.finish();
    if let Some(r) = reports {
        r.print();
    }
    w.report(&o.stats);
    use std::os::unix::process::ExitStatusExt;
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => ExitCode::from(c as u8),
            (None, Some(sig)) => {
                signal::reraise(sig);
                ExitCode::from(128 + sig as u8)
            }
            _ => ExitCode::from(1),
        },
        Err(e) => {
            eprintln!("dropbehind: waiting for {program}: {e}");
            ExitCode::from(1)
        }
    }
}

/// `dropbehind --pid PID...`: watch running processes and their children until they exit;
/// SIGINT, SIGTERM, SIGHUP or SIGQUIT detaches and leaves them running.
pub fn attach(pids: &[i32], o: &Options) -> ExitCode {
    let sfd = signal_fd();
    let mut w = Watcher::new(o);
    let mut refused = 0;
    for &pid in pids {
        if let Err(e) = w.add(pid) {
            refused += 1;
            let why = if e.0 == libc::EINVAL {
                "that is this watcher itself"
            } else {
                procs::refusal(e)
            };
            eprintln!("dropbehind: --pid {pid}: {why}");
        }
    }
    if w.procs.is_empty() {
        return ExitCode::from(2);
    }
    if refused > 0 {
        let watching: Vec<String> = w.procs.iter().map(|p| p.pid.to_string()).collect();
        eprintln!("dropbehind: watching {} only", watching.join(", "));
    }
    let mut detached = false;
    loop {
        let (signalled, _) = wait_round(&sfd, None, w.interval_ms());
        if let Some(s) = &sfd
            && signalled
            && signal::read(s).is_some()
        {
            detached = true;
            break;
        }
        w.round();
        if w.procs.is_empty() {
            break;
        }
    }
    if detached && o.verbose {
        eprintln!("dropbehind: detached; the processes run on");
    }
    w.finish();
    w.report(&o.stats);
    ExitCode::from(if refused > 0 { 2 } else { 0 })
}
