//! Reproduces the 2007 `large_app_load_simul` working-set scanner: map a file read-only
//! (MAP_SHARED) and touch one byte of every K-th page, in order, for N passes, timing each
//! pass and counting the major faults the scans took.
//!
//! Output (one JSON line):
//! {"file":"...","bytes":N,"passes":N,"seconds":[s1,...],"majflt":M}

use clap::Parser;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::Instant;

/// Scan a file's pages through a read-only shared mapping, one pass after another.
#[derive(Parser)]
#[command(name = "mmap_scan")]
struct Args {
    /// File to map (read-only, MAP_SHARED)
    file: PathBuf,
    /// Number of passes over the mapping
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    passes: u64,
    /// Touch one byte of every K-th page
    #[arg(long = "stride-pages", value_name = "K", default_value_t = 1,
          value_parser = clap::value_parser!(u64).range(1..))]
    stride_pages: u64,
}

fn majflt() -> i64 {
    // SAFETY: `rusage` is a plain C struct of integers, for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a live local `rusage`, the only memory getrusage writes.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_majflt as i64
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn run(args: &Args) -> Result<String, String> {
    let name = args.file.display().to_string();
    let file = std::fs::File::open(&args.file).map_err(|e| format!("{name}: {e}"))?;
    let len = file.metadata().map_err(|e| format!("{name}: {e}"))?.len() as usize;
    if len == 0 {
        return Err(format!("{name}: empty file, nothing to map"));
    }
    // SAFETY: sysconf takes an integer name and no pointers.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let step = page.saturating_mul(args.stride_pages as usize);
    // SAFETY: a new read-only shared mapping (null hint) of `len` > 0 bytes of `file`, which
    // stays open for the call, overlaps no Rust object; MAP_FAILED is checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(format!("{name}: mmap: {}", std::io::Error::last_os_error()));
    }
    let base = p as *const u8;

    let mut seconds = Vec::with_capacity(args.passes as usize);
    let mut sum = 0u64;
    let flt0 = majflt();
    for _ in 0..args.passes {
        let t = Instant::now();
        for off in (0..len).step_by(step) {
            // Volatile read: every touch must reach memory (and fault if not resident).
            // SAFETY: off < len, so the byte is inside the `len`-byte mapping at `base`
            // checked above, which is unmapped only after this loop (and the file is not
            // expected to shrink while it is scanned).
            sum = sum.wrapping_add(unsafe { base.add(off).read_volatile() } as u64);
        }
        seconds.push(t.elapsed().as_secs_f64());
    }
    let flt = majflt() - flt0;
    std::hint::black_box(sum);
    // SAFETY: `p`/`len` are exactly the mapping made above; `base` is not used after this.
    unsafe { libc::munmap(p, len) };

    let secs: Vec<String> = seconds.iter().map(|s| format!("{s:.6}")).collect();
    Ok(format!(
        "{{\"file\":{},\"bytes\":{},\"passes\":{},\"seconds\":[{}],\"majflt\":{}}}",
        json_str(&name),
        len,
        args.passes,
        secs.join(","),
        flt
    ))
}

fn main() {
    let args = Args::parse();
    match run(&args) {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("mmap_scan: {e}");
            std::process::exit(1);
        }
    }
}
