#!/usr/bin/env bash
# A slow disk for tests and benchmarks: nbdkit's memory plugin behind its delay filter,
# exposed as a file by nbdfuse, attached to a loop device with direct I/O, formatted and
# mounted. Every request to the "disk" then costs DELAY ms, like a seek on a hard disk.
# With --rate, instead, a disk in memory whose only limit is its bandwidth (below).
#
#   scripts/slowdisk.sh up DIR [--fs ext4|xfs|btrfs|ext2] [--delay-ms 2] [--size 4G] [--ra-kb 128]
#                              [--image FILE] [--fail-writes TRIGGER]
#   scripts/slowdisk.sh up DIR --rate MIBPS [--delay-ms 0] [--fs F] [--size S] [--ra-kb N]
#   scripts/slowdisk.sh down DIR
#   scripts/slowdisk.sh check [--rate]   (exit 0 if this machine can build one; says why not)
#
# `--image FILE` serves a filesystem image made beforehand (scripts/aged-image.sh) through
# nbdkit's file plugin instead of a fresh, empty memory disk; writes stay in nbdkit's memory
# (cow filter), so the image is never changed. `--fail-writes TRIGGER` puts nbdkit's error
# filter in front of a memory disk: while the file TRIGGER exists, every write fails with
# EIO (a failing device, for the writeback-error tests).
#
# `--rate MIBPS` is another disk: a file on a private tmpfs, attached to a loop device and
# limited by the kernel's block throttle (the cgroup v1 blkio controller's root group, which
# holds the flusher threads too) to MIBPS MiB/s of reads and MIBPS of writes, separately, so
# reading and writing at once can take MIBPS each way. No latency, nothing cached below, a
# flush that costs nothing: a copy's floor is its size over MIBPS. nbdkit's rate filter did
# the same through nbdfuse at 4 CPU-seconds per 2 GiB copy on two CPUs, which copiers that
# need CPU themselves felt; this costs the loop worker's memory copies
# (bench/results/copies-at-the-floor.md). Its memory is allocated when it comes up, and
# `down` lifts the throttle before the loop device goes back. Needs root, loop devices and
# the cgroup v1 blkio controller, with the caller in its root group (`check --rate`).
#
# `up` prints the mount point (DIR/mnt). The nbdkit disk needs root, nbdkit, nbdfuse
# (libnbd-bin), FUSE and loop devices. The loop device's read_ahead_kb is pinned (default 128, the usual disk
# default): fresh loop devices here came up with 128 once and 2560 another time.
set -euo pipefail

die() { echo "slowdisk: $*" >&2; exit 2; }

THROTTLE=/sys/fs/cgroup/blkio/blkio.throttle

check() {
    [ "$(id -u)" = 0 ] || die "needs root"
    case ${1:-} in
        --rate)
            for t in losetup fallocate mount mkfs.ext4; do command -v $t >/dev/null || die "needs $t"; done
            [ -w "$THROTTLE.write_bps_device" ] \
                || die "--rate needs the cgroup v1 blkio controller's throttle ($THROTTLE.*_bps_device)"
            # v1 throttling is per group: a process in another blkio group escapes the rule.
            grep -qx '[0-9]*:[^:]*blkio[^:]*:/' /proc/self/cgroup \
                || die "--rate needs the caller in the blkio controller's root group"
            losetup -f >/dev/null 2>&1 || die "no free loop device"
            return ;;
        '') ;;
        *) die "usage: slowdisk.sh check [--rate]" ;;
    esac
    for t in nbdkit nbdfuse losetup mount; do command -v $t >/dev/null || die "needs $t (apt-get install nbdkit libnbd-bin)"; done
    [ -e /dev/fuse ] || die "needs /dev/fuse"
    losetup -f >/dev/null 2>&1 || die "no free loop device"
}

mkfs_for() { # FS DEVICE [eager]
    # eager (a --rate disk): no discard, which would give back the memory allocated up
    # front, and ext4's inode tables and journal written now, not by its lazy init while
    # something is being measured.
    local eager=${3:-}
    case $1 in
        # Room for a million small files.
        ext4) mkfs.ext4 -q -F -i 4096 ${eager:+-E lazy_itable_init=0,lazy_journal_init=0,nodiscard} "$2" ;;
        # No journal: a failed data write fails only its file.
        ext2) mkfs.ext2 -q -F ${eager:+-E nodiscard} "$2" ;;
        xfs) mkfs.xfs -q -f ${eager:+-K} "$2" ;;
        btrfs) mkfs.btrfs -q -f ${eager:+-K} "$2" >/dev/null ;;
        *) die "unknown filesystem $1" ;;
    esac
}

