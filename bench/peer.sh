#!/bin/sh
# Build libfuse's C passthrough_hp example (the peer column of the requests
# workload) from Debian's fuse3 source package, outside the repository.
#
#   sh bench/peer.sh [BUILD_DIR]     # default: ${XDG_CACHE_HOME:-~/.cache}/swfs-bench/peer
#
# Prints the path of the built passthrough_hp on its last line; exits non-zero
# with a one-line reason when it cannot build it (the benchmark then shows the
# reason in the peer's column and goes on).
#
# Debian 13 ("trixie") ships libfuse 3.17, whose passthrough_hp can hand file
# data to the kernel (FUSE passthrough).  The source is fetched with apt through
# a private source list (only deb-src lines, in the build directory), so the
# machine's apt configuration is never changed.  The example links statically
# against the libfuse it was built with; the installed libfuse is not touched.
set -eu

SUITE=${PEER_SUITE:-trixie}
MIRROR=${PEER_MIRROR:-http://deb.debian.org/debian}
DIR=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/swfs-bench/peer}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
OUT="$DIR/passthrough_hp"

if [ -x "$OUT" ] && [ "${PEER_REBUILD:-0}" != 1 ]; then
    echo "$OUT"
    exit 0
fi

fail() {
    echo "peer.sh: $*" >&2
    exit 1
}

have() { command -v "$1" >/dev/null 2>&1; }

# Build tools: meson and ninja (meson from pip when Debian's is too old for
# libfuse 3.17, which needs meson >= 0.60), a C/C++ compiler, pkg-config.
need=""
have gcc || need="$need gcc"
have g++ || need="$need g++"
have ninja || need="$need ninja-build"
have pkg-config || need="$need pkg-config"
have dpkg-source || need="$need dpkg-dev"
if [ -n "$need" ]; then
    if [ "$(id -u)" = 0 ] && have apt-get; then
        apt-get install -y -q $need >&2 || fail "apt-get install$need failed"
    else
        fail "missing build tools:$need (install them, or run as root)"
    fi
fi

MESON=meson
if ! have meson || ! meson --version | awk -F. '{exit !($1 > 0 || $2 >= 60)}'; then
    [ -x "$DIR/venv/bin/meson" ] || {
        python3 -m venv "$DIR/venv" >&2 && "$DIR/venv/bin/pip" install -q meson >&2
    } || fail "cannot install meson (pip install meson into $DIR/venv)"
    MESON="$DIR/venv/bin/meson"
fi

# The source package, through a private apt configuration.
SRC=$(ls -d "$DIR"/src/fuse3-*/ 2>/dev/null | head -n 1 || true)
if [ -z "$SRC" ]; then
    have apt-get || fail "apt-get not found: fetch Debian's fuse3 source package by hand into $DIR/src"
    APT="$DIR/apt"
    mkdir -p "$APT/lists/partial" "$APT/cache/archives/partial" "$DIR/src"
    echo "deb-src $MIRROR $SUITE main" >"$APT/sources.list"
    set -- -o "Dir::Etc::SourceList=$APT/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o "Dir::State::Lists=$APT/lists" -o "Dir::Cache=$APT/cache" \
        -o APT::Sandbox::User=root
    apt-get "$@" update -q >&2 || fail "apt-get update of deb-src $SUITE failed (no network to $MIRROR?)"
    (cd "$DIR/src" && apt-get "$@" source --download-only -q fuse3 >&2) ||
        fail "apt-get source fuse3 ($SUITE) failed"
    (cd "$DIR/src" && dpkg-source --no-check -x ./fuse3_*.dsc >&2) ||
        fail "dpkg-source -x fuse3 failed"
    SRC=$(ls -d "$DIR"/src/fuse3-*/ | head -n 1)
fi

BUILD="$DIR/build"
if [ ! -f "$BUILD/build.ninja" ]; then
    rm -rf "$BUILD"
    "$MESON" setup "$BUILD" "$SRC" -Ddefault_library=static -Dexamples=true -Dutils=false \
        -Dtests=false -Duseroot=false >&2 || fail "meson setup failed (see above)"
fi
ninja -C "$BUILD" example/passthrough_hp >&2 || fail "building passthrough_hp failed (see above)"
cp "$BUILD/example/passthrough_hp" "$OUT"
echo "$OUT"
