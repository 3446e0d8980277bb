#!/usr/bin/env bash
# Trees of small files: copies, archives and checksum runs over a directory of small files
# leave source and result (nearly) uncached with a page-cache peak well below the trees'
# size (plain runs peak at the source plus the result), with identical bytes; small files a process keeps reading while cached are never dropped; a process that
# reads its input again stops dropping.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'damon_resume; rm -rf "$d"' EXIT

# mktree DIR FILES KIB DIRS: FILES files of KIB KiB of random data spread over DIRS dirs.
mktree() {
    python3 - "$@" <<'PY'
import os, sys
root, files, kib, dirs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for i in range(files):
    sub = os.path.join(root, f"d{i % dirs:03}")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"f{i:05}"), "wb") as f:
        f.write(os.urandom(kib * 1024))
PY
}
# evict_tree DIR...: write back and drop every file below DIR.
evict_tree() { find "$@" -type f -print0 | xargs -0 -r python3 -c '
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED); os.close(fd)'; }
# tree_cached_kib DIR: KiB of the files below DIR in the page cache (0 for none).
tree_cached_kib() {
    [ -e "$1" ] || { echo 0; return; }
    files_cached_kib $(find "$1" -type f)
}
# files_cached_kib FILE...: KiB of these files in the page cache.
files_cached_kib() {
    "$LAUNCHER" stat --json "$@" | python3 -c '
import json, sys; print(sum(r["cached_pages"] for r in json.load(sys.stdin)) * 4)'
}
# cache_peak_mib CMD...: run CMD in a fresh memory cgroup, sampling its page cache
# (memory.stat "cache") every 50 ms; prints the peak in MiB on fd 3 ("none": not measured).
cache_peak_mib() {
    local cg peakf sampler rc
    cg=$(cg_new) || { echo none >&3; return 125; }
    peakf=$(mktemp); echo 0 >"$peakf"
    ( peak=0; while :; do
        c=$(awk '$1 == "cache" {print $2; exit}' "$cg/memory.stat" 2>/dev/null)
        [ -n "$c" ] && [ "$c" -gt "$peak" ] && { peak=$c; echo "$peak" >"$peakf"; }
        sleep 0.05
      done ) &
    sampler=$!
    cg_run "$cg" "$@"; rc=$?
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    if [ $rc = 125 ]; then echo none >&3; else echo $(($(cat "$peakf") / MiB)) >&3; fi
    rm -f "$peakf"
    cg_close "$cg"
    return $rc
}

mktree "$d/a" 160 256 8     # 40 MiB of 256 KiB files
mktree "$d/b" 3000 8 20     # 23 MiB of 8 KiB files
sync

jobs_=(
    "cp -r::cp -r SRC DST"
    "rsync -a::rsync -a SRC/ DST/"
    "tar cf::tar cf DST.tar -C SRC ."
    "tar xf::mkdir DST && tar xf SRC.tar -C DST"
    "find | xargs sha256sum::find SRC -type f -print0 | sort -z | xargs -0 sha256sum >DST.sums"
    "python3 shutil.copytree::python3 -c 'import shutil,sys; shutil.copytree(*sys.argv[1:])' SRC DST"
)
for tree in a b; do
    src=$d/$tree
    tar cf "$src.tar" -C "$src" .        # for tar xf
    for j in "${jobs_[@]}"; do
        name="$tree: ${j%%::*}"; cmd=${j#*::}
        dst=$d/out; rm -rf "$dst" "$dst.tar" "$dst.sums"
        cmd=${cmd//SRC/$src}; cmd=${cmd//DST/$dst}
        evict_tree "$src" "$src.tar"
        if have_cgroup; then
            peak=$( { cache_peak_mib "${SHIM[@]}" DROPBEHIND_STATS="$d/report" bash -c "$cmd"; } 3>&1 )
        else
            DROPBEHIND_STATS="$d/report" shim bash -c "$cmd"; peak=
        fi
        src_kib=$(tree_cached_kib "$src")
        case $name in
            *"tar xf") src_kib=$(tree_cached_kib "$src.tar"); out=$dst ;;
            *"tar cf") out=$dst.tar ;;
            *sha256sum) out=$dst.sums ;;
            *) out=$dst ;;
        esac
        out_kib=$(tree_cached_kib "$out")
        case $name in
            *"tar cf") same="tar tf '$dst.tar' >/dev/null && mkdir $d/x && tar xf '$dst.tar' -C $d/x && diff -r '$src' $d/x; r=\$?; rm -rf $d/x; exit \$r" ;;
            *sha256sum) same="(cd / && sha256sum --quiet -c '$dst.sums')" ;;
            *) same="diff -r '$src' '$dst'" ;;
        esac
        check "$name: result identical" bash -c "$same"
        check "$name: at most 2 MiB of the source cached after ($src_kib KiB)" "[ $src_kib -le 2048 ]"
        check "$name: at most 2 MiB of the result cached after ($out_kib KiB)" "[ $out_kib -le 2048 ]"
        if [ -n "$peak" ]; then
            check "$name: page cache peak at most 32 MiB ($peak MiB)" "[ '$peak' != none ] && [ '$peak' -le 32 ]"
        fi
    done
    if ! have_cgroup; then skip "$tree: page cache peaks: needs root and the cgroup v1 memory controller"; fi
