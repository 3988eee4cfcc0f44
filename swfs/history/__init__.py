"""History: versions of files and of the whole workspace.

Owns when a write becomes a version (``versioning``, ``writesession``),
snapshots, submissions, baselines and reset (``snapshots``), the staged
layer of a ``--staged`` mount (``staging``), worlds: the workspace as it was
(``world``), the names a user gives them (``names``) and who may read what
was recorded in the past (``permissions``).

Imports: ``swfs.store``, ``swfs.views``, ``swfs.review`` and ``swfs.api``.
"""
