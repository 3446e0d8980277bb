#!/usr/bin/env bash
# Runs every shim-tests/t_*.sh (or those named), then prints "N passed, N failed, N skipped".
set -u
here=$(cd "$(dirname "$0")" && pwd)
export RESULTS=$(mktemp)
trap 'rm -f "$RESULTS"' EXIT
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=("$here"/t_*.sh)
for t in "${tests[@]}"; do
    echo "# $(basename "$t")"
    bash "$t" || echo fail >>"$RESULTS"
done
p=$(grep -c '^ok$' "$RESULTS"); f=$(grep -c '^fail$' "$RESULTS"); s=$(grep -c '^skip$' "$RESULTS")
echo "$p passed, $f failed, $s skipped"
[ "$f" = 0 ]
