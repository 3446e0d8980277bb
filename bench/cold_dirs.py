#!/usr/bin/env python3
"""Cold directories against their I/O floor (bench/results/cold-dirs.md).

  bench/cold_dirs.py up IMAGE FS DIR          serve IMAGE through the slow disk at DIR
  bench/cold_dirs.py down DIR
  bench/cold_dirs.py floor DIR                the disk's latency and queue depth (fio), and
                                              the reads and distinct 4 KiB blocks of a cold
                                              plain `ls -l` and `du -s` (block tracepoint),
                                              and the CPU seconds the machine spends on
                                              each (a second, untraced run)
  bench/cold_dirs.py disk DIR                 only the disk's latency and queue depth
  bench/cold_dirs.py queue DIR                the latency of one read at a time beside
                                              K more in flight (K = 0-32): how long a
                                              chain of dependent reads (an index walk)
                                              takes while other reads fill the queue
  bench/cold_dirs.py timeline DIR LIB CMD     one cold run of CMD (`ls -l`, `du -s`) with
                                              LIB: reads completed and in flight per 100 ms,
                                              the CPUs in use (the machine's, the program's
                                              main thread's, its helpers'), the prefetch's
                                              debug lines, and when the last read came
                                              against when the run ended
  bench/cold_dirs.py locks DIR LIB CMD        one cold run of CMD with LIB under `perf record`
                                              of xfs's buffer-lock tracepoints: for the buffer
                                              locked most (a directory's root), each thread's
                                              acquisitions, time held and time waited, and per
                                              200 ms the grants and waits of the program and
                                              of the helpers (xfs only; needs perf)
  bench/cold_dirs.py time DIR REPS LIB...     cold `ls -l` and `du -s` with each LIB, warm
                                              ones without the shim too, interleaved, REPS
                                              rounds (the plain cold runs are `floor`'s);
                                              with ROUND_DISK=1 the disk's rate is measured
                                              at the start of every round as well; with
                                              PREREAD=1 (xfs) every cold run starts after the
                                              directory was listed and every inode cluster
                                              read (bulkstat, untimed): what is left is the
                                              index's leaf reads and the CPU;
                                              PREREAD=NAME.so only before that
                                              library's cold runs; with PREREAD_INODES=1
                                              every inode is made in the inode cache too
                                              (by file handle: no lookup, no dentry)
  bench/cold_dirs.py compare DIR REPS CMD LIB...
                                              cold runs of CMD (a shell command; `{d}` is
                                              the directory, else it goes last) on DIR's
                                              mounted directory (SUB=NAME: that one, else
                                              aged), without the shim and with each LIB,
                                              interleaved, REPS rounds, every output
                                              compared with the first plain run's; per
                                              contender the median seconds, their range
                                              and the median requests
  bench/cold_dirs.py ratios FLOOR.json TIME.out
                                              each cold run of a `time` output (run with
                                              ROUND_DISK=1) against its round's floor: the
                                              plain runs' reads (a `floor` output) over the
                                              round's reads per second at depth 32, plus
                                              the round's warm run without the shim;
                                              medians and ranges per contender; against
                                              the issue's bound (vs_target: the larger of
                                              3x the warm run and 1.3x the floor; at most
                                              1 meets it); and against the CPU floor: the
                                              plain cold run's CPU seconds over the
                                              machine's CPUs
  bench/cold_dirs.py memory IMAGE DIR REPS LIB...
                                              the same image loop-mounted read-only from its
                                              file at DIR, the file kept cached: cold runs
                                              whose reads cost a memory copy, i.e. what a
                                              cold listing costs the CPU (the plain cold
                                              runs: pass a do-nothing LIB); unmounts after

Cold means the slow disk's filesystem was unmounted and mounted again (its dentries,
inodes, metadata buffers and block-device cache all go, and no other program's cache is
touched), and the nbdfuse file behind the loop device evicted; with COLD_IMAGE=FILE also
the image file nbdkit serves (as a global drop_caches would). Every run's output is
compared with the first plain run's. Prints one JSON object per line. Needs root; take
the timing lock around `floor` and `time` (flock /tmp/dropbehind-timing.lock ...).
"""
import ctypes
import errno
import json
import os
import resource
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLOWDISK = str(ROOT / "scripts" / "slowdisk.sh")
OUT = Path("/dev/shm") / f"cold-dirs-{os.getpid()}.out"
CMDS = {"ls -l": "ls -l {d}", "du -s": "du -s {d}"}


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def loop_of(sd):
    return Path(sd, "loop").read_text().strip()


