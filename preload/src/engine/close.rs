//! fd lifetimes: a new number forgets what its slot held; a close finishes the streams
//! (drops what reads consumed, settles what was written).

use super::files::drop_owned;
use super::write::finish_write;
use super::{Engine, contained};
use crate::fdtable::{self, FileState, Managed};

/// A new fd number appeared (open, dup, fcntl dup): whatever the slot held belonged to an
/// earlier file. The new one is examined lazily, on its first read or write, so that opens
/// cost nothing.
pub fn forget(fd: i32) {
    if let Some(slot) = fdtable::slot(fd) {
        slot.forget();
    }
}

/// The program opened `fd` through stdio: its flags unseen.
pub fn opened_unseen(fd: i32) {
    if let Some(slot) = fdtable::slot(fd) {
        slot.opened_unseen();
    }
}

/// `fd` is a duplicate of `old`.
pub fn duplicated(old: i32, fd: i32) {
    crate::dirprefetch::duplicated(old, fd);
    if let Some(slot) = fdtable::slot(fd) {
        slot.duplicated(fdtable::slot(old));
    }
}

/// The program opened `fd` with `flags`.
pub fn opened(fd: i32, flags: i32) {
    if let Some(slot) = fdtable::slot(fd) {
        slot.opened(flags);
    }
}

/// Before `fd` is closed: drop what its streams consumed, settle what they wrote.
pub fn closing(fd: i32) {
    crate::dirprefetch::closing(fd);
    super::tree::program_closes(fd as u32, fd as u32);
    settle(fd);
    // Jobs still using the fd (its stream's end was skipped: another thread held its slot)
    // finish before the number can name another file.
    crate::writeback::release_fds(fd as u32, fd as u32);
}

/// `closing` without the held-fd check (`closing_range` makes that once for the range).
#[inline]
fn settle(fd: i32) {
    let Some(slot) = fdtable::slot(fd) else {
        return;
    };
    if slot.state() == Managed::Tracked {
        finish_tracked(fd, slot);
    }
    slot.forget();
}

#[inline(never)]
fn finish_tracked(fd: i32, slot: &'static fdtable::Slot) {
    contained(|eng| {
        if let Some(mut c) = slot.try_claim() {
            finish_streams(eng, fd, c.file());
        }
    });
}

/// Before fds `lo..=hi` are closed together.
pub fn closing_range(lo: u32, hi: u32) {
    crate::dirprefetch::closing_range(lo, hi);
    // Held fds are the shim's own reopenings, never claimed: checked over the whole range.
    super::tree::program_closes(lo, hi);
    crate::writeback::release_fds(lo, hi);
    // Slots never claimed have nothing to settle or forget.
    let used = fdtable::used().len() as u32;
    if lo >= used {
        return;
    }
    for fd in lo..=hi.min(used - 1) {
        settle(fd as i32);
    }
}

pub(super) fn finish_streams(eng: &Engine, fd: i32, f: &mut FileState) {
    crate::info!(
        "fd {fd}: closing; read {:?} up to {} MiB, wrote up to {} MiB",
        f.read.pattern,
        f.read.next >> 20,
        f.write.next >> 20
    );
    if let Some(c) = f.read.finish() {
        drop_owned(fd, f, &c.proof, c.range);
    }
    finish_write(eng, fd, f);
    super::tree::closing(eng, fd, f);
}
