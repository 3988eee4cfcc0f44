"""Review: what changed since the baseline, and the diffs that show it.

Owns the change list (``changes``) and the pure diff renderers (``diffs``).

Imports: ``parsers``, ``swfs.store``, ``swfs.views``, ``swfs.permissions`` and
``swfs.api``.
"""
