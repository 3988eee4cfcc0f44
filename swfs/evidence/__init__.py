"""Evidence: what the agent did, as the mount saw it, and who may see it.

Owns the access journal of opens, reads, listings and writes (``access``),
lineage: which outputs derive from which inputs (``lineage``), the tab an
agent keeps with the workspace (``tab``) and who is calling (``procinfo``).
The engine's evidence part (``part``, ``engine.evidence``) answers who may
read a path and its recorded contents, and holds the journal the mount
attaches.

Imports: ``swfs.store``, ``swfs.find`` (the tab's searches), ``swfs.history``
(the names of worlds, recorded accesses), ``swfs.permissions`` and ``swfs.api``.
"""