done

# Hot small files: 2000 cached files of 4-64 KiB read 20 times over by one process (an
# interpreter importing modules, a compiler reading headers) stay cached, none dropped.
python3 - "$d/hot" <<'PY'
import os, random, sys
random.seed(3)
for i in range(2000):
    sub = os.path.join(sys.argv[1], f"d{i % 20:02}")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"h{i:04}"), "wb") as f:
        f.write(os.urandom(random.choice([4, 8, 16, 32, 64]) * 1024))
PY
find "$d/hot" -type f -exec cat {} + >/dev/null     # cached
hot_before=$(tree_cached_kib "$d/hot")
DROPBEHIND_STATS="$d/hot.report" shim python3 - "$d/hot" <<'PY'
import os, sys
files = sorted(os.path.join(r, f) for r, _, fs in os.walk(sys.argv[1]) for f in fs)
for _ in range(20):
    for p in files:
        with open(p, "rb") as f:
            f.read()
PY
hot_after=$(tree_cached_kib "$d/hot")
check "hot small files: all still cached ($hot_after of $hot_before KiB)" "[ $hot_after -ge $hot_before ]"
# No report at all means the process did nothing to any file.
check "hot small files: the report shows none dropped" "[ ! -e '$d/hot.report' ] || grep -q 'small files dropped    0 ' '$d/hot.report'"

# A compiler reading cached headers: gcc -fsyntax-only on a source that includes 30 system
# headers (and what they include) drops none of them, and its report shows no drop.
if have gcc; then
    printf '#include <%s>\n' stdio.h stdlib.h string.h math.h errno.h fcntl.h unistd.h signal.h \
        pthread.h sys/stat.h sys/types.h sys/mman.h sys/socket.h netinet/in.h arpa/inet.h netdb.h \
        time.h ctype.h locale.h wchar.h stdint.h inttypes.h dirent.h poll.h sys/epoll.h sys/wait.h \
        termios.h regex.h glob.h dlfcn.h >"$d/headers.c"
    echo 'int main(void) { return 0; }' >>"$d/headers.c"
    mapfile -t hdrs < <(gcc -M "$d/headers.c" | tr ' \\' '\n\n' | grep '\.h$' | sort -u)
    cat "${hdrs[@]}" >/dev/null; gcc -fsyntax-only "$d/headers.c"     # cached
    h_before=$(files_cached_kib "${hdrs[@]}")
    DROPBEHIND_STATS="$d/gcc.report" shim gcc -fsyntax-only "$d/headers.c"
    h_after=$(files_cached_kib "${hdrs[@]}")
    check "gcc -fsyntax-only: its ${#hdrs[@]} cached headers all still cached ($h_after of $h_before KiB)" \
        "[ ${#hdrs[@]} -ge 30 ] && [ $h_after -ge $h_before ]"
    check "gcc -fsyntax-only: the report shows none dropped" \
        "[ ! -e '$d/gcc.report' ] || ! grep -Eq 'small files dropped +[1-9]|pages released +[1-9]' '$d/gcc.report'"
else
    skip "gcc -fsyntax-only on cached headers: gcc missing"
fi

