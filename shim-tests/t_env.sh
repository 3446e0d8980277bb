#!/usr/bin/env bash
# Bad input: every variable with garbage gets one warning line and the default, and the
# program's output is unchanged; the launcher refuses bad values with exit 2.
. "$(dirname "$0")/lib.sh"
d=$(scratch); trap 'rm -rf "$d"' EXIT
make_file "$d/f" 8
want=$(sha256sum <"$d/f")

for var in DROPBEHIND_WINDOW DROPBEHIND_MIN_SIZE DROPBEHIND_BACKEND DROPBEHIND_LOG DROPBEHIND_LOG_FD DROPBEHIND_STATS DROPBEHIND_EXCLUDE DROPBEHIND_READAHEAD DROPBEHIND_MMAP DROPBEHIND_TREE; do
    for val in "garbage" "-1" "99999999999999999999999999" "1Q"; do
        [ "$var" = DROPBEHIND_EXCLUDE ] && [ "$val" != garbage ] && continue
        out=$(env "$var=$val" "${SHIM[@]}" sha256sum <"$d/f" 2>"$d/err"); rc=$?
        lines=$(grep -c . "$d/err")
        check "$var=$val: output and exit code unchanged" '[ "$out" = "$want" ] && [ $rc = 0 ]'
        check "$var=$val: exactly one 'dropbehind:' warning naming it ($lines lines)" \
            '[ "$lines" = 1 ] && grep -q "^dropbehind.*$var" "$d/err"'
        env "$var=$val" "$LAUNCHER" -- true 2>"$d/err"; rc=$?
        check "$var=$val: launcher exits 2 naming it (exit $rc)" '[ $rc = 2 ] && grep -q "$var" "$d/err"'
    done
done
# Empty values mean "unset" for sizes? No: an empty size is an error, an empty switch is off.
out=$(DROPBEHIND_WINDOW= shim sha256sum <"$d/f" 2>"$d/err")
check "empty DROPBEHIND_WINDOW: warned, output unchanged" '[ "$out" = "$want" ] && grep -q DROPBEHIND_WINDOW "$d/err"'

# Good values: silent.
out=$(DROPBEHIND_WINDOW=8M DROPBEHIND_BACKEND=fadvise DROPBEHIND_LOG=off shim sha256sum <"$d/f" 2>"$d/err")
check "good values: no output on stderr" '[ ! -s "$d/err" ] && [ "$out" = "$want" ]'

# Launcher.
"$LAUNCHER" --bogus -- true 2>"$d/err"; rc=$?
check "unknown option: exit 2 naming it (exit $rc)" '[ $rc = 2 ] && grep -q -- --bogus "$d/err"'
"$LAUNCHER" --window 3 -- true 2>"$d/err"; rc=$?
check "bad --window: exit 2 saying what it accepts (exit $rc)" '[ $rc = 2 ] && grep -q "64K to 64M" "$d/err"'
"$LAUNCHER" --backend fast -- true 2>"$d/err"; rc=$?
check "bad --backend: exit 2 listing the choices (exit $rc)" '[ $rc = 2 ] && grep -q "dontcache" "$d/err"'
"$LAUNCHER" -- /nonexistent/command 2>"$d/err"; rc=$?
check "nonexistent command: exit 127 saying not found (exit $rc)" '[ $rc = 127 ] && grep -q "not found" "$d/err"'
# The front without its engine would run the command untouched, saying nothing.
mkdir -p "$d/front-alone" && cp "$LIB" "$d/front-alone/libdropbehind.so"
DROPBEHIND_LIB="$d/front-alone/libdropbehind.so" "$LAUNCHER" -- true 2>"$d/err"; rc=$?
check "DROPBEHIND_LIB a libdropbehind.so with no engine beside it: exit 2 naming the engine (exit $rc)" \
    '[ $rc = 2 ] && grep -q "libdropbehind_engine.so" "$d/err"'
"$LAUNCHER" -- no-such-command-anywhere 2>"$d/err"; rc=$?
check "command not in PATH: exit 127" [ $rc = 127 ]
printf 'echo hi\n' >"$d/noexec"; chmod 644 "$d/noexec"
"$LAUNCHER" -- "$d/noexec" 2>"$d/err"; rc=$?
check "non-executable command: exit 126" [ $rc = 126 ]
"$LAUNCHER" 2>"$d/err"; rc=$?
check "no command: exit 2" [ $rc = 2 ]
out=$("$LAUNCHER" -- sh -c 'echo "$LD_PRELOAD"')
check "launcher sets LD_PRELOAD" [ "${out%%:*}" = "$(readlink -f "$LIB")" ]
out=$(LD_PRELOAD=/lib/x86_64-linux-gnu/libm.so.6 "$LAUNCHER" -- sh -c 'echo "$LD_PRELOAD"')  # own preload: the launcher prepends to it
check "launcher prepends to an existing LD_PRELOAD" [ "${out#*:}" = /lib/x86_64-linux-gnu/libm.so.6 ]
out=$("$LAUNCHER" --no-watch --window 16M --backend fadvise --stats -- sh -c 'echo "$DROPBEHIND_WINDOW $DROPBEHIND_BACKEND $DROPBEHIND_STATS"')
check "launcher options become variables" [ "$out" = "16777216 fadvise stderr" ]
# Watched, the launcher outlives the program and gathers the stderr reports in a file of its own.
out=$("$LAUNCHER" --stats -- sh -c 'echo "$DROPBEHIND_STATS"')
check "--stats, watched: the reports go to the launcher's file ($out)" \
    eval 'case $out in /*/dropbehind-reports-*/report) true ;; *) false ;; esac'
