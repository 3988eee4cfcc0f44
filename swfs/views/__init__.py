"""Views: turning a file's bytes into the parsed units ``.parsed/`` shows.

Owns parse work in sandboxed worker processes (``parsework``, ``sandbox``,
``scheduler``), parsing a long document range by range (``ranged``),
rendering units as files and the freshness rule (``files``), the views part
that serves them over the live workspace or a world (``serving``), and the
rules a reader of views follows: how long a read waits for one (``waits``)
and what it keeps of the engine's answers (``cache``).

Imports: ``parsers``, ``swfs.store`` and ``swfs.api``.
"""
