"""Inputs for the real-programs layer (tests/mounted/test_programs.py), all
made at test time from fixed seeds: a git repository with a few hundred
files and some fifty commits, a tarball of every kind of entry tar keeps, a
tree with extended attributes and an ACL for rsync -aHAX, a wheel written by
hand, and a small C project with a hand-written ``configure`` and Makefile.
Nothing is fetched."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import random
import shutil
import struct
import subprocess
import tarfile
import zipfile
from pathlib import Path

# Fixed identities and dates: the same commands give the same commit ids in
# every folder, so a mount and a plain folder can be compared by id.
GIT_ENV = {
    "GIT_AUTHOR_NAME": "Ada Agent",
    "GIT_AUTHOR_EMAIL": "ada@example.invalid",
    "GIT_AUTHOR_DATE": "1700000000 +0000",
    "GIT_COMMITTER_NAME": "Ada Agent",
    "GIT_COMMITTER_EMAIL": "ada@example.invalid",
    "GIT_COMMITTER_DATE": "1700000000 +0000",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
}

VOCABULARY = """
alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu
nu xi omicron pi rho sigma tau upsilon phi chi psi omega
revenue region north south quarter budget plan draft agent workspace version history
"""
WORDS = VOCABULARY.split()


def _text(rng: random.Random, lines: int) -> bytes:
    out = []
    for _ in range(lines):
        out.append(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))))
    return ("\n".join(out) + "\n").encode()


def _fast_import_data(data: bytes) -> bytes:
    return b"data %d\n" % len(data) + data + b"\n"


def git_origin(dest: Path, *, files: int = 300, commits: int = 50, seed: int = 36) -> Path:
    """A repository at ``dest`` (branch ``main``, checked out): ``files``
    text files in nested folders, a script with the x bit and a symlink,
    then ``commits`` commits that edit, add, delete and rename.  Made by
    ``git fast-import`` in well under a second."""
    rng = random.Random(seed)
    dest.mkdir(parents=True)
    env = {**os.environ, **GIT_ENV}
    subprocess.run(["git", "init", "-q", "-b", "main", str(dest)], check=True, env=env)
    tree: dict[str, bytes] = {}
    dirs = [f"pkg{d}/sub{s}" for d in range(6) for s in range(4)] + ["docs", ""]
    for i in range(files):
        d = rng.choice(dirs)
        name = f"{d}/file{i:03d}.txt" if d else f"file{i:03d}.txt"
        tree[name] = _text(rng, rng.randint(5, 60))
    stream = io.BytesIO()
    date = 1_600_000_000
    for c in range(commits):
        date += 3600
        stream.write(b"commit refs/heads/main\n")
        stream.write(b"mark :%d\n" % (c + 1))
        stream.write(b"committer Ada Agent <ada@example.invalid> %d +0000\n" % date)
        stream.write(_fast_import_data(f"commit {c}\n".encode()))
        if c:
            stream.write(b"from :%d\n" % c)
        if c == 0:
            for name, data in sorted(tree.items()):
                stream.write(f"M 100644 inline {name}\n".encode())
                stream.write(_fast_import_data(data))
            stream.write(b"M 100755 inline run.sh\n")
            stream.write(_fast_import_data(b"#!/bin/sh\necho run\n"))
            stream.write(b"M 120000 inline latest\n")
            stream.write(_fast_import_data(b"docs"))
        else:
            names = sorted(tree)
            touched = set(rng.sample(names, 8))
            for name in sorted(touched):
                tree[name] = tree[name] + _text(rng, rng.randint(1, 5))
                stream.write(f"M 100644 inline {name}\n".encode())
                stream.write(_fast_import_data(tree[name]))
            for k in range(2):
                name = f"{rng.choice(dirs) or 'top'}/new{c:02d}_{k}.txt"
                tree[name] = _text(rng, rng.randint(2, 20))
                touched.add(name)
                stream.write(f"M 100644 inline {name}\n".encode())
                stream.write(_fast_import_data(tree[name]))
            if c % 5 == 0:
                # Not one written above: its new blob would be left dangling.
                gone = rng.choice(sorted(set(tree) - touched))
                del tree[gone]
                stream.write(f"D {gone}\n".encode())
            if c % 7 == 0:
                old = rng.choice(sorted(tree))
                new = f"moved/{c:02d}-{old.rsplit('/', 1)[-1]}"
                tree[new] = tree.pop(old)
                stream.write(f'R "{old}" "{new}"\n'.encode())
        stream.write(b"\n")
    subprocess.run(
        ["git", "-C", str(dest), "fast-import", "--quiet"],
        input=stream.getvalue(),
        check=True,
        env=env,
    )
    subprocess.run(["git", "-C", str(dest), "checkout", "-q", "-f", "main"], check=True, env=env)
    return dest


def _acl(entries: list[tuple[int, int, int]]) -> bytes:
    """A ``system.posix_acl_access`` value: version 2, then (tag, perm, id)."""
    undefined = 0xFFFFFFFF
    out = struct.pack("<I", 2)
    for tag, perm, ident in entries:
        out += struct.pack("<HHI", tag, perm, undefined if ident < 0 else ident)
    return out


# user::rw-, user:1234:rw-, group::r--, mask::rw-, other::r--
ACL_USER_1234 = _acl([(0x01, 6, -1), (0x02, 6, 1234), (0x04, 4, -1), (0x10, 6, -1), (0x20, 4, -1)])


def file_tree(dest: Path, *, seed: int = 36, xattrs: bool = False) -> Path:
    """A tree with what tar and rsync -aHAX keep: nested folders of several
    modes, text and binary files (one of 1 MiB), an empty file, a long path,
    a non-ASCII name, relative and dangling symlinks, a hard-linked pair,
    another owner (as root) and fixed mtimes; with ``xattrs``, user.*
    attributes and (as root, where the file system takes it) an ACL."""
    rng = random.Random(seed)
    dest.mkdir(parents=True)
    files: list[Path] = []
    for d in range(5):
        for s in range(3):
            sub = dest / f"dir{d}" / f"sub{s}"
            sub.mkdir(parents=True, exist_ok=True)
            for i in range(12):
                p = sub / f"f{i:02d}.txt"
                p.write_bytes(_text(rng, rng.randint(1, 40)))
                files.append(p)
    (dest / "big.bin").write_bytes(rng.randbytes(1024 * 1024))
    (dest / "empty").write_bytes(b"")
    deep = dest / "a-rather-long-folder-name-for-tar" / ("n" * 60) / ("m" * 60)
    deep.mkdir(parents=True)
    (deep / ("long-file-name-" * 6 + ".txt")).write_bytes(b"deep\n")
    (dest / "naïve café ✓.txt").write_text("unicode\n", encoding="utf-8")
    (dest / "script.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (dest / "script.sh").chmod(0o755)
    (dest / "secret").write_bytes(b"only me\n")
    (dest / "secret").chmod(0o600)
    (dest / "private").mkdir(mode=0o700)
    (dest / "private" / "note").write_bytes(b"note\n")
    (dest / "hard-a").write_bytes(b"one inode, two names\n")
    os.link(dest / "hard-a", dest / "dir0" / "hard-b")
    os.symlink("dir1/sub0/f00.txt", dest / "link-rel")
    os.symlink("no/such/target", dest / "link-dangling")
    os.symlink("dir2", dest / "link-dir")
    if os.geteuid() == 0:
        os.chown(dest / "dir3" / "sub1" / "f01.txt", 1234, 1234)
        os.chown(dest / "private", 1234, 1234, follow_symlinks=False)
    if xattrs:
        for p in files[::7]:
            os.setxattr(p, "user.origin", b"generated")
            os.setxattr(p, "user.rank", str(rng.randint(0, 99)).encode())
        os.setxattr(dest / "dir4", "user.folder", b"yes")
        if os.geteuid() == 0:
            # Without ACLs on this file system rsync -A has nothing to keep.
            with contextlib.suppress(OSError):
                os.setxattr(dest / "secret", "system.posix_acl_access", ACL_USER_1234)
    # Fixed mtimes last, folders bottom-up, so nothing above disturbs them.
    stamp = 1_650_000_000
    for root, dnames, fnames in os.walk(dest, topdown=False):
        for name in fnames + dnames:
            stamp += 17
            os.utime(os.path.join(root, name), (stamp, stamp), follow_symlinks=False)
    os.utime(dest, (stamp + 1, stamp + 1))
    return dest


def tarball(tree: Path, dest: Path) -> Path:
    """``tree`` as a pax tarball (gzip), made by Python's tarfile."""
    with tarfile.open(dest, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(tree.iterdir()):
            tar.add(entry, arcname=entry.name)
    return dest


def wheel(dest_dir: Path, *, name: str = "swfshello", version: str = "1.0") -> Path:
    """A pure-Python wheel written by hand (a zip with .dist-info): a module
    and a console script ``swfs-hello`` that prints ``hello from <name>``."""
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": (
            f'"""A wheel made by tests/programgen.py."""\n\n\ndef main() -> None:\n'
            f'    print("hello from {name}")\n'
        ).encode(),
        f"{dist}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: a wheel made at test time\n"
        ).encode(),
        f"{dist}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: swfs-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
        f"{dist}/entry_points.txt": f"[console_scripts]\nswfs-hello = {name}:main\n".encode(),
        f"{dist}/top_level.txt": f"{name}\n".encode(),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    dest_dir.mkdir(parents=True, exist_ok=True)
    out = dest_dir / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(zipfile.ZipInfo(path, (2024, 1, 1, 0, 0, 0)), data)
    return out