"$LAUNCHER" -- sh -c 'exit 7'; rc=$?
check "exit status passed through" [ $rc = 7 ]
if have gcc; then
    printf 'int main(void){return 0;}\n' >"$d/s.c"
    if gcc -static -o "$d/static" "$d/s.c" 2>/dev/null; then
        # The watcher takes static binaries (t_watch.sh); the preload alone warns.
        "$LAUNCHER" --no-watch -- "$d/static" 2>"$d/err"; rc=$?
        check "static binary, --no-watch: runs, with a warning (exit $rc)" '[ $rc = 0 ] && grep -q "statically linked" "$d/err"'
    else
        skip "static binary warning: no static libc to link with"
    fi
else
    skip "static binary warning: gcc missing"
fi
"$LAUNCHER" -- true 2>"$d/err"
check "dynamic binary: no warning" [ ! -s "$d/err" ]

# stat
"$LAUNCHER" stat "$d" >/dev/null 2>"$d/err"; rc=$?
check "stat of a directory: exit 1, says so (exit $rc)" '[ $rc = 1 ] && grep -q "is a directory" "$d/err"'
"$LAUNCHER" stat "$d/missing" >/dev/null 2>"$d/err"; rc=$?
check "stat of a missing file: exit 1 naming it (exit $rc)" '[ $rc = 1 ] && grep -q "missing" "$d/err"'
warm4() { evict "$d/f"; warm "$d/f" 4; out=$("$LAUNCHER" stat --json "$d/f"); }
undisturbed warm4
check "stat --json counts cached pages (4 MiB warmed: $out)" python3 -c 'import json,sys; r=json.loads(sys.argv[1])[0]; assert 1024 <= r["cached_pages"] <= 2048, r' "$out"
"$LAUNCHER" stat "$d/f" | grep -q "$d/f"
check "stat table names the file" [ $? = 0 ]

# Stats report: opt-in, on stderr or in a file.
out=$(shim cat "$d/f" 2>&1 >/dev/null)
check "no output unless asked" [ -z "$out" ]
DROPBEHIND_STATS=1 shim cat "$d/f" 2>"$d/err" >/dev/null
check "DROPBEHIND_STATS=1: report on stderr" grep -q "report for pid" "$d/err"
DROPBEHIND_STATS="$d/report.txt" shim cat "$d/f" >/dev/null 2>"$d/err"
check "DROPBEHIND_STATS=FILE: report in the file, nothing on stderr" 'grep -q "streams" "$d/report.txt" && [ ! -s "$d/err" ]'

# Exclusion: an excluded file keeps its pages.
# cat_kib SETTING...: cached KiB of the cold file after a shimmed cat with those settings.
cat_kib() { evict "$d/f"; env "$@" "${SHIM[@]}" cat "$d/f" >/dev/null; kib=$(cached_kib "$d/f"); }
undisturbed cat_kib DROPBEHIND_EXCLUDE="$d/*"
check "DROPBEHIND_EXCLUDE leaves the file alone ($kib KiB cached)" [ "$kib" -ge 8000 ]
undisturbed cat_kib DROPBEHIND_EXCLUDE="/nonexistent:$d"
check "DROPBEHIND_EXCLUDE with a directory prefix leaves the file alone ($kib KiB cached)" [ "$kib" -ge 8000 ]
undisturbed cat_kib DROPBEHIND_MIN_SIZE=0 DROPBEHIND_BACKEND=off
check "DROPBEHIND_BACKEND=off changes nothing ($kib KiB cached)" [ "$kib" -ge 8000 ]

# make install: the launcher finds the library under ../lib of its own path.
inst=$(mktemp -d)
if make -s -C "$ROOT" install PREFIX="$inst" >/dev/null 2>&1; then
    out=$("$inst/bin/dropbehind" -- sh -c 'echo "$LD_PRELOAD"')
    check "make install: launcher finds $inst/lib/libdropbehind.so" [ "$out" = "$(readlink -f "$inst/lib/libdropbehind.so")" ]
else
    fail "make install PREFIX=$inst failed"
fi
rm -rf "$inst"
