//! Torture test for the preload: threads, fork, signals and fd churn on shared files.
//! Every reader checks the bytes it got; the program prints one line of results that must
//! be the same with and without the shim, and exits non-zero on any wrong byte.
//!
//! Usage: torture [DIR]   (default: a temporary directory)

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

const SIZE: usize = 24 << 20;

/// Byte i of the test file: a cheap function of i, so every reader can check what it got.
fn byte_at(i: usize) -> u8 {
    (i.wrapping_mul(2654435761) >> 13) as u8
}

fn check(buf: &[u8], off: usize) -> bool {
    buf.iter().enumerate().all(|(k, &b)| b == byte_at(off + k))
}

static SIG_FD: AtomicI32 = AtomicI32::new(-1);
static SIG_READS: AtomicU64 = AtomicU64::new(0);
static SIG_BAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_alarm(_: libc::c_int) {
    // A read inside a signal handler, possibly while the thread is inside a hooked call.
    let fd = SIG_FD.load(Ordering::Relaxed);
    let mut b = [0u8; 512];
    let off = (SIG_READS.load(Ordering::Relaxed) as usize * 7919 * 512) % (SIZE - 512);
    // SAFETY: `b` is a live local of `b.len()` bytes, which is all pread writes; pread is
    // async-signal-safe, and a stale or closed `fd` only makes it fail.
    let n = unsafe { libc::pread(fd, b.as_mut_ptr().cast(), b.len(), off as libc::off_t) };
    if n != 512 || !check(&b, off) {
        SIG_BAD.store(true, Ordering::Relaxed);
    }
    SIG_READS.fetch_add(1, Ordering::Relaxed);
}

fn sequential_checksum(path: &std::path::Path, chunk: usize) -> Result<u64, String> {
    let mut f = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; chunk];
    let (mut off, mut sum) = (0usize, 0u64);
    loop {
        let n = f.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        if !check(&buf[..n], off) {
            return Err(format!("wrong bytes at {off}"));
        }
        sum = sum.wrapping_add(buf[..n].iter().map(|&b| b as u64).sum::<u64>());
        off += n;
    }
    if off != SIZE {
        return Err(format!("short file: {off}"));
    }
    Ok(sum)
}