CONFIGURE = r"""#!/bin/sh
# A hand-written configure in the autoconf manner: find a compiler, check
# that it compiles and that what it compiles runs, look for headers and a
# function, then write config.h and config.mk.
set -e
CC=${CC:-cc}
CFLAGS=${CFLAGS:--O2}
prefix=/usr/local
for arg; do
    case $arg in
        --prefix=*) prefix=${arg#--prefix=} ;;
        *) echo "configure: unknown option $arg" >&2; exit 2 ;;
    esac
done
echo "checking for a C compiler... $CC"
cat >conftest.c <<'EOF'
int main(void) { return 0; }
EOF
if ! $CC $CFLAGS -o conftest conftest.c 2>config.log; then
    echo "configure: error: C compiler cannot create executables" >&2
    exit 77
fi
printf 'checking whether C compiled programs can run... '
if ./conftest; then echo yes; else
    echo no
    echo "configure: error: cannot run C compiled programs" >&2
    exit 1
fi
: >config.h
for h in stdint.h string.h unistd.h; do
    printf 'checking for %s... ' "$h"
    printf '#include <%s>\nint main(void) { return 0; }\n' "$h" >conftest.c
    if $CC $CFLAGS -o conftest conftest.c 2>>config.log; then
        echo yes
        echo "#define HAVE_$(echo "$h" | tr 'a-z.' 'A-Z_') 1" >>config.h
    else
        echo no
    fi
done
printf 'checking for strndup... '
cat >conftest.c <<'EOF'
#include <string.h>
int main(void) { char *p = strndup("abc", 2); return p[2] != 0; }
EOF
if $CC $CFLAGS -o conftest conftest.c 2>>config.log && ./conftest; then
    echo yes
    echo '#define HAVE_STRNDUP 1' >>config.h
else
    echo no
fi
rm -f conftest conftest.c
cat >config.mk <<EOF
CC = $CC
CFLAGS = $CFLAGS
PREFIX = $prefix
EOF
echo "configure: wrote config.h and config.mk"
"""

