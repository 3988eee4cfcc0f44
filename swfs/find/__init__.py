"""Find: ranked search over parsed units, and page renders.

Owns the search index and its queries (``search``, ``query``, ``textindex``,
``embed``) and rendered pages (``render``).

Imports: ``parsers``, ``swfs.store``, ``swfs.views`` and ``swfs.api``.
"""
