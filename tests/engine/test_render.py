"""``swfs.find.render`` and the ``.render`` provider without a kernel, on the real engine.

* Names are the parsed units' names (``page-0017``, ``slide-003``).
* The pixel cap: a page larger than it is rendered smaller, never past it,
  and says at which resolution.
* Listing a 24,000-page PDF renders nothing; reading one page renders that
  page only.
* A file LibreOffice must never see (not a zip) fails with the cause in
  ``error.md``; a PDF that changed between the engine's hash and the
  worker's read is never stored under the old hash.
"""

from __future__ import annotations

import errno
import math
import os
import zlib
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
import trio

from mountd.nodes import Tree
from mountd.options import MountOptions
from mountd.render import RenderTree
from mountd.synthetic import Generation
from swfs.api import RelPath
from swfs.engine import Engine
from swfs.find import render
from swfs.workspace import Config
from tests.docgen import _pdf_from_objects

T = TypeVar("T")

pytestmark = pytest.mark.timeout(240)


def run(fn: Callable[[], Awaitable[T]]) -> T:
    return trio.run(fn)


def many_page_pdf(pages: int, width: int = 200, height: int = 200) -> bytes:
    """A flat page tree of ``pages`` pages sharing one content stream."""
    first = 4
    kids = b" ".join(b"%d 0 R" % (first + i) for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + kids + b"] /Count %d >>" % pages,
        b"<< /Length 44 >>\nstream\nBT /F1 24 Tf 20 100 Td (Many pages) Tj ET\nendstream",
    ]
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %d %d] /Contents 3 0 R >>" % (
        width,
        height,
    )
    objects += [page] * pages
    return _pdf_from_objects(objects)


def test_unit_names_match_the_parsers() -> None:
    assert render.unit_name("page", 17) == "page-0017.png"
    assert render.unit_name("slide", 3) == "slide-003.png"
    assert render.unit_name("page", 24000) == "page-24000.png"
    assert render.unit_number("page", "page-0017.png") == 17
    assert render.unit_number("page", "page-24000.png") == 24000
    for bad in ("page-17.png", "page-0000.png", "slide-0017.png", "page-0017.md", "x.png"):
        assert render.unit_number("page", bad) is None, bad
    assert render.unit_number("slide", "slide-003.png") == 3
    assert render.unit_number("slide", "page-0003.png") is None
    assert render.unit_kind("a/deck.pptx") == "slide"
    assert render.unit_kind("a/deck.ODP") == "slide"
    assert render.unit_kind("book.xlsx") == "page"
    assert render.renderable("x.PDF")
    assert render.renderable("y.docx")
    assert not render.renderable("notes.txt")
    assert not render.renderable("data.csv")


def test_pixel_cap() -> None:
    letter = render.fit_zoom(612, 792, 110)
    assert letter == pytest.approx(110 / 72)
    for w, h in ((14400, 14400), (612, 200_000), (50_000, 30)):
        z = render.fit_zoom(w, h, 110)
        assert math.ceil(w * z) * math.ceil(h * z) <= render.MAX_PIXELS
        assert w * z <= render.MAX_SIDE
        assert h * z <= render.MAX_SIDE
        assert z < 110 / 72
    with pytest.raises(ValueError, match="10 to 1200 dpi"):
        render.clamp_dpi(0)
    with pytest.raises(ValueError, match="10 to 1200 dpi"):
        render.clamp_dpi(float("nan"))


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    src = tmp_path / "ws"
    src.mkdir()
    (src / "big.pdf").write_bytes(many_page_pdf(24_000))
    # 200 x 200 inches: past the pixel cap at 110 dpi.
    (src / "poster.pdf").write_bytes(many_page_pdf(1, 14_400, 14_400))
    (src / "fake.pptx").write_bytes(b"this is no zip, whatever its name says\n" * 20)
    (src / "notes.txt").write_text("not rendered\n")
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        eng.scan()  # hashes, no parse: .render needs none
        yield eng


def pngs(root: Path) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), root)
        for d, _, names in os.walk(root)
        for n in names
        if n.endswith(".png")
    )


