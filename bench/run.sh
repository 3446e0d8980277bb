#!/usr/bin/env bash
# Benchmark suite entry: `bench/run.sh --quick` (under 5 minutes) or `--full`.
# Needs root (drop_caches, memory cgroups); installs the peers it compares against.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ] || [ ! -w /sys/fs/cgroup/memory ]; then
    echo "bench: needs root and the cgroup v1 memory controller (drop_caches, memory cgroups)" >&2
    exit 2
fi
missing=()
command -v nocache >/dev/null || missing+=(nocache)
command -v rsync >/dev/null || missing+=(rsync)
command -v fio >/dev/null || missing+=(fio)
if [ ${#missing[@]} -gt 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) ||
        echo "bench: could not install ${missing[*]}; those columns will say why" >&2
fi
python3 -c 'import matplotlib' 2>/dev/null || pip install -q matplotlib >/dev/null 2>&1 ||
    echo "bench: matplotlib missing, plots skipped" >&2
(cd "$ROOT" && cargo build --release --locked --all-targets -q)
exec python3 "$ROOT/bench/bench.py" "$@"
