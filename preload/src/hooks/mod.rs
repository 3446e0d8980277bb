//! Hooks: the only exported symbols. Each is thin: ask the engine, call the real function
//! exactly once, hand the result to the engine, return the result untouched.
//!
//! The frame that calls the real function holds no value with a destructor, so a thread
//! cancelled inside the real call unwinds through it cleanly. Hooks, and the real functions
//! they call, are `extern "C-unwind"`: glibc's forced unwind (pthread_cancel, pthread_exit)
//! may pass through them. Declared `extern "C"`, a frame that inlines anything able to
//! unwind gets an abort guard whose call-site table leaves the nounwind real call out, and a
//! thread cancelled there aborts the program (seen with LTO: docs/interposition.md).
//!
//! Variadic functions (open, openat, fcntl) take their optional argument as a fixed one: on
//! x86_64 and aarch64 Linux it arrives in the same register either way.

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!(
    "the hooks take variadic arguments as fixed ones: only x86_64 and aarch64 are checked"
);

/// Inside a read or write hook's body, the two ways it calls its real function: `call`, a
/// plain (tail) call once the symbol is resolved, and `unresolved`, cold, `call_real!` with
/// its fallback while the symbol is not resolved yet (or is missing).
macro_rules! real_calls {
    (($fd:ident $(, $a:ident: $t:ty)*) -> $ret:ty = $real:ident or ($($fb:tt)+)) => {
        #[cold]
        #[inline(never)]
        extern "C-unwind" fn unresolved($fd: libc::c_int $(, $a: $t)*) -> $ret {
            call_real!($real($fd $(, $a)*) or $($fb)+)
        }
        #[inline(always)]
        fn call($fd: libc::c_int $(, $a: $t)*) -> $ret {
            match $crate::real::$real.ready() {
                // SAFETY: as in `call_real!`: glibc's function of this signature, with
                // the program's own arguments.
                Some(f) => unsafe { f($fd $(, $a)*) },
                None => unresolved($fd $(, $a)*),
            }
        }
    };
}

mod copy;
mod dir;
mod entries;
mod fd;
mod mmap;
mod process;
mod read;
mod stdio;
mod write;

use crate::config::{self, Backend};
use crate::{engine, entry, log};

/// The constructor: read the environment, install the engine. Real symbols are resolved
/// on each hook's first call (see `real`).
extern "C" fn init() {
    entry::inside((), || {
        crate::real::find_front();
        // Panics are contained at every entry point; the default hook would still print
        // them on the program's stderr. This is the library's own std: the program's hook
        // is its own.
        std::panic::set_hook(Box::new(|info| crate::debug!("internal panic: {info}")));
        // A setuid program (the library given by /etc/ld.so.preload) must not let its
        // caller's environment choose files to append to or fds to write to: defaults only.
        // Most processes set none of the variables: one pass over the environment then
        // spares a getenv (under std's lock, with a copy of the name) for each of them.
        let ours = dropbehind_bare::environment_has(b"DROPBEHIND_")
            // SAFETY: getauxval only reads the auxiliary vector the kernel gave the process.
            && unsafe { libc::getauxval(libc::AT_SECURE) } == 0;
        let (cfg, bad) =
            config::from_lookup(|name| if ours { std::env::var(name).ok() } else { None });
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
            register_atfork();
        }
    })
}

/// pthread_atfork(NULL, NULL, after_fork_child), made the way libc_nonshared's
/// pthread_atfork makes it, but through the GOT (bound at load) rather than a lazily bound
/// PLT entry: the first call through the PLT would fault its page in at every start.
fn register_atfork() {
    unsafe extern "C" {
        static __dso_handle: *const libc::c_void;
        fn __register_atfork(
            prepare: Option<extern "C" fn()>,
            parent: Option<extern "C" fn()>,
            child: Option<extern "C" fn()>,
            dso: *const libc::c_void,
        ) -> libc::c_int;
    }
    // SAFETY: glibc's own entry behind pthread_atfork, given this library's handle (so
    // the handler goes if the library is ever unloaded); `after_fork_child` is a plain
    // function that lives as long as the library.
    unsafe { __register_atfork(None, None, Some(after_fork_child), __dso_handle) };
}

extern "C" fn after_fork_child() {
    // Even inside: a fork from a signal handler that interrupted the shim still resets.
    entry::even_inside((), engine::after_fork_child);
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = init;
