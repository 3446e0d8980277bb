//! Signals for the launcher that stays the parent: the signals it forwards are blocked and
//! read from a signalfd (no handler runs in the launcher), and a child's death by signal is
//! re-raised on the launcher itself.

use crate::file::OwnFd;
use crate::{Errno, cvt};

/// The signals the launcher passes on to its child.
pub const FORWARDED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// rt_sigprocmask(how, set) for the calling thread, the old mask not asked for: a raw call,
/// async-signal-safe (also run between fork and exec).
fn mask(how: libc::c_int, set: &libc::sigset_t) -> libc::c_long {
    // SAFETY: own buffer: `set` is a live reference for the call; the kernel copies it.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            how,
            set as *const libc::sigset_t,
            std::ptr::null_mut::<libc::sigset_t>(),
            8usize,
        )
    }
}

fn set_of(sigs: &[i32]) -> libc::sigset_t {
    // SAFETY: kernel-checked: sigset_t is plain data, all zeroes is a valid value.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: `set` is a local; sigemptyset/sigaddset only write it.
    unsafe {
        libc::sigemptyset(&mut set);
        for &s in sigs {
            libc::sigaddset(&mut set, s);
        }
    }
    set
}

/// Blocks `sigs` for the calling thread (threads started later inherit it; a spawned
/// child's mask is reset by std's Command) and returns a signalfd that reads them.
pub fn block_and_open(sigs: &[i32]) -> Result<OwnFd, Errno> {
    let set = set_of(sigs);
    cvt(|| mask(libc::SIG_BLOCK, &set))?;
    // SAFETY: own buffer: `set` is a live local; the kernel copies it.
    let fd = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_signalfd4,
            -1,
            &set as *const libc::sigset_t,
            8usize,
            libc::SFD_CLOEXEC | libc::SFD_NONBLOCK,
        )
    })?;
    Ok(OwnFd::from_raw(fd as i32))
}

/// One signal read from a signalfd.
#[derive(Clone, Copy, Debug)]
pub struct Received {
    pub signo: i32,
    /// Sent by a process (kill, sigqueue), as opposed to the kernel: a terminal's Ctrl-C
    /// reaches the whole foreground process group with SI_KERNEL, the child included.
    pub from_process: bool,
    pub sender: u32,
}

/// The next pending signal on `sfd`, if any.
pub fn read(sfd: &OwnFd) -> Option<Received> {
    // SAFETY: kernel-checked: signalfd_siginfo is plain data, all zeroes is a valid value.
    let mut si: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
    let n = std::mem::size_of::<libc::signalfd_siginfo>();
    // SAFETY: own buffer: `si` is a local of exactly `n` bytes; own fd.
    let r = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_read,
            sfd.raw(),
            &mut si as *mut libc::signalfd_siginfo,
            n,
        )
    })
    .ok()?;
    (r as usize == n).then_some(Received {
        signo: si.ssi_signo as i32,
        from_process: si.ssi_code <= 0,
        sender: si.ssi_pid,
    })
}

/// kill(2): sends `sig` to `pid` (the launcher's own unreaped child: its pid can't be reused).
pub fn kill(pid: i32, sig: i32) -> Result<(), Errno> {
    // SAFETY: kernel-checked: integers only.
    cvt(|| unsafe { libc::syscall(libc::SYS_kill, pid, sig) })?;
    Ok(())
}

/// Dies of `sig` as the child did: default action restored, the signal unblocked and sent
/// to ourselves. Returns only when the default action does not kill (then the caller exits).
pub fn reraise(sig: i32) {
    // SAFETY: kernel-checked: SIG_DFL for a valid signal number installs no handler code.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
    // No core file of the launcher's own: the child's dump (if any) is the one that counts.
    let lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: own buffer: `lim` is a live local.
    let _ = cvt(|| unsafe { libc::syscall(libc::SYS_setrlimit, libc::RLIMIT_CORE, &lim) });
    let set = set_of(&[sig]);
    let _ = cvt(|| mask(libc::SIG_UNBLOCK, &set));
    let _ = kill(crate::proc::pid(), sig);
}

/// Makes `cmd`'s child start with `sigs` unblocked (a blocked mask is inherited through
/// exec, and std's spawn keeps the parent's).
pub fn unblock_in_child(cmd: &mut std::process::Command, sigs: &'static [i32]) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, and only calls
    // sigprocmask through a raw syscall with a set built on its own stack: async-signal-
    // safe, no allocation, no lock.
    unsafe {
        cmd.pre_exec(move || {
            mask(libc::SIG_UNBLOCK, &set_of(sigs));
            Ok(())
        });
    }
}
