#!/bin/bash
# Part 3 of the cold-directory work in one command: the six 100k-entry aged directories
# (xfs, btrfs, ext4; aged as the benchmark ages them, --age 10, and less, --age 3), each
# served through the 2 ms slow disk, its I/O floor measured, then cold and warm `ls -l`
# and `du -s` with LIB timed against it, round by round (bench/cold_dirs.py). Prints one
# markdown table; every step's output stays in OUT.
#
#   bench/cold-dirs-table.sh OUT ROUNDS LIB
#
# Images are built once by scripts/aged-image.sh into target/bench-data (8 GiB sparse
# files, 1-3 minutes each) and reused; a floor in OUT is reused too (delete it to measure
# again). Needs root, nbdkit, nbdfuse, fio and perf (bench/cold_dirs.py). About 5 minutes
# an image with 5 rounds, more for xfs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -eq 3 ] || { echo "usage: cold-dirs-table.sh OUT ROUNDS LIB" >&2; exit 2; }
out=$1 rounds=$2 lib=$(realpath "$3")
mkdir -p "$out"
for fs in xfs btrfs ext4; do
    for age in 10 3; do
        name=$fs-age$age
        img=$here/target/bench-data/aged-$fs-100000.img
        [ "$age" = 10 ] || img=$here/target/bench-data/aged-$fs-100000-age$age.img
        "$here/scripts/aged-image.sh" "$img" --fs "$fs" --entries 100000 --age "$age" >/dev/null
        sd=$out/$name.disk
        python3 "$here/bench/cold_dirs.py" up "$img" "$fs" "$sd" >/dev/null
        trap 'python3 "$here/bench/cold_dirs.py" down "$sd"' EXIT
        # One untimed cold run first: it pays this machine's own disk for the image file.
        python3 "$here/bench/cold_dirs.py" timeline "$sd" "$lib" "du -s" >/dev/null 2>&1 || true
        [ -s "$out/$name.floor.json" ] ||
            python3 "$here/bench/cold_dirs.py" floor "$sd" >"$out/$name.floor.json"
        ROUND_DISK=1 python3 "$here/bench/cold_dirs.py" time "$sd" "$rounds" "$lib" >"$out/$name.time"
        python3 "$here/bench/cold_dirs.py" ratios "$out/$name.floor.json" "$out/$name.time" \
            >"$out/$name.ratios"
        python3 "$here/bench/cold_dirs.py" down "$sd"
        trap - EXIT
    done
done
python3 - "$out" <<'EOF'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| image | command | plain cold s | warm s | floor s | cold s | vs floor | vs bound | met |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
for fs in ["xfs", "btrfs", "ext4"]:
    for age, label in [(10, "benchmark-aged"), (3, "aged less")]:
        name = f"{fs}-age{age}"
        fl = json.loads((out / f"{name}.floor.json").read_text().strip().splitlines()[-1])
        warm = {}
        for line in (out / f"{name}.time").read_text().splitlines():
            r = json.loads(line) if line.startswith("{") else {}
            if r.get("summary") and r["temp"] == "warm" and r["contender"] == "no shim":
                warm[r["cmd"]] = r["median"]
        for line in (out / f"{name}.ratios").read_text().splitlines():
            r = json.loads(line)
            print(f"| {fs}, {label} | {r['cmd']} | {fl[r['cmd']]['plain_cold_s']:.2f} | "
                  f"{warm[r['cmd']]:.2f} | {r['floor_s']} | {r['seconds']:.3f} | "
                  f"{r['vs_floor']:.2f}x ({r['vs_floor_min']:.2f}-{r['vs_floor_max']:.2f}) | "
                  f"{r['vs_target']:.2f} | {'yes' if r['vs_target'] <= 1 else 'NO'} |")
print()
print('"vs bound": the median over rounds of each cold run over its round\'s bound, the larger')
print("of 3x the warm run (no shim) and 1.3x the floor (the plain run's reads over the round's")
print("reads per second at depth 32, plus the warm run); at most 1 meets it.")
EOF
