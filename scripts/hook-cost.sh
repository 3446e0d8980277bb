#!/usr/bin/env bash
# Instructions a preload library adds to one I/O call, counted with valgrind's callgrind
# (repeatable, unlike timings): a small C program makes N and then 2N calls of one kind,
# with and without the library, and the added instructions per call are
#   ((with, 2N) - (with, N) - (without, 2N) + (without, N)) / N
# so start-up and exit cancel out. What the calls' occasional slow path costs (a window
# boundary every 2 MiB of a stream) is included, spread over the calls.
#
#   scripts/hook-cost.sh [-n N] [LIB.so ...]     (default: target/release/libdropbehind.so)
#
# Kinds: seq-window and read-window (the hot path alone: 4 KiB preads, or reads, continuing
# a cached stream inside its first 2 MiB window, 150 vs 300 calls whatever -n says),
# seq (4 KiB preads walking a cached 64 MiB file, cycling), seq-uncached (the same
# stream when its reads become RWF_DONTCACHE), read (the same with read()), rand (4 KiB
# preads at random offsets), stride (every 100th page), small (a 64 KiB file, which the
# shim leaves alone), open (open, one read and close of 1500-byte cached files, 256 of
# them cycled, per file: what an interpreter importing modules pays), pipe (1-byte write
# and read on a pipe, per call), write-window (4 KiB appending writes continuing a stream,
# after its first MiB, inside an 8 MiB window: the hot path alone), write (4 KiB appending
# writes from the start, the windows' writeback included: callgrind counts every thread,
# the writeback helper's too). valgrind does not know cachestat, so under it every file
# looks unprovable and `auto` streams read uncached: `seq` sets DROPBEHIND_BACKEND=fadvise
# to take the path a provable file takes natively. Only instructions are counted: a
# system call the shim adds shows as the few it takes to make one (`strace -c` counts them).
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
N=20000
while [ $# -gt 0 ]; do
    case $1 in
    -n) N=$2; shift 2 ;;
    -*) echo "usage: $0 [-n N] [LIB.so ...]" >&2; exit 2 ;;
    *) break ;;
    esac
done
[ $# -gt 0 ] || set -- "$ROOT/target/release/libdropbehind.so"
command -v valgrind >/dev/null || { echo "hook-cost: needs valgrind" >&2; exit 2; }

TMP=$(mktemp -d /var/tmp/hook-cost.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
cat >"$TMP/calls.c" <<'EOF'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv) {
    const char *kind = argv[1];
    long n = atol(argv[2]);
    static char buf[4096];
    if (!strcmp(kind, "pipe")) {
        int p[2];
        if (pipe(p)) return 1;
        for (long i = 0; i < n / 2; i++)
            if (write(p[1], buf, 1) != 1 || read(p[0], buf, 1) != 1) return 1;
        return 0;
    }
    if (!strcmp(kind, "open")) {
        char path[4200];
        for (long i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/f%03ld", argv[3], i % 256);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0 || read(fd, buf, sizeof buf) <= 0) return 1;
            close(fd);
        }
        return 0;
    }
    if (!strncmp(kind, "write", 5)) {
        int fd = open(argv[3], O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (!strcmp(kind, "write-window")) n += 256; /* 1 MiB first: a stream by then */
        for (long i = 0; i < n; i++)
            if (write(fd, buf, sizeof buf) != sizeof buf) return 1;
        return 0;
    }
    int fd = open(argv[3], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st)) return 1;
    long pages = st.st_size / 4096, off = 0;
    int rd = !strncmp(kind, "read", 4), seq = !strncmp(kind, "seq", 3);
    int stride = !strcmp(kind, "stride"), rnd = !strcmp(kind, "rand");
    unsigned long x = 88172645463325252UL;
    for (long i = 0; i < n; i++) {
        ssize_t r;
        if (rd) {
            r = read(fd, buf, sizeof buf);
            if (r == 0) r = lseek(fd, 0, SEEK_SET) == 0;
        } else {
            if (seq) off = i % pages;
            else if (stride) off = i * 100 % pages;
            else if (rnd) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; off = x % pages; }
            r = pread(fd, buf, sizeof buf, off * 4096);
        }
        if (r <= 0) return 1;
    }
    return 0;
}
EOF
${CC:-cc} -O2 -o "$TMP/calls" "$TMP/calls.c"
head -c 64M /dev/urandom >"$TMP/big"
head -c 64K /dev/urandom >"$TMP/small"
mkdir "$TMP/tree"
for i in $(seq -f %03g 0 255); do head -c 1500 /dev/urandom >"$TMP/tree/f$i"; done
cat "$TMP/big" "$TMP/small" "$TMP"/tree/* >/dev/null

# ir PRELOAD BACKEND KIND N: instructions of the whole run.
ir() {
    env LD_PRELOAD="$1" DROPBEHIND_BACKEND="$2" DROPBEHIND_WINDOW="$window" valgrind --tool=callgrind \
        --callgrind-out-file=/dev/null "$TMP/calls" "$3" "$4" "$5" 2>&1 |
        awk '/Collected :/ { print $NF }'
}

for lib in "$@"; do
    lib=$(realpath "$lib")
    echo "instructions added per call by $lib (N=$N, callgrind):"
    for kind in seq-window read-window seq seq-uncached read rand stride small open pipe write-window write; do
        file=$TMP/big backend=auto n=$N window=2M
        case $kind in
        write-window) file=$TMP/out n=150 window=8M ;;
        *-window) backend=fadvise n=150 ;;
        seq | read) backend=fadvise ;;
        small) file=$TMP/small ;;
        open) file=$TMP/tree ;;
        write) file=$TMP/out ;;
        esac
        a1=$(ir "" "$backend" "$kind" "$n" "$file"); a2=$(ir "" "$backend" "$kind" $((2 * n)) "$file")
        b1=$(ir "$lib" "$backend" "$kind" "$n" "$file"); b2=$(ir "$lib" "$backend" "$kind" $((2 * n)) "$file")
        awk -v k="$kind" -v a1="$a1" -v a2="$a2" -v b1="$b1" -v b2="$b2" -v n="$n" 'BEGIN {
            base = (a2 - a1) / n; with = (b2 - b1) / n
            printf "  %-13s %6.1f  (the program alone: %.1f per call)\n", k, with - base, base }'
    done
done
