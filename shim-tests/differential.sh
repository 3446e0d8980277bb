#!/usr/bin/env bash
# Differential runner: every scenario in corpus/*.txt (one per line: `name | command`) runs
# three times in a fresh directory, its fixtures evicted from the page cache before each
# run: without the shim, with it (default backend), and with DROPBEHIND_BACKEND=dontcache.
# Exit code, stdout, stderr and the checksum of every file it left behind must be identical.
# Scenarios tagged [big] (they read at least 1 MiB of a fixture of at least 1 MiB, the
# default minimum size) must have the shim release pages (its DROPBEHIND_STATS report) in at
# least three quarters of them with the default backend, or it only tested pass-through.
#   differential.sh [FILTER]    run the scenarios whose name contains FILTER
. "$(dirname "$0")/lib.sh"
filter=${1:-}
W=$(scratch)
trap 'rm -rf "$W"' EXIT
FX=$W/fixtures
mkdir -p "$FX/tree/sub" "$W/run"

# Fixtures: sizes around the window and minimum size, sparse files, text, a source tree.
head -c $((24 * MiB)) /dev/urandom >"$FX/big"
head -c $((3 * MiB)) /dev/urandom >"$FX/medium"
head -c $((2 * MiB)) /dev/urandom >"$FX/window"
head -c $((2 * MiB + 1)) /dev/urandom >"$FX/window_plus_1"
: >"$FX/empty"
printf x >"$FX/one_byte"
python3 - "$FX" <<'PY'
import os, random, sys
fx = sys.argv[1]
random.seed(7)
words = [''.join(random.choice('abcdefghij') for _ in range(random.randint(1, 12))) for _ in range(5000)]
with open(f"{fx}/text", "w") as f:
    for i in range(250000):
        f.write(' '.join(random.choice(words) for _ in range(6)) + "\n")
with open(f"{fx}/sparse", "wb") as f:        # data, a 40 MiB hole, data
    f.write(os.urandom(3 << 20)); f.seek(40 << 20, 1); f.write(os.urandom(1 << 20))
with open(f"{fx}/hole_at_end", "wb") as f:   # data, then a hole to the end
    f.write(os.urandom(2 << 20)); f.truncate(16 << 20)
for i in range(40):
    with open(f"{fx}/tree/sub/f{i:02}", "wb") as f:
        f.write(os.urandom(random.choice([0, 1, 4096, 70000, 1 << 20, 3 << 20])))
PY
cp "$FX/text" "$FX/tree/text"
find "$FX" -exec touch -h -d '2020-01-01 00:00:00 UTC' {} +
chmod -R a-w "$FX"
export FX LC_ALL=C TZ=UTC
export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.invalid GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.invalid
export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z' GIT_CONFIG_NOSYSTEM=1 HOME=$W/home
mkdir -p "$HOME"

fixtures=()
while IFS= read -r -d '' f; do fixtures+=("$f"); done < <(find "$FX" -type f -print0)

# run_once OUTDIR BACKEND CMD: evict the fixtures, run CMD in a fresh $W/run (BACKEND "":
# without the shim; else with it, its report in OUTDIR/report), record what can be observed,
# fixture residency included; again (see undisturbed in lib.sh) if another process dropped
# the caches meanwhile.
run_once() { undisturbed run_measured "$@"; }
run_measured() {
    local out=$1 backend=$2 cmd=$3
    rm -rf "$W/run" "$out"; mkdir -p "$W/run" "$out"
    evict "${fixtures[@]}"
    if [ -z "$backend" ]; then
        (cd "$W/run" && timeout 300 bash -c "$cmd" >"$out/stdout" 2>"$out/stderr"; echo $? >"$out/rc")
    else
        (cd "$W/run" && DROPBEHIND_BACKEND=$backend DROPBEHIND_STATS="$out/report" \
            timeout 300 "${SHIM[@]}" bash -c "$cmd" >"$out/stdout" 2>"$out/stderr"; echo $? >"$out/rc")
    fi
    "$LAUNCHER" stat --json "${fixtures[@]}" |
        python3 -c 'import json,sys; print(sum(f["cached_pages"] for f in json.load(sys.stdin)) * 4)' >"$out/fixtures_kib"
    (cd "$W/run" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum) >"$out/files"
    (cd "$W/run" && find . -printf '%y %s %p\n' | sort) >"$out/tree"
}

