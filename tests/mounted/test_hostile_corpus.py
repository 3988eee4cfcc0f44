"""A workspace of hostile documents, mounted: each ends ``failed`` with a
reason (or ``unsupported``, or ``current`` where parsing it is the honest
outcome), within the parse timeout, with the daemon's and workers' memory
under a cap.  Then hostile names: each works through the mount and appears
correctly under ``.parsed`` and ``.versions``.

Outcomes expected, per kind (the table ``CORPUS`` below is the reference):

| kind | file | outcome |
| --- | --- | --- |
| truncated PDF | truncated.pdf | current, marked partial |
| fuzzed PDFs (5 seeds) | fuzzed-N.pdf | failed or current |
| cyclic page tree | cyclic.pdf | failed ("cycle") |
| encrypted PDF | secret.pdf | failed ("encrypted") |
| empty PDF | empty.pdf | failed |
| garbage named .pdf | garbage.pdf | failed |
| xlsx named .pdf | zipped.pdf | current (sniffed as xlsx) or failed |
| 5000 empty pages | pages-5000.pdf | current (5000 units) or failed |
| entity bomb in xlsx | laughs.xlsx | failed ("DOCTYPE") |
| entity bomb in docx | laughs.docx | failed |
| entity bomb in pptx | laughs.pptx | failed |
| external entity (XXE) in xlsx | xxe.xlsx | failed; /etc/passwd never in .parsed |
| ratio bombs | bomb.xlsx/.docx/.pptx | failed ("zip bomb") |
| declared-size bomb | huge.docx | failed ("zip bomb") |
| encrypted zip members | zipcrypto.xlsx | failed |
| OLE-encrypted OOXML | locked.xlsx/.docx | failed ("encrypted") |
| an OLE header under an OOXML name | bare-ole.docx | failed ("not a valid") |
| OLE container with no workbook in it | old.xls | failed ("unreadable spreadsheet") |
| CSV named .xlsx | fake.xlsx | failed ("not a zip") |
| random bytes .docx | noise.docx | failed |
| PDF named .docx | pdf.docx | current (sniffed as PDF, its text) or failed |
| truncated zip | cut.xlsx | failed |
| sheet claiming A1:XFD1048576 | sparse-huge.xlsx | failed ("too many cells") or current |
| 300 000 cells | cells.xlsx | current or failed |
| deep nesting docx/pptx/xlsx | deep.* | failed or current |
| deeply nested JSON / HTML | deep.json / deep.html | current or failed |
| path-traversal member | traversal.docx | failed or current; nothing written outside |
| symlink member | symlink.xlsx | failed or current; link never followed |
| epub with internal subset | guide.epub | failed |
| broken notebook | broken.ipynb | failed |
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests import docgen
from tests.mountutil import (
    Mount,
    descendants,
    errno_of,
    needs_fuse,
    report_count,
    swfs,
    vm_rss_kib,
    workspace,
)

pytestmark = [pytest.mark.mount, needs_fuse]

DAEMON_CAP_KIB = 500 * 1024
WORKER_CAP_KIB = 1100 * 1024  # --parse-memory 1024 (MiB) plus slack for accounting

FAILED = frozenset({"failed"})
EITHER = frozenset({"failed", "current"})
UNSUPPORTED = frozenset({"unsupported"})

# -- new generators ------------------------------------------------------------------------


def _laughs(root: str, ns: str, inner: str) -> str:
    entities = "".join(
        f' <!ENTITY l{n} "{("&l" + (str(n - 1) if n > 1 else "") + ";") * 10}">\n'
        for n in range(1, 10)
    )
    return (
        f'<?xml version="1.0"?>\n<!DOCTYPE {root} [\n <!ENTITY l "lol">\n{entities}]>\n'
        f"<{root} {ns}>{inner}</{root}>"
    )


def laughs_docx(d: Path) -> Path:
    path = d / "laughs.docx"
    docgen._write_docx(path, "<w:p><w:r><w:t>ok</w:t></w:r></w:p>")
    bomb = _laughs(
        "w:document",
        f'xmlns:w="{docgen._WML}"',
        "<w:body><w:p><w:r><w:t>&l9;</w:t></w:r></w:p></w:body>",
    )
    docgen._replace_member(path, "word/document.xml", bomb)
    return path


def laughs_pptx(d: Path) -> Path:
    path = docgen.deep_pptx(d, depth=1)
    bomb = _laughs(
        "p:sld",
        'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"',
        "<p:cSld><p:spTree>&l9;</p:spTree></p:cSld>",
    )
    docgen._replace_member(path, "ppt/slides/slide1.xml", bomb)
    return path.rename(d / "laughs.pptx")


def xxe_xlsx(d: Path) -> Path:
    path = d / "xxe.xlsx"
    strings = (
        '<?xml version="1.0"?>\n<!DOCTYPE sst [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
        f'<sst xmlns="{docgen._SML}" count="1" uniqueCount="1"><si><t>&x;</t></si></sst>'
    )
    docgen._write_xlsx(
        path, docgen._sheet('<row r="1"><c r="A1" t="s"><v>0</v></c></row>'), strings=strings
    )
    return path


def pdf_pages(d: Path, pages: int = 5000) -> Path:
    kids = " ".join(f"{n + 3} 0 R" for n in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
    ] + [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * pages
    path = d / f"pages-{pages}.pdf"
    path.write_bytes(docgen._pdf_from_objects(objects))
    return path


def zipped_pdf(d: Path) -> Path:
    path = docgen.simple_xlsx(d, [["a", 1]])
    return path.rename(d / "zipped.pdf")


def pdf_docx(d: Path) -> Path:
    path = d / "pdf.docx"
    path.write_bytes(docgen.pdf_bytes(1, fact_page=1))
    return path


def cut_xlsx(d: Path) -> Path:
    path = docgen.simple_xlsx(d, [["a", 1], ["b", 2]])
    data = path.read_bytes()
    out = d / "cut.xlsx"
    out.write_bytes(data[: len(data) // 2])
    path.unlink()
    return out


def zipcrypto_xlsx(d: Path) -> Path:
    """Every member flagged as encrypted (general purpose bit 0)."""
    path = docgen.simple_xlsx(d, [["secret", 1]])
    data = bytearray(path.read_bytes())
    for sig, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        pos = data.find(sig)
        while pos != -1:
            data[pos + flag_at] |= 1
            pos = data.find(sig, pos + 4)
    out = d / "zipcrypto.xlsx"
    out.write_bytes(bytes(data))
    path.unlink()
    return out


def sparse_huge_xlsx(d: Path) -> Path:
    path = d / "sparse-huge.xlsx"
    sheet = (
        f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{docgen._SML}">'
        '<dimension ref="A1:XFD1048576"/><sheetData>'
        '<row r="1"><c r="A1"><v>1</v></c></row>'
        '<row r="1048576"><c r="XFD1048576"><v>2</v></c></row>'
        "</sheetData></worksheet>"
    )
    docgen._write_xlsx(path, sheet)
    return path


def cells_xlsx(d: Path) -> Path:
    path = docgen.million_cell_xlsx(d, rows=30_000, cols=10)
    return path.rename(d / "cells.xlsx")


def deep_json(d: Path, depth: int = 200_000) -> Path:
    path = d / "deep.json"
    path.write_text("[" * depth + "]" * depth)
    return path


def deep_html(d: Path, depth: int = 50_000) -> Path:
    path = d / "deep.html"
    path.write_text("<html><body>" + "<div>" * depth + "core" + "</div>" * depth + "</body></html>")
    return path


def traversal_docx(d: Path) -> Path:
    path = d / "traversal.docx"
    docgen._write_docx(path, "<w:p><w:r><w:t>traversal</w:t></w:r></w:p>")
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("../../../../../../tmp/swfs-traversal-escaped.txt", "escaped\n")
        z.writestr("/abs-swfs-traversal.txt", "absolute\n")
        z.writestr("word/../../../swfs-traversal-up.txt", "up\n")
    return path


def symlink_xlsx(d: Path) -> Path:
    path = docgen.simple_xlsx(d, [["linked", 1]])
    with zipfile.ZipFile(path) as z:
        parts = [(info, z.read(info)) for info in z.infolist()]
    out = d / "symlink.xlsx"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for info, content in parts:
            if info.filename == "xl/sharedStrings.xml" or info.filename.endswith("sheet1.xml"):
                link = zipfile.ZipInfo(info.filename)
                link.external_attr = (stat.S_IFLNK | 0o777) << 16
                link.create_system = 3
                z.writestr(link, "/etc/passwd")
            else:
                z.writestr(info, content)
    path.unlink()
    return out


def broken_ipynb(d: Path) -> Path:
    path = d / "broken.ipynb"
    path.write_text('{"cells": [{"cell_type": "code", "source": ')
    return path


def _named(make: Callable[[Path], Path], name: str) -> Callable[[Path], Path]:
    def run(d: Path) -> Path:
        return make(d).rename(d / name)

    return run


def _bytes(name: str, data: bytes) -> Callable[[Path], Path]:
    def run(d: Path) -> Path:
        (d / name).write_bytes(data)
        return d / name

    return run


def _ole_encrypted(d: Path, name: str) -> Path:
    """A password-protected OOXML file as Office writes it: an OLE file
    holding the EncryptionInfo and EncryptedPackage streams."""
    return docgen.ole_file(
        d, name, {"EncryptionInfo": b"\x04\x00\x04\x00", "EncryptedPackage": b"z"}
    )


# name -> (generator, acceptable outcomes, a word the failure reason must contain or "")
CORPUS: dict[str, tuple[Callable[[Path], Path], frozenset[str], str]] = {
    "truncated.pdf": (docgen.truncated_pdf, frozenset({"current"}), ""),
    **{
        f"fuzzed-{s}.pdf": ((lambda d, s=s: docgen.fuzzed_pdf(d, s, flips=40)), EITHER, "")
        for s in range(5)
    },
    "cyclic.pdf": (docgen.cyclic_pdf, FAILED, "cycle"),
    "secret.pdf": (docgen.encrypted_pdf, FAILED, "encrypted"),
    "empty.pdf": (_bytes("empty.pdf", b""), FAILED, ""),
    "garbage.pdf": (_bytes("garbage.pdf", b"not a pdf at all\n" * 64), FAILED, "PDF"),
    "zipped.pdf": (zipped_pdf, EITHER, ""),
    "pages-5000.pdf": (pdf_pages, EITHER, ""),
    "laughs.xlsx": (docgen.entity_bomb_xlsx, FAILED, "DOCTYPE"),
    "laughs.docx": (laughs_docx, FAILED, ""),
    "laughs.pptx": (laughs_pptx, FAILED, ""),
    "xxe.xlsx": (xxe_xlsx, FAILED, ""),
    "bomb.xlsx": ((lambda d: docgen.ratio_bomb(d, "bomb.xlsx")), FAILED, "zip bomb"),
    "bomb.docx": ((lambda d: docgen.ratio_bomb(d, "bomb.docx")), FAILED, "zip bomb"),
    "bomb.pptx": ((lambda d: docgen.ratio_bomb(d, "bomb.pptx")), FAILED, "zip bomb"),
    "huge.docx": (docgen.declared_size_bomb, FAILED, "zip bomb"),
    "zipcrypto.xlsx": (zipcrypto_xlsx, FAILED, ""),
    "locked.xlsx": ((lambda d: _ole_encrypted(d, "locked.xlsx")), FAILED, "encrypted"),
    "locked.docx": ((lambda d: _ole_encrypted(d, "locked.docx")), FAILED, "encrypted"),
    "bare-ole.docx": ((lambda d: docgen.ole_named(d, "bare-ole.docx")), FAILED, "not a valid"),
    "old.xls": (
        _bytes("old.xls", docgen.OLE_MAGIC + bytes(4000) + b"xls"),
        FAILED,
        "unreadable spreadsheet",
    ),
    "fake.xlsx": (docgen.non_zip_xlsx, FAILED, "zip"),
    "noise.docx": (docgen.random_docx, FAILED, ""),
    "pdf.docx": (pdf_docx, EITHER, ""),
    "cut.xlsx": (cut_xlsx, FAILED, ""),
    "sparse-huge.xlsx": (sparse_huge_xlsx, EITHER, ""),
    "cells.xlsx": (cells_xlsx, EITHER, ""),
    "deep.docx": (docgen.deep_docx, EITHER, ""),
    "deep.pptx": (docgen.deep_pptx, EITHER, ""),
    "deep.xlsx": (docgen.deep_xlsx, EITHER, ""),
    "deep.json": (deep_json, EITHER, ""),
    "deep.html": (deep_html, EITHER, ""),
    "traversal.docx": (traversal_docx, EITHER, ""),
    "symlink.xlsx": (symlink_xlsx, EITHER, ""),
    "guide.epub": (
        (lambda d: docgen.epub_file(d, chapter_doctype='<!DOCTYPE html [<!ENTITY b "b">]>')),
        FAILED,
        "",
    ),
    "broken.ipynb": (broken_ipynb, FAILED, ""),
}


class MemorySampler:
    """Peak VmRSS of the daemon and (separately) of any one of its workers."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.daemon = 0
        self.worker = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop.wait(0.2):
            self.daemon = max(self.daemon, vm_rss_kib(self.pid))
            for child in descendants(self.pid):
                self.worker = max(self.worker, vm_rss_kib(child))

    def __enter__(self) -> MemorySampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_hostile_documents_fail_cleanly(request: pytest.FixtureRequest) -> None:
    made: dict[str, Path] = {}

    def populate(src: Path) -> None:
        for name, (make, _, _) in CORPUS.items():
            path = make(src)
            assert path.name == name, (path, name)
            made[name] = path

    traversal_targets = [
        Path("/tmp/swfs-traversal-escaped.txt"),
        Path("/abs-swfs-traversal.txt"),
    ]
    for t in traversal_targets:
        t.unlink(missing_ok=True)
    extra = ("--parse-timeout", "20", "--parse-memory", "1024", "--workers", "2")
    with workspace(extra, populate=populate, sync=False) as m:
        traversal_targets.append(m.src.parent / "swfs-traversal-up.txt")
        with MemorySampler(m.proc.pid) as mem:
            started = time.monotonic()
            swfs("sync", m.mnt, timeout=240)
            took = time.monotonic() - started
        assert m.alive(), m.log()[-3000:]
        outcomes: dict[str, str] = {}
        problems = []
        for name, (_, allowed, word) in CORPUS.items():
            native = m.mnt / name
            fresh = os.getxattr(native, "user.sw.freshness").decode()
            outcomes[name] = fresh
            if fresh not in allowed:
                problems.append(f"{name}: {fresh}, expected {sorted(allowed)}")
                continue
            if fresh == "failed":
                error = m.mnt / ".parsed" / name / "error.md"
                reason = error.read_text(errors="replace")
                if not reason.strip() or (word and word.lower() not in reason.lower()):
                    problems.append(f"{name}: failure reason {reason[-200:]!r} lacks {word!r}")
            elif fresh == "current":
                units = list((m.mnt / ".parsed" / name).iterdir())
                if not units:
                    problems.append(f"{name}: current but no units")
        assert problems == [], "\n".join(problems)
        # A wrongly named file parsed by content says what the content says.
        if outcomes["pdf.docx"] == "current":
            text = "".join(u.read_text() for u in (m.mnt / ".parsed" / "pdf.docx").iterdir())
            assert docgen.FACT in text
        # Nothing from outside leaked into text, nothing was written outside.
        passwd = Path("/etc/passwd").read_bytes()[:32]
        for name in ("xxe.xlsx", "symlink.xlsx"):
            for unit in (m.mnt / ".parsed" / name).iterdir():
                assert passwd not in unit.read_bytes(), unit
        for t in traversal_targets:
            assert not t.exists(), t
        # The daemon still serves, and memory stayed under the caps.
        (m.mnt / "after.txt").write_text("the daemon goes on\n")
        swfs("sync", m.mnt, timeout=60)
        assert "goes on" in (m.mnt / ".parsed" / "after.txt" / "content.txt").read_text()
        counts: dict[str, int] = {}
        for fresh in outcomes.values():
            counts[fresh] = counts.get(fresh, 0) + 1
        report_count(request.config, f"hostile documents {json.dumps(counts)}", len(outcomes))
        report_count(request.config, "hostile corpus: sync seconds (not asserted)", int(took))
        report_count(request.config, "hostile corpus: peak daemon VmRSS KiB", mem.daemon)
        report_count(request.config, "hostile corpus: peak worker VmRSS KiB", mem.worker)
        detail = {k: v for k, v in outcomes.items() if CORPUS[k][1] != FAILED}
        report_count(request.config, f"hostile corpus: non-fixed outcomes {json.dumps(detail)}", 0)
        assert mem.daemon < DAEMON_CAP_KIB
        assert mem.worker < WORKER_CAP_KIB


