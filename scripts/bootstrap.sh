#!/bin/sh
# Set up everything `make` targets need on a fresh machine: the Debian
# packages for building pyfuse3 and mounting, and LibreOffice for legacy
# Office, RTF and OpenDocument files (when root), then .venv.
set -eu
cd "$(dirname "$0")/.."

need_debs=""
command -v fusermount3 >/dev/null 2>&1 || need_debs="$need_debs fuse3"
pkg-config --exists fuse3 2>/dev/null || need_debs="$need_debs libfuse3-dev"
command -v pkg-config >/dev/null 2>&1 || need_debs="$need_debs pkg-config"
command -v patch >/dev/null 2>&1 || need_debs="$need_debs patch"
# getfattr reads the user.sw.* xattrs; `swfs prompt` tells agents to use it.
command -v getfattr >/dev/null 2>&1 || need_debs="$need_debs attr"
# LibreOffice headless reads .doc/.ppt/.rtf/.odt/.odp (parsers/soffice.py)
# and converts the spreadsheet test fixtures to .xls/.ods.
# The -nogui builds, without recommends, keep a fresh install to minutes:
# no Java, no GUI toolkits, no help packs.  Without it those formats are
# 'unsupported' with that reason; nothing else changes.
# Optional for a developer who is not root: a warning, not a stop.
if ! command -v soffice >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
        need_debs="$need_debs libreoffice-writer-nogui libreoffice-calc-nogui libreoffice-impress-nogui"
    else
        echo "bootstrap: no LibreOffice (soffice): legacy formats stay unsupported, their tests skip" >&2
    fi
fi
if [ -n "$need_debs" ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "bootstrap: installing Debian packages:$need_debs"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q >/dev/null
        # shellcheck disable=SC2086
        apt-get install -y -q --no-install-recommends $need_debs pkg-config >/dev/null
    else
        echo "bootstrap: missing Debian packages:$need_debs (run as root or install them)" >&2
        exit 1
    fi
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip

# pyfuse3 3.5.0 built with scripts/pyfuse3-dircache.patch: it lets the daemon
# keep directory listings in the kernel and skip FLUSH on read-only closes.
# Stock pyfuse3 works too (swfs checks at import), at more round trips.
# --no-binary names pyfuse3 alone: with :all: pip would also build its build
# dependencies (Cython, setuptools) from source, minutes of compiling.
PYFUSE3_SDIST=pyfuse3-3.5.0.tar.gz
PYFUSE3_SHA256=88399a9494b88603230bba300f4ba9ad63fece5ed514ca3633d555a0c6a42b24
patch_sum=$(sha256sum scripts/pyfuse3-dircache.patch | cut -d' ' -f1)
if [ "$(cat .venv/.pyfuse3-patch 2>/dev/null)" != "$patch_sum" ]; then
    echo "bootstrap: building pyfuse3 with scripts/pyfuse3-dircache.patch"
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    .venv/bin/python -m pip download -q --no-binary pyfuse3 --no-deps -d "$build" pyfuse3==3.5.0
    echo "$PYFUSE3_SHA256  $build/$PYFUSE3_SDIST" | sha256sum -c --quiet
    tar xzf "$build/$PYFUSE3_SDIST" -C "$build"
    rm -f "$build/pyfuse3-3.5.0/src/pyfuse3/__init__.c"  # regenerated from the patched .pyx
    patch -s -d "$build/pyfuse3-3.5.0" -p1 <scripts/pyfuse3-dircache.patch
    .venv/bin/python -m pip install -q --force-reinstall --no-deps "$build/pyfuse3-3.5.0"
    echo "$patch_sum" >.venv/.pyfuse3-patch
fi
.venv/bin/python -m pip install -q -e '.[dev]'
touch .venv/.installed
