#!/usr/bin/env bash
# What a preload library costs a process that does nothing: a shell running /bin/true N
# times (default 500), with the library in the children only (`LD_PRELOAD=lib /bin/true`
# in the loop), with the shell preloaded too, and (with --bash) the same loop in bash, which
# forks where dash uses vfork, so the library's at-fork handler runs for each child.
# Contenders run interleaved, their order reversed every other round, and each row is the
# median of the rounds (default 15). The machine's noise shows in each row's range: on a
# loaded 2-CPU VM, 25 rounds or more.
#
#   scripts/startup-cost.sh [-r ROUNDS] [-n SPAWNS] [--bash] [--per-spawn] [--faults]
#                           [--callgrind] [--rust-floor] [--shaped-floor] [--as-cached]
#                           [name=path.so ...]
#
# Always measured: no preload, an empty library built here (one function, no constructor:
# the floor any preload pays), libeatmydata when installed (package libeatmydata1), and
# target/release/libdropbehind.so. More libraries can be given as name=path.
# With `--faults`, also prints page faults per exec (perf stat -r 200) and the loader's
# relocation counts (LD_DEBUG=statistics), and with `--callgrind` the instructions of one
# start-up of /bin/true (valgrind --tool=callgrind: repeatable, unlike timings).
# `--per-spawn` times 3000 single spawns (posix_spawn) per library instead of the loops,
# alternating the libraries spawn by spawn, which drifting load cannot favour.
# `--rust-floor` also builds and measures bench/rust-floor: the least a Rust preload with
# panic containment carries (std, catch_unwind, a silent panic hook), linked as
# the engine is. `--shaped-floor` also builds it padded, segment by segment, to the engine's
# size (libdropbehind_engine.so: text, read-only data, data, bss) with bytes nothing touches:
# what the engine's size alone costs an exec, apart from anything its code does.
# With `--per-spawn`, each spawn's stdio is /dev/null; `--stdout FILE` puts stdout on a
# regular file instead (where the front loads the engine at start), and `--command "CMD
# ARG..."` spawns that instead of /bin/true (`--command "/bin/cat /etc/hostname"`: a
# process whose open loads the engine). The engine beside libdropbehind.so is cached the
# way the libraries are.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=15
SPAWNS=500
FAULTS=0
CALLGRIND=0
MODES="children shell"
PER_SPAWN=0
RUST_FLOOR=0
SHAPED_FLOOR=0
AS_CACHED=0
extra=()
while [ $# -gt 0 ]; do
    case $1 in
    -r) ROUNDS=$2; shift 2 ;;
    -n) SPAWNS=$2; shift 2 ;;
    --bash) MODES="children shell bash"; shift ;;
    --per-spawn) PER_SPAWN=1; shift ;;
    --faults) FAULTS=1; shift ;;
    --callgrind) CALLGRIND=1; shift ;;
    --rust-floor) RUST_FLOOR=1; shift ;;
    --shaped-floor) SHAPED_FLOOR=1; shift ;;
    --as-cached) AS_CACHED=1; shift ;;
    --stdout) export SPAWN_STDOUT=$2; shift 2 ;;
    --command) export SPAWN_CMD=$2; shift 2 ;;
    *=*) extra+=("$1"); shift ;;
    *) echo "usage: $0 [-r ROUNDS] [-n SPAWNS] [--bash] [--per-spawn] [--faults] [--callgrind] [--rust-floor] [--shaped-floor] [--as-cached] [--stdout FILE] [--command CMD] [name=lib.so ...]" >&2; exit 2 ;;
    esac
done

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo 'int empty_preload_symbol(void) { return 0; }' >"$TMP/empty.c"
${CC:-cc} -O2 -shared -fPIC -o "$TMP/empty.so" "$TMP/empty.c"

names=(none empty)
libs=("" "$TMP/empty.so")
for l in /usr/lib/x86_64-linux-gnu/libeatmydata.so.1 /usr/lib/aarch64-linux-gnu/libeatmydata.so.1; do
    if [ -e "$l" ]; then names+=(libeatmydata); libs+=("$l"); break; fi
done
if [ "$RUST_FLOOR" = 1 ]; then
    (cd "$ROOT" && cargo build --release --locked --quiet -p dropbehind-rust-floor)
    names+=(rust-floor); libs+=("$ROOT/target/release/librustfloor.so")
fi
if [ -e "$ROOT/target/release/libdropbehind.so" ]; then
    names+=(dropbehind); libs+=("$ROOT/target/release/libdropbehind.so")
