"""Seed 004 (2014 dirreadahead thread): cold `ls -l` and friends on big aged directories, on
the slow-disk fixture (every request 2 ms) and on the local disk; warm runs no slower; cold
time against the number of prefetch threads."""
import os
import subprocess
import sys
from pathlib import Path
from bench import LIB, ROOT, Contender, Failed, drop_caches, read_ahead_kb, read_stats, run_checked, sh

TITLE = "Directory inode prefetch: cold ls -l, du, find, scandir, rsync (seed 004)"
ORDER = 70

SLOWDISK = str(ROOT / "scripts" / "slowdisk.sh")
MAKE_DIRS = str(ROOT / "scripts" / "make-dirs.py")
AGED_IMAGE = str(ROOT / "scripts" / "aged-image.sh")
# Listings go to a file in memory, not a pipe: no reader competing for the 2 CPUs.
OUT = Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / f"dropbehind-bench-{os.getpid()}.out"


def timed(b, key, cmd, c, cold, stats):
    """One checked run of a listing (bash -c cmd): exit status, output equal to the plain
    run's for the same key, and under the shim its stats report: a cold big directory must
    have been prefetched (some inodes statted), a warm one at least probed."""
    if cold:
        drop_caches()
    stats.unlink(missing_ok=True)
    env = c.preload_env(DROPBEHIND_STATS=str(stats)) if c.preload else {}
    with open(OUT, "wb") as out:
        secs, _ = run_checked(["bash", "-c", cmd], env=env, stdout=out)
    b.same_output(key, c, OUT.read_bytes())
    if not c.preload:
        return dict(seconds=secs)
    st = read_stats(stats)
    if cold and not (st["dirs_prefetched"] and st["inodes_prefetched"]):
        raise Failed(f"no prefetch on a cold directory ({st['dirs_prefetched']} directories, {st['inodes_prefetched']} inodes)")
    if not cold and not st["dirs_prefetched"] + st["dirs_warm"]:
        raise Failed("the warm directory was not even probed")
    return dict(seconds=secs, inodes=st["inodes_prefetched"])


def inode_span(d):
    """How far apart the entries' inodes lie: the span of their numbers over the entry count."""
    inos = [e.inode() for e in os.scandir(d)]
    return (max(inos) - min(inos) + 1) / len(inos)


