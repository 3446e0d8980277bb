"""Cold copies on a disk of known bandwidth (issue 17, part 1).

s20 holds each copy against fio's floor on this VM's own disk, whose host caches writes:
the `sync` that ends a copy flushes the host's cache, and that flush moved a buffered
copy's ratio to the floor by 2x from one hour to the next (bench/results/copies-at-the-floor.md).
Here the same copiers and contenders copy the same bytes on a disk in memory held to a rate
by the kernel's block throttle (scripts/slowdisk.sh --rate): reads and writes each limited
to it, no latency, nothing cached below, a flush free. The floor of a copy that must have
read and written everything before it ends is then known, size over the rate, and fio
measures it in every round beside the copies.

KNOWN_DISK_MIBPS=N sets the rate (default 400)."""
import os
import statistics
from pathlib import Path

from bench import ROOT, Contender, load_scenarios, sh

TITLE = "Cold copy on a disk of known bandwidth"
ORDER = 21
SLOWDISK = str(ROOT / "scripts" / "slowdisk.sh")


def quiet(cmd):
    return sh(cmd, capture_output=True, text=True)


def run(b):
    rate = os.environ.get("KNOWN_DISK_MIBPS", "400")  # MiB/s each way
    if not rate.isdigit() or int(rate) == 0:
        b.text(f"### {TITLE}\n\nSkipped: KNOWN_DISK_MIBPS={rate}: expected a whole number of MiB/s, 1 or more.\n")
        return
    check = quiet([SLOWDISK, "check", "--rate"])
    if check.returncode != 0:
        b.text(f"### {TITLE}\n\nSkipped: {check.stderr.strip()}\n")
        return
    s20 = dict(load_scenarios(["s20_copy_cold"]))["s20_copy_cold"]
    mib = b.size(2048, 512)
    disk = b.work / "known-disk"
    quiet([SLOWDISK, "down", str(disk)])
    try:
        # Room for the source, a copy and copy-floor.sh's scratch file.
        up = quiet([SLOWDISK, "up", str(disk), "--delay-ms", "0", "--size", f"{3 * mib + 1024}M", "--rate", rate])
        if up.returncode != 0:
            b.text(f"### {TITLE}\n\nSkipped: {up.stderr.strip()}\n")
            return
        measure(b, s20, mib, int(rate), Path(up.stdout.strip().splitlines()[-1]))
    finally:
        quiet([SLOWDISK, "down", str(disk)])


def measure(b, s20, mib, rate, mnt):
    _, local = b.source_file(mib)
    (mnt / "src").mkdir()
    f, dst = mnt / "src" / "F", mnt / "copy-dst"
    if quiet(["dd", f"if={local}", f"of={f}", "bs=4M", "oflag=direct", "status=none"]).returncode != 0:
        b.text(f"### {TITLE}\n\nSkipped: could not write the source file on the fixture.\n")
        return

    def sync():
        # The fixture only: the root disk's host cache is what this scenario keeps out.
        quiet(["sync", "-f", str(dst)])

    cases, warm = s20.copiers(f, dst)
    conts = s20.copy_contenders(b, f, dst)
    floor, fio = "disk floor", Contender("fio O_DIRECT")
    # At rates the copier's CPU can't keep up with, its own work is the bound, not the disk.
    own = Contender("own work")

    def either(case, c):
        if (case == floor) != (c is fio):
            return None
        if c is fio:
            return s20.floor_once(f, dst, mnt)
        if c is own:
            return s20.own_once(own, cases[case], warm[case], f, dst, mib, sync)
        cmd = c.wrap(case, cases[case])
        return None if cmd is None else s20.copy_once(c, case, cmd, warm[case], f, dst, mib, sync)

    b.interleave(list(cases) + [floor], conts + [own, fio], b.size(3, 1), either)
    ideal = mib / rate
    b.table(
        f"Cold copy of a {mib} MiB file on a memory disk limited to {rate} MiB/s each way, each run alone in a fresh memory cgroup",
        list(cases), conts, s20.COPY_METRICS, ratio_of=["seconds", "synced"],
        note=f"The disk reads and writes {rate} MiB/s each, at once if asked, with no latency and no cache below: "
             f"a copy that has read and written everything takes at least {ideal:.2f} s; "
             "a plain copy takes about that to read, "
             "some of its writeback overlapping the reads and the rest in its sync. "
             "Every copy is compared with its source.")
    runs = b.rows(floor, fio.name)
    if not runs:
        failed = next((s["failed"] for s in b.samples if s["scenario"] == b.scenario and s["case"] == floor), "no run")
        b.text(f"Floor not measured: scripts/copy-floor.sh failed ({failed}).\n")
        return
    floor_of = {x["rep"]: x["both_sync_s"] for x in runs}
    fl = statistics.median(floor_of.values())
    per = []
    for c in conts:
        ratios = []
        for case in cases:
            rows = [s for s in b.rows(case, c.name) if s["rep"] in floor_of]
            if rows:
                ratios.append(f"{case} {statistics.median(s['synced'] / floor_of[s['rep']] for s in rows):.2f}x")
        if ratios:
            per.append(f"{c.name}: " + ", ".join(ratios))
    b.text(f"Floor (`scripts/copy-floor.sh` on the fixture, fio O_DIRECT, median of {len(runs)}): reading alone "
           f"{statistics.median(x['read_s'] for x in runs):.2f} s, writing alone {statistics.median(x['write_s'] for x in runs):.2f} s, "
           f"both at once and the sync after {fl:.2f} s, against {ideal:.2f} s for {mib} MiB at {rate} MiB/s. "
           "Each copy until on disk against its round's floor, median of the rounds: " + "; ".join(per) + ".\n")
    s20.against_own_work(b, cases, own, floor_of)
    s20.cpu_paragraph(b, cases, conts, own)
