#!/usr/bin/env python3
"""The benchmark report: Markdown made from a results file that bench/bench.py wrote, and
the README's generated blocks. Every figure in them is computed here from the samples in
the results file (or is a sentence the run wrote from its own measurements), so they can be
regenerated at any time and are never edited by hand.

  bench/report.py                 bench/results/latest.md and the README's blocks, from
                                  bench/results/latest.json (the last full `make bench`)
  bench/report.py RESULTS.json    RESULTS.md only (e.g. bench/results/quick.json)
  --check                         change nothing; exit 1 if a regenerated file would differ
  --merge RUN.json                fold a later full-size run of some scenarios (bench.py --full
                                  --only ..., which writes partial.json) into latest.json: their
                                  tables, samples and README figures replace the full run's,
                                  and the report names the run each came from

README blocks: the tables between <!-- bench:begin --> and <!-- bench:end -->, and the
figures between <!-- bench:NAME:begin --> and <!-- bench:NAME:end --> for each summary a
scenario declared (Bench.summary).
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

from bench import OTHER, RESULTS, ROOT

README = ROOT / "README.md"


def cell(vals, fmt):
    if not vals:
        return "-"
    if isinstance(vals[0], bool):
        return "yes" if all(vals) else "NO"
    med = statistics.median(vals)
    if len(vals) == 1 or min(vals) == max(vals):
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(vals))}-{fmt.format(max(vals))})"


class Samples:
    def __init__(self, samples):
        self.by = {}
        for s in samples:
            self.by.setdefault((s["scenario"], s["case"], s["contender"]), []).append(s)

    def rows(self, scenario, case, contender):
        """A contender's runs of a case, and why it failed (None when it did not)."""
        rows = self.by.get((scenario, case, contender), [])
        failed = next((r["failed"] for r in rows if "failed" in r), None)
        return [r for r in rows if "failed" not in r], failed

    def values(self, scenario, case, contender, key):
        rows, failed = self.rows(scenario, case, contender)
        return None if failed else [r[key] for r in rows if r.get(key) is not None]


def ratio(num, den):
    return statistics.median(num) / statistics.median(den) if num and den and statistics.median(den) else None


