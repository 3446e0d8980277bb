#!/usr/bin/env bash
# The front (libdropbehind.so) and the engine it loads (libdropbehind_engine.so, beside it):
# a process maps the engine only once it does work the engine acts on, never from a vfork
# child, a signal handler's open or after prctl(PR_SET_NO_NEW_PRIVS); and once loaded, the
# engine calls the library preloaded after the front, not libc past it.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'rm -rf "$d"' EXIT
have cc || { skip "the front: needs cc"; exit 0; }
cc -O2 -o "$d/front_load" "$ROOT/shim-tests/helpers/front_load.c" || { fail "front_load.c builds"; exit 0; }
make_file "$d/f" 1
# stdio away from regular files, and none of the variables: the engine is loaded at start
# when a DROPBEHIND_ variable is set or fd 0, 1 or 2 is a regular file.
# run [NAME=VALUE...] MODE [FILE]
# Not "${SHIM[@]}": DROPBEHIND_TEST_FORCE's variables would load the engine at start.
run() {
    local vars=() unset=()
    while [[ $1 == *=* ]]; do vars+=("$1"); shift; done
    mapfile -t unset < <(env | sed -n 's/^\(DROPBEHIND_[A-Z_]*\)=.*/-u\n\1/p')
    env "${unset[@]}" LD_PRELOAD="$LIB" "${vars[@]}" "$d/front_load" "$@" </dev/null 2>/dev/null | cat  # own preload: see above
}

out=$(run idle)
check "a process doing nothing, a write to /dev/null and an anonymous mmap: no engine ($out)" \
    '[ "$out" = "front front " ]'
out=$(run open "$d/f")
check "an open loads the engine ($out)" '[ "$out" = "front engine " ]'
out=$(run map "$d/f")
check "a file mapping loads the engine ($out)" '[ "$out" = "front engine " ]'
out=$(run vfork "$d/f")
check "a vfork child's open does not load it for the parent; the parent's does ($out)" \
    '[ "$out" = "front engine " ]'
out=$(run errno "$d/f")
check "errno as the program set it after a hook's first calls, the one loading the engine too ($out)" \
    '[ "$out" = "kept kept kept engine " ]'
# The front alone, no engine beside it: the load fails (dlopen's failure sets errno), the
# program's calls go through untouched and find errno as they left it.
mkdir -p "$d/alone" && cp "$LIB" "$d/alone/libdropbehind.so"
out=$(LIB="$d/alone/libdropbehind.so" run errno "$d/f")
check "no engine beside the front: the calls go through, errno as the program set it ($out)" \
    '[ "$out" = "kept kept kept front " ]'
out=$(run vfork-prctl "$d/f")
check "a vfork child's prctl(PR_SET_NO_NEW_PRIVS) leaves its parent the engine ($out)" \
    '[ "$out" = "engine " ]'
out=$(run vfork-nokcmp "$d/f")
if [ "$out" = no-seccomp ]; then
    skip "a vfork child with kcmp refused: no seccomp here"
else
    check "a vfork child's open under a filter refusing kcmp does not load it for the parent ($out)" \
        '[ "$out" = "front " ]'
fi
# A relative LD_PRELOAD: the engine from the directory the name was relative to at start.
mkdir -p "$d/elsewhere"
rel=$(realpath --relative-to="$d" "$LIB")
mapfile -t unset < <(env | sed -n 's/^\(DROPBEHIND_[A-Z_]*\)=.*/-u\n\1/p')
out=$(cd "$d" && env "${unset[@]}" LD_PRELOAD="$rel" "$d/front_load" chdir "$d/elsewhere" "$d/f" </dev/null 2>/dev/null | cat)  # own preload: relative
check "LD_PRELOAD by a relative path, then chdir: the engine found from the start's directory ($out)" \
    '[ "$out" = "engine " ]'
out=$(run prctl "$d/f")
check "after prctl(PR_SET_NO_NEW_PRIVS) an open does not load it ($out)" '[ "$out" = "front " ]'
out=$(run handler "$d/f")
check "an open in a signal handler does not load it; one outside does ($out)" \
    '[ "$out" = "front engine " ]'
out=$(LD_PRELOAD="$LIB" "$d/front_load" idle </dev/null 2>/dev/null >"$d/stdout"; cat "$d/stdout")  # own preload: as run's
check "stdout a regular file: the engine at start ($out)" '[ "$out" = "engine engine " ]'
out=$(run DROPBEHIND_LOG=error idle)
check "a DROPBEHIND_ variable set: the engine at start, to read it ($out)" \
    '[ "$out" = "engine engine " ]'

# Layered: the engine's real read is the next preloaded library's, as the program's would be.
cat >"$d/count.c" <<'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
static long reads;
ssize_t read(int fd, void *b, size_t n)
{
    static ssize_t (*real)(int, void *, size_t);
    if (!real)
        real = (ssize_t (*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
    __atomic_add_fetch(&reads, 1, __ATOMIC_RELAXED);
    return real(fd, b, n);
}
__attribute__((destructor)) static void report(void)
{
    const char *to = getenv("COUNT_READS_TO");
    FILE *f = to ? fopen(to, "w") : NULL;
    if (f) {
        fprintf(f, "%ld\n", reads);
        fclose(f);
    }
}
EOF
if cc -O2 -shared -fPIC -o "$d/count.so" "$d/count.c"; then
    make_file "$d/big" 16
    evict "$d/big"
    COUNT_READS_TO="$d/n" LD_PRELOAD="$LIB $d/count.so" cat "$d/big" >/dev/null  # own preload: two
    n=$(cat "$d/n" 2>/dev/null)
    check "a library preloaded after the front sees the reads the engine makes ($n reads of a 16 MiB file)" \
        '[ -n "$n" ] && [ "$n" -ge 16 ]'
else
    fail "count.c builds"
fi
