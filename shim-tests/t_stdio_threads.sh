#!/usr/bin/env bash
# stdio streams (fread/fwrite, fgets/fputs) and a torture program (threads, fork, vfork,
# close_range, reads in a signal handler): same results with the shim, nothing left behind.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'rm -rf "$d"' EXIT
if have cc && cc -O2 -o "$d/stdio_copy" "$ROOT/shim-tests/helpers/stdio_copy.c"; then
    make_file "$d/f" 128
    base64 -w 100 "$d/f" >"$d/text"; evict "$d/text"
    for mode in "" "-l"; do
        src=$d/f; [ -n "$mode" ] && src=$d/text
        stdio_copy() { rm -f "$d/out"; evict "$src"; shim "$d/stdio_copy" $mode "$src" "$d/out"; s=$(cached_kib "$src"); o=$(cached_kib "$d/out"); }
        undisturbed stdio_copy
        check "stdio copy ${mode:-fread/fwrite}: identical" cmp -s "$src" "$d/out"
        check "stdio copy ${mode:-fread/fwrite}: at most 2 MiB of each cached (src $s KiB, dst $o KiB)" '[ "$s" -le 2048 ] && [ "$o" -le 2048 ]'
    done
else
    skip "stdio copy: no C compiler, or the helper did not build"
fi

T=$ROOT/target/release/examples/torture
if [ -x "$T" ]; then
    want=$(timeout 300 "$T" "$d/plain"); rw=$?
    got=$(timeout 300 "${SHIM[@]}" "$T" "$d/shim"); rg=$?
    check "torture: exit $rg (plain $rw), same result line ($got)" '[ "$rw" = 0 ] && [ "$rg" = 0 ] && [ "$want" = "$got" ]'
    got=$(DROPBEHIND_WINDOW=64K DROPBEHIND_MIN_SIZE=0 timeout 300 "${SHIM[@]}" "$T" "$d/shim2"); rg=$?
    check "torture, smallest window and no minimum size: exit $rg, same result line" '[ "$rg" = 0 ] && [ "$want" = "$got" ]'
else
    fail "torture: $T not built (make builds it)"
fi
