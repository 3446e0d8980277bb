#!/usr/bin/env bash
# Differential runner: every scenario in corpus/*.txt (one per line: `name | command`) runs
# twice in a fresh directory, without and with the shim, and exit code, stdout, stderr and
# the checksum of every file it left behind must be identical.
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

# run_once OUTDIR PRELOAD CMD: run CMD in a fresh $W/run, record what can be observed.
run_once() {
    local out=$1 pre=$2 cmd=$3
    rm -rf "$W/run"; mkdir -p "$W/run" "$out"
    local shim=(); [ -z "$pre" ] || shim=("${SHIM[@]}")
    (cd "$W/run" && timeout 300 "${shim[@]}" bash -c "$cmd" >"$out/stdout" 2>"$out/stderr"; echo $? >"$out/rc")
    (cd "$W/run" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum) >"$out/files"
    (cd "$W/run" && find . -printf '%y %s %p\n' | sort) >"$out/tree"
}

n=0
for corpus in "$ROOT"/shim-tests/corpus/*.txt; do
    while IFS= read -r line; do
        case $line in ''|'#'*) continue ;; esac
        case $line in *' | '*) ;; *) fail "corpus line without ' | ' (a scenario is one line): $line"; continue ;; esac
        name=${line%%|*}; name=$(echo "$name" | sed 's/ *$//')
        cmd=${line#*|}
        [ -n "$filter" ] && [ "${name#*"$filter"}" = "$name" ] && continue
        n=$((n + 1))
        run_once "$W/a" "" "$cmd"
        run_once "$W/b" "$LIB" "$cmd"
        bad=
        for what in rc stdout stderr files tree; do
            cmp -s "$W/a/$what" "$W/b/$what" || bad="$bad $what"
        done
        if [ -z "$bad" ]; then
            ok "$name (exit $(cat "$W/a/rc"))"
        else
            fail "$name: differs in$bad"
            for what in $bad; do diff "$W/a/$what" "$W/b/$what" | head -5 | sed "s/^/    $what: /"; done
        fi
    done <"$corpus"
done
echo "# differential: $n scenarios"