@pytest.mark.timeout(90)
def test_same_bytes_under_another_extension_get_their_own_verdict() -> None:
    with workspace(populate=lambda src: docgen.ole_named(src, "locked.docx")) as m:
        assert os.getxattr(m.mnt / "locked.docx", "user.sw.freshness") == b"failed"
        (m.mnt / "old.doc").write_bytes((m.mnt / "locked.docx").read_bytes())
        swfs("sync", m.mnt)
        # Alone, an OLE .doc is handed to LibreOffice (which finds nothing to
        # read in these bytes), never called encrypted.
        freshness = os.getxattr(m.mnt / "old.doc", "user.sw.freshness")
        if shutil.which("soffice") is None:
            assert freshness == b"unsupported"
        else:
            assert freshness == b"failed"
            error = os.getxattr(m.mnt / ".parsed" / "old.doc", "user.sw.error")
            assert b"LibreOffice could not read" in error
            assert b"encrypted" not in error


# -- hostile names -------------------------------------------------------------------------

NAMES = [
    "with space.txt",
    "new\nline.txt",
    os.fsdecode(b"caf\xe9-latin1.txt"),
    os.fsdecode(b"\xff\xfe-bytes.txt"),
    "..foo.txt",
    "a..b.txt",
    "...",
    "-dash.txt",
    "sub/.parsed/inner.txt",
    "sub/.versions/inner.txt",
    "sub/.review/inner.txt",
    "sub/.swfs/inner.txt",
    "x" * 251 + ".txt",
    "d" * 255 + "/" + "y" * 251 + ".txt",
    "tab\there.txt",
    "quote\"'`$(x).txt",
    "back\\slash.txt",
    "emoji-\U0001f600.txt",
]


