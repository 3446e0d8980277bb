//! Hot-path overhead probe: time many small I/O calls to measure per-call cost.
//! `cached`: 4 KiB preads at pseudo-random page-aligned offsets in the first 64 MiB of a
//! file (or the whole file if smaller), after one warm-up pass that caches that region.
//! `pipe`: write 4096 bytes into a pipe, then read them back, N times.
//! `random`: 4 KiB preads at pseudo-random page-aligned offsets over the whole file
//! (meant for a cold file). Offsets come from a fixed-seed xorshift, so runs repeat.
//! `sequential`: 4 KiB preads walking the first 64 MiB of a file in order, cycling, after a
//! warm-up pass (a cached sequential stream). `reads`: the same with read(), back to the
//! start with lseek at the end of the region. `open`: open, read (up to 4 KiB) and close
//! each of the files of a directory, in name order, N times over (an interpreter importing
//! modules, a compiler reading headers), after a warm-up pass; ops counts the opens.
//!
//! Output (one JSON line): {"mode":"cached","ops":N,"seconds":f,"ns_per_op":f}

use clap::{Parser, Subcommand};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Instant;

const PAGE: u64 = 4096;
const REGION: u64 = 64 << 20;

/// Time N small preads (cached or cold) or N pipe write+read round trips.
#[derive(Parser)]
#[command(name = "pread_loop")]
struct Args {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand)]
enum Mode {
    /// Random 4 KiB preads within the first 64 MiB of FILE, after caching it
    Cached {
        /// File to read (only its first 64 MiB)
        file: PathBuf,
        /// Number of preads
        #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        ops: u64,
    },
    /// Write 4096 bytes into a pipe and read them back, N times
    Pipe {
        /// Number of write+read round trips
        #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        ops: u64,
    },
    /// 4 KiB preads walking the first 64 MiB of FILE in order, cycling, after caching it
    Sequential {
        /// File to read (only its first 64 MiB)
        file: PathBuf,
        /// Number of preads
        #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        ops: u64,
    },
    /// The same with read(), and lseek back to the start at the end of the 64 MiB
    Reads {
        /// File to read (only its first 64 MiB)
        file: PathBuf,
        /// Number of reads
        #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..))]
        ops: u64,
    },
    /// Open, read and close every file of DIR, in name order, PASSES times over
    Open {
        /// Directory of small files
        dir: PathBuf,
        /// Passes over the directory's files
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        passes: u64,
    },
    /// Random 4 KiB preads over the whole of FILE (meant for a cold file)
    Random {
        /// File to read (should not be cached)
        file: PathBuf,
        /// Number of preads
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
        ops: u64,
    },
}

fn check(n: isize, what: &str) -> Result<(), String> {
    if n < 0 {
        Err(format!("{what}: {}", std::io::Error::last_os_error()))
    } else {
        Ok(())
    }
}

/// `ops` preads of 4 KiB at random pages among the first `pages` pages of `fd`.
fn preads(fd: i32, pages: u64, ops: u64) -> Result<(), String> {
    let mut buf = [0u8; PAGE as usize];
    let mut x = 0x9E37_79B9_7F4A_7C15u64; // fixed seed: xorshift64
    for _ in 0..ops {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % pages) * PAGE;
        check(
            // SAFETY: `buf` is a live local of `buf.len()` bytes, which is all pread writes.
            unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off as libc::off_t) },
            "pread",
        )?;
    }
    Ok(())
}

/// Opens, reads up to 4 KiB of and closes each of `paths`, `passes` times: the opens.
fn opens(paths: &[std::ffi::CString], passes: u64) -> Result<u64, String> {
    let mut buf = [0u8; PAGE as usize];
    for _ in 0..passes {
        for p in paths {
            // SAFETY: `p` is a NUL-terminated path that open only reads.
            let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
            check(fd as isize, "open")?;
            // SAFETY: `buf` is a live local of `buf.len()` bytes, which is all read writes.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            // SAFETY: `fd` was just opened here and is closed once.
            unsafe { libc::close(fd) };
            check(n, "read")?;
        }
    }
    Ok(passes * paths.len() as u64)
}

