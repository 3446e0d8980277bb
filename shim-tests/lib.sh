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
check() { # check DESCRIPTION CONDITION...
    local what=$1; shift
    if "$@"; then ok "$what"; else fail "$what"; fi
}

is_root() { [ "$(id -u)" = 0 ]; }
have_cgroup() { is_root && [ -w /sys/fs/cgroup/memory ]; }

# A scratch directory on a disk-backed filesystem (not tmpfs: the page cache is the point).
scratch() {
    local base=${DROPBEHIND_TEST_DIR:-$ROOT/target/shim-tests}
    mkdir -p "$base"
    mktemp -d "$base/t.XXXXXX"
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

# peak_mib CMD...: run CMD in a fresh memory cgroup (v1), print its peak usage in MiB on
# fd 3. The command's own stdout/stderr pass through.
peak_mib() {
    local cg=/sys/fs/cgroup/memory/dropbehind_test_$$_$RANDOM rc
    mkdir "$cg"
    bash -c 'echo $$ >"$1/cgroup.procs"; shift; exec "$@"' _ "$cg" "$@"
    rc=$?
    echo $(($(cat "$cg/memory.max_usage_in_bytes") / MiB)) >&3
    for _ in 1 2 3 4 5 6 7 8 9 10; do rmdir "$cg" 2>/dev/null && break; sleep 0.2; done
    return $rc
}

shim() { env LD_PRELOAD="$LIB" "$@"; }
