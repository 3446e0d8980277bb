"""Seed 000 (2007 drop-behind thread): a working set warmed by two mmap scans must survive a
streaming read AND a streaming copy of a file twice the memory cgroup's size."""
import subprocess
from subprocess import DEVNULL, PIPE
from bench import EXAMPLES, MIB, Cgroup, Contender, DamonPaused, cached_mib, digest, drop_caches, make_file, make_tree, parse_json, same_bytes, same_tar_member, same_tree

TITLE = "Hot working set vs a big streaming read or copy (seed 000)"
ORDER = 30


def run(b):
    limit = b.size(1024, 512)
    ws_mib = b.size(375, 188)
    big_mib = 2 * limit
    ws = make_file(b.work / f"ws-{ws_mib}.bin", ws_mib)
    big_dir, big = b.source_file(big_mib, "hot-src")
    dst = b.work / "hot-dst"
    scan = [str(EXAMPLES / "mmap_scan"), str(ws)]
    # A tree of small files as big as the file (the tree scenario's 256 KiB one, s25).
    tree = make_tree(b.work / f"tree-{b.size(4000, 400)}x256k", b.size(4000, 400), 256, 40)

    # Each case: the command, what it must print, and the check of its copy (made after the
    # measurement, which it would disturb).
    def copied():
        same_bytes(big, dst)

    cases = {
        "cat (read)": (["sh", "-c", f'cat "{big}" >/dev/null'], None, None),
        "sha256sum (read)": (["sha256sum", str(big)], f"{digest(big, keep=True)}  {big}\n".encode(), None),
        "cp (copy)": (["cp", str(big), str(dst)], None, copied),
        "tar cf (copy)": (["tar", "cf", str(dst), "-C", str(big_dir), "F"], None, lambda: same_tar_member(big, dst, "F")),
        "rsync (copy)": (["rsync", str(big), str(dst)], None, copied),
        "python3 shutil.copyfile (copy)": (["python3", "-c", "import shutil,sys; shutil.copyfile(*sys.argv[1:])", str(big), str(dst)],
                                           None, copied),
        "cp -r (tree copy)": (["cp", "-r", str(tree), str(dst)], None, lambda: same_tree(tree, dst)),
        "rsync -a (tree copy)": (["rsync", "-a", f"{tree}/", f"{dst}/"], None, lambda: same_tree(tree, dst)),
        "tar cf (tree copy)": (["tar", "cf", str(dst), "-C", str(tree), "."], None, None),
    }
    if b.quick:
        cases = {k: v for k, v in cases.items() if k in ("cat (read)", "cp (copy)", "python3 shutil.copyfile (copy)", "cp -r (tree copy)")}
    # The control runs no aggressor, only a pause: a fresh scan of a cached set is slower after
    # a few idle seconds than right after warming (CPU caches), so re-scans compare to it.
    control = Contender("idle pause (control)", lambda case, cmd: ["sleep", "3"])
    conts = b.contenders("no shim", "dropbehind", "nocache") + [control]

    def scan_s(cg, *extra):
        _, out = cg.run(scan + list(extra), stdout=PIPE)
        j = parse_json(out, "mmap_scan")
        if j["bytes"] != ws_mib * MIB:
            raise RuntimeError(f"mmap_scan scanned {j['bytes']} bytes of {ws_mib * MIB}")
        return j["seconds"][0]

    def clean():
        subprocess.run(["rm", "-rf", str(dst)], check=True)

    def one(case, c):
        clean()
        drop_caches()
        cmd, out, check = cases[case]
        if c is control:
            out = check = None
        with Cgroup(limit * MIB) as cg:
            scan_s(cg, "--passes", "2")  # warm it, as the seed did, twice
            warm = scan_s(cg)  # then time a fresh process's scan of it
            before = cached_mib(ws)
            secs, _ = cg.run(c.wrap(case, cmd), env=c.env, stdout=PIPE if out else DEVNULL, expect_out=out)
            after = cached_mib(ws)
            rescan = scan_s(cg)
        if check:
            check()
        return dict(kept_pct=100 * after / before if before else 0, rescan_ratio=rescan / warm,
                    warm=warm, rescan=rescan, aggressor_s=secs)

    # Background reclaim by DAMON (if the machine runs it) would take pages of the idle
    # working set whatever the contender: it is paused while this scenario runs.
    with DamonPaused() as damon:
        b.interleave(list(cases), conts, b.size(2, 1), one)
    b.table(
        f"{ws_mib} MiB working set (two mmap scans) in a {limit} MiB memory cgroup, then a {big_mib} MiB file, "
        f"or a tree of {b.size(4000, 400)} files of 256 KiB, read or copied",
        list(cases), conts,
        [("kept_pct", "working set still cached, %", "{:.1f}"), ("warm", "warm scan, s", "{:.3f}"),
         ("rescan", "re-scan after, s", "{:.3f}"), ("rescan_ratio", "re-scan / warm", "{:.2f}"),
         ("aggressor_s", "read/copy, s", "{:.2f}")],
        note=("DAMON's background pageout was paused for these runs (it reclaims from idle warm sets). " if damon.paused else "")
             + "The control runs no read or copy: the set is warmed, left idle for 3 s, and re-scanned.",
    )
    clean()
