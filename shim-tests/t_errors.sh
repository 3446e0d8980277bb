#!/usr/bin/env bash
# Errors pass through exactly: same exit code, same message, same bytes on disk.
. "$(dirname "$0")/lib.sh"
d=$(scratch)
cleanup() { mountpoint -q "$d/mnt" 2>/dev/null && umount "$d/mnt"; rm -rf "$d"; }
trap cleanup EXIT
make_file "$d/f" 96

same() { # same NAME CMD: run CMD without and with the shim, compare exit code and output
    local name=$1 cmd=$2 a b ra rb
    a=$(bash -c "$cmd" 2>&1); ra=$?
    b=$(shim bash -c "$cmd" 2>&1); rb=$?
    check "$name: exit $ra and output identical (exit $rb under the shim)" '[ "$ra" = "$rb" ] && [ "$a" = "$b" ]'
}
same "cat a directory (EISDIR)" "cat $d"
same "cat a missing file (ENOENT)" "cat $d/missing"
same "read from a write-only fd (EBADF)" "exec 3>$d/wo; cat <&3"
same "python: read after close (EBADF)" "python3 -c 'import os;fd=os.open(\"$d/f\",os.O_RDONLY);os.close(fd);os.read(fd,10)'"
same "python: errno of a failed pread" "python3 -c 'import os;fd=os.open(\"$d/f\",os.O_RDONLY);print(os.pread(fd,10,-5))'"
same "dd past the end" "dd if=$d/f of=/dev/null bs=1M skip=200 count=1 status=none; echo \$?"
same "writing to /dev/full (ENOSPC)" "dd if=$d/f of=/dev/full bs=1M count=2 status=none"

# A filesystem that fills up mid-copy (dd without its timing line, which differs run to run).
if is_root && command -v mkfs.ext4 >/dev/null && losetup -f >/dev/null 2>&1; then
    mkdir -p "$d/mnt"
    truncate -s 64M "$d/img"
    mkfs.ext4 -q -F "$d/img"
    if mount -o loop "$d/img" "$d/mnt"; then
        for copier in "cp $d/f $d/mnt/out" "dd if=$d/f of=$d/mnt/out bs=1M status=noxfer" "python3 -c 'import shutil,sys; shutil.copyfile(*sys.argv[1:])' $d/f $d/mnt/out" "cat $d/f > $d/mnt/out"; do
            rm -f "$d/mnt/out"; sync
            a=$(bash -c "$copier" 2>&1); ra=$?; sync; sa=$(sha256sum <"$d/mnt/out"); na=$(stat -c %s "$d/mnt/out")
            rm -f "$d/mnt/out"; sync
            b=$(shim bash -c "$copier" 2>&1); rb=$?; sync; sb=$(sha256sum <"$d/mnt/out"); nb=$(stat -c %s "$d/mnt/out")
            check "full fs, ${copier%% *}: exit $ra (shim $rb), same message, same $na bytes on disk (shim $nb)" \
                '[ "$ra" = "$rb" ] && [ "$a" = "$b" ] && [ "$sa" = "$sb" ] && [ "$ra" != 0 ]'
        done
        umount "$d/mnt"
    else
        skip "full filesystem: loop mount failed"
    fi
else
    skip "full filesystem: needs root, mkfs.ext4 and a loop device"
fi

