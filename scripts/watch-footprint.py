#!/usr/bin/env python3
"""Where a copy's page cache is, relative to its reader: runs CMD (caches dropped first) and
samples, every few milliseconds, how much of SOURCE is cached behind the reader's file
position and ahead of it (readahead), and how much of the files under DEST is cached, dirty
and under writeback.

    scripts/watch-footprint.py [--every MS] [--out FILE] --source FILE [--dest DIR] -- CMD...   (root)

The reader's position is the largest `pos` in /proc/PID/fdinfo among the fds open on SOURCE
(the outside watcher's own fd, opened by path, stays at 0). Prints the median and the peak of
each, in MiB: what the kernel's readahead holds ahead of a reader is not the watcher's to drop
(bench/results/watcher.md). With --out, every sample as "seconds pos behind ahead dest dirty
writeback" (MiB).
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

MIB = 1 << 20
SYS_CACHESTAT = 451


class CacheStat(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("cache", "dirty", "writeback", "evicted", "recently_evicted")]


class CacheRange(ctypes.Structure):
    _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]


LIBC = ctypes.CDLL(None, use_errno=True)


def cachestat(fd, off=0, length=0):
    """Pages of fd's file in [off, off + length) (length 0: to the end), or None."""
    r, c = CacheRange(off, length), CacheStat()
    if LIBC.syscall(SYS_CACHESTAT, fd, ctypes.byref(r), ctypes.byref(c), 0) != 0:
        return None
    return c


def reader_pos(path, me):
    """The furthest file position of any fd open on `path` in another process."""
    best = None
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") != path:
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    pos = int(f.readline().split()[1])
            except (OSError, ValueError, IndexError):
                continue
            best = pos if best is None else max(best, pos)
    return best


def dest_stat(dest):
    total = [0, 0, 0]
    for root, _, files in os.walk(dest):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY | os.O_NONBLOCK)
            except OSError:
                continue
            c = cachestat(fd)
            os.close(fd)
            if c:
                total = [total[0] + c.cache, total[1] + c.dirty, total[2] + c.writeback]
    return [p * 4096 / MIB for p in total]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--every", type=float, default=10, help="sampling interval, ms (default 10)")
    ap.add_argument("--out", help="write every sample here")
    ap.add_argument("--source", required=True, help="the file the command reads")
    ap.add_argument("--dest", help="a directory the command writes into")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command")
    if os.geteuid() != 0:
        sys.exit("watch-footprint: needs root (drop_caches)")
    source = os.path.realpath(a.source)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    rows = []
    t0 = time.monotonic()
    p = subprocess.Popen(cmd)
    while p.poll() is None:
        pos = reader_pos(source, os.getpid())
        if pos:
            # Opened for the moment only: a file held open outside the watched tree is not
            # taken as the program's when it grows (the watcher's rule), which would skew
            # what this measures.
            sfd = os.open(source, os.O_RDONLY)
            behind, ahead = cachestat(sfd, 0, pos), cachestat(sfd, pos, 0)
            os.close(sfd)
            d = dest_stat(a.dest) if a.dest else [0, 0, 0]
            if behind and ahead:
                rows.append((time.monotonic() - t0, pos / MIB, behind.cache * 4096 / MIB,
                             ahead.cache * 4096 / MIB, *d))
        time.sleep(a.every / 1000)
    if a.out:
        with open(a.out, "w") as f:
            for r in rows:
                f.write(" ".join(f"{x:.3f}" for x in r) + "\n")
    if not rows:
        sys.exit(f"watch-footprint: never saw a reader of {source} move (exit {p.returncode})")
    cols = [("source behind the reader", 2), ("source ahead of the reader", 3)]
    if a.dest:
        cols += [("dest cached", 4), ("dest dirty", 5), ("dest under writeback", 6)]
    print(f"{len(rows)} samples over {rows[-1][0]:.2f} s, exit {p.returncode}; MiB, median (peak):")
    for name, i in cols:
        v = [r[i] for r in rows]
        print(f"  {name:28} {statistics.median(v):7.1f} ({max(v):.1f})")
    both = [r[2] + r[3] + r[4] for r in rows]
    print(f"  {'source and dest together':28} {statistics.median(both):7.1f} ({max(both):.1f})")
    sys.exit(p.returncode)


if __name__ == "__main__":
    main()