fi
if [ "$SHAPED_FLOOR" = 1 ]; then
    [ -e "$ROOT/target/release/libdropbehind_engine.so" ] || { echo "startup-cost: --shaped-floor needs target/release/libdropbehind_engine.so (make build)" >&2; exit 2; }
    (cd "$ROOT" && cargo build --release --locked --quiet -p dropbehind-rust-floor)
    # Each LOAD segment's sizes: R (headers, symbols, read-only data), R E (code), RW (data)
    # and the memory the RW segments take beyond their file bytes (bss).
    shape() {
        readelf -lW "$1" | python3 -c '
import sys
r = x = d = b = 0
for l in sys.stdin:
    f = l.split()
    if f[:1] != ["LOAD"]:
        continue
    fs, ms, flags = int(f[4], 16), int(f[5], 16), "".join(f[6:-1])
    if flags == "R": r += fs
    elif flags == "RE": x += fs
    else: d += fs; b += ms - fs
print(r, x, d, b)'
    }
    read -r dr dx dd db <<<"$(shape "$ROOT/target/release/libdropbehind_engine.so")"
    read -r fr fx fd fb <<<"$(shape "$ROOT/target/release/librustfloor.so")"
    # A failed readelf reads as empty segments: an unpadded floor must not pass as shaped.
    [ "${dx:-0}" -gt 0 ] && [ "${fx:-0}" -gt 0 ] || { echo "startup-cost: can't read the libraries' segments (readelf)" >&2; exit 2; }
    pos() { [ "$1" -gt 0 ] && echo "$1" || echo 0; }
    (cd "$ROOT" && DROPBEHIND_PAD_TEXT=$(pos $((dx - fx))) DROPBEHIND_PAD_RODATA=$(pos $((dr - fr))) \
        DROPBEHIND_PAD_DATA=$(pos $((dd - fd))) DROPBEHIND_PAD_BSS=$(pos $((db - fb))) CARGO_TARGET_DIR="$ROOT/target/shaped-floor" \
        cargo build --release --locked --quiet -p dropbehind-rust-floor --features shaped)
    names+=(shaped-floor); libs+=("$ROOT/target/shaped-floor/release/librustfloor.so")
fi
for e in "${extra[@]+"${extra[@]}"}"; do
    names+=("${e%%=*}"); libs+=("$(realpath "${e#*=}")")
done
n=${#names[@]}

# Every library's file cached the same way before timing: evicted, then read whole. How a
# file came into the page cache moves what mapping it costs an exec: the linker's output
# (written through a mapping) or a library faulted in page by page cost 13-20 us more an
# exec of /bin/true than the same bytes read whole with read(2), as a copy or an installed
# package is (bench/results/overhead-i16.md).
# `--as-cached` leaves each library cached as it is, to compare ways of caching one.
cached=("${libs[@]:1}")
for l in "${libs[@]:1}"; do
    e=$(dirname "$l")/libdropbehind_engine.so
    [ "$(basename "$l")" = libdropbehind.so ] && [ -f "$e" ] && cached+=("$e")
done
[ "$AS_CACHED" = 1 ] || python3 - "${cached[@]}" <<'PY'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)  # DONTNEED leaves dirty pages: a library just built is
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    while os.read(fd, 1 << 20):
        pass
    os.close(fd)
PY

# One run: seconds for SPAWNS execs of /bin/true; $2: children (preload in the loop's
# command only), shell (the shell itself preloaded as well) or bash (the same in bash).
run() {
    local lib=$1 mode=$2 t0 t1
    local loop='i=0; while [ $i -lt '"$SPAWNS"' ]; do LD_PRELOAD=$L /bin/true; i=$((i+1)); done'
    t0=$EPOCHREALTIME
    case $mode in
    children) L=$lib /bin/sh -c "$loop" ;;
    shell) L=$lib LD_PRELOAD=$lib /bin/sh -c "$loop" ;;
    bash) L=$lib LD_PRELOAD=$lib bash -c "$loop" ;;
    esac
    t1=$EPOCHREALTIME
    echo "$t0 $t1" | awk '{ printf "%.6f\n", $2 - $1 }'
}

