//! The one way into the shim. Whatever the shim does on a program's thread (a hook's work
//! before or after the real call, the constructor, atexit and fork handlers) runs through
//! `inside`: re-entry refused, errno kept, panics contained (`even_inside`, for the few
//! steps that must run on a thread inside the shim too, keeps the last two).

use crate::sys::ErrnoGuard;
use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};

thread_local! {
    static IN_SHIM: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as inside the shim: hooks reached from here (the shim's own reads,
/// std's, an allocator's) pass straight through to the real function.
pub struct ShimGuard(());

impl ShimGuard {
    /// `None` when this thread is already inside, or its thread-locals are gone (exiting).
    pub fn enter() -> Option<ShimGuard> {
        let was = IN_SHIM.try_with(|f| f.replace(true)).unwrap_or(true);
        (!was).then_some(ShimGuard(()))
    }
}

impl Drop for ShimGuard {
    fn drop(&mut self) {
        let _ = IN_SHIM.try_with(|f| f.set(false));
    }
}

/// Runs `f` inside the shim, or answers `fallback` when this thread is inside already or
/// `f` panicked. errno is the program's again on return. Never wraps the real call: a
/// thread cancelled inside it must unwind through frames without catch_unwind.
#[inline]
pub fn inside<R>(fallback: R, f: impl FnOnce() -> R) -> R {
    let Some(_g) = ShimGuard::enter() else {
        return fallback;
    };
    let _e = ErrnoGuard::new();
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

/// `inside` without the re-entry guard, for the few steps that must run even on a thread
/// inside the shim already: a close waiting for the writeback jobs that use its fd (the
/// shim's own write path ends streams too), the shim disabled before a sandbox. errno is
/// kept and panics contained: the hooks are `extern "C-unwind"`, so a panic let out here
/// would unwind into the program's frames.
#[inline]
pub fn even_inside<R>(fallback: R, f: impl FnOnce() -> R) -> R {
    let _e = ErrnoGuard::new();
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}