fn worker(path: std::path::PathBuf, id: usize, out: std::path::PathBuf) -> Result<(), String> {
    for round in 0..6 {
        sequential_checksum(&path, 4096 << (id % 6))?;
        // Random preads and a dup2 dance on a shared file.
        let f = std::fs::File::open(&path).map_err(|e| e.to_string())?;
        let fd = f.as_raw_fd();
        // SAFETY: dup takes an fd number and no pointers; `fd` belongs to `f`, open here.
        let dup = unsafe { libc::dup(fd) };
        let target = 200 + id as i32;
        // SAFETY: fd 200 + id is reserved for this worker: nothing else in the program opens
        // an fd that high, so dup2 cannot replace an fd some other owner still uses.
        unsafe { libc::dup2(dup, target) };
        let mut b = [0u8; 4096];
        for k in 0..200usize {
            let off = (k * 104729 + round * 4096 + id) % (SIZE - 4096);
            // SAFETY: `b` is a live local of 4096 bytes, which is all pread writes.
            let n = unsafe { libc::pread(target, b.as_mut_ptr().cast(), 4096, off as i64) };
            if n != 4096 || !check(&b, off) {
                return Err(format!("pread at {off}"));
            }
        }
        // SAFETY: `target` and `dup` are the fds this iteration made above and owns; neither
        // is used again (`f` keeps its own fd).
        unsafe {
            libc::close(target);
            libc::close(dup);
        }
        // The same file through a mapping, while other threads read and close it.
        // SAFETY: a new read-only shared mapping (null hint) of SIZE bytes of `f`, open for
        // the call, overlaps no Rust object; MAP_FAILED is checked below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                SIZE,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err("mmap failed".into());
        }
        // SAFETY: `map` is a non-null, readable mapping of SIZE bytes of a file that is SIZE
        // bytes long and never written after `main` created it, so the bytes stay
        // initialized and unchanged while `mapped` lives; `mapped` is last used before the
        // munmap below.
        let mapped = unsafe { std::slice::from_raw_parts(map as *const u8, SIZE) };
        let at = (round * 7_340_033 + id * 4096) % (SIZE - 65536);
        let ok = check(&mapped[at..at + 65536], at);
        // SAFETY: `map`/SIZE are exactly the mapping made above; `mapped` is not used after.
        unsafe { libc::munmap(map, SIZE) };
        if !ok {
            return Err(format!("mapped bytes at {at}"));
        }
        // A writer streaming its own file, then reading it back.
        let mine = out.join(format!("w{id}"));
        let mut w = std::fs::File::create(&mine).map_err(|e| e.to_string())?;
        let block: Vec<u8> = (0..65536).map(byte_at).collect();
        for _ in 0..(4 << 20) / block.len() {
            w.write_all(&block).map_err(|e| e.to_string())?;
        }
        w.seek(SeekFrom::Start(0)).map_err(|e| e.to_string())?;
        drop(w);
        let back = std::fs::read(&mine).map_err(|e| e.to_string())?;
        if back.len() != 4 << 20 || back.chunks(65536).any(|c| c != &block[..]) {
            return Err("writer read back wrong bytes".into());
        }
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        println!(
            "usage: torture [DIR]\nThreads, fork, signal-handler reads and fd churn on files in DIR;\nprints one result line and exits non-zero on any wrong byte."
        );
        return;
    }
    let dir = match args.get(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join(format!("torture.{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let path = dir.join("shared");
    let data: Vec<u8> = (0..SIZE).map(byte_at).collect();
    std::fs::write(&path, &data).expect("write shared file");

    // Signal handler reading through its own fd, every millisecond.
    let sig_file = std::fs::File::open(&path).unwrap();
    SIG_FD.store(sig_file.as_raw_fd(), Ordering::Relaxed);
    // SAFETY: `on_alarm` is an `extern "C" fn(c_int)`, the handler type signal expects, and
    // it does only async-signal-safe work (atomics and pread into a local); `t` is a live
    // local itimerval that setitimer only reads, and a null old-value pointer is allowed.
    unsafe {
        libc::signal(libc::SIGALRM, on_alarm as *const () as libc::sighandler_t);
        let t = libc::itimerval {
            it_interval: libc::timeval {
                tv_sec: 0,
                tv_usec: 1000,
            },
            it_value: libc::timeval {
                tv_sec: 0,
                tv_usec: 1000,
            },
        };
        libc::setitimer(libc::ITIMER_REAL, &t, std::ptr::null_mut());
    }

    let mut results = Vec::new();
    let threads: Vec<_> = (0..4)
        .map(|id| {
            let (p, o) = (path.clone(), dir.clone());
            std::thread::spawn(move || worker(p, id, o))
        })
        .collect();

    // Meanwhile: fork children that keep using inherited fds, one that closes everything
    // with close_range, and a vfork+exec.
    let inherited = std::fs::File::open(&path).unwrap();
    for kind in 0..3 {
        // SAFETY: the worker threads keep running in the parent; the child gets a copy of
        // only this thread, uses only memory it inherited plus glibc malloc (which glibc's
        // fork keeps usable in the child) and fds it owns, and leaves by `_exit`, never
        // returning into code that joins threads or runs the parent's destructors.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            let ok = match kind {
                0 => {
                    let mut f = &inherited;
                    let mut buf = vec![0u8; 1 << 20];
                    let mut off = 0;
                    let mut good = true;
                    while let Ok(n) = f.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        good &= check(&buf[..n], off);
                        off += n;
                    }
                    good && off == SIZE
                }
                1 => {
                    // SAFETY: in the child, which after this uses no fd >= 3 it inherited
                    // (sequential_checksum opens its own) and drops no owner of one (it
                    // leaves by `_exit`); close_range takes no pointers.
                    unsafe { libc::close_range(3, u32::MAX, 0) };
                    sequential_checksum(&path, 65536).is_ok()
                }
                _ => {
                    let status = std::process::Command::new("sha256sum")
                        .arg(&path)
                        .stdout(std::process::Stdio::null())
                        .status();
                    status.map(|s| s.success()).unwrap_or(false)
                }
            };
            // SAFETY: this is the forked child; `_exit` ends it at once without running the
            // destructors or atexit handlers of the state copied from the parent.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: `status` is a live local c_int, the only memory waitpid writes.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        results.push(format!(
            "child{kind}={}",
            if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
                "ok"
            } else {
                "BAD"
            }
        ));
    }
    #[allow(deprecated)] // vfork is the point: the child shares our memory, fd table included
    // SAFETY: the vfork child borrows our memory and stack while this thread is suspended,
    // so it does nothing but the execl or `_exit` in the block below, touching no Rust data.
    let vf = unsafe { libc::vfork() };
    if vf == 0 {
        // SAFETY: in the vfork child: execl gets static NUL-terminated C strings and a null
        // pointer ending its argument list; if it fails, `_exit` ends the child without
        // running destructors or flushing stdio, so the parent's memory is left as it was.
        unsafe {
            libc::execl(
                c"/bin/true".as_ptr(),
                c"true".as_ptr(),
                std::ptr::null::<libc::c_char>(),
            );
            libc::_exit(127);
        }
    }
    let mut status = 0;
    // SAFETY: `status` is a live local c_int, the only memory waitpid writes.
    unsafe { libc::waitpid(vf, &mut status, 0) };
    results.push(format!(
        "vfork={}",
        if libc::WEXITSTATUS(status) == 0 {
            "ok"
        } else {
            "BAD"
        }
    ));

    for (id, t) in threads.into_iter().enumerate() {
        let r = t.join().unwrap_or_else(|_| Err("panicked".into()));
        results.push(format!(
            "thread{id}={}",
            r.map(|_| "ok".to_string())
                .unwrap_or_else(|e| format!("BAD({e})"))
        ));
    }
    // SAFETY: `zero` is a live local itimerval that setitimer only reads, and a null
    // old-value pointer is allowed.
    unsafe {
        let zero = libc::itimerval {
            it_interval: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
            it_value: libc::timeval {
                tv_sec: 0,
                tv_usec: 0,
            },
        };
        libc::setitimer(libc::ITIMER_REAL, &zero, std::ptr::null_mut());
    }
    results.push(format!(
        "signal-reads={}",
        if SIG_BAD.load(Ordering::Relaxed) {
            "BAD"
        } else {
            "ok"
        }
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let line = results.join(" ");
    println!("{line}");
    if line.contains("BAD") {
        std::process::exit(1);
    }
}
