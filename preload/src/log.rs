//! Opt-in logging (DROPBEHIND_LOG), written with raw write(2) from a stack buffer: no
//! allocation, no stdio, nothing printed unless asked. Never called from read/write hooks.

use crate::config::LogLevel;
use std::fmt::Write;
use std::sync::atomic::{AtomicI32, AtomicU8, Ordering};

static LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Off as u8);
static FD: AtomicI32 = AtomicI32::new(2);

pub fn init(level: LogLevel, fd: i32) {
    // The defaults are there already: storing them again would copy a page at every start.
    if level != LogLevel::Off || fd != 2 {
        LEVEL.store(level as u8, Ordering::Relaxed);
        FD.store(fd, Ordering::Relaxed);
    }
}

pub fn enabled(level: LogLevel) -> bool {
    level != LogLevel::Off && (level as u8) <= LEVEL.load(Ordering::Relaxed)
}

struct StackBuf {
    buf: [u8; 512],
    len: usize,
}

impl Write for StackBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Writes one line, `dropbehind[pid]: ...`, to `fd`, preserving errno.
pub fn line_to(fd: i32, args: std::fmt::Arguments) {
    let _e = crate::sys::ErrnoGuard::new();
    let mut b = StackBuf {
        buf: [0; 512],
        len: 0,
    };
    let _ = write!(b, "dropbehind[{}]: ", crate::sys::proc::pid());
    let _ = b.write_fmt(args);
    if b.len == b.buf.len() {
        b.len -= 1;
    }
    b.buf[b.len] = b'\n';
    b.len += 1;
    crate::sys::file::write_all(fd, &b.buf[..b.len]);
}

pub fn log(level: LogLevel, args: std::fmt::Arguments) {
    if enabled(level) {
        line_to(FD.load(Ordering::Relaxed), args);
    }
}

#[macro_export]
macro_rules! debug {
    ($($t:tt)*) => { $crate::log::log($crate::config::LogLevel::Debug, format_args!($($t)*)) };
}

#[macro_export]
macro_rules! info {
    ($($t:tt)*) => { $crate::log::log($crate::config::LogLevel::Info, format_args!($($t)*)) };
}
