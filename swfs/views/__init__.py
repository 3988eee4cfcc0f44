"""Views: turning a file's bytes into the parsed units ``.parsed/`` shows.

Owns parse work in sandboxed worker processes (``parsework``, ``sandbox``,
``scheduler``), parsing a long document range by range (``ranged``),
rendering units as files and the freshness rule (``files``), and the views
part that serves them over the live workspace or a world (``serving``).

Imports: ``parsers``, ``swfs.store`` and ``swfs.api``.
"""
