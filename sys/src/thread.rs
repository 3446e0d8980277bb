//! Threads: the shim's helpers are started with every signal blocked (so no signal meant
//! for the program is ever delivered to them) and sleep on futexes.

use crate::{Errno, cvt};
use std::sync::atomic::AtomicU32;

/// Starts a detached thread with every signal blocked. False when it could not be started.
pub fn spawn_detached(name: &str, stack: usize, f: impl FnOnce() + Send + 'static) -> bool {
    // SAFETY: kernel-checked: sigset_t is plain data, all zeroes is a valid value.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: own buffer: both sets are locals. Only this thread's mask changes, and it is
    // restored right after the spawn; the new thread inherits the full mask.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let ok = std::thread::Builder::new()
        .name(name.into())
        .stack_size(stack)
        .spawn(f)
        .is_ok();
    // SAFETY: own buffer: restoring the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    ok
}

/// Whether a futex wait ended by a wake (or a spurious return) or by its timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woken {
    Woken,
    TimedOut,
}

/// Sleeps while `word` holds `seen`, at most `timeout`.
pub fn futex_wait(word: &AtomicU32, seen: u32, timeout: Option<&libc::timespec>) -> Woken {
    match futex(word, libc::FUTEX_WAIT, seen, timeout) {
        Err(Errno(libc::ETIMEDOUT)) => Woken::TimedOut,
        _ => Woken::Woken,
    }
}

/// Wakes one thread sleeping on `word`.
pub fn futex_wake(word: &AtomicU32) {
    let _ = futex(word, libc::FUTEX_WAKE, 1, None);
}

/// Wakes every thread sleeping on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    let _ = futex(word, libc::FUTEX_WAKE, i32::MAX as u32, None);
}

fn futex(
    word: &AtomicU32,
    op: i32,
    val: u32,
    timeout: Option<&libc::timespec>,
) -> Result<libc::c_long, Errno> {
    // SAFETY: own buffer: `word` is a live u32 and `timeout` a live timespec for the call.
    cvt(|| unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            val,
            timeout.map_or(std::ptr::null(), |t| t as *const libc::timespec),
        )
    })
}

/// Sleeps `us` microseconds (an interrupted sleep just returns early).
pub fn sleep_us(us: u64) {
    let ts = libc::timespec {
        tv_sec: (us / 1_000_000) as i64,
        tv_nsec: ((us % 1_000_000) * 1000) as i64,
    };
    // SAFETY: own buffer: a valid local timespec; no remainder asked for.
    let _ = cvt(|| unsafe {
        libc::syscall(
            libc::SYS_nanosleep,
            &ts as *const libc::timespec,
            std::ptr::null_mut::<libc::timespec>(),
        )
    });
}

/// Gives the CPU to another runnable thread.
pub fn yield_now() {
    // SAFETY: kernel-checked: no arguments.
    let _ = cvt(|| unsafe { libc::syscall(libc::SYS_sched_yield) });
}

/// Lowers the calling thread to nice `nice`, never raising it: a thread already at `nice`
/// or lower in priority is left as it is (Linux: PRIO_PROCESS with 0 names the thread).
pub fn lower_own_nice(nice: i32) -> Result<(), Errno> {
    // SAFETY: kernel-checked: integers only. The raw call returns 20 - nice (1..=40), so
    // that no nice value reads as the error -1.
    let now =
        20 - cvt(|| unsafe { libc::syscall(libc::SYS_getpriority, libc::PRIO_PROCESS, 0) })? as i32;
    if now >= nice {
        return Ok(());
    }
    // SAFETY: kernel-checked: integers only.
    cvt(|| unsafe { libc::syscall(libc::SYS_setpriority, libc::PRIO_PROCESS, 0, nice) })?;
    Ok(())
}
