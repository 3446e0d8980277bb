#!/usr/bin/env bash
# Mutation runs of the whole suite (run.sh), to show the checks can fail: with the real
# library (all must pass), with a do-nothing preload in its place (helpers/noop_preload.c,
# through DROPBEHIND_TEST_LIB), and with one feature forced off in every test through
# DROPBEHIND_TEST_FORCE (lib.sh applies it after each test's own settings, so a test that
# picks its own backend still gets the forced one). Every check that asserts a feature acted
# (pages dropped, footprint bounded, prefetch issued, MADV_RANDOM given) must fail in the runs
# that remove it; safety checks (output identical, warm pages kept, nothing done when off)
# may pass. Not part of `make test` (about 6 suite runs, half an hour or more).
#   shim-tests/mutations.sh [RUN...]    RUN: real noop backend-off dir-off mmap-off readahead-0
# Per run: OUT/RUN.log (the suite's output), OUT/RUN.passed (the checks that passed), and a
# table of passed/failed/skipped counts at the end. OUT: $MUTATIONS_OUT or target/mutations.
set -u
here=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$here/.." && pwd)
out=${MUTATIONS_OUT:-$ROOT/target/mutations}
mkdir -p "$out"
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(real noop backend-off dir-off mmap-off readahead-0)

cc -shared -fPIC -o "$out/noop_preload.so" "$here/helpers/noop_preload.c" || exit 1

for run in "${runs[@]}"; do
    lib= force=
    case $run in
        real) ;;
        noop) lib=$out/noop_preload.so ;;
        backend-off) force=DROPBEHIND_BACKEND=off ;;
        dir-off) force=DROPBEHIND_DIR=off ;;
        mmap-off) force=DROPBEHIND_MMAP=off ;;
        readahead-0) force=DROPBEHIND_READAHEAD=0 ;;
        *) echo "mutations.sh: unknown run $run" >&2; exit 2 ;;
    esac
    echo "# $run${lib:+: DROPBEHIND_TEST_LIB=$lib}${force:+: DROPBEHIND_TEST_FORCE=$force}"
    env ${lib:+DROPBEHIND_TEST_LIB=$lib} ${force:+DROPBEHIND_TEST_FORCE=$force} \
        "$here/run.sh" >"$out/$run.log" 2>&1
    # "# t_x.sh" headers, then the ok lines under each, as "t_x.sh: description".
    awk '/^# t_.*\.sh$/ {t = $2} /^ok   - / {sub(/^ok   - /, ""); print t ": " $0}' \
        "$out/$run.log" >"$out/$run.passed"
    tail -1 "$out/$run.log"
done

echo
printf '%-12s %7s %7s %8s\n' run passed failed skipped
for run in "${runs[@]}"; do
    line=$(tail -1 "$out/$run.log")
    p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
    f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
    s=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
    printf '%-12s %7s %7s %8s\n' "$run" "${p:-?}" "${f:-?}" "${s:-?}"
done
echo "(the checks that passed in each run: $out/RUN.passed; the full output: $out/RUN.log)"
