#!/bin/sh
# What a distribution package holds, without installing anything: the installed
# package when there is one, else apt's candidate, whose .deb is downloaded into
# apt's archive cache (where the install then finds it: one download per build)
# and unpacked in a temporary directory.
#   package-probe.sh PACKAGE MEMBER [NAME=CHECK ...]
# MEMBER: an extended regular expression for the path of the file to judge in
# the package (the first match), e.g. '/libfabric\.so\.1' or '/metis\.h$'.
# Each CHECK reads that file and prints `NAME <result>`:
#   has:STRING[,STRING...]  yes when the file contains every string, else no
#   define:MACRO            the value of `#define MACRO VALUE` in it (empty if none)
# Prints first `source installed|candidate|none`, `version <Debian version>`,
# and `updated yes` when the apt lists had to be fetched first (empty in
# minbase images; that changes no installed package).
# Called through common's tasks_from package_probe by the roles' preflights
# (efa: libfabric, metis: metis.h), and by `efa-image build` before a build
# (efa_image.building.distro), so the role and the CLI judge a package the same way.
set -eu
package=$1
member=$2
shift 2
export LC_ALL=C DEBIAN_FRONTEND=noninteractive

judge() {
    file=$1
    shift
    for check in "$@"; do
        name=${check%%=*}
        spec=${check#*=}
        case $spec in
            has:*)
                result=yes
                strings=${spec#has:}
                if [ -z "$file" ]; then result=no; fi
                while [ -n "$file" ] && [ -n "$strings" ]; do
                    string=${strings%%,*}
                    grep -a -q -F -e "$string" "$file" || result=no
                    case $strings in *,*) strings=${strings#*,} ;; *) strings= ;; esac
                done
                echo "$name $result"
                ;;
            define:*)
                macro=${spec#define:}
                value=
                if [ -n "$file" ]; then
                    value=$(sed -n "s/^[[:space:]]*#define[[:space:]]\{1,\}$macro[[:space:]]\{1,\}\([^[:space:]]\{1,\}\)[[:space:]]*$/\1/p" "$file" | head -n 1)
                fi
                echo "$name $value"
                ;;
            *)
                echo "package-probe.sh: unknown check $check (has:STRINGS or define:MACRO)" >&2
                exit 2
                ;;
        esac
    done
}

if [ "$(dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null || true)" = installed ]; then
    echo "source installed"
    echo "version $(dpkg-query -W -f='${Version}' "$package")"
    judge "$(dpkg-query -L "$package" | grep -E -e "$member" | head -n 1 || true)" "$@"
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
judge "$(find "$work" -type f | grep -E -e "$member" | head -n 1 || true)" "$@"
