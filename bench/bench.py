#!/usr/bin/env python3
"""The benchmark harness: runs every scenario in bench/scenarios/ (one small file each),
contenders interleaved (A B A B ...), and writes bench/results/latest.{md,json} and PNG plots.

A scenario module defines TITLE, ORDER (sort key) and run(b), where b is the Bench below.
"""
import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REL = ROOT / "target" / "release"
LIB = REL / "libdropbehind.so"
LAUNCHER = REL / "dropbehind"
EXAMPLES = REL / "examples"
MIB = 1 << 20


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=isinstance(cmd, str), **kw)


def drop_caches():
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


class DamonPaused:
    """Stops the machine's DAMON daemons (kdamond) for a measurement and restarts them after.
    On these VMs a DAMON pageout scheme reclaims memory idle for 60 s in the background: a
    warm working set left alone lost 2.2 MiB of 375 in 10 s and 39 MiB in 90 s, with nothing
    else running, which no contender causes. `paused` lists the daemons it stopped."""

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
    """A fresh cgroup-v1 memory group; commands run inside it via `run`."""

    seq = 0

    def __init__(self, limit_bytes=None):
        Cgroup.seq += 1
        self.path = Path(f"/sys/fs/cgroup/memory/dropbehind-bench-{os.getpid()}-{Cgroup.seq}")
        self.path.mkdir()
        if limit_bytes:
            (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))

    def read(self, name):
        return int((self.path / name).read_text().split()[0])

    def stat(self):
        return dict(l.split() for l in (self.path / "memory.stat").read_text().splitlines())

    def popen(self, cmd, **kw):
        procs = str(self.path / "cgroup.procs")

        def enter():
            with open(procs, "w") as f:
                f.write(str(os.getpid()))

        return subprocess.Popen(cmd, preexec_fn=enter, **kw)

    def run(self, cmd, stdout=subprocess.DEVNULL, stderr=None, check=True):
        t0 = time.monotonic()
        p = self.popen(cmd, stdout=stdout, stderr=stderr)
        out, _ = p.communicate()
        secs = time.monotonic() - t0
        if check and p.returncode != 0:
            raise RuntimeError(f"{cmd} exited {p.returncode}")
        return secs, out

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

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def cached_mib(path):
    out = subprocess.run([str(LAUNCHER), "stat", "--json", str(path)], capture_output=True, text=True)
    if out.returncode != 0:
        return float("nan")
    return json.loads(out.stdout)[0]["cached_pages"] * 4096 / MIB


def make_file(path, mib):
    path = Path(path)
    if path.exists() and path.stat().st_size == mib * MIB:
        return path
    with open(path, "wb") as f:
        chunk = os.urandom(MIB)
        for i in range(mib):
            # cheap but incompressible-enough: rotate a random MiB
            f.write(chunk[i % 4096 :] + chunk[: i % 4096])
    os.sync()
    return path


class Contender:
    """How to run a command under one contender. `wrap(case, cmd)` returns the command, or
    None when the contender does not apply to that case."""

    def __init__(self, name, wrap, missing=None):
        self.name, self.wrap, self.missing = name, wrap, missing


def have(cmd):
    return subprocess.run(["sh", "-c", f"command -v {cmd}"], capture_output=True).returncode == 0


def contenders(*names):
    launcher = str(LAUNCHER)
    table = {
        "no shim": Contender("no shim", lambda case, cmd: cmd),
        "dropbehind": Contender("dropbehind", lambda case, cmd: [launcher, "--", *cmd]),
        "dropbehind fadvise": Contender(
            "dropbehind fadvise", lambda case, cmd: [launcher, "--backend", "fadvise", "--", *cmd]
        ),
        "dropbehind dontcache": Contender(
            "dropbehind dontcache", lambda case, cmd: [launcher, "--backend", "dontcache", "--", *cmd]
        ),
        "nocache": Contender(
            "nocache",
            lambda case, cmd: ["nocache", *cmd],
            None if have("nocache") else "nocache not installed (apt-get install nocache)",
        ),
    }
    return [table[n] for n in names]


