//! dropbehind's system layer: the only place with raw syscalls, `/proc` and `/sys` readers
//! and page-cache calls. The preload library, the launcher and the watcher all go through it.
//!
//! # Safety
//!
//! Every call here is a raw `syscall(2)`, never libc's wrapper: in the preload library,
//! libc's wrapper of a function the shim also exports would route back into the shim. The
//! rules each `unsafe` block relies on are these, and each block names the one it uses:
//! - *kernel-checked*: the arguments are integers or pointers the kernel validates itself
//!   (a bad fd or address is an error return, never undefined behaviour in this process);
//! - *own buffer*: a pointer argument refers to a live local or a slice of ours, valid and
//!   large enough for what the kernel writes, for the whole call;
//! - *own fd*: the fd was opened by this crate's caller for the shim's own use, and nobody
//!   else closes it.
//!
//! Every function leaves errno as it found it and reports failure as `Err(Errno)`, as rustix
//! and nix do: a program's errno is its own, and a hook's extra calls must not change it.

pub mod blockdev;
pub mod cache;
pub mod claim;
pub mod dir;
pub mod errno;
pub mod file;
pub mod mem;
pub mod pidfd;
pub mod proc;
pub mod procfd;
pub mod signal;
pub mod thread;

pub use errno::{Errno, ErrnoGuard};

/// Runs one raw syscall with errno preserved: `Err` with the errno it set when it failed.
#[inline]
fn cvt(f: impl FnOnce() -> libc::c_long) -> Result<libc::c_long, Errno> {
    let _e = ErrnoGuard::new();
    let r = f();
    if r < 0 { Err(Errno::last()) } else { Ok(r) }
}

/// A program's own call made as a raw syscall, for a hook whose real function is not
/// resolved yet. errno is set as the call sets it: this is the program's call, not ours.
///
/// # Safety
///
/// The caller passes the program's own arguments for syscall `nr`, unchanged, with the
/// same meaning they have for the libc function the hook stands in for.
pub unsafe fn passthrough(nr: libc::c_long, args: &[usize]) -> libc::c_long {
    let a = |i: usize| args.get(i).copied().unwrap_or(0);
    // SAFETY: the caller's contract: the program's own call, passed through.
    unsafe { libc::syscall(nr, a(0), a(1), a(2), a(3), a(4), a(5)) }
}