# The same cached files opened, read once and closed (os.open, no fstat of the program's
# own), counted without the shim and with it: once its first files were all cached, the
# shim looks at one small file in 64 at all, so it adds a few fstat and cachestat calls
# per hundred files, not one per file. Under strace the runs are slow enough for a DAMON
# pageout scheme to take some of the files (one found cold and the shim rightly checks
# every file after it): it is paused meanwhile.
if have strace; then
    damon_pause
    # stat_calls [PREFIX...]: fstat and cachestat calls of the run (strace -c -f).
    stat_calls() {
        find "$d/hot" -type f -exec cat {} + >/dev/null
        strace -f -c -o "$d/calls" "$@" python3 - "$d/hot" <<'PY' >/dev/null
import os, sys
files = sorted(os.path.join(r, f) for r, _, fs in os.walk(sys.argv[1]) for f in fs)
for _ in range(3):
    for p in files:
        fd = os.open(p, os.O_RDONLY)
        os.read(fd, 65536)
        os.close(fd)
PY
        awk '$NF ~ /^(fstat|newfstatat|statx|cachestat|syscall_0x1c3)$/ { n += $4 } END { print n + 0 }' "$d/calls"
    }
    plain_calls=$(stat_calls)
    shim_calls=$(stat_calls "${SHIM[@]}")
    check "hot small files: 6000 opens cost the shim at most 600 fstat and cachestat calls ($shim_calls against $plain_calls)" \
        "[ -n '$shim_calls' ] && [ \$(($shim_calls - $plain_calls)) -le 600 ]"
    # With the tree off no small file is ever checked: every such first read goes through.
    off_calls=$(stat_calls env DROPBEHIND_TREE=off "${SHIM[@]}")
    check "hot small files, tree off: 6000 opens cost the shim at most 600 fstat and cachestat calls ($off_calls against $plain_calls)" \
        "[ -n '$off_calls' ] && [ \$(($off_calls - $plain_calls)) -le 600 ]"
    damon_resume
else
    skip "hot small files: system calls per open: strace missing"
fi

# A big cold file that such a process then reads in 4 KiB reads is still a stream the shim
# drops behind: its first read, which the shim let through unexamined, leaves at most
# readahead's first window behind.
make_file "$d/big" 64
shim python3 - "$d/hot" "$d/big" <<'PY'
import os, sys
for r, _, fs in os.walk(sys.argv[1]):
    for f in sorted(fs):
        fd = os.open(os.path.join(r, f), os.O_RDONLY)
        os.read(fd, 65536)
        os.close(fd)
fd = os.open(sys.argv[2], os.O_RDONLY)
while os.read(fd, 4096):
    pass
os.close(fd)
PY
big_kib=$(cached_kib "$d/big")
check "a big cold file read after 2000 cached ones: at most 1 MiB of it cached after ($big_kib KiB)" "[ $big_kib -le 1024 ]"

# Files read only in part (head, file): left alone, even in a process that streams others
# whole. One process reads tree a whole (it shows bulk I/O), then the first 100 bytes of
# every file of tree b: what readahead brought in of b stays.
evict_tree "$d/a" "$d/b"
shim python3 - "$d/a" "$d/b" <<'PY2'
import os, sys
for root in sys.argv[1:]:
    for r, _, fs in os.walk(root):
        for f in sorted(fs):
            with open(os.path.join(r, f), "rb") as h:
                h.read() if root == sys.argv[1] else h.read(100)
PY2
part_kib=$(tree_cached_kib "$d/b")
check "files read only in part: left cached ($part_kib KiB of tree b)" "[ $part_kib -ge 4096 ]"

# One process reading a cold tree three times: the second pass sees files it streamed
# and stops dropping, so the third pass reads from the cache.
evict_tree "$d/a"
third=$(shim python3 - "$d/a" <<'PY'
import os, sys
files = sorted(os.path.join(r, f) for r, _, fs in os.walk(sys.argv[1]) for f in fs)
def read_bytes():
    with open("/proc/self/io") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("read_bytes"))
for n in range(3):
    before = read_bytes()
    for p in files:
        with open(p, "rb") as f:
            while f.read(65536):
                pass
    last = read_bytes() - before
print(last // 1024)
PY
)
check "a tree read three times: the third pass reads from the cache (${third:-?} KiB from the device)" "[ -n '$third' ] && [ '$third' -le 1024 ]"
