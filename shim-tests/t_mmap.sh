#!/usr/bin/env bash
# File mappings: a sequential mmap scan is dropped behind (pages cached before it stay),
# sparse faulting over a huge sparse file gets MADV_RANDOM, the program's own hints are
# respected, and mapped bytes read the same through fork, mremap and private writes.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'rm -rf "$d"' EXIT
F=$d/f
make_file "$F" 256

# The report's own "prefetched" line (readahead), not "directories prefetched".
no_prefetch() { grep -q "^  prefetched  *0  (" "$1"; }

scan='import mmap,sys,hashlib
f=open(sys.argv[1],"rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ); h=hashlib.sha256()
for o in range(0,len(m),1<<20): h.update(m[o:o+(1<<20)])
m.close(); print(h.hexdigest())'

evict "$F"; want=$(python3 -c "$scan" "$F")
first_scan() { evict "$F"; rm -f "$d/s1"; got=$(DROPBEHIND_STATS="$d/s1" shim python3 -c "$scan" "$F"); scan_kib=$(cached_kib "$F"); }
undisturbed first_scan
check "mmap scan: same bytes under the shim" [ "$want" = "$got" ]
check "mmap scan: at most 4 MiB of 256 MiB left cached after munmap ($scan_kib KiB)" [ "$scan_kib" -le 4096 ]
check "mmap scan: counted as one sequential mapping" grep -q "file mappings *1 *(1 sequential" "$d/s1"

# Every fd the shim opens for a mapping (its reopening of the file, /proc/self/pagemap) is
# opened on a thread of the program's, never on the mapping watcher's (see
# thread_fd_calls). python3 itself starts no thread for this.
if have strace; then
    evict "$F"
    elsewhere=$(thread_fd_calls "${SHIM[@]}" python3 -c "$scan" "$F")
    check "mmap scan: no fd made on the shim's helper threads (${elsewhere:-none})" '[ -z "$elsewhere" ]'
else
    skip "mmap scan: no fd made on the shim's helper threads: strace missing"
fi

# A mapping still there at exit (no munmap) is dropped at exit.
mapped_at_exit() {
    evict "$F"
    shim python3 -c 'import mmap,sys
f=open(sys.argv[1],"rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)
print(sum(m[o] for o in range(0,len(m),4096)))' "$F" >/dev/null
    kib=$(cached_kib "$F")
}
undisturbed mapped_at_exit
check "mmap scan left mapped at exit: at most 4 MiB of 256 MiB left cached ($kib KiB)" [ "$kib" -le 4096 ]

# DROPBEHIND_MMAP=off: mappings are not watched. Control: the same scan with it on (above)
# was dropped behind.
mmap_off() { evict "$F"; DROPBEHIND_MMAP=off shim python3 -c "$scan" "$F" >/dev/null; kib=$(cached_kib "$F"); }
undisturbed mmap_off
check "DROPBEHIND_MMAP=off: the mapping is left alone ($kib KiB cached; on: $scan_kib KiB)" \
    '[ "$kib" -ge $((250 * 1024)) ] && [ "$scan_kib" -le 4096 ]'

# Someone else's working set in the mapped file stays.
warm_prefix() { evict "$F"; warm "$F" 64; before=$(cached_kib "$F"); shim python3 -c "$scan" "$F" >/dev/null; after=$(cached_kib "$F"); }
undisturbed warm_prefix
check "mmap scan: pages cached before survive ($after of $before KiB)" [ "$after" -ge $((before * 99 / 100)) ]
check "mmap scan: and the rest was dropped ($after KiB)" [ "$after" -le $((before + 4096)) ]

# Seed 003 in small: every 100th page of a 64 GiB sparse file through a mapping. Each
# fault reads ahead megabytes of holes; the watcher notices and gives MADV_RANDOM.
S=$d/sparse
truncate -s 64G "$S"; printf 'data at the start' | dd of="$S" conv=notrunc status=none
stride='import mmap,sys
f=open(sys.argv[1],"rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)
print(sum(m[i*100*4096] for i in range(int(sys.argv[2]))), m[:17])'
stride_runs() {
    evict "$S"; want=$(python3 -c "$stride" "$S" 3000); plain_kib=$(cached_kib "$S")
    evict "$S"; rm -f "$d/s2"; got=$(DROPBEHIND_STATS="$d/s2" shim python3 -c "$stride" "$S" 3000)
    shim_kib=$(cached_kib "$S")
}
undisturbed stride_runs
check "stride-100 mmap: same bytes" [ "$want" = "$got" ]
check "stride-100 mmap: mapping given MADV_RANDOM" grep -q ", 1 given MADV_RANDOM" "$d/s2"
check "stride-100 mmap: nothing prefetched" no_prefetch "$d/s2"
check "stride-100 mmap: holes read ahead cut ($shim_kib KiB cached vs $plain_kib without the shim)" [ "$shim_kib" -le $((plain_kib / 2)) ]
evict "$S"

# The same load by pread: a random stream, no prefetch, no drop.
evict "$S"
DROPBEHIND_STATS="$d/s3" shim python3 -c 'import os,sys
fd=os.open(sys.argv[1],os.O_RDONLY); print(sum(os.pread(fd,1,i*100*4096)[0] for i in range(20000)))' "$S" >/dev/null
check "stride-100 pread: nothing prefetched" no_prefetch "$d/s3"
check "stride-100 pread: nothing dropped" grep -q "pages released *0 " "$d/s3"
evict "$S"; rm -f "$S"

# The program's own hint wins: a mapping it advised is handed back untouched.
own_hint() {
    evict "$F"; rm -f "$d/s4"
    DROPBEHIND_STATS="$d/s4" shim python3 -c 'import mmap,sys
f=open(sys.argv[1],"rb"); m=mmap.mmap(f.fileno(),0,prot=mmap.PROT_READ)
m.madvise(mmap.MADV_SEQUENTIAL)
print(sum(m[o] for o in range(0,len(m),4096)))' "$F" >/dev/null
    kib=$(cached_kib "$F")
}
undisturbed own_hint
check "program's MADV_SEQUENTIAL: no random hint of ours" grep -q ", 0 given MADV_RANDOM" "$d/s4"
check "program's MADV_SEQUENTIAL: its mapping is not dropped behind ($kib KiB cached)" [ "$kib" -ge $((200 * 1024)) ]

# Hostile: fork while mapped, mremap (mmap.resize), private writes, munmap; same output.
hostile='import mmap,os,sys,hashlib
f=open(sys.argv[1],"r+b"); n=os.fstat(f.fileno()).st_size
m=mmap.mmap(f.fileno(),n//2,flags=mmap.MAP_SHARED,prot=mmap.PROT_READ|mmap.PROT_WRITE)
pid=os.fork()
if pid==0:
    os._exit(hashlib.sha256(m[:1<<24]).digest()[0])
_,st=os.waitpid(pid,0)
h=hashlib.sha256(m[:]); m.resize(n); h.update(m[n//2:]); m.close()
p=mmap.mmap(f.fileno(),0,flags=mmap.MAP_PRIVATE,prot=mmap.PROT_READ|mmap.PROT_WRITE)
for o in range(0,n,1<<22): p[o:o+5]=b"xxxxx"
for o in range(0,n,1<<20): h.update(p[o:o+(1<<20)])
print(os.WEXITSTATUS(st), h.hexdigest())'
evict "$F"; want=$(python3 -c "$hostile" "$F")
evict "$F"; got=$(shim python3 -c "$hostile" "$F")
check "fork, mremap, private writes: same output" [ "$want" = "$got" ]
evict "$F"; got=$(DROPBEHIND_WINDOW=64K shim python3 -c "$hostile" "$F")
check "same with the smallest window" [ "$want" = "$got" ]
