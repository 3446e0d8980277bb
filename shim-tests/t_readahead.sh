#!/usr/bin/env bash
# Readahead ahead, on the slow-disk fixture (128 KiB device readahead, 2 ms per request):
# sequential readers and mmap scans get prefetch in big requests, random readers none;
# outputs identical and the footprint still bounded. Needs root (the fixture).
. "$(dirname "$0")/lib.sh"
if ! is_root || ! "$ROOT/scripts/slowdisk.sh" check >/dev/null 2>&1; then
    skip "readahead on the slow-disk fixture: $("$ROOT/scripts/slowdisk.sh" check 2>&1 || true)"
    exit 0
fi
d=$(scratch)
sd=$d/sd
cleanup() { "$ROOT/scripts/slowdisk.sh" down "$sd" >/dev/null 2>&1; rm -rf "$d"; }
trap cleanup EXIT
mnt=$("$ROOT/scripts/slowdisk.sh" up "$sd" --fs ext4 --size 1G --ra-kb 128 | tail -1)
dev=$(basename "$(findmnt -n -o SOURCE "$mnt")")
F=$mnt/f
head -c $((128 * MiB)) /dev/urandom >"$F"; sync
cold() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# stat_field REPORT LABEL: the number in parentheses on the report line LABEL starts.
stat_field() { grep -o "^  $2 *[0-9.]*[KMG]*  *([0-9]*" "$1" | grep -o '[0-9]*$'; }
# reads_and_kib: completed reads and KiB read on the fixture's device so far.
io() { awk '{print $1, $3 / 2}' "/sys/block/$dev/stat"; }
# avg_kib BEFORE AFTER: average read size between two `io` samples.
avg_kib() { echo "$@" | awk '{ if ($3 > $1) print int(($4 - $2) / ($3 - $1)); else print 0 }'; }

# sequential NAME CMD...: CMD cold without and with the shim: same output, prefetch issued,
# bigger device reads, footprint bounded after.
sequential() {
    local name=$1; shift
    local a0 a1 b0 b1 want got batches plain ours kib
    both_runs() {
        cold; a0=$(io); want=$("$@" | sha256sum); a1=$(io)
        cold; canary_arm
        rm -f "$d/s"; b0=$(io); got=$(DROPBEHIND_STATS="$d/s" shim "$@" | sha256sum); b1=$(io)
        kib=$(cached_kib "$F")
    }
    undisturbed both_runs "$@"
    check "$name: same bytes" [ "$want" = "$got" ]
    batches=$(stat_field "$d/s" prefetched); rm -f "$d/s"
    check "$name: prefetch issued ($batches batches)" [ "${batches:-0}" -gt 0 ]
    plain=$(avg_kib $a0 $a1); ours=$(avg_kib $b0 $b1)
    check "$name: bigger device reads ($plain KiB -> $ours KiB on average)" [ "$ours" -ge $((plain * 2)) ]
    check "$name: footprint bounded (${kib} KiB of 128 MiB cached after)" [ "$kib" -le 2048 ]
}

for bs in 4K 128K; do
    sequential "dd bs=$bs" dd if="$F" bs=$bs status=none
done

cold; DROPBEHIND_READAHEAD=0 DROPBEHIND_STATS="$d/s_off" shim cat "$F" >/dev/null
check "DROPBEHIND_READAHEAD=0: no prefetch" [ "$(stat_field "$d/s_off" prefetched)" = 0 ]

cold; DROPBEHIND_STATS="$d/s_rand" shim python3 -c 'import os,sys,random
fd=os.open(sys.argv[1],os.O_RDONLY); r=random.Random(1); n=os.fstat(fd).st_size//4096
print(sum(len(os.pread(fd,4096,r.randrange(n)*4096)) for _ in range(2000)))' "$F" >/dev/null
check "random 4 KiB preads: no prefetch" [ "$(stat_field "$d/s_rand" prefetched)" = 0 ]

scan='import mmap,sys,hashlib
f=open(sys.argv[1],"rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)
print(hashlib.sha256(b"".join(m[o:o+1] for o in range(0,len(m),4096))).hexdigest())'
sequential "mmap scan" python3 -c "$scan" "$F"
