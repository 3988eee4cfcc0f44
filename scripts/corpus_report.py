"""What swfs makes of a folder of real documents, per format.

    python scripts/corpus_report.py DIR        (make corpus CORPUS=DIR)

DIR is copied to a temporary folder (DIR itself is never written), indexed
by the engine as ``swfs index`` does (worker processes, no FUSE), and a
table is printed per extension: files, current, failed, unsupported,
pending (never settled: a parse that did not end in a verdict), units, units
with no text (empty or only whitespace after the header), then the failure
reasons grouped.

Every failed file is then opened with its format's own reference library
(openpyxl for xlsx/xlsm, xlrd for xls, python-docx, python-pptx, pymupdf for
pdf, where a PDF of no pages is not read, odfpy for OpenDocument), each in a
child process with a time and memory limit.  A failed file that the
reference library reads is a defect, and so is a file left pending; both are
listed at the end, and the exit status is 1 when there is one.  Unsupported
files the reference library reads are listed too, for information.

The script imports swfs from the environment, so the same report can be run
against another checkout: ``PYTHONPATH=/path/to/checkout python
scripts/corpus_report.py DIR``.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REFERENCE_TIMEOUT = 120.0
REFERENCE_MEMORY = 2 * 1024 * 1024 * 1024

# extension -> (library, check run in a child process; prints a one-line summary)
REFERENCES: dict[str, tuple[str, str]] = {
    ".xlsx": (
        "openpyxl",
        "import openpyxl\n"
        "wb = openpyxl.load_workbook(PATH, read_only=True)\n"
        "n = sum(1 for ws in wb.worksheets for row in ws.iter_rows(values_only=True)"
        " for v in row if v is not None)\n"
        "print(f'{len(wb.sheetnames)} sheets, {n} cells')",
    ),
    ".xls": (
        "xlrd",
        "import xlrd\n"
        "wb = xlrd.open_workbook(PATH)\n"
        "n = sum(1 for s in wb.sheets() for r in range(s.nrows) for v in s.row_values(r)"
        " if v not in ('', None))\n"
        "print(f'{wb.nsheets} sheets, {n} cells')",
    ),
    ".docx": (
        "python-docx",
        "import docx\n"
        "d = docx.Document(PATH)\n"
        "n = sum(len(p.text) for p in d.paragraphs)"
        " + sum(len(c.text) for t in d.tables for r in t.rows for c in r.cells)\n"
        "print(f'{len(d.paragraphs)} paragraphs, {n} chars')",
    ),
    ".pptx": (
        "python-pptx",
        "import pptx\n"
        "p = pptx.Presentation(PATH)\n"
        "n = sum(len(s.text_frame.text) for sl in p.slides for s in sl.shapes"
        " if s.has_text_frame)\n"
        "print(f'{len(p.slides)} slides, {n} chars')",
    ),
    ".pdf": (
        "pymupdf",
        "import pymupdf\n"
        "d = pymupdf.open(PATH)\n"
        # An encrypted file opens with no pages: MuPDF has not read it either.
        "if d.needs_pass:\n"
        "    raise SystemExit('encrypted: password required')\n"
        "if d.page_count == 0:\n"
        "    raise SystemExit('no pages read')\n"
        "n = sum(len(page.get_text()) for page in d)\n"
        "print(f'{d.page_count} pages, {n} chars')",
    ),
}
# odfpy parses with defusedxml: an entity or DTD in a part is refused, not read.
_ODFPY = (
    "odfpy",
    "from odf import teletype\n"
    "from odf.opendocument import load\n"
    "n = len(teletype.extractText(load(PATH).body))\n"
    "print(f'{n} chars')",
)
for _ext in (".odt", ".ods", ".odp", ".ott", ".ots", ".otp"):
    REFERENCES[_ext] = _ODFPY
REFERENCES[".xlsm"] = REFERENCES[".xlsx"]
REFERENCES[".docm"] = REFERENCES[".docx"]
REFERENCES[".pptm"] = REFERENCES[".pptx"]


@dataclass
class Row:
    files: int = 0
    current: int = 0
    failed: int = 0
    unsupported: int = 0
    pending: int = 0
    units: int = 0
    empty_units: int = 0
    reasons: collections.Counter[str] = field(default_factory=collections.Counter)
    failed_paths: list[tuple[str, str]] = field(default_factory=list)
    unsupported_paths: list[str] = field(default_factory=list)
    pending_paths: list[str] = field(default_factory=list)


def extension(rel: str) -> str:
    ext = os.path.splitext(rel)[1].lower()
    return ext or "(none)"


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (REFERENCE_MEMORY, REFERENCE_MEMORY))


def reference_reads(path: Path, ext: str) -> tuple[str, bool, str] | None:
    """(library, read it?, its summary or error), or None without a reference."""
    if ext not in REFERENCES:
        return None
    library, code = REFERENCES[ext]
    program = f"PATH = {str(path)!r}\n{code}\n"
    try:
        done = subprocess.run(
            [sys.executable, "-c", program],
            capture_output=True,
            text=True,
            timeout=REFERENCE_TIMEOUT,
            preexec_fn=_limit_child,
        )
    except subprocess.TimeoutExpired:
        return library, False, f"timed out after {REFERENCE_TIMEOUT:g} s"
    if done.returncode == 0:
        return library, True, done.stdout.strip()
    lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
    return library, False, (lines[-1] if lines else f"exit status {done.returncode}")[:160]


def index(copy: Path, workers: int) -> tuple[dict[str, Row], float]:
    import trio

    from swfs.engine import Engine
    from swfs.views.parsework import WorkerLimits
    from swfs.workspace import Config

    config = Config(limits=WorkerLimits(workers=workers), rescan_interval=0)
    rows: dict[str, Row] = collections.defaultdict(Row)
    t0 = time.monotonic()
    with Engine.open(copy, config=config) as eng:
        trio.run(eng.drain)
        secs = time.monotonic() - t0
        with eng.workspace.store.read() as txn:
            files = list(eng.workspace.store.iter_files(txn))
        for rel, rec in sorted(files):
            row = rows[extension(rel)]
            row.files += 1
            record = eng.workspace.store.get_parse(rec.hash, rec.parser) if rec.parser else None
            status = record.status if record else ("unsupported" if not rec.parser else "")
            if record is not None and status == "ok":
                row.current += 1
                for _name, _locator, text in eng.workspace.store.parse_units(rec.hash, rec.parser or ""):
                    row.units += 1
                    if not text.strip():
                        row.empty_units += 1
            elif record is not None and status == "failed":
                row.failed += 1
                reason = record.error or "(no reason)"
                row.reasons[reason] += 1
                row.failed_paths.append((rel, reason))
            elif status == "unsupported":
                row.unsupported += 1
                reason = (record.error if record else None) or "no parser for this type"
                row.reasons[f"unsupported: {reason}"] += 1
                row.unsupported_paths.append(rel)
            else:
                row.pending += 1
                row.pending_paths.append(rel)
    return rows, secs


def report(corpus: Path, workers: int, *, keep: bool) -> int:
    work = Path(tempfile.mkdtemp(prefix="swfs-corpus-"))
    copy = work / "corpus"
    shutil.copytree(corpus, copy, symlinks=True, ignore=shutil.ignore_patterns(".swfs"))
    try:
        rows, secs = index(copy, workers)
        out = print
        total = Row()
        out(f"# swfs corpus report: {corpus} ({sum(r.files for r in rows.values())} files)")
        out("")
        out(f"indexed in {secs:.1f} s with {workers} workers")
        out("")
        out(
            "| format | files | current | failed | unsupported | pending | units "
            "| units without text |"
        )
        out("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for ext in sorted(rows, key=lambda e: (-rows[e].files, e)):
            r = rows[ext]
            out(
                f"| {ext} | {r.files} | {r.current} | {r.failed} | {r.unsupported} "
                f"| {r.pending} | {r.units} | {r.empty_units} |"
            )
            for name in (
                "files",
                "current",
                "failed",
                "unsupported",
                "pending",
                "units",
                "empty_units",
            ):
                setattr(total, name, getattr(total, name) + getattr(r, name))
        out(
            f"| **all** | {total.files} | {total.current} | {total.failed} "
            f"| {total.unsupported} | {total.pending} | {total.units} | {total.empty_units} |"
        )
        out("")
        out("## Reasons")
        out("")
        for ext in sorted(rows):
            for reason, count in rows[ext].reasons.most_common():
                out(f"- {ext} x{count}: {reason}")
        if not any(r.reasons for r in rows.values()):
            out("none: every file is current")
        out("")
        out("## Left pending (no verdict: a defect whatever the reference says)")
        out("")
        defects = 0
        for ext in sorted(rows):
            for rel in rows[ext].pending_paths:
                defects += 1
                out(f"- {rel}")
        if not total.pending:
            out("none")
        out("")
        out("## Failed in swfs, read by the format's reference library")
        out("")
        pending = defects
        checked = 0
        for ext in sorted(rows):
            for rel, reason in rows[ext].failed_paths:
                verdict = reference_reads(copy / rel, ext)
                if verdict is None:
                    continue
                checked += 1
                library, ok, detail = verdict
                if ok:
                    defects += 1
                    out(f"- {rel}: {library} reads it ({detail}); swfs: {reason}")
        if defects == pending:
            out(f"none ({checked} failed files checked against a reference library)")
        out("")
        out("## Unsupported in swfs, read by the format's reference library (information)")
        out("")
        readable = 0
        for ext in sorted(rows):
            for rel in rows[ext].unsupported_paths:
                verdict = reference_reads(copy / rel, ext)
                if verdict is not None and verdict[1]:
                    readable += 1
                    out(f"- {rel}: {verdict[0]} reads it ({verdict[2]})")
        if not readable:
            out("none")
        if keep:
            out(f"\nthe indexed copy is kept in {copy}")
        return 1 if defects else 0
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("corpus", type=Path, help="folder of documents (read, never written)")
    parser.add_argument("--workers", type=int, default=max(1, os.cpu_count() or 1))
    parser.add_argument("--keep", action="store_true", help="keep the indexed copy")
    args = parser.parse_args(argv)
    if not args.corpus.is_dir():
        print(f"corpus_report: {args.corpus}: not a directory", file=sys.stderr)
        return 2
    return report(args.corpus.resolve(), args.workers, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
