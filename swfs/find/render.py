"""Rendered pages: PNG images of PDF pages, document pages, slides and
printed spreadsheet pages, made lazily and cached by content hash.

What a file renders to is fixed by its content hash alone:

* A PDF is rendered page by page with PyMuPDF, straight from the native
  file.  A worker checks that the file still has the stat signature the
  engine recorded for that hash before and after it renders, so a PNG is
  never stored under a hash it was not made from.
* Word, PowerPoint, Excel, OpenDocument and RTF files are converted to PDF
  once per content hash by LibreOffice headless (``parsers.soffice``: its own
  profile per worker, a time limit that kills its process group, the
  worker's memory cap), then rendered like a PDF.  Presentations are
  exported with their hidden slides, so ``slide-003.png`` is the slide that
  ``.parsed/<rel>/slide-003.md`` describes.

All work runs in worker processes (trio-parallel, killed on timeout, with an
address-space cap): a corrupt file, a crash in MuPDF or LibreOffice or a
runaway page costs that file or page an ``error.md`` line, never the daemon.

Listing a file's pages needs only its page count (the layout), never a
render: a 24,000-page PDF lists at the cost of opening it once.

The cache lives in the store directory, under ``render/`` (see
``swfs/store/records.py``)::

    render/<h[:2]>/<h>/layout.json     {"pages": N, "unit": "page"|"slide"} or {"error": "..."}
    render/<h[:2]>/<h>/source.pdf      the LibreOffice conversion (office formats)
    render/<h[:2]>/<h>/<dpi>/page-0001.png
    render/<h[:2]>/<h>/<dpi>/page-0001.error   why that page has no image

Every file is written once, atomically, and never changed: entries are
keyed by content hash (and resolution), so they are never wrong, only
unused.
"""

from __future__ import annotations

import json
import logging
import math
import os
import posixpath
import re
import resource
import signal
import stat
import struct
import time
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import trio
import trio_parallel

from swfs.api import FileState, Freshness, Hash, HistoryAPI, RelPath, WorkspaceAPI
from swfs.store.fsutil import open_to_read, save_file
from swfs.views.parsework import describe_broken

log = logging.getLogger(__name__)

RENDERER = "render@1"  # what the xattrs and error.md name as the maker
DEFAULT_DPI = 110.0
MIN_DPI, MAX_DPI = 10.0, 1200.0
# One image holds at most this many pixels, and no side is longer than
# MAX_SIDE: a bigger page (a poster, a CAD sheet) is rendered at the
# highest resolution that fits, which its ``user.sw.dpi`` xattr states.
MAX_PIXELS = 16_000_000
MAX_SIDE = 16_384
CONVERT_TIMEOUT = 120.0  # seconds for one LibreOffice conversion and its page count
PAGE_TIMEOUT = 60.0  # seconds for one page's render
WORKER_START = 120.0  # seconds a render worker process may take to start
WORKER_GRACE = 30.0  # seconds past a job's own limit before its worker is killed
MEMORY_MB = 3072  # address-space cap per render worker
WORKERS = 2  # render worker processes at once
ERROR_UNIT = "error.md"
MEMO_TTL = 2.0  # seconds the daemon trusts what it read of a file's history
MEMO_SIZE = 1024

_PAGE_RE = re.compile(r"^(page|slide)-(\d+)\.png$")


@dataclass(frozen=True)
class Route:
    """How a format reaches PDF: LibreOffice's import and export filters."""

    infilter: str
    export: str
    unit: str  # 'page' or 'slide'
    kind: str  # the format's name in messages

    @property
    def target(self) -> str:
        if self.unit == "slide":
            # Hidden slides too: slide numbers must match the parsed units.
            hidden = '{"ExportHiddenSlides":{"type":"boolean","value":"true"}}'
            return f"pdf:{self.export}:{hidden}"
        return f"pdf:{self.export}"


def _routes() -> dict[str, Route]:
    word = ("writer_pdf_Export", "page")
    slides = ("impress_pdf_Export", "slide")
    calc = ("calc_pdf_Export", "page")
    table = {
        ".docx": ("MS Word 2007 XML", *word, "Word document"),
        ".docm": ("MS Word 2007 XML", *word, "Word document"),
        ".dotx": ("MS Word 2007 XML Template", *word, "Word template"),
        ".dotm": ("MS Word 2007 XML Template", *word, "Word template"),
        ".doc": ("MS Word 97", *word, "Word 97-2003 document"),
        ".dot": ("MS Word 97 Vorlage", *word, "Word 97-2003 template"),
        ".rtf": ("Rich Text Format", *word, "RTF document"),
        ".odt": ("writer8", *word, "OpenDocument text"),
        ".ott": ("writer8_template", *word, "OpenDocument text template"),
        ".pptx": ("Impress MS PowerPoint 2007 XML", *slides, "PowerPoint presentation"),
        ".pptm": ("Impress MS PowerPoint 2007 XML", *slides, "PowerPoint presentation"),
        ".ppsx": ("Impress MS PowerPoint 2007 XML AutoPlay", *slides, "PowerPoint show"),
        ".ppsm": ("Impress MS PowerPoint 2007 XML AutoPlay", *slides, "PowerPoint show"),
        ".ppt": ("MS PowerPoint 97", *slides, "PowerPoint 97-2003 presentation"),
        ".pps": ("MS PowerPoint 97 AutoPlay", *slides, "PowerPoint 97-2003 show"),
        ".pot": ("MS PowerPoint 97 Vorlage", *slides, "PowerPoint 97-2003 template"),
        ".odp": ("impress8", *slides, "OpenDocument presentation"),
        ".otp": ("impress8_template", *slides, "OpenDocument presentation template"),
        ".xlsx": ("Calc MS Excel 2007 XML", *calc, "Excel workbook"),
        ".xlsm": ("Calc MS Excel 2007 XML", *calc, "Excel workbook"),
        ".xltx": ("Calc MS Excel 2007 XML Template", *calc, "Excel template"),
        ".xltm": ("Calc MS Excel 2007 XML Template", *calc, "Excel template"),
        ".xlsb": ("Calc MS Excel 2007 Binary", *calc, "Excel binary workbook"),
        ".xls": ("MS Excel 97", *calc, "Excel 97-2003 workbook"),
        ".ods": ("calc8", *calc, "OpenDocument spreadsheet"),
    }
    return {ext: Route(*row) for ext, row in table.items()}


