"""Trees of small files (issue 14): copies, archives and checksums of a directory tree,
page-cache peak sampled every 50 ms, cgroup peak, cache left, wall time and + sync."""
import os
import subprocess
import threading
import time
from pathlib import Path
from bench import MIB, Cgroup, Failed, drop_caches, make_tree, run_checked, same_tree

TITLE = "Trees of small files"
ORDER = 25


def tree_cached_mib(root):
    """MiB of the regular files below root in the page cache (fincore-style, by cachestat)."""
    if not Path(root).exists():
        return 0.0
    out = subprocess.run(["find", str(root), "-type", "f", "-exec", "fincore", "-b", "-n", "-o", "RES", "{}", "+"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise Failed(f"fincore: {out.stderr.strip()[-200:]}")
    return sum(int(x) for x in out.stdout.split()) / MIB


class CacheSampler:
    """Samples a cgroup's page cache (memory.stat "cache") every 50 ms; `peak` in MiB."""

    def __init__(self, cg):
        self.cg, self.peak, self.stop = cg, 0, threading.Event()
        self.t = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        stat = self.cg.path / "memory.stat"
        while not self.stop.is_set():
            for line in stat.read_text().splitlines():
                if line.startswith("cache "):
                    self.peak = max(self.peak, int(line.split()[1]))
                    break
            time.sleep(0.05)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.t.join()


def run(b):
    trees = {
        "256 KiB files": (b.size(4000, 400), 256, 40),
        "8 KiB files": (b.size(50000, 5000), 8, 100),
    }
    for label, (files, kib, dirs) in trees.items():
        src = make_tree(b.work / f"tree-{files}x{kib}k", files, kib, dirs)
        archive = b.work / f"tree-{files}x{kib}k.tar"
        if not archive.exists():
            run_checked(["tar", "cf", str(archive), "-C", str(src), "."])
        dst = b.work / "tree-dst"
        sums = b.work / "tree-sums"
        # Case names carry the tree: the report groups samples by case.
        of = f" ({kib} KiB files)"
        cases = {
            "cp -r" + of: ["cp", "-r", str(src), str(dst)],
            "rsync -a" + of: ["rsync", "-a", f"{src}/", f"{dst}/"],
            "tar cf" + of: ["tar", "cf", f"{dst}.tar", "-C", str(src), "."],
            "tar xf" + of: ["sh", "-c", f'mkdir "{dst}" && tar xf "{archive}" -C "{dst}"'],
            "find, xargs sha256sum" + of: ["sh", "-c", f'cd "{src}" && find . -type f -print0 | sort -z | xargs -0 sha256sum > "{sums}"'],
            "python3 shutil.copytree" + of: ["python3", "-c", "import shutil,sys; shutil.copytree(*sys.argv[1:])", str(src), str(dst)],
        }
        conts = b.contenders("no shim", "dropbehind", "nocache")

        def clean():
            subprocess.run(["rm", "-rf", str(dst), f"{dst}.tar", str(sums)], check=True)
            os.sync()

        def one(case, c):
            cmd = c.wrap(case, cases[case])
            if cmd is None:
                return None
            clean()
            drop_caches()
            with Cgroup() as cg:
                with CacheSampler(cg) as s:
                    secs, _ = cg.run(cmd, env=c.env)
                t0 = time.monotonic()
                os.sync()
                synced = secs + time.monotonic() - t0
                kind = case.removesuffix(of)
                src_left = tree_cached_mib(archive) if kind == "tar xf" else tree_cached_mib(src)
                out = {"tar cf": Path(f"{dst}.tar"), "find, xargs sha256sum": sums}.get(kind, dst)
                out_left = tree_cached_mib(out)
                peak = cg.peak_mib()
            if kind == "tar cf":
                run_checked(["sh", "-c", f'mkdir "{dst}" && tar xf "{dst}.tar" -C "{dst}"'])
                same_tree(src, dst)
            elif kind == "find, xargs sha256sum":
                run_checked(["sh", "-c", f'cd "{src}" && sha256sum --quiet -c "{sums}"'])
            else:
                same_tree(src, dst)
            return dict(seconds=secs, synced=synced, cache_peak=s.peak / MIB, peak_mib=peak,
                        src_left=src_left, dst_left=out_left)

        b.interleave(list(cases), conts, b.size(3, 1), one)
        clean()
        b.table(
            f"Tree of {files} files of {kib} KiB ({files * kib // 1024} MiB) in {dirs} directories, cold, "
            f"each run alone in a fresh memory cgroup",
            list(cases), conts,
            [("cache_peak", "page cache peak, MiB (50 ms samples)", "{:.0f}"), ("peak_mib", "peak cgroup MiB", "{:.0f}"),
             ("src_left", "source cached after, MiB", "{:.1f}"), ("dst_left", "result cached after, MiB", "{:.1f}"),
             ("seconds", "seconds", "{:.2f}"), ("synced", "seconds until on disk (+ sync)", "{:.2f}")],
            ratio_of=["seconds", "synced"],
            note="The cgroup's peak counts inodes and dentries too, the page cache peak only file pages. "
                 "tar xf reads the tree's archive (its source column is the archive). Every result is compared "
                 "with the tree (diff -r; the checksums with sha256sum -c).",
        )
