#!/usr/bin/env bash
# The launcher's tools and how it installs: the man page and completions (generated from
# its own definitions), make install, the .deb in a scratch root, `stat` on trees, `evict`,
# `env` for services and cron, and the --stats report as JSON.
. "$(dirname "$0")/lib.sh"
# Messages (strerror, man) in one language, whatever the caller's locale.
export LC_ALL=C.UTF-8
d=$(scratch); chmod 755 "$d"
mnt=
cleanup() { [ -n "$mnt" ] && umount "$mnt" 2>/dev/null; chmod -R u+rwx "$d" 2>/dev/null; rm -rf "$d"; }
trap cleanup EXIT
[ -n "${KEEP:-}" ] && trap - EXIT   # KEEP=1: leave the scratch directory for a look
B=$LAUNCHER

# Runs CMD as an unprivileged user (nobody) when root, else as is.
unpriv() {
    if is_root; then setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; else "$@"; fi
}
# fincore_sum FILE...: bytes of the files in the page cache, by util-linux fincore.
fincore_sum() { fincore -b -n -o RES "$@" | awk '{s += $1} END {printf "%.0f\n", s}'; }
# json_get EXPR: evaluates a Python expression on the JSON document on stdin (as `j`).
json_get() { python3 -c 'import json,sys; j=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }
# warm_exact FILE MiB: the first MiB of FILE cached, and nothing after (no readahead).
warm_exact() {
    python3 - "$1" "$2" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
for off in range(0, int(sys.argv[2]) << 20, 1 << 20):
    os.pread(fd, 1 << 20, off)
os.close(fd)
PY
}
# stable CMD...: CMD, run again (up to 5 times) while other processes drop the page cache
# (/proc/vmstat drop_pagecache moved during it): its status from an undisturbed run.
drops() { awk '/^drop_pagecache/ {print $2}' /proc/vmstat; }
stable() {
    local i rc before
    for i in 1 2 3 4 5; do
        before=$(drops)
        "$@"; rc=$?
        [ "$before" = "$(drops)" ] && return $rc
        echo "  (the page cache was dropped by someone else during the check: again)"
    done
    return $rc
}
# bad_input NEEDLE CMD...: exit status 2 and exactly one stderr line, naming NEEDLE.
bad_input() {
    local needle=$1; shift
    "$@" >/dev/null 2>"$d/bad.err"
    local rc=$?
    [ $rc = 2 ] && [ "$(wc -l <"$d/bad.err")" = 1 ] && grep -q -- "$needle" "$d/bad.err"
}

# --- man page and completions ---------------------------------------------------------
gen=$d/gen; mkdir -p "$gen"
for w in man bash zsh fish; do "$B" --generate $w >"$gen/$w" 2>"$d/gen.err"; done
# Every long option each --help lists, for the top level and each subcommand.
options() {
    { "$B" --help; for s in stat evict env; do "$B" $s --help; done; } |
        grep -oE -- '^ +(-[a-zA-Z], )?--[a-z][a-z-]*' | grep -oE -- '--[a-z-]+' | sort -u
}
names_all_options() { # FILE [SED]: every option appears in FILE (after SED: man's \-)
    local o
    for o in $(options); do
        grep -q -- "$o" <(sed "${2:-}" "$1") || { echo "  $1: no $o"; return 1; }
    done
}
if command -v man >/dev/null; then
    MANWIDTH=100 LC_ALL=C.UTF-8 man -l "$gen/man" >"$d/man.txt" 2>"$d/man.err"
    renders() { grep -q '^NAME' "$d/man.txt" && grep -q 'dropbehind evict' "$d/man.txt" && grep -q 'DROPBEHIND_STATS_FORMAT' "$d/man.txt" && [ ! -s "$d/man.err" ]; }
    check "man -l renders dropbehind(1): sections, commands, variables, no warnings" renders
    check "the man page names every option of every --help" names_all_options "$d/man.txt"
else
    skip "man -l: man is not installed (make deps)"
fi
bash_completes() { # WORDS... -> the completions for the last word
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
             _dropbehind dropbehind "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"; printf "%s\n" "${COMPREPLY[@]}"' _ "$gen/bash" "$@"
}
out=$(bash -c 'source "$1" && complete -p dropbehind' _ "$gen/bash")
check "bash completion loads: complete -p dropbehind ($out)" grep -q -- '-F _dropbehind dropbehind$' <<<"$out"
check "bash completes subcommands, options and values" sh -c '[ "$1" = stat ] && [ "$2" = --sort ] && [ "$3" = "auto dontcache fadvise off" ]' _ \
    "$(bash_completes dropbehind st)" "$(bash_completes dropbehind stat --so)" "$(bash_completes dropbehind --backend '' | xargs)"
check "the bash completion names every option" names_all_options "$gen/bash"
check "no generator option in the completions or the page" sh -c '! grep -q -- --generate "$@"' _ "$gen/bash" "$gen/zsh" "$gen/fish" "$gen/man"
if command -v zsh >/dev/null; then
    check "zsh completion loads (compinit, _dropbehind defined)" zsh -c 'autoload -Uz compinit && compinit -u -d "$2/zcompdump" && source "$1" && (( $+functions[_dropbehind] ))' _ "$gen/zsh" "$d"
else
    skip "zsh completion: zsh is not installed (make deps)"
fi
if command -v fish >/dev/null; then
    out=$(fish -c "source $gen/fish; complete -C'dropbehind ev'; complete -C'dropbehind stat --one'")
    check "fish completion loads and completes (evict, --one-file-system)" sh -c 'echo "$1" | grep -q "^evict" && echo "$1" | grep -q "^--one-file-system"' _ "$out"
else
    skip "fish completion: fish is not installed (make deps)"
fi

inst=$d/inst
if make -s -C "$ROOT" install PREFIX="$inst" >/dev/null 2>&1; then
    installed() {
        local f
        for f in bin/dropbehind lib/libdropbehind.so lib/libdropbehind_engine.so share/man/man1/dropbehind.1 \
            share/bash-completion/completions/dropbehind share/zsh/site-functions/_dropbehind \
            share/fish/vendor_completions.d/dropbehind.fish; do
            [ -s "$inst/$f" ] || { echo "  missing $inst/$f"; return 1; }
        done
        cmp -s "$inst/share/man/man1/dropbehind.1" "$gen/man" && cmp -s "$inst/share/bash-completion/completions/dropbehind" "$gen/bash"
    }
    check "make install: launcher, library, man page, bash/zsh/fish completions (as generated)" installed
else
    fail "make install PREFIX=$inst failed"
fi

# --- the Debian package, unpacked in a scratch root -----------------------------------
make_file "$d/src" 16
if ! command -v dpkg-deb >/dev/null; then
    skip "make deb: dpkg-deb is not installed (make deps)"
else
    status() { dpkg-query -W -f='${db:Status-Status}' dropbehind 2>/dev/null || echo absent; }
    before=$(status)
    if deb=$(make -s -C "$ROOT" deb DEBDIR="$d/deb" 2>"$d/deb.err" | tail -1) && [ -f "$deb" ]; then
        ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
        r=$d/root
        dpkg -x "$deb" "$r"
        lists() {
            local f
            for f in usr/bin/dropbehind "usr/lib/$ma/libdropbehind.so" "usr/lib/$ma/libdropbehind_engine.so" usr/share/man/man1/dropbehind.1.gz \
                usr/share/bash-completion/completions/dropbehind usr/share/zsh/vendor-completions/_dropbehind \
                usr/share/fish/vendor_completions.d/dropbehind.fish usr/share/doc/dropbehind/copyright; do
                [ -s "$r/$f" ] || { echo "  missing /$f"; return 1; }
            done
        }
        check "the .deb holds the launcher, the library in /usr/lib/$ma, man page, completions" lists
        check "the .deb's control names its package, architecture and libc dependency" sh -c 'dpkg-deb -f "$1" Package Architecture Depends | grep -q "^Depends: .*libc6"' _ "$deb"
        out=$("$r/usr/bin/dropbehind" -- sh -c 'echo "$LD_PRELOAD"')
        check "unpacked launcher finds the library in /usr/lib/$ma ($out)" [ "$out" = "$(readlink -f "$r/usr/lib/$ma/libdropbehind.so")" ]
        "$r/usr/bin/dropbehind" --stats-format json -- cp "$d/src" "$d/copy" 2>"$d/deb.report"
        kib=$(cached_kib "$d/src")
        deb_cp() { cmp -s "$d/src" "$d/copy" && [ "$kib" -le 2048 ] && grep -q '"files_tracked":2' "$d/deb.report"; }
        check "dropbehind -- cp from the scratch root: same bytes, source not left cached ($kib KiB), report" deb_cp
        if command -v man >/dev/null; then
            check "the packaged man page renders (man -l)" sh -c 'LC_ALL=C.UTF-8 man -l "$1" 2>/dev/null | grep -q "dropbehind stat"' _ "$r/usr/share/man/man1/dropbehind.1.gz"
        fi
        check "the system's packages are left alone (dropbehind: $before before, $(status) after)" [ "$before" = "$(status)" ]
    else
        fail "make deb failed: $(tail -3 "$d/deb.err")"
    fi
fi

# --- stat --------------------------------------------------------------------------------
t=$d/tree
mkdir -p "$t/sub/deep" "$t/locked"
make_file "$t/a" 8
make_file "$t/b" 1
make_file "$d/outside" 1
head -c 100000 /dev/urandom >"$t/sub/deep/c"
: >"$t/sub/empty"
ln "$t/a" "$t/sub/a.link"
ln -s a "$t/sym"
ln -s ../outside "$t/sym.out"
mkfifo "$t/fifo"
python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$t/sock"
is_root && mknod "$t/null" c 1 3
head -c 4096 /dev/urandom >"$t/locked/secret"
chmod 700 "$t/locked"
files=("$t/a" "$t/b" "$t/locked/secret" "$t/sub/deep/c" "$t/sub/empty")
warm_tree() { evict "${files[@]}"; cat "$t/b" "$t/sub/deep/c" "$t/locked/secret" >/dev/null; warm_exact "$t/a" 4; }

# Totals against fincore's sum: retried while other processes move the cache under us.
totals_match() {
    local i f1 f2 ours
    for i in 1 2 3 4 5; do
        warm_tree
        f1=$(fincore_sum "${files[@]}")
        ours=$("$B" stat -r --json "$t" 2>/dev/null | json_get 'j[-1]["cached_bytes"]')
        f2=$(fincore_sum "${files[@]}")
        [ "$f1" = "$f2" ] || continue
        echo "  fincore $f1, stat -r $ours"
        [ "$ours" = "$f1" ]; return
    done
    return 1
}
check "stat -r: total equals fincore's sum over the same files" stable totals_match

warm_tree
timeout 60 "$B" stat -r "$t" >"$d/stat.txt" 2>"$d/stat.err"; rc=$?
rows() {
    grep -q " $t/a\$" "$d/stat.txt" && grep -q " $t/sub/deep/c\$" "$d/stat.txt" && grep -q " $t/sub/empty\$" "$d/stat.txt" &&
        grep -q "total: 5 files, 1 more path" "$d/stat.txt" && grep -q "^    link .*$t/sub/a.link  (same file as $t/a" "$d/stat.txt"
}
check "stat -r: a row per file, a hard link counted once, a total" rows
skipped_rows() {
    local e
    for e in "fifo  (fifo)" "sock  (socket)" "sym  (symlink, not followed without -L)"; do
        grep -q "^ skipped .*$t/$e" "$d/stat.txt" || { echo "  no row: $e"; return 1; }
    done
    ! is_root || grep -q "^ skipped .*$t/null  (character device)" "$d/stat.txt"
}
check "stat -r: FIFO, socket, device and symlinks listed as skipped" skipped_rows
check "stat -r of a tree it may read: exit 0" [ $rc = 0 ]
if command -v strace >/dev/null; then
    timeout 60 strace -f -qq -e trace=open,openat,openat2 -o "$d/trace" "$B" stat -r "$t" "$t/fifo" >/dev/null 2>&1
    timeout 60 strace -f -qq -e trace=open,openat,openat2 -o "$d/trace.L" "$B" stat -r -L "$t" "$t/fifo" >/dev/null 2>&1
    never_opened() {
        ! grep -E "/?(fifo|sock|null)\"" "$d/trace" "$d/trace.L" &&
            grep '"a", ' "$d/trace" | grep O_NONBLOCK | grep -q O_NOFOLLOW
    }
    check "stat never opens a FIFO, socket or device (strace); files opened O_NONBLOCK|O_NOFOLLOW" never_opened
else
    skip "stat never opens FIFOs: strace is not installed (make deps)"
fi
check "stat of a FIFO named directly returns at once, listed as skipped" sh -c 'timeout 10 "$1" stat "$2" | grep -q "skipped.*(fifo)"' _ "$B" "$t/fifo"

out=$("$B" stat -r -L --json "$t" | json_get '(j[-1]["files"], j[-1]["links"])')
check "stat -r -L follows symlinks: the outside file counted, a link to a counted once ($out)" [ "$out" = "(6, 2)" ]

top2() {
    warm_tree
    out=$("$B" stat -r --sort cached --top 2 "$t")
    [ "$(sed -n 2p <<<"$out" | awk '{print $NF}')" = "$t/a" ] && [ "$(sed -n 3p <<<"$out" | awk '{print $NF}')" = "$t/b" ] &&
        [ "$(wc -l <<<"$out")" = 4 ] && grep -q "(top 2 shown)" <<<"$out"
}
check "stat --sort cached --top 2: the two most cached files, then the total of all" stable top2
out=$("$B" stat -r --json --top 1 --sort size "$t" | json_get '[r["kind"] for r in j] + [j[0]["file"], j[-1]["files"]]')
check "stat --json --top 1 --sort size: one file record, the total of all ($out)" [ "$out" = "['file', 'total', '$t/a', 5]" ]
human() { warm_tree; "$B" stat "$t/a" "$t/b" | grep -q "^      4M  50.0% .*8M .* $t/a\$"; }
check "stat: human sizes and percentages (4M of 8M: 50.0%)" stable human
bar() {
    warm_tree
    out=$("$B" stat --map "$t/a" | sed -n 3p)
    echo "  $out"
    grep -qE '^  \[O{30} {30}\] 1024/2048$' <<<"$out" &&
        [ "$("$B" stat --json --map "$t/a" | json_get 'j[0]["map"]')" = "$(printf 'O%.0s' $(seq 30))$(printf ' %.0s' $(seq 30))" ]
}
check "stat --map: a residency bar, first half cached (and in --json)" stable bar

if is_root && mkdir "$t/mnt" && mount -t tmpfs tmpfs "$t/mnt"; then
    mnt=$t/mnt
    echo x >"$mnt/on-tmpfs"
    one_fs() {
        "$B" stat -r -x "$t" >"$d/x.txt" && ! grep -q on-tmpfs "$d/x.txt" && grep -q "skipped .*$t/mnt  (on another filesystem (-x))" "$d/x.txt" &&
            "$B" stat -r "$t" | grep -q "$t/mnt/on-tmpfs"
    }
    check "stat -r -x stays on one filesystem (a tmpfs mounted inside is skipped)" one_fs
    umount "$mnt"; mnt=; rmdir "$t/mnt"
else
    skip "stat -x: needs root to mount a filesystem inside the tree"
fi

# As a user who may not write the files (nobody, or the caller on a root-owned file).
if is_root; then unknown_file=$t/b; else unknown_file=/etc/passwd; fi
cat "$unknown_file" >/dev/null
unpriv "$B" stat --json "$unknown_file" >"$d/unknown.json" 2>&1
out=$(json_get '(j[0]["cached_pages"], j[0]["unknown"] is not None, j[-1]["unknown"], j[-1]["cached_pages"])' <"$d/unknown.json")
check "stat of a file the caller may not write: unknown, not counted, never a number ($out)" [ "$out" = "(None, True, 1, 0)" ]
unknown_row() { unpriv "$B" stat "$unknown_file" | grep -q "^ unknown .*(unknown: cachestat not permitted"; }
check "stat table says unknown for it" unknown_row
is_root || chmod 000 "$t/locked"
unpriv "$B" stat -r "$t" "$d/missing" >"$d/unpriv.txt" 2>"$d/unpriv.err"; rc=$?
chmod 700 "$t/locked"
walk_goes_on() {
    [ $rc = 1 ] && grep -q "^dropbehind: stat: $t/locked: Permission denied$" "$d/unpriv.err" &&
        grep -q "^dropbehind: stat: $d/missing: No such file or directory$" "$d/unpriv.err" &&
        grep -q " $t/sub/deep/c" "$d/unpriv.txt" && grep -q "total: 4 files.*2 error(s)" "$d/unpriv.txt"
}
check "stat -r: an unreadable directory and a missing path reported, the rest shown, exit 1" walk_goes_on

check "stat --sort bogus: exit 2, one line naming --sort" bad_input --sort "$B" stat --sort bogus "$t"
check "stat --top x: exit 2, one line naming --top" bad_input --top "$B" stat --top x "$t"
check "stat --frobnicate: exit 2, one line naming it" bad_input --frobnicate "$B" stat --frobnicate "$t"
check "stat without a path: exit 2, one line naming PATH" bad_input PATH "$B" stat
check "stat -s --map: exit 2, one line naming the conflict" bad_input --map "$B" stat -s --map "$t"

# Nothing changed on disk: not even access times (directories' atimes set in the past,
# which relatime would update on the next read of them).
mkdir -p "$d/snap"
find "$d" -path "$d/root" -prune -o -path "$d/inst" -prune -o -path "$d/snap" -prune -o -print >"$d/snap/all"
touch -a -h -d 2001-01-01 $(cat "$d/snap/all")
snapshot() { python3 -c '
import os, sys
for p in open(sys.argv[1]).read().split("\n")[:-1]:
    s = os.lstat(p)
    print(p, s.st_size, s.st_atime_ns, s.st_mtime_ns, s.st_ctime_ns, s.st_mode, s.st_nlink)' "$d/snap/all"; }
snapshot >"$d/snap/before"
# (Not -L: following a symlink updates the symlink's atime, for any program.)
"$B" stat -r "$t" >/dev/null 2>&1; "$B" stat -r --map --json "$t" >/dev/null 2>&1; "$B" stat -r -s "$t" >/dev/null 2>&1
(cd "$d" && "$B" env --stats >/dev/null)
snapshot >"$d/snap/after"
check "stat and env change nothing on disk: sizes, atimes, mtimes, ctimes of every entry" cmp -s "$d/snap/before" "$d/snap/after"
if command -v strace >/dev/null; then
    writes_nothing() { # CMD...: no syscall that writes or syncs, but writes to stdout/stderr
        timeout 60 strace -f -qq -o "$d/w.trace" -e trace=write,writev,pwrite64,pwritev,pwritev2,fsync,fdatasync,sync,syncfs,sync_file_range,ftruncate,truncate,fallocate,unlink,unlinkat,rename,renameat,renameat2,mkdir,mkdirat,chmod,fchmod,fchmodat,utimensat,fadvise64,openat "$@" >/dev/null 2>&1
        ! grep -vE '^[0-9]+ +(write\((1|2),|syscall_0x1c3\(|openat\([^"]*"[^"]*", O_RDONLY(\|O_(NONBLOCK|NOFOLLOW|NOATIME|CLOEXEC|DIRECTORY|NOCTTY|LARGEFILE))*\) = |\+\+\+|---)' "$d/w.trace"
    }
    check "stat -r --map: no write, sync, fadvise or writable open (strace)" writes_nothing "$B" stat -r --map -L "$t"
    check "env: no write, sync or writable open (strace)" writes_nothing "$B" env --stats
else
    skip "stat writes nothing (strace): strace is not installed (make deps)"
fi

# --- evict ---------------------------------------------------------------------------------
evict_clean() {
    cat "$t/a" "$t/b" "$t/sub/deep/c" >/dev/null
    "$B" evict "$t/a" "$t/b" "$t/sub/deep/c" "$d/missing" >"$d/evict.txt" 2>"$d/evict.err"; rc=$?
    out=$(fincore_sum "$t/a" "$t/b" "$t/sub/deep/c")
    echo "  fincore after: $out bytes"
    [ "$out" = 0 ]
}
check "evict: fincore at 0 for the named clean files" stable evict_clean
check "evict: a missing path reported, the rest done, exit 1" sh -c '[ $1 = 1 ] && grep -q "^dropbehind: evict: .*missing: No such file or directory$" "$2" && grep -q "^      8M .*/a$" "$3"' _ $rc "$d/evict.err" "$d/evict.txt"

# A cached clean file with 1 MiB rewritten in the middle (dirty, not synced).
mixed() {
    local dirty dropped before left wb res
    make_file "$d/mixed" 8
    cat "$d/mixed" >/dev/null
    dd if=/dev/urandom of="$d/mixed" bs=1M seek=3 count=1 conv=notrunc status=none
    "$B" evict --json "$d/mixed" >"$d/mixed.json"
    "$B" stat --json "$d/mixed" >"$d/mixed.after"
    res=$(fincore_sum "$d/mixed")
    dirty=$(json_get 'j[0]["dirty_pages"]' <"$d/mixed.json")
    dropped=$(json_get 'j[0]["dropped_pages"]' <"$d/mixed.json")
    before=$(json_get 'j[0]["cached_pages_before"]' <"$d/mixed.json")
    left=$(json_get 'j[0]["dirty_pages"]' <"$d/mixed.after")
    wb=$(json_get 'j[0]["writeback_pages"]' <"$d/mixed.after")
    echo "  cached $before, dropped $dropped, dirty left alone $dirty; then still dirty $left, writeback $wb, fincore $res bytes"
    [ "$dirty" -ge 256 ] && [ $((dirty + dropped)) = "$before" ] && [ "$left" = "$dirty" ] && [ "$wb" = 0 ] &&
        [ "$res" = $((dirty * 4096)) ]
}
check "evict of a partly dirty file: the clean rest dropped, the dirty pages left dirty (no writeback started)" stable mixed
dirty() {
    head -c 2M /dev/urandom >"$d/dirty"
    "$B" evict "$d/dirty" >"$d/dirty.txt"
    grep -q "^       0       2M        0  $d/dirty  (2M dirty, left alone)" "$d/dirty.txt"
}
check "evict reports a dirty file's pages as left alone" stable dirty

# Mapped pages stay: DONTNEED skips them; evict says so.
mapped() {
    local mapper
    make_file "$d/mapped" 4
    rm -f "$d/ready"
    python3 - "$d/mapped" "$d/ready" <<'PY' &
import mmap, os, sys, time
f = open(sys.argv[1], "rb"); m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
s = sum(m[i] for i in range(0, len(m), 4096)); open(sys.argv[2], "w").close(); time.sleep(30)
PY
    mapper=$!
    for _ in $(seq 100); do [ -e "$d/ready" ] && break; sleep 0.1; done
    "$B" evict "$d/mapped" >"$d/mapped.txt"
    kill $mapper; wait $mapper 2>/dev/null
    grep -q "(4M still cached: mapped or in use)" "$d/mapped.txt"
}
check "evict reports mapped pages it could not drop" stable mapped

if is_root; then
    evict_unknown() {
        cat "$t/b" >/dev/null
        unpriv "$B" evict "$t/b" >"$d/evict.unknown"
        grep -q "left alone: cachestat not permitted" "$d/evict.unknown" && [ "$(fincore -b -n -o RES "$t/b")" = $MiB ]
    }
    check "evict leaves a file it can't see the dirty pages of alone, and says so" stable evict_unknown
fi
if command -v strace >/dev/null; then
    head -c 1M /dev/urandom >"$t/sub/dirty"; cat "$t/a" >/dev/null
    evict_writes_nothing() {
        timeout 60 strace -f -qq -o "$d/e.trace" -e trace=write,writev,pwrite64,fsync,fdatasync,sync,syncfs,sync_file_range,ftruncate,fallocate,msync,openat "$B" evict -r "$t" >/dev/null 2>&1
        ! grep -vE '^[0-9]+ +(write\((1|2),|syscall_0x1c3\(|openat\([^"]*"[^"]*", O_RDONLY(\|O_(NONBLOCK|NOFOLLOW|NOATIME|CLOEXEC|DIRECTORY|NOCTTY|LARGEFILE))*\) = |\+\+\+|---)' "$d/e.trace"
    }
    check "evict -r: no write, sync or writable open (strace)" evict_writes_nothing
fi
check "evict --bogus: exit 2, one line naming it" bad_input --bogus "$B" evict --bogus "$t"
check "evict without a path: exit 2, one line" bad_input PATH "$B" evict

# --- env -----------------------------------------------------------------------------------
lib=$(readlink -f "$LIB")
"$B" env >"$d/env.plain"
check "env: LD_PRELOAD=the library, and nothing else by default" [ "$(cat "$d/env.plain")" = "LD_PRELOAD=$lib" ]
mapfile -t lines < <(DROPBEHIND_DIR=off "$B" env --window 16M --stats "$d/report.json" --stats-format json)
env_lines() {
    printf '%s\n' "${lines[@]}" | grep -vqE '^[A-Z_]+=[^ ]+$' && return 1
    [ "${lines[0]}" = "LD_PRELOAD=$lib" ] && printf '%s\n' "${lines[@]}" | grep -qx DROPBEHIND_WINDOW=16777216 &&
        printf '%s\n' "${lines[@]}" | grep -qx DROPBEHIND_DIR=off && printf '%s\n' "${lines[@]}" | grep -qx DROPBEHIND_STATS_FORMAT=json
}
check "env: NAME=value lines from the options and the variables already set (${lines[*]})" env_lines
acted() {
    rm -f "$d/report.json"
    evict "$d/src"
    env -i "${lines[@]}" /bin/sh -c '/bin/cat "$1" >/dev/null; /bin/cat "$1" >/dev/null' _ "$d/src"
    kib=$(cached_kib "$d/src")
    python3 - "$d/report.json" <<'PY'
import json, sys
reports = [json.loads(l) for l in open(sys.argv[1])]
assert len(reports) == 2 and len({r["pid"] for r in reports}) == 2, reports
assert all(r["comm"] == "cat" and r["files_tracked"] == 1 and r["read_streams"] == 1 for r in reports), reports
PY
}
check "a command run with exactly env's lines (env -i): the library acted, a JSON report per process" stable acted
check "... and the file it read was not left cached ($kib KiB)" [ "$kib" -le 2048 ]
check "env --window 3: exit 2, one line naming --window" bad_input --window "$B" env --window 3
check "env --stats relative: exit 2, one line naming --stats" bad_input --stats "$B" env --stats report.txt
check "env with a bad DROPBEHIND_WINDOW set: exit 2, one line naming it" bad_input DROPBEHIND_WINDOW env DROPBEHIND_WINDOW=lots "$B" env
check "env --exclude with a space: exit 2, one line naming DROPBEHIND_EXCLUDE" bad_input DROPBEHIND_EXCLUDE "$B" env --exclude "/my files/*"
check "env with DROPBEHIND_LIB missing: exit 2, one line naming it" bad_input DROPBEHIND_LIB env DROPBEHIND_LIB=/nonexistent.so "$B" env

# --- the report as JSON --------------------------------------------------------------------
evict "$d/src"
"$B" --stats-format json -- cat "$d/src" 2>"$d/stats.err" >/dev/null
check "--stats-format json: one JSON object on stderr, with pid and counts" python3 -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) == 1, lines
r = json.loads(lines[0]); assert r["pid"] > 0 and r["files_tracked"] == 1 and r["bytes_released"] > 0, r' "$d/stats.err"
check "--stats-format xml: exit 2, one line naming it" bad_input --stats-format "$B" --stats-format xml -- true
# GNU tar closes its own stderr at the end of main, before the exit handlers run: the
# launcher gathers the reports in a file of its own and prints them when the program ends.
if have tar; then
    evict "$d/src"
    tmp_before=$(ls -d "${TMPDIR:-/tmp}"/dropbehind-reports-* 2>/dev/null | wc -l)
    "$B" --stats -- tar cf "$d/stats.tar" -C "$d" src 2>"$d/tar.err"
    check "--stats: the report of a program that closes its own stderr (tar) on the launcher's stderr" \
        grep -q "report for pid [0-9]* (tar)" "$d/tar.err"
    tmp_after=$(ls -d "${TMPDIR:-/tmp}"/dropbehind-reports-* 2>/dev/null | wc -l)
    check "... and the file it was gathered in is gone ($tmp_after left, $tmp_before before)" [ "$tmp_after" -le "$tmp_before" ]
    rm -f "$d/stats.tar"
else
    skip "--stats and a program that closes its own stderr: tar not installed"
fi
# A process that changes user after start may not write into the launcher's 0700 directory:
# its report goes to its own stderr instead of being lost.
if is_root && have setpriv; then
    chmod 755 "$d"; chmod 644 "$d/src"
    "$B" --stats -- setpriv --reuid=nobody --regid=nogroup --clear-groups cat "$d/src" 2>"$d/priv.err" >/dev/null
    check "--stats: a program that changed user still reports (on its own stderr)" \
        grep -q "report for pid [0-9]* (cat)" "$d/priv.err"
    # A file the user named stays the only place a report goes: nothing on stderr.
    mkdir -p "$d/private"; chmod 700 "$d/private"
    setpriv --reuid=nobody --regid=nogroup --clear-groups "${SHIM[@]}" \
        DROPBEHIND_STATS="$d/private/report.txt" cat "$d/src" 2>"$d/priv2.err" >/dev/null
    check "DROPBEHIND_STATS naming a file the program may not write: nothing on its stderr" \
        [ ! -s "$d/priv2.err" ]
else
    skip "--stats and a program that changes user: needs root and setpriv"
fi
out=$(DROPBEHIND_STATS_FORMAT=xml DROPBEHIND_STATS=1 shim cat "$d/src" 2>&1 >/dev/null | grep -c DROPBEHIND_STATS_FORMAT)
check "DROPBEHIND_STATS_FORMAT=xml in the library: one warning naming it" [ "$out" = 1 ]