ROUTES = _routes()


def extension(rel: str) -> str:
    return posixpath.splitext(rel)[1].lower()


def renderable(rel: str) -> bool:
    """Whether ``rel`` has a directory under ``.render`` (by its name)."""
    ext = extension(rel)
    return ext == ".pdf" or ext in ROUTES


def unit_kind(rel: str) -> str:
    route = ROUTES.get(extension(rel))
    return route.unit if route is not None else "page"


def unit_name(kind: str, number: int) -> str:
    """Named like the parsed units: ``page-0017.png``, ``slide-003.png``."""
    return f"slide-{number:03d}.png" if kind == "slide" else f"page-{number:04d}.png"


def unit_number(kind: str, name: str) -> int | None:
    """The 1-based number of a unit name of this kind (None if not one)."""
    m = _PAGE_RE.match(name)
    if m is None or m.group(1) != kind:
        return None
    number = int(m.group(2))
    if number < 1 or unit_name(kind, number) != name:
        return None
    return number


def clamp_dpi(dpi: float) -> float:
    if not math.isfinite(dpi) or not MIN_DPI <= dpi <= MAX_DPI:
        raise ValueError(f"render resolution must be {MIN_DPI:g} to {MAX_DPI:g} dpi, not {dpi:g}")
    return dpi


def _dpi_dir(dpi: float) -> str:
    return f"{dpi:g}dpi"


def fit_zoom(width_pt: float, height_pt: float, dpi: float) -> float:
    """The zoom (pixels per point) for ``dpi``, lowered until the image
    holds at most MAX_PIXELS pixels and no side is longer than MAX_SIDE."""
    zoom = dpi / 72.0
    w, h = max(width_pt, 1.0), max(height_pt, 1.0)
    zoom = min(zoom, math.sqrt(MAX_PIXELS / (w * h)), MAX_SIDE / w, MAX_SIDE / h)
    # Rounding up a side must not cross the cap.
    while math.ceil(w * zoom) * math.ceil(h * zoom) > MAX_PIXELS and zoom > 1e-6:
        zoom *= 0.999
    return zoom


def png_info(data: bytes) -> tuple[int, int, float | None]:
    """(width, height, dpi or None) from a PNG's IHDR and pHYs chunks."""
    if len(data) < 24 or not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return 0, 0, None
    width, height = struct.unpack(">II", data[16:24])
    dpi = None
    at = data.find(b"pHYs", 8, 4096)
    if at >= 0 and len(data) >= at + 13 and data[at + 12] == 1:  # unit: metre
        (ppm,) = struct.unpack(">I", data[at + 4 : at + 8])
        dpi = round(ppm * 0.0254, 1)
    return width, height, dpi


# -- the cache (plain files in the store directory)


@dataclass(frozen=True)
class Layout:
    """What one content hash renders to: its unit count, or why it cannot."""

    hash: str
    unit: str  # 'page' or 'slide'
    pages: int
    error: str | None = None

    def names(self) -> list[str]:
        return [unit_name(self.unit, n) for n in range(1, self.pages + 1)]


