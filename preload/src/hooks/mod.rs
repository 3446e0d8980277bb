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
use crate::{engine, entry, log, real};

/// The constructor: resolve real symbols, read the environment, install the engine.
extern "C" fn init() {
    entry::inside((), || {
        real::resolve_all();
        // Panics are contained at every entry point; the default hook would still print
        // them on the program's stderr. This is the library's own std: the program's hook
        // is its own.
        std::panic::set_hook(Box::new(|info| crate::debug!("internal panic: {info}")));
        // A setuid program (the library given by /etc/ld.so.preload) must not let its
        // caller's environment choose files to append to or fds to write to: defaults only.
        // SAFETY: getauxval only reads the auxiliary vector the kernel gave the process.
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
            // SAFETY: `after_fork_child` is a plain function that lives as long as the
            // library, which is never unloaded while the process runs.
            unsafe { libc::pthread_atfork(None, None, Some(after_fork_child)) };
        }
    })
}

extern "C" fn after_fork_child() {
    engine::after_fork_child();
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;
