//! Reproduces the 2009 stride-100 load: touch C pages at page indexes 0, N, 2N, ...
//! (wrapping modulo the file's page count), either through one read-only MAP_SHARED
//! mapping of the whole file (one byte per page, optionally after MADV_RANDOM) or with a
//! 4096-byte pread at each page. Works on huge sparse files: the file is mapped once and
//! only the strided pages are ever read.
//!
//! Output (one JSON line): {"mode":"mmap","pages":C,"seconds":f,"majflt":M}

use clap::{CommandFactory, Parser, ValueEnum};
use std::os::fd::AsRawFd;
use std::time::Instant;

#[derive(Clone, Copy, PartialEq, ValueEnum)]
enum Mode {
    Mmap,
    Pread,
}

/// Read one page out of every N, C times, through a mapping or with pread.
#[derive(Parser)]
#[command(name = "stride_read")]
struct Args {
    /// File to read (may be a huge sparse file)
    file: std::path::PathBuf,
    /// Distance between touched pages, in pages
    #[arg(long = "stride-pages", value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    stride_pages: u64,
    /// Number of pages to touch
    #[arg(long, value_name = "C", default_value_t = 20000)]
    count: u64,
    /// How to touch a page
    #[arg(long, value_enum, default_value_t = Mode::Mmap)]
    mode: Mode,
    /// madvise(MADV_RANDOM) on the mapping first (mmap mode only)
    #[arg(long = "madv-random")]
    madv_random: bool,
}

fn majflt() -> i64 {
    // SAFETY: `rusage` is a plain C struct of integers, for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live local `rusage`, the only memory getrusage writes.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_majflt as i64
}

fn run(args: &Args) -> Result<String, String> {
    let name = args.file.display();
    let file = std::fs::File::open(&args.file).map_err(|e| format!("{name}: {e}"))?;
    let fd = file.as_raw_fd();
    let size = file.metadata().map_err(|e| format!("{name}: {e}"))?.len();
    // SAFETY: sysconf takes an integer name and no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
    let npages = size.div_ceil(page);
    if npages == 0 {
        return Err(format!("{name}: empty file"));
    }
    let len = size as usize;
    let mut base: *const u8 = std::ptr::null();
    if args.mode == Mode::Mmap {
        // SAFETY: a new read-only shared mapping (null hint) of `len` > 0 bytes of `file`,
        // which stays open for the call, overlaps no Rust object; MAP_FAILED is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(format!("{name}: mmap: {}", std::io::Error::last_os_error()));
        }
        // SAFETY: `p`/`len` are exactly the mapping just made; MADV_RANDOM is only a
        // read-ahead hint and changes no memory contents.
        if args.madv_random && unsafe { libc::madvise(p, len, libc::MADV_RANDOM) } != 0 {
            return Err(format!(
                "{name}: madvise: {}",
                std::io::Error::last_os_error()
            ));
        }
        base = p as *const u8;
    }

    let mut buf = [0u8; 4096];
    let mut sum = 0u64;
    let mut idx = 0u64;
    let flt0 = majflt();
    let t = Instant::now();
    for _ in 0..args.count {
        let off = idx * page;
        if args.mode == Mode::Mmap {
            // SAFETY: in mmap mode `base` is the `len`-byte mapping made above (unmapped only
            // after this loop); idx < npages = ceil(size / page), so off = idx * page < size
            // = len and the byte read is inside it.
            sum = sum.wrapping_add(unsafe { base.add(off as usize).read_volatile() } as u64);
        } else {
            // SAFETY: `buf` is a live local of `buf.len()` bytes, which is all pread writes.
            let n =
                unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), buf.len(), off as libc::off_t) };
            if n < 0 {
                return Err(format!(
                    "{name}: pread at {off}: {}",
                    std::io::Error::last_os_error()
                ));
            }
            sum = sum.wrapping_add(buf[0] as u64);
        }
        idx = ((idx as u128 + args.stride_pages as u128) % npages as u128) as u64;
    }
    let seconds = t.elapsed().as_secs_f64();
    let flt = majflt() - flt0;
    std::hint::black_box(sum);
    if !base.is_null() {
        // SAFETY: a non-null `base` is the `len`-byte mapping made above, and it is not
        // used after this.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
    let mode = if args.mode == Mode::Mmap {
        "mmap"
    } else {
        "pread"
    };
    Ok(format!(
        "{{\"mode\":\"{mode}\",\"pages\":{},\"seconds\":{seconds:.6},\"majflt\":{flt}}}",
        args.count
    ))
}

fn main() {
    let args = Args::parse();
    if args.madv_random && args.mode != Mode::Mmap {
        Args::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--madv-random needs --mode mmap",
            )
            .exit();
    }
    match run(&args) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("stride_read: {e}");
            std::process::exit(1);
        }
    }
}
