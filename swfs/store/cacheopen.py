"""Which shared cache a workspace uses: ``--cache DIR`` or ``--cache
s3://BUCKET/PREFIX`` (remembered in its store), opened as a local directory
(``swfs.store.sharedcache``) or an object store (``swfs.store.objcache``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from swfs.store.objcache import ObjectStoreCache
from swfs.store.sharedcache import CacheError, LocalCache, ParseCache

log = logging.getLogger(__name__)

SETTING = "shared-cache"  # in a store: the cache it was last used with (one line)


def is_url(spec: str) -> bool:
    return spec.startswith("s3://")


def open_cache(spec: str | os.PathLike[str]) -> ParseCache:
    """The cache ``spec`` names: ``s3://BUCKET/PREFIX`` (swfs.store.objcache)
    or a local directory."""
    text = os.fspath(spec)
    if is_url(text):
        return ObjectStoreCache(text)
    return LocalCache(Path(text))


def for_store(store_dir: Path, given: str | None) -> ParseCache | None:
    """The cache a workspace uses: ``given`` (``--cache``), which is then
    remembered in its store, or the one its store remembers, or none."""
    setting = Path(store_dir) / SETTING
    if given:
        spec = given if is_url(given) else str(Path(given).absolute())
        try:
            if _read_setting(setting) != spec:
                setting.write_text(spec + "\n", encoding="utf-8")
                os.chmod(setting, 0o600)
        except OSError as exc:
            log.warning("%s: cannot remember the shared cache: %s", setting, exc)
        return open_cache(spec)
    spec = _read_setting(setting) or ""
    if not spec:
        return None
    try:
        return open_cache(spec)
    except CacheError as exc:
        # Remembered, not asked for: a command (or a user) that cannot use
        # it still works, parsing by itself.
        log.warning("%s: the shared cache is not used: %s", setting, exc)
        return None


def _read_setting(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None
