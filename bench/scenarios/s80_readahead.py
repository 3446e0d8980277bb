"""Readahead ahead and the mmap policy (seeds 001 and 003): cold sequential reads and mmap
scans on the slow-disk fixture (128 KiB device readahead, 2 ms per request), the stride-100
load over a 1 TB sparse file through a mapping and by pread, and a sequential mmap scan on
the local disk."""
import os
import subprocess
from pathlib import Path
from subprocess import PIPE
from bench import EXAMPLES, MIB, ROOT, Contender, Failed, cached_mib, drop_caches, make_file, parse_json, read_ahead_kb, read_stats, run_checked, sh

TITLE = "Readahead ahead and mmap policy (seeds 001, 003)"
ORDER = 80

SLOWDISK = str(ROOT / "scripts" / "slowdisk.sh")


def device_reads(dev):
    f = Path(f"/sys/block/{dev}/stat").read_text().split()
    return int(f[0]), int(f[2]) * 512


def run_measured(cmd, env, dev=None, expect_err=b""):
    """Runs cmd cold, checked; returns seconds, average device read KiB and reads (when dev),
    and stdout."""
    drop_caches()
    r0 = device_reads(dev) if dev else None
    secs, out = run_checked(cmd, env=env, stdout=PIPE, expect_err=expect_err)
    m = dict(seconds=secs)
    if dev:
        r1 = device_reads(dev)
        n = r1[0] - r0[0]
        m["read_kib"] = (r1[1] - r0[1]) / 1024 / n if n else 0.0
        m["reads"] = n
    return m, out


def shim_env(c, stats):
    """The contender's variables; under the shim, its exit report goes to `stats`."""
    stats.unlink(missing_ok=True)
    return c.preload_env(DROPBEHIND_STATS=str(stats)) if c.preload else {}


def run(b):
    slow_cases, local_cases = [], []
    shims = b.contenders("no shim", "dropbehind")
    big_ra = Contender("no shim, read_ahead_kb 8192 (reference)")
    madv = Contender("MADV_RANDOM by hand (reference)")
    reps = b.size(3, 1)
    stats = b.work / "s80-stats.txt"

    if sh([SLOWDISK, "check"], capture_output=True).returncode != 0:
        b.text("### Readahead on the slow disk\n\nSkipped: the slow-disk fixture needs root, nbdkit and nbdfuse.\n")
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
        ra = ra_file.read_text().strip()
        f = make_file(Path(mnt) / "f", mib)
        # dd counts its records on stderr (status=noxfer: no timing): a short read fails.
        cmds = {
            f"dd bs=4K, cold {mib} MiB": (["dd", f"if={f}", "of=/dev/null", "bs=4K", "status=noxfer"], mib * 256),
            f"dd bs=128K, cold {mib} MiB": (["dd", f"if={f}", "of=/dev/null", "bs=128K", "status=noxfer"], mib * 8),
            f"mmap scan (seed 001), cold {mib} MiB": ([str(EXAMPLES / "mmap_scan"), str(f)], None),
        }

        def one(case, c):
            cmd, records = cmds[case]
            if c is big_ra:
                ra_file.write_text("8192")
            try:
                m, out = run_measured(cmd, shim_env(c, stats), dev,
                                      f"{records}+0 records in\n{records}+0 records out\n".encode() if records else b"")
            finally:
                ra_file.write_text(ra)
            if not records:
                j = parse_json(out, "mmap_scan")
                if j["bytes"] != mib * MIB:
                    raise Failed(f"mmap_scan scanned {j['bytes']} bytes of {mib * MIB}")
                m["majflt"] = j["majflt"]
            if c.preload:
                # The device's readahead is small here: a sequential read the shim did not
                # prefetch for would mean it did not act.
                m["prefetch_batches"] = read_stats(stats)["prefetch_batches"]
                if not m["prefetch_batches"]:
                    raise Failed("no prefetch on a sequential cold read")
            m["cached_after"] = cached_mib(f)
            return m

        slow_cases = list(cmds)
        b.interleave(slow_cases, shims + [big_ra], reps, one)
        b.table(f"Cold sequential reads on the slow disk ({mib} MiB file)", slow_cases, shims + [big_ra],
                [("seconds", "seconds", "{:.2f}"), ("read_kib", "avg device read KiB", "{:.0f}"),
                 ("reads", "device reads", "{:.0f}"), ("majflt", "major faults", "{:.0f}"),
                 ("cached_after", "MiB cached after", "{:.1f}"), ("prefetch_batches", "prefetch batches", "{:.0f}")],
                ratio_of=["seconds", "read_kib"],
                note="Slow disk: nbdkit memory + delay filter (2 ms per request), nbdfuse, loop device with "
                     f"direct I/O, read_ahead_kb {ra} (the reference row raises it to 8192 for its run only).")
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
    local["mmap scan, cold 1024 MiB, local disk"] = [str(EXAMPLES / "mmap_scan"), str(seq)]

    def one_local(case, c):
        cmd = list(local[case])
        if c is madv:
            if "stride-100 mmap" not in case:
                return None
            cmd.insert(1, "--madv-random")
        m, out = run_measured(cmd, shim_env(c, stats))
        j = parse_json(out, os.path.basename(cmd[0]))
        done, want = (j["bytes"], 1024 * MIB) if "scan" in case else (j["pages"], touches)
        if done != want:
            raise Failed(f"{os.path.basename(cmd[0])} did {done} of {want}")
        # The load's own time (the program measures it), without process start-up.
        m["seconds"] = sum(j["seconds"]) if isinstance(j["seconds"], list) else j["seconds"]
        m["majflt"] = j.get("majflt")
        m["cached_after"] = cached_mib(seq if "scan" in case else sparse)
        if c.preload:
            st = read_stats(stats)
            m["prefetch_batches"], m["made_random"] = st["prefetch_batches"], st["maps_random"]
        drop_caches()
        return m

    local_cases = list(local)
    # The pread load takes 0.08 s: many more repetitions to see a 1% difference in the noise.
    pread_case = [c for c in local_cases if "pread" in c]
    others = [c for c in local_cases if c not in pread_case]
    b.interleave(others, shims + [madv], b.size(5, 2), one_local)
    b.interleave(pread_case, shims, b.size(31, 9), one_local)
    disk = subprocess.run(["findmnt", "-n", "-o", "SOURCE", "--target", str(b.work)], capture_output=True, text=True).stdout.strip()
    b.table("Seed 003 (sparse stride-100) and a sequential mmap scan, local disk", local_cases, shims + [madv],
            [("seconds", "seconds", "{:.3f}"), ("majflt", "major faults", "{:.0f}"),
             ("cached_after", "MiB cached after", "{:.0f}"),
             ("prefetch_batches", "prefetch batches", "{:.0f}"), ("made_random", "mappings given MADV_RANDOM", "{:.0f}")],
            ratio_of="seconds",
            note=f"Seconds: the load as timed by the program itself (start-up excluded). The local disk ({disk}) had "
                 f"read_ahead_kb {read_ahead_kb(disk)} for this run: each fault on the sparse file reads that much ahead, holes included.")
