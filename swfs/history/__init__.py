"""History: versions of files and of the whole workspace.

Owns when a write becomes a version (``versioning``, ``writesession``),
snapshots, submissions, baselines and reset (``snapshots``), the staged
layer of a ``--staged`` mount (``staging``) and what each change through
such a mount does to it (``copyup``), worlds: the workspace as it was
(``world``), the paths and folders a world shows (``skeleton``) and the
names a user gives them (``names``).  The engine's history part (``part``,
``engine.history``) reads versions and snapshots, takes snapshots, sets the
baseline and restores, through the workspace's records.  Who may read what
was recorded in the past is ``swfs.permissions``, beside ``swfs.api``.

Imports: ``swfs.store``, ``swfs.views``, ``swfs.review``, ``swfs.permissions`` and
``swfs.api``.
"""
