"""Programs the preload can't reach (issue 15): Go's restic and rclone, fio with io_uring,
under the outside watcher (`dropbehind --`), against no shim and nocache."""
import json
import os
import shutil
import threading
import time
from subprocess import PIPE
from bench import Cgroup, Failed, cached_mib, drop_caches, have, run_checked, same_bytes

TITLE = "Programs the preload can't reach: the outside watcher"
ORDER = 90
PASSWORD = {"RESTIC_PASSWORD": "dropbehind-bench"}


def fio(name, f, mib, rw, *extra):
    return ["fio", f"--name={name}", "--ioengine=io_uring", "--bs=1M", f"--size={mib}M", f"--rw={rw}",
            f"--filename={f}", "--output-format=json", *extra]


class CachePeak:
    """The peak of a cgroup's page cache (memory.stat cache minus shmem), sampled every
    50 ms in a thread while the run lasts: the issue's measure."""

    def __init__(self, cg):
        self.path, self.peak, self.done = cg.path / "memory.stat", 0, threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def sample(self):
        try:
            st = dict(l.split() for l in self.path.read_text().splitlines())
            self.peak = max(self.peak, int(st["cache"]) - int(st.get("shmem", 0)))
        except (OSError, ValueError, KeyError):
            pass

    def loop(self):
        while not self.done.is_set():
            self.sample()
            self.done.wait(0.05)

    def stop(self):
        """The peak, with one last sample: pages stay charged to the cgroup after the
        program exits, so a run shorter than a sampling interval is seen too."""
        self.done.set()
        self.t.join()
        self.sample()
        return self.peak / (1 << 20)


