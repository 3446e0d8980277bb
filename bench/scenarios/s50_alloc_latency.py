"""Seed 002 (2011 extra_free_kbytes thread): three background `dd` writers stream to disk
while a foreground program allocates a burst of memory in the same memory cgroup. Worst and
99th-percentile first-touch latency, cgroup limit hits (failcnt), direct-reclaim stalls, and
what the foreground's quiet costs the writers: their time until everything is on disk."""
import statistics
import subprocess
import time
from subprocess import DEVNULL, PIPE
from bench import (EXAMPLES, MIB, Cgroup, Contender, Failed, check_exit, drop_caches, parse_json,
                   reporting_held_back, vmstat)

TITLE = "Foreground allocation latency under background streaming writers (seed 002)"
ORDER = 50


def run(b):
    limit = b.size(1536, 1024)
    writer_mib = b.size(4096, 1536)
    burst = b.size(640, 320)
    files = [b.work / f"writer{i}.bin" for i in range(3)]
    conts = b.contenders("no shim", "dropbehind", "nocache") + [
        # The kernel's own answer: the same writes with pwritev2(RWF_DONTCACHE), no shim.
        Contender("RWF_DONTCACHE reference",
                  lambda case, cmd: [str(EXAMPLES / "uncached"), "write", cmd[2][len("of="):], str(writer_mib)]),
    ]
    # The machine's own floor, in the same rounds: the burst with no writer beside it. A
    # guest's first touch of a page can fault at the host too (free page reporting,
    # bench/results/vm-memory.md), and on some days that alone takes milliseconds.
    alone = Contender("burst alone, no writers")
    # And what the CPU scheduler alone gives it: three busy processes that write nothing
    # (dd from /dev/zero to /dev/null, stopped after the burst). With three runnable
    # writers on two CPUs, the burst waits out their time slices (HZ=250 here) whatever
    # they write, bench/results/vm-memory.md.
    hogs = Contender("burst beside three CPU hogs, no writes")
    conts += [alone, hogs]
    hists = {}

    def one(case, c):
        for f in files:
            f.unlink(missing_ok=True)
        drop_caches()
        before = vmstat()
        with Cgroup(limit * MIB) as cg:
            t0 = time.monotonic()
            if c is alone:
                cmds = []
            elif c is hogs:
                cmds = [["dd", "if=/dev/zero", "of=/dev/null", "bs=1M", "status=none"] for _ in files]
            else:
                cmds = [c.wrap(case, ["dd", "if=/dev/zero", f"of={f}", "bs=1M", f"count={writer_mib}", "status=none"])
                        for f in files]
            writers = [cg.popen(cmd, env=c.env, stdout=DEVNULL, stderr=PIPE) for cmd in cmds]
            try:
                time.sleep(3)
                fails0 = cg.read("memory.failcnt")
                _, out = cg.run([str(EXAMPLES / "alloc_burst"), str(burst)], stdout=PIPE)
                fails = cg.read("memory.failcnt") - fails0
            finally:
                if c is hogs:  # they never end on their own
                    for w in writers:
                        w.terminate()
                ends = [(w.wait(), w.stderr.read()) for w in writers]
            done = time.monotonic() - t0
            subprocess.run(["sync"], check=True)
            on_disk = time.monotonic() - t0
        for code, err in ends if c is not hogs else []:
            check_exit(code, err)
        for f in files if c not in (alone, hogs) else []:
            if f.stat().st_size != writer_mib * MIB:
                raise Failed(f"{f.name} has {f.stat().st_size} bytes, not {writer_mib} MiB")
        after = vmstat()
        res = parse_json(out, "alloc_burst")
        hists.setdefault(c.name, res["hist"])
        stalls = sum(after[k] - before.get(k, 0) for k in after if k.startswith("allocstall"))
        direct = after.get("pgscan_direct", 0) - before.get("pgscan_direct", 0)
        for f in files:
            f.unlink(missing_ok=True)
        m = dict(worst_ms=res["worst_us"] / 1000, p99_us=res["p99_us"], failcnt=fails, allocstall=stalls,
                 pgscan_direct=direct)
        return m if c in (alone, hogs) else dict(m, seconds=done, seconds_sync=on_disk)

    case = f"3 x dd of {writer_mib} MiB, {burst} MiB burst"
    with reporting_held_back() as held:
        b.interleave([case], conts, b.size(5, 1), one)
    b.table(
        f"{burst} MiB allocation burst after 3 s, three `dd` writers of {writer_mib} MiB each, all in one {limit} MiB memory cgroup",
        [case], conts,
        [("worst_ms", "worst first-touch, ms", "{:.2f}"), ("p99_us", "p99, us", "{:.1f}"),
         ("failcnt", "cgroup limit hits during burst", "{:.0f}"), ("allocstall", "allocstall (global)", "{:.0f}"),
         ("pgscan_direct", "pgscan_direct (global)", "{:.0f}"),
         ("seconds", "writers' seconds", "{:.2f}"), ("seconds_sync", "writers' seconds until on disk (+ sync)", "{:.2f}")],
        ratio_of=["worst_ms", "seconds_sync"],
        note="The writers run under each contender (the RWF_DONTCACHE reference writes the same zeros with "
             "pwritev2(RWF_DONTCACHE), 1 MiB at a time, no shim); the burst program always runs plain. "
             "Seconds count from the writers' start to their end, and to the end of a `sync` after them. "
             "The last two rows run the burst with no writer beside it, and beside three processes that only "
             "use the CPU, in the same rounds: what this machine gives a first touch at all on this day, and "
             "what the scheduler alone gives it with three busy tasks on its two CPUs."
             + (" While it ran, memory freed was reported to the host only after 100 s (page_reporting.min_free_ms), "
                "so that fewer first touches wait for the host to fault a page in again." if held else ""),
    )
    worst = {c.name: statistics.median(r["worst_ms"] for r in b.rows(case, c.name)) for c in conts if b.rows(case, c.name)}
    if "no shim" in worst and "dropbehind" in worst:
        floor = "".join(f"; {what} {worst[c.name]:.2f} ms" for c, what in
                        ((alone, "the burst alone"), (hogs, "beside three CPU hogs")) if c.name in worst)
        b.text(f"Worst first-touch latency, medians: dropbehind {worst['dropbehind']:.2f} ms against no shim's "
               f"{worst['no shim']:.2f} ({worst['no shim'] / worst['dropbehind']:.1f} times less){floor}.\n")
    plt = b.pyplot()
    if plt:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for name, hist in hists.items():
            ax.step([h[0] for h in hist], [h[1] for h in hist], where="post", label=name)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        b.save_plot(fig, ax, "alloc_latency.png", f"{burst} MiB burst next to three streaming writers",
                    "first-touch latency, us (log2 buckets, upper bound)", "pages")
