"""Review: what changed since the baseline, and the diffs that show it.

Owns the change list (``changes``) and the pure diff renderers (``diffs``).

Imports: ``swfs.store``, ``swfs.views`` and ``swfs.api``.
"""
