"""Generated data sets: deterministic, cached in the work directory.

Every generator writes into ``<workdir>/data/<key>/`` where the key names the
parameters, and marks completion with ``<key>.done`` beside it, so a second run
with the same parameters reuses the data and an interrupted one starts over.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MiB = 1024 * 1024

# Words for generated text; lower-case ASCII so that they are safe inside XML.
_WORD_TEXT = (
    "budget revenue forecast margin quarter invoice supplier contract renewal audit "
    "policy compliance risk review summary draft final approved pending region north "
    "south east west project milestone delivery schedule baseline variance actual "
    "target headcount payroll expense capital operating cash flow balance asset "
    "liability equity customer churn retention pipeline lead proposal tender award "
    "vendor logistics inventory warehouse shipment order return refund discount price "
    "volume growth decline stable estimate model scenario assumption driver metric "
    "report memo minutes agenda meeting board committee legal counsel clause term "
    "notice payment schedule interest rate loan covenant tax filing deadline owner "
    "status update action item follow issue ticket release version change request "
    "design architecture service latency throughput capacity storage network backup"
)
WORDS = tuple(_WORD_TEXT.split())

NEEDLE = "zebrafinch"  # occurs in a known fraction of generated text files


def _done_marker(path: Path) -> Path:
    return path.with_name(path.name + ".done")


def _cached(path: Path, params: dict[str, object], build: Callable[[Path], None]) -> Path:
    """Return ``path`` after building it once for ``params`` (a crash mid-build
    leaves no marker, so the next run starts over)."""
    marker = _done_marker(path)
    if marker.exists() and path.exists():
        try:
            if json.loads(marker.read_text()) == params:
                return path
        except (OSError, ValueError):
            pass
    if path.exists():
        shutil.rmtree(path)
    marker.unlink(missing_ok=True)
    path.mkdir(parents=True)
    log.info("generating %s", path.name)
    build(path)
    marker.write_text(json.dumps(params, sort_keys=True))
    return path


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


# -- passthrough data sets


def big_file(root: Path, size: int, seed: int = 1) -> Path:
    """``root/big/data.bin``: ``size`` bytes of pseudo-random data."""
    base = root / f"big-{size}-s{seed}"

    def build(path: Path) -> None:
        rng = random.Random(seed)
        (path / "big").mkdir()
        block = rng.randbytes(MiB)
        with open(path / "big" / "data.bin", "wb") as f:
            left = size
            i = 0
            while left > 0:
                # Vary every block a little so no two blocks are identical.
                chunk = i.to_bytes(8, "little") + block[8:]
                f.write(chunk[: min(left, MiB)])
                left -= MiB
                i += 1

    _cached(base, {"kind": "big", "size": size, "seed": seed}, build)
    return base


def tree_dirs(n_dirs: int) -> list[str]:
    """``n_dirs`` leaf directories under ``tree/``, 100 to a parent."""
    return [f"tree/d{i // 100:03d}/s{i % 100:02d}" for i in range(n_dirs)]


def file_tree(root: Path, n_files: int, n_dirs: int, seed: int = 1) -> Path:
    """``root/tree/...``: ``n_files`` text files of 0.5-3 KiB spread over ``n_dirs``
    leaf directories; about 1 file in 100 contains the word NEEDLE."""
    base = root / f"tree-{n_files}f-{n_dirs}d-s{seed}"

    def build(path: Path) -> None:
        rng = random.Random(seed)
        dirs = tree_dirs(n_dirs)
        for d in dirs:
            (path / d).mkdir(parents=True)
        for i in range(n_files):
            d = dirs[i % n_dirs]
            lines = [sentence(rng, rng.randint(6, 14)) for _ in range(rng.randint(8, 40))]
            if i % 100 == 7:
                lines[rng.randrange(len(lines))] += f" {NEEDLE}"
            (path / d / f"f{i:06d}.txt").write_text("\n".join(lines) + "\n")

    _cached(base, {"kind": "tree", "files": n_files, "dirs": n_dirs, "seed": seed}, build)
    return base


def count_needles(n_files: int) -> int:
    """How many files of ``file_tree(n_files, ...)`` contain NEEDLE."""
    return sum(1 for i in range(n_files) if i % 100 == 7)


# -- workspace data set


@dataclass(frozen=True)
class WorkspaceShape:
    """Share of files by kind, by count; the rest of 1.0 goes to ``other``."""

    xlsx: float = 0.38
    pdf: float = 0.16
    docx: float = 0.12
    pptx: float = 0.07
    code: float = 0.13
    # remaining 0.14: text (md, txt), data (csv, json) and images (png)


KIND_EXT = {
    "xlsx": (".xlsx",),
    "pdf": (".pdf",),
    "docx": (".docx",),
    "pptx": (".pptx",),
    "code": (".py", ".js", ".yaml", ".toml", ".json", ".sh", ".sql"),
    "other": (".md", ".txt", ".csv", ".csv", ".png", ".png"),
}

_PLACEHOLDER = re.compile(rb"QQW(\d{4})")


def _placeholders(n: int, start: int = 0) -> list[str]:
    return [f"QQW{i:04d}" for i in range(start, start + n)]


class _ZipTemplate:
    """An OOXML file made once by its library, re-emitted with new words in place
    of ``QQW0000``-style placeholders: real documents at zip speed."""

    def __init__(self, data: bytes) -> None:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            self.members = [(info, zf.read(info)) for info in zf.infolist()]

    def render(self, rng: random.Random, tag: str) -> bytes:
        def word(m: re.Match[bytes]) -> bytes:
            if m.group(1) == b"0000":
                return tag.encode()
            return sentence(rng, rng.randint(1, 6)).encode()

        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
            for info, data in self.members:
                if info.filename.endswith(".xml") and b"QQW" in data:
                    data = _PLACEHOLDER.sub(word, data)
                zf.writestr(info.filename, data)
        return out.getvalue()


def _xlsx_template(rows: int, *, cached: bool = True) -> _ZipTemplate:
    import openpyxl

    wb = openpyxl.Workbook()
    ws = wb.active
    assert ws is not None
    ws.title = "Data"
    ws.append(["QQW0000", "Item", "Q1", "Q2", "Q3", "Q4", "Total"])
    ph = iter(_placeholders(rows, 1))
    for r in range(2, rows + 2):
        ws.append([next(ph), f"line {r}", r * 10, r * 11, r * 12, r * 13, f"=SUM(C{r}:F{r})"])
    ws.append(["Total", "", f"=SUM(C2:C{rows + 1})", "", "", "", f"=SUM(G2:G{rows + 1})"])
    notes = wb.create_sheet("Notes")
    for i, p in enumerate(_placeholders(5, rows + 1)):
        notes.cell(row=i + 1, column=1, value=p)
    if not cached:
        buf = io.BytesIO()
        wb.save(buf)
        return _ZipTemplate(buf.getvalue())
    # Excel and LibreOffice store each formula's result: so does the data set,
    # and the parse figures measure reading, not formula recomputation.
    from swfs.samples import set_cached_values

    values: dict[tuple[str, str], int] = {
        ("Data", f"G{r}"): r * (10 + 11 + 12 + 13) for r in range(2, rows + 2)
    }
    total = sum(values.values())
    values[("Data", f"C{rows + 2}")] = sum(r * 10 for r in range(2, rows + 2))
    values[("Data", f"G{rows + 2}")] = total
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.xlsx"
        wb.save(path)
        set_cached_values(path, values)
        return _ZipTemplate(path.read_bytes())


def xlsx_without_cached_values(rows: int) -> bytes:
    """A workbook as openpyxl saves it (no formula results): ``rows + 2``
    formulas that a parser has to compute to show their values."""
    return _xlsx_template(rows, cached=False).render(random.Random(0), "recompute")


def _docx_template(paragraphs: int) -> _ZipTemplate:
    import docx

    doc = docx.Document()
    doc.add_heading("QQW0000", level=1)
    for p in _placeholders(paragraphs, 1):
        doc.add_paragraph(p)
    buf = io.BytesIO()
    doc.save(buf)
    return _ZipTemplate(buf.getvalue())


def _pptx_template(slides: int) -> _ZipTemplate:
    import pptx

    prs = pptx.Presentation()
    layout = prs.slide_layouts[1]
    ph = iter(_placeholders(slides * 2, 1))
    for i in range(slides):
        slide = prs.slides.add_slide(layout)
        title = slide.shapes.title
        assert title is not None
        title.text = "QQW0000" if i == 0 else next(ph)
        slide.placeholders[1].text = next(ph)
    buf = io.BytesIO()
    prs.save(buf)
    return _ZipTemplate(buf.getvalue())


def make_pdf(rng: random.Random, pages: int, tag: str, lines_per_page: int = 25) -> bytes:
    import pymupdf

    doc = pymupdf.open()
    for p in range(pages):
        page = doc.new_page()
        text = f"{tag} page {p + 1}\n" + "\n".join(
            sentence(rng, rng.randint(6, 12)) for _ in range(lines_per_page)
        )
        page.insert_text((50, 60), text, fontsize=10)
    data: bytes = doc.tobytes(garbage=0, deflate=True)
    doc.close()
    return data


def _png_variants(n: int) -> list[bytes]:
    import pymupdf

    out = []
    for i in range(n):
        pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 48, 32), False)
        pix.clear_with(40 + i * 7 % 200)
        out.append(pix.tobytes("png"))
    return out


def _code_text(rng: random.Random, ext: str, tag: str) -> str:
    if ext == ".py":
        funcs = "\n\n".join(
            f"def {rng.choice(WORDS)}_{i}(x):\n    # {sentence(rng, 6)}\n    return x * {i}\n"
            for i in range(rng.randint(3, 12))
        )
        return f'"""{tag}: {sentence(rng, 8)}"""\n\n{funcs}'
    if ext == ".js":
        return "\n".join(
            f"export function {rng.choice(WORDS)}{i}(a) {{ return a + {i}; }} // {tag}"
            for i in range(rng.randint(3, 12))
        )
    if ext in (".yaml", ".toml"):
        sep = ": " if ext == ".yaml" else " = "
        return (
            "\n".join(
                f'{rng.choice(WORDS)}_{i}{sep}"{sentence(rng, 3)}"'
                for i in range(rng.randint(5, 20))
            )
            + f'\nid{sep}"{tag}"\n'
        )
    if ext == ".json":
        return json.dumps(
            {"id": tag, "items": [sentence(rng, 4) for _ in range(rng.randint(3, 15))]}, indent=2
        )
    if ext == ".sh":
        return f"#!/bin/sh\n# {tag}\n" + "\n".join(
            f"echo {sentence(rng, 4)}" for _ in range(rng.randint(3, 10))
        )
    return f"-- {tag}\nSELECT {', '.join(rng.sample(WORDS, 4))} FROM t WHERE x > 1;\n"


def _other_bytes(rng: random.Random, ext: str, tag: str, pngs: list[bytes]) -> bytes:
    if ext == ".png":
        return rng.choice(pngs)
    if ext == ".csv":
        rows = [f"id,{','.join(rng.sample(WORDS, 4))}"]
        rows += [
            f"{i},{','.join(str(rng.randint(0, 9999)) for _ in range(4))}"
            for i in range(rng.randint(10, 200))
        ]
        return ("\n".join(rows) + "\n").encode()
    paras = [sentence(rng, rng.randint(10, 40)) for _ in range(rng.randint(3, 20))]
    head = f"# {tag}\n\n" if ext == ".md" else f"{tag}\n\n"
    return (head + "\n\n".join(paras) + "\n").encode()


def workspace_dirs(rng: random.Random, n_dirs: int) -> list[str]:
    """A tree of ``n_dirs`` directories, at most 5 deep, with project-like names."""
    dirs: list[str] = []
    for i in range(n_dirs):
        parents = [d for d in dirs[-200:] if d.count("/") < 4]
        nested = bool(parents) and rng.random() < 0.85
        parent = rng.choice(parents) + "/" if nested else ""
        dirs.append(f"{parent}{rng.choice(WORDS)}-{i:04d}")
    return dirs


def _kinds(n_files: int, shape: WorkspaceShape) -> list[str]:
    shares = asdict(shape)
    kinds: list[str] = []
    for kind, share in shares.items():
        kinds += [kind] * round(n_files * share)
    kinds += ["other"] * (n_files - len(kinds))
    return kinds[:n_files]


def workspace(
    root: Path,
    n_files: int,
    n_dirs: int,
    *,
    seed: int = 1,
    shape: WorkspaceShape | None = None,
) -> Path:
    """A workspace shaped like large real ones (see WorkspaceShape)."""
    shape = shape or WorkspaceShape()
    params: dict[str, object] = {
        "kind": "workspace",
        "files": n_files,
        "dirs": n_dirs,
        "seed": seed,
        "shape": asdict(shape),
        "gen": 2,  # 2: xlsx files carry cached formula results, as Excel writes them
    }
    base = root / f"ws-{n_files}f-{n_dirs}d-s{seed}"

    def build(path: Path) -> None:
        rng = random.Random(seed)
        dirs = workspace_dirs(rng, n_dirs)
        for d in dirs:
            (path / d).mkdir(parents=True, exist_ok=True)
        templates = {
            "xlsx": [_xlsx_template(n) for n in (12, 40, 120)],
            "docx": [_docx_template(n) for n in (6, 20, 60)],
            "pptx": [_pptx_template(n) for n in (3, 8, 15)],
        }
        pngs = _png_variants(16)
        kinds = _kinds(n_files, shape)
        rng.shuffle(kinds)
        for i, kind in enumerate(kinds):
            d = dirs[i % n_dirs] if i < n_dirs else rng.choice(dirs)
            ext = rng.choice(KIND_EXT[kind])
            tag = f"{kind}{i:06d}"
            name = f"{rng.choice(WORDS)}-{i:05d}{ext}"
            if kind in templates:
                data = rng.choice(templates[kind]).render(rng, tag)
            elif kind == "pdf":
                data = make_pdf(rng, rng.randint(1, 4), tag)
            elif kind == "code":
                data = _code_text(rng, ext, tag).encode()
            else:
                data = _other_bytes(rng, ext, tag, pngs)
            (path / d / name).write_bytes(data)

    _cached(base, params, build)
    return base


def iter_files(root: Path) -> Iterator[Path]:
    """Regular files under ``root``, skipping dot directories (stores, synthetic trees)."""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            yield Path(dirpath) / name


def census(root: Path) -> dict[str, int]:
    """Count files by extension (for the smoke test and the report)."""
    counts: dict[str, int] = {}
    for p in iter_files(root):
        ext = p.suffix.lower() or "(none)"
        counts[ext] = counts.get(ext, 0) + 1
    return counts


def count_dirs(root: Path) -> int:
    return sum(len([d for d in dn if not d.startswith(".")]) for _, dn, _ in os.walk(root))


# -- freshness data set


def freshness_set(root: Path, pdf_pages: int = 40, seed: int = 1) -> Path:
    """``edit/sheet.xlsx`` (one sheet of 200 rows with formulas) and
    ``edit/report.pdf`` (``pdf_pages`` pages of text)."""
    base = root / f"fresh-{pdf_pages}p-s{seed}"

    def build(path: Path) -> None:
        import openpyxl

        rng = random.Random(seed)
        (path / "edit").mkdir()
        wb = openpyxl.Workbook()
        ws = wb.active
        assert ws is not None
        ws.title = "Sheet1"
        ws.append(["name", "a", "b", "sum"])
        for r in range(2, 202):
            ws.append([sentence(rng, 2), r, r * 2, f"=B{r}+C{r}"])
        wb.save(path / "edit" / "sheet.xlsx")
        (path / "edit" / "report.pdf").write_bytes(make_pdf(rng, pdf_pages, "report"))

    _cached(base, {"kind": "fresh", "pages": pdf_pages, "seed": seed}, build)
    return base
