#!/usr/bin/env bash
# Directory inode prefetch: programs that list and stat big directories print exactly the
# same with and without the shim, cold and warm; the prefetch runs for cold big
# directories, not for warm ones, and leaves no thread or fd behind.
. "$(dirname "$0")/lib.sh"
d=$(scratch)
sd= sd2= sd3= sd4=
cleanup() {
    [ -n "$sd" ] && "$ROOT/scripts/slowdisk.sh" down "$sd" >/dev/null 2>&1
    [ -n "$sd2" ] && "$ROOT/scripts/slowdisk.sh" down "$sd2" >/dev/null 2>&1
    [ -n "$sd3" ] && "$ROOT/scripts/slowdisk.sh" down "$sd3" >/dev/null 2>&1
    [ -n "$sd4" ] && "$ROOT/scripts/slowdisk.sh" down "$sd4" >/dev/null 2>&1
    rm -rf "$d"
}
trap cleanup EXIT
lts_wrap=()
N=${DIR_TEST_ENTRIES:-20000}

# cold: drop the page, dentry and inode caches (root only: callers check is_root and skip
# with a reason otherwise; a run without it is never reported as cold).
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# dir_line REPORT: the report's directory line ("directories prefetched N  (M inodes; ...").
dir_line() { grep -o 'directories prefetched.*' "$1" 2>/dev/null | tail -1; }

commands=(
    "ls -l|ls -l --time-style=+%s DIR"
    "du -s|du -s DIR"
    "find -printf|find DIR -printf '%s %p\n'"
    "python3 scandir + stat|python3 -c 'import os,sys;print(sorted((e.name, e.stat(follow_symlinks=False).st_ino) for e in os.scandir(sys.argv[1]))[-3:])' DIR"
    "rsync -an|rsync -an --out-format=%n DIR/ $d/rsync-target/"
    "ls -f (order)|ls -f DIR"
)

