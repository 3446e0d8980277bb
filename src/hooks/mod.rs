//! Hooks: the only exported symbols. Each is thin: ask the engine, call the real function
//! exactly once, hand the result to the engine, return the result untouched.
//!
//! The frame that calls the real function holds no value with a destructor, so a thread
//! cancelled inside the real call unwinds through it cleanly. Variadic functions (open,
//! openat, fcntl) take their optional argument as a fixed one: on x86_64 and aarch64 Linux
//! it arrives in the same register either way.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "the hooks take variadic arguments as fixed ones: only x86_64 and aarch64 are checked"
);

mod copy;
mod dir;
mod fd;
mod mmap;
mod process;
mod read;
mod stdio;
mod write;

use crate::config::{self, Backend};
use crate::{engine, log, real};

/// The constructor: resolve real symbols, read the environment, install the engine.
extern "C" fn init() {
    let Some(_g) = engine::ShimGuard::enter() else {
        return;
    };
    real::resolve_all();
    // Panics are caught at every entry point; the default hook would still print them on
    // the program's stderr. This is the library's own std: the program's hook is its own.
    std::panic::set_hook(Box::new(|info| crate::debug!("internal panic: {info}")));
    // A setuid program (the library given by /etc/ld.so.preload) must not let its caller's
    // environment choose files to append to or fds to write to: defaults only.
    // SAFETY: getauxval has no preconditions.
    let secure = unsafe { libc::getauxval(libc::AT_SECURE) } != 0;
    let (cfg, bad) = config::from_lookup(|name| {
        if secure {
            None
        } else {
            std::env::var(name).ok()
        }
    });
    for b in &bad {
        let default = config::variable(b.name).default;
        log::line_to(
            2,
            format_args!("warning: {b}; using the default ({default})"),
        );
    }
    log::init(cfg.log_level, cfg.log_fd);
    let backend = cfg.backend;
    crate::info!(
        "window {} min-size {} backend {}",
        cfg.window,
        cfg.min_size,
        backend.name()
    );
    engine::install(cfg);
    if backend != Backend::Off {
        // SAFETY: registering plain functions.
        unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
    }
}

extern "C" fn after_fork_child() {
    engine::after_fork_child();
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;

/// Sets errno to ENOSYS and returns -1: for a real symbol that does not exist.
fn enosys<T: From<i8>>() -> T {
    crate::residency::set_errno(libc::ENOSYS);
    T::from(-1)
}

/// The raw syscall behind a hook, for when its real symbol is not (yet) resolved.
fn raw(nr: libc::c_long, a: [usize; 6]) -> libc::ssize_t {
    // SAFETY: a raw syscall with the caller's own arguments.
    unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) as libc::ssize_t }
}
