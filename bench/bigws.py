"""A large workspace built from real formats, for the ``sandboxes`` workload
(issue 40: "a 20,000-file workspace built from real formats").

Documents come from the repository's own generators: tests/docgen.py,
tests/officegen.py (python-docx, python-pptx), tests/sheetgen.py
(XlsxWriter, and LibreOffice for OpenDocument where ``soffice`` is
installed) and swfs/samples.py.  Each is made once as a template and
replicated with a variation, so that every copy has its own hash (and is
parsed on its own): a word of its text replaced by the file's tag inside
its XML, a fresh PDF carrying the tag, a tagged HTML paragraph or notebook
cell, an Outlook message written per file.  Generated text, code and data
files make up the rest, each carrying its tag.  The development corpus
(``CORPUS_DIR`` relative to the repository root) joins in when present,
its files replicated the same way; it is never required.

Every file's tag (``swfsbench000123``) is a word its parsed view contains,
so a harness can grep for a file it knows.

``python -m bench.bigws DIR --files N`` writes one; ``build`` is cached by
its parameters (``DIR/<key>.done``).
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from bench.gen import WORDS, sentence, workspace_dirs

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
CORPUS_DIR = REPO.parent / "shared" / "corpus"
GEN = 4  # bump when the output changes: cached workspaces are rebuilt

# Share of the files by kind (by count); the rest is text.
SHARES = {
    "docx": 0.09,
    "xlsx": 0.11,
    "pptx": 0.05,
    "pdf": 0.09,
    "html": 0.02,
    "ipynb": 0.01,
    "epub": 0.005,
    "msg": 0.005,
    "odf": 0.005,  # LibreOffice-made .odt/.ods (docx/xlsx without soffice)
    "code": 0.20,
    "data": 0.17,
    "png": 0.03,
    "corpus": 0.05,  # the development corpus, when present (else text)
}
CODE_EXT = (".py", ".js", ".ts", ".go", ".rs", ".java", ".c", ".sh", ".sql", ".toml", ".yaml")
DATA_EXT = (".csv", ".tsv", ".json", ".jsonl", ".xml", ".log")
TEXT_EXT = (".md", ".txt", ".rst")

# Where a word of the text sits in each zip format's main part: the tag is
# put before the first closing tag of a run of text.
_TEXT_TAGS = (
    (b"word/document.xml", b"</w:t>"),
    (b"xl/sharedStrings.xml", b"</t>"),
    (b"ppt/slides/slide1.xml", b"</a:t>"),
    (b"content.xml", b"</text:p>"),
    (b".xhtml", b"</p>"),
)


def tag_of(i: int) -> str:
    return f"swfsbench{i:06d}"


def vary_zip(data: bytes, tag: str) -> bytes:
    """``data`` (a zip: OOXML, OpenDocument, EPUB) with ``tag`` added to its
    text; where no text part is found, in its comment (a new hash still)."""
    out = io.BytesIO()
    placed = False
    with zipfile.ZipFile(io.BytesIO(data)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            body = zin.read(info)
            name = info.filename.encode()
            if not placed:
                for suffix, close in _TEXT_TAGS:
                    if name.endswith(suffix) and close in body:
                        body = body.replace(close, f" {tag}".encode() + close, 1)
                        placed = True
                        break
            zout.writestr(info, body, compress_type=info.compress_type)
        if not placed:
            zout.comment = tag.encode()
    return out.getvalue()


def vary_bytes(data: bytes, ext: str, tag: str) -> bytes | None:
    """A corpus file replicated with ``tag``; None: only the original is used."""
    if data[:2] == b"PK":
        try:
            return vary_zip(data, tag)
        except zipfile.BadZipFile:
            return None
    if ext == ".pdf":
        return data + f"\n%{tag}\n".encode()  # a comment past %%EOF: readers skip it
    if ext in (".md", ".txt", ".csv", ".json", ".html", ".rst"):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if ext == ".json":
            return None
        return data + f"\n{tag}\n".encode()
    return None


def _templates(tmp: Path) -> dict[str, list[tuple[str, bytes]]]:
    """(extension, bytes) templates by kind, made by the repository's generators."""
    sys.path.insert(0, str(REPO))
    from swfs import samples
    from tests import docgen, officegen, sheetgen

    def made(fn: Callable[[Path], Path]) -> bytes:
        d = Path(tempfile.mkdtemp(dir=tmp))
        return fn(d).read_bytes()

    def to(path: Path, fn: Callable[[Path], None]) -> Path:
        fn(path)
        return path

    out: dict[str, list[tuple[str, bytes]]] = {
        "docx": [
            (".docx", made(docgen.rich_docx)),
            (".docx", made(officegen.written_docx)),
            (".docx", made(officegen.raw_docx)),
            (".docx", made(lambda d: to(d / "m.docx", samples.write_memo_docx))),
        ],
        "xlsx": [
            (".xlsx", made(lambda d: sheetgen.excel_like_xlsx(d / "x.xlsx"))),
            (".xlsx", made(lambda d: docgen.simple_xlsx(d, [["item", "q1"], ["north", 12]]))),
            (".xlsx", made(docgen.formula_kinds_xlsx)),
            (".xlsx", made(lambda d: to(d / "b.xlsx", samples.write_budget_xlsx))),
        ],
        "pptx": [
            (".pptx", made(officegen.written_pptx)),
            (".pptx", made(officegen.raw_pptx)),
            (".pptx", made(docgen.layout_pptx)),
            (".pptx", made(lambda d: to(d / "p.pptx", samples.write_pitch_pptx))),
        ],
        "epub": [(".epub", made(docgen.epub_file))],
        "html": [(".html", made(docgen.html_file))],
        "ipynb": [(".ipynb", made(docgen.notebook_file))],
        "report": [(".pdf", made(lambda d: to(d / "r.pdf", samples.write_report_pdf)))],
    }
    odf: list[tuple[str, bytes]] = []
    if sheetgen.SOFFICE is not None:
        for kind, fmt in (("docx", "odt"), ("xlsx", "ods")):
            src = tmp / f"odf-src.{kind}"
            src.write_bytes(out[kind][0][1])
            try:
                odf.append(
                    (f".{fmt}", sheetgen.soffice_convert(src, fmt, tmp / "odf").read_bytes())
                )
            except Exception as exc:  # LibreOffice missing a filter, or slow: no ODF
                log.warning("no %s template: %s", fmt, exc)
    out["odf"] = odf or out["docx"][:1] + out["xlsx"][:1]
    # Only templates whose copies carry their tag in their text (a workbook
    # of inline strings only, for one, would carry it in its zip comment).
    for kind in ("docx", "xlsx", "pptx", "epub", "odf"):
        out[kind] = [(ext, tpl) for ext, tpl in out[kind] if _carries_tag(tpl)] or out[kind]
    return out