def mnt_of(sd):
    return str(Path(sd, "mnt"))


def cold(sd):
    mnt, loop = mnt_of(sd), loop_of(sd)
    sh(["umount", mnt])
    # The nbdfuse file, where there is one (`memory` has none: its image stays cached).
    files = [f for f in [Path(sd, "fuse", "disk")] if f.exists()]
    if os.environ.get("COLD_IMAGE"):
        # The image file behind nbdkit too: what a global drop_caches does (reads then pay
        # this machine's own disk on top of the fixture's delay).
        files.append(Path(os.environ["COLD_IMAGE"]))
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    sh(["blockdev", "--flushbufs", loop])
    opts = Path(sd, "opts")  # a local-disk setup: mount options (e.g. ro,norecovery)
    sh(["mount"] + (["-o", opts.read_text().strip()] if opts.exists() else []) + [loop, mnt])
    ra = Path(sd, "ra").read_text().strip() if Path(sd, "ra").exists() else "128"
    Path(f"/sys/block/{os.path.basename(loop)}/queue/read_ahead_kb").write_text(ra + "\n")


def reads(sd):
    """Read requests completed and sectors read on the slow disk's loop device."""
    f = Path(f"/sys/block/{os.path.basename(loop_of(sd))}/stat").read_text().split()
    return int(f[0]), int(f[2])


