"""Trees of small files (issue 14): copies, archives and checksums of a directory tree,
page-cache peak sampled every 50 ms, cgroup peak, cache left, wall time and + sync."""
import os
import subprocess
import threading
import time
from pathlib import Path
from bench import MIB, Cgroup, DiskRequests, Failed, drop_caches, make_tree, run_checked, same_tree

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


def files_cached_mib(files):
    """MiB of these files in the page cache."""
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, files)], capture_output=True, text=True)
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


HOT_READER = """
import os, sys
paths = [os.path.join(d, f) for d, _, fs in os.walk(sys.argv[1]) for f in sorted(fs)]
total = 0
for _ in range(20):
    for p in sorted(paths):
        with open(p, "rb") as f:
            total += len(f.read())
print(total)
"""


def hot_files(b):
    """Small cached files read over and over (a build, an interpreter's modules): the shim
    must cost nothing and drop nothing. 2000 files of 4-64 KiB, read 20 times by one
    process; gcc -fsyntax-only on a source that includes many cached system headers."""
    root = b.work / "hot-small-2000"
    done = root.with_name(root.name + ".complete")
    if not done.exists():
        for i in range(2000):
            sub = root / f"d{i % 20:02}"
            sub.mkdir(parents=True, exist_ok=True)
            (sub / f"f{i:05}").write_bytes(os.urandom(4096 * (1 + (i * 7919) % 16)))
        done.write_text("")
    src = b.work / "hot-headers.c"
    headers = ["stdio.h", "stdlib.h", "string.h", "math.h", "errno.h", "fcntl.h", "unistd.h", "signal.h",
               "pthread.h", "sys/stat.h", "sys/types.h", "sys/mman.h", "sys/socket.h", "netinet/in.h",
               "arpa/inet.h", "netdb.h", "time.h", "ctype.h", "locale.h", "wchar.h", "stdint.h", "inttypes.h",
               "dirent.h", "poll.h", "sys/epoll.h", "sys/wait.h", "termios.h", "regex.h", "glob.h", "dlfcn.h"]
    src.write_text("".join(f"#include <{h}>\n" for h in headers) + "int main(void) { return 0; }\n")
    # What gcc reads: the headers and all they include (its dependency list).
    deps = subprocess.run(["gcc", "-M", str(src)], capture_output=True, text=True, check=True).stdout
    included = sorted({w for w in deps.replace("\\", " ").split() if w.endswith(".h")})
    watched = {"read 2000 cached files 20 times (python3)": lambda: tree_cached_mib(root),
               "gcc -fsyntax-only, 30 cached system headers": lambda: files_cached_mib(included)}
    cases = {
        "read 2000 cached files 20 times (python3)": ["python3", "-c", HOT_READER, str(root)],
        "gcc -fsyntax-only, 30 cached system headers": ["gcc", "-fsyntax-only", str(src)],
    }
    conts = b.contenders("no shim", "dropbehind")
    # Warm: every run below finds the files and headers cached.
    for cmd in cases.values():
        run_checked(cmd, stdout=subprocess.PIPE)

    def one(case, c):
        cmd = c.wrap(case, cases[case])
        if cmd is None:
            return None
        before = watched[case]()
        secs, _ = run_checked(cmd, env=c.env, stdout=subprocess.PIPE)
        return dict(seconds=secs, lost=before - watched[case]())

    b.interleave(list(cases), conts, b.size(11, 3), one)
    b.table(
        "Small cached files read again and again (2000 files of 4-64 KiB; system headers)",
        list(cases), conts,
        [("lost", "MiB of the files dropped by the run", "{:.1f}"), ("seconds", "seconds", "{:.3f}")],
        ratio_of=["seconds"],
        note="Every file is cached before each run (a build's headers, an interpreter's modules): the tree "
             "stream never starts, and nothing may be dropped.",
    )


def run(b):
    hot_files(b)
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
            # A plain copy takes the tree's size twice in page cache.
            drop_caches(fault_in_mib=2 * files * kib // 1024 + 256)
            requests = DiskRequests(b.work)
            requests.start()
            with Cgroup() as cg:
                with CacheSampler(cg) as s:
                    secs, _ = cg.run(cmd, env=c.env)
                t0 = time.monotonic()
                os.sync()
                synced = secs + time.monotonic() - t0
                writes = requests.stop()
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
                        src_left=src_left, dst_left=out_left, **({} if writes is None else {"writes": writes}))

        b.interleave(list(cases), conts, b.size(3, 1), one)
        clean()
        b.table(
            f"Tree of {files} files of {kib} KiB ({files * kib // 1024} MiB) in {dirs} directories, cold, "
            f"each run alone in a fresh memory cgroup",
            list(cases), conts,
            [("cache_peak", "page cache peak, MiB (50 ms samples)", "{:.0f}"), ("peak_mib", "peak cgroup MiB", "{:.0f}"),
             ("src_left", "source cached after, MiB", "{:.1f}"), ("dst_left", "result cached after, MiB", "{:.1f}"),
             ("seconds", "seconds", "{:.2f}"), ("synced", "seconds until on disk (+ sync)", "{:.2f}"),
             ("writes", "write requests to the disk, run + sync", "{:.0f}")],
            ratio_of=["seconds", "synced"],
            note="The cgroup's peak counts inodes and dentries too, the page cache peak only file pages. "
                 "tar xf reads the tree's archive (its source column is the archive). Every result is compared "
                 "with the tree (diff -r; the checksums with sha256sum -c). Write requests: what the disk completed "
                 "(/sys/class/block/DEV/stat), after the block layer's merges.",
        )