MAKEFILE = """\
include config.mk

OBJS = wc.o
all: wordcount

libwc.a: $(OBJS)
\tar rcs $@ $(OBJS)

wordcount: main.o libwc.a
\t$(CC) $(CFLAGS) -o $@ main.o libwc.a

test_wc: test_wc.o libwc.a
\t$(CC) $(CFLAGS) -o $@ test_wc.o libwc.a

%.o: %.c wc.h config.h
\t$(CC) $(CFLAGS) -c -o $@ $<

check: wordcount test_wc
\t./test_wc
\t./wordcount < sample.txt > sample.out
\tcmp sample.out sample.expected
\t@echo "all checks passed"

clean:
\trm -f *.o *.a wordcount test_wc sample.out

.PHONY: all check clean
"""

WC_H = """\
#ifndef WC_H
#define WC_H
#include "config.h"
#include <stddef.h>
struct counts { size_t lines, words, bytes; int in_word; };
void count(const char *buf, size_t n, struct counts *c);
#endif
"""

WC_C = """\
#include "wc.h"
#include <ctype.h>

void count(const char *buf, size_t n, struct counts *c)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)buf[i];
        c->bytes++;
        if (ch == '\\n')
            c->lines++;
        if (isspace(ch)) {
            c->in_word = 0;
        } else if (!c->in_word) {
            c->in_word = 1;
            c->words++;
        }
    }
}
"""

MAIN_C = """\
#include "wc.h"
#include <stdio.h>

int main(void)
{
    char buf[4096];
    size_t n;
    struct counts c = {0, 0, 0, 0};
    while ((n = fread(buf, 1, sizeof buf, stdin)) > 0)
        count(buf, n, &c);
    printf("%zu %zu %zu\\n", c.lines, c.words, c.bytes);
    return 0;
}
"""

TEST_C = """\
#include "wc.h"
#include <stdio.h>
#include <string.h>

static int check(const char *s, size_t l, size_t w)
{
    struct counts c = {0, 0, 0, 0};
    count(s, strlen(s), &c);
    if (c.lines != l || c.words != w || c.bytes != strlen(s)) {
        printf("FAIL: '%s': %zu %zu %zu\\n", s, c.lines, c.words, c.bytes);
        return 1;
    }
    return 0;
}

int main(void)
{
    int bad = check("", 0, 0) + check("one\\n", 1, 1) + check("a b  c\\nd\\n", 2, 4)
        + check("   \\n\\n", 2, 0);
#ifndef HAVE_STDINT_H
    bad++;
    printf("FAIL: configure did not find stdint.h\\n");
#endif
    printf("%d failures\\n", bad);
    return bad != 0;
}
"""


def c_project(dest: Path, *, seed: int = 36) -> Path:
    """A small C project: ``./configure && make && make check``."""
    rng = random.Random(seed)
    dest.mkdir(parents=True)
    (dest / "configure").write_text(CONFIGURE)
    (dest / "configure").chmod(0o755)
    (dest / "Makefile").write_text(MAKEFILE)
    (dest / "wc.h").write_text(WC_H)
    (dest / "wc.c").write_text(WC_C)
    (dest / "main.c").write_text(MAIN_C)
    (dest / "test_wc.c").write_text(TEST_C)
    sample = _text(rng, 200)
    (dest / "sample.txt").write_bytes(sample)
    lines, words = sample.count(b"\n"), len(sample.split())
    (dest / "sample.expected").write_text(f"{lines} {words} {len(sample)}\n")
    return dest


def copy_tree(src: Path, dest: Path) -> None:
    """A plain recursive copy keeping modes and symlinks (the inputs each
    run starts from, so that neither side shares files with the other)."""
    shutil.copytree(src, dest, symlinks=True)