run_suite() { # LABEL DIR
    local label=$1 dir=$2 name cmd a b w ra rb rw
    for c in "${commands[@]}"; do
        name=${c%%|*}; cmd=${c#*|}; cmd=${cmd//DIR/$dir}
        if ! have "${cmd%% *}"; then skip "$label, $name: ${cmd%% *} missing"; continue; fi
        if is_root; then
            cold; a=$(bash -c "$cmd" 2>&1); ra=$?
            cold; b=$(DROPBEHIND_STATS="$d/stats" shim bash -c "$cmd" 2>&1); rb=$?
        else
            a=$(bash -c "$cmd" 2>&1); ra=$?
            b=$(DROPBEHIND_STATS="$d/stats" shim bash -c "$cmd" 2>&1); rb=$?
        fi
        w=$(shim bash -c "$cmd" 2>&1); rw=$?
        if is_root; then
            check "$label, $name: identical output, cold and warm (exit $ra; shim $rb cold, $rw warm)" \
                '[ "$ra" = "$rb" ] && [ "$ra" = "$rw" ] && [ "$a" = "$b" ] && [ "$a" = "$w" ]'
        else
            check "$label, $name: identical output, warm (exit $ra; shim $rb, $rw)" \
                '[ "$ra" = "$rb" ] && [ "$ra" = "$rw" ] && [ "$a" = "$b" ] && [ "$a" = "$w" ]'
            skip "$label, $name: cold run needs root (drop_caches)"
        fi
    done
}

python3 "$ROOT/scripts/make-dirs.py" aged "$d/aged" "$N"
run_suite "local disk" "$d/aged"
if is_root; then
    cold
    rm -f "$d/stats_cold"; DROPBEHIND_STATS="$d/stats_cold" shim ls -l "$d/aged" >/dev/null
    cold_line=$(dir_line "$d/stats_cold")
    inodes=$(echo "$cold_line" | sed -n 's/.*(\([0-9]*\) inodes.*/\1/p')
    check "cold big directory: prefetched, at least $((N / 2)) of its $N inodes (${cold_line:-no report})" \
        'grep -q "directories prefetched 1 " "$d/stats_cold" && [ "${inodes:-0}" -ge $((N / 2)) ]'
    # A vfork child's closes are its own: CPython's subprocess closes every fd above 2 in
    # the child (close_range) before it execs, while it still shares the parent's memory,
    # the prefetch's table of jobs with it (that stopped the parent's prefetch: 0 inodes).
    cold
    rm -f "$d/stats_vfork"
    DROPBEHIND_STATS="$d/stats_vfork" shim python3 -c "import os,subprocess,sys
it = os.scandir(sys.argv[1]); subprocess.run(['true'])
print(sum(1 for e in it if e.stat(follow_symlinks=False)))" "$d/aged" >/dev/null
    vf_inodes=$(sed -n 's/.*directories prefetched 1 *(\([0-9]*\) inodes.*/\1/p' "$d/stats_vfork" | head -1)
    check "cold big directory: a vfork child's close_range leaves the parent's prefetch going (${vf_inodes:-no} inodes)" \
        '[ "${vf_inodes:-0}" -ge $((N / 2)) ]'
    # The helpers stat and list on fds the program's thread opened for them (see
    # thread_fd_calls in lib.sh).
    cold
    if have strace; then
        elsewhere=$(thread_fd_calls "${SHIM[@]}" ls -l "$d/aged")
        check "cold big directory: no fd made on the shim's helper threads (${elsewhere:-none})" '[ -z "$elsewhere" ]'
    else
        skip "cold big directory: no fd made on the shim's helper threads: strace missing"
    fi
else
    skip "cold big directory prefetched: needs root (drop_caches)"
fi
rm -f "$d/stats_warm"; DROPBEHIND_STATS="$d/stats_warm" shim ls -l "$d/aged" >/dev/null
warm_line=$(dir_line "$d/stats_warm")
check "warm big directory: not prefetched (${warm_line:-no report})" grep -q "directories prefetched 0 .*1 big directories found warm" "$d/stats_warm"
# Control: the same shim, on the big directory in the same (warm) state, did report it.
mkdir -p "$d/small"; touch "$d/small/a" "$d/small/b"
rm -f "$d/stats"; DROPBEHIND_STATS="$d/stats" shim ls -l "$d/small" >/dev/null
check "small directory: left alone (no report), where the big one was found warm (${warm_line:-no report})" \
    '[ ! -s "$d/stats" ] && grep -q "directories prefetched 0 .*1 big directories found warm" "$d/stats_warm"'
if is_root; then
    # Control: the same cold listing with the prefetch on was prefetched.
    cold; rm -f "$d/stats"; DROPBEHIND_DIR=off DROPBEHIND_STATS="$d/stats" shim ls -l "$d/aged" >/dev/null
    check "DROPBEHIND_DIR=off: no prefetch (no report; on, the same cold listing: ${cold_line:-no report})" \
        '[ ! -s "$d/stats" ] && grep -q "directories prefetched 1 " "$d/stats_cold"'
else
    skip "DROPBEHIND_DIR=off on a cold directory: needs root (drop_caches)"
fi

if ! is_root; then
    skip "fd numbers, priorities and seccomp during a prefetch: need root (a cold directory)"
    exit 0
fi
# No thread and no fd of ours outlives closedir for long; fd numbers the program gets are
# the same as without the shim.
probe="import os,sys,time
fds=[]
for _ in range(3):
    os.listdir(sys.argv[1]); fds.append(os.open('/dev/null', os.O_RDONLY))
time.sleep(0.5)
print(fds, sorted(os.listdir('/proc/self/fd')), len(os.listdir('/proc/self/task')))"
cold; a=$(python3 -c "$probe" "$d/aged"); cold; b=$(shim python3 -c "$probe" "$d/aged")
check "after closedir: same fd numbers, no fd or thread left ($b)" [ "$a" = "$b" ]

# The prefetch threads lower their own priority, never the program's: its nice value, read
# while the prefetch runs and after, stays what it was.
nice_probe="import os,sys
before=os.getpriority(os.PRIO_PROCESS, 0)
it=os.scandir(sys.argv[1]); next(it)
during=os.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PROCESS, os.getpid())
it.close()
print(before, during, os.getpriority(os.PRIO_PROCESS, 0))"
cold; a=$(python3 -c "$nice_probe" "$d/aged"); cold; b=$(shim python3 -c "$nice_probe" "$d/aged")
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
cold; b=$(shim python3 -c "$helpers_nice" "$d/aged")
if [ "$(stat -f -c %T "$d")" = xfs ]; then skip "helper priority: scratch dir on xfs"
else check "prefetch threads run at nice 19 ($b)" [ "$b" = True ]; fi