def _check_name(m: Mount, rel: str, text: str) -> list[str]:
    problems = []
    parsed = m.mnt / ".parsed" / rel / "content.txt"
    try:
        body = parsed.read_text(errors="replace")
        if text not in body:
            problems.append(f"{rel!r}: .parsed lacks the text")
    except OSError as exc:
        problems.append(f"{rel!r}: .parsed: {exc.strerror}")
    try:
        versions = os.listdir(m.mnt / ".versions" / rel)
        if len(versions) != 1:
            problems.append(f"{rel!r}: {len(versions)} versions")
        else:
            v = m.mnt / ".versions" / rel / versions[0]
            if v.read_bytes() != text.encode():
                problems.append(f"{rel!r}: .versions bytes differ")
            if os.getxattr(v, "user.sw.hash") != os.getxattr(m.mnt / rel, "user.sw.hash"):
                problems.append(f"{rel!r}: version hash differs")
    except OSError as exc:
        problems.append(f"{rel!r}: .versions: {exc.strerror}")
    return problems


@pytest.mark.timeout(120)
def test_hostile_names_work_through_the_mount() -> None:
    def populate(src: Path) -> None:
        # The same names behind the mount's back, before it starts.
        (src / "pre").mkdir()
        for i, rel in enumerate(NAMES):
            p = src / "pre" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f"pre {i}\n")

    with workspace(populate=populate) as m:
        (m.mnt / "new").mkdir()
        for i, rel in enumerate(NAMES):
            p = m.mnt / "new" / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(f"new {i}\n")
            assert (m.src / "new" / rel).read_text() == f"new {i}\n"
        swfs("sync", m.mnt)
        problems = []
        for i, rel in enumerate(NAMES):
            problems += _check_name(m, f"pre/{rel}", f"pre {i}\n")
            problems += _check_name(m, f"new/{rel}", f"new {i}\n")
        assert problems == [], "\n".join(problems)
        # Reserved names at depth are ordinary directories, listed as such.
        assert sorted(os.listdir(m.mnt / "new" / "sub")) == [
            ".parsed",
            ".review",
            ".swfs",
            ".versions",
        ]
        assert (m.mnt / ".parsed" / "new" / "sub" / ".parsed" / "inner.txt").is_dir()
        # At the root they are refused, and nothing lands in SRC.
        for name in (".parsed", ".review", ".versions"):
            assert errno_of(lambda n=name: (m.mnt / n).mkdir()) in (
                errno.EEXIST,
                errno.EPERM,
                errno.EROFS,
            )
            assert errno_of(lambda n=name: os.rename(m.mnt / "new" / "-dash.txt", m.mnt / n)) in (
                errno.EEXIST,
                errno.EPERM,
                errno.EROFS,
                errno.EISDIR,
            )
            assert not (m.src / name).exists()
        assert errno_of(lambda: (m.mnt / ".swfs").mkdir()) in (errno.EPERM, errno.EACCES)
        assert (m.mnt / "new" / "-dash.txt").exists()
        swfs("check", m.mnt)
