"""Write the patches in this folder: the parts of the fork offered to
upstream, one per feature, as a series against pyfuse3 3.5.0.

    pip download --no-deps --no-binary pyfuse3 pyfuse3==3.5.0 -d SCRATCH
    tar xzf SCRATCH/pyfuse3-3.5.0.tar.gz -C SCRATCH
    python3 make_patches.py SCRATCH/pyfuse3-3.5.0 SCRATCH/trees

Each feature is applied to a copy of the previous tree by exact text
edits (copied from the fork's files), with its Changes.rst entry and its
test in upstream's test/test_fs.py style; each patch is the diff of two
consecutive trees.  An edit that no longer finds its text stops the
script.  Check the result by applying the series to the sdist, building
it and running its test/test_fs.py.
"""

import shutil
import subprocess
import sys
from pathlib import Path

U = Path(sys.argv[1])  # the unpacked upstream sdist
W = Path(sys.argv[2])  # scratch: the trees (emptied)
F = Path(__file__).resolve().parent.parent  # the fork: vendor/pyfuse3
FILES = ["Include", "src/pyfuse3", "test", "Changes.rst"]
shutil.rmtree(W, ignore_errors=True)
W.mkdir()

def tree(name, base):
    d = W / name
    for f in FILES:
        s = base / f
        if s.is_dir():
            shutil.copytree(s, d / f, ignore=shutil.ignore_patterns("__init__.c", "__pycache__"))
        else:
            (d / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(s, d / f)
    return d

def edit(d, rel, old, new, count=1):
    p = d / rel
    s = p.read_text()
    assert s.count(old) >= 1, (rel, old[:60])
    p.write_text(s.replace(old, new, count))

def changes(d, text):
    head = "Unreleased changes\n==================\n\n"
    if head not in (d / "Changes.rst").read_text():
        edit(d, "Changes.rst", ".. currentmodule:: pyfuse3\n\n", ".. currentmodule:: pyfuse3\n\n" + head)
    edit(d, "Changes.rst", head, head + text + "\n")

def append(d, rel, text):
    p = d / rel
    p.write_text(p.read_text() + text)

base = tree("a-upstream", U)

# ---- 1: opendir may return a FileInfo
t1 = tree("b-opendir", base)
edit(t1, "src/pyfuse3/handlers.pxi",
"""        c.fi.fh = await operations.opendir(c.ino, ctx)
    except FUSEError as e:""",
"""        fh = await operations.opendir(c.ino, ctx)
        if isinstance(fh, FileInfo):
            (<FileInfo>fh)._copy_to_fuse(&c.fi)
        else:
            c.fi.fh = fh
    except FUSEError as e:""")
edit(t1, "src/pyfuse3/_pyfuse3.py",
"from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple\n",
"from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, Tuple, Union\n")
edit(t1, "src/pyfuse3/_pyfuse3.py",
"""    async def opendir(self, inode: InodeT, ctx: "RequestContext") -> FileHandleT:
        '''Open the directory with inode *inode*.

        *ctx* will be a `RequestContext` instance.

        This method should return an integer file handle. The file handle will
        be passed to the `readdir`, `fsyncdir` and `releasedir` methods to
        identify the directory.
        '''""",
"""    async def opendir(
        self, inode: InodeT, ctx: "RequestContext"
    ) -> Union[FileHandleT, "FileInfo"]:
        '''Open the directory with inode *inode*.

        *ctx* will be a `RequestContext` instance.

        This method should return an integer file handle, or a `FileInfo`
        whose ``fh`` is that handle and whose other fields (``keep_cache``)
        are passed to the kernel with it. The file handle will be passed to
        the `readdir`, `fsyncdir` and `releasedir` methods to identify the
        directory.
        '''""")
changes(t1, """* `Operations.opendir` may now return a `FileInfo` instead of a file handle,
  like `Operations.open` and `Operations.create` do: its fields are passed to
  the kernel with the handle (the flags of a directory open can only be set
  in the reply to it).  Returning an int works as before.
""")
append(t1, "test/test_fs.py", '''

class OpendirInfoFs(Fs):
    """Answers opendir with a FileInfo; readdir checks that it got its fh."""

    def __init__(self, cross_process):
        super().__init__(cross_process)
        self.status.readdir_fh = None

    async def opendir(self, inode, ctx):
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return FileInfo(fh=FileHandleT(42))

    async def readdir(self, fh: FileHandleT, start_id: int, token: ReaddirToken) -> None:
        self.status.readdir_fh = fh
        if start_id == 0:
            pyfuse3.readdir_reply(token, self.hello_name, await self.getattr(self.hello_inode), 1)


@pytest.fixture()
def opendir_info_fs(tmpdir):
    yield from _mount_fs(tmpdir, OpendirInfoFs)


def test_opendir_returns_fileinfo(opendir_info_fs):
    (mnt_dir, fs_state) = opendir_info_fs
    assert os.listdir(mnt_dir) == ['message']
    assert fs_state.readdir_fh == 42
''')

# ---- 2: FileInfo.cache_readdir and FileInfo.noflush (on top of 1)
t2 = tree("c-fields", t1)
edit(t2, "Include/fuse_common.pxd",
"""        unsigned int nonseekable
""", """        unsigned int nonseekable
        unsigned int cache_readdir
        unsigned int noflush
""")
edit(t2, "src/pyfuse3/__init__.pyx",
"""    cdef public bint nonseekable

    def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0):
        self.fh = fh
        self.direct_io = direct_io
        self.keep_cache = keep_cache
        self.nonseekable = nonseekable
""", """    cdef public bint nonseekable
    cdef public bint cache_readdir
    cdef public bint noflush

    def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0,
                  cache_readdir=0, noflush=0):
        self.fh = fh
        self.direct_io = direct_io
        self.keep_cache = keep_cache
        self.nonseekable = nonseekable
        self.cache_readdir = cache_readdir
        self.noflush = noflush
""")
edit(t2, "src/pyfuse3/__init__.pyx",
"""        else:
            out.nonseekable = 0
""", """        else:
            out.nonseekable = 0

        if self.cache_readdir:
            out.cache_readdir = 1
        else:
            out.cache_readdir = 0

        if self.noflush:
            out.noflush = 1
        else:
            out.noflush = 0
""")
edit(t2, "src/pyfuse3/__init__.pyi", """    nonseekable: bool

""", """    nonseekable: bool
    cache_readdir: bool
    noflush: bool

""")
edit(t2, "src/pyfuse3/__init__.pyi", """        nonseekable: bool = ...,
    ) -> None: ...""", """        nonseekable: bool = ...,
        cache_readdir: bool = ...,
        noflush: bool = ...,
    ) -> None: ...""")
edit(t2, "src/pyfuse3/_pyfuse3.py",
"""        whose ``fh`` is that handle and whose other fields (``keep_cache``)
        are passed to the kernel with it.""",
"""        whose ``fh`` is that handle and whose ``keep_cache`` and
        ``cache_readdir`` tell the kernel whether to keep and to fill its
        cache of the directory's entries.""")
changes(t2, """* `FileInfo` has two new fields, both false by default: ``cache_readdir``
  (in an `Operations.opendir` reply: the kernel caches the directory's
  entries and answers later listings from that cache, until `invalidate_inode`
  or the end of ``keep_cache``) and ``noflush`` (in an `Operations.open` or
  `Operations.create` reply: the kernel sends no FLUSH at the file's
  close).  Both are fields of libfuse's ``fuse_file_info`` that releases
  since 3.2 lack (``noflush`` the later of the two): the libfuse version
  pyfuse3 requires rises with them.
""")
append(t2, "test/test_fs.py", '''

class CachedFs(Fs):
    """Counts READDIR and FLUSH requests; caches its root's listing and
    opens ``message`` without FLUSH when the test says so."""

    def __init__(self, cross_process):
        super().__init__(cross_process)
        self.status.readdir_calls = 0
        self.status.flush_calls = 0
        self.status.cache_readdir = False
        self.status.noflush = False

    async def opendir(self, inode, ctx):
        if inode != pyfuse3.ROOT_INODE:
            raise pyfuse3.FUSEError(errno.ENOENT)
        return FileInfo(
            fh=FileHandleT(inode), keep_cache=True, cache_readdir=self.status.cache_readdir
        )

    async def readdir(self, fh: FileHandleT, start_id: int, token: ReaddirToken) -> None:
        self.status.readdir_calls += 1
        await super().readdir(fh, start_id, token)

    async def open(self, inode, flags, ctx):
        fi = await super().open(inode, flags, ctx)
        fi.noflush = self.status.noflush
        return fi

    async def flush(self, fh):
        self.status.flush_calls += 1


@pytest.fixture()
def cachedfs(tmpdir):
    yield from _mount_fs(tmpdir, CachedFs)


def test_fileinfo_fields():
    fi = FileInfo(fh=FileHandleT(1), cache_readdir=True, noflush=True)
    assert fi.cache_readdir and fi.noflush
    fi = FileInfo()
    assert not fi.cache_readdir and not fi.noflush


@pytest.mark.parametrize('cache', (False, True))
def test_cache_readdir(cachedfs, cache):
    (mnt_dir, fs_state) = cachedfs
    fs_state.cache_readdir = cache
    for _ in range(3):
        assert os.listdir(mnt_dir) == ['message']
    # Each listing ends with an empty READDIR; a cached one sends none.
    if cache:
        assert fs_state.readdir_calls == 2
    else:
        assert fs_state.readdir_calls == 6


@pytest.mark.parametrize('noflush', (False, True))
def test_noflush(cachedfs, noflush):
    (mnt_dir, fs_state) = cachedfs
    fs_state.noflush = noflush
    with open(os.path.join(mnt_dir, 'message'), 'rb') as fh:
        assert fh.read() == b'hello world\\n'
    assert fs_state.flush_calls == (0 if noflush else 1)
''')

# ---- 3: kernel passthrough (on top of 2)
t3 = tree("d-passthrough", t2)
fast = (F / "src/pyfuse3/fastpath.h").read_text()
head, _, _ = fast.partition("static int pyfuse3_set_nonblocking")
head = head.replace("/* swfs: kernel passthrough (libfuse >= 3.17) and a tight receive loop.\n * Builds against older libfuse too: there passthrough is reported absent. */",
                    "/* Kernel passthrough (libfuse >= 3.17, Linux >= 6.9).\n * Builds against older libfuse too: there passthrough is reported absent. */")
head = head.replace("PYFUSE3_FASTPATH_H", "PYFUSE3_PASSTHROUGH_H")
(t3 / "src/pyfuse3/passthrough.h").write_text(head.rstrip() + "\n\n#endif\n")
edit(t3, "src/pyfuse3/__init__.pyx", "from fuse_lowlevel cimport *\n", """from fuse_lowlevel cimport *

cdef extern from "passthrough.h" nogil:
    int PYFUSE3_HAVE_PASSTHROUGH
    int pyfuse3_want_passthrough(fuse_conn_info *conn)
    int pyfuse3_backing_open(int devfd, int fd)
    int pyfuse3_backing_close(int devfd, int id)
    void pyfuse3_set_backing(fuse_file_info *fi, int id)
""")
edit(t3, "src/pyfuse3/__init__.pyx", "cdef int session_fd\n", "cdef int session_fd\ncdef int passthrough_on = 0\n")
edit(t3, "src/pyfuse3/__init__.pyx", """    cdef public bint noflush

    def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0,
                  cache_readdir=0, noflush=0):
""", """    cdef public bint noflush
    cdef public int backing_id

    def __cinit__(self, fh=0, direct_io=0, keep_cache=1, nonseekable=0,
                  cache_readdir=0, noflush=0, backing_id=0):
        self.backing_id = backing_id
""")
edit(t3, "src/pyfuse3/__init__.pyx", """        else:
            out.noflush = 0
""", """        else:
            out.noflush = 0

        # > 0: the kernel reads and writes through the registered backing
        # file (FOPEN_PASSTHROUGH); ignored with a libfuse without passthrough.
        if self.backing_id > 0:
            pyfuse3_set_backing(out, self.backing_id)
""")
fork_pyx = (F / "src/pyfuse3/__init__.pyx").read_text()
start = fork_pyx.index("def passthrough_available():")
end = fork_pyx.index("def set_spin_window(")
edit(t3, "src/pyfuse3/__init__.pyx", "def terminate():\n", fork_pyx[start:end] + "def terminate():\n")
edit(t3, "src/pyfuse3/handlers.pxi", """        conn.want |= FUSE_CAP_POSIX_ACL

""", """        conn.want |= FUSE_CAP_POSIX_ACL
    # Kernel passthrough excludes the writeback cache (the kernel refuses it).
    global passthrough_on
    passthrough_on = 0
    if operations.enable_passthrough and not operations.enable_writeback_cache:
        passthrough_on = pyfuse3_want_passthrough(conn)

""")
edit(t3, "src/pyfuse3/_pyfuse3.py", """    enable_acl: bool = False
""", """    enable_acl: bool = False
    #: Ask the kernel for FUSE passthrough at INIT (libfuse >= 3.17, root):
    #: an `open` or `create` reply whose `FileInfo.backing_id` is set (from
    #: `backing_open`) then has the kernel read and write that file directly.
    enable_passthrough: bool = False
""")
edit(t3, "src/pyfuse3/__init__.pyi", """    noflush: bool

""", """    noflush: bool
    backing_id: int

""")
edit(t3, "src/pyfuse3/__init__.pyi", """        noflush: bool = ...,
    ) -> None: ...""", """        noflush: bool = ...,
        backing_id: int = ...,
    ) -> None: ...""")
append(t3, "src/pyfuse3/__init__.pyi", """
def passthrough_available() -> bool: ...
def passthrough_active() -> bool: ...
def backing_open(fd: int) -> int: ...
def backing_close(backing_id: int) -> None: ...
""")
changes(t3, """* Kernel passthrough (Linux 6.9, libfuse 3.17): with
  `Operations.enable_passthrough` set, pyfuse3 asks for it at INIT;
  `backing_open` registers a file descriptor as a backing file, and an
  `Operations.open` or `Operations.create` reply whose `FileInfo.backing_id`
  is set has the kernel read and write that file directly, without READ and
  WRITE requests.  `passthrough_available` and `passthrough_active` say
  whether it was built in and whether the kernel agreed.  Built against an
  older libfuse, passthrough is reported unavailable.
""")
append(t3, "test/test_fs.py", '''

class PassthroughFs(Fs):
    """Opens ``message`` through a backing file holding other bytes: its
    READ handler is not reached while passthrough is on."""

    enable_passthrough = True
    backing = b"backing file bytes\\n"

    def __init__(self, cross_process):
        super().__init__(cross_process)
        self.hello_data = self.backing  # the size the kernel reads up to
        self.status.passthrough = None
        self.backing_id = None

    async def open(self, inode, flags, ctx):
        fi = await super().open(inode, flags, ctx)
        self.status.passthrough = pyfuse3.passthrough_active()
        if self.status.passthrough:
            if self.backing_id is None:
                fd = os.open(self.status.backing_path, os.O_RDONLY)
                try:
                    self.backing_id = pyfuse3.backing_open(fd)
                finally:
                    os.close(fd)
            fi.backing_id = self.backing_id
            fi.keep_cache = False  # the kernel refuses FOPEN_KEEP_CACHE with passthrough (EIO)
        return fi

    async def read(self, fh, off, size):
        self.status.read_called = True
        return b"X" * len(self.backing)


@pytest.fixture()
def passthroughfs(tmpdir):
    yield from _mount_fs(tmpdir, PassthroughFs)


@pytest.mark.skipif(not pyfuse3.passthrough_available(), reason='libfuse without passthrough')
@pytest.mark.skipif(os.getuid() != 0, reason='backing files need CAP_SYS_ADMIN')
def test_passthrough(passthroughfs, tmp_path_factory):
    (mnt_dir, fs_state) = passthroughfs
    backing = tmp_path_factory.mktemp('backing') / 'backing'
    backing.write_bytes(PassthroughFs.backing)
    fs_state.backing_path = str(backing)
    with open(os.path.join(mnt_dir, 'message'), 'rb') as fh:
        data = fh.read()
    if not fs_state.passthrough:
        pytest.skip('the kernel did not agree to passthrough')
    assert data == PassthroughFs.backing
    assert not fs_state.read_called
''')

out = Path(__file__).resolve().parent
out.mkdir(exist_ok=True)
for a, b, name in [("a-upstream", "b-opendir", "0001-opendir-may-return-a-FileInfo.patch"),
                   ("b-opendir", "c-fields", "0002-FileInfo-cache_readdir-and-noflush.patch"),
                   ("c-fields", "d-passthrough", "0003-kernel-passthrough.patch")]:
    tmp = W / "x"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    shutil.copytree(W / a, tmp / "a")
    shutil.copytree(W / b, tmp / "b")
    r = subprocess.run(["diff", "-ruN", "a", "b"], capture_output=True, text=True, cwd=tmp)
    assert r.returncode == 1, r.stderr
    # No timestamps: a patch written again is the same file.
    lines = [
        line.split("\t")[0] if line.startswith(("--- ", "+++ ")) else line
        for line in r.stdout.splitlines()
    ]
    (out / name).write_text("\n".join(lines) + "\n")
    print(name, len(r.stdout.splitlines()))