if [ "$PER_SPAWN" = 1 ]; then
    cat >"$TMP/spawn.c" <<'EOF'
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
extern char **environ;
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
int main(int argc, char **argv) { /* spawn N NAME=LIB... (an empty LIB: no preload) */
    int n = atoi(argv[1]), k = argc - 2, ne = 0, na = 0;
    double *t = calloc((size_t)n * k, sizeof *t);
    char ***envs = calloc(k, sizeof *envs), *args[16] = {0};
    char *cmd = strdup(getenv("SPAWN_CMD") ? getenv("SPAWN_CMD") : "/bin/true");
    for (char *w = strtok(cmd, " "); w && na < 15; w = strtok(NULL, " ")) args[na++] = w;
    const char *out = getenv("SPAWN_STDOUT") ? getenv("SPAWN_STDOUT") : "/dev/null";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    while (environ[ne]) ne++;
    for (int j = 0; j < k; j++) {
        char **e = calloc(ne + 2, sizeof *e), *lib = strchr(argv[j + 2], '=') + 1;
        int m = 0;
        for (int i = 0; i < ne; i++)
            if (strncmp(environ[i], "LD_PRELOAD=", 11)) e[m++] = environ[i];
        if (*lib) {
            e[m] = malloc(strlen(lib) + 12);
            sprintf(e[m++], "LD_PRELOAD=%s", lib);
        }
        envs[j] = e;
    }
    for (int r = 0; r < n; r++)
        for (int jj = 0; jj < k; jj++) {
            int j = (jj + r) % k, st;
            struct timespec a, b;
            pid_t pid;
            clock_gettime(CLOCK_MONOTONIC, &a);
            if (posix_spawn(&pid, args[0], &fa, NULL, args, envs[j])) return 1;
            waitpid(pid, &st, 0);
            clock_gettime(CLOCK_MONOTONIC, &b);
            t[j * n + r] = (b.tv_sec - a.tv_sec) * 1e6 + (b.tv_nsec - a.tv_nsec) / 1e3;
        }
    for (int j = 0; j < k; j++) {
        double *v = t + j * n;
        int len = (int)(strchr(argv[j + 2], '=') - argv[j + 2]);
        qsort(v, n, sizeof *v, cmp);
        printf("  %-18.*s %7.1f us  (quartiles %.1f-%.1f)\n", len, argv[j + 2], v[n / 2], v[n / 4],
               v[3 * n / 4]);
    }
    return 0;
}
EOF
    ${CC:-cc} -O2 -o "$TMP/spawn" "$TMP/spawn.c"
    pairs=()
    for k in $(seq 0 $((n - 1))); do pairs+=("${names[$k]}=${libs[$k]}"); done
    echo "one spawn of ${SPAWN_CMD:-/bin/true} (stdout ${SPAWN_STDOUT:-/dev/null}), median of 3000 per library, alternating spawn by spawn:"
    "$TMP/spawn" 3000 "${pairs[@]}"
    MODES=
fi

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

for mode in $MODES; do
    for k in $(seq 0 $((n - 1))); do : >"$TMP/$mode.$k"; done
    for r in $(seq 1 "$ROUNDS"); do
        order=$(seq 0 $((n - 1)))
        [ $((r % 2)) = 0 ] && order=$(seq $((n - 1)) -1 0)
        for k in $order; do run "${libs[$k]}" "$mode" >>"$TMP/$mode.$k"; done
    done
    m0=$(median <"$TMP/$mode.1")
    case $mode in
    children) what="sh, the library in the children only" ;;
    shell) what="sh, the library in the shell too" ;;
    bash) what="bash (forks), the library in the shell too" ;;
    esac
    echo "$SPAWNS spawns of /bin/true from $what; medians of $ROUNDS interleaved rounds:"
    for k in $(seq 0 $((n - 1))); do
        m=$(median <"$TMP/$mode.$k")
        lo=$(sort -g "$TMP/$mode.$k" | head -1)
        hi=$(sort -g "$TMP/$mode.$k" | tail -1)
        awk -v name="${names[$k]}" -v m="$m" -v lo="$lo" -v hi="$hi" -v e="$m0" -v s="$SPAWNS" \
            'BEGIN { printf "  %-14s %.4f s  (%.4f-%.4f)  %.3fx of empty  %4.0f us/exec\n", name, m, lo, hi, m / e, m / s * 1e6 }'
    done
done

if [ "$FAULTS" = 1 ]; then
    command -v perf >/dev/null || echo "startup-cost: perf is not installed, faults shown as ?" >&2
    echo "page faults per exec of /bin/true (perf stat -r 200), and the loader's relocations:"
    for k in $(seq 0 $((n - 1))); do
        pf=$(LD_PRELOAD=${libs[$k]} perf stat -x, -r 200 -e page-faults /bin/true 2>&1 | awk -F, '/page-faults/ { print $1 }')
        rel=$(LD_DEBUG=statistics LD_PRELOAD=${libs[$k]} /bin/true 2>&1 |
            awk '/number of relocations:/ { r = $NF } /relocations from cache/ { c = $NF } END { print r " relocations, " c " from cache" }')
        printf "  %-14s %5s faults  %s\n" "${names[$k]}" "${pf:-?}" "$rel"
    done
fi

if [ "$CALLGRIND" = 1 ]; then
    command -v valgrind >/dev/null || { echo "startup-cost: --callgrind needs valgrind" >&2; exit 2; }
    echo "instructions for one start-up of /bin/true (callgrind, whole process):"
    for k in $(seq 0 $((n - 1))); do
        ir=$(LD_PRELOAD=${libs[$k]} valgrind --tool=callgrind --callgrind-out-file=/dev/null /bin/true 2>&1 |
            awk '/Collected :/ { print $NF }')
        printf "  %-14s %9s instructions\n" "${names[$k]}" "${ir:-?}"
    done
fi
