#!/usr/bin/env bash
# Benchmark suite entry: `bench/run.sh --quick` (reduced sizes) or `--full`; any other
# option goes to bench/bench.py (--only, --reps N, --vs-lib LIB, --out DIR; see --help).
# Needs root (drop_caches, memory cgroups); installs the peers it compares against and the
# slow-disk fixture's tools.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
if [ "$(id -u)" != 0 ] || [ ! -w /sys/fs/cgroup/memory ]; then
    echo "bench: needs root and the cgroup v1 memory controller (drop_caches, memory cgroups)" >&2
    exit 2
fi
# tool -> Debian package
declare -A pkg=([nocache]=nocache [rsync]=rsync [fio]=fio [nbdkit]=nbdkit [nbdfuse]=libnbd-bin
    [fusermount3]=fuse3 [mkfs.xfs]=xfsprogs [mkfs.btrfs]=btrfs-progs)
missing=()
for tool in "${!pkg[@]}"; do
    command -v "$tool" >/dev/null || missing+=("${pkg[$tool]}")
done
# A library, not a tool: the start-up rows' reference preload.
ls /usr/lib/*-linux-gnu/libeatmydata.so.1 >/dev/null 2>&1 || missing+=(libeatmydata1)
if [ ${#missing[@]} -gt 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null) ||
        echo "bench: could not install ${missing[*]}; those columns will say why" >&2
fi
python3 -c 'import matplotlib' 2>/dev/null || pip install -q matplotlib >/dev/null 2>&1 ||
    echo "bench: matplotlib missing, plots skipped" >&2
(cd "$ROOT" && cargo build --release --locked --all-targets -q)
exec python3 "$ROOT/bench/bench.py" "$@"
