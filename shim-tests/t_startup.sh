#!/usr/bin/env bash
# What loading the library costs a process that does nothing: the pages an exec of
# /bin/true touches with it, against an empty preload library (one function, no
# constructor); and what the front adds where it loads the engine at start. Each page faulted in at start costs an exec 2-4 us (preload/build.rs,
# preload/startup.ld); times belong to the benchmarks (s60), page counts do not vary.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'rm -rf "$d"' EXIT
have cc python3 || { skip "start-up pages: needs cc and python3"; exit 0; }
echo 'int empty_preload_symbol(void) { return 0; }' >"$d/empty.c"
cc -O2 -shared -fPIC -o "$d/empty.so" "$d/empty.c"
# Minor faults of N execs of /bin/true with LD_PRELOAD=$1 (the children's, from getrusage),
# its stdio on /dev/null, or its stdout on the regular file $2 (where the front loads the
# engine at start); none of the DROPBEHIND_ variables (one set loads it at start too).
faults() {
    python3 - "$1" "${2:-/dev/null}" <<'PY'
import os, resource, subprocess, sys
env = {k: v for k, v in os.environ.items() if not k.startswith("DROPBEHIND_")}
env["LD_PRELOAD"] = sys.argv[1]
before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
with open(sys.argv[2], "w") as out:
    for _ in range(100):
        subprocess.run(["/bin/true"], env=env, check=True, stdin=subprocess.DEVNULL,
                       stdout=out, stderr=subprocess.DEVNULL)
print((resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before) // 100)
PY
}
empty=$(faults "$d/empty.so")
ours=$(faults "$LIB")
check "an exec of /bin/true faults in at most 3 pages more than with an empty preload library ($ours against $empty): the engine is not mapped" \
    '[ -n "$ours" ] && [ -n "$empty" ] && [ $((ours - empty)) -le 3 ]'
engine=$(dirname "$LIB")/libdropbehind_engine.so
if [ -f "$engine" ]; then
    alone=$(faults "$engine" "$d/out")
    loaded=$(faults "$LIB" "$d/out")
    check "stdout a regular file, the engine loaded at start: at most 8 pages more than the engine preloaded alone ($loaded against $alone)" \
        '[ -n "$loaded" ] && [ -n "$alone" ] && [ $((loaded - alone)) -le 8 ]'
else
    skip "the engine loaded at start: no libdropbehind_engine.so beside $LIB"
fi