# A program that sandboxes itself (no_new_privs, then a seccomp filter on all its threads
# that kills on statx and getdents64) while a prefetch of its directory is running: the
# shim's threads must all be gone first, or the kernel kills the process (it did: SIGSYS).
seccomp_check() { # WHERE DIR
    local where=$1 dir=$2 a b
    cold; a=$("$d/dir_seccomp" "$dir" 2>&1); cold; b=$(shim "$d/dir_seccomp" "$dir" 2>&1)
    check "$where: seccomp filter during a prefetch, same end ($b)" [ "$a" = "$b" ]
}
have_seccomp=
if have cc && cc -O0 -w -o "$d/dir_seccomp" "$ROOT/shim-tests/helpers/dir_seccomp.c" 2>"$d/cc.err"; then
    have_seccomp=1
    seccomp_check "local disk" "$d/aged"
else
    skip "seccomp filter during a prefetch: no C compiler, or it failed: $(head -1 "$d/cc.err" 2>/dev/null)"
fi

# A program that reads the whole directory before it stats (fts: du, find) is seen once it
# is at the directory's end, and the prefetch's rest goes in inode order, as it stats.
have_list_then_stat=
if have cc && cc -O2 -w -o "$d/list_then_stat" "$ROOT/shim-tests/helpers/list_then_stat.c" 2>"$d/cc.err"; then
    have_list_then_stat=1
fi
have_dup_statx=
if have cc && cc -O2 -w -o "$d/dup_statx" "$ROOT/shim-tests/helpers/dup_statx.c" 2>>"$d/cc.err"; then
    have_dup_statx=1
fi
# lts_check LABEL PATTERN DIR [SECONDS [PART [US]]]: list_then_stat, run cold under the shim,
# prints what it prints without it, and the prefetch's debug lines include PATTERN.
lts_check() {
    local label=$1 pattern=$2 plain out
    shift 2
    if [ -z "$have_list_then_stat" ]; then skip "$label: no C compiler"; return; fi
    plain=$("$d/list_then_stat" "$@" 2>&1)
    cold; out=$(DROPBEHIND_LOG=debug shim "${lts_wrap[@]}" "$d/list_then_stat" "$@" 2>"$d/lts.log")
    check "$label, output identical ($out)" '[ "$out" = "$plain" ] && grep -q "$pattern" "$d/lts.log"'
}
order_check() { # LABEL DIR
    lts_check "$1: list, then stat: the rest of the prefetch in inode order" "the rest by inode" "$2"
}

# xfs on a slow device, run by root: each inode cluster is read by number (bulkstat), with
# no lookup to wait for the directory's index; under a seccomp filter or without
# CAP_SYS_ADMIN by lookups. All give what a plain run gives.
xfs_reads_check() { # DIR
    local cmd="ls -l --time-style=+%s $1" a b c
    a=$(bash -c "$cmd" 2>&1)
    cold; b=$(DROPBEHIND_LOG=debug shim bash -c "$cmd" 2>"$d/xfs-bulk.log")
    check "slow disk xfs, as root: inode clusters read by bulkstat, output identical" \
        '[ "$a" = "$b" ] && grep -q "inode clusters read by Bulkstat" "$d/xfs-bulk.log" && ! grep -q "bulkstat failed" "$d/xfs-bulk.log"'
    # A program sandboxed before it starts (a seccomp filter that kills on that ioctl) is
    # left to lookups: the shim makes no call such a filter may not expect.
    if have cc && cc -O2 -w -o "$d/seccomp_exec" "$ROOT/shim-tests/helpers/seccomp_exec.c" 2>"$d/cc.err"; then
        local e rc
        cold; e=$(DROPBEHIND_LOG=debug shim "$d/seccomp_exec" bash -c "$cmd" 2>"$d/xfs-seccomp.log"); rc=$?
        check "slow disk xfs, under a seccomp filter: inode clusters read by lookups, not killed (exit $rc), output identical" \
            '[ "$rc" = 0 ] && [ "$a" = "$e" ] && grep -q "inode clusters read by Lookup" "$d/xfs-seccomp.log"'
    else
        skip "slow disk xfs, under a seccomp filter: no C compiler, or it failed: $(head -1 "$d/cc.err" 2>/dev/null)"
    fi
    if ! have setpriv; then skip "slow disk xfs, without CAP_SYS_ADMIN: setpriv missing"; return; fi
    cold; c=$(setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin \
        env DROPBEHIND_LOG=debug "${SHIM[@]}" bash -c "$cmd" 2>"$d/xfs-lookup.log")
    check "slow disk xfs, without CAP_SYS_ADMIN: inode clusters read by lookups, output identical" \
        '[ "$a" = "$c" ] && grep -q "inode clusters read by Lookup" "$d/xfs-lookup.log"'
}

