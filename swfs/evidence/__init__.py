"""Evidence: what the agent did, as the mount saw it.

Owns the access journal of opens, reads, listings and writes (``access``),
lineage: which outputs derive from which inputs (``lineage``), the tab an
agent keeps with the workspace (``tab``) and who is calling (``procinfo``).

Imports: ``swfs.store``, ``swfs.find`` (the tab's searches), ``swfs.history``
(the names of worlds) and ``swfs.api``.
"""
