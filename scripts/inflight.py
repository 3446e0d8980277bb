#!/usr/bin/env python3
"""What a command keeps in flight at the disk: runs CMD and then `sync`, sampling the disk's
requests in flight (/sys/block/DEV/inflight) every half millisecond, and prints how often
0, 1, 2, ... reads and writes were in flight, the requests completed and their mean size,
and the time until on disk.

    scripts/inflight.py [--dir DIR] [--wbt-off] -- CMD...     (root for --wbt-off)

DIR (default: the current directory) names the disk. --wbt-off turns the block layer's
writeback throttling off for the run (wbt_lat_usec 0, restored after): wbt counts the
buffered writes in flight, and while reads are being served it allows a quarter of its
depth (4 of 16), however large each request is (bench/results/copies-at-the-floor.md).
Prints one JSON object.
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def disk_of(path):
    src = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "--target", path], capture_output=True,
                         text=True, check=True).stdout.strip()
    dev = Path(os.path.realpath(src)).name
    part = Path(f"/sys/class/block/{dev}")
    # A partition's queue settings are its disk's.
    return part if (part / "queue").exists() else part.resolve().parent


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=".")
    ap.add_argument("--wbt-off", action="store_true", help="writeback throttling off for the run")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        sys.exit("inflight: no command given (try --help)")
    blk = disk_of(a.dir)
    wbt = blk / "queue" / "wbt_lat_usec"
    saved = wbt.read_text().strip() if wbt.exists() else None
    if a.wbt_off and saved is not None:
        wbt.write_text("0\n")
    try:
        os.sync()
        s0 = (blk / "stat").read_text().split()
        seen = collections.Counter()
        t0 = time.monotonic()
        p = subprocess.Popen(cmd)
        synced = None
        while True:
            r, w = map(int, (blk / "inflight").read_text().split())
            seen[(r, w)] += 1
            if synced is None and p.poll() is not None:
                ran = time.monotonic() - t0
                synced = subprocess.Popen(["sync"])
            if synced is not None and synced.poll() is not None:
                break
            time.sleep(0.0005)
        on_disk = time.monotonic() - t0
        s1 = (blk / "stat").read_text().split()
    finally:
        if a.wbt_off and saved is not None:
            wbt.write_text(saved + "\n")
    n = sum(seen.values())

    def share(i):
        c = collections.Counter()
        for k, v in seen.items():
            c[k[i]] += v
        return {str(k): round(v / n, 3) for k, v in sorted(c.items())}

    reads, rsect = int(s1[0]) - int(s0[0]), int(s1[2]) - int(s0[2])
    writes, wsect = int(s1[4]) - int(s0[4]), int(s1[6]) - int(s0[6])
    print(json.dumps(dict(
        cmd=" ".join(cmd), exit=p.returncode, wbt_lat_usec=saved, wbt="off" if a.wbt_off else "as set",
        seconds=round(ran, 3), seconds_on_disk=round(on_disk, 3),
        reads=reads, read_kib_mean=rsect // 2 // max(reads, 1),
        writes=writes, write_kib_mean=wsect // 2 // max(writes, 1),
        reads_in_flight=share(0), writes_in_flight=share(1))))


if __name__ == "__main__":
    main()
