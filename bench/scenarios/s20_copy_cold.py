"""Cold copies (issue 3): every common copier, peak cgroup usage, cache left, wall time."""
import os
import statistics
import time
from pathlib import Path
from subprocess import PIPE
from bench import EXAMPLES, ROOT, Cgroup, Contender, CpuBusy, cache_files, cached_mib, drop_caches, fault_in, parse_json, run_checked, same_bytes, same_tar_member

TITLE = "Cold copy of a big file"
ORDER = 20


def copiers(f, dst):
    """The copies of file `f` to `dst`, by name, and for each the commands that read the
    copier's own files before its run (see bench.warm_programs; shim-tests/t_copy.sh's peaks
    are taken the same way). scripts/copier-work.py times the same copiers."""
    f, dst = Path(f), Path(dst)
    cases = {
        "cp": ["cp", str(f), str(dst)],
        "dd bs=1M": ["dd", f"if={f}", f"of={dst}", "bs=1M", "status=none"],
        "python3 shutil.copyfile": ["python3", "-c", "import shutil,sys; shutil.copyfile(*sys.argv[1:])", str(f), str(dst)],
        "cat F > G": ["sh", "-c", f'cat "{f}" > "{dst}"'],
        "tar cf": ["tar", "cf", str(dst), "-C", str(f.parent), f.name],
        "rsync": ["rsync", str(f), str(dst)],
    }
    warm = {
        "cp": [["cp", "--version"]],
        "dd bs=1M": [["dd", "--version"]],
        "python3 shutil.copyfile": [["python3", "-c", "import shutil"]],
        "cat F > G": [["sh", "-c", "cat --version"]],
        "tar cf": [["tar", "--version"]],
        "rsync": [["rsync", "--version"]],
    }
    return cases, warm


def copy_contenders(b, f, dst):
    """The contenders of a cold copy of `f` to `dst`: no shim, dropbehind, nocache, dd's own
    nocache flags and the kernel's RWF_DONTCACHE (examples/uncached)."""
    return b.contenders("no shim", "dropbehind", "nocache") + [
        Contender("dd iflag=nocache oflag=nocache", lambda case, cmd: cmd + ["iflag=nocache", "oflag=nocache"] if case == "dd bs=1M" else None),
        Contender("RWF_DONTCACHE reference", lambda case, cmd: [str(EXAMPLES / "uncached"), "copy", str(f), str(dst)] if case == "cp" else None,
                  warm=[[str(EXAMPLES / "uncached"), "--help"]]),
    ]


def copy_once(c, case, cmd, warm, f, dst, mib, sync=os.sync):
    """One cold copy (`cmd`, already wrapped by contender `c`) of `f` to `dst`, alone in a
    fresh memory cgroup: its time, its time until on disk (then `sync()`), its peak and
    what it left cached. A copy that differs from its source fails the run."""
    if dst.exists():
        dst.unlink()
    # A plain copy takes the file's size twice in page cache.
    drop_caches(fault_in_mib=2 * mib + 256)
    c.warm_up(warm)
    cpu = CpuBusy()
    with Cgroup() as cg:
        cpu.start()
        secs, _ = cg.run(cmd, env=c.env)
        peak = cg.peak_mib()
        # A copy is done when its data is on disk: what the copier left dirty, sync writes.
        t0 = time.monotonic()
        sync()
        synced = secs + time.monotonic() - t0
        busy = cpu.stop()
        src_left, dst_left = cached_mib(f), cached_mib(dst)
    if case == "tar cf":
        same_tar_member(f, dst, f.name)
    else:
        same_bytes(f, dst)
    return dict(seconds=secs, synced=synced, peak_mib=peak, src_left=src_left, dst_left=dst_left, **busy)


def own_once(own, cmd, warm, f, dst, mib, sync=os.sync):
    """What copier `cmd` itself costs, apart from the disk (scripts/copier-work.py measures
    the same by hand): no shim, its source cached, its copy left in memory, alone in a
    fresh memory cgroup; written out after, untimed. A copy can't end before its own work,
    however fast the disk, and on two CPUs a copier's own work can come near the disk floor
    (rsync's, bench/results/copies-at-the-floor.md)."""
    if dst.exists():
        dst.unlink()
    drop_caches()
    cache_files([f])
    # After the source is read, which on a throttled disk takes seconds: touched before it,
    # the memory went back to the host meanwhile (cp's own work 3.32 s at 800 MiB/s, longer
    # than its shimmed copy until on disk; bench/results/copies-at-the-floor.md).
    fault_in(2 * mib + 256)
    own.warm_up(warm)
    cpu = CpuBusy()
    with Cgroup() as cg:
        cpu.start()
        secs, _ = cg.run(cmd)
        busy = cpu.stop()
    sync()
    return dict(seconds=secs, **busy)