def _carries_tag(template: bytes) -> bool:
    with zipfile.ZipFile(io.BytesIO(vary_zip(template, "swfsbenchprobe"))) as z:
        return any(b"swfsbenchprobe" in z.read(n) for n in z.namelist())


def _text(rng: random.Random, ext: str, tag: str) -> bytes:
    paras = [sentence(rng, rng.randint(8, 40)) for _ in range(rng.randint(2, 15))]
    head = f"# {tag}\n\n" if ext == ".md" else f"{tag}\n\n"
    return (head + "\n\n".join(paras) + "\n").encode()


def _code(rng: random.Random, ext: str, tag: str) -> bytes:
    name = rng.choice(WORDS)
    n = rng.randint(3, 15)
    comment = "#" if ext in (".py", ".sh", ".toml", ".yaml") else "--" if ext == ".sql" else "//"
    if ext in (".toml", ".yaml"):
        sep = " = " if ext == ".toml" else ": "
        lines = [f'{rng.choice(WORDS)}_{k}{sep}"{sentence(rng, 3)}"' for k in range(n)]
    elif ext == ".sql":
        lines = [
            f"SELECT {', '.join(rng.sample(WORDS, 3))} FROM t{k} WHERE x > {k};" for k in range(n)
        ]
    elif ext == ".py":
        lines = [
            f"def {name}_{k}(x):\n    return x * {k}  # {sentence(rng, 4)}\n" for k in range(n)
        ]
    else:
        lines = [
            f"function {name}{k}(a) {{ return a + {k}; }} {comment} {sentence(rng, 4)}"
            for k in range(n)
        ]
    return (f"{comment} {tag}\n" + "\n".join(lines) + "\n").encode()