class RenderCache:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._root = str(root)  # the read paths below are built per listed page

    def _dpi_base(self, h: str, dpi: float) -> str:
        return f"{self._root}/{h[:2]}/{h}/{_dpi_dir(dpi)}"

    def has_layout(self, h: str) -> bool:
        return os.path.exists(f"{self._root}/{h[:2]}/{h}/layout.json")

    def dir(self, h: str) -> Path:
        return self.root / h[:2] / h

    def layout_path(self, h: str) -> Path:
        return self.dir(h) / "layout.json"

    def pdf_path(self, h: str) -> Path:
        return self.dir(h) / "source.pdf"

    def png_path(self, h: str, dpi: float, name: str) -> Path:
        return self.dir(h) / _dpi_dir(dpi) / name

    def error_path(self, h: str, dpi: float, name: str) -> Path:
        return self.dir(h) / _dpi_dir(dpi) / (name.removesuffix(".png") + ".error")

    def layout(self, h: str) -> Layout | None:
        try:
            raw = json.loads(self.layout_path(h).read_text(encoding="utf-8"))
            return Layout(h, str(raw.get("unit", "page")), int(raw["pages"]), raw.get("error"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("%s: unreadable render layout; it is made again", self.layout_path(h))
            return None

    def png(self, h: str, dpi: float, name: str, *, whole: bool = True) -> tuple[int, bytes] | None:
        """(size, bytes) of a cached image; ``whole=False``: only its first
        4 KiB (enough for its dimensions and resolution)."""
        try:
            with open(f"{self._dpi_base(h, dpi)}/{name}", "rb") as f:
                size = os.fstat(f.fileno()).st_size
                return size, f.read() if whole else f.read(4096)
        except OSError:
            return None

    def page_error(self, h: str, dpi: float, name: str) -> str | None:
        try:
            stem = name.removesuffix(".png")
            with open(f"{self._dpi_base(h, dpi)}/{stem}.error", encoding="utf-8") as f:
                return f.read().strip()
        except OSError:
            return None

    def page_errors(self, h: str, dpi: float) -> dict[str, str]:
        out: dict[str, str] = {}
        try:
            names = os.listdir(self.dir(h) / _dpi_dir(dpi))
        except OSError:
            return out
        for n in sorted(names):
            if n.endswith(".error"):
                text = self.page_error(h, dpi, n.removesuffix(".error") + ".png")
                if text:
                    out[n.removesuffix(".error") + ".png"] = text
        return out


# -- worker processes


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


class _Changed(Exception):
    """The native file changed while it was read: nothing is stored."""


Signature = tuple[int, int, int, int]  # size, mtime_ns, ctime_ns, inode


def _signature(st: os.stat_result) -> Signature:
    return (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _open_checked(path: str, sig: Signature) -> int:
    fd = open_to_read(path, os.O_NOFOLLOW | os.O_NONBLOCK)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or _signature(st) != sig:
        os.close(fd)
        raise _Changed
    return fd


def _save_json(path: Path, value: dict[str, Any]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    save_file(path, json.dumps(value).encode("utf-8"))


def _open_pdf(path: str) -> Any:
    import pymupdf

    try:
        doc = pymupdf.open(path, filetype="pdf")
    except Exception as exc:
        # MuPDF names the path it was given (a /proc/self/fd link): not useful.
        detail = re.sub(r"\s*'[^']*'", "", str(exc) or type(exc).__name__)
        raise RenderError(f"damaged or not a PDF: {_one_line(detail)}") from exc
    if doc.needs_pass:
        doc.close()
        raise RenderError("encrypted PDF (needs a password)")
    return doc


class RenderError(Exception):
    """The file or page cannot be rendered; the message is the cause."""


_ODF = frozenset({".odt", ".ott", ".odp", ".otp", ".ods"})


def _import_filter(route: Route, ext: str, head: bytes) -> tuple[str, frozenset[str]]:
    """LibreOffice's import filter for this file, and the filters it may
    pick itself where that one refuses the file, as the parse does
    (``parsers.legacy_office``): Word 2.0 and PowerPoint 95."""
    from parsers import legacy_office

    parsed = legacy_office.ROUTES.get(ext)
    if parsed is None:
        return route.infilter, frozenset()
    if ext in (".doc", ".dot") and head.startswith(legacy_office.WORD2_MAGIC):
        return legacy_office.WORD2.infilter, legacy_office.WORD2.detect
    return route.infilter, parsed.detect


def _convert(src: str, route: Route, ext: str) -> bytes:
    """LibreOffice: ``src`` to PDF (bounded as in parsers.soffice): its bytes.
    Runs in the confined child."""
    from parsers._base import FileInfo, ParseFailed, ParseOptions
    from parsers.soffice import SofficeMissing, converted
    from parsers.zipguard import OLE_MAGIC, OOXML_EXTENSIONS, ZIP_MAGIC, check_container

    with open(src, "rb") as f:
        head = f.read(4096)
    if ext in OOXML_EXTENSIONS and head.startswith(OLE_MAGIC):
        raise RenderError(f"encrypted or password-protected {route.kind}")
    if (ext in OOXML_EXTENSIONS or ext in _ODF) and not head.startswith(ZIP_MAGIC):
        raise RenderError(
            f"not a {route.kind}: a {ext} file is a zip package, and this is not a zip"
        )
    try:
        if head.startswith(ZIP_MAGIC):
            # The zip guard first: LibreOffice must never meet a bomb.
            info = FileInfo(name=src, extension=ext, size=os.path.getsize(src), head=head)
            check_container(src, info, ParseOptions())
        infilter, detect = _import_filter(route, ext, head)
        with converted(
            src,
            extension=ext,
            infilter=infilter,
            target=route.target,
            kind=route.kind,
            detect=detect,
        ) as pdf:
            return Path(pdf).read_bytes()
    except SofficeMissing as exc:
        raise RenderError(
            f"{route.kind} ({ext}) needs LibreOffice (soffice), which is not installed"
        ) from exc
    except ParseFailed as exc:
        raise RenderError(_one_line(str(exc) or type(exc).__name__)) from exc


# -- the confined child's side (swfs.sandbox): no cache, no SRC, one descriptor


def _child_layout(req: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[bytes]]:
    """Count the units of the file sent; an office file is converted to PDF
    first, and the PDF comes back as a blob."""
    source = f"/proc/self/fd/{fds[0]}"
    ext = str(req.get("ext", ""))
    route = ROUTES.get(ext) if req.get("convert") else None
    blobs: list[bytes] = []
    try:
        if route is not None:
            pdf = _convert(source, route, ext)
            blobs = [pdf]
            import pymupdf

            try:
                doc = pymupdf.open(stream=pdf, filetype="pdf")
            except Exception as exc:
                raise RenderError(
                    f"LibreOffice made an unreadable PDF: {_one_line(str(exc))}"
                ) from exc
        else:
            doc = _open_pdf(source)
        try:
            pages = int(doc.page_count)
        finally:
            doc.close()
        return {"pages": pages}, blobs
    except RenderError as exc:
        return {"error": str(exc), "kind": "render"}, []
    except MemoryError:
        return {"error": f"out of memory (cap {_memory_cap_mb()} MB)", "retire": True}, []
    except Exception as exc:  # a library's surprise: this file only
        return {"error": _one_line(f"{type(exc).__name__}: {exc}"), "retire": True}, []


def _child_page(req: dict[str, Any], fds: list[int]) -> tuple[dict[str, Any], list[bytes]]:
    """Render one page of the PDF sent."""
    index, dpi = req.get("index"), req.get("dpi")
    if not isinstance(index, int) or not isinstance(dpi, (int, float)):
        return {"error": "bad request"}, []
    try:
        return {}, [_render_page(f"/proc/self/fd/{fds[0]}", index, float(dpi))]
    except RenderError as exc:
        return {"error": str(exc)}, []
    except MemoryError:
        return {
            "error": f"out of memory rendering this page (cap {_memory_cap_mb()} MB)",
            "retire": True,
        }, []
    except Exception as exc:
        return {"error": _one_line(f"{type(exc).__name__}: {exc}"), "retire": True}, []


_children: Any = None


def _confined(
    op: dict[str, Any], fd: int, domain: object, deadline: float, limit: float
) -> tuple[dict[str, Any], list[bytes]] | tuple[str, str]:
    """Run ``op`` on ``fd`` in a confined child of this worker: its reply,
    or ('timeout' | 'crashed', error) when it gave none."""
    from swfs.views import sandbox

    global _children
    if _children is None:
        _children = sandbox.Children({"layout": _child_layout, "page": _child_page})
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    memory = 0 if soft == resource.RLIM_INFINITY else soft
    try:
        child = _children.get(domain, memory)
    except sandbox.SandboxError as exc:
        return "crashed", _one_line(str(exc))
    try:
        reply, blobs = child.call(op, [fd], deadline)
    except TimeoutError:
        _children.drop()
        return "timeout", f"timed out after {limit:g} s"
    except EOFError:
        reason = child.exit_reason() or "ended without an answer"
        _children.drop()
        return "crashed", f"render process died ({reason}; memory cap {_memory_cap_mb()} MB)"
    except (OSError, sandbox.SandboxError) as exc:
        _children.drop()
        return "crashed", _one_line(f"render sandbox: {exc}")
    _children.after(child, reply)
    error = reply.get("error")
    if error is not None and not isinstance(error, str):
        return "crashed", "the renderer's answer was out of protocol"
    return reply, blobs


def _domain(path: str | None) -> object:
    from swfs.views import sandbox

    if path is None:
        return None
    try:
        return sandbox.file_domain(os.stat(path))
    except OSError:
        return None


def layout_job(
    abs_path: str,
    h: str,
    sig: Signature,
    cache_root: str,
    timeout: float = CONVERT_TIMEOUT,
) -> tuple[str, str | None]:
    """Worker: count the units of ``abs_path`` (content ``h``), converting an
    office file to PDF first (in a confined child); store the layout.
    Returns (status, error) with status 'ok', 'failed' (stored: the hash
    cannot be rendered), 'changed', 'transient' (not stored: try again
    later), 'timeout' or 'crashed'."""
    deadline = time.monotonic() + timeout
    cache = RenderCache(Path(cache_root))
    ext = extension(abs_path)
    route = ROUTES.get(ext)
    unit = route.unit if route is not None else "page"
    try:
        fd = _open_checked(abs_path, sig)
    except _Changed:
        return "changed", None
    except OSError as exc:
        return "changed", _one_line(f"cannot open: {exc.strerror}")
    try:
        pdf = cache.pdf_path(h)
        cached = route is not None and pdf.exists()
        source = fd
        if cached:
            try:
                source = os.open(pdf, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                cached = False
        try:
            op = {"op": "layout", "ext": ext, "convert": route is not None and not cached}
            answer = _confined(op, source, _domain(abs_path), deadline, timeout)
        finally:
            if source != fd:
                os.close(source)
        if len(answer) == 2 and isinstance(answer[0], str):
            return answer
        reply, blobs = answer
        if _signature(os.fstat(fd)) != sig:
            return "changed", None
        error = reply.get("error")
        pages = reply.get("pages")
        if error is None and (not isinstance(pages, int) or pages < 0):
            error = "the renderer's answer was out of protocol"
        if error is None and pages == 0:
            error = "no pages"
        if error is not None:
            if "not installed" in error:
                return "transient", error  # installing LibreOffice fixes it
            _save_json(cache.layout_path(h), {"unit": unit, "pages": 0, "error": error})
            return "failed", error
        if route is not None and not cached:
            if len(blobs) != 1:
                return "crashed", "the renderer's answer was out of protocol"
            pdf.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            save_file(pdf, blobs[0])
        _save_json(cache.layout_path(h), {"unit": unit, "pages": pages})
        return "ok", None
    finally:
        os.close(fd)


def render_job(
    abs_path: str | None,
    h: str,
    sig: Signature | None,
    cache_root: str,
    dpi: float,
    name: str,
    timeout: float = PAGE_TIMEOUT,
    owner: str | None = None,
) -> tuple[str, str | None]:
    """Worker: render unit ``name`` of content ``h`` to PNG in the cache (in
    a confined child).  ``abs_path``: the native PDF (checked against
    ``sig``); None: the cached LibreOffice conversion.  ``owner``: the
    native file, whose owner decides which child may render it.  Returns
    (status, error) as layout_job."""
    deadline = time.monotonic() + timeout
    cache = RenderCache(Path(cache_root))
    layout = cache.layout(h)
    if layout is None or layout.error:
        return "transient", "no layout"
    number = unit_number(layout.unit, name)
    if number is None or number > layout.pages:
        return "transient", f"no {name}"
    fd = None
    try:
        if abs_path is not None:
            assert sig is not None
            try:
                fd = _open_checked(abs_path, sig)
            except _Changed:
                return "changed", None
            except OSError as exc:
                return "changed", _one_line(f"cannot open: {exc.strerror}")
            source = fd
        else:
            try:
                source = os.open(cache.pdf_path(h), os.O_RDONLY | os.O_CLOEXEC)
            except OSError as exc:
                return "transient", _one_line(f"no conversion: {exc.strerror}")
        try:
            op = {"op": "page", "index": number - 1, "dpi": dpi}
            answer = _confined(op, source, _domain(abs_path or owner), deadline, timeout)
        finally:
            if source != fd:
                os.close(source)
        if len(answer) == 2 and isinstance(answer[0], str):
            return answer
        reply, blobs = answer
        if fd is not None and _signature(os.fstat(fd)) != sig:
            return "changed", None
        error = reply.get("error")
        if error is None:
            if len(blobs) != 1 or not blobs[0].startswith(b"\x89PNG\r\n\x1a\n"):
                return "crashed", "the renderer's answer was out of protocol"
            path = cache.png_path(h, dpi, name)
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            save_file(path, blobs[0])
            return "ok", None
        path = cache.error_path(h, dpi, name)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        save_file(path, error.encode("utf-8"))
        return "failed", error
    finally:
        if fd is not None:
            os.close(fd)


def _render_page(source: str, index: int, dpi: float) -> bytes:
    import pymupdf

    doc = _open_pdf(source)
    try:
        try:
            page = doc.load_page(index)
        except Exception as exc:
            raise RenderError(f"cannot read page {index + 1}: {_one_line(str(exc))}") from exc
        rect = page.rect
        zoom = fit_zoom(rect.width, rect.height, dpi)
        pix = page.get_pixmap(matrix=pymupdf.Matrix(zoom, zoom), alpha=False)
        used = round(zoom * 72.0, 1)
        pix.set_dpi(int(round(used)), int(round(used)))
        data: bytes = pix.tobytes("png")
        return data
    finally:
        doc.close()


def _memory_cap_mb() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return -1 if soft == resource.RLIM_INFINITY else soft // (1024 * 1024)


def _ready() -> None:
    """A no-op: makes sure a worker process is up."""


def _init_worker(memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with suppress(OSError):
        os.nice(5)
    with suppress(ImportError):
        import pymupdf  # noqa: F401  (once per worker, not per page)


# -- the daemon side


@dataclass(frozen=True)
class RenderedPage:
    """One file of ``.render/<rel>/`` as a reader sees it."""

    rel: str
    name: str
    freshness: Freshness
    source_hash: str | None  # the content it was made from
    current_hash: str | None
    data: bytes | None  # None: not rendered (yet); see error
    error: str | None = None
    dpi: float | None = None
    width: int = 0
    height: int = 0
    size: int = 0  # the image's bytes (also when ``data`` was not read)

    @property
    def locator(self) -> str:
        number = int(self.name.split("-")[1].split(".")[0]) if self.name != ERROR_UNIT else 0
        kind = "slide" if self.name.startswith("slide-") else "page"
        return f"{self.rel}#{kind}={number}" if number else f"{self.rel}#render"

    def xattrs(self) -> dict[str, str]:
        out = {
            "freshness": str(self.freshness),
            "source": self.rel,
            "source_hash": self.source_hash,
            "current_hash": self.current_hash,
            "locator": self.locator,
            "parser": RENDERER,
            "error": self.error,
        }
        if self.width:
            out["size"] = f"{self.width}x{self.height}"
            if self.dpi is not None:
                out["dpi"] = f"{self.dpi:g}"
        return {k: v for k, v in out.items() if v is not None}


@dataclass
class _Job:
    done: trio.Event
    status: str = ""
    error: str | None = None


class Renderer:
    """Lazily renders and caches ``.render`` pages for one workspace.

    Every method runs in the trio thread; the slow parts (stat checks,
    conversions, renders) run in threads and worker processes.  Jobs run
    as trio system tasks, so a reader that stops waiting (a stale view
    served after ``stale_wait``) leaves the render to finish for the next
    reader."""

    def __init__(
        self,
        engine: WorkspaceAPI,
        history: HistoryAPI,
        dpi: float = DEFAULT_DPI,
        *,
        workers: int = WORKERS,
        memory_mb: int = MEMORY_MB,
        convert_timeout: float = CONVERT_TIMEOUT,
        page_timeout: float = PAGE_TIMEOUT,
    ) -> None:
        self.engine = engine
        self.history = history  # older contents of a file (older_hashes)
        self.dpi = clamp_dpi(dpi)
        self.cache = RenderCache(Path(engine.store_dir) / "render")
        self.memory_mb = memory_mb
        self.convert_timeout, self.page_timeout = convert_timeout, page_timeout
        self._limiter = trio.CapacityLimiter(workers)
        self._unbounded = trio.CapacityLimiter(math.inf)
        self._jobs: dict[tuple[str, ...], _Job] = {}
        self._ctx: trio_parallel.WorkerContext | None = None
        self._ctx_ready: trio.Event | None = None
        self._transient: dict[tuple[str, ...], tuple[float, str]] = {}  # key -> (when, error)
        self._older: dict[tuple[str, str | None], tuple[float, list[Hash]]] = {}
        self._layouts: dict[str, Layout] = {}  # by hash: a stored layout never changes
        # Timeouts and crashes, by (hash, "layout") and (hash, dpi, name).
        self._failed: dict[tuple[str, ...], str] = {}

    def page_errors(self, h: str) -> dict[str, str]:
        """Every page of content ``h`` that could not be rendered, and why."""
        out = self.cache.page_errors(h, self.dpi)
        dpi = f"{self.dpi:g}"
        for key, error in self._failed.items():
            if len(key) == 3 and key[0] == h and key[1] == dpi:
                out[key[2]] = error
        return dict(sorted(out.items()))

    def stored_layout(self, h: str) -> Layout | None:
        failed = self._failed.get((h, "layout"))
        if failed is not None:
            return Layout(h, "page", 0, failed)
        layout = self._layouts.get(h)
        if layout is None:
            layout = self.cache.layout(h)
            if layout is not None:
                self._layouts[h] = layout
                while len(self._layouts) > MEMO_SIZE:
                    self._layouts.pop(next(iter(self._layouts)))
        elif not self.cache.has_layout(h):
            # Removed from the cache (rm -r .swfs/render): made again.
            self._layouts.pop(h, None)
            return None
        return layout

    # -- hashes

    def current_hash(self, rel: str) -> Hash | None:
        """The file's recorded hash; None while it holds bytes not recorded
        yet (``settled``): no image is current then, the last recorded
        content's is stale."""
        state = self.engine.file_state(RelPath(rel))
        if state is None or not self.engine.settled(RelPath(rel)):
            return None
        return state.hash

    def older_hashes(self, rel: str, current: str | None) -> list[Hash]:
        """Earlier contents of ``rel``, newest first: what a stale page is.
        Kept a moment: ``ls -l`` asks once per page."""
        key = (rel, current)
        hit = self._older.get(key)
        now = time.monotonic()
        if hit is not None and now - hit[0] < MEMO_TTL:
            return hit[1]
        out = self._older_hashes(rel, current)
        self._older[key] = (now, out)
        while len(self._older) > MEMO_SIZE:
            self._older.pop(next(iter(self._older)))
        return out

    def _older_hashes(self, rel: str, current: str | None) -> list[Hash]:
        seen: set[str] = set() if current is None else {current}
        out: list[Hash] = []
        for v in reversed(list(self.history.versions(RelPath(rel)))):
            if v.hash not in seen:
                seen.add(v.hash)
                out.append(v.hash)
        return out

    # -- layouts

    def cached_layout(
        self, rel: str, h: Hash | None | bool = True
    ) -> tuple[Layout | None, Freshness, Hash | None]:
        """The layout to list for ``rel`` without any work: the current
        content's, else the newest earlier one's (stale), else none.  ``h``:
        the file's present hash, if the caller has it."""
        if h is True or h is False:
            h = self.current_hash(rel)
        if h is not None:
            layout = self.stored_layout(h)
            if layout is not None:
                return layout, Freshness.FAILED if layout.error else Freshness.CURRENT, h
        for old in self.older_hashes(rel, h)[:8]:
            layout = self.stored_layout(old)
            if layout is not None and not layout.error:
                return layout, Freshness.STALE, h
        return None, Freshness.PENDING, h

    async def layout(
        self, rel: str, wait: float
    ) -> tuple[Layout | None, Freshness, Hash | None, str | None]:
        """The layout of ``rel``'s current content, made if needed (waiting
        up to ``wait`` seconds; then what ``cached_layout`` has), and the
        error of a layout that could not be made and is not stored (no
        LibreOffice, the file changed meanwhile)."""
        layout, fresh, h = self.cached_layout(rel)
        if fresh in (Freshness.CURRENT, Freshness.FAILED) or h is None:
            return layout, fresh, h, None
        job = self._start(("layout", rel, h), partial(self._make_layout, rel, h))
        with trio.move_on_after(wait):
            await job.done.wait()
        layout, fresh, h = self.cached_layout(rel)
        error = None
        if job.done.is_set() and fresh is not Freshness.CURRENT:
            error = job.error
        return layout, fresh, h, error or self.transient_error(rel, h)

    def transient_error(self, rel: str, h: str | None) -> str | None:
        hit = self._transient.get(("layout", rel, h or ""))
        return hit[1] if hit is not None and time.monotonic() - hit[0] < 30 else None

    async def _make_layout(self, rel: str, h: Hash) -> tuple[str, str | None]:
        # -- shared cache hooks (swfs.store.sharedcache): made once for all workspaces
        names = ["layout.json", "source.pdf"] if extension(rel) in ROUTES else ["layout.json"]
        if await self._from_shared(h, names):
            return "ok", None
        status, error = await self._make_layout_here(rel, h)
        if status == "ok":
            await self._to_shared(h, names)
        return status, error

    async def _from_shared(self, h: str, names: list[str]) -> bool:
        """Whether the files ``names`` of content ``h`` came from the shared
        cache into this store's render cache (all of them, or none)."""
        shared = self.engine.shared_cache
        if shared is None:
            return False

        def fetch() -> bool:
            found = [shared.get_file(h, n) for n in names]
            if any(data is None for data in found):
                return False
            # layout.json last: it is what says the layout is there
            for n, data in sorted(
                zip(names, found, strict=True), key=lambda x: x[0] == "layout.json"
            ):
                path = self.cache.dir(h) / n
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                save_file(path, data or b"")
            return True

        try:
            return await trio.to_thread.run_sync(fetch)
        except (OSError, ValueError) as exc:
            log.warning("%s: a render from the shared cache could not be stored: %s", h, exc)
            return False

    async def _to_shared(self, h: str, names: list[str]) -> None:
        shared = self.engine.shared_cache
        if shared is None:
            return

        def publish() -> None:
            for n in names:
                data = (self.cache.dir(h) / n).read_bytes()
                if n == "layout.json" and "error" in json.loads(data):
                    return  # a failure is this workspace's own
                shared.put_file(h, n, data)

        try:
            await trio.to_thread.run_sync(publish)
        except (OSError, ValueError) as exc:  # the cache is an optimisation: never fatal
            log.warning("%s: cannot publish a render of %s: %s", shared.describe(), h, exc)

    async def _make_layout_here(self, rel: str, h: Hash) -> tuple[str, str | None]:
        for _ in range(3):
            sig = await self._signature(rel, h)
            if sig is None:
                return "changed", None
            status, error = await self._run(
                self.convert_timeout,
                f"converting {rel}",
                layout_job,
                self._src_path(rel),
                h,
                sig,
                str(self.cache.root),
                self.convert_timeout,
            )
            if status != "changed":
                if status in ("transient", "timeout", "crashed"):
                    self._transient[("layout", rel, h)] = (time.monotonic(), error or status)
                    while len(self._transient) > 4096:
                        self._transient.pop(next(iter(self._transient)))
                if status in ("timeout", "crashed"):
                    # Not stored (a busy machine may have caused it), but
                    # remembered while the daemon runs.
                    self._failed[(h, "layout")] = error or status
                return status, error
        return "changed", None

    def _src_path(self, rel: str) -> str:
        """Where ``rel``'s bytes are: SRC, or a staged layer's copy (swfs.staging)."""
        resolve = getattr(self.engine, "abspath", None)
        return str(resolve(rel)) if resolve is not None else str(self.engine.src / rel)

    async def _signature(self, rel: str, h: str) -> Signature | None:
        """The stat signature of ``rel`` when it still holds content ``h``
        (rechecked with the engine when it moved); None otherwise."""
        path = self._src_path(rel)

        def check() -> Signature | None:
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                return None
            if not self.engine.is_unchanged(RelPath(rel), st):
                # Through the write protocol: a file being written through
                # the mount is the writer's to record, never a torn version.
                states: list[FileState | None] = []
                self.engine.writes.check_behind(
                    rel, lambda r: states.append(self.engine.check_file(r))
                )
                if not states or states[0] is None or states[0].hash != h:
                    return None
                try:
                    st = os.stat(path, follow_symlinks=False)
                except OSError:
                    return None
            return _signature(st)

        return await trio.to_thread.run_sync(check)

    # -- pages

    def cached_page(
        self, rel: str, name: str, *, whole: bool = True, h: Hash | None | bool = True
    ) -> RenderedPage:
        """What reading ``.render/<rel>/<name>`` shows now, without any work:
        the current content's image, its error, the newest earlier image
        (stale), or a pending page (no image).  ``whole=False`` (a listing's
        attributes): the image's size and dimensions, not its bytes.  ``h``:
        the file's present hash, if the caller has it."""
        if h is True or h is False:
            h = self.current_hash(rel)
        if h is not None:
            found = self.cache.png(h, self.dpi, name, whole=whole)
            if found is not None:
                return self._page(rel, name, Freshness.CURRENT, h, h, found, whole)
            error = self._failed.get((h, f"{self.dpi:g}", name))
            if error is None:
                error = self.cache.page_error(h, self.dpi, name)
            if error is not None:
                return RenderedPage(rel, name, Freshness.FAILED, h, h, None, error)
        for old in self.older_hashes(rel, h)[:8]:
            found = self.cache.png(old, self.dpi, name, whole=whole)
            if found is not None:
                return self._page(rel, name, Freshness.STALE, old, h, found, whole)
        return RenderedPage(rel, name, Freshness.PENDING, None, h, None)

    def _page(
        self,
        rel: str,
        name: str,
        fresh: Freshness,
        made: str,
        h: str | None,
        found: tuple[int, bytes],
        whole: bool,
    ) -> RenderedPage:
        size, data = found
        width, height, dpi = png_info(data)
        return RenderedPage(
            rel,
            name,
            fresh,
            made,
            h,
            data if whole else None,
            dpi=dpi,
            width=width,
            height=height,
            size=size,
        )

    async def page(self, rel: str, name: str, stale_wait: float) -> RenderedPage | None:
        """Render ``name`` of ``rel``'s current content if it is not cached.

        A page never rendered is waited for (each job has its own time
        limit); one with an earlier image waits ``stale_wait`` seconds, then
        that image is served, marked stale, while the render goes on.
        None: ``rel``'s current content has no such unit."""
        have = self.cached_page(rel, name)
        if have.freshness in (Freshness.CURRENT, Freshness.FAILED):
            return have
        prior = have if have.freshness is Freshness.STALE else None
        h = have.current_hash
        if h is None:
            return prior
        job = self._start(
            ("want", h, f"{self.dpi:g}", name), partial(self._ensure_page, rel, Hash(h), name)
        )
        with trio.move_on_after(stale_wait if prior is not None else math.inf):
            await job.done.wait()
        if not job.done.is_set():
            return prior
        if job.status == "absent":
            return None
        out = self.cached_page(rel, name)
        if out.freshness in (Freshness.CURRENT, Freshness.FAILED):
            return out
        # Nothing stored for this content: it changed while being rendered
        # (the engine has the new hash by now), or no LibreOffice.
        reason = job.error or "the file changed while it was being rendered"
        return prior or RenderedPage(rel, name, Freshness.FAILED, h, h, None, reason)

    async def _ensure_page(self, rel: str, h: Hash, name: str) -> tuple[str, str | None]:
        """The layout of content ``h``, then page ``name`` of it: 'absent'
        when it has no such page (or no pages at all: see error.md)."""
        layout, fresh, now, error = await self.layout(rel, math.inf)
        if now != h:
            return "changed", None
        if fresh is Freshness.FAILED:
            return "absent", None if layout is None else layout.error
        if layout is None or fresh is not Freshness.CURRENT:
            return "failed", error or "the page count could not be taken"
        number = unit_number(layout.unit, name)
        if number is None or number > layout.pages:
            return "absent", None
        job = self._start(
            ("page", h, f"{self.dpi:g}", name), partial(self._make_page, rel, h, name)
        )
        await job.done.wait()
        return job.status, job.error

    async def _make_page(self, rel: str, h: Hash, name: str) -> tuple[str, str | None]:
        # -- shared cache hooks, as for the layout
        names = [f"{_dpi_dir(self.dpi)}/{name}"]
        if await self._from_shared(h, names):
            return "ok", None
        status, error = await self._make_page_here(rel, h, name)
        if status == "ok":
            await self._to_shared(h, names)
        return status, error

    async def _make_page_here(self, rel: str, h: Hash, name: str) -> tuple[str, str | None]:
        office = extension(rel) in ROUTES
        if office and not await trio.to_thread.run_sync(self.cache.pdf_path(h).exists):
            # The conversion was removed from the cache (by hand): make it again.
            status, error = await self._make_layout(rel, h)
            if status != "ok":
                return status, error
        for _ in range(3):
            sig = None
            if not office:
                sig = await self._signature(rel, h)
                if sig is None:
                    return "changed", None
            status, error = await self._run(
                self.page_timeout,
                f"rendering {rel} {name}",
                render_job,
                None if office else self._src_path(rel),
                h,
                sig,
                str(self.cache.root),
                self.dpi,
                name,
                self.page_timeout,
                self._src_path(rel),
            )
            if status in ("timeout", "crashed"):
                # Not stored: a busy machine may have caused it.  Remembered
                # while the daemon runs, so a hostile page costs one worker.
                self._failed[(h, f"{self.dpi:g}", name)] = error or status
            if status != "changed":
                return status, error
        return "changed", None

    # -- jobs

    def _start(
        self, key: tuple[str, ...], fn: Callable[[], Awaitable[tuple[str, str | None]]]
    ) -> _Job:
        job = self._jobs.get(key)
        if job is None:
            job = self._jobs[key] = _Job(trio.Event())
            trio.lowlevel.spawn_system_task(self._job, key, job, fn, name=f"render {key}")
        return job

    async def _job(
        self, key: tuple[str, ...], job: _Job, fn: Callable[[], Awaitable[tuple[str, str | None]]]
    ) -> None:
        try:
            job.status, job.error = await fn()
        except Exception as exc:  # a bug here must fail this job, never the daemon
            log.exception("render job %s failed", key)
            job.status, job.error = "failed", _one_line(f"{type(exc).__name__}: {exc}")
        finally:
            self._jobs.pop(key, None)
            job.done.set()

    async def _context(self) -> trio_parallel.WorkerContext:
        if self._ctx is None:
            if self._ctx_ready is None:
                self._ctx_ready = trio.Event()
                trio.lowlevel.spawn_system_task(self._hold_context, name="render workers")
            await self._ctx_ready.wait()
        assert self._ctx is not None
        return self._ctx

    async def _hold_context(self) -> None:
        init = partial(_init_worker, self.memory_mb * 1024 * 1024)
        try:
            async with trio_parallel.open_worker_context(init=init, idle_timeout=600) as ctx:
                self._ctx = ctx
                assert self._ctx_ready is not None
                self._ctx_ready.set()
                await trio.sleep_forever()
        except Exception:
            log.exception("render workers ended")
        finally:
            self._ctx = None
            self._ctx_ready = None

    async def _run(
        self, limit: float, what: str, fn: Callable[..., tuple[str, str | None]], *args: Any
    ) -> tuple[str, str | None]:
        """``fn(*args)`` in a worker process, at most ``limit`` seconds of it."""
        ctx = await self._context()
        async with self._limiter:
            # Starting a worker process (seconds on a busy machine) does not
            # count against the job's limit: a no-op first, then the job on
            # the worker it left idle.
            with trio.move_on_after(WORKER_START):
                with suppress(trio_parallel.BrokenWorkerError):
                    await ctx.run_sync(_ready, kill_on_cancel=True, limiter=self._unbounded)
            # The worker times the job itself (its confined child is killed
            # at the limit, the worker lives on); this bound only catches a
            # worker that hangs.
            with trio.move_on_after(limit + WORKER_GRACE):
                try:
                    return await ctx.run_sync(
                        fn, *args, kill_on_cancel=True, limiter=self._unbounded
                    )
                except trio_parallel.BrokenWorkerError as exc:
                    reason = describe_broken(exc, "crashed")
                    log.warning("%s: render process died: %s", what, reason)
                    return (
                        "crashed",
                        f"render process died ({reason}; memory cap {self.memory_mb} MB)",
                    )
        log.warning("%s: timed out after %g s", what, limit)
        return "timeout", f"timed out after {limit:g} s"
