#!/usr/bin/env python3
"""What RWF_DONTCACHE costs a sequential reader, by read size.

At the end of an uncached read the kernel drops every folio the read touched, whole, though
the read may have used only the start of it; readahead makes folios as large as its window.
So a stream of reads smaller than readahead's folios brings folios in again for the next
read. This reads FILE from start to end with preadv2, each read size once plain and once
with RWF_DONTCACHE, interleaved, the file evicted before each run, and prints per size and
mode the median seconds and how many bytes came from the disk (/proc/self/io read_bytes).

    scripts/uncached-reads.py FILE [ROUNDS [SIZE ...]]     (sizes in bytes or with K/M)

Evicting uses posix_fadvise(DONTNEED) on FILE only (nothing else loses its cache); run it as
root or the file's owner so that nothing of FILE stays cached. The device's read_ahead_kb is
printed too: the smallest read that costs nothing extra depends on it
(policy::read::uncached_read_fits).
"""
import os
import statistics
import sys
import time

RWF_DONTCACHE = 0x80


def size(s):
    units = {"K": 1 << 10, "M": 1 << 20}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def read_bytes():
    with open("/proc/self/io") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("read_bytes:"))


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def run(path, bs, flags):
    evict(path)
    buf = bytearray(bs)
    fd = os.open(path, os.O_RDONLY)
    b0, t0 = read_bytes(), time.monotonic()
    off = 0
    try:
        while (n := os.preadv(fd, [buf], off, flags)) > 0:
            off += n
    finally:
        os.close(fd)
    return time.monotonic() - t0, read_bytes() - b0, off


def readahead_kb(path):
    dev = os.stat(path).st_dev
    for parent in ("", "../"):
        p = f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}/{parent}queue/read_ahead_kb"
        if os.path.exists(p):
            return open(p).read().strip()
    return "unknown"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    sizes = [size(s) for s in sys.argv[3:]] or [4 << 10, 10 << 10, 64 << 10, 128 << 10,
                                                1 << 20, 2 << 20, 4 << 20]
    print(f"# {path}: read_ahead_kb {readahead_kb(path)}, {rounds} rounds, interleaved")
    res = {}
    for _ in range(rounds):
        for bs in sizes:
            for mode, flags in (("plain", 0), ("uncached", RWF_DONTCACHE)):
                res.setdefault((bs, mode), []).append(run(path, bs, flags))
    print("| read size | plain, s | uncached, s | uncached / plain | read from disk, plain | uncached |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for bs in sizes:
        p, u = res[(bs, "plain")], res[(bs, "uncached")]
        ps, us = statistics.median(r[0] for r in p), statistics.median(r[0] for r in u)
        file_bytes = p[0][2]
        pd, ud = (statistics.median(r[1] for r in x) / file_bytes for x in (p, u))
        label = f"{bs >> 20} MiB" if bs % (1 << 20) == 0 else f"{bs >> 10} KiB"
        print(f"| {label} | {ps:.2f} | {us:.2f} | {us / ps:.2f}x | {pd:.2f}x | {ud:.2f}x |")


if __name__ == "__main__":
    main()
