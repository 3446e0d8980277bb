#!/usr/bin/env python3
"""What each copier costs apart from the disk: copies SRC into DIR with the source already
cached and the copy left in memory (no sync), so no byte waits for the device. Prints, per
copier, the median seconds, the CPU it used (user + system, all its processes and threads),
and how many folios the run added to the page cache (tracepoint
filemap:mm_filemap_add_to_page_cache, counted by perf): every folio of the copy is one more
to write back and, for a bounded copy, to drop. Before each run the copier's own files and
perf's are read (outside the timing); perf's own cost is in every row, and the row
"perf alone" (perf running `true`) shows how much.

    scripts/copier-work.py SRC DIR [--rounds N] [--only NAME...] [--lib LIB...] [--floor]

With --lib, each copier runs instead as s20 runs it: the source evicted, under
LD_PRELOAD=LIB, timed until on disk (the copy, then sync); the CPU then includes the
library's writeback thread, and the folios the source's too. With two or more, each copier
runs under each library in every round (their order reversed every other round), and each
library's row gives the median of its rounds' ratios to the first library's (libraries
are numbered in the table, in the order given; give an even number of rounds, so that
each goes first equally often). Every row also counts the times the copier's threads were
switched out, voluntarily and not ("preempted": a helper thread waking often takes the
CPU from the program); both counts include perf's and the library's own threads. --floor adds
scripts/copy-floor.sh once a round, and each run's ratio to its round's floor: without
--lib, how the copier's own work, with no byte waiting for the disk, compares with the disk
floor a bounded copy is held against. Needs root (drop_caches) and perf.

A copy bounded in memory must also write back and drop what it wrote, while it copies; on
a machine with few CPUs that work competes with the copier's own (bench/results/
copies-at-the-floor.md, "What tar and rsync cost apart from the disk"). Prints one JSON object per
copier, then a table.
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
import bench  # noqa: E402  (the benchmark's helpers, and s20's table of copiers)

MIB = bench.MIB


def copiers(src, dst):
    """s20's copiers (the commands, and what reads each copier's own files first), and the
    same tar in 128 KiB records instead of 10 KiB; the row "perf alone" runs perf's `true`."""
    s20 = dict(bench.load_scenarios(["s20_copy_cold"]))["s20_copy_cold"]
    cases, warm = s20.copiers(src, dst)
    f = Path(src)
    cases["tar -b 256 cf"] = ["tar", "-b", "256", "-cf", str(dst), "-C", str(f.parent), f.name]
    warm["tar -b 256 cf"] = warm["tar cf"]
    cases["perf alone"], warm["perf alone"] = ["true"], []
    return cases, warm


def die(msg):
    print(f"copier-work: {msg}", file=sys.stderr)
    sys.exit(2)


PERF = ["perf", "stat", "-x,", "-e", "filemap:mm_filemap_add_to_page_cache", "--"]


def prepare(src, mib, warm, lib):
    """As s20 before each run: caches dropped and memory touched (bench.drop_caches says
    why), then the source read whole (without `lib`), perf's, the copier's and the
    library's files."""
    bench.drop_caches(fault_in_mib=2 * mib + 256)
    if not lib:
        bench.cache_files([src])
    bench.warm_programs([PERF + ["true"], *warm] + ([["env", f"LD_PRELOAD={lib}", "true"]] if lib else []))