def in_threads(worker, n):
    """Runs `worker` in `n` threads at once and waits for them all."""
    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def preread(d):
    """Lists directory `d` and reads every inode cluster of its entries with xfs's
    single-inode bulkstat (CAP_SYS_ADMIN), 16 at once, without a lookup: the data and inode
    blocks a cold listing needs are then cached, and its index's leaf blocks are not. For
    `PREREAD=1 ... time`: what no ordering of the inode reads can take away."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    # struct xfs_fsop_bulkreq { __u64 *lastip; __s32 icount; void *ubuffer; __s32 *ocount; }
    ioc = (3 << 30) | (32 << 16) | (ord("X") << 8) | 102  # XFS_IOC_FSBULKSTAT_SINGLE
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    # One entry's inode per 16 consecutive numbers, which never span two clusters (v4 and
    # v5 alike); an entry's, because a free inode's number fails without a read.
    firsts = {}
    for e in os.scandir(d):
        firsts[e.inode() >> 4] = min(e.inode(), firsts.get(e.inode() >> 4, e.inode()))
    groups = iter(sorted(firsts.values()))
    lock, failed, done = threading.Lock(), [], []

    def worker():
        try:
            last, out, n = ctypes.c_uint64(), ctypes.create_string_buffer(512), ctypes.c_int32()
            req = ctypes.create_string_buffer(struct.pack(
                "QiiQQ", ctypes.addressof(last), 1, 0, ctypes.addressof(out), ctypes.addressof(n)), 32)
            while not failed:
                with lock:
                    g = next(groups, None)
                if g is None:
                    return
                last.value, n.value = g, 0
                if libc.ioctl(fd, ioc, req) == 0 and n.value == 1:
                    done.append(g)
                elif ctypes.get_errno() != errno.EINVAL:  # EINVAL: the file went meanwhile
                    failed.append(os.strerror(ctypes.get_errno()))
        except Exception as e:  # noqa: BLE001 - any failure fails the run, below
            failed.append(repr(e))
    in_threads(worker, 16)
    os.close(fd)
    if failed or not done:
        raise SystemExit(f"PREREAD: bulkstat failed ({failed[0] if failed else 'no inode read'}): "
                         "it needs xfs and CAP_SYS_ADMIN")
    if os.environ.get("PREREAD_INODES") == "1":
        cache_inodes(d, libc)


def cache_inodes(d, libc):
    """PREREAD_INODES=1: every entry's inode also made in the inode cache, without a lookup
    (no dentry): opened by file handle (CAP_DAC_READ_SEARCH) with generation 0, which xfs
    checks only after it has read the inode and answers with ESTALE, keeping the inode."""
    class Handle(ctypes.Structure):
        _fields_ = [("bytes", ctypes.c_uint32), ("kind", ctypes.c_int), ("fid", ctypes.c_ubyte * 12)]
    inos = iter(sorted(e.inode() for e in os.scandir(d)))
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    lock, answers = threading.Lock(), {}

    def worker():
        h = Handle(12, 0x81)  # FILEID_INO32_GEN | XFS_FILEID_TYPE_64FLAG: u64 ino, u32 gen
        while True:
            with lock:
                ino = next(inos, None)
            if ino is None:
                return
            ctypes.memmove(h.fid, struct.pack("=QI", ino, 0), 12)
            got = libc.open_by_handle_at(fd, ctypes.byref(h), os.O_PATH | os.O_CLOEXEC)
            err = ctypes.get_errno() if got < 0 else 0
            if got >= 0:
                os.close(got)
            with lock:
                answers[err] = answers.get(err, 0) + 1
    in_threads(worker, 16)
    os.close(fd)
    if set(answers) - {0, errno.ESTALE}:
        raise SystemExit(f"PREREAD_INODES: open_by_handle_at answered {answers}")


def up(image, fs, sd):
    subprocess.run([SLOWDISK, "down", sd], capture_output=True)
    out = sh([SLOWDISK, "up", sd, "--fs", fs, "--image", image], capture_output=True, text=True).stdout
    print(out.strip().splitlines()[-1])


def machine_busy():
    """Seconds of CPU the whole machine has spent busy (/proc/stat: user, nice, system, irq,
    softirq, steal), over all its CPUs."""
    f = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    return sum(int(x) for x in f[:3] + f[5:8]) / os.sysconf("SC_CLK_TCK")


def run(cmd, env, expect=None):
    """Runs `cmd`: its seconds, its output, and the CPU seconds it took: `program` (its
    process and threads, the shim's helpers among them) and `machine` (every CPU's busy
    time over the run, which on the slow disk includes its nbdkit and nbdfuse)."""
    with open(OUT, "wb") as out:
        c0, m0 = resource.getrusage(resource.RUSAGE_CHILDREN), machine_busy()
        t = time.monotonic()
        subprocess.run(["bash", "-c", cmd], env=env, stdout=out, check=True)
        secs = time.monotonic() - t
        c1, m1 = resource.getrusage(resource.RUSAGE_CHILDREN), machine_busy()
    data = OUT.read_bytes()
    if expect is not None and data != expect:
        raise SystemExit(f"output differs: {cmd} with {env.get('LD_PRELOAD')}")
    program = c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime
    return secs, data, dict(program=round(program, 3), machine=round(m1 - m0, 3))


def disk(sd):
    """The slow disk's latency at depth 1 and the most reads it completes per second."""
    loop = loop_of(sd)
    res = {}
    # The device: latency at depth 1, and how many reads it serves at once.
    for depth in (1, 32):
        p = subprocess.run(["fio", "--name=qd", f"--filename={loop}", "--readonly", "--direct=1",
                            "--rw=randread", "--bs=4k", f"--iodepth={depth}", "--ioengine=libaio",
                            "--runtime=4", "--time_based", "--output-format=json"],
                           capture_output=True, text=True, check=True)
        job = json.loads(p.stdout)["jobs"][0]["read"]
        res[f"iops_qd{depth}"] = job["iops"]
        res[f"lat_ms_qd{depth}"] = job["lat_ns"]["mean"] / 1e6
    res["queue_depth"] = res["iops_qd32"] * res["lat_ms_qd1"] / 1000
    return res


def queue(sd):
    """One read at a time (depth 1) beside a second job keeping K reads in flight."""
    loop = loop_of(sd)
    for k in (0, 1, 2, 4, 8, 12, 16, 32):
        cmd = ["fio", "--output-format=json", f"--filename={loop}", "--readonly", "--direct=1",
               "--rw=randread", "--bs=4k", "--ioengine=libaio", "--runtime=4", "--time_based",
               "--name=chain", "--iodepth=1"]
        if k:
            cmd += ["--name=beside", f"--iodepth={k}"]
        jobs = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["jobs"]
        one = jobs[0]["read"]
        res = {"beside": k, "lat_ms": round(one["lat_ns"]["mean"] / 1e6, 2),
               "p99_ms": round(one["clat_ns"]["percentile"]["99.000000"] / 1e6, 2)}
        if k:
            res["beside_reads_per_s"] = round(jobs[1]["read"]["iops"])
        print(json.dumps(res), flush=True)


