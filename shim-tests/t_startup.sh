#!/usr/bin/env bash
# What loading the library costs a process that does nothing: the pages an exec of
# /bin/true touches with it, against an empty preload library (one function, no
# constructor). Each page faulted in at start costs an exec 2-4 us (preload/build.rs,
# preload/startup.ld); times belong to the benchmarks (s60), page counts do not vary.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'rm -rf "$d"' EXIT
have cc python3 || { skip "start-up pages: needs cc and python3"; exit 0; }
echo 'int empty_preload_symbol(void) { return 0; }' >"$d/empty.c"
cc -O2 -shared -fPIC -o "$d/empty.so" "$d/empty.c"
# Minor faults of N execs of /bin/true with LD_PRELOAD=$1 (the children's, from getrusage).
faults() {
    python3 - "$1" <<'PY'
import os, resource, subprocess, sys
env = dict(os.environ, LD_PRELOAD=sys.argv[1])
before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
for _ in range(100):
    subprocess.run(["/bin/true"], env=env, check=True)
print((resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before) // 100)
PY
}
empty=$(faults "$d/empty.so")
ours=$(faults "$LIB")
check "an exec of /bin/true faults in at most 10 pages more than with an empty preload library ($ours against $empty)" \
    '[ -n "$ours" ] && [ -n "$empty" ] && [ $((ours - empty)) -le 10 ]'
