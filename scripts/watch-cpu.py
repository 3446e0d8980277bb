#!/usr/bin/env python3
"""Whose CPU a watched run spends: CMD without the launcher and under `dropbehind --stats --`,
interleaved, each run followed by `sync` (what it left dirty written out, timed with it).

  scripts/watch-cpu.py [--reps N] [--before SHELL] [--evict PATH]... -- CMD...   (root)

--before runs (untimed) before every run, e.g. a fresh `restic init`; --evict drops a file's
pages before every run, so that each starts cold. Per run it prints the wall time, the
machine's busy CPU seconds over the run and its sync (/proc/stat: everything but idle and
iowait, every process and kernel thread), the command's own CPU, user and system (its rusage;
under the launcher, less the watcher's), and the watcher's CPU as the launcher's report gives it.
Then the medians. What the watcher takes is partly work it takes over (the writeback a
program's fsync would start, the flusher's) and partly work a plain run leaves for later
(freeing the pages it dropped, which a plain run leaves for reclaim): the machine's total
shows the difference.
"""
import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LAUNCHER = str(Path(__file__).resolve().parent.parent / "target/release/dropbehind")
TICK = os.sysconf("SC_CLK_TCK")


def busy():
    """The machine's non-idle CPU seconds so far (all CPUs)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is in user.
    return (sum(f[:8]) - f[3] - f[4]) / TICK


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def run(cmd, a, launched):
    if a.before:
        subprocess.run(["sh", "-c", a.before], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["sync"], check=True)
    for p in a.evict:
        evict(p)
    with tempfile.NamedTemporaryFile("r") as stats:
        argv = [LAUNCHER, f"--stats={stats.name}", "--"] + cmd if launched else cmd
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        b0, t0 = busy(), time.monotonic()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        wall = time.monotonic() - t0
        subprocess.run(["sync"], check=True)
        b1, t1 = busy(), time.monotonic()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        report = stats.read()
    user, sys_ = ru1.ru_utime - ru0.ru_utime, ru1.ru_stime - ru0.ru_stime
    m = re.search(r"watcher CPU time ([\d.]+) s \(([\d.]+) user, ([\d.]+) system\)", report)
    watcher, w_user, w_sys = (float(g) for g in m.groups()) if m else (0.0, 0.0, 0.0)
    return {"way": "launcher" if launched else "plain", "wall_s": round(wall, 3),
            "with_sync_s": round(t1 - t0, 3), "machine_cpu_s": round(b1 - b0, 3),
            "command_user_s": round(user - w_user, 3), "command_sys_s": round(sys_ - w_sys, 3),
            "watcher_cpu_s": watcher}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--before")
    ap.add_argument("--evict", action="append", default=[])
    ap.add_argument("cmd", nargs="+")
    a = ap.parse_args()
    res = {"plain": [], "launcher": []}
    for _ in range(a.reps):
        for launched in (False, True):
            r = run(a.cmd, a, launched)
            print(json.dumps(r), flush=True)
            res[r["way"]].append(r)
    for way, rs in res.items():
        med = {k: round(statistics.median(r[k] for r in rs), 3)
               for k in ("wall_s", "with_sync_s", "machine_cpu_s", "command_user_s", "command_sys_s",
                         "watcher_cpu_s")}
        print(json.dumps({"way": way, "median": med}))


if __name__ == "__main__":
    sys.exit(main())
