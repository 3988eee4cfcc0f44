"""Legacy office files through LibreOffice: kept warm against one-shot.

LibreOffice writes a set of small documents of every legacy format swfs
converts (``.doc``, ``.ppt``, ``.rtf``, ``.odt``, ``.odp``); each round,
in one fresh process per path, they are parsed through the registry
(``parsers.registry.parse``, as a parse child does) with the one-shot path
(``SWFS_SOFFICE_WARM=off``: one ``soffice --convert-to`` per file) and with
one LibreOffice kept warm (its start counted in).  Metrics:

* ``legacy_files_per_s_warm`` / ``legacy_files_per_s_oneshot``, and the
  same after the first file (``*_warm_started``: the instance is up, as in
  a parse child that converted before; ``*_oneshot_after_first``);
* ``first_render_warm`` / ``first_render_oneshot``: the first office file
  converted to PDF in a fresh process (what ``.render`` does first:
  ``swfs.find.render._convert``), and ``next_render_*`` a second one.

``info`` has the speed-up and whether every file's text is the same on
both paths (``same_text``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from bench.common import Ctx
from bench.mounter import BenchError, Unsupported
from bench.report import ABSOLUTE, WorkloadResult

_FORMATS = ("doc", "rtf", "odt", "ppt", "odp")


def _make(folder: Path, count: int) -> list[Path]:
    """``count`` distinct documents per format, written by LibreOffice."""
    import docx
    import pptx

    made = folder / "made"
    made.mkdir()
    for n in range(count):
        document = docx.Document()
        document.add_heading(f"Quarterly review {n}", 1)
        for p in range(20):
            document.add_paragraph(
                f"Paragraph {p} of report {n}: revenue rose {n * 7 + p} percent."
            )
        table = document.add_table(rows=3, cols=3)
        for i, cell in enumerate(table._cells):
            cell.text = f"r{n}c{i}"
        document.save(str(made / f"report{n}.docx"))
        deck = pptx.Presentation()
        for s in range(4):
            slide = deck.slides.add_slide(deck.slide_layouts[1])
            slide.shapes.title.text = f"Deck {n} slide {s}"
            slide.placeholders[1].text = f"Budget {n * 100 + s} units"
        deck.save(str(made / f"deck{n}.pptx"))
    out = folder / "files"
    out.mkdir()
    profile = (folder / "profile").as_uri()
    texts = sorted(made.glob("report*.docx"))
    decks = sorted(made.glob("deck*.pptx"))
    for fmt, sources in (("odt", texts), ("odp", decks)):
        _convert(profile, fmt, sources, out)
    for fmt, made_as in (("doc", "odt"), ("rtf", "odt"), ("ppt", "odp")):
        _convert(profile, fmt, sorted(out.glob(f"*.{made_as}")), out)
    files = sorted(p for p in out.iterdir() if p.suffix[1:] in _FORMATS)
    if len(files) != count * len(_FORMATS):
        raise BenchError(f"LibreOffice made {len(files)} of {count * len(_FORMATS)} files")
    return files


def _convert(profile: str, fmt: str, sources: list[Path], out: Path) -> None:
    subprocess.run(
        [
            "soffice",
            f"-env:UserInstallation={profile}",
            "--headless",
            "--convert-to",
            fmt,
            "--outdir",
            str(out),
            *map(str, sources),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )


# The measuring process: a fresh one per path, so the first conversion pays
# for starting LibreOffice as a fresh parse child does.
_CHILD = r"""
import json, sys, time
from parsers import registry, soffice
from parsers._base import ParseOptions
from swfs.find import render

files, renders = json.loads(sys.argv[1]), json.loads(sys.argv[2])
texts = {}
t0 = time.perf_counter()
first_s = 0.0
for path in files:
    info = registry.file_info(path, path.rsplit("/", 1)[-1])
    _, units = registry.parse(path, info, ParseOptions())
    texts[path] = [[u.name, u.text] for u in units]
    first_s = first_s or time.perf_counter() - t0
parse_s = time.perf_counter() - t0
soffice.stop_warm()
times = []
for path in renders:
    ext = "." + path.rsplit(".", 1)[-1]
    t = time.perf_counter()
    render._convert(path, render.ROUTES[ext], ext)
    times.append(time.perf_counter() - t)
soffice.stop_warm()
print(json.dumps({"parse_s": parse_s, "first_s": first_s, "texts": texts, "renders": times,
                  "instances": soffice.instances}))
"""


def _measure(files: list[Path], renders: list[Path], warm: bool) -> dict[str, object]:
    env = dict(os.environ, SWFS_SOFFICE_WARM="on" if warm else "off")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            json.dumps([str(p) for p in files]),
            json.dumps([str(p) for p in renders]),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
        cwd=Path(__file__).resolve().parent.parent,
    )
    if done.returncode != 0:
        raise BenchError(f"legacy measurement failed: {done.stderr.strip()[-400:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def legacy(ctx: Ctx, result: WorkloadResult) -> None:
    if shutil.which("soffice") is None:
        raise Unsupported("needs LibreOffice (soffice)")
    per_format = 2 if ctx.quick else 6
    files = _make(ctx.scratch("legacy"), per_format)
    renders = [
        next(p for p in files if p.suffix == ".ppt"),
        next(p for p in files if p.suffix == ".doc"),
    ]
    metrics = {
        name: result.metric(name, unit, kind=ABSOLUTE)
        for name, unit in (
            ("legacy_files_per_s_warm", "files/s"),
            ("legacy_files_per_s_oneshot", "files/s"),
            ("legacy_files_per_s_warm_started", "files/s"),
            ("legacy_files_per_s_oneshot_after_first", "files/s"),
            ("first_render_warm", "s"),
            ("first_render_oneshot", "s"),
            ("next_render_warm", "s"),
            ("next_render_oneshot", "s"),
        )
    }
    same = True
    instances = 0
    # One-shot conversions take seconds each: two rounds at most.
    for _ in range(1 if ctx.quick else min(ctx.rounds, 2)):
        cold = _measure(files, renders, warm=False)
        hot = _measure(files, renders, warm=True)
        same = same and cold["texts"] == hot["texts"]
        instances = max(instances, int(str(hot["instances"])))
        for key, got in (("oneshot", cold), ("warm", hot)):
            seconds = float(str(got["parse_s"]))
            times = [float(t) for t in got["renders"]]  # type: ignore[attr-defined]
            metrics[f"legacy_files_per_s_{key}"].values.append(len(files) / seconds)
            after_first = (len(files) - 1) / (seconds - float(str(got["first_s"])))
            later = "warm_started" if key == "warm" else "oneshot_after_first"
            metrics[f"legacy_files_per_s_{later}"].values.append(after_first)
            metrics[f"first_render_{key}"].values.append(times[0])
            metrics[f"next_render_{key}"].values.append(times[1])
    warm_rate = min(metrics["legacy_files_per_s_warm"].values)
    cold_rate = max(metrics["legacy_files_per_s_oneshot"].values)
    started = min(metrics["legacy_files_per_s_warm_started"].values)
    cold_after = max(metrics["legacy_files_per_s_oneshot_after_first"].values)
    result.info.update(
        files=len(files),
        formats=list(_FORMATS),
        same_text=same,
        speedup=round(warm_rate / cold_rate, 1),
        speedup_once_started=round(started / cold_after, 1),
        warm_instances=instances,
    )
    if not same:
        raise BenchError("the warm path gave other text than the one-shot path")


WORKLOADS = {"legacy": legacy}
