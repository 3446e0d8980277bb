//! Writeback from a thread of its own. `sync_file_range(WRITE)` does not wait for the
//! writes, but it does block while the device's queue is full: for a range of a few hundred
//! MiB, 100 to 220 ms here (bench/results/watcher.md). The watcher's looks at the programs
//! must not wait for that, or a fast writer (fio at 1.2 GB/s) runs ahead of them by as
//! much.
//!
//! Requests go to one thread, in order, in pieces of `PIECE` bytes. Each file counts its
//! requests still queued, so that a file followed by growth asks again only once the
//! previous ones went out.

use dropbehind_core::policy::Range;
use dropbehind_sys::file::OwnFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};

/// One request is issued in pieces of this size, so that what is queued behind it for
/// another file waits less.
const PIECE: u64 = 16 << 20;

struct Job {
    fd: Arc<OwnFd>,
    range: Range,
    queued: Arc<AtomicUsize>,
}

fn sender() -> Option<Sender<Job>> {
    static TX: OnceLock<Option<Mutex<Sender<Job>>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("writeback".into())
            .spawn(move || {
                for job in rx {
                    let mut off = job.range.start;
                    while off < job.range.end {
                        let len = PIECE.min(job.range.end - off);
                        let _ = dropbehind_sys::cache::start_writeback(job.fd.raw(), off, len);
                        off += len;
                    }
                    job.queued.fetch_sub(1, Ordering::Release);
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    })
    .as_ref()
    .and_then(|m| m.lock().ok().map(|tx| tx.clone()))
}

/// Starts writeback of `range` of the file behind `fd` (an fd of the watcher's own: the
/// thread holds it until done). Issued here, waiting, if the thread could not be started.
pub fn start(fd: &Arc<OwnFd>, range: Range, queued: &Arc<AtomicUsize>) {
    if range.is_empty() {
        return;
    }
    queued.fetch_add(1, Ordering::AcqRel);
    let job = Job {
        fd: fd.clone(),
        range,
        queued: queued.clone(),
    };
    if let Some(tx) = sender()
        && tx.send(job).is_ok()
    {
        return;
    }
    let _ = dropbehind_sys::cache::start_writeback(fd.raw(), range.start, range.len());
    queued.fetch_sub(1, Ordering::AcqRel);
}
