#!/usr/bin/env python3
"""What the directory prefetch costs a program on a directory that is already cached.

  warm-dir-cost.py DIR [--rounds 7]

On a warm directory the shim's whole extra work is its probe at opendir (one getdents of
32 KiB and up to 8 statx on a second fd of its own) and a pass-through readdir hook. Whole
warm runs of `ls -l` vary by 10-20% from run to run on a shared machine, far more than that,
so this times the two pieces directly: opening a directory stream (and reading one entry),
and reading all of it, each with and without the shim, rounds interleaved, medians. It then
puts the difference next to one warm `ls -l` of DIR. Prints one JSON line.
"""
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LIB = Path(__file__).resolve().parent.parent / "target" / "release" / "libdropbehind.so"

# Runs in a child, with or without the shim preloaded: microseconds per opendir (+ first
# entry + close), and per full listing.
CHILD = r"""
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
for _ in range(3):
    it = os.scandir(d); next(it); it.close()
t = time.perf_counter()
for _ in range(n):
    it = os.scandir(d); next(it); it.close()
opened = (time.perf_counter() - t) / n * 1e6
t = time.perf_counter()
for _ in range(3):
    with os.scandir(d) as it:
        for _ in it:
            pass
listed = (time.perf_counter() - t) / 3 * 1e6
print(opened, listed)
"""


def child(d, preload):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = str(LIB)
    out = subprocess.run([sys.executable, "-c", CHILD, d, "200"], env=env, capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.split()]


def main():
    args = sys.argv[1:]
    if not args or args[0].startswith("-"):
        sys.exit(__doc__)
    d = args[0]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 7
    subprocess.run(["ls", "-l", d], stdout=subprocess.DEVNULL, check=True)  # warm it
    t = time.perf_counter()
    subprocess.run(["ls", "-l", d], stdout=subprocess.DEVNULL, check=True)
    ls_us = (time.perf_counter() - t) * 1e6
    plain, shim = [], []
    for r in range(rounds):
        for preload in ((False, True) if r % 2 == 0 else (True, False)):
            (shim if preload else plain).append(child(d, preload))
    med = lambda xs, i: statistics.median(x[i] for x in xs)
    res = {
        "opendir_us": {"no_shim": round(med(plain, 0), 1), "dropbehind": round(med(shim, 0), 1)},
        "full_listing_us": {"no_shim": round(med(plain, 1)), "dropbehind": round(med(shim, 1))},
        "warm_ls_l_us": round(ls_us),
    }
    extra = (med(shim, 0) - med(plain, 0)) + (med(shim, 1) - med(plain, 1))
    res["shim_extra_us_per_warm_listing"] = round(extra, 1)
    res["as_fraction_of_warm_ls_l"] = round(extra / ls_us, 5)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
