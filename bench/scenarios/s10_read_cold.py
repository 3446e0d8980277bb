"""Cold streaming reads (issue 2): peak memory-cgroup usage, cache left behind, wall time."""
import hashlib
from bench import EXAMPLES, Cgroup, cached_mib, contenders, drop_caches, make_file, Contender

TITLE = "Cold streaming read of a big file"
ORDER = 10


def run(b):
    mib = b.size(2048, 512)
    f = make_file(b.work / f"read-{mib}.bin", mib)
    cases = {
        "cat F >/dev/null": ["cat", str(f)],
        "sha256sum F (stdio)": ["sha256sum", str(f)],
        "python3, 1 MiB reads": ["python3", "-c", "import sys\nf=open(sys.argv[1],'rb',buffering=0)\nwhile f.read(1<<20): pass", str(f)],
        "dd bs=1M": ["dd", f"if={f}", "of=/dev/null", "bs=1M", "status=none"],
    }
    conts = contenders("no shim", "dropbehind", "dropbehind dontcache", "nocache") + [
        Contender("dd iflag=nocache", lambda case, cmd: cmd + ["iflag=nocache"] if case == "dd bs=1M" else None),
        Contender("RWF_DONTCACHE reference", lambda case, cmd: [str(EXAMPLES / "uncached"), "read", str(f)] if case == "cat F >/dev/null" else None),
    ]

    def one(case, c):
        cmd = c.wrap(case, cases[case])
        if cmd is None:
            return None
        drop_caches()
        with Cgroup() as cg:
            secs, _ = cg.run(cmd)
            peak = cg.peak_mib()
        return dict(seconds=secs, peak_mib=peak, left_mib=cached_mib(f))

    b.interleave(list(cases), conts, b.size(3, 1), one)
    b.table(
        f"Cold read of a {mib} MiB file, each run alone in a fresh memory cgroup",
        list(cases), conts,
        [("peak_mib", "peak cgroup MiB", "{:.0f}"), ("left_mib", "file cached after, MiB", "{:.1f}"), ("seconds", "seconds", "{:.2f}")],
        ratio_of="seconds",
    )