def cpu_paragraph(b, cases, conts, own):
    """How busy the CPUs were through each copy until on disk, and what each copier's own
    work took of them: on two CPUs a copier, its writeback and the disk's own work (a loop
    device's copies) can fill both, and then no ordering of the I/O makes the copy sooner."""
    parts = []
    for c in [x for x in conts if x.name in ("no shim", "dropbehind")] + [own]:
        per = []
        for case in cases:
            rows = [s for s in b.rows(case, c.name) if "cpu_busy" in s]
            if rows:
                busy = statistics.median(s["cpu_busy"] for s in rows)
                secs = statistics.median(s["cpu_seconds"] for s in rows)
                per.append(f"{case} {busy:.0f}% ({secs:.2f} CPU-s)")
        if per:
            parts.append(f"{c.name}: " + ", ".join(per))
    if parts:
        b.text(f"The machine's {os.cpu_count()} CPUs, busy from each copy's start until on disk (the own work: "
               "until the copy is in memory), median share and CPU-seconds: " + "; ".join(parts) + ".\n")


def against_own_work(b, cases, own, floor_of):
    """The paragraph holding each copier's own work against its round's floor, and each
    shimmed copy against the larger of the two, round by round."""
    alone, bounded = [], []
    for case in cases:
        own_of = {x["rep"]: x["seconds"] for x in b.rows(case, own.name)}
        mine = [own_of[r] / floor_of[r] for r in own_of if r in floor_of]
        shim_rows = [s for s in b.rows(case, "dropbehind") if s["rep"] in floor_of and s["rep"] in own_of]
        if mine:
            alone.append(f"{case} {statistics.median(own_of.values()):.2f} s, {statistics.median(mine):.2f}x")
        if shim_rows:
            r = statistics.median(s["synced"] / max(floor_of[s["rep"]], own_of[s["rep"]]) for s in shim_rows)
            bounded.append(f"{case} {r:.2f}x")
    if alone:
        b.text("Each copier's own work in the same rounds (no shim, its source cached, its copy left in memory, "
               "so no byte waits for the disk), median, and against its round's floor: " + "; ".join(alone) + ". "
               "A copy can't end before its own work; dropbehind until on disk "
               "against the larger of the two, round by round (median; the same as by round wherever the "
               "copier's own work stayed under the floor): " + "; ".join(bounded) + ".\n")


def floor_once(f, dst, work):
    """scripts/copy-floor.sh's fio floor for copying `f`, with `dst` out of the way."""
    if dst.exists():
        dst.unlink()
    _, out = run_checked([str(ROOT / "scripts" / "copy-floor.sh"), str(f), str(work)], stdout=PIPE, expect_err=None)
    return parse_json(out.strip().splitlines()[-1] if out.strip() else b"", "copy-floor.sh")


COPY_METRICS = [("peak_mib", "peak cgroup MiB", "{:.0f}"), ("src_left", "source cached after, MiB", "{:.1f}"),
                ("dst_left", "copy cached after, MiB", "{:.1f}"), ("seconds", "seconds", "{:.2f}"),
                ("synced", "seconds until on disk (+ sync)", "{:.2f}"),
                ("cpu_busy", "CPUs busy until on disk, %", "{:.0f}")]