# ext4 on a slow device: the workers wait for the listing, which has the device to itself
# meanwhile. A program that reads the directory to its end before it stats (fts) finds no
# stats taken before the listing ended.
listing_first_check() { # DIR
    lts_check "slow disk ext4: no stats taken before the listing ends" \
        "entries listed in [0-9]* ms (0 runs of stats taken meanwhile)" "$1"
    # Still reading when the listing ends (1 ms for every 100 entries past the first 2,000,
    # as fts's own work keeps `du` reading past the listing of 100,000), it gets the stats
    # in inode order from then on; `ls -l`, statting its first batch by then, gets them in
    # the order it reads.
    lts_check "slow disk ext4: a program reading on past the listing gets its stats by inode" \
        "the program reads on after [0-9]* ms: the stats by inode" "$1" 0 0 1000
    local a b
    a=$(ls -l --time-style=+%s "$1" 2>&1)
    cold; b=$(DROPBEHIND_LOG=debug shim ls -l --time-style=+%s "$1" 2>"$d/ls-order.log")
    check "slow disk ext4: ls -l gets its stats in reading order, output identical" \
        '[ "$a" = "$b" ] && grep -q "entries listed" "$d/ls-order.log" && ! grep -q "reads on" "$d/ls-order.log"'
}

# ext4 on a slow device, the device readable (root): the directory's blocks, then the
# table blocks of the inodes it lists, are asked of the device in a few large reads ahead
# of the listers' one-block and the lookups' 32-block reads: a program that lists, then
# stats, makes far fewer requests than without the shim (5000 aged entries: 49
# against 266).
device_reads_check() { # DIR
    local st a b n0 plain shimmed
    if [ -z "$have_list_then_stat" ]; then skip "slow disk ext4: reads through the device: no C compiler"; return; fi
    st=/sys/block/$(basename "$(findmnt -n -o SOURCE --target "$1")")/stat
    if [ ! -r "$st" ]; then skip "slow disk ext4: reads through the device: no request count ($st)"; return; fi
    cold; n0=$(awk '{ print $1 }' "$st"); a=$("$d/list_then_stat" "$1" 2>&1)
    plain=$(($(awk '{ print $1 }' "$st") - n0))
    cold; n0=$(awk '{ print $1 }' "$st")
    b=$(DROPBEHIND_LOG=debug shim "$d/list_then_stat" "$1" 2>"$d/device-reads.log")
    shimmed=$(($(awk '{ print $1 }' "$st") - n0))
    check "slow disk ext4: the directory and its inode tables read through the device ($shimmed requests, $plain without the shim), output identical ($b)" \
        '[ "$a" = "$b" ] && grep -q "of the directory.s blocks (" "$d/device-reads.log" &&
         grep -q "KiB of inode tables (" "$d/device-reads.log" && [ "$plain" -gt 0 ] && [ "$shimmed" -le $((plain / 2)) ]'
}

