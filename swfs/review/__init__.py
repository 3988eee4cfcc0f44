"""Review: what changed since the baseline, and the diffs that show it.

Owns the change list (``changes``), the pure diff renderers (``diffs``) and
the reviews part that serves them (``reviews``).

Imports: ``parsers``, ``swfs.store``, ``swfs.views``, ``swfs.permissions`` and
``swfs.api``.
"""