def run(b):
    # Aged directories are built once per size into filesystem images at local-disk speed
    # (scripts/aged-image.sh, reused across runs), then served through the slow disk.
    n = b.size(100_000, 10_000)
    reps = b.size(2, 1)
    conts = b.contenders("no shim", "dropbehind")
    stats = b.work / "s70-stats.txt"
    if sh([SLOWDISK, "check"], capture_output=True).returncode != 0:
        b.text("### Directory prefetch\n\nSkipped: the slow-disk fixture needs root, nbdkit and nbdfuse.\n")
        return
    fss = ["xfs", "btrfs", "ext4"]
    cmds = {
        "ls -l": "ls -l {d}",
        "du -s": "du -s {d}",
        "find -printf": "find {d} -printf '%s\\n'",
        "find -name": "find {d} -name nomatch",
        "python3 scandir+stat": "python3 -c 'import os,sys;s=[e.stat(follow_symlinks=False) for e in os.scandir(sys.argv[1])];"
                                "print(len(s),sum(x.st_size for x in s))' {d}",
        "rsync -an": "rsync -an {d}/ /tmp/dropbehind-bench-rsync/",
    }
    cases, threads, spans, slow_ra = [], [], {}, set()
    for fs in fss:
        sd = b.work / f"slow-{fs}"
        sh([SLOWDISK, "down", str(sd)], capture_output=True)
        print(f"\r\033[K[{b.scenario}] image with {n} aged entries on {fs}", end="", flush=True, file=sys.stderr)
        image = b.work / f"aged-{fs}-{n}.img"
        sh([AGED_IMAGE, str(image), "--fs", fs, "--entries", str(n)], check=True, capture_output=True)
        up = sh([SLOWDISK, "up", str(sd), "--fs", fs, "--image", str(image)], capture_output=True, text=True)
        if up.returncode != 0:
            b.text(f"### Directory prefetch on {fs}\n\nSkipped: {up.stderr.strip()}\n")
            continue
        mnt = up.stdout.strip().splitlines()[-1]
        d = f"{mnt}/aged"
        src = subprocess.run(["findmnt", "-n", "-o", "SOURCE", mnt], capture_output=True, text=True).stdout.strip()
        slow_ra.add(read_ahead_kb(src))
        which = cmds if fs == "ext4" else {"ls -l": cmds["ls -l"]}
        for name, cmd in which.items():
            for temp in ("cold", "warm"):
                case = f"{fs}, slow disk, {name}, {temp}"
                cases.append(case)

                def one(case, c, cmd=cmd.format(d=d), temp=temp, key=f"{fs} {name}"):
                    if temp == "warm":
                        run_checked(["bash", "-c", cmd])
                    return timed(b, key, cmd, c, temp == "cold", stats)

                # Warm runs are quick and the criterion (5%) is tight: more repetitions.
                b.interleave([case], conts, reps if temp == "cold" else b.size(10, 2), one)
        spans[fs] = inode_span(d)
        if fs == "xfs":
            threads = [Contender(f"dropbehind, {t} threads", preload=LIB, env={"DROPBEHIND_DIR_THREADS": str(t)})
                       for t in (1, 2, 4, 8, 16, 32)]
            b.interleave(["xfs, slow disk, ls -l, cold, by threads"], conts[:1] + threads, 1,
                         lambda case, c: timed(b, "xfs ls -l", cmds["ls -l"].format(d=d), c, True, stats))
        sh([SLOWDISK, "down", str(sd)], capture_output=True)
    # fts (`du`, `find`) dups its directory stream's fd, reads the directory to its end,
    # closes the stream and stats every entry through the dup (gnulib fts, directories
    # under 100,000 entries; the ones above are read on in parts): a directory of the size
    # most are, made on a fresh filesystem of the slow disk, with subdirectories, which
    # `find -name` stats as it descends into them, and no file.
    small, small_cases = b.size(20_000, 5_000), []
    subdirs, files = b.size(40, 10), b.size(300, 50)
    for fs in fss:
        sd = b.work / f"slow-small-{fs}"
        sh([SLOWDISK, "down", str(sd)], capture_output=True)
        print(f"\r\033[K[{b.scenario}] {small} aged entries on a fresh {fs}", end="", flush=True, file=sys.stderr)
        up = sh([SLOWDISK, "up", str(sd), "--fs", fs, "--size", "1G"], capture_output=True, text=True)
        if up.returncode != 0:
            b.text(f"### {small}-entry directory on {fs}\n\nSkipped: {up.stderr.strip()}\n")
            continue
        d = f"{up.stdout.strip().splitlines()[-1]}/aged"
        sh(["python3", MAKE_DIRS, "aged", d, str(small)], check=True, capture_output=True)
        for i in range(subdirs):
            os.mkdir(f"{d}/sub{i}")
            for j in range(files):
                open(f"{d}/sub{i}/f{j}", "w").close()
        sh(["sync"])
        spans[f"{fs} {small}"] = inode_span(d)
        for name in ("du -s", "find -printf", "find -name"):
            case = f"{fs}, slow disk, {small} entries, {name}, cold"
            small_cases.append(case)

            def one(case, c, cmd=cmds[name].format(d=d), key=f"{fs} {small} {name}"):
                return timed(b, key, cmd, c, True, stats)

            b.interleave([case], conts, reps, one)
        sh([SLOWDISK, "down", str(sd)], capture_output=True)
    # The local disk: faster where it can be, never more than 2% slower. ext4 is the local
    # disk's own filesystem; xfs and btrfs are the same images as above, loop-mounted
    # read-only straight from their files (no delay, no direct I/O).
    local = b.work / f"local-aged-{n}"
    if not local.exists():
        sh(["python3", MAKE_DIRS, "aged", str(local), str(n)], check=True)
    locals_ = [("ext4", str(local), None)]
    for fs in ("xfs", "btrfs"):
        image = b.work / f"aged-{fs}-{n}.img"
        mnt = b.work / f"local-{fs}"
        mnt.mkdir(exist_ok=True)
        sh(["umount", str(mnt)], capture_output=True)
        loop = sh(["losetup", "-f", "--show", "-r", str(image)], capture_output=True, text=True).stdout.strip()
        opts = "ro,norecovery" if fs == "xfs" else "ro"
        if loop and sh(["mount", "-o", opts, loop, str(mnt)], capture_output=True).returncode == 0:
            locals_.append((fs, f"{mnt}/aged", loop))
        elif loop:
            sh(["losetup", "-d", loop], capture_output=True)
    for fs, d, _ in locals_:
        for temp in ("cold", "warm"):
            case = f"local disk, {fs}, ls -l, {temp}"
            cases.append(case)

            def one(case, c, temp=temp, d=d, key=f"local {fs} ls -l"):
                if temp == "warm":
                    run_checked(["bash", "-c", f"ls -l {d}"])
                return timed(b, key, f"ls -l {d}", c, temp == "cold", stats)

            b.interleave([case], conts, b.size(5, 3) if temp == "cold" else b.size(10, 3), one)
        if fs == "ext4":  # the others are the slow disk's images
            spans["local ext4"] = inode_span(d)
    for fs, d, loop in locals_:
        if loop:
            sh(["umount", str(Path(d).parent)], capture_output=True)
            sh(["losetup", "-d", loop], capture_output=True)
    OUT.unlink(missing_ok=True)
    span = ", ".join(f"{fs} {x:.0f}x" for fs, x in spans.items())
    ra = "/".join(str(r) for r in sorted(slow_ra, key=str))
    b.table(f"{n}-entry aged directories", cases, conts,
            [("seconds", "seconds", "{:.2f}"), ("inodes", "inodes prefetched", "{:.0f}")], ratio_of="seconds",
            note="Slow disk: an image built by scripts/aged-image.sh, served by nbdkit (file plugin, delay filter: 2 ms per request, "
                 f"cow filter), nbdfuse -C 16, loop device with direct I/O, read_ahead_kb {ra}. Local disk: ext4 on the VM's disk; "
                 "xfs and btrfs are the same images loop-mounted read-only from their files. "
                 f"The entries' inode numbers span this many times the entry count: {span}. "
                 "Every listing's output is compared with the plain run's, and the shim's report must show the prefetch "
                 "(cold) or the probe (warm).")
    if small_cases:
        b.table(f"{small}-entry aged directories: fts closes its stream before it stats", small_cases, conts,
                [("seconds", "seconds", "{:.2f}"), ("inodes", "inodes prefetched", "{:.0f}")], ratio_of="seconds",
                note=f"A fresh 1 GiB filesystem of the slow disk (as above), {small} entries made by scripts/make-dirs.py "
                     f"aged, then {subdirs} subdirectories of {files} empty files each. `du` and `find` stat through a dup "
                     "of the directory's fd after closing its stream; the prefetch goes on until the program has closed "
                     "both, with only the subdirectories until the program stats, opens or removes a file through it "
                     "(`find -name` does none of these: it stats and opens each subdirectory as it descends into it).")
    plt = b.pyplot()
    curve = {c.name: b.rows("xfs, slow disk, ls -l, cold, by threads", c.name) for c in conts[:1] + threads}
    if plt and threads and all(curve.values()):
        fig, ax = plt.subplots(figsize=(7, 4))
        ts = [int(c.env["DROPBEHIND_DIR_THREADS"]) for c in threads]
        ax.plot(ts, [curve[c.name][0]["seconds"] for c in threads], marker="o", label="dropbehind")
        ax.axhline(curve["no shim"][0]["seconds"], color="gray", linestyle="--", label="no shim")
        ax.set_xscale("log", base=2)
        b.save_plot(fig, ax, "dir_threads.png", f"xfs, {n} aged entries, 2 ms per request",
                    "DROPBEHIND_DIR_THREADS", "cold ls -l, seconds")
