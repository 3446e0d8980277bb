"""Overhead of the hooks where they must cost nothing: cached 4 KiB preads in a tight loop,
pipe reads, process start-up, random preads on a cold file."""
from subprocess import PIPE
from bench import EXAMPLES, Failed, drop_caches, make_file, parse_json, run_checked

TITLE = "Hot-path overhead"
ORDER = 60


def run(b):
    f = make_file(b.work / "overhead-64.bin", 64)
    cold_mib = b.size(4096, 1024)
    cold = make_file(b.work / f"random-{cold_mib}.bin", cold_mib)
    loop = str(EXAMPLES / "pread_loop")
    ops = b.size(2_000_000, 500_000)
    execs = b.size(500, 200)
    cases = {
        f"4 KiB cached preads x{ops}": [loop, "cached", str(f), "--ops", str(ops)],
        f"pipe write+read 4 KiB x{ops // 2}": [loop, "pipe", "--ops", str(ops // 2)],
        f"start-up of /bin/true x{execs}": None,
        f"random 4 KiB preads, cold {cold_mib} MiB file x20000": [loop, "random", str(cold), "--ops", "20000"],
    }
    conts = b.contenders("no shim", "dropbehind")

    def one(case, c):
        if cases[case] is None:
            env_pre = ["env", *(f"{k}={v}" for k, v in c.preload_env().items())]
            # A failed start stops the loop; ld.so's "cannot be preloaded" fails it on stderr.
            secs, _ = run_checked(["bash", "-c", f"for i in $(seq {execs}); do {' '.join(env_pre)} /bin/true || exit 1; done"])
            return dict(per_op=secs / execs * 1e6)
        if "cold" in case:
            drop_caches()
        _, out = run_checked(cases[case], env=c.preload_env(), stdout=PIPE)
        j = parse_json(out, "pread_loop")
        want = int(cases[case][cases[case].index("--ops") + 1])
        if j["ops"] != want:
            raise Failed(f"pread_loop did {j['ops']} operations of {want}")
        return dict(per_op=j["ns_per_op"] / 1000)

    # Cold random reads are noisy (a few 100 ms outliers in 2 s runs) and the criterion is
    # 1%: many more repetitions for them.
    cold_cases = [c for c in cases if "cold" in c]
    b.interleave([c for c in cases if c not in cold_cases], conts, b.size(7, 3), one)
    b.interleave(cold_cases, conts, b.size(21, 5), one)
    b.table("Hook overhead: time per operation, shim against no shim, interleaved", list(cases), conts,
            [("per_op", "us per op", "{:.3f}")], ratio_of="per_op",
            note="Start-up: one `env [LD_PRELOAD=...] /bin/true` per iteration, so the extra cost per start is the difference.")
