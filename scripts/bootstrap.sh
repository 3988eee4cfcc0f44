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
[ "$(id -u)" = 0 ] && ! /usr/bin/python3 -c "import uno" 2>/dev/null && need_debs="$need_debs python3-uno" # warm LibreOffice's UNO client
# meson and ninja build libfuse 3.17 below (kernel FUSE passthrough); without
# them (not root) pyfuse3 is built against the system libfuse.
if [ "$(id -u)" = 0 ] && [ "${SWFS_LIBFUSE:-auto}" != system ]; then
    command -v meson >/dev/null 2>&1 || need_debs="$need_debs meson"
    command -v ninja >/dev/null 2>&1 || need_debs="$need_debs ninja-build"
    command -v cc >/dev/null 2>&1 || need_debs="$need_debs gcc libc6-dev"
fi
# The BLAKE3 reference C sources (sources only: no Rust toolchain) and a C
# compiler, for the library that hashes a written file by what changed
# (swfs/store/b3tree.py).  Optional: without them files are hashed whole.
if [ "$(id -u)" = 0 ]; then
    ls -d /usr/share/cargo/registry/blake3-*/c >/dev/null 2>&1 ||
        need_debs="$need_debs librust-blake3-dev"
    command -v cc >/dev/null 2>&1 || need_debs="$need_debs gcc libc6-dev"
fi
# The real programs tests/mounted/test_programs.py runs in a mount and in a
# plain folder (git, rsync -aHAX, make and a C compiler, stress-ng's file
# stressors).  Optional for a developer who is not root: those tests skip,
# naming the missing tool.
real_debs=""
command -v git >/dev/null 2>&1 || real_debs="$real_debs git"
command -v rsync >/dev/null 2>&1 || real_debs="$real_debs rsync"
command -v make >/dev/null 2>&1 || real_debs="$real_debs make"
command -v cc >/dev/null 2>&1 || real_debs="$real_debs gcc libc6-dev"
command -v stress-ng >/dev/null 2>&1 || real_debs="$real_debs stress-ng"
# mkfs.xfs: the clone (reflink) tests make a small xfs image to run on.
command -v mkfs.xfs >/dev/null 2>&1 || [ -x /usr/sbin/mkfs.xfs ] || real_debs="$real_debs xfsprogs"
if [ -n "$real_debs" ]; then
    if [ "$(id -u)" = 0 ]; then
        need_debs="$need_debs$real_debs"
    else
        echo "bootstrap: missing Debian packages for the real-programs tests:$real_debs (they skip)" >&2
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

# libfuse 3.17 has the kernel passthrough API that Debian 12's 3.14 lacks
# (swfs --passthrough, mountd/fastpath.py).  Built from Debian 13's fuse3
# source package, fetched through the mirror apt already uses: the library
# only (no utilities, examples or tests), into .venv/libfuse-VERSION, once
# per venv (half a minute).  pyfuse3 links it with an rpath; the system's
# fusermount3 and /dev/fuse serve it as they serve 3.14.  If it cannot be
# fetched or built, pyfuse3 is built against the system libfuse and swfs
# mounts as before, without passthrough.  SWFS_LIBFUSE=system skips it.
LIBFUSE_VERSION=3.17.2
LIBFUSE_ORIG=fuse3_$LIBFUSE_VERSION.orig.tar.gz
LIBFUSE_SHA256=3d932431ad94e86179e5265cddde1d67aa3bb2fb09a5bd35c641f86f2b5ed06f
LIBFUSE_PREFIX="$PWD/.venv/libfuse-$LIBFUSE_VERSION"

build_libfuse() {
    work=$(mktemp -d)
    # A private apt configuration: the machine's own lists stay as they are.
    mirror=$(apt-get indextargets --format '$(SITE)' 2>/dev/null | grep -v -- -security | head -n 1)
    [ -n "$mirror" ] || { rm -rf "$work"; return 1; }
    mkdir -p "$work/lists/partial" "$work/cache/archives/partial" "$work/src"
    echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror trixie main" \
        >"$work/sources.list"
    set -- -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \
        -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o APT::Sandbox::User=root
    if apt-get "$@" update >"$work/log" 2>&1 &&
        (cd "$work/src" && apt-get "$@" source --download-only fuse3) >>"$work/log" 2>&1 &&
        echo "$LIBFUSE_SHA256  $work/src/$LIBFUSE_ORIG" | sha256sum -c --quiet >>"$work/log" 2>&1 &&
        tar xzf "$work/src/$LIBFUSE_ORIG" -C "$work" &&
        meson setup -Dutils=false -Dexamples=false -Dtests=false -Duseroot=false \
            --prefix="$LIBFUSE_PREFIX" --libdir=lib --buildtype=release \
            "$work/build" "$work/fuse-$LIBFUSE_VERSION" >>"$work/log" 2>&1 &&
        ninja -C "$work/build" >>"$work/log" 2>&1 &&
        meson install -C "$work/build" >>"$work/log" 2>&1; then
        rm -rf "$work"
        return 0
    fi
    tail -n 3 "$work/log" >&2
    rm -rf "$work" "$LIBFUSE_PREFIX"
    return 1
}