# fts (`du`, `find`) dups its stream's fd, reads the directory to its end, closes the
# stream and stats every entry through the dup: the prefetch goes on while the program
# holds the directory open that way and stats files through it (stopped at the closedir,
# it read nothing for `du`: as many requests as without the shim).
fts_dup_check() { # DIR
    local st a b n0 plain shimmed
    st=/sys/block/$(basename "$(findmnt -n -o SOURCE --target "$1")")/stat
    if [ ! -r "$st" ]; then skip "slow disk ext4: du through a dup: no request count ($st)"; return; fi
    cold; n0=$(awk '{ print $1 }' "$st"); a=$(du -s "$1"); plain=$(($(awk '{ print $1 }' "$st") - n0))
    cold; n0=$(awk '{ print $1 }' "$st")
    b=$(DROPBEHIND_LOG=debug shim du -s "$1" 2>"$d/fts-dup.log")
    shimmed=$(($(awk '{ print $1 }' "$st") - n0))
    check "slow disk ext4: du, which stats through a dup of its closed stream, gets the prefetch ($shimmed requests, $plain without the shim), output identical" \
        '[ "$a" = "$b" ] && grep -q "still holds the directory" "$d/fts-dup.log" &&
         grep -q "the program uses the entries through fd .*: the stats go on" "$d/fts-dup.log" &&
         [ "$plain" -gt 0 ] && [ "$shimmed" -le $((plain / 2)) ]'
}

# `find -name` reads the directory the same way, but then stats each subdirectory as it
# descends into it through the dup, and no file: from the closedir on only the directories
# are statted, the rest held back for a program that stats a file through the dup (`du`).
# With every entry statted, 637 requests against 75 without the shim (5000 aged entries
# and 20 subdirectories of 50 files on xfs).
find_name_check() { # DIR
    local st a b n0 plain shimmed
    st=/sys/block/$(basename "$(findmnt -n -o SOURCE --target "$1")")/stat
    if [ ! -r "$st" ]; then skip "slow disk xfs: find -name through a dup: no request count ($st)"; return; fi
    cold; n0=$(awk '{ print $1 }' "$st"); a=$(find "$1" -name nomatch); plain=$(($(awk '{ print $1 }' "$st") - n0))
    cold; n0=$(awk '{ print $1 }' "$st")
    b=$(DROPBEHIND_LOG=debug shim find "$1" -name nomatch 2>"$d/find-name.log")
    shimmed=$(($(awk '{ print $1 }' "$st") - n0))
    check "slow disk xfs: find -name, which stats no file through fts's dup, gets only the directories after the closedir ($shimmed requests, $plain without the shim), output identical" \
        '[ "$a" = "$b" ] && grep -q "only directories until the program uses a file through it" "$d/find-name.log" &&
         ! grep -q "the stats go on" "$d/find-name.log" && [ "$plain" -gt 0 ] && [ "$shimmed" -le $((plain * 2)) ]'
    cold; a=$(du -s "$1"); cold; b=$(DROPBEHIND_LOG=debug shim du -s "$1" 2>"$d/find-name-du.log")
    check "slow disk xfs: ... du there stats files through it and gets the rest, output identical" \
        '[ "$a" = "$b" ] && grep -q "the program uses the entries through fd .*: the stats go on" "$d/find-name-du.log"'
}

# `grep -r` opens the files through the dup and `rm -r` removes them, a newer program may
# statx them: each uses a file through it, and the prefetch goes on with every entry
# (removes the directory).
fts_uses_check() { # DIR
    local dir=$1 a ra b rb
    if [ -n "$have_dup_statx" ]; then
        cold; a=$("$d/dup_statx" "$dir"); cold; b=$(DROPBEHIND_LOG=debug shim "$d/dup_statx" "$dir" 2>"$d/dup-statx.log")
        check "slow disk xfs: a program that statx()es the entries through fts's dup gets every entry ($b)" \
            '[ "$a" = "$b" ] && grep -q "the program uses the entries through fd .*: the stats go on" "$d/dup-statx.log"'
    else skip "slow disk xfs: statx through fts's dup: no C compiler"; fi
    cold; a=$(grep -r nomatch "$1"); ra=$?
    cold; b=$(DROPBEHIND_LOG=debug shim grep -r nomatch "$1" 2>"$d/grep-r.log"); rb=$?
    check "slow disk xfs: grep -r, which opens the files through fts's dup, gets every entry (exit $ra, shim $rb), output identical" \
        '[ "$a" = "$b" ] && [ "$ra" = "$rb" ] && grep -q "the program uses the entries through fd .*: the stats go on" "$d/grep-r.log"'
    cold; DROPBEHIND_LOG=debug shim rm -rf "$1" 2>"$d/rm-r.log"; rb=$?
    check "slow disk xfs: rm -rf, which removes the files through fts's dup, gets every entry (exit $rb)" \
        '[ "$rb" = 0 ] && [ ! -e "$dir" ] && grep -q "the program uses the entries through fd .*: the stats go on" "$d/rm-r.log"'
}