# released REPORT: pages released, summed over every process's report (0 without a report).
released() { [ -s "$1" ] && awk '/^  pages released/ {n += $3} END {print n + 0}' "$1" || echo 0; }
# uncached REPORT: bytes read with RWF_DONTCACHE, summed over the report's processes.
uncached() {
    [ -s "$1" ] && awk '/^  read uncached/ { v = $3; m = 1
        if (v ~ /K$/) m = 1024; else if (v ~ /M$/) m = 1048576; else if (v ~ /G$/) m = 1073741824
        sub(/[KMG]$/, "", v); n += v * m } END {printf "%d\n", n}' "$1" || echo 0
}

n=0 big=0 big_auto=0 big_dc=0 kept_auto=0 kept_dc=0 not_released=() dc_kept=()
for corpus in "$ROOT"/shim-tests/corpus/*.txt; do
    while IFS= read -r line; do
        case $line in ''|'#'*) continue ;; esac
        case $line in *' | '*) ;; *) fail "corpus line without ' | ' (a scenario is one line): $line"; continue ;; esac
        name=${line%%|*}; name=$(echo "$name" | sed 's/ *$//')
        cmd=${line#*|}
        [ -n "$filter" ] && [ "${name#*"$filter"}" = "$name" ] && continue
        tagged=; case $name in *' [big]') tagged=1 ;; esac
        n=$((n + 1))
        run_once "$W/a" "" "$cmd"
        if [ "$(cat "$W/a/rc")" = 127 ]; then
            skip "$name: a command is missing ($(head -1 "$W/a/stderr"))"
            continue
        fi
        plain_kib=$(cat "$W/a/fixtures_kib")
        if [ -n "$tagged" ] && [ "$plain_kib" -lt 1024 ]; then
            fail "$name: tagged [big], but brought only $plain_kib KiB of the fixtures into the cache"
        elif [ -z "$tagged" ] && [ "$plain_kib" -ge 1024 ]; then
            fail "$name: brought $plain_kib KiB of the fixtures into the cache: tag it [big]"
        fi
        for backend in auto dontcache; do
            run_once "$W/b" "$backend" "$cmd"
            bad=
            for what in rc stdout stderr files tree; do
                cmp -s "$W/a/$what" "$W/b/$what" || bad="$bad $what"
            done
            r=$(released "$W/b/report"); u=$(uncached "$W/b/report")
            fk=$(cat "$W/b/fixtures_kib")
            if [ -z "$bad" ]; then
                ok "$name, backend $backend (exit $(cat "$W/a/rc"); $r pages released, $((u / 1024)) KiB read uncached; fixtures cached after: $fk KiB, plain $plain_kib KiB)"
            else
                fail "$name, backend $backend: differs in$bad"
                for what in $bad; do diff "$W/a/$what" "$W/b/$what" | head -5 | sed "s/^/    $what: /"; done
            fi
            [ -n "$tagged" ] || continue
            # Read side: the shim left at most half the fixture pages the plain run left.
            halved=; [ $((fk * 2)) -le "$plain_kib" ] && halved=1
            if [ "$backend" = auto ]; then
                big=$((big + 1))
                if [ "$r" -gt 0 ]; then big_auto=$((big_auto + 1)); else not_released+=("$name"); fi
                [ -z "$halved" ] || kept_auto=$((kept_auto + 1))
            else
                if [ "$r" -gt 0 ] || [ "$u" -gt 0 ]; then big_dc=$((big_dc + 1)); fi
                if [ -n "$halved" ]; then kept_dc=$((kept_dc + 1)); else dc_kept+=("$name ($fk of $plain_kib KiB)"); fi
            fi
        done
    done <"$corpus"
done
echo "# differential: $n scenarios, $big tagged [big] (they read at least 1 MiB of a fixture)"
echo "#   pages released in $big_auto of the $big (backend auto); released or read uncached in $big_dc (dontcache)"
echo "#   fixtures left at most half as cached as without the shim in $kept_auto (auto), $kept_dc (dontcache)"
[ ${#not_released[@]} = 0 ] || printf '#   [big], nothing released (auto): %s\n' "${not_released[@]}"
[ ${#dc_kept[@]} = 0 ] || printf '#   [big], fixtures kept cached with dontcache: %s\n' "${dc_kept[@]}"
if [ "$big" -gt 0 ]; then
    check "differential: pages released in $big_auto of $big [big] scenarios (backend auto), at least three quarters" \
        [ $((big_auto * 4)) -ge $((big * 3)) ]
    check "differential: fixtures left at most half as cached as without the shim in $kept_auto of $big [big] scenarios (backend auto), at least three quarters" \
        [ $((kept_auto * 4)) -ge $((big * 3)) ]
elif [ -z "$filter" ]; then
    fail "differential: no scenario tagged [big] in the corpus"
fi
