#!/usr/bin/env python3
"""Where a run's page cache goes, over time: runs CMD alone in a fresh memory cgroup (v1),
caches dropped first, and samples the cgroup's memory.stat (cache less shmem, dirty,
writeback, mapped_file) every few milliseconds; with --file, also the pages of each named
file that are cached (cachestat, Linux 6.5 on; a file is looked at once it exists).

    scripts/cache-timeline.py [--every MS] [--out FILE] [--warm] -- CMD...     (root)

Prints one line: the peak, what it was made of (dirty, under writeback, the rest), the
cache left once CMD exited, and CMD's time, then each --file's median and most cached
during the run (a copy's source against its destination); with --out, every sample as "seconds cache dirty
writeback mapped" (MiB). A bounded writer shows dirty + writeback near the peak when the
disk, not the policy, is what holds pages (bench/results/watcher.md).
"""
import argparse
import ctypes
import os
import subprocess
import sys
import threading
import time

MIB = 1 << 20
SYS_CACHESTAT = 451  # the same number on every architecture


class Cachestat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


class CachestatRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


LIBC = ctypes.CDLL(None, use_errno=True)


def cached_bytes(fd):
    """Bytes of the whole file in the page cache, or None where cachestat can't tell."""
    cs, whole = Cachestat(), CachestatRange(0, 0)
    if LIBC.syscall(SYS_CACHESTAT, fd, ctypes.byref(whole), ctypes.byref(cs), 0) != 0:
        return None
    return cs.cache * os.sysconf("SC_PAGE_SIZE")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--every", type=float, default=10, help="sampling interval, ms (default 10)")
    ap.add_argument("--out", help="write every sample here")
    ap.add_argument("--warm", action="store_true", help="do not drop caches first")
    ap.add_argument("--file", action="append", default=[], help="also sample this file's cached pages")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command")
    root = "/sys/fs/cgroup/memory"
    if os.geteuid() != 0 or not os.path.isdir(root):
        sys.exit("cache-timeline: needs root and the cgroup v1 memory controller at " + root)
    cg = f"{root}/cache-timeline-{os.getpid()}"
    os.mkdir(cg)
    if not a.warm:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3")

    samples, done = [], threading.Event()
    fds = {f: None for f in a.file}
    per_file = {f: [] for f in a.file}

    def sample_files():
        for f, fd in fds.items():
            if fd is None:
                try:
                    fd = fds[f] = os.open(f, os.O_RDONLY)
                except OSError:
                    continue
            n = cached_bytes(fd)
            if n is not None:
                per_file[f].append(n)

    def sample(t0):
        sample_files()
        try:
            st = dict(l.split() for l in open(cg + "/memory.stat"))
            samples.append((time.monotonic() - t0, int(st["cache"]) - int(st.get("shmem", 0)),
                            int(st["dirty"]), int(st["writeback"]), int(st.get("mapped_file", 0))))
        except (OSError, ValueError, KeyError):
            pass

    t0 = time.monotonic()

    def loop():
        while not done.is_set():
            sample(t0)
            done.wait(a.every / 1000)

    sampler = threading.Thread(target=loop, daemon=True)
    sampler.start()

    def enter():
        with open(cg + "/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))

    try:
        rc = subprocess.call(cmd, preexec_fn=enter)
    except (OSError, KeyboardInterrupt) as e:
        rc = 127 if isinstance(e, OSError) else 130
        print(f"cache-timeline: {e or 'interrupted'}", file=sys.stderr)
    secs = time.monotonic() - t0
    done.set()
    sampler.join()
    sample(t0)
    left = samples[-1][1] if samples else 0
    t, c, d, w, m = max(samples, key=lambda s: s[1]) if samples else (0, 0, 0, 0, 0)
    print(f"peak {c / MIB:.0f} MiB at {t:.2f} s: dirty {d / MIB:.0f}, writeback {w / MIB:.0f}, "
          f"other {(c - d - w) / MIB:.0f} (mapped {m / MIB:.0f}); left after exit {left / MIB:.0f}; "
          f"{secs:.2f} s, exit {rc}")
    for f, v in per_file.items():
        if v:
            print(f"{f}: cached {sorted(v)[len(v) // 2] / MIB:.0f} MiB at the median, {max(v) / MIB:.0f} at most")
        else:
            print(f"{f}: not seen (never existed, or cachestat is missing)")
    for fd in fds.values():
        if fd is not None:
            os.close(fd)
    if a.out:
        with open(a.out, "w") as f:
            for s in samples:
                f.write(f"{s[0]:.3f} " + " ".join(f"{v / MIB:.0f}" for v in s[1:]) + "\n")
    for _ in range(20):
        try:
            os.rmdir(cg)
            break
        except OSError:
            time.sleep(0.1)
    else:
        print(f"cache-timeline: could not remove {cg} (a process of the run still in it?)", file=sys.stderr)
    # A death by signal N is reported as the shell does, 128 + N.
    sys.exit(rc if rc >= 0 else 128 - rc)


if __name__ == "__main__":
    main()