def _data(rng: random.Random, ext: str, tag: str) -> bytes:
    rows = rng.randint(10, 300)
    cols = rng.sample(WORDS, 4)
    if ext in (".csv", ".tsv"):
        sep = "," if ext == ".csv" else "\t"
        body = [sep.join(["id", *cols])]
        body += [
            sep.join([str(r), *(str(rng.randint(0, 99999)) for _ in cols)]) for r in range(rows)
        ]
        body.append(sep.join([tag, *("0" for _ in cols)]))
        return ("\n".join(body) + "\n").encode()
    if ext == ".json":
        return json.dumps(
            {"id": tag, "rows": [dict.fromkeys(cols, r) for r in range(rows)]}
        ).encode()
    if ext == ".jsonl":
        return "".join(
            json.dumps({"id": tag, "n": r, "w": rng.choice(WORDS)}) + "\n" for r in range(rows)
        ).encode()
    if ext == ".xml":
        items = "".join(f"<item n='{r}'>{rng.choice(WORDS)}</item>" for r in range(rows))
        return f"<?xml version='1.0'?><data id='{tag}'>{items}</data>\n".encode()
    return "".join(
        f"2026-12-05T10:{r % 60:02d}:00 INFO {tag} {sentence(rng, 6)}\n" for r in range(rows)
    ).encode()


def _png(i: int, tag: str) -> bytes:
    import pymupdf

    pix = pymupdf.Pixmap(pymupdf.csRGB, pymupdf.IRect(0, 0, 24 + i % 40, 16), False)
    pix.clear_with(i % 251)
    return bytes(pix.tobytes("png"))


def _corpus_files(corpus: Path | None) -> list[Path]:
    if corpus is None or not corpus.is_dir():
        return []
    files = sorted(p for p in corpus.rglob("*") if p.is_file() and not p.is_symlink())
    return [p for p in files if p.stat().st_size <= 32 * 1024 * 1024]


def kinds(n_files: int, with_corpus: bool) -> list[str]:
    out: list[str] = []
    for kind, share in SHARES.items():
        if kind == "corpus" and not with_corpus:
            continue
        out += [kind] * round(n_files * share)
    out += ["text"] * (n_files - len(out))
    return out[:n_files]