libfuse=system
if [ "${SWFS_LIBFUSE:-auto}" != system ] && command -v meson >/dev/null 2>&1 &&
    command -v ninja >/dev/null 2>&1; then
    if [ ! -e "$LIBFUSE_PREFIX/lib/pkgconfig/fuse3.pc" ]; then
        echo "bootstrap: building libfuse $LIBFUSE_VERSION (kernel passthrough)"
        build_libfuse ||
            echo "bootstrap: libfuse $LIBFUSE_VERSION could not be built: pyfuse3 uses the system libfuse (no kernel passthrough)" >&2
    fi
    [ -e "$LIBFUSE_PREFIX/lib/pkgconfig/fuse3.pc" ] && libfuse=$LIBFUSE_VERSION
fi

# pyfuse3: our fork of 3.5.0 in vendor/pyfuse3 (its README says what
# differs): it lets the daemon keep directory listings in the kernel, skip
# FLUSH on read-only closes, and use kernel passthrough.  Stock pyfuse3 works
# too (mountd/binding.py), at more round trips.  Built by pip from a copy of
# the folder (the build leaves no files in the tree), its build dependencies
# (Cython, setuptools) as wheels; rebuilt when a source file of it or the
# libfuse changes.
fork_sum="$(find vendor/pyfuse3/pyproject.toml vendor/pyfuse3/Include vendor/pyfuse3/src/pyfuse3 \
    vendor/pyfuse3/util -type f ! -name __init__.c ! -name '*.so' ! -name '*.pyc' | LC_ALL=C sort |
    xargs sha256sum | sha256sum | cut -d' ' -f1) libfuse-$libfuse"
if [ "$(cat .venv/.pyfuse3-fork 2>/dev/null)" != "$fork_sum" ]; then
    echo "bootstrap: building pyfuse3 from vendor/pyfuse3 (libfuse: $libfuse)"
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    cp -R vendor/pyfuse3 "$build/pyfuse3"
    rm -rf "$build/pyfuse3/build" "$build/pyfuse3/src/pyfuse3/__init__.c" "$build/pyfuse3"/src/*.egg-info
    if [ "$libfuse" = system ]; then
        .venv/bin/python -m pip install -q --force-reinstall --no-deps "$build/pyfuse3"
    else
        PKG_CONFIG_PATH="$LIBFUSE_PREFIX/lib/pkgconfig" LDFLAGS="-Wl,-rpath,$LIBFUSE_PREFIX/lib" \
            .venv/bin/python -m pip install -q --force-reinstall --no-deps "$build/pyfuse3"
    fi
    rm -f .venv/.pyfuse3-patch
    echo "$fork_sum" >.venv/.pyfuse3-fork
fi
# The s3 and Ray extras too: the object-store cache's tests need obstore
# (swfs.store.objcache), the parse-farm tests a real local Ray cluster
# (tests/mounted/test_rayfarm_mounted.py; about 13 s and 260 MB).
# SWFS_RAY=0 leaves Ray out (those tests then skip).
if [ "${SWFS_RAY:-1}" = 0 ]; then
    .venv/bin/python -m pip install -q -e '.[dev,s3]'
else
    .venv/bin/python -m pip install -q -e '.[dev,s3,ray]'
fi
# blake3 by subtrees (swfs/store/b3tree.py): a close rehashes what was written,
# not the whole file.  Seconds to build; if it cannot be, swfs hashes whole
# files as before (and its log says why).
if ! .venv/bin/python -m swfs.store.b3tree check >/dev/null 2>&1; then
    echo "bootstrap: building the blake3 subtree library"
    .venv/bin/python -m swfs.store.b3tree build ||
        echo "bootstrap: no blake3 subtree library: written files are hashed whole" >&2
fi
touch .venv/.installed
