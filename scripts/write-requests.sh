#!/usr/bin/env bash
# Counts the requests a command sends to the disk holding DIR (default: the current
# directory) until its writes are on disk (the command, then sync): reads and writes
# completed, write merges and MiB written, from /sys/block/DEV/stat. A copy that writes
# back file by file sends a request per small file; the kernel's flusher, one pass with
# the block layer's plug held, merges neighbours into a few large ones.
#
#   scripts/write-requests.sh [--dir DIR] -- CMD...
set -euo pipefail

dir=.
while [ $# -gt 0 ]; do
    case $1 in
        --dir) dir=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "write-requests: unknown option $1 (try --help)" >&2; exit 2 ;;
    esac
done
[ $# -gt 0 ] || { echo "write-requests: no command given (try --help)" >&2; exit 2; }

src=$(findmnt -n -o SOURCE --target "$dir")
dev=$(basename "$(readlink -f "$src")")
# A partition's counters are its own; the whole disk's are in its parent's directory too.
stat=/sys/class/block/$dev/stat
[ -r "$stat" ] || { echo "write-requests: no block statistics for $src ($stat)" >&2; exit 2; }

sync
read -r -a a < "$stat"
"$@"
sync
read -r -a b < "$stat"
# Fields: reads, read merges, read sectors, read ms, writes, write merges, write sectors, ...
printf '%s: reads %d, writes %d, write merges %d, written %.1f MiB\n' "$dev" \
    $((b[0] - a[0])) $((b[4] - a[4])) $((b[5] - a[5])) \
    "$(echo "(${b[6]} - ${a[6]}) / 2048" | bc -l)"
