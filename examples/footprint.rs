//! Memory-cgroup footprint sampler: runs COMMAND inside a cgroup-v1 memory cgroup and
//! samples the cgroup's memory.usage_in_bytes every interval until the command exits,
//! then reads memory.max_usage_in_bytes as the peak. (footprint does not reset the peak:
//! write 0 to DIR/memory.max_usage_in_bytes first for a per-run peak.)
//!
//! The command inherits stdin/stdout/stderr; the JSON line is printed only after it exits,
//! to stdout or, with --json FILE, to FILE:
//! {"exit":code,"seconds":f,"peak_bytes":N,"samples":K}
//! `exit` is the command's status (128+signal if killed). footprint itself exits 0 when
//! it ran the command, 2 on usage errors, 127 if exec failed, 1 if joining the cgroup failed.
//! --out FILE gets one line "t_ms usage_bytes" per sample.

use clap::{CommandFactory, Parser};
use std::ffi::{CString, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Run a command in a memory cgroup and sample the cgroup's usage while it runs.
#[derive(Parser)]
#[command(name = "footprint")]
struct Args {
    /// cgroup v1 memory directory, e.g. /sys/fs/cgroup/memory/x
    #[arg(long, value_name = "DIR")]
    cgroup: PathBuf,
    /// Sampling interval in milliseconds
    #[arg(long = "interval-ms", default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..))]
    interval_ms: u64,
    /// Write the samples ("t_ms usage_bytes" lines) to FILE
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Write the JSON line to FILE instead of stdout
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Command to run, after `--`
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

fn read_u64(p: &Path) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn usage_error(msg: String) -> ! {
    Args::command()
        .error(clap::error::ErrorKind::ValueValidation, msg)
        .exit()
}

fn cstr(b: &[u8]) -> CString {
    CString::new(b).unwrap_or_else(|_| usage_error("argument contains a NUL byte".into()))
}

/// Child side, between fork and exec: no allocation. On failure, send (stage, errno)
/// through the close-on-exec pipe and _exit(127).
///
/// # Safety
///
/// Call only in the child of `fork()`, right after it returns 0: the function makes only
/// async-signal-safe calls, never returns, and leaves by exec or `_exit`. `argv` must be a
/// null-terminated array (at least the terminator) of pointers to NUL-terminated strings
/// that stay alive until exec, and `wfd` must be the write end of a close-on-exec pipe.
unsafe fn child(procs: &CString, argv: &[*const libc::c_char], wfd: libc::c_int) -> ! {
    // SAFETY: `msg` is a live local of 2 * 4 = 8 bytes, all that write reads; `wfd` is an
    // fd number (a bad one only makes write fail) and `_exit` is always sound. Both calls
    // are async-signal-safe, as required between fork and exec.
    let fail = |stage: i32| unsafe {
        let msg = [
            stage,
            std::io::Error::last_os_error().raw_os_error().unwrap_or(0),
        ];
        libc::write(wfd, msg.as_ptr().cast(), 8);
        libc::_exit(127)
    };
    let mut buf = std::io::Cursor::new([0u8; 24]); // formatting into it does not allocate
    // SAFETY: getpid takes no arguments, touches no memory and is async-signal-safe.
    let _ = write!(buf, "{}", unsafe { libc::getpid() });
    let len = buf.position() as usize;
    // SAFETY: `procs` is a borrowed CString, so its pointer is NUL-terminated and alive for
    // the call; open is async-signal-safe.
    let fd = unsafe { libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    // SAFETY: reached only when fd >= 0 (short-circuit `||`); `buf` is a live local array
    // of 24 bytes and `len` = its write position <= 24, so write reads only inside it.
    if fd < 0 || unsafe { libc::write(fd, buf.get_ref().as_ptr().cast(), len) } != len as isize {
        fail(1);
    }
    // SAFETY: `fd` was opened above by this function and is not used again.
    unsafe { libc::close(fd) };
    // SAFETY: per this function's contract `argv` is a null-terminated array of pointers to
    // NUL-terminated strings that outlive the call, and `argv[0]` is its first element
    // (the program name, or the terminator, which makes execvp fail); execvp is one of the
    // exec calls allowed between fork and exec.
    unsafe { libc::execvp(argv[0], argv.as_ptr()) };
    fail(2)
}

fn main() {
    let args = Args::parse();
    let usage = args.cgroup.join("memory.usage_in_bytes");
    if read_u64(&usage).is_none() {
        usage_error(format!("cannot read {}", usage.display()));
    }
    let procs = cstr(args.cgroup.join("cgroup.procs").as_os_str().as_bytes());
    let cargs: Vec<CString> = args.command.iter().map(|a| cstr(a.as_bytes())).collect();
    let mut argv: Vec<*const libc::c_char> = cargs.iter().map(|c| c.as_ptr()).collect();
    argv.push(std::ptr::null());
    let mut out = args.out.as_ref().map(|p| {
        std::fs::File::create(p).unwrap_or_else(|e| usage_error(format!("{}: {e}", p.display())))
    });
    let mut fds = [0; 2];
    // SAFETY: `fds` is a live local `[c_int; 2]`, exactly the two ints pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        eprintln!("footprint: pipe2: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }

    let t0 = Instant::now();
    // SAFETY: the process is still single-threaded here (no thread has been spawned), and
    // the child only runs `child`, which makes async-signal-safe calls until exec/_exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        eprintln!("footprint: fork: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    if pid == 0 {
        // SAFETY: we are in the child right after fork returned 0; `argv` ends with a null
        // pointer and points into `cargs`, which live on (the call never returns); fds[1]
        // is the close-on-exec write end of the pipe made above.
        unsafe { child(&procs, &argv, fds[1]) };
    }
    // SAFETY: fds[1] is the parent's copy of the pipe's write end, owned here and not used
    // again, so the read below sees EOF once the child has exec'd.
    unsafe { libc::close(fds[1]) };
    // EOF on the pipe means exec succeeded; 8 bytes mean the child failed before it.
    let mut msg = [0i32; 2];
    let n = loop {
        // SAFETY: `msg` is a live local `[i32; 2]` of 8 bytes, the most read writes.
        let n = unsafe { libc::read(fds[0], msg.as_mut_ptr().cast(), 8) };
        if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            break n;
        }
    };
    if n == 8 {
        // SAFETY: `pid` is our own child; a null status pointer is allowed and nothing is
        // written through it.
        unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        let err = std::io::Error::from_raw_os_error(msg[1]);
        if msg[0] == 1 {
            eprintln!("footprint: cannot join {}: {err}", args.cgroup.display());
            std::process::exit(1);
        }
        eprintln!(
            "footprint: cannot execute {}: {err}",
            args.command[0].to_string_lossy()
        );
        std::process::exit(127);
    }

    // A pidfd turns the sleep into a wait that ends early when the child exits.
    // SAFETY: pidfd_open takes two integers (pid, flags) and no pointers; a failure just
    // returns -1, which the loop below checks.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as libc::c_int;
    let mut samples: Vec<(u128, u64)> = Vec::new();
    let mut status = 0;
    loop {
        if let Some(u) = read_u64(&usage) {
            samples.push((t0.elapsed().as_millis(), u));
        }
        // SAFETY: `status` is a live local c_int, the only memory waitpid writes.
        if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
            break;
        }
        if pidfd >= 0 {
            let mut pfd = libc::pollfd {
                fd: pidfd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: `pfd` is one live local pollfd and nfds is 1, so poll touches only it.
            unsafe { libc::poll(&mut pfd, 1, args.interval_ms.min(i32::MAX as u64) as i32) };
        } else {
            std::thread::sleep(std::time::Duration::from_millis(args.interval_ms));
        }
    }
    let seconds = t0.elapsed().as_secs_f64();
    let exit = if libc::WIFSIGNALED(status) {
        128 + libc::WTERMSIG(status)
    } else {
        libc::WEXITSTATUS(status)
    };
    let peak = read_u64(&args.cgroup.join("memory.max_usage_in_bytes")).unwrap_or_else(|| {
        eprintln!("footprint: cannot read memory.max_usage_in_bytes; using the largest sample");
        samples.iter().map(|s| s.1).max().unwrap_or(0)
    });

    if let Some(f) = out.as_mut() {
        let text: String = samples.iter().map(|(t, u)| format!("{t} {u}\n")).collect();
        if let Err(e) = f.write_all(text.as_bytes()) {
            eprintln!("footprint: writing samples: {e}");
        }
    }
    let line = format!(
        "{{\"exit\":{exit},\"seconds\":{seconds:.6},\"peak_bytes\":{peak},\"samples\":{}}}",
        samples.len()
    );
    match &args.json {
        Some(p) => {
            if let Err(e) = std::fs::write(p, line + "\n") {
                eprintln!("footprint: {}: {e}", p.display());
                std::process::exit(1);
            }
        }
        None => println!("{line}"),
    }
}
