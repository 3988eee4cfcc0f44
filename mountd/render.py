"""The ``.render`` tree: PNG images of pages and slides, made on first read.

``.render/<rel>/`` exists for every file the engine parses whose format
renders (PDF, Word, PowerPoint, Excel, OpenDocument, RTF).  Its names come
from the file's page count (``swfs.find.render.Layout``), so listing a
24,000-page PDF renders nothing.  Only opening a page (``open_entry``:
``cat``, ``cp``, ``open()``) renders it in a worker process, or takes it
from the cache; a lookup or a listing (``stat``, ``ls -l``) reports a page
not rendered yet with size 0, and the open that renders it tells the
kernel the real size.

Beside the images: ``error.md`` when the file or some of its pages could not
be rendered, ``pending.md`` while the page count is not known yet (an office
file being converted for longer than the wait).
"""

from __future__ import annotations

import errno
from collections.abc import Mapping

from mountd.nodes import Tree
from mountd.options import MountOptions
from mountd.synthetic import Base, Entry, Generation, _Cached, _Index
from swfs.api import Access, EngineAPI, Freshness, Hash, RelPath
from swfs.find.render import (
    ERROR_UNIT,
    RENDERER,
    Layout,
    RenderedPage,
    Renderer,
    renderable,
    unit_number,
)
from swfs.views.files import header_line, render_unit

PENDING = "pending.md"