# ... but one that stops reading short of the end to stat what it read (fts reads at most
# 100,000 entries at a time) gets its stats before the listing ends. On a 50 ms disk, where
# the 5000 entries take longer to list (150 ms and more: each lister reads its blocks one
# after another) than the 100 ms a position must stand still; in parts of 500, so that it
# stands still from its first batch on (with parts of 2500 it read cold blocks first, and a
# listing done in 162 ms beat its pause once; 14 of 14 with the 4 KiB ext4 probe, whose
# listing took 357 ms).
# Where the shim may read the device (root), the directory is read through it in a few reads
# and listed before a pause can show: the program runs where /dev holds no node for the
# device (a mount namespace of its own), as a program without permission to read it would.
parts_check() { # DIR
    if ! have unshare; then skip "slow disk ext4, 50 ms: stats before the listing ends: unshare missing"; return; fi
    local lts_wrap=(unshare -m --propagation private sh -c 'mount -t tmpfs none /dev && exec "$0" "$@"')
    lts_check "slow disk ext4, 50 ms: stats start before the listing ends for a program reading in parts" \
        "the stats start before the listing ends" "$1" 1 500
    check "slow disk ext4, 50 ms: ... with the device left unread" '! grep -q "asked of the device" "$d/lts.log"'
}

# xfs on a slow device: the index walk reads every leaf of the directory's hash index
# (counted by xfs_db from the directory's block map, on disk once a freeze has flushed the
# log), but for those the opendir probe read first (it stops at its second cold stat). The
# program lists, then waits, so that only the walk looks names up meanwhile.
leaf_walk_check() { # DIR
    local dev bsize ino leaves n
    dev=$(findmnt -n -o SOURCE --target "$1"); bsize=$(stat -f -c %S "$1"); ino=$(stat -c %i "$1")
    xfs_freeze -f "$1" && xfs_freeze -u "$1"
    # Leaf and node blocks live from 32 GiB into the directory, free-space blocks from 64.
    leaves=$(xfs_db -r -c "inode $ino" -c bmap "$dev" 2>/dev/null | awk -v lo=$((32 << 30)) -v b="$bsize" \
        '$3 * b >= lo && $3 * b < 2 * lo { n += $8 } END { print n - 1 }')
    cold; DROPBEHIND_LOG=debug shim "$d/list_then_stat" "$1" 3 2>"$d/walk.log" >/dev/null
    n=$(sed -n 's/.*index walked after [0-9]* ms (\([0-9]*\) leaves read.*/\1/p' "$d/walk.log")
    if [ "${leaves:--1}" -lt 2 ]; then
        skip "slow disk xfs: the index walk's leaves: xfs_db found no leaf blocks"; return
    fi
    check "slow disk xfs: the index walk reads its leaves (${n:-none} of $leaves, up to 2 read before it)" \
        '[ -n "$n" ] && [ "$n" -ge $((leaves - 2)) ]'
    # A program that listed the directory first looks the rest up itself: a worker beside
    # it would only hand it the directory's root buffer lock at every lookup.
    check "slow disk xfs: the rest left to a program that listed the directory first" \
        grep -q "the rest left to the program" "$d/walk.log"
    # One entry per inode cluster read first, not one per cluster in every listed batch:
    # those lookups queue on the directory's root buffer lock with the program's.
    local firsts groups
    firsts=$(sed -n 's/.*entries listed in [0-9]* ms (\([0-9]*\) read first.*/\1/p' "$d/walk.log")
    groups=$(ls -f -i "$1" | awk '!seen[int($1 / 16)]++ { n++ } END { print n + 0 }')
    check "slow disk xfs: one entry read first per inode cluster (${firsts:-none}, at most $groups)" \
        '[ -n "$firsts" ] && [ "$firsts" -le "$groups" ]'
    # A program that reads part of the directory and stats it before it reads on (fts, with
    # at most 100,000 entries at a time) looks names up itself meanwhile: the rest worker
    # waits while its position stands still, not to queue with it on the root buffer lock.
    lts_check "slow disk xfs: the rest waits while a program reading in parts stats one" \
        "the rest waits" "$1" 1 2500
}

