# Shared helpers for the shim tests: sourced, not run.
# Each test script calls `ok`, `fail` or `skip` once per check; run.sh sums them up.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB=${DROPBEHIND_TEST_LIB:-$ROOT/target/release/libdropbehind.so}
LAUNCHER=${DROPBEHIND_TEST_LAUNCHER:-$ROOT/target/release/dropbehind}
: "${RESULTS:=/dev/null}"
MiB=1048576

ok()   { echo "ok   - $*"; echo ok >>"$RESULTS"; }
fail() { echo "FAIL - $*"; echo fail >>"$RESULTS"; }
skip() { echo "skip - $*"; echo skip >>"$RESULTS"; }
# check DESCRIPTION COMMAND [ARG...]: ok when the one simple command succeeds.
# check DESCRIPTION 'CONDITION': one argument is shell code, evaluated whole (eval) with the
#   caller's variables, for conditions of several parts: '[ "$a" = "$b" ] && [ $rc = 0 ]'.
#   (It sees the caller's variables, not its positional parameters: copy $1 to a local.)
# Never `check DESC [ A ] && [ B ]`: bash reads that as `(check DESC [ A ]) && [ B ]`, so ok
# or fail comes from A alone; lint.sh refuses it.
check() {
    local check_desc_=$1; shift
    if [ $# = 0 ]; then fail "$check_desc_ (check given no condition)"; return; fi
    if [ $# = 1 ]; then
        if eval "$1"; then ok "$check_desc_"; else fail "$check_desc_"; fi
    elif "$@"; then ok "$check_desc_"; else fail "$check_desc_"; fi
}

# have CMD...: true when every command exists; otherwise prints nothing and returns false,
# for `have rsync || { skip "...: rsync missing"; ...; }`.
have() { local c; for c in "$@"; do command -v "$c" >/dev/null || return 1; done; }

is_root() { [ "$(id -u)" = 0 ]; }
have_cgroup() { is_root && [ -w /sys/fs/cgroup/memory ]; }

# A scratch directory on a disk-backed filesystem (not tmpfs: the page cache is the point).
scratch() {
    local base=${DROPBEHIND_TEST_DIR:-$ROOT/target/shim-tests}
    mkdir -p "$base"
    mktemp -d "$base/t.XXXXXX"
}

# damon_pause / damon_resume: a DAMON pageout scheme (kdamond) where the machine runs one
# reclaims page cache it finds idle, files read seconds before among it; a check that needs
# cached files to stay cached pauses it (as the benchmark's cached rows do). Root only; the
# caller resumes it, on its EXIT trap too.
DAMON_PAUSED=()
damon_pause() {
    local s
    is_root || return 0
    for s in /sys/kernel/mm/damon/admin/kdamonds/[0-9]*/state; do
        [ -w "$s" ] && [ "$(cat "$s" 2>/dev/null)" = on ] && echo off >"$s" 2>/dev/null &&
            DAMON_PAUSED+=("$s")
    done
    return 0
}
damon_resume() {
    local s
    for s in "${DAMON_PAUSED[@]}"; do echo on >"$s" 2>/dev/null || echo "# could not restart DAMON ($s)"; done
    DAMON_PAUSED=()
}

# make_file PATH MiB: incompressible data, written back and evicted from the cache.
make_file() {
    head -c "$(($2 * MiB))" /dev/urandom >"$1"
    evict "$1"
}

# evict FILE...: write back and drop a file's pages (needs no root for one's own files).
evict() {
    python3 - "$@" <<'PY'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
PY
}

# cached_kib FILE: KiB of FILE in the page cache.
cached_kib() {
    "$LAUNCHER" stat --json "$1" | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["cached_pages"]*4)'
}

# warm FILE MiB: read the first MiB of FILE into the cache.
warm() { dd if="$1" of=/dev/null bs=1M count="$2" status=none; }

# undisturbed FUNC [ARG...]: runs FUNC (a run and its residency or cgroup readings) again
# while another process dropped the page cache meanwhile (other tests on the machine run
# `echo 3 >drop_caches`, at times every few seconds): that would empty what a check is about
# to read and make "pages kept" fail or "pages dropped" pass whatever the shim did. Detected
# with a canary file cached before FUNC and still cached after it. Up to 6 tries, pausing
# longer between them to let a burst of drops pass; then the check reads what it got (said
# on stderr). A FUNC that drops the caches itself calls canary_arm afterwards.
CANARY=${DROPBEHIND_TEST_DIR:-$ROOT/target/shim-tests}/canary
canary_arm() {
    [ -s "$CANARY" ] || { mkdir -p "$(dirname "$CANARY")"; head -c $MiB /dev/urandom >"$CANARY"; }
    cat "$CANARY" >/dev/null
}
canary_intact() { [ "$(cached_kib "$CANARY")" -ge 1024 ]; }
undisturbed() {
    local try
    for try in 1 2 3 4 5 6; do
        canary_arm
        "$@"
        canary_intact && return 0
        echo "# $1: the page cache was dropped by another process meanwhile (try $try)" >&2
        [ $try = 6 ] || sleep $((try * 2))
    done
    echo "# $1: disturbed 6 times; the check below reads a disturbed measurement" >&2
}

# Memory cgroups (v1). cg_new prints a fresh group's path; cg_run CG CMD... runs CMD inside
# it and fails loudly (a `fail` line, exit 125, CMD not run) when the process did not land
# in the group, so a measurement never silently comes from outside; cg_peak_mib CG prints
# its peak usage; cg_close CG removes it. Measure residency before cg_close.
cg_new() {
    local cg=/sys/fs/cgroup/memory/dropbehind_test_$$_$RANDOM
    mkdir "$cg" && echo "$cg"
}
cg_run() {
    local cg=$1 joined rc; shift
    joined=$(mktemp)
    bash -c 'echo $$ 2>/dev/null >"$1/cgroup.procs" &&
        grep -qx "[0-9]*:memory:${1#/sys/fs/cgroup/memory}" /proc/self/cgroup || exit 125
        echo yes >"$2"; shift 2; exec "$@"' _ "$cg" "$joined" "$@"
    rc=$?
    if [ "$(cat "$joined")" != yes ]; then
        fail "cgroup: the command did not run inside $cg ($*): no measurement" >&2
        rc=125
    fi
    rm -f "$joined"
    return $rc
}
cg_peak_mib() { echo $(($(cat "$1/memory.max_usage_in_bytes") / MiB)); }
cg_close() {
    local cg=$1
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && return; sleep 0.2; done
    echo "warning: $cg not removed" >&2
}

# peak_mib CMD...: run CMD in a fresh memory cgroup, print its peak usage in MiB on fd 3
# ("none" when it could not run inside the group: a numeric check on it then fails).
# The command's own stdout/stderr pass through.
peak_mib() {
    local cg rc
    cg=$(cg_new) || { fail "cgroup: cannot create a memory cgroup" >&2; echo none >&3; return 125; }
    cg_run "$cg" "$@"; rc=$?
    if [ $rc = 125 ]; then echo none >&3; else cg_peak_mib "$cg" >&3; fi
    cg_close "$cg"
    return $rc
}

# shim CMD...: CMD with the library preloaded; settings go before it, as
# `DROPBEHIND_STATS=$d/s shim cat f` (never `shim env VAR=...`: lint.sh refuses it), so that
# DROPBEHIND_TEST_FORCE comes last and wins. "${SHIM[@]}" is the same as a command prefix,
# for wrappers that exec (strace, setpriv, timeout, cgroups).
# DROPBEHIND_TEST_FORCE='VAR=VALUE ...' (space-separated, no spaces in values) overrides any
# setting a test makes for its own runs: mutations.sh uses it to turn one feature off in every
# test, e.g. DROPBEHIND_TEST_FORCE='DROPBEHIND_BACKEND=off'.
read -r -a FORCE <<<"${DROPBEHIND_TEST_FORCE:-}"
SHIM=(env "LD_PRELOAD=$LIB" "${FORCE[@]}")
shim() { "${SHIM[@]}" "$@"; }

# thread_fd_calls CMD...: CMD under `strace -f`; prints (at most 3 of) the calls that made
# an fd on a thread the process started (a clone with CLONE_THREAD): the shim's helpers
# must make none, since an open takes the lowest free number for a moment and a program
# thread opening a file just then would get another number than without the shim. Prints
# "no threads" when none was started (nothing checked), "no strace" without strace.
# glibc's malloc reads two files of its own once a process has more than 8 arenas
# (/sys/devices/system/cpu/online, to size their limit) or shrinks a thread's heap
# (/proc/sys/vm/overcommit_memory), on whichever thread that happens: a helper thread
# that allocates can be it. Those are left out here and named in the README's limits.
thread_fd_calls() {
    have strace || { echo "no strace"; return; }
    local t; t=$(mktemp)
    strace -f -qq -o "$t" -e trace=open,openat,openat2,dup,dup2,dup3,fcntl,pidfd_getfd,clone,clone3 \
        "$@" >/dev/null 2>&1
    if ! grep -q CLONE_THREAD "$t"; then echo "no threads"; rm -f "$t"; return; fi
    awk '/^[0-9]+ clone3?\(.*CLONE_THREAD/ { t[$NF] = 1; next }
        /"\/sys\/devices\/system\/cpu\/online"|"\/proc\/sys\/vm\/overcommit_memory"/ { next }
        ($1 in t) && ($2 ~ /^(open|openat|openat2|dup[23]?|pidfd_getfd)\(/ || /F_DUPFD/)' "$t" | head -3
    rm -f "$t"
}