class RenderTree(Base):
    tree = Tree.RENDER

    def listed(self) -> bool:
        """Reachable by name only: `grep -r` from the root would render every page."""
        return False

    def __init__(self, engine: EngineAPI, gen: Generation, options: MountOptions) -> None:
        super().__init__(engine, gen, options)
        self.renderer = Renderer(engine.workspace, engine.history, options.render_dpi)
        self._hashes: dict[str, Hash | None] = {}
        self._hashes_at = -1
        self._index = _Cached(
            gen, lambda: _Index(str(p) for p in engine.views.parsed_paths() if renderable(str(p)))
        )

    def _hash(self, rel: str) -> Hash | None:
        """The file's present hash, asked of the engine once per change
        event (a listing of a 24,000-page PDF asks once per page)."""
        if self._hashes_at != self.gen.value:
            self._hashes.clear()
            self._hashes_at = self.gen.value
        h = self._hashes.get(rel)
        if h is None:
            # Not kept while None: the file may hold bytes not recorded yet.
            h = self.renderer.current_hash(rel)
            if h is not None:
                if len(self._hashes) > 4096:
                    self._hashes.clear()
                self._hashes[rel] = h
            return h
        # Whether the file holds unrecorded bytes is asked every time (a
        # writer's first write sends no change event).
        return h if self.engine.workspace.settled(RelPath(rel)) else None

    def _locate(self, path: str) -> tuple[str, str | None] | None:
        """(file rel, unit name or None) for a path inside a file's directory."""
        for fresh in (False, True):
            idx = self._index.get(fresh=fresh)
            if idx.knows(path):
                return idx.locate(path)
        return None

    async def _layout(self, rel: str) -> tuple[Layout | None, Freshness, str | None, str | None]:
        """The layout to list, waiting for it as a listing of ``.parsed`` does
        (an office file's conversion is the slow step)."""
        _, fresh, _ = self.renderer.cached_layout(rel)
        wait = self.waits.stale_limit if fresh is Freshness.STALE else self.waits.pending
        return await self.renderer.layout(rel, wait)

    def _dir_xattrs(self, rel: str) -> dict[str, str]:
        layout, fresh, h = self.renderer.cached_layout(rel)
        out = {
            "freshness": str(fresh),
            "source": rel,
            "source_hash": None if layout is None else layout.hash,
            "current_hash": h,
            "parser": RENDERER,
            "error": None if layout is None else layout.error,
        }
        return {k: v for k, v in out.items() if v is not None}

    def _note(self, rel: str, unit: str, fresh: Freshness, made: str | None, text: str) -> bytes:
        head = header_line(
            rel=rel,
            unit=unit,
            locator=f"{rel}#render",
            source_hash=made,
            freshness=fresh,
            current_hash=self.renderer.current_hash(rel),
            parser=RENDERER,
        )
        return render_unit(head, text)

    def _error_md(self, rel: str) -> bytes | None:
        layout, fresh, h = self.renderer.cached_layout(rel)
        if layout is not None and layout.error:
            return self._note(
                rel,
                ERROR_UNIT,
                fresh,
                layout.hash,
                f"swfs could not render {rel}: {layout.error}\n",
            )
        if layout is None:
            error = self.renderer.transient_error(rel, h)
            if error is None:
                return None
            return self._note(
                rel, ERROR_UNIT, Freshness.FAILED, h, f"swfs could not render {rel}: {error}\n"
            )
        errors = self.renderer.page_errors(layout.hash)
        if not errors:
            return None
        lines = "".join(f"{name}: {why}\n" for name, why in errors.items())
        return self._note(
            rel,
            ERROR_UNIT,
            fresh,
            layout.hash,
            f"swfs could not render these pages of {rel}:\n{lines}",
        )

    def _pending_md(self, rel: str) -> bytes:
        return self._note(
            rel,
            PENDING,
            Freshness.PENDING,
            None,
            f"swfs is still counting the pages of {rel} (an office file is converted "
            "to PDF first); list this folder again in a moment.\n",
        )

    def _page_access(self, rel: str, page: RenderedPage) -> Access:
        """A page of older content (a stale render): who could read the
        file then and can now (swfs.permissions)."""
        if page.source_hash is None or page.source_hash == page.current_hash:
            return self.access(rel)
        return self.engine.evidence.content_access(RelPath(rel), page.source_hash)

    def _file(
        self, rel: str, data: bytes, xattrs: Mapping[str, str], access: Access | None = None
    ) -> Entry:
        return Entry(
            False,
            self.access(rel) if access is None else access,
            size=len(data),
            mtime_ns=self.gen.changed_ns(rel),
            xattrs=xattrs,
            data=data,
        )

    async def entry(self, path: str, *, wait: bool = True) -> Entry | None:
        loc = self._locate(path)
        if loc is None:
            if path in self._index.get(fresh=False).dirs:
                return self.dir_entry(path)
            return None
        rel, name = loc
        if name is None:
            return Entry(
                True,
                self.access(rel),
                mtime_ns=self.gen.changed_ns(rel),
                xattrs=self._dir_xattrs(rel),
            )
        if name == ERROR_UNIT:
            data = self._error_md(rel)
            return None if data is None else self._file(rel, data, self._dir_xattrs(rel))
        if name == PENDING:
            if self.renderer.cached_layout(rel)[0] is not None:
                return None
            return self._file(rel, self._pending_md(rel), self._dir_xattrs(rel))
        # A lookup or a listing's entry: never renders (`ls -l` of a
        # 24,000-page PDF may look every page up).  A page not rendered yet
        # has size 0 until the open that renders it (open_entry).
        h = self._hash(rel)
        layout, _, _ = self.renderer.cached_layout(rel, h)
        number = None if layout is None else unit_number(layout.unit, name)
        if layout is None or number is None or number > layout.pages:
            if not wait or layout is not None:
                return None
            # Looked up by name before the page count is known (`cat` of a
            # slide of a deck just written): wait for it, as long as its
            # conversion may take, to tell whether the name exists.
            layout, _, _, _ = await self.renderer.layout(rel, self.renderer.convert_timeout + 10)
            number = None if layout is None else unit_number(layout.unit, name)
            if layout is None or number is None or number > layout.pages:
                return None
        have = self.renderer.cached_page(rel, name, whole=False, h=h)
        return Entry(
            False,
            self._page_access(rel, have),
            size=have.size,
            mtime_ns=self.gen.changed_ns(rel),
            xattrs=have.xattrs(),
        )

    async def open_entry(self, path: str) -> Entry | None:
        """The file at ``path`` with its bytes: opening a page renders it."""
        loc = self._locate(path)
        if loc is None or loc[1] in (None, ERROR_UNIT, PENDING):
            return await self.entry(path)
        rel, name = loc
        assert name is not None
        if await self.entry(path) is None:
            return None
        page = await self.renderer.page(rel, name, self.waits.stale_limit)
        if page is None:
            return None
        if page.data is None:
            # error.md beside it says why.
            raise OSError(errno.EIO, f"{rel}/{name}: {page.error}")
        return self._file(rel, page.data, page.xattrs(), self._page_access(rel, page))

    async def xattrs(self, path: str) -> Mapping[str, str]:
        loc = self._locate(path)
        if loc is None:
            return {}
        rel, name = loc
        if name is None or name in (ERROR_UNIT, PENDING):
            return self._dir_xattrs(rel)
        return self.renderer.cached_page(rel, name, whole=False).xattrs()

    async def children(self, path: str) -> list[str]:
        loc = self._locate(path)
        if loc is None:
            return sorted(self._index.get().dirs.get(path, ()))
        rel, name = loc
        if name is not None:
            return []
        layout, _, h, error = await self._layout(rel)
        if layout is None:
            return [ERROR_UNIT] if error else [PENDING]
        if layout.error:
            return [ERROR_UNIT]
        names = layout.names()
        if self.renderer.page_errors(layout.hash):
            names.append(ERROR_UNIT)
        return names
