#!/usr/bin/env python3
"""What each copier costs apart from the disk: copies SRC into DIR with the source already
cached and the copy left in memory (no sync), so no byte waits for the device. Prints, per
copier, the median seconds, the CPU it used (user + system, all its processes), and how
many folios its writes added to the page cache (tracepoint filemap:mm_filemap_add_to_page_cache,
counted by perf): every folio is one more to write back and, for a bounded copy, to drop.

    scripts/copier-work.py SRC DIR [--rounds N] [--only NAME...]     (root: drop_caches)

A copy bounded in memory must also write back and drop what it wrote, while it copies; on
a machine with few CPUs that work competes with the copier's own (bench/results/
copies-at-the-floor.md, "What tar and rsync cost apart from the disk"). Prints one JSON
object per copier, then a table.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

MIB = 1 << 20


def copiers(src, dst):
    return {
        "cp": ["cp", src, dst],
        "dd bs=1M": ["dd", f"if={src}", f"of={dst}", "bs=1M", "status=none"],
        "python3 shutil.copyfile": ["python3", "-c", "import shutil,sys; shutil.copyfile(*sys.argv[1:])", src, dst],
        "cat F > G": ["sh", "-c", f'cat "{src}" > "{dst}"'],
        "tar cf": ["tar", "cf", dst, "-C", str(Path(src).parent), Path(src).name],
        "rsync": ["rsync", src, dst],
    }


def drop_caches():
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def cache_source(src, mib):
    with open(src, "rb") as f:
        while f.read(8 * MIB):
            pass
    # Touch as much memory as the copy will take, so that no run pays a balloon's first
    # touch for its page cache (bench/bench.py drop_caches says why).
    touched = bytearray((mib + 256) * MIB)
    del touched


def one(cmd):
    """(seconds, cpu seconds, folios added) of one run of cmd."""
    perf = ["perf", "stat", "-x,", "-e", "filemap:mm_filemap_add_to_page_cache", "--"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(perf + cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    secs = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.exit(f"copier-work: {cmd[0]} failed: {p.stderr.strip()[-300:]}")
    folios = None
    for line in p.stderr.splitlines():
        if "mm_filemap_add_to_page_cache" in line:
            folios = int(line.split(",")[0])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return secs, cpu, folios


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dir")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="copier names, as printed")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("copier-work: needs root (drop_caches)")
    src = os.path.abspath(a.src)
    dst = os.path.join(os.path.abspath(a.dir), "copier-work.dst")
    mib = os.path.getsize(src) // MIB
    cases = {k: v for k, v in copiers(src, dst).items() if not a.only or k in a.only}
    got = {k: [] for k in cases}
    try:
        for r in range(a.rounds):
            order = list(cases) if r % 2 == 0 else list(reversed(cases))
            for name in order:
                if os.path.exists(dst):
                    os.unlink(dst)
                drop_caches()
                cache_source(src, mib)
                got[name].append(one(cases[name]))
    finally:
        if os.path.exists(dst):
            os.unlink(dst)
    rows = []
    for name, runs in got.items():
        secs, cpu, folios = (statistics.median(x) for x in zip(*runs))
        row = dict(copier=name, seconds=round(secs, 3), cpu_s=round(cpu, 3), folios=int(folios),
                   kib_per_folio=round(mib * 1024 / folios, 1) if folios else None,
                   runs=[[round(s, 3), round(c, 3), f] for s, c, f in runs])
        rows.append(row)
        print(json.dumps(row))
    print(f"\n{'copier':26} {'seconds':>8} {'CPU s':>7} {'folios':>8} {'KiB/folio':>9}")
    for r in rows:
        print(f"{r['copier']:26} {r['seconds']:8.2f} {r['cpu_s']:7.2f} {r['folios']:8} {r['kib_per_folio']:9}")


if __name__ == "__main__":
    main()
