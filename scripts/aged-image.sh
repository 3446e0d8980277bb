#!/usr/bin/env bash
# Builds a filesystem image holding an aged directory (scripts/make-dirs.py aged), on a
# plain loop device at local-disk speed, for scripts/slowdisk.sh up --image. Reuses an
# existing image built with the same arguments.
#
#   scripts/aged-image.sh OUT --fs ext4|xfs|btrfs --entries N [--size 8G] [--age K]
#
# --age K: the directory's N entries are what is left of K*N files made across K sibling
# directories (make-dirs.py aged DIR N K); the default 10 is the benchmark's, a smaller K
# ages the directory less (its inodes lie closer together).
# The directory is DIR/aged on the mounted image. Needs root and loop devices.
set -euo pipefail
die() { echo "aged-image: $*" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || die "usage: aged-image.sh OUT --fs F --entries N [--size S]"
out=$1; shift
fs=ext4 n=100000 size=8G age=10
while [ $# -gt 0 ]; do
    case $1 in
        --fs) fs=$2; shift 2 ;;
        --entries) n=$2; shift 2 ;;
        --size) size=$2; shift 2 ;;
        --age) age=$2; shift 2 ;;
        *) die "unknown option $1" ;;
    esac
done
[ "$(id -u)" = 0 ] || die "needs root"
stamp="$out.built"
want="fs=$fs entries=$n size=$size version=1"
[ "$age" = 10 ] || want="$want age=$age"
if [ -f "$out" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "$out"; exit 0
fi
rm -f "$out" "$stamp"
truncate -s "$size" "$out"
loop=$(losetup -f --show "$out")
mnt=$(mktemp -d)
cleanup() { mountpoint -q "$mnt" && umount "$mnt"; losetup -d "$loop" 2>/dev/null || true; rmdir "$mnt"; }
trap cleanup EXIT
"$here/slowdisk.sh" mkfs "$fs" "$loop"
mount "$loop" "$mnt"
python3 "$here/make-dirs.py" aged "$mnt/aged" "$n" "$age"
sync
umount "$mnt"
echo "$want" >"$stamp"
echo "$out"
