#!/bin/sh
# Set up everything `make` targets need on a fresh machine: the Debian
# packages for building pyfuse3 and mounting (when root), then .venv.
set -eu
cd "$(dirname "$0")/.."

need_debs=""
command -v fusermount3 >/dev/null 2>&1 || need_debs="$need_debs fuse3"
pkg-config --exists fuse3 2>/dev/null || need_debs="$need_debs libfuse3-dev"
command -v pkg-config >/dev/null 2>&1 || need_debs="$need_debs pkg-config"
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
.venv/bin/python -m pip install -q -e '.[dev]'
touch .venv/.installed
