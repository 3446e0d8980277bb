#!/usr/bin/env bash
# Read drop-behind: readers leave a cold file (nearly) uncached, output unchanged, and pages
# cached before the run stay cached.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'rm -rf "$d"' EXIT
F=$d/f
make_file "$F" 256

readers=(
    "cat|cat $F"
    "sha256sum (stdio)|sha256sum $F"
    "python3 1 MiB reads|python3 -c 'import sys,hashlib;f=open(sys.argv[1],\"rb\",buffering=0);h=hashlib.sha256()
while (b:=f.read(1<<20)): h.update(b)
print(h.hexdigest())' $F"
    "dd bs=4k|dd if=$F bs=4k status=none"
    "awk (read 4 KiB at a time)|awk 'END{print NR}' $F"
)

for r in "${readers[@]}"; do
    name=${r%%|*}; cmd=${r#*|}
    evict "$F"
    want=$(bash -c "$cmd" | sha256sum)
    shimmed_read() { evict "$F"; got=$(shim bash -c "$cmd" | sha256sum); kib=$(cached_kib "$F"); }
    undisturbed shimmed_read
    check "$name: output identical under the shim" [ "$want" = "$got" ]
    check "$name: at most 1 MiB of 256 MiB left cached ($kib KiB)" [ "$kib" -le 1024 ]
done

# Readahead advice: a sequential reader that gives none of its own (dd) gets the depth cp
# asks for (FADV_SEQUENTIAL), once; a program that advises keeps its own (cp's SEQUENTIAL,
# Python's RANDOM before reading through), and DROPBEHIND_READAHEAD=off gives none. A reach
# of 256K is one any device's readahead (128 KiB at least) doubles to: the shim then
# prefetches nothing of its own on any disk, and doubles the kernel's instead.
if have strace; then
    advised() { # NAME CMD...: CMD under strace; prints its FADV_SEQUENTIAL calls
        local t=$d/advice.$1; shift
        evict "$F"; strace -f -qq -e trace=fadvise64 -o "$t" "$@" >/dev/null
        grep -c 'POSIX_FADV_SEQUENTIAL' "$t"
    }
    n=$(DROPBEHIND_READAHEAD=256K advised dd "${SHIM[@]}" dd if="$F" bs=1M status=none)
    check "dd bs=1M, no advice of its own: one FADV_SEQUENTIAL from the shim ($n)" [ "$n" = 1 ]
    # Inherited: the shell opened it; advice would reach every process sharing it.
    n=$(DROPBEHIND_READAHEAD=256K advised inherited "${SHIM[@]}" dd bs=1M status=none <"$F")
    check "dd bs=1M reading a file the shell opened for it (<F): none ($n)" [ "$n" = 0 ]
    n=$(DROPBEHIND_READAHEAD=off advised off "${SHIM[@]}" dd if="$F" bs=1M status=none)
    check "dd bs=1M with DROPBEHIND_READAHEAD=off: none ($n)" [ "$n" = 0 ]
    n=$(DROPBEHIND_READAHEAD=256K advised cp "${SHIM[@]}" cp --reflink=never "$F" "$d/advice_copy")
    rm -f "$d/advice_copy"
    check "cp, which advises SEQUENTIAL itself: its own call only ($n)" [ "$n" = 1 ]
    n=$(DROPBEHIND_READAHEAD=256K advised random "${SHIM[@]}" python3 -c 'import os,sys
fd=os.open(sys.argv[1],os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_RANDOM)
while os.read(fd,1<<20): pass' "$F")
    check "python3 advising RANDOM, then reading through: none ($n)" [ "$n" = 0 ]
else
    skip "readahead advice: strace missing"
fi

# Random reads are left alone (what their readahead brought in stays); a sequential pass
# after them is still dropped behind.
random_reads="import os,sys;fd=os.open(sys.argv[1],os.O_RDONLY);[os.pread(fd,4096,o*7919*4096%(1<<28)) for o in range(64)]"
random_then_sequential() {
    evict "$F"; python3 -c "$random_reads" "$F"; random_kib=$(cached_kib "$F")
    evict "$F"
    shim python3 -c "$random_reads
n=0
while (b:=os.pread(fd,1<<17,n)): n+=len(b)
print(n)" "$F" >/dev/null
    kib=$(cached_kib "$F")
}
undisturbed random_then_sequential
# Residency is proven per 64 KiB chunk: a chunk holding a page cached before is kept whole.
bound=$((random_kib * 16 + 2048))
check "pread random then sequential: $kib KiB cached (random reads alone: $random_kib; bound $bound)" [ "$kib" -le $bound ]

# Someone else's working set: the first 64 MiB cached before the stream starts.
warm_prefix() { evict "$F"; warm "$F" 64; before=$(cached_kib "$F"); shim cat "$F" >/dev/null; after=$(cached_kib "$F"); }
undisturbed warm_prefix
check "pages cached before the stream survive ($after of $before KiB)" [ "$after" -ge $((before * 99 / 100)) ]
check "and the rest was dropped ($after KiB cached after)" [ "$after" -le $((before + 1024)) ]

# Scattered hot pages (1 MiB every 16 MiB) survive too.
scattered() {
    evict "$F"
    for i in $(seq 0 15); do dd if="$F" of=/dev/null bs=1M skip=$((i * 16)) count=1 status=none; done
    before=$(cached_kib "$F")
    shim sha256sum "$F" >/dev/null
    after=$(cached_kib "$F")
}
undisturbed scattered
# Each 1 MiB region may keep the 64 KiB chunks at its edges and the readahead past its end.
bound=$((before + 16 * 512 + 1024))
check "scattered pages cached before survive, the rest dropped ($after of $before KiB; at most $bound)" \
    '[ "$after" -ge $((before * 99 / 100)) ] && [ "$after" -le $bound ]'

# Peak memory-cgroup usage of a cold read.
if have_cgroup; then
    for r in "cat|cat $F" "sha256sum|sha256sum $F"; do
        name=${r%%|*}; cmd=${r#*|}
        evict "$F"; plain=$( { peak_mib bash -c "$cmd" >/dev/null; } 3>&1 )
        # A cache drop elsewhere mid-run would lower the peak whatever the shim did.
        peak_run() { evict "$F"; shimmed=$( { peak_mib "${SHIM[@]}" bash -c "$cmd" >/dev/null; } 3>&1 ); }
        undisturbed peak_run
        check "$name: cgroup peak $shimmed MiB with the shim (plain: $plain MiB), at most 64" [ "$shimmed" -le 64 ]
    done
else
    skip "cgroup peak of a cold read: needs root and the cgroup v1 memory controller"
fi

# Files the user can't write: cachestat refuses, so residency is unknowable. Reads that
# end on readahead's folios' ends go uncached (RWF_DONTCACHE); others are left as they are:
# the kernel drops a folio at the end of an uncached read that used only part of it, and
# the next read brings it in again (docs/kernel-facts.md).
if is_root && command -v setpriv >/dev/null; then
    chmod 755 "$d"; chmod 644 "$F"; evict "$F"
    want=$(sha256sum <"$F")
    size=$(stat -c %s "$F")
    as_nobody() { # CMD...: run as nobody under the shim: got (output's hash), disk (bytes
        # read from storage by it), kib (left cached)
        local out
        evict "$F"
        out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "${SHIM[@]}" \
            sh -c '"$@" | sha256sum; grep ^read_bytes: /proc/$$/io' sh "$@")
        got=$(head -1 <<<"$out"); disk=$(awk '/^read_bytes:/ { print $2 }' <<<"$out")
        kib=$(cached_kib "$F")
    }
    undisturbed as_nobody cat "$F"
    check "unprovable file (cat as nobody): output identical" [ "$want" = "$got" ]
    undisturbed as_nobody dd if="$F" bs=2M status=none
    check "unprovable file, 2 MiB reads: output identical" [ "$want" = "$got" ]
    check "unprovable file, 2 MiB reads: RWF_DONTCACHE leaves at most 16 MiB ($kib KiB)" [ "$kib" -le 16384 ]
    undisturbed as_nobody dd if="$F" bs=64k status=none
    check "unprovable file, 64 KiB reads: output identical" [ "$want" = "$got" ]
    check "unprovable file, 64 KiB reads: read from the disk once ($disk of $size bytes)" \
        [ "$disk" -le $((size + 4 * 1048576)) ]
    # 16 MiB in 2 MiB reads, then 16 MiB in 4 KiB reads, and again: the first small read
    # ends the stream's uncached reads. Readahead made the folios ahead of the uncached
    # reads dropbehind, and the kernel drops such a folio at the end of any read of it, so
    # each small read of one would read it all again. What the reads took from the disk is
    # counted by the program itself (its own start-up reads left out).
    evict "$F"
    out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "${SHIM[@]}" python3 -c '
import hashlib, os, sys
def disk():
    with open("/proc/self/io") as f:
        return int(next(l for l in f if l.startswith("read_bytes")).split()[1])
fd, h, n = os.open(sys.argv[1], os.O_RDONLY), hashlib.sha256(), 1
start = disk()
while n:
    n = 0
    for size, count in ((2 << 20, 8), (4096, 4096)):
        for _ in range(count):
            b = os.read(fd, size)
            h.update(b)
            n += len(b)
print(h.hexdigest(), disk() - start)' "$F")
    check "unprovable file, 2 MiB and 4 KiB reads mixed: output identical" [ "${out%% *}" = "${want%% *}" ]
    check "unprovable file, 2 MiB and 4 KiB reads mixed: the file read once, and one readahead window ($((${out##* } >> 20)) MiB of $((size >> 20)))" \
        [ "${out##* }" -le $((size + 24 * 1048576)) ]
    evict "$F"
    left=$(setpriv --reuid=nobody --regid=nogroup --clear-groups "${SHIM[@]}" DROPBEHIND_STATS=1 \
        dd if="$F" bs=64k status=none of=/dev/null 2>&1 | awk '/^  read, left cached/ { print $4 }')
    # (The stream's first reads come before it is found sequential.)
    check "unprovable file, 64 KiB reads: the report counts them as left cached ($left)" \
        grep -qE '^(25[0-9](\.[0-9])?|256)M$' <<<"$left"
    if have strace; then
        evict "$F"
        strace -f -qq -o "$d/nobody.trace" setpriv --reuid=nobody --regid=nogroup \
            --clear-groups "${SHIM[@]}" dd if="$F" bs=64k status=none of=/dev/null
        n=$(grep -cE 'cachestat|syscall_0x1c3' "$d/nobody.trace")
        check "unprovable file: cachestat asked once, not again for every window ($n)" [ "$n" -le 2 ]
    else
        skip "cachestat calls on an unprovable file (strace): strace is not installed (make deps)"
    fi
else
    skip "reading as another user: needs root and setpriv"
fi
