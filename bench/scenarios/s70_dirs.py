"""Seed 004 (2014 dirreadahead thread): cold `ls -l` and friends on big aged directories, on
the slow-disk fixture (every request 2 ms) and on the local disk; warm runs no slower; cold
time against the number of prefetch threads."""
import os
import subprocess
import time
from pathlib import Path
from bench import LIB, ROOT, Contender, drop_caches, sh

TITLE = "Directory inode prefetch: cold ls -l, du, find, scandir, rsync (seed 004)"
ORDER = 70

SLOWDISK = str(ROOT / "scripts" / "slowdisk.sh")
MAKE_DIRS = str(ROOT / "scripts" / "make-dirs.py")
AGED_IMAGE = str(ROOT / "scripts" / "aged-image.sh")


def timed(cmd, env_extra, cold):
    if cold:
        drop_caches()
    env = dict(os.environ, **env_extra)
    t0 = time.monotonic()
    subprocess.run(["bash", "-c", cmd], env=env, stdout=subprocess.DEVNULL, check=True)
    return time.monotonic() - t0


def run(b):
    # Aged directories are built once per size into filesystem images at local-disk speed
    # (scripts/aged-image.sh, reused across runs), then served through the slow disk.
    n = b.size(100_000, 10_000)
    reps = b.size(2, 1)
    conts = [Contender("no shim", None), Contender("dropbehind", None)]
    envs = {"no shim": {}, "dropbehind": {"LD_PRELOAD": str(LIB)}}
    if sh([SLOWDISK, "check"], capture_output=True).returncode != 0:
        b.sections.append("### Directory prefetch\n\nSkipped: the slow-disk fixture needs root, nbdkit and nbdfuse.\n")
        return
    fss = ["xfs", "btrfs", "ext4"]
    cmds = {
        "ls -l": "ls -l {d}",
        "du -s": "du -s {d}",
        "find -printf": "find {d} -printf '%s\\n'",
        "python3 scandir+stat": "python3 -c 'import os,sys;[e.stat(follow_symlinks=False) for e in os.scandir(sys.argv[1])]' {d}",
        "rsync -an": "rsync -an {d}/ /tmp/dropbehind-bench-rsync/",
    }
    cases, threads_curve = [], {}
    for fs in fss:
        sd = b.work / f"slow-{fs}"
        sh([SLOWDISK, "down", str(sd)], capture_output=True)
        print(f"\r\033[K[{b.scenario}] image with {n} aged entries on {fs}", end="", flush=True, file=__import__('sys').stderr)
        image = b.work / f"aged-{fs}-{n}.img"
        sh([AGED_IMAGE, str(image), "--fs", fs, "--entries", str(n)], check=True, capture_output=True)
        up = sh([SLOWDISK, "up", str(sd), "--fs", fs, "--image", str(image)], capture_output=True, text=True)
        if up.returncode != 0:
            b.sections.append(f"### Directory prefetch on {fs}\n\nSkipped: {up.stderr.strip()}\n")
            continue
        d = f"{up.stdout.strip().splitlines()[-1]}/aged"
        which = cmds if fs == "ext4" else {"ls -l": cmds["ls -l"]}
        for name, cmd in which.items():
            for temp in ("cold", "warm"):
                case = f"{fs}, slow disk, {name}, {temp}"
                cases.append(case)

                def one(case, c, cmd=cmd, temp=temp):
                    if temp == "warm":
                        timed(cmd.format(d=d), {}, False)
                    return dict(seconds=timed(cmd.format(d=d), envs[c.name], temp == "cold"))

                # Warm runs are quick and the criterion (5%) is tight: more repetitions.
                b.interleave([case], conts, reps if temp == "cold" else b.size(10, 2), one)
        if fs == "xfs":
            for t in (1, 2, 4, 8, 16, 32):
                threads_curve[t] = timed(cmds["ls -l"].format(d=d), {"LD_PRELOAD": str(LIB), "DROPBEHIND_DIR_THREADS": str(t)}, True)
            threads_curve[0] = timed(cmds["ls -l"].format(d=d), {}, True)
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

            def one(case, c, temp=temp, d=d):
                if temp == "warm":
                    timed(f"ls -l {d}", {}, False)
                return dict(seconds=timed(f"ls -l {d}", envs[c.name], temp == "cold"))

            b.interleave([case], conts, b.size(5, 3) if temp == "cold" else b.size(10, 3), one)
    for fs, d, loop in locals_:
        if loop:
            sh(["umount", str(Path(d).parent)], capture_output=True)
            sh(["losetup", "-d", loop], capture_output=True)
    b.table(f"{n}-entry aged directories (inodes scattered over 10-21x the entry count)", cases, conts,
            [("seconds", "seconds", "{:.2f}")], ratio_of="seconds",
            note="Slow disk: an image built by scripts/aged-image.sh, served by nbdkit (file plugin, delay filter: 2 ms per request, "
                 "cow filter), nbdfuse -C 16, loop device with direct I/O, read_ahead_kb 128. Local disk: ext4 on the VM's disk; "
                 "xfs and btrfs are the same images loop-mounted read-only from their files.")
    plt = b.pyplot()
    if plt and threads_curve:
        fig, ax = plt.subplots(figsize=(7, 4))
        ts = [t for t in sorted(threads_curve) if t > 0]
        ax.plot(ts, [threads_curve[t] for t in ts], marker="o", label="dropbehind")
        ax.axhline(threads_curve[0], color="gray", linestyle="--", label="no shim")
        ax.set_xscale("log", base=2)
        b.save_plot(fig, ax, "dir_threads.png", f"xfs, {n} aged entries, 2 ms per request",
                    "DROPBEHIND_DIR_THREADS", "cold ls -l, seconds")
