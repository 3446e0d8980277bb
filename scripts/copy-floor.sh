#!/usr/bin/env bash
# How fast can this disk copy a file without keeping it in memory? A copy whose page-cache
# footprint is bounded must have read AND written every byte before it ends; a plain copy
# ends once it has read the source, with the copy still dirty in memory. This measures,
# with fio (O_DIRECT, 1 MiB requests, 16 in flight per stream, caches dropped first):
#   read_s   reading SRC alone (about what a plain copy costs while its writes sit in memory)
#   write_s  writing as many bytes alone, over blocks laid out beforehand (no allocation)
#   both_s   both at once: the floor for any bounded copy (it still skips block allocation,
#            so real copies come out slower)
#   both_sync_s  both at once, then `sync`: on a virtual disk with a write cache in the host,
#            O_DIRECT writes end in the host's memory and the sync's flush writes them out
#            (1.1-2.3 s more for 2 GiB here); a copy timed until on disk (copy, then sync)
#            pays that flush too, so this is the floor to hold it against
#
#   scripts/copy-floor.sh SRC WORKDIR     (root: drop_caches; installs fio if missing)
# Prints one JSON line: {"bytes":N,"read_s":..,"write_s":..,"both_s":..,"both_sync_s":..}
set -euo pipefail
die() { echo "copy-floor: $*" >&2; exit 2; }
[ $# = 2 ] || die "usage: copy-floor.sh SRC WORKDIR"
src=$1 work=$2
[ "$(id -u)" = 0 ] || die "needs root (drop_caches)"
[ -f "$src" ] || die "no file $src"
if ! command -v fio >/dev/null; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fio >/dev/null) || die "needs fio"
fi
bytes=$(stat -c %s "$src")
scratch="$work/copy-floor.scratch"
trap 'rm -f "$scratch"' EXIT
common=(--direct=1 --bs=1M --ioengine=libaio --iodepth=16 --output-format=json)
reader=(--name=read --filename="$src" --rw=read --size="$bytes")
writer=(--name=write --filename="$scratch" --rw=write --size="$bytes")
# Lay the scratch file out (fio does it before its first job; this keeps it out of the timing).
fio "${common[@]}" "${writer[@]}" >/dev/null
run() { sync; echo 3 >/proc/sys/vm/drop_caches; fio "${common[@]}" "$@"; }
# The slowest job's runtime, in seconds.
seconds() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(max(max(j["read"]["runtime"], j["write"]["runtime"]) for j in d["jobs"]) / 1000)'; }
read_s=$(run "${reader[@]}" | seconds)
write_s=$(run "${writer[@]}" | seconds)
both_s=$(run "${reader[@]}" "${writer[@]}" | seconds)
t0=$(date +%s.%N); sync; t1=$(date +%s.%N)
both_sync_s=$(python3 -c 'import sys; print(round(sum(map(float, sys.argv[1:3])) - float(sys.argv[3]), 3))' "$both_s" "$t1" "$t0")
echo "{\"bytes\":$bytes,\"read_s\":$read_s,\"write_s\":$write_s,\"both_s\":$both_s,\"both_sync_s\":$both_sync_s}"