class Bench:
    def __init__(self, quick, outdir):
        self.quick = quick
        self.outdir = Path(outdir)
        self.outdir.mkdir(parents=True, exist_ok=True)
        self.samples = []
        self.sections = []
        self.plots = []
        self.work = ROOT / "target" / "bench-data"
        self.work.mkdir(parents=True, exist_ok=True)
        self.scenario = "?"

    def size(self, full, quick):
        return quick if self.quick else full

    def progress(self, case, contender, rep, reps):
        print(f"\r\033[K[{self.scenario}] {case} / {contender} / rep {rep + 1}/{reps}", end="", file=sys.stderr, flush=True)

    def record(self, case, contender, rep, **metrics):
        self.samples.append(dict(scenario=self.scenario, case=case, contender=contender, rep=rep, **metrics))

    def interleave(self, cases, conts, reps, fn):
        """fn(case, contender, cmd_wrap) -> metrics dict (or None to skip). Runs A B B A:
        the order flips every repetition, so that neither contender always runs right after
        the other (seen here: cold random preads measured 1.02x in A B A B order over 21
        repetitions, 0.96x in A B B A order)."""
        for rep in range(reps):
            for case in cases:
                for c in (conts if rep % 2 == 0 else list(reversed(conts))):
                    if c.missing:
                        continue
                    self.progress(case, c.name, rep, reps)
                    m = fn(case, c)
                    if m is not None:
                        self.record(case, c.name, rep, **m)
        print("\r\033[K", end="", file=sys.stderr)

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
        fig.savefig(self.outdir / name, dpi=100)
        self.plots.append(name)

    def rows(self, case, contender):
        return [s for s in self.samples if s["scenario"] == self.scenario and s["case"] == case and s["contender"] == contender]

    def table(self, title, cases, conts, metrics, baseline="no shim", ratio_of=None, note=""):
        """metrics: [(key, label, fmt)]. Median and min-max per cell; ratio of `ratio_of`
        against the baseline contender of the same case."""
        ratios = [ratio_of] if isinstance(ratio_of, str) else list(ratio_of or [])
        labels = {m[0]: m[1] for m in metrics}
        head = ["case", "contender"] + [m[1] for m in metrics] + [f"{labels.get(r, r)} vs {baseline}" for r in ratios]
        lines = [f"### {title}", ""]
        if note:
            lines += [note, ""]
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for case in cases:
            base = {r: [s[r] for s in self.rows(case, baseline)] for r in ratios}
            for c in conts:
                rows = self.rows(case, c.name)
                if c.missing:
                    if case == cases[0]:
                        lines.append(f"| {case} | {c.name} | " + " | ".join(["n/a"] * (len(head) - 2)) + f" |")
                        lines[-1] = lines[-1][:-1] + f"({c.missing}) |"
                    continue
                if not rows:
                    continue
                cells = [case, c.name]
                for key, _, fmt in metrics:
                    vals = [r[key] for r in rows if r.get(key) is not None]
                    cells.append(cell(vals, fmt))
                for r in ratios:
                    vals = [row[r] for row in rows]
                    cells.append(f"{statistics.median(vals) / statistics.median(base[r]):.2f}" if base[r] and vals else "-")
                lines.append("| " + " | ".join(cells) + " |")
        self.sections.append("\n".join(lines) + "\n")


def cell(vals, fmt):
    if not vals:
        return "-"
    if isinstance(vals[0], bool):
        return "yes" if all(vals) else "NO"
    med = statistics.median(vals)
    if len(vals) == 1 or min(vals) == max(vals):
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"


def load_scenarios(only):
    mods = []
    for p in sorted((ROOT / "bench" / "scenarios").glob("*.py")):
        spec = importlib.util.spec_from_file_location(p.stem, p)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        if not only or p.stem in only:
            mods.append((getattr(m, "ORDER", 50), p.stem, m))
    return [(name, m) for _, name, m in sorted(mods)]


def machine():
    mem = int(Path("/proc/meminfo").read_text().split()[1]) // 1024 // 1024
    fs = sh(["findmnt", "-n", "-o", "FSTYPE", "--target", str(ROOT / "target")], capture_output=True, text=True).stdout.strip()
    dev = sh("findmnt -n -o SOURCE --target " + str(ROOT / "target"), capture_output=True, text=True).stdout.strip()
    ra = ""
    name = os.path.basename(dev)
    p = Path(f"/sys/block/{name}/queue/read_ahead_kb")
    if p.exists():
        ra = f", read_ahead_kb {p.read_text().strip()}"
    return (
        f"Linux {platform.release()}, {os.cpu_count()} CPUs, {mem} GiB RAM, data on {fs} ({dev}{ra}), "
        f"nocache {'present' if have('nocache') else 'absent'}"
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--quick", action="store_true", help="reduced sizes, under 5 minutes")
    g.add_argument("--full", action="store_true", help="the seed experiments' sizes")
    ap.add_argument("--only", nargs="*", help="scenario file names (without .py)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--no-readme", action="store_true", help="don't update README.md")
    a = ap.parse_args()
    b = Bench(a.quick, a.out)
    t0 = time.time()
    for name, mod in load_scenarios(a.only):
        b.scenario = name
        print(f"== {name}: {mod.TITLE}", file=sys.stderr)
        s0 = time.time()
        mod.run(b)
        print(f"   ({time.time() - s0:.0f} s)", file=sys.stderr)
    mode = "bench-quick" if a.quick else "bench"
    header = (
        f"Made by `make {mode}` on {time.strftime('%Y-%m-%d')} in {time.time() - t0:.0f} s. "
        f"Machine: {machine()}. Each cell: median (min-max) over the repetitions, contenders "
        "interleaved; caches dropped before every cold run.\n"
    )
    md = header + "\n" + "\n".join(b.sections)
    for p in b.plots:
        md += f"\n![{p}]({p})\n"
    out = Path(a.out)
    (out / "latest.md").write_text(md)
    (out / "latest.json").write_text(json.dumps({"mode": mode, "machine": machine(), "samples": b.samples}, indent=1))
    if not a.no_readme and a.out == str(ROOT / "bench" / "results"):
        update_readme(md)
    print(md)


def update_readme(md):
    readme = ROOT / "README.md"
    text = readme.read_text()
    begin, end = "<!-- bench:begin -->", "<!-- bench:end -->"
    if begin in text and end in text:
        rel = md.replace("](", "](bench/results/")
        pre, rest = text.split(begin, 1)
        _, post = rest.split(end, 1)
        readme.write_text(pre + begin + "\n" + rel + "\n" + end + post)


if __name__ == "__main__":
    main()
