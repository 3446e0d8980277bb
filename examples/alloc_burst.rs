//! Reproduces the 2011 `mapped-file-stream`-style allocation burst: after an optional
//! delay, map MIB MiB of anonymous private memory and write one byte to each 4 KiB page,
//! timing every page's first touch (CLOCK_MONOTONIC around the write). Under memory
//! pressure from page cache, those first touches are where reclaim stalls show up.
//!
//! Output (one JSON line):
//! {"mib":N,"pages":N,"worst_us":f,"p99_us":f,"p999_us":f,"median_us":f,"total_s":f,
//!  "hist":[[upper_us,count],...]}
//! `hist` is a log2 histogram of per-page latency: bucket upper bounds 1,2,4,...,2^20 us
//! (a latency goes to the first bucket whose bound is >= it; anything above 2^20 us is
//! counted in the last bucket); only non-empty buckets are listed.

use clap::{CommandFactory, Parser};
use std::sync::atomic::{Ordering, compiler_fence};

const PAGE: usize = 4096;
const BUCKETS: usize = 21; // upper bounds 2^0 .. 2^20 us

/// Allocate and first-touch anonymous memory, timing each page.
#[derive(Parser)]
#[command(name = "alloc_burst")]
struct Args {
    /// Size of the burst in MiB
    #[arg(value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..))]
    mib: u64,
    /// Sleep this many milliseconds before the burst
    #[arg(long = "delay-ms", value_name = "D", default_value_t = 0)]
    delay_ms: u64,
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a live local `timespec`, the only memory clock_gettime writes;
    // CLOCK_MONOTONIC is always available, so the call cannot leave it unset.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Nearest-rank percentile of sorted nanosecond latencies, in microseconds.
fn pct_us(sorted: &[u64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1] as f64 / 1000.0
}

fn main() {
    let args = Args::parse();
    let Some(len) = (args.mib as usize).checked_mul(1 << 20) else {
        Args::command()
            .error(clap::error::ErrorKind::ValueValidation, "MIB is too large")
            .exit()
    };
    let pages = len / PAGE;
    // Latency vector allocated and written now, so none of its own faults land in the burst.
    let mut lat = vec![u64::MAX; pages];
    std::hint::black_box(&mut lat);
    std::thread::sleep(std::time::Duration::from_millis(args.delay_ms));

    let start = now_ns();
    // SAFETY: a new private anonymous mapping (null hint, no fd) overlaps no existing Rust
    // object; the result is checked against MAP_FAILED before it is used.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        eprintln!(
            "alloc_burst: mmap {len} bytes: {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(1);
    }
    let base = p as *mut u8;
    for (i, slot) in lat.iter_mut().enumerate() {
        let t0 = now_ns();
        compiler_fence(Ordering::SeqCst);
        // SAFETY: `base` is the read-write mapping of `len` bytes checked above, and
        // i < pages = len / PAGE, so the byte at i * PAGE lies inside it; the mapping is
        // unmapped only after this loop and no Rust reference points into it.
        unsafe { base.add(i * PAGE).write_volatile(1) };
        compiler_fence(Ordering::SeqCst);
        *slot = now_ns() - t0;
    }
    let total_s = (now_ns() - start) as f64 / 1e9;

    let mut hist = [0u64; BUCKETS];
    for &ns in &lat {
        let us = ns.div_ceil(1000).max(1); // (2^(k-1), 2^k] us -> bucket k
        let k = (64 - (us - 1).leading_zeros()) as usize;
        hist[k.min(BUCKETS - 1)] += 1;
    }
    lat.sort_unstable();
    let buckets: Vec<String> = (0..BUCKETS)
        .filter(|&k| hist[k] > 0)
        .map(|k| format!("[{},{}]", 1u64 << k, hist[k]))
        .collect();
    println!(
        "{{\"mib\":{},\"pages\":{},\"worst_us\":{:.3},\"p99_us\":{:.3},\"p999_us\":{:.3},\
         \"median_us\":{:.3},\"total_s\":{:.6},\"hist\":[{}]}}",
        args.mib,
        pages,
        lat[pages - 1] as f64 / 1000.0,
        pct_us(&lat, 0.99),
        pct_us(&lat, 0.999),
        pct_us(&lat, 0.5),
        total_s,
        buckets.join(",")
    );
    // SAFETY: `p`/`len` are exactly the mapping made above; nothing reads or writes
    // through `base` after this point.
    unsafe { libc::munmap(p, len) };
}