def cpu_seconds(pid, seen):
    """CPU seconds so far: the whole machine's busy time (/proc/stat, tick-sampled over
    all CPUs), and of process `pid` its main thread's and its other threads' (the
    helpers'), from each thread's schedstat: exact, where the per-thread tick counts miss
    threads that sleep between ticks. `seen` keeps each thread's last figure, so that
    threads that exit still count."""
    busy = machine_busy()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            seen[task.name] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    main = seen.get(str(pid), 0)
    return busy, main, sum(seen.values()) - main


def timeline(sd, lib, name):
    """A cold run of CMDS[name] with LIB: the loop device's reads and requests in flight
    sampled every 5 ms, and the CPUs in use (the program's main thread, its other threads,
    the whole machine, which includes the slow disk's own processes) per 100 ms."""
    dev = os.path.basename(loop_of(sd))
    d = mnt_of(sd) + "/aged"
    cold(sd)
    samples, done = [], threading.Event()
    env = dict(os.environ, LD_PRELOAD=lib, DROPBEHIND_LOG="debug")
    cmd = CMDS[name].format(d=d).split()
    first = reads(sd)[0]
    start = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def sample():
        seen = {}
        with open(f"/sys/block/{dev}/stat") as st, open(f"/sys/block/{dev}/inflight") as fl:
            while not done.is_set():
                st.seek(0)
                fl.seek(0)
                cpu = cpu_seconds(p.pid, seen) if p.poll() is None else None
                samples.append((time.monotonic(), int(st.read().split()[0]), int(fl.read().split()[0]), cpu))
                time.sleep(0.005)

    t = threading.Thread(target=sample)
    t.start()
    err = p.stderr.read()
    p.wait()
    end = time.monotonic()
    time.sleep(0.05)
    done.set()
    t.join()
    for line in err.splitlines():
        if "directory prefetch" in line:
            print("#", line)
    last_read = max((tm for (tm, r, _, _), (_, r0, _, _) in zip(samples[1:], samples) if r > r0), default=start)
    buckets = {}
    for tm, r, inflight, cpu in samples:
        if start <= tm <= end:
            buckets.setdefault(int((tm - start) * 10), []).append((tm, r, inflight, cpu))
    prev = first
    for b in sorted(buckets):
        v = buckets[b]
        row = {"t": b / 10, "reads": v[-1][1] - prev, "in_flight": round(sum(x[2] for x in v) / len(v), 1)}
        prev = v[-1][1]
        ts = [x for x in v if x[3]]
        if len(ts) > 1 and ts[-1][0] > ts[0][0]:
            # CPUs in use over the bucket (0 to the machine's count); the machine's figure
            # is tick-grained, so read it over a few buckets.
            (t0, _, _, a), (t1, _, _, z) = ts[0], ts[-1]
            span = t1 - t0
            row["cpus_all"] = round((z[0] - a[0]) / span, 2)
            row["cpus_program"] = round((z[1] - a[1]) / span, 2)
            row["cpus_helpers"] = round((z[2] - a[2]) / span, 2)
        print(json.dumps(row))
    print(json.dumps({"cmd": name, "lib": lib, "run_s": round(end - start, 3),
                      "last_read_s": round(last_read - start, 3), "reads": samples[-1][1] - first}))


