"""The FUSE daemon: a thin protocol adapter over the swfs engine.

Modules, outermost first:

``launch``      ``mount()`` / ``unmount()``: forks before the engine or trio
                exist, reports readiness through a pipe, owns the lifecycle
                (one AsyncExitStack: engine, nursery, background work, FUSE
                session; unmounts on SIGTERM/SIGINT/SIGHUP, never after a crash).
``operations``  the ``pyfuse3.Operations`` adapter: decodes a request, routes it
                by the top-level name (``router``) to the native passthrough or
                a generated tree, answers attributes or FUSEError (``handler``
                turns anything else into an errno: a bad request never ends
                the mount).
``provider``    the one interface every tree answers the adapter through;
                ``native`` (the native tree) and ``generated`` (a generated
                tree) implement it.
``router``      which provider answers for a node: the generated trees by their
                top-level names (one entry in ``synthetic.make_trees`` registers
                one), what the root reserves and lists, what a change touches.
``passthrough`` the native tree: ``*at`` calls through directory fds opened
                beneath SRC without following symlinks.  Every change to a
                native file goes through the engine's write protocol
                (``engine.writes``, ``swfs.history.writesession``): a write session per
                open for writing (it preserves before the first in-place
                change and records on flush, fsync and release) and a
                ``Change`` per unlink, rename and truncate by path.  The daemon
                holds no history policy; it runs the protocol's slow steps in
                worker threads.
``synthetic``   the read-only ``.parsed``, ``.review`` and ``.versions`` trees;
                what is not a cache hit is built in worker threads
                (``off_loop``), never on the trio loop.  What is cached and
                how long a read waits are the engine's rules
                (``swfs.views.cache``, ``swfs.views.waits``).
``staged``      the native tree of a ``--staged`` mount, the FUSE side: SRC
                with the store's staged layer over it (what each change does
                to the layer: ``swfs.history.copyup``).
``worldnative`` the native tree of a world (``swfs mount --at``): a
                snapshot's files, read-only.
``render``      ``.render/``: page and slide images, made on first read.
``searchtree``  ``.search/``: every name is a query; ``caller`` says who asks.
``tabtree``     ``.tab/``: the task's tab (``swfs.evidence.tab``).
``dirlist``     directory listings without OPENDIR: a warm walk sends no
                request per directory.
``reply``       a handler's answer: its reply now, or an awaitable of it.
                The handlers of LOOKUP, GETATTR, OPEN, CREATE, GETXATTR,
                WRITE, FLUSH, RELEASE and LSEEK answer a native file's
                request at once and hand back a coroutine for what must wait.
``binding``     what the installed pyfuse3 can do: the one module that asks
                (our fork in ``vendor/pyfuse3``, or a stock pyfuse3), and the
                one place that decides how a handler's answer is awaited
                (``adapt``).
``fastpath``    kernel passthrough of native file data: which opens ask for it.
``hop``         a trip to a worker thread at less cost to the loop than
                ``trio.to_thread.run_sync`` (no renaming of the thread per call).
``poll``        adaptive polling: the loop stays hot a moment after a request.
``invalidator`` kernel cache invalidation, background work with run()/stop().
``fusectl``     a mount's FUSE connection (fusectl): found without a request,
                probed, aborted; the watchdog that aborts a killed daemon's.
``dump``        SIGUSR1: the trio task tree, the parse queue and the open write
                sessions to the daemon's log.
``nodes``       the inode table (native nodes keyed by backing identity and
                numbered by the backing inode number, so hard links share an
                inode and ``st_ino`` survives renames and forgets; generated
                nodes by path).
``options``     ``MountOptions``.
``reqcount``    requests answered per kind since the daemon started.
``malloc``      keeps glibc's heap from growing with the thread count.
``fsutil``      renameat2 and utimensat through ctypes; openat2 beneath a
                root fd (``swfs.store.beneath``, shared with the staged layer).

Semantics worth knowing:

- Kernel caches are on (60 s for entries and attributes, native and
  generated); engine change events invalidate them from a worker thread.
- Changes made in SRC behind the mount reach the engine through the change
  feed (``swfs.changefeed``, inotify, started by ``launch``), which also hands
  the changed paths to ``Operations.changed_behind`` so the kernel drops what
  it keeps of them and of their directories.  The engine's periodic rescan is
  the backstop.
- An open of a native file asks the engine to ``check_file`` it first, so
  changes made behind the mount are recorded before anyone reads or writes.
- A write is recorded when the writer closes the file (FUSE flush, which the
  kernel waits for), so an editor's temp file is recorded before it is renamed
  over the original; a bare O_TRUNC open is recorded on release.
- Opening a generated file snapshots its bytes: a re-parse mid-read never
  mixes two versions.  A readdir or open of a stale view waits (at most
  ``stale_wait``, unless ``stale='serve'``) for its re-parse; a lookup or open
  of a unit of a pending view waits (``pending_wait``) for the first parse,
  a listing of its directory at most ``stale_wait``, and ``pending.md``
  answers at once; stat never waits (the rule: ``swfs.views.waits``).
- Names at the mount root that SRC also has (``.parsed``, ``.review``,
  ``.versions``) are shadowed by the generated trees; ``.swfs`` (and a store
  placed inside SRC) is hidden and cannot be created.  The root's listing
  leaves ``.versions`` out unless ``versions='visible'``; it works by name.
"""
