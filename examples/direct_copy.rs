//! The floor for any copy that keeps its data out of the page cache: O_DIRECT reads on one
//! thread and O_DIRECT writes on another, BUFFERS buffers of CHUNK bytes in flight between
//! them, no fsync. A copy whose footprint is bounded must have written (nearly) every byte
//! to the device before it ends, so on a given device no bounded copy can beat this one by
//! much; a plain copy, which ends with the copy still dirty in memory, can.
//!
//! Output (one JSON line): {"bytes":N,"seconds":f}

use clap::Parser;
use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::io::Error;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::mpsc::sync_channel;
use std::time::Instant;

const CHUNK: usize = 8 << 20;
const BUFFERS: usize = 4;
/// O_DIRECT wants buffers, offsets and lengths aligned to the logical block size.
const ALIGN: usize = 4096;

/// Copy SRC to DST with O_DIRECT reads and writes running in parallel.
#[derive(Parser)]
#[command(name = "direct_copy")]
struct Args {
    /// File to copy from
    src: PathBuf,
    /// File to copy to (created or truncated, mode 0644)
    dst: PathBuf,
}

/// A block-aligned heap buffer.
struct Buffer {
    ptr: *mut u8,
    /// Bytes of data in it.
    len: usize,
}

// SAFETY: a Buffer is owned by one thread at a time (passed through channels).
unsafe impl Send for Buffer {}

impl Buffer {
    fn new() -> Buffer {
        // SAFETY: non-zero size, valid alignment.
        let ptr = unsafe { alloc_zeroed(Layout::from_size_align(CHUNK, ALIGN).unwrap()) };
        assert!(!ptr.is_null(), "out of memory");
        Buffer { ptr, len: 0 }
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in new() with this layout.
        unsafe { dealloc(self.ptr, Layout::from_size_align(CHUNK, ALIGN).unwrap()) };
    }
}

/// pwrite all of `len` bytes at `off`, or pread up to `len`: an O_DIRECT read comes back
/// short and unaligned only at the end of the file, where another read would be refused.
fn xfer(fd: i32, buf: *mut u8, len: usize, off: u64, write: bool) -> Result<usize, Error> {
    let mut done = 0;
    while done < len {
        // SAFETY: `buf` holds `len` bytes.
        let n = unsafe {
            let p = buf.add(done);
            if write {
                libc::pwrite(fd, p.cast(), len - done, (off + done as u64) as libc::off_t)
            } else {
                libc::pread(fd, p.cast(), len - done, (off + done as u64) as libc::off_t)
            }
        };
        match n {
            0 => break,
            n if n > 0 => {
                done += n as usize;
                if !write && done % ALIGN != 0 {
                    break;
                }
            }
            _ => {
                let e = Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
    Ok(done)
}

fn copy(args: &Args) -> Result<u64, (PathBuf, Error)> {
    let src = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&args.src)
        .map_err(|e| (args.src.clone(), e))?;
    let dst = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .custom_flags(libc::O_DIRECT)
        .open(&args.dst)
        .map_err(|e| (args.dst.clone(), e))?;
    let (full_tx, full_rx) = sync_channel::<Buffer>(BUFFERS);
    let (empty_tx, empty_rx) = sync_channel::<Buffer>(BUFFERS);
    for _ in 0..BUFFERS {
        empty_tx.send(Buffer::new()).unwrap();
    }
    let (sfd, dfd) = (src.as_raw_fd(), dst.as_raw_fd());
    let reader = std::thread::spawn(move || -> Result<u64, Error> {
        let mut off = 0u64;
        while let Ok(mut buf) = empty_rx.recv() {
            buf.len = xfer(sfd, buf.ptr, CHUNK, off, false)?;
            off += buf.len as u64;
            let end = buf.len < CHUNK;
            if full_tx.send(buf).is_err() || end {
                break;
            }
        }
        Ok(off)
    });
    let mut written = 0u64;
    let mut result = Ok(());
    while let Ok(buf) = full_rx.recv() {
        // The tail is written in whole blocks, then the file is cut to size.
        let len = buf.len.div_ceil(ALIGN) * ALIGN;
        if len > 0 {
            if let Err(e) = xfer(dfd, buf.ptr, len, written, true) {
                result = Err(e);
                break;
            }
        }
        written += buf.len as u64;
        if buf.len < CHUNK || empty_tx.send(buf).is_err() {
            break;
        }
    }
    drop(full_rx);
    drop(empty_tx);
    let read = reader.join().unwrap().map_err(|e| (args.src.clone(), e))?;
    result.map_err(|e| (args.dst.clone(), e))?;
    dst.set_len(read).map_err(|e| (args.dst.clone(), e))?;
    Ok(read)
}

fn main() {
    let args = Args::parse();
    let t = Instant::now();
    match copy(&args) {
        Ok(bytes) => println!(
            "{{\"bytes\":{bytes},\"seconds\":{:.6}}}",
            t.elapsed().as_secs_f64()
        ),
        Err((path, e)) => {
            eprintln!("direct_copy: {}: {e}", path.display());
            std::process::exit(1);
        }
    }
}