/// `ops` 4 KiB reads walking the first `pages` pages of `fd` in order, cycling: with
/// pread, or with read and an lseek back to the start at the end.
fn walk(fd: i32, pages: u64, ops: u64, plain_read: bool) -> Result<(), String> {
    let mut buf = [0u8; PAGE as usize];
    let mut p = 0;
    for _ in 0..ops {
        let n = if plain_read {
            if p == 0 {
                // SAFETY: lseek on an fd this program opened; no memory involved.
                let r = unsafe { libc::lseek(fd, 0, libc::SEEK_SET) };
                check(r as isize, "lseek")?;
            }
            // SAFETY: `buf` is a live local of `buf.len()` bytes, which is all read writes.
            unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) }
        } else {
            let off = (p * PAGE) as libc::off_t;
            // SAFETY: `buf` is a live local of `buf.len()` bytes, which is all pread writes.
            unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off) }
        };
        check(n, "read")?;
        p = (p + 1) % pages;
    }
    Ok(())
}

fn run(mode: &Mode) -> Result<(&'static str, u64, f64), String> {
    if let Mode::Open { dir, passes } = mode {
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        names.sort();
        let paths: Vec<_> = names
            .iter()
            .filter_map(|p| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).ok())
            .collect();
        opens(&paths, 1)?;
        let t = Instant::now();
        let n = opens(&paths, *passes)?;
        return Ok(("open", n, t.elapsed().as_secs_f64()));
    }
    let (name, file, ops) = match mode {
        Mode::Cached { file, ops } => ("cached", Some(file), *ops),
        Mode::Sequential { file, ops } => ("sequential", Some(file), *ops),
        Mode::Reads { file, ops } => ("reads", Some(file), *ops),
        Mode::Random { file, ops } => ("random", Some(file), *ops),
        Mode::Pipe { ops } => ("pipe", None, *ops),
        Mode::Open { .. } => unreachable!("handled above"),
    };
    let Some(path) = file else {
        let mut fds = [0; 2];
        // SAFETY: `fds` is a live local `[c_int; 2]`, exactly the two ints pipe writes.
        check(unsafe { libc::pipe(fds.as_mut_ptr()) } as isize, "pipe")?;
        let mut buf = [0u8; PAGE as usize];
        let t = Instant::now();
        for _ in 0..ops {
            check(
                // SAFETY: `buf` is a live local of `buf.len()` bytes, which is all write reads.
                unsafe { libc::write(fds[1], buf.as_ptr().cast(), buf.len()) },
                "pipe write",
            )?;
            let mut got = 0;
            while got < buf.len() {
                // SAFETY: `buf[got..]` is a live slice of `buf.len() - got` bytes, which is
                // all read may write.
                let n =
                    unsafe { libc::read(fds[0], buf[got..].as_mut_ptr().cast(), buf.len() - got) };
                check(n, "pipe read")?;
                got += n as usize;
            }
        }
        return Ok((name, ops, t.elapsed().as_secs_f64()));
    };
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let size = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    let span = if name == "random" {
        size
    } else {
        size.min(REGION)
    };
    let pages = span.div_ceil(PAGE);
    if pages == 0 {
        return Err(format!("{}: empty file", path.display()));
    }
    if name != "random" {
        let mut buf = [0u8; PAGE as usize];
        for p in 0..pages {
            let off = (p * PAGE) as libc::off_t;
            check(
                // SAFETY: `buf` is a live local of `buf.len()` bytes, which is all pread writes.
                unsafe { libc::pread(f.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), off) },
                "pread",
            )?;
        }
    }
    let t = Instant::now();
    match name {
        "sequential" => walk(f.as_raw_fd(), pages, ops, false)?,
        "reads" => walk(f.as_raw_fd(), pages, ops, true)?,
        _ => preads(f.as_raw_fd(), pages, ops)?,
    }
    Ok((name, ops, t.elapsed().as_secs_f64()))
}

fn main() {
    let args = Args::parse();
    match run(&args.mode) {
        Ok((mode, ops, s)) => println!(
            "{{\"mode\":\"{mode}\",\"ops\":{ops},\"seconds\":{s:.6},\"ns_per_op\":{:.2}}}",
            s * 1e9 / ops as f64
        ),
        Err(e) => {
            eprintln!("pread_loop: {e}");
            std::process::exit(1);
        }
    }
}
