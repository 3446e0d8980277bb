//! The kernel's best case, as a reference: read, copy or write a file with RWF_DONTCACHE
//! (uncached buffered I/O, libc::RWF_DONTCACHE = 0x80) passed directly to preadv2 and
//! pwritev2, in 1 MiB chunks, with no fsync.
//!
//! Output (one JSON line): {"bytes":N,"seconds":f}
//! Exits 3 if the kernel or filesystem answers EOPNOTSUPP (no RWF_DONTCACHE support).

use clap::{Parser, Subcommand};
use std::io::Error;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

const CHUNK: usize = 1 << 20;

/// Read, copy or write a file with RWF_DONTCACHE.
#[derive(Parser)]
#[command(name = "uncached")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Read FILE to the end with preadv2(RWF_DONTCACHE)
    Read {
        /// File to read
        file: PathBuf,
    },
    /// Copy SRC to DST (created/truncated, mode 0644) with preadv2 + pwritev2(RWF_DONTCACHE)
    Copy {
        /// File to copy from
        src: PathBuf,
        /// File to copy to
        dst: PathBuf,
    },
    /// Write MIB MiB of zeros to DST (created/truncated, mode 0644) with pwritev2(RWF_DONTCACHE),
    /// as `dd if=/dev/zero of=DST bs=1M count=MIB` writes them
    Write {
        /// File to write
        dst: PathBuf,
        /// MiB to write
        mib: u64,
    },
}

/// One preadv2 (into `buf`) or pwritev2 (from `buf`) with RWF_DONTCACHE, retried on EINTR.
fn xfer(fd: i32, buf: &mut [u8], off: u64, write: bool) -> Result<usize, Error> {
    let iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    loop {
        // SAFETY: the one iovec describes `buf`, a live exclusively borrowed slice of
        // `buf.len()` bytes, which is all preadv2 writes or pwritev2 reads.
        let n = unsafe {
            if write {
                libc::pwritev2(fd, &iov, 1, off as libc::off_t, libc::RWF_DONTCACHE)
            } else {
                libc::preadv2(fd, &iov, 1, off as libc::off_t, libc::RWF_DONTCACHE)
            }
        };
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Creates or truncates `d` for writing.
fn create(d: &Path) -> Result<std::fs::File, (PathBuf, Error)> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(d)
        .map_err(|e| (d.to_path_buf(), e))
}

/// Writes all of `buf` at `off`.
fn write_all(fd: i32, buf: &mut [u8], off: u64, d: &Path) -> Result<(), (PathBuf, Error)> {
    let mut done = 0;
    while done < buf.len() {
        let w = xfer(fd, &mut buf[done..], off + done as u64, true)
            .map_err(|e| (d.to_path_buf(), e))?;
        if w == 0 {
            return Err((d.to_path_buf(), Error::from(std::io::ErrorKind::WriteZero)));
        }
        done += w;
    }
    Ok(())
}

fn write_zeros(dst: &Path, mib: u64) -> Result<u64, (PathBuf, Error)> {
    let out = create(dst)?;
    let mut buf = vec![0u8; CHUNK];
    for i in 0..mib {
        write_all(out.as_raw_fd(), &mut buf, i * CHUNK as u64, dst)?;
    }
    Ok(mib * CHUNK as u64)
}

fn run(src: &PathBuf, dst: Option<&PathBuf>) -> Result<u64, (PathBuf, Error)> {
    let input = std::fs::File::open(src).map_err(|e| (src.clone(), e))?;
    let output = match dst {
        Some(d) => Some(create(d)?),
        None => None,
    };
    let mut buf = vec![0u8; CHUNK];
    let mut off = 0u64;
    loop {
        let n = xfer(input.as_raw_fd(), &mut buf, off, false).map_err(|e| (src.clone(), e))?;
        if n == 0 {
            return Ok(off);
        }
        if let (Some(out), Some(d)) = (&output, dst) {
            write_all(out.as_raw_fd(), &mut buf[..n], off, d)?;
        }
        off += n as u64;
    }
}

fn main() {
    let args = Args::parse();
    let t = Instant::now();
    let res = match &args.cmd {
        Cmd::Read { file } => run(file, None),
        Cmd::Copy { src, dst } => run(src, Some(dst)),
        Cmd::Write { dst, mib } => write_zeros(dst, *mib),
    };
    match res {
        Ok(bytes) => println!(
            "{{\"bytes\":{bytes},\"seconds\":{:.6}}}",
            t.elapsed().as_secs_f64()
        ),
        Err((path, e)) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            eprintln!(
                "uncached: {}: RWF_DONTCACHE is not supported here (EOPNOTSUPP: kernel too old or \
                 filesystem without uncached buffered I/O)",
                path.display()
            );
            std::process::exit(3);
        }
        Err((path, e)) => {
            eprintln!("uncached: {}: {e}", path.display());
            std::process::exit(1);
        }
    }
}
