"""Office documents whose picture is only a link to a URL, and the tools to
tell whether the link was followed: a solid red PNG to link to, the share
of pure-red pixels in a rendered page, and an HTTP listener that records
every connection (and answers with the red PNG).

Built at test time, in the shape the real programs write them:

* ``.odt``: ``draw:image`` with ``xlink:href`` to the URL (a linked,
  not embedded, graphic, as Writer saves one);
* ``.docx``: a picture whose ``a:blip`` has ``r:link`` to a relationship
  with ``TargetMode="External"`` (Word's "Insert > Link to File");
* ``.rtf``: an ``INCLUDEPICTURE "url" \\d`` field (Word's linked picture
  in RTF, ``\\d``: do not store the picture's data);
* ``.pptx`` and ``.xlsx``: a python-pptx deck or openpyxl workbook with a
  picture, its relationship made external and its ``r:embed`` an
  ``r:link`` (PowerPoint's and Excel's linked picture).
"""

from __future__ import annotations

import contextlib
import io
import re
import socket
import threading
import zipfile
from pathlib import Path
from xml.sax.saxutils import quoteattr

RED = (255, 0, 0)
_R_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_IMAGE_REL = _R_NS + "/image"


def red_png(width: int = 512, height: int = 512) -> bytes:
    """A solid pure-red PNG (shown at about 13 cm where a document gives no size)."""
    import pymupdf

    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, width, height), False)
    pix.set_rect(pix.irect, RED)
    data: bytes = pix.tobytes("png")
    return data


def _is_red(color: bytes) -> bool:
    # Nearly pure: LibreOffice's PDF export stores a big picture as JPEG,
    # which turns (255, 0, 0) into (254, 0, 0).  Nothing else in these
    # documents comes near: black text on white.
    r, g, b = color[:3]
    return r >= 230 and g <= 30 and b <= 30 and color[3:] in (b"", b"\xff")


def red_share(png: bytes) -> float:
    """The share of a PNG's pixels that are (nearly) pure red."""
    import pymupdf

    pix = pymupdf.Pixmap(png)
    counts: dict[bytes, int] = pix.color_count(colors=True)
    red = sum(n for color, n in counts.items() if _is_red(color))
    total = pix.width * pix.height
    return red / total if total else 0.0


# -- documents -----------------------------------------------------------------------------


def _zip(members: dict[str, str | bytes], *, first_stored: str | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        if first_stored is not None:
            z.writestr(zipfile.ZipInfo(first_stored), members[first_stored], zipfile.ZIP_STORED)
        for name, data in members.items():
            if name != first_stored:
                z.writestr(name, data)
    return out.getvalue()


def odt(url: str) -> bytes:
    """OpenDocument text with one 12 x 12 cm picture linked to ``url``."""
    manifest = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0"'
        ' manifest:version="1.2">'
        '<manifest:file-entry manifest:full-path="/"'
        ' manifest:media-type="application/vnd.oasis.opendocument.text"/>'
        '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
        "</manifest:manifest>"
    )
    content = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<office:document-content xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0"'
        ' xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'
        ' xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"'
        ' xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"'
        ' xmlns:xlink="http://www.w3.org/1999/xlink" office:version="1.2">'
        "<office:body><office:text><text:p>Linked picture below.</text:p><text:p>"
        '<draw:frame draw:name="Picture" text:anchor-type="as-char"'
        ' svg:width="12cm" svg:height="12cm">'
        f'<draw:image xlink:href={quoteattr(url)} xlink:type="simple"'
        ' xlink:show="embed" xlink:actuate="onLoad"/>'
        "</draw:frame></text:p></office:text></office:body></office:document-content>"
    )
    return _zip(
        {
            "mimetype": "application/vnd.oasis.opendocument.text",
            "META-INF/manifest.xml": manifest,
            "content.xml": content,
        },
        first_stored="mimetype",
    )


_EMU_12CM = 12 * 360000


def docx(url: str) -> bytes:
    """A Word document with one 12 x 12 cm picture linked (``r:link``) to ``url``."""
    types = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels"'
        ' ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/word/document.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
        "</Types>"
    )
    root_rels = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{_R_NS}/officeDocument" Target="word/document.xml"/>'
        "</Relationships>"
    )
    doc_rels = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
        f'<Relationship Id="rIdPic" Type="{_IMAGE_REL}" Target={quoteattr(url)}'
        ' TargetMode="External"/>'
        "</Relationships>"
    )
    size = f'cx="{_EMU_12CM}" cy="{_EMU_12CM}"'
    document = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        '<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
        f' xmlns:r="{_R_NS}"'
        ' xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing"'
        ' xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"'
        ' xmlns:pic="http://schemas.openxmlformats.org/drawingml/2006/picture">'
        "<w:body><w:p><w:r><w:t>Linked picture below.</w:t></w:r></w:p>"
        "<w:p><w:r><w:drawing>"
        f'<wp:inline distT="0" distB="0" distL="0" distR="0"><wp:extent {size}/>'
        '<wp:docPr id="1" name="Picture 1"/>'
        '<a:graphic><a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/picture">'
        '<pic:pic><pic:nvPicPr><pic:cNvPr id="1" name="linked.png"/><pic:cNvPicPr/></pic:nvPicPr>'
        '<pic:blipFill><a:blip r:link="rIdPic"/><a:stretch><a:fillRect/></a:stretch>'
        "</pic:blipFill>"
        f'<pic:spPr><a:xfrm><a:off x="0" y="0"/><a:ext {size}/></a:xfrm>'
        '<a:prstGeom prst="rect"><a:avLst/></a:prstGeom></pic:spPr>'
        "</pic:pic></a:graphicData></a:graphic></wp:inline>"
        "</w:drawing></w:r></w:p>"
        '<w:sectPr><w:pgSz w:w="11906" w:h="16838"/></w:sectPr></w:body></w:document>'
    )
    return _zip(
        {
            "[Content_Types].xml": types,
            "_rels/.rels": root_rels,
            "word/document.xml": document,
            "word/_rels/document.xml.rels": doc_rels,
        }
    )