def render_table(sec, data):
    metrics, ratios, base = sec["metrics"], sec["ratios"], sec["baseline"]
    labels = {m[0]: m[1] for m in metrics}
    head = ["case", "contender"] + [m[1] for m in metrics] + [f"{labels.get(r, r)} vs {base}" for r in ratios]
    lines = [f"### {sec['title']}", ""]
    if sec["note"]:
        lines += [sec["note"], ""]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for case in sec["cases"]:
        for name in sec["contenders"]:
            if name in sec["missing"]:
                if case == sec["cases"][0]:
                    cells = ["n/a"] * (len(head) - 3) + [f"n/a ({sec['missing'][name]})"]
                    lines.append("| " + " | ".join([case, name] + cells) + " |")
                continue
            rows, failed = data.rows(sec["scenario"], case, name)
            if failed:
                # No figures: a run that did not do its job would look fast and small.
                cells = [f"**failed**: {failed.replace('|', '/')}"] + ["-"] * (len(head) - 3)
                lines.append("| " + " | ".join([case, name] + cells) + " |")
                continue
            if not rows:
                continue
            cells = [case, name]
            for key, _, fmt in metrics:
                cells.append(cell([r[key] for r in rows if r.get(key) is not None], fmt))
            for r in ratios:
                q = ratio(data.values(sec["scenario"], case, name, r), data.values(sec["scenario"], case, base, r))
                cells.append("-" if q is None else f"{q:.2f}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def compare_builds(results, data):
    """With --vs-lib: is each build's median within the other's min-max range, for every
    case and figure of every table both builds ran in? "one way": only one of the two is."""
    lines, counts = [], {"yes": 0, "one way": 0}
    for sec in results["sections"]:
        if sec["kind"] != "table" or OTHER not in sec["contenders"]:
            continue
        for case in sec["cases"]:
            for key, label, fmt in sec["metrics"]:
                a, b = (data.values(sec["scenario"], case, n, key) for n in ("dropbehind", OTHER))
                if a is None or b is None:
                    verdict, shown = "failed", ["failed" if v is None else cell(v, fmt) for v in (a, b)]
                elif not a or not b or isinstance(a[0], bool):
                    if not a and not b:
                        continue
                    verdict, shown = ("yes" if cell(a, fmt) == cell(b, fmt) else "NO"), [cell(a, fmt), cell(b, fmt)]
                else:
                    shown = [cell(a, fmt), cell(b, fmt)]
                    # At the table's precision: 57.2 and 57.4 MiB both show as 57.
                    a, b = ([float(fmt.format(v)) for v in vals] for vals in (a, b))
                    ins = (min(b) <= statistics.median(a) <= max(b)) + (min(a) <= statistics.median(b) <= max(a))
                    verdict = ["NO", "one way", "yes"][ins]
                counts[verdict] = counts.get(verdict, 0) + 1
                lines.append(f"| {sec['scenario']} | {case} | {label} | {shown[0]} | {shown[1]} | {verdict} |")
    if not lines:
        return ""
    reps = max((s["rep"] + 1 for s in results["samples"] if s["contender"] == OTHER), default=0)
    return "\n".join([
        f"### dropbehind against {OTHER} (`{results['vs_lib']}`)", "",
        f"Of {len(lines)} figures: {counts['yes']} with each build's median within the other's min-max range, "
        f"{counts['one way']} with one of the two, {counts.get('failed', 0)} failed "
        f"({reps} repetitions per case at most).", "",
        f"| scenario | case | figure | dropbehind | {OTHER} | medians within the other's range |",
        "|---|---|---|---|---|---|", *lines]) + "\n"


def machine_line(m):
    if isinstance(m, str):  # results from before the facts were kept one by one
        return m
    ra = f", read_ahead_kb {m['read_ahead_kb']}" if m.get("read_ahead_kb") is not None else ""
    s = (f"Linux {m['kernel']}, {m['cpus']} CPUs, {m['mem_gib']} GiB RAM, data on {m['data_fs']} ({m['data_dev']}{ra}), "
         f"nocache {'present' if m['nocache'] else 'absent'}")
    if m.get("damon") is not None:
        s += "".join(
            f", DAMON {d['action']} of memory idle {d['min_age_s']:g} s or more"
            + (f", up to {d['quota_mib_s']:g} MiB/s" if d["quota_mib_s"] else "") for d in m["damon"]
        ) or ", no DAMON scheme running"
    if m.get("free_page_reporting"):
        s += ", free page reporting on (memory touched before the timed copies)"
    return s


def render(results, link_prefix=""):
    """The report as Markdown; link_prefix goes before plot file names (the README's
    links point into bench/results/)."""
    data = Samples(results["samples"])
    m = results["machine"]
    read_on = "" if isinstance(m, str) or m.get("read_on", results["date"]) == results["date"] else f" (read on {m['read_on']})"
    header = (
        f"Made by `{results['command']}` on {results['date']} in {results['seconds']} s. "
        f"Machine{read_on}: {machine_line(m)}. Each cell: median (min-max) over the repetitions, contenders "
        "interleaved; caches dropped before every cold run.\n"
    )
    for scen, run in sorted(results.get("refreshed", {}).items()):
        header += (f"\n{scen} is from a later run: `{run['command']}` on {run['date']} in {run['seconds']} s, "
                   f"at commit {run['commit']}.\n")
    parts = []
    for sec in results["sections"]:
        if sec["kind"] == "table":
            parts.append(render_table(sec, data))
        elif sec["kind"] == "text":
            parts.append(sec["text"])
    if results.get("vs_lib"):
        parts.append(compare_builds(results, data))
    md = header + "\n" + "\n".join(p for p in parts if p)
    for p in results["plots"]:
        md += f"\n![{p}]({link_prefix}{p})\n"
    return md


def render_summary(sec, results):
    """One README block of figures outside the tables: contender against baseline, the
    ratio of the medians per case, for each metric."""
    data = Samples(results["samples"])
    parts = []
    for key, label in sec["metrics"]:
        figs = []
        for case in sec["cases"]:
            q = ratio(data.values(sec["scenario"], case, sec["contender"], key),
                      data.values(sec["scenario"], case, sec["baseline"], key))
            figs.append(f"{case} " + ("failed" if q is None else f"{q:.2f}x"))
        parts.append(f"{label} " + ", ".join(figs))
    run = results.get("refreshed", {}).get(sec["scenario"])
    when = f"run of {run['date']}" if run else f"last full run, {results['date']}"
    return f"{when}: " + "; ".join(parts)


def readme_blocks(results):
    blocks = {"bench": "\n" + render(results, "bench/results/") + "\n"}
    for sec in results["sections"]:
        if sec["kind"] == "summary":
            blocks[sec["name"]] = render_summary(sec, results)
    return blocks


def with_blocks(text, blocks):
    """README text with every generated block replaced; a marker naming no block is an error
    (its figures would go stale)."""
    for name in re.findall(r"<!-- bench:([\w-]+):begin -->", text) + ["bench"]:
        if name not in blocks:
            sys.exit(f"report: README block {name!r} has no figures in the results")
        begin, end = ("<!-- bench:begin -->", "<!-- bench:end -->") if name == "bench" else (
            f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->")
        if text.count(begin) != 1 or text.count(end) != 1:
            sys.exit(f"report: README needs exactly one {begin} and one {end}")
        pre, rest = text.split(begin, 1)
        _, post = rest.split(end, 1)
        text = pre + begin + blocks[name] + end + post
    return text


def update_readme(results, check=False):
    """Writes the README's blocks from a complete full run; with check, only says whether
    they are up to date. Returns True when nothing would change."""
    if not results.get("complete"):
        sys.exit("report: the README's figures come from a complete `make bench` only")
    text = README.read_text()
    new = with_blocks(text, readme_blocks(results))
    if not check and new != text:
        README.write_text(new)
    return new == text


def merge(run_path, latest_path):
    """Replaces, in the full run, every scenario the later run has: its sections (in the full
    run's order; a scenario the full run lacks after those whose names sort before it),
    samples and plots, and notes where they came from."""
    run, latest = json.loads(run_path.read_text()), json.loads(latest_path.read_text())
    if run.get("format") != 2 or run.get("mode") != "bench" or run.get("vs_lib"):
        sys.exit(f"report: {run_path} is not a --full run of this build alone: not merged")
    scens = {x["scenario"] for x in run["sections"]}
    sections = []
    for sec in latest["sections"]:
        if sec["scenario"] in scens:
            if not any(x["scenario"] == sec["scenario"] for x in sections):
                sections += [x for x in run["sections"] if x["scenario"] == sec["scenario"]]
        else:
            sections.append(sec)
    # Names sort as the suite runs them (sNN_...).
    for x in [x for x in run["sections"] if x["scenario"] not in {y["scenario"] for y in sections}]:
        at = max((i + 1 for i, y in enumerate(sections) if y["scenario"] <= x["scenario"]), default=0)
        sections.insert(at, x)
    latest["sections"] = sections
    latest["samples"] = [x for x in latest["samples"] if x["scenario"] not in scens] + run["samples"]
    latest["plots"] = sorted(set(latest["plots"]) | set(run["plots"]))
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    # Where the run wrote its files is no part of how to repeat it.
    command = re.sub(r" --out \S+| --no-readme", "", run["command"])
    for scen in scens:
        latest.setdefault("refreshed", {})[scen] = dict(
            command=command, date=run["date"], seconds=run["seconds"], commit=run.get("commit", commit))
    latest_path.write_text(json.dumps(latest, indent=1) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="?", default=str(RESULTS / "latest.json"))
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a regenerated file would differ")
    ap.add_argument("--merge", metavar="RUN.json", help="fold a later --full run of some scenarios into latest.json")
    a = ap.parse_args()
    if a.merge:
        merge(Path(a.merge), RESULTS / "latest.json")
    path = Path(a.results)
    results = json.loads(path.read_text())
    if results.get("format") != 2:
        sys.exit(f"report: {path} was written by an older bench.py (no table layout kept): run the bench again")
    md_path = path.with_suffix(".md")
    md = render(results)
    same = md_path.exists() and md_path.read_text() == md
    if not a.check and not same:
        md_path.write_text(md)
    if path.resolve() == (RESULTS / "latest.json").resolve():
        same = update_readme(results, a.check) and same
    if a.check and not same:
        sys.exit(f"report: {md_path.name} or README.md differ from what {path.name} gives (bench/report.py regenerates them)")


if __name__ == "__main__":
    main()
