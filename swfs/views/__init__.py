"""Views: turning a file's bytes into the parsed units ``.parsed/`` shows.

Owns parse work in sandboxed worker processes (``parsework``, ``sandbox``,
``scheduler``), parsing a long document range by range (``ranged``) and
rendering units as files (``files``).

Imports: ``parsers``, ``swfs.store`` and ``swfs.api``.
"""