# A device that fails every write once the data is written: the error reaches the
# program's own fsync with and without the shim (the shim writes back early, from an fd of
# its own, and never waits through the program's). Disk made by scripts/slowdisk.sh.
if "$ROOT/scripts/slowdisk.sh" check 2>/dev/null; then
    for writer in "python3 $ROOT/shim-tests/helpers/fsync_after_writes.py MNT/out 64" \
        "dd if=$d/f of=MNT/out bs=1M conv=fsync status=none"; do
        for run in plain shim; do
            rm -f "$d/trigger"
            if ! mnt=$("$ROOT/scripts/slowdisk.sh" up "$d/sd" --fs ext2 --delay-ms 0 --size 512M --fail-writes "$d/trigger" 2>"$d/sd.err"); then
                skip "failing device: slowdisk up failed: $(tail -1 "$d/sd.err")"; continue 2
            fi
            touch "$d/trigger"
            if [ $run = plain ]; then
                out=$(bash -c "${writer//MNT/$mnt}" 2>&1); rc=$?
            else
                out=$(shim bash -c "${writer//MNT/$mnt}" 2>&1); rc=$?
            fi
            rm -f "$d/trigger"
            "$ROOT/scripts/slowdisk.sh" down "$d/sd"
            eval "${run}_out=\$out ${run}_rc=\$rc"
        done
        # shellcheck disable=SC2154
        check "failing device, ${writer%% *}: the write error reaches the program (exit $plain_rc: $plain_out)" '[ "$plain_rc" != 0 ] || [[ "$plain_out" == *"Input/output error"* ]]'
        check "failing device, ${writer%% *}: exit $shim_rc and output identical under the shim ($shim_out)" '[ "$plain_rc" = "$shim_rc" ] && [ "$plain_out" = "$shim_out" ]'
    done
    # The device fails only the first half's writes: the shim wrote them back while it did
    # (a plain run still holds them dirty, and its fsync succeeds). The program's fsync must
    # report that error: a wait through the program's own fd would have consumed it.
    rm -f "$d/trigger"
    if mnt=$("$ROOT/scripts/slowdisk.sh" up "$d/sd" --fs ext2 --delay-ms 0 --size 512M --fail-writes "$d/trigger" 2>"$d/sd.err"); then
        touch "$d/trigger"
        out=$(shim python3 "$ROOT/shim-tests/helpers/fsync_after_writes.py" "$mnt/out" 64 "$d/trigger" 2>&1)
        "$ROOT/scripts/slowdisk.sh" down "$d/sd"
        check "failing device for the first 32 MiB only: the early writeback's error reaches the program's fsync ($out)" '[[ "$out" == *"fsync: Input/output error"* ]]'
    else
        skip "failing device: slowdisk up failed: $(tail -1 "$d/sd.err")"
    fi
else
    skip "failing device: $("$ROOT/scripts/slowdisk.sh" check 2>&1)"
fi

# A program that sandboxes itself a few ms after writing a file: the writeback helper must
# be gone first, whether it was still writing back or idle (it once slept through the stop
# for a second and was killed under the filter: SIGSYS in 4 of 16 children).
if command -v cc >/dev/null && cc -O2 -w -o "$d/wb_seccomp" "$ROOT/shim-tests/helpers/wb_seccomp.c" 2>"$d/cc.err"; then
    a=$("$d/wb_seccomp" "$d" 2>&1 | tail -1)
    b=$(shim "$d/wb_seccomp" "$d" 2>&1 | tail -1)
    check "seccomp filter a few ms after writes: every child ends as without the shim ($b; without: $a)" \
        '[ "$a" = "$b" ] && [ "$b" = "16 of 16 children ended well" ]'
else
    skip "seccomp filter after writes: no C compiler"
fi

# Edge cases found in review: bad pointers, odd counts, recycled fds, sockets, seccomp.
if command -v cc >/dev/null && cc -O2 -w -o "$d/edge_cases" "$ROOT/shim-tests/helpers/edge_cases.c" 2>"$d/cc.err"; then
    for backend in auto dontcache; do
        evict "$d/f"
        a=$("$d/edge_cases" "$d/f" 2>&1)
        evict "$d/f"
        b=$(DROPBEHIND_BACKEND=$backend shim "$d/edge_cases" "$d/f" 2>&1)
        if [ "$a" = "$b" ]; then
            ok "edge cases, backend $backend: every result and errno identical ($(echo "$a" | wc -l) cases)"
        else
            fail "edge cases, backend $backend: differences:"; diff <(echo "$a") <(echo "$b") | sed 's/^/    /'
        fi
    done
else
    skip "edge cases: no C compiler"
fi