def run(b):
    mib = b.size(2048, 512)
    _, f = b.source_file(mib)
    dst = b.work / "copy-dst"
    cases, warm = copiers(f, dst)
    conts = copy_contenders(b, f, dst)

    def one(case, c):
        cmd = c.wrap(case, cases[case])
        return None if cmd is None else copy_once(c, case, cmd, warm[case], f, dst, mib)

    # Each copy is also held against the larger of the floor and the copier's own work.
    own = Contender("own work")

    # What the disk allows a copy that must reach it before it ends (scripts/copy-floor.sh),
    # measured once a round among the copies: the host's disk moves by 40% from one hour to
    # the next (bench/results/copies-at-the-floor.md), so a floor taken apart from the copies
    # can't be compared with them.
    floor = "disk floor"
    fio = Contender("fio O_DIRECT")

    def either(case, c):
        if (case == floor) != (c is fio):
            return None
        if c is own:
            return own_once(own, cases[case], warm[case], f, dst, mib)
        return floor_once(f, dst, b.work) if c is fio else one(case, c)

    b.interleave(list(cases) + [floor], conts + [own, fio], b.size(3, 1), either)
    b.table(
        f"Cold copy of a {mib} MiB file, each run alone in a fresh memory cgroup",
        list(cases), conts,
        COPY_METRICS,
        ratio_of=["seconds", "synced"],
        note="Plain copies return with the copy still dirty in memory; the sync column adds the time to write it out. "
             "Every copy is compared with its source (tar's through the archive); a copy that differs fails its contender. "
             "Each run starts with the copier's and the contender's own files cached (the launcher and library, nocache's, the RWF_DONTCACHE reference's program), as any use but the first would find them. "
             "Plain times vary a lot here: ext4 is mounted with `discard`, and deleting the previous 2 GiB copy stalls the next writer.",
    )
    b.summary("copy-cost", list(cases), "dropbehind", [("seconds", "by the command's clock"), ("synced", "until on disk")])
    if dst.exists():
        dst.unlink()
    runs = b.rows(floor, "fio O_DIRECT")
    cp = [s["seconds"] for s in b.rows("cp", "no shim")]
    if runs:
        keys = ("read_s", "write_s", "both_s", "both_sync_s")
        med = {k: statistics.median(x[k] for x in runs) for k in keys if all(k in x for x in runs)}
        # A copy until on disk ends with sync's flush, which writes out what this VM's host
        # holds in its cache: the floor it is held against ends with one too.
        fl = med.get("both_sync_s", med["both_s"])
        ratio = f" (in this run {fl / statistics.median(cp):.1f}x the {statistics.median(cp):.2f} s of a plain `cp` by its clock)" if cp else ""
        b.text(
            f"Disk floor for the {mib} MiB copy (`scripts/copy-floor.sh`, fio O_DIRECT, 16 x 1 MiB in flight per stream, "
            f"median of {len(runs)}): reading it alone {med['read_s']:.2f} s, writing as much alone {med['write_s']:.2f} s, "
            f"both at once {med['both_s']:.2f} s"
            + (f", and {fl:.2f} s with the `sync` after it (the host's write cache flushed, as a copy's sync does)"
               if "both_sync_s" in med else "")
            + f". A plain copy's time is about the first (its writes stay in memory); "
            f"a copy that keeps the cache bounded must do both, so the last is what it is held against{ratio}; "
            f"it is a reference, not a bound: buffered copies have come in under it here.\n")
        floor_of = {x["rep"]: x.get("both_sync_s", x["both_s"]) for x in runs}
        against = []
        for case in cases:
            shim_rows = b.rows(case, "dropbehind")
            shim = [s["synced"] for s in shim_rows]
            plain = [s["synced"] for s in b.rows(case, "no shim")]
            if shim and plain:
                m = statistics.median(shim)
                # The floor moves from round to round: each copy against its own round's too.
                paired = [s["synced"] / floor_of[s["rep"]] for s in shim_rows if s["rep"] in floor_of]
                per = f", {statistics.median(paired):.2f}x by round" if paired else ""
                against.append(f"{case} {m / fl:.2f}x of it{per} ({m / statistics.median(plain):.2f}x of plain)")
        if against:
            b.text("dropbehind until on disk against that floor (medians; then the median of each round's copy "
                   "against the same round's floor), and against the plain copy until on disk: "
                   + "; ".join(against) + ".\n")
        # The copier's own work in the same round: alone against the floor, and each shimmed
        # copy against the larger of the two.
        against_own_work(b, cases, own, floor_of)
        cpu_paragraph(b, cases, conts, own)
    else:
        failed = next((s["failed"] for s in b.samples if s["scenario"] == b.scenario and s["case"] == floor), "no run")
        b.text(f"Disk floor for the {mib} MiB copy not measured: scripts/copy-floor.sh failed ({failed}).\n")
