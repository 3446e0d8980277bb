#!/usr/bin/env python3
"""Builds test directories for the directory prefetch, reproducibly (fixed seed).

  make-dirs.py fresh DIR N   N empty files created in DIR, in order
  make-dirs.py aged DIR N    10N files created at random across DIR and 9 siblings, the
                             siblings deleted, then 30% of DIR's files replaced: DIR ends up
                             with N files whose inodes span 10-21 times the entry count
"""
import os
import random
import shutil
import sys


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("fresh", "aged"):
        sys.exit(__doc__)
    kind, d, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rnd = random.Random(2014)
    if kind == "fresh":
        os.makedirs(d)
        for i in range(n):
            os.close(os.open(f"{d}/f{i:07}", os.O_CREAT | os.O_WRONLY, 0o644))
        return
    siblings = [d] + [f"{d}.sib{k}" for k in range(9)]
    for s in siblings:
        os.makedirs(s)
    counts = [0] * 10
    for i in range(10 * n):
        k = rnd.randrange(10) if counts[0] < n else rnd.randrange(1, 10)
        if k == 0 and counts[0] >= n:
            k = 1
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
