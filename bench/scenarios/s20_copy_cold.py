"""Cold copies (issue 3): every common copier, peak cgroup usage, cache left, wall time."""
import os
import time
from pathlib import Path
from bench import EXAMPLES, Cgroup, cached_mib, contenders, drop_caches, Contender, sh

TITLE = "Cold copy of a big file"
ORDER = 20


def run(b):
    mib = b.size(2048, 512)
    src_dir, f = b.source_file(mib)
    dst = b.work / "copy-dst"
    cases = {
        "cp": ["cp", str(f), str(dst)],
        "dd bs=1M": ["dd", f"if={f}", f"of={dst}", "bs=1M", "status=none"],
        "python3 shutil.copyfile": ["python3", "-c", "import shutil,sys; shutil.copyfile(*sys.argv[1:])", str(f), str(dst)],
        "cat F > G": ["sh", "-c", f'cat "{f}" > "{dst}"'],
        "tar cf": ["tar", "cf", str(dst), "-C", str(src_dir), "F"],
        "rsync": ["rsync", str(f), str(dst)],
    }
    conts = contenders("no shim", "dropbehind", "nocache") + [
        Contender("dd iflag=nocache oflag=nocache", lambda case, cmd: cmd + ["iflag=nocache", "oflag=nocache"] if case == "dd bs=1M" else None),
        Contender("RWF_DONTCACHE reference", lambda case, cmd: [str(EXAMPLES / "uncached"), "copy", str(f), str(dst)] if case == "cp" else None),
    ]

    def one(case, c):
        cmd = c.wrap(case, cases[case])
        if cmd is None:
            return None
        if dst.exists():
            dst.unlink()
        drop_caches()
        with Cgroup() as cg:
            secs, _ = cg.run(cmd)
            peak = cg.peak_mib()
        # A copy is done when its data is on disk: what the copier left dirty, sync writes.
        t0 = time.monotonic()
        os.sync()
        synced = secs + time.monotonic() - t0
        src_left, dst_left = cached_mib(f), cached_mib(dst)
        same = sh(["cmp", "-s", str(f), str(dst)]).returncode == 0 if case != "tar cf" else None
        os.sync()
        return dict(seconds=secs, synced=synced, peak_mib=peak, src_left=src_left, dst_left=dst_left, identical=same)

    b.interleave(list(cases), conts, b.size(3, 1), one)
    b.table(
        f"Cold copy of a {mib} MiB file, each run alone in a fresh memory cgroup",
        list(cases), conts,
        [("peak_mib", "peak cgroup MiB", "{:.0f}"), ("src_left", "source cached after, MiB", "{:.1f}"),
         ("dst_left", "copy cached after, MiB", "{:.1f}"), ("seconds", "seconds", "{:.2f}"),
         ("synced", "seconds until on disk (+ sync)", "{:.2f}"), ("identical", "byte-identical", "{}")],
        ratio_of=["seconds", "synced"],
        note="Plain copies return with the copy still dirty in memory; the sync column adds the time to write it out. "
             "Plain times vary a lot here: ext4 is mounted with `discard`, and deleting the previous 2 GiB copy stalls the next writer.",
    )
    if dst.exists():
        dst.unlink()
