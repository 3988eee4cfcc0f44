"""The store: what swfs keeps on disk, and the invariants over it.

Owns the LMDB records (``records``; opened read-only for a world:
``readonly``), the content-addressed blobs and their
chunks (``blobs``, ``blobreads``), hashing (``b3tree``, ``treecache``,
``hashform``), durable file helpers (``fsutil``, ``beneath``), the full-disk
reserve (``reserve``) and collection (``gc``).  ``swfs check`` checks every
part, so it is ``swfs.check``, above them.

Imports: the standard library, third-party libraries and ``swfs.api``.
"""