def build(
    root: Path,
    n_files: int,
    *,
    seed: int = 1,
    corpus: Path | None = CORPUS_DIR,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """The workspace of ``n_files`` under ``root`` (made once, then reused)."""
    originals = _corpus_files(corpus)
    key = f"bigws-{n_files}f-s{seed}-g{GEN}-c{len(originals)}"
    base = root / key
    done = root / f"{key}.done"
    if done.exists() and base.is_dir():
        return base
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        templates = _templates(Path(tmp))
    from tests import docgen

    dirs = workspace_dirs(rng, max(1, n_files // 60))
    for d in dirs:
        (base / d).mkdir(parents=True, exist_ok=True)
    plan = kinds(n_files, bool(originals))
    rng.shuffle(plan)
    used: dict[str, int] = {}
    t0 = time.monotonic()
    for i, kind in enumerate(plan):
        tag = tag_of(i)
        data: bytes | None = None
        ext = ".txt"
        if kind in ("docx", "xlsx", "pptx", "epub", "odf"):
            ext, tpl = rng.choice(templates[kind])
            data = vary_zip(tpl, tag)
        elif kind == "pdf":
            if rng.random() < 0.2:
                ext, tpl = templates["report"][0]
                data = tpl + f"\n%{tag}\n".encode()
            else:
                pages = rng.randint(1, 6)
                ext = ".pdf"
                data = docgen.pdf_bytes(
                    pages, fact_page=rng.randint(1, pages), fact=f"{tag} {sentence(rng, 8)}"
                )
        elif kind == "html":
            ext, tpl = templates["html"][0]
            data = tpl.replace(b"</body>", f"<p>{tag} {sentence(rng, 10)}</p></body>".encode(), 1)
        elif kind == "ipynb":
            ext, tpl = templates["ipynb"][0]
            nb = json.loads(tpl)
            nb["cells"].append(
                {
                    "cell_type": "markdown",
                    "metadata": {},
                    "source": [f"{tag} {sentence(rng, 10)}\n"],
                }
            )
            data = json.dumps(nb).encode()
        elif kind == "msg":
            ext = ".msg"
            with tempfile.TemporaryDirectory() as d:
                data = docgen.outlook_msg(
                    Path(d), f"{tag} {rng.choice(WORDS)}", "ann@example.com", sentence(rng, 30)
                ).read_bytes()
        elif kind == "code":
            ext = rng.choice(CODE_EXT)
            data = _code(rng, ext, tag)
        elif kind == "data":
            ext = rng.choice(DATA_EXT)
            data = _data(rng, ext, tag)
        elif kind == "png":
            ext, data = ".png", _png(i, tag)
        elif kind == "corpus":
            src = originals[i % len(originals)]
            ext = src.suffix.lower()
            n = used.get(str(src), 0)
            used[str(src)] = n + 1
            raw = src.read_bytes()
            data = raw if n == 0 else vary_bytes(raw, ext, tag)
        if data is None:  # a corpus file that cannot be varied: text instead
            ext = rng.choice(TEXT_EXT)
            data = _text(rng, ext, tag)
        if kind == "text":
            ext = rng.choice(TEXT_EXT)
            data = _text(rng, ext, tag)
        d = dirs[i % len(dirs)]
        (base / d / f"{rng.choice(WORDS)}-{i:05d}{ext}").write_bytes(data)
        if progress is not None and (i % 200 == 0 or i == n_files - 1):
            progress(i + 1, n_files)
    log.info("%s: %d files in %.1f s", base, n_files, time.monotonic() - t0)
    done.write_text(json.dumps({"files": n_files, "seed": seed, "corpus": len(originals)}))
    return base


def census(root: Path) -> dict[str, int]:
    out: dict[str, int] = {}
    for dirpath, _, names in os.walk(root):
        if "/.swfs" in dirpath or dirpath.endswith(".swfs"):
            continue
        for n in names:
            ext = os.path.splitext(n)[1].lower() or "(none)"
            out[ext] = out.get(ext, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def bar(label: str) -> Callable[[int, int], None]:
    """A progress bar on stderr: ``label [#####     ] done/total``."""

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r{label} [{'#' * filled}{' ' * (width - filled)}] {done}/{total}{end}")
        sys.stderr.flush()

    return show


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bigws", description=__doc__.split("\n\n")[0])
    p.add_argument("dir", type=Path)
    p.add_argument("--files", type=int, default=20_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--no-corpus", action="store_true")
    args = p.parse_args(argv)
    base = build(
        args.dir,
        args.files,
        seed=args.seed,
        corpus=None if args.no_corpus else CORPUS_DIR,
        progress=bar("generating"),
    )
    print(base)
    print(json.dumps(census(base)))


if __name__ == "__main__":
    main()
