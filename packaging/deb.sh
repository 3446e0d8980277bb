#!/usr/bin/env bash
# packaging/deb.sh DIR: builds DIR/dropbehind_VERSION_ARCH.deb with dpkg-deb from the
# release build (run by `make deb`, after the build and the generated man page and
# completions). The package holds the launcher, the library under /usr/lib/<multiarch>
# (where the launcher looks, beside ../lib), the man page and the bash, zsh and fish
# completions. Nothing here installs anything: the package is only built.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/deb}
command -v dpkg-deb >/dev/null || { echo "deb: dpkg-deb not found (apt-get install dpkg)" >&2; exit 1; }
bin=target/release/dropbehind
version=$("$bin" --version | awk '{print $2}')
# dpkg-architecture is dpkg-dev's; without it, dpkg and the compiler say the same.
arch=$(dpkg-architecture -qDEB_HOST_ARCH 2>/dev/null || dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
[ -n "$multiarch" ] || { echo "deb: no multiarch triplet (dpkg-architecture, gcc -print-multiarch)" >&2; exit 1; }
stage=target/deb-stage
root=$stage/root
rm -rf "$stage"
mkdir -p "$root" "$out"

make -s install DESTDIR="$PWD/$root" PREFIX=/usr LIBDIR="/usr/lib/$multiarch" \
    ZSHCOMPDIR=/usr/share/zsh/vendor-completions >/dev/null
if command -v strip >/dev/null; then
    strip --strip-unneeded --remove-section=.comment "$root/usr/bin/dropbehind" \
        "$root/usr/lib/$multiarch/libdropbehind.so" "$root/usr/lib/$multiarch/libdropbehind_engine.so"
fi
gzip -9n "$root/usr/share/man/man1/dropbehind.1"

doc=$root/usr/share/doc/dropbehind
install -d "$doc"
when=$(git log -1 --format=%aD 2>/dev/null || date -R)
cat >"$doc/changelog.Debian" <<EOF
dropbehind ($version) unstable; urgency=medium

  * Built from the source tree by make deb.

 -- dropbehind developers <dropbehind@localhost>  $when
EOF
gzip -9n "$doc/changelog.Debian"
cat >"$doc/copyright" <<'EOF'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: dropbehind

Files: *
Copyright: the dropbehind developers
License: MIT
EOF

# Shared-library dependencies as dpkg-shlibdeps finds them (it wants a debian/control).
depends=libc6
if command -v dpkg-shlibdeps >/dev/null; then
    mkdir -p "$stage/src/debian"
    printf 'Source: dropbehind\n\nPackage: dropbehind\nArchitecture: any\n' >"$stage/src/debian/control"
    if found=$(cd "$stage/src" && dpkg-shlibdeps -O \
        "-e$PWD/../root/usr/bin/dropbehind" "-e$PWD/../root/usr/lib/$multiarch/libdropbehind.so" \
        "-e$PWD/../root/usr/lib/$multiarch/libdropbehind_engine.so" 2>/dev/null); then
        depends=${found#shlibs:Depends=}
    fi
fi

install -d "$root/DEBIAN"
cat >"$root/DEBIAN/control" <<EOF
Package: dropbehind
Version: $version
Architecture: $arch
Maintainer: dropbehind developers <dropbehind@localhost>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends
Section: admin
Priority: optional
Description: keep streaming I/O from flooding the Linux page cache
 dropbehind is an LD_PRELOAD library and a launcher that make unmodified
 programs drop the pages their streaming reads and writes brought into the
 page cache once they are done with them, leaving everyone else's cached pages
 alone. The launcher also shows how much of files and trees is cached
 (dropbehind stat), drops it (dropbehind evict) and prints the environment
 that preloads the library for services and cron jobs (dropbehind env).
EOF
(cd "$root" && find usr -type f -print0 | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
deb=$out/dropbehind_${version}_${arch}.deb
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "$deb"
