#!/bin/sh
# What the distribution's METIS headers package declares, without installing
# anything: the installed package when there is one, else apt's candidate,
# whose .deb is downloaded into apt's archive cache (where the install then
# finds it) and read there. Prints
#   source installed|candidate|none, version <Debian version>,
#   idx_width <IDXTYPEWIDTH of its metis.h> (empty when it has none), and
#   updated yes when the apt lists had to be fetched first (empty in minbase
#   images; that changes no installed package).
# Used by the metis role's preflight (method package): a width other than the
# one asked for is refused before any change.
set -eu
package=${1:-libmetis-dev}
export LC_ALL=C DEBIAN_FRONTEND=noninteractive

width() { sed -n 's/^[[:space:]]*#define[[:space:]]\{1,\}IDXTYPEWIDTH[[:space:]]\{1,\}\([0-9]\{1,\}\)[[:space:]]*$/\1/p' | head -n 1; }

if [ "$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)" = installed ]; then
    echo "source installed"
    echo "version $(dpkg-query -W -f='${Version}' "$package")"
    header=$(dpkg-query -L "$package" | grep '/metis\.h$' | head -n 1 || true)
    echo "idx_width $(if [ -n "$header" ]; then width < "$header"; fi)"
    exit 0
fi

candidate() { apt-cache policy "$package" 2>/dev/null | sed -n 's/^ *Candidate: *//p'; }
version=$(candidate)
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    apt-get update -qq >&2
    echo "updated yes"
    version=$(candidate)
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
    echo "source none"
    exit 0
fi
echo "source candidate"
echo "version $version"
archives=/var/cache/apt/archives
# apt-get download names the file as apt's cache does (<name>_<version, ':' as %3a>_<arch>.deb)
# and checks it against the signed index; the build's cleanup empties the cache.
(cd "$archives" && apt-get download -qq "$package=$version" >&2)
deb="$archives/${package}_$(echo "$version" | sed 's/:/%3a/')_$(dpkg --print-architecture).deb"
member=$(dpkg-deb --fsys-tarfile "$deb" | tar -t | grep '/metis\.h$' | head -n 1 || true)
echo "idx_width $(if [ -n "$member" ]; then dpkg-deb --fsys-tarfile "$deb" | tar -xO "$member" | width; fi)"