up() {
    local dir=$1; shift
    local fs=ext4 delay= size=4G ra=128 image= fail=() rate=
    while [ $# -gt 0 ]; do
        case $1 in
            --fs) fs=$2; shift 2 ;;
            --delay-ms) delay=$2; shift 2 ;;
            --size) size=$2; shift 2 ;;
            --ra-kb) ra=$2; shift 2 ;;
            --image) image=$(realpath "$2"); shift 2 ;;
            --fail-writes) fail=(--filter=error error-pwrite=EIO error-pwrite-rate=100% "error-file=$2"); shift 2 ;;
            --rate) [[ $2 =~ ^[1-9][0-9]*$ ]] || die "--rate takes MiB/s, a whole number"
                rate=$2; shift 2 ;;
            *) die "unknown option $1" ;;
        esac
    done
    command -v "mkfs.$fs" >/dev/null || die "needs mkfs.$fs"
    if [ -n "$rate" ]; then
        [ -z "$image" ] || die "--rate serves a fresh disk, not --image"
        [ ${#fail[@]} = 0 ] || die "--rate and --fail-writes do not go together"
        [ "${delay:-0}" = 0 ] || die "--rate is a disk without latency: no --delay-ms but 0"
        up_rate "$dir" "$fs" "$size" "$ra" "$rate"
        return
    fi
    delay=${delay:-2}
    check
    mkdir -p "$dir/fuse" "$dir/mnt"
    rm -f "$dir/nbd.sock"  # a stale socket makes nbdkit refuse to start
    # Both daemons get their own output files: an inherited stdout would keep a caller's
    # $(slowdisk.sh up ...) waiting for ever.
    if [ -n "$image" ]; then
        [ -f "$image" ] || die "no image $image"
        nbdkit --unix "$dir/nbd.sock" --pidfile "$dir/nbdkit.pid" --threads 16 \
            --filter=delay --filter=cow file "$image" rdelay="${delay}ms" wdelay="${delay}ms" \
            </dev/null >"$dir/nbdkit.log" 2>&1
    else
        nbdkit --unix "$dir/nbd.sock" --pidfile "$dir/nbdkit.pid" --threads 16 \
            "${fail[@]:0:1}" --filter=delay memory size="$size" rdelay="${delay}ms" wdelay="${delay}ms" \
            "${fail[@]:1}" \
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

up_rate() { # DIR FS SIZE RA MIBPS
    local dir=$1 fs=$2 size=$3 ra=$4 mibps=$5 loop dev
    check --rate
    if [ -e "$dir/loop" ] || [ -e "$dir/throttle" ] || mountpoint -q "$dir/mem" 2>/dev/null; then
        die "$dir holds a disk already: slowdisk.sh down $dir first"
    fi
    # tmpfs takes what it is given, past what the machine can spare (no swap here): keep
    # 2 GiB of what is available for everything else.
    local bytes avail
    bytes=$(numfmt --from=iec "$size") || die "--size: expected a size such as 7G"
    avail=$(($(awk '/^MemAvailable:/ {print $2}' /proc/meminfo) * 1024))
    [ "$bytes" -le $((avail - (2 << 30))) ] \
        || die "no room in memory for a $size disk ($((avail >> 20)) MiB available)"
    mkdir -p "$dir/mem" "$dir/mnt"
    # Whatever fails from here on, the memory, loop device and throttle go back.
    trap "down $(printf %q "$dir") >/dev/null 2>&1" EXIT
    mount -t tmpfs -o "size=$size,mode=700" dropbehind-rate "$dir/mem"
    # Every page allocated now, so that no write pays for it while being measured.
    fallocate -l "$size" "$dir/mem/disk" || die "no room in memory for a $size disk"
    loop=$(losetup -f --show "$dir/mem/disk")
    echo "$loop" >"$dir/loop"
    mkfs_for "$fs" "$loop" eager
    mount "$loop" "$dir/mnt"
    mountpoint -q "$dir/mnt" || die "mount failed"
    echo "$ra" >"/sys/block/$(basename "$loop")/queue/read_ahead_kb"
    dev=$(cat "/sys/block/$(basename "$loop")/dev")
    echo "$dev" >"$dir/throttle"
    echo "$dev $((mibps * 1024 * 1024))" >"$THROTTLE.read_bps_device"
    echo "$dev $((mibps * 1024 * 1024))" >"$THROTTLE.write_bps_device"
    trap - EXIT
    echo "$dir/mnt"
}

down() {
    local dir=$1
    # The throttle belongs to the device number: lifted first, or the next user of this
    # loop device would inherit it; and only while the device is still this disk's (after
    # a reboot the number may be another's).
    if [ -f "$dir/throttle" ] && [ -f "$dir/loop" ] \
        && [ "$(losetup -nO BACK-FILE "$(cat "$dir/loop")" 2>/dev/null)" = "$(realpath "$dir/mem/disk" 2>/dev/null)" ]; then
        echo "$(cat "$dir/throttle") 0" >"$THROTTLE.read_bps_device" || true
        echo "$(cat "$dir/throttle") 0" >"$THROTTLE.write_bps_device" || true
    fi
    mountpoint -q "$dir/mnt" 2>/dev/null && umount "$dir/mnt"
    [ -f "$dir/loop" ] && losetup -d "$(cat "$dir/loop")" 2>/dev/null || true
    fusermount3 -u "$dir/fuse" 2>/dev/null || umount "$dir/fuse" 2>/dev/null || true
    [ -f "$dir/nbdfuse.pid" ] && kill "$(cat "$dir/nbdfuse.pid")" 2>/dev/null || true
    [ -f "$dir/nbdkit.pid" ] && kill "$(cat "$dir/nbdkit.pid")" 2>/dev/null || true
    if mountpoint -q "$dir/mem" 2>/dev/null; then
        # A loop device's detach can be deferred while it is still open: a lazy unmount
        # then frees the memory once it is gone.
        umount "$dir/mem" 2>/dev/null || umount -l "$dir/mem"
    fi
    rm -f "$dir/loop" "$dir/nbd.sock" "$dir/nbdkit.pid" "$dir/nbdfuse.pid" "$dir/throttle"
}

case ${1:-} in
    up) shift; [ $# -ge 1 ] || die "usage: slowdisk.sh up DIR [options]"; up "$@" ;;
    down) shift; [ $# -ge 1 ] || die "usage: slowdisk.sh down DIR"; down "$1" ;;
    check) shift; check "$@" ;;
    mkfs) shift; mkfs_for "$@" ;;
    *) die "usage: slowdisk.sh up DIR [--fs F] [--delay-ms N] [--size S] [--ra-kb N] [--rate MIBPS] | down DIR | check [--rate]" ;;
esac
