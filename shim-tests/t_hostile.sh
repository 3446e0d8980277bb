#!/usr/bin/env bash
# Hostile environments: odd fd limits, the library loaded twice or by dlopen, stdio fds
# closed, read-only and uncached-I/O-less filesystems, and memcheck on the hook path.
. "$(dirname "$0")/lib.sh"
d=$(scratch)
cleanup() {
    for m in "$d/ro" "$d/bt"; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
    rm -rf "$d"
}
trap cleanup EXIT
make_file "$d/f" 32
want=$(sha256sum <"$d/f")

same_as_plain() { # NAME CMD: identical exit code, stdout and stderr with and without the shim
    local name=$1 cmd=$2 a b ra rb
    a=$(bash -c "$cmd" 2>&1); ra=$?
    b=$(shim bash -c "$cmd" 2>&1); rb=$?
    if [ "$ra" = "$rb" ] && [ "$a" = "$b" ]; then ok "$name (exit $ra)"; else fail "$name: exit $ra/$rb"; diff <(echo "$a") <(echo "$b") | head -5; fi
}

same_as_plain "RLIMIT_NOFILE 64" "ulimit -n 64; cat $d/f | sha256sum; cp $d/f $d/c64 && cmp $d/f $d/c64"
same_as_plain "RLIMIT_NOFILE 2^20" "ulimit -n 1048576 2>/dev/null || ulimit -n \$(ulimit -Hn); cat $d/f | sha256sum"
same_as_plain "stdin, stdout and stderr closed" "cat $d/f > $d/c012 <&- 2>&-; cmp $d/f $d/c012 && echo same"
same_as_plain "fd 0-2 closed, then files opened into them" "python3 -c 'import os,sys
for fd in (0,1,2): os.close(fd)
a=os.open(sys.argv[1],os.O_RDONLY); b=os.open(sys.argv[2],os.O_WRONLY|os.O_CREAT|os.O_TRUNC,0o644)
while (x:=os.read(a,1<<20)): os.write(b,x)
' $d/f $d/c3; cmp $d/f $d/c3 && echo same"
# The unwinder is loaded on first use (preload/src/unwind.rs): a thread cancelled inside a
# hooked read still unwinds through the hook and runs its cleanup handler.
if command -v cc >/dev/null && cc -O2 -pthread -o "$d/cancel" "$ROOT/shim-tests/helpers/cancel.c"; then
    a=$("$d/cancel" 2>&1); b=$(shim "$d/cancel" 2>&1)
    check "thread cancelled in read: unwinds through the hook ($b)" \
        bash -c '[ "$1" = "$2" ] && [ "$2" = "cancelled 1, cleanup 1" ]' _ "$a" "$b"
else
    skip "thread cancelled in read: no C compiler"
fi
# fds beyond the table (4096 and up) pass through untouched: the file stays cached.
fd5000() {
    evict "$d/f"
    out=$(ulimit -n 8192 && shim python3 -c 'import os,sys,hashlib
fd=os.open(sys.argv[1],os.O_RDONLY); os.dup2(fd,5000); os.close(fd); h=hashlib.sha256()
while (b:=os.read(5000,1<<20)): h.update(b)
print(h.hexdigest()+"  -")' "$d/f")
    kib=$(cached_kib "$d/f")
}
undisturbed fd5000
check "fd 5000 (beyond the table): output unchanged, nothing dropped ($kib KiB cached)" '[ "$out" = "$want" ] && [ "$kib" -ge 32000 ]'
out=$(env LD_PRELOAD="$LIB:$LIB" "${FORCE[@]}" sha256sum <"$d/f" 2>&1)  # own preload: named twice
check "LD_PRELOAD naming the library twice: output unchanged" [ "$out" = "$want" ]
out=$(shim "$LAUNCHER" -- sha256sum <"$d/f" 2>&1)
check "launcher inside an existing preload: output unchanged" [ "$out" = "$want" ]
out=$(python3 -c 'import ctypes,sys,hashlib
ctypes.CDLL(sys.argv[1])   # loaded late, by dlopen: its constructor runs mid-program
f=open(sys.argv[2],"rb"); print(hashlib.sha256(f.read()).hexdigest() + "  -")' "$LIB" "$d/f")
check "library loaded by dlopen: reads unchanged" [ "$out" = "$want" ]

read_and_copy_each_backend() { # LABEL DIR (holding a copy of f): every backend changes nothing
    local label=$1 dir=$2 b out
    for b in auto dontcache fadvise; do
        out=$(DROPBEHIND_BACKEND=$b shim sha256sum <"$dir/f")
        rm -f "$dir/c"; DROPBEHIND_BACKEND=$b shim cp "$dir/f" "$dir/c"
        check "$label, backend $b: read and copy unchanged" '[ "$out" = "$want" ] && cmp -s "$dir/f" "$dir/c"'
    done
}

# tmpfs takes no RWF_DONTCACHE: every backend falls back and changes nothing visible.
if [ -w /dev/shm ]; then
    t=$(mktemp -d /dev/shm/dbhostile.XXXXXX)
    cp "$d/f" "$t/f"
    read_and_copy_each_backend tmpfs "$t"
    rm -rf "$t"
else
    skip "tmpfs: /dev/shm not writable"
fi

# btrfs: no RWF_DONTCACHE there either.
if is_root && command -v mkfs.btrfs >/dev/null; then
    mkdir -p "$d/bt"
    truncate -s 256M "$d/btimg" && mkfs.btrfs -q -f "$d/btimg" >/dev/null 2>&1
    if mount -o loop "$d/btimg" "$d/bt" 2>/dev/null; then
        cp "$d/f" "$d/bt/f"
        read_and_copy_each_backend btrfs "$d/bt"
        umount "$d/bt"
    else
        skip "btrfs: loop mount failed"
    fi
else
    skip "btrfs: needs root and mkfs.btrfs"
fi

# A read-only filesystem.
if is_root && command -v mkfs.ext4 >/dev/null; then
    mkdir -p "$d/ro" "$d/src"; cp "$d/f" "$d/src/f"
    truncate -s 64M "$d/img" && mkfs.ext4 -q -F -d "$d/src" "$d/img" 2>/dev/null
    if mount -o loop,ro "$d/img" "$d/ro" 2>/dev/null; then
        same_as_plain "read-only filesystem: read" "sha256sum $d/ro/f"
        same_as_plain "read-only filesystem: write refused the same way" "cp $d/f $d/ro/g"
        umount "$d/ro"
    else
        skip "read-only filesystem: loop mount failed"
    fi
else
    skip "read-only filesystem: needs root and mkfs.ext4"
fi

# memcheck on the hook path: no errors.
if have valgrind; then
    for cmd in "cat $d/f" "sha256sum $d/f" "cp $d/f $d/cv" "dd if=$d/f of=$d/cv bs=64k status=none"; do
        shim valgrind -q --error-exitcode=99 --log-file="$d/vg.log" $cmd >/dev/null 2>&1; rc=$?
        errors=$(grep -c "libdropbehind" "$d/vg.log")
        check "memcheck, $(echo "$cmd" | cut -d' ' -f1): exit $rc, no errors in the shim ($errors lines naming it)" '[ "$rc" = 0 ] && [ "$errors" = 0 ]'
    done
else
    skip "memcheck: valgrind missing"
fi
