#!/usr/bin/env python3
"""Builds test directories for the directory prefetch, reproducibly (fixed seed).

  make-dirs.py fresh DIR N   N empty files created in DIR, in order
  make-dirs.py aged DIR N [K]
                             KN files (K defaults to 10) created at random across DIR and
                             K-1 siblings, the siblings deleted, then 30% of DIR's files
                             replaced: DIR ends up with N files whose inodes span about K-2K
                             times the entry count (K=10: 10-21 times)
"""
import os
import random
import shutil
import sys


def main():
    if len(sys.argv) not in (4, 5) or sys.argv[1] not in ("fresh", "aged"):
        sys.exit(__doc__)
    kind, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    k_dirs = int(sys.argv[4]) if len(sys.argv) == 5 else 10
    if k_dirs < 1:
        sys.exit("K must be at least 1")
    rnd = random.Random(2014)
    if kind == "fresh":
        os.makedirs(d)
        for i in range(n):
            os.close(os.open(f"{d}/f{i:07}", os.O_CREAT | os.O_WRONLY, 0o644))
        return
    siblings = [d] + [f"{d}.sib{k}" for k in range(k_dirs - 1)]
    for s in siblings:
        os.makedirs(s)
    counts = [0] * k_dirs
    for i in range(k_dirs * n):
        if k_dirs == 1:
            k = 0
        else:
            k = rnd.randrange(k_dirs) if counts[0] < n else rnd.randrange(1, k_dirs)
        os.close(os.open(f"{siblings[k]}/f{i:08}", os.O_CREAT | os.O_WRONLY, 0o644))
        counts[k] += 1
    for s in siblings[1:]:
        shutil.rmtree(s)
    names = sorted(os.listdir(d))
    for name in rnd.sample(names, len(names) * 3 // 10):
        os.unlink(f"{d}/{name}")
        os.close(os.open(f"{d}/{name}", os.O_CREAT | os.O_WRONLY, 0o644))


if __name__ == "__main__":
    main()
