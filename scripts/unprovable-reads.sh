#!/usr/bin/env bash
# Cold reads of a file its reader may not write (so cachestat refuses and residency is
# unknowable), as `nobody`: each program plain and under each library, interleaved, FILE
# evicted before each run. Prints per program and library the median seconds (min-max),
# the bytes read from the disk (the programs' /proc read_bytes) and what stayed cached.
#
#   scripts/unprovable-reads.sh ROUNDS FILE LIB...     (root; FILE must be readable by nobody)
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: unprovable-reads.sh ROUNDS FILE LIB..." >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "unprovable-reads: needs root (setpriv)" >&2; exit 2; }
rounds=$1 f=$(realpath "$2"); shift 2
progs=("cat $f" "dd if=$f bs=10k status=none" "tar cf - $f" "dd if=$f bs=4M status=none")
B=$(dirname "$0")/../target/release/dropbehind
evict() { "$B" evict "$1" >/dev/null; }
out=$(mktemp); trap 'rm -f "$out"' EXIT
for _ in $(seq "$rounds"); do
    for p in "${progs[@]}"; do
        for lib in none "$@"; do
            pre=(); [ "$lib" = none ] || pre=(env "LD_PRELOAD=$(realpath "$lib")")
            evict "$f"
            s=$(date +%s%N)
            # The pipe to cat: tar writes nothing (and reads nothing) when its output is /dev/null.
            rb=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "${pre[@]}" \
                sh -c "$p 2>/dev/null | cat >/dev/null; grep ^read_bytes: /proc/\$\$/io" | awk '{ print $2 }')
            e=$(date +%s%N)
            c=$(python3 -c 'import os,sys; print(os.stat(sys.argv[1]).st_size)' "$f")
            res=$("$B" stat --json "$f" 2>/dev/null |
                python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["cached_pages"]*4096)' 2>/dev/null || echo -1)
            echo "${p/$f/FILE}|$(basename "$lib")|$(( (e - s) / 1000000 ))|$rb|$res|$c" >>"$out"
        done
    done
done
python3 - "$out" <<'PY'
import collections, statistics as st, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    p, lib, ms, rb, res, size = l.rstrip("\n").split("|")
    d[(p, lib)].append((int(ms) / 1000, int(rb), int(res), int(size)))
print("| program, as nobody | library | seconds | read from disk | cached after |")
print("| --- | --- | ---: | ---: | ---: |")
for (p, lib), v in d.items():
    s = [x[0] for x in v]
    size = v[0][3]
    print(f"| `{p}` | {lib} | {st.median(s):.2f} ({min(s):.2f}-{max(s):.2f}) | "
          f"{st.median(x[1] for x in v) / size:.2f}x | {st.median(x[2] for x in v) / 2**20:.0f} MiB |")
PY