def one(cmd, lib):
    """(seconds, cpu seconds, folios added, voluntary and involuntary context switches) of
    one run of cmd under perf; with lib, preloaded and timed until on disk. perf's own time,
    CPU and switches are in it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    # perf is told to preload nothing itself: LD_PRELOAD reaches the copier through env.
    p = subprocess.run(PERF + (["env", f"LD_PRELOAD={lib}"] if lib else []) + cmd,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if lib:
        os.sync()
    secs = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        die(f"{cmd[0]} failed: {p.stderr.strip()[-300:]}")
    folios = None
    for line in p.stderr.splitlines():
        if "mm_filemap_add_to_page_cache" in line and line.split(",")[0].isdigit():
            folios = int(line.split(",")[0])
    if folios is None:
        die(f"perf counted no folios: {p.stderr.strip()[-300:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return secs, cpu, folios, after.ru_nvcsw - before.ru_nvcsw, after.ru_nivcsw - before.ru_nivcsw


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src")
    ap.add_argument("dir")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", help="copier names, as printed")
    ap.add_argument("--lib", nargs="+", default=[], help="run each copier cold under each of these preloads, until on disk")
    ap.add_argument("--floor", action="store_true", help="copy-floor.sh each round, and each run against it")
    a = ap.parse_args()
    libs = [os.path.abspath(x) for x in a.lib] or [None]
    if any(lib and not os.path.isfile(lib) for lib in libs):
        die(f"no such library among {', '.join(a.lib)}")
    if len(set(libs)) != len(libs):
        die("a library is named twice: copy it under another name to compare it with itself")
    if os.geteuid() != 0:
        die("needs root (drop_caches)")
    if not shutil.which("perf"):
        die("needs perf (apt-get install linux-perf) to count folios")
    src = os.path.abspath(a.src)
    if not os.path.isfile(src) or not os.path.isdir(a.dir):
        die(f"SRC must be a file and DIR a directory ({a.src}, {a.dir})")
    dst = os.path.join(os.path.abspath(a.dir), "copier-work.dst")
    mib = os.path.getsize(src) // MIB
    every, warm = copiers(src, dst)
    unknown = set(a.only or []) - set(every)
    if unknown:
        die(f"no copier named {', '.join(sorted(unknown))}; there are: {', '.join(every)}")
    if a.rounds < 1:
        die("--rounds takes a number from 1")
    cases = {k: v for k, v in every.items() if not a.only or k in a.only}
    runs_of = [(k, lib) for k in cases for lib in libs]
    got = {k: [] for k in runs_of}
    floors = []
    try:
        for r in range(a.rounds):
            order = runs_of if r % 2 == 0 else list(reversed(runs_of))
            for name, lib in order:
                if os.path.exists(dst):
                    os.unlink(dst)
                prepare(src, mib, warm[name], lib)
                got[(name, lib)].append(one(cases[name], lib))
            if a.floor:
                if os.path.exists(dst):
                    os.unlink(dst)
                out = subprocess.run([str(Path(__file__).parent / "copy-floor.sh"), src, a.dir],
                                     capture_output=True, text=True, check=True).stdout
                floors.append(json.loads(out.strip().splitlines()[-1])["both_sync_s"])
    finally:
        if os.path.exists(dst):
            os.unlink(dst)
    rows = []
    for (name, lib), runs in got.items():
        secs, cpu, folios, vcsw, ivcsw = (statistics.median(x) for x in zip(*runs))
        row = dict(copier=name, lib=lib, seconds=round(secs, 3), cpu_s=round(cpu, 3), folios=int(folios),
                   kib_per_folio=round(mib * 1024 / folios, 1) if folios else None,
                   switches=round(vcsw), preempted=round(ivcsw),
                   runs=[[round(s, 3), round(c, 3), f, v, i] for s, c, f, v, i in runs])
        if floors:
            # The median of each round's ratio to that round's floor.
            row["by_round"] = round(statistics.median(x[0] / f for x, f in zip(runs, floors)), 3)
        if lib != libs[0]:
            first = got[(name, libs[0])]
            row["vs_first"] = round(statistics.median(x[0] / y[0] for x, y in zip(runs, first)), 3)
        rows.append(row)
        print(json.dumps(row))
    if floors:
        print(json.dumps(dict(floor_s=round(statistics.median(floors), 3), runs=floors)))
    head = "until on disk" if libs[0] else "seconds"
    many = len(libs) > 1
    print(f"\n{'copier':26} {'library':>16} {head:>13} {'CPU s':>7} {'folios':>8} {'KiB/folio':>9} {'switches':>9} {'preempted':>9}"
          + ("  by round" if floors else "") + ("  vs the first" if many else ""))
    for r in rows:
        name = f"{libs.index(r['lib']) + 1}: {os.path.basename(r['lib'])[-13:]}" if r["lib"] else "-"
        print(f"{r['copier']:26} {name:>16} {r['seconds']:13.2f} {r['cpu_s']:7.2f} {r['folios']:8} {r['kib_per_folio'] or '-':>9}"
              f" {r['switches']:9} {r['preempted']:9}"
              + (f"  {r['by_round']:.2f}x" if floors else "") + (f"  {r['vs_first']:.2f}x" if "vs_first" in r else ""))
    if floors:
        print(f"{'disk floor (+ sync)':26} {statistics.median(floors):13.2f}")
    if many:
        for i, lib in enumerate(libs, 1):
            print(f"library {i}: {lib}")


if __name__ == "__main__":
    main()
