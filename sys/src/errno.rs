//! errno: the one place that reads or writes it.

/// An errno value, as a syscall wrapper's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    /// The calling thread's errno now.
    pub fn last() -> Errno {
        Errno(get())
    }
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

#[inline]
pub fn get() -> i32 {
    // SAFETY: kernel-checked in spirit: glibc's errno location is valid for the calling
    // thread for its whole life.
    unsafe { *libc::__errno_location() }
}

#[inline]
pub fn set(e: i32) {
    // SAFETY: as in `get`.
    unsafe { *libc::__errno_location() = e }
}

/// Saves errno on creation and puts it back when dropped.
pub struct ErrnoGuard(i32);

impl ErrnoGuard {
    #[allow(clippy::new_without_default)]
    #[inline]
    pub fn new() -> ErrnoGuard {
        ErrnoGuard(get())
    }
}

impl Drop for ErrnoGuard {
    #[inline]
    fn drop(&mut self) {
        set(self.0)
    }
}
