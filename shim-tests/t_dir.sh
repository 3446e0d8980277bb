#!/usr/bin/env bash
# Directory inode prefetch: programs that list and stat big directories print exactly the
# same with and without the shim, cold and warm; the prefetch runs for cold big
# directories, not for warm ones, and leaves no thread or fd behind.
. "$(dirname "$0")/lib.sh"
d=$(scratch)
sd=
cleanup() { [ -n "$sd" ] && "$ROOT/scripts/slowdisk.sh" down "$sd" >/dev/null 2>&1; rm -rf "$d"; }
trap cleanup EXIT
N=${DIR_TEST_ENTRIES:-20000}

cold() { if is_root; then sync; echo 3 >/proc/sys/vm/drop_caches; fi; }

commands=(
    "ls -l|ls -l --time-style=+%s DIR"
    "du -s|du -s DIR"
    "find -printf|find DIR -printf '%s %p\n'"
    "python3 scandir + stat|python3 -c 'import os,sys;print(sorted((e.name, e.stat(follow_symlinks=False).st_ino) for e in os.scandir(sys.argv[1]))[-3:])' DIR"
    "rsync -an|rsync -an --out-format=%n DIR/ $d/rsync-target/"
    "ls -f (order)|ls -f DIR"
)

run_suite() { # LABEL DIR
    local label=$1 dir=$2
    for c in "${commands[@]}"; do
        name=${c%%|*}; cmd=${c#*|}; cmd=${cmd//DIR/$dir}
        cold; a=$(bash -c "$cmd" 2>&1); ra=$?
        cold; b=$(LD_PRELOAD="$LIB" DROPBEHIND_STATS="$d/stats" bash -c "$cmd" 2>&1); rb=$?
        w=$(LD_PRELOAD="$LIB" bash -c "$cmd" 2>&1)
        check "$label, $name: identical output, cold and warm (exit $ra)" [ "$ra" = "$rb" ] && [ "$a" = "$b" ] && [ "$a" = "$w" ]
    done
}

python3 "$ROOT/scripts/make-dirs.py" aged "$d/aged" "$N"
run_suite "local disk" "$d/aged"
if is_root; then
    cold
    rm -f "$d/stats"; LD_PRELOAD="$LIB" DROPBEHIND_STATS="$d/stats" ls -l "$d/aged" >/dev/null
    check "cold big directory: prefetched ($(grep -o 'directories prefetched.*' "$d/stats"))" grep -q "directories prefetched 1 " "$d/stats"
fi
rm -f "$d/stats"; LD_PRELOAD="$LIB" DROPBEHIND_STATS="$d/stats" ls -l "$d/aged" >/dev/null
check "warm big directory: not prefetched ($(grep -o 'directories prefetched.*' "$d/stats"))" grep -q "directories prefetched 0 .*1 big directories found warm" "$d/stats"
mkdir -p "$d/small"; touch "$d/small/a" "$d/small/b"
rm -f "$d/stats"; LD_PRELOAD="$LIB" DROPBEHIND_STATS="$d/stats" ls -l "$d/small" >/dev/null
check "small directory: left alone (no report at all)" [ ! -s "$d/stats" ]
cold; rm -f "$d/stats"; LD_PRELOAD="$LIB" DROPBEHIND_DIR=off DROPBEHIND_STATS="$d/stats" ls -l "$d/aged" >/dev/null
check "DROPBEHIND_DIR=off: no prefetch" [ ! -s "$d/stats" ]

# No thread and no fd of ours outlives closedir for long; fd numbers the program gets are
# the same as without the shim.
probe="import os,sys,time
fds=[]
for _ in range(3):
    os.listdir(sys.argv[1]); fds.append(os.open('/dev/null', os.O_RDONLY))
time.sleep(0.5)
print(fds, sorted(os.listdir('/proc/self/fd')), len(os.listdir('/proc/self/task')))"
cold; a=$(python3 -c "$probe" "$d/aged"); cold; b=$(LD_PRELOAD="$LIB" python3 -c "$probe" "$d/aged")
check "after closedir: same fd numbers, no fd or thread left ($b)" [ "$a" = "$b" ]

# The prefetch threads lower their own priority, never the program's: its nice value, read
# while the prefetch runs and after, stays what it was.
nice_probe="import os,sys
before=os.getpriority(os.PRIO_PROCESS, 0)
it=os.scandir(sys.argv[1]); next(it)
during=os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, os.getpid())
it.close()
print(before, during, os.getpriority(os.PRIO_PROCESS, 0))"
cold; a=$(python3 -c "$nice_probe" "$d/aged"); cold; b=$(LD_PRELOAD="$LIB" python3 -c "$nice_probe" "$d/aged")
check "the program's own priority is untouched ($b)" [ "$a" = "$b" ]
# ... while the prefetch threads themselves run at nice 19 (not on xfs; this is not xfs).
helpers_nice="import os,sys,time
it=os.scandir(sys.argv[1]); next(it)
seen=set(); end=time.monotonic() + 2
while time.monotonic() < end and '19' not in seen:
    for t in os.listdir('/proc/self/task'):
        try:
            if open(f'/proc/self/task/{t}/comm').read().strip() == 'dropbehind-dir':
                seen.add(open(f'/proc/self/task/{t}/stat').read().rsplit(')', 1)[1].split()[16])
        except OSError:
            pass
    time.sleep(0.001)
print('19' in seen)"
cold; b=$(LD_PRELOAD="$LIB" python3 -c "$helpers_nice" "$d/aged")
if [ "$(stat -f -c %T "$d")" = xfs ]; then skip "helper priority: scratch dir on xfs"
else check "prefetch threads run at nice 19 ($b)" [ "$b" = True ]; fi

# A program that sandboxes itself (no_new_privs, then a seccomp filter on all its threads
# that kills on statx and getdents64) while a prefetch of its directory is running: the
# shim's threads must all be gone first, or the kernel kills the process (it did: SIGSYS).
seccomp_check() { # WHERE DIR
    if [ -x "$d/dir_seccomp" ]; then
        cold; local a b
        a=$("$d/dir_seccomp" "$2" 2>&1); cold; b=$(LD_PRELOAD="$LIB" "$d/dir_seccomp" "$2" 2>&1)
        check "$1: seccomp filter during a prefetch, same end ($b)" [ "$a" = "$b" ]
    fi
}
if command -v cc >/dev/null && cc -O0 -w -o "$d/dir_seccomp" "$ROOT/shim-tests/helpers/dir_seccomp.c" 2>/dev/null; then
    seccomp_check "local disk" "$d/aged"
else
    skip "seccomp filter during a prefetch: no C compiler"
fi

# On the slow disk, where cold stats cost milliseconds.
if is_root && "$ROOT/scripts/slowdisk.sh" check 2>/dev/null; then
    sd=$d/slow
    if mnt=$("$ROOT/scripts/slowdisk.sh" up "$sd" --fs ext4 --size 1G 2>"$d/sd.err"); then
        python3 "$ROOT/scripts/make-dirs.py" aged "$mnt/aged" 5000
        run_suite "slow disk ext4" "$mnt/aged"
        seccomp_check "slow disk ext4" "$mnt/aged"
    else
        skip "slow disk: $(cat "$d/sd.err")"
    fi
else
    skip "slow disk: needs root, nbdkit, nbdfuse and a loop device"
fi
