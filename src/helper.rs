//! What the shim's helper threads share: how they are started (detached, every signal
//! blocked, so no signal meant for the program is ever delivered to them) and the futex
//! they sleep on.

use std::sync::atomic::AtomicU32;

/// Starts a detached thread with every signal blocked. False when it could not be started.
pub fn spawn(name: &str, stack: usize, f: impl FnOnce() + Send + 'static) -> bool {
    // SAFETY: this thread's signal mask, restored right after the spawn; the new thread
    // inherits the full mask.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    let ok = std::thread::Builder::new()
        .name(name.into())
        .stack_size(stack)
        .spawn(f)
        .is_ok();
    // SAFETY: restoring the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    ok
}

/// Sleeps while `word` holds `seen`, at most `timeout`. False when the timeout expired.
pub fn wait(word: &AtomicU32, seen: u32, timeout: Option<&libc::timespec>) -> bool {
    let r = futex(word, libc::FUTEX_WAIT, seen, timeout);
    !(r < 0 && crate::residency::errno() == libc::ETIMEDOUT)
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
        // SAFETY: plain sleep.
        unsafe { libc::usleep(500) };
    }
    // SAFETY: plain sleep.
    unsafe { libc::usleep(1000) };
}

/// Wakes one thread sleeping on `word`.
pub fn wake(word: &AtomicU32) {
    futex(word, libc::FUTEX_WAKE, 1, None);
}

fn futex(word: &AtomicU32, op: i32, val: u32, timeout: Option<&libc::timespec>) -> libc::c_long {
    // SAFETY: `word` is a live u32 for the duration of the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            val,
            timeout.map_or(std::ptr::null(), |t| t as *const libc::timespec),
        )
    }
}
