#!/usr/bin/env python3
"""The benchmark harness: runs the scenarios in bench/scenarios/ (one small file each), with
contenders interleaved (A B B A ...) and every contender's run checked, then writes the
results (NAME.json) and their report (NAME.md, made by bench/report.py) and PNG plots.

  --full                   bench/results/latest.{json,md}, and the README's blocks from them
  --quick                  bench/results/quick.{json,md}; the README is left alone
  --full with --only, --reps or --vs-lib: bench/results/partial.{json,md} (the README's
                           figures come from every scenario, as they are, only)

A scenario module defines TITLE, ORDER (sort key) and run(b), where b is the Bench below.
"""
import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REL = ROOT / "target" / "release"
LIB = REL / "libdropbehind.so"
LAUNCHER = REL / "dropbehind"
EXAMPLES = REL / "examples"
RESULTS = ROOT / "bench" / "results"
MIB = 1 << 20


class Failed(Exception):
    """A contender's run that did not do its job (exit status, output, an effect it must
    have had): the report marks the contender failed for that case instead of timing it."""


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), **kw)


def drop_caches(fault_in_mib=0):
    """Drops the page cache; with fault_in_mib, then touches that much memory and frees it.

    On a VM whose balloon reports free pages (free_page_reporting), freed memory goes back
    to the host, and the next run to take it pays the host's faults: the run that uses the
    most memory, usually the one without a shim, pays alone (a plain `cp -r` of 390 MiB of
    8 KiB files, 6.6-7.0 s against 5.5-6.3 after touching; bench/results/vm-memory.md). The
    touch costs about 0.7 s a GiB, so it is done only where reporting is on."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")
    fault_in(fault_in_mib)


def fault_in(mib):
    """Touches `mib` MiB of memory and frees it, where the machine reports free pages (see
    `drop_caches`). Right before the timed run: the balloon reports freed memory about 2 s
    after it was freed, so anything slow in between (reading a source at a throttled
    disk's rate) hands it back to the host first."""
    if mib and FREE_PAGE_REPORTING:
        touched = bytearray(mib * MIB)  # zeroed, so every page is written
        del touched


def cache_files(paths):
    """Reads files whole, without a shim, so that the next run finds them cached."""
    for p in paths:
        with open(p, "rb") as f:
            for _ in _chunks(f):
                pass


def warm_programs(cmds, env=None):
    """Runs each command (a program asked for its version, or Python importing what a case
    uses) outside any memory group, after drop_caches: the program's executable, libraries
    and modules are cached wherever it runs, the same with or without a shim, and are not a
    run's footprint (Python's were 13 MiB of a copy's peak). The same holds for a
    contender's own files (`Contender.warm`: the launcher and the library; read inside the
    group, they put copyfile's s20 peak at 65-66 MiB instead of 63)."""
    for cmd in cmds:
        run_checked(cmd, env=env, expect_err=None)


def free_page_reporting():
    """Whether a virtio balloon reports free pages to the host (feature bit 5)."""
    for dev in Path("/sys/bus/virtio/devices").glob("*"):
        try:
            if (dev / "device").read_text().strip() == "0x0005" and (dev / "features").read_text()[5] == "1":
                return True
        except (OSError, IndexError):
            pass
    return False


FREE_PAGE_REPORTING = free_page_reporting()
REPORTING_DELAY = Path("/sys/module/page_reporting/parameters/min_free_ms")


@contextlib.contextmanager
def reporting_held_back():
    """Free memory reported to the host only after it has been free 100 s (the longest
    this kernel's page_reporting.min_free_ms takes), restored after: while a scenario runs,
    a page its program frees is not handed back and faulted in again by the host a few
    seconds later. For a scenario that times single first touches, each of which can take
    such a host fault (s50's shimmed rounds over 15 ms: 5 of 28 without this, 1 of 15 with
    it; bench/results/vm-memory.md). Nothing where the machine reports no
    free pages or its kernel has no such parameter; yields whether it held them back."""
    try:
        before = REPORTING_DELAY.read_text().strip() if FREE_PAGE_REPORTING else None
        if before is not None:
            REPORTING_DELAY.write_text("100000\n")
    except OSError:
        before = None
    try:
        yield before is not None
    finally:
        if before is not None:
            REPORTING_DELAY.write_text(before + "\n")


def tail(err):
    """The last line of a program's stderr, short enough for a table cell."""
    text = err.decode(errors="replace") if isinstance(err, bytes) else str(err)
    lines = text.strip().splitlines()
    return (lines[-1] if lines else "")[:160]


def check_exit(code, err, expect_err=b""):
    """A run's exit status must be 0 and its stderr as expected (empty by default: a shim
    warning, or ld.so's "cannot be preloaded", lands there). None skips the stderr check."""
    if code != 0:
        raise Failed(f"exit status {code}" + (f": {tail(err)}" if err else ""))
    if expect_err is not None and err != expect_err:
        extra = [l for l in err.splitlines() if l not in expect_err.splitlines()]
        raise Failed(f"unexpected stderr: {tail(extra[0])}" if extra else f"stderr lacks {tail(expect_err)}")


def run_checked(cmd, env=None, stdout=subprocess.DEVNULL, expect_out=None, expect_err=b"", preexec_fn=None):
    """Runs one contender's command, timed, and checks it (check_exit; stdout equal to
    expect_out when given). Returns (seconds, stdout bytes or None)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=dict(os.environ, **env) if env else None, stdout=stdout,
                         stderr=subprocess.PIPE, preexec_fn=preexec_fn)
    out, err = p.communicate()
    secs = time.monotonic() - t0
    check_exit(p.returncode, err, expect_err)
    if expect_out is not None and out != expect_out:
        raise Failed(f"stdout {out[:60]!r} where {expect_out[:60]!r} was expected")
    return secs, out


def parse_json(out, what):
    """A contender's one-line JSON output; garbage fails the run, not the harness."""
    try:
        return json.loads(out)
    except (ValueError, TypeError) as e:
        raise Failed(f"{what}: no JSON on stdout ({e})")


class DamonPaused:
    """Stops the machine's DAMON daemons (kdamond) for a measurement and restarts them after.
    A DAMON pageout scheme reclaims memory that has been idle for a while in the background,
    also from a warm working set no contender touches. `paused` lists the daemons it stopped."""

    ROOT = Path("/sys/kernel/mm/damon/admin/kdamonds")

    def __enter__(self):
        self.paused = []
        for d in sorted(self.ROOT.glob("[0-9]*")) if self.ROOT.exists() else []:
            try:
                if (d / "state").read_text().strip() == "on":
                    (d / "state").write_text("off\n")
                    self.paused.append(d)
            except OSError:
                pass
        return self

    def __exit__(self, *exc):
        for d in self.paused:
            try:
                (d / "state").write_text("on\n")
            except OSError as e:
                print(f"bench: could not restart DAMON {d.name}: {e}", file=sys.stderr)


def vmstat(keys=("allocstall_normal", "allocstall_movable", "pgscan_direct", "pgsteal_direct")):
    out = {}
    for line in Path("/proc/vmstat").read_text().splitlines():
        k, v = line.split()
        if k in keys:
            out[k] = int(v)
    return out


class Cgroup:
    """A fresh cgroup-v1 memory group; commands run inside it via `run`. Measure what is
    cached before closing it: close may fall back to memory.force_empty, which evicts."""

    seq = 0

    def __init__(self, limit_bytes=None):
        Cgroup.seq += 1
        self.path = Path(f"/sys/fs/cgroup/memory/dropbehind-bench-{os.getpid()}-{Cgroup.seq}")
        self.path.mkdir()
        if limit_bytes:
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))

    def read(self, name):
        return int((self.path / name).read_text().split()[0])

    def _enter(self):
        # In the child before exec: a failed join raises in Popen, so nothing runs outside.
        with open(self.path / "cgroup.procs", "w") as f:
            f.write(str(os.getpid()))

    def popen(self, cmd, env=None, **kw):
        return subprocess.Popen(cmd, preexec_fn=self._enter, env=dict(os.environ, **env) if env else None, **kw)

    def run(self, cmd, **kw):
        """run_checked inside this group."""
        return run_checked(cmd, preexec_fn=self._enter, **kw)

    def peak_mib(self):
        return self.read("memory.max_usage_in_bytes") / MIB

    def close(self):
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except OSError:
                # pages still charged: move them out by forcing empty, then retry
                try:
                    (self.path / "memory.force_empty").write_text("0")
                except OSError:
                    pass
                time.sleep(0.1)
        print(f"bench: could not remove {self.path}", file=sys.stderr)

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def cached_mib(path):
    out = subprocess.run([str(LAUNCHER), "stat", "--json", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        raise Failed(f"dropbehind stat {Path(path).name}: {tail(out.stderr)}")
    return json.loads(out.stdout)[0]["cached_pages"] * 4096 / MIB


def _sha256(chunks):
    h = hashlib.sha256()
    for c in chunks:
        h.update(c)
    return h.hexdigest()


def _chunks(f):
    return iter(lambda: f.read(MIB), b"")


def digest(path, keep=False):
    """sha256 of a file. keep: store it beside the file (keyed by size and mtime) and reuse
    it, for source files, so that checking a copy reads only the copy."""
    path = Path(path)
    side = path.with_name(path.name + ".sha256")
    st = path.stat()
    key = f"{st.st_size} {st.st_mtime_ns}"
    if keep and side.exists():
        k, _, d = side.read_text().rpartition(" ")
        if k == key:
            return d
    with open(path, "rb") as f:
        d = _sha256(_chunks(f))
    if keep:
        side.write_text(f"{key} {d}")
    return d


def same_bytes(src, dst):
    """A copier's output must hold the source's bytes (compared by sha256)."""
    if not Path(dst).exists():
        raise Failed(f"no {Path(dst).name} written")
    if digest(dst) != digest(src, keep=True):
        raise Failed(f"{Path(dst).name} differs from {Path(src).name}")


def same_tar_member(src, archive, member):
    """tar's archive must hold the source's bytes as `member`."""
    try:
        with tarfile.open(archive) as t, t.extractfile(member) as f:
            d = _sha256(_chunks(f))
    except (OSError, KeyError, tarfile.TarError) as e:
        raise Failed(f"archive unreadable: {e}")
    if d != digest(src, keep=True):
        raise Failed(f"{member} in the archive differs from {Path(src).name}")


def make_file(path, mib):
    """A file of `mib` MiB of incompressible bytes, made once and reused; its digest is kept
    beside it (see digest)."""
    path = Path(path)
    if path.exists() and path.stat().st_size == mib * MIB:
        return path
    h = hashlib.sha256()
    with open(path, "wb") as f:
        chunk = os.urandom(MIB)
        for i in range(mib):
            # cheap but incompressible-enough: rotate a random MiB
            block = chunk[i % 4096 :] + chunk[: i % 4096]
            h.update(block)
            f.write(block)
    os.sync()
    st = path.stat()
    path.with_name(path.name + ".sha256").write_text(f"{st.st_size} {st.st_mtime_ns} {h.hexdigest()}")
    return path


# Counters of the shim's exit report (src/stats.rs wording), as read_stats returns them.
STATS = {
    "pages_released": r"^\s*pages released\s+(\d+)",
    "prefetch_batches": r"^\s*prefetched\s+\S+\s+\((\d+) batches",
    "maps_random": r"(\d+) given MADV_RANDOM",
    "dirs_prefetched": r"^\s*directories prefetched\s+(\d+)",
    "inodes_prefetched": r"^\s*directories prefetched\s+\d+\s+\((\d+) inodes",
    "dirs_warm": r"(\d+) big directories found warm",
}


def read_stats(path):
    """The shim's exit reports (DROPBEHIND_STATS=path, one per process that did something),
    STATS summed over them. No report at all fails the run: the shim was not preloaded or
    did nothing."""
    path = Path(path)
    if not path.exists():
        raise Failed("the shim wrote no stats report (not preloaded, or it did nothing)")
    text = path.read_text()
    return {k: sum(int(n) for n in re.findall(rx, text, re.M)) for k, rx in STATS.items()}


def make_tree(root, files, kib, dirs):
    """`files` files of `kib` KiB of random bytes over `dirs` directories, made once."""
    root = Path(root)
    done = root.with_name(root.name + ".complete")
    if done.exists():
        return root
    for i in range(files):
        sub = root / f"d{i % dirs:03}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"f{i:06}").write_bytes(os.urandom(kib * 1024))
    os.sync()
    done.write_text("")
    return root


def same_tree(a, b):
    out = subprocess.run(["diff", "-rq", str(a), str(b)], capture_output=True)
    if out.returncode != 0:
        raise Failed(f"{Path(b).name} differs from {Path(a).name}: {out.stdout[:200]!r}")


class Contender:
    """How to run a command under one contender. wrap(case, cmd) gives the command, or None
    when the contender does not apply to that case; env holds variables it adds; preload is
    the library, for scenarios that set LD_PRELOAD themselves (None: no shim); warm holds
    commands that read the contender's own files (see warm_programs)."""

    def __init__(self, name, wrap=None, missing=None, env=None, preload=None, warm=None):
        self.name, self.missing, self.env, self.preload = name, missing, env or {}, preload
        self.wrap = wrap or (lambda case, cmd: cmd)
        self.warm = warm or []

    def warm_up(self, cmds):
        """Caches a case's program (`cmds`, see warm_programs) and this contender's own files."""
        warm_programs(cmds)
        warm_programs(self.warm, env=self.env)

    def preload_env(self, **extra):
        """Variables that preload this contender's library into a program run directly."""
        return dict({"LD_PRELOAD": str(self.preload)} if self.preload else {}, **self.env, **extra)


def have(cmd):
    return subprocess.run(["sh", "-c", f"command -v {cmd}"], capture_output=True).returncode == 0


OTHER = "dropbehind (other)"


def contender_table(other_lib=None):
    launcher = str(LAUNCHER)

    def shim(*opts):
        return lambda case, cmd: [launcher, *opts, "--", *cmd]

    # The launcher and the library, read as a run reads them.
    shim_files = [[launcher, "--", "true"]]
    table = {
        "no shim": Contender("no shim"),
        "dropbehind": Contender("dropbehind", shim(), preload=LIB, warm=shim_files),
        "dropbehind fadvise": Contender("dropbehind fadvise", shim("--backend", "fadvise"), preload=LIB, warm=shim_files),
        "dropbehind dontcache": Contender("dropbehind dontcache", shim("--backend", "dontcache"), preload=LIB, warm=shim_files),
        "nocache": Contender("nocache", lambda case, cmd: ["nocache", *cmd],
                             None if have("nocache") else "nocache not installed (apt-get install nocache)",
                             warm=[["nocache", "true"]]),
    }
    if other_lib:
        # The same launcher, told to preload the other build (it honours DROPBEHIND_LIB first).
        table[OTHER] = Contender(OTHER, shim(), env={"DROPBEHIND_LIB": str(other_lib)}, preload=Path(other_lib),
                                 warm=shim_files)
    return table


def machine_facts():
    """What the report says about the machine, read when the results are made."""
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 // 1024
    target = str(ROOT / "target")
    fs = sh(["findmnt", "-n", "-o", "FSTYPE", "--target", target], capture_output=True, text=True).stdout.strip()
    dev = sh(["findmnt", "-n", "-o", "SOURCE", "--target", target], capture_output=True, text=True).stdout.strip()
    return dict(read_on=time.strftime("%Y-%m-%d"), kernel=platform.release(), cpus=os.cpu_count(), mem_gib=mem,
                data_fs=fs, data_dev=dev, read_ahead_kb=read_ahead_kb(dev), nocache=have("nocache"),
                damon=damon_schemes(), free_page_reporting=FREE_PAGE_REPORTING)


class DiskRequests:
    """Write requests the disk holding `path` completed between start() and stop(), from
    /sys/class/block/DEV/stat (what the block layer merged does not count): a copy that
    writes back file by file sends one per small file, where sync's one pass merges
    neighbours. None where the device has no statistics (a filesystem not on a block
    device)."""

    def __init__(self, path):
        src = sh(["findmnt", "-n", "-o", "SOURCE", "--target", str(path)], capture_output=True, text=True).stdout.strip()
        self.stat = Path(f"/sys/class/block/{os.path.basename(os.path.realpath(src))}/stat") if src else None
        self.at = None

    def writes(self):
        try:
            return int(self.stat.read_text().split()[4]) if self.stat else None
        except (OSError, IndexError, ValueError):
            return None

    def start(self):
        self.at = self.writes()

    def stop(self):
        now = self.writes()
        return None if now is None or self.at is None else now - self.at


class CpuBusy:
    """How busy the machine's CPUs were between start() and stop(), from /proc/stat: the
    share of all CPUs' time spent running (not idle, waiting for I/O or taken by the host),
    and those CPU-seconds. A copy whose run keeps every CPU busy is bound by CPU, whatever
    the disk allows."""

    @staticmethod
    def _ticks():
        # user nice system idle iowait irq softirq steal (guest time is counted in user too)
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
        return f[0] + f[1] + f[2] + f[5] + f[6], sum(f)

    def start(self):
        self.at = self._ticks()

    def stop(self):
        busy, total = self._ticks()
        busy, total = busy - self.at[0], total - self.at[1]
        hz = os.sysconf("SC_CLK_TCK")
        return dict(cpu_busy=100.0 * busy / total if total else 0.0, cpu_seconds=busy / hz)


def read_ahead_kb(dev):
    """A block device's readahead (sysfs), or None."""
    p = Path(f"/sys/block/{os.path.basename(dev)}/queue/read_ahead_kb")
    return int(p.read_text()) if p.exists() else None


def damon_schemes():
    """The running DAMON schemes: action, minimum idle age (s), quota (MiB/s, 0: none)."""
    out = []
    for d in sorted(DamonPaused.ROOT.glob("[0-9]*")) if DamonPaused.ROOT.exists() else []:
        try:
            if (d / "state").read_text().strip() == "on":
                out += kdamond_schemes(d)
        except (OSError, ValueError):
            continue
    return out


def kdamond_schemes(d):
    """The schemes of one kdamond directory (sysfs admin interface)."""
    out = []
    for ctx in sorted((d / "contexts").glob("[0-9]*")):
        aggr_us = int((ctx / "monitoring_attrs/intervals/aggr_us").read_text())
        for s in sorted((ctx / "schemes").glob("[0-9]*")):
            q = s / "quotas"
            per_ms = int((q / "reset_interval_ms").read_text())
            quota = int((q / "bytes").read_text()) / MIB * 1000 / per_ms if per_ms else 0
            out.append(dict(action=(s / "action").read_text().strip(),
                            min_age_s=int((s / "access_pattern/age/min").read_text()) * aggr_us / 1e6,
                            quota_mib_s=round(quota, 1)))
    return out


class Bench:
    def __init__(self, quick, outdir, reps=None, other_lib=None):
        self.quick = quick
        self.outdir = Path(outdir)
        self.outdir.mkdir(parents=True, exist_ok=True)
        self.reps_override = reps
        # A min-max range needs a few points: comparing two builds runs every case 3 times at least.
        self.min_reps = 3 if other_lib else 1
        self.table_of = contender_table(other_lib)
        self.plot_prefix = "quick-" if quick else ""
        self.samples = []
        self.sections = []
        self.plots = []
        self.outputs = {}
        self.work = ROOT / "target" / "bench-data"
        self.work.mkdir(parents=True, exist_ok=True)
        self.scenario = "?"

    def size(self, full, quick):
        return quick if self.quick else full

    def contenders(self, *names):
        """The named contenders, in order; with --vs-lib, the other build follows "dropbehind"."""
        out = []
        for n in names:
            out.append(self.table_of[n])
            if n == "dropbehind" and OTHER in self.table_of:
                out.append(self.table_of[OTHER])
        return out

    def progress(self, case, contender, rep, reps):
        print(f"\r\033[K[{self.scenario}] {case} / {contender} / rep {rep + 1}/{reps}", end="", file=sys.stderr, flush=True)

    def record(self, case, contender, rep, **metrics):
        self.samples.append(dict(scenario=self.scenario, case=case, contender=contender, rep=rep, **metrics))

    def interleave(self, cases, conts, reps, fn):
        """fn(case, contender) -> metrics dict (or None when the contender does not apply).
        Runs A B B A: the order flips every repetition, so that neither contender always runs
        right after the other (seen here: cold random preads measured 1.02x in A B A B order
        over 21 repetitions, 0.96x in A B B A order). A run that raises Failed is recorded
        with its reason and no figures; that contender's later repetitions of the case are
        skipped."""
        reps = self.reps_override or max(reps, self.min_reps)
        failed = set()
        for rep in range(reps):
            for case in cases:
                for c in (conts if rep % 2 == 0 else list(reversed(conts))):
                    if c.missing or (case, c.name) in failed:
                        continue
                    self.progress(case, c.name, rep, reps)
                    try:
                        m = fn(case, c)
                    except Failed as e:
                        failed.add((case, c.name))
                        print(f"\r\033[K[{self.scenario}] {case} / {c.name}: FAILED: {e}", file=sys.stderr)
                        self.record(case, c.name, rep, failed=str(e))
                        continue
                    if m is not None:
                        self.record(case, c.name, rep, **m)
        print("\r\033[K", end="", file=sys.stderr)

    def rows(self, case, contender):
        """This scenario's successful runs of a case by a contender."""
        return [s for s in self.samples if s["scenario"] == self.scenario and s["case"] == case
                and s["contender"] == contender and "failed" not in s]

    def same_output(self, key, contender, out):
        """What a contender printed for a command must equal what the plain run printed
        (the "no shim" contender, which interleave runs first)."""
        h = hashlib.sha256(out).hexdigest()
        ref = self.outputs.setdefault(key, h) if contender.name == "no shim" else self.outputs.get(key)
        if ref is None:
            raise Failed("no plain run's output to compare with (it failed)")
        if h != ref:
            raise Failed(f"output differs from the plain run's ({len(out)} bytes)")

    def source_file(self, mib, name="copy-src"):
        """A `mib` MiB file alone in its own directory (tar archives the directory), made
        once and reused across runs: (directory, file)."""
        d = self.work / f"{name}-{mib}"
        d.mkdir(exist_ok=True)
        return d, make_file(d / "F", mib)

    def pyplot(self):
        """matplotlib's pyplot for a new figure, or None when matplotlib is missing."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return None
        return plt

    def save_plot(self, fig, ax, name, title, xlabel, ylabel):
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        name = self.plot_prefix + name
        fig.savefig(self.outdir / name, dpi=100)
        self.plots.append(name)

    def table(self, title, cases, conts, metrics, baseline="no shim", ratio_of=None, note=""):
        """A table of the report (bench/report.py renders it from the samples): metrics
        [(key, label, fmt)], median and min-max per cell, and the ratio of the medians of
        each `ratio_of` key against the baseline contender of the same case."""
        self.sections.append(dict(
            kind="table", scenario=self.scenario, title=title, cases=list(cases),
            contenders=[c.name for c in conts], missing={c.name: c.missing for c in conts if c.missing},
            metrics=[list(m) for m in metrics], baseline=baseline,
            ratios=[ratio_of] if isinstance(ratio_of, str) else list(ratio_of or []), note=note))

    def text(self, text):
        """A paragraph of the report, written from this run's measurements."""
        self.sections.append(dict(kind="text", scenario=self.scenario, text=text))

    def summary(self, name, cases, contender, metrics, baseline="no shim"):
        """Figures for the README block `name` (outside the tables): the ratio of the medians
        of each metric [(key, label)], contender against baseline, per case."""
        self.sections.append(dict(kind="summary", name=name, scenario=self.scenario, cases=list(cases),
                                  contender=contender, baseline=baseline, metrics=[list(m) for m in metrics]))


def load_scenarios(only):
    mods = []
    for p in sorted((ROOT / "bench" / "scenarios").glob("*.py")):
        if only and p.stem not in only:
            continue
        spec = importlib.util.spec_from_file_location(p.stem, p)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        mods.append((getattr(m, "ORDER", 50), p.stem, m))
    unknown = set(only or []) - {name for _, name, _ in mods}
    if unknown:
        sys.exit(f"bench: no scenario {', '.join(sorted(unknown))} in bench/scenarios/")
    return [(name, m) for _, name, m in sorted(mods)]


def main():
    import report

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--quick", action="store_true", help="reduced sizes and repetitions")
    g.add_argument("--full", action="store_true", help="the seed experiments' sizes")
    ap.add_argument("--only", nargs="*", help="scenario file names (without .py)")
    ap.add_argument("--reps", type=int, help="repetitions of every case, instead of each scenario's own")
    ap.add_argument("--vs-lib", metavar="LIB", help=f"another libdropbehind.so, run as the contender \"{OTHER}\"")
    ap.add_argument("--out", default=str(RESULTS), help="directory for the results (default bench/results)")
    ap.add_argument("--no-readme", action="store_true", help="don't update README.md")
    a = ap.parse_args()
    if a.vs_lib and not Path(a.vs_lib).is_file():
        sys.exit(f"bench: --vs-lib {a.vs_lib}: no such file")
    complete = a.full and not a.only and not a.reps and not a.vs_lib
    name = "latest" if complete else "quick" if a.quick else "partial"
    b = Bench(a.quick, a.out, a.reps, a.vs_lib)
    t0 = time.time()
    crashed = []
    for sname, mod in load_scenarios(a.only):
        b.scenario = sname
        print(f"== {sname}: {mod.TITLE}", file=sys.stderr)
        s0 = time.time()
        try:
            mod.run(b)
        except Exception:
            # The harness or a fixture broke (a contender's failure is caught per run): the
            # other scenarios still run, and the report says what happened.
            traceback.print_exc()
            crashed.append(sname)
            b.text(f"### {mod.TITLE}\n\nScenario crashed: {tail(traceback.format_exc())}\n")
        print(f"   ({time.time() - s0:.0f} s)", file=sys.stderr)
    args = sys.argv[1:]
    command = "make bench" if complete else "make bench-quick" if args == ["--quick"] else "bench/run.sh " + " ".join(args)
    commit = subprocess.run(["git", "-C", str(ROOT), "describe", "--always", "--dirty"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    results = dict(format=2, mode="bench" if a.full else "bench-quick", complete=complete, command=command,
                   commit=commit, date=time.strftime("%Y-%m-%d"), seconds=round(time.time() - t0), machine=machine_facts(),
                   vs_lib=a.vs_lib, sections=b.sections, plots=b.plots, samples=b.samples)
    out = Path(a.out)
    (out / f"{name}.json").write_text(json.dumps(results, indent=1) + "\n")
    md = report.render(results)
    (out / f"{name}.md").write_text(md)
    print(md)
    if complete and not a.no_readme and out.resolve() == RESULTS.resolve():
        if crashed:
            print(f"bench: README left alone: {', '.join(crashed)} crashed", file=sys.stderr)
        else:
            report.update_readme(results)
    sys.exit(1 if crashed else 0)


if __name__ == "__main__":
    # Run as the module "bench" that the scenarios import, so that they share its classes
    # (an exception class of a second copy would not be caught here).
    import bench

    bench.main()