def locks(sd, lib, name):
    """A cold run of CMDS[name] with LIB, xfs's buffer-lock events recorded system-wide."""
    d = mnt_of(sd) + "/aged"
    data = f"/dev/shm/cold-dirs-{os.getpid()}.perf"
    cold(sd)
    events = ["xfs:xfs_buf_lock", "xfs:xfs_buf_lock_done", "xfs:xfs_buf_trylock", "xfs:xfs_buf_unlock"]
    perf = subprocess.Popen(["perf", "record", "-q", "-a", "-m", "16M", "-o", data]
                            + [x for e in events for x in ("-e", e)], stderr=subprocess.DEVNULL)
    time.sleep(1.5)  # perf's start
    env = dict(os.environ, LD_PRELOAD=lib)
    start = time.monotonic()
    p = subprocess.Popen(CMDS[name].format(d=d), shell=True, env=env, stdout=subprocess.DEVNULL)
    p.wait()
    run_s = time.monotonic() - start
    perf.send_signal(2)
    perf.wait()
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,time,event,trace"],
                         capture_output=True, text=True).stdout
    os.unlink(data)
    rows = []
    for line in out.splitlines():
        f = line.split()
        # comm tid time: event: dev M:N daddr 0x...
        if len(f) > 6 and f[3].startswith("xfs:") and "daddr" in f:
            rows.append((float(f[2].rstrip(":")), f[0], int(f[1]), f[3].rstrip(":"), f[f.index("daddr") + 1]))
    if not rows:
        sys.exit("no xfs buffer-lock events recorded (xfs? perf?)")
    counts = {}
    for _, _, _, e, daddr in rows:
        if e == "xfs:xfs_buf_lock":
            counts[daddr] = counts.get(daddr, 0) + 1
    root = max(counts, key=counts.get)
    prog = next((tid for _, comm, tid, _, _ in rows if comm in ("ls", "du")), None)
    t0 = rows[0][0]
    per, buckets, waiting, holder = {}, {}, {}, None
    for t, comm, tid, e, daddr in rows:
        if daddr != root:
            continue
        who = "program" if tid == prog else "helpers" if comm.startswith("dropbehind") else "other"
        th = per.setdefault(tid, {"comm": comm, "holds": 0, "held_s": 0.0, "waited_s": 0.0})
        bk = buckets.setdefault(int((t - t0) * 5), {})
        if e == "xfs:xfs_buf_lock":
            waiting[tid] = t
        elif e in ("xfs:xfs_buf_lock_done", "xfs:xfs_buf_trylock"):
            if tid in waiting:
                w = t - waiting.pop(tid)
                th["waited_s"] += w
                bk[who + "_waited_s"] = bk.get(who + "_waited_s", 0) + w
            holder = (tid, t)
            th["holds"] += 1
            bk[who + "_grants"] = bk.get(who + "_grants", 0) + 1
        elif e == "xfs:xfs_buf_unlock" and holder and holder[0] == tid:
            th["held_s"] += t - holder[1]
            holder = None
    print(json.dumps({"cmd": name, "lib": lib, "run_s": round(run_s, 3), "buffer": root,
                      "acquisitions": counts[root]}))
    for tid, th in sorted(per.items(), key=lambda kv: -kv[1]["holds"]):
        print(json.dumps({"tid": tid, **{k: round(v, 3) if isinstance(v, float) else v
                                          for k, v in th.items()}}))
    for b in sorted(buckets):
        print(json.dumps({"t": b / 5, **{k: round(v, 3) if isinstance(v, float) else v
                                         for k, v in sorted(buckets[b].items())}}))


