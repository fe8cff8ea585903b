#!/bin/sh
# What a base image already holds of the components `efa-image build` installs,
# read without changing anything (efa_image.building.basecontents runs it in a
# throw-away container of the base). Prints one line per fact:
#   <component> <key> <value>
# with key prefix (where it is), version, and for the efa component installer
# (the EFA installer's version, from its record). `manifest <json on one line>`
# is this project's image manifest when the base was built by efa-image.
#
# The places looked at, after the manifest's own prefixes, are where this
# project installs (roles' defaults) and where AWS's Deep Learning Containers
# put them (aws/deep-learning-containers,
# pytorch/training/docker/2.5/py3/cu124/Dockerfile.gpu: the EFA installer with
# --skip-kmod --skip-limit-conf --no-verify into /opt/amazon/efa and
# /opt/amazon/openmpi (EFA_PATH, OPEN_MPI_PATH), aws-ofi-nccl configured without
# --prefix (/usr/local/lib), NCCL `make src.build BUILDDIR=/usr/local`, PyTorch in
# Miniforge's /opt/conda/bin/python; older DLCs and the installer's bundled
# plugin use /opt/aws-ofi-nccl and /opt/amazon/ofi-nccl).
set -u
export LC_ALL=C

manifest=/opt/efa-image/manifest.json
if [ -r "$manifest" ]; then
    printf 'manifest %s\n' "$(tr -d '\n' < "$manifest")"
fi

# The prefix the manifest records for a component, if any (one JSON object a component).
recorded_prefix() {
    [ -r "/opt/efa-image/components/$1.json" ] || return 0
    sed -n 's/^ *"prefix": *"\([^"]*\)".*/\1/p' "/opt/efa-image/components/$1.json" | head -n 1
}

# libfabric: fi_info that runs, its library beside it.
for prefix in $(recorded_prefix efa) /opt/amazon/efa; do
    if [ -x "$prefix/bin/fi_info" ] && version=$("$prefix/bin/fi_info" --version 2>/dev/null); then
        echo "efa prefix $prefix"
        echo "efa version $(printf '%s\n' "$version" | sed -n 's/^libfabric: *\([0-9][0-9a-z.]*\).*/\1/p' | head -n 1)"
        break
    fi
done
# The installer's record (its first line names the release, e.g. "# EFA installer version: 1.36.0").
if [ -r /opt/amazon/efa_installed_packages ]; then
    echo "efa installer $(sed -n 's/.*[Ii]nstaller version: *\([0-9][0-9.]*\).*/\1/p' /opt/amazon/efa_installed_packages | head -n 1)"
fi

# Open MPI: ompi_info (a DLC's mpirun is a wrapper script around mpirun.real).
for prefix in $(recorded_prefix openmpi) /opt/amazon/openmpi; do
    if [ -x "$prefix/bin/ompi_info" ] && version=$("$prefix/bin/ompi_info" --version 2>/dev/null); then
        echo "openmpi prefix $prefix"
        echo "openmpi version $(printf '%s\n' "$version" | sed -n 's/^Open MPI v\([0-9][0-9a-z.]*\).*/\1/p' | head -n 1)"
        break
    fi
done

# NCCL: libnccl.so.2 with nccl.h beside it (the header gives the version).
for prefix in $(recorded_prefix nccl) /opt/nccl /usr/local; do
    header=$prefix/include/nccl.h
    if [ -e "$prefix/lib/libnccl.so.2" ] && [ -r "$header" ]; then
        major=$(sed -n 's/^#define NCCL_MAJOR \([0-9]*\).*/\1/p' "$header")
        minor=$(sed -n 's/^#define NCCL_MINOR \([0-9]*\).*/\1/p' "$header")
        patch=$(sed -n 's/^#define NCCL_PATCH \([0-9]*\).*/\1/p' "$header")
        echo "nccl prefix $prefix"
        echo "nccl version $major.$minor.$patch"
        break
    fi
done

# aws-ofi-nccl: the plugin NCCL loads (libnccl-net-ofi.so, libnccl-net.so before 1.14).
for prefix in $(recorded_prefix aws_ofi_nccl) /opt/amazon/ofi-nccl /opt/aws-ofi-nccl /usr/local; do
    if [ -e "$prefix/lib/libnccl-net-ofi.so" ] || [ -e "$prefix/lib/libnccl-net.so" ]; then
        echo "aws_ofi_nccl prefix $prefix"
        break
    fi
done

# PyTorch: the first interpreter that imports torch.
for python in /opt/efa-image/venv/bin/python /opt/conda/bin/python python3; do
    if version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
        echo "pytorch python $(command -v "$python")"
        echo "pytorch version $version"
        break
    fi
done

# METIS and RMM: libraries in the linker cache.
ldconfig -p 2>/dev/null | awk '/libmetis\.so /{print "metis library " $NF; exit}'
ldconfig -p 2>/dev/null | awk '/librmm\.so /{print "rmm library " $NF; exit}'
exit 0
