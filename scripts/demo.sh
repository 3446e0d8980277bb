#!/usr/bin/env bash
# The main job on data made here, no root needed: a file read and copied with and without
# dropbehind, and how much of each file every run left in the page cache.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
LAUNCHER=$ROOT/target/release/dropbehind
MIB=${DEMO_MIB:-384}
dir=$(mktemp -d "${DEMO_DIR:-$ROOT/target}/demo.XXXXXX")
trap 'rm -rf "$dir"' EXIT
src=$dir/data.bin dst=$dir/copy.bin

evict() { # write back and drop our own files' pages: no root needed for that
    python3 -c 'import os,sys
for p in sys.argv[1:]:
    if os.path.exists(p):
        fd=os.open(p,os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED); os.close(fd)' "$@"
}
cached() { "$LAUNCHER" stat --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["cached_pages"]*4096//1048576)'; }

# findmnt names ext4 as mounted; stat -f only knows the magic number (ext2/ext3).
echo "dropbehind demo: a $MIB MiB file in $dir (filesystem: $(findmnt -n -o FSTYPE -T "$dir" 2>/dev/null || stat -f -c %T "$dir"))"
head -c $((MIB * 1048576)) /dev/urandom >"$src"

printf '\n%-28s %-12s %14s %14s %9s\n' "command" "run" "source cached" "copy cached" "seconds"
row() { # row LABEL RUN CMD...
    local label=$1 run=$2; shift 2
    rm -f "$dst"; evict "$src"
    local t0 t1; t0=$(date +%s.%N); "$@"; t1=$(date +%s.%N)
    local s c="-"; s=$(cached "$src"); [ -e "$dst" ] && c="$(cached "$dst") MiB"
    printf '%-28s %-12s %10s MiB %14s %9.2f\n' "$label" "$run" "$s" "$c" "$(echo "$t1 - $t0" | bc)"
}
for run in "no shim" "dropbehind"; do
    pre=(); [ "$run" = dropbehind ] && pre=("$LAUNCHER" --)
    row "cat data.bin >/dev/null" "$run" "${pre[@]}" sh -c "cat '$src' >/dev/null"
done
for run in "no shim" "dropbehind"; do
    pre=(); [ "$run" = dropbehind ] && pre=("$LAUNCHER" --)
    row "cp data.bin copy.bin" "$run" "${pre[@]}" cp "$src" "$dst"
done
cmp -s "$src" "$dst" && echo && echo "copy is byte-identical; try: $LAUNCHER --stats -- cp BIG DEST"