# btrfs on a slow device: the listing is split by the directory's index numbers, whose end
# is found by probes first, and all of it is listed (`ls -l`, whose cold stats keep the
# directory open until then; `ls -f` closes it first). As root the index is read by tree
# search (no seek, so no exclusive lock of the directory); without CAP_SYS_ADMIN, as root
# of a user namespace (the ioctl refused), or under a seccomp filter, by getdents after a
# seek, as before. Either way the inodes are what the listing named: after a program that
# only listed the directory and held it open, a plain `ls -l` finds them cached.
btrfs_end_check() { # DIR
    local n m a b st plain left leg log
    m=$(ls -f -A "$1" | wc -l)
    a=$(ls -l --time-style=+%s "$1")
    if ! is_root; then
        b=$(DROPBEHIND_LOG=debug shim ls -l --time-style=+%s "$1" 2>"$d/btrfs-end.log")
        n=$(sed -n 's/.* \([0-9]*\) entries listed in .*/\1/p' "$d/btrfs-end.log")
        check "slow disk btrfs: the index end found by probes, every entry listed (${n:-none} of $m)" \
            '[ "$a" = "$b" ] && grep -q "offsets end at [0-9]*, found after" "$d/btrfs-end.log" && [ "${n:-0}" -ge "$m" ]'
        return
    fi
    st=/sys/block/$(basename "$(findmnt -n -o SOURCE --target "$1")")/stat
    cold; n=$(awk '{ print $1 }' "$st"); ls -l "$1" >/dev/null; plain=$(($(awk '{ print $1 }' "$st") - n))
    for leg in search seeks userns; do
        local pre=()
        case $leg in
            seeks)
                if ! have setpriv; then skip "slow disk btrfs, without CAP_SYS_ADMIN: setpriv missing"; continue; fi
                pre=(setpriv --inh-caps=-sys_admin --bounding-set=-sys_admin) ;;
            userns)
                if ! have unshare || ! unshare -U -r true 2>/dev/null; then
                    skip "slow disk btrfs, root of a user namespace: no unshare -U here"; continue
                fi
                pre=(unshare -U -r) ;;
        esac
        log=$d/btrfs-$leg.log
        cold; b=$("${pre[@]}" env DROPBEHIND_LOG=debug "${SHIM[@]}" ls -l --time-style=+%s "$1" 2>"$log")
        n=$(sed -n 's/.* \([0-9]*\) entries listed in .*/\1/p' "$log")
        case $leg in
            search) check "slow disk btrfs, as root: the index read by tree search, every entry listed (${n:-none} of $m), output identical" \
                '[ "$a" = "$b" ] && grep -q "btrfs index read by tree search" "$log" && [ "${n:-0}" -ge "$m" ]' ;;
            seeks) check "slow disk btrfs, without CAP_SYS_ADMIN: the end found by probes that seek, every entry listed (${n:-none} of $m), output identical" \
                '[ "$a" = "$b" ] && grep -q "offsets end at [0-9]*, found after" "$log" && ! grep -q "tree search" "$log" && [ "${n:-0}" -ge "$m" ]' ;;
            userns) check "slow disk btrfs, root of a user namespace: the search refused, probes that seek, every entry listed (${n:-none} of $m), output identical" \
                '[ "$a" = "$b" ] && grep -q "tree search refused: probes by seeks" "$log" && [ "${n:-0}" -ge "$m" ]' ;;
        esac
        [ "$leg" = userns ] && continue
        if [ -z "$have_list_then_stat" ]; then skip "slow disk btrfs, $leg: inodes the listing named: no C compiler"; continue; fi
        cold; "${pre[@]}" "${SHIM[@]}" "$d/list_then_stat" "$1" -3 >/dev/null
        n=$(awk '{ print $1 }' "$st"); ls -l "$1" >/dev/null; left=$(($(awk '{ print $1 }' "$st") - n))
        check "slow disk btrfs, $leg: after a shimmed program only listed it, ls -l makes $left requests (cold: $plain)" \
            '[ "$plain" -gt 20 ] && [ "$left" -le $((plain / 10)) ]'
    done
}

