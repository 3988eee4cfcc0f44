"""``.render`` through a real mount: PNG images of PDF pages and slides.

* A PDF page read with ``cat``, ``cp``, ``open().read()`` and ``file`` is a
  PNG of the page's size at 110 dpi, pixel for pixel what PyMuPDF renders
  from the file directly, and not another page's image.
* A pptx slide (python-pptx) is a 1100 x 825 PNG (10 x 7.5 in at 110 dpi)
  that matches the slide in a PDF LibreOffice makes of the deck and not the
  other slide.
* Names match ``.parsed``: ``page-0002.png`` beside ``page-0002.md``.
* A corrupt PDF has ``error.md`` naming the cause; the daemon lives on.
* After an edit the prior image is served marked ``stale`` (``--stale=serve``)
  and then the new one, ``current``.
* A user who cannot read a file cannot read its images.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mountutil import Mount, needs_fuse, run_as, swfs, unprivileged_ids, workspace

pytestmark = [pytest.mark.mount, pytest.mark.timeout(300), needs_fuse]

DPI = 110


def planted_pdf(path: Path, texts: list[str]) -> None:
    import pymupdf

    doc = pymupdf.open()
    for i, text in enumerate(texts):
        page = doc.new_page(width=612, height=792)
        page.insert_text((72, 120 + 40 * i), text, fontsize=28)
        page.draw_rect(pymupdf.Rect(72, 300, 300 + 50 * i, 400), color=(0, 0, 1), fill=(1, 0, 0))
    doc.save(str(path))
    doc.close()


def planted_pptx(path: Path, titles: list[str]) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()  # 10 x 7.5 in
    for title in titles:
        slide = deck.slides.add_slide(deck.slide_layouts[5])
        assert slide.shapes.title is not None
        slide.shapes.title.text = title
        box = slide.shapes.add_textbox(Inches(1), Inches(3), Inches(8), Inches(2))
        box.text_frame.text = f"Body of {title}"
    deck.save(str(path))


def planted_docx(path: Path) -> None:
    import docx

    doc = docx.Document()  # Letter, as python-docx's template has it
    doc.add_heading("Memo planted heading", level=1)
    doc.add_paragraph("First page body text.")
    doc.add_page_break()
    doc.add_paragraph("Second page planted paragraph " * 20)
    doc.save(str(path))


def planted_xlsx(path: Path) -> None:
    import xlsxwriter

    book = xlsxwriter.Workbook(str(path))
    sheet = book.add_worksheet("Budget")
    sheet.set_paper(1)  # Letter
    for row in range(30):
        sheet.write_row(row, 0, [f"Region {row}", row * 100, row * 1.5])
    book.close()


def ink(samples: bytes) -> int:
    """How many sampled bytes are dark: text or shapes on the page."""
    return sum(1 for b in samples[::5] if b < 128)


def direct_render(pdf: Path | bytes, index: int) -> tuple[int, int, bytes]:
    """(width, height, RGB samples) of a page rendered by PyMuPDF directly."""
    import pymupdf

    doc = pymupdf.open(stream=pdf, filetype="pdf") if isinstance(pdf, bytes) else pymupdf.open(pdf)
    pix = doc[index].get_pixmap(matrix=pymupdf.Matrix(DPI / 72, DPI / 72), alpha=False)
    out = (pix.width, pix.height, bytes(pix.samples))
    doc.close()
    return out


def decode_png(data: bytes) -> tuple[int, int, bytes]:
    import pymupdf

    pix = pymupdf.Pixmap(data)
    if pix.alpha:
        pix = pymupdf.Pixmap(pix, 0)
    return pix.width, pix.height, bytes(pix.samples)


def mean_diff(a: bytes, b: bytes) -> float:
    assert len(a) == len(b)
    step = 7  # a sample of the bytes is plenty
    total = sum(abs(x - y) for x, y in zip(a[::step], b[::step], strict=True))
    return total / max(1, len(a[::step]))


def soffice_pdf(pptx: Path, outdir: Path) -> Path:
    exe = shutil.which("soffice")
    if exe is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    profile = Path(tempfile.mkdtemp(prefix="render-test-profile-"))
    try:
        subprocess.run(
            [
                exe,
                f"-env:UserInstallation={profile.as_uri()}",
                "--headless",
                "--convert-to",
                "pdf",
                "--outdir",
                str(outdir),
                str(pptx),
            ],
            capture_output=True,
            timeout=180,
            check=True,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    return outdir / (pptx.stem + ".pdf")


def until(limit: float, fn: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if fn():
            return True
        time.sleep(0.2)
    return fn()


def rendered(m: Mount, rel: str, name: str) -> int:
    """How many images called ``name`` the render cache holds for ``rel``'s content."""
    h = xattr(m.mnt / rel, "hash")
    return sum(1 for _ in (m.src / ".swfs" / "render" / h[:2] / h).rglob(name))


