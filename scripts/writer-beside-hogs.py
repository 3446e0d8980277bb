#!/usr/bin/env python3
"""A bounded writer on a machine whose CPUs are taken: `dd` writes MIB MiB of zeros to a
file in DIR while HOGS processes (dd from /dev/zero to /dev/null) keep the CPUs busy, under
each library in turn (`none`: no preload), rounds interleaved, the order flipped every
round. Prints, per library, the median (min-max) seconds of the writer's own run and until
its data is on disk (the run, then `sync`).

What it shows: how much the writeback helper's lower priority (writeback.rs,
`HELPER_NICE`) costs a writer where no CPU is free; s50_alloc_latency shows what it gives
a foreground beside such writers. Needs root (drop_caches).

  scripts/writer-beside-hogs.py DIR [--rounds N] [--mib MIB] [--hogs N] LIB|none...
"""
import argparse
import os
import statistics
import subprocess
import time
from pathlib import Path


def one(lib, path, mib, hogs):
    path.unlink(missing_ok=True)
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    busy = [subprocess.Popen(["dd", "if=/dev/zero", "of=/dev/null", "bs=1M", "status=none"]) for _ in range(hogs)]
    try:
        time.sleep(0.5)
        env = dict(os.environ, **({} if lib == "none" else {"LD_PRELOAD": lib}))
        t0 = time.monotonic()
        subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={mib}", "status=none"], env=env, check=True)
        ran = time.monotonic() - t0
        subprocess.run(["sync"], check=True)
        on_disk = time.monotonic() - t0
    finally:
        for b in busy:
            b.terminate()
        for b in busy:
            b.wait()
    if path.stat().st_size != mib << 20:
        raise SystemExit(f"writer-beside-hogs: {path} has {path.stat().st_size} bytes, not {mib} MiB")
    path.unlink()
    return ran, on_disk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("libs", nargs="+", metavar="LIB|none")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--hogs", type=int, default=2)
    a = ap.parse_args()
    libs = [lib if lib == "none" else str(Path(lib).resolve()) for lib in a.libs]
    times = {lib: [] for lib in libs}
    for r in range(a.rounds):
        for lib in libs if r % 2 == 0 else reversed(libs):
            times[lib].append(one(lib, a.dir / "writer-beside-hogs.bin", a.mib, a.hogs))
    print(f"{a.mib} MiB by dd bs=1M beside {a.hogs} CPU hogs, {a.rounds} rounds, seconds, median (min-max):")
    print("| library | writer's run | until on disk |")
    print("| --- | ---: | ---: |")
    for lib in libs:
        cols = []
        for i in (0, 1):
            v = [t[i] for t in times[lib]]
            cols.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})")
        print(f"| {lib} | {cols[0]} | {cols[1]} |")


if __name__ == "__main__":
    main()
