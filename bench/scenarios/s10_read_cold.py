"""Cold streaming reads (issue 2): peak memory-cgroup usage, cache left behind, wall time."""
from subprocess import DEVNULL, PIPE
from bench import EXAMPLES, MIB, Cgroup, Contender, cached_mib, digest, drop_caches, make_file, parse_json, Failed

TITLE = "Cold streaming read of a big file"
ORDER = 10


def run(b):
    mib = b.size(2048, 512)
    f = make_file(b.work / f"read-{mib}.bin", mib)
    # Each case with what a correct run prints (stdout, stderr): a reader that stopped early
    # or printed a warning fails. dd counts its records on stderr (status=noxfer: no timing).
    records = f"{mib}+0 records in\n{mib}+0 records out\n".encode()
    cases = {
        "cat F >/dev/null": (["cat", str(f)], None, b""),
        "sha256sum F (stdio)": (["sha256sum", str(f)], f"{digest(f, keep=True)}  {f}\n".encode(), b""),
        "python3, 1 MiB reads": (["python3", "-c", "import sys\nf=open(sys.argv[1],'rb',buffering=0)\nn=0\n"
                                  "while b:=f.read(1<<20): n+=len(b)\nprint(n)", str(f)], f"{mib * MIB}\n".encode(), b""),
        "dd bs=1M": (["dd", f"if={f}", "of=/dev/null", "bs=1M", "status=noxfer"], None, records),
    }
    # The reader's own files, read before each run (see bench.warm_programs).
    warm = {
        "cat F >/dev/null": [["cat", "--version"]],
        "sha256sum F (stdio)": [["sha256sum", "--version"]],
        "python3, 1 MiB reads": [["python3", "-c", "import sys"]],
        "dd bs=1M": [["dd", "--version"]],
    }
    conts = b.contenders("no shim", "dropbehind", "dropbehind dontcache", "nocache") + [
        Contender("dd iflag=nocache", lambda case, cmd: cmd + ["iflag=nocache"] if case == "dd bs=1M" else None),
        Contender("RWF_DONTCACHE reference", lambda case, cmd: [str(EXAMPLES / "uncached"), "read", str(f)] if case == "cat F >/dev/null" else None,
                  warm=[[str(EXAMPLES / "uncached"), "--help"]]),
    ]

    def one(case, c):
        plain, out, err = cases[case]
        cmd = c.wrap(case, plain)
        if cmd is None:
            return None
        reference = cmd[0] == str(EXAMPLES / "uncached")
        drop_caches()
        c.warm_up(warm[case])
        with Cgroup() as cg:
            secs, got = cg.run(cmd, env=c.env, stdout=PIPE if out or reference else DEVNULL,
                               expect_out=None if reference else out, expect_err=err)
            peak = cg.peak_mib()
            left = cached_mib(f)
        if reference and (n := parse_json(got, "uncached")["bytes"]) != mib * MIB:
            raise Failed(f"uncached read {n} bytes of {mib * MIB}")
        return dict(seconds=secs, peak_mib=peak, left_mib=left)

    b.interleave(list(cases), conts, b.size(3, 1), one)
    b.table(
        f"Cold read of a {mib} MiB file, each run alone in a fresh memory cgroup",
        list(cases), conts,
        [("peak_mib", "peak cgroup MiB", "{:.0f}"), ("left_mib", "file cached after, MiB", "{:.1f}"), ("seconds", "seconds", "{:.2f}")],
        ratio_of="seconds",
    )