def run(b):
    mib = b.size(2048, 512)
    src_dir, f = b.source_file(mib)
    repo = b.work / "watch-repo"
    dst = b.work / "watch-dst"
    out = b.work / "watch-out.fio"
    tools = {"restic": have("restic"), "rclone": have("rclone"), "fio": have("fio")}
    cases = {}
    if tools["restic"]:
        cases["restic backup"] = ["restic", "-r", str(repo), "backup", "-q", str(src_dir)]
    if tools["rclone"]:
        cases["rclone copy"] = ["rclone", "copy", str(src_dir), str(dst)]
    if tools["fio"]:
        cases["fio io_uring read"] = fio("r", f, mib, "read")
        cases["fio io_uring write"] = fio("w", out, mib, "write")
    # The same programs on (almost) no data: the page cache a run holds before its stream,
    # the program's own binary and libraries (rclone's is 54 MB, fio maps 64 libraries) read
    # in with readahead of up to read_ahead_kb around each fault.
    startup = {"restic backup": ["restic", "version"], "rclone copy": ["rclone", "version"],
               "fio io_uring read": fio("r", f, 1, "read"), "fio io_uring write": fio("w", out, 1, "write")}
    conts = b.contenders("no shim", "dropbehind", "nocache")

    def prepare(case):
        if case == "restic backup":
            shutil.rmtree(repo, ignore_errors=True)
            run_checked(["restic", "init", "-q", "-r", str(repo)], env=PASSWORD, expect_err=None)
        shutil.rmtree(dst, ignore_errors=True)
        if out.exists():
            out.unlink()

    def one(case, c):
        cmd = c.wrap(case, cases[case])
        if cmd is None:
            return None
        prepare(case)
        drop_caches()
        with Cgroup() as cg:
            sampler = CachePeak(cg)
            try:
                cg.run(c.wrap(case, startup[case]), env=dict(c.env, **PASSWORD), stdout=PIPE, expect_err=None)
            except Failed as e:
                raise Failed(f"on no data: {e}")
            finally:
                base_peak = sampler.stop()
        prepare(case)
        # A plain backup or copy takes the file's size twice in page cache.
        drop_caches(fault_in_mib=2 * mib + 256)
        with Cgroup() as cg:
            sampler = CachePeak(cg)
            try:
                secs, _ = cg.run(cmd, env=dict(c.env, **PASSWORD), stdout=PIPE, expect_err=None)
            finally:
                cache_peak = sampler.stop()
            peak = cg.peak_mib()
            # What the command left dirty, sync writes: the time until its output is on disk.
            t0 = time.monotonic()
            os.sync()
            synced = secs + time.monotonic() - t0
            src_left = cached_mib(f) if case != "fio io_uring write" else cached_mib(out)
        if case == "rclone copy":
            same_bytes(f, dst / f.name)
        if case == "fio io_uring write" and out.stat().st_size != mib << 20:
            raise Failed(f"fio wrote {out.stat().st_size} bytes")
        return dict(seconds=secs, synced=synced, peak_mib=peak, cache_peak=cache_peak, src_left=src_left,
                    base_peak=base_peak, above_base=cache_peak - base_peak)

    if cases:
        b.interleave(list(cases), conts, b.size(3, 1), one)
        b.table(
            f"A cold {mib} MiB file backed up, copied, read or written, each run alone in a fresh memory cgroup",
            list(cases), conts,
            [("cache_peak", "peak page cache MiB", "{:.0f}"),
             ("base_peak", "page cache of the program on no data, MiB", "{:.0f}"),
             ("above_base", "peak page cache above that, MiB", "{:.0f}"), ("peak_mib", "peak cgroup MiB", "{:.0f}"),
             ("src_left", "file cached after, MiB", "{:.1f}"),
             ("seconds", "seconds", "{:.2f}"), ("synced", "seconds until on disk (+ sync)", "{:.2f}")],
            ratio_of=["seconds", "synced"],
            note="restic 0.14 and rclone 1.60 are Go programs (their own syscalls), fio's io_uring requests never "
                 "pass through read or write: the preload sees none of it and `dropbehind --` watches them from "
                 "outside. nocache is a preload too. \"file cached after\" is the source (the output for fio write). "
                 "Plain runs return with what they wrote still dirty in memory; the sync column adds writing it out. "
                 "The page cache peak is the cgroup's memory.stat cache less shmem, sampled every 50 ms; \"on no data\" is "
                 "the same peak of `restic version`, `rclone version` or fio on 1 MiB, run the same way just before "
                 "(the program's binary and libraries, read in by readahead); the cgroup peak is "
                 "its memory.max_usage_in_bytes (page cache and the programs' own memory: restic's is about 150 MiB). "
                 "The backup is checked with `restic check --read-data` in shim-tests/t_watch.sh, not here; "
                 "rclone's copy is compared with its source.",
        )
        b.summary("watcher-cost", list(cases), "dropbehind", [("seconds", "by the command's clock"), ("synced", "until on disk")])
    for p in (dst, repo):
        shutil.rmtree(p, ignore_errors=True)
    if out.exists():
        out.unlink()
    if not tools["fio"]:
        return

    # Random reads over a file half cached before: throughput, and the cached half kept.
    rr = "fio io_uring randread, half cached"
    half = mib // 2

    def one_rr(case, c):
        cmd = c.wrap(case, fio("rr", f, mib, "randread", "--bs=4k", "--invalidate=0", "--runtime=5", "--time_based"))
        if cmd is None:
            return None
        drop_caches()
        run_checked(["dd", f"if={f}", "of=/dev/null", "bs=1M", f"count={half}", "status=none"])
        before = cached_mib(f)
        _, o = run_checked(cmd, env=c.env, stdout=PIPE, expect_err=None)
        try:
            job = json.loads(o[o.index(b"{"):])["jobs"][0]
        except (ValueError, KeyError, IndexError):
            raise Failed("fio printed no JSON")
        return dict(mib_s=job["read"]["bw_bytes"] / (1 << 20), iops=job["read"]["iops"], before=before)

    b.interleave([rr], conts, b.size(3, 1), one_rr)
    b.table(
        f"Random 4 KiB io_uring reads of a {mib} MiB file, its first half cached before, 5 s",
        [rr], conts,
        [("mib_s", "MiB/s", "{:.1f}"), ("iops", "IOPS", "{:.0f}"), ("before", "cached before, MiB", "{:.0f}")],
        ratio_of=["mib_s"],
        note="fio drops the file's cache itself when it closes it, watched or not: that the cached half stays "
             "while it runs is checked in shim-tests/t_watch.sh.",
    )
