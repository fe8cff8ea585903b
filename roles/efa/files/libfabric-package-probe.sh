#!/bin/sh
# What the distribution's libfabric package offers, without installing anything:
# the installed package when there is one, else apt's candidate, whose .deb is
# downloaded into apt's archive cache (where the install then finds it: one
# download per build) and unpacked in a temporary directory. Prints
#   source installed|candidate|none, version <Debian version>, efa yes|no
#   (libfabric.so.1 links libefa.so.1 and calls efadv_*: the EFA provider is
#   built in; whether it registers without a device depends on the version), and
#   updated yes when the apt lists had to be fetched first (empty in minbase
#   images; that changes no installed package).
# Used by the efa role's preflight (method package) and by `efa-image build`
# before a build (efa_image.distro), so both judge the package the same way.
set -eu
package=${1:-libfabric1}
export LC_ALL=C DEBIAN_FRONTEND=noninteractive

has_efa() {
    if [ -n "$1" ] && grep -q 'libefa\.so\.1' "$1" && grep -q efadv_query_device "$1"; then echo "efa yes"; else echo "efa no"; fi
}

if [ "$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)" = installed ]; then
    echo "source installed"
    echo "version $(dpkg-query -W -f='${Version}' "$package")"
    has_efa "$(dpkg-query -L "$package" | grep '/libfabric\.so\.1$' | head -n 1)"
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
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download names the file as apt's cache does (<name>_<version, ':' as %3a>_<arch>.deb)
# and checks it against the signed index; the build's cleanup empties the cache.
(cd "$archives" && apt-get download -qq "$package=$version" >&2)
dpkg-deb -x "$archives/${package}_$(echo "$version" | sed 's/:/%3a/')_$(dpkg --print-architecture).deb" "$work"
has_efa "$(find "$work" -name 'libfabric.so.1*' -type f | head -n 1)"
