//! The shim's helper threads and the lifecycle they share. Each helper is started lazily,
//! at the first work it gets; runs with every signal blocked and no fd the program
//! knows about; goes when idle (a thread would keep alive a process whose main thread
//! called pthread_exit); stops, and is waited for, before the program sandboxes itself; and
//! does not exist in a forked child; runs at the program's priority or below it (`Priority`).
//!
//! - `prefetch`: readahead ahead of sequential read streams;
//! - `mapwatch`: samples big file mappings;
//! - `dirprefetch`: lists and stats big cold directories (a pool per directory);
//! - `writeback`: starts, waits for and drops write streams' windows.

pub mod dirprefetch;
pub mod mapwatch;
pub mod prefetch;
pub mod queue;
pub mod writeback;

use crate::sys::thread::{self, Woken};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicUsize};

atomic_enum! {
    /// Whether a helper's thread exists.
    pub enum Run in AtomicRun(u8 as AtomicU8) {
        NotStarted = 0,
        Running = 1,
        /// Could not be started: the helper's work is skipped for good.
        Failed = 2,
    }
}

/// A thread name's longest (the kernel keeps 15 bytes).
const NAME_MAX: usize = 15;

/// The CPU priority a helper thread runs at.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Priority {
    /// The program's.
    Program,
    /// This nice value, or the program's if that is lower already; the program's under a
    /// seccomp filter, which a service hardened against `setpriority` (systemd's
    /// `~@resources`) would be killed by. Decided by the thread that starts the helper,
    /// whose filter the helper inherits.
    Nice(i32),
}

/// One helper thread's lifecycle.
pub struct Helper {
    /// The thread's name, in place: a pointer in this static would be relocated at every
    /// start, copying its page of the data segment.
    name: [u8; NAME_MAX],
    name_len: u8,
    stack: usize,
    priority: Priority,
    run: AtomicRun,
    /// Bumped by every wake-up: the futex the thread sleeps on.
    wake: AtomicU32,
    stop: AtomicBool,
    /// Threads of this helper alive: a leaving thread and the one started after it may
    /// briefly both exist, and each counts only itself.
    live: AtomicU32,
}

impl Helper {
    pub const fn new(name: &'static str, stack: usize, priority: Priority) -> Helper {
        Helper {
            name: crate::inline_name(name.as_bytes()),
            name_len: name.len() as u8,
            stack,
            priority,
            run: AtomicRun::new(Run::NotStarted),
            wake: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            live: AtomicU32::new(0),
        }
    }

    /// Starts the thread running `body` unless it runs already. True when it was started
    /// now (it will find its work without a wake-up).
    pub fn start(&'static self, body: fn()) -> bool {
        if self
            .run
            .compare_exchange(Run::NotStarted, Run::Running, AcqRel, Acquire)
            .is_err()
        {
            return false;
        }
        self.live.fetch_add(1, SeqCst);
        let name =
            std::str::from_utf8(&self.name[..self.name_len as usize]).unwrap_or("dropbehind");
        // Read here, on the starting thread: the helper must not open an fd the program
        // could be given next.
        let nice = match self.priority {
            Priority::Nice(n) if !crate::sys::proc::seccomp_filtered() => Some(n),
            _ => None,
        };
        let started = thread::spawn_detached(name, self.stack, move || {
            if let Some(n) = nice {
                let _ = thread::lower_own_nice(n);
            }
            // A panic ends the thread's work, not its count: the helper is then given up.
            if std::panic::catch_unwind(body).is_err() {
                self.run.store(Run::Failed, Release);
            }
            self.live.fetch_sub(1, SeqCst);
        });
        if !started {
            self.live.fetch_sub(1, SeqCst);
            self.run.store(Run::Failed, Release);
        }
        true
    }

    /// The thread could not be started, or gave up: its work is skipped.
    pub fn failed(&self) -> bool {
        self.run.load(Acquire) == Run::Failed
    }

    /// From the thread: give up for good (its resources could not be had).
    pub fn fail(&self) {
        self.run.store(Run::Failed, Release);
    }

    /// Whether the thread exists now.
    pub fn running(&self) -> bool {
        self.live.load(Relaxed) > 0
    }

    /// The shim is being disabled (a sandbox is coming), or the process exits.
    pub fn stopping(&self) -> bool {
        self.stop.load(SeqCst)
    }

    /// The current wake-up count, to sleep on.
    pub fn seen(&self) -> u32 {
        self.wake.load(SeqCst)
    }

    /// Sleeps until woken after `seen`, or `timeout` passed. Not at all once a stop was
    /// asked: `shutdown` stores the stop before its wake, so a `seen` read after that wake
    /// would sleep through it, the whole timeout, past `shutdown`'s wait.
    pub fn sleep(&self, seen: u32, timeout: &libc::timespec) -> Woken {
        if self.stopping() {
            return Woken::Woken;
        }
        thread::futex_wait(&self.wake, seen, Some(timeout))
    }

    /// Counts a wake-up; `signal`: also wake the thread if it sleeps.
    pub fn wake(&self, signal: bool) {
        self.wake.fetch_add(1, SeqCst);
        if signal {
            thread::futex_wake(&self.wake);
        }
    }

    /// From the idle thread, about to leave: marks it gone, unless `more` (asked after
    /// that, so work queued meanwhile is never stranded) finds work and nobody else has
    /// started a thread for it. True when the thread should go on.
    pub fn idle_exit(&self, more: impl Fn() -> bool) -> bool {
        self.run.store(Run::NotStarted, SeqCst);
        more()
            && self
                .run
                .compare_exchange(Run::NotStarted, Run::Running, AcqRel, Acquire)
                .is_ok()
    }

    /// Asks the thread to stop, without waiting for it (at exit).
    pub fn request_stop(&self) {
        self.stop.store(true, SeqCst);
    }

    /// Stops the thread and waits for it briefly (see `wait_until_stopped`).
    pub fn shutdown(&self) {
        self.stop.store(true, SeqCst);
        self.wake(true);
        wait_until_stopped(100, || self.live.load(SeqCst) == 0);
    }

    /// In a forked child: the thread does not exist there.
    pub fn after_fork_child(&self) {
        self.live.store(0, Relaxed);
        self.wake.store(0, Relaxed);
        self.run.store(Run::NotStarted, Relaxed);
    }
}

/// How many fds of the shim's own a helper may hold past the program's closes, at most
/// `most`: one per 64 the program may open, so a program with a low RLIMIT_NOFILE keeps
/// its numbers. Asked once per process (`cache` starts at usize::MAX).
pub fn own_fds_allowed(cache: &AtomicUsize, most: usize) -> usize {
    let n = cache.load(Relaxed);
    if n != usize::MAX {
        return n;
    }
    let n = (crate::sys::proc::fd_limit().saturating_sub(64) / 64).min(most as u64) as usize;
    cache.store(n, Relaxed);
    n
}

/// Waits, at most `timeout_ms`, until `gone` says a helper's threads have stopped (the
/// shim is being disabled before a sandbox). A thread marks itself gone just before glibc
/// runs its thread exit, which still makes system calls: when there was anything to wait
/// for, a short grace lets that finish too.
pub fn wait_until_stopped(timeout_ms: u32, gone: impl Fn() -> bool) {
    if gone() {
        return;
    }
    for _ in 0..timeout_ms * 2 {
        if gone() {
            break;
        }
        thread::sleep_us(500);
    }
    thread::sleep_us(1000);
}
