"""Footprint over time: memory-cgroup usage every 50 ms during a big copy, one line per
contender, drawn as one plot."""
import json
from bench import EXAMPLES, MIB, Cgroup, Contender, Failed, drop_caches, run_checked, same_bytes

TITLE = "Memory-cgroup usage over time during a big copy"
ORDER = 40


def run(b):
    mib = b.size(2048, 1024)
    src_dir, f = b.source_file(mib)
    dst = b.work / "fp-dst"
    cp = ["cp", str(f), str(dst)]
    conts = b.contenders("no shim", "dropbehind", "nocache") + [
        Contender("dd iflag=nocache oflag=nocache", lambda case, cmd: ["dd", f"if={f}", f"of={dst}", "bs=1M", "iflag=nocache", "oflag=nocache", "status=none"]),
        Contender("RWF_DONTCACHE reference", lambda case, cmd: [str(EXAMPLES / "uncached"), "copy", str(f), str(dst)]),
    ]
    series = {}

    def one(case, c):
        if dst.exists():
            dst.unlink()
        drop_caches()
        samples, summary = b.work / "fp-samples.txt", b.work / "fp-summary.json"
        summary.unlink(missing_ok=True)
        with Cgroup() as cg:
            # The sampler stays outside: only the command it starts joins the cgroup (the
            # sampler's own executable pages would otherwise be charged too: +9 MiB).
            run_checked([str(EXAMPLES / "footprint"), "--cgroup", str(cg.path), "--interval-ms", "50",
                         "--out", str(samples), "--json", str(summary), "--", *c.wrap(case, cp)], env=c.env)
        res = json.loads(summary.read_text())
        if res["exit"] != 0:  # footprint itself exits 0 whatever the command's status
            raise Failed(f"exit status {res['exit']}")
        same_bytes(f, dst)
        pts = [tuple(map(int, l.split())) for l in samples.read_text().splitlines() if l.strip()]
        series[c.name] = [(t / 1000, u / MIB) for t, u in pts]
        return dict(seconds=res["seconds"], peak_mib=res["peak_bytes"] / MIB)

    b.interleave([f"cp of {mib} MiB"], conts, 1, one)
    b.table(f"Copy of a {mib} MiB file, sampled every 50 ms", [f"cp of {mib} MiB"], conts,
            [("peak_mib", "peak cgroup MiB", "{:.0f}"), ("seconds", "seconds", "{:.2f}")], ratio_of="seconds",
            note="The dd and RWF_DONTCACHE rows copy with their own program, not cp.")
    plt = b.pyplot()
    if plt:
        fig, ax = plt.subplots(figsize=(8, 4.5))
        for name, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=name)
        ax.set_yscale("symlog", linthresh=64)
        b.save_plot(fig, ax, "footprint.png", f"Copying {mib} MiB: page cache charged to the copier",
                    "seconds", "memory cgroup usage, MiB")
    if dst.exists():
        dst.unlink()