def test_listing_renders_nothing_and_a_read_renders_one_page(engine: Engine) -> None:
    tree = RenderTree(engine, Generation(), MountOptions(pending_wait=60))
    assert tree.tree is Tree.RENDER
    cache = engine.store_dir / "render"

    async def main() -> None:
        assert await tree.children("") == ["big.pdf", "fake.pptx", "poster.pdf"]
        names = await tree.children("big.pdf")
        assert len(names) == 24_000
        assert names[0] == "page-0001.png"
        assert names[-1] == "page-24000.png"
        # ls -l: every entry stats without rendering.
        for name in names[:200] + names[-5:]:
            e = await tree.entry(f"big.pdf/{name}", wait=False)
            assert e is not None
            assert e.size == 0
            assert e.xattrs["freshness"] == "pending"
        assert pngs(cache) == []
        assert await tree.entry("big.pdf/page-24001.png", wait=False) is None
        assert await tree.entry("big.pdf/page-24001.png") is None
        assert await tree.open_entry("big.pdf/page-24001.png") is None

        # A lookup by name (stat, ls -l without readdirplus) renders nothing either.
        looked = await tree.entry("big.pdf/page-12345.png")
        assert looked is not None
        assert looked.size == 0
        assert looked.data is None
        assert pngs(cache) == []
        page = await tree.open_entry("big.pdf/page-12345.png")
        assert page is not None
        assert page.data is not None
        width, height, dpi = render.png_info(page.data)
        assert (width, height, dpi) == (306, 306, 110)  # 200 pt at 110 dpi
        assert page.size == len(page.data)
        assert page.xattrs["freshness"] == "current"
        assert page.xattrs["locator"] == "big.pdf#page=12345"
        assert page.xattrs["source_hash"] == engine.workspace.file_state(RelPath("big.pdf")).hash  # type: ignore[union-attr]
        assert len(pngs(cache)) == 1
        # The listing's entry now has the size, still without rendering.
        again = await tree.entry("big.pdf/page-12345.png", wait=False)
        assert again is not None
        assert again.size == len(page.data)

        poster = await tree.open_entry("poster.pdf/page-0001.png")
        assert poster is not None
        assert poster.data is not None
        w, h, used = render.png_info(poster.data)
        assert w * h <= render.MAX_PIXELS
        assert used is not None
        assert used < 110
        assert poster.xattrs["dpi"] == f"{used:g}"
        assert poster.xattrs["size"] == f"{w}x{h}"

        assert await tree.children("fake.pptx") == ["error.md"]
        err = await tree.entry("fake.pptx/error.md")
        assert err is not None
        assert err.data is not None
        text = err.data.decode()
        assert 'freshness="failed"' in text.splitlines()[0]
        assert "swfs could not render fake.pptx:" in text
        assert "zip" in text.lower()
        assert await tree.entry("fake.pptx/slide-001.png") is None
        assert await tree.open_entry("fake.pptx/slide-001.png") is None

    run(main)


def test_render_dpi_option(engine: Engine) -> None:
    tree = RenderTree(engine, Generation(), MountOptions(render_dpi=72))

    async def main() -> bytes | None:
        page = await tree.open_entry("big.pdf/page-0002.png")
        return None if page is None else page.data

    data = run(main)
    assert data is not None
    assert render.png_info(data) == (200, 200, 72)  # 200 pt at 72 dpi
    with pytest.raises(ValueError, match="10 to 1200 dpi"):
        MountOptions(render_dpi=5)


def test_changed_file_is_not_stored_under_its_old_hash(engine: Engine, tmp_path: Path) -> None:
    src = engine.src / "poster.pdf"
    old = engine.workspace.file_state(RelPath("poster.pdf"))
    assert old is not None
    assert old.hash is not None
    st = os.stat(src)
    sig = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    src.write_bytes(many_page_pdf(2))  # behind the engine's back
    cache = tmp_path / "cache"
    status, _ = render.layout_job(str(src), old.hash, sig, str(cache))
    assert status == "changed"
    assert not render.RenderCache(cache).layout_path(old.hash).exists()


def heavy_pdf() -> bytes:
    """Page 1 fills three million tiny rectangles (tens of seconds to draw);
    page 2 is empty."""
    ops = zlib.compress(b"0 0 1 1 re f\n" * 3_000_000, 9)
    return _pdf_from_objects(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R 5 0 R] /Count 2 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(ops) + ops + b"\nendstream",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 6 0 R >>",
            b"<< /Length 0 >>\nstream\n\nendstream",
        ]
    )


def test_a_page_past_its_time_limit_has_an_error_beside_it(tmp_path: Path) -> None:
    src = tmp_path / "ws"
    src.mkdir()
    (src / "heavy.pdf").write_bytes(heavy_pdf())
    with Engine.open(src, config=Config(rescan_interval=0)) as eng:
        eng.scan()
        tree = RenderTree(eng, Generation(), MountOptions(pending_wait=60))
        tree.renderer = render.Renderer(eng.workspace, eng.history, 110, page_timeout=1.0)

        async def main() -> None:
            assert await tree.children("heavy.pdf") == ["page-0001.png", "page-0002.png"]
            with pytest.raises(OSError, match="timed out after 1 s") as caught:
                await tree.open_entry("heavy.pdf/page-0001.png")
            assert caught.value.errno == errno.EIO
            assert await tree.children("heavy.pdf") == [
                "page-0001.png",
                "page-0002.png",
                "error.md",
            ]
            err = await tree.entry("heavy.pdf/error.md")
            assert err is not None
            assert err.data is not None
            assert "page-0001.png: timed out after 1 s" in err.data.decode()
            assert "page-0002.png" not in err.data.decode()
            failed = await tree.entry("heavy.pdf/page-0001.png", wait=False)
            assert failed is not None
            assert failed.xattrs["freshness"] == "failed"
            assert "timed out" in failed.xattrs["error"]
            # The killed worker is replaced: the next page renders.
            ok = await tree.open_entry("heavy.pdf/page-0002.png")
            assert ok is not None
            assert ok.data is not None
            assert render.png_info(ok.data)[:2] == (306, 306)

        run(main)
