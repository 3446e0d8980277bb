"""Overhead where the shim must cost nothing: process start-up (a shell spawning /bin/true
500 times, against an empty preload library built here, libeatmydata, the least a Rust
preload with panic containment costs (bench/rust-floor) and nocache), and the
hooks' hot paths: cached 4 KiB sequential preads and reads, random cached preads, stride-100
preads over a 1 TB sparse file, pipe write+read, a process opening 20,000 cached small
files, and random preads on a cold file."""
import os
import resource
import subprocess
import sys
from pathlib import Path
from subprocess import PIPE
from bench import EXAMPLES, REL, ROOT, Contender, DamonPaused, Failed, cache_files, drop_caches, make_file, parse_json, run_checked

TITLE = "Hot-path overhead"
ORDER = 60

EATMYDATA = [p for p in ("/usr/lib/x86_64-linux-gnu/libeatmydata.so.1", "/usr/lib/aarch64-linux-gnu/libeatmydata.so.1")
             if Path(p).exists()]
NOCACHE = Path("/usr/lib/nocache/nocache.so")


def empty_library(work):
    """The floor any preload pays: a library with one function and no constructor."""
    so = work / "empty-preload.so"
    if not so.exists():
        src = work / "empty-preload.c"
        src.write_text("int empty_preload_symbol(void) { return 0; }\n")
        subprocess.run([os.environ.get("CC", "cc"), "-O2", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    return so


def rust_floor():
    """The least a Rust preload with panic containment costs (std, catch_unwind, a silent
    panic hook), linked as libdropbehind.so is: bench/rust-floor, built here."""
    name = "Rust preload floor"
    try:
        subprocess.run(["cargo", "build", "--release", "--locked", "--quiet", "-p", "dropbehind-rust-floor"],
                       cwd=ROOT, check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError) as e:
        return Contender(name, missing=f"bench/rust-floor did not build: {e}")
    lib = REL / "librustfloor.so"
    # It is a floor only if it does contain a panic: its function panics on -1, and must
    # return -1 with nothing printed, in a process of its own.
    probe = subprocess.run([sys.executable, "-c", "import ctypes, sys; "
                            "print(ctypes.CDLL(sys.argv[1]).dropbehind_rust_floor(-1))", str(lib)],
                           capture_output=True, text=True)
    if probe.returncode != 0 or probe.stdout.strip() != "-1" or probe.stderr:
        return Contender(name, missing=f"bench/rust-floor does not contain a panic (exit {probe.returncode}, "
                                       f"printed {probe.stdout.strip()!r}, stderr {probe.stderr.strip()[:200]!r})")
    return Contender(name, preload=lib)


def small_files(root, n):
    """`n` small files (1-4 KiB) in one directory, made once."""
    done = root.with_name(root.name + ".complete")
    if not done.exists():
        root.mkdir(parents=True, exist_ok=True)
        for i in range(n):
            (root / f"m{i:06}.py").write_bytes(os.urandom(1024 + (i * 37) % 3072))
        done.write_text("")
    return root


def evict(path):
    """Drops a file's cached pages (written back first: DONTNEED leaves dirty ones)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run(b):
    f = make_file(b.work / "overhead-64.bin", 64)
    cold_mib = b.size(4096, 1024)
    cold = make_file(b.work / f"random-{cold_mib}.bin", cold_mib)
    sparse = b.work / "sparse-1T"
    if not sparse.exists():
        subprocess.run(["dd", "if=/dev/zero", f"of={sparse}", "bs=1M", "count=1", "seek=1024000", "status=none"], check=True)
    nfiles = b.size(20000, 5000)
    tree = small_files(b.work / f"small-files-{nfiles}", nfiles)
    loop = str(EXAMPLES / "pread_loop")
    ops = b.size(2_000_000, 500_000)
    touches = b.size(300_000, 100_000)
    execs = b.size(500, 200)

    # Start-up: a shell running /bin/true `execs` times, the library given to each child
    # (LD_PRELOAD=lib /bin/true in the loop), or to the shell as well.
    empty = empty_library(b.work)
    spawn_conts = [Contender("no shim"), Contender("empty preload library", preload=empty)]
    spawn_conts.append(Contender("libeatmydata", preload=EATMYDATA[0]) if EATMYDATA else
                       Contender("libeatmydata", missing="libeatmydata not installed (apt-get install libeatmydata1)"))
    spawn_conts.append(rust_floor())
    spawn_conts += b.contenders("dropbehind")
    nocache = (Contender("nocache", preload=NOCACHE) if NOCACHE.exists() else
               Contender("nocache", missing="nocache not installed (apt-get install nocache)"))
    spawns = {
        f"sh spawning /bin/true x{execs}, the library in the children": "children",
        f"sh spawning /bin/true x{execs}, the library in the shell too": "shell",
        # A process with work: its open loads the front's engine (dlopen), where a library
        # mapped whole at exec has it already.
        f"sh spawning cat of a cached 1 KiB file x{execs}, the library in the children": "work",
    }
    small = b.work / "s60-small.txt"
    small.write_bytes(b"x" * 1024)

    def spawn(case, c):
        lib = str(c.preload) if c.preload else ""
        cmd = f"cat {small}" if spawns[case] == "work" else "/bin/true"
        loop_sh = f'i=0; while [ $i -lt {execs} ]; do LD_PRELOAD=$L {cmd} || exit 1; i=$((i+1)); done'
        env = dict(L=lib)
        if spawns[case] == "shell" and lib:
            env["LD_PRELOAD"] = lib
        # A failed start stops the loop; ld.so's "cannot be preloaded" fails it on stderr.
        # Page faults are counted, not timed: each one a page of the library touched at
        # start costs (about 2-4 us an exec here), and unlike the times they do not vary.
        faults0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
        secs, _ = run_checked(["/bin/sh", "-c", loop_sh], env=env)
        faults = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - faults0
        return dict(seconds=secs, per_exec=secs / execs * 1e6, faults=faults / execs)

    # Every library's file cached the same way first, evicted and read whole: how a file
    # came into the page cache moves what mapping it costs an exec (the linker's output, or
    # a file faulted in page by page, 13-20 us more than the same bytes read whole, as an
    # installed copy is; bench/results/overhead-i16.md).
    # A round's loops take 0.35 s each, and the machine's speed drifts by more than 2% from
    # one round to the next (rounds of one contender range over 15%): 31 rounds, so that
    # the median resolves the 1.02x bound. DAMON paused first: its pageout would take the
    # libraries' pages between two spawns.
    with DamonPaused():
        libs = [c.preload for c in spawn_conts + [nocache] if c.preload]
        # The front's engine too, which a process maps once it does work.
        libs += [e for e in (Path(l).with_name("libdropbehind_engine.so") for l in libs
                             if Path(l).name == "libdropbehind.so") if e.exists()]
        for lib in libs:
            evict(lib)
        cache_files(libs)
        b.interleave(list(spawns), spawn_conts, b.size(31, 3), spawn)
    # nocache's constructor costs about 20 ms an exec: a reference, run 3 times.
    b.interleave(list(spawns), [nocache], b.size(3, 1), spawn)
    b.table(f"Start-up: a shell spawning /bin/true (or cat) {execs} times, against an empty preload library, interleaved",
            list(spawns), spawn_conts + [nocache], [("seconds", "seconds", "{:.4f}"), ("per_exec", "us per exec", "{:.0f}"),
             ("faults", "page faults per exec", "{:.1f}")],
            baseline="empty preload library", ratio_of="seconds",
            note="The empty library (one function, no constructor, built by the suite) is the floor any preload "
                 "pays; the Rust preload floor (bench/rust-floor, built by the suite: std, one function whose body "
                 "`catch_unwind` contains, a constructor silencing the panic hook, linked as the library is) the "
                 "least one written in Rust with panic containment pays; `no shim` runs the loop without "
                 "LD_PRELOAD. Children only: `LD_PRELOAD=lib /bin/true` in the loop; shell too: the shell preloaded as well; cat: "
                 "`LD_PRELOAD=lib cat FILE`, a process whose open loads dropbehind's engine. nocache (3 runs) was run after the others. "
                 "Page faults per exec: the loop's minor faults (getrusage), the shell's included, over the execs. "
                 "Each library's file was evicted and read whole before the rounds (cached the same way), and "
                 "DAMON's pageout paused while they ran.")

    cases = {
        f"sequential cached 4 KiB preads x{ops}": [loop, "sequential", str(f), "--ops", str(ops)],
        f"sequential cached 4 KiB reads x{ops}": [loop, "reads", str(f), "--ops", str(ops)],
        f"random cached 4 KiB preads x{ops}": [loop, "cached", str(f), "--ops", str(ops)],
        f"stride-100 preads, 1 TB sparse, {touches} pages": [str(EXAMPLES / "stride_read"), "--stride-pages", "100",
                                                             "--count", str(touches), "--mode", "pread", str(sparse)],
        f"pipe write+read 4 KiB x{ops // 2}": [loop, "pipe", "--ops", str(ops // 2)],
        f"open, read, close {nfiles} cached small files": [loop, "open", str(tree)],
        f"random 4 KiB preads, cold {cold_mib} MiB file x20000": [loop, "random", str(cold), "--ops", "20000"],
    }
    conts = b.contenders("no shim", "dropbehind")

    def one(case, c):
        if "cold" in case:
            drop_caches()
        elif "small files" in case:
            # Cached before the run, whatever evicted them since: a cold small file read
            # whole is the shim's to drop (a tree stream), which is not this row's question.
            cache_files(sorted(tree.iterdir()))
        cmd = cases[case]
        _, out = run_checked(cmd, env=c.preload_env(), stdout=PIPE)
        j = parse_json(out, os.path.basename(cmd[0]))
        if "stride" in case:
            done, want = j["pages"], touches
        elif "small files" in case:
            done, want = j["ops"], nfiles
        else:
            done, want = j["ops"], int(cmd[cmd.index("--ops") + 1])
        if done != want:
            raise Failed(f"{os.path.basename(cmd[0])} did {done} operations of {want}")
        # The load's own time (the program measures it), without process start-up.
        return dict(per_op=j["seconds"] / done * 1e6)

    # Cold random reads are noisy (a few 100 ms outliers in 2 s runs) and the criterion is
    # 1%: many more repetitions for them; the short loads get more too.
    cold_cases = [c for c in cases if "cold" in c]
    short = [c for c in cases if "stride" in c or "small files" in c]
    # DAMON's background pageout (where the machine runs it) takes pages of warm files no
    # one touched for a moment: a cached row would then read from the disk, and a small
    # file found cold makes the shim check every file after it. Paused for the cached rows.
    with DamonPaused() as damon:
        b.interleave([c for c in cases if c not in cold_cases + short], conts, b.size(11, 3), one)
        # The stride load's holes are cached by a first run, then read from the cache by both.
        run_checked(next(cases[c] for c in short if "stride" in c), stdout=PIPE)
        b.interleave(short, conts, b.size(21, 5), one)
    evict(sparse)
    b.interleave(cold_cases, conts, b.size(21, 5), one)
    b.table("Hook overhead: time per operation, shim against no shim, interleaved", list(cases), conts,
            [("per_op", "us per op", "{:.3f}")], ratio_of="per_op",
            note="Each load as timed by the program itself (start-up excluded). Sequential: 4 KiB steps "
                 "through a cached 64 MiB file, cycling (reads: back to the start with lseek); random cached: "
                 "4 KiB preads at random pages of the same file; stride-100: every 100th page of a sparse file "
                 "(seed 003's load, by pread; its holes cached by a run before the others); open: open, read up "
                 "to 4 KiB and close each file of a directory once, the files read without the shim before "
                 "each run." + (" DAMON's background pageout was paused for the cached rows." if damon.paused else ""))