def rtf(url: str) -> bytes:
    """RTF with an ``INCLUDEPICTURE "url" \\d`` field (a linked, unstored picture)."""
    escaped = url.replace("\\", "\\\\").replace("{", "\\{").replace("}", "\\}")
    return (
        "{\\rtf1\\ansi\\deff0{\\fonttbl{\\f0 Helvetica;}}"
        "\\pard Linked picture below.\\par"
        "\\pard{\\field{\\*\\fldinst { INCLUDEPICTURE "
        f'"{escaped}" \\\\* MERGEFORMATINET \\\\d }}}}{{\\fldrslt {{}}}}}}\\par}}'
    ).encode("ascii")


def _linked(package: bytes, rels_pattern: str, part_pattern: str, url: str) -> bytes:
    """A package whose image relationships (in ``.rels`` members matching
    ``rels_pattern``) point at ``url`` as external, and whose ``r:embed``
    (in members matching ``part_pattern``) are ``r:link``; media dropped."""
    out = io.BytesIO()
    image_rel = re.compile(r'<Relationship [^>]*Type="' + re.escape(_IMAGE_REL) + r'"[^>]*/>')

    def external(match: re.Match[str]) -> str:
        rid = re.search(r'Id="([^"]+)"', match.group(0))
        assert rid is not None
        return (
            f'<Relationship Id="{rid.group(1)}" Type="{_IMAGE_REL}" Target={quoteattr(url)}'
            ' TargetMode="External"/>'
        )

    changed = 0
    with (
        zipfile.ZipFile(io.BytesIO(package)) as src,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst,
    ):
        for name in src.namelist():
            data = src.read(name)
            if re.fullmatch(r".*/media/[^/]+", name):
                continue
            if re.fullmatch(rels_pattern, name):
                text, n = image_rel.subn(external, data.decode("utf-8"))
                changed += n
                data = text.encode("utf-8")
            elif re.fullmatch(part_pattern, name):
                data = data.replace(b"r:embed=", b"r:link=")
            dst.writestr(name, data)
    assert changed, "no image relationship to make external"
    return out.getvalue()


def pptx(url: str) -> bytes:
    """A one-slide deck whose 6 x 6 in picture is linked (``r:link``) to ``url``."""
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()  # 10 x 7.5 in
    slide = deck.slides.add_slide(deck.slide_layouts[6])
    box = slide.shapes.add_textbox(Inches(0.5), Inches(0.1), Inches(9), Inches(0.5))
    box.text_frame.text = "Linked picture below."
    slide.shapes.add_picture(
        io.BytesIO(red_png(8, 8)), Inches(2), Inches(0.75), Inches(6), Inches(6)
    )
    buf = io.BytesIO()
    deck.save(buf)
    return _linked(
        buf.getvalue(), r"ppt/slides/_rels/slide\d+\.xml\.rels", r"ppt/slides/slide\d+\.xml", url
    )


def xlsx(url: str) -> bytes:
    """A workbook whose sheet has a picture (about 12 x 12 cm) linked to ``url``."""
    from openpyxl import Workbook
    from openpyxl.drawing.image import Image

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    sheet["A1"] = "Linked picture below."
    picture = Image(io.BytesIO(red_png(8, 8)))
    picture.width = picture.height = 450  # pixels at 96 dpi: about 12 cm
    sheet.add_image(picture, "B3")
    buf = io.BytesIO()
    book.save(buf)
    return _linked(
        buf.getvalue(),
        r"xl/drawings/_rels/drawing\d+\.xml\.rels",
        r"xl/drawings/drawing\d+\.xml",
        url,
    )


BUILDERS = {".odt": odt, ".docx": docx, ".rtf": rtf, ".pptx": pptx, ".xlsx": xlsx}


# -- the listener --------------------------------------------------------------------------


class HttpListener:
    """A TCP listener on 127.0.0.1 that records every connection it gets and
    answers an HTTP request with ``body`` (a PNG), so a program that fetches
    a linked picture from it gets one to show.  (tests/mounted/
    test_security_sandbox.py's ``Listener`` records without answering.)"""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.got: list[bytes] = []
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def requests(self) -> list[bytes]:
        with self._lock:
            return list(self.got)

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    head = conn.recv(4096)
                except OSError:
                    head = b""
                with self._lock:
                    self.got.append(head or b"(connected)")
                if head:
                    reply = (
                        b"HTTP/1.0 200 OK\r\nContent-Type: image/png\r\n"
                        + f"Content-Length: {len(self.body)}\r\nConnection: close\r\n\r\n".encode()
                        + self.body
                    )
                    with contextlib.suppress(OSError):
                        conn.sendall(reply)

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        self.sock.close()


def write_root_only_png(folder: Path) -> Path:
    """A red PNG only root can read: 0600, in a 0700 folder."""
    folder.mkdir(mode=0o700)
    folder.chmod(0o700)
    path = folder / "red.png"
    path.write_bytes(red_png())
    path.chmod(0o600)
    return path