def floor(sd):
    loop = loop_of(sd)
    d = mnt_of(sd) + "/aged"
    res = disk(sd)
    env = dict(os.environ)
    for name, cmd in CMDS.items():
        cmd = cmd.format(d=d)
        cold(sd)
        trace = Path(sd, "trace.data")
        perf = subprocess.Popen(["perf", "record", "-q", "-e", "block:block_rq_issue", "-a", "-o", str(trace)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.5)
        r0 = reads(sd)
        secs, _, _ = run(cmd, env)
        r1 = reads(sd)
        perf.send_signal(2)
        perf.wait()
        script = subprocess.run(["perf", "script", "-i", str(trace)], capture_output=True, text=True).stdout
        dev = os.stat(loop).st_rdev
        major, minor = os.major(dev), os.minor(dev)
        blocks = set()
        for line in script.splitlines():
            if f" {major},{minor} " not in line or " R" not in line:
                continue
            parts = line.split()
            try:
                i = parts.index("+")
                sector, n = int(parts[i - 1]), int(parts[i + 1])
            except (ValueError, IndexError):
                continue
            blocks.update(range(sector // 8, (sector + n + 7) // 8))
        trace.unlink(missing_ok=True)
        # Untraced, the CPU the same run takes: the inodes and dentries any cold run must
        # make, the program's work, and the slow disk's own processes serving the reads.
        # What the idle machine spends over as long (measured just before) is left out.
        cold(sd)
        idle0 = machine_busy()
        time.sleep(1)
        idle = machine_busy() - idle0
        secs2, _, cpu = run(cmd, env)
        res[name] = dict(plain_cold_s=secs, requests=r1[0] - r0[0], kib=(r1[1] - r0[1]) // 2,
                         distinct_4k_blocks=len(blocks), plain_cold_cpu_s=round(cpu["machine"] - idle * secs2, 3),
                         plain_cold_program_cpu_s=cpu["program"], cpus=os.cpu_count())
    print(json.dumps(res))


def timing(sd, reps, libs):
    d = mnt_of(sd) + "/aged"
    conts = [("no shim", None)] + [(Path(lib).name, lib) for lib in libs]
    # The reference output: a plain run (untimed).
    expect = {name: run(cmd.format(d=d), dict(os.environ))[1] for name, cmd in CMDS.items()}
    rows = {}
    for rep in range(reps):
        # The fixture's rate moves by 2x within an hour (its nbdkit and nbdfuse share the
        # machine's two CPUs): each round carries its own, to set its cold runs against.
        rate = disk(sd) if os.environ.get("ROUND_DISK") else {}
        if rate:
            print(json.dumps(dict(rep=rep, disk=rate)), flush=True)
        for name, cmd in CMDS.items():
            cmd = cmd.format(d=d)
            for temp in ("cold", "warm"):
                for cname, lib in conts:
                    if temp == "cold" and lib is None:
                        continue
                    env = dict(os.environ)
                    if lib:
                        env["LD_PRELOAD"] = lib
                    if temp == "cold":
                        cold(sd)
                        pre = os.environ.get("PREREAD", "")
                        if pre == "1" or pre == cname:
                            preread(d)
                    else:
                        run(cmd, dict(os.environ))
                    r0 = reads(sd)
                    secs, _, cpu = run(cmd, env, expect[name])
                    r1 = reads(sd)
                    row = dict(cmd=name, temp=temp, contender=cname, rep=rep, seconds=round(secs, 3),
                               requests=r1[0] - r0[0], cpu_s=cpu["machine"], program_cpu_s=cpu["program"])
                    rows.setdefault((name, temp, cname), []).append(secs)
                    print(json.dumps(row), flush=True)
    for (name, temp, cname), v in rows.items():
        print(json.dumps(dict(summary=True, cmd=name, temp=temp, contender=cname, median=round(statistics.median(v), 3),
                              min=round(min(v), 3), max=round(max(v), 3), n=len(v))))
    OUT.unlink(missing_ok=True)


def compare(sd, reps, cmd, libs):
    d = mnt_of(sd) + "/" + os.environ.get("SUB", "aged")
    cmd = cmd.format(d=d) if "{d}" in cmd else f"{cmd} {d}"
    conts = [("no shim", None)] + [(Path(lib).name, lib) for lib in libs]
    expect, rows = None, {}
    for _ in range(reps):
        for name, lib in conts:
            cold(sd)
            env = dict(os.environ, LD_PRELOAD=lib) if lib else dict(os.environ)
            r0 = reads(sd)
            secs, out, _ = run(cmd, env, expect)
            expect = out if expect is None else expect
            rows.setdefault(name, []).append((secs, reads(sd)[0] - r0[0]))
    for name, v in rows.items():
        print(json.dumps(dict(cmd=cmd, contender=name, seconds=round(statistics.median(x[0] for x in v), 3),
                              range=[round(min(x[0] for x in v), 3), round(max(x[0] for x in v), 3)],
                              requests=statistics.median(x[1] for x in v))))
    OUT.unlink(missing_ok=True)


def ratios(floor_file, time_file):
    fl = json.loads(Path(floor_file).read_text().strip().splitlines()[-1])
    rate, warm, cold_runs = {}, {}, []
    for line in Path(time_file).read_text().splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "disk" in r:
            rate[r["rep"]] = r["disk"]["iops_qd32"]
        elif r.get("summary"):
            continue
        elif r["temp"] == "warm" and r["contender"] == "no shim":
            warm[(r["cmd"], r["rep"])] = r["seconds"]
        elif r["temp"] == "cold":
            cold_runs.append(r)
    if not rate:
        sys.exit("ratios: the time output has no round's disk rate (run it with ROUND_DISK=1)")
    by = {}
    for r in cold_runs:
        w = warm[(r["cmd"], r["rep"])]
        floor_s = fl[r["cmd"]]["requests"] / rate[r["rep"]] + w
        # The bound: 3x the warm run or 1.3x the floor, whichever is larger.
        target_s = max(3 * w, 1.3 * floor_s)
        v = by.setdefault((r["cmd"], r["contender"]), dict(s=[], x=[], t=[], floor=[], cpu=[]))
        v["s"].append(r["seconds"])
        v["x"].append(r["seconds"] / floor_s)
        v["t"].append(r["seconds"] / target_s)
        v["floor"].append(floor_s)
        if "cpu_s" in r:
            v["cpu"].append(r["cpu_s"])
    for (cmd, cont), v in by.items():
        row = dict(cmd=cmd, contender=cont, n=len(v["s"]), seconds=round(statistics.median(v["s"]), 3),
                   vs_floor=round(statistics.median(v["x"]), 3),
                   vs_floor_min=round(min(v["x"]), 3), vs_floor_max=round(max(v["x"]), 3),
                   vs_target=round(statistics.median(v["t"]), 3),
                   floor_s=f"{min(v['floor']):.2f}-{max(v['floor']):.2f}")
        plain = fl[cmd]
        if "plain_cold_cpu_s" in plain:
            # The CPU a plain cold run keeps the machine busy for (inodes and dentries made,
            # the program's work, the slow disk's processes), spread over every CPU: a run
            # that does as much work cannot end sooner, however its reads overlap (`cpu_s`
            # says whether it did). The floor counts only the warm run's CPU.
            cpu_floor = plain["plain_cold_cpu_s"] / plain["cpus"]
            row.update(cpu_floor_s=round(cpu_floor, 3), vs_cpu_floor=round(statistics.median(v["s"]) / cpu_floor, 3),
                       plain_cold_cpu_s=plain["plain_cold_cpu_s"])
        if v["cpu"]:
            row["cpu_s"] = round(statistics.median(v["cpu"]), 3)
        print(json.dumps(row))


def memory(image, sd, reps, libs):
    """Cold runs at memory speed: the filesystem is made cold (unmounted and mounted again)
    but the image file behind its loop device stays in the page cache, so every metadata
    read is a copy from memory and what is left is the CPU a cold listing costs (inodes
    made, lookups, the program's own work). The slow disk's floor counts the device's
    reads; this counts the rest."""
    Path(sd, "mnt").mkdir(parents=True, exist_ok=True)
    loop = sh(["losetup", "-f", "--show", "-r", image], capture_output=True, text=True).stdout.strip()
    Path(sd, "loop").write_text(loop + "\n")
    Path(sd, "opts").write_text("ro,norecovery\n")
    try:
        sh(["mount", "-o", "ro,norecovery", loop, mnt_of(sd)])
        # One cold pass of each command first, untimed: its reads bring the image's
        # metadata blocks into the page cache, where the timed runs find them.
        for cmd in CMDS.values():
            cold(sd)
            run(cmd.format(d=mnt_of(sd) + "/aged"), dict(os.environ))
        timing(sd, reps, libs)
    finally:
        subprocess.run(["umount", mnt_of(sd)])
        subprocess.run(["losetup", "-d", loop])


def main():
    a = sys.argv[1:]
    if not a:
        sys.exit(__doc__)
    if a[0] == "up" and len(a) == 4:
        up(a[1], a[2], a[3])
    elif a[0] == "down" and len(a) == 2:
        subprocess.run([SLOWDISK, "down", a[1]])
    elif a[0] == "disk" and len(a) == 2:
        print(json.dumps(disk(a[1])))
    elif a[0] == "queue" and len(a) == 2:
        queue(a[1])
    elif a[0] == "locks" and len(a) == 4 and a[3] in CMDS:
        locks(a[1], a[2], a[3])
    elif a[0] == "timeline" and len(a) == 4 and a[3] in CMDS:
        timeline(a[1], a[2], a[3])
    elif a[0] == "floor" and len(a) == 2:
        floor(a[1])
    elif a[0] == "ratios" and len(a) == 3:
        ratios(a[1], a[2])
    elif a[0] == "memory" and len(a) >= 4:
        memory(a[1], a[2], int(a[3]), a[4:])
    elif a[0] == "compare" and len(a) >= 4:
        compare(a[1], int(a[2]), a[3], a[4:])
    elif a[0] == "time" and len(a) >= 3:
        timing(a[1], int(a[2]), a[3:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
