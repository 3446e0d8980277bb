#!/usr/bin/env bash
# Write drop-behind and in-kernel copies: every common copier leaves source and destination
# (nearly) uncached, produces identical bytes, and stays within a small cgroup footprint.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'rm -rf "$d"' EXIT
SIZE=${COPY_TEST_MIB:-256}
mkdir -p "$d/src"
F=$d/src/f
make_file "$F" "$SIZE"
sum=$(sha256sum <"$F")

copiers=(
    "cp (copy_file_range)|cp $F $d/out"
    "dd bs=1M|dd if=$F of=$d/out bs=1M status=none"
    "python3 shutil.copyfile (sendfile)|python3 -c 'import shutil,sys; shutil.copyfile(*sys.argv[1:])' $F $d/out"
    "cat F > G|cat $F > $d/out"
    "tar cf|tar cf $d/out -C $d src"
    "rsync|rsync $F $d/out"
    "python3 stdio-style writes (4 KiB)|python3 -c 'import sys;i=open(sys.argv[1],\"rb\");o=open(sys.argv[2],\"wb\")
while (b:=i.read(4096)): o.write(b)' $F $d/out"
    "cp --sparse=always (read/write)|cp --sparse=always $F $d/out"
)

for c in "${copiers[@]}"; do
    name=${c%%|*}; cmd=${c#*|}
    tool=${cmd%% *}
    if ! have "$tool"; then skip "$name: $tool missing"; continue; fi
    rm -f "$d/out"; evict "$F"
    bash -c "$cmd"; want=$(sha256sum <"$d/out")
    shimmed_copy() {
        rm -f "$d/out"; evict "$F"; sync
        peak=
        if have_cgroup; then
            # Residency is read while the group still exists (closing it may reclaim its pages).
            cg=$(cg_new)
            cg_run "$cg" "${SHIM[@]}" bash -c "$cmd" && peak=$(cg_peak_mib "$cg") || peak=none
            src_kib=$(cached_kib "$F"); dst_kib=$(cached_kib "$d/out")
            cg_close "$cg"
        else
            shim bash -c "$cmd"
            src_kib=$(cached_kib "$F"); dst_kib=$(cached_kib "$d/out")
        fi
    }
    undisturbed shimmed_copy
    got=$(sha256sum <"$d/out")
    check "$name: destination identical" [ "$want" = "$got" ]
    [ "${name#tar}" != "$name" ] || check "$name: destination equals source" [ "$got" = "$sum" ]
    check "$name: at most 2 MiB of each file cached after (src $src_kib KiB, dst $dst_kib KiB)" \
        '[ "$src_kib" -le 2048 ] && [ "$dst_kib" -le 2048 ]'
    if [ -n "$peak" ]; then
        check "$name: cgroup peak $peak MiB, at most 64" [ "$peak" -le 64 ]
    fi
done
have_cgroup || skip "copy cgroup peaks: need root and the cgroup v1 memory controller"

# Appending (O_APPEND, `>>`) to a file whose start is cached (16 MiB read, and readahead's
# share): the stream starts at the file's end, so those pages are not taken for the
# stream's and stay; what was appended goes. (A shim that planned the stream from the file
# position, 0 until the first append, would drop the cached start.)
append_to_warm() {
    make_file "$d/log" 32
    want_log=$(cat "$d/log" "$F" | sha256sum)
    evict "$d/log"; evict "$F"; warm "$d/log" 16
    before_kib=$(cached_kib "$d/log")
    shim bash -c "cat $F >>$d/log"
    kept_kib=$(cached_kib "$d/log")
}
undisturbed append_to_warm
check "cat F >> G: G is its old bytes then F's" [ "$(sha256sum <"$d/log")" = "$want_log" ]
check "cat F >> G: what was cached before stays, the appended $SIZE MiB go ($before_kib KiB before, $kept_kib after)" \
    '[ "$before_kib" -ge 16384 ] && [ "$kept_kib" -ge "$before_kib" ] && [ "$kept_kib" -le $((before_kib + 2048)) ]'
rm -f "$d/log"

# Small files are left completely alone: no writeback started, nothing dropped.
head -c 100000 /dev/urandom >"$d/small"
if have strace; then
    strace -f -e trace=sync_file_range,fadvise64 -o "$d/trace" "${SHIM[@]}" cp "$d/small" "$d/small2" 2>/dev/null
    check "small file copy: no sync_file_range or fadvise" [ "$(grep -c -E 'sync_file_range|fadvise64\(.*DONTNEED' "$d/trace")" = 0 ]
else
    skip "small file copy syscalls: strace missing"
    shim cp "$d/small" "$d/small2"
fi
check "small file copy: identical" cmp -s "$d/small" "$d/small2"

# The shim never syncs for the program: no fsync/fdatasync in a streaming copy. The control
# (dd conv=fsync, whose own fsync the same trace must see) shows the trace would catch one.
if have strace; then
    syncs() { grep -c -E '^[0-9]+ +(fsync|fdatasync|syncfs|sync)\(' "$1"; }
    rm -f "$d/out"
    strace -f -e trace=fsync,fdatasync,syncfs,sync -o "$d/trace" "${SHIM[@]}" dd if="$F" of="$d/out" bs=1M status=none
    rm -f "$d/out"
    strace -f -e trace=fsync,fdatasync,syncfs,sync -o "$d/trace_control" "${SHIM[@]}" dd if="$F" of="$d/out" bs=1M conv=fsync status=none
    check "no fsync, fdatasync or syncfs added ($(syncs "$d/trace") traced; control with conv=fsync: $(syncs "$d/trace_control"))" \
        '[ "$(syncs "$d/trace")" = 0 ] && [ "$(syncs "$d/trace_control")" -ge 1 ]'
else
    skip "no fsync added: strace missing"
fi

# A writer whose windows come far apart (2 MiB every 8 ms or more: rsync's receiver, one
# every 3-4 ms) gets one wake of the writeback helper a window, not the naps kept for a
# tree's files (writeback.rs, `Idle`): 42 switches for 32 windows, 344 with the naps.
rm -f "$d/out"
switches=$(shim python3 -c '
import os, sys, time
out = open(sys.argv[1], "wb", buffering=0)
chunk = os.urandom(256 << 10)
for _ in range(256):
    out.write(chunk)
    time.sleep(0.001)
n = -1
for t in os.listdir("/proc/self/task"):
    if open(f"/proc/self/task/{t}/comm").read().strip() == "dropbehind-wb":
        n = next(int(l.split()[1]) for l in open(f"/proc/self/task/{t}/status") if l.startswith("voluntary_ctxt_switches"))
print(n)' "$d/out")
check "a slow writer's 32 windows: the writeback helper switched out at most 128 times ($switches)" \
    '[ "$switches" -ge 1 ] && [ "$switches" -le 128 ]'

# The writeback helper gives way to other work: it runs at nice 10 (or at the program's
# own, if that is lower), and never changes the program's; under a seccomp filter it keeps
# the program's priority, since a filter may kill the process for setpriority
# (writeback.rs, `HELPER_NICE`).
wb_nice='import os, sys
own = os.getpriority(os.PRIO_PROCESS, 0)
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
chunk = b"x" * (1 << 20)
seen = {}
for _ in range(64):
    os.write(fd, chunk)
    for t in os.listdir("/proc/self/task"):
        try:
            if open(f"/proc/self/task/{t}/comm").read().strip() == "dropbehind-wb":
                # The last look at each thread: a new one is named before it lowers itself.
                seen[t] = open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[16]
        except OSError:
            pass
os.close(fd)
print(own, os.getpriority(os.PRIO_PROCESS, 0), ",".join(sorted(set(seen.values()))))'
rm -f "$d/out"
a=$(python3 -c "$wb_nice" "$d/out"); b=$(shim python3 -c "$wb_nice" "$d/out")
base=${a%% *}
if [ "$base" -ge 10 ]; then
    skip "writeback helper at nice 10: the tests run at nice $base already"
else
    check "writeback helper at nice 10, the program's own priority untouched ($a / $b)" \
        '[ "$a" = "$base $base " ] && [ "$b" = "$base $base 10" ]'
fi
# A helper that set nice 10 outright would raise itself above this program; only a
# privileged one can, so only root's run shows it.
low=$((base + 15 > 19 ? 19 : base + 15))
if [ "$(id -u)" != 0 ]; then
    skip "a niced program's writeback helper: need root (only a privileged helper could raise itself)"
else
    b=$(nice -n 15 "${SHIM[@]}" python3 -c "$wb_nice" "$d/out")
    check "a program at nice $low: its writeback helper stays at $low ($b)" [ "$b" = "$low $low $low" ]
fi
if have cc && cc -O2 -w -o "$d/seccomp_exec" "$ROOT/shim-tests/helpers/seccomp_exec.c" 2>"$d/cc.err"; then
    b=$(shim "$d/seccomp_exec" python3 -c "$wb_nice" "$d/out" 2>&1)
    check "under a seccomp filter that kills on setpriority: the writer ends well, its helper at the program's priority ($b)" \
        [ "$b" = "$base $base $base" ]
else
    skip "writeback helper under a seccomp filter: no C compiler ($(head -c 200 "$d/cc.err"))"
fi
rm -f "$d/out"
