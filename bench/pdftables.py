"""What PDF table detection costs: the PDF parser's pages/s with tables on and off.

``python -m bench.pdftables [--pages N] [--rounds N]`` parses three generated
documents in this process (no workers, no store), alternating the setting in
paired rounds, and prints the median pages/s of each and the change (the
median over rounds of the on/off ratio within a round):

* ``text``: pages of running text as the workspace benchmark writes them
  (``gen.make_pdf``); no drawings, so detection costs one scan of the content
  stream for path operators;
* ``ruled``: each page a paragraph, a 6x4 table drawn with ruling lines, and
  another paragraph; detection lists the drawings and extracts words again;
* ``mixed``: one page in ten is a ``ruled`` page.

Switching tables off is ``parsers.pdf.FIND_TABLES = False``.  Pages/s are per
CPU second of this process (the parse is single-threaded): on a machine
shared with other work, wall-clock figures of two settings measured a second
apart differ by more than the effect measured here.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench import gen


def ruled_page(doc: object, number: int) -> None:
    import pymupdf

    assert isinstance(doc, pymupdf.Document)
    page = doc.new_page()
    page.insert_text((50, 60), f"Table page {number}\nFigures by region follow.", fontsize=10)
    rows = [["Region", "Q1", "Q2", "Q3"]] + [
        [f"Region {r}", str(100 + r + number), str(200 + r), str(300 + r)] for r in range(5)
    ]
    left, top, width, height = 50.0, 100.0, 110.0, 20.0
    right, bottom = left + 4 * width, top + len(rows) * height
    for r in range(len(rows) + 1):
        page.draw_line((left, top + r * height), (right, top + r * height))
    for c in range(5):
        page.draw_line((left + c * width, top), (left + c * width, bottom))
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            page.insert_text((left + c * width + 4, top + (r + 1) * height - 6), text, fontsize=9)
    page.insert_text((50, bottom + 30), "Text after the table.", fontsize=10)


def make_docs(directory: Path, pages: int) -> dict[str, Path]:
    import pymupdf

    rng = random.Random(7)
    out = {"text": directory / "text.pdf", "ruled": directory / "ruled.pdf"}
    out["text"].write_bytes(gen.make_pdf(rng, pages, "text"))
    doc = pymupdf.open()
    for n in range(pages):
        ruled_page(doc, n)
    doc.save(str(out["ruled"]))
    mixed = pymupdf.open("pdf", gen.make_pdf(rng, pages, "mixed"))
    for n in range(0, pages, 10):
        mixed.delete_page(n)
        tmp = pymupdf.open()
        ruled_page(tmp, n)
        mixed.insert_pdf(tmp, start_at=n)
    out["mixed"] = directory / "mixed.pdf"
    mixed.save(str(out["mixed"]))
    return out


def pages_per_s(path: Path, *, tables: bool) -> float:
    from parsers import pdf
    from parsers._base import ParseOptions
    from parsers.registry import file_info

    pdf.FIND_TABLES = tables
    info = file_info(str(path), path.name)
    t0 = time.process_time()
    units = pdf.PdfParser().parse(str(path), info, ParseOptions())
    return len(units) / (time.process_time() - t0)


def measure(pages: int, rounds: int) -> dict[str, tuple[float, float, float]]:
    """Per document: median pages/s with tables off, on, and the median over
    rounds of (on / off) within a round (robust to drift on a busy machine)."""
    results: dict[str, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        docs = make_docs(Path(tmp), pages)
        for name, path in docs.items():
            pages_per_s(path, tables=True)  # warm up: imports, file cache
            off: list[float] = []
            on: list[float] = []
            for r in range(rounds):
                order = (False, True) if r % 2 == 0 else (True, False)
                for tables in order:
                    (on if tables else off).append(pages_per_s(path, tables=tables))
            ratio = statistics.median(b / a for a, b in zip(off, on, strict=True))
            results[name] = (statistics.median(off), statistics.median(on), ratio)
    from parsers import pdf

    pdf.FIND_TABLES = True
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"{'document':<8} {'tables off':>12} {'tables on':>12} {'change':>8}")
    for name, (off, on, ratio) in measure(args.pages, args.rounds).items():
        print(f"{name:<8} {off:>8.0f} p/s {on:>8.0f} p/s {100 * (ratio - 1):>+7.0f}%")


if __name__ == "__main__":
    main()
