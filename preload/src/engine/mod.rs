//! The engine: takes events from the hooks, runs them through the policy for the fd's slot,
//! and performs the resulting actions through `sys`.
//!
//! Every entry point is fail-open: before the constructor ran, inside the shim's own calls,
//! for fds beyond the table, when a slot is busy, or if policy code panicked, it does nothing
//! and the program's call proceeds untouched. The hooks call the real function themselves,
//! outside anything here, exactly once.
//!
//! One module per concern: `files` (adopting an fd, the proof's snapshot and drops, close),
//! `read`, `write`, `copy` (copy_file_range, sendfile, splice), `stdio`, `dir`, `map`.

mod close;
mod copy;
mod dir;
mod files;
mod map;
mod read;
mod stdio;
mod tree;
mod write;

pub use close::{closing, closing_range, duplicated, forget, opened, opened_unseen};
pub use copy::copy_len;
pub use dir::{directory_closing, directory_opened, file_used, watching_entries};
pub use files::dontcache_refused;
pub use files::may_manage;
pub use map::{Mapping, Pages, mapped, unmapped, unmapping};
pub use read::{
    ReadPath, ReadTicket, advised, after_fast_read, after_read, before_read, read_path, seeked,
};
pub use stdio::{
    stdio_after_read, stdio_after_write, stdio_before_read, stdio_before_write, stdio_closing,
};
pub use write::{
    WritePath, WriteTicket, after_fast_write, after_write, before_write, truncating, write_path,
};

use crate::config::{Backend, Config, StatsSink};
use crate::policy::Params;
use crate::{entry, fdtable, stats};
use std::cell::UnsafeCell;
use std::ffi::CString;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

pub struct Engine {
    pub cfg: Config,
    params: Params,
    exclude: Vec<CString>,
}

/// The engine, written once by the constructor. Not a `OnceLock`, whose initial state is
/// not all zeroes: that put it in the data segment, and installing it copied that page
/// (after faulting it in to read it) and faulted in `Once`'s code, at every start. This one
/// starts as zeroes, in .bss.
struct EngineCell {
    /// EMPTY, WRITING (the constructor is installing it) or READY.
    state: AtomicU8,
    value: UnsafeCell<MaybeUninit<Engine>>,
}

const EMPTY: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

// SAFETY: `value` is written only by the one caller of `install` that moved `state` from
// EMPTY to WRITING, before it stores READY (Release); it is read only after `get` loaded
// READY (Acquire), and never written again.
unsafe impl Sync for EngineCell {}

static ENGINE: EngineCell = EngineCell {
    state: AtomicU8::new(EMPTY),
    value: UnsafeCell::new(MaybeUninit::uninit()),
};

impl EngineCell {
    #[inline]
    fn get(&self) -> Option<&Engine> {
        if self.state.load(Ordering::Acquire) != READY {
            return None;
        }
        // SAFETY: READY is stored only after `value` was written (see `Sync` above).
        Some(unsafe { (*self.value.get()).assume_init_ref() })
    }

    fn set(&self, e: Engine) -> bool {
        if self
            .state
            .compare_exchange(EMPTY, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        // SAFETY: this caller alone moved `state` to WRITING: nobody else writes `value`,
        // and nobody reads it before READY.
        unsafe { (*self.value.get()).write(e) };
        self.state.store(READY, Ordering::Release);
        true
    }
}

/// Installs the configuration (constructor only). Returns false if already installed.
#[inline]
pub fn install(cfg: Config) -> bool {
    let exclude = if cfg.exclude.is_empty() {
        Vec::new()
    } else {
        cfg.exclude
            .iter()
            .filter_map(|g| CString::new(g.as_str()).ok())
            .collect()
    };
    let params = Params::new(cfg.window);
    ENGINE.set(Engine {
        cfg,
        params,
        exclude,
    })
}

/// Set for good when the program sandboxes itself (see hooks/process.rs).
static DISABLED: AtomicBool = AtomicBool::new(false);

pub fn disable() {
    DISABLED.store(true, Ordering::Release);
    for slot in fdtable::used() {
        slot.forget_fast();
    }
    // Helper threads stop before the sandbox could kill the process for their syscalls.
    crate::prefetch::shutdown();
    crate::mapwatch::shutdown();
    crate::dirprefetch::shutdown();
    crate::writeback::shutdown();
}

#[inline]
fn engine() -> Option<&'static Engine> {
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    ENGINE.get().filter(|e| e.cfg.backend != Backend::Off)
}

pub fn config() -> Option<&'static Config> {
    ENGINE.get().map(|e| &e.cfg)
}

/// Runs `f` on the engine, inside the shim (see `entry::inside`), when the shim is on.
fn contained<R: Default>(f: impl FnOnce(&'static Engine) -> R) -> R {
    contained_or(R::default(), f)
}

/// As `contained`, answering `fallback` whenever the shim can't or mustn't act.
fn contained_or<R>(fallback: R, f: impl FnOnce(&'static Engine) -> R) -> R {
    match engine() {
        Some(eng) => entry::inside(fallback, || f(eng)),
        None => fallback,
    }
}

// ---------------------------------------------------------------------------------------
// Process lifecycle

/// In the child after fork: no other thread survived, so no claim is really held.
pub fn after_fork_child() {
    fdtable::release_all_claims();
    crate::dirprefetch::after_fork_child();
    crate::prefetch::after_fork_child();
    crate::mapwatch::after_fork_child();
    crate::writeback::after_fork_child();
    tree::after_fork_child();
    // The child inherits the parent's atexit registration along with its counters.
    stats::reset_all();
}

/// At exit: what watched mappings brought in goes, then the report, if asked for.
extern "C" fn at_exit() {
    entry::inside((), || {
        tree::at_exit();
        // What was handed to the writeback helper (windows, the tree's last files) is
        // dropped before the report.
        crate::writeback::drain();
        crate::mapwatch::at_exit();
        if let Some(cfg) = config() {
            stats::emit(cfg);
        }
    })
}

/// Registers `at_exit` with atexit, once per process. Not in the constructor: handlers run
/// in reverse order, and programs like coreutils close stderr in an atexit handler
/// registered at the start of main. So it is registered when there is something to do at
/// exit: the first file tracked with the report on, the first watched mapping.
pub fn register_at_exit() {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if !REGISTERED.swap(true, Ordering::AcqRel) {
        // SAFETY: `at_exit` is a plain function that contains its own panics and lives as
        // long as the library, which is never unloaded while the process runs.
        unsafe { libc::atexit(at_exit) };
    }
}

/// As `register_at_exit`, only when the report is asked for.
fn register_report() {
    if config().is_some_and(|c| c.stats != StatsSink::Off) {
        register_at_exit();
    }
}
