#!/usr/bin/env bash
# A slow disk for tests and benchmarks: nbdkit's memory plugin behind its delay filter,
# exposed as a file by nbdfuse, attached to a loop device with direct I/O, formatted and
# mounted. Every request to the "disk" then costs DELAY ms, like a seek on a hard disk.
#
#   scripts/slowdisk.sh up DIR [--fs ext4|xfs|btrfs|ext2] [--delay-ms 2] [--size 4G] [--ra-kb 128]
#                              [--image FILE] [--fail-writes TRIGGER]
#                              [--rate MIBPS]
#   scripts/slowdisk.sh down DIR
#   scripts/slowdisk.sh check      (exit 0 if this machine can build one; says why not)
#
# `--image FILE` serves a filesystem image made beforehand (scripts/aged-image.sh) through
# nbdkit's file plugin instead of a fresh, empty memory disk; writes stay in nbdkit's memory
# (cow filter), so the image is never changed. `--fail-writes TRIGGER` puts nbdkit's error
# filter in front of a memory disk: while the file TRIGGER exists, every write fails with
# EIO (a failing device, for the writeback-error tests). `--rate MIBPS` puts nbdkit's rate
# filter in front of a memory disk: reads and writes each limited to MIBPS MiB/s, separately,
# so reading and writing at once can take MIBPS each way; the rate is then the only limit
# and a flush costs nothing, so a copy's floor is its size over MIBPS, with no host cache in
# the way (bench/results/copies-at-the-floor.md).
#
# `up` prints the mount point (DIR/mnt). Needs root, nbdkit, nbdfuse (libnbd-bin), FUSE and
# loop devices. The loop device's read_ahead_kb is pinned (default 128, the usual disk
# default): fresh loop devices here came up with 128 once and 2560 another time.
set -euo pipefail

die() { echo "slowdisk: $*" >&2; exit 2; }

check() {
    [ "$(id -u)" = 0 ] || die "needs root"
    for t in nbdkit nbdfuse losetup mount; do command -v $t >/dev/null || die "needs $t (apt-get install nbdkit libnbd-bin)"; done
    [ -e /dev/fuse ] || die "needs /dev/fuse"
    losetup -f >/dev/null 2>&1 || die "no free loop device"
}

mkfs_for() { # FS DEVICE
    case $1 in
        ext4) mkfs.ext4 -q -F -i 4096 "$2" ;;  # room for a million small files
        ext2) mkfs.ext2 -q -F "$2" ;;  # no journal: a failed data write fails only its file
        xfs) mkfs.xfs -q -f "$2" ;;
        btrfs) mkfs.btrfs -q -f "$2" >/dev/null ;;
        *) die "unknown filesystem $1" ;;
    esac
}

up() {
    local dir=$1; shift
    local fs=ext4 delay=2 size=4G ra=128 image= fail=() rate=()
    while [ $# -gt 0 ]; do
        case $1 in
            --fs) fs=$2; shift 2 ;;
            --delay-ms) delay=$2; shift 2 ;;
            --size) size=$2; shift 2 ;;
            --ra-kb) ra=$2; shift 2 ;;
            --image) image=$(realpath "$2"); shift 2 ;;
            --fail-writes) fail=(--filter=error error-pwrite=EIO error-pwrite-rate=100% "error-file=$2"); shift 2 ;;
            --rate) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--rate takes MiB/s, a whole number"
                # A bucket of 0.2 s: after idling, 0.2 s of the rate goes through at once,
                # 4% of a 5 s copy (the default 2 s would be 40%).
                rate=(--filter=rate "rate=$(($2 * 8 * 1024 * 1024))" burstiness=0.2); shift 2 ;;
            *) die "unknown option $1" ;;
        esac
    done
    command -v "mkfs.$fs" >/dev/null || die "needs mkfs.$fs"
    check
    mkdir -p "$dir/fuse" "$dir/mnt"
    rm -f "$dir/nbd.sock"  # a stale socket makes nbdkit refuse to start
    # Both daemons get their own output files: an inherited stdout would keep a caller's
    # $(slowdisk.sh up ...) waiting for ever.
    if [ -n "$image" ]; then
        [ -f "$image" ] || die "no image $image"
        [ ${#rate[@]} = 0 ] || die "--rate serves a memory disk, not --image"
        nbdkit --unix "$dir/nbd.sock" --pidfile "$dir/nbdkit.pid" --threads 16 \
            --filter=delay --filter=cow file "$image" rdelay="${delay}ms" wdelay="${delay}ms" \
            </dev/null >"$dir/nbdkit.log" 2>&1
    else
        nbdkit --unix "$dir/nbd.sock" --pidfile "$dir/nbdkit.pid" --threads 16 \
            "${rate[@]:0:1}" "${fail[@]:0:1}" --filter=delay memory size="$size" rdelay="${delay}ms" wdelay="${delay}ms" \
            "${fail[@]:1}" "${rate[@]:1}" \
            </dev/null >"$dir/nbdkit.log" 2>&1
    fi
    for _ in $(seq 50); do [ -S "$dir/nbd.sock" ] && break; sleep 0.1; done
    nbdfuse -C 16 "$dir/fuse/disk" --unix "$dir/nbd.sock" </dev/null >"$dir/nbdfuse.log" 2>&1 &
    echo $! >"$dir/nbdfuse.pid"
    for _ in $(seq 100); do [ -e "$dir/fuse/disk" ] && break; sleep 0.1; done
    [ -e "$dir/fuse/disk" ] || die "nbdfuse did not come up"
    local loop
    loop=$(losetup --direct-io=on -f --show "$dir/fuse/disk")
    echo "$loop" >"$dir/loop"
    echo "$ra" >"/sys/block/$(basename "$loop")/queue/read_ahead_kb"
    [ -n "$image" ] || mkfs_for "$fs" "$loop"
    mount "$loop" "$dir/mnt"
    mountpoint -q "$dir/mnt" || die "mount failed"
    echo "$ra" >"/sys/block/$(basename "$loop")/queue/read_ahead_kb"
    echo "$dir/mnt"
}

down() {
    local dir=$1
    mountpoint -q "$dir/mnt" 2>/dev/null && umount "$dir/mnt"
    [ -f "$dir/loop" ] && losetup -d "$(cat "$dir/loop")" 2>/dev/null || true
    fusermount3 -u "$dir/fuse" 2>/dev/null || umount "$dir/fuse" 2>/dev/null || true
    [ -f "$dir/nbdfuse.pid" ] && kill "$(cat "$dir/nbdfuse.pid")" 2>/dev/null || true
    [ -f "$dir/nbdkit.pid" ] && kill "$(cat "$dir/nbdkit.pid")" 2>/dev/null || true
    rm -f "$dir/loop" "$dir/nbd.sock" "$dir/nbdkit.pid" "$dir/nbdfuse.pid"
}

case ${1:-} in
    up) shift; [ $# -ge 1 ] || die "usage: slowdisk.sh up DIR [options]"; up "$@" ;;
    down) shift; [ $# -ge 1 ] || die "usage: slowdisk.sh down DIR"; down "$1" ;;
    check) check ;;
    mkfs) shift; mkfs_for "$@" ;;
    *) die "usage: slowdisk.sh up DIR [--fs F] [--delay-ms N] [--size S] [--ra-kb N] [--rate MIBPS] | down DIR | check" ;;
esac
