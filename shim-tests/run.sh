#!/usr/bin/env bash
# Runs lint.sh, then every shim-tests/t_*.sh (or those named), then prints "N passed, N
# failed, N skipped". A lint failure stops the run: a check that tests only part of its
# condition is not worth running.
# Environment: DROPBEHIND_TEST_LIB (the library to preload), DROPBEHIND_TEST_LAUNCHER,
# DROPBEHIND_TEST_FORCE (settings that override every test's own, see lib.sh), and
# DROPBEHIND_TEST_DIR (scratch space; not tmpfs).
set -u
here=$(cd "$(dirname "$0")" && pwd)
echo "# lint.sh"
"$here/lint.sh" || { echo "lint failed: no test run"; exit 1; }
export RESULTS=$(mktemp)
# Checks of what stays cached must not read what a DAMON pageout scheme took meanwhile (it
# takes pages of files read seconds before, see lib.sh): paused for the whole run, where
# the machine runs one, and restarted at the end.
. "$here/lib.sh"
damon_pause
trap 'damon_resume; rm -f "$RESULTS"' EXIT
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=("$here"/t_*.sh)
for t in "${tests[@]}"; do
    echo "# $(basename "$t")"
    bash "$t" || echo fail >>"$RESULTS"
done
p=$(grep -c '^ok$' "$RESULTS"); f=$(grep -c '^fail$' "$RESULTS"); s=$(grep -c '^skip$' "$RESULTS")
echo "$p passed, $f failed, $s skipped"
[ "$f" = 0 ]
