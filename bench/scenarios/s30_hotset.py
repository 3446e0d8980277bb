"""Seed 000 (2007 drop-behind thread): a working set warmed by two mmap scans must survive a
streaming read AND a streaming copy of a file twice the memory cgroup's size."""
import json
from bench import EXAMPLES, MIB, Cgroup, Contender, DamonPaused, cached_mib, contenders, drop_caches, make_file

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
    cases = {
        "cat (read)": ["sh", "-c", f'cat "{big}" >/dev/null'],
        "sha256sum (read)": ["sha256sum", str(big)],
        "cp (copy)": ["cp", str(big), str(dst)],
        "tar cf (copy)": ["tar", "cf", str(dst), "-C", str(big_dir), "F"],
        "rsync (copy)": ["rsync", str(big), str(dst)],
        "python3 shutil.copyfile (copy)": ["python3", "-c", "import shutil,sys; shutil.copyfile(*sys.argv[1:])", str(big), str(dst)],
    }
    if b.quick:
        cases = {k: v for k, v in cases.items() if k in ("cat (read)", "cp (copy)", "python3 shutil.copyfile (copy)")}
    # The control runs no aggressor, only a pause: a fresh scan of a cached set is slower after
    # a few idle seconds than right after warming (CPU caches), so re-scans compare to it.
    conts = contenders("no shim", "dropbehind", "nocache") + [
        Contender("idle pause (control)", lambda case, cmd: ["sleep", "3"]),
    ]

    def one(case, c):
        if dst.exists():
            dst.unlink()
        drop_caches()
        with Cgroup(limit * MIB) as cg:
            cg.run(scan + ["--passes", "2"])  # warm it, as the seed did, twice
            _, out = cg.run(scan, stdout=-1)  # then time a fresh process's scan of it
            warm = json.loads(out)["seconds"][0]
            before = cached_mib(ws)
            secs, _ = cg.run(c.wrap(case, cases[case]))
            after = cached_mib(ws)
            _, out = cg.run(scan, stdout=-1)
            rescan = json.loads(out)["seconds"][0]
        return dict(kept_pct=100 * after / before if before else 0, rescan_ratio=rescan / warm,
                    warm=warm, rescan=rescan, aggressor_s=secs)

    # Background reclaim by DAMON (if the machine runs it) would take pages of the idle
    # working set whatever the contender: it is paused while this scenario runs.
    with DamonPaused() as damon:
        b.interleave(list(cases), conts, b.size(2, 1), one)
    b.table(
        f"{ws_mib} MiB working set (two mmap scans) in a {limit} MiB memory cgroup, then a {big_mib} MiB file read or copied",
        list(cases), conts,
        [("kept_pct", "working set still cached, %", "{:.1f}"), ("warm", "warm scan, s", "{:.3f}"),
         ("rescan", "re-scan after, s", "{:.3f}"), ("rescan_ratio", "re-scan / warm", "{:.2f}"),
         ("aggressor_s", "read/copy, s", "{:.2f}")],
        note=("DAMON's background pageout was paused for these runs (it reclaims from idle warm sets). " if damon.paused else "")
             + "The control runs no read or copy: the set is warmed, left idle for 3 s, and re-scanned.",
    )
    if dst.exists():
        dst.unlink()