def xattr(path: Path, name: str) -> str:
    return os.getxattr(path, f"user.sw.{name}").decode()


PDF_TEXTS = ["Alpha page planted ONE", "Bravo page planted TWO", "Charlie page planted THREE"]
SLIDES = ["Quarterly revenue north", "Hiring plan south"]


@pytest.fixture(scope="module")
def mounted() -> Iterator[Mount]:
    if shutil.which("soffice") is None:
        pytest.skip("LibreOffice (soffice) is not installed")

    def populate(src: Path) -> None:
        planted_pdf(src / "report.pdf", PDF_TEXTS)
        (src / "decks").mkdir()
        planted_pptx(src / "decks" / "plan.pptx", SLIDES)
        # A PDF header over garbage: a corrupt file as a broken download leaves it.
        (src / "broken.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(3000) + b"\n%%EOF\n")
        planted_docx(src / "memo.docx")
        planted_xlsx(src / "book.xlsx")
        planted_pdf(src / "private.pdf", ["Private planted text"])
        os.chmod(src / "private.pdf", 0o600)
        # A symlink to a PDF outside the workspace: never followed.
        planted_pdf(src.parent / "outside.pdf", ["Outside planted text"])
        (src / "link.pdf").symlink_to(src.parent / "outside.pdf")

    with workspace(["--stale=serve"], populate=populate) as m:
        yield m


def test_pdf_page_is_the_page(mounted: Mount) -> None:
    mnt = mounted.mnt
    folder = mnt / ".render" / "report.pdf"
    # The mount serves stale and pending views (--stale=serve): on a busy
    # machine the PDF's first layout may still be running.
    assert until(180, lambda: "pending.md" not in os.listdir(folder)), os.listdir(folder)
    names = sorted(os.listdir(folder))
    assert names == ["page-0001.png", "page-0002.png", "page-0003.png"]
    # Named like the parsed units: the same page under both trees.
    parsed = sorted(os.listdir(mnt / ".parsed" / "report.pdf"))
    assert [n.removesuffix(".md") for n in parsed] == [n.removesuffix(".png") for n in names]
    assert "Bravo page planted TWO" in (mnt / ".parsed/report.pdf/page-0002.md").read_text()

    # ls -l and stat look pages up without rendering them.
    listing = subprocess.run(["ls", "-l", str(folder)], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0
    assert os.stat(folder / "page-0003.png").st_size == 0
    assert rendered(mounted, "report.pdf", "page-0003.png") == 0

    page = folder / "page-0002.png"
    data = subprocess.run(["cat", str(page)], capture_output=True, check=True, timeout=120).stdout
    width, height, samples = decode_png(data)
    src_pdf = mounted.src / "report.pdf"
    want = direct_render(src_pdf, 1)
    assert (width, height) == want[:2] == (935, 1210)  # 8.5 x 11 in at 110 dpi
    assert samples == want[2]
    # Not some other page: page 1 looks different.
    other = direct_render(src_pdf, 0)
    assert samples != other[2]
    assert mean_diff(samples, other[2]) > 0.1

    # The other ways users read a file give the same bytes.
    assert page.read_bytes() == data
    copy = mounted.root / "copy.png"
    subprocess.run(["cp", str(page), str(copy)], check=True, timeout=60)
    assert copy.read_bytes() == data
    kind = subprocess.run(["file", "-b", str(page)], capture_output=True, text=True, timeout=60)
    assert "PNG image data, 935 x 1210" in kind.stdout
    assert os.stat(page).st_size == len(data)

    assert rendered(mounted, "report.pdf", "page-0002.png") == 1
    assert rendered(mounted, "report.pdf", "page-0003.png") == 0
    assert xattr(page, "freshness") == "current"
    assert xattr(page, "source") == "report.pdf"
    assert xattr(page, "source_hash") == xattr(mnt / "report.pdf", "hash")
    assert xattr(page, "locator") == "report.pdf#page=2"
    assert xattr(page, "size") == "935x1210"
    assert xattr(page, "dpi") == "110"
    assert mounted.alive()


def test_pptx_slide_is_the_slide(mounted: Mount) -> None:
    mnt = mounted.mnt
    folder = mnt / ".render" / "decks" / "plan.pptx"
    assert sorted(os.listdir(folder)) == ["slide-001.png", "slide-002.png"]
    assert sorted(os.listdir(mnt / ".parsed" / "decks" / "plan.pptx")) == [
        "slide-001.md",
        "slide-002.md",
    ]
    data = (folder / "slide-002.png").read_bytes()
    width, height, samples = decode_png(data)
    assert (width, height) == (1100, 825)
    assert xattr(folder / "slide-002.png", "locator") == "decks/plan.pptx#slide=2"

    out = mounted.root / "direct"
    out.mkdir()
    pdf = soffice_pdf(mounted.src / "decks" / "plan.pptx", out)
    mine = direct_render(pdf, 1)
    theirs = direct_render(pdf, 0)
    assert mine[:2] == (1100, 825)
    near, far = mean_diff(samples, mine[2]), mean_diff(samples, theirs[2])
    # The planted title and body of slide 2 are where slide 2 has them.
    assert near < 0.5, near
    assert far > 4 * max(near, 0.05), (near, far)


def test_docx_pages_and_xlsx_printed_pages(mounted: Mount) -> None:
    memo = mounted.mnt / ".render" / "memo.docx"
    assert sorted(os.listdir(memo)) == ["page-0001.png", "page-0002.png"]
    first = decode_png((memo / "page-0001.png").read_bytes())
    second = decode_png((memo / "page-0002.png").read_bytes())
    assert first[:2] == second[:2] == (935, 1210)
    assert ink(first[2]) > 50
    assert ink(second[2]) > 50
    assert mean_diff(first[2], second[2]) > 0.1
    assert xattr(memo / "page-0002.png", "locator") == "memo.docx#page=2"

    book = mounted.mnt / ".render" / "book.xlsx"
    assert os.listdir(book) == ["page-0001.png"]
    sheet = decode_png((book / "page-0001.png").read_bytes())
    assert sheet[:2] == (935, 1210)
    assert ink(sheet[2]) > 50


def test_corrupt_pdf_has_error_md(mounted: Mount) -> None:
    folder = mounted.mnt / ".render" / "broken.pdf"
    assert os.listdir(folder) == ["error.md"]
    text = (folder / "error.md").read_text()
    assert 'freshness="failed"' in text.splitlines()[0]
    assert "swfs could not render broken.pdf: damaged or not a PDF" in text
    assert "/proc/self" not in text
    assert not (folder / "page-0001.png").exists()
    assert mounted.alive()
    # The other files still render.
    assert (mounted.mnt / ".render/report.pdf/page-0001.png").read_bytes()[
        :8
    ] == b"\x89PNG\r\n\x1a\n"


def test_edit_serves_stale_then_current(mounted: Mount) -> None:
    mnt = mounted.mnt
    target = mnt / "edited.pdf"
    planted_pdf(target, ["Old planted words"])
    swfs("sync", mnt)
    page = mnt / ".render" / "edited.pdf" / "page-0001.png"
    old = page.read_bytes()
    old_hash = xattr(page, "source_hash")
    assert xattr(page, "freshness") == "current"

    new_pdf = mounted.root / "new.pdf"
    planted_pdf(new_pdf, ["Completely different planted words"])
    target.write_bytes(new_pdf.read_bytes())  # through the mount: a new version
    new_hash = xattr(target, "hash")
    assert new_hash != old_hash

    # --stale=serve: the prior image at once, marked stale, naming both hashes
    # (nothing renders the new content before a page of it is read).
    served = page.read_bytes()
    assert xattr(page, "freshness") == "stale"
    assert served == old
    assert xattr(page, "source_hash") == old_hash
    assert xattr(page, "current_hash") == new_hash
    # The render goes on without another read (xattrs never render).
    assert until(120, lambda: xattr(page, "freshness") == "current")
    want = direct_render(new_pdf, 0)
    assert decode_png(page.read_bytes())[2] == want[2]
    assert xattr(page, "source_hash") == new_hash
    assert decode_png(page.read_bytes())[2] != decode_png(old)[2]


def test_symlink_out_of_src_is_not_rendered(mounted: Mount) -> None:
    assert (mounted.mnt / "link.pdf").is_symlink()
    assert not (mounted.mnt / ".render" / "link.pdf").exists()
    assert "link.pdf" not in os.listdir(mounted.mnt / ".render")


def test_unreadable_file_is_refused(mounted: Mount) -> None:
    ids = unprivileged_ids()
    if ids is None:
        pytest.skip("cannot create an unprivileged user here")
    mnt = mounted.mnt
    private = mnt / ".render" / "private.pdf" / "page-0001.png"
    public = mnt / ".render" / "report.pdf" / "page-0001.png"
    assert run_as(ids, lambda: private.read_bytes()) == errno.EACCES
    assert run_as(ids, lambda: os.listdir(private.parent)) == errno.EACCES
    assert run_as(ids, lambda: public.read_bytes()) == 0
    # root still can, so the refusal is about permissions.
    assert private.read_bytes()[:4] == b"\x89PNG"