# On the slow disk, where cold stats cost milliseconds.
if "$ROOT/scripts/slowdisk.sh" check 2>/dev/null; then
    sd=$d/slow
    if mnt=$("$ROOT/scripts/slowdisk.sh" up "$sd" --fs ext4 --size 1G 2>"$d/sd.err"); then
        python3 "$ROOT/scripts/make-dirs.py" aged "$mnt/aged" 5000
        run_suite "slow disk ext4" "$mnt/aged"
        order_check "slow disk ext4" "$mnt/aged"
        listing_first_check "$mnt/aged"
        device_reads_check "$mnt/aged"
        fts_dup_check "$mnt/aged"
        if [ -n "$have_seccomp" ]; then seccomp_check "slow disk ext4" "$mnt/aged"
        else skip "slow disk ext4: seccomp filter during a prefetch: no C compiler"; fi
    else
        skip "slow disk: $(cat "$d/sd.err")"
    fi
    if sd3=$d/slow-50 && mnt3=$("$ROOT/scripts/slowdisk.sh" up "$sd3" --fs ext4 --size 1G --delay-ms 50 2>"$d/sd3.err"); then
        python3 "$ROOT/scripts/make-dirs.py" aged "$mnt3/aged" 5000
        # Written back and out of the journal, or the first cold run finds inodes cached.
        sync; have fsfreeze && fsfreeze -f "$mnt3" && fsfreeze -u "$mnt3"
        parts_check "$mnt3/aged"
    else
        skip "slow disk ext4, 50 ms: $(cat "$d/sd3.err")"
    fi
    # xfs on a slow device takes its own path (the index walk, one stat per inode cluster
    # first): the same programs, the same output.
    if ! have mkfs.xfs; then
        skip "slow disk xfs: mkfs.xfs missing"
    elif sd2=$d/slow-xfs && mnt2=$("$ROOT/scripts/slowdisk.sh" up "$sd2" --fs xfs --size 1G 2>"$d/sd2.err"); then
        python3 "$ROOT/scripts/make-dirs.py" aged "$mnt2/aged" 5000
        run_suite "slow disk xfs" "$mnt2/aged"
        order_check "slow disk xfs" "$mnt2/aged"
        if is_root; then xfs_reads_check "$mnt2/aged"
        else skip "slow disk xfs: inode clusters read by bulkstat: needs root"; fi
        if ! is_root; then skip "slow disk xfs: the index walk's leaves: needs root (a cold run)"
        elif [ -z "$have_list_then_stat" ] || ! have xfs_db || ! have xfs_freeze; then
            skip "slow disk xfs: the index walk's leaves: needs a C compiler, xfs_db and xfs_freeze"
        else leaf_walk_check "$mnt2/aged"; fi
        if [ -n "$have_seccomp" ]; then seccomp_check "slow disk xfs" "$mnt2/aged"
        else skip "slow disk xfs: seccomp filter during a prefetch: no C compiler"; fi
        if is_root; then
            python3 "$ROOT/scripts/make-dirs.py" aged "$mnt2/tree" 5000
            python3 -c 'import os, sys
for i in range(20):
    os.mkdir(f"{sys.argv[1]}/sub{i}")
    for j in range(50): open(f"{sys.argv[1]}/sub{i}/f{j}", "w").close()' "$mnt2/tree"
            sync
            find_name_check "$mnt2/tree"
            fts_uses_check "$mnt2/tree"
        else skip "slow disk xfs: find -name through a dup: needs root (a cold run)"; fi
    else
        skip "slow disk xfs: $(cat "$d/sd2.err")"
    fi
    # btrfs on a slow device: the index numbers' end probed, the listing split by them.
    if ! have mkfs.btrfs; then
        skip "slow disk btrfs: mkfs.btrfs missing"
    elif sd4=$d/slow-btrfs && mnt4=$("$ROOT/scripts/slowdisk.sh" up "$sd4" --fs btrfs --size 1G 2>"$d/sd4.err"); then
        python3 "$ROOT/scripts/make-dirs.py" aged "$mnt4/aged" 5000
        run_suite "slow disk btrfs" "$mnt4/aged"
        btrfs_end_check "$mnt4/aged"
    else
        skip "slow disk btrfs: $(cat "$d/sd4.err")"
    fi
else
    skip "slow disk: $("$ROOT/scripts/slowdisk.sh" check 2>&1)"
fi
