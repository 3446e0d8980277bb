"""Readahead ahead and the mmap policy (seeds 001 and 003): cold sequential reads and mmap
scans on the slow-disk fixture (128 KiB device readahead, 2 ms per request), the stride-100
load over a 1 TB sparse file through a mapping and by pread, and a sequential mmap scan on
the local disk."""
import json
import os
import subprocess
import time
from pathlib import Path
from bench import EXAMPLES, LIB, MIB, ROOT, Contender, cached_mib, drop_caches, make_file, sh

TITLE = "Readahead ahead and mmap policy (seeds 001, 003)"
ORDER = 80

SLOWDISK = str(ROOT / "scripts" / "slowdisk.sh")


def device_reads(dev):
    f = Path(f"/sys/block/{dev}/stat").read_text().split()
    return int(f[0]), int(f[2]) * 512


def stats_env(path):
    return {"LD_PRELOAD": str(LIB), "DROPBEHIND_STATS": str(path)}


def run_measured(cmd, env_extra, dev=None):
    """Runs cmd cold; returns seconds, average device read KiB (when dev), stdout."""
    drop_caches()
    env = dict(os.environ, **env_extra)
    r0 = device_reads(dev) if dev else None
    t0 = time.monotonic()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    secs = time.monotonic() - t0
    m = dict(seconds=secs)
    if dev:
        r1 = device_reads(dev)
        n = r1[0] - r0[0]
        m["read_kib"] = (r1[1] - r0[1]) / 1024 / n if n else 0.0
        m["reads"] = n
    return m, out


def run(b):
    slow_cases, local_cases = [], []
    no_shim = Contender("no shim", None)
    ours = Contender("dropbehind", None)
    big_ra = Contender("no shim, read_ahead_kb 8192 (reference)", None)
    madv = Contender("MADV_RANDOM by hand (reference)", None)
    env_of = {"no shim": {}, "dropbehind": {"LD_PRELOAD": str(LIB)}, big_ra.name: {}, madv.name: {}}
    reps = b.size(3, 1)

    if sh([SLOWDISK, "check"], capture_output=True).returncode != 0:
        b.sections.append("### Readahead on the slow disk\n\nSkipped: the slow-disk fixture needs root, nbdkit and nbdfuse.\n")
    else:
        mib = b.size(1024, 256)
        sd = b.work / "slow-ra"
        sh([SLOWDISK, "down", str(sd)], capture_output=True)
        up = sh([SLOWDISK, "up", str(sd), "--fs", "ext4", "--size", "3G", "--ra-kb", "128"],
                capture_output=True, text=True, check=True)
        mnt = up.stdout.strip().splitlines()[-1]
        src = subprocess.run(["findmnt", "-n", "-o", "SOURCE", mnt], capture_output=True, text=True).stdout.strip()
        dev = os.path.basename(src)
        ra_file = Path(f"/sys/block/{dev}/queue/read_ahead_kb")
        f = make_file(Path(mnt) / "f", mib)
        cmds = {
            f"dd bs=4K, cold {mib} MiB": ["dd", f"if={f}", "of=/dev/null", "bs=4K", "status=none"],
            f"dd bs=128K, cold {mib} MiB": ["dd", f"if={f}", "of=/dev/null", "bs=128K", "status=none"],
            f"mmap scan (seed 001), cold {mib} MiB": [str(EXAMPLES / "mmap_scan"), str(f)],
        }

        def one(case, c):
            if c.name == big_ra.name:
                ra_file.write_text("8192")
            try:
                m, out = run_measured(cmds[case], env_of[c.name], dev)
            finally:
                ra_file.write_text("128")
            if "mmap" in case:
                m["majflt"] = json.loads(out)["majflt"]
            m["cached_after"] = cached_mib(f)
            return m

        slow_cases = list(cmds)
        b.interleave(slow_cases, [no_shim, ours, big_ra], reps, one)
        b.table(f"Cold sequential reads on the slow disk ({mib} MiB file)", slow_cases, [no_shim, ours, big_ra],
                [("seconds", "seconds", "{:.2f}"), ("read_kib", "avg device read KiB", "{:.0f}"),
                 ("reads", "device reads", "{:.0f}"), ("majflt", "major faults", "{:.0f}"),
                 ("cached_after", "MiB cached after", "{:.1f}")],
                ratio_of=["seconds", "read_kib"],
                note="Slow disk: nbdkit memory + delay filter (2 ms per request), nbdfuse, loop device with "
                     "direct I/O, read_ahead_kb 128 (the reference row raises it to 8192 for its run only).")
        sh([SLOWDISK, "down", str(sd)], capture_output=True)

    # Seed 003 on the local disk: every 100th page of a 1 TB sparse file.
    sparse = b.work / "sparse-1T"
    if not sparse.exists():
        sh(["dd", "if=/dev/zero", f"of={sparse}", "bs=1M", "count=1", "seek=1024000", "status=none"], check=True)
    touches = b.size(20000, 5000)
    stride = str(EXAMPLES / "stride_read")
    local = {
        f"stride-100 mmap, 1 TB sparse, {touches} pages": [stride, "--stride-pages", "100", "--count", str(touches), str(sparse)],
        f"stride-100 pread, 1 TB sparse, {touches} pages": [stride, "--stride-pages", "100", "--count", str(touches),
                                                           "--mode", "pread", str(sparse)],
    }
    seq = make_file(b.work / "mmap-seq-1024.bin", 1024)
    local[f"mmap scan, cold 1024 MiB, local disk"] = [str(EXAMPLES / "mmap_scan"), str(seq)]
    stats = b.work / "s80-stats.txt"

    def one_local(case, c):
        cmd = list(local[case])
        if c.name == madv.name:
            if "stride-100 mmap" not in case:
                return None
            cmd.insert(1, "--madv-random")
        env = dict(env_of[c.name])
        if c.name == "dropbehind":
            stats.unlink(missing_ok=True)
            env = stats_env(stats)
        m, out = run_measured(cmd, env)
        j = json.loads(out)
        # The load's own time (the program measures it), without process start-up.
        m["seconds"] = sum(j["seconds"]) if isinstance(j["seconds"], list) else j["seconds"]
        m["majflt"] = j.get("majflt")
        target = seq if "scan" in case else sparse
        m["cached_after"] = cached_mib(target)
        if c.name == "dropbehind" and stats.exists():
            rep = stats.read_text()
            m["prefetch_batches"] = int(rep.split("prefetched")[1].split("(")[1].split()[0])
            m["made_random"] = int(rep.split("sequential, ")[1].split()[0])
        drop_caches()
        return m

    local_cases = list(local)
    # The pread load takes 0.08 s: many more repetitions to see a 1% difference in the noise.
    pread_case = [c for c in local_cases if "pread" in c]
    others = [c for c in local_cases if c not in pread_case]
    b.interleave(others, [no_shim, ours, madv], b.size(5, 2), one_local)
    b.interleave(pread_case, [no_shim, ours], b.size(31, 9), one_local)
    b.table("Seed 003 (sparse stride-100) and a sequential mmap scan, local disk", local_cases, [no_shim, ours, madv],
            [("seconds", "seconds", "{:.3f}"), ("majflt", "major faults", "{:.0f}"),
             ("cached_after", "MiB cached after", "{:.0f}"),
             ("prefetch_batches", "prefetch batches", "{:.0f}"), ("made_random", "mappings given MADV_RANDOM", "{:.0f}")],
            ratio_of="seconds",
            note="Seconds: the load as timed by the program itself (start-up excluded). vda here has "
                 "read_ahead_kb 8192: every fault on the sparse file reads megabytes of holes ahead.")
