"""The corpus report (``make corpus CORPUS=DIR``): its table, its reasons, and
the check that no file swfs fails is one the format's own library reads.

A parser injected through ``SWFS_EXTRA_PARSERS`` refuses one good ``.docx``,
which python-docx reads: the report must name it as a defect and exit 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from parsers._base import FileInfo, ParseFailed, ParseOptions, Parser, Unit

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "corpus_report.py"


class RefusingParser(Parser):
    """Fails one file that is perfectly readable: what the report must catch."""

    id = "refuses-on-purpose"
    version = 1
    priority = 100.0
    names: ClassVar[tuple[str, ...]] = ("refused.docx",)

    def accepts(self, info: FileInfo) -> bool:
        return info.name.endswith(self.names)

    def parse(self, path: str, info: FileInfo, options: ParseOptions) -> list[Unit]:
        raise ParseFailed("refused on purpose")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    import docx

    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    for name in ("good.docx", "sub/refused.docx"):
        document = docx.Document()
        document.add_paragraph(f"text of {name}")
        document.save(str(root / name))
    (root / "blank.txt").write_text("  \n\n")
    (root / "notes.txt").write_text("some notes\n")
    (root / "blob.bin").write_bytes(bytes(range(256)) * 4)
    return root


def run(corpus: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(corpus), "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        check=False,
    )


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.mark.timeout(600)
def test_report_names_a_failed_file_the_reference_library_reads(corpus: Path) -> None:
    before = _snapshot(corpus)
    done = run(corpus, SWFS_EXTRA_PARSERS=f"{__name__}:RefusingParser")
    assert done.returncode == 1, done.stderr
    out = done.stdout
    # files, current, failed, unsupported, pending, units, units without text
    assert "| .docx | 2 | 1 | 1 | 0 | 0 | 1 | 0 |" in out
    assert "| .txt | 2 | 2 | 0 | 0 | 0 | 2 | 1 |" in out
    assert "| .bin | 1 | 0 | 0 | 1 | 0 | 0 | 0 |" in out
    assert "| **all** | 5 | 3 | 1 | 1 | 0 | 3 | 1 |" in out
    assert "- .docx x1: refused on purpose" in out
    assert "- sub/refused.docx: python-docx reads it" in out
    assert "good.docx: python-docx" not in out
    # The corpus is read, never written: no store, no changed byte.
    assert _snapshot(corpus) == before
    assert not (corpus / ".swfs").exists()


@pytest.mark.timeout(600)
def test_report_without_defects_exits_zero(corpus: Path) -> None:
    done = run(corpus, SWFS_EXTRA_PARSERS="")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| .docx | 2 | 2 | 0 | 0 | 0 | 2 | 0 |" in done.stdout
    assert "none (0 failed files checked against a reference library)" in done.stdout


def test_report_refuses_a_missing_folder(tmp_path: Path) -> None:
    done = run(tmp_path / "nowhere")
    assert done.returncode == 2
    assert "not a directory" in done.stderr


def test_a_pdf_of_no_pages_is_not_read_by_the_reference(tmp_path: Path) -> None:
    """An encrypted PDF opens in MuPDF with no pages: before, the report
    counted that as read ("0 pages, 0 chars") and swfs's "encrypted" as a
    defect."""
    import pymupdf

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import corpus_report
    finally:
        sys.path.remove(str(SCRIPT.parent))
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "locked text")
    path = tmp_path / "locked.pdf"
    doc.save(str(path), encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="pw", owner_pw="pw")
    doc.close()
    verdict = corpus_report.reference_reads(path, ".pdf")
    assert verdict is not None
    library, read, detail = verdict
    assert (library, read) == ("pymupdf", False)
    assert "encrypted" in detail
    # No program we have writes a PDF of no pages (MuPDF refuses to save
    # one): hand-built, an empty page tree.
    empty = tmp_path / "empty.pdf"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    body = b"%PDF-1.4\n"
    offsets = []
    for n, obj in enumerate(objects, start=1):
        offsets.append(len(body))
        body += b"%d 0 obj\n%s\nendobj\n" % (n, obj)
    xref = len(body)
    body += b"xref\n0 3\n0000000000 65535 f \n"
    body += b"".join(b"%010d 00000 n \n" % off for off in offsets)
    body += b"trailer\n<< /Size 3 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    empty.write_bytes(body)
    assert corpus_report.reference_reads(empty, ".pdf") == ("pymupdf", False, "no pages read")
    plain = tmp_path / "plain.pdf"
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "open text")
    doc.save(str(plain))
    doc.close()
    assert corpus_report.reference_reads(plain, ".pdf") == ("pymupdf", True, "1 pages, 10 chars")


def test_opendocument_reference_is_odfpy(tmp_path: Path) -> None:
    from tests import sheetgen

    if sheetgen.SOFFICE is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import corpus_report
    finally:
        sys.path.remove(str(SCRIPT.parent))
    text = tmp_path / "memo.txt"
    text.write_text("memo for the reference\n")
    odt = sheetgen.soffice_convert(text, "odt", tmp_path / "lo")
    assert corpus_report.reference_reads(odt, ".odt") == ("odfpy", True, "22 chars")
    broken = tmp_path / "broken.odt"
    broken.write_bytes(odt.read_bytes()[:200])
    verdict = corpus_report.reference_reads(broken, ".odt")
    assert verdict is not None
    assert verdict[:2] == ("odfpy", False)
