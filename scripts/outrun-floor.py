#!/usr/bin/env python3
"""How far a buffered writer outruns the disk: the least page cache any helper that cannot
slow the writer down could keep it to.

  scripts/outrun-floor.py [--reps N] [--launcher PATH] DIR

Writes DIR/outrun.fio (2 GiB, `fio --ioengine=io_uring --rw=write --bs=1M`) in a fresh
memory cgroup (v1), sampling its memory.stat every 10 ms, three ways, interleaved:

  plain          as is: the flusher starts at the dirty background threshold
  write-at-once  vm.dirty_background_bytes set to 1 MiB for the run (restored after): the
                 kernel's flusher writes back as soon as anything is dirty, which is the
                 soonest any helper could start writeback
  launcher       `dropbehind -- fio ...` (the outside watcher: fio's writes go through
                 io_uring, which the preload does not see)
  launcher-at-once  both: what is left unwritten under the watcher when the kernel also
                 writes back at once

and prints, per way, the page cache's peak and the peak of what was not on disk yet
(dirty + writeback). A helper outside the writer can only start writeback and drop clean
pages: the page cache it leaves can never be less than what is dirty or under writeback,
so write-at-once's dirty + writeback peak is the least any such helper can reach. Needs
root and cgroup v1's memory controller. Prints one JSON object per run, then medians.
"""
import argparse
import json
import os
import statistics
import subprocess
import threading
import time
from pathlib import Path

MiB = 1 << 20
CG_ROOT = Path("/sys/fs/cgroup/memory")
BG = Path("/proc/sys/vm/dirty_background_bytes")
BG_RATIO = Path("/proc/sys/vm/dirty_background_ratio")


def evict(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


def run(cmd, target):
    cg = CG_ROOT / f"outrun_{os.getpid()}_{time.monotonic_ns()}"
    cg.mkdir()
    peak = {"cache": 0, "unwritten": 0}
    done = threading.Event()

    def sample():
        while not done.is_set():
            try:
                st = dict(line.split() for line in (cg / "memory.stat").read_text().splitlines())
                peak["cache"] = max(peak["cache"], int(st["cache"]) - int(st.get("shmem", 0)))
                peak["unwritten"] = max(peak["unwritten"], int(st["dirty"]) + int(st["writeback"]))
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    t = time.monotonic()
    # The child joins the cgroup before it execs the command.
    subprocess.run(["sh", "-c", f'echo $$ >"{cg}/cgroup.procs"; exec "$@"', "_"] + cmd,
                   check=True, stdout=subprocess.DEVNULL)
    secs = time.monotonic() - t
    time.sleep(0.1)
    done.set()
    sampler.join()
    subprocess.run(["sync", "-f", str(target)], check=True)
    for _ in range(50):
        try:
            cg.rmdir()
            break
        except OSError:
            time.sleep(0.1)
    return {"secs": round(secs, 3), "peak_cache_mib": peak["cache"] // MiB,
            "peak_unwritten_mib": peak["unwritten"] // MiB}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--launcher", default=str(Path(__file__).resolve().parent.parent
                                              / "target/release/dropbehind"))
    ap.add_argument("--size", default="2048M")
    a = ap.parse_args()
    target = Path(a.dir) / "outrun.fio"
    fio = ["fio", "--name=w", "--ioengine=io_uring", "--bs=1M", f"--size={a.size}",
           "--rw=write", "--output=/dev/null", f"--filename={target}"]
    launched = [a.launcher, "--"] + fio
    ways = {"plain": fio, "write-at-once": fio, "launcher": launched,
            "launcher-at-once": launched}
    results = {w: [] for w in ways}
    saved = (BG.read_text(), BG_RATIO.read_text())
    try:
        for rep in range(a.reps):
            for way, cmd in ways.items():
                target.unlink(missing_ok=True)
                subprocess.run(["sync"], check=True)
                if way.endswith("at-once"):
                    BG.write_text(str(MiB))
                try:
                    r = run(cmd, target)
                finally:
                    # Writing the ratio back restores whichever of the two was in use.
                    if saved[0].strip() != "0":
                        BG.write_text(saved[0])
                    else:
                        BG_RATIO.write_text(saved[1])
                r.update(way=way, rep=rep)
                print(json.dumps(r), flush=True)
                results[way].append(r)
                evict(target)
    finally:
        target.unlink(missing_ok=True)
    for way, rs in results.items():
        med = {k: statistics.median(r[k] for r in rs)
               for k in ("secs", "peak_cache_mib", "peak_unwritten_mib")}
        print(json.dumps({"way": way, "median": med}))


if __name__ == "__main__":
    main()
